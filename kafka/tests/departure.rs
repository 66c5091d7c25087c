//! The `kafka` source subtasks of one group in a process leave the group together, once each
//! has made its last commit (`docs/kafka.md`, "Stopping"): a member leaving starts a
//! rebalance, and the group refuses commits until it ends, so a subtask that left as soon as it
//! was done held up the last commits of the others (one rebalance each, on the mock cluster
//! `session.timeout.ms` less 1 s), which with two instances stopped at once took longer than
//! `--drain-timeout`.

mod common;

use common::{kafka, now_nanos};

use std::time::{Duration, Instant};

use rdkafka::topic_partition_list::Offset;
use tidemark_kafka::{
    testing, DevCluster, DevClusterOptions, KafkaSource, KafkaSourceConfig, KafkaSourceFactory,
    Request, Start,
};
use tidemark_runtime::{Output, PollContext, Source, SubtaskContext};

const N: u64 = 200;
const GROUP: &str = "departure-group";

/// The group's committed offset of each partition of `in`.
fn committed(bootstrap: &str) -> Vec<i64> {
    let (_, committed) = testing::committed_offsets(bootstrap, GROUP, "in", 2);
    committed
        .into_iter()
        .map(|offset| match offset {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

#[test]
fn a_stopped_subtask_leaves_the_group_only_with_the_others_after_their_last_commit() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    common::produce_ids(&bootstrap, "in", 0..N);
    let config: KafkaSourceConfig = serde_json::from_value(serde_json::json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": GROUP,
        "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    }))
    .unwrap();
    assert_eq!(config.start, Start::Committed);
    let factory = KafkaSourceFactory::new(config, kafka()).unwrap();
    let make = |subtask| common::checkpointing_subtask(&factory, "departure", subtask);
    let (mut a, mut b): (KafkaSource, KafkaSource) = (make(0), make(1));

    // Both read until every message is in, each from a partition of its own.
    let read = read_until_both_have_read_all(&mut a, &mut b);
    assert_eq!(read.iter().sum::<u64>(), N);

    cluster.track_requests().unwrap();
    // `a` commits its last checkpoint and is dropped (its task ended) while `b` has not
    // committed yet.
    a.snapshot_positions(1);
    a.commit_checkpoint(1).unwrap();
    b.snapshot_positions(1);
    let leaving = std::thread::spawn(move || drop(a));
    // Time enough for `a` to leave, had it not waited for `b`.
    std::thread::sleep(Duration::from_secs(1));
    let leaves = || cluster.requests_seen(Request::LeaveGroup).unwrap();
    let commits = || cluster.requests_seen(Request::OffsetCommit).unwrap();
    assert_eq!(
        leaves(),
        0,
        "a subtask left while another still had to commit"
    );
    assert!(!leaving.is_finished());
    // `b`'s commit goes through at once: no rebalance refused it (a refused commit is retried,
    // which would be a third request).
    b.commit_checkpoint(1).unwrap();
    assert_eq!(commits(), 2);
    drop(b);
    leaving.join().unwrap();
    assert_eq!(leaves(), 2, "each subtask leaves the group");
    assert_eq!(committed(&bootstrap).iter().sum::<i64>(), N as i64);
}

#[test]
fn a_subtask_waiting_for_its_last_checkpoint_still_answers_its_groups_rebalance() {
    const GROUP2: &str = "finishing-group";
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    common::produce_ids(&bootstrap, "in", 0..N);
    let config: KafkaSourceConfig = serde_json::from_value(serde_json::json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": GROUP2,
        "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    }))
    .unwrap();
    // Two instances: each process has a Kafka context of its own.
    let (here, there) = (
        tidemark_kafka::KafkaJob::new(),
        tidemark_kafka::KafkaJob::new(),
    );
    let make = |kafka: &std::sync::Arc<tidemark_kafka::KafkaJob>| {
        let factory = KafkaSourceFactory::new(config.clone(), kafka).unwrap();
        let mut source = factory
            .make(&SubtaskContext {
                job_name: "finishing".into(),
                vertex_id: "in".into(),
                subtask: 0,
                parallelism: 1,
                seed: 1,
            })
            .unwrap();
        source.enable_checkpoints();
        source
    };
    let (mut a, mut b): (KafkaSource, KafkaSource) = (make(&here), make(&there));
    let read = read_until_both_have_read_all(&mut a, &mut b);
    let held = a.assigned();
    assert_eq!(held.len(), 1, "{held:?}");
    let mine = held[0].1 as usize;

    // `a` emitted its last record and waits for its last checkpoint to be acknowledged; the
    // other instance stops meanwhile and leaves the group without a commit.
    a.snapshot_positions(1);
    drop(b);
    // The group's rebalance hands `b`'s partition to `a` only if `a` answers it while it
    // waits (as the runtime calls it then); a member that does not is dropped from the group.
    let started = Instant::now();
    while a.assigned().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the waiting subtask did not take part in the rebalance: it holds {:?}",
            a.assigned()
        );
        a.serve_while_finishing().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    // Still a member: its commit goes through, with exactly the positions of the checkpoint;
    // what it polled from the partition it took over while waiting is neither emitted nor
    // committed.
    cluster.track_requests().unwrap();
    a.commit_checkpoint(1).unwrap();
    assert_eq!(
        cluster.requests_seen(Request::OffsetCommit).unwrap(),
        1,
        "the commit was refused and retried"
    );
    let (_, committed) = testing::committed_offsets(&bootstrap, GROUP2, "in", 2);
    let committed: Vec<i64> = committed
        .into_iter()
        .map(|offset| match offset {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect();
    assert_eq!(committed[mine], read[0] as i64, "{committed:?}");
    assert_eq!(committed[1 - mine], -1, "{committed:?}");
    drop(a);
}

/// Polls `a` and `b` in turn until together they have read all `N` messages and each has read
/// some (so each holds a partition); what each read.
fn read_until_both_have_read_all(a: &mut KafkaSource, b: &mut KafkaSource) -> [u64; 2] {
    let mut out = Output::with_capacity(64);
    let mut read = [0u64; 2];
    let started = Instant::now();
    while read.iter().sum::<u64>() < N || read.contains(&0) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "gave up waiting for the messages: {read:?}"
        );
        for (i, source) in [&mut *a, &mut *b].into_iter().enumerate() {
            let ctx = PollContext {
                now_nanos: now_nanos(),
                max_records: 64,
            };
            source.poll(&ctx, &mut out).unwrap();
            read[i] += out.len() as u64;
            out.clear();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    read
}
