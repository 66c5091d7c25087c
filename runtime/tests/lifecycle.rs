//! Job lifecycle: finishing, stopping with a drain, failing without a hang.

mod common;

use common::{wait_or_fail, wait_until};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, Operator, Output, Partitioning, PollContext,
    Record, Sink, Source, SourceStatus,
};

/// Never ends on its own; emits as fast as it can.
struct Endless {
    n: u64,
}

impl Source for Endless {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        for _ in 0..ctx.max_records {
            out.emit(Record::new(self.n, 1.0, ctx.now_nanos));
            self.n += 1;
        }
        Ok(SourceStatus::Ready)
    }
}

/// A slow sink: sleeps per batch, so queues upstream fill and senders block.
struct SlowSink {
    seen: Arc<AtomicU64>,
}

impl Sink for SlowSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        self.seen.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        std::thread::sleep(Duration::from_micros(200));
        self.seen.fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Endless sources (parallelism 2) → rebalance → the operator `id` → rebalance → a slow sink,
/// so queues fill and senders block; returns the graph and the sink's record count.
fn endless_into_slow_sink<F>(
    id: &str,
    parallelism: usize,
    operator: F,
) -> (JobGraph, Arc<AtomicU64>)
where
    F: Fn(&tidemark_runtime::SubtaskContext) -> Result<Box<dyn Operator>, BoxError>
        + Send
        + Sync
        + 'static,
{
    let seen = Arc::new(AtomicU64::new(0));
    let mut g = JobGraph::new(id);
    let s = g
        .add_source("s", 2, |_| Ok(Box::new(Endless { n: 0 })))
        .unwrap();
    let op = g.add_operator(id, parallelism, operator).unwrap();
    let seen2 = seen.clone();
    let k = g
        .add_sink("k", 1, move |_| {
            Ok(Box::new(SlowSink {
                seen: seen2.clone(),
            }))
        })
        .unwrap();
    g.connect(s, op, Partitioning::Rebalance).unwrap();
    g.connect(op, k, Partitioning::Rebalance).unwrap();
    (g, seen)
}

#[test]
fn bounded_sources_finish_the_job_after_everything_reached_the_sinks() {
    let mut g = JobGraph::new("bounded");
    let s = g
        .add_source("s", 3, |_| Ok(Box::new(CountingSource::new(5_000))))
        .unwrap();
    let m = g
        .add_operator("m", 2, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let k = g.add_sink("k", 2, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, m, Partitioning::Hash).unwrap();
    g.connect(m, k, Partitioning::Forward).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    let sink_in: u64 = result
        .metrics
        .vertex("k")
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.records_in())
        .sum();
    assert_eq!(sink_in, 15_000);
    assert!(!result.metrics.is_running());
}

#[test]
fn a_stop_drains_what_is_in_flight() {
    let (g, seen) = endless_into_slow_sink("m", 2, |_| Ok(Box::new(MapOperator(|v| v + 1.0))));
    let handle = start(g, JobConfig::default()).unwrap();
    // Let queues fill (the sink is slow), then stop.
    wait_until("50,000 records seen by the slow sink", || {
        seen.load(Ordering::Relaxed) >= 50_000
    });
    handle.stop_handle().stop();
    let result = wait_or_fail(handle, Duration::from_secs(60));
    assert_eq!(result.outcome, JobOutcome::Stopped);
    let m = &result.metrics;
    let emitted: u64 = m
        .vertex("s")
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.records_out())
        .sum();
    let sunk = m.vertex("k").unwrap().subtasks[0].records_in();
    assert!(emitted > 50_000);
    assert_eq!(sunk, emitted, "every emitted record reached the sink");
    assert_eq!(seen.load(Ordering::Relaxed), emitted);
}

/// Panics on its `after`-th record in subtask `in_subtask`.
struct PanicAfter {
    after: u64,
    n: u64,
    armed: bool,
}

impl Operator for PanicAfter {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.n += 1;
        if self.armed && self.n == self.after {
            panic!("boom at record {}", self.n);
        }
        out.emit(record);
        Ok(())
    }
}

