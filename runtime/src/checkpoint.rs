//! Checkpoints for at-least-once delivery: barriers travel in-band with the records (like latency
//! markers, but down **every** channel); a vertex forwards barrier `n` once every input still
//! open has delivered it; a sink flushes and acknowledges `n`; when every sink subtask has
//! acknowledged `n`, checkpoint `n` is complete and the sources may commit the input positions
//! they recorded when they sent barrier `n` (Kafka offsets, say).
//!
//! Barriers are numbered 1, 2, 3, … by every source subtask on its own timer (the job's
//! `checkpoint_interval`). A vertex forwards only the newest barrier its inputs have all
//! delivered, so acknowledging `n` acknowledges every checkpoint before it too.
//!
//! [`Checkpoints`] is the job-wide coordinator the tasks share; it also keeps the series
//! `tidemark_checkpoints_completed_total`, `tidemark_checkpoints_failed_total` and
//! `tidemark_checkpoint_duration_seconds`, which it
//! writes into the job's metrics registry as a [`SeriesSource`]. Control code reaches it
//! through [`JobHandle::checkpoints`](crate::JobHandle::checkpoints), never through metrics.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::checkpoint_store::{write_checkpoint_with, Metadata, StateFile, VertexMeta};
use crate::keyed_state::KeyedSnapshot;
use crate::metrics::{SeriesFamily, SeriesSource, SeriesWriter};
use crate::sync::lock;

/// Upper bounds (seconds) of the checkpoint duration histogram's buckets.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The job-wide checkpoint coordinator.
#[derive(Debug)]
pub struct Checkpoints {
    interval: Option<Duration>,
    /// Per sink subtask: the newest checkpoint it acknowledged (`u64::MAX` once it finished).
    acked: Vec<AtomicU64>,
    /// The newest complete checkpoint.
    completed: AtomicU64,
    /// The newest checkpoint that failed (was not written); sources waiting for their last
    /// checkpoint stop waiting for it.
    failed: AtomicU64,
    /// Checkpoints to a directory, when the job writes them.
    storage: Option<Storage>,
    inner: Mutex<Inner>,
    /// When checkpoints may start and how many may fail in a row.
    policy: CheckpointPolicy,
    /// When the coordinator was made: the origin of the times below.
    born: Instant,
    /// When the newest checkpoint settled (completed or failed), ns after `born`; 0: none yet.
    settled_at: AtomicU64,
    /// One more than the last interval (counted from `born`) in which a due checkpoint was
    /// skipped, so that the sources skipping it together count it once.
    skipped_tick: AtomicU64,
    skipped_total: AtomicU64,
    /// Checkpoints that failed since the last one that completed.
    failed_in_a_row: AtomicU64,
}

/// When checkpoints start, and how many may fail (`checkpoint.max_concurrent`, `min_pause` and
/// `tolerable_failures` in a job file), as Flink's `CheckpointRequestDecider` and
/// `tolerable-failed-checkpoints`: a checkpoint whose time has come while
/// `max_concurrent` are still in flight, or less than `min_pause` after the last one settled,
/// is skipped (`tidemark_checkpoints_skipped_total`) and starts as soon as it may, so a store
/// slower than the interval makes checkpoints rarer instead of piling snapshots up in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Checkpoints in flight at once (at least 1; default 1).
    pub max_concurrent: u64,
    /// The least time from one checkpoint settling (completed or failed) to the next starting
    /// (default 0).
    pub min_pause: Duration,
    /// Checkpoints that may fail in a row (not written, a snapshot that failed) before the job
    /// fails, naming the last cause (default 3).
    pub tolerable_failures: u64,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            max_concurrent: 1,
            min_pause: Duration::ZERO,
            tolerable_failures: 3,
        }
    }
}

/// Where and how a job's checkpoints are written ([`crate::checkpoint_store`]).
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    /// `<dir>/<job>`: the checkpoint folders go here.
    pub job_dir: PathBuf,
    /// Complete checkpoints kept.
    pub retain: usize,
    /// The id the first checkpoint of this run follows (the restored one, or the highest id
    /// in the folder): ids are never reused.
    pub last_id: u64,
}

#[derive(Debug)]
struct Storage {
    config: CheckpointStorage,
    /// The job's name and every vertex (their files are filled in per checkpoint).
    job: String,
    vertices: Vec<VertexMeta>,
    /// Vertex subtasks in the job: a checkpoint is complete when each gave its state.
    subtasks: usize,
    /// The newest checkpoint written whole.
    stored: AtomicU64,
    writer: Mutex<Option<mpsc::Sender<ToWrite>>>,
    /// The writer thread, joined when the job ends so nothing is written after it.
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Keyed snapshots written, kept for the tasks' next checkpoints (their buffers already
    /// in memory): at most one per vertex subtask.
    spare: Mutex<Vec<KeyedSnapshot>>,
}

/// A checkpoint to write: its id and each vertex subtask's state (with its vertex index).
type ToWrite = (u64, Vec<(usize, StateFile)>);

/// The last complete checkpoint written to the directory.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedCheckpoint {
    /// Its id.
    pub id: u64,
    /// Its folder.
    pub path: PathBuf,
    /// Bytes written (every file).
    pub size_bytes: u64,
    /// When it completed, seconds since the Unix epoch.
    pub completed_at: f64,
}

