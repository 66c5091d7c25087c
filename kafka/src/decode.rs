//! Kafka messages → records: the `format` of the value, the key and the timestamp.

use rdkafka::message::Timestamp;
use serde::Deserialize;
use std::sync::Arc;

use tidemark_runtime::{Map, Record, TimestampType, Value};

/// How a message's value is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A JSON object.
    #[default]
    Json,
    /// UTF-8 text.
    Text,
}

/// Where the record's key and timestamp come from.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    /// The value's format.
    pub format: Format,
    /// A top-level field of a JSON value holding the key; `None`: the message key.
    pub key_field: Option<String>,
    /// A top-level field of a JSON value holding the timestamp in ms; `None`: the message's.
    pub timestamp_field: Option<String>,
}

/// A message that does not fit `format`.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

const NANOS_PER_MS: i64 = 1_000_000;

impl Decoder {
    /// Turns one message into a record. `now_nanos` stamps messages without a timestamp.
    pub fn decode(
        &self,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        timestamp: Timestamp,
        now_nanos: i64,
    ) -> Result<Record, Malformed> {
        let (mut ts, mut ts_type) = match timestamp {
            Timestamp::CreateTime(ms) => (ms.saturating_mul(NANOS_PER_MS), TimestampType::Create),
            Timestamp::LogAppendTime(ms) => {
                (ms.saturating_mul(NANOS_PER_MS), TimestampType::LogAppend)
            }
            Timestamp::NotAvailable => (now_nanos, TimestampType::Ingestion),
        };
        let payload = payload.unwrap_or_default();
        let mut record_key = key.map(key_of).unwrap_or(Value::Null);
        let event = match self.format {
            Format::Text => {
                let text = std::str::from_utf8(payload)
                    .map_err(|e| Malformed(format!("value is not UTF-8 text: {e}")))?;
                let mut m = Map::with_capacity(1);
                m.push_unchecked("message", text);
                m
            }
            Format::Json => match Value::from_json(payload) {
                Ok(Value::Map(m)) => Arc::unwrap_or_clone(m),
                Ok(other) => {
                    return Err(Malformed(format!(
                        "value is not a JSON object: found a {}",
                        other.type_name()
                    )))
                }
                Err(e) => return Err(Malformed(format!("value is not a JSON object: {e}"))),
            },
        };
        if let Some(field) = &self.key_field {
            record_key = match event.get(field) {
                Some(v) => v.clone(),
                None => return Err(Malformed(format!("no field `{field}` for the key"))),
            };
        }
        if let Some(field) = &self.timestamp_field {
            match event.get(field).and_then(Value::as_f64) {
                Some(ms) => {
                    ts = (ms * NANOS_PER_MS as f64) as i64;
                    ts_type = TimestampType::Create;
                }
                None => {
                    return Err(Malformed(format!(
                        "no numeric field `{field}` (ms since the epoch) for the timestamp"
                    )))
                }
            }
        }
        Ok(Record::with_event(record_key, event, ts).with_timestamp_type(ts_type))
    }
}

/// A message key as the record's key: a decimal integer as an int, other bytes as a string
/// (invalid UTF-8 replaced).
pub fn key_of(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    match text.parse::<i64>() {
        Ok(n) => Value::Int(n),
        Err(_) => Value::from(text.into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_keys_and_timestamps() {
        let d = Decoder::default();
        let r = d
            .decode(
                Some(b"42"),
                Some(br#"{"value": 2.5}"#),
                Timestamp::CreateTime(1000),
                7,
            )
            .unwrap();
        assert_eq!(
            (
                r.key().into_owned(),
                r.numeric_value(),
                r.timestamp,
                r.timestamp_type
            ),
            (
                Value::Int(42),
                Some(2.5),
                1_000_000_000,
                TimestampType::Create
            )
        );
        let r = d
            .decode(None, Some(b"{}"), Timestamp::LogAppendTime(5), 7)
            .unwrap();
        assert_eq!(
            (r.key().into_owned(), r.timestamp_type),
            (Value::Null, TimestampType::LogAppend)
        );
        let r = d
            .decode(None, Some(b"{}"), Timestamp::NotAvailable, 7)
            .unwrap();
        assert_eq!(
            (r.timestamp, r.timestamp_type),
            (7, TimestampType::Ingestion)
        );
        assert_eq!(key_of(b"abc"), Value::from("abc"));
    }

    #[test]
    fn fields_for_key_and_timestamp() {
        let d = Decoder {
            key_field: Some("id".into()),
            timestamp_field: Some("ts".into()),
            ..Decoder::default()
        };
        let r = d
            .decode(
                Some(b"9"),
                Some(br#"{"id": 17, "ts": 2000, "value": 1}"#),
                Timestamp::LogAppendTime(5),
                7,
            )
            .unwrap();
        assert_eq!(
            (r.key().into_owned(), r.timestamp, r.timestamp_type),
            (Value::Int(17), 2_000_000_000, TimestampType::Create)
        );
        let err = d
            .decode(None, Some(br#"{"ts": 1}"#), Timestamp::NotAvailable, 0)
            .unwrap_err();
        assert!(err.0.contains("`id`"), "{err:?}");
    }

    #[test]
    fn malformed_values_are_reported() {
        let d = Decoder::default();
        let err = d
            .decode(None, Some(b"not json"), Timestamp::NotAvailable, 0)
            .unwrap_err();
        assert!(err.0.starts_with("value is not a JSON object"), "{err:?}");
        let text = Decoder {
            format: Format::Text,
            ..Decoder::default()
        };
        assert_eq!(
            text.decode(None, Some(b" 3 "), Timestamp::NotAvailable, 0)
                .unwrap()
                .event_json(),
            r#"{"message":" 3 "}"#
        );
        let err = d
            .decode(None, Some(b"[1]"), Timestamp::NotAvailable, 0)
            .unwrap_err();
        assert_eq!(err.0, "value is not a JSON object: found a list");
        assert!(text
            .decode(None, Some(&[0xff, 0xfe]), Timestamp::NotAvailable, 0)
            .is_err());
    }
}
