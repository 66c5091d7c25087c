//! State that moves with its Kafka partitions (`docs/kafka.md`, "State that moves with its
//! partitions"; the spec's Kafka worked cases in `state.md`): real `tidemark run` processes on
//! a mock cluster the test starts itself, kills and rebalances forced by the test at points it
//! picks, the output topic compared with a reference the test computes.
//!
//! The job: kafka (4 partitions) → hash exchange (8 partitions) → 1 s tumbling event-time
//! count and sum per user → kafka, `checkpoint: {interval: 500ms}`, two subtasks per instance.
//! 120,000 events are written in two halves; windows still open at the end of the first half
//! hold counts of the first half that only the state topic carries across the move.
//!
//! - SIGKILL of one of two instances once every record of the first half is covered by a
//!   state commit, a new instance started, then the second half: the output, with repeats
//!   dropped by their result id (the header `tidemark-result-id`), equals the reference,
//!   every repeat equals its first copy (value and headers), and the survivor restored state;
//! - a second instance joining after the first half, the first leaving with SIGTERM: the same,
//!   and the leaving instance fires no open window (SIGTERM hands its partitions over);
//! - a replay upstream of the exchange: an instance killed (SIGKILL) once its exchange writer
//!   has delivered a record for every input message of the second half, while its source has
//!   committed only the first half (checkpoints every hour: only the SIGTERM of the instance
//!   before it committed), so the next instance reads the second half again; the reader drops
//!   every replayed record by its origin (exactly the second half's count), and the output with
//!   repeats dropped by result id equals the reference;
//! - a state topic with another partition count than the exchange's fails the job, naming
//!   both topics and the counts;
//! - a state topic whose committed state was written with the old key hash (no
//!   `tidemark-key-hash` header) is refused before the job starts, exit 2.
//!
//! The spec's two state cases and the idle-kill cases run on the mock and on tansu
//! (`common::brokers`) with production watermarks (`idleness: 3s`, shorter than the session
//! timeout); the join-and-leave case on the mock also with a CPU hog beside it (the spec's
//! worked case of a loaded machine). In the two state cases events
//! keep coming while the group moves partitions (one per input partition every 100 ms), as in
//! production; the idle-kill cases are the ones with every input quiet and idle at the kill.
#![cfg(unix)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::brokers::{Broker, Kind};
use common::{http, partitions_held, scrape, sigkill, CpuHog, Proc, TempDir};
use rdkafka::producer::BaseRecord;
use tidemark_kafka::testing;

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(240);
const GROUP: &str = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";
const JOB: &str = "kstate";
const EXCHANGE: &str = "tidemark-kstate-per_user-exchange";
const STATE: &str = "tidemark-kstate-per_user-state";
const OPERATOR: &str = "per_user";
const READER: &str = "per_user.exchange-in";

/// Events in all. The replay test writes its second half into the exchange twice, so each of
/// the 8 exchange partitions holds 1.5 × EVENTS / 8 records, plus the watermarks every writer
/// subtask sends to every partition every 50 ms. The mock cluster keeps 5 MB per partition
/// (about 45,000 small events, docs/kafka.md, "Limits of the mock cluster"): at 200,000 that
/// came to the limit (37,500 records and the control messages of a slow run), and the reader
/// rightly stopped the job because messages it had not read were deleted (5 runs of 7 that
/// day). At 120,000: 22,500 records per partition.
const EVENTS: u64 = 120_000;
const USERS: u64 = 500;
const BASE_MS: i64 = 1_700_000_000_000;

/// [`wait_until`], and on giving up also what `diagnose` says then.
fn wait_until_or(what: &str, mut ready: impl FnMut() -> bool, diagnose: impl Fn() -> String) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < DEADLINE,
            "gave up waiting for {what}; then:\n{}",
            diagnose()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An instance's Kafka series (partitions held, their lag, watermark and idleness, commits)
/// and readiness, as text: what a failure shows.
fn kafka_series(addr: SocketAddr) -> String {
    let metrics = http(addr, "GET", "/metrics").body;
    let mut lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("tidemark_kafka_") || l.starts_with("tidemark_job_ready"))
        .collect();
    lines.sort();
    let ready = http(addr, "GET", "/readyz").body;
    format!("/readyz: {ready}\n{}", lines.join("\n"))
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The broker of a case with the input and output topics; Tidemark makes the exchange and
/// state topics itself (on the mock cluster through `dev-kafka`'s CreateTopics), except a state
/// topic of another count than 8, made here for the test of that refusal.
fn broker(kind: Kind, state_partitions: i32) -> Broker {
    let broker = Broker::start(kind, &[("in", 4), ("out", 4)]);
    if state_partitions != 8 {
        broker.create_topic(EXCHANGE, 8);
        broker.create_topic(STATE, state_partitions);
    }
    broker
}

fn job(dir: &TempDir, bootstrap: &str) -> PathBuf {
    job_checkpointing(dir, bootstrap, "500ms")
}

/// The job, with checkpoints every `interval`.
fn job_checkpointing(dir: &TempDir, bootstrap: &str, interval: &str) -> PathBuf {
    job_with(dir, bootstrap, interval, GROUP, "")
}

