//! The line formats of the `file` and `stdin` sources and the `stdout` and `file` sinks.
//!
//! Reading (`format:` on the source):
//! - `json` (default): each line is one JSON object, the event, fields in order. A line that
//!   is anything else (an array, a number, invalid JSON) is malformed. Blank lines are skipped
//!   without being counted.
//! - `text`: each line is the event `{"message": "<the line>"}` (without its line break; a line
//!   that is not UTF-8 is malformed).
//!
//! A UTF-8 byte order mark at the start of the first line is ignored.
//!
//! The record's key is the event's field named by `key:` (a missing field makes the line
//! malformed); without `key:`, the field `key` if the event has one, else no key (`null`).
//! The timestamp is the field named by `timestamp:` (missing: malformed); without it, the field
//! `timestamp` if present and not `null`, else the ingestion time. A timestamp is an int of
//! milliseconds since the Unix epoch (a double keeps its fraction) or an RFC 3339 string
//! (`2026-11-30T12:00:00.250Z`, `2026-11-30T13:00:00+01:00`). Inside the job timestamps are
//! nanoseconds.
//!
//! Writing: every sink writes each record's event as one compact JSON object per line, fields in
//! order, ints as ints and doubles with their fraction (`5.0`); NaN and infinities as `null`.
//! The record's key and timestamp are outside the event and not written, unless the sink's
//! `timestamp_field: NAME` asks for the timestamp (whole milliseconds) as field `NAME`.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::Arc;

use serde::Deserialize;
use tidemark_runtime::{Map, Record, TimestampType, Value};

use crate::config::Timestamps;
use crate::event_json::EventError;
use crate::expr::{CompileError, Evaluator, EventRef, Expr, Scope};
use crate::on_error::{DeadLetterWriter, ErrorPolicy, OnErrorFactory};
use crate::positions::FileLength;
use tidemark_runtime::BoxError;

const NANOS_PER_MILLI: i64 = 1_000_000;

/// How a source's lines become events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object per line.
    #[default]
    Json,
    /// Each line is `{"message": "<the line>"}`.
    Text,
}

/// A record as read from a line, before its timestamp is settled.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LineRecord {
    /// The event and the key; a JSON line's event is kept as the line's text
    /// ([`Record::from_json_object`]). Its timestamp is set by [`Stamping::stamp`].
    pub record: Record,
    /// The line's timestamp, in nanoseconds since the Unix epoch.
    pub timestamp: Option<i64>,
}

/// Why a line could not be read as a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LineError {
    /// The 1-based column where the JSON parser stopped, if it was a syntax error.
    pub column: Option<usize>,
    /// What is wrong, without position.
    pub message: String,
}

impl LineError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        LineError {
            column: None,
            message: message.into(),
        }
    }

    /// The full message for the line `line` of `origin`.
    pub(crate) fn describe(&self, origin: &str, line: u64) -> String {
        match self.column {
            Some(column) => format!(
                "{origin}: line {line}, column {column}: malformed line: {}",
                self.message
            ),
            None => format!("{origin}: line {line}: malformed line: {}", self.message),
        }
    }
}

/// A source's `key:` or `timestamp:` setting: a CEL expression over the event, compiled once
/// at job build. Shared by every source that reads events (`file`, `stdin`, `kafka`).
#[derive(Clone, Debug)]
pub enum Extract {
    /// A plain field name: looked up directly (no CEL evaluation per line).
    Field(Arc<str>),
    /// Any other expression.
    Expr(Expr),
}

impl Extract {
    /// Compiles `source` (a plain field name stays a field lookup).
    pub fn compile(source: &str) -> Result<Extract, CompileError> {
        let plain = source
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && source
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !matches!(
                source,
                "true" | "false" | "null" | "record" | "event" | "in"
            );
        if plain {
            Ok(Extract::Field(source.into()))
        } else {
            Expr::compile(source).map(Extract::Expr)
        }
    }

    /// Compiles the setting `path` (`"key"`, `"timestamp"`) of a component of `type_name`; a
    /// bad expression is a setting error located inside the expression (the CLI reports it at
    /// its line and column in the job file).
    pub fn compile_setting(
        type_name: &str,
        path: &str,
        source: &str,
    ) -> Result<Extract, crate::ConfigError> {
        Extract::compile(source).map_err(|e| e.into_config_error(type_name, path))
    }

