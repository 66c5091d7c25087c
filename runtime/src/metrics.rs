//! The metrics registry: what every subtask and task has done so far, readable from any thread
//! at any moment while the job runs.
//!
//! Each counter is written by the one thread that owns it, once per batch (a relaxed store of a
//! thread-local count), and lives on its own cache line, so the per-record path takes no lock and
//! shares no cache line. Latency statistics change once per marker and sit behind a mutex that
//! only the owning task and a scrape ever take.

use crate::vertex_kind::VertexKind;
use crossbeam_utils::CachePadded;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use tidemark_markers::{Buckets, Granularity, LatencyStats, LatencyTracker};

/// The size of an operator subtask's state ([`crate::Operator::state_size`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSize {
    /// Key entries with state (a key with state in two windows counts twice).
    pub keys: u64,
    /// Windows not yet expired (0 for an operator without windows).
    pub windows_open: u64,
    /// An estimate of the bytes the state takes in memory.
    pub bytes: u64,
}

/// A join operator subtask's counts ([`crate::Operator::join_counts`]): results so far and
/// records held now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JoinCounts {
    /// Results of a match.
    pub matched: u64,
    /// Results of a record that matched nothing (an outer join's, the other side null).
    pub unmatched: u64,
    /// Left records held now.
    pub held_left: u64,
    /// Right records held now (a table join's versions).
    pub held_right: u64,
}

/// Counters of one vertex subtask, read by the exporter and the report.
///
/// Only the runtime writes them (each counter from the one task that owns it); library users
/// read them:
///
/// ```compile_fail,E0624
/// # use tidemark_runtime::testing::{CountingSource, DiscardSink};
/// # use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};
/// # let mut graph = JobGraph::new("example");
/// # let src = graph.add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(10)))).unwrap();
/// # let sink = graph.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
/// # graph.connect(src, sink, Partitioning::Forward).unwrap();
/// let metrics = run(graph, JobConfig::default()).unwrap().metrics;
/// let out = &metrics.vertex("out").unwrap().subtasks[0];
/// out.set_records_in(0); // error: the setters are private to the runtime
/// ```
///
/// ```
/// # use tidemark_runtime::testing::{CountingSource, DiscardSink};
/// # use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};
/// # let mut graph = JobGraph::new("example");
/// # let src = graph.add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(10)))).unwrap();
/// # let sink = graph.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
/// # graph.connect(src, sink, Partitioning::Forward).unwrap();
/// let metrics = run(graph, JobConfig::default()).unwrap().metrics;
/// assert_eq!(metrics.vertex("out").unwrap().subtasks[0].records_in(), 10);
/// ```
#[derive(Debug)]
pub struct SubtaskMetrics {
    counters: CachePadded<OwnedCounters>,
    input_queue: CachePadded<AtomicI64>,
    latency: Mutex<LatencyTracker>,
    e2e: Mutex<Option<LatencyStats>>,
    dropped: CachePadded<[AtomicU64; DropReason::COUNT]>,
    /// The input holding the watermark back; set when it changes (at a watermark, not per
    /// record).
    watermark_holder: Mutex<Option<Arc<str>>>,
    /// Keys, windows open and bytes of the operator's state; keys is -1 for a stateless one.
    state: CachePadded<[AtomicI64; 3]>,
    /// A join's counts (`JoinCounts`, in its field order), the first -1 for other vertices.
    join: CachePadded<[AtomicI64; 4]>,
}

/// Why a record did not reach a sink (besides a filter or an aggregation consuming it by
/// design). Each vertex subtask counts its drops per reason; the report, the summary table and
/// `tidemark_records_dropped_total{reason}` show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// An input line a source skipped as malformed (`on_error: skip`).
    Malformed,
    /// A record a source dropped because its timestamp was out of range
    /// (`invalid_timestamp: drop`).
    InvalidTimestamp,
    /// A record a window dropped as late.
    Late,
    /// A record an operator dropped because an expression failed on it (`on_error: skip`).
    ExpressionError,
    /// A record a sink could not write because its output was closed (a broken pipe).
    OutputClosed,
    /// A record still in a queue, a batch or a task when the job stopped hard (a drain timeout,
    /// a second signal, or a failure).
    InFlight,
    /// A record of an inner join that left the join's state without a match.
    Unmatched,
    /// A Kafka message without a value a source dropped (without `tombstones: keep`), or a
    /// tombstone an operator that has no use for it dropped.
    Tombstone,
}

