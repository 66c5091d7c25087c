//! The table join: `type: join` with `kind: table` (Flink's event-time temporal join, Kafka
//! Streams' versioned stream–table join). Settings and the shared parts are in
//! [`super::join`]; docs/joins.md says what it does.
//!
//! The right input is a changelog: each record is the newest version of its key's row from its
//! timestamp on; a record whose event is null deletes the row. A left record joins one version
//! of its key's row:
//! - `as_of: event_time` (the default): the version with the greatest timestamp at or before
//!   the left record's (of equal timestamps, the one that arrived last). The left record is held
//!   until the right input's watermark has reached its timestamp, or the right input is idle or
//!   ended, so every version it could need has arrived; then it gives its result, timestamped
//!   with its own timestamp. The result does not depend on how the two inputs interleave.
//! - `as_of: latest`: whatever version its key has when it arrives, at once.
//!
//! No version, or a delete, is unmatched: `join: left` gives a result with `right` null,
//! `inner` counts the left record as dropped (`unmatched`). Right records never give a result
//! by themselves.
//!
//! **State** (the keyed state it declares): per key, the versions still needed and the held
//! left records, each in a time-ordered buffer. A key's versions are trimmed when the key gets
//! a record or a held record leaves: the newest version at or before the smaller of the
//! join's watermark minus `allowed_lateness` and the key's oldest held record is kept, and every
//! newer one; a row whose only version left is a delete is removed once nothing is held for it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tidemark_runtime::keyed_state::{KeyedSnapshot, KeyedState};
use tidemark_runtime::keyed_table::{KeyedTable, TimeBuffer};
use tidemark_runtime::value::Value;
use tidemark_runtime::{BoxError, DropReason, JoinCounts, Operator, Output, Record, StateSize};

use super::join_results::{approximate_size, event_text, origin_form, JoinResults};
use tidemark_runtime::provenance::Origin;

/// `as_of:` which version of its key's row a table join's left record joins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AsOf {
    /// The version valid at the left record's timestamp, once every version it could need
    /// has arrived.
    #[default]
    EventTime,
    /// Whatever version the key has when the left record arrives.
    Latest,
}

/// A record kept: its event (JSON text in a snapshot; a version's `null` is a delete) and the
/// input message it came from, for its results' ids.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Kept {
    #[serde(with = "event_text")]
    event: Value,
    #[serde(with = "origin_form")]
    origin: Option<Origin>,
}

impl Kept {
    /// A tombstone's event is null: a delete.
    fn of(record: &Record) -> Kept {
        Kept {
            event: match record.is_tombstone() {
                true => Value::Null,
                false => record.event(),
            },
            origin: record.origin().cloned(),
        }
    }
}

/// One key's row: its versions and the left records waiting for them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Row {
    versions: TimeBuffer<Kept>,
    held: TimeBuffer<Kept>,
}

/// One subtask of a table join.
pub(crate) struct TableJoin {
    /// `join: left`: an unmatched left record gives a result.
    outer: bool,
    as_of: AsOf,
    results: JoinResults,
    /// The rows per key: the keyed state the operator declares.
    state: KeyedState<Row>,
    /// When held left records may go: per timestamp, the keys holding one (made again from the
    /// state on a restore; a key listed for records already gone is passed over).
    release: BTreeMap<i64, Vec<Value>>,
    /// The join's watermark (the smaller of its inputs').
    watermark: i64,
    /// The right input's watermark; `i64::MAX` while it is idle or ended.
    right_watermark: i64,
    /// Both sides come over one Kafka exchange reader (its records say which side they are
    /// for): the right side's watermark is the join's.
    one_reader: bool,
    /// Key groups that moved here behind the subtask's event time (behind a Kafka exchange),
    /// until they catch up ([`super::join_results::caught_up`]).
    behind: Vec<u32>,
}

