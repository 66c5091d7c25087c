//! How `tidemark run` ends, and what it says about it:
//!
//! - the report is written whatever the outcome: a job that cannot start (a missing input file),
//!   an invalid job file, a hard stop after a second signal;
//! - `--drain-timeout`: a stop whose drain takes too long ends hard, exits 1, and the report
//!   counts the records left in flight;
//! - nothing dropped is invisible: skipped lines are in the table, the report and
//!   `tidemark_records_dropped_total`;
//! - `| head -1` on the `stdout` sink ends the job quietly with exit 0, and the sinks never
//!   count more records than the sources emitted.
#![cfg(unix)]

mod common;

use common::{as_u64, read_report, scrape, scrape_until, tidemark, tidemark_bin, Proc, LINGER};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("tidemark-outcomes-")
        .tempdir()
        .expect("a temporary folder")
}

fn write(dir: &TempDir, name: &str, contents: impl AsRef<[u8]>) {
    std::fs::write(dir.path().join(name), contents).expect("write a test file");
}

/// Sends `signal` to the process.
fn send(proc: &Proc, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(proc.id()).expect("pid fits pid_t");
    // SAFETY: kill(2) with a valid signal number on our own child's pid, not yet reaped.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill failed: {}", std::io::Error::last_os_error());
}

/// `report.records.dropped[reason]`.
fn dropped(report: &serde_json::Value, reason: &str) -> u64 {
    as_u64(&report["records"]["dropped"][reason], reason)
}

