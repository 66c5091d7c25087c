//! The collector operators and sources emit into.

use crate::record::Record;

/// Where a source or operator puts the records it emits.
///
/// The buffer is owned by the runtime and reused from batch to batch, so `emit` does not
/// allocate once the buffer has reached the batch size.
///
/// It remembers whether anything but numeric records was emitted, so that emptying a buffer of
/// numeric records costs nothing per record.
#[derive(Debug, Default)]
pub struct Output {
    records: Vec<Record>,
    /// Something other than a numeric record may be in `records`.
    general: bool,
}

impl Output {
    /// An output with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Output {
            records: Vec::with_capacity(capacity),
            general: false,
        }
    }

    /// Emits one record.
    #[inline]
    pub fn emit(&mut self, record: Record) {
        self.general |= !record.is_numeric();
        self.records.push(record);
    }

    /// Emits the numeric record `{"key": key, "value": value}` keyed by `key` (see
    /// [`Record::new`]): the fastest way to emit one.
    #[inline(always)]
    pub fn emit_numeric(
        &mut self,
        key: i64,
        value: f64,
        timestamp: i64,
        timestamp_type: crate::record::TimestampType,
    ) {
        self.records
            .push(Record::new(key as u64, value, timestamp).with_timestamp_type(timestamp_type));
    }

    /// Emits clones of several records (numeric ones are copied as a block).
    pub fn emit_all(&mut self, records: &[Record]) {
        self.general |= !crate::record::extend_cloned(&mut self.records, records);
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

    /// The buffer, to drop records or change their timestamps. (Adding a record that is not
    /// numeric here would escape the `general` flag: use [`Output::emit`].)
    pub(crate) fn records_mut(&mut self) -> &mut Vec<Record> {
        &mut self.records
    }

    /// Forgets the emitted records, keeping the buffer.
    pub fn clear(&mut self) {
        if self.general {
            self.records.clear();
            self.general = false;
        } else {
            crate::record::forget_numeric(&mut self.records);
        }
    }
}
