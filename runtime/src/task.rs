//! Tasks: the loop one thread runs for one task subtask, with a source or a channel at its head.

use crate::batch::{Batch, Event};
use crate::chain::{Chain, ChainError};
use crate::channel::{reborrow, Assist, ChannelReader, Message, SendContext, ABORT_POLL};
use crate::checkpoint::{BarrierAlignment, Checkpoints};
use crate::checkpoint_store::StateFile;
use crate::component::{PollContext, Source, SourceStatus};
use crate::config::{IdleStrategy, PARK_QUIET, PARK_TICK};
use crate::event_time::{
    InputWatermarks, InvalidTimestampPolicy, TimestampCheck, WatermarkAction, WatermarkGenerator,
};
use crate::job_flags::{JobFlags, Wakes};
use crate::metrics::{DropReason, SubtaskMetrics, TaskMetrics};
use crate::output::Output;
use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tidemark_markers::{Clock, MarkerEmitter};

/// How often an idle task wakes to run operator timers, emit markers and watch for a stop
/// under [`IdleStrategy::Spin`].
const IDLE_TICK: Duration = Duration::from_millis(2);

/// How a task waits when it has nothing to do: the job's [`IdleStrategy`] and buffer timeout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiting {
    pub strategy: IdleStrategy,
    pub buffer_timeout: Duration,
    /// Some operator of the task's chain has processing-time timers
    /// ([`crate::Operator::uses_time`]); set by [`Task::new`].
    pub timers: bool,
}

impl Waiting {
    /// How long a source task with nothing to give sleeps at `now`: until the source expects a
    /// record (`until`) or the next marker or checkpoint is due (`due`, the earliest of them),
    /// and at most a tick. Under [`IdleStrategy::Park`] a source that gives a time sleeps at
    /// least the buffer timeout, so that the records falling due meanwhile leave in one batch
    /// rather than one wake-up each (a record waits no longer than the buffer timeout, as in a
    /// partly filled batch).
    fn source_wait(&self, now: i64, until: Option<i64>, due: Option<i64>) -> Duration {
        let after = |t: i64| Duration::from_nanos(t.saturating_sub(now).max(0) as u64);
        let (tick, until) = match self.strategy {
            IdleStrategy::Spin => (IDLE_TICK, until.map(after)),
            IdleStrategy::Park => (PARK_TICK, until.map(|u| after(u).max(self.buffer_timeout))),
        };
        let wait = until.map_or(tick, |u| u.min(tick));
        due.map_or(wait, |d| wait.min(after(d)))
    }

    /// How long a channel task with an empty input blocks on it before it looks at its
    /// operators' timers (and, under [`IdleStrategy::Spin`], at the abort flag). Under
    /// [`IdleStrategy::Park`] with no timers, a second ([`PARK_QUIET`]): a batch, an end of
    /// input or a hard stop wakes it anyway.
    fn channel_wait(&self) -> Duration {
        match self.strategy {
            IdleStrategy::Spin => IDLE_TICK.min(ABORT_POLL),
            IdleStrategy::Park if self.timers => PARK_TICK,
            IdleStrategy::Park => PARK_QUIET,
        }
    }
}

/// Where a task's input comes from.
pub(crate) enum Head {
    Source {
        source: Box<dyn Source>,
        emitter: MarkerEmitter,
        metrics: Arc<SubtaskMetrics>,
        vertex: usize,
        timestamp_check: Option<TimestampCheck>,
        watermarks: Option<WatermarkGenerator>,
    },
    Channel(ChannelReader),
}

/// How a task ended.
pub(crate) enum TaskEnd {
    Done,
    /// User code failed in this vertex.
    Failed {
        vertex: usize,
        message: String,
    },
    Aborted,
}

/// What a task holds, shared with the job handle: a hard stop that gives up waiting for a task
/// stuck in user code (a long sleep) still counts the batch that task was working on.
pub(crate) struct Holding {
    /// Records taken (from the input queue, or from a source poll) and not yet pushed through
    /// the chain; stored twice per batch by the task.
    pub held: CachePadded<AtomicU64>,
    /// Who counted what the task left at a hard stop: [`NOT_COUNTED`], [`COUNTING_BY_TASK`]
    /// then [`COUNTED_BY_TASK`], or [`COUNTED_BY_HANDLE`]; whoever moves it from `NOT_COUNTED`
    /// counts, so nothing is counted twice.
    pub counted: AtomicU8,
    /// The head vertex subtask's metrics, where the handle counts the held records.
    pub head: Arc<SubtaskMetrics>,
}

/// [`Holding::counted`]: nobody yet.
pub(crate) const NOT_COUNTED: u8 = 0;
/// [`Holding::counted`]: the task counted exactly what it left as it ended.
pub(crate) const COUNTED_BY_TASK: u8 = 1;
/// [`Holding::counted`]: the task is counting what it left (a few stores); then
/// [`COUNTED_BY_TASK`].
pub(crate) const COUNTING_BY_TASK: u8 = 3;
/// [`Holding::counted`]: the job handle gave up on the task and counted its held batch.
pub(crate) const COUNTED_BY_HANDLE: u8 = 2;

/// One task subtask: a head, a chain, and its time accounting.
pub(crate) struct Task {
    pub head: Head,
    pub chain: Chain,
    pub flags: Arc<JobFlags>,
    wakes: Wakes,
    pub clock: Arc<dyn Clock>,
    pub batch_size: usize,
    waiting: Waiting,
    times: TaskTimes,
    /// The source vertex, or the head vertex of the chain.
    pub head_vertex: usize,
    /// What this task holds, for a hard stop.
    pub holding: Arc<Holding>,
}

