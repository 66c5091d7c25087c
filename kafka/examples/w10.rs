//! Benchmark W10 (`docs/performance.md`, "W10"; `docs/formats.md`): Avro events in the
//! Confluent wire format (one schema id) through kafka → filter `status == "paid"` → kafka
//! (`format: avro` both ends) at P = 2 on the mock cluster, against a bare loop that consumes
//! the same topic with the same client settings and decodes each message with the same Avro
//! crate (`apache-avro`) into its value type, in the same run.
//!
//! ```sh
//! cargo run --release -p tidemark-kafka --example w10             # 300,000 messages, 1 round
//! W10_MESSAGES=300000 W10_ROUNDS=3 cargo run --release -p tidemark-kafka --example w10
//! ```
//!
//! The spec's 2 million messages do not fit the mock cluster, which keeps about 5 MB per
//! partition (older messages are dropped and the run would never end): 300,000 W6-like events of
//! about 30 bytes each is what it holds. A small Schema Registry stand-in runs inside the
//! example (schema by id, register, subjects).
//!
//! Each round runs the bare loop, then Tidemark, each in a consumer group of its own reading
//! the whole preloaded topic. The bare loop is two threads, each a consumer of the group
//! that decodes every message's Avro value (after the 5-byte header) with a
//! `GenericDatumReader` made once; it ends when the group has decoded all n. Tidemark ends when
//! the output topic holds every paid event (a third). Rates are those of the steady state, from
//! 10 % to 90 % of the messages decoded (bare) or in the output topic (Tidemark, asked every
//! 2 ms), so the group join and a rebalance stall of the mock's at the start are left out (as
//! W7's `middle` rates).
//!
//! Prints one line per run, `workload=W10 round=… variant=… messages=… middle_seconds=…
//! middle_msg_per_s=…` (input messages per second: Tidemark reads every message and writes a
//! third), then per round `stat=ratio tidemark_over_bare=…` and the median over the rounds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::json;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_operators::formats::{avro, wire, AvroReader, AvroWriter};
use tidemark_operators::{BuildEnv, Built, ComponentKind, Registry};
use tidemark_runtime::{start, JobConfig, JobGraph, Map, Partitioning};

const GUARD: Duration = Duration::from_secs(600);

/// The W6 event as Avro.
const SCHEMA: &str = r#"{"type":"record","name":"Event","namespace":"w10","fields":[
  {"name":"id","type":"long"},
  {"name":"user","type":"string"},
  {"name":"amount","type":"double"},
  {"name":"status","type":"string"},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

fn kafka() -> &'static Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<Arc<tidemark_kafka::KafkaJob>> = std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

