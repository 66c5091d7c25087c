//! The `window` operator: per key and window, aggregates over the records; windows tumbling,
//! sliding or per-key sessions, in processing time or event time.
//!
//! ```yaml
//! operators:
//!   per_user:
//!     type: window
//!     input: orders
//!     key: user                  # on the hash edge (the default partition of a window)
//!     kind: sliding              # tumbling (default) | sliding | session
//!     size: 10s                  # tumbling and sliding
//!     slide: 2s                  # sliding: a record is in size/slide windows
//!     # gap: 30s                 # session: a key's session closes after this long without records
//!     time: event                # processing (default) | event
//!     allowed_lateness: 5s       # only with time: event; default 0
//!     late: {dead_letter: late.jsonl}   # drop (default: dropped and counted) | {dead_letter: PATH}
//!     aggregates:                # output field -> count | {sum|min|max|mean: EXPRESSION}
//!       orders: count
//!       total: {sum: amount}
//!     on_error: skip             # an aggregate expression failing on a record: fail | skip | {dead_letter: PATH}
//! ```
//!
//! **Output**: one event per key and window when the window fires,
//! `{"key": <key>, "window_start": ms, "window_end": ms, <each aggregate>}` (bounds in
//! milliseconds since the Unix epoch, aggregates in the order of their names), timestamped
//! `window_end - 1 ms` (as Flink does), keys in the order of their first record in the window.
//! See [`crate::aggregates`] for the functions.
//!
//! **Kinds** ([`crate::window_assigner`]), aligned to the Unix epoch as Flink's:
//! - `tumbling`: `[n·size, (n+1)·size)`; each record is in one window.
//! - `sliding`: windows of `size` starting at every multiple of `slide` (`slide <= size`); a
//!   record is in `size / slide` windows (rounded up when `slide` does not divide `size`).
//! - `session`: per key; a record at `t` opens `[t, t + gap)` and sessions of one key that
//!   overlap or touch merge, so `window_start` is the first record's timestamp and
//!   `window_end` the last record's timestamp plus `gap`.
//!
//! **Processing time** (`time: processing`, the default): a record belongs to the windows
//! holding the time at which it is processed (the runtime gives the operator the clock at least
//! once per batch and regularly while idle, [`Operator::on_time`]; records before the first
//! reading take the first). A window fires when the clock reaches its end.
//!
//! **Event time** (`time: event`): a record belongs to the windows holding its timestamp, and
//! time advances only with the watermark ([`Operator::on_watermark`]; turn watermarks on at the
//! sources, or every window waits for the end of input). As Flink's `allowedLateness`:
//! - A window fires when the watermark reaches its last instant `end - 1 ns`. Its state is kept
//!   until the watermark reaches `end - 1 ns + allowed_lateness`; a record for a window that
//!   has fired but is still kept updates it and emits the key's updated result at once (a *late
//!   firing*), so the latest output for a key and window is the complete one. A session that a
//!   late record makes longer fires again with its new bounds.
//! - A record all of whose windows are gone is **late**: dropped and counted
//!   ([`Operator::late_records_dropped`]: `tidemark_late_records_dropped_total` and
//!   `tidemark_records_dropped_total{reason="late"}`), and with `late: {dead_letter: PATH}`
//!   also written there as `{"vertex":…,"error":"late: …","record":<event>}` (the file is
//!   shared by the subtasks and created when the job starts; a relative path is relative to the
//!   job file). With `allowed_lateness: 0` every record behind the watermark is late.
//!
//! At the end of a bounded input every window that has not fired fires ([`Operator::finish`]).
//!
//! **State** (`window_state.rs`): per window not yet expired, one accumulator per aggregate
//! per key with records in it (one `KeyedAccs` per window, a session's in the key's
//! sessions); so memory is bounded by (windows ahead of the watermark + windows within the
//! lateness) × keys, times `size / slide` for sliding windows. A session lives until the
//! watermark passes its end plus the lateness.
//!
//! **The old single `aggregate`** (`aggregate: count | sum | min | max | mean` of the numeric
//! field `value`, instead of `aggregates`) keeps working, in the same operator and state: with
//! `kind: tumbling` and no dead letter its output is as it always was, `{"key": k, "value": v}`
//! (`v` a double computed in doubles, `min`/`max` ignoring NaN) at `end - 1 ns`, keys in key
//! order, a record without a numeric `value` failing the job unless it is late (`on_error` does
//! not apply); with the other kinds it is the aggregate `value` computed as above
//! (`value: {sum: value}`, say).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::aggregate::{input, with_aggregator};
use crate::aggregates::AggregatesConfig;
use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, duration, nanos_i64, Aggregate};
use crate::error::{ConfigError, FieldError};
use crate::expr::{self, Evaluator, Number};
use crate::on_error::{self, ErrorPolicy, OnError, OnErrorFactory};
use crate::window_assigner::{KindError, Window, WindowKind};
use crate::window_lanes::Lanes;
use crate::window_state::{Computed, Input, WindowState};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "window",
    kind: ComponentKind::Operator,
    fields: &[
        "kind",
        "size",
        "slide",
        "gap",
        "aggregates",
        "aggregate",
        "time",
        "allowed_lateness",
        "late",
        "on_error",
    ],
    summary: "tumbling, sliding or session windows in processing or event time: aggregates per \
              key and window",
    build,
};

/// Settings of the `window` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// How windows are laid out.
    #[serde(default)]
    pub kind: WindowKindName,
    /// The window's length (tumbling and sliding).
    #[serde(default, deserialize_with = "duration::option")]
    pub size: Option<Duration>,
    /// The distance between window starts (sliding).
    #[serde(default, deserialize_with = "duration::option")]
    pub slide: Option<Duration>,
    /// The inactivity that closes a session (session).
    #[serde(default, deserialize_with = "duration::option")]
    pub gap: Option<Duration>,
    /// Output field -> aggregate function over an expression.
    #[serde(default)]
    pub aggregates: Option<AggregatesConfig>,
    /// The old single aggregate of the numeric field `value`.
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    /// Which clock assigns records to windows.
    #[serde(default)]
    pub time: WindowTime,
    /// With `time: event`: how long after its end (in event time) a window is kept for late
    /// records; default 0.
    #[serde(default, deserialize_with = "duration::option")]
    pub allowed_lateness: Option<Duration>,
    /// What happens to late records.
    #[serde(default)]
    pub late: LatePolicy,
    /// What happens to a record an aggregate's expression fails on.
    #[serde(default)]
    pub on_error: ErrorPolicy,
}

/// `kind:` how windows are laid out in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowKindName {
    /// Back-to-back windows of `size`.
    #[default]
    Tumbling,
    /// Windows of `size` every `slide`.
    Sliding,
    /// Per-key sessions closed by a `gap` without records.
    Session,
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

/// `late:` what happens to a record whose windows are all gone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatePolicy {
    /// Dropped and counted.
    #[default]
    Drop,
    /// Dropped, counted, and written to this file.
    DeadLetter(PathBuf),
}

/// The window kind of the settings, every problem with the sizes at its field.
fn window_kind(config: &WindowConfig, problems: &mut Vec<FieldError>) -> Option<WindowKind> {
    let name = match config.kind {
        WindowKindName::Tumbling => "tumbling",
        WindowKindName::Sliding => "sliding",
        WindowKindName::Session => "session",
    };
    let mut need = |field: &str, value: Option<Duration>, wanted: bool| -> Option<i64> {
        match (value, wanted) {
            (Some(d), true) => Some(nanos_i64(d)),
            (None, true) => {
                problems.push(FieldError::new(
                    field,
                    format!("missing: a {name} window needs `{field}`"),
                ));
                None
            }
            (Some(_), false) => {
                let applies = match field {
                    "slide" => "only applies with kind: sliding",
                    "gap" => "only applies with kind: session",
                    _ => {
                        "does not apply with kind: session (a session's length is set by its \
                          records and `gap`)"
                    }
                };
                problems.push(FieldError::new(field, applies));
                None
            }
            (None, false) => None,
        }
    };
    let session = config.kind == WindowKindName::Session;
    let size = need("size", config.size, !session);
    let slide = need(
        "slide",
        config.slide,
        config.kind == WindowKindName::Sliding,
    );
    let gap = need("gap", config.gap, session);
    let kind = match config.kind {
        WindowKindName::Tumbling => WindowKind::tumbling(size?),
        WindowKindName::Sliding => WindowKind::sliding(size?, slide?),
        WindowKindName::Session => WindowKind::session(gap?),
    };
    kind.map_err(|KindError { field, problem }| problems.push(FieldError::new(field, problem)))
        .ok()
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: WindowConfig = config::parse(INFO.type_name, config)?;
    let mut problems = Vec::new();
    let kind = window_kind(&config, &mut problems);
    if config.time == WindowTime::Processing {
        if config.allowed_lateness.is_some() {
            problems.push(FieldError::new(
                "allowed_lateness",
                "only applies with time: event (records are never late in processing time)",
            ));
        }
        if config.late != LatePolicy::Drop {
            problems.push(FieldError::new(
                "late",
                "only applies with time: event (records are never late in processing time)",
            ));
        }
    }
    let aggregates = match (&config.aggregates, config.aggregate) {
        (Some(_), Some(_)) => {
            problems.push(FieldError::new(
                "aggregate",
                "give either `aggregates` (fields over expressions) or the old `aggregate` \
                 (of the field `value`), not both",
            ));
            None
        }
        (None, None) => {
            problems.push(FieldError::new(
                "aggregates",
                "missing: a window needs `aggregates` (e.g. `{n: count, total: {sum: amount}}`)",
            ));
            None
        }
        (Some(aggregates), None) => match aggregates.compile() {
            Ok(a) => Some(a),
            Err((path, e)) => return Err(e.into_config_error(INFO.type_name, &path)),
        },
        (None, Some(aggregate)) => {
            let expr = (aggregate != Aggregate::Count).then(|| "value".to_owned());
            Some(
                AggregatesConfig(vec![("value".to_owned(), aggregate, expr)])
                    .compile()
                    .expect("`value` compiles"),
            )
        }
    };
    let (Some(kind), Some(aggregates), true) = (kind, aggregates, problems.is_empty()) else {
        return Err(ConfigError::Invalid {
            type_name: INFO.type_name.to_owned(),
            problems,
        });
    };
    let lateness = nanos_i64(config.allowed_lateness.unwrap_or_default());
    // The old single aggregate over tumbling windows without a dead letter keeps its own
    // output (`{key, value}` at the window's end - 1 ns) and ignores `on_error`.
    let (computed, on_error) = match (config.aggregate, kind, &config.late) {
        (Some(aggregate), WindowKind::Tumbling { .. }, LatePolicy::Drop) => {
            (Computed::Value(aggregate), ErrorPolicy::Fail)
        }
        _ => (Computed::Aggregates(aggregates), config.on_error.clone()),
    };
    let on_error = OnErrorFactory::new(on_error, &env.job_dir);
    let late = match &config.late {
        LatePolicy::Drop => None,
        LatePolicy::DeadLetter(path) => Some(OnErrorFactory::new(
            ErrorPolicy::DeadLetter(path.clone()),
            &env.job_dir,
        )),
    };
    let time = config.time;
    Ok(Built::Operator(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(WindowOperator {
            state: WindowState::new(&ctx.vertex_id, kind, lateness, computed.clone()),
            lanes: Lanes::default(),
            advanced: false,
            time,
            lateness,
            eval: Evaluator::new(),
            on_error: on_error.subtask(&ctx.vertex_id)?,
            late: match &late {
                Some(f) => Some(f.subtask(&ctx.vertex_id)?),
                None => None,
            },
            late_dropped: 0,
            now: None,
            early: Vec::new(),
            values: Vec::new(),
            pending: Pending::Nothing,
        }) as Box<dyn Operator>)
    })))
}

