//! The Prometheus exporter: reads the [`MetricsRegistry`] at scrape time and renders the
//! Prometheus text format. Nothing is copied on the hot path; a scrape takes each latency
//! mutex briefly (just long enough to copy that subtask's statistics) and does every
//! computation after releasing it.
//!
//! [`RegistryCollector`] is a [`prometheus::core::Collector`] for use with a
//! [`prometheus::Registry`]; [`gather`] and [`render_text`] read a registry directly. The series
//! are those of the metrics reference, `docs/metrics.md`; every one carries the label `job_name`, and latencies are in
//! seconds.
//!
//! Families come in a fixed order (the order of [`FAMILY_NAMES`]), series inside a family in
//! graph order of the vertices, then subtask index, then latency key (source vertex index, then
//! source subtask). A family with no series is left out (the text format has no way to show
//! one), so with markers disabled no `tidemark_marker_latency*` family appears at all.
//!
//! ```
//! use tidemark_runtime::exporter::render_text;
//! use tidemark_runtime::testing::{CountingSource, DiscardSink};
//! use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};
//!
//! let mut graph = JobGraph::new("example");
//! let src = graph.add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(10)))).unwrap();
//! let sink = graph.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
//! graph.connect(src, sink, Partitioning::Forward).unwrap();
//! let result = run(graph, JobConfig::default()).unwrap();
//!
//! let text = render_text(&result.metrics).unwrap();
//! assert!(text.contains(
//!     r#"tidemark_records_in_total{job_name="example",operator_id="out",operator_subtask_index="0"} 10"#
//! ));
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use tidemark_markers::{legacy_quantile, round_significant, Granularity, LatencyKey, LatencyStats};

use crate::graph::VertexKind;
use crate::metrics::{DropReason, MetricsRegistry, SeriesKind, SeriesValue};

/// The reasons a vertex of `kind` can drop a record for (its `tidemark_records_dropped_total`
/// series, all present from the start).
fn drop_reasons(kind: VertexKind) -> &'static [DropReason] {
    match kind {
        VertexKind::Source => &[
            DropReason::Malformed,
            DropReason::InvalidTimestamp,
            DropReason::Tombstone,
            DropReason::InFlight,
        ],
        VertexKind::Operator => &[
            DropReason::Late,
            DropReason::ExpressionError,
            DropReason::Unmatched,
            DropReason::Tombstone,
            DropReason::InFlight,
        ],
        VertexKind::Sink => &[DropReason::OutputClosed, DropReason::InFlight],
    }
}

/// The `Content-Type` of the text exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The label every series carries, holding the job's name.
pub const JOB_NAME_LABEL: &str = "job_name";

/// The label naming the instance (`tidemark run --instance-id`) on every series, when set.
pub const INSTANCE_LABEL: &str = "tidemark_instance";

/// Quantiles of `tidemark_marker_latency_window_seconds` over the sliding window (0 is the minimum and
/// 1 the maximum).
pub const MARKER_LATENCY_QUANTILES: [f64; 8] = [0.0, 0.5, 0.75, 0.95, 0.98, 0.99, 0.999, 1.0];

/// Quantiles of `tidemark_record_e2e_latency_window_seconds` over the sliding window (0 is the minimum
/// and 1 the maximum).
pub const E2E_LATENCY_QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

const NANOS_PER_SECOND: f64 = 1e9;

/// Significant digits of a computed number (a summary quantile, interpolated, so not whole
/// nanoseconds): keeps nanosecond resolution below a second, drops floating-point noise.
pub const SIGNIFICANT_DIGITS: u32 = 9;

/// `value` rounded to [`SIGNIFICANT_DIGITS`] significant digits, as the quantiles of `/metrics`
/// are written; `/api/v1/metrics` writes every number through it too, so both print
/// `0.00347411666` where the arithmetic gave `0.003474116659999998`. Whole numbers (counts,
/// which `/metrics` writes exactly), infinities and NaN come back unchanged.
///
/// ```
/// use tidemark_runtime::exporter::round_value;
/// assert_eq!(round_value(0.003474116659999998), 0.00347411666);
/// assert_eq!(round_value(12.0), 12.0);
/// assert_eq!(round_value(12_345_678_901.0), 12_345_678_901.0);
/// ```
pub fn round_value(value: f64) -> f64 {
    if value.fract() == 0.0 {
        return value;
    }
    round_significant(value, SIGNIFICANT_DIGITS)
}

/// Which labels (besides `job_name`) the series of a family carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Labels {
    /// Only `job_name`.
    Job,
    /// `operator_id`, `operator_subtask_index`.
    Vertex,
    /// `task`, `subtask_index`.
    Task,
    /// `source_id`, `source_subtask_index`.
    Source,
    /// The labels of a latency key, as the granularity sets them (rule 14).
    MarkerKey,
    /// `operator_id`, `operator_subtask_index`, `reason`.
    VertexReason,
    /// `operator_id`, `operator_subtask_index`, `input`.
    VertexInput,
    /// `operator_id`, `operator_subtask_index`, `kind`.
    VertexKind,
    /// `operator_id`, `operator_subtask_index`, `side`.
    VertexSide,
}

impl Labels {
    fn names(self, granularity: Granularity) -> &'static [&'static str] {
        match self {
            Labels::Job => &[],
            Labels::Vertex => &["operator_id", "operator_subtask_index"],
            Labels::Task => &["task", "subtask_index"],
            Labels::Source => &["source_id", "source_subtask_index"],
            Labels::VertexReason => &["operator_id", "operator_subtask_index", "reason"],
            Labels::VertexInput => &["operator_id", "operator_subtask_index", "input"],
            Labels::VertexKind => &["operator_id", "operator_subtask_index", "kind"],
            Labels::VertexSide => &["operator_id", "operator_subtask_index", "side"],
            Labels::MarkerKey => match granularity {
                Granularity::Single => &["operator_id", "operator_subtask_index"],
                Granularity::Operator => &["source_id", "operator_id", "operator_subtask_index"],
                Granularity::Subtask => &[
                    "source_id",
                    "source_subtask_index",
                    "operator_id",
                    "operator_subtask_index",
                ],
            },
        }
    }
}

/// One metric family: name, help, type and label names.
#[derive(Debug)]
struct Spec {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    labels: Labels,
}

macro_rules! specs {
    ($($field:ident: $id:ident = $name:literal, $kind:ident, $labels:ident, $help:literal;)*) => {
        $(
            const $id: Spec = Spec {
                name: $name,
                help: $help,
                kind: MetricType::$kind,
                labels: Labels::$labels,
            };
        )*
        /// Every family in output order.
        const SPECS: &[Spec] = &[$($id),*];
        /// The name of every metric family the exporter can produce, in output order.
        pub const FAMILY_NAMES: &[&str] = &[$($name),*];

        /// Every family being filled during one scrape.
        struct Families {
            $($field: Family,)*
        }

        impl Families {
            fn new() -> Self {
                Families {
                    $($field: Family::new(&$id),)*
                }
            }

            /// The non-empty families in output order.
            fn finish(self) -> Vec<MetricFamily> {
                [$(self.$field),*]
                    .into_iter()
                    .filter_map(Family::finish)
                    .collect()
            }
        }
    };
}

