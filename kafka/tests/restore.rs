//! One instance with a `kafka` source and a checkpoint directory restores from the directory:
//! each partition is read from the checkpoint's offset, not from the group's commit, whichever
//! subtask the group gives it to, and its event time continues from the checkpoint.

mod common;

use common::until;

use std::collections::BTreeMap;

use tidemark_kafka::{
    testing, DevCluster, DevClusterOptions, KafkaJob, KafkaSource, KafkaSourceConfig,
    KafkaSourceFactory, KafkaSourcePosition,
};
use tidemark_runtime::{state_codec, Output, PollContext, Source, SubtaskContext};

const GROUP: &str = "restore-group";
const PER: i64 = 3000;
const MS: i64 = 1_000_000;

/// The timestamp (ms) of id `id`: falling through partition 0 (its highest is its first
/// record's), rising through partition 1.
fn ts_ms(id: i64) -> i64 {
    let (partition, offset) = (id / PER, id % PER);
    if partition == 0 {
        1_000_000 - offset
    } else {
        2_000_000 + offset
    }
}

/// A cluster with `in` of two partitions, ids `0..PER` in partition 0 and `PER..2*PER` in 1.
fn set_up() -> (DevCluster, KafkaSourceConfig) {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let messages: Vec<(i32, String, String)> = (0..2 * PER)
        .map(|id| {
            let value = format!("{{\"value\": {id}, \"ts\": {}}}", ts_ms(id));
            ((id / PER) as i32, id.to_string(), value)
        })
        .collect();
    testing::produce(
        &testing::producer(&bootstrap),
        "in",
        messages
            .iter()
            .map(|(p, k, v)| (Some(*p), k.as_str(), v.as_str())),
    );
    let config: KafkaSourceConfig = serde_json::from_value(serde_json::json!({
        "brokers": bootstrap,
        "topics": ["in"],
        "group": GROUP,
        "timestamp": "ts",
        "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    }))
    .unwrap();
    (cluster, config)
}

/// Subtask `subtask` of 2 of a source in a new process (its own Kafka context), with
/// checkpointing on.
fn source(
    config: &KafkaSourceConfig,
    kafka: &std::sync::Arc<KafkaJob>,
    subtask: usize,
) -> KafkaSource {
    let factory = KafkaSourceFactory::new(config.clone(), kafka).unwrap();
    let mut source = factory
        .make(&SubtaskContext {
            job_name: "restore".into(),
            vertex_id: "in".into(),
            subtask,
            parallelism: 2,
            seed: 1,
        })
        .unwrap();
    source.enable_checkpoints();
    source
}

/// Polls `source` once; counts each id it hands over in `taken`, and returns how many.
fn poll(source: &mut KafkaSource, max: usize, taken: &mut BTreeMap<i64, u32>) -> usize {
    let mut out = Output::with_capacity(max);
    let now_nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    source
        .poll(
            &PollContext {
                now_nanos,
                max_records: max,
            },
            &mut out,
        )
        .unwrap();
    for record in out.records() {
        let id = record.get("value").and_then(|v| v.as_i64()).unwrap();
        assert_eq!(record.timestamp, ts_ms(id) * MS, "{id}");
        *taken.entry(id).or_default() += 1;
    }
    out.len()
}

#[test]
fn a_restored_source_reads_from_the_checkpoint_not_the_group_commit() {
    let (_cluster, config) = set_up();
    let mut before = BTreeMap::new();

    // The first run: one subtask reads part of both partitions; checkpoint 1 is taken there
    // and completes (its offsets committed), then checkpoint 2 further on completes too, so
    // the group's commit lies past checkpoint 1. Then the process dies.
    let first_kafka = KafkaJob::new();
    let mut a = source(&config, &first_kafka, 0);
    until("records from both partitions", || {
        poll(&mut a, 7, &mut before);
        let partitions = before
            .keys()
            .map(|id| id / PER)
            .collect::<std::collections::BTreeSet<_>>();
        before.len() >= 150 && partitions.len() == 2
    });
    a.snapshot(1).unwrap();
    let position = a.position(1).unwrap();
    a.checkpoint_complete(1).unwrap();
    let at_checkpoint = before.clone();
    let mut lost = BTreeMap::new();
    until("records after the checkpoint", || {
        poll(&mut a, 64, &mut lost);
        lost.len() >= 1500
    });
    a.snapshot(2).unwrap();
    a.checkpoint_complete(2).unwrap();
    drop(a);

    // What the position says: per partition, the offset after the last id taken and the
    // highest timestamp read.
    let recorded: KafkaSourcePosition = state_codec::decode(&position).unwrap();
    assert_eq!(recorded.partitions.len(), 2, "{recorded:?}");
    for p in &recorded.partitions {
        let ids: Vec<i64> = at_checkpoint
            .keys()
            .copied()
            .filter(|id| id / PER == p.partition as i64)
            .collect();
        assert_eq!(p.offset, ids.iter().max().unwrap() % PER + 1, "{p:?}");
        let highest = ids.iter().map(|&id| ts_ms(id)).max().unwrap() * MS;
        assert_eq!(p.highest_timestamp, Some(highest), "{p:?}");
    }

    // The restored run, subtask 0 alone first: it is given both partitions and reads them
    // from the checkpoint's offsets (the group's commit lies past them).
    let kafka = KafkaJob::new();
    let mut b0 = source(&config, &kafka, 0);
    b0.resume(&position).unwrap();
    let mut after = BTreeMap::new();
    until("the first records after the restore", || {
        poll(&mut b0, 1, &mut after);
        after.len() >= 50
    });
    for p in 0..2 {
        let first = after.keys().find(|id| *id / PER == p);
        let recorded = recorded.partitions.iter().find(|r| r.partition as i64 == p);
        if let (Some(first), Some(recorded)) = (first, recorded) {
            assert_eq!(first % PER, recorded.offset, "partition {p}");
        }
    }
    // Partition 0's event time went on from the checkpoint: its highest timestamp is still the
    // one recorded (its later records are older), which this run did not read itself.
    let now: KafkaSourcePosition = state_codec::decode(&b0.position(3).unwrap()).unwrap();
    let highest = |p: &KafkaSourcePosition| {
        p.partitions
            .iter()
            .find(|p| p.partition == 0)
            .map(|p| p.highest_timestamp)
    };
    assert_eq!(highest(&now), highest(&recorded));

    // Subtask 1 joins while subtask 0 reads slowly: a partition moves to it part way, and it
    // goes on where subtask 0 stopped, not at the group's commit. Every id after the
    // checkpoint comes exactly once.
    let mut b1 = source(&config, &kafka, 1);
    let err = b1.resume(&position[..1]).unwrap_err().to_string();
    assert!(
        err.contains("kafka source \"in\"") && err.contains("damaged"),
        "{err}"
    );
    let rebalances = b0.rebalances();
    until("a partition moved to subtask 1", || {
        poll(&mut b0, 1, &mut after);
        poll(&mut b1, 1, &mut after);
        b0.rebalances() > rebalances && b1.assigned().len() == 1
    });
    let left = (2 * PER) as usize - at_checkpoint.len();
    until("the rest of both partitions", || {
        poll(&mut b0, 64, &mut after);
        poll(&mut b1, 64, &mut after);
        after.values().sum::<u32>() as usize >= left
    });
    // Nothing more comes.
    for _ in 0..20 {
        poll(&mut b0, 64, &mut after);
        poll(&mut b1, 64, &mut after);
    }
    let mut all = at_checkpoint.clone();
    for (id, n) in &after {
        *all.entry(*id).or_default() += n;
    }
    let expected: BTreeMap<i64, u32> = (0..2 * PER).map(|id| (id, 1)).collect();
    assert_eq!(
        all, expected,
        "every id once, before and after the checkpoint"
    );

    // Each partition's position is at its end, in whichever subtask holds it.
    let ends: Vec<KafkaSourcePosition> = [&mut b0, &mut b1]
        .map(|s| state_codec::decode(&s.position(4).unwrap()).unwrap())
        .into();
    let mut ends: Vec<(i32, i64)> = ends
        .iter()
        .flat_map(|p| &p.partitions)
        .map(|p| (p.partition, p.offset))
        .collect();
    ends.sort_unstable();
    assert_eq!(ends, [(0, PER), (1, PER)]);
}
