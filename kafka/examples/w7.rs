//! Benchmark W7 (`docs/performance.md`, "W7"; `docs/kafka.md`): messages/s through kafka →
//! filter (keeps all) → kafka at P = 2 on the mock cluster, against a bare rdkafka
//! consume-and-produce loop with the same client settings over the same input, in the same run;
//! and the marker p99 at the sink with markers every 10 ms.
//!
//! ```sh
//! cargo run --release -p tidemark-kafka --example w7            # 200,000 messages, 1 round
//! W7_MESSAGES=200000 W7_ROUNDS=9 cargo run --release -p tidemark-kafka --example w7
//! W7_VARIANTS=tidemark-chained perf record -e cpu-clock -g target/release/examples/w7  # one variant
//! ```
//!
//! Each round runs three variants one after the other, each in a consumer group of its own
//! reading the whole preloaded topic and writing a topic of its own:
//!
//! - `bare-rdkafka`: two threads, each a consumer of one group and a producer, copying messages;
//! - `tidemark-chained`: source → filter → sink with forward edges, so all three run in one task
//!   per subtask and a marker never waits in a queue (its p99 says little);
//! - `tidemark-rebalance`: the filter behind a `rebalance` edge, so records and markers cross
//!   from the source task to the filter+sink task through a channel: the marker p99 of a job
//!   whose vertices do not all chain.
//!
//! Throughput is counted from the first message read (at the sink, for Tidemark) until the output
//! topic holds all n (acknowledged writes, asked every 10 ms), so the consumer group's join (3 s on the mock, more when its rebalance race strikes: see
//! `docs/kafka.md`, "Group membership") is reported apart as `join_seconds`. All consumers use
//! `session.timeout.ms` 6000 and `heartbeat.interval.ms` 500. Every run is bounded by the
//! message count and a 10-minute guard.
//!
//! Prints one line per run, `workload=W7 round=… variant=… messages=… join_seconds=…
//! seconds=… msg_per_s=… middle_msg_per_s=… marker_p99_ms=… cpu_us_per_msg=…
//! loop_cpu_us_per_msg=…`, then per round the ratios to the bare loop of the `middle` rates: 10 %
//! to 90 % of the messages in the output topic, the steady state without the join and the
//! stragglers (at 200,000 messages the whole run is well under a second, so a rebalance of the
//! mock's, 5 s with these settings, swamps `msg_per_s`; `NaN` when a stall put both marks within
//! two polls), and of the CPU per message. `cpu_us_per_msg` is the whole process's CPU over the
//! run, group join and mock cluster included (10 ms ticks); `loop_cpu_us_per_msg` only the
//! threads that move the messages: the bare loop's two, Tidemark's task threads (librdkafka's
//! own threads are in neither). Each mark's time is interpolated between the two polls of the
//! output topic around it. Last, one `stat=summary` line per Tidemark variant: the median and
//! quartiles of the per-round ratios over all rounds, how many runs stalled (over 1 s from the
//! first message to the last, where a run takes 0.1–0.3 s: the mock's SyncGroup race, see
//! `docs/kafka.md`, "Group membership"), the same over the rounds where neither the bare loop
//! nor the variant stalled, and the median marker p99.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::json;
use tidemark_kafka::{testing, DevCluster, DevClusterOptions};
use tidemark_operators::{BuildEnv, Built, ComponentKind, Registry};
use tidemark_runtime::{start, JobConfig, JobGraph, Partitioning};

/// The Kafka context of this file's jobs.
fn kafka() -> &'static std::sync::Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<std::sync::Arc<tidemark_kafka::KafkaJob>> =
        std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

const GUARD: Duration = Duration::from_secs(600);
const SESSION_TIMEOUT_MS: &str = "6000";
const HEARTBEAT_MS: &str = "500";

/// One run's numbers.
struct Run {
    join: f64,
    seconds: f64,
    /// Seconds from 10 % to 90 % of the messages in the output topic.
    middle: f64,
    marker_p99: Option<f64>,
    /// CPU seconds of the threads that move the messages: the bare loop's two threads, or
    /// Tidemark's task threads (librdkafka's own threads not included).
    loop_cpu: f64,
}

/// CPU seconds of the whole process so far (every thread, ended ones too), from
/// `/proc/self/stat` (clock ticks of 10 ms).
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

/// CPU seconds of one thread (`/proc/.../schedstat`: nanoseconds on a CPU).
fn thread_cpu(schedstat: &str) -> f64 {
    std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// CPU seconds of this process's live threads whose name holds `#` (Tidemark's tasks).
fn task_threads_cpu() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.contains('#')))
        .map(|t| thread_cpu(&t.path().join("schedstat").to_string_lossy()))
        .sum()
}

