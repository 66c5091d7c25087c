//! The `kafka` source: the source subtasks of every instance running the job form one consumer
//! group and share the topics' partitions (cooperative rebalancing).
//!
//! ```yaml
//! sources:
//!   orders:
//!     type: kafka
//!     brokers: 127.0.0.1:9092        # "h:p,h:p" or a list
//!     topics: [orders]
//!     group: orders-job              # default: the job name
//!     start: committed               # without a commit: committed (= earliest) | earliest | latest
//!     format: json                   # json | text | avro | protobuf (docs/formats.md)
//!     schema_registry: {url: http://127.0.0.1:8081}   # avro/protobuf in the Confluent wire format
//!     schema: orders.avsc            # or plain avro/protobuf values of this schema
//!     reader_schema: orders.avsc     # avro: every schema version resolved to this one
//!     message: shop.Order            # protobuf with schema: FILE.proto
//!     key_format: string             # string (default) | json | avro | protobuf
//!     key: customer_id               # CEL over the event; default: the message key
//!     timestamp: ts                  # CEL: int ms or RFC 3339; default: the message timestamp
//!     on_error: skip                 # fail (default) | skip | {dead_letter: PATH}
//!     properties: {}                 # passed to librdkafka as they are
//! ```
//!
//! - `start` applies only to partitions without a committed offset; a partition with one
//!   resumes at it, and one that moves between subtasks of this process resumes exactly where
//!   the previous one stopped (`crate::handoff`).
//! - A subtask without partitions is idle: it returns no records, markers keep flowing, and
//!   with `watermarks` on it holds nothing back downstream.
//! - Watermarks are per partition ([`crate::watermarks`]): the subtask's is the minimum over
//!   its partitions that are not idle, so a partition behind in event time holds windows back
//!   and a quiet one (after `watermarks.idleness`) does not.
//! - Offsets: with checkpointing on, positions are committed when every sink has acknowledged
//!   the checkpoint (at least once, see `docs/kafka.md`); without it, librdkafka commits the
//!   positions of the records handed to the job every 5 s and when the source closes.
//! - Restore (checkpoints to a directory, `--restore`): each subtask records, per partition it
//!   holds, the offset after the last message it handed to the job and the highest record
//!   timestamp read there ([`KafkaSourcePosition`]). A restored job reads each partition from
//!   the checkpoint's offset, not the group's commit (which may lie past it), whichever of its
//!   subtasks the group gives it to, and the partition's watermark starts from the recorded
//!   timestamp (`crate::restored`). A partition not started at the checkpoint starts as on a
//!   fresh run. The reader of a Kafka exchange is not resumed this way (its state moves with
//!   the exchange's partitions).
//! - Stop: a subtask leaves the group only together with the group's other subtasks in this
//!   process, once every one has made its last commit (why: `kafka/src/departure.rs`).
//! - Start: the first subtask to start fetches the topics' metadata; if the brokers do not
//!   answer within `--kafka-timeout` (30 s), the job fails with the broker's own error.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use serde::{Deserialize, Serialize};
use tidemark_operators::formats::{Binary, BinaryFormat, RegistryConfig, SchemaSettings};
use tidemark_operators::on_error::{DeadLetterWriter, ErrorPolicy, OnErrorFactory};
use tidemark_operators::{ConfigError, Extract, FieldError};
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::provenance::Origin;
use tidemark_runtime::{
    state_codec, BoxError, Output, PollContext, Source, SourceErrorCounts, SourceLag, SourceStatus,
    SplitWatermarks, SubtaskContext,
};

use crate::assigned_start::{records_unread, AssignedStarts};
use crate::client::{
    client_config, topic_wait_message, wait_for_topic, BrokerWatch, Brokers, ErrorContext,
    Properties,
};
use crate::decode::{Decoder, Format, KeyFormat, Rejected};
use crate::departure::Departure;
use crate::exchange::state::PartitionProgress;
use crate::exchange::ReaderPosition;
use crate::handoff::Fence;
use crate::metrics::{Assignment as AssignState, KafkaMetrics, PartitionKey};
use crate::refused_hand_over::{passed, Next, RefusedHandOvers};
use crate::watermarks::PartitionWatermarks;

/// Where the group starts reading a partition that has no committed offset yet. A partition
/// with one always resumes there: after a restart, and when it changes hands (`docs/kafka.md`,
/// "Failover"), so a failover never reads a partition again from its beginning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// The group's committed offset, else the earliest (the same as `earliest`).
    #[default]
    Committed,
    /// Without a committed offset, the earliest.
    Earliest,
    /// Without a committed offset, the latest: only messages written from now on.
    Latest,
}

/// Settings of the `kafka` source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// Bootstrap servers.
    pub brokers: Brokers,
    /// Topics to read.
    pub topics: Vec<String>,
    /// Consumer group; default: the job name.
    #[serde(default)]
    pub group: Option<String>,
    /// Where to start.
    #[serde(default)]
    pub start: Start,
    /// The value's format.
    #[serde(default)]
    pub format: Format,
    /// A CEL expression over the event giving the key (`record.key` is the message key);
    /// default: the message key.
    #[serde(default)]
    pub key: Option<String>,
    /// A CEL expression over the event giving the timestamp: int (or double) ms since the Unix
    /// epoch, or an RFC 3339 string (`record.timestamp` is the message's, in ms); default: the
    /// message's timestamp.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// What to do with a message that is not valid for `format`.
    #[serde(default)]
    pub on_error: ErrorPolicy,
    /// The Schema Registry of `format: avro | protobuf` messages in the Confluent wire format.
    #[serde(default)]
    pub schema_registry: Option<RegistryConfig>,
    /// The schema of plain `format: avro | protobuf` values (`.avsc`, `.proto`).
    #[serde(default)]
    pub schema: Option<std::path::PathBuf>,
    /// Avro: the schema every writer schema is resolved to.
    #[serde(default)]
    pub reader_schema: Option<std::path::PathBuf>,
    /// Protobuf: the message type (`pkg.Name`).
    #[serde(default)]
    pub message: Option<String>,
    /// How the message key is read.
    #[serde(default)]
    pub key_format: KeyFormat,
    /// What to do with a message without a value (a tombstone of a compacted topic).
    #[serde(default)]
    pub tombstones: Tombstones,
    /// Passed to librdkafka as they are.
    #[serde(default)]
    pub properties: Properties,
}

/// `tombstones:` what a source does with a message without a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tombstones {
    /// Dropped and counted (`tidemark_records_dropped_total{reason="tombstone"}`).
    #[default]
    Drop,
    /// Passed on as a record whose event is null, keyed by the message key
    /// ([`tidemark_runtime::Record::tombstone`]): a compacted topic read as a table.
    Keep,
}

/// The settings' names, for the registry's "did you mean".
pub const FIELDS: &[&str] = &[
    "brokers",
    "topics",
    "group",
    "start",
    "format",
    "key",
    "timestamp",
    "on_error",
    "properties",
    "schema_registry",
    "schema",
    "reader_schema",
    "message",
    "key_format",
    "tombstones",
];

impl KafkaSourceConfig {
    /// Checks what can be checked without a broker.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.brokers.is_empty() {
            return Err(("brokers", "must name at least one host:port".into()));
        }
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(("topics", "must list at least one topic name".into()));
        }
        if matches!(&self.group, Some(g) if g.trim().is_empty()) {
            return Err(("group", "must not be empty".into()));
        }
        let binary_key = matches!(self.key_format, KeyFormat::Avro | KeyFormat::Protobuf);
        if self.format.binary().is_none() {
            for (set, name) in [
                (
                    self.schema_registry.is_some() && !binary_key,
                    "schema_registry",
                ),
                (self.schema.is_some(), "schema"),
                (self.reader_schema.is_some(), "reader_schema"),
                (self.message.is_some(), "message"),
            ] {
                if set {
                    return Err((
                        name,
                        "applies to format: avro or format: protobuf only".into(),
                    ));
                }
            }
        }
        if binary_key && self.schema_registry.is_none() {
            return Err((
                "key_format",
                "avro and protobuf keys are read in the Confluent wire format: give \
                 schema_registry: {url: …}"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Makes the relative paths of the settings (schemas, dead letter) relative to `dir`.
    pub fn resolve_paths(&mut self, dir: &std::path::Path) {
        for p in [&mut self.schema, &mut self.reader_schema]
            .into_iter()
            .flatten()
        {
            *p = dir.join(&*p);
        }
        if let ErrorPolicy::DeadLetter(p) = &mut self.on_error {
            *p = dir.join(&*p);
        }
    }
}

/// Makes the subtasks of one `kafka` source vertex. The first subtask made checks that the
/// brokers answer; the others reuse that answer.
pub struct KafkaSourceFactory {
    config: Arc<KafkaSourceConfig>,
    key: Option<Extract>,
    timestamp: Option<Extract>,
    /// `format: avro | protobuf`: the schemas of values and of keys.
    binary: Option<Arc<BinaryFormat>>,
    key_binary: Option<Arc<BinaryFormat>>,
    on_error: OnErrorFactory,
    /// The brokers answered: each topic's partition count.
    reachable: OnceLock<Result<Vec<(String, i32)>, String>>,
    metrics: Arc<KafkaMetrics>,
    kafka: Arc<crate::KafkaJob>,
    /// Commit read positions on a timer (no checkpointing).
    pub auto_commit: bool,
}

impl KafkaSourceFactory {
    /// A factory for `config` in the job `kafka` (its series, timeout, instance). Compiles the
    /// `key` and `timestamp` expressions: a bad one is a setting error located inside the
    /// expression.
    pub fn new(
        config: KafkaSourceConfig,
        kafka: &Arc<crate::KafkaJob>,
    ) -> Result<Self, ConfigError> {
        let compile = |source: &Option<String>, path: &str| {
            source
                .as_deref()
                .map(|s| Extract::compile_setting(crate::client::TYPE_NAME, path, s))
                .transpose()
        };
        let key = compile(&config.key, "key")?;
        let timestamp = compile(&config.timestamp, "timestamp")?;
        let invalid = |(path, message): (&str, String)| {
            ConfigError::invalid(crate::client::TYPE_NAME, FieldError::new(path, message))
        };
        let settings = SchemaSettings {
            registry: config.schema_registry.clone(),
            schema: config.schema.clone(),
            reader_schema: config.reader_schema.clone(),
            message: config.message.clone(),
        };
        let no_dir = std::path::Path::new("");
        let binary = config
            .format
            .binary()
            .map(|b| BinaryFormat::new(b, &settings, no_dir, kafka.timeout()).map(Arc::new))
            .transpose()
            .map_err(invalid)?;
        let key_binary = match config.key_format {
            KeyFormat::Avro | KeyFormat::Protobuf => {
                let kind = match config.key_format {
                    KeyFormat::Avro => Binary::Avro,
                    _ => Binary::Protobuf,
                };
                let settings = SchemaSettings {
                    registry: config.schema_registry.clone(),
                    ..SchemaSettings::default()
                };
                Some(Arc::new(
                    BinaryFormat::new(kind, &settings, no_dir, kafka.timeout())
                        .map_err(|(_, m)| invalid(("key_format", m)))?,
                ))
            }
            _ => None,
        };
        let on_error = OnErrorFactory::new(config.on_error.clone(), no_dir);
        Ok(KafkaSourceFactory {
            config: Arc::new(config),
            key,
            timestamp,
            binary,
            key_binary,
            on_error,
            reachable: OnceLock::new(),
            metrics: kafka.metrics().clone(),
            kafka: kafka.clone(),
            auto_commit: true,
        })
    }

    /// Makes subtask `ctx.subtask`: joins the group and subscribes.
    pub fn make(&self, ctx: &SubtaskContext) -> Result<KafkaSource, BoxError> {
        KafkaSource::new(self, ctx)
    }
}

/// The partitions a consumer holds, as rebalances change them.
#[derive(Default)]
struct Assignment {
    partitions: BTreeSet<PartitionKey>,
    /// Partitions taken away since the source last looked.
    revoked: Vec<PartitionKey>,
    /// Partitions were given since the source last looked.
    assigned: bool,
}

/// The consumer's context: keeps the broker's last error and follows rebalances.
pub struct SourceContext {
    errors: ErrorContext,
    /// Brokers and group: where partitions handed between local subtasks are kept.
    group: String,
    kafka: Arc<crate::KafkaJob>,
    assignment: Mutex<Assignment>,
    /// The first offset per partition of the messages stashed while a commit waited: the
    /// consumer's read position lies past them, though the job has not had them.
    stashed: Mutex<BTreeMap<PartitionKey, i64>>,
    /// The offset each held partition was assigned at, where the source chose it (handed over
    /// in this process or restored from a checkpoint): its position until a record is taken.
    starts: Mutex<BTreeMap<PartitionKey, i64>>,
    /// Partitions handed over in this process, assigned at the position the local subtask
    /// that gave them up left and paused until the group's commit is read: another instance
    /// may have held them since and committed further (`crate::assigned_start`).
    unverified: Mutex<BTreeMap<PartitionKey, i64>>,
    /// Partitions handed over in this process whose previous owner has not released them yet
    /// (`crate::handoff`, its fence): they stay paused until it has, and since when they wait.
    fenced: Mutex<BTreeMap<PartitionKey, (Fence, std::time::Instant)>>,
    /// The fences of the partitions this subtask handed over in this process, released once
    /// its exchange writers have delivered what it handed to the job
    /// ([`KafkaSource::release_hand_overs`]).
    left: Mutex<Vec<Fence>>,
    /// Partitions the source dropped messages of (fetched before their pause took hold): the
    /// consumer's read position of them is past records the job never had, until the source
    /// takes one of their messages again.
    dropped: Mutex<BTreeSet<PartitionKey>>,
    rebalances: AtomicU64,
    /// Positions are committed by librdkafka's timer, on revocation and on close (no
    /// checkpointing), rather than when checkpoints complete.
    auto_commit: AtomicBool,
    /// The source is closing: it has stored and committed its positions itself, and the
    /// consumer's read position may lie past them (messages polled while leaving are dropped).
    closing: AtomicBool,
    /// The reader of an exchange whose keyed vertex keeps its state per partition
    /// ([`crate::exchange::state`]): set before the first poll.
    pub(crate) state: std::sync::OnceLock<Arc<crate::exchange::state::KeptState>>,
    /// The source's id, for `tidemark_kafka_commits_total`, counted as the broker confirms.
    source_id: String,
    /// The source's subtask, for warnings.
    subtask: usize,
    /// The source's newest commit ([`KafkaSource::commit`]): its offsets, then the broker's
    /// answer once a poll has delivered it (answers to older commits are not kept).
    awaited: Mutex<Option<AwaitedCommit>>,
    /// Hand-over commits the group refused in revocations since the source last looked, with
    /// the refusal: made again by the source's polls ([`crate::refused_hand_over`]).
    refused_hand_overs: Mutex<(BTreeMap<PartitionKey, i64>, String)>,
}

/// A commit issued without blocking, and the broker's answer to it.
struct AwaitedCommit {
    offsets: Vec<(PartitionKey, i64)>,
    answer: Option<Result<(), KafkaError>>,
}

/// `(topic, partition) → offset` of a list, in its order.
fn offsets_of(tpl: &TopicPartitionList) -> Vec<(PartitionKey, i64)> {
    tpl.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((e.topic().to_owned(), e.partition()), o)),
            _ => None,
        })
        .collect()
}

