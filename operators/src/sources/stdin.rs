//! The `stdin` source: reads events from standard input, one per line, until it closes.
//!
//! ```yaml
//! sources:
//!   input:
//!     type: stdin
//!     format: json                # json (default) | text: {"message": "<the line>"}
//!     key: user                   # CEL over the event (default: the field `key` if present)
//!     timestamp: ts               # CEL over the event (default: the field `timestamp` if present)
//!     on_error: skip              # fail (default) | skip | {dead_letter: PATH}
//!     timestamps: create          # create (default) | ingestion
//! ```
//!
//! Formats, keys, errors and timestamps work as in the [`file`](super::file) source; errors name
//! `<stdin>` and the 1-based line. A reader thread reads and parses the lines and hands them over
//! in batches through a bounded channel, so a poll never blocks: when nothing has arrived it
//! returns [`SourceStatus::Idle`] and latency markers keep flowing while the input is quiet. A
//! batch is handed over when it is full or as soon as the next read could block, so single lines
//! typed or piped slowly go through at once. Only subtask 0 reads; other subtasks finish at once.
//! Lag is unknown (-1).
//!
//! Not resumable: standard input cannot be read again, so a job with a `stdin` source cannot be
//! restored from a checkpoint ([`Source::resumable`] is false; the runtime refuses the restore,
//! naming the source, before anything starts).
//!
//! If the job ends while standard input stays open, the reader thread stays blocked in its read
//! until the input closes or the process exits; it exits at its next line.

use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;

use serde::Deserialize;
use tidemark_runtime::{
    BoxError, Output, PollContext, Source, SourceErrorCounts, SourceStatus, SubtaskContext,
};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, Timestamps};
use crate::error::ConfigError;
use crate::json_lines::{self, Format, LineReader, LineRecord, Rejects, Stamping};
use crate::on_error::{ErrorPolicy, OnErrorFactory};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "stdin",
    kind: ComponentKind::Source,
    fields: &["format", "key", "timestamp", "on_error", "timestamps"],
    summary: "reads events from standard input: one JSON object (or text line) per line",
    build,
};

/// Lines per batch handed from the reader thread.
const LINES_PER_BATCH: usize = 1024;
/// Batches the channel holds before the reader thread waits.
const CHANNEL_BATCHES: usize = 16;

/// Settings of the `stdin` source.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinSourceConfig {
    /// How lines become events: `json` (default) or `text`.
    #[serde(default)]
    pub format: Format,
    /// The event field holding the record key (default: `key` if present).
    #[serde(default)]
    pub key: Option<String>,
    /// The event field holding the timestamp (default: `timestamp` if present).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// What to do with a malformed line.
    #[serde(default)]
    pub on_error: ErrorPolicy,
    /// Take the line's timestamp (`create`) or the time it is read (`ingestion`).
    #[serde(default)]
    pub timestamps: Timestamps,
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: Arc<StdinSourceConfig> = Arc::new(config::parse(INFO.type_name, config)?);
    // Expressions are compiled here, so that a bad one fails validation.
    json_lines::line_reader(
        INFO.type_name,
        config.format,
        config.key.as_deref(),
        config.timestamp.as_deref(),
    )?;
    let on_error = OnErrorFactory::new(config.on_error.clone(), &env.job_dir);
    Ok(Built::Source(Box::new(move |ctx: &SubtaskContext| {
        let source = if ctx.subtask == 0 {
            let rejects = Rejects::new(&on_error, &ctx.vertex_id)?;
            StdinSource::spawn_with(std::io::stdin(), "<stdin>", &config, rejects)?
        } else {
            StdinSource::inactive()
        };
        Ok(Box::new(source) as Box<dyn Source>)
    })))
}

enum Message {
    /// Parsed lines.
    Lines(Vec<LineRecord>),
    /// Reading failed or a line was malformed with `on_error: fail`.
    Failed(String),
}

struct Reading {
    rx: Receiver<Message>,
    pending: std::vec::IntoIter<LineRecord>,
    malformed: Arc<AtomicU64>,
}

/// One subtask of the `stdin` source (or any line reader run on its own thread).
pub struct StdinSource {
    reading: Option<Reading>,
    origin: String,
    stamping: Stamping,
}

