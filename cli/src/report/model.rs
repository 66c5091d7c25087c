//! The report's model: what `--report-file` holds, field by field, and what a run hands over
//! to make it.

use super::format::number;
use crate::settings::Settings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};
#[cfg(doc)]
use tidemark_runtime::DropReason;
use tidemark_runtime::JobOutcome;

/// The final report. Times are RFC 3339 in UTC with milliseconds; latencies are milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The job's name; `null` when the job file could not be read.
    pub job_name: Option<String>,
    /// This process's name among the job's instances: `--instance-id`, else the host name and
    /// process id (the label `tidemark_instance`).
    pub instance: Option<String>,
    /// `finished`, `stopped` or `failed`.
    pub outcome: &'static str,
    /// The command's exit code: 0 finished or stopped, 1 failed while running (or stopped hard
    /// after `--drain-timeout`), 2 bad usage or job file, 130 stopped hard by a second signal.
    pub exit_code: u8,
    /// What stopped the job, when the outcome is `stopped` or it was stopped hard: `SIGINT`,
    /// `SIGTERM`, `--duration 5s`, `standard output closed`, `--drain-timeout 30s passed`, ….
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The error, as the command printed it, when the outcome is `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which subtask failed and why, when a subtask failed (or could not be made).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureReport>,
    /// When the job started (RFC 3339, UTC).
    pub start_time: String,
    /// When the job ended (RFC 3339, UTC).
    pub end_time: String,
    /// Wall time from start to the end of the last task.
    pub elapsed_seconds: f64,
    /// The settings the run used, one field per row of the settings table
    /// ([`crate::settings::SETTINGS`], [`Settings::json`]: secrets as `"***"`); `null` when they
    /// could not be resolved.
    pub settings: Option<serde_json::Map<String, serde_json::Value>>,
    /// Records emitted by all sources and received by all sinks.
    pub records: RecordTotals,
    /// Per vertex, per subtask record counts, in graph order.
    pub vertices: Vec<VertexReport>,
    /// Marker latency per key, with the labels of the metrics, in graph order.
    pub latency: Vec<LatencyReport>,
    /// Markers emitted per source subtask.
    pub markers_emitted: Vec<MarkersEmitted>,
    /// The sinks' latency taken together (all sink subtasks and keys).
    pub sink_latency: SinkLatency,
    /// The series of the components registered with the job's metrics (checkpoints, Kafka), as
    /// `/metrics` and `/api/v1/metrics` have them; left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<SeriesReport>,
    /// The last complete checkpoint written to the checkpoint directory; left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointReport>,
    /// Restores of keyed state that moves with Kafka exchange partitions (`docs/kafka.md`,
    /// "State that moves with its partitions"); left out when there were none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_restores: Option<StateRestoresReport>,
    /// Peak resident set size of the process in MiB (`VmHWM` of `/proc/self/status`, read when
    /// the job ended); `null` where `/proc` is missing.
    pub peak_rss_mb: Option<f64>,
    /// The vertex whose busiest subtask had the highest busy fraction over the run
    /// ([`VertexReport::busy_ratio`]); `null` when nothing ran.
    pub bottleneck: Option<Bottleneck>,
    /// Per task (the vertices chained on one thread per subtask): its time accounting.
    pub tasks: Vec<TaskReport>,
    /// Tasks that had not ended when a hard stop gave up waiting for them (user code that did
    /// not return). The batch each was working on is counted as `in_flight`; records in its
    /// partly filled output batches are not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks_not_ended: Vec<String>,
}

/// Records dropped, per reason (every reason, 0 included, in [`DropReason::ALL`] order).
pub type DroppedByReason = BTreeMap<&'static str, u64>;

/// The sinks' marker and record end-to-end latency over all their subtasks and keys, in
/// milliseconds; `null` when there is no sample (markers off, no record reached a sink).
///
/// The `marker_*` and `e2e_p99_ms` fields are over the union of the sinks' sliding windows (the
/// last `history_size` samples of each series, as the `latency` objects); the `*_since_start`
/// fields are over every sample since the start, from the sinks' histograms merged (to within
/// their 1% resolution).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SinkLatency {
    /// Marker latency quantile 0.5 over the union of the sinks' windows.
    pub marker_p50_ms: Option<f64>,
    /// Marker latency quantile 0.99 over the union of the sinks' windows.
    pub marker_p99_ms: Option<f64>,
    /// Largest marker latency in the sinks' windows.
    pub marker_max_ms: Option<f64>,
    /// Record end-to-end latency quantile 0.99 over the union of the sinks' windows.
    pub e2e_p99_ms: Option<f64>,
    /// Marker latency quantile 0.99 over all markers that reached a sink.
    pub marker_p99_ms_since_start: Option<f64>,
    /// Largest marker latency since the start.
    pub marker_max_ms_since_start: Option<f64>,
    /// Record end-to-end latency quantile 0.99 over all records that reached a sink.
    pub e2e_p99_ms_since_start: Option<f64>,
}

/// One series of a registered component, labelled as in `/metrics` (without `job_name` and
/// `tidemark_instance`).
#[derive(Debug, Clone, Serialize)]
pub struct SeriesReport {
    /// The series name.
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The component's labels.
    pub labels: BTreeMap<String, String>,
    /// The value, or a histogram's count, sum and buckets.
    #[serde(flatten)]
    pub value: SeriesReportValue,
}

/// The value of a [`SeriesReport`]; numbers as `/metrics` writes them ([`number`]).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum SeriesReportValue {
    /// A counter or a gauge.
    Number {
        /// The value.
        #[serde(serialize_with = "number")]
        value: f64,
    },
    /// A histogram: cumulative counts at each bound (without `+Inf`: that is `count`).
    Histogram {
        /// Observations.
        count: u64,
        /// Their sum.
        #[serde(serialize_with = "number")]
        sum: f64,
        /// The buckets.
        buckets: Vec<BucketReport>,
    },
}

/// One bucket of a histogram series.
#[derive(Debug, Clone, Serialize)]
pub struct BucketReport {
    /// Upper bound.
    #[serde(serialize_with = "number")]
    pub le: f64,
    /// Observations at or below it.
    pub count: u64,
}

/// Which subtask failed.
#[derive(Debug, Clone, Serialize)]
pub struct FailureReport {
    /// The vertex.
    pub vertex_id: String,
    /// The subtask index.
    pub subtask: usize,
    /// The error or panic message.
    pub message: String,
}

/// Record totals over the job.
#[derive(Debug, Clone, Serialize)]
pub struct RecordTotals {
    /// Sum of `records_out` over the sources' subtasks.
    pub emitted_by_sources: u64,
    /// Sum of `records_in` over the sinks' subtasks.
    pub received_by_sinks: u64,
    /// Sum of `dropped` over every reason.
    pub dropped_total: u64,
    /// Records (for `malformed`: input lines) that did not reach a sink, per reason, summed
    /// over every vertex: `malformed`, `invalid_timestamp`, `late`, `expression_error`,
    /// `output_closed`, `in_flight` (left undelivered by a hard stop). Every reason is listed.
    pub dropped: DroppedByReason,
}

/// The busiest vertex of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bottleneck {
    /// Vertex id.
    pub vertex: String,
    /// Its busy fraction over the run (0 to 1), as [`VertexReport::busy_ratio`].
    #[serde(serialize_with = "number")]
    pub busy_ratio: f64,
}

/// One task's time, per subtask: the task's busy time is what its vertices' busy times add up
/// to, plus the runtime's own share (routing, channels, metrics).
#[derive(Debug, Clone, Serialize)]
pub struct TaskReport {
    /// Vertex ids joined with `+` in chain order (the `task` label).
    pub name: String,
    /// Per subtask.
    pub subtasks: Vec<TaskSubtaskReport>,
}

/// One task subtask's time.
#[derive(Debug, Clone, Serialize)]
pub struct TaskSubtaskReport {
    /// Subtask index.
    pub subtask: usize,
    /// Seconds working.
    #[serde(serialize_with = "number")]
    pub busy_seconds: f64,
    /// Seconds blocked on a full output channel.
    #[serde(serialize_with = "number")]
    pub backpressured_seconds: f64,
    /// Seconds waiting for input.
    #[serde(serialize_with = "number")]
    pub idle_seconds: f64,
}

/// One vertex's counts.
#[derive(Debug, Clone, Serialize)]
pub struct VertexReport {
    /// Vertex id.
    pub id: String,
    /// source, operator or sink.
    pub kind: &'static str,
    /// The task that runs it: vertex ids joined with `+` (the `task` label).
    pub task: String,
    /// True when its task runs more than one vertex (no queue between them).
    pub chained: bool,
    /// The busy fraction of its busiest subtask over the run: the subtask's own busy time
    /// (`tidemark_operator_busy_seconds_total`) over the run's elapsed time.
    #[serde(serialize_with = "number")]
    pub busy_ratio: f64,
    /// For a source: records not yet read, summed over its subtasks where known; `null` when
    /// unknown or not a source.
    pub lag_records: Option<i64>,
    /// Record end-to-end latency quantile 0.99 over its subtasks' windows pooled (sources and
    /// terminal vertices), in ms; `null` where not recorded.
    #[serde(serialize_with = "super::format::optional_number")]
    pub e2e_p99_ms: Option<f64>,
    /// Sum over subtasks.
    pub records_in: u64,
    /// Sum over subtasks.
    pub records_out: u64,
    /// Sum over subtasks, per reason (only reasons with a count).
    pub dropped: DroppedByReason,
    /// Per subtask.
    pub subtasks: Vec<SubtaskReport>,
}

/// One vertex subtask's counts.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskReport {
    /// Subtask index.
    pub subtask: usize,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// Records dropped, per reason (only reasons with a count).
    pub dropped: DroppedByReason,
    /// Seconds its own code took (`tidemark_operator_busy_seconds_total`).
    #[serde(serialize_with = "number")]
    pub busy_seconds: f64,
}

/// Marker latency of one key. Window statistics are over the last `history_size` markers;
/// `count` is over all markers. A window with no sample gives `null`.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    /// Source vertex (at operator and subtask granularity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    /// Source subtask (at subtask granularity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_subtask_index: Option<u32>,
    /// The instance the markers came from through a Kafka exchange (the metrics'
    /// `source_instance` label); absent for markers made in this process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_instance: Option<String>,
    /// The recording vertex.
    pub operator_id: String,
    /// Its subtask.
    pub operator_subtask_index: usize,
    /// operator or sink (not a metric label: lets a reader pick the sinks).
    pub operator_kind: &'static str,
    /// True when every marker counted here came from a source chained with this vertex in one
    /// task: no queue lies between them, so the figure says nothing about queueing (the
    /// source's lag and the record end-to-end latency do).
    pub chained: bool,
    /// Markers recorded since start.
    pub count: u64,
    /// Window minimum.
    pub min_ms: f64,
    /// Window maximum.
    pub max_ms: f64,
    /// Window mean.
    pub mean_ms: f64,
    /// Window sample standard deviation.
    pub stddev_ms: f64,
    /// Window quantile 0.5.
    pub p50_ms: f64,
    /// Window quantile 0.75.
    pub p75_ms: f64,
    /// Window quantile 0.95.
    pub p95_ms: f64,
    /// Window quantile 0.98.
    pub p98_ms: f64,
    /// Window quantile 0.99.
    pub p99_ms: f64,
    /// Window quantile 0.999.
    pub p999_ms: f64,
    /// Negative samples (clock skew) since start.
    pub negative_count: u64,
}

/// Markers one source subtask emitted.
#[derive(Debug, Clone, Serialize)]
pub struct MarkersEmitted {
    /// Source vertex.
    pub source_id: String,
    /// Source subtask.
    pub source_subtask_index: usize,
    /// Markers emitted.
    pub count: u64,
}

/// What the run's report needs besides the registry.
#[derive(Debug, Clone)]
pub struct RunSummary<'a> {
    /// How the job ended.
    pub outcome: &'a JobOutcome,
    /// Wall time of the job.
    pub elapsed: Duration,
    /// When it ended.
    pub ended: SystemTime,
    /// The settings used.
    pub settings: &'a Settings,
    /// What stopped the job (a signal, `--duration`, a closed output, a drain timeout).
    pub stop_reason: Option<String>,
    /// The error the command reports, if it fails.
    pub error: Option<String>,
    /// The exit code the command returns.
    pub exit_code: u8,
    /// Tasks a hard stop gave up waiting for.
    pub tasks_not_ended: Vec<String>,
}

/// The last complete checkpoint, in the report and `/api/v1/job`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointReport {
    /// Its id (`chk-<id>`).
    pub id: u64,
    /// Its folder.
    pub path: String,
    /// Bytes of all its files.
    pub size_bytes: u64,
    /// When it completed, ms since the Unix epoch.
    pub completed_unix_ms: u64,
}

impl CheckpointReport {
    /// The report of the last complete checkpoint `c` coordinated, if any.
    pub fn of(c: &tidemark_runtime::checkpoint::Checkpoints) -> Option<CheckpointReport> {
        c.last_completed().map(|c| CheckpointReport {
            id: c.id,
            path: c.path.display().to_string(),
            size_bytes: c.size_bytes,
            completed_unix_ms: (c.completed_at * 1000.0) as u64,
        })
    }
}

/// Restores of exchange partitions' keyed state from the state topic, in the report and
/// `/api/v1/job`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateRestoresReport {
    /// Every partition restored, with how long its last restore took.
    pub partitions: Vec<PartitionRestore>,
    /// State-topic messages read by the restores, per keyed vertex.
    pub records: std::collections::BTreeMap<String, u64>,
}

/// One exchange partition's last restore.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionRestore {
    /// The keyed vertex.
    pub operator_id: String,
    /// The exchange partition.
    pub partition: i32,
    /// Seconds the restore took (reading the state partition and rewriting it).
    pub seconds: f64,
}

/// Why a job never ran (or never got a registry), for [`Report::not_started`].
#[derive(Debug, Clone)]
pub struct NotStarted<'a> {
    /// The job's name, if the job file was read.
    pub job_name: Option<&'a str>,
    /// This process's instance id.
    pub instance: Option<&'a str>,
    /// The settings, if they were resolved.
    pub settings: Option<&'a Settings>,
    /// When the command started.
    pub started: SystemTime,
    /// The error as printed.
    pub error: String,
    /// The exit code.
    pub exit_code: u8,
    /// The subtask that could not be made, if that was the error.
    pub failure: Option<FailureReport>,
}