specs! {
    job_running: JOB_RUNNING = "tidemark_job_running", GAUGE, Job,
        "1 while the job runs, 0 after it has ended.";
    records_in: RECORDS_IN = "tidemark_records_in_total", COUNTER, Vertex,
        "Records a vertex subtask received.";
    records_out: RECORDS_OUT = "tidemark_records_out_total", COUNTER, Vertex,
        "Records a vertex subtask emitted.";
    input_queue: INPUT_QUEUE = "tidemark_input_queue_records", GAUGE, Vertex,
        "Records waiting in the input channels of an operator or sink subtask.";
    operator_busy: OPERATOR_BUSY = "tidemark_operator_busy_seconds_total", COUNTER, Vertex,
        "Seconds a vertex subtask's own code took (a source's polls, an operator's processing, a sink's writes), estimated by timing one batch now and then and scaling; rate() is its busy fraction, and the vertices of a task add up to the task's busy time less the runtime's own share.";
    task_busy: TASK_BUSY = "tidemark_task_busy_seconds_total", COUNTER, Task,
        "Seconds a task (a chain of vertices, one thread per subtask) spent working.";
    task_backpressured: TASK_BACKPRESSURED = "tidemark_task_backpressured_seconds_total", COUNTER, Task,
        "Seconds a task spent blocked on a full output channel (backpressure).";
    task_idle: TASK_IDLE = "tidemark_task_idle_seconds_total", COUNTER, Task,
        "Seconds a task spent waiting for input.";
    lag_records: SOURCE_LAG_RECORDS = "tidemark_source_lag_records", GAUGE, Source,
        "Records a source subtask has not read yet (for a rate generator: records behind schedule); -1 when unknown.";
    lag_bytes: SOURCE_LAG_BYTES = "tidemark_source_lag_bytes", GAUGE, Source,
        "Bytes a file source subtask has not read yet; -1 when unknown.";
    malformed: SOURCE_MALFORMED = "tidemark_source_malformed_records_total", COUNTER, Source,
        "Input lines a source subtask skipped as malformed (on_error: skip).";
    invalid_timestamp: INVALID_TIMESTAMP = "tidemark_invalid_timestamp_records_total", COUNTER, Source,
        "Records whose create timestamp was outside the allowed range (dropped or clamped).";
    watermark_lag: WATERMARK_LAG = "tidemark_watermark_lag_seconds", GAUGE, Vertex,
        "Wall clock minus the subtask's current event-time watermark, in seconds (only where watermarks flow).";
    watermark: WATERMARK = "tidemark_watermark_seconds", GAUGE, Vertex,
        "The subtask's current event-time watermark, in seconds since the Unix epoch (only where watermarks flow).";
    watermark_holder: WATERMARK_HOLDER = "tidemark_watermark_holder_info", GAUGE, VertexInput,
        "1 for the input holding the subtask's watermark back now (the minimum over its inputs): input is the upstream vertex id, or <topic>/<partition> for a Kafka partition; an input that never sent a watermark holds it back.";
    state_keys: STATE_KEYS = "tidemark_state_keys", GAUGE, Vertex,
        "Key entries with state in a stateful operator subtask (a key with state in two windows counts twice), as published about once a second.";
    state_windows_open: STATE_WINDOWS_OPEN = "tidemark_state_windows_open", GAUGE, Vertex,
        "Windows not yet expired in a window operator subtask (0 for other stateful operators).";
    state_bytes: STATE_BYTES = "tidemark_state_bytes", GAUGE, Vertex,
        "An estimate of the bytes a stateful operator subtask's state takes in memory.";
    join_results: JOIN_RESULTS = "tidemark_join_results_total", COUNTER, VertexKind,
        "Results a join operator subtask emitted: kind=matched for a match, kind=unmatched for a record that matched nothing (an outer join's, the other side null); as published about once a second.";
    join_held: JOIN_HELD = "tidemark_join_held_records", GAUGE, VertexSide,
        "Records a join operator subtask holds now, per side (left, right; a table join's right side is its rows' versions), as published about once a second.";
    late_dropped: LATE_DROPPED = "tidemark_late_records_dropped_total", COUNTER, Vertex,
        "Records a window operator subtask dropped as late.";
    records_dropped: RECORDS_DROPPED = "tidemark_records_dropped_total", COUNTER, VertexReason,
        "Records a vertex subtask dropped, by reason: malformed, invalid_timestamp (sources), late, expression_error, unmatched (operators), tombstone (sources and operators), output_closed (sinks), in_flight (any, at a hard stop).";
    markers_emitted: MARKERS_EMITTED = "tidemark_markers_emitted_total", COUNTER, Source,
        "Latency markers a source subtask emitted.";
    marker_latency: MARKER_LATENCY = "tidemark_marker_latency_seconds", HISTOGRAM, MarkerKey,
        "Latency of markers from the source to this operator subtask, in seconds, cumulative since the job started (negative latencies count in the lowest bucket).";
    marker_window: MARKER_LATENCY_WINDOW = "tidemark_marker_latency_window_seconds", SUMMARY, MarkerKey,
        "Latency of markers from the source to this operator subtask, in seconds: quantiles over the last history-size markers (0 = min, 1 = max), count and sum over all markers.";
    marker_negative: MARKER_NEGATIVE = "tidemark_marker_negative_latency_total", COUNTER, MarkerKey,
        "Markers whose latency was negative (clock skew between machines).";
    e2e_latency: E2E_LATENCY = "tidemark_record_e2e_latency_seconds", HISTOGRAM, Vertex,
        "Record end-to-end latency (now - record timestamp) at this vertex subtask, in seconds, cumulative since the job started (negative latencies count in the lowest bucket).";
    e2e_window: E2E_LATENCY_WINDOW = "tidemark_record_e2e_latency_window_seconds", SUMMARY, Vertex,
        "Record end-to-end latency (now - record timestamp) at this vertex subtask, in seconds: quantiles over the last history-size records (0 = min, 1 = max), count and sum over all records.";
}

/// A [`Collector`] reading a [`MetricsRegistry`] at each scrape.
///
/// ```
/// # use tidemark_runtime::testing::{CountingSource, DiscardSink};
/// # use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};
/// use tidemark_runtime::exporter::RegistryCollector;
///
/// # let mut graph = JobGraph::new("example");
/// # let src = graph.add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(10)))).unwrap();
/// # let sink = graph.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
/// # graph.connect(src, sink, Partitioning::Forward).unwrap();
/// let result = run(graph, JobConfig::default()).unwrap();
/// let prom = prometheus::Registry::new();
/// prom.register(Box::new(RegistryCollector::new(result.metrics.clone()))).unwrap();
/// assert!(prom.gather().iter().any(|f| f.name() == "tidemark_records_in_total"));
/// ```
#[derive(Debug)]
pub struct RegistryCollector {
    registry: Arc<MetricsRegistry>,
    descs: Vec<Desc>,
}

impl RegistryCollector {
    /// A collector of `registry`'s series. `job_name` is a constant label of every descriptor, so
    /// collectors of jobs with different names can share one [`prometheus::Registry`] (if they
    /// use the same granularity).
    pub fn new(registry: Arc<MetricsRegistry>) -> Self {
        let granularity = registry.granularity();
        let const_labels =
            HashMap::from([(JOB_NAME_LABEL.to_owned(), registry.job_name().to_owned())]);
        let descs = SPECS
            .iter()
            .map(|spec| {
                Desc::new(
                    spec.name.to_owned(),
                    spec.help.to_owned(),
                    spec.labels
                        .names(granularity)
                        .iter()
                        .map(|&l| l.to_owned())
                        .collect(),
                    const_labels.clone(),
                )
                .expect("constant metric and label names are valid")
            })
            .collect();
        RegistryCollector { registry, descs }
    }

