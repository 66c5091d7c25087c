//! Channels between tasks: bounded `crossbeam-channel` queues of batches, with the batch
//! buffers handed back to the sender for reuse.
//!
//! Every downstream subtask owns one receiving queue; each upstream subtask that can send to it
//! holds a [`ChannelWriter`] with its own *slot* number, so the receiver knows whom a batch came
//! from (to return the buffer and to count ends of input). A queue delivers the messages of one
//! writer in the order they were sent, so a marker never overtakes a record.

use crate::batch::{Batch, Event};
use crate::record::Record;
use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TrySendError};
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
}

/// Time a task spent blocked in sends, and the abort flag it must watch.
pub(crate) struct SendContext<'a> {
    pub abort: &'a AtomicBool,
    pub backpressured: &'a mut Duration,
}

impl ChannelWriter {
    pub(crate) fn new(
        tx: Sender<Message>,
        pool: Receiver<Batch>,
        slot: u32,
        queue_gauge: Arc<crate::metrics::SubtaskMetrics>,
        batch_size: usize,
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
            Err(_) => Batch::with_capacity(self.batch_size),
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

    /// Tells the receiver this writer is done. Sends what is pending first.
    pub(crate) fn close(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        self.flush(cx)?;
        self.blocking_send(Message::End { slot: self.slot }, cx)
    }

    fn blocking_send(&self, msg: Message, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        let mut msg = match self.tx.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(msg)) => msg,
            Err(TrySendError::Disconnected(_)) => return Err(Aborted),
        };
        let started = Instant::now();
        let result = loop {
            if cx.abort.load(Ordering::Relaxed) {
                break Err(Aborted);
            }
            match self.tx.send_timeout(msg, ABORT_POLL) {
                Ok(()) => break Ok(()),
                Err(SendTimeoutError::Timeout(m)) => msg = m,
                Err(SendTimeoutError::Disconnected(_)) => break Err(Aborted),
            }
        };
        *cx.backpressured += started.elapsed();
        result
    }
}

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
}

impl ChannelReader {
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