/// The job as a new user writes it for production: Kafka's default group settings (a dead
/// member noticed after `session.timeout.ms`, 45 s), watermarks with `idleness` shorter than
/// that, checkpoints every 500 ms.
fn production_job(dir: &TempDir, bootstrap: &str, group: &str) -> PathBuf {
    job_with(dir, bootstrap, "500ms", group, ", idleness: 3s")
}

/// The job, with checkpoints every `interval`, the consumer group's `group` properties and more
/// watermark settings (`watermarks`, each behind a comma).
fn job_with(
    dir: &TempDir,
    bootstrap: &str,
    interval: &str,
    group: &str,
    watermarks: &str,
) -> PathBuf {
    let sink = format!(
        "
    type: kafka
    input: {OPERATOR}
    brokers: \"{bootstrap}\"
    topic: out"
    );
    let text = job_text(
        bootstrap,
        &format!("interval: {interval}"),
        group,
        watermarks,
        &sink,
    );
    dir.write("job.yaml", &text)
}

/// The job file: `checkpoint` (the mapping's fields), the consumer group's `group` properties,
/// more watermark settings (`watermarks`) and the sink `out` (`sink`: its mapping).
fn job_text(
    bootstrap: &str,
    checkpoint: &str,
    group: &str,
    watermarks: &str,
    sink: &str,
) -> String {
    format!(
        "name: {JOB}
parallelism: 2
checkpoint: {{{checkpoint}}}
sources:
  events:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [in]
    start: earliest
    key: user
    timestamp: ts
    properties: {group}
    watermarks: {{max_out_of_orderness: 1s, interval: 50ms{watermarks}}}
operators:
  {OPERATOR}:
    type: window
    input: events
    key: user
    size: 1s
    time: event
    aggregates: {{n: count, total: {{sum: amount}}}}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 8, properties: {group}}}}}
sinks:
  out: {sink}
"
    )
}

fn instance(dir: &Path, job: &Path, id: &str) -> (Proc, SocketAddr) {
    instance_with(dir, job, id, &[])
}

fn instance_with(dir: &Path, job: &Path, id: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    common::run_instance(dir, job, id, extra)
}

/// Exchange partitions whose state the instance at `addr` restored.
fn restored_partitions(addr: SocketAddr) -> usize {
    scrape(addr)
        .samples("tidemark_state_restore_seconds")
        .filter(|s| s.labels.get("operator_id") == Some(OPERATOR))
        .count()
}

/// Event `i`: (partition, user, ts ms, amount). EVENTS / 4 per partition, 1 ms of event time
/// apart, starting half a window in: the first half ends in the middle of a window.
fn event(i: u64) -> (i32, String, i64, u64) {
    let partition = (i % 4) as i32;
    let user = format!("u{}", (i * 7 + i / 13) % USERS);
    (partition, user, BASE_MS + 500 + (i / 4) as i64, i % 97)
}

fn produce(bootstrap: &str, events: impl Iterator<Item = (i32, String, i64, u64)>) {
    let producer = testing::producer(bootstrap);
    send(&producer, events);
}

fn send(
    producer: &rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    events: impl Iterator<Item = (i32, String, i64, u64)>,
) {
    for (p, user, ts, amount) in events {
        let value = format!("{{\"user\":\"{user}\",\"ts\":{ts},\"amount\":{amount}}}");
        let record = BaseRecord::to("in").partition(p).payload(&value).key(&user);
        testing::send_retrying(producer, record, Duration::from_millis(1));
    }
    testing::flush(producer);
}

/// Events written slowly while the group moves partitions: one per input partition every
/// 100 ms, in order, until stopped. Data keeps coming while instances start and during a
/// failover, as in production, so no input is quiet for `idleness` and idle (a partition that
/// was idle through a quiet spell may deliver its first records after it late: docs/kafka.md,
/// "Quiet periods"). The cases used to start the instances on empty inputs, wait for the
/// group, and only then write the first half at once; the first window then went missing for
/// exactly the users whose first-window events all lie in input partitions 0 and 2 (120
/// users, in a full suite) or in partition 3 (60, a run of the idle-kill case): the first
/// records of partitions whose reader learnt of them a moment after the others', behind a
/// watermark their idle claims had let pass.
struct Trickle {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Trickle {
    /// From the first event of the second half.
    fn start(bootstrap: &str) -> Trickle {
        Trickle::from(bootstrap, EVENTS / 2, EVENTS)
    }

    /// Events `first..end`, four at a time.
    fn from(bootstrap: &str, first: u64, end: u64) -> Trickle {
        let stop = Arc::new(AtomicBool::new(false));
        let (bootstrap, stopped) = (bootstrap.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let producer = testing::producer(&bootstrap);
            let mut next = first;
            while !stopped.load(Ordering::Relaxed) && next + 4 <= end {
                send(&producer, (next..next + 4).map(event));
                next += 4;
                std::thread::sleep(Duration::from_millis(100));
            }
            next
        });
        Trickle { stop, thread }
    }

