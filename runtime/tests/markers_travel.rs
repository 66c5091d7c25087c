//! How latency markers travel: conservation, spreading over hash edges, ordering with records,
//! recording in every chained operator.

mod common;

use common::{wait_or_fail, PacedSource};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tidemark_runtime::markers::{Granularity, LatencyConfig, ManualClock};
use tidemark_runtime::testing::{DiscardSink, MapOperator};
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, MetricsRegistry, Output, Partitioning,
    PollContext, Record, Sink, Source, SourceStatus, VertexKind,
};

fn marker_config(interval: Duration, granularity: Granularity) -> JobConfig {
    JobConfig {
        latency: LatencyConfig {
            interval,
            granularity,
            history_size: NonZeroUsize::new(128).unwrap(),
        },
        seed: Some(7),
        ..JobConfig::default()
    }
}

fn paced(
    batches: u64,
) -> impl Fn(&tidemark_runtime::SubtaskContext) -> Result<Box<dyn Source>, BoxError> {
    move |_| {
        Ok(Box::new(PacedSource::new(
            batches,
            50,
            Duration::from_micros(300),
            |n| n % 97,
        )))
    }
}

/// The sinks' counts add up to exactly the markers emitted, on a graph with rebalance, hash,
/// broadcast and union edges and parallelism up to 4.
#[test]
fn markers_are_conserved_across_every_partitioning() {
    for granularity in Granularity::ALL {
        let mut g = JobGraph::new("conservation");
        let s1 = g.add_source("s1", 2, paced(60)).unwrap();
        let s2 = g.add_source("s2", 1, paced(80)).unwrap();
        let a = g
            .add_operator("a", 3, |_| Ok(Box::new(MapOperator(|v| v + 1.0))))
            .unwrap();
        let b = g
            .add_operator("b", 4, |_| Ok(Box::new(MapOperator(|v| v * 2.0))))
            .unwrap();
        let c = g
            .add_operator("c", 2, |_| Ok(Box::new(MapOperator(|v| v))))
            .unwrap();
        let k1 = g.add_sink("k1", 4, |_| Ok(Box::new(DiscardSink))).unwrap();
        let k2 = g.add_sink("k2", 3, |_| Ok(Box::new(DiscardSink))).unwrap();
        g.connect(s1, a, Partitioning::Rebalance).unwrap();
        g.connect(s2, b, Partitioning::Hash).unwrap();
        g.connect(a, c, Partitioning::Rebalance).unwrap(); // c is a union of a and b
        g.connect(b, c, Partitioning::Hash).unwrap();
        g.connect(c, k1, Partitioning::Broadcast).unwrap();
        g.connect(a, k2, Partitioning::Forward).unwrap();
        let handle = start(g, marker_config(Duration::from_micros(200), granularity)).unwrap();
        let result = wait_or_fail(handle, Duration::from_secs(120));
        assert_eq!(result.outcome, JobOutcome::Finished);
        let m = &result.metrics;
        let emitted = m.markers_emitted();
        assert!(emitted > 10, "the sources emitted only {emitted} markers");
        assert_eq!(
            m.markers_received_by_sinks(),
            emitted,
            "granularity {granularity}"
        );
        // Records: broadcast copies records (not markers) to each of k1's 4 subtasks.
        let records_in = |id: &str| -> u64 {
            m.vertex(id)
                .unwrap()
                .subtasks
                .iter()
                .map(|s| s.records_in())
                .sum()
        };
        let produced = 2 * 60 * 50 + 80 * 50;
        assert_eq!(records_in("c"), produced);
        assert_eq!(records_in("k1"), 4 * produced);
        assert_eq!(records_in("k2"), 2 * 60 * 50);
    }
}

