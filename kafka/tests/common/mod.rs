//! Helpers for the Kafka tests: write and read topics of a mock cluster.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

/// Writes `ids` as JSON messages `{"value": id}` keyed by the id, spread over partitions.
pub fn produce_ids(bootstrap: &str, topic: &str, ids: std::ops::Range<u64>) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for id in ids {
        let value = format!("{{\"value\": {id}}}");
        let key = id.to_string();
        let mut record = BaseRecord::to(topic).payload(&value).key(&key);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Reads `topic` from the beginning until `count` messages arrived or `deadline` passed;
/// returns how often each record key (the message key) was seen.
pub fn read_keys(
    bootstrap: &str,
    topic: &str,
    count: usize,
    deadline: Duration,
) -> BTreeMap<u64, u32> {
    read_field(bootstrap, topic, count, deadline, "key")
}

/// As [`read_keys`], for the messages' `value` field (what [`produce_ids`] wrote).
pub fn read_keys_of_values(
    bootstrap: &str,
    topic: &str,
    count: usize,
    deadline: Duration,
) -> BTreeMap<u64, u32> {
    read_field(bootstrap, topic, count, deadline, "value")
}

fn read_field(
    bootstrap: &str,
    topic: &str,
    count: usize,
    deadline: Duration,
    field: &str,
) -> BTreeMap<u64, u32> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{}", rand_suffix()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut seen = BTreeMap::new();
    let mut n = 0;
    let started = Instant::now();
    while n < count && started.elapsed() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            // The record key travels as the message key; event fields in the payload.
            let id = if field == "key" {
                std::str::from_utf8(m.key().unwrap())
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            } else {
                let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
                v[field].as_u64().unwrap()
            };
            *seen.entry(id).or_insert(0) += 1;
            n += 1;
        }
    }
    seen
}

fn rand_suffix() -> u64 {
    use std::time::SystemTime;
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}
