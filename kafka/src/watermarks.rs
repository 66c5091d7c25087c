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

use serde::{Deserialize, Serialize};
use tidemark_runtime::{SplitId, SplitState, SplitStatus, SplitWatermarks};

use crate::input_report::{InputReport, PartitionMark, TopicReport};
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
        self.tracker
            .name_split(split, &format!("{topic}/{partition}"));
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
                self.tracker
                    .name_split(split, &format!("{}/{}", key.0, key.1));
                self.splits.push((key.clone(), split));
            }
        }
        self.last = 0;
    }

    /// Notes which partitions have input not read yet (`behind`: a lag above 0 or not known,
    /// or messages still queued): such a partition is not caught up and never goes idle
    /// ([`SplitWatermarks::set_behind`]).
    pub fn set_behind(&mut self, behind: impl Fn(&PartitionKey) -> bool) {
        for (key, split) in &self.splits {
            self.tracker.set_behind(*split, behind(key));
        }
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

    /// What one partition holds back now ([`SplitWatermarks::state`]), if it is held and the
    /// runtime has looked.
    pub fn state(&self, topic: &str, partition: i32) -> Option<SplitState> {
        let (_, split) = self
            .splits
            .iter()
            .find(|((t, p), _)| *p == partition && t == topic)?;
        self.tracker.state(*split)
    }

    /// The subtask's watermark as last sent downstream ([`SplitWatermarks::emitted`]).
    pub fn emitted(&self) -> i64 {
        self.tracker.emitted()
    }

    /// The highest record timestamp (ns) read from one partition, if any (for a checkpoint:
    /// [`PartitionWatermarks::observe`] of it starts a partition's watermark where it was).
    pub fn highest_timestamp(&self, topic: &str, partition: i32) -> Option<i64> {
        // With no out-of-orderness a split's watermark is its highest timestamp less 1 ns.
        self.watermark(topic, partition, 0)
            .map(|w| w.saturating_add(1))
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

    /// An exchange reader read writer `id`'s end on `partition`: it writes nothing more.
    pub fn writer_ended(&mut self, topic: &str, partition: i32, id: &str) {
        let say = self.writers.on_ended(partition, id);
        self.apply(topic, partition, say);
    }

    /// An exchange reader read writer `id`'s report of its source partitions on `partition`
    /// of its exchange topic ([`crate::input_report`]).
    pub fn writer_report(&mut self, topic: &str, partition: i32, id: &str, report: &InputReport) {
        let say = self.writers.on_report(partition, id, report);
        self.apply(topic, partition, say);
    }

    /// What an exchange reader heard on each of its exchange partitions (for their commit
    /// records).
    pub(crate) fn heard(&self) -> impl Iterator<Item = (i32, &Heard)> {
        self.writers.partitions.iter().map(|(p, heard)| (*p, heard))
    }

    /// Exchange partition `topic`/`partition` was restored with `heard`, its previous reader's
    /// event-time state at the position it is read from again: the partition's watermark is
    /// where it was there, not held back until every writer and input is heard again. A
    /// partition this subtask no longer holds is left alone (its next owner restores it).
    pub(crate) fn restore_heard(&mut self, topic: &str, partition: i32, heard: Heard) {
        if !self
            .splits
            .iter()
            .any(|((t, p), _)| *p == partition && t == topic)
        {
            return;
        }
        let say = self.writers.restore(partition, heard);
        self.apply(topic, partition, say);
    }

    /// What this subtask's partitions hold back, as the runtime last looked, for the exchange
    /// writer chained behind it: `counts` gives each topic's partition count.
    pub fn report(&self, source: &str, counts: &[(String, i32)]) -> InputReport {
        let topics = counts
            .iter()
            .map(|(topic, partitions)| TopicReport {
                topic: topic.clone(),
                partitions: *partitions,
                marks: self
                    .splits
                    .iter()
                    .filter(|((t, _), _)| t == topic)
                    .filter_map(|((_, p), split)| {
                        let mark = match self.tracker.state(*split)? {
                            SplitState::Idle => PartitionMark::Idle,
                            SplitState::Pending => PartitionMark::Pending,
                            SplitState::At(wm) => PartitionMark::At(wm),
                        };
                        Some((*p, mark))
                    })
                    .collect(),
            })
            .collect();
        InputReport {
            source: source.to_owned(),
            topics,
        }
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

/// One writer of an exchange partition that speaks for itself, as its reader knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Writer {
    id: String,
    watermark: i64,
    /// Its last word was that it is idle: a lease, valid while renewed
    /// ([`Heard::idle_holds`]).
    idle: bool,
    /// When it last said it is idle ([`Heard::seq`]). Not kept: idleness never survives a
    /// restore.
    #[serde(skip)]
    idle_at: Seq,
}

/// A writer that ended has this watermark: it holds nothing back, for good (kept as such in a
/// commit record).
const ENDED: i64 = i64::MAX;

/// A number on the lease clock of one exchange partition ([`Heard::seq`]). Not part of what
/// was heard: two [`Heard`]s that heard the same are equal whatever their clocks say.
#[derive(Clone, Copy, Debug, Default, PartialOrd, Ord)]
struct Seq(u64);

impl PartialEq for Seq {
    fn eq(&self, _: &Seq) -> bool {
        true
    }
}

impl Eq for Seq {}

/// One source partition as the readers of an exchange partition know it: the highest
/// watermark any owner reported, and whether its owner last said it is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct InputMark {
    watermark: i64,
    /// Its owner's last word was that it is idle: a lease, valid while renewed.
    idle: bool,
    /// When its owner last said so ([`Heard::seq`]). Not kept.
    #[serde(skip)]
    idle_at: Seq,
}

impl InputMark {
    const UNKNOWN: InputMark = InputMark {
        watermark: i64::MIN,
        idle: false,
        idle_at: Seq(0),
    };
}

/// The partitions of one input topic of one source vertex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct InputTopic {
    source: String,
    topic: String,
    /// Per partition (index = partition): `None` until an owner reported it.
    marks: Vec<Option<InputMark>>,
}

