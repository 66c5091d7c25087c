//! The `map` operator: sets and removes event fields with CEL expressions, or
//! `value = value * scale + offset`; with simulated CPU work per record.
//!
//! ```yaml
//! operators:
//!   enrich:
//!     type: map
//!     input: paid
//!     set:                                  # field: CEL expression over the INPUT event
//!       amount_eur: 'amount * 0.92'
//!       tier: 'amount > 1000 ? "gold" : "standard"'
//!     remove: [card_number]                 # fields to drop
//!     on_error: skip                        # fail (default) | skip | {dead_letter: PATH}
//!   work:
//!     type: map
//!     input: clicks
//!     cost: 2us      # busy CPU work per record (default 0)
//!     scale: 2       # default 1
//!     offset: 1      # default 0
//! ```
//!
//! **`set`/`remove`**: every `set` expression is evaluated against the input event, none of
//! them sees a field another one sets (so `a: 'b'` and `b: 'a'` swap two fields); then the
//! fields are set (a new field goes at the end, an existing one keeps its place), then the
//! `remove` fields are removed (a field not there is fine). Keys and timestamps pass through.
//! An expression that fails on a record (a missing field, a type mismatch, an int division by
//! zero) follows `on_error` ([`crate::on_error`]); the record is then not changed in part:
//! it is dropped whole, or the job fails. `set`/`remove` do not combine with
//! `scale`/`offset`.
//!
//! `cost` spins a counting loop through [`std::hint::black_box`] rather than reading the clock
//! per record: how many iterations take one microsecond is measured once per process
//! ([`spins_per_microsecond`]), when the first `map` with a cost is built. Under CPU contention
//! a record then takes longer than `cost`, as real work would. Keys and timestamps pass through.
//!
//! `scale` and `offset` work on the event's numeric field `value` (an int becomes a double);
//! an event without a numeric `value` fails the job, naming it, unless `scale` is 1 and
//! `offset` 0, when every event passes unchanged (a `map` with only `cost`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::value::Value;
use tidemark_runtime::{BoxError, DropReason, Operator, Output, Record, SubtaskContext};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, duration};
use crate::error::ConfigError;
use crate::expr::{self, Evaluator, Expr};
use crate::on_error::{ErrorPolicy, OnError, OnErrorFactory};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "map",
    kind: ComponentKind::Operator,
    fields: &["set", "remove", "on_error", "cost", "scale", "offset"],
    summary: "sets (CEL) and removes event fields, or value = value * scale + offset; `cost` of CPU work per record",
    build,
};

/// Settings of the `map` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapConfig {
    /// Fields to set: name -> CEL expression over the input event.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Fields to remove.
    #[serde(default)]
    pub remove: Vec<String>,
    /// What to do with a record an expression fails on.
    #[serde(default)]
    pub on_error: ErrorPolicy,
    /// Simulated CPU work per record.
    #[serde(default, with = "duration")]
    pub cost: Duration,
    /// Multiplies the value.
    #[serde(default = "one")]
    pub scale: f64,
    /// Is added to the scaled value.
    #[serde(default)]
    pub offset: f64,
}

fn one() -> f64 {
    1.0
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: MapConfig = config::parse(INFO.type_name, config)?;
    if !config.scale.is_finite() || !config.offset.is_finite() {
        return Err(config::invalid(
            INFO.type_name,
            "",
            "scale and offset must be finite numbers",
        ));
    }
    if !config.set.is_empty() || !config.remove.is_empty() {
        return build_set(config, env);
    }
    let op = MapOperator::new(&config);
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(Box::new(op) as Box<dyn Operator>)
    })))
}

