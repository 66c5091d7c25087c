//! The JSON-lines record format of the `file` and `stdin` sources and the `stdout` and `file`
//! sinks: one object per line, `{"key": 7, "value": 1.5, "timestamp": 1700000000000}`.
//!
//! - `key`: an unsigned 64-bit integer, required.
//! - `value`: a number; absent means 0, `null` means NaN (sinks write NaN and infinities as
//!   `null`, since JSON has no such numbers).
//! - `timestamp`: milliseconds since the Unix epoch (an integer, or a number with a fraction),
//!   optional; `null` counts as absent. Inside the job timestamps are nanoseconds.
//!
//! Other fields are ignored. Blank lines are skipped without being counted as malformed.

use std::fmt;
use std::io::{self, Write};

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use tidemark_runtime::{Record, TimestampType};

use crate::config::Timestamps;

/// What a line must look like, for error messages.
pub(crate) const EXPECTED_LINE: &str = "expected a JSON object like \
    {\"key\": 7, \"value\": 1.5, \"timestamp\": 1700000000000} with key an unsigned integer, \
    value a number (default 0) and timestamp in milliseconds since the Unix epoch (optional)";

const NANOS_PER_MILLI: i64 = 1_000_000;

/// A record as read from a line, before its timestamp is settled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LineRecord {
    pub key: u64,
    pub value: f64,
    /// The line's `timestamp`, in nanoseconds since the Unix epoch.
    pub timestamp: Option<i64>,
}

#[derive(Deserialize)]
struct Wire {
    key: u64,
    #[serde(default, deserialize_with = "nullable_f64")]
    value: f64,
    #[serde(default, deserialize_with = "millis_as_nanos")]
    timestamp: Option<i64>,
}

/// Why a line could not be read as a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LineError {
    /// The 1-based column where the parser stopped, if known.
    pub column: Option<usize>,
    /// What is wrong, without position.
    pub message: String,
}

impl LineError {
    /// The full message for the line `line` of `origin`.
    pub(crate) fn describe(&self, origin: &str, line: u64) -> String {
        match self.column {
            Some(column) => format!(
                "{origin}: line {line}, column {column}: malformed record: {}; {EXPECTED_LINE}",
                self.message
            ),
            None => format!(
                "{origin}: line {line}: malformed record: {}; {EXPECTED_LINE}",
                self.message
            ),
        }
    }
}

/// Parses one line (with or without its line break). A blank line gives `Ok(None)`.
pub(crate) fn parse_line(line: &[u8]) -> Result<Option<LineRecord>, LineError> {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let line = &line[..end];
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<Wire>(line) {
        Ok(w) => Ok(Some(LineRecord {
            key: w.key,
            value: w.value,
            timestamp: w.timestamp,
        })),
        Err(e) => {
            let text = e.to_string();
            let position = format!(" at line {} column {}", e.line(), e.column());
            let message = text.strip_suffix(&position).unwrap_or(&text).to_owned();
            Err(LineError {
                column: (e.line() > 0).then_some(e.column()),
                message,
            })
        }
    }
}

fn nullable_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn millis_as_nanos<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct Millis;
    impl Visitor<'_> for Millis {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("milliseconds since the Unix epoch")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            v.checked_mul(NANOS_PER_MILLI)
                .map(Some)
                .ok_or_else(|| E::custom(format!("timestamp {v} ms is out of range")))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            match i64::try_from(v) {
                Ok(v) => self.visit_i64(v),
                Err(_) => Err(E::custom(format!("timestamp {v} ms is out of range"))),
            }
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            let nanos = (v * NANOS_PER_MILLI as f64).round();
            // i64::MAX as f64 rounds up to 2^63, which is out of range.
            if nanos.is_finite() && nanos >= i64::MIN as f64 && nanos < i64::MAX as f64 {
                Ok(Some(nanos as i64))
            } else {
                Err(E::custom(format!("timestamp {v} ms is out of range")))
            }
        }
    }
    d.deserialize_any(Millis)
}

