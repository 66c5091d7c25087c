//! The `file` source with `format: avro`: the values of an Avro object container file, one
//! event each ([`crate::formats::container`], the mapping in `docs/formats.md`).
//!
//! As with lines, subtask `i` of `p` keeps the values whose 0-based index `n` has
//! `n % p == i`; `key` and `timestamp` are read from the event as for JSON lines. A value that
//! does not decode ends the file and follows `on_error` (with `skip` or a dead letter the
//! source then ends). A restore skips the values read before the checkpoint.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tidemark_runtime::{
    state_codec, BoxError, Output, PollContext, Record, Source, SourceErrorCounts, SourceLag,
    SourceStatus, SubtaskContext, Value,
};

use crate::formats::container::ContainerEvents;
use crate::json_lines::{LineError, LineReader, Rejects, Stamping};
use crate::on_error::OnErrorFactory;
use crate::positions::{self, FileLength, RestoreError};

/// Where a subtask of an Avro `file` source continues from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct AvroFilePosition {
    path: PathBuf,
    /// Values read (by every subtask's count: all of them, this subtask's or not).
    values: u64,
    parallelism: u64,
    malformed: u64,
    dead_letter: Option<FileLength>,
}

/// One subtask of the `file` source reading an Avro object container file.
#[derive(Debug)]
pub struct AvroFileSource {
    path: PathBuf,
    name: String,
    events: ContainerEvents,
    subtask: u64,
    parallelism: u64,
    rejects: Rejects,
    reader: LineReader,
    stamping: Stamping,
    finished: bool,
}

impl AvroFileSource {
    /// Opens `path` (resolved) for subtask `ctx`.
    pub(crate) fn open(
        path: &std::path::Path,
        reader: LineReader,
        stamping: Stamping,
        ctx: &SubtaskContext,
        on_error: &OnErrorFactory,
    ) -> Result<Self, BoxError> {
        Ok(AvroFileSource {
            path: path.to_owned(),
            name: path.display().to_string(),
            events: ContainerEvents::open(path)?,
            subtask: ctx.subtask as u64,
            parallelism: ctx.parallelism.max(1) as u64,
            rejects: Rejects::new(on_error, &ctx.vertex_id)?,
            reader,
            stamping,
            finished: false,
        })
    }

    fn end(&mut self) -> Result<SourceStatus, BoxError> {
        self.finished = true;
        self.rejects.finish()?;
        Ok(SourceStatus::Finished)
    }
}

impl Source for AvroFileSource {
    fn polls_without_waiting(&self) -> bool {
        true
    }

    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.finished {
            return Ok(SourceStatus::Finished);
        }
        let mut emitted = 0;
        while emitted < ctx.max_records {
            let index = self.events.read();
            let Some(next) = self.events.next_event() else {
                return self.end();
            };
            if index % self.parallelism != self.subtask {
                if next.is_err() {
                    return self.end();
                }
                continue;
            }
            let number = index + 1;
            let event = match next {
                Ok(event) => event,
                Err(e) => {
                    // The blocks after a value that does not decode cannot be found.
                    self.rejects
                        .reject(&LineError::new(e), &self.name, number, b"")?;
                    return self.end();
                }
            };
            match self
                .reader
                .settle(Record::with_event(Value::Null, event, 0))
            {
                Ok(read) => {
                    out.emit(self.stamping.stamp(read, ctx.now_nanos));
                    emitted += 1;
                }
                Err(e) => self.rejects.reject(&e, &self.name, number, b"")?,
            }
        }
        Ok(SourceStatus::Ready)
    }

    fn lag(&self, _now_nanos: i64) -> SourceLag {
        SourceLag {
            records: -1,
            bytes: -1,
        }
    }

    fn input_errors(&self) -> SourceErrorCounts {
        SourceErrorCounts {
            malformed: self.rejects.malformed,
            ..SourceErrorCounts::default()
        }
    }

    fn resumable(&self) -> bool {
        true
    }

    fn position(&mut self, checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        Ok(state_codec::encode(&AvroFilePosition {
            path: self.path.clone(),
            values: self.events.read(),
            parallelism: self.parallelism,
            malformed: self.rejects.malformed,
            dead_letter: self.rejects.checkpoint(checkpoint)?,
        })?)
    }

    fn resume(&mut self, position: &[u8]) -> Result<(), BoxError> {
        let what = format!("the file source {}", self.name);
        let p: AvroFilePosition = positions::decode(&what, position)?;
        if !positions::same_file(&p.path, &self.path) {
            return Err(RestoreError::OtherFile {
                what: "file source input",
                recorded: p.path.display().to_string(),
                current: self.name.clone(),
            }
            .into());
        }
        if p.parallelism != self.parallelism {
            return Err(RestoreError::Parallelism {
                what,
                recorded: p.parallelism,
                current: self.parallelism,
            }
            .into());
        }
        self.rejects.restore(p.dead_letter.as_ref(), p.malformed)?;
        while self.events.read() < p.values {
            if self.events.next_event().is_none() {
                return Err(format!(
                    "{}: the checkpoint read {} values, the file now has {}",
                    self.name,
                    p.values,
                    self.events.read()
                )
                .into());
            }
        }
        Ok(())
    }
}
