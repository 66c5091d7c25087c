//! Two keyed vertices behind two Kafka exchanges, with checkpoints (`docs/kafka.md`, "Replays
//! upstream of the exchange"): real `tidemark run` processes on a mock cluster the test starts
//! itself, the output compared with a reference the test computes.
//!
//! The job: kafka (4 partitions) → exchange → `reduce` counting each user's events (`n`) →
//! exchange → `reduce` counting, per `n`, the users that reached it (`c`) → kafka. For `USERS`
//! users of `PER_USER` events each, the second reduce's outputs are exactly the pairs (`n`, `c`)
//! with `n` in 1..=PER_USER and `c` in 1..=USERS, whatever order the events took: one missing
//! is a record lost, one twice (under two result ids) a record counted twice.
//!
//! - One instance, nothing failing: the output is that reference, no record is dropped as a
//!   replay. (The second exchange's records come from the first exchange's partitions, each
//!   read in order by one reader; ordering them by the source partitions they came from
//!   instead dropped four records in five.)
//! - Two instances without checkpoints while they run, one killed with SIGKILL once the
//!   output holds a quarter of the first half's results and it has taken records at both
//!   stages, a new one started, then the second half: everything the killed one did is done
//!   again, its first stage's outputs reach the second exchange twice and are dropped there
//!   the second time, and the output with repeats dropped by result id is the reference,
//!   every repeat equal to its first copy.
#![cfg(unix)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{partitions_held, scrape, sigkill, Proc, TempDir};
use rdkafka::producer::BaseRecord;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(240);
const GROUP: &str = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";
const JOB: &str = "kx2";
const USERS: u64 = 100;
const PER_USER: u64 = 200;
const EVENTS: u64 = USERS * PER_USER;
const SECOND: &str = "per_n";

fn cluster() -> DevCluster {
    let mut topics = vec![("in".to_owned(), 4), ("out".to_owned(), 4)];
    for vertex in ["per_user", SECOND] {
        topics.push((format!("tidemark-{JOB}-{vertex}-exchange"), 8));
        topics.push((format!("tidemark-{JOB}-{vertex}-state"), 8));
    }
    DevCluster::start(DevClusterOptions {
        topics,
        ..DevClusterOptions::default()
    })
    .unwrap()
}

/// The job, with checkpoints every `interval`.
fn job(dir: &TempDir, bootstrap: &str, interval: &str) -> PathBuf {
    let exchange = format!(
        "{{kafka: {{brokers: \"{bootstrap}\", partitions: 8, properties: {{session.timeout.ms: \
         6000, heartbeat.interval.ms: 500, fetch.wait.max.ms: 10}}}}}}"
    );
    dir.write(
        "job.yaml",
        &format!(
            "name: {JOB}
parallelism: 2
checkpoint: {{interval: {interval}}}
sources:
  events:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [in]
    start: earliest
    key: user
    properties: {GROUP}
operators:
  per_user:
    type: reduce
    input: events
    key: user
    aggregates: {{n: count}}
    exchange: {exchange}
  {SECOND}:
    type: reduce
    input: per_user
    key: n
    aggregates: {{c: count}}
    exchange: {exchange}
sinks:
  out:
    type: kafka
    input: {SECOND}
    brokers: \"{bootstrap}\"
    topic: out
"
        ),
    )
}

