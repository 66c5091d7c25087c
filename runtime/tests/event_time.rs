//! Watermarks across tasks: minimum over inputs, idleness, and timestamp checks at sources.

mod common;

use common::wait_or_fail;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::testing::DiscardSink;
use tidemark_runtime::{
    start, BoxError, InvalidTimestampPolicy, JobConfig, JobGraph, JobOutcome, Operator, Output,
    Partitioning, PollContext, Record, Source, SourceOptions, SourceStatus, SplitId,
    SplitWatermarks, TimestampCheck, WatermarkStrategy,
};

/// Emits `n` records with event timestamps `base + i * step`, one small batch per poll, with a
/// pause between polls; then stays open (idle) for `linger` polls before finishing.
#[derive(Clone)]
struct EventSource {
    base: i64,
    step: i64,
    n: i64,
    i: i64,
    linger: u32,
}

impl EventSource {
    fn new(base: i64, step: i64, n: i64, linger: u32) -> Self {
        EventSource {
            base,
            step,
            n,
            i: 0,
            linger,
        }
    }
}

impl Source for EventSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.i < self.n {
            for _ in 0..10.min(self.n - self.i) {
                out.emit(Record::new(
                    self.i as u64,
                    1.0,
                    self.base + self.i * self.step,
                ));
                self.i += 1;
            }
            return Ok(SourceStatus::Idle {
                until: Some(ctx.now_nanos + 200_000),
            });
        }
        if self.linger == 0 {
            return Ok(SourceStatus::Finished);
        }
        self.linger -= 1;
        Ok(SourceStatus::Idle {
            until: Some(ctx.now_nanos + 1_000_000),
        })
    }
}

/// Records every watermark it is given.
struct WatermarkLog(Arc<Mutex<Vec<i64>>>);

impl Operator for WatermarkLog {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        out.emit(record);
        Ok(())
    }
    fn on_watermark(&mut self, wm: i64, _out: &mut Output) -> Result<(), BoxError> {
        self.0.lock().unwrap().push(wm);
        Ok(())
    }
}

fn strategy(idleness: Option<Duration>) -> SourceOptions {
    SourceOptions {
        watermarks: Some(WatermarkStrategy {
            max_out_of_orderness: Duration::from_nanos(5),
            interval: Duration::from_micros(100),
            idleness,
        }),
        timestamp_check: None,
    }
}

/// Emits, per poll, 10 records of a fast split (timestamps `1_000_000 + i * 10`) and 10 of a
/// slow one (`i * 10`) up to `n` each, then lingers; with `per_split` it notes them per split.
#[derive(Clone)]
struct TwoSplitSource {
    splits: SplitWatermarks,
    fast: SplitId,
    slow: SplitId,
    per_split: bool,
    n: i64,
    i: i64,
    linger: u32,
}

impl TwoSplitSource {
    fn new(n: i64, per_split: bool) -> Self {
        let mut splits = SplitWatermarks::new();
        let fast = splits.add_split();
        let slow = splits.add_split();
        TwoSplitSource {
            splits,
            fast,
            slow,
            per_split,
            n,
            i: 0,
            linger: 20,
        }
    }
}

impl Source for TwoSplitSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.i < self.n {
            for (split, base) in [(self.fast, 1_000_000), (self.slow, 0)] {
                for j in self.i..(self.i + 10).min(self.n) {
                    let ts = base + j * 10;
                    out.emit(Record::new(j as u64, 1.0, ts));
                    self.splits.observe(split, ts);
                }
            }
            self.i += 10;
        } else if self.linger == 0 {
            return Ok(SourceStatus::Finished);
        } else {
            self.linger -= 1;
        }
        Ok(SourceStatus::Idle {
            until: Some(ctx.now_nanos + 500_000),
        })
    }

    fn split_watermarks(&mut self) -> Option<&mut SplitWatermarks> {
        self.per_split.then_some(&mut self.splits)
    }
}

/// A source that never has a split (a Kafka subtask the group gave no partition) and lingers
/// for `polls` polls of 1 ms.
#[derive(Clone)]
struct NoSplitSource {
    splits: SplitWatermarks,
    polls: u32,
}

impl Source for NoSplitSource {
    fn poll(&mut self, ctx: &PollContext, _out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.polls == 0 {
            return Ok(SourceStatus::Finished);
        }
        self.polls -= 1;
        Ok(SourceStatus::Idle {
            until: Some(ctx.now_nanos + 1_000_000),
        })
    }

    fn split_watermarks(&mut self) -> Option<&mut SplitWatermarks> {
        Some(&mut self.splits)
    }
}