    /// Stops writing; returns the first event not written.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        common::join(self.thread, "the trickle of events")
    }
}

/// After the second half: one event per partition a minute of event time later, so that every
/// window of the EVENTS events fires (its own windows never do).
fn produce_flush(bootstrap: &str) {
    produce(
        bootstrap,
        (0..4).map(|p| (p, "zz-flush".to_owned(), BASE_MS + 120_000, 0)),
    );
}

/// (user, window start ms) → (count, sum).
type Windows = BTreeMap<(String, i64), (u64, u64)>;

/// The windows of the EVENTS events, computed here from them.
fn reference() -> Windows {
    let mut out = BTreeMap::new();
    for i in 0..EVENTS {
        let (_, user, ts, amount) = event(i);
        let w = out
            .entry((user, ts - ts.rem_euclid(1_000)))
            .or_insert((0, 0));
        w.0 += 1;
        w.1 += amount;
    }
    out
}

/// Every message of `topic` (partitions `0..n`) up to the ends they have now:
/// (partition, offset, headers as (name, value), value).
type Read = (i32, i64, Vec<(String, String)>, Option<Vec<u8>>);

fn read_all(bootstrap: &str, topic: &str, n: i32) -> Vec<Read> {
    testing::read_all(bootstrap, topic, n, DEADLINE)
        .into_iter()
        .map(|m| (m.partition, m.offset, m.headers, m.value))
        .collect()
}

/// The offset of the last record (not a control message) in each exchange partition.
fn last_records_in_exchange(bootstrap: &str) -> Vec<i64> {
    let mut last = vec![-1; 8];
    for (p, offset, headers, _) in read_all(bootstrap, EXCHANGE, 8) {
        if !headers.iter().any(|(k, _)| k == "tidemark-control") {
            last[p as usize] = last[p as usize].max(offset);
        }
    }
    last
}

/// The input messages (partition, offset) that have a record in the exchange, from the records'
/// origin headers (`in/<partition>/<offset>/<seq>`).
fn inputs_in_exchange(bootstrap: &str) -> BTreeSet<(i32, i64)> {
    let mut out = BTreeSet::new();
    for (_, _, headers, _) in read_all(bootstrap, EXCHANGE, 8) {
        if let Some((_, origin)) = headers.iter().find(|(k, _)| k == "tidemark-origin") {
            let parts: Vec<&str> = origin.split('/').collect();
            assert_eq!(parts.len(), 4, "origin {origin}");
            assert_eq!((parts[0], parts[3]), ("in", "0"), "origin {origin}");
            out.insert((parts[1].parse().unwrap(), parts[2].parse().unwrap()));
        }
    }
    out
}

/// The input messages of events `range` (each partition's messages in the order written).
fn inputs_of(range: std::ops::Range<u64>) -> BTreeSet<(i32, i64)> {
    range.map(|i| ((i % 4) as i32, (i / 4) as i64)).collect()
}

/// The group's committed offsets of `topic` (-1: none) and the partitions' ends.
fn committed_and_end(bootstrap: &str, topic: &str, n: i32) -> Vec<(i64, i64)> {
    testing::committed_and_end(bootstrap, JOB, topic, n)
}

/// The forced point: every input record has gone through the exchange, and every record in
/// the exchange is covered by a complete checkpoint (its state committed before its offset).
fn wait_for_first_half_committed(bootstrap: &str) {
    // Against the count written, not the end the broker reports (tansu's lags behind).
    wait_until("the input committed to its end", || {
        committed_and_end(bootstrap, "in", 4)
            .iter()
            .all(|(c, _)| *c == EVENTS as i64 / 8)
    });
    let last = last_records_in_exchange(bootstrap);
    wait_until("every exchange record committed", || {
        committed_and_end(bootstrap, EXCHANGE, 8)
            .iter()
            .zip(&last)
            .all(|((c, _), l)| c > l)
    });
}

/// The window results in the output topic, repeats dropped by their header
/// `tidemark-result-id`: each (user, window start) from its first copy, failing on a repeat
/// that differs from it (value or headers), on a message without an id, on an id that does
/// not name its window, and on two ids for one window. Also returns how many repeats there
/// were.
fn results(bootstrap: &str) -> (Windows, usize) {
    let mut out = BTreeMap::new();
    // Result id → the first copy's headers and value.
    type FirstCopy = (Vec<(String, String)>, Vec<u8>);
    let mut first: BTreeMap<String, FirstCopy> = BTreeMap::new();
    let mut repeats = 0;
    for (_, _, headers, value) in read_all(bootstrap, "out", 4) {
        let value = value.unwrap();
        let id = headers
            .iter()
            .find(|(k, _)| k == "tidemark-result-id")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("an output message without a result id: {headers:?}"));
        if let Some(copy) = first.get(&id) {
            assert_eq!(
                copy,
                &(headers, value),
                "a repeat of result {id} differs from its first copy"
            );
            repeats += 1;
            continue;
        }
        let w: serde_json::Value = serde_json::from_slice(&value).unwrap();
        let key = (
            w["key"].as_str().unwrap().to_owned(),
            w["window_start"].as_i64().unwrap(),
        );
        // On time (firing 0): no lateness is allowed.
        let start_ns = key.1 * 1_000_000;
        assert_eq!(
            id,
            format!(
                "window/{OPERATOR}/{start_ns}/{}/0/\"{}\"",
                start_ns + 1_000_000_000,
                key.0
            ),
            "the id does not name its window"
        );
        let got = (
            w["n"].as_u64().unwrap(),
            w["total"].as_f64().unwrap() as u64,
        );
        assert!(
            out.insert(key.clone(), got).is_none(),
            "two result ids for window {key:?}"
        );
        first.insert(id, (headers, value));
    }
    (out, repeats)
}

