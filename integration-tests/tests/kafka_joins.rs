//! Joins reading Kafka topics and writing Kafka topics, on brokers the tests start: every
//! result is one message whose `tidemark-result-id` names the join, the two input messages that
//! made it and the key, against a nested loop over the messages the test wrote; a compacted
//! topic read as a table, its tombstones kept (a deletion) or dropped, and written on to another
//! topic as tombstones; a table join with deletes killed with SIGKILL and restored from its
//! checkpoint directory, on the mock cluster and on tansu, against an as-of lookup computed here.
#![cfg(unix)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::brokers::{Broker, Kind};
use common::{complete_checkpoints, Proc, TempDir};
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};

const DEADLINE: Duration = Duration::from_secs(120);
const BASE: i64 = 1_764_504_000_000;

/// (partition, offset, user, ts ms) of each message written to a 2-partition topic: message
/// `i` to partition `i % 2`, so its offset there is `i / 2`.
fn messages(n: i64, start: i64, step: i64, users: i64) -> Vec<(i32, i64, String, i64)> {
    (0..n)
        .map(|i| {
            let user = format!("u{}", (i * 7 + 3) % users);
            ((i % 2) as i32, i / 2, user, start + i * step)
        })
        .collect()
}

#[test]
fn join_results_written_to_kafka_name_the_messages_that_made_them() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![
            ("payments".into(), 2),
            ("clicks".into(), 2),
            ("out".into(), 1),
        ],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let payments = messages(40, BASE, 10_000, 5);
    let clicks = messages(60, BASE - 300_000, 10_000, 5);
    let producer = testing::producer(&bootstrap);
    for (topic, list, field) in [
        ("payments", &payments, "payment"),
        ("clicks", &clicks, "click"),
    ] {
        let values: Vec<(i32, String, String)> = list
            .iter()
            .enumerate()
            .map(|(i, (p, _, user, ts))| {
                (
                    *p,
                    user.clone(),
                    format!(r#"{{"{field}":{i},"user":"{user}","ts":{ts}}}"#),
                )
            })
            .collect();
        testing::produce(
            &producer,
            topic,
            values
                .iter()
                .map(|(p, k, v)| (Some(*p), k.as_str(), v.as_str())),
        );
    }
    // The nested loop: each payment with each click of its user at most 10 minutes before it.
    let mut want = BTreeSet::new();
    for (pp, po, pu, pt) in &payments {
        for (cp, co, cu, ct) in &clicks {
            if pu == cu && (-600_000..=0).contains(&(ct - pt)) {
                want.insert(format!(
                    "join/paid/payments/{pp}/{po}/0/clicks/{cp}/{co}/0/\"{pu}\""
                ));
            }
        }
    }
    assert!(want.len() > 40, "{}", want.len());

    let dir = TempDir::new("kafka-join");
    let source = |topic: &str| {
        format!(
            "  {topic}:
    type: kafka
    brokers: {bootstrap}
    topics: [{topic}]
    group: join-{topic}
    format: json
    key: user
    timestamp: ts
"
        )
    };
    dir.write(
        "job.yaml",
        &format!(
            "name: kafka-join
sources:
{}{}operators:
  paid:
    type: join
    left: payments
    right: clicks
    key: user
    between: [-10m, 0s]
sinks:
  out:
    type: kafka
    input: paid
    brokers: {bootstrap}
    topic: out
    parallelism: 1
",
            source("payments"),
            source("clicks")
        ),
    );
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "--metrics-addr",
            "127.0.0.1:0",
            "job.yaml",
            "--parallelism",
            "2",
        ],
    );
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < want.len() {
        assert!(
            started.elapsed() < DEADLINE,
            "{} of {} results: {}",
            got.len(),
            want.len(),
            proc.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
        got = testing::read_all(&bootstrap, "out", 1, DEADLINE);
    }
    proc.terminate();
    assert_eq!(proc.wait_code(), 0, "{}", proc.stderr());
    let got = testing::read_all(&bootstrap, "out", 1, DEADLINE);
    let ids: Vec<String> = got
        .iter()
        .map(|m| {
            m.header("tidemark-result-id")
                .unwrap_or_else(|| panic!("a result without an id: {:?}", m.headers))
                .to_owned()
        })
        .collect();
    let distinct: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(distinct.len(), ids.len(), "an id twice");
    assert_eq!(distinct, want);
}

