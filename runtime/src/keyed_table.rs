//! Keyed state an operator declares, and the runtime snapshots, restores and rescales.
//!
//! An operator that keeps state per key declares it: [`Operator::keyed_table`] hands the
//! runtime its table, a [`KeyedTable`], and the operator writes nothing else for state. At
//! each checkpoint barrier the runtime puts every key of the table into its key group of a
//! [`KeyedSnapshot`] (encoded with the checkpoint codec, serde and postcard); on a restore,
//! at any parallelism, it hands the table the keys of the subtask's key groups; when key
//! groups move to another owner (behind a Kafka exchange) it makes the table forget them. The
//! snapshot then goes to the vertex's [store](crate::keyed_store), a checkpoint directory or a
//! Kafka state topic, with no code of the operator's.
//!
//! The kinds of keyed state are the kinds of value a [`KeyedState<V>`] holds per key:
//!
//! | kind | per key | as |
//! |---|---|---|
//! | value | one value | `KeyedState<V>` |
//! | list | a list of values | `KeyedState<Vec<V>>` |
//! | time-ordered buffer | values in timestamp order, read by time range, expired from the front | `KeyedState<TimeBuffer<V>>` ([`TimeBuffer`]) |
//! | map | a map of values | `KeyedState<BTreeMap<K, V>>` (or `HashMap`) |
//!
//! Several kinds per key are a struct or tuple of them (a join keeps `(TimeBuffer<L>,
//! TimeBuffer<R>)` per key). Any value that serde serializes can be kept.
//!
//! ```
//! use tidemark_runtime::keyed_table::{KeyedTable, TimeBuffer};
//! use tidemark_runtime::keyed_state::{KeyedSnapshot, KeyedState};
//! use tidemark_runtime::Value;
//!
//! // Per user, the amounts of the last hour, in time order.
//! let mut recent: KeyedState<TimeBuffer<f64>> = KeyedState::new();
//! recent.get_or_default(&Value::from("alice")).push(1_000, 5.0);
//! recent.get_or_default(&Value::from("alice")).push(3_000, 7.0);
//! recent.get_or_default(&Value::from("bob")).push(2_000, 1.0);
//! let alice = recent.get(&Value::from("alice")).unwrap();
//! assert_eq!(alice.range(0, 2_000).map(|(_, v)| *v).collect::<Vec<_>>(), vec![5.0]);
//!
//! // What the runtime does at a checkpoint and on a restore.
//! let table: &mut dyn KeyedTable = &mut recent;
//! let mut snapshot = KeyedSnapshot::new(128);
//! table.snapshot(&mut snapshot).unwrap();
//! let mut restored: KeyedState<TimeBuffer<f64>> = KeyedState::new();
//! (&mut restored as &mut dyn KeyedTable).restore(&snapshot).unwrap();
//! assert_eq!(restored, recent);
//! ```
//!
//! [`Operator::keyed_table`]: crate::Operator::keyed_table

use std::collections::VecDeque;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::keyed_state::{KeyedSnapshot, KeyedState};
use crate::state_codec::StateCodecError;
use crate::value::Value;

/// Keyed state the runtime can snapshot, restore and rescale: what an operator declares with
/// [`Operator::keyed_table`](crate::Operator::keyed_table). [`KeyedState<V>`] is one for any
/// serde `V`; an operator with a layout of its own may implement it.
pub trait KeyedTable: Send {
    /// Puts every key with its state into `snapshot`, each in its key group.
    fn snapshot(&self, snapshot: &mut KeyedSnapshot) -> Result<(), StateCodecError>;

    /// Takes in every key of `snapshot` (the keys of this subtask's key groups), replacing
    /// the state a key had.
    fn restore(&mut self, snapshot: &KeyedSnapshot) -> Result<(), StateCodecError>;

    /// Forgets the state of every key `forget` is true of (their key groups moved away).
    fn forget(&mut self, forget: &dyn Fn(&Value) -> bool) -> Result<(), StateCodecError>;

    /// How many keys have state.
    fn keys(&self) -> usize;
}

impl<V: Serialize + DeserializeOwned + Send> KeyedTable for KeyedState<V> {
    fn snapshot(&self, snapshot: &mut KeyedSnapshot) -> Result<(), StateCodecError> {
        KeyedState::snapshot(self, snapshot)
    }

    fn restore(&mut self, snapshot: &KeyedSnapshot) -> Result<(), StateCodecError> {
        KeyedState::restore(self, snapshot)
    }

    fn forget(&mut self, forget: &dyn Fn(&Value) -> bool) -> Result<(), StateCodecError> {
        self.retain(|key, _| !forget(key));
        Ok(())
    }

    fn keys(&self) -> usize {
        self.len()
    }
}

/// Values in timestamp order: the time-ordered buffer kind of keyed state (Flink's
/// `MapState<Long, List<T>>` of its interval join, as one structure). Values pushed in order
/// are appended; an earlier timestamp is inserted after the values of equal or smaller
/// timestamps, so values of one timestamp keep the order they came in. Read by time range,
/// expired from the front.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TimeBuffer<V> {
    entries: VecDeque<(i64, V)>,
}

impl<V> Default for TimeBuffer<V> {
    fn default() -> Self {
        TimeBuffer {
            entries: VecDeque::new(),
        }
    }
}