/// Waits until the output topic holds every window of the reference, then compares. The
/// running instances (and their metrics endpoints) must fire what is missing: one that exits
/// meanwhile fails the test at once with its stderr, and a give-up shows where event time
/// stands in each.
fn assert_output_is_the_reference(bootstrap: &str, instances: &mut [(&mut Proc, SocketAddr)]) {
    let expected = reference();
    let started = Instant::now();
    loop {
        let (got, _) = results(bootstrap);
        let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
        if missing.is_empty() {
            break;
        }
        for (proc, addr) in instances.iter_mut() {
            assert!(
                !proc.has_exited(),
                "the instance at {addr} exited with {} windows still missing: {}",
                missing.len(),
                proc.stderr()
            );
        }
        if started.elapsed() >= DEADLINE {
            // Which windows never came: per window start, and a few of them.
            let mut starts: BTreeMap<i64, usize> = BTreeMap::new();
            for (_, start) in &missing {
                *starts.entry(*start).or_default() += 1;
            }
            let starts: Vec<_> = starts.iter().map(|(s, n)| (s - BASE_MS, *n)).collect();
            let event_time = event_time_in(instances);
            panic!(
                "gave up waiting for every window in the output topic: {} of {} missing; \
                 per window start (ms after BASE_MS, count): {starts:?}; e.g. {:?}; \
                 event time: {event_time:#?}",
                missing.len(),
                expected.len(),
                &missing[..missing.len().min(5)]
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (got, repeats) = results(bootstrap);
    eprintln!("{} windows, {repeats} repeats", got.len());
    let mut wrong = Vec::new();
    for (k, want) in &expected {
        if got.get(k) != Some(want) {
            wrong.push((k.clone(), *want, got.get(k).copied()));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} windows wrong, e.g. {:?}; event time: {:#?}",
        wrong.len(),
        expected.len(),
        &wrong[..wrong.len().min(5)],
        event_time_in(instances)
    );
    let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(extra.is_empty(), "windows not in the reference: {extra:?}");
}

/// Where event time stands in each instance, which input holds it back, and what was dropped:
/// for a failure's message.
fn event_time_in(instances: &[(&mut Proc, SocketAddr)]) -> Vec<String> {
    instances
        .iter()
        .flat_map(|(_, addr)| {
            scrape(*addr)
                .body
                .lines()
                .filter(|l| {
                    l.starts_with("tidemark_watermark_seconds")
                        || l.starts_with("tidemark_watermark_holder_info")
                        || l.starts_with("tidemark_kafka_lag_records")
                        || l.starts_with("tidemark_job_stalled")
                        // Only drops that happened: the zeros would hide the rest in a CI
                        // log cut short.
                        || ((l.starts_with("tidemark_records_dropped_total")
                            || l.starts_with("tidemark_exchange_replayed_records_total"))
                            && !l.ends_with(" 0"))
                })
                .map(|l| format!("{addr} {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn spread(addrs: &[SocketAddr], source: &str, total: usize) -> bool {
    let counts: Vec<usize> = addrs.iter().map(|a| partitions_held(*a, source)).collect();
    counts.iter().all(|c| *c >= 1) && counts.iter().sum::<usize>() == total
}

#[test]
fn a_killed_instances_state_moves_to_the_survivor_and_then_to_a_new_instance() {
    killed_instance_state_moves(Kind::Mock);
}

#[test]
fn a_killed_instances_state_moves_to_the_survivor_and_then_to_a_new_instance_on_tansu() {
    killed_instance_state_moves(Kind::Tansu);
}

fn killed_instance_state_moves(kind: Kind) {
    let broker = broker(kind, 8);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-state-kill");
    let job = production_job(&dir, &bootstrap, GROUP);
    let ((mut a, _), (mut b, addr_b)) =
        two_instances_through_the_first_half(&dir, &job, &bootstrap);
    let trickle = Trickle::start(&bootstrap);
    let restored_before = restored_partitions(addr_b);
    // The forced point: a dies with windows open, their counts only in the state topic.
    sigkill(&mut a);
    wait_until("b to hold every exchange partition", || {
        partitions_held(addr_b, READER) == 8 && partitions_held(addr_b, "events") == 4
    });
    assert!(
        restored_partitions(addr_b) > restored_before,
        "the survivor restored no partition's state"
    );
    let restored = scrape(addr_b).sum("tidemark_state_restored_records_total", |l| {
        l.get("operator_id") == Some(OPERATOR)
    });
    assert!(restored > 0.0, "the survivor read no state message");
    // The live view's job document names the restores.
    let job_json: serde_json::Value =
        serde_json::from_str(&common::http(addr_b, "GET", "/api/v1/job").body).unwrap();
    assert_eq!(job_json["keeps_state"], true, "{job_json}");
    let partitions = job_json["state_restores"]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), restored_partitions(addr_b), "{job_json}");
    assert!(
        job_json["state_restores"]["records"][OPERATOR]
            .as_u64()
            .unwrap()
            > 0
    );
    // A new instance: some partitions move on from the survivor, with their state.
    let (mut c, addr_c) = instance(dir.path(), &job, "c");
    wait_until("the exchange spread over b and c", || {
        spread(&[addr_b, addr_c], READER, 8)
    });
    assert!(restored_partitions(addr_c) >= 1, "c restored no state");
    let from = trickle.stop();
    second_half_gives_the_reference(&bootstrap, from, &mut [(&mut b, addr_b), (&mut c, addr_c)]);
    for addr in [addr_b, addr_c] {
        assert_eq!(late(addr), 0.0, "on-time records dropped as late at {addr}");
    }
    stop(&mut [&mut b, &mut c]);
}

/// Instances `a` and `b` of `job`, each holding input and exchange partitions, and the first
/// half written and committed through them.
fn two_instances_through_the_first_half(
    dir: &TempDir,
    job: &Path,
    bootstrap: &str,
) -> ((Proc, SocketAddr), (Proc, SocketAddr)) {
    // The first events trickle in from before the start: no input is quiet for `idleness`.
    let lead = Trickle::from(bootstrap, 0, EVENTS / 2);
    let (mut a, addr_a) = instance(dir.path(), job, "a");
    let (mut b, addr_b) = instance(dir.path(), job, "b");
    for (source, n) in [("events", 4), (READER, 8)] {
        wait_until(&format!("{source} spread over both instances"), || {
            // An instance that exited says why, rather than its endpoint refusing.
            for p in [&mut a, &mut b] {
                assert!(!p.has_exited(), "an instance exited: {}", p.stderr());
            }
            spread(&[addr_a, addr_b], source, n)
        });
    }
    let next = lead.stop();
    produce(bootstrap, (next..EVENTS / 2).map(event));
    wait_for_first_half_committed(bootstrap);
    ((a, addr_a), (b, addr_b))
}

/// Writes the second half from event `from` on and the flush event, then compares the output
/// with the reference.
fn second_half_gives_the_reference(
    bootstrap: &str,
    from: u64,
    instances: &mut [(&mut Proc, SocketAddr)],
) {
    produce(bootstrap, (from..EVENTS).map(event));
    produce_flush(bootstrap);
    assert_output_is_the_reference(bootstrap, instances);
}

/// SIGTERM to each instance: each exits 0.
fn stop(instances: &mut [&mut Proc]) {
    for p in instances {
        p.terminate();
        assert_eq!(p.wait_code(), 0, "{}", p.stderr());
    }
}

#[test]
fn a_joining_instance_and_a_leaving_one_hand_state_over_without_firing_open_windows() {
    joining_and_leaving_hand_state_over(Kind::Mock);
}

#[test]
fn a_joining_instance_and_a_leaving_one_hand_state_over_on_tansu() {
    joining_and_leaving_hand_state_over(Kind::Tansu);
}

/// The spec's worked case (state.md): the same while both cores are kept busy by another
/// process the whole time (a loaded machine: threads starved, polls late).
#[test]
fn a_joining_instance_and_a_leaving_one_hand_state_over_on_a_loaded_machine() {
    let hog = CpuHog::start(2);
    joining_and_leaving_hand_state_over(Kind::Mock);
    drop(hog);
}

/// The drain budget of the instances that leave in the join-and-leave cases. Each member of
/// an instance in the group (four here: two sources and two exchange readers) leaving costs a
/// rebalance: on tansu about 5 s each (`docs/kafka.md`, "Then they leave one at a time", which
/// tells users to give `--drain-timeout` room for it), and on the mock cluster every rebalance
/// lasts `session.timeout.ms` less 1 s (5 s here), also the ones the last commits wait for. The
/// default 30 s is that budget with no room left on a loaded machine (a stop that ran past it
/// was seen on the mock: six 5 s rebalances from SIGTERM to the last leave).
const LEAVING_DRAIN: &str = "60s";

fn joining_and_leaving_hand_state_over(kind: Kind) {
    let broker = broker(kind, 8);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-state-leave");
    let job = production_job(&dir, &bootstrap, GROUP);
    let lead = Trickle::from(&bootstrap, 0, EVENTS / 2);
    let (mut a, addr_a) = instance_with(dir.path(), &job, "a", &["--drain-timeout", LEAVING_DRAIN]);
    wait_until("a to hold every partition", || {
        partitions_held(addr_a, READER) == 8 && partitions_held(addr_a, "events") == 4
    });
    let next = lead.stop();
    produce(&bootstrap, (next..EVENTS / 2).map(event));
    wait_for_first_half_committed(&bootstrap);
    let trickle = Trickle::start(&bootstrap);
    let report = dir.join("report-b.json");
    let (mut b, addr_b) = instance_with(
        dir.path(),
        &job,
        "b",
        &[
            "--report-file",
            report.to_str().unwrap(),
            "--drain-timeout",
            LEAVING_DRAIN,
        ],
    );
    wait_until("the exchange spread over a and b", || {
        spread(&[addr_a, addr_b], READER, 8)
    });
    assert!(restored_partitions(addr_b) >= 1, "b restored no state");
    // a leaves: its open windows go over to b through the state topic, unfired (a window
    // fired now would hold only the first half's events: a repeat differing from b's later
    // result, or a wrong first copy).
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    wait_until_or(
        "b to hold every exchange partition",
        || partitions_held(addr_b, READER) == 8,
        || kafka_series(addr_b),
    );
    let from = trickle.stop();
    second_half_gives_the_reference(&bootstrap, from, &mut [(&mut b, addr_b)]);
    assert_eq!(late(addr_b), 0.0, "on-time records dropped as late");
    stop(&mut [&mut b]);
    // Each left a settled group: no member gave up waiting for it (a departed leader that
    // tansu keeps waiting for would show here, however long the drain).
    for p in [&a, &b] {
        assert!(
            !p.stderr().contains(testing::NOT_SETTLED_WARNING),
            "{}",
            p.stderr()
        );
    }
    // The report names the restores: b took every partition, some at the join, the rest when
    // a left.
    let report = common::read_report(&report);
    let restored = report["state_restores"]["partitions"].as_array().unwrap();
    assert_eq!(restored.len(), 8, "{report}");
    assert!(restored.iter().all(|p| p["operator_id"] == OPERATOR));
}

/// Records the instance at `addr` dropped as late.
fn late(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_records_dropped_total", |l| {
        l.get("reason") == Some("late")
    })
}

/// Input partitions the instances at `addrs` hold and say are idle.
fn idle_inputs(addrs: &[SocketAddr]) -> f64 {
    addrs
        .iter()
        .map(|a| {
            scrape(*a).sum("tidemark_kafka_partition_idle", |l| {
                l.get("source_id") == Some("events")
            })
        })
        .sum()
}

/// One of two instances is killed once its input partitions are idle (read to their end and
/// quiet for longer than `idleness`), and the second half is written at once, while the group
/// has not noticed yet: the dead instance's partitions fill up with no reader. Event time must
/// wait for them (their idle claims lapse with their reader), so when the survivor takes them
/// over, nothing it reads is late, and every window is exact.
fn killed_with_idle_partitions(kind: Kind, group: &str) {
    let broker = broker(kind, 8);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-state-idle-kill");
    let job = production_job(&dir, &bootstrap, group);
    let ((mut a, addr_a), (mut b, addr_b)) =
        two_instances_through_the_first_half(&dir, &job, &bootstrap);
    // The forced point: every input partition read to its end and idle at its owner.
    wait_until("every input partition idle", || {
        idle_inputs(&[addr_a, addr_b]) == 4.0
    });
    sigkill(&mut b);
    second_half_gives_the_reference(&bootstrap, EVENTS / 2, &mut [(&mut a, addr_a)]);
    assert_eq!(late(addr_a), 0.0, "on-time records dropped as late");
    stop(&mut [&mut a]);
}

#[test]
fn a_killed_instances_idle_partitions_hold_event_time_until_read_again() {
    killed_with_idle_partitions(Kind::Mock, GROUP);
}

#[test]
fn a_killed_instances_idle_partitions_hold_event_time_until_read_again_on_tansu() {
    killed_with_idle_partitions(Kind::Tansu, GROUP);
}

/// Kafka's default session timeout (45 s): the dead member's partitions have no reader for
/// that long, fifteen times `idleness`.
#[test]
fn with_the_default_session_timeout_a_killed_instances_partitions_hold_event_time() {
    killed_with_idle_partitions(Kind::Mock, "{}");
}

#[test]
fn with_the_default_session_timeout_a_killed_instances_partitions_hold_event_time_on_tansu() {
    killed_with_idle_partitions(Kind::Tansu, "{}");
}

#[test]
fn input_read_again_upstream_of_the_exchange_is_not_counted_twice() {
    let broker = broker(Kind::Mock, 8);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-state-replay");
    // No checkpoint while the test runs but the one SIGTERM takes: the forced points below
    // are then states of the topics, not moments.
    let job = job_checkpointing(&dir, &bootstrap, "1h");
    let (mut a, addr_a) = instance(dir.path(), &job, "a");
    wait_until("a to hold every partition", || {
        partitions_held(addr_a, READER) == 8 && partitions_held(addr_a, "events") == 4
    });
    produce(&bootstrap, (0..EVENTS / 2).map(event));
    let first = inputs_of(0..EVENTS / 2);
    wait_until("the first half in the exchange", || {
        inputs_in_exchange(&bootstrap) == first
    });
    // a stops with a last checkpoint: the first half's input offsets and the exchange
    // partitions' state (open windows, positions, highest origins) committed.
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    let ends_of_first_half: Vec<(i64, i64)> = committed_and_end(&bootstrap, "in", 4);
    assert!(
        ends_of_first_half
            .iter()
            .all(|(c, e)| c == e && *e == EVENTS as i64 / 8),
        "{ends_of_first_half:?}"
    );
    let (mut b, addr_b) = instance(dir.path(), &job, "b");
    wait_until("b to hold every partition", || {
        partitions_held(addr_b, READER) == 8 && partitions_held(addr_b, "events") == 4
    });
    assert_eq!(restored_partitions(addr_b), 8);
    produce(&bootstrap, (EVENTS / 2..EVENTS).map(event));
    // The forced point: b's writer has delivered a record for every input message of the
    // second half, and b's source has committed none of them.
    let all = inputs_of(0..EVENTS);
    wait_until("the second half in the exchange", || {
        inputs_in_exchange(&bootstrap) == all
    });
    assert_eq!(
        committed_and_end(&bootstrap, "in", 4)
            .iter()
            .map(|(c, _)| *c)
            .collect::<Vec<_>>(),
        vec![EVENTS as i64 / 8; 4],
        "b committed input offsets"
    );
    sigkill(&mut b);
    // c reads the second half of the input again and writes it to the exchange again.
    let (mut c, addr_c) = instance(dir.path(), &job, "c");
    wait_until("c to hold every partition", || {
        partitions_held(addr_c, READER) == 8 && partitions_held(addr_c, "events") == 4
    });
    produce_flush(&bootstrap);
    assert_output_is_the_reference(&bootstrap, &mut [(&mut c, addr_c)]);
    // Every record of the second half came through the exchange twice, and its replay was
    // dropped: none counted twice.
    wait_until("c's reader to drop every replayed record", || {
        replayed(addr_c) >= (EVENTS / 2) as f64
    });
    assert_eq!(replayed(addr_c), (EVENTS / 2) as f64);
    c.terminate();
    assert_eq!(c.wait_code(), 0, "{}", c.stderr());
}

/// Exchange records the instance at `addr` dropped as replays into the window.
fn replayed(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_exchange_replayed_records_total", |l| {
        l.get("operator_id") == Some(OPERATOR)
    })
}

#[test]
fn a_state_topic_with_another_partition_count_fails_the_job() {
    let broker = broker(Kind::Mock, 3);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-state-count");
    let job = job(&dir, &bootstrap);
    let mut a = Proc::spawn(
        dir.path(),
        ["run", job.to_str().unwrap(), "--instance-id", "a"],
    );
    let code = a.wait_code();
    let stderr = a.stderr();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state topic {STATE} has 3 partitions, but the exchange topic {EXCHANGE} has 8"
        )),
        "{stderr}"
    );
}

