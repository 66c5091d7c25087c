//! What an operator does with a record its expression fails on: `on_error: fail | skip |
//! {dead_letter: PATH}`.
//!
//! ```yaml
//! operators:
//!   paid:
//!     type: filter
//!     input: orders
//!     where: 'amount > 100'
//!     on_error: {dead_letter: bad-orders.jsonl}   # fail (default) | skip | {dead_letter: PATH}
//! ```
//!
//! - `fail`: the job fails with a message naming the expression, the error and the record (its
//!   JSON, cut to 1 KiB); the runtime adds the vertex and subtask.
//! - `skip`: the record is dropped and counted (`tidemark_records_dropped_total{reason=
//!   "expression_error"}`).
//! - `{dead_letter: PATH}`: as `skip`, and one JSON line per record is appended to PATH:
//!   `{"vertex":"paid","error":"…","record":{…}}`. The subtasks of a vertex share the file; each
//!   line is written whole and flushed at once, so the file is complete even if the job fails
//!   later. A relative PATH is relative to the job file's folder; the file is created when the
//!   job starts and emptied when the job first uses it.
//! - Checkpoints to a directory: each subtask records the file's length
//!   ([`OnError::snapshot`], its operator's local state) and a restore cuts the file back to it
//!   ([`OnError::restore`]); lines written after a barrier wait in memory until every subtask of
//!   the vertex has passed it ([`DeadLetterFile`]), so the length is exact.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use tidemark_runtime::value::Value;
use tidemark_runtime::{state_codec, BoxError};

use crate::positions::{self, check_length, FileLength, RestoreError, Start};

use crate::expr::{EvalError, EventRef, Expr};

/// The most bytes of a record shown in a failure message.
pub const RECORD_SHOWN_BYTES: usize = 1024;

/// `on_error`: what to do with a record an expression fails on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// Fail the job (the default).
    #[default]
    Fail,
    /// Drop the record and count it.
    Skip,
    /// Drop the record, count it, and write it with the error to this file.
    DeadLetter(PathBuf),
}