/// One subtask of the `window` operator: every kind, both clocks, `aggregates` and the old
/// single `aggregate`.
#[derive(Debug)]
struct WindowOperator {
    state: WindowState,
    /// Key groups restored behind the subtask's event time, each set with its own
    /// ([`crate::window_lanes`]); empty but for a while after a failover.
    lanes: Lanes,
    /// A watermark came: the progress follows the subtask's event time from now on, and key
    /// groups restored later do not move it.
    advanced: bool,
    time: WindowTime,
    lateness: i64,
    eval: Evaluator,
    on_error: OnError,
    /// The dead letter of late records, if any.
    late: Option<OnError>,
    late_dropped: u64,
    /// Processing time: the clock's last reading.
    now: Option<i64>,
    /// Processing time: records that came before the first clock reading.
    early: Vec<Record>,
    /// The aggregates' inputs of the current record.
    values: Vec<Option<Number>>,
    /// What a watermark or the end of input left to fire once the output was full
    /// ([`Operator::emit_more`]).
    pending: Pending,
}

/// What a window subtask still has to fire ([`WindowOperator::pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    Nothing,
    /// The windows due at a watermark.
    Watermark(i64),
    /// Every window left at the end of input.
    Finish,
}

impl WindowOperator {
    /// Fires what is left of `pending`, until `out` is full; then what comes after.
    fn fire_pending(&mut self, out: &mut Output) -> Result<bool, BoxError> {
        let emit = |r| {
            out.emit(r);
            out.is_full()
        };
        match self.pending {
            Pending::Nothing => Ok(false),
            Pending::Watermark(watermark) => {
                if !self.state.advance_until(watermark, emit) {
                    self.pending = Pending::Nothing;
                }
                Ok(self.pending != Pending::Nothing)
            }
            Pending::Finish => {
                if self.state.finish_until(emit) {
                    return Ok(true);
                }
                self.pending = Pending::Nothing;
                self.finish_handlers()?;
                Ok(false)
            }
        }
    }

    /// The end of input for the dead-letter files, after the last window fired.
    fn finish_handlers(&mut self) -> Result<(), BoxError> {
        self.on_error.finish()?;
        match &mut self.late {
            Some(late) => late.finish(),
            None => Ok(()),
        }
    }
}

/// The old single aggregate `aggregate`'s input from `record`: its numeric `value`.
fn value_input(aggregate: Aggregate, record: &Record) -> Result<f64, BoxError> {
    with_aggregator!(aggregate, A => input::<A>(record))
}

impl WindowOperator {
    fn add(&mut self, record: &Record, t: i64, out: &mut Output) -> Result<(), BoxError> {
        let key = record.key();
        let (main, lanes, eval, on_error, values) = (
            &mut self.state,
            &mut self.lanes,
            &self.eval,
            &mut self.on_error,
            &mut self.values,
        );
        // A key group behind the subtask's event time has its own (rare: after a failover).
        let state = match lanes.is_empty() {
            true => main,
            false => lanes.state_of(&key).unwrap_or(main),
        };
        let input = match state.computed() {
            Computed::Aggregates(aggregates) => {
                let counted = expr::with_record(record, |scope| {
                    match aggregates.values(eval, scope, values) {
                        Ok(()) => Ok(true),
                        Err((e, err)) => on_error.handle(e, err, &scope.event).map(|()| false),
                    }
                })?;
                if !counted {
                    return Ok(());
                }
                Input::Values(values)
            }
            Computed::Value(aggregate) => match value_input(*aggregate, record) {
                Ok(v) => Input::Value(v),
                // A late record is dropped before its value is read.
                Err(e) => match state.late(t) {
                    Some(late) => {
                        let progress = state.progress();
                        return self.late(record, late.window, progress);
                    }
                    None => return Err(e),
                },
            },
        };
        match state.add(&key, t, input, |r| out.emit(r)) {
            Ok(()) => Ok(()),
            Err(late) => {
                let progress = state.progress();
                self.late(record, late.window, progress)
            }
        }
    }

    #[cold]
    fn late(&mut self, record: &Record, window: Window, progress: i64) -> Result<(), BoxError> {
        self.late_dropped += 1;
        if let Some(dead_letter) = &mut self.late {
            let message = format!(
                "late: the record's last window [{}, {}) ms was gone at watermark {} ms \
                 (allowed_lateness {} ms)",
                window.start.div_euclid(1_000_000),
                window.end.div_euclid(1_000_000),
                progress.div_euclid(1_000_000),
                self.lateness / 1_000_000,
            );
            expr::with_record(record, |scope| {
                dead_letter.drop_record(&message, &scope.event)
            })?;
        }
        Ok(())
    }

    /// Processing time: keeps a record that came before the first clock reading (the old
    /// single aggregate fails on a record without a value at once, as before).
    fn early(&mut self, record: Record) -> Result<(), BoxError> {
        if let Computed::Value(aggregate) = self.state.computed() {
            value_input(*aggregate, &record)?;
        }
        self.early.push(record);
        Ok(())
    }

    /// Processing time: the records that came before the first clock reading take it.
    fn flush_early(&mut self, now: i64, out: &mut Output) -> Result<(), BoxError> {
        for record in std::mem::take(&mut self.early) {
            self.add(&record, now, out)?;
        }
        Ok(())
    }
}

impl Operator for WindowOperator {
    /// Processing-time windows fire on the clock, also while no input comes.
    fn uses_time(&self) -> bool {
        self.time == WindowTime::Processing
    }