impl std::fmt::Debug for StdinSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdinSource")
            .field("origin", &self.origin)
            .field("active", &self.reading.is_some())
            .finish()
    }
}

impl StdinSource {
    /// Starts a thread reading lines from `input`; errors name `origin`. (A dead letter's path
    /// is taken as it is.)
    pub fn spawn<R: Read + Send + 'static>(
        input: R,
        origin: &str,
        config: &StdinSourceConfig,
    ) -> Result<Self, BoxError> {
        let on_error = OnErrorFactory::new(config.on_error.clone(), std::path::Path::new(""));
        let rejects = Rejects::new(&on_error, "stdin")?;
        Self::spawn_with(input, origin, config, rejects)
    }

    pub(crate) fn spawn_with<R: Read + Send + 'static>(
        input: R,
        origin: &str,
        config: &StdinSourceConfig,
        rejects: Rejects,
    ) -> Result<Self, BoxError> {
        let (tx, rx) = sync_channel(CHANNEL_BATCHES);
        let malformed = Arc::new(AtomicU64::new(0));
        let thread = ReaderThread {
            origin: origin.to_owned(),
            rejects,
            lines: json_lines::line_reader(
                INFO.type_name,
                config.format,
                config.key.as_deref(),
                config.timestamp.as_deref(),
            )
            .map_err(|e| e.to_string())?,
            malformed: malformed.clone(),
            tx,
        };
        std::thread::Builder::new()
            .name("tidemark-stdin".to_owned())
            .spawn(move || thread.run(input))
            .map_err(|e| format!("cannot start the thread reading {origin}: {e}"))?;
        Ok(StdinSource {
            reading: Some(Reading {
                rx,
                pending: Vec::new().into_iter(),
                malformed,
            }),
            origin: origin.to_owned(),
            stamping: Stamping::new(config.timestamps),
        })
    }

    /// A subtask that reads nothing and finishes at once.
    pub fn inactive() -> Self {
        StdinSource {
            reading: None,
            origin: String::new(),
            stamping: Stamping::new(Timestamps::Ingestion),
        }
    }
}

impl Source for StdinSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let Some(reading) = &mut self.reading else {
            return Ok(SourceStatus::Finished);
        };
        let mut emitted = 0;
        loop {
            while emitted < ctx.max_records {
                let Some(parsed) = reading.pending.next() else {
                    break;
                };
                out.emit(self.stamping.stamp(parsed, ctx.now_nanos));
                emitted += 1;
            }
            if emitted >= ctx.max_records {
                return Ok(SourceStatus::Ready);
            }
            match reading.rx.try_recv() {
                Ok(Message::Lines(lines)) => {
                    reading.pending = lines.into_iter();
                }
                Ok(Message::Failed(message)) => return Err(message.into()),
                Err(TryRecvError::Empty) => return Ok(SourceStatus::Idle { until: None }),
                Err(TryRecvError::Disconnected) => return Ok(SourceStatus::Finished),
            }
        }
    }

    fn input_errors(&self) -> SourceErrorCounts {
        SourceErrorCounts {
            malformed: self
                .reading
                .as_ref()
                .map_or(0, |r| r.malformed.load(Ordering::Relaxed)),
            ..SourceErrorCounts::default()
        }
    }

    /// Standard input cannot be read again: a job with a `stdin` source is not restored from a
    /// checkpoint (the runtime refuses it, naming the source, before anything starts).
    fn resumable(&self) -> bool {
        false
    }

    fn resume(&mut self, _position: &[u8]) -> Result<(), BoxError> {
        Err(
            "the stdin source cannot resume from a checkpoint: standard input cannot be read \
             again"
                .into(),
        )
    }
}

struct ReaderThread {
    origin: String,
    rejects: Rejects,
    lines: LineReader,
    malformed: Arc<AtomicU64>,
    tx: SyncSender<Message>,
}