/// A `map` with `set`/`remove`.
fn build_set(config: MapConfig, env: &BuildEnv) -> Result<Built, ConfigError> {
    if config.scale != 1.0 || config.offset != 0.0 {
        let field = if config.scale != 1.0 {
            "scale"
        } else {
            "offset"
        };
        return Err(config::invalid(
            INFO.type_name,
            field,
            "scale and offset do not combine with set/remove: write the arithmetic in `set`, \
             e.g. `value: 'value * 2.0 + 1.0'`",
        ));
    }
    let mut set = Vec::with_capacity(config.set.len());
    for (field, source) in &config.set {
        let expr = Expr::compile(source)
            .map_err(|e| e.into_config_error(INFO.type_name, &format!("set.{field}")))?;
        // Interned: every record gets the same static name, no allocation, no count.
        set.push((name_of(field), expr));
    }
    let remove: Vec<Arc<str>> = config
        .remove
        .iter()
        .map(|f| Arc::from(f.as_str()))
        .collect();
    let spins = MapOperator::new(&config).spins;
    let on_error = OnErrorFactory::new(config.on_error, &env.job_dir);
    Ok(Built::Operator(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(SetMap {
            set: set.clone(),
            remove: remove.clone(),
            spins,
            eval: Evaluator::new(),
            values: Vec::with_capacity(set.len()),
            on_error: on_error.subtask(&ctx.vertex_id)?,
        }) as Box<dyn Operator>)
    })))
}

/// One subtask of a `map` with `set`/`remove`.
#[derive(Debug)]
pub struct SetMap {
    set: Vec<(Name, Expr)>,
    remove: Vec<Arc<str>>,
    spins: u64,
    eval: Evaluator,
    /// The values of one record's `set` expressions, reused.
    values: Vec<Value>,
    on_error: OnError,
}

impl Operator for SetMap {
    /// No processing-time timers: its task may sleep until input comes.
    fn uses_time(&self) -> bool {
        false
    }

    /// The dead-letter file's length ([`OnError::snapshot`]).
    fn snapshot_local(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        self.on_error.snapshot(checkpoint)
    }

    /// Cuts the dead-letter file back to its recorded length ([`OnError::restore`]).
    fn restore_local(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.on_error.restore(state)
    }

    fn finish(&mut self, _now_nanos: i64, _out: &mut Output) -> Result<(), BoxError> {
        self.on_error.finish()
    }

    fn process(&mut self, mut record: Record, out: &mut Output) -> Result<(), BoxError> {
        spin(self.spins);
        let (eval, set, values, on_error) =
            (&self.eval, &self.set, &mut self.values, &mut self.on_error);
        values.clear();
        // Every expression over the input event, before any field changes.
        let ok = expr::with_record(&record, |scope| {
            for (_, e) in set {
                match eval.eval(e, scope) {
                    Ok(v) => values.push(v),
                    Err(err) => return on_error.handle(e, err, &scope.event).map(|()| false),
                }
            }
            Ok(true)
        })?;
        if !ok {
            return Ok(());
        }
        // Field by field: an event kept as text keeps its text, the new fields beside it
        // (`Record::set_field`), unless a field it has is set or removed.
        for ((field, _), value) in self.set.iter().zip(self.values.drain(..)) {
            record.set_field(field.clone(), value);
        }
        for field in &self.remove {
            record.remove(field);
        }
        out.emit(record);
        Ok(())
    }

    /// Takes each record ([`Record::take`]): setting a field then changes the
    /// event where it is instead of copying it first.
    fn process_batch_owned(
        &mut self,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<(), BoxError> {
        tidemark_runtime::process_taken(self, records, out)
    }

    fn records_dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::ExpressionError => self.on_error.dropped,
            _ => 0,
        }
    }
}

/// How many iterations of the spin loop take one microsecond on this machine, measured once.
pub fn spins_per_microsecond() -> f64 {
    static SPINS: OnceLock<f64> = OnceLock::new();
    *SPINS.get_or_init(|| {
        const N: u64 = 1_000_000;
        spin(N / 10); // warm up
        let fastest = (0..5)
            .map(|_| {
                let t = Instant::now();
                spin(N);
                t.elapsed()
            })
            .min()
            .expect("five runs");
        N as f64 / (fastest.as_nanos().max(1) as f64 / 1_000.0)
    })
}

/// Busy work: `iterations` rounds of a loop the optimiser cannot remove.
#[inline]
pub fn spin(iterations: u64) {
    let mut i = 0u64;
    while i < iterations {
        std::hint::black_box(i);
        i += 1;
    }
}

/// One subtask of the `map` operator.
#[derive(Clone, Copy, Debug)]
pub struct MapOperator {
    scale: f64,
    offset: f64,
    /// Spin-loop iterations per record.
    spins: u64,
}

