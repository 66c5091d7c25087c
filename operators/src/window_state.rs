//! The state of one `window` subtask: windows of any kind ([`crate::window_assigner`]) holding,
//! per key, one accumulator per aggregate ([`crate::aggregates::Acc`]): for tumbling and
//! sliding windows one [`KeyedAccs`] per window, for sessions each key's sessions. The same
//! state computes `aggregates:` and the old single `aggregate` ([`Computed`]).
//!
//! Per record: the aggregates' expressions are evaluated once, then the values are added to
//! the key's accumulators in each window the record belongs to (one for tumbling and session,
//! `size / slide` for sliding). A record all of whose windows have expired is *late*: counted,
//! and written to the dead letter when there is one. Windows fire when the progress (the
//! watermark, or the clock in processing time) passes their last instant, emitting one result
//! per key; a record added to a window that has already fired but has not expired (allowed
//! lateness) emits the key's updated result at once.
//!
//! Each result of `aggregates:` carries its result id ([`ResultId::Window`]: the vertex, the
//! window's bounds and the firing's number, 0 on time and 1, 2, … for late updates). The
//! number of late updates so far is kept per key and window as one accumulator after the
//! aggregates' ([`Computed::firings_slot`]), so that checkpoints, restores and state moves
//! carry it with the accumulators (a checkpoint written without it restores it as 0).
//!
//! Nothing here allocates per record in the steady state: a key's first record in a window
//! clones the key (an `Arc` for strings) and may grow the window's tables, which are reused
//! for later windows.

use tidemark_runtime::keyed_state::KeyedSnapshot;
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::provenance::ResultId;
use tidemark_runtime::state_codec::StateCodecError;
use tidemark_runtime::value::{Map, Value};
use tidemark_runtime::{Record, TimestampType};

use crate::aggregate::{self, KeyedAccs};
use crate::aggregates::{Acc, Aggregates};
use crate::config::Aggregate;
use crate::expr::Number;
use crate::window_assigner::{AlignedWindows, KeyedSessions, Slot, Window, WindowKind};
use crate::window_snapshot::{self, SavedWindow};

/// Window tables kept for reuse, so steady state does not allocate.
const SPARE: usize = 8;

/// What a window computes per key, and how its results look.
#[derive(Debug, Clone)]
pub(crate) enum Computed {
    /// `aggregates:`: `{"key", "window_start", "window_end", <aggregates>}` at `end - 1 ms`,
    /// keys in the order of their first record in the window.
    Aggregates(Aggregates),
    /// The old single `aggregate` of `value` (tumbling windows): `{"key", "value"}` (a
    /// numeric record for an int key) at `end - 1 ns`, keys in key order.
    Value(Aggregate),
}

/// One record's input to the aggregates, by [`Computed`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input<'a> {
    /// The aggregates' values ([`Aggregates::values`]).
    Values(&'a [Option<Number>]),
    /// The old single aggregate's `value`.
    Value(f64),
}

impl Computed {
    /// Accumulators per key: the aggregates', and for `aggregates:` the late firings'.
    fn width(&self) -> usize {
        match self {
            Computed::Aggregates(a) => a.specs.len() + 1,
            Computed::Value(_) => 1,
        }
    }

    /// Where the key's late firings so far are counted among its accumulators (`counted`):
    /// after the aggregates'. `None` for the old single aggregate, whose numeric results
    /// carry no result id.
    fn firings_slot(&self) -> Option<usize> {
        match self {
            Computed::Aggregates(a) => Some(a.specs.len()),
            Computed::Value(_) => None,
        }
    }

    /// The output record of `key`'s result in `window` at firing `firing`, with its result
    /// id (`aggregates:` only).
    fn result_at(
        &self,
        vertex: &Name,
        key: &Value,
        window: Window,
        accs: &[Acc],
        firing: u32,
    ) -> Record {
        let mut record = self.result(key, window, accs);
        if self.firings_slot().is_some() {
            record.set_result_id(ResultId::Window {
                vertex: vertex.clone(),
                start: window.start,
                end: window.end,
                firing,
            });
        }
        record
    }

    /// The output record of a late update of `key`'s result in `window`: its firing's number
    /// is one more than the late updates before it, counted in `accs`.
    fn late_result(&self, vertex: &Name, key: &Value, window: Window, accs: &mut [Acc]) -> Record {
        let firing = match self.firings_slot() {
            Some(slot) => {
                accs[slot].counted += 1;
                u32::try_from(accs[slot].counted).unwrap_or(u32::MAX)
            }
            None => 0,
        };
        self.result_at(vertex, key, window, accs, firing)
    }

