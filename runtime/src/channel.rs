//! Channels between tasks: bounded `crossbeam-channel` queues of batches, with the batch
//! buffers handed back to the sender for reuse.
//!
//! Every downstream subtask owns one receiving queue; each upstream subtask that can send to it
//! holds a [`ChannelWriter`] with its own *slot* number, so the receiver knows whom a batch came
//! from (to return the buffer and to count ends of input). A queue delivers the messages of one
//! writer in the order they were sent, so a marker never overtakes a record.

use crate::batch::{Batch, Event};
use crate::record::Record;
use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a blocked send or receive waits before it looks at the job's abort flag again.
pub(crate) const ABORT_POLL: Duration = Duration::from_millis(5);

/// What travels on a queue.
#[derive(Debug)]
pub(crate) enum Message {
    /// A batch from the writer with this slot.
    Data { slot: u32, batch: Batch },
    /// The writer with this slot has no more input.
    End { slot: u32 },
}

/// The job was aborted while this task waited.
#[derive(Debug)]
pub(crate) struct Aborted;

/// One upstream subtask's end of one channel.
pub(crate) struct ChannelWriter {
    tx: Sender<Message>,
    pool: Receiver<Batch>,
    slot: u32,
    pub(crate) pending: Batch,
    pending_since: Option<Instant>,
    queue_gauge: Arc<crate::metrics::SubtaskMetrics>,
    batch_size: usize,
    /// Records of the batches sent successfully (to count what a hard stop left undelivered).
    pub(crate) sent: u64,
    /// Batch buffers this writer made so far, and how many it may have out at once (its
    /// *credit*): with every buffer out (queued, being processed, or held by a reader that is
    /// aligning a checkpoint barrier and has blocked this input), the next send waits for one
    /// to come back. So a blocked input is backpressured, not buffered without bound
    /// (`docs/state.md`, "Memory during alignment").
    made: usize,
    credit: usize,
}

/// Time a task spent blocked in sends, the abort flag it must watch, and the task its thread
/// also runs, if any.
pub(crate) struct SendContext<'a> {
    pub abort: &'a AtomicBool,
    pub backpressured: &'a mut Duration,
    /// The channel task sharing this task's thread ([`crate::worker`]): a send that finds its
    /// queue full runs it meanwhile, or two such threads could each wait for the other.
    pub assist: Option<&'a mut dyn Assist>,
    /// Whether a send may wait for the writer's credit ([`ChannelWriter`]): not for a channel
    /// task run inside another task's wait (a source's send that found its queue full runs
    /// its paired channel task): that task's output waiting on a reader that is aligning
    /// could keep the outer task from delivering a barrier the reader waits for. Such a task
    /// takes a new buffer instead, for as long as the outer wait lasts.
    pub credit_waits: bool,
}

#[cfg(test)]
impl<'a> SendContext<'a> {
    /// A task alone in its thread, that may wait for credit (for tests).
    pub(crate) fn alone(abort: &'a AtomicBool, backpressured: &'a mut Duration) -> Self {
        SendContext {
            abort,
            backpressured,
            assist: None,
            credit_waits: true,
        }
    }
}

/// A channel task that shares its thread with the task sending to it ([`crate::worker`]),
/// run by that task whenever it would otherwise wait.
pub(crate) trait Assist {
    /// Processes what the task's queue holds now, without waiting for more. Returns whether it
    /// took anything and how long it ran (the sender counts that neither as its own work nor
    /// as backpressure). An error ends the sender too: the job is being aborted.
    fn serve(&mut self) -> Result<Served, Aborted>;

    /// Waits up to `wait` for the task's input, processing whatever comes meanwhile, and
    /// returns early if `wake` fires or disconnects (a stop, for a source waiting for its
    /// next record).
    fn wait(&mut self, wait: Duration, wake: Option<&Receiver<()>>) -> Result<Served, Aborted>;

    /// The task's queue, to wait on beside a send.
    fn input(&self) -> &Receiver<Message>;