impl<V> TimeBuffer<V> {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value` at `timestamp`; returns its index.
    pub fn push(&mut self, timestamp: i64, value: V) -> usize {
        let at = match self.entries.back() {
            Some((last, _)) if *last > timestamp => {
                self.entries.partition_point(|(t, _)| *t <= timestamp)
            }
            _ => self.entries.len(),
        };
        self.entries.insert(at, (timestamp, value));
        at
    }

    /// The values with timestamps in `[from, to]`, in order.
    pub fn range(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, &V)> {
        let start = self.entries.partition_point(|(t, _)| *t < from);
        self.entries
            .range(start..)
            .take_while(move |(t, _)| *t <= to)
            .map(|(t, v)| (*t, v))
    }

    /// The values with timestamps in `[from, to]`, in order, to change.
    pub fn range_mut(&mut self, from: i64, to: i64) -> impl Iterator<Item = (i64, &mut V)> {
        let start = self.entries.partition_point(|(t, _)| *t < from);
        self.entries
            .range_mut(start..)
            .take_while(move |(t, _)| *t <= to)
            .map(|(t, v)| (*t, v))
    }

    /// Removes the values with timestamps up to `until` (inclusive), giving each to `removed`
    /// in order.
    pub fn expire(&mut self, until: i64, mut removed: impl FnMut(i64, V)) {
        while self.entries.front().is_some_and(|(t, _)| *t <= until) {
            let (t, v) = self.entries.pop_front().expect("a front");
            removed(t, v);
        }
    }

    /// Keeps the last value at or before `t` and every value after it, dropping the ones before
    /// (what a versioned row needs: the version valid at `t` and the newer ones).
    pub fn keep_from_last_at(&mut self, t: i64) {
        let at_or_before = self.entries.partition_point(|(ts, _)| *ts <= t);
        if at_or_before > 1 {
            self.entries.drain(..at_or_before - 1);
        }
    }

    /// The smallest timestamp held.
    pub fn first_timestamp(&self) -> Option<i64> {
        self.entries.front().map(|(t, _)| *t)
    }

    /// Every value with its timestamp, in order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &V)> {
        self.entries.iter().map(|(t, v)| (*t, v))
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_group::KeyGroupRange;
    use proptest::prelude::*;

    proptest! {
        /// Whatever order values come in, the buffer holds them sorted by timestamp (values of
        /// one timestamp in arrival order), a range reads exactly those in it, and expiring
        /// removes exactly the prefix.
        #[test]
        fn a_time_buffer_is_ordered_and_read_by_range(
            pushed in prop::collection::vec(-20i64..20, 0..60),
            from in -25i64..25,
            len in 0i64..30,
            until in -25i64..25,
        ) {
            let mut buffer = TimeBuffer::new();
            for (i, t) in pushed.iter().enumerate() {
                buffer.push(*t, i);
            }
            let mut want: Vec<(i64, usize)> = pushed.iter().copied().zip(0..).collect();
            want.sort_by_key(|(t, _)| *t); // stable: arrival order within a timestamp
            let got: Vec<(i64, usize)> = buffer.iter().map(|(t, v)| (t, *v)).collect();
            prop_assert_eq!(&got, &want);
            let to = from + len;
            let in_range: Vec<(i64, usize)> = buffer.range(from, to).map(|(t, v)| (t, *v)).collect();
            let want_range: Vec<(i64, usize)> =
                want.iter().copied().filter(|(t, _)| (from..=to).contains(t)).collect();
            prop_assert_eq!(in_range, want_range);
            let mut removed = Vec::new();
            buffer.expire(until, |t, v| removed.push((t, v)));
            let (gone, kept): (Vec<_>, Vec<_>) = want.into_iter().partition(|(t, _)| *t <= until);
            prop_assert_eq!(removed, gone);
            prop_assert_eq!(buffer.iter().map(|(t, v)| (t, *v)).collect::<Vec<_>>(), kept);
        }
    }

    /// A table of buffers goes through a snapshot split over two subtasks and comes back whole;
    /// forgetting one subtask's key groups leaves the other's.
    #[test]
    fn a_table_of_buffers_is_snapshotted_split_and_forgotten_by_key_group() {
        let mut table: KeyedState<(TimeBuffer<String>, TimeBuffer<i64>)> = KeyedState::new();
        for k in 0..50i64 {
            let sides = table.get_or_default(&Value::Int(k));
            sides.0.push(k * 10, format!("l{k}"));
            sides.1.push(k * 10 - 3, k);
            sides.1.push(k * 10 - 5, -k);
        }
        let mut snapshot = KeyedSnapshot::new(16);
        KeyedTable::snapshot(&table, &mut snapshot).unwrap();
        let mut union: KeyedState<(TimeBuffer<String>, TimeBuffer<i64>)> = KeyedState::new();
        for i in 0..2 {
            let range = KeyGroupRange::of_subtask(i, 2, 16);
            let mut part: KeyedState<(TimeBuffer<String>, TimeBuffer<i64>)> = KeyedState::new();
            KeyedTable::restore(&mut part, &snapshot.part(range)).unwrap();
            assert!(!part.is_empty() && part.len() < 50);
            for (k, v) in part.iter() {
                union.insert(k.clone(), v.clone());
            }
        }
        assert_eq!(union, table);
        let first = KeyGroupRange::of_subtask(0, 2, 16);
        let groups = crate::key_group::KeyGroups::new(16);
        let before = table.len();
        KeyedTable::forget(&mut table, &|k| first.contains(groups.of(k.routing_hash()))).unwrap();
        assert!(table.len() < before);
        assert!(table
            .iter()
            .all(|(k, _)| !first.contains(groups.of(k.routing_hash()))));
        assert_eq!(
            table
                .get(&Value::Int(7))
                .map(|s| s.1.iter().map(|(t, _)| t).collect::<Vec<_>>()),
            (!first.contains(groups.of(Value::Int(7).routing_hash()))).then(|| vec![65, 67])
        );
    }
}