/// Per vertex: an alignment or sync histogram's buckets, count and sum.
type AlignmentHistogram = ([u64; DURATION_BUCKETS.len()], u64, f64);

#[derive(Debug, Default)]
struct Inner {
    /// When each pending checkpoint's first barrier left a source.
    started: BTreeMap<u64, Instant>,
    completed_total: u64,
    failed_total: u64,
    buckets: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum_seconds: f64,
    /// Checkpoints to a directory: the state given so far per checkpoint.
    parts: BTreeMap<u64, Vec<(usize, StateFile)>>,
    /// Keyed state a subtask's store kept for a checkpoint, as (checkpoint, vertex, subtask),
    /// until the subtask gives the rest of its state ([`Checkpoints::keep_keyed`]).
    keyed_parts: BTreeMap<(u64, usize, u32), KeyedSnapshot>,
    /// Vertex subtasks that ended without a final state (a hard stop, a failure), as (vertex,
    /// subtask): checkpoints they gave no state for cannot complete.
    finished: HashSet<(usize, u32)>,
    /// Vertex subtasks that ended cleanly, with their state after the end: it stands in for
    /// every later checkpoint (the subtask has nothing more to read or emit).
    finals: BTreeMap<(usize, u32), StateFile>,
    last: Option<CompletedCheckpoint>,
    /// What made the last failed checkpoint fail.
    last_failure: Option<String>,
    /// The most checkpoints that were in flight at once.
    most_in_flight: u64,
    /// Per vertex id: how long barriers were aligned.
    alignment: BTreeMap<String, AlignmentHistogram>,
    /// Per vertex id: how long a task took its chain's snapshot, once aligned (Flink's sync
    /// duration).
    sync: BTreeMap<String, AlignmentHistogram>,
}

impl Checkpoints {
    /// A coordinator for a job with `sink_subtasks` sink subtasks; `interval` `None` turns
    /// checkpointing off.
    pub fn new(interval: Option<Duration>, sink_subtasks: usize) -> Self {
        Checkpoints {
            interval: interval.filter(|d| !d.is_zero()),
            acked: (0..sink_subtasks).map(|_| AtomicU64::new(0)).collect(),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            storage: None,
            inner: Mutex::new(Inner::default()),
            policy: CheckpointPolicy::default(),
            born: Instant::now(),
            settled_at: AtomicU64::new(0),
            skipped_tick: AtomicU64::new(0),
            skipped_total: AtomicU64::new(0),
            failed_in_a_row: AtomicU64::new(0),
        }
    }

    /// The same coordinator under `policy`.
    pub fn with_policy(mut self, policy: CheckpointPolicy) -> Self {
        self.policy = CheckpointPolicy {
            max_concurrent: policy.max_concurrent.max(1),
            ..policy
        };
        self
    }

    /// Whether a source subtask whose last barrier was `sent` may start the next checkpoint
    /// at `now`: fewer than `max_concurrent` in flight and `min_pause` since the last settled.
    /// Two atomic loads (three with a pause): asked once per loop of a source whose
    /// checkpoint is due.
    pub(crate) fn may_start(&self, sent: u64, now: Instant) -> bool {
        let settled = self.completed().max(self.failed.load(Ordering::Acquire));
        if sent.saturating_sub(settled) >= self.policy.max_concurrent {
            return false;
        }
        if self.policy.min_pause.is_zero() {
            return true;
        }
        match self.settled_at.load(Ordering::Acquire) {
            0 => true,
            at => {
                let since = self.born + Duration::from_nanos(at);
                now.saturating_duration_since(since) >= self.policy.min_pause
            }
        }
    }

