//! The traits users implement: [`Source`], [`Operator`] and [`Sink`].
//!
//! Each subtask gets its own instance, made by a factory closure given the [`SubtaskContext`].
//! Latency markers and watermarks are handled by the runtime; user code never sees a marker.

use crate::event_time::SplitWatermarks;
use crate::metrics::DropReason;
pub use crate::metrics::StateSize;
use crate::output::Output;
use crate::record::Record;
use tidemark_markers::LatencyMarker;

/// An error from user code; it fails the job, naming the vertex and subtask.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a subtask knows about itself when it is made.
#[derive(Clone, Debug)]
pub struct SubtaskContext {
    /// The job's name.
    pub job_name: String,
    /// The vertex id from the job graph.
    pub vertex_id: String,
    /// This subtask's index, `0..parallelism`.
    pub subtask: usize,
    /// The vertex's parallelism.
    pub parallelism: usize,
    /// A seed for this subtask's random choices: the job's seed mixed with vertex and subtask,
    /// so runs with the same `--seed` repeat.
    pub seed: u64,
}

/// What a source is told each time it is polled.
#[derive(Clone, Copy, Debug)]
pub struct PollContext {
    /// Wall clock, nanoseconds since the Unix epoch, read once for this poll.
    pub now_nanos: i64,
    /// The most records the runtime wants from this poll (the batch size).
    pub max_records: usize,
}

/// What a source reports after a poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceStatus {
    /// Records may have been emitted; poll again soon.
    Ready,
    /// Nothing to give now. Poll again no later than `until` (wall clock ns), if given.
    Idle {
        /// When the source expects to have records again.
        until: Option<i64>,
    },
    /// The source has no more records, ever.
    Finished,
}

/// How far a source is behind its input (Kafka KIP-1226). `-1` means unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceLag {
    /// Records not yet read, or -1.
    pub records: i64,
    /// Bytes not yet read, or -1.
    pub bytes: i64,
}

impl SourceLag {
    /// Lag that is not known.
    pub const UNKNOWN: SourceLag = SourceLag {
        records: -1,
        bytes: -1,
    };
}

/// A parallel source of records.
pub trait Source: Send {
    /// Emits up to `ctx.max_records` records into `out` and says whether there are more.
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError>;

    /// How far behind its input this source is; called once per batch by the runtime.
    fn lag(&self, _now_nanos: i64) -> SourceLag {
        SourceLag::UNKNOWN
    }

    /// Checkpointing is on for this job: input positions are to be committed only when
    /// [`Source::checkpoint_complete`] says so. Called once, before the first poll.
    fn enable_checkpoints(&mut self) {}

    /// Barrier `checkpoint` is about to leave this subtask: remember the input positions of
    /// everything emitted so far.
    fn snapshot(&mut self, _checkpoint: u64) -> Result<(), BoxError> {
        Ok(())
    }

    /// Every sink acknowledged `checkpoint` (and every earlier one): the positions it covers
    /// may be committed.
    fn checkpoint_complete(&mut self, _checkpoint: u64) -> Result<(), BoxError> {
        Ok(())
    }

