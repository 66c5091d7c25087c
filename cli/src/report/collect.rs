//! Reading the report from the registry of an ended job.

use super::format::rfc3339;
use super::model::{
    Bottleneck, BucketReport, DroppedByReason, FailureReport, LatencyReport, MarkersEmitted,
    NotStarted, RecordTotals, Report, RunSummary, SeriesReport, SeriesReportValue, SinkLatency,
    SubtaskReport, TaskReport, TaskSubtaskReport, VertexReport,
};
use crate::settings::Settings;
use std::time::SystemTime;
use tidemark_markers::{legacy_quantile, round_significant, LatencyHistogram, LatencyKey};
use tidemark_runtime::metrics::VertexMetrics;
use tidemark_runtime::metrics::{CollectedFamily, SeriesValue};
use tidemark_runtime::{DropReason, JobOutcome, MetricsRegistry, SubtaskMetrics, VertexKind};

/// Significant digits of the latencies in the report (milliseconds): 0.000421, 12.3457, 250.004.
const DIGITS: u32 = 6;

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
    pub(super) fn from_samples(
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
pub(super) fn merged_quantile_seconds(histograms: &[LatencyHistogram], q: f64) -> f64 {
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
pub(super) fn vm_hwm_mb(status: &str) -> Option<f64> {
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
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
        let elapsed = run.elapsed.as_secs_f64();
        for (index, v) in registry.vertices().iter().enumerate() {
            let subtasks: Vec<SubtaskReport> = v
                .subtasks
                .iter()
                .enumerate()
                .map(|(i, s)| SubtaskReport {
                    subtask: i,
                    records_in: s.records_in(),
                    records_out: s.records_out(),
                    dropped: dropped_of(s),
                    busy_seconds: s.busy_seconds(),
                })
                .collect();
            let task = registry.task_of(index).map(|t| &registry.tasks()[t]);
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
                task: task.map(|t| t.name.clone()).unwrap_or_default(),
                chained: task.is_some_and(|t| t.vertices.len() > 1),
                busy_ratio: busy_ratio(v, elapsed),
                lag_records: (v.kind == VertexKind::Source)
                    .then(|| known_lag(v))
                    .flatten(),
                e2e_p99_ms: e2e_p99_ms(v),
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
                    let mut report = latency_report(registry, key, &v.id, v.kind, i, stats);
                    report.chained = markers_chained(registry, key, index);
                    latency.push(report);
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
            series: series_report(registry.component_series()),
            checkpoint: None,
            state_restores: None,
            peak_rss_mb: peak_rss_mb(),
            bottleneck: None,
            tasks: tasks_report(registry),
            tasks_not_ended: run.tasks_not_ended.clone(),
        }
        .with_bottleneck()
    }

    /// Sets [`Report::bottleneck`]: the vertex with the highest busy ratio, if any was busy.
    fn with_bottleneck(mut self) -> Self {
        self.bottleneck = self
            .vertices
            .iter()
            .filter(|v| v.busy_ratio > 0.0)
            .max_by(|a, b| a.busy_ratio.total_cmp(&b.busy_ratio))
            .map(|v| Bottleneck {
                vertex: v.id.clone(),
                busy_ratio: v.busy_ratio,
            });
        self
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
            series: Vec::new(),
            checkpoint: None,
            state_restores: None,
            peak_rss_mb: peak_rss_mb(),
            bottleneck: None,
            tasks: Vec::new(),
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
}

/// The busy fraction of `v`'s busiest subtask over `elapsed` seconds (0 when nothing ran).
fn busy_ratio(v: &VertexMetrics, elapsed: f64) -> f64 {
    if elapsed <= 0.0 {
        return 0.0;
    }
    v.subtasks
        .iter()
        .map(|s| (s.busy_seconds() / elapsed).min(1.0))
        .fold(0.0, f64::max)
}

/// A source's lag in records summed over the subtasks that know theirs; `None` when none does.
fn known_lag(v: &VertexMetrics) -> Option<i64> {
    let known: Vec<i64> = v
        .subtasks
        .iter()
        .map(|s| s.lag_records())
        .filter(|&l| l >= 0)
        .collect();
    (!known.is_empty()).then(|| known.iter().sum())
}

/// Record end-to-end latency p99 of `v`'s subtasks' windows pooled, in ms.
fn e2e_p99_ms(v: &VertexMetrics) -> Option<f64> {
    let mut samples: Vec<f64> = Vec::new();
    for s in &v.subtasks {
        if let Some(stats) = s.e2e_latency().as_ref() {
            samples.extend(stats.window().samples().map(|ns| ns as f64));
        }
    }
    samples.sort_unstable_by(f64::total_cmp);
    let p99 = legacy_quantile(&samples, 0.99);
    p99.is_finite()
        .then(|| round_significant(p99 / 1e6, DIGITS))
}

/// Whether the markers of `key`, recorded at the vertex at index `vertex`, came only from
/// sources chained with it in one task: the key's source, or every source of the job when the
/// key does not name one (single granularity). Markers from another process (a Kafka exchange)
/// crossed a topic, so they are never chained.
pub fn markers_chained(registry: &MetricsRegistry, key: &LatencyKey, vertex: usize) -> bool {
    if key.origin != tidemark_markers::origin::LOCAL {
        return false;
    }
    let Some(task) = registry.task_of(vertex) else {
        return false;
    };
    let chained_with = |source: usize| registry.task_of(source) == Some(task);
    match key.source_id {
        Some(source) => chained_with(source as usize),
        None => registry
            .vertices()
            .iter()
            .enumerate()
            .filter(|(_, v)| v.kind == VertexKind::Source)
            .all(|(i, _)| chained_with(i)),
    }
}

/// Every task's busy, backpressured and idle seconds per subtask.
fn tasks_report(registry: &MetricsRegistry) -> Vec<TaskReport> {
    registry
        .tasks()
        .iter()
        .map(|t| TaskReport {
            name: t.name.clone(),
            subtasks: t
                .subtasks
                .iter()
                .enumerate()
                .map(|(i, s)| TaskSubtaskReport {
                    subtask: i,
                    busy_seconds: s.busy_seconds(),
                    backpressured_seconds: s.backpressured_seconds(),
                    idle_seconds: s.idle_seconds(),
                })
                .collect(),
        })
        .collect()
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
        chained: false,
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

/// Every series of the registered components' `families`, family by family: what the report
/// and `/api/v1/metrics` list under `series`.
pub fn series_report(families: Vec<CollectedFamily>) -> Vec<SeriesReport> {
    let mut entries = Vec::new();
    for collected in families {
        for series in collected.series {
            let value = match series.value {
                SeriesValue::Number(value) => SeriesReportValue::Number { value },
                SeriesValue::Histogram {
                    buckets,
                    count,
                    sum,
                } => SeriesReportValue::Histogram {
                    count,
                    sum,
                    buckets: buckets
                        .into_iter()
                        .map(|(le, count)| BucketReport { le, count })
                        .collect(),
                },
            };
            entries.push(SeriesReport {
                name: collected.family.name,
                kind: collected.family.kind.as_str(),
                labels: series.labels.into_iter().collect(),
                value,
            });
        }
    }
    entries
}
