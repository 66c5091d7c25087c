//! The collector operators and sources emit into.

use crate::record::Record;

/// Where a source or operator puts the records it emits.
///
/// The buffer is owned by the runtime and reused from batch to batch, so `emit` does not
/// allocate once the buffer has reached the batch size.
#[derive(Debug, Default)]
pub struct Output {
    records: Vec<Record>,
}

impl Output {
    /// An output with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Output {
            records: Vec::with_capacity(capacity),
        }
    }

    /// Emits one record.
    #[inline]
    pub fn emit(&mut self, record: Record) {
        self.records.push(record);
    }

    /// Emits several records.
    pub fn emit_all(&mut self, records: &[Record]) {
        self.records.extend_from_slice(records);
    }

    /// Records emitted since the last drain.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when nothing was emitted since the last drain.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records emitted since the last drain.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    pub(crate) fn records_mut(&mut self) -> &mut Vec<Record> {
        &mut self.records
    }

    /// Forgets the emitted records, keeping the buffer.
    pub fn clear(&mut self) {
        self.records.clear();
    }
}
