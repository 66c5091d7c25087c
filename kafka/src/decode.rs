//! Kafka messages → records: the `format` of the value, the key and the timestamp.

use rdkafka::message::Timestamp;
use serde::Deserialize;
use tidemark_operators::event_json::{EventError, EventParser};
use tidemark_operators::expr::Evaluator;
use tidemark_operators::formats::{BinaryDecoder, DecodeError};
use tidemark_operators::{timestamp_nanos, Extract};
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
    /// Avro: in the Confluent wire format with a schema registry, or plain with `schema:`.
    Avro,
    /// Protobuf: in the Confluent wire format with a schema registry, or plain with `schema:`.
    Protobuf,
}

impl Format {
    /// The binary format this is, if it is one.
    pub fn binary(self) -> Option<tidemark_operators::formats::Binary> {
        use tidemark_operators::formats::Binary;
        match self {
            Format::Avro => Some(Binary::Avro),
            Format::Protobuf => Some(Binary::Protobuf),
            Format::Json | Format::Text => None,
        }
    }
}

/// How a message's key is read (`key_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyFormat {
    /// Text: a decimal integer as an int, anything else as a string.
    #[default]
    String,
    /// A JSON value.
    Json,
    /// Avro in the Confluent wire format (the source's `schema_registry`).
    Avro,
    /// Protobuf in the Confluent wire format (the source's `schema_registry`).
    Protobuf,
}

/// Where the record's key and timestamp come from.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The value's format.
    pub format: Format,
    /// The `key:` expression over the event; `None`: the message key.
    pub key: Option<Extract>,
    /// The `timestamp:` expression over the event (int or double ms, or an RFC 3339 string);
    /// `None`: the message's timestamp.
    pub timestamp: Option<Extract>,
    /// Made when the first expression is evaluated.
    eval: Option<Evaluator>,
    /// Parses JSON events, sharing names and repeated strings from message to message.
    parser: EventParser,
    /// Reads Avro or Protobuf values (`format: avro | protobuf`).
    binary: Option<BinaryDecoder>,
    /// How keys are read, and the decoder of binary keys.
    key_format: KeyFormat,
    key_binary: Option<BinaryDecoder>,
}

/// A message that does not fit `format`.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

/// Why a message did not become a record.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected {
    /// The message is bad: the source's `on_error` decides.
    Malformed(Malformed),
    /// The message cannot be read for a reason outside it (the schema registry does not
    /// answer): the job fails.
    Fatal(String),
}

impl Rejected {
    /// What is wrong.
    pub fn message(&self) -> &str {
        match self {
            Rejected::Malformed(m) => &m.0,
            Rejected::Fatal(f) => f,
        }
    }
}

impl From<Malformed> for Rejected {
    fn from(m: Malformed) -> Rejected {
        Rejected::Malformed(m)
    }
}

impl From<DecodeError> for Rejected {
    fn from(e: DecodeError) -> Rejected {
        match e {
            DecodeError::Malformed(m) => Rejected::Malformed(Malformed(m)),
            DecodeError::Fatal(f) => Rejected::Fatal(f),
        }
    }
}

const NANOS_PER_MS: i64 = 1_000_000;

impl Decoder {
    /// A decoder of `format` taking the key and the timestamp from these expressions (the
    /// message's own when `None`).
    pub fn new(format: Format, key: Option<Extract>, timestamp: Option<Extract>) -> Self {
        Decoder {
            format,
            key,
            timestamp,
            eval: None,
            parser: EventParser::new(),
            binary: None,
            key_format: KeyFormat::String,
            key_binary: None,
        }
    }

    /// Reads values with `binary` (for `format: avro | protobuf`).
    pub fn with_binary(mut self, binary: BinaryDecoder) -> Self {
        self.binary = Some(binary);
        self
    }

    /// Reads keys as `format` (with `binary` for Avro and Protobuf keys).
    pub fn with_key_format(mut self, format: KeyFormat, binary: Option<BinaryDecoder>) -> Self {
        self.key_format = format;
        self.key_binary = binary;
        self
    }