impl SourceContext {
    /// The partitions whose read position is not the job's (`SourceContext::dropped`).
    fn dropped_keys(&self) -> BTreeSet<PartitionKey> {
        self.dropped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The partitions paused until their start is verified.
    fn unverified_keys(&self) -> Vec<PartitionKey> {
        self.unverified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// `commit` is the newest commit (or none is followed).
    fn await_commit(&self, commit: Option<AwaitedCommit>) {
        *self.awaited.lock().unwrap_or_else(|e| e.into_inner()) = commit;
    }

    /// The broker's answer to the newest commit, once it has come (taken).
    fn take_answer(&self) -> Option<Result<(), KafkaError>> {
        self.awaited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(|a| a.answer.take())
    }

    /// The hand-overs refused since the source last looked, and the last refusal.
    fn refused_hand_overs(
        &self,
    ) -> std::sync::MutexGuard<'_, (BTreeMap<PartitionKey, i64>, String)> {
        self.refused_hand_overs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The kept state of `keys` is forgotten ([`crate::exchange::state`]).
    fn state_revoked(&self, keys: &[PartitionKey]) {
        if let Some(kept) = self.state.get() {
            let ours: Vec<i32> = keys
                .iter()
                .filter(|k| k.0 == kept.exchange_topic)
                .map(|k| k.1)
                .collect();
            kept.revoked(&ours);
        }
    }

    /// Leaves the position of each of `keys` for the next owner in this process: the offset
    /// after the last message handed to the job (the first one stashed, if any was).
    fn hand_over(&self, consumer: &BaseConsumer<Self>, keys: &[PartitionKey]) {
        let read = consumer.position().ok();
        let stashed = self.stashed.lock().unwrap_or_else(|e| e.into_inner());
        let starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
        let unverified = self.unverified.lock().unwrap_or_else(|e| e.into_inner());
        let dropped = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            // Still paused: nothing was taken from it (what the consumer polled was dropped).
            let at = unverified
                .get(key)
                .or_else(|| stashed.get(key))
                .copied()
                .or_else(|| {
                    if dropped.contains(key) {
                        return None;
                    }
                    match read.as_ref()?.find_partition(&key.0, key.1)?.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    }
                })
                // Nothing taken since it was assigned at an offset the source chose (handed
                // over, or restored from a checkpoint): that offset.
                .or_else(|| starts.get(key).copied());
            if let Some(at) = at {
                // Still waiting for the owner before (nothing read from it here): the next
                // owner waits for that one's fence too.
                let fence = match fenced.remove(key) {
                    Some((fence, _)) if !fence.released() => fence,
                    _ => {
                        let fence = Fence::default();
                        left.push(fence.clone());
                        fence
                    }
                };
                self.kafka.handoff.leave(&self.group, key, at, fence);
            }
        }
    }
}

/// The group's committed offsets of `keys` (none where it has none), or why the coordinator
/// did not answer within `timeout`.
fn group_commits(
    consumer: &BaseConsumer<SourceContext>,
    keys: &[(PartitionKey, i64)],
    timeout: Duration,
) -> Result<BTreeMap<PartitionKey, i64>, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), _) in keys {
        tpl.add_partition(topic, *partition);
    }
    let committed = consumer.committed_offsets(tpl, timeout)?;
    Ok(offsets_of(&committed).into_iter().collect())
}

impl rdkafka::client::ClientContext for SourceContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.errors.log(level, fac, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.error(error, reason)
    }
}

impl ConsumerContext for SourceContext {
    /// Every commit's answer (ours, issued without blocking, and librdkafka's timer's), served
    /// by a poll: counted when the broker took it, and handed to a source waiting for it.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &TopicPartitionList,
    ) {
        if result.is_ok() {
            self.kafka.metrics().count_commit(&self.source_id);
        }
        let mut awaited = self.awaited.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = awaited.as_mut().filter(|a| a.answer.is_none()) {
            if offsets_of(offsets) == a.offsets {
                a.answer = Some(result);
            }
        }
    }

    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        self.rebalances.fetch_add(1, Ordering::Relaxed);
        let keys: Vec<PartitionKey> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        tracing::debug!(
            source = %self.source_id,
            subtask = self.subtask,
            event = ?err,
            partitions = ?keys,
            "rebalance"
        );
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            rdkafka::consumer::RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let metrics = self.kafka.metrics();
                if let Some(kept) = self.state.get() {
                    if keys.iter().any(|k| k.0 == kept.exchange_topic) {
                        metrics.set_assignment(
                            &self.source_id,
                            self.subtask,
                            AssignState::Restoring,
                        );
                    }
                }
                // `start` is librdkafka's `auto.offset.reset`: it applies only where the group
                // has no committed offset. A partition another subtask of this process held
                // resumes where that one stopped, or at the commit if it lies further: it is
                // assigned there paused, and the source moves it to the commit if need be once
                // the coordinator has answered (it answers only after the rebalance).
                let mut unverified = self.unverified.lock().unwrap_or_else(|e| e.into_inner());
                let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
                for key in &keys {
                    if let Some((offset, fence)) = self.kafka.handoff.take(&self.group, key) {
                        let _ = tpl.set_partition_offset(&key.0, key.1, Offset::Offset(offset));
                        // A restored partition's commit may be from after the checkpoint.
                        if !self.kafka.restored.was_restored(&self.group, key) {
                            unverified.insert(key.clone(), offset);
                            fenced.insert(key.clone(), (fence, std::time::Instant::now()));
                        }
                    }
                }
                drop(fenced);
                // Restored from a checkpoint directory: the checkpoint's offset, whatever the
                // group committed since (`crate::restored`).
                for key in &keys {
                    if let Some(at) = self.kafka.restored.take_offset(&self.group, key) {
                        let _ = tpl.set_partition_offset(&key.0, key.1, Offset::Offset(at));
                    }
                }
                // State kept per partition: restored before anything is read, then read from
                // its commit record's position (else the group's commit, never a local
                // hand-over: the restored state is the commit record's).
                if let Some(kept) = self.state.get() {
                    let generation = group_generation(consumer);
                    for key in keys.iter().filter(|k| k.0 == kept.exchange_topic) {
                        let at = kept.assigned(key.1, generation);
                        let _ = tpl.set_partition_offset(&key.0, key.1, at);
                        unverified.remove(key);
                        (self.fenced.lock().unwrap_or_else(|e| e.into_inner())).remove(key);
                    }
                }
                let mut paused = TopicPartitionList::new();
                for key in keys.iter().filter(|k| unverified.contains_key(*k)) {
                    paused.add_partition(&key.0, key.1);
                }
                drop(unverified);
                let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
                for e in tpl.elements() {
                    if let Offset::Offset(at) = e.offset() {
                        starts.insert((e.topic().to_owned(), e.partition()), at);
                    }
                }
                drop(starts);
                let mut a = self.assignment.lock().unwrap_or_else(|e| e.into_inner());
                for key in keys {
                    a.partitions.insert(key);
                }
                a.assigned = true;
                drop(a);
                metrics.set_assignment(&self.source_id, self.subtask, AssignState::Assigned);
                let _ = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                // Should the pause fail, what the consumer returns of them is dropped all the
                // same (`KafkaSource::take`) and read again from the verified start.
                if paused.count() > 0 {
                    if let Err(e) = consumer.pause(&paused) {
                        tracing::debug!(source = %self.source_id, "pausing handed-over partitions: {e}");
                    }
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Leave the read positions for the next owner in this process (not while
                // closing: the whole process leaves, and messages polled meanwhile are dropped).
                if !self.closing.load(Ordering::Relaxed) {
                    self.hand_over(consumer, &keys);
                }
                let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
                let mut unverified = self.unverified.lock().unwrap_or_else(|e| e.into_inner());
                let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
                for key in &keys {
                    starts.remove(key);
                    unverified.remove(key);
                    fenced.remove(key);
                }
                drop((starts, unverified, fenced));
                self.state_revoked(&keys);
                if self.auto_commit.load(Ordering::Relaxed) {
                    // Hand over at the position reached, so the next owner does not repeat it.
                    // The source stores its positions once per poll, and this callback runs
                    // inside a poll, after the records taken so far in it: those are exactly
                    // the messages the consumer returned, so its read positions are stored
                    // first (not while closing: the source stored its own, and messages
                    // polled while leaving are dropped).
                    let closing = self.closing.load(Ordering::Relaxed);
                    let handing = if closing {
                        Vec::new()
                    } else {
                        store_read_positions(consumer);
                        read_positions(consumer, &keys)
                    };
                    match consumer.commit_consumer_state(CommitMode::Sync) {
                        // Nothing stored to commit: no record taken since the last commit.
                        Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                        // Refused (the group joining again, the assignment lost): made again
                        // by the source's polls once the group takes it.
                        Err(e) if !closing => {
                            let mut refused = self.refused_hand_overs();
                            refused.0.extend(handing);
                            refused.1 = e.to_string();
                        }
                        Err(e) => {
                            let partitions: Vec<String> =
                                keys.iter().map(|(t, p)| format!("{t}/{p}")).collect();
                            tracing::warn!(
                                "kafka source \"{}\" subtask {}: the \
                                 commit handing over {} on their revocation while closing was \
                                 not made ({e}); their next owner reads from the group's last \
                                 commit",
                                self.source_id,
                                self.subtask,
                                partitions.join(", ")
                            );
                        }
                    }
                }
                let mut dropped = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
                for key in &keys {
                    dropped.remove(key);
                }
                drop(dropped);
                let mut a = self.assignment.lock().unwrap_or_else(|e| e.into_inner());
                // Nothing left to read: waiting for the group to assign again (not while
                // closing: the process leaves).
                let emptied = !cooperative || keys.len() >= a.partitions.len();
                if emptied && !self.closing.load(Ordering::Relaxed) {
                    (self.kafka.metrics()).set_assignment(
                        &self.source_id,
                        self.subtask,
                        AssignState::Rebalancing,
                    );
                }
                if cooperative {
                    for key in &keys {
                        a.partitions.remove(key);
                    }
                    a.revoked.extend(keys);
                    drop(a);
                    let _ = consumer.incremental_unassign(tpl);
                } else {
                    let all: Vec<_> = std::mem::take(&mut a.partitions).into_iter().collect();
                    a.revoked.extend(all);
                    drop(a);
                    let _ = consumer.unassign();
                }
            }
            _ => {
                // A failed rebalance: give up what we hold; the group will assign again.
                if !self.closing.load(Ordering::Relaxed) {
                    (self.kafka.metrics()).set_assignment(
                        &self.source_id,
                        self.subtask,
                        AssignState::Rebalancing,
                    );
                }
                let mut a = self.assignment.lock().unwrap_or_else(|e| e.into_inner());
                let all: Vec<_> = std::mem::take(&mut a.partitions).into_iter().collect();
                self.state_revoked(&all);
                a.revoked.extend(all);
                drop(a);
                let _ = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
            }
        }
    }
}

