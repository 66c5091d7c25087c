//! Per-key aggregates for `reduce` and `window`: the accumulator, one type per aggregate (so
//! the per-record update is monomorphised into the operator's loop), and a key→accumulator map
//! that is a plain vector for small keys.

use rustc_hash::FxHashMap;

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
#[derive(Debug, Default)]
pub(crate) struct KeyedAccs {
    dense: Vec<Acc>,
    sparse: FxHashMap<u64, Acc>,
}

impl KeyedAccs {
    /// The accumulator of `key`, made empty if it has none.
    #[inline(always)]
    pub(crate) fn get(&mut self, key: u64) -> &mut Acc {
        if key < self.dense.len() as u64 {
            return &mut self.dense[key as usize];
        }
        self.get_slow(key)
    }

    #[cold]
    #[inline(never)]
    fn get_slow(&mut self, key: u64) -> &mut Acc {
        if key < DENSE_KEYS {
            // key < DENSE_KEYS, so the length stays within 64..=DENSE_KEYS.
            let len = (key + 1)
                .max(2 * self.dense.len() as u64)
                .clamp(64, DENSE_KEYS);
            self.dense.resize(len as usize, Acc::default());
            &mut self.dense[key as usize]
        } else {
            self.sparse.entry(key).or_default()
        }
    }

    /// Calls `f` with every key that has state, in ascending key order, keeping the state.
    pub(crate) fn for_each_sorted(&self, mut f: impl FnMut(u64, &Acc)) {
        for (key, acc) in self.dense.iter().enumerate() {
            if acc.count > 0 {
                f(key as u64, acc);
            }
        }
        if !self.sparse.is_empty() {
            let mut keys: Vec<u64> = self.sparse.keys().copied().collect();
            keys.sort_unstable();
            for key in keys {
                f(key, &self.sparse[&key]);
            }
        }
    }

    /// Forgets every key's state, keeping the memory.
    pub(crate) fn clear(&mut self) {
        self.dense.fill(Acc::default());
        self.sparse.clear();
    }

    /// Calls `f` with every key that has state, in ascending key order, and forgets the state
    /// (keeping the memory).
    pub(crate) fn drain_sorted(&mut self, mut f: impl FnMut(u64, Acc)) {
        for (key, acc) in self.dense.iter_mut().enumerate() {
            if acc.count > 0 {
                f(key as u64, *acc);
                *acc = Acc::default();
            }
        }
        if !self.sparse.is_empty() {
            let mut keys: Vec<u64> = self.sparse.keys().copied().collect();
            keys.sort_unstable();
            for key in keys {
                f(key, self.sparse[&key]);
            }
            self.sparse.clear();
        }
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
        for key in [5, DENSE_KEYS + 7, 5, u64::MAX, 0, DENSE_KEYS - 1] {
            Sum::update(s.get(key), 1.0);
        }
        let mut seen = Vec::new();
        s.drain_sorted(|k, acc| seen.push((k, acc.count)));
        assert_eq!(
            seen,
            [
                (0, 1),
                (5, 2),
                (DENSE_KEYS - 1, 1),
                (DENSE_KEYS + 7, 1),
                (u64::MAX, 1)
            ]
        );
        let mut again = 0;
        s.drain_sorted(|_, _| again += 1);
        assert_eq!(again, 0);
        // for_each_sorted keeps the state; clear forgets it.
        for key in [9, DENSE_KEYS + 1, 2] {
            Count::update(s.get(key), 0.0);
        }
        let mut seen = Vec::new();
        s.for_each_sorted(|k, acc| seen.push((k, acc.count)));
        s.for_each_sorted(|k, acc| seen.push((k, acc.count)));
        assert_eq!(seen, [(2, 1), (9, 1), (DENSE_KEYS + 1, 1)].repeat(2));
        s.clear();
        s.for_each_sorted(|_, _| again += 1);
        assert_eq!(again, 0);
    }
}
