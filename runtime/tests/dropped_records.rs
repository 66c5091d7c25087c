//! Every record that does not reach a sink is counted, by reason: left in flight by a hard stop
//! ([`JobHandle::abort`]), not written because the sink's output closed (a broken pipe stops the
//! job cleanly), dropped by an operator (`records_dropped`), skipped as malformed by a source.
//! And a source's `records_out` stays right when the push after its poll fails.

mod common;

use common::{wait_or_fail, wait_until};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tidemark_runtime::testing::{CountingSource, MapOperator};
use tidemark_runtime::{
    start, BoxError, DropReason, JobConfig, JobGraph, JobOutcome, MetricsRegistry, Operator,
    Output, OutputClosed, Partitioning, PollContext, Record, Sink, Source, SourceErrorCounts,
    SourceStatus,
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

/// Sleeps per batch, so the queues in front of it fill; counts what it wrote.
struct SlowSink {
    written: Arc<AtomicU64>,
}

impl Sink for SlowSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        unreachable!("batches only")
    }
    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        std::thread::sleep(Duration::from_millis(2));
        self.written
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn sum(m: &MetricsRegistry, id: &str, f: impl Fn(&tidemark_runtime::SubtaskMetrics) -> u64) -> u64 {
    m.vertex(id).unwrap().subtasks.iter().map(|s| f(s)).sum()
}

fn dropped_everywhere(m: &MetricsRegistry, reason: DropReason) -> u64 {
    m.vertices()
        .iter()
        .flat_map(|v| v.subtasks.iter())
        .map(|s| s.records_dropped(reason))
        .sum()
}

#[test]
fn a_hard_stop_counts_what_was_in_flight() {
    // Endless sources (2) → rebalance → map (2) → rebalance → a slow sink (1): the queues fill.
    let written = Arc::new(AtomicU64::new(0));
    let mut g = JobGraph::new("hard-stop");
    let s = g
        .add_source("s", 2, |_| Ok(Box::new(Endless { n: 0 })))
        .unwrap();
    let m = g
        .add_operator("m", 2, |_| Ok(Box::new(MapOperator(|v| v + 1.0))))
        .unwrap();
    let w = written.clone();
    let k = g
        .add_sink("k", 1, move |_| {
            Ok(Box::new(SlowSink { written: w.clone() }))
        })
        .unwrap();
    g.connect(s, m, Partitioning::Rebalance).unwrap();
    g.connect(m, k, Partitioning::Rebalance).unwrap();
    let handle = start(g, JobConfig::default()).unwrap();
    wait_until("20,000 records written by the slow sink", || {
        written.load(Ordering::Relaxed) >= 20_000
    });
    handle.abort();
    let result = wait_or_fail(handle, Duration::from_secs(60));
    assert_eq!(result.outcome, JobOutcome::Aborted);
    assert!(result.tasks_not_ended.is_empty());
    let m = &result.metrics;
    let emitted = sum(m, "s", |s| s.records_out());
    let sunk = sum(m, "k", |s| s.records_in());
    let in_flight = dropped_everywhere(m, DropReason::InFlight);
    // The queues were full: a lot was left behind, and every record is accounted for.
    assert!(in_flight > 1024, "in flight: {in_flight}");
    assert_eq!(
        sunk + in_flight,
        emitted,
        "sunk {sunk} + in flight {in_flight} = emitted {emitted}"
    );
    assert_eq!(written.load(Ordering::Relaxed), sunk);
}

#[test]
fn a_clean_stop_leaves_nothing_in_flight() {
    let mut g = JobGraph::new("clean-stop");
    let s = g
        .add_source("s", 2, |_| Ok(Box::new(Endless { n: 0 })))
        .unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let k = g
        .add_sink("k", 1, move |_| {
            Ok(Box::new(SlowSink { written: w.clone() }))
        })
        .unwrap();
    g.connect(s, k, Partitioning::Rebalance).unwrap();
    let handle = start(g, JobConfig::default()).unwrap();
    wait_until("10,000 records written by the slow sink", || {
        written.load(Ordering::Relaxed) >= 10_000
    });
    handle.stop();
    let result = wait_or_fail(handle, Duration::from_secs(60));
    assert_eq!(result.outcome, JobOutcome::Stopped);
    let m = &result.metrics;
    assert_eq!(dropped_everywhere(m, DropReason::InFlight), 0);
    assert_eq!(
        sum(m, "s", |s| s.records_out()),
        sum(m, "k", |s| s.records_in())
    );
}

/// Writes `limit` records, then says its output is closed (as standard output does when the
/// reader of a pipe exits).
struct ClosingSink {
    limit: u64,
    written: u64,
    io_error: bool,
}

impl Sink for ClosingSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        if self.written == self.limit {
            return Err(if self.io_error {
                Box::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            } else {
                Box::new(OutputClosed {
                    output: "standard output".into(),
                })
            });
        }
        self.written += 1;
        Ok(())
    }
}

