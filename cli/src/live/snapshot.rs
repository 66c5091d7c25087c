//! `GET /api/v1/metrics`: a snapshot of the job's numbers, with busy/backpressured/idle ratios
//! and record rates over the last few seconds.
//!
//! The counters only grow, so a ratio over a span is the difference of two readings. Each
//! request reads the counters and keeps the reading in a short
//! [`History`](super::history::History) (of the [`LiveJob`]); the ratios and rates
//! compare the reading with the newest one at least
//! [`RATIO_SPAN`](super::history::RATIO_SPAN) old (or the oldest there is).
//! The first request gets the ratios and rates over the whole run instead; once the job has
//! ended, rates are 0 and ratios cover the whole run. Nothing runs between requests.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tidemark_markers::{legacy_quantile, Granularity, LatencyKey};
use tidemark_runtime::VertexKind;

use super::history::{Reading, SubtaskCounters};
use super::{to_json, unix_ms, JobState, LiveJob};
use crate::report::{number, optional_number, rfc3339, series_report, SeriesReport};

/// Window statistics, in seconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Quantiles {
    /// Samples recorded since the start (not only those in the window).
    count: u64,
    #[serde(serialize_with = "number")]
    p50_seconds: f64,
    #[serde(serialize_with = "number")]
    p99_seconds: f64,
    #[serde(serialize_with = "number")]
    max_seconds: f64,
}

impl Quantiles {
    /// Statistics of `samples` (nanoseconds; sorted here); `None` when there are none.
    fn of(mut samples: Vec<f64>, count: u64) -> Option<Quantiles> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable_by(f64::total_cmp);
        let s = |ns: f64| ns / 1e9;
        Some(Quantiles {
            count,
            p50_seconds: s(legacy_quantile(&samples, 0.5)),
            p99_seconds: s(legacy_quantile(&samples, 0.99)),
            max_seconds: s(*samples.last().unwrap_or(&f64::NAN)),
        })
    }
}

#[derive(Debug, Serialize)]
pub struct Snapshot<'a> {
    job: &'a str,
    state: JobState,
    time: String,
    time_unix_ms: u64,
    #[serde(serialize_with = "number")]
    uptime_seconds: f64,
    /// The span the ratios and rates cover; 0 when they cover the whole run.
    #[serde(serialize_with = "number")]
    span_seconds: f64,
    granularity: &'static str,
    /// The busiest vertex ([`busiest`]) when its own busy ratio is at least
    /// [`BOTTLENECK_BUSY`]: the vertex that limits the job's speed.
    bottleneck: Option<Bottleneck>,
    /// The vertex whose busiest subtask has the highest own busy ratio over the span, if any
    /// vertex was busy at all, bottleneck or not.
    busiest: Option<Bottleneck>,
    vertices: Vec<VertexSnapshot>,
    latency: Vec<LatencyEntry>,
    /// The series of the components registered with the job's metrics registry
    /// (checkpoints, Kafka), as `/metrics` has them.
    series: Vec<SeriesReport>,
    /// Readiness as `/readyz` says it, and whether the job is stalled
    /// (`{"ready", "reason", "detail", "stalled"}`); `null` without a health watch.
    health: Option<serde_json::Value>,
}

/// A vertex is called the bottleneck when its own code keeps its busiest subtask's thread busy
/// at least this share of the span (Flink colours a task busy from 50 % up, its backpressure
/// "high" from 50 %): below it the vertex has time to spare, and whatever limits the job is not
/// its code.
pub(super) const BOTTLENECK_BUSY: f64 = 0.5;

/// The busiest vertex over the span.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Bottleneck {
    /// The vertex id.
    pub(super) vertex: String,
    /// Its busiest subtask's own busy ratio over the span.
    #[serde(serialize_with = "number")]
    pub(super) busy: f64,
}

/// The size of an operator subtask's state.
#[derive(Debug, Serialize)]
struct StateSnapshot {
    keys: u64,
    windows_open: u64,
    bytes: u64,
}