impl DropReason {
    /// How many reasons there are.
    pub const COUNT: usize = 8;
    /// Every reason, in the order the report and the table list them.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::Malformed,
        DropReason::InvalidTimestamp,
        DropReason::Late,
        DropReason::ExpressionError,
        DropReason::OutputClosed,
        DropReason::InFlight,
        DropReason::Unmatched,
        DropReason::Tombstone,
    ];

    /// The name used as the `reason` label and in the report: `malformed`,
    /// `invalid_timestamp`, `late`, `expression_error`, `output_closed`, `in_flight`,
    /// `unmatched`, `tombstone`.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::InvalidTimestamp => "invalid_timestamp",
            DropReason::Late => "late",
            DropReason::ExpressionError => "expression_error",
            DropReason::OutputClosed => "output_closed",
            DropReason::InFlight => "in_flight",
            DropReason::Unmatched => "unmatched",
            DropReason::Tombstone => "tombstone",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Default)]
struct OwnedCounters {
    records_in: AtomicU64,
    records_out: AtomicU64,
    markers_emitted: AtomicU64,
    lag_records: AtomicI64,
    lag_bytes: AtomicI64,
    malformed: AtomicU64,
    invalid_timestamps: AtomicU64,
    late_dropped: AtomicU64,
    watermark: AtomicI64,
    busy_nanos: AtomicU64,
}

macro_rules! counter_accessors {
    ($($(#[$doc:meta])* $get:ident, $set:ident, $field:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $get(&self) -> $ty {
                self.counters.$field.load(Ordering::Relaxed)
            }
            /// Sets the value; called by the owning task once per batch.
            pub(crate) fn $set(&self, value: $ty) {
                self.counters.$field.store(value, Ordering::Relaxed)
            }
        )*
    };
}

impl SubtaskMetrics {
    pub(crate) fn new(
        granularity: Granularity,
        history_size: NonZeroUsize,
        marker_buckets: Buckets,
    ) -> Self {
        let counters = OwnedCounters {
            lag_records: AtomicI64::new(-1),
            lag_bytes: AtomicI64::new(-1),
            watermark: AtomicI64::new(i64::MIN),
            ..Default::default()
        };
        SubtaskMetrics {
            counters: CachePadded::new(counters),
            input_queue: CachePadded::new(AtomicI64::new(0)),
            latency: Mutex::new(LatencyTracker::with_buckets(
                granularity,
                history_size,
                marker_buckets,
            )),
            e2e: Mutex::new(None),
            dropped: CachePadded::new(Default::default()),
            watermark_holder: Mutex::new(None),
            state: CachePadded::new([AtomicI64::new(-1), AtomicI64::new(0), AtomicI64::new(0)]),
            join: CachePadded::new([
                AtomicI64::new(-1),
                AtomicI64::new(0),
                AtomicI64::new(0),
                AtomicI64::new(0),
            ]),
        }
    }

    counter_accessors! {
        /// Records this subtask received.
        records_in, set_records_in, records_in: u64;
        /// Records this subtask emitted.
        records_out, set_records_out, records_out: u64;
        /// Latency markers this (source) subtask emitted.
        markers_emitted, set_markers_emitted, markers_emitted: u64;
        /// Source lag in records, -1 when unknown.
        lag_records, set_lag_records, lag_records: i64;
        /// Source lag in bytes, -1 when unknown.
        lag_bytes, set_lag_bytes, lag_bytes: i64;
        /// Input lines skipped as malformed.
        malformed_records, set_malformed_records, malformed: u64;
        /// Records with an out-of-range timestamp.
        invalid_timestamp_records, set_invalid_timestamp_records, invalid_timestamps: u64;
        /// Records a window dropped as late.
        late_records_dropped, set_late_records_dropped, late_dropped: u64;
        /// The current event-time watermark (ns), `i64::MIN` before the first.
        watermark, set_watermark, watermark: i64;
        /// The time this vertex subtask's own code took (ns), estimated by sampling one batch
        /// now and then (at least once per millisecond under load) and scaling: a source's
        /// polls, an operator's processing, timers and watermarks, a sink's writes. Within a
        /// task, the vertices' busy times add up to the task's busy time, less the runtime's own
        /// share (routing, channels, metrics).
        busy_nanos, set_busy_nanos, busy_nanos: u64;
    }

