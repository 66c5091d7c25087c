//! Per-key aggregates for `reduce` and `window`: the accumulator, one type per aggregate (so
//! the per-record update is monomorphised into the operator's loop), and a key→accumulator map
//! that is a plain vector for small keys.

use std::cmp::Ordering;

use rustc_hash::FxHashMap;
use tidemark_runtime::{BoxError, Record, Value};

/// Keys below this are kept in a vector indexed by the key (grown on demand, 16 bytes per key,
/// so at most 1 MiB); larger keys go to a hash map.
pub(crate) const DENSE_KEYS: u64 = 1 << 16;

/// The running state of one key.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Acc {
    /// Records seen; 0 means the key has no state.
    pub count: u64,
    /// Sum, minimum or maximum so far, by aggregate.
    pub value: f64,
}

/// One aggregate function.
pub(crate) trait Aggregator: Send + 'static {
    /// Whether the aggregate reads the field `value` (all but `count`).
    const NEEDS_VALUE: bool = true;
    /// Adds `v` to `acc` and returns the aggregate so far.
    fn update(acc: &mut Acc, v: f64) -> f64;
    /// The aggregate of a non-empty accumulator.
    fn result(acc: &Acc) -> f64;
}

/// `count`
pub(crate) struct Count;
/// `sum`
pub(crate) struct Sum;
/// `min`
pub(crate) struct Min;
/// `max`
pub(crate) struct Max;
/// `mean`
pub(crate) struct Mean;

impl Aggregator for Count {
    const NEEDS_VALUE: bool = false;
    #[inline(always)]
    fn update(acc: &mut Acc, _v: f64) -> f64 {
        acc.count += 1;
        acc.count as f64
    }
    fn result(acc: &Acc) -> f64 {
        acc.count as f64
    }
}

impl Aggregator for Sum {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        acc.count += 1;
        acc.value += v;
        acc.value
    }
    fn result(acc: &Acc) -> f64 {
        acc.value
    }
}

impl Aggregator for Min {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        // f64::min ignores a NaN operand.
        acc.value = if acc.count == 0 { v } else { acc.value.min(v) };
        acc.count += 1;
        acc.value
    }
    fn result(acc: &Acc) -> f64 {
        acc.value
    }
}

impl Aggregator for Max {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        acc.value = if acc.count == 0 { v } else { acc.value.max(v) };
        acc.count += 1;
        acc.value
    }
    fn result(acc: &Acc) -> f64 {
        acc.value
    }
}

impl Aggregator for Mean {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        acc.count += 1;
        acc.value += v;
        acc.value / acc.count as f64
    }
    fn result(acc: &Acc) -> f64 {
        acc.value / acc.count as f64
    }
}

/// The number the old single `aggregate` works on: the event's numeric field `value`. An event
/// without one is an error (unless the aggregate is `count`, which reads no value).
#[inline(always)]
pub(crate) fn input<A: Aggregator>(record: &Record) -> Result<f64, BoxError> {
    match record.numeric_value() {
        Some(v) => Ok(v),
        None if !A::NEEDS_VALUE => Ok(0.0),
        None => Err(no_value(record)),
    }
}

#[cold]
fn no_value(record: &Record) -> BoxError {
    let mut event = record.event_json();
    if event.len() > 1024 {
        let mut cut = 1024;
        while !event.is_char_boundary(cut) {
            cut -= 1;
        }
        event.truncate(cut);
        event.push('…');
    }
    format!("field `value` is missing or not a number in {event}").into()
}

/// Calls `$body` with the type `$A` bound to the [`Aggregator`] of `$aggregate`.
macro_rules! with_aggregator {
    ($aggregate:expr, $A:ident => $body:expr) => {
        match $aggregate {
            $crate::config::Aggregate::Count => {
                type $A = $crate::aggregate::Count;
                $body
            }
            $crate::config::Aggregate::Sum => {
                type $A = $crate::aggregate::Sum;
                $body
            }
            $crate::config::Aggregate::Min => {
                type $A = $crate::aggregate::Min;
                $body
            }
            $crate::config::Aggregate::Max => {
                type $A = $crate::aggregate::Max;
                $body
            }
            $crate::config::Aggregate::Mean => {
                type $A = $crate::aggregate::Mean;
                $body
            }
        }
    };
}
pub(crate) use with_aggregator;

/// Accumulators by key.
///
/// Int keys in `0..DENSE_KEYS` index a vector; every other key (negative or large ints,
/// strings, any value) goes to a hash map.
#[derive(Debug, Default)]
pub(crate) struct KeyedAccs {
    dense: Vec<Acc>,
    sparse: FxHashMap<Value, Acc>,
}

/// The order keys are emitted in: ints ascending (dense and sparse alike), then doubles,
/// strings and the rest, each ascending (by their JSON text beyond strings).
fn key_order(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Double(_) => 3,
            Value::String(_) => 4,
            Value::List(_) => 5,
            Value::Map(_) => 6,
        }
    }
    rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Double(x), Value::Double(y)) => x.total_cmp(y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => a.to_string().cmp(&b.to_string()),
    })
}

impl KeyedAccs {
    /// The accumulator of `record`'s key, made empty if it has none.
    #[inline(always)]
    pub(crate) fn get_for(&mut self, record: &Record) -> &mut Acc {
        if let Some(i) = record.int_key() {
            if (i as u64) < self.dense.len() as u64 {
                return &mut self.dense[i as usize];
            }
        }
        self.get_slow(&record.key())
    }

