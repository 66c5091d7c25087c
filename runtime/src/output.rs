//! The collector operators and sources emit into.

use crate::record::Record;
use tidemark_markers::LatencyMarker;

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
    /// Every record in `records` has this timestamp (known only when all of them came from
    /// [`Output::emit_numeric_with`]; `None` means unknown).
    uniform_timestamp: Option<i64>,
    /// Markers a relaying source emitted, each with the number of records before it.
    markers: Vec<(usize, LatencyMarker)>,
}

impl Output {
    /// How many records an operator that emits much at once (a window firing many keys)
    /// holds in an output before it stops and lets the runtime pass them on
    /// ([`Output::is_full`], [`Operator::emit_more`](crate::Operator::emit_more)).
    pub const FULL: usize = 4096;

    /// Whether [`Output::FULL`] records or more are waiting: an operator with more to emit
    /// stops here and emits the rest from [`Operator::emit_more`](crate::Operator::emit_more).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.records.len() >= Self::FULL
    }

    /// An output with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Output {
            records: Vec::with_capacity(capacity),
            general: false,
            uniform_timestamp: None,
            markers: Vec::new(),
        }
    }

    /// Emits one record.
    #[inline]
    pub fn emit(&mut self, record: Record) {
        self.uniform_timestamp = None;
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
        self.uniform_timestamp = None;
        self.records
            .push(Record::new(key as u64, value, timestamp).with_timestamp_type(timestamp_type));
    }

    /// Emits `n` numeric records `{"key": k, "value": v}` keyed by `k`, all at `timestamp`
    /// with `timestamp_type`, where `(k, v)` is what `next` returns for each in turn.
    ///
    /// The records are written straight into the buffer, with one capacity check for all of
    /// them (a source's fastest way to emit numeric records).
    #[inline(always)]
    pub fn emit_numeric_with(
        &mut self,
        n: usize,
        timestamp: i64,
        timestamp_type: crate::record::TimestampType,
        mut next: impl FnMut() -> (i64, f64),
    ) {
        if self.records.is_empty() {
            self.uniform_timestamp = Some(timestamp);
        } else if self.uniform_timestamp != Some(timestamp) {
            self.uniform_timestamp = None;
        }
        self.records.reserve(n);
        let len = self.records.len();
        // SAFETY: `reserve` made room for `n` records after `len`; each slot of the spare
        // capacity is written once before the length is raised over it, and `next` cannot
        // reach `self.records` (it is borrowed mutably here). Were `next` to panic, the length
        // stays at `len` and the written numeric records (no heap data) are simply forgotten.
        let template = Record::new(0, 0.0, timestamp).with_timestamp_type(timestamp_type);
        unsafe {
            let base = self.records.as_mut_ptr().add(len);
            for i in 0..n {
                let (key, value) = next();
                crate::record::write_numeric_like(&template, base.add(i), key, value);
            }
            self.records.set_len(len + n);
        }
    }

    /// For each record of `records` from the first up to (not including) the first one that
    /// is not numeric: emits it with its value replaced by `f(key, value)` (key, timestamp and
    /// timestamp type kept), calling `f` once per record in order. Returns how many records
    /// that was: `records.len()` when all are numeric.
    ///
    /// The records are written straight into the buffer, with one capacity check for all of
    /// them: the batch fast path of the numeric operators (`map` scale/offset, `reduce`).
    #[inline(always)]
    pub fn emit_numeric_mapped(
        &mut self,
        records: &[Record],
        mut f: impl FnMut(i64, f64) -> f64,
    ) -> usize {
        self.emit_numeric_mapped_while(records, |key, value| Some(f(key, value)))
    }

    /// As [`Output::emit_numeric_mapped`], but also stops at the first record for which `f`
    /// returns `None` (that record is not emitted; the caller deals with it).
    #[inline(always)]
    pub fn emit_numeric_mapped_while(
        &mut self,
        records: &[Record],
        mut f: impl FnMut(i64, f64) -> Option<f64>,
    ) -> usize {
        self.uniform_timestamp = None;
        self.records.reserve(records.len());
        let len = self.records.len();
        let mut done = 0;
        // SAFETY: `reserve` made room for `records.len()` records after `len`; slot `done` is
        // written before `done` counts it, and the length is raised only over written slots.
        // (On a panic in `f` the length stays at `len`: the numeric records written so far
        // own no heap data and are simply forgotten.) `records` cannot overlap the spare
        // capacity: it is borrowed while `self` is borrowed mutably.
        unsafe {
            let base = self.records.as_mut_ptr().add(len);
            for r in records {
                let Some((key, value)) = r.numeric_parts() else {
                    break;
                };
                let Some(value) = f(key, value) else {
                    break;
                };
                crate::record::write_numeric_with_value(r, base.add(done), value);
                done += 1;
            }
            self.records.set_len(len + done);
        }
        done
    }

    /// Emits clones of several records (numeric ones are copied as a block).
    pub fn emit_all(&mut self, records: &[Record]) {
        self.uniform_timestamp = None;
        self.general |= !crate::record::extend_cloned(&mut self.records, records);
    }

    /// The timestamp every record emitted since the last drain has, when that is known without
    /// looking at them: all came from [`Output::emit_numeric_with`] with this timestamp.
    /// (`None` when unknown or nothing was emitted.)
    pub(crate) fn uniform_timestamp(&self) -> Option<i64> {
        self.uniform_timestamp.filter(|_| !self.records.is_empty())
    }

    /// Emits a marker after the records emitted so far: only for a source that
    /// [relays markers](crate::Source::relays_markers) (the reader of a Kafka exchange); the
    /// runtime drops markers any other component emits.
    pub fn emit_marker(&mut self, marker: LatencyMarker) {
        self.markers.push((self.records.len(), marker));
    }

    /// Takes the markers emitted since the last call, each with the number of records before it.
    pub(crate) fn take_markers(&mut self) -> Vec<(usize, LatencyMarker)> {
        std::mem::take(&mut self.markers)
    }

    /// True when markers were emitted since the last [`Output::take_markers`].
    pub(crate) fn has_markers(&self) -> bool {
        !self.markers.is_empty()
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
        self.uniform_timestamp = None;
        &mut self.records
    }

    /// The records emitted since the last drain, for operators that change records in place
    /// ([`crate::Operator::process_batch_in_place`]). Such a change may turn a numeric record
    /// into a general one, so the buffer is then emptied as one that may hold general records.
    pub(crate) fn records_in_place(&mut self) -> &mut [Record] {
        self.uniform_timestamp = None;
        self.general = true;
        &mut self.records
    }

    /// Forgets the emitted records, keeping the buffer.
    pub fn clear(&mut self) {
        self.uniform_timestamp = None;
        if self.general {
            crate::record::clear_records(&mut self.records);
            self.general = false;
        } else {
            crate::record::forget_numeric(&mut self.records);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TimestampType;

    #[test]
    fn numeric_fast_paths_emit_what_emit_would() {
        let mut out = Output::default();
        let mut i = 0;
        out.emit_numeric_with(3, 7, TimestampType::Ingestion, || {
            i += 1;
            (i, i as f64 / 2.0)
        });
        let expected: Vec<Record> = (1..=3)
            .map(|k| {
                Record::new(k, k as f64 / 2.0, 7).with_timestamp_type(TimestampType::Ingestion)
            })
            .collect();
        assert_eq!(out.records(), expected);
        // Mapped: stops at the first general record, and where `f` says so.
        let general = Record::with_event("u", crate::value::Map::new(), 1);
        let input = [
            Record::new(1, 1.0, 1),
            Record::new(2, 2.0, 2),
            general.clone(),
            Record::new(3, 3.0, 3),
        ];
        let mut out = Output::default();
        assert_eq!(
            out.emit_numeric_mapped(&input, |k, v| k as f64 + v * 10.0),
            2
        );
        assert_eq!(
            out.records(),
            [Record::new(1, 11.0, 1), Record::new(2, 22.0, 2)]
        );
        assert_eq!(out.emit_numeric_mapped_while(&input[3..], |_, _| None), 0);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn a_uniform_timestamp_is_known_only_while_every_record_has_it() {
        let mut out = Output::default();
        assert_eq!(out.uniform_timestamp(), None);
        out.emit_numeric_with(2, 5, TimestampType::Create, || (1, 1.0));
        out.emit_numeric_with(2, 5, TimestampType::Create, || (1, 1.0));
        assert_eq!(out.uniform_timestamp(), Some(5));
        out.emit_numeric_with(1, 6, TimestampType::Create, || (1, 1.0));
        assert_eq!(out.uniform_timestamp(), None, "two timestamps");
        out.clear();
        out.emit_numeric_with(1, 6, TimestampType::Create, || (1, 1.0));
        assert_eq!(out.uniform_timestamp(), Some(6));
        out.emit(Record::new(1, 1.0, 6));
        assert_eq!(out.uniform_timestamp(), None, "any other emit forgets it");
        out.clear();
        out.emit_numeric_with(1, 6, TimestampType::Create, || (1, 1.0));
        out.records_mut()[0].timestamp = 9;
        assert_eq!(out.uniform_timestamp(), None, "changed timestamps");
        out.clear();
        out.emit_numeric_with(1, 6, TimestampType::Create, || (1, 1.0));
        out.records_in_place()[0].timestamp = 9;
        assert_eq!(out.uniform_timestamp(), None, "changed in place");
        out.clear();
        out.emit_numeric_with(0, 6, TimestampType::Create, || (1, 1.0));
        assert_eq!(out.uniform_timestamp(), None, "nothing emitted");
    }
}