impl Task {
    pub(crate) fn new(
        head: Head,
        chain: Chain,
        flags: Arc<JobFlags>,
        clock: Arc<dyn Clock>,
        metrics: Arc<TaskMetrics>,
        batch_size: usize,
        waiting: Waiting,
    ) -> Self {
        let head_vertex = match &head {
            Head::Source { vertex, .. } => *vertex,
            Head::Channel(_) => chain.nodes.first().map(|n| n.vertex).unwrap_or(0),
        };
        let head_metrics = match &head {
            Head::Source { metrics, .. } => metrics.clone(),
            Head::Channel(reader) => reader.gauge.clone(),
        };
        let mut chain = chain;
        let waiting = Waiting {
            timers: chain.uses_time(),
            ..waiting
        };
        if let Head::Source { metrics, .. } = &head {
            chain.source_metrics = Some(metrics.clone());
        }
        let holding = Arc::new(Holding {
            held: CachePadded::new(AtomicU64::new(0)),
            counted: AtomicU8::new(NOT_COUNTED),
            head: head_metrics,
        });
        Task {
            head,
            chain,
            wakes: flags.wakes(),
            flags,
            clock,
            batch_size,
            waiting,
            times: TaskTimes {
                metrics,
                started: Instant::now(),
                idle: Duration::ZERO,
                backpressured: Duration::ZERO,
            },
            head_vertex,
            holding,
        }
    }

    /// Whether this is a source task whose source never waits inside its poll
    /// ([`Source::polls_without_waiting`]).
    pub(crate) fn polls_without_waiting(&self) -> bool {
        matches!(&self.head, Head::Source { source, .. } if source.polls_without_waiting())
    }

    /// Runs the task to its end, alone in its thread.
    pub(crate) fn run(&mut self) -> TaskEnd {
        self.times.started = Instant::now();
        let result = match &self.head {
            Head::Source { .. } => self.run_source(None),
            Head::Channel(_) => self.run_channel(),
        };
        self.conclude(result)
    }

    /// Runs a source task to its end, with the channel task it feeds in the same thread
    /// ([`crate::worker`]): run whenever the source would wait, and after each batch.
    pub(crate) fn run_assisted(&mut self, assist: &mut dyn Assist) -> TaskEnd {
        self.times.started = Instant::now();
        let result = self.run_source(Some(assist));
        self.conclude(result)
    }

    /// What every task does once its loop ended, cleanly or not: publishes its times, settles
    /// its checkpoints and counts what it left undelivered.
    pub(crate) fn conclude(&mut self, result: Result<(), ChainError>) -> TaskEnd {
        let busy = self.times.publish();
        self.chain.settle_busy(busy);
        self.chain.publish_state_size();
        self.chain.publish();
        // Ended cleanly: the state after the end stands in for later checkpoints; otherwise
        // checkpoints this task gave no state for can no longer complete.
        let clean = result.is_ok();
        if let (Some(c), Head::Source { vertex, source, .. }) =
            (&self.chain.checkpoints, &mut self.head)
        {
            let file = match (clean, c.vertex(*vertex)) {
                (true, Some(meta)) => {
                    let position = match source.resumable() {
                        true => source.position(u64::MAX).ok(),
                        false => None,
                    };
                    Some(StateFile {
                        vertex: meta.id.clone(),
                        subtask: self.chain.subtask,
                        parallelism: meta.parallelism,
                        position,
                        finished: true,
                        ..StateFile::default()
                    })
                }
                _ => None,
            };
            // A resumable source whose position could not be taken ends without one.
            let file = file.filter(|f| f.position.is_some() || !source.resumable());
            c.subtask_finished(*vertex, self.chain.subtask, file);
        }
        self.chain.ended(clean);
        // After a hard stop or a failure, count what this task held as left in flight (0 when
        // it ended cleanly).
        let (taken, source) = match &self.head {
            Head::Channel(reader) => (Some(reader.taken), None),
            Head::Source { metrics, .. } => (None, Some(&**metrics)),
        };
        let counted = &self.holding.counted;
        if counted
            .compare_exchange(
                NOT_COUNTED,
                COUNTING_BY_TASK,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            self.chain.count_undelivered(taken, source);
            counted.store(COUNTED_BY_TASK, Ordering::Release);
        }
        match result {
            Ok(()) => TaskEnd::Done,
            Err(ChainError::Aborted) => TaskEnd::Aborted,
            Err(ChainError::User { node, error }) => TaskEnd::Failed {
                vertex: node
                    .map(|n| self.chain.nodes[n].vertex)
                    .unwrap_or(self.head_vertex),
                message: error.to_string(),
            },
        }
    }