    #[inline]
    fn update(&self, accs: &mut [Acc], input: Input<'_>) {
        match (self, input) {
            (Computed::Aggregates(a), Input::Values(values)) => a.update(accs, values),
            (Computed::Value(f), Input::Value(v)) => {
                aggregate::update(*f, &mut accs[0], v);
            }
            _ => unreachable!("the input of another form"),
        }
    }

    /// Folds the accumulators `from` into `into` (two sessions merging).
    fn merge(&self, into: &mut [Acc], from: &[Acc]) {
        match self {
            Computed::Aggregates(a) => {
                for ((x, y), spec) in into.iter_mut().zip(from).zip(&a.specs) {
                    x.merge(spec.function, y);
                }
            }
            Computed::Value(f) => into[0].merge(*f, &from[0]),
        }
    }

    /// The output record of `key`'s result in `window`.
    fn result(&self, key: &Value, window: Window, accs: &[Acc]) -> Record {
        match self {
            Computed::Aggregates(a) => Record::with_event(
                key.clone(),
                result_event(a, key, window, accs),
                window.end.saturating_sub(1_000_000),
            )
            .with_timestamp_type(TimestampType::Create),
            Computed::Value(f) => {
                Record::keyed_value(key, aggregate::result(*f, &accs[0]), window.last_instant())
            }
        }
    }

    /// Emits the result of every key of `window`, fired on time (firing 0).
    fn fire(
        &self,
        vertex: &Name,
        window: Window,
        keyed: &mut KeyedAccs,
        emit: &mut impl FnMut(Record),
    ) {
        match self {
            Computed::Aggregates(_) => {
                for (key, accs) in keyed.iter() {
                    emit(self.result_at(vertex, &key, window, accs, 0));
                }
            }
            Computed::Value(_) => {
                keyed.for_each_sorted(|key, accs| emit(self.result(key, window, accs)))
            }
        }
    }
}

/// Why a record was not added: all its windows have expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Late {
    /// The last window the record belonged to.
    pub window: Window,
}

/// The windows and accumulators of one subtask.
#[derive(Debug)]
pub(crate) struct WindowState {
    /// The `window` vertex: named in each result's id.
    vertex: Name,
    kind: WindowKind,
    lateness: i64,
    computed: Computed,
    /// Accumulators per key and window: the number of aggregates.
    width: usize,
    /// Up to where time is complete (see [`crate::window_assigner`]); `i64::MIN` at first.
    progress: i64,
    /// Tumbling and sliding windows: each window's keys.
    aligned: AlignedWindows<KeyedAccs>,
    /// Sessions: each key's sessions.
    sessions: KeyedSessions<Value, Vec<Acc>>,
    spare: Vec<KeyedAccs>,
    /// An advance to `progress` stopped with due windows not fired yet
    /// ([`WindowState::advance_until`]).
    firing: bool,
}

/// The output event of one key and window: `{"key", "window_start", "window_end", …}` with
/// the bounds in milliseconds since the epoch.
pub(crate) fn result_event(
    aggregates: &Aggregates,
    key: &Value,
    window: Window,
    accs: &[Acc],
) -> Map {
    let mut event = Map::with_capacity(3 + aggregates.specs.len());
    // Static names: no allocation per result.
    event.push_unchecked(arcstr::literal!("key"), key.clone());
    event.push_unchecked(
        arcstr::literal!("window_start"),
        window.start.div_euclid(1_000_000),
    );
    event.push_unchecked(
        arcstr::literal!("window_end"),
        window.end.div_euclid(1_000_000),
    );
    aggregates.write(accs, &mut event);
    event
}

impl WindowState {
    /// How much state is kept: key entries (per window), windows not yet expired, and an
    /// estimate of the bytes (a scan of the state: about once a second, not per record).
    pub(crate) fn size(&self) -> tidemark_runtime::StateSize {
        use std::mem::size_of;
        let (mut keys, mut windows, mut bytes) = (0usize, 0usize, 0usize);
        for keyed in self.aligned.states() {
            windows += 1;
            keys += keyed.len();
            bytes += size_of::<KeyedAccs>() + keyed.estimated_bytes() + 64;
        }
        for sessions in self.sessions.sessions() {
            keys += 1;
            windows += sessions.len();
            bytes += size_of::<Value>()
                + 64
                + sessions
                    .iter()
                    .map(|(_, slot)| 48 + slot.state.capacity() * size_of::<Acc>())
                    .sum::<usize>();
        }
        tidemark_runtime::StateSize {
            keys: keys as u64,
            windows_open: windows as u64,
            bytes: bytes as u64,
        }
    }

