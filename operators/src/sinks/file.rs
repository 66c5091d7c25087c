//! The `file` sink: writes each record's event as a JSON line to a file.
//!
//! ```yaml
//! sinks:
//!   out:
//!     type: file
//!     input: per_user
//!     path: out/results.jsonl    # relative to the job file's folder
//!     timestamp_field: ts         # optional: also write the record's timestamp (ms) as `ts`
//! ```
//!
//! - Lines are as for the `stdout` sink (the format the `file` source reads).
//! - The file is opened (created if missing) when the job starts, so a path that cannot be
//!   written fails the start, naming it, and truncated when the job first writes, flushes or
//!   finishes. Missing folders are not created: a path into one is a settings error when the
//!   job is built (`validate`, `run`), naming the folder.
//! - With parallelism `p`, subtask 0 writes `path` and subtask `i > 0` writes `path.i`
//!   (`results.jsonl`, `results.jsonl.1`, …).
//! - Writes go through a 64 KiB buffer; `finish` flushes it and syncs the file to disk
//!   (`File::sync_all`), so a finished job's output is complete.
//! - On restore (checkpoints to a directory): at each checkpoint the subtask flushes, syncs
//!   (`File::sync_data`) and records its file's path and length. A restored subtask checks
//!   that file (the same path, at least that long: a shorter one is refused naming the file and
//!   both lengths, and nothing is cut) and, instead of truncating it, cuts it back to the
//!   recorded length when it first writes and appends after it: what was written after the
//!   checkpoint is written again by the restored job, once.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tidemark_runtime::{state_codec, BoxError, Record, Sink, SubtaskContext};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config;
use crate::error::ConfigError;
use crate::json_lines::write_record;
use crate::positions::{self, check_length, FileLength, RestoreError, Start};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "file",
    kind: ComponentKind::Sink,
    fields: &["path", "timestamp_field"],
    summary: "writes each event as one JSON object per line to a file (path.i for subtask i > 0)",
    build,
};

/// Settings of the `file` sink.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The file to write; relative paths resolve against the job file's folder.
    pub path: PathBuf,
    /// Also write the record's timestamp (ms since the epoch) as this field.
    #[serde(default)]
    pub timestamp_field: Option<String>,
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: FileSinkConfig = config::parse(INFO.type_name, config)?;
    if config.path.as_os_str().is_empty() {
        return Err(config::invalid(INFO.type_name, "path", "must not be empty"));
    }
    let path = Arc::new(env.job_dir.join(&config.path));
    // Missing folders are not created, so a job writing into one could never start: say so now
    // (`validate` and `run` alike), naming the folder.
    let folder = path.parent().filter(|f| !f.as_os_str().is_empty());
    if let Some(folder) = folder.filter(|f| !f.is_dir()) {
        return Err(config::invalid(
            INFO.type_name,
            "path",
            format!(
                "no such folder: {} (missing folders are not created: create it first)",
                folder.display()
            ),
        ));
    }
    let timestamp_field = config.timestamp_field;
    Ok(Built::Sink(Box::new(move |ctx: &SubtaskContext| {
        let sink = FileSink::create(&subtask_path(&path, ctx.subtask))?
            .with_timestamp_field(timestamp_field.clone());
        Ok(Box::new(sink) as Box<dyn Sink>)
    })))
}

/// The file subtask `subtask` writes: `path`, or `path.i` for `i > 0`.
pub fn subtask_path(path: &Path, subtask: usize) -> PathBuf {
    if subtask == 0 {
        path.to_path_buf()
    } else {
        let mut name = OsString::from(path.as_os_str());
        name.push(format!(".{subtask}"));
        PathBuf::from(name)
    }
}

const OUTPUT: &str = "file sink output";

/// One subtask of the `file` sink.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    name: String,
    writer: BufWriter<File>,
    timestamp_field: Option<String>,
    /// Truncate, or cut back to a restored length, before the first write.
    start: Start,
}