impl ReaderThread {
    /// Reads to the end of `input` (or the first failure), handing over batches of lines. Ends
    /// early when the source is gone.
    fn run<R: Read>(mut self, input: R) {
        let mut reader = BufReader::with_capacity(64 * 1024, input);
        let mut buf = Vec::with_capacity(256);
        let mut batch = Vec::with_capacity(LINES_PER_BATCH);
        let mut line = 0u64;
        loop {
            // Hand over what we have before a read that may block.
            let next_read_may_block = !reader.buffer().contains(&b'\n');
            if !batch.is_empty() && (batch.len() >= LINES_PER_BATCH || next_read_may_block) {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(LINES_PER_BATCH));
                if self.tx.send(Message::Lines(full)).is_err() {
                    return;
                }
            }
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.fail(
                        batch,
                        format!("{}: line {}: cannot read: {e}", self.origin, line + 1),
                    );
                    return;
                }
            }
            line += 1;
            match self.lines.parse(&buf, line) {
                Ok(None) => {}
                Ok(Some(parsed)) => batch.push(parsed),
                Err(e) => match self.rejects.reject(&e, &self.origin, line, &buf) {
                    Ok(()) => self
                        .malformed
                        .store(self.rejects.malformed, Ordering::Relaxed),
                    Err(message) => {
                        self.fail(batch, message);
                        return;
                    }
                },
            }
        }
        // Every dead-letter line is written (and a fresh file truncated if none was).
        if let Err(e) = self.rejects.finish() {
            self.fail(batch, e.to_string());
            return;
        }
        if !batch.is_empty() {
            let _ = self.tx.send(Message::Lines(batch));
        }
    }

    fn fail(&self, batch: Vec<LineRecord>, message: String) {
        if !batch.is_empty() && self.tx.send(Message::Lines(batch)).is_err() {
            return;
        }
        let _ = self.tx.send(Message::Failed(message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, poll};
    use std::io::Cursor;
    use std::sync::mpsc::{channel, Sender};
    use std::time::{Duration, Instant};
    use tidemark_runtime::{Record, TimestampType, Value};

    /// A reader that blocks until the test sends it bytes; closing the sender is end of input.
    struct Pipe {
        rx: std::sync::mpsc::Receiver<Vec<u8>>,
        held: Cursor<Vec<u8>>,
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            loop {
                let n = self.held.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                match self.rx.recv() {
                    Ok(bytes) => self.held = Cursor::new(bytes),
                    Err(_) => return Ok(0),
                }
            }
        }
    }

    fn pipe() -> (Sender<Vec<u8>>, Pipe) {
        let (tx, rx) = channel();
        (
            tx,
            Pipe {
                rx,
                held: Cursor::new(Vec::new()),
            },
        )
    }

    fn config(settings: serde_json::Value) -> StdinSourceConfig {
        config::parse("stdin", settings).unwrap()
    }

    /// Polls until a poll returns records or the source ends; a stuck test fails after 10 s.
    fn poll_until_records(s: &mut StdinSource, now: i64) -> (SourceStatus, Vec<Record>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, records) = poll(s, now, 100);
            if !records.is_empty() || status == SourceStatus::Finished {
                return (status, records);
            }
            assert!(Instant::now() < deadline, "no records arrived");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn polls_do_not_block_while_input_is_quiet() {
        let (tx, input) = pipe();
        let mut s = StdinSource::spawn(input, "<stdin>", &config(serde_json::json!({}))).unwrap();
        // Nothing written yet: the poll returns at once.
        let (status, records) = poll(&mut s, 5, 100);
        assert_eq!(
            (status, records.len()),
            (SourceStatus::Idle { until: None }, 0)
        );
        // One line arrives without the input closing: it is handed over at once.
        tx.send(b"{\"key\":1,\"value\":2,\"timestamp\":3}\n{\"key\":2".to_vec())
            .unwrap();
        let (status, records) = poll_until_records(&mut s, 5);
        assert_eq!(status, SourceStatus::Idle { until: None });
        assert_eq!(records.len(), 1);
        assert_eq!(
            (
                records[0].key().into_owned(),
                records[0].event_json(),
                records[0].timestamp
            ),
            (
                Value::Int(1),
                r#"{"key":1,"value":2,"timestamp":3}"#.to_owned(),
                3_000_000
            )
        );
        // The rest of the second line, then end of input.
        tx.send(b"}\n".to_vec()).unwrap();
        let (_, records) = poll_until_records(&mut s, 7);
        assert_eq!(records.len(), 1);
        assert_eq!(
            (
                records[0].key().into_owned(),
                records[0].timestamp,
                records[0].timestamp_type
            ),
            (Value::Int(2), 7, TimestampType::Ingestion)
        );
        drop(tx);
        let (status, records) = poll_until_records(&mut s, 8);
        assert_eq!((status, records.len()), (SourceStatus::Finished, 0));
    }

    #[test]
    fn reads_everything_in_batches_up_to_the_poll_size() {
        let body: String = (0..2500).map(|k| format!("{{\"key\":{k}}}\n")).collect();
        let mut s = StdinSource::spawn(
            Cursor::new(body.into_bytes()),
            "<stdin>",
            &config(serde_json::json!({"timestamps": "ingestion"})),
        )
        .unwrap();
        let mut keys = Vec::new();
        loop {
            let (status, records) = poll_until_records(&mut s, 1);
            assert!(records.len() <= 100);
            // Kept as the lines' text, the key read from it.
            assert!(records.iter().all(|r| r.is_text() && !r.event_made()));
            keys.extend(records.iter().map(|r| r.key().as_i64().unwrap()));
            if status == SourceStatus::Finished {
                break;
            }
        }
        assert_eq!(keys, (0..2500).collect::<Vec<i64>>());
    }

    #[test]
    fn malformed_lines_fail_or_are_counted() {
        let body = "{\"key\":1}\n{\"key\":\"one\"]\n{\"key\":3}\n";
        let mut s = StdinSource::spawn(
            Cursor::new(body.as_bytes().to_vec()),
            "<stdin>",
            &config(serde_json::json!({})),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let err = loop {
            match s.poll(
                &PollContext {
                    now_nanos: 0,
                    max_records: 10,
                },
                &mut Output::default(),
            ) {
                Err(e) => break e.to_string(),
                Ok(SourceStatus::Finished) => panic!("finished without the error"),
                Ok(_) => assert!(Instant::now() < deadline),
            }
        };
        assert_eq!(
            err,
            "<stdin>: line 2, column 13: malformed line: invalid JSON: expected `,` or `}`; \
             expected one JSON object per line"
        );

        let mut s = StdinSource::spawn(
            Cursor::new(body.as_bytes().to_vec()),
            "<stdin>",
            &config(serde_json::json!({"on_error": "skip"})),
        )
        .unwrap();
        let mut keys = Vec::new();
        loop {
            let (status, records) = poll_until_records(&mut s, 0);
            keys.extend(records.iter().map(|r| r.key().as_i64().unwrap()));
            if status == SourceStatus::Finished {
                break;
            }
        }
        assert_eq!(keys, [1, 3]);
        assert_eq!(s.input_errors().malformed, 1);
    }

    #[test]
    fn only_subtask_zero_reads() {
        let built = build(serde_json::json!({}), &BuildEnv::default()).unwrap();
        let Built::Source(factory) = built else {
            panic!("not a source")
        };
        let mut other = factory(&ctx(1, 2, 0)).unwrap();
        let mut out = Output::default();
        let status = other
            .poll(
                &PollContext {
                    now_nanos: 0,
                    max_records: 10,
                },
                &mut out,
            )
            .unwrap();
        assert_eq!((status, out.len()), (SourceStatus::Finished, 0));
    }

    #[test]
    fn it_says_it_cannot_resume() {
        let mut s = StdinSource::spawn(
            Cursor::new(b"{\"key\":1}\n".to_vec()),
            "<stdin>",
            &config(serde_json::json!({})),
        )
        .unwrap();
        assert!(!s.resumable());
        let err = s.resume(&[]).unwrap_err().to_string();
        assert_eq!(
            err,
            "the stdin source cannot resume from a checkpoint: standard input cannot be read again"
        );
    }

    #[test]
    fn a_dead_letter_file_of_an_earlier_run_is_emptied_at_the_end_of_input() {
        let dir = crate::test_util::TempDir::new("stdin-dead-letter");
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, "an earlier run\n").unwrap();
        let settings = serde_json::json!({"on_error": {"dead_letter": path.display().to_string()}});
        let mut s = StdinSource::spawn(
            Cursor::new(b"{\"key\":1}\n".to_vec()),
            "<stdin>",
            &config(settings),
        )
        .unwrap();
        loop {
            let (status, _) = poll_until_records(&mut s, 0);
            if status == SourceStatus::Finished {
                break;
            }
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
