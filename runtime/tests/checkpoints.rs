//! At-least-once checkpoints: barriers go down every channel, vertices forward them once every
//! input delivered them, sinks flush and acknowledge, and a source commits checkpoint `n` only
//! when everything it emitted before barrier `n` has reached the sinks.

mod common;

use common::{wait_or_fail, wait_until, DEADLINE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_runtime::testing::MapOperator;
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, Output, Partitioning, PollContext, Record, Sink, Source,
    SourceStatus,
};

#[derive(Default)]
struct Shared {
    /// Records every sink subtask has flushed (counted at flush, as a durable sink would).
    flushed: AtomicU64,
    written: AtomicU64,
    flushes: AtomicU64,
    /// (checkpoint, records emitted before its barrier, sunk when it completed) per commit.
    commits: Mutex<Vec<(u64, u64, u64)>>,
    emitted: AtomicU64,
}

/// Emits 50 records per poll, forever, with a short pause; remembers positions per barrier.
struct NumberSource {
    shared: Arc<Shared>,
    next: u64,
    enabled: bool,
    snapshots: Vec<(u64, u64)>,
}

impl NumberSource {
    fn boxed(shared: &Arc<Shared>) -> Box<dyn Source> {
        Box::new(NumberSource {
            shared: shared.clone(),
            next: 0,
            enabled: false,
            snapshots: Vec::new(),
        })
    }
}

impl Source for NumberSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        for _ in 0..50 {
            out.emit(Record::new(self.next, 1.0, ctx.now_nanos));
            self.next += 1;
        }
        self.shared.emitted.fetch_add(50, Ordering::SeqCst);
        Ok(SourceStatus::Idle {
            until: Some(ctx.now_nanos + 200_000),
        })
    }

    fn enable_checkpoints(&mut self) {
        self.enabled = true;
    }

    fn snapshot(&mut self, n: u64) -> Result<(), BoxError> {
        assert!(self.enabled);
        self.snapshots.push((n, self.next));
        Ok(())
    }

    fn checkpoint_complete(&mut self, n: u64) -> Result<(), BoxError> {
        let (_, position) = *self
            .snapshots
            .iter()
            .find(|(m, _)| *m == n)
            .expect("a completed checkpoint was snapshotted");
        let sunk = self.shared.flushed.load(Ordering::SeqCst);
        self.shared
            .commits
            .lock()
            .unwrap()
            .push((n, position, sunk));
        Ok(())
    }
}

struct CountingSink {
    shared: Arc<Shared>,
    pending: u64,
}

impl CountingSink {
    fn boxed(shared: &Arc<Shared>) -> Box<dyn Sink> {
        Box::new(CountingSink {
            shared: shared.clone(),
            pending: 0,
        })
    }
}

impl Sink for CountingSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        self.pending += 1;
        self.shared.written.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BoxError> {
        self.shared.flushes.fetch_add(1, Ordering::SeqCst);
        self.shared
            .flushed
            .fetch_add(self.pending, Ordering::SeqCst);
        self.pending = 0;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        self.flush()
    }
}

