//! Sliding window of the most recent latency samples and its statistics (rules 15 and 16).

use std::num::NonZeroUsize;

/// The quantiles reported over the sliding window (rule 15), in ascending order.
pub const MARKER_QUANTILES: [f64; 6] = [0.5, 0.75, 0.95, 0.98, 0.99, 0.999];

/// Up to this many samples are allocated when a window is created; a window with a larger
/// history grows while it fills for the first time, then never allocates again.
const PREALLOCATED_SAMPLES_MAX: usize = 1 << 16;

/// `v` rounded to `digits` significant digits (1 to 17), so that interpolated quantiles and
/// means print as `0.0000018625`, not `0.0000018624999999999997` (floating-point noise from
/// dividing nanoseconds). NaN and infinities pass through; 0 stays 0.
///
/// ```
/// use tidemark_markers::round_significant;
///
/// assert_eq!(round_significant(1862.4999999999998e-9, 9).to_string(), "0.0000018625");
/// assert_eq!(round_significant(0.004427419999999993, 6), 0.00442742);
/// assert_eq!(round_significant(123_456.7, 3), 123_000.0);
/// assert!(round_significant(f64::NAN, 6).is_nan());
/// ```
pub fn round_significant(v: f64, digits: u32) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let digits = digits.clamp(1, 17) as usize;
    // Decimal scientific notation rounds correctly; parsing gives the nearest f64, whose
    // shortest representation is the rounded decimal.
    format!("{v:.*e}", digits - 1).parse().unwrap_or(v)
}

/// Estimates quantile `p` of `sorted` the way Apache Commons Math's "legacy" estimation does
/// (what Flink reports), exactly as rule 16 states.
///
/// With the samples sorted ascending as `x[1..n]` and `pos = p·(n+1)`: if `pos < 1` the result
/// is `x[1]`; if `pos ≥ n` it is `x[n]`; otherwise it interpolates linearly,
/// `x[⌊pos⌋] + (pos-⌊pos⌋)·(x[⌊pos⌋+1] - x[⌊pos⌋])`.
///
/// `sorted` must be sorted ascending. Returns NaN if `sorted` is empty or `p` is NaN.
///
/// ```
/// use tidemark_markers::legacy_quantile;
///
/// let x = [10.0, 20.0, 30.0, 40.0];
/// assert_eq!(legacy_quantile(&x, 0.5), 25.0); // pos 2.5
/// assert_eq!(legacy_quantile(&x, 0.1), 10.0); // pos 0.5 < 1
/// assert_eq!(legacy_quantile(&x, 0.9), 40.0); // pos 4.5 ≥ n
/// ```
pub fn legacy_quantile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 || p.is_nan() {
        return f64::NAN;
    }
    let pos = p * (n as f64 + 1.0);
    if pos < 1.0 {
        return sorted[0];
    }
    if pos >= n as f64 {
        return sorted[n - 1];
    }
    // Here 1 <= pos < n, so 1 <= ⌊pos⌋ <= n-1 and both neighbours exist.
    let floor = pos.floor();
    let lower = sorted[floor as usize - 1];
    let upper = sorted[floor as usize];
    lower + (pos - floor) * (upper - lower)
}

/// The last `history_size` latency samples of one key, plus the count of all samples ever
/// recorded (rule 15).
///
/// Recording never allocates once the window has been created (for histories up to 65 536
/// samples; a larger history allocates while it fills for the first time).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tidemark_markers::SlidingWindow;
///
/// let mut w = SlidingWindow::new(NonZeroUsize::new(3).unwrap());
/// for v in [5, 1, 9, 7] {
///     w.record(v);
/// }
/// assert_eq!((w.count(), w.len()), (4, 3)); // 5 has slid out
/// assert_eq!(w.stats().min, 1.0);
/// ```
#[derive(Clone, Debug)]
pub struct SlidingWindow {
    /// Ring buffer; holds `min(count, history_size)` samples.
    samples: Vec<i64>,
    /// Where the next sample goes once the buffer is full (the oldest sample).
    next: usize,
    history_size: NonZeroUsize,
    count: u64,
}