/// A state topic whose committed state was written by a Tidemark before the key hash became
/// Kafka's murmur2 (its messages have no `tidemark-key-hash` header) is refused before the job
/// starts, with exit 2, naming the state topic, the partition and the hash: never restored into
/// the wrong partitions.
#[test]
fn a_state_topic_of_the_old_key_hash_is_refused_with_exit_2() {
    let broker = Broker::start(Kind::Mock, &[("in", 4), ("out", 4)]);
    broker.create_topic(EXCHANGE, 8);
    broker.create_topic(STATE, 8);
    let bootstrap = broker.bootstrap().to_owned();
    // A commit record of generation 1 in partition 5, as the older version wrote it: key `c` +
    // the generation, no headers.
    let mut key = vec![b'c'];
    key.extend_from_slice(&1u64.to_be_bytes());
    let producer = testing::producer(&bootstrap);
    testing::send_retrying(
        &producer,
        BaseRecord::to(STATE)
            .partition(5)
            .key(&key[..])
            .payload(&b"old"[..]),
        Duration::from_millis(1),
    );
    testing::flush(&producer);
    let dir = TempDir::new("kafka-state-old-hash");
    let job = job(&dir, &bootstrap);
    let mut a = Proc::spawn(
        dir.path(),
        [
            "run",
            job.to_str().unwrap(),
            "--instance-id",
            "a",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    let code = a.wait_code();
    let stderr = a.stderr();
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("the state topic {STATE} partition 5"))
            && stderr.contains("key hash of an older Tidemark")
            && stderr.contains("tidemark-key-hash: murmur2"),
        "{stderr}"
    );
    // Nothing ran: no exchange message was written.
    assert!(testing::read_all(&bootstrap, EXCHANGE, 8, Duration::from_secs(30)).is_empty());
}

