//! `aggregates:` on `window` and `reduce`: named functions over CEL expressions, and the
//! per-key state that computes them.
//!
//! ```yaml
//! aggregates:                  # output field -> function
//!   orders: count              # records
//!   total: {sum: amount_eur}   # sum | min | max | mean over an expression
//!   biggest: {max: amount_eur}
//!   mean_amount: {mean: amount}
//! ```
//!
//! - `count` counts records; the others skip records whose expression gives `null` (and give
//!   `null` themselves when every value was `null`).
//! - `sum` of ints is an int, exact, while it fits in 64 bits; a double anywhere (or an int sum
//!   that would overflow) makes it a double from then on. `min` and `max` compare ints and
//!   doubles by value and give the value as it was (an int stays an int). `mean` is a double:
//!   the (exact while it fits) sum divided by the count.
//! - A value that is not a number (a string, say) is an expression error, handled by the
//!   vertex's `on_error` like any other; the record then counts in no aggregate.
//! - Output fields come in the order of their names (the job file's mapping is read unordered).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::value::{Map, Value};

use crate::config::Aggregate;
use crate::expr::EvalError;
use crate::expr::{Evaluator, Expr, Number, Scope};

/// One aggregate: the output field, the function and, except for `count`, its expression.
#[derive(Clone, Debug)]
pub struct AggregateSpec {
    /// The output field (an interned name: every result shares it).
    pub field: Name,
    /// The function.
    pub function: Aggregate,
    /// What it is computed over (`None` for `count`).
    pub expr: Option<Expr>,
}

/// The `aggregates:` mapping, compiled; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Aggregates {
    /// In the order of their field names.
    pub specs: Vec<AggregateSpec>,
}

/// The `aggregates:` mapping as written: field -> `count` or `{function: expression}`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AggregatesConfig(pub Vec<(String, Aggregate, Option<String>)>);

impl<'de> Deserialize<'de> for AggregatesConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AggregatesConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a mapping of output field to `count` or `{sum|min|max|mean: EXPRESSION}`",
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(field) = map.next_key::<String>()? {
                    let value: serde_json::Value = map.next_value()?;
                    out.push(one(&field, value).map_err(de::Error::custom)?);
                }
                if out.is_empty() {
                    return Err(de::Error::custom("needs at least one aggregate"));
                }
                out.sort_by(|a: &(String, Aggregate, Option<String>), b| a.0.cmp(&b.0));
                Ok(AggregatesConfig(out))
            }
        }
        d.deserialize_map(V)
    }
}

const FUNCTIONS: &str = "count, or {sum|min|max|mean: EXPRESSION}";

fn function(name: &str) -> Option<Aggregate> {
    Some(match name {
        "count" => Aggregate::Count,
        "sum" => Aggregate::Sum,
        "min" => Aggregate::Min,
        "max" => Aggregate::Max,
        "mean" => Aggregate::Mean,
        _ => return None,
    })
}

fn one(
    field: &str,
    value: serde_json::Value,
) -> Result<(String, Aggregate, Option<String>), String> {
    match value {
        serde_json::Value::String(s) => match function(&s) {
            Some(Aggregate::Count) => Ok((field.to_owned(), Aggregate::Count, None)),
            Some(f) => Err(format!(
                "{field}: {} needs an expression: write `{{{}: EXPRESSION}}`",
                f.as_str(),
                f.as_str()
            )),
            None => Err(format!(
                "{field}: unknown aggregate \"{s}\", expected {FUNCTIONS}"
            )),
        },
        serde_json::Value::Object(m) if m.len() == 1 => {
            let (name, expr) = m.into_iter().next().expect("one entry");
            match (function(&name), expr) {
                (Some(Aggregate::Count), _) => Err(format!(
                    "{field}: count takes no expression: write `{field}: count`"
                )),
                (Some(f), serde_json::Value::String(e)) => Ok((field.to_owned(), f, Some(e))),
                (Some(_), serde_json::Value::Number(n)) => Ok((
                    field.to_owned(),
                    function(&name).expect("known"),
                    Some(n.to_string()),
                )),
                (Some(_), other) => Err(format!(
                    "{field}: {name}: expected an expression (a string), found {other}"
                )),
                (None, _) => Err(format!(
                    "{field}: unknown aggregate \"{name}\", expected {FUNCTIONS}"
                )),
            }
        }
        other => Err(format!("{field}: expected {FUNCTIONS}, found {other}")),
    }
}

