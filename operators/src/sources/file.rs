//! The `file` source: reads events from a file, one per line, once, to its end.
//!
//! ```yaml
//! sources:
//!   events:
//!     type: file
//!     path: data/events.jsonl     # relative to the job file's folder
//!     format: json                # json (default): one JSON object per line | text | avro
//!     key: user                   # CEL over the event (default: the field `key` if present)
//!     timestamp: ts               # CEL over the event (default: the field `timestamp` if present)
//!     on_error: skip              # fail (default) | skip | {dead_letter: PATH}
//!     timestamps: create          # create (default): the event's timestamp | ingestion
//! ```
//!
//! - `format: avro`: the file is an Avro object container file and each value one event
//!   (`crate::sources::avro_file`, docs/formats.md); the rest of this list is about lines.
//! - Each line is one event: a JSON object (`format: json`; any other line is malformed, blank
//!   lines are skipped) or `{"message": "<the line>"}` (`format: text`); see the line formats
//!   in [`crate`]'s docs. A UTF-8 byte order mark on the first line is ignored.
//! - The key is the value of the CEL expression `key:` over the event (a plain field name is
//!   looked up directly; a line it fails on is malformed); without `key:`, the field `key` if
//!   the event has one, else no key (`null`).
//! - The timestamp is the value of the CEL expression `timestamp:` (a line it fails on is
//!   malformed); without it, the field `timestamp` if present and not `null`. An int is milliseconds since the Unix epoch, a string
//!   RFC 3339 (`2026-11-30T12:00:00.250Z`). Without a timestamp, or with `timestamps:
//!   ingestion`, the record is stamped with the time it is read (type `ingestion`).
//! - A malformed line fails the job with the file's path, the 1-based line (and column) and what
//!   is wrong; with `on_error: skip` it is skipped and counted
//!   (`tidemark_source_malformed_records_total`); with `on_error: {dead_letter: PATH}` it is
//!   counted and written to PATH (shared by the subtasks, created when the job starts) as
//!   `{"vertex":"<id>","error":"<the message>","record":"<the line>"}`.
//! - Range checks on create timestamps (`timestamp_before_max`, `timestamp_after_max`,
//!   `invalid_timestamp`) and watermarks are options of every source vertex, applied by the
//!   runtime to what this source emits ([`tidemark_runtime::SourceOptions`]); the job file
//!   sets them beside `type`.
//! - With parallelism `p`, every subtask reads the whole file and subtask `i` keeps the lines
//!   whose 0-based index `n` has `n % p == i` (subtask 0 takes lines 1, p+1, 2p+1, …).
//! - A regular file never makes a poll wait, so behind a hash edge into a task of the same
//!   parallelism a subtask shares its thread with the subtask it feeds (docs/architecture.md,
//!   "Threads shared by a source task and the task it feeds"); a named pipe or a device keeps
//!   a thread of its own.
//! - Lag: the bytes not yet read (the file's size when opened, less what this subtask has read)
//!   in `tidemark_source_lag_bytes`; records are -1 (unknown).
//! - The file is opened when the job starts (a missing file fails the start, naming it).
//! - On restore (checkpoints to a directory): each subtask records the byte offset of the next
//!   line it has not read, the number of lines read before it, the malformed lines counted so
//!   far and the length of the dead-letter file; a restored subtask seeks there, so line numbers
//!   in messages and dead-letter lines stay right, and the dead-letter file is cut back to its
//!   recorded length. A file now shorter than the offset, or whose byte before the offset is
//!   not a line break, is refused naming the file (it changed after the checkpoint). Records
//!   stamped with the ingestion time get the time they are read again.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tidemark_runtime::{
    state_codec, BoxError, Output, PollContext, Source, SourceErrorCounts, SourceLag, SourceStatus,
    SubtaskContext,
};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, Timestamps};
use crate::error::ConfigError;
use crate::json_lines::{self, Format, LineReader, Rejects, Stamping};
use crate::on_error::{ErrorPolicy, OnErrorFactory};
use crate::positions::{self, FileLength, RestoreError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "file",
    kind: ComponentKind::Source,
    fields: &[
        "path",
        "format",
        "key",
        "timestamp",
        "on_error",
        "timestamps",
    ],
    summary: "reads events from a file: one JSON object (or text line) per line",
    build,
};

