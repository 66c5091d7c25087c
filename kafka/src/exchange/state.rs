//! State that moves with its exchange partitions (`docs/kafka.md`, "State that moves with its
//! partitions"; Kafka Streams' changelog topics).
//!
//! The keyed vertex behind an exchange keeps its state per exchange partition: the writer
//! routes a key to partition `key_group(key)` of the exchange's partition count, so one
//! partition is one key group of the keyed state ([`tidemark_runtime::keyed_state`]). Each
//! reader subtask keeps the state of the partitions it holds in the compacted topic
//! `tidemark-<job>-<vertex>-state` (one state partition per exchange partition):
//!
//! - at each checkpoint barrier, the changed keys of each held partition and the keys gone
//!   are taken and kept;
//! - once the checkpoint is complete, they are written (a value keyed `v` or `w`, then the
//!   generation and the key; a deleted key as a deletion mark `d`, likewise; headers
//!   [`HEADER_CHECKPOINT`], [`HEADER_GENERATION`], [`HEADER_SLOTS`]), then one **commit
//!   record** per held partition, keyed `c` + generation: the checkpoint, the reader's
//!   position in the exchange partition, the operator-wide values (the window's event-time
//!   progress), and the highest origin the reader had taken from each source partition there
//!   ([`super::replays`]), then the tombstones of the keys deleted.
//!
//! A partition's state is what its newest generation that wrote a commit record committed:
//! per key, the value with the highest checkpoint not past the last commit record's. A new
//! owner restores that, writes it again under a generation one past every generation in the
//! partition (every key, then a commit record, for checkpoint 0: checkpoints are numbered per
//! instance, so the old owner's number means nothing to the new one's commit records), then
//! tombstones the older generations' keys,
//! and only then reads the exchange partition, from the position in the commit record.
//! Because the generation is part of every message key, compaction keeps the newest value of a
//! key *per generation*: a zombie's late writes (an older generation) can neither replace a
//! newer generation's values nor be taken for them.
//!
//! **No committed value is lost to compaction, however long the outage.** Compaction keeps
//! the last message per message key, so a value written for a checkpoint that never
//! completed must never share its message key with the committed value it would replace.
//! Each key has two slots (message kinds `v` and `w`): a checkpoint's values are written only
//! once it is complete, each into the slot that does *not* hold the key's committed value,
//! then the commit record; only after that does the slot written become the committed one.
//! A crash anywhere in between leaves the committed value in its slot, whatever compaction
//! does. A key deleted is written as a deletion mark (`d`) in the same way, and its slots and
//! mark are tombstoned after the commit record. So `min.compaction.lag.ms` is not what keeps
//! state: it stays long (1 h) so that what a crash left is still there to be looked at. The
//! test `compaction_at_any_moment_between_a_crash_and_the_restore_keeps_the_committed_state`
//! applies Kafka's compaction at every point of a written log.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tidemark_runtime::key_group::KeyGroupRange;
use tidemark_runtime::key_hash::KEY_HASH;
use tidemark_runtime::keyed_state::{KeyedSnapshot, StateKey};
use tidemark_runtime::provenance::Origin;
use tidemark_runtime::state_codec::{decode, encode};
use tidemark_runtime::state_move::StateMove;
use tidemark_runtime::BoxError;

use super::replays::SavedOrigin;
use super::seed::{DirectorySeed, SeedPartition};
use crate::client::{client_config, Brokers, Properties};
use crate::metrics::{KafkaMetrics, PartitionKey};
use crate::sink::{flush_producer, produce, DeliveryContext};
use crate::watermarks::Heard;

/// Header of a state message: the checkpoint it was written at, as decimal text.
pub const HEADER_CHECKPOINT: &str = "tidemark-checkpoint";
/// Header of a state message: the writer's generation for the partition, as decimal text
/// ([`owner_generation`]).
pub const HEADER_GENERATION: &str = "tidemark-generation";
/// Header of a state message: the consumer group's generation in which the writer was given
/// the partition, as decimal text (the low half of [`HEADER_GENERATION`]).
pub const HEADER_GROUP_GENERATION: &str = "tidemark-group-generation";

/// Header of every state message written with two slots per key (`2`): its partition is
/// restored by the slot rule (module doc). A commit record without it was written by an older
/// Tidemark, whose values are restored as they were written then: up to the commit record.
pub const HEADER_SLOTS: &str = "tidemark-state-slots";

/// Header of every state message: the key hash its keys were grouped by, [`KEY_HASH`]
/// (`murmur2`). State committed by messages without it was written by a Tidemark whose key hash
/// (rustc-hash's FxHasher) put keys in other partitions: restoring it is refused, never done
/// into the wrong partitions.
pub const HEADER_KEY_HASH: &str = "tidemark-key-hash";

/// The generation a new owner of a partition writes under: `newest` is the newest generation
/// in the partition's log, `group_generation` the consumer group's generation in which the
/// owner was given the partition. The high 32 bits count the owners (one past the newest's),
/// the low 32 bits are the group's generation:
///
/// - every owner's messages are newer than those of every owner before it, even when the
///   group's generations start again (a group deleted and made anew, say after its offsets
///   expired);
/// - two owners that restored the partition from the same log, one of them a zombie whose
///   assignment is over, are told apart by the group's generation: the later assignment's is
///   the newer, so the zombie's writes are ignored.
pub fn owner_generation(newest: u64, group_generation: i32) -> u64 {
    let owners = (newest >> 32) + 1;
    (owners << 32) | u64::from(group_generation.max(0) as u32)
}

/// The consumer group's generation in a generation made by [`owner_generation`].
pub fn group_generation_of(generation: u64) -> i32 {
    (generation & 0x7fff_ffff) as i32
}

/// The checkpoint a new owner writes the state it restored for (the values and the commit
/// record of its rewrite): below every checkpoint of its own (they count from 1), whatever the
/// old owner's instance had counted to.
const RESTORED_CHECKPOINT: u64 = 0;

/// The state topic of the keyed vertex `vertex` of job `job`: `tidemark-<job>-<vertex>-state`.
pub fn state_topic_name(job: &str, vertex: &str) -> String {
    format!("tidemark-{job}-{vertex}-state")
}

/// The topic configuration Tidemark creates the state topic with.
pub const STATE_TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("min.compaction.lag.ms", "3600000"),
];

/// What a commit record holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct CommitRecord {
    checkpoint: u64,
    generation: u64,
    /// The offset of the first exchange message not covered by the state (`None`: the
    /// partition had not been read when the state was taken; the group's commit applies).
    position: Option<i64>,
    /// The operator-wide values: a [`KeyedSnapshot`] without keys, encoded.
    shared: Vec<u8>,
    /// The highest origin taken from each source partition up to `position`
    /// ([`super::replays`]).
    origins: Vec<SavedOrigin>,
    /// The partition's event-time state at `position`: each writer's and each input
    /// partition's watermark and idleness ([`crate::watermarks::WriterWatermarks`]); `None`
    /// when nothing had been heard.
    marks: Option<Heard>,
}

/// A commit record as written before it held the event-time state.
#[derive(Deserialize)]
struct CommitRecordWithoutMarks {
    checkpoint: u64,
    generation: u64,
    position: Option<i64>,
    shared: Vec<u8>,
    origins: Vec<SavedOrigin>,
}

/// A commit record as written before it held the highest origins.
#[derive(Deserialize)]
struct CommitRecordWithoutOrigins {
    checkpoint: u64,
    generation: u64,
    position: Option<i64>,
    shared: Vec<u8>,
}

impl CommitRecord {
    /// Decodes a commit record, one written by an older Tidemark too: without the event-time
    /// state (read as nothing heard: the next writers' messages give it again, as before), or
    /// without the highest origins as well (read as none seen: such a state topic predates
    /// the origins, so no record in it has one).
    fn read(bytes: &[u8]) -> Result<CommitRecord, tidemark_runtime::state_codec::StateCodecError> {
        decode::<CommitRecord>(bytes).or_else(|e| {
            if let Ok(old) = decode::<CommitRecordWithoutMarks>(bytes) {
                return Ok(CommitRecord {
                    checkpoint: old.checkpoint,
                    generation: old.generation,
                    position: old.position,
                    shared: old.shared,
                    origins: old.origins,
                    marks: None,
                });
            }
            let old: CommitRecordWithoutOrigins = decode(bytes).map_err(|_| e)?;
            Ok(CommitRecord {
                checkpoint: old.checkpoint,
                generation: old.generation,
                position: old.position,
                shared: old.shared,
                origins: Vec::new(),
                marks: None,
            })
        })
    }
}

/// What a reader has of one exchange partition besides its keys, taken at a checkpoint
/// barrier with its position, saved in the commit record and restored with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PartitionProgress {
    /// The highest origin taken from each source partition ([`super::replays`]); `None`
    /// when none was taken there.
    pub(crate) origins: Option<Vec<Origin>>,
    /// What was heard of the partition's writers and inputs (its watermark and idleness).
    pub(crate) marks: Option<Heard>,
}

/// What the restores of exchange partitions gave, per partition, for the reader.
pub(crate) type RestoredProgress = Vec<(i32, PartitionProgress)>;

/// A key's value in its first slot (and every value of a state topic written before values
/// had slots).
const VALUE: u8 = b'v';
/// A key's value in its second slot.
const VALUE_OTHER: u8 = b'w';
/// The two slots of a key.
const SLOTS: [u8; 2] = [VALUE, VALUE_OTHER];
/// A key deleted at the checkpoint the message was written for.
const DELETED: u8 = b'd';
const COMMIT: u8 = b'c';

