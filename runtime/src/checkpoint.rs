//! Checkpoints for at-least-once delivery: barriers travel in-band with the records (like latency
//! markers, but down **every** channel); a vertex forwards barrier `n` once every input still
//! open has delivered it; a sink flushes and acknowledges `n`; when every sink subtask has
//! acknowledged `n`, checkpoint `n` is complete and the sources may commit the input positions
//! they recorded when they sent barrier `n` (Kafka offsets, say).
//!
//! Barriers are numbered 1, 2, 3, … by every source subtask on its own timer (the job's
//! `checkpoint_interval`). A vertex forwards only the newest barrier its inputs have all
//! delivered, so acknowledging `n` acknowledges every checkpoint before it too.
//!
//! [`Checkpoints`] is the job-wide coordinator the tasks share; it also keeps the series
//! `tidemark_checkpoints_completed_total`, `tidemark_checkpoints_failed_total` and
//! `tidemark_checkpoint_duration_seconds`, which it
//! writes into the job's metrics registry as a [`SeriesSource`]. Control code reaches it
//! through [`JobHandle::checkpoints`](crate::JobHandle::checkpoints), never through metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics::{SeriesFamily, SeriesSource, SeriesWriter};

/// Upper bounds (seconds) of the checkpoint duration histogram's buckets.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The job-wide checkpoint coordinator.
#[derive(Debug)]
pub struct Checkpoints {
    interval: Option<Duration>,
    /// Per sink subtask: the newest checkpoint it acknowledged (`u64::MAX` once it finished).
    acked: Vec<AtomicU64>,
    /// The newest complete checkpoint.
    completed: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// When each pending checkpoint's first barrier left a source.
    started: BTreeMap<u64, Instant>,
    completed_total: u64,
    failed_total: u64,
    buckets: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum_seconds: f64,
}

impl Checkpoints {
    /// A coordinator for a job with `sink_subtasks` sink subtasks; `interval` `None` turns
    /// checkpointing off.
    pub fn new(interval: Option<Duration>, sink_subtasks: usize) -> Self {
        Checkpoints {
            interval: interval.filter(|d| !d.is_zero()),
            acked: (0..sink_subtasks).map(|_| AtomicU64::new(0)).collect(),
            completed: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// How often sources start a checkpoint, if checkpointing is on.
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// The newest complete checkpoint (0: none yet).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Checkpoints completed so far.
    pub fn completed_total(&self) -> u64 {
        self.inner.lock().map(|i| i.completed_total).unwrap_or(0)
    }

    /// Checkpoints that failed so far: started, then given up on (the job ended, failed or was
    /// stopped hard before every sink acknowledged them).
    pub fn failed_total(&self) -> u64 {
        self.inner.lock().map(|i| i.failed_total).unwrap_or(0)
    }

    /// The job has ended: every checkpoint still pending will never complete, so it failed.
    pub(crate) fn abandon_pending(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.failed_total += inner.started.len() as u64;
            inner.started.clear();
        }
    }

    /// A source subtask sends barrier `n`; the first to do so starts the clock of `n`.
    pub(crate) fn triggered(&self, n: u64) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.started.entry(n).or_insert_with(Instant::now);
        }
        // A job without sinks completes every checkpoint at once.
        self.update_completed();
    }

    /// Sink subtask `sink` flushed everything before barrier `n`.
    pub(crate) fn acknowledge(&self, sink: usize, n: u64) {
        if let Some(a) = self.acked.get(sink) {
            a.fetch_max(n, Ordering::AcqRel);
        }
        self.update_completed();
    }

    /// Sink subtask `sink` has ended: it holds nothing back any more.
    pub(crate) fn sink_finished(&self, sink: usize) {
        self.acknowledge(sink, u64::MAX);
    }

    fn update_completed(&self) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let newest_started = inner.started.keys().next_back().copied().unwrap_or(0);
        let min = self
            .acked
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
            .min(newest_started);
        let before = self.completed.load(Ordering::Acquire);
        if min <= before {
            return;
        }
        self.completed.store(min, Ordering::Release);
        let now = Instant::now();
        let done: Vec<u64> = inner.started.range(..=min).map(|(n, _)| *n).collect();
        for n in done {
            if let Some(started) = inner.started.remove(&n) {
                let seconds = now.duration_since(started).as_secs_f64();
                inner.completed_total += 1;
                inner.count += 1;
                inner.sum_seconds += seconds;
                for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
                    if seconds <= *bound {
                        inner.buckets[i] += 1;
                    }
                }
            }
        }
    }
}

/// `tidemark_checkpoints_completed_total`.
pub const COMPLETED: SeriesFamily = SeriesFamily::counter(
    "tidemark_checkpoints_completed_total",
    "Checkpoints every sink acknowledged.",
);

/// `tidemark_checkpoints_failed_total`.
pub const FAILED: SeriesFamily = SeriesFamily::counter(
    "tidemark_checkpoints_failed_total",
    "Checkpoints started and never completed (the job ended, failed or was stopped hard before every sink acknowledged them).",
);

/// `tidemark_checkpoint_duration_seconds`, with the buckets [`DURATION_BUCKETS`].
pub const DURATION: SeriesFamily = SeriesFamily::histogram(
    "tidemark_checkpoint_duration_seconds",
    "Time from a checkpoint's first barrier to the last sink acknowledgement.",
);