impl MapOperator {
    /// A map with these settings; a non-zero `cost` is converted to spin iterations here.
    pub fn new(config: &MapConfig) -> Self {
        let spins = if config.cost.is_zero() {
            0
        } else {
            let micros = config.cost.as_nanos() as f64 / 1_000.0;
            ((micros * spins_per_microsecond()).round() as u64).max(1)
        };
        MapOperator {
            scale: config.scale,
            offset: config.offset,
            spins,
        }
    }

    /// Spin-loop iterations per record (0 without `cost`).
    pub fn spins_per_record(&self) -> u64 {
        self.spins
    }

    /// `value * scale + offset` on the event's numeric field `value` (an event without one
    /// is an error).
    #[inline(always)]
    fn apply(&self, record: &Record) -> Result<Record, BoxError> {
        let mut record = record.clone();
        self.apply_in_place(&mut record)?;
        Ok(record)
    }

    #[inline(always)]
    fn apply_in_place(&self, record: &mut Record) -> Result<(), BoxError> {
        if record.is_numeric() {
            let value = record.numeric_value().unwrap_or_default();
            record.set_numeric_value(value * self.scale + self.offset);
            Ok(())
        } else {
            self.apply_to_general(record)
        }
    }

    #[inline(never)]
    fn apply_to_general(&self, record: &mut Record) -> Result<(), BoxError> {
        if self.scale == 1.0 && self.offset == 0.0 {
            // No arithmetic asked for: the event passes unchanged, `value` or not.
            return Ok(());
        }
        let Some(value) = record.numeric_value() else {
            return Err(format!(
                "map: field `value` is missing or not a number in {}",
                record.event_json()
            )
            .into());
        };
        record.set("value", value * self.scale + self.offset);
        Ok(())
    }
}

