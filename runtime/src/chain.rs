//! A chain: the vertices one task runs, passing batches from one to the next by a function call,
//! ending in a sink, a terminal operator, or a [`Router`] to the next tasks.

use crate::batch::Event;
use crate::channel::{Aborted, SendContext};
use crate::checkpoint::Checkpoints;
use crate::checkpoint_store::StateFile;
use crate::component::{BoxError, Operator, OutputClosed, Sink};
use crate::job_flags::JobFlags;
use crate::key_group::KeyGroupRange;
use crate::keyed_state::KeyedSnapshot;
use crate::keyed_store::KeyedStore;
use crate::metrics::{DropReason, SubtaskMetrics};
use crate::output::Output;
use crate::partitioner::Router;
use crate::record::Record;
use crate::state_move::StateMove;
use crate::vertex_busy::{BusySampler, VertexBusy};
use std::sync::Arc;
use std::time::Instant;
use tidemark_markers::{Clock, LatencyMarker, LatencyStats};

/// Why a chain stopped.
pub(crate) enum ChainError {
    /// User code failed in the vertex at this chain position.
    User {
        node: Option<usize>,
        error: BoxError,
    },
    /// The job is being aborted.
    Aborted,
}

impl From<Aborted> for ChainError {
    fn from(_: Aborted) -> Self {
        ChainError::Aborted
    }
}

pub(crate) enum NodeKind {
    Operator(Box<dyn Operator>),
    Sink(Box<dyn Sink>),
}

/// One vertex subtask inside a chain.
pub(crate) struct ChainNode {
    pub(crate) vertex: usize,
    pub(crate) kind: NodeKind,
    out: Output,
    metrics: Arc<SubtaskMetrics>,
    records_in: u64,
    records_out: u64,
    /// Records end-to-end latency here (terminal vertices, or all with the option).
    e2e: bool,
    /// A sink whose output was closed (a broken pipe): it writes nothing more.
    output_closed: bool,
    /// Records a sink got after its output was closed (or in the batch that found it closed).
    dropped_output_closed: u64,
    /// A sink's index among the job's sink subtasks, for checkpoint acknowledgements.
    pub(crate) sink_index: Option<usize>,
    /// A sink that passes markers on (a Kafka exchange writer): it records none.
    relays_markers: bool,
    /// Restored from a checkpoint taken after this vertex subtask had ended: what it held
    /// was emitted then, so the end of input emits nothing.
    pub(crate) ended_before: bool,
    /// The time this vertex's own code took, estimated by sampling.
    busy: VertexBusy,
    /// Where an operator that keeps keyed state keeps it ([`crate::keyed_store`]).
    pub(crate) store: Option<Box<dyn KeyedStore>>,
}

impl ChainNode {
    pub(crate) fn new(
        vertex: usize,
        kind: NodeKind,
        metrics: Arc<SubtaskMetrics>,
        batch_size: usize,
        e2e: bool,
    ) -> Self {
        let relays_markers = matches!(&kind, NodeKind::Sink(s) if s.relays_markers());
        ChainNode {
            relays_markers,
            vertex,
            kind,
            out: Output::with_capacity(batch_size),
            metrics,
            records_in: 0,
            records_out: 0,
            e2e,
            output_closed: false,
            dropped_output_closed: 0,
            sink_index: None,
            ended_before: false,
            busy: VertexBusy::default(),
            store: None,
        }
    }
}

/// The chained vertices of one task subtask and where their output goes.
pub(crate) struct Chain {
    pub(crate) nodes: Vec<ChainNode>,
    pub(crate) router: Option<Router>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The job's flags: a sink whose output closed asks the job to stop.
    flags: Arc<JobFlags>,
    /// Wall clock of the current batch, for end-to-end latency.
    batch_now: i64,
    /// The vertex whose code runs now, to name the culprit of a panic.
    pub(crate) current_vertex: usize,
    /// The job's checkpoint coordinator, when checkpointing is on.
    pub(crate) checkpoints: Option<Arc<Checkpoints>>,
    /// The task's subtask index (every vertex of a chain has it).
    pub(crate) subtask: u32,
    /// Which turns of the task's loop are timed, for per-vertex busy time.
    pub(crate) sampler: BusySampler,
    /// The busy time of the task's source, when it has one (timed by the task), and where it
    /// is published.
    pub(crate) source_busy: VertexBusy,
    pub(crate) source_metrics: Option<Arc<SubtaskMetrics>>,
    /// In a timed turn: what the last [`Chain::process_at`] to return took, for the one that
    /// called it.
    downstream_nanos: u64,
    /// When the operators' state sizes are published next (batch clock, ns).
    next_state_size: i64,
    /// Which input of the head vertex the records being pushed came over, where it has
    /// several ([`Operator::process_input`]).
    head_input: Option<usize>,
}