    // Inlined into both callers: alone in its thread (`assist` is `None`), the source loop
    // compiles as it did before threads could be shared, without the partner's calls.
    #[inline(always)]
    fn run_source(&mut self, mut assist: Option<&mut dyn Assist>) -> Result<(), ChainError> {
        let Head::Source {
            source,
            emitter,
            metrics,
            timestamp_check,
            watermarks,
            ..
        } = &mut self.head
        else {
            unreachable!("run_source on a channel task")
        };
        let flags = &*self.flags;
        let mut out = Output::with_capacity(self.batch_size);
        let mut records_out = 0u64;
        let mut invalid_timestamps = 0u64;
        let mut dropped_timestamps = 0u64;
        let mut checkpointing = self
            .chain
            .checkpoints
            .clone()
            .and_then(|c| SourceCheckpoints::new(c, Instant::now()))
            .map(|c| SourceCheckpoints {
                vertex: self.head_vertex,
                ..c
            });
        if checkpointing.is_some() {
            source.enable_checkpoints();
        }
        // A source that tracks its splits gets watermarks per split.
        let per_split = watermarks.is_some() && source.split_watermarks().is_some();
        // The reader of a Kafka exchange hands on markers made elsewhere, and makes none.
        let relays_markers = source.relays_markers();
        // An operator chained behind whose keyed state moves while the job runs (behind a
        // Kafka exchange): its store is asked for moves after every poll.
        let keeps_keyed_state = self.chain.has_store();
        loop {
            let mut cx = SendContext {
                abort: &flags.abort,
                backpressured: &mut self.times.backpressured,
                assist: reborrow(&mut assist),
                credit_waits: true,
            };
            if flags.abort.load(Ordering::Relaxed) {
                return Err(ChainError::Aborted);
            }
            let now = self.clock.now_nanos();
            if !relays_markers {
                if let Some(marker) = emitter.poll(now) {
                    metrics.set_markers_emitted(emitter.emitted());
                    self.chain.on_marker(marker)?;
                }
            }
            if flags.stop.load(Ordering::Relaxed) {
                break;
            }
            let (started, idle, backpressured) =
                (self.times.started, self.times.idle, *cx.backpressured);
            self.chain
                .set_batch_time(now, || busy_nanos(started, idle, backpressured));
            self.chain.on_time(now, &mut cx)?;
            let ctx = PollContext {
                now_nanos: now,
                max_records: self.batch_size,
            };
            if let (true, Some(check)) = (per_split, timestamp_check.as_ref()) {
                if let Some(splits) = source.split_watermarks() {
                    splits.check_timestamps(check, now);
                }
            }
            self.chain.current_vertex = self.head_vertex;
            let started = self.chain.sampler.start();
            let status = source
                .poll(&ctx, &mut out)
                .map_err(|error| ChainError::User { node: None, error })?;
            if let Some(check) = timestamp_check {
                let invalid = check
                    .apply(out.records_mut(), now)
                    .map_err(|error| ChainError::User { node: None, error })?;
                invalid_timestamps += invalid;
                if check.on_invalid == InvalidTimestampPolicy::Drop {
                    dropped_timestamps += invalid;
                }
            }
            if let Some(w) = watermarks.as_mut().filter(|_| !per_split) {
                w.observe(out.records());
                // Idle means caught up: only a poll that found nothing counts towards idleness.
                if out.is_empty() && matches!(status, SourceStatus::Idle { .. }) {
                    w.caught_up(now);
                }
            }
            records_out += out.len() as u64;
            if !out.is_empty() {
                // Kafka KIP-613: latency as the record enters the job, one lock per batch.
                if let Some(stats) = metrics.e2e_latency().as_mut() {
                    match out.uniform_timestamp() {
                        // A batch stamped with one time (the generator's): no scan.
                        Some(t) => stats.record_n(now - t, out.len() as u64),
                        None => crate::chain::record_e2e(stats, now, out.records()),
                    }
                }
            }
            if let Some(t) = started {
                self.chain.source_busy.timed(t);
            }
            // Keyed state given to this subtask comes before the records that need it; state
            // taken away, and the event time of key groups behind, go after the records read
            // before ([`crate::state_move`]).
            let mut after_records = Vec::new();
            if keeps_keyed_state {
                for (node, m) in self.chain.take_store_moves() {
                    match m.before_records() {
                        true => self.chain.apply_state_move(node, m, &mut cx)?,
                        false => after_records.push((node, m)),
                    }
                }
            }
            // Published before the push, so a push that fails or is aborted still leaves the
            // count of what this source emitted right.
            metrics.set_records_out(records_out);
            let errors = source.input_errors();
            metrics.set_malformed_records(errors.malformed);
            metrics.set_records_dropped(DropReason::Malformed, errors.malformed);
            metrics.set_invalid_timestamp_records(errors.invalid_timestamps + invalid_timestamps);
            metrics.set_records_dropped(DropReason::InvalidTimestamp, dropped_timestamps);
            metrics.set_records_dropped(DropReason::Tombstone, errors.tombstones);
            self.holding.held.store(out.len() as u64, Ordering::Relaxed);
            if out.has_markers() {
                // Relayed markers, each in order behind the records emitted before it.
                let markers = out.take_markers();
                let records = out.records_in_place();
                let mut start = 0usize;
                for (pos, marker) in markers {
                    if !relays_markers {
                        continue;
                    }
                    let pos = pos.clamp(start, records.len());
                    self.chain.push(&mut records[start..pos], &mut cx)?;
                    start = pos;
                    self.chain.on_marker(marker)?;
                }
                self.chain.push(&mut records[start..], &mut cx)?;
            } else {
                self.chain.push(out.records_in_place(), &mut cx)?;
            }
            self.holding.held.store(0, Ordering::Relaxed);
            out.clear();
            for (node, m) in after_records {
                self.chain.apply_state_move(node, m, &mut cx)?;
            }
            if let Some(w) = watermarks.as_mut() {
                let action = match source.split_watermarks() {
                    Some(splits) if per_split => w.poll_splits(splits, now),
                    _ => w.poll(now),
                };
                if per_split && w.looked() {
                    source.watermarks_looked();
                }
                if per_split {
                    // The split holding the watermark back, named (`<topic>/<partition>`).
                    if let Some(holder) = source
                        .split_watermarks()
                        .and_then(|splits| splits.holder_changed())
                    {
                        metrics.set_watermark_holder(holder);
                    }
                }
                match action {
                    WatermarkAction::Emit(wm) => {
                        metrics.set_watermark(wm);
                        self.chain.on_watermark(wm, &mut cx)?;
                    }
                    WatermarkAction::GoIdle => self.chain.on_idle()?,
                    // Idle claims are leases: renewed at every look.
                    WatermarkAction::None if w.looked() => self.chain.on_inputs_unchanged()?,
                    WatermarkAction::None => {}
                }
            }
            let lag = source.lag(now);
            metrics.set_lag_records(lag.records);
            metrics.set_lag_bytes(lag.bytes);
            if let Some(c) = checkpointing.as_mut() {
                let max_timestamp = watermarks.as_ref().map(|w| w.max_timestamp());
                c.tick(
                    source.as_mut(),
                    max_timestamp,
                    &mut self.chain,
                    Instant::now(),
                    &mut cx,
                )?;
            }
            match status {
                SourceStatus::Ready => {
                    self.chain.flush_expired(&mut cx)?;
                }
                SourceStatus::Finished => break,
                SourceStatus::Idle { until } => {
                    self.chain.flush_all(&mut cx)?;
                    // One timer for the task: the earliest of the next marker and the next
                    // checkpoint.
                    let marker_due = emitter.next_due().filter(|_| !relays_markers);
                    let checkpoint_due = checkpointing.as_ref().map(|c| {
                        let left = c.next_due.saturating_duration_since(Instant::now());
                        now.saturating_add(left.as_nanos().min(i64::MAX as u128) as i64)
                    });
                    let due = match (marker_due, checkpoint_due) {
                        (Some(m), Some(c)) => Some(m.min(c)),
                        (m, c) => m.or(c),
                    };
                    let wait = self.waiting.source_wait(now, until, due);
                    if !wait.is_zero() {
                        let t = Instant::now();
                        match (cx.assist.as_deref_mut(), self.waiting.strategy) {
                            // The channel task sharing the thread runs on what comes meanwhile.
                            (Some(a), _) => {
                                a.wait(wait, Some(&self.wakes.stopped))?;
                            }
                            // Waits of microseconds: a channel's receive would spin through
                            // them before it parks.
                            (None, IdleStrategy::Spin) => std::thread::sleep(wait),
                            (None, IdleStrategy::Park) => self.wakes.wait_for_stop(wait),
                        }
                        self.times.idle += t.elapsed();
                    }
                }
            }
            self.chain.publish();
            if let Some(a) = cx.assist.as_deref_mut() {
                // What this batch sent to the channel task sharing the thread, and what the
                // other subtasks sent it meanwhile: its time is not this task's.
                self.times.idle += a.serve()?.spent;
            }
            self.times.publish();
        }
        if let Some(c) = checkpointing.as_mut() {
            // A last checkpoint covering everything read: wait until every sink has it, then
            // commit, so a stopped job leaves nothing uncommitted behind.
            let mut cx = SendContext {
                abort: &flags.abort,
                backpressured: &mut self.times.backpressured,
                assist: reborrow(&mut assist),
                credit_waits: true,
            };
            let max_timestamp = watermarks.as_ref().map(|w| w.max_timestamp());
            c.finish(
                source.as_mut(),
                max_timestamp,
                &mut self.chain,
                &flags.abort,
                &mut cx,
            )?;
        }
        self.end_of_input(assist)
    }

