//! Liveness and readiness of a run (`/livez`, `/readyz`, `tidemark_job_ready`,
//! `tidemark_job_stalled`, the live view's state; `docs/operations.md`).
//!
//! [`Health`] holds the run's phase (set by `run` as it goes: starting, restoring, running,
//! stopping, ended), what the Kafka sources say about their group assignments, and the verdict
//! of the stall [`Watchdog`]: a thread beside the tasks that reads their published counters, so
//! a task blocked in a write (which publishes nothing) is seen as stalled rather than trusted.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use tidemark_markers::format_duration;
use tidemark_runtime::metrics::{SeriesFamily, SeriesSource, SeriesWriter};
use tidemark_runtime::MetricsRegistry;

/// `tidemark_job_ready`.
pub const READY: SeriesFamily = SeriesFamily::gauge(
    "tidemark_job_ready",
    "1 while /readyz answers 200: the job runs, every source subtask has its assignment (and state), and nothing is stalled.",
);

/// `tidemark_job_stalled`.
pub const STALLED: SeriesFamily = SeriesFamily::gauge(
    "tidemark_job_stalled",
    "1 while some vertex subtask has input waiting and has taken no record for longer than stall_timeout.",
);

/// Where the run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Loading, building and wiring the job.
    Starting = 0,
    /// Reading the checkpoint it restores from (`--restore`).
    Restoring = 1,
    /// The tasks run.
    Running = 2,
    /// A stop was asked for: the sources stopped, what is in flight drains.
    Stopping = 3,
    /// The job ended (finished or stopped); the endpoint lingers.
    Ended = 4,
    /// The job failed.
    Failed = 5,
}

impl Phase {
    fn of(value: u8) -> Phase {
        match value {
            0 => Phase::Starting,
            1 => Phase::Restoring,
            2 => Phase::Running,
            3 => Phase::Stopping,
            4 => Phase::Ended,
            _ => Phase::Failed,
        }
    }
}

/// Why `/readyz` answers 503.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The job does not run yet, or a source subtask waits for its first assignment.
    Starting,
    /// A checkpoint, or a partition's keyed state, is being restored.
    Restoring,
    /// A source subtask lost its partitions in a rebalance and waits for new ones.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    Rebalancing,
    /// A stop was asked for, or the job has ended.
    Stopping,
    /// The job failed.
    Failed,
    /// Some vertex subtask has input waiting and takes none.
    Stalled,
}

impl Reason {
    /// The reason's name, as in the JSON body.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Starting => "starting",
            Reason::Restoring => "restoring",
            Reason::Rebalancing => "rebalancing",
            Reason::Stopping => "stopping",
            Reason::Failed => "failed",
            Reason::Stalled => "stalled",
        }
    }
}

/// Why the job is not ready, if it is not: the sources' own check (Kafka assignments).
pub type SourceCheck = Box<dyn Fn() -> Option<(Reason, String)> + Send + Sync>;

/// What stalls outside the job's own tasks, given the stall timeout: a Kafka partition with
/// unread messages nobody here reads and whose group's commit does not move.
pub type GroupCheck = Box<dyn Fn(Duration) -> Option<String> + Send + Sync>;

/// The health of one run.
pub struct Health {
    job_name: String,
    instance: String,
    phase: AtomicU8,
    /// What `failed` and `stopping` say.
    detail: Mutex<String>,
    /// The watchdog's verdict: what stalls, when something does.
    stall: Mutex<Option<String>>,
    stalled: AtomicBool,
    sources: Mutex<Option<SourceCheck>>,
    groups: Mutex<Option<GroupCheck>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("phase", &self.phase())
            .field("stalled", &self.stalled())
            .finish()
    }
}

/// The body of `/readyz`.
#[derive(Debug, Serialize)]
struct Readiness<'a> {
    ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

impl Health {
    /// The health of a run of `job_name` as `instance`, starting.
    pub fn new(job_name: &str, instance: &str) -> Arc<Health> {
        Arc::new(Health {
            job_name: job_name.to_owned(),
            instance: instance.to_owned(),
            phase: AtomicU8::new(Phase::Starting as u8),
            detail: Mutex::new(String::new()),
            stall: Mutex::new(None),
            stalled: AtomicBool::new(false),
            sources: Mutex::new(None),
            groups: Mutex::new(None),
        })
    }