    /// The registry this collector reads.
    pub fn registry(&self) -> &Arc<MetricsRegistry> {
        &self.registry
    }
}

impl Collector for RegistryCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        gather(&self.registry)
    }
}

/// Reads every series of `registry` now, as metric families in a deterministic order (see the
/// module documentation). Families with no series are left out.
pub fn gather(registry: &MetricsRegistry) -> Vec<MetricFamily> {
    let job = registry.job_name();
    let granularity = registry.granularity();
    let mut f = Families::new();
    let now_nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);

    let running = if registry.is_running() { 1.0 } else { 0.0 };
    f.job_running.push(labels(job, &[]), gauge(running));

    for task in registry.tasks() {
        for (index, metrics) in task.subtasks.iter().enumerate() {
            let index = index.to_string();
            let l = labels(job, &[("task", &task.name), ("subtask_index", &index)]);
            f.task_busy.push(l.clone(), counter(metrics.busy_seconds()));
            f.task_backpressured
                .push(l.clone(), counter(metrics.backpressured_seconds()));
            f.task_idle.push(l, counter(metrics.idle_seconds()));
        }
    }

    for vertex in registry.vertices() {
        let is_source = vertex.kind == VertexKind::Source;
        for (index, metrics) in vertex.subtasks.iter().enumerate() {
            let index = index.to_string();
            let own = labels(
                job,
                &[
                    ("operator_id", &vertex.id),
                    ("operator_subtask_index", &index),
                ],
            );
            f.records_in
                .push(own.clone(), counter(metrics.records_in() as f64));
            f.records_out
                .push(own.clone(), counter(metrics.records_out() as f64));
            f.operator_busy
                .push(own.clone(), counter(metrics.busy_seconds()));
            if is_source {
                let source = labels(
                    job,
                    &[("source_id", &vertex.id), ("source_subtask_index", &index)],
                );
                f.lag_records
                    .push(source.clone(), gauge(metrics.lag_records() as f64));
                f.lag_bytes
                    .push(source.clone(), gauge(metrics.lag_bytes() as f64));
                f.malformed
                    .push(source.clone(), counter(metrics.malformed_records() as f64));
                f.invalid_timestamp.push(
                    source.clone(),
                    counter(metrics.invalid_timestamp_records() as f64),
                );
                f.markers_emitted
                    .push(source, counter(metrics.markers_emitted() as f64));
            } else {
                f.input_queue
                    .push(own.clone(), gauge(metrics.input_queue_records() as f64));
            }
            let watermark = metrics.watermark();
            if watermark != i64::MIN {
                let lag = now_nanos.saturating_sub(watermark) as f64 / NANOS_PER_SECOND;
                f.watermark_lag.push(own.clone(), gauge(lag));
                f.watermark
                    .push(own.clone(), gauge(watermark as f64 / NANOS_PER_SECOND));
            }
            if let Some(holder) = metrics.watermark_holder() {
                let l = labels(
                    job,
                    &[
                        ("operator_id", &vertex.id),
                        ("operator_subtask_index", &index),
                        ("input", &holder),
                    ],
                );
                f.watermark_holder.push(l, gauge(1.0));
            }
            if let Some(join) = metrics.join_counts() {
                let with = |name: &str, value: &str| {
                    labels(
                        job,
                        &[
                            ("operator_id", &vertex.id),
                            ("operator_subtask_index", &index),
                            (name, value),
                        ],
                    )
                };
                f.join_results
                    .push(with("kind", "matched"), counter(join.matched as f64));
                f.join_results
                    .push(with("kind", "unmatched"), counter(join.unmatched as f64));
                f.join_held
                    .push(with("side", "left"), gauge(join.held_left as f64));
                f.join_held
                    .push(with("side", "right"), gauge(join.held_right as f64));
            }
            if let Some(size) = metrics.state_size() {
                f.state_keys.push(own.clone(), gauge(size.keys as f64));
                f.state_windows_open
                    .push(own.clone(), gauge(size.windows_open as f64));
                f.state_bytes.push(own.clone(), gauge(size.bytes as f64));
            }
            if vertex.kind == VertexKind::Operator {
                f.late_dropped
                    .push(own.clone(), counter(metrics.late_records_dropped() as f64));
            }
            for &reason in drop_reasons(vertex.kind) {
                let l = labels(
                    job,
                    &[
                        ("operator_id", &vertex.id),
                        ("operator_subtask_index", &index),
                        ("reason", reason.as_str()),
                    ],
                );
                f.records_dropped
                    .push(l, counter(metrics.records_dropped(reason) as f64));
            }

            // Copy what the series need (window, buckets, totals) under the lock; sort and
            // encode after releasing it.
            let keys: Vec<(LatencyKey, KeySnapshot)> = metrics
                .latency()
                .iter()
                .map(|(key, stats)| (*key, KeySnapshot::of(stats)))
                .collect();
            for (key, snapshot) in keys {
                let l = marker_labels(registry, granularity, &key, &vertex.id, &index);
                f.marker_latency.push(l.clone(), histogram(&snapshot));
                f.marker_window
                    .push(l.clone(), summary(&snapshot, &MARKER_LATENCY_QUANTILES));
                f.marker_negative
                    .push(l, counter(snapshot.negative_count as f64));
            }

            let e2e = metrics
                .e2e_latency()
                .as_ref()
                .filter(|s| s.count() > 0)
                .map(KeySnapshot::of);
            if let Some(snapshot) = e2e {
                f.e2e_latency.push(own.clone(), histogram(&snapshot));
                f.e2e_window
                    .push(own, summary(&snapshot, &E2E_LATENCY_QUANTILES));
            }
        }
    }

    f.finish()
}

/// Renders every series of `registry` in the Prometheus text format (version 0.0.4, see
/// [`CONTENT_TYPE`]), followed by the [`process_families`] of this process, as a Prometheus
/// client library serves them. Fails only if the `prometheus` encoder rejects a family (it
/// rejects empty ones, which `gather` never returns); the caller decides how to report it.
///
/// The text is what `prometheus::TextEncoder` writes for these families, byte for byte, but
/// written by a leaner encoder (`text_encoder.rs`): a scrape of a large job is mostly text.
pub fn render_text(registry: &MetricsRegistry) -> Result<String, prometheus::Error> {
    let mut families = gather(registry);
    families.extend(process_families(registry.job_name()));
    if let Some(instance) = registry.instance() {
        // Several instances of one job (Kafka scale-out): every series names its instance.
        for family in &mut families {
            for metric in family.mut_metric().iter_mut() {
                let mut pair = LabelPair::default();
                pair.set_name(INSTANCE_LABEL.to_owned());
                pair.set_value(instance.to_owned());
                let mut labels = metric.take_label();
                labels.push(pair);
                metric.set_label(labels);
            }
        }
    }
    // Sized like the previous scrape (plus some room), so the text is not copied as it grows.
    let hint = registry
        .text_size_hint
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut text = String::with_capacity((hint + hint / 8).max(16 * 1024));
    crate::text_encoder::encode(&families, &mut text)?;
    crate::text_encoder::encode(&component_families(registry), &mut text)?;
    registry
        .text_size_hint
        .store(text.len(), std::sync::atomic::Ordering::Relaxed);
    Ok(text)
}

