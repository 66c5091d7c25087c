//! The `filter` operator: keeps the events a CEL condition holds for, and/or a fraction of the
//! keys chosen by a hash of the key.
//!
//! ```yaml
//! operators:
//!   paid:
//!     type: filter
//!     input: orders
//!     where: 'status == "paid" && amount > 100'   # CEL; must give a bool
//!     on_error: skip                              # fail (default) | skip | {dead_letter: PATH}
//!   some_users:
//!     type: filter
//!     input: clicks
//!     keep: 0.25     # fraction of keys kept, 0..=1 (default 1)
//! ```
//!
//! **`where`** is compiled when the job is built ([`crate::expr`]): a syntax error, an unknown
//! function or a condition known not to give a bool (`where: 'status'` is fine, `where: '"x"'`
//! is not) fails validation. A record is kept when the condition gives `true`; when it fails
//! on a record (a missing field, a type mismatch, an int division by zero) or gives something
//! other than a bool, `on_error` decides ([`crate::on_error`]). With both `where` and `keep`,
//! a record must pass both.
//!
//! **`keep`**: a record is kept iff the top 53 bits of a 64-bit hash of its key, read as a fraction of 1,
//! are below `keep`. So one key is always kept or always dropped, on every subtask and in every
//! run; `keep: 1` keeps all and `keep: 0` none; and the keys kept at a smaller `keep` are a
//! subset of those kept at a larger one. The hash (a SplitMix64 finaliser over the key with a
//! constant of its own) is independent of the one `hash` edges partition by, so a filter does
//! not unbalance the subtasks after it.

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config;
use crate::error::ConfigError;
use crate::expr::{self, Evaluator, Expr};
use crate::on_error::{ErrorPolicy, OnError, OnErrorFactory};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "filter",
    kind: ComponentKind::Operator,
    fields: &["where", "keep", "on_error"],
    summary: "keeps the events a CEL condition `where` holds for, or a fraction `keep` of the keys",
    build,
};

/// Settings of the `filter` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// The condition (CEL) an event must meet.
    #[serde(default, rename = "where")]
    pub condition: Option<String>,
    /// The fraction of keys kept, from 0 to 1.
    #[serde(default = "one")]
    pub keep: f64,
    /// What to do with a record the condition fails on.
    #[serde(default)]
    pub on_error: ErrorPolicy,
}

fn one() -> f64 {
    1.0
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: FilterConfig = config::parse(INFO.type_name, config)?;
    let op =
        FilterOperator::new(config.keep).map_err(|m| config::invalid(INFO.type_name, "keep", m))?;
    let Some(condition) = &config.condition else {
        return Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
            Ok(Box::new(op) as Box<dyn Operator>)
        })));
    };
    let condition = Expr::compile_condition(condition)
        .map_err(|e| e.into_config_error(INFO.type_name, "where"))?;
    let on_error = OnErrorFactory::new(config.on_error, &env.job_dir);
    Ok(Built::Operator(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(WhereFilter {
            keep: op,
            condition: condition.clone(),
            eval: Evaluator::new(),
            on_error: on_error.subtask(&ctx.vertex_id)?,
        }) as Box<dyn Operator>)
    })))
}

/// One subtask of a `filter` with `where`.
#[derive(Debug)]
pub struct WhereFilter {
    keep: FilterOperator,
    condition: Expr,
    eval: Evaluator,
    on_error: OnError,
}

impl WhereFilter {
    /// Records dropped because the condition failed on them (`on_error: skip` or a dead
    /// letter).
    pub fn expression_errors(&self) -> u64 {
        self.on_error.dropped
    }
}

impl Operator for WhereFilter {
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

    fn records_dropped(&self, reason: tidemark_runtime::DropReason) -> u64 {
        match reason {
            tidemark_runtime::DropReason::ExpressionError => self.on_error.dropped,
            _ => 0,
        }
    }

    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        if !self.keep.keeps(sample_key(&record)) {
            return Ok(());
        }
        let (eval, condition, on_error) = (&self.eval, &self.condition, &mut self.on_error);
        let kept = expr::with_record(&record, |scope| match eval.eval_bool(condition, scope) {
            Ok(kept) => Ok(kept),
            Err(e) => on_error.handle(condition, e, &scope.event).map(|()| false),
        })?;
        if kept {
            out.emit(record);
        }
        Ok(())
    }

    /// Takes each record ([`Record::take`]): a kept record is passed on without a
    /// reference count.
    fn process_batch_owned(
        &mut self,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<(), BoxError> {
        tidemark_runtime::process_taken(self, records, out)
    }
}