    /// Called every few milliseconds while this subtask waits for its last checkpoint to be
    /// acknowledged by every sink, after it emitted its last record: a source with a
    /// connection to keep alive serves it here (a Kafka consumer takes part in its group's
    /// rebalances, so that it is still a member when it commits that checkpoint). Nothing it
    /// reads now is emitted. The default does nothing.
    fn serve_while_finishing(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// Counters a source keeps about its input (malformed lines skipped, invalid timestamps).
    fn input_errors(&self) -> SourceErrorCounts {
        SourceErrorCounts::default()
    }

    /// A source that reads several splits at once (Kafka partitions) returns its per-split
    /// tracker here, the same one for the whole run, with every record it emits noted against
    /// its split: when the vertex has watermarks, the runtime then makes them per split (the
    /// minimum over the splits that are not idle; no split at all is idle) instead of over the
    /// whole subtask. Asked once before the first poll and once per batch after it. The
    /// default, `None`, treats the subtask as one input.
    fn split_watermarks(&mut self) -> Option<&mut SplitWatermarks> {
        None
    }

    /// The runtime looked at the splits ([`Source::split_watermarks`]), once per watermark
    /// interval, and is about to send a watermark, say the subtask is idle, or renew what it
    /// said ([`Sink::on_inputs_unchanged`](crate::Sink::on_inputs_unchanged)), after every
    /// record emitted so far went down the chain: what each split's status says now is true of everything chained sinks have
    /// been given (the Kafka source hands its partitions' statuses to a chained exchange
    /// writer here). The default does nothing.
    fn watermarks_looked(&mut self) {}

    /// True for a source whose [`Source::poll`] never waits for input: it returns what it has
    /// (or [`SourceStatus::Idle`]) at once. Such a source may share its thread with the channel
    /// task it feeds (docs/architecture.md, "Threads"), which runs whenever the source waits.
    /// The default is `false`: a source that may block in `poll` (on a pipe, a socket, a
    /// broker) keeps a thread of its own, so nothing else waits while it blocks.
    fn polls_without_waiting(&self) -> bool {
        false
    }

    /// True for a source that relays markers made elsewhere instead of making its own (the
    /// reader of a Kafka exchange): the runtime emits no marker for it, and it hands markers in
    /// order with its records through [`Output::emit_marker`].
    fn relays_markers(&self) -> bool {
        false
    }

    /// Whether this source can continue where a checkpoint left it ([`Source::position`] and
    /// [`Source::resume`]). A restore of a job with a source that cannot (`stdin`) is refused
    /// before anything starts. The default is `false`.
    fn resumable(&self) -> bool {
        false
    }

    /// Where this subtask would continue from, after everything it emitted so far: called as
    /// barrier `checkpoint` leaves the subtask (right after [`Source::snapshot`]), when the job
    /// writes checkpoints to a directory. The bytes are the source's own (serialised with the
    /// checkpoint format's serde codec, [`crate::state_codec`]), kept in the checkpoint and
    /// handed back to [`Source::resume`] of the same vertex and subtask index on a restore.
    /// Only called when [`Source::resumable`] is true.
    fn position(&mut self, _checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        Err("this source cannot record a position to resume from".into())
    }

    /// Continue from a position [`Source::position`] returned: called once, before the first
    /// poll, when the job is restored from a checkpoint. The next record emitted is the first
    /// one not emitted before that position was taken (and a source that draws random numbers
    /// draws the same ones an uninterrupted run would).
    fn resume(&mut self, _position: &[u8]) -> Result<(), BoxError> {
        Err("this source cannot resume from a checkpoint".into())
    }
}

/// Counts of input a source could not take as it was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceErrorCounts {
    /// Lines skipped as malformed (`on_error: skip`).
    pub malformed: u64,
    /// Records whose timestamp was out of the allowed range (dropped or clamped).
    pub invalid_timestamps: u64,
    /// Messages without a value dropped (a Kafka source without `tombstones: keep`).
    pub tombstones: u64,
}

/// Runs `operator`'s [`Operator::process`] on each record of `records`, taken out with
/// [`Record::take`]: the body of [`Operator::process_batch_owned`] for an operator that changes,
/// re-keys or passes on its records.
///
/// ```
/// use tidemark_runtime::{process_taken, BoxError, Map, Operator, Output, Record};
///
/// /// Marks every event as seen.
/// struct Seen;
///
/// impl Operator for Seen {
///     fn process(&mut self, mut record: Record, out: &mut Output) -> Result<(), BoxError> {
///         record.set("seen", true);
///         out.emit(record);
///         Ok(())
///     }
///
///     fn process_batch_owned(
///         &mut self,
///         records: &mut [Record],
///         out: &mut Output,
///     ) -> Result<(), BoxError> {
///         process_taken(self, records, out)
///     }
/// }
///
/// let mut batch = vec![Record::with_event("a", Map::new(), 0)];
/// let mut out = Output::default();
/// Seen.process_batch_owned(&mut batch, &mut out).unwrap();
/// assert_eq!(out.records()[0].event_json(), r#"{"seen":true}"#);
/// ```
pub fn process_taken<O: Operator + ?Sized>(
    operator: &mut O,
    records: &mut [Record],
    out: &mut Output,
) -> Result<(), BoxError> {
    for record in records {
        operator.process(record.take(), out)?;
    }
    Ok(())
}

