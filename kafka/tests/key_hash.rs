//! The key hash is Kafka's default partitioner's (`docs/state.md`, "Key groups and
//! rescaling"; `docs/kafka.md`, "Exchanges through Kafka"): a plain librdkafka producer with
//! the `murmur2_random` partitioner, keyed by a key's canonical bytes, puts each message on
//! partition `key_hash mod N`, and an exchange writer writes each record with those bytes as
//! its message key on that same partition. Both on librdkafka's mock cluster.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, ThreadedProducer};
use tidemark_kafka::exchange::{Exchange, HEADER_CONTROL, HEADER_KEY_TYPE};
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_runtime::key_hash::hash_bytes;
use tidemark_runtime::{Map, Record, SubtaskContext, Value};

const PARTITIONS: i32 = 7;

/// Keys of every type: strings (non-ASCII and empty too), ints (negative too), doubles,
/// bools, null, lists and maps.
fn keys() -> Vec<Value> {
    let mut keys = vec![
        Value::Null,
        Value::Bool(true),
        Value::Bool(false),
        Value::from(""),
        Value::from("zürich"),
        Value::from("日本"),
        Value::Double(2.5),
        Value::Double(-0.0),
        Value::from_json(br#"[1,"a",null]"#).unwrap(),
        Value::from_json(br#"{"b":2,"a":[true]}"#).unwrap(),
        Value::Int(i64::MIN),
        Value::Int(i64::MAX),
    ];
    keys.extend((-60..60).map(Value::Int));
    keys.extend((0..60).map(|i| Value::from(format!("user-{i}").as_str())));
    keys
}

fn canonical(key: &Value) -> Vec<u8> {
    let mut bytes = Vec::new();
    key.write_canonical_bytes(&mut bytes);
    bytes
}

#[test]
fn a_kafka_producer_with_the_murmur2_partitioner_puts_each_key_where_the_key_hash_says() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("keyed".into(), PARTITIONS)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let keys = keys();
    for (i, key) in keys.iter().enumerate() {
        let bytes = canonical(key);
        let value = i.to_string();
        // No partition: librdkafka's partitioner chooses.
        let record = BaseRecord::to("keyed").key(&bytes[..]).payload(&value);
        testing::send_retrying(&producer, record, Duration::from_millis(1));
    }
    testing::flush(&producer);
    let read = testing::read_all(&bootstrap, "keyed", PARTITIONS, Duration::from_secs(60));
    assert_eq!(read.len(), keys.len());
    let mut used = BTreeSet::new();
    for m in &read {
        let i: usize = std::str::from_utf8(m.value.as_deref().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        let bytes = canonical(&keys[i]);
        assert_eq!(
            m.key.as_deref().unwrap_or_default(),
            &bytes[..],
            "key {:?}",
            keys[i]
        );
        let expected = (keys[i].routing_hash() % PARTITIONS as u32) as i32;
        assert_eq!(m.partition, expected, "key {:?}", keys[i]);
        assert_eq!(keys[i].routing_hash(), hash_bytes(&bytes));
        used.insert(m.partition);
    }
    // Spread over the partitions: the check above could not pass by putting all on one.
    assert_eq!(used.len(), PARTITIONS as usize, "{used:?}");
}

#[test]
fn an_exchange_writer_keys_each_record_by_its_canonical_bytes_on_partition_hash_mod_n() {
    let cluster = DevCluster::start(DevClusterOptions::default()).unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let exchange = Exchange::new(
        serde_json::json!({"brokers": bootstrap, "partitions": PARTITIONS}),
        "hash",
        "sum",
        common::kafka(),
    )
    .unwrap();
    let factory = exchange.writer_factory(1);
    let mut writer = factory(&SubtaskContext {
        job_name: "hash".into(),
        vertex_id: "sum.exchange".into(),
        subtask: 0,
        parallelism: 1,
        seed: 1,
    })
    .unwrap();
    let keys = keys();
    let records: Vec<Record> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut event = Map::new();
            event.insert("i", i as i64);
            Record::with_event(key.clone(), event, 1_000)
        })
        .collect();
    // Numeric records (the generator's) too: their int key is hashed without a `Value`.
    let numeric: Vec<Record> = (0..40).map(|k| Record::new(k * 7919, 1.0, 1_000)).collect();
    writer.write_batch(&records).unwrap();
    writer.write_batch(&numeric).unwrap();
    writer.finish().unwrap();
    let read = testing::read_all(
        &bootstrap,
        exchange.topic(),
        PARTITIONS,
        Duration::from_secs(60),
    );
    let data: Vec<_> = read
        .iter()
        .filter(|m| m.header(HEADER_CONTROL).is_none())
        .collect();
    assert_eq!(data.len(), records.len() + numeric.len());
    let mut used = BTreeSet::new();
    for m in data {
        let event = Value::from_json(m.value.as_deref().unwrap()).unwrap();
        let key = match event.get("i") {
            Some(Value::Int(i)) => keys[*i as usize].clone(),
            _ => event.get("key").unwrap().clone(),
        };
        let bytes = canonical(&key);
        assert_eq!(
            m.key.as_deref().unwrap_or_default(),
            &bytes[..],
            "key {key:?}"
        );
        assert_eq!(
            m.header(HEADER_KEY_TYPE),
            Some(key.type_name()),
            "key {key:?}"
        );
        assert_eq!(
            m.partition,
            (hash_bytes(&bytes) % PARTITIONS as u32) as i32,
            "key {key:?}"
        );
        used.insert(m.partition);
    }
    assert_eq!(used.len(), PARTITIONS as usize, "{used:?}");
}
