//! The live view: the page at `/` and what `/api/v1/job` and `/api/v1/metrics` answer
//! (`docs/live-view.md`).
//!
//! [`LiveJob`] holds what the endpoint needs about a run: its metrics registry, a description
//! made once at start (settings in force with secrets redacted, vertices, edges), the job's
//! state, and a short history of counters from which ratios and rates over the last few seconds
//! are computed at each request.

mod history;
mod snapshot;

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tidemark_runtime::{ExecutionPlan, JobOutcome, MetricsRegistry, Partitioning};

use crate::report::rfc3339;
use crate::settings::Settings;
use history::History;

/// The live view page: one HTML file with its styles and scripts inline (plain JavaScript and
/// SVG, no library), so the page makes no request but to the endpoint's own JSON API.
pub const PAGE_HTML: &str = include_str!("page.html");

/// What the job file (or a library user) says about one vertex.
#[derive(Clone, Debug)]
pub struct ComponentInfo {
    /// The vertex id.
    pub id: String,
    /// The component type (`generator`, `map`, `stdout`, ...).
    pub type_name: String,
    /// The component's configuration as written (secrets are redacted before serving).
    pub config: Value,
}

/// How the channels are sized, to turn queued records into a fill ratio.
#[derive(Clone, Copy, Debug)]
pub struct QueueShape {
    /// Batches a channel holds.
    pub channel_capacity: usize,
    /// Records per batch.
    pub batch_size: usize,
}

/// The state of the job as `/api/v1/job` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Still running.
    Running,
    /// Every source ended and everything drained.
    Finished,
    /// Stopped by `--duration` or a signal.
    Stopped,
    /// A task failed.
    Failed,
}

/// One vertex in `/api/v1/job`.
#[derive(Clone, Debug, Serialize)]
struct VertexInfo {
    id: String,
    kind: &'static str,
    #[serde(rename = "type")]
    type_name: String,
    parallelism: usize,
    task: String,
    terminal: bool,
    /// Records each subtask's input channels hold when full; 0 for sources.
    input_queue_capacity_records: u64,
    config: Value,
}

/// One edge in `/api/v1/job`.
#[derive(Clone, Debug, Serialize)]
struct EdgeInfo {
    from: String,
    to: String,
    partitioning: &'static str,
    /// `chained` (a function call inside one task) or `channel` (between tasks).
    exchange: &'static str,
    /// Which input of a join the edge is (`left`, `right`); left out for any other edge.
    #[serde(skip_serializing_if = "Option::is_none")]
    side: Option<&'static str>,
}

/// The sides of a join's inputs, in the order the runtime numbers them: the job file's `left`
/// is the join's first input, `right` its second.
const JOIN_SIDES: [&str; 2] = ["left", "right"];

/// The component type of a join (`type: join` in the job file).
const JOIN_TYPE: &str = "join";

#[derive(Debug, Serialize)]
struct JobJson<'a> {
    name: &'a str,
    /// This process's instance id (`tidemark_instance`), when set.
    instance: Option<&'a str>,
    state: JobState,
    error: Option<&'a str>,
    started: String,
    started_unix_ms: u64,
    granularity: &'static str,
    settings: &'a Value,
    vertices: &'a [VertexInfo],
    edges: &'a [EdgeInfo],
    /// The last complete checkpoint written to the checkpoint directory, or `null`.
    checkpoint: Option<crate::report::CheckpointReport>,
    /// The checkpoint this run was restored from (`--restore`), or `null`.
    restored_from: Option<&'a RestoredFrom>,
    /// Whether a keyed vertex's state moves with its Kafka exchange's partitions.
    keeps_state: bool,
    /// The restores of that state so far, or `null` when there were none.
    state_restores: Option<crate::report::StateRestoresReport>,
}

/// What reads the restores of keyed state so far ([`LiveJob::set_state_restores`]).
pub type StateRestores = Arc<dyn Fn() -> Option<crate::report::StateRestoresReport> + Send + Sync>;

/// [`StateRestores`], once known.
#[derive(Default)]
struct RestoresSource(Option<StateRestores>);

impl std::fmt::Debug for RestoresSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// The checkpoint a run was restored from, in `/api/v1/job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoredFrom {
    /// Its id (`chk-<id>`).
    pub id: u64,
    /// Its folder.
    pub path: String,
}