/// A record-at-a-time transformation with optional state and timers.
pub trait Operator: Send {
    /// Processes one record, emitting any number of records.
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError>;

    /// Processes a batch. The default calls [`Operator::process`] per record; it is
    /// monomorphised per operator, so the per-record call inlines.
    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        for record in records {
            self.process(record.clone(), out)?;
        }
        Ok(())
    }

    /// Processes a batch that the runtime will not read again (it calls this when
    /// [`Operator::process_batch_in_place`] declined). The default calls
    /// [`Operator::process_batch`]. An operator that changes, re-keys or passes on the records
    /// it gets overrides it with [`process_taken`], which takes each one out with
    /// [`Record::take`] and calls [`Operator::process`]: a general record taken is the only
    /// holder of its event, so changing it copies nothing (no copy on write) and passing it on
    /// costs no reference count. Whatever an override leaves in `records` is dropped by the
    /// runtime.
    fn process_batch_owned(
        &mut self,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<(), BoxError> {
        self.process_batch(records, out)
    }

    /// Processes a batch in place, for an operator that turns each record into exactly one
    /// record (a `map`, a running aggregate): changes the records where they lie and returns
    /// `Ok(true)`; the runtime then passes the same records on, which saves writing them into
    /// an [`Output`] and reading them back. The default returns `Ok(false)` and the runtime
    /// calls [`Operator::process_batch`] instead; an operator returning `Ok(false)` must not
    /// have changed `records`. (On an error the job fails; the records may be half changed.)
    fn process_batch_in_place(&mut self, _records: &mut [Record]) -> Result<bool, BoxError> {
        Ok(false)
    }

    /// Processes `records` that came over input `input` of this vertex (its input edges in
    /// the order they were connected: a join's left is 0, its right 1), returning `true`;
    /// `false` (the default) processes them as records of any input, through
    /// [`Operator::process_batch_in_place`] or [`Operator::process_batch_owned`]. Called only
    /// for the first vertex of a task with several inputs.
    fn process_input(
        &mut self,
        _input: usize,
        _records: &mut [Record],
        _out: &mut Output,
    ) -> Result<bool, BoxError> {
        Ok(false)
    }

    /// Called with the wall clock at least once per batch and regularly while no input comes,
    /// for processing-time timers (windows): every [`PARK_TICK`](crate::PARK_TICK) under the
    /// default idle strategy (2 ms under `spin`), or, where every operator of a task reading a
    /// channel says it does not [use time](Operator::uses_time), as rarely as once per
    /// [`PARK_QUIET`](crate::PARK_QUIET). `now_nanos` is nanoseconds since the Unix epoch.
    fn on_time(&mut self, _now_nanos: i64, _out: &mut Output) -> Result<(), BoxError> {
        Ok(())
    }

    /// Whether [`Operator::on_time`] must be called while no input comes (the operator has
    /// processing-time timers). The default says yes. An operator that returns `false` here
    /// lets a task whose operators all do so sleep on an empty input until a batch comes,
    /// waking once a second instead of every [`PARK_TICK`](crate::PARK_TICK): a quiet job
    /// then costs less CPU. Asked once, when the job starts.
    fn uses_time(&self) -> bool {
        true
    }

    /// Called when the operator's event-time watermark advances.
    fn on_watermark(&mut self, _watermark: i64, _out: &mut Output) -> Result<(), BoxError> {
        Ok(())
    }

    /// Input `input` of this vertex (one with several inputs, numbered as for
    /// [`Operator::process_input`]) has the watermark `watermark` now: the smallest of its
    /// channels', `i64::MAX` when all of them are idle or ended (it holds nothing back). Called
    /// when it changes, before [`Operator::on_watermark`] with the combined watermark that
    /// follows; a table join waits on its right input's. The default does nothing.
    fn on_input_watermark(
        &mut self,
        _input: usize,
        _watermark: i64,
        _out: &mut Output,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// End of input: emit whatever is still held (open windows, buffers).
    fn finish(&mut self, _now_nanos: i64, _out: &mut Output) -> Result<(), BoxError> {
        Ok(())
    }

    /// Emits more of what the last [`Operator::on_watermark`] or [`Operator::finish`] left:
    /// an operator that would emit very many records at once (a window firing every key of
    /// many windows) may stop once [`Output::is_full`] and return; the runtime passes what is
    /// in `out` downstream and calls this until it returns `false` (nothing more), before
    /// anything else reaches the operator. The default has nothing more.
    fn emit_more(&mut self, _out: &mut Output) -> Result<bool, BoxError> {
        Ok(false)
    }

    /// Records this operator dropped as late (event-time windows); read once per batch.
    fn late_records_dropped(&self) -> u64 {
        0
    }

    /// Records this operator dropped so far for `reason`, read once per batch: the runtime
    /// asks for [`DropReason::Late`] and [`DropReason::ExpressionError`] (a record an
    /// expression failed on, skipped). They show in the report, the summary table and
    /// `tidemark_records_dropped_total{reason}`. The default gives
    /// [`Operator::late_records_dropped`] for `Late` and 0 otherwise.
    fn records_dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Late => self.late_records_dropped(),
            _ => 0,
        }
    }

    /// State of this subtask that is not per key (the lengths of the dead-letter files it
    /// writes, say), taken when checkpoint barrier `checkpoint` reaches the operator, after
    /// every record before the barrier was processed and before any after it: `None` (the
    /// default) when it has none. Kept in the checkpoint and handed to
    /// [`Operator::restore_local`] of the same vertex and subtask index on a restore. (Keyed
    /// state goes through the keyed-state API instead, so that it can move between subtasks
    /// on a rescale.)
    fn snapshot_local(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(None)
    }

    /// Restore what [`Operator::snapshot_local`] returned: called once, before the first
    /// record, when the job is restored (a dead-letter file is cut back to its recorded length
    /// here).
    fn restore_local(&mut self, _state: &[u8]) -> Result<(), BoxError> {
        Ok(())
    }

    /// The keyed state this operator declares ([`crate::keyed_table`]): the runtime
    /// snapshots, restores and rescales it, and the operator implements nothing else for its
    /// keyed state. The default is `None`; an operator with a layout of its own implements
    /// [`Operator::has_keyed_state`], [`Operator::snapshot_keyed`], [`Operator::restore_keyed`]
    /// and [`Operator::forget_keyed`] instead (the built-in `window` does).
    fn keyed_table(&mut self) -> Option<&mut dyn crate::keyed_table::KeyedTable> {
        None
    }

    /// Whether this operator keeps keyed state: asked once, when the job starts; the default
    /// is whether it declares a [`Operator::keyed_table`]. A checkpoint stores the keyed state
    /// of such an operator per key group, so that a restore at another parallelism hands each
    /// subtask the keys of its key groups.
    fn has_keyed_state(&mut self) -> bool {
        self.keyed_table().is_some()
    }

    /// Writes the state of every key this subtask holds into `state` (each key into its key
    /// group, [`KeyedSnapshot::put`](crate::keyed_state::KeyedSnapshot::put)), as checkpoint
    /// barrier `checkpoint` reaches the operator, after every record before it was processed:
    /// a copy in memory (the runtime writes the files beside the tasks). Only called when
    /// [`Operator::has_keyed_state`] is true. See [`crate::keyed_state`].
    fn snapshot_keyed(
        &mut self,
        _checkpoint: u64,
        state: &mut crate::keyed_state::KeyedSnapshot,
    ) -> Result<(), BoxError> {
        if let Some(table) = self.keyed_table() {
            table.snapshot(state)?;
        }
        Ok(())
    }

    /// Takes back the keyed state of this subtask's key groups, as an earlier run's
    /// [`Operator::snapshot_keyed`] wrote it (merged from every old subtask that held one of
    /// these key groups): called once, before the first record, when the job is restored.
    fn restore_keyed(&mut self, state: crate::keyed_state::KeyedSnapshot) -> Result<(), BoxError> {
        if let Some(table) = self.keyed_table() {
            table.restore(&state)?;
        }
        Ok(())
    }

    /// Takes in the keyed state of key groups `groups` that moved to this subtask while their
    /// event time is behind the subtask's watermark ([`crate::state_move`], "Event time per
    /// key group"): until [`Operator::key_groups_event_time`] says they caught up, an
    /// event-time operator judges and fires their keys by their own watermark, which starts at
    /// `watermark` (their records after it are not late). The default takes them in as
    /// [`Operator::restore_keyed`] does: right for an operator that does not use event time.
    fn restore_keyed_behind(
        &mut self,
        state: crate::keyed_state::KeyedSnapshot,
        _groups: &[u32],
        _watermark: i64,
    ) -> Result<(), BoxError> {
        self.restore_keyed(state)
    }

    /// The watermark of key groups restored behind ([`Operator::restore_keyed_behind`])
    /// advanced to `watermark` (`None`: they hold nothing back, being idle): an event-time
    /// operator fires their due windows into `out`; once `watermark` reaches the subtask's
    /// watermark, or is `None`, those key groups follow the subtask's event time again. Called
    /// after the records of the poll that moved it. The default does nothing.
    fn key_groups_event_time(
        &mut self,
        _max_parallelism: u32,
        _groups: &[u32],
        _watermark: Option<i64>,
        _out: &mut Output,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// Forgets the state of every key `forget` is true of, emitting nothing: their key groups
    /// moved to another owner, which restores them ([`crate::state_move`]). Only called when
    /// [`Operator::has_keyed_state`] is true; the default refuses.
    fn forget_keyed(
        &mut self,
        forget: &dyn Fn(&crate::value::Value) -> bool,
    ) -> Result<(), BoxError> {
        match self.keyed_table() {
            Some(table) => Ok(table.forget(forget)?),
            None => Err("this operator cannot hand its keys over to another owner".into()),
        }
    }

    /// Forgets the state of key groups `groups` (of `max_parallelism`), emitting nothing: they
    /// moved to another owner ([`crate::state_move`]). The default forgets every key of them
    /// through [`Operator::forget_keyed`].
    fn forget_key_groups(&mut self, max_parallelism: u32, groups: &[u32]) -> Result<(), BoxError> {
        self.forget_keyed(&crate::state_move::in_groups(max_parallelism, groups))
    }

    /// How much state this subtask keeps now, for `tidemark_state_keys`,
    /// `tidemark_state_windows_open` and `tidemark_state_bytes`: `None` (the default) for a
    /// stateless operator. Called about once a second by the task, never per record; it may
    /// take time proportional to the state.
    fn state_size(&self) -> Option<StateSize> {
        None
    }

    /// A join's results so far and records held now, for `tidemark_join_results_total` and
    /// `tidemark_join_held_records`: `None` (the default) for any other operator. Called with
    /// [`Operator::state_size`], about once a second and at the end.
    fn join_counts(&self) -> Option<crate::JoinCounts> {
        None
    }
}

