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
//!   per_customer:
//!     type: reduce
//!     input: orders
//!     key: customer_id    # the hash edge's key (CEL), see `key_by`
//!     aggregates:         # output field -> count, or {sum|min|max|mean: CEL expression}
//!       orders: count
//!       total: {sum: amount}
//!     on_error: skip      # fail (default) | skip | {dead_letter: PATH}
//! ```
//!
//! **`aggregates`** ([`crate::aggregates`]): each record comes out as the event
//! `{"key": <key>, <each aggregate>}` — the running aggregates of its key over every record this
//! subtask has seen, itself included — with the record's timestamp. A record an expression
//! fails on follows `on_error` and counts in no aggregate. Each output carries the input's
//! origin and the result id [`ResultId::Reduce`] (this vertex): with the key and the origin it
//! names the output, the same when the input is read again after a failover
//! ([`tidemark_runtime::provenance`]). The older form's outputs carry no result id.
//!
//! **`aggregate`** (the older form, over the numeric field `value`):
//! Each record comes out with its key and timestamp and, as its value, the aggregate of all the
//! values of its key this subtask has seen, itself included. State is per subtask: without a
//! `hash` edge in front, a key's records spread over subtasks each keep their own aggregate.
//! `min` and `max` ignore NaN values (unless all are NaN).
//!
//! Both forms are one operator keeping every key's accumulators in one
//! `KeyedAccs`. The older form's batch loop is the hot path of numeric throughput jobs: it is
//! monomorphised per aggregate (no branch per record) and int keys below 65,536 find their slot
//! through a vector instead of hashing.

use serde::Deserialize;
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::provenance::ResultId;
use tidemark_runtime::value::Map;
#[cfg(test)]
use tidemark_runtime::value::Value;
use tidemark_runtime::{BoxError, DropReason, Operator, Output, Record, SubtaskContext};

use crate::aggregate::{dense_acc, input, with_aggregator, Aggregator, KeyedAccs};
use crate::aggregates::{Aggregates, AggregatesConfig};
use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, Aggregate};
use crate::error::ConfigError;
use crate::expr::{self, Evaluator, Number};
use crate::on_error::{ErrorPolicy, OnError, OnErrorFactory};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "reduce",
    kind: ComponentKind::Operator,
    fields: &["aggregate", "aggregates", "on_error"],
    summary: "running aggregate per key (count, sum, min, max, mean), one output per input",
    build,
};

/// Settings of the `reduce` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceConfig {
    /// What to compute over each key's `value`s (the older form).
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    /// Named aggregates over CEL expressions.
    #[serde(default)]
    pub aggregates: Option<AggregatesConfig>,
    /// What to do with a record an expression fails on (with `aggregates`).
    #[serde(default)]
    pub on_error: ErrorPolicy,
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: ReduceConfig = config::parse(INFO.type_name, config)?;
    match (config.aggregate, &config.aggregates) {
        (Some(aggregate), None) => Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
            Ok(reduce_operator(aggregate))
        }))),
        (None, Some(aggregates)) => {
            let aggregates = aggregates
                .compile()
                .map_err(|(path, e)| e.into_config_error(INFO.type_name, &path))?;
            let on_error = OnErrorFactory::new(config.on_error, &env.job_dir);
            Ok(Built::Operator(Box::new(move |ctx: &SubtaskContext| {
                Ok(Box::new(ReduceOperator {
                    state: KeyedAccs::new(aggregates.specs.len()),
                    form: Form::Aggregates {
                        aggregates: aggregates.clone(),
                        eval: Evaluator::new(),
                        values: Vec::new(),
                        on_error: on_error.subtask(&ctx.vertex_id)?,
                    },
                    vertex: name_of(&ctx.vertex_id),
                }) as Box<dyn Operator>)
            })))
        }
        (Some(_), Some(_)) => Err(config::invalid(
            INFO.type_name,
            "aggregate",
            "give `aggregate` (of value) or `aggregates`, not both",
        )),
        (None, None) => Err(config::invalid(
            INFO.type_name,
            "",
            "missing field `aggregates` (or the older `aggregate`): what to compute per key, \
             e.g. `aggregates: {n: count, total: {sum: amount}}`",
        )),
    }
}

