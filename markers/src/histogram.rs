//! Cumulative latency distribution since start, in an HDR histogram (rule 17).

use hdrhistogram::Histogram;

use crate::buckets::Buckets;

/// Significant decimal digits kept by the histogram: values are exact below 256 ns and within
/// 1% above.
const SIGNIFICANT_DIGITS: u8 = 2;

/// Largest value, in nanoseconds, the histogram can hold when created (60 s). Larger latencies
/// make it grow, once per doubling of the largest value seen.
const PRESIZED_MAX_NANOS: u64 = 60_000_000_000;

const NANOS_PER_SECOND: f64 = 1e9;

/// The distribution of all latencies recorded since start, for export as a Prometheus
/// histogram that can be aggregated across subtasks and time ranges (rule 17).
///
/// Values are kept in nanoseconds in an `hdrhistogram::Histogram<u64>` with 2 significant digits
/// and auto-resize on, so memory stays bounded (about 30 KiB, sized up front for latencies up
/// to 60 s so that recording does not allocate). Beside it, the histogram counts every sample
/// exactly in its export [`Buckets`] (by default [`Buckets::marker_latency`]), so a scrape does
/// not walk the HDR histogram. Negative samples (clock skew) are recorded as 0 but counted with
/// their real value in [`sum_seconds`](Self::sum_seconds).
///
/// ```
/// use tidemark_markers::LatencyHistogram;
///
/// let mut h = LatencyHistogram::new();
/// h.record(2_000_000); // 2 ms
/// h.record(-500); // clock skew: recorded as 0
/// assert_eq!(h.count(), 2);
/// assert_eq!(h.cumulative_buckets(&[0.001, 0.01]), vec![(0.001, 1), (0.01, 2)]);
///
/// // Histograms of several subtasks merge into one (HDR's `add`).
/// let mut other = LatencyHistogram::new();
/// other.record(7_000_000);
/// h.add(&other)?;
/// assert_eq!(h.count(), 3);
/// assert_eq!(h.exported_buckets().iter().find(|b| b.0 == 0.01), Some(&(0.01, 3)));
/// # Ok::<(), tidemark_markers::HistogramAddError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    histogram: Histogram<u64>,
    sum_nanos: i128,
    buckets: Buckets,
    /// Exact sample counts per bucket (not cumulative); the last slot is above the top bound.
    bucket_counts: Box<[u64]>,
}

/// Two histograms with different export buckets cannot be added.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot add histograms with different buckets ({left} and {right} bounds)")]
pub struct HistogramAddError {
    /// Number of bounds of the histogram added to.
    pub left: usize,
    /// Number of bounds of the histogram added.
    pub right: usize,
}

impl LatencyHistogram {
    /// Creates an empty histogram with the default marker-latency buckets.
    pub fn new() -> Self {
        Self::with_buckets(Buckets::marker_latency())
    }