    /// The message key as the record's key, as `key_format` says.
    fn key_value(&mut self, key: Option<&[u8]>) -> Result<Value, Rejected> {
        let Some(bytes) = key else {
            return Ok(Value::Null);
        };
        Ok(match (self.key_format, &mut self.key_binary) {
            (KeyFormat::String, _) => key_of(bytes),
            (KeyFormat::Json, _) => {
                Value::from_json(bytes).map_err(|e| Malformed(format!("key is not JSON: {e}")))?
            }
            (_, Some(binary)) => Value::from(binary.decode(bytes).map_err(|e| match e {
                DecodeError::Malformed(m) => Rejected::Malformed(Malformed(format!("key: {m}"))),
                fatal => fatal.into(),
            })?),
            (_, None) => unreachable!("binary key formats come with their decoder"),
        })
    }

    /// The record of a message without a value (`tombstones: keep`): a tombstone keyed by the
    /// message key as the source reads keys, at the message's timestamp (`key:` and
    /// `timestamp:` expressions, which read the event, do not apply).
    pub fn tombstone(
        &mut self,
        key: Option<&[u8]>,
        timestamp: Timestamp,
        now_nanos: i64,
    ) -> Result<Record, Rejected> {
        let (ts, ts_type) = match timestamp {
            Timestamp::CreateTime(ms) => (ms.saturating_mul(NANOS_PER_MS), TimestampType::Create),
            Timestamp::LogAppendTime(ms) => {
                (ms.saturating_mul(NANOS_PER_MS), TimestampType::LogAppend)
            }
            Timestamp::NotAvailable => (now_nanos, TimestampType::Ingestion),
        };
        let record_key = match self.key_format {
            KeyFormat::String => key.map(key_of).unwrap_or(Value::Null),
            _ => self.key_value(key)?,
        };
        Ok(Record::tombstone(record_key, ts).with_timestamp_type(ts_type))
    }

    /// Turns one message into a record. `now_nanos` stamps messages without a timestamp. In
    /// the `key:` and `timestamp:` expressions, `record.key` is the message key and
    /// `record.timestamp` the message timestamp (ms).
    pub fn decode(
        &mut self,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        timestamp: Timestamp,
        now_nanos: i64,
    ) -> Result<Record, Rejected> {
        let (mut ts, mut ts_type) = match timestamp {
            Timestamp::CreateTime(ms) => (ms.saturating_mul(NANOS_PER_MS), TimestampType::Create),
            Timestamp::LogAppendTime(ms) => {
                (ms.saturating_mul(NANOS_PER_MS), TimestampType::LogAppend)
            }
            Timestamp::NotAvailable => (now_nanos, TimestampType::Ingestion),
        };
        let payload = payload.unwrap_or_default();
        let mut record_key = match self.key_format {
            KeyFormat::String => key.map(key_of).unwrap_or(Value::Null),
            _ => self.key_value(key)?,
        };
        // Nothing here reads the event: it is kept as its text, checked, and made only where
        // a field is read (`Record::from_json_object`); unchanged, the sink writes the text.
        if self.format == Format::Json && self.key.is_none() && self.timestamp.is_none() {
            return match Record::from_json_object(record_key, payload, ts) {
                Ok(record) => Ok(record.with_timestamp_type(ts_type)),
                Err(e) => Err(malformed_json(e).into()),
            };
        }
        let event = match self.format {
            Format::Text => {
                let text = std::str::from_utf8(payload)
                    .map_err(|e| Malformed(format!("value is not UTF-8 text: {e}")))?;
                let mut m = Map::with_capacity(1);
                m.push_unchecked("message", text);
                m
            }
            Format::Json => self.parser.parse(payload).map_err(malformed_json)?,
            Format::Avro | Format::Protobuf => self
                .binary
                .as_mut()
                .expect("binary formats come with their decoder")
                .decode(payload)?,
        };
        let message_ms = ts.div_euclid(NANOS_PER_MS);
        let key_value = match &self.key {
            Some(extract) => Some(
                extract
                    .value(&event, &record_key, message_ms, &mut self.eval)
                    .map_err(|m| Malformed(format!("key: {m}")))?,
            ),
            None => None,
        };
        if let Some(extract) = &self.timestamp {
            let v = extract
                .value(&event, &record_key, message_ms, &mut self.eval)
                .map_err(|m| Malformed(format!("timestamp: {m}")))?;
            ts = timestamp_nanos(&v).map_err(|m| Malformed(format!("timestamp: {m}")))?;
            ts_type = TimestampType::Create;
        }
        if let Some(k) = key_value {
            record_key = k;
        }
        Ok(Record::with_event(record_key, event, ts).with_timestamp_type(ts_type))
    }
}

