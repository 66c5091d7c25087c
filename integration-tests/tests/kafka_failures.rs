//! Kafka failures through the real binary (`docs/kafka.md`, "Failures and timeouts"): whatever
//! is wrong with the brokers or the topics, `tidemark run` fails within `--kafka-timeout` with
//! the broker's own error and exit 1, and writes a `failed` report; it never hangs.
//!
//! - a topic the brokers do not have (source; sink when the brokers do not create topics), and
//!   the sink's topic created on first write when they do;
//! - a "broker" that accepts connections and never answers, and a host that does not resolve;
//! - the brokers going away while the job runs (source side and sink side).
#![cfg(unix)]

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::{Output, Proc, TempDir};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use tidemark_kafka::{DevCluster, DevClusterOptions};

/// The `--kafka-timeout` of these tests: short, so failures come quickly.
const KAFKA_TIMEOUT: &str = "3s";

fn run_args(job: &str) -> Vec<String> {
    [
        "run",
        job,
        "--kafka-timeout",
        KAFKA_TIMEOUT,
        "--metrics-addr",
        "127.0.0.1:0",
        "--report-file",
        "report.json",
    ]
    .map(String::from)
    .to_vec()
}

/// Runs `job` (a file in `dir`) to its end and checks the common contract of a Kafka failure:
/// exit 1, a `failed` report with the same error; returns the output.
fn run_failing(dir: &TempDir, job: &str) -> Output {
    let out = common::tidemark(dir.path(), run_args(job));
    assert_eq!(out.code(), 1, "{job}: {}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&dir.read("report.json")).unwrap();
    assert_eq!(report["outcome"], "failed", "{report}");
    assert_eq!(report["exit_code"], 1, "{report}");
    out
}

fn kafka_to_discard(bootstrap: &str, topic: &str) -> String {
    format!(
        "name: failing
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [{topic}]
sinks:
  out:
    type: discard
    input: orders
"
    )
}

fn numbers_to_kafka(bootstrap: &str, topic: &str, count: &str, properties: &str) -> String {
    format!(
        "name: writing
sources:
  numbers:
    type: generator
    {count}
sinks:
  out:
    type: kafka
    input: numbers
    brokers: {bootstrap}
    topic: {topic}
    properties: {properties}
"
    )
}

#[test]
fn an_unknown_topic_fails_within_the_timeout_with_the_broker_error() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("orders".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("kafka-unknown-topic");

    // A source never asks the brokers to create what it reads.
    dir.write("source.yaml", &kafka_to_discard(&bootstrap, "nosuch"));
    let out = run_failing(&dir, "source.yaml");
    let expected = format!(
        "kafka source \"orders\": topic \"nosuch\" is not usable on {bootstrap} after waiting 3s: \
         UnknownTopicOrPartition (Broker: Unknown topic or partition) (create it, or check the \
         name)"
    );
    assert!(out.stderr.contains(&expected), "{}", out.stderr);

    // A sink lets brokers that create topics on first write do so (librdkafka's producer
    // default); told not to, an unknown topic fails the same way.
    dir.write(
        "sink.yaml",
        &numbers_to_kafka(
            &bootstrap,
            "nosuch-out",
            "count: 10",
            "{allow.auto.create.topics: false}",
        ),
    );
    let out = run_failing(&dir, "sink.yaml");
    assert!(
        out.stderr.contains(&format!(
            "kafka sink \"out\": topic \"nosuch-out\" is not usable on {bootstrap} after waiting \
             3s: UnknownTopicOrPartition (Broker: Unknown topic or partition) (create it, or let \
             the brokers create \
             topics on first write: auto.create.topics.enable)"
        )),
        "{}",
        out.stderr
    );
    // The mock cluster, like a default Apache Kafka broker, creates a topic on first write.
    dir.write(
        "created.yaml",
        &numbers_to_kafka(&bootstrap, "made-on-write", "count: 10", "{}"),
    );
    let out = common::tidemark(dir.path(), run_args("created.yaml"));
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let written: i64 = (0..4)
        .map(|p| {
            consumer
                .fetch_watermarks("made-on-write", p, Duration::from_secs(10))
                .map(|(low, high)| high - low)
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(written, 10);
}

#[test]
fn a_broker_that_never_answers_or_does_not_resolve_fails_within_the_timeout() {
    // Accepts connections and never says a word: librdkafka would wait for its API versions.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let dir = TempDir::new("kafka-silent");
    for (file, brokers) in [
        ("silent.yaml", silent_addr.to_string()),
        ("unresolved.yaml", "no-such-host.invalid:9092".to_owned()),
    ] {
        dir.write(file, &kafka_to_discard(&brokers, "orders"));
        let out = run_failing(&dir, file);
        assert!(
            out.stderr.contains(&format!(
                "kafka source \"orders\": cannot reach Kafka at {brokers} within 3s: "
            )),
            "{file}: {}",
            out.stderr
        );
    }
    drop(silent);
}

fn produce(bootstrap: &str, topic: &str, n: u64) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for id in 0..n {
        let value = format!("{{\"value\": {id}}}");
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(&value))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn spawn(dir: &Path, job: &str) -> Proc {
    let mut p = Proc::spawn(dir, run_args(job));
    p.metrics_addr();
    p
}

/// The brokers go away while jobs run: a job reading Kafka and a job writing it both fail
/// within `--kafka-timeout` of it, exit 1, with the broker's error; neither hangs.
#[test]
fn brokers_lost_while_running_fail_the_job_with_the_broker_error() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("orders".into(), 2), ("out".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    produce(&bootstrap, "orders", 100);
    let reading = TempDir::new("kafka-lost-reading");
    reading.write("job.yaml", &kafka_to_discard(&bootstrap, "orders"));
    let writing = TempDir::new("kafka-lost-writing");
    writing.write(
        "job.yaml",
        &numbers_to_kafka(&bootstrap, "out", "rate: 200", "{}"),
    );
    let mut reader = spawn(reading.path(), "job.yaml");
    let mut writer = spawn(writing.path(), "job.yaml");
    // Both are at work: the reader has read what was there, the writer has written some.
    common::scrape_until(reader_addr(&mut reader), "the reader to read 100", |m| {
        m.total("tidemark_records_in_total") >= 100.0
    });
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let written = || -> i64 {
        (0..2)
            .map(|p| {
                consumer
                    .fetch_watermarks("out", p, Duration::from_secs(10))
                    .map(|(_, high)| high)
                    .unwrap_or(0)
            })
            .sum()
    };
    let started = std::time::Instant::now();
    while written() == 0 {
        assert!(
            started.elapsed() < common::TIMEOUT,
            "the writer wrote nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(consumer);

    drop(cluster);
    for (proc, what) in [
        (&mut reader, "kafka source \"orders\""),
        (&mut writer, "kafka sink \"out\""),
    ] {
        let code = proc.wait_code();
        let stderr = proc.stderr();
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(what), "{stderr}");
        // The broker's own words: the refused reconnection, or librdkafka's verdict on it.
        assert!(
            stderr.contains("Connection refused")
                || stderr.contains("All broker connections are down")
                || stderr.contains("Message timed out"),
            "{stderr}"
        );
    }
    assert!(
        reader.stderr().contains(&format!(
            "kafka source \"orders\": lost Kafka at {bootstrap}: not usable for 3s \
             (--kafka-timeout): "
        )),
        "{}",
        reader.stderr()
    );
}

fn reader_addr(p: &mut Proc) -> std::net::SocketAddr {
    p.metrics_addr()
}