#[test]
fn a_closed_output_stops_the_job_cleanly_and_counts_what_it_did_not_write() {
    for io_error in [false, true] {
        let mut g = JobGraph::new("closed");
        let s = g
            .add_source("s", 1, |_| Ok(Box::new(Endless { n: 0 })))
            .unwrap();
        let k = g
            .add_sink("k", 1, move |_| {
                Ok(Box::new(ClosingSink {
                    limit: 10,
                    written: 0,
                    io_error,
                }))
            })
            .unwrap();
        g.connect(s, k, Partitioning::Forward).unwrap();
        // An endless source: only the closed output ends this job.
        let result = wait_or_fail(
            start(g, JobConfig::default()).unwrap(),
            Duration::from_secs(60),
        );
        assert_eq!(result.outcome, JobOutcome::Stopped, "io error: {io_error}");
        let m = &result.metrics;
        let emitted = sum(m, "s", |s| s.records_out());
        let received = sum(m, "k", |s| s.records_in());
        let closed = sum(m, "k", |s| s.records_dropped(DropReason::OutputClosed));
        assert_eq!(received, emitted);
        // The batch that found the output closed counts whole (the sink cannot say how much of
        // it went out before), and so does every batch after it.
        assert_eq!(closed, received, "{closed} of {received}");
        assert!(emitted >= 1024);
    }
}

/// Fails on the second batch.
struct FailsOnSecondBatch {
    batches: u64,
}

impl Sink for FailsOnSecondBatch {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        unreachable!("batches only")
    }
    fn write_batch(&mut self, _records: &[Record]) -> Result<(), BoxError> {
        self.batches += 1;
        if self.batches == 2 {
            return Err("disk full".into());
        }
        Ok(())
    }
}

#[test]
fn a_source_counts_what_it_emitted_even_when_the_push_fails() {
    // Source chained with its sink: the failing push is the source's own call. Before, the
    // source published its count only after the push, so the report said 1024 emitted and
    // 2048 received by the sink.
    let mut g = JobGraph::new("fail-in-chain");
    let s = g
        .add_source("s", 1, |_| Ok(Box::new(CountingSource::new(100_000))))
        .unwrap();
    let k = g
        .add_sink("k", 1, |_| Ok(Box::new(FailsOnSecondBatch { batches: 0 })))
        .unwrap();
    g.connect(s, k, Partitioning::Forward).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert!(matches!(result.outcome, JobOutcome::Failed(_)));
    let m = &result.metrics;
    assert_eq!(sum(m, "k", |s| s.records_in()), 2048);
    assert_eq!(sum(m, "s", |s| s.records_out()), 2048);
}

/// Drops every third record "because an expression failed", and says so.
struct DropsEveryThird {
    seen: u64,
    dropped: u64,
}

impl Operator for DropsEveryThird {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.seen += 1;
        if self.seen == 3 {
            self.seen = 0;
            self.dropped += 1;
        } else {
            out.emit(record);
        }
        Ok(())
    }
    fn records_dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::ExpressionError => self.dropped,
            _ => 0,
        }
    }
}

/// Ten records, then says it skipped `malformed` lines.
struct SkippingSource {
    done: bool,
    malformed: u64,
}

impl Source for SkippingSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if !self.done {
            for k in 0..10 {
                out.emit(Record::new(k, 0.0, ctx.now_nanos));
            }
            self.done = true;
        }
        Ok(SourceStatus::Finished)
    }
    fn input_errors(&self) -> SourceErrorCounts {
        SourceErrorCounts {
            malformed: self.malformed,
            ..SourceErrorCounts::default()
        }
    }
}

#[test]
fn operators_and_sources_report_their_drops_by_reason() {
    let mut g = JobGraph::new("drops");
    let s = g
        .add_source("s", 2, |_| {
            Ok(Box::new(SkippingSource {
                done: false,
                malformed: 7,
            }))
        })
        .unwrap();
    let op = g
        .add_operator("expr", 2, |_| {
            Ok(Box::new(DropsEveryThird {
                seen: 0,
                dropped: 0,
            }))
        })
        .unwrap();
    let k = g
        .add_sink("k", 1, |_| {
            Ok(Box::new(tidemark_runtime::testing::DiscardSink))
        })
        .unwrap();
    g.connect(s, op, Partitioning::Forward).unwrap();
    g.connect(op, k, Partitioning::Rebalance).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    let m = &result.metrics;
    for subtask in &m.vertex("s").unwrap().subtasks {
        assert_eq!(subtask.records_dropped(DropReason::Malformed), 7);
        assert_eq!(subtask.records_dropped_total(), 7);
    }
    for subtask in &m.vertex("expr").unwrap().subtasks {
        assert_eq!(subtask.records_dropped(DropReason::ExpressionError), 3);
    }
    assert_eq!(sum(m, "k", |s| s.records_in()), 14);
    assert_eq!(dropped_everywhere(m, DropReason::InFlight), 0);
}

/// Ten records, every other one stamped a day in the past.
struct HalfStale {
    done: bool,
}