    // Read about once a second: kept out of line, away from the per-record code.
    #[cold]
    #[inline(never)]
    fn state_size(&self) -> Option<tidemark_runtime::StateSize> {
        let mut size = self.state.size();
        self.lanes.add_size(&mut size);
        Some(size)
    }

    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        let t = match self.time {
            WindowTime::Event => record.timestamp,
            WindowTime::Processing => match self.now {
                Some(now) => now,
                None => return self.early(record),
            },
        };
        self.add(&record, t, out)
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        for record in records {
            let t = match self.time {
                WindowTime::Event => record.timestamp,
                WindowTime::Processing => match self.now {
                    Some(now) => now,
                    None => {
                        self.early(record.clone())?;
                        continue;
                    }
                },
            };
            self.add(record, t, out)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<(), BoxError> {
        if self.time == WindowTime::Event {
            self.advanced = true;
            // Many windows due at once (a watermark far ahead) fire in parts, the runtime
            // passing each on before the next ([`Operator::emit_more`]).
            self.pending = Pending::Watermark(watermark);
            self.fire_pending(out)?;
        }
        Ok(())
    }

    fn emit_more(&mut self, out: &mut Output) -> Result<bool, BoxError> {
        self.fire_pending(out)
    }

    fn on_time(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        if self.time == WindowTime::Processing {
            if self.now.is_none() {
                self.now = Some(now_nanos);
                self.flush_early(now_nanos, out)?;
            }
            let now = now_nanos.max(self.now.unwrap_or(now_nanos));
            self.now = Some(now);
            // A window ends when the clock reaches its end: time is complete up to now - 1.
            self.state.advance(now.saturating_sub(1), |r| out.emit(r));
        }
        Ok(())
    }

    fn finish(&mut self, now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        if self.time == WindowTime::Processing && self.now.is_none() {
            self.now = Some(now_nanos);
            self.flush_early(now_nanos, out)?;
        }
        self.lanes.finish(|r| out.emit(r));
        // Every window still open fires, in parts when there are many (the end of an input
        // read without watermarks), then the dead-letter files end.
        self.pending = Pending::Finish;
        self.fire_pending(out)?;
        Ok(())
    }

    /// The lengths of the dead-letter files of `on_error` and `late`
    /// ([`crate::on_error::snapshot_handlers`]).
    fn snapshot_local(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        match &mut self.late {
            Some(late) => on_error::snapshot_handlers(&mut [&mut self.on_error, late], checkpoint),
            None => on_error::snapshot_handlers(&mut [&mut self.on_error], checkpoint),
        }
    }

    /// Cuts the dead-letter files back to their recorded lengths.
    fn restore_local(&mut self, state: &[u8]) -> Result<(), BoxError> {
        match &mut self.late {
            Some(late) => on_error::restore_handlers(&mut [&mut self.on_error, late], state),
            None => on_error::restore_handlers(&mut [&mut self.on_error], state),
        }
    }

    fn late_records_dropped(&self) -> u64 {
        self.late_dropped
    }

    fn has_keyed_state(&mut self) -> bool {
        true
    }

    fn snapshot_keyed(
        &mut self,
        _checkpoint: u64,
        state: &mut tidemark_runtime::keyed_state::KeyedSnapshot,
    ) -> Result<(), BoxError> {
        if !self.early.is_empty() {
            // Processing time before the first clock reading: nothing to replay exactly.
            return Err(
                "a processing-time window cannot be checkpointed before its first clock reading"
                    .into(),
            );
        }
        self.state.snapshot(state)?;
        Ok(self.lanes.snapshot(state)?)
    }

    /// Before any watermark, the progress is the least of the restored ones (a restore from
    /// a directory, or the first key groups given to a new owner, each from where its old
    /// owner was); after, key groups that move here leave it alone, so a restore never makes
    /// the other keys' records late. Key groups that move here after the first watermark come
    /// as [`Operator::restore_keyed_behind`]: their windows that are due by now fire in their
    /// lane (merged here, into a window that already fired for this subtask's keys, they
    /// would not).
    fn restore_keyed(
        &mut self,
        state: tidemark_runtime::keyed_state::KeyedSnapshot,
    ) -> Result<(), BoxError> {
        match self.advanced {
            false => Ok(self.state.restore(&state)?),
            true => Ok(self.state.restore_windows(&state)?),
        }
    }

    /// In event time, the key groups get a lane of their own ([`crate::window_lanes`]).
    fn restore_keyed_behind(
        &mut self,
        state: tidemark_runtime::keyed_state::KeyedSnapshot,
        groups: &[u32],
        _watermark: i64,
    ) -> Result<(), BoxError> {
        match self.time {
            WindowTime::Event => Ok(self.lanes.restore(&self.state, &state, groups)?),
            WindowTime::Processing => self.restore_keyed(state),
        }
    }

    fn key_groups_event_time(
        &mut self,
        _max_parallelism: u32,
        groups: &[u32],
        watermark: Option<i64>,
        out: &mut Output,
    ) -> Result<(), BoxError> {
        Ok(self
            .lanes
            .advance(&mut self.state, groups, watermark, |r| out.emit(r))?)
    }

    fn forget_key_groups(&mut self, max_parallelism: u32, groups: &[u32]) -> Result<(), BoxError> {
        self.lanes.forget(groups);
        self.forget_keyed(&tidemark_runtime::state_move::in_groups(
            max_parallelism,
            groups,
        ))
    }

    fn forget_keyed(
        &mut self,
        forget: &dyn Fn(&tidemark_runtime::Value) -> bool,
    ) -> Result<(), BoxError> {
        self.lanes.forget_keys(forget)?;
        Ok(self.state.forget(forget)?)
    }

    fn records_dropped(&self, reason: tidemark_runtime::DropReason) -> u64 {
        match reason {
            tidemark_runtime::DropReason::Late => self.late_dropped,
            tidemark_runtime::DropReason::ExpressionError => self.on_error.dropped,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{kv, operator, process};
    use serde_json::json;
    use tidemark_runtime::TimestampType;

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

    /// Many windows due at once (a watermark far ahead, or the end of input) fire in parts
    /// of about [`Output::FULL`] records, each passed on before the next: every window fires
    /// once, in window order, with its count, and no part holds more than one window past
    /// `FULL`.
    #[test]
    fn many_windows_due_at_once_fire_in_parts_of_about_a_full_output() {
        let keys = 1_500u64;
        let windows = 12i64;
        let records: Vec<(u64, f64, i64)> = (0..windows)
            .flat_map(|w| (0..keys).map(move |k| (k, 0.0, w * S + (k as i64 % 7) * MS)))
            .collect();
        for end_of_input in [false, true] {
            let mut op = event_window("count", "0");
            feed_at(op.as_mut(), &records);
            let mut out = Output::default();
            match end_of_input {
                false => op.on_watermark(windows * S, &mut out).unwrap(),
                true => op.finish(0, &mut out).unwrap(),
            }
            let mut parts = vec![triples(&out)];
            loop {
                let mut out = Output::default();
                let more = op.emit_more(&mut out).unwrap();
                parts.push(triples(&out));
                if !more {
                    break;
                }
            }
            assert!(parts.len() >= 4, "{} parts", parts.len());
            for part in &parts {
                assert!(part.len() < Output::FULL + keys as usize, "{}", part.len());
            }
            let fired: Vec<(u64, f64, i64)> = parts.concat();
            let expected: Vec<(u64, f64, i64)> = (0..windows)
                .flat_map(|w| (0..keys).map(move |k| (k, 1.0, (w + 1) * S - 1)))
                .collect();
            let mut sorted = fired.clone();
            sorted.sort_by_key(|a| (a.2, a.0));
            assert_eq!(sorted, expected, "end of input: {end_of_input}");
            assert!(
                fired.windows(2).all(|p| p[0].2 <= p[1].2),
                "in window order"
            );
            // Nothing more afterwards.
            let mut out = Output::default();
            assert!(!op.emit_more(&mut out).unwrap());
            assert!(out.records().is_empty());
        }
    }

    /// Two keys in different key groups (of 8): `(key, its group)`.
    fn keys_in_two_groups() -> [(u64, u32); 2] {
        let groups = tidemark_runtime::key_group::KeyGroups::new(8);
        let group = |k: u64| groups.of(Record::new(k, 0.0, 0).key().routing_hash());
        let other = (2..100).find(|k| group(*k) != group(1)).unwrap();
        [(1, group(1)), (other, group(other))]
    }

    /// A snapshot of no keys saved at `progress`.
    fn empty_state_at(progress: i64) -> tidemark_runtime::keyed_state::KeyedSnapshot {
        let mut state = tidemark_runtime::keyed_state::KeyedSnapshot::new(8);
        state.set_shared(&progress).unwrap();
        state
    }

    #[test]
    fn key_groups_restored_from_owners_at_different_points_make_nothing_late() {
        let t0 = 1_700_000_000 * S;
        // A new owner takes key groups from two old owners, one further than the other: the
        // progress is the least, so the records of the one behind are on time.
        let mut op = event_window("count", "0");
        op.restore_keyed(empty_state_at(t0 + 16 * S - 1)).unwrap();
        op.restore_keyed(empty_state_at(t0 + 15 * S - 1)).unwrap();
        feed_at(op.as_mut(), &[(1, 0.0, t0 + 15 * S + 5)]);
        assert_eq!(op.late_records_dropped(), 0);
        // Once it follows its watermark, a key group restored from an owner further on does
        // not move it: the others' records stay on time.
        assert!(watermark(op.as_mut(), t0 + 15 * S + 10).is_empty());
        op.restore_keyed(empty_state_at(t0 + 20 * S)).unwrap();
        feed_at(op.as_mut(), &[(2, 0.0, t0 + 15 * S + 20)]);
        assert_eq!(op.late_records_dropped(), 0);
        assert_eq!(
            watermark(op.as_mut(), t0 + 16 * S - 1),
            [(1, 1.0, t0 + 16 * S - 1), (2, 1.0, t0 + 16 * S - 1)]
        );
    }

    #[test]
    fn key_groups_restored_behind_the_watermark_keep_their_own_event_time() {
        use tidemark_runtime::keyed_state::KeyedSnapshot;
        let [(a, _), (b, g)] = keys_in_two_groups();
        let t0 = 1_700_000_000 * S;
        let mut op = event_window("count", "0");
        feed_at(op.as_mut(), &[(a, 0.0, t0 + 9 * S)]);
        assert_eq!(
            watermark(op.as_mut(), t0 + 10 * S - 1),
            [(a, 1.0, t0 + 10 * S - 1)]
        );
        // b's key group moves here with its own event time at t0 + 3 s: its records after
        // that are on time; a's at the same instants are late.
        op.restore_keyed_behind(KeyedSnapshot::new(8), &[g], t0 + 3 * S)
            .unwrap();
        let fed = feed_at(
            op.as_mut(),
            &[
                (b, 0.0, t0 + 4 * S),
                (b, 0.0, t0 + 5 * S + 1),
                (a, 0.0, t0 + 4 * S),
            ],
        );
        assert!(fed.is_empty());
        assert_eq!(
            op.late_records_dropped(),
            1,
            "a's record is late, b's are not"
        );
        // Its own watermark fires its windows.
        let mut out = Output::default();
        op.key_groups_event_time(8, &[g], Some(t0 + 5 * S - 1), &mut out)
            .unwrap();
        assert_eq!(triples(&out), [(b, 1.0, t0 + 5 * S - 1)]);
        // Past the subtask's watermark: it fires up to the subtask's and joins it.
        let mut out = Output::default();
        op.key_groups_event_time(8, &[g], Some(t0 + 12 * S), &mut out)
            .unwrap();
        assert_eq!(triples(&out), [(b, 1.0, t0 + 6 * S - 1)]);
        feed_at(op.as_mut(), &[(b, 0.0, t0 + 9 * S), (b, 0.0, t0 + 10 * S)]);
        assert_eq!(
            op.late_records_dropped(),
            2,
            "b follows the subtask's event time"
        );
        assert_eq!(
            watermark(op.as_mut(), t0 + 11 * S - 1),
            [(b, 1.0, t0 + 11 * S - 1)]
        );
    }

    #[test]
    fn key_groups_restored_behind_and_idle_or_moved_away_follow_the_subtask_again() {
        use tidemark_runtime::keyed_state::KeyedSnapshot;
        let [(a, _), (b, g)] = keys_in_two_groups();
        let t0 = 1_700_000_000 * S;
        let mut op = event_window("count", "0");
        feed_at(op.as_mut(), &[(a, 0.0, t0 + 9 * S)]);
        watermark(op.as_mut(), t0 + 10 * S - 1);
        op.restore_keyed_behind(KeyedSnapshot::new(8), &[g], t0 + 3 * S)
            .unwrap();
        feed_at(op.as_mut(), &[(b, 0.0, t0 + 4 * S)]);
        // Idle: its windows up to the subtask's watermark fire and it joins.
        let mut out = Output::default();
        op.key_groups_event_time(8, &[g], None, &mut out).unwrap();
        assert_eq!(triples(&out), [(b, 1.0, t0 + 5 * S - 1)]);
        feed_at(op.as_mut(), &[(b, 0.0, t0 + 4 * S)]);
        assert_eq!(op.late_records_dropped(), 1);
        // Behind again, then moved away: its keys are forgotten, nothing fires, and a later
        // restore that is not behind follows the subtask.
        op.restore_keyed_behind(KeyedSnapshot::new(8), &[g], t0 + 3 * S)
            .unwrap();
        feed_at(op.as_mut(), &[(b, 0.0, t0 + 4 * S)]);
        op.forget_key_groups(8, &[g]).unwrap();
        op.restore_keyed(KeyedSnapshot::new(8)).unwrap();
        feed_at(op.as_mut(), &[(b, 0.0, t0 + 4 * S)]);
        assert_eq!(op.late_records_dropped(), 2);
        assert!(watermark(op.as_mut(), t0 + 20 * S).is_empty());
    }

    /// A key group restored at or past the subtask's event time whose old owner had not fired
    /// a window yet (its subtask was held back by another partition) while this subtask has
    /// already fired the same window for its own keys, and keeps it for `allowed_lateness`:
    /// through a lane told its watermark at once (what an exchange reader does for every
    /// restore once its subtask has sent a watermark), the restored window fires, once.
    /// (Merged straight into the fired window, as [`Operator::restore_keyed`] does, it would
    /// never fire.)
    #[test]
    fn a_window_restored_open_after_the_subtask_fired_it_fires_for_the_restored_keys() {
        use tidemark_runtime::keyed_state::KeyedSnapshot;
        let [(a, _), (b, g)] = keys_in_two_groups();
        let t0 = 1_700_000_000 * S;
        // The old owner: b's window [9 s, 10 s) open at progress 9.5 s.
        let mut old = event_window("count", "5s");
        feed_at(old.as_mut(), &[(b, 0.0, t0 + 9 * S)]);
        assert!(watermark(old.as_mut(), t0 + 9 * S + S / 2).is_empty());
        let mut saved = KeyedSnapshot::new(8);
        old.snapshot_keyed(1, &mut saved).unwrap();
        // The new owner has fired [9 s, 10 s) for a, keeps it 5 s more, and is at 12 s.
        let mut op = event_window("count", "5s");
        feed_at(op.as_mut(), &[(a, 0.0, t0 + 9 * S)]);
        assert_eq!(
            watermark(op.as_mut(), t0 + 12 * S),
            [(a, 1.0, t0 + 10 * S - 1)]
        );
        op.restore_keyed_behind(saved, &[g], i64::MIN).unwrap();
        let mut out = Output::default();
        op.key_groups_event_time(8, &[g], Some(t0 + 12 * S), &mut out)
            .unwrap();
        assert_eq!(triples(&out), [(b, 1.0, t0 + 10 * S - 1)]);
        // Joined with the subtask's windows: nothing fires twice.
        assert!(watermark(op.as_mut(), t0 + 30 * S).is_empty());
        assert_eq!(op.late_records_dropped(), 0);
    }

    #[test]
    fn a_checkpoint_with_a_key_group_behind_keeps_its_windows_and_the_least_progress() {
        use tidemark_runtime::keyed_state::KeyedSnapshot;
        let [(a, _), (b, g)] = keys_in_two_groups();
        let t0 = 1_700_000_000 * S;
        let mut op = event_window("count", "0");
        feed_at(op.as_mut(), &[(a, 0.0, t0 + 10 * S)]);
        watermark(op.as_mut(), t0 + 10 * S - 1);
        op.restore_keyed_behind(KeyedSnapshot::new(8), &[g], t0 + 3 * S)
            .unwrap();
        feed_at(op.as_mut(), &[(b, 0.0, t0 + 4 * S)]);
        let mut out = Output::default();
        op.key_groups_event_time(8, &[g], Some(t0 + 4 * S - 1), &mut out)
            .unwrap();
        let mut saved = KeyedSnapshot::new(8);
        op.snapshot_keyed(1, &mut saved).unwrap();
        let mut restored = event_window("count", "0");
        restored.restore_keyed(saved).unwrap();
        // Both keys' windows are there, and b's is not late at the restored progress.
        assert_eq!(
            watermark(restored.as_mut(), t0 + 11 * S),
            [(b, 1.0, t0 + 5 * S - 1), (a, 1.0, t0 + 11 * S - 1)]
        );
        assert_eq!(restored.late_records_dropped(), 0);
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
            (
                json!({"aggregate": "sum"}),
                "size: missing: a tumbling window needs `size`",
            ),
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

    #[test]
    fn bad_kinds_and_aggregates_are_named_all_at_once() {
        for (settings, expected) in [
            (
                json!({"kind": "sliding", "size": "1s", "aggregates": {"n": "count"}}),
                vec!["slide: missing: a sliding window needs `slide`"],
            ),
            (
                json!({"kind": "sliding", "size": "1s", "slide": "2s", "aggregates": {"n": "count"}}),
                vec!["slide: must not be more than size"],
            ),
            (
                json!({"kind": "session", "size": "1s", "slide": "1s", "aggregates": {"n": "count"}}),
                vec![
                    "size: does not apply with kind: session",
                    "slide: only applies with kind: sliding",
                    "gap: missing: a session window needs `gap`",
                ],
            ),
            (
                json!({"kind": "tumbling", "size": "1s", "gap": "1s", "aggregate": "sum", "aggregates": {"n": "count"}}),
                vec![
                    "gap: only applies with kind: session",
                    "aggregate: give either `aggregates`",
                ],
            ),
            (
                json!({"kind": "session", "gap": 0, "late": {"dead_letter": "x"}}),
                vec![
                    "gap: must be more than 0",
                    "late: only applies with time: event",
                    "aggregates: missing: a window needs `aggregates`",
                ],
            ),
            (
                json!({"kind": "hopping", "size": "1s", "aggregates": {"n": "count"}}),
                vec!["kind: unknown value `hopping`, expected one of `tumbling`, `sliding`, `session`"],
            ),
            (
                json!({"size": "1s", "time": "event", "late": "keep", "aggregates": {"n": "count"}}),
                vec!["late: unknown value `keep`, expected one of `drop`, `dead_letter`"],
            ),
            (
                json!({"size": "1s", "aggregates": {"t": {"sum": "v +"}}}),
                vec!["aggregates.t.sum"],
            ),
        ] {
            let err = match build(settings.clone(), &BuildEnv::default()) {
                Err(e) => e,
                Ok(_) => panic!("{settings} built"),
            };
            let text = err.to_string();
            for e in &expected {
                assert!(text.contains(e), "{settings}: {text}");
            }
            let ConfigError::Invalid { problems, .. } = err else {
                panic!("{err:?}")
            };
            assert_eq!(problems.len(), expected.len(), "{settings}: {text}");
        }
    }

    /// An event record keyed by its field `k` (json), at `t` ns.
    fn event(json: &str, t: i64) -> Record {
        let event = tidemark_runtime::Value::from_json(json.as_bytes()).unwrap();
        let key = event.get("k").cloned().unwrap_or_default();
        let map = event.as_map().unwrap().clone();
        Record::with_event(key, map, t)
    }

    fn lines(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| {
                assert_eq!(r.timestamp_type, TimestampType::Create);
                format!("{}@{}", r.event(), r.timestamp)
            })
            .collect()
    }

    #[test]
    fn the_spec_worked_case_in_processing_time_ended_by_the_input() {
        let mut op = operator(
            &INFO,
            json!({"size": "1h", "aggregates": {"n": "count", "s": {"sum": "v"}}}),
        );
        let input = [
            event(r#"{"k":"a","v":1}"#, 0),
            event(r#"{"k":"b","v":2.5}"#, 0),
            event(r#"{"k":"a","v":3}"#, 0),
        ];
        // Before the first clock reading the records wait for it.
        assert!(process(op.as_mut(), &input).is_empty());
        let hour = 3_600_000;
        let now = 1_700_000_000_000 * MS + 5;
        let start = 1_700_000_000_000 / hour * hour;
        let mut out = Output::default();
        op.finish(now, &mut out).unwrap();
        let end = start + hour;
        assert_eq!(
            lines(out.records()),
            [
                format!(
                    r#"{{"key":"a","window_start":{start},"window_end":{end},"n":2,"s":4}}@{}"#,
                    (end - 1) * MS
                ),
                format!(
                    r#"{{"key":"b","window_start":{start},"window_end":{end},"n":1,"s":2.5}}@{}"#,
                    (end - 1) * MS
                ),
            ]
        );
        assert_eq!(
            out.records()[0].key().as_ref(),
            &tidemark_runtime::Value::from("a")
        );
    }

    #[test]
    fn processing_time_windows_follow_the_clock() {
        let mut op = operator(
            &INFO,
            json!({"kind": "sliding", "size": "2s", "slide": "1s", "aggregates": {"n": "count"}}),
        );
        let mut out = Output::default();
        op.on_time(10 * S + 5, &mut out).unwrap();
        // Event timestamps do not matter in processing time.
        assert!(process(op.as_mut(), &[event(r#"{"k":1}"#, 0)]).is_empty());
        op.on_time(11 * S - 1, &mut out).unwrap();
        assert!(out.is_empty());
        op.on_time(11 * S, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [format!(
                r#"{{"key":1,"window_start":9000,"window_end":11000,"n":1}}@{}"#,
                10_999 * MS
            )]
        );
        let mut out = Output::default();
        op.finish(11 * S, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [format!(
                r#"{{"key":1,"window_start":10000,"window_end":12000,"n":1}}@{}"#,
                11_999 * MS
            )]
        );
    }

    const MS: i64 = 1_000_000;

    #[test]
    fn late_records_go_to_the_dead_letter_and_are_counted() {
        let dir = crate::test_util::TempDir::new("window-late");
        let env = BuildEnv::new(dir.path());
        let Built::Operator(factory) = build(
            json!({"kind": "session", "gap": "100ms", "time": "event", "allowed_lateness": "50ms",
                   "late": {"dead_letter": "late.jsonl"}, "aggregates": {"n": "count", "hi": {"max": "v"}}}),
            &env,
        )
        .unwrap() else {
            panic!()
        };
        let mut op = factory(&crate::test_util::ctx(0, 1, 0)).unwrap();
        let fed = process(
            op.as_mut(),
            &[
                event(r#"{"k":"x","v":1}"#, 1000 * MS),
                event(r#"{"k":"x","v":5}"#, 1080 * MS),
                event(r#"{"k":"y","v":2}"#, 1300 * MS),
            ],
        );
        assert!(fed.is_empty());
        let mut out = Output::default();
        op.on_watermark(1180 * MS - 1, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [format!(
                r#"{{"key":"x","window_start":1000,"window_end":1180,"hi":5,"n":2}}@{}"#,
                1179 * MS
            )]
        );
        // Within the lateness: x's fired session grows past the watermark, so it fires again
        // with the watermark, with its new bounds.
        let fed = process(op.as_mut(), &[event(r#"{"k":"x","v":3}"#, 1100 * MS)]);
        assert!(fed.is_empty());
        let mut out = Output::default();
        op.on_watermark(1250 * MS, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [format!(
                r#"{{"key":"x","window_start":1000,"window_end":1200,"hi":5,"n":3}}@{}"#,
                1199 * MS
            )]
        );
        // [1000, 1200) expired at 1199.999999 + 50 ms; a record that would only open
        // [1040, 1140) is late; so is one far behind.
        let fed = process(
            op.as_mut(),
            &[
                event(r#"{"k":"x","v":9}"#, 1040 * MS),
                event(r#"{"k":"z","v":9}"#, 7 * MS),
                event(r#"{"k":"y","v":4}"#, 1250 * MS),
            ],
        );
        assert!(fed.is_empty());
        assert_eq!(op.late_records_dropped(), 2);
        assert_eq!(op.records_dropped(tidemark_runtime::DropReason::Late), 2);
        let written = std::fs::read_to_string(dir.path().join("late.jsonl")).unwrap();
        let written: Vec<&str> = written.lines().collect();
        assert_eq!(written.len(), 2, "{written:?}");
        assert!(
            written[0].starts_with(r#"{"vertex":"v","error":"late: the record's last window [1040, 1140) ms was gone at watermark 1250 ms (allowed_lateness 50 ms)","record":{"k":"x","v":9}}"#),
            "{}",
            written[0]
        );
        assert!(written[1].contains(r#""record":{"k":"z","v":9}"#));
        let mut out = Output::default();
        op.finish(0, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [format!(
                r#"{{"key":"y","window_start":1250,"window_end":1400,"hi":4,"n":2}}@{}"#,
                1399 * MS
            )]
        );
    }

    #[test]
    fn aggregate_expression_errors_follow_on_error() {
        let mut op = operator(
            &INFO,
            json!({"size": "1s", "time": "event", "on_error": "skip", "aggregates": {"s": {"sum": "v"}}}),
        );
        process(
            op.as_mut(),
            &[
                event(r#"{"k":1,"v":"x"}"#, 0),
                event(r#"{"k":1,"v":2}"#, 0),
                event(r#"{"k":1}"#, 0),
            ],
        );
        assert_eq!(
            op.records_dropped(tidemark_runtime::DropReason::ExpressionError),
            2
        );
        let mut out = Output::default();
        op.finish(0, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [format!(
                r#"{{"key":1,"window_start":0,"window_end":1000,"s":2}}@{}"#,
                999 * MS
            )]
        );
        let mut op = operator(
            &INFO,
            json!({"size": "1s", "aggregates": {"s": {"sum": "v"}}}),
        );
        let mut out = Output::default();
        op.on_time(0, &mut out).unwrap();
        let err = op
            .process_batch(&[event(r#"{"k":1,"w":2}"#, 0)], &mut out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("expression `v` failed"), "{err}");
    }

    #[test]
    fn dead_letters_are_cut_back_on_restore() {
        let records: Vec<Record> = (0..12)
            .map(|i| match i % 3 {
                0 => event(&format!(r#"{{"k":1,"v":"x{i}"}}"#), i * MS),
                _ => event(&format!(r#"{{"k":1,"v":{i}}}"#), i * MS),
            })
            .collect();
        crate::test_util::dead_letters_survive_a_restore(
            |dir| {
                crate::test_util::dead_lettered(
                    &INFO,
                    &json!({"size": "1s", "time": "event", "aggregates": {"s": {"sum": "v"}}}),
                    dir,
                )
            },
            &records,
        );
    }

    #[test]
    fn the_old_aggregate_works_with_every_kind() {
        let mut op = operator(
            &INFO,
            json!({"kind": "session", "gap": "1s", "time": "event", "aggregate": "sum"}),
        );
        process(
            op.as_mut(),
            &[
                Record::new(3, 1.5, 0),
                Record::new(3, 2.0, S / 2),
                Record::new(4, 1.0, 0),
            ],
        );
        let mut out = Output::default();
        op.finish(0, &mut out).unwrap();
        assert_eq!(
            lines(out.records()),
            [
                format!(
                    r#"{{"key":3,"window_start":0,"window_end":1500,"value":3.5}}@{}"#,
                    1499 * MS
                ),
                format!(
                    r#"{{"key":4,"window_start":0,"window_end":1000,"value":1.0}}@{}"#,
                    999 * MS
                ),
            ]
        );
    }
}

/// Pins the output of the old single `aggregate:` (every kind, every function) to what the
/// original operators wrote, byte for byte: event text, key, timestamp and its type, the numeric
/// form, errors and the late counters.
#[cfg(test)]
pub(crate) mod legacy_output {
    use super::*;
    use crate::test_util::operator;
    use serde_json::json;
    use std::fmt::Write as _;
    use tidemark_runtime::DropReason;

    const S: i64 = 1_000_000_000;
    const FUNCTIONS: [&str; 5] = ["count", "sum", "min", "max", "mean"];

    /// A step of a transcript.
    pub(crate) enum Step {
        Batch(Vec<Record>),
        One(Record),
        Watermark(i64),
        Time(i64),
        Finish(i64),
    }

    pub(crate) fn show(out: &mut String, records: &[Record]) {
        for r in records {
            writeln!(
                out,
                "  {} key={} @{} {:?}{}",
                r.event_json(),
                r.key(),
                r.timestamp,
                r.timestamp_type,
                if r.is_numeric() { " numeric" } else { "" }
            )
            .unwrap();
        }
    }

    /// Runs `steps` through `op`, writing what each emits, errors, and the drop counters.
    pub(crate) fn transcript(op: &mut dyn Operator, steps: Vec<Step>) -> String {
        let mut text = String::new();
        for step in steps {
            let mut out = Output::default();
            let (name, result) = match step {
                Step::Batch(records) => ("batch", op.process_batch(&records, &mut out)),
                Step::One(record) => ("one", op.process(record, &mut out)),
                Step::Watermark(t) => ("watermark", op.on_watermark(t, &mut out)),
                Step::Time(t) => ("time", op.on_time(t, &mut out)),
                Step::Finish(t) => ("finish", op.finish(t, &mut out)),
            };
            writeln!(text, "{name}").unwrap();
            if let Err(e) = result {
                writeln!(text, "  error: {e}").unwrap();
            }
            show(&mut text, out.records());
        }
        writeln!(
            text,
            "late {} dropped late {} expr {}",
            op.late_records_dropped(),
            op.records_dropped(DropReason::Late),
            op.records_dropped(DropReason::ExpressionError)
        )
        .unwrap();
        text
    }

    pub(crate) fn value_event(key: Value, value: serde_json::Value, t: i64) -> Record {
        let mut m = tidemark_runtime::Map::new();
        m.insert(
            "value",
            Value::from_json(value.to_string().as_bytes()).unwrap(),
        );
        Record::with_event(key, m, t)
    }

    use tidemark_runtime::Value;

    /// Records of many keys (dense, large, negative ints, strings) and values (doubles, ints in
    /// events, NaN, -0.0), at `t0 + offset`.
    fn mixed(t0: i64) -> Vec<Record> {
        vec![
            Record::new(3, 1.5, t0 + 10),
            Record::new(70_000, -2.0, t0 + 20),
            value_event(Value::from("b"), json!(4), t0 + 30),
            Record::new(u64::MAX, 0.25, t0 + 40),
            Record::new(1, f64::NAN, t0 + 50),
            value_event(Value::from("a"), json!(2.5), t0 + 60),
            Record::new(3, -0.0, t0 + 70),
            Record::new(1, 7.0, t0 + 80),
            value_event(Value::from("b"), json!(-1), t0 + 90),
            Record::new(0, 0.0, t0 + 100),
        ]
    }

    #[test]
    fn processing_time_tumbling() {
        let mut all = String::new();
        for f in FUNCTIONS {
            let mut op = operator(&INFO, json!({"size": "1s", "aggregate": f}));
            let t0 = 1_700_000_000 * S;
            let steps = vec![
                Step::Batch(mixed(0)[..3].to_vec()),
                Step::Time(t0 + 5),
                Step::Batch(mixed(0)[3..].to_vec()),
                Step::One(Record::new(9, 1.0, 0)),
                Step::Time(t0 + S - 1),
                Step::Time(t0 + S),
                Step::Batch(mixed(0)),
                Step::Time(t0 + 3 * S + 7),
                Step::One(Record::new(2, 2.0, 0)),
                Step::Finish(t0 + 3 * S + 9),
                // A job fails on an error: its state after one is never seen.
                Step::Batch(vec![value_event(Value::from("x"), json!("no"), 0)]),
            ];
            writeln!(all, "== {f}\n{}", transcript(op.as_mut(), steps)).unwrap();
        }
        assert_eq!(all, PROCESSING_TIME_TUMBLING);
    }

    #[test]
    fn event_time_tumbling() {
        let mut all = String::new();
        for f in FUNCTIONS {
            for lateness in ["0", "2s"] {
                let mut op = operator(
                    &INFO,
                    json!({"size": "1s", "time": "event", "allowed_lateness": lateness, "aggregate": f}),
                );
                let t0 = 1_700_000_000 * S;
                let mut late = mixed(t0);
                late.push(Record::new(4, 1.0, t0 + S + 1));
                let steps = vec![
                    Step::Batch(mixed(t0)),
                    Step::Batch(mixed(t0 + S / 2)),
                    Step::Watermark(t0 + S - 2),
                    Step::Watermark(t0 + S - 1),
                    Step::Batch(late),
                    Step::One(Record::new(3, 4.0, t0 + 5)),
                    Step::Watermark(t0 + 2 * S + S / 2),
                    Step::Batch(vec![
                        Record::new(5, 2.0, t0 + 1),
                        Record::new(5, 3.0, t0 + 3 * S),
                    ]),
                    Step::Watermark(t0 + 3 * S),
                    Step::Batch(vec![Record::new(5, 2.0, t0 + 2)]),
                    Step::Batch(vec![value_event(Value::from("x"), json!("no"), t0)]),
                    Step::Finish(0),
                    // A job fails on an error: its state after one is never seen.
                    Step::Batch(vec![value_event(Value::from("x"), json!("no"), t0 + 4 * S)]),
                ];
                writeln!(all, "== {f} {lateness}\n{}", transcript(op.as_mut(), steps)).unwrap();
            }
        }
        assert_eq!(all, EVENT_TIME_TUMBLING);
    }

    #[test]
    fn other_kinds_and_dead_letters() {
        let dir = crate::test_util::TempDir::new("window-legacy");
        let env = BuildEnv::new(dir.path());
        let mut all = String::new();
        for f in FUNCTIONS {
            for settings in [
                json!({"kind": "sliding", "size": "1s", "slide": "500ms", "time": "event", "aggregate": f}),
                json!({"kind": "session", "gap": "300ms", "time": "event", "allowed_lateness": "1s", "aggregate": f}),
                json!({"size": "1s", "time": "event", "late": {"dead_letter": "late.jsonl"}, "aggregate": f}),
                json!({"kind": "sliding", "size": "1s", "slide": "500ms", "aggregate": f}),
            ] {
                let Built::Operator(factory) = build(settings.clone(), &env).unwrap() else {
                    panic!()
                };
                let mut op = factory(&crate::test_util::ctx(0, 1, 0)).unwrap();
                let steps = vec![
                    Step::Batch(mixed(0)),
                    Step::Time(S / 3),
                    Step::Batch(mixed(S / 2)),
                    Step::Watermark(S - 1),
                    Step::Time(S + 1),
                    Step::Batch(mixed(0)),
                    Step::Watermark(3 * S),
                    Step::Batch(mixed(0)),
                    Step::Batch(vec![value_event(Value::from("x"), json!("no"), 5 * S)]),
                    Step::Finish(4 * S),
                ];
                writeln!(all, "== {settings}\n{}", transcript(op.as_mut(), steps)).unwrap();
            }
        }
        let letters = std::fs::read_to_string(dir.path().join("late.jsonl")).unwrap();
        writeln!(all, "dead letters:\n{letters}").unwrap();
        assert_eq!(all, OTHER_KINDS);
    }

    const PROCESSING_TIME_TUMBLING: &str = r##"== count
batch
time
batch
one
time
time
  {"key":-1,"value":1.0} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":1.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":2.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":2.0} key=3 @1700000000999999999 Create numeric
  {"key":9,"value":1.0} key=9 @1700000000999999999 Create numeric
  {"key":70000,"value":1.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":1.0} key="a" @1700000000999999999 Create
  {"key":"b","value":2.0} key="b" @1700000000999999999 Create
batch
time
  {"key":-1,"value":1.0} key=-1 @1700000001999999999 Create numeric
  {"key":0,"value":1.0} key=0 @1700000001999999999 Create numeric
  {"key":1,"value":2.0} key=1 @1700000001999999999 Create numeric
  {"key":3,"value":2.0} key=3 @1700000001999999999 Create numeric
  {"key":70000,"value":1.0} key=70000 @1700000001999999999 Create numeric
  {"key":"a","value":1.0} key="a" @1700000001999999999 Create
  {"key":"b","value":2.0} key="b" @1700000001999999999 Create
one
finish
  {"key":2,"value":1.0} key=2 @1700000003999999999 Create numeric
batch
late 0 dropped late 0 expr 0

== sum
batch
time
batch
one
time
time
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":1.5} key=3 @1700000000999999999 Create numeric
  {"key":9,"value":1.0} key=9 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":3.0} key="b" @1700000000999999999 Create
batch
time
  {"key":-1,"value":0.25} key=-1 @1700000001999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000001999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000001999999999 Create numeric
  {"key":3,"value":1.5} key=3 @1700000001999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000001999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000001999999999 Create
  {"key":"b","value":3.0} key="b" @1700000001999999999 Create
one
finish
  {"key":2,"value":2.0} key=2 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 0 dropped late 0 expr 0

== min
batch
time
batch
one
time
time
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":-0.0} key=3 @1700000000999999999 Create numeric
  {"key":9,"value":1.0} key=9 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":-1.0} key="b" @1700000000999999999 Create
batch
time
  {"key":-1,"value":0.25} key=-1 @1700000001999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000001999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000001999999999 Create numeric
  {"key":3,"value":-0.0} key=3 @1700000001999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000001999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000001999999999 Create
  {"key":"b","value":-1.0} key="b" @1700000001999999999 Create
one
finish
  {"key":2,"value":2.0} key=2 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 0 dropped late 0 expr 0

== max
batch
time
batch
one
time
time
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":1.5} key=3 @1700000000999999999 Create numeric
  {"key":9,"value":1.0} key=9 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
batch
time
  {"key":-1,"value":0.25} key=-1 @1700000001999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000001999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000001999999999 Create numeric
  {"key":3,"value":1.5} key=3 @1700000001999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000001999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000001999999999 Create
  {"key":"b","value":4.0} key="b" @1700000001999999999 Create
one
finish
  {"key":2,"value":2.0} key=2 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 0 dropped late 0 expr 0

== mean
batch
time
batch
one
time
time
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":0.75} key=3 @1700000000999999999 Create numeric
  {"key":9,"value":1.0} key=9 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":1.5} key="b" @1700000000999999999 Create
batch
time
  {"key":-1,"value":0.25} key=-1 @1700000001999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000001999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000001999999999 Create numeric
  {"key":3,"value":0.75} key=3 @1700000001999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000001999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000001999999999 Create
  {"key":"b","value":1.5} key="b" @1700000001999999999 Create
one
finish
  {"key":2,"value":2.0} key=2 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 0 dropped late 0 expr 0

"##;
    const EVENT_TIME_TUMBLING: &str = r##"== count 0
batch
batch
watermark
watermark
  {"key":-1,"value":2.0} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":2.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":4.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":4.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.0} key="a" @1700000000999999999 Create
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
batch
one
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
watermark
batch
batch
finish
  {"key":5,"value":1.0} key=5 @1700000003999999999 Create numeric
batch
late 14 dropped late 14 expr 0

== count 2s
batch
batch
watermark
watermark
  {"key":-1,"value":2.0} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":2.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":4.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":4.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.0} key="a" @1700000000999999999 Create
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
batch
  {"key":3,"value":5.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":3.0} key=70000 @1700000000999999999 Create numeric
  {"key":"b","value":5.0} key="b" @1700000000999999999 Create
  {"key":-1,"value":3.0} key=-1 @1700000000999999999 Create numeric
  {"key":1,"value":5.0} key=1 @1700000000999999999 Create numeric
  {"key":"a","value":3.0} key="a" @1700000000999999999 Create
  {"key":3,"value":6.0} key=3 @1700000000999999999 Create numeric
  {"key":1,"value":6.0} key=1 @1700000000999999999 Create numeric
  {"key":"b","value":6.0} key="b" @1700000000999999999 Create
  {"key":0,"value":3.0} key=0 @1700000000999999999 Create numeric
one
  {"key":3,"value":7.0} key=3 @1700000000999999999 Create numeric
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
  {"key":5,"value":1.0} key=5 @1700000000999999999 Create numeric
watermark
batch
batch
finish
  {"key":5,"value":1.0} key=5 @1700000003999999999 Create numeric
batch
late 2 dropped late 2 expr 0

== sum 0
batch
batch
watermark
watermark
  {"key":-1,"value":0.5} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":3.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-4.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":5.0} key="a" @1700000000999999999 Create
  {"key":"b","value":6.0} key="b" @1700000000999999999 Create
batch
one
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 14 dropped late 14 expr 0

== sum 2s
batch
batch
watermark
watermark
  {"key":-1,"value":0.5} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":3.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-4.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":5.0} key="a" @1700000000999999999 Create
  {"key":"b","value":6.0} key="b" @1700000000999999999 Create
batch
  {"key":3,"value":4.5} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-6.0} key=70000 @1700000000999999999 Create numeric
  {"key":"b","value":10.0} key="b" @1700000000999999999 Create
  {"key":-1,"value":0.75} key=-1 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":"a","value":7.5} key="a" @1700000000999999999 Create
  {"key":3,"value":4.5} key=3 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":"b","value":9.0} key="b" @1700000000999999999 Create
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
one
  {"key":3,"value":8.5} key=3 @1700000000999999999 Create numeric
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
  {"key":5,"value":2.0} key=5 @1700000000999999999 Create numeric
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 2 dropped late 2 expr 0

== min 0
batch
batch
watermark
watermark
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":-0.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":-1.0} key="b" @1700000000999999999 Create
batch
one
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 14 dropped late 14 expr 0

== min 2s
batch
batch
watermark
watermark
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":-0.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":-1.0} key="b" @1700000000999999999 Create
batch
  {"key":3,"value":-0.0} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"b","value":-1.0} key="b" @1700000000999999999 Create
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":3,"value":-0.0} key=3 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":"b","value":-1.0} key="b" @1700000000999999999 Create
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
one
  {"key":3,"value":-0.0} key=3 @1700000000999999999 Create numeric
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
  {"key":5,"value":2.0} key=5 @1700000000999999999 Create numeric
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 2 dropped late 2 expr 0

== max 0
batch
batch
watermark
watermark
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":1.5} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
batch
one
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 14 dropped late 14 expr 0

== max 2s
batch
batch
watermark
watermark
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":1.5} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
batch
  {"key":3,"value":1.5} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":3,"value":1.5} key=3 @1700000000999999999 Create numeric
  {"key":1,"value":7.0} key=1 @1700000000999999999 Create numeric
  {"key":"b","value":4.0} key="b" @1700000000999999999 Create
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
one
  {"key":3,"value":4.0} key=3 @1700000000999999999 Create numeric
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
  {"key":5,"value":2.0} key=5 @1700000000999999999 Create numeric
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 2 dropped late 2 expr 0

== mean 0
batch
batch
watermark
watermark
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":0.75} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":1.5} key="b" @1700000000999999999 Create
batch
one
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 14 dropped late 14 expr 0

== mean 2s
batch
batch
watermark
watermark
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":3,"value":0.75} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":"b","value":1.5} key="b" @1700000000999999999 Create
batch
  {"key":3,"value":0.9} key=3 @1700000000999999999 Create numeric
  {"key":70000,"value":-2.0} key=70000 @1700000000999999999 Create numeric
  {"key":"b","value":2.0} key="b" @1700000000999999999 Create
  {"key":-1,"value":0.25} key=-1 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":"a","value":2.5} key="a" @1700000000999999999 Create
  {"key":3,"value":0.75} key=3 @1700000000999999999 Create numeric
  {"key":1,"value":null} key=1 @1700000000999999999 Create numeric
  {"key":"b","value":1.5} key="b" @1700000000999999999 Create
  {"key":0,"value":0.0} key=0 @1700000000999999999 Create numeric
one
  {"key":3,"value":1.2142857142857142} key=3 @1700000000999999999 Create numeric
watermark
  {"key":4,"value":1.0} key=4 @1700000001999999999 Create numeric
batch
  {"key":5,"value":2.0} key=5 @1700000000999999999 Create numeric
watermark
batch
batch
finish
  {"key":5,"value":3.0} key=5 @1700000003999999999 Create numeric
batch
  error: field `value` is missing or not a number in {"value":"no"}
late 2 dropped late 2 expr 0

"##;
    const OTHER_KINDS: &str = r##"== {"aggregate":"count","kind":"sliding","size":"1s","slide":"500ms","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":-500,"window_end":500,"value":2} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":1} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":2} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":1} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":2} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":1} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":1} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":4} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":2} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":4} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":2} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":4} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":2} key=0 @999000000 Create
time
batch
watermark
  {"key":3,"window_start":500,"window_end":1500,"value":2} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":1} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":2} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":1} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":2} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":1} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":1} key=0 @1499000000 Create
batch
batch
finish
  {"key":"x","window_start":4500,"window_end":5500,"value":1} key="x" @5499000000 Create
  {"key":"x","window_start":5000,"window_end":6000,"value":1} key="x" @5999000000 Create
late 20 dropped late 20 expr 0

== {"aggregate":"count","allowed_lateness":"1s","gap":"300ms","kind":"session","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":300,"value":2} key=3 @299000070 Create
  {"key":3,"window_start":500,"window_end":800,"value":2} key=3 @799000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":1} key=70000 @299000020 Create
  {"key":70000,"window_start":500,"window_end":800,"value":1} key=70000 @799000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":2} key="b" @299000090 Create
  {"key":"b","window_start":500,"window_end":800,"value":2} key="b" @799000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":1} key=-1 @299000040 Create
  {"key":-1,"window_start":500,"window_end":800,"value":1} key=-1 @799000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":2} key=1 @299000080 Create
  {"key":1,"window_start":500,"window_end":800,"value":2} key=1 @799000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":1} key="a" @299000060 Create
  {"key":"a","window_start":500,"window_end":800,"value":1} key="a" @799000060 Create
  {"key":0,"window_start":0,"window_end":300,"value":1} key=0 @299000100 Create
  {"key":0,"window_start":500,"window_end":800,"value":1} key=0 @799000100 Create
time
batch
  {"key":3,"window_start":0,"window_end":300,"value":3} key=3 @299000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":2} key=70000 @299000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":3} key="b" @299000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":2} key=-1 @299000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":3} key=1 @299000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2} key="a" @299000060 Create
  {"key":3,"window_start":0,"window_end":300,"value":4} key=3 @299000070 Create
  {"key":1,"window_start":0,"window_end":300,"value":4} key=1 @299000080 Create
  {"key":"b","window_start":0,"window_end":300,"value":4} key="b" @299000090 Create
  {"key":0,"window_start":0,"window_end":300,"value":2} key=0 @299000100 Create
watermark
batch
batch
finish
  {"key":"x","window_start":5000,"window_end":5300,"value":1} key="x" @5299000000 Create
late 10 dropped late 10 expr 0

== {"aggregate":"count","late":{"dead_letter":"late.jsonl"},"size":"1s","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":1000,"value":4} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":2} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":4} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":2} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":4} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":2} key=0 @999000000 Create
time
batch
watermark
batch
batch
finish
  {"key":"x","window_start":5000,"window_end":6000,"value":1} key="x" @5999000000 Create
late 20 dropped late 20 expr 0

== {"aggregate":"count","kind":"sliding","size":"1s","slide":"500ms"}
batch
time
batch
watermark
time
  {"key":3,"window_start":-500,"window_end":500,"value":4} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":2} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":4} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":2} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":4} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":2} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":4} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":2} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":4} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":2} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":4} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":2} key=0 @999000000 Create
batch
watermark
batch
batch
finish
  {"key":3,"window_start":500,"window_end":1500,"value":4} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":2} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":4} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":2} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":4} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":2} key=0 @1499000000 Create
  {"key":"x","window_start":500,"window_end":1500,"value":1} key="x" @1499000000 Create
  {"key":3,"window_start":1000,"window_end":2000,"value":4} key=3 @1999000000 Create
  {"key":70000,"window_start":1000,"window_end":2000,"value":2} key=70000 @1999000000 Create
  {"key":"b","window_start":1000,"window_end":2000,"value":4} key="b" @1999000000 Create
  {"key":-1,"window_start":1000,"window_end":2000,"value":2} key=-1 @1999000000 Create
  {"key":1,"window_start":1000,"window_end":2000,"value":4} key=1 @1999000000 Create
  {"key":"a","window_start":1000,"window_end":2000,"value":2} key="a" @1999000000 Create
  {"key":0,"window_start":1000,"window_end":2000,"value":2} key=0 @1999000000 Create
  {"key":"x","window_start":1000,"window_end":2000,"value":1} key="x" @1999000000 Create
late 0 dropped late 0 expr 0

== {"aggregate":"sum","kind":"sliding","size":"1s","slide":"500ms","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":-500,"window_end":500,"value":1.5} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":3} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":null} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":3.0} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-4.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":6} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.5} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":null} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":5.0} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
  {"key":3,"window_start":500,"window_end":1500,"value":1.5} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":3} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":null} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"sum","allowed_lateness":"1s","gap":"300ms","kind":"session","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":300,"value":1.5} key=3 @299000070 Create
  {"key":3,"window_start":500,"window_end":800,"value":1.5} key=3 @799000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":70000,"window_start":500,"window_end":800,"value":-2.0} key=70000 @799000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":3} key="b" @299000090 Create
  {"key":"b","window_start":500,"window_end":800,"value":3} key="b" @799000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":-1,"window_start":500,"window_end":800,"value":0.25} key=-1 @799000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":null} key=1 @299000080 Create
  {"key":1,"window_start":500,"window_end":800,"value":null} key=1 @799000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":"a","window_start":500,"window_end":800,"value":2.5} key="a" @799000060 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
  {"key":0,"window_start":500,"window_end":800,"value":0.0} key=0 @799000100 Create
time
batch
  {"key":3,"window_start":0,"window_end":300,"value":3.0} key=3 @299000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-4.0} key=70000 @299000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":7} key="b" @299000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.5} key=-1 @299000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":null} key=1 @299000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":5.0} key="a" @299000060 Create
  {"key":3,"window_start":0,"window_end":300,"value":3.0} key=3 @299000070 Create
  {"key":1,"window_start":0,"window_end":300,"value":null} key=1 @299000080 Create
  {"key":"b","window_start":0,"window_end":300,"value":6} key="b" @299000090 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 10 dropped late 10 expr 0

== {"aggregate":"sum","late":{"dead_letter":"late.jsonl"},"size":"1s","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":1000,"value":3.0} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-4.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":6} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.5} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":null} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":5.0} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"sum","kind":"sliding","size":"1s","slide":"500ms"}
batch
time
batch
watermark
time
  {"key":3,"window_start":-500,"window_end":500,"value":3.0} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-4.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":6} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.5} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":null} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":5.0} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":3.0} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-4.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":6} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.5} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":null} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":5.0} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
  {"key":3,"window_start":500,"window_end":1500,"value":3.0} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-4.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":6} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.5} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":null} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":5.0} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
  {"key":3,"window_start":1000,"window_end":2000,"value":3.0} key=3 @1999000000 Create
  {"key":70000,"window_start":1000,"window_end":2000,"value":-4.0} key=70000 @1999000000 Create
  {"key":"b","window_start":1000,"window_end":2000,"value":6} key="b" @1999000000 Create
  {"key":-1,"window_start":1000,"window_end":2000,"value":0.5} key=-1 @1999000000 Create
  {"key":1,"window_start":1000,"window_end":2000,"value":null} key=1 @1999000000 Create
  {"key":"a","window_start":1000,"window_end":2000,"value":5.0} key="a" @1999000000 Create
  {"key":0,"window_start":1000,"window_end":2000,"value":0.0} key=0 @1999000000 Create