/// Settings of the `file` source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// The file to read; relative paths resolve against the job file's folder.
    pub path: PathBuf,
    /// How the file becomes events: `json` (default) or `text` lines, or `avro`.
    #[serde(default)]
    pub format: FileFormat,
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

/// What a `file` source reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// Each line is `{"message": "<the line>"}`.
    Text,
    /// An Avro object container file.
    Avro,
}

impl FileSourceConfig {
    /// Checks the settings and resolves `path` against `job_dir`.
    pub fn resolve(mut self, job_dir: &Path) -> Result<Self, String> {
        if self.path.as_os_str().is_empty() {
            return Err("must not be empty".to_owned());
        }
        self.path = job_dir.join(&self.path);
        Ok(self)
    }

    fn stamping(&self) -> Stamping {
        Stamping::new(self.timestamps)
    }

    fn line_reader(&self) -> Result<LineReader, ConfigError> {
        json_lines::line_reader(
            INFO.type_name,
            match self.format {
                FileFormat::Text => Format::Text,
                FileFormat::Json | FileFormat::Avro => Format::Json,
            },
            self.key.as_deref(),
            self.timestamp.as_deref(),
        )
    }
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: FileSourceConfig = config::parse(INFO.type_name, config)?;
    let config = Arc::new(
        config
            .resolve(&env.job_dir)
            .map_err(|m| config::invalid(INFO.type_name, "path", m))?,
    );
    if env.check_inputs && !config.path.is_file() {
        return Err(config::invalid(
            INFO.type_name,
            "path",
            format!("no such file: {}", config.path.display()),
        ));
    }
    // Expressions are compiled here, so that a bad one fails validation.
    config.line_reader()?;
    let on_error = OnErrorFactory::new(config.on_error.clone(), &env.job_dir);
    if config.format == FileFormat::Avro {
        return Ok(Built::Source(Box::new(move |ctx: &SubtaskContext| {
            let source = crate::sources::avro_file::AvroFileSource::open(
                &config.path,
                config.line_reader().map_err(|e| e.to_string())?,
                config.stamping(),
                ctx,
                &on_error,
            )?;
            Ok(Box::new(source) as Box<dyn Source>)
        })));
    }
    Ok(Built::Source(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(FileSource::open_with(&config, ctx, &on_error)?) as Box<dyn Source>)
    })))
}

/// Where a subtask of the `file` source continues from: its [`Source::position`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSourcePosition {
    /// The file read.
    pub path: PathBuf,
    /// The byte offset of the next line not read.
    pub offset: u64,
    /// Lines read before it (so the next one is line `lines + 1`).
    pub lines: u64,
    /// The parallelism of the vertex (which lines are this subtask's depends on it).
    pub parallelism: u64,
    /// Malformed lines skipped or dead-lettered so far.
    pub malformed: u64,
    /// The dead-letter file, if any, and its length.
    pub dead_letter: Option<FileLength>,
}

/// One subtask of the `file` source.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    name: String,
    reader: BufReader<File>,
    line: Vec<u8>,
    /// Lines read so far (the 1-based number of the last one).
    lines_read: u64,
    size: u64,
    consumed: u64,
    subtask: u64,
    parallelism: u64,
    rejects: Rejects,
    lines: LineReader,
    stamping: Stamping,
    errors: SourceErrorCounts,
    finished: bool,
    /// The path names a regular file: a read returns what the file holds (or its end) without
    /// waiting for a writer, as a pipe's would.
    regular: bool,
}

impl FileSource {
    /// Opens `config.path` (already resolved) for subtask `ctx.subtask`.
    pub fn open(config: &FileSourceConfig, ctx: &SubtaskContext) -> Result<Self, BoxError> {
        let on_error = OnErrorFactory::new(config.on_error.clone(), Path::new(""));
        Self::open_with(config, ctx, &on_error)
    }

