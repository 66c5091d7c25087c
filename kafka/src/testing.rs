//! Test set-up against a Kafka cluster (usually a [`DevCluster`](crate::DevCluster)): write
//! messages with back-pressure, read a topic back, look at a group's committed offsets.
//!
//! Plain functions for tests, examples and benchmarks; they panic on a broker error, as a test
//! should. Not used by the source, sink or exchange.
//!
//! ```
//! use std::time::Duration;
//! use tidemark_kafka::dev_cluster::{DevCluster, DevClusterOptions};
//! use tidemark_kafka::testing;
//!
//! let cluster = DevCluster::start(DevClusterOptions {
//!     topics: vec![("t".into(), 2)],
//!     ..DevClusterOptions::default()
//! })
//! .unwrap();
//! testing::produce_ids(cluster.bootstrap_servers(), "t", 0..10);
//! let seen = testing::read_keys(cluster.bootstrap_servers(), "t", 10, Duration::from_secs(60));
//! assert_eq!(seen.len(), 10);
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, ToBytes};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// How the warning of a `kafka` source member that left its group before the coordinator said
/// it was settled begins (`--kafka-timeout` ran out; on tansu the group may then be stuck).
pub const NOT_SETTLED_WARNING: &str = crate::departure::NOT_SETTLED;

/// A producer to `bootstrap` with `linger.ms` 5.
pub fn producer(bootstrap: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .unwrap()
}

/// Sends `record`; while the producer's queue is full, sleeps `pause` and tries again.
pub fn send_retrying<K, P>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'_, K, P>,
    pause: Duration,
) where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                record = back;
                std::thread::sleep(pause);
            }
        }
    }
}

/// Waits up to 30 s until every message sent through `producer` is acknowledged.
pub fn flush(producer: &ThreadedProducer<DefaultProducerContext>) {
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Writes each `(partition, key, value)` of `messages` to `topic` (the partition `None`:
/// by the producer's partitioner), retrying on a full queue every 1 ms, then flushes.
pub fn produce<'a>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    messages: impl IntoIterator<Item = (Option<i32>, &'a str, &'a str)>,
) {
    for (partition, key, value) in messages {
        let mut record = BaseRecord::to(topic).payload(value).key(key);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        send_retrying(producer, record, Duration::from_millis(1));
    }
    flush(producer);
}

/// Writes `ids` as JSON messages `{"value": id}` keyed by the id, spread over partitions.
pub fn produce_ids(bootstrap: &str, topic: &str, ids: std::ops::Range<u64>) {
    let messages: Vec<(String, String)> = ids
        .map(|id| (id.to_string(), format!("{{\"value\": {id}}}")))
        .collect();
    produce(
        &producer(bootstrap),
        topic,
        messages.iter().map(|(k, v)| (None, k.as_str(), v.as_str())),
    );
}

/// Reads `topic` from the beginning in a group of its own until `count` messages arrived or
/// `deadline` passed; returns how often each message key (a decimal number) was seen.
pub fn read_keys(
    bootstrap: &str,
    topic: &str,
    count: usize,
    deadline: Duration,
) -> BTreeMap<u64, u32> {
    read_ids(bootstrap, topic, count, deadline, |m| {
        std::str::from_utf8(m.key().unwrap())
            .unwrap()
            .parse::<u64>()
            .unwrap()
    })
}

/// As [`read_keys`], for the JSON messages' `value` field (what [`produce_ids`] writes).
pub fn read_keys_of_values(
    bootstrap: &str,
    topic: &str,
    count: usize,
    deadline: Duration,
) -> BTreeMap<u64, u32> {
    read_ids(bootstrap, topic, count, deadline, |m| {
        let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        v["value"].as_u64().unwrap()
    })
}

fn read_ids(
    bootstrap: &str,
    topic: &str,
    count: usize,
    deadline: Duration,
    id: impl Fn(&rdkafka::message::BorrowedMessage<'_>) -> u64,
) -> BTreeMap<u64, u32> {
    let consumer = reader(bootstrap, topic);
    let mut seen = BTreeMap::new();
    let mut n = 0;
    let started = Instant::now();
    while n < count && started.elapsed() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            *seen.entry(id(&m)).or_insert(0) += 1;
            n += 1;
        }
    }
    seen
}

/// A consumer subscribed to `topic` in a group of its own, reading from the beginning,
/// committing nothing.
pub fn reader(bootstrap: &str, topic: &str) -> BaseConsumer {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{nanos}"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    consumer
}