#[test]
fn a_source_commits_only_what_every_sink_flushed() {
    let shared = Arc::new(Shared::default());
    let mut graph = JobGraph::new("checkpoints");
    let s = shared.clone();
    let src = graph
        .add_source("numbers", 1, move |_| Ok(NumberSource::boxed(&s)))
        .unwrap();
    let op = graph
        .add_operator("same", 3, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let s = shared.clone();
    let sink = graph
        .add_sink("out", 2, move |_| Ok(CountingSink::boxed(&s)))
        .unwrap();
    graph.connect(src, op, Partitioning::Rebalance).unwrap();
    graph.connect(op, sink, Partitioning::Rebalance).unwrap();
    let config = JobConfig {
        checkpoint_interval: Some(Duration::from_millis(5)),
        ..JobConfig::default()
    };
    let handle = start(graph, config).unwrap();
    wait_until("5 completed checkpoints", || {
        handle.checkpoints().completed_total() >= 5
    });
    handle.stop();
    let result = wait_or_fail(handle, DEADLINE);
    let commits = shared.commits.lock().unwrap().clone();
    assert!(commits.len() >= 2, "{commits:?}");
    // With one source subtask, every record before barrier n was flushed by some sink when n
    // completed: the commit never runs ahead of the sinks.
    for (n, position, sunk) in &commits {
        assert!(
            position <= sunk,
            "checkpoint {n}: position {position} > flushed {sunk}"
        );
    }
    // Commits come in order, and the last one (the stop's own checkpoint) covers everything.
    assert!(commits
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    let emitted = shared.emitted.load(Ordering::SeqCst);
    assert_eq!(commits.last().unwrap().1, emitted);
    assert_eq!(shared.written.load(Ordering::SeqCst), emitted);
    assert!(shared.flushes.load(Ordering::SeqCst) > 0);
    let completed = result.checkpoints.completed_total();
    assert!(completed >= 5);
    let text = tidemark_runtime::exporter::render_text(&result.metrics).unwrap();
    assert!(
        text.contains(&format!(
            "tidemark_checkpoints_completed_total{{job_name=\"checkpoints\"}} {completed}\n"
        )),
        "{text}"
    );
    assert!(text.contains(
        "tidemark_checkpoint_duration_seconds_bucket{job_name=\"checkpoints\",le=\"+Inf\"}"
    ));
}

/// A sink whose flush (at each barrier) takes 30 ms: a slow store.
struct SlowFlushSink;

impl Sink for SlowFlushSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BoxError> {
        std::thread::sleep(Duration::from_millis(30));
        Ok(())
    }
}

/// Checkpoints slower than the interval are skipped, not piled up: never more in flight than
/// `max_concurrent`, whatever the interval.
#[test]
fn a_store_slower_than_the_interval_makes_checkpoints_rarer_never_more_in_flight() {
    for max_concurrent in [1, 3] {
        let shared = Arc::new(Shared::default());
        let mut graph = JobGraph::new("slow-store");
        let s = shared.clone();
        let src = graph
            .add_source("numbers", 2, move |_| Ok(NumberSource::boxed(&s)))
            .unwrap();
        let sink = graph
            .add_sink("out", 1, |_| Ok(Box::new(SlowFlushSink)))
            .unwrap();
        graph.connect(src, sink, Partitioning::Rebalance).unwrap();
        let config = JobConfig {
            checkpoint_interval: Some(Duration::from_millis(1)),
            checkpoint_policy: tidemark_runtime::checkpoint::CheckpointPolicy {
                max_concurrent,
                ..Default::default()
            },
            ..JobConfig::default()
        };
        let handle = start(graph, config).unwrap();
        wait_until("5 completed checkpoints", || {
            handle.checkpoints().completed_total() >= 5
        });
        handle.stop();
        let result = wait_or_fail(handle, DEADLINE);
        let c = &result.checkpoints;
        assert!(c.skipped_total() > 0, "max_concurrent {max_concurrent}");
        // The stop's own last barrier may come on top of those in flight.
        assert!(
            c.most_in_flight() <= max_concurrent + 1,
            "max_concurrent {max_concurrent}: {} in flight at once",
            c.most_in_flight()
        );
    }
}

#[test]
fn without_an_interval_there_are_no_barriers() {
    let shared = Arc::new(Shared::default());
    let mut graph = JobGraph::new("plain");
    let s = shared.clone();
    let src = graph
        .add_source("numbers", 1, move |_| Ok(NumberSource::boxed(&s)))
        .unwrap();
    let s = shared.clone();
    let sink = graph
        .add_sink("out", 1, move |_| Ok(CountingSink::boxed(&s)))
        .unwrap();
    graph.connect(src, sink, Partitioning::Rebalance).unwrap();
    let handle = start(graph, JobConfig::default()).unwrap();
    wait_until("1000 records written by the sink", || {
        shared.written.load(Ordering::SeqCst) >= 1000
    });
    handle.stop();
    let result = wait_or_fail(handle, DEADLINE);
    assert!(shared.commits.lock().unwrap().is_empty());
    // Only finish flushed.
    assert_eq!(shared.flushes.load(Ordering::SeqCst), 1);
    let text = tidemark_runtime::exporter::render_text(&result.metrics).unwrap();
    assert!(!text.contains("tidemark_checkpoint"));
}

/// Emits `total` records and finishes; counts the calls that keep its connections alive while
/// its subtask waits for the last checkpoint.
struct FinishingSource {
    total: u64,
    next: u64,
    done: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
}

impl Source for FinishingSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.next == self.total {
            self.done.store(true, Ordering::SeqCst);
            return Ok(SourceStatus::Finished);
        }
        for _ in 0..50 {
            out.emit(Record::new(self.next, 1.0, ctx.now_nanos));
            self.next += 1;
        }
        Ok(SourceStatus::Ready)
    }

    fn serve_while_finishing(&mut self) -> Result<(), BoxError> {
        assert!(
            self.done.load(Ordering::SeqCst),
            "served before it finished"
        );
        self.served.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Acknowledges a barrier that arrives after its source finished only once that source has
/// been served while it waits (so the last checkpoint cannot complete without it).
struct PatientSink {
    done: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
}

impl Sink for PatientSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BoxError> {
        if !self.done.load(Ordering::SeqCst) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        while self.served.load(Ordering::SeqCst) == 0 {
            if started.elapsed() > DEADLINE {
                return Err(
                    "the source was not served while it waited for its last checkpoint".into(),
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

#[test]
fn a_source_waiting_for_its_last_checkpoint_is_served_meanwhile() {
    let (done, served) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut graph = JobGraph::new("finishing");
    let (d, s) = (done.clone(), served.clone());
    let src = graph
        .add_source("numbers", 1, move |_| {
            Ok(Box::new(FinishingSource {
                total: 500,
                next: 0,
                done: d.clone(),
                served: s.clone(),
            }) as Box<dyn Source>)
        })
        .unwrap();
    let (d, s) = (done.clone(), served.clone());
    // Two sink subtasks: not chained to the source (a sink in the source's thread would wait
    // for it in that thread).
    let sink = graph
        .add_sink("out", 2, move |_| {
            Ok(Box::new(PatientSink {
                done: d.clone(),
                served: s.clone(),
            }) as Box<dyn Sink>)
        })
        .unwrap();
    graph.connect(src, sink, Partitioning::Rebalance).unwrap();
    let config = JobConfig {
        checkpoint_interval: Some(Duration::from_secs(3600)),
        ..JobConfig::default()
    };
    let handle = start(graph, config).unwrap();
    let result = wait_or_fail(handle, DEADLINE);
    assert!(served.load(Ordering::SeqCst) > 0);
    // The last checkpoint (the only one: the interval is an hour) completed.
    assert_eq!(result.checkpoints.completed_total(), 1);
}