    pub(crate) fn new(vertex: &str, kind: WindowKind, lateness: i64, computed: Computed) -> Self {
        WindowState {
            vertex: name_of(vertex),
            kind,
            lateness,
            width: computed.width(),
            computed,
            progress: i64::MIN,
            aligned: AlignedWindows::default(),
            sessions: KeyedSessions::default(),
            spare: Vec::new(),
            firing: false,
        }
    }

    /// An empty state of the same window, aggregates and lateness (a lane:
    /// [`crate::window_lanes`]).
    pub(crate) fn empty_like(&self) -> Self {
        WindowState {
            vertex: self.vertex.clone(),
            kind: self.kind,
            lateness: self.lateness,
            width: self.width,
            computed: self.computed.clone(),
            progress: i64::MIN,
            aligned: AlignedWindows::default(),
            sessions: KeyedSessions::default(),
            spare: Vec::new(),
            firing: false,
        }
    }

    /// What is computed.
    pub(crate) fn computed(&self) -> &Computed {
        &self.computed
    }

    /// The progress so far.
    pub(crate) fn progress(&self) -> i64 {
        self.progress
    }

    /// Whether a record at `t` would be late: every window it belongs to has expired.
    pub(crate) fn late(&self, t: i64) -> Option<Late> {
        let (progress, lateness) = (self.progress, self.lateness);
        match self.kind {
            WindowKind::Session { gap } => {
                let window = Window::new(t, t.saturating_add(gap));
                window
                    .is_expired(progress, lateness)
                    .then_some(Late { window })
            }
            kind => {
                let mut last = None;
                for window in kind.assign(t) {
                    if !window.is_expired(progress, lateness) {
                        return None;
                    }
                    last = Some(window);
                }
                last.map(|window| Late { window })
            }
        }
    }

    /// Adds a record of `key` at `t` whose aggregate input is `input`; results of windows
    /// that have already fired (late firings) go to `emit`. `Err` when the record is late.
    #[inline]
    pub(crate) fn add(
        &mut self,
        key: &Value,
        t: i64,
        input: Input<'_>,
        mut emit: impl FnMut(Record),
    ) -> Result<(), Late> {
        let (progress, lateness, width) = (self.progress, self.lateness, self.width);
        let (computed, vertex) = (&self.computed, &self.vertex);
        match self.kind {
            WindowKind::Session { gap } => {
                let window = Window::new(t, t.saturating_add(gap));
                if window.is_expired(progress, lateness) {
                    return Err(Late { window });
                }
                let (window, slot) = self.sessions.add(
                    key,
                    window,
                    || vec![Acc::default(); width],
                    |into, from| computed.merge(into, &from),
                );
                computed.update(&mut slot.state, input);
                if window.is_due(progress) {
                    slot.fired = true;
                    emit(computed.late_result(vertex, key, window, &mut slot.state));
                }
                Ok(())
            }
            kind => {
                let mut last = None;
                let mut added = false;
                for window in kind.assign(t) {
                    last = Some(window);
                    if window.is_expired(progress, lateness) {
                        continue;
                    }
                    added = true;
                    let spare = &mut self.spare;
                    let slot = self.aligned.slot(window, || {
                        spare.pop().unwrap_or_else(|| match computed {
                            // As the old windows: small int keys dense.
                            Computed::Value(_) => KeyedAccs::new(width),
                            Computed::Aggregates(_) => KeyedAccs::hashed(width),
                        })
                    });
                    let accs = slot.state.get(key);
                    computed.update(accs, input);
                    if window.is_due(progress) {
                        // Fired already (or new within the lateness): this key's update now.
                        slot.fired = true;
                        emit(computed.late_result(vertex, key, window, accs));
                    }
                }
                if added {
                    Ok(())
                } else {
                    Err(Late {
                        window: last.expect("a timestamp is in at least one window"),
                    })
                }
            }
        }
    }

    /// Time is complete up to `progress`: fires the windows that are due, in window order
    /// (sessions in order of their keys' timers), and forgets the expired ones. A progress
    /// that does not advance does nothing.
    pub(crate) fn advance(&mut self, progress: i64, mut emit: impl FnMut(Record)) {
        self.advance_until(progress, |r| {
            emit(r);
            false
        });
    }