impl Source for HalfStale {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if !self.done {
            const DAY: i64 = 86_400_000_000_000;
            for k in 0..10 {
                let ts = if k % 2 == 0 {
                    ctx.now_nanos - DAY
                } else {
                    ctx.now_nanos
                };
                out.emit(Record::new(k, 0.0, ts));
            }
            self.done = true;
        }
        Ok(SourceStatus::Finished)
    }
}

/// Counts late records the old way (`late_records_dropped`) only.
struct OldStyleWindow;

impl Operator for OldStyleWindow {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        out.emit(record);
        Ok(())
    }
    fn late_records_dropped(&self) -> u64 {
        4
    }
}

#[test]
fn records_dropped_for_their_timestamp_or_as_late_are_counted() {
    for (policy, dropped) in [
        (tidemark_runtime::InvalidTimestampPolicy::Drop, 5),
        (tidemark_runtime::InvalidTimestampPolicy::Clamp, 0),
    ] {
        let mut g = JobGraph::new("stale");
        let s = g
            .add_source("s", 1, |_| Ok(Box::new(HalfStale { done: false })))
            .unwrap();
        g.set_source_options(
            s,
            tidemark_runtime::SourceOptions {
                timestamp_check: Some(tidemark_runtime::TimestampCheck {
                    before_max: Some(Duration::from_secs(3600)),
                    after_max: None,
                    on_invalid: policy,
                }),
                watermarks: None,
            },
        );
        let w = g
            .add_operator("w", 1, |_| Ok(Box::new(OldStyleWindow)))
            .unwrap();
        let k = g
            .add_sink("k", 1, |_| {
                Ok(Box::new(tidemark_runtime::testing::DiscardSink))
            })
            .unwrap();
        g.connect(s, w, Partitioning::Forward).unwrap();
        g.connect(w, k, Partitioning::Forward).unwrap();
        let result = wait_or_fail(
            start(g, JobConfig::default()).unwrap(),
            Duration::from_secs(60),
        );
        assert_eq!(result.outcome, JobOutcome::Finished);
        let m = &result.metrics;
        let source = &m.vertex("s").unwrap().subtasks[0];
        assert_eq!(source.invalid_timestamp_records(), 5, "{policy:?}");
        assert_eq!(
            source.records_dropped(DropReason::InvalidTimestamp),
            dropped,
            "{policy:?}: clamped records are not dropped"
        );
        assert_eq!(sum(m, "k", |s| s.records_in()), 10 - dropped);
        let window = &m.vertex("w").unwrap().subtasks[0];
        assert_eq!(window.records_dropped(DropReason::Late), 4);
        assert_eq!(window.late_records_dropped(), 4);
    }
}

/// Holds its first batch until released (a step stuck in user code, like a long `delay`).
struct Stuck {
    release: Arc<std::sync::atomic::AtomicBool>,
}

impl Operator for Stuck {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        out.emit(record);
        Ok(())
    }
    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        while !self.release.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        out.emit_all(records);
        Ok(())
    }
}

#[test]
fn a_hard_stop_counts_the_batch_of_a_task_stuck_in_user_code() {
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut g = JobGraph::new("stuck");
    let s = g
        .add_source("s", 1, |_| Ok(Box::new(Endless { n: 0 })))
        .unwrap();
    let r = release.clone();
    let op = g
        .add_operator("stuck", 1, move |_| {
            Ok(Box::new(Stuck { release: r.clone() }))
        })
        .unwrap();
    let k = g
        .add_sink("k", 1, |_| {
            Ok(Box::new(tidemark_runtime::testing::DiscardSink))
        })
        .unwrap();
    g.connect(s, op, Partitioning::Forward).unwrap();
    g.connect(op, k, Partitioning::Forward).unwrap();
    let mut config = JobConfig {
        chaining: false,
        ..JobConfig::default()
    };
    // No markers: every batch on the queue is a full one of records.
    config.latency.interval = Duration::ZERO;
    let handle = start(g, config).unwrap();
    // The stuck step holds one batch and its queue (8 batches) fills behind it: then the source
    // has emitted 10 batches, the tenth waiting to be sent.
    let source = handle.metrics().vertex("s").unwrap().subtasks[0].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while source.records_out() < 10 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue never filled: {} emitted",
            source.records_out()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    handle.abort();
    let result = handle.wait_at_most(Duration::from_millis(200));
    assert_eq!(result.outcome, JobOutcome::Aborted);
    assert_eq!(result.tasks_not_ended, ["stuck#0"]);
    let m = &result.metrics;
    let emitted = sum(m, "s", |s| s.records_out());
    let stuck = m.vertex("stuck").unwrap().subtasks[0].records_dropped(DropReason::InFlight);
    // Its full queue and the batch in its hands.
    assert_eq!(stuck, 8 * 1024 + 1024);
    assert_eq!(sum(m, "k", |s| s.records_in()), 0);
    // The source counted exactly what it had not sent: everything is accounted for.
    assert_eq!(dropped_everywhere(m, DropReason::InFlight), emitted);
    release.store(true, Ordering::Relaxed);
}
