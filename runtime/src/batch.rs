//! Batches: the unit that travels on a channel.
//!
//! A batch holds records and, interleaved with them by position, the runtime's own events
//! (latency markers, watermarks). An event at position `i` comes after the first `i` records of
//! the batch and before the rest, so it never overtakes a record sent before it.

use crate::record::Record;
use tidemark_markers::LatencyMarker;

/// A runtime event that travels in order with the records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// A latency marker on its way to a sink.
    Marker(LatencyMarker),
    /// An event-time watermark, nanoseconds since the Unix epoch.
    Watermark(i64),
    /// The sender's input is idle: do not wait for its watermark until it sends one again.
    Idle,
    /// Checkpoint barrier `n` (at-least-once): every record before it is covered by
    /// checkpoint `n`. Sent down every channel.
    Barrier(u64),
}

/// Records plus positioned events.
#[derive(Debug, Default)]
pub struct Batch {
    /// The records, in order.
    pub records: Vec<Record>,
    /// Events with the number of records that precede them.
    pub events: Vec<(u32, Event)>,
}

impl Batch {
    /// An empty batch with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Batch {
            records: Vec::with_capacity(capacity),
            events: Vec::new(),
        }
    }

    /// True when the batch holds neither records nor events.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.events.is_empty()
    }

    /// Appends an event after the records already in the batch.
    pub fn push_event(&mut self, event: Event) {
        self.events.push((self.records.len() as u32, event));
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        crate::record::clear_records(&mut self.records);
        self.events.clear();
    }
}
