//! Checkpoints to a directory: the files, their format, and reading them back whole.
//!
//! Layout: `<dir>/<job>/chk-<n>/` holds one state file per (vertex, key-group range) — for a
//! keyed vertex `<vertex>.kg-<start>-<end>` (the key groups its subtask owned), for any other
//! `<vertex>.subtask-<i>` — and `_metadata`, written last by an atomic rename: a folder
//! without `_metadata` is incomplete and never used. A job that finished writes
//! `<dir>/<job>/_finished`.
//!
//! Every file is a [`FORMAT_VERSION`]ed header and a postcard payload ([`crate::state_codec`]):
//!
//! ```text
//! offset  size  field
//! 0       8     magic "TDMKCHK\0"
//! 8       2     format version, little endian (3; 1 and 2 are still read)
//! 10      8     payload length in bytes, little endian
//! 18      4     CRC-32 (IEEE) of the payload, little endian
//! 22      …     payload: a StateFile or, for _metadata, a Metadata (postcard)
//! ```
//!
//! Version 2 changed only the keyed state in a [`StateFile`]: each key group is its number of
//! entries and one byte string holding them (each a key and its value's bytes), the buffer the
//! task filled at the checkpoint, instead of version 1's sequence of (key, value) pairs; so the
//! writer copies it as it is. Version 1 files are read and turned into the same
//! [`KeyedSnapshot`].
//!
//! Version 3 added the key hash to `_metadata` ([`Metadata::key_hash`]): keys are grouped by
//! [`KEY_HASH`] (Kafka's murmur2 of their canonical bytes, [`crate::key_hash`]). Versions 1
//! and 2 grouped them by the hash of Tidemark before it (rustc-hash's FxHasher), so a
//! checkpoint of those versions with keyed state is refused ([`StoreError::KeyHash`]): its keys
//! would be restored into the wrong key groups. One without keyed state is read as before.
//!
//! A file whose magic, version, length or checksum is wrong is refused, naming the file, and so
//! is a checkpoint one of whose files is missing: [`read_checkpoint`] reads and checks every
//! file before a restore starts anything.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::key_group::KeyGroupRange;
pub use crate::key_hash::KEY_HASH;
use crate::keyed_state::KeyedSnapshot;
use crate::state_codec::{decode, encode_into};
pub use crate::state_file::StateFile;

/// The first bytes of every checkpoint file.
pub const MAGIC: [u8; 8] = *b"TDMKCHK\0";
/// The version of the checkpoint format this build writes (it reads it and versions 1 and 2).
pub const FORMAT_VERSION: u16 = 3;
/// The oldest version of the checkpoint format this build reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
/// The name of the file that makes a checkpoint folder complete.
pub const METADATA: &str = "_metadata";
/// The marker a finished job leaves in `<dir>/<job>/`.
pub const FINISHED: &str = "_finished";
const HEADER: usize = 22;

/// One vertex in a checkpoint's `_metadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VertexMeta {
    /// The vertex id.
    pub id: String,
    /// `source`, `operator` or `sink`.
    pub kind: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// Its number of key groups.
    pub max_parallelism: u32,
    /// Whether its state is per key group (it can be restored at another parallelism).
    pub keyed: bool,
    /// Its state files: name, length in bytes and CRC-32 of the whole file.
    pub files: Vec<FileMeta>,
}

/// One state file in `_metadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileMeta {
    /// The file name inside the checkpoint folder.
    pub name: String,
    /// Its subtask.
    pub subtask: u32,
    /// Its length in bytes.
    pub len: u64,
}

/// A checkpoint's `_metadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// The job's name.
    pub job: String,
    /// The checkpoint id.
    pub id: u64,
    /// When it completed, ms since the Unix epoch.
    pub completed_ms: i64,
    /// Every vertex with state files.
    pub vertices: Vec<VertexMeta>,
    /// The key hash its keyed state is grouped by: [`KEY_HASH`]. Empty in a checkpoint of
    /// format version 1 or 2, whose key hash was the one before (rustc-hash's FxHasher).
    pub key_hash: String,
}

