//! Serde over a YAML [`Value`] that knows where each value is written, so that typed fields
//! ([`Spanned`]) keep their place and one bad value hides no other.
//!
//! [`read`] deserializes a `T` from a value at a key path (`["sources", "gen", "rate"]`). On
//! the way down it keeps the path, so that:
//! - a [`Spanned<T>`] field knows its path, and when its `T` fails (a wrong type, a value out
//!   of range, an unknown enum value) the failure is kept as a [`Fault`] at that path and the
//!   field is `None`: the struct around it is still read, and every fault comes out at once;
//! - a mapping read as a struct reports each key the struct does not have as a fault of its
//!   own ([`FaultKind::UnknownField`], with the struct's fields), instead of serde's first-only
//!   error, and reads the rest.
//!
//! Faults are told in the words serde's visitors give ([`FaultKind::Expected`] is a visitor's
//! `expecting`, [`FaultKind::Message`] a `custom` error) with a description of the value found
//! ([`crate::yaml::describe`]); the path turns into a line and column through
//! [`crate::locate::SourceMap`], which indexes every key. Every field of a struct read here is
//! a [`Spanned`] (or an `Option` of a struct that is, for a section that may be `null`), since
//! a failure elsewhere would end the reading of the struct.
//!
//! The name serde gives a struct is what a fault says it expects when the value is not a
//! mapping: `#[serde(rename = "a mapping with interval, …")]`. A struct named otherwise is
//! handed scalars too, for its own visitor to take or refuse (`watermarks: true`).

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{SeqDeserializer, StrDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess};
use serde::de::{Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde_yaml_ng::{Mapping, Value};

use crate::yaml::{describe, key_text, BIG_NUMBER_TAG};

/// The struct name a [`Spanned`] asks [`At`] for: the path, then the value.
const SPANNED: &str = "$tidemark::Spanned";

/// What is wrong with a value, in the words of the type that read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FaultKind {
    /// Not the kind of value wanted; what is wanted (`"true or false"`).
    Expected(String),
    /// A value of the right kind that is not valid: what is wrong and what is expected.
    Message(String),
    /// A name outside an enum's (`partition: hsah`).
    UnknownVariant {
        /// As written.
        value: String,
        /// The enum's names.
        expected: &'static [&'static str],
    },
    /// A key the struct read from this mapping does not have (the path ends with it; empty
    /// for a key that is not text).
    UnknownField {
        /// As written.
        field: String,
        /// The struct's fields.
        expected: &'static [&'static str],
    },
    /// A struct written as something other than a mapping.
    NotAMapping {
        /// What is expected (the struct's serde name).
        what: &'static str,
    },
    /// A key of the job file's top level that is not text.
    KeyNotText,
}

/// A problem with the value at `path`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    /// The keys down to the value (or to the unknown key).
    pub path: Vec<String>,
    /// What is wrong.
    pub kind: FaultKind,
    /// The value found, described (`the string "x"`, `a list`).
    pub found: String,
}

/// The error of [`At`]: a fault on its way up to the [`Spanned`] that keeps it, with the
/// value found where it arose.
#[derive(Debug)]
pub(crate) struct Error {
    kind: FaultKind,
    found: Option<String>,
}

impl Error {
    fn new(kind: FaultKind) -> Self {
        Error { kind, found: None }
    }

    /// Notes `value` as what was found, unless a deeper value was.
    fn found(mut self, value: &Value) -> Self {
        self.found.get_or_insert_with(|| describe(value));
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FaultKind::Expected(e) => write!(f, "expected {e}"),
            FaultKind::Message(m) => f.write_str(m),
            FaultKind::UnknownVariant { value, .. } => write!(f, "unknown value \"{value}\""),
            FaultKind::UnknownField { field, .. } => write!(f, "unknown field \"{field}\""),
            FaultKind::NotAMapping { what } => write!(f, "expected {what}"),
            FaultKind::KeyNotText => f.write_str("expected a field name"),
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::new(FaultKind::Message(msg.to_string()))
    }

