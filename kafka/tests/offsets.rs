//! Without checkpoints, the `kafka` source stores its positions for librdkafka's commit timer
//! once per poll rather than once per message (each store takes locks inside librdkafka).
//! What the group commits is still exactly the position after the last message handed to the
//! job: by the timer, when a rebalance takes a partition away (so the next owner neither
//! repeats nor skips a record), and when the source closes.
//!
//! A revocation in the middle of a poll (records of the partition taken earlier in the same
//! poll, positions not yet stored) is handled by storing the consumer's read positions before
//! the hand-over; the test below cannot force that case: librdkafka pauses the partitions,
//! dropping the messages it had queued, before the revocation reaches the source, so it needs
//! the pause to land while a poll is taking messages. The test checks the hand-over wherever
//! the revocation falls.

mod common;

use common::{kafka, now_nanos};

use common::until;

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::topic_partition_list::Offset;
use rdkafka::types::RDKafkaRespErr;
use tidemark_kafka::dev_cluster::Request;
use tidemark_kafka::{
    testing, DevCluster, DevClusterOptions, KafkaSource, KafkaSourceConfig, KafkaSourceFactory,
};
use tidemark_runtime::{Output, PollContext, Source, SubtaskContext};

const GROUP: &str = "offsets-group";

/// The brokers' answer to a commit while the group rebalances.
const REBALANCING: RDKafkaRespErr = RDKafkaRespErr::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;

/// The group's committed offset of partitions 0 and 1 of `in` (-1: none).
fn committed(bootstrap: &str) -> [i64; 2] {
    let (_, committed) = testing::committed_offsets(bootstrap, GROUP, "in", 2);
    let o: Vec<i64> = committed
        .into_iter()
        .map(|offset| match offset {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect();
    [o[0], o[1]]
}

/// What one subtask was handed: how often each id, and per partition the offset of the first
/// one and the offset after the last one (-1: nothing yet). Ids are `p * per + offset`.
struct Taken {
    per: i64,
    ids: BTreeMap<i64, u32>,
    first: [i64; 2],
    position: [i64; 2],
}

impl Taken {
    fn new(per: i64) -> Self {
        Taken {
            per,
            ids: BTreeMap::new(),
            first: [-1, -1],
            position: [-1, -1],
        }
    }

    fn count(&self) -> usize {
        self.ids.values().map(|&n| n as usize).sum()
    }
}

/// Polls `source` once for at most `max` records; notes them in `taken`. Returns how many.
fn poll(source: &mut KafkaSource, max: usize, taken: &mut Taken) -> usize {
    let mut out = Output::with_capacity(max.min(1024));
    let ctx = PollContext {
        now_nanos: now_nanos(),
        max_records: max,
    };
    source.poll(&ctx, &mut out).unwrap();
    for record in out.records() {
        let id = record.get("value").and_then(|v| v.as_i64()).unwrap();
        *taken.ids.entry(id).or_default() += 1;
        let (partition, offset) = ((id / taken.per) as usize, id % taken.per);
        // Records of a partition come in offset order.
        assert!(offset + 1 > taken.position[partition]);
        if taken.first[partition] < 0 {
            taken.first[partition] = offset;
        }
        taken.position[partition] = offset + 1;
    }
    out.len()
}

/// A cluster with `in` of two partitions holding ids `0..per` in partition 0 and
/// `per..2 * per` in partition 1, and a factory of sources in `GROUP` committing every
/// `commit_every_ms` by librdkafka's timer. With `small_fetches`, messages are written in
/// batches of 20 and fetched about a batch per partition at a time, so the two partitions'
/// messages alternate in a consumer's queue.
fn set_up(
    per: i64,
    commit_every_ms: u64,
    small_fetches: bool,
) -> (DevCluster, String, KafkaSourceFactory) {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let messages: Vec<(i32, String, String)> = (0..2 * per)
        .map(|id| {
            let partition = (id / per) as i32;
            (partition, id.to_string(), format!("{{\"value\": {id}}}"))
        })
        .collect();
    let producer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set(
            "batch.num.messages",
            if small_fetches { "20" } else { "10000" },
        )
        .create()
        .unwrap();
    testing::produce(
        &producer,
        "in",
        messages
            .iter()
            .map(|(p, k, v)| (Some(*p), k.as_str(), v.as_str())),
    );
    let config = source_config(&bootstrap, commit_every_ms, small_fetches);
    let factory = KafkaSourceFactory::new(config, kafka()).unwrap();
    (cluster, bootstrap, factory)
}

/// The sources' configuration: group `GROUP` reading `in`, committing every
/// `commit_every_ms` by librdkafka's timer, with small fetches if `small_fetches`.
fn source_config(bootstrap: &str, commit_every_ms: u64, small_fetches: bool) -> KafkaSourceConfig {
    let mut properties = serde_json::json!({
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "auto.commit.interval.ms": commit_every_ms,
    });
    if small_fetches {
        properties["max.partition.fetch.bytes"] = 256.into();
    }
    serde_json::from_value(serde_json::json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": GROUP,
        "properties": properties,
    }))
    .unwrap()
}

