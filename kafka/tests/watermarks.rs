//! Per-partition watermarks on the mock cluster: a partition behind in event time holds an
//! event-time window back (and nothing it holds is late), a quiet partition does not after the
//! idle timeout, and a source subtask the group gave no partition does not.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use serde_json::json;
use tidemark_kafka::dev_cluster::Request;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_operators::{BuildEnv, Built, ComponentKind, Registry};
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobHandle, JobOutcome, Partitioning, Record, Sink,
    SourceOptions, WatermarkStrategy,
};

/// The Kafka context of this file's jobs.
fn kafka() -> &'static std::sync::Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<std::sync::Arc<tidemark_kafka::KafkaJob>> =
        std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

/// 2023-11-14T22:13:20Z in ms: event times of the test data start here.
const BASE_MS: i64 = 1_700_000_000_000;
const MS: i64 = 1_000_000;
const KEYS: [&str; 3] = ["a", "b", "c"];
const DEADLINE: Duration = Duration::from_secs(120);

/// One message: its partition, key and event time (ms).
#[derive(Clone, Copy)]
struct Message {
    partition: i32,
    key: &'static str,
    ts_ms: i64,
}

/// `n` messages for `partition`, event times `start_ms + i * step_ms`, keys cycling through
/// [`KEYS`].
fn messages(partition: i32, start_ms: i64, step_ms: i64, n: i64) -> Vec<Message> {
    (0..n)
        .map(|i| Message {
            partition,
            key: KEYS[i as usize % KEYS.len()],
            ts_ms: start_ms + i * step_ms,
        })
        .collect()
}

/// Writes every message as `{"k": key, "ts": ms}` to its partition, in order.
fn produce(bootstrap: &str, topic: &str, messages: &[Message]) {
    send(&testing::producer(bootstrap), topic, messages);
}

fn send(producer: &ThreadedProducer<DefaultProducerContext>, topic: &str, messages: &[Message]) {
    for m in messages {
        let value = json!({"k": m.key, "ts": m.ts_ms}).to_string();
        let record = BaseRecord::to(topic)
            .partition(m.partition)
            .payload(&value)
            .key(m.key);
        testing::send_retrying(producer, record, Duration::from_millis(1));
    }
    testing::flush(producer);
}

/// (key, window start ms) → count: what a 1 s tumbling event-time window must give.
fn reference(messages: &[Message]) -> BTreeMap<(String, i64), u64> {
    let mut counts = BTreeMap::new();
    for m in messages {
        let start = m.ts_ms - m.ts_ms.rem_euclid(1_000);
        *counts.entry((m.key.to_owned(), start)).or_insert(0) += 1;
    }
    counts
}

/// Keeps every window result it is given.
struct Collect(Arc<Mutex<Vec<serde_json::Value>>>);

impl Sink for Collect {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        let event: serde_json::Value = serde_json::from_str(&record.event_json())?;
        self.0.lock().unwrap().push(event);
        Ok(())
    }
}

fn windows(results: &Mutex<Vec<serde_json::Value>>) -> BTreeMap<(String, i64), u64> {
    let mut out = BTreeMap::new();
    for w in results.lock().unwrap().iter() {
        let key = (
            w["key"].as_str().unwrap().to_owned(),
            w["window_start"].as_i64().unwrap(),
        );
        assert_eq!(w["window_end"].as_i64(), Some(key.1 + 1_000), "{w}");
        let previous = out.insert(key, w["n"].as_u64().unwrap());
        assert!(previous.is_none(), "a window fired twice: {w}");
    }
    out
}

/// kafka (`source_parallelism` subtasks) → hash → 1 s tumbling event-time window counting per
/// key → a collecting sink; returns the running job and what the sink got.
fn start_job(
    bootstrap: &str,
    topic: &str,
    source_id: &str,
    source_parallelism: usize,
    idleness: Option<Duration>,
) -> (JobHandle, Arc<Mutex<Vec<serde_json::Value>>>) {
    let group = format!("{source_id}-group");
    let job = Instance {
        kafka: kafka(),
        source_id,
        group: &group,
    };
    start_job_in(job, bootstrap, topic, source_parallelism, idleness)
}

/// Where a job of [`start_job_in`] runs: its Kafka context (one per process, as an instance
/// of `tidemark run`), its source's id and group.
#[derive(Clone, Copy)]
struct Instance<'a> {
    kafka: &'a Arc<tidemark_kafka::KafkaJob>,
    source_id: &'a str,
    group: &'a str,
}

