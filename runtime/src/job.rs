//! Starting a job: instantiate every subtask, wire the channels, spawn one thread per task
//! subtask (or per pair of them, [`crate::worker`]), and watch them to the end.

use crate::chain::{Chain, ChainNode, NodeKind};
use crate::channel::{self, ChannelReader, ChannelWriter};
use crate::checkpoint::Checkpoints;
use crate::component::SubtaskContext;
use crate::config::JobConfig;
use crate::event_time::WatermarkGenerator;
use crate::graph::{Factory, GraphError, JobGraph, VertexKind};
use crate::job_flags::JobFlags;
use crate::keyed_store::{DirectoryStore, KeyedStore};
use crate::metrics::{
    MetricsRegistry, SubtaskMetrics, TaskMetrics, TaskMetricsGroup, VertexMetrics,
};
use crate::output::Output;
use crate::partitioner::{EdgeWriter, Router};
use crate::plan::ExecutionPlan;
use crate::task::{Head, Holding, Task, Waiting, COUNTED_BY_HANDLE, COUNTING_BY_TASK, NOT_COUNTED};
use crate::worker::Worker;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tidemark_markers::MarkerEmitter;

/// Why a job could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The graph is invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A factory failed to make a subtask's instance (a file that cannot be opened, say).
    #[error("vertex \"{vertex}\" subtask {subtask}: {message}")]
    Factory {
        /// The vertex id.
        vertex: String,
        /// The subtask index.
        subtask: usize,
        /// What went wrong.
        message: String,
    },
    /// A subtask refused the state or position the checkpoint holds for it (its input file
    /// changed, say): the checkpoint does not fit the job as it is now.
    #[error("vertex \"{vertex}\" subtask {subtask}: {message}")]
    Restore {
        /// The vertex id.
        vertex: String,
        /// The subtask index.
        subtask: usize,
        /// Why the state or position cannot be restored.
        message: String,
    },
    /// A thread could not be spawned.
    #[error("cannot start a thread for task \"{task}\": {message}")]
    Spawn {
        /// The task name.
        task: String,
        /// What went wrong.
        message: String,
    },
}

/// Which subtask failed and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFailure {
    /// The vertex id whose code failed.
    pub vertex_id: String,
    /// Its subtask index.
    pub subtask: usize,
    /// The error or panic message.
    pub message: String,
}

impl std::fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "vertex \"{}\" subtask {} failed: {}",
            self.vertex_id, self.subtask, self.message
        )
    }
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    /// Every source ended and everything reached the sinks.
    Finished,
    /// A stop was requested; the sources stopped and what was in flight was drained.
    Stopped,
    /// A hard stop was requested ([`JobHandle::abort`]): every task ended at once, and what was
    /// in flight was dropped and counted ([`crate::DropReason::InFlight`]).
    Aborted,
    /// A subtask failed; the job was aborted.
    Failed(TaskFailure),
}

/// The result of a job: its outcome, how long it ran, and its final metrics.
#[derive(Debug)]
pub struct JobResult {
    /// Finished, stopped or failed.
    pub outcome: JobOutcome,
    /// Wall time from start to the last task's end.
    pub elapsed: Duration,
    /// The metrics as the tasks left them.
    pub metrics: Arc<MetricsRegistry>,
    /// The checkpoint coordinator as the tasks left it (checkpoints completed).
    pub checkpoints: Arc<Checkpoints>,
    /// Tasks (thread names, `task#subtask`) that had not ended when [`JobHandle::wait_at_most`]
    /// gave up on them; empty after [`JobHandle::wait`]. The batch each was working on is counted
    /// as in flight at its head vertex; records in its partly filled output batches are not.
    pub tasks_not_ended: Vec<String>,
}

struct Shared {
    flags: Arc<JobFlags>,
    /// [`JobHandle::abort`] was called.
    abort_requested: AtomicBool,
    failure: Mutex<Option<TaskFailure>>,
    live: AtomicUsize,
    /// When the last task ended (the job's end, whenever `wait` is called).
    ended: Mutex<Option<Instant>>,
    registry: Arc<MetricsRegistry>,
    checkpoints: Arc<Checkpoints>,
}

