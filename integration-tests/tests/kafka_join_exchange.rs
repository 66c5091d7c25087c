//! A join behind a Kafka exchange (`docs/joins.md`, "Joins across instances"): both sides
//! cross instances through one exchange topic, and the join's held records move with its
//! partitions. Real `tidemark run` processes on a broker the test starts (librdkafka's mock
//! cluster and tansu), a kill and a new instance forced by the test, the output compared with
//! a nested loop over the events the test wrote.
//!
//! The job: payments and clicks (4 partitions each) → one exchange of 8 partitions → an
//! interval left join per user, `between: [-10s, 0s]` → kafka, `checkpoint: {interval: 300ms}`,
//! two subtasks per instance, production watermarks (`idleness: 3s`, shorter than the session
//! timeout). The first half is written and committed through two instances, one of them is
//! killed with SIGKILL (its held records only in the state topic), a third starts, and the
//! second half follows: the results, repeats dropped by `tidemark-result-id`, are the nested
//! loop's, each once; a payment with no click appears once with a null click.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::brokers::{Broker, Kind};
use common::{partitions_held, scrape, sigkill, Proc, TempDir};
use rdkafka::producer::BaseRecord;
use tidemark_kafka::testing;

const DEADLINE: Duration = Duration::from_secs(240);
const JOB: &str = "kjoin";
const OPERATOR: &str = "paid";
const READER: &str = "paid.exchange-in";
const EXCHANGE: &str = "tidemark-kjoin-paid-exchange";
/// Events in all (payments and clicks), 50 ms of event time apart.
const EVENTS: u64 = 8_000;
const USERS: u64 = 40;
const BASE_MS: i64 = 1_700_000_000_000;
/// The flush events' time: far past every other, so every held payment expires.
const FLUSH_MS: i64 = BASE_MS + 3_600_000;

/// Event `i`: (topic, partition, user, ts ms). One in three is a payment.
fn event(i: u64) -> (&'static str, i32, String, i64) {
    let topic = if i.is_multiple_of(3) {
        "payments"
    } else {
        "clicks"
    };
    let user = format!("u{}", (i * 7 + i / 13) % USERS);
    (topic, (i % 4) as i32, user, BASE_MS + 50 * i as i64)
}

fn send(
    producer: &rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    events: impl Iterator<Item = u64>,
) {
    for i in events {
        let (topic, p, user, ts) = event(i);
        let value = format!("{{\"id\":{i},\"user\":\"{user}\",\"ts\":{ts}}}");
        let record = BaseRecord::to(topic)
            .partition(p)
            .payload(&value)
            .key(&user);
        testing::send_retrying(producer, record, Duration::from_millis(1));
    }
    testing::flush(producer);
}

/// One payment and one click of user `zz` per partition at [`FLUSH_MS`]: they move event time
/// past every other event (and match each other).
fn send_flush(bootstrap: &str) {
    let producer = testing::producer(bootstrap);
    for topic in ["payments", "clicks"] {
        for p in 0..4 {
            let value =
                format!("{{\"id\":\"flush-{topic}-{p}\",\"user\":\"zz\",\"ts\":{FLUSH_MS}}}");
            let record = BaseRecord::to(topic).partition(p).payload(&value).key("zz");
            testing::send_retrying(&producer, record, Duration::from_millis(1));
        }
    }
    testing::flush(&producer);
}

/// (payment id, click id or null) as JSON text, with how often each is expected.
type Results = BTreeMap<(String, String), usize>;

/// The nested loop: each payment with each click of its user at most 10 s before it, or
/// alone (a null click) when there is none.
fn reference() -> Results {
    let mut events: Vec<(String, &str, String, i64)> = (0..EVENTS)
        .map(|i| {
            let (topic, _, user, ts) = event(i);
            (i.to_string(), topic, user, ts)
        })
        .collect();
    for topic in ["payments", "clicks"] {
        for p in 0..4 {
            events.push((
                format!("\"flush-{topic}-{p}\""),
                topic,
                "zz".into(),
                FLUSH_MS,
            ));
        }
    }
    let mut out = Results::new();
    for (pid, _, pu, pt) in events.iter().filter(|e| e.1 == "payments") {
        let mut matched = false;
        for (cid, _, cu, ct) in events.iter().filter(|e| e.1 == "clicks") {
            if pu == cu && (-10_000..=0).contains(&(ct - pt)) {
                *out.entry((pid.clone(), cid.clone())).or_default() += 1;
                matched = true;
            }
        }
        if !matched {
            *out.entry((pid.clone(), "null".into())).or_default() += 1;
        }
    }
    out
}