    /// A source subtask's checkpoint was due at `now` but may not start yet
    /// ([`Checkpoints::may_start`]): counted once per interval, however many sources skip.
    pub(crate) fn skipped(&self, now: Instant) {
        let Some(interval) = self.interval else {
            return;
        };
        let tick = (now.saturating_duration_since(self.born).as_nanos()
            / interval.as_nanos().max(1)) as u64
            + 1;
        if self.skipped_tick.fetch_max(tick, Ordering::AcqRel) < tick {
            self.skipped_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The most checkpoints that were in flight (started, neither complete nor failed) at once
    /// so far: at most [`CheckpointPolicy::max_concurrent`] but for the last one a stopping
    /// source sends whatever is in flight.
    pub fn most_in_flight(&self) -> u64 {
        lock(&self.inner).most_in_flight
    }

    /// Checkpoints skipped so far: due while `max_concurrent` were in flight or within
    /// `min_pause` ([`CheckpointPolicy`]), counted once per interval.
    pub fn skipped_total(&self) -> u64 {
        self.skipped_total.load(Ordering::Relaxed)
    }

    /// Why the job must fail: more than `tolerable_failures` checkpoints in a row failed.
    /// One atomic load while none did.
    pub(crate) fn too_many_failures(&self) -> Option<String> {
        let failed = self.failed_in_a_row.load(Ordering::Acquire);
        if failed <= self.policy.tolerable_failures {
            return None;
        }
        let cause = lock(&self.inner)
            .last_failure
            .clone()
            .unwrap_or_else(|| "unknown".to_owned());
        Some(format!(
            "{failed} checkpoints in a row failed (checkpoint.tolerable_failures is {}); the \
             last: {cause}",
            self.policy.tolerable_failures
        ))
    }

    /// A vertex subtask could not take its snapshot for checkpoint `n` (`cause`): the
    /// checkpoint is declined, not the job ([`CheckpointPolicy::tolerable_failures`]).
    pub(crate) fn decline(&self, n: u64, cause: String) {
        let mut inner = lock(&self.inner);
        inner.parts.remove(&n);
        inner.keyed_parts.retain(|(k, _, _), _| *k != n);
        self.fail_locked(&mut inner, n, cause);
    }

    fn note_settled(&self) {
        let at = Instant::now()
            .saturating_duration_since(self.born)
            .as_nanos() as u64;
        self.settled_at.store(at.max(1), Ordering::Release);
    }

    /// Writes each checkpoint to `storage` for a job named `job` with `vertices` (their files
    /// empty), once every one of their subtasks gave its state.
    pub(crate) fn with_storage(
        mut self,
        storage: CheckpointStorage,
        job: String,
        vertices: Vec<VertexMeta>,
    ) -> Self {
        let subtasks = vertices.iter().map(|v| v.parallelism as usize).sum();
        self.completed = AtomicU64::new(storage.last_id);
        self.failed = AtomicU64::new(storage.last_id);
        self.storage = Some(Storage {
            stored: AtomicU64::new(storage.last_id),
            config: storage,
            job,
            vertices,
            subtasks,
            writer: Mutex::new(None),
            writer_thread: Mutex::new(None),
            spare: Mutex::new(Vec::new()),
        });
        self
    }

    /// Starts the thread that writes checkpoint files beside the tasks (none without a
    /// directory).
    pub(crate) fn start_writer(self: &Arc<Self>) {
        let Some(storage) = &self.storage else {
            return;
        };
        let (tx, rx) = mpsc::channel::<ToWrite>();
        *lock(&storage.writer) = Some(tx);
        let weak: Weak<Checkpoints> = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("checkpoint-writer".into())
            .spawn(move || {
                // Every file is encoded in this one buffer.
                let mut buffer = Vec::new();
                while let Ok((n, files)) = rx.recv() {
                    let Some(c) = weak.upgrade() else { return };
                    c.write(n, files, &mut buffer);
                }
            });
        match spawned {
            Ok(thread) => *lock(&storage.writer_thread) = Some(thread),
            Err(_) => *lock(&storage.writer) = None,
        }
    }

    /// Lets the writer finish the checkpoints it was given and waits for it: once the job
    /// has ended, nothing more is written to its directory.
    pub(crate) fn stop_writer(&self) {
        let Some(storage) = &self.storage else {
            return;
        };
        lock(&storage.writer).take();
        let thread = lock(&storage.writer_thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// Whether checkpoints are written to a directory.
    pub fn writes_state(&self) -> bool {
        self.storage.is_some()
    }

    /// The id the next checkpoint of this run follows.
    pub(crate) fn last_id(&self) -> u64 {
        self.storage.as_ref().map_or(0, |s| s.config.last_id)
    }

    /// The last complete checkpoint written to the directory, if any.
    pub fn last_completed(&self) -> Option<CompletedCheckpoint> {
        lock(&self.inner).last.clone()
    }

    /// Whether checkpoint `n` has completed or failed.
    pub(crate) fn settled(&self, n: u64) -> bool {
        self.completed() >= n || self.failed.load(Ordering::Acquire) >= n
    }

    /// The id, parallelism and number of key groups of vertex `v`.
    pub(crate) fn vertex(&self, v: usize) -> Option<&VertexMeta> {
        self.storage.as_ref().and_then(|s| s.vertices.get(v))
    }

    /// An empty snapshot of `max_parallelism` key groups for a task's checkpoint: one the
    /// writer is done with when there is one (its buffers are reused), else a new one.
    pub(crate) fn keyed_snapshot(&self, max_parallelism: u32) -> KeyedSnapshot {
        let spare = self.storage.as_ref().and_then(|s| lock(&s.spare).pop());
        match spare {
            Some(mut snapshot) => {
                snapshot.clear(max_parallelism);
                snapshot
            }
            None => KeyedSnapshot::new(max_parallelism),
        }
    }

    /// The directory's store of subtask `subtask` of `vertex` keeps its keyed state for
    /// checkpoint `n` ([`crate::keyed_store::DirectoryStore`]): it goes into the subtask's
    /// file, which the subtask gives right after ([`Checkpoints::submit`]).
    pub(crate) fn keep_keyed(&self, n: u64, vertex: usize, subtask: u32, state: KeyedSnapshot) {
        lock(&self.inner)
            .keyed_parts
            .insert((n, vertex, subtask), state);
    }

    /// A subtask of `vertex` gives its state for checkpoint `n`.
    pub(crate) fn submit(&self, n: u64, vertex: usize, file: StateFile) {
        let Some(storage) = &self.storage else {
            return;
        };
        if self.failed.load(Ordering::Acquire) >= n && self.completed() < n {
            // Declined (a snapshot failed) or failed: the rest of its state is not kept.
            return;
        }
        let mut inner = lock(&self.inner);
        let mut file = file;
        if let Some(keyed) = inner.keyed_parts.remove(&(n, vertex, file.subtask)) {
            file.keyed = Some(keyed);
        }
        inner.parts.entry(n).or_default().push((vertex, file));
        self.settle(&mut inner, storage, n);
    }

    /// Checkpoint `n` with the state given so far: failed when a subtask that ended without
    /// a final state did not give it, complete (sent to the writer) when every subtask gave
    /// its state or ended with a final one.
    fn settle(&self, inner: &mut Inner, storage: &Storage, n: u64) {
        let Some(parts) = inner.parts.get(&n) else {
            return;
        };
        let gave = |v: usize, s: u32| parts.iter().any(|(pv, f)| *pv == v && f.subtask == s);
        if let Some((v, s)) = inner.finished.iter().find(|(v, s)| !gave(*v, *s)) {
            let cause = format!(
                "subtask {s} of {} ended without giving its state",
                storage.vertices.get(*v).map_or("?", |m| m.id.as_str())
            );
            inner.parts.remove(&n);
            self.fail_locked(inner, n, cause);
            return;
        }
        let standing = inner.finals.keys().filter(|(v, s)| !gave(*v, *s)).count();
        if parts.len() + standing < storage.subtasks {
            return;
        }
        let mut files = inner.parts.remove(&n).unwrap_or_default();
        for ((v, s), file) in &inner.finals {
            if !files.iter().any(|(pv, f)| pv == v && f.subtask == *s) {
                files.push((*v, file.clone()));
            }
        }
        let sent = match &*lock(&storage.writer) {
            Some(tx) => tx.send((n, files)).is_ok(),
            None => false,
        };
        if !sent {
            self.fail_locked(inner, n, "the checkpoint writer is gone".to_owned());
        }
    }

    /// Vertex subtask (`vertex`, `subtask`) has ended. With its state after the end
    /// (`final_state`, marked finished), that state stands in for it in every checkpoint it
    /// gave nothing for; without (a hard stop, a failure), those checkpoints cannot complete.
    pub(crate) fn subtask_finished(
        &self,
        vertex: usize,
        subtask: u32,
        final_state: Option<StateFile>,
    ) {
        let Some(storage) = &self.storage else {
            return;
        };
        let mut inner = lock(&self.inner);
        match final_state {
            Some(file) => {
                inner.finals.insert((vertex, subtask), file);
            }
            None => {
                inner.finished.insert((vertex, subtask));
            }
        }
        let pending: Vec<u64> = inner.parts.keys().copied().collect();
        for n in pending {
            self.settle(&mut inner, storage, n);
        }
    }

    fn fail_locked(&self, inner: &mut Inner, n: u64, cause: String) {
        self.failed.fetch_max(n, Ordering::AcqRel);
        inner.failed_total += 1;
        inner.started.remove(&n);
        inner.last_failure = Some(format!("checkpoint {n}: {cause}"));
        self.failed_in_a_row.fetch_add(1, Ordering::AcqRel);
        self.note_settled();
    }

    fn fail(&self, n: u64, cause: String) {
        self.fail_locked(&mut lock(&self.inner), n, cause);
    }

    /// Writes checkpoint `n` (on the writer thread, encoding each file in `buffer`), then
    /// keeps its keyed snapshots for the tasks' next checkpoints.
    fn write(&self, n: u64, files: Vec<(usize, StateFile)>, buffer: &mut Vec<u8>) {
        let Some(storage) = &self.storage else {
            return;
        };
        let completed_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let meta = Metadata {
            job: storage.job.clone(),
            id: n,
            completed_ms: (completed_at * 1000.0) as i64,
            vertices: storage.vertices.clone(),
            key_hash: crate::key_hash::KEY_HASH.into(),
        };
        let mut files = files;
        files.sort_by_key(|a| (a.0, a.1.subtask));
        let written = write_checkpoint_with(
            &storage.config.job_dir,
            meta,
            &files,
            storage.config.retain,
            buffer,
        );
        let mut spare = lock(&storage.spare);
        for keyed in files.into_iter().filter_map(|(_, f)| f.keyed) {
            if spare.len() < storage.subtasks {
                spare.push(keyed);
            }
        }
        drop(spare);
        match written {
            Ok((path, size_bytes)) => {
                lock(&self.inner).last = Some(CompletedCheckpoint {
                    id: n,
                    path,
                    size_bytes,
                    completed_at,
                });
                storage.stored.fetch_max(n, Ordering::AcqRel);
                self.update_completed();
            }
            Err(e) => {
                tracing::warn!("checkpoint {n} failed: {e}");
                self.fail(n, e.to_string());
            }
        }
    }

    /// A subtask of `vertex` held inputs back `seconds` for barrier alignment (0 with one
    /// input).
    pub(crate) fn aligned(&self, vertex: usize, seconds: f64) {
        self.observe(vertex, seconds, |inner| &mut inner.alignment);
    }

    /// A task whose first vertex is `vertex` spent `seconds` taking its chain's snapshot once
    /// its inputs were aligned (copying state, flushing sinks): the time it stopped processing
    /// for the checkpoint besides the alignment.
    pub(crate) fn synced(&self, vertex: usize, seconds: f64) {
        self.observe(vertex, seconds, |inner| &mut inner.sync);
    }

    /// Adds one observation of `vertex` to the per-vertex histogram `which` picks.
    fn observe(
        &self,
        vertex: usize,
        seconds: f64,
        which: impl FnOnce(&mut Inner) -> &mut BTreeMap<String, AlignmentHistogram>,
    ) {
        let Some(id) = self.vertex(vertex).map(|v| v.id.clone()) else {
            return;
        };
        let mut inner = lock(&self.inner);
        let (buckets, count, sum) =
            which(&mut inner)
                .entry(id)
                .or_insert(([0; DURATION_BUCKETS.len()], 0, 0.0));
        for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                buckets[i] += 1;
            }
        }
        *count += 1;
        *sum += seconds;
    }

    /// How often sources start a checkpoint, if checkpointing is on.
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// The newest complete checkpoint (0: none yet).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Checkpoints completed so far.
    pub fn completed_total(&self) -> u64 {
        lock(&self.inner).completed_total
    }

    /// Checkpoints that failed so far: not written (a write error, a subtask that ended before
    /// it gave its state), or started and given up on (the job ended, failed or was stopped
    /// hard before every sink acknowledged them).
    pub fn failed_total(&self) -> u64 {
        lock(&self.inner).failed_total
    }

    /// The job has ended: every checkpoint still pending will never complete, so it failed.
    pub(crate) fn abandon_pending(&self) {
        let mut inner = lock(&self.inner);
        inner.failed_total += inner.started.len() as u64;
        inner.started.clear();
    }

    /// A source subtask sends barrier `n`; the first to do so starts the clock of `n`.
    pub(crate) fn triggered(&self, n: u64) {
        let mut inner = lock(&self.inner);
        inner.started.entry(n).or_insert_with(Instant::now);
        inner.most_in_flight = inner.most_in_flight.max(inner.started.len() as u64);
        drop(inner);
        // A job without sinks completes every checkpoint at once.
        self.update_completed();
    }

    /// Sink subtask `sink` flushed everything before barrier `n`.
    pub(crate) fn acknowledge(&self, sink: usize, n: u64) {
        if let Some(a) = self.acked.get(sink) {
            a.fetch_max(n, Ordering::AcqRel);
        }
        self.update_completed();
    }

    /// Sink subtask `sink` has ended: it holds nothing back any more.
    pub(crate) fn sink_finished(&self, sink: usize) {
        self.acknowledge(sink, u64::MAX);
    }

    fn update_completed(&self) {
        let mut inner = lock(&self.inner);
        let newest_started = inner.started.keys().next_back().copied().unwrap_or(0);
        let mut min = self
            .acked
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
            .min(newest_started);
        if let Some(s) = &self.storage {
            // With a directory, complete means written.
            min = min.min(s.stored.load(Ordering::Acquire));
        }
        let before = self.completed.load(Ordering::Acquire);
        if min <= before {
            return;
        }
        self.completed.store(min, Ordering::Release);
        self.failed_in_a_row.store(0, Ordering::Release);
        self.note_settled();
        let now = Instant::now();
        let done: Vec<u64> = inner.started.range(..=min).map(|(n, _)| *n).collect();
        for n in done {
            // (A failed checkpoint left `started` when it failed.)
            if let Some(started) = inner.started.remove(&n) {
                let seconds = now.duration_since(started).as_secs_f64();
                inner.completed_total += 1;
                inner.count += 1;
                inner.sum_seconds += seconds;
                for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
                    if seconds <= *bound {
                        inner.buckets[i] += 1;
                    }
                }
            }
        }
    }
}

/// `tidemark_checkpoints_completed_total`.
pub const COMPLETED: SeriesFamily = SeriesFamily::counter(
    "tidemark_checkpoints_completed_total",
    "Checkpoints every sink acknowledged.",
);

/// `tidemark_checkpoints_failed_total`.
pub const FAILED: SeriesFamily = SeriesFamily::counter(
    "tidemark_checkpoints_failed_total",
    "Checkpoints that failed: not written (a write error, a subtask that ended before giving its state), or started and never completed (the job ended, failed or was stopped hard before every sink acknowledged them).",
);

/// `tidemark_checkpoints_skipped_total`.
pub const SKIPPED: SeriesFamily = SeriesFamily::counter(
    "tidemark_checkpoints_skipped_total",
    "Checkpoints whose time came while checkpoint.max_concurrent were still in flight or within checkpoint.min_pause of the last one (each started as soon as it could: a slow store makes checkpoints rarer, not memory grow).",
);

/// `tidemark_checkpoint_duration_seconds`, with the buckets [`DURATION_BUCKETS`].
pub const DURATION: SeriesFamily = SeriesFamily::histogram(
    "tidemark_checkpoint_duration_seconds",
    "Time from a checkpoint's first barrier to the last sink acknowledgement.",
);

/// `tidemark_checkpoint_alignment_seconds`.
pub const ALIGNMENT: SeriesFamily = SeriesFamily::histogram(
    "tidemark_checkpoint_alignment_seconds",
    "Time a vertex subtask held back inputs whose barrier had arrived until every open input delivered it (0 with one input).",
);

/// `tidemark_checkpoint_sync_seconds`.
pub const SYNC: SeriesFamily = SeriesFamily::histogram(
    "tidemark_checkpoint_sync_seconds",
    "Time a task with inputs spent taking its snapshot once its barrier was aligned (copying its operators' state in memory, flushing its sinks), labelled with the task's first vertex; the task processes nothing meanwhile (Flink's sync duration).",
);

/// `tidemark_checkpoint_size_bytes`.
pub const SIZE: SeriesFamily = SeriesFamily::gauge(
    "tidemark_checkpoint_size_bytes",
    "Bytes of the last complete checkpoint written to the directory.",
);

/// `tidemark_checkpoint_last_completed_timestamp_seconds`.
pub const LAST_COMPLETED: SeriesFamily = SeriesFamily::gauge(
    "tidemark_checkpoint_last_completed_timestamp_seconds",
    "When the last complete checkpoint was written, seconds since the Unix epoch.",
);

/// The checkpoint series, labelled only with `job_name` (and `tidemark_instance`, and the
/// vertex for alignment); none while checkpointing is off. The job registers the coordinator
/// with its metrics registry.
impl SeriesSource for Checkpoints {
    fn collect(&self, out: &mut SeriesWriter) {
        if self.interval.is_none() {
            return;
        }
        let inner = lock(&self.inner);
        out.number(&COMPLETED, &[], inner.completed_total as f64);
        out.number(&FAILED, &[], inner.failed_total as f64);
        out.number(&SKIPPED, &[], self.skipped_total() as f64);
        out.histogram(
            &DURATION,
            &[],
            &DURATION_BUCKETS,
            &inner.buckets,
            inner.count,
            inner.sum_seconds,
        );
        if self.storage.is_none() {
            return;
        }
        for (family, per_vertex) in [(&ALIGNMENT, &inner.alignment), (&SYNC, &inner.sync)] {
            for (vertex, (buckets, count, sum)) in per_vertex {
                out.histogram(
                    family,
                    &[("operator_id", vertex.as_str())],
                    &DURATION_BUCKETS,
                    buckets,
                    *count,
                    *sum,
                );
            }
        }
        if let Some(last) = &inner.last {
            out.number(&SIZE, &[], last.size_bytes as f64);
            out.number(&LAST_COMPLETED, &[], last.completed_at);
        }
    }
}

/// Per input slot of a task: the newest barrier each has delivered, to forward barrier `n`
/// only once every open input delivered it. Aligned: an input that delivered a barrier not
/// yet forwarded is [blocked](BarrierAlignment::blocked), and the task holds back what it
/// sends after the barrier (records, markers and watermarks, in their order) until then.
#[derive(Debug)]
pub(crate) struct BarrierAlignment {
    delivered: Vec<u64>,
    ended: Vec<bool>,
    forwarded: u64,
    /// When the first input delivered the barrier being aligned.
    started: Option<Instant>,
}

impl BarrierAlignment {
    pub(crate) fn new(slots: usize) -> Self {
        BarrierAlignment {
            delivered: vec![0; slots],
            ended: vec![false; slots],
            forwarded: 0,
            started: None,
        }
    }