    /// The value for `record`'s event, with its key and timestamp as `record.key` and
    /// `record.timestamp` in an expression; a plain field of an event kept as text is read
    /// from the text ([`Record::field`]), and an expression reads the fields it names from it
    /// too. Otherwise as [`Extract::value`].
    pub fn value_of(&self, record: &Record, eval: &mut Option<Evaluator>) -> Result<Value, String> {
        match self {
            Extract::Field(name) => record.field(name).map(Cow::into_owned).ok_or_else(|| {
                format!(
                    "no field `{name}` in the event{}",
                    field_list(&record.event_map())
                )
            }),
            Extract::Expr(expr) => {
                let eval = eval.get_or_insert_with(Evaluator::new);
                crate::expr::with_record(record, |scope| {
                    eval.eval(expr, scope).map_err(|e| {
                        format!("expression `{}` failed: {}", expr.source(), e.message)
                    })
                })
            }
        }
    }

    /// The value for `event`, with `record.key` = `key` and `record.timestamp` =
    /// `timestamp_ms` in an expression. `eval` is made on first use. The error says what is
    /// wrong (a missing field, with the fields there are; a failed expression).
    pub fn value(
        &self,
        event: &Map,
        key: &Value,
        timestamp_ms: i64,
        eval: &mut Option<Evaluator>,
    ) -> Result<Value, String> {
        match self {
            Extract::Field(name) => event
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no field `{name}` in the event{}", field_list(event))),
            Extract::Expr(expr) => {
                let eval = eval.get_or_insert_with(Evaluator::new);
                let scope = Scope {
                    event: EventRef::Map(event),
                    key,
                    timestamp_ms,
                };
                eval.eval(expr, &scope)
                    .map_err(|e| format!("expression `{}` failed: {}", expr.source(), e.message))
            }
        }
    }
}

/// Compiles a source's `key` and `timestamp` settings; an error names the setting and the place
/// inside the expression.
pub(crate) fn line_reader(
    type_name: &str,
    format: Format,
    key: Option<&str>,
    timestamp: Option<&str>,
) -> Result<LineReader, crate::ConfigError> {
    let compile = |source: Option<&str>, path: &str| {
        source
            .map(Extract::compile)
            .transpose()
            .map_err(|e| e.into_config_error(type_name, path))
    };
    Ok(LineReader::new(
        format,
        compile(key, "key")?,
        compile(timestamp, "timestamp")?,
    ))
}

/// Which field or expression a source takes the key or timestamp from.
#[derive(Clone, Debug)]
enum Field {
    /// This, which must give a value.
    Set(Extract),
    /// The default field, if present.
    Default(&'static str),
}

impl Field {
    fn new(extract: Option<Extract>, default: &'static str) -> Self {
        extract.map_or(Field::Default(default), Field::Set)
    }

    /// The value in `record`'s event (read from its text if it is kept as text); `Ok(None)`
    /// when the default field is absent (or `null`).
    fn get(
        &self,
        record: &Record,
        eval: &mut Option<Evaluator>,
        what: &str,
    ) -> Result<Option<Value>, LineError> {
        match self {
            Field::Set(extract) => extract
                .value_of(record, eval)
                .map(Some)
                .map_err(|m| LineError::new(format!("{what}: {m}"))),
            Field::Default(name) => Ok(record
                .field(name)
                .filter(|v| !v.is_null())
                .map(Cow::into_owned)),
        }
    }
}

fn field_list(event: &Map) -> String {
    if event.is_empty() {
        " (it has no fields)".to_owned()
    } else {
        let names: Vec<&str> = event.keys().take(20).collect();
        format!(" (it has {})", names.join(", "))
    }
}

/// Reads lines into records for one source subtask.
#[derive(Debug)]
pub(crate) struct LineReader {
    format: Format,
    key: Field,
    timestamp: Field,
    /// Made when the first expression is evaluated.
    eval: Option<Evaluator>,
}

impl LineReader {
    /// A reader of `format` taking the key and the timestamp from these expressions (the
    /// fields `key` and `timestamp`, if present, when `None`).
    pub(crate) fn new(format: Format, key: Option<Extract>, timestamp: Option<Extract>) -> Self {
        LineReader {
            format,
            key: Field::new(key, "key"),
            timestamp: Field::new(timestamp, "timestamp"),
            eval: None,
        }
    }