late 0 dropped late 0 expr 0

== {"aggregate":"min","kind":"sliding","size":"1s","slide":"500ms","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":-500,"window_end":500,"value":-0.0} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":-1} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":7.0} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":-0.0} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":-1} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":7.0} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
  {"key":3,"window_start":500,"window_end":1500,"value":-0.0} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":-1} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":7.0} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"min","allowed_lateness":"1s","gap":"300ms","kind":"session","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":300,"value":-0.0} key=3 @299000070 Create
  {"key":3,"window_start":500,"window_end":800,"value":-0.0} key=3 @799000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":70000,"window_start":500,"window_end":800,"value":-2.0} key=70000 @799000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":-1} key="b" @299000090 Create
  {"key":"b","window_start":500,"window_end":800,"value":-1} key="b" @799000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":-1,"window_start":500,"window_end":800,"value":0.25} key=-1 @799000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":7.0} key=1 @299000080 Create
  {"key":1,"window_start":500,"window_end":800,"value":7.0} key=1 @799000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":"a","window_start":500,"window_end":800,"value":2.5} key="a" @799000060 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
  {"key":0,"window_start":500,"window_end":800,"value":0.0} key=0 @799000100 Create
time
batch
  {"key":3,"window_start":0,"window_end":300,"value":-0.0} key=3 @299000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":-1} key="b" @299000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":7.0} key=1 @299000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":3,"window_start":0,"window_end":300,"value":-0.0} key=3 @299000070 Create
  {"key":1,"window_start":0,"window_end":300,"value":7.0} key=1 @299000080 Create
  {"key":"b","window_start":0,"window_end":300,"value":-1} key="b" @299000090 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 10 dropped late 10 expr 0

