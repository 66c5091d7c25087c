//! Kafka end to end: real `tidemark run` processes forming one consumer group on a mock cluster
//! the test starts itself (librdkafka's, through `tidemark_kafka::DevCluster`).
//!
//! - the spec's worked cases at their full size (100,000 ids in a 4-partition topic, or
//!   `TIDEMARK_KAFKA_IDS`): two instances of kafka → filter → kafka: every id reaches the output
//!   topic, the group's committed offsets reach the end, the lag series reach 0, SIGTERM exits
//!   0; one instance killed with SIGKILL half way (a quarter of the ids out, half of them
//!   written, the other half written after the kill): every id still arrives at least once. Each
//!   prints its numbers (`--nocapture`): seconds, output messages, duplicates;
//! - partitions move on join and on leave.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{clock_offset_estimate, scrape, Proc, TempDir};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::Offset;
use tidemark_kafka::{DevCluster, DevClusterOptions};

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(150);

fn cluster() -> DevCluster {
    DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 4), ("out".into(), 4)],
        ..DevClusterOptions::default()
    })
    .unwrap()
}

fn produce(bootstrap: &str, ids: std::ops::Range<u64>) {
    tidemark_kafka::testing::produce_ids(bootstrap, "in", ids);
}

/// Reads the output topic from the start in a group of its own until every id of `0..n`
/// arrived or the deadline passed; returns how often each id arrived.
struct OutputReader {
    consumer: BaseConsumer,
    seen: BTreeMap<u64, u32>,
}

impl OutputReader {
    fn new(bootstrap: &str, group: &str) -> Self {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&["out"]).unwrap();
        OutputReader {
            consumer,
            seen: BTreeMap::new(),
        }
    }

    /// Reads until `distinct` ids have been seen (or the deadline).
    fn read_until(&mut self, distinct: usize) {
        let started = Instant::now();
        while self.seen.len() < distinct && started.elapsed() < DEADLINE {
            if let Some(Ok(m)) = self.consumer.poll(Duration::from_millis(100)) {
                let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
                *self.seen.entry(v["value"].as_u64().unwrap()).or_insert(0) += 1;
            }
        }
    }
}

fn job_file(dir: &TempDir, bootstrap: &str, group: &str) -> std::path::PathBuf {
    dir.write(
        "job.yaml",
        &format!(
            "name: kafka-e2e
parallelism: 2
checkpoint: {{interval: 200ms}}
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [in]
    group: {group}
    properties: {{session.timeout.ms: 6000, heartbeat.interval.ms: 500}}
operators:
  all:
    type: filter
    input: orders
    keep: 1
sinks:
  copy:
    type: kafka
    input: all
    brokers: {bootstrap}
    topic: out
"
        ),
    )
}

fn instance(dir: &Path, job: &Path, id: &str) -> (Proc, SocketAddr) {
    let mut p = Proc::spawn(
        dir,
        [
            "run".as_ref(),
            job.as_os_str(),
            "--metrics-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--instance-id".as_ref(),
            id.as_ref(),
        ],
    );
    let addr = p.metrics_addr();
    (p, addr)
}

/// The partitions an instance holds now, by its `tidemark_kafka_lag_records` series.
fn partitions_held(addr: SocketAddr) -> usize {
    scrape(addr).samples("tidemark_kafka_lag_records").count()
}

fn lag_total(addr: SocketAddr) -> f64 {
    scrape(addr).total("tidemark_kafka_lag_records")
}

fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn committed_is_the_end(bootstrap: &str, group: &str) {
    let (consumer, committed) =
        tidemark_kafka::testing::committed_offsets(bootstrap, group, "in", 4);
    for (p, offset) in (0..).zip(committed) {
        let (_, high) = consumer
            .fetch_watermarks("in", p, Duration::from_secs(10))
            .unwrap();
        assert_eq!(offset, Offset::Offset(high), "partition {p}");
    }
}