impl SlidingWindow {
    /// Creates an empty window keeping the last `history_size` samples.
    pub fn new(history_size: NonZeroUsize) -> Self {
        Self {
            samples: Vec::with_capacity(history_size.get().min(PREALLOCATED_SAMPLES_MAX)),
            next: 0,
            history_size,
            count: 0,
        }
    }

    /// Records `n` samples of the same value (a batch of records with one timestamp).
    pub fn record_n(&mut self, value: i64, n: u64) {
        let capacity = self.history_size.get();
        if n >= capacity as u64 {
            // The window ends up holding only this value: fill it in one go.
            self.samples.clear();
            self.samples.resize(capacity, value);
            self.next = 0;
            self.count = self.count.saturating_add(n);
            return;
        }
        for _ in 0..n {
            self.record(value);
        }
    }

    /// Records one sample, evicting the oldest once the window is full.
    pub fn record(&mut self, value: i64) {
        if self.samples.len() < self.history_size.get() {
            self.samples.push(value);
        } else {
            self.samples[self.next] = value;
            self.next += 1;
            if self.next == self.samples.len() {
                self.next = 0;
            }
        }
        self.count = self.count.saturating_add(1);
    }

    /// Number of samples recorded since creation, including those that have left the window.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Number of samples currently in the window: `min(count, history_size)`.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The samples currently in the window, oldest first (what [`stats`](Self::stats) is
    /// computed over). Does not allocate.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tidemark_markers::SlidingWindow;
    ///
    /// let mut w = SlidingWindow::new(NonZeroUsize::new(3).unwrap());
    /// for v in [5, 1, 9, 7] {
    ///     w.record(v);
    /// }
    /// assert_eq!(w.samples().collect::<Vec<_>>(), vec![1, 9, 7]);
    /// ```
    pub fn samples(&self) -> impl Iterator<Item = i64> + '_ {
        // Until the buffer is full, `next` stays 0 and the buffer is in recording order.
        let (newer, older) = self.samples.split_at(self.next);
        older.iter().chain(newer).copied()
    }

    /// The maximum number of samples the window keeps.
    pub fn history_size(&self) -> usize {
        self.history_size.get()
    }

    /// Min, max, mean, sample standard deviation and [`MARKER_QUANTILES`] over the samples in
    /// the window, in the unit of the samples (nanoseconds for latencies).
    ///
    /// For an empty window, `count` is 0 and every value is NaN. This allocates a sorted copy of
    /// the window; it is meant for reporting, not for the per-marker path.
    pub fn stats(&self) -> WindowStats {
        let n = self.samples.len();
        if n == 0 {
            return WindowStats::empty(self.count);
        }
        let mut sorted: Vec<f64> = self.samples.iter().map(|&v| v as f64).collect();
        sorted.sort_unstable_by(f64::total_cmp);

        let len = n as f64;
        // The integer sum is exact, so the mean is rounded only once.
        let sum: i128 = self.samples.iter().map(|&v| i128::from(v)).sum();
        let mean = sum as f64 / len;
        // Bias-corrected two-pass variance, as Commons Math computes it.
        let stddev = if n < 2 {
            0.0
        } else {
            let (squares, deviations) = sorted.iter().fold((0.0, 0.0), |(sq, dev), x| {
                let d = x - mean;
                (sq + d * d, dev + d)
            });
            ((squares - deviations * deviations / len) / (len - 1.0))
                .max(0.0)
                .sqrt()
        };

        WindowStats {
            count: self.count,
            window_len: n,
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            stddev,
            quantiles: MARKER_QUANTILES.map(|p| (p, legacy_quantile(&sorted, p))),
        }
    }
}

/// Statistics over one sliding window, in the unit of the samples (nanoseconds for latencies).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowStats {
    /// Number of samples recorded since start, not only those in the window.
    pub count: u64,
    /// Number of samples in the window.
    pub window_len: usize,
    /// Smallest sample in the window.
    pub min: f64,
    /// Largest sample in the window.
    pub max: f64,
    /// Arithmetic mean of the window.
    pub mean: f64,
    /// Sample standard deviation (divisor `n-1`) of the window; 0 for a single sample.
    pub stddev: f64,
    /// `(p, value)` for each `p` of [`MARKER_QUANTILES`], estimated by [`legacy_quantile`].
    pub quantiles: [(f64, f64); 6],
}