== {"aggregate":"min","late":{"dead_letter":"late.jsonl"},"size":"1s","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":1000,"value":-0.0} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":-1} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":7.0} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"min","kind":"sliding","size":"1s","slide":"500ms"}
batch
time
batch
watermark
time
  {"key":3,"window_start":-500,"window_end":500,"value":-0.0} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":-1} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":7.0} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":-0.0} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":-1} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":7.0} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
  {"key":3,"window_start":500,"window_end":1500,"value":-0.0} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":-1} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":7.0} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
  {"key":3,"window_start":1000,"window_end":2000,"value":-0.0} key=3 @1999000000 Create
  {"key":70000,"window_start":1000,"window_end":2000,"value":-2.0} key=70000 @1999000000 Create
  {"key":"b","window_start":1000,"window_end":2000,"value":-1} key="b" @1999000000 Create
  {"key":-1,"window_start":1000,"window_end":2000,"value":0.25} key=-1 @1999000000 Create
  {"key":1,"window_start":1000,"window_end":2000,"value":7.0} key=1 @1999000000 Create
  {"key":"a","window_start":1000,"window_end":2000,"value":2.5} key="a" @1999000000 Create
  {"key":0,"window_start":1000,"window_end":2000,"value":0.0} key=0 @1999000000 Create