    /// Whether what `slot` sends now is held back: it delivered a barrier that not every open
    /// input has delivered yet.
    #[inline]
    pub(crate) fn blocked(&self, slot: usize) -> bool {
        self.delivered
            .get(slot)
            .is_some_and(|d| *d > self.forwarded)
    }

    /// How long the barrier just forwarded was aligned (0 when one input had it), and the
    /// clock of the next alignment restarted if an input is already ahead.
    pub(crate) fn take_alignment(&mut self) -> Duration {
        let took = self.started.take().map_or(Duration::ZERO, |s| s.elapsed());
        if (0..self.delivered.len()).any(|s| self.blocked(s)) {
            self.started = Some(Instant::now());
        }
        took
    }

    /// Slot `slot` delivered barrier `n`; returns the barrier to forward now, if any.
    pub(crate) fn on_barrier(&mut self, slot: usize, n: u64) -> Option<u64> {
        if let Some(d) = self.delivered.get_mut(slot) {
            *d = (*d).max(n);
        }
        let ready = self.ready();
        if ready.is_none() && self.started.is_none() {
            self.started = Some(Instant::now());
        }
        ready
    }

    /// Slot `slot` ended; returns the barrier to forward now, if any.
    pub(crate) fn on_end(&mut self, slot: usize) -> Option<u64> {
        if let Some(e) = self.ended.get_mut(slot) {
            *e = true;
        }
        self.ready()
    }