fn main() {
    let env = |k: &str, d: u64| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    // The mock keeps 5 MB per partition: 200,000 W6-like events (~3 MB per partition) is about
    // the most it holds; more would be dropped from the log's start and the run never end.
    let n = env("W7_MESSAGES", 200_000);
    let rounds = env("W7_ROUNDS", 1);
    // `W7_VARIANTS=bare-rdkafka,tidemark-chained` runs only those (e.g. to profile one).
    let wanted = std::env::var("W7_VARIANTS").unwrap_or_default();
    let runs = |v: &str| wanted.is_empty() || wanted.split(',').any(|w| w.trim() == v);
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![("in".into(), 4)],
        ..DevClusterOptions::default()
    })
    .expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers().to_owned();
    eprintln!("w7: preloading {n} messages into a 4-partition topic on {bootstrap}");
    preload(&bootstrap, n);

    // Per variant, per round: (middle seconds, whole-run seconds, marker p99 s).
    let mut all: [Vec<(f64, f64, Option<f64>)>; 3] = Default::default();
    for round in 1..=rounds {
        let mut results = Vec::new();
        let mut cpus = Vec::new();
        for variant in ["bare-rdkafka", "tidemark-chained", "tidemark-rebalance"] {
            if !runs(variant) {
                results.push(f64::NAN);
                cpus.push(f64::NAN);
                all[results.len() - 1].push((f64::NAN, f64::NAN, None));
                continue;
            }
            let out = format!("out-{variant}-{round}");
            cluster.create_topic(&out, 4).expect("output topic");
            let group = format!("w7-{variant}-{round}");
            let cpu_before = process_cpu();
            let run = match variant {
                "bare-rdkafka" => bare_loop(&bootstrap, &group, &out, n),
                "tidemark-chained" => tidemark_job(&bootstrap, &group, &out, n, false),
                _ => tidemark_job(&bootstrap, &group, &out, n, true),
            };
            let cpu = process_cpu() - cpu_before;
            let p99 = run
                .marker_p99
                .map_or("-".to_owned(), |p| format!("{:.3}", p * 1e3));
            println!(
                "workload=W7 round={round} variant={variant} parallelism=2 messages={n} \
                 join_seconds={:.2} seconds={:.3} msg_per_s={:.0} middle_msg_per_s={:.0} \
                 marker_p99_ms={p99} cpu_us_per_msg={:.3} loop_cpu_us_per_msg={:.3}",
                run.join,
                run.seconds,
                n as f64 / run.seconds,
                0.8 * n as f64 / run.middle,
                cpu * 1e6 / n as f64,
                run.loop_cpu * 1e6 / n as f64,
            );
            results.push(run.middle);
            cpus.push(cpu);
            all[results.len() - 1].push((run.middle, run.seconds, run.marker_p99));
        }
        println!(
            "workload=W7 round={round} stat=ratio_middle chained_over_bare={:.3} \
             rebalance_over_bare={:.3}",
            results[0] / results[1],
            results[0] / results[2]
        );
        // The bare loop's CPU per message over Tidemark's (whole process, mock cluster
        // included): the throughput ratio a machine with no spare core would give.
        println!(
            "workload=W7 round={round} stat=ratio_cpu chained_over_bare={:.3} \
             rebalance_over_bare={:.3}",
            cpus[0] / cpus[1],
            cpus[0] / cpus[2]
        );
    }
    summary(&all);
}

/// A run that took this long from its first message to its last stalled: it moves 200,000
/// messages in 0.1–0.3 s, and a rebalance of the mock's takes `session.timeout.ms` − 1 s (the
/// SyncGroup race of its first join: `docs/kafka.md`, "Group membership").
const STALLED_SECONDS: f64 = 1.0;

/// Median, first and third quartile of `v` (NaN values left out).
fn quartiles(v: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    (
        at(0.5).unwrap_or(f64::NAN),
        at(0.25).unwrap_or(f64::NAN),
        at(0.75).unwrap_or(f64::NAN),
    )
}