/// Writes `(key, value or None for a tombstone, timestamp ms)` to partition 0 of `topic`.
fn write(bootstrap: &str, topic: &str, messages: &[(&str, Option<String>, i64)]) {
    use rdkafka::producer::BaseRecord;
    let producer = testing::producer(bootstrap);
    for (key, value, ts) in messages {
        let mut record: BaseRecord<'_, str, String> =
            BaseRecord::to(topic).key(*key).partition(0).timestamp(*ts);
        if let Some(v) = value {
            record = record.payload(v);
        }
        testing::send_retrying(&producer, record, Duration::from_millis(1));
    }
    testing::flush(&producer);
}

/// Runs a table join of `orders` with the changelog in topic `table` until `n` results are in
/// `out-<tombstones>`, the table's source with `tombstones` (keep or drop); returns each order's
/// version (-1 for none) and the table source's tombstone drop count.
fn table_join_run(
    bootstrap: &str,
    table: &str,
    tombstones: &str,
    n: usize,
) -> (Vec<(i64, i64)>, f64) {
    let dir = TempDir::new("kafka-table-join");
    let source = |id: &str, topic: &str, extra: &str| {
        format!(
            "  {id}:
    type: kafka
    brokers: {bootstrap}
    topics: [{topic}]
    group: table-{topic}-{tombstones}
    start: earliest
    format: json
    watermarks: {{interval: 20ms, idleness: 300ms}}
{extra}"
        )
    };
    dir.write(
        "job.yaml",
        &format!(
            "name: kafka-table-join
parallelism: 1
sources:
{}{}operators:
  enriched:
    type: join
    kind: table
    left: orders
    right: customers
    join: left
    select:
      order: left.id
      version: 'right == null ? -1 : right.v'
sinks:
  out:
    type: kafka
    input: enriched
    brokers: {bootstrap}
    topic: out-{tombstones}
",
            source("orders", "orders", ""),
            source(
                "customers",
                table,
                &format!("    tombstones: {tombstones}\n")
            )
        ),
    );
    let mut proc = Proc::spawn(
        dir.path(),
        ["run", "--metrics-addr", "127.0.0.1:0", "job.yaml"],
    );
    let addr = proc.metrics_addr();
    let topic = format!("out-{tombstones}");
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        assert!(started.elapsed() < DEADLINE, "{got:?}: {}", proc.stderr());
        std::thread::sleep(Duration::from_millis(200));
        got = testing::read_all(bootstrap, &topic, 1, DEADLINE);
    }
    let dropped = common::scrape(addr)
        .value(
            "tidemark_records_dropped_total",
            &[
                ("operator_id", "customers"),
                ("operator_subtask_index", "0"),
                ("reason", "tombstone"),
            ],
        )
        .unwrap();
    proc.terminate();
    assert_eq!(proc.wait_code(), 0, "{}", proc.stderr());
    let mut versions: Vec<(i64, i64)> = testing::read_all(bootstrap, &topic, 1, DEADLINE)
        .iter()
        .map(|m| {
            let v: serde_json::Value = serde_json::from_slice(m.value.as_deref().unwrap()).unwrap();
            (v["order"].as_i64().unwrap(), v["version"].as_i64().unwrap())
        })
        .collect();
    versions.sort();
    (versions, dropped)
}