#[test]
fn a_job_that_cannot_start_still_writes_the_report() {
    let dir = temp_dir();
    write(
        &dir,
        "job.yaml",
        "name: missing-input
sources:
  src:
    type: file
    path: nope.jsonl
sinks:
  out:
    type: discard
    input: src
",
    );
    let out = tidemark(
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
    assert_eq!(out.code(), 1, "stderr:\n{}", out.stderr);
    let report = read_report(&dir.path().join("report.json"));
    assert_eq!(report["job_name"], "missing-input", "{report}");
    assert_eq!(report["outcome"], "failed", "{report}");
    assert_eq!(report["exit_code"], 1, "{report}");
    let error = report["error"].as_str().expect("an error message");
    assert!(error.contains("nope.jsonl"), "{error}");
    assert_eq!(report["failure"]["vertex_id"], "src", "{report}");
    assert_eq!(report["failure"]["subtask"], 0, "{report}");
    assert_eq!(report["settings"]["parallelism"], 1, "{report}");
}

#[test]
fn an_invalid_job_file_still_writes_the_report() {
    let dir = temp_dir();
    write(
        &dir,
        "job.yaml",
        "name: typo
sources:
  src:
    type: generator
    cuont: 10
sinks:
  out:
    type: discard
    input: src
",
    );
    let out = tidemark(
        dir.path(),
        ["run", "job.yaml", "--report-file", "report.json"],
    );
    assert_eq!(out.code(), 2, "stderr:\n{}", out.stderr);
    let report = read_report(&dir.path().join("report.json"));
    assert_eq!(report["outcome"], "failed", "{report}");
    assert_eq!(report["exit_code"], 2, "{report}");
    let error = report["error"].as_str().expect("an error message");
    assert!(error.contains("cuont"), "{error}");
}

/// An unbounded generator into a slow `delay` step in its own task: the queue in front of
/// `slow` fills (8 batches of 1024) and takes seconds to empty (400 µs a record), far longer
/// than a 200 ms drain timeout, while one batch takes the step ~0.4 s, well within the 2 s a
/// hard stop waits for tasks to end.
const SLOW_JOB: &str = "name: slow
sources:
  gen:
    type: generator
operators:
  slow:
    type: delay
    input: gen
    per_record: 400us
sinks:
  out:
    type: discard
    input: slow
";

/// Starts [`SLOW_JOB`] with `extra` flags and waits until `slow`'s input queue is at least
/// half full.
fn start_slow_job(dir: &TempDir, extra: &[&str]) -> Proc {
    write(dir, "job.yaml", SLOW_JOB);
    let mut args = vec![
        "run",
        "job.yaml",
        "--no-chaining",
        "--metrics-addr",
        "127.0.0.1:0",
        "--report-file",
        "report.json",
        "--summary",
    ];
    args.extend_from_slice(extra);
    let mut proc = Proc::spawn(dir.path(), &args);
    let addr = proc.metrics_addr();
    scrape_until(addr, "a full queue in front of the slow step", |m| {
        m.sum("tidemark_input_queue_records", |l| {
            l.get("operator_id") == Some("slow")
        }) >= 4.0 * 1024.0
    });
    proc
}

/// The report of a hard stop: records left in flight, all accounted for.
fn check_hard_stop_report(report: &serde_json::Value) -> u64 {
    assert_eq!(report["outcome"], "failed", "{report}");
    let emitted = as_u64(&report["records"]["emitted_by_sources"], "emitted");
    let received = as_u64(&report["records"]["received_by_sinks"], "received");
    let in_flight = dropped(report, "in_flight");
    assert!(in_flight >= 1024, "records left in flight: {report}");
    assert!(
        report.get("tasks_not_ended").is_none(),
        "every task ended: {report}"
    );
    // `delay` passes every record on: what did not reach the sink was left in flight.
    assert_eq!(emitted, received + in_flight, "{report}");
    assert_eq!(
        as_u64(&report["records"]["dropped_total"], "total"),
        in_flight
    );
    in_flight
}

#[test]
fn past_the_drain_timeout_the_job_stops_hard_and_counts_what_was_in_flight() {
    let dir = temp_dir();
    let mut proc = start_slow_job(&dir, &["--drain-timeout", "200ms"]);
    send(&proc, libc::SIGINT);
    let code = proc.wait_code();
    let stderr = proc.stderr();
    assert_eq!(code, 1, "exit code; stderr:\n{stderr}");
    assert!(
        stderr.contains("did not drain within --drain-timeout 200ms: stopping hard"),
        "{stderr}"
    );
    let report = read_report(&dir.path().join("report.json"));
    let in_flight = check_hard_stop_report(&report);
    assert_eq!(report["exit_code"], 1, "{report}");
    assert_eq!(
        report["stop_reason"], "SIGINT, then --drain-timeout 200ms passed",
        "{report}"
    );
    let error = report["error"].as_str().expect("error");
    assert!(
        error.contains(&format!("{in_flight} records left in flight")),
        "{error}"
    );
    // The table and the error line say it too.
    let slow_row = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("slow "))
        .unwrap_or_else(|| panic!("no row for slow:\n{stderr}"));
    assert!(slow_row.ends_with("in flight"), "{slow_row}");
    assert!(
        stderr.contains(&format!("error: job \"slow\" did not drain within --drain-timeout 200ms: stopped hard, {in_flight} records left in flight")),
        "{stderr}"
    );
}

#[test]
fn a_second_signal_stops_hard_and_still_writes_the_report() {
    let dir = temp_dir();
    let mut proc = start_slow_job(&dir, &[]);
    send(&proc, libc::SIGINT);
    proc.wait_for_stderr("SIGINT: stopping the job");
    send(&proc, libc::SIGTERM);
    let code = proc.wait_code();
    let stderr = proc.stderr();
    assert_eq!(code, 130, "exit code; stderr:\n{stderr}");
    let report = read_report(&dir.path().join("report.json"));
    check_hard_stop_report(&report);
    assert_eq!(report["exit_code"], 130, "{report}");
    assert_eq!(
        report["stop_reason"], "SIGINT, then SIGTERM again",
        "{report}"
    );
}