fn make(factory: &KafkaSourceFactory, subtask: usize) -> KafkaSource {
    factory
        .make(&SubtaskContext {
            job_name: "offsets".into(),
            vertex_id: "in".into(),
            subtask,
            parallelism: 2,
            seed: 1,
        })
        .unwrap()
}

#[test]
fn the_commit_timer_commits_the_positions_after_the_records_taken() {
    let (_cluster, bootstrap, factory) = set_up(1000, 100, true);
    let mut a = make(&factory, 0);
    let mut taken = Taken::new(1000);
    // Small polls, so most end in the middle of what was fetched.
    until("the first 300 records from both partitions", || {
        poll(&mut a, 7, &mut taken);
        taken.count() >= 300 && taken.position.iter().all(|&p| p > 0)
    });
    let position = taken.position;
    until(
        &format!(
            "commits at {position:?} (committed: {:?})",
            committed(&bootstrap)
        ),
        || committed(&bootstrap) == position,
    );
    // Not polled meanwhile, it does not move on.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(committed(&bootstrap), position);
    // Closing commits where it stands.
    until("the next 300 records", || {
        poll(&mut a, 7, &mut taken);
        taken.count() >= 600
    });
    let position = taken.position;
    drop(a);
    assert_eq!(committed(&bootstrap), position);
}

#[test]
fn a_revoked_partition_is_handed_over_after_the_last_record_taken() {
    hand_over(false);
}

/// The group refuses the hand-over commit made in the revocation (as librdkafka's mock
/// cluster does now and then, when the group is joining again by then): the source's polls
/// make it again.
#[test]
fn a_refused_hand_over_is_made_again_by_the_polls_that_follow() {
    hand_over(true);
}

/// A hand-over the group goes on refusing is given up once `--kafka-timeout` has passed since
/// the first refusal (said on stderr): the source does not try for ever, nor at its close.
#[test]
fn a_hand_over_refused_for_the_kafka_timeout_is_given_up() {
    let per = 3000;
    let (cluster, bootstrap, _) = set_up(per, 600_000, true);
    let job = tidemark_kafka::KafkaJob::new();
    job.set_timeout(Duration::from_secs(2));
    let factory = KafkaSourceFactory::new(source_config(&bootstrap, 600_000, true), &job).unwrap();
    let mut a = make(&factory, 0);
    let mut taken_a = Taken::new(per);
    until("the first records", || {
        poll(&mut a, 5, &mut taken_a);
        taken_a.count() >= 100
    });
    // More refusals than attempts fit in 2 s (one every 200 ms).
    cluster
        .refuse_next(Request::OffsetCommit, &[REBALANCING; 64])
        .unwrap();
    let (mut b, mut taken_b, revoked) = second_takes_a_partition(&factory, &mut a, &mut taken_a);
    assert_eq!(a.hand_overs_waiting(), 1, "the hand-over was refused");
    until("the refused hand-over given up", || {
        poll(&mut a, 5, &mut taken_a);
        poll(&mut b, 5, &mut taken_b);
        a.hand_overs_waiting() == 0
    });
    assert_eq!(
        committed(&bootstrap)[revoked],
        -1,
        "nothing was handed over"
    );
    // The first subtask leaving commits what it holds (its close commit, or librdkafka's
    // commit of the partitions it removes as it leaves), not the hand-over it gave up (the
    // second holds the partition and commits nothing before its close).
    cluster.serve_again(Request::OffsetCommit).unwrap();
    drop(a);
    assert_eq!(committed(&bootstrap)[revoked], -1, "the given-up hand-over");
    assert_eq!(
        committed(&bootstrap)[1 - revoked],
        taken_a.position[1 - revoked],
        "the held partition committed as the first subtask left"
    );
    drop(b);
}