    /// [`SubtaskMetrics::busy_nanos`] in seconds.
    pub fn busy_seconds(&self) -> f64 {
        self.busy_nanos() as f64 / 1e9
    }

    /// The input holding this subtask's watermark back now, for a vertex whose watermark is the
    /// minimum over several inputs (where watermarks flow): the upstream vertex id of a local
    /// input, `<topic>/<partition>` of a Kafka partition. An input that has never sent a
    /// watermark holds it back. `None` where not tracked, or when every input is idle or ended.
    pub fn watermark_holder(&self) -> Option<Arc<str>> {
        self.watermark_holder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the holder; called by the owning task when it changes.
    pub(crate) fn set_watermark_holder(&self, holder: Option<Arc<str>>) {
        *self
            .watermark_holder
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = holder;
    }

    /// The size of this (operator) subtask's state as last published (about once a second),
    /// `None` for a stateless one ([`crate::Operator::state_size`]).
    pub fn state_size(&self) -> Option<StateSize> {
        let keys = self.state[0].load(Ordering::Relaxed);
        (keys >= 0).then(|| StateSize {
            keys: keys as u64,
            windows_open: self.state[1].load(Ordering::Relaxed) as u64,
            bytes: self.state[2].load(Ordering::Relaxed) as u64,
        })
    }

    /// Publishes the state size; called by the owning task.
    pub(crate) fn set_state_size(&self, size: StateSize) {
        let clamp = |v: u64| v.min(i64::MAX as u64) as i64;
        self.state[1].store(clamp(size.windows_open), Ordering::Relaxed);
        self.state[2].store(clamp(size.bytes), Ordering::Relaxed);
        self.state[0].store(clamp(size.keys), Ordering::Relaxed);
    }

    /// A join subtask's counts as last published (with its state size), `None` for other
    /// vertices.
    pub fn join_counts(&self) -> Option<JoinCounts> {
        let matched = self.join[0].load(Ordering::Relaxed);
        (matched >= 0).then(|| JoinCounts {
            matched: matched as u64,
            unmatched: self.join[1].load(Ordering::Relaxed) as u64,
            held_left: self.join[2].load(Ordering::Relaxed) as u64,
            held_right: self.join[3].load(Ordering::Relaxed) as u64,
        })
    }

    /// Publishes a join's counts; called by the owning task.
    pub(crate) fn set_join_counts(&self, counts: JoinCounts) {
        let clamp = |v: u64| v.min(i64::MAX as u64) as i64;
        self.join[1].store(clamp(counts.unmatched), Ordering::Relaxed);
        self.join[2].store(clamp(counts.held_left), Ordering::Relaxed);
        self.join[3].store(clamp(counts.held_right), Ordering::Relaxed);
        self.join[0].store(clamp(counts.matched), Ordering::Relaxed);
    }

    /// Records this subtask dropped for `reason` so far.
    pub fn records_dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize].load(Ordering::Relaxed)
    }

    /// Records this subtask dropped, over every reason.
    pub fn records_dropped_total(&self) -> u64 {
        DropReason::ALL
            .iter()
            .map(|&r| self.records_dropped(r))
            .sum()
    }

    /// Sets the count of `reason`; called by the owning task once per batch.
    pub(crate) fn set_records_dropped(&self, reason: DropReason, value: u64) {
        self.dropped[reason as usize].store(value, Ordering::Relaxed)
    }

    /// Adds to the count of `reason` (records left in flight, counted when the job ends).
    pub(crate) fn add_records_dropped(&self, reason: DropReason, n: u64) {
        self.dropped[reason as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Records waiting in this subtask's input channels.
    pub fn input_queue_records(&self) -> i64 {
        self.input_queue.load(Ordering::Relaxed).max(0)
    }

    pub(crate) fn enable_e2e(&self, history_size: NonZeroUsize, buckets: Buckets) {
        *self.e2e_latency() = Some(LatencyStats::with_buckets(history_size, buckets));
    }

    pub(crate) fn input_queue(&self) -> &AtomicI64 {
        &self.input_queue
    }

    /// The marker latency statistics of this subtask, per key. Hold the guard briefly.
    pub fn latency(&self) -> MutexGuard<'_, LatencyTracker> {
        self.latency.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record end-to-end latency statistics, if this subtask records them.
    pub fn e2e_latency(&self) -> MutexGuard<'_, Option<LatencyStats>> {
        self.e2e.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Time counters of one task subtask (a thread).
#[derive(Debug, Default)]
pub struct TaskMetrics {
    busy_ns: AtomicU64,
    backpressured_ns: AtomicU64,
    idle_ns: AtomicU64,
}

impl TaskMetrics {
    /// Seconds the task spent working.
    pub fn busy_seconds(&self) -> f64 {
        self.busy_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
    /// Seconds the task spent blocked on a full output channel.
    pub fn backpressured_seconds(&self) -> f64 {
        self.backpressured_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
    /// Seconds the task spent waiting for input.
    pub fn idle_seconds(&self) -> f64 {
        self.idle_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
    pub(crate) fn store(&self, busy: u64, backpressured: u64, idle: u64) {
        self.busy_ns.store(busy, Ordering::Relaxed);
        self.backpressured_ns
            .store(backpressured, Ordering::Relaxed);
        self.idle_ns.store(idle, Ordering::Relaxed);
    }
}

/// One vertex and its subtasks' metrics.
#[derive(Debug)]
pub struct VertexMetrics {
    /// Vertex id.
    pub id: String,
    /// Source, operator or sink.
    pub kind: VertexKind,
    /// True when the vertex has no outgoing edge (a sink or a terminal operator).
    pub terminal: bool,
    /// One entry per subtask.
    pub subtasks: Vec<Arc<SubtaskMetrics>>,
}

/// One task (a chain) and its subtasks' time counters.
#[derive(Debug)]
pub struct TaskMetricsGroup {
    /// Vertex ids joined with `+`.
    pub name: String,
    /// The chained vertices, head first, as indices into [`MetricsRegistry::vertices`].
    pub vertices: Vec<usize>,
    /// One entry per subtask.
    pub subtasks: Vec<Arc<TaskMetrics>>,
}

/// Everything the job measures. Shared by the tasks (writers) and the exporter and report
/// (readers).
#[derive(Debug)]
pub struct MetricsRegistry {
    job_name: String,
    granularity: Granularity,
    started: SystemTime,
    vertices: Vec<VertexMetrics>,
    tasks: Vec<TaskMetricsGroup>,
    running: AtomicBool,
    /// Bytes of the last rendered scrape, to size the next one.
    pub(crate) text_size_hint: std::sync::atomic::AtomicUsize,
    components: Components,
    instance: std::sync::OnceLock<String>,
}

#[derive(Default)]
struct Components(Mutex<Vec<Arc<dyn SeriesSource>>>);

impl std::fmt::Debug for Components {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[series sources]")
    }
}

impl MetricsRegistry {
    pub(crate) fn new(
        job_name: String,
        granularity: Granularity,
        vertices: Vec<VertexMetrics>,
        tasks: Vec<TaskMetricsGroup>,
    ) -> Self {
        MetricsRegistry {
            job_name,
            granularity,
            started: SystemTime::now(),
            vertices,
            tasks,
            running: AtomicBool::new(true),
            text_size_hint: std::sync::atomic::AtomicUsize::new(0),
            components: Components::default(),
            instance: std::sync::OnceLock::new(),
        }
    }

    /// Registers a component that keeps series of its own (the checkpoint coordinator, Kafka's
    /// lag and commits): every scrape of `/metrics`, `/api/v1/metrics` and everything else that
    /// reads [`MetricsRegistry::component_series`] collects it, after the registry's own
    /// series, in the order the components were registered. Register a component once.
    pub fn register_series(&self, source: Arc<dyn SeriesSource>) {
        self.components
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// The series of every registered component now, family by family in the order they were
    /// first written (see [`SeriesWriter`]). Labels are the component's own: `job_name` and
    /// `tidemark_instance` are not among them.
    pub fn component_series(&self) -> Vec<CollectedFamily> {
        let sources = self
            .components
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut writer = SeriesWriter::default();
        for source in sources {
            source.collect(&mut writer);
        }
        writer.finish()
    }

    /// Names this instance of the job (several processes running one job file): every series
    /// gets the label `tidemark_instance`. Set once; later calls are ignored.
    pub fn set_instance(&self, instance: &str) {
        let _ = self.instance.set(instance.to_owned());
    }

    /// This instance's name, if set.
    pub fn instance(&self) -> Option<&str> {
        self.instance.get().map(String::as_str)
    }

    /// The job's name (label `job_name`).
    pub fn job_name(&self) -> &str {
        &self.job_name
    }

    /// The latency granularity in force.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// When the job started.
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// All vertices in graph order; a marker's `source_id` indexes this list.
    pub fn vertices(&self) -> &[VertexMetrics] {
        &self.vertices
    }

    /// All tasks.
    pub fn tasks(&self) -> &[TaskMetricsGroup] {
        &self.tasks
    }

    /// The index (into [`MetricsRegistry::tasks`]) of the task that runs the vertex at index
    /// `vertex`.
    pub fn task_of(&self, vertex: usize) -> Option<usize> {
        self.tasks.iter().position(|t| t.vertices.contains(&vertex))
    }

    /// The vertex with this id.
    pub fn vertex(&self, id: &str) -> Option<&VertexMetrics> {
        self.vertices.iter().find(|v| v.id == id)
    }

    /// The id of the vertex at `index` (a marker's `source_id`).
    pub fn vertex_id(&self, index: u32) -> &str {
        self.vertices
            .get(index as usize)
            .map(|v| v.id.as_str())
            .unwrap_or("unknown")
    }

    /// True while the job runs.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::Relaxed)
    }

    /// Markers emitted by all sources together.
    pub fn markers_emitted(&self) -> u64 {
        self.vertices
            .iter()
            .filter(|v| v.kind == VertexKind::Source)
            .flat_map(|v| v.subtasks.iter())
            .map(|s| s.markers_emitted())
            .sum()
    }

    /// Markers recorded by all sinks together (summed over every key).
    pub fn markers_received_by_sinks(&self) -> u64 {
        self.vertices
            .iter()
            .filter(|v| v.kind == VertexKind::Sink)
            .flat_map(|v| v.subtasks.iter())
            .map(|s| s.latency().total_count())
            .sum()
    }
}

/// Whether a component's series family is a counter, a gauge or a histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesKind {
    /// Only ever grows.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Counts of observations at or below each bucket bound, their count and sum.
    Histogram,
}

impl SeriesKind {
    /// `counter`, `gauge` or `histogram`, as the Prometheus `# TYPE` line and
    /// `/api/v1/metrics` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            SeriesKind::Counter => "counter",
            SeriesKind::Gauge => "gauge",
            SeriesKind::Histogram => "histogram",
        }
    }
}

/// A family of series a component keeps: its name, help text and kind, as the `# HELP` and
/// `# TYPE` lines of `/metrics` show them. Declared once as a constant beside the component:
///
/// ```
/// use tidemark_runtime::metrics::SeriesFamily;
/// const COMPLETED: SeriesFamily = SeriesFamily::counter(
///     "tidemark_checkpoints_completed_total",
///     "Checkpoints every sink acknowledged.",
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesFamily {
    /// The series name.
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub kind: SeriesKind,
}

impl SeriesFamily {
    /// A counter family.
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        SeriesFamily {
            name,
            help,
            kind: SeriesKind::Counter,
        }
    }

    /// A gauge family.
    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        SeriesFamily {
            name,
            help,
            kind: SeriesKind::Gauge,
        }
    }

    /// A histogram family.
    pub const fn histogram(name: &'static str, help: &'static str) -> Self {
        SeriesFamily {
            name,
            help,
            kind: SeriesKind::Histogram,
        }
    }
}

