//! The `window` operator: tumbling windows in processing time or event time, one aggregate per
//! key and window.
//!
//! ```yaml
//! operators:
//!   per_user:
//!     type: window
//!     input: clicks
//!     partition: hash
//!     size: 1s
//!     aggregate: count        # count | sum | min | max | mean (of value)
//!     time: event             # processing (default) | event
//!     allowed_lateness: 5s    # only with time: event; default 0
//! ```
//!
//! Windows are aligned to the Unix epoch: `[n·size, (n+1)·size)`. A window's output is one
//! record per key that had records in it, in ascending key order, with the aggregate as value
//! and timestamp `window end - 1 ns` (type `create`: the last instant the window covers, as
//! Flink's `TimeWindow.maxTimestamp()`).
//!
//! **Processing time** (`time: processing`, the default):
//! - A record belongs to the window that is open when it is processed; the operator learns the
//!   time from [`Operator::on_time`], which the runtime calls at least once per batch and
//!   regularly while idle.
//! - When the time reaches the window's end, the window fires. Then the window holding the
//!   current time opens; windows in which nothing arrived emit nothing.
//! - At the end of input, [`Operator::finish`] fires the open window at once (with its end as
//!   if it had closed).
//!
//! **Event time** (`time: event`), as Flink's tumbling event-time windows with
//! `allowedLateness`:
//! - A record belongs to the window holding its timestamp. Time advances only with the
//!   watermark ([`Operator::on_watermark`]): turn watermarks on at the sources, or every window
//!   waits for the end of input.
//! - A window fires when the watermark reaches `end - 1 ns`. Its state is kept until the
//!   watermark reaches `end - 1 ns + allowed_lateness`; a record for a window that has fired but
//!   is still kept updates it and emits the key's updated aggregate at once (a *late firing*,
//!   same timestamp `end - 1 ns`), so the latest output for a key and window is the complete
//!   one.
//! - A record whose window is already purged (`end - 1 ns + allowed_lateness <= watermark`) is
//!   dropped and counted ([`Operator::late_records_dropped`], exported as
//!   `tidemark_late_records_dropped_total`). With `allowed_lateness: 0` a window fires and is
//!   purged at once, and every record behind the watermark is dropped.
//! - At the end of input every window that has not fired fires, in window order.
//! - State: one accumulator per key with records, per window not yet purged. Windows not yet
//!   purged are those ahead of the watermark (at most about `max_out_of_orderness / size + 1`
//!   with in-order sources) and those in their allowed lateness (`allowed_lateness / size + 1`);
//!   so memory is bounded by those windows × keys. A record far ahead of the others opens its
//!   own window, which stays until the watermark passes it.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::aggregate::{input, with_aggregator, Aggregator, KeyedAccs};
use crate::config::{self, duration, nanos_i64, Aggregate};
use crate::registry::{BuildEnv, Built, ComponentInfo, ComponentKind, ConfigError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "window",
    kind: ComponentKind::Operator,
    fields: &["size", "aggregate", "time", "allowed_lateness"],
    summary: "tumbling window in processing or event time: one aggregate per key and window",
    build,
};

/// Settings of the `window` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// The window's length.
    #[serde(with = "duration")]
    pub size: Duration,
    /// What to compute over each key's values in a window.
    pub aggregate: Aggregate,
    /// Which clock assigns records to windows.
    #[serde(default)]
    pub time: WindowTime,
    /// With `time: event`: how long after its end (in event time) a window is kept for late
    /// records; default 0.
    #[serde(default, deserialize_with = "duration::option")]
    pub allowed_lateness: Option<Duration>,
}

/// Which clock assigns records to windows and closes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowTime {
    /// The wall clock when the record is processed.
    #[default]
    Processing,
    /// The record's timestamp; windows close with the watermark.
    Event,
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: WindowConfig = config::parse(INFO.type_name, config)?;
    if config.size.is_zero() {
        return Err(config::invalid(
            INFO.type_name,
            "size",
            "must be more than 0",
        ));
    }
    if config.time == WindowTime::Processing && config.allowed_lateness.is_some() {
        return Err(config::invalid(
            INFO.type_name,
            "allowed_lateness",
            "only applies with time: event (records are never late in \
             processing time)",
        ));
    }
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(window_operator(&config))
    })))
}

