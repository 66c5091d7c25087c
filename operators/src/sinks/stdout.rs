//! The `stdout` sink: writes each record's event as a JSON line to standard output.
//!
//! ```yaml
//! sinks:
//!   out:
//!     type: stdout
//!     input: per_user
//!     timestamp_field: ts    # optional: also write the record's timestamp (ms) as field `ts`
//! ```
//!
//! Each line is the record's event as one compact JSON object, fields in order, ints as ints
//! (`3`), doubles with full precision and their fraction (`5.0`), NaN and infinities as `null`:
//! `{"key":7,"value":1.5}` for the generator's events, the format the `file` and `stdin`
//! sources read. The record's key and timestamp are outside the event and not written, unless
//! `timestamp_field` names a field for the timestamp (whole milliseconds since the Unix epoch,
//! rounded down; it replaces an event field of that name in place, else comes last).
//! Each batch is formatted into a buffer kept by the
//! subtask and written with standard output locked once, so lines of parallel subtasks never
//! interleave; `finish` flushes. A closed standard output (a broken pipe, as in
//! `tidemark run job.yaml | head -1`) stops the job cleanly, as ripgrep does: the sink returns
//! [`OutputClosed`], and what it gets from then on is counted as dropped (`output_closed`).

use std::io::Write;

use serde::Deserialize;
use tidemark_runtime::{BoxError, OutputClosed, Record, Sink, SubtaskContext};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config;
use crate::error::ConfigError;
use crate::json_lines::write_record;

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "stdout",
    kind: ComponentKind::Sink,
    fields: &["timestamp_field"],
    summary: "writes each event as one JSON object per line to standard output",
    build,
};

/// Settings of the `stdout` sink.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// Also write the record's timestamp (ms since the epoch) as this field.
    #[serde(default)]
    pub timestamp_field: Option<String>,
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let StdoutConfig { timestamp_field } = config::parse(INFO.type_name, config)?;
    Ok(Built::Sink(Box::new(move |_: &SubtaskContext| {
        let sink = WriterSink::new(std::io::stdout(), "standard output")
            .with_timestamp_field(timestamp_field.clone());
        Ok(Box::new(sink) as Box<dyn Sink>)
    })))
}

/// Writes JSON lines to a shared writer such as standard output, one `write_all` per batch.
#[derive(Debug)]
pub struct WriterSink<W> {
    writer: W,
    name: &'static str,
    buf: Vec<u8>,
    timestamp_field: Option<String>,
}

impl<W: Write + Send> WriterSink<W> {
    /// A sink writing to `writer`; errors name it `name`.
    pub fn new(writer: W, name: &'static str) -> Self {
        WriterSink {
            writer,
            name,
            buf: Vec::with_capacity(64 * 1024),
            timestamp_field: None,
        }
    }

    /// Also writes each record's timestamp (ms since the epoch) as the field `name`.
    pub fn with_timestamp_field(mut self, name: Option<String>) -> Self {
        self.timestamp_field = name;
        self
    }

    /// The writer.
    pub fn get_ref(&self) -> &W {
        &self.writer
    }

    fn error(&self, e: std::io::Error) -> BoxError {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Box::new(OutputClosed {
                output: self.name.to_string(),
            });
        }
        format!("cannot write to {}: {e}", self.name).into()
    }
}

impl<W: Write + Send> Sink for WriterSink<W> {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        self.write_batch(std::slice::from_ref(record))
    }

    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        self.buf.clear();
        for record in records {
            write_record(&mut self.buf, record, self.timestamp_field.as_deref())
                .expect("writing to a Vec does not fail");
        }
        // `Stdout::write_all` holds the lock for the whole buffer.
        let result = self.writer.write_all(&self.buf);
        result.map_err(|e| self.error(e))
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        let result = self.writer.flush();
        result.map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_json_lines_per_batch() {
        let mut sink = WriterSink::new(Vec::new(), "memory");
        sink.write_batch(&[
            Record::new(1, 0.5, 2_000_000),
            Record::new(2, -1.0, 3_999_999),
        ])
        .unwrap();
        sink.write(&Record::new(3, f64::INFINITY, 0)).unwrap();
        sink.finish().unwrap();
        assert_eq!(
            String::from_utf8(sink.get_ref().clone()).unwrap(),
            "{\"key\":1,\"value\":0.5}\n\
             {\"key\":2,\"value\":-1.0}\n\
             {\"key\":3,\"value\":null}\n"
        );
    }

    /// A writer that fails every write with `kind`.
    struct Failing(std::io::ErrorKind);
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_errors_name_the_output() {
        let mut sink = WriterSink::new(Failing(std::io::ErrorKind::StorageFull), "standard output");
        let err = sink.write(&Record::new(1, 1.0, 1)).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot write to standard output: "),
            "{err}"
        );
    }

    #[test]
    fn a_broken_pipe_says_the_output_is_closed() {
        let mut sink = WriterSink::new(Failing(std::io::ErrorKind::BrokenPipe), "standard output");
        let err = sink.write(&Record::new(1, 1.0, 1)).unwrap_err();
        assert!(OutputClosed::is_output_closed(err.as_ref()), "{err}");
        assert_eq!(err.to_string(), "standard output was closed");
    }
}