    /// A reader with `key` and `timestamp` given as expressions; panics on one that does not
    /// compile (for tests).
    #[cfg(test)]
    pub(crate) fn with_fields(format: Format, key: Option<&str>, timestamp: Option<&str>) -> Self {
        let compile = |s: &str| Extract::compile(s).unwrap();
        LineReader::new(format, key.map(compile), timestamp.map(compile))
    }

    /// Parses line number `number` (1-based, with or without its line break). A blank JSON
    /// line gives `Ok(None)`.
    pub(crate) fn parse(
        &mut self,
        line: &[u8],
        number: u64,
    ) -> Result<Option<LineRecord>, LineError> {
        let mut line = line;
        if number == 1 {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        let record = match self.format {
            Format::Json => match json_record(line)? {
                Some(record) => record,
                None => return Ok(None),
            },
            Format::Text => {
                let line = line.strip_suffix(b"\n").unwrap_or(line);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let text = std::str::from_utf8(line).map_err(|e| {
                    LineError::new(format!(
                        "not UTF-8 text (invalid byte at column {})",
                        e.valid_up_to() + 1
                    ))
                })?;
                let mut m = Map::with_capacity(1);
                m.push_unchecked(arcstr::literal!("message"), text);
                Record::with_event(Value::Null, m, 0)
            }
        };
        self.settle(record).map(Some)
    }

    /// The key and the timestamp of `record` (an event read with no key and timestamp 0), as
    /// the `key` and `timestamp` settings say.
    pub(crate) fn settle(&mut self, mut record: Record) -> Result<LineRecord, LineError> {
        // Both read with `record.key` null and `record.timestamp` 0, before either is set.
        let key = self.key.get(&record, &mut self.eval, "key")?;
        let timestamp = match self.timestamp.get(&record, &mut self.eval, "timestamp")? {
            Some(v) => {
                Some(timestamp_nanos(&v).map_err(|m| LineError::new(format!("timestamp: {m}")))?)
            }
            None => None,
        };
        if let Some(key) = key.filter(|k| !k.is_null()) {
            record.set_key(key);
        }
        Ok(LineRecord { record, timestamp })
    }
}

/// The record of one JSON object, its event kept as the line's text (checked, not parsed:
/// [`Record::from_json_object`]), without a key; `Ok(None)` for a blank line. A line that is
/// not one JSON object is malformed here, with the error a full parse gives.
fn json_record(line: &[u8]) -> Result<Option<Record>, LineError> {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let line = &line[..end];
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match Record::from_json_object(Value::Null, line, 0) {
        Ok(record) => Ok(Some(record)),
        Err(EventError::NotAnObject(type_name)) => Err(LineError::new(format!(
            "expected a JSON object, found {} {type_name}",
            article(type_name),
        ))),
        Err(EventError::Invalid(e)) => {
            let text = e.to_string();
            let position = format!(" at line {} column {}", e.line(), e.column());
            let message = text.strip_suffix(&position).unwrap_or(&text);
            Err(LineError {
                column: (e.line() > 0).then_some(e.column()),
                message: format!("invalid JSON: {message}; expected one JSON object per line"),
            })
        }
    }
}

fn article(type_name: &str) -> &'static str {
    if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// A timestamp value in nanoseconds since the Unix epoch: an int or double of milliseconds, or
/// an RFC 3339 string.
pub fn timestamp_nanos(v: &Value) -> Result<i64, String> {
    let out_of_range = || format!("{v} is out of range");
    match v {
        Value::Int(ms) => ms.checked_mul(NANOS_PER_MILLI).ok_or_else(out_of_range),
        Value::Double(ms) => {
            let nanos = (ms * NANOS_PER_MILLI as f64).round();
            // i64::MAX as f64 rounds up to 2^63, which is out of range.
            if nanos.is_finite() && nanos >= i64::MIN as f64 && nanos < i64::MAX as f64 {
                Ok(nanos as i64)
            } else {
                Err(out_of_range())
            }
        }
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map_err(|e| format!("{v} is not an RFC 3339 time ({e})"))?
            .timestamp_nanos_opt()
            .ok_or_else(out_of_range),
        other => Err(format!(
            "expected milliseconds since the Unix epoch (an int) or an RFC 3339 string, found {} {}",
            article(other.type_name()),
            other.type_name()
        )),
    }
}

/// Writes the record's event as one JSON line; with `timestamp_field`, the record's timestamp
/// (whole milliseconds since the Unix epoch, rounded down) is written as that field (replacing
/// an event field of that name where it is, else last).
pub(crate) fn write_record<W: Write>(
    w: &mut W,
    record: &Record,
    timestamp_field: Option<&str>,
) -> io::Result<()> {
    match timestamp_field {
        None => record.write_event_json(&mut *w)?,
        Some(name) => {
            let mut event = record.event_map().into_owned();
            event.insert(name, record.timestamp_millis());
            Value::from(event).write_json(&mut *w)?;
        }
    }
    w.write_all(b"\n")
}

/// What a reading source does with a malformed line (`on_error`): fail the job, skip it, or
/// write it to a dead-letter file; skipped and dead-lettered lines are counted as malformed.
#[derive(Debug)]
pub(crate) struct Rejects {
    fail: bool,
    dead_letter: Option<DeadLetterWriter>,
    vertex: String,
    /// Lines skipped or dead-lettered so far.
    pub malformed: u64,
}

impl Rejects {
    /// The handling of subtask `ctx` under `on_error` (which opens a shared dead-letter file).
    pub(crate) fn new(on_error: &OnErrorFactory, vertex: &str) -> Result<Self, BoxError> {
        Ok(Rejects {
            fail: *on_error.policy() == ErrorPolicy::Fail,
            dead_letter: on_error.dead_letter()?,
            vertex: vertex.to_owned(),
            malformed: 0,
        })
    }

