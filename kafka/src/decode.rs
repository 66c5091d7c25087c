//! Kafka messages → records: the `format` of the value, the key and the timestamp.

use rdkafka::message::Timestamp;
use serde::Deserialize;
use tidemark_runtime::{Record, TimestampType};

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
        let mut record_key = key.map(key_of).unwrap_or(0);
        let value = match self.format {
            Format::Text => {
                let text = std::str::from_utf8(payload)
                    .map_err(|e| Malformed(format!("value is not UTF-8 text: {e}")))?;
                text.trim().parse::<f64>().unwrap_or(f64::NAN)
            }
            Format::Json => {
                let object: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(payload)
                        .map_err(|e| Malformed(format!("value is not a JSON object: {e}")))?;
                if let Some(field) = &self.key_field {
                    record_key = match object.get(field) {
                        Some(v) => json_key(v),
                        None => {
                            return Err(Malformed(format!("no field `{field}` for the key")));
                        }
                    };
                }
                if let Some(field) = &self.timestamp_field {
                    match object.get(field).and_then(|v| v.as_f64()) {
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
                match object.get("value") {
                    Some(v) => v.as_f64().unwrap_or(f64::NAN),
                    None => 0.0,
                }
            }
        };
        Ok(Record {
            key: record_key,
            value,
            timestamp: ts,
            timestamp_type: ts_type,
        })
    }
}

/// A message key as the record's key: a decimal number as itself, other bytes hashed (FNV-1a).
pub fn key_of(bytes: &[u8]) -> u64 {
    if let Some(n) = std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        return n;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn json_key(v: &serde_json::Value) -> u64 {
    match v {
        serde_json::Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i as u64))
            .unwrap_or_else(|| n.as_f64().unwrap_or(0.0).to_bits()),
        serde_json::Value::String(s) => key_of(s.as_bytes()),
        serde_json::Value::Null => 0,
        other => key_of(other.to_string().as_bytes()),
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
            (r.key, r.value, r.timestamp, r.timestamp_type),
            (42, 2.5, 1_000_000_000, TimestampType::Create)
        );
        let r = d
            .decode(None, Some(b"{}"), Timestamp::LogAppendTime(5), 7)
            .unwrap();
        assert_eq!((r.key, r.timestamp_type), (0, TimestampType::LogAppend));
        let r = d
            .decode(None, Some(b"{}"), Timestamp::NotAvailable, 7)
            .unwrap();
        assert_eq!(
            (r.timestamp, r.timestamp_type),
            (7, TimestampType::Ingestion)
        );
        assert_ne!(key_of(b"abc"), key_of(b"abd"));
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
            (r.key, r.timestamp, r.timestamp_type),
            (17, 2_000_000_000, TimestampType::Create)
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
                .value,
            3.0
        );
        assert!(text
            .decode(None, Some(&[0xff, 0xfe]), Timestamp::NotAvailable, 0)
            .is_err());
    }
}