impl TableJoin {
    pub(crate) fn new(outer: bool, as_of: AsOf, results: JoinResults) -> Self {
        TableJoin {
            outer,
            as_of,
            results,
            state: KeyedState::new(),
            release: BTreeMap::new(),
            watermark: i64::MIN,
            right_watermark: i64::MIN,
            one_reader: false,
            behind: Vec::new(),
        }
    }

    /// The time before which no left record that is not late can come; `i64::MIN` while key
    /// groups that moved here behind the subtask's event time catch up.
    fn limit(&self) -> i64 {
        match self.behind.is_empty() {
            true => self.watermark.saturating_sub(self.results_lateness()),
            false => i64::MIN,
        }
    }

    /// The right side's watermark as far as left records may join by it: `i64::MIN` while key
    /// groups that moved here behind the subtask's event time catch up (their versions may
    /// still come).
    fn right_limit(&self) -> i64 {
        match self.behind.is_empty() {
            true => self.right_watermark,
            false => i64::MIN,
        }
    }

    fn results_lateness(&self) -> i64 {
        self.results.lateness()
    }

    fn left(&mut self, record: &Record, out: &mut Output) -> Result<(), BoxError> {
        if record.is_tombstone() {
            self.results.tombstones_dropped += 1;
            return Ok(());
        }
        let t = record.timestamp;
        if self.watermark != i64::MIN && t < self.limit() {
            return self.results.late(record, self.watermark);
        }
        let key = record.key();
        let left = Kept::of(record);
        match self.as_of {
            AsOf::Latest => {
                let version = self
                    .state
                    .get(&key)
                    .and_then(|row| row.versions.iter().last())
                    .map(|(_, v)| v.clone());
                self.give(&key, &left, version, t, out)
            }
            AsOf::EventTime if t <= self.right_limit() => {
                let version = self.state.get(&key).and_then(|row| version_at(row, t));
                self.give(&key, &left, version, t, out)
            }
            AsOf::EventTime => {
                self.state.get_or_default(&key).held.push(t, left);
                self.release.entry(t).or_default().push(key.into_owned());
                Ok(())
            }
        }
    }

    fn right(&mut self, record: &Record) {
        let key = record.key();
        let version = Kept::of(record);
        let limit = self.limit();
        match self.as_of {
            AsOf::Latest => {
                if version.event == Value::Null {
                    self.state.remove(&key);
                } else {
                    let row = self.state.get_or_default(&key);
                    row.versions = TimeBuffer::new();
                    row.versions.push(record.timestamp, version);
                }
            }
            AsOf::EventTime => {
                let row = self.state.get_or_default(&key);
                row.versions.push(record.timestamp, version);
                if trim(row, limit) {
                    self.state.remove(&key);
                }
            }
        }
    }

    /// The result of left event `event` of `key` at `t` with `version` (`None` or a delete:
    /// unmatched).
    fn give(
        &mut self,
        key: &Value,
        left: &Kept,
        version: Option<Kept>,
        t: i64,
        out: &mut Output,
    ) -> Result<(), BoxError> {
        let l = Some((&left.event, left.origin.as_ref()));
        match version {
            Some(v) if v.event != Value::Null => {
                let r = Some((&v.event, v.origin.as_ref()));
                self.results.emit(key, l, r, t, out)
            }
            _ if self.outer => self.results.emit(key, l, None, t, out),
            _ => {
                self.results.unmatched_dropped += 1;
                Ok(())
            }
        }
    }

    /// Held left records at or before `until` go, in timestamp order.
    fn release_until(&mut self, until: i64, out: &mut Output) -> Result<(), BoxError> {
        let due = match until.checked_add(1) {
            Some(after) => {
                let rest = self.release.split_off(&after);
                std::mem::replace(&mut self.release, rest)
            }
            None => std::mem::take(&mut self.release),
        };
        let limit = self.limit();
        let mut going: Vec<(i64, Kept, Option<Kept>)> = Vec::new();
        for key in due.into_values().flatten() {
            let Some(row) = self.state.get_mut(&key) else {
                continue;
            };
            let mut left = Vec::new();
            row.held.expire(until, |t, k| left.push((t, k)));
            for (t, kept) in left {
                let version = version_at(row, t);
                going.push((t, kept, version));
            }
            if trim(row, limit) {
                self.state.remove(&key);
            }
            for (t, kept, version) in going.drain(..) {
                self.give(&key, &kept, version, t, out)?;
            }
        }
        Ok(())
    }