    /// Processes one message taken from [`Assist::input`], then whatever else the queue holds.
    fn take(&mut self, message: Message) -> Result<Served, Aborted>;
}

/// `assist` for a shorter while (for a [`SendContext`] of one turn of a loop).
pub(crate) fn reborrow<'s>(assist: &'s mut Option<&mut dyn Assist>) -> Option<&'s mut dyn Assist> {
    match assist {
        Some(a) => Some(&mut **a),
        None => None,
    }
}

/// What one [`Assist`] call did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Served {
    /// Whether it took a message.
    pub took: bool,
    /// How long it ran.
    pub spent: Duration,
}

impl ChannelWriter {
    pub(crate) fn new(
        tx: Sender<Message>,
        pool: Receiver<Batch>,
        slot: u32,
        queue_gauge: Arc<crate::metrics::SubtaskMetrics>,
        batch_size: usize,
        credit: usize,
    ) -> Self {
        ChannelWriter {
            tx,
            pool,
            slot,
            pending: Batch::with_capacity(batch_size),
            pending_since: None,
            queue_gauge,
            batch_size,
            sent: 0,
            made: 1,
            credit: credit.max(2),
        }
    }

    /// Appends a record; sends the batch when it is full.
    #[inline]
    pub(crate) fn push(&mut self, record: Record, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        self.pending.records.push(record);
        if self.pending.records.len() >= self.batch_size {
            self.send(cx)?;
        }
        Ok(())
    }

    /// Room for records in the pending batch before it is full (at least 1: a full batch is
    /// sent at once), and where the first of them goes.
    ///
    /// Write up to that many records there, then give their number to [`Self::commit`].
    #[inline(always)]
    pub(crate) fn spare(&mut self) -> (*mut Record, usize) {
        let records = &mut self.pending.records;
        let room = self.batch_size.saturating_sub(records.len()).max(1);
        records.reserve(room);
        // SAFETY: `len` is within the allocation (its end at most).
        (unsafe { records.as_mut_ptr().add(records.len()) }, room)
    }

    /// Takes the `n` records written at [`Self::spare`] into the pending batch.
    ///
    /// # Safety
    /// The first `n` slots handed out by the last `spare` (at most its room) must hold
    /// records written since.
    #[inline(always)]
    pub(crate) unsafe fn commit(&mut self, n: usize) {
        let records = &mut self.pending.records;
        debug_assert!(records.len() + n <= records.capacity());
        records.set_len(records.len() + n);
    }

    /// Sends the pending batch if it is full.
    #[inline(always)]
    pub(crate) fn send_if_full(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        if self.pending.records.len() >= self.batch_size {
            self.send(cx)?;
        }
        Ok(())
    }

