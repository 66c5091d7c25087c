//! Small components for tests, examples and doc tests.

use crate::component::{BoxError, Operator, PollContext, Sink, Source, SourceStatus};
use crate::output::Output;
use crate::record::Record;

/// Emits `count` records with keys `0..count` and value equal to the key, then finishes.
#[derive(Debug, Clone)]
pub struct CountingSource {
    next: u64,
    count: u64,
}

impl CountingSource {
    /// A source of `count` records.
    pub fn new(count: u64) -> Self {
        CountingSource { next: 0, count }
    }
}

impl Source for CountingSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let end = self.count.min(self.next + ctx.max_records as u64);
        for k in self.next..end {
            out.emit(Record::new(k, k as f64, ctx.now_nanos));
        }
        self.next = end;
        Ok(if self.next == self.count {
            SourceStatus::Finished
        } else {
            SourceStatus::Ready
        })
    }
}

/// Applies a function to the numeric field `value` of each event (an event without a numeric
/// `value` fails the job).
#[derive(Debug, Clone)]
pub struct MapOperator<F>(pub F);

impl<F: FnMut(f64) -> f64 + Send> Operator for MapOperator<F> {
    fn process(&mut self, mut record: Record, out: &mut Output) -> Result<(), BoxError> {
        let value = record.numeric_value().ok_or_else(|| {
            format!(
                "field `value` is missing or not a number in {}",
                record.event_json()
            )
        })?;
        record.set_numeric_value((self.0)(value));
        out.emit(record);
        Ok(())
    }
}

/// Drops every record.
#[derive(Debug, Clone, Copy)]
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        Ok(())
    }
    fn write_batch(&mut self, _records: &[Record]) -> Result<(), BoxError> {
        Ok(())
    }
}