fn message_key(kind: u8, generation: u64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + key.len());
    out.push(kind);
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The kind, generation and key of a state message's key.
fn parse_key(bytes: &[u8]) -> Option<(u8, u64, &[u8])> {
    let (&kind, rest) = bytes.split_first()?;
    if rest.len() < 8 || ![VALUE, VALUE_OTHER, DELETED, COMMIT].contains(&kind) {
        return None;
    }
    let generation = u64::from_be_bytes(rest[..8].try_into().ok()?);
    Some((kind, generation, &rest[8..]))
}

/// One message of a state partition.
#[derive(Debug)]
struct StateMessage {
    /// [`VALUE`], [`VALUE_OTHER`], [`DELETED`] or [`COMMIT`].
    kind: u8,
    generation: u64,
    /// The encoded state key (empty for a commit record).
    key: Vec<u8>,
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
    /// Whether it says its keys were grouped by this version's key hash ([`HEADER_KEY_HASH`]).
    current_hash: bool,
    /// What it says of itself in its headers.
    meta: MessageMeta,
}

/// What a state message says of itself in its headers, beside its key hash.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MessageMeta {
    /// The checkpoint it was written for ([`HEADER_CHECKPOINT`]; `None` when it has none or
    /// it is not a number).
    pub(crate) checkpoint: Option<u64>,
    /// Written with two slots per key ([`HEADER_SLOTS`]).
    pub(crate) slotted: bool,
}

impl MessageMeta {
    /// A message this version writes, for `checkpoint`.
    #[cfg(test)]
    pub(crate) fn written(checkpoint: u64) -> Self {
        MessageMeta {
            checkpoint: Some(checkpoint),
            slotted: true,
        }
    }
}

/// A partition's state as its messages give it: the restore rule, apart from any broker.
#[derive(Debug, Default)]
pub(crate) struct PartitionLog {
    /// In offset order.
    messages: Vec<StateMessage>,
}

/// What a partition's log restores to.
#[derive(Debug)]
pub(crate) struct RestoredPartition {
    /// Encoded key → encoded value.
    pub(crate) values: BTreeMap<Vec<u8>, Vec<u8>>,
    commit: Option<CommitRecord>,
    /// The highest generation that wrote anything.
    pub(crate) newest_generation: u64,
    /// Every (kind, generation, key) of a generation older than the restored one's successor:
    /// tombstoned once the rewrite is written.
    stale: HashSet<Vec<u8>>,
}

impl RestoredPartition {
    /// The values written again by the owner that restored them, under `generation`, for the
    /// restored `checkpoint`: each in its first slot.
    fn rewrite(&self, generation: u64, checkpoint: u64) -> Vec<Out> {
        self.values
            .iter()
            .map(|(key, value)| Out {
                key: message_key(VALUE, generation, key),
                value: Some(value.clone()),
                checkpoint,
            })
            .collect()
    }
}

impl PartitionLog {
    /// Adds one message of the partition, in offset order, as a Tidemark without slots wrote
    /// it (no [`HEADER_SLOTS`], no checkpoint); `false` for a key that is not a state
    /// message's.
    #[cfg(test)]
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        self.push_hashed(key, value, true, MessageMeta::default())
    }

    /// [`PartitionLog::push`] of a message that does (`current_hash`) or does not carry
    /// [`HEADER_KEY_HASH`] with this version's key hash, with what its headers say (`meta`).
    pub(crate) fn push_hashed(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        current_hash: bool,
        meta: MessageMeta,
    ) -> bool {
        match parse_key(key) {
            Some((kind, generation, k)) => {
                self.messages.push(StateMessage {
                    kind,
                    generation,
                    key: k.to_vec(),
                    value: value.map(<[u8]>::to_vec),
                    current_hash,
                    meta,
                });
                true
            }
            None => false,
        }
    }

    /// The newest generation's last commit record, and its index (the one a restore takes).
    fn committed(&self) -> Option<(usize, &StateMessage)> {
        self.messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.kind == COMMIT && m.value.is_some())
            .max_by_key(|(i, m)| (m.generation, *i))
    }

    /// Why the partition's committed state cannot be restored by this version: it was written
    /// without [`HEADER_KEY_HASH`], by a Tidemark whose key hash put keys in other partitions.
    /// `None` when it can (or when nothing is committed).
    pub(crate) fn old_key_hash(&self) -> Option<String> {
        match self.committed() {
            Some((_, c)) if !c.current_hash => Some(format!(
                "its committed state was written with the key hash of an older Tidemark \
                 (rustc-hash's FxHasher; its messages have no {HEADER_KEY_HASH}: {KEY_HASH} \
                 header), which put keys in other partitions than this version's hash \
                 ({KEY_HASH}, Kafka's default partitioner) does: it is not restored into the \
                 wrong partitions. Finish the job with the older version, or delete this \
                 state topic and the exchange topic to start the vertex's state afresh"
            )),
            _ => None,
        }
    }

    /// The values `generation` committed at `checkpoint` by the slot rule: of each key's slots
    /// and deletion mark, the last message of each (what compaction keeps), the one written
    /// for the highest checkpoint not past `checkpoint`; a deletion mark or nothing: no value.
    /// A value or deletion mark without its checkpoint cannot be placed: an error, never
    /// taken as checkpoint 0.
    fn slotted_values(
        &self,
        generation: u64,
        checkpoint: u64,
    ) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
        // (kind, key) → the checkpoint and value of its last message (`None`: a tombstone).
        type Last<'a> = HashMap<(u8, &'a [u8]), Option<(u64, &'a [u8])>>;
        let mut last: Last<'_> = HashMap::new();
        for m in &self.messages {
            if m.generation != generation || m.kind == COMMIT {
                continue;
            }
            let at = match (m.value.as_deref(), m.meta.checkpoint) {
                (None, _) => None,
                (Some(v), Some(c)) => Some((c, v)),
                (Some(_), None) => {
                    return Err(format!(
                        "a state message of generation {generation} (kind `{}`) has no \
                         {HEADER_CHECKPOINT} header: Tidemark writes one on every value, so \
                         another program wrote to the state topic",
                        m.kind as char
                    ))
                }
            };
            last.insert((m.kind, m.key.as_slice()), at);
        }
        let mut best: BTreeMap<&[u8], (u64, u8, &[u8])> = BTreeMap::new();
        for ((kind, key), at) in last {
            let Some((written, value)) = at else { continue };
            if written > checkpoint {
                continue;
            }
            // A deletion mark and a value are never written for one checkpoint; were they,
            // the deletion wins.
            let rank = u8::from(kind == DELETED);
            let entry = best.entry(key).or_insert((written, rank, value));
            if (written, rank) > (entry.0, entry.1) {
                *entry = (written, rank, value);
            }
        }
        Ok(best
            .into_iter()
            .filter(|(_, (_, rank, _))| *rank == 0)
            .map(|(key, (_, _, value))| (key.to_vec(), value.to_vec()))
            .collect())
    }

    /// The state: the newest generation with a commit record, its values up to its last one.
    pub(crate) fn restore(&self) -> Result<RestoredPartition, String> {
        let newest_generation = self
            .messages
            .iter()
            .map(|m| m.generation)
            .max()
            .unwrap_or(0);
        if let Some(old) = self.old_key_hash() {
            return Err(old);
        }
        let mut values = BTreeMap::new();
        let mut commit = None;
        if let Some((last, c)) = self.committed() {
            let record = CommitRecord::read(c.value.as_deref().unwrap_or_default())
                .map_err(|e| format!("a commit record that cannot be read: {e}"))?;
            if c.meta.slotted {
                values = self.slotted_values(c.generation, record.checkpoint)?;
            } else {
                // Written without slots: the values written before the commit record.
                for m in &self.messages[..last] {
                    if m.kind != VALUE || m.generation != c.generation {
                        continue;
                    }
                    match &m.value {
                        Some(v) => values.insert(m.key.clone(), v.clone()),
                        None => values.remove(&m.key),
                    };
                }
            }
            commit = Some(record);
        }
        // The message keys whose last message is not a tombstone.
        let mut live: HashMap<Vec<u8>, bool> = HashMap::new();
        for m in &self.messages {
            live.insert(message_key(m.kind, m.generation, &m.key), m.value.is_some());
        }
        let stale = live
            .into_iter()
            .filter_map(|(k, live)| live.then_some(k))
            .collect();
        Ok(RestoredPartition {
            values,
            commit,
            newest_generation,
            stale,
        })
    }
}

/// A held partition's bookkeeping.
#[derive(Debug, Default)]
struct Held {
    generation: u64,
    /// What each encoded key was at the last barrier: only changes are written again.
    written: HashMap<Vec<u8>, Vec<u8>>,
    /// The slot (index in [`SLOTS`]) holding each key's committed value: its next value goes
    /// to the other one. A key without one has no committed value.
    slots: HashMap<Vec<u8>, u8>,
    /// The position of the last commit record (carried while nothing is read).
    position: Option<i64>,
    /// The highest origins of the last commit record (carried likewise).
    origins: Vec<SavedOrigin>,
    /// The event-time state of the last commit record (carried likewise).
    marks: Option<Heard>,
}

/// The value of a deletion mark ([`DELETED`]): its key and checkpoint are what it says.
const DELETION_MARK: &[u8] = b"-";

/// One state message to write: its message key, its value (`None`: a tombstone) and the
/// checkpoint it is written for.
#[derive(Clone, Debug, PartialEq)]
struct Out {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    checkpoint: u64,
}

/// The changes of one partition's keys since the last barrier (`None`: deleted).
type Changes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The changes of one partition's keys a completed checkpoint commits: encoded key → the
/// checkpoint it changed at and its value (`None`: deleted).
type Committing = BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>;