/// The value of one series of a component.
#[derive(Clone, Debug, PartialEq)]
pub enum SeriesValue {
    /// A counter's or a gauge's value.
    Number(f64),
    /// A histogram.
    Histogram {
        /// Each bucket's upper bound and the observations at or below it (cumulative), in
        /// ascending order of the bound, without `+Inf` (that is `count`).
        buckets: Vec<(f64, u64)>,
        /// Observations.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

/// One series of a component: its own labels (name, value) in the order `/metrics` writes
/// them after `job_name` (and `tidemark_instance`), and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The component's labels.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: SeriesValue,
}

/// A family and the series a scrape collected of it.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectedFamily {
    /// Name, help and kind.
    pub family: SeriesFamily,
    /// Its series, in the order they were written.
    pub series: Vec<Series>,
}

/// What registered components write their series into at a scrape
/// ([`MetricsRegistry::register_series`]). A family appears once, where its first series was
/// written; its series follow in the order written. A family with no series is left out.
#[derive(Debug, Default)]
pub struct SeriesWriter {
    families: Vec<CollectedFamily>,
}

impl SeriesWriter {
    /// Adds one series of `family`.
    pub fn push(&mut self, family: &SeriesFamily, labels: &[(&str, &str)], value: SeriesValue) {
        debug_assert_eq!(
            matches!(value, SeriesValue::Histogram { .. }),
            family.kind == SeriesKind::Histogram,
            "{}: a value of the wrong kind",
            family.name
        );
        let series = Series {
            labels: labels
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            value,
        };
        match self
            .families
            .iter_mut()
            .find(|f| f.family.name == family.name)
        {
            Some(collected) => collected.series.push(series),
            None => self.families.push(CollectedFamily {
                family: *family,
                series: vec![series],
            }),
        }
    }

