//! Latency statistics of one key and of all keys of an operator subtask (rules 12 to 15).

use std::collections::btree_map::{BTreeMap, Entry};
use std::num::NonZeroUsize;

use crate::buckets::Buckets;
use crate::granularity::{Granularity, LatencyKey};
use crate::histogram::LatencyHistogram;
use crate::marker::LatencyMarker;
use crate::window::{SlidingWindow, WindowStats};

/// Everything recorded for one latency key: a sliding window of recent samples, a histogram of
/// all samples and the number of negative samples.
///
/// Samples are recorded as given, never clamped (rule 13).
#[derive(Clone, Debug)]
pub struct LatencyStats {
    window: SlidingWindow,
    histogram: LatencyHistogram,
    negative_count: u64,
}

impl LatencyStats {
    /// Creates empty statistics whose window keeps the last `history_size` samples, with the
    /// default marker-latency buckets.
    pub fn new(history_size: NonZeroUsize) -> Self {
        Self::with_buckets(history_size, Buckets::marker_latency())
    }

    /// Creates empty statistics whose histogram counts exactly in `buckets`.
    pub fn with_buckets(history_size: NonZeroUsize, buckets: Buckets) -> Self {
        Self {
            window: SlidingWindow::new(history_size),
            histogram: LatencyHistogram::with_buckets(buckets),
            negative_count: 0,
        }
    }

    /// Records one latency in nanoseconds; a negative latency is also counted in
    /// [`negative_count`](Self::negative_count).
    /// Records `n` samples of the same latency.
    pub fn record_n(&mut self, latency_nanos: i64, n: u64) {
        if n == 0 {
            return;
        }
        self.window.record_n(latency_nanos, n);
        self.histogram.record_n(latency_nanos, n);
        if latency_nanos < 0 {
            self.negative_count += n;
        }
    }

    /// Records `now - timestamp` for a batch of records read at `now`, one histogram update
    /// per run of equal timestamps (a source stamps a whole batch with one time).
    pub fn record_batch<I: IntoIterator<Item = i64>>(&mut self, now_nanos: i64, timestamps: I) {
        let mut iter = timestamps.into_iter();
        let Some(mut current) = iter.next() else {
            return;
        };
        let mut run = 1u64;
        for ts in iter {
            if ts == current {
                run += 1;
            } else {
                self.record_n(now_nanos - current, run);
                current = ts;
                run = 1;
            }
        }
        self.record_n(now_nanos - current, run);
    }

    /// Records one latency sample (not clamped; a negative one is also counted).
    pub fn record(&mut self, latency_nanos: i64) {
        self.window.record(latency_nanos);
        self.histogram.record(latency_nanos);
        if latency_nanos < 0 {
            self.negative_count += 1;
        }
    }

    /// The sliding window of recent samples.
    pub fn window(&self) -> &SlidingWindow {
        &self.window
    }

    /// Statistics over the sliding window, in nanoseconds.
    pub fn window_stats(&self) -> WindowStats {
        self.window.stats()
    }

    /// The distribution of all samples since start.
    pub fn histogram(&self) -> &LatencyHistogram {
        &self.histogram
    }

    /// Number of negative samples recorded (clock skew between machines).
    pub fn negative_count(&self) -> u64 {
        self.negative_count
    }

    /// Number of samples recorded since start.
    pub fn count(&self) -> u64 {
        self.window.count()
    }

    /// Exact sum of all samples since start, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.histogram.sum_seconds()
    }
}

/// The latency statistics of one operator subtask: one [`LatencyStats`] per key, the key being
/// chosen by the [`Granularity`] (rule 14). An operator with several inputs uses one tracker
/// for all of them (rule 12).
///
/// Recording allocates only when a marker brings a key not seen before.
///
/// ```
/// use std::num::NonZeroUsize;
/// use tidemark_markers::{Granularity, LatencyKey, LatencyMarker, LatencyTracker};
///
/// let mut tracker = LatencyTracker::new(Granularity::Operator, NonZeroUsize::new(128).unwrap());
/// tracker.record(&LatencyMarker::new(1_000, 0, 3), 4_000);
/// let key = LatencyKey { source_id: Some(0), source_subtask: None, origin: 0 };
/// assert_eq!(tracker.get(&key).unwrap().window_stats().max, 3_000.0);
/// ```
#[derive(Clone, Debug)]
pub struct LatencyTracker {
    granularity: Granularity,
    history_size: NonZeroUsize,
    buckets: Buckets,
    stats: BTreeMap<LatencyKey, LatencyStats>,
    total_count: u64,
}