    fn run_channel(&mut self) -> Result<(), ChainError> {
        let mut state = self.channel_loop();
        self.run_channel_from(&mut state)
    }

    /// A channel task's loop state before its first turn; exports which input holds the
    /// watermark back from the start (before any watermark, an input that sent none is named).
    pub(crate) fn channel_loop(&mut self) -> ChannelLoop {
        let Head::Channel(reader) = &mut self.head else {
            unreachable!("channel_loop on a source task")
        };
        let mut input = ChannelInput {
            watermarks: InputWatermarks::new(reader.returns.len()),
            barriers: BarrierAlignment::new(reader.returns.len()),
            held: VecDeque::new(),
            released: false,
            vertex: self.head_vertex,
            slots: reader.returns.len(),
            holder_may_change: false,
            input_watermarks: Vec::new(),
        };
        reader.publish_holder(&mut input.watermarks);
        ChannelLoop {
            input,
            streaming: false,
            renewed_at: i64::MIN,
        }
    }

    /// Names the input holding a channel task's watermark back before the task's thread runs,
    /// so that a scrape right after the start already sees it (the loop names it again).
    pub(crate) fn publish_first_holder(&mut self) {
        if let Head::Channel(_) = &self.head {
            drop(self.channel_loop());
        }
    }

    /// Whether a channel task still has an input that has not ended.
    pub(crate) fn inputs_open(&self) -> bool {
        matches!(&self.head, Head::Channel(reader) if reader.open > 0)
    }

    /// A channel task's input queue.
    pub(crate) fn input_queue(&self) -> &Receiver<Message> {
        match &self.head {
            Head::Channel(reader) => &reader.rx,
            Head::Source { .. } => unreachable!("input_queue of a source task"),
        }
    }

    /// Runs a channel task's loop from `state` until every input ended, then its end of input.
    pub(crate) fn run_channel_from(&mut self, state: &mut ChannelLoop) -> Result<(), ChainError> {
        while self.inputs_open() {
            self.channel_turn(state, None, true)?;
        }
        self.end_of_input(None)
    }