/// What the readers of one exchange partition know of its writers and their inputs: the
/// partition's whole event-time state, saved in its commit record and restored with it
/// ([`crate::exchange::state`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Heard {
    /// Writers that speak for themselves (no `kafka` source chained before them).
    writers: Vec<Writer>,
    /// Writers that report their source partitions instead: they hold nothing back themselves.
    reporters: Vec<String>,
    /// The source partitions reported.
    inputs: Vec<InputTopic>,
    /// How many control messages were read on the partition (since its restore): the clock of
    /// idle leases, in the order of the partition's log. Not kept.
    #[serde(skip)]
    seq: Seq,
    /// The message ([`Heard::seq`]) that last moved a watermark up. Not kept.
    #[serde(skip)]
    advanced_at: Seq,
}

impl Heard {
    /// Idleness is a lease: an idle claim holds only while it was renewed since the last time
    /// anything advanced on this partition. An owner that died, lost its partition or is
    /// starved renews nothing, so the first advance after its last claim ends the lease, and
    /// what it reported is held at its last watermark until an owner reports it again: event
    /// time waits for a failover, it never runs past data. A live owner renews every watermark
    /// interval, so its idle partitions hold event time back for at most one interval.
    fn idle_holds(&self, idle: bool, idle_at: Seq) -> bool {
        idle && idle_at.0 >= self.advanced_at.0
    }

    /// The next message's number.
    fn tick(&mut self) -> Seq {
        self.seq.0 += 1;
        self.seq
    }

    /// Forgets every idle claim (a restore: idleness never survives an owner change).
    fn forget_idleness(&mut self) {
        for w in &mut self.writers {
            w.idle = false;
        }
        for input in &mut self.inputs {
            for m in input.marks.iter_mut().flatten() {
                m.idle = false;
            }
        }
        self.seq = Seq(0);
        self.advanced_at = Seq(0);
    }
}

/// The reader side of watermarks through a Kafka exchange, per exchange partition.
///
/// - A writer that speaks for itself (its hello, watermarks, idle) counts as one input: the
///   minimum over those heard from that are not idle (each writer — instance, vertex, subtask
///   — sends its watermarks to every partition).
/// - A writer chained behind a `kafka` source reports its source partitions instead
///   ([`crate::input_report`]); then every partition of the input topics counts: each at the
///   highest watermark any owner reported for it, a partition not reported yet holding
///   everything back, an idle one nothing. So a writer that is gone holds nothing back, and a
///   moved partition waits for its new owner.
#[derive(Clone, Debug, Default)]
pub struct WriterWatermarks {
    /// Partition → what was heard on it. A few partitions: linear look-ups.
    partitions: Vec<(i32, Heard)>,
}

