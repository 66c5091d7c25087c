//! Failover that keeps event time and offsets right (`docs/kafka.md`, "Failover"): real
//! `tidemark run` processes on a broker the test starts itself (librdkafka's mock cluster, and
//! tansu: every case runs on both), the kill forced by the test at a point it picks, each
//! result compared with a reference the test computes.
//!
//! - `start: earliest` applies only to partitions without a committed offset: after one of two
//!   instances is killed, the survivor resumes the dead one's partitions at the group's commit,
//!   not at offset 0;
//! - a dead instance does not hold event time back: behind an exchange, windows fire again once
//!   the survivor has read the dead one's partitions, and every window of the events written
//!   after the kill is complete;
//! - one instance with checkpoints starting on a backlog (its subtasks join the group one by one,
//!   partitions move between them as they do, nothing is committed yet) reads every record once
//!   and drops none as late. Whether a partition moves while the first subtask is reading
//!   depends on when the second joins; `kafka/tests/offsets.rs` forces that move.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::brokers::{Broker, Kind};
use common::{partitions_held, scrape, sigkill, Proc, TempDir};
use rdkafka::producer::BaseRecord;
use tidemark_kafka::testing;

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(180);
const GROUP: &str = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn instance(dir: &Path, job: &Path, id: &str) -> (Proc, SocketAddr) {
    common::run_instance(dir, job, id, &[])
}

/// The group's committed offsets of `topic` added up (a partition without one counts 0):
/// compared with the count written, never with the ends a broker reports (tansu's lag).
fn committed_total(bootstrap: &str, group: &str, topic: &str, n: i32) -> i64 {
    testing::committed_and_end(bootstrap, group, topic, n)
        .iter()
        .map(|(c, _)| (*c).max(0))
        .sum()
}

/// Messages in all partitions of `topic`, read.
fn messages_in(bootstrap: &str, topic: &str, n: i32) -> i64 {
    testing::read_all(bootstrap, topic, n, DEADLINE).len() as i64
}

#[test]
fn start_earliest_resumes_a_dead_instances_partitions_at_the_commit() {
    start_earliest_resumes_at_the_commit(Kind::Mock);
}

#[test]
fn start_earliest_resumes_a_dead_instances_partitions_at_the_commit_on_tansu() {
    start_earliest_resumes_at_the_commit(Kind::Tansu);
}

fn start_earliest_resumes_at_the_commit(kind: Kind) {
    const IDS: u64 = 20_000;
    let broker = Broker::start(kind, &[("in", 4), ("out", 4)]);
    let bootstrap = broker.bootstrap().to_owned();
    testing::produce_ids(&bootstrap, "in", 0..IDS);
    let dir = TempDir::new("failover-earliest");
    let job = copy_job(&dir, "earliest", &bootstrap, "", GROUP);
    let ((mut a, addr_a), (mut b, _)) = two_copying(&dir, &job, &bootstrap, "earliest", IDS);
    let copied = messages_in(&bootstrap, "out", 4);
    assert!(copied >= IDS as i64, "{copied}");
    sigkill(&mut b);
    wait_until("a to hold all 4 partitions", || {
        partitions_held(addr_a, "orders") == 4
    });
    // One more message per partition: once a has committed them, it has read everything it
    // was going to read.
    produce_per_partition(&bootstrap, IDS, 1);
    wait_until("a's commits at the new ends", || {
        committed_total(&bootstrap, "earliest", "in", 4) == IDS as i64 + 4
    });
    let out = messages_in(&bootstrap, "out", 4);
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(
        out,
        copied + 4,
        "the survivor read the dead instance's partitions again (from offset 0?)"
    );
}

/// kafka `in` (4 partitions) → kafka `out`, P=2, checkpoints every 1 s, `start: earliest`, in
/// the group `name` with `properties`; `top` adds top-level fields.
fn copy_job(dir: &TempDir, name: &str, bootstrap: &str, top: &str, properties: &str) -> PathBuf {
    dir.write(
        "job.yaml",
        &format!(
            "name: {name}
parallelism: 2
checkpoint: {{interval: 1s}}
{top}
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [in]
    start: earliest
    properties: {properties}
sinks:
  copy:
    type: kafka
    input: orders
    brokers: {bootstrap}
    topic: out
"
        ),
    )
}

