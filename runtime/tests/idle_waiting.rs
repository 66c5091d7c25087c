//! How tasks wait when they have nothing to do (`JobConfig::idle_strategy`): a quiet job still
//! emits markers and delivers them, a record after a long quiet spell gets through, a stop or
//! an abort ends a quiet job, and both strategies give the same results.
//!
//! Nothing here measures time: the sleeps only make the job quiet for a while, and every wait
//! has a deadline that turns a hang into a failure.

mod common;

use common::{wait_or_fail, wait_until, PacedSource};
use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::markers::{Granularity, LatencyConfig};
use tidemark_runtime::testing::MapOperator;
use tidemark_runtime::{
    start, BoxError, IdleStrategy, JobConfig, JobGraph, JobOutcome, Operator, Output, Partitioning,
    PollContext, Record, Sink, Source, SourceStatus,
};

const STRATEGIES: [IdleStrategy; 2] = [IdleStrategy::Park, IdleStrategy::Spin];
const LIMIT: Duration = Duration::from_secs(60);

/// Emits the keys the test sends, as they come; idle (with no time to come back) while there
/// are none; finished when the test drops its sender.
struct QuietSource {
    rx: Option<Receiver<u64>>,
}

impl Source for QuietSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let Some(rx) = &self.rx else {
            return Ok(SourceStatus::Finished);
        };
        loop {
            match rx.try_recv() {
                Ok(k) => out.emit(Record::new(k, k as f64, ctx.now_nanos)),
                Err(TryRecvError::Empty) if out.is_empty() => {
                    return Ok(SourceStatus::Idle { until: None })
                }
                Err(TryRecvError::Empty) => return Ok(SourceStatus::Ready),
                Err(TryRecvError::Disconnected) => {
                    return Ok(if out.is_empty() {
                        SourceStatus::Finished
                    } else {
                        SourceStatus::Ready
                    })
                }
            }
        }
    }
}

type Seen = Arc<Mutex<Vec<(u64, f64)>>>;

/// Keeps every record's key and value.
struct CollectSink(Seen);

impl Sink for CollectSink {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        let (k, v) = record.numeric_parts().ok_or("not numeric")?;
        self.0.lock().unwrap().push((k as u64, v));
        Ok(())
    }
}

/// Sums values per key and emits the sums at the end of input.
#[derive(Default)]
struct SumPerKey(HashMap<u64, f64>);

impl Operator for SumPerKey {
    fn process(&mut self, record: Record, _out: &mut Output) -> Result<(), BoxError> {
        let (k, v) = record.numeric_parts().ok_or("not numeric")?;
        *self.0.entry(k as u64).or_default() += v;
        Ok(())
    }

    fn finish(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        for (&k, &sum) in &self.0 {
            out.emit(Record::new(k, sum, now_nanos));
        }
        Ok(())
    }
}

fn config(strategy: IdleStrategy) -> JobConfig {
    JobConfig {
        idle_strategy: strategy,
        latency: LatencyConfig {
            interval: Duration::from_millis(5),
            granularity: Granularity::Operator,
            ..LatencyConfig::default()
        },
        ..JobConfig::default()
    }
}

/// quiet source → map (P=2, hash: a task that waits on its queue) → collecting sink.
fn quiet_job() -> (JobGraph, Sender<u64>, Seen) {
    let (tx, rx) = mpsc::channel();
    let rx = Mutex::new(Some(rx));
    let seen: Seen = Arc::default();
    let sink_seen = seen.clone();
    let mut g = JobGraph::new("quiet");
    let s = g
        .add_source("s", 1, move |_| {
            Ok(Box::new(QuietSource {
                rx: rx.lock().unwrap().take(),
            }))
        })
        .unwrap();
    let m = g
        .add_operator("m", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0 + 1.0))))
        .unwrap();
    let k = g
        .add_sink("k", 1, move |_| {
            Ok(Box::new(CollectSink(sink_seen.clone())))
        })
        .unwrap();
    g.connect(s, m, Partitioning::Hash).unwrap();
    g.connect(m, k, Partitioning::Rebalance).unwrap();
    (g, tx, seen)
}