impl WindowStats {
    /// Statistics of a window holding no sample: every value is NaN.
    fn empty(count: u64) -> Self {
        Self {
            count,
            window_len: 0,
            min: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            stddev: f64::NAN,
            quantiles: MARKER_QUANTILES.map(|p| (p, f64::NAN)),
        }
    }

    /// The value of quantile `p`, if `p` is one of [`MARKER_QUANTILES`].
    pub fn quantile(&self, p: f64) -> Option<f64> {
        self.quantiles
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-12)
            .map(|&(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(history: usize) -> SlidingWindow {
        SlidingWindow::new(NonZeroUsize::new(history).unwrap())
    }

    /// Worked case: history 10, samples 0..9 then 10..19.
    #[test]
    fn worked_case_history_10_samples_0_to_19() {
        let mut w = window(10);
        for i in 0..10_i64 {
            w.record(i);
            let s = w.stats();
            assert_eq!(s.count, i as u64 + 1, "count after sample {i}");
            assert_eq!(s.window_len, i as usize + 1);
            assert_eq!(s.min, 0.0, "min after sample {i}");
            assert_eq!(s.max, i as f64, "max after sample {i}");
        }
        assert_eq!(w.stats().quantile(0.5), Some(4.5));

        for i in 10..20_i64 {
            w.record(i);
            let s = w.stats();
            assert_eq!(s.count, i as u64 + 1, "count after sample {i}");
            assert_eq!(s.window_len, 10, "window length after sample {i}");
            assert_eq!(s.min, (i - 9) as f64, "min after sample {i}");
            assert_eq!(s.max, i as f64, "max after sample {i}");
        }
        assert_eq!(w.count(), 20);
        assert_eq!(w.len(), 10);
        assert_eq!(w.stats().quantile(0.5), Some(14.5));
    }

    #[test]
    fn legacy_quantile_edge_cases() {
        let x = [10.0, 20.0, 30.0, 40.0]; // n = 4, pos = 5p
                                          // pos < 1 -> x[1]
        assert_eq!(legacy_quantile(&x, 0.1), 10.0); // pos 0.5
        assert_eq!(legacy_quantile(&x, 0.0), 10.0);
        // pos == 1 -> x[1] + 0
        assert_eq!(legacy_quantile(&x, 0.2), 10.0);
        // interpolation
        assert_eq!(legacy_quantile(&x, 0.25), 12.5); // pos 1.25: 10 + 0.25*10
        assert_eq!(legacy_quantile(&x, 0.5), 25.0); // pos 2.5: 20 + 0.5*10
        assert_eq!(legacy_quantile(&x, 0.75), 37.5); // pos 3.75: 30 + 0.75*10
                                                     // pos >= n -> x[n]
        assert_eq!(legacy_quantile(&x, 0.8), 40.0); // pos 4.0
        assert_eq!(legacy_quantile(&x, 0.95), 40.0); // pos 4.75
        assert_eq!(legacy_quantile(&x, 1.0), 40.0);
        // one sample: every quantile is that sample
        for p in MARKER_QUANTILES {
            assert_eq!(legacy_quantile(&[7.0], p), 7.0);
        }
        assert!(legacy_quantile(&[], 0.5).is_nan());
        assert!(legacy_quantile(&x, f64::NAN).is_nan());
    }

    #[test]
    fn legacy_quantile_interpolates_uneven_gaps() {
        // n = 5, pos = 6p. p = 0.75 -> pos 4.5: x[4] + 0.5*(x[5]-x[4]) = 8 + 0.5*92 = 54.
        let x = [1.0, 2.0, 4.0, 8.0, 100.0];
        assert_eq!(legacy_quantile(&x, 0.75), 54.0);
        // p = 0.5 -> pos 3.0 exactly: x[3] = 4.
        assert_eq!(legacy_quantile(&x, 0.5), 4.0);
    }

    #[test]
    fn all_marker_quantiles_over_1_to_1000() {
        let mut w = window(1000);
        for v in 1..=1000 {
            w.record(v);
        }
        let s = w.stats();
        // pos = p * 1001 and x[k] = k, so the estimate is pos itself while 1 <= pos < 1000.
        assert_eq!(s.quantile(0.5), Some(500.5));
        assert!((s.quantile(0.75).unwrap() - 750.75).abs() < 1e-9);
        assert!((s.quantile(0.95).unwrap() - 950.95).abs() < 1e-9);
        assert!((s.quantile(0.98).unwrap() - 980.98).abs() < 1e-9);
        assert!((s.quantile(0.99).unwrap() - 990.99).abs() < 1e-9);
        // 0.999 * 1001 = 999.999 < 1000: interpolated between 999 and 1000.
        assert!((s.quantile(0.999).unwrap() - 999.999).abs() < 1e-9);
        assert_eq!(s.quantile(0.9), None);
        assert_eq!(s.quantiles.map(|(p, _)| p), MARKER_QUANTILES);
    }

    #[test]
    fn mean_and_sample_stddev() {
        let mut w = window(16);
        for v in [2, 4, 4, 4, 5, 5, 7, 9] {
            w.record(v);
        }
        let s = w.stats();
        assert_eq!(s.mean, 5.0);
        // Squared deviations from 5: 9+1+1+1+0+0+4+16 = 32; sample variance 32/7.
        let expected = 2.138_089_935_299_395; // sqrt(32/7)
        assert!((s.stddev - expected).abs() < 1e-12, "stddev {}", s.stddev);
        assert_eq!((s.min, s.max), (2.0, 9.0));
    }

    #[test]
    fn stddev_is_zero_for_one_sample_and_nan_when_empty() {
        let mut w = window(4);
        let empty = w.stats();
        assert!(w.is_empty());
        assert_eq!(empty.count, 0);
        assert_eq!(empty.window_len, 0);
        assert!(empty.min.is_nan() && empty.max.is_nan() && empty.mean.is_nan());
        assert!(empty.stddev.is_nan());
        assert!(empty.quantiles.iter().all(|(_, v)| v.is_nan()));

        w.record(-3);
        let one = w.stats();
        assert_eq!(one.stddev, 0.0);
        assert_eq!((one.min, one.max, one.mean), (-3.0, -3.0, -3.0));
        assert_eq!(one.quantile(0.999), Some(-3.0));
    }

    #[test]
    fn window_keeps_exactly_the_last_samples() {
        let mut w = window(3);
        for v in [100, 1, 2, 3, -50, 4] {
            w.record(v);
        }
        // Last three: 3, -50, 4.
        let s = w.stats();
        assert_eq!(w.history_size(), 3);
        assert_eq!((s.count, s.window_len), (6, 3));
        assert_eq!((s.min, s.max), (-50.0, 4.0));
        assert_eq!(s.mean, -43.0 / 3.0);
    }

    #[test]
    fn samples_are_the_window_oldest_first() {
        let mut w = window(4);
        assert_eq!(w.samples().count(), 0);
        for v in 0..3 {
            w.record(v);
        }
        assert_eq!(w.samples().collect::<Vec<_>>(), vec![0, 1, 2]);
        for v in 3..10 {
            w.record(v);
            let expected: Vec<i64> = ((v - 3).max(0)..=v).collect();
            assert_eq!(w.samples().collect::<Vec<_>>(), expected, "after {v}");
        }
        // The statistics are computed over exactly these samples.
        let mut sorted: Vec<f64> = w.samples().map(|v| v as f64).collect();
        sorted.sort_unstable_by(f64::total_cmp);
        assert_eq!(w.stats().quantile(0.5), Some(legacy_quantile(&sorted, 0.5)));
    }

    #[test]
    fn history_of_one_keeps_the_latest_sample() {
        let mut w = window(1);
        w.record(9);
        w.record(4);
        let s = w.stats();
        assert_eq!((s.count, s.window_len, s.min, s.max), (2, 1, 4.0, 4.0));
    }

    #[test]
    fn recording_does_not_reallocate() {
        let mut w = window(128);
        let before = w.samples.as_ptr();
        for v in 0..1_000 {
            w.record(v);
        }
        assert_eq!(w.samples.as_ptr(), before);
        assert!(w.samples.capacity() >= 128);
    }
}
