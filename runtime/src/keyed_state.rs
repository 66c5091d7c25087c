//! Keyed state: the one API every stateful operator (the built-in `window` and `reduce`, and
//! custom Rust operators) keeps its per-key state through, so that a checkpoint can store it
//! per [key group](crate::key_group) and a restore, at any parallelism up to
//! `max_parallelism`, hands each subtask the keys of its key groups.
//!
//! - [`KeyedState<V>`] holds one value per key (Flink's `ValueState`, with the key given
//!   explicitly: the record's [`Record::key`](crate::Record::key)).
//! - An operator with keyed state implements [`Operator::snapshot_keyed`] (write each key's
//!   value into a [`KeyedSnapshot`]: [`KeyedState::snapshot`] does it) and
//!   [`Operator::restore_keyed`] (read back the keys of the subtask's key groups:
//!   [`KeyedState::restore`]). The runtime calls them at the checkpoint barrier and before the
//!   first record of a restored run.
//!
//! Values are encoded with the checkpoint codec ([`crate::state_codec`], postcard), keys as a
//! [`StateKey`]. A [`KeyedSnapshot`] can also carry one operator-wide value
//! ([`KeyedSnapshot::set_shared`], say the window's event-time progress): on a restore every
//! subtask gets the shared values of each old subtask whose key groups it takes over.
//!
//! [`Operator::snapshot_keyed`]: crate::Operator::snapshot_keyed
//! [`Operator::restore_keyed`]: crate::Operator::restore_keyed

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::key_group::{KeyGroupRange, KeyGroups, MAX_KEY_GROUPS};
use crate::state_codec::{append, decode, encode, varint_bytes, StateCodecError};
use crate::value::Value;

/// A key as stored in a checkpoint: [`Value`] in a form every serde format reads back (its own
/// serde form is JSON's, which a binary codec cannot read without a schema).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StateKey {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A double, by its bits (so `-0.0` and NaNs come back as they were).
    Double(u64),
    /// A string.
    String(String),
    /// A list or a map, as JSON text.
    Json(String),
}

impl From<&Value> for StateKey {
    fn from(v: &Value) -> Self {
        match v {
            Value::Null => StateKey::Null,
            Value::Bool(b) => StateKey::Bool(*b),
            Value::Int(i) => StateKey::Int(*i),
            Value::Double(d) => StateKey::Double(d.to_bits()),
            Value::String(s) => StateKey::String(s.to_string()),
            other => StateKey::Json(serde_json::Value::from(other).to_string()),
        }
    }
}

impl StateKey {
    /// The key as a [`Value`] again.
    pub fn to_value(&self) -> Result<Value, StateCodecError> {
        Ok(match self {
            StateKey::Null => Value::Null,
            StateKey::Bool(b) => Value::Bool(*b),
            StateKey::Int(i) => Value::Int(*i),
            StateKey::Double(bits) => Value::Double(f64::from_bits(*bits)),
            StateKey::String(s) => Value::from(s.as_str()),
            StateKey::Json(text) => Value::from_json(text.as_bytes())
                .map_err(|_| StateCodecError::from(postcard::Error::DeserializeBadEncoding))?,
        })
    }
}

/// A key as its [`StateKey`] serializes, borrowed from the [`Value`] (the same bytes, without
/// making one: no string copied).
#[derive(Serialize)]
#[serde(rename = "StateKey")]
enum StateKeyView<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Double(u64),
    String(&'a str),
    Json(String),
}

/// Appends `key` encoded as its [`StateKey`].
#[inline]
fn encode_key(key: &Value, out: &mut Vec<u8>) -> postcard::Result<()> {
    let view = match key {
        Value::Null => StateKeyView::Null,
        Value::Bool(b) => StateKeyView::Bool(*b),
        Value::Int(i) => StateKeyView::Int(*i),
        Value::Double(d) => StateKeyView::Double(d.to_bits()),
        Value::String(s) => StateKeyView::String(s),
        other => StateKeyView::Json(serde_json::Value::from(other).to_string()),
    };
    append(&view, out)
}

