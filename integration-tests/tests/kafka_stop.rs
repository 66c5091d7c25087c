//! A stop that is bounded whatever the brokers do (`docs/operations.md`, "Stopping"): the
//! broker (`tidemark dev-kafka`, a process of its own) is frozen with SIGSTOP while a job reads
//! from it, so the source's last commit on SIGTERM can neither complete nor fail; the process
//! still exits within `--drain-timeout` plus 2 s, and says what the hard stop cut short. Also
//! `/readyz` of a Kafka job: ready once its source subtasks have their assignments.
#![cfg(unix)]

mod common;

use std::time::{Duration, Instant};

use common::{Proc, TempDir, TIMEOUT};

/// The drain timeout of the test; the contract is an exit within it plus 2 s.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends `signal` to `p`.
fn signal(p: &Proc, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child, not yet reaped.
    let rc = unsafe { libc::kill(p.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

#[test]
fn sigterm_exits_within_the_drain_timeout_plus_2s_when_the_broker_is_frozen() {
    let dir = TempDir::new("kafka-stop");
    let mut broker = Proc::spawn(dir.path(), ["dev-kafka", "--topic", "orders:2"]);
    let deadline = Instant::now() + TIMEOUT;
    let bootstrap = loop {
        if let Some(line) = broker
            .stdout()
            .lines()
            .find(|l| l.starts_with("bootstrap: "))
        {
            break line["bootstrap: ".len()..].trim().to_owned();
        }
        assert!(!broker.has_exited(), "dev-kafka ended: {}", broker.stderr());
        assert!(
            Instant::now() < deadline,
            "dev-kafka never said its address"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // 200 messages, written by a job of the binary itself.
    dir.write(
        "fill.yaml",
        &format!(
            "name: fill
sources:
  numbers: {{type: generator, count: 200, keys: 10}}
sinks:
  orders: {{type: kafka, input: numbers, brokers: {bootstrap}, topic: orders}}
"
        ),
    );
    let filled = common::tidemark(
        dir.path(),
        ["run", "fill.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    assert_eq!(filled.code(), 0, "{}", filled.stderr);
    dir.write(
        "job.yaml",
        &format!(
            "name: frozen
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [orders]
    # librdkafka's commit timer stays out of the way: the positions read are committed by the
    # source as it closes, the call the frozen broker never answers.
    properties: {{auto.commit.interval.ms: 3600000}}
sinks:
  out: {{type: discard, input: orders}}
"
        ),
    );
    let drain = format!("{}s", DRAIN_TIMEOUT.as_secs());
    let (mut p, addr) = common::run_instance(
        dir.path(),
        &dir.join("job.yaml"),
        "frozen-1",
        &[
            "--drain-timeout",
            &drain,
            "--kafka-timeout",
            "60s",
            "--report-file",
            "report.json",
        ],
    );
    common::scrape_until(addr, "the source to read the 200 messages", |m| {
        m.total("tidemark_records_in_total") >= 200.0
    });
    // Ready: the source subtask has its assignment.
    common::http_until(addr, "/readyz", "ready", |r| r.status == 200);

    // The broker stops answering, without closing anything: every call to it hangs.
    signal(&broker, libc::SIGSTOP);
    let stopped = Instant::now();
    p.terminate();
    let status = p.wait_for(TIMEOUT);
    let took = stopped.elapsed();
    signal(&broker, libc::SIGCONT);
    let stderr = p.stderr();
    assert!(
        took < DRAIN_TIMEOUT + Duration::from_secs(2),
        "exited {took:?} after SIGTERM, past --drain-timeout {DRAIN_TIMEOUT:?} plus 2 s; \
         stderr:\n{stderr}"
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: job \"frozen\" did not drain within --drain-timeout {drain}: stopped hard, "
        )),
        "{stderr}"
    );
    // What was cut short: the source's last broker call, named.
    let steps = [
        "committing its offsets",
        "waiting for the group's other subtasks in this process to commit",
        "leaving its consumer group",
        "closing its consumer",
    ];
    assert!(
        steps.iter().any(|step| stderr.contains(&format!(
            "; cut short: kafka source \"orders\" subtask 0 {step}\n"
        ))),
        "{stderr}"
    );
    let report = common::read_report(&dir.join("report.json"));
    assert_eq!(report["outcome"], "failed", "{report}");
    // The source's task, busy in that call, was left behind and named.
    let not_ended = report["tasks_not_ended"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        not_ended.len() == 1 && not_ended[0].as_str().unwrap_or("").starts_with("orders"),
        "{report}"
    );
}
