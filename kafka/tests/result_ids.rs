//! Result ids through a real job on the mock cluster (`docs/kafka.md`, "Result ids"): a
//! `reduce` behind a `kafka` source writes, on each output message, the header
//! `tidemark-result-id` naming the vertex, the input message's topic, partition and offset,
//! and the key; the test checks each against the input message it computed the output from.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Headers, Message};
use serde_json::json;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_operators::{BuildEnv, Built, ComponentKind, Registry};
use tidemark_runtime::{start, JobConfig, JobGraph, Partitioning};

#[test]
fn each_reduce_output_names_the_input_message_it_came_from() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2), ("out".into(), 1)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    // 40 messages, 20 per partition, users u0..u4; offsets are each partition's order.
    let producer = testing::producer(&bootstrap);
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut offsets = [0i64; 2];
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..40u64 {
        let partition = (i % 2) as i32;
        let user = format!("u{}", i % 5);
        let value = format!(r#"{{"user":"{user}","i":{i}}}"#);
        let record = rdkafka::producer::BaseRecord::to("in")
            .partition(partition)
            .payload(&value)
            .key(&user);
        testing::send_retrying(&producer, record, Duration::from_millis(1));
        let offset = offsets[partition as usize];
        offsets[partition as usize] += 1;
        *counts.entry(user.clone()).or_default() += 1;
        expected.insert(
            format!("reduce/per_user/in/{partition}/{offset}/0/\"{user}\""),
            user,
        );
    }
    testing::flush(&producer);

    let kafka = tidemark_kafka::KafkaJob::new();
    let mut graph = JobGraph::new("result-ids");
    let source = kafka
        .build_source(json!({
            "brokers": bootstrap,
            "topics": ["in"],
            "group": "result-ids",
            "key": "user",
            "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        }))
        .unwrap();
    let Built::Operator(reduce) = Registry::builtin()
        .build(
            ComponentKind::Operator,
            "reduce",
            json!({"aggregates": {"n": "count"}}),
            &BuildEnv::default(),
        )
        .unwrap()
    else {
        panic!("reduce is an operator")
    };
    let src = graph.add_source("in", 1, source).unwrap();
    let per_user = graph.add_operator("per_user", 1, reduce).unwrap();
    let out = graph
        .add_sink(
            "out",
            1,
            kafka
                .build_sink(json!({"brokers": bootstrap, "topic": "out"}))
                .unwrap(),
        )
        .unwrap();
    graph.connect(src, per_user, Partitioning::Hash).unwrap();
    graph.connect(per_user, out, Partitioning::Forward).unwrap();
    let handle = start(graph, JobConfig::default()).unwrap();

    let consumer = testing::reader(&bootstrap, "out");
    let mut got: BTreeMap<String, (String, u64)> = BTreeMap::new();
    let mut last_count: BTreeMap<String, u64> = BTreeMap::new();
    let started = Instant::now();
    while got.len() < expected.len() && started.elapsed() < Duration::from_secs(120) {
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = m.unwrap();
        let headers = m.headers().expect("every output message has headers");
        let ids: Vec<&[u8]> = headers
            .iter()
            .filter(|h| h.key == "tidemark-result-id")
            .map(|h| h.value.unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "one result id per message");
        let id = String::from_utf8(ids[0].to_vec()).unwrap();
        let event: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        let user = event["key"].as_str().unwrap().to_owned();
        let n = event["n"].as_u64().unwrap();
        // One output per input, the running count one more each time.
        let last = last_count.entry(user.clone()).or_default();
        assert_eq!(n, *last + 1, "{event}");
        *last = n;
        let want_user = expected
            .get(&id)
            .unwrap_or_else(|| panic!("result id {id} names no input message"));
        assert_eq!(&user, want_user, "{id}");
        assert!(got.insert(id.clone(), (user, n)).is_none(), "{id} twice");
    }
    handle.stop();
    handle.wait();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    assert_eq!(last_count, counts);
}