/// The series of the components registered with `registry`
/// ([`MetricsRegistry::register_series`]: checkpoints, Kafka), as metric families: each series
/// labelled `job_name`, then `tidemark_instance` when set, then the component's own labels.
/// [`render_text`] writes them after the registry's own series and the `process_*` series.
pub fn component_families(registry: &MetricsRegistry) -> Vec<MetricFamily> {
    let instance = registry.instance();
    let base: Vec<(&str, &str)> = instance
        .map(|i| vec![(INSTANCE_LABEL, i)])
        .unwrap_or_default();
    registry
        .component_series()
        .into_iter()
        .map(|collected| {
            let spec = &collected.family;
            let metrics = collected
                .series
                .iter()
                .map(|series| {
                    let own = series.labels.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                    let pairs: Vec<(&str, &str)> = base.iter().copied().chain(own).collect();
                    let value = match (&series.value, spec.kind) {
                        (SeriesValue::Number(v), SeriesKind::Counter) => counter(*v),
                        (SeriesValue::Number(v), _) => gauge(*v),
                        (
                            SeriesValue::Histogram {
                                buckets,
                                count,
                                sum,
                            },
                            _,
                        ) => Value::Histogram(proto_histogram(buckets, *count, *sum)),
                    };
                    metric(labels(registry.job_name(), &pairs), value)
                })
                .collect();
            let mut family = MetricFamily::default();
            family.set_name(spec.name.to_owned());
            family.set_help(spec.help.to_owned());
            family.set_field_type(match spec.kind {
                SeriesKind::Counter => MetricType::COUNTER,
                SeriesKind::Gauge => MetricType::GAUGE,
                SeriesKind::Histogram => MetricType::HISTOGRAM,
            });
            family.set_metric(metrics);
            family
        })
        .collect()
}

/// The standard `process_*` series of this process (CPU seconds, resident and virtual memory,
/// open and maximum file descriptors, start time, threads), read from `/proc` by the
/// `prometheus` crate's process collector, each with the `job_name` label like every other
/// series. Empty where `/proc` is not available (outside Linux).
///
/// [`gather`] and [`RegistryCollector`] leave these out; a [`prometheus::Registry`] user
/// registers `prometheus::process_collector::ProcessCollector` beside the collector instead.
///
/// ```
/// # #[cfg(target_os = "linux")] {
/// let families = tidemark_runtime::exporter::process_families("example");
/// assert!(families.iter().any(|f| f.name() == "process_resident_memory_bytes"));
/// # }
/// ```
pub fn process_families(job: &str) -> Vec<MetricFamily> {
    #[cfg(target_os = "linux")]
    {
        use prometheus::process_collector::ProcessCollector;
        use std::sync::OnceLock;
        // One collector for the process: its CPU counter only ever moves forward.
        static PROCESS: OnceLock<ProcessCollector> = OnceLock::new();
        let mut families = PROCESS.get_or_init(ProcessCollector::for_self).collect();
        for family in &mut families {
            for metric in family.mut_metric() {
                let mut pairs = metric.take_label();
                pairs.insert(0, labels(job, &[]).remove(0));
                metric.set_label(pairs);
            }
        }
        families
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = job;
        Vec::new()
    }
}

/// A family being filled.
struct Family {
    spec: &'static Spec,
    metrics: Vec<proto::Metric>,
}

impl Family {
    fn new(spec: &'static Spec) -> Self {
        Family {
            spec,
            metrics: Vec::new(),
        }
    }

    fn push(&mut self, labels: Vec<LabelPair>, value: Value) {
        self.metrics.push(metric(labels, value));
    }

    fn finish(self) -> Option<MetricFamily> {
        if self.metrics.is_empty() {
            return None;
        }
        let mut family = MetricFamily::default();
        family.set_name(self.spec.name.to_owned());
        family.set_help(self.spec.help.to_owned());
        family.set_field_type(self.spec.kind);
        family.set_metric(self.metrics);
        Some(family)
    }
}

/// One series: its labels and value.
fn metric(labels: Vec<LabelPair>, value: Value) -> proto::Metric {
    let mut metric = proto::Metric::from_label(labels);
    match value {
        Value::Counter(c) => metric.set_counter(c),
        Value::Gauge(g) => metric.set_gauge(g),
        Value::Summary(s) => metric.set_summary(s),
        Value::Histogram(h) => metric.set_histogram(h),
    }
    metric
}

enum Value {
    Counter(proto::Counter),
    Gauge(proto::Gauge),
    Summary(proto::Summary),
    Histogram(proto::Histogram),
}

fn counter(value: f64) -> Value {
    let mut c = proto::Counter::default();
    c.set_value(value);
    Value::Counter(c)
}

fn gauge(value: f64) -> Value {
    let mut g = proto::Gauge::default();
    g.set_value(value);
    Value::Gauge(g)
}

/// What a scrape needs of one latency key, copied while the subtask's lock is held: the window's
/// samples, the histogram's cumulative bucket counts and the totals (a few hundred bytes, not the
/// whole histogram).
struct KeySnapshot {
    window: Vec<f64>,
    count: u64,
    sum_seconds: f64,
    negative_count: u64,
    buckets: Vec<(f64, u64)>,
    histogram_count: u64,
    histogram_sum_seconds: f64,
}

impl KeySnapshot {
    fn of(stats: &LatencyStats) -> Self {
        let histogram = stats.histogram();
        KeySnapshot {
            window: stats.window().samples().map(|v| v as f64).collect(),
            count: stats.count(),
            sum_seconds: stats.sum_seconds(),
            negative_count: stats.negative_count(),
            buckets: histogram.exported_buckets(),
            histogram_count: histogram.count(),
            histogram_sum_seconds: histogram.sum_seconds(),
        }
    }
}

/// `quantiles` over the window (legacy estimation, rule 16), count and sum over all samples.
fn summary(snapshot: &KeySnapshot, quantiles: &[f64]) -> Value {
    let mut sorted = snapshot.window.clone();
    sorted.sort_unstable_by(f64::total_cmp);
    let quantiles = quantiles
        .iter()
        .map(|&p| {
            let mut q = proto::Quantile::default();
            q.set_quantile(p);
            q.set_value(round_value(legacy_quantile(&sorted, p) / NANOS_PER_SECOND));
            q
        })
        .collect();
    let mut s = proto::Summary::default();
    s.set_sample_count(snapshot.count);
    s.set_sample_sum(snapshot.sum_seconds);
    s.set_quantile(quantiles);
    Value::Summary(s)
}

/// The exact cumulative counts at the histogram's buckets ([`tidemark_markers::Buckets`]); the
/// text encoder adds `+Inf` with the total count.
fn histogram(snapshot: &KeySnapshot) -> Value {
    Value::Histogram(proto_histogram(
        &snapshot.buckets,
        snapshot.histogram_count,
        snapshot.histogram_sum_seconds,
    ))
}

/// A histogram of cumulative `buckets` (upper bound, count), `count` and `sum`; the text
/// encoder adds `+Inf` with `count`.
fn proto_histogram(buckets: &[(f64, u64)], count: u64, sum: f64) -> proto::Histogram {
    let buckets = buckets
        .iter()
        .map(|&(le, count)| {
            let mut b = proto::Bucket::default();
            b.set_upper_bound(le);
            b.set_cumulative_count(count);
            b
        })
        .collect();
    let mut h = proto::Histogram::default();
    h.set_sample_count(count);
    h.set_sample_sum(sum);
    h.set_bucket(buckets);
    h
}

/// `job_name` followed by `pairs`.
fn labels(job: &str, pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    std::iter::once((JOB_NAME_LABEL, job))
        .chain(pairs.iter().copied())
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_owned());
            pair.set_value(value.to_owned());
            pair
        })
        .collect()
}