impl WriterWatermarks {
    /// Nothing heard yet.
    pub fn new() -> Self {
        WriterWatermarks::default()
    }

    fn heard(&mut self, partition: i32) -> &mut Heard {
        let p = match self.partitions.iter().position(|(p, _)| *p == partition) {
            Some(p) => p,
            None => {
                self.partitions.push((partition, Heard::default()));
                self.partitions.len() - 1
            }
        };
        &mut self.partitions[p].1
    }

    fn writer(&mut self, partition: i32, id: &str) -> Option<&mut Writer> {
        let heard = self.heard(partition);
        if heard.reporters.iter().any(|r| r == id) {
            // It reports its partitions now: what it says of itself no longer counts.
            return None;
        }
        let w = match heard.writers.iter().position(|w| w.id == id) {
            Some(w) => w,
            None => {
                heard.writers.push(Writer {
                    id: id.to_owned(),
                    watermark: i64::MIN,
                    idle: false,
                    idle_at: Seq(0),
                });
                heard.writers.len() - 1
            }
        };
        Some(&mut heard.writers[w])
    }

    /// Writer `id` sent `watermark` on `partition` (`i64::MIN`: a hello before its first
    /// record, so that it is waited for). Returns what the partition's writers say now.
    pub fn on_watermark(&mut self, partition: i32, id: &str, watermark: i64) -> WritersSay {
        let seq = self.heard(partition).tick();
        let mut advanced = false;
        if let Some(w) = self.writer(partition, id) {
            advanced = watermark > w.watermark || w.idle;
            w.watermark = w.watermark.max(watermark);
            w.idle = false;
        }
        if advanced {
            self.heard(partition).advanced_at = seq;
        }
        self.say(partition)
    }

    /// Writer `id` is idle (its inputs are): it holds `partition` back no longer, while it
    /// keeps saying so ([`Heard::idle_holds`]).
    pub fn on_idle(&mut self, partition: i32, id: &str) -> WritersSay {
        let seq = self.heard(partition).tick();
        if let Some(w) = self.writer(partition, id) {
            w.idle = true;
            w.idle_at = seq;
        }
        self.say(partition)
    }

    /// Writer `id` ended: it holds `partition` back no longer, for good.
    pub fn on_ended(&mut self, partition: i32, id: &str) -> WritersSay {
        self.heard(partition).tick();
        if let Some(w) = self.writer(partition, id) {
            w.watermark = ENDED;
            w.idle = false;
        }
        self.say(partition)
    }

    /// Writer `id` reported its source partitions on `partition`: from now on it counts only
    /// through them.
    pub fn on_report(&mut self, partition: i32, id: &str, report: &InputReport) -> WritersSay {
        let heard = self.heard(partition);
        let seq = heard.tick();
        let mut advanced = false;
        heard.writers.retain(|w| w.id != id);
        if !heard.reporters.iter().any(|r| r == id) {
            heard.reporters.push(id.to_owned());
        }
        for t in &report.topics {
            let i = match heard
                .inputs
                .iter()
                .position(|i| i.source == report.source && i.topic == t.topic)
            {
                Some(i) => i,
                None => {
                    heard.inputs.push(InputTopic {
                        source: report.source.clone(),
                        topic: t.topic.clone(),
                        marks: Vec::new(),
                    });
                    heard.inputs.len() - 1
                }
            };
            let input = &mut heard.inputs[i];
            let count = t.partitions.max(0) as usize;
            if input.marks.len() < count {
                input.marks.resize(count, None);
            }
            for &(p, mark) in &t.marks {
                let Some(slot) = usize::try_from(p).ok().and_then(|p| input.marks.get_mut(p))
                else {
                    continue;
                };
                let m = slot.get_or_insert(InputMark::UNKNOWN);
                match mark {
                    PartitionMark::Idle => {
                        m.idle = true;
                        m.idle_at = seq;
                    }
                    PartitionMark::Pending => m.idle = false,
                    PartitionMark::At(wm) => {
                        advanced |= wm > m.watermark || m.idle;
                        m.watermark = m.watermark.max(wm);
                        m.idle = false;
                    }
                }
            }
        }
        if advanced {
            heard.advanced_at = seq;
        }
        self.say(partition)
    }