/// One subtask of the `kafka` source.
pub struct KafkaSource {
    /// Shared only so a poll can borrow messages from it while the source updates itself.
    /// Dropped by hand in `Drop`: on a thread of its own, waited for at most `--kafka-timeout`.
    consumer: ManuallyDrop<Arc<BaseConsumer<SourceContext>>>,
    /// Messages that arrived while a commit waited for a rebalance to end.
    stash: std::collections::VecDeque<rdkafka::message::OwnedMessage>,
    decoder: Decoder,
    on_error: ErrorPolicy,
    /// `on_error: {dead_letter: PATH}`: this subtask's writer of the file.
    dead_letter: Option<DeadLetterWriter>,
    source_id: String,
    subtask: usize,
    metrics: Arc<KafkaMetrics>,
    auto_commit: bool,
    /// Next offset to read per partition (last record handed to the job + 1).
    positions: BTreeMap<PartitionKey, i64>,
    /// Positions moved since they were last stored for librdkafka's commit timer (once per
    /// poll, not per message: each store takes locks in librdkafka).
    unstored: bool,
    malformed: u64,
    /// Keep messages without a value as tombstones ([`Tombstones::Keep`]); else count them.
    keep_tombstones: bool,
    /// Messages without a value dropped.
    tombstones: u64,
    last_timestamp: Option<i64>,
    last_lag_at: i64,
    lag: SourceLag,
    /// Partitions with messages not read yet at the last lag reading (or whose end is not
    /// known yet): they are not caught up, so never idle.
    behind: BTreeSet<PartitionKey>,
    /// Partitions assigned and not read from yet: where they start and end, asked of the
    /// brokers (until answered, behind).
    unread: AssignedStarts,
    /// Partitions handed over in this process and paused until the group's commit is read
    /// (`SourceContext::unverified`): what the consumer still returns of them is dropped.
    paused: Vec<PartitionKey>,
    /// This subtask's copy of `SourceContext::dropped`.
    dropped: Vec<PartitionKey>,
    /// Verified starts of paused partitions whose seek failed: tried again.
    seeks: BTreeMap<PartitionKey, i64>,
    /// Partitions a seek failure was reported for (once each).
    seek_failed: Vec<PartitionKey>,
    /// Exchange partitions that joined behind this subtask's event time.
    late_joiners: crate::exchange::late_joiners::LateJoiners,
    /// Checkpoint number → the positions it covers.
    pending_checkpoints: BTreeMap<u64, BTreeMap<PartitionKey, i64>>,
    /// The positions of the newest checkpoint committed without waiting, until the broker
    /// confirms them: made again when refused, and waited for when the source is dropped.
    unconfirmed: Option<BTreeMap<PartitionKey, i64>>,
    /// When to make the refused commit of `unconfirmed` again.
    retry_commit_at: Option<std::time::Instant>,
    /// Hand-over commits the group refused, made again (no checkpointing).
    hand_overs: RefusedHandOvers,
    /// The thread reading the group's commits for the hand-over attempt under way.
    commits_read: Option<std::thread::JoinHandle<Result<BTreeMap<PartitionKey, i64>, String>>>,
    /// The reader of an exchange keeping state: checkpoint number → what it has of each
    /// exchange partition besides its keys (highest origins, event-time state), taken with
    /// the positions ([`crate::exchange::state`]).
    pending_progress: BTreeMap<u64, BTreeMap<i32, PartitionProgress>>,
    /// Each partition's watermark (`crate::watermarks`).
    watermarks: PartitionWatermarks,
    /// Fails the job when the brokers are gone for longer than `--kafka-timeout`.
    watch: BrokerWatch,
    config: Arc<KafkaSourceConfig>,
    /// Set when this subtask is the reader of a Kafka exchange ([`crate::exchange`]).
    pub(crate) relay: Option<crate::exchange::Relay>,
    /// This subtask's place among the group's members in this process, which leave together.
    departure: Departure,
    /// The consumer group's id.
    group_id: String,
    /// `--kafka-timeout`.
    timeout: Duration,
    /// Each topic's partition count (for the reports of [`crate::input_report`]).
    partition_counts: Vec<(String, i32)>,
    /// This thread's task was told it has a `kafka` source at its head.
    announced: bool,
    /// Since when the subtask waits for its consumer group's first assignment (`None` once
    /// the group has made one, or after `--kafka-timeout`): until then, having no partition
    /// holds event time back instead of being idle
    /// ([`SplitWatermarks::await_splits`](tidemark_runtime::event_time::SplitWatermarks::await_splits)).
    /// At a start or a restore the subtasks of the job are given their partitions one after
    /// another; one given its partitions late would otherwise find event time moved past its
    /// first records (late) and, in a table join's right input, have let left records join an
    /// empty table.
    awaiting_assignment: Option<std::time::Instant>,
    /// The topics' names, interned once: each record's origin names its topic without a
    /// reference count or a look-up in the process's table.
    topic_names: Vec<Name>,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("source_id", &self.source_id)
            .field("subtask", &self.subtask)
            .finish()
    }
}

/// The source's default `session.timeout.ms` (Kafka's default before 3.0; `properties` may
/// override it).
pub const SESSION_TIMEOUT_MS: &str = "10000";

/// How often the lag is read from librdkafka's cached high watermarks.
const LAG_EVERY_NANOS: i64 = 100_000_000;

