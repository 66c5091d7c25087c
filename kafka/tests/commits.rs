//! A checkpoint's commit never holds up the task (`docs/kafka.md`, "Checkpoints and
//! commits"): the `kafka` source commits without waiting while the job runs, so a commit
//! issued while its consumer owes the group an answer (a rebalance it has not served yet)
//! cannot wait for that answer. librdkafka's synchronous commit did: it never returned on the
//! mock cluster with a generator in front of an exchange (docs/performance.md, "W7 with a
//! window behind an exchange").

mod common;

use common::{kafka, now_nanos};

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tidemark_kafka::{
    testing, DevCluster, DevClusterOptions, KafkaSource, KafkaSourceConfig, KafkaSourceFactory,
};
use tidemark_runtime::{Output, PollContext, Source};

const N: u64 = 400;
const GROUP: &str = "commits-group";

/// Polls `source` once; returns the records it emitted.
fn poll(source: &mut KafkaSource) -> u64 {
    let mut out = Output::with_capacity(64);
    let ctx = PollContext {
        now_nanos: now_nanos(),
        max_records: 64,
    };
    source.poll(&ctx, &mut out).unwrap();
    out.len() as u64
}

#[test]
fn a_checkpoint_commit_while_a_rebalance_waits_for_the_subtask_returns_at_once() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 4)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    common::produce_ids(&bootstrap, "in", 0..N);
    let config: KafkaSourceConfig = serde_json::from_value(serde_json::json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": GROUP,
        "start": "earliest",
        "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    }))
    .unwrap();
    let factory = KafkaSourceFactory::new(config, kafka()).unwrap();
    let make = |subtask| common::checkpointing_subtask(&factory, "commits", subtask);

    // `a` alone holds all four partitions and reads every message.
    let mut a = make(0);
    let mut read = 0;
    common::until("a has read every message", || {
        read += poll(&mut a);
        read == N
    });
    a.snapshot(1).unwrap();

    // `b` joins. Its rebalance takes two partitions from `a`, which has to answer in a poll;
    // `a` does not poll now (its task is busy), so the group waits for it.
    let (tx, rx) = mpsc::channel();
    let mut b = make(1);
    let joiner = std::thread::spawn(move || {
        let started = Instant::now();
        while b.assigned().is_empty() && started.elapsed() < Duration::from_secs(120) {
            poll(&mut b);
            std::thread::sleep(Duration::from_millis(5));
        }
        tx.send(b.assigned().len()).unwrap();
        b
    });
    // Long enough for the group to reach `a` (the mock's rebalance starts at b's JoinGroup and
    // the next heartbeat of `a`, every 500 ms), short of the 6 s session timeout.
    std::thread::sleep(Duration::from_secs(3));

    // The checkpoint completes now, as the runtime says it (`checkpoint_complete`, on the
    // task's thread). It must return without waiting for the group: the call is made on a
    // thread of its own and given the whole --kafka-timeout; before, it never returned.
    let (done_tx, done_rx) = mpsc::channel();
    let committer = std::thread::spawn(move || {
        a.checkpoint_complete(1).unwrap();
        done_tx.send(()).unwrap();
        a
    });
    done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the checkpoint's commit waited for the group: it never returned");
    let mut a = committer.join().unwrap();

    // Then `a` serves the rebalance in its polls and `b` gets its two partitions. The commit
    // was refused while the group rebalanced; `a` makes it again for the partitions it kept,
    // and it lands: the group holds their end. (The two that moved are `b`'s now: it reads
    // them from the group's last commit, at least once, as after any rebalance.)
    let mut b_held = None;
    common::until("b to get its partitions", || {
        poll(&mut a);
        b_held = rx.try_recv().ok().or(b_held);
        b_held.is_some()
    });
    assert_eq!(b_held, Some(2), "b got no partition");
    assert_eq!(a.assigned().len(), 2);
    let kept: Vec<i32> = a.assigned().iter().map(|(_, p)| *p).collect();
    common::until("a's commit to land", || {
        poll(&mut a);
        let offsets = testing::committed_and_end(&bootstrap, GROUP, "in", 4);
        kept.iter()
            .all(|p| offsets[*p as usize].0 == offsets[*p as usize].1)
    });
    // The broker's answer reaches the source in a poll: counted then.
    common::until("the commit to be counted", || {
        poll(&mut a);
        kafka().metrics().commits("in") >= 1
    });
    let b = joiner.join().unwrap();
    drop(a);
    drop(b);
}
