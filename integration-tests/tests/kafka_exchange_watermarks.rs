//! Watermarks through a Kafka exchange (`docs/kafka.md`, "Watermarks across an exchange"): two
//! real `tidemark run` instances on a mock cluster the test starts itself; an event-time window
//! behind the exchange fires while they run, exactly the windows every input partition has
//! passed, each complete.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{scrape, Proc, TempDir};
use rdkafka::config::ClientConfig;
use rdkafka::producer::BaseRecord;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(150);
const BASE_MS: i64 = 1_700_000_000_000;
/// Messages per input partition, 10 ms of event time apart.
const PER_PARTITION: i64 = 2_000;
/// Partitions 2 and 3 run this far behind 0 and 1 in event time.
const LAG_MS: i64 = 2_000;
/// The source's `max_out_of_orderness`.
const OUT_OF_ORDERNESS_MS: i64 = 5_000;
const KEYS: usize = 12;

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The job; `checkpoint` adds `checkpoint: {interval: 1s}`.
fn job(dir: &TempDir, id: &str, bootstrap: &str, checkpoint: bool) -> PathBuf {
    let group = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";
    let checkpoint = if checkpoint {
        "checkpoint: {interval: 1s}\n"
    } else {
        ""
    };
    let out = dir.join(&format!("out-{id}.jsonl"));
    dir.write(
        &format!("job-{id}.yaml"),
        &format!(
            "name: wmx
parallelism: 2
{checkpoint}sources:
  events:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [in]
    key: k
    timestamp: ts
    properties: {group}
    watermarks: {{max_out_of_orderness: {OUT_OF_ORDERNESS_MS}ms, interval: 50ms}}
operators:
  per_key:
    type: window
    input: events
    partition: hash
    size: 1s
    time: event
    aggregates: {{n: count}}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 4, properties: {group}}}}}
sinks:
  out:
    type: file
    input: per_key
    parallelism: 1
    path: {}
",
            out.display()
        ),
    )
}

fn instance(dir: &Path, job: &Path, id: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    common::run_instance(dir, job, id, extra)
}

/// Partitions of `source_id` the instance at `addr` holds (its lag series).
/// A mock cluster with `in` and the exchange topic (4 partitions each) and instances `a` and
/// `b` of the job (with checkpoints or not), both holding input and exchange partitions before
/// anything is written; returns the cluster, its bootstrap servers, the instances' directory
/// and the instances with their metrics addresses.
#[allow(clippy::type_complexity)]
fn two_instances(
    label: &str,
    checkpoint: bool,
) -> (
    DevCluster,
    String,
    TempDir,
    (Proc, SocketAddr),
    (Proc, SocketAddr),
) {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![
            ("in".into(), 4),
            ("tidemark-wmx-per_key-exchange".into(), 4),
        ],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new(label);
    // With checkpoints the window's state moves with the exchange's partitions, and a stop
    // hands it over unfired; stopping every instance is the job ending: `--drain` fires it.
    let extra: &[&str] = if checkpoint { &["--drain"] } else { &[] };
    let a = instance(
        dir.path(),
        &job(&dir, "a", &bootstrap, checkpoint),
        "a",
        extra,
    );
    let b = instance(
        dir.path(),
        &job(&dir, "b", &bootstrap, checkpoint),
        "b",
        extra,
    );
    let (addr_a, addr_b) = (a.1, b.1);
    for source in ["events", "per_key.exchange-in"] {
        wait_until(&format!("{source} spread over both instances"), || {
            let (x, y) = (held(addr_a, source), held(addr_b, source));
            x >= 1 && y >= 1 && x + y == 4
        });
    }
    (cluster, bootstrap, dir, a, b)
}

fn held(addr: SocketAddr, source_id: &str) -> usize {
    scrape(addr)
        .samples("tidemark_kafka_lag_records")
        .filter(|s| s.labels.get("source_id") == Some(source_id))
        .count()
}

/// Records the window received at `addr`.
fn window_input(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_records_in_total", |l| {
        l.get("operator_id") == Some("per_key")
    })
}

fn windows_out(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_records_out_total", |l| {
        l.get("operator_id") == Some("per_key")
    })
}