/// A new `window` subtask with these settings (`size` must be more than 0).
pub fn window_operator(config: &WindowConfig) -> Box<dyn Operator> {
    let size = nanos_i64(config.size).max(1);
    match config.time {
        WindowTime::Processing => {
            with_aggregator!(config.aggregate, A => Box::new(WindowOperator::<A>::new(size)))
        }
        WindowTime::Event => {
            let lateness = nanos_i64(config.allowed_lateness.unwrap_or_default());
            with_aggregator!(
                config.aggregate,
                A => Box::new(EventWindowOperator::<A>::new(size, lateness))
            )
        }
    }
}

/// The end of the window of `size` holding `t` (saturating at the end of time).
#[inline(always)]
fn end_of_window_at(size: i64, t: i64) -> i64 {
    t.saturating_sub(t.rem_euclid(size)).saturating_add(size)
}

/// Spare accumulator maps kept for new windows, so steady state does not allocate.
const SPARE_WINDOWS: usize = 4;

/// One event-time window's state.
#[derive(Debug, Default)]
struct EventWindow {
    accs: KeyedAccs,
    /// Whether it has fired (its end has passed the watermark).
    fired: bool,
}

/// One subtask of the `window` operator in event time, for one aggregate type.
#[derive(Debug)]
struct EventWindowOperator<A> {
    size: i64,
    lateness: i64,
    /// The current watermark, `i64::MIN` before the first.
    watermark: i64,
    /// Windows not yet purged, by end.
    windows: BTreeMap<i64, EventWindow>,
    spare: Vec<KeyedAccs>,
    late_dropped: u64,
    _aggregate: PhantomData<fn() -> A>,
}

impl<A: Aggregator> EventWindowOperator<A> {
    fn new(size: i64, lateness: i64) -> Self {
        EventWindowOperator {
            size,
            lateness,
            watermark: i64::MIN,
            windows: BTreeMap::new(),
            spare: Vec::new(),
            late_dropped: 0,
            _aggregate: PhantomData,
        }
    }

    /// Emits the aggregate of every key of the window ending at `end`.
    fn emit_window(end: i64, window: &EventWindow, out: &mut Output) {
        let timestamp = end - 1;
        window.accs.for_each_sorted(|key, acc| {
            out.emit(Record::keyed_value(key, A::result(acc), timestamp))
        });
    }

    fn recycle(&mut self, mut accs: KeyedAccs) {
        if self.spare.len() < SPARE_WINDOWS {
            accs.clear();
            self.spare.push(accs);
        }
    }
}

impl<A: Aggregator> Operator for EventWindowOperator<A> {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.process_batch(std::slice::from_ref(&record), out)
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        let (size, lateness, watermark) = (self.size, self.lateness, self.watermark);
        let mut i = 0;
        while i < records.len() {
            let end = end_of_window_at(size, records[i].timestamp);
            let last = end - 1;
            if last.saturating_add(lateness) <= watermark {
                // Its window is gone.
                self.late_dropped += 1;
                i += 1;
                continue;
            }
            // A window the watermark has passed fires for each record (a late firing).
            let passed = last <= watermark;
            let spare = &mut self.spare;
            let window = self.windows.entry(end).or_insert_with(|| EventWindow {
                accs: spare.pop().unwrap_or_default(),
                fired: false,
            });
            window.fired |= passed;
            // The run of records in the same window goes without another lookup.
            while i < records.len() {
                let r = &records[i];
                if r.timestamp < end - size || r.timestamp >= end {
                    break;
                }
                let value = A::update(window.accs.get_for(r), input::<A>(r)?);
                if passed {
                    out.emit(Record::keyed_value(&r.key(), value, last));
                }
                i += 1;
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<(), BoxError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        // Fire every window whose last instant the watermark has reached, in window order.
        for (&end, window) in self.windows.range_mut(..=watermark.saturating_add(1)) {
            if !window.fired {
                Self::emit_window(end, window, out);
                window.fired = true;
            }
        }
        // Purge those past their allowed lateness: end - 1 + lateness <= watermark.
        let keep_from = watermark.saturating_sub(self.lateness).saturating_add(2);
        if self
            .windows
            .first_key_value()
            .is_some_and(|(&end, _)| end < keep_from)
        {
            let kept = self.windows.split_off(&keep_from);
            let purged = std::mem::replace(&mut self.windows, kept);
            for (_, window) in purged {
                self.recycle(window.accs);
            }
        }
        Ok(())
    }

    fn finish(&mut self, _now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        for (end, window) in std::mem::take(&mut self.windows) {
            if !window.fired {
                Self::emit_window(end, &window, out);
            }
        }
        Ok(())
    }

    fn late_records_dropped(&self) -> u64 {
        self.late_dropped
    }
}

/// One subtask of the `window` operator, for one aggregate type.
#[derive(Debug)]
struct WindowOperator<A> {
    size: i64,
    /// The end of the open window, once the time is known.
    end: Option<i64>,
    state: KeyedAccs,
    _aggregate: PhantomData<fn() -> A>,
}

impl<A: Aggregator> WindowOperator<A> {
    fn new(size: i64) -> Self {
        WindowOperator {
            size,
            end: None,
            state: KeyedAccs::default(),
            _aggregate: PhantomData,
        }
    }

