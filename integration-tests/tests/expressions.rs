//! CEL expressions end to end, through the real binary: the spec's worked cases (events.md,
//! "Worked cases"), run-time errors under `on_error: fail | skip | {dead_letter: PATH}` with their
//! messages and counts, `map set/remove`, and `key:` on a hash edge at parallelism 2.
//! (`where: 'v +'` failing validation with its line is in `job_file_errors.rs`.)

mod common;

use common::{as_u64, read_report, tidemark};
use tempfile::TempDir;

/// The worked cases' input.
const INPUT: &str = "{\"k\":\"a\",\"v\":1}\n{\"k\":\"b\",\"v\":2.5}\n{\"k\":\"a\",\"v\":3}\n";

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("tidemark-expressions-")
        .tempdir()
        .expect("a temporary folder")
}

/// A job reading `in.jsonl` (key `k`) through `operators` (YAML, indented by two) into
/// `out.jsonl`; the last operator is called `last`.
fn job(operators: &str) -> String {
    format!(
        "name: expressions
sources:
  in:
    type: file
    path: in.jsonl
    format: json
    key: k
operators:
{operators}
sinks:
  out:
    type: file
    path: out.jsonl
    input: last
"
    )
}

/// Runs `job` over `input`; returns the exit code, stderr, the output lines and the report.
fn run(job: &str, input: &str) -> (i32, String, Vec<String>, serde_json::Value, TempDir) {
    let dir = temp_dir();
    std::fs::write(dir.path().join("job.yaml"), job).unwrap();
    std::fs::write(dir.path().join("in.jsonl"), input).unwrap();
    let out = tidemark(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--report-file",
            "report.json",
            "--metrics-addr",
            "127.0.0.1:0",
            "--summary",
        ],
    );
    let lines = std::fs::read_to_string(dir.path().join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let report = read_report(&dir.path().join("report.json"));
    (out.code(), out.stderr, lines, report, dir)
}

fn dropped(report: &serde_json::Value, reason: &str) -> u64 {
    as_u64(&report["records"]["dropped"][reason], reason)
}

