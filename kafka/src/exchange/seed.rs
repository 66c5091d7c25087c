//! The state of a keyed vertex behind an exchange restored from a checkpoint directory
//! (`tidemark run --restore`): what the checkpoint holds of each exchange partition, kept in
//! the process until the group gives the partition to a reader subtask, whose state store then
//! takes it instead of the state topic's committed state and writes it there under a new
//! generation (`state.rs`), so that every later hand-over restores from it.
//!
//! Two parts of the job put it here before anything is read: each reader subtask's position in
//! the checkpoint (per exchange partition it held: where it was, the highest origins it had
//! taken, what it had heard of the writers, [`SeedPartition`]) and each keyed operator
//! subtask's keys (one key group per exchange partition, [`DirectorySeed::put_state`]). A
//! partition the checkpoint's readers did not hold is restored from the state topic as in any
//! hand-over.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tidemark_runtime::key_group::KeyGroupRange;
use tidemark_runtime::keyed_state::KeyedSnapshot;
use tidemark_runtime::state_codec::{encode, StateCodecError};

use super::replays::SavedOrigin;
use crate::watermarks::Heard;

/// What a reader subtask had of one exchange partition at a checkpoint besides its keys: what
/// a commit record of the state topic holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SeedPartition {
    pub(crate) partition: i32,
    /// The offset of the first exchange message not covered (`None`: not read yet; the
    /// group's commit applies).
    pub(crate) position: Option<i64>,
    pub(crate) origins: Vec<SavedOrigin>,
    pub(crate) marks: Option<Heard>,
}

/// Where the reader of an exchange keeping state continues from: its `Source::position`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReaderPosition {
    pub(crate) partitions: Vec<SeedPartition>,
}

/// What a partition restores to from the checkpoint directory.
#[derive(Debug)]
pub(crate) struct Seeded {
    pub(crate) partition: SeedPartition,
    /// Encoded key → encoded value.
    pub(crate) values: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The operator-wide values, encoded (a [`KeyedSnapshot`] without keys).
    pub(crate) shared: Vec<u8>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per partition, each reader subtask's (by its index in the checkpoint) that held it.
    partitions: BTreeMap<i32, Vec<(usize, SeedPartition)>>,
    /// Per (subtask, key group = partition): encoded key → encoded value.
    values: BTreeMap<(usize, i32), BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Per subtask: the operator-wide values.
    shared: BTreeMap<usize, Vec<u8>>,
}

/// The checkpoint's state of an exchange's partitions, until each is restored.
#[derive(Debug, Default)]
pub(crate) struct DirectorySeed {
    inner: Mutex<Inner>,
}

impl DirectorySeed {
    /// Reader subtask `subtask`'s position in the checkpoint.
    pub(crate) fn put_position(&self, subtask: usize, position: ReaderPosition) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for p in position.partitions {
            inner
                .partitions
                .entry(p.partition)
                .or_default()
                .push((subtask, p));
        }
    }

    /// Keyed operator subtask `subtask`'s keys in the checkpoint (key groups = exchange
    /// partitions), chained behind reader subtask `subtask`.
    pub(crate) fn put_state(
        &self,
        subtask: usize,
        state: &KeyedSnapshot,
    ) -> Result<(), StateCodecError> {
        let shared = encode(&state.part(KeyGroupRange { start: 0, end: 0 }))?;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (group, key, value) in state.entries() {
            inner
                .values
                .entry((subtask, group as i32))
                .or_default()
                .insert(encode(&key)?, value.to_vec());
        }
        inner.shared.insert(subtask, shared);
        Ok(())
    }

    /// Partition `partition`'s state from the checkpoint, once: `None` when the checkpoint's
    /// readers did not hold it (or it was taken already). Two subtasks held it when the
    /// checkpoint was taken while the group moved it between them: the keys and position of
    /// the one that had read further are taken (each subtask's are consistent with each
    /// other; the exchange topic holds every message past either position).
    pub(crate) fn take(&self, partition: i32) -> Option<Seeded> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let held = inner.partitions.remove(&partition)?;
        let (subtask, p) = held.into_iter().max_by_key(|(_, p)| p.position)?;
        Some(Seeded {
            partition: p,
            values: inner
                .values
                .remove(&(subtask, partition))
                .unwrap_or_default(),
            shared: inner.shared.get(&subtask).cloned().unwrap_or_default(),
        })
    }
}
