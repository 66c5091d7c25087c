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

/// How a task waits when it has nothing to do: its source has no record due, or its input
/// queue is empty.
///
/// Either way the results are the same; only the CPU a quiet or lightly loaded job costs and
/// the latency of its records differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IdleStrategy {
    /// The default: a task sleeps until the next thing it must do is due — a marker, a
    /// checkpoint, its operators' timers (looked at every [`PARK_TICK`], where an operator
    /// [uses time](crate::Operator::uses_time)), or the next record of
    /// a paced source, gathered for up to the buffer timeout so that one wake-up makes a batch
    /// of them — and a task reading a channel blocks on it until a batch arrives. A stop or a
    /// hard stop wakes every waiting task at once. CPU follows the work.
    #[default]
    Park,
    /// Low latency at about a core's cost: a source wakes for every record that falls due and
    /// sends it at once, and every task looks at its input at least every 2 ms.
    Spin,
}

/// The longest a task under [`IdleStrategy::Park`] sleeps between two looks at its operators'
/// processing-time timers and at a source with nothing to read that gives no time to come back.
pub const PARK_TICK: Duration = Duration::from_millis(20);

/// The longest a task under [`IdleStrategy::Park`] blocks on an empty input when none of its
/// operators has processing-time timers ([`Operator::uses_time`](crate::Operator::uses_time)):
/// a batch, an end of input or a hard stop wakes it at once, and this only bounds how stale
/// its published idle time gets.
pub const PARK_QUIET: Duration = Duration::from_secs(1);

impl IdleStrategy {
    /// Every strategy, as written in a job file or a `-D` value.
    pub const NAMES: [&'static str; 2] = ["park", "spin"];

    /// Its name, as written in a job file or a `-D` value.
    pub fn name(self) -> &'static str {
        match self {
            IdleStrategy::Park => "park",
            IdleStrategy::Spin => "spin",
        }
    }
}

impl std::fmt::Display for IdleStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for IdleStrategy {
    type Err = String;

    /// `park` or `spin` (surrounding blanks ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "park" => Ok(IdleStrategy::Park),
            "spin" => Ok(IdleStrategy::Spin),
            other => Err(format!(
                "invalid idle strategy \"{other}\": expected park or spin"
            )),
        }
    }
}

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
    /// When checkpoints may start and how many may fail in a row
    /// ([`CheckpointPolicy`](crate::checkpoint::CheckpointPolicy)).
    pub checkpoint_policy: crate::checkpoint::CheckpointPolicy,
    /// How tasks wait when they have nothing to do.
    pub idle_strategy: IdleStrategy,
    /// Let a source task and the channel task it feeds share a thread where the plan allows
    /// it ([`ExecutionPlan::thread_pairs`](crate::plan::ExecutionPlan::thread_pairs)); on by
    /// default. Off, every task subtask has a thread of its own.
    pub share_threads: bool,
    /// Where checkpoints are written ([`crate::checkpoint_store`]); `None`: barriers for
    /// at-least-once only. Needs `checkpoint_interval`.
    pub checkpoint_storage: Option<crate::checkpoint::CheckpointStorage>,
    /// A checkpoint to start from, read and checked whole
    /// ([`read_checkpoint`](crate::checkpoint_store::read_checkpoint)): sources resume,
    /// operators and sinks take back their state (see [`crate::job::prepare`]).
    pub restore: Option<Arc<crate::checkpoint_store::LoadedCheckpoint>>,
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
            checkpoint_policy: crate::checkpoint::CheckpointPolicy::default(),
            idle_strategy: IdleStrategy::Park,
            share_threads: true,
            checkpoint_storage: None,
            restore: None,
        }
    }
}