#[test]
fn skipped_lines_are_in_the_table_the_report_and_the_metrics() {
    let dir = temp_dir();
    // Three lines of binary junk: nothing is a record.
    write(
        &dir,
        "input.bin",
        b"\x7fELF\x02\x01\x01\x00\n\x00\x01\xff\xfe junk\n{\"key\":\n",
    );
    write(
        &dir,
        "job.yaml",
        "name: binary
sources:
  src:
    type: file
    path: input.bin
    on_error: skip
sinks:
  out:
    type: discard
    input: src
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
            "--linger",
            LINGER,
            "--summary",
        ],
    );
    let addr = proc.wait_lingering();
    let m = scrape(addr);
    proc.end_lingering();
    assert_eq!(
        m.value(
            "tidemark_records_dropped_total",
            &[
                ("operator_id", "src"),
                ("operator_subtask_index", "0"),
                ("reason", "malformed")
            ]
        ),
        Some(3.0),
        "{}",
        m.body
    );
    let stderr = proc.stderr();
    assert!(
        stderr.contains("0 records from sources, 0 to sinks, 3 dropped (3 malformed)"),
        "{stderr}"
    );
    let src_row = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("src "))
        .unwrap_or_else(|| panic!("no row for src:\n{stderr}"));
    assert!(src_row.ends_with("3  3 malformed"), "{src_row}");
    assert!(
        stderr.contains(
            "tidemark: warning: the sources read no record: all 3 lines were malformed and \
             skipped (on_error: skip)"
        ),
        "{stderr}"
    );
    let report = read_report(&dir.path().join("report.json"));
    assert_eq!(report["outcome"], "finished", "{report}");
    assert_eq!(dropped(&report, "malformed"), 3, "{report}");
    assert_eq!(report["vertices"][0]["dropped"]["malformed"], 3, "{report}");
}

/// Runs `tidemark run job.yaml` with standard output into a pipe of which one line is read
/// before it is closed, as `| head -1` does. Returns the exit code and standard error.
fn run_into_head(dir: &Path) -> (i32, String) {
    let stderr_path = dir.join("stderr.txt");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = Command::new(tidemark_bin())
        .args([
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--report-file",
            "report.json",
        ])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start tidemark");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("read a line");
    // The reader is dropped here: the pipe's read end closes.
    assert!(first.starts_with("{\"key\":"), "{first}");
    let deadline = Instant::now() + common::TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("tidemark did not end after its standard output closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let code = status.code().expect("exited, not killed");
    (code, std::fs::read_to_string(stderr_path).expect("stderr"))
}

#[test]
fn head_on_the_stdout_sink_ends_the_job_quietly() {
    let dir = temp_dir();
    // Unbounded: only the closed pipe ends this job.
    write(
        &dir,
        "job.yaml",
        "name: to-head
sources:
  gen:
    type: generator
sinks:
  out:
    type: stdout
    input: gen
",
    );
    let (code, stderr) = run_into_head(dir.path());
    assert_eq!(code, 0, "stderr:\n{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    let report = read_report(&dir.path().join("report.json"));
    assert_eq!(report["outcome"], "stopped", "{report}");
    assert_eq!(report["exit_code"], 0, "{report}");
    assert_eq!(
        report["stop_reason"], "a sink's output was closed (broken pipe)",
        "{report}"
    );
    // The sink never counts more than the sources emitted (it used to say 1024 emitted,
    // 2048 received): source and sink are chained, so they count the same records.
    let emitted = as_u64(&report["records"]["emitted_by_sources"], "emitted");
    let received = as_u64(&report["records"]["received_by_sinks"], "received");
    assert_eq!(received, emitted, "{report}");
    assert!(dropped(&report, "output_closed") > 0, "{report}");
    assert!(dropped(&report, "output_closed") <= received, "{report}");
}

#[test]
fn the_table_needs_a_terminal_or_summary_but_warnings_are_always_printed() {
    let dir = temp_dir();
    write(&dir, "input.bin", b"\x00\x01\xff\n");
    write(
        &dir,
        "job.yaml",
        "name: quiet
sources:
  src:
    type: file
    path: input.bin
    on_error: skip
sinks:
  out:
    type: discard
    input: src
",
    );
    // Standard error is a pipe here, not a terminal.
    let out = tidemark(
        dir.path(),
        ["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    assert_eq!(out.code(), 0, "stderr:\n{}", out.stderr);
    assert!(!out.stderr.contains("records in"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("tidemark: warning: the sources read no record: its one line was malformed"),
        "{}",
        out.stderr
    );
    let out = tidemark(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--summary",
        ],
    );
    assert_eq!(out.code(), 0, "stderr:\n{}", out.stderr);
    assert!(
        out.stderr
            .contains("tidemark: job \"quiet\" finished after"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("1 dropped (1 malformed)"),
        "{}",
        out.stderr
    );
}