/// Ids in the worked cases: the spec's 100,000, or `TIDEMARK_KAFKA_IDS`
/// (`scripts/kafka-worked-cases` runs them by hand with release builds and prints the numbers).
fn ids() -> u64 {
    std::env::var("TIDEMARK_KAFKA_IDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// Messages in the output topic (written once, from offset 0).
fn output_messages(bootstrap: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    (0..4)
        .map(|p| {
            let (low, high) = consumer
                .fetch_watermarks("out", p, Duration::from_secs(10))
                .unwrap();
            high - low
        })
        .sum()
}

#[test]
fn two_instances_carry_every_message_and_commit_the_end() {
    let n = ids();
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    produce(&bootstrap, 0..n);
    let dir = TempDir::new("kafka-two");
    let job = job_file(&dir, &bootstrap, "two");
    let started = Instant::now();
    let (mut a, addr_a) = instance(dir.path(), &job, "a");
    let (mut b, addr_b) = instance(dir.path(), &job, "b");

    let mut out = OutputReader::new(&bootstrap, "reader-two");
    out.read_until(n as usize);
    let all_out = started.elapsed();
    assert_eq!(out.seen.len() as u64, n, "ids missing from the output");
    assert_eq!(out.seen.keys().next_back(), Some(&(n - 1)));
    // Both instances hold partitions, and once all is read every partition's lag is 0.
    wait_until("both instances to hold partitions, 4 in all", || {
        let (pa, pb) = (partitions_held(addr_a), partitions_held(addr_b));
        pa > 0 && pb > 0 && pa + pb == 4
    });
    wait_until("lag 0 on both instances", || {
        lag_total(addr_a) == 0.0 && lag_total(addr_b) == 0.0
    });
    // Each instance estimates the other's clock offset through the clock topic; on one
    // machine the true offset is 0, so it lies within the error bound.
    for (addr, me, peer) in [(addr_a, "a", "b"), (addr_b, "b", "a")] {
        let (offset, error) = clock_offset_estimate(addr, me, peer, DEADLINE);
        assert!(
            error >= 0.0 && offset.abs() <= error,
            "offset {offset} ± {error}"
        );
    }
    let m = scrape(addr_a);
    assert!(m.total("tidemark_checkpoints_completed_total") > 0.0);
    // --instance-id labels every series.
    assert!(m
        .samples("tidemark_records_in_total")
        .all(|s| s.labels.get("tidemark_instance") == Some("a")));
    assert!(m.total("tidemark_kafka_commits_total") > 0.0);

    a.terminate();
    b.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
    committed_is_the_end(&bootstrap, "two");
    let written = output_messages(&bootstrap);
    eprintln!(
        "worked-case=two-instances ids={n} seconds_to_all_ids={:.1} output_messages={written} \
         duplicates={}",
        all_out.as_secs_f64(),
        written - n as i64
    );
}

#[test]
fn a_killed_instance_loses_nothing() {
    let n = ids();
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    // Half the ids before the instances start, half after the kill: whatever the speed of the
    // build, the killed instance's partitions still hold work for the survivor.
    produce(&bootstrap, 0..n / 2);
    let dir = TempDir::new("kafka-kill");
    let job = job_file(&dir, &bootstrap, "kill");
    let (mut a, addr_a) = instance(dir.path(), &job, "a");
    let (mut b, addr_b) = instance(dir.path(), &job, "b");
    wait_until("both instances to hold partitions", || {
        partitions_held(addr_a) > 0 && partitions_held(addr_b) > 0
    });
    let mut out = OutputReader::new(&bootstrap, "reader-kill");
    out.read_until(n as usize / 4);
    // SIGKILL: no drain, no commit, no leaving the group.
    let pid = a.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    a.wait();
    let killed = Instant::now();
    produce(&bootstrap, n / 2..n);
    // The group moves a's partitions to b after the session timeout; b resumes at the commits.
    out.read_until(n as usize);
    let all_out = killed.elapsed();
    let missing: Vec<u64> = (0..n).filter(|id| !out.seen.contains_key(id)).collect();
    assert!(
        missing.is_empty(),
        "{} ids lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    wait_until("b to hold all 4 partitions", || {
        partitions_held(addr_b) == 4
    });
    b.terminate();
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
    committed_is_the_end(&bootstrap, "kill");
    let written = output_messages(&bootstrap);
    eprintln!(
        "worked-case=sigkill-half-way ids={n} seconds_from_kill_to_all_ids={:.1} \
         output_messages={written} duplicates={}",
        all_out.as_secs_f64(),
        written - n as i64
    );
}

#[test]
fn partitions_move_on_join_and_on_leave() {
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    produce(&bootstrap, 0..100);
    let dir = TempDir::new("kafka-rebalance");
    let job = job_file(&dir, &bootstrap, "rebalance");
    let (mut a, addr_a) = instance(dir.path(), &job, "a");
    wait_until("a alone to hold all 4 partitions", || {
        partitions_held(addr_a) == 4
    });
    let (mut b, addr_b) = instance(dir.path(), &job, "b");
    wait_until("b's join to give it partitions", || {
        let (pa, pb) = (partitions_held(addr_a), partitions_held(addr_b));
        pb > 0 && pa + pb == 4
    });
    b.terminate();
    assert_eq!(b.wait_code(), 0, "{}", b.stderr());
    wait_until("b's leaving to give a all 4 partitions again", || {
        partitions_held(addr_a) == 4
    });
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
}

/// A bad CEL `key:`/`timestamp:` on the source or `key:` on the sink fails `validate` (no
/// broker needed) with exit 2, at the expression's line and column in the job file.
#[test]
fn a_bad_key_or_timestamp_expression_fails_validate_at_its_line() {
    let dir = TempDir::new("kafka-bad-expr");
    let cases = [
        // (source key, source timestamp, sink key, where, what)
        (
            "'region +'",
            "at",
            "'string(key)'",
            "7:19",
            "source \"orders\": invalid kafka settings: key: syntax error",
        ),
        (
            "region",
            "'nosuch(at)'",
            "'string(key)'",
            "8:17",
            "source \"orders\": invalid kafka settings: timestamp: unknown function 'nosuch'",
        ),
        (
            "region",
            "at",
            "'string(key'",
            "15:21",
            "sink \"out\": invalid kafka settings: key: syntax error",
        ),
    ];
    for (i, (key, timestamp, sink_key, at, what)) in cases.into_iter().enumerate() {
        let file = format!("bad{i}.yaml");
        dir.write(
            &file,
            &format!(
                "name: bad
sources:
  orders:
    type: kafka
    brokers: 127.0.0.1:1
    topics: [in]
    key: {key}
    timestamp: {timestamp}
sinks:
  out:
    type: kafka
    input: orders
    brokers: 127.0.0.1:1
    topic: out
    key: {sink_key}
"
            ),
        );
        let out = common::tidemark(dir.path(), ["validate", file.as_str()]);
        assert_eq!(out.code(), 2, "{file}: {}", out.stderr);
        let prefix = format!("{file}:{at}: ");
        let line = out
            .stderr
            .lines()
            .find(|l| l.starts_with("error: ") && l.contains(&prefix))
            .unwrap_or_else(|| panic!("{file}: no error at {prefix:?}:\n{}", out.stderr));
        assert!(line.contains(what), "{file}: {line}");
        assert_eq!(
            out.stderr
                .lines()
                .filter(|l| l.starts_with("error: "))
                .count(),
            1,
            "{file}: one error only:\n{}",
            out.stderr
        );
    }
}

/// The spec's worked case: a source with `brokers: 127.0.0.1:1` fails with `--kafka-timeout 5s`,
/// exit 1, the broker's own error in the message, and the report says the job failed.
#[test]
fn an_unreachable_broker_fails_the_run_with_the_broker_error() {
    let dir = TempDir::new("kafka-unreachable");
    dir.write(
        "job.yaml",
        "name: nowhere
sources:
  orders:
    type: kafka
    brokers: 127.0.0.1:1
    topics: [orders]
sinks:
  out:
    type: discard
    input: orders
",
    );
    let out = common::tidemark(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--kafka-timeout",
            "5s",
            "--metrics-addr",
            "127.0.0.1:0",
            "--report-file",
            "report.json",
        ],
    );
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cannot reach Kafka at 127.0.0.1:1 within 5s"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("Connection refused"), "{}", out.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["outcome"], "failed", "{report}");
    assert_eq!(report["exit_code"], 1, "{report}");
}