impl Chain {
    pub(crate) fn new(
        nodes: Vec<ChainNode>,
        router: Option<Router>,
        clock: Arc<dyn Clock>,
        flags: Arc<JobFlags>,
    ) -> Self {
        Chain {
            nodes,
            router,
            clock,
            flags,
            batch_now: 0,
            current_vertex: usize::MAX,
            checkpoints: None,
            subtask: 0,
            sampler: BusySampler::new(),
            source_busy: VertexBusy::default(),
            source_metrics: None,
            downstream_nanos: 0,
            next_state_size: i64::MIN,
            head_input: None,
        }
    }

    /// Sets the wall clock used for end-to-end latency of the records that follow: a new turn
    /// of the task's loop, timed or not (see [`BusySampler`]). `task_busy` gives the task's busy
    /// time so far (ns; a clock read): called only around timed turns.
    pub(crate) fn set_batch_time(&mut self, now_nanos: i64, task_busy: impl FnOnce() -> u64) {
        self.batch_now = now_nanos;
        let vertices = std::iter::once(&mut self.source_busy)
            .chain(self.nodes.iter_mut().map(|n| &mut n.busy));
        self.sampler.begin_turn(now_nanos, task_busy, vertices);
    }

    /// Pushes records into the head of the chain (or straight to the router if the chain has
    /// no vertex, as for a lone source). Operators that work in place
    /// ([`Operator::process_batch_in_place`]) change `records` where they lie.
    pub(crate) fn push(
        &mut self,
        records: &mut [Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.nodes.is_empty() {
            return self.emit(cx, |r, cx| r.write(records, cx));
        }
        self.process_at(0, records, cx)
    }

    /// [`Chain::push`] of records that came over input `input` of a head vertex with several
    /// inputs (`None`: one input): such a vertex's operator is told which
    /// ([`Operator::process_input`]).
    pub(crate) fn push_from(
        &mut self,
        input: Option<usize>,
        records: &mut [Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        self.head_input = input;
        let pushed = self.push(records, cx);
        self.head_input = None;
        pushed
    }

    /// Node `i` processes `input` and passes on what it emits. In a timed turn its busy time is
    /// what the call took less what the nodes after it took and less any time blocked on a full
    /// output: its own code, and the routing of its output when it is the last node.
    fn process_at(
        &mut self,
        i: usize,
        input: &mut [Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let Some(started) = self.sampler.start() else {
            return self.process_node(i, input, cx);
        };
        let backpressured = *cx.backpressured;
        self.downstream_nanos = 0;
        let result = self.process_node(i, input, cx);
        let took = net_nanos(started, backpressured, *cx.backpressured);
        let own = took.saturating_sub(self.downstream_nanos);
        self.nodes[i].busy.add_in_turn(own);
        // For the node before this one, which took this one's time too.
        self.downstream_nanos = took;
        result
    }

    /// The work of [`Chain::process_at`].
    fn process_node(
        &mut self,
        i: usize,
        input: &mut [Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let now = self.batch_now;
        let node = &mut self.nodes[i];
        self.current_vertex = node.vertex;
        node.records_in += input.len() as u64;
        let mut in_place = false;
        let head_input = match i {
            0 => self.head_input,
            _ => None,
        };
        let result = match &mut node.kind {
            NodeKind::Operator(op) if head_input.is_some() => {
                let from = head_input.expect("some");
                match op.process_input(from, input, &mut node.out) {
                    Ok(true) => Ok(()),
                    Ok(false) => match op.process_batch_in_place(input) {
                        Ok(true) => {
                            in_place = true;
                            Ok(())
                        }
                        Ok(false) => op.process_batch_owned(input, &mut node.out),
                        Err(error) => Err(error),
                    },
                    Err(error) => Err(error),
                }
            }
            NodeKind::Operator(op) => match op.process_batch_in_place(input) {
                Ok(true) => {
                    in_place = true;
                    Ok(())
                }
                Ok(false) => op.process_batch_owned(input, &mut node.out),
                Err(error) => Err(error),
            },
            NodeKind::Sink(_) if node.output_closed => {
                node.dropped_output_closed += input.len() as u64;
                Ok(())
            }
            NodeKind::Sink(sink) => match sink.write_batch(input) {
                Err(error) if OutputClosed::is_output_closed(error.as_ref()) => {
                    // As ripgrep on a broken pipe: stop the job cleanly, write nothing more.
                    node.output_closed = true;
                    node.dropped_output_closed += input.len() as u64;
                    self.flags.request_stop();
                    Ok(())
                }
                other => other,
            },
        };
        result.map_err(|error| ChainError::User {
            node: Some(i),
            error,
        })?;
        if node.e2e {
            // One lock per batch; the clock was read once for the batch.
            if let Some(stats) = node.metrics.e2e_latency().as_mut() {
                record_e2e(stats, now, input);
            }
        }
        if in_place {
            // The operator changed the records where they lie: they go on from here.
            node.records_out += input.len() as u64;
            return self.pass_on(i, input, cx);
        }
        node.records_out += node.out.len() as u64;
        self.forward_from(i, cx)
    }

    /// Moves what node `i` emitted to node `i + 1`, or to the router after the last node.
    fn forward_from(&mut self, i: usize, cx: &mut SendContext<'_>) -> Result<(), ChainError> {
        if self.nodes[i].out.is_empty() {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.nodes[i].out);
        let result = self.pass_on(i, out.records_in_place(), cx);
        out.clear();
        self.nodes[i].out = out;
        result
    }

    /// Gives `records`, the output of node `i`, to node `i + 1`, or to the router after the
    /// last node.
    fn pass_on(
        &mut self,
        i: usize,
        records: &mut [Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        if records.is_empty() {
            Ok(())
        } else if i + 1 < self.nodes.len() {
            self.process_at(i + 1, records, cx)
        } else if let Some(r) = &mut self.router {
            r.write(records, cx).map_err(ChainError::from)
        } else {
            Ok(())
        }
    }

    /// A marker arrives at the head: every chained vertex records it (rule 11), then it goes down
    /// one random channel, or stops at a sink or terminal vertex (rule 12).
    ///
    /// A sink that relays markers (a Kafka exchange writer) records nothing and passes the
    /// marker on instead.
    pub(crate) fn on_marker(&mut self, marker: LatencyMarker) -> Result<(), ChainError> {
        if !self.nodes.is_empty() {
            let now = self.clock.now_nanos();
            for (i, node) in self.nodes.iter_mut().enumerate() {
                if !node.relays_markers {
                    node.metrics.latency().record(&marker, now);
                    continue;
                }
                if let NodeKind::Sink(sink) = &mut node.kind {
                    if !node.output_closed {
                        self.current_vertex = node.vertex;
                        sink.on_marker(marker).map_err(|error| ChainError::User {
                            node: Some(i),
                            error,
                        })?;
                    }
                }
            }
        }
        if let Some(r) = &mut self.router {
            r.route_marker(Event::Marker(marker));
        }
        Ok(())
    }

    /// Calls `f` on every chained vertex in order, forwarding what each emits downstream; its
    /// time counts as the vertex's busy time: in timed turns, or every time for rare calls
    /// ([`Timing`]).
    fn each_node(
        &mut self,
        cx: &mut SendContext<'_>,
        timing: Timing,
        mut f: impl FnMut(&mut ChainNode) -> Result<(), BoxError>,
    ) -> Result<(), ChainError> {
        for i in 0..self.nodes.len() {
            self.current_vertex = self.nodes[i].vertex;
            let apart = matches!(timing, Timing::Always) && !self.sampler.timing();
            let started = if apart {
                Some(Instant::now())
            } else {
                self.sampler.start()
            };
            let result = f(&mut self.nodes[i]);
            let node = &mut self.nodes[i];
            match started {
                Some(t) if apart => self.sampler.count_apart(&mut node.busy, t),
                Some(t) => node.busy.timed(t),
                None => {}
            }
            result.map_err(|error| ChainError::User {
                node: Some(i),
                error,
            })?;
            node.records_out += node.out.len() as u64;
            self.forward_from(i, cx)?;
            if matches!(timing, Timing::Always) {
                self.emit_more(i, cx)?;
            }
        }
        Ok(())
    }

    /// After a rare call that may emit much at once (a watermark, the end of input): while the
    /// operator of node `i` has more to emit ([`Operator::emit_more`]), passes each part
    /// downstream before it asks for the next, so that no more than about
    /// [`Output::FULL`](crate::Output::FULL) records are held at a time.
    fn emit_more(&mut self, i: usize, cx: &mut SendContext<'_>) -> Result<(), ChainError> {
        loop {
            let node = &mut self.nodes[i];
            let NodeKind::Operator(op) = &mut node.kind else {
                return Ok(());
            };
            // Timed as the call before it ([`Chain::each_node`] with `Timing::Always`).
            let apart = !self.sampler.timing();
            let started = if apart {
                Some(Instant::now())
            } else {
                self.sampler.start()
            };
            let more = op.emit_more(&mut node.out);
            match started {
                Some(t) if apart => self.sampler.count_apart(&mut node.busy, t),
                Some(t) => node.busy.timed(t),
                None => {}
            }
            let more = more.map_err(|error| ChainError::User {
                node: Some(i),
                error,
            })?;
            node.records_out += node.out.len() as u64;
            self.forward_from(i, cx)?;
            if !more {
                return Ok(());
            }
        }
    }

    /// The watermark advanced to `wm`: every chained operator sees it in order, then it goes
    /// down every channel.
    pub(crate) fn on_watermark(
        &mut self,
        wm: i64,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        self.each_node(cx, Timing::Always, |node| {
            node.metrics.set_watermark(wm);
            match &mut node.kind {
                NodeKind::Operator(op) => op.on_watermark(wm, &mut node.out),
                NodeKind::Sink(_) if node.output_closed => Ok(()),
                NodeKind::Sink(sink) => sink.on_watermark(wm),
            }
        })?;
        if let Some(r) = &mut self.router {
            r.broadcast_event(Event::Watermark(wm));
        }
        Ok(())
    }

    /// Input `input` of the head vertex (one with several inputs) has the watermark `wm` now
    /// (`i64::MAX`: all its channels idle or ended): its operator is told
    /// ([`Operator::on_input_watermark`]) before the combined watermark that follows.
    pub(crate) fn on_input_watermark(
        &mut self,
        input: usize,
        wm: i64,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let Some(node) = self.nodes.first_mut() else {
            return Ok(());
        };
        let NodeKind::Operator(op) = &mut node.kind else {
            return Ok(());
        };
        self.current_vertex = node.vertex;
        op.on_input_watermark(input, wm, &mut node.out)
            .map_err(|error| ChainError::User {
                node: Some(0),
                error,
            })?;
        node.records_out += node.out.len() as u64;
        self.forward_from(0, cx)
    }

    /// Every input of this task is idle: tell the chained sinks (an exchange writer passes it
    /// on) and the tasks downstream.
    pub(crate) fn on_idle(&mut self) -> Result<(), ChainError> {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let NodeKind::Sink(sink) = &mut node.kind {
                if !node.output_closed {
                    self.current_vertex = node.vertex;
                    sink.on_idle().map_err(|error| ChainError::User {
                        node: Some(i),
                        error,
                    })?;
                }
            }
        }
        if let Some(r) = &mut self.router {
            r.broadcast_event(Event::Idle);
        }
        Ok(())
    }

    /// The source looked at its inputs and nothing changed ([`Sink::on_inputs_unchanged`]):
    /// every sink of the chain is told, no channel is.
    pub(crate) fn on_inputs_unchanged(&mut self) -> Result<(), ChainError> {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let NodeKind::Sink(sink) = &mut node.kind {
                if !node.output_closed {
                    self.current_vertex = node.vertex;
                    sink.on_inputs_unchanged()
                        .map_err(|error| ChainError::User {
                            node: Some(i),
                            error,
                        })?;
                }
            }
        }
        Ok(())
    }

    /// Whether an operator of the chain has processing-time timers ([`Operator::uses_time`]).
    pub(crate) fn uses_time(&self) -> bool {
        self.nodes.iter().any(|n| match &n.kind {
            NodeKind::Operator(op) => op.uses_time(),
            NodeKind::Sink(_) => false,
        })
    }

    /// Gives every operator the time, for processing-time timers.
    pub(crate) fn on_time(
        &mut self,
        now_nanos: i64,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        self.each_node(cx, Timing::PerTurn, |node| match &mut node.kind {
            NodeKind::Operator(op) => op.on_time(now_nanos, &mut node.out),
            NodeKind::Sink(_) => Ok(()),
        })
    }

    /// End of input: every vertex in order emits what it still holds, sinks flush.
    pub(crate) fn finish(
        &mut self,
        now_nanos: i64,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        // A stop that keeps state (a last checkpoint holds it): nothing is fired.
        let suspended = self
            .flags
            .suspend
            .load(std::sync::atomic::Ordering::Relaxed);
        self.each_node(cx, Timing::Always, |node| match &mut node.kind {
            // Suspended, or restored from a checkpoint taken after it had ended already.
            NodeKind::Operator(_) if suspended || node.ended_before => Ok(()),
            NodeKind::Operator(op) => op.finish(now_nanos, &mut node.out),
            NodeKind::Sink(_) if node.output_closed => Ok(()),
            NodeKind::Sink(sink) => match sink.finish() {
                Err(error) if OutputClosed::is_output_closed(error.as_ref()) => {
                    node.output_closed = true;
                    Ok(())
                }
                other => other,
            },
        })?;
        // Finished sinks hold nothing back: later checkpoints need not wait for them.
        if let Some(c) = &self.checkpoints {
            for node in &self.nodes {
                if let Some(i) = node.sink_index {
                    c.sink_finished(i);
                }
            }
        }
        Ok(())
    }

    /// Checkpoint barrier `n` reached this chain: every record before it has gone through
    /// the chained vertices. Sinks flush and acknowledge `n`; the barrier goes down every
    /// channel.
    pub(crate) fn on_barrier(
        &mut self,
        n: u64,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        let writes_state = self.checkpoints.as_ref().is_some_and(|c| c.writes_state());
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            self.current_vertex = node.vertex;
            let user = |error| ChainError::User {
                node: Some(i),
                error,
            };
            match &mut node.kind {
                NodeKind::Sink(sink) => {
                    if !node.output_closed {
                        let started = Instant::now();
                        let flushed = sink.flush();
                        if self.sampler.timing() {
                            node.busy.timed(started);
                        } else {
                            self.sampler.count_apart(&mut node.busy, started);
                        }
                        flushed.map_err(user)?;
                    }
                    if writes_state {
                        let position = match sink.resumable() {
                            true => Some(sink.position(n).map_err(user)?),
                            false => None,
                        };
                        submit(
                            &self.checkpoints,
                            self.subtask,
                            node.vertex,
                            n,
                            None,
                            None,
                            position,
                        );
                    }
                    if let (Some(c), Some(s)) = (&self.checkpoints, node.sink_index) {
                        c.acknowledge(s, n);
                    }
                }
                NodeKind::Operator(op) if writes_state || node.store.is_some() => {
                    let m = self
                        .checkpoints
                        .as_ref()
                        .and_then(|c| c.vertex(node.vertex));
                    let max_parallelism = match &node.store {
                        Some(store) => store.key_groups(),
                        None => m.map_or(1, |m| m.max_parallelism),
                    };
                    let checkpoints = &self.checkpoints;
                    let taken = (|| {
                        let keyed = match (op.has_keyed_state(), &node.store) {
                            (true, Some(_)) => {
                                let mut state = match checkpoints.as_ref().filter(|_| writes_state)
                                {
                                    Some(c) => c.keyed_snapshot(max_parallelism),
                                    None => KeyedSnapshot::new(max_parallelism),
                                };
                                op.snapshot_keyed(n, &mut state)?;
                                Some(state)
                            }
                            _ => None,
                        };
                        let local = match writes_state {
                            true => op.snapshot_local(n)?,
                            false => None,
                        };
                        Ok::<_, BoxError>((keyed, local))
                    })();
                    match taken {
                        Ok((keyed, local)) => {
                            // The keyed state goes to its store (the directory's hands it to
                            // the coordinator, to go into the file given right below).
                            if let (Some(state), Some(store)) = (keyed, node.store.as_mut()) {
                                store.save(n, state).map_err(user)?;
                            }
                            if writes_state {
                                submit(
                                    checkpoints,
                                    self.subtask,
                                    node.vertex,
                                    n,
                                    None,
                                    local,
                                    None,
                                );
                            }
                        }
                        // The checkpoint is declined, not the job (until too many fail in a
                        // row: `checkpoint.tolerable_failures`).
                        Err(error) => {
                            if let Some(c) = checkpoints {
                                let id = c.vertex(node.vertex).map_or("?", |m| m.id.as_str());
                                let cause = format!("subtask {} of {id}: {error}", self.subtask);
                                tracing::warn!("checkpoint {n} declined: {cause}");
                                c.decline(n, cause);
                            }
                        }
                    }
                }
                NodeKind::Operator(_) => {}
            }
        }
        if let Some(r) = &mut self.router {
            r.broadcast_event(Event::Barrier(n));
            // The barrier waits for nothing: send it with what is pending.
            r.flush_all(cx)?;
        }
        Ok(())
    }

    /// Whether an operator of the chain keeps its keyed state in a store, which the task then
    /// asks for moves after every poll (a virtual call, no allocation, when there are none):
    /// asked once, before the first poll.
    pub(crate) fn has_store(&self) -> bool {
        self.nodes.iter().any(|node| node.store.is_some())
    }

    /// The moves of every store of the chain since they were last asked, in order, each with
    /// the chain node whose operator they are for.
    pub(crate) fn take_store_moves(&mut self) -> Vec<(usize, StateMove)> {
        let mut moves = Vec::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let Some(store) = node.store.as_mut() {
                moves.extend(store.take_moves().into_iter().map(|m| (i, m)));
            }
        }
        moves
    }

    /// Applies a move of keyed state to the operator of chain node `i`, whose store made it
    /// ([`crate::state_move`]); what it emits (windows of key groups whose own event time
    /// advanced) goes down the chain.
    pub(crate) fn apply_state_move(
        &mut self,
        i: usize,
        m: StateMove,
        cx: &mut SendContext<'_>,
    ) -> Result<(), ChainError> {
        self.current_vertex = self.nodes[i].vertex;
        let node = &mut self.nodes[i];
        let NodeKind::Operator(op) = &mut node.kind else {
            return Ok(());
        };
        apply_to_operator(op.as_mut(), m, &mut node.out).map_err(|error| ChainError::User {
            node: Some(i),
            error,
        })?;
        node.records_out += node.out.len() as u64;
        self.forward_from(i, cx)
    }

    /// The chain's vertices have ended: cleanly (`clean`, after [`Chain::finish`]), each gives
    /// its state after the end, which stands in for it in later checkpoints; otherwise the
    /// checkpoints they gave no state for cannot complete.
    pub(crate) fn ended(&mut self, clean: bool) {
        let Some(c) = self.checkpoints.clone() else {
            return;
        };
        if !c.writes_state() {
            return;
        }
        for i in 0..self.nodes.len() {
            let vertex = self.nodes[i].vertex;
            let file = if clean { self.final_state(&c, i) } else { None };
            c.subtask_finished(vertex, self.subtask, file);
        }
    }

    /// The state of chain node `i` after the end of input, marked finished (`None` if it
    /// cannot be taken).
    fn final_state(&mut self, c: &Checkpoints, i: usize) -> Option<StateFile> {
        let node = &mut self.nodes[i];
        let meta = c.vertex(node.vertex)?;
        let mut file = StateFile {
            vertex: meta.id.clone(),
            subtask: self.subtask,
            parallelism: meta.parallelism,
            finished: true,
            ..StateFile::default()
        };
        if meta.keyed {
            let r = KeyGroupRange::of_subtask(
                self.subtask as usize,
                meta.parallelism as usize,
                meta.max_parallelism,
            );
            file.key_groups = Some((r.start, r.end));
            file.keyed = Some(KeyedSnapshot::new(meta.max_parallelism));
        }
        match &mut node.kind {
            NodeKind::Operator(op) => {
                if op.has_keyed_state() {
                    let mut state = KeyedSnapshot::new(meta.max_parallelism);
                    op.snapshot_keyed(u64::MAX, &mut state).ok()?;
                    file.keyed = Some(state);
                }
                file.local = op.snapshot_local(u64::MAX).ok()?;
            }
            NodeKind::Sink(sink) => {
                if sink.resumable() {
                    file.position = Some(sink.position(u64::MAX).ok()?);
                }
            }
        }
        Some(file)
    }

    /// Publishes every operator's state size now.
    pub(crate) fn publish_state_size(&self) {
        for node in &self.nodes {
            if let NodeKind::Operator(op) = &node.kind {
                if let Some(counts) = op.join_counts() {
                    node.metrics.set_join_counts(counts);
                }
                if let Some(size) = op.state_size() {
                    node.metrics.set_state_size(size);
                }
            }
        }
    }

    /// At the end of the task, whose busy time is `task_busy` (ns): what is left is shared out
    /// by the last timed turn.
    pub(crate) fn settle_busy(&mut self, task_busy: u64) {
        let vertices = std::iter::once(&mut self.source_busy)
            .chain(self.nodes.iter_mut().map(|n| &mut n.busy));
        self.sampler.finish_turn(task_busy, vertices);
        let vertices = std::iter::once(&mut self.source_busy)
            .chain(self.nodes.iter_mut().map(|n| &mut n.busy));
        self.sampler.share_rest(task_busy, vertices);
    }

    /// Publishes the per-batch counters; one relaxed store per counter per batch. The
    /// operators' state sizes, which may take a scan of the state, about once a second.
    pub(crate) fn publish(&mut self) {
        if self.batch_now >= self.next_state_size {
            self.next_state_size = self.batch_now.saturating_add(STATE_SIZE_INTERVAL_NANOS);
            self.publish_state_size();
        }
        if let Some(m) = &self.source_metrics {
            m.set_busy_nanos(self.source_busy.nanos());
        }
        for node in &mut self.nodes {
            node.metrics.set_records_in(node.records_in);
            node.metrics.set_records_out(node.records_out);
            node.metrics.set_busy_nanos(node.busy.nanos());
            match &node.kind {
                NodeKind::Operator(op) => {
                    let late = op.records_dropped(DropReason::Late);
                    node.metrics.set_late_records_dropped(late);
                    node.metrics.set_records_dropped(DropReason::Late, late);
                    node.metrics.set_records_dropped(
                        DropReason::ExpressionError,
                        op.records_dropped(DropReason::ExpressionError),
                    );
                    for reason in [DropReason::Unmatched, DropReason::Tombstone] {
                        node.metrics
                            .set_records_dropped(reason, op.records_dropped(reason));
                    }
                }
                NodeKind::Sink(_) => node
                    .metrics
                    .set_records_dropped(DropReason::OutputClosed, node.dropped_output_closed),
            }
        }
    }

    /// What a hard stop left in this chain: records its head received but did not process,
    /// and records its router was handed but did not send. Counted as
    /// [`DropReason::InFlight`] at the head and the last vertex.
    pub(crate) fn count_undelivered(
        &self,
        head_vertex_taken: Option<u64>,
        source: Option<&SubtaskMetrics>,
    ) {
        if let (Some(taken), Some(first)) = (head_vertex_taken, self.nodes.first()) {
            let left = taken.saturating_sub(first.records_in);
            if left > 0 {
                first
                    .metrics
                    .add_records_dropped(DropReason::InFlight, left);
            }
        }
        let last = self.nodes.last().map(|n| &*n.metrics).or(source);
        if let (Some(router), Some(last)) = (&self.router, last) {
            let left = router.undelivered();
            if left > 0 {
                last.add_records_dropped(DropReason::InFlight, left);
            }
        }
    }

    /// Sends the batches that have waited for the buffer timeout. Reads the clock only when
    /// there is a router (a chain ending in sinks has nothing to send: a turn of its task's
    /// loop saves a clock read).
    pub(crate) fn flush_expired(&mut self, cx: &mut SendContext<'_>) -> Result<(), ChainError> {
        if self.router.is_none() {
            return Ok(());
        }
        let now = Instant::now();
        self.emit(cx, |r, cx| r.flush_expired(now, cx))
    }

    pub(crate) fn flush_all(&mut self, cx: &mut SendContext<'_>) -> Result<(), ChainError> {
        self.emit(cx, |r, cx| r.flush_all(cx))
    }

    pub(crate) fn close(&mut self, cx: &mut SendContext<'_>) -> Result<(), ChainError> {
        self.emit(cx, |r, cx| r.close(cx))
    }

    /// Sends through the router with `f`; in a timed turn the time it took, less any time
    /// blocked on a full output, counts as the busy time of the vertex whose output it is (the
    /// last node, or the source of a task without one).
    fn emit(
        &mut self,
        cx: &mut SendContext<'_>,
        f: impl FnOnce(&mut Router, &mut SendContext<'_>) -> Result<(), Aborted>,
    ) -> Result<(), ChainError> {
        let Some(r) = &mut self.router else {
            return Ok(());
        };
        let started = self.sampler.start();
        let backpressured = *cx.backpressured;
        let result = f(r, cx);
        if let Some(t) = started {
            let took = net_nanos(t, backpressured, *cx.backpressured);
            let emitter = match self.nodes.last_mut() {
                Some(node) => &mut node.busy,
                None => &mut self.source_busy,
            };
            emitter.add_in_turn(took);
        }
        result.map_err(ChainError::from)
    }
}

/// Nanoseconds since `started`, less the time blocked on a full output meanwhile (the
/// backpressured time went from `before` to `after`).
fn net_nanos(started: Instant, before: std::time::Duration, after: std::time::Duration) -> u64 {
    started
        .elapsed()
        .saturating_sub(after.saturating_sub(before))
        .as_nanos() as u64
}

/// How often the operators' state sizes are published: 1 s of the batch clock.
const STATE_SIZE_INTERVAL_NANOS: i64 = 1_000_000_000;

/// How the calls of [`Chain::each_node`] are timed.
#[derive(Clone, Copy)]
enum Timing {
    /// Every call (rare ones: watermarks, end of input): outside timed turns, counted apart.
    Always,
    /// In timed turns only (once-per-turn calls: timers).
    PerTurn,
}

/// Gives the coordinator the state of `vertex`'s subtask `subtask` for checkpoint `n`.
fn submit(
    checkpoints: &Option<Arc<Checkpoints>>,
    subtask: u32,
    vertex: usize,
    n: u64,
    keyed: Option<KeyedSnapshot>,
    local: Option<Vec<u8>>,
    position: Option<Vec<u8>>,
) {
    let Some(c) = checkpoints else {
        return;
    };
    let Some(meta) = c.vertex(vertex) else {
        return;
    };
    let key_groups = meta.keyed.then(|| {
        let r = KeyGroupRange::of_subtask(
            subtask as usize,
            meta.parallelism as usize,
            meta.max_parallelism,
        );
        (r.start, r.end)
    });
    let file = StateFile {
        vertex: meta.id.clone(),
        subtask,
        parallelism: meta.parallelism,
        key_groups,
        keyed: keyed.or_else(|| meta.keyed.then(|| KeyedSnapshot::new(meta.max_parallelism))),
        local,
        position,
        max_timestamp: None,
        finished: false,
    };
    c.submit(n, vertex, file);
}

/// Applies a move of keyed state to `op`; what it emits goes into `out`.
pub(crate) fn apply_to_operator(
    op: &mut dyn Operator,
    m: StateMove,
    out: &mut Output,
) -> Result<(), BoxError> {
    match m {
        StateMove::Restore {
            state,
            forget_first,
            groups,
            event_time,
        } => {
            let max_parallelism = state.max_parallelism();
            if !forget_first.is_empty() {
                op.forget_key_groups(max_parallelism, &forget_first)?;
            }
            match event_time {
                Some(watermark) => op.restore_keyed_behind(state, &groups, watermark),
                None => op.restore_keyed(state),
            }
        }
        StateMove::Forget {
            max_parallelism,
            groups,
        } => op.forget_key_groups(max_parallelism, &groups),
        StateMove::EventTime {
            max_parallelism,
            groups,
            watermark,
        } => op.key_groups_event_time(max_parallelism, &groups, watermark, out),
    }
}

/// Records the end-to-end latency of `records` read at `now`: one histogram update per run of
/// equal timestamps (a source stamps a whole batch with one time), as
/// [`LatencyStats::record_batch`] does, with the runs found four records at a time by a
/// branch-free comparison.
#[inline]
pub(crate) fn record_e2e(stats: &mut LatencyStats, now: i64, records: &[Record]) {
    let n = records.len();
    let mut i = 0;
    while i < n {
        let t = records[i].timestamp;
        let mut j = i + 1;
        while j + 4 <= n
            && ((records[j].timestamp ^ t)
                | (records[j + 1].timestamp ^ t)
                | (records[j + 2].timestamp ^ t)
                | (records[j + 3].timestamp ^ t))
                == 0
        {
            j += 4;
        }
        while j < n && records[j].timestamp == t {
            j += 1;
        }
        stats.record_n(now - t, (j - i) as u64);
        i = j;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::num::NonZeroUsize;

    /// An operator that says whether it uses time.
    pub(crate) struct Timed(pub bool);

    impl Operator for Timed {
        fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
            out.emit(record);
            Ok(())
        }

        fn uses_time(&self) -> bool {
            self.0
        }
    }

    /// An operator that leaves `uses_time` as the trait has it.
    pub(crate) struct Plain;

    impl Operator for Plain {
        fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
            out.emit(record);
            Ok(())
        }
    }

    /// A chain of `operators` with nothing after them.
    pub(crate) fn chain_of(operators: Vec<Box<dyn Operator>>) -> Chain {
        let metrics = Arc::new(SubtaskMetrics::new(
            tidemark_markers::Granularity::Single,
            NonZeroUsize::new(1).unwrap(),
            tidemark_markers::Buckets::marker_latency(),
        ));
        let nodes = operators
            .into_iter()
            .enumerate()
            .map(|(v, op)| ChainNode::new(v, NodeKind::Operator(op), metrics.clone(), 16, false))
            .collect();
        Chain::new(
            nodes,
            None,
            Arc::new(tidemark_markers::SystemClock),
            Arc::new(JobFlags::new()),
        )
    }

    #[test]
    fn a_chain_uses_time_when_any_operator_does_and_an_operator_does_unless_it_says_not() {
        assert!(!chain_of(vec![]).uses_time());
        assert!(!chain_of(vec![Box::new(Timed(false)), Box::new(Timed(false))]).uses_time());
        assert!(chain_of(vec![Box::new(Timed(false)), Box::new(Timed(true))]).uses_time());
        // An operator written before `uses_time` existed keeps its timers looked at.
        assert!(chain_of(vec![Box::new(Timed(false)), Box::new(Plain)]).uses_time());
    }

    #[test]
    fn record_e2e_records_what_record_batch_does() {
        // Runs of every length around the four-record steps, single records, a batch of one
        // timestamp, negative latencies, an empty slice.
        let mut timestamps = Vec::new();
        let mut x = 7u64;
        for run in [1usize, 2, 3, 4, 5, 7, 8, 9, 1, 1, 16, 3, 0, 13, 4, 1] {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = (x >> 40) as i64 - 4_000_000;
            timestamps.extend(std::iter::repeat_n(t, run));
        }
        let uniform = vec![42i64; 1000];
        for ts in [timestamps, uniform, Vec::new(), vec![5]] {
            let records: Vec<Record> = ts.iter().map(|&t| Record::new(1, 1.0, t)).collect();
            let h = NonZeroUsize::new(16).unwrap();
            let (mut fast, mut reference) = (LatencyStats::new(h), LatencyStats::new(h));
            let now = 3_000_000;
            record_e2e(&mut fast, now, &records);
            reference.record_batch(now, ts.iter().copied());
            assert_eq!(fast.count(), ts.len() as u64);
            assert_eq!(fast.count(), reference.count());
            assert_eq!(fast.negative_count(), reference.negative_count());
            assert_eq!(fast.sum_seconds(), reference.sum_seconds());
            if !ts.is_empty() {
                // (Empty statistics are NaN, which equals nothing.)
                assert_eq!(fast.window_stats(), reference.window_stats());
            }
            assert_eq!(
                fast.window().samples().collect::<Vec<_>>(),
                reference.window().samples().collect::<Vec<_>>()
            );
            assert_eq!(fast.histogram().count(), reference.histogram().count());
        }
    }
}