/// A hash edge where every record has one key still spreads markers over every downstream
/// subtask (markers pick a channel at random, whatever the partitioning).
#[test]
fn hash_edge_with_one_key_spreads_markers_over_all_subtasks() {
    let mut g = JobGraph::new("one-key");
    let s = g
        .add_source("s", 1, |_| {
            Ok(Box::new(PacedSource::new(
                300,
                10,
                Duration::from_micros(200),
                |_| 42,
            )))
        })
        .unwrap();
    let op = g
        .add_operator("op", 4, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let k = g.add_sink("k", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, op, Partitioning::Hash).unwrap();
    g.connect(op, k, Partitioning::Rebalance).unwrap();
    let handle = start(
        g,
        marker_config(Duration::from_micros(100), Granularity::Single),
    )
    .unwrap();
    let result = wait_or_fail(handle, Duration::from_secs(120));
    assert_eq!(result.outcome, JobOutcome::Finished);
    let op = result.metrics.vertex("op").unwrap();
    let records: Vec<u64> = op.subtasks.iter().map(|s| s.records_in()).collect();
    assert_eq!(
        records.iter().filter(|&&r| r > 0).count(),
        1,
        "one key, one subtask: {records:?}"
    );
    let markers: Vec<u64> = op
        .subtasks
        .iter()
        .map(|s| s.latency().total_count())
        .collect();
    assert!(result.metrics.markers_emitted() >= 40);
    assert!(
        markers.iter().all(|&c| c > 0),
        "every subtask sees markers: {markers:?}"
    );
    assert_eq!(
        markers.iter().sum::<u64>(),
        result.metrics.markers_emitted()
    );
}

/// A source driven by a manual clock: before each poll the runtime emits exactly one marker
/// (the source advances the clock by the interval), and each record's value says how many
/// markers were emitted before it.
struct ClockDrivenSource {
    clock: Arc<ManualClock>,
    interval: i64,
    polls: u64,
    limit: u64,
}

impl Source for ClockDrivenSource {
    fn poll(&mut self, _ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.polls == self.limit {
            return Ok(SourceStatus::Finished);
        }
        self.polls += 1;
        for i in 0..(self.polls % 5 + 1) {
            out.emit(Record::new(i, self.polls as f64, 0));
        }
        self.clock.advance(self.interval);
        Ok(SourceStatus::Ready)
    }
}

/// Checks, for every record it gets, that the markers this sink has recorded so far are exactly
/// those emitted before the record.
struct OrderCheckingSink {
    registry: Arc<OnceLock<Arc<MetricsRegistry>>>,
    violations: Arc<Mutex<Vec<String>>>,
    seen: u64,
}

impl Sink for OrderCheckingSink {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        let registry = self
            .registry
            .get()
            .expect("registry set before records flow");
        let recorded = registry.vertex("sink").unwrap().subtasks[0]
            .latency()
            .total_count();
        let value = record.numeric_value().unwrap();
        if recorded != value as u64 {
            self.violations.lock().unwrap().push(format!(
                "record emitted after {value} markers arrived after {recorded}"
            ));
        }
        self.seen += 1;
        Ok(())
    }
}

