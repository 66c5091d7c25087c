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

use tidemark_runtime::{SplitId, SplitStatus, SplitWatermarks};

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
    /// An exchange reader's partitions: the watermarks of the writers heard from.
    writers: WriterWatermarks,
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
        let (tracker, writers) = (&mut self.tracker, &mut self.writers);
        self.splits.retain(|(key, split)| {
            let keep = held.contains(key) && !revoked.contains(key);
            if !keep {
                tracker.remove_split(*split);
                writers.forget(key.1);
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

    /// An exchange reader read a watermark control message of writer `id` on `partition` of
    /// its exchange topic (`i64::MIN`: the writer's hello). The partition's watermark becomes
    /// the minimum over the writers it has heard from that are not idle.
    pub fn writer_watermark(&mut self, topic: &str, partition: i32, id: &str, watermark: i64) {
        let say = self.writers.on_watermark(partition, id, watermark);
        self.apply(topic, partition, say);
    }

    /// An exchange reader read writer `id`'s idle control message on `partition`.
    pub fn writer_idle(&mut self, topic: &str, partition: i32, id: &str) {
        let say = self.writers.on_idle(partition, id);
        self.apply(topic, partition, say);
    }

    fn apply(&mut self, topic: &str, partition: i32, say: WritersSay) {
        let i = self.find_or_add(topic, partition);
        let split = self.splits[i].1;
        match say {
            WritersSay::At(wm) => self.tracker.advance(split, wm),
            WritersSay::Idle => self.tracker.set_idle(split),
            // Input all the same: a partition said idle becomes active (and waits).
            WritersSay::Nothing => self.tracker.advance(split, i64::MIN),
        }
    }

    /// Each partition's watermark and idleness as the runtime last looked (none while the
    /// source makes no watermarks).
    pub fn statuses(&self) -> impl Iterator<Item = (&PartitionKey, SplitStatus)> {
        self.splits
            .iter()
            .filter_map(|(k, split)| Some((k, self.tracker.status(*split)?)))
    }

    /// The tracker, for the runtime.
    pub fn tracker(&mut self) -> &mut SplitWatermarks {
        &mut self.tracker
    }
}

/// What the writers of one exchange partition say, together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritersSay {
    /// The minimum over the writers heard from that are not idle.
    At(i64),
    /// Every writer heard from is idle: the partition holds nothing back.
    Idle,
    /// Some writer was heard from (a hello) but none has a watermark yet.
    Nothing,
}

/// One writer of an exchange partition, as its reader knows it.
#[derive(Clone, Debug)]
struct Writer {
    id: String,
    watermark: i64,
    idle: bool,
}

/// The reader side of watermarks through a Kafka exchange: per partition, the watermarks of the
/// writers it has heard from (each writer — instance, vertex, subtask — sends its watermarks
/// to every partition). The partition's watermark is the minimum over those that are not idle.
#[derive(Clone, Debug, Default)]
pub struct WriterWatermarks {
    /// Partition → its writers. A few partitions and writers: linear look-ups.
    partitions: Vec<(i32, Vec<Writer>)>,
}

impl WriterWatermarks {
    /// Nothing heard yet.
    pub fn new() -> Self {
        WriterWatermarks::default()
    }

    fn writer(&mut self, partition: i32, id: &str) -> &mut Writer {
        let p = match self.partitions.iter().position(|(p, _)| *p == partition) {
            Some(p) => p,
            None => {
                self.partitions.push((partition, Vec::new()));
                self.partitions.len() - 1
            }
        };
        let writers = &mut self.partitions[p].1;
        let w = match writers.iter().position(|w| w.id == id) {
            Some(w) => w,
            None => {
                writers.push(Writer {
                    id: id.to_owned(),
                    watermark: i64::MIN,
                    idle: false,
                });
                writers.len() - 1
            }
        };
        &mut writers[w]
    }

    /// Writer `id` sent `watermark` on `partition` (`i64::MIN`: a hello before its first
    /// record, so that it is waited for). Returns what the partition's writers say now.
    pub fn on_watermark(&mut self, partition: i32, id: &str, watermark: i64) -> WritersSay {
        let w = self.writer(partition, id);
        w.watermark = w.watermark.max(watermark);
        w.idle = false;
        self.say(partition)
    }

    /// Writer `id` is idle (its inputs are): it holds `partition` back no longer.
    pub fn on_idle(&mut self, partition: i32, id: &str) -> WritersSay {
        self.writer(partition, id).idle = true;
        self.say(partition)
    }

    /// A partition this reader lost: forget its writers (its next reader hears them again).
    pub fn forget(&mut self, partition: i32) {
        self.partitions.retain(|(p, _)| *p != partition);
    }

    /// What the writers of `partition` say.
    pub fn say(&self, partition: i32) -> WritersSay {
        let Some((_, writers)) = self.partitions.iter().find(|(p, _)| *p == partition) else {
            return WritersSay::Nothing;
        };
        match writers
            .iter()
            .filter(|w| !w.idle)
            .map(|w| w.watermark)
            .min()
        {
            None if writers.is_empty() => WritersSay::Nothing,
            None => WritersSay::Idle,
            Some(i64::MIN) => WritersSay::Nothing,
            Some(wm) => WritersSay::At(wm),
        }
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

    #[test]
    fn an_exchange_partition_follows_the_slowest_writer_heard_from() {
        let mut w = WriterWatermarks::new();
        assert_eq!(w.say(0), WritersSay::Nothing);
        // Two writers say hello before their records: both are waited for.
        assert_eq!(w.on_watermark(0, "a/x/0", i64::MIN), WritersSay::Nothing);
        assert_eq!(w.on_watermark(0, "b/x/0", i64::MIN), WritersSay::Nothing);
        assert_eq!(
            w.on_watermark(0, "a/x/0", 500),
            WritersSay::Nothing,
            "b has none"
        );
        assert_eq!(w.on_watermark(0, "b/x/0", 300), WritersSay::At(300));
        assert_eq!(
            w.on_watermark(0, "b/x/0", 200),
            WritersSay::At(300),
            "never back"
        );
        assert_eq!(w.on_watermark(0, "b/x/0", 700), WritersSay::At(500));
        // Partition 1 is its own: its writers' watermarks arrive there separately.
        assert_eq!(w.on_watermark(1, "a/x/0", 900), WritersSay::At(900));
        // An idle writer holds nothing back; all idle, the partition is idle.
        assert_eq!(w.on_idle(0, "a/x/0"), WritersSay::At(700));
        assert_eq!(w.on_idle(0, "b/x/0"), WritersSay::Idle);
        assert_eq!(w.on_watermark(0, "a/x/0", 600), WritersSay::At(600));
        // A writer first heard now joins the minimum (its first message is a hello).
        assert_eq!(w.on_watermark(0, "c/x/1", i64::MIN), WritersSay::Nothing);
        assert_eq!(w.on_watermark(0, "c/x/1", 650), WritersSay::At(600));
        w.forget(0);
        assert_eq!(w.say(0), WritersSay::Nothing);
        assert_eq!(w.say(1), WritersSay::At(900));
    }

    #[test]
    fn an_exchange_reader_takes_the_writers_watermarks_per_partition() {
        let mut w = PartitionWatermarks::new();
        w.follow(&held(&[("x", 0), ("x", 1)]), &[]);
        for p in 0..2 {
            w.writer_watermark("x", p, "a/w/0", i64::MIN);
            w.writer_watermark("x", p, "a/w/1", i64::MIN);
        }
        w.writer_watermark("x", 0, "a/w/0", 500);
        assert_eq!(w.watermark("x", 0, 0), None, "a/w/1 was heard and has none");
        w.writer_watermark("x", 0, "a/w/1", 400);
        w.writer_watermark("x", 1, "a/w/0", 500);
        w.writer_watermark("x", 1, "a/w/1", 450);
        assert_eq!(w.watermark("x", 0, 0), Some(400));
        assert_eq!(w.watermark("x", 1, 0), Some(450));
        // Records do not move an exchange partition: only the writers' watermarks do (the
        // reader relays records without observing them).
        w.writer_idle("x", 0, "a/w/1");
        assert_eq!(w.watermark("x", 0, 0), Some(500));
        // Partition 1 revoked: its writers are forgotten with it.
        w.follow(&held(&[("x", 0)]), &[("x".to_owned(), 1)]);
        w.follow(&held(&[("x", 0), ("x", 1)]), &[]);
        w.writer_watermark("x", 1, "a/w/0", 600);
        assert_eq!(
            w.watermark("x", 1, 0),
            Some(600),
            "a/w/1 not heard again yet"
        );
    }
}