impl Held {
    /// A partition restored (or new) with `values`, each in its first slot.
    fn new(generation: u64, values: &BTreeMap<Vec<u8>, Vec<u8>>) -> Held {
        Held {
            generation,
            written: values.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            slots: values.keys().map(|k| (k.clone(), 0)).collect(),
            ..Held::default()
        }
    }

    /// A barrier: the keys whose value differs from the last barrier's in `now` (encoded key
    /// → value), and the keys gone since.
    fn changes(&mut self, now: &HashMap<Vec<u8>, &[u8]>) -> Changes {
        let mut changes: Changes = Vec::new();
        for (key, value) in now {
            if self.written.get(key).map(Vec::as_slice) != Some(*value) {
                changes.push((key.clone(), Some(value.to_vec())));
            }
        }
        let gone: Vec<Vec<u8>> = self
            .written
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.written.remove(&key);
            changes.push((key, None));
        }
        for (key, value) in &changes {
            if let Some(v) = value {
                self.written.insert(key.clone(), v.clone());
            }
        }
        changes
    }

    /// A checkpoint completed: the messages that commit `changes` (encoded key → the
    /// checkpoint it changed at and its value, `None`: deleted), in two parts: those written
    /// before the commit record (each value into the slot that does not hold the key's
    /// committed value, a deleted key's mark) and those after it (a deleted key's slots and
    /// mark tombstoned). The slots written become the committed ones.
    fn commit_messages(&mut self, changes: Committing) -> (Vec<Out>, Vec<Out>) {
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for (key, (checkpoint, value)) in changes {
            let committed = self.slots.get(&key).copied();
            match value {
                Some(value) => {
                    let slot = committed.map_or(0, |s| 1 - s);
                    before.push(Out {
                        key: message_key(SLOTS[usize::from(slot)], self.generation, &key),
                        value: Some(value),
                        checkpoint,
                    });
                    self.slots.insert(key, slot);
                }
                // Never committed: nothing to delete.
                None if committed.is_none() => {}
                None => {
                    before.push(Out {
                        key: message_key(DELETED, self.generation, &key),
                        value: Some(DELETION_MARK.to_vec()),
                        checkpoint,
                    });
                    for kind in [VALUE, VALUE_OTHER, DELETED] {
                        after.push(Out {
                            key: message_key(kind, self.generation, &key),
                            value: None,
                            checkpoint,
                        });
                    }
                    self.slots.remove(&key);
                }
            }
        }
        (before, after)
    }
}

/// A checkpoint saved at its barrier and not complete yet.
#[derive(Debug, Default)]
struct PendingCheckpoint {
    /// The operator-wide values, encoded.
    shared: Vec<u8>,
    /// Each held partition's changes.
    changes: BTreeMap<i32, Changes>,
}

/// What a restore gave: the keys for the operator, and where to read the exchange from.
#[derive(Debug)]
pub(crate) struct Restore {
    pub(crate) state: KeyedSnapshot,
    pub(crate) position: Option<i64>,
    /// Restored from a checkpoint directory ([`super::seed`]): without a `position`, the
    /// partition had not been read when the checkpoint was taken, so it is read from its
    /// start (the group's commit is of a later run).
    pub(crate) from_directory: bool,
    /// The highest origins and the event-time state at `position`.
    pub(crate) progress: PartitionProgress,
    pub(crate) records: u64,
    pub(crate) seconds: f64,
}

/// The state topic as one reader subtask writes and restores it.
pub(crate) struct StateStore {
    topic: String,
    /// Exchange partitions = state partitions = key groups.
    partitions: u32,
    what: String,
    producer: ThreadedProducer<DeliveryContext>,
    context: DeliveryContext,
    brokers: Brokers,
    properties: Properties,
    timeout: Duration,
    held: BTreeMap<i32, Held>,
    /// Checkpoints saved, until they complete: written then (module doc).
    pending: BTreeMap<u64, PendingCheckpoint>,
    /// The state restored from a checkpoint directory, taken instead of the topic's for the
    /// partitions it has ([`super::seed`]).
    seed: Option<Arc<DirectorySeed>>,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("topic", &self.topic)
            .finish()
    }
}

impl StateStore {
    /// The store of topic `topic` with `partitions` partitions (checked to exist already).
    pub(crate) fn new(
        topic: String,
        partitions: u32,
        what: String,
        brokers: &Brokers,
        properties: &Properties,
        timeout: Duration,
    ) -> Result<Self, BoxError> {
        let mut config = client_config(brokers, properties);
        config
            .set("linger.ms", "5")
            .set("enable.idempotence", "true");
        let context = DeliveryContext::default();
        let producer: ThreadedProducer<DeliveryContext> = config
            .create_with_context(context.clone())
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        Ok(StateStore {
            topic,
            partitions,
            what,
            producer,
            context,
            brokers: brokers.clone(),
            properties: properties.clone(),
            timeout,
            held: BTreeMap::new(),
            pending: BTreeMap::new(),
            seed: None,
        })
    }

    /// Takes a partition's state from `seed` (restored from a checkpoint directory) when it has
    /// it, instead of from the topic.
    pub(crate) fn seeded_from(mut self, seed: Arc<DirectorySeed>) -> Self {
        self.seed = Some(seed);
        self
    }

    /// What a commit record of each held partition would hold for a checkpoint whose barrier
    /// left the reader at `positions` with `progress` (for a checkpoint directory,
    /// [`super::seed`]).
    pub(crate) fn seed_at(
        &self,
        positions: &BTreeMap<i32, i64>,
        progress: &BTreeMap<i32, PartitionProgress>,
    ) -> Vec<SeedPartition> {
        self.held
            .iter()
            .map(|(partition, held)| {
                let p = progress.get(partition);
                SeedPartition {
                    partition: *partition,
                    position: positions.get(partition).copied().or(held.position),
                    origins: match p.and_then(|p| p.origins.as_ref()) {
                        Some(origins) => origins.iter().map(SavedOrigin::from).collect(),
                        None => held.origins.clone(),
                    },
                    marks: p
                        .and_then(|p| p.marks.clone())
                        .or_else(|| held.marks.clone()),
                }
            })
            .collect()
    }

    /// The number of key groups (the exchange's partitions).
    pub(crate) fn partitions(&self) -> u32 {
        self.partitions
    }

    fn headers(checkpoint: u64, generation: u64) -> OwnedHeaders {
        let (c, g) = (checkpoint.to_string(), generation.to_string());
        let group = group_generation_of(generation).to_string();
        OwnedHeaders::new_with_capacity(5)
            .insert(Header {
                key: HEADER_KEY_HASH,
                value: Some(KEY_HASH),
            })
            .insert(Header {
                key: HEADER_SLOTS,
                value: Some("2"),
            })
            .insert(Header {
                key: HEADER_CHECKPOINT,
                value: Some(c.as_str()),
            })
            .insert(Header {
                key: HEADER_GENERATION,
                value: Some(g.as_str()),
            })
            .insert(Header {
                key: HEADER_GROUP_GENERATION,
                value: Some(group.as_str()),
            })
    }