/// What a `reduce` computes.
#[derive(Debug)]
enum Form {
    /// The old single `aggregate` of the numeric field `value`: outputs `{"key", "value"}` (a
    /// numeric record for an int key).
    Value(Aggregate),
    /// `aggregates`: outputs `{"key", <each aggregate>}`.
    Aggregates {
        aggregates: Aggregates,
        eval: Evaluator,
        /// One record's values, reused.
        values: Vec<Option<Number>>,
        on_error: OnError,
    },
}

/// One subtask of the `reduce` operator: the running aggregates of every key in one
/// [`KeyedAccs`] (one accumulator per aggregate per key).
#[derive(Debug)]
pub struct ReduceOperator {
    state: KeyedAccs,
    form: Form,
    /// This vertex: named in each output's result id (`aggregates:` only).
    vertex: Name,
}

/// A new `reduce` subtask computing the old single `aggregate`.
pub fn reduce_operator(aggregate: Aggregate) -> Box<dyn Operator> {
    Box::new(ReduceOperator {
        state: KeyedAccs::new(1),
        form: Form::Value(aggregate),
        vertex: Name::default(),
    })
}

/// The output for `record` whose key's aggregate is now `value`: `{"key": <key>, "value":
/// value}` with the record's key and timestamp.
#[inline]
fn output(record: &Record, value: f64) -> Record {
    let mut out = Record::keyed_value(&record.key(), value, record.timestamp);
    out.timestamp_type = record.timestamp_type;
    out
}

/// The old single aggregate `A` of `record`'s key, with `record` added.
#[inline(always)]
fn add_value<A: Aggregator>(state: &mut KeyedAccs, record: &Record) -> Result<f64, BoxError> {
    let v = input::<A>(record)?;
    Ok(A::update(&mut state.get_for(record)[0], v))
}

/// The old single aggregate `A` over `records`, each replaced by its output.
fn value_batch_in_place<A: Aggregator>(
    state: &mut KeyedAccs,
    records: &mut [Record],
) -> Result<(), BoxError> {
    let mut i = 0;
    while i < records.len() {
        // Numeric records whose key has a dense slot, with the slots' address in a register;
        // any other record stops the loop and takes the general path below.
        let dense = state.dense_accs();
        while let Some(record) = records.get_mut(i) {
            let Some((key, value)) = record.numeric_parts_mut() else {
                break;
            };
            let Some(acc) = dense_acc(dense, key) else {
                break;
            };
            *value = A::update(acc, *value);
            i += 1;
        }
        if let Some(record) = records.get_mut(i) {
            let value = add_value::<A>(state, record)?;
            *record = output(record, value);
            i += 1;
        }
    }
    Ok(())
}

/// The old single aggregate `A` over `records`, emitting an output for each.
fn value_batch<A: Aggregator>(
    state: &mut KeyedAccs,
    records: &[Record],
    out: &mut Output,
) -> Result<(), BoxError> {
    let mut rest = records;
    while !rest.is_empty() {
        // Runs of numeric records whose key has a dense slot in one tight loop (the slots'
        // address in a register); any other record takes the general path below.
        let dense = state.dense_accs();
        let done = out.emit_numeric_mapped_while(rest, |key, v| {
            dense_acc(dense, key).map(|acc| A::update(acc, v))
        });
        rest = &rest[done..];
        if let Some((record, tail)) = rest.split_first() {
            let value = add_value::<A>(state, record)?;
            out.emit(output(record, value));
            rest = tail;
        }
    }
    Ok(())
}