    /// The run is now in `phase`; `detail` says more (why it failed, what stopped it).
    pub fn set_phase(&self, phase: Phase, detail: &str) {
        *self.detail.lock().unwrap_or_else(PoisonError::into_inner) = detail.to_owned();
        self.phase.store(phase as u8, Ordering::SeqCst);
    }

    /// Where the run is.
    pub fn phase(&self) -> Phase {
        Phase::of(self.phase.load(Ordering::SeqCst))
    }

    /// Sets what the sources say about readiness (their group assignments).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub fn set_source_check(&self, check: SourceCheck) {
        *self.sources.lock().unwrap_or_else(PoisonError::into_inner) = Some(check);
    }

    /// Sets what the watchdog asks about partitions nobody here reads (the Kafka sources'
    /// groups), after it found no vertex subtask stalled.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub fn set_group_check(&self, check: GroupCheck) {
        *self.groups.lock().unwrap_or_else(PoisonError::into_inner) = Some(check);
    }

    /// What stalls outside the tasks, if the group check says anything.
    fn group_stall(&self, timeout: Duration) -> Option<String> {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.as_ref().and_then(|check| check(timeout))
    }

    /// Whether the watchdog sees a stall now.
    pub fn stalled(&self) -> bool {
        self.stalled.load(Ordering::SeqCst)
    }

    /// `Ok` while the process serves and its job has not failed; else why.
    pub fn live(&self) -> Result<(), String> {
        match self.phase() {
            Phase::Failed => Err(format!("failed: {}", self.detail())),
            _ => Ok(()),
        }
    }

    /// `Ok` when the job is ready; else the reason and what it is about.
    pub fn ready(&self) -> Result<(), (Reason, String)> {
        match self.phase() {
            Phase::Starting => {
                return Err((Reason::Starting, "the job is being built".to_owned()));
            }
            Phase::Restoring => return Err((Reason::Restoring, self.detail())),
            Phase::Stopping | Phase::Ended => return Err((Reason::Stopping, self.detail())),
            Phase::Failed => return Err((Reason::Failed, self.detail())),
            Phase::Running => {}
        }
        let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(not_ready) = sources.as_ref().and_then(|check| check()) {
            return Err(not_ready);
        }
        drop(sources);
        match self
            .stall
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            Some(what) => Err((Reason::Stalled, what)),
            None => Ok(()),
        }
    }

    /// The status and JSON body of `/readyz`.
    pub fn readyz(&self) -> (u16, String) {
        let ready = self.ready();
        let (status, body) = match &ready {
            Ok(()) => (
                200,
                Readiness {
                    ready: true,
                    reason: None,
                    detail: None,
                },
            ),
            Err((reason, detail)) => (
                503,
                Readiness {
                    ready: false,
                    reason: Some(*reason),
                    detail: Some(detail),
                },
            ),
        };
        let mut text = serde_json::to_string(&body).unwrap_or_default();
        text.push('\n');
        (status, text)
    }

    /// For the live view: `{"ready", "reason", "detail", "stalled"}`.
    pub fn json(&self) -> serde_json::Value {
        let ready = self.ready();
        serde_json::json!({
            "ready": ready.is_ok(),
            "reason": ready.as_ref().err().map(|(r, _)| r.as_str()),
            "detail": ready.as_ref().err().map(|(_, d)| d.clone()),
            "stalled": self.stalled(),
        })
    }

    /// The two gauges in the Prometheus text format, labelled as the registry labels series,
    /// for `/metrics` before the job's registry exists.
    pub fn metrics_text(&self) -> String {
        let mut labels = format!("job_name=\"{}\"", escape_label(&self.job_name));
        if !self.instance.is_empty() {
            labels.push_str(&format!(
                ",tidemark_instance=\"{}\"",
                escape_label(&self.instance)
            ));
        }
        let mut text = String::new();
        for (family, value) in [
            (&READY, u8::from(self.ready().is_ok())),
            (&STALLED, u8::from(self.stalled())),
        ] {
            text.push_str(&format!(
                "# HELP {} {}\n# TYPE {} gauge\n{}{{{labels}}} {value}\n",
                family.name, family.help, family.name, family.name
            ));
        }
        text
    }

    fn detail(&self) -> String {
        self.detail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn judge(&self, verdict: Option<String>) {
        self.stalled.store(verdict.is_some(), Ordering::SeqCst);
        *self.stall.lock().unwrap_or_else(PoisonError::into_inner) = verdict;
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl SeriesSource for Health {
    fn collect(&self, out: &mut SeriesWriter) {
        out.number(&READY, &[], f64::from(u8::from(self.ready().is_ok())));
        out.number(&STALLED, &[], f64::from(u8::from(self.stalled())));
    }
}

/// What the Kafka sources (and exchange readers) say about readiness: the first subtask
/// that waits for its first assignment (`starting`), restores its partitions' state
/// (`restoring`) or lost its partitions in a rebalance (`rebalancing`); `None` when every one
/// holds its assignment (possibly empty).
#[cfg(feature = "kafka")]
pub fn kafka_readiness(metrics: &tidemark_kafka::KafkaMetrics) -> Option<(Reason, String)> {
    use tidemark_kafka::metrics::Assignment;
    metrics
        .assignments()
        .into_iter()
        .find_map(|(id, subtask, assignment)| {
            let (reason, what) = match assignment {
                Assignment::Assigned => return None,
                Assignment::Waiting => (Reason::Starting, "waits for its first assignment"),
                Assignment::Restoring => (Reason::Restoring, "restores its partitions' state"),
                Assignment::Rebalancing => (
                    Reason::Rebalancing,
                    "lost its partitions in a rebalance and waits for new ones",
                ),
            };
            Some((
                reason,
                format!("kafka source \"{id}\" subtask {subtask} {what}"),
            ))
        })
}

/// The stall watchdog: judges the rule every tick until dropped.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watchdog")
    }
}

