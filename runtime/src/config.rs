//! Settings of one job run.

use std::sync::Arc;
use std::time::Duration;
use tidemark_markers::{Buckets, Clock, LatencyConfig, SystemClock};

/// The buffer timeout when neither the job file nor a flag sets one.
///
/// A partly filled batch is also sent as soon as its task runs out of input, so at low load
/// records do not wait for this timeout; it bounds the wait of a channel that fills slowly while
/// its task stays busy with other channels.
pub const DEFAULT_BUFFER_TIMEOUT: Duration = Duration::from_millis(1);
/// Records per batch.
pub const DEFAULT_BATCH_SIZE: usize = 1024;
/// Batches a channel holds before its sender blocks (backpressure).
///
/// A deeper channel lets a sender run further ahead of its receiver, so threads switch less
/// often when there are more threads than cores, but it also holds more records in front of a
/// slow consumer: marker latency under backpressure and the time to drain grow with it.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 8;
/// The largest channel capacity a user may set (the job file, `--channel-capacity`, `-D`).
pub const MAX_CHANNEL_CAPACITY: usize = 4096;

/// How a job runs: latency markers, batching, chaining, randomness and the clock.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// Marker interval, granularity and history size.
    pub latency: LatencyConfig,
    /// Longest a partly filled batch waits before it is sent.
    pub buffer_timeout: Duration,
    /// Records per batch.
    pub batch_size: usize,
    /// Batches a channel holds before its sender blocks (backpressure); 0 counts as 1.
    pub channel_capacity: usize,
    /// Chain forward edges into one task (on by default).
    pub chaining: bool,
    /// Seed for generators and marker routing; `None` picks one at random.
    pub seed: Option<u64>,
    /// The wall clock markers and timestamps are read from.
    pub clock: Arc<dyn Clock>,
    /// Record end-to-end latency at every vertex, not only at sources and terminal vertices.
    pub e2e_latency_everywhere: bool,
    /// Bucket bounds of `tidemark_marker_latency_seconds` (default 1 µs to 1 h).
    pub marker_buckets: Buckets,
    /// Bucket bounds of `tidemark_record_e2e_latency_seconds` (default 1 ms to 7 days).
    pub e2e_buckets: Buckets,
    /// How often sources start a checkpoint (barriers for at-least-once delivery, see
    /// [`checkpoint`](crate::checkpoint)); `None`: no checkpoints.
    pub checkpoint_interval: Option<Duration>,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            latency: LatencyConfig::default(),
            buffer_timeout: DEFAULT_BUFFER_TIMEOUT,
            batch_size: DEFAULT_BATCH_SIZE,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            chaining: true,
            seed: None,
            clock: Arc::new(SystemClock),
            e2e_latency_everywhere: false,
            marker_buckets: Buckets::marker_latency(),
            e2e_buckets: Buckets::e2e_latency(),
            checkpoint_interval: None,
        }
    }
}
