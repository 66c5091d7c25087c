//! Partition positions restored from a checkpoint directory (`--restore`), for the `kafka`
//! source subtasks of one process: offsets from the checkpoint, not the group's commits.
//!
//! Each source subtask recorded, per partition it held, the offset after the last message it
//! handed to the job and the highest record timestamp it had seen there
//! ([`crate::source::KafkaSourcePosition`]). On a restore every subtask leaves its partitions'
//! positions here before the job runs; the group then assigns the partitions afresh, perhaps
//! to other subtasks than before, and whichever subtask is given a partition first reads it
//! from the restored offset (overriding the group's commit, which may lie past it, and `start`)
//! and starts its watermark from the restored timestamp. Each position is used once: a
//! partition that moves again later follows [`crate::handoff`], except that the group's commit
//! does not override the hand-over position of a restored partition (the commit may be from
//! after the checkpoint; in the restored run it is only ever behind what was read).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::metrics::PartitionKey;

/// A partition's restored read position and event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Restored {
    /// The offset of the first message not handed to the job before the checkpoint.
    pub offset: i64,
    /// The highest record timestamp (ns) read from it before the checkpoint, if any.
    pub highest_timestamp: Option<i64>,
}

/// Restored positions per (brokers and group, partition), of one job in this process.
#[derive(Debug, Default)]
pub(crate) struct RestoredPositions {
    /// Offsets not yet given to the consumer that is assigned the partition.
    offsets: Mutex<HashMap<(String, PartitionKey), i64>>,
    /// Timestamps not yet given to the watermarks of the subtask holding the partition.
    timestamps: Mutex<HashMap<(String, PartitionKey), i64>>,
    /// Every partition restored in this run.
    restored: Mutex<HashSet<(String, PartitionKey)>>,
}

impl RestoredPositions {
    /// Keeps `restored` for partition `key` of group `group`.
    pub(crate) fn put(&self, group: &str, key: &PartitionKey, restored: Restored) {
        let k = (group.to_owned(), key.clone());
        self.restored
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k.clone());
        self.offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k.clone(), restored.offset);
        if let Some(ts) = restored.highest_timestamp {
            self.timestamps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(k, ts);
        }
    }

    /// The restored offset of `key`, taken (used once).
    pub(crate) fn take_offset(&self, group: &str, key: &PartitionKey) -> Option<i64> {
        self.offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(group.to_owned(), key.clone()))
    }

    /// True when `key` was restored in this run (its hand-over position is not raised to the
    /// group's commit).
    pub(crate) fn was_restored(&self, group: &str, key: &PartitionKey) -> bool {
        let restored = self.restored.lock().unwrap_or_else(|e| e.into_inner());
        !restored.is_empty() && restored.contains(&(group.to_owned(), key.clone()))
    }

    /// The restored highest timestamp of `key`, taken (used once).
    pub(crate) fn take_timestamp(&self, group: &str, key: &PartitionKey) -> Option<i64> {
        let mut timestamps = self.timestamps.lock().unwrap_or_else(|e| e.into_inner());
        if timestamps.is_empty() {
            return None;
        }
        timestamps.remove(&(group.to_owned(), key.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_position_is_taken_once_by_group() {
        let r = RestoredPositions::default();
        let key = ("t".to_owned(), 1);
        r.put(
            "b|g",
            &key,
            Restored {
                offset: 7,
                highest_timestamp: Some(9),
            },
        );
        assert_eq!(r.take_offset("b|other", &key), None);
        assert_eq!(r.take_offset("b|g", &key), Some(7));
        assert_eq!(r.take_offset("b|g", &key), None);
        assert!(r.was_restored("b|g", &key) && !r.was_restored("b|other", &key));
        assert_eq!(r.take_timestamp("b|g", &key), Some(9));
        assert_eq!(r.take_timestamp("b|g", &key), None);
    }
}