late 0 dropped late 0 expr 0

== {"aggregate":"max","kind":"sliding","size":"1s","slide":"500ms","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":-500,"window_end":500,"value":1.5} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":4} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":7.0} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":1.5} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":4} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":7.0} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
  {"key":3,"window_start":500,"window_end":1500,"value":1.5} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":4} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":7.0} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"max","allowed_lateness":"1s","gap":"300ms","kind":"session","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":300,"value":1.5} key=3 @299000070 Create
  {"key":3,"window_start":500,"window_end":800,"value":1.5} key=3 @799000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":70000,"window_start":500,"window_end":800,"value":-2.0} key=70000 @799000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":4} key="b" @299000090 Create
  {"key":"b","window_start":500,"window_end":800,"value":4} key="b" @799000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":-1,"window_start":500,"window_end":800,"value":0.25} key=-1 @799000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":7.0} key=1 @299000080 Create
  {"key":1,"window_start":500,"window_end":800,"value":7.0} key=1 @799000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":"a","window_start":500,"window_end":800,"value":2.5} key="a" @799000060 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
  {"key":0,"window_start":500,"window_end":800,"value":0.0} key=0 @799000100 Create
time
batch
  {"key":3,"window_start":0,"window_end":300,"value":1.5} key=3 @299000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":4} key="b" @299000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":7.0} key=1 @299000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":3,"window_start":0,"window_end":300,"value":1.5} key=3 @299000070 Create
  {"key":1,"window_start":0,"window_end":300,"value":7.0} key=1 @299000080 Create
  {"key":"b","window_start":0,"window_end":300,"value":4} key="b" @299000090 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 10 dropped late 10 expr 0

