//! Reading state files of checkpoint format version 1 (written before version 2, see
//! [`crate::checkpoint_store`]): the same [`StateFile`] fields, but the keyed state held each
//! key with its value as a postcard sequence per key group, which this turns into a
//! [`KeyedSnapshot`] (its key groups' byte buffers).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::checkpoint_store::StateFile;
use crate::key_group::MAX_KEY_GROUPS;
use crate::keyed_state::{KeyedSnapshot, StateKey};
use crate::state_codec::decode;

/// A [`StateFile`] as version 1 wrote it (the same fields in the same order).
#[derive(Deserialize)]
struct StateFileV1 {
    vertex: String,
    subtask: u32,
    parallelism: u32,
    key_groups: Option<(u32, u32)>,
    keyed: Option<KeyedSnapshotV1>,
    local: Option<Vec<u8>>,
    position: Option<Vec<u8>>,
    max_timestamp: Option<i64>,
    finished: bool,
}

/// A [`KeyedSnapshot`] as version 1 wrote it.
#[derive(Deserialize)]
struct KeyedSnapshotV1 {
    max_parallelism: u32,
    groups: BTreeMap<u32, Vec<(StateKey, Vec<u8>)>>,
    shared: Vec<Vec<u8>>,
}

impl KeyedSnapshotV1 {
    fn into_snapshot(self) -> Result<KeyedSnapshot, String> {
        if !(1..=MAX_KEY_GROUPS).contains(&self.max_parallelism) {
            return Err(format!(
                "keyed state of {} key groups: expected 1 to {MAX_KEY_GROUPS}",
                self.max_parallelism
            ));
        }
        let mut snapshot = KeyedSnapshot::new(self.max_parallelism);
        for (group, entries) in self.groups {
            for (key, value) in entries {
                snapshot.put_stored(group, &key, &value).ok_or_else(|| {
                    format!(
                        "key group {group} is not below the {} key groups",
                        self.max_parallelism
                    )
                })?;
            }
        }
        for shared in self.shared {
            snapshot.push_shared(shared);
        }
        Ok(snapshot)
    }
}

/// Decodes the payload of a version 1 state file (header already checked).
pub(crate) fn decode_state_file(payload: &[u8]) -> Result<StateFile, String> {
    let v1: StateFileV1 = decode(payload).map_err(|e| e.to_string())?;
    Ok(StateFile {
        vertex: v1.vertex,
        subtask: v1.subtask,
        parallelism: v1.parallelism,
        key_groups: v1.key_groups,
        keyed: v1.keyed.map(KeyedSnapshotV1::into_snapshot).transpose()?,
        local: v1.local,
        position: v1.position,
        max_timestamp: v1.max_timestamp,
        finished: v1.finished,
    })
}
