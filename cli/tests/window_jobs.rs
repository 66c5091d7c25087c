//! Event-time windows of every kind in real jobs built from job files: a file of thousands of
//! random JSON events → `filter` → `map` → hash by a `key:` expression → `window` → `file`
//! sink, everything at parallelism 2, and every output line compared with a reference computed
//! here from the same events.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tidemark_cli::Loader;
use tidemark_runtime::{run, JobOutcome};

/// 2023-11-14T22:13:20Z in ms.
const T0: i64 = 1_700_000_000_000;

struct Event {
    user: String,
    amount: i64,
    price: f64,
    paid: bool,
    ts: i64,
}

/// `n` events with rising timestamps, each up to 40 ms out of order, over 40 users; about a
/// third paid.
fn random_events(seed: u64, n: usize) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = T0 + 17;
    (0..n)
        .map(|_| {
            // Mostly dense, sometimes a pause longer than the session gap.
            t += if rng.random_bool(0.02) {
                rng.random_range(300..2_000)
            } else {
                rng.random_range(0..12)
            };
            Event {
                user: format!("u{}", rng.random_range(0..40)),
                amount: rng.random_range(1..1_000),
                price: rng.random_range(0..100_000) as f64 / 100.0,
                paid: rng.random_bool(0.35),
                ts: t - rng.random_range(0..40),
            }
        })
        .collect()
}

fn write_events(events: &[Event], path: &Path) {
    let statuses = ["open", "refunded"];
    let mut text = String::new();
    for (i, e) in events.iter().enumerate() {
        let status = if e.paid { "paid" } else { statuses[i % 2] };
        writeln!(
            text,
            r#"{{"id":{i},"user":"{}","amount":{},"price":{:?},"status":"{status}","ts":{}}}"#,
            e.user, e.amount, e.price, e.ts
        )
        .unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// One output line: key, window start and end (ms), n, total, top.
type Row = (String, i64, i64, i64, i64, String);

/// Windows of one user's timestamps: (start, end, indices of the timestamps in it).
type Windows = Vec<(i64, i64, Vec<usize>)>;

/// What the job must write: for the kept events (paid, amount > 100), per user and window,
/// `n: count`, `total: {sum: cents}` with `cents = amount * 3`, `top: {max: price}`.
fn reference(events: &[Event], windows: impl Fn(&[i64]) -> Windows) -> Vec<Row> {
    let mut by_user: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if e.paid && e.amount > 100 {
            by_user.entry(&e.user).or_default().push(i);
        }
    }
    let mut rows = Vec::new();
    for (user, idx) in by_user {
        let ts: Vec<i64> = idx.iter().map(|&i| events[i].ts).collect();
        for (start, end, members) in windows(&ts) {
            let chosen: Vec<&Event> = members.iter().map(|&m| &events[idx[m]]).collect();
            let top = chosen.iter().map(|e| e.price).fold(f64::MIN, f64::max);
            rows.push((
                user.to_owned(),
                start,
                end,
                chosen.len() as i64,
                chosen.iter().map(|e| e.amount * 3).sum(),
                format!("{top:?}"),
            ));
        }
    }
    rows.sort();
    rows
}

/// Epoch-aligned windows of `size` every `slide` ms holding each timestamp, by brute force.
fn aligned(size: i64, slide: i64) -> impl Fn(&[i64]) -> Windows {
    move |ts| {
        let mut windows: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (i, &t) in ts.iter().enumerate() {
            let mut start = t - t.rem_euclid(slide);
            while start > t - size {
                windows.entry(start).or_default().push(i);
                start -= slide;
            }
        }
        windows
            .into_iter()
            .map(|(start, members)| (start, start + size, members))
            .collect()
    }
}

/// Sessions: timestamps in order, a new session after a pause of more than `gap`; from the
/// first timestamp to the last plus `gap`.
fn sessions(gap: i64) -> impl Fn(&[i64]) -> Windows {
    move |ts| {
        let mut order: Vec<usize> = (0..ts.len()).collect();
        order.sort_by_key(|&i| ts[i]);
        let mut out: Windows = Vec::new();
        for i in order {
            match out.last_mut() {
                Some((_, end, members)) if ts[i] <= *end => {
                    *end = (*end).max(ts[i] + gap);
                    members.push(i);
                }
                _ => out.push((ts[i], ts[i] + gap, vec![i])),
            }
        }
        out
    }
}

/// Runs the job with the window settings `window` over `events` at parallelism 2; returns the
/// rows of every output file, sorted.
fn run_job(events: &[Event], window: &str, dir: &Path) -> Vec<Row> {
    write_events(events, &dir.join("events.jsonl"));
    let yaml = format!(
        r#"name: windows
parallelism: 2
sources:
  orders:
    type: file
    path: events.jsonl
    format: json
    timestamp: ts
    watermarks:
      max_out_of_orderness: 100ms
operators:
  paid:
    type: filter
    input: orders
    where: 'status == "paid" && amount > 100'
  cents:
    type: map
    input: paid
    set:
      cents: 'amount * 3'
    remove: [id]
  per_user:
    type: window
    input: cents
    key: user
    time: event
{window}
    aggregates:
      n: count
      total: {{sum: cents}}
      top: {{max: price}}
sinks:
  out:
    type: file
    input: per_user
    path: out.jsonl
"#
    );
    let job = Loader::new()
        .seed(Some(3))
        .load_str(&yaml, "windows.yaml", dir)
        .unwrap_or_else(|e| panic!("{e}"));
    let result = run(job.graph, job.config).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);
    let windows = result.metrics.vertex("per_user").unwrap();
    assert_eq!(windows.subtasks.len(), 2);
    let late: u64 = windows
        .subtasks
        .iter()
        .map(|s| s.late_records_dropped())
        .sum();
    assert_eq!(late, 0, "the disorder is within the watermark's bound");
    let mut rows = Vec::new();
    for file in ["out.jsonl", "out.jsonl.1"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(!text.is_empty(), "both sink subtasks get windows");
        for line in text.lines() {
            // Fields in order: the key, the bounds, then the aggregates by name.
            let at = |f: &str| line.find(&format!("\"{f}\":")).unwrap_or(usize::MAX);
            let order = ["key", "window_start", "window_end", "n", "top", "total"].map(at);
            assert!(
                order[0] == 1 && order.windows(2).all(|w| w[0] < w[1]),
                "{line}"
            );
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            rows.push((
                v["key"].as_str().unwrap().to_owned(),
                v["window_start"].as_i64().unwrap(),
                v["window_end"].as_i64().unwrap(),
                v["n"].as_i64().unwrap(),
                v["total"].as_i64().unwrap(),
                format!("{:?}", v["top"].as_f64().unwrap()),
            ));
        }
    }
    rows.sort();
    rows
}

