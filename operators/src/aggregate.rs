//! Per-key state of `reduce` and `window`: [`KeyedAccs`], the one structure that holds every
//! key's accumulators ([`crate::aggregates::Acc`]) for every window kind and every reduce; and
//! the old single `aggregate` (of the numeric field `value`, in doubles), one type per function
//! so that its per-record update is monomorphised into the operator's loop.

use std::borrow::Cow;
use std::cmp::Ordering;

use rustc_hash::FxHashMap;
use tidemark_runtime::{BoxError, Record, Value};

pub(crate) use crate::aggregates::Acc;
use crate::aggregates::DOUBLE;

/// Int keys below this keep their accumulators in a vector indexed by the key (grown on
/// demand, 16 bytes per key and aggregate, so at most 1 MiB per aggregate, and a flag per
/// key); other keys find theirs through a hash map.
pub(crate) const DENSE_KEYS: u64 = 1 << 16;

/// The running sum or best value of the old single aggregate: always a double (0 bits, before
/// the first record, are 0.0).
#[inline(always)]
fn double(acc: &Acc) -> f64 {
    f64::from_bits(acc.bits)
}

/// Counts a record and keeps `v` as the old single aggregate's double.
#[inline(always)]
fn count_with(acc: &mut Acc, v: f64) {
    acc.bits = v.to_bits();
    acc.counted = (acc.counted + 1) | DOUBLE;
}

/// One function of the old single aggregate: doubles in, doubles out, `min` and `max` as
/// `f64::min` and `f64::max`. Every update counts the record in `count`.
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
        acc.counted += 1;
        acc.count() as f64
    }
    fn result(acc: &Acc) -> f64 {
        acc.count() as f64
    }
}

impl Aggregator for Sum {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        let sum = double(acc) + v;
        count_with(acc, sum);
        sum
    }
    fn result(acc: &Acc) -> f64 {
        double(acc)
    }
}

impl Aggregator for Min {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        // f64::min ignores a NaN operand.
        let min = if acc.count() == 0 {
            v
        } else {
            double(acc).min(v)
        };
        count_with(acc, min);
        min
    }
    fn result(acc: &Acc) -> f64 {
        double(acc)
    }
}

impl Aggregator for Max {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        let max = if acc.count() == 0 {
            v
        } else {
            double(acc).max(v)
        };
        count_with(acc, max);
        max
    }
    fn result(acc: &Acc) -> f64 {
        double(acc)
    }
}

impl Aggregator for Mean {
    #[inline(always)]
    fn update(acc: &mut Acc, v: f64) -> f64 {
        let sum = double(acc) + v;
        count_with(acc, sum);
        sum / acc.count() as f64
    }
    fn result(acc: &Acc) -> f64 {
        double(acc) / acc.count() as f64
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

/// The old single aggregate's update by name (for the window, which is not monomorphised).
pub(crate) fn update(aggregate: crate::config::Aggregate, acc: &mut Acc, v: f64) -> f64 {
    with_aggregator!(aggregate, A => A::update(acc, v))
}

/// The old single aggregate's result by name.
pub(crate) fn result(aggregate: crate::config::Aggregate, acc: &Acc) -> f64 {
    with_aggregator!(aggregate, A => A::result(acc))
}

/// Every key's accumulators: `width` of them per key (one per aggregate). The one per-key
/// state of `reduce` and of each window (a session's is its own), so that it can be iterated
/// (and, later, written and read back) key by key.
///
/// Made [`KeyedAccs::new`], int keys in `0..DENSE_KEYS` keep their accumulators in a vector
/// indexed by the key (so the per-record path of `reduce` is one indexed load); every other key
/// (negative or large ints, strings, any value), and every key when made
/// [`KeyedAccs::hashed`], finds its slot through a hash map.
#[derive(Debug)]
pub(crate) struct KeyedAccs {
    width: usize,
    /// Int keys below this are dense: `DENSE_KEYS` or 0.
    dense_keys: u64,
    /// The accumulators of int key `k` at `k * width..(k + 1) * width`, grown on demand. A
    /// dense key has state when it was made ([`KeyedAccs::get`]) or its first accumulator has
    /// counted a record (the old aggregate's per-record path updates in place, [`dense_acc`]).
    dense: Vec<Acc>,
    /// Whether int key `k` was made.
    dense_made: Vec<bool>,
    /// The slot of every other key.
    sparse: FxHashMap<Value, u32>,
    /// The key of each sparse slot, in the order of first records.
    sparse_keys: Vec<Value>,
    /// The accumulators of sparse slot `s` at `s * width..(s + 1) * width`.
    sparse_accs: Vec<Acc>,
    /// Sparse slots in key order, reused by [`KeyedAccs::for_each_sorted`].
    order: Vec<u32>,
}

/// Where a key's accumulators start.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// In `dense`, at this index.
    Dense(usize),
    /// In `sparse_accs`, at this index.
    Sparse(usize),
}

/// A key of a [`KeyedAccs`] as it holds it, without a clone: an int by value (a dense key
/// has no [`Value`] of its own), any other key borrowed. Equal keys are equal `KeyRef`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KeyRef<'a> {
    Int(i64),
    Other(&'a Value),
}

impl<'a> KeyRef<'a> {
    /// The key `key`.
    pub(crate) fn of(key: &'a Value) -> Self {
        match key {
            Value::Int(i) => KeyRef::Int(*i),
            other => KeyRef::Other(other),
        }
    }

