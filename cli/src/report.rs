//! The final report of a run: a JSON document (`--report-file`) and a compact table for
//! standard error, both read from the job's [`MetricsRegistry`] after it ended.

use crate::settings::Settings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tidemark_markers::{legacy_quantile, round_significant, LatencyHistogram, LatencyKey};

/// Significant digits of the latencies in the report (milliseconds): 0.000421, 12.3457, 250.004.
const DIGITS: u32 = 6;
use tidemark_runtime::{DropReason, JobOutcome, MetricsRegistry, SubtaskMetrics, VertexKind};

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
    /// Peak resident set size of the process in MiB (`VmHWM` of `/proc/self/status`, read when
    /// the job ended); `null` where `/proc` is missing.
    pub peak_rss_mb: Option<f64>,
    /// Tasks that had not ended when a hard stop gave up waiting for them (user code that did
    /// not return). The batch each was working on is counted as `in_flight`; records in its
    /// partly filled output batches are not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks_not_ended: Vec<String>,
}

/// Records dropped, per reason (every reason, 0 included, in [`DropReason::ALL`] order).
pub type DroppedByReason = BTreeMap<&'static str, u64>;

/// The dropped counts of one subtask: only the reasons with a count above 0.
fn dropped_of(metrics: &SubtaskMetrics) -> DroppedByReason {
    DropReason::ALL
        .iter()
        .map(|&r| (r.as_str(), metrics.records_dropped(r)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// `a` + `b`, reason by reason.
fn add_dropped(into: &mut DroppedByReason, from: &DroppedByReason) {
    for (reason, n) in from {
        *into.entry(reason).or_default() += n;
    }
}

/// `1 record`, `2 records`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `malformed 3, in flight 1024`: the reasons with a count, in [`DropReason::ALL`] order.
fn why(dropped: &DroppedByReason) -> String {
    DropReason::ALL
        .iter()
        .filter_map(|r| {
            let n = *dropped.get(r.as_str())?;
            (n > 0).then(|| format!("{n} {}", r.as_str().replace('_', " ")))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

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

impl SinkLatency {
    /// Reads the sinks' latency from the registry.
    pub fn collect(registry: &MetricsRegistry) -> SinkLatency {
        let mut markers: Vec<f64> = Vec::new();
        let mut e2e: Vec<f64> = Vec::new();
        let mut marker_histograms: Vec<LatencyHistogram> = Vec::new();
        let mut e2e_histograms: Vec<LatencyHistogram> = Vec::new();
        for v in registry
            .vertices()
            .iter()
            .filter(|v| v.kind == VertexKind::Sink)
        {
            for s in &v.subtasks {
                for (_, stats) in s.latency().iter() {
                    markers.extend(stats.window().samples().map(|ns| ns as f64));
                    marker_histograms.push(stats.histogram().clone());
                }
                if let Some(stats) = s.e2e_latency().as_ref() {
                    e2e.extend(stats.window().samples().map(|ns| ns as f64));
                    e2e_histograms.push(stats.histogram().clone());
                }
            }
        }
        SinkLatency::from_samples(markers, e2e, &marker_histograms, &e2e_histograms)
    }

    /// The summary of window samples and histograms, all in nanoseconds.
    fn from_samples(
        mut markers: Vec<f64>,
        mut e2e: Vec<f64>,
        marker_histograms: &[LatencyHistogram],
        e2e_histograms: &[LatencyHistogram],
    ) -> SinkLatency {
        markers.sort_unstable_by(f64::total_cmp);
        e2e.sort_unstable_by(f64::total_cmp);
        let ms = |ns: f64| (ns.is_finite()).then_some(round_significant(ns / 1e6, DIGITS));
        let seconds_to_ms = |s: f64| (s.is_finite()).then_some(round_significant(s * 1e3, DIGITS));
        SinkLatency {
            marker_p50_ms: ms(legacy_quantile(&markers, 0.5)),
            marker_p99_ms: ms(legacy_quantile(&markers, 0.99)),
            marker_max_ms: markers.last().copied().and_then(ms),
            e2e_p99_ms: ms(legacy_quantile(&e2e, 0.99)),
            marker_p99_ms_since_start: seconds_to_ms(merged_quantile_seconds(
                marker_histograms,
                0.99,
            )),
            marker_max_ms_since_start: seconds_to_ms(merged_quantile_seconds(
                marker_histograms,
                1.0,
            )),
            e2e_p99_ms_since_start: seconds_to_ms(merged_quantile_seconds(e2e_histograms, 0.99)),
        }
    }
}

/// Quantile `q` (0 to 1) of the union of `histograms`, in seconds, to within about 1% (the
/// histograms' resolution): the histograms merged into one ([`LatencyHistogram::add`]). NaN when
/// they hold no sample or cannot be merged (different buckets).
fn merged_quantile_seconds(histograms: &[LatencyHistogram], q: f64) -> f64 {
    let Some((first, rest)) = histograms.split_first() else {
        return f64::NAN;
    };
    let mut merged = first.clone();
    for h in rest {
        if merged.add(h).is_err() {
            return f64::NAN;
        }
    }
    merged.value_at_quantile_seconds(q)
}

/// Peak resident set size of this process in MiB: `VmHWM` of `/proc/self/status`, or `None`
/// where it cannot be read.
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_hwm_mb(&status)
}

/// `VmHWM` (kB) of a `/proc/<pid>/status` text, in MiB.
fn vm_hwm_mb(status: &str) -> Option<f64> {
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
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

/// One vertex's counts.
#[derive(Debug, Clone, Serialize)]
pub struct VertexReport {
    /// Vertex id.
    pub id: String,
    /// source, operator or sink.
    pub kind: &'static str,
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

impl Report {
    /// Reads the report from the registry of an ended job.
    pub fn collect(registry: &MetricsRegistry, run: &RunSummary<'_>) -> Report {
        let (outcome, failure) = match run.outcome {
            JobOutcome::Finished => ("finished", None),
            JobOutcome::Stopped => ("stopped", None),
            JobOutcome::Aborted => ("failed", None),
            JobOutcome::Failed(f) => (
                "failed",
                Some(FailureReport {
                    vertex_id: f.vertex_id.clone(),
                    subtask: f.subtask,
                    message: f.message.clone(),
                }),
            ),
        };
        let mut vertices = Vec::new();
        let mut latency = Vec::new();
        let mut markers_emitted = Vec::new();
        let (mut emitted, mut received) = (0, 0);
        let mut dropped: DroppedByReason =
            DropReason::ALL.iter().map(|r| (r.as_str(), 0)).collect();
        for v in registry.vertices() {
            let subtasks: Vec<SubtaskReport> = v
                .subtasks
                .iter()
                .enumerate()
                .map(|(i, s)| SubtaskReport {
                    subtask: i,
                    records_in: s.records_in(),
                    records_out: s.records_out(),
                    dropped: dropped_of(s),
                })
                .collect();
            let records_in = subtasks.iter().map(|s| s.records_in).sum();
            let records_out = subtasks.iter().map(|s| s.records_out).sum();
            let mut vertex_dropped = DroppedByReason::new();
            for s in &subtasks {
                add_dropped(&mut vertex_dropped, &s.dropped);
            }
            add_dropped(&mut dropped, &vertex_dropped);
            match v.kind {
                VertexKind::Source => emitted += records_out,
                VertexKind::Sink => received += records_in,
                VertexKind::Operator => {}
            }
            vertices.push(VertexReport {
                id: v.id.clone(),
                kind: v.kind.as_str(),
                records_in,
                records_out,
                dropped: vertex_dropped,
                subtasks,
            });
            for (i, s) in v.subtasks.iter().enumerate() {
                if v.kind == VertexKind::Source {
                    markers_emitted.push(MarkersEmitted {
                        source_id: v.id.clone(),
                        source_subtask_index: i,
                        count: s.markers_emitted(),
                    });
                    continue;
                }
                let tracker = s.latency();
                for (key, stats) in tracker.iter() {
                    latency.push(latency_report(registry, key, &v.id, v.kind, i, stats));
                }
            }
        }
        Report {
            job_name: Some(registry.job_name().to_string()),
            instance: registry.instance().map(str::to_string),
            outcome,
            exit_code: run.exit_code,
            stop_reason: run.stop_reason.clone(),
            error: run.error.clone(),
            failure,
            start_time: rfc3339(registry.started()),
            end_time: rfc3339(run.ended),
            elapsed_seconds: run.elapsed.as_secs_f64(),
            settings: Some(run.settings.json()),
            records: RecordTotals {
                emitted_by_sources: emitted,
                received_by_sinks: received,
                dropped_total: dropped.values().sum(),
                dropped,
            },
            vertices,
            latency,
            markers_emitted,
            sink_latency: SinkLatency::collect(registry),
            peak_rss_mb: peak_rss_mb(),
            tasks_not_ended: run.tasks_not_ended.clone(),
        }
    }

    /// The report of a run that failed before its job ran (an invalid job file, a component
    /// that could not be made, such as a file source whose file is missing): outcome `failed`,
    /// the error, and no counts.
    pub fn not_started(why: &NotStarted<'_>) -> Report {
        Report {
            job_name: why.job_name.map(str::to_string),
            instance: why.instance.map(str::to_string),
            outcome: "failed",
            exit_code: why.exit_code,
            stop_reason: None,
            error: Some(why.error.clone()),
            failure: why.failure.clone(),
            start_time: rfc3339(why.started),
            end_time: rfc3339(SystemTime::now()),
            elapsed_seconds: 0.0,
            settings: why.settings.map(Settings::json),
            records: RecordTotals {
                emitted_by_sources: 0,
                received_by_sinks: 0,
                dropped_total: 0,
                dropped: DropReason::ALL.iter().map(|r| (r.as_str(), 0)).collect(),
            },
            vertices: Vec::new(),
            latency: Vec::new(),
            markers_emitted: Vec::new(),
            sink_latency: SinkLatency::default(),
            peak_rss_mb: peak_rss_mb(),
            tasks_not_ended: Vec::new(),
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes") + "\n"
    }

    /// What a reader should not miss even without the table (printed always): that the
    /// sources read nothing but malformed lines, say.
    pub fn warnings(&self) -> Vec<String> {
        let r = &self.records;
        let malformed = r.dropped.get("malformed").copied().unwrap_or(0);
        let mut warnings = Vec::new();
        if r.emitted_by_sources == 0 && malformed > 0 {
            let lines = if malformed == 1 {
                "its one line was".to_string()
            } else {
                format!("all {malformed} lines were")
            };
            warnings.push(format!(
                "the sources read no record: {lines} malformed and skipped (on_error: skip); \
                 is it the right input?"
            ));
        }
        warnings
    }

    /// A compact human-readable summary: per vertex records, per sink key marker latency.
    pub fn table(&self) -> String {
        /// Most latency rows shown; the report file has them all.
        const MAX_LATENCY_ROWS: usize = 16;
        let mut s = String::new();
        let name = self.job_name.as_deref().unwrap_or("?");
        let _ = write!(
            s,
            "tidemark: job \"{name}\" {} after {:.2}s",
            self.outcome, self.elapsed_seconds
        );
        if let Some(reason) = &self.stop_reason {
            let _ = write!(s, " ({reason})");
        }
        let r = &self.records;
        let _ = write!(
            s,
            "; {} from sources, {} to sinks",
            plural(r.emitted_by_sources, "record", "records"),
            r.received_by_sinks
        );
        if r.dropped_total > 0 {
            let _ = write!(s, ", {} dropped ({})", r.dropped_total, why(&r.dropped));
        }
        s.push('\n');
        if self.vertices.is_empty() {
            return s;
        }
        let id_w = self
            .vertices
            .iter()
            .map(|v| v.id.len())
            .max()
            .unwrap_or(0)
            .max("vertex".len());
        let _ = writeln!(
            s,
            "  {:<id_w$}  {:<8}  {:>3}  {:>12}  {:>12}  {:>9}",
            "vertex", "kind", "par", "records in", "records out", "dropped"
        );
        for v in &self.vertices {
            let dropped: u64 = v.dropped.values().sum();
            let line = format!(
                "  {:<id_w$}  {:<8}  {:>3}  {:>12}  {:>12}  {:>9}  {}",
                v.id,
                v.kind,
                v.subtasks.len(),
                v.records_in,
                v.records_out,
                dropped,
                why(&v.dropped)
            );
            let _ = writeln!(s, "{}", line.trim_end());
        }
        let sinks: Vec<&LatencyReport> = self
            .latency
            .iter()
            .filter(|l| l.operator_kind == "sink")
            .collect();
        if !sinks.is_empty() {
            let label = |l: &LatencyReport| {
                let mut k = format!("{}#{}", l.operator_id, l.operator_subtask_index);
                if let Some(src) = &l.source_id {
                    let _ = write!(k, " <- {src}");
                    if let Some(i) = l.source_subtask_index {
                        let _ = write!(k, "#{i}");
                    }
                }
                k
            };
            let key_w = sinks
                .iter()
                .map(|l| label(l).len())
                .max()
                .unwrap_or(0)
                .max("marker latency (ms)".len());
            let _ = writeln!(
                s,
                "  {:<key_w$}  {:>8}  {:>9}  {:>9}  {:>9}",
                "marker latency (ms)", "count", "p50", "p99", "max"
            );
            for l in sinks.iter().take(MAX_LATENCY_ROWS) {
                let _ = writeln!(
                    s,
                    "  {:<key_w$}  {:>8}  {:>9}  {:>9}  {:>9}",
                    label(l),
                    l.count,
                    ms(l.p50_ms),
                    ms(l.p99_ms),
                    ms(l.max_ms)
                );
            }
            if sinks.len() > MAX_LATENCY_ROWS {
                let _ = writeln!(
                    s,
                    "  … {} more latency series (all of them are in --report-file)",
                    sinks.len() - MAX_LATENCY_ROWS
                );
            }
        }
        s
    }
}

/// Milliseconds with about three significant digits (sub-microsecond latencies are common in
/// chained tasks); `-` for no value.
pub fn ms(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".to_string()
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        // Digits after the point so that three significant digits show (at most 6).
        let digits = (2 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.digits$}")
    }
}

fn latency_report(
    registry: &MetricsRegistry,
    key: &LatencyKey,
    operator_id: &str,
    kind: VertexKind,
    subtask: usize,
    stats: &tidemark_markers::LatencyStats,
) -> LatencyReport {
    let w = stats.window_stats();
    let ms = |ns: f64| round_significant(ns / 1e6, DIGITS);
    let q = |p: f64| ms(w.quantile(p).unwrap_or(f64::NAN));
    LatencyReport {
        source_id: key.source_id.map(|i| registry.vertex_id(i).to_string()),
        source_subtask_index: key.source_subtask,
        source_instance: tidemark_markers::origin::name(key.origin),
        operator_id: operator_id.to_string(),
        operator_subtask_index: subtask,
        operator_kind: kind.as_str(),
        count: stats.count(),
        min_ms: ms(w.min),
        max_ms: ms(w.max),
        mean_ms: ms(w.mean),
        stddev_ms: ms(w.stddev),
        p50_ms: q(0.5),
        p75_ms: q(0.75),
        p95_ms: q(0.95),
        p98_ms: q(0.98),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        negative_count: stats.negative_count(),
    }
}

/// `t` as RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T08:15:02.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{resolve, FileSettings};
    use std::sync::Arc;
    use std::time::Duration;
    use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
    use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};

    #[test]
    fn milliseconds_keep_three_significant_digits() {
        assert_eq!(ms(0.000411), "0.000411");
        assert_eq!(ms(0.0123), "0.0123");
        assert_eq!(ms(1.5), "1.50");
        assert_eq!(ms(12.345), "12.3");
        assert_eq!(ms(250.4), "250");
        assert_eq!(ms(0.0), "0");
        assert_eq!(ms(f64::NAN), "-");
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_764_403_200_123); // 2025-11-29
        assert_eq!(rfc3339(t), "2025-11-29T08:00:00.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    fn finished_registry() -> (Arc<MetricsRegistry>, Duration) {
        let mut graph = JobGraph::new("report-test");
        let src = graph
            .add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(500))))
            .unwrap();
        let op = graph
            .add_operator("double", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0))))
            .unwrap();
        let sink = graph
            .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        graph.connect(src, op, Partitioning::Forward).unwrap();
        graph.connect(op, sink, Partitioning::Rebalance).unwrap();
        let mut config = JobConfig::default();
        config.latency.interval = Duration::from_millis(1);
        let result = run(graph, config).unwrap();
        assert_eq!(result.outcome, JobOutcome::Finished);
        (result.metrics, result.elapsed)
    }

    #[test]
    fn report_json_has_the_documented_shape() {
        let (registry, elapsed) = finished_registry();
        let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
        let outcome = JobOutcome::Finished;
        let report = Report::collect(
            &registry,
            &RunSummary {
                outcome: &outcome,
                elapsed,
                ended: SystemTime::now(),
                settings: &settings,
                stop_reason: None,
                error: None,
                exit_code: 0,
                tasks_not_ended: Vec::new(),
            },
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["job_name"], "report-test");
        assert_eq!(json["outcome"], "finished");
        assert!(json.get("failure").is_none());
        assert!(json["start_time"].as_str().unwrap().ends_with('Z'));
        assert!(json["end_time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(
            json["elapsed_seconds"].as_f64(),
            Some(elapsed.as_secs_f64())
        );
        assert_eq!(json["records"]["emitted_by_sources"], 1000);
        assert_eq!(json["records"]["received_by_sinks"], 1000);
        let vertices = json["vertices"].as_array().unwrap();
        assert_eq!(vertices.len(), 3);
        assert_eq!(vertices[0]["id"], "numbers");
        assert_eq!(vertices[0]["kind"], "source");
        assert_eq!(vertices[0]["subtasks"].as_array().unwrap().len(), 2);
        assert_eq!(vertices[0]["subtasks"][1]["subtask"], 1);
        assert_eq!(vertices[0]["subtasks"][1]["records_out"], 500);
        assert_eq!(vertices[2]["subtasks"][0]["records_in"], 1000);
        let markers = json["markers_emitted"].as_array().unwrap();
        assert_eq!(markers.len(), 2);
        assert_eq!(markers[0]["source_id"], "numbers");
        assert_eq!(markers[0]["source_subtask_index"], 0);
        assert!(markers[0]["count"].as_u64().unwrap() >= 1);
        let latency = json["latency"].as_array().unwrap();
        let sink_rows: Vec<_> = latency
            .iter()
            .filter(|l| l["operator_kind"] == "sink")
            .collect();
        assert!(!sink_rows.is_empty());
        let row = sink_rows[0];
        assert_eq!(row["operator_id"], "out");
        assert_eq!(row["operator_subtask_index"], 0);
        assert_eq!(row["source_id"], "numbers");
        assert!(
            row.get("source_subtask_index").is_none(),
            "operator granularity"
        );
        for field in [
            "count",
            "min_ms",
            "max_ms",
            "mean_ms",
            "stddev_ms",
            "p50_ms",
            "p75_ms",
            "p95_ms",
            "p98_ms",
            "p99_ms",
            "p999_ms",
            "negative_count",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        let sink_markers: u64 = sink_rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
        let emitted: u64 = markers.iter().map(|m| m["count"].as_u64().unwrap()).sum();
        assert_eq!(sink_markers, emitted);

        let table = report.table();
        assert!(
            table.starts_with("tidemark: job \"report-test\" finished after"),
            "{table}"
        );
        assert!(table.contains("marker latency (ms)"), "{table}");
        assert!(table.contains("out#0 <- numbers"), "{table}");
    }

    #[test]
    fn sink_latency_and_peak_rss_are_in_the_report() {
        let (registry, elapsed) = finished_registry();
        let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
        let outcome = JobOutcome::Finished;
        let report = Report::collect(
            &registry,
            &RunSummary {
                outcome: &outcome,
                elapsed,
                ended: SystemTime::now(),
                settings: &settings,
                stop_reason: None,
                error: None,
                exit_code: 0,
                tasks_not_ended: Vec::new(),
            },
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let summary = &json["sink_latency"];
        for field in [
            "marker_p50_ms",
            "marker_p99_ms",
            "marker_max_ms",
            "e2e_p99_ms",
            "marker_p99_ms_since_start",
            "marker_max_ms_since_start",
            "e2e_p99_ms_since_start",
        ] {
            let v = summary[field].as_f64();
            assert!(v.is_some_and(|v| v >= 0.0), "{field}: {summary}");
        }
        // The summary covers exactly the sink rows' windows.
        let sink_rows: Vec<&LatencyReport> = report
            .latency
            .iter()
            .filter(|l| l.operator_kind == "sink")
            .collect();
        let max = sink_rows.iter().map(|l| l.max_ms).fold(f64::MIN, f64::max);
        assert_eq!(report.sink_latency.marker_max_ms, Some(max));
        let s = &report.sink_latency;
        assert!(s.marker_p50_ms <= s.marker_p99_ms && s.marker_p99_ms <= s.marker_max_ms);
        if cfg!(target_os = "linux") {
            let rss = json["peak_rss_mb"].as_f64().unwrap();
            assert!(rss > 0.0 && rss < 1e6, "{rss}");
        }
    }

    #[test]
    fn sink_latency_without_samples_is_null() {
        let summary = SinkLatency::from_samples(Vec::new(), Vec::new(), &[], &[]);
        assert_eq!(summary, SinkLatency::default());
        let json = serde_json::to_value(&summary).unwrap();
        assert!(json["marker_p99_ms"].is_null());
        assert!(json["e2e_p99_ms_since_start"].is_null());
    }

    #[test]
    fn sink_latency_pools_windows_and_histograms() {
        // Two sinks' windows: 1..=100 ms and 101..=200 ms (in ns), pooled before the quantiles.
        let markers: Vec<f64> = (1..=200).map(|i| f64::from(i) * 1e6).collect();
        let e2e: Vec<f64> = (1..=100).map(|i| f64::from(i) * 1e6).collect();
        let mut low = LatencyHistogram::new();
        let mut high = LatencyHistogram::new();
        for i in 1..=100 {
            low.record(i * 1_000_000);
            high.record((100 + i) * 1_000_000);
        }
        let summary = SinkLatency::from_samples(markers, e2e, &[low.clone(), high], &[low]);
        // legacy quantile: pos = p * (n + 1).
        assert_eq!(summary.marker_p50_ms, Some(100.5));
        assert!((summary.marker_p99_ms.unwrap() - 198.99).abs() < 1e-9);
        assert_eq!(summary.marker_max_ms, Some(200.0));
        assert!((summary.e2e_p99_ms.unwrap() - 99.99).abs() < 1e-9);
        // 198 of 200 samples are at or below 198 ms; within the histograms' 1%.
        let p99 = summary.marker_p99_ms_since_start.unwrap();
        assert!((p99 - 198.0).abs() / 198.0 < 0.015, "{p99}");
        let max = summary.marker_max_ms_since_start.unwrap();
        assert!((max - 200.0).abs() / 200.0 < 0.015, "{max}");
        let e2e = summary.e2e_p99_ms_since_start.unwrap();
        assert!((e2e - 99.0).abs() / 99.0 < 0.015, "{e2e}");
    }

    #[test]
    fn merged_quantile_of_zeros_and_tiny_values() {
        let mut zeros = LatencyHistogram::new();
        zeros.record_n(0, 10);
        assert_eq!(merged_quantile_seconds(&[zeros.clone()], 0.99), 0.0);
        let mut tiny = LatencyHistogram::new();
        tiny.record_n(500, 90); // 0.5 us
        let p = merged_quantile_seconds(&[zeros, tiny], 0.99);
        assert!((p - 500e-9).abs() <= 5e-9, "{p}");
        assert!(merged_quantile_seconds(&[], 0.5).is_nan());
    }

    #[test]
    fn peak_rss_is_read_from_vm_hwm() {
        let status =
            "Name:\ttidemark\nVmPeak:\t  200000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(vm_hwm_mb(status), Some(50.0));
        assert_eq!(vm_hwm_mb("Name:\tx\n"), None);
        assert_eq!(vm_hwm_mb("VmHWM:\tlots kB\n"), None);
    }

    #[test]
    fn failed_outcome_names_the_subtask() {
        let (registry, elapsed) = finished_registry();
        let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
        let outcome = JobOutcome::Failed(tidemark_runtime::TaskFailure {
            vertex_id: "double".into(),
            subtask: 1,
            message: "boom".into(),
        });
        let report = Report::collect(
            &registry,
            &RunSummary {
                outcome: &outcome,
                elapsed,
                ended: SystemTime::now(),
                settings: &settings,
                stop_reason: None,
                error: Some("job \"report-test\" failed: boom".into()),
                exit_code: 1,
                tasks_not_ended: Vec::new(),
            },
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["outcome"], "failed");
        assert_eq!(json["failure"]["vertex_id"], "double");
        assert_eq!(json["failure"]["subtask"], 1);
        assert_eq!(json["failure"]["message"], "boom");
        assert_eq!(json["exit_code"], 1);
        assert_eq!(json["error"], "job \"report-test\" failed: boom");
    }

    /// Reads no record: `malformed` lines skipped, nothing else.
    struct AllMalformed(u64);

    impl tidemark_runtime::Source for AllMalformed {
        fn poll(
            &mut self,
            _ctx: &tidemark_runtime::PollContext,
            _out: &mut tidemark_runtime::Output,
        ) -> Result<tidemark_runtime::SourceStatus, tidemark_runtime::BoxError> {
            Ok(tidemark_runtime::SourceStatus::Finished)
        }
        fn input_errors(&self) -> tidemark_runtime::SourceErrorCounts {
            tidemark_runtime::SourceErrorCounts {
                malformed: self.0,
                invalid_timestamps: 0,
            }
        }
    }

    fn report_of(registry: &MetricsRegistry, outcome: &JobOutcome) -> Report {
        let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
        Report::collect(
            registry,
            &RunSummary {
                outcome,
                elapsed: Duration::from_millis(10),
                ended: SystemTime::now(),
                settings: &settings,
                stop_reason: None,
                error: None,
                exit_code: 0,
                tasks_not_ended: Vec::new(),
            },
        )
    }

    #[test]
    fn skipped_lines_show_in_the_table_and_the_report() {
        let mut graph = JobGraph::new("binary-input");
        let src = graph
            .add_source("src", 1, |_| Ok(Box::new(AllMalformed(37))))
            .unwrap();
        let sink = graph
            .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        graph.connect(src, sink, Partitioning::Forward).unwrap();
        let result = run(graph, JobConfig::default()).unwrap();
        let report = report_of(&result.metrics, &result.outcome);

        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["records"]["dropped_total"], 37);
        assert_eq!(json["records"]["dropped"]["malformed"], 37);
        for reason in DropReason::ALL {
            assert!(
                json["records"]["dropped"][reason.as_str()].is_u64(),
                "{reason}"
            );
        }
        assert_eq!(json["vertices"][0]["dropped"]["malformed"], 37);
        assert_eq!(
            json["vertices"][0]["subtasks"][0]["dropped"]["malformed"],
            37
        );
        assert_eq!(json["vertices"][1]["dropped"], serde_json::json!({}));

        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "tidemark: job \"binary-input\" finished after 0.01s; 0 records from sources, 0 to \
             sinks, 37 dropped (37 malformed)"
        );
        assert!(lines[1].ends_with("dropped"), "{table}");
        let src_row = lines
            .iter()
            .find(|l| l.trim_start().starts_with("src"))
            .unwrap();
        assert!(src_row.ends_with("37  37 malformed"), "{table}");
        assert_eq!(
            report.warnings(),
            [
                "the sources read no record: all 37 lines were malformed and skipped \
              (on_error: skip); is it the right input?"
            ]
        );
    }

    #[test]
    fn one_record_is_singular() {
        let mut graph = JobGraph::new("one");
        let src = graph
            .add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(1))))
            .unwrap();
        let sink = graph
            .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        graph.connect(src, sink, Partitioning::Forward).unwrap();
        let result = run(graph, JobConfig::default()).unwrap();
        let table = report_of(&result.metrics, &result.outcome).table();
        assert!(
            table.contains("; 1 record from sources, 1 to sinks\n"),
            "{table}"
        );
        assert!(!table.contains("dropped ("), "nothing dropped: {table}");
    }

    /// Significant digits of a JSON number as written (`0.00442742` has 6).
    fn significant_digits(number: &str) -> usize {
        let mantissa = number.split(['e', 'E']).next().unwrap();
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        digits.trim_start_matches('0').trim_end_matches('0').len()
    }

    #[test]
    fn latencies_have_at_most_six_significant_digits() {
        assert_eq!(significant_digits("0.004427419999999993"), 16);
        assert_eq!(significant_digits("0.00442742"), 6);
        let (registry, elapsed) = finished_registry();
        let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
        let outcome = JobOutcome::Finished;
        let report = Report::collect(
            &registry,
            &RunSummary {
                outcome: &outcome,
                elapsed,
                ended: SystemTime::now(),
                settings: &settings,
                stop_reason: None,
                error: None,
                exit_code: 0,
                tasks_not_ended: Vec::new(),
            },
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let mut checked = 0;
        let mut check = |key: &str, v: &serde_json::Value| {
            if key.ends_with("_ms") || key.contains("_ms_") {
                if let Some(n) = v.as_f64() {
                    let text = v.to_string();
                    assert!(significant_digits(&text) <= 6, "{key}: {text} ({n})");
                    checked += 1;
                }
            }
        };
        for row in json["latency"].as_array().unwrap() {
            for (k, v) in row.as_object().unwrap() {
                check(k, v);
            }
        }
        for (k, v) in json["sink_latency"].as_object().unwrap() {
            check(k, v);
        }
        assert!(checked > 10, "{checked} latencies checked");
    }

    #[test]
    fn a_job_that_never_ran_still_has_a_report() {
        let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
        let report = Report::not_started(&NotStarted {
            job_name: Some("etl"),
            instance: Some("db7-41532"),
            settings: Some(&settings),
            started: SystemTime::now(),
            error: "the job could not start: vertex \"src\" subtask 0: no file".into(),
            exit_code: 1,
            failure: Some(FailureReport {
                vertex_id: "src".into(),
                subtask: 0,
                message: "no file".into(),
            }),
        });
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["job_name"], "etl");
        assert_eq!(json["instance"], "db7-41532");
        assert_eq!(json["outcome"], "failed");
        assert_eq!(json["exit_code"], 1);
        assert!(json["error"].as_str().unwrap().contains("no file"));
        assert_eq!(json["failure"]["vertex_id"], "src");
        assert_eq!(json["records"]["emitted_by_sources"], 0);
        assert_eq!(json["settings"]["parallelism"], 1);
        assert_eq!(
            report.table(),
            "tidemark: job \"etl\" failed after 0.00s; 0 records from sources, 0 to sinks\n"
        );
        let unknown = Report::not_started(&NotStarted {
            job_name: None,
            instance: None,
            settings: None,
            started: SystemTime::now(),
            error: "job.yaml:1:1: bad".into(),
            exit_code: 2,
            failure: None,
        });
        let json: serde_json::Value = serde_json::from_str(&unknown.to_json()).unwrap();
        assert!(json["job_name"].is_null());
        assert!(json["settings"].is_null());
        assert_eq!(json["exit_code"], 2);
    }

    /// The report's `settings` object comes from the settings table: every row of `SETTINGS`
    /// is in it under its JSON name with the value `plan` shows, and nothing else is.
    #[test]
    fn every_setting_of_the_table_is_in_the_report() {
        use crate::settings::{JsonKind, SETTINGS};
        let defines: Vec<(String, String)> = [
            ("metrics.latency.interval", "15ms"),
            ("metrics.latency.granularity", "subtask"),
            ("metrics.latency.history-size", "7"),
            ("parallelism.default", "3"),
            ("metrics.reporter.prom.port", "9300"),
            ("pipeline.operator-chaining.enabled", "false"),
            ("execution.checkpointing.interval", "2s"),
            ("execution.channel-capacity", "32"),
            ("execution.idle-strategy", "spin"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = resolve(
            &FileSettings::default(),
            &Default::default(),
            None,
            &defines,
        )
        .unwrap();
        let report = Report::not_started(&NotStarted {
            job_name: Some("etl"),
            instance: None,
            settings: Some(&settings),
            started: SystemTime::now(),
            error: "no".into(),
            exit_code: 1,
            failure: None,
        });
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let object = json["settings"].as_object().unwrap();
        for spec in &SETTINGS {
            let value = object
                .get(spec.json_name)
                .unwrap_or_else(|| panic!("{} ({}) missing: {json}", spec.json_name, spec.key));
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert_eq!(text, spec.show(&settings), "{}", spec.key);
            match spec.json_kind {
                JsonKind::Text => assert!(value.is_string(), "{}: {value}", spec.key),
                JsonKind::Number => assert!(value.is_u64(), "{}: {value}", spec.key),
                JsonKind::Bool => assert!(value.is_boolean(), "{}: {value}", spec.key),
            }
        }
        assert_eq!(object.len(), SETTINGS.len(), "{json}");
        // The keys scripts, tests and docs/cli.md read keep their names and types.
        assert_eq!(
            json["settings"],
            serde_json::json!({
                "latency_interval": "15ms",
                "latency_granularity": "subtask",
                "latency_history_size": 7,
                "buffer_timeout": "1ms",
                "channel_capacity": 32,
                "parallelism": 3,
                "metrics_port": 9300,
                "chaining": false,
                "e2e_latency_everywhere": false,
                "checkpoint_interval": "2s",
                "idle_strategy": "spin",
            })
        );
    }
}