    /// Creates an empty histogram counting exactly in `buckets`.
    pub fn with_buckets(buckets: Buckets) -> Self {
        let mut histogram = Histogram::new_with_bounds(1, PRESIZED_MAX_NANOS, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        histogram.auto(true);
        let bucket_counts = vec![0; buckets.len() + 1].into_boxed_slice();
        Self {
            histogram,
            sum_nanos: 0,
            buckets,
            bucket_counts,
        }
    }

    /// The export buckets.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Records `n` samples of the same latency in nanoseconds; a negative value goes into the
    /// histogram as 0.
    pub fn record_n(&mut self, nanos: i64, n: u64) {
        let clamped = u64::try_from(nanos).unwrap_or(0);
        self.bucket_counts[self.buckets.index_of(clamped)] += n;
        if self.histogram.record_n(clamped, n).is_err() {
            self.histogram.saturating_record_n(clamped, n);
        }
        self.sum_nanos += i128::from(nanos) * i128::from(n);
    }

    /// Records one sample; a negative one counts as 0 in the buckets but exactly in the sum.
    pub fn record(&mut self, nanos: i64) {
        self.record_n(nanos, 1);
    }

    /// Adds every sample of `other` to this histogram (the HDR histograms with
    /// `hdrhistogram`'s `add`, the exact bucket counts and the sums), as if they had been
    /// recorded here: how the histograms of several subtasks become one.
    ///
    /// # Errors
    /// When the two have different [`Buckets`]; then nothing changes.
    pub fn add(&mut self, other: &LatencyHistogram) -> Result<(), HistogramAddError> {
        if self.buckets != other.buckets {
            return Err(HistogramAddError {
                left: self.buckets.len(),
                right: other.buckets.len(),
            });
        }
        if self.histogram.add(&other.histogram).is_err() {
            // Only without auto-resize, which is always on; add sample by sample instead.
            for v in other.histogram.iter_recorded() {
                self.histogram
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
        for (mine, theirs) in self
            .bucket_counts
            .iter_mut()
            .zip(other.bucket_counts.iter())
        {
            *mine += theirs;
        }
        self.sum_nanos += other.sum_nanos;
        Ok(())
    }

    /// The cumulative counts at the export [`buckets`](Self::buckets), exact (one increment per
    /// sample), as `(bound in seconds, count)` pairs. This is what the Prometheus exporter
    /// serves; samples above the top bound are only in `+Inf` ([`count`](Self::count)).
    pub fn exported_buckets(&self) -> Vec<(f64, u64)> {
        let mut cumulative = 0u64;
        self.buckets
            .seconds()
            .iter()
            .zip(self.bucket_counts.iter())
            .map(|(&bound, &count)| {
                cumulative += count;
                (bound, cumulative)
            })
            .collect()
    }

    /// Number of samples recorded.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Exact sum of all recorded samples in seconds, negative samples included with their real
    /// value.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_nanos as f64 / NANOS_PER_SECOND
    }

    /// For each upper bound (in seconds), the number of samples at or below it, as
    /// `(bound, count)` pairs in the order given.
    ///
    /// For ascending `bounds_seconds` the counts are non-decreasing and never exceed
    /// [`count`](Self::count); an infinite bound counts every sample. Counts are exact below
    /// 256 ns; above, a sample within the histogram's 1% resolution just above a bound may be
    /// counted in that bound's bucket.
    pub fn cumulative_buckets(&self, bounds_seconds: &[f64]) -> Vec<(f64, u64)> {
        let ascending = bounds_seconds.windows(2).all(|w| w[0] <= w[1]);
        if !ascending || self.histogram.is_empty() {
            return bounds_seconds
                .iter()
                .map(|&bound| (bound, self.count_at_or_below(bound)))
                .collect();
        }
        // One ascending pass over the recorded buckets (a scrape calls this for every key).
        let max = self.histogram.max() as f64;
        let mut result = Vec::with_capacity(bounds_seconds.len());
        let mut recorded = self.histogram.iter_recorded().peekable();
        let mut below = 0u64;
        for &bound in bounds_seconds {
            if bound.is_nan() || bound < 0.0 {
                result.push((bound, 0));
                continue;
            }
            let bound_nanos = (bound * NANOS_PER_SECOND).round();
            if bound_nanos >= max {
                result.push((bound, self.count()));
                continue;
            }
            let bound_nanos = bound_nanos as u64;
            while let Some(v) = recorded.peek() {
                if self.histogram.lowest_equivalent(v.value_iterated_to()) > bound_nanos {
                    break;
                }
                below += v.count_at_value();
                recorded.next();
            }
            result.push((bound, below));
        }
        result
    }

    /// Number of samples at or below `bound_seconds`.
    fn count_at_or_below(&self, bound_seconds: f64) -> u64 {
        if bound_seconds.is_nan() || bound_seconds < 0.0 || self.histogram.is_empty() {
            return 0;
        }
        let bound_nanos = (bound_seconds * NANOS_PER_SECOND).round();
        if bound_nanos >= self.histogram.max() as f64 {
            return self.count();
        }
        self.histogram.count_between(0, bound_nanos as u64)
    }

    /// The latency at quantile `q` (0 to 1) of all samples, in seconds, to within the histogram's
    /// resolution; negative samples count as 0. NaN when nothing has been recorded.
    pub fn value_at_quantile_seconds(&self, q: f64) -> f64 {
        if self.histogram.is_empty() {
            return f64::NAN;
        }
        self.histogram.value_at_quantile(q.clamp(0.0, 1.0)) as f64 / NANOS_PER_SECOND
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::{E2E_LATENCY_BUCKETS_SECONDS, MARKER_LATENCY_BUCKETS_SECONDS};
    use std::time::Duration;

    const DEFAULT_BUCKETS_SECONDS: &[f64] = MARKER_LATENCY_BUCKETS_SECONDS;

    fn histogram_of(samples: &[i64]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &s in samples {
            h.record(s);
        }
        h
    }

    #[test]
    fn default_buckets_are_cumulative_with_known_counts() {
        // 0, 5 µs, 10 µs, 100 µs, 1 ms, 2 s and a negative sample (recorded as 0).
        let samples = [0, 5_000, 10_000, 100_000, 1_000_000, 2_000_000_000, -3];
        let h = histogram_of(&samples);
        assert_eq!(h.count(), 7);
        let buckets = h.cumulative_buckets(DEFAULT_BUCKETS_SECONDS);
        assert_eq!(buckets.len(), DEFAULT_BUCKETS_SECONDS.len());
        for (i, &(le, count)) in buckets.iter().enumerate() {
            assert_eq!(le, DEFAULT_BUCKETS_SECONDS[i]);
            let expected = samples
                .iter()
                .filter(|&&s| s.max(0) as f64 <= le * 1e9)
                .count() as u64;
            assert_eq!(count, expected, "le {le}");
        }
        // 0 and -3 in the first bucket (1 µs), all but 2 s at or below 1 ms.
        assert_eq!(buckets[0], (0.000001, 2));
        assert_eq!(
            h.cumulative_buckets(&[0.001, 1.0, 2.5]),
            [(0.001, 6), (1.0, 6), (2.5, 7)]
        );
    }

    #[test]
    fn marker_buckets_resolve_chained_operators_and_stalls() {
        // 100 ns (a chained operator), 3 µs, 40 minutes (a stalled pipeline), 2 hours.
        let mut h = LatencyHistogram::new();
        for s in [100, 3_000, 2_400_000_000_000, 7_200_000_000_000] {
            h.record(s);
        }
        let b = h.exported_buckets();
        assert_eq!(b.first(), Some(&(0.000001, 1)));
        assert_eq!(b.iter().find(|x| x.0 == 0.000005), Some(&(0.000005, 2)));
        assert_eq!(b.iter().find(|x| x.0 == 1800.0), Some(&(1800.0, 2)));
        assert_eq!(b.last(), Some(&(3600.0, 3)));
        assert_eq!(h.count(), 4, "2 h is only in +Inf");
    }

    #[test]
    fn e2e_buckets_hold_replays_of_old_data() {
        let mut h = LatencyHistogram::with_buckets(Buckets::e2e_latency());
        // 300 µs, 3 days, 8 days.
        for s in [300_000, 3 * 86_400_000_000_000, 8 * 86_400_000_000_000] {
            h.record(s);
        }
        let b = h.exported_buckets();
        assert_eq!(b.len(), E2E_LATENCY_BUCKETS_SECONDS.len());
        assert_eq!(b[0], (0.001, 1));
        assert_eq!(b.iter().find(|x| x.0 == 172_800.0), Some(&(172_800.0, 1)));
        assert_eq!(b.last(), Some(&(604_800.0, 2)));
        assert_eq!(h.count(), 3);
    }

    #[test]
    fn custom_buckets_count_exactly() {
        let buckets = Buckets::new(&[Duration::from_millis(1), Duration::from_secs(1)]).unwrap();
        let mut h = LatencyHistogram::with_buckets(buckets.clone());
        for s in [1_000_000, 1_000_001, 999_999_999, 1_000_000_001] {
            h.record(s);
        }
        assert_eq!(h.buckets(), &buckets);
        assert_eq!(h.exported_buckets(), [(0.001, 1), (1.0, 3)]);
    }

    #[test]
    fn add_equals_recording_everything_in_one() {
        let a_samples = [-7, 0, 900, 5_000, 3_000_000, 90_000_000_000];
        let b_samples = [1, 250_000, 3_000_000, 4_000_000_000_000];
        let mut a = histogram_of(&a_samples);
        let b = histogram_of(&b_samples);
        let all: Vec<i64> = a_samples.iter().chain(&b_samples).copied().collect();
        let one = histogram_of(&all);
        a.add(&b).unwrap();
        assert_eq!(a.count(), one.count());
        assert_eq!(a.sum_seconds(), one.sum_seconds());
        assert_eq!(a.exported_buckets(), one.exported_buckets());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(
                a.value_at_quantile_seconds(q),
                one.value_at_quantile_seconds(q),
                "q {q}"
            );
        }
        // The added histogram is unchanged.
        assert_eq!(b.count(), 4);
    }

    #[test]
    fn add_refuses_different_buckets() {
        let mut marker = histogram_of(&[1_000]);
        let mut e2e = LatencyHistogram::with_buckets(Buckets::e2e_latency());
        e2e.record(5_000_000);
        let err = marker.add(&e2e).unwrap_err();
        assert_eq!(
            err,
            HistogramAddError {
                left: MARKER_LATENCY_BUCKETS_SECONDS.len(),
                right: E2E_LATENCY_BUCKETS_SECONDS.len()
            }
        );
        assert_eq!(marker.count(), 1, "nothing changed");
        assert_eq!(marker.sum_seconds(), 1e-6);
    }

    #[test]
    fn bucket_edges_and_special_bounds() {
        let h = histogram_of(&[100, 200, 255]);
        // Exact resolution below 256 ns.
        assert_eq!(
            h.cumulative_buckets(&[0.0, 99e-9, 100e-9, 199e-9, 200e-9, 255e-9]),
            vec![
                (0.0, 0),
                (99e-9, 0),
                (100e-9, 1),
                (199e-9, 1),
                (200e-9, 2),
                (255e-9, 3)
            ]
        );
        assert_eq!(h.cumulative_buckets(&[f64::INFINITY])[0].1, 3);
        assert_eq!(h.cumulative_buckets(&[-1.0])[0].1, 0);
        assert_eq!(h.cumulative_buckets(&[f64::NAN])[0].1, 0);
        assert!(LatencyHistogram::new()
            .cumulative_buckets(DEFAULT_BUCKETS_SECONDS)
            .iter()
            .all(|&(_, c)| c == 0));
    }

    #[test]
    fn sum_is_exact_and_keeps_negative_values() {
        let h = histogram_of(&[0, 5_000, 10_000, 100_000, 1_000_000, 2_000_000_000, -3]);
        // 2_001_114_997 ns in total.
        assert!((h.sum_seconds() - 2.001_114_997).abs() < 1e-15);
        let negative_only = histogram_of(&[-1_500_000_000]);
        assert_eq!(negative_only.sum_seconds(), -1.5);
        assert_eq!(negative_only.cumulative_buckets(&[0.0]), vec![(0.0, 1)]);
    }

    #[test]
    fn large_values_grow_the_histogram() {
        // 100 s is beyond the presized range; auto-resize keeps it.
        let h = histogram_of(&[1_000, 100_000_000_000]);
        assert_eq!(h.count(), 2);
        assert_eq!(
            h.cumulative_buckets(&[60.0, 120.0]),
            vec![(60.0, 1), (120.0, 2)]
        );
        let max = h.value_at_quantile_seconds(1.0);
        assert!((max - 100.0).abs() / 100.0 < 0.01, "max {max}");
    }

    #[test]
    fn quantiles_within_resolution() {
        let samples: Vec<i64> = (1..=100).map(|ms| ms * 1_000_000).collect();
        let h = histogram_of(&samples);
        let median = h.value_at_quantile_seconds(0.5);
        assert!((median - 0.050).abs() / 0.050 < 0.01, "median {median}");
        let p99 = h.value_at_quantile_seconds(0.99);
        assert!((p99 - 0.099).abs() / 0.099 < 0.01, "p99 {p99}");
        assert!(LatencyHistogram::default()
            .value_at_quantile_seconds(0.5)
            .is_nan());
    }

    #[test]
    fn one_pass_buckets_equal_counting_each_bound() {
        let mut h = LatencyHistogram::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over ns to seconds, log-uniformly.
            let exp = (x % 34) as u32;
            h.record(((x >> 8) % (1u64 << exp)).max(1) as i64);
        }
        h.record(-5);
        let fast = h.cumulative_buckets(DEFAULT_BUCKETS_SECONDS);
        let slow: Vec<(f64, u64)> = DEFAULT_BUCKETS_SECONDS
            .iter()
            .map(|&b| (b, h.count_at_or_below(b)))
            .collect();
        assert_eq!(fast, slow);
        assert!(fast.iter().any(|&(_, c)| c > 0 && c < h.count()));
    }

    #[test]
    fn default_buckets_are_exact() {
        let mut h = LatencyHistogram::new();
        // On, just below and just above some bounds (HDR would merge the last two).
        let samples: [i64; 9] = [
            -3,
            0,
            10_000,
            10_001,
            999_999,
            1_000_000,
            1_000_001,
            1_009_000,
            4_000_000_000_000,
        ];
        for s in samples {
            h.record(s);
        }
        h.record_n(2_500_000, 4);
        let got = h.exported_buckets();
        assert_eq!(got.len(), DEFAULT_BUCKETS_SECONDS.len());
        for (bound, count) in got {
            let bound_ns = (bound * 1e9).round() as i64;
            let expected = samples.iter().filter(|&&s| s.max(0) <= bound_ns).count() as u64
                + if 2_500_000 <= bound_ns { 4 } else { 0 };
            assert_eq!(count, expected, "le {bound}");
        }
        // The sample above 1 h is only in +Inf (the total count).
        assert_eq!(h.exported_buckets().last().unwrap().1, h.count() - 1);
    }
}