/// The committed offset of `group` for each partition `0..partitions` of `topic` (in order),
/// with a consumer that can also ask the partitions' watermarks (`fetch_watermarks`).
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> (BaseConsumer, Vec<Offset>) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    let offsets = (0..partitions)
        .map(|p| committed.find_partition(topic, p).unwrap().offset())
        .collect();
    (consumer, offsets)
}

/// The committed offset of `group` (-1: none) and the end (high watermark) of each partition
/// `0..partitions` of `topic`, in order.
pub fn committed_and_end(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(i64, i64)> {
    let (consumer, committed) = committed_offsets(bootstrap, group, topic, partitions);
    (0..)
        .zip(committed)
        .map(|(p, offset)| {
            let offset = match offset {
                Offset::Offset(o) => o,
                _ => -1,
            };
            let (_, end) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            (offset, end)
        })
        .collect()
}

/// One message as [`read_all`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadMessage {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key (`None`: none).
    pub key: Option<Vec<u8>>,
    /// Its headers as (name, value as text), in order.
    pub headers: Vec<(String, String)>,
    /// Its value (`None`: a tombstone or a control message without one).
    pub value: Option<Vec<u8>>,
}

impl ReadMessage {
    /// The value of header `name`, if the message has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every message of partitions `0..partitions` of `topic` up to the ends they have now, in
/// offset order per partition, read without a group (panics after `timeout`).
///
/// Some brokers (tansu) report an end behind what a fetch returns: past the reported ends, the
/// messages that keep coming are read too, until none came for a second and a half (fetches
/// are answered within 50 ms when there is nothing new), or for ten seconds at most, on a
/// topic that is written all the time.
pub fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Vec<ReadMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "tidemark-testing-read-all")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    let mut ends = Vec::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .unwrap();
        ends.push(high);
        // Every partition, also one that looks empty (its reported end may lag).
        tpl.add_partition_offset(topic, p, Offset::Offset(low.max(0)))
            .unwrap();
    }
    let mut next = vec![0i64; partitions as usize];
    for e in tpl.elements() {
        if let Offset::Offset(low) = e.offset() {
            next[e.partition() as usize] = low;
        }
    }
    let mut out = Vec::new();
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + timeout;
    // When every reported end was reached, and when the last message came.
    let mut ends_reached: Option<Instant> = None;
    let mut last_message = Instant::now();
    loop {
        if ends_reached.is_none() && (0..partitions as usize).all(|p| next[p] >= ends[p]) {
            ends_reached = Some(Instant::now());
        }
        if let Some(at) = ends_reached {
            if last_message.elapsed() >= Duration::from_millis(1_500)
                || at.elapsed() >= Duration::from_secs(10)
            {
                break;
            }
        }
        assert!(Instant::now() < deadline, "gave up reading {topic}");
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = m.unwrap();
        last_message = Instant::now();
        let p = m.partition() as usize;
        if m.offset() < next[p] {
            continue;
        }
        next[p] = m.offset() + 1;
        let headers = m
            .headers()
            .map(|h| {
                use rdkafka::message::Headers;
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ReadMessage {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            headers,
            value: m.payload().map(<[u8]>::to_vec),
        });
    }
    out
}

/// How many partitions `topic` has on `bootstrap`'s brokers (`None`: it does not exist),
/// asked with a client that never creates it.
pub fn partition_count(bootstrap: &str, topic: &str) -> Option<usize> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(30))
        .unwrap();
    metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len())
}

/// What the brokers at `bootstrap` answer to CreateTopics for each `(name, partitions,
/// replication)` (only validating, creating nothing, with `validate_only`): the topic's name,
/// or the broker's error code.
pub fn create_topics(
    bootstrap: &str,
    topics: &[(&str, i32, i32)],
    validate_only: bool,
) -> Vec<Result<String, rdkafka::types::RDKafkaErrorCode>> {
    create_topics_with(bootstrap, topics, &[], validate_only)
}

/// [`create_topics`], each topic with the topic configs `configs`.
pub fn create_topics_with(
    bootstrap: &str,
    topics: &[(&str, i32, i32)],
    configs: &[(&str, &str)],
    validate_only: bool,
) -> Vec<Result<String, rdkafka::types::RDKafkaErrorCode>> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, n, r)| {
            configs.iter().fold(
                NewTopic::new(name, *n, TopicReplication::Fixed(*r)),
                |t, (k, v)| t.set(k, v),
            )
        })
        .collect();
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .validate_only(validate_only);
    crate::topics::block_on(admin.create_topics(&new, &options))
        .expect("the brokers answer CreateTopics")
        .into_iter()
        .map(|r| r.map_err(|(_, code)| code))
        .collect()
}