    /// Appends records in order, sending each batch as it fills.
    pub(crate) fn push_slice(
        &mut self,
        mut records: &[Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), Aborted> {
        while !records.is_empty() {
            let room = self
                .batch_size
                .saturating_sub(self.pending.records.len())
                .max(1);
            let (now, rest) = records.split_at(room.min(records.len()));
            crate::record::extend_cloned(&mut self.pending.records, now);
            records = rest;
            if self.pending.records.len() >= self.batch_size {
                self.send(cx)?;
            }
        }
        Ok(())
    }

    /// Appends an event after the pending records; it waits for the batch like a record does.
    pub(crate) fn push_event(&mut self, event: Event) {
        self.pending.push_event(event);
    }

    /// Sends the pending batch if it has waited `timeout` since it was first seen non-empty.
    pub(crate) fn flush_if_expired(
        &mut self,
        now: Instant,
        timeout: Duration,
        cx: &mut SendContext<'_>,
    ) -> Result<(), Aborted> {
        if self.pending.is_empty() {
            return Ok(());
        }
        match self.pending_since {
            None => {
                self.pending_since = Some(now);
                if timeout.is_zero() {
                    self.send(cx)?;
                }
            }
            Some(since) if now.saturating_duration_since(since) >= timeout => self.send(cx)?,
            Some(_) => {}
        }
        Ok(())
    }

    /// Sends the pending batch if it holds anything.
    pub(crate) fn flush(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        if !self.pending.is_empty() {
            self.send(cx)?;
        }
        Ok(())
    }

    fn send(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        let fresh = match self.pool.try_recv() {
            Ok(batch) => batch,
            Err(_) => self.fresh_batch(cx)?,
        };
        let batch = std::mem::replace(&mut self.pending, fresh);
        self.pending_since = None;
        let n = batch.records.len() as i64;
        self.queue_gauge
            .input_queue()
            .fetch_add(n, Ordering::Relaxed);
        let result = self.blocking_send(
            Message::Data {
                slot: self.slot,
                batch,
            },
            cx,
        );
        match result {
            Ok(()) => self.sent += n as u64,
            Err(_) => {
                self.queue_gauge
                    .input_queue()
                    .fetch_sub(n, Ordering::Relaxed);
            }
        }
        result
    }

    /// A buffer for the next batch when none came back: a new one while the credit lasts;
    /// otherwise it waits for the reader to give one back. A batch carrying a checkpoint
    /// barrier never waits: a barrier must reach every output whatever is blocked (a task
    /// broadcasts it, then flushes each output in turn; one of them waiting on a reader that
    /// is aligning could keep the barrier from an output that reader waits for).
    #[cold]
    #[inline(never)]
    fn fresh_batch(&mut self, cx: &mut SendContext<'_>) -> Result<Batch, Aborted> {
        let barrier = || {
            self.pending
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Barrier(_)))
        };
        if self.made < self.credit || !cx.credit_waits || barrier() {
            self.made += 1;
            return Ok(Batch::with_capacity(self.batch_size));
        }
        let started = Instant::now();
        let mut lent = Duration::ZERO;
        let result = match cx.assist.as_deref_mut() {
            Some(assist) => self.buffer_assisted(cx.abort, assist, &mut lent),
            None => self.buffer_waiting(cx.abort),
        };
        *cx.backpressured += started.elapsed().saturating_sub(lent);
        result
    }

    /// Waits for a buffer to come back, alone in the thread. A reader that is gone gives none:
    /// a new one, and the send finds out.
    fn buffer_waiting(&mut self, abort: &AtomicBool) -> Result<Batch, Aborted> {
        loop {
            if abort.load(Ordering::Relaxed) {
                return Err(Aborted);
            }
            match self.pool.recv_timeout(ABORT_POLL) {
                Ok(batch) => return Ok(batch),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Ok(Batch::with_capacity(self.batch_size))
                }
            }
        }
    }

    /// Waits for a buffer to come back, running the channel task that shares the thread
    /// meanwhile (it may be the very reader holding the buffers).
    fn buffer_assisted(
        &mut self,
        abort: &AtomicBool,
        assist: &mut dyn Assist,
        lent: &mut Duration,
    ) -> Result<Batch, Aborted> {
        loop {
            if abort.load(Ordering::Relaxed) {
                return Err(Aborted);
            }
            let served = assist.serve()?;
            *lent += served.spent;
            match self.pool.try_recv() {
                Ok(batch) => return Ok(batch),
                Err(TryRecvError::Disconnected) => {
                    return Ok(Batch::with_capacity(self.batch_size))
                }
                Err(TryRecvError::Empty) if served.took => continue,
                Err(TryRecvError::Empty) => {}
            }
            let got = crossbeam_channel::select! {
                recv(self.pool) -> batch => match batch {
                    Ok(batch) => return Ok(batch),
                    Err(_) => return Ok(Batch::with_capacity(self.batch_size)),
                },
                recv(assist.input()) -> m => Some(m),
                default(ABORT_POLL) => None,
            };
            if let Some(m) = got {
                *lent += assist.take(m.map_err(|_| Aborted)?)?.spent;
            }
        }
    }

    /// Tells the receiver this writer is done. Sends what is pending first.
    pub(crate) fn close(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        self.flush(cx)?;
        self.blocking_send(Message::End { slot: self.slot }, cx)
    }

    /// Sends `msg`, waiting while the queue is full: first by yielding the core a few times
    /// (to the receiver, when tasks outnumber cores), then asleep until there is room, looking
    /// at the abort flag every [`ABORT_POLL`].
    ///
    /// The sleeping wait is a `select!`, which does not spin first as `send_timeout` does: a
    /// spinning sender holds a core its receiver may need when tasks outnumber cores.
    fn blocking_send(&self, msg: Message, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        match self.tx.try_send(msg) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(msg)) => self.send_when_room(msg, cx),
            Err(TrySendError::Disconnected(_)) => Err(Aborted),
        }
    }

    /// The waiting part of [`Self::blocking_send`], out of line: the queue was full.
    #[cold]
    #[inline(never)]
    fn send_when_room(&self, msg: Message, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        let started = Instant::now();
        let mut lent = Duration::ZERO;
        let result = match cx.assist.as_deref_mut() {
            Some(assist) => self.send_assisted(msg, cx.abort, assist, &mut lent),
            None => self.send_waiting(msg, cx.abort),
        };
        *cx.backpressured += started.elapsed().saturating_sub(lent);
        result
    }

    /// A full queue, alone in the thread: yields, then sleeps until there is room.
    fn send_waiting(&self, mut msg: Message, abort: &AtomicBool) -> Result<(), Aborted> {
        for _ in 0..YIELDS {
            std::thread::yield_now();
            msg = match self.tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(msg)) => msg,
                Err(TrySendError::Disconnected(_)) => return Err(Aborted),
            };
        }
        loop {
            if abort.load(Ordering::Relaxed) {
                return Err(Aborted);
            }
            crossbeam_channel::select! {
                send(self.tx, msg) -> sent => return sent.map_err(|_| Aborted),
                default(ABORT_POLL) => {}
            }
        }
    }

    /// A full queue, with a channel task sharing the thread: runs it while it has input,
    /// yields when it has none, then sleeps until there is room or it has input again. The
    /// time it ran is added to `lent`.
    fn send_assisted(
        &self,
        mut msg: Message,
        abort: &AtomicBool,
        assist: &mut dyn Assist,
        lent: &mut Duration,
    ) -> Result<(), Aborted> {
        let mut idle_turns = 0usize;
        loop {
            if abort.load(Ordering::Relaxed) {
                return Err(Aborted);
            }
            let served = assist.serve()?;
            *lent += served.spent;
            msg = match self.tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(msg)) => msg,
                Err(TrySendError::Disconnected(_)) => return Err(Aborted),
            };
            if served.took {
                idle_turns = 0;
                continue;
            }
            // Neither room nor input: the reader of this queue runs in another thread.
            if idle_turns < YIELDS {
                idle_turns += 1;
                std::thread::yield_now();
                continue;
            }
            let got = crossbeam_channel::select! {
                send(self.tx, msg) -> sent => return sent.map_err(|_| Aborted),
                recv(assist.input()) -> m => Some(m),
                default(ABORT_POLL) => None,
            };
            if let Some(m) = got {
                *lent += assist.take(m.map_err(|_| Aborted)?)?.spent;
            }
            idle_turns = 0;
        }
    }
}

