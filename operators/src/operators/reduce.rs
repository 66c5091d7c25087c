//! The `reduce` operator: a running aggregate per key, one output per input (Flink's
//! `keyBy().reduce()`).
//!
//! ```yaml
//! operators:
//!   per_user:
//!     type: reduce
//!     input: clicks
//!     partition: hash     # so that each key lives in one subtask
//!     aggregate: sum      # count | sum | min | max | mean (of value)
//! ```
//!
//! Each record comes out with its key and timestamp and, as its value, the aggregate of all the
//! values of its key this subtask has seen, itself included. State is per subtask: without a
//! `hash` edge in front, a key's records spread over subtasks each keep their own aggregate.
//! `min` and `max` ignore NaN values (unless all are NaN).
//!
//! The per-record path is the throughput benchmark's (W1) hot path: the aggregate is a type
//! parameter (no branch per record) and keys below 65,536 index a vector instead of hashing.

use std::marker::PhantomData;

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::aggregate::{input, with_aggregator, Aggregator, KeyedAccs};
use crate::config::{self, Aggregate};
use crate::registry::{BuildEnv, Built, ComponentInfo, ComponentKind, ConfigError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "reduce",
    kind: ComponentKind::Operator,
    fields: &["aggregate"],
    summary: "running aggregate per key (count, sum, min, max, mean), one output per input",
    build,
};

/// Settings of the `reduce` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceConfig {
    /// What to compute over each key's values.
    pub aggregate: Aggregate,
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: ReduceConfig = config::parse(INFO.type_name, config)?;
    let aggregate = config.aggregate;
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(reduce_operator(aggregate))
    })))
}

/// A new `reduce` subtask computing `aggregate`.
pub fn reduce_operator(aggregate: Aggregate) -> Box<dyn Operator> {
    with_aggregator!(aggregate, A => Box::new(ReduceOperator::<A>::default()))
}

/// The output for `record` whose key's aggregate is now `value`: `{"key": <key>, "value":
/// value}` with the record's key and timestamp.
#[inline]
fn output(record: Record, value: f64) -> Record {
    let mut out = Record::keyed_value(&record.key(), value, record.timestamp);
    out.timestamp_type = record.timestamp_type;
    out
}

/// One subtask of the `reduce` operator, for one aggregate type.
#[derive(Debug)]
struct ReduceOperator<A> {
    state: KeyedAccs,
    _aggregate: PhantomData<fn() -> A>,
}

impl<A> Default for ReduceOperator<A> {
    fn default() -> Self {
        ReduceOperator {
            state: KeyedAccs::default(),
            _aggregate: PhantomData,
        }
    }
}

impl<A: Aggregator> Operator for ReduceOperator<A> {
    #[inline]
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        let value = A::update(self.state.get_for(&record), input::<A>(&record)?);
        out.emit(output(record, value));
        Ok(())
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        for record in records {
            match record.numeric_parts() {
                Some((key, v)) => {
                    let value = A::update(self.state.get_for(record), v);
                    out.emit_numeric(key, value, record.timestamp, record.timestamp_type);
                }
                None => {
                    let value = A::update(self.state.get_for(record), input::<A>(record)?);
                    out.emit(output(record.clone(), value));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{kv, operator, process};
    use serde_json::json;
    use tidemark_runtime::TimestampType;

    fn run(aggregate: &str, input: &[(u64, f64)]) -> Vec<(u64, f64)> {
        let mut op = operator(&INFO, json!({ "aggregate": aggregate }));
        let records: Vec<Record> = input
            .iter()
            .enumerate()
            .map(|(i, &(k, v))| Record::new(k, v, i as i64))
            .collect();
        let out = process(op.as_mut(), &records);
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r.timestamp, i as i64, "timestamps pass through");
        }
        out.iter().map(kv).collect()
    }

    const INPUT: [(u64, f64); 6] = [
        (1, 2.0),
        (70_000, 5.0),
        (1, -4.0),
        (2, 1.0),
        (70_000, 1.0),
        (1, 8.0),
    ];

    #[test]
    fn running_aggregates_per_key() {
        assert_eq!(
            run("count", &INPUT),
            [
                (1, 1.0),
                (70_000, 1.0),
                (1, 2.0),
                (2, 1.0),
                (70_000, 2.0),
                (1, 3.0)
            ]
        );
        assert_eq!(
            run("sum", &INPUT),
            [
                (1, 2.0),
                (70_000, 5.0),
                (1, -2.0),
                (2, 1.0),
                (70_000, 6.0),
                (1, 6.0)
            ]
        );
        assert_eq!(
            run("min", &INPUT),
            [
                (1, 2.0),
                (70_000, 5.0),
                (1, -4.0),
                (2, 1.0),
                (70_000, 1.0),
                (1, -4.0)
            ]
        );
        assert_eq!(
            run("max", &INPUT),
            [
                (1, 2.0),
                (70_000, 5.0),
                (1, 2.0),
                (2, 1.0),
                (70_000, 5.0),
                (1, 8.0)
            ]
        );
        assert_eq!(
            run("mean", &INPUT),
            [
                (1, 2.0),
                (70_000, 5.0),
                (1, -1.0),
                (2, 1.0),
                (70_000, 3.0),
                (1, 2.0)
            ]
        );
    }

    #[test]
    fn state_lasts_across_batches_and_keeps_the_timestamp_type() {
        let mut op = reduce_operator(Aggregate::Sum);
        let r = Record::new(9, 1.5, 4).with_timestamp_type(TimestampType::Ingestion);
        process(op.as_mut(), &[r.clone(), r.clone()]);
        let mut out = Output::default();
        op.process(r.clone(), &mut out).unwrap();
        assert_eq!(
            out.records(),
            [Record::new(9, 4.5, 4).with_timestamp_type(TimestampType::Ingestion)]
        );
    }

    #[test]
    fn string_keys_sum_map_events() {
        let mut op = reduce_operator(Aggregate::Sum);
        let event = |v: i64| {
            let mut m = tidemark_runtime::Map::new();
            m.insert("user", "u1");
            m.insert("value", v);
            m
        };
        let out = process(
            op.as_mut(),
            &[
                Record::with_event("u1", event(2), 0),
                Record::with_event("u2", event(5), 0),
                Record::with_event("u1", event(3), 0),
            ],
        );
        let lines: Vec<String> = out.iter().map(Record::event_json).collect();
        assert_eq!(
            lines,
            [
                r#"{"key":"u1","value":2.0}"#,
                r#"{"key":"u2","value":5.0}"#,
                r#"{"key":"u1","value":5.0}"#
            ]
        );
        // An event without a numeric value is an error naming it.
        let mut out = Output::default();
        let e = op
            .process(
                Record::with_event("u1", tidemark_runtime::Map::new(), 0),
                &mut out,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "field `value` is missing or not a number in {}"
        );
        // count needs no value.
        let mut count = reduce_operator(Aggregate::Count);
        count
            .process(
                Record::with_event("u1", tidemark_runtime::Map::new(), 0),
                &mut out,
            )
            .unwrap();
        assert_eq!(out.records()[0].event_json(), r#"{"key":"u1","value":1.0}"#);
    }

    #[test]
    fn aggregate_is_required() {
        let err = build(json!({}), &BuildEnv::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `aggregate`"), "{err}");
    }
}