    /// As [`FileSource::open`], with the vertex's `on_error` (its dead-letter file is shared by
    /// the subtasks).
    pub fn open_with(
        config: &FileSourceConfig,
        ctx: &SubtaskContext,
        on_error: &OnErrorFactory,
    ) -> Result<Self, BoxError> {
        let name = config.path.display().to_string();
        let file =
            File::open(&config.path).map_err(|e| format!("cannot open file \"{name}\": {e}"))?;
        let metadata = file
            .metadata()
            .map_err(|e| format!("cannot read the size of \"{name}\": {e}"))?;
        let size = metadata.len();
        Ok(FileSource {
            path: config.path.clone(),
            name,
            reader: BufReader::with_capacity(64 * 1024, file),
            line: Vec::with_capacity(256),
            lines_read: 0,
            size,
            consumed: 0,
            subtask: ctx.subtask as u64,
            parallelism: ctx.parallelism.max(1) as u64,
            rejects: Rejects::new(on_error, &ctx.vertex_id)?,
            lines: config.line_reader().map_err(|e| e.to_string())?,
            stamping: config.stamping(),
            errors: SourceErrorCounts::default(),
            finished: false,
            regular: metadata.is_file(),
        })
    }
}

/// Reads past one line (up to and with its line break, or to the end of the input) without
/// copying it; returns its length in bytes, 0 at the end.
fn skip_line(reader: &mut impl BufRead) -> io::Result<usize> {
    let mut n = 0;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(n);
        }
        match memchr::memchr(b'\n', buf) {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(n + i + 1);
            }
            None => {
                let len = buf.len();
                reader.consume(len);
                n += len;
            }
        }
    }
}

