//! The hooks a Kafka exchange relays markers through: a sink that relays markers gets each one
//! in order behind the records before it and records no latency; a source that relays markers
//! makes none of its own, and the markers it emits among its records reach the vertices after
//! it, in order, each exactly once, with their origin.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_runtime::markers::{origin, Granularity, LatencyConfig, LatencyMarker};
use tidemark_runtime::testing::CountingSource;
use tidemark_runtime::{
    run, BoxError, JobConfig, JobGraph, JobOutcome, Output, Partitioning, PollContext, Record,
    Sink, Source, SourceStatus,
};

/// What a relaying sink saw: record counts and markers, in arrival order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Records(usize),
    Marker(LatencyMarker),
}

struct RelayingSink {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Sink for RelayingSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        unreachable!("batches only")
    }
    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        self.seen.lock().unwrap().push(Seen::Records(records.len()));
        Ok(())
    }
    fn relays_markers(&self) -> bool {
        true
    }
    fn on_marker(&mut self, marker: LatencyMarker) -> Result<(), BoxError> {
        self.seen.lock().unwrap().push(Seen::Marker(marker));
        Ok(())
    }
}

fn with_markers(interval: Duration) -> JobConfig {
    JobConfig {
        latency: LatencyConfig {
            interval,
            granularity: Granularity::Single,
            ..LatencyConfig::default()
        },
        ..JobConfig::default()
    }
}

#[test]
fn a_relaying_sink_gets_every_marker_in_order_and_records_none() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut graph = JobGraph::new("relay-out");
    let src = graph
        .add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(20_000))))
        .unwrap();
    let s = seen.clone();
    let sink = graph
        .add_sink("writer", 1, move |_| {
            Ok(Box::new(RelayingSink { seen: s.clone() }))
        })
        .unwrap();
    graph.connect(src, sink, Partitioning::Forward).unwrap();
    let result = run(graph, with_markers(Duration::from_nanos(1))).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);
    let emitted = result.metrics.markers_emitted();
    let seen = seen.lock().unwrap();
    let markers: Vec<_> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Marker(m) => Some(*m),
            _ => None,
        })
        .collect();
    assert!(emitted > 1);
    assert_eq!(markers.len() as u64, emitted, "each marker relayed once");
    assert!(markers
        .windows(2)
        .all(|w| w[0].marked_time <= w[1].marked_time));
    let records: usize = seen
        .iter()
        .map(|s| match s {
            Seen::Records(n) => *n,
            _ => 0,
        })
        .sum();
    assert_eq!(records, 20_000);
    let writer = result.metrics.vertex("writer").unwrap();
    assert!(
        writer.subtasks[0].latency().is_empty(),
        "a relaying sink records no latency"
    );
}

/// Emits `n` records in batches, a marker from another instance after every batch.
struct RelayingSource {
    left: u64,
    markers: u64,
    origin: u32,
}

impl Source for RelayingSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.left == 0 {
            return Ok(SourceStatus::Finished);
        }
        let n = self.left.min(100);
        for i in 0..n {
            out.emit(Record::new(i, 1.0, ctx.now_nanos));
        }
        self.left -= n;
        out.emit_marker(LatencyMarker::new(ctx.now_nanos, 0, 3).with_origin(self.origin));
        self.markers += 1;
        Ok(SourceStatus::Ready)
    }
    fn relays_markers(&self) -> bool {
        true
    }
}

#[test]
fn markers_a_source_relays_reach_the_sink_once_with_their_origin() {
    let elsewhere = origin::intern("relayed-markers-test-peer");
    let mut graph = JobGraph::new("relay-in");
    let src = graph
        .add_source("reader", 2, move |_| {
            Ok(Box::new(RelayingSource {
                left: 5_000,
                markers: 0,
                origin: elsewhere,
            }))
        })
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| {
            Ok(Box::new(tidemark_runtime::testing::DiscardSink))
        })
        .unwrap();
    graph.connect(src, sink, Partitioning::Rebalance).unwrap();
    // Markers on: the relaying source still makes none of its own.
    let result = run(graph, with_markers(Duration::from_nanos(1))).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);
    assert_eq!(result.metrics.markers_emitted(), 0);
    let out = result.metrics.vertex("out").unwrap();
    let tracker = out.subtasks[0].latency();
    let keys: Vec<_> = tracker.iter().map(|(k, s)| (k.origin, s.count())).collect();
    // Two subtasks, 5,000 records each in batches of 100: 50 markers each.
    assert_eq!(keys, [(elsewhere, 100)]);
    assert_eq!(out.subtasks[0].records_in(), 10_000);
}