    fn ready(&mut self) -> Option<u64> {
        let min = self
            .delivered
            .iter()
            .zip(&self.ended)
            .filter(|(_, ended)| !**ended)
            .map(|(d, _)| *d)
            .min()?;
        if min > self.forwarded {
            self.forwarded = min;
            Some(min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{CollectedFamily, SeriesValue};

    fn collect(c: &Checkpoints) -> Vec<CollectedFamily> {
        let mut writer = SeriesWriter::default();
        c.collect(&mut writer);
        writer.finish()
    }

    #[test]
    fn a_barrier_waits_for_every_open_input() {
        let mut a = BarrierAlignment::new(3);
        assert_eq!(a.on_barrier(0, 1), None);
        assert_eq!(a.on_barrier(1, 1), None);
        assert_eq!(a.on_barrier(0, 2), None);
        assert_eq!(a.on_barrier(2, 2), Some(1));
        assert_eq!(a.on_barrier(1, 2), Some(2));
        // Slot 1 runs ahead, then slot 0 ends: only slot 2 is waited for.
        assert_eq!(a.on_barrier(1, 3), None);
        assert_eq!(a.on_end(0), None);
        assert_eq!(a.on_barrier(2, 3), Some(3));
        // An input that ends after delivering a barrier does not make a later one ready.
        assert_eq!(a.on_barrier(2, 4), None);
        assert_eq!(a.on_end(2), None);
        assert_eq!(a.on_barrier(1, 4), Some(4));
    }

    #[test]
    fn checkpoints_pending_when_the_job_ends_failed() {
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 1);
        c.triggered(1);
        c.acknowledge(0, 1);
        c.triggered(2);
        c.triggered(3);
        assert_eq!((c.completed_total(), c.failed_total()), (1, 0));
        c.abandon_pending();
        assert_eq!((c.completed_total(), c.failed_total()), (1, 2));
        // Counted once; and a late acknowledgement completes nothing given up on.
        c.abandon_pending();
        c.acknowledge(0, 3);
        assert_eq!((c.completed_total(), c.failed_total()), (1, 2));
        let failed = collect(&c)
            .into_iter()
            .find(|f| f.family.name == "tidemark_checkpoints_failed_total")
            .unwrap();
        assert_eq!(failed.series[0].value, SeriesValue::Number(2.0));
    }

    #[test]
    fn complete_when_every_sink_acknowledged() {
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 2);
        c.triggered(1);
        c.triggered(2);
        c.acknowledge(0, 2);
        assert_eq!(c.completed(), 0);
        c.acknowledge(1, 1);
        assert_eq!(c.completed(), 1);
        assert_eq!(c.completed_total(), 1);
        c.sink_finished(1);
        assert_eq!(c.completed(), 2);
        assert_eq!(c.completed_total(), 2);
        let families = collect(&c);
        let names: Vec<&str> = families.iter().map(|f| f.family.name).collect();
        assert_eq!(
            names,
            [
                "tidemark_checkpoints_completed_total",
                "tidemark_checkpoints_failed_total",
                "tidemark_checkpoints_skipped_total",
                "tidemark_checkpoint_duration_seconds"
            ]
        );
        assert_eq!(families[0].series[0].value, SeriesValue::Number(2.0));
        assert_eq!(families[1].series[0].value, SeriesValue::Number(0.0));
        let SeriesValue::Histogram { buckets, count, .. } = &families[3].series[0].value else {
            panic!("{families:?}");
        };
        assert_eq!(*count, 2);
        assert_eq!(buckets.len(), DURATION_BUCKETS.len());
        assert!(families.iter().all(|f| f.series[0].labels.is_empty()));
        // Acknowledgements never run ahead of what the sources started.
        c.acknowledge(0, 9);
        assert_eq!(c.completed(), 2);
    }

    fn file(vertex: &str, subtask: u32, position: u8) -> StateFile {
        StateFile {
            vertex: vertex.into(),
            subtask,
            parallelism: 2,
            position: Some(vec![position]),
            ..StateFile::default()
        }
    }

    /// Two source subtasks (vertex 0) and no sinks, writing to a temporary folder.
    fn stored(name: &str) -> (Arc<Checkpoints>, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "tidemark-coordinator-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let vertices = vec![VertexMeta {
            id: "src".into(),
            kind: "source".into(),
            parallelism: 2,
            max_parallelism: 128,
            keyed: false,
            files: vec![],
        }];
        let storage = CheckpointStorage {
            job_dir: dir.clone(),
            retain: 10,
            last_id: 0,
        };
        let c = Arc::new(
            Checkpoints::new(Some(Duration::from_millis(5)), 0).with_storage(
                storage,
                "j".into(),
                vertices,
            ),
        );
        c.start_writer();
        (c, dir)
    }

