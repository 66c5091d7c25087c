//! Why a latency-marker setting is invalid ([`ConfigError`]): the error of every parser in
//! this crate, and of a bucket list ([`BucketsError`]), kept apart from the settings and the
//! buckets so that each can use them.

/// An invalid latency-marker setting (rule 7). The message names the bad value and what is
/// expected instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The granularity is not `single`, `operator` or `subtask`.
    #[error("unknown latency granularity \"{value}\": expected one of single, operator, subtask")]
    UnknownGranularity {
        /// The text that was given.
        value: String,
    },
    /// The duration (interval) could not be parsed or is negative.
    #[error("invalid duration \"{value}\": {reason}")]
    InvalidDuration {
        /// The text that was given.
        value: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The history size is not a whole number of at least 1.
    #[error("invalid latency history size \"{value}\": expected a whole number of at least 1")]
    InvalidHistorySize {
        /// The text that was given.
        value: String,
    },
    /// A histogram bucket list that cannot be used.
    #[error("invalid buckets: {0}")]
    InvalidBuckets(#[from] BucketsError),
}

/// A bucket list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketsError {
    /// No bound at all.
    #[error("the bucket list is empty; expected at least one duration, e.g. [1ms, 1s, 1m]")]
    Empty,
    /// More than [`MAX_BUCKETS`](crate::MAX_BUCKETS) bounds.
    #[error("{count} buckets are too many; expected at most {max}")]
    TooMany {
        /// How many were given.
        count: usize,
        /// [`MAX_BUCKETS`](crate::MAX_BUCKETS).
        max: usize,
    },
    /// A bound of zero.
    #[error("bucket {position} is 0; every bound must be more than 0")]
    Zero {
        /// 1-based position in the list.
        position: usize,
    },
    /// A bound not above the one before it.
    #[error("bucket {position} ({bound}) is not larger than the one before it ({previous}); expected ascending durations")]
    NotAscending {
        /// 1-based position in the list.
        position: usize,
        /// The bound, formatted as a duration.
        bound: String,
        /// The bound before it, formatted as a duration.
        previous: String,
    },
}