/// One message: partition, key, event time in ms.
type Message = (i32, String, i64);

/// `per_partition` messages for each of the 4 input partitions.
fn messages(per_partition: i64) -> Vec<Vec<Message>> {
    (0..4)
        .map(|p| {
            let lag = if p >= 2 { LAG_MS } else { 0 };
            (0..per_partition)
                .map(|i| {
                    let key = format!("k{}", (i as usize * 4 + p as usize) % KEYS);
                    (p, key, BASE_MS - lag + i * 10)
                })
                .collect()
        })
        .collect()
}

/// Writes the partitions' messages in rounds of 50 per partition, 250 ms apart (event time
/// runs at twice the wall clock), as a live topic gets them.
fn produce(bootstrap: &str, per_partition: &[Vec<Message>]) {
    let producer = testing::producer(bootstrap);
    let most = per_partition.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..most.div_ceil(50) {
        for messages in per_partition {
            for (p, key, ts) in messages.iter().skip(round * 50).take(50) {
                let value = format!("{{\"k\":\"{key}\",\"ts\":{ts}}}");
                let record = BaseRecord::to("in").partition(*p).payload(&value).key(key);
                testing::send_retrying(&producer, record, Duration::from_millis(1));
            }
        }
        testing::flush(&producer);
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// (key, window start ms) → count.
fn reference(per_partition: &[Vec<Message>]) -> BTreeMap<(String, i64), u64> {
    let mut counts = BTreeMap::new();
    for (_, key, ts) in per_partition.iter().flatten() {
        *counts
            .entry((key.clone(), ts - ts.rem_euclid(1_000)))
            .or_insert(0) += 1;
    }
    counts
}

fn results(path: &Path) -> BTreeMap<(String, i64), u64> {
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let w: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (
            w["key"].as_str().unwrap().to_owned(),
            w["window_start"].as_i64().unwrap(),
        );
        assert!(
            out.insert(key, w["n"].as_u64().unwrap()).is_none(),
            "a window fired twice: {line}"
        );
    }
    out
}

#[test]
fn an_event_time_window_after_a_kafka_exchange_fires_at_two_instances() {
    let (_cluster, bootstrap, dir, (mut a, addr_a), (mut b, addr_b)) =
        two_instances("exchange-watermarks", false);

    let per_partition = messages(PER_PARTITION);
    produce(&bootstrap, &per_partition);
    let reference = reference(&per_partition);
    // Every partition read, the watermark behind the exchange is the slowest input partition's
    // (the lagging ones' last timestamp minus the out-of-orderness): exactly the windows up to
    // it have fired, while both instances run.
    let slowest_last_ms = BASE_MS - LAG_MS + (PER_PARTITION - 1) * 10;
    let watermark_ms = slowest_last_ms - OUT_OF_ORDERNESS_MS; // minus 1 ns
    let expected: BTreeMap<_, _> = reference
        .iter()
        .filter(|((_, start), _)| start + 1_000 <= watermark_ms)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert!(expected.len() >= 10 * KEYS, "{}", expected.len());
    let total = (4 * PER_PARTITION) as f64;
    wait_until("every message through the exchange into the window", || {
        window_input(addr_a) + window_input(addr_b) == total
    });
    wait_until("the windows the slowest partition passed", || {
        windows_out(addr_a) + windows_out(addr_b) >= expected.len() as f64
    });
    assert_eq!(
        windows_out(addr_a) + windows_out(addr_b),
        expected.len() as f64,
        "windows beyond the slowest partition's watermark fired"
    );
    assert!(windows_out(addr_a) > 0.0 && windows_out(addr_b) > 0.0);

    // Each source subtask names the partition holding its watermark back as <topic>/<partition>:
    // over both instances, every input partition and every exchange partition.
    let holders = |source: &str| -> std::collections::BTreeSet<String> {
        [addr_a, addr_b]
            .iter()
            .flat_map(|&addr| {
                scrape(addr)
                    .samples("tidemark_watermark_holder_info")
                    .filter(|s| s.labels.get("operator_id") == Some(source))
                    .map(|s| s.labels.get("input").unwrap_or("?").to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let all = |topic: &str| -> std::collections::BTreeSet<String> {
        (0..4).map(|p| format!("{topic}/{p}")).collect()
    };
    assert_eq!(holders("events"), all("in"));
    assert_eq!(
        holders("per_key.exchange-in"),
        all("tidemark-wmx-per_key-exchange")
    );

    // Stopped, each instance fires what is open; together: every window once, complete.
    a.terminate();
    b.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
    let (out_a, out_b) = (
        results(&dir.join("out-a.jsonl")),
        results(&dir.join("out-b.jsonl")),
    );
    assert!(
        out_a.keys().all(|k| !out_b.contains_key(k)),
        "a window at both instances"
    );
    let mut all = out_a;
    all.extend(out_b);
    assert_eq!(all, reference);
}

/// The group's committed offset of each partition of `topic` and the partition's end.
fn committed_and_end(bootstrap: &str, topic: &str) -> Vec<(i64, i64)> {
    testing::committed_and_end(bootstrap, "wmx", topic, 4)
}

/// Messages of `topic`/`partition` from `from` to `end` that are records (not control messages).
fn records_between(bootstrap: &str, topic: &str, partition: i32, from: i64, end: i64) -> usize {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "wmx-check")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let (mut next, mut records) = (from, 0);
    let started = Instant::now();
    while next < end {
        assert!(
            started.elapsed() < DEADLINE,
            "gave up reading {topic}/{partition}"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.unwrap();
            let control = message
                .headers()
                .is_some_and(|h| h.iter().any(|h| h.key == "tidemark-control"));
            if !control {
                records += 1;
            }
            next = message.offset() + 1;
        }
    }
    records
}

/// With checkpoints and watermarks on, two instances run with `--drain` (the job is ending;
/// without it a stop hands the open windows over through the state topic, `docs/kafka.md`)
/// and stopped with SIGTERM at once both drain within the default `--drain-timeout` and exit 0, every record is in exactly one complete
/// window, and every message read is committed (`docs/kafka.md`, "Stopping"). Several runs: the
/// subtasks used to leave the group one by one, each leave a rebalance that held up the last
/// commits of the others, and some runs did not drain in time.
#[test]
fn with_checkpoints_two_instances_stopped_at_once_drain_and_commit_everything() {
    const PER_PARTITION: i64 = 500;
    for run in 0..3 {
        let (_cluster, bootstrap, dir, (mut a, addr_a), (mut b, addr_b)) =
            two_instances("exchange-watermarks-stop", true);
        let per_partition = messages(PER_PARTITION);
        produce(&bootstrap, &per_partition);
        let total = (4 * PER_PARTITION) as f64;
        wait_until("every message through the exchange into the window", || {
            window_input(addr_a) + window_input(addr_b) == total
        });

        a.terminate();
        b.terminate();
        assert_eq!(a.wait_code(), 0, "run {run}: {}", a.stderr());
        assert_eq!(b.wait_code(), 0, "run {run}: {}", b.stderr());
        let (out_a, out_b) = (
            results(&dir.join("out-a.jsonl")),
            results(&dir.join("out-b.jsonl")),
        );
        assert!(
            out_a.keys().all(|k| !out_b.contains_key(k)),
            "run {run}: a window at both instances"
        );
        let mut all = out_a;
        all.extend(out_b);
        assert_eq!(all, reference(&per_partition), "run {run}");
        // Every input message is committed; in the exchange topic, past the commits, only
        // control messages the writers wrote as they stopped (an idle, a watermark).
        for (p, (committed, end)) in committed_and_end(&bootstrap, "in").iter().enumerate() {
            assert_eq!(committed, end, "run {run}: in/{p} committed");
        }
        let exchange = "tidemark-wmx-per_key-exchange";
        for (p, (committed, end)) in committed_and_end(&bootstrap, exchange).iter().enumerate() {
            assert!(*committed >= 0, "run {run}: {exchange}/{p} not committed");
            let records = records_between(&bootstrap, exchange, p as i32, *committed, *end);
            assert_eq!(
                records,
                0,
                "run {run}: {exchange}/{p}: records past the commit {committed} (end {end});\n\
                 a's stderr:\n{}\nb's stderr:\n{}",
                a.stderr(),
                b.stderr()
            );
        }
    }
}
