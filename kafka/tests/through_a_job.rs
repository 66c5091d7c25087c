//! Kafka in, Kafka out, through a real job on the mock cluster.

mod common;

use common::kafka;

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::topic_partition_list::Offset;
use serde_json::json;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_runtime::{start, JobConfig, JobGraph, Partitioning};

const N: u64 = 3000;

fn sink_records(handle: &tidemark_runtime::JobHandle, id: &str) -> u64 {
    handle
        .metrics()
        .vertex(id)
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.records_in())
        .sum()
}

#[test]
fn every_message_goes_through_and_the_group_commits_the_end() {
    through("orders", "through-group", None);
}

/// With checkpoints, offsets are committed as checkpoints complete (several times while the
/// job runs), and the stop's last checkpoint commits the end.
#[test]
fn with_checkpoints_the_commits_follow_the_sinks() {
    through(
        "orders-cp",
        "through-cp-group",
        Some(Duration::from_millis(100)),
    );
    assert!(kafka().metrics().commits("orders-cp") >= 2);
}

fn through(source_id: &str, group: &str, checkpoint_interval: Option<Duration>) {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 4), ("out".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    common::produce_ids(&bootstrap, "in", 0..N);

    let mut graph = JobGraph::new("through");
    let source = kafka()
        .build_source(json!({
            "brokers": bootstrap,
            "topics": ["in"],
            "group": group,
            "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        }))
        .unwrap();
    let sink = kafka()
        .build_sink(json!({"brokers": bootstrap, "topic": "out"}))
        .unwrap();
    let src = graph.add_source(source_id, 2, source).unwrap();
    let out = graph.add_sink("copy", 2, sink).unwrap();
    graph.connect(src, out, Partitioning::Rebalance).unwrap();
    let config = JobConfig {
        checkpoint_interval,
        ..JobConfig::default()
    };
    let handle = start(graph, config).unwrap();
    let started = Instant::now();
    while sink_records(&handle, "copy") < N && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Lag reaches 0 on every partition once all is read (sampled every 100 ms).
    while (0..4).any(|p| kafka().metrics().partition_lag(source_id, "in", p) != Some(0))
        && started.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in 0..4 {
        assert_eq!(
            kafka().metrics().partition_lag(source_id, "in", p),
            Some(0),
            "partition {p}"
        );
    }
    handle.metrics().register_series(kafka().metrics().clone());
    let text = tidemark_runtime::exporter::render_text(handle.metrics()).unwrap();
    let expected = format!("tidemark_source_lag_seconds{{job_name=\"through\",source_id=\"{source_id}\",source_subtask_index=\"0\"}} 0\n");
    assert!(text.contains(&expected), "{text}");
    handle.stop();
    let result = handle.wait();
    assert_eq!(result.outcome, tidemark_runtime::JobOutcome::Stopped);
    assert_eq!(sink_records_final(&result), N);

    // Every id arrived, exactly once here (no failure happened).
    let seen = common::read_keys(&bootstrap, "out", N as usize, Duration::from_secs(60));
    assert_eq!(seen.len() as u64, N);
    assert!(seen.values().all(|&c| c == 1));
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>()
    );

    // The group committed the end of every partition when the sources closed.
    let (consumer, committed) = testing::committed_offsets(&bootstrap, group, "in", 4);
    let mut total = 0;
    for (p, offset) in (0..).zip(committed) {
        let (_, high) = consumer
            .fetch_watermarks("in", p, Duration::from_secs(10))
            .unwrap();
        assert_eq!(offset, Offset::Offset(high), "partition {p}");
        total += high;
    }
    assert_eq!(total as u64, N);
}

fn sink_records_final(result: &tidemark_runtime::JobResult) -> u64 {
    result
        .metrics
        .vertex("copy")
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.records_in())
        .sum()
}
