//! The `window` operator: tumbling processing-time windows, one aggregate per key and window.
//!
//! ```yaml
//! operators:
//!   per_user:
//!     type: window
//!     input: clicks
//!     partition: hash
//!     size: 1s
//!     aggregate: count    # count | sum | min | max | mean (of value)
//!     time: processing    # the only time so far (the default)
//! ```
//!
//! - Windows are aligned to the Unix epoch: `[n·size, (n+1)·size)` of wall-clock time. A
//!   record belongs to the window that is open when it is processed; the operator learns the
//!   time from [`Operator::on_time`], which the runtime calls at least once per batch and
//!   regularly while idle.
//! - When the time reaches the window's end, the window fires: one record per key that had
//!   records in it, in ascending key order, with the aggregate as value and timestamp
//!   `window end - 1 ns` (type `create`: the last instant the window covers). Then the window
//!   holding the current time opens; windows in which nothing arrived emit nothing.
//! - At the end of input, [`Operator::finish`] fires the open window at once (with its end as
//!   if it had closed).
//!
//! The state and firing are kept apart from the notion of time so that an event-time mode
//! (`time: event`, fired by watermarks) can be added beside `processing`.

use std::marker::PhantomData;
use std::time::Duration;

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext, TimestampType};

use crate::aggregate::{with_aggregator, Aggregator, KeyedAccs};
use crate::config::{self, duration, nanos_i64, Aggregate};
use crate::registry::{BuildEnv, Built, ComponentInfo, ComponentKind, ConfigError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "window",
    kind: ComponentKind::Operator,
    fields: &["size", "aggregate", "time"],
    summary: "tumbling processing-time window: one aggregate per key and window",
    build,
};

/// Settings of the `window` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// The window's length.
    #[serde(with = "duration")]
    pub size: Duration,
    /// What to compute over each key's values in a window.
    pub aggregate: Aggregate,
    /// Which clock assigns records to windows.
    #[serde(default)]
    pub time: WindowTime,
}

/// Which clock assigns records to windows and closes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowTime {
    /// The wall clock when the record is processed.
    #[default]
    Processing,
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: WindowConfig = config::parse(INFO.type_name, config)?;
    if config.size.is_zero() {
        return Err(config::invalid(INFO.type_name, "size: must be more than 0"));
    }
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(window_operator(&config))
    })))
}

/// A new `window` subtask with these settings (`size` must be more than 0).
pub fn window_operator(config: &WindowConfig) -> Box<dyn Operator> {
    let size = nanos_i64(config.size).max(1);
    match config.time {
        WindowTime::Processing => {
            with_aggregator!(config.aggregate, A => Box::new(WindowOperator::<A>::new(size)))
        }
    }
}

/// One subtask of the `window` operator, for one aggregate type.
#[derive(Debug)]
struct WindowOperator<A> {
    size: i64,
    /// The end of the open window, once the time is known.
    end: Option<i64>,
    state: KeyedAccs,
    _aggregate: PhantomData<fn() -> A>,
}

impl<A: Aggregator> WindowOperator<A> {
    fn new(size: i64) -> Self {
        WindowOperator {
            size,
            end: None,
            state: KeyedAccs::default(),
            _aggregate: PhantomData,
        }
    }

    /// The end of the window holding `now`.
    fn end_of_window_at(&self, now: i64) -> i64 {
        now.saturating_sub(now.rem_euclid(self.size))
            .saturating_add(self.size)
    }

    /// Emits the aggregate of every key of the window ending at `end`, and forgets them.
    fn fire(&mut self, end: i64, out: &mut Output) {
        let timestamp = end - 1;
        self.state.drain_sorted(|key, acc| {
            out.emit(Record {
                key,
                value: A::result(&acc),
                timestamp,
                timestamp_type: TimestampType::Create,
            })
        });
    }
}

impl<A: Aggregator> Operator for WindowOperator<A> {
    fn process(&mut self, record: Record, _out: &mut Output) -> Result<(), BoxError> {
        A::update(self.state.get(record.key), record.value);
        Ok(())
    }

    fn process_batch(&mut self, records: &[Record], _out: &mut Output) -> Result<(), BoxError> {
        for record in records {
            A::update(self.state.get(record.key), record.value);
        }
        Ok(())
    }