impl KafkaSource {
    fn new(factory: &KafkaSourceFactory, ctx: &SubtaskContext) -> Result<Self, BoxError> {
        let config = &*factory.config;
        let group = config.group.clone().unwrap_or_else(|| ctx.job_name.clone());
        let mut client = client_config(&config.brokers, &Properties::new());
        client
            .set("group.id", &group)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("enable.partition.eof", "false")
            // Only for partitions the group has no committed offset for.
            .set(
                "auto.offset.reset",
                match config.start {
                    Start::Latest => "latest",
                    Start::Committed | Start::Earliest => "earliest",
                },
            )
            .set(
                "enable.auto.commit",
                if factory.auto_commit { "true" } else { "false" },
            )
            .set("enable.auto.offset.store", "false")
            // A dead instance's partitions move after 10 s rather than librdkafka's 45 s; on
            // the mock cluster every rebalance also waits this long less 1 s (docs/kafka.md,
            // "Group membership").
            .set("session.timeout.ms", SESSION_TIMEOUT_MS)
            .set(
                "client.id",
                format!(
                    "tidemark-{}-{}-{}",
                    ctx.job_name, ctx.vertex_id, ctx.subtask
                ),
            );
        for (k, v) in &config.properties {
            client.set(k, v.as_text());
        }
        // The stall watchdog's view of the group (`crate::group_watch`): a client of the same
        // brokers, properties and group id that never joins the group.
        let mut watch = client_config(&config.brokers, &Properties::new());
        for (k, v) in &config.properties {
            watch.set(k, v.as_text());
        }
        watch
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set(
                "client.id",
                format!("tidemark-{}-{}-watch", ctx.job_name, ctx.vertex_id),
            );
        factory.kafka.watch_group(
            &ctx.vertex_id,
            crate::job::WatchedGroup {
                topics: config.topics.clone(),
                client: watch,
                from_earliest: !matches!(config.start, Start::Latest),
            },
        );
        let context = SourceContext {
            errors: ErrorContext::default(),
            group: format!("{}|{group}", config.brokers.to_bootstrap()),
            kafka: factory.kafka.clone(),
            assignment: Mutex::new(Assignment::default()),
            stashed: Mutex::new(BTreeMap::new()),
            starts: Mutex::new(BTreeMap::new()),
            unverified: Mutex::new(BTreeMap::new()),
            fenced: Mutex::new(BTreeMap::new()),
            left: Mutex::new(Vec::new()),
            dropped: Mutex::new(BTreeSet::new()),
            rebalances: AtomicU64::new(0),
            auto_commit: AtomicBool::new(factory.auto_commit),
            closing: AtomicBool::new(false),
            state: std::sync::OnceLock::new(),
            source_id: ctx.vertex_id.clone(),
            subtask: ctx.subtask,
            awaited: Mutex::new(None),
            refused_hand_overs: Mutex::new((BTreeMap::new(), String::new())),
        };
        let what = format!("kafka source \"{}\"", ctx.vertex_id);
        let consumer: BaseConsumer<SourceContext> = client
            .create_with_context(context)
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        let timeout = factory.kafka.timeout();
        let reachable = factory.reachable.get_or_init(|| {
            // A registry that does not answer fails the start (after --kafka-timeout).
            if let Some(registry) = factory
                .binary
                .iter()
                .chain(&factory.key_binary)
                .find_map(|b| b.registry())
            {
                registry.check().map_err(|e| format!("{what}: {e}"))?;
            }
            let mut counts = Vec::new();
            for topic in &config.topics {
                let waited = wait_for_topic(consumer.client(), topic, timeout, || {
                    let _ = consumer.poll(Duration::ZERO);
                });
                if let Err(wait) = waited {
                    let errors = &consumer.context().errors;
                    return Err(topic_wait_message(
                        &what,
                        &config.brokers,
                        topic,
                        timeout,
                        &wait,
                        errors,
                        false,
                    ));
                }
                let count = consumer
                    .client()
                    .fetch_metadata(Some(topic), timeout)
                    .ok()
                    .and_then(|m| {
                        let t = m.topics().iter().find(|t| t.name() == topic)?;
                        Some(t.partitions().len() as i32)
                    })
                    .unwrap_or(0);
                counts.push((topic.clone(), count));
            }
            Ok(counts)
        });
        let partition_counts = reachable.clone()?;
        let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| format!("{what}: cannot subscribe to {topics:?}: {e}"))?;
        (factory.kafka.metrics()).set_assignment(&ctx.vertex_id, ctx.subtask, AssignState::Waiting);
        Ok(KafkaSource {
            consumer: ManuallyDrop::new(Arc::new(consumer)),
            stash: std::collections::VecDeque::new(),
            decoder: {
                let d = Decoder::new(
                    config.format,
                    factory.key.clone(),
                    factory.timestamp.clone(),
                )
                .with_key_format(
                    config.key_format,
                    factory.key_binary.as_ref().map(|b| b.decoder()),
                );
                match &factory.binary {
                    Some(b) => d.with_binary(b.decoder()),
                    None => d,
                }
            },
            on_error: config.on_error.clone(),
            dead_letter: factory.on_error.dead_letter()?,
            source_id: ctx.vertex_id.clone(),
            subtask: ctx.subtask,
            metrics: factory.metrics.clone(),
            auto_commit: factory.auto_commit,
            positions: BTreeMap::new(),
            unstored: false,
            malformed: 0,
            keep_tombstones: config.tombstones == Tombstones::Keep,
            tombstones: 0,
            last_timestamp: None,
            last_lag_at: i64::MIN,
            behind: BTreeSet::new(),
            unread: AssignedStarts::new(
                config.start != Start::Latest,
                GROUP_COMMITS_WITHIN.min(timeout),
            ),
            paused: Vec::new(),
            dropped: Vec::new(),
            seeks: BTreeMap::new(),
            seek_failed: Vec::new(),
            late_joiners: Default::default(),
            lag: SourceLag {
                records: 0,
                bytes: -1,
            },
            pending_checkpoints: BTreeMap::new(),
            unconfirmed: None,
            retry_commit_at: None,
            hand_overs: RefusedHandOvers::default(),
            commits_read: None,
            pending_progress: BTreeMap::new(),
            watermarks: {
                // Its partitions come with the group's first assignment: until then it holds
                // event time back rather than being idle.
                let mut w = PartitionWatermarks::new();
                w.tracker().await_splits(true);
                w
            },
            awaiting_assignment: Some(std::time::Instant::now()),
            watch: BrokerWatch::new(timeout),
            timeout,
            config: factory.config.clone(),
            relay: None,
            departure: Departure::join(
                &factory.kafka.departures,
                &config.brokers.to_bootstrap(),
                &group,
            ),
            group_id: group,
            partition_counts,
            announced: false,
            topic_names: config.topics.iter().map(|t| name_of(t)).collect(),
        })
    }

    /// The brokers were reported gone: records read since say they are back; else ask them,
    /// and fail once they have been gone for longer than `--kafka-timeout`.
    fn check_brokers(&mut self, emitted: usize) -> Result<(), BoxError> {
        if emitted > 0 {
            self.watch.ok();
            return Ok(());
        }
        let (consumer, topics) = (&self.consumer, &self.config.topics);
        self.watch
            .check(std::time::Instant::now(), || {
                let errors = &consumer.context().errors;
                crate::client::probe_topics(
                    consumer.client(),
                    topics,
                    Duration::from_millis(500),
                    errors,
                )
            })
            .map_err(|lost| {
                let what = format!("kafka source \"{}\"", self.source_id);
                lost.message(&what, &self.config.brokers).into()
            })
    }

    fn assigned_now(&self, key: &PartitionKey) -> bool {
        self.consumer
            .context()
            .assignment
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .partitions
            .contains(key)
    }

    /// The partitions this subtask holds now.
    pub fn assigned(&self) -> Vec<PartitionKey> {
        self.consumer
            .context()
            .assignment
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .partitions
            .iter()
            .cloned()
            .collect()
    }

    /// How many rebalances this subtask's consumer has seen.
    pub fn rebalances(&self) -> u64 {
        self.consumer.context().rebalances.load(Ordering::Relaxed)
    }

    fn forget_revoked(&mut self) {
        let assignment = &self.consumer.context().assignment;
        let (revoked, held) = match assignment.lock().unwrap_or_else(|e| e.into_inner()) {
            mut a if !a.revoked.is_empty() || a.assigned => {
                a.assigned = false;
                (std::mem::take(&mut a.revoked), a.partitions.clone())
            }
            _ => return,
        };
        self.watermarks.follow(&held, &revoked);
        // A partition restored from a checkpoint directory starts from its recorded event time.
        let (kafka, group) = (
            &self.consumer.context().kafka,
            &self.consumer.context().group,
        );
        for key in &held {
            if let Some(ts) = kafka.restored.take_timestamp(group, key) {
                self.watermarks.observe(&key.0, key.1, ts);
            }
        }
        // Assigned (again) and not read from: how much it holds is asked anew (after the
        // revocations below, which forget a position the partition had before).
        let assigned: Vec<PartitionKey> = held
            .iter()
            .filter(|key| revoked.contains(*key) || !self.positions.contains_key(*key))
            .filter(|key| revoked.contains(*key) || !self.unread.contains(key))
            .cloned()
            .collect();
        for key in &revoked {
            self.positions.remove(key);
            if let Some(unconfirmed) = self.unconfirmed.as_mut() {
                unconfirmed.remove(key);
            }
            if self.unconfirmed.as_ref().is_some_and(BTreeMap::is_empty) {
                self.unconfirmed = None;
            }
            for snapshot in self.pending_checkpoints.values_mut() {
                snapshot.remove(key);
            }
            self.metrics.remove_partition(&self.source_id, key);
            self.unread.revoked(key);
            // The progress checkpoints taken before the revocation recorded there is the old
            // holding's: a commit record of the partition given back meanwhile carries the
            // restore's position, and with the old holding's origins beside it the next
            // restore would drop the records in between as replays.
            for progress in self.pending_progress.values_mut() {
                progress.remove(&key.1);
            }
            // Given back meanwhile: the restore's origins replace the old ones instead.
            if let Some(relay) = self.relay.as_mut().filter(|_| !held.contains(key)) {
                relay.forget(key.1);
            }
        }
        for key in &assigned {
            self.unread.assigned(key);
        }
        self.paused = self.consumer.context().unverified_keys();
        self.dropped = self.consumer.context().dropped_keys().into_iter().collect();
    }

    fn update_lag(&mut self, now: i64) {
        let assigned = self.assigned();
        let mut total = 0i64;
        // Not heard from the broker yet, or no longer held: behind until known otherwise.
        self.behind.retain(|key| assigned.contains(key));
        self.verify_starts();
        for key in &assigned {
            let Some(cached) = cached_high_watermark(&self.consumer, key) else {
                self.behind.insert(key.clone());
                continue;
            };
            // Read from: its position; else where its reading starts, once the brokers said
            // (the cached end may be from when this consumer held it before).
            let position = self.positions.get(key).copied();
            if position.is_some() {
                self.unread.read(key);
            }
            let Some(lag) = records_unread(position, self.unread.get(key), cached) else {
                self.behind.insert(key.clone());
                continue;
            };
            if lag > 0 {
                self.behind.insert(key.clone());
            } else {
                self.behind.remove(key);
            }
            total += lag;
            self.metrics.set_partition_lag(&self.source_id, key, lag);
        }
        for (key, status) in self.watermarks.statuses() {
            let lag = now.saturating_sub(status.watermark) as f64 / 1e9;
            self.metrics
                .set_partition_watermark(&self.source_id, key, lag, status.idle);
        }
        self.lag = SourceLag {
            records: total,
            bytes: -1,
        };
        let seconds = match self.last_timestamp {
            Some(ts) if total > 0 => (now - ts).max(0) as f64 / 1e9,
            _ => 0.0,
        };
        self.metrics
            .set_subtask_lag(&self.source_id, self.subtask, total, seconds);
    }

    /// Looks up where partitions just assigned start; moves each partition handed over in this
    /// process to its start once known (the group's commit where it lies further than the
    /// local hand-over) and resumes it.
    fn verify_starts(&mut self) {
        let context = self.consumer.context();
        let chosen = context
            .starts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let verify = context
            .unverified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let answered =
            self.unread
                .poll(&self.consumer, &chosen, &verify, std::time::Instant::now());
        // Verified starts to move to, with those a seek failed for before (tried again every
        // lag turn; the partition stays paused meanwhile).
        let mut seeks = std::mem::take(&mut self.seeks);
        for (key, start) in answered {
            if verify.contains_key(&key) {
                seeks.insert(key, start);
            }
        }
        for (key, start) in seeks {
            // Revoked meanwhile: nothing to resume.
            if !(context.unverified.lock().unwrap_or_else(|e| e.into_inner())).contains_key(&key) {
                continue;
            }
            // The previous owner in this process has not released it yet: its exchange writer
            // may still hold records of the partition that must go out before ours
            // (`crate::handoff`). Tried again at the next lag turn.
            let waiting = (context.fenced.lock().unwrap_or_else(|e| e.into_inner()))
                .get(&key)
                .filter(|(fence, _)| !fence.released())
                .map(|(_, since)| since.elapsed());
            match waiting {
                Some(waited) if waited < self.timeout => {
                    self.seeks.insert(key, start);
                    continue;
                }
                Some(waited) => tracing::warn!(
                    "kafka source \"{}\" subtask {}: the subtask of this process that held \
                     {}/{} before has not said within {:.1} s that its exchange writer \
                     delivered the records it read there; reading on (the reader behind the \
                     exchange may drop some of them as replays)",
                    self.source_id,
                    self.subtask,
                    key.0,
                    key.1,
                    waited.as_secs_f64()
                ),
                None => {}
            }
            (context.fenced.lock().unwrap_or_else(|e| e.into_inner())).remove(&key);
            let mut tpl = TopicPartitionList::new();
            let _ = tpl.add_partition_offset(&key.0, key.1, Offset::Offset(start));
            // What was fetched from the hand-over position is dropped; reading starts again
            // at `start`. Resumed only once the seek is taken: resumed where the consumer
            // stands, it would skip what was dropped.
            let sought = match self.consumer.seek_partitions(tpl.clone(), Duration::ZERO) {
                // Without waiting, librdkafka answers "in progress": the seek is under way.
                Ok(answer) => match answer.elements().first().map(|e| e.error()) {
                    Some(Err(KafkaError::OffsetFetch(RDKafkaErrorCode::InProgress))) => Ok(()),
                    Some(Err(e)) => Err(e.to_string()),
                    _ => Ok(()),
                },
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = sought {
                if !self.seek_failed.contains(&key) {
                    tracing::warn!(
                        "kafka source \"{}\" subtask {}: cannot move {}/{} to {start} yet ({e}); \
                         it stays paused and is tried again",
                        self.source_id,
                        self.subtask,
                        key.0,
                        key.1
                    );
                    self.seek_failed.push(key.clone());
                }
                self.seeks.insert(key, start);
                continue;
            }
            self.seek_failed.retain(|k| *k != key);
            (context.unverified.lock().unwrap_or_else(|e| e.into_inner())).remove(&key);
            context
                .starts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), start);
            if let Err(e) = self.consumer.resume(&tpl) {
                tracing::warn!(
                    "kafka source \"{}\" subtask {}: cannot resume {}/{}: {e}",
                    self.source_id,
                    self.subtask,
                    key.0,
                    key.1
                );
            }
            tracing::debug!(
                source = %self.source_id,
                subtask = self.subtask,
                partition = %format!("{}/{}", key.0, key.1),
                start,
                "handed-over partition resumed"
            );
        }
        for (key, waited) in self
            .unread
            .unanswered_for(self.timeout, std::time::Instant::now())
        {
            tracing::warn!(
                "kafka source \"{}\" subtask {}: partition {}/{} was assigned {:.1} s ago and \
                 the brokers have not said yet where its reading starts (the group coordinator \
                 answers commits only once a rebalance has ended); it holds event time back \
                 until they do",
                self.source_id,
                self.subtask,
                key.0,
                key.1,
                waited.as_secs_f64()
            );
        }
        self.paused = context.unverified_keys();
    }

    /// Stores the positions for librdkafka's commit timer (no checkpointing): once per poll,
    /// for every message taken in it. A partition revoked meanwhile is refused by librdkafka
    /// (its hand-over commit stored it already).
    fn store_positions(&mut self) {
        self.unstored = false;
        if !self.auto_commit || self.positions.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::with_capacity(self.positions.len());
        for ((topic, partition), offset) in &self.positions {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset));
        }
        let _ = self.consumer.store_offsets(&tpl);
    }

    /// Commits `positions` without blocking the task: librdkafka's synchronous commit waits
    /// for the group without a limit (it never returned on the mock cluster with a generator
    /// in front of an exchange, and blocked a reader for the 4 s of each rebalance).
    ///
    /// `wait: false` (a checkpoint completed while the job runs): the commit is issued and its
    /// answer counted when a later poll serves it; one refused during a rebalance is covered
    /// by the next checkpoint's, which holds newer positions. `wait: true` (the last commit,
    /// or a test that reads the group's offsets next): polls until the broker answers, retrying
    /// while a rebalance is under way, at most `--kafka-timeout`; a commit that does not land
    /// then is reported on stderr (its records are read again by the next owner, never lost).
    fn commit(
        &mut self,
        positions: &BTreeMap<PartitionKey, i64>,
        wait: bool,
    ) -> Result<(), BoxError> {
        if positions.is_empty() {
            return Ok(());
        }
        // Brokers gone: a commit would wait for them; the positions are read again later.
        if self.watch.down_since().is_some() {
            if wait {
                self.warn_uncommitted(positions, "the brokers were unreachable");
            }
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in positions {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(|e| format!("kafka source \"{}\": {e}", self.source_id))?;
        }
        if !wait {
            // The answer is followed in the polls (`follow_commit`); an error now (no
            // coordinator known yet, say) is retried as a refused commit is.
            self.await_answer(&tpl);
            if commit_async(&self.consumer, &tpl).is_err() {
                self.retry_commit_at = Some(std::time::Instant::now() + COMMIT_RETRY_AFTER);
            }
            return Ok(());
        }
        let deadline = std::time::Instant::now() + self.timeout;
        let result = loop {
            let result = self.commit_and_wait(&tpl, deadline);
            // A rebalance under way (another member joining or leaving), or the group's
            // coordinator moving or not known yet: let it settle, then retry.
            let retry = matches!(
                &result,
                Err(KafkaError::ConsumerCommit(
                    RDKafkaErrorCode::RebalanceInProgress
                        | RDKafkaErrorCode::IllegalGeneration
                        | RDKafkaErrorCode::UnknownMemberId
                        | RDKafkaErrorCode::NotCoordinator
                        | RDKafkaErrorCode::CoordinatorNotAvailable
                        | RDKafkaErrorCode::CoordinatorLoadInProgress
                        | RDKafkaErrorCode::WaitingForCoordinator
                        | RDKafkaErrorCode::RequestTimedOut
                ))
            );
            if !retry || std::time::Instant::now() >= deadline {
                break result;
            }
            self.poll_aside(Duration::from_millis(50));
        };
        if let Err(e) = result {
            // A partition moved away meanwhile: its new owner resumes from the last commit,
            // so records may be read twice, never lost.
            self.warn_uncommitted(positions, &e.to_string());
        }
        Ok(())
    }

    /// Issues the commit of `tpl` and polls until the broker's answer arrives (or `deadline`).
    fn commit_and_wait(
        &mut self,
        tpl: &TopicPartitionList,
        deadline: std::time::Instant,
    ) -> Result<(), KafkaError> {
        self.await_answer(tpl);
        let issued = commit_async(&self.consumer, tpl);
        let answer = loop {
            if let Err(e) = &issued {
                break Err(e.clone());
            }
            let answer = self.consumer.context().take_answer();
            if let Some(answer) = answer {
                break answer;
            }
            if std::time::Instant::now() >= deadline {
                break Err(KafkaError::ConsumerCommit(
                    RDKafkaErrorCode::OperationTimedOut,
                ));
            }
            self.poll_aside(Duration::from_millis(10));
        };
        self.consumer.context().await_commit(None);
        answer
    }

    /// The commit of `tpl` is the newest: the callback keeps the answer to it.
    fn await_answer(&self, tpl: &TopicPartitionList) {
        self.consumer.context().await_commit(Some(AwaitedCommit {
            offsets: offsets_of(tpl),
            answer: None,
        }));
    }

    /// Once per poll: the answer to the newest checkpoint commit made without waiting. Taken:
    /// nothing is left to commit again when the source is dropped. Refused (a rebalance under
    /// way, no coordinator yet): made again a little later, for the partitions still held, so
    /// a checkpoint that is the last for a while still lands.
    fn follow_commit(&mut self) {
        let answer = self.consumer.context().take_answer();
        if self.auto_commit {
            // No checkpoint commits: the only commits followed are the refused hand-overs'.
            self.follow_hand_overs(answer);
            return;
        }
        match answer {
            Some(Ok(())) => self.unconfirmed = None,
            Some(Err(_)) if self.unconfirmed.is_some() => {
                self.retry_commit_at = Some(std::time::Instant::now() + COMMIT_RETRY_AFTER);
            }
            _ => {}
        }
        if let Some(at) = self.retry_commit_at {
            if std::time::Instant::now() >= at {
                self.retry_commit_at = None;
                if let Some(positions) = self.unconfirmed.clone() {
                    let _ = self.commit(&positions, false);
                }
            }
        }
    }

    /// Once per poll (no checkpointing): the hand-over commits the group refused in
    /// revocations are made again, once no newer commit of those partitions has been made
    /// ([`crate::refused_hand_over`]). The group's commits are read on a thread of its own
    /// (librdkafka answers once a rebalance under way has ended); a later poll commits.
    fn follow_hand_overs(&mut self, answer: Option<Result<(), KafkaError>>) {
        let refused = {
            let mut r = self.consumer.context().refused_hand_overs();
            if r.0.is_empty() && self.hand_overs.is_empty() {
                return;
            }
            std::mem::take(&mut *r)
        };
        let now = std::time::Instant::now();
        self.hand_overs
            .refused(refused.0, refused.1, now, self.timeout);
        if let Some(answer) = answer {
            self.hand_overs
                .answered(answer.map_err(|e| e.to_string()), now);
        }
        // The group's commits, read for the attempt under way: what is still behind them is
        // committed.
        if let Some(read) = self.commits_read.take_if(|r| r.is_finished()) {
            let read = read
                .join()
                .unwrap_or_else(|_| Err("reading the group's commits failed".into()));
            match read {
                Err(why) => self.hand_overs.retry_later(why, now),
                Ok(committed) => {
                    let behind = self.hand_overs.behind(&committed, now);
                    if !behind.is_empty() {
                        let mut tpl = TopicPartitionList::new();
                        for ((topic, partition), offset) in &behind {
                            let _ = tpl.add_partition_offset(
                                topic,
                                *partition,
                                Offset::Offset(*offset),
                            );
                        }
                        self.await_answer(&tpl);
                        if let Err(e) = commit_async(&self.consumer, &tpl) {
                            self.hand_overs.retry_later(e.to_string(), now);
                        }
                    }
                }
            }
        }
        match self.hand_overs.next(now) {
            Next::Wait => {}
            Next::GiveUp(offsets, why) => {
                let partitions: Vec<String> = offsets
                    .iter()
                    .map(|((topic, partition), offset)| format!("{topic}/{partition} at {offset}"))
                    .collect();
                tracing::warn!(
                    "kafka source \"{}\" subtask {}: the hand-over commit of \
                     {} after their revocation was refused for --kafka-timeout ({} s; last: \
                     {why}); their next owner reads from the group's last commit",
                    self.source_id,
                    self.subtask,
                    partitions.join(", "),
                    self.timeout.as_secs_f64()
                );
            }
            Next::Attempt(attempt) => {
                // Read on a thread of its own: librdkafka answers once a rebalance under way
                // has ended (about 5 s on the mock cluster), and the task must not stand still
                // meanwhile. The answer is taken by a later poll.
                let consumer = Arc::clone(&*self.consumer);
                let within = GROUP_COMMITS_WITHIN.min(self.timeout);
                let read = std::thread::Builder::new()
                    .name("tidemark-kafka-commits".into())
                    .spawn(move || {
                        group_commits(&consumer, &attempt, within).map_err(|e| e.to_string())
                    });
                match read {
                    Ok(handle) => self.commits_read = Some(handle),
                    Err(e) => self.hand_overs.retry_later(e.to_string(), now),
                }
            }
        }
    }

    /// How many revoked partitions wait for their hand-over commit to be made again, after the
    /// group refused it (no checkpointing; `docs/kafka.md`, "At least once").
    pub fn hand_overs_waiting(&self) -> usize {
        let refused = self.consumer.context().refused_hand_overs().0.len();
        self.hand_overs.len() + refused
    }

    /// Polls the consumer while a commit waits (serving rebalances and commit answers); a
    /// message it returns is kept for the next poll.
    fn poll_aside(&mut self, timeout: Duration) {
        if let Some(Ok(m)) = self.consumer.poll(timeout) {
            let key = (m.topic().to_owned(), m.partition());
            self.consumer
                .context()
                .stashed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key)
                .or_insert(m.offset());
            self.stash.push_back(m.detach());
        }
    }

    /// For the last commit: the refused hand-overs still behind the group's commits (taken).
    fn hand_overs_left(&mut self) -> Vec<(PartitionKey, i64)> {
        // A read under way ends within `GROUP_COMMITS_WITHIN`; this one reads again.
        if let Some(read) = self.commits_read.take() {
            let _ = read.join();
        }
        let refused = std::mem::take(&mut *self.consumer.context().refused_hand_overs());
        let mut waiting = self.hand_overs.take_all();
        waiting.extend(refused.0);
        if waiting.is_empty() {
            return Vec::new();
        }
        let waiting: Vec<_> = waiting.into_iter().collect();
        match group_commits(
            &self.consumer,
            &waiting,
            GROUP_COMMITS_WITHIN.min(self.timeout),
        ) {
            Ok(committed) => waiting
                .into_iter()
                .filter(|(key, offset)| !passed(&committed, key, *offset))
                .collect(),
            Err(e) => {
                self.warn_uncommitted(&waiting.into_iter().collect(), &e.to_string());
                Vec::new()
            }
        }
    }

    /// Says on stderr that a commit did not land: the records after the group's last commit
    /// may be read again by the partitions' next owner (never lost), which a user comparing
    /// the group's offsets with the topic's end would otherwise find unexplained.
    fn warn_uncommitted(&self, positions: &BTreeMap<PartitionKey, i64>, cause: &str) {
        let partitions: Vec<String> = positions
            .iter()
            .map(|((topic, partition), offset)| format!("{topic}/{partition} at {offset}"))
            .collect();
        tracing::warn!(
            "kafka source \"{}\" subtask {}: commit of {} not made ({cause}); \
             the next owner of those partitions reads from the group's last commit",
            self.source_id,
            self.subtask,
            partitions.join(", ")
        );
    }
}