/// Why a value is not a JSON event, as the source reports it.
fn malformed_json(e: EventError) -> Malformed {
    match e {
        EventError::NotAnObject(type_name) => {
            Malformed(format!("value is not a JSON object: found a {type_name}"))
        }
        EventError::Invalid(e) => Malformed(format!("value is not a JSON object: {e}")),
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
    use std::sync::Arc;

    #[test]
    fn json_values_keys_and_timestamps() {
        let mut d = Decoder::default();
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

    fn extract(source: &str) -> Option<Extract> {
        Some(Extract::compile(source).unwrap())
    }

    #[test]
    fn fields_for_key_and_timestamp() {
        let mut d = Decoder::new(Format::Json, extract("id"), extract("ts"));
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
        assert_eq!(err.message(), "key: no field `id` in the event (it has ts)");
    }

    #[test]
    fn cel_expressions_for_key_and_timestamp() {
        let mut d = Decoder::new(
            Format::Json,
            extract("region + '/' + string(record.key)"),
            extract("at"),
        );
        let r = d
            .decode(
                Some(b"9"),
                Some(br#"{"region": "eu", "at": "2026-11-30T12:00:00.250Z"}"#),
                Timestamp::CreateTime(5),
                7,
            )
            .unwrap();
        assert_eq!(
            (r.key().into_owned(), r.timestamp, r.timestamp_type),
            (
                Value::from("eu/9"),
                1_796_040_000_250_000_000,
                TimestampType::Create
            )
        );
        // The message timestamp is `record.timestamp` (ms) in an expression.
        let mut d = Decoder::new(Format::Json, None, extract("record.timestamp + delay"));
        let r = d
            .decode(
                None,
                Some(br#"{"delay": 10}"#),
                Timestamp::CreateTime(1000),
                7,
            )
            .unwrap();
        assert_eq!(r.timestamp, 1_010_000_000);
        let err = d
            .decode(
                None,
                Some(br#"{"delay": "x"}"#),
                Timestamp::CreateTime(1000),
                7,
            )
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("timestamp: expression `record.timestamp + delay` failed:"),
            "{err:?}"
        );
        let mut d = Decoder::new(Format::Json, None, extract("at"));
        let err = d
            .decode(
                None,
                Some(br#"{"at": "yesterday"}"#),
                Timestamp::CreateTime(1),
                7,
            )
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("timestamp: \"yesterday\" is not an RFC 3339 time"),
            "{err:?}"
        );
    }

    fn decode_json(d: &mut Decoder, payload: &str) -> Value {
        let r = d
            .decode(None, Some(payload.as_bytes()), Timestamp::CreateTime(1), 0)
            .unwrap();
        Value::from_json(r.event_json().as_bytes()).unwrap()
    }

    /// The decoder reads JSON payloads with the sources' shared parser; its cases (shapes,
    /// escapes, big numbers, many names) are `tidemark_operators::event_json`'s tests. Here:
    /// one decoder over payloads of changing shapes gives what `Value::from_json` gives.
    #[test]
    fn json_events_read_as_from_json_reads_them() {
        let mut d = Decoder::default();
        for payload in [
            r#"{"id":1,"user":"u1","value":2,"status":"paid"}"#,
            r#"{"status":"open","id":3,"user":"u2"}"#,
            r#"{"a":"x","a":"y","b":{"c":["paid",1.5,null,true]},"big":18446744073709551615}"#,
            r#"{}"#,
            r#"{"id":1,"user":"u1","value":2,"status":"paid"}"#,
        ] {
            assert_eq!(
                decode_json(&mut d, payload),
                Value::from_json(payload.as_bytes()).unwrap(),
                "{payload}"
            );
        }
    }

    #[test]
    fn events_of_one_shape_share_names_and_repeated_strings() {
        let mut d = Decoder::default();
        let mut read = |p: &str| {
            d.decode(None, Some(p.as_bytes()), Timestamp::CreateTime(1), 0)
                .unwrap()
        };
        let a = read(r#"{"user":"u1","status":"paid"}"#);
        let b = read(r#"{"user":"u2","status":"paid"}"#);
        let (a, b) = (a.event(), b.event());
        let (a, b) = (a.as_map().unwrap(), b.as_map().unwrap());
        let (ka, kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
        assert_eq!(
            (ka.clone(), kb.clone()),
            (vec!["user", "status"], vec!["user", "status"])
        );
        assert!(std::ptr::eq(ka[1], kb[1]), "names are shared");
        let (Some(Value::String(sa)), Some(Value::String(sb))) = (a.get("status"), b.get("status"))
        else {
            panic!("status is a string")
        };
        assert!(Arc::ptr_eq(sa, sb), "a repeated string is shared");
        assert_eq!(
            (a.get("user"), b.get("user")),
            (Some(&Value::from("u1")), Some(&Value::from("u2")))
        );
    }

    #[test]
    fn keys_are_read_as_key_format_says() {
        let mut d = Decoder::default().with_key_format(KeyFormat::Json, None);
        let r = d
            .decode(
                Some(br#"{"region":"eu"}"#),
                Some(b"{}"),
                Timestamp::CreateTime(1),
                0,
            )
            .unwrap();
        assert_eq!(
            r.key().into_owned(),
            Value::from_json(br#"{"region":"eu"}"#).unwrap()
        );
        let err = d
            .decode(Some(b"not json"), Some(b"{}"), Timestamp::CreateTime(1), 0)
            .unwrap_err();
        assert!(err.message().starts_with("key is not JSON"), "{err:?}");
        assert!(matches!(err, Rejected::Malformed(_)));
        // No key is null in every format.
        let r = d
            .decode(None, Some(b"{}"), Timestamp::CreateTime(1), 0)
            .unwrap();
        assert_eq!(r.key().into_owned(), Value::Null);
    }

    #[test]
    fn avro_values_decode_with_their_schema() {
        use std::sync::Arc;
        use tidemark_operators::formats::{avro, Binary, BinaryFormat, SchemaSettings};
        let dir = std::env::temp_dir().join(format!("tidemark-decode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let schema = r#"{"type":"record","name":"E","fields":[{"name":"id","type":"long"},{"name":"status","type":"string"}]}"#;
        std::fs::write(dir.join("e.avsc"), schema).unwrap();
        let format = BinaryFormat::new(
            Binary::Avro,
            &SchemaSettings {
                schema: Some("e.avsc".into()),
                ..SchemaSettings::default()
            },
            &dir,
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let mut d =
            Decoder::new(Format::Avro, extract("id"), None).with_binary(Arc::new(format).decoder());
        let writer = avro::AvroWriter::new(avro::parse_schema(schema).unwrap()).unwrap();
        let mut bytes = Vec::new();
        let event = Value::from_json(br#"{"id":7,"status":"paid"}"#).unwrap();
        writer.write(event.as_map().unwrap(), &mut bytes).unwrap();
        let r = d
            .decode(None, Some(&bytes), Timestamp::CreateTime(1), 0)
            .unwrap();
        assert_eq!(r.key().into_owned(), Value::Int(7));
        assert_eq!(r.event_json(), r#"{"id":7,"status":"paid"}"#);
        let err = d
            .decode(None, Some(&[0x0e]), Timestamp::CreateTime(1), 0)
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("value does not decode with the schema:"),
            "{err:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn malformed_values_are_reported() {
        let mut d = Decoder::default();
        let err = d
            .decode(None, Some(b"not json"), Timestamp::NotAvailable, 0)
            .unwrap_err();
        assert!(
            err.message().starts_with("value is not a JSON object"),
            "{err:?}"
        );
        let mut text = Decoder::new(Format::Text, None, None);
        assert_eq!(
            text.decode(None, Some(b" 3 "), Timestamp::NotAvailable, 0)
                .unwrap()
                .event_json(),
            r#"{"message":" 3 "}"#
        );
        let err = d
            .decode(None, Some(b"[1]"), Timestamp::NotAvailable, 0)
            .unwrap_err();
        assert_eq!(err.message(), "value is not a JSON object: found a list");
        assert!(text
            .decode(None, Some(&[0xff, 0xfe]), Timestamp::NotAvailable, 0)
            .is_err());
    }
}