    fn send(
        &self,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
        headers: OwnedHeaders,
    ) -> Result<(), BoxError> {
        let mut pending: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic)
            .partition(partition)
            .key(key)
            .headers(headers);
        if let Some(v) = value {
            pending = pending.payload(v);
        }
        produce(&self.producer, &self.context, &self.what, pending)
    }

    fn flush(&self) -> Result<(), BoxError> {
        flush_producer(&self.producer, &self.context, &self.what, self.timeout)
    }

    /// Reads partition `partition` of the state topic to its end.
    fn read_partition(&self, partition: i32) -> Result<(PartitionLog, u64), BoxError> {
        read_partition(
            &self.brokers,
            &self.properties,
            &self.topic,
            partition,
            &self.what,
            self.timeout,
        )
    }

    /// Partition `partition` was given to this subtask in the consumer group's generation
    /// `group_generation`: its committed state, rewritten under a new generation
    /// ([`owner_generation`]: every key and a commit record), older generations tombstoned.
    pub(crate) fn restore(
        &mut self,
        partition: i32,
        group_generation: i32,
    ) -> Result<Restore, BoxError> {
        let started = Instant::now();
        let (log, records) = self.read_partition(partition)?;
        let mut restored = log.restore().map_err(|e| {
            format!(
                "{}: the state topic {} partition {partition}: {e}",
                self.what, self.topic
            )
        })?;
        let generation = owner_generation(restored.newest_generation, group_generation);
        // Restored from a checkpoint directory: its state, not the topic's, written under
        // the new generation like any restored state (older generations are tombstoned).
        let seeded = self.seed.as_ref().and_then(|s| s.take(partition));
        let from_directory = seeded.is_some();
        let (checkpoint, position, shared, origins, marks) = match (seeded, &restored.commit) {
            (Some(s), _) => {
                restored.values = s.values;
                (
                    RESTORED_CHECKPOINT,
                    s.partition.position,
                    s.shared,
                    s.partition.origins,
                    s.partition.marks,
                )
            }
            (None, Some(c)) => (
                c.checkpoint,
                c.position,
                c.shared.clone(),
                c.origins.clone(),
                c.marks.clone(),
            ),
            (None, None) => (0, None, Vec::new(), Vec::new(), None),
        };
        let mut state = match shared.is_empty() {
            true => KeyedSnapshot::new(self.partitions),
            false => decode::<KeyedSnapshot>(&shared)
                .map_err(|e| format!("{}: a commit record's values: {e}", self.what))?,
        };
        // Written again under this owner's generation for checkpoint 0, not for the restored
        // one: checkpoints are numbered per instance, and the slot rule takes a generation's
        // values only up to its last commit record's checkpoint. Tagged with the old owner's
        // number (65, say), the values this owner did not change were past its own commit
        // records (51, an instance started later) and lost at the next restore.
        let headers = Self::headers(RESTORED_CHECKPOINT, generation);
        self.forget(partition);
        for (key, value) in &restored.values {
            let state_key: StateKey = decode(key)
                .map_err(|e| format!("{}: a state key that cannot be read: {e}", self.what))?;
            let v = state_key
                .to_value()
                .map_err(|e| format!("{}: a state key that cannot be read: {e}", self.what))?;
            state.put_encoded(&v, value.clone());
        }
        self.send_all(
            partition,
            generation,
            &restored.rewrite(generation, RESTORED_CHECKPOINT),
        )?;
        let commit = CommitRecord {
            checkpoint: RESTORED_CHECKPOINT,
            generation,
            position,
            shared: encode(&state.part(KeyGroupRange { start: 0, end: 0 }))?,
            origins: origins.clone(),
            marks: marks.clone(),
        };
        self.send(
            partition,
            &message_key(COMMIT, generation, &[]),
            Some(&encode(&commit)?),
            headers.clone(),
        )?;
        for stale in &restored.stale {
            self.send(partition, stale, None, headers.clone())?;
        }
        self.flush()?;
        tracing::debug!(
            topic = %self.topic,
            partition,
            group_generation,
            generation,
            newest_generation = restored.newest_generation,
            checkpoint,
            from_directory,
            ?position,
            ?marks,
            keys = restored.values.len(),
            "state of an exchange partition restored"
        );
        self.held.insert(
            partition,
            Held {
                position,
                origins: origins.clone(),
                marks: marks.clone(),
                ..Held::new(generation, &restored.values)
            },
        );
        Ok(Restore {
            state,
            position,
            from_directory,
            progress: PartitionProgress {
                origins: Some(origins.iter().map(Origin::from).collect()),
                marks,
            },
            records,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Partition `partition` was taken away: nothing more is written for it (not even what
    /// checkpoints not complete yet changed there).
    pub(crate) fn forget(&mut self, partition: i32) {
        self.held.remove(&partition);
        for pending in self.pending.values_mut() {
            pending.changes.remove(&partition);
        }
    }

    /// Barrier `checkpoint`: the changed keys of each held partition and the keys gone (not
    /// for the partitions of `unapplied`: restored, but not in `state` yet), kept until the
    /// checkpoint completes.
    pub(crate) fn save(
        &mut self,
        checkpoint: u64,
        state: &KeyedSnapshot,
        unapplied: &BTreeSet<i32>,
    ) -> Result<(), BoxError> {
        let mut current: BTreeMap<i32, HashMap<Vec<u8>, &[u8]>> = BTreeMap::new();
        for (group, key, value) in state.entries() {
            let partition = group as i32;
            if self.held.contains_key(&partition) {
                current
                    .entry(partition)
                    .or_default()
                    .insert(encode(&key)?, value);
            }
        }
        let mut pending = PendingCheckpoint {
            shared: encode(&state.part(KeyGroupRange { start: 0, end: 0 }))?,
            changes: BTreeMap::new(),
        };
        for (partition, held) in &mut self.held {
            if unapplied.contains(partition) {
                continue;
            }
            let now = current.remove(partition).unwrap_or_default();
            let changes = held.changes(&now);
            if !changes.is_empty() {
                pending.changes.insert(*partition, changes);
            }
        }
        self.pending.insert(checkpoint, pending);
        Ok(())
    }

    fn send_all(&self, partition: i32, generation: u64, messages: &[Out]) -> Result<(), BoxError> {
        for m in messages {
            self.send(
                partition,
                &m.key,
                m.value.as_deref(),
                Self::headers(m.checkpoint, generation),
            )?;
        }
        Ok(())
    }

    /// Checkpoint `checkpoint` is complete: per held partition, the values it and the
    /// checkpoints before it that never completed changed (each into the slot that does not
    /// hold the committed value), then a commit record with the reader's position there
    /// (`positions`: exchange partition → next offset), the highest origins it had taken
    /// there and what it had heard of the writers (`progress`, taken with the positions),
    /// then the tombstones of the keys deleted.
    pub(crate) fn commit(
        &mut self,
        checkpoint: u64,
        positions: &BTreeMap<i32, i64>,
        progress: &BTreeMap<i32, PartitionProgress>,
    ) -> Result<(), BoxError> {
        if !self.pending.contains_key(&checkpoint) {
            return Ok(());
        }
        let later = self.pending.split_off(&(checkpoint + 1));
        let taken = std::mem::replace(&mut self.pending, later);
        let mut shared = Vec::new();
        let mut merged: BTreeMap<i32, Committing> = BTreeMap::new();
        for (n, pending) in taken {
            shared = pending.shared;
            for (partition, changes) in pending.changes {
                let keys = merged.entry(partition).or_default();
                for (key, value) in changes {
                    keys.insert(key, (n, value));
                }
            }
        }
        let partitions: Vec<i32> = self.held.keys().copied().collect();
        let mut cleanup = Vec::new();
        for &partition in &partitions {
            let held = self.held.get_mut(&partition).expect("held partition");
            let generation = held.generation;
            let changes = merged.remove(&partition).unwrap_or_default();
            let (before, after) = held.commit_messages(changes);
            self.send_all(partition, generation, &before)?;
            cleanup.push((partition, generation, after));
        }
        // The values first: a commit record never stands before a value it covers.
        self.flush()?;
        for partition in partitions {
            let held = self.held.get_mut(&partition).expect("held partition");
            if let Some(p) = positions.get(&partition) {
                held.position = Some(*p);
            }
            if let Some(p) = progress.get(&partition) {
                if let Some(origins) = &p.origins {
                    held.origins = origins.iter().map(SavedOrigin::from).collect();
                }
                if let Some(marks) = &p.marks {
                    held.marks = Some(marks.clone());
                }
            }
            let record = CommitRecord {
                checkpoint,
                generation: held.generation,
                position: held.position,
                shared: shared.clone(),
                origins: held.origins.clone(),
                marks: held.marks.clone(),
            };
            let headers = Self::headers(checkpoint, held.generation);
            let key = message_key(COMMIT, held.generation, &[]);
            self.send(partition, &key, Some(&encode(&record)?), headers)?;
        }
        for (partition, generation, after) in &cleanup {
            self.send_all(*partition, *generation, after)?;
        }
        self.flush()
    }
}

/// Reads partition `partition` of the state topic `topic` to its end, for `what`.
fn read_partition(
    brokers: &Brokers,
    properties: &Properties,
    topic: &str,
    partition: i32,
    what: &str,
    timeout: Duration,
) -> Result<(PartitionLog, u64), BoxError> {
    let mut config = client_config(brokers, properties);
    config
        .set("group.id", format!("{}-restore", topic))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| format!("{}: invalid Kafka settings: {e}", what))?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, timeout)
        .map_err(|e| {
            format!(
                "{}: cannot read the state topic {} partition {partition}: {e}",
                what, topic
            )
        })?;
    // The topic is compacted only (never `delete`), so its log starts at offset 0 for good:
    // a later start means the broker deleted state messages, possibly the only copy of a
    // committed value (retention set on the topic by hand, or librdkafka's mock cluster,
    // which keeps at most 5 MB per partition and never compacts). Restoring what is left
    // would start keys from nothing or from old values without a word.
    if low > 0 {
        return Err(format!(
            "{}: the state topic {} partition {partition} begins at offset {low}, not 0: \
             the broker deleted state messages (retention on the topic, or librdkafka's mock \
             cluster, `tidemark dev-kafka`, which keeps at most 5 MB per partition and does \
             not compact), so the state cannot be restored exactly; give the exchange more \
             partitions or use a broker that compacts (docs/kafka.md, \"Limits of the mock \
             cluster\")",
            what, topic
        )
        .into());
    }
    let mut log = PartitionLog::default();
    let mut records = 0u64;
    if high <= low {
        return Ok((log, records));
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(low))?;
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + timeout;
    let mut next = low;
    while next < high {
        if Instant::now() >= deadline {
            return Err(format!(
                "{}: the state topic {} partition {partition} was not read to its end \
                 ({high}) within {:?} (at {next})",
                what, topic, timeout
            )
            .into());
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message =
            message.map_err(|e| format!("{}: cannot read the state topic {}: {e}", what, topic))?;
        next = message.offset() + 1;
        records += 1;
        let key = message.key().unwrap_or_default();
        let current_hash = message.headers().is_some_and(|h| {
            h.iter()
                .any(|h| h.key == HEADER_KEY_HASH && h.value == Some(KEY_HASH.as_bytes()))
        });
        let meta = message_meta(&message);
        if !log.push_hashed(key, message.payload(), current_hash, meta) {
            return Err(format!(
                "{}: the state topic {} holds a message that Tidemark did not write \
                 (partition {partition}, offset {})",
                what,
                topic,
                message.offset()
            )
            .into());
        }
    }
    Ok((log, records))
}

/// Refuses, before the job starts, a state topic whose committed state was written with the key
/// hash of an older Tidemark ([`PartitionLog::old_key_hash`]): the restore would refuse it when
/// the partition is assigned, after the job started. Each partition's last message says whether
/// its newest writer recorded this version's key hash (then nothing older can be restored
/// from it: that writer restored the partition first); only a partition whose last message
/// does not is read whole, as a restore reads it. Whatever cannot be checked here (no
/// brokers, no topic yet, a partition that cannot be read) is left to the job, which names it.
pub(crate) fn check_key_hash(
    brokers: &Brokers,
    properties: &Properties,
    topic: &str,
    what: &str,
    timeout: Duration,
) -> Result<(), String> {
    let mut config = client_config(brokers, properties);
    config
        .set("group.id", format!("{topic}-restore"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("allow.auto.create.topics", "false")
        // The last messages are there already: no fetch waits for more.
        .set("fetch.wait.max.ms", "10");
    let Ok(consumer) = config.create::<BaseConsumer>() else {
        return Ok(());
    };
    let Ok(metadata) = consumer.fetch_metadata(Some(topic), timeout) else {
        return Ok(());
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(());
    };
    if t.error().is_some() {
        return Ok(());
    }
    // Each non-empty partition's last message, all partitions at once.
    let mut last = BTreeMap::new();
    for p in t.partitions() {
        if let Ok((low, high)) = consumer.fetch_watermarks(topic, p.id(), timeout) {
            if high > low {
                last.insert(p.id(), high - 1);
            }
        }
    }
    let mut tpl = TopicPartitionList::new();
    for (&partition, &offset) in &last {
        if tpl
            .add_partition_offset(topic, partition, Offset::Offset(offset))
            .is_err()
        {
            return Ok(());
        }
    }
    if last.is_empty() || consumer.assign(&tpl).is_err() {
        return Ok(());
    }
    // Partition → whether its last message carries this version's key hash.
    let mut current: BTreeMap<i32, bool> = BTreeMap::new();
    let deadline = Instant::now() + timeout;
    while current.len() < last.len() && Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        if last
            .get(&message.partition())
            .is_some_and(|o| message.offset() >= *o)
        {
            current.entry(message.partition()).or_insert_with(|| {
                message.headers().is_some_and(|h| {
                    h.iter()
                        .any(|h| h.key == HEADER_KEY_HASH && h.value == Some(KEY_HASH.as_bytes()))
                })
            });
        }
    }
    drop(consumer);
    // A partition whose last message does not say so (or could not be read) is read whole.
    for &partition in last.keys() {
        if current.get(&partition) == Some(&true) {
            continue;
        }
        let Ok((log, _)) = read_partition(brokers, properties, topic, partition, what, timeout)
        else {
            continue;
        };
        if let Some(old) = log.old_key_hash() {
            return Err(format!(
                "{what}: the state topic {topic} partition {partition}: {old}"
            ));
        }
    }
    Ok(())
}

/// The state kept by one reader subtask, as its consumer's rebalances move partitions: what
/// the rebalance callback restores and forgets, and the moves the runtime applies to the
/// keyed operator behind ([`tidemark_runtime::state_move`]).
pub(crate) struct KeptState {
    store: Mutex<StateStore>,
    /// Moves not yet taken by the runtime, and the partitions restored by them (whose keys
    /// the operator does not have yet: a barrier meanwhile writes nothing for them).
    moves: Mutex<(Vec<StateMove>, BTreeSet<i32>)>,
    /// Moves the reader handed on (with their event time) for the keyed operator's store to
    /// take ([`super::StateTopicStore`]), and whether there are any (read without the lock).
    handed: Mutex<Vec<StateMove>>,
    any_handed: AtomicBool,
    failure: Mutex<Option<String>>,
    /// The highest origins and event-time states of the partitions restored, not yet taken
    /// by the reader ([`super::Relay::take_restored`]), and how many restores there have been.
    progress: Mutex<RestoredProgress>,
    restores: AtomicU64,
    /// The exchange topic (the consumer reads no other).
    pub(crate) exchange_topic: String,
    /// The keyed vertex, for the series.
    operator_id: String,
    metrics: Arc<KafkaMetrics>,
}

impl std::fmt::Debug for KeptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptState")
            .field("exchange_topic", &self.exchange_topic)
            .finish()
    }
}

impl KeptState {
    pub(crate) fn new(
        store: StateStore,
        exchange_topic: String,
        operator_id: String,
        metrics: Arc<KafkaMetrics>,
    ) -> Self {
        KeptState {
            store: Mutex::new(store),
            moves: Mutex::new((Vec::new(), BTreeSet::new())),
            handed: Mutex::new(Vec::new()),
            any_handed: AtomicBool::new(false),
            failure: Mutex::new(None),
            progress: Mutex::new(Vec::new()),
            restores: AtomicU64::new(0),
            exchange_topic,
            operator_id,
            metrics,
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, StateStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of key groups: the exchange's partitions.
    pub(crate) fn partitions(&self) -> u32 {
        self.store().partitions()
    }

    /// Exchange partition `partition` was given to this subtask in the consumer group's
    /// generation `group_generation`: restores its state (queued for the operator, before any
    /// of its records) and returns where to read from: the offset of its commit record (or
    /// of the checkpoint directory's state), the start of the partition for one the
    /// directory's state had not read, else (`Offset::Invalid`) the group's commit. A failure
    /// is kept for the next poll, which fails the job.
    pub(crate) fn assigned(&self, partition: i32, group_generation: i32) -> Offset {
        match self.store().restore(partition, group_generation) {
            Ok(restore) => {
                self.metrics.state_restored(
                    &self.operator_id,
                    partition,
                    restore.seconds,
                    restore.records,
                );
                let mut moves = self.moves.lock().unwrap_or_else(|e| e.into_inner());
                // Taken away and given back before the runtime looked: the keys it still has
                // of the partition go before the restored ones come, not after.
                let mut forget_first = Vec::new();
                for m in moves.0.iter_mut() {
                    if let StateMove::Forget { groups, .. } = m {
                        if groups.contains(&(partition as u32)) {
                            groups.retain(|g| *g != partition as u32);
                            forget_first.push(partition as u32);
                        }
                    }
                }
                moves.0.push(StateMove::Restore {
                    state: restore.state,
                    forget_first,
                    groups: vec![partition as u32],
                    // Set by the reader, which knows its event time (`late_joiners`).
                    event_time: None,
                });
                moves.1.insert(partition);
                drop(moves);
                self.progress
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((partition, restore.progress));
                self.restores.fetch_add(1, Ordering::Release);
                match (restore.position, restore.from_directory) {
                    (Some(at), _) => Offset::Offset(at),
                    (None, true) => Offset::Beginning,
                    (None, false) => Offset::Invalid,
                }
            }
            Err(e) => {
                let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
                failure.get_or_insert(e.to_string());
                Offset::Invalid
            }
        }
    }

    /// Exchange partitions taken away: forgotten by the operator (after the records read from
    /// them so far), never written again by this subtask.
    pub(crate) fn revoked(&self, partitions: &[i32]) {
        if partitions.is_empty() {
            return;
        }
        let mut store = self.store();
        for p in partitions {
            store.forget(*p);
        }
        let max_parallelism = store.partitions();
        drop(store);
        let mut moves = self.moves.lock().unwrap_or_else(|e| e.into_inner());
        for p in partitions {
            moves.1.remove(p);
        }
        moves.0.push(StateMove::Forget {
            max_parallelism,
            groups: partitions.iter().map(|p| *p as u32).collect(),
        });
    }

    /// Whether partitions were restored since the reader's restore number `taken` (one
    /// atomic load).
    pub(crate) fn restored_since(&self, taken: u64) -> bool {
        self.restores.load(Ordering::Acquire) != taken
    }

    /// The highest origins and event-time states of the partitions restored since the
    /// reader's restore number `taken`, and the number now; `None` (one atomic load, no lock)
    /// when there is none.
    pub(crate) fn restored_progress(&self, taken: u64) -> Option<(u64, RestoredProgress)> {
        if !self.restored_since(taken) {
            return None;
        }
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let restores = self.restores.load(Ordering::Acquire);
        Some((restores, std::mem::take(&mut *progress)))
    }

    /// The moves since the last call.
    pub(crate) fn take_moves(&self) -> Vec<StateMove> {
        let mut moves = self.moves.lock().unwrap_or_else(|e| e.into_inner());
        if moves.0.is_empty() {
            return Vec::new();
        }
        moves.1.clear();
        std::mem::take(&mut moves.0)
    }

    /// What a commit record of each held partition would hold at a barrier that left the
    /// reader at `positions` with `progress` ([`StateStore::seed_at`]).
    pub(crate) fn seed_at(
        &self,
        positions: &BTreeMap<i32, i64>,
        progress: &BTreeMap<i32, PartitionProgress>,
    ) -> Vec<SeedPartition> {
        self.store().seed_at(positions, progress)
    }

    /// The reader hands on `moves` (taken with [`KeptState::take_moves`], their event time
    /// added) for the keyed operator's store.
    pub(crate) fn hand_on(&self, mut moves: Vec<StateMove>) {
        if moves.is_empty() {
            return;
        }
        let mut handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        handed.append(&mut moves);
        self.any_handed.store(true, Ordering::Release);
    }

    /// The moves the reader handed on since the last call: one atomic load when there are
    /// none.
    pub(crate) fn take_handed(&self) -> Vec<StateMove> {
        if !self.any_handed.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        self.any_handed.store(false, Ordering::Release);
        std::mem::take(&mut *handed)
    }

    /// Why a restore failed, if one did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// See [`StateStore::save`].
    pub(crate) fn save(&self, checkpoint: u64, state: &KeyedSnapshot) -> Result<(), BoxError> {
        let unapplied = self
            .moves
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone();
        self.store().save(checkpoint, state, &unapplied)
    }

    /// See [`StateStore::commit`]: `positions` of every partition the checkpoint covers, and
    /// the progress taken with them.
    pub(crate) fn commit(
        &self,
        checkpoint: u64,
        positions: &BTreeMap<PartitionKey, i64>,
        progress: &BTreeMap<i32, PartitionProgress>,
    ) -> Result<(), BoxError> {
        let ours: BTreeMap<i32, i64> = positions
            .iter()
            .filter(|((t, _), _)| *t == self.exchange_topic)
            .map(|((_, p), o)| (*p, *o))
            .collect();
        self.store().commit(checkpoint, &ours, progress)
    }
}

/// What a state message's headers say of it ([`MessageMeta`]).
fn message_meta<M: Message>(message: &M) -> MessageMeta {
    let mut meta = MessageMeta::default();
    if let Some(headers) = message.headers() {
        for h in headers.iter() {
            match h.key {
                HEADER_SLOTS => meta.slotted = h.value == Some(b"2".as_slice()),
                HEADER_CHECKPOINT => {
                    meta.checkpoint = h
                        .value
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|v| v.parse().ok())
                }
                _ => {}
            }
        }
    }
    meta
}

/// The generation a state message was written under, from its headers (for tools and tests).
pub fn generation_of<M: Message>(message: &M) -> Option<u64> {
    let headers = message.headers()?;
    let h = headers.iter().find(|h| h.key == HEADER_GENERATION)?;
    std::str::from_utf8(h.value?).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Vec<u8> {
        encode(&StateKey::String(k.into())).unwrap()
    }

    fn commit(generation: u64, checkpoint: u64, position: i64) -> Vec<u8> {
        encode(&CommitRecord {
            checkpoint,
            generation,
            position: Some(position),
            shared: Vec::new(),
            origins: Vec::new(),
            marks: None,
        })
        .unwrap()
    }

    /// What a reader heard on exchange partition 2: writer `w` at `watermark` (ns).
    fn heard_at(watermark: i64) -> Heard {
        let mut w = crate::watermarks::PartitionWatermarks::new();
        w.writer_watermark("x", 2, "i/w/0", watermark);
        let heard = w.heard().next().expect("heard on 2").1.clone();
        heard
    }

    #[test]
    fn a_partition_is_its_newest_committed_generation_up_to_its_last_commit() {
        let mut log = PartitionLog::default();
        let v = |g, k: &str| message_key(VALUE, g, &key(k));
        let c = |g| message_key(COMMIT, g, &[]);
        assert!(log.push(&v(1, "a"), Some(b"1")));
        assert!(log.push(&v(1, "b"), Some(b"1")));
        assert!(log.push(&c(1), Some(&commit(1, 3, 10))));
        // Generation 2 takes over: rewrites, commits, changes a, deletes b, commits.
        assert!(log.push(&v(2, "a"), Some(b"1")));
        assert!(log.push(&v(2, "b"), Some(b"1")));
        assert!(log.push(&c(2), Some(&commit(2, 3, 10))));
        assert!(log.push(&v(2, "a"), Some(b"2")));
        assert!(log.push(&v(2, "b"), None));
        assert!(log.push(&c(2), Some(&commit(2, 4, 20))));
        // Uncommitted at generation 2: ignored.
        assert!(log.push(&v(2, "a"), Some(b"3")));
        // A zombie of generation 1 writes late, commit record too: ignored.
        assert!(log.push(&v(1, "a"), Some(b"99")));
        assert!(log.push(&v(1, "z"), Some(b"99")));
        assert!(log.push(&c(1), Some(&commit(1, 9, 90))));
        // Generation 3 started rewriting but never committed: ignored.
        assert!(log.push(&v(3, "a"), Some(b"2")));
        assert!(!log.push(b"x", Some(b"?")));
        let r = log.restore().unwrap();
        assert_eq!(r.values, BTreeMap::from([(key("a"), b"2".to_vec())]));
        let commit = r.commit.unwrap();
        assert_eq!((commit.generation, commit.checkpoint), (2, 4));
        assert_eq!(commit.position, Some(20));
        assert_eq!(r.newest_generation, 3);
        // Every live message key is tombstoned once the next generation has rewritten.
        assert!(r.stale.contains(&v(1, "z")) && r.stale.contains(&c(2)));
        assert!(!r.stale.contains(&v(2, "b")));
    }

    #[test]
    fn state_committed_without_the_key_hash_is_refused() {
        let v = |g, k: &str| message_key(VALUE, g, &key(k));
        let c = |g| message_key(COMMIT, g, &[]);
        // Written by a Tidemark before the key hash was murmur2: no header.
        let mut old = PartitionLog::default();
        assert!(old.push_hashed(&v(1, "a"), Some(b"1"), false, MessageMeta::default()));
        assert!(old.push_hashed(
            &c(1),
            Some(&commit(1, 3, 10)),
            false,
            MessageMeta::default()
        ));
        let e = old.restore().unwrap_err();
        assert!(
            e.contains("key hash of an older Tidemark") && e.contains("tidemark-key-hash: murmur2"),
            "{e}"
        );
        // Values without it but never committed by it (a newer generation committed with
        // it): restored as usual.
        let mut mixed = PartitionLog::default();
        assert!(mixed.push_hashed(&v(1, "a"), Some(b"1"), false, MessageMeta::default()));
        assert!(mixed.push_hashed(&v(2, "a"), Some(b"2"), true, MessageMeta::default()));
        assert!(mixed.push_hashed(&c(2), Some(&commit(2, 3, 10)), true, MessageMeta::default()));
        let r = mixed.restore().unwrap();
        assert_eq!(r.values, BTreeMap::from([(key("a"), b"2".to_vec())]));
        // Nothing committed at all: nothing to restore, nothing refused.
        let mut uncommitted = PartitionLog::default();
        assert!(uncommitted.push_hashed(&v(1, "a"), Some(b"1"), false, MessageMeta::default()));
        assert!(uncommitted.restore().unwrap().values.is_empty());
    }

    /// One key's count in a snapshot of 4 key groups.
    #[test]
    fn two_owners_that_restored_from_the_same_log_never_mix_their_values() {
        let v = |g, k: &str| message_key(VALUE, g, &key(k));
        let c = |g| message_key(COMMIT, g, &[]);
        // Both read a log whose newest generation was an owner's given the partition in group
        // generation 3; one of them is a zombie whose assignment (group generation 4) is
        // over, the other was given the partition in group generation 5.
        let newest = owner_generation(0, 3);
        let (zombie, owner) = (owner_generation(newest, 4), owner_generation(newest, 5));
        assert!(newest < zombie && zombie < owner);
        assert_eq!(
            (group_generation_of(zombie), group_generation_of(owner)),
            (4, 5)
        );
        // Their writes interleave, the zombie's commit record last.
        let mut log = PartitionLog::default();
        assert!(log.push(&v(zombie, "a"), Some(b"1")));
        assert!(log.push(&v(owner, "a"), Some(b"2")));
        assert!(log.push(&v(zombie, "b"), Some(b"1")));
        assert!(log.push(&c(owner), Some(&commit(owner, 7, 70))));
        assert!(log.push(&c(zombie), Some(&commit(zombie, 8, 80))));
        // The owner's state alone, never a value of one with the commit record of the other
        // (as one generation shared by both would give: a = 2 and b = 1 at checkpoint 8).
        let r = log.restore().unwrap();
        assert_eq!(r.values, BTreeMap::from([(key("a"), b"2".to_vec())]));
        assert_eq!(r.commit.unwrap().checkpoint, 7);
        // The next owner writes under a newer generation than both.
        assert!(owner_generation(r.newest_generation, 6) > owner);
    }

    #[test]
    fn an_owner_is_newer_than_every_one_before_it_even_when_the_group_starts_again() {
        // The group's generations start again at 1 (the group deleted and made anew, as when
        // its offsets expire): the new owner's state is still the newer.
        let before = owner_generation(owner_generation(0, 40), 57);
        assert!(owner_generation(before, 1) > before);
        // Generations written before the group's generation was part of them (1, 2, …) are
        // older than any owner's now.
        assert!(owner_generation(7, 1) > 7);
        assert_eq!(group_generation_of(owner_generation(7, 1)), 1);
        // Outside a group (-1): counted as 0.
        assert_eq!(group_generation_of(owner_generation(0, -1)), 0);
    }

    fn snapshot_of(pairs: &[(&str, u64)]) -> KeyedSnapshot {
        let mut s = KeyedSnapshot::new(4);
        for (k, v) in pairs {
            s.put(&tidemark_runtime::Value::from(*k), v).unwrap();
        }
        s
    }

    fn counts(s: &KeyedSnapshot) -> BTreeMap<String, u64> {
        s.decoded::<u64>()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k.as_str().unwrap().to_owned(), v))
            .collect()
    }

    /// The first `n` keys `user-<i>` of key group `group` of 4: keys that live in one state
    /// partition.
    fn keys_of_group(group: u32, n: usize) -> Vec<String> {
        let groups = tidemark_runtime::key_group::KeyGroups::new(4);
        (0..200)
            .map(|i| format!("user-{i}"))
            .filter(|k| {
                groups.of(tidemark_runtime::Value::from(k.as_str()).routing_hash()) == group
            })
            .take(n)
            .collect()
    }

    /// A mock cluster with the 4-partition topic `state`, and its brokers.
    fn state_cluster() -> (crate::dev_cluster::DevCluster, Brokers) {
        use crate::dev_cluster::{DevCluster, DevClusterOptions};
        let cluster = DevCluster::start(DevClusterOptions {
            topics: vec![("state".into(), 4)],
            ..DevClusterOptions::default()
        })
        .unwrap();
        let brokers = Brokers::One(cluster.bootstrap_servers().to_owned());
        (cluster, brokers)
    }

    /// The store of topic `state` (4 partitions) written by `who`.
    fn store_at(brokers: &Brokers, who: &str) -> StateStore {
        StateStore::new(
            "state".into(),
            4,
            who.into(),
            brokers,
            &Properties::new(),
            Duration::from_secs(30),
        )
        .unwrap()
    }

    #[test]
    fn a_zombie_owners_late_writes_are_ignored_on_the_mock_cluster() {
        let (_cluster, brokers) = state_cluster();
        let store = |who: &str| store_at(&brokers, who);
        // Keys of one key group, so that they live in one partition.
        let keys = keys_of_group(2, 3);
        let (k0, k1, k2) = (keys[0].as_str(), keys[1].as_str(), keys[2].as_str());
        let none = BTreeSet::new();
        // The first owner commits checkpoint 1 at offset 100, then writes checkpoint 2 and
        // loses the partition before it completes.
        let mut old = store("old owner");
        assert!(old.restore(2, 1).unwrap().state.is_empty());
        old.save(1, &snapshot_of(&[(k0, 1), (k1, 1)]), &none)
            .unwrap();
        old.commit(1, &BTreeMap::from([(2, 100)]), &BTreeMap::new())
            .unwrap();
        old.save(2, &snapshot_of(&[(k0, 2)]), &none).unwrap();
        // The next owner restores checkpoint 1, not the uncommitted checkpoint 2.
        let mut new = store("new owner");
        let restored = new.restore(2, 2).unwrap();
        assert_eq!(restored.position, Some(100));
        assert_eq!(
            counts(&restored.state),
            BTreeMap::from([(k0.into(), 1), (k1.into(), 1)])
        );
        // The old owner, a zombie now, completes checkpoint 2 and goes on writing.
        old.commit(2, &BTreeMap::from([(2, 200)]), &BTreeMap::new())
            .unwrap();
        old.save(3, &snapshot_of(&[(k2, 9)]), &none).unwrap();
        old.commit(3, &BTreeMap::from([(2, 300)]), &BTreeMap::new())
            .unwrap();
        // The new owner commits its own checkpoint.
        new.save(7, &snapshot_of(&[(k0, 5), (k1, 1)]), &none)
            .unwrap();
        // With the highest origin its reader took from input partition in/1 up to 150.
        let origin = Origin {
            topic: tidemark_runtime::name::name_of("in"),
            partition: 1,
            offset: 55,
            seq: 2,
        };
        // And what it had heard of the writers there: one at 1,000 ns.
        let progress = |origins: Vec<Origin>, at| PartitionProgress {
            origins: Some(origins),
            marks: Some(heard_at(at)),
        };
        new.commit(
            7,
            &BTreeMap::from([(2, 150)]),
            &BTreeMap::from([(2, progress(vec![origin.clone()], 1_000))]),
        )
        .unwrap();
        old.save(8, &snapshot_of(&[(k1, 99)]), &none).unwrap();
        old.commit(
            8,
            &BTreeMap::from([(2, 900)]),
            &BTreeMap::from([(2, progress(Vec::new(), 9_000))]),
        )
        .unwrap();
        // Whoever restores next sees the new owner's state; the zombie's writes are ignored.
        let restored = store("third owner").restore(2, 3).unwrap();
        assert_eq!(restored.position, Some(150));
        assert_eq!(
            counts(&restored.state),
            BTreeMap::from([(k0.into(), 5), (k1.into(), 1)])
        );
        assert_eq!(restored.progress, progress(vec![origin.clone()], 1_000));
        // The third owner's rewrite carries them on: its successor restores them too.
        assert_eq!(
            store("third's successor").restore(2, 4).unwrap().progress,
            progress(vec![origin], 1_000)
        );
        // The other partitions are untouched.
        assert!(store("fourth owner")
            .restore(1, 5)
            .unwrap()
            .state
            .is_empty());
    }

    /// Checkpoints are numbered per instance: an owner that started later than the one it
    /// took a partition from counts lower. The keys it did not change since the restore are
    /// still its state at its next restore (a third owner's, or its own after the partition
    /// went away and came back).
    #[test]
    fn an_owner_counting_lower_checkpoints_than_its_predecessor_keeps_the_keys_it_did_not_change() {
        let (_cluster, brokers) = state_cluster();
        let store = |who: &str| store_at(&brokers, who);
        let keys = keys_of_group(2, 2);
        let (k0, k1) = (keys[0].as_str(), keys[1].as_str());
        let none = BTreeSet::new();
        // An instance that has run a while: its checkpoint 65.
        let mut old = store("old owner");
        old.restore(2, 1).unwrap();
        old.save(65, &snapshot_of(&[(k0, 1), (k1, 1)]), &none)
            .unwrap();
        old.commit(65, &BTreeMap::from([(2, 100)]), &BTreeMap::new())
            .unwrap();
        // An instance started later takes the partition and commits its checkpoint 3, in
        // which only k0 changed.
        let mut new = store("new owner");
        new.restore(2, 2).unwrap();
        new.save(3, &snapshot_of(&[(k0, 5), (k1, 1)]), &none)
            .unwrap();
        new.commit(3, &BTreeMap::from([(2, 150)]), &BTreeMap::new())
            .unwrap();
        let expected = BTreeMap::from([(k0.into(), 5), (k1.into(), 1)]);
        let restored = store("third owner").restore(2, 3).unwrap();
        assert_eq!(restored.position, Some(150));
        assert_eq!(counts(&restored.state), expected);
        // The same for the new owner itself, given the partition back.
        new.forget(2);
        assert_eq!(counts(&new.restore(2, 4).unwrap().state), expected);
    }

    #[test]
    fn a_partition_given_back_before_the_runtime_looked_is_replaced_not_forgotten() {
        let (_cluster, brokers) = state_cluster();
        let store = store_at(&brokers, "reader");
        let kept = KeptState::new(
            store,
            "exchange".into(),
            "w".into(),
            Arc::new(KafkaMetrics::default()),
        );
        let groups = tidemark_runtime::key_group::KeyGroups::new(4);
        let key = (0..100)
            .map(|i| format!("user-{i}"))
            .find(|k| groups.of(tidemark_runtime::Value::from(k.as_str()).routing_hash()) == 1)
            .unwrap();
        assert_eq!(kept.assigned(1, 1), Offset::Invalid);
        assert_eq!(kept.take_moves().len(), 1);
        kept.save(1, &snapshot_of(&[(&key, 7)])).unwrap();
        kept.commit(
            1,
            &BTreeMap::from([(("exchange".into(), 1), 40)]),
            &BTreeMap::new(),
        )
        .unwrap();
        kept.revoked(&[1, 3]);
        assert_eq!(kept.assigned(1, 1), Offset::Offset(40));
        // A barrier before the runtime applied the restore writes nothing for partition 1
        // (the operator's snapshot does not have its keys yet), and so deletes nothing.
        kept.save(2, &KeyedSnapshot::new(4)).unwrap();
        kept.commit(2, &BTreeMap::new(), &BTreeMap::new()).unwrap();
        let mut other = store_at(&brokers, "other");
        let restored = other.restore(1, 1).unwrap();
        assert_eq!(counts(&restored.state), BTreeMap::from([(key.clone(), 7)]));
        let moves = kept.take_moves();
        assert_eq!(moves.len(), 2, "{moves:?}");
        match (&moves[0], &moves[1]) {
            (StateMove::Forget { groups, .. }, StateMove::Restore { forget_first, .. }) => {
                assert_eq!(groups, &[3]);
                assert_eq!(forget_first, &[1]);
            }
            other => panic!("{other:?}"),
        }
        assert!(moves[1].before_records() && !moves[0].before_records());
        assert_eq!(kept.partitions(), 4);
        assert!(kept.failure().is_none());
    }

    /// librdkafka's mock cluster keeps at most 5 MB per partition and never compacts: once a
    /// state partition outgrows that, its oldest messages are gone, and a restore must refuse
    /// rather than give back what is left.
    #[test]
    fn a_state_partition_whose_beginning_the_broker_deleted_is_refused() {
        let (_cluster, brokers) = state_cluster();
        let store = |who: &str| store_at(&brokers, who);
        let groups = tidemark_runtime::key_group::KeyGroups::new(4);
        let keys: Vec<String> = (0..40_000)
            .map(|i| format!("a-long-user-name-to-fill-the-partition-{i}"))
            .filter(|k| groups.of(tidemark_runtime::Value::from(k.as_str()).routing_hash()) == 3)
            .collect();
        let none = BTreeSet::new();
        let mut owner = store("owner");
        assert!(owner.restore(3, 1).unwrap().state.is_empty());
        let mut checkpoint = 0u64;
        let mut written = 0usize;
        // Every key changes at every checkpoint, as in a busy window: ~10,000 messages of
        // ~100 bytes each time, until the partition holds well over 5 MB.
        while written < 8 * 1024 * 1024 {
            checkpoint += 1;
            let mut snapshot = KeyedSnapshot::new(4);
            for k in &keys {
                snapshot
                    .put(&tidemark_runtime::Value::from(k.as_str()), &checkpoint)
                    .unwrap();
                written += k.len() + 60;
            }
            owner.save(checkpoint, &snapshot, &none).unwrap();
            owner
                .commit(
                    checkpoint,
                    &BTreeMap::from([(3, checkpoint as i64)]),
                    &BTreeMap::new(),
                )
                .unwrap();
            if checkpoint == 1 {
                // Still whole: restored exactly.
                let restored = store("early reader").restore(3, 1).unwrap();
                assert_eq!(restored.state.decoded::<u64>().unwrap().len(), keys.len());
            }
        }
        let e = store("next owner").restore(3, 1).unwrap_err().to_string();
        assert!(
            e.contains("the state topic state partition 3 begins at offset")
                && e.contains("the broker deleted state messages"),
            "{e}"
        );
        // The partitions that stayed small restore as before.
        assert!(store("next owner").restore(1, 1).unwrap().state.is_empty());
    }

    #[test]
    fn a_commit_record_written_before_the_event_time_state_reads_with_none() {
        #[derive(Serialize)]
        struct Old {
            checkpoint: u64,
            generation: u64,
            position: Option<i64>,
            shared: Vec<u8>,
            origins: Vec<SavedOrigin>,
        }
        let origin = SavedOrigin::from(&Origin {
            topic: tidemark_runtime::name::name_of("in"),
            partition: 3,
            offset: 8,
            seq: 0,
        });
        let old = encode(&Old {
            checkpoint: 5,
            generation: 3,
            position: Some(30),
            shared: Vec::new(),
            origins: vec![origin.clone()],
        })
        .unwrap();
        let mut log = PartitionLog::default();
        assert!(log.push(&message_key(COMMIT, 3, &[]), Some(&old)));
        let commit = log.restore().unwrap().commit.unwrap();
        assert_eq!((commit.checkpoint, commit.position), (5, Some(30)));
        assert_eq!((commit.origins, commit.marks), (vec![origin], None));
        // The current record keeps what was heard.
        let mut current = CommitRecord::read(&old).unwrap();
        current.marks = Some(heard_at(77));
        let bytes = encode(&current).unwrap();
        assert_eq!(CommitRecord::read(&bytes).unwrap(), current);
    }

    #[test]
    fn a_commit_record_written_before_origins_reads_with_none() {
        #[derive(Serialize)]
        struct Old {
            checkpoint: u64,
            generation: u64,
            position: Option<i64>,
            shared: Vec<u8>,
        }
        let old = encode(&Old {
            checkpoint: 4,
            generation: 2,
            position: Some(20),
            shared: Vec::new(),
        })
        .unwrap();
        let mut log = PartitionLog::default();
        assert!(log.push(&message_key(VALUE, 2, &key("a")), Some(b"1")));
        assert!(log.push(&message_key(COMMIT, 2, &[]), Some(&old)));
        let r = log.restore().unwrap();
        let commit = r.commit.unwrap();
        assert_eq!((commit.checkpoint, commit.position), (4, Some(20)));
        assert!(commit.origins.is_empty());
        assert_eq!(r.values.len(), 1);
        // Anything else is still refused.
        let mut log = PartitionLog::default();
        assert!(log.push(&message_key(COMMIT, 2, &[]), Some(b"\xff\xff")));
        assert!(log.restore().is_err());
    }

    /// A written state message: message key, value (`None`: a tombstone), checkpoint.
    type Written = (Vec<u8>, Option<Vec<u8>>, u64);
    /// A written state partition.
    type Log = Vec<Written>;

    fn log_of(messages: &[Written]) -> PartitionLog {
        let mut log = PartitionLog::default();
        for (key, value, checkpoint) in messages {
            let meta = MessageMeta::written(*checkpoint);
            assert!(log.push_hashed(key, value.as_deref(), true, meta));
        }
        log
    }

    /// Kafka's compaction of `log`: the last message of each key, and the tombstones among
    /// them removed (after `delete.retention.ms`) or kept (before).
    fn compacted(log: &[Written], drop_tombstones: bool) -> Log {
        let last: HashMap<&Vec<u8>, usize> = log
            .iter()
            .enumerate()
            .map(|(i, (k, _, _))| (k, i))
            .collect();
        log.iter()
            .enumerate()
            .filter(|(i, (k, v, _))| last[k] == *i && (v.is_some() || !drop_tombstones))
            .map(|(_, m)| m.clone())
            .collect()
    }

    fn push_all(log: &mut Log, messages: Vec<Out>) {
        log.extend(messages.into_iter().map(|m| (m.key, m.value, m.checkpoint)));
    }

    /// The writer of one partition as the store drives it, against a model of the operator's
    /// keys: barriers, checkpoints completing or not, crashes at any message with a new owner
    /// restoring what the log (compacted as Kafka would, at any moment) gives. At every crash
    /// point the restore gives the state of the last checkpoint committed, never an
    /// uncommitted value and never an older one.
    #[test]
    fn compaction_at_any_moment_between_a_crash_and_the_restore_keeps_the_committed_state() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let mut random = move |n: u64| rng.random_range(0..n);
        type Keys = BTreeMap<Vec<u8>, Vec<u8>>;
        let mut log: Log = Vec::new();
        // The operator's keys now, and as they were at each checkpoint's barrier.
        let mut model: Keys = BTreeMap::new();
        let mut at_barrier: BTreeMap<u64, Keys> = BTreeMap::new();
        let mut generation = owner_generation(0, 1);
        let mut held = Held::new(generation, &BTreeMap::new());
        let mut pending: Vec<(u64, Changes)> = Vec::new();
        let mut crashes = 0;
        for checkpoint in 1..=120u64 {
            for _ in 0..random(4) {
                let k = key(&format!("k{}", random(6)));
                if random(4) == 0 {
                    model.remove(&k);
                } else {
                    model.insert(k, format!("{checkpoint}-{}", random(1000)).into_bytes());
                }
            }
            let now: HashMap<Vec<u8>, &[u8]> = model
                .iter()
                .map(|(k, v)| (k.clone(), v.as_slice()))
                .collect();
            pending.push((checkpoint, held.changes(&now)));
            at_barrier.insert(checkpoint, model.clone());
            if random(3) == 0 {
                // Declined, or not complete yet: the next completion covers it.
                continue;
            }
            let mut merged = BTreeMap::new();
            for (n, changes) in pending.drain(..) {
                for (k, v) in changes {
                    merged.insert(k, (n, v));
                }
            }
            let (before, after) = held.commit_messages(merged);
            push_all(&mut log, before);
            log.push((
                message_key(COMMIT, generation, &[]),
                Some(commit(generation, checkpoint, checkpoint as i64)),
                checkpoint,
            ));
            push_all(&mut log, after);
            if random(10) == 0 {
                // The owner dies with its last checkpoint's writes half done (or not yet
                // begun): the next owner restores from a compacted log and rewrites.
                crashes += 1;
                let (before, _) = held.commit_messages(BTreeMap::from([(
                    key("k0"),
                    (checkpoint + 1, Some(b"never committed".to_vec())),
                )]));
                push_all(&mut log, before);
                let restored = log_of(&compacted(&log, random(2) == 0)).restore().unwrap();
                assert_eq!(
                    restored.values, model,
                    "restored at checkpoint {checkpoint}"
                );
                generation = owner_generation(restored.newest_generation, 1);
                push_all(&mut log, restored.rewrite(generation, checkpoint));
                log.push((
                    message_key(COMMIT, generation, &[]),
                    Some(commit(generation, checkpoint, checkpoint as i64)),
                    checkpoint,
                ));
                for stale in &restored.stale {
                    log.push((stale.clone(), None, checkpoint));
                }
                held = Held::new(generation, &restored.values);
                pending.clear();
            }
        }
        assert!(crashes >= 3, "{crashes}");
        // A crash after any message; compaction before the restore, or none; compaction at
        // an earlier moment too, the messages after it not compacted yet.
        let mut checked = 0;
        for end in 0..=log.len() {
            let prefix = &log[..end];
            let committed = prefix
                .iter()
                .rev()
                .find(|(k, v, _)| k[0] == COMMIT && v.is_some())
                .map(|(_, _, c)| *c);
            let expected = committed
                .map(|c| at_barrier[&c].clone())
                .unwrap_or_default();
            let mut variants: Vec<(String, Log)> = vec![
                ("as written".into(), prefix.to_vec()),
                ("compacted".into(), compacted(prefix, false)),
                (
                    "compacted, tombstones removed".into(),
                    compacted(prefix, true),
                ),
            ];
            for at in (0..end).step_by((end / 5).max(1)) {
                let mut partly = compacted(&prefix[..at], true);
                partly.extend_from_slice(&prefix[at..]);
                variants.push((format!("compacted up to message {at}"), partly));
            }
            for (how, messages) in variants {
                let restored = log_of(&messages).restore().unwrap();
                assert_eq!(
                    restored.values,
                    expected,
                    "a crash after message {end} of {}, {how}: checkpoint {committed:?}",
                    log.len()
                );
                checked += 1;
            }
        }
        assert!(
            log.len() > 300 && checked > 2_000,
            "{} {checked}",
            log.len()
        );
    }

    #[test]
    fn a_value_without_its_checkpoint_is_refused_not_taken_for_checkpoint_0() {
        let v = message_key(VALUE, 3, &key("a"));
        let c = message_key(COMMIT, 3, &[]);
        let meta = MessageMeta::written(5);
        let mut log = PartitionLog::default();
        assert!(log.push_hashed(&v, Some(b"1"), true, meta));
        assert!(log.push_hashed(&c, Some(&commit(3, 5, 50)), true, meta));
        assert_eq!(
            log.restore().unwrap().values,
            BTreeMap::from([(key("a"), b"1".to_vec())])
        );
        let headless = MessageMeta {
            checkpoint: None,
            slotted: true,
        };
        assert!(log.push_hashed(
            &message_key(VALUE_OTHER, 3, &key("b")),
            Some(b"2"),
            true,
            headless
        ));
        let e = log.restore().unwrap_err();
        assert!(e.contains("has no tidemark-checkpoint header"), "{e}");
    }

    #[test]
    fn a_partition_without_a_commit_record_restores_empty() {
        let mut log = PartitionLog::default();
        log.push(&message_key(VALUE, 1, &key("a")), Some(b"1"));
        let r = log.restore().unwrap();
        assert!(r.values.is_empty() && r.commit.is_none());
        assert_eq!(r.newest_generation, 1);
        assert_eq!(
            state_topic_name("job", "per_user"),
            "tidemark-job-per_user-state"
        );
    }
}
