//! Exchanges through Kafka (`docs/kafka.md`, "Scale-out: exchanges through Kafka"): real
//! `tidemark run` processes on a mock cluster the test starts itself.
//!
//! - one instance with finite sources ends by itself; records and markers are conserved
//!   through the exchange, keys and timestamps survive it;
//! - two instances: every key is handled by one subtask of one instance (running counts per
//!   key go 1, 2, 3, … in one output only, totals match a reference);
//! - two instances: markers emitted by the sources = markers recorded by the sinks, some of
//!   them labelled `source_instance`;
//! - two instances, one with its clock 3 s ahead (Debian's `faketime`): each estimates the
//!   other's offset, and the sinks' marker latency is not shifted by the 3 s;
//! - a `rebalance` edge between a `kafka` source and an exchange: `validate` warns (exit 0) and
//!   `run` logs the same warning; a `forward` edge gives none.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{clock_offset_estimate, scrape, tidemark_bin, Metrics, Proc, TempDir};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(150);

/// Quick group joins and rebalances on the mock cluster.
const GROUP_PROPERTIES: &str = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";

fn cluster(topics: &[(&str, i32)]) -> DevCluster {
    DevCluster::start(DevClusterOptions {
        topics: topics.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
        ..DevClusterOptions::default()
    })
    .unwrap()
}

fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `tidemark run JOB --instance-id ID --seed 7`, with `OUT` naming its output file and
/// `env` set (libfaketime's, for a shifted clock).
fn instance(dir: &Path, job: &Path, id: &str, env: &[(&str, &str)]) -> (Proc, SocketAddr) {
    let mut command = Command::new(tidemark_bin());
    command
        .arg("run")
        .arg(job)
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--instance-id",
            id,
            "--seed",
            "7",
        ])
        .arg("--report-file")
        .arg(dir.join(format!("report-{id}.json")))
        .env("OUT", dir.join(format!("out-{id}.jsonl")))
        .envs(env.iter().copied());
    let mut p = Proc::spawn_command(command, dir, &format!("instance {id}"));
    let addr = p.metrics_addr();
    (p, addr)
}

/// Partitions of `source_id` held by the instance at `addr` (its lag series).
fn held(addr: SocketAddr, source_id: &str) -> usize {
    scrape(addr)
        .samples("tidemark_kafka_lag_records")
        .filter(|s| s.labels.get("source_id") == Some(source_id))
        .count()
}