impl Source for FileSource {
    /// A regular file never makes `poll` wait (a named pipe or a device may): its subtask can
    /// share a thread with the channel task it feeds (docs/architecture.md, "Threads").
    fn polls_without_waiting(&self) -> bool {
        self.regular
    }

    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.finished {
            return Ok(SourceStatus::Finished);
        }
        let mut emitted = 0;
        while emitted < ctx.max_records {
            // Another subtask's line is only passed over, not copied.
            let mine = self.lines_read % self.parallelism == self.subtask;
            let read = if mine {
                self.line.clear();
                self.reader.read_until(b'\n', &mut self.line)
            } else {
                skip_line(&mut self.reader)
            };
            let n = read.map_err(|e| {
                format!(
                    "{}: line {}: cannot read: {e}",
                    self.name,
                    self.lines_read + 1
                )
            })?;
            if n == 0 {
                self.finished = true;
                self.rejects.finish()?;
                return Ok(SourceStatus::Finished);
            }
            self.consumed += n as u64;
            self.lines_read += 1;
            if !mine {
                continue;
            }
            match self.lines.parse(&self.line, self.lines_read) {
                Ok(None) => {}
                Ok(Some(parsed)) => {
                    out.emit(self.stamping.stamp(parsed, ctx.now_nanos));
                    emitted += 1;
                }
                Err(e) => self
                    .rejects
                    .reject(&e, &self.name, self.lines_read, &self.line)?,
            }
        }
        Ok(SourceStatus::Ready)
    }

    fn lag(&self, _now_nanos: i64) -> SourceLag {
        SourceLag {
            records: -1,
            bytes: self.size.saturating_sub(self.consumed) as i64,
        }
    }

    fn input_errors(&self) -> SourceErrorCounts {
        SourceErrorCounts {
            malformed: self.rejects.malformed,
            ..self.errors
        }
    }

    fn resumable(&self) -> bool {
        true
    }

    fn position(&mut self, checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        let position = FileSourcePosition {
            path: self.path.clone(),
            offset: self.consumed,
            lines: self.lines_read,
            parallelism: self.parallelism,
            malformed: self.rejects.malformed,
            dead_letter: self.rejects.checkpoint(checkpoint)?,
        };
        Ok(state_codec::encode(&position)?)
    }

    fn resume(&mut self, position: &[u8]) -> Result<(), BoxError> {
        const WHAT: &str = "file source input";
        let p: FileSourcePosition =
            positions::decode(&format!("the file source {}", self.name), position)?;
        if !positions::same_file(&p.path, &self.path) {
            return Err(RestoreError::OtherFile {
                what: WHAT,
                recorded: p.path.display().to_string(),
                current: self.name.clone(),
            }
            .into());
        }
        if p.parallelism != self.parallelism {
            return Err(RestoreError::Parallelism {
                what: format!("the file source {}", self.name),
                recorded: p.parallelism,
                current: self.parallelism,
            }
            .into());
        }
        let size = positions::file_length(WHAT, &self.path)?;
        if size < p.offset {
            return Err(RestoreError::Shorter {
                what: WHAT,
                path: self.name.clone(),
                actual: size,
                recorded: p.offset,
            }
            .into());
        }
        let io = |source| RestoreError::Io {
            what: WHAT,
            path: self.name.clone(),
            source,
        };
        let file = self.reader.get_mut();
        if p.offset > 0 && p.offset < size {
            // The line before ends here: anything else means the file changed.
            let mut before = [0u8];
            file.seek(SeekFrom::Start(p.offset - 1)).map_err(io)?;
            file.read_exact(&mut before).map_err(io)?;
            if before[0] != b'\n' {
                return Err(RestoreError::NotALineStart {
                    path: self.name.clone(),
                    offset: p.offset,
                }
                .into());
            }
        }
        self.rejects.restore(p.dead_letter.as_ref(), p.malformed)?;
        self.reader.seek(SeekFrom::Start(p.offset)).map_err(io)?;
        self.size = size;
        self.consumed = p.offset;
        self.lines_read = p.lines;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, poll, TempDir};
    use serde_json::json;
    use tidemark_runtime::{Record, TimestampType};

    const MS: i64 = 1_000_000;

    fn int_key(r: &Record) -> i64 {
        r.key().as_i64().unwrap()
    }

    fn source(
        dir: &TempDir,
        body: &str,
        settings: serde_json::Value,
        i: usize,
        p: usize,
    ) -> FileSource {
        std::fs::write(dir.path().join("in.jsonl"), body).unwrap();
        let mut settings = settings;
        settings["path"] = json!("in.jsonl");
        let config: FileSourceConfig = config::parse("file", settings).unwrap();
        let config = config.resolve(dir.path()).unwrap();
        FileSource::open(&config, &ctx(i, p, 0)).unwrap()
    }

    fn read_all(s: &mut FileSource, now: i64) -> Result<Vec<Record>, BoxError> {
        let mut all = Vec::new();
        loop {
            let mut out = Output::default();
            let status = s.poll(
                &PollContext {
                    now_nanos: now,
                    max_records: 2,
                },
                &mut out,
            )?;
            all.extend_from_slice(out.records());
            if status == SourceStatus::Finished {
                return Ok(all);
            }
        }
    }

    const BODY: &str = "{\"key\":1,\"value\":1.5,\"timestamp\":1000}\n\
                        {\"key\":2}\n\
                        \n\
                        {\"key\":3,\"value\":-2,\"timestamp\":3000,\"note\":\"x\"}\r\n\
                        {\"key\":4,\"value\":4,\"timestamp\":null}";

    #[test]
    fn reads_records_and_their_timestamps() {
        let dir = TempDir::new("file-source-read");
        let mut s = source(&dir, BODY, json!({}), 0, 1);
        let now = 9_000 * MS;
        let records = read_all(&mut s, now).unwrap();
        let expected = [
            (
                1,
                r#"{"key":1,"value":1.5,"timestamp":1000}"#,
                1_000 * MS,
                TimestampType::Create,
            ),
            (2, r#"{"key":2}"#, now, TimestampType::Ingestion),
            (
                3,
                r#"{"key":3,"value":-2,"timestamp":3000,"note":"x"}"#,
                3_000 * MS,
                TimestampType::Create,
            ),
            (
                4,
                r#"{"key":4,"value":4,"timestamp":null}"#,
                now,
                TimestampType::Ingestion,
            ),
        ];
        let got: Vec<_> = records
            .iter()
            .map(|r| (int_key(r), r.event_json(), r.timestamp, r.timestamp_type))
            .collect();
        let expected = expected.map(|(k, e, t, tt)| (k, e.to_owned(), t, tt));
        assert_eq!(got, expected);
        assert_eq!(s.input_errors(), SourceErrorCounts::default());
        assert_eq!(
            s.lag(now),
            SourceLag {
                records: -1,
                bytes: 0
            }
        );

        let mut s = source(&dir, BODY, json!({"timestamps": "ingestion"}), 0, 1);
        let records = read_all(&mut s, now).unwrap();
        assert!(records
            .iter()
            .all(|r| r.timestamp == now && r.timestamp_type == TimestampType::Ingestion));
    }

    /// A regular file may share its subtask's thread (docs/architecture.md, "Threads"); a
    /// path that is not one (a device here; a named pipe the same) may block a read, so not.
    #[test]
    fn only_a_regular_file_polls_without_waiting() {
        let dir = TempDir::new("file-source-regular");
        assert!(source(&dir, BODY, json!({}), 0, 2).polls_without_waiting());
        let config: FileSourceConfig = config::parse("file", json!({"path": "/dev/null"})).unwrap();
        let config = config.resolve(dir.path()).unwrap();
        let mut device = FileSource::open(&config, &ctx(0, 2, 0)).unwrap();
        assert!(!device.polls_without_waiting());
        assert!(read_all(&mut device, 0).unwrap().is_empty());
    }

    #[test]
    fn byte_lag_counts_what_is_not_read_yet() {
        let dir = TempDir::new("file-source-lag");
        let mut s = source(&dir, BODY, json!({}), 0, 1);
        assert_eq!(s.lag(0).bytes, BODY.len() as i64);
        let (status, records) = poll(&mut s, 0, 1);
        assert_eq!((status, records.len()), (SourceStatus::Ready, 1));
        let first_line = BODY.find('\n').unwrap() + 1;
        assert_eq!(s.lag(0).bytes, (BODY.len() - first_line) as i64);
    }

    #[test]
    fn a_malformed_line_fails_naming_file_and_line() {
        let dir = TempDir::new("file-source-fail");
        let body = "{\"key\":1}\n{\"key\":2}\n{\"value\":3\n{\"key\":4}\n";
        let mut s = source(&dir, body, json!({}), 0, 1);
        let err = read_all(&mut s, 0).unwrap_err().to_string();
        let path = dir.path().join("in.jsonl").display().to_string();
        assert_eq!(
            err,
            format!(
                "{path}: line 3, column 10: malformed line: invalid JSON: EOF while parsing an \
                 object; expected one JSON object per line"
            )
        );
        // A named key field that is missing makes the line malformed.
        let mut s = source(&dir, body, json!({"key": "user"}), 0, 1);
        let err = read_all(&mut s, 0).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{path}: line 1: malformed line: key: no field `user` in the event (it has key)"
            )
        );
    }

    #[test]
    fn on_error_skip_counts_malformed_lines() {
        let dir = TempDir::new("file-source-skip");
        let body = "{\"key\":1}\nnope\n[1,2]\n{\"key\":3}\n{\"key\":4,\"timestamp\":\"x\"}\n";
        let mut s = source(&dir, body, json!({"on_error": "skip"}), 0, 1);
        let keys: Vec<i64> = read_all(&mut s, 0).unwrap().iter().map(int_key).collect();
        assert_eq!(keys, [1, 3]);
        assert_eq!(s.input_errors().malformed, 3);
    }

    #[test]
    fn on_error_dead_letter_counts_and_writes_malformed_lines() {
        let dir = TempDir::new("file-source-dead-letter");
        let body = "{\"key\":1}\n[1, 2]\n{\"key\":3}\nnot json\r\n";
        std::fs::write(dir.path().join("in.jsonl"), body).unwrap();
        let config: FileSourceConfig = config::parse(
            "file",
            json!({"path": "in.jsonl", "on_error": {"dead_letter": "bad.jsonl"}}),
        )
        .unwrap();
        let config = config.resolve(dir.path()).unwrap();
        let on_error = OnErrorFactory::new(config.on_error.clone(), dir.path());
        let mut s = FileSource::open_with(&config, &ctx(0, 1, 0), &on_error).unwrap();
        let keys: Vec<i64> = read_all(&mut s, 0).unwrap().iter().map(int_key).collect();
        assert_eq!(keys, [1, 3]);
        assert_eq!(s.input_errors().malformed, 2);
        let path = dir.path().join("in.jsonl").display().to_string();
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("bad.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                json!({"vertex": "v", "record": "[1, 2]", "error": format!(
                    "{path}: line 2: malformed line: expected a JSON object, found a list")}),
                json!({"vertex": "v", "record": "not json", "error": format!(
                    "{path}: line 4, column 2: malformed line: invalid JSON: expected ident; \
                     expected one JSON object per line")}),
            ]
        );
    }

    #[test]
    fn events_are_kept_as_text_and_every_malformed_line_is_caught_at_the_source() {
        // Good lines, and lines a full parse refuses for every kind of reason: each must be
        // refused when read, with its line number, though the good ones are only checked.
        let lines: [&[u8]; 14] = [
            br#"{"user":"u1","amount":12.5,"status":"paid","ts":1000}"#,
            br#"{"user":"u2","amount":1e400,"ts":1000}"#,
            br#"{"user":"u3","ts":1000} trailing"#,
            br#"{"user":"\q","ts":1000}"#,
            b"{\"user\":\"\xFF\xFE\",\"ts\":1000}",
            b"{\"user\":\"a\tb\",\"ts\":1000}",
            br#"{"user":"u7","tags":[1,],"ts":1000}"#,
            br#"{"user":"u8","ts":1000"#,
            br#"{"user":"\ud800","ts":1000}"#,
            br#"{"user": "u10", "n": {"deep": [true, null, -0.5e-3]}, "ts": 1001}"#,
            br#""just a string""#,
            br#"{"user":"u12","amount":-7,"ts":1002}"#,
            br#"{"user":"u13","amount":01,"ts":1000}"#,
            br#"{"user":"u14","ts":"not a time"}"#,
        ];
        let mut body = Vec::new();
        for l in lines {
            body.extend_from_slice(l);
            body.push(b'\n');
        }
        let dir = TempDir::new("file-source-text-events");
        std::fs::write(dir.path().join("in.jsonl"), &body).unwrap();
        let config: FileSourceConfig = config::parse(
            "file",
            json!({"path": "in.jsonl", "timestamp": "ts", "key": "user",
                   "on_error": {"dead_letter": "bad.jsonl"}}),
        )
        .unwrap();
        let config = config.resolve(dir.path()).unwrap();
        let on_error = OnErrorFactory::new(config.on_error.clone(), dir.path());
        let mut s = FileSource::open_with(&config, &ctx(0, 1, 0), &on_error).unwrap();
        let records = read_all(&mut s, 0).unwrap();

        // The reference, independently: serde_json's own parse of each line, and the `ts`
        // setting's demand of a number or an RFC 3339 time.
        let good: Vec<(usize, serde_json::Value)> = lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let v: serde_json::Value = serde_json::from_slice(l).ok()?;
                (v.is_object() && v["ts"].is_number()).then_some((i + 1, v))
            })
            .collect();
        assert_eq!(
            good.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [1, 10, 12]
        );
        assert_eq!(records.len(), good.len());
        for (r, (_, expected)) in records.iter().zip(&good) {
            assert!(r.is_text() && !r.event_made(), "kept as text: {r:?}");
            assert_eq!(r.key().as_str(), expected["user"].as_str());
            assert_eq!(r.timestamp, expected["ts"].as_i64().unwrap() * MS);
            // Key and timestamp were read from the text; the event is still unmade.
            assert!(!r.event_made());
            let written: serde_json::Value = serde_json::from_str(&r.event_json()).unwrap();
            assert_eq!(&written, expected);
        }
        let dead: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("bad.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let path = dir.path().join("in.jsonl").display().to_string();
        let bad: Vec<usize> = (1..=lines.len())
            .filter(|n| !good.iter().any(|(g, _)| g == n))
            .collect();
        assert_eq!(s.input_errors().malformed, bad.len() as u64);
        assert_eq!(dead.len(), bad.len());
        for (entry, n) in dead.iter().zip(&bad) {
            let error = entry["error"].as_str().unwrap();
            assert!(
                error.starts_with(&format!("{path}: line {n}")),
                "line {n}: {error}"
            );
            assert!(error.contains("malformed line"), "{error}");
            let line = String::from_utf8_lossy(lines[n - 1]);
            assert_eq!(entry["record"], json!(line), "line {n}");
        }
    }

    #[test]
    fn skipping_a_line_passes_exactly_over_it_across_buffer_refills() {
        let text = b"first line\n\nthird, longer than the buffer\nlast without break";
        let mut r = BufReader::with_capacity(4, &text[..]);
        let lens: Vec<usize> = (0..5).map(|_| skip_line(&mut r).unwrap()).collect();
        let mut expected: Vec<usize> = text
            .split_inclusive(|&b| b == b'\n')
            .map(<[u8]>::len)
            .collect();
        expected.push(0);
        assert_eq!(lens, expected);
        let mut r = BufReader::with_capacity(4, &text[..]);
        skip_line(&mut r).unwrap();
        skip_line(&mut r).unwrap();
        let mut rest = String::new();
        r.read_line(&mut rest).unwrap();
        assert_eq!(rest, "third, longer than the buffer\n");
    }

    #[test]
    fn subtasks_split_the_lines() {
        let dir = TempDir::new("file-source-split");
        let body: String = (1..=10).map(|k| format!("{{\"key\":{k}}}\n")).collect();
        let mut seen = Vec::new();
        for i in 0..3 {
            let mut s = source(&dir, &body, json!({}), i, 3);
            let keys: Vec<i64> = read_all(&mut s, 0).unwrap().iter().map(int_key).collect();
            assert!(
                keys.iter().all(|k| (k - 1) % 3 == i as i64),
                "{i}: {keys:?}"
            );
            seen.extend(keys);
        }
        seen.sort_unstable();
        assert_eq!(seen, (1..=10).collect::<Vec<i64>>());
    }

    #[test]
    fn range_fields_are_not_the_components_own() {
        // The runtime checks timestamp ranges for every source; the job file takes these
        // fields off the vertex before the rest reaches the component.
        let dir = TempDir::new("file-source-ts");
        std::fs::write(dir.path().join("in.jsonl"), "").unwrap();
        let err = build(
            json!({"path": "in.jsonl", "timestamp_before_max": "1s"}),
            &BuildEnv::new(dir.path()),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("unknown field `timestamp_before_max`"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_fails_at_start_naming_it() {
        let built = build(
            json!({"path": "no/such/file.jsonl"}),
            &BuildEnv::new("/nonexistent-dir"),
        )
        .unwrap();
        let Built::Source(factory) = built else {
            panic!("not a source")
        };
        let err = factory(&ctx(0, 1, 0)).err().unwrap().to_string();
        assert!(
            err.starts_with("cannot open file \"/nonexistent-dir/no/such/file.jsonl\""),
            "{err}"
        );
        let err = build(json!({}), &BuildEnv::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `path`"), "{err}");
    }

    /// What a run of one subtask gave: each record as (event, timestamp, type), in order.
    fn seen(records: &[Record]) -> Vec<(String, i64, TimestampType)> {
        records
            .iter()
            .map(|r| (r.event_json(), r.timestamp, r.timestamp_type))
            .collect()
    }

    /// Settings reading `in.jsonl` with malformed lines dead-lettered to `dl`.
    fn open_dead_lettered(dir: &TempDir, dl: &str, i: usize, p: usize) -> FileSource {
        let config: FileSourceConfig = config::parse(
            "file",
            json!({"path": "in.jsonl", "on_error": {"dead_letter": dl}}),
        )
        .unwrap();
        let config = config.resolve(dir.path()).unwrap();
        let on_error = OnErrorFactory::new(config.on_error.clone(), dir.path());
        FileSource::open_with(&config, &ctx(i, p, 0), &on_error).unwrap()
    }

    /// 40 lines with create timestamps, every seventh malformed, one blank.
    fn mixed_body() -> String {
        (1..=40)
            .map(|n| match n {
                _ if n % 7 == 0 => format!("not json {n}\n"),
                13 => "\n".to_owned(),
                _ => format!("{{\"key\":{n},\"timestamp\":{}}}\n", n * 1000),
            })
            .collect()
    }

    #[test]
    fn a_resumed_subtask_continues_where_its_position_was_taken() {
        let dir = TempDir::new("file-source-resume");
        std::fs::write(dir.path().join("in.jsonl"), mixed_body()).unwrap();
        let now = 5 * MS;
        for (i, p) in [(0, 1), (1, 2)] {
            // The reference: one uninterrupted run.
            let mut whole = open_dead_lettered(&dir, "whole.dl", i, p);
            let expected = seen(&read_all(&mut whole, now).unwrap());
            let expected_dl = std::fs::read_to_string(dir.path().join("whole.dl")).unwrap();
            assert!(expected_dl.lines().count() >= 2, "{expected_dl}");
            let malformed = whole.input_errors().malformed;

            // Run to a position after 8 records (a malformed line among them), read on past it
            // (records and dead-letter lines a crash would leave behind), then resume a new
            // instance there and read to the end.
            let mut first = open_dead_lettered(&dir, "cut.dl", i, p);
            let mut before = Vec::new();
            while before.len() < 8 {
                let (_, records) = poll(&mut first, now, 1);
                before.extend(records);
            }
            let position = first.position(1).unwrap();
            let (_, lost) = poll(&mut first, now, 12);
            assert!(!lost.is_empty());
            drop(first);
            // The cut matters: dead letters were written before and after the position.
            let recorded: FileSourcePosition = state_codec::decode(&position).unwrap();
            let recorded = recorded.dead_letter.unwrap().length;
            let written = std::fs::metadata(dir.path().join("cut.dl")).unwrap().len();
            assert!(0 < recorded && recorded < written, "{recorded} {written}");
            let mut resumed = open_dead_lettered(&dir, "cut.dl", i, p);
            resumed.resume(&position).unwrap();
            let after = read_all(&mut resumed, now).unwrap();
            let mut got = seen(&before);
            got.extend(seen(&after));
            assert_eq!(got, expected, "subtask {i} of {p}");
            assert_eq!(
                std::fs::read_to_string(dir.path().join("cut.dl")).unwrap(),
                expected_dl.replace("whole.dl", "cut.dl"),
                "subtask {i} of {p}: the dead letters, with their line numbers"
            );
            assert_eq!(resumed.input_errors().malformed, malformed);
            assert_eq!(resumed.lag(now).bytes, 0);
        }
    }

    #[test]
    fn a_changed_input_file_is_refused_naming_it() {
        let dir = TempDir::new("file-source-changed");
        let body = mixed_body();
        let mut s = source(&dir, &body, json!({"on_error": "skip"}), 0, 1);
        let (_, records) = poll(&mut s, 0, 10);
        assert_eq!(records.len(), 10);
        let position = s.position(3).unwrap();
        let offset: FileSourcePosition = state_codec::decode(&position).unwrap();
        let path = dir.path().join("in.jsonl").display().to_string();

        // Shorter than the offset.
        let cut = &body[..offset.offset as usize - 3];
        let mut s = source(&dir, cut, json!({"on_error": "skip"}), 0, 1);
        let err = s.resume(&position).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot restore the file source input {path}: it is {} bytes long, shorter than \
                 the {} bytes the checkpoint recorded (it was truncated or replaced after the \
                 checkpoint)",
                cut.len(),
                offset.offset
            )
        );
        // Long enough, but the lines moved.
        let moved = format!("x{body}");
        let mut s = source(&dir, &moved, json!({"on_error": "skip"}), 0, 1);
        let err = s.resume(&position).unwrap_err().to_string();
        assert!(
            err.contains(&path) && err.contains("not a line break"),
            "{err}"
        );
        // Another parallelism.
        let mut s = source(&dir, &body, json!({"on_error": "skip"}), 0, 2);
        let err = s.resume(&position).unwrap_err().to_string();
        assert!(err.contains("parallelism 1, restored with 2"), "{err}");
        // Damaged bytes.
        let mut s = source(&dir, &body, json!({"on_error": "skip"}), 0, 1);
        let err = s
            .resume(&position[..position.len() - 1])
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path) && err.contains("damaged"), "{err}");
    }
}
