//! Keyed state that moves while a job runs: the reader of a Kafka exchange owns the state of
//! the keyed operator chained behind it per exchange partition (one key group per partition),
//! and when the group gives it a partition or takes one away, the operator must take in that
//! partition's restored keys before the reader's next records, or forget them without firing
//! anything (`docs/kafka.md`, "State that moves with its partitions").
//!
//! The operator's store says so ([`KeyedStore::take_moves`](crate::keyed_store::KeyedStore::take_moves),
//! the Kafka state topic's), asked after every poll of the source the operator is chained
//! behind; the task applies [`StateMove::Restore`] before it pushes the poll's records down the
//! chain and [`StateMove::Forget`] after (records the source took before the partition was
//! revoked still belong to its state until then). At each checkpoint barrier the operator's
//! [`KeyedSnapshot`], grouped by the store's key groups, goes to the store
//! ([`KeyedStore::save`](crate::keyed_store::KeyedStore::save)). The checkpoint directory's
//! store makes one move only: the restored keys, before the first record.
//!
//! **Event time per key group.** A partition that moves to a subtask whose event time is
//! already past the partition's own (its previous owner died holding records the rest of the
//! job has long passed) must not have those records judged by the subtask's event time: they
//! are on time for the partition (Kafka Streams keeps stream time per task for this reason).
//! So a [`StateMove::Restore`] says when its key groups are behind
//! ([`StateMove::Restore::event_time`]), and [`StateMove::EventTime`] moves, applied after
//! the records of each poll, carry those key groups' own watermark until it reaches the
//! subtask's; the subtask's watermark does not advance meanwhile (the partition holds it
//! back). An event-time operator keeps such key groups apart until then
//! ([`Operator::restore_keyed_behind`](crate::Operator::restore_keyed_behind),
//! [`Operator::key_groups_event_time`](crate::Operator::key_groups_event_time)).

use crate::key_group::KeyGroups;
use crate::keyed_state::KeyedSnapshot;
use crate::value::Value;

/// A change of the key groups whose state a keyed operator subtask holds, while it runs.
#[derive(Debug)]
pub enum StateMove {
    /// Key groups given to this subtask: their keys and values, added to what it holds
    /// ([`Operator::restore_keyed`](crate::Operator::restore_keyed)), after the keys of
    /// `forget_first` are forgotten (key groups taken away and given back before the move
    /// that took them away was applied).
    Restore {
        /// The keys and values.
        state: KeyedSnapshot,
        /// Key groups (of the snapshot's `max_parallelism`) whose keys go first.
        forget_first: Vec<u32>,
        /// The key groups restored (of the snapshot's `max_parallelism`).
        groups: Vec<u32>,
        /// `Some(watermark)` when the restored key groups' event time is behind the
        /// subtask's: their records are judged by their own watermark, which
        /// [`StateMove::EventTime`] moves carry from here on until it reaches the subtask's.
        /// `None`: they follow the subtask's event time.
        event_time: Option<i64>,
    },
    /// The watermark of key groups restored behind the subtask's event time
    /// ([`StateMove::Restore::event_time`]), after the records of a poll: `Some` advances
    /// them (and once it reaches the subtask's watermark they follow the subtask's again);
    /// `None` says they hold nothing back any longer (their partition is idle: caught up),
    /// so they follow the subtask's event time from now on.
    EventTime {
        /// The number of key groups keys are grouped by.
        max_parallelism: u32,
        /// The key groups.
        groups: Vec<u32>,
        /// Their watermark, or `None` (idle).
        watermark: Option<i64>,
    },
    /// Key groups taken away: their keys are forgotten without emitting anything
    /// ([`Operator::forget_keyed`](crate::Operator::forget_keyed)).
    Forget {
        /// The number of key groups keys are grouped by.
        max_parallelism: u32,
        /// The key groups to forget.
        groups: Vec<u32>,
    },
}

impl StateMove {
    /// Whether the move comes before the records of the poll that made it.
    pub fn before_records(&self) -> bool {
        matches!(self, StateMove::Restore { .. })
    }
}

/// A test of a key: true for the keys of `groups` (of `max_parallelism` key groups), by the
/// hash a hash edge routes by.
pub fn in_groups(max_parallelism: u32, groups: &[u32]) -> impl Fn(&Value) -> bool + '_ {
    let key_groups = KeyGroups::new(max_parallelism);
    move |key: &Value| groups.contains(&key_groups.of(key.routing_hash()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_in_the_group_its_hash_gives() {
        let groups = KeyGroups::new(8);
        let key = Value::from("user-17");
        let g = groups.of(key.routing_hash());
        assert!(in_groups(8, &[g])(&key));
        assert!(!in_groups(8, &[(g + 1) % 8])(&key));
        let restore = StateMove::Restore {
            state: KeyedSnapshot::new(8),
            forget_first: Vec::new(),
            groups: vec![g],
            event_time: None,
        };
        assert!(restore.before_records());
        let event_time = StateMove::EventTime {
            max_parallelism: 8,
            groups: vec![g],
            watermark: Some(5),
        };
        assert!(!event_time.before_records());
        let forget = StateMove::Forget {
            max_parallelism: 8,
            groups: vec![g],
        };
        assert!(!forget.before_records());
    }
}