impl ReduceOperator {
    /// `aggregates:` over `record`: its key's running aggregates, or nothing when an
    /// expression failed and `on_error` let the record go.
    fn aggregates(&mut self, record: &Record) -> Result<Option<Record>, BoxError> {
        let Form::Aggregates {
            aggregates,
            eval,
            values,
            on_error,
        } = &mut self.form
        else {
            unreachable!("called for aggregates only")
        };
        let ok = expr::with_record(record, |scope| {
            match aggregates.values(eval, scope, values) {
                Ok(()) => Ok(true),
                Err((e, err)) => on_error.handle(e, err, &scope.event).map(|()| false),
            }
        })?;
        if !ok {
            return Ok(None);
        }
        let key = record.key();
        let state = self.state.get(&key);
        aggregates.update(state, values);
        let mut event = Map::with_capacity(1 + aggregates.specs.len());
        event.insert(arcstr::literal!("key"), key.clone().into_owned());
        aggregates.write(state, &mut event);
        let mut output = Record::with_event(key.into_owned(), event, record.timestamp)
            .with_timestamp_type(record.timestamp_type);
        output.set_result_id(ResultId::Reduce {
            vertex: self.vertex.clone(),
        });
        if let Some(origin) = record.origin() {
            output.set_origin(origin.clone());
        }
        Ok(Some(output))
    }
}

impl Operator for ReduceOperator {
    /// No processing-time timers: its task may sleep until input comes.
    fn uses_time(&self) -> bool {
        false
    }

    // Read about once a second: kept out of line, away from the per-record code.
    #[cold]
    #[inline(never)]
    fn state_size(&self) -> Option<tidemark_runtime::StateSize> {
        Some(tidemark_runtime::StateSize {
            keys: self.state.len() as u64,
            windows_open: 0,
            bytes: self.state.estimated_bytes() as u64,
        })
    }