    /// The key as a value (an int made, any other borrowed).
    pub(crate) fn to_cow(self) -> Cow<'a, Value> {
        match self {
            KeyRef::Int(i) => Cow::Owned(Value::Int(i)),
            KeyRef::Other(v) => Cow::Borrowed(v),
        }
    }
}

/// The order keys are emitted in by the old single aggregate's windows: null, bools, ints
/// ascending, then doubles, strings and the rest, each ascending (by their JSON text beyond
/// strings).
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

/// The accumulator of int key `key` among the dense accumulators of state of width 1 whose
/// every update counts the record (the old single aggregate), if its place exists: the
/// per-record path of `reduce`'s batches, with the vector in a register. Another key takes
/// [`KeyedAccs::get_for`], which makes its place.
#[inline(always)]
pub(crate) fn dense_acc(dense: &mut [Acc], key: i64) -> Option<&mut Acc> {
    // One unsigned comparison: a negative key wraps to above any length. (Compared as u64,
    // so that no key aliases a slot where usize is narrower.)
    let i = key as u64;
    if i < dense.len() as u64 {
        dense.get_mut(i as usize)
    } else {
        None
    }
}

impl KeyedAccs {
    /// No keys yet, `width` accumulators per key (at least 1), small int keys dense.
    pub(crate) fn new(width: usize) -> Self {
        KeyedAccs {
            dense_keys: DENSE_KEYS,
            ..KeyedAccs::hashed(width)
        }
    }

    /// No keys yet, `width` accumulators per key (at least 1), every key through the hash map:
    /// for the many tables of windows, whose memory should follow the keys they hold.
    pub(crate) fn hashed(width: usize) -> Self {
        KeyedAccs {
            width: width.max(1),
            dense_keys: 0,
            dense: Vec::new(),
            dense_made: Vec::new(),
            sparse: FxHashMap::default(),
            sparse_keys: Vec::new(),
            sparse_accs: Vec::new(),
            order: Vec::new(),
        }
    }

    /// The accumulators of `record`'s key, made empty if it has none.
    #[inline(always)]
    pub(crate) fn get_for(&mut self, record: &Record) -> &mut [Acc] {
        if let Some(k) = record.int_key() {
            if self.is_made(k) {
                return self.dense_mut(k as usize);
            }
        }
        let place = self.place_of(&record.key());
        self.accs_mut(place)
    }

    /// The accumulators of `key`, made empty if it has none.
    #[inline]
    pub(crate) fn get(&mut self, key: &Value) -> &mut [Acc] {
        let place = match key {
            Value::Int(k) if self.is_made(*k) => Place::Dense(*k as usize * self.width),
            Value::Int(_) => self.place_of(key),
            _ => match self.sparse.get(key) {
                Some(&slot) => Place::Sparse(slot as usize * self.width),
                None => self.place_of(key),
            },
        };
        self.accs_mut(place)
    }

    /// Whether int key `k` was made dense.
    #[inline(always)]
    fn is_made(&self, k: i64) -> bool {
        (k as u64) < self.dense_made.len() as u64 && self.dense_made[k as usize]
    }

    /// Whether dense key `k` has state.
    fn has_dense(&self, k: usize) -> bool {
        self.dense_made[k] || self.dense[k * self.width].count() > 0
    }

    #[inline(always)]
    fn dense_mut(&mut self, k: usize) -> &mut [Acc] {
        let at = k * self.width;
        &mut self.dense[at..at + self.width]
    }

    #[inline(always)]
    fn accs_mut(&mut self, place: Place) -> &mut [Acc] {
        let w = self.width;
        match place {
            Place::Dense(at) => &mut self.dense[at..at + w],
            Place::Sparse(at) => &mut self.sparse_accs[at..at + w],
        }
    }