/// Commits `tpl` without waiting; the broker's answer arrives at the consumer's
/// [`ConsumerContext::commit_callback`] in a later poll. (rust-rdkafka's asynchronous commit
/// posts no answer at all for a consumer on librdkafka's event API: `rd_kafka_commit` with
/// `async` answers only through a configured `offset_commit_cb`, so the commit goes through
/// `rd_kafka_commit_queue` with the consumer's own queue as the queue for the answer.)
fn commit_async(
    consumer: &BaseConsumer<SourceContext>,
    tpl: &TopicPartitionList,
) -> Result<(), KafkaError> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live consumer's handle; the queue handle is a new reference that
    // the commit keeps its own reference to, so it is destroyed at once; `tpl` is copied.
    let err = unsafe {
        let queue = rdkafka::bindings::rd_kafka_queue_get_consumer(rk);
        // No queue (no group): never call the commit with none, which waits for the answer.
        if queue.is_null() {
            return Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::UnknownGroup));
        }
        let err = rdkafka::bindings::rd_kafka_commit_queue(
            rk,
            tpl.ptr(),
            queue,
            None,
            std::ptr::null_mut(),
        );
        rdkafka::bindings::rd_kafka_queue_destroy(queue);
        err
    };
    match RDKafkaErrorCode::from(err) {
        RDKafkaErrorCode::NoError => Ok(()),
        code => Err(KafkaError::ConsumerCommit(code)),
    }
}

/// The consumer group generation `consumer` is a member of now (in a rebalance callback: the
/// generation of the assignment it serves), or -1 outside a group. rust-rdkafka's
/// `ConsumerGroupMetadata` does not give it, so librdkafka's getter is called directly.
fn group_generation<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> i32 {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live consumer's handle; the metadata is a copy that this function
    // owns and destroys after reading it.
    unsafe {
        let metadata = rdkafka::bindings::rd_kafka_consumer_group_metadata(rk);
        if metadata.is_null() {
            return -1;
        }
        let generation =
            rdkafka::bindings::rd_kafka_consumer_group_metadata_generation_id(metadata);
        rdkafka::bindings::rd_kafka_consumer_group_metadata_destroy(metadata);
        generation
    }
}