/// How many times a task yields its core, looking again after each, before it sleeps on a
/// full queue (a sender) or an empty one (a channel task): a few microseconds, and the core
/// goes to whichever thread can run meanwhile.
///
/// Spinning instead (as a blocking `recv`/`send` of the queue does before it sleeps) takes a
/// core from the thread that would fill or drain the queue when tasks outnumber cores; sleeping
/// at once costs a futex wake-up and two context switches per batch on a busy hash edge. On a
/// generator → hash → reduce job at parallelism 2, sleeping at once took 2.5 times the CPU of
/// this, and spinning 7% more.
const YIELDS: usize = 8;

/// A downstream subtask's receiving side: the queue, the buffer return paths per slot, and the
/// number of writers that have not ended yet.
pub(crate) struct ChannelReader {
    pub(crate) rx: Receiver<Message>,
    pub(crate) returns: Vec<Sender<Batch>>,
    pub(crate) open: usize,
    pub(crate) gauge: Arc<crate::metrics::SubtaskMetrics>,
    /// Records taken from the queue so far.
    pub(crate) taken: u64,
    /// The upstream vertex id of each slot, to name the input holding the watermark back.
    pub(crate) inputs: Vec<Arc<str>>,
    /// Whether watermarks flow in this job, so that the holder is named from the start.
    pub(crate) names_holder: bool,
    /// Which input of the head vertex (its input edges in the order they were connected) each
    /// slot belongs to.
    pub(crate) input_index: Vec<u32>,
    /// Whether the head vertex has several inputs (some slot's input is not the first).
    pub(crate) several_inputs: bool,
}