/// Asks a running job to stop: sources stop, in-flight records drain to the sinks.
#[derive(Clone)]
pub struct StopHandle {
    shared: Arc<Shared>,
}

impl StopHandle {
    /// Requests the stop. Returns at once.
    pub fn stop(&self) {
        self.shared.flags.request_stop();
    }

    /// Requests a stop that keeps state for a restore (Flink's stop with a savepoint, without
    /// `--drain`): the sources stop, a last checkpoint is taken, and operators do not emit
    /// what they still hold (open windows stay in the checkpoint). Returns at once.
    pub fn suspend(&self) {
        self.shared.flags.suspend.store(true, Ordering::Relaxed);
        self.shared.flags.request_stop();
    }
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopHandle")
    }
}

/// A task subtask's name (`task#subtask`) and what it holds.
type TaskHolding = (String, Arc<Holding>);

/// A running job.
pub struct JobHandle {
    shared: Arc<Shared>,
    /// Each thread, with what each of its task subtasks (`task#subtask`) holds (for a hard
    /// stop).
    threads: Vec<(JoinHandle<()>, Vec<TaskHolding>)>,
    started: Instant,
    plan: ExecutionPlan,
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("job", &self.plan.job_name)
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl JobHandle {
    /// The live metrics, readable at any moment.
    pub fn metrics(&self) -> &Arc<MetricsRegistry> {
        &self.shared.registry
    }

    /// The job's checkpoint coordinator (at-least-once barriers): checkpoints completed so far.
    pub fn checkpoints(&self) -> &Arc<Checkpoints> {
        &self.shared.checkpoints
    }

    /// The plan the job runs.
    pub fn plan(&self) -> &ExecutionPlan {
        &self.plan
    }

    /// The threads the job runs: one per task subtask, less one for each pair of them sharing
    /// a thread ([`ExecutionPlan::thread_pairs`]).
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// A handle another thread can use to stop the job.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            shared: self.shared.clone(),
        }
    }

    /// Requests a stop (see [`StopHandle::stop`]).
    pub fn stop(&self) {
        self.stop_handle().stop()
    }

    /// True once every task has ended.
    pub fn is_finished(&self) -> bool {
        self.shared.live.load(Ordering::Acquire) == 0
    }

    /// Stops the job hard: every task ends as soon as it notices (within milliseconds unless
    /// user code is busy), without draining. Records left in queues, in partly filled batches
    /// and in a task's hands are dropped and counted as [`crate::DropReason::InFlight`] at the
    /// vertex subtask that held them. The outcome is [`JobOutcome::Aborted`] (unless a subtask
    /// failed first). Returns at once.
    pub fn abort(&self) {
        self.shared.abort_requested.store(true, Ordering::Relaxed);
        self.shared.flags.request_abort();
    }

    /// Waits for every task to end.
    pub fn wait(self) -> JobResult {
        self.wait_until(None)
    }

    /// Waits for every task to end, but no longer than `limit`: tasks still running then (user
    /// code that does not return, say) are left behind and named in
    /// [`JobResult::tasks_not_ended`]. Meant after [`JobHandle::abort`].
    pub fn wait_at_most(self, limit: Duration) -> JobResult {
        self.wait_until(Some(Instant::now() + limit))
    }

    fn wait_until(self, deadline: Option<Instant>) -> JobResult {
        let mut tasks_not_ended = Vec::new();
        for (t, holdings) in self.threads {
            if let Some(deadline) = deadline {
                while !t.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if !t.is_finished() {
                    // Still busy: in user code, or past its work and closing its components
                    // (a Kafka source's last commit and leaving its group wait for the brokers,
                    // up to their own timeouts). Left behind, named; the batch each of its
                    // tasks holds is counted here unless the task counted what it left itself.
                    for (name, holding) in &holdings {
                        let claimed = holding.counted.compare_exchange(
                            NOT_COUNTED,
                            COUNTED_BY_HANDLE,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        if claimed.is_ok() {
                            let held = holding.held.load(Ordering::Relaxed);
                            if held > 0 {
                                holding
                                    .head
                                    .add_records_dropped(crate::DropReason::InFlight, held);
                            }
                        } else {
                            // The task's count is a few stores: let it finish them.
                            while holding.counted.load(Ordering::Acquire) == COUNTING_BY_TASK {
                                std::thread::yield_now();
                            }
                        }
                        tasks_not_ended.push(name.clone());
                    }
                    continue;
                }
            }
            let _ = t.join();
        }
        let registry = self.shared.registry.clone();
        // A checkpoint still pending now never completes.
        self.shared.checkpoints.abandon_pending();
        self.shared.checkpoints.stop_writer();
        registry.set_running(false);
        if self.shared.flags.abort.load(Ordering::Relaxed) {
            // Records still queued when the job stopped hard never reached their vertex.
            for v in registry.vertices() {
                for s in &v.subtasks {
                    let queued = s.input_queue_records();
                    if queued > 0 {
                        s.add_records_dropped(crate::DropReason::InFlight, queued as u64);
                    }
                }
            }
        }
        let failure = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let outcome = match failure {
            Some(f) => JobOutcome::Failed(f),
            None if self.shared.abort_requested.load(Ordering::Relaxed) => JobOutcome::Aborted,
            None if self.shared.flags.stop.load(Ordering::Relaxed) => JobOutcome::Stopped,
            None => JobOutcome::Finished,
        };
        let ended = self
            .shared
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(Instant::now);
        JobResult {
            outcome,
            elapsed: ended.saturating_duration_since(self.started),
            metrics: registry,
            checkpoints: self.shared.checkpoints.clone(),
            tasks_not_ended,
        }
    }
}