    /// A partition this reader lost: forget its writers (its next reader hears them again).
    pub fn forget(&mut self, partition: i32) {
        self.partitions.retain(|(p, _)| *p != partition);
    }

    /// `partition` was restored with what its reader had heard up to the position it is read
    /// from again: that replaces whatever was heard on it here. Returns what its writers say.
    pub(crate) fn restore(&mut self, partition: i32, mut heard: Heard) -> WritersSay {
        self.forget(partition);
        // Idleness never survives an owner change: every partition is held at its recorded
        // watermark until its reader reports it again.
        heard.forget_idleness();
        self.partitions.push((partition, heard));
        self.say(partition)
    }

    /// What the writers of `partition` say.
    pub fn say(&self, partition: i32) -> WritersSay {
        let Some((_, heard)) = self.partitions.iter().find(|(p, _)| *p == partition) else {
            return WritersSay::Nothing;
        };
        let writers = heard
            .writers
            .iter()
            .filter(|w| w.watermark != ENDED && !heard.idle_holds(w.idle, w.idle_at))
            .map(|w| Some(w.watermark));
        let inputs = heard.inputs.iter().flat_map(|i| {
            i.marks.iter().filter_map(|m| match m {
                // Not reported yet: it holds everything back.
                None => Some(None),
                Some(m) if heard.idle_holds(m.idle, m.idle_at) => None,
                Some(m) => Some(Some(m.watermark)),
            })
        });
        let mut min: Option<i64> = None;
        let mut any = false;
        for wm in writers.chain(inputs) {
            any = true;
            let wm = wm.unwrap_or(i64::MIN);
            min = Some(min.map_or(wm, |m| m.min(wm)));
        }
        match min {
            None if !any && heard.writers.is_empty() && heard.inputs.is_empty() => {
                WritersSay::Nothing
            }
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
    fn each_partition_is_named_topic_slash_partition() {
        let mut w = PartitionWatermarks::new();
        w.follow(&held(&[("orders", 0)]), &[]);
        // A partition seen in a record before the rebalance that gave it is named too.
        w.observe("orders", 3, 100);
        let names: Vec<Option<String>> = w
            .splits
            .iter()
            .map(|(_, split)| w.tracker.name(*split).map(str::to_owned))
            .collect();
        assert_eq!(
            names,
            [Some("orders/0".to_owned()), Some("orders/3".to_owned())]
        );
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

    #[test]
    fn a_restored_exchange_partition_goes_on_as_its_previous_reader_would() {
        use PartitionMark::{At, Idle};
        // The previous reader: a writer reporting input partitions 0 (at 700) and 1 (idle) of
        // two, and a writer speaking for itself at 400.
        let mut before = PartitionWatermarks::new();
        before.follow(&held(&[("x", 2)]), &[]);
        before.writer_watermark("x", 2, "b/w/0", 400);
        before.writer_report(
            "x",
            2,
            "a/w/0",
            &report("s", "in", 2, &[(0, At(700)), (1, Idle)]),
        );
        assert_eq!(before.watermark("x", 2, 0), Some(400));
        let (_, heard) = before.heard().next().unwrap();
        let heard = heard.clone();
        // Saved and restored (a commit record's codec) by the next owner: the partition is
        // where it was, before anything is read again.
        let heard: Heard = tidemark_runtime::state_codec::decode(
            &tidemark_runtime::state_codec::encode(&heard).unwrap(),
        )
        .unwrap();
        let mut after = PartitionWatermarks::new();
        after.follow(&held(&[("x", 2)]), &[]);
        after.restore_heard("x", 2, heard.clone());
        // Idleness does not survive the restore: input 1, idle before and never with a
        // watermark, holds everything back until its owner says it again.
        assert_eq!(after.watermark("x", 2, 0), None);
        after.writer_report("x", 2, "a/w/0", &report("s", "in", 2, &[(1, Idle)]));
        assert_eq!(after.watermark("x", 2, 0), Some(400));
        // A reader that restored nothing waits for every writer and input instead.
        let mut fresh = PartitionWatermarks::new();
        fresh.follow(&held(&[("x", 2)]), &[]);
        fresh.writer_report("x", 2, "c/w/0", &report("s", "in", 2, &[(0, At(100))]));
        assert_eq!(fresh.watermark("x", 2, 0), None);
        // From there the same messages move both alike: input 0 keeps its highest mark (a new
        // owner reading it again from behind does not move it back), input 1 wakes up.
        for w in [&mut before, &mut after] {
            w.writer_idle("x", 2, "b/w/0");
            w.writer_report(
                "x",
                2,
                "c/w/0",
                &report("s", "in", 2, &[(0, At(100)), (1, At(900))]),
            );
        }
        assert_eq!(before.watermark("x", 2, 0), Some(700));
        assert_eq!(after.watermark("x", 2, 0), Some(700));
        assert_eq!(before.heard().next(), after.heard().next());
        // A partition no longer held is not brought back by a late restore.
        let mut gone = PartitionWatermarks::new();
        gone.follow(&held(&[("x", 1)]), &[]);
        gone.restore_heard("x", 2, heard);
        assert_eq!(gone.partitions().count(), 1);
        assert_eq!(gone.heard().count(), 0);
    }

    fn report(
        source: &str,
        topic: &str,
        count: i32,
        marks: &[(i32, PartitionMark)],
    ) -> InputReport {
        InputReport {
            source: source.into(),
            topics: vec![TopicReport {
                topic: topic.into(),
                partitions: count,
                marks: marks.to_vec(),
            }],
        }
    }

    #[test]
    fn every_input_partition_counts_whoever_reports_it() {
        use PartitionMark::{At, Idle, Pending};
        let mut w = WriterWatermarks::new();
        // Two writers say hello; one of them then reports its source's partitions 0 and 1 of
        // four: it stops counting by itself, and partitions 2 and 3, not heard from, hold
        // everything back.
        w.on_watermark(0, "a/x/0", i64::MIN);
        w.on_watermark(0, "b/x/0", i64::MIN);
        assert_eq!(
            w.on_report(
                0,
                "a/x/0",
                &report("src", "in", 4, &[(0, At(500)), (1, At(400))])
            ),
            WritersSay::Nothing
        );
        assert_eq!(
            w.on_report(
                0,
                "b/x/0",
                &report("src", "in", 4, &[(2, At(300)), (3, Pending)])
            ),
            WritersSay::Nothing,
            "partition 3 has no watermark yet"
        );
        assert_eq!(
            w.on_report(
                0,
                "b/x/0",
                &report("src", "in", 4, &[(2, At(300)), (3, Idle)])
            ),
            WritersSay::At(300),
            "an idle partition holds nothing back"
        );
        // b dies: it renews nothing. Its idle claim for partition 3 lapses at the first
        // advance after it, so partition 3 is held where it was (no watermark yet) until an
        // owner reports it. Partition 2 moves to a, which reads it from the commit: a lower
        // watermark does not take the partition back.
        assert_eq!(
            w.on_report(
                0,
                "a/x/0",
                &report("src", "in", 4, &[(0, At(900)), (1, At(800)), (2, Pending)])
            ),
            WritersSay::Nothing,
            "the dead owner's idle claim lapsed"
        );
        assert_eq!(
            w.on_report(
                0,
                "a/x/0",
                &report(
                    "src",
                    "in",
                    4,
                    &[(0, At(900)), (1, At(800)), (2, At(250)), (3, Pending)]
                )
            ),
            WritersSay::Nothing
        );
        assert_eq!(
            w.on_report(
                0,
                "a/x/0",
                &report(
                    "src",
                    "in",
                    4,
                    &[(0, At(900)), (1, At(800)), (2, At(700)), (3, At(650))]
                )
            ),
            WritersSay::At(650),
            "the dead writer holds nothing back once the new owner caught up"
        );
        // The new owner reads partition 3 to its end and says it is idle, in the same report
        // as an advance: the claim holds.
        assert_eq!(
            w.on_report(
                0,
                "a/x/0",
                &report(
                    "src",
                    "in",
                    4,
                    &[(0, At(950)), (1, At(800)), (2, At(700)), (3, Idle)]
                )
            ),
            WritersSay::At(700)
        );
        // A reporter's old-style messages (its hello, idle) no longer count.
        assert_eq!(w.on_idle(0, "a/x/0"), WritersSay::At(700));
        assert_eq!(w.on_watermark(0, "a/x/0", i64::MIN), WritersSay::At(700));
        // Partition 3 read again after idling: it is waited for from its last watermark.
        assert_eq!(
            w.on_report(0, "a/x/0", &report("src", "in", 4, &[(3, Pending)])),
            WritersSay::At(650)
        );
        assert_eq!(
            w.on_report(0, "a/x/0", &report("src", "in", 4, &[(3, At(660))])),
            WritersSay::At(660)
        );
        // A writer that speaks for itself still counts beside the partitions.
        assert_eq!(w.on_watermark(0, "g/y/0", 100), WritersSay::At(100));
        assert_eq!(w.on_idle(0, "g/y/0"), WritersSay::At(660));
        // One that ended holds nothing back, for good. (Its advance ended g's idle claim
        // until g says it again.)
        assert_eq!(w.on_watermark(0, "h/y/0", 200), WritersSay::At(100));
        assert_eq!(w.on_ended(0, "h/y/0"), WritersSay::At(100));
        assert_eq!(w.on_idle(0, "g/y/0"), WritersSay::At(660));
    }

    #[test]
    fn an_idle_claim_is_a_lease_that_holds_only_while_renewed() {
        use PartitionMark::{At, Idle};
        let mut w = WriterWatermarks::new();
        // Two owners: a reads partition 0 and finds it empty; b reads partition 1.
        w.on_report(0, "a/x/0", &report("src", "in", 2, &[(0, At(100))]));
        w.on_report(0, "b/x/0", &report("src", "in", 2, &[(1, At(100))]));
        assert_eq!(
            w.on_report(0, "a/x/0", &report("src", "in", 2, &[(0, Idle)])),
            WritersSay::At(100)
        );
        // b advances: a's claim was made before that advance, so it does not hold until a
        // says it again (a live owner does, every watermark interval).
        assert_eq!(
            w.on_report(0, "b/x/0", &report("src", "in", 2, &[(1, At(500))])),
            WritersSay::At(100),
            "a's claim is older than b's advance"
        );
        assert_eq!(
            w.on_report(0, "a/x/0", &report("src", "in", 2, &[(0, Idle)])),
            WritersSay::At(500),
            "renewed"
        );
        // a dies with its claim standing: the next advance ends it, and event time waits at
        // partition 0's last watermark however far b goes.
        for wm in [900, 5_000, 60_000] {
            assert_eq!(
                w.on_report(0, "b/x/0", &report("src", "in", 2, &[(1, At(wm))])),
                WritersSay::At(100),
                "at {wm}"
            );
        }
        // The new owner of partition 0 (b, after the rebalance) reports it: event time goes on.
        assert_eq!(
            w.on_report(
                0,
                "b/x/0",
                &report("src", "in", 2, &[(0, At(59_000)), (1, At(60_000))])
            ),
            WritersSay::At(59_000)
        );
        // Writers that speak for themselves: the same.
        let mut w = WriterWatermarks::new();
        w.on_watermark(1, "g/y/0", 100);
        w.on_watermark(1, "h/y/0", 100);
        assert_eq!(w.on_idle(1, "g/y/0"), WritersSay::At(100));
        assert_eq!(w.on_watermark(1, "h/y/0", 300), WritersSay::At(100));
        assert_eq!(w.on_idle(1, "g/y/0"), WritersSay::At(300));
        assert_eq!(w.on_watermark(1, "h/y/0", 400), WritersSay::At(100));
        assert_eq!(
            w.on_idle(1, "h/y/0"),
            WritersSay::At(100),
            "g's claim is older than h's last advance"
        );
        assert_eq!(w.on_idle(1, "g/y/0"), WritersSay::Idle);
        // Restored, nobody is idle until they say it again.
        let heard = w
            .partitions
            .iter()
            .find(|(p, _)| *p == 1)
            .unwrap()
            .1
            .clone();
        assert_eq!(w.restore(1, heard), WritersSay::At(100));
    }

    #[test]
    fn a_report_before_any_watermark_waits_for_every_partition() {
        let mut w = WriterWatermarks::new();
        // A reporter whose source has not looked yet: nothing to say, nothing to wait for yet.
        assert_eq!(
            w.on_report(3, "a/x/0", &InputReport::default()),
            WritersSay::Nothing
        );
        assert_eq!(
            w.on_report(
                3,
                "a/x/0",
                &report("s", "t", 2, &[(0, PartitionMark::At(10))])
            ),
            WritersSay::Nothing,
            "partition 1 of t was never reported"
        );
        assert_eq!(
            w.on_report(
                3,
                "b/x/0",
                &report("s", "t", 2, &[(1, PartitionMark::Idle)])
            ),
            WritersSay::At(10)
        );
    }
}
