//! Benchmark W7 (`docs/kafka.md`, "W7"): messages/s through kafka → filter (keeps all) → kafka at
//! P = 2 on the mock cluster, against a bare rdkafka consume-and-produce loop with the same
//! client settings over the same kind of topics, in the same run; and the marker p99 at the sink
//! with markers every 10 ms.
//!
//! ```sh
//! cargo run --release -p tidemark-kafka --example w7            # 2,000,000 messages
//! W7_MESSAGES=200000 cargo run --release -p tidemark-kafka --example w7
//! ```
//!
//! Prints one line per run: `workload=W7 variant=… messages=… seconds=… msg_per_s=…`, then the
//! ratio tidemark / bare. Every run is bounded by the message count (and a 10-minute guard).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::json;
use tidemark_kafka::{build_sink, build_source, DevCluster, DevClusterOptions};
use tidemark_runtime::testing::MapOperator;
use tidemark_runtime::{start, JobConfig, JobGraph, Partitioning};

const GUARD: Duration = Duration::from_secs(600);

fn main() {
    let n: u64 = std::env::var("W7_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![
            ("in".into(), 4),
            ("out-bare".into(), 4),
            ("out-tidemark".into(), 4),
        ],
        ..DevClusterOptions::default()
    })
    .expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers().to_owned();
    eprintln!("w7: preloading {n} messages into a 4-partition topic on {bootstrap}");
    preload(&bootstrap, n);

    let bare = bare_loop(&bootstrap, n);
    println!(
        "workload=W7 variant=bare-rdkafka parallelism=2 messages={n} seconds={:.3} msg_per_s={:.0}",
        bare,
        n as f64 / bare
    );
    let (secs, p99) = tidemark_job(&bootstrap, n);
    println!(
        "workload=W7 variant=tidemark parallelism=2 messages={n} seconds={secs:.3} msg_per_s={:.0} marker_p99_ms={:.4}",
        n as f64 / secs,
        p99 * 1e3
    );
    println!(
        "workload=W7 stat=ratio tidemark_over_bare={:.3}",
        bare / secs
    );
}

/// W6-like events: an id, a user, an amount, a status.
fn preload(bootstrap: &str, n: u64) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    let mut value = String::new();
    for id in 0..n {
        value.clear();
        use std::fmt::Write as _;
        let _ = write!(
            value,
            r#"{{"id":{id},"user":"u{}","value":{},"status":"paid"}}"#,
            id % 1000,
            id % 500
        );
        let key = (id % 1000).to_string();
        let mut record = BaseRecord::to("in").payload(&value).key(&key);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// Two threads, each a consumer in one group and a producer: read, write the payload as it
/// is, until the group has read `n` messages.
fn bare_loop(bootstrap: &str, n: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let bootstrap = bootstrap.to_owned();
            let done = done.clone();
            std::thread::spawn(move || {
                let consumer: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("group.id", "w7-bare")
                    .set("partition.assignment.strategy", "cooperative-sticky")
                    .set("auto.offset.reset", "earliest")
                    .set("enable.auto.offset.store", "false")
                    .set("client.id", format!("w7-bare-{i}"))
                    .create()
                    .unwrap();
                consumer.subscribe(&["in"]).unwrap();
                let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("linger.ms", "5")
                    .create()
                    .unwrap();
                while done.load(Ordering::Relaxed) < n && started.elapsed() < GUARD {
                    let Some(Ok(m)) = consumer.poll(Duration::from_millis(10)) else {
                        continue;
                    };
                    let key = m.key().unwrap_or_default();
                    let mut record = BaseRecord::to("out-bare")
                        .payload(m.payload().unwrap_or_default())
                        .key(key);
                    if let Some(ts) = m.timestamp().to_millis() {
                        record = record.timestamp(ts);
                    }
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((_, back)) => {
                                record = back;
                                std::thread::sleep(Duration::from_micros(200));
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                producer.flush(Duration::from_secs(60)).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    started.elapsed().as_secs_f64()
}

/// kafka → filter (keeps all) → kafka at P = 2, markers every 10 ms; returns the seconds until
/// the sinks acknowledged `n` messages, and the sinks' marker p99 in seconds.
fn tidemark_job(bootstrap: &str, n: u64) -> (f64, f64) {
    let mut graph = JobGraph::new("w7");
    let source = build_source(json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": "w7-tidemark",
    }))
    .unwrap();
    let sink = build_sink(json!({"brokers": bootstrap, "topic": "out-tidemark"})).unwrap();
    let src = graph.add_source("in", 2, source).unwrap();
    let keep = graph
        .add_operator("filter", 2, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let out = graph.add_sink("out", 2, sink).unwrap();
    graph.connect(src, keep, Partitioning::Forward).unwrap();
    graph.connect(keep, out, Partitioning::Forward).unwrap();
    let mut config = JobConfig::default();
    config.latency.interval = Duration::from_millis(10);
    let started = Instant::now();
    let handle = start(graph, config).unwrap();
    let sunk = |h: &tidemark_runtime::JobHandle| -> u64 {
        h.metrics()
            .vertex("out")
            .unwrap()
            .subtasks
            .iter()
            .map(|s| s.records_in())
            .sum()
    };
    while sunk(&handle) < n && started.elapsed() < GUARD {
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = tidemark_runtime::exporter::render_text(handle.metrics()).unwrap();
    if let Ok(path) = std::env::var("W7_METRICS") {
        let _ = std::fs::write(path, &text);
    }
    handle.stop();
    let _ = handle.wait();
    let secs = started.elapsed().as_secs_f64();
    let p99 = text
        .lines()
        .filter(|l| {
            l.starts_with("tidemark_marker_latency_window_seconds{")
                && l.contains("operator_id=\"out\"")
                && l.contains("quantile=\"0.99\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max);
    (secs, p99)
}