    fn wait_settled(c: &Checkpoints, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.settled(n) {
            assert!(Instant::now() < deadline, "checkpoint {n} never settled");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_subtask_that_ended_cleanly_stands_in_with_its_final_state() {
        let (c, dir) = stored("final");
        c.triggered(1);
        c.submit(1, 0, file("src", 0, 1));
        c.submit(1, 0, file("src", 1, 1));
        wait_settled(&c, 1);
        assert_eq!(c.completed(), 1);
        // Subtask 0 ends with its final position; checkpoint 2 has only subtask 1's state.
        c.subtask_finished(
            0,
            0,
            Some(StateFile {
                finished: true,
                ..file("src", 0, 9)
            }),
        );
        c.triggered(2);
        c.submit(2, 0, file("src", 1, 2));
        wait_settled(&c, 2);
        assert_eq!(c.completed(), 2);
        let loaded = crate::checkpoint_store::read_checkpoint(&dir.join("chk-2")).unwrap();
        let first = loaded.file("src", 0).unwrap();
        assert!(first.finished);
        assert_eq!(first.position, Some(vec![9]));
        assert_eq!(loaded.file("src", 1).unwrap().position, Some(vec![2]));
        assert_eq!(c.failed_total(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_given_to_the_writer_is_on_disk_once_the_writer_stopped() {
        let (c, dir) = stored("stop");
        c.triggered(1);
        c.submit(1, 0, file("src", 0, 1));
        c.submit(1, 0, file("src", 1, 1));
        // No waiting for the write: stopping the writer waits for it.
        c.stop_writer();
        assert_eq!(c.completed(), 1);
        let loaded = crate::checkpoint_store::read_checkpoint(&dir.join("chk-1")).unwrap();
        assert_eq!(loaded.file("src", 1).unwrap().position, Some(vec![1]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_subtask_that_ended_without_a_final_state_fails_later_checkpoints_once_each() {
        let (c, dir) = stored("stuck");
        c.triggered(1);
        c.submit(1, 0, file("src", 1, 1));
        c.subtask_finished(0, 0, None);
        wait_settled(&c, 1);
        assert_eq!((c.completed(), c.failed_total()), (0, 1));
        c.triggered(2);
        c.submit(2, 0, file("src", 1, 2));
        wait_settled(&c, 2);
        assert_eq!((c.completed(), c.failed_total()), (0, 2));
        assert!(crate::checkpoint_store::complete_checkpoints(&dir)
            .unwrap()
            .is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn state_submitted_after_a_panic_under_the_lock_is_kept_and_written() {
        let (c, dir) = stored("poisoned");
        c.triggered(1);
        c.submit(1, 0, file("src", 0, 1));
        // Another thread panics while it holds the coordinator's lock (a bug that fails the
        // job elsewhere): the lock is poisoned.
        let holder = c.clone();
        let panicked = std::thread::spawn(move || {
            let _guard = holder.inner.lock();
            panic!("a bug while holding the checkpoint lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(c.inner.is_poisoned());
        // The second subtask's state is still taken, and the checkpoint is written with both.
        c.submit(1, 0, file("src", 1, 1));
        wait_settled(&c, 1);
        assert_eq!((c.completed(), c.failed_total()), (1, 0));
        let loaded = crate::checkpoint_store::read_checkpoint(&dir.join("chk-1")).unwrap();
        assert_eq!(loaded.file("src", 0).unwrap().position, Some(vec![1]));
        assert_eq!(loaded.file("src", 1).unwrap().position, Some(vec![1]));
        assert_eq!(c.last_completed().map(|l| l.id), Some(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn at_most_max_concurrent_checkpoints_are_in_flight() {
        let now = Instant::now();
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 1);
        assert!(c.may_start(0, now));
        c.triggered(1);
        assert!(!c.may_start(1, now), "checkpoint 1 is in flight");
        c.acknowledge(0, 1);
        assert!(c.may_start(1, now), "it completed");
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 1).with_policy(CheckpointPolicy {
            max_concurrent: 2,
            ..CheckpointPolicy::default()
        });
        c.triggered(1);
        assert!(c.may_start(1, now));
        c.triggered(2);
        assert!(!c.may_start(2, now));
        // A failed one settles too.
        c.decline(2, "a test".into());
        assert!(c.may_start(2, now));
    }

    #[test]
    fn min_pause_counts_from_the_last_settled_checkpoint() {
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 1).with_policy(CheckpointPolicy {
            min_pause: Duration::from_secs(3600),
            ..CheckpointPolicy::default()
        });
        assert!(c.may_start(0, Instant::now()), "nothing settled yet");
        c.triggered(1);
        c.acknowledge(0, 1);
        assert!(!c.may_start(1, Instant::now()));
        assert!(c.may_start(1, Instant::now() + Duration::from_secs(3601)));
    }

    #[test]
    fn a_skipped_checkpoint_counts_once_per_interval_however_many_sources_skip_it() {
        let c = Checkpoints::new(Some(Duration::from_secs(10)), 1);
        let t = c.born + Duration::from_secs(25);
        c.skipped(t);
        c.skipped(t);
        c.skipped(t + Duration::from_secs(1));
        assert_eq!(c.skipped_total(), 1);
        c.skipped(t + Duration::from_secs(10));
        assert_eq!(c.skipped_total(), 2);
        let skipped = collect(&c)
            .into_iter()
            .find(|f| f.family.name == "tidemark_checkpoints_skipped_total")
            .unwrap();
        assert_eq!(skipped.series[0].value, SeriesValue::Number(2.0));
    }

    #[test]
    fn the_job_fails_only_after_more_than_tolerable_failures_in_a_row() {
        let c = Checkpoints::new(Some(Duration::from_secs(1)), 1);
        for n in 1..=3 {
            c.triggered(n);
            c.decline(n, format!("disk full {n}"));
            assert_eq!(c.too_many_failures(), None, "{n} failed");
        }
        // One completes: the count starts again.
        c.triggered(4);
        c.acknowledge(0, 4);
        for n in 5..=8 {
            c.triggered(n);
            c.decline(n, format!("disk full {n}"));
        }
        let why = c.too_many_failures().expect("four in a row");
        assert!(why.contains("4 checkpoints in a row failed"), "{why}");
        assert!(why.contains("checkpoint 8: disk full 8"), "{why}");
        assert_eq!(c.failed_total(), 7);
    }

    #[test]
    fn without_sinks_a_checkpoint_completes_when_it_starts() {
        let c = Checkpoints::new(Some(Duration::from_millis(5)), 0);
        c.triggered(3);
        assert_eq!(c.completed(), 3);
        assert!(collect(&Checkpoints::new(None, 1)).is_empty());
    }
}