/// The consumer's read positions of `keys` (the offset after the last message it returned),
/// where it has one.
fn read_positions(
    consumer: &BaseConsumer<SourceContext>,
    keys: &[PartitionKey],
) -> Vec<(PartitionKey, i64)> {
    let Ok(read) = consumer.position() else {
        return Vec::new();
    };
    let dropped = consumer.context().dropped_keys();
    keys.iter()
        .filter(|k| !dropped.contains(*k))
        .filter_map(|k| match read.find_partition(&k.0, k.1)?.offset() {
            Offset::Offset(o) => Some((k.clone(), o)),
            _ => None,
        })
        .collect()
}

/// Stores the consumer's read positions (the offset after the last message it returned) for
/// the commit that hands revoked partitions over; not of partitions whose messages the source
/// dropped (their read position is past records the job never had).
fn store_read_positions(consumer: &BaseConsumer<SourceContext>) {
    let Ok(read) = consumer.position() else {
        return;
    };
    let dropped = consumer.context().dropped_keys();
    let mut store = TopicPartitionList::new();
    for e in read.elements() {
        if dropped.contains(&(e.topic().to_owned(), e.partition())) {
            continue;
        }
        if let Offset::Offset(o) = e.offset() {
            let _ = store.add_partition_offset(e.topic(), e.partition(), Offset::Offset(o));
        }
    }
    if store.count() > 0 {
        let _ = consumer.store_offsets(&store);
    }
}

/// Whether messages `expected..found` of an exchange partition, skipped by the next message
/// read (`found` > `expected`), were deleted before they were read: only if the partition's
/// log now starts past `expected` (its low watermark, `log_start`). Offsets a broker skipped
/// are not messages lost (tansu's offsets have gaps; a transactional producer's markers take
/// offsets on Kafka). Where the log start is not known, nothing tells the two apart: taken for
/// a loss (the job stops, saying so) rather than go on possibly wrong.
fn messages_deleted(expected: i64, log_start: Option<i64>) -> bool {
    log_start.is_none_or(|low| low > expected)
}

/// The error of an exchange reader that finds messages `expected..found` of a partition deleted
/// before it read them (`log_start`: where the partition's log starts, if the broker said).
fn lost_exchange_messages(
    what: &str,
    topic: &str,
    partition: i32,
    expected: i64,
    found: i64,
    log_start: Option<i64>,
) -> String {
    let why = match log_start {
        Some(low) => format!(
            "were deleted by the broker before they were read (the partition's log starts at \
             {low})"
        ),
        None => "were skipped, and the broker did not say within --kafka-timeout where the \
                 partition's log starts: they may have been deleted before they were read"
            .to_owned(),
    };
    format!(
        "{what}: exchange partition {topic}/{partition}: the messages at offsets {expected} to {} \
         {why} (its retention; librdkafka's mock cluster, `tidemark dev-kafka`, keeps at most 5 \
         MB per partition), so every result after them would lack their records; give the \
         exchange more partitions, or use a broker that keeps them (docs/kafka.md, \"Limits of \
         the mock cluster\")",
        found - 1
    )
}

/// The partition's high watermark as the latest fetch response gave it (no request is made).
fn cached_high_watermark(
    consumer: &BaseConsumer<SourceContext>,
    key: &PartitionKey,
) -> Option<i64> {
    cached_watermarks(consumer, key).map(|(_, high)| high)
}

/// The partition's low watermark, if known, and its high watermark as the latest fetch
/// response gave them (no request is made), once the high one is known.
fn cached_watermarks(
    consumer: &BaseConsumer<SourceContext>,
    key: &PartitionKey,
) -> Option<(Option<i64>, i64)> {
    let topic = std::ffi::CString::new(key.0.as_str()).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer lives as long as `consumer`; the out-pointers are valid.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            key.1,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(((low >= 0).then_some(low), high))
}

impl KafkaSource {
    /// Turns one message into a record in `out` (or counts it as malformed), and moves the
    /// partition's position past it. Returns whether a record was emitted.
    fn take<M: Message>(
        &mut self,
        message: &M,
        now_nanos: i64,
        out: &mut Output,
    ) -> Result<bool, BoxError> {
        let (topic, partition, offset) = (message.topic(), message.partition(), message.offset());
        // Fetched before its pause took hold: read again from its verified start.
        if !self.paused.is_empty()
            && self
                .paused
                .iter()
                .any(|(t, p)| *p == partition && t == topic)
        {
            if !self
                .dropped
                .iter()
                .any(|(t, p)| *p == partition && t == topic)
            {
                let key = (topic.to_owned(), partition);
                let context = self.consumer.context();
                (context.dropped.lock().unwrap_or_else(|e| e.into_inner())).insert(key.clone());
                tracing::debug!(
                    source = %self.source_id,
                    subtask = self.subtask,
                    partition = %format!("{topic}/{partition}"),
                    offset,
                    "message of a paused partition dropped"
                );
                self.dropped.push(key);
            }
            return Ok(false);
        }
        // Taken again after messages were dropped: the read position is the job's again.
        if !self.dropped.is_empty() {
            if let Some(i) = self
                .dropped
                .iter()
                .position(|(t, p)| *p == partition && t == topic)
            {
                let key = self.dropped.swap_remove(i);
                let context = self.consumer.context();
                (context.dropped.lock().unwrap_or_else(|e| e.into_inner())).remove(&key);
            }
        }
        if self.relay.is_some() {
            self.check_exchange_continuity(topic, partition, offset)?;
        }
        let emitted = if self.relay.is_some() {
            self.take_restored();
            let relay = self.relay.as_mut().expect("an exchange reader");
            relay.take(message, out, &mut self.watermarks)?
        } else {
            self.decode(message, now_nanos, out)?
        };
        self.unstored = true;
        // A few partitions per subtask: a linear look-up, no allocation per message.
        match self
            .positions
            .iter_mut()
            .find(|((t, p), _)| *p == partition && t == topic)
        {
            Some((_, position)) => *position = offset + 1,
            None => {
                self.positions
                    .insert((topic.to_owned(), partition), offset + 1);
            }
        }
        Ok(emitted)
    }

    /// For the reader of an exchange: fails when the broker deleted messages of the partition
    /// before they were read (an exchange topic is never compacted and Tidemark's writers leave
    /// no gaps, so a message past the next expected offset means the ones between are gone:
    /// retention, or librdkafka's mock cluster, which keeps at most 5 MB per partition). Every
    /// result after them would lack their records, so the job stops rather than go on wrong.
    fn check_exchange_continuity(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), BoxError> {
        // A few partitions per subtask: a linear look-up, no allocation per message.
        let position = self
            .positions
            .iter()
            .find(|((t, p), _)| *p == partition && t == topic)
            .map(|(_, position)| *position);
        if position.is_some_and(|p| offset <= p) {
            return Ok(());
        }
        // The first message since the partition was assigned, or one past the position: once
        // per assignment or gap. A partition taken away and given back within one poll still
        // has its old position; it is where it was assigned that counts then.
        match self.exchange_start(topic, partition) {
            Some(start) if offset > start => {
                let expected = position.map_or(start, |p| p.max(start));
                let log_start = self.log_start(topic, partition);
                if !messages_deleted(expected, log_start) {
                    return Ok(());
                }
                Err(lost_exchange_messages(
                    &self
                        .relay
                        .as_ref()
                        .map(|r| r.what.clone())
                        .unwrap_or_default(),
                    topic,
                    partition,
                    expected,
                    offset,
                    log_start,
                )
                .into())
            }
            _ => Ok(()),
        }
    }

    /// Where the partition's log starts (its low watermark): as the fetch response that
    /// brought the message just read gave it, else asked of the broker (rare: only when the
    /// offsets of an exchange partition skip).
    fn log_start(&self, topic: &str, partition: i32) -> Option<i64> {
        let key = (topic.to_owned(), partition);
        if let Some((Some(low), _)) = cached_watermarks(&self.consumer, &key) {
            return Some(low);
        }
        let watermarks = self
            .consumer
            .fetch_watermarks(topic, partition, self.timeout);
        watermarks.ok().map(|(low, _)| low)
    }

    /// Where this subtask's reading of exchange partition `topic`/`partition` must begin: the
    /// offset the source chose when it was assigned (handed over, restored, or from a commit
    /// record), else the group's committed offset, else 0 (nobody in the group has read it, and
    /// an exchange is read from its beginning). `None` when the group coordinator does not
    /// answer within `--kafka-timeout` (nothing to compare with).
    fn exchange_start(&self, topic: &str, partition: i32) -> Option<i64> {
        let key = (topic.to_owned(), partition);
        let context = self.consumer.context();
        if let Some(at) = context
            .starts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Some(*at);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let committed = self.consumer.committed_offsets(tpl, self.timeout).ok()?;
        match committed.find_partition(topic, partition)?.offset() {
            Offset::Offset(at) => Some(at),
            _ => Some(0),
        }
    }

    /// Decodes one message of the source's `format` into `out`.
    fn decode<M: Message>(
        &mut self,
        message: &M,
        now_nanos: i64,
        out: &mut Output,
    ) -> Result<bool, BoxError> {
        let (topic, partition, offset) = (message.topic(), message.partition(), message.offset());
        if message.payload().is_none() && !self.keep_tombstones {
            self.tombstones += 1;
            return Ok(false);
        }
        let decoded = match message.payload() {
            None => self
                .decoder
                .tombstone(message.key(), message.timestamp(), now_nanos),
            Some(payload) => {
                self.decoder
                    .decode(message.key(), Some(payload), message.timestamp(), now_nanos)
            }
        };
        Ok(match decoded {
            Ok(mut record) => {
                let topic_name = match self.topic_names.iter().find(|n| n.as_str() == topic) {
                    Some(name) => name.clone(),
                    None => name_of(topic),
                };
                record.set_origin(Origin {
                    topic: topic_name,
                    partition,
                    offset,
                    seq: 0,
                });
                self.last_timestamp = Some(record.timestamp);
                self.watermarks.observe(topic, partition, record.timestamp);
                out.emit(record);
                true
            }
            Err(Rejected::Fatal(error)) => {
                return Err(format!(
                    "kafka source \"{}\": message at {topic}/{partition} offset {offset}: {error}",
                    self.source_id
                )
                .into())
            }
            Err(Rejected::Malformed(malformed)) => {
                let reason = format!(
                    "message at {topic}/{partition} offset {offset}: {}",
                    malformed.0
                );
                match &self.on_error {
                    ErrorPolicy::Fail => {
                        return Err(format!(
                            "kafka source \"{}\": {reason} (on_error: fail)",
                            self.source_id
                        )
                        .into())
                    }
                    ErrorPolicy::Skip => {}
                    ErrorPolicy::DeadLetter(_) => {
                        if let Some(file) = &self.dead_letter {
                            let record = crate::dead_letter::message_record(message);
                            file.write(&self.source_id, &reason, &record).map_err(|e| {
                                format!(
                                    "kafka source \"{}\": cannot write to dead-letter file {}: {e} (after {reason})",
                                    self.source_id,
                                    file.path().display()
                                )
                            })?;
                        }
                    }
                }
                self.malformed += 1;
                false
            }
        })
    }

