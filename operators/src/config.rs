//! Settings shared by several components, and the serde helpers their config structs use.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::time::Duration;
use tidemark_runtime::TimestampType;

use crate::error::{ConfigError, FieldError, SettingProblem};
use serde_value::DeserializerError;

/// Which timestamp a source gives its records (Kafka KIP-32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timestamps {
    /// Where the event was made: the generator's schedule (or poll time), a line's `timestamp`
    /// field.
    #[default]
    Create,
    /// When the source read the record.
    Ingestion,
}

impl Timestamps {
    /// The runtime's [`TimestampType`] for this choice.
    pub fn timestamp_type(self) -> TimestampType {
        match self {
            Timestamps::Create => TimestampType::Create,
            Timestamps::Ingestion => TimestampType::Ingestion,
        }
    }
}

/// What a source does with a line it cannot parse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Fail the job, naming the input, the line and what was expected.
    #[default]
    Fail,
    /// Skip the line and count it in `tidemark_source_malformed_records_total`.
    Skip,
}

/// The aggregate `reduce` and `window` compute over the values of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// The number of records.
    Count,
    /// The sum of the values.
    Sum,
    /// The smallest value (NaN values are ignored unless every value is NaN).
    Min,
    /// The largest value (NaN values are ignored unless every value is NaN).
    Max,
    /// The arithmetic mean of the values.
    Mean,
}

impl Aggregate {
    /// The name used in job files.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Count => "count",
            Aggregate::Sum => "sum",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Mean => "mean",
        }
    }
}

/// Deserializes a component's settings into its config struct `T`, reporting every problem
/// found, each with its field path; see [`parse_settings`].
pub(crate) fn parse<T: DeserializeOwned>(
    type_name: &str,
    config: serde_json::Value,
) -> Result<T, ConfigError> {
    parse_settings(type_name, config)
}

/// Deserializes `config` (a component's settings) into `T`, for components of your own.
///
/// `null` counts as an empty mapping, so a component without settings can be given none.
/// Every problem comes back structured, each at its field path ([`FieldError`]): an unknown
/// field with the accepted ones, an unknown value with the accepted ones, a missing field, or a
/// message. After a problem in one field the others are still checked, so a settings mapping
/// with three bad fields gives three problems.
pub fn parse_settings<T: DeserializeOwned>(
    type_name: &str,
    config: serde_json::Value,
) -> Result<T, ConfigError> {
    let mut map = match config {
        serde_json::Value::Null => serde_json::Map::new(),
        serde_json::Value::Object(map) => map,
        other => {
            return Err(ConfigError::invalid(
                type_name,
                FieldError::new(
                    "",
                    format!(
                        "expected a mapping of settings, found {}",
                        json_kind(&other)
                    ),
                ),
            ))
        }
    };
    let mut problems: Vec<FieldError> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    loop {
        let value = serde_value::to_value(serde_json::Value::Object(map.clone()))
            .expect("JSON converts to a serde value");
        let de = serde_value::ValueDeserializer::<serde_value::DeserializerError>::new(value);
        let e = match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(t) if problems.is_empty() => return Ok(t),
            Ok(_) => break,
            Err(e) => e,
        };
        let mut path: Vec<String> = e
            .path()
            .iter()
            .filter_map(|seg| match seg {
                serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let problem = match e.into_inner() {
            DeserializerError::UnknownField(field, expected) => {
                if path.last() == Some(&field) {
                    path.pop();
                }
                SettingProblem::UnknownField {
                    field,
                    expected: expected.iter().map(|s| s.to_string()).collect(),
                }
            }
            DeserializerError::UnknownVariant(value, expected) => SettingProblem::UnknownValue {
                value,
                expected: expected.iter().map(|s| s.to_string()).collect(),
            },
            DeserializerError::MissingField(field) => {
                if path.is_empty() && removed.iter().any(|r| r == field) {
                    // Missing because an earlier problem took it out.
                    break;
                }
                SettingProblem::MissingField(field.to_owned())
            }
            DeserializerError::InvalidType(found, expected) => SettingProblem::Message(format!(
                "invalid type: {}, expected {expected}",
                found.to_unexpected()
            )),
            DeserializerError::InvalidValue(found, expected) => SettingProblem::Message(format!(
                "invalid value: {}, expected {expected}",
                found.to_unexpected()
            )),
            DeserializerError::InvalidLength(n, expected) => {
                SettingProblem::Message(format!("invalid length {n}, expected {expected}"))
            }
            DeserializerError::DuplicateField(field) => {
                SettingProblem::Message(format!("duplicate field `{field}`"))
            }
            DeserializerError::Custom(message) => SettingProblem::Message(message),
        };
        let top = match &problem {
            SettingProblem::UnknownField { field, .. } if path.is_empty() => Some(field.clone()),
            _ => path.first().cloned(),
        };
        problems.push(FieldError { path, problem });
        // Take the offending field out and look again for problems elsewhere.
        match top {
            Some(key) if map.remove(&key).is_some() => removed.push(key),
            _ => break,
        }
    }
    Err(ConfigError::Invalid {
        type_name: type_name.to_owned(),
        problems,
    })
}

/// A [`ConfigError::Invalid`] of `type_name` about the field at the dotted `path` (`""` for
/// the settings as a whole).
pub(crate) fn invalid(type_name: &str, path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::invalid(type_name, FieldError::new(path, message))
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "nothing",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a mapping",
    }
}