/// Two instances `a` and `b` of a [`copy_job`], once both hold partitions and the group
/// `group` has committed the `ids` messages already written.
fn two_copying(
    dir: &TempDir,
    job: &Path,
    bootstrap: &str,
    group: &str,
    ids: u64,
) -> ((Proc, SocketAddr), (Proc, SocketAddr)) {
    let (a, addr_a) = instance(dir.path(), job, "a");
    let (b, addr_b) = instance(dir.path(), job, "b");
    wait_until("both instances to hold partitions", || {
        partitions_held(addr_a, "orders") > 0 && partitions_held(addr_b, "orders") > 0
    });
    // Every message copied and committed: the forced point of the kill.
    wait_until("the group's commits at the partitions' ends", || {
        committed_total(bootstrap, group, "in", 4) == ids as i64
    });
    ((a, addr_a), (b, addr_b))
}

/// `per_partition` more messages in each of `in`'s 4 partitions, ids from `first` on.
fn produce_per_partition(bootstrap: &str, first: u64, per_partition: u64) {
    let producer = testing::producer(bootstrap);
    for p in 0..4 {
        for i in 0..per_partition {
            let id = (first + per_partition * p as u64 + i).to_string();
            let value = format!("{{\"value\": {id}}}");
            let record = BaseRecord::to("in").partition(p).key(&id).payload(&value);
            testing::send_retrying(&producer, record, Duration::from_millis(1));
        }
    }
    testing::flush(&producer);
}

/// The exchange job of the event-time tests: kafka → hash exchange → 1 s event-time window
/// (count per key) → file.
fn window_job(
    dir: &TempDir,
    id: &str,
    bootstrap: &str,
    parallelism: usize,
    checkpoint: bool,
) -> PathBuf {
    window_job_with(dir, id, bootstrap, parallelism, parallelism, checkpoint)
}

/// [`window_job`] with the window (the exchange's reader) at `window_parallelism`.
fn window_job_with(
    dir: &TempDir,
    id: &str,
    bootstrap: &str,
    parallelism: usize,
    window_parallelism: usize,
    checkpoint: bool,
) -> PathBuf {
    let out = dir.join(&format!("out-{id}.jsonl"));
    let checkpoint = if checkpoint {
        "checkpoint: {interval: 1s}\n"
    } else {
        ""
    };
    dir.write(
        &format!("job-{id}.yaml"),
        &format!(
            "name: failover
parallelism: {parallelism}
{checkpoint}sources:
  events:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [in]
    key: k
    timestamp: ts
    properties: {GROUP}
    watermarks: {{max_out_of_orderness: 2s, interval: 50ms}}
operators:
  per_key:
    type: window
    input: events
    partition: hash
    parallelism: {window_parallelism}
    size: 1s
    time: event
    aggregates: {{n: count}}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 4, properties: {GROUP}}}}}
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

const BASE_MS: i64 = 1_700_000_000_000;
const KEYS: usize = 10;

/// `per_partition` events for each of the 4 partitions from `start_ms`, 10 ms of event time
/// apart: (partition, key, ts).
fn events(start_ms: i64, per_partition: i64) -> Vec<(i32, String, i64)> {
    (0..4)
        .flat_map(|p| {
            (0..per_partition).map(move |i| {
                let key = format!("k{}", (i as usize * 4 + p as usize) % KEYS);
                (p, key, start_ms + i * 10)
            })
        })
        .collect()
}

fn produce_events(bootstrap: &str, events: &[(i32, String, i64)]) {
    let producer = testing::producer(bootstrap);
    for (p, key, ts) in events {
        let value = format!("{{\"k\":\"{key}\",\"ts\":{ts}}}");
        let record = BaseRecord::to("in").partition(*p).payload(&value).key(key);
        testing::send_retrying(&producer, record, Duration::from_millis(1));
    }
    testing::flush(&producer);
}

/// (key, window start ms) → count.
fn reference(events: &[(i32, String, i64)]) -> BTreeMap<(String, i64), u64> {
    let mut counts = BTreeMap::new();
    for (_, key, ts) in events {
        *counts
            .entry((key.clone(), ts - ts.rem_euclid(1_000)))
            .or_insert(0) += 1;
    }
    counts
}

/// The window results in the file at `path`, failing on a window written twice.
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

fn late_dropped(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_records_dropped_total", |l| {
        l.get("reason") == Some("late")
    })
}

#[test]
fn a_dead_instance_stops_holding_event_time_back() {
    dead_instance_stops_holding_event_time_back(Kind::Mock);
}