/// A second subtask joins while `a` reads in small polls, until one of `a`'s partitions is
/// revoked: the second subtask, what it took, and the partition revoked.
fn second_takes_a_partition(
    factory: &KafkaSourceFactory,
    a: &mut KafkaSource,
    taken_a: &mut Taken,
) -> (KafkaSource, Taken, usize) {
    let mut b = make(factory, 1);
    let mut taken_b = Taken::new(taken_a.per);
    let rebalances = a.rebalances();
    until("a partition revoked from the first subtask", || {
        poll(a, 5, taken_a);
        poll(&mut b, 5, &mut taken_b);
        a.rebalances() > rebalances
    });
    let kept = a.assigned();
    assert_eq!(kept.len(), 1, "one partition moved: {kept:?}");
    (b, taken_b, 1 - kept[0].1 as usize)
}

/// A second subtask joins the first's group and takes one of its partitions; with `refuse`,
/// the brokers refuse the first two commits (the source's hand-over and librdkafka's commit
/// of the partitions it removes from the assignment).
fn hand_over(refuse: bool) {
    // No timer commit: only the hand-over commit of the revocation and the close commit.
    let per = 3000;
    let (cluster, bootstrap, factory) = set_up(per, 600_000, true);
    let mut a = make(&factory, 0);
    let mut taken_a = Taken::new(per);
    until("the first records", || {
        poll(&mut a, 5, &mut taken_a);
        taken_a.count() >= 100
    });
    assert_eq!(committed(&bootstrap), [-1, -1]);
    if refuse {
        cluster
            .refuse_next(Request::OffsetCommit, &[REBALANCING, REBALANCING])
            .unwrap();
    }

    let (mut b, mut taken_b, revoked) = second_takes_a_partition(&factory, &mut a, &mut taken_a);
    let handed_over = taken_a.position[revoked];
    assert!(
        handed_over > 0 && handed_over < per,
        "revoked part way through: {handed_over}"
    );
    if refuse {
        assert_eq!(a.hand_overs_waiting(), 1, "the hand-over was refused");
    }
    // The hand-over commit, made inside the poll that served the revocation (and by the polls
    // after it, when the group refused it), is the position after the last record taken.
    until(
        &format!("the hand-over commit of partition {revoked} at {handed_over}"),
        || {
            poll(&mut a, 5, &mut taken_a);
            poll(&mut b, 5, &mut taken_b);
            // (Waiting until a poll has served the broker's answer.)
            committed(&bootstrap)[revoked] == handed_over && a.hand_overs_waiting() == 0
        },
    );

    // The new owner resumes there: nothing read twice, nothing skipped.
    until(
        "the new owner's first record of the revoked partition",
        || {
            poll(&mut a, 64, &mut taken_a);
            poll(&mut b, 64, &mut taken_b);
            taken_b.first[revoked] >= 0
        },
    );
    assert_eq!(taken_b.first[revoked], handed_over);
    assert_eq!(taken_a.position[revoked], handed_over);
    // Closing commits where each stands.
    until("the partitions read to the end", || {
        poll(&mut a, 64, &mut taken_a);
        poll(&mut b, 64, &mut taken_b);
        taken_a.position[1 - revoked] == per && taken_b.position[revoked] == per
    });
    drop(a);
    drop(b);
    assert_eq!(committed(&bootstrap), [per, per]);
    assert_eq!(
        taken_a.count() + taken_b.count(),
        2 * per as usize,
        "every record once"
    );
}