    /// Handles line `number` of `origin`, malformed for `error`: `Err(message)` to fail the job;
    /// else it is counted and, with a dead letter, written there as
    /// `{"vertex":…,"error":…,"record":"<the line>"}`.
    pub(crate) fn reject(
        &mut self,
        error: &LineError,
        origin: &str,
        number: u64,
        line: &[u8],
    ) -> Result<(), String> {
        let message = error.describe(origin, number);
        if self.fail {
            return Err(message);
        }
        if let Some(file) = &self.dead_letter {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let record = Value::from(String::from_utf8_lossy(line).into_owned());
            file.write(&self.vertex, &message, &record).map_err(|e| {
                format!(
                    "cannot write to dead-letter file {}: {e} (after {message})",
                    file.path().display()
                )
            })?;
        }
        self.malformed += 1;
        Ok(())
    }

    /// The dead-letter file's path and length for checkpoint `checkpoint` (`None` without a
    /// dead letter).
    pub(crate) fn checkpoint(&self, checkpoint: u64) -> Result<Option<FileLength>, BoxError> {
        self.dead_letter
            .as_ref()
            .map(|file| file.checkpoint(checkpoint))
            .transpose()
    }

    /// Restores what [`Rejects::checkpoint`] returned, with the malformed count then: the
    /// dead-letter file is cut back when first used.
    pub(crate) fn restore(
        &mut self,
        recorded: Option<&FileLength>,
        malformed: u64,
    ) -> Result<(), BoxError> {
        match (&self.dead_letter, recorded) {
            (Some(file), Some(recorded)) => file.restore(recorded)?,
            // A dead letter new since the checkpoint starts empty.
            (_, None) => {}
            (None, Some(recorded)) => {
                return Err(format!(
                    "vertex `{}`: the checkpoint recorded the dead-letter file {}, but the \
                     vertex has no dead letter now (on_error: {{dead_letter: PATH}})",
                    self.vertex,
                    recorded.path.display()
                )
                .into())
            }
        }
        self.malformed = malformed;
        Ok(())
    }

    /// The source's input ended: its dead-letter lines are all written.
    pub(crate) fn finish(&self) -> Result<(), BoxError> {
        self.dead_letter.as_ref().map_or(Ok(()), |f| f.finish())
    }
}

/// How a reading source settles the timestamp of each record: the line's own (`create`) or the
/// time it is read (`ingestion`). Range checks on create timestamps (`timestamp_before_max`, …)
/// are not done here: the runtime applies them to whatever any source emits
/// ([`tidemark_runtime::SourceOptions`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamping {
    pub mode: Timestamps,
}

impl Stamping {
    pub(crate) fn new(mode: Timestamps) -> Self {
        Stamping { mode }
    }