    /// [`WindowState::advance`] that stops after a window for which `emit` said its output is
    /// full (returned `true`): returns whether it stopped so; called again, with the same
    /// `progress` or any other, it goes on firing what is due first.
    pub(crate) fn advance_until(
        &mut self,
        progress: i64,
        mut emit: impl FnMut(Record) -> bool,
    ) -> bool {
        if progress > self.progress {
            self.progress = progress;
        } else if !self.firing {
            return false;
        }
        let progress = self.progress;
        let (computed, vertex) = (&self.computed, &self.vertex);
        if self.kind.is_session() {
            self.sessions
                .advance(progress, self.lateness, |key, window, accs| {
                    emit(computed.result_at(vertex, key, window, accs, 0));
                });
            self.firing = false;
        } else {
            let spare = &mut self.spare;
            self.firing = self.aligned.advance_until(
                progress,
                self.lateness,
                |window, keyed| {
                    let mut full = false;
                    computed.fire(vertex, window, keyed, &mut |r| full |= emit(r));
                    full
                },
                |mut keyed| {
                    if spare.len() < SPARE {
                        keyed.clear();
                        spare.push(keyed);
                    }
                },
            );
        }
        self.firing
    }

    /// Writes every key's windows into `out` (through the keyed-state API, each key into its
    /// key group, all its windows in one entry: [`window_snapshot`]), and the progress as the
    /// operator-wide value.
    pub(crate) fn snapshot(&self, out: &mut KeyedSnapshot) -> Result<(), StateCodecError> {
        out.set_shared(&self.progress)?;
        window_snapshot::write_aligned(&self.aligned, out)?;
        window_snapshot::write_sessions(&self.sessions, out)
    }

    /// Takes back the windows of the keys in `state` ([`WindowState::snapshot`] of one or
    /// more old subtasks) and their progress: the least of theirs (with aligned barriers they
    /// are all the same), and the least of what earlier restores gave (key groups restored
    /// one by one from owners that were at different points: none of their records after
    /// their own progress is late). For a state that has not fired anything itself.
    pub(crate) fn restore(&mut self, state: &KeyedSnapshot) -> Result<(), StateCodecError> {
        if let Some(progress) = state.shared::<i64>()?.into_iter().min() {
            self.progress = match self.progress {
                i64::MIN => progress,
                current => current.min(progress),
            };
        }
        self.restore_windows(state)
    }

    /// Takes back the windows of the keys in `state`, leaving the progress as it is (a state
    /// that follows its watermark already: key groups that move to it while it runs).
    pub(crate) fn restore_windows(&mut self, state: &KeyedSnapshot) -> Result<(), StateCodecError> {
        let width = self.width;
        for (key, windows) in state.decoded::<Vec<SavedWindow>>()? {
            for saved in windows {
                let window = Window::new(saved.start, saved.end);
                let mut accs = saved.accs;
                accs.resize(width, Acc::default());
                if self.kind.is_session() {
                    let slot = Slot {
                        state: accs,
                        fired: saved.fired,
                    };
                    self.sessions.restore(&key, window, slot, self.lateness);
                } else {
                    let computed = &self.computed;
                    let slot = self.aligned.slot(window, || match computed {
                        Computed::Value(_) => KeyedAccs::new(width),
                        Computed::Aggregates(_) => KeyedAccs::hashed(width),
                    });
                    slot.state.get(&key).copy_from_slice(&accs);
                    slot.fired |= saved.fired;
                }
            }
        }
        Ok(())
    }

    /// Forgets the windows of every key `forget` is true of, firing nothing (their key groups
    /// moved to another owner); the progress stays. Rare (a rebalance): rebuilt through a
    /// snapshot.
    pub(crate) fn forget(
        &mut self,
        forget: &dyn Fn(&Value) -> bool,
    ) -> Result<(), StateCodecError> {
        let mut all = KeyedSnapshot::new(1);
        self.snapshot(&mut all)?;
        let mut kept = KeyedSnapshot::new(1);
        for (key, windows) in all.decoded::<Vec<SavedWindow>>()? {
            if !forget(&key) {
                kept.put(&key, &windows)?;
            }
        }
        self.aligned = AlignedWindows::default();
        self.sessions = KeyedSessions::default();
        self.restore(&kept)
    }

    /// The end of input: every window that has not fired fires, and all are forgotten.
    pub(crate) fn finish(&mut self, mut emit: impl FnMut(Record)) {
        self.finish_until(|r| {
            emit(r);
            false
        });
    }