    fn invalid_type(_: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Error::new(FaultKind::Expected(expected.to_string()))
    }

    fn invalid_value(_: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Error::new(FaultKind::Expected(expected.to_string()))
    }

    fn invalid_length(_: usize, expected: &dyn de::Expected) -> Self {
        Error::new(FaultKind::Expected(expected.to_string()))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Error::new(FaultKind::UnknownVariant {
            value: variant.to_owned(),
            expected,
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Error::new(FaultKind::UnknownField {
            field: field.to_owned(),
            expected,
        })
    }
}

/// Reads a `T` from `value`, written at `path`, keeping each fault in `faults`. Fails only
/// where a `T` cannot be made at all: a struct whose fields are all [`Spanned`] always can.
pub(crate) fn read<T: de::DeserializeOwned>(
    value: &Value,
    path: &[String],
    faults: &RefCell<Vec<Fault>>,
) -> Option<T> {
    let at = At {
        value,
        path: path.to_vec(),
        faults,
    };
    T::deserialize(at)
        .map_err(|e| at_fault(faults, path.to_vec(), e, value))
        .ok()
}

fn at_fault(faults: &RefCell<Vec<Fault>>, path: Vec<String>, e: Error, value: &Value) {
    let e = e.found(value);
    faults.borrow_mut().push(Fault {
        path,
        kind: e.kind,
        found: e.found.unwrap_or_default(),
    });
}

/// A field's value with the path it is written at: `None` where the field is absent or its
/// value is not a `T` (then [`read`] has the fault). Read only through [`read`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spanned<T> {
    /// The keys down to the field; empty where it is absent.
    pub path: Vec<String>,
    /// The value, if it was written and is a `T`.
    pub value: Option<T>,
    /// Whether the field is written (whatever its value).
    pub written: bool,
}

impl<T> Default for Spanned<T> {
    fn default() -> Self {
        Spanned {
            path: Vec::new(),
            value: None,
            written: false,
        }
    }
}

impl<T> Spanned<T> {
    /// The path as `&str`s, for a position or an error.
    pub fn at(&self) -> Vec<&str> {
        self.path.iter().map(String::as_str).collect()
    }
}

impl<'de, T: de::Deserialize<'de>> de::Deserialize<'de> for Spanned<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SpannedVisitor<T>(PhantomData<T>);

        impl<'de, T: de::Deserialize<'de>> Visitor<'de> for SpannedVisitor<T> {
            type Value = Spanned<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a job-file value")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Spanned<T>, A::Error> {
                let mut spanned = Spanned {
                    written: true,
                    ..Spanned::default()
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "path" => spanned.path = map.next_value()?,
                        // The fault, if any, is kept by the map: see `SpannedAccess`.
                        _ => spanned.value = map.next_value().ok(),
                    }
                }
                Ok(spanned)
            }
        }

        d.deserialize_struct(SPANNED, &["path", "value"], SpannedVisitor(PhantomData))
    }
}

/// A value at a path: the deserializer of this module.
struct At<'a> {
    value: &'a Value,
    path: Vec<String>,
    faults: &'a RefCell<Vec<Fault>>,
}