/// What the watchdog last saw of one vertex subtask.
struct Seen {
    /// Records taken and emitted so far.
    moved: u64,
    /// Since when it has had input waiting without taking any.
    since: Instant,
}

/// Starts the watchdog of `health` over the tasks of `registry`: some vertex subtask with input
/// waiting (records in its input queue, or source lag above 0) that has taken no record for
/// longer than `timeout` makes the job stalled; so does a Kafka partition with unread messages
/// that nobody here reads and whose group's commit has not moved for that long
/// ([`Health::set_group_check`]). A zero `timeout` starts none.
pub fn watch(
    health: &Arc<Health>,
    registry: Arc<MetricsRegistry>,
    timeout: Duration,
) -> Option<Watchdog> {
    if timeout.is_zero() {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tick = (timeout / 5).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let (health, ended) = (health.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("tidemark-watchdog".into())
        .spawn(move || {
            let mut seen: Vec<Vec<Seen>> = Vec::new();
            while !ended.load(Ordering::SeqCst) {
                let verdict =
                    judge(&registry, &mut seen, timeout).or_else(|| health.group_stall(timeout));
                health.judge(verdict);
                std::thread::park_timeout(tick);
            }
        })
        .ok()?;
    Some(Watchdog {
        stop,
        thread: Some(thread),
    })
}

/// One look at every vertex subtask: the one that stalls, in words; of several, the last in the
/// job's order (sources, operators, sinks): the others are most likely held up by it.
fn judge(
    registry: &MetricsRegistry,
    seen: &mut Vec<Vec<Seen>>,
    timeout: Duration,
) -> Option<String> {
    let now = Instant::now();
    let mut verdict = None;
    for (v, vertex) in registry.vertices().iter().enumerate() {
        if seen.len() <= v {
            seen.push(Vec::new());
        }
        for (i, subtask) in vertex.subtasks.iter().enumerate() {
            let moved = subtask.records_in() + subtask.records_out();
            if seen[v].len() <= i {
                seen[v].push(Seen { moved, since: now });
            }
            let queued = subtask.input_queue_records();
            let lag = subtask.lag_records().max(0);
            let s = &mut seen[v][i];
            if moved != s.moved || queued + lag == 0 {
                *s = Seen { moved, since: now };
                continue;
            }
            let still = now.saturating_duration_since(s.since);
            // The most downstream one is named: upstream ones wait on it (backpressure).
            if still > timeout {
                let waiting = if queued > 0 {
                    format!("{queued} records in its input queue")
                } else {
                    format!("source lag {lag} records")
                };
                verdict = Some(format!(
                    "{} \"{}\" subtask {i} has {waiting} and has taken no record for \
                     {:.1} s (stall_timeout {})",
                    vertex.kind.as_str(),
                    vertex.id,
                    still.as_secs_f64(),
                    format_duration(timeout)
                ));
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests;