    #[inline]
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        match self.form {
            Form::Value(aggregate) => {
                let value =
                    with_aggregator!(aggregate, A => add_value::<A>(&mut self.state, &record))?;
                out.emit(output(&record, value));
            }
            Form::Aggregates { .. } => {
                if let Some(output) = self.aggregates(&record)? {
                    out.emit(output);
                }
            }
        }
        Ok(())
    }

    fn process_batch_in_place(&mut self, records: &mut [Record]) -> Result<bool, BoxError> {
        match self.form {
            Form::Value(aggregate) => {
                with_aggregator!(aggregate, A => value_batch_in_place::<A>(&mut self.state, records))?;
                Ok(true)
            }
            Form::Aggregates { .. } => Ok(false),
        }
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        match self.form {
            Form::Value(aggregate) => {
                with_aggregator!(aggregate, A => value_batch::<A>(&mut self.state, records, out))
            }
            Form::Aggregates { .. } => {
                for record in records {
                    if let Some(output) = self.aggregates(record)? {
                        out.emit(output);
                    }
                }
                Ok(())
            }
        }
    }

    fn records_dropped(&self, reason: DropReason) -> u64 {
        match (&self.form, reason) {
            (Form::Aggregates { on_error, .. }, DropReason::ExpressionError) => on_error.dropped,
            _ => 0,
        }
    }

    /// Its accumulators per key: the runtime snapshots, restores and moves them.
    fn keyed_table(&mut self) -> Option<&mut dyn tidemark_runtime::keyed_table::KeyedTable> {
        Some(&mut self.state)
    }

    /// The length of the `on_error` dead-letter file ([`OnError::snapshot`]).
    fn snapshot_local(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        match &mut self.form {
            Form::Aggregates { on_error, .. } => on_error.snapshot(checkpoint),
            Form::Value(_) => Ok(None),
        }
    }

    /// Cuts the dead-letter file back to its recorded length ([`OnError::restore`]).
    fn restore_local(&mut self, state: &[u8]) -> Result<(), BoxError> {
        match &mut self.form {
            Form::Aggregates { on_error, .. } => on_error.restore(state),
            Form::Value(_) => Err(
                "the checkpoint recorded a dead-letter file for this reduce, \
                                   which has none now"
                    .into(),
            ),
        }
    }

    fn finish(&mut self, _now_nanos: i64, _out: &mut Output) -> Result<(), BoxError> {
        match &mut self.form {
            Form::Aggregates { on_error, .. } => on_error.finish(),
            Form::Value(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{kv, operator, process, process_in_place};
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
    fn in_place_gives_what_emitting_gives() {
        let event = |v: i64| {
            let mut m = tidemark_runtime::Map::new();
            m.insert("value", v);
            m
        };
        // Dense keys, a large and a negative one (hash map), string keys, map events with an
        // int value; a key's state carries over to the next batch.
        let batches = [
            vec![
                Record::new(1, 2.0, 1),
                Record::new(70_000, 5.0, 2).with_timestamp_type(TimestampType::Ingestion),
                Record::with_event("u1", event(3), 3),
                Record::new(1, -4.0, 4),
                Record::new(u64::MAX, 1.5, 5),
                Record::with_event(1, event(10), 6),
            ],
            vec![
                Record::new(2, 1.0, 7),
                Record::with_event("u1", event(4), 8),
                Record::new(70_000, 1.0, 9),
                Record::new(1, 8.0, 10),
                Record::new(u64::MAX, 0.5, 11),
            ],
        ];
        for aggregate in [
            Aggregate::Count,
            Aggregate::Sum,
            Aggregate::Min,
            Aggregate::Max,
            Aggregate::Mean,
        ] {
            let mut emitting = reduce_operator(aggregate);
            let mut in_place = reduce_operator(aggregate);
            for batch in &batches {
                let expected = process(emitting.as_mut(), batch);
                assert_eq!(
                    process_in_place(in_place.as_mut(), batch),
                    expected,
                    "{aggregate:?}"
                );
            }
        }
        // A map event without a numeric value fails in place too.
        let mut op = reduce_operator(Aggregate::Sum);
        let mut bad = vec![Record::with_event("u1", tidemark_runtime::Map::new(), 0)];
        assert!(op.process_batch_in_place(&mut bad).is_err());
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
        assert!(
            err.contains("missing field `aggregates` (or the older `aggregate`)"),
            "{err}"
        );
        let err = build(
            json!({"aggregate": "sum", "aggregates": {"n": "count"}}),
            &BuildEnv::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("not both"), "{err}");
        let err = build(
            json!({"aggregates": {"t": {"sum": "v +"}}}),
            &BuildEnv::default(),
        )
        .unwrap_err();
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(problems[0].path, ["aggregates", "t", "sum"]);
    }

    fn event(key: &str, json: &str, ts: i64) -> Record {
        let Value::Map(m) = Value::from_json(json.as_bytes()).unwrap() else {
            panic!("{json}")
        };
        Record::with_event(Value::from(key), m, ts)
    }

    #[test]
    fn running_aggregates_over_expressions_per_key() {
        let mut op = operator(
            &INFO,
            json!({"aggregates": {"n": "count", "s": {"sum": "v"}, "hi": {"max": "v * 2"}, "avg": {"mean": "v"}}}),
        );
        let input = [
            event("a", r#"{"k":"a","v":1}"#, 10),
            event("b", r#"{"k":"b","v":2.5}"#, 20),
            event("a", r#"{"k":"a","v":3}"#, 30),
        ];
        let out = process(op.as_mut(), &input);
        let lines: Vec<String> = out.iter().map(|r| r.event_json()).collect();
        assert_eq!(
            lines,
            [
                r#"{"key":"a","avg":1.0,"hi":2,"n":1,"s":1}"#,
                r#"{"key":"b","avg":2.5,"hi":5.0,"n":1,"s":2.5}"#,
                r#"{"key":"a","avg":2.0,"hi":6,"n":2,"s":4}"#,
            ]
        );
        let times: Vec<i64> = out.iter().map(|r| r.timestamp).collect();
        assert_eq!(times, [10, 20, 30]);
        assert_eq!(out[2].key().into_owned(), Value::from("a"));
    }

    #[test]
    fn each_output_names_this_vertex_and_carries_its_inputs_origin() {
        use tidemark_runtime::name::name_of;
        use tidemark_runtime::provenance::{write_result_id, Origin};
        let mut op = operator(&INFO, json!({"aggregates": {"n": "count"}}));
        let origin = |offset| Origin {
            topic: name_of("orders"),
            partition: 2,
            offset,
            seq: 0,
        };
        let mut first = event("a", r#"{"v":1}"#, 10);
        first.set_origin(origin(7));
        let mut second = event("a", r#"{"v":1}"#, 20);
        second.set_origin(origin(8));
        let out = process(op.as_mut(), &[first, second, event("b", "{}", 30)]);
        let ids: Vec<Option<String>> = out
            .iter()
            .map(|r| {
                let mut text = Vec::new();
                write_result_id(r, &mut text).then(|| String::from_utf8(text).unwrap())
            })
            .collect();
        let vertex = &crate::test_util::ctx(0, 1, 0).vertex_id;
        assert_eq!(
            ids,
            [
                Some(format!("reduce/{vertex}/orders/2/7/0/\"a\"")),
                Some(format!("reduce/{vertex}/orders/2/8/0/\"a\"")),
                // An input without an origin (not from Kafka): no id.
                None,
            ]
        );
        assert_eq!(out[1].origin(), Some(&origin(8)));
    }

    #[test]
    fn aggregate_failures_follow_on_error() {
        let settings = json!({"aggregates": {"s": {"sum": "v"}}, "on_error": "skip"});
        let mut op = operator(&INFO, settings);
        let input = [
            event("a", r#"{"v":1}"#, 0),
            event("a", r#"{"v":"x"}"#, 0),
            event("a", r#"{"w":1}"#, 0),
            event("a", r#"{"v":2}"#, 0),
        ];
        let out = process(op.as_mut(), &input);
        let lines: Vec<String> = out.iter().map(|r| r.event_json()).collect();
        assert_eq!(lines, [r#"{"key":"a","s":1}"#, r#"{"key":"a","s":3}"#]);
        assert_eq!(op.records_dropped(DropReason::ExpressionError), 2);
        let mut op = operator(&INFO, json!({"aggregates": {"s": {"sum": "v"}}}));
        let mut out = Output::default();
        let err = op
            .process(input[1].clone(), &mut out)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "expression `v` failed: must give a number, but gave a string \"x\"; record: {\"v\":\"x\"}"
        );
    }

    #[test]
    fn dead_letters_are_cut_back_on_restore() {
        let records: Vec<Record> = (0..12)
            .map(|i| match i % 3 {
                0 => event("a", &format!(r#"{{"v":"x{i}"}}"#), i),
                _ => event("a", &format!(r#"{{"v":{i}}}"#), i),
            })
            .collect();
        crate::test_util::dead_letters_survive_a_restore(
            |dir| {
                crate::test_util::dead_lettered(
                    &INFO,
                    &json!({"aggregates": {"s": {"sum": "v"}}}),
                    dir,
                )
            },
            &records,
        );
    }
}

/// Pins the output of the old single `aggregate:` (every function, every way of processing a
/// batch) to what the original operator wrote, byte for byte.
#[cfg(test)]
mod legacy_output {
    use super::*;
    use crate::operators::window::legacy_output::{show, transcript, value_event, Step};
    use crate::test_util::operator;
    use serde_json::json;
    use std::fmt::Write as _;

    fn mixed() -> Vec<Record> {
        vec![
            Record::new(3, 1.5, 10),
            Record::new(70_000, -2.0, 20)
                .with_timestamp_type(tidemark_runtime::TimestampType::Ingestion),
            value_event(Value::from("b"), json!(4), 30),
            Record::new(u64::MAX, 0.25, 40),
            Record::new(1, f64::NAN, 50),
            value_event(Value::from("a"), json!(2.5), 60),
            Record::new(3, -0.0, 70),
            Record::new(1, 7.0, 80),
            value_event(Value::from("b"), json!(-1), 90),
            Record::new(0, 0.0, 100),
            value_event(Value::Int(2), json!(5), 110),
            value_event(Value::Int(-7), json!(1e300), 120),
            Record::new(3, 2.0, 130),
            Record::new(70_000, 9.0, 140),
        ]
    }

    #[test]
    fn every_function_and_batch_path() {
        let mut all = String::new();
        for f in ["count", "sum", "min", "max", "mean"] {
            let mut op = operator(&INFO, json!({ "aggregate": f }));
            let steps = vec![
                Step::Batch(mixed()),
                Step::One(Record::new(3, 1.0, 5)),
                Step::Batch(vec![value_event(Value::from("x"), json!("no"), 0)]),
                Step::Finish(0),
            ];
            writeln!(all, "== {f}\n{}", transcript(op.as_mut(), steps)).unwrap();
            let mut records = mixed();
            match op.process_batch_in_place(&mut records) {
                Ok(done) => writeln!(all, "in place {done}").unwrap(),
                Err(e) => writeln!(all, "in place error: {e}").unwrap(),
            }
            show(&mut all, &records);
            let mut bad = vec![
                Record::new(1, 1.0, 0),
                value_event(Value::from("x"), json!(null), 0),
            ];
            match op.process_batch_in_place(&mut bad) {
                Ok(done) => writeln!(all, "in place {done}").unwrap(),
                Err(e) => writeln!(all, "in place error: {e}").unwrap(),
            }
        }
        assert_eq!(all, EVERY_FUNCTION);
    }

    const EVERY_FUNCTION: &str = r##"== count
batch
  {"key":3,"value":1.0} key=3 @10 Create numeric
  {"key":70000,"value":1.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":1.0} key="b" @30 Create
  {"key":-1,"value":1.0} key=-1 @40 Create numeric
  {"key":1,"value":1.0} key=1 @50 Create numeric
  {"key":"a","value":1.0} key="a" @60 Create
  {"key":3,"value":2.0} key=3 @70 Create numeric
  {"key":1,"value":2.0} key=1 @80 Create numeric
  {"key":"b","value":2.0} key="b" @90 Create
  {"key":0,"value":1.0} key=0 @100 Create numeric
  {"key":2,"value":1.0} key=2 @110 Create numeric
  {"key":-7,"value":1.0} key=-7 @120 Create numeric
  {"key":3,"value":3.0} key=3 @130 Create numeric
  {"key":70000,"value":2.0} key=70000 @140 Create numeric
one
  {"key":3,"value":4.0} key=3 @5 Create numeric
batch
  {"key":"x","value":1.0} key="x" @0 Create
finish
late 0 dropped late 0 expr 0

in place true
  {"key":3,"value":5.0} key=3 @10 Create numeric
  {"key":70000,"value":3.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":3.0} key="b" @30 Create
  {"key":-1,"value":2.0} key=-1 @40 Create numeric
  {"key":1,"value":3.0} key=1 @50 Create numeric
  {"key":"a","value":2.0} key="a" @60 Create
  {"key":3,"value":6.0} key=3 @70 Create numeric
  {"key":1,"value":4.0} key=1 @80 Create numeric
  {"key":"b","value":4.0} key="b" @90 Create
  {"key":0,"value":2.0} key=0 @100 Create numeric
  {"key":2,"value":2.0} key=2 @110 Create numeric
  {"key":-7,"value":2.0} key=-7 @120 Create numeric
  {"key":3,"value":7.0} key=3 @130 Create numeric
  {"key":70000,"value":4.0} key=70000 @140 Create numeric
in place true
== sum
batch
  {"key":3,"value":1.5} key=3 @10 Create numeric
  {"key":70000,"value":-2.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":4.0} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":null} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":1.5} key=3 @70 Create numeric
  {"key":1,"value":null} key=1 @80 Create numeric
  {"key":"b","value":3.0} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":3.5} key=3 @130 Create numeric
  {"key":70000,"value":7.0} key=70000 @140 Create numeric
one
  {"key":3,"value":4.5} key=3 @5 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
finish
late 0 dropped late 0 expr 0

in place true
  {"key":3,"value":6.0} key=3 @10 Create numeric
  {"key":70000,"value":5.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":7.0} key="b" @30 Create
  {"key":-1,"value":0.5} key=-1 @40 Create numeric
  {"key":1,"value":null} key=1 @50 Create numeric
  {"key":"a","value":5.0} key="a" @60 Create
  {"key":3,"value":6.0} key=3 @70 Create numeric
  {"key":1,"value":null} key=1 @80 Create numeric
  {"key":"b","value":6.0} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":10.0} key=2 @110 Create numeric
  {"key":-7,"value":2e+300} key=-7 @120 Create numeric
  {"key":3,"value":8.0} key=3 @130 Create numeric
  {"key":70000,"value":14.0} key=70000 @140 Create numeric
in place error: field `value` is missing or not a number in {"value":null}
== min
batch
  {"key":3,"value":1.5} key=3 @10 Create numeric
  {"key":70000,"value":-2.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":4.0} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":null} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":-0.0} key=3 @70 Create numeric
  {"key":1,"value":7.0} key=1 @80 Create numeric
  {"key":"b","value":-1.0} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":-0.0} key=3 @130 Create numeric
  {"key":70000,"value":-2.0} key=70000 @140 Create numeric
one
  {"key":3,"value":-0.0} key=3 @5 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
finish
late 0 dropped late 0 expr 0

in place true
  {"key":3,"value":-0.0} key=3 @10 Create numeric
  {"key":70000,"value":-2.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":-1.0} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":7.0} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":-0.0} key=3 @70 Create numeric
  {"key":1,"value":7.0} key=1 @80 Create numeric
  {"key":"b","value":-1.0} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":-0.0} key=3 @130 Create numeric
  {"key":70000,"value":-2.0} key=70000 @140 Create numeric
in place error: field `value` is missing or not a number in {"value":null}
== max
batch
  {"key":3,"value":1.5} key=3 @10 Create numeric
  {"key":70000,"value":-2.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":4.0} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":null} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":1.5} key=3 @70 Create numeric
  {"key":1,"value":7.0} key=1 @80 Create numeric
  {"key":"b","value":4.0} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":2.0} key=3 @130 Create numeric
  {"key":70000,"value":9.0} key=70000 @140 Create numeric
one
  {"key":3,"value":2.0} key=3 @5 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
finish
late 0 dropped late 0 expr 0

in place true
  {"key":3,"value":2.0} key=3 @10 Create numeric
  {"key":70000,"value":9.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":4.0} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":7.0} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":2.0} key=3 @70 Create numeric
  {"key":1,"value":7.0} key=1 @80 Create numeric
  {"key":"b","value":4.0} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":2.0} key=3 @130 Create numeric
  {"key":70000,"value":9.0} key=70000 @140 Create numeric
in place error: field `value` is missing or not a number in {"value":null}
== mean
batch
  {"key":3,"value":1.5} key=3 @10 Create numeric
  {"key":70000,"value":-2.0} key=70000 @20 Ingestion numeric
  {"key":"b","value":4.0} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":null} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":0.75} key=3 @70 Create numeric
  {"key":1,"value":null} key=1 @80 Create numeric
  {"key":"b","value":1.5} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":1.1666666666666667} key=3 @130 Create numeric
  {"key":70000,"value":3.5} key=70000 @140 Create numeric
one
  {"key":3,"value":1.125} key=3 @5 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
finish
late 0 dropped late 0 expr 0

in place true
  {"key":3,"value":1.2} key=3 @10 Create numeric
  {"key":70000,"value":1.6666666666666667} key=70000 @20 Ingestion numeric
  {"key":"b","value":2.3333333333333335} key="b" @30 Create
  {"key":-1,"value":0.25} key=-1 @40 Create numeric
  {"key":1,"value":null} key=1 @50 Create numeric
  {"key":"a","value":2.5} key="a" @60 Create
  {"key":3,"value":1.0} key=3 @70 Create numeric
  {"key":1,"value":null} key=1 @80 Create numeric
  {"key":"b","value":1.5} key="b" @90 Create
  {"key":0,"value":0.0} key=0 @100 Create numeric
  {"key":2,"value":5.0} key=2 @110 Create numeric
  {"key":-7,"value":1e+300} key=-7 @120 Create numeric
  {"key":3,"value":1.1428571428571428} key=3 @130 Create numeric
  {"key":70000,"value":3.5} key=70000 @140 Create numeric
in place error: field `value` is missing or not a number in {"value":null}
"##;
}
