//! The upper bounds of the Prometheus histogram buckets that a [`LatencyHistogram`] counts
//! exactly, with the default ranges for marker latency (1 µs to 1 h) and record end-to-end
//! latency (1 ms to 7 days).
//!
//! [`LatencyHistogram`]: crate::LatencyHistogram

use std::sync::Arc;
use std::time::Duration;

pub use crate::error::BucketsError;

/// Default bucket bounds of `tidemark_marker_latency_seconds`, in seconds: 1 µs to 1 h.
/// Chained operators see markers well under 10 µs, a stalled pipeline minutes.
pub const MARKER_LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    300.0, 600.0, 1800.0, 3600.0,
];

/// Default bucket bounds of `tidemark_record_e2e_latency_seconds`, in seconds: 1 ms to 7 days,
/// so that backfills and replays of old data do not all land in `+Inf`.
pub const E2E_LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 43200.0, 86400.0, 172800.0, 604800.0,
];

/// The most bounds a bucket list may have: every bound is one series per latency key, and a
/// scrape has to stay fast with thousands of keys.
pub const MAX_BUCKETS: usize = 100;

const NANOS_PER_SECOND: f64 = 1e9;

/// Ascending upper bounds of histogram buckets (the `le` labels), shared cheaply between the
/// histograms of a job; `+Inf` is implicit.
///
/// ```
/// use std::time::Duration;
/// use tidemark_markers::Buckets;
///
/// let b = Buckets::new(&[Duration::from_micros(1), Duration::from_millis(1), Duration::from_secs(3600)])?;
/// assert_eq!(b.seconds(), &[0.000001, 0.001, 3600.0]);
/// assert!(Buckets::new(&[Duration::from_secs(2), Duration::from_secs(1)]).is_err());
/// assert_eq!(Buckets::marker_latency().seconds()[0], 0.000001);
/// # Ok::<(), tidemark_markers::BucketsError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Buckets {
    nanos: Arc<[u64]>,
    /// `nanos` in seconds, derived from them.
    seconds: Arc<[f64]>,
}

impl PartialEq for Buckets {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.nanos, &other.nanos) || self.nanos == other.nanos
    }
}

impl Eq for Buckets {}

