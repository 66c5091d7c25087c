//! Joins reading Kafka topics and writing Kafka topics, on a mock cluster the tests start: every
//! result is one message whose `tidemark-result-id` names the join, the two input messages that
//! made it and the key, against a nested loop over the messages the test wrote; a compacted
//! topic read as a table, its tombstones kept (a deletion) or dropped, and written on to another
//! topic as tombstones.
#![cfg(unix)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Proc, TempDir};
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
"
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