/// [`start_job`] in a Kafka context and group of the caller's.
fn start_job_in(
    instance: Instance<'_>,
    bootstrap: &str,
    topic: &str,
    source_parallelism: usize,
    idleness: Option<Duration>,
) -> (JobHandle, Arc<Mutex<Vec<serde_json::Value>>>) {
    let source_id = instance.source_id;
    let mut graph = JobGraph::new("watermarks");
    let source = instance
        .kafka
        .build_source(json!({
            "brokers": bootstrap,
            "topics": [topic],
            "group": instance.group,
            "key": "k",
            "timestamp": "ts",
            "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        }))
        .unwrap();
    let Built::Operator(window) = Registry::builtin()
        .build(
            ComponentKind::Operator,
            "window",
            json!({"size": "1s", "time": "event", "aggregates": {"n": "count"}}),
            &BuildEnv::default(),
        )
        .unwrap()
    else {
        panic!("window is an operator")
    };
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = results.clone();
    let src = graph
        .add_source(source_id, source_parallelism, source)
        .unwrap();
    graph.set_source_options(
        src,
        SourceOptions {
            timestamp_check: None,
            watermarks: Some(WatermarkStrategy {
                max_out_of_orderness: Duration::ZERO,
                interval: Duration::from_millis(10),
                idleness,
            }),
        },
    );
    let win = graph.add_operator("per_key", 2, window).unwrap();
    let out = graph
        .add_sink("out", 1, move |_| Ok(Box::new(Collect(r.clone()))))
        .unwrap();
    graph.connect(src, win, Partitioning::Hash).unwrap();
    graph.connect(win, out, Partitioning::Rebalance).unwrap();
    (start(graph, JobConfig::default()).unwrap(), results)
}

/// The watermark of the source vertex: the highest over its subtasks (each never goes back).
fn source_watermark(handle: &JobHandle, source_id: &str) -> i64 {
    handle
        .metrics()
        .vertex(source_id)
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.watermark())
        .max()
        .unwrap()
}

/// Waits until `done` holds, failing with `what` after [`DEADLINE`].
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < DEADLINE, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The windows whose last instant a watermark `wm` (ns) has reached.
fn fired_by(reference: &BTreeMap<(String, i64), u64>, wm: i64) -> BTreeMap<(String, i64), u64> {
    reference
        .iter()
        .filter(|((_, start), _)| (start + 1_000) * MS - 1 <= wm)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn stop(handle: JobHandle) {
    handle.stop();
    let result = handle.wait();
    assert_eq!(result.outcome, JobOutcome::Stopped);
}

#[test]
fn a_partition_behind_in_event_time_holds_the_window_back() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("lagging".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    // Partition 0 runs 5 s of event time ahead of partition 1, both in order.
    let fast = messages(0, BASE_MS + 5_000, 50, 400);
    let slow = messages(1, BASE_MS, 50, 400);
    let all: Vec<Message> = fast.iter().chain(&slow).copied().collect();
    produce(&bootstrap, "lagging", &all);
    let reference = reference(&all);
    let slow_last_ns = slow.last().unwrap().ts_ms * MS;

    // One source subtask holds both partitions.
    let (handle, results) = start_job(&bootstrap, "lagging", "lagging", 1, None);
    // Everything read, the source's watermark is the slow partition's: its last timestamp
    // minus 1 ns (no out-of-orderness). Over the whole subtask it would be the fast one's.
    wait_for("the watermark of the slow partition", || {
        source_watermark(&handle, "lagging") == slow_last_ns - 1
            && (0..2).all(|p| kafka().metrics().partition_lag("lagging", "lagging", p) == Some(0))
    });
    // Exactly the windows the slow partition passed have fired, each complete: nothing the
    // slow partition held was late.
    let expected = fired_by(&reference, slow_last_ns - 1);
    assert!(expected.len() > 15 * KEYS.len(), "{}", expected.len());
    wait_for("the windows the slow partition passed", || {
        windows(&results).len() >= expected.len()
    });
    assert_eq!(windows(&results), expected);
    assert_eq!(
        source_watermark(&handle, "lagging"),
        slow_last_ns - 1,
        "nothing moved it past the slow partition"
    );
    // Each partition's own watermark is exported: the slow one 5 s further behind.
    wait_for("both partitions' watermark series", || {
        let m = kafka().metrics();
        match (
            m.partition_watermark("lagging", "lagging", 0),
            m.partition_watermark("lagging", "lagging", 1),
        ) {
            (Some((fast, false)), Some((slow, false))) => (slow - fast - 5.0).abs() < 1e-6,
            _ => false,
        }
    });
    // At the stop every other window fires, complete too.
    stop(handle);
    assert_eq!(windows(&results), reference);
}

#[test]
fn an_idle_partition_does_not_block_window_output() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("quiet".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    // Partition 1 has three messages at the very start, then nothing; partition 0 keeps
    // getting messages (as a live topic does) until the test has seen what it waits for.
    let quiet = messages(1, BASE_MS, 50, 3);
    produce(&bootstrap, "quiet", &quiet);
    let stop_producing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (bootstrap, stop) = (bootstrap.clone(), stop_producing.clone());
        std::thread::spawn(move || {
            let producer = testing::producer(&bootstrap);
            let all = messages(0, BASE_MS, 50, 20_000);
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sent < all.len() {
                send(&producer, "quiet", &all[sent..sent + 10]);
                sent += 10;
                std::thread::sleep(Duration::from_millis(20));
            }
            producer.flush(Duration::from_secs(30)).unwrap();
            all[..sent].to_vec()
        })
    };

    let (handle, results) = start_job(
        &bootstrap,
        "quiet",
        "quiet",
        1,
        Some(Duration::from_secs(2)),
    );
    // Partition 1 holds the watermark below 150 ms until it is idle; then partition 0 alone
    // decides, while partition 0 still runs.
    wait_for("the watermark past the quiet partition", || {
        source_watermark(&handle, "quiet") >= (BASE_MS + 5_000) * MS
    });
    wait_for("partition 1 shown idle, partition 0 not", || {
        let m = kafka().metrics();
        matches!(m.partition_watermark("quiet", "quiet", 1), Some((_, true)))
            && matches!(m.partition_watermark("quiet", "quiet", 0), Some((_, false)))
    });
    stop_producing.store(true, std::sync::atomic::Ordering::Relaxed);
    let busy = producer.join().unwrap();
    let busy_last_ns = busy.last().unwrap().ts_ms * MS;
    wait_for("the watermark of the busy partition's last message", || {
        source_watermark(&handle, "quiet") == busy_last_ns - 1
    });
    let all: Vec<Message> = quiet.iter().chain(&busy).copied().collect();
    let reference = reference(&all);
    let expected = fired_by(&reference, busy_last_ns - 1);
    wait_for("the windows the busy partition passed", || {
        windows(&results).len() >= expected.len()
    });
    assert_eq!(windows(&results), expected);
    stop(handle);
    assert_eq!(windows(&results), reference);
}

#[test]
fn a_subtask_without_a_partition_does_not_block_window_output() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("single".into(), 1)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let all = messages(0, BASE_MS, 50, 200);
    produce(&bootstrap, "single", &all);
    let reference = reference(&all);
    let last_ns = all.last().unwrap().ts_ms * MS;

    // Two source subtasks, one partition, no idle timeout: the subtask the group gives nothing
    // is idle all the same, so the window fires while the job runs.
    let (handle, results) = start_job(&bootstrap, "single", "single", 2, None);
    let expected = fired_by(&reference, last_ns - 1);
    wait_for("the windows of the only partition", || {
        windows(&results).len() >= expected.len()
    });
    assert_eq!(windows(&results), expected);
    stop(handle);
    assert_eq!(windows(&results), reference);
}

/// The window subtasks' records dropped as late.
fn late_dropped(handle: &JobHandle) -> u64 {
    handle
        .metrics()
        .vertex("per_key")
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.late_records_dropped())
        .sum()
}