impl Buckets {
    /// Buckets with these upper bounds.
    ///
    /// # Errors
    /// An empty list, more than [`MAX_BUCKETS`] bounds, a zero bound, or bounds that are not
    /// strictly ascending.
    pub fn new(bounds: &[Duration]) -> Result<Self, BucketsError> {
        if bounds.is_empty() {
            return Err(BucketsError::Empty);
        }
        if bounds.len() > MAX_BUCKETS {
            return Err(BucketsError::TooMany {
                count: bounds.len(),
                max: MAX_BUCKETS,
            });
        }
        let mut nanos = Vec::with_capacity(bounds.len());
        for (i, bound) in bounds.iter().enumerate() {
            if bound.is_zero() {
                return Err(BucketsError::Zero { position: i + 1 });
            }
            if i > 0 && *bound <= bounds[i - 1] {
                return Err(BucketsError::NotAscending {
                    position: i + 1,
                    bound: crate::format_duration(*bound),
                    previous: crate::format_duration(bounds[i - 1]),
                });
            }
            nanos.push(u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX));
        }
        // Exact: n / 1e9 is the double nearest to the decimal value (one correctly rounded
        // division), so 2.5 ms prints as `0.0025`.
        let seconds = nanos.iter().map(|&n| n as f64 / NANOS_PER_SECOND).collect();
        Ok(Buckets {
            nanos: nanos.into(),
            seconds,
        })
    }

    fn from_seconds(seconds: &[f64]) -> Self {
        let bounds: Vec<Duration> = seconds
            .iter()
            .map(|&s| Duration::from_nanos((s * NANOS_PER_SECOND).round() as u64))
            .collect();
        Buckets::new(&bounds).expect("constant bucket lists are valid")
    }

    /// The default marker-latency buckets, [`MARKER_LATENCY_BUCKETS_SECONDS`].
    pub fn marker_latency() -> Self {
        Self::from_seconds(MARKER_LATENCY_BUCKETS_SECONDS)
    }

    /// The default record end-to-end latency buckets, [`E2E_LATENCY_BUCKETS_SECONDS`].
    pub fn e2e_latency() -> Self {
        Self::from_seconds(E2E_LATENCY_BUCKETS_SECONDS)
    }

    /// The bounds in seconds, ascending (the `le` label values).
    pub fn seconds(&self) -> &[f64] {
        &self.seconds
    }

    /// The bounds as durations, ascending.
    pub fn durations(&self) -> Vec<Duration> {
        self.nanos
            .iter()
            .map(|&n| Duration::from_nanos(n))
            .collect()
    }

    /// Number of bounds (without `+Inf`).
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// Always false: a bucket list has at least one bound.
    pub fn is_empty(&self) -> bool {
        self.nanos.is_empty()
    }

    /// The bucket a latency in nanoseconds falls in: the index of the first bound at or above
    /// it, or [`len`](Self::len) when it is above every bound.
    pub(crate) fn index_of(&self, nanos: u64) -> usize {
        self.nanos.partition_point(|&bound| bound < nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ranges_cover_what_users_see() {
        let marker = Buckets::marker_latency();
        assert_eq!(marker.seconds().first(), Some(&0.000001));
        assert_eq!(marker.seconds().last(), Some(&3600.0));
        let e2e = Buckets::e2e_latency();
        assert_eq!(e2e.seconds().first(), Some(&0.001));
        assert_eq!(e2e.seconds().last(), Some(&(7.0 * 24.0 * 3600.0)));
        assert_eq!(&*marker.seconds, MARKER_LATENCY_BUCKETS_SECONDS);
        assert_eq!(&*e2e.seconds, E2E_LATENCY_BUCKETS_SECONDS);
        for b in [marker, e2e] {
            assert!(b.seconds().windows(2).all(|w| w[0] < w[1]));
            // The bounds in nanoseconds are the decimal values exactly.
            for (s, d) in b.seconds().iter().zip(b.durations()) {
                assert_eq!((s * 1e9).round() as u128, d.as_nanos());
            }
        }
    }

    #[test]
    fn bounds_from_durations_print_as_decimals() {
        let b = Buckets::new(&[
            Duration::from_nanos(2_500),
            Duration::from_micros(250),
            Duration::from_millis(2_500),
            Duration::from_secs(604_800),
        ])
        .unwrap();
        let printed: Vec<String> = b.seconds().iter().map(f64::to_string).collect();
        assert_eq!(printed, ["0.0000025", "0.00025", "2.5", "604800"]);
    }

    #[test]
    fn invalid_lists_are_rejected_with_the_position() {
        let s = Duration::from_secs;
        assert_eq!(Buckets::new(&[]), Err(BucketsError::Empty));
        assert_eq!(
            Buckets::new(&[s(1), Duration::ZERO]),
            Err(BucketsError::Zero { position: 2 })
        );
        let err = Buckets::new(&[s(1), s(60), s(60)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bucket 3 (1m) is not larger than the one before it (1m); expected ascending durations"
        );
        let many: Vec<Duration> = (1..=101).map(s).collect();
        assert_eq!(
            Buckets::new(&many),
            Err(BucketsError::TooMany {
                count: 101,
                max: 100
            })
        );
        assert!(Buckets::new(&many[..100]).is_ok());
    }

    #[test]
    fn index_of_finds_the_first_bound_at_or_above() {
        let b = Buckets::new(&[Duration::from_nanos(10), Duration::from_nanos(20)]).unwrap();
        assert_eq!([0, 10, 11, 20, 21].map(|n| b.index_of(n)), [0, 0, 1, 1, 2]);
    }
}