    fn sparse_accs(&self, slot: usize) -> &[Acc] {
        let at = slot * self.width;
        &self.sparse_accs[at..at + self.width]
    }

    /// The dense accumulators of state of width 1 (see [`dense_acc`]).
    #[inline(always)]
    pub(crate) fn dense_accs(&mut self) -> &mut [Acc] {
        debug_assert_eq!(self.width, 1, "dense accumulators by key need width 1");
        &mut self.dense
    }

    /// Where the accumulators of `key` are, made empty if it has none.
    #[cold]
    #[inline(never)]
    fn place_of(&mut self, key: &Value) -> Place {
        let w = self.width;
        if let Value::Int(i) = key {
            if (0..self.dense_keys as i64).contains(i) {
                let k = *i as usize;
                if k >= self.dense_made.len() {
                    // k < DENSE_KEYS, so the length stays within 64..=DENSE_KEYS.
                    let len = (k + 1)
                        .max(2 * self.dense_made.len())
                        .clamp(64, DENSE_KEYS as usize);
                    self.dense_made.resize(len, false);
                    self.dense.resize(len * w, Acc::default());
                }
                self.dense_made[k] = true;
                return Place::Dense(k * w);
            }
        }
        match self.sparse.get(key) {
            Some(&slot) => Place::Sparse(slot as usize * w),
            None => {
                let slot = self.sparse_keys.len();
                self.sparse.insert(
                    key.clone(),
                    u32::try_from(slot).expect("fewer than 2^32 keys"),
                );
                self.sparse_keys.push(key.clone());
                self.sparse_accs.resize((slot + 1) * w, Acc::default());
                Place::Sparse(slot * w)
            }
        }
    }

    /// How many keys have state (a scan of the dense keys: not for the per-record path).
    #[cold]
    #[inline(never)]
    pub(crate) fn len(&self) -> usize {
        self.dense_keys().count() + self.sparse_keys.len()
    }

    /// An estimate of the bytes this table takes: its vectors' capacities and the hash map's
    /// slots (a key's own heap data, such as a long string, is not counted).
    #[cold]
    #[inline(never)]
    pub(crate) fn estimated_bytes(&self) -> usize {
        use std::mem::size_of;
        self.dense.capacity() * size_of::<Acc>()
            + self.dense_made.capacity()
            + self.sparse.capacity() * (size_of::<Value>() + size_of::<u32>() + 1)
            + self.sparse_keys.capacity() * size_of::<Value>()
            + self.sparse_accs.capacity() * size_of::<Acc>()
            + self.order.capacity() * size_of::<u32>()
    }

    /// The dense keys with state, ascending.
    fn dense_keys(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.dense_made.len()).filter(|&k| self.has_dense(k))
    }

    /// Every key with its accumulators: the dense keys ascending, then the others in the order
    /// of their first records (so all of them in that order when made
    /// [`KeyedAccs::hashed`]).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Cow<'_, Value>, &[Acc])> {
        self.keys().map(|(key, accs)| (key.to_cow(), accs))
    }

    /// [`KeyedAccs::iter`] without making a value of a dense key.
    pub(crate) fn keys(&self) -> impl Iterator<Item = (KeyRef<'_>, &[Acc])> {
        let w = self.width;
        let dense = self
            .dense_keys()
            .map(move |k| (KeyRef::Int(k as i64), &self.dense[k * w..(k + 1) * w]));
        let sparse = self
            .sparse_keys
            .iter()
            .enumerate()
            .map(|(slot, key)| (KeyRef::of(key), self.sparse_accs(slot)));
        dense.chain(sparse)
    }

    /// Calls `f` with every key and its accumulators in key order (see [`key_order`]), keeping
    /// the state.
    pub(crate) fn for_each_sorted(&mut self, mut f: impl FnMut(&Value, &[Acc])) {
        let keys = &self.sparse_keys;
        self.order.clear();
        self.order.extend(0..keys.len() as u32);
        self.order
            .sort_unstable_by(|&a, &b| key_order(&keys[a as usize], &keys[b as usize]));
        // Sparse keys before the dense ones: null, bools and negative ints.
        let before = self
            .order
            .iter()
            .take_while(|&&s| {
                matches!(&keys[s as usize], Value::Null | Value::Bool(_))
                    || matches!(&keys[s as usize], Value::Int(i) if *i < 0)
            })
            .count();
        for &slot in &self.order[..before] {
            f(&keys[slot as usize], self.sparse_accs(slot as usize));
        }
        let w = self.width;
        for k in self.dense_keys() {
            f(&Value::Int(k as i64), &self.dense[k * w..(k + 1) * w]);
        }
        for &slot in &self.order[before..] {
            f(&keys[slot as usize], self.sparse_accs(slot as usize));
        }
    }

    /// Forgets every key's state, keeping the memory.
    pub(crate) fn clear(&mut self) {
        self.dense.fill(Acc::default());
        self.dense_made.fill(false);
        self.sparse.clear();
        self.sparse_keys.clear();
        self.sparse_accs.clear();
    }
}