    /// The dense accumulators, indexed by int key (those made so far; see
    /// [`KeyedAccs::get_for`] for the rest). An empty one (`count` 0) has no state yet.
    #[inline(always)]
    pub(crate) fn dense_mut(&mut self) -> &mut [Acc] {
        &mut self.dense
    }

    /// The accumulator of `key`, made empty if it has none.
    #[cfg(test)]
    pub(crate) fn get(&mut self, key: &Value) -> &mut Acc {
        if let Value::Int(i) = key {
            if (*i as u64) < self.dense.len() as u64 {
                return &mut self.dense[*i as usize];
            }
        }
        self.get_slow(key)
    }

    #[cold]
    #[inline(never)]
    fn get_slow(&mut self, key: &Value) -> &mut Acc {
        match key {
            Value::Int(i) if (0..DENSE_KEYS as i64).contains(i) => {
                let key = *i as u64;
                // key < DENSE_KEYS, so the length stays within 64..=DENSE_KEYS.
                let len = (key + 1)
                    .max(2 * self.dense.len() as u64)
                    .clamp(64, DENSE_KEYS);
                self.dense.resize(len as usize, Acc::default());
                &mut self.dense[key as usize]
            }
            _ => {
                if !self.sparse.contains_key(key) {
                    self.sparse.insert(key.clone(), Acc::default());
                }
                self.sparse.get_mut(key).expect("inserted above")
            }
        }
    }

    /// The sparse keys in emission order, split into the ints before the dense ones and the
    /// rest.
    fn sorted_sparse(&self) -> (Vec<Value>, Vec<Value>) {
        let mut keys: Vec<Value> = self.sparse.keys().cloned().collect();
        keys.sort_unstable_by(key_order);
        let negative = keys
            .iter()
            .take_while(|k| {
                matches!(k, Value::Null | Value::Bool(_)) || matches!(k, Value::Int(i) if *i < 0)
            })
            .count();
        let rest = keys.split_off(negative);
        (keys, rest)
    }

    /// Calls `f` with every key that has state, in key order, keeping the state.
    pub(crate) fn for_each_sorted(&self, mut f: impl FnMut(&Value, &Acc)) {
        let (before, after) = if self.sparse.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.sorted_sparse()
        };
        for key in &before {
            f(key, &self.sparse[key]);
        }
        for (key, acc) in self.dense.iter().enumerate() {
            if acc.count > 0 {
                f(&Value::Int(key as i64), acc);
            }
        }
        for key in &after {
            f(key, &self.sparse[key]);
        }
    }

    /// Forgets every key's state, keeping the memory.
    pub(crate) fn clear(&mut self) {
        self.dense.fill(Acc::default());
        self.sparse.clear();
    }

    /// Calls `f` with every key that has state, in key order, and forgets the state (keeping
    /// the memory).
    pub(crate) fn drain_sorted(&mut self, mut f: impl FnMut(&Value, Acc)) {
        self.for_each_sorted(|key, acc| f(key, *acc));
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<A: Aggregator>(values: &[f64]) -> Vec<f64> {
        let mut acc = Acc::default();
        values.iter().map(|&v| A::update(&mut acc, v)).collect()
    }

    #[test]
    fn aggregates() {
        let v = [3.0, -1.0, f64::NAN, 4.0];
        assert_eq!(run::<Count>(&v), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(run::<Min>(&v), [3.0, -1.0, -1.0, -1.0]);
        assert_eq!(run::<Max>(&v), [3.0, 3.0, 3.0, 4.0]);
        assert_eq!(run::<Sum>(&[1.0, 2.5, -4.0]), [1.0, 3.5, -0.5]);
        assert_eq!(run::<Mean>(&[1.0, 2.0, 6.0]), [1.0, 1.5, 3.0]);
        assert!(run::<Min>(&[f64::NAN])[0].is_nan());
    }

    #[test]
    fn keyed_state_for_small_and_large_keys() {
        let mut s = KeyedAccs::default();
        let dense = DENSE_KEYS as i64;
        let keys = [
            Value::Int(5),
            Value::from("b"),
            Value::Int(dense + 7),
            Value::Int(5),
            Value::Int(-1),
            Value::Int(0),
            Value::from("a"),
            Value::Int(dense - 1),
        ];
        for key in &keys {
            Sum::update(s.get(key), 1.0);
        }
        let mut seen = Vec::new();
        s.drain_sorted(|k, acc| seen.push((k.to_string(), acc.count)));
        let expected: Vec<(String, u64)> = [
            ("-1".to_string(), 1),
            ("0".to_string(), 1),
            ("5".to_string(), 2),
            ((dense - 1).to_string(), 1),
            ((dense + 7).to_string(), 1),
            ("\"a\"".to_string(), 1),
            ("\"b\"".to_string(), 1),
        ]
        .into();
        assert_eq!(seen, expected);
        let mut again = 0;
        s.drain_sorted(|_, _| again += 1);
        assert_eq!(again, 0);
        // for_each_sorted keeps the state; clear forgets it.
        for key in [9, dense + 1, 2] {
            Count::update(s.get(&Value::Int(key)), 0.0);
        }
        let mut seen = Vec::new();
        s.for_each_sorted(|k, acc| seen.push((k.clone(), acc.count)));
        s.for_each_sorted(|k, acc| seen.push((k.clone(), acc.count)));
        let ints = |v: &[i64]| v.iter().map(|&i| (Value::Int(i), 1)).collect::<Vec<_>>();
        assert_eq!(
            seen,
            [ints(&[2, 9, dense + 1]), ints(&[2, 9, dense + 1])].concat()
        );
        s.clear();
        s.for_each_sorted(|_, _| again += 1);
        assert_eq!(again, 0);
    }
}