#[test]
fn a_quiet_job_emits_markers_and_a_record_after_a_long_quiet_spell_gets_through() {
    for strategy in STRATEGIES {
        let (g, tx, seen) = quiet_job();
        let handle = start(g, config(strategy)).unwrap();
        let metrics = handle.metrics().clone();
        // Nothing to read: markers still leave the source on schedule and reach the sink
        // through the tasks waiting on their queues.
        wait_until("markers from a quiet source at the sink", || {
            metrics.markers_emitted() >= 10 && metrics.markers_received_by_sinks() >= 5
        });
        assert!(seen.lock().unwrap().is_empty(), "{strategy}");
        tx.send(7).unwrap();
        wait_until("the first record at the sink", || {
            seen.lock().unwrap().len() == 1
        });
        // Quiet again for a while, then one more record.
        std::thread::sleep(Duration::from_millis(300));
        tx.send(8).unwrap();
        wait_until("the second record at the sink", || {
            seen.lock().unwrap().len() == 2
        });
        drop(tx);
        let result = wait_or_fail(handle, LIMIT);
        assert_eq!(result.outcome, JobOutcome::Finished, "{strategy}");
        assert_eq!(*seen.lock().unwrap(), [(7, 15.0), (8, 17.0)], "{strategy}");
    }
}

#[test]
fn a_stop_or_an_abort_ends_a_quiet_job() {
    for strategy in STRATEGIES {
        for abort in [false, true] {
            let (g, tx, _seen) = quiet_job();
            let handle = start(g, config(strategy)).unwrap();
            let metrics = handle.metrics().clone();
            wait_until("the job to be waiting", || metrics.markers_emitted() >= 3);
            if abort {
                handle.abort();
            } else {
                handle.stop();
            }
            let result = wait_or_fail(handle, LIMIT);
            let expected = if abort {
                JobOutcome::Aborted
            } else {
                JobOutcome::Stopped
            };
            assert_eq!(result.outcome, expected, "{strategy}, abort {abort}");
            drop(tx);
        }
    }
}

#[test]
fn both_idle_strategies_give_the_same_results() {
    let mut results = Vec::new();
    for strategy in STRATEGIES {
        let seen: Seen = Arc::default();
        let sink_seen = seen.clone();
        let mut g = JobGraph::new("paced");
        // 2 subtasks × 100 batches of 5 records, a batch every 300 µs: the sources are idle
        // between batches, the map and the sums wait on their queues.
        let s = g
            .add_source("s", 2, |_| {
                Ok(Box::new(PacedSource::new(
                    100,
                    5,
                    Duration::from_micros(300),
                    |n| n % 7,
                )))
            })
            .unwrap();
        let m = g
            .add_operator("m", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0 + 1.0))))
            .unwrap();
        let r = g
            .add_operator("r", 2, |_| Ok(Box::new(SumPerKey::default())))
            .unwrap();
        let k = g
            .add_sink("k", 1, move |_| {
                Ok(Box::new(CollectSink(sink_seen.clone())))
            })
            .unwrap();
        g.connect(s, m, Partitioning::Forward).unwrap();
        g.connect(m, r, Partitioning::Hash).unwrap();
        g.connect(r, k, Partitioning::Rebalance).unwrap();
        let result = wait_or_fail(start(g, config(strategy)).unwrap(), LIMIT);
        assert_eq!(result.outcome, JobOutcome::Finished, "{strategy}");
        let mut sums = seen.lock().unwrap().clone();
        sums.sort_by_key(|&(k, _)| k);
        results.push(sums);
    }
    // Each subtask emits n = 0..500 with key n % 7 and value n; the map makes it 2n + 1.
    let mut expected: Vec<(u64, f64)> = (0..7).map(|k| (k, 0.0)).collect();
    for n in 0..500u64 {
        expected[(n % 7) as usize].1 += 2.0 * (2 * n + 1) as f64;
    }
    assert_eq!(results[0], expected, "park");
    assert_eq!(results[1], expected, "spin");
}