/// One key group of a snapshot: its entries back to back, each a key ([`StateKey`], postcard)
/// and its value's bytes (postcard's byte string: a varint length, then the bytes).
#[derive(Clone, Debug, Default, PartialEq)]
struct Group {
    /// How many entries `bytes` holds.
    entries: u64,
    bytes: Vec<u8>,
}

impl Group {
    /// Appends `key` with the value `write` encodes; on an error the group is left as it was.
    #[inline]
    fn push_with(
        &mut self,
        key: &Value,
        write: impl FnOnce(&mut Vec<u8>) -> postcard::Result<()>,
    ) -> postcard::Result<()> {
        let start = self.bytes.len();
        let pushed = (|| {
            encode_key(key, &mut self.bytes)?;
            // The value goes after a one-byte length, which is then filled in; a value of 128
            // bytes or more needs a longer varint, so its bytes move up.
            let slot = self.bytes.len();
            self.bytes.push(0);
            write(&mut self.bytes)?;
            let len = self.bytes.len() - slot - 1;
            if len < 0x80 {
                self.bytes[slot] = len as u8;
            } else {
                let (varint, n) = varint_bytes(len as u64);
                self.bytes
                    .splice(slot..slot + 1, varint[..n].iter().copied());
            }
            Ok(())
        })();
        match pushed {
            Ok(()) => self.entries += 1,
            Err(_) => self.bytes.truncate(start),
        }
        pushed
    }

    /// Appends `key` (a stored key: reading an older format) with its value already encoded.
    fn push_stored(&mut self, key: &StateKey, bytes: &[u8]) -> postcard::Result<()> {
        let start = self.bytes.len();
        let pushed = append(key, &mut self.bytes)
            .and_then(|()| append(serde_bytes::Bytes::new(bytes), &mut self.bytes));
        match pushed {
            Ok(()) => self.entries += 1,
            Err(_) => self.bytes.truncate(start),
        }
        pushed
    }

    /// Every entry: its key and its value's bytes (an error where the bytes are not entries).
    fn entries(&self) -> GroupEntries<'_> {
        GroupEntries {
            rest: &self.bytes,
            left: self.entries,
        }
    }

    /// Whether `bytes` is exactly `entries` entries.
    fn is_well_formed(&self) -> bool {
        let mut entries = self.entries();
        entries.by_ref().all(|e| e.is_ok()) && entries.rest.is_empty()
    }
}

/// The entries of a [`Group`], decoded one by one.
struct GroupEntries<'a> {
    rest: &'a [u8],
    left: u64,
}

impl<'a> Iterator for GroupEntries<'a> {
    type Item = Result<(StateKey, &'a [u8]), StateCodecError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let entry = postcard::take_from_bytes::<StateKey>(self.rest).and_then(|(key, rest)| {
            let (value, rest) = postcard::take_from_bytes::<&[u8]>(rest)?;
            Ok((key, value, rest))
        });
        Some(match entry {
            Ok((key, value, rest)) => {
                self.rest = rest;
                Ok((key, value))
            }
            Err(e) => {
                self.left = 0;
                Err(e.into())
            }
        })
    }
}

/// One keyed operator subtask's state at a checkpoint: per key group, each key with its
/// encoded value, and the operator-wide values ([`KeyedSnapshot::set_shared`]).
///
/// A snapshot keeps each key group's entries encoded in one buffer, in the order they were
/// put ([`KeyedSnapshot::put`] encodes a key and its value straight into it), so taking a
/// snapshot allocates nothing per key, and writing it copies those buffers as they are (its
/// serde form, the checkpoint file's, holds each key group as one byte string). A snapshot
/// [`cleared`](KeyedSnapshot::clear) keeps its buffers for the next checkpoint.
#[derive(Clone, Debug, Default)]
pub struct KeyedSnapshot {
    /// The number of key groups the keys were grouped by.
    max_parallelism: u32,
    /// Indexed by key group (up to the highest one that has state).
    groups: Vec<Group>,
    /// Operator-wide values: one per old subtask taken over (a snapshot being written has at
    /// most one).
    shared: Vec<Vec<u8>>,
    /// The key-group function of `max_parallelism`, made once.
    key_groups: Option<KeyGroups>,
}