/// With checkpoints nothing is committed when a partition moves, so at a cold start (the
/// subtasks of one instance join one by one) the second subtask used to resume at the group's
/// commit, or with none at `start`: it read again what the first had already handed to the
/// job (`docs/kafka.md`, "Failover"). A partition that moves between subtasks of one process
/// resumes exactly where the previous owner stopped. The second subtask is made at a point the
/// test picks, after the first has read part of both partitions.
#[test]
fn with_checkpoints_a_partition_moved_between_local_subtasks_resumes_where_the_first_stopped() {
    let per = 3000;
    let (_cluster, bootstrap, factory) = set_up(per, 600_000, true);
    let mut a = make(&factory, 0);
    a.enable_checkpoints();
    let mut taken_a = Taken::new(per);
    until("the first records of both partitions", || {
        poll(&mut a, 5, &mut taken_a);
        taken_a.count() >= 100 && taken_a.position.iter().all(|&p| p > 0)
    });

    let mut b = make(&factory, 1);
    b.enable_checkpoints();
    let mut taken_b = Taken::new(per);
    let rebalances = a.rebalances();
    until("a partition revoked from the first subtask", || {
        poll(&mut a, 5, &mut taken_a);
        poll(&mut b, 5, &mut taken_b);
        a.rebalances() > rebalances
    });
    let kept = a.assigned();
    assert_eq!(kept.len(), 1, "one partition moved: {kept:?}");
    let revoked = 1 - kept[0].1 as usize;
    let handed_over = taken_a.position[revoked];
    assert!(handed_over > 0, "revoked after records were taken");
    assert_eq!(committed(&bootstrap), [-1, -1], "nothing committed");

    until("the partitions read to the end", || {
        poll(&mut a, 64, &mut taken_a);
        poll(&mut b, 64, &mut taken_b);
        taken_a.position[1 - revoked] == per && taken_b.position[revoked] == per
    });
    assert_eq!(
        taken_b.first[revoked], handed_over,
        "the new owner starts after the last record the first one took"
    );
    assert_eq!(taken_a.position[revoked], handed_over);
    let twice: Vec<i64> = taken_a
        .ids
        .keys()
        .filter(|id| taken_b.ids.contains_key(id))
        .copied()
        .collect();
    assert!(twice.is_empty(), "read twice: {} ids", twice.len());
    assert_eq!(taken_a.count() + taken_b.count(), 2 * per as usize);
}

/// `start: earliest` applies only to partitions without a committed offset: a partition the
/// group committed resumes at the commit when it comes to a subtask that never held it (a
/// restart, or a failover to another instance), instead of being read again from offset 0.
#[test]
fn start_earliest_resumes_a_committed_partition_at_the_commit() {
    let per = 500;
    let (_cluster, bootstrap, _) = set_up(per, 600_000, false);
    let config: KafkaSourceConfig = serde_json::from_value(serde_json::json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": GROUP,
        "start": "earliest",
        "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    }))
    .unwrap();
    let factory = KafkaSourceFactory::new(config, kafka()).unwrap();
    let mut a = make(&factory, 0);
    a.enable_checkpoints();
    let mut taken_a = Taken::new(per);
    until("both partitions read to the end", || {
        poll(&mut a, 64, &mut taken_a);
        taken_a.position == [per, per]
    });
    // A checkpoint covering everything completes: its positions are committed.
    a.snapshot_positions(1);
    a.commit_checkpoint(1).unwrap();
    assert_eq!(committed(&bootstrap), [per, per]);
    drop(a);

    // A subtask that never held the partitions takes them over; more messages arrive.
    let mut b = make(&factory, 1);
    b.enable_checkpoints();
    let producer = testing::producer(&bootstrap);
    let more: Vec<(i32, String, String)> = (0..2)
        .map(|p| {
            let id = 10 * per + p as i64;
            (p, id.to_string(), format!("{{\"value\": {id}}}"))
        })
        .collect();
    for (p, k, v) in &more {
        let record = rdkafka::producer::BaseRecord::to("in")
            .partition(*p)
            .key(k.as_str())
            .payload(v.as_str());
        testing::send_retrying(&producer, record, Duration::from_millis(1));
    }
    testing::flush(&producer);
    let mut ids = Vec::new();
    until("the two new messages", || {
        let mut out = Output::with_capacity(64);
        let ctx = PollContext {
            now_nanos: now_nanos(),
            max_records: 64,
        };
        b.poll(&ctx, &mut out).unwrap();
        ids.extend(
            out.records()
                .iter()
                .map(|r| r.get("value").and_then(|v| v.as_i64()).unwrap()),
        );
        ids.iter().filter(|id| **id >= 10 * per).count() == 2
    });
    ids.sort();
    assert_eq!(
        ids,
        [10 * per, 10 * per + 1],
        "only the new messages: nothing read again from offset 0"
    );
}