    /// Adds one series of a counter or gauge `family` with `value`.
    pub fn number(&mut self, family: &SeriesFamily, labels: &[(&str, &str)], value: f64) {
        self.push(family, labels, SeriesValue::Number(value));
    }

    /// Adds one series of a histogram `family`: `bounds` are the buckets' upper bounds and
    /// `per_bucket` the observations at or below each (cumulative), `count` and `sum` those of
    /// every observation.
    pub fn histogram(
        &mut self,
        family: &SeriesFamily,
        labels: &[(&str, &str)],
        bounds: &[f64],
        per_bucket: &[u64],
        count: u64,
        sum: f64,
    ) {
        let buckets = bounds.iter().copied().zip(per_bucket.iter().copied());
        self.push(
            family,
            labels,
            SeriesValue::Histogram {
                buckets: buckets.collect(),
                count,
                sum,
            },
        );
    }

    /// The families written, in order.
    pub fn finish(self) -> Vec<CollectedFamily> {
        self.families
    }
}

/// A component that keeps series of its own, read at every scrape: register it with
/// [`MetricsRegistry::register_series`].
///
/// ```
/// use tidemark_runtime::metrics::{SeriesFamily, SeriesSource, SeriesWriter};
///
/// const COMMITS: SeriesFamily = SeriesFamily::counter("my_commits_total", "Commits made.");
/// struct Mine;
/// impl SeriesSource for Mine {
///     fn collect(&self, out: &mut SeriesWriter) {
///         out.number(&COMMITS, &[("source_id", "in")], 2.0);
///     }
/// }
/// let mut writer = SeriesWriter::default();
/// Mine.collect(&mut writer);
/// assert_eq!(writer.finish()[0].series[0].labels[0].1, "in");
/// ```
pub trait SeriesSource: Send + Sync {
    /// Writes this component's series as they are now.
    fn collect(&self, out: &mut SeriesWriter);
}