/// Equal when they hold the same keys, values and shared values.
impl PartialEq for KeyedSnapshot {
    fn eq(&self, other: &Self) -> bool {
        self.max_parallelism == other.max_parallelism
            && self.filled().eq(other.filled())
            && self.shared == other.shared
    }
}

/// The serde form of a snapshot (the checkpoint file's, format version 2): each key group that
/// has state with its number of entries and its entries as one byte string.
#[derive(Serialize)]
struct SnapshotForm<'a> {
    max_parallelism: u32,
    groups: Vec<GroupForm<'a>>,
    shared: &'a [Vec<u8>],
}

#[derive(Serialize)]
struct GroupForm<'a> {
    group: u32,
    entries: u64,
    bytes: &'a serde_bytes::Bytes,
}

#[derive(Deserialize)]
struct SnapshotRead {
    max_parallelism: u32,
    groups: Vec<GroupRead>,
    shared: Vec<Vec<u8>>,
}

#[derive(Deserialize)]
struct GroupRead {
    group: u32,
    entries: u64,
    bytes: serde_bytes::ByteBuf,
}

impl Serialize for KeyedSnapshot {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SnapshotForm {
            max_parallelism: self.max_parallelism,
            groups: self
                .filled()
                .map(|(group, g)| GroupForm {
                    group,
                    entries: g.entries,
                    bytes: serde_bytes::Bytes::new(&g.bytes),
                })
                .collect(),
            shared: &self.shared,
        }
        .serialize(serializer)
    }
}

/// Checks what it reads: the number of key groups, each key group once, in order and below
/// it, and each one's bytes exactly its entries.
impl<'de> Deserialize<'de> for KeyedSnapshot {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let read = SnapshotRead::deserialize(deserializer)?;
        if !(1..=MAX_KEY_GROUPS).contains(&read.max_parallelism) {
            return Err(D::Error::custom(format!(
                "keyed state of {} key groups: expected 1 to {MAX_KEY_GROUPS}",
                read.max_parallelism
            )));
        }
        let mut snapshot = KeyedSnapshot::new(read.max_parallelism);
        snapshot.shared = read.shared;
        for g in read.groups {
            if g.group >= read.max_parallelism || (g.group as usize) < snapshot.groups.len() {
                return Err(D::Error::custom(format!(
                    "key group {} out of order or not below {}",
                    g.group, read.max_parallelism
                )));
            }
            let group = Group {
                entries: g.entries,
                bytes: g.bytes.into_vec(),
            };
            if !group.is_well_formed() {
                return Err(D::Error::custom(format!(
                    "key group {}: its bytes are not {} entries",
                    g.group, g.entries
                )));
            }
            *snapshot.group_at(g.group) = group;
        }
        Ok(snapshot)
    }
}

impl KeyedSnapshot {
    /// An empty snapshot grouping keys by `max_parallelism` key groups.
    pub fn new(max_parallelism: u32) -> Self {
        KeyedSnapshot {
            max_parallelism: max_parallelism.max(1),
            ..Default::default()
        }
    }

    /// Empties the snapshot for `max_parallelism` key groups, keeping its buffers (the next
    /// checkpoint's snapshot then writes into memory already in use).
    pub fn clear(&mut self, max_parallelism: u32) {
        let max_parallelism = max_parallelism.max(1);
        if max_parallelism != self.max_parallelism {
            self.max_parallelism = max_parallelism;
            self.key_groups = None;
            self.groups.truncate(max_parallelism as usize);
        }
        for g in &mut self.groups {
            g.entries = 0;
            g.bytes.clear();
        }
        self.shared.clear();
    }