impl ChannelReader {
    /// The input of the head vertex that slot `slot` belongs to, where it has several.
    #[inline]
    pub(crate) fn input_of(&self, slot: u32) -> Option<usize> {
        match self.several_inputs {
            true => Some(self.input_index[slot as usize] as usize),
            false => None,
        }
    }

    /// Gives a processed batch's buffers back to the writer that sent it.
    pub(crate) fn recycle(&self, slot: u32, mut batch: Batch) {
        batch.clear();
        let _ = self.returns[slot as usize].try_send(batch);
    }

    /// Names the input holding the head vertex's watermark back, if it changed (where
    /// watermarks flow and there are several inputs).
    pub(crate) fn publish_holder(&self, watermarks: &mut crate::event_time::InputWatermarks) {
        if !self.names_holder || self.inputs.len() < 2 {
            return;
        }
        if let Some(holder) = watermarks.holder_changed() {
            self.gauge
                .set_watermark_holder(holder.map(|slot| self.inputs[slot].clone()));
        }
    }

    /// Takes a message if one comes while the task yields its core [`YIELDS`] times; does not
    /// sleep.
    pub(crate) fn recv_yielding(&self) -> Result<Message, TryRecvError> {
        for _ in 0..YIELDS {
            match self.rx.try_recv() {
                Err(TryRecvError::Empty) => std::thread::yield_now(),
                result => return result,
            }
        }
        self.rx.try_recv()
    }

    pub(crate) fn note_received(&mut self, records: usize) {
        self.taken += records as u64;
        self.gauge
            .input_queue()
            .fetch_sub(records as i64, Ordering::Relaxed);
    }
}

/// Makes the queue of one downstream subtask.
pub(crate) fn queue(capacity: usize) -> (Sender<Message>, Receiver<Message>) {
    crossbeam_channel::bounded(capacity)
}