#[test]
fn a_marker_never_overtakes_a_record() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let registry: Arc<OnceLock<Arc<MetricsRegistry>>> = Arc::new(OnceLock::new());
    let violations = Arc::new(Mutex::new(Vec::new()));
    // Dropping `open_gate` lets the source's first poll go on (the test itself never waits).
    let (open_gate, gate) = crossbeam_channel::bounded::<()>(0);
    let mut g = JobGraph::new("order");
    let (c2, gate2) = (clock.clone(), gate);
    let s = g
        .add_source("src", 1, move |_| {
            Ok(Box::new(GatedSource {
                gate: Some(gate2.clone()),
                inner: ClockDrivenSource {
                    clock: c2.clone(),
                    interval: 1_000,
                    polls: 0,
                    limit: 400,
                },
            }))
        })
        .unwrap();
    let m = g
        .add_operator("map", 1, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let (r2, v2) = (registry.clone(), violations.clone());
    let k = g
        .add_sink("sink", 1, move |_| {
            Ok(Box::new(OrderCheckingSink {
                registry: r2.clone(),
                violations: v2.clone(),
                seen: 0,
            }))
        })
        .unwrap();
    g.connect(s, m, Partitioning::Forward).unwrap();
    g.connect(m, k, Partitioning::Forward).unwrap();
    let mut config = marker_config(Duration::from_nanos(1_000), Granularity::Single);
    config.clock = clock.clone();
    config.chaining = false; // three tasks, two channels to travel
    config.batch_size = 3; // markers land inside batches, between records
    config.buffer_timeout = Duration::from_millis(50);
    let handle = start(g, config).unwrap();
    registry.set(handle.metrics().clone()).unwrap();
    drop(open_gate);
    let result = wait_or_fail(handle, Duration::from_secs(120));
    assert_eq!(result.outcome, JobOutcome::Finished);
    // One marker before each of the 400 polls that gave records, and one before the poll that
    // said "finished".
    assert_eq!(result.metrics.markers_emitted(), 401);
    assert_eq!(result.metrics.markers_received_by_sinks(), 401);
    let v = violations.lock().unwrap();
    assert!(
        v.is_empty(),
        "{} violations, first: {:?}",
        v.len(),
        v.first()
    );
    let sink_in = result.metrics.vertex("sink").unwrap().subtasks[0].records_in();
    assert_eq!(sink_in, (1..=400u64).map(|p| p % 5 + 1).sum::<u64>());
}

/// Holds the source's first poll until the test has handed the registry to the sink.
struct GatedSource {
    /// Its sender is dropped once the registry is handed over (then `recv` returns).
    gate: Option<crossbeam_channel::Receiver<()>>,
    inner: ClockDrivenSource,
}

impl Source for GatedSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if let Some(g) = self.gate.take() {
            let _ = g.recv();
        }
        self.inner.poll(ctx, out)
    }
}

/// Inside a chain every operator records every marker, and the source records none.
#[test]
fn every_chained_operator_records_the_marker() {
    let mut g = JobGraph::new("chain");
    let s = g.add_source("s", 2, paced(100)).unwrap();
    let a = g
        .add_operator("a", 2, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let b = g
        .add_operator("b", 2, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    let k = g.add_sink("k", 2, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, a, Partitioning::Forward).unwrap();
    g.connect(a, b, Partitioning::Forward).unwrap();
    g.connect(b, k, Partitioning::Forward).unwrap();
    let handle = start(
        g,
        marker_config(Duration::from_micros(200), Granularity::Operator),
    )
    .unwrap();
    assert_eq!(
        handle.plan().tasks.len(),
        1,
        "all four vertices chain into one task"
    );
    assert_eq!(handle.plan().tasks[0].name, "s+a+b+k");
    let result = wait_or_fail(handle, Duration::from_secs(120));
    let m = &result.metrics;
    for sub in 0..2 {
        let emitted = m.vertex("s").unwrap().subtasks[sub].markers_emitted();
        assert!(emitted > 5);
        assert_eq!(
            m.vertex("s").unwrap().subtasks[sub].latency().total_count(),
            0
        );
        for id in ["a", "b", "k"] {
            let got = m.vertex(id).unwrap().subtasks[sub].latency().total_count();
            assert_eq!(got, emitted, "vertex {id} subtask {sub}");
        }
    }
    assert!(m.vertices().iter().any(|v| v.kind == VertexKind::Sink));
}

/// Interval 0: no marker anywhere, no latency key anywhere.
#[test]
fn interval_zero_creates_no_marker() {
    let mut g = JobGraph::new("off");
    let s = g.add_source("s", 2, paced(30)).unwrap();
    let k = g.add_sink("k", 2, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, k, Partitioning::Rebalance).unwrap();
    let result = wait_or_fail(
        start(g, marker_config(Duration::ZERO, Granularity::Subtask)).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.metrics.markers_emitted(), 0);
    for v in result.metrics.vertices() {
        for s in &v.subtasks {
            assert!(s.latency().is_empty());
        }
    }
}