/// The job with checkpoints every 200 ms to the folder `ckpt` (each kept) and the windows
/// written to the file `out.jsonl` (one subtask): the spec's directory case with a Kafka
/// exchange.
fn directory_job(dir: &TempDir, bootstrap: &str) -> PathBuf {
    let text = job_text(
        bootstrap,
        "interval: 200ms, dir: ckpt, retain: 1000",
        GROUP,
        "",
        &format!("{{type: file, input: {OPERATOR}, parallelism: 1, path: out.jsonl}}"),
    );
    dir.write("job.yaml", &text)
}

/// The complete checkpoints (those with `_metadata`) in the job's folder under `ckpt`.
fn complete_checkpoints(dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir.join("ckpt").join(JOB))
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let e = e.ok()?;
                    let id = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
                    e.path().join("_metadata").exists().then_some(id)
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// The windows in `out.jsonl`, each line as (user, window start ms) → (count, sum); fails on
/// a window written twice.
fn windows_in_file(dir: &Path) -> (Windows, usize) {
    let text = std::fs::read_to_string(dir.join("out.jsonl")).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut lines = 0;
    // Only whole lines: the sink may be in the middle of one.
    for line in text.lines().take(text.matches('\n').count()) {
        lines += 1;
        let w: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (
            w["key"].as_str().unwrap().to_owned(),
            w["window_start"].as_i64().unwrap(),
        );
        let got = (
            w["n"].as_u64().unwrap(),
            w["total"].as_f64().unwrap() as u64,
        );
        assert!(
            out.insert(key.clone(), got).is_none(),
            "window {key:?} written twice"
        );
    }
    (out, lines)
}

