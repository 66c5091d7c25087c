//! CEL in the Kafka source and sink, through a real job on the mock cluster: the source's
//! `key:` and `timestamp:` (an RFC 3339 field), the sink's `key:`, and bad expressions refused
//! when the job is built.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::message::{Message, Timestamp};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, ThreadedProducer};
use serde_json::json;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_operators::{ConfigError, SettingProblem};
use tidemark_runtime::{start, JobConfig, JobGraph, JobOutcome, Partitioning};

/// The Kafka context of this file's jobs.
fn kafka() -> &'static std::sync::Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<std::sync::Arc<tidemark_kafka::KafkaJob>> =
        std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

const N: u64 = 200;
/// 2026-11-30T12:00:00Z in ms.
const BASE_MS: i64 = 1_796_040_000_000;

/// Writes `{"id": i, "region": "eu"|"us", "at": "<RFC 3339, BASE + i ms>"}` keyed by `m<i>`.
fn produce(bootstrap: &str) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for id in 0..N {
        let region = if id % 2 == 0 { "eu" } else { "us" };
        let value = format!(
            r#"{{"id": {id}, "region": "{region}", "at": "2026-11-30T12:00:00.{id:03}Z"}}"#
        );
        let key = format!("m{id}");
        // A message timestamp far from the field's, so the test sees which one was taken.
        let record = BaseRecord::to("in")
            .payload(&value)
            .key(&key)
            .timestamp(1_000);
        testing::send_retrying(&producer, record, Duration::from_millis(1));
    }
    testing::flush(&producer);
}

/// Reads `topic` from the start: id (from the value) → (message key, message timestamp ms).
fn read(bootstrap: &str, topic: &str) -> BTreeMap<u64, (Option<String>, Option<i64>)> {
    let consumer = testing::reader(bootstrap, topic);
    let mut seen = BTreeMap::new();
    let started = Instant::now();
    while (seen.len() as u64) < N && started.elapsed() < Duration::from_secs(60) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            let key = m.key().map(|k| String::from_utf8(k.to_vec()).unwrap());
            let ts = match m.timestamp() {
                Timestamp::CreateTime(ms) => Some(ms),
                _ => None,
            };
            seen.insert(v["id"].as_u64().unwrap(), (key, ts));
        }
    }
    seen
}

#[test]
fn cel_keys_and_rfc3339_timestamps_through_a_job() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2), ("plain".into(), 2), ("keyed".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    produce(&bootstrap);

    let mut graph = JobGraph::new("expressions");
    let source = kafka()
        .build_source(json!({
            "brokers": bootstrap,
            "topics": ["in"],
            "group": "expressions-group",
            "start": "earliest",
            // record.key is the message key inside the expression.
            "key": "region + '-' + string(id) + '-' + record.key",
            "timestamp": "at",
        }))
        .unwrap();
    // Default sink key: the record key; the timestamp travels as the message timestamp.
    let plain = kafka()
        .build_sink(json!({"brokers": bootstrap, "topic": "plain"}))
        .unwrap();
    let keyed = kafka()
        .build_sink(json!({
            "brokers": bootstrap,
            "topic": "keyed",
            "key": "'k' + string(id * 10) + '@' + string(record.timestamp)",
        }))
        .unwrap();
    let src = graph.add_source("orders", 1, source).unwrap();
    let plain = graph.add_sink("plain", 1, plain).unwrap();
    let keyed = graph.add_sink("keyed", 1, keyed).unwrap();
    graph.connect(src, plain, Partitioning::Forward).unwrap();
    graph.connect(src, keyed, Partitioning::Forward).unwrap();
    let handle = start(graph, JobConfig::default()).unwrap();

    let plain = read(&bootstrap, "plain");
    let keyed = read(&bootstrap, "keyed");
    handle.stop();
    assert_eq!(handle.wait().outcome, JobOutcome::Stopped);

    assert_eq!(plain.len() as u64, N, "{plain:?}");
    assert_eq!(keyed.len() as u64, N, "{keyed:?}");
    for id in 0..N {
        let region = if id % 2 == 0 { "eu" } else { "us" };
        let ms = BASE_MS + id as i64;
        assert_eq!(
            plain[&id],
            (Some(format!("{region}-{id}-m{id}")), Some(ms)),
            "id {id}"
        );
        assert_eq!(
            keyed[&id],
            (Some(format!("k{}@{ms}", id * 10)), Some(ms)),
            "id {id}"
        );
    }
}

#[test]
fn bad_expressions_are_refused_when_the_job_is_built() {
    let expression = |r: Result<(), ConfigError>| {
        let e = r.unwrap_err();
        let text = e.to_string();
        let ConfigError::Invalid { mut problems, .. } = e else {
            panic!("not a settings error: {text}")
        };
        let field = problems.remove(0);
        match field.problem {
            SettingProblem::Expression {
                expression, column, ..
            } => (field.path.join("."), expression, column, text),
            other => panic!("not an expression error: {other:?} ({text})"),
        }
    };
    let source = |key: &str, ts: &str| {
        kafka()
            .build_source(json!({"brokers": "h:1", "topics": ["t"], key: ts}))
            .map(|_| ())
    };
    let (path, expr, column, text) = expression(source("key", "region +"));
    assert_eq!(
        (path.as_str(), expr.as_str(), column),
        ("key", "region +", 9),
        "{text}"
    );
    let (path, expr, _, text) = expression(source("timestamp", "nosuch(at)"));
    assert_eq!(
        (path.as_str(), expr.as_str()),
        ("timestamp", "nosuch(at)"),
        "{text}"
    );
    let (path, expr, _, text) = expression(
        kafka()
            .build_sink(json!({"brokers": "h:1", "topic": "t", "key": "string(key"}))
            .map(|_| ()),
    );
    assert_eq!(
        (path.as_str(), expr.as_str()),
        ("key", "string(key"),
        "{text}"
    );
}