/// One line per Tidemark variant over all rounds: how many runs stalled (the bare loop's and
/// the variant's), the median (and quartiles) of the per-round ratios to the bare loop over all
/// rounds and over the rounds where neither stalled, and the median marker p99.
fn summary(all: &[Vec<(f64, f64, Option<f64>)>; 3]) {
    let stalled = |r: &(f64, f64, Option<f64>)| r.1 > STALLED_SECONDS;
    let bare = &all[0];
    for (i, variant) in [(1, "tidemark-chained"), (2, "tidemark-rebalance")] {
        let runs = &all[i];
        if runs.iter().all(|r| r.1.is_nan()) || bare.iter().all(|r| r.1.is_nan()) {
            continue;
        }
        let ratios: Vec<f64> = bare.iter().zip(runs).map(|(b, t)| b.0 / t.0).collect();
        let steady: Vec<f64> = bare
            .iter()
            .zip(runs)
            .filter(|(b, t)| !stalled(b) && !stalled(t))
            .map(|(b, t)| b.0 / t.0)
            .collect();
        let (median, q1, q3) = quartiles(&ratios);
        let (steady_median, steady_q1, steady_q3) = quartiles(&steady);
        let p99: Vec<f64> = runs.iter().filter_map(|r| r.2).map(|p| p * 1e3).collect();
        println!(
            "workload=W7 stat=summary variant={variant} rounds={} stalled_bare={} \
             stalled={} ratio_median={median:.3} ratio_q1={q1:.3} ratio_q3={q3:.3} \
             steady_rounds={} steady_ratio_median={steady_median:.3} \
             steady_ratio_q1={steady_q1:.3} steady_ratio_q3={steady_q3:.3} \
             marker_p99_ms_median={:.3}",
            runs.len(),
            bare.iter().filter(|r| stalled(r)).count(),
            runs.iter().filter(|r| stalled(r)).count(),
            steady.len(),
            quartiles(&p99).0,
        );
    }
}