impl FileSink {
    /// Opens `path` (created if missing); it is truncated when first written, flushed or
    /// finished, unless [`Sink::restore`] came first.
    pub fn create(path: &Path) -> Result<Self, BoxError> {
        let name = path.display().to_string();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("cannot create file \"{name}\": {e}"))?;
        Ok(FileSink {
            path: path.to_path_buf(),
            name,
            writer: BufWriter::with_capacity(64 * 1024, file),
            timestamp_field: None,
            start: Start::Fresh,
        })
    }

    /// Truncates the file, or cuts it back to the restored length, the first time.
    #[cold]
    fn start(&mut self) -> Result<(), BoxError> {
        let length = match self.start {
            Start::Started => return Ok(()),
            Start::Fresh => 0,
            Start::CutTo(length) => check_length(
                OUTPUT,
                &FileLength {
                    path: self.path.clone(),
                    length,
                },
                &self.path,
            )?,
        };
        let cut = self.writer.get_mut().set_len(length);
        cut.map_err(|e| self.error(e))?;
        let seek = self.writer.get_mut().seek(SeekFrom::Start(length));
        seek.map_err(|e| self.error(e))?;
        self.start = Start::Started;
        Ok(())
    }

    /// Also writes each record's timestamp (ms since the epoch) as the field `name`.
    pub fn with_timestamp_field(mut self, name: Option<String>) -> Self {
        self.timestamp_field = name;
        self
    }

    fn error(&self, e: std::io::Error) -> BoxError {
        format!("cannot write to file \"{}\": {e}", self.name).into()
    }
}