    /// The number of key groups.
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// The key groups that have state, with their number.
    fn filled(&self) -> impl Iterator<Item = (u32, &Group)> {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.entries > 0)
            .map(|(i, g)| (i as u32, g))
    }

    /// Key group `group` (below `max_parallelism`), made empty if it was not there.
    fn group_at(&mut self, group: u32) -> &mut Group {
        let i = group as usize;
        if i >= self.groups.len() {
            self.groups.resize_with(i + 1, Group::default);
        }
        &mut self.groups[i]
    }

    /// The key group of `key`.
    #[inline]
    fn group_of(&mut self, key: &Value) -> u32 {
        let max = self.max_parallelism;
        self.key_groups
            .get_or_insert_with(|| KeyGroups::new(max))
            .of(key.routing_hash())
    }

    /// Puts `key`'s value, encoded with the checkpoint codec, into its key group.
    pub fn put<V: Serialize + ?Sized>(
        &mut self,
        key: &Value,
        value: &V,
    ) -> Result<(), StateCodecError> {
        let group = self.group_of(key);
        Ok(self
            .group_at(group)
            .push_with(key, |out| append(value, out))?)
    }

    /// Puts `key`'s value already encoded by the checkpoint codec (read from a store as it
    /// was written: the Kafka state topic's values).
    pub fn put_encoded(&mut self, key: &Value, bytes: Vec<u8>) {
        let group = self.group_of(key);
        self.group_at(group)
            .push_with(key, |out| {
                out.extend_from_slice(&bytes);
                Ok(())
            })
            .expect("a key and encoded bytes always go in");
    }

    /// Puts a key already in its stored form, with its value's bytes, into key group `group`
    /// (reading an older format); `None` when the group is not below `max_parallelism`.
    pub(crate) fn put_stored(&mut self, group: u32, key: &StateKey, bytes: &[u8]) -> Option<()> {
        if group >= self.max_parallelism {
            return None;
        }
        self.group_at(group).push_stored(key, bytes).ok()
    }

    /// Sets the operator-wide value (replacing one set before).
    pub fn set_shared<V: Serialize + ?Sized>(&mut self, value: &V) -> Result<(), StateCodecError> {
        self.shared = vec![encode(value)?];
        Ok(())
    }

    /// Adds an operator-wide value already encoded (reading an older format).
    pub(crate) fn push_shared(&mut self, bytes: Vec<u8>) {
        self.shared.push(bytes);
    }

    /// The operator-wide values, decoded: one per old subtask this state came from.
    pub fn shared<V: DeserializeOwned>(&self) -> Result<Vec<V>, StateCodecError> {
        self.shared.iter().map(|b| decode(b)).collect()
    }

    /// Every key and its encoded value, key group by key group (each key decoded from the
    /// group's bytes).
    pub fn entries(&self) -> impl Iterator<Item = (u32, StateKey, &[u8])> {
        self.filled().flat_map(|(g, group)| {
            group
                .entries()
                // A snapshot's groups are entries by construction: `put` writes them and
                // reading one checks them.
                .map_while(Result::ok)
                .map(move |(k, v)| (g, k, v))
        })
    }

    /// Every key and its value, decoded.
    pub fn decoded<V: DeserializeOwned>(&self) -> Result<Vec<(Value, V)>, StateCodecError> {
        let mut out = Vec::with_capacity(self.len());
        for (_, group) in self.filled() {
            for entry in group.entries() {
                let (k, v) = entry?;
                out.push((k.to_value()?, decode(v)?));
            }
        }
        Ok(out)
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.entries as usize).sum()
    }

    /// True when no key has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key groups that hold state.
    pub fn key_groups(&self) -> impl Iterator<Item = u32> + '_ {
        self.filled().map(|(g, _)| g)
    }

    /// The bytes the entries take (what a checkpoint file holds of them).
    pub fn encoded_len(&self) -> usize {
        self.groups.iter().map(|g| g.bytes.len()).sum()
    }

    /// The part of this snapshot in `range`: its key groups there, and its shared values.
    pub fn part(&self, range: KeyGroupRange) -> KeyedSnapshot {
        let end = (range.end as usize).min(self.groups.len());
        let start = (range.start as usize).min(end);
        let mut groups = vec![Group::default(); start];
        groups.extend_from_slice(&self.groups[start..end]);
        KeyedSnapshot {
            max_parallelism: self.max_parallelism,
            groups,
            shared: self.shared.clone(),
            key_groups: None,
        }
    }

    /// Adds the key groups and shared values of `other` (another old subtask's part).
    pub fn merge(&mut self, other: KeyedSnapshot) {
        for (i, g) in other.groups.into_iter().enumerate() {
            if g.entries == 0 {
                continue;
            }
            let into = self.group_at(i as u32);
            if into.entries == 0 {
                *into = g;
            } else {
                into.bytes.extend_from_slice(&g.bytes);
                into.entries += g.entries;
            }
        }
        self.shared.extend(other.shared);
    }

    /// Whether every key group of this snapshot is in `range` and each key is in the key
    /// group its hash gives (what a restore checks of a state file).
    pub fn fits(&self, range: KeyGroupRange) -> bool {
        let groups = KeyGroups::new(self.max_parallelism);
        self.filled().all(|(g, group)| {
            range.contains(g)
                && group.entries().all(|e| {
                    e.is_ok_and(|(k, _)| {
                        k.to_value().is_ok_and(|v| groups.of(v.routing_hash()) == g)
                    })
                })
        })
    }
}