    /// The end of the window holding `now`.
    fn end_of_window_at(&self, now: i64) -> i64 {
        now.saturating_sub(now.rem_euclid(self.size))
            .saturating_add(self.size)
    }

    /// Emits the aggregate of every key of the window ending at `end`, and forgets them.
    fn fire(&mut self, end: i64, out: &mut Output) {
        let timestamp = end - 1;
        self.state.drain_sorted(|key, acc| {
            out.emit(Record::keyed_value(key, A::result(&acc), timestamp))
        });
    }
}

impl<A: Aggregator> Operator for WindowOperator<A> {
    fn process(&mut self, record: Record, _out: &mut Output) -> Result<(), BoxError> {
        A::update(self.state.get_for(&record), input::<A>(&record)?);
        Ok(())
    }

    fn process_batch(&mut self, records: &[Record], _out: &mut Output) -> Result<(), BoxError> {
        for record in records {
            A::update(self.state.get_for(record), input::<A>(record)?);
        }
        Ok(())
    }

    fn on_time(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        match self.end {
            Some(end) if now_nanos >= end => {
                self.fire(end, out);
                self.end = Some(self.end_of_window_at(now_nanos));
            }
            Some(_) => {}
            None => self.end = Some(self.end_of_window_at(now_nanos)),
        }
        Ok(())
    }