/// Runs `graph` to its end on the calling thread's behalf (spawns tasks, then waits).
pub fn run(graph: JobGraph, config: JobConfig) -> Result<JobResult, StartError> {
    Ok(start(graph, config)?.wait())
}

/// The seed a subtask's [`SubtaskContext::seed`](crate::SubtaskContext) holds: the job's seed
/// `base` mixed with the vertex's index in the graph (the order vertices were added) and the
/// subtask's index, so that a benchmark's baseline can make the same random records as a
/// job's generators.
pub fn subtask_seed(base: u64, vertex: usize, subtask: usize) -> u64 {
    mix_seed(base, vertex, subtask)
}

fn mix_seed(base: u64, vertex: usize, subtask: usize) -> u64 {
    // SplitMix64 finaliser over the combined inputs.
    let mut z = base ^ ((vertex as u64) << 32) ^ (subtask as u64) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Starts `graph`: [`prepare`] then [`PreparedJob::start`].
pub fn start(graph: JobGraph, config: JobConfig) -> Result<JobHandle, StartError> {
    prepare(graph, config)?.start()
}

/// Validates and plans `graph`, makes every subtask's instance and wires the channels, without
/// starting any thread. [`PreparedJob::start`] runs it.
pub fn prepare(graph: JobGraph, config: JobConfig) -> Result<PreparedJob, StartError> {
    let plan = ExecutionPlan::new(&graph, config.chaining)?;
    let batch_size = config.batch_size.max(1);
    let base_seed = config.seed.unwrap_or_else(rand::random);
    let lat = config.latency;

    // Metrics for every vertex subtask and task subtask.
    let vertices: Vec<VertexMetrics> = graph
        .vertices
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let terminal = graph.outputs(crate::graph::VertexId(i)).next().is_none();
            let subtasks = (0..v.parallelism)
                .map(|_| {
                    let m = SubtaskMetrics::new(
                        lat.granularity,
                        lat.history_size,
                        config.marker_buckets.clone(),
                    );
                    if v.kind() == VertexKind::Source || terminal || config.e2e_latency_everywhere {
                        m.enable_e2e(lat.history_size, config.e2e_buckets.clone());
                    }
                    Arc::new(m)
                })
                .collect();
            VertexMetrics {
                id: v.id.clone(),
                kind: v.kind(),
                terminal,
                subtasks,
            }
        })
        .collect();
    let tasks_metrics: Vec<TaskMetricsGroup> = plan
        .tasks
        .iter()
        .map(|t| TaskMetricsGroup {
            name: t.name.clone(),
            vertices: t.vertices.iter().map(|v| v.0).collect(),
            subtasks: (0..t.parallelism)
                .map(|_| Arc::new(TaskMetrics::default()))
                .collect(),
        })
        .collect();
    let registry =
        MetricsRegistry::new(graph.name.clone(), lat.granularity, vertices, tasks_metrics);
    // Checkpoints: every sink subtask acknowledges each barrier.
    let sink_subtasks: usize = graph
        .vertices
        .iter()
        .filter(|v| v.kind() == VertexKind::Sink)
        .map(|v| v.parallelism)
        .sum();
    let mut checkpoints = Checkpoints::new(config.checkpoint_interval, sink_subtasks)
        .with_policy(config.checkpoint_policy);
    if let (Some(storage), Some(_)) = (&config.checkpoint_storage, config.checkpoint_interval) {
        let vertices = graph
            .vertices
            .iter()
            .map(|v| crate::checkpoint_store::VertexMeta {
                id: v.id.clone(),
                kind: v.kind().as_str().to_string(),
                parallelism: v.parallelism as u32,
                max_parallelism: v.max_parallelism(),
                // A vertex whose key groups move with a store of their own (behind a Kafka
                // exchange) keeps its keys per subtask in the directory, each subtask's with
                // the store's positions of the same subtask (`crate::keyed_store`).
                keyed: v.keyed && v.kind() == VertexKind::Operator && v.keyed_store.is_none(),
                files: Vec::new(),
            })
            .collect();
        checkpoints = checkpoints.with_storage(storage.clone(), graph.name.clone(), vertices);
    }
    let checkpoints = Arc::new(checkpoints);
    checkpoints.start_writer();
    let registry = Arc::new(registry);
    if checkpoints.interval().is_some() {
        registry.register_series(checkpoints.clone());
    }
    let mut next_sink_index = 0usize;

    // Where any source makes watermarks, vertices with several inputs name the one holding
    // theirs back, from the start.
    let watermarks_flow = graph
        .vertices
        .iter()
        .any(|v| v.source_options.watermarks.is_some());
    // Queues: one per subtask of every task that has channel input.
    let mut queues: Vec<Vec<Option<(QueueSender, ChannelReader)>>> = plan
        .tasks
        .iter()
        .map(|t| (0..t.parallelism).map(|_| None).collect())
        .collect();
    type EdgeWriters = Vec<Vec<ChannelWriter>>; // per upstream subtask
    let mut edge_writers: Vec<EdgeWriters> = Vec::with_capacity(plan.edges.len());
    for e in &plan.edges {
        let p = graph.vertices[e.from.0].parallelism;
        let q = graph.vertices[e.to.0].parallelism;
        let mut per_upstream: EdgeWriters = (0..p).map(|_| Vec::new()).collect();
        for (u, writers) in per_upstream.iter_mut().enumerate() {
            let targets: Vec<usize> = if e.partitioning == crate::graph::Partitioning::Forward {
                vec![u]
            } else {
                (0..q).collect()
            };
            for d in targets {
                let slot_entry = &mut queues[e.to_task][d];
                let gauge = registry.vertices()[e.to.0].subtasks[d].clone();
                let (tx, reader) = slot_entry.get_or_insert_with(|| {
                    let (tx, rx) = channel::queue(config.channel_capacity.max(1));
                    (
                        tx,
                        ChannelReader {
                            rx,
                            returns: Vec::new(),
                            open: 0,
                            gauge: gauge.clone(),
                            taken: 0,
                            inputs: Vec::new(),
                            input_index: Vec::new(),
                            several_inputs: false,
                            names_holder: watermarks_flow,
                        },
                    )
                });
                // A writer's credit: a full queue, one batch being processed and one being
                // filled; the pool holds them all, so none is lost on the way back.
                let credit = config.channel_capacity.max(1) + 2;
                let (pool_tx, pool_rx) = channel::pool(credit);
                let slot = reader.returns.len() as u32;
                reader.returns.push(pool_tx);
                reader
                    .inputs
                    .push(Arc::from(graph.vertices[e.from.0].id.as_str()));
                let input = graph
                    .inputs(e.to)
                    .position(|g| g.from == e.from)
                    .expect("an edge is among its vertex's inputs")
                    as u32;
                reader.input_index.push(input);
                reader.several_inputs |= input > 0;
                reader.open += 1;
                writers.push(ChannelWriter::new(
                    tx.clone(),
                    pool_rx,
                    slot,
                    gauge,
                    batch_size,
                    credit,
                ));
            }
        }
        edge_writers.push(per_upstream);
    }
    // Senders held by the readers' map must go, or a queue would never disconnect.
    let mut readers: Vec<Vec<Option<ChannelReader>>> = queues
        .into_iter()
        .map(|per| per.into_iter().map(|o| o.map(|(_, r)| r)).collect())
        .collect();

    let flags = Arc::new(JobFlags::new());
    let shared = Arc::new(Shared {
        flags: flags.clone(),
        abort_requested: AtomicBool::new(false),
        failure: Mutex::new(None),
        live: AtomicUsize::new(0),
        ended: Mutex::new(None),
        registry: registry.clone(),
        checkpoints: checkpoints.clone(),
    });

    // Instantiate every task subtask.
    let context = |v: usize, subtask: usize| SubtaskContext {
        job_name: graph.name.clone(),
        vertex_id: graph.vertices[v].id.clone(),
        subtask,
        parallelism: graph.vertices[v].parallelism,
        seed: mix_seed(base_seed, v, subtask),
    };
    let factory_error =
        |v: usize, subtask: usize, e: crate::component::BoxError| StartError::Factory {
            vertex: graph.vertices[v].id.clone(),
            subtask,
            message: e.to_string(),
        };
    let restore_error =
        |v: usize, subtask: usize, e: crate::component::BoxError| StartError::Restore {
            vertex: graph.vertices[v].id.clone(),
            subtask,
            message: e.to_string(),
        };
    let restored = config.restore.as_deref();
    if let Some(r) = restored {
        check_key_groups(&graph, r)?;
    }
    // Writers are taken per (edge, upstream subtask) in order.
    let mut writers_by_edge: Vec<Vec<Option<Vec<ChannelWriter>>>> = edge_writers
        .into_iter()
        .map(|per| per.into_iter().map(Some).collect())
        .collect();
    let mut tasks: Vec<(String, usize, Task)> = Vec::new();
    for (ti, t) in plan.tasks.iter().enumerate() {
        for s in 0..t.parallelism {
            let mut nodes = Vec::new();
            let mut head = None;
            for (pos, v) in t.vertices.iter().enumerate() {
                let ctx = context(v.0, s);
                let metrics = registry.vertices()[v.0].subtasks[s].clone();
                match &graph.vertices[v.0].factory {
                    Factory::Source(f) => {
                        debug_assert_eq!(pos, 0);
                        let mut source = f(&ctx).map_err(|e| factory_error(v.0, s, e))?;
                        let emitter = MarkerEmitter::new(lat.interval, v.0 as u32, s as u32);
                        let options = graph.vertices[v.0].source_options;
                        let mut watermarks = options.watermarks.map(WatermarkGenerator::new);
                        if let Some(file) = restored.and_then(|r| r.file(&ctx.vertex_id, s)) {
                            if let Some(position) = &file.position {
                                source
                                    .resume(position)
                                    .map_err(|e| restore_error(v.0, s, e))?;
                            }
                            if let (Some(w), Some(t)) = (watermarks.as_mut(), file.max_timestamp) {
                                w.restore_max_timestamp(t);
                            }
                        }
                        head = Some(Head::Source {
                            source,
                            emitter,
                            metrics,
                            vertex: v.0,
                            timestamp_check: options.timestamp_check,
                            watermarks,
                        });
                    }
                    Factory::Operator(f) => {
                        let mut op = f(&ctx).map_err(|e| factory_error(v.0, s, e))?;
                        let vertex = &graph.vertices[v.0];
                        // Where its keyed state goes and comes from ([`crate::keyed_store`]).
                        let mut store = None;
                        if op.has_keyed_state() {
                            let writes = checkpoints.writes_state();
                            let directory = (writes || restored.is_some()).then(|| {
                                DirectoryStore::new(
                                    writes.then(|| checkpoints.clone()),
                                    v.0,
                                    s,
                                    vertex.parallelism,
                                    vertex.max_parallelism(),
                                    restored.and_then(|r| {
                                        r.keyed_state(
                                            &vertex.id,
                                            s,
                                            vertex.parallelism,
                                            vertex.max_parallelism(),
                                        )
                                    }),
                                )
                            });
                            store = match &vertex.keyed_store {
                                Some(f) => {
                                    Some(f(&ctx, directory).map_err(|e| factory_error(v.0, s, e))?)
                                }
                                None => directory.map(|d| Box::new(d) as Box<dyn KeyedStore>),
                            };
                        }
                        let mut out = Output::default();
                        for m in store.iter_mut().flat_map(|s| s.take_moves()) {
                            crate::chain::apply_to_operator(op.as_mut(), m, &mut out)
                                .map_err(|e| restore_error(v.0, s, e))?;
                        }
                        // Restored without writing checkpoints: the directory's store has given
                        // its keys and has nothing to keep, so barriers take no snapshot for it.
                        if vertex.keyed_store.is_none() && !checkpoints.writes_state() {
                            store = None;
                        }
                        if !out.is_empty() {
                            return Err(restore_error(
                                v.0,
                                s,
                                "the operator emitted records while its keyed state was restored"
                                    .into(),
                            ));
                        }
                        if let Some(r) = restored {
                            if let Some(local) =
                                r.file(&vertex.id, s).and_then(|f| f.local.as_ref())
                            {
                                op.restore_local(local)
                                    .map_err(|e| restore_error(v.0, s, e))?;
                            }
                        }
                        let e2e = metrics.e2e_latency().is_some()
                            && graph.vertices[v.0].kind() != VertexKind::Source;
                        let mut node =
                            ChainNode::new(v.0, NodeKind::Operator(op), metrics, batch_size, e2e);
                        node.store = store;
                        node.ended_before = restored
                            .and_then(|r| r.file(&ctx.vertex_id, s))
                            .is_some_and(|f| f.finished);
                        nodes.push(node);
                    }
                    Factory::Sink(f) => {
                        let mut sink = f(&ctx).map_err(|e| factory_error(v.0, s, e))?;
                        if let Some(position) = restored
                            .and_then(|r| r.file(&ctx.vertex_id, s))
                            .and_then(|f| f.position.as_ref())
                        {
                            sink.restore(position)
                                .map_err(|e| restore_error(v.0, s, e))?;
                        }
                        let e2e = metrics.e2e_latency().is_some();
                        let mut node =
                            ChainNode::new(v.0, NodeKind::Sink(sink), metrics, batch_size, e2e);
                        node.sink_index = Some(next_sink_index);
                        next_sink_index += 1;
                        nodes.push(node);
                    }
                }
            }
            let head = match head {
                Some(h) => h,
                None => Head::Channel(
                    readers[ti][s]
                        .take()
                        .expect("a non-source task has input channels"),
                ),
            };
            let last = *t.vertices.last().expect("a task has a vertex");
            let mut outs = Vec::new();
            for (ei, e) in plan.edges.iter().enumerate() {
                if e.from == last {
                    let writers = writers_by_edge[ei][s].take().expect("writers taken once");
                    outs.push(EdgeWriter::new(
                        e.partitioning,
                        writers,
                        graph.vertices[e.to.0].max_parallelism(),
                    ));
                }
            }
            let router = (!outs.is_empty()).then(|| {
                Router::new(
                    outs,
                    SmallRng::seed_from_u64(mix_seed(base_seed ^ 0x5EED, last.0, s)),
                    config.buffer_timeout,
                )
            });
            let mut chain = Chain::new(nodes, router, config.clock.clone(), flags.clone());
            chain.subtask = s as u32;
            if checkpoints.interval().is_some() {
                chain.checkpoints = Some(checkpoints.clone());
            }
            let task = Task::new(
                head,
                chain,
                flags.clone(),
                config.clock.clone(),
                registry.tasks()[ti].subtasks[s].clone(),
                batch_size,
                Waiting {
                    strategy: config.idle_strategy,
                    buffer_timeout: config.buffer_timeout,
                    // Task::new looks at the chain's operators.
                    timers: true,
                },
            );
            tasks.push((t.name.clone(), s, task));
        }
    }
    let threads = threads(tasks, &plan, config.share_threads);

    Ok(PreparedJob {
        shared,
        threads,
        plan,
        vertex_ids: Arc::new(graph.vertices.iter().map(|v| v.id.clone()).collect()),
    })
}