/// One value per key: the keyed state of a custom operator (and the model of the built-ins').
///
/// ```
/// use tidemark_runtime::keyed_state::{KeyedSnapshot, KeyedState};
/// use tidemark_runtime::Value;
///
/// let mut counts: KeyedState<u64> = KeyedState::new();
/// *counts.get_or_default(&Value::from("alice")) += 2;
/// *counts.get_or_default(&Value::from("bob")) += 1;
///
/// // At a checkpoint: every key into its key group.
/// let mut snapshot = KeyedSnapshot::new(128);
/// counts.snapshot(&mut snapshot).unwrap();
/// // On a restore: the keys of this subtask's key groups.
/// let mut restored: KeyedState<u64> = KeyedState::new();
/// restored.restore(&snapshot).unwrap();
/// assert_eq!(restored.get(&Value::from("alice")), Some(&2));
/// assert_eq!(restored, counts);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct KeyedState<V> {
    values: HashMap<Value, V>,
}

impl<V> Default for KeyedState<V> {
    fn default() -> Self {
        KeyedState {
            values: HashMap::new(),
        }
    }
}

impl<V> KeyedState<V> {
    /// No key has state.
    pub fn new() -> Self {
        Self::default()
    }

    /// `key`'s value, if it has one.
    pub fn get(&self, key: &Value) -> Option<&V> {
        self.values.get(key)
    }

    /// `key`'s value to change, if it has one.
    pub fn get_mut(&mut self, key: &Value) -> Option<&mut V> {
        self.values.get_mut(key)
    }

    /// `key`'s value, made with `make` if it has none (the key is cloned only then).
    pub fn get_or_insert_with(&mut self, key: &Value, make: impl FnOnce() -> V) -> &mut V {
        if !self.values.contains_key(key) {
            self.values.insert(key.clone(), make());
        }
        self.values.get_mut(key).expect("inserted above")
    }

    /// `key`'s value, the default if it has none.
    pub fn get_or_default(&mut self, key: &Value) -> &mut V
    where
        V: Default,
    {
        self.get_or_insert_with(key, V::default)
    }

    /// Sets `key`'s value.
    pub fn insert(&mut self, key: Value, value: V) -> Option<V> {
        self.values.insert(key, value)
    }

    /// Forgets `key`'s value.
    pub fn remove(&mut self, key: &Value) -> Option<V> {
        self.values.remove(key)
    }

    /// Every key with its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Value, &V)> {
        self.values.iter()
    }

    /// How many keys have state.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when no key has state.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Keeps only the keys `keep` is true of.
    pub fn retain(&mut self, mut keep: impl FnMut(&Value, &mut V) -> bool) {
        self.values.retain(|k, v| keep(k, v));
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.values.clear();
    }
}