    /// One turn of a channel task's loop: takes a message (`given`, or from the queue, where
    /// `block` waits for one), processes it, and runs the operators' timers. Returns whether it
    /// took a message. Without `block`, an empty queue sends what is pending downstream and
    /// returns at once.
    pub(crate) fn channel_turn(
        &mut self,
        state: &mut ChannelLoop,
        given: Option<Message>,
        block: bool,
    ) -> Result<bool, ChainError> {
        let Head::Channel(reader) = &mut self.head else {
            unreachable!("channel_turn on a source task")
        };
        let flags = &*self.flags;
        let ChannelLoop {
            input,
            streaming,
            renewed_at,
        } = state;
        let mut cx = SendContext {
            abort: &flags.abort,
            backpressured: &mut self.times.backpressured,
            assist: None,
            // Run alone (`block`), not inside another task's wait.
            credit_waits: block,
        };
        if flags.abort.load(Ordering::Relaxed) {
            return Err(ChainError::Aborted);
        }
        let received = match given {
            Some(m) => Ok(m),
            None => reader.rx.try_recv(),
        };
        let message = match received {
            Ok(m) => Some(m),
            Err(TryRecvError::Disconnected) => return Err(ChainError::Aborted),
            Err(TryRecvError::Empty) => {
                // The input ran dry: send what is pending now rather than wait for the
                // buffer timeout, so latency stays low at low load.
                self.chain.flush_all(&mut cx)?;
                self.chain.publish();
                if !block {
                    None
                } else {
                    let t = Instant::now();
                    let m = match self.waiting.strategy {
                        IdleStrategy::Spin => {
                            match reader.rx.recv_timeout(self.waiting.channel_wait()) {
                                Ok(m) => Some(m),
                                Err(RecvTimeoutError::Timeout) => None,
                                Err(RecvTimeoutError::Disconnected) => {
                                    return Err(ChainError::Aborted)
                                }
                            }
                        }
                        // While full batches come, one that comes while the task yields its
                        // core a few times is taken without sleeping. Otherwise (and at once
                        // after a partly filled batch: a yield under load can hand the core
                        // away for milliseconds, which a marker would wait) blocks until a
                        // batch comes, a hard stop, or the operators' next look at the time.
                        IdleStrategy::Park => {
                            let soon = match *streaming {
                                true => reader.recv_yielding(),
                                false => Err(TryRecvError::Empty),
                            };
                            match soon {
                                Ok(m) => Some(m),
                                Err(TryRecvError::Disconnected) => return Err(ChainError::Aborted),
                                Err(TryRecvError::Empty) => crossbeam_channel::select! {
                                    recv(reader.rx) -> m => match m {
                                        Ok(m) => Some(m),
                                        Err(_) => return Err(ChainError::Aborted),
                                    },
                                    recv(self.wakes.aborted) -> _ => {
                                        return Err(ChainError::Aborted)
                                    }
                                    default(self.waiting.channel_wait()) => None,
                                },
                            }
                        }
                    };
                    self.times.idle += t.elapsed();
                    m
                }
            }
        };
        let took = message.is_some();
        let now = self.clock.now_nanos();
        let (started, idle, backpressured) =
            (self.times.started, self.times.idle, *cx.backpressured);
        self.chain
            .set_batch_time(now, || busy_nanos(started, idle, backpressured));
        let held = match message {
            Some(Message::Data { slot, batch }) => {
                reader.note_received(batch.records.len());
                *streaming = batch.records.len() >= self.batch_size;
                Some(Held::Data {
                    slot,
                    batch,
                    record: 0,
                    event: 0,
                })
            }
            Some(Message::End { slot }) => Some(Held::End { slot }),
            None => None,
        };
        if let Some(held) = held {
            input.take(held, &mut self.chain, reader, &self.holding, &mut cx)?;
            self.chain.publish();
        }
        self.chain.on_time(now, &mut cx)?;
        // Idle claims are leases (`Sink::on_inputs_unchanged`): while every input stays idle,
        // the chain's sinks renew what they said.
        if input.watermarks.all_idle() && now.saturating_sub(*renewed_at) >= RENEW_IDLE_NANOS {
            *renewed_at = now;
            self.chain.on_inputs_unchanged()?;
        }
        self.chain.flush_expired(&mut cx)?;
        self.times.publish();
        Ok(took)
    }

    /// Starts a channel task's clock for a thread it shares ([`crate::worker`]); the time the
    /// thread spends elsewhere is then added with [`Task::add_idle`].
    pub(crate) fn start_clock(&mut self, at: Instant) {
        self.times.started = at;
    }

    /// Counts `idle` as time this task waited for its turn or its input.
    pub(crate) fn add_idle(&mut self, idle: Duration) {
        self.times.idle += idle;
    }

    fn end_of_input(&mut self, mut assist: Option<&mut dyn Assist>) -> Result<(), ChainError> {
        let mut cx = SendContext {
            abort: &self.flags.abort,
            backpressured: &mut self.times.backpressured,
            assist: reborrow(&mut assist),
            credit_waits: true,
        };
        let now = self.clock.now_nanos();
        let (started, idle, backpressured) =
            (self.times.started, self.times.idle, *cx.backpressured);
        self.chain
            .set_batch_time(now, || busy_nanos(started, idle, backpressured));
        self.chain.finish(now, &mut cx)?;
        self.chain.close(&mut cx)?;
        self.chain.publish();
        Ok(())
    }
}

/// How often a channel task whose inputs are all idle renews the idle claims of its sinks
/// (at its next turn after this long; a task without timers turns at least every
/// [`PARK_QUIET`]).
const RENEW_IDLE_NANOS: i64 = 200_000_000;

/// What a channel task's loop keeps from one turn to the next.
pub(crate) struct ChannelLoop {
    input: ChannelInput,
    /// The last batch taken was full: its writer is sending as fast as it can, so the next
    /// one is likely a few microseconds away.
    streaming: bool,
    /// When the sinks last renewed their idle claims (ns).
    renewed_at: i64,
}

/// What a channel task took from its queue, whole or the rest of it after a barrier.
enum Held {
    /// A batch of `slot`, from its record `record` and event `event` on.
    Data {
        slot: u32,
        batch: Batch,
        record: usize,
        event: usize,
    },
    /// `slot` ended.
    End { slot: u32 },
}

impl Held {
    fn slot(&self) -> usize {
        match self {
            Held::Data { slot, .. } | Held::End { slot } => *slot as usize,
        }
    }
}