    /// The release index made again from the state (after a restore).
    fn index(&mut self) {
        self.release.clear();
        for (key, row) in self.state.iter() {
            for (t, _) in row.held.iter() {
                self.release.entry(t).or_default().push(key.clone());
            }
        }
    }
}

/// The version of `row` valid at `t`: the last one at or before it.
fn version_at(row: &Row, t: i64) -> Option<Kept> {
    row.versions
        .range(i64::MIN, t)
        .last()
        .map(|(_, v)| v.clone())
}

/// Drops the versions no left record can need any more, given that none before `limit` can
/// come and the row's held ones; true when the row can go (nothing held, its only version a
/// delete no record can need to see past, or none).
fn trim(row: &mut Row, limit: i64) -> bool {
    let cutoff = row.held.first_timestamp().map_or(limit, |h| h.min(limit));
    row.versions.keep_from_last_at(cutoff);
    row.held.is_empty()
        && match row.versions.iter().next() {
            None => true,
            Some((t, v)) => row.versions.len() == 1 && v.event == Value::Null && t <= cutoff,
        }
}

impl Operator for TableJoin {
    /// Only a join with one input gets records this way: behind a Kafka exchange, whose
    /// reader feeds both sides and says on each record which it is for; any other record means
    /// a join built with one input. The right side's watermark is then the reader's, which
    /// covers both sides' writers ([`Operator::on_watermark`]).
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        match record.exchange_input() {
            Some(0) => {
                self.one_reader = true;
                self.left(&record, out)
            }
            Some(1) => {
                self.one_reader = true;
                self.right(&record);
                Ok(())
            }
            _ => Err(super::join_results::ONE_INPUT.into()),
        }
    }

    fn process_input(
        &mut self,
        input: usize,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<bool, BoxError> {
        match input {
            0 => {
                for record in records.iter() {
                    self.left(record, out)?;
                }
            }
            1 => {
                for record in records.iter() {
                    self.right(record);
                }
            }
            other => return Err(format!("a join has two inputs, not {}", other + 1).into()),
        }
        Ok(true)
    }

    fn uses_time(&self) -> bool {
        false
    }

    fn on_input_watermark(
        &mut self,
        input: usize,
        watermark: i64,
        out: &mut Output,
    ) -> Result<(), BoxError> {
        if input != 1 {
            return Ok(());
        }
        self.right_watermark = watermark;
        if self.as_of == AsOf::EventTime && self.behind.is_empty() {
            self.release_until(watermark, out)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<(), BoxError> {
        self.watermark = self.watermark.max(watermark);
        // Both sides over one exchange reader: its watermark is no later than the right
        // side's, so a left record it passes has every version it joins.
        if self.one_reader && watermark > self.right_watermark {
            self.on_input_watermark(1, watermark, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, _now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        self.release_until(i64::MAX, out)?;
        self.results.finish()
    }

    fn keyed_table(&mut self) -> Option<&mut dyn KeyedTable> {
        Some(&mut self.state)
    }

    /// The rows per key, and the watermarks (operator-wide values).
    fn snapshot_keyed(
        &mut self,
        _checkpoint: u64,
        state: &mut KeyedSnapshot,
    ) -> Result<(), BoxError> {
        KeyedTable::snapshot(&self.state, state)?;
        state.set_shared(&(self.watermark, self.right_watermark))?;
        Ok(())
    }

    /// Takes in the rows of this subtask's key groups and continues from the smallest
    /// watermarks the old subtasks had ([`super::join_results::restored_watermark`]), and makes
    /// the release index again.
    fn restore_keyed(&mut self, state: KeyedSnapshot) -> Result<(), BoxError> {
        KeyedTable::restore(&mut self.state, &state)?;
        let restored = state.shared::<(i64, i64)>()?;
        self.watermark =
            super::join_results::restored_watermark(self.watermark, restored.iter().map(|r| r.0));
        self.right_watermark = super::join_results::restored_watermark(
            self.right_watermark,
            restored.iter().map(|r| r.1),
        );
        self.index();
        Ok(())
    }

    fn restore_keyed_behind(
        &mut self,
        state: KeyedSnapshot,
        groups: &[u32],
        _watermark: i64,
    ) -> Result<(), BoxError> {
        self.restore_keyed(state)?;
        self.behind.extend_from_slice(groups);
        Ok(())
    }

    fn key_groups_event_time(
        &mut self,
        _max_parallelism: u32,
        groups: &[u32],
        watermark: Option<i64>,
        out: &mut Output,
    ) -> Result<(), BoxError> {
        if super::join_results::caught_up(&mut self.behind, groups, watermark, self.watermark)
            && self.as_of == AsOf::EventTime
        {
            self.release_until(self.right_watermark, out)?;
        }
        Ok(())
    }

    fn snapshot_local(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        self.results.snapshot_local(checkpoint)
    }

    fn restore_local(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.results.restore_local(state)
    }

    fn late_records_dropped(&self) -> u64 {
        self.results.dropped(DropReason::Late)
    }

    fn records_dropped(&self, reason: DropReason) -> u64 {
        self.results.dropped(reason)
    }

    fn join_counts(&self) -> Option<JoinCounts> {
        let (held, versions) = self.state.iter().fold((0, 0), |(h, v), (_, r)| {
            (h + r.held.len() as u64, v + r.versions.len() as u64)
        });
        Some(self.results.counts(held, versions))
    }

    fn state_size(&self) -> Option<StateSize> {
        Some(StateSize {
            keys: self.state.len() as u64,
            windows_open: 0,
            bytes: self
                .state
                .iter()
                .flat_map(|(_, r)| r.versions.iter().chain(r.held.iter()))
                .map(|(_, k)| 48 + approximate_size(&k.event))
                .sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::join::INFO;
    use crate::test_util::operator;
    use proptest::prelude::*;
    use serde_json::json;
    use tidemark_runtime::value::Map;

    const MS: i64 = 1_000_000;

    #[derive(Clone, Debug)]
    enum Step {
        /// A left record: key, timestamp (ms), id.
        Left(i64, i64, i64),
        /// A right record: key, timestamp (ms), id, whether it deletes the row.
        Right(i64, i64, i64, bool),
        /// A watermark (ms) of the left input.
        LeftWatermark(i64),
        /// A watermark (ms) of the right input.
        RightWatermark(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0i64..3, 0i64..40).prop_map(|(k, t)| Step::Left(k, t, 0)),
            3 => (0i64..3, 0i64..40, prop::bool::weighted(0.2)).prop_map(|(k, t, d)| Step::Right(k, t, 0, d)),
            1 => (0i64..45).prop_map(Step::LeftWatermark),
            1 => (0i64..45).prop_map(Step::RightWatermark),
        ]
    }

    /// A delete is a tombstone (a Kafka message without a value, kept).
    fn record(k: i64, t: i64, id: i64, delete: bool) -> Record {
        if delete {
            return Record::tombstone(Value::Int(k), t * MS);
        }
        let mut event = Map::new();
        event.insert("id", Value::Int(id));
        Record::with_event(Value::Int(k), event, t * MS)
    }

    /// A result as (left id, right id or -1).
    fn result(r: &Record) -> (i64, i64, i64) {
        let event = r.event();
        let id = |side: &str| match &event {
            Value::Map(m) => match m.get(side) {
                Some(Value::Map(e)) => match e.get("id") {
                    Some(Value::Int(i)) => *i,
                    _ => panic!("no id in {event}"),
                },
                Some(Value::Null) => -1,
                _ => panic!("no {side} in {event}"),
            },
            _ => panic!("not a map: {event}"),
        };
        (id("left"), id("right"), r.timestamp / MS)
    }

    fn table_join(kind: &str, lateness: i64) -> Box<dyn Operator> {
        operator(
            &INFO,
            json!({"kind": "table", "join": kind, "allowed_lateness": format!("{lateness}ms")}),
        )
    }

    /// Runs `steps`, telling the join each input's watermark and the smaller of the two as the
    /// runtime does; a snapshot before step `cut` is restored into a new operator.
    fn run(
        make: &dyn Fn() -> Box<dyn Operator>,
        steps: &[Step],
        cut: Option<usize>,
    ) -> Vec<(i64, i64, i64)> {
        let mut op = make();
        let mut out = Output::with_capacity(1 << 16);
        let mut results = Vec::new();
        let (mut left_wm, mut right_wm, mut combined) = (i64::MIN, i64::MIN, i64::MIN);
        for (i, s) in steps.iter().enumerate() {
            if cut == Some(i) {
                let mut snapshot = KeyedSnapshot::new(8);
                op.snapshot_keyed(1, &mut snapshot).unwrap();
                let snapshot: KeyedSnapshot = tidemark_runtime::state_codec::decode(
                    &tidemark_runtime::state_codec::encode(&snapshot).unwrap(),
                )
                .unwrap();
                op = make();
                op.restore_keyed(snapshot).unwrap();
            }
            match s {
                Step::Left(k, t, id) => {
                    assert!(op
                        .process_input(0, &mut [record(*k, *t, *id, false)], &mut out)
                        .unwrap());
                }
                Step::Right(k, t, id, d) => {
                    assert!(op
                        .process_input(1, &mut [record(*k, *t, *id, *d)], &mut out)
                        .unwrap());
                }
                Step::LeftWatermark(w) => {
                    left_wm = left_wm.max(w * MS);
                    op.on_input_watermark(0, left_wm, &mut out).unwrap();
                }
                Step::RightWatermark(w) => {
                    right_wm = right_wm.max(w * MS);
                    op.on_input_watermark(1, right_wm, &mut out).unwrap();
                }
            }
            if left_wm.min(right_wm) > combined {
                combined = left_wm.min(right_wm);
                op.on_watermark(combined, &mut out).unwrap();
            }
            results.extend(out.records().iter().map(result));
            out.clear();
        }
        // The end of input: the right input ended.
        op.on_input_watermark(1, i64::MAX, &mut out).unwrap();
        op.finish(0, &mut out).unwrap();
        results.extend(out.records().iter().map(result));
        results.sort();
        results
    }

    /// The as-of lookup over the whole changelog: for each left record that was not late, the
    /// last right record of its key at or before its time (arrival order among equal times).
    fn reference(outer: bool, lateness: i64, steps: &[Step]) -> Vec<(i64, i64, i64)> {
        let (mut left_wm, mut right_wm) = (i64::MIN, i64::MIN);
        let mut lefts = Vec::new();
        let mut rights: Vec<(i64, i64, i64, bool)> = Vec::new();
        for s in steps {
            let combined = left_wm.min(right_wm);
            match s {
                Step::Left(k, t, id) => {
                    if combined == i64::MIN || *t >= combined - lateness {
                        lefts.push((*k, *t, *id));
                    }
                }
                Step::Right(k, t, id, d) => rights.push((*k, *t, *id, *d)),
                Step::LeftWatermark(w) => left_wm = left_wm.max(*w),
                Step::RightWatermark(w) => right_wm = right_wm.max(*w),
            }
        }
        let mut out = Vec::new();
        for (k, t, id) in lefts {
            let version = rights.iter().filter(|r| r.0 == k && r.1 <= t).fold(
                None,
                |best: Option<&(i64, i64, i64, bool)>, r| match best {
                    Some(b) if b.1 > r.1 => Some(b),
                    _ => Some(r),
                },
            );
            match version {
                Some(v) if !v.3 => out.push((id, v.2, t)),
                _ if outer => out.push((id, -1, t)),
                _ => {}
            }
        }
        out.sort();
        out
    }

    proptest! {
        /// With the right input's watermark true (no right record at or before it comes after
        /// it), each left record joins the version valid at its time, whatever the
        /// interleaving, and a snapshot and restore before any step changes nothing.
        #[test]
        fn a_table_join_gives_the_as_of_lookup_across_any_restore(
            steps in prop::collection::vec(step(), 0..80),
            outer in any::<bool>(),
            lateness in 0i64..6,
            cut in any::<prop::sample::Index>(),
        ) {
            // Unique ids, and right records true to the right watermark.
            let mut right_wm = i64::MIN;
            let steps: Vec<Step> = steps
                .into_iter()
                .enumerate()
                .filter_map(|(i, s)| match s {
                    Step::Left(k, t, _) => Some(Step::Left(k, t, i as i64)),
                    Step::Right(_, t, _, _) if t <= right_wm => None,
                    Step::Right(k, t, _, d) => Some(Step::Right(k, t, i as i64, d)),
                    Step::RightWatermark(w) => {
                        right_wm = right_wm.max(w);
                        Some(s)
                    }
                    other => Some(other),
                })
                .collect();
            let kind = if outer { "left" } else { "inner" };
            let make = || table_join(kind, lateness);
            let want = reference(outer, lateness, &steps);
            prop_assert_eq!(&run(&make, &steps, None), &want);
            let cut = cut.index(steps.len() + 1);
            prop_assert_eq!(&run(&make, &steps, Some(cut)), &want);
        }
    }

    /// `as_of: latest` joins what the row holds when the left record arrives, at once.
    #[test]
    fn as_of_latest_joins_the_row_as_it_is_now() {
        let mut op = operator(
            &INFO,
            json!({"kind": "table", "as_of": "latest", "join": "left"}),
        );
        let mut out = Output::with_capacity(64);
        op.process_input(1, &mut [record(1, 50, 7, false)], &mut out)
            .unwrap();
        // Earlier in event time, but the row holds version 7 now.
        op.process_input(0, &mut [record(1, 10, 1, false)], &mut out)
            .unwrap();
        op.process_input(1, &mut [record(1, 5, 8, false)], &mut out)
            .unwrap();
        op.process_input(0, &mut [record(1, 70, 2, false)], &mut out)
            .unwrap();
        op.process_input(0, &mut [record(2, 70, 3, false)], &mut out)
            .unwrap();
        let got: Vec<_> = out.records().iter().map(result).collect();
        // Version 8 came last, though older in event time: latest takes it.
        assert_eq!(got, vec![(1, 7, 10), (2, 8, 70), (3, -1, 70)]);
    }

    /// Versions no record can need are dropped: only the one valid at the watermark and the
    /// newer ones stay.
    #[test]
    fn old_versions_are_trimmed() {
        let mut op = table_join("inner", 0);
        let mut out = Output::with_capacity(64);
        for (t, id) in [(1, 1), (2, 2), (3, 3)] {
            op.process_input(1, &mut [record(1, t, id, false)], &mut out)
                .unwrap();
        }
        let bytes = op.state_size().unwrap().bytes;
        op.on_watermark(10 * MS, &mut out).unwrap();
        op.process_input(1, &mut [record(1, 20, 4, false)], &mut out)
            .unwrap();
        // Versions 3 (valid at 10) and 4 stay: two of four.
        assert!(op.state_size().unwrap().bytes < bytes, "trimmed");
        op.on_input_watermark(1, 30 * MS, &mut out).unwrap();
        op.process_input(0, &mut [record(1, 15, 9, false)], &mut out)
            .unwrap();
        assert_eq!(
            out.records().iter().map(result).collect::<Vec<_>>(),
            vec![(9, 3, 15)]
        );
    }
}