/// The results in the output topic, repeats dropped by their result id (a repeat must equal
/// its first copy), and how many repeats there were.
fn results(bootstrap: &str) -> (Results, usize) {
    let mut first: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut out = Results::new();
    let mut repeats = 0;
    for m in testing::read_all(bootstrap, "out", 4, DEADLINE) {
        let value = m.value.clone().expect("a result has a value");
        let id = m
            .header("tidemark-result-id")
            .unwrap_or_else(|| panic!("a result without a result id: {:?}", m.headers))
            .to_owned();
        assert!(id.starts_with(&format!("join/{OPERATOR}/")), "{id}");
        if let Some(copy) = first.get(&id) {
            assert_eq!(
                copy, &value,
                "a repeat of result {id} differs from its first copy"
            );
            repeats += 1;
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&value).unwrap();
        *out.entry((v["payment"].to_string(), v["click"].to_string()))
            .or_default() += 1;
        first.insert(id, value);
    }
    (out, repeats)
}

fn job(dir: &TempDir, bootstrap: &str) -> PathBuf {
    let group = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";
    let source = |topic: &str| {
        format!(
            "  {topic}:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [{topic}]
    start: earliest
    key: user
    timestamp: ts
    properties: {group}
    watermarks: {{max_out_of_orderness: 1s, interval: 50ms, idleness: 3s}}
"
        )
    };
    dir.write(
        "job.yaml",
        &format!(
            "name: {JOB}
parallelism: 2
checkpoint: {{interval: 300ms}}
sources:
{}{}operators:
  {OPERATOR}:
    type: join
    left: payments
    right: clicks
    key: user
    between: [-10s, 0s]
    join: left
    select:
      payment: left.id
      click: 'right == null ? null : right.id'
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 8, properties: {group}}}}}
sinks:
  out:
    type: kafka
    input: {OPERATOR}
    brokers: \"{bootstrap}\"
    topic: out
