//! A broker that does not answer fails the job's start within the timeout, with the broker's
//! own error, never a hang.

use std::time::Duration;

use serde_json::json;

use tidemark_runtime::testing::DiscardSink;
use tidemark_runtime::{start, JobConfig, JobGraph, Partitioning, StartError};

/// The Kafka context of this file's jobs.
fn kafka() -> &'static std::sync::Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<std::sync::Arc<tidemark_kafka::KafkaJob>> =
        std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

#[test]
fn a_refused_connection_fails_with_the_broker_error() {
    kafka().set_timeout(Duration::from_secs(2));
    let mut graph = JobGraph::new("nowhere");
    let source = kafka()
        .build_source(json!({"brokers": "127.0.0.1:1", "topics": ["t"]}))
        .unwrap();
    let src = graph.add_source("in", 2, source).unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, sink, Partitioning::Rebalance).unwrap();
    let err = start(graph, JobConfig::default()).unwrap_err();
    let StartError::Factory {
        vertex, message, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(vertex, "in");
    assert!(
        message.starts_with("kafka source \"in\": cannot reach Kafka at 127.0.0.1:1 within 2s: "),
        "{message}"
    );
    assert!(message.contains("Connection refused"), "{message}");

    let mut graph = JobGraph::new("nowhere");
    let src = graph
        .add_source("numbers", 1, |_| {
            Ok(Box::new(tidemark_runtime::testing::CountingSource::new(1)))
        })
        .unwrap();
    let sink = graph
        .add_sink(
            "k",
            1,
            kafka()
                .build_sink(json!({"brokers": "127.0.0.1:1", "topic": "t"}))
                .unwrap(),
        )
        .unwrap();
    graph.connect(src, sink, Partitioning::Forward).unwrap();
    let err = start(graph, JobConfig::default()).unwrap_err().to_string();
    assert!(
        err.contains("kafka sink \"k\": cannot reach Kafka at 127.0.0.1:1 within 2s: "),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
}