/// One thread to start: its name, the names of its task subtasks (`task#subtask`), the
/// subtask index they share, and what it runs.
struct ThreadPlan {
    name: String,
    tasks: Vec<String>,
    subtask: usize,
    worker: Worker,
}

/// Gives each task subtask its thread: the subtasks of a pair of
/// [`ExecutionPlan::thread_pairs`] whose source never waits in its poll share one (when
/// `share` is on, [`JobConfig::share_threads`]), every other has its own.
fn threads(
    tasks: Vec<(String, usize, Task)>,
    plan: &ExecutionPlan,
    share: bool,
) -> Vec<ThreadPlan> {
    let pairs = match share {
        true => plan.thread_pairs(),
        false => Vec::new(),
    };
    let mut grid: Vec<Vec<Option<(String, Task)>>> = plan
        .tasks
        .iter()
        .map(|t| (0..t.parallelism).map(|_| None).collect())
        .collect();
    let mut order = Vec::with_capacity(tasks.len());
    for (name, s, mut task) in tasks {
        task.publish_first_holder();
        let ti = plan
            .tasks
            .iter()
            .position(|t| t.name == name)
            .expect("a planned task");
        order.push((ti, s));
        grid[ti][s] = Some((name, task));
    }
    let mut threads = Vec::with_capacity(order.len());
    for (ti, s) in order {
        let Some((name, task)) = grid[ti][s].take() else {
            continue; // already in a pair
        };
        let partner = pairs
            .iter()
            .find(|(a, _)| *a == ti)
            .filter(|_| task.polls_without_waiting())
            .map(|(_, b)| *b);
        let worker = match partner.and_then(|b| grid[b][s].take()) {
            Some((other, consumer)) => ThreadPlan {
                name: format!("{name}+{other}#{s}"),
                tasks: vec![format!("{name}#{s}"), format!("{other}#{s}")],
                subtask: s,
                worker: Worker::pair(task, consumer),
            },
            None => ThreadPlan {
                name: format!("{name}#{s}"),
                tasks: vec![format!("{name}#{s}")],
                subtask: s,
                worker: Worker::Alone(task),
            },
        };
        threads.push(worker);
    }
    threads
}