    /// For the reader of an exchange: whether the exchange has ended in this process (checked
    /// every 100 ms once the local writers have ended; see [`crate::exchange`]).
    fn relay_ended(&mut self, now: i64) -> bool {
        let Some(relay) = &self.relay else {
            return false;
        };
        if !relay.writers_done()
            || now.saturating_sub(relay.last_check) < crate::exchange::END_CHECK_EVERY_NANOS
        {
            return false;
        }
        let assigned = self.assigned();
        let mut caught_up = self.stash.is_empty();
        for key in &assigned {
            // Paused until its start is known, or read from a position not the job's.
            if !caught_up || self.paused.contains(key) || self.dropped.contains(key) {
                caught_up = false;
                break;
            }
            let Ok((low, high)) =
                self.consumer
                    .fetch_watermarks(&key.0, key.1, Duration::from_secs(1))
            else {
                caught_up = false;
                break;
            };
            let position = match self.positions.get(key) {
                Some(p) => Some(*p),
                None => self.consumer.position().ok().and_then(|tpl| {
                    match tpl.find_partition(&key.0, key.1)?.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    }
                }),
            };
            caught_up = match position {
                Some(p) => p >= high,
                // Nothing read yet: only an empty partition is read to its end.
                None => low >= high,
            };
        }
        let held = assigned.iter().map(|k| k.1).collect();
        let relay = self.relay.as_mut().expect("checked above");
        relay.last_check = now;
        relay.report(held, caught_up)
    }
}

impl Source for KafkaSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let status = self.poll_messages(ctx, out)?;
        self.hand_state_moves();
        Ok(status)
    }

    fn serve_while_finishing(&mut self) -> Result<(), BoxError> {
        // Still a member of the group when the last checkpoint is committed: another member
        // leaving meanwhile (a second instance stopped at the same moment) starts a
        // rebalance that goes on only once this consumer has answered it, in a poll; a member
        // that does not answer is dropped from the group and its commit refused
        // (`UNKNOWN_MEMBER_ID`). Messages polled now are dropped: nothing more is emitted, the
        // commit covers only what was, and the process leaves (no hand-over in it).
        self.consumer
            .context()
            .closing
            .store(true, Ordering::Relaxed);
        self.release_hand_overs();
        for _ in 0..FINISHING_POLLS {
            if self.consumer.poll(Duration::ZERO).is_none() {
                break;
            }
        }
        Ok(())
    }

    fn lag(&self, _now_nanos: i64) -> SourceLag {
        self.lag
    }

    fn enable_checkpoints(&mut self) {
        // Positions are no longer stored for librdkafka's timer: only completed checkpoints
        // commit.
        self.auto_commit = false;
        self.consumer
            .context()
            .auto_commit
            .store(false, Ordering::Relaxed);
    }

    fn snapshot(&mut self, checkpoint: u64) -> Result<(), BoxError> {
        self.snapshot_positions(checkpoint);
        Ok(())
    }

    fn checkpoint_complete(&mut self, checkpoint: u64) -> Result<(), BoxError> {
        // While the job runs the task goes on at once; the last one (the source finishing)
        // waits for the broker.
        let finishing = self.consumer.context().closing.load(Ordering::Relaxed);
        self.commit_checkpoint_with(checkpoint, finishing)
    }

    fn input_errors(&self) -> SourceErrorCounts {
        SourceErrorCounts {
            malformed: self.malformed,
            tombstones: self.tombstones,
            ..SourceErrorCounts::default()
        }
    }

    fn split_watermarks(&mut self) -> Option<&mut SplitWatermarks> {
        Some(self.watermarks.tracker())
    }

    /// Hands the partitions' states to an exchange writer chained behind (not for the reader
    /// of an exchange, whose partitions are the exchange's own).
    fn watermarks_looked(&mut self) {
        if self.relay.is_none() {
            crate::input_report::publish(
                self.watermarks
                    .report(&self.source_id, &self.partition_counts),
            );
        }
    }

    fn relays_markers(&self) -> bool {
        self.relay.is_some()
    }

    /// Resumes from a checkpoint directory: a source reading topics, and the reader of a
    /// Kafka exchange whose keyed vertex keeps state (with that state: `exchange/seed.rs`).
    /// The reader of an exchange without state does not: the messages written to the
    /// exchange again after a restore would reach the vertex behind it twice, so such a
    /// restore is refused.
    fn resumable(&self) -> bool {
        self.relay.is_none() || self.consumer.context().state.get().is_some()
    }

    /// Per partition held: the offset after the last message handed to the job (or the
    /// consumer's position, before it handed any) and the highest record timestamp read. For
    /// the reader of an exchange keeping state: what a commit record of each partition it
    /// holds would say ([`crate::exchange`]'s `seed.rs`).
    fn position(&mut self, checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        if let (Some(_), Some(kept)) = (self.relay.as_ref(), self.consumer.context().state.get()) {
            let positions: BTreeMap<i32, i64> = self
                .pending_checkpoints
                .get(&checkpoint)
                .into_iter()
                .flatten()
                .filter(|(key, _)| key.0 == kept.exchange_topic)
                .map(|(key, offset)| (key.1, *offset))
                .collect();
            let progress = self
                .pending_progress
                .get(&checkpoint)
                .cloned()
                .unwrap_or_default();
            let partitions = kept.seed_at(&positions, &progress);
            return Ok(state_codec::encode(&ReaderPosition { partitions })?);
        }
        self.forget_revoked();
        let mut keys: BTreeSet<PartitionKey> = self.positions.keys().cloned().collect();
        keys.extend(self.assigned());
        let read = self.consumer.position().ok();
        let starts = self
            .consumer
            .context()
            .starts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let unverified = self
            .consumer
            .context()
            .unverified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut partitions = Vec::with_capacity(keys.len());
        for key in keys {
            // Paused, or with messages dropped: the consumer's read position is not the job's.
            let not_read = unverified.contains_key(&key) || self.dropped.contains(&key);
            let offset = match self.positions.get(&key) {
                Some(offset) => *offset,
                None if not_read => match unverified.get(&key).or_else(|| starts.get(&key)) {
                    Some(at) => *at,
                    None => continue,
                },
                None => match read
                    .as_ref()
                    .and_then(|r| r.find_partition(&key.0, key.1))
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) => o,
                    _ => match starts.get(&key) {
                        Some(at) => *at,
                        // Assigned at the group's commit (or `start`) and nothing taken yet:
                        // a restore starts it there again.
                        None => continue,
                    },
                },
            };
            partitions.push(PartitionPosition {
                highest_timestamp: self.watermarks.highest_timestamp(&key.0, key.1),
                topic: key.0,
                partition: key.1,
                offset,
            });
        }
        Ok(state_codec::encode(&KafkaSourcePosition { partitions })?)
    }

    /// Leaves each recorded partition's offset and timestamp for whichever subtask of this
    /// process the group gives it to (`crate::restored`).
    fn resume(&mut self, position: &[u8]) -> Result<(), BoxError> {
        if let (Some(relay), Some(_)) = (self.relay.as_ref(), self.consumer.context().state.get()) {
            let position: ReaderPosition = state_codec::decode(position).map_err(|e| {
                format!("{}: the checkpoint's position is damaged: {e}", relay.what)
            })?;
            relay.resume(position);
            return Ok(());
        }
        let what = format!("kafka source \"{}\"", self.source_id);
        let position: KafkaSourcePosition = state_codec::decode(position)
            .map_err(|e| format!("{what}: the checkpoint's position is damaged: {e}"))?;
        let context = self.consumer.context();
        for p in position.partitions {
            if !self.config.topics.contains(&p.topic) {
                return Err(format!(
                    "{what}: the checkpoint has a position in topic \"{}\", which the source \
                     no longer reads (topics: {:?})",
                    p.topic, self.config.topics
                )
                .into());
            }
            context.kafka.restored.put(
                &context.group,
                &(p.topic, p.partition),
                crate::restored::Restored {
                    offset: p.offset,
                    highest_timestamp: p.highest_timestamp,
                },
            );
        }
        Ok(())
    }
}

/// Where a `kafka` source subtask continues from: its [`Source::position`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaSourcePosition {
    /// Each partition the subtask held.
    pub partitions: Vec<PartitionPosition>,
}

/// One partition's place in a [`KafkaSourcePosition`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionPosition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset of the first message not handed to the job.
    pub offset: i64,
    /// The highest record timestamp (ns) read from it, if any: its watermark starts there.
    pub highest_timestamp: Option<i64>,
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // With the brokers gone there is no one to commit to or say goodbye to.
        let lost = self.watch.down_since().is_some();
        // What a hard stop would cut short, for the run's summary.
        let (kafka, id, subtask) = (
            self.consumer.context().kafka.clone(),
            self.source_id.clone(),
            self.subtask,
        );
        let step = |step| kafka.metrics().set_closing_step(&id, subtask, step);
        self.consumer
            .context()
            .closing
            .store(true, Ordering::Relaxed);
        self.release_hand_overs();
        step(Some("committing its offsets"));
        if self.auto_commit && !lost {
            self.store_positions();
            let mut positions = std::mem::take(&mut self.positions);
            // Hand-overs the group refused and that are still behind its commits go with it.
            for (key, offset) in self.hand_overs_left() {
                positions.entry(key).or_insert(offset);
            }
            let _ = self.commit(&positions, true);
        }
        // The last checkpoint's commit went out without waiting (it completed before the
        // source finished): made again, waiting for the broker, before the group is left.
        self.forget_revoked();
        if let Some(positions) = self.unconfirmed.take().filter(|_| !lost) {
            let _ = self.commit(&positions, true);
        }
        // Leave the group together with the group's other subtasks in this process, once all
        // have made their last commit: each leave starts a rebalance, during which the group
        // refuses commits (`crate::departure`). Meanwhile the group is served (a rebalance
        // another instance started); messages polled are dropped, not committed.
        step(Some(
            "waiting for the group's other subtasks in this process to commit",
        ));
        if !lost {
            self.departure.ready();
            let deadline = std::time::Instant::now() + self.timeout;
            while !self.departure.all_ready() && std::time::Instant::now() < deadline {
                let _ = self.consumer.poll(Duration::from_millis(20));
                self.report_standing();
            }
        }
        // One member of the group in this process leaves at a time, into a stable group
        // (`crate::departure`), serving the group while it waits.
        step(Some("waiting for its turn to leave the group"));
        let turn = self.departure.turn();
        let deadline = std::time::Instant::now() + self.timeout;
        let _turn = (!lost).then(|| {
            crate::departure::take_turn(&turn, || {
                let _ = self.consumer.poll(Duration::from_millis(20));
                self.report_standing();
                std::time::Instant::now() < deadline
            })
        });
        if !lost {
            step(Some("waiting for its consumer group to settle"));
            self.wait_until_leaving_is_safe();
        }
        // Leave the group before librdkafka's close: unsubscribe and serve the revocation
        // until nothing is assigned. Closing while a rebalance is still assigning partitions
        // (another instance leaving at the same moment) tripped an assertion in librdkafka
        // (`rd_kafka_cgrp_terminated: !rd_kafka_assignment_in_progress`) that aborts the process.
        step(Some("leaving its consumer group"));
        if !lost {
            let _ = self.consumer.unsubscribe_and_settle(self.timeout);
        }
        // SAFETY: the field is taken once, here, and not used after.
        let consumer = unsafe { ManuallyDrop::take(&mut self.consumer) };
        // Dropping the consumer leaves the group (librdkafka's close), which waits for the
        // group's coordinator: at most --kafka-timeout, then it goes on in the background.
        let limit = if lost { Duration::ZERO } else { self.timeout };
        step(Some("closing its consumer"));
        crate::client::drop_within(consumer, limit);
        // Left: the next member to take the turn does not wait for this one's standing.
        self.departure.gone();
        step(None);
    }
}