/// A join's results so far and the records it holds now ([`tidemark_runtime::JoinCounts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
struct JoinSnapshot {
    /// Results of a match.
    matched: u64,
    /// Results of a record that matched nothing (an outer join's, the other side null).
    unmatched: u64,
    /// Left records held now.
    held_left: u64,
    /// Right records held now (a table join's versions).
    held_right: u64,
}

impl JoinSnapshot {
    fn of(counts: tidemark_runtime::JoinCounts) -> JoinSnapshot {
        JoinSnapshot {
            matched: counts.matched,
            unmatched: counts.unmatched,
            held_left: counts.held_left,
            held_right: counts.held_right,
        }
    }

    /// The sum of the subtasks' counts; `None` when none has published any.
    fn sum<'a>(subtasks: impl IntoIterator<Item = &'a Option<JoinSnapshot>>) -> Option<Self> {
        subtasks.into_iter().flatten().fold(None, |sum, s| {
            let sum: JoinSnapshot = sum.unwrap_or_default();
            Some(JoinSnapshot {
                matched: sum.matched + s.matched,
                unmatched: sum.unmatched + s.unmatched,
                held_left: sum.held_left + s.held_left,
                held_right: sum.held_right + s.held_right,
            })
        })
    }
}

#[derive(Debug, Serialize)]
struct VertexSnapshot {
    id: String,
    kind: &'static str,
    terminal: bool,
    /// True when its task runs other vertices too (no queue between them).
    chained: bool,
    /// The largest own busy ratio of its subtasks: the time the vertex's own code took over the
    /// task's time (inside a chain, its share of the thread).
    #[serde(serialize_with = "number")]
    own_busy_max: f64,
    /// True when every marker counted here came from a source chained with it: no queue
    /// between them, so its marker latency says nothing about queueing.
    marker_latency_chained: bool,
    /// The input holding back the watermark of its subtask with the lowest watermark (or of the
    /// first subtask that names one); `null` where none is named.
    watermark_holder: Option<String>,
    records_in: u64,
    records_out: u64,
    #[serde(serialize_with = "number")]
    records_in_per_second: f64,
    #[serde(serialize_with = "number")]
    records_out_per_second: f64,
    /// The largest busy ratio of its subtasks.
    #[serde(serialize_with = "number")]
    busy_max: f64,
    /// The largest backpressured ratio of its subtasks.
    #[serde(serialize_with = "number")]
    backpressured_max: f64,
    input_queue_records: i64,
    /// The largest input queue fill (0 to 1) of its subtasks.
    #[serde(serialize_with = "number")]
    input_queue_fill_max: f64,
    /// Sum over subtasks of the known lags; `null` when none is known.
    lag_records: Option<i64>,
    lag_bytes: Option<i64>,
    /// The largest watermark lag of its subtasks; `null` where no watermark flows.
    #[serde(serialize_with = "optional_number")]
    watermark_lag_seconds: Option<f64>,
    /// A join's counts summed over its subtasks; `null` for any other vertex (and for a join
    /// before its subtasks first publish them, about a second after the start).
    join: Option<JoinSnapshot>,
    /// Marker latency at this vertex, every key's window pooled.
    marker_latency: Option<Quantiles>,
    /// Record end-to-end latency at this vertex, every subtask's window pooled.
    e2e_latency: Option<Quantiles>,
    subtasks: Vec<SubtaskSnapshot>,
}

#[derive(Debug, Serialize)]
struct SubtaskSnapshot {
    index: usize,
    records_in: u64,
    records_out: u64,
    #[serde(serialize_with = "number")]
    records_in_per_second: f64,
    #[serde(serialize_with = "number")]
    records_out_per_second: f64,
    #[serde(serialize_with = "number")]
    busy: f64,
    #[serde(serialize_with = "number")]
    backpressured: f64,
    #[serde(serialize_with = "number")]
    idle: f64,
    /// The vertex's own busy ratio (see [`VertexSnapshot::own_busy_max`]).
    #[serde(serialize_with = "number")]
    own_busy: f64,
    input_queue_records: i64,
    #[serde(serialize_with = "number")]
    input_queue_fill: f64,
    lag_records: Option<i64>,
    lag_bytes: Option<i64>,
    watermark_unix_ms: Option<i64>,
    /// The input holding this subtask's watermark back (`tidemark_watermark_holder_info`).
    watermark_holder: Option<String>,
    /// The operator's state size, for a stateful operator.
    state: Option<StateSnapshot>,
    /// A join's counts (`null` for any other vertex).
    join: Option<JoinSnapshot>,
    #[serde(serialize_with = "optional_number")]
    watermark_lag_seconds: Option<f64>,
    marker_latency: Option<Quantiles>,
    e2e_latency: Option<Quantiles>,
}