impl AggregatesConfig {
    /// Compiles the expressions; an error names the field path (`aggregates.total.sum`) and
    /// carries the expression's own error.
    pub fn compile(&self) -> Result<Aggregates, (String, crate::expr::CompileError)> {
        let mut specs = Vec::with_capacity(self.0.len());
        for (field, function, source) in &self.0 {
            let expr = match source {
                Some(s) => Some(
                    Expr::compile(s)
                        .map_err(|e| (format!("aggregates.{field}.{}", function.as_str()), e))?,
                ),
                None => None,
            };
            specs.push(AggregateSpec {
                field: name_of(field),
                function: *function,
                expr,
            });
        }
        Ok(Aggregates { specs })
    }
}

/// Adds `n` to the running sum `sum`: exact ints while they fit, then a double from then on.
#[inline]
fn add(sum: Number, n: Number) -> Number {
    match (sum, n) {
        (Number::Int(a), Number::Int(b)) => match a.checked_add(b) {
            Some(s) => Number::Int(s),
            None => Number::Double(a as f64 + b as f64),
        },
        (Number::Int(a), Number::Double(b)) => Number::Double(a as f64 + b),
        (Number::Double(a), n) => Number::Double(a + n.as_f64()),
    }
}

/// The state of one aggregate for one key: the one accumulator of every `window` and `reduce`
/// (the old single `aggregate` keeps its doubles in it too, see `aggregate.rs`). Two
/// words, so that a key's state is small.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Acc {
    /// Records (count) or non-null values (the others) seen; [`DOUBLE`] set when `bits` hold
    /// a double.
    pub(crate) counted: u64,
    /// The sum (`sum`, `mean`) or, once the count is above 0, the best value (`min`, `max`): an
    /// `i64`, or an `f64` with [`DOUBLE`] (0 is both 0 and 0.0).
    pub(crate) bits: u64,
}

/// The flag in [`Acc::counted`] saying the value is a double (no count reaches it).
pub(crate) const DOUBLE: u64 = 1 << 63;

/// `a < b` by value; NaN is never better.
fn less(a: Number, b: Number) -> bool {
    match (a, b) {
        (Number::Int(x), Number::Int(y)) => x < y,
        _ => a.as_f64() < b.as_f64(),
    }
}

impl Acc {
    /// Records (count) or non-null values (the others) seen.
    #[inline(always)]
    pub(crate) fn count(&self) -> u64 {
        self.counted & !DOUBLE
    }

    /// The sum or best value.
    #[inline(always)]
    fn value(&self) -> Number {
        if self.counted & DOUBLE != 0 {
            Number::Double(f64::from_bits(self.bits))
        } else {
            Number::Int(self.bits as i64)
        }
    }

    #[inline(always)]
    fn set_value(&mut self, n: Number) {
        match n {
            Number::Int(i) => {
                self.bits = i as u64;
                self.counted &= !DOUBLE;
            }
            Number::Double(d) => {
                self.bits = d.to_bits();
                self.counted |= DOUBLE;
            }
        }
    }

    /// Adds one record's value (`None` for `count` or for a `null`).
    #[inline]
    pub fn update(&mut self, function: Aggregate, value: Option<Number>) {
        match function {
            Aggregate::Count => self.counted += 1,
            Aggregate::Sum | Aggregate::Mean => {
                if let Some(n) = value {
                    self.counted += 1;
                    self.set_value(add(self.value(), n));
                }
            }
            Aggregate::Min | Aggregate::Max => {
                if let Some(n) = value {
                    self.offer(function, n);
                    self.counted += 1;
                }
            }
        }
    }

    /// Keeps `n` if it is better (smaller for min, larger for max) than the best so far (the
    /// first value is; one after a NaN is).
    #[inline]
    fn offer(&mut self, function: Aggregate, n: Number) {
        let b = self.value();
        let better = self.count() == 0
            || b.as_f64().is_nan()
            || if function == Aggregate::Min {
                less(n, b)
            } else {
                less(b, n)
            };
        if better {
            self.set_value(n);
        }
    }