/// The input side of a channel task: watermarks and barriers per input slot, and what inputs
/// blocked by barrier alignment sent meanwhile, in arrival order.
struct ChannelInput {
    watermarks: InputWatermarks,
    barriers: BarrierAlignment,
    /// Messages (or their rest) of blocked inputs, in the order they came.
    held: VecDeque<Held>,
    /// A barrier was forwarded or an input ended: held messages may go on.
    released: bool,
    vertex: usize,
    /// Input slots.
    slots: usize,
    /// A watermark or idleness was taken since the holder was last published.
    holder_may_change: bool,
    /// The watermark last told for each input of a head vertex with several inputs.
    input_watermarks: Vec<i64>,
}

impl ChannelInput {
    /// Takes one message: holds it if its input is blocked, processes it otherwise, then
    /// processes whatever a forwarded barrier released.
    fn take(
        &mut self,
        held: Held,
        chain: &mut Chain,
        reader: &mut ChannelReader,
        holding: &Holding,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        if self.barriers.blocked(held.slot()) {
            self.held.push_back(held);
            return Ok(());
        }
        self.process(held, chain, reader, holding, cx)?;
        while std::mem::take(&mut self.released) && !self.held.is_empty() {
            // An input with a message still held in this pass keeps its later ones held too,
            // so that each input's messages go through in their order.
            let mut deferred = vec![false; self.slots];
            for held in std::mem::take(&mut self.held) {
                let slot = held.slot();
                if deferred[slot] || self.barriers.blocked(slot) {
                    deferred[slot] = true;
                    self.held.push_back(held);
                } else {
                    // May block its input again (its rest goes to the back of `held`, ahead
                    // of that input's later messages) or release others.
                    self.process(held, chain, reader, holding, cx)?;
                }
            }
        }
        Ok(())
    }

    fn process(
        &mut self,
        held: Held,
        chain: &mut Chain,
        reader: &mut ChannelReader,
        holding: &Holding,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let (slot, mut batch, record, event) = match held {
            Held::End { slot } => {
                reader.open -= 1;
                if let Some(n) = self.barriers.on_end(slot as usize) {
                    self.forward(n, chain, cx)?;
                }
                self.released = true;
                // (An ended input never makes the watermark jump to the end of time: the
                // windows fire at the end of input, which a suspended job skips.)
                let combined = self.watermarks.on_end(slot as usize);
                self.tell_input(slot, reader, chain, cx)?;
                if let Some(wm) = combined {
                    chain.on_watermark(wm, cx)?;
                }
                reader.publish_holder(&mut self.watermarks);
                return Ok(());
            }
            Held::Data {
                slot,
                batch,
                record,
                event,
            } => (slot, batch, record, event),
        };
        holding
            .held
            .store((batch.records.len() - record) as u64, Ordering::Relaxed);
        let input = reader.input_of(slot);
        let mut start = record;
        // Watermarks or idleness came: the input holding the watermark back may have changed.
        if batch.events[event..]
            .iter()
            .any(|(_, e)| matches!(e, Event::Watermark(_) | Event::Idle))
        {
            self.holder_may_change = true;
        }
        for j in event..batch.events.len() {
            let (pos, event) = batch.events[j];
            let pos = pos as usize;
            chain.push_from(input, &mut batch.records[start..pos], cx)?;
            start = pos;
            match event {
                Event::Marker(marker) => chain.on_marker(marker)?,
                Event::Watermark(wm) => {
                    let combined = self.watermarks.on_watermark(slot as usize, wm);
                    self.tell_input(slot, reader, chain, cx)?;
                    if let Some(wm) = combined {
                        chain.on_watermark(wm, cx)?;
                    }
                }
                Event::Barrier(n) => {
                    if let Some(n) = self.barriers.on_barrier(slot as usize, n) {
                        self.forward(n, chain, cx)?;
                    }
                    if self.barriers.blocked(slot as usize) {
                        // Aligning: the rest of this batch waits for the other inputs.
                        holding.held.store(0, Ordering::Relaxed);
                        self.held.push_back(Held::Data {
                            slot,
                            batch,
                            record: start,
                            event: j + 1,
                        });
                        return Ok(());
                    }
                }
                Event::Idle => {
                    let combined = self.watermarks.on_idle(slot as usize);
                    self.tell_input(slot, reader, chain, cx)?;
                    if let Some(wm) = combined {
                        chain.on_watermark(wm, cx)?;
                    }
                    if self.watermarks.all_idle() {
                        chain.on_idle()?;
                    }
                }
            }
        }
        chain.push_from(input, &mut batch.records[start..], cx)?;
        reader.recycle(slot, batch);
        holding.held.store(0, Ordering::Relaxed);
        if std::mem::take(&mut self.holder_may_change) {
            reader.publish_holder(&mut self.watermarks);
        }
        Ok(())
    }

    /// Where the head vertex has several inputs: tells it the watermark of the input `slot`
    /// belongs to when that changed ([`Chain::on_input_watermark`]).
    fn tell_input(
        &mut self,
        slot: u32,
        reader: &ChannelReader,
        chain: &mut Chain,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let Some(input) = reader.input_of(slot) else {
            return Ok(());
        };
        let wm = self
            .watermarks
            .of_slots(|s| reader.input_index[s] as usize == input);
        if self.input_watermarks.len() <= input {
            self.input_watermarks.resize(input + 1, i64::MIN);
        }
        if self.input_watermarks[input] == wm {
            return Ok(());
        }
        self.input_watermarks[input] = wm;
        chain.on_input_watermark(input, wm, cx)
    }