/// The error a sink returns when its output has gone away for good (standard output whose
/// reader exited, as `tidemark run job.yaml | head -1` does): the job stops cleanly, as
/// ripgrep does on a broken pipe, and the records the sink gets from then on are counted as
/// dropped ([`DropReason::OutputClosed`]) instead of failing the job. An
/// [`std::io::ErrorKind::BrokenPipe`] error returned by a sink is taken the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{output} was closed")]
pub struct OutputClosed {
    /// What was closed, e.g. `standard output`.
    pub output: String,
}

impl OutputClosed {
    /// True when `error` says the output is closed: an [`OutputClosed`], or an I/O error of
    /// kind `BrokenPipe` (also as the source of another error).
    pub fn is_output_closed(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut current = Some(error);
        while let Some(e) = current {
            if e.is::<OutputClosed>() {
                return true;
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return true;
                }
            }
            current = e.source();
        }
        false
    }
}

/// The end of a path: consumes records.
pub trait Sink: Send {
    /// Writes one record.
    fn write(&mut self, record: &Record) -> Result<(), BoxError>;

    /// Writes a batch; the default calls [`Sink::write`] per record.
    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        for record in records {
            self.write(record)?;
        }
        Ok(())
    }

    /// A checkpoint barrier arrived: make everything written so far durable (flush a file,
    /// wait for a broker's acknowledgements) before the checkpoint is acknowledged.
    fn flush(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// End of input: flush and sync whatever the sink buffers, so nothing is lost.
    fn finish(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// True for a sink that passes markers on rather than ending their path (the writer of a
    /// Kafka exchange): it does not record their latency, and gets each through
    /// [`Sink::on_marker`] in order with the records.
    fn relays_markers(&self) -> bool {
        false
    }

    /// A marker reached a sink that [relays markers](Sink::relays_markers), after every record
    /// before it was written.
    fn on_marker(&mut self, _marker: LatencyMarker) -> Result<(), BoxError> {
        Ok(())
    }

    /// The sink's event-time watermark advanced to `watermark` (ns since the Unix epoch),
    /// after every record before it was written.
    fn on_watermark(&mut self, _watermark: i64) -> Result<(), BoxError> {
        Ok(())
    }

    /// Every input of the sink is idle (sources without records for their idle timeout, or
    /// without partitions): its watermark holds nothing back until the next
    /// [`Sink::on_watermark`].
    fn on_idle(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// The source at the head of this sink's chain looked at its inputs (every watermark
    /// interval) and nothing changed: no [`Sink::on_watermark`] or [`Sink::on_idle`] follows.
    /// A sink that passes idleness on to readers elsewhere (the Kafka exchange writer) renews
    /// its idle claims here: idleness is a lease its reader keeps renewing, and a claim not
    /// renewed lapses (`docs/event-time.md`, "Idleness"). A sink in a task fed by channels is
    /// called while every input stays idle, every 200 ms or so.
    fn on_inputs_unchanged(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// Whether this sink can be cut back to a checkpoint ([`Sink::position`] and
    /// [`Sink::restore`]): files can, standard output and discard need not (the default,
    /// `false`, records nothing for them).
    fn resumable(&self) -> bool {
        false
    }

    /// What this sink has durably written, right after [`Sink::flush`] for barrier
    /// `checkpoint` (a file sink: each file's path and length, after a sync). Kept in the
    /// checkpoint and handed to [`Sink::restore`] of the same vertex and subtask index on a
    /// restore. Only called when [`Sink::resumable`] is true.
    fn position(&mut self, _checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        Err("this sink cannot record what it has written".into())
    }

    /// Cut the output back to a position [`Sink::position`] returned and append after it:
    /// called once, before the first write, when the job is restored, so that what was
    /// written after the checkpoint (and will be written again) is not there twice.
    fn restore(&mut self, _position: &[u8]) -> Result<(), BoxError> {
        Err("this sink cannot be restored from a checkpoint".into())
    }
}

/// Makes one source instance per subtask.
pub type SourceFactory =
    Box<dyn Fn(&SubtaskContext) -> Result<Box<dyn Source>, BoxError> + Send + Sync>;
/// Makes one operator instance per subtask.
pub type OperatorFactory =
    Box<dyn Fn(&SubtaskContext) -> Result<Box<dyn Operator>, BoxError> + Send + Sync>;
/// Makes one sink instance per subtask.
pub type SinkFactory =
    Box<dyn Fn(&SubtaskContext) -> Result<Box<dyn Sink>, BoxError> + Send + Sync>;