/// A `_metadata` as format versions 1 and 2 wrote it: without the key hash.
#[derive(Deserialize)]
struct MetadataV2 {
    job: String,
    id: u64,
    completed_ms: i64,
    vertices: Vec<VertexMeta>,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O error on a file or folder.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file that is not what it should be.
    #[error("{path}: {problem}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A checkpoint whose keyed state is grouped by another key hash than [`KEY_HASH`].
    #[error(
        "{path}: its keyed state was grouped by {}, not by this version's key hash \
         \"{KEY_HASH}\" (Kafka's murmur2 of the key's canonical bytes), so its keys would be \
         restored into the wrong key groups; restore it with the Tidemark that wrote it, or \
         start the job without --restore",
        key_hash_name(found, *version)
    )]
    KeyHash {
        /// The checkpoint folder.
        path: PathBuf,
        /// The key hash its `_metadata` names (empty: none, format version 1 or 2).
        found: String,
        /// Its format version.
        version: u16,
    },
    /// A folder that is not a complete checkpoint.
    #[error("{path}: {problem}")]
    NotACheckpoint {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// How [`StoreError::KeyHash`] names the key hash a checkpoint was written with.
fn key_hash_name(found: &str, version: u16) -> String {
    if found.is_empty() {
        format!(
            "the key hash of Tidemark before \"{KEY_HASH}\" (rustc-hash's FxHasher; checkpoint \
             format version {version}, which records no key hash)"
        )
    } else {
        format!("the key hash \"{found}\"")
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The bytes of a checkpoint file holding `value`: header and payload.
pub fn encode_file<T: Serialize>(
    value: &T,
) -> Result<Vec<u8>, crate::state_codec::StateCodecError> {
    let mut bytes = Vec::new();
    encode_file_into(value, &mut bytes)?;
    Ok(bytes)
}

/// [`encode_file`] into `bytes` (emptied first, its memory kept: the writer reuses one
/// buffer for every file).
pub fn encode_file_into<T: Serialize>(
    value: &T,
    bytes: &mut Vec<u8>,
) -> Result<(), crate::state_codec::StateCodecError> {
    bytes.clear();
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.resize(HEADER, 0);
    encode_into(value, bytes)?;
    let payload = &bytes[HEADER..];
    let len = (payload.len() as u64).to_le_bytes();
    let crc = crc32fast::hash(payload).to_le_bytes();
    bytes[10..18].copy_from_slice(&len);
    bytes[18..22].copy_from_slice(&crc);
    Ok(())
}

/// Checks the header, length and checksum of a checkpoint file's `bytes`: its format version
/// and its payload.
fn checked_payload<'a>(path: &Path, bytes: &'a [u8]) -> Result<(u16, &'a [u8]), StoreError> {
    let corrupt = |problem: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        problem,
    };
    if bytes.len() < HEADER || bytes[..8] != MAGIC {
        return Err(corrupt(format!(
            "not a Tidemark checkpoint file (no header; {} bytes)",
            bytes.len()
        )));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(corrupt(format!(
            "checkpoint format version {version}, this build reads versions \
             {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
        )));
    }
    let len = u64::from_le_bytes(bytes[10..18].try_into().expect("8 bytes"));
    let payload = &bytes[HEADER..];
    if payload.len() as u64 != len {
        return Err(corrupt(format!(
            "truncated or extended: the header says {len} bytes of state, the file has {}",
            payload.len()
        )));
    }
    let crc = u32::from_le_bytes(bytes[18..22].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(payload);
    if crc != actual {
        return Err(corrupt(format!(
            "checksum mismatch (CRC-32 {actual:08x}, the header says {crc:08x}): the file is damaged"
        )));
    }
    Ok((version, payload))
}

/// Checks the header, length and checksum of a checkpoint file's `bytes` and decodes it (a
/// `_metadata`, or anything whose payload the format versions share; a state file:
/// [`decode_state_file`]).
pub fn decode_file<T: for<'de> Deserialize<'de>>(
    path: &Path,
    bytes: &[u8],
) -> Result<T, StoreError> {
    let (_, payload) = checked_payload(path, bytes)?;
    decode(payload).map_err(|e| StoreError::Corrupt {
        path: path.to_path_buf(),
        problem: e.to_string(),
    })
}

/// Checks and decodes a `_metadata` file of any format version (that of version 1 or 2 with
/// an empty [`Metadata::key_hash`]); returns it and its format version.
pub fn decode_metadata(path: &Path, bytes: &[u8]) -> Result<(Metadata, u16), StoreError> {
    let (version, payload) = checked_payload(path, bytes)?;
    let decoded = match version {
        1 | 2 => decode::<MetadataV2>(payload).map(|m| Metadata {
            job: m.job,
            id: m.id,
            completed_ms: m.completed_ms,
            vertices: m.vertices,
            key_hash: String::new(),
        }),
        _ => decode(payload),
    };
    let metadata = decoded.map_err(|e| StoreError::Corrupt {
        path: path.to_path_buf(),
        problem: e.to_string(),
    })?;
    Ok((metadata, version))
}

/// Checks and decodes a state file of any format version.
pub fn decode_state_file(path: &Path, bytes: &[u8]) -> Result<StateFile, StoreError> {
    let (version, payload) = checked_payload(path, bytes)?;
    let decoded = match version {
        1 => crate::checkpoint_v1::decode_state_file(payload),
        _ => decode(payload).map_err(|e| e.to_string()),
    };
    decoded.map_err(|problem| StoreError::Corrupt {
        path: path.to_path_buf(),
        problem,
    })
}

/// `<dir>/<job>`: where a job's checkpoints are.
pub fn job_dir(dir: &Path, job: &str) -> PathBuf {
    dir.join(job)
}

/// The folder name of checkpoint `n`.
pub fn folder_name(n: u64) -> String {
    format!("chk-{n}")
}

/// The id of a `chk-<n>` folder name.
pub fn folder_id(name: &str) -> Option<u64> {
    name.strip_prefix("chk-")?.parse().ok()
}

/// The complete checkpoints (with `_metadata`) under `job_dir`, oldest first.
pub fn complete_checkpoints(job_dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(job_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(io_error(job_dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_error(job_dir))?;
        let name = entry.file_name();
        if let Some(n) = name.to_str().and_then(folder_id) {
            if entry.path().join(METADATA).is_file() {
                found.push((n, entry.path()));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The greatest checkpoint id under `job_dir`, complete or not (ids are never reused).
pub fn highest_id(job_dir: &Path) -> u64 {
    fs::read_dir(job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(folder_id))
        .max()
        .unwrap_or(0)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut file = fs::File::create(path).map_err(io_error(path))?;
    file.write_all(bytes).map_err(io_error(path))?;
    file.sync_all().map_err(io_error(path))
}

fn sync_dir(path: &Path) -> Result<(), StoreError> {
    fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io_error(path))
}

/// The name of a vertex subtask's state file.
pub fn state_file_name(vertex: &str, subtask: u32, key_groups: Option<KeyGroupRange>) -> String {
    match key_groups {
        Some(r) => format!("{vertex}.kg-{}-{}", r.start, r.end),
        None => format!("{vertex}.subtask-{subtask}"),
    }
}

/// Writes checkpoint `meta.id` into `job_dir`: each state file (synced), then `_metadata`
/// by an atomic rename; the oldest complete checkpoints beyond `retain` are deleted, those that
/// would be one too many before the rename, so no moment has more than `retain` complete
/// checkpoints (with `retain: 1`, after it). A failure removes the new folder (with `retain` of
/// 2 or more, the oldest may be gone already: `retain - 1` remain). Returns the folder and the
/// bytes written.
pub fn write_checkpoint(
    job_dir: &Path,
    meta: Metadata,
    files: Vec<(usize, StateFile)>,
    retain: usize,
) -> Result<(PathBuf, u64), StoreError> {
    write_checkpoint_with(job_dir, meta, &files, retain, &mut Vec::new())
}

/// [`write_checkpoint`] with `buffer` to encode each file in (its memory kept for the next
/// checkpoint), leaving `files` to the caller.
pub fn write_checkpoint_with(
    job_dir: &Path,
    mut meta: Metadata,
    files: &[(usize, StateFile)],
    retain: usize,
    buffer: &mut Vec<u8>,
) -> Result<(PathBuf, u64), StoreError> {
    let folder = job_dir.join(folder_name(meta.id));
    let result = (|| {
        fs::create_dir_all(&folder).map_err(io_error(&folder))?;
        let mut size = 0u64;
        for (v, file) in files {
            let range = file
                .key_groups
                .map(|(start, end)| KeyGroupRange { start, end });
            let name = state_file_name(&file.vertex, file.subtask, range);
            encode_file_into(file, buffer).map_err(|e| StoreError::Corrupt {
                path: folder.join(&name),
                problem: e.to_string(),
            })?;
            let path = folder.join(&name);
            write_synced(&path, buffer)?;
            size += buffer.len() as u64;
            meta.vertices[*v].files.push(FileMeta {
                name,
                subtask: file.subtask,
                len: buffer.len() as u64,
            });
        }
        encode_file_into(&meta, buffer).map_err(|e| StoreError::Corrupt {
            path: folder.join(METADATA),
            problem: e.to_string(),
        })?;
        let tmp = folder.join("_metadata.inprogress");
        write_synced(&tmp, buffer)?;
        // Retain is exact: the oldest go before the new one is complete, so a kill at any
        // moment leaves at most `retain` complete checkpoints (with `retain: 1` the one there
        // stays until the new one is complete: never none).
        if retain >= 2 {
            prune(job_dir, retain - 1)?;
        }
        let path = folder.join(METADATA);
        fs::rename(&tmp, &path).map_err(io_error(&path))?;
        sync_dir(&folder)?;
        size += buffer.len() as u64;
        Ok(size)
    })();
    let size = match result {
        Ok(size) => size,
        Err(e) => {
            let _ = fs::remove_dir_all(&folder);
            return Err(e);
        }
    };
    prune(job_dir, retain)?;
    Ok((folder, size))
}

/// Deletes the oldest complete checkpoints beyond `keep` (only complete ones count).
fn prune(job_dir: &Path, keep: usize) -> Result<(), StoreError> {
    let complete = complete_checkpoints(job_dir)?;
    if complete.len() > keep {
        for (_, old) in &complete[..complete.len() - keep] {
            let _ = fs::remove_dir_all(old);
        }
    }
    Ok(())
}

/// Removes the `chk-<n>` folders under `job_dir` that never became complete (no `_metadata`:
/// an earlier run was stopped while writing them); returns how many. A new run calls it once
/// at its start, after it took its first id (ids are never reused).
pub fn remove_incomplete(job_dir: &Path) -> usize {
    fs::read_dir(job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().and_then(folder_id).is_some())
        .filter(|e| !e.path().join(METADATA).is_file())
        .filter(|e| fs::remove_dir_all(e.path()).is_ok())
        .count()
}

/// A checkpoint read back whole: its metadata and every state file, checked.
#[derive(Clone, Debug)]
pub struct LoadedCheckpoint {
    /// The folder.
    pub path: PathBuf,
    /// Its `_metadata`.
    pub metadata: Metadata,
    /// Per vertex id, its state files by subtask.
    pub files: BTreeMap<String, Vec<StateFile>>,
}

impl LoadedCheckpoint {
    /// The state file of `vertex`'s subtask `subtask`, if the checkpoint has one.
    pub fn file(&self, vertex: &str, subtask: usize) -> Option<&StateFile> {
        self.files
            .get(vertex)?
            .iter()
            .find(|f| f.subtask as usize == subtask)
    }

    /// The keyed state subtask `subtask` of `parallelism` gets of keyed vertex `vertex` with
    /// `max_parallelism` key groups: the keys of its key-group range, from every old subtask
    /// whose range overlaps it (with their shared values). `None` when the checkpoint has no
    /// keyed state of the vertex.
    pub fn keyed_state(
        &self,
        vertex: &str,
        subtask: usize,
        parallelism: usize,
        max_parallelism: u32,
    ) -> Option<KeyedSnapshot> {
        let range = KeyGroupRange::of_subtask(subtask, parallelism, max_parallelism);
        let mut merged: Option<KeyedSnapshot> = None;
        for file in self.files.get(vertex)? {
            let Some(keyed) = &file.keyed else { continue };
            let part = match file.key_groups {
                Some((start, end)) if !range.overlaps(&KeyGroupRange { start, end }) => continue,
                Some(_) => keyed.part(range),
                // Keyed state of a vertex that is not keyed: its own subtask only.
                None if file.subtask as usize == subtask => keyed.clone(),
                None => continue,
            };
            match &mut merged {
                Some(m) => m.merge(part),
                None => merged = Some(part),
            }
        }
        merged
    }

    /// The vertex of the checkpoint named `id`.
    pub fn vertex(&self, id: &str) -> Option<&VertexMeta> {
        self.metadata.vertices.iter().find(|v| v.id == id)
    }
}

/// Reads checkpoint folder `path` and every file it names, checking each one's header,
/// length and checksum, and that the files are the ones `_metadata` lists.
pub fn read_checkpoint(path: &Path) -> Result<LoadedCheckpoint, StoreError> {
    if !path.is_dir() {
        return Err(StoreError::NotACheckpoint {
            path: path.to_path_buf(),
            problem: "no such checkpoint folder".into(),
        });
    }
    let meta_path = path.join(METADATA);
    let bytes = match fs::read(&meta_path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StoreError::NotACheckpoint {
            path: path.to_path_buf(),
            problem:
                "incomplete checkpoint (no _metadata): it was never finished and cannot be restored"
                    .into(),
        }),
        Err(e) => return Err(io_error(&meta_path)(e)),
    };
    let (metadata, version) = decode_metadata(&meta_path, &bytes)?;
    // Keyed state grouped by another hash is refused before any state file is read (its
    // keys would not be in the key groups this version's hash gives them).
    if metadata.key_hash != KEY_HASH && metadata.vertices.iter().any(|v| v.keyed) {
        return Err(StoreError::KeyHash {
            path: path.to_path_buf(),
            found: metadata.key_hash,
            version,
        });
    }
    let mut files = BTreeMap::new();
    for v in &metadata.vertices {
        let mut states = Vec::new();
        for f in &v.files {
            let file_path = path.join(&f.name);
            let bytes = fs::read(&file_path).map_err(io_error(&file_path))?;
            if bytes.len() as u64 != f.len {
                return Err(StoreError::Corrupt {
                    path: file_path,
                    problem: format!(
                        "{} bytes, _metadata says {}: the file is truncated or was changed",
                        bytes.len(),
                        f.len
                    ),
                });
            }
            let state = decode_state_file(&file_path, &bytes)?;
            let range_ok = match (v.keyed, state.key_groups, &state.keyed) {
                (true, Some((start, end)), Some(keyed)) => {
                    keyed.max_parallelism() == v.max_parallelism
                        && keyed.fits(KeyGroupRange { start, end })
                }
                (true, _, _) => false,
                (false, _, _) => true,
            };
            if state.vertex != v.id || state.subtask != f.subtask || !range_ok {
                return Err(StoreError::Corrupt {
                    path: file_path,
                    problem: "the file does not hold the state _metadata names".into(),
                });
            }
            states.push(state);
        }
        files.insert(v.id.clone(), states);
    }
    Ok(LoadedCheckpoint {
        path: path.to_path_buf(),
        metadata,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tidemark-store-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn checkpoint(id: u64) -> (Metadata, Vec<(usize, StateFile)>) {
        let mut keyed = KeyedSnapshot::new(8);
        keyed.put(&Value::from("u1"), &(3u64, 4.5f64)).unwrap();
        keyed.set_shared(&-7i64).unwrap();
        let meta = Metadata {
            job: "j".into(),
            id,
            completed_ms: 1,
            vertices: vec![
                VertexMeta {
                    id: "src".into(),
                    kind: "source".into(),
                    parallelism: 1,
                    max_parallelism: 128,
                    keyed: false,
                    files: vec![],
                },
                VertexMeta {
                    id: "win".into(),
                    kind: "operator".into(),
                    parallelism: 1,
                    max_parallelism: 8,
                    keyed: true,
                    files: vec![],
                },
            ],
            key_hash: KEY_HASH.into(),
        };
        let files = vec![
            (
                0,
                StateFile {
                    vertex: "src".into(),
                    subtask: 0,
                    parallelism: 1,
                    position: Some(vec![1, 2, 3]),
                    max_timestamp: Some(99),
                    ..Default::default()
                },
            ),
            (
                1,
                StateFile {
                    vertex: "win".into(),
                    subtask: 0,
                    parallelism: 1,
                    key_groups: Some((0, 8)),
                    keyed: Some(keyed),
                    ..Default::default()
                },
            ),
        ];
        (meta, files)
    }

    #[test]
    fn retain_is_exact_the_oldest_goes_before_the_new_one_is_complete() {
        let dir = tmp("retain-exact");
        for id in 1..=3 {
            let (meta, files) = checkpoint(id);
            write_checkpoint(&dir, meta, files, 3).unwrap();
        }
        // Checkpoint 4 cannot complete (its `_metadata` cannot be renamed into place): by then
        // the oldest is gone, so a kill at that moment would not leave four.
        fs::create_dir_all(dir.join("chk-4").join(METADATA).join("x")).unwrap();
        let (meta, files) = checkpoint(4);
        assert!(write_checkpoint(&dir, meta, files, 3).is_err());
        let ids = |dir: &Path| -> Vec<u64> {
            complete_checkpoints(dir)
                .unwrap()
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(ids(&dir), [2, 3]);
        // With retain 1, the one there stays until the new one is complete.
        let one = tmp("retain-one");
        let (meta, files) = checkpoint(1);
        write_checkpoint(&one, meta, files, 1).unwrap();
        fs::create_dir_all(one.join("chk-2").join(METADATA).join("x")).unwrap();
        let (meta, files) = checkpoint(2);
        assert!(write_checkpoint(&one, meta, files, 1).is_err());
        assert_eq!(ids(&one), [1]);
        let (meta, files) = checkpoint(3);
        write_checkpoint(&one, meta, files, 1).unwrap();
        assert_eq!(ids(&one), [3]);
    }

    #[test]
    fn incomplete_folders_of_an_earlier_run_are_removed() {
        let dir = tmp("incomplete");
        let (meta, files) = checkpoint(1);
        write_checkpoint(&dir, meta, files, 3).unwrap();
        fs::create_dir_all(dir.join("chk-2")).unwrap();
        fs::write(dir.join("chk-2").join("src.0"), b"half").unwrap();
        fs::create_dir_all(dir.join("chk-5")).unwrap();
        fs::create_dir_all(dir.join("not-a-checkpoint")).unwrap();
        assert_eq!(highest_id(&dir), 5);
        assert_eq!(remove_incomplete(&dir), 2);
        assert!(dir.join("chk-1").join(METADATA).is_file());
        assert!(!dir.join("chk-2").exists() && !dir.join("chk-5").exists());
        assert!(dir.join("not-a-checkpoint").exists());
        assert_eq!(remove_incomplete(&dir), 0);
    }

    #[test]
    fn a_written_checkpoint_reads_back_equal_and_retain_keeps_the_newest() {
        let dir = tmp("roundtrip");
        for id in 1..=4 {
            let (meta, files) = checkpoint(id);
            write_checkpoint(&dir, meta, files, 2).unwrap();
        }
        let complete: Vec<u64> = complete_checkpoints(&dir)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(complete, [3, 4]);
        let loaded = read_checkpoint(&dir.join("chk-4")).unwrap();
        let (_, files) = checkpoint(4);
        assert_eq!(loaded.metadata.id, 4);
        assert_eq!(loaded.files["src"], [files[0].1.clone()]);
        assert_eq!(loaded.files["win"], [files[1].1.clone()]);
        assert_eq!(
            loaded.metadata.vertices[1].files[0].name, "win.kg-0-8",
            "one file per (vertex, key-group range)"
        );
        // An incomplete folder does not count and is refused by name.
        fs::create_dir_all(dir.join("chk-9")).unwrap();
        assert_eq!(complete_checkpoints(&dir).unwrap().len(), 2);
        assert_eq!(highest_id(&dir), 9);
        let e = read_checkpoint(&dir.join("chk-9")).unwrap_err().to_string();
        assert!(e.contains("chk-9") && e.contains("incomplete"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Reads the committed fixture `tests/fixtures/checkpoint-v<version>` (the checkpoint of
    /// [`checkpoint`]`(4)` as that format version wrote it) and checks it holds that state.
    fn reads_fixture(version: u16) {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/checkpoint-v{version}"));
        let loaded = read_checkpoint(&fixture.join("chk-4")).unwrap();
        let (meta, files) = checkpoint(4);
        assert_eq!(loaded.metadata, {
            let mut m = meta.clone();
            m.completed_ms = loaded.metadata.completed_ms;
            m.vertices[0].files = loaded.metadata.vertices[0].files.clone();
            m.vertices[1].files = loaded.metadata.vertices[1].files.clone();
            m
        });
        assert_eq!(loaded.files["src"], [files[0].1.clone()]);
        assert_eq!(loaded.files["win"], [files[1].1.clone()]);
        let keyed = loaded.files["win"][0].keyed.as_ref().unwrap();
        assert_eq!(
            keyed.decoded::<(u64, f64)>().unwrap(),
            [(Value::from("u1"), (3, 4.5))]
        );
        assert_eq!(keyed.shared::<i64>().unwrap(), [-7]);
        let header = fs::read(fixture.join("chk-4/win.kg-0-8")).unwrap();
        assert_eq!(&header[..8], b"TDMKCHK\0", "magic");
        assert_eq!(header[8..10], version.to_le_bytes(), "format version");
    }

    /// Versions 1 and 2 grouped keys by the key hash before murmur2: their fixtures (with a
    /// keyed vertex) are refused naming the hash, the format version and the folder, before
    /// any state file is read. Their files still decode (a later build must read every
    /// fixture kept here, or say how old checkpoints are read).
    #[test]
    fn checkpoints_of_versions_1_and_2_with_keyed_state_are_refused_naming_the_key_hash() {
        for version in [1u16, 2] {
            let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("tests/fixtures/checkpoint-v{version}/chk-4"));
            let e = read_checkpoint(&folder).unwrap_err();
            assert!(matches!(e, StoreError::KeyHash { .. }), "{e}");
            let e = e.to_string();
            assert!(
                e.contains(&format!("checkpoint-v{version}/chk-4"))
                    && e.contains("rustc-hash's FxHasher")
                    && e.contains(&format!("checkpoint format version {version}"))
                    && e.contains("\"murmur2\""),
                "{e}"
            );
            let meta = fs::read(folder.join(METADATA)).unwrap();
            let (metadata, read_version) = decode_metadata(&folder.join(METADATA), &meta).unwrap();
            assert_eq!((metadata.key_hash.as_str(), read_version), ("", version));
            assert_eq!(metadata.vertices.len(), 2);
            let (_, files) = checkpoint(4);
            for (name, expected) in [("src.subtask-0", &files[0].1), ("win.kg-0-8", &files[1].1)] {
                let path = folder.join(name);
                let state = decode_state_file(&path, &fs::read(&path).unwrap()).unwrap();
                assert_eq!(&state, expected, "{name} of version {version}");
            }
        }
    }

    /// The same with a checkpoint of version 2 without keyed state: nothing depends on the
    /// key hash, so it is restored.
    #[test]
    fn a_version_2_checkpoint_without_keyed_state_is_read() {
        let dir = tmp("v2-unkeyed");
        let (mut meta, mut files) = checkpoint(1);
        meta.vertices.truncate(1);
        files.truncate(1);
        let (folder, _) = write_checkpoint(&dir, meta.clone(), files.clone(), 3).unwrap();
        // Its `_metadata` as version 2 wrote it: no key hash.
        #[derive(Serialize)]
        struct V2<'a> {
            job: &'a str,
            id: u64,
            completed_ms: i64,
            vertices: &'a [VertexMeta],
        }
        let written = read_checkpoint(&folder).unwrap().metadata;
        let mut bytes = encode_file(&V2 {
            job: &written.job,
            id: written.id,
            completed_ms: written.completed_ms,
            vertices: &written.vertices,
        })
        .unwrap();
        bytes[8..10].copy_from_slice(&2u16.to_le_bytes());
        fs::write(folder.join(METADATA), &bytes).unwrap();
        let loaded = read_checkpoint(&folder).unwrap();
        assert_eq!(loaded.metadata.key_hash, "");
        assert_eq!(loaded.files["src"], [files[0].1.clone()]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The version this build writes; `TIDEMARK_WRITE_FIXTURE=1` writes its fixture again
    /// (never an older version's).
    #[test]
    fn reads_the_checkpoint_the_version_3_fixture_holds() {
        assert_eq!(FORMAT_VERSION, 3, "a new version needs its own fixture");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoint-v3");
        if std::env::var_os("TIDEMARK_WRITE_FIXTURE").is_some() {
            let _ = fs::remove_dir_all(&fixture);
            let (meta, files) = checkpoint(4);
            write_checkpoint(&fixture, meta, files, 3).unwrap();
        }
        reads_fixture(3);
        // What this build writes is the fixture, byte for byte (but the completion time).
        let (_, files) = checkpoint(4);
        let written = encode_file(&files[1].1).unwrap();
        assert_eq!(fs::read(fixture.join("chk-4/win.kg-0-8")).unwrap(), written);
    }

    #[test]
    fn a_flipped_byte_or_a_cut_file_is_refused_naming_the_file() {
        let dir = tmp("corrupt");
        let (meta, files) = checkpoint(1);
        let (folder, _) = write_checkpoint(&dir, meta, files, 3).unwrap();
        let file = folder.join("win.kg-0-8");
        let good = fs::read(&file).unwrap();
        for at in [3, 9, 12, 19, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            fs::write(&file, &bad).unwrap();
            let e = read_checkpoint(&folder).unwrap_err().to_string();
            assert!(e.contains("win.kg-0-8"), "byte {at}: {e}");
        }
        fs::write(&file, &good[..good.len() - 2]).unwrap();
        let e = read_checkpoint(&folder).unwrap_err().to_string();
        assert!(e.contains("win.kg-0-8") && e.contains("truncated"), "{e}");
        fs::write(&file, &good).unwrap();
        assert!(read_checkpoint(&folder).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }
}