impl<'a> At<'a> {
    fn child(&self, value: &'a Value, key: Option<&str>) -> At<'a> {
        let mut path = self.path.clone();
        path.extend(key.map(str::to_owned));
        At {
            value,
            path,
            faults: self.faults,
        }
    }
}

impl<'de> Deserializer<'de> for At<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let value = self.value;
        let result = match value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => visitor.visit_u64(u),
                (None, Some(i)) => visitor.visit_i64(i),
                _ => visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => visitor.visit_str(s),
            Value::Sequence(items) => visitor.visit_seq(Items {
                items: items.iter(),
                at: &self,
            }),
            Value::Mapping(m) => visitor.visit_map(Entries::all(m, &self)),
            Value::Tagged(t) if t.tag == BIG_NUMBER_TAG => match &t.value {
                Value::String(digits) if digits.starts_with('-') => match digits.parse() {
                    Ok(i) => visitor.visit_i128(i),
                    Err(_) => Err(de::Error::invalid_type(
                        Unexpected::Other("number"),
                        &visitor,
                    )),
                },
                Value::String(digits) => match digits.parse() {
                    Ok(u) => visitor.visit_u128(u),
                    Err(_) => Err(de::Error::invalid_type(
                        Unexpected::Other("number"),
                        &visitor,
                    )),
                },
                _ => Err(de::Error::invalid_type(
                    Unexpected::Other("number"),
                    &visitor,
                )),
            },
            Value::Tagged(_) => Err(de::Error::invalid_type(
                Unexpected::Other("tagged value"),
                &visitor,
            )),
        };
        result.map_err(|e| e.found(value))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let value = self.value;
        let result = match value {
            _ if name == SPANNED => visitor.visit_map(SpannedAccess {
                at: Some(self),
                path: None,
            }),
            Value::Mapping(m) => visitor.visit_map(Entries::of_struct(m, fields, &self)),
            _ if name.starts_with("a mapping") => {
                Err(Error::new(FaultKind::NotAMapping { what: name }))
            }
            _ => self.deserialize_any(visitor),
        };
        result.map_err(|e| e.found(value))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Value::String(s) => {
                let name: StrDeserializer<'_, Error> = s.as_str().into_deserializer();
                visitor.visit_enum(name)
            }
            other => Err(Error::new(FaultKind::Expected(format!(
                "one of {}",
                variants.join(", ")
            )))
            .found(other)),
        }
    }

    /// A whole number is looked for under a tag too (`!n 3`), as [`Value::as_u64`] does.
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Tagged(t) if t.tag != BIG_NUMBER_TAG && t.value.is_u64() => {
                let value = self.value;
                self.child(&t.value, None)
                    .deserialize_any(visitor)
                    .map_err(|e| Error {
                        found: Some(describe(value)),
                        ..e
                    })
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier
    }
}

/// The items of a sequence: each at the sequence's own path (positions are of keys).
struct Items<'a, 'b> {
    items: std::slice::Iter<'a, Value>,
    at: &'b At<'a>,
}

impl<'de> SeqAccess<'de> for Items<'_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            Some(item) => seed.deserialize(self.at.child(item, None)).map(Some),
            None => Ok(None),
        }
    }
}

/// The entries of a mapping, each value at its key's path. Read as a struct, only the keys
/// the struct has are given to it; each other key is a fault (at the top level, keys starting
/// with `x-` are ignored, so YAML anchors can live there).
struct Entries<'a, 'b> {
    entries: Vec<(String, &'a Value)>,
    next: usize,
    at: &'b At<'a>,
}

impl<'a, 'b> Entries<'a, 'b> {
    fn all(m: &'a Mapping, at: &'b At<'a>) -> Self {
        let entries = m
            .iter()
            .map(|(k, v)| (key_text(k).unwrap_or_default(), v))
            .collect();
        Entries {
            entries,
            next: 0,
            at,
        }
    }

    fn of_struct(m: &'a Mapping, fields: &'static [&'static str], at: &'b At<'a>) -> Self {
        let top = at.path.is_empty();
        let mut entries = Vec::new();
        for (k, v) in m {
            let (field, kind) = match key_text(k) {
                Some(key) if fields.contains(&key.as_str()) => {
                    entries.push((key, v));
                    continue;
                }
                Some(key) if top && key.starts_with("x-") => continue,
                None if top => (None, FaultKind::KeyNotText),
                key => {
                    let field = key.unwrap_or_default();
                    let kind = FaultKind::UnknownField {
                        field: field.clone(),
                        expected: fields,
                    };
                    (Some(field), kind)
                }
            };
            let mut path = at.path.clone();
            path.extend(field);
            at.faults.borrow_mut().push(Fault {
                path,
                kind,
                found: describe(k),
            });
        }
        Entries {
            entries,
            next: 0,
            at,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, _)) = self.entries.get(self.next) else {
            return Ok(None);
        };
        let key: StrDeserializer<'_, Error> = key.as_str().into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (key, value) = &self.entries[self.next];
        self.next += 1;
        seed.deserialize(self.at.child(value, Some(key)))
    }
}

/// What [`At`] gives a [`Spanned`]: its path, then its value, whose fault it keeps.
struct SpannedAccess<'a> {
    at: Option<At<'a>>,
    path: Option<Vec<String>>,
}

