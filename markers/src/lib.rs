//! Latency markers for Tidemark: what sources emit, how operators key and record them, and the
//! statistics exported from them. This crate implements the rules in
//! `docs/latency-markers.md` ("The rules"); the rule numbers in the docs refer to them.
//!
//! # Map of the crate
//!
//! | module | what it holds | rules |
//! |---|---|---|
//! | [`marker`](crate::LatencyMarker) | [`LatencyMarker`], the timestamp that travels with the records | 1 |
//! | [`emitter`](crate::MarkerEmitter) | [`MarkerEmitter`]: when a source subtask emits (first at start, then fixed delay) | 2–4 |
//! | [`clock`](crate::Clock) | [`Clock`], [`SystemClock`], and [`ManualClock`] for tests | – |
//! | [`granularity`](crate::Granularity) | [`Granularity`] and the [`LatencyKey`] it derives from a marker | 14 |
//! | [`window`](crate::SlidingWindow) | [`SlidingWindow`], [`WindowStats`], [`legacy_quantile`], [`MARKER_QUANTILES`] | 15, 16 |
//! | [`histogram`](crate::LatencyHistogram) | [`LatencyHistogram`] (HDR, cumulative since start, merged with [`LatencyHistogram::add`]) | 17 |
//! | [`buckets`](crate::Buckets) | [`Buckets`], the exported `le` bounds: [`MARKER_LATENCY_BUCKETS_SECONDS`] (1 µs–1 h), [`E2E_LATENCY_BUCKETS_SECONDS`] (1 ms–7 d) | 17 |
//! | [`stats`](crate::LatencyTracker) | [`LatencyStats`] for one key, [`LatencyTracker`] for all keys of an operator subtask | 12–15 |
//! | [`origin`] | names of the instances markers came from across a Kafka exchange (`source_instance`) | – |
//! | [`config`](crate::LatencyConfig) | [`LatencyConfig`], [`parse_duration`], [`parse_history_size`], [`format_duration`], [`ConfigError`] | 2, 6, 7 |
//!
//! Everything is re-exported at the crate root. Latencies are recorded in nanoseconds (`i64`,
//! not clamped: a negative value means clock skew); the histogram reports seconds.
//!
//! # Example
//!
//! A source emits markers every 10 ms of (manual) time, and an operator subtask records them
//! at `operator` granularity:
//!
//! ```
//! use std::time::Duration;
//! use tidemark_markers::{
//!     Clock, Granularity, LatencyConfig, LatencyKey, LatencyTracker, ManualClock, MarkerEmitter,
//! };
//!
//! let mut config = LatencyConfig::default();
//! config.apply("metrics.latency.interval", "10ms")?;
//!
//! let clock = ManualClock::new(0);
//! let mut emitter = MarkerEmitter::new(config.interval, 0, 0);
//! let mut tracker = LatencyTracker::new(config.granularity, config.history_size);
//!
//! for _ in 0..100 {
//!     if let Some(marker) = emitter.poll(clock.now_nanos()) {
//!         // The marker reaches the operator 2 ms later.
//!         tracker.record(&marker, clock.now_nanos() + 2_000_000);
//!     }
//!     clock.advance(1_000_000); // 1 ms
//! }
//!
//! assert_eq!(emitter.emitted(), 10);
//! let stats = tracker.get(&LatencyKey { source_id: Some(0), source_subtask: None, origin: 0 }).unwrap();
//! assert_eq!(stats.count(), 10);
//! assert_eq!(stats.window_stats().quantile(0.99), Some(2_000_000.0));
//! assert_eq!(stats.histogram().cumulative_buckets(&[0.001, 0.0025]), vec![(0.001, 0), (0.0025, 10)]);
//! assert_eq!(tracker.granularity(), Granularity::Operator);
//! # Ok::<(), tidemark_markers::ConfigError>(())
//! ```

#![deny(missing_docs)]

mod buckets;
mod clock;
mod config;
mod emitter;
mod error;
mod granularity;
mod histogram;
mod marker;
pub mod origin;
mod stats;
mod window;

pub use buckets::{
    Buckets, BucketsError, E2E_LATENCY_BUCKETS_SECONDS, MARKER_LATENCY_BUCKETS_SECONDS, MAX_BUCKETS,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    format_duration, parse_duration, parse_history_size, LatencyConfig, DEFAULT_HISTORY_SIZE,
};
pub use emitter::MarkerEmitter;
pub use error::ConfigError;
pub use granularity::{Granularity, LatencyKey};
pub use histogram::{HistogramAddError, LatencyHistogram};
pub use marker::LatencyMarker;
pub use stats::{LatencyStats, LatencyTracker};
pub use window::{
    legacy_quantile, round_significant, SlidingWindow, WindowStats, MARKER_QUANTILES,
};