#[test]
fn an_exchange_job_restored_from_an_older_checkpoint_writes_what_an_uninterrupted_run_writes() {
    restored_from_a_directory(Kind::Mock, &[]);
}

/// With `--parallelism 3`: the vertex behind the exchange keeps the checkpoint's parallelism
/// (its keys are kept per subtask), the result is the same.
#[test]
fn an_exchange_job_restored_from_an_older_checkpoint_with_another_parallelism_on_tansu() {
    restored_from_a_directory(Kind::Tansu, &["--parallelism", "3"]);
}

/// One instance of the directory job reads the first half; the test keeps one of its first
/// complete checkpoints, lets it write more windows and commit them (and their state) to
/// Kafka, kills it with SIGKILL, writes the second half, and restores that older checkpoint:
/// the file must hold every window of the reference exactly once. Its keys and the readers'
/// positions must come from the directory: the state topic's committed state is newer than
/// the checkpoint (windows it fired are gone from it), and restoring that instead would lose
/// the windows the file held after the checkpoint. `extra`: more arguments of the restore.
fn restored_from_a_directory(kind: Kind, extra: &[&str]) {
    let broker = broker(kind, 8);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-state-directory");
    let job = directory_job(&dir, &bootstrap);
    produce(&bootstrap, (0..EVENTS / 4).map(event));
    let (mut a, _) = instance(dir.path(), &job, "a");
    wait_until(
        "a complete checkpoint after the first windows were written",
        || {
            assert!(!a.has_exited(), "the instance exited: {}", a.stderr());
            windows_in_file(dir.path()).1 > 0 && !complete_checkpoints(dir.path()).is_empty()
        },
    );
    let old = *complete_checkpoints(dir.path()).last().unwrap();
    // The file holds at most this much of checkpoint `old`'s output.
    let (_, lines_then) = windows_in_file(dir.path());
    produce(&bootstrap, (EVENTS / 4..EVENTS / 2).map(event));
    wait_for_first_half_committed(&bootstrap);
    let (_, lines_now) = windows_in_file(dir.path());
    assert!(
        lines_now > lines_then,
        "no window was written after checkpoint {old} ({lines_then} lines then, {lines_now} now)"
    );
    sigkill(&mut a);
    produce(&bootstrap, (EVENTS / 2..EVENTS).map(event));
    produce_flush(&bootstrap);
    let path = dir.path().join("ckpt").join(JOB).join(format!("chk-{old}"));
    let mut args = vec!["--restore", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (mut b, addr_b) = instance_with(dir.path(), &job, "b", &args);
    let expected = reference();
    wait_until_or(
        "every window of the reference in the file",
        || {
            assert!(
                !b.has_exited(),
                "the restored instance exited: {}",
                b.stderr()
            );
            let (got, _) = windows_in_file(dir.path());
            expected.keys().all(|k| got.contains_key(k))
        },
        || {
            let (got, _) = windows_in_file(dir.path());
            let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
            format!(
                "{} of {} windows missing, e.g. {:?}",
                missing.len(),
                expected.len(),
                &missing[..missing.len().min(5)]
            )
        },
    );
    let (got, _) = windows_in_file(dir.path());
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(k, want)| got.get(*k) != Some(*want))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} windows wrong, e.g. {:?}",
        wrong.len(),
        expected.len(),
        &wrong[..wrong.len().min(5)]
    );
    let unexpected: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(
        unexpected.is_empty(),
        "windows not in the reference: {unexpected:?}"
    );
    assert_eq!(restored_partitions(addr_b), 8, "partitions restored");
    assert_eq!(late(addr_b), 0.0, "on-time records dropped as late");
    if extra.contains(&"--parallelism") {
        let said = format!(
            "operator \"{OPERATOR}\" keeps the parallelism 2 it had in the checkpoint (not 3): \
             its keys are kept per subtask behind its Kafka exchange"
        );
        assert!(b.stderr().contains(&said), "{}", b.stderr());
    }
    stop(&mut [&mut b]);
}