impl<'de> MapAccess<'de> for SpannedAccess<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let key = match (&self.at, &self.path) {
            (Some(_), None) => "path",
            (Some(_), Some(_)) => "value",
            (None, _) => return Ok(None),
        };
        let key: StrDeserializer<'_, Error> = key.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some(at) = self.at.take() else {
            return Err(de::Error::custom("no value left"));
        };
        if self.path.is_none() {
            let path = at.path.clone();
            self.at = Some(at);
            self.path = Some(path.clone());
            return seed.deserialize(SeqDeserializer::new(path.into_iter()));
        }
        let (value, path, faults) = (at.value, at.path.clone(), at.faults);
        seed.deserialize(at).map_err(|e| {
            at_fault(faults, path, e, value);
            // Kept: the `Spanned` takes this as "no value".
            Error::new(FaultKind::Message(String::new()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Default, Deserialize)]
    #[serde(default, rename = "a mapping with count, on")]
    struct Settings {
        count: Spanned<u32>,
        on: Spanned<bool>,
        inner: Spanned<Option<Inner>>,
    }

    #[derive(Default, Deserialize)]
    #[serde(default, rename = "a mapping with level")]
    struct Inner {
        level: Spanned<u8>,
    }

    fn read_text(text: &str) -> (Option<Settings>, Vec<Fault>) {
        let value: Value = serde_yaml_ng::from_str(text).unwrap();
        let faults = RefCell::default();
        let path = ["job".to_owned()];
        let settings = read::<Settings>(&value, &path, &faults);
        (settings, faults.into_inner())
    }

    #[test]
    fn every_fault_is_kept_at_its_path_and_the_rest_is_read() {
        let (settings, faults) =
            read_text("count: many\non: true\ninner: {level: 300, lvel: 1}\nx: 1\n");
        let settings = settings.unwrap();
        assert_eq!(settings.on.value, Some(true));
        assert_eq!(settings.on.path, ["job", "on"]);
        assert!(settings.count.written && settings.count.value.is_none());
        assert!(!Settings::default().count.written);
        let found: Vec<(Vec<String>, &FaultKind, &str)> = faults
            .iter()
            .map(|f| (f.path.clone(), &f.kind, f.found.as_str()))
            .collect();
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            found,
            [
                (
                    path(&["job", "x"]),
                    &FaultKind::UnknownField {
                        field: "x".into(),
                        expected: &["count", "on", "inner"]
                    },
                    "the string \"x\""
                ),
                (
                    path(&["job", "count"]),
                    &FaultKind::Expected("u32".into()),
                    "the string \"many\""
                ),
                (
                    path(&["job", "inner", "lvel"]),
                    &FaultKind::UnknownField {
                        field: "lvel".into(),
                        expected: &["level"]
                    },
                    "the string \"lvel\""
                ),
                (
                    path(&["job", "inner", "level"]),
                    &FaultKind::Expected("u8".into()),
                    "the number 300"
                ),
            ]
        );
    }

    #[test]
    fn a_struct_written_as_a_scalar_is_not_a_mapping() {
        let (settings, faults) = read_text("inner: 5\n");
        assert!(settings.unwrap().inner.value.is_none());
        assert_eq!(
            faults,
            [Fault {
                path: vec!["job".into(), "inner".into()],
                kind: FaultKind::NotAMapping {
                    what: "a mapping with level"
                },
                found: "the number 5".into(),
            }]
        );
        // `null` is an absent section.
        let (settings, faults) = read_text("inner:\n");
        assert!(faults.is_empty(), "{faults:?}");
        let inner = settings.unwrap().inner;
        assert!(inner.written && matches!(inner.value, Some(None)));
    }
}