fn main() {
    let env = |k: &str, d: u64| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("W10_MESSAGES", 300_000);
    let rounds = env("W10_ROUNDS", 1);
    let registry = serve_registry();
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 4)],
        ..DevClusterOptions::default()
    })
    .expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers().to_owned();
    eprintln!("w10: preloading {n} Avro messages into a 4-partition topic on {bootstrap}");
    preload(&bootstrap, n);
    let dir = std::env::temp_dir().join(format!("tidemark-w10-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema_file = dir.join("event.avsc");
    std::fs::write(&schema_file, SCHEMA).unwrap();
    let paid = n.div_ceil(3);
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let bare = bare_loop(&bootstrap, &format!("w10-bare-{round}"), n);
        let out = format!("out-{round}");
        cluster.create_topic(&out, 4).expect("output topic");
        let job = tidemark_job(
            &bootstrap,
            &registry,
            &schema_file,
            &format!("w10-tidemark-{round}"),
            &out,
            paid,
        );
        for (variant, seconds) in [("bare-avro-decode", bare), ("tidemark", job)] {
            println!(
                "workload=W10 round={round} variant={variant} parallelism=2 messages={n} \
                 middle_seconds={seconds:.3} middle_msg_per_s={:.0}",
                0.8 * n as f64 / seconds
            );
        }
        let ratio = bare / job;
        ratios.push(ratio);
        println!("workload=W10 round={round} stat=ratio tidemark_over_bare={ratio:.3}");
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "workload=W10 stat=summary rounds={rounds} ratio_median={:.3}",
        ratios[ratios.len() / 2]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// W6-like events (a third of them paid), Avro in the wire format with schema id 1.
fn preload(bootstrap: &str, n: u64) {
    let writer = AvroWriter::new(avro::parse_schema(SCHEMA).unwrap()).unwrap();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    let mut value = Vec::new();
    for id in 0..n {
        let mut event = Map::with_capacity(5);
        event.push_unchecked("id", id as i64);
        event.push_unchecked("user", format!("u{}", id % 10_000));
        event.push_unchecked("amount", (id % 50_000) as f64 / 100.0);
        event.push_unchecked("status", ["paid", "refunded", "open"][(id % 3) as usize]);
        event.push_unchecked("ts", 1_700_000_000_000 + id as i64);
        value.clear();
        wire::write_header(&mut value, 1);
        writer.write(&event, &mut value).unwrap();
        let key = (id % 10_000).to_string();
        let record = BaseRecord::to("in").payload(&value).key(&key);
        testing::send_retrying(&producer, record, Duration::from_micros(200));
    }
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// When a count crossed 10 % and 90 % of `n`, polled every 2 ms until `done` says stop; returns
/// the seconds between them (the steady state: no group join, no stragglers, no rebalance
/// stall at the start).
fn middle(n: u64, count: impl Fn() -> u64, done: impl Fn(u64) -> bool) -> f64 {
    let started = Instant::now();
    let (mut t10, mut t90) = (None, None);
    loop {
        let c = count();
        let now = started.elapsed().as_secs_f64();
        if t10.is_none() && c * 10 >= n {
            t10 = Some(now);
        }
        if t90.is_none() && c * 10 >= n * 9 {
            t90 = Some(now);
        }
        if done(c) || started.elapsed() > GUARD {
            return t90.unwrap_or(now) - t10.unwrap_or(0.0);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Two threads of one consumer group, each decoding every message it reads into the crate's
/// value; returns the seconds from 10 % to 90 % of the messages decoded.
fn bare_loop(bootstrap: &str, group: &str, n: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let (bootstrap, group) = (bootstrap.to_owned(), group.to_owned());
            let done = done.clone();
            std::thread::spawn(move || {
                let reader = AvroReader::new(avro::parse_schema(SCHEMA).unwrap(), None).unwrap();
                let consumer: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("group.id", &group)
                    .set("partition.assignment.strategy", "cooperative-sticky")
                    .set("auto.offset.reset", "earliest")
                    .set("enable.auto.offset.store", "false")
                    .set("enable.partition.eof", "false")
                    .set("session.timeout.ms", "6000")
                    .set("heartbeat.interval.ms", "500")
                    .set("client.id", format!("{group}-{i}"))
                    .create()
                    .unwrap();
                consumer.subscribe(&["in"]).unwrap();
                let started = Instant::now();
                while done.load(Ordering::Relaxed) < n && started.elapsed() < GUARD {
                    let Some(Ok(m)) = consumer.poll(Duration::from_millis(10)) else {
                        continue;
                    };
                    let (_, body) = wire::split(m.payload().unwrap_or_default()).unwrap();
                    let value = reader.read_value(body).unwrap();
                    std::hint::black_box(value);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let seconds = middle(n, || done.load(Ordering::Relaxed), |c| c >= n);
    for t in threads {
        t.join().unwrap();
    }
    seconds
}

/// kafka (avro) → filter `status == "paid"` → kafka (avro) at P = 2; returns the seconds from
/// 10 % to 90 % of the `expected` messages in the output topic (asked every 2 ms).
fn tidemark_job(
    bootstrap: &str,
    registry: &str,
    schema: &std::path::Path,
    group: &str,
    out: &str,
    expected: u64,
) -> f64 {
    let mut graph = JobGraph::new("w10");
    let source = kafka()
        .build_source(json!({
            "brokers": bootstrap,
            "topics": ["in"],
            "group": group,
            "start": "earliest",
            "format": "avro",
            "schema_registry": {"url": registry},
            "properties": {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
        }))
        .unwrap();
    let Built::Operator(filter) = Registry::builtin()
        .build(
            ComponentKind::Operator,
            "filter",
            json!({"where": "status == \"paid\""}),
            &BuildEnv::default(),
        )
        .unwrap()
    else {
        unreachable!("filter is an operator")
    };
    let sink = kafka()
        .build_sink(json!({
            "brokers": bootstrap,
            "topic": out,
            "format": "avro",
            "schema": schema,
            "schema_registry": {"url": registry},
        }))
        .unwrap();
    let src = graph.add_source("in", 2, source).unwrap();
    let keep = graph.add_operator("filter", 2, filter).unwrap();
    let sink = graph.add_sink("out", 2, sink).unwrap();
    graph.connect(src, keep, Partitioning::Forward).unwrap();
    graph.connect(keep, sink, Partitioning::Forward).unwrap();
    let handle = start(graph, JobConfig::default()).unwrap();
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let written = || -> u64 {
        (0..4)
            .map(|p| {
                client
                    .fetch_watermarks(out, p, Duration::from_secs(10))
                    .map_or(0, |(_, high)| high.max(0) as u64)
            })
            .sum()
    };
    let seconds = middle(expected, written, |c| c >= expected);
    handle.stop();
    let _ = handle.wait();
    seconds
}

/// A registry stand-in on 127.0.0.1 that knows one schema, id 1 (and gives id 1 to whatever
/// is registered): enough for the source's and the sink's calls. Returns its URL.
fn serve_registry() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                    if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let reply = if request.starts_with("GET /schemas/ids/1 ") {
                    json!({ "schema": SCHEMA }).to_string()
                } else if request.starts_with("GET /subjects ") {
                    "[]".to_owned()
                } else {
                    json!({"id": 1}).to_string()
                };
                let _ = write!(
                    &stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            });
        }
    });
    url
}