#[test]
fn a_dead_instance_stops_holding_event_time_back_on_tansu() {
    dead_instance_stops_holding_event_time_back(Kind::Tansu);
}

fn dead_instance_stops_holding_event_time_back(kind: Kind) {
    let broker = Broker::start(kind, &[("in", 4)]);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("failover-event-time");
    // One window subtask per instance: without checkpoints a window's keys that move start
    // again empty, and a rebalance after the survivor took every partition (a loaded machine
    // sees the group's members expire in several rounds) could move an exchange partition
    // between two window subtasks of the survivor halfway through a window. The event time
    // of the survivor's two source subtasks is what this case is about.
    let (mut a, addr_a) = instance(
        dir.path(),
        &window_job_with(&dir, "a", &bootstrap, 2, 1, false),
        "a",
    );
    let (mut b, addr_b) = instance(
        dir.path(),
        &window_job_with(&dir, "b", &bootstrap, 2, 1, false),
        "b",
    );
    for source in ["events", "per_key.exchange-in"] {
        wait_until(&format!("{source} spread over both instances"), || {
            let (x, y) = (
                partitions_held(addr_a, source),
                partitions_held(addr_b, source),
            );
            x >= 1 && y >= 1 && x + y == 4
        });
    }
    // First: 20 s of event time, read by both; windows fire at both.
    produce_events(&bootstrap, &events(BASE_MS, 2_000));
    wait_until("windows at both", || {
        windows_out(addr_a) > 0.0 && windows_out(addr_b) > 0.0
    });
    // The forced point: b dies with its writer's watermarks in every exchange partition.
    sigkill(&mut b);
    wait_until("a to hold every input and exchange partition", || {
        partitions_held(addr_a, "events") == 4
            && partitions_held(addr_a, "per_key.exchange-in") == 4
    });
    let fired_before = windows_out(addr_a);
    // Then: 20 s more, 100 s later in event time, read by a alone.
    let later = events(BASE_MS + 100_000, 2_000);
    produce_events(&bootstrap, &later);
    // Event time passes b: the windows of the later events up to their watermark (the last
    // timestamp less the out-of-orderness) fire at a while it runs (b's writer, dead, holds
    // nothing back) ...
    let last = BASE_MS + 100_000 + 1_999 * 10;
    let expected: BTreeMap<_, _> = reference(&later)
        .into_iter()
        .filter(|((_, start), _)| start + 1_000 <= last - 2_000)
        .collect();
    assert!(expected.len() >= 15 * KEYS, "{}", expected.len());
    wait_until("the later windows to fire at the survivor", || {
        windows_out(addr_a) - fired_before >= expected.len() as f64
    });
    // ... each complete: none of the later events was dropped as late. (Events of b's
    // partitions read again from its last commit may be: they were counted before the kill.)
    let dropped = scrape(addr_a).body;
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    let got = results(&dir.join("out-a.jsonl"));
    for (window, n) in &expected {
        assert_eq!(
            got.get(window),
            Some(n),
            "window {window:?}; a's rebalances (with TIDEMARK_TEST_RUST_LOG=tidemark_kafka=debug):\n{}\na's drops and watermarks before it stopped:\n{}",
            a.stderr()
                .lines()
                .filter(|l| l.contains("rebalance"))
                .collect::<Vec<_>>()
                .join("\n"),
            dropped
                .lines()
                .filter(|l| l.starts_with("tidemark_records_dropped_total")
                    || l.starts_with("tidemark_watermark")
                    || l.starts_with("tidemark_kafka_partition"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

fn windows_out(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_records_out_total", |l| {
        l.get("operator_id") == Some("per_key")
    })
}

#[test]
fn one_instance_starting_on_a_backlog_reads_every_record_once_and_none_late() {
    one_instance_on_a_backlog(Kind::Mock);
}

#[test]
fn one_instance_starting_on_a_backlog_reads_every_record_once_and_none_late_on_tansu() {
    one_instance_on_a_backlog(Kind::Tansu);
}

fn one_instance_on_a_backlog(kind: Kind) {
    // At most ~4 MB per exchange partition even if the readers join after the sources have
    // read everything: librdkafka's mock keeps 5 MB of a partition (docs/kafka.md, "Limits of
    // the mock cluster").
    const PER_PARTITION: i64 = 10_000;
    let broker = Broker::start(kind, &[("in", 4)]);
    let bootstrap = broker.bootstrap().to_owned();
    let backlog = events(BASE_MS, PER_PARTITION);
    produce_events(&bootstrap, &backlog);
    let dir = TempDir::new("failover-backlog");
    // `--drain`: the job ends with this instance, so its stop fires the open windows (without
    // it, the window's state behind the exchange would wait in the state topic for the next
    // owner, `docs/kafka.md`, "State that moves with its partitions").
    let job = window_job(&dir, "a", &bootstrap, 2, true);
    let mut a = Proc::spawn(
        dir.path(),
        [
            "run",
            job.to_str().unwrap(),
            "--metrics-addr",
            "127.0.0.1:0",
            "--instance-id",
            "a",
            "--drain",
        ],
    );
    let addr_a = a.metrics_addr();
    let total = (4 * PER_PARTITION) as f64;
    wait_until("every event through the exchange into the window", || {
        // An instance that ended (failed) says why, rather than a refused scrape.
        let Ok(m) = std::panic::catch_unwind(|| scrape(addr_a)) else {
            a.wait_code();
            panic!("a ended early: {}", a.stderr());
        };
        m.sum("tidemark_records_in_total", |l| {
            l.get("operator_id") == Some("per_key")
        }) >= total
    });
    let m = scrape(addr_a);
    let read = m.sum("tidemark_records_out_total", |l| {
        l.get("operator_id") == Some("events")
    });
    assert_eq!(read, total, "the source read a record twice");
    assert_eq!(late_dropped(addr_a), 0.0, "on-time records dropped as late");
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    assert_eq!(results(&dir.join("out-a.jsonl")), reference(&backlog));
}

/// A killed instance's partitions with unread messages make the survivor's `/readyz` say
/// `stalled`, naming one of them, until the group hands them over and they are read: the
/// partitions nobody reads are visible, though every partition the survivor holds has lag 0.
#[test]
fn a_dead_instances_unread_partitions_make_the_survivor_say_stalled_until_it_reads_them() {
    unread_partitions_stall(Kind::Mock);
}

#[test]
fn a_dead_instances_unread_partitions_make_the_survivor_say_stalled_until_it_reads_them_on_tansu() {
    unread_partitions_stall(Kind::Tansu);
}

fn unread_partitions_stall(kind: Kind) {
    const IDS: u64 = 2_000;
    let broker = Broker::start(kind, &[("in", 4), ("out", 4)]);
    let bootstrap = broker.bootstrap().to_owned();
    testing::produce_ids(&bootstrap, "in", 0..IDS);
    let dir = TempDir::new("failover-unread");
    // The group notices the dead member only after its 15 s session; stall_timeout is shorter,
    // and longer than the commits' 1 s (a checkpoint commits the group's positions).
    let session = "{session.timeout.ms: 15000, heartbeat.interval.ms: 500}";
    let job = copy_job(&dir, "unread", &bootstrap, "stall_timeout: 4s", session);
    let ((mut a, addr_a), (mut b, addr_b)) = two_copying(&dir, &job, &bootstrap, "unread", IDS);
    let held_by_b: Vec<String> = scrape(addr_b)
        .samples("tidemark_kafka_lag_records")
        .filter(|s| s.labels.get("source_id") == Some("orders"))
        .filter_map(|s| s.labels.get("partition").map(str::to_owned))
        .collect();
    assert!(!held_by_b.is_empty());
    sigkill(&mut b);
    // Ten more messages per partition: b's are unread, and nobody reads them until the group
    // notices b is gone.
    produce_per_partition(&bootstrap, IDS, 10);
    let stalled = common::http_until(addr_a, "/readyz", "a stall naming b's partition", |r| {
        r.status == 503
            && r.body.contains("\"reason\":\"stalled\"")
            && held_by_b
                .iter()
                .any(|p| r.body.contains(&format!("partition in/{p} has ")))
    });
    assert!(
        stalled
            .body
            .contains("no subtask of this instance reads it"),
        "{}",
        stalled.body
    );
    // Every partition a holds is read to its end: lag 0 alone would have said all is well.
    assert_eq!(
        scrape(addr_a).sum("tidemark_job_stalled", |_| true),
        1.0,
        "{}",
        stalled.body
    );
    // The group hands b's partitions to a, a reads them, and the stall is over.
    common::http_until(addr_a, "/readyz", "ready again", |r| r.status == 200);
    wait_until("a's commits at the new ends", || {
        committed_total(&bootstrap, "unread", "in", 4) == IDS as i64 + 40
    });
    assert_eq!(partitions_held(addr_a, "orders"), 4);
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
}