    /// The record for `line` read at `now`: the line's timestamp as a create timestamp, or the
    /// ingestion time when the mode is `ingestion` or the line has none.
    #[inline]
    pub(crate) fn stamp(&self, line: LineRecord, now: i64) -> Record {
        let (timestamp, timestamp_type) = match (self.mode, line.timestamp) {
            (Timestamps::Create, Some(ts)) => (ts, TimestampType::Create),
            _ => (now, TimestampType::Ingestion),
        };
        let mut record = line.record;
        record.timestamp = timestamp;
        record.timestamp_type = timestamp_type;
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> LineReader {
        LineReader::with_fields(Format::Json, None, None)
    }

    fn event(s: &str) -> Map {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn json_lines_are_events_with_the_default_key_and_timestamp_fields() {
        let r = json()
            .parse(
                b"{\"key\":7,\"value\":1.5,\"timestamp\":1700000000000}\n",
                2,
            )
            .unwrap()
            .unwrap();
        assert_eq!(*r.record.key(), Value::Int(7));
        assert_eq!(r.timestamp, Some(1_700_000_000_000_000_000));
        assert_eq!(
            *r.record.event_map(),
            event(r#"{"key":7,"value":1.5,"timestamp":1700000000000}"#)
        );
        let r = json()
            .parse(
                b" {\"user\": \"u1\", \"value\": null, \"timestamp\": null}\r\n",
                2,
            )
            .unwrap()
            .unwrap();
        assert_eq!(*r.record.key(), Value::Null);
        assert_eq!(r.timestamp, None);
        // null stays null: it does not become NaN.
        assert_eq!(r.record.get("value"), Some(Value::Null));
        assert_eq!(json().parse(b"  \r\n", 2), Ok(None));
        assert_eq!(json().parse(b"", 2), Ok(None));
    }

    #[test]
    fn named_key_and_timestamp_fields_must_be_present() {
        let mut reader = LineReader::with_fields(Format::Json, Some("k"), Some("ts"));
        let r = reader
            .parse(br#"{"k":"a","ts":"2026-11-30T12:00:00.250Z","v":1}"#, 1)
            .unwrap()
            .unwrap();
        assert_eq!(*r.record.key(), Value::from("a"));
        assert_eq!(r.timestamp, Some(1_796_040_000_250_000_000));
        let e = reader.parse(br#"{"ts":1,"v":1}"#, 1).unwrap_err();
        assert_eq!(e.message, "key: no field `k` in the event (it has ts, v)");
        let e = reader.parse(br#"{"k":1}"#, 1).unwrap_err();
        assert_eq!(
            e.message,
            "timestamp: no field `ts` in the event (it has k)"
        );
        let e = reader.parse(br#"{"k":1,"ts":true}"#, 1).unwrap_err();
        assert!(
            e.message.starts_with("timestamp: expected milliseconds"),
            "{e:?}"
        );
        let e = reader.parse(br#"{"k":1,"ts":"yesterday"}"#, 1).unwrap_err();
        assert!(
            e.message.contains("\"yesterday\" is not an RFC 3339 time"),
            "{e:?}"
        );
        let e = reader
            .parse(br#"{"k":1,"ts":99999999999999999}"#, 1)
            .unwrap_err();
        assert!(e.message.contains("out of range"), "{e:?}");
        // Offsets and fractions of milliseconds.
        let r = reader
            .parse(br#"{"k":1,"ts":"2026-11-30T13:00:00+01:00"}"#, 1)
            .unwrap()
            .unwrap();
        assert_eq!(r.timestamp, Some(1_796_040_000_000_000_000));
        let r = reader.parse(br#"{"k":1,"ts":1.5}"#, 1).unwrap().unwrap();
        assert_eq!(r.timestamp, Some(1_500_000));
    }

    #[test]
    fn key_and_timestamp_can_be_expressions() {
        let mut reader = LineReader::with_fields(
            Format::Json,
            Some(r#"user + "/" + string(n)"#),
            Some("secs * 1000"),
        );
        let r = reader
            .parse(br#"{"user":"u1","n":2,"secs":1700000000}"#, 1)
            .unwrap()
            .unwrap();
        assert_eq!(*r.record.key(), Value::from("u1/2"));
        assert_eq!(r.timestamp, Some(1_700_000_000_000 * NANOS_PER_MILLI));
        let e = reader.parse(br#"{"n":2,"secs":1}"#, 2).unwrap_err();
        assert!(
            e.message
                .starts_with(r#"key: expression `user + "/" + string(n)` failed: "#),
            "{e:?}"
        );
        assert!(e.message.contains("user"), "{e:?}");
        // A bad expression is a compile error naming the setting.
        let err = line_reader("file", Format::Json, Some("a +"), None).unwrap_err();
        assert!(err.to_string().contains("key"), "{err}");
    }

    #[test]
    fn lines_that_are_not_objects_are_malformed_with_a_clear_message() {
        let e = json().parse(b"[1, 2]", 3).unwrap_err();
        assert_eq!(e.message, "expected a JSON object, found a list");
        assert_eq!(
            e.describe("in.jsonl", 3),
            "in.jsonl: line 3: malformed line: expected a JSON object, found a list"
        );
        let e = json().parse(b"42", 3).unwrap_err();
        assert_eq!(e.message, "expected a JSON object, found an int");
        let e = json().parse(b"{\"a\": }", 3).unwrap_err();
        let text = e.describe("in.jsonl", 3);
        assert_eq!(
            text,
            "in.jsonl: line 3, column 7: malformed line: invalid JSON: expected value; \
             expected one JSON object per line"
        );
        assert!(!text.contains("key"), "{text}");
    }

    #[test]
    fn a_byte_order_mark_on_the_first_line_is_ignored() {
        let line = b"\xEF\xBB\xBF{\"key\":1}";
        assert_eq!(
            *json().parse(line, 1).unwrap().unwrap().record.key(),
            Value::Int(1)
        );
        assert!(json().parse(line, 2).is_err());
        let mut text = LineReader::with_fields(Format::Text, None, None);
        let r = text.parse(b"\xEF\xBB\xBFhello\r\n", 1).unwrap().unwrap();
        assert_eq!(r.record.event_json(), r#"{"message":"hello"}"#);
    }

    #[test]
    fn text_lines_become_messages() {
        let mut text = LineReader::with_fields(Format::Text, None, None);
        let r = text.parse(b"  a \"quoted\" line\n", 4).unwrap().unwrap();
        assert_eq!(
            r.record.event_json(),
            r#"{"message":"  a \"quoted\" line"}"#
        );
        assert_eq!(
            (r.record.key().into_owned(), r.timestamp),
            (Value::Null, None)
        );
        let r = text.parse(b"\n", 5).unwrap().unwrap();
        assert_eq!(r.record.event_json(), r#"{"message":""}"#);
        let e = text.parse(b"ab\xFFc\n", 6).unwrap_err();
        assert_eq!(e.message, "not UTF-8 text (invalid byte at column 3)");
    }

    #[test]
    fn sinks_write_events_as_json_lines() {
        let mut buf = Vec::new();
        let numeric = Record::new(3, 2.5, 1_700_000_000_123_456_789);
        write_record(&mut buf, &numeric, None).unwrap();
        write_record(&mut buf, &Record::new(4, f64::NAN, -1), None).unwrap();
        let r = json()
            .parse(br#"{"b":1,"a":5.0,"s":"x","n":null}"#, 1)
            .unwrap()
            .unwrap();
        let general = Stamping::new(Timestamps::Create).stamp(r, 7_999_999);
        write_record(&mut buf, &general, None).unwrap();
        // With a timestamp field: appended, or replacing a field of that name in place.
        write_record(&mut buf, &numeric, Some("ts")).unwrap();
        write_record(&mut buf, &general, Some("a")).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"key\":3,\"value\":2.5}\n\
             {\"key\":4,\"value\":null}\n\
             {\"b\":1,\"a\":5.0,\"s\":\"x\",\"n\":null}\n\
             {\"key\":3,\"value\":2.5,\"ts\":1700000000123}\n\
             {\"b\":1,\"a\":7,\"s\":\"x\",\"n\":null}\n"
        );
    }

    #[test]
    fn stamping_takes_the_line_timestamp_or_the_ingestion_time() {
        let line = |ts: Option<i64>| LineRecord {
            record: Record::with_event(1, Map::new(), 0),
            timestamp: ts,
        };
        let now = 1_000_000_000_000;
        let create = Stamping::new(Timestamps::Create);
        let r = create.stamp(line(Some(5)), now);
        assert_eq!((r.timestamp, r.timestamp_type), (5, TimestampType::Create));
        assert_eq!(*r.key(), Value::Int(1));
        // No timestamp: the ingestion time.
        let r = create.stamp(line(None), now);
        assert_eq!(
            (r.timestamp, r.timestamp_type),
            (now, TimestampType::Ingestion)
        );
        // Ingestion mode ignores the line's timestamp.
        let r = Stamping::new(Timestamps::Ingestion).stamp(line(Some(5)), now);
        assert_eq!(
            (r.timestamp, r.timestamp_type),
            (now, TimestampType::Ingestion)
        );
    }
}