    /// Every open input delivered barrier `n`: the chain takes its snapshot and sends it on.
    fn forward(
        &mut self,
        n: u64,
        chain: &mut Chain,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let aligned = self.barriers.take_alignment();
        let Some(c) = chain.checkpoints.clone() else {
            self.released = true;
            return chain.on_barrier(n, cx);
        };
        c.aligned(self.vertex, aligned.as_secs_f64());
        self.released = true;
        // Once per checkpoint, not per record: the time the snapshot stops the task.
        let started = Instant::now();
        let taken = chain.on_barrier(n, cx);
        if c.writes_state() {
            c.synced(self.vertex, started.elapsed().as_secs_f64());
        }
        taken
    }
}

/// Where a task's time went: busy, blocked on output (backpressured), or waiting for input.
pub(crate) struct TaskTimes {
    metrics: Arc<TaskMetrics>,
    started: Instant,
    idle: Duration,
    backpressured: Duration,
}

impl TaskTimes {
    /// Publishes the times; busy time is what is neither idle nor backpressured. Returns the
    /// busy time (ns).
    fn publish(&self) -> u64 {
        let busy = busy_nanos(self.started, self.idle, self.backpressured);
        self.metrics.store(
            busy,
            self.backpressured.as_nanos() as u64,
            self.idle.as_nanos() as u64,
        );
        busy
    }
}

/// A task's busy time now (ns): the time since `started` that was neither idle nor
/// backpressured. Reads the clock.
fn busy_nanos(started: Instant, idle: Duration, backpressured: Duration) -> u64 {
    started
        .elapsed()
        .saturating_sub(idle + backpressured)
        .as_nanos() as u64
}

/// A source subtask's side of checkpointing: its barrier timer and what it has committed.
struct SourceCheckpoints {
    coordinator: Arc<Checkpoints>,
    /// The source vertex.
    vertex: usize,
    interval: Duration,
    next_due: Instant,
    /// The last barrier this subtask sent.
    sent: u64,
    /// The last checkpoint whose positions it committed.
    committed: u64,
}

impl SourceCheckpoints {
    fn new(coordinator: Arc<Checkpoints>, now: Instant) -> Option<Self> {
        let interval = coordinator.interval()?;
        // A restored job continues the ids after the restored checkpoint.
        let last = coordinator.last_id();
        Some(SourceCheckpoints {
            coordinator,
            vertex: 0,
            interval,
            next_due: now + interval,
            sent: last,
            committed: last,
        })
    }

    /// Sends the next barrier when it is due, and commits what completed meanwhile.
    fn tick(
        &mut self,
        source: &mut dyn Source,
        max_timestamp: Option<i64>,
        chain: &mut Chain,
        now: Instant,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        if now >= self.next_due {
            if self.coordinator.may_start(self.sent, now) {
                self.barrier(source, max_timestamp, chain, cx)?;
                self.next_due = now + self.interval;
            } else {
                // Due but one is still in flight (or within min_pause): skipped, and started
                // as soon as it may (the timer stays due).
                self.coordinator.skipped(now);
            }
        }
        if let Some(cause) = self.coordinator.too_many_failures() {
            return Err(ChainError::User {
                node: None,
                error: cause.into(),
            });
        }
        self.commit(source)
    }

    fn barrier(
        &mut self,
        source: &mut dyn Source,
        max_timestamp: Option<i64>,
        chain: &mut Chain,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let n = self.sent + 1;
        source
            .snapshot(n)
            .map_err(|error| ChainError::User { node: None, error })?;
        if self.coordinator.writes_state() {
            let position = match source.resumable() {
                true => Some(
                    source
                        .position(n)
                        .map_err(|error| ChainError::User { node: None, error })?,
                ),
                false => None,
            };
            if let Some(meta) = self.coordinator.vertex(self.vertex) {
                let file = StateFile {
                    vertex: meta.id.clone(),
                    subtask: chain.subtask,
                    parallelism: meta.parallelism,
                    position,
                    max_timestamp,
                    ..StateFile::default()
                };
                self.coordinator.submit(n, self.vertex, file);
            }
        }
        self.sent = n;
        self.coordinator.triggered(n);
        chain.on_barrier(n, cx)
    }

    fn commit(&mut self, source: &mut dyn Source) -> Result<(), ChainError> {
        let done = self.coordinator.completed().min(self.sent);
        if done > self.committed {
            self.committed = done;
            source
                .checkpoint_complete(done)
                .map_err(|error| ChainError::User { node: None, error })?;
        }
        Ok(())
    }