    fn finish(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        let end = self.end.unwrap_or_else(|| self.end_of_window_at(now_nanos));
        self.fire(end, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{kv, operator};
    use serde_json::json;

    const S: i64 = 1_000_000_000;

    fn window(aggregate: &str) -> Box<dyn Operator> {
        operator(&INFO, json!({"size": "1s", "aggregate": aggregate}))
    }

    fn feed(op: &mut dyn Operator, records: &[(u64, f64)]) {
        let records: Vec<Record> = records.iter().map(|&(k, v)| Record::new(k, v, 0)).collect();
        let mut out = Output::default();
        op.process_batch(&records, &mut out).unwrap();
        assert!(out.is_empty(), "a window emits only when it fires");
    }

    fn time(op: &mut dyn Operator, now: i64) -> Vec<(u64, f64, i64)> {
        let mut out = Output::default();
        op.on_time(now, &mut out).unwrap();
        assert!(out
            .records()
            .iter()
            .all(|r| r.timestamp_type == tidemark_runtime::TimestampType::Create));
        out.records()
            .iter()
            .map(|r| (kv(r).0, kv(r).1, r.timestamp))
            .collect()
    }

    #[test]
    fn fires_per_key_at_the_window_end() {
        let mut op = window("sum");
        let t0 = 1_700_000_000 * S; // a window boundary
        assert!(time(op.as_mut(), t0 + S / 4).is_empty()); // opens [t0, t0+1s)
        feed(op.as_mut(), &[(3, 1.0), (1, 2.0), (3, 4.0)]);
        assert!(time(op.as_mut(), t0 + S - 1).is_empty());
        assert_eq!(
            time(op.as_mut(), t0 + S),
            [(1, 2.0, t0 + S - 1), (3, 5.0, t0 + S - 1)]
        );
        // The next window starts empty.
        feed(op.as_mut(), &[(3, 10.0)]);
        // Late by more than a window: the open one fires with its own end; empty windows
        // in between emit nothing.
        assert_eq!(
            time(op.as_mut(), t0 + 3 * S + 5),
            [(3, 10.0, t0 + 2 * S - 1)]
        );
        assert!(time(op.as_mut(), t0 + 4 * S).is_empty());
    }

    #[test]
    fn aggregates_over_the_window() {
        let t0 = 10 * S;
        let input = [(1, 4.0), (2, 1.0), (1, -2.0), (1, 7.0)];
        for (aggregate, expected) in [
            ("count", [3.0, 1.0]),
            ("sum", [9.0, 1.0]),
            ("min", [-2.0, 1.0]),
            ("max", [7.0, 1.0]),
            ("mean", [3.0, 1.0]),
        ] {
            let mut op = window(aggregate);
            time(op.as_mut(), t0);
            feed(op.as_mut(), &input);
            let fired = time(op.as_mut(), t0 + S);
            let values: Vec<f64> = fired.iter().map(|f| f.1).collect();
            assert_eq!(values, expected, "{aggregate}");
        }
    }

    #[test]
    fn finish_emits_the_open_window() {
        let mut op = window("count");
        // Records before any time was given belong to the first window.
        feed(op.as_mut(), &[(5, 0.0), (5, 0.0)]);
        let mut out = Output::default();
        op.finish(7 * S + 123, &mut out).unwrap();
        assert_eq!(out.records(), [Record::new(5, 2.0, 8 * S - 1)]);

        let mut op = window("count");
        time(op.as_mut(), 2 * S + 1);
        feed(op.as_mut(), &[(6, 0.0)]);
        let mut out = Output::default();
        op.finish(2 * S + 2, &mut out).unwrap();
        assert_eq!(out.records(), [Record::new(6, 1.0, 3 * S - 1)]);
    }

    fn event_window(aggregate: &str, lateness: &str) -> Box<dyn Operator> {
        operator(
            &INFO,
            json!({"size": "1s", "aggregate": aggregate, "time": "event", "allowed_lateness": lateness}),
        )
    }

    /// Processes `(key, value, timestamp)` records; returns what was emitted.
    fn feed_at(op: &mut dyn Operator, records: &[(u64, f64, i64)]) -> Vec<(u64, f64, i64)> {
        let records: Vec<Record> = records
            .iter()
            .map(|&(k, v, t)| Record::new(k, v, t))
            .collect();
        let mut out = Output::default();
        op.process_batch(&records, &mut out).unwrap();
        triples(&out)
    }

    fn watermark(op: &mut dyn Operator, wm: i64) -> Vec<(u64, f64, i64)> {
        let mut out = Output::default();
        op.on_watermark(wm, &mut out).unwrap();
        triples(&out)
    }

    fn triples(out: &Output) -> Vec<(u64, f64, i64)> {
        assert!(out
            .records()
            .iter()
            .all(|r| r.timestamp_type == tidemark_runtime::TimestampType::Create));
        out.records()
            .iter()
            .map(|r| (kv(r).0, kv(r).1, r.timestamp))
            .collect()
    }

    #[test]
    fn event_time_windows_fire_with_the_watermark() {
        let mut op = event_window("sum", "0");
        let t0 = 1_700_000_000 * S;
        // Two windows' records, out of order, in one batch; nothing fires without a watermark.
        let fed = feed_at(
            op.as_mut(),
            &[
                (3, 1.0, t0 + 100),
                (1, 2.0, t0 + S + 5),
                (3, 4.0, t0 + S - 1),
                (2, 8.0, t0),
                (1, 16.0, t0 + 2 * S - 1),
            ],
        );
        assert!(fed.is_empty());
        // The first window's last instant is t0 + 1s - 1 ns: one nanosecond short, nothing.
        assert!(watermark(op.as_mut(), t0 + S - 2).is_empty());
        assert_eq!(
            watermark(op.as_mut(), t0 + S - 1),
            [(2, 8.0, t0 + S - 1), (3, 5.0, t0 + S - 1)]
        );
        // A watermark that does not advance, or one between window ends, fires nothing.
        assert!(watermark(op.as_mut(), t0 + S - 1).is_empty());
        assert!(watermark(op.as_mut(), t0 + S + S / 2).is_empty());
        // A watermark far ahead fires the second window; the empty ones between emit nothing.
        feed_at(op.as_mut(), &[(7, 1.0, t0 + 5 * S)]);
        assert_eq!(
            watermark(op.as_mut(), t0 + 4 * S),
            [(1, 18.0, t0 + 2 * S - 1)]
        );
        assert_eq!(op.late_records_dropped(), 0);
        // The end of input fires what is still open.
        let mut out = Output::default();
        op.finish(0, &mut out).unwrap();
        assert_eq!(triples(&out), [(7, 1.0, t0 + 6 * S - 1)]);
    }

    #[test]
    fn records_behind_the_watermark_are_dropped_and_counted_without_lateness() {
        let mut op = event_window("count", "0");
        feed_at(op.as_mut(), &[(1, 0.0, 500), (1, 0.0, S + 1)]);
        assert_eq!(watermark(op.as_mut(), S - 1), [(1, 1.0, S - 1)]);
        // The first window fired and was purged at once: its records are late now.
        let fed = feed_at(op.as_mut(), &[(1, 0.0, 0), (2, 0.0, S - 1), (1, 0.0, S)]);
        assert!(fed.is_empty(), "{fed:?}");
        assert_eq!(op.late_records_dropped(), 2);
        assert_eq!(watermark(op.as_mut(), 2 * S - 1), [(1, 2.0, 2 * S - 1)]);
        // After the watermark every record of a window that ended is late, in any batch.
        feed_at(op.as_mut(), &[(9, 0.0, 2 * S - 1), (9, 0.0, 3)]);
        assert_eq!(op.late_records_dropped(), 4);
        let mut out = Output::default();
        op.finish(0, &mut out).unwrap();
        assert!(out.is_empty(), "fired windows do not fire again at the end");
    }

    #[test]
    fn allowed_lateness_keeps_a_fired_window_and_fires_late_updates() {
        let mut op = event_window("mean", "2s");
        let fed = feed_at(op.as_mut(), &[(4, 1.0, 10), (5, 10.0, 20)]);
        assert!(fed.is_empty());
        // On time: the window fires once with both keys.
        assert_eq!(
            watermark(op.as_mut(), S - 1),
            [(4, 1.0, S - 1), (5, 10.0, S - 1)]
        );
        // A late record within the allowed lateness updates its key and emits the new result
        // at once, with the window's timestamp.
        assert_eq!(feed_at(op.as_mut(), &[(4, 3.0, 30)]), [(4, 2.0, S - 1)]);
        // Watermarks inside the lateness do not fire the window again.
        assert!(watermark(op.as_mut(), S + S / 2).is_empty());
        assert_eq!(
            feed_at(op.as_mut(), &[(4, 5.0, 40), (6, 7.0, S - 1)]),
            [(4, 3.0, S - 1), (6, 7.0, S - 1)]
        );
        // A window that never had records but is still within its lateness: kept and fired
        // for the record at once.
        assert_eq!(
            feed_at(op.as_mut(), &[(8, 1.0, S + 3)]),
            [],
            "window [1s, 2s) has not ended yet"
        );
        assert_eq!(watermark(op.as_mut(), 2 * S - 1), [(8, 1.0, 2 * S - 1)]);
        assert_eq!(op.late_records_dropped(), 0);
        // end - 1 + lateness = 3s - 1: one nanosecond before, the first window is still kept.
        assert!(watermark(op.as_mut(), 3 * S - 2).is_empty());
        assert_eq!(feed_at(op.as_mut(), &[(5, 20.0, 0)]), [(5, 15.0, S - 1)]);
        // Then it is purged: its records are dropped and counted; the second is kept.
        assert!(watermark(op.as_mut(), 3 * S - 1).is_empty());
        assert!(feed_at(op.as_mut(), &[(5, 1.0, 0), (4, 1.0, S - 1)]).is_empty());
        assert_eq!(op.late_records_dropped(), 2);
        assert_eq!(feed_at(op.as_mut(), &[(8, 3.0, S)]), [(8, 2.0, 2 * S - 1)]);
        let mut out = Output::default();
        op.finish(0, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn event_time_ignores_the_wall_clock() {
        let mut op = event_window("count", "0");
        feed_at(op.as_mut(), &[(1, 0.0, 5)]);
        assert!(time(op.as_mut(), 100 * S).is_empty());
        assert!(time(op.as_mut(), 200 * S).is_empty());
        assert_eq!(watermark(op.as_mut(), S - 1), [(1, 1.0, S - 1)]);
    }

    #[test]
    fn bad_settings_are_named() {
        for (settings, expected) in [
            (
                json!({"size": 0, "aggregate": "sum"}),
                "size: must be more than 0",
            ),
            (
                json!({"size": "1 week", "aggregate": "sum"}),
                "size: invalid duration \"1 week\"",
            ),
            (json!({"aggregate": "sum"}), "missing field `size`"),
            (
                json!({"size": "1s", "aggregate": "sum", "time": "ingestion"}),
                "time: unknown value `ingestion`, expected one of `processing`, `event`",
            ),
            (
                json!({"size": "1s", "aggregate": "sum", "allowed_lateness": "1s"}),
                "allowed_lateness: only applies with time: event",
            ),
            (
                json!({"size": "1s", "aggregate": "sum", "time": "event", "allowed_lateness": "soon"}),
                "allowed_lateness: invalid duration \"soon\"",
            ),
        ] {
            let err = build(settings, &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
    }
}