/// Everything the endpoint serves about one run.
#[derive(Debug)]
pub struct LiveJob {
    registry: Arc<MetricsRegistry>,
    settings: Value,
    vertices: Vec<VertexInfo>,
    edges: Vec<EdgeInfo>,
    /// Index into `registry.tasks()` of each vertex's task.
    task_of_vertex: Vec<Option<usize>>,
    state: Mutex<(JobState, Option<String>)>,
    history: Mutex<History>,
    /// The job's checkpoint coordinator, once known.
    checkpoints: Mutex<Option<Arc<tidemark_runtime::checkpoint::Checkpoints>>>,
    /// The checkpoint the run was restored from, if it was.
    restored_from: Mutex<Option<RestoredFrom>>,
    /// The restores of keyed state that moves with Kafka partitions.
    state_restores: Mutex<RestoresSource>,
    /// The run's readiness and stall verdict, once set.
    health: std::sync::OnceLock<Arc<crate::health::Health>>,
}

impl LiveJob {
    /// Describes the job of `plan`, whose numbers are in `registry`. `settings` are the
    /// settings in force (secrets are redacted here); `components` give each vertex's type and
    /// configuration (a vertex missing from it shows its kind as type).
    pub fn new(
        registry: Arc<MetricsRegistry>,
        plan: &ExecutionPlan,
        settings: Value,
        components: &[ComponentInfo],
        queue: QueueShape,
    ) -> LiveJob {
        let task_name_of = |index: usize| {
            plan.tasks
                .iter()
                .find(|t| t.vertices.iter().any(|v| v.index() == index))
                .map(|t| t.name.clone())
                .unwrap_or_default()
        };
        let parallelism = |index: usize| {
            registry
                .vertices()
                .get(index)
                .map_or(0, |v| v.subtasks.len())
        };
        let is_join = |to: tidemark_runtime::VertexId| {
            let id = plan.vertex_id(to);
            components
                .iter()
                .any(|c| c.id == id && c.type_name == JOIN_TYPE)
        };
        let mut edges: Vec<(usize, usize, EdgeInfo)> = Vec::new();
        for (i, e) in plan.edges.iter().enumerate() {
            let mut info = edge(plan, e.from, e.to, e.partitioning, "channel");
            // A vertex with several inputs has none chained: the plan keeps the graph's edge
            // order, in which the runtime numbers a vertex's inputs. A join with one input
            // edge (both sides through one Kafka exchange) has no edge of one side.
            let inputs = || plan.edges.iter().filter(|o| o.to == e.to);
            if is_join(e.to) && inputs().count() == JOIN_SIDES.len() {
                let input = plan.edges[..i].iter().filter(|o| o.to == e.to).count();
                info.side = JOIN_SIDES.get(input).copied();
            }
            edges.push((e.from.index(), e.to.index(), info));
        }
        for &(from, to, partitioning) in &plan.chained {
            edges.push((
                from.index(),
                to.index(),
                edge(plan, from, to, partitioning, "chained"),
            ));
        }
        edges.sort_by_key(|(from, to, _)| (*from, *to));

        let channel_records = (queue.channel_capacity.max(1) * queue.batch_size.max(1)) as u64;
        let vertices = registry
            .vertices()
            .iter()
            .enumerate()
            .map(|(index, v)| {
                let component = components.iter().find(|c| c.id == v.id);
                // Channels into one subtask: one per upstream subtask that can send to it.
                let channels: u64 = plan
                    .edges
                    .iter()
                    .filter(|e| e.to.index() == index)
                    .map(|e| match e.partitioning {
                        Partitioning::Forward => 1,
                        _ => parallelism(e.from.index()) as u64,
                    })
                    .sum();
                VertexInfo {
                    id: v.id.clone(),
                    kind: v.kind.as_str(),
                    type_name: component
                        .map_or_else(|| v.kind.as_str().to_owned(), |c| c.type_name.clone()),
                    parallelism: v.subtasks.len(),
                    task: task_name_of(index),
                    terminal: v.terminal,
                    input_queue_capacity_records: channels * channel_records,
                    config: component.map_or(Value::Object(Default::default()), |c| {
                        redact_secrets(c.config.clone())
                    }),
                }
            })
            .collect::<Vec<_>>();
        let task_of_vertex = vertices
            .iter()
            .map(|v| registry.tasks().iter().position(|t| t.name == v.task))
            .collect();
        LiveJob {
            settings: redact_secrets(settings),
            vertices,
            edges: edges.into_iter().map(|(_, _, e)| e).collect(),
            task_of_vertex,
            state: Mutex::new((JobState::Running, None)),
            history: Mutex::new(History::default()),
            checkpoints: Mutex::new(None),
            restored_from: Mutex::new(None),
            state_restores: Mutex::new(RestoresSource::default()),
            health: std::sync::OnceLock::new(),
            registry,
        }
    }