    /// The last barrier, then a wait until every sink acknowledged it, then its commit.
    fn finish(
        &mut self,
        source: &mut dyn Source,
        max_timestamp: Option<i64>,
        chain: &mut Chain,
        abort: &AtomicBool,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        self.barrier(source, max_timestamp, chain, cx)?;
        while !self.coordinator.settled(self.sent) {
            if abort.load(Ordering::Relaxed) {
                return Err(ChainError::Aborted);
            }
            source
                .serve_while_finishing()
                .map_err(|error| ChainError::User { node: None, error })?;
            match cx.assist.as_deref_mut() {
                // The sink to acknowledge may be the channel task sharing this thread.
                Some(a) => {
                    a.wait(IDLE_TICK, None)?;
                }
                None => std::thread::sleep(IDLE_TICK),
            }
        }
        self.commit(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn waiting(strategy: IdleStrategy) -> Waiting {
        Waiting {
            strategy,
            buffer_timeout: Duration::from_millis(1),
            timers: true,
        }
    }

    #[test]
    fn park_gathers_the_records_due_within_the_buffer_timeout_into_one_wake_up() {
        let park = waiting(IdleStrategy::Park);
        let now = 1_000 * MS;
        // The next record is due in 10 µs: sleep the buffer timeout, not 10 µs.
        assert_eq!(
            park.source_wait(now, Some(now + 10_000), None),
            Duration::from_millis(1)
        );
        // Due later than the buffer timeout: sleep until it is due.
        assert_eq!(
            park.source_wait(now, Some(now + 3 * MS), None),
            Duration::from_millis(3)
        );
        // A marker due sooner cuts the sleep short.
        assert_eq!(
            park.source_wait(now, Some(now + 3 * MS), Some(now + MS / 2)),
            Duration::from_micros(500)
        );
        // A marker already due: no sleep.
        assert_eq!(
            park.source_wait(now, Some(now + 3 * MS), Some(i64::MIN)),
            Duration::ZERO
        );
        // No time given, or one far off: at most a tick (for the operators' timers).
        assert_eq!(park.source_wait(now, None, None), PARK_TICK);
        assert_eq!(
            park.source_wait(now, Some(now + 3_600_000 * MS), None),
            PARK_TICK
        );
        // A buffer timeout of 0 asks for no gathering: wake when the record is due.
        let eager = Waiting {
            buffer_timeout: Duration::ZERO,
            ..park
        };
        assert_eq!(
            eager.source_wait(now, Some(now + 10_000), None),
            Duration::from_micros(10)
        );
    }

    #[test]
    fn spin_wakes_for_every_record_and_every_tick() {
        let spin = waiting(IdleStrategy::Spin);
        let now = 1_000 * MS;
        assert_eq!(
            spin.source_wait(now, Some(now + 10_000), None),
            Duration::from_micros(10)
        );
        assert_eq!(spin.source_wait(now, None, None), IDLE_TICK);
        assert_eq!(
            spin.source_wait(now, Some(now - MS), Some(now + MS)),
            Duration::ZERO
        );
        assert_eq!(spin.channel_wait(), IDLE_TICK.min(ABORT_POLL));
        assert_eq!(waiting(IdleStrategy::Park).channel_wait(), PARK_TICK);
    }

    /// A channel task of `chain`, waiting under `strategy`.
    fn channel_task(chain: Chain, strategy: IdleStrategy) -> Task {
        let (_tx, rx) = crate::channel::queue(1);
        let gauge = Arc::new(crate::metrics::SubtaskMetrics::new(
            tidemark_markers::Granularity::Single,
            std::num::NonZeroUsize::new(1).unwrap(),
            tidemark_markers::Buckets::marker_latency(),
        ));
        let reader = ChannelReader {
            rx,
            returns: Vec::new(),
            open: 0,
            gauge,
            taken: 0,
            inputs: Vec::new(),
            input_index: Vec::new(),
            several_inputs: false,
            names_holder: false,
        };
        Task::new(
            Head::Channel(reader),
            chain,
            Arc::new(JobFlags::new()),
            Arc::new(tidemark_markers::SystemClock),
            Arc::new(TaskMetrics::default()),
            16,
            // What the job gives every task: Task::new looks at the operators.
            waiting(strategy),
        )
    }

    #[test]
    fn a_task_looks_at_the_clock_while_idle_only_if_an_operator_uses_time() {
        use crate::chain::tests::{chain_of, Plain, Timed};
        let quiet = channel_task(
            chain_of(vec![Box::new(Timed(false)), Box::new(Timed(false))]),
            IdleStrategy::Park,
        );
        assert_eq!(quiet.waiting.channel_wait(), PARK_QUIET);
        let timed = channel_task(
            chain_of(vec![Box::new(Timed(false)), Box::new(Timed(true))]),
            IdleStrategy::Park,
        );
        assert_eq!(timed.waiting.channel_wait(), PARK_TICK);
        // An operator that does not say is taken to use time.
        let plain = channel_task(chain_of(vec![Box::new(Plain)]), IdleStrategy::Park);
        assert_eq!(plain.waiting.channel_wait(), PARK_TICK);
        // Spin looks as often whatever the operators.
        let spin = channel_task(chain_of(vec![Box::new(Timed(false))]), IdleStrategy::Spin);
        assert_eq!(spin.waiting.channel_wait(), IDLE_TICK.min(ABORT_POLL));
    }

    #[test]
    fn a_channel_task_without_timers_blocks_on_its_input_for_a_second_under_park() {
        let quiet = |strategy| Waiting {
            timers: false,
            ..waiting(strategy)
        };
        assert_eq!(quiet(IdleStrategy::Park).channel_wait(), PARK_QUIET);
        assert!(PARK_QUIET > PARK_TICK);
        // Spin looks at its input as often either way.
        assert_eq!(
            quiet(IdleStrategy::Spin).channel_wait(),
            waiting(IdleStrategy::Spin).channel_wait()
        );
    }

    #[test]
    fn a_stop_or_an_abort_wakes_a_waiting_source_and_an_abort_a_channel_task() {
        let flags = JobFlags::new();
        let (first, second) = (flags.wakes(), flags.wakes());
        for w in [&first, &second] {
            assert_eq!(w.stopped.try_recv(), Err(TryRecvError::Empty));
        }
        flags.request_stop();
        assert!(flags.stop.load(Ordering::Relaxed));
        for w in [&first, &second] {
            assert_eq!(
                w.stopped.try_recv(),
                Err(TryRecvError::Disconnected),
                "every source's wait returns at once"
            );
            assert_eq!(w.aborted.try_recv(), Err(TryRecvError::Empty));
        }
        // A task made after the stop is stopped too, not yet aborted.
        let late = flags.wakes();
        assert_eq!(late.stopped.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(late.aborted.try_recv(), Err(TryRecvError::Empty));
        flags.request_abort();
        assert!(flags.abort.load(Ordering::Relaxed));
        for w in [&first, &second, &late, &flags.wakes()] {
            assert_eq!(w.aborted.try_recv(), Err(TryRecvError::Disconnected));
        }
        // Asking twice is harmless.
        flags.request_abort();
        flags.request_stop();
    }
}