impl Operator for MapOperator {
    /// No processing-time timers: its task may sleep until input comes.
    fn uses_time(&self) -> bool {
        false
    }

    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        spin(self.spins);
        out.emit(self.apply(&record)?);
        Ok(())
    }

    fn process_batch_in_place(&mut self, records: &mut [Record]) -> Result<bool, BoxError> {
        let (scale, offset) = (self.scale, self.offset);
        for record in records {
            spin(self.spins);
            match record.numeric_parts_mut() {
                Some((_, value)) => *value = *value * scale + offset,
                None => self.apply_to_general(record)?,
            }
        }
        Ok(true)
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        if self.spins == 0 {
            let (scale, offset) = (self.scale, self.offset);
            let mut rest = records;
            while !rest.is_empty() {
                // Runs of numeric records in one tight loop, the others one by one.
                let done = out.emit_numeric_mapped(rest, |_, value| value * scale + offset);
                rest = &rest[done..];
                if let Some((record, tail)) = rest.split_first() {
                    out.emit(self.apply(record)?);
                    rest = tail;
                }
            }
        } else {
            for record in records {
                spin(self.spins);
                out.emit(self.apply(record)?);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{operator, process, process_in_place};
    use serde_json::json;
    use tidemark_runtime::{Map, TimestampType};

    fn events(lines: &[&str]) -> Vec<Record> {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let Value::Map(m) = Value::from_json(l.as_bytes()).unwrap() else {
                    panic!("{l}")
                };
                Record::with_event(Value::from(format!("k{i}")), m, i as i64 * 1_000_000)
            })
            .collect()
    }

    fn set_map(settings: serde_json::Value, input: &[Record]) -> Result<Vec<String>, String> {
        let mut op = operator(&INFO, settings);
        let mut out = Output::default();
        for r in input {
            op.process(r.clone(), &mut out).map_err(|e| e.to_string())?;
        }
        Ok(out.records().iter().map(|r| r.event_json()).collect())
    }

    /// A batch the runtime hands over is taken, not cloned: `set` changes each event where it
    /// lies (the map keeps its address), and the result is what `process` gives.
    #[test]
    fn set_on_an_owned_batch_changes_events_without_copying_them() {
        let mut input = events(&[r#"{"v":1}"#, r#"{"v":2.5}"#]);
        let before: Vec<*const Map> = input
            .iter()
            .map(|r| &*r.event_map() as *const Map)
            .collect();
        let expected = set_map(json!({"set": {"double": "v * 2"}}), &input).unwrap();
        let mut op = operator(&INFO, json!({"set": {"double": "v * 2"}}));
        let mut out = Output::default();
        op.process_batch_owned(&mut input, &mut out).unwrap();
        let after: Vec<*const Map> = out
            .records()
            .iter()
            .map(|r| &*r.event_map() as *const Map)
            .collect();
        assert_eq!(after, before, "events were copied");
        let got: Vec<String> = out.records().iter().map(|r| r.event_json()).collect();
        assert_eq!(got, expected);
    }

    /// The spec's worked case: `set: {double: 'v * 2'}` writes `"double":2` for `v: 1` and
    /// `"double":5.0` for `v: 2.5`.
    #[test]
    fn set_keeps_ints_ints_and_doubles_doubles() {
        let input = events(&[r#"{"k":"a","v":1}"#, r#"{"k":"b","v":2.5}"#]);
        let out = set_map(json!({"set": {"double": "v * 2"}}), &input).unwrap();
        assert_eq!(
            out,
            [
                r#"{"k":"a","v":1,"double":2}"#,
                r#"{"k":"b","v":2.5,"double":5.0}"#
            ]
        );
    }

    #[test]
    fn set_reads_the_input_event_then_remove_drops_fields() {
        let input = events(&[r#"{"a":1,"b":"x","card":"4111","amount":1200}"#]);
        let out = set_map(
            json!({
                "set": {"a": "b", "b": "a", "eur": "amount * 0.92", "tier": "amount > 1000 ? 'gold' : 'standard'"},
                "remove": ["card", "nothing_here"],
            }),
            &input,
        )
        .unwrap();
        // Swapped (each saw the input), existing fields in place, new ones at the end.
        assert_eq!(
            out,
            [r#"{"a":"x","b":1,"amount":1200,"eur":1104.0,"tier":"gold"}"#]
        );
        // Keys and timestamps pass through; numeric records get fields too.
        let mut op = operator(
            &INFO,
            json!({"set": {"twice": "value * 2"}, "remove": ["key"]}),
        );
        let r = Record::new(7, 1.5, 42);
        let out = process(op.as_mut(), std::slice::from_ref(&r));
        assert_eq!(out[0].event_json(), r#"{"value":1.5,"twice":3.0}"#);
        assert_eq!((out[0].int_key(), out[0].timestamp), (Some(7), 42));
    }

    #[test]
    fn failures_follow_on_error_and_leave_no_half_set_record() {
        let input = events(&[r#"{"v":1}"#, r#"{"v":"x"}"#, r#"{"v":0}"#]);
        let err = set_map(json!({"set": {"a": "v + 1", "b": "10 / v"}}), &input).unwrap_err();
        assert_eq!(
            err,
            "expression `v + 1` failed: '+' cannot be applied to a string \"x\" and an int 1; \
             record: {\"v\":\"x\"}"
        );
        let mut op = operator(
            &INFO,
            json!({"set": {"a": "v + 1", "b": "10 / v"}, "on_error": "skip"}),
        );
        let mut out = Output::default();
        for r in &input {
            op.process(r.clone(), &mut out).unwrap();
        }
        let kept: Vec<String> = out.records().iter().map(|r| r.event_json()).collect();
        assert_eq!(kept, [r#"{"v":1,"a":2,"b":10}"#]);
        assert_eq!(op.records_dropped(DropReason::ExpressionError), 2);
    }

    #[test]
    fn set_settings_errors() {
        let err = build(json!({"set": {"x": "v *"}}), &BuildEnv::default()).unwrap_err();
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(problems[0].path, ["set", "x"]);
        assert!(
            matches!(
                &problems[0].problem,
                crate::SettingProblem::Expression { column: 4, .. }
            ),
            "{err}"
        );
        let err = build(json!({"set": {"x": "1"}, "scale": 2}), &BuildEnv::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("scale: scale and offset do not combine with set/remove"),
            "{err}"
        );
    }

    #[test]
    fn scales_and_offsets_values() {
        let mut op = operator(&INFO, json!({"scale": 2, "offset": 1}));
        let input = [
            Record::new(1, 0.0, 10),
            Record::new(2, -3.5, 20).with_timestamp_type(TimestampType::Ingestion),
            // Map events: an int `value` becomes a double, other fields stay.
            Record::with_event("a", map_event(r#"{"value":2,"s":"x"}"#), 30),
        ];
        let out = process(op.as_mut(), &input);
        assert_eq!(
            out,
            [
                Record::new(1, 1.0, 10),
                Record::new(2, -6.0, 20).with_timestamp_type(TimestampType::Ingestion),
                Record::with_event("a", map_event(r#"{"value":5.0,"s":"x"}"#), 30),
            ]
        );
        let mut identity = operator(&INFO, json!({}));
        let mut input = input.to_vec();
        input.push(Record::with_event(
            "b",
            map_event(r#"{"s":"no value"}"#),
            40,
        ));
        assert_eq!(process(identity.as_mut(), &input), input);
    }

    #[test]
    fn in_place_gives_what_emitting_gives() {
        let input = [
            Record::new(1, 0.0, 10),
            Record::new(2, -3.5, 20).with_timestamp_type(TimestampType::Ingestion),
            Record::with_event("a", map_event(r#"{"value":2,"s":"x"}"#), 30),
            Record::new(u64::MAX, 7.25, 40),
        ];
        for settings in [json!({"scale": 2, "offset": 1}), json!({"cost": "1ns"})] {
            let mut emitting = operator(&INFO, settings.clone());
            let mut in_place = operator(&INFO, settings);
            let expected = process(emitting.as_mut(), &input);
            assert_eq!(process_in_place(in_place.as_mut(), &input), expected);
        }
        // An event without a numeric value fails in place too.
        let mut op = operator(&INFO, json!({"scale": 2}));
        let mut bad = vec![Record::with_event("a", map_event(r#"{"s":1}"#), 0)];
        assert!(op.process_batch_in_place(&mut bad).is_err());
    }

    fn map_event(s: &str) -> tidemark_runtime::Map {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn an_event_without_a_numeric_value_is_an_error() {
        let mut op = operator(&INFO, json!({"scale": 2}));
        let mut out = Output::default();
        let e = op
            .process(
                Record::with_event("a", map_event(r#"{"value":"x"}"#), 0),
                &mut out,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"map: field `value` is missing or not a number in {"value":"x"}"#
        );
    }

    #[test]
    fn cost_becomes_spins_in_proportion() {
        let one = MapOperator::new(&config::parse("map", json!({"cost": "1us"})).unwrap());
        let ten = MapOperator::new(&config::parse("map", json!({"cost": "10us"})).unwrap());
        let none = MapOperator::new(&config::parse("map", json!({})).unwrap());
        assert_eq!(none.spins_per_record(), 0);
        assert!(one.spins_per_record() >= 1);
        let ratio = ten.spins_per_record() as f64 / one.spins_per_record() as f64;
        assert!((9.0..=11.0).contains(&ratio), "{ratio}");
        // With a cost, records still come out right.
        let mut op = ten;
        let mut out = Output::default();
        op.process(Record::new(1, 2.0, 3), &mut out).unwrap();
        assert_eq!(out.records(), [Record::new(1, 2.0, 3)]);
    }

    #[test]
    fn bad_settings_are_named() {
        for (settings, expected) in [
            (
                json!({"cost": "2 parsecs"}),
                "cost: invalid duration \"2 parsecs\"",
            ),
            (
                json!({"scale": "x"}),
                "scale: invalid type: string \"x\", expected f64",
            ),
            (
                json!({"cots": "1us"}),
                "unknown field `cots`, expected one of `set`, `remove`, `on_error`, `cost`, `scale`, `offset`",
            ),
        ] {
            let err = build(settings, &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn dead_letters_are_cut_back_on_restore() {
        let records: Vec<Record> = (0..12)
            .map(|i| {
                let mut m = tidemark_runtime::Map::new();
                m.insert("v", i % 3);
                Record::with_event(i, m, 0)
            })
            .collect();
        crate::test_util::dead_letters_survive_a_restore(
            |dir| crate::test_util::dead_lettered(&INFO, &json!({"set": {"q": "10 / v"}}), dir),
            &records,
        );
    }
}
