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
use std::collections::{BTreeMap, HashMap};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::key_group::{KeyGroupRange, KeyGroups};
use crate::state_codec::{decode, encode, StateCodecError};
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

/// One keyed operator subtask's state at a checkpoint: per key group, each key with its
/// encoded value, and the operator-wide values ([`KeyedSnapshot::set_shared`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KeyedSnapshot {
    /// The number of key groups the keys were grouped by.
    max_parallelism: u32,
    /// Per key group, its keys and their values' bytes, in the order they were put.
    groups: BTreeMap<u32, Vec<(StateKey, Vec<u8>)>>,
    /// Operator-wide values: one per old subtask taken over (a snapshot being written has at
    /// most one).
    shared: Vec<Vec<u8>>,
    /// The key-group function of `max_parallelism`, made once.
    #[serde(skip)]
    key_groups: Option<KeyGroups>,
}

/// Equal when they hold the same keys, values and shared values.
impl PartialEq for KeyedSnapshot {
    fn eq(&self, other: &Self) -> bool {
        self.max_parallelism == other.max_parallelism
            && self.groups == other.groups
            && self.shared == other.shared
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

    /// The number of key groups.
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// Puts `key`'s value, encoded with the checkpoint codec, into its key group.
    pub fn put<V: Serialize + ?Sized>(
        &mut self,
        key: &Value,
        value: &V,
    ) -> Result<(), StateCodecError> {
        let bytes = encode(value)?;
        self.put_encoded(key, bytes);
        Ok(())
    }

    /// Puts `key`'s value already encoded.
    pub fn put_encoded(&mut self, key: &Value, bytes: Vec<u8>) {
        let max = self.max_parallelism;
        let group = self
            .key_groups
            .get_or_insert_with(|| KeyGroups::new(max))
            .of(key.routing_hash());
        self.groups
            .entry(group)
            .or_default()
            .push((StateKey::from(key), bytes));
    }

    /// Sets the operator-wide value (replacing one set before).
    pub fn set_shared<V: Serialize + ?Sized>(&mut self, value: &V) -> Result<(), StateCodecError> {
        self.shared = vec![encode(value)?];
        Ok(())
    }

    /// The operator-wide values, decoded: one per old subtask this state came from.
    pub fn shared<V: DeserializeOwned>(&self) -> Result<Vec<V>, StateCodecError> {
        self.shared.iter().map(|b| decode(b)).collect()
    }

    /// Every key and its encoded value, key group by key group.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &StateKey, &[u8])> {
        self.groups
            .iter()
            .flat_map(|(g, entries)| entries.iter().map(move |(k, v)| (*g, k, v.as_slice())))
    }

    /// Every key and its value, decoded.
    pub fn decoded<V: DeserializeOwned>(&self) -> Result<Vec<(Value, V)>, StateCodecError> {
        self.entries()
            .map(|(_, k, v)| Ok((k.to_value()?, decode(v)?)))
            .collect()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.groups.values().map(Vec::len).sum()
    }

    /// True when no key has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key groups that hold state.
    pub fn key_groups(&self) -> impl Iterator<Item = u32> + '_ {
        self.groups.keys().copied()
    }

    /// The part of this snapshot in `range`: its key groups there, and its shared values.
    pub fn part(&self, range: KeyGroupRange) -> KeyedSnapshot {
        KeyedSnapshot {
            max_parallelism: self.max_parallelism,
            groups: self
                .groups
                .range(range.start..range.end)
                .map(|(g, e)| (*g, e.clone()))
                .collect(),
            shared: self.shared.clone(),
            key_groups: None,
        }
    }

    /// Adds the key groups and shared values of `other` (another old subtask's part).
    pub fn merge(&mut self, other: KeyedSnapshot) {
        for (g, mut entries) in other.groups {
            self.groups.entry(g).or_default().append(&mut entries);
        }
        self.shared.extend(other.shared);
    }

    /// Whether every key group of this snapshot is in `range` and each key is in the key
    /// group its hash gives (what a restore checks of a state file).
    pub fn fits(&self, range: KeyGroupRange) -> bool {
        let groups = KeyGroups::new(self.max_parallelism);
        self.groups.iter().all(|(g, entries)| {
            range.contains(*g)
                && entries.iter().all(|(k, _)| {
                    k.to_value()
                        .is_ok_and(|v| groups.of(v.routing_hash()) == *g)
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