/// One latency key of one operator subtask, labelled as in `/metrics`.
#[derive(Debug, Serialize)]
struct LatencyEntry {
    labels: BTreeMap<&'static str, String>,
    #[serde(flatten)]
    quantiles: Quantiles,
}

fn read_counters(job: &LiveJob, at: Instant) -> Reading {
    let registry = job.registry();
    let vertices = registry
        .vertices()
        .iter()
        .enumerate()
        .map(|(v, vertex)| {
            let task = job.task_of_vertex[v].and_then(|t| registry.tasks().get(t));
            vertex
                .subtasks
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let times = task.and_then(|t| t.subtasks.get(i));
                    SubtaskCounters {
                        records_in: s.records_in(),
                        records_out: s.records_out(),
                        own_busy: s.busy_seconds(),
                        busy: times.map_or(0.0, |t| t.busy_seconds()),
                        backpressured: times.map_or(0.0, |t| t.backpressured_seconds()),
                        idle: times.map_or(0.0, |t| t.idle_seconds()),
                    }
                })
                .collect()
        })
        .collect();
    Reading { at, vertices }
}

/// The vertex's own busy time over the task's time between two readings of one subtask (its
/// share of the thread), from 0 to 1.
fn own_ratio(now: &SubtaskCounters, base: Option<&SubtaskCounters>) -> f64 {
    let total = |c: &SubtaskCounters| c.busy + c.backpressured + c.idle;
    let (own, time) = match base {
        Some(b) if total(now) > total(b) => (now.own_busy - b.own_busy, total(now) - total(b)),
        _ => (now.own_busy, total(now)),
    };
    if time > 0.0 {
        (own / time).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Ratios of busy, backpressured and idle time between two readings of one subtask.
fn ratios(now: &SubtaskCounters, base: Option<&SubtaskCounters>) -> (f64, f64, f64) {
    let of = |busy: f64, bp: f64, idle: f64| {
        let total = busy + bp + idle;
        (total > 0.0).then(|| (busy / total, bp / total, idle / total))
    };
    base.and_then(|b| {
        of(
            now.busy - b.busy,
            now.backpressured - b.backpressured,
            now.idle - b.idle,
        )
    })
    .or_else(|| of(now.busy, now.backpressured, now.idle))
    .unwrap_or((0.0, 0.0, 0.0))
}

fn known(value: i64) -> Option<i64> {
    (value >= 0).then_some(value)
}

/// The labels of a latency key at an operator subtask, as `/metrics` has them.
fn key_labels(
    job: &LiveJob,
    granularity: Granularity,
    key: &LatencyKey,
    operator: &str,
    subtask: usize,
) -> BTreeMap<&'static str, String> {
    let mut labels = BTreeMap::new();
    if granularity != Granularity::Single {
        if let Some(source) = key.source_id {
            labels.insert("source_id", job.registry().vertex_id(source).to_owned());
        }
    }
    if granularity == Granularity::Subtask {
        if let Some(s) = key.source_subtask {
            labels.insert("source_subtask_index", s.to_string());
        }
    }
    labels.insert("operator_id", operator.to_owned());
    labels.insert("operator_subtask_index", subtask.to_string());
    labels
}

/// Reads the job's numbers now.
pub fn take(job: &LiveJob) -> Snapshot<'_> {
    let registry = job.registry();
    let now_instant = Instant::now();
    let now = SystemTime::now();
    let now_nanos = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let reading = read_counters(job, now_instant);
    let base = job
        .history
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(reading.clone());
    let (state, _) = job.state();
    // Once the job has ended nothing moves: rates are 0 and ratios cover the whole run.
    let ended = state != JobState::Running || !registry.is_running();
    let base = if ended { None } else { base };
    let uptime = now
        .duration_since(registry.started())
        .unwrap_or_default()
        .as_secs_f64();
    let span = base
        .as_ref()
        .map_or(0.0, |b| now_instant.duration_since(b.at).as_secs_f64());
    let granularity = registry.granularity();

    let mut latency = Vec::new();
    let mut vertices = Vec::with_capacity(registry.vertices().len());
    for (v, vertex) in registry.vertices().iter().enumerate() {
        let info = &job.vertices[v];
        let capacity = info.input_queue_capacity_records;
        let mut subtasks = Vec::with_capacity(vertex.subtasks.len());
        let mut vertex_markers = Vec::new();
        let mut vertex_marker_count = 0;
        let mut vertex_e2e = Vec::new();
        let mut vertex_e2e_count = 0;
        for (i, s) in vertex.subtasks.iter().enumerate() {
            let counters = &reading.vertices[v][i];
            let base_counters = base.as_ref().and_then(|b| b.vertices[v].get(i));
            let (busy, backpressured, idle) = ratios(counters, base_counters);
            let own_busy = own_ratio(counters, base_counters);
            let rate = |now: u64, then: Option<u64>| match then {
                _ if ended => 0.0,
                Some(then) if span > 0.0 => now.saturating_sub(then) as f64 / span,
                _ if uptime > 0.0 => now as f64 / uptime,
                _ => 0.0,
            };
            let queued = s.input_queue_records();
            let watermark = s.watermark();
            let watermark = (watermark != i64::MIN).then_some(watermark);

            // Copy the windows under the locks; sort after releasing them.
            let keys: Vec<(LatencyKey, Vec<f64>, u64)> = s
                .latency()
                .iter()
                .map(|(key, stats)| {
                    let samples = stats.window().samples().map(|ns| ns as f64).collect();
                    (*key, samples, stats.count())
                })
                .collect();
            let e2e: Option<(Vec<f64>, u64)> = s.e2e_latency().as_ref().map(|stats| {
                (
                    stats.window().samples().map(|ns| ns as f64).collect(),
                    stats.count(),
                )
            });

            let mut subtask_markers = Vec::new();
            let mut subtask_marker_count = 0;
            for (key, samples, count) in keys {
                subtask_markers.extend_from_slice(&samples);
                subtask_marker_count += count;
                if let Some(quantiles) = Quantiles::of(samples, count) {
                    latency.push(LatencyEntry {
                        labels: key_labels(job, granularity, &key, &vertex.id, i),
                        quantiles,
                    });
                }
            }
            vertex_markers.extend_from_slice(&subtask_markers);
            vertex_marker_count += subtask_marker_count;
            let e2e = e2e.and_then(|(samples, count)| {
                vertex_e2e.extend_from_slice(&samples);
                vertex_e2e_count += count;
                Quantiles::of(samples, count)
            });

            subtasks.push(SubtaskSnapshot {
                index: i,
                records_in: counters.records_in,
                records_out: counters.records_out,
                records_in_per_second: rate(
                    counters.records_in,
                    base_counters.map(|b| b.records_in),
                ),
                records_out_per_second: rate(
                    counters.records_out,
                    base_counters.map(|b| b.records_out),
                ),
                busy,
                backpressured,
                idle,
                own_busy,
                input_queue_records: queued,
                input_queue_fill: if capacity > 0 {
                    (queued as f64 / capacity as f64).min(1.0)
                } else {
                    0.0
                },
                lag_records: known(s.lag_records()),
                lag_bytes: known(s.lag_bytes()),
                watermark_unix_ms: watermark.map(|w| w.div_euclid(1_000_000)),
                watermark_holder: s.watermark_holder().map(|h| h.to_string()),
                state: s.state_size().map(|z| StateSnapshot {
                    keys: z.keys,
                    windows_open: z.windows_open,
                    bytes: z.bytes,
                }),
                join: s.join_counts().map(JoinSnapshot::of),
                watermark_lag_seconds: watermark.map(|w| now_nanos.saturating_sub(w) as f64 / 1e9),
                marker_latency: Quantiles::of(subtask_markers, subtask_marker_count),
                e2e_latency: e2e,
            });
        }
        let sum_known = |f: fn(&SubtaskSnapshot) -> Option<i64>| {
            let known: Vec<i64> = subtasks.iter().filter_map(f).collect();
            (!known.is_empty()).then(|| known.iter().sum())
        };
        let max = |f: fn(&SubtaskSnapshot) -> f64| subtasks.iter().map(f).fold(0.0, f64::max);
        let chained = job.task_of_vertex[v]
            .and_then(|t| registry.tasks().get(t))
            .is_some_and(|t| t.vertices.len() > 1);
        let marker_latency_chained = {
            let tracker_keys: Vec<LatencyKey> = vertex
                .subtasks
                .iter()
                .flat_map(|s| s.latency().iter().map(|(k, _)| *k).collect::<Vec<_>>())
                .collect();
            !tracker_keys.is_empty()
                && tracker_keys
                    .iter()
                    .all(|k| crate::report::markers_chained(registry, k, v))
        };
        let watermark_holder = subtasks
            .iter()
            .filter(|s| s.watermark_holder.is_some())
            .min_by_key(|s| s.watermark_unix_ms.unwrap_or(i64::MIN))
            .and_then(|s| s.watermark_holder.clone());
        vertices.push(VertexSnapshot {
            id: vertex.id.clone(),
            kind: vertex.kind.as_str(),
            terminal: vertex.terminal,
            chained,
            own_busy_max: max(|s| s.own_busy),
            marker_latency_chained,
            watermark_holder,
            records_in: subtasks.iter().map(|s| s.records_in).sum(),
            records_out: subtasks.iter().map(|s| s.records_out).sum(),
            records_in_per_second: subtasks.iter().map(|s| s.records_in_per_second).sum(),
            records_out_per_second: subtasks.iter().map(|s| s.records_out_per_second).sum(),
            busy_max: max(|s| s.busy),
            backpressured_max: max(|s| s.backpressured),
            input_queue_records: subtasks.iter().map(|s| s.input_queue_records).sum(),
            input_queue_fill_max: if vertex.kind == VertexKind::Source {
                0.0
            } else {
                max(|s| s.input_queue_fill)
            },
            lag_records: sum_known(|s| s.lag_records),
            lag_bytes: sum_known(|s| s.lag_bytes),
            watermark_lag_seconds: subtasks
                .iter()
                .filter_map(|s| s.watermark_lag_seconds)
                .reduce(f64::max),
            join: JoinSnapshot::sum(subtasks.iter().map(|s| &s.join)),
            marker_latency: Quantiles::of(vertex_markers, vertex_marker_count),
            e2e_latency: Quantiles::of(vertex_e2e, vertex_e2e_count),
            subtasks,
        });
    }
    let busiest = busiest(vertices.iter().map(|v| (v.id.as_str(), v.own_busy_max)));
    let bottleneck = bottleneck(busiest.as_ref());
    Snapshot {
        job: registry.job_name(),
        state,
        time: rfc3339(now),
        time_unix_ms: unix_ms(now),
        uptime_seconds: uptime,
        span_seconds: span,
        granularity: granularity.as_str(),
        bottleneck,
        busiest,
        vertices,
        latency,
        series: series_report(registry.component_series()),
        health: job.health().map(|h| h.json()),
    }
}

/// The vertex with the highest own busy ratio of `busy` (vertex id, ratio), if any was busy.
pub(super) fn busiest<'a>(busy: impl IntoIterator<Item = (&'a str, f64)>) -> Option<Bottleneck> {
    busy.into_iter()
        .filter(|(_, ratio)| *ratio > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(id, ratio)| Bottleneck {
            vertex: id.to_owned(),
            busy: ratio,
        })
}

/// The busiest vertex if it is the bottleneck: busy at least [`BOTTLENECK_BUSY`].
pub(super) fn bottleneck(busiest: Option<&Bottleneck>) -> Option<Bottleneck> {
    busiest.filter(|b| b.busy >= BOTTLENECK_BUSY).cloned()
}

impl LiveJob {
    /// The body of `GET /api/v1/metrics`.
    pub fn metrics_json(&self) -> String {
        to_json(&take(self))
    }
}
