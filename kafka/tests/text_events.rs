//! Events kept as the text they were read as (`Record::from_json_object`), through a real job
//! on the mock cluster: an unchanged event leaves byte for byte as it came in, one a `map`
//! added a field to as its text with the field after its own, one whose text cannot take it
//! (a repeated name, several lines) as compact JSON, and a malformed message still follows
//! `on_error` at the source.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use serde_json::json;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_operators::{BuildEnv, Built, ComponentKind, Registry};
use tidemark_runtime::{start, DropReason, JobConfig, JobGraph, Partitioning};

/// The Kafka context of this file's jobs.
fn kafka() -> &'static std::sync::Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<std::sync::Arc<tidemark_kafka::KafkaJob>> =
        std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

/// Reads `count` message values of `topic` from the start (at most 60 s), keyed by message key.
fn read_values(bootstrap: &str, topic: &str, count: usize) -> BTreeMap<String, String> {
    let consumer = testing::reader(bootstrap, topic);
    let mut seen = BTreeMap::new();
    let started = Instant::now();
    while seen.len() < count && started.elapsed() < Duration::from_secs(60) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
            let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
            seen.insert(key, value);
        }
    }
    seen
}

fn operator(type_name: &str, config: serde_json::Value) -> Built {
    Registry::builtin()
        .build(
            ComponentKind::Operator,
            type_name,
            config,
            &BuildEnv::default(),
        )
        .unwrap()
}

#[test]
fn unchanged_events_leave_as_they_came_and_changed_ones_as_compact_json() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2), ("paid".into(), 2), ("flagged".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    // Spacing, a number spelled with an exponent, a repeated name, an escape: what a parse
    // and a rewrite would change.
    let messages = [
        ("a", r#"{ "id": 1, "status": "paid", "amount": 1.50e2 }"#),
        ("b", r#"{"id":2,"status":"open","amount":7}"#),
        (
            "c",
            r#"{"id": 3, "status": "paid", "note": "caf\u00e9", "id": 4}"#,
        ),
        ("d", "{\"id\": 5,\n \"status\": \"paid\"}"),
        ("e", r#"{"id": 6, "status": "paid""#),
        ("f", r#"[1, 2]"#),
    ];
    testing::produce(
        &testing::producer(&bootstrap),
        "in",
        messages.iter().map(|(k, v)| (None, *k, *v)),
    );

    let mut graph = JobGraph::new("text-events");
    let source = kafka()
        .build_source(json!({
            "brokers": bootstrap,
            "topics": ["in"],
            "group": "text-events",
            "on_error": "skip",
            "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        }))
        .unwrap();
    let Built::Operator(paid) = operator("filter", json!({"where": r#"status == "paid""#})) else {
        panic!("filter is an operator")
    };
    let Built::Operator(flag) = operator("map", json!({"set": {"flag": "id > 2"}})) else {
        panic!("map is an operator")
    };
    let src = graph.add_source("in", 1, source).unwrap();
    let paid = graph.add_operator("paid", 1, paid).unwrap();
    let flag = graph.add_operator("flag", 1, flag).unwrap();
    let paid_out = graph
        .add_sink(
            "paid-out",
            1,
            kafka()
                .build_sink(json!({"brokers": bootstrap, "topic": "paid"}))
                .unwrap(),
        )
        .unwrap();
    let flag_out = graph
        .add_sink(
            "flag-out",
            1,
            kafka()
                .build_sink(json!({"brokers": bootstrap, "topic": "flagged"}))
                .unwrap(),
        )
        .unwrap();
    graph.connect(src, paid, Partitioning::Forward).unwrap();
    graph.connect(src, flag, Partitioning::Forward).unwrap();
    graph
        .connect(paid, paid_out, Partitioning::Forward)
        .unwrap();
    graph
        .connect(flag, flag_out, Partitioning::Forward)
        .unwrap();
    let handle = start(graph, JobConfig::default()).unwrap();

    let paid = read_values(&bootstrap, "paid", 3);
    let flagged = read_values(&bootstrap, "flagged", 4);
    handle.stop();
    let result = handle.wait();
    let malformed =
        result.metrics.vertex("in").unwrap().subtasks[0].records_dropped(DropReason::Malformed);

    // Unchanged: the text as it came in (trimmed of the spaces around the object); the
    // message over two lines was parsed at once and is written compact.
    let expected_paid: BTreeMap<String, String> = [
        ("a", r#"{ "id": 1, "status": "paid", "amount": 1.50e2 }"#),
        (
            "c",
            r#"{"id": 3, "status": "paid", "note": "caf\u00e9", "id": 4}"#,
        ),
        ("d", r#"{"id":5,"status":"paid"}"#),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(paid, expected_paid);
    // A field added by `map`: the text, then the field (spacing and number spelling as read);
    // with a repeated name parsed, changed and written compact (the name once, its last value
    // in its first place); over two lines, parsed when read.
    let expected_flagged: BTreeMap<String, String> = [
        (
            "a",
            r#"{ "id": 1, "status": "paid", "amount": 1.50e2 ,"flag":false}"#,
        ),
        ("b", r#"{"id":2,"status":"open","amount":7,"flag":false}"#),
        ("c", r#"{"id":4,"status":"paid","note":"café","flag":true}"#),
        ("d", r#"{"id":5,"status":"paid","flag":true}"#),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(flagged, expected_flagged);
    // The same JSON object the made event writes.
    let made: serde_json::Value =
        serde_json::from_str(r#"{"id":1,"status":"paid","amount":150.0,"flag":false}"#).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&flagged["a"]).unwrap(),
        made
    );
    // The two malformed messages were counted and skipped at the source.
    assert_eq!(malformed, 2);
}