/// `customers`: c1's row in version 1, deleted 10 s later, then in version 2; `orders`: one
/// order of c1 before the delete, one after it, one after version 2.
fn write_a_deleted_row(bootstrap: &str) {
    let v = |n: i64| Some(format!(r#"{{"v":{n}}}"#));
    write(
        bootstrap,
        "customers",
        &[
            ("c1", v(1), BASE),
            ("c1", None, BASE + 10_000),
            ("c1", v(2), BASE + 20_000),
        ],
    );
    let order = |id: i64| Some(format!(r#"{{"id":{id}}}"#));
    write(
        bootstrap,
        "orders",
        &[
            ("c1", order(1), BASE + 5_000),
            ("c1", order(2), BASE + 15_000),
            ("c1", order(3), BASE + 25_000),
        ],
    );
}

/// A compacted topic read as a table: with `tombstones: keep` a message without a value deletes
/// its key's row, so an order between the delete and the next version joins nothing; without
/// it the tombstone is dropped and counted, and that order joins the version before.
#[test]
fn a_tombstone_deletes_a_row_of_a_table_join_only_when_kept() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![
            ("orders".into(), 1),
            ("customers".into(), 1),
            ("out-keep".into(), 1),
            ("out-drop".into(), 1),
        ],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    write_a_deleted_row(&bootstrap);
    let (kept, dropped) = table_join_run(&bootstrap, "customers", "keep", 3);
    assert_eq!(kept, vec![(1, 1), (2, -1), (3, 2)]);
    assert_eq!(dropped, 0.0);
    let (ignored, dropped) = table_join_run(&bootstrap, "customers", "drop", 3);
    assert_eq!(ignored, vec![(1, 1), (2, 1), (3, 2)]);
    assert_eq!(dropped, 1.0);
}

/// A deletion read from a compacted topic with `tombstones: keep` and written on by a `kafka`
/// sink is a tombstone there too: the message has the key and no value (null, not `{}`), so the
/// topic it is written to, read as a table, deletes the row as the first one did.
#[test]
fn a_kept_tombstone_is_written_on_to_kafka_as_a_tombstone() {
    kept_tombstone_copied(false);
}

/// The same copy with the sink behind a Kafka exchange: the tombstone crosses it as a tombstone
/// (no value in the exchange topic either), not as an empty event.
#[test]
fn a_kept_tombstone_crosses_a_kafka_exchange_as_a_tombstone() {
    kept_tombstone_copied(true);
}

fn kept_tombstone_copied(through_exchange: bool) {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![
            ("orders".into(), 1),
            ("customers".into(), 1),
            ("customers-copy".into(), 1),
            ("out-keep".into(), 1),
        ],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    write_a_deleted_row(&bootstrap);
    let exchange = match through_exchange {
        true => format!(
            "    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 2, \
             properties: {{fetch.wait.max.ms: 10}}}}}}\n"
        ),
        false => String::new(),
    };
    let dir = TempDir::new("kafka-tombstone-copy");
    dir.write(
        "job.yaml",
        &format!(
            "name: kafka-tombstone-copy
parallelism: 1
sources:
  customers:
    type: kafka
    brokers: {bootstrap}
    topics: [customers]
    group: copy
    start: earliest
    format: json
    tombstones: keep
sinks:
  copy:
    type: kafka
    input: customers
    brokers: {bootstrap}
    topic: customers-copy
{exchange}"
        ),
    );
    let mut proc = Proc::spawn(
        dir.path(),
        ["run", "--metrics-addr", "127.0.0.1:0", "job.yaml"],
    );
    let started = Instant::now();
    let mut copied = Vec::new();
    while copied.len() < 3 {
        assert!(
            started.elapsed() < DEADLINE,
            "{copied:?}: {}",
            proc.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
        copied = testing::read_all(&bootstrap, "customers-copy", 1, DEADLINE);
    }
    proc.terminate();
    assert_eq!(proc.wait_code(), 0, "{}", proc.stderr());
    let text = |bytes: &Option<Vec<u8>>| {
        bytes
            .as_deref()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
    };
    let copied: Vec<(Option<String>, Option<String>)> = copied
        .iter()
        .map(|m| (text(&m.key), text(&m.value)))
        .collect();
    let message = |value: Option<&str>| (Some("c1".to_owned()), value.map(str::to_owned));
    assert_eq!(
        copied,
        vec![
            message(Some(r#"{"v":1}"#)),
            message(None),
            message(Some(r#"{"v":2}"#)),
        ]
    );
    // The copy read as a table: the order between the delete and version 2 joins nothing.
    let (kept, dropped) = table_join_run(&bootstrap, "customers-copy", "keep", 3);
    assert_eq!(kept, vec![(1, 1), (2, -1), (3, 2)]);
    assert_eq!(dropped, 0.0);
}

// ---------------------------------------------------------------------------------------------
// A table join with deletes, killed with SIGKILL and restored from its checkpoint directory (the
// spec's worked case "orders and a customers changelog … identical across a SIGKILL and
// restore"), on the mock cluster and on tansu.

/// A change of the customers' changelog: (customer, its new version or `None` for a delete,
/// timestamp ms).
type Change = (String, Option<i64>, i64);
/// An order: (id, customer, timestamp ms).
type Order = (i64, String, i64);

/// Where the halves split, in ms after [`BASE`]: the first half's changelog lies before
/// `CHANGES_SPLIT_MS`, its orders before `ORDERS_SPLIT_MS`, all reached by the changelog; the
/// second half's changelog goes on to `CHANGES_END_MS`, its orders to `ORDERS_END_MS`. So when
/// the first half has been read, the join's event time is at `ORDERS_SPLIT_MS` and its state
/// holds the changelog's versions and deletes after it, which the second half's first orders
/// need.
///
/// The join holds the first half's last orders (after `CHANGES_SPLIT_MS`) at the kill: restored,
/// they must wait for the changelog's second half. They did not while a `kafka` source subtask
/// without a partition yet counted as idle (then the join's right input was idle when the
/// restored job started, and 350 of them got a version older than the reference's, on both
/// brokers).
const CHANGES_SPLIT_MS: i64 = 200_000;
const ORDERS_SPLIT_MS: i64 = 250_000;
const CHANGES_END_MS: i64 = 400_000;
const ORDERS_END_MS: i64 = 350_000;
/// Customers with rows (`c0`…`c11`); orders also go to `c12` and `c13`, which never have one.
const ROWS: u64 = 12;

/// A small deterministic generator (an LCG), so the data is the same in every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Changes from `from_ms` to `to_ms`, one every 500 ms (up to 400 ms later, so in time order),
/// one in five a delete; versions numbered from `first_version`.
fn changelog(seed: u64, from_ms: i64, to_ms: i64, first_version: i64) -> Vec<Change> {
    let mut rng = Lcg(seed);
    (0..(to_ms - from_ms) / 500)
        .map(|i| {
            let customer = format!("c{}", rng.next(ROWS));
            let delete = rng.next(5) == 0;
            let ts = BASE + from_ms + i * 500 + rng.next(400) as i64;
            (customer, (!delete).then_some(first_version + i), ts)
        })
        .collect()
}

/// Orders numbered from `first_id`, one every 100 ms from `from_ms` (up to 90 ms later, so in
/// time order) until `to_ms`.
fn orders(seed: u64, from_ms: i64, to_ms: i64, first_id: i64) -> Vec<Order> {
    let mut rng = Lcg(seed);
    (0..(to_ms - from_ms) / 100)
        .map(|i| {
            let customer = format!("c{}", rng.next(ROWS + 2));
            let ts = BASE + from_ms + i * 100 + rng.next(90) as i64;
            (first_id + i, customer, ts)
        })
        .collect()
}

/// The change of `changes` that decides what `order` joins: its customer's last change at or
/// before the order's time (the version valid then, or a delete), if any.
fn deciding<'a>(changes: &'a [Change], order: &Order) -> Option<&'a Change> {
    changes
        .iter()
        .filter(|c| c.0 == order.1 && c.2 <= order.2)
        .max_by_key(|c| c.2)
}

/// The as-of lookup of a left table join: each order's id with the version valid at its time,
/// -1 when its customer has no row then (never had one, or the last change was a delete).
fn as_of_reference(changes: &[Change], orders: &[Order]) -> BTreeMap<i64, i64> {
    orders
        .iter()
        .map(|o| (o.0, deciding(changes, o).and_then(|c| c.1).unwrap_or(-1)))
        .collect()
}

/// The results in `out`, each once by its `tidemark-result-id` (a repeat, which a restore
/// writes for what it does again, must be identical): each order's id with its version (-1
/// for none). An order with two different results fails.
fn results_by_id(bootstrap: &str) -> BTreeMap<i64, i64> {
    let mut by_id: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for m in testing::read_all(bootstrap, "out", 1, DEADLINE) {
        let id = m
            .header("tidemark-result-id")
            .unwrap_or_else(|| panic!("a result without an id: {:?}", m.headers))
            .to_owned();
        let v: serde_json::Value = serde_json::from_slice(m.value.as_deref().unwrap()).unwrap();
        let result = (v["order"].as_i64().unwrap(), v["version"].as_i64().unwrap());
        if let Some(first) = by_id.insert(id.clone(), result) {
            assert_eq!(
                first, result,
                "a repeat of {id} differs from its first copy"
            );
        }
    }
    let mut results = BTreeMap::new();
    for (id, (order, version)) in by_id {
        if let Some(other) = results.insert(order, version) {
            panic!("order {order} has two results: version {other}, and {version} ({id})");
        }
    }
    results
}

fn write_changes(bootstrap: &str, changes: &[Change]) {
    let messages: Vec<(&str, Option<String>, i64)> = changes
        .iter()
        .map(|(c, v, ts)| (c.as_str(), v.map(|v| format!(r#"{{"v":{v}}}"#)), *ts))
        .collect();
    write(bootstrap, "customers", &messages);
}

fn write_orders(bootstrap: &str, orders: &[Order]) {
    let messages: Vec<(&str, Option<String>, i64)> = orders
        .iter()
        .map(|(id, c, ts)| (c.as_str(), Some(format!(r#"{{"id":{id}}}"#)), *ts))
        .collect();
    write(bootstrap, "orders", &messages);
}

/// The series of the job's Kafka sources and its join (watermarks, drops, held records, lag),
/// as text: what a failure shows.
fn join_series(proc: &mut Proc) -> String {
    let addr = proc.metrics_addr();
    let metrics = common::http(addr, "GET", "/metrics").body;
    let mut lines: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            [
                "tidemark_watermark_seconds",
                "tidemark_records_dropped_total",
                "tidemark_join_",
                "tidemark_kafka_lag_records",
                "tidemark_kafka_partition_idle",
                "tidemark_records_in_total",
                "tidemark_records_out_total",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// The join's series `name` (its subtask 0) with one more label, if it has it.
fn join_value(proc: &mut Proc, name: &str, label: (&str, &str)) -> Option<f64> {
    let addr = proc.metrics_addr();
    common::scrape(addr).value(
        name,
        &[
            ("operator_id", "enriched"),
            ("operator_subtask_index", "0"),
            label,
        ],
    )
}

/// The spec's worked case: orders and a customers changelog (a compacted topic read with
/// `tombstones: keep`: several versions per customer, some deletes), `kind: table`, `as_of:
/// event_time`, `join: left`, checkpoints to a directory every 200 ms; written in two halves.
///
/// The forced point: once every order of the first half has its result out, the customers
/// source has committed the whole first half of the changelog (a checkpoint holds it all) and
/// a checkpoint completed after that, the process is killed with SIGKILL. Deletes of the first
/// half were processed before the kill (results with no row show it); the second half, with
/// its deletes, is written only after the kill, once `tidemark run --restore latest` holds its
/// partitions. The results, repeats dropped by their result id, are the as-of lookup computed
/// here: also for the second half's first orders, which only the versions and deletes of the
/// restored state give (with a snapshot that forgot deleted rows, tried by hand, 227 of them
/// joined the version before the delete).
fn table_join_with_deletes_killed_and_restored(kind: Kind) {
    let broker = Broker::start(kind, &[("orders", 1), ("customers", 1), ("out", 1)]);
    let bootstrap = broker.bootstrap().to_owned();
    let first_changes = changelog(41, 0, CHANGES_SPLIT_MS, 0);
    let second_changes = changelog(43, CHANGES_SPLIT_MS, CHANGES_END_MS, 1_000);
    let first_orders = orders(47, 0, ORDERS_SPLIT_MS, 0);
    let second_orders = orders(53, ORDERS_SPLIT_MS, ORDERS_END_MS, 10_000);
    let changes: Vec<Change> = first_changes
        .iter()
        .chain(&second_changes)
        .cloned()
        .collect();
    let all_orders: Vec<Order> = first_orders.iter().chain(&second_orders).cloned().collect();
    let want = as_of_reference(&changes, &all_orders);

    // Before the kill the join gives the first half's orders the changelog has reached (its
    // right input's watermark is its last change's time less 1 ns) and holds the others.
    let reached = first_changes.last().unwrap().2;
    let (given, held): (Vec<&Order>, Vec<&Order>) =
        first_orders.iter().partition(|o| o.2 < reached);
    assert!(!held.is_empty(), "the join holds orders at the kill");
    let after_kill: Vec<&Order> = held.iter().copied().chain(&second_orders).collect();
    // The data has what the case needs: orders given before the kill without a row because of
    // a delete; orders given after it decided by a delete and by a version of the first half
    // (in the restored state), and by a delete of the second half.
    let decided_by = |order: &Order, delete: bool, half: &[Change]| {
        deciding(&changes, order)
            .is_some_and(|c| c.1.is_none() == delete && half.iter().any(|h| h == c))
    };
    let deleted_before_kill: BTreeSet<i64> = given
        .iter()
        .filter(|o| decided_by(o, true, &first_changes))
        .map(|o| o.0)
        .collect();
    assert!(!deleted_before_kill.is_empty());
    for (delete, half, what) in [
        (true, &first_changes, "a delete in the restored state"),
        (false, &first_changes, "a version in the restored state"),
        (true, &second_changes, "a delete after the kill"),
    ] {
        assert!(
            after_kill.iter().any(|o| decided_by(o, delete, half)),
            "no order given after the kill decided by {what}"
        );
    }

    let dir = TempDir::new("kafka-table-join-kill");
    let source = |topic: &str, extra: &str| {
        format!(
            "  {topic}:
    type: kafka
    brokers: {bootstrap}
    topics: [{topic}]
    group: kill-{topic}
    start: earliest
    format: json
    watermarks: {{interval: 20ms}}
    properties: {{session.timeout.ms: 6000, heartbeat.interval.ms: 500}}
{extra}"
        )
    };
    // `allowed_lateness: 1h`: the join keeps every version (so a delete between two versions
    // is in the state at the kill, not only a row's last one). No order may be late (checked),
    // and the versions kept make no result differ.
    dir.write(
        "job.yaml",
        &format!(
            "name: kafka-table-kill
parallelism: 1
checkpoint: {{interval: 200ms, dir: ckpt}}
sources:
{}{}operators:
  enriched:
    type: join
    kind: table
    left: orders
    right: customers
    join: left
    as_of: event_time
    allowed_lateness: 1h
    select:
      order: left.id
      version: 'right == null ? -1 : right.v'
sinks:
  out:
    type: kafka
    input: enriched
    brokers: {bootstrap}
    topic: out
",
            source("orders", ""),
            source("customers", "    tombstones: keep\n")
        ),
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--metrics-addr", "127.0.0.1:0", "job.yaml"];
        args.extend_from_slice(extra);
        Proc::spawn(dir.path(), args)
    };
    let wait = |what: &str, proc: &mut Proc, done: &mut dyn FnMut(&mut Proc) -> bool| {
        let started = Instant::now();
        while !done(proc) {
            assert!(!proc.has_exited(), "it stopped: {}", proc.stderr());
            assert!(
                started.elapsed() < DEADLINE,
                "gave up waiting for {what}: {}\n{}",
                proc.stderr(),
                join_series(proc)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Each half is written as the job starts, before its sources have their partitions: a
    // `kafka` source subtask without a partition yet holds event time back until the group has
    // given it its partitions (it used to count as idle, and the join gave orders read before
    // the customers' partition was assigned the version its table held at once: seen on tansu,
    // four orders joined versions older than the second half's first changes).
    let mut proc = run(&[]);
    write_changes(&bootstrap, &first_changes);
    write_orders(&bootstrap, &first_orders);
    // Where the first half of the changelog ends (tansu's offsets may have gaps).
    let changelog_end = testing::read_all(&bootstrap, "customers", 1, DEADLINE)
        .last()
        .map(|m| m.offset + 1)
        .unwrap();
    wait(
        "the results of the orders the changelog has reached",
        &mut proc,
        &mut |_| results_by_id(&bootstrap).len() >= given.len(),
    );
    wait("the join's held orders", &mut proc, &mut |proc| {
        join_value(proc, "tidemark_join_held_records", ("side", "left")) == Some(held.len() as f64)
    });
    wait(
        "a commit of the whole first half of the changelog",
        &mut proc,
        &mut |_| {
            let (_, committed) =
                testing::committed_offsets(&bootstrap, "kill-customers", "customers", 1);
            matches!(
                committed[0],
                rdkafka::topic_partition_list::Offset::Offset(o) if o >= changelog_end
            )
        },
    );
    let ckpt = dir.join("ckpt");
    let seen = complete_checkpoints(&ckpt, "kafka-table-kill")
        .last()
        .map_or(0, |c| c.0);
    wait("a checkpoint after that", &mut proc, &mut |_| {
        complete_checkpoints(&ckpt, "kafka-table-kill")
            .last()
            .is_some_and(|c| c.0 > seen)
    });
    common::sigkill(&mut proc);
    let before = results_by_id(&bootstrap);
    let want_before: BTreeMap<i64, i64> = given.iter().map(|o| (o.0, want[&o.0])).collect();
    assert_eq!(before, want_before, "the results before the kill");
    assert!(before.keys().any(|o| deleted_before_kill.contains(o)));

    let mut proc = run(&["--restore", "latest"]);
    write_changes(&bootstrap, &second_changes);
    write_orders(&bootstrap, &second_orders);
    wait("every order's result", &mut proc, &mut |_| {
        results_by_id(&bootstrap).len() >= want.len()
    });
    let late = join_value(
        &mut proc,
        "tidemark_records_dropped_total",
        ("reason", "late"),
    );
    assert_eq!(late, Some(0.0), "orders dropped as late");
    proc.terminate();
    assert_eq!(proc.wait_code(), 0, "{}", proc.stderr());
    let got = results_by_id(&bootstrap);
    let wrong: Vec<(i64, Option<&i64>, i64)> = want
        .iter()
        .filter(|(o, v)| got.get(o) != Some(v))
        .map(|(o, v)| (*o, got.get(o), *v))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} orders with another result than the reference; (order, got, want) of the first \
         20: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(20)]
    );
    assert_eq!(got, want);
}

#[test]
fn a_table_join_with_deletes_gives_the_same_results_across_sigkill_and_restore() {
    table_join_with_deletes_killed_and_restored(Kind::Mock);
}

#[test]
fn a_table_join_with_deletes_gives_the_same_results_across_sigkill_and_restore_on_tansu() {
    table_join_with_deletes_killed_and_restored(Kind::Tansu);
}
