//! Instances of one job (`docs/kafka.md`, "Instance ids" and "Group membership"), through real
//! `tidemark run` processes on a mock cluster the test starts:
//!
//! - without `--instance-id`, each instance is named by its host name and process id: the label
//!   `tidemark_instance`, the peer names of the clock-offset exchange, `/api/v1/job` and the
//!   report all say so, and two instances get distinct names;
//! - SIGTERM leaves the group (a LeaveGroup request per source subtask, none on SIGKILL), so the
//!   others take the partitions over without waiting for a session timeout.
#![cfg(unix)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{http, scrape, Proc, TempDir};
use tidemark_kafka::{DevCluster, DevClusterOptions, Request};

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(150);

fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cluster() -> DevCluster {
    DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 4), ("out".into(), 4)],
        ..DevClusterOptions::default()
    })
    .unwrap()
}

fn job_file(dir: &TempDir, bootstrap: &str, group: &str) -> std::path::PathBuf {
    dir.write(
        "job.yaml",
        &format!(
            "name: kafka-instances
parallelism: 2
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [in]
    group: {group}
    properties: {{session.timeout.ms: 6000, heartbeat.interval.ms: 500}}
sinks:
  copy:
    type: kafka
    input: orders
    brokers: {bootstrap}
    topic: out
"
        ),
    )
}

/// Starts `tidemark run JOB` with `extra` arguments; returns it and its metrics address.
fn instance(dir: &Path, job: &Path, extra: &[&str]) -> (Proc, SocketAddr) {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "run".as_ref(),
        job.as_os_str(),
        "--metrics-addr".as_ref(),
        "127.0.0.1:0".as_ref(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let mut p = Proc::spawn(dir, args);
    let addr = p.metrics_addr();
    (p, addr)
}

fn partitions_held(addr: SocketAddr) -> usize {
    scrape(addr).samples("tidemark_kafka_lag_records").count()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn instances_without_an_id_are_named_by_host_and_process() {
    let cluster = cluster();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("kafka-default-ids");
    let job = job_file(&dir, &bootstrap, "ids");
    let (mut a, addr_a) = instance(dir.path(), &job, &["--report-file", "a.json"]);
    let (mut b, addr_b) = instance(dir.path(), &job, &["--report-file", "b.json"]);
    let host = host_name();
    let id_a = format!("{host}-{}", a.id());
    let id_b = format!("{host}-{}", b.id());
    assert_ne!(id_a, id_b);
    for (addr, me, peer) in [(addr_a, &id_a, &id_b), (addr_b, &id_b, &id_a)] {
        // Every series carries the name.
        let m = scrape(addr);
        let samples: Vec<_> = m.samples("tidemark_records_in_total").collect();
        assert!(!samples.is_empty());
        for s in samples {
            assert_eq!(s.labels.get("tidemark_instance"), Some(me.as_str()));
        }
        // The clock-offset exchange runs under it: each hears the other by its name.
        let labels = [
            ("tidemark_instance", me.as_str()),
            ("peer_instance", peer.as_str()),
        ];
        wait_until("a clock-offset estimate of the peer", || {
            scrape(addr)
                .value("tidemark_clock_offset_seconds", &labels)
                .is_some()
        });
        let job: serde_json::Value =
            serde_json::from_str(&http(addr, "GET", "/api/v1/job").body).unwrap();
        assert_eq!(job["instance"], me.as_str(), "{job}");
    }
    for (p, report, id) in [(&mut a, "a.json", &id_a), (&mut b, "b.json", &id_b)] {
        p.terminate();
        assert_eq!(p.wait_code(), 0, "{}", p.stderr());
        let report: serde_json::Value = serde_json::from_str(&dir.read(report)).unwrap();
        assert_eq!(report["instance"], id.as_str(), "{report}");
    }
}

/// Three instances (six members for four partitions, so one may hold none); one of b and c
/// that holds partitions is killed with SIGKILL: no goodbye, the group finds out after the
/// session timeout and moves its partitions. Only then (the group is stable again: a consumer
/// stopped while the mock cluster holds its JoinGroup in a rebalance can exit before its
/// LeaveGroup is read, docs/kafka.md) the other gets SIGTERM: exactly one LeaveGroup per
/// source subtask, and a takes every partition without a session timeout.
#[test]
fn sigterm_leaves_the_group_and_sigkill_does_not() {
    let cluster = cluster();
    cluster.track_requests().unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = TempDir::new("kafka-leave");
    let job = job_file(&dir, &bootstrap, "leave");
    let (mut a, addr_a) = instance(dir.path(), &job, &["--instance-id", "a"]);
    let (b, addr_b) = instance(dir.path(), &job, &["--instance-id", "b"]);
    let (c, addr_c) = instance(dir.path(), &job, &["--instance-id", "c"]);
    wait_until("the three instances to share the 4 partitions", || {
        let held = [addr_a, addr_b, addr_c].map(partitions_held);
        held.iter().sum::<usize>() == 4 && held.iter().filter(|h| **h > 0).count() >= 2
    });
    // The forced point: the victim holds partitions now.
    let ((mut victim, _), (mut leaver, addr_leaver)) = if partitions_held(addr_c) > 0 {
        ((c, addr_c), (b, addr_b))
    } else {
        ((b, addr_b), (c, addr_c))
    };
    let leaves = || cluster.requests_seen(Request::LeaveGroup).unwrap();
    assert_eq!(leaves(), 0);
    // SIGKILL: no goodbye.
    // SAFETY: kill(2) on our own child.
    assert_eq!(
        unsafe { libc::kill(victim.id() as libc::pid_t, libc::SIGKILL) },
        0
    );
    victim.wait();
    // The group finds out after the session timeout: the victim's partitions move.
    wait_until("a and the other instance to hold the 4 partitions", || {
        let (pa, pl) = (partitions_held(addr_a), partitions_held(addr_leaver));
        pa > 0 && pl > 0 && pa + pl == 4
    });
    assert_eq!(leaves(), 0, "a killed instance says no goodbye");
    // SIGTERM: each of the leaver's two source subtasks sends LeaveGroup before it exits.
    leaver.terminate();
    assert_eq!(leaver.wait_code(), 0, "{}", leaver.stderr());
    wait_until("the two LeaveGroup requests", || leaves() >= 2);
    wait_until("a to hold all 4 partitions", || {
        partitions_held(addr_a) == 4
    });
    assert_eq!(
        leaves(),
        2,
        "one LeaveGroup per source subtask of the leaver"
    );
    a.terminate();
    assert_eq!(a.wait_code(), 0, "{}", a.stderr());
    wait_until("a's two LeaveGroup requests", || leaves() >= 4);
    assert_eq!(leaves(), 4);
}