/// Serde helpers for durations written as `"2us"`, `"1s"`, `"200ms"` or a bare number of
/// milliseconds, parsed by [`tidemark_markers::parse_duration`] so errors read the same
/// everywhere.
pub(crate) mod duration {
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;
    use std::time::Duration;

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration like 200ms, 1s, 5us, or a number of milliseconds")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            tidemark_markers::parse_duration(v).map_err(E::custom)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            self.visit_str(&v.to_string())
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            self.visit_str(&v.to_string())
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
            self.visit_str(&v.to_string())
        }
    }

    /// A required or defaulted duration.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    /// An optional duration: absent or `null` is `None`.
    pub(crate) fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        struct OptionVisitor;
        impl<'de> Visitor<'de> for OptionVisitor {
            type Value = Option<Duration>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                DurationVisitor.expecting(f)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                deserialize(d).map(Some)
            }
        }
        d.deserialize_option(OptionVisitor)
    }
}

/// Nanoseconds in a [`Duration`], saturating at `i64::MAX`.
pub(crate) fn nanos_i64(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Example {
        #[serde(with = "duration")]
        cost: Duration,
        #[serde(default, deserialize_with = "duration::option")]
        limit: Option<Duration>,
    }

    #[test]
    fn durations_from_strings_and_numbers() {
        let e: Example = parse("x", json!({"cost": "2us", "limit": 250})).unwrap();
        assert_eq!(e.cost, Duration::from_micros(2));
        assert_eq!(e.limit, Some(Duration::from_millis(250)));
        let e: Example = parse("x", json!({"cost": 1.5})).unwrap();
        assert_eq!(e.cost, Duration::from_micros(1500));
        assert_eq!(e.limit, None);
        let e: Example = parse("x", json!({"cost": "0", "limit": null})).unwrap();
        assert_eq!((e.cost, e.limit), (Duration::ZERO, None));
    }

    #[test]
    fn bad_durations_name_the_field_and_the_value() {
        let err = parse::<Example>("x", json!({"cost": "fast"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cost"), "{err}");
        assert!(err.contains("invalid duration \"fast\""), "{err}");
        let err = parse::<Example>("x", json!({"cost": "1s", "limit": -5}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("limit") && err.contains("\"-5\""), "{err}");
        assert!(err.contains("cannot be negative"), "{err}");
    }

    #[test]
    fn settings_must_be_a_mapping() {
        let err = parse::<Example>("x", json!([1])).unwrap_err().to_string();
        assert!(
            err.contains("expected a mapping of settings, found a list"),
            "{err}"
        );
    }
}