/// The labels of one latency key of one operator subtask (rule 14); a marker's `source_id` is a
/// vertex index, exported as that vertex's id.
fn marker_labels(
    registry: &MetricsRegistry,
    granularity: Granularity,
    key: &LatencyKey,
    operator_id: &str,
    operator_subtask: &str,
) -> Vec<LabelPair> {
    const UNKNOWN: &str = "unknown";
    let source_id = key.source_id.map_or(UNKNOWN, |i| registry.vertex_id(i));
    let source_subtask = key
        .source_subtask
        .map_or_else(|| UNKNOWN.to_owned(), |s| s.to_string());
    let operator = [
        ("operator_id", operator_id),
        ("operator_subtask_index", operator_subtask),
    ];
    let mut pairs = match granularity {
        Granularity::Single => labels(registry.job_name(), &operator),
        Granularity::Operator => labels(
            registry.job_name(),
            &[("source_id", source_id), operator[0], operator[1]],
        ),
        Granularity::Subtask => labels(
            registry.job_name(),
            &[
                ("source_id", source_id),
                ("source_subtask_index", &source_subtask),
                operator[0],
                operator[1],
            ],
        ),
    };
    // A marker that crossed instances through a Kafka exchange names where it came from.
    if let Some(instance) = tidemark_markers::origin::name(key.origin) {
        pairs.extend(
            labels("", &[("source_instance", &instance)])
                .into_iter()
                .skip(1),
        );
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{CountingSource, DiscardSink, MapOperator};
    use crate::{run, JobConfig, JobGraph, JobOutcome, Partitioning};
    use std::collections::{BTreeMap, BTreeSet};
    use std::num::NonZeroUsize;
    use std::time::Duration;
    use tidemark_markers::LatencyConfig;
    use tidemark_markers::{E2E_LATENCY_BUCKETS_SECONDS, MARKER_LATENCY_BUCKETS_SECONDS};

    /// `numbers` (2) -forward-> `double` (2) -rebalance-> `out` (2) <-rebalance- `more` (1).
    fn run_job(granularity: Granularity, interval: Duration) -> Arc<MetricsRegistry> {
        let mut graph = JobGraph::new("exporter-test");
        let numbers = graph
            .add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(200_000))))
            .unwrap();
        let double = graph
            .add_operator("double", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0))))
            .unwrap();
        let out = graph
            .add_sink("out", 2, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        let more = graph
            .add_source("more", 1, |_| Ok(Box::new(CountingSource::new(50_000))))
            .unwrap();
        graph
            .connect(numbers, double, Partitioning::Forward)
            .unwrap();
        graph.connect(double, out, Partitioning::Rebalance).unwrap();
        graph.connect(more, out, Partitioning::Rebalance).unwrap();
        let config = JobConfig {
            latency: LatencyConfig {
                interval,
                granularity,
                history_size: NonZeroUsize::new(16).unwrap(),
            },
            seed: Some(7),
            ..JobConfig::default()
        };
        let result = run(graph, config).unwrap();
        assert_eq!(result.outcome, JobOutcome::Finished);
        result.metrics
    }

    /// One sample line: name, labels, value.
    #[derive(Debug, Clone, PartialEq)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    impl Sample {
        fn label(&self, name: &str) -> &str {
            self.labels.get(name).map(String::as_str).unwrap_or("")
        }
        fn label_names(&self) -> Vec<&str> {
            self.labels.keys().map(String::as_str).collect()
        }
    }

    /// Parses the sample lines of the text format (label values here hold no `,`, `"` or `}`).
    fn parse(text: &str) -> Vec<Sample> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("a value");
                let value = match value {
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
                };
                let (name, labels) = match series.split_once('{') {
                    None => (series, BTreeMap::new()),
                    Some((name, rest)) => {
                        let body = rest.strip_suffix('}').expect("closing brace");
                        let labels = body
                            .split(',')
                            .map(|pair| {
                                let (k, v) = pair.split_once('=').expect("label=value");
                                let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                                (k.to_owned(), v.expect("quoted value").to_owned())
                            })
                            .collect();
                        (name, labels)
                    }
                };
                Sample {
                    name: name.to_owned(),
                    labels,
                    value,
                }
            })
            .collect()
    }

    /// The families the test job of [`run_job`] has no series of: the watermark families need
    /// watermarks (see their own test), the state families a stateful operator
    /// (operators/tests/runtime_metrics.rs).
    const NOT_IN_THE_TEST_JOB: [&str; 8] = [
        WATERMARK_LAG.name,
        WATERMARK.name,
        WATERMARK_HOLDER.name,
        STATE_KEYS.name,
        STATE_WINDOWS_OPEN.name,
        STATE_BYTES.name,
        JOIN_RESULTS.name,
        JOIN_HELD.name,
    ];

    fn named<'a>(samples: &'a [Sample], name: &str) -> Vec<&'a Sample> {
        samples.iter().filter(|s| s.name == name).collect()
    }

    fn without<'a>(labels: &'a BTreeMap<String, String>, name: &str) -> Vec<(&'a str, &'a str)> {
        labels
            .iter()
            .filter(|(k, _)| k.as_str() != name)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn every_line_carries_job_name_and_every_family_has_help_and_type() {
        let registry = run_job(Granularity::Operator, Duration::from_millis(1));
        let text = render_text(&registry).unwrap();
        let samples = parse(&text);
        assert!(!samples.is_empty());
        for s in &samples {
            assert_eq!(s.label(JOB_NAME_LABEL), "exporter-test", "{s:?}");
        }
        // Every family appears (markers on, e2e on at sources and the sink), with HELP and TYPE,
        // in the documented order.
        let mut positions = Vec::new();
        for name in FAMILY_NAMES
            .iter()
            .filter(|n| !NOT_IN_THE_TEST_JOB.contains(n))
        {
            let help = format!("# HELP {name} ");
            let pos = text
                .find(&help)
                .unwrap_or_else(|| panic!("no HELP for {name}"));
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "no TYPE for {name}"
            );
            positions.push(pos);
        }
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "family order");
        // Deterministic: a second rendering of the finished job is identical (but for the
        // process's own series, which move with the process).
        let job_part = |text: &str| -> String {
            text.lines()
                .filter(|l| !l.contains("process_"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(job_part(&render_text(&registry).unwrap()), job_part(&text));
        assert_eq!(
            text.lines().find(|l| l.starts_with("tidemark_job_running")),
            Some(r#"tidemark_job_running{job_name="exporter-test"} 0"#)
        );
    }

    #[test]
    fn the_text_is_what_the_prometheus_encoder_writes() {
        use prometheus::{Encoder, TextEncoder};
        for granularity in Granularity::ALL {
            let registry = run_job(granularity, Duration::from_millis(1));
            let mut reference = Vec::new();
            TextEncoder::new()
                .encode(&gather(&registry), &mut reference)
                .unwrap();
            let reference = String::from_utf8(reference).unwrap();
            let text = render_text(&registry).unwrap();
            // The job's families, then the process's (which move between two readings).
            assert!(text.starts_with(&reference), "{granularity}");
            assert!(text[reference.len()..].starts_with("# HELP process_"));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_series_follow_the_tidemark_series() {
        let registry = run_job(Granularity::Single, Duration::ZERO);
        let text = render_text(&registry).unwrap();
        let samples = parse(&text);
        let value = |name: &str| -> f64 {
            let found = named(&samples, name);
            assert_eq!(found.len(), 1, "{name}");
            assert_eq!(found[0].label(JOB_NAME_LABEL), "exporter-test");
            found[0].value
        };
        for (name, kind) in [
            ("process_cpu_seconds_total", "counter"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            ("process_start_time_seconds", "gauge"),
            ("process_threads", "gauge"),
        ] {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        }
        // After every tidemark family.
        assert!(text.find("# HELP process_").unwrap() > text.rfind("# HELP tidemark_").unwrap());
        // This test process: memory in use, stdin/stdout/stderr open, started in the last hour.
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_threads") >= 1.0);
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "{started} vs {now}"
        );
        // `gather` (the collector's view) holds only the job's families.
        assert!(gather(&registry)
            .iter()
            .all(|f| f.name().starts_with("tidemark_")));
    }

    #[test]
    fn counters_match_the_registry() {
        let registry = run_job(Granularity::Operator, Duration::from_millis(1));
        let samples = parse(&render_text(&registry).unwrap());
        let find = |name: &str, labels: &[(&str, &str)]| -> f64 {
            let found: Vec<_> = samples
                .iter()
                .filter(|s| s.name == name && without(&s.labels, JOB_NAME_LABEL) == labels)
                .collect();
            assert_eq!(found.len(), 1, "{name} {labels:?}");
            found[0].value
        };
        for vertex in registry.vertices() {
            for (i, m) in vertex.subtasks.iter().enumerate() {
                let i = i.to_string();
                let own = [
                    ("operator_id", vertex.id.as_str()),
                    ("operator_subtask_index", i.as_str()),
                ];
                assert_eq!(
                    find("tidemark_records_in_total", &own),
                    m.records_in() as f64
                );
                assert_eq!(
                    find("tidemark_records_out_total", &own),
                    m.records_out() as f64
                );
                if vertex.kind == VertexKind::Source {
                    let src = [
                        ("source_id", vertex.id.as_str()),
                        ("source_subtask_index", i.as_str()),
                    ];
                    assert_eq!(
                        find("tidemark_markers_emitted_total", &src),
                        m.markers_emitted() as f64
                    );
                    assert!(m.markers_emitted() >= 1);
                    assert_eq!(
                        find("tidemark_source_lag_records", &src),
                        m.lag_records() as f64
                    );
                    assert_eq!(find("tidemark_source_lag_bytes", &src), -1.0);
                    assert_eq!(find("tidemark_source_malformed_records_total", &src), 0.0);
                    assert_eq!(find("tidemark_invalid_timestamp_records_total", &src), 0.0);
                } else {
                    assert_eq!(find("tidemark_input_queue_records", &own), 0.0);
                }
            }
        }
        // Sources (with forward chaining, `numbers+double`), the sink and `more`.
        let tasks: BTreeSet<&str> = named(&samples, "tidemark_task_busy_seconds_total")
            .iter()
            .map(|s| s.label("task"))
            .collect();
        let expected: BTreeSet<&str> = registry.tasks().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tasks, expected);
        for task in registry.tasks() {
            for (i, t) in task.subtasks.iter().enumerate() {
                let i = i.to_string();
                let l = [("subtask_index", i.as_str()), ("task", task.name.as_str())];
                assert_eq!(
                    find("tidemark_task_busy_seconds_total", &l),
                    t.busy_seconds()
                );
                assert_eq!(
                    find("tidemark_task_backpressured_seconds_total", &l),
                    t.backpressured_seconds()
                );
                assert_eq!(
                    find("tidemark_task_idle_seconds_total", &l),
                    t.idle_seconds()
                );
            }
        }
        // Late drops only for operators, queues only for non-sources.
        assert_eq!(
            named(&samples, "tidemark_late_records_dropped_total").len(),
            2
        );
        assert_eq!(named(&samples, "tidemark_input_queue_records").len(), 4);
        assert_eq!(named(&samples, "tidemark_source_lag_records").len(), 3);
    }

    /// The label names (without `job_name`) of every marker series, and the sinks' counts.
    fn check_marker_series(granularity: Granularity, expected_labels: &[&str]) {
        let registry = run_job(granularity, Duration::from_millis(1));
        let samples = parse(&render_text(&registry).unwrap());
        let mut expected: Vec<&str> = expected_labels.to_vec();
        expected.push(JOB_NAME_LABEL);
        expected.sort_unstable();

        let marker_names = [
            "tidemark_marker_latency_window_seconds",
            "tidemark_marker_latency_window_seconds_count",
            "tidemark_marker_latency_window_seconds_sum",
            "tidemark_marker_latency_seconds_bucket",
            "tidemark_marker_latency_seconds_count",
            "tidemark_marker_latency_seconds_sum",
            "tidemark_marker_negative_latency_total",
        ];
        for name in marker_names {
            let series = named(&samples, name);
            assert!(!series.is_empty(), "{granularity}: no {name}");
            for s in series {
                let mut names = s.label_names();
                names.retain(|&n| n != "quantile" && n != "le");
                assert_eq!(names, expected, "{granularity}: {s:?}");
                // Sources never record marker latency (rule 5).
                assert_ne!(s.label("operator_id"), "numbers");
                assert_ne!(s.label("operator_id"), "more");
            }
        }

        // One series per key of every operator subtask, counts equal to the registry's.
        let counts = named(&samples, "tidemark_marker_latency_seconds_count");
        let mut keys_in_registry = 0;
        for vertex in registry.vertices() {
            for m in &vertex.subtasks {
                let tracker = m.latency();
                keys_in_registry += tracker.len();
                let exported: f64 = counts
                    .iter()
                    .filter(|s| {
                        s.label("operator_id") == vertex.id
                            && s.label("operator_subtask_index")
                                == vertex
                                    .subtasks
                                    .iter()
                                    .position(|x| Arc::ptr_eq(x, m))
                                    .unwrap()
                                    .to_string()
                    })
                    .map(|s| s.value)
                    .sum();
                assert_eq!(exported, tracker.total_count() as f64);
            }
        }
        assert_eq!(counts.len(), keys_in_registry);

        // Every marker reaches exactly one sink subtask: the sink's counts add up to the markers
        // emitted (rule: nothing lost, nothing copied).
        let emitted: f64 = named(&samples, "tidemark_markers_emitted_total")
            .iter()
            .map(|s| s.value)
            .sum();
        let at_sink: f64 = counts
            .iter()
            .filter(|s| s.label("operator_id") == "out")
            .map(|s| s.value)
            .sum();
        assert_eq!(at_sink, emitted);
        assert_eq!(emitted, registry.markers_emitted() as f64);

        // Source ids are vertex ids, never indices.
        if granularity != Granularity::Single {
            let sources: BTreeSet<&str> = counts
                .iter()
                .filter(|s| s.label("operator_id") == "out")
                .map(|s| s.label("source_id"))
                .collect();
            assert_eq!(sources, BTreeSet::from(["more", "numbers"]));
        }
        if granularity == Granularity::Subtask {
            let origins: BTreeSet<(&str, &str)> = counts
                .iter()
                .filter(|s| s.label("operator_id") == "out")
                .map(|s| (s.label("source_id"), s.label("source_subtask_index")))
                .collect();
            assert_eq!(
                origins,
                BTreeSet::from([("more", "0"), ("numbers", "0"), ("numbers", "1")])
            );
        }
        check_summaries_and_histograms(
            &samples,
            "tidemark_marker_latency",
            &MARKER_LATENCY_QUANTILES,
            MARKER_LATENCY_BUCKETS_SECONDS,
        );
    }

    /// Quantile labels, ordered quantiles, cumulative buckets (the `le` values `bounds`) ending
    /// in `+Inf` = `_count`, and equal counts and sums in the summary and the histogram.
    fn check_summaries_and_histograms(
        samples: &[Sample],
        base: &str,
        quantiles: &[f64],
        bounds: &[f64],
    ) {
        let summary = format!("{base}_window_seconds");
        let hist = format!("{base}_seconds");
        let series_key = |s: &Sample| -> Vec<(String, String)> {
            s.labels
                .iter()
                .filter(|(k, _)| k.as_str() != "quantile" && k.as_str() != "le")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let mut by_series: BTreeMap<Vec<(String, String)>, Vec<&Sample>> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name.starts_with(&summary) || s.name.starts_with(&hist))
        {
            by_series.entry(series_key(s)).or_default().push(s);
        }
        assert!(!by_series.is_empty());
        let expected_quantiles: Vec<String> = quantiles.iter().map(|q| q.to_string()).collect();
        let mut expected_le: Vec<String> = bounds.iter().map(|b| b.to_string()).collect();
        expected_le.push("+Inf".to_owned());
        for (key, lines) in by_series {
            let get = |name: &str| -> Vec<&Sample> {
                lines.iter().copied().filter(|s| s.name == name).collect()
            };
            let qs = get(&summary);
            let q_labels: Vec<&str> = qs.iter().map(|s| s.label("quantile")).collect();
            assert_eq!(q_labels, expected_quantiles, "{key:?}");
            let values: Vec<f64> = qs.iter().map(|s| s.value).collect();
            assert!(
                values.windows(2).all(|w| w[0] <= w[1]),
                "{key:?}: {values:?}"
            );
            assert!(values.iter().all(|v| v.is_finite() && *v < 60.0));

            let count = get(&format!("{summary}_count"))[0].value;
            let sum = get(&format!("{summary}_sum"))[0].value;
            assert!(count >= 1.0);
            let buckets = get(&format!("{hist}_bucket"));
            let le: Vec<&str> = buckets.iter().map(|s| s.label("le")).collect();
            assert_eq!(le, expected_le, "{key:?}");
            let cumulative: Vec<f64> = buckets.iter().map(|s| s.value).collect();
            assert!(
                cumulative.windows(2).all(|w| w[0] <= w[1]),
                "{key:?}: {cumulative:?}"
            );
            assert_eq!(*cumulative.last().unwrap(), count, "+Inf is the count");
            assert_eq!(get(&format!("{hist}_count"))[0].value, count);
            assert_eq!(get(&format!("{hist}_sum"))[0].value, sum);
            // Min and max bound the mean of all samples only if the window holds them all.
            if count <= 16.0 {
                let mean = sum / count;
                assert!(values[0] <= mean + 1e-9 && mean <= values[values.len() - 1] + 1e-9);
            }
        }
    }

    #[test]
    fn marker_series_at_single_granularity() {
        check_marker_series(
            Granularity::Single,
            &["operator_id", "operator_subtask_index"],
        );
    }

    #[test]
    fn marker_series_at_operator_granularity() {
        check_marker_series(
            Granularity::Operator,
            &["operator_id", "operator_subtask_index", "source_id"],
        );
    }

    #[test]
    fn marker_series_at_subtask_granularity() {
        check_marker_series(
            Granularity::Subtask,
            &[
                "operator_id",
                "operator_subtask_index",
                "source_id",
                "source_subtask_index",
            ],
        );
    }

    #[test]
    fn interval_zero_exports_no_marker_latency_series() {
        let registry = run_job(Granularity::Subtask, Duration::ZERO);
        let text = render_text(&registry).unwrap();
        assert!(!text.contains("tidemark_marker_latency"), "{text}");
        assert!(!text.contains("tidemark_marker_negative_latency_total"));
        // The emitted counters stay, at 0.
        let samples = parse(&text);
        let emitted = named(&samples, "tidemark_markers_emitted_total");
        assert_eq!(emitted.len(), 3);
        assert!(emitted.iter().all(|s| s.value == 0.0));
        // Record latency does not depend on markers.
        assert!(text.contains("tidemark_record_e2e_latency_seconds_count"));
    }

    #[test]
    fn e2e_latency_series_at_sources_and_terminal_vertices() {
        let registry = run_job(Granularity::Operator, Duration::ZERO);
        let samples = parse(&render_text(&registry).unwrap());
        let vertices: BTreeSet<(&str, &str)> =
            named(&samples, "tidemark_record_e2e_latency_seconds_count")
                .iter()
                .map(|s| (s.label("operator_id"), s.label("operator_subtask_index")))
                .collect();
        // Not at `double`, which is neither a source nor terminal.
        assert_eq!(
            vertices,
            BTreeSet::from([
                ("more", "0"),
                ("numbers", "0"),
                ("numbers", "1"),
                ("out", "0"),
                ("out", "1")
            ])
        );
        for s in named(&samples, "tidemark_record_e2e_latency_seconds_count") {
            let v = registry.vertex(s.label("operator_id")).unwrap();
            let i: usize = s.label("operator_subtask_index").parse().unwrap();
            let stats = v.subtasks[i].e2e_latency().clone().unwrap();
            assert_eq!(s.value, stats.count() as f64);
            // Every record is counted at its source and at the sink.
            let records = if v.kind == VertexKind::Source {
                v.subtasks[i].records_out()
            } else {
                v.subtasks[i].records_in()
            };
            assert_eq!(s.value, records as f64);
        }
        check_summaries_and_histograms(
            &samples,
            "tidemark_record_e2e_latency",
            &E2E_LATENCY_QUANTILES,
            E2E_LATENCY_BUCKETS_SECONDS,
        );
    }

    #[test]
    fn summary_quantiles_follow_the_window() {
        let registry = run_job(Granularity::Single, Duration::from_millis(1));
        let samples = parse(&render_text(&registry).unwrap());
        let out = registry.vertex("out").unwrap();
        for (i, m) in out.subtasks.iter().enumerate() {
            let tracker = m.latency().clone();
            let Some(stats) = tracker.get(&LatencyKey::SINGLE) else {
                continue;
            };
            let w = stats.window_stats();
            let exported = |q: &str| {
                samples
                    .iter()
                    .find(|s| {
                        s.name == "tidemark_marker_latency_window_seconds"
                            && s.label("operator_id") == "out"
                            && s.label("operator_subtask_index") == i.to_string()
                            && s.label("quantile") == q
                    })
                    .unwrap()
                    .value
            };
            assert_eq!(exported("0"), w.min / 1e9);
            assert_eq!(exported("1"), w.max / 1e9);
            for (p, v) in w.quantiles {
                assert_eq!(
                    exported(&p.to_string()),
                    round_significant(v / 1e9, SIGNIFICANT_DIGITS),
                    "quantile {p}"
                );
            }
        }
    }

    #[test]
    fn collector_works_in_a_prometheus_registry() {
        let registry = run_job(Granularity::Operator, Duration::from_millis(1));
        let prom = prometheus::Registry::new();
        let collector = RegistryCollector::new(registry.clone());
        assert_eq!(collector.desc().len(), FAMILY_NAMES.len());
        prom.register(Box::new(collector)).unwrap();
        let families = prom.gather();
        let names: BTreeSet<&str> = families.iter().map(|f| f.name()).collect();
        let expected: BTreeSet<&str> = FAMILY_NAMES
            .iter()
            .copied()
            .filter(|n| !NOT_IN_THE_TEST_JOB.contains(n))
            .collect();
        assert_eq!(names, expected);
        let direct: usize = gather(&registry).iter().map(|f| f.get_metric().len()).sum();
        let via: usize = families.iter().map(|f| f.get_metric().len()).sum();
        assert_eq!(direct, via);
    }

    /// Runs `promtool check metrics` on the rendered text of each granularity when promtool is
    /// installed (Debian package `prometheus`); skips otherwise. promtool exits with 1 when the
    /// text does not parse and with 3 when it only has lint problems; the contract is exit 0 with
    /// nothing printed (`process_*` series included). With
    /// `TIDEMARK_METRICS_SAMPLE_DIR` set, also writes each rendered sample there.
    #[test]
    fn promtool_accepts_the_output() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        for granularity in Granularity::ALL {
            let text = render_text(&run_job(granularity, Duration::from_millis(1))).unwrap();
            if let Some(dir) = std::env::var_os("TIDEMARK_METRICS_SAMPLE_DIR") {
                let path = std::path::Path::new(&dir).join(format!("metrics-{granularity}.txt"));
                std::fs::write(path, &text).unwrap();
            }
            let child = Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            let Ok(mut child) = child else {
                panic!(
                    "this test needs promtool from Debian's prometheus package (scripts/test \
                     installs it)"
                );
            };
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let output = child.wait_with_output().unwrap();
            let report = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                report.is_empty() && output.status.code() == Some(0),
                "{granularity}: promtool exited with {:?}: {report}",
                output.status.code()
            );
            assert!(text.contains("\nprocess_resident_memory_bytes{job_name=\"exporter-test\"} "));
        }
    }

    #[test]
    fn watermark_lag_is_exported_where_watermarks_flow() {
        use crate::{SourceOptions, WatermarkStrategy};
        let mut graph = JobGraph::new("wm-lag");
        let src = graph
            .add_source("src", 1, |_| Ok(Box::new(CountingSource::new(5_000))))
            .unwrap();
        graph.set_source_options(
            src,
            SourceOptions {
                watermarks: Some(WatermarkStrategy::default()),
                timestamp_check: None,
            },
        );
        let sink = graph
            .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        graph.connect(src, sink, Partitioning::Rebalance).unwrap();
        let registry = run(graph, JobConfig::default()).unwrap().metrics;
        let text = render_text(&registry).unwrap();
        let samples = parse(&text);
        let lag = named(&samples, "tidemark_watermark_lag_seconds");
        let ids: BTreeSet<&str> = lag.iter().map(|s| s.label("operator_id")).collect();
        assert_eq!(ids, ["out", "src"].into_iter().collect());
        // The watermark trails the wall clock: the lag is positive.
        assert!(lag.iter().all(|s| s.value > 0.0), "{lag:?}");
        // The watermark itself, in seconds since the epoch, is the registry's.
        for s in named(&samples, "tidemark_watermark_seconds") {
            let wm = registry.vertex(s.label("operator_id")).unwrap().subtasks[0].watermark();
            assert_eq!(s.value, wm as f64 / 1e9, "{s:?}");
        }
        assert_eq!(named(&samples, "tidemark_watermark_seconds").len(), 2);
        // Without watermarks, no such series.
        let plain = run_job(Granularity::Single, Duration::ZERO);
        assert!(!render_text(&plain)
            .unwrap()
            .contains("tidemark_watermark_lag_seconds{"));
    }

    #[test]
    fn checkpoint_series_are_written_as_before() {
        use crate::checkpoint::Checkpoints;
        let registry =
            MetricsRegistry::new("cp".into(), Granularity::Single, Vec::new(), Vec::new());
        let checkpoints = Arc::new(Checkpoints::new(Some(Duration::from_secs(1)), 1));
        registry.register_series(checkpoints.clone());
        registry.set_instance("a\"b");
        let text = render_text(&registry).unwrap();
        // Byte for byte the text the coordinator wrote by hand before it was registered: the
        // instance label right after job_name, `le` last, `+Inf`, `_sum`, `_count`.
        let mut expected = String::from(
            "# HELP tidemark_checkpoints_completed_total Checkpoints every sink acknowledged.\n\
             # TYPE tidemark_checkpoints_completed_total counter\n\
             tidemark_checkpoints_completed_total{job_name=\"cp\",tidemark_instance=\"a\\\"b\"} 0\n\
             # HELP tidemark_checkpoints_failed_total Checkpoints that failed: not written (a write error, a subtask that ended before giving its state), or started and never completed (the job ended, failed or was stopped hard before every sink acknowledged them).\n\
             # TYPE tidemark_checkpoints_failed_total counter\n\
             tidemark_checkpoints_failed_total{job_name=\"cp\",tidemark_instance=\"a\\\"b\"} 0\n\
             # HELP tidemark_checkpoints_skipped_total Checkpoints whose time came while checkpoint.max_concurrent were still in flight or within checkpoint.min_pause of the last one (each started as soon as it could: a slow store makes checkpoints rarer, not memory grow).\n\
             # TYPE tidemark_checkpoints_skipped_total counter\n\
             tidemark_checkpoints_skipped_total{job_name=\"cp\",tidemark_instance=\"a\\\"b\"} 0\n\
             # HELP tidemark_checkpoint_duration_seconds Time from a checkpoint's first barrier to the last sink acknowledgement.\n\
             # TYPE tidemark_checkpoint_duration_seconds histogram\n",
        );
        for le in [
            "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30",
            "+Inf",
        ] {
            expected.push_str(&format!(
                "tidemark_checkpoint_duration_seconds_bucket{{job_name=\"cp\",tidemark_instance=\"a\\\"b\",le=\"{le}\"}} 0\n"
            ));
        }
        expected.push_str(
            "tidemark_checkpoint_duration_seconds_sum{job_name=\"cp\",tidemark_instance=\"a\\\"b\"} 0\n\
             tidemark_checkpoint_duration_seconds_count{job_name=\"cp\",tidemark_instance=\"a\\\"b\"} 0\n",
        );
        let start = text.find("# HELP tidemark_checkpoint").unwrap();
        assert_eq!(&text[start..], expected);
    }

    #[test]
    fn a_checkpointed_job_exports_each_checkpoint_family_once() {
        let mut graph = JobGraph::new("cp-job");
        let src = graph
            .add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(20_000))))
            .unwrap();
        let sink = graph
            .add_sink("out", 2, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        graph.connect(src, sink, Partitioning::Rebalance).unwrap();
        let config = JobConfig {
            checkpoint_interval: Some(Duration::from_millis(1)),
            ..JobConfig::default()
        };
        let result = run(graph, config).unwrap();
        let text = render_text(&result.metrics).unwrap();
        for family in [
            "tidemark_checkpoints_completed_total",
            "tidemark_checkpoint_duration_seconds",
        ] {
            let header = format!("# TYPE {family} ");
            assert_eq!(text.matches(&header).count(), 1, "{family}: {text}");
        }
        // The exported count is the coordinator's (the job has ended: nothing moves).
        let completed = result.checkpoints.completed_total();
        let samples = parse(&text);
        let exported = named(&samples, "tidemark_checkpoints_completed_total");
        assert_eq!(exported.len(), 1, "{exported:?}");
        assert_eq!(exported[0].value, completed as f64);
        assert_eq!(
            named(&samples, "tidemark_checkpoint_duration_seconds_count")[0].value,
            completed as f64
        );
        // Without an interval, none.
        let plain = render_text(&run_job(Granularity::Single, Duration::ZERO)).unwrap();
        assert!(!plain.contains("tidemark_checkpoint"), "{plain}");
    }
}
