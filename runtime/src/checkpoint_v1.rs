//! Reading state files of checkpoint format version 1 (written before version 2, see
//! [`crate::checkpoint_store`]): the same [`StateFile`] fields, but the keyed state held each
//! key with its value as a postcard sequence per key group, which this turns into a
//! [`KeyedSnapshot`] (its key groups' byte buffers).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::key_group::MAX_KEY_GROUPS;
use crate::keyed_state::{KeyedSnapshot, StateKey};
use crate::state_codec::decode;
use crate::state_file::StateFile;

/// A [`StateFile`] as version 1 wrote it (the same fields in the same order).
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
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
#[cfg_attr(test, derive(serde::Serialize))]
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::checkpoint_store::{self, encode_file};
    use crate::key_group::key_group;
    use crate::state_codec::encode;
    use crate::Value;

    /// A version 1 file and the version 2 file of the same state decode equal, with many keys
    /// in several key groups (the v1 layout written by its own serde types).
    #[test]
    fn a_version_1_file_reads_as_the_same_state_as_version_2() {
        let m = 16;
        let mut snapshot = KeyedSnapshot::new(m);
        let mut groups: BTreeMap<u32, Vec<_>> = BTreeMap::new();
        for k in 0..500i64 {
            let key = match k % 3 {
                0 => Value::Int(k),
                1 => Value::from(format!("user-{k}").as_str()),
                _ => Value::Double(k as f64 / 7.0),
            };
            // Some values are long enough for a two-byte length.
            let value: Vec<u64> = (0..(k % 40) as u64).map(|i| i << 20).collect();
            snapshot.put(&key, &value).unwrap();
            groups
                .entry(key_group(key.routing_hash(), m))
                .or_default()
                .push((StateKey::from(&key), encode(&value).unwrap()));
        }
        snapshot.set_shared(&11u64).unwrap();
        let v1 = StateFileV1 {
            vertex: "win".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: Some((0, m)),
            keyed: Some(KeyedSnapshotV1 {
                max_parallelism: m,
                groups,
                shared: vec![encode(&11u64).unwrap()],
            }),
            local: Some(vec![5]),
            position: None,
            max_timestamp: Some(-3),
            finished: true,
        };
        let mut v1_bytes = encode_file(&v1).unwrap();
        v1_bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
        let v2 = StateFile {
            vertex: "win".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: Some((0, m)),
            keyed: Some(snapshot),
            local: Some(vec![5]),
            position: None,
            max_timestamp: Some(-3),
            finished: true,
        };
        let path = Path::new("win.kg-0-16");
        let from_v1 = checkpoint_store::decode_state_file(path, &v1_bytes).unwrap();
        let from_v2 =
            checkpoint_store::decode_state_file(path, &encode_file(&v2).unwrap()).unwrap();
        assert_eq!(from_v1, v2);
        assert_eq!(from_v2, v2);
        assert_eq!(from_v1.keyed.as_ref().unwrap().len(), 500);
    }
}