/// The checkpoint series, labelled only with `job_name` (and `tidemark_instance`); none while
/// checkpointing is off. The job registers the coordinator with its metrics registry.
impl SeriesSource for Checkpoints {
    fn collect(&self, out: &mut SeriesWriter) {
        if self.interval.is_none() {
            return;
        }
        let Ok(inner) = self.inner.lock() else {
            return;
        };
        out.number(&COMPLETED, &[], inner.completed_total as f64);
        out.number(&FAILED, &[], inner.failed_total as f64);
        out.histogram(
            &DURATION,
            &[],
            &DURATION_BUCKETS,
            &inner.buckets,
            inner.count,
            inner.sum_seconds,
        );
    }
}

/// Per input slot of a task: the newest barrier each has delivered, to forward barrier `n`
/// only once every open input delivered it.
#[derive(Debug)]
pub(crate) struct BarrierAlignment {
    delivered: Vec<u64>,
    ended: Vec<bool>,
    forwarded: u64,
}

impl BarrierAlignment {
    pub(crate) fn new(slots: usize) -> Self {
        BarrierAlignment {
            delivered: vec![0; slots],
            ended: vec![false; slots],
            forwarded: 0,
        }
    }

    /// Slot `slot` delivered barrier `n`; returns the barrier to forward now, if any.
    pub(crate) fn on_barrier(&mut self, slot: usize, n: u64) -> Option<u64> {
        if let Some(d) = self.delivered.get_mut(slot) {
            *d = (*d).max(n);
        }
        self.ready()
    }

    /// Slot `slot` ended; returns the barrier to forward now, if any.
    pub(crate) fn on_end(&mut self, slot: usize) -> Option<u64> {
        if let Some(e) = self.ended.get_mut(slot) {
            *e = true;
        }
        self.ready()
    }

    fn ready(&mut self) -> Option<u64> {
        let min = self
            .delivered
            .iter()
            .zip(&self.ended)
            .filter(|(_, ended)| !**ended)
            .map(|(d, _)| *d)
            .min()?;
        if min > self.forwarded {
            self.forwarded = min;
            Some(min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{CollectedFamily, SeriesValue};

    fn collect(c: &Checkpoints) -> Vec<CollectedFamily> {
        let mut writer = SeriesWriter::default();
        c.collect(&mut writer);
        writer.finish()
    }

    #[test]
    fn a_barrier_waits_for_every_open_input() {
        let mut a = BarrierAlignment::new(3);
        assert_eq!(a.on_barrier(0, 1), None);
        assert_eq!(a.on_barrier(1, 1), None);
        assert_eq!(a.on_barrier(0, 2), None);
        assert_eq!(a.on_barrier(2, 2), Some(1));
        assert_eq!(a.on_barrier(1, 2), Some(2));
        // Slot 1 runs ahead, then slot 0 ends: only slot 2 is waited for.
        assert_eq!(a.on_barrier(1, 3), None);
        assert_eq!(a.on_end(0), None);
        assert_eq!(a.on_barrier(2, 3), Some(3));
        // An input that ends after delivering a barrier does not make a later one ready.
        assert_eq!(a.on_barrier(2, 4), None);
        assert_eq!(a.on_end(2), None);
        assert_eq!(a.on_barrier(1, 4), Some(4));
    }

    #[test]
    fn checkpoints_pending_when_the_job_ends_failed() {
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 1);
        c.triggered(1);
        c.acknowledge(0, 1);
        c.triggered(2);
        c.triggered(3);
        assert_eq!((c.completed_total(), c.failed_total()), (1, 0));
        c.abandon_pending();
        assert_eq!((c.completed_total(), c.failed_total()), (1, 2));
        // Counted once; and a late acknowledgement completes nothing given up on.
        c.abandon_pending();
        c.acknowledge(0, 3);
        assert_eq!((c.completed_total(), c.failed_total()), (1, 2));
        let failed = collect(&c)
            .into_iter()
            .find(|f| f.family.name == "tidemark_checkpoints_failed_total")
            .unwrap();
        assert_eq!(failed.series[0].value, SeriesValue::Number(2.0));
    }

    #[test]
    fn complete_when_every_sink_acknowledged() {
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 2);
        c.triggered(1);
        c.triggered(2);
        c.acknowledge(0, 2);
        assert_eq!(c.completed(), 0);
        c.acknowledge(1, 1);
        assert_eq!(c.completed(), 1);
        assert_eq!(c.completed_total(), 1);
        c.sink_finished(1);
        assert_eq!(c.completed(), 2);
        assert_eq!(c.completed_total(), 2);
        let families = collect(&c);
        let names: Vec<&str> = families.iter().map(|f| f.family.name).collect();
        assert_eq!(
            names,
            [
                "tidemark_checkpoints_completed_total",
                "tidemark_checkpoints_failed_total",
                "tidemark_checkpoint_duration_seconds"
            ]
        );
        assert_eq!(families[0].series[0].value, SeriesValue::Number(2.0));
        assert_eq!(families[1].series[0].value, SeriesValue::Number(0.0));
        let SeriesValue::Histogram { buckets, count, .. } = &families[2].series[0].value else {
            panic!("{families:?}");
        };
        assert_eq!(*count, 2);
        assert_eq!(buckets.len(), DURATION_BUCKETS.len());
        assert!(families.iter().all(|f| f.series[0].labels.is_empty()));
        // Acknowledgements never run ahead of what the sources started.
        c.acknowledge(0, 9);
        assert_eq!(c.completed(), 2);
    }

    #[test]
    fn without_sinks_a_checkpoint_completes_when_it_starts() {
        let c = Checkpoints::new(Some(Duration::from_millis(5)), 0);
        c.triggered(3);
        assert_eq!(c.completed(), 3);
        assert!(collect(&Checkpoints::new(None, 1)).is_empty());
    }
}
