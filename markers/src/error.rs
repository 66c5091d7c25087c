//! Why a latency-marker setting is invalid ([`ConfigError`]): the error of every parser in
//! this crate, kept apart from the settings so that each can use it.

use crate::buckets::BucketsError;

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