/// The filter's hash of a key.
#[inline(always)]
pub fn key_hash(key: u64) -> u64 {
    let mut z = key ^ 0x5851_F42D_4C95_7F2D;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What a sampling filter hashes for `record`: an int key itself (cheap, and the same keys are
/// kept as before the key hash became Kafka's murmur2), any other key its key hash.
#[inline(always)]
fn sample_key(record: &Record) -> u64 {
    match record.int_key() {
        Some(k) => k as u64,
        None => record.routing_hash() as u64,
    }
}

/// One subtask of the `filter` operator.
#[derive(Clone, Copy, Debug)]
pub struct FilterOperator {
    /// Kept iff `key_hash(key) >> 11 < threshold`; `2^53` keeps all.
    threshold: u64,
}

impl FilterOperator {
    /// A filter keeping the fraction `keep` of the keys.
    pub fn new(keep: f64) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&keep) {
            return Err(format!("{keep} is not a fraction from 0 to 1"));
        }
        Ok(FilterOperator {
            threshold: (keep * (1u64 << 53) as f64) as u64,
        })
    }

    /// Whether records with `key` pass.
    #[inline(always)]
    pub fn keeps(&self, key: u64) -> bool {
        key_hash(key) >> 11 < self.threshold
    }
}

impl Operator for FilterOperator {
    /// No processing-time timers: its task may sleep until input comes.
    fn uses_time(&self) -> bool {
        false
    }

    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        if self.keeps(sample_key(&record)) {
            out.emit(record);
        }
        Ok(())
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        match self.threshold {
            0 => {}
            t if t >= 1 << 53 => out.emit_all(records),
            _ => {
                for record in records {
                    if self.keeps(sample_key(record)) {
                        out.emit(record.clone());
                    }
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
    use tidemark_runtime::Value;

    #[test]
    fn events_kept_as_text_are_filtered_without_being_made() {
        let texts = [
            r#"{"id": 1, "status": "paid", "amount": 150}"#,
            r#"{"id": 2, "status": "open", "amount": 150}"#,
            r#"{"id": 3, "status": "paid", "amount": 50}"#,
        ];
        let input: Vec<Record> = texts
            .iter()
            .map(|t| Record::from_json_object(Value::Null, t.as_bytes(), 0).unwrap())
            .collect();
        // A condition the direct evaluator reads field by field.
        let mut op = operator(
            &INFO,
            json!({"where": r#"status == "paid" && amount > 100"#}),
        );
        let out = process(op.as_mut(), &input);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].event_json(), texts[0]);
        assert!(input.iter().all(|r| !r.event_made()));
        // One the `cel` interpreter evaluates (a function call): the event is made, the
        // result the same, and the text still written as read.
        let mut op = operator(
            &INFO,
            json!({"where": r#"status.startsWith("pa") && amount > 100"#}),
        );
        let out = process(op.as_mut(), &input);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].event_json(), texts[0]);
        assert!(input.iter().all(Record::event_made));
        // A missing field reads as one missing from the made event.
        let missing = Record::from_json_object(Value::Null, br#"{"a": 1}"#, 0).unwrap();
        let mut op = operator(&INFO, json!({"where": "b > 1", "on_error": "skip"}));
        assert!(process(op.as_mut(), &[missing]).is_empty());
        assert_eq!(
            op.records_dropped(tidemark_runtime::DropReason::ExpressionError),
            1
        );
    }

    fn kept_keys(keep: f64, keys: u64) -> Vec<u64> {
        let mut op = operator(&INFO, json!({ "keep": keep }));
        let input: Vec<Record> = (0..keys).map(|k| Record::new(k, k as f64, 0)).collect();
        let out = process(op.as_mut(), &input);
        assert!(out.iter().map(kv).all(|(k, v)| v == k as f64));
        out.iter().map(|r| kv(r).0).collect()
    }

    #[test]
    fn keeps_a_fraction_of_keys_by_hash() {
        assert_eq!(kept_keys(1.0, 1000).len(), 1000);
        assert!(kept_keys(0.0, 1000).is_empty());
        let quarter = kept_keys(0.25, 10_000);
        let half = kept_keys(0.5, 10_000);
        // About a quarter / half of the keys (the hash is fixed, so this is deterministic).
        assert!((2_300..2_700).contains(&quarter.len()), "{}", quarter.len());
        assert!((4_700..5_300).contains(&half.len()), "{}", half.len());
        assert!(quarter.iter().all(|k| half.contains(k)));
        // Not simply the smallest keys.
        assert!(quarter.iter().any(|&k| k > 9_000));
    }

    #[test]
    fn a_key_is_always_kept_or_always_dropped() {
        let mut op = operator(&INFO, json!({"keep": 0.5}));
        let input: Vec<Record> = (0..50)
            .flat_map(|k| [0, 1, 2].map(|_| Record::new(k, 1.0, 0)))
            .collect();
        let out = process(op.as_mut(), &input);
        assert_eq!(out.len() % 3, 0);
        for chunk in out.chunks(3) {
            assert!(chunk.iter().all(|r| r.key() == chunk[0].key()));
        }
        // Single-record processing agrees with the batch path.
        let mut single = FilterOperator::new(0.5).unwrap();
        let mut out2 = Output::default();
        for r in &input {
            single.process(r.clone(), &mut out2).unwrap();
        }
        assert_eq!(out2.records(), out);
    }

    fn filtered(settings: serde_json::Value, input: &[Record]) -> Result<Vec<Record>, String> {
        let mut op = operator(&INFO, settings);
        let mut out = Output::default();
        for r in input {
            op.process(r.clone(), &mut out).map_err(|e| e.to_string())?;
        }
        Ok(out.records().to_vec())
    }

    #[test]
    fn where_keeps_the_events_the_condition_holds_for() {
        let input: Vec<Record> = (0..10)
            .map(|k| Record::new(k, k as f64 / 2.0, k as i64 * 1_000_000))
            .collect();
        let kept = filtered(json!({"where": "value > 2"}), &input).unwrap();
        assert_eq!(kept, input[5..]);
        // Int and double compare by value; record fields too.
        let kept = filtered(
            json!({"where": "key >= 8 || record.timestamp == 1"}),
            &input,
        )
        .unwrap();
        assert_eq!(kept, [input[1].clone(), input[8].clone(), input[9].clone()]);
        // With keep, both must hold.
        let kept = filtered(json!({"where": "value >= 0", "keep": 0.0}), &input).unwrap();
        assert!(kept.is_empty());
    }

    #[test]
    fn where_failures_follow_on_error() {
        let input = [Record::new(1, 1.0, 0), Record::new(2, 0.0, 0)];
        // fail (default): names the expression, the error and the record.
        let err = filtered(json!({"where": "10 / int(value) > 2"}), &input).unwrap_err();
        assert_eq!(
            err,
            "expression `10 / int(value) > 2` failed: division by zero: 10 / 0; \
             record: {\"key\":2,\"value\":0.0}"
        );
        // skip: dropped and counted.
        let mut op = FilterConfigTest::op(json!({"where": "w > 2", "on_error": "skip"}));
        let mut out = Output::default();
        for r in &input {
            op.process(r.clone(), &mut out).unwrap();
        }
        assert!(out.is_empty());
        assert_eq!(op.expression_errors(), 2);
        // Not a bool at run time is an error too.
        let err = filtered(json!({"where": "value"}), &input).unwrap_err();
        assert!(
            err.contains("must give a bool, but gave a double 1.0"),
            "{err}"
        );
    }

    struct FilterConfigTest;
    impl FilterConfigTest {
        fn op(settings: serde_json::Value) -> WhereFilter {
            let config: FilterConfig = config::parse("filter", settings).unwrap();
            WhereFilter {
                keep: FilterOperator::new(config.keep).unwrap(),
                condition: Expr::compile_condition(config.condition.as_deref().unwrap()).unwrap(),
                eval: Evaluator::new(),
                on_error: OnErrorFactory::new(config.on_error, std::path::Path::new("."))
                    .subtask("f")
                    .unwrap(),
            }
        }
    }

    #[test]
    fn bad_conditions_fail_the_build_with_the_column() {
        for (condition, column, message) in [
            ("v +", 4, "syntax error"),
            ("'paid'", 1, "must give a bool, but gives a string"),
            (
                "value > 1 && lenght(s) > 2",
                14,
                "unknown function 'lenght'",
            ),
        ] {
            let err = build(json!({ "where": condition }), &BuildEnv::default()).unwrap_err();
            let ConfigError::Invalid { problems, .. } = &err else {
                panic!("{err}")
            };
            assert_eq!(problems[0].path, ["where"]);
            match &problems[0].problem {
                crate::SettingProblem::Expression {
                    expression,
                    line,
                    column: c,
                    message: m,
                } => {
                    assert_eq!((expression.as_str(), *line, *c), (condition, 1, column));
                    assert!(m.starts_with(message), "{m}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn keep_must_be_a_fraction() {
        for keep in [json!(1.5), json!(-0.1)] {
            let err = build(json!({ "keep": keep }), &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("is not a fraction from 0 to 1"), "{err}");
        }
    }

    #[test]
    fn dead_letters_are_cut_back_on_restore() {
        let records: Vec<Record> = (0..12)
            .map(|i| {
                let mut m = tidemark_runtime::Map::new();
                if i % 3 == 0 {
                    m.insert("v", i);
                } else {
                    m.insert("w", i);
                }
                Record::with_event(i, m, 0)
            })
            .collect();
        crate::test_util::dead_letters_survive_a_restore(
            |dir| crate::test_util::dead_lettered(&INFO, &json!({"where": "w > 2"}), dir),
            &records,
        );
    }
}