/// Writes `record` as one JSON line, its timestamp in whole milliseconds (rounded down).
pub(crate) fn write_record<W: Write>(w: &mut W, record: &Record) -> io::Result<()> {
    write!(w, "{{\"key\":{},\"value\":", record.key)?;
    serde_json::to_writer(&mut *w, &record.value).map_err(io::Error::from)?;
    writeln!(
        w,
        ",\"timestamp\":{}}}",
        record.timestamp.div_euclid(NANOS_PER_MILLI)
    )
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
        match (self.mode, line.timestamp) {
            (Timestamps::Create, Some(ts)) => Record {
                key: line.key,
                value: line.value,
                timestamp: ts,
                timestamp_type: TimestampType::Create,
            },
            _ => Record {
                key: line.key,
                value: line.value,
                timestamp: now,
                timestamp_type: TimestampType::Ingestion,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_and_partial_lines() {
        assert_eq!(
            parse_line(b"{\"key\":7,\"value\":1.5,\"timestamp\":1700000000000}\n"),
            Ok(Some(LineRecord {
                key: 7,
                value: 1.5,
                timestamp: Some(1_700_000_000_000_000_000)
            }))
        );
        assert_eq!(
            parse_line(b" {\"key\": 1, \"extra\": [\"x\"]}\r\n"),
            Ok(Some(LineRecord {
                key: 1,
                value: 0.0,
                timestamp: None
            }))
        );
        let r = parse_line(b"{\"key\":2,\"value\":null,\"timestamp\":1.5}")
            .unwrap()
            .unwrap();
        assert!(r.value.is_nan());
        assert_eq!(r.timestamp, Some(1_500_000));
        assert_eq!(parse_line(b"  \r\n"), Ok(None));
        assert_eq!(parse_line(b""), Ok(None));
    }

    #[test]
    fn malformed_lines_say_what_and_where() {
        let e = parse_line(b"{\"value\": 1}").unwrap_err();
        assert_eq!(e.message, "missing field `key`");
        assert_eq!(e.column, Some(12));
        let e = parse_line(b"{\"key\": -1}").unwrap_err();
        assert!(e.message.contains("expected u64"), "{e:?}");
        let e = parse_line(b"{\"key\": 1, \"timestamp\": 99999999999999999}").unwrap_err();
        assert!(e.message.contains("out of range"), "{e:?}");
        let e = parse_line(b"not json").unwrap_err();
        let text = e.describe("in.jsonl", 3);
        assert!(
            text.starts_with("in.jsonl: line 3, column 2: malformed record: expected"),
            "{text}"
        );
        assert!(text.ends_with(EXPECTED_LINE));
    }

    #[test]
    fn writes_lines_the_parser_reads_back() {
        let mut buf = Vec::new();
        write_record(&mut buf, &Record::new(3, 2.5, 1_700_000_000_123_456_789)).unwrap();
        write_record(&mut buf, &Record::new(4, f64::NAN, -1)).unwrap();
        assert_eq!(
            String::from_utf8(buf.clone()).unwrap(),
            "{\"key\":3,\"value\":2.5,\"timestamp\":1700000000123}\n\
             {\"key\":4,\"value\":null,\"timestamp\":-1}\n"
        );
        let mut lines = buf.split(|&b| b == b'\n');
        let first = parse_line(lines.next().unwrap()).unwrap().unwrap();
        assert_eq!(first.timestamp, Some(1_700_000_000_123_000_000));
    }

    #[test]
    fn stamping_takes_the_line_timestamp_or_the_ingestion_time() {
        let line = |ts: Option<i64>| LineRecord {
            key: 1,
            value: 2.0,
            timestamp: ts,
        };
        let now = 1_000_000_000_000;
        let create = Stamping::new(Timestamps::Create);
        let r = create.stamp(line(Some(5)), now);
        assert_eq!((r.timestamp, r.timestamp_type), (5, TimestampType::Create));
        assert_eq!((r.key, r.value), (1, 2.0));
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