/// Runs two event sources (id, source, options) into a union operator that logs the
/// watermarks it is given, chained to a sink; returns the result and the log.
fn run_union<A, B>(
    a: (&str, A, SourceOptions),
    b: (&str, B, SourceOptions),
) -> (tidemark_runtime::JobResult, Vec<i64>)
where
    A: Source + Clone + Sync + 'static,
    B: Source + Clone + Sync + 'static,
{
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut g = JobGraph::new("union");
    let l2 = log.clone();
    let op = g
        .add_operator("union", 1, move |_| Ok(Box::new(WatermarkLog(l2.clone()))))
        .unwrap();
    let (id, source, options) = a;
    let v = g
        .add_source(id, 1, move |_| Ok(Box::new(source.clone())))
        .unwrap();
    g.set_source_options(v, options);
    g.connect(v, op, Partitioning::Rebalance).unwrap();
    let (id, source, options) = b;
    let v = g
        .add_source(id, 1, move |_| Ok(Box::new(source.clone())))
        .unwrap();
    g.set_source_options(v, options);
    g.connect(v, op, Partitioning::Rebalance).unwrap();
    let k = g.add_sink("k", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(op, k, Partitioning::Forward).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    let log = log.lock().unwrap().clone();
    (result, log)
}

#[test]
fn the_watermark_is_the_minimum_over_inputs_and_never_goes_back() {
    let (result, log) = run_union(
        (
            "fast",
            EventSource::new(1_000_000, 100, 400, 0),
            strategy(None),
        ),
        ("slow", EventSource::new(1_000, 1, 400, 0), strategy(None)),
    );
    assert!(!log.is_empty());
    assert!(
        log.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {log:?}"
    );
    // While both run, the slow source (timestamps 1000..1400) holds the watermark back: the
    // fast one's timestamps start at 1_000_000.
    let slow_max = 1_000 + 399 - 5 - 1;
    assert!(
        log[0] <= slow_max,
        "first watermark {} held back by the slow input",
        log[0]
    );
    // The sink (chained after the operator) saw the same watermarks.
    let sink_wm = result.metrics.vertex("k").unwrap().subtasks[0].watermark();
    assert_eq!(sink_wm, *log.last().unwrap());
}

#[test]
fn an_idle_input_does_not_hold_the_watermark_back() {
    // `busy` makes progress; `quiet` sends 10 records then lingers for a while without any.
    let (_, log) = run_union(
        (
            "busy",
            EventSource::new(1_000_000, 1_000, 2_000, 0),
            strategy(None),
        ),
        (
            "quiet",
            EventSource::new(0, 1, 10, 300),
            strategy(Some(Duration::from_millis(2))),
        ),
    );
    // Without idleness the watermark could not pass the quiet source's 9 - 5 - 1 = 3 until it
    // ended; with it, the busy source's event time shows through while `quiet` still runs.
    assert!(
        log.iter().any(|&w| w >= 1_000_000),
        "the watermark advanced past the quiet input: {:?}",
        &log[..log.len().min(10)]
    );
}

/// Runs one source into the watermark log; returns the log.
fn run_one(source: TwoSplitSource) -> Vec<i64> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut g = JobGraph::new("splits");
    let l2 = log.clone();
    let op = g
        .add_operator("log", 1, move |_| Ok(Box::new(WatermarkLog(l2.clone()))))
        .unwrap();
    let v = g
        .add_source("s", 1, move |_| Ok(Box::new(source.clone())))
        .unwrap();
    g.set_source_options(v, strategy(None));
    g.connect(v, op, Partitioning::Rebalance).unwrap();
    let k = g.add_sink("k", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(op, k, Partitioning::Forward).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    let log = log.lock().unwrap().clone();
    log
}

#[test]
fn a_source_with_splits_gets_the_minimum_over_its_splits() {
    let n = 400;
    let log = run_one(TwoSplitSource::new(n, true));
    assert!(!log.is_empty());
    assert!(log.windows(2).all(|w| w[0] < w[1]), "{log:?}");
    // The slow split decides: its last timestamp minus 5 ns out-of-orderness minus 1 ns.
    let slow_last = (n - 1) * 10 - 6;
    assert!(log.iter().all(|&w| w <= slow_last), "{log:?}");
    assert_eq!(*log.last().unwrap(), slow_last, "{log:?}");
    // The same source without its splits (as a user-written source is) is one input: the
    // fast split's timestamps make the watermark.
    let log = run_one(TwoSplitSource::new(n, false));
    assert_eq!(*log.last().unwrap(), 1_000_000 + slow_last, "{log:?}");
}

#[test]
fn a_source_without_splits_does_not_hold_the_watermark_back() {
    // No idleness configured anywhere: a subtask with no split is idle all the same.
    let (_, log) = run_union(
        (
            "busy",
            EventSource::new(1_000_000, 1_000, 2_000, 0),
            strategy(None),
        ),
        (
            "empty",
            NoSplitSource {
                splits: SplitWatermarks::new(),
                polls: 2_000,
            },
            strategy(None),
        ),
    );
    // `empty` outlives `busy`, and once `busy` ended nothing advances the watermark: what the
    // log shows, the busy source made while `empty` ran.
    assert!(
        log.iter().any(|&w| w >= 1_000_000),
        "the watermark advanced past the source without splits: {:?}",
        &log[..log.len().min(10)]
    );
}

/// Logs what a sink is told about event time: `Some(watermark)` or `None` for idle.
struct EventTimeLog(Arc<Mutex<Vec<Option<i64>>>>);

impl tidemark_runtime::Sink for EventTimeLog {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        Ok(())
    }
    fn on_watermark(&mut self, watermark: i64) -> Result<(), BoxError> {
        self.0.lock().unwrap().push(Some(watermark));
        Ok(())
    }
    fn on_idle(&mut self) -> Result<(), BoxError> {
        self.0.lock().unwrap().push(None);
        Ok(())
    }
}