impl KafkaSource {
    /// Releases the partitions this subtask handed over in this process (`crate::handoff`):
    /// the records it read from them before it lost them were written to this task's exchange
    /// writers by now (the task writes a poll's records before the next poll), and once the
    /// writers have delivered them, the new owners may read on.
    fn release_hand_overs(&self) {
        let left = std::mem::take(
            &mut *self
                .consumer
                .context()
                .left
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if left.is_empty() {
            return;
        }
        if let Err(e) = crate::handoff::flush_task_writers() {
            tracing::warn!(
                "kafka source \"{}\" subtask {}: flushing its exchange writers before handing \
                 partitions over in this process: {e}",
                self.source_id,
                self.subtask
            );
        }
        tracing::debug!(
            source = %self.source_id,
            subtask = self.subtask,
            partitions = left.len(),
            "partitions handed over in this process released: its exchange writers delivered"
        );
        for fence in left {
            fence.release();
        }
    }

    /// Waits, serving the group (messages polled are dropped: they are not committed), until
    /// the group may be left (`crate::departure`: not while the coordinator names a state
    /// Kafka's protocol does not define, nor while the members waiting in this process are not
    /// calm in one generation of a stable group), at most `--kafka-timeout`.
    fn wait_until_leaving_is_safe(&self) {
        use crate::departure::{group_state, may_leave, Calm};
        let started = std::time::Instant::now();
        let mut calm = Calm::default();
        loop {
            self.serve_while_leaving();
            let state = group_state(&**self.consumer, &self.group_id, ASK_GROUP_STATE_WITHIN);
            self.report_standing();
            let standings = self.departure.standings();
            if may_leave(
                &state,
                standings.clone(),
                &mut calm,
                std::time::Instant::now(),
            ) {
                tracing::debug!(
                    source_id = %self.source_id,
                    subtask = self.subtask,
                    group = %self.group_id,
                    ?standings,
                    "leaving the consumer group ({state:?})"
                );
                return;
            }
            if started.elapsed() >= self.timeout {
                tracing::warn!(
                    source_id = %self.source_id,
                    subtask = self.subtask,
                    group = %self.group_id,
                    "{} after {:?} (the coordinator says {state:?}; the members leaving in this \
                     process stand at {standings:?}): leaving it all the same (tansu 0.6 may \
                     then never end the rebalance)",
                    crate::departure::NOT_SETTLED,
                    self.timeout
                );
                return;
            }
            tracing::debug!(
                source_id = %self.source_id,
                subtask = self.subtask,
                group = %self.group_id,
                ?standings,
                "the consumer group's coordinator says {state:?}: leaving once it is settled"
            );
        }
    }

    /// Serves the group for about 100 ms while the source leaves (messages polled are dropped),
    /// then says where it stands.
    fn serve_while_leaving(&self) {
        for _ in 0..5 {
            let _ = self.consumer.poll(Duration::from_millis(20));
        }
        self.report_standing();
    }

    /// Tells the members of the group in this process where this one stands
    /// (`crate::departure::Standing`).
    fn report_standing(&self) {
        self.departure.report(crate::departure::Standing {
            generation: group_generation(&self.consumer),
            rebalances: self.rebalances(),
        });
    }
}

/// How long one DescribeGroups for a leaving member may take.
const ASK_GROUP_STATE_WITHIN: Duration = Duration::from_secs(2);

/// Leaving a consumer group in order.
trait Settle {
    /// Unsubscribes and polls (serving rebalance callbacks, dropping messages: they are not
    /// committed) until no partition is assigned or [`SETTLE_WITHIN`] passed. True if settled.
    fn unsubscribe_and_settle(&self, timeout: Duration) -> bool;
}

/// How long a refused hand-over waits at most for the group's commits to be read.
const GROUP_COMMITS_WITHIN: Duration = Duration::from_secs(5);

/// How long after a refused commit (made without waiting) it is made again.
const COMMIT_RETRY_AFTER: Duration = Duration::from_millis(200);

/// At most this many messages are polled (and dropped) per call while the last checkpoint is
/// waited for, so the wait stays responsive to a hard stop.
const FINISHING_POLLS: usize = 1024;

/// How long a closing source waits for its partitions to be revoked.
const SETTLE_WITHIN: Duration = Duration::from_secs(5);

impl Settle for BaseConsumer<SourceContext> {
    fn unsubscribe_and_settle(&self, timeout: Duration) -> bool {
        self.unsubscribe();
        let deadline = std::time::Instant::now() + SETTLE_WITHIN.min(timeout);
        loop {
            let _ = self.poll(Duration::from_millis(20));
            let empty = self.assignment().map(|a| a.count() == 0).unwrap_or(true);
            if empty {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
        }
    }
}

impl KafkaSource {
    /// Takes up to `ctx.max_records` messages into `out`: [`Source::poll`] without the
    /// hand-over of the state moves it made.
    fn poll_messages(
        &mut self,
        ctx: &PollContext,
        out: &mut Output,
    ) -> Result<SourceStatus, BoxError> {
        if !self.announced {
            self.announced = true;
            if self.relay.is_none() {
                crate::input_report::announce(&self.source_id);
            }
        }
        self.forget_revoked();
        if let Some(since) = self.awaiting_assignment {
            // After `forget_revoked`, which made the first assignment's partitions splits.
            if self.rebalances() > 0 || since.elapsed() >= self.timeout {
                self.watermarks.tracker().await_splits(false);
                self.awaiting_assignment = None;
            }
        }
        self.release_hand_overs();
        self.follow_commit();
        if let Some(failure) = self
            .consumer
            .context()
            .state
            .get()
            .and_then(|k| k.failure())
        {
            return Err(failure.into());
        }
        let mut emitted = 0usize;
        // Messages that arrived while a commit waited for a rebalance come first.
        if !self.stash.is_empty() {
            while emitted < ctx.max_records {
                let Some(message) = self.stash.pop_front() else {
                    break;
                };
                let key = (message.topic().to_owned(), message.partition());
                // A partition revoked meanwhile belongs to another subtask now.
                if self.assigned_now(&key) && self.take(&message, ctx.now_nanos, out)? {
                    emitted += 1;
                }
            }
            let context = self.consumer.context();
            let mut stashed = context.stashed.lock().unwrap_or_else(|e| e.into_inner());
            stashed.clear();
            for m in &self.stash {
                stashed
                    .entry((m.topic().to_owned(), m.partition()))
                    .or_insert(m.offset());
            }
        }
        let consumer = Arc::clone(&self.consumer);
        // Whether this poll took everything the consumer had: if not, no partition is caught up.
        let mut drained = false;
        let mut rebalances = self.rebalances();
        while emitted < ctx.max_records {
            let message = match consumer.poll(Duration::ZERO) {
                None => {
                    drained = true;
                    break;
                }
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    // Transient broker errors are retried by librdkafka; fatal ones end the job,
                    // and so do brokers gone for longer than --kafka-timeout.
                    if matches!(e, KafkaError::MessageConsumptionFatal(_)) {
                        return Err(format!("kafka source \"{}\": {e}", self.source_id).into());
                    }
                    self.watch.error(&e, std::time::Instant::now());
                    break;
                }
            };
            // A rebalance served inside that poll may have paused partitions just handed over.
            if self.rebalances() != rebalances {
                rebalances = self.rebalances();
                self.paused = self.consumer.context().unverified_keys();
            }
            if self.take(&message, ctx.now_nanos, out)? {
                emitted += 1;
            }
        }
        if self.unstored {
            self.store_positions();
        }
        if let Some(relay) = self.relay.as_mut().filter(|r| r.replays_dropped > 0) {
            let dropped = std::mem::take(&mut relay.replays_dropped);
            self.metrics.replays_dropped(relay.vertex(), dropped);
        }
        if ctx.now_nanos.saturating_sub(self.last_lag_at) >= LAG_EVERY_NANOS {
            self.update_lag(ctx.now_nanos);
            self.last_lag_at = ctx.now_nanos;
        }
        // Idle means caught up: a partition with messages not read yet (as the consumer last
        // heard from the broker, or still queued) never goes idle.
        let behind = &self.behind;
        self.watermarks
            .set_behind(|key| !drained || behind.contains(key));
        if self.watch.down_since().is_some() {
            self.check_brokers(emitted)?;
        }
        if emitted > 0 {
            Ok(SourceStatus::Ready)
        } else if self.relay.is_some() && self.relay_ended(ctx.now_nanos) {
            Ok(SourceStatus::Finished)
        } else {
            Ok(SourceStatus::Idle {
                until: Some(ctx.now_nanos + 5_000_000),
            })
        }
    }

    /// The reader of an exchange keeping state hands the moves of its state store to the
    /// store of the keyed operator chained behind ([`crate::exchange::StateTopicStore`]), with
    /// the event time of partitions that joined behind the subtask's
    /// (`exchange/late_joiners.rs`): after every poll, before the runtime asks that store.
    fn hand_state_moves(&mut self) {
        let Some(kept) = self.consumer.context().state.get() else {
            return;
        };
        let mut moves = kept.take_moves();
        if moves.is_empty() && self.late_joiners.is_empty() {
            return;
        }
        let (watermarks, topic) = (&self.watermarks, &kept.exchange_topic);
        self.late_joiners
            .follow(&mut moves, kept.partitions(), watermarks.emitted(), |p| {
                watermarks.state(topic, p)
            });
        kept.hand_on(moves);
    }

    /// This subtask reads an exchange whose keyed vertex keeps its state per partition.
    pub(crate) fn keep_state(&mut self, kept: Arc<crate::exchange::state::KeptState>) {
        let _ = self.consumer.context().state.set(kept);
    }

    /// Records the positions checkpoint `n` covers (called as barrier `n` leaves), and for
    /// the reader of an exchange keeping state, its progress in each partition with them.
    pub fn snapshot_positions(&mut self, n: u64) {
        self.forget_revoked();
        self.pending_checkpoints.insert(n, self.positions.clone());
        self.take_restored();
        if let (Some(relay), Some(_)) = (self.relay.as_ref(), self.consumer.context().state.get()) {
            self.pending_progress
                .insert(n, relay.progress(&self.watermarks));
        }
    }

    /// The reader of an exchange keeping state takes in what the restores of its partitions
    /// gave (one atomic load when there is nothing new), after following the rebalances that
    /// made them, so that a partition revoked and given back keeps its restored watermark.
    fn take_restored(&mut self) {
        let (Some(relay), Some(kept)) = (self.relay.as_ref(), self.consumer.context().state.get())
        else {
            return;
        };
        if !kept.restored_since(relay.restores_taken()) {
            return;
        }
        self.forget_revoked();
        if let (Some(relay), Some(kept)) =
            (self.relay.as_mut(), self.consumer.context().state.get())
        {
            relay.take_restored(kept, &mut self.watermarks);
        }
    }

    /// Every sink acknowledged checkpoint `n`: commit its positions (and drop older ones),
    /// waiting for the broker's answer (at most `--kafka-timeout`).
    pub fn commit_checkpoint(&mut self, n: u64) -> Result<(), BoxError> {
        self.commit_checkpoint_with(n, true)
    }

    /// [`KafkaSource::commit_checkpoint`], waiting for the answer or not.
    fn commit_checkpoint_with(&mut self, n: u64, wait: bool) -> Result<(), BoxError> {
        self.forget_revoked();
        let Some(positions) = self.pending_checkpoints.remove(&n) else {
            return Ok(());
        };
        self.pending_checkpoints.retain(|k, _| *k > n);
        let progress = self.pending_progress.remove(&n).unwrap_or_default();
        self.pending_progress.retain(|k, _| *k > n);
        // The state's commit records first: a crash between them leaves the group's commit
        // behind the state's, and the next owner reads from the state's.
        if let Some(kept) = self.consumer.context().state.get() {
            kept.commit(n, &positions, &progress)?;
        }
        self.retry_commit_at = None;
        self.commit(&positions, wait)?;
        self.unconfirmed = (!wait).then_some(positions);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A skip in an exchange partition's offsets stops the job only where the log now starts
    /// past the offset expected (tansu's offsets skip; the mock deletes by its 5 MB limit).
    #[test]
    fn skipped_offsets_are_a_loss_only_where_the_log_starts_past_them() {
        // Offsets 10..12 skipped, the log still starting at 0 or at 10: nothing deleted.
        assert!(!messages_deleted(10, Some(0)));
        assert!(!messages_deleted(10, Some(10)));
        // The log starts past the offset expected: deleted before they were read.
        assert!(messages_deleted(10, Some(11)));
        // Not known: taken for a loss, and the message says it is not known.
        assert!(messages_deleted(10, None));
        let unknown = lost_exchange_messages("reader", "x", 3, 10, 13, None);
        assert!(
            unknown.contains("offsets 10 to 12 were skipped")
                && unknown.contains("did not say within --kafka-timeout"),
            "{unknown}"
        );
        let deleted = lost_exchange_messages("reader", "x", 3, 10, 13, Some(12));
        assert!(
            deleted.contains(
                "offsets 10 to 12 were deleted by the broker before they were read (the \
                 partition's log starts at 12)"
            ),
            "{deleted}"
        );
    }
}