impl<'de> Deserialize<'de> for ErrorPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ErrorPolicy;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("fail, skip or {dead_letter: PATH}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ErrorPolicy, E> {
                match v {
                    "fail" => Ok(ErrorPolicy::Fail),
                    "skip" => Ok(ErrorPolicy::Skip),
                    "dead_letter" => Err(E::custom(
                        "dead_letter needs a file: write `{dead_letter: PATH}`",
                    )),
                    other => Err(E::custom(format!(
                        "unknown value \"{other}\", expected fail, skip or {{dead_letter: PATH}}"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorPolicy, A::Error> {
                let mut path: Option<PathBuf> = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "dead_letter" {
                        return Err(de::Error::custom(format!(
                            "unknown field `{key}`, expected `dead_letter`"
                        )));
                    }
                    let value: serde_json::Value = map.next_value()?;
                    match value {
                        serde_json::Value::String(s) if !s.is_empty() => path = Some(s.into()),
                        serde_json::Value::Object(_) => {
                            return Err(de::Error::custom(
                                "dead_letter: only a file path is supported here",
                            ))
                        }
                        other => {
                            return Err(de::Error::custom(format!(
                                "dead_letter: expected a file path, found {other}"
                            )))
                        }
                    }
                }
                path.map(ErrorPolicy::DeadLetter)
                    .ok_or_else(|| de::Error::custom("expected `{dead_letter: PATH}`"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A dead-letter file, shared by the subtasks of a vertex (its writers, one per subtask).
///
/// The file is opened, not truncated, when the first subtask is made, and cut when the job
/// first uses it (a line, a checkpoint or the end of a writer): to nothing on a fresh start,
/// to the length a checkpoint recorded on a restore ([`DeadLetterFile::restore`]). So a restore
/// that is refused, or a job that fails before it runs, leaves the file as it was.
///
/// With checkpoints, the file holds at all times only lines written before the checkpoint
/// barrier that the slowest writer has passed: a writer past barrier `n` keeps its lines in
/// memory until every writer has passed `n` too. The length the last writer to pass `n` records
/// is then exactly the lines before barrier `n` of every writer, and a restore cuts the file to
/// the largest length its writers recorded (the others are prefixes of it).
#[derive(Debug)]
pub struct DeadLetterFile {
    path: PathBuf,
    inner: Mutex<DeadLetterInner>,
}

#[derive(Debug)]
struct DeadLetterInner {
    file: File,
    start: Start,
    /// Bytes in the file (once started).
    length: u64,
    /// Per writer: the last checkpoint it passed (0 before the first), or `u64::MAX` once it
    /// writes no more.
    passed: Vec<u64>,
    /// Lines held back, with the checkpoint their writer had passed when it wrote them.
    held: Vec<(u64, Vec<u8>)>,
}

const DEAD_LETTER: &str = "dead-letter file";

impl DeadLetterFile {
    /// Opens (creates if missing, never truncates) the file at `path`; see the type's docs for
    /// when it is cut.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().append(true).create(true).open(path)?;
        Ok(DeadLetterFile {
            path: path.to_path_buf(),
            inner: Mutex::new(DeadLetterInner {
                file,
                start: Start::Fresh,
                length: 0,
                passed: Vec::new(),
                held: Vec::new(),
            }),
        })
    }

    /// The one open [`DeadLetterFile`] of `path` in this process, opened if there is none:
    /// vertices naming the same file (a `window` and its `key:` stage share their `on_error`)
    /// write through one, so their lines, lengths and cut agree.
    pub fn shared(path: &Path) -> std::io::Result<Arc<Self>> {
        static OPEN: Mutex<Vec<(PathBuf, Weak<DeadLetterFile>)>> = Mutex::new(Vec::new());
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(_, file)| file.strong_count() > 0);
        let file = Arc::new(DeadLetterFile::open(path)?);
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(existing) = open
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, f)| f.upgrade())
        {
            return Ok(existing);
        }
        open.push((key, Arc::downgrade(&file)));
        Ok(file)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DeadLetterInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new writer (one per subtask) of this file.
    pub fn writer(self: &Arc<Self>) -> DeadLetterWriter {
        let mut inner = self.lock();
        let floor = inner.passed.iter().copied().min().unwrap_or(0);
        // A writer made late starts level with the slowest, so it holds nobody back.
        inner.passed.push(if floor == u64::MAX { 0 } else { floor });
        DeadLetterWriter {
            file: self.clone(),
            id: inner.passed.len() - 1,
        }
    }

    /// Appends `{"vertex":…,"error":…,"record":…}` as writer `id` (held back while a checkpoint
    /// is between its writers, see the type's docs).
    fn write(&self, id: usize, vertex: &str, error: &str, record: &Value) -> std::io::Result<()> {
        let mut line = Vec::with_capacity(128);
        line.extend_from_slice(b"{\"vertex\":");
        serde_json::to_writer(&mut line, vertex)?;
        line.extend_from_slice(b",\"error\":");
        serde_json::to_writer(&mut line, error)?;
        line.extend_from_slice(b",\"record\":");
        record.write_json(&mut line)?;
        line.extend_from_slice(b"}\n");
        let mut inner = self.lock();
        inner.start(&self.path)?;
        let passed = inner.passed[id];
        if inner.passed.iter().all(|&p| p >= passed) {
            inner.append(&line)
        } else {
            inner.held.push((passed, line));
            Ok(())
        }
    }

    /// Writer `id` passed checkpoint barrier `checkpoint`: syncs the file and returns its
    /// length before any line of this writer from after the barrier.
    fn checkpoint(&self, id: usize, checkpoint: u64) -> std::io::Result<u64> {
        let mut inner = self.lock();
        inner.start(&self.path)?;
        inner.file.sync_data()?;
        let length = inner.length;
        if inner.passed[id] != u64::MAX {
            inner.passed[id] = checkpoint;
        }
        inner.release()?;
        Ok(length)
    }

    /// Writer `id` writes no more (`started`: its subtask finished, so the file is started if
    /// it was not; else it was dropped, which starts nothing).
    fn done(&self, id: usize, started: bool) -> std::io::Result<()> {
        let mut inner = self.lock();
        inner.passed[id] = u64::MAX;
        if started {
            inner.start(&self.path)?;
        }
        if inner.start == Start::Started {
            inner.release()?;
        }
        Ok(())
    }

    /// A writer's recorded length: checks the file and makes the cut, when the file is first
    /// used, at least that long (the largest length any writer recorded). Writes nothing.
    pub fn restore(&self, recorded: &FileLength) -> Result<(), RestoreError> {
        let length = check_length(DEAD_LETTER, recorded, &self.path)?;
        let mut inner = self.lock();
        inner.start = match inner.start {
            Start::Fresh => Start::CutTo(length),
            Start::CutTo(l) => Start::CutTo(l.max(length)),
            Start::Started => {
                return Err(RestoreError::AlreadyStarted {
                    what: DEAD_LETTER,
                    path: self.path.display().to_string(),
                })
            }
        };
        Ok(())
    }

    /// Where it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl DeadLetterInner {
    /// Truncates or cuts the file, the first time.
    fn start(&mut self, path: &Path) -> std::io::Result<()> {
        let length = match self.start {
            Start::Started => return Ok(()),
            Start::Fresh => 0,
            Start::CutTo(length) => {
                let actual = self.file.metadata()?.len();
                if actual < length {
                    return Err(std::io::Error::other(format!(
                        "{} is {actual} bytes long, shorter than the {length} bytes to restore",
                        path.display()
                    )));
                }
                length
            }
        };
        self.file.set_len(length)?;
        self.length = length;
        self.start = Start::Started;
        Ok(())
    }

    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.file.write_all(line)?;
        self.length += line.len() as u64;
        Ok(())
    }

    /// Writes the held lines every writer has caught up with, in the order they came.
    fn release(&mut self) -> std::io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let floor = self.passed.iter().copied().min().unwrap_or(u64::MAX);
        let held = std::mem::take(&mut self.held);
        for (passed, line) in held {
            if passed <= floor {
                self.append(&line)?;
            } else {
                self.held.push((passed, line));
            }
        }
        Ok(())
    }
}

/// One subtask's writer of a [`DeadLetterFile`]: its lines, its checkpoints, its restore.
#[derive(Debug)]
pub struct DeadLetterWriter {
    file: Arc<DeadLetterFile>,
    id: usize,
}

impl DeadLetterWriter {
    /// Appends `{"vertex":…,"error":…,"record":…}`.
    pub fn write(&self, vertex: &str, error: &str, record: &Value) -> std::io::Result<()> {
        self.file.write(self.id, vertex, error, record)
    }

    /// This subtask passed checkpoint barrier `checkpoint`: the file's path and its length
    /// (synced) before any line this subtask writes after the barrier.
    pub fn checkpoint(&self, checkpoint: u64) -> Result<FileLength, BoxError> {
        let length = self
            .file
            .checkpoint(self.id, checkpoint)
            .map_err(|e| self.error(e))?;
        Ok(FileLength {
            path: self.file.path.clone(),
            length,
        })
    }

    /// Restores what [`DeadLetterWriter::checkpoint`] returned (see
    /// [`DeadLetterFile::restore`]).
    pub fn restore(&self, recorded: &FileLength) -> Result<(), RestoreError> {
        self.file.restore(recorded)
    }

    /// This subtask writes no more lines.
    pub fn finish(&self) -> Result<(), BoxError> {
        self.file.done(self.id, true).map_err(|e| self.error(e))
    }

    /// Where it writes.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    fn error(&self, e: std::io::Error) -> BoxError {
        format!(
            "cannot write to dead-letter file {}: {e}",
            self.path().display()
        )
        .into()
    }
}

impl Drop for DeadLetterWriter {
    fn drop(&mut self) {
        // Lines it held back may go out now; nothing is cut that was not already.
        let _ = self.file.done(self.id, false);
    }
}

/// The error policy of one vertex as its factory holds it: the dead-letter file is opened once,
/// when the first subtask is made, and shared.
#[derive(Debug, Clone)]
pub struct OnErrorFactory {
    policy: ErrorPolicy,
    dead_letter: Arc<Mutex<Option<Arc<DeadLetterFile>>>>,
}

impl OnErrorFactory {
    /// `policy` with a relative dead-letter path resolved against `job_dir`.
    pub fn new(policy: ErrorPolicy, job_dir: &Path) -> Self {
        let policy = match policy {
            ErrorPolicy::DeadLetter(p) if p.is_relative() => {
                ErrorPolicy::DeadLetter(job_dir.join(p))
            }
            other => other,
        };
        OnErrorFactory {
            policy,
            dead_letter: Arc::new(Mutex::new(None)),
        }
    }

    /// The policy, its dead-letter path resolved.
    pub fn policy(&self) -> &ErrorPolicy {
        &self.policy
    }

    /// A writer of the shared dead-letter file for one subtask; the file is opened when first
    /// asked for (`None` without one).
    pub fn dead_letter(&self) -> Result<Option<DeadLetterWriter>, BoxError> {
        Ok(match &self.policy {
            ErrorPolicy::DeadLetter(path) => {
                let mut shared = self.dead_letter.lock().unwrap_or_else(|p| p.into_inner());
                let file = match &*shared {
                    Some(file) => file.clone(),
                    None => {
                        let file = DeadLetterFile::shared(path).map_err(|e| {
                            format!("cannot create dead-letter file {}: {e}", path.display())
                        })?;
                        *shared = Some(file.clone());
                        file
                    }
                };
                Some(file.writer())
            }
            _ => None,
        })
    }

    /// The handler of one subtask of `vertex`.
    pub fn subtask(&self, vertex: &str) -> Result<OnError, BoxError> {
        let dead_letter = self.dead_letter()?;
        Ok(OnError {
            skip: self.policy != ErrorPolicy::Fail,
            dead_letter,
            vertex: vertex.to_owned(),
            dropped: 0,
        })
    }
}

/// One subtask's handling of failed expressions.
#[derive(Debug)]
pub struct OnError {
    skip: bool,
    dead_letter: Option<DeadLetterWriter>,
    vertex: String,
    /// Records dropped so far.
    pub dropped: u64,
}

impl OnError {
    /// Handles `error` of `expr` on the record whose event is `event`: `Ok(())` when the record
    /// is dropped (and counted, and maybe written), `Err` to fail the job.
    #[cold]
    pub fn handle(
        &mut self,
        expr: &Expr,
        error: EvalError,
        event: &EventRef<'_>,
    ) -> Result<(), BoxError> {
        let message = format!("expression `{}` failed: {}", expr.source(), error.message);
        if !self.skip {
            return Err(format!("{message}; record: {}", shown(&event.to_value())).into());
        }
        self.drop_record(&message, event)
    }

    /// Drops the record whose event is `event` for the reason `message`: counts it, and writes
    /// it with the message to the dead letter if there is one (`Err` only if that fails).
    #[cold]
    pub fn drop_record(&mut self, message: &str, event: &EventRef<'_>) -> Result<(), BoxError> {
        if let Some(file) = &self.dead_letter {
            file.write(&self.vertex, message, &event.to_value())
                .map_err(|e| {
                    format!(
                        "cannot write to dead-letter file {}: {e} (after {message})",
                        file.path().display()
                    )
                })?;
        }
        self.dropped += 1;
        Ok(())
    }

    /// The operator's local state for checkpoint `checkpoint`
    /// ([`tidemark_runtime::Operator::snapshot_local`]): the dead-letter file's path and
    /// length, or `None` without one.
    pub fn snapshot(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        match self.checkpoint(checkpoint)? {
            Some(length) => Ok(Some(state_codec::encode(&length)?)),
            None => Ok(None),
        }
    }

    /// Restores what [`OnError::snapshot`] returned
    /// ([`tidemark_runtime::Operator::restore_local`]): the dead-letter file is cut back to the
    /// recorded length when the job first uses it. A recorded file without a dead letter now is
    /// refused (its lines would be left uncut).
    pub fn restore(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let recorded: FileLength = positions::decode(DEAD_LETTER, state)?;
        match &self.dead_letter {
            Some(file) => Ok(file.restore(&recorded)?),
            None => Err(format!(
                "vertex `{}`: the checkpoint recorded the dead-letter file {}, but the vertex \
                 has no dead letter now (on_error: {{dead_letter: PATH}})",
                self.vertex,
                recorded.path.display()
            )
            .into()),
        }
    }

    /// The subtask's input ended: its dead-letter lines are all written.
    pub fn finish(&mut self) -> Result<(), BoxError> {
        match &self.dead_letter {
            Some(file) => file.finish(),
            None => Ok(()),
        }
    }

    /// The dead-letter file's path and length at checkpoint `checkpoint`, if there is one.
    fn checkpoint(&mut self, checkpoint: u64) -> Result<Option<FileLength>, BoxError> {
        self.dead_letter
            .as_ref()
            .map(|file| file.checkpoint(checkpoint))
            .transpose()
    }
}

/// The local state of an operator with several handlers (a window's `on_error` and `late`),
/// for [`tidemark_runtime::Operator::snapshot_local`]: each one's dead-letter file and length,
/// or `None` when none has a dead letter.
pub fn snapshot_handlers(
    handlers: &mut [&mut OnError],
    checkpoint: u64,
) -> Result<Option<Vec<u8>>, BoxError> {
    let lengths = handlers
        .iter_mut()
        .map(|h| h.checkpoint(checkpoint))
        .collect::<Result<Vec<_>, _>>()?;
    if lengths.iter().all(Option::is_none) {
        return Ok(None);
    }
    Ok(Some(state_codec::encode(&lengths)?))
}

/// Restores what [`snapshot_handlers`] returned, handler by handler, in the same order.
pub fn restore_handlers(handlers: &mut [&mut OnError], state: &[u8]) -> Result<(), BoxError> {
    let lengths: Vec<Option<FileLength>> = positions::decode(DEAD_LETTER, state)?;
    if lengths.len() != handlers.len() {
        return Err(format!(
            "the checkpoint has {} error handlers' dead letters for this vertex, it has {} now",
            lengths.len(),
            handlers.len()
        )
        .into());
    }
    for (handler, length) in handlers.iter_mut().zip(&lengths) {
        if let Some(length) = length {
            handler.restore(&state_codec::encode(length)?)?;
        }
    }
    Ok(())
}

/// The event's JSON, cut to [`RECORD_SHOWN_BYTES`] on a character boundary.
pub fn shown(event: &Value) -> String {
    let mut text = event.to_string();
    if text.len() > RECORD_SHOWN_BYTES {
        let mut cut = RECORD_SHOWN_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = text.len();
        text.truncate(cut);
        text.push_str(&format!("… ({total} bytes in all)"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{Evaluator, Scope};
    use serde_json::json;

    fn policy(v: serde_json::Value) -> Result<ErrorPolicy, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_the_three_policies() {
        assert_eq!(policy(json!("fail")), Ok(ErrorPolicy::Fail));
        assert_eq!(policy(json!("skip")), Ok(ErrorPolicy::Skip));
        assert_eq!(
            policy(json!({"dead_letter": "bad.jsonl"})),
            Ok(ErrorPolicy::DeadLetter("bad.jsonl".into()))
        );
        assert!(policy(json!("ignore"))
            .unwrap_err()
            .contains("unknown value \"ignore\", expected fail, skip or {dead_letter: PATH}"));
        assert!(policy(json!("dead_letter"))
            .unwrap_err()
            .contains("needs a file"));
        assert!(policy(json!({"dead": "x"}))
            .unwrap_err()
            .contains("unknown field `dead`"));
        assert!(policy(json!({"dead_letter": 3}))
            .unwrap_err()
            .contains("expected a file path"));
    }

    fn failing() -> (Expr, EvalError, Value) {
        let expr = Expr::compile("w > 2").unwrap();
        let event = Value::from_json(br#"{"k":"a","v":1}"#).unwrap();
        let err = Evaluator::new()
            .eval(
                &expr,
                &Scope {
                    event: (&event).into(),
                    key: &Value::Null,
                    timestamp_ms: 0,
                },
            )
            .unwrap_err();
        (expr, err, event)
    }

    #[test]
    fn fail_names_the_expression_the_error_and_the_record() {
        let (expr, err, event) = failing();
        let mut on = OnErrorFactory::new(ErrorPolicy::Fail, Path::new("."))
            .subtask("paid")
            .unwrap();
        let message = on
            .handle(&expr, err, &EventRef::Value(&event))
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "expression `w > 2` failed: no field \"w\" in the event (it has k, v); \
             record: {\"k\":\"a\",\"v\":1}"
        );
        assert_eq!(on.dropped, 0);
    }

    #[test]
    fn long_records_are_cut_to_a_kibibyte() {
        let mut m = tidemark_runtime::value::Map::new();
        m.insert("s", "é".repeat(2000));
        let text = shown(&Value::from(m));
        let (head, tail) = text.split_once('…').unwrap();
        assert!(head.len() <= RECORD_SHOWN_BYTES && head.len() >= RECORD_SHOWN_BYTES - 1);
        assert_eq!(tail, " (4008 bytes in all)");
    }

    #[test]
    fn skip_counts_and_dead_letters_write_lines() {
        let (expr, err, event) = failing();
        let mut skip = OnErrorFactory::new(ErrorPolicy::Skip, Path::new("."))
            .subtask("paid")
            .unwrap();
        skip.handle(&expr, err.clone(), &EventRef::Value(&event))
            .unwrap();
        assert_eq!(skip.dropped, 1);

        let dir = std::env::temp_dir().join(format!("tidemark-dl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let factory = OnErrorFactory::new(ErrorPolicy::DeadLetter("dl.jsonl".into()), &dir);
        let mut a = factory.subtask("paid").unwrap();
        let mut b = factory.subtask("paid").unwrap();
        a.handle(&expr, err.clone(), &EventRef::Value(&event))
            .unwrap();
        b.handle(&expr, err, &EventRef::Value(&event)).unwrap();
        assert_eq!((a.dropped, b.dropped), (1, 1));
        let text = std::fs::read_to_string(dir.join("dl.jsonl")).unwrap();
        let line =
            "{\"vertex\":\"paid\",\"error\":\"expression `w > 2` failed: no field \\\"w\\\" \
                    in the event (it has k, v)\",\"record\":{\"k\":\"a\",\"v\":1}}\n";
        assert_eq!(text, line.repeat(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Drops a record as `on`, with `name` as its message.
    fn dead(on: &mut OnError, name: &str) {
        on.drop_record(name, &EventRef::Value(&Value::from(name)))
            .unwrap();
    }

    fn sorted_lines(path: &Path) -> Vec<String> {
        let mut lines: Vec<String> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn a_shared_dead_letter_file_is_restored_to_the_lines_before_the_barrier() {
        let dir = crate::test_util::TempDir::new("dead-letter-restore");
        let path = dir.path().join("dl.jsonl");
        let policy = ErrorPolicy::DeadLetter("dl.jsonl".into());
        // The reference: every dropped record's line once.
        let line =
            |name: &str| format!("{{\"vertex\":\"f\",\"error\":\"{name}\",\"record\":\"{name}\"}}");
        let mut expected: Vec<String> = ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"]
            .map(line)
            .to_vec();
        expected.sort();

        // Subtask a passes barrier 1 before b: a2 (after a's barrier) is held back until b
        // passes it too, while b2 (before b's barrier) goes out at once.
        let factory = OnErrorFactory::new(policy.clone(), dir.path());
        let (mut a, mut b) = (factory.subtask("f").unwrap(), factory.subtask("f").unwrap());
        dead(&mut a, "a1");
        dead(&mut b, "b1");
        let state_a = a.snapshot(1).unwrap().unwrap();
        dead(&mut a, "a2");
        dead(&mut b, "b2");
        assert_eq!(sorted_lines(&path), [line("a1"), line("b1"), line("b2")]);
        let state_b = b.snapshot(1).unwrap().unwrap();
        let lengths =
            [&state_a, &state_b].map(|s| state_codec::decode::<FileLength>(s).unwrap().length);
        let before_barrier = [line("a1"), line("b1"), line("b2")]
            .iter()
            .map(|l| l.len() as u64 + 1)
            .sum::<u64>();
        assert!(lengths[0] < lengths[1], "{lengths:?}");
        assert_eq!(lengths[1], before_barrier);
        // a2 is out now; more lines after the barrier, then the process dies.
        dead(&mut a, "a3");
        dead(&mut b, "b3");
        drop((a, b, factory));
        let left = std::fs::read_to_string(&path).unwrap();
        assert_eq!(left.lines().count(), 6);

        // Restored: nothing is cut until the job first uses the file; then the records after
        // the barrier are dropped again, and more.
        let factory = OnErrorFactory::new(policy, dir.path());
        let (mut a, mut b) = (factory.subtask("f").unwrap(), factory.subtask("f").unwrap());
        // (In either order: the cut is to the largest length recorded.)
        b.restore(&state_b).unwrap();
        a.restore(&state_a).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), left);
        for name in ["a2", "a3", "a4"] {
            dead(&mut a, name);
        }
        for name in ["b3", "b4"] {
            dead(&mut b, name);
        }
        a.finish().unwrap();
        b.finish().unwrap();
        assert_eq!(sorted_lines(&path), expected);
    }

    #[test]
    fn a_dead_letter_file_shorter_than_recorded_is_refused_naming_it() {
        let dir = crate::test_util::TempDir::new("dead-letter-short");
        let path = dir.path().join("dl.jsonl");
        let policy = ErrorPolicy::DeadLetter("dl.jsonl".into());
        let mut on = OnErrorFactory::new(policy.clone(), dir.path())
            .subtask("f")
            .unwrap();
        dead(&mut on, "x");
        let state = on.snapshot(1).unwrap().unwrap();
        let length = std::fs::metadata(&path).unwrap().len();
        drop(on);
        std::fs::write(&path, "cut").unwrap();
        let mut on = OnErrorFactory::new(policy, dir.path())
            .subtask("f")
            .unwrap();
        let err = on.restore(&state).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot restore the dead-letter file {}: it is 3 bytes long, shorter than the \
                 {length} bytes the checkpoint recorded (it was truncated or replaced after the \
                 checkpoint)",
                path.display()
            )
        );
        drop(on);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cut");
        // Without a dead letter now, a recorded one is refused too.
        let mut skip = OnErrorFactory::new(ErrorPolicy::Skip, dir.path())
            .subtask("f")
            .unwrap();
        let err = skip.restore(&state).unwrap_err().to_string();
        assert!(err.contains("has no dead letter now"), "{err}");
    }

    #[test]
    fn several_handlers_keep_their_own_files() {
        let dir = crate::test_util::TempDir::new("dead-letter-handlers");
        let make = || {
            let errors = OnErrorFactory::new(ErrorPolicy::DeadLetter("e.jsonl".into()), dir.path());
            let late = OnErrorFactory::new(ErrorPolicy::DeadLetter("l.jsonl".into()), dir.path());
            let skip = OnErrorFactory::new(ErrorPolicy::Skip, dir.path());
            [errors, late, skip].map(|f| f.subtask("w").unwrap())
        };
        let [mut e, mut l, mut s] = make();
        assert!(snapshot_handlers(&mut [&mut s], 1).unwrap().is_none());
        dead(&mut e, "e1");
        dead(&mut l, "l1");
        let state = snapshot_handlers(&mut [&mut e, &mut l, &mut s], 1)
            .unwrap()
            .unwrap();
        dead(&mut e, "e2");
        dead(&mut l, "l2");
        drop((e, l, s));
        let [mut e, mut l, mut s] = make();
        let err = restore_handlers(&mut [&mut e, &mut l], &state)
            .unwrap_err()
            .to_string();
        assert!(err.contains("3 error handlers"), "{err}");
        restore_handlers(&mut [&mut e, &mut l, &mut s], &state).unwrap();
        dead(&mut l, "l3");
        e.finish().unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read("e.jsonl").lines().count(), 1);
        assert!(read("e.jsonl").contains("e1"));
        let late = read("l.jsonl");
        let late: Vec<bool> = late
            .lines()
            .map(|l| l.contains("\"l1\"") || l.contains("\"l3\""))
            .collect();
        assert_eq!(late, [true, true]);
    }

    #[test]
    fn each_checkpoint_length_is_exactly_the_lines_before_its_barrier() {
        // Three subtasks on threads write lines and pass checkpoints 1..=5 at their own pace.
        // Whatever the interleaving, the largest length recorded for checkpoint k is the file
        // holding exactly the lines each subtask wrote before its barrier k.
        let dir = crate::test_util::TempDir::new("dead-letter-barriers");
        let factory = OnErrorFactory::new(ErrorPolicy::DeadLetter("dl.jsonl".into()), dir.path());
        const SUBTASKS: usize = 3;
        const CHECKPOINTS: u64 = 5;
        // Subtask i passes barrier k after its line number `barrier(i, k)`.
        fn barrier(i: usize, k: u64) -> usize {
            (k as usize) * (20 + 7 * i)
        }
        fn lines_of(i: usize) -> usize {
            barrier(i, CHECKPOINTS) + 13
        }
        let handles: Vec<_> = (0..SUBTASKS)
            .map(|i| {
                let mut on = factory.subtask("v").unwrap();
                std::thread::spawn(move || {
                    let mut lengths = Vec::new();
                    for n in 0..lines_of(i) {
                        dead(&mut on, &format!("s{i}-{n}"));
                        let k = lengths.len() as u64 + 1;
                        if k <= CHECKPOINTS && n + 1 == barrier(i, k) {
                            let state = on.snapshot(k).unwrap().unwrap();
                            let length = state_codec::decode::<FileLength>(&state).unwrap();
                            lengths.push(length.length);
                        }
                        if n % 5 == 0 {
                            std::thread::yield_now();
                        }
                    }
                    on.finish().unwrap();
                    lengths
                })
            })
            .collect();
        let lengths: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let text = std::fs::read_to_string(dir.path().join("dl.jsonl")).unwrap();
        assert_eq!(
            text.lines().count(),
            (0..SUBTASKS).map(lines_of).sum::<usize>()
        );
        for k in 1..=CHECKPOINTS {
            let cut = lengths.iter().map(|l| l[k as usize - 1]).max().unwrap() as usize;
            let mut got: Vec<&str> = text[..cut].lines().collect();
            got.sort_unstable();
            let mut expected: Vec<String> = (0..SUBTASKS)
                .flat_map(|i| (0..barrier(i, k)).map(move |n| format!("s{i}-{n}")))
                .map(|name| {
                    format!("{{\"vertex\":\"v\",\"error\":\"{name}\",\"record\":\"{name}\"}}")
                })
                .collect();
            expected.sort_unstable();
            assert_eq!(got, expected, "checkpoint {k}");
        }
    }
}
