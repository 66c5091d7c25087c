//! Interval joins with the real binary: payments and clicks from files, joined per user, each
//! result compared with a nested loop over the same records computed here; a SIGKILL at a
//! forced point then `--restore latest` at the same and at another parallelism; a record far
//! behind the watermark in the join's dead letter; the example of docs/joins.md.
#![cfg(unix)]

mod common;

use common::{complete_checkpoints, scrape, tidemark, Proc, TempDir};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(120);
/// 2026-11-30T12:00:00Z in ms.
const BASE: i64 = 1_764_504_000_000;
const USERS: u64 = 40;
const LOWER_MS: i64 = -10 * 60_000;

/// One side's event: (id, user, amount or 0, ts ms).
type Event = (u64, String, u64, i64);

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

/// `n` events, one every `step_ms` from `start` plus up to 1 s of jitter, in time order.
fn events(seed: u64, n: u64, start: i64, step_ms: i64) -> Vec<Event> {
    let mut rng = Lcg(seed);
    let mut out: Vec<Event> = (0..n)
        .map(|i| {
            let user = format!("u{}", rng.next(USERS));
            let t = start + i as i64 * step_ms + rng.next(1_000) as i64;
            (i, user, 1 + rng.next(500), t)
        })
        .collect();
    out.sort_by_key(|e| e.3);
    out
}

fn payments() -> Vec<Event> {
    events(7, 4_000, BASE, 1_000)
}

fn clicks() -> Vec<Event> {
    events(11, 6_000, BASE + LOWER_MS, 700)
}

