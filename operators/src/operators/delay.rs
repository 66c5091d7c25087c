//! The `delay` operator: models a slow step by sleeping `per_record` for each record.
//!
//! ```yaml
//! operators:
//!   slow:
//!     type: delay
//!     input: clicks
//!     per_record: 50us   # so this step takes at most ~20,000 records a second
//! ```
//!
//! It sleeps once per batch, for `per_record` × the batch's length, then passes the batch on
//! unchanged. Sleeps overshoot a little; the overshoot is credited to the next batches (up to
//! 1 ms of credit), so over time the step's capacity is `1 / per_record` records a second even
//! when batches are small. The clock is read twice per batch, never per record.

use std::time::{Duration, Instant};

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, duration, nanos_i64};
use crate::error::ConfigError;

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "delay",
    kind: ComponentKind::Operator,
    fields: &["per_record"],
    summary: "sleeps `per_record` per record (once per batch) to model a slow step",
    build,
};

/// Most oversleep credited to later batches, in ns.
const MAX_CREDIT_NANOS: i64 = 1_000_000;

/// Settings of the `delay` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayConfig {
    /// Time spent per record.
    #[serde(with = "duration")]
    pub per_record: Duration,
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: DelayConfig = config::parse(INFO.type_name, config)?;
    let op = DelayOperator::new(config.per_record);
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(Box::new(op) as Box<dyn Operator>)
    })))
}

/// One subtask of the `delay` operator.
#[derive(Clone, Copy, Debug)]
pub struct DelayOperator {
    per_record: i64,
    /// Sleep still owed (positive) or overslept (negative), in ns.
    owed: i64,
}

impl DelayOperator {
    /// A delay of `per_record` per record.
    pub fn new(per_record: Duration) -> Self {
        DelayOperator {
            per_record: nanos_i64(per_record),
            owed: 0,
        }
    }
}

impl Operator for DelayOperator {
    /// No processing-time timers: its task may sleep until input comes.
    fn uses_time(&self) -> bool {
        false
    }

    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.process_batch(std::slice::from_ref(&record), out)
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        if records.is_empty() {
            return Ok(());
        }
        let want = self.per_record.saturating_mul(records.len() as i64);
        self.owed = self.owed.saturating_add(want);
        if self.owed > 0 {
            let started = Instant::now();
            std::thread::sleep(Duration::from_nanos(self.owed as u64));
            self.owed = self
                .owed
                .saturating_sub(nanos_i64(started.elapsed()))
                .max(-MAX_CREDIT_NANOS);
        }
        out.emit_all(records);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{operator, process};
    use serde_json::json;

    #[test]
    fn sleeps_per_batch_and_passes_records_on() {
        let mut op = operator(&INFO, json!({"per_record": "1ms"}));
        let input: Vec<Record> = (0..10).map(|k| Record::new(k, 0.5, 7)).collect();
        let started = Instant::now();
        let out = process(op.as_mut(), &input);
        // A sleep lasts at least as long as asked.
        assert!(started.elapsed() >= Duration::from_millis(10));
        assert_eq!(out, input);
    }

    #[test]
    fn oversleep_is_credited_to_later_batches() {
        let mut op = DelayOperator::new(Duration::from_micros(10));
        let mut out = Output::default();
        op.process(Record::new(1, 0.0, 0), &mut out).unwrap();
        // Any real sleep takes at least the 10 µs asked; what it took beyond is credit.
        assert!(op.owed <= 0 && op.owed >= -MAX_CREDIT_NANOS, "{}", op.owed);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn per_record_is_required() {
        let err = build(json!({}), &BuildEnv::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `per_record`"), "{err}");
    }
}