#[test]
fn a_panic_fails_the_job_naming_vertex_and_subtask_without_a_hang() {
    // Endless sources, a slow sink: other tasks are blocked on full queues when the panic hits.
    let (g, _) = endless_into_slow_sink("fragile", 3, |ctx| {
        Ok(Box::new(PanicAfter {
            after: 20_000,
            n: 0,
            armed: ctx.subtask == 1,
        }))
    });
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    match result.outcome {
        JobOutcome::Failed(f) => {
            assert_eq!(f.vertex_id, "fragile");
            assert_eq!(f.subtask, 1);
            assert!(f.message.contains("boom at record 20000"), "{}", f.message);
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Returns an error from a sink after some records.
struct FailingSink {
    left: u64,
}

impl Sink for FailingSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        if self.left == 0 {
            return Err("disk full".into());
        }
        self.left -= 1;
        Ok(())
    }
}

#[test]
fn an_error_from_a_chained_sink_names_the_sink() {
    let mut g = JobGraph::new("error");
    let s = g
        .add_source("s", 2, |_| Ok(Box::new(Endless { n: 0 })))
        .unwrap();
    let m = g
        .add_operator("m", 2, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let k = g
        .add_sink("out", 2, |ctx| {
            Ok(Box::new(FailingSink {
                left: if ctx.subtask == 0 { 10_000 } else { u64::MAX },
            }))
        })
        .unwrap();
    g.connect(s, m, Partitioning::Forward).unwrap();
    g.connect(m, k, Partitioning::Forward).unwrap();
    let handle = start(g, JobConfig::default()).unwrap();
    assert_eq!(handle.plan().tasks.len(), 1);
    let result = wait_or_fail(handle, Duration::from_secs(60));
    assert_eq!(
        result.outcome,
        JobOutcome::Failed(tidemark_runtime::TaskFailure {
            vertex_id: "out".into(),
            subtask: 0,
            message: "disk full".into()
        })
    );
}

#[test]
fn a_source_error_fails_the_job_and_a_factory_error_fails_the_start() {
    struct Broken;
    impl Source for Broken {
        fn poll(&mut self, _: &PollContext, _: &mut Output) -> Result<SourceStatus, BoxError> {
            Err("cannot read input".into())
        }
    }
    let mut g = JobGraph::new("source-error");
    let s = g.add_source("in", 1, |_| Ok(Box::new(Broken))).unwrap();
    let k = g.add_sink("k", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, k, Partitioning::Rebalance).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    match result.outcome {
        JobOutcome::Failed(f) => assert_eq!((f.vertex_id.as_str(), f.subtask), ("in", 0)),
        other => panic!("{other:?}"),
    }

    let mut g = JobGraph::new("factory-error");
    let s = g
        .add_source("in", 1, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let k = g.add_sink("k", 2, |ctx| {
        if ctx.subtask == 1 {
            Err("no such directory".into())
        } else {
            Ok(Box::new(DiscardSink))
        }
    });
    g.connect(s, k.unwrap(), Partitioning::Rebalance).unwrap();
    let err = start(g, JobConfig::default()).unwrap_err();
    assert_eq!(err.to_string(), "vertex \"k\" subtask 1: no such directory");
}

#[test]
fn chaining_follows_forward_edges_and_can_be_switched_off() {
    let build = || {
        let mut g = JobGraph::new("plan");
        let s = g
            .add_source("s", 2, |_| Ok(Box::new(CountingSource::new(10))))
            .unwrap();
        let a = g
            .add_operator("a", 2, |_| Ok(Box::new(MapOperator(|v| v))))
            .unwrap();
        let b = g
            .add_operator("b", 1, |_| Ok(Box::new(MapOperator(|v| v))))
            .unwrap();
        let c = g
            .add_operator("c", 1, |_| Ok(Box::new(MapOperator(|v| v))))
            .unwrap();
        let k = g.add_sink("k", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
        g.connect(s, a, Partitioning::Forward).unwrap();
        g.connect(a, b, Partitioning::Rebalance).unwrap();
        g.connect(b, c, Partitioning::Hash).unwrap(); // 1 -> 1: nothing to exchange, chains
        g.connect(c, k, Partitioning::Forward).unwrap();
        g
    };
    let plan = tidemark_runtime::ExecutionPlan::new(&build(), true).unwrap();
    let names: Vec<&str> = plan.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["s+a", "b+c+k"]);
    assert_eq!(plan.edges.len(), 1);
    assert_eq!(plan.edges[0].channels, 2);
    let plan = tidemark_runtime::ExecutionPlan::new(&build(), false).unwrap();
    assert_eq!(plan.tasks.len(), 5);
    assert!(plan.to_dot().starts_with("digraph \"plan\""));
    let result = tidemark_runtime::run(
        build(),
        JobConfig {
            chaining: false,
            ..JobConfig::default()
        },
    )
    .unwrap();
    assert_eq!(
        result.metrics.vertex("k").unwrap().subtasks[0].records_in(),
        20
    );
}

#[test]
fn graph_errors_name_the_vertices() {
    let mut g = JobGraph::new("bad");
    let s = g
        .add_source("s", 2, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let a = g
        .add_operator("a", 3, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let err = g.connect(s, a, Partitioning::Forward).unwrap_err();
    assert!(
        err.to_string().contains("\"s\" has 2 and \"a\" has 3"),
        "{err}"
    );
    assert!(g
        .add_operator("a", 1, |_| Ok(Box::new(MapOperator(|v| v))))
        .is_err());
    assert!(g
        .add_operator("z", 0, |_| Ok(Box::new(MapOperator(|v| v))))
        .is_err());
    let b = g
        .add_operator("b", 3, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    g.connect(a, b, Partitioning::Forward).unwrap();
    g.connect(b, a, Partitioning::Forward).unwrap();
    let err = g.validate().unwrap_err();
    assert!(err.to_string().contains("cycle: a -> b -> a"), "{err}");
}