impl LatencyTracker {
    /// Creates a tracker with no series yet, with the default marker-latency buckets.
    pub fn new(granularity: Granularity, history_size: NonZeroUsize) -> Self {
        Self::with_buckets(granularity, history_size, Buckets::marker_latency())
    }

    /// Creates a tracker whose keys' histograms count exactly in `buckets`.
    pub fn with_buckets(
        granularity: Granularity,
        history_size: NonZeroUsize,
        buckets: Buckets,
    ) -> Self {
        Self {
            granularity,
            history_size,
            buckets,
            stats: BTreeMap::new(),
            total_count: 0,
        }
    }

    /// Records the latency `now_nanos - marker.marked_time` under the marker's key.
    pub fn record(&mut self, marker: &LatencyMarker, now_nanos: i64) {
        let latency = marker.latency_at(now_nanos);
        let stats = match self.stats.entry(self.granularity.key_for(marker)) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(LatencyStats::with_buckets(
                self.history_size,
                self.buckets.clone(),
            )),
        };
        stats.record(latency);
        self.total_count += 1;
    }

    /// The granularity that chooses the keys.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// The history size of every key's sliding window.
    pub fn history_size(&self) -> NonZeroUsize {
        self.history_size
    }

    /// The buckets of every key's histogram.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Number of keys (series) seen so far.
    pub fn len(&self) -> usize {
        self.stats.len()
    }

    /// Whether no marker has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.stats.is_empty()
    }

    /// Every key with its statistics, in ascending key order.
    pub fn iter(&self) -> impl Iterator<Item = (&LatencyKey, &LatencyStats)> {
        self.stats.iter()
    }

    /// The statistics of one key, if a marker has been recorded under it.
    pub fn get(&self, key: &LatencyKey) -> Option<&LatencyStats> {
        self.stats.get(key)
    }

    /// Number of markers recorded over all keys.
    pub fn total_count(&self) -> u64 {
        self.total_count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: u32 = 1;
    const S2: u32 = 2;

    fn history(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    fn key(source_id: Option<u32>, source_subtask: Option<u32>) -> LatencyKey {
        LatencyKey {
            source_id,
            source_subtask,
            origin: 0,
        }
    }

    /// Worked case: operator subtask 64, history 128, five markers stamped 0 from
    /// (S1,0), (S1,0), (S1,1), (S2,2), (S2,3).
    fn five_markers(granularity: Granularity) -> Vec<(LatencyKey, u64)> {
        let mut tracker = LatencyTracker::new(granularity, history(128));
        let origins = [(S1, 0), (S1, 0), (S1, 1), (S2, 2), (S2, 3)];
        for (i, (source, subtask)) in origins.into_iter().enumerate() {
            tracker.record(
                &LatencyMarker::new(0, source, subtask),
                1_000 * (i as i64 + 1),
            );
        }
        assert_eq!(tracker.total_count(), 5);
        assert_eq!(tracker.granularity(), granularity);
        tracker.iter().map(|(k, s)| (*k, s.count())).collect()
    }

    #[test]
    fn worked_case_five_markers_single() {
        assert_eq!(
            five_markers(Granularity::Single),
            vec![(key(None, None), 5)]
        );
    }

    #[test]
    fn worked_case_five_markers_operator() {
        assert_eq!(
            five_markers(Granularity::Operator),
            vec![(key(Some(S1), None), 3), (key(Some(S2), None), 2)]
        );
    }

    #[test]
    fn worked_case_five_markers_subtask() {
        assert_eq!(
            five_markers(Granularity::Subtask),
            vec![
                (key(Some(S1), Some(0)), 2),
                (key(Some(S1), Some(1)), 1),
                (key(Some(S2), Some(2)), 1),
                (key(Some(S2), Some(3)), 1),
            ]
        );
    }

    #[test]
    fn tracker_records_now_minus_marked_time() {
        let mut tracker = LatencyTracker::new(Granularity::Single, history(8));
        assert!(tracker.is_empty());
        tracker.record(&LatencyMarker::new(1_000, 0, 0), 1_250);
        tracker.record(&LatencyMarker::new(2_000, 5, 1), 2_750);
        assert_eq!(tracker.len(), 1);
        let stats = tracker.get(&LatencyKey::SINGLE).unwrap();
        let w = stats.window_stats();
        assert_eq!((w.min, w.max, w.mean), (250.0, 750.0, 500.0));
        assert!((stats.sum_seconds() - 1e-6).abs() < 1e-18);
        assert!(tracker.get(&key(Some(0), None)).is_none());
    }

    #[test]
    fn negative_latency_is_counted_and_kept_as_min() {
        let mut tracker = LatencyTracker::new(Granularity::Operator, history(128));
        // The receiving clock is 400 ns behind the source's.
        tracker.record(&LatencyMarker::new(10_000, 3, 0), 9_600);
        tracker.record(&LatencyMarker::new(10_000, 3, 0), 10_900);
        tracker.record(&LatencyMarker::new(10_000, 3, 0), 10_100);
        let stats = tracker.get(&key(Some(3), None)).unwrap();
        assert_eq!(stats.negative_count(), 1);
        assert_eq!(stats.count(), 3);
        let w = stats.window_stats();
        assert_eq!(w.min, -400.0);
        assert_eq!(w.max, 900.0);
        // -400 + 900 + 100 = 600 ns, not clamped.
        assert!((stats.sum_seconds() - 600e-9).abs() < 1e-18);
        // The histogram holds the negative sample as 0.
        assert_eq!(stats.histogram().cumulative_buckets(&[0.0]), vec![(0.0, 1)]);
        assert_eq!(stats.histogram().count(), 3);
    }

    #[test]
    fn stats_parts_agree() {
        let mut stats = LatencyStats::new(history(2));
        for v in [5, -1, 7, 9] {
            stats.record(v);
        }
        assert_eq!(stats.count(), 4);
        assert_eq!(stats.window().len(), 2);
        assert_eq!(stats.window_stats().min, 7.0);
        assert_eq!(stats.histogram().count(), 4);
        assert_eq!(stats.negative_count(), 1);
    }

    #[test]
    fn recording_a_known_key_keeps_its_series() {
        let mut tracker = LatencyTracker::new(Granularity::Subtask, history(4));
        let marker = LatencyMarker::new(0, 1, 1);
        for now in 1..=10 {
            tracker.record(&marker, now);
        }
        assert_eq!(tracker.len(), 1);
        assert_eq!(tracker.history_size().get(), 4);
        let w = tracker.get(&key(Some(1), Some(1))).unwrap().window_stats();
        assert_eq!((w.count, w.window_len, w.min, w.max), (10, 4, 7.0, 10.0));
    }

    #[test]
    fn record_batch_equals_recording_one_by_one() {
        let h = NonZeroUsize::new(8).unwrap();
        let (mut batched, mut single) = (LatencyStats::new(h), LatencyStats::new(h));
        let now = 1_000;
        let ts = [
            10, 10, 10, 500, 500, 2_000, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
        ];
        batched.record_batch(now, ts.iter().copied());
        for t in ts {
            single.record(now - t);
        }
        assert_eq!(batched.count(), 16);
        assert_eq!(batched.negative_count(), 1);
        assert_eq!(batched.window_stats(), single.window_stats());
        assert_eq!(batched.sum_seconds(), single.sum_seconds());
        assert_eq!(batched.histogram().count(), single.histogram().count());
        let samples: Vec<i64> = batched.window().samples().collect();
        let expected: Vec<i64> = single.window().samples().collect();
        assert_eq!(samples, expected);
    }
}