== {"aggregate":"max","late":{"dead_letter":"late.jsonl"},"size":"1s","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":1000,"value":1.5} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":4} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":7.0} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"max","kind":"sliding","size":"1s","slide":"500ms"}
batch
time
batch
watermark
time
  {"key":3,"window_start":-500,"window_end":500,"value":1.5} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":4} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":7.0} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":1.5} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":4} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":7.0} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
  {"key":3,"window_start":500,"window_end":1500,"value":1.5} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":4} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":7.0} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
  {"key":3,"window_start":1000,"window_end":2000,"value":1.5} key=3 @1999000000 Create
  {"key":70000,"window_start":1000,"window_end":2000,"value":-2.0} key=70000 @1999000000 Create
  {"key":"b","window_start":1000,"window_end":2000,"value":4} key="b" @1999000000 Create
  {"key":-1,"window_start":1000,"window_end":2000,"value":0.25} key=-1 @1999000000 Create
  {"key":1,"window_start":1000,"window_end":2000,"value":7.0} key=1 @1999000000 Create
  {"key":"a","window_start":1000,"window_end":2000,"value":2.5} key="a" @1999000000 Create
  {"key":0,"window_start":1000,"window_end":2000,"value":0.0} key=0 @1999000000 Create
late 0 dropped late 0 expr 0