/// A job whose subtasks are made and wired but not yet running: its metrics registry exists,
/// so an endpoint can serve it before the first record flows.
pub struct PreparedJob {
    shared: Arc<Shared>,
    threads: Vec<ThreadPlan>,
    plan: ExecutionPlan,
    vertex_ids: Arc<Vec<String>>,
}

impl std::fmt::Debug for PreparedJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedJob")
            .field("job", &self.plan.job_name)
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl PreparedJob {
    /// The metrics registry the job will write to.
    pub fn metrics(&self) -> &Arc<MetricsRegistry> {
        &self.shared.registry
    }

    /// The job's checkpoint coordinator.
    pub fn checkpoints(&self) -> &Arc<Checkpoints> {
        &self.shared.checkpoints
    }

    /// The plan the job will run.
    pub fn plan(&self) -> &ExecutionPlan {
        &self.plan
    }

    /// Spawns one thread per task subtask, or per pair of them ([`crate::worker`]).
    pub fn start(self) -> Result<JobHandle, StartError> {
        let PreparedJob {
            shared,
            threads: planned,
            plan,
            vertex_ids,
        } = self;
        let flags = shared.flags.clone();
        let started = Instant::now();
        let mut threads = Vec::with_capacity(planned.len());
        shared.live.store(planned.len(), Ordering::Release);
        for thread in planned {
            let ThreadPlan {
                name,
                tasks,
                subtask: s,
                mut worker,
            } = thread;
            let holdings = tasks.into_iter().zip(worker.holdings()).collect();
            let shared2 = shared.clone();
            let ids = vertex_ids.clone();
            let spawned = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    let end = catch_unwind(AssertUnwindSafe(|| worker.run()));
                    let failure = match end {
                        Ok(failure) => failure,
                        Err(panic) => {
                            let message = panic
                                .downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| panic.downcast_ref::<String>().cloned())
                                .unwrap_or_else(|| "panic".to_string());
                            Some((worker.running_vertex(), format!("panicked: {message}")))
                        }
                    };
                    if let Some((vertex, message)) = failure {
                        let mut slot = shared2.failure.lock().unwrap_or_else(|e| e.into_inner());
                        if slot.is_none() {
                            *slot = Some(TaskFailure {
                                vertex_id: ids[vertex].clone(),
                                subtask: s,
                                message,
                            });
                        }
                        shared2.flags.request_abort();
                    }
                    // Drop the tasks (and their channel ends) before counting the thread out.
                    drop(worker);
                    if shared2.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                        *shared2.ended.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(Instant::now());
                    }
                });
            match spawned {
                Ok(h) => threads.push((h, holdings)),
                Err(e) => {
                    flags.request_abort();
                    for (t, _) in threads {
                        let _ = t.join();
                    }
                    return Err(StartError::Spawn {
                        task: name,
                        message: e.to_string(),
                    });
                }
            }
        }
        Ok(JobHandle {
            shared,
            threads,
            started,
            plan,
        })
    }
}

/// The sending end of a queue, kept while wiring so each writer can clone it.
type QueueSender = crossbeam_channel::Sender<channel::Message>;

/// A restore into keyed vertices of another `max_parallelism` would hand each subtask the
/// wrong key groups: refused here, for every user of the library as for the command.
fn check_key_groups(
    graph: &JobGraph,
    restored: &crate::checkpoint_store::LoadedCheckpoint,
) -> Result<(), StartError> {
    for vertex in &graph.vertices {
        let Some(saved) = restored
            .metadata
            .vertices
            .iter()
            .find(|m| m.id == vertex.id && m.keyed)
        else {
            continue;
        };
        if saved.max_parallelism != vertex.max_parallelism() {
            return Err(StartError::Restore {
                vertex: vertex.id.clone(),
                subtask: 0,
                message: format!(
                    "max_parallelism {} in the checkpoint at {} and {} now; keyed state is \
                     stored in key groups, so max_parallelism must stay the same",
                    saved.max_parallelism,
                    restored.path.display(),
                    vertex.max_parallelism()
                ),
            });
        }
    }
    Ok(())
}