#[cfg(test)]
mod snapshot_tests {
    use super::*;
    use proptest::prelude::*;
    use tidemark_runtime::key_group::KeyGroupRange;
    use tidemark_runtime::keyed_state::KeyedSnapshot;
    use tidemark_runtime::state_codec::{decode, encode};

    fn contents(state: &KeyedAccs) -> Vec<(String, Vec<Acc>)> {
        let mut all: Vec<(String, Vec<Acc>)> = state
            .iter()
            .map(|(k, a)| (format!("{k:?}"), a.to_vec()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    proptest! {
        /// `reduce`'s state (dense small int keys, hashed other keys), snapshot and restored
        /// over `p` subtasks: the union of the parts is the state, each key once.
        #[test]
        fn keyed_accs_come_back_equal(
            keys in prop::collection::vec(prop_oneof![
                (-3i64..300).prop_map(Value::Int),
                "[a-z]{1,4}".prop_map(|s| Value::from(s.as_str())),
            ], 0..60),
            values in prop::collection::vec(any::<(u32, i32)>(), 60),
            dense in any::<bool>(),
            width in 1usize..4,
            p in 1usize..5,
        ) {
            let make = || if dense { KeyedAccs::new(width) } else { KeyedAccs::hashed(width) };
            let mut state = make();
            for (key, (c, b)) in keys.iter().zip(&values) {
                for acc in state.get(key) {
                    acc.counted += u64::from(*c);
                    acc.bits = acc.bits.wrapping_add(*b as u64);
                }
            }
            use tidemark_runtime::keyed_table::KeyedTable;
            let mut snapshot = KeyedSnapshot::new(32);
            state.snapshot(&mut snapshot).unwrap();
            let snapshot: KeyedSnapshot = decode(&encode(&snapshot).unwrap()).unwrap();
            let mut union = Vec::new();
            for i in 0..p {
                let mut part = make();
                part.restore(&snapshot.part(KeyGroupRange::of_subtask(i, p, 32))).unwrap();
                union.extend(contents(&part));
            }
            union.sort_by(|a, b| a.0.cmp(&b.0));
            prop_assert_eq!(union, contents(&state));
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
        let mut s = KeyedAccs::new(2);
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
        for (i, key) in keys.iter().enumerate() {
            let accs = s.get(key);
            assert_eq!(accs.len(), 2);
            Sum::update(&mut accs[0], 1.0);
            Sum::update(&mut accs[1], i as f64);
        }
        let seen = |s: &mut KeyedAccs| {
            let mut seen = Vec::new();
            s.for_each_sorted(|k, accs| {
                seen.push((k.to_string(), accs[0].count(), Sum::result(&accs[1])))
            });
            seen
        };
        let expected: Vec<(String, u64, f64)> = vec![
            ("-1".to_string(), 1, 4.0),
            ("0".to_string(), 1, 5.0),
            ("5".to_string(), 2, 3.0),
            ((dense - 1).to_string(), 1, 7.0),
            ((dense + 7).to_string(), 1, 2.0),
            ("\"a\"".to_string(), 1, 6.0),
            ("\"b\"".to_string(), 1, 1.0),
        ];
        assert_eq!(seen(&mut s), expected);
        assert_eq!(seen(&mut s), expected, "iterating keeps the state");
        // In order of first records, and the same slots by record.
        // Dense keys ascending, then the others in the order of their first records.
        let firsts: Vec<String> = s.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(
            firsts,
            [
                "0",
                "5",
                &(dense - 1).to_string(),
                "\"b\"",
                &(dense + 7).to_string(),
                "-1",
                "\"a\""
            ]
        );
        let mut h = KeyedAccs::hashed(1);
        for key in &keys {
            Count::update(&mut h.get(key)[0], 0.0);
        }
        let firsts: Vec<String> = h.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(
            firsts,
            [
                "5",
                "\"b\"",
                &(dense + 7).to_string(),
                "-1",
                "0",
                "\"a\"",
                &(dense - 1).to_string()
            ],
            "hashed: all in the order of first records"
        );
        assert_eq!(
            firsts,
            [
                "5",
                "\"b\"",
                &(dense + 7).to_string(),
                "-1",
                "0",
                "\"a\"",
                &(dense - 1).to_string()
            ]
        );
        assert_eq!(s.get_for(&Record::new(5, 0.0, 0))[0].count(), 2);
        assert_eq!(s.get_for(&Record::new(u64::MAX, 0.0, 0))[0].count(), 1);
        assert_eq!(s.len(), 7);
        // Width 1: the dense accumulators by key, for keys with a record.
        let mut one = KeyedAccs::new(1);
        for key in [5, 6, 5, -1, dense + 7] {
            let acc = &mut one.get_for(&Record::new(key as u64, 0.0, 0))[0];
            if key != 6 {
                Count::update(acc, 0.0);
            }
        }
        let accs = one.dense_accs();
        assert_eq!(dense_acc(accs, 5).map(|a| a.count()), Some(2));
        assert_eq!(
            dense_acc(accs, 6).map(|a| a.count()),
            Some(0),
            "made, no record"
        );
        assert!(dense_acc(accs, -1).is_none());
        assert!(dense_acc(accs, dense + 7).is_none());
        assert_eq!(one.len(), 4);
        // A key whose place exists gets state from its first record on the per-record path.
        Count::update(dense_acc(one.dense_accs(), 7).unwrap(), 0.0);
        assert_eq!(one.len(), 5);
        let mut ones = Vec::new();
        one.for_each_sorted(|k, accs| ones.push((k.to_string(), accs[0].count())));
        assert_eq!(
            ones,
            [
                ("-1".to_string(), 1),
                ("5".to_string(), 2),
                ("6".to_string(), 0),
                ("7".to_string(), 1),
                ((dense + 7).to_string(), 1)
            ]
        );
        one.clear();
        assert_eq!(one.len(), 0);
        assert_eq!(dense_acc(one.dense_accs(), 5).map(|a| a.count()), Some(0));
        // Clearing forgets every key; new keys start empty.
        s.clear();
        assert_eq!(s.len(), 0);
        assert!(seen(&mut s).is_empty());
        assert_eq!(s.get(&Value::Int(5))[0], Acc::default());
        assert_eq!(s.get(&Value::from("a"))[1], Acc::default());
        assert_eq!(s.len(), 2);
        // Hashed: the same state, no dense accumulators.
        let mut h = KeyedAccs::hashed(2);
        for (i, key) in keys.iter().enumerate() {
            let accs = h.get(key);
            Sum::update(&mut accs[0], 1.0);
            Sum::update(&mut accs[1], i as f64);
        }
        assert_eq!(seen(&mut h), expected);
        assert!(h.dense.is_empty());
        assert_eq!(h.get_for(&Record::new(5, 0.0, 0))[0].count(), 2);
    }
}

/// `reduce`'s keyed state as it declares it: each key's accumulators, kept in the layout of
/// [`KeyedAccs`] and snapshotted, restored and forgotten by the runtime through this table.
impl tidemark_runtime::keyed_table::KeyedTable for KeyedAccs {
    fn snapshot(
        &self,
        out: &mut tidemark_runtime::keyed_state::KeyedSnapshot,
    ) -> Result<(), tidemark_runtime::state_codec::StateCodecError> {
        for (key, accs) in self.iter() {
            out.put(&key, accs)?;
        }
        Ok(())
    }

    fn restore(
        &mut self,
        state: &tidemark_runtime::keyed_state::KeyedSnapshot,
    ) -> Result<(), tidemark_runtime::state_codec::StateCodecError> {
        for (key, accs) in state.decoded::<Vec<Acc>>()? {
            for (into, from) in self.get(&key).iter_mut().zip(&accs) {
                *into = *from;
            }
        }
        Ok(())
    }

    /// Rare (a rebalance): rebuilt through a snapshot.
    fn forget(
        &mut self,
        forget: &dyn Fn(&Value) -> bool,
    ) -> Result<(), tidemark_runtime::state_codec::StateCodecError> {
        use tidemark_runtime::keyed_table::KeyedTable;
        let mut kept = tidemark_runtime::keyed_state::KeyedSnapshot::new(1);
        for (key, accs) in self.iter() {
            if !forget(&key) {
                kept.put(&key, accs)?;
            }
        }
        self.clear();
        KeyedTable::restore(self, &kept)
    }

    fn keys(&self) -> usize {
        self.len()
    }
}