fn instance(dir: &Path, job: &Path, id: &str) -> (Proc, SocketAddr) {
    common::run_instance(dir, job, id, &[])
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Events `range` (user `i % USERS`, partition `i % 4`).
fn produce(bootstrap: &str, range: std::ops::Range<u64>) {
    let producer = testing::producer(bootstrap);
    for i in range {
        let user = format!("u{}", i % USERS);
        let value = format!("{{\"user\":\"{user}\",\"i\":{i}}}");
        let record = BaseRecord::to("in")
            .partition((i % 4) as i32)
            .payload(&value)
            .key(&user);
        testing::send_retrying(&producer, record, Duration::from_millis(1));
    }
    testing::flush(&producer);
}

/// The output's (n, c) pairs, repeats dropped by result id (each checked equal to its first
/// copy), and how many repeats there were. Panics on two result ids for one pair.
fn results(bootstrap: &str) -> (BTreeSet<(u64, u64)>, usize) {
    let exchange = format!("tidemark-{JOB}-{SECOND}-exchange");
    let mut pairs = BTreeSet::new();
    let mut first: BTreeMap<String, testing::ReadMessage> = BTreeMap::new();
    let mut repeats = 0;
    for m in testing::read_all(bootstrap, "out", 4, DEADLINE) {
        let id = m
            .header("tidemark-result-id")
            .unwrap_or_else(|| panic!("an output message without a result id: {m:?}"))
            .to_owned();
        // The second reduce names each output by the message of its exchange it came from.
        assert!(
            id.starts_with(&format!("reduce/{SECOND}/{exchange}/")),
            "{id}"
        );
        if let Some(copy) = first.get(&id) {
            assert_eq!(
                (&copy.headers, &copy.value),
                (&m.headers, &m.value),
                "a repeat of {id} differs from its first copy"
            );
            repeats += 1;
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(m.value.as_deref().unwrap()).unwrap();
        let pair = (v["key"].as_u64().unwrap(), v["c"].as_u64().unwrap());
        assert!(
            pairs.insert(pair),
            "(n, c) = {pair:?} under two result ids: a record counted twice (second: {id})"
        );
        first.insert(id, m);
    }
    (pairs, repeats)
}

/// Waits until the output holds `EVENTS` distinct results, then compares with the reference.
fn assert_output_is_the_reference(bootstrap: &str) -> usize {
    wait_until("every result in the output topic", || {
        results(bootstrap).0.len() as u64 >= EVENTS
    });
    let (got, repeats) = results(bootstrap);
    let expected: BTreeSet<(u64, u64)> = (1..=PER_USER)
        .flat_map(|n| (1..=USERS).map(move |c| (n, c)))
        .collect();
    let missing: Vec<_> = expected.difference(&got).take(5).collect();
    let extra: Vec<_> = got.difference(&expected).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing e.g. {missing:?}, not in the reference e.g. {extra:?}"
    );
    repeats
}

fn replayed(addr: SocketAddr, operator: &str) -> f64 {
    scrape(addr).sum("tidemark_exchange_replayed_records_total", |l| {
        l.get("operator_id") == Some(operator)
    })
}

#[test]
fn the_second_exchange_loses_nothing_and_drops_no_record_as_a_replay() {
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("kafka-two-exchanges");
    let job = job(&dir, &bootstrap, "500ms");
    produce(&bootstrap, 0..EVENTS);
    let (mut a, addr) = instance(dir.path(), &job, "a");
    let repeats = assert_output_is_the_reference(&bootstrap);
    assert_eq!(repeats, 0, "nothing failed, yet results came twice");
    assert_eq!(replayed(addr, SECOND), 0.0, "records dropped as replays");
    assert_eq!(
        replayed(addr, "per_user"),
        0.0,
        "records dropped as replays"
    );
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
}

#[test]
fn a_killed_instance_of_two_stages_is_counted_once_at_both() {
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("kafka-two-exchanges-kill");
    // No checkpoint while the test runs but the ones SIGTERM takes: everything b did before
    // it was killed is done again by the next owners, at both stages (the forced point is
    // then a state of the topics and of b, not a moment).
    let job = job(&dir, &bootstrap, "1h");
    let (mut a, addr_a) = instance(dir.path(), &job, "a");
    let (mut b, addr_b) = instance(dir.path(), &job, "b");
    let reader = format!("{SECOND}.exchange-in");
    wait_until("both stages spread over a and b", || {
        [
            ("per_user.exchange-in", 8),
            (reader.as_str(), 8),
            ("events", 4),
        ]
        .iter()
        .all(|(source, total)| {
            let held = [addr_a, addr_b].map(|addr| partitions_held(addr, source));
            held.iter().all(|h| *h >= 1) && held.iter().sum::<usize>() == *total
        })
    });
    produce(&bootstrap, 0..EVENTS / 2);
    // The forced point: a quarter of the first half's results are out, and b has taken
    // records at both stages.
    wait_until(
        "a quarter of the first half in the output, b busy at both stages",
        || {
            let out: u64 = testing::committed_and_end(&bootstrap, "nobody", "out", 4)
                .iter()
                .map(|(_, end)| *end as u64)
                .sum();
            let taken = |operator: &str| {
                scrape(addr_b).sum("tidemark_records_in_total", |l| {
                    l.get("operator_id") == Some(operator)
                })
            };
            out >= EVENTS / 8 && taken("per_user") > 0.0 && taken(SECOND) > 0.0
        },
    );
    sigkill(&mut b);
    let (mut c, addr_c) = instance(dir.path(), &job, "c");
    produce(&bootstrap, EVENTS / 2..EVENTS);
    let repeats = assert_output_is_the_reference(&bootstrap);
    let dropped = replayed(addr_a, SECOND) + replayed(addr_c, SECOND);
    eprintln!("{repeats} repeats; {dropped} records dropped as replays at the second exchange");
    // What b had done was done again: its first stage's outputs reached the second exchange
    // twice (the second time dropped), its second stage's results the output twice.
    assert!(dropped > 0.0, "no replay reached the second exchange");
    assert!(repeats > 0, "no result of b was repeated");
    for p in [&mut a, &mut c] {
        p.terminate();
        assert_eq!(p.wait_code(), 0, "{}", p.stderr());
    }
}