#[test]
fn a_partition_handed_back_while_commits_cannot_be_read_resumes_at_the_commit() {
    // Instance a gives a partition to instance b, which reads on and commits; b leaves and the
    // partition comes back to a while the group coordinator cannot serve commits (it is still
    // loading, for longer than a waits in a rebalance). a still has the position it left when
    // it gave the partition up, and librdkafka's cached end of the partition from then. Started
    // there, a would read b's records again (late, or counted twice); taken for caught up, the
    // partition would go idle and let event time pass the records written to it meanwhile.
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("handed_back".into(), 2)],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let topic = "handed_back";
    let first: Vec<Message> = messages(0, BASE_MS, 50, 40)
        .into_iter()
        .chain(messages(1, BASE_MS, 50, 40))
        .collect();
    produce(&bootstrap, topic, &first);

    // Instance a holds both partitions and reads them to their end.
    let group = "handed-back-group";
    let (a_kafka, b_kafka) = (
        tidemark_kafka::KafkaJob::new(),
        tidemark_kafka::KafkaJob::new(),
    );
    let a = Instance {
        kafka: &a_kafka,
        source_id: "a",
        group,
    };
    let (a_job, a_results) =
        start_job_in(a, &bootstrap, topic, 1, Some(Duration::from_millis(500)));
    wait_for("a read both partitions", || {
        (0..2).all(|p| a_kafka.metrics().partition_lag("a", topic, p) == Some(0))
    });
    // Instance b joins and takes one of them; a commits it at its end when it gives it up.
    let b = Instance {
        kafka: &b_kafka,
        source_id: "b",
        group,
    };
    let (b_job, b_results) =
        start_job_in(b, &bootstrap, topic, 1, Some(Duration::from_millis(500)));
    let moved = {
        let mut moved = None;
        wait_for("b holds a partition a gave up", || {
            let held = |k: &tidemark_kafka::KafkaJob, id: &str| -> Vec<i32> {
                (0..2)
                    .filter(|p| k.metrics().partition_lag(id, topic, *p).is_some())
                    .collect()
            };
            match (
                held(&a_kafka, "a").as_slice(),
                held(&b_kafka, "b").as_slice(),
            ) {
                ([kept], [taken]) if kept != taken => {
                    moved = Some((*kept, *taken));
                    true
                }
                _ => false,
            }
        });
        moved.unwrap()
    };
    let (kept, handed) = moved;

    // b reads records of key "y" on the partition it took, older than a's event time, and
    // commits them when it leaves.
    let y: Vec<Message> = (0..40)
        .map(|i| Message {
            partition: handed,
            key: "y",
            ts_ms: BASE_MS + 100 + i * 20,
        })
        .collect();
    produce(&bootstrap, topic, &y);
    wait_for("b read the y records", || {
        b_kafka.metrics().partition_lag("b", topic, handed) == Some(0)
            && late_dropped(&b_job) == 0
            && source_watermark(&b_job, "b") >= (y.last().unwrap().ts_ms - 1) * MS
    });
    // The coordinator cannot serve the group's commits for a while; b leaves, handing its
    // partition back to a.
    let loading = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 100_000];
    cluster.refuse_next(Request::OffsetFetch, &loading).unwrap();
    cluster.track_requests().unwrap();
    stop(b_job);
    // Meanwhile the handed-back partition gets records of key "z" 2 s later, and the kept one
    // records far later still: were the handed-back partition idle, a's event time would run
    // past the "z" records before they were read.
    let z: Vec<Message> = (0..40)
        .map(|i| Message {
            partition: handed,
            key: "z",
            ts_ms: BASE_MS + 2_000 + i * 50,
        })
        .collect();
    produce(&bootstrap, topic, &z);
    // a asks for the group's commit of the partition it was given back.
    wait_for("a asking where to start the handed-back partition", || {
        cluster.requests_seen(Request::OffsetFetch).unwrap() > 0
    });
    let later = messages(kept, BASE_MS + 20_000, 50, 40);
    produce(&bootstrap, topic, &later);
    // Longer than a waits for the coordinator in a rebalance, and many idle timeouts: a's event
    // time stays below the "z" records.
    std::thread::sleep(Duration::from_secs(8));
    let held_back = source_watermark(&a_job, "a");
    cluster.serve_again(Request::OffsetFetch).unwrap();
    assert!(
        held_back < (BASE_MS + 2_000) * MS,
        "event time moved past the handed-back partition before its start was known: watermark \
         {} ms after the first z record",
        (held_back - (BASE_MS + 2_000) * MS) / MS
    );
    // Once read, every "z" window is complete, no "y" record was read again and nothing was
    // late.
    wait_for("a read the z records", || {
        a_kafka.metrics().partition_lag("a", topic, handed) == Some(0)
            && source_watermark(&a_job, "a") >= (z.last().unwrap().ts_ms - 1) * MS
    });
    assert_eq!(late_dropped(&a_job), 0, "records dropped as late");
    stop(a_job);
    let of_key = |results: &Mutex<Vec<serde_json::Value>>, key: &str| {
        windows(results)
            .into_iter()
            .filter(|((k, _), _)| k == key)
            .collect::<BTreeMap<(String, i64), u64>>()
    };
    assert_eq!(of_key(&a_results, "z"), reference(&z));
    assert_eq!(of_key(&b_results, "y"), reference(&y));
    assert_eq!(
        of_key(&a_results, "y"),
        BTreeMap::new(),
        "a read b's records again"
    );
}