/// Makes the buffer-return path of one (writer, reader) pair.
pub(crate) fn pool(capacity: usize) -> (Sender<Batch>, Receiver<Batch>) {
    crossbeam_channel::bounded(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::SubtaskMetrics;
    use std::num::NonZeroUsize;
    use tidemark_markers::{Buckets, Granularity};

    fn test_metrics() -> Arc<SubtaskMetrics> {
        Arc::new(SubtaskMetrics::new(
            Granularity::Single,
            NonZeroUsize::new(1).unwrap(),
            Buckets::marker_latency(),
        ))
    }

    /// A writer of batches of one record into a queue of one batch, and the queue's other end.
    fn one_batch_queue() -> (ChannelWriter, Receiver<Message>) {
        let metrics = test_metrics();
        let (tx, rx) = queue(1);
        let (_returns, pool_rx) = pool(1);
        (
            ChannelWriter::new(tx, pool_rx, 3, metrics, 1, usize::MAX),
            rx,
        )
    }

    fn keys(rx: &Receiver<Message>) -> Vec<i64> {
        rx.try_iter()
            .flat_map(|m| match m {
                Message::Data { slot, batch } => {
                    assert_eq!(slot, 3);
                    batch
                        .records
                        .iter()
                        .map(|r| r.int_key().unwrap())
                        .collect::<Vec<_>>()
                }
                Message::End { .. } => vec![-1],
            })
            .collect()
    }

    #[test]
    fn a_writer_with_every_buffer_out_waits_for_one_back_but_a_barrier_never_does() {
        let metrics = test_metrics();
        // A roomy queue: only the credit (2 buffers) can make a send wait.
        let (tx, rx) = queue(64);
        let (returns, pool_rx) = pool(2);
        let mut writer = ChannelWriter::new(tx, pool_rx, 0, metrics, 1, 2);
        let abort = AtomicBool::new(false);
        let mut backpressured = Duration::ZERO;
        let mut cx = SendContext::alone(&abort, &mut backpressured);
        // The first send makes the second buffer; the second finds none: it waits, and only
        // the abort flag ends the wait here (nobody gives a buffer back).
        assert!(writer.push(Record::new(1, 0.0, 0), &mut cx).is_ok());
        abort.store(true, Ordering::Relaxed);
        assert!(writer.push(Record::new(2, 0.0, 0), &mut cx).is_err());
        assert_eq!(writer.sent, 1, "a blocked input is held back at its writer");
        // A batch carrying a barrier goes out whatever the credit.
        writer.push_event(Event::Barrier(7));
        assert!(writer.flush(&mut cx).is_ok());
        // A buffer given back lets the next one go.
        abort.store(false, Ordering::Relaxed);
        let mut first = match rx.try_recv().unwrap() {
            Message::Data { batch, .. } => batch,
            Message::End { .. } => unreachable!(),
        };
        first.clear();
        returns.send(first).unwrap();
        assert!(writer.push(Record::new(3, 0.0, 0), &mut cx).is_ok());
        assert!(writer.sent >= 2);
    }

    #[test]
    fn a_send_into_a_full_queue_waits_for_room_and_delivers_in_order() {
        let (mut writer, rx) = one_batch_queue();
        let abort = AtomicBool::new(false);
        let reader = std::thread::spawn(move || {
            // Takes each message as it comes, so the writer finds the queue full for most.
            let mut got = Vec::new();
            while let Ok(m) = rx.recv() {
                let end = matches!(m, Message::End { .. });
                got.push(m);
                if end {
                    break;
                }
            }
            let (tx, rx) = crossbeam_channel::unbounded();
            for m in got {
                tx.send(m).unwrap();
            }
            keys(&rx)
        });
        let mut backpressured = Duration::ZERO;
        let mut cx = SendContext::alone(&abort, &mut backpressured);
        for k in 0..200u64 {
            assert!(writer.push(Record::new(k, 0.0, 0), &mut cx).is_ok());
        }
        assert!(writer.close(&mut cx).is_ok());
        assert_eq!(writer.sent, 200);
        // The writer's queue end goes away here, so a reader still waiting (a batch or the end
        // was lost) stops, and the comparison below fails rather than hangs.
        drop(writer);
        let mut expected: Vec<i64> = (0..200).collect();
        expected.push(-1);
        assert_eq!(reader.join().unwrap(), expected);
    }

    #[test]
    fn a_send_into_a_full_queue_gives_up_at_an_abort_or_when_the_reader_is_gone() {
        let (mut writer, rx) = one_batch_queue();
        let abort = AtomicBool::new(false);
        let mut backpressured = Duration::ZERO;
        let mut cx = SendContext::alone(&abort, &mut backpressured);
        assert!(writer.push(Record::new(1, 0.0, 0), &mut cx).is_ok());
        // The queue is full and nobody reads it: only the abort flag ends the wait.
        abort.store(true, Ordering::Relaxed);
        assert!(writer.push(Record::new(2, 0.0, 0), &mut cx).is_err());
        assert_eq!(writer.sent, 1, "the second batch was not sent");
        assert_eq!(keys(&rx), vec![1], "and it is not in the queue");
        // Full again, not aborted: the reader going away ends the wait.
        abort.store(false, Ordering::Relaxed);
        assert!(writer.push(Record::new(3, 0.0, 0), &mut cx).is_ok());
        let reader_gone = std::thread::spawn(move || drop(rx));
        assert!(writer.push(Record::new(4, 0.0, 0), &mut cx).is_err());
        reader_gone.join().unwrap();
        assert_eq!(writer.sent, 2);
    }
}