fn write_lines(path: &Path, lines: impl Iterator<Item = String>) {
    let mut text = String::new();
    for l in lines {
        text.push_str(&l);
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn payment_line(e: &Event) -> String {
    format!(
        r#"{{"id":{},"user":"{}","amount":{},"ts":{}}}"#,
        e.0, e.1, e.2, e.3
    )
}

fn click_line(e: &Event) -> String {
    format!(r#"{{"click":{},"user":"{}","ts":{}}}"#, e.0, e.1, e.3)
}

/// A result as (payment id or -1, click id or -1, ts ms).
type Pair = (i64, i64, i64);

/// The nested loop: every payment with every click of its user at most 10 minutes before it
/// (or at its time); with `left`, every payment without one once with no click.
fn reference(left: bool) -> Vec<Pair> {
    let (ps, cs) = (payments(), clicks());
    let mut out = Vec::new();
    for p in &ps {
        let mut matched = false;
        for c in &cs {
            if c.1 == p.1 && (LOWER_MS..=0).contains(&(c.3 - p.3)) {
                out.push((p.0 as i64, c.0 as i64, p.3.max(c.3)));
                matched = true;
            }
        }
        if left && !matched {
            out.push((p.0 as i64, -1, p.3));
        }
    }
    out.sort();
    out
}

/// The records a join counts as dropped unmatched: the clicks that matched no payment, and with
/// an inner join also the payments that matched no click.
fn unmatched_records(left: bool) -> u64 {
    let (ps, cs) = (payments(), clicks());
    let matches = |p: &Event, c: &Event| c.1 == p.1 && (LOWER_MS..=0).contains(&(c.3 - p.3));
    let clicks = cs
        .iter()
        .filter(|c| !ps.iter().any(|p| matches(p, c)))
        .count();
    let payments = ps
        .iter()
        .filter(|p| !cs.iter().any(|c| matches(p, c)))
        .count();
    (clicks + if left { 0 } else { payments }) as u64
}

fn job(join: &str, extra_ops: &str, left: &str, checkpoint: &str) -> String {
    format!(
        "name: paid-after-click
{checkpoint}sources:
  payments:
    type: file
    path: payments.jsonl
    format: json
    timestamp: ts
    parallelism: 1
    watermarks: {{max_out_of_orderness: 1s, interval: 20ms}}
  clicks:
    type: file
    path: clicks.jsonl
    format: json
    timestamp: ts
    parallelism: 1
    watermarks: {{max_out_of_orderness: 1s, interval: 20ms}}
operators:
  paid_after_click:
    type: join
    left: {left}
    right: clicks
    key: user
    between: [-10m, 0s]
    join: {join}
    select:
      user: key
      payment: left.id
      amount: left.amount
      click: 'right == null ? -1 : right.click'
      clicked: 'right == null ? null : right.ts'
{extra_ops}sinks:
  out:
    type: file
    input: paid_after_click
    parallelism: 1
    path: out.jsonl
    timestamp_field: event_time
"
    )
}

fn join_dir(label: &str, job_text: &str) -> TempDir {
    let dir = TempDir::new(label);
    write_lines(
        &dir.join("payments.jsonl"),
        payments().iter().map(payment_line),
    );
    write_lines(&dir.join("clicks.jsonl"), clicks().iter().map(click_line));
    dir.write("job.yaml", job_text);
    dir
}

/// The results in `out.jsonl`, each checked against its payment and click (`select`'s fields
/// right), sorted; a result twice is an error.
fn results(dir: &TempDir) -> Vec<Pair> {
    let ps: BTreeMap<u64, Event> = payments().into_iter().map(|e| (e.0, e)).collect();
    let cs: BTreeMap<u64, Event> = clicks().into_iter().map(|e| (e.0, e)).collect();
    let mut got = Vec::new();
    for line in dir.read("out.jsonl").lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let payment = v["payment"].as_i64().unwrap();
        let click = v["click"].as_i64().unwrap();
        let p = &ps[&(payment as u64)];
        assert_eq!(v["user"], p.1.as_str(), "{line}");
        assert_eq!(v["amount"].as_u64(), Some(p.2), "{line}");
        match click {
            -1 => assert!(v["clicked"].is_null(), "{line}"),
            c => assert_eq!(v["clicked"].as_i64(), Some(cs[&(c as u64)].3), "{line}"),
        }
        got.push((payment, click, v["event_time"].as_i64().unwrap()));
    }
    got.sort();
    for w in got.windows(2) {
        assert_ne!(w[0], w[1], "a result twice");
    }
    got
}

fn run(dir: &TempDir, args: &[&str]) -> common::Output {
    let mut all = vec!["run", "--metrics-addr", "127.0.0.1:0", "job.yaml"];
    all.extend_from_slice(args);
    tidemark(dir.path(), all)
}

#[test]
fn an_inner_and_a_left_interval_join_give_what_a_nested_loop_finds() {
    for (join, left) in [("inner", false), ("left", true)] {
        let want = reference(left);
        assert!(want.len() > 4_000, "the data has matches: {}", want.len());
        for p in ["1", "2"] {
            let dir = join_dir("join-files", &job(join, "", "payments", ""));
            let out = run(&dir, &["--parallelism", p, "--report-file", "report.json"]);
            assert_eq!(out.code(), 0, "{}", out.stderr);
            let got = results(&dir);
            assert_eq!(got.len(), want.len(), "{join} at P={p}");
            assert_eq!(got, want, "{join} at P={p}");

            let report: serde_json::Value = serde_json::from_str(&dir.read("report.json")).unwrap();
            let unmatched = report["records"]["dropped"]["unmatched"].as_u64().unwrap();
            assert_eq!(
                unmatched,
                unmatched_records(left),
                "{join} at P={p}: {report}"
            );
            // Markers of both inputs' sources pass through the join and reach the sink.
            for vertex in ["paid_after_click", "out"] {
                for source in ["payments", "clicks"] {
                    assert!(
                        report["latency"].as_array().unwrap().iter().any(|l| {
                            l["operator_id"] == vertex
                                && l["source_id"] == source
                                && l["count"].as_u64() > Some(0)
                        }),
                        "no markers of {source} at {vertex}: {report}"
                    );
                }
            }
        }
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `job.yaml` of job `job` in `dir` at P=2; once the sink has written a third of
/// `results` lines to `out.jsonl` and a checkpoint completed after that (a forced point, never a
/// sleep), kills it with SIGKILL, and checks it had not finished.
fn kill_at_forced_point(dir: &TempDir, job: &str, results: usize) {
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
    let out = dir.join("out.jsonl");
    wait_until("a part of the output", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.lines().count() >= results / 3)
    });
    let ckpt = dir.join("ckpt");
    let seen = complete_checkpoints(&ckpt, job).last().map_or(0, |c| c.0);
    wait_until("a checkpoint after that", || {
        complete_checkpoints(&ckpt, job)
            .last()
            .is_some_and(|c| c.0 > seen)
    });
    common::sigkill(&mut proc);
    let written = std::fs::read_to_string(&out).unwrap().lines().count();
    assert!(written < results, "killed before the end: {written}");
}

/// Checkpoints as the spec's worked case takes them.
const CHECKPOINTS: &str = "checkpoint: {interval: 200ms, dir: ckpt}\n";

/// The left join at P=2, its payments slowed so that it runs long enough to be killed (at
/// [`kill_at_forced_point`]); then `--restore latest` at `restore_p`: every result once, as the
/// nested loop finds them.
fn killed_and_restored(restore_p: &str) {
    // Chained to the source (one subtask), so no queue of payments waits ahead of a barrier.
    let slow =
        "  slow:\n    type: delay\n    input: payments\n    parallelism: 1\n    per_record: 1ms\n";
    let dir = join_dir("join-kill", &job("left", slow, "slow", CHECKPOINTS));
    let want = reference(true);
    kill_at_forced_point(&dir, "paid-after-click", want.len());
    let out = run(&dir, &["--parallelism", restore_p, "--restore", "latest"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert_eq!(results(&dir), want, "restored at P={restore_p}");
}

#[test]
fn sigkill_half_way_then_restore_at_the_same_parallelism_gives_every_result_once() {
    killed_and_restored("2");
}

#[test]
fn sigkill_half_way_then_restore_at_another_parallelism_gives_every_result_once() {
    killed_and_restored("3");
}

/// Payments come on stdin, clicks from a file. Once the join's watermark has passed a point,
/// a payment far behind it is late: it goes to the join's dead letter, counted, and joins
/// nothing.
#[test]
fn a_record_far_behind_the_watermark_goes_to_the_late_dead_letter() {
    let dir = TempDir::new("join-late");
    write_lines(&dir.join("clicks.jsonl"), clicks().iter().map(click_line));
    dir.write(
        "job.yaml",
        "name: late-joins
sources:
  payments:
    type: stdin
    format: json
    timestamp: ts
    watermarks: {interval: 10ms}
  clicks:
    type: file
    path: clicks.jsonl
    format: json
    timestamp: ts
    watermarks: {interval: 10ms}
operators:
  paid_after_click:
    type: join
    left: payments
    right: clicks
    key: user
    between: [-10m, 0s]
    allowed_lateness: 1s
    late: {dead_letter: late-joins.jsonl}
sinks:
  out: {type: file, input: paid_after_click, path: out.jsonl}
",
    );
    let (mut proc, mut stdin) = Proc::spawn_with_stdin(
        dir.path(),
        [
            "run",
            "--metrics-addr",
            "127.0.0.1:0",
            "job.yaml",
            "--parallelism",
            "1",
        ],
    );
    let addr = proc.metrics_addr();
    let ps = payments();
    for p in &ps[..100] {
        writeln!(stdin, "{}", payment_line(p)).unwrap();
    }
    stdin.flush().unwrap();
    // The join's watermark passed the 100th payment less 2 s.
    let passed = (ps[99].3 - 2_000) as f64 / 1_000.0;
    wait_until("the join's watermark", || {
        scrape(addr)
            .value(
                "tidemark_watermark_seconds",
                &[
                    ("operator_id", "paid_after_click"),
                    ("operator_subtask_index", "0"),
                ],
            )
            .is_some_and(|w| w >= passed)
    });
    // The join's series: matches so far, no unmatched result (an inner join emits none), and
    // the clicks it holds for payments still to come.
    let series = |name: &str, label: (&str, &str)| {
        scrape(addr).value(
            name,
            &[
                ("operator_id", "paid_after_click"),
                ("operator_subtask_index", "0"),
                label,
            ],
        )
    };
    wait_until("the join's results in its series", || {
        series("tidemark_join_results_total", ("kind", "matched")).is_some_and(|m| m > 0.0)
    });
    let matched = series("tidemark_join_results_total", ("kind", "matched")).unwrap();
    assert_eq!(
        series("tidemark_join_results_total", ("kind", "unmatched")),
        Some(0.0)
    );
    assert!(series("tidemark_join_held_records", ("side", "right")).unwrap() > 0.0);
    assert!(series("tidemark_join_held_records", ("side", "left")).is_some());
    // A payment of a user with clicks at its time, 5 s behind the join's watermark.
    let late = (99_999u64, ps[50].1.clone(), 7u64, ps[99].3 - 7_000);
    writeln!(stdin, "{}", payment_line(&late)).unwrap();
    drop(stdin);
    assert_eq!(proc.wait_code(), 0, "{}", proc.stderr());
    let dead: Vec<serde_json::Value> = dir
        .read("late-joins.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["record"]["id"], 99_999);
    assert!(
        dead[0]["error"].as_str().unwrap().starts_with("late:"),
        "{dead:?}"
    );
    let out = dir.read("out.jsonl");
    assert!(!out.contains("99999"), "the late payment joined: {out}");
    assert!(
        out.lines().count() as f64 >= matched,
        "every match the series counted is in the output"
    );
}

/// The example of docs/joins.md runs as the docs say, and gives the nested loop's results.
#[test]
fn the_documented_example_runs() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let dir = TempDir::new("join-example");
    for f in ["joins.yaml", "payments.jsonl", "clicks.jsonl"] {
        std::fs::copy(examples.join(f), dir.join(f)).unwrap();
    }
    let out = tidemark(
        dir.path(),
        ["run", "--metrics-addr", "127.0.0.1:0", "joins.yaml"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let read = |name: &str| -> Vec<serde_json::Value> {
        dir.read(name)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (ps, cs) = (read("payments.jsonl"), read("clicks.jsonl"));
    let mut want = Vec::new();
    for p in &ps {
        let mut matched = false;
        for c in &cs {
            let d = c["ts"].as_i64().unwrap() - p["ts"].as_i64().unwrap();
            if c["user"] == p["user"] && (LOWER_MS..=0).contains(&d) {
                want.push((
                    p["id"].as_i64().unwrap(),
                    c["page"].as_str().unwrap().to_owned(),
                ));
                matched = true;
            }
        }
        if !matched {
            want.push((p["id"].as_i64().unwrap(), String::new()));
        }
    }
    want.sort();
    let mut got: Vec<(i64, String)> = read("paid-after-click.jsonl")
        .iter()
        .map(|r| {
            (
                r["payment"].as_i64().unwrap(),
                r["page"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------------
// Table joins: orders with the version of their customer's row valid at the order's time.

/// Customers' versions: (customer, version, ts ms), several per customer, in time order, no two
/// of one customer at the same time.
fn customers() -> Vec<(String, u64, i64)> {
    let mut rng = Lcg(23);
    let mut out: Vec<(String, u64, i64)> = (0..600u64)
        .map(|i| (format!("c{}", rng.next(30)), i, BASE + i as i64 * 5_000))
        .collect();
    out.sort_by_key(|c| c.2);
    out
}

/// Orders: (id, customer, ts ms), in time order; some customers (c30..c34) never have a row.
fn orders() -> Vec<(u64, String, i64)> {
    let mut rng = Lcg(29);
    (0..3_000u64)
        .map(|i| {
            (
                i,
                format!("c{}", rng.next(35)),
                BASE - 60_000 + i as i64 * 1_000 + rng.next(900) as i64,
            )
        })
        .collect()
}

/// The as-of lookup: each order with the customer's newest version at or before it, or none.
fn table_reference() -> Vec<(i64, i64)> {
    let cs = customers();
    let mut out: Vec<(i64, i64)> = orders()
        .iter()
        .map(|o| {
            let version = cs
                .iter()
                .filter(|c| c.0 == o.1 && c.2 <= o.2)
                .map(|c| c.1 as i64)
                .next_back()
                .unwrap_or(-1);
            (o.0 as i64, version)
        })
        .collect();
    out.sort();
    out
}

fn table_dir(label: &str, slow: bool, checkpoint: &str) -> TempDir {
    let dir = TempDir::new(label);
    write_lines(
        &dir.join("orders.jsonl"),
        orders()
            .iter()
            .map(|o| format!(r#"{{"id":{},"customer_id":"{}","ts":{}}}"#, o.0, o.1, o.2)),
    );
    write_lines(
        &dir.join("customers.jsonl"),
        customers()
            .iter()
            .map(|c| format!(r#"{{"id":"{}","version":{},"ts":{}}}"#, c.0, c.1, c.2)),
    );
    let (left, slow_op) = match slow {
        true => (
            "slow",
            "  slow:\n    type: delay\n    input: orders\n    parallelism: 1\n    per_record: 1ms\n",
        ),
        false => ("orders", ""),
    };
    dir.write(
        "job.yaml",
        &format!(
            "name: enriched
{checkpoint}sources:
  orders:
    type: file
    path: orders.jsonl
    format: json
    timestamp: ts
    parallelism: 1
    watermarks: {{interval: 20ms}}
  customers:
    type: file
    path: customers.jsonl
    format: json
    timestamp: ts
    parallelism: 1
    watermarks: {{interval: 20ms}}
operators:
{slow_op}  enriched:
    type: join
    kind: table
    left: {left}
    right: customers
    key: {{left: customer_id, right: id}}
    join: left
    as_of: event_time
    select:
      order: left.id
      version: 'right == null ? -1 : right.version'
sinks:
  out:
    type: file
    input: enriched
    parallelism: 1
    path: out.jsonl
"
        ),
    );
    dir
}

fn table_results(dir: &TempDir) -> Vec<(i64, i64)> {
    let mut got: Vec<(i64, i64)> = dir
        .read("out.jsonl")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["order"].as_i64().unwrap(), v["version"].as_i64().unwrap())
        })
        .collect();
    got.sort();
    got
}

#[test]
fn a_table_join_gives_each_order_the_version_valid_at_its_time() {
    let want = table_reference();
    assert!(want.iter().any(|w| w.1 == -1) && want.iter().any(|w| w.1 > 0));
    for p in ["1", "3"] {
        let dir = table_dir("join-table", false, "");
        let out = run(&dir, &["--parallelism", p]);
        assert_eq!(out.code(), 0, "{}", out.stderr);
        assert_eq!(table_results(&dir), want, "P={p}");
    }
}

#[test]
fn a_table_join_killed_half_way_and_restored_at_another_parallelism_gives_the_same_results() {
    let want = table_reference();
    let dir = table_dir("join-table-kill", true, CHECKPOINTS);
    kill_at_forced_point(&dir, "enriched", want.len());
    let out = run(&dir, &["--parallelism", "3", "--restore", "latest"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let got = table_results(&dir);
    for w in got.windows(2) {
        assert_ne!(w[0], w[1], "a result twice");
    }
    assert_eq!(got, want);
}

/// The table join example of docs/joins.md: each order with its customer's tier as it was at
/// the order's time.
#[test]
fn the_documented_table_join_example_runs() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let dir = TempDir::new("join-enrich");
    for f in ["enrich.yaml", "orders.jsonl", "customers.jsonl"] {
        std::fs::copy(examples.join(f), dir.join(f)).unwrap();
    }
    let out = tidemark(
        dir.path(),
        ["run", "--metrics-addr", "127.0.0.1:0", "enrich.yaml"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let mut got: Vec<(i64, String)> = dir
        .read("enriched.jsonl")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["order"].as_i64().unwrap(),
                v["tier"].as_str().unwrap_or("none").to_owned(),
            )
        })
        .collect();
    got.sort();
    // As the example's comment says: Grace is standard at 12:00:00.1 and gold from 12:00:01;
    // Ada is standard until 12:00:03.
    let want: Vec<(i64, String)> = [
        (1, "standard"),
        (2, "standard"),
        (3, "gold"),
        (5, "standard"),
    ]
    .iter()
    .map(|(o, t)| (*o, t.to_string()))
    .collect();
    assert_eq!(got, want);
}