fn check(kind: &str, window: &str, expected: impl Fn(&[Event]) -> Vec<Row>) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("tidemark-windows-{kind}-"))
        .tempdir()
        .unwrap();
    let events = random_events(kind.len() as u64, 6_000);
    let expected = expected(&events);
    assert!(expected.len() > 100, "{kind}: {} windows", expected.len());
    let got = run_job(&events, window, dir.path());
    if got != expected {
        let missing: Vec<&Row> = expected
            .iter()
            .filter(|r| !got.contains(r))
            .take(5)
            .collect();
        let extra: Vec<&Row> = got
            .iter()
            .filter(|r| !expected.contains(r))
            .take(5)
            .collect();
        panic!(
            "{kind}: {} lines, expected {}; missing {missing:?}; unexpected {extra:?}",
            got.len(),
            expected.len()
        );
    }
}

#[test]
fn tumbling_event_time_windows_match_the_reference() {
    check("tumbling", "    size: 1s", |e| {
        reference(e, aligned(1000, 1000))
    });
}

#[test]
fn sliding_event_time_windows_match_the_reference() {
    check(
        "sliding",
        "    kind: sliding\n    size: 1s\n    slide: 250ms",
        |e| reference(e, aligned(1000, 250)),
    );
}

#[test]
fn session_windows_match_the_reference() {
    check("session", "    kind: session\n    gap: 300ms", |e| {
        reference(e, sessions(300))
    });
}