#[test]
fn a_sink_is_told_when_its_input_is_idle() {
    // A source without splits is idle from its first poll; the sink chained to it hears so
    // (an exchange writer passes it on to the readers).
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut g = JobGraph::new("idle-sink");
    let s = g
        .add_source("s", 1, |_| {
            Ok(Box::new(NoSplitSource {
                splits: SplitWatermarks::new(),
                polls: 20,
            }))
        })
        .unwrap();
    g.set_source_options(s, strategy(None));
    let l2 = log.clone();
    let k = g
        .add_sink("k", 1, move |_| Ok(Box::new(EventTimeLog(l2.clone()))))
        .unwrap();
    g.connect(s, k, Partitioning::Forward).unwrap();
    let result = wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    assert_eq!(*log.lock().unwrap(), [None], "idle, said once");
}

#[test]
fn timestamp_checks_drop_and_count_at_the_source() {
    struct Old;
    impl Source for Old {
        fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
            // One record an hour old, one current.
            out.emit(Record::new(1, 1.0, ctx.now_nanos - 3_600_000_000_000));
            out.emit(Record::new(2, 1.0, ctx.now_nanos));
            Ok(SourceStatus::Finished)
        }
    }
    for (policy, sink_records, outcome_failed) in [
        (InvalidTimestampPolicy::Drop, 1, false),
        (InvalidTimestampPolicy::Clamp, 2, false),
        (InvalidTimestampPolicy::Fail, 0, true),
    ] {
        let mut g = JobGraph::new("ts");
        let s = g.add_source("s", 1, |_| Ok(Box::new(Old))).unwrap();
        g.set_source_options(
            s,
            SourceOptions {
                timestamp_check: Some(TimestampCheck {
                    before_max: Some(Duration::from_secs(60)),
                    after_max: None,
                    on_invalid: policy,
                }),
                watermarks: None,
            },
        );
        let k = g.add_sink("k", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
        g.connect(s, k, Partitioning::Rebalance).unwrap();
        let result = wait_or_fail(
            start(g, JobConfig::default()).unwrap(),
            Duration::from_secs(60),
        );
        let m = &result.metrics;
        match (&result.outcome, outcome_failed) {
            (JobOutcome::Failed(f), true) => {
                assert_eq!(f.vertex_id, "s");
                assert!(f.message.contains("key 1"), "{}", f.message);
            }
            (JobOutcome::Finished, false) => {
                assert_eq!(
                    m.vertex("k").unwrap().subtasks[0].records_in(),
                    sink_records
                );
                assert_eq!(
                    m.vertex("s").unwrap().subtasks[0].invalid_timestamp_records(),
                    1
                );
            }
            (other, _) => panic!("{policy:?}: {other:?}"),
        }
    }
}

/// Counts the idleness a sink is told, and how often it is asked to renew what it said.
#[derive(Clone, Default)]
struct IdleRenewals {
    idle: Arc<std::sync::atomic::AtomicUsize>,
    renewals: Arc<std::sync::atomic::AtomicUsize>,
}

impl tidemark_runtime::Sink for IdleRenewals {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        Ok(())
    }
    fn on_idle(&mut self) -> Result<(), BoxError> {
        self.idle.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn on_inputs_unchanged(&mut self) -> Result<(), BoxError> {
        self.renewals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

#[test]
fn a_sink_of_idle_inputs_is_asked_to_renew_its_claim_chained_and_behind_a_channel() {
    // Idleness is a lease: a sink that passes it on (the Kafka exchange writer) must be able
    // to say it again while its inputs stay idle, whether it is chained to the source (renewed
    // at every watermark look) or fed by a channel (renewed while every input is idle).
    for partitioning in [Partitioning::Forward, Partitioning::Rebalance] {
        let counts = IdleRenewals::default();
        let mut g = JobGraph::new("renewals");
        let s = g
            .add_source("s", 1, |_| {
                Ok(Box::new(NoSplitSource {
                    splits: SplitWatermarks::new(),
                    polls: 3_000,
                }))
            })
            .unwrap();
        g.set_source_options(s, strategy(None));
        let sink = counts.clone();
        let k = g
            .add_sink("k", 1, move |_| Ok(Box::new(sink.clone())))
            .unwrap();
        g.connect(s, k, partitioning).unwrap();
        let result = wait_or_fail(
            start(g, JobConfig::default()).unwrap(),
            Duration::from_secs(120),
        );
        assert_eq!(result.outcome, JobOutcome::Finished);
        let idle = counts.idle.load(std::sync::atomic::Ordering::Relaxed);
        let renewals = counts.renewals.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(idle, 1, "{partitioning:?}: idle is said once");
        assert!(
            renewals >= 1,
            "{partitioning:?}: the sink was never asked to renew its idle claim"
        );
    }
}