    /// The job's metrics registry.
    pub fn registry(&self) -> &MetricsRegistry {
        &self.registry
    }

    /// The job's checkpoint coordinator: `/api/v1/job` shows its last complete checkpoint.
    pub fn set_checkpoints(&self, c: Arc<tidemark_runtime::checkpoint::Checkpoints>) {
        *self
            .checkpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(c);
    }

    /// The checkpoint the run was restored from: `/api/v1/job` names it (`restored_from`).
    pub fn set_restored_from(&self, restored: RestoredFrom) {
        *self
            .restored_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(restored);
    }

    /// The job's keyed state moves with its Kafka exchanges' partitions: `/api/v1/job` shows
    /// the restores `restores` reads (`keeps_state`, `state_restores`).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub fn set_state_restores(&self, restores: StateRestores) {
        self.state_restores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0 = Some(restores);
    }

    /// The run's health: `/api/v1/metrics` shows it (`health`), and the page with it.
    pub fn set_health(&self, health: Arc<crate::health::Health>) {
        let _ = self.health.set(health);
    }

    /// The run's health, once set.
    pub fn health(&self) -> Option<&crate::health::Health> {
        self.health.get().map(Arc::as_ref)
    }

    /// Records how the job ended; `/api/v1/job` and `/api/v1/metrics` report it from now on.
    pub fn set_outcome(&self, outcome: &JobOutcome) {
        let state = match outcome {
            JobOutcome::Finished => (JobState::Finished, None),
            JobOutcome::Stopped => (JobState::Stopped, None),
            JobOutcome::Failed(failure) => (JobState::Failed, Some(failure.to_string())),
            JobOutcome::Aborted => (
                JobState::Failed,
                Some("stopped hard: the records in flight were dropped".to_string()),
            ),
        };
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// The job's state and, when it failed, why.
    pub fn state(&self) -> (JobState, Option<String>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The body of `GET /api/v1/job`.
    pub fn job_json(&self) -> String {
        let (state, error) = self.state();
        let restored_from = self
            .restored_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let restores = self
            .state_restores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone();
        let started = self.registry.started();
        let json = JobJson {
            name: self.registry.job_name(),
            instance: self.registry.instance(),
            state,
            error: error.as_deref(),
            started: rfc3339(started),
            started_unix_ms: unix_ms(started),
            granularity: self.registry.granularity().as_str(),
            settings: &self.settings,
            vertices: &self.vertices,
            edges: &self.edges,
            checkpoint: self
                .checkpoints
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_deref()
                .and_then(crate::report::CheckpointReport::of),
            restored_from: restored_from.as_ref(),
            keeps_state: restores.is_some(),
            state_restores: restores.and_then(|r| r()),
        };
        to_json(&json)
    }
}

fn edge(
    plan: &ExecutionPlan,
    from: tidemark_runtime::VertexId,
    to: tidemark_runtime::VertexId,
    partitioning: Partitioning,
    exchange: &'static str,
) -> EdgeInfo {
    EdgeInfo {
        from: plan.vertex_id(from).to_owned(),
        to: plan.vertex_id(to).to_owned(),
        partitioning: partitioning.as_str(),
        exchange,
        side: None,
    }
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Serializing these types cannot fail: every map key is a string.
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|e| {
        format!(
            "{{\"error\": {}}}",
            Value::String(format!("cannot encode: {e}"))
        )
    });
    text.push('\n');
    text
}

/// Milliseconds since the Unix epoch.
fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `value` with every setting whose key holds a secret word replaced by `"***"`, at any depth:
/// the job file's one rule, [`crate::redact::redact_json`].
pub fn redact_secrets(mut value: Value) -> Value {
    crate::redact::redact_json(&mut value);
    value
}

/// The settings in force as `/api/v1/job` shows them: the report's fields (one per row of the
/// settings table, [`Settings::json`]) plus `metrics_addr`.
pub fn settings_json(settings: &Settings) -> Value {
    let mut json = settings.json();
    json.insert(
        "metrics_addr".to_owned(),
        Value::String(settings.metrics_addr.clone()),
    );
    Value::Object(json)
}

#[cfg(test)]
mod tests;
