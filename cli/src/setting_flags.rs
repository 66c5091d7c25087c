//! The setting flags of `run` and `validate`: settings that may also come from the job file
//! or `-D` (the flags win; see [`crate::settings`]).

use clap::Args;
use std::num::NonZeroUsize;
use std::time::Duration;
use tidemark_markers::Granularity;

use crate::values::{
    parse_channel_capacity, parse_duration, parse_granularity, parse_history_size,
    parse_parallelism,
};

/// Settings that may also come from the job file or `-D`.
#[derive(Debug, Clone, Default, Args)]
pub struct SettingFlags {
    /// Latency marker interval, with a unit; 0 disables markers [default: job file, else 200ms]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub latency_interval: Option<Duration>,
    /// Latency series per: single | operator | subtask [default: job file, else operator]
    #[arg(long, value_name = "G", value_parser = parse_granularity)]
    pub latency_granularity: Option<Granularity>,
    /// Samples in each latency series' sliding window [default: job file, else 128]
    #[arg(long, value_name = "N", value_parser = parse_history_size)]
    pub latency_history_size: Option<NonZeroUsize>,
    /// Longest a partly filled batch waits before it is sent [default: job file, else 1ms]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub buffer_timeout: Option<Duration>,
    /// Batches each channel holds before its sender blocks (1 to 4096); deeper queues mean
    /// fewer context switches but more queued records under backpressure [default: job file,
    /// else 8]
    #[arg(long, value_name = "N", value_parser = parse_channel_capacity)]
    pub channel_capacity: Option<usize>,
    /// Default parallelism of every vertex [default: job file, else 1]
    #[arg(long, value_name = "N", value_parser = parse_parallelism)]
    pub parallelism: Option<NonZeroUsize>,
    /// Run every vertex in its own task (Flink's disableOperatorChaining) [default: job file,
    /// else chaining on]
    #[arg(long)]
    pub no_chaining: bool,
    /// Record end-to-end latency at every vertex, not only at sources and terminal vertices
    /// [default: job file, else off]
    #[arg(long)]
    pub e2e_latency_everywhere: bool,
}