/// The Kafka, checkpoint and readiness series are registered with the job's registry:
/// `/metrics` has each family once, and `/api/v1/metrics` lists the same series (name and
/// labels) under `series`.
#[test]
fn kafka_and_checkpoint_series_are_in_both_apis_once() {
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    produce(&bootstrap, 0..1_000);
    let dir = TempDir::new("kafka-series");
    let job = job_file(&dir, &bootstrap, "series");
    let (mut a, addr) = instance(dir.path(), &job, "a");
    let families = [
        "tidemark_checkpoints_completed_total",
        "tidemark_checkpoints_failed_total",
        "tidemark_checkpoints_skipped_total",
        "tidemark_checkpoint_duration_seconds",
        "tidemark_kafka_lag_records",
        "tidemark_source_lag_seconds",
        "tidemark_kafka_commits_total",
        "tidemark_job_ready",
        "tidemark_job_stalled",
    ];
    // One instance holds all 4 partitions, has read them all and committed.
    let m = common::scrape_until(addr, "lag 0 on 4 partitions and a commit", |m| {
        m.samples("tidemark_kafka_lag_records").count() == 4
            && m.total("tidemark_kafka_lag_records") == 0.0
            && m.total("tidemark_kafka_commits_total") > 0.0
    });
    for family in families {
        let header = format!("# TYPE {family} ");
        assert_eq!(m.body.matches(&header).count(), 1, "{family}:\n{}", m.body);
    }
    // The series of these families in /metrics, by name and own labels.
    let own = |labels: Vec<(String, String)>| -> Vec<(String, String)> {
        let mut labels: Vec<(String, String)> = labels
            .into_iter()
            .filter(|(k, _)| k != "job_name" && k != "tidemark_instance" && k != "le")
            .collect();
        labels.sort();
        labels
    };
    let mut in_text: Vec<(String, Vec<(String, String)>)> = m
        .raw_series()
        .into_iter()
        .filter_map(|s| {
            let family = families.iter().find(|f| {
                s.name == **f
                    || (s.name.starts_with(**f)
                        && ["_bucket", "_sum", "_count"].contains(&&s.name[f.len()..]))
            })?;
            Some((family.to_string(), own(s.labels.clone())))
        })
        .collect();
    in_text.dedup();
    let api = common::http(addr, "GET", "/api/v1/metrics");
    assert_eq!(api.status, 200, "{}", api.body);
    let json: serde_json::Value = serde_json::from_str(&api.body).expect("JSON");
    let mut in_api: Vec<(String, Vec<(String, String)>)> = json["series"]
        .as_array()
        .unwrap_or_else(|| panic!("no series list: {json}"))
        .iter()
        .map(|s| {
            let labels = s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            (s["name"].as_str().unwrap().to_owned(), own(labels))
        })
        .collect();
    in_text.sort();
    in_api.sort();
    assert_eq!(in_api, in_text, "{}", api.body);
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
}