impl Sink for FileSink {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        if self.start != Start::Started {
            self.start()?;
        }
        write_record(&mut self.writer, record, self.timestamp_field.as_deref())
            .map_err(|e| self.error(e))
    }

    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        if self.start != Start::Started {
            self.start()?;
        }
        for record in records {
            write_record(&mut self.writer, record, self.timestamp_field.as_deref())
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    /// A checkpoint: what was written so far reaches the file (not yet synced to disk).
    fn flush(&mut self) -> Result<(), BoxError> {
        self.start()?;
        self.writer.flush().map_err(|e| self.error(e))
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        self.start()?;
        self.writer.flush().map_err(|e| self.error(e))?;
        self.writer.get_ref().sync_all().map_err(|e| self.error(e))
    }

    fn resumable(&self) -> bool {
        true
    }

    /// Flushes, syncs the data (`File::sync_data`) and records the file's path and length.
    fn position(&mut self, _checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        self.start()?;
        self.writer.flush().map_err(|e| self.error(e))?;
        let synced = self.writer.get_ref().sync_data();
        synced.map_err(|e| self.error(e))?;
        let length = self.writer.get_mut().stream_position();
        let length = length.map_err(|e| self.error(e))?;
        Ok(state_codec::encode(&FileLength {
            path: self.path.clone(),
            length,
        })?)
    }

    /// Checks the recorded file (this sink's, at least as long as recorded) and cuts it back
    /// to the recorded length when the job first writes: a refused restore cuts nothing.
    fn restore(&mut self, position: &[u8]) -> Result<(), BoxError> {
        let recorded: FileLength =
            positions::decode(&format!("the file sink {}", self.name), position)?;
        if self.start == Start::Started {
            return Err(RestoreError::AlreadyStarted {
                what: OUTPUT,
                path: self.name.clone(),
            }
            .into());
        }
        let length = check_length(OUTPUT, &recorded, &self.path)?;
        self.start = Start::CutTo(length);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, TempDir};
    use serde_json::json;
    use tidemark_runtime::state_codec;

    fn sink(dir: &TempDir, subtask: usize) -> Box<dyn Sink> {
        let built = build(json!({"path": "out.jsonl"}), &BuildEnv::new(dir.path())).unwrap();
        let Built::Sink(factory) = built else {
            panic!("not a sink")
        };
        factory(&ctx(subtask, 2, 0)).unwrap()
    }

    #[test]
    fn writes_everything_it_got_by_finish() {
        let dir = TempDir::new("file-sink");
        let mut s0 = sink(&dir, 0);
        let mut s1 = sink(&dir, 1);
        let records: Vec<Record> = (0..10_000)
            .map(|k| Record::new(k, k as f64 / 4.0, k as i64 * 1_000_000))
            .collect();
        for chunk in records.chunks(1000) {
            s0.write_batch(chunk).unwrap();
        }
        s1.write(&Record::new(7, 1.0, 0)).unwrap();
        s0.finish().unwrap();
        s1.finish().unwrap();

        let text = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 10_000);
        assert!(text.ends_with('\n'));
        for (k, line) in lines.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v, json!({"key": k, "value": k as f64 / 4.0}));
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.jsonl.1")).unwrap(),
            "{\"key\":7,\"value\":1.0}\n"
        );
    }

    #[test]
    fn an_unwritable_path_fails_at_start() {
        let dir = TempDir::new("file-sink-bad");
        // The folder exists, but the path is a folder too: only creating the file tells.
        std::fs::create_dir(dir.path().join("taken")).unwrap();
        let built = build(json!({"path": "taken"}), &BuildEnv::new(dir.path())).unwrap();
        let Built::Sink(factory) = built else {
            panic!("not a sink")
        };
        let err = factory(&ctx(0, 1, 0)).err().unwrap().to_string();
        assert!(err.starts_with("cannot create file \""), "{err}");
        assert!(err.contains("taken"), "{err}");
    }

    #[test]
    fn a_path_into_a_missing_folder_is_a_settings_error() {
        let dir = TempDir::new("file-sink-no-folder");
        let error = |path: &str| match build(json!({ "path": path }), &BuildEnv::new(dir.path())) {
            Ok(_) => panic!("{path}: built, though its folder is missing"),
            Err(e) => e.to_string(),
        };
        let err = error("missing/dir/out.jsonl");
        assert!(err.contains("path: no such folder: "), "{err}");
        let folder = dir.path().join("missing/dir");
        assert!(err.contains(&folder.display().to_string()), "{err}");
        // A file where the folder should be is no folder either.
        std::fs::write(dir.path().join("plain"), "").unwrap();
        let err = error("plain/out.jsonl");
        assert!(err.contains("path: no such folder: "), "{err}");
    }

    #[test]
    fn subtask_paths() {
        assert_eq!(
            subtask_path(Path::new("a/b.jsonl"), 0),
            Path::new("a/b.jsonl")
        );
        assert_eq!(
            subtask_path(Path::new("a/b.jsonl"), 3),
            Path::new("a/b.jsonl.3")
        );
    }

    fn records(from: u64, to: u64) -> Vec<Record> {
        (from..to)
            .map(|k| Record::new(k, k as f64 * 1.5, 0))
            .collect()
    }

    #[test]
    fn a_restored_sink_cuts_back_to_its_position_and_appends() {
        let dir = TempDir::new("file-sink-restore");
        // The reference, written independently: every record's line, once, in order.
        let expected: String = (0..3000)
            .map(|k| format!("{{\"key\":{k},\"value\":{:?}}}\n", k as f64 * 1.5))
            .collect();
        let path = dir.path().join("out.jsonl.1");
        for records_before in [0, 1000] {
            let mut first = sink(&dir, 1);
            first.write_batch(&records(0, records_before)).unwrap();
            first.flush().unwrap();
            let position = first.position(4).unwrap();
            let recorded: FileLength = state_codec::decode(&position).unwrap();
            assert_eq!(
                recorded.length,
                expected
                    .lines()
                    .take(records_before as usize)
                    .map(|l| l.len() as u64 + 1)
                    .sum::<u64>()
            );
            // Written after the checkpoint, then the process dies.
            first.write_batch(&records(records_before, 2000)).unwrap();
            first.flush().unwrap();
            drop(first);
            let left = std::fs::read_to_string(&path).unwrap();

            // A new instance opens the file without touching it; restoring cuts nothing yet.
            let mut restored = sink(&dir, 1);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), left);
            restored.restore(&position).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), left);
            // The restored job writes everything after the checkpoint again, and more.
            restored
                .write_batch(&records(records_before, 2500))
                .unwrap();
            restored.flush().unwrap();
            restored.position(5).unwrap();
            restored.write_batch(&records(2500, 3000)).unwrap();
            restored.finish().unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        }
    }

    #[test]
    fn a_fresh_start_truncates_when_the_job_first_writes() {
        let dir = TempDir::new("file-sink-fresh");
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "an earlier run\n").unwrap();
        let mut s = sink(&dir, 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "an earlier run\n");
        s.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn a_shorter_file_is_refused_naming_it_and_left_alone() {
        let dir = TempDir::new("file-sink-short");
        let path = dir.path().join("out.jsonl");
        let mut first = sink(&dir, 0);
        first.write_batch(&records(0, 100)).unwrap();
        first.flush().unwrap();
        let position = first.position(1).unwrap();
        let length = std::fs::metadata(&path).unwrap().len();
        drop(first);
        // Someone cut the file after the checkpoint.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, &text[..100]).unwrap();
        let mut restored = sink(&dir, 0);
        let err = restored.restore(&position).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot restore the file sink output {}: it is 100 bytes long, shorter than the \
                 {length} bytes the checkpoint recorded (it was truncated or replaced after the \
                 checkpoint)",
                path.display()
            )
        );
        drop(restored);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), &text[..100]);
        // Another subtask's position names another file; damaged bytes say so.
        let mut other = sink(&dir, 1);
        let err = other.restore(&position).unwrap_err().to_string();
        assert!(err.contains(&format!("{}.1", path.display())), "{err}");
        let err = other.restore(&position[1..]).unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
        // A restore after the first write is a mistake of the caller, not a silent cut.
        let mut late = sink(&dir, 0);
        late.write(&Record::new(1, 1.0, 0)).unwrap();
        let err = late.restore(&position).unwrap_err().to_string();
        assert!(err.contains("already written to"), "{err}");
    }
}