== {"aggregate":"mean","kind":"sliding","size":"1s","slide":"500ms","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":-500,"window_end":500,"value":0.75} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":1.5} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":null} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":0.75} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":1.5} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":null} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
  {"key":3,"window_start":500,"window_end":1500,"value":0.75} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":1.5} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":null} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"mean","allowed_lateness":"1s","gap":"300ms","kind":"session","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":300,"value":0.75} key=3 @299000070 Create
  {"key":3,"window_start":500,"window_end":800,"value":0.75} key=3 @799000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":70000,"window_start":500,"window_end":800,"value":-2.0} key=70000 @799000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":1.5} key="b" @299000090 Create
  {"key":"b","window_start":500,"window_end":800,"value":1.5} key="b" @799000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":-1,"window_start":500,"window_end":800,"value":0.25} key=-1 @799000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":null} key=1 @299000080 Create
  {"key":1,"window_start":500,"window_end":800,"value":null} key=1 @799000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":"a","window_start":500,"window_end":800,"value":2.5} key="a" @799000060 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
  {"key":0,"window_start":500,"window_end":800,"value":0.0} key=0 @799000100 Create
time
batch
  {"key":3,"window_start":0,"window_end":300,"value":1.0} key=3 @299000070 Create
  {"key":70000,"window_start":0,"window_end":300,"value":-2.0} key=70000 @299000020 Create
  {"key":"b","window_start":0,"window_end":300,"value":2.3333333333333335} key="b" @299000090 Create
  {"key":-1,"window_start":0,"window_end":300,"value":0.25} key=-1 @299000040 Create
  {"key":1,"window_start":0,"window_end":300,"value":null} key=1 @299000080 Create
  {"key":"a","window_start":0,"window_end":300,"value":2.5} key="a" @299000060 Create
  {"key":3,"window_start":0,"window_end":300,"value":0.75} key=3 @299000070 Create
  {"key":1,"window_start":0,"window_end":300,"value":null} key=1 @299000080 Create
  {"key":"b","window_start":0,"window_end":300,"value":1.5} key="b" @299000090 Create
  {"key":0,"window_start":0,"window_end":300,"value":0.0} key=0 @299000100 Create
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 10 dropped late 10 expr 0

== {"aggregate":"mean","late":{"dead_letter":"late.jsonl"},"size":"1s","time":"event"}
batch
time
batch
watermark
  {"key":3,"window_start":0,"window_end":1000,"value":0.75} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":1.5} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":null} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
time
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
late 20 dropped late 20 expr 0

== {"aggregate":"mean","kind":"sliding","size":"1s","slide":"500ms"}
batch
time
batch
watermark
time
  {"key":3,"window_start":-500,"window_end":500,"value":0.75} key=3 @499000000 Create
  {"key":70000,"window_start":-500,"window_end":500,"value":-2.0} key=70000 @499000000 Create
  {"key":"b","window_start":-500,"window_end":500,"value":1.5} key="b" @499000000 Create
  {"key":-1,"window_start":-500,"window_end":500,"value":0.25} key=-1 @499000000 Create
  {"key":1,"window_start":-500,"window_end":500,"value":null} key=1 @499000000 Create
  {"key":"a","window_start":-500,"window_end":500,"value":2.5} key="a" @499000000 Create
  {"key":0,"window_start":-500,"window_end":500,"value":0.0} key=0 @499000000 Create
  {"key":3,"window_start":0,"window_end":1000,"value":0.75} key=3 @999000000 Create
  {"key":70000,"window_start":0,"window_end":1000,"value":-2.0} key=70000 @999000000 Create
  {"key":"b","window_start":0,"window_end":1000,"value":1.5} key="b" @999000000 Create
  {"key":-1,"window_start":0,"window_end":1000,"value":0.25} key=-1 @999000000 Create
  {"key":1,"window_start":0,"window_end":1000,"value":null} key=1 @999000000 Create
  {"key":"a","window_start":0,"window_end":1000,"value":2.5} key="a" @999000000 Create
  {"key":0,"window_start":0,"window_end":1000,"value":0.0} key=0 @999000000 Create
batch
watermark
batch
batch
  error: expression `value` failed: must give a number, but gave a string "no"; record: {"value":"no"}
finish
  {"key":3,"window_start":500,"window_end":1500,"value":0.75} key=3 @1499000000 Create
  {"key":70000,"window_start":500,"window_end":1500,"value":-2.0} key=70000 @1499000000 Create
  {"key":"b","window_start":500,"window_end":1500,"value":1.5} key="b" @1499000000 Create
  {"key":-1,"window_start":500,"window_end":1500,"value":0.25} key=-1 @1499000000 Create
  {"key":1,"window_start":500,"window_end":1500,"value":null} key=1 @1499000000 Create
  {"key":"a","window_start":500,"window_end":1500,"value":2.5} key="a" @1499000000 Create
  {"key":0,"window_start":500,"window_end":1500,"value":0.0} key=0 @1499000000 Create
  {"key":3,"window_start":1000,"window_end":2000,"value":0.75} key=3 @1999000000 Create
  {"key":70000,"window_start":1000,"window_end":2000,"value":-2.0} key=70000 @1999000000 Create
  {"key":"b","window_start":1000,"window_end":2000,"value":1.5} key="b" @1999000000 Create
  {"key":-1,"window_start":1000,"window_end":2000,"value":0.25} key=-1 @1999000000 Create
  {"key":1,"window_start":1000,"window_end":2000,"value":null} key=1 @1999000000 Create
  {"key":"a","window_start":1000,"window_end":2000,"value":2.5} key="a" @1999000000 Create
  {"key":0,"window_start":1000,"window_end":2000,"value":0.0} key=0 @1999000000 Create
late 0 dropped late 0 expr 0

dead letters:
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":3,"value":1.5}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":70000,"value":-2.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"value":4}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":-1,"value":0.25}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":1,"value":null}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"value":2.5}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":3,"value":-0.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":1,"value":7.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"value":-1}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 999 ms (allowed_lateness 0 ms)","record":{"key":0,"value":0.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":3,"value":1.5}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":70000,"value":-2.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"value":4}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":-1,"value":0.25}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":1,"value":null}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"value":2.5}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":3,"value":-0.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":1,"value":7.0}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"value":-1}}
{"vertex":"v","error":"late: the record's last window [0, 1000) ms was gone at watermark 3000 ms (allowed_lateness 0 ms)","record":{"key":0,"value":0.0}}

"##;
}
