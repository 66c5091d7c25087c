//! Per-partition watermarks of the `kafka` source (as Flink's per-split watermarks and Kafka
//! Streams' stream time).
//!
//! Each partition a source subtask holds is one split of the runtime's [`SplitWatermarks`]:
//! its watermark is the highest timestamp read from it minus the source's
//! `watermarks.max_out_of_orderness`; the subtask's watermark is the minimum over its
//! partitions that are not idle (no message for `watermarks.idleness`), and never goes back; a
//! partition revoked in a rebalance drops out; a subtask with no partition is idle. The
//! runtime applies the source's watermark settings; this module follows the assignment and
//! notes each record's partition.

use std::collections::BTreeSet;

use tidemark_runtime::{SplitId, SplitWatermarks};

use crate::metrics::PartitionKey;

/// The partitions of one source subtask as splits of a [`SplitWatermarks`].
#[derive(Debug, Default)]
pub struct PartitionWatermarks {
    tracker: SplitWatermarks,
    /// Partition → split. A subtask holds a few partitions: a linear look-up, no hashing.
    splits: Vec<(PartitionKey, SplitId)>,
    /// The index in `splits` of the last partition a record came from: a poll mostly reads
    /// runs of messages of one partition.
    last: usize,
}

impl PartitionWatermarks {
    /// No partition yet.
    pub fn new() -> Self {
        PartitionWatermarks::default()
    }

    /// A record with `timestamp` (ns) was read from `topic`/`partition`. A partition not seen
    /// before (given in a rebalance served by this very poll) becomes a split at once.
    #[inline]
    pub fn observe(&mut self, topic: &str, partition: i32, timestamp: i64) {
        let i = match self.splits.get(self.last) {
            Some(((t, p), _)) if *p == partition && t == topic => self.last,
            _ => self.find_or_add(topic, partition),
        };
        self.last = i;
        self.tracker.observe(self.splits[i].1, timestamp);
    }

    fn find_or_add(&mut self, topic: &str, partition: i32) -> usize {
        if let Some(i) = self
            .splits
            .iter()
            .position(|((t, p), _)| *p == partition && t == topic)
        {
            return i;
        }
        let split = self.tracker.add_split();
        self.splits.push(((topic.to_owned(), partition), split));
        self.splits.len() - 1
    }

    /// Follows a rebalance: `revoked` partitions drop out (one revoked and given back since
    /// starts afresh), partitions no longer held drop out, partitions newly held join (and
    /// hold the watermark back until they have a record or are idle).
    pub fn follow(&mut self, held: &BTreeSet<PartitionKey>, revoked: &[PartitionKey]) {
        let tracker = &mut self.tracker;
        self.splits.retain(|(key, split)| {
            let keep = held.contains(key) && !revoked.contains(key);
            if !keep {
                tracker.remove_split(*split);
            }
            keep
        });
        for key in held {
            if !self.splits.iter().any(|(k, _)| k == key) {
                let split = self.tracker.add_split();
                self.splits.push((key.clone(), split));
            }
        }
        self.last = 0;
    }

    /// The partitions tracked, in the order they joined.
    pub fn partitions(&self) -> impl Iterator<Item = &PartitionKey> {
        self.splits.iter().map(|(k, _)| k)
    }

    /// The watermark of one partition alone with `out_of_orderness` (ns), if it has one.
    pub fn watermark(&self, topic: &str, partition: i32, out_of_orderness: i64) -> Option<i64> {
        let (_, split) = self
            .splits
            .iter()
            .find(|((t, p), _)| *p == partition && t == topic)?;
        self.tracker.watermark(*split, out_of_orderness)
    }

    /// The tracker, for the runtime.
    pub fn tracker(&mut self) -> &mut SplitWatermarks {
        &mut self.tracker
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &str, p: i32) -> PartitionKey {
        (t.to_owned(), p)
    }

    fn held(keys: &[(&str, i32)]) -> BTreeSet<PartitionKey> {
        keys.iter().map(|(t, p)| key(t, *p)).collect()
    }

    #[test]
    fn each_partition_has_its_own_watermark() {
        let mut w = PartitionWatermarks::new();
        w.follow(&held(&[("a", 0), ("a", 1), ("b", 0)]), &[]);
        assert_eq!(w.tracker().len(), 3);
        w.observe("a", 0, 1_000);
        w.observe("a", 0, 900);
        w.observe("a", 1, 300);
        w.observe("b", 0, 700);
        w.observe("a", 1, 200);
        assert_eq!(w.watermark("a", 0, 10), Some(989));
        assert_eq!(w.watermark("a", 1, 10), Some(289));
        assert_eq!(w.watermark("b", 0, 10), Some(689));
        assert_eq!(w.watermark("b", 1, 10), None, "not held");
    }

    #[test]
    fn rebalances_add_and_remove_partitions() {
        let mut w = PartitionWatermarks::new();
        w.follow(&held(&[("t", 0), ("t", 1)]), &[]);
        w.observe("t", 0, 100);
        w.observe("t", 1, 200);
        // Cooperative: partition 1 moves away, partition 2 arrives.
        w.follow(&held(&[("t", 0), ("t", 2)]), &[key("t", 1)]);
        assert_eq!(
            w.partitions().cloned().collect::<Vec<_>>(),
            [key("t", 0), key("t", 2)]
        );
        assert_eq!(w.tracker().len(), 2);
        assert_eq!(w.watermark("t", 0, 0), Some(99), "kept");
        assert_eq!(w.watermark("t", 1, 0), None, "revoked");
        assert_eq!(w.watermark("t", 2, 0), None, "new, nothing read yet");
        // Revoked and given back between two looks: it starts afresh.
        w.follow(&held(&[("t", 0), ("t", 2)]), &[key("t", 0)]);
        assert_eq!(w.watermark("t", 0, 0), None);
        assert_eq!(w.tracker().len(), 2);
        // Everything revoked: no split, the subtask is idle.
        w.follow(&held(&[]), &[key("t", 0), key("t", 2)]);
        assert!(w.tracker().is_empty());
    }

    #[test]
    fn a_record_of_a_partition_given_in_the_same_poll_joins_at_once() {
        let mut w = PartitionWatermarks::new();
        w.observe("t", 3, 500);
        assert_eq!(w.watermark("t", 3, 0), Some(499));
        assert_eq!(w.tracker().len(), 1);
        // The rebalance is seen afterwards: the split is kept, not added twice.
        w.follow(&held(&[("t", 3)]), &[]);
        assert_eq!(w.tracker().len(), 1);
        assert_eq!(w.watermark("t", 3, 0), Some(499));
    }
}