    fn on_time(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        match self.end {
            Some(end) if now_nanos >= end => {
                self.fire(end, out);
                self.end = Some(self.end_of_window_at(now_nanos));
            }
            Some(_) => {}
            None => self.end = Some(self.end_of_window_at(now_nanos)),
        }
        Ok(())
    }

    fn finish(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        let end = self.end.unwrap_or_else(|| self.end_of_window_at(now_nanos));
        self.fire(end, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::operator;
    use serde_json::json;

    const S: i64 = 1_000_000_000;

    fn window(aggregate: &str) -> Box<dyn Operator> {
        operator(&INFO, json!({"size": "1s", "aggregate": aggregate}))
    }

    fn feed(op: &mut dyn Operator, records: &[(u64, f64)]) {
        let records: Vec<Record> = records.iter().map(|&(k, v)| Record::new(k, v, 0)).collect();
        let mut out = Output::default();
        op.process_batch(&records, &mut out).unwrap();
        assert!(out.is_empty(), "a window emits only when it fires");
    }

    fn time(op: &mut dyn Operator, now: i64) -> Vec<(u64, f64, i64)> {
        let mut out = Output::default();
        op.on_time(now, &mut out).unwrap();
        assert!(out
            .records()
            .iter()
            .all(|r| r.timestamp_type == TimestampType::Create));
        out.records()
            .iter()
            .map(|r| (r.key, r.value, r.timestamp))
            .collect()
    }

    #[test]
    fn fires_per_key_at_the_window_end() {
        let mut op = window("sum");
        let t0 = 1_700_000_000 * S; // a window boundary
        assert!(time(op.as_mut(), t0 + S / 4).is_empty()); // opens [t0, t0+1s)
        feed(op.as_mut(), &[(3, 1.0), (1, 2.0), (3, 4.0)]);
        assert!(time(op.as_mut(), t0 + S - 1).is_empty());
        assert_eq!(
            time(op.as_mut(), t0 + S),
            [(1, 2.0, t0 + S - 1), (3, 5.0, t0 + S - 1)]
        );
        // The next window starts empty.
        feed(op.as_mut(), &[(3, 10.0)]);
        // Late by more than a window: the open one fires with its own end; empty windows
        // in between emit nothing.
        assert_eq!(
            time(op.as_mut(), t0 + 3 * S + 5),
            [(3, 10.0, t0 + 2 * S - 1)]
        );
        assert!(time(op.as_mut(), t0 + 4 * S).is_empty());
    }

    #[test]
    fn aggregates_over_the_window() {
        let t0 = 10 * S;
        let input = [(1, 4.0), (2, 1.0), (1, -2.0), (1, 7.0)];
        for (aggregate, expected) in [
            ("count", [3.0, 1.0]),
            ("sum", [9.0, 1.0]),
            ("min", [-2.0, 1.0]),
            ("max", [7.0, 1.0]),
            ("mean", [3.0, 1.0]),
        ] {
            let mut op = window(aggregate);
            time(op.as_mut(), t0);
            feed(op.as_mut(), &input);
            let fired = time(op.as_mut(), t0 + S);
            let values: Vec<f64> = fired.iter().map(|f| f.1).collect();
            assert_eq!(values, expected, "{aggregate}");
        }
    }

    #[test]
    fn finish_emits_the_open_window() {
        let mut op = window("count");
        // Records before any time was given belong to the first window.
        feed(op.as_mut(), &[(5, 0.0), (5, 0.0)]);
        let mut out = Output::default();
        op.finish(7 * S + 123, &mut out).unwrap();
        assert_eq!(out.records(), [Record::new(5, 2.0, 8 * S - 1)]);

        let mut op = window("count");
        time(op.as_mut(), 2 * S + 1);
        feed(op.as_mut(), &[(6, 0.0)]);
        let mut out = Output::default();
        op.finish(2 * S + 2, &mut out).unwrap();
        assert_eq!(out.records(), [Record::new(6, 1.0, 3 * S - 1)]);
    }

    #[test]
    fn bad_settings_are_named() {
        for (settings, expected) in [
            (
                json!({"size": 0, "aggregate": "sum"}),
                "size: must be more than 0",
            ),
            (
                json!({"size": "1 week", "aggregate": "sum"}),
                "size: invalid duration \"1 week\"",
            ),
            (json!({"aggregate": "sum"}), "missing field `size`"),
            (
                json!({"size": "1s", "aggregate": "sum", "time": "event"}),
                "time: unknown variant `event`, expected `processing`",
            ),
        ] {
            let err = build(settings, &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
    }
}