",
            source("payments"),
            source("clicks")
        ),
    )
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Events written slowly while the group moves partitions (four every 100 ms), so that no
/// input is quiet for `idleness` while instances start and fail, as in production.
struct Trickle {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Trickle {
    fn from(bootstrap: &str, first: u64, end: u64) -> Trickle {
        let stop = Arc::new(AtomicBool::new(false));
        let (bootstrap, stopped) = (bootstrap.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let producer = testing::producer(&bootstrap);
            let mut next = first;
            while !stopped.load(Ordering::Relaxed) && next + 4 <= end {
                send(&producer, next..next + 4);
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

fn instance(dir: &Path, job: &Path, id: &str) -> (Proc, SocketAddr) {
    common::run_instance(dir, job, id, &[])
}

fn spread(addrs: &[SocketAddr], total: usize) -> bool {
    let counts: Vec<usize> = addrs.iter().map(|a| partitions_held(*a, READER)).collect();
    counts.iter().all(|c| *c >= 1) && counts.iter().sum::<usize>() == total
}

/// Exchange partitions whose state the instance at `addr` restored.
fn restored_partitions(addr: SocketAddr) -> usize {
    scrape(addr)
        .samples("tidemark_state_restore_seconds")
        .filter(|s| s.labels.get("operator_id") == Some(OPERATOR))
        .count()
}

/// Records held by the join at `addr` now, both sides.
fn held(addr: SocketAddr) -> f64 {
    scrape(addr).sum("tidemark_join_held_records", |l| {
        l.get("operator_id") == Some(OPERATOR)
    })
}

fn dropped(addr: SocketAddr) -> Vec<String> {
    scrape(addr)
        .body
        .lines()
        .filter(|l| {
            (l.starts_with("tidemark_records_dropped_total")
                || l.starts_with("tidemark_exchange_replayed_records_total"))
                && !l.ends_with(" 0")
        })
        .map(|l| format!("{addr} {l}"))
        .collect()
}

/// Every input message of the first half is committed by the sources' group, and every record
/// in the exchange by the reader's (its state committed before its offset).
fn wait_for_first_half_committed(bootstrap: &str) {
    let written = |topic: &str, p: i64| {
        (0..EVENTS / 2)
            .filter(|i| event(*i).0 == topic && event(*i).1 as i64 == p)
            .count() as i64
    };
    for topic in ["payments", "clicks"] {
        wait_until(
            &format!("{topic} committed to the first half's end"),
            || {
                testing::committed_and_end(bootstrap, JOB, topic, 4)
                    .iter()
                    .enumerate()
                    .all(|(p, (c, _))| *c == written(topic, p as i64))
            },
        );
    }
    let mut last = [-1i64; 8];
    for m in testing::read_all(bootstrap, EXCHANGE, 8, DEADLINE) {
        if m.header("tidemark-control").is_none() {
            last[m.partition as usize] = last[m.partition as usize].max(m.offset);
        }
    }
    wait_until("every exchange record committed", || {
        testing::committed_and_end(bootstrap, JOB, EXCHANGE, 8)
            .iter()
            .zip(&last)
            .all(|((c, _), l)| c > l)
    });
}

fn killed_join_instance_hands_its_held_records_on(kind: Kind) {
    let broker = Broker::start(kind, &[("payments", 4), ("clicks", 4), ("out", 4)]);
    let bootstrap = broker.bootstrap().to_owned();
    let dir = TempDir::new("kafka-join-exchange");
    let job = job(&dir, &bootstrap);
    let expected = reference();
    assert!(
        expected.keys().any(|(_, c)| c == "null") && expected.len() > EVENTS as usize,
        "the data has matches and payments without a click"
    );

    // Two instances through the first half.
    let lead = Trickle::from(&bootstrap, 0, EVENTS / 2);
    let (mut a, addr_a) = instance(dir.path(), &job, "a");
    let (mut b, addr_b) = instance(dir.path(), &job, "b");
    wait_until("the exchange spread over a and b", || {
        for p in [&mut a, &mut b] {
            assert!(!p.has_exited(), "an instance exited: {}", p.stderr());
        }
        spread(&[addr_a, addr_b], 8)
    });
    let next = lead.stop();
    send(&testing::producer(&bootstrap), next..EVENTS / 2);
    wait_for_first_half_committed(&bootstrap);
    // The forced point: a dies holding payments whose clicks may still come.
    let trickle = Trickle::from(&bootstrap, EVENTS / 2, EVENTS);
    assert!(held(addr_a) > 0.0, "a holds no records: nothing would move");
    let restored_before = restored_partitions(addr_b);
    sigkill(&mut a);
    wait_until("b to hold every exchange partition", || {
        partitions_held(addr_b, READER) == 8
    });
    assert!(
        restored_partitions(addr_b) > restored_before,
        "the survivor restored no partition's state"
    );
    // A new instance: some partitions move on from the survivor, with their held records.
    let (mut c, addr_c) = instance(dir.path(), &job, "c");
    wait_until("the exchange spread over b and c", || {
        spread(&[addr_b, addr_c], 8)
    });
    assert!(restored_partitions(addr_c) >= 1, "c restored no state");
    let from = trickle.stop();
    send(&testing::producer(&bootstrap), from..EVENTS);
    send_flush(&bootstrap);

    let started = Instant::now();
    let wanted: usize = expected.values().sum();
    loop {
        let (got, _) = results(&bootstrap);
        if got.values().sum::<usize>() >= wanted {
            break;
        }
        for p in [&mut b, &mut c] {
            assert!(!p.has_exited(), "an instance exited: {}", p.stderr());
        }
        assert!(
            started.elapsed() < DEADLINE,
            "gave up waiting for {wanted} results, {} so far; {:#?}",
            got.values().sum::<usize>(),
            [dropped(addr_b), dropped(addr_c)]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (got, repeats) = results(&bootstrap);
    eprintln!("{} results, {repeats} repeats", got.values().sum::<usize>());
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(k, n)| got.get(*k) != Some(n))
        .map(|(k, n)| (k.clone(), *n, got.get(k).copied()))
        .chain(
            got.iter()
                .filter(|(k, _)| !expected.contains_key(*k))
                .map(|(k, n)| (k.clone(), 0, Some(*n))),
        )
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} results wrong (result, want, got), e.g. {:?}; {:#?}",
        wrong.len(),
        expected.len(),
        &wrong[..wrong.len().min(8)],
        [dropped(addr_b), dropped(addr_c)]
    );
    // How instances stop (SIGTERM, drain, leave the group) is the subject of kafka_stop.rs;
    // here they are killed when dropped.
    drop((b, c));
}

#[test]
fn a_killed_join_instances_held_records_move_to_the_survivor_and_on() {
    killed_join_instance_hands_its_held_records_on(Kind::Mock);
}

#[test]
fn a_killed_join_instances_held_records_move_to_the_survivor_and_on_on_tansu() {
    killed_join_instance_hands_its_held_records_on(Kind::Tansu);
}