/// The first worked case: a window over everything (processing time, ended by the end of the
/// input) with `n: count` and `s: {sum: v}` gives `{"key":"a", …, "n":2, "s":4}` and
/// `{"key":"b", …, "n":1, "s":2.5}`.
#[test]
fn a_window_over_everything_counts_and_sums_per_key() {
    // 100000 h: the epoch-aligned window holding now does not end during the test.
    let (code, stderr, lines, _report, _dir) = run(
        &job(
            "  last:\n    type: window\n    input: in\n    size: 100000h\n    aggregates:\n      \
             n: count\n      s: {sum: v}\n",
        ),
        INPUT,
    );
    assert_eq!(code, 0, "{stderr}");
    let mut events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    events.sort_by_key(|e| e["key"].as_str().unwrap_or_default().to_owned());
    assert_eq!(events.len(), 2, "{lines:?}");
    let hour_ms = 3_600_000u64;
    for e in &mut events {
        let (start, end) = (
            e["window_start"].as_u64().unwrap(),
            e["window_end"].as_u64().unwrap(),
        );
        assert_eq!(end - start, 100_000 * hour_ms, "{e}");
        let m = e.as_object_mut().unwrap();
        m.remove("window_start");
        m.remove("window_end");
    }
    // Ints stay ints: the sum of 1 and 3 is 4, not 4.0.
    assert_eq!(
        lines.iter().filter(|l| l.contains(r#""s":4}"#)).count(),
        1,
        "{lines:?}"
    );
    assert_eq!(
        events,
        [
            serde_json::json!({"key": "a", "n": 2, "s": 4}),
            serde_json::json!({"key": "b", "n": 1, "s": 2.5}),
        ]
    );
}

#[test]
fn where_keeps_the_last_two_lines() {
    let (code, stderr, lines, report, _dir) = run(
        &job("  last:\n    type: filter\n    input: in\n    where: 'v > 2'\n"),
        INPUT,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines, [r#"{"k":"b","v":2.5}"#, r#"{"k":"a","v":3}"#]);
    assert_eq!(dropped(&report, "expression_error"), 0, "{report}");
}

#[test]
fn a_missing_field_with_skip_keeps_none_and_counts_three() {
    let (code, stderr, lines, report, _dir) = run(
        &job("  last:\n    type: filter\n    input: in\n    where: 'w > 2'\n    on_error: skip\n"),
        INPUT,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(dropped(&report, "expression_error"), 3, "{report}");
    // The summary on standard error says so too.
    assert!(
        stderr.contains("3 dropped (3 expression error)"),
        "{stderr}"
    );
}

#[test]
fn set_writes_ints_as_ints_and_doubles_as_doubles() {
    let (code, stderr, lines, _report, _dir) = run(
        &job("  last:\n    type: map\n    input: in\n    set: {double: 'v * 2'}\n"),
        INPUT,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        lines,
        [
            r#"{"k":"a","v":1,"double":2}"#,
            r#"{"k":"b","v":2.5,"double":5.0}"#,
            r#"{"k":"a","v":3,"double":6}"#,
        ]
    );
}

#[test]
fn a_failing_expression_fails_the_job_naming_vertex_expression_error_and_record() {
    let (code, stderr, lines, report, _dir) = run(
        &job("  last:\n    type: map\n    input: in\n    set: {r: '10 / (int(v) - 1)'}\n"),
        INPUT,
    );
    assert_eq!(code, 1, "{stderr}");
    for part in [
        "\"last\"",
        "expression `10 / (int(v) - 1)` failed: division by zero: 10 / 0",
        r#"record: {"k":"a","v":1}"#,
    ] {
        assert!(stderr.contains(part), "{part} not in {stderr}");
    }
    // Nothing after the failing record is written.
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(report["outcome"], "failed", "{report}");
}

#[test]
fn dead_letters_get_the_vertex_the_error_and_the_record() {
    let (code, stderr, lines, report, dir) = run(
        &job(
            "  last:\n    type: filter\n    input: in\n    where: '10 / (int(v) - 1) > 0'\n    \
             on_error: {dead_letter: bad.jsonl}\n",
        ),
        INPUT,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines, [r#"{"k":"b","v":2.5}"#, r#"{"k":"a","v":3}"#]);
    let dead = std::fs::read_to_string(dir.path().join("bad.jsonl")).unwrap();
    let dead: Vec<serde_json::Value> = dead
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["vertex"], "last");
    assert_eq!(
        dead[0]["error"],
        "expression `10 / (int(v) - 1) > 0` failed: division by zero: 10 / 0"
    );
    assert_eq!(dead[0]["record"], serde_json::json!({"k": "a", "v": 1}));
    assert_eq!(dropped(&report, "expression_error"), 1, "{report}");
}

#[test]
fn key_on_a_hash_edge_groups_at_parallelism_two() {
    // 2000 events over 7 users; the reduce's key is an expression, not the source key.
    let input: String = (0..2000)
        .map(|i| {
            format!(
                "{{\"k\":{i},\"user\":\"u{}\",\"amount\":{}}}\n",
                i % 7,
                i % 13
            )
        })
        .collect();
    let job = "name: keyed
parallelism: 2
sources:
  in:
    type: file
    path: in.jsonl
    key: k
operators:
  last:
    type: reduce
    input: in
    key: 'user + \"!\"'
    aggregates: {n: count, total: {sum: amount}}
sinks:
  out:
    type: file
    path: out.jsonl
    input: last
    parallelism: 1
";
    let (code, stderr, lines, _report, _dir) = run(job, &input);
    assert_eq!(code, 0, "{stderr}");
    // Subtask i of the file source and of the reduce share a thread (the reduce sends on, to
    // the sink at parallelism 1, which has its own): 3 threads, not 5.
    assert!(stderr.contains("\"keyed\" running (3 threads)"), "{stderr}");
    assert_eq!(lines.len(), 2000);
    // The last output of each user holds its whole count and total: so each user was reduced
    // in one subtask.
    let mut last: std::collections::BTreeMap<String, (u64, i64)> = Default::default();
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let key = v["key"].as_str().unwrap().to_owned();
        let (n, total) = (v["n"].as_u64().unwrap(), v["total"].as_i64().unwrap());
        let e = last.entry(key).or_default();
        if n > e.0 {
            *e = (n, total);
        }
    }
    let mut expected: std::collections::BTreeMap<String, (u64, i64)> = Default::default();
    for i in 0..2000i64 {
        let e = expected.entry(format!("u{}!", i % 7)).or_default();
        e.0 += 1;
        e.1 += i % 13;
    }
    assert_eq!(last, expected);
}