fn sum_where(m: &Metrics, metric: &str, label: &str, value: &str) -> f64 {
    m.sum(metric, |l| l.get(label) == Some(value))
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn report(dir: &Path, id: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(format!("report-{id}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Markers the report's sources `source` emitted, and those its vertex `sink` recorded.
fn report_markers(report: &serde_json::Value, source: &str, sink: &str) -> (u64, u64) {
    let emitted = report["markers_emitted"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source_id"] == source)
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    let recorded = report["latency"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["operator_id"] == sink)
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    (emitted, recorded)
}

fn finite_job(dir: &TempDir, name: &str, bootstrap: &str, exchange: bool) -> PathBuf {
    finite_job_with(dir, name, bootstrap, exchange, "")
}

/// [`finite_job`] with `head` (job-level settings, each line ending in a newline) after
/// `parallelism`.
fn finite_job_with(
    dir: &TempDir,
    name: &str,
    bootstrap: &str,
    exchange: bool,
    head: &str,
) -> PathBuf {
    let exchange = if exchange {
        format!(
            "\n    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 4, properties: {GROUP_PROPERTIES}}}}}"
        )
    } else {
        String::new()
    };
    dir.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}
parallelism: 2
{head}latency: {{interval: 20ms}}
sources:
  gen:
    type: generator
    count: 4000
    keys: 40
    rate: 4000
operators:
  sum:
    type: reduce
    input: gen
    aggregate: sum{exchange}
sinks:
  out:
    type: file
    input: sum
    parallelism: 1
    path: ${{OUT}}
"
        ),
    )
}

/// The last value of every key in a reduce's output, and how many records each key had.
fn last_per_key(out: &[serde_json::Value]) -> BTreeMap<i64, (f64, usize)> {
    let mut last = BTreeMap::new();
    for line in out {
        let key = line["key"].as_i64().unwrap();
        let e = last.entry(key).or_insert((0.0, 0));
        e.0 = line["value"].as_f64().unwrap();
        e.1 += 1;
    }
    last
}

#[test]
fn one_instance_ends_by_itself_and_conserves_records_and_markers() {
    let cluster = cluster(&[("tidemark-exch-one-sum-exchange", 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("exchange-one");
    let job = finite_job(&dir, "exch-one", &bootstrap, true);
    let (mut a, _) = instance(dir.path(), &job, "a", &[]);
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    let r = report(dir.path(), "a");
    assert_eq!(r["outcome"], "finished", "{r}");

    // The same job without the exchange, as the reference: every key's running sum ends at the
    // same value after the same number of records (keys, values and order per key survive).
    let plain = finite_job(&dir, "exch-plain", &bootstrap, false);
    let (mut p, _) = instance(dir.path(), &plain, "plain", &[]);
    assert_eq!(p.wait_code(), 0, "{}", p.stderr());
    let through = lines(&dir.join("out-a.jsonl"));
    let reference = lines(&dir.join("out-plain.jsonl"));
    assert_eq!(through.len(), 4000);
    assert_eq!(last_per_key(&through), last_per_key(&reference));

    let (emitted, recorded) = report_markers(&r, "gen", "out");
    assert!(emitted > 0, "{r}");
    assert_eq!(
        recorded, emitted,
        "markers lost or copied through the exchange: {r}"
    );
    // The writer and the reader record no marker latency (they relay), the reader makes none.
    let (made_by_reader, at_writer) = report_markers(&r, "sum.exchange-in", "sum.exchange");
    assert_eq!((made_by_reader, at_writer), (0, 0), "{r}");
    let (_, at_sum) = report_markers(&r, "gen", "sum");
    assert_eq!(at_sum, emitted, "{r}");
}

/// An exchange topic that exists with fewer partitions than the job file asks for: the job runs
/// on it, and the Kafka connector's warning reaches standard error as the command's own line.
#[test]
fn an_exchange_topic_with_another_partition_count_is_warned_about_on_stderr() {
    let dir = TempDir::new("exchange-few");
    // The topic exists with 2 partitions; the job file asks for 4.
    let topic = "tidemark-exch-few-sum-exchange";
    let cluster = cluster(&[(topic, 2)]);
    let job = finite_job(&dir, "exch-few", cluster.bootstrap_servers(), true);
    let (mut a, _) = instance(dir.path(), &job, "a", &[]);
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    let stderr = a.stderr();
    let warning = stderr
        .lines()
        .find(|l| l.contains(&format!("the exchange topic {topic} has 2 partitions")))
        .unwrap_or_else(|| panic!("no warning about the partition count:\n{stderr}"));
    assert!(warning.starts_with("tidemark: warning: "), "{warning}");
    assert!(
        warning.ends_with("not the 4 the job file asks for (it existed already)"),
        "{warning}"
    );
    assert_eq!(lines(&dir.join("out-a.jsonl")).len(), 4000);
}

/// With checkpoints every 100 ms, the first ones complete while the readers' group is still
/// forming. Their commits used to be librdkafka's synchronous commit, which waits for the group
/// without a limit while the task that would serve the group's rebalance waits in it: the job
/// never ended (seen with a generator in front of the exchange, docs/performance.md, "W7 with a
/// window behind an exchange"). Now it ends by itself with every record once, the exchange's
/// partitions committed to their end.
#[test]
fn with_checkpoints_one_instance_ends_by_itself_and_commits_the_exchange() {
    let topic = "tidemark-exch-cp-sum-exchange";
    let cluster = cluster(&[(topic, 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("exchange-cp");
    let job = finite_job_with(
        &dir,
        "exch-cp",
        &bootstrap,
        true,
        "checkpoint: {interval: 100ms}\n",
    );
    let (mut a, _) = instance(dir.path(), &job, "a", &[]);
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    let plain = finite_job(&dir, "exch-cp-plain", &bootstrap, false);
    let (mut p, _) = instance(dir.path(), &plain, "plain", &[]);
    assert_eq!(p.wait_code(), 0, "{}", p.stderr());
    let through = lines(&dir.join("out-a.jsonl"));
    assert_eq!(through.len(), 4000);
    assert_eq!(
        last_per_key(&through),
        last_per_key(&lines(&dir.join("out-plain.jsonl")))
    );
    for (p, (committed, end)) in testing::committed_and_end(&bootstrap, "exch-cp", topic, 4)
        .iter()
        .enumerate()
    {
        assert_eq!(committed, end, "{topic}/{p} committed: {}", a.stderr());
    }
}

#[test]
fn two_instances_handle_each_key_in_one_subtask() {
    const MESSAGES: u64 = 3000;
    const CUSTOMERS: u64 = 37;
    let cluster = cluster(&[("in", 4), ("tidemark-exch-keys-per_customer-exchange", 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("exchange-keys");
    let job = dir.write(
        "job.yaml",
        &format!(
            "name: exch-keys
parallelism: 2
checkpoint: {{interval: 200ms}}
sources:
  orders:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [in]
    properties: {GROUP_PROPERTIES}
operators:
  per_customer:
    type: reduce
    input: orders
    key: customer
    aggregates: {{n: count, total: {{sum: amount}}}}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 4, properties: {GROUP_PROPERTIES}}}}}
sinks:
  out:
    type: file
    input: per_customer
    parallelism: 1
    path: ${{OUT}}
"
        ),
    );
    let (mut a, addr_a) = instance(dir.path(), &job, "a", &[]);
    let (mut b, addr_b) = instance(dir.path(), &job, "b", &[]);
    // Both instances hold partitions of both topics before any message is written, so that no
    // key moves while the test runs (a key's reduce state stays where its partition was).
    for source in ["orders", "per_customer.exchange-in"] {
        wait_until(
            &format!("both instances to hold {source} partitions"),
            || {
                let (ha, hb) = (held(addr_a, source), held(addr_b, source));
                ha > 0 && hb > 0 && ha + hb == 4
            },
        );
    }

    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let mut reference: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for id in 0..MESSAGES {
        let customer = format!("c{}", id % CUSTOMERS);
        let amount = id * 3 % 101;
        let e = reference.entry(customer.clone()).or_default();
        e.0 += 1;
        e.1 += amount;
        let value = format!("{{\"id\": {id}, \"customer\": \"{customer}\", \"amount\": {amount}}}");
        let key = id.to_string();
        producer
            .send(BaseRecord::to("in").payload(&value).key(&key))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    let (out_a, out_b) = (dir.join("out-a.jsonl"), dir.join("out-b.jsonl"));
    let at_sink = |addr| {
        sum_where(
            &scrape(addr),
            "tidemark_records_in_total",
            "operator_id",
            "out",
        )
    };
    wait_until("every message's output", || {
        at_sink(addr_a) + at_sink(addr_b) >= MESSAGES as f64
    });
    // With checkpoints, the reader commits what the sinks acknowledged.
    wait_until("commits of the exchange reader", || {
        [addr_a, addr_b].iter().all(|a| {
            sum_where(
                &scrape(*a),
                "tidemark_kafka_commits_total",
                "source_id",
                "per_customer.exchange-in",
            ) > 0.0
        })
    });
    a.terminate();
    b.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
    // SIGTERM's last checkpoint committed the end of every exchange partition in the job's group.
    let topic = "tidemark-exch-keys-per_customer-exchange";
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "exch-keys")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..4 {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "exch-keys-check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut left = 0;
    for e in committed.elements() {
        let (_, high) = reader
            .fetch_watermarks(topic, e.partition(), Duration::from_secs(10))
            .unwrap();
        let Offset::Offset(from) = e.offset() else {
            panic!("partition {} has no committed offset", e.partition());
        };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, e.partition(), Offset::Offset(from))
            .unwrap();
        reader.assign(&tpl).unwrap();
        let mut next = from;
        let started = Instant::now();
        while next < high {
            assert!(started.elapsed() < DEADLINE, "cannot read {topic}");
            let Some(Ok(m)) = reader.poll(Duration::from_millis(100)) else {
                continue;
            };
            let control = m
                .headers()
                .is_some_and(|h| h.iter().any(|h| h.key == "tidemark-control"));
            assert!(
                control,
                "a record at {}/{} was never committed",
                m.partition(),
                m.offset()
            );
            next = m.offset() + 1;
            left += 1;
        }
    }
    eprintln!("{left} control messages after the committed offsets");

    // Per customer: the instance whose output has it, and its running counts in order.
    let mut owner: BTreeMap<String, &str> = BTreeMap::new();
    let mut seen: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (id, path) in [("a", &out_a), ("b", &out_b)] {
        for line in lines(path) {
            let customer = line["key"].as_str().unwrap().to_owned();
            let previous = owner.insert(customer.clone(), id);
            assert!(
                previous.is_none() || previous == Some(id),
                "{customer} was handled by both instances"
            );
            seen.entry(customer)
                .or_default()
                .push((line["n"].as_u64().unwrap(), line["total"].as_u64().unwrap()));
        }
    }
    assert!(owner.values().any(|o| *o == "a") && owner.values().any(|o| *o == "b"));
    assert_eq!(seen.len(), CUSTOMERS as usize);
    let outputs: usize = seen.values().map(Vec::len).sum();
    assert_eq!(outputs as u64, MESSAGES, "one output per message");
    for (customer, running) in &seen {
        let counts: Vec<u64> = running.iter().map(|(n, _)| *n).collect();
        let expected: Vec<u64> = (1..=running.len() as u64).collect();
        // One subtask saw every record of the key: its count goes 1, 2, 3, … without restart.
        assert_eq!(counts, expected, "{customer}");
        let (n, total) = reference[customer];
        assert_eq!(running.last().copied(), Some((n, total)), "{customer}");
    }
}

/// Writes job `name` (parallelism 2, `latency` its latency settings): a `generator` (`generator`
/// its settings after `type`), a `filter` keeping everything behind a Kafka exchange (`edge`
/// more settings of the filter, such as a partitioner) and a `discard` sink.
fn filter_job(
    dir: &TempDir,
    bootstrap: &str,
    name: &str,
    latency: &str,
    generator: &str,
    edge: &str,
) -> std::path::PathBuf {
    dir.write(
        "job.yaml",
        &format!(
            "name: {name}
parallelism: 2
latency: {latency}
sources:
  gen:
    type: generator
    {generator}
operators:
  pass:
    type: filter
    input: gen
    keep: 1{edge}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 4, properties: {GROUP_PROPERTIES}}}}}
sinks:
  out:
    type: discard
    input: pass
"
        ),
    )
}

#[test]
fn markers_are_conserved_through_an_exchange_between_two_instances() {
    let cluster = cluster(&[("tidemark-exch-markers-pass-exchange", 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("exchange-markers");
    let job = filter_job(
        &dir,
        &bootstrap,
        "exch-markers",
        "{interval: 20ms}",
        "count: 3000\n    keys: 20\n    rate: 1000",
        "",
    );
    let (mut a, addr_a) = instance(dir.path(), &job, "a", &[]);
    let (mut b, addr_b) = instance(dir.path(), &job, "b", &[]);
    let records_out = |addr| {
        sum_where(
            &scrape(addr),
            "tidemark_records_out_total",
            "operator_id",
            "gen",
        )
    };
    wait_until("both generators to finish", || {
        records_out(addr_a) == 3000.0 && records_out(addr_b) == 3000.0
    });
    // The generators have finished: they emit no more markers (rule 4).
    let emitted: f64 = [addr_a, addr_b]
        .iter()
        .map(|a| scrape(*a).total("tidemark_markers_emitted_total"))
        .sum();
    assert!(emitted > 0.0);
    let at_sinks = || -> f64 {
        [addr_a, addr_b]
            .iter()
            .map(|a| {
                sum_where(
                    &scrape(*a),
                    "tidemark_marker_latency_seconds_count",
                    "operator_id",
                    "out",
                )
            })
            .sum()
    };
    wait_until("every marker at a sink", || at_sinks() >= emitted);
    // Markers that crossed from the other instance are labelled with it.
    for (addr, peer) in [(addr_a, "b"), (addr_b, "a")] {
        let m = scrape(addr);
        assert!(
            m.samples("tidemark_marker_latency_seconds_count").any(|s| s
                .labels
                .get("source_instance")
                == Some(peer)
                && s.labels.get("operator_id") == Some("out")),
            "no marker from {peer} at the sink:\n{}",
            m.body
        );
    }
    a.terminate();
    b.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
    let (ea, ra) = report_markers(&report(dir.path(), "a"), "gen", "out");
    let (eb, rb) = report_markers(&report(dir.path(), "b"), "gen", "out");
    let from_b = report(dir.path(), "a")["latency"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["operator_id"] == "out" && e["source_instance"] == "b");
    assert!(from_b, "the report names where markers came from");
    assert_eq!((ea + eb) as f64, emitted);
    assert_eq!(
        ra + rb,
        ea + eb,
        "markers lost or copied: sinks {ra}+{rb}, sources {ea}+{eb}"
    );
}

/// The `tidemark_marker_latency_window_seconds` quantile `q` of the sink's series whose markers
/// came from `peer`, if there is one.
fn sink_window_quantile(m: &Metrics, peer: &str, q: &str) -> Option<f64> {
    let wanted = [
        "operator_id=\"out\"".to_owned(),
        format!("source_instance=\"{peer}\""),
        format!("quantile=\"{q}\""),
    ];
    m.body
        .lines()
        .filter(|l| l.starts_with("tidemark_marker_latency_window_seconds{"))
        .find(|l| wanted.iter().all(|w| l.contains(w.as_str())))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_clock_three_seconds_ahead_is_measured_and_corrected() {
    // Debian's libfaketime (package `faketime`), preloaded into the process itself so that
    // signals reach it (the `faketime` command forks, and SIGTERM would stop only the wrapper).
    let library = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .expect(
            "this test needs /usr/lib/<arch>/faketime/libfaketime.so.1 from Debian's `faketime` \
             package (scripts/test installs it)",
        );
    let library = library.to_str().expect("a UTF-8 path");
    let cluster = cluster(&[("tidemark-exch-clock-pass-exchange", 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("exchange-clock");
    let job = filter_job(
        &dir,
        &bootstrap,
        "exch-clock",
        "{interval: 50ms, history_size: 16}",
        "rate: 200\n    keys: 20",
        "\n    partition: hash",
    );
    let (mut a, addr_a) = instance(dir.path(), &job, "a", &[]);
    let shifted = [
        ("LD_PRELOAD", library),
        ("FAKETIME", "+3s"),
        ("DONT_FAKE_MONOTONIC", "1"),
    ];
    let (mut b, addr_b) = instance(dir.path(), &job, "ahead", &shifted);

    // Each side's estimate of the other: +3 s seen from a, −3 s seen from the one ahead, each
    // within the spec's 0.2 s, and within its own error bound (half the round trip, the most
    // an NTP-style estimate can be off by) of the true shift, plus 10 ms for the clock reads.
    for (addr, me, peer, expected) in [(addr_a, "a", "ahead", 3.0), (addr_b, "ahead", "a", -3.0)] {
        let (offset, error) = clock_offset_estimate(addr, me, peer, DEADLINE);
        eprintln!("{me} sees {peer} at {offset:+.4} ± {error:.4} s");
        assert!(
            (offset - expected).abs() <= 0.2 && (offset - expected).abs() <= error + 0.01,
            "{me} sees {peer} at {offset} ± {error} s, expected {expected}"
        );
    }
    // The sinks' markers from the other instance are corrected: once the window holds only
    // markers that arrived after the estimate, their latency is within 2 s of 0 (a loose,
    // functional check: uncorrected, they would read about +3 s at one side, −3 s at the other).
    for (addr, peer) in [(addr_a, "ahead"), (addr_b, "a")] {
        wait_until(&format!("corrected latency of markers from {peer}"), || {
            let m = scrape(addr);
            match (
                sink_window_quantile(&m, peer, "0"),
                sink_window_quantile(&m, peer, "1"),
            ) {
                (Some(min), Some(max)) => {
                    let corrected = min > -2.0 && max < 2.0;
                    if corrected {
                        eprintln!("markers from {peer}: window min {min:.4} s, max {max:.4} s");
                    }
                    corrected
                }
                _ => false,
            }
        });
    }
    a.terminate();
    b.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
}

#[test]
fn an_unreachable_exchange_broker_fails_the_run_with_the_broker_error() {
    let dir = TempDir::new("exchange-unreachable");
    let job = dir.write(
        "job.yaml",
        "name: exch-bad
sources:
  gen: {type: generator, count: 10}
sinks:
  out:
    type: discard
    input: gen
    exchange: {kafka: {brokers: \"127.0.0.1:1\", partitions: 2}}
",
    );
    let out = common::tidemark(
        dir.path(),
        [
            "run".as_ref(),
            job.as_os_str(),
            "--kafka-timeout".as_ref(),
            "2s".as_ref(),
            "--metrics-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
        ],
    );
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("kafka exchange")
            && out
                .stderr
                .contains("cannot reach Kafka at 127.0.0.1:1 within 2s")
            && out.stderr.contains("Connection refused"),
        "{}",
        out.stderr
    );
}

/// librdkafka's mock cluster keeps at most 5 MB per partition: a reader that falls that far
/// behind finds its oldest messages deleted. Forced here by filling partition 0 of the
/// exchange topic past 5 MB before the job starts: the reader must stop the job naming the
/// partition and the offsets lost, not read on from what is left.
#[test]
fn an_exchange_partition_whose_messages_the_broker_deleted_stops_the_job() {
    let topic = "tidemark-exch-trim-sum-exchange";
    let cluster = cluster(&[(topic, 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let filler = vec![b'x'; 1024];
    for _ in 0..7 * 1024 {
        loop {
            match producer.send(BaseRecord::<(), _>::to(topic).partition(0).payload(&filler)) {
                Ok(()) => break,
                Err((_, _)) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "probe")
        .create()
        .unwrap();
    let (low, _) = probe
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    assert!(low > 0, "the mock cluster kept the whole partition");

    let dir = TempDir::new("exchange-trimmed");
    let job = finite_job(&dir, "exch-trim", &bootstrap, true);
    let (mut a, _) = instance(dir.path(), &job, "a", &[]);
    assert_eq!(a.wait_code(), 1, "{}", a.stderr());
    let expected = format!(
        "exchange partition {topic}/0: the messages at offsets 0 to {} were deleted by the broker before they were read",
        low - 1
    );
    assert!(a.stderr().contains(&expected), "{}", a.stderr());
}

/// A job reading Kafka into an exchange, the two joined by an edge of `partition`.
fn reorder_job(dir: &TempDir, partition: &str) -> PathBuf {
    dir.write(
        "reorder.yaml",
        &format!(
            "name: reorder
sources:
  orders:
    type: kafka
    brokers: \"127.0.0.1:9\"
    topics: [orders]
operators:
  clean:
    type: map
    input: orders
    partition: {partition}
    set: {{seen: 'true'}}
  per_user:
    type: reduce
    input: clean
    aggregates: {{n: count}}
    exchange: {{kafka: {{brokers: \"127.0.0.1:9\", partitions: 8}}}}
sinks:
  out:
    type: discard
    input: per_user
"
        ),
    )
}

#[test]
fn validate_and_run_warn_about_an_edge_that_may_reorder_a_partition_before_an_exchange() {
    let dir = TempDir::new("kafka-exchange-reorder");
    let warning = "tidemark: warning: the rebalance edge orders -> clean sits between the Kafka \
                   source \"orders\" and the exchange writer \"per_user.exchange\"";
    let job = reorder_job(&dir, "rebalance");
    let out = common::tidemark(dir.path(), ["validate", job.to_str().unwrap()]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(out.stdout.ends_with("ok\n"), "{}", out.stdout);
    assert!(out.stderr.contains(warning), "{}", out.stderr);
    // `run` logs it before it starts (here the broker is not there: the job then fails).
    let out = common::tidemark(
        dir.path(),
        ["run", job.to_str().unwrap(), "--kafka-timeout", "1s"],
    );
    assert!(out.stderr.contains(warning), "{}", out.stderr);
    // Forward: nothing to warn about.
    let job = reorder_job(&dir, "forward");
    let out = common::tidemark(dir.path(), ["validate", job.to_str().unwrap()]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
}

/// A job whose exchange feeds a vertex without state cannot be restored from a checkpoint
/// directory: the input read again would be written to the exchange again and reach the
/// vertex twice, so its reader records no position and the restore is refused naming it
/// (exit 2). (Behind a keyed vertex it restores: `kafka_state.rs`.)
#[test]
fn a_job_with_an_exchange_before_a_stateless_vertex_is_not_restored_from_a_directory() {
    let cluster = cluster(&[("tidemark-exch-stateless-pass-exchange", 4)]);
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("exchange-stateless-restore");
    let job = filter_job(
        &dir,
        &bootstrap,
        "exch-stateless",
        "{interval: 100ms}",
        "count: 1000000\n    keys: 20\n    rate: 1000",
        "",
    );
    let text = std::fs::read_to_string(&job).unwrap();
    std::fs::write(
        &job,
        format!("{text}checkpoint: {{interval: 100ms, dir: ckpt}}\n"),
    )
    .unwrap();
    let (mut a, _) = instance(dir.path(), &job, "a", &[]);
    let folder = dir.path().join("ckpt").join("exch-stateless");
    wait_until("a complete checkpoint", || {
        std::fs::read_dir(&folder).is_ok_and(|entries| {
            entries
                .filter_map(Result::ok)
                .any(|e| e.path().join("_metadata").exists())
        })
    });
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    let out = common::tidemark(dir.path(), ["run", "job.yaml", "--restore", "latest"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("source \"pass.exchange-in\" cannot resume"),
        "{}",
        out.stderr
    );
}