impl<V: Serialize + DeserializeOwned> KeyedState<V> {
    /// Writes every key's value into `snapshot`, each in its key group.
    pub fn snapshot(&self, snapshot: &mut KeyedSnapshot) -> Result<(), StateCodecError> {
        for (k, v) in &self.values {
            snapshot.put(k, v)?;
        }
        Ok(())
    }

    /// Adds every key of `snapshot` (the keys of this subtask's key groups), replacing a
    /// value the key had.
    pub fn restore(&mut self, snapshot: &KeyedSnapshot) -> Result<(), StateCodecError> {
        for (key, value) in snapshot.decoded::<V>()? {
            match self.values.entry(key) {
                Entry::Occupied(mut o) => {
                    o.insert(value);
                }
                Entry::Vacant(v) => {
                    v.insert(value);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_group::{key_group, KeyGroupRange};
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<f64>().prop_map(Value::Double),
            "[a-z0-9 é-]{0,12}".prop_map(|s| Value::from(s.as_str())),
            prop::collection::vec(any::<i32>(), 0..3)
                .prop_map(|v| Value::from(serde_json::Value::from(v))),
        ]
    }

    proptest! {
        #[test]
        fn every_key_comes_back_in_its_key_group(
            entries in prop::collection::vec((key(), any::<(u64, f64, Option<i64>)>()), 0..60),
            m in 1u32..300,
            p in 1usize..6,
        ) {
            let p = p.min(m as usize);
            let mut state: KeyedState<(u64, f64, Option<i64>)> = KeyedState::new();
            for (k, v) in entries {
                state.insert(k, v);
            }
            let mut snapshot = KeyedSnapshot::new(m);
            snapshot.set_shared(&7u64).unwrap();
            state.snapshot(&mut snapshot).unwrap();
            // Through the codec, as a checkpoint file holds it.
            let snapshot: KeyedSnapshot = decode(&encode(&snapshot).unwrap()).unwrap();
            prop_assert_eq!(snapshot.len(), state.len());
            // Split over p subtasks and restored: every key once, equal, in its subtask.
            let mut union: KeyedState<(u64, f64, Option<i64>)> = KeyedState::new();
            for i in 0..p {
                let range = KeyGroupRange::of_subtask(i, p, m);
                let part = snapshot.part(range);
                prop_assert!(part.fits(range));
                prop_assert_eq!(part.shared::<u64>().unwrap(), vec![7]);
                let mut restored = KeyedState::new();
                restored.restore(&part).unwrap();
                for (k, v) in restored.iter() {
                    prop_assert!(range.contains(key_group(k.routing_hash(), m)));
                    prop_assert!(union.insert(k.clone(), *v).is_none(), "key twice: {:?}", k);
                }
            }
            // Doubles compare by bits through `Value`, so NaNs too.
            prop_assert_eq!(union.len(), state.len());
            for (k, v) in state.iter() {
                let got = union.get(k).unwrap();
                prop_assert_eq!(got.0, v.0);
                prop_assert_eq!(got.1.to_bits(), v.1.to_bits());
                prop_assert_eq!(got.2, v.2);
            }
        }
    }

    proptest! {
        /// A key a snapshot writes is byte for byte the [`StateKey`] it reads.
        #[test]
        fn a_key_encodes_as_its_state_key(k in key()) {
            let mut out = Vec::new();
            encode_key(&k, &mut out).unwrap();
            prop_assert_eq!(out, encode(&StateKey::from(&k)).unwrap());
        }

        /// Values of any length (a length of 128 bytes or more takes a longer varint) come
        /// back, through the codec, in the order they were put; a cleared snapshot reused
        /// holds the same as a new one.
        #[test]
        fn values_of_any_length_come_back_and_a_cleared_snapshot_is_new(
            lens in prop::collection::vec(0usize..400, 1..40),
        ) {
            let mut reused = KeyedSnapshot::new(4);
            for k in 0..50i64 {
                reused.put(&Value::Int(k), &vec![k as u8; 300]).unwrap();
            }
            reused.set_shared(&1u8).unwrap();
            reused.clear(8);
            let mut fresh = KeyedSnapshot::new(8);
            for (k, len) in lens.iter().enumerate() {
                let value = vec![k as u8; *len];
                let key = Value::from(format!("k{k}").as_str());
                reused.put(&key, &value).unwrap();
                fresh.put(&key, &value).unwrap();
            }
            prop_assert_eq!(&reused, &fresh);
            let back: KeyedSnapshot = decode(&encode(&reused).unwrap()).unwrap();
            prop_assert_eq!(back.len(), lens.len());
            prop_assert_eq!(back.max_parallelism(), 8);
            prop_assert!(back.shared::<u8>().unwrap().is_empty());
            let mut got: Vec<(Value, Vec<u8>)> = back.decoded().unwrap();
            got.sort_by_key(|(k, _)| k.to_string());
            let mut want: Vec<(Value, Vec<u8>)> = lens
                .iter()
                .enumerate()
                .map(|(k, len)| (Value::from(format!("k{k}").as_str()), vec![k as u8; *len]))
                .collect();
            want.sort_by_key(|(k, _)| k.to_string());
            prop_assert_eq!(got, want);
        }
    }

    /// A snapshot's serde form is checked when read: entries that do not add up, a key group
    /// beyond the number of key groups or out of order, or a bad number of key groups are
    /// errors, not a snapshot that fails later.
    #[test]
    fn a_damaged_snapshot_is_an_error_when_read() {
        #[derive(Serialize)]
        struct Form {
            max_parallelism: u32,
            groups: Vec<(u32, u64, serde_bytes::ByteBuf)>,
            shared: Vec<Vec<u8>>,
        }
        let mut one = KeyedSnapshot::new(8);
        one.put(&Value::Int(3), &5u64).unwrap();
        let group = one.key_groups().next().unwrap();
        let bytes = serde_bytes::ByteBuf::from(one.groups[group as usize].bytes.clone());
        let read = |max_parallelism, groups: Vec<(u32, u64, serde_bytes::ByteBuf)>| {
            decode::<KeyedSnapshot>(
                &encode(&Form {
                    max_parallelism,
                    groups,
                    shared: vec![],
                })
                .unwrap(),
            )
        };
        let good = read(8, vec![(group, 1, bytes.clone())]).unwrap();
        assert_eq!(good, one);
        assert!(good.fits(KeyGroupRange { start: 0, end: 8 }));
        for bad in [
            read(8, vec![(group, 2, bytes.clone())]),
            read(8, vec![(group, 0, bytes.clone())]),
            read(
                8,
                vec![(group, 1, serde_bytes::ByteBuf::from(vec![2u8, 6, 1]))],
            ),
            read(8, vec![(8, 1, bytes.clone())]),
            read(
                8,
                vec![(group, 1, bytes.clone()), (group, 1, bytes.clone())],
            ),
            read(0, vec![]),
            read(MAX_KEY_GROUPS + 1, vec![]),
        ] {
            assert!(bad.is_err());
        }
        // In range but the key is not of that key group: read, and refused by `fits`.
        let other = read(8, vec![((group + 1) % 8, 1, bytes)]).unwrap();
        assert!(!other.fits(KeyGroupRange { start: 0, end: 8 }));
    }

    #[test]
    fn a_snapshot_outside_its_range_does_not_fit() {
        let mut snapshot = KeyedSnapshot::new(8);
        for k in 0..100i64 {
            snapshot.put(&Value::Int(k), &k).unwrap();
        }
        let all = KeyGroupRange { start: 0, end: 8 };
        assert!(snapshot.fits(all));
        assert!(!snapshot.fits(KeyGroupRange { start: 0, end: 4 }));
        let mut merged = snapshot.part(KeyGroupRange { start: 0, end: 3 });
        merged.merge(snapshot.part(KeyGroupRange { start: 3, end: 8 }));
        assert_eq!(merged.len(), 100);
        assert_eq!(merged.shared::<u64>().unwrap().len(), 0);
    }
}
