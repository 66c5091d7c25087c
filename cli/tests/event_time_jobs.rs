//! Real jobs built from job files that exercise event time: timestamp range checks on every
//! kind of source, generator disorder, event-time windows fed by watermarks, and end-to-end
//! latency at every vertex. Time is injected: a manual clock, or one that steps on every read.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tidemark_cli::Loader;
use tidemark_markers::{Clock, ManualClock};
use tidemark_runtime::{run, JobOutcome, JobResult};

const MS: i64 = 1_000_000;
const SEC: i64 = 1_000_000_000;
/// 2023-11-14T22:13:20Z.
const T0: i64 = 1_700_000_000 * SEC;

/// A clock that moves `step` nanoseconds forward every time it is read, so that every poll of
/// a source (one read per loop) sees a later time, deterministically.
#[derive(Debug)]
struct SteppingClock {
    nanos: AtomicI64,
    step: i64,
}

impl SteppingClock {
    fn new(start: i64, step: i64) -> Arc<Self> {
        Arc::new(SteppingClock {
            nanos: AtomicI64::new(start),
            step,
        })
    }
}

impl Clock for SteppingClock {
    fn now_nanos(&self) -> i64 {
        self.nanos.fetch_add(self.step, Ordering::SeqCst)
    }
}

/// A fresh folder, removed when dropped.
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new(name: &str) -> Self {
        TempDir(
            tempfile::Builder::new()
                .prefix(&format!("tidemark-cli-{name}-"))
                .tempdir()
                .unwrap(),
        )
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Parses `text` (relative paths against `dir`), builds it with the file's settings and runs
/// it to its end with `clock` and a fixed seed.
fn run_job(text: &str, dir: &Path, clock: Arc<dyn Clock>) -> JobResult {
    let job = Loader::new()
        .seed(Some(7))
        .load_str(text, "job.yaml", dir)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = job.config;
    config.clock = clock;
    run(job.graph, config).unwrap()
}

/// `(key, value, timestamp ms)` of every line of a JSON-lines file.
fn read_records(path: &Path) -> Vec<(u64, f64, i64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_u64().unwrap(),
                v["value"].as_f64().unwrap_or(f64::NAN),
                v["timestamp"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Records whose timestamp is below the highest one before them.
fn late(records: &[(u64, f64, i64)]) -> usize {
    let mut max = i64::MIN;
    records
        .iter()
        .filter(|r| {
            let late = r.2 < max;
            max = max.max(r.2);
            late
        })
        .count()
}

fn source_counts(result: &JobResult, id: &str) -> (u64, u64) {
    let m = &result.metrics.vertex(id).unwrap().subtasks[0];
    (m.records_out(), m.invalid_timestamp_records())
}

fn sink_in(result: &JobResult, id: &str) -> u64 {
    result
        .metrics
        .vertex(id)
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.records_in())
        .sum()
}

const FILE_BODY: &str = "\
{\"key\":1,\"timestamp\":1699992800000}
{\"key\":2,\"timestamp\":1700000000000}
{\"key\":3,\"timestamp\":1700000010000}
{\"key\":4}
{\"key\":5,\"timestamp\":1699999999500}
";

fn file_job(policy: &str) -> String {
    format!(
        "\
name: file-ts
sources:
  events:
    type: file
    path: in.jsonl
    timestamp_before_max: 1h
    timestamp_after_max: 1s
    invalid_timestamp: {policy}
sinks:
  out:
    type: file
    input: events
    path: out.jsonl
    timestamp_field: timestamp
"
    )
}

#[test]
fn file_source_timestamps_are_checked_through_the_common_fields() {
    // The clock says T0 = 1700000000000 ms: key 1 is 2 h old, key 3 is 10 s ahead; key 4 has no
    // timestamp (ingestion time, never checked); keys 2 and 5 are within range.
    let dir = TempDir::new("file-ts");
    std::fs::write(dir.path().join("in.jsonl"), FILE_BODY).unwrap();
    let clock = || Arc::new(ManualClock::new(T0)) as Arc<dyn Clock>;

    let result = run_job(&file_job("drop"), dir.path(), clock());
    assert_eq!(result.outcome, JobOutcome::Finished);
    assert_eq!(source_counts(&result, "events"), (3, 2));
    // Source lag of a file: bytes not read (none left at the end); records unknown.
    let events = &result.metrics.vertex("events").unwrap().subtasks[0];
    assert_eq!((events.lag_bytes(), events.lag_records()), (0, -1));
    let keys: Vec<u64> = read_records(&dir.path().join("out.jsonl"))
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(keys, [2, 4, 5]);

    let result = run_job(&file_job("clamp"), dir.path(), clock());
    assert_eq!(result.outcome, JobOutcome::Finished);
    assert_eq!(source_counts(&result, "events"), (5, 2));
    let records = read_records(&dir.path().join("out.jsonl"));
    let stamps: Vec<(u64, i64)> = records.iter().map(|r| (r.0, r.2)).collect();
    let now_ms = T0 / MS;
    assert_eq!(
        stamps,
        [
            (1, now_ms),
            (2, now_ms),
            (3, now_ms),
            (4, now_ms),
            (5, now_ms - 500)
        ]
    );

    let result = run_job(&file_job("fail"), dir.path(), clock());
    let JobOutcome::Failed(failure) = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert_eq!(failure.vertex_id, "events");
    assert!(
        failure
            .message
            .contains("record with key 1 has timestamp 1699992800000 ms"),
        "{failure}"
    );
    assert!(
        failure.message.contains("timestamp_before_max"),
        "{failure}"
    );
}

fn generator_job(policy: &str) -> String {
    format!(
        "\
name: gen-ts
sources:
  gen:
    type: generator
    count: 10000
    keys: 10
    disorder:
      fraction: 0.1
      delay: 1h
    timestamp_before_max: 1500ms
    invalid_timestamp: {policy}
sinks:
  out:
    type: discard
    input: gen
"
    )
}

#[test]
fn generator_timestamps_are_checked_through_the_common_fields() {
    // Every clock read is one second later: each poll of the generator makes up to 1024
    // records stamped with its own second. About 10 % are held back for an hour, so when every
    // record is made they are let out together; those held for more than 1.5 s are invalid.
    let clock = || SteppingClock::new(T0, SEC) as Arc<dyn Clock>;
    let dir = TempDir::new("gen-ts");

    let dropped = run_job(&generator_job("drop"), dir.path(), clock());
    assert_eq!(dropped.outcome, JobOutcome::Finished);
    let (out, invalid) = source_counts(&dropped, "gen");
    assert!(invalid > 500, "{invalid}");
    assert_eq!(out + invalid, 10_000);
    assert_eq!(sink_in(&dropped, "out"), out);
    // Source lag of a count-only generator: records not emitted yet, none at the end.
    let gen = &dropped.metrics.vertex("gen").unwrap().subtasks[0];
    assert_eq!((gen.lag_records(), gen.lag_bytes()), (0, -1));

    let clamped = run_job(&generator_job("clamp"), dir.path(), clock());
    assert_eq!(clamped.outcome, JobOutcome::Finished);
    assert_eq!(source_counts(&clamped, "gen"), (10_000, invalid));
    assert_eq!(sink_in(&clamped, "out"), 10_000);

    let failed = run_job(&generator_job("fail"), dir.path(), clock());
    let JobOutcome::Failed(failure) = failed.outcome else {
        panic!("{:?}", failed.outcome)
    };
    assert_eq!(failure.vertex_id, "gen");
    assert!(
        failure.message.contains("timestamp_before_max"),
        "{failure}"
    );
}

#[test]
fn stdin_takes_the_common_fields_too() {
    let text = "\
name: stdin-ts
sources:
  input:
    type: stdin
    timestamp_after_max: 1s
    invalid_timestamp: drop
    watermarks: {max_out_of_orderness: 1s}
sinks:
  out:
    type: discard
    input: input
";
    let loaded = Loader::new().load_str(text, "job.yaml", ".").unwrap();
    let input = loaded.job.vertex("input").unwrap();
    assert!(input.config.is_empty());
    assert!(input.source_options.timestamp_check.is_some());
    assert!(input.source_options.watermarks.is_some());
}

#[test]
fn generator_disorder_emits_every_record_some_late() {
    let dir = TempDir::new("disorder");
    let text = "\
name: disorder
sources:
  gen:
    type: generator
    count: 20000
    keys: 7
    disorder:
      fraction: 0.05
      delay: 3s
      distribution: uniform
sinks:
  out:
    type: file
    input: gen
    path: out.jsonl
    timestamp_field: timestamp
";
    let result = run_job(text, dir.path(), SteppingClock::new(T0, SEC));
    assert_eq!(result.outcome, JobOutcome::Finished);
    let records = read_records(&dir.path().join("out.jsonl"));
    assert_eq!(records.len(), 20_000);
    let mut values: Vec<u64> = records.iter().map(|r| r.1 as u64).collect();
    values.sort_unstable();
    assert_eq!(values, (0..20_000).collect::<Vec<u64>>());
    let n_late = late(&records);
    // 5 % of 20000 is 1000 held; some are released within their poll's second, so fewer
    // show up late, but many do.
    assert!((300..=1300).contains(&n_late), "{n_late}");
    assert_eq!(
        result.metrics.vertex("gen").unwrap().subtasks[0].records_out(),
        20_000
    );
}

#[test]
fn event_time_windows_count_every_record_or_drop_it_as_late() {
    // Every clock read is 100 ms later, so each poll's records have their own timestamp and
    // ten polls make a one-second window. 10 % of the records are held back 2 s: with no
    // out-of-orderness allowed they arrive after the watermark passed their window and are
    // dropped and counted; the rest are counted in their windows.
    let dir = TempDir::new("window");
    let text = "\
name: windows
sources:
  gen:
    type: generator
    count: 50000
    keys: 3
    disorder:
      fraction: 0.1
      delay: 2s
    watermarks:
      max_out_of_orderness: 0ms
      interval: 0ms
operators:
  counts:
    type: window
    input: gen
    size: 1s
    aggregate: count
    time: event
sinks:
  out:
    type: file
    input: counts
    path: out.jsonl
    timestamp_field: timestamp
";
    let result = run_job(text, dir.path(), SteppingClock::new(T0, 100 * MS));
    assert_eq!(result.outcome, JobOutcome::Finished);
    let windows = read_records(&dir.path().join("out.jsonl"));
    let counted: f64 = windows.iter().map(|w| w.1).sum();
    let dropped = result.metrics.vertex("counts").unwrap().subtasks[0].late_records_dropped();
    assert!(dropped > 1000, "{dropped}");
    assert_eq!(counted as u64 + dropped, 50_000);
    // One output per key and window, stamped with the window's last millisecond (its last
    // nanosecond, rounded down), each window once (allowed lateness 0: no late firings).
    assert!(windows.iter().all(|w| (w.2 + 1) % 1000 == 0));
    let mut seen: Vec<(i64, u64)> = windows.iter().map(|w| (w.2, w.0)).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), windows.len());
    // Late records are counted at the source even though the window drops them.
    let source = &result.metrics.vertex("gen").unwrap().subtasks[0];
    assert_eq!(source.e2e_latency().as_ref().unwrap().count(), 50_000);
}

#[test]
fn allowed_lateness_turns_drops_into_late_firings() {
    let dir = TempDir::new("lateness");
    let text = "\
name: lateness
sources:
  gen:
    type: generator
    count: 50000
    keys: 3
    disorder:
      fraction: 0.1
      delay: 2s
    watermarks:
      interval: 0ms
operators:
  counts:
    type: window
    input: gen
    size: 1s
    aggregate: count
    time: event
    allowed_lateness: 10s
sinks:
  out:
    type: file
    input: counts
    path: out.jsonl
    timestamp_field: timestamp
";
    let result = run_job(text, dir.path(), SteppingClock::new(T0, 100 * MS));
    assert_eq!(result.outcome, JobOutcome::Finished);
    let dropped = result.metrics.vertex("counts").unwrap().subtasks[0].late_records_dropped();
    assert_eq!(dropped, 0);
    // The last output per key and window is the complete count.
    let windows = read_records(&dir.path().join("out.jsonl"));
    let mut last: std::collections::BTreeMap<(i64, u64), f64> = Default::default();
    for w in &windows {
        last.insert((w.2, w.0), w.1);
    }
    assert!(windows.len() > last.len(), "late firings updated windows");
    assert_eq!(last.values().sum::<f64>() as u64, 50_000);
}

#[test]
fn e2e_latency_everywhere_records_at_every_vertex() {
    let text = "\
name: e2e
e2e_latency_everywhere: EVERYWHERE
sources:
  gen:
    type: generator
    count: 5000
operators:
  a:
    type: map
    input: gen
  b:
    type: filter
    input: a
    keep: 1
sinks:
  out:
    type: discard
    input: b
";
    let dir = TempDir::new("e2e");
    let clock = || Arc::new(ManualClock::new(T0)) as Arc<dyn Clock>;
    let result = run_job(&text.replace("EVERYWHERE", "true"), dir.path(), clock());
    assert_eq!(result.outcome, JobOutcome::Finished);
    for id in ["gen", "a", "b", "out"] {
        let m = &result.metrics.vertex(id).unwrap().subtasks[0];
        let e2e = m.e2e_latency();
        let stats = e2e.as_ref().unwrap_or_else(|| panic!("{id} has no e2e"));
        assert_eq!(stats.count(), 5_000, "{id}");
    }
    let result = run_job(&text.replace("EVERYWHERE", "false"), dir.path(), clock());
    for (id, recorded) in [("gen", true), ("a", false), ("b", false), ("out", true)] {
        let m = &result.metrics.vertex(id).unwrap().subtasks[0];
        assert_eq!(m.e2e_latency().is_some(), recorded, "{id}");
    }
}

#[test]
fn clamped_timestamps_reach_the_sink_as_the_ingestion_time() {
    let dir = TempDir::new("types");
    std::fs::write(dir.path().join("in.jsonl"), FILE_BODY).unwrap();
    let text = file_job("clamp").replace(
        "sinks:\n  out:\n    type: file\n    input: events\n    path: out.jsonl\n    timestamp_field: timestamp\n",
        "sinks:\n  out:\n    type: discard\n    input: events\n",
    );
    let result = run_job(&text, dir.path(), Arc::new(ManualClock::new(T0)));
    assert_eq!(result.outcome, JobOutcome::Finished);
    // The e2e latency at the sink: the clamped and ingestion records are 0 old, key 2 exactly
    // 0 too, key 5 is 500 ms old.
    let out = &result.metrics.vertex("out").unwrap().subtasks[0];
    let e2e = out.e2e_latency();
    let stats = e2e.as_ref().unwrap();
    assert_eq!(stats.count(), 5);
    assert!(
        (stats.sum_seconds() - 0.5).abs() < 1e-9,
        "{}",
        stats.sum_seconds()
    );
}