    /// [`WindowState::finish`] that stops after a window for which `emit` said its output is
    /// full (returned `true`): returns whether it stopped so; called again, it goes on.
    pub(crate) fn finish_until(&mut self, mut emit: impl FnMut(Record) -> bool) -> bool {
        let (computed, vertex) = (&self.computed, &self.vertex);
        let more = self.aligned.finish_until(|window, keyed| {
            let mut full = false;
            computed.fire(vertex, window, keyed, &mut |r| full |= emit(r));
            full
        });
        if more {
            return true;
        }
        self.sessions.finish(|key, window, accs| {
            emit(computed.result_at(vertex, key, window, accs, 0));
        });
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregates::AggregatesConfig;
    use crate::expr::{Evaluator, Scope};
    use serde_json::json;

    const MS: i64 = 1_000_000;

    fn aggregates() -> Aggregates {
        serde_json::from_value::<AggregatesConfig>(json!({"n": "count", "s": {"sum": "v"}}))
            .unwrap()
            .compile()
            .unwrap()
    }

    /// A state over `{"v": …}` events with `n: count, s: {sum: v}`; times in ms.
    struct Harness {
        state: WindowState,
        eval: Evaluator,
        late: Vec<(i64, i64)>,
        /// The result ids of every result emitted, in order.
        ids: Vec<String>,
    }

    impl Harness {
        fn new(kind: WindowKind, lateness_ms: i64) -> Self {
            Harness {
                state: WindowState::new(
                    "w",
                    kind,
                    lateness_ms * MS,
                    Computed::Aggregates(aggregates()),
                ),
                eval: Evaluator::new(),
                late: Vec::new(),
                ids: Vec::new(),
            }
        }

        fn add(&mut self, key: &str, t_ms: i64, v: i64) -> Vec<String> {
            let event = Value::from_json(format!(r#"{{"v": {v}}}"#).as_bytes()).unwrap();
            let key = Value::from(key);
            let scope = Scope {
                event: (&event).into(),
                key: &key,
                timestamp_ms: t_ms,
            };
            let mut values = Vec::new();
            let Computed::Aggregates(aggregates) = self.state.computed() else {
                panic!("aggregates")
            };
            aggregates.values(&self.eval, &scope, &mut values).unwrap();
            let mut out = Vec::new();
            let ids = &mut self.ids;
            if let Err(late) = self
                .state
                .add(&key, t_ms * MS, Input::Values(&values), |r| {
                    ids.push(id_of(&r));
                    out.push(show(r))
                })
            {
                self.late
                    .push((late.window.start / MS, late.window.end / MS));
            }
            out
        }

        fn advance(&mut self, progress_ms: i64) -> Vec<String> {
            let mut out = Vec::new();
            let ids = &mut self.ids;
            self.state.advance(progress_ms * MS, |r| {
                ids.push(id_of(&r));
                out.push(show(r))
            });
            out
        }

        fn finish(&mut self) -> Vec<String> {
            let mut out = Vec::new();
            let ids = &mut self.ids;
            self.state.finish(|r| {
                ids.push(id_of(&r));
                out.push(show(r))
            });
            out
        }
    }

    fn id_of(r: &Record) -> String {
        let mut out = Vec::new();
        assert!(tidemark_runtime::provenance::write_result_id(r, &mut out));
        String::from_utf8(out).unwrap()
    }

    fn show(r: Record) -> String {
        let text = r.event_json();
        assert!(
            text.starts_with(&format!(r#"{{"key":{},"#, r.key())),
            "{text}"
        );
        let end: i64 = text
            .split(r#""window_end":"#)
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(r.timestamp, (end - 1) * MS, "{text}");
        text
    }

    fn line(key: &str, start: i64, end: i64, n: i64, s: i64) -> String {
        format!(r#"{{"key":"{key}","window_start":{start},"window_end":{end},"n":{n},"s":{s}}}"#)
    }

    #[test]
    fn forgotten_keys_fire_nothing_and_the_others_fire_as_before() {
        for kind in 0..3 {
            let mut h = Harness::new(kind_of(kind), 0);
            let mut kept = Harness::new(kind_of(kind), 0);
            for (key, t, v) in [("a", 10, 1), ("b", 20, 2), ("a", 30, 3), ("c", 40, 4)] {
                assert!(h.add(key, t, v).is_empty());
                if key != "b" {
                    assert!(kept.add(key, t, v).is_empty());
                }
            }
            h.state.forget(&|k: &Value| k == &Value::from("b")).unwrap();
            assert_eq!(h.state.progress(), kept.state.progress());
            let (mut got, mut want) = (h.advance(5_000), kept.advance(5_000));
            got.sort();
            want.sort();
            assert!(!want.is_empty());
            assert_eq!(got, want, "kind {kind}");
            assert!(got.iter().all(|l| !l.contains(r#""key":"b""#)), "{got:?}");
        }
    }

    #[test]
    fn each_firing_of_a_key_and_window_has_its_number_and_a_restore_goes_on_counting() {
        let mut h = Harness::new(kind_of(0), 5_000);
        h.add("a", 10, 1);
        h.add("b", 20, 1);
        h.advance(1_000);
        h.add("a", 30, 1);
        h.add("a", 40, 1);
        h.add("b", 50, 1);
        let w = |key: &str, firing: u32| format!("window/w/0/1000000000/{firing}/\"{key}\"");
        assert_eq!(
            h.ids,
            [w("a", 0), w("b", 0), w("a", 1), w("a", 2), w("b", 1)]
        );
        // Restored from a checkpoint (or moved with its partition): the count goes on.
        let mut snapshot = KeyedSnapshot::new(4);
        h.state.snapshot(&mut snapshot).unwrap();
        let mut restored = Harness::new(kind_of(0), 5_000);
        restored.state.restore(&snapshot).unwrap();
        restored.add("a", 60, 1);
        restored.add("c", 70, 1);
        assert_eq!(restored.ids, [w("a", 3), w("c", 1)]);
        // A checkpoint written before firings were counted (no counter after the aggregates'
        // accumulators) restores with none counted.
        let mut old = KeyedSnapshot::new(4);
        old.set_shared(&(1_000 * MS)).unwrap();
        let accs = vec![
            Acc {
                counted: 1,
                bits: 0,
            },
            Acc {
                counted: 1,
                bits: 1,
            },
        ];
        old.put(
            &Value::from("a"),
            &vec![SavedWindow {
                start: 0,
                end: 1_000 * MS,
                fired: true,
                accs,
            }],
        )
        .unwrap();
        let mut from_old = Harness::new(kind_of(0), 5_000);
        from_old.state.restore(&old).unwrap();
        assert_eq!(from_old.add("a", 80, 2), [line("a", 0, 1000, 2, 3)]);
        assert_eq!(from_old.ids, [w("a", 1)]);
    }

    use proptest::prelude::*;
    use tidemark_runtime::key_group::{key_group, KeyGroupRange};
    use tidemark_runtime::state_codec::{decode, encode};

    fn kind_of(k: usize) -> WindowKind {
        match k {
            0 => WindowKind::tumbling(1000 * MS).unwrap(),
            1 => WindowKind::sliding(1000 * MS, 500 * MS).unwrap(),
            _ => WindowKind::session(300 * MS).unwrap(),
        }
    }

    /// Up to 80 records `(key k0..k6, t_ms, v)`.
    fn records() -> impl Strategy<Value = Vec<(u8, i64, i64)>> {
        prop::collection::vec((0u8..7, 0i64..6000, -50i64..50), 0..80)
    }

    /// Adds `(key, t_ms, v)` and moves the progress to 400 ms behind the newest time seen;
    /// the results, in order.
    fn feed(h: &mut Harness, seen: &mut i64, key: &str, t: i64, v: i64) -> Vec<String> {
        let mut out = h.add(key, t, v);
        *seen = (*seen).max(t);
        out.extend(h.advance(*seen - 400));
        out
    }

    proptest! {
        /// Every kind of window state, snapshot half way through and restored over `p`
        /// subtasks (each taking its key groups): what they emit from there on is what the
        /// uninterrupted state emits, and the late records are the same.
        #[test]
        fn a_restored_window_state_continues_as_the_uninterrupted_one(
            kind in 0usize..3,
            records in records(),
            cut in 0usize..80,
            p in 1usize..4,
            lateness in prop::sample::select(vec![0i64, 700]),
        ) {
            let m = 16;
            let cut = cut.min(records.len());
            let key = |k: u8| format!("k{k}");
            let mut whole = Harness::new(kind_of(kind), lateness);
            let mut seen = i64::MIN / 2;
            for &(k, t, v) in &records[..cut] {
                feed(&mut whole, &mut seen, &key(k), t, v);
            }
            let mut snapshot = KeyedSnapshot::new(m);
            whole.state.snapshot(&mut snapshot).unwrap();
            let snapshot: KeyedSnapshot = decode(&encode(&snapshot).unwrap()).unwrap();
            let mut parts: Vec<Harness> = (0..p)
                .map(|i| {
                    let mut h = Harness::new(kind_of(kind), lateness);
                    h.state.restore(&snapshot.part(KeyGroupRange::of_subtask(i, p, m))).unwrap();
                    h
                })
                .collect();
            whole.late.clear();
            whole.ids.clear();
            let (mut expected, mut got) = (Vec::new(), Vec::new());
            let mut seen_parts = seen;
            for &(k, t, v) in &records[cut..] {
                expected.extend(feed(&mut whole, &mut seen, &key(k), t, v));
                let g = key_group(Value::from(key(k).as_str()).routing_hash(), m);
                let owner = tidemark_runtime::key_group::owner(g, p, m);
                let mut s = seen_parts;
                got.extend(feed(&mut parts[owner], &mut s, &key(k), t, v));
                for (i, h) in parts.iter_mut().enumerate() {
                    if i != owner {
                        got.extend(h.advance(s - 400));
                    }
                }
                seen_parts = s;
            }
            expected.extend(whole.finish());
            let mut late = Vec::new();
            for h in &mut parts {
                got.extend(h.finish());
                late.extend(h.late.iter().copied());
            }
            expected.sort();
            got.sort();
            prop_assert_eq!(got, expected);
            // The same results with the same ids: late updates keep counting their firings.
            let mut expected_ids = whole.ids.clone();
            let mut ids: Vec<String> = parts.iter().flat_map(|h| h.ids.clone()).collect();
            expected_ids.sort();
            ids.sort();
            prop_assert_eq!(ids, expected_ids);
            let mut expected_late = whole.late.clone();
            expected_late.sort();
            late.sort();
            prop_assert_eq!(late, expected_late);
        }
    }

    /// The snapshot's entries as `WindowState::snapshot` wrote them through serde before it
    /// wrote them by hand: each key's windows gathered in a map, then `put` (a reference
    /// computed independently of `window_snapshot`), sorted.
    fn entries_through_serde(state: &WindowState, m: u32) -> Vec<(u32, String, Vec<u8>)> {
        let mut per_key: std::collections::HashMap<Value, Vec<SavedWindow>> =
            std::collections::HashMap::new();
        for (window, slot) in state.aligned.iter() {
            for (key, accs) in slot.state.iter() {
                per_key
                    .entry(key.into_owned())
                    .or_default()
                    .push(SavedWindow {
                        start: window.start,
                        end: window.end,
                        fired: slot.fired,
                        accs: accs.to_vec(),
                    });
            }
        }
        for (key, sessions) in state.sessions.iter() {
            let saved = per_key.entry(key.clone()).or_default();
            for (window, slot) in sessions.iter() {
                saved.push(SavedWindow {
                    start: window.start,
                    end: window.end,
                    fired: slot.fired,
                    accs: slot.state.clone(),
                });
            }
        }
        let mut out = KeyedSnapshot::new(m);
        out.set_shared(&state.progress).unwrap();
        for (key, windows) in &per_key {
            out.put(key, windows).unwrap();
        }
        sorted_entries(&out)
    }

    fn sorted_entries(snapshot: &KeyedSnapshot) -> Vec<(u32, String, Vec<u8>)> {
        let mut entries: Vec<_> = snapshot
            .entries()
            .map(|(g, key, bytes)| (g, format!("{key:?}"), bytes.to_vec()))
            .collect();
        entries.sort();
        entries
    }

    proptest! {
        /// The entries written by hand are, key by key, the serde encoding of the key's
        /// windows (`Vec<SavedWindow>`), for every kind of window.
        #[test]
        fn written_windows_are_the_codecs_encoding_of_each_keys_windows(
            kind in 0usize..3,
            records in records(),
            lateness in prop::sample::select(vec![0i64, 700]),
        ) {
            let m = 16;
            let mut h = Harness::new(kind_of(kind), lateness);
            let mut seen = i64::MIN / 2;
            for &(k, t, v) in &records {
                feed(&mut h, &mut seen, &format!("k{k}"), t, v);
            }
            let mut snapshot = KeyedSnapshot::new(m);
            h.state.snapshot(&mut snapshot).unwrap();
            prop_assert_eq!(sorted_entries(&snapshot), entries_through_serde(&h.state, m));
            prop_assert_eq!(snapshot.shared::<i64>().unwrap(), vec![h.state.progress]);
        }

        /// The same for the old single aggregate's windows, whose small int keys are dense
        /// (no value of their own) and the others (here negative) hashed.
        #[test]
        fn written_windows_of_int_keys_are_the_codecs_encoding(
            records in prop::collection::vec((-3i64..7, 0i64..6000, -50i64..50), 0..80),
        ) {
            let m = 16;
            let kind = WindowKind::tumbling(1000 * MS).unwrap();
            let mut state = WindowState::new("w", kind, 0, Computed::Value(Aggregate::Sum));
            let mut seen = i64::MIN / 2;
            for &(k, t, v) in &records {
                let _ = state.add(&Value::Int(k), t * MS, Input::Value(v as f64), |_| {});
                seen = seen.max(t);
                state.advance((seen - 400) * MS, |_| {});
            }
            let mut snapshot = KeyedSnapshot::new(m);
            state.snapshot(&mut snapshot).unwrap();
            prop_assert_eq!(sorted_entries(&snapshot), entries_through_serde(&state, m));
        }
    }

    #[test]
    fn tumbling_windows_fire_per_key_with_the_progress() {
        let mut h = Harness::new(WindowKind::tumbling(1000 * MS).unwrap(), 0);
        assert!(h.add("a", 100, 1).is_empty());
        assert!(h.add("b", 999, 2).is_empty());
        assert!(h.add("a", 1500, 4).is_empty());
        assert!(h.add("a", 200, 8).is_empty());
        assert!(h.advance(998).is_empty());
        // The progress reaches 999 ms - 1 ns: one nanosecond short.
        let mut out = Vec::new();
        h.state.advance(999 * MS + 999_998, |r| out.push(show(r)));
        assert!(out.is_empty());
        assert_eq!(
            h.advance(1000),
            [line("a", 0, 1000, 2, 9), line("b", 0, 1000, 1, 2)]
        );
        // Late: [0, 1000) expired with the lateness 0.
        assert!(h.add("a", 5, 1).is_empty());
        assert_eq!(h.late, [(0, 1000)]);
        assert_eq!(h.finish(), [line("a", 1000, 2000, 1, 4)]);
    }

    #[test]
    fn sliding_windows_get_every_record_size_over_slide_times() {
        let mut h = Harness::new(WindowKind::sliding(1000 * MS, 500 * MS).unwrap(), 0);
        h.add("a", 700, 1);
        h.add("a", 1200, 10);
        assert_eq!(h.advance(1000), [line("a", 0, 1000, 1, 1)]);
        assert_eq!(h.advance(1500), [line("a", 500, 1500, 2, 11)]);
        // 1200 is in [500, 1500) (expired) and [1000, 2000) (open): not late.
        h.add("a", 1250, 100);
        assert!(h.late.is_empty());
        // 900 is only in [0, 1000) and [500, 1500), both expired: late.
        h.add("a", 900, 1000);
        assert_eq!(h.late, [(500, 1500)]);
        assert_eq!(h.finish(), [line("a", 1000, 2000, 2, 110)]);
    }

    #[test]
    fn sessions_start_at_the_first_record_and_end_gap_after_the_last() {
        let mut h = Harness::new(WindowKind::session(100 * MS).unwrap(), 0);
        h.add("a", 1000, 1);
        h.add("b", 1010, 2);
        h.add("a", 1050, 3);
        h.add("a", 1150, 4); // touches 1050 + 100: same session
        h.add("a", 1400, 5);
        assert!(h.advance(1108).is_empty());
        assert_eq!(
            h.advance(1250),
            [line("b", 1010, 1110, 1, 2), line("a", 1000, 1250, 3, 8)]
        );
        // A record that would open an already expired session is late.
        h.add("b", 1000, 7);
        assert_eq!(h.late, [(1000, 1100)]);
        // Two sessions joined by a record between them merge, states added up.
        h.add("a", 1600, 6);
        h.add("a", 1500, 7);
        assert_eq!(h.finish(), [line("a", 1400, 1700, 3, 18)]);
    }

    #[test]
    fn allowed_lateness_fires_updates_at_once() {
        let mut h = Harness::new(WindowKind::tumbling(1000 * MS).unwrap(), 2000);
        h.add("a", 10, 1);
        assert_eq!(h.advance(1000), [line("a", 0, 1000, 1, 1)]);
        assert_eq!(h.add("a", 20, 2), [line("a", 0, 1000, 2, 3)]);
        assert_eq!(h.add("b", 30, 5), [line("b", 0, 1000, 1, 5)]);
        // A window that had no record but is within its lateness fires for the record.
        assert!(h.advance(2500).is_empty());
        assert_eq!(h.add("c", 1100, 1), [line("c", 1000, 2000, 1, 1)]);
        // Expired at 1000 - 1 ns + 2000.
        assert!(h.advance(3000).is_empty());
        h.add("a", 0, 1);
        assert_eq!(h.late, [(0, 1000)]);
        assert!(h.finish().is_empty(), "fired windows do not fire again");

        // Sessions: a late record that grows a fired session fires the grown one.
        let mut h = Harness::new(WindowKind::session(100 * MS).unwrap(), 1000);
        h.add("a", 0, 1);
        assert_eq!(h.advance(150), [line("a", 0, 100, 1, 1)]);
        assert_eq!(h.add("a", 40, 2), [line("a", 0, 140, 2, 3)]);
        assert_eq!(h.add("a", 10, 4), [line("a", 0, 140, 3, 7)]);
        // A session not yet due waits for the progress.
        assert!(h.add("a", 120, 8).is_empty());
        assert_eq!(h.advance(220), [line("a", 0, 220, 4, 15)]);
        assert!(h.advance(5000).is_empty());
        assert!(h.late.is_empty());
        assert!(h.finish().is_empty());
    }
}
