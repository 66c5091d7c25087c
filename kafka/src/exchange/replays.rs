//! Replays upstream of an exchange, dropped by the reader (`docs/kafka.md`, "Replays upstream
//! of the exchange").
//!
//! An instance that dies after its exchange writer delivered messages but before its `kafka`
//! source committed their input makes the next owner of the input partition read those input
//! messages again, and write them to the exchange again. Each exchange message carries its
//! origin ([`HEADER_ORIGIN_MESSAGE`](super::HEADER_ORIGIN_MESSAGE): source topic, partition,
//! offset, and the record's number among those one input gave); the reader of each exchange
//! partition keeps the highest origin it has taken from each source partition ([`ReplayFilter`])
//! and drops a record whose origin is not newer. The highest origins are part of the
//! partition's state: saved in its commit record and restored with it ([`super::state`]).
//!
//! This holds because each source partition's records reach the exchange writer in order (a
//! forward or chained edge between them: `tidemark validate` warns otherwise) and each writer
//! keeps its messages in order per partition (an idempotent producer): in one exchange
//! partition the origins of one source partition rise, but for repeats. When a source partition
//! moves between two subtasks of one process, the new owner reads on where the old one stopped
//! (no repeats), through another writer: it waits until the old owner's writer has delivered
//! what it had (`crate::handoff`), or its first records could overtake the old writer's last
//! ones, which would then be dropped here though nobody wrote them again.
//!
//! A record read from an exchange takes that exchange's message as its origin from there on
//! ([`super::Relay`]): behind a second exchange, the first one's partitions are the "source
//! partitions", each read in order by one reader and read again from the same offsets after a
//! failover. (The source partition's origin would not do there: one source partition's records
//! reach the second exchange through several first-exchange partitions, out of order.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tidemark_runtime::name::name_of;
use tidemark_runtime::provenance::{Origin, OriginText};

/// The highest origin taken from each source partition, per exchange partition.
#[derive(Debug, Default)]
pub(crate) struct ReplayFilter {
    /// Exchange partition → one origin per source partition (a few: a linear search).
    highest: BTreeMap<i32, Vec<Origin>>,
}

impl ReplayFilter {
    /// A record of exchange partition `partition` whose origin is `origin`: whether it is newer
    /// than every record of its source partition taken from `partition` so far (it is then
    /// remembered as the highest; `false`: a replay).
    #[inline]
    pub(crate) fn admit(&mut self, partition: i32, origin: &OriginText<'_>) -> bool {
        let seen = self.highest.entry(partition).or_default();
        let at = seen
            .iter()
            .position(|o| o.partition == origin.partition && o.topic.as_str() == origin.topic);
        let Some(at) = at else {
            // A source partition first seen here: its name is interned once.
            seen.push(Origin {
                topic: name_of(origin.topic),
                partition: origin.partition,
                offset: origin.offset,
                seq: origin.seq,
            });
            return true;
        };
        let highest = &mut seen[at];
        if (origin.offset, origin.seq) <= (highest.offset, highest.seq) {
            return false;
        }
        highest.offset = origin.offset;
        highest.seq = origin.seq;
        true
    }

    /// Exchange partition `partition` was restored with these highest origins (its commit
    /// record's): they replace what was seen there before.
    pub(crate) fn restored(&mut self, partition: i32, origins: Vec<Origin>) {
        self.highest.insert(partition, origins);
    }

    /// Exchange partition `partition` is no longer read here.
    pub(crate) fn forget(&mut self, partition: i32) {
        self.highest.remove(&partition);
    }

    /// The highest origins per exchange partition now (taken at a checkpoint barrier, with
    /// the positions).
    pub(crate) fn snapshot(&self) -> BTreeMap<i32, Vec<Origin>> {
        self.highest.clone()
    }
}

/// One highest origin as a commit record keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedOrigin {
    topic: String,
    partition: i32,
    offset: i64,
    seq: u32,
}

impl From<&Origin> for SavedOrigin {
    fn from(o: &Origin) -> Self {
        SavedOrigin {
            topic: o.topic.to_string(),
            partition: o.partition,
            offset: o.offset,
            seq: o.seq,
        }
    }
}

impl From<&SavedOrigin> for Origin {
    fn from(o: &SavedOrigin) -> Self {
        Origin {
            topic: name_of(&o.topic),
            partition: o.partition,
            offset: o.offset,
            seq: o.seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(topic: &str, partition: i32, offset: i64, seq: u32) -> OriginText<'_> {
        OriginText {
            topic,
            partition,
            offset,
            seq,
        }
    }

    #[test]
    fn only_records_newer_than_the_highest_of_their_source_partition_pass() {
        let mut f = ReplayFilter::default();
        let new = |f: &mut ReplayFilter, p, o: OriginText<'_>| f.admit(p, &o);
        assert!(new(&mut f, 0, text("in", 1, 10, 0)));
        assert!(new(&mut f, 0, text("in", 1, 10, 1)));
        // A replay of both, and of an older one.
        assert!(!new(&mut f, 0, text("in", 1, 10, 0)));
        assert!(!new(&mut f, 0, text("in", 1, 10, 1)));
        assert!(!new(&mut f, 0, text("in", 1, 9, 5)));
        // Other source partitions, other topics and other exchange partitions are apart.
        assert!(new(&mut f, 0, text("in", 2, 3, 0)));
        assert!(new(&mut f, 0, text("other", 1, 3, 0)));
        assert!(new(&mut f, 1, text("in", 1, 3, 0)));
        assert!(new(&mut f, 0, text("in", 1, 11, 0)));
        // A replay of an older one is still one.
        assert!(!new(&mut f, 0, text("in", 1, 4, 2)));
        // Saved and restored (another subtask's filter): the same drops.
        let saved: Vec<SavedOrigin> = f.snapshot()[&0].iter().map(SavedOrigin::from).collect();
        let mut g = ReplayFilter::default();
        g.restored(0, saved.iter().map(Origin::from).collect());
        assert!(!new(&mut g, 0, text("in", 1, 11, 0)));
        assert!(!new(&mut g, 0, text("in", 2, 3, 0)));
        assert!(new(&mut g, 0, text("in", 2, 4, 0)));
        // A restore replaces what was seen; a forgotten partition starts over.
        g.restored(0, Vec::new());
        assert!(new(&mut g, 0, text("in", 1, 5, 0)));
        g.forget(0);
        assert!(new(&mut g, 0, text("in", 1, 5, 0)));
    }
}