    /// Folds in `other`, the state of the same aggregate over other records (two session
    /// windows merging), as if its records had been added here.
    pub fn merge(&mut self, function: Aggregate, other: &Acc) {
        match function {
            Aggregate::Count => {}
            Aggregate::Sum | Aggregate::Mean => self.set_value(add(self.value(), other.value())),
            Aggregate::Min | Aggregate::Max => {
                if other.count() > 0 {
                    self.offer(function, other.value());
                }
            }
        }
        self.counted += other.count();
    }

    /// The aggregate so far.
    pub fn result(&self, function: Aggregate) -> Value {
        match function {
            Aggregate::Count => Value::Int(self.count() as i64),
            _ if self.count() == 0 => Value::Null,
            Aggregate::Sum => self.value().into(),
            Aggregate::Mean => Value::Double(self.value().as_f64() / self.count() as f64),
            Aggregate::Min | Aggregate::Max => self.value().into(),
        }
    }
}

impl Aggregates {
    /// Evaluates every aggregate's expression over `scope` into `values` (cleared first); the
    /// first error stops, with the expression that failed.
    pub fn values<'e>(
        &'e self,
        eval: &Evaluator,
        scope: &Scope<'_>,
        values: &mut Vec<Option<Number>>,
    ) -> Result<(), (&'e Expr, EvalError)> {
        values.clear();
        for spec in &self.specs {
            values.push(match &spec.expr {
                None => None,
                Some(e) => eval.eval_number(e, scope).map_err(|err| (e, err))?,
            });
        }
        Ok(())
    }

    /// Fresh state: one accumulator per aggregate.
    pub fn new_state(&self) -> Vec<Acc> {
        vec![Acc::default(); self.specs.len()]
    }

    /// Adds `values` (from [`Aggregates::values`]) to `state`.
    #[inline]
    pub fn update(&self, state: &mut [Acc], values: &[Option<Number>]) {
        for ((acc, spec), v) in state.iter_mut().zip(&self.specs).zip(values) {
            acc.update(spec.function, *v);
        }
    }

    /// Appends each aggregate's result to `out` under its field.
    pub fn write(&self, state: &[Acc], out: &mut Map) {
        for (acc, spec) in state.iter().zip(&self.specs) {
            out.insert(spec.field.clone(), acc.result(spec.function));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(function: Aggregate, values: &[Option<Number>]) -> Value {
        let mut acc = Acc::default();
        for v in values {
            acc.update(function, *v);
        }
        acc.result(function)
    }

    use Number::{Double as D, Int as I};

    #[test]
    fn sums_of_ints_are_exact_ints_until_a_double_or_overflow() {
        assert_eq!(
            run(Aggregate::Sum, &[Some(I(1)), Some(I(3))]),
            Value::Int(4)
        );
        assert_eq!(
            run(Aggregate::Sum, &[Some(I(1)), Some(D(2.5))]),
            Value::Double(3.5)
        );
        // 2^53 + 1 is exact as an int, not as a double.
        let big = 1i64 << 53;
        assert_eq!(
            run(Aggregate::Sum, &[Some(I(big)), Some(I(1))]),
            Value::Int(big + 1)
        );
        assert_eq!(
            run(Aggregate::Sum, &[Some(I(i64::MAX)), Some(I(1))]),
            Value::Double(i64::MAX as f64 + 1.0)
        );
        assert_eq!(
            run(Aggregate::Sum, &[None, Some(I(2)), None]),
            Value::Int(2)
        );
        assert_eq!(run(Aggregate::Sum, &[None]), Value::Null);
        assert_eq!(
            run(Aggregate::Mean, &[Some(I(1)), Some(I(2))]),
            Value::Double(1.5)
        );
        assert_eq!(
            run(Aggregate::Mean, &[Some(I(1)), None, Some(D(2.0))]),
            Value::Double(1.5)
        );
    }

    #[test]
    fn count_min_max() {
        assert_eq!(run(Aggregate::Count, &[None, None, None]), Value::Int(3));
        assert_eq!(run(Aggregate::Count, &[]), Value::Int(0));
        let v = [
            Some(I(3)),
            Some(D(2.5)),
            Some(I(7)),
            None,
            Some(D(f64::NAN)),
        ];
        assert_eq!(run(Aggregate::Min, &v), Value::Double(2.5));
        assert_eq!(run(Aggregate::Max, &v), Value::Int(7));
        assert_eq!(
            run(Aggregate::Max, &[Some(D(f64::NAN)), Some(I(1))]),
            Value::Int(1)
        );
        assert_eq!(run(Aggregate::Min, &[]), Value::Null);
    }

    #[test]
    fn merging_is_adding_the_other_records() {
        let parts: [&[Option<Number>]; 3] = [
            &[Some(I(3)), None, Some(D(2.5))],
            &[Some(I(i64::MAX)), Some(I(-4))],
            &[Some(I(7)), Some(D(f64::NAN))],
        ];
        for function in [
            Aggregate::Count,
            Aggregate::Sum,
            Aggregate::Min,
            Aggregate::Max,
            Aggregate::Mean,
        ] {
            for (a, b) in [(0, 1), (1, 2), (2, 0), (0, 2)] {
                let mut left = Acc::default();
                let mut right = Acc::default();
                let mut all = Acc::default();
                for v in parts[a] {
                    left.update(function, *v);
                    all.update(function, *v);
                }
                for v in parts[b] {
                    right.update(function, *v);
                    all.update(function, *v);
                }
                left.merge(function, &right);
                assert_eq!(
                    left.result(function).to_string(),
                    all.result(function).to_string(),
                    "{function:?} {a} {b}"
                );
            }
        }
        let mut empty = Acc::default();
        empty.merge(Aggregate::Sum, &Acc::default());
        assert_eq!(empty.result(Aggregate::Sum), Value::Null);
    }

    fn config(v: serde_json::Value) -> Result<AggregatesConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_the_mapping() {
        let c = config(
            json!({"orders": "count", "total": {"sum": "amount_eur"}, "m": {"mean": "amount"}}),
        )
        .unwrap();
        assert_eq!(
            c.0,
            [
                ("m".to_owned(), Aggregate::Mean, Some("amount".to_owned())),
                ("orders".to_owned(), Aggregate::Count, None),
                (
                    "total".to_owned(),
                    Aggregate::Sum,
                    Some("amount_eur".to_owned())
                ),
            ]
        );
        for (bad, expected) in [
            (
                json!({"t": "sum"}),
                "t: sum needs an expression: write `{sum: EXPRESSION}`",
            ),
            (json!({"t": {"count": "x"}}), "t: count takes no expression"),
            (
                json!({"t": {"avg": "x"}}),
                "t: unknown aggregate \"avg\", expected count, or",
            ),
            (json!({"t": "cnt"}), "t: unknown aggregate \"cnt\""),
            (
                json!({"t": {"sum": ["x"]}}),
                "t: sum: expected an expression (a string)",
            ),
            (json!({}), "needs at least one aggregate"),
        ] {
            let err = config(bad).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
        let (path, err) = config(json!({"t": {"sum": "v +"}}))
            .unwrap()
            .compile()
            .unwrap_err();
        assert_eq!(path, "aggregates.t.sum");
        assert_eq!(err.column, 4);
    }

    #[test]
    fn evaluates_and_writes_in_field_order() {
        let aggs = config(json!({"s": {"sum": "v"}, "n": "count", "hi": {"max": "v"}}))
            .unwrap()
            .compile()
            .unwrap();
        let eval = Evaluator::new();
        let mut state = aggs.new_state();
        let mut values = Vec::new();
        for json in [r#"{"v": 1}"#, r#"{"v": 2.5}"#, r#"{"v": null}"#] {
            let ev = Value::from_json(json.as_bytes()).unwrap();
            let scope = Scope {
                event: (&ev).into(),
                key: &Value::Null,
                timestamp_ms: 0,
            };
            aggs.values(&eval, &scope, &mut values).unwrap();
            aggs.update(&mut state, &values);
        }
        let mut out = Map::new();
        aggs.write(&state, &mut out);
        assert_eq!(Value::from(out).to_string(), r#"{"hi":2.5,"n":3,"s":3.5}"#);
        // A value that is not a number is an error naming the expression.
        let ev = Value::from_json(br#"{"v": "x"}"#).unwrap();
        let scope = Scope {
            event: (&ev).into(),
            key: &Value::Null,
            timestamp_ms: 0,
        };
        let (expr, err) = aggs.values(&eval, &scope, &mut values).unwrap_err();
        assert_eq!(expr.source(), "v");
        assert_eq!(err.message, "must give a number, but gave a string \"x\"");
    }
}