/// W6-like events: an id, a user, an amount, a status.
fn preload(bootstrap: &str, n: u64) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    let mut value = String::new();
    for id in 0..n {
        value.clear();
        use std::fmt::Write as _;
        let _ = write!(
            value,
            r#"{{"id":{id},"user":"u{}","value":{},"status":"paid"}}"#,
            id % 1000,
            id % 500
        );
        let key = (id % 1000).to_string();
        let record = BaseRecord::to("in").payload(&value).key(&key);
        testing::send_retrying(&producer, record, Duration::from_micros(200));
    }
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// Waits until the output topic holds `n` messages (acknowledged writes: the sum of its
/// partitions' high watermarks), asking every 10 ms; returns the seconds from 10 % to 90 % of
/// them (the steady state: no group join, no stragglers; each mark's time interpolated between
/// the two polls around it; NaN when both marks fell within two polls) and the seconds since
/// `started`. The
/// same end for every variant, and no consumer close in it (on the mock a close may wait for a
/// rebalance: `docs/kafka.md`, "Group membership").
fn wait_written(bootstrap: &str, out: &str, n: u64, started: Instant) -> (f64, f64) {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let (mut t10, mut t90) = (None, None);
    // The previous poll: when, and how many were written then.
    let mut before: Option<(f64, u64)> = None;
    let mut polls = 0u32;
    loop {
        let written: i64 = (0..4)
            .map(|p| {
                client
                    .fetch_watermarks(out, p, Duration::from_secs(10))
                    .map(|(_, high)| high)
                    .unwrap_or(0)
            })
            .sum();
        let now = started.elapsed().as_secs_f64();
        let written = written.max(0) as u64;
        // When the count crossed `mark`, between the previous poll and this one (linear
        // between the two: the rate within 10 ms is steady), not when the poll saw it.
        // The first poll has nothing before it: a mark it already sees is taken as seen now.
        let crossed = |mark: f64| match before {
            Some((t0, w0)) if written > w0 => {
                t0 + (now - t0) * ((mark - w0 as f64) / (written - w0) as f64).clamp(0.0, 1.0)
            }
            _ => now,
        };
        polls += 1;
        if t10.is_none() && written * 10 >= n {
            t10 = Some((crossed(n as f64 * 0.1), polls));
        }
        if t90.is_none() && written * 10 >= n * 9 {
            t90 = Some((crossed(n as f64 * 0.9), polls));
        }
        before = Some((now, written));
        if written >= n || started.elapsed() > GUARD {
            let ((t10, p10), (t90, p90)) = (t10.unwrap_or((0.0, 0)), t90.unwrap_or((now, polls)));
            // Both marks seen by one poll or two in a row (a stall before 10 %, then
            // everything at once): the steady state was not seen, so there is no rate to give.
            let middle = if p90 - p10 < 2 { f64::NAN } else { t90 - t10 };
            return (middle, now);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Nanoseconds since `since`, at least 1 (0 means "not yet").
fn nanos(since: Instant) -> u64 {
    (since.elapsed().as_nanos() as u64).max(1)
}

/// Two threads, each a consumer in one group and a producer: read, write the payload as it
/// is, until the group has read `n` messages.
fn bare_loop(bootstrap: &str, group: &str, out: &str, n: u64) -> Run {
    let done = Arc::new(AtomicU64::new(0));
    let first = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let loop_cpu_ns = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let (bootstrap, group, out) = (bootstrap.to_owned(), group.to_owned(), out.to_owned());
            let (done, first) = (done.clone(), first.clone());
            let loop_cpu_ns = loop_cpu_ns.clone();
            std::thread::spawn(move || {
                let consumer: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("group.id", &group)
                    .set("partition.assignment.strategy", "cooperative-sticky")
                    .set("auto.offset.reset", "earliest")
                    .set("enable.auto.offset.store", "false")
                    .set("session.timeout.ms", SESSION_TIMEOUT_MS)
                    .set("heartbeat.interval.ms", HEARTBEAT_MS)
                    .set("client.id", format!("{group}-{i}"))
                    .create()
                    .unwrap();
                consumer.subscribe(&["in"]).unwrap();
                let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .set("linger.ms", "5")
                    .create()
                    .unwrap();
                while done.load(Ordering::Relaxed) < n && started.elapsed() < GUARD {
                    let Some(Ok(m)) = consumer.poll(Duration::from_millis(10)) else {
                        continue;
                    };
                    let _ = first.compare_exchange(
                        0,
                        nanos(started),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    let key = m.key().unwrap_or_default();
                    let mut record = BaseRecord::to(&out)
                        .payload(m.payload().unwrap_or_default())
                        .key(key);
                    if let Some(ts) = m.timestamp().to_millis() {
                        record = record.timestamp(ts);
                    }
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((_, back)) => {
                                record = back;
                                std::thread::sleep(Duration::from_micros(200));
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                let cpu = thread_cpu("/proc/thread-self/schedstat");
                loop_cpu_ns.fetch_add((cpu * 1e9) as u64, Ordering::Relaxed);
                producer.flush(Duration::from_secs(60)).unwrap();
            })
        })
        .collect();
    let (middle, last) = wait_written(bootstrap, out, n, started);
    for t in threads {
        t.join().unwrap();
    }
    let first = first.load(Ordering::Relaxed) as f64 / 1e9;
    Run {
        join: first,
        seconds: last - first,
        middle,
        marker_p99: None,
        loop_cpu: loop_cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
    }
}

/// kafka → filter (keeps all) → kafka at P = 2, markers every 10 ms; the filter behind a
/// rebalance edge when `cross`. Returns the join time, the seconds from the first record at the
/// sink until the output topic holds all n, and the sinks' marker p99 in seconds.
fn tidemark_job(bootstrap: &str, group: &str, out: &str, n: u64, cross: bool) -> Run {
    let mut graph = JobGraph::new("w7");
    let source = kafka()
        .build_source(json!({
            "brokers": bootstrap,
            "topics": ["in"],
            "group": group,
            "start": "earliest",
            "properties": {
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            },
        }))
        .unwrap();
    let Built::Operator(filter) = Registry::builtin()
        .build(
            ComponentKind::Operator,
            "filter",
            json!({"where": "status == \"paid\""}),
            &BuildEnv::default(),
        )
        .unwrap()
    else {
        unreachable!("filter is an operator")
    };
    let sink = kafka()
        .build_sink(json!({"brokers": bootstrap, "topic": out}))
        .unwrap();
    let src = graph.add_source("in", 2, source).unwrap();
    let keep = graph.add_operator("filter", 2, filter).unwrap();
    let sink = graph.add_sink("out", 2, sink).unwrap();
    let edge = if cross {
        Partitioning::Rebalance
    } else {
        Partitioning::Forward
    };
    graph.connect(src, keep, edge).unwrap();
    graph.connect(keep, sink, Partitioning::Forward).unwrap();
    let mut config = JobConfig::default();
    config.latency.interval = Duration::from_millis(10);
    let started = Instant::now();
    let handle = start(graph, config).unwrap();
    let sunk = |h: &tidemark_runtime::JobHandle| -> u64 {
        h.metrics()
            .vertex("out")
            .unwrap()
            .subtasks
            .iter()
            .map(|s| s.records_in())
            .sum()
    };
    let mut first = None;
    while first.is_none() && started.elapsed() < GUARD {
        if sunk(&handle) > 0 {
            first = Some(started.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (middle, last) = wait_written(bootstrap, out, n, started);
    let loop_cpu = task_threads_cpu();
    let text = tidemark_runtime::exporter::render_text(handle.metrics()).unwrap();
    if let Ok(path) = std::env::var("W7_METRICS") {
        let _ = std::fs::write(format!("{path}.{group}"), &text);
    }
    handle.stop();
    let _ = handle.wait();
    let p99 = text
        .lines()
        .filter(|l| {
            l.starts_with("tidemark_marker_latency_window_seconds{")
                && l.contains("operator_id=\"out\"")
                && l.contains("quantile=\"0.99\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let first = first.unwrap_or(last);
    Run {
        join: first,
        seconds: last - first,
        middle,
        marker_p99: p99,
        loop_cpu,
    }
}
