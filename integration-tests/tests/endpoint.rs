//! The `/metrics` endpoint of a real run: `promtool check metrics` on what it serves, the other
//! paths and methods, and scrapes that complete while the job saturates every core.
#![cfg(unix)]

mod common;

use common::{http, run_command_with_stdin, scrape, scrape_until, Metrics, Proc, TempDir, TIMEOUT};
use std::process::{Command, Stdio};

/// Whether `promtool` can be run.
fn promtool_available() -> bool {
    Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `promtool check metrics` on `body`; returns its exit code and its output lines.
fn promtool_check(dir: &TempDir, body: &str) -> (i32, Vec<String>) {
    let path = dir.write("metrics.txt", body);
    let input = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut cmd = Command::new("promtool");
    cmd.args(["check", "metrics"]);
    let out = run_command_with_stdin(cmd, input.into(), TIMEOUT, "promtool check metrics");
    let lines = out
        .stdout
        .lines()
        .chain(out.stderr.lines())
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    (out.code(), lines)
}

#[test]
fn promtool_finds_no_problem_at_all() {
    assert!(
        promtool_available(),
        "promtool is not on PATH: install Debian's `prometheus` package \
         (apt-get install -y prometheus; scripts/test installs it)"
    );
    let dir = TempDir::new("promtool");
    dir.write(
        "job.yaml",
        "name: promtool
latency:
  interval: 2ms
  granularity: subtask
sources:
  gen:
    type: generator
    parallelism: 2
    rate: 20000
operators:
  work:
    type: map
    input: gen
    parallelism: 2
    partition: hash
  win:
    type: window
    input: work
    size: 100ms
    aggregate: mean
sinks:
  out:
    type: discard
    input: win
",
    );
    let mut proc = Proc::spawn(
        dir.path(),
        ["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = proc.metrics_addr();
    // Every kind of family: marker summaries and histograms, e2e latency, counters, gauges.
    let m = scrape_until(addr, "marker and e2e latency at the sink", |m| {
        let at_out = |metric: &str| {
            m.samples(metric)
                .any(|s| s.labels.get("operator_id") == Some("out"))
        };
        at_out("tidemark_marker_latency_seconds")
            && at_out("tidemark_marker_latency_window_seconds")
            && at_out("tidemark_record_e2e_latency_seconds")
            && at_out("tidemark_record_e2e_latency_window_seconds")
    });
    proc.terminate();
    assert_eq!(proc.wait_code(), 0, "stderr:\n{}", proc.stderr());

    // The process's own series are served too, as every Prometheus client library does.
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert_eq!(m.samples(name).count(), 1, "{name} in:\n{}", m.body);
    }

    // The contract (docs/metrics.md): promtool prints nothing and exits 0 (no lint remark).
    let (code, lines) = promtool_check(&dir, &m.body);
    assert!(
        code == 0 && lines.is_empty(),
        "promtool exited {code} and reported:\n{}\non:\n{}",
        lines.join("\n"),
        m.body
    );
}

#[test]
fn the_endpoint_answers_while_the_job_saturates_every_core() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let dir = TempDir::new("saturated");
    dir.write(
        "job.yaml",
        &format!(
            "name: saturated
latency:
  interval: 10ms
sources:
  gen:
    type: generator
    parallelism: 2
operators:
  work:
    type: map
    input: gen
    parallelism: {cores}
    partition: rebalance
    cost: 20us
sinks:
  out:
    type: discard
    input: work
    parallelism: {cores}
"
        ),
    );
    let mut proc = Proc::spawn(
        dir.path(),
        ["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = proc.metrics_addr();
    // The job is under way: records have gone through the costly map.
    scrape_until(addr, "records at the sink", |m| {
        m.sum("tidemark_records_in_total", |l| {
            l.get("operator_id") == Some("out")
        }) > 0.0
    });
    // Scrapes complete (no time limit asserted beyond the generous I/O timeout) and are whole.
    for _ in 0..5 {
        let response = http(addr, "GET", "/metrics");
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let m = Metrics::parse(response.body);
        assert_eq!(
            m.value("tidemark_job_running", &[]),
            Some(1.0),
            "{}",
            m.body
        );
        let busy = m
            .samples("tidemark_task_busy_seconds_total")
            .filter(|s| s.labels.get("task") == Some("work+out"))
            .count();
        assert_eq!(busy, cores, "one busy series per subtask of work+out");
        assert!(m
            .scrape
            .samples
            .iter()
            .all(|s| s.labels.get("job_name") == Some("saturated")));
    }

    let head = http(addr, "HEAD", "/metrics");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for path in ["/nope", "/metrics/x", "/favicon.ico"] {
        let response = http(addr, "GET", path);
        assert_eq!(response.status, 404, "GET {path}");
    }
    let post = http(addr, "POST", "/metrics");
    assert_eq!(post.status, 405, "POST /metrics");

    proc.terminate();
    assert_eq!(proc.wait_code(), 0, "stderr:\n{}", proc.stderr());
}

#[test]
fn job_running_is_0_while_lingering() {
    let dir = TempDir::new("lingering");
    dir.write(
        "job.yaml",
        "name: bounded
sources:
  gen:
    type: generator
    count: 1000
sinks:
  out:
    type: discard
    input: gen
",
    );
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--linger",
            common::LINGER,
        ],
    );
    let addr = proc.wait_lingering();
    let m = scrape(addr);
    proc.end_lingering();
    assert_eq!(
        m.value("tidemark_job_running", &[]),
        Some(0.0),
        "{}",
        m.body
    );
    assert_eq!(
        m.value(
            "tidemark_records_in_total",
            &[("operator_id", "out"), ("operator_subtask_index", "0")]
        ),
        Some(1000.0),
        "{}",
        m.body
    );
}
