//! How a run ends: SIGTERM on an unbounded job (exit 0, in-flight records drained, report
//! written), and a `file` source with a malformed line (fail with exit 1 naming the line, or skip
//! it with `on_error: skip` and count it).
#![cfg(unix)]

mod common;

use common::{
    as_u64, read_report, report_markers_emitted, report_sink_marker_count, scrape_until, Proc,
    TempDir, LINGER,
};

/// The report's `records_in` + `records_out` of vertex `id`.
fn vertex<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["vertices"]
        .as_array()
        .expect("vertices array")
        .iter()
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no vertex {id} in the report: {report}"))
}

#[test]
fn sigterm_stops_an_unbounded_job_cleanly_and_writes_the_report() {
    let dir = TempDir::new("sigterm");
    dir.write(
        "job.yaml",
        "name: unbounded
latency:
  interval: 5ms
sources:
  gen:
    type: generator
    rate: 20000
operators:
  work:
    type: map
    input: gen
    parallelism: 2
    partition: rebalance
    cost: 1us
sinks:
  out:
    type: discard
    input: work
    parallelism: 2
",
    );
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--report-file",
            "report.json",
            "--summary",
        ],
    );
    let addr = proc.metrics_addr();
    // Wait until records reach the sink, so the job is really running.
    scrape_until(addr, "records at the sink", |m| {
        m.sum("tidemark_records_in_total", |l| {
            l.get("operator_id") == Some("out")
        }) > 0.0
    });
    proc.terminate();
    let code = proc.wait_code();
    assert_eq!(
        code,
        0,
        "exit code after SIGTERM; stderr:\n{}",
        proc.stderr()
    );
    assert!(
        proc.stderr().contains("stopped"),
        "summary says stopped:\n{}",
        proc.stderr()
    );

    let report = read_report(&dir.join("report.json"));
    assert_eq!(report["job_name"], "unbounded");
    assert_eq!(report["outcome"], "stopped");
    assert!(
        matches!(report.get("failure"), None | Some(serde_json::Value::Null)),
        "no failure in a stopped run: {report}"
    );
    let emitted = as_u64(&report["records"]["emitted_by_sources"], "emitted");
    let received = as_u64(&report["records"]["received_by_sinks"], "received");
    assert!(emitted > 0, "records emitted: {report}");
    // What was in flight reached the sinks.
    assert_eq!(received, emitted, "records drained to the sink: {report}");
    let gen = vertex(&report, "gen");
    let work = vertex(&report, "work");
    let out = vertex(&report, "out");
    assert_eq!(as_u64(&gen["records_out"], "gen out"), emitted);
    assert_eq!(as_u64(&work["records_in"], "work in"), emitted);
    assert_eq!(as_u64(&work["records_out"], "work out"), emitted);
    assert_eq!(as_u64(&out["records_in"], "out in"), emitted);
    let subtasks = work["subtasks"].as_array().expect("subtasks");
    assert_eq!(subtasks.len(), 2);
    let per_subtask: u64 = subtasks
        .iter()
        .map(|s| as_u64(&s["records_in"], "subtask records_in"))
        .sum();
    assert_eq!(per_subtask, emitted);
    // Markers too: every marker emitted reached a sink.
    let markers = report_markers_emitted(&report);
    assert!(markers > 0, "markers emitted: {report}");
    assert_eq!(report_sink_marker_count(&report), markers, "{report}");
}

const INPUT: &str = r#"{"key": 1, "value": 1.5, "timestamp": 1700000000000}

{"key": 2, "value": 2.5, "timestamp": 1700000000001}
this is not json
{"key": 3, "value": 3.5, "timestamp": 1700000000002}
{"key": 4}
"#;

fn file_job(on_error: &str) -> String {
    format!(
        "name: from-file
sources:
  src:
    type: file
    path: input.jsonl
{on_error}operators:
  work:
    type: map
    input: src
sinks:
  out:
    type: file
    input: work
    path: out.jsonl
    timestamp_field: timestamp
"
    )
}

#[test]
fn a_malformed_line_fails_the_job_naming_the_line() {
    let dir = TempDir::new("malformed-fail");
    dir.write("input.jsonl", INPUT);
    dir.write("job.yaml", &file_job(""));
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--report-file",
            "report.json",
        ],
    );
    let code = proc.wait_code();
    let stderr = proc.stderr();
    assert_eq!(code, 1, "exit code; stderr:\n{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{stderr}"));
    // `input.jsonl:4` (docs/cli.md's example) or `input.jsonl: line 4, column 2`.
    assert!(
        error.contains("input.jsonl:4") || error.contains("input.jsonl: line 4,"),
        "the error names the file and line 4:\n{error}"
    );
    assert!(
        error.contains("\"src\""),
        "the error names the vertex:\n{error}"
    );
    assert!(
        error.contains("subtask 0"),
        "the error names the subtask:\n{error}"
    );

    let report = read_report(&dir.join("report.json"));
    assert_eq!(report["outcome"], "failed", "{report}");
    assert_eq!(report["failure"]["vertex_id"], "src", "{report}");
    assert_eq!(report["failure"]["subtask"], 0, "{report}");
}

#[test]
fn on_error_skip_counts_the_malformed_line_and_delivers_the_others() {
    let dir = TempDir::new("malformed-skip");
    dir.write("input.jsonl", INPUT);
    dir.write("job.yaml", &file_job("    on_error: skip\n"));
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--linger",
            LINGER,
            "--report-file",
            "report.json",
        ],
    );
    let addr = proc.wait_lingering();
    let m = common::scrape(addr);
    proc.end_lingering();

    assert_eq!(
        m.value(
            "tidemark_source_malformed_records_total",
            &[("source_id", "src"), ("source_subtask_index", "0")]
        ),
        Some(1.0),
        "malformed lines counted:\n{}",
        m.body
    );
    assert_eq!(
        m.value(
            "tidemark_records_out_total",
            &[("operator_id", "src"), ("operator_subtask_index", "0")]
        ),
        Some(4.0),
        "records read:\n{}",
        m.body
    );
    let report = read_report(&dir.join("report.json"));
    assert_eq!(report["outcome"], "finished", "{report}");
    assert_eq!(as_u64(&report["records"]["received_by_sinks"], "sinks"), 4);

    // The other lines' records arrived at the file sink, in order, unchanged.
    let written = dir.read("out.jsonl");
    let records: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad output line {l:?}: {e}")))
        .collect();
    assert_eq!(records.len(), 4, "output:\n{written}");
    let keys: Vec<u64> = records.iter().map(|r| as_u64(&r["key"], "key")).collect();
    assert_eq!(keys, [1, 2, 3, 4], "output:\n{written}");
    // Events pass through whole: the last line has no `value`, and gets none.
    let values: Vec<Option<f64>> = records.iter().map(|r| r["value"].as_f64()).collect();
    assert_eq!(
        values,
        [Some(1.5), Some(2.5), Some(3.5), None],
        "output:\n{written}"
    );
    let timestamps: Vec<u64> = records[..3]
        .iter()
        .map(|r| as_u64(&r["timestamp"], "timestamp"))
        .collect();
    assert_eq!(
        timestamps,
        [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002],
        "output:\n{written}"
    );
    // A line without a timestamp gets the ingestion time.
    assert!(as_u64(&records[3]["timestamp"], "timestamp") > 1_700_000_000_002);
}
