//! What the built-in sources and sinks record in a checkpoint about the files they read and
//! write, and the checks a restore makes before it cuts anything.
//!
//! A position is a small struct serialised with the checkpoint codec
//! ([`tidemark_runtime::state_codec`]). Restoring one checks that the file it names is the one
//! the component is configured with now and that the file is still at least as long as
//! recorded; a file that is shorter was truncated or replaced after the checkpoint, and the
//! restore is refused naming the file and both lengths. The checks read and never write: a
//! refused restore leaves every file as it was. (The cut itself comes later, when the component
//! first writes: see [`crate::sinks::file`] and [`crate::on_error`].)

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tidemark_runtime::state_codec::{self, StateCodecError};

/// A file and how many bytes of it a checkpoint covers: a file sink's output or a dead-letter
/// file, after a flush and a sync.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLength {
    /// The file, as the component names it (resolved against the job file's folder).
    pub path: PathBuf,
    /// Bytes written and synced when the checkpoint was taken.
    pub length: u64,
}

/// Why a recorded position cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The position names another file than the component uses now.
    #[error(
        "the checkpoint recorded the {what} {recorded}, but the job now uses {current}: \
         restore with the job file the checkpoint was taken with"
    )]
    OtherFile {
        /// What the file is (`file sink output`, `dead-letter file`, `file source input`).
        what: &'static str,
        /// The file in the checkpoint.
        recorded: String,
        /// The file configured now.
        current: String,
    },
    /// The file is shorter than the checkpoint recorded.
    #[error(
        "cannot restore the {what} {path}: it is {actual} bytes long, shorter than the \
         {recorded} bytes the checkpoint recorded (it was truncated or replaced after the \
         checkpoint)"
    )]
    Shorter {
        /// What the file is.
        what: &'static str,
        /// The file.
        path: String,
        /// Its length now.
        actual: u64,
        /// The length in the checkpoint.
        recorded: u64,
    },
    /// The recorded offset does not fall after a line break: the file was changed.
    #[error(
        "cannot resume reading {path} at byte {offset}: the byte before it is not a line \
         break, so the file changed after the checkpoint"
    )]
    NotALineStart {
        /// The file.
        path: String,
        /// The recorded offset.
        offset: u64,
    },
    /// The subtask's share of the input depends on the parallelism, which changed.
    #[error(
        "{what}: the checkpoint was taken with parallelism {recorded}, restored with \
         {current}; a source keeps the parallelism of its checkpoint"
    )]
    Parallelism {
        /// What the source is.
        what: String,
        /// The parallelism in the checkpoint.
        recorded: u64,
        /// The parallelism now.
        current: u64,
    },
    /// The file could not be read.
    #[error("cannot restore the {what} {path}: {source}")]
    Io {
        /// What the file is.
        what: &'static str,
        /// The file.
        path: String,
        /// What went wrong.
        source: io::Error,
    },
    /// The position's bytes did not decode.
    #[error("the checkpoint's position of {what} is damaged: {source}")]
    Damaged {
        /// Whose position it is.
        what: String,
        /// What the codec said.
        source: StateCodecError,
    },
    /// A restore came after the component had started writing.
    #[error("cannot restore the {what} {path}: it was already written to in this run")]
    AlreadyStarted {
        /// What the file is.
        what: &'static str,
        /// The file.
        path: String,
    },
}

/// What happens to a file before the job's first write to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Truncate it (a fresh start).
    Fresh,
    /// Cut it back to this many bytes (a restore).
    CutTo(u64),
    /// Done: it is being written.
    Started,
}

/// Decodes the position `bytes` of `what`.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<T, RestoreError> {
    state_codec::decode(bytes).map_err(|source| RestoreError::Damaged {
        what: what.to_owned(),
        source,
    })
}

/// True when `a` and `b` name the same file: equal paths, or paths that resolve to the same
/// existing file (a job file reached through another relative path).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Checks that `recorded.path` is `current` and at least `recorded.length` bytes long; returns
/// that length. Reads only.
pub(crate) fn check_length(
    what: &'static str,
    recorded: &FileLength,
    current: &Path,
) -> Result<u64, RestoreError> {
    if !same_file(&recorded.path, current) {
        return Err(RestoreError::OtherFile {
            what,
            recorded: recorded.path.display().to_string(),
            current: current.display().to_string(),
        });
    }
    let actual = file_length(what, current)?;
    if actual < recorded.length {
        return Err(RestoreError::Shorter {
            what,
            path: current.display().to_string(),
            actual,
            recorded: recorded.length,
        });
    }
    Ok(recorded.length)
}

/// The length of `path` now.
pub(crate) fn file_length(what: &'static str, path: &Path) -> Result<u64, RestoreError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| RestoreError::Io {
            what,
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    #[test]
    fn a_shorter_or_other_file_is_refused_naming_it() {
        let dir = TempDir::new("positions");
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"0123456789").unwrap();
        let recorded = |length| FileLength {
            path: path.clone(),
            length,
        };
        assert_eq!(check_length("file", &recorded(10), &path).unwrap(), 10);
        assert_eq!(check_length("file", &recorded(4), &path).unwrap(), 4);
        let err = check_length("file", &recorded(11), &path)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "cannot restore the file {}: it is 10 bytes long, shorter than the 11 bytes the \
                 checkpoint recorded (it was truncated or replaced after the checkpoint)",
                path.display()
            )
        );
        let other = dir.path().join("other.jsonl");
        let err = check_length("file", &recorded(1), &other)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&other.display().to_string()), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        // The same file reached by another path is the same file.
        let dotted = dir.path().join(".").join("out.jsonl");
        assert_eq!(check_length("file", &recorded(3), &dotted).unwrap(), 3);
        // A missing file names the file.
        std::fs::remove_file(&path).unwrap();
        let err = check_length("file", &recorded(0), &path)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&format!("cannot restore the file {}: ", path.display())));
    }
}
