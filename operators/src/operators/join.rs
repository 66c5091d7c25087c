//! The `join` operator: an interval join of two keyed streams in event time (Flink's
//! `intervalJoin`, Kafka Streams' windowed stream–stream join).
//!
//! ```yaml
//! operators:
//!   paid_after_click:
//!     type: join
//!     kind: interval           # the default
//!     left: payments           # vertex ids (sources or operators)
//!     right: clicks
//!     key: user                # CEL over each side's event; or {left: customer_id, right: id}
//!     between: [-10m, 0s]      # right.timestamp - left.timestamp in [lower, upper], inclusive
//!     join: inner              # inner (default) | left | right | full
//!     select:                  # optional: CEL over `left`, `right` (null when unmatched) and `key`
//!       user: key
//!       amount: left.amount
//!     allowed_lateness: 0s     # default 0
//!     late: {dead_letter: late-joins.jsonl}   # drop (default: dropped and counted) | {dead_letter: PATH}
//!     on_error: fail           # a `select` expression failing: fail (default) | skip | {dead_letter: PATH}
//! ```
//!
//! `left`, `right` and `key` are the job file's: both inputs are hash edges on the join key
//! (a key stage per input, `<join>.key.<input>`), so one key's records of both sides meet in
//! one subtask; the runtime tells the operator which input a batch came over
//! ([`Operator::process_input`]: the left is input 0, the right input 1).
//!
//! **Matching.** A left record `l` and a right record `r` of one key match when
//! `lower <= r.timestamp - l.timestamp <= upper`. Each matching pair gives one result as soon
//! as its second record arrives, timestamped `max(l.timestamp, r.timestamp)`, with the join key
//! as its key. Its event is `{"left": <left event>, "right": <right event>}`, or with `select`
//! the fields of `select` (in name order), each a CEL expression over the variables `left`,
//! `right` (`null` on the unmatched side) and `key`.
//!
//! **Event time.** The join's watermark is the smaller of its inputs' (the runtime's, as for
//! every vertex with several inputs; an idle input does not hold it back). Let
//! `limit = watermark - allowed_lateness`. A record with a timestamp below `limit` is late:
//! dropped and counted (`tidemark_records_dropped_total{reason="late"}`), and with
//! `late: {dead_letter: PATH}` written there. A left record is held until `limit` passes
//! `l.timestamp + upper`, a right record until it passes `r.timestamp - lower`: after that no
//! record that is not late can match it. Then it leaves the state; if it matched nothing, with
//! `join: left` (a left record), `right` (a right record) or `full` (either) it gives one
//! result with the other side null, timestamped with its own timestamp, and with `inner` it is
//! counted as dropped with reason `unmatched`. A record that matched never gives an unmatched
//! result. At the end of a bounded input every record still held is settled the same way.
//!
//! **State** is the keyed state it declares ([`Operator::keyed_table`]): per key, the held
//! records of each side in a time-ordered buffer ([`TimeBuffer`]), each with its event and
//! whether it matched. The runtime snapshots it at each checkpoint, restores it at any
//! parallelism and moves it with its key groups; the operator's watermark goes with it, so
//! lateness is judged after a restore as before it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_runtime::keyed_state::{KeyedSnapshot, KeyedState};
use tidemark_runtime::keyed_table::{KeyedTable, TimeBuffer};
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::provenance::Origin;
use tidemark_runtime::value::Value;
use tidemark_runtime::{
    BoxError, DropReason, JoinCounts, Operator, Output, Record, StateSize, SubtaskContext,
};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config::{self, duration, nanos_i64};
use crate::error::{ConfigError, FieldError};
use crate::expr::Expr;
use crate::on_error::{ErrorPolicy, OnErrorFactory};
use crate::operators::join_results::{approximate_size, event_text, origin_form, JoinResults};
use crate::operators::table_join::{AsOf, TableJoin};
use crate::operators::window::LatePolicy;

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "join",
    kind: ComponentKind::Operator,
    fields: &[
        "kind",
        "between",
        "join",
        "select",
        "allowed_lateness",
        "late",
        "on_error",
        "as_of",
    ],
    summary: "an interval join of two keyed inputs (`left`, `right`) in event time",
    build,
};

/// Settings of the `join` operator (its `left`, `right` and `key` are the job file's).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinConfig {
    /// Which join.
    #[serde(default)]
    pub kind: JoinKind,
    /// `[lower, upper]`: the bounds of `right.timestamp - left.timestamp`.
    #[serde(default)]
    pub between: Option<Vec<serde_json::Value>>,
    /// Which unmatched records give results.
    #[serde(default)]
    pub join: JoinType,
    /// Output field -> CEL expression over `left`, `right` and `key`.
    #[serde(default)]
    pub select: Option<BTreeMap<String, String>>,
    /// How far behind the watermark a record may be and still join; default 0.
    #[serde(default, deserialize_with = "duration::option")]
    pub allowed_lateness: Option<Duration>,
    /// What happens to late records.
    #[serde(default)]
    pub late: LatePolicy,
    /// What happens when a `select` expression fails on a result.
    #[serde(default)]
    pub on_error: ErrorPolicy,
    /// A table join's version choice.
    #[serde(default)]
    pub as_of: Option<AsOf>,
}

/// `kind:` which join.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JoinKind {
    /// Records of both sides within an interval of each other.
    #[default]
    Interval,
    /// A stream against a table's changelog.
    Table,
}

/// `join:` which unmatched records give a result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JoinType {
    /// Only matches.
    #[default]
    Inner,
    /// Matches, and left records that matched nothing.
    Left,
    /// Matches, and right records that matched nothing.
    Right,
    /// Matches, and records of either side that matched nothing.
    Full,
}

impl JoinType {
    /// Whether a record of `side` that matched nothing gives a result.
    fn keeps(self, side: Side) -> bool {
        matches!(
            (self, side),
            (JoinType::Full, _) | (JoinType::Left, Side::Left) | (JoinType::Right, Side::Right)
        )
    }
}

/// A signed duration (`-10m`, `0s`, `5s`, a number of milliseconds) in nanoseconds.
fn signed_duration(v: &serde_json::Value) -> Result<i64, String> {
    let text = match v {
        serde_json::Value::String(s) => s.trim().to_owned(),
        serde_json::Value::Number(n) => n.to_string(),
        other => {
            return Err(format!(
                "expected a duration like -10m or 0s, found {other}"
            ))
        }
    };
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let d = tidemark_markers::parse_duration(magnitude).map_err(|e| e.to_string())?;
    let n = nanos_i64(d);
    Ok(if negative { -n } else { n })
}

fn build(config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: JoinConfig = config::parse(INFO.type_name, config)?;
    let mut problems = Vec::new();
    let table = config.kind == JoinKind::Table;
    if table && matches!(config.join, JoinType::Right | JoinType::Full) {
        problems.push(FieldError::new(
            "join",
            "a table join is inner or left: a table's rows give no result by themselves",
        ));
    }
    if !table && config.as_of.is_some() {
        problems.push(FieldError::new("as_of", "only applies with kind: table"));
    }
    let between = match (config.between.as_deref(), table) {
        (Some(_), true) => {
            problems.push(FieldError::new(
                "between",
                "only applies with kind: interval (a table join takes the version valid at \
                 the left record's time)",
            ));
            None
        }
        (None, true) => Some((0, 0)),
        (None, false) => {
            problems.push(FieldError::new(
                "between",
                "missing: an interval join needs `between: [lower, upper]` (e.g. [-10m, 0s]: \
                 the right record at most 10 minutes before the left one)",
            ));
            None
        }
        (Some([lower, upper]), false) => match (signed_duration(lower), signed_duration(upper)) {
            (Ok(l), Ok(u)) if l <= u => Some((l, u)),
            (Ok(_), Ok(_)) => {
                problems.push(FieldError::new(
                    "between",
                    "the lower bound is above the upper bound: expected [lower, upper]",
                ));
                None
            }
            (Err(e), _) | (_, Err(e)) => {
                problems.push(FieldError::new("between", e));
                None
            }
        },
        (Some(other), false) => {
            problems.push(FieldError::new(
                "between",
                format!(
                    "expected two durations [lower, upper], found {} values",
                    other.len()
                ),
            ));
            None
        }
    };
    let mut select = Vec::new();
    for (field, source) in config.select.iter().flatten() {
        match Expr::compile(source) {
            Ok(e) => {
                let others: Vec<&str> = e
                    .variables()
                    .iter()
                    .map(String::as_str)
                    .filter(|v| !["left", "right", "key"].contains(v))
                    .collect();
                if !others.is_empty() {
                    problems.push(FieldError::new(
                        &format!("select.{field}"),
                        format!(
                            "`{source}` reads {}: a join's select sees `left`, `right` and `key` \
                             (e.g. left.amount)",
                            others
                                .iter()
                                .map(|v| format!("`{v}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                select.push((name_of(field), e));
            }
            Err(e) => return Err(e.into_config_error(INFO.type_name, &format!("select.{field}"))),
        }
    }
    let (Some((lower, upper)), true) = (between, problems.is_empty()) else {
        return Err(ConfigError::Invalid {
            type_name: INFO.type_name.to_owned(),
            problems,
        });
    };
    let select: Option<Arc<[(Name, Expr)]>> = config.select.is_some().then(|| select.into());
    let lateness = nanos_i64(config.allowed_lateness.unwrap_or_default());
    let on_error = OnErrorFactory::new(config.on_error.clone(), &env.job_dir);
    let late = match &config.late {
        LatePolicy::Drop => None,
        LatePolicy::DeadLetter(path) => Some(OnErrorFactory::new(
            ErrorPolicy::DeadLetter(path.clone()),
            &env.job_dir,
        )),
    };
    let join = config.join;
    let kind = config.kind;
    let as_of = config.as_of;
    Ok(Built::Operator(Box::new(move |ctx: &SubtaskContext| {
        let late = match &late {
            Some(f) => Some(f.subtask(&ctx.vertex_id)?),
            None => None,
        };
        let results = JoinResults::new(
            &ctx.vertex_id,
            select.clone(),
            on_error.subtask(&ctx.vertex_id)?,
            late,
            lateness,
        );
        Ok(match kind {
            JoinKind::Interval => Box::new(IntervalJoin {
                lower,
                upper,
                lateness,
                join,
                results,
                state: KeyedState::new(),
                expiry: BTreeMap::new(),
                watermark: i64::MIN,
                behind: Vec::new(),
                pairs: Vec::new(),
            }) as Box<dyn Operator>,
            JoinKind::Table => Box::new(TableJoin::new(
                join == JoinType::Left,
                as_of.unwrap_or_default(),
                results,
            )),
        })
    })))
}

/// Which input a record came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

/// A record held in a join's state: its event, and whether it has matched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Held {
    /// Kept as JSON text in a snapshot (the checkpoint codec reads no self-describing values).
    #[serde(with = "event_text")]
    event: Value,
    /// The input message it came from, for its results' ids.
    #[serde(with = "origin_form")]
    origin: Option<Origin>,
    matched: bool,
}

/// One key's held records of each side, in timestamp order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Sides {
    left: TimeBuffer<Held>,
    right: TimeBuffer<Held>,
}

/// The width of the expiry index's buckets (about a millisecond): one entry per key and bucket
/// instead of per record; a bucket is taken once all of it has left, so an unmatched result
/// may come up to this much event time after the earliest moment it could.
const EXPIRY_BUCKET: i64 = 1 << 20;

/// One subtask of an interval join.
struct IntervalJoin {
    lower: i64,
    upper: i64,
    lateness: i64,
    join: JoinType,
    /// Results, late records and counts.
    results: JoinResults,
    /// The held records per key: the keyed state the operator declares.
    state: KeyedState<Sides>,
    /// When held records leave the state: per bucket of [`EXPIRY_BUCKET`] of the times after
    /// which they leave (once the watermark minus the lateness is above it), the keys holding
    /// one. Not in the state: made again from it on a restore. A key may be listed for records
    /// that left already (nothing happens then).
    expiry: BTreeMap<i64, Vec<Value>>,
    /// The matches of the record being added, reused.
    pairs: Vec<(i64, Value, Option<Origin>)>,
    /// The highest watermark seen (`i64::MIN`: none yet).
    watermark: i64,
    /// Key groups that moved here behind the subtask's event time (behind a Kafka exchange),
    /// until they catch up ([`super::join_results::caught_up`]).
    behind: Vec<u32>,
}

impl IntervalJoin {
    /// The time below which a record is late, and above which a held record must reach to
    /// stay; `i64::MIN` (nothing late, nothing leaves) while key groups that moved here behind
    /// the subtask's event time catch up.
    fn limit(&self) -> i64 {
        match self.behind.is_empty() {
            true => self.watermark.saturating_sub(self.lateness),
            false => i64::MIN,
        }
    }

    /// When a record of `side` at `t` leaves the state: the limit must pass this.
    fn leaves_after(&self, side: Side, t: i64) -> i64 {
        match side {
            Side::Left => t.saturating_add(self.upper),
            Side::Right => t.saturating_sub(self.lower),
        }
    }

    fn add(&mut self, side: Side, record: &Record, out: &mut Output) -> Result<(), BoxError> {
        if record.is_tombstone() {
            self.results.tombstones_dropped += 1;
            return Ok(());
        }
        let t = record.timestamp;
        let limit = self.limit();
        if self.watermark != i64::MIN && t < limit {
            return self.results.late(record, self.watermark);
        }
        let key = record.key();
        let event = record.event();
        let leaves_after = self.leaves_after(side, t);
        let (lower, upper) = (self.lower, self.upper);
        let sides = self.state.get_or_default(&key);
        let (other, from, to) = match side {
            Side::Left => (
                &mut sides.right,
                t.saturating_add(lower),
                t.saturating_add(upper),
            ),
            Side::Right => (
                &mut sides.left,
                t.saturating_sub(upper),
                t.saturating_sub(lower),
            ),
        };
        let mut pairs = std::mem::take(&mut self.pairs);
        for (other_t, held) in other.range_mut(from, to) {
            held.matched = true;
            pairs.push((other_t, held.event.clone(), held.origin.clone()));
        }
        let origin = record.origin();
        let matched = !pairs.is_empty();
        let stays = leaves_after >= limit || self.watermark == i64::MIN || limit == i64::MIN;
        if stays {
            let own = match side {
                Side::Left => &mut sides.left,
                Side::Right => &mut sides.right,
            };
            own.push(
                t,
                Held {
                    event: event.clone(),
                    origin: origin.cloned(),
                    matched,
                },
            );
            let keys = self
                .expiry
                .entry(leaves_after.div_euclid(EXPIRY_BUCKET))
                .or_default();
            if keys.last() != Some(&*key) {
                keys.push(key.clone().into_owned());
            }
        } else if sides.left.is_empty() && sides.right.is_empty() {
            self.state.remove(&key);
        }
        for (other_t, other_event, other_origin) in pairs.drain(..) {
            let own = (&event, origin);
            let other = (&other_event, other_origin.as_ref());
            let (l, r) = match side {
                Side::Left => (own, other),
                Side::Right => (other, own),
            };
            self.results
                .emit(&key, Some(l), Some(r), t.max(other_t), out)?;
        }
        self.pairs = pairs;
        if !stays && !matched {
            let origin = origin.cloned();
            self.unmatched(side, &key, event, origin, t, out)?;
        }
        Ok(())
    }

    /// A record of `side` that matched nothing and leaves: a result with the other side null,
    /// or counted as dropped.
    fn unmatched(
        &mut self,
        side: Side,
        key: &Value,
        event: Value,
        origin: Option<Origin>,
        t: i64,
        out: &mut Output,
    ) -> Result<(), BoxError> {
        if !self.join.keeps(side) {
            self.results.unmatched_dropped += 1;
            return Ok(());
        }
        let part = Some((&event, origin.as_ref()));
        match side {
            Side::Left => self.results.emit(key, part, None, t, out),
            Side::Right => self.results.emit(key, None, part, t, out),
        }
    }

    /// Every held record that leaves once the limit is `limit` (`None`: all of them, at the
    /// end of input) leaves, giving its unmatched result.
    fn expire(&mut self, limit: Option<i64>, out: &mut Output) -> Result<(), BoxError> {
        // A bucket all of whose times are below the limit: every record in it has left.
        let due = match limit {
            Some(limit) => {
                let rest = self.expiry.split_off(&limit.div_euclid(EXPIRY_BUCKET));
                std::mem::replace(&mut self.expiry, rest)
            }
            None => std::mem::take(&mut self.expiry),
        };
        let (lower, upper) = (self.lower, self.upper);
        let mut gone: Vec<(Side, i64, Value, Option<Origin>)> = Vec::new();
        for key in due.into_values().flatten() {
            let Some(sides) = self.state.get_mut(&key) else {
                continue;
            };
            // A left record leaves when limit > t + upper, a right one when limit > t - lower.
            let (left_until, right_until) = match limit {
                Some(limit) => (
                    limit.saturating_sub(upper).saturating_sub(1),
                    limit.saturating_add(lower).saturating_sub(1),
                ),
                None => (i64::MAX, i64::MAX),
            };
            // The records that matched nothing give their unmatched results.
            sides.left.expire(left_until, |t, held| {
                if !held.matched {
                    gone.push((Side::Left, t, held.event, held.origin));
                }
            });
            sides.right.expire(right_until, |t, held| {
                if !held.matched {
                    gone.push((Side::Right, t, held.event, held.origin));
                }
            });
            if sides.left.is_empty() && sides.right.is_empty() {
                self.state.remove(&key);
            }
            for (side, t, event, origin) in gone.drain(..) {
                self.unmatched(side, &key, event, origin, t, out)?;
            }
        }
        Ok(())
    }

    /// The expiry index made again from the state (after a restore).
    fn index(&mut self) {
        self.expiry.clear();
        let mut expiry: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
        for (key, sides) in self.state.iter() {
            let left = sides.left.iter().map(|(t, _)| t.saturating_add(self.upper));
            let right = sides
                .right
                .iter()
                .map(|(t, _)| t.saturating_sub(self.lower));
            for leaves_after in left.chain(right) {
                let keys = expiry
                    .entry(leaves_after.div_euclid(EXPIRY_BUCKET))
                    .or_default();
                if keys.last() != Some(key) {
                    keys.push(key.clone());
                }
            }
        }
        self.expiry = expiry;
    }
}

impl Operator for IntervalJoin {
    /// Only a join with one input gets records this way: behind a Kafka exchange, whose
    /// reader feeds both sides and says on each record which it is for; any other record means
    /// a join built with one input.
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        match record.exchange_input() {
            Some(0) => self.add(Side::Left, &record, out),
            Some(1) => self.add(Side::Right, &record, out),
            _ => Err(super::join_results::ONE_INPUT.into()),
        }
    }

    fn process_input(
        &mut self,
        input: usize,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<bool, BoxError> {
        let side = match input {
            0 => Side::Left,
            1 => Side::Right,
            other => return Err(format!("a join has two inputs, not {}", other + 1).into()),
        };
        for record in records.iter() {
            self.add(side, record, out)?;
        }
        Ok(true)
    }

    fn uses_time(&self) -> bool {
        false
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<(), BoxError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        if !self.behind.is_empty() {
            return Ok(());
        }
        self.expire(Some(self.limit()), out)
    }

    fn finish(&mut self, _now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        self.expire(None, out)?;
        self.results.finish()
    }

    fn keyed_table(&mut self) -> Option<&mut dyn KeyedTable> {
        Some(&mut self.state)
    }

    /// The held records per key, and the watermark (an operator-wide value).
    fn snapshot_keyed(
        &mut self,
        _checkpoint: u64,
        state: &mut KeyedSnapshot,
    ) -> Result<(), BoxError> {
        KeyedTable::snapshot(&self.state, state)?;
        state.set_shared(&self.watermark)?;
        Ok(())
    }

    /// Takes in the held records of this subtask's key groups and continues from the smallest
    /// watermark the old subtasks had ([`super::join_results::restored_watermark`]), and makes
    /// the expiry index again.
    fn restore_keyed(&mut self, state: KeyedSnapshot) -> Result<(), BoxError> {
        KeyedTable::restore(&mut self.state, &state)?;
        let restored: Vec<i64> = state.shared()?;
        self.watermark = super::join_results::restored_watermark(self.watermark, restored);
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
        if super::join_results::caught_up(&mut self.behind, groups, watermark, self.watermark) {
            self.expire(Some(self.limit()), out)?;
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
        let (left, right) = self.state.iter().fold((0, 0), |(l, r), (_, s)| {
            (l + s.left.len() as u64, r + s.right.len() as u64)
        });
        Some(self.results.counts(left, right))
    }

    fn state_size(&self) -> Option<StateSize> {
        Some(StateSize {
            keys: self.state.len() as u64,
            windows_open: 0,
            bytes: self
                .state
                .iter()
                .flat_map(|(_, s)| s.left.iter().chain(s.right.iter()))
                .map(|(_, h)| 48 + approximate_size(&h.event))
                .sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::operator;
    use proptest::prelude::*;
    use serde_json::json;
    use tidemark_runtime::value::Map;

    const MS: i64 = 1_000_000;

    /// One step of a run: a record of a side (key, timestamp in ms, id), or a watermark (ms).
    #[derive(Clone, Debug)]
    enum Step {
        Record(Side, i64, i64, i64),
        Watermark(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (any::<bool>(), 0i64..3, 0i64..40, 0i64..1_000).prop_map(|(l, k, t, id)| {
                Step::Record(if l { Side::Left } else { Side::Right }, k, t, id)
            }),
            1 => (0i64..45).prop_map(Step::Watermark),
        ]
    }

    fn join(kind: &str, lower: i64, upper: i64, lateness: i64) -> Box<dyn Operator> {
        operator(
            &INFO,
            json!({
                "between": [format!("{lower}ms"), format!("{upper}ms")],
                "join": kind,
                "allowed_lateness": format!("{lateness}ms"),
            }),
        )
    }

    fn record(k: i64, t: i64, id: i64) -> Record {
        let mut event = Map::new();
        event.insert("id", Value::Int(id));
        Record::with_event(Value::Int(k), event, t * MS)
    }

    /// A result as (left id, right id, timestamp ms); -1 for a null side.
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

    /// Runs `steps` (then the end of input) through a join, taking a snapshot before step
    /// `cut` and going on from a new operator restored from it.
    fn run(
        make: &dyn Fn() -> Box<dyn Operator>,
        steps: &[Step],
        cut: Option<usize>,
    ) -> Vec<(i64, i64, i64)> {
        let mut op = make();
        let mut out = Output::with_capacity(1 << 16);
        let mut results = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            if cut == Some(i) {
                let mut snapshot = KeyedSnapshot::new(8);
                op.snapshot_keyed(1, &mut snapshot).unwrap();
                let snapshot: KeyedSnapshot = tidemark_runtime::state_codec::decode(
                    &tidemark_runtime::state_codec::encode(&snapshot).unwrap(),
                )
                .unwrap();
                op = make();
                assert!(op.has_keyed_state());
                op.restore_keyed(snapshot).unwrap();
            }
            match s {
                Step::Record(side, k, t, id) => {
                    let input = match side {
                        Side::Left => 0,
                        Side::Right => 1,
                    };
                    assert!(op
                        .process_input(input, &mut [record(*k, *t, *id)], &mut out)
                        .unwrap());
                }
                Step::Watermark(w) => op.on_watermark(w * MS, &mut out).unwrap(),
            }
            results.extend(out.records().iter().map(result));
            out.clear();
        }
        op.finish(0, &mut out).unwrap();
        results.extend(out.records().iter().map(result));
        results.sort();
        results
    }

    /// What the join must give for `steps`, by a nested loop over the records that were not
    /// late: every matching pair, and the outer sides' records that matched nothing.
    fn reference(
        kind: &str,
        lower: i64,
        upper: i64,
        lateness: i64,
        steps: &[Step],
    ) -> Vec<(i64, i64, i64)> {
        let mut watermark = i64::MIN;
        let mut kept: Vec<(Side, i64, i64, i64)> = Vec::new();
        for s in steps {
            match s {
                Step::Watermark(w) => watermark = watermark.max(*w),
                Step::Record(side, k, t, id) => {
                    if watermark == i64::MIN || *t >= watermark - lateness {
                        kept.push((*side, *k, *t, *id));
                    }
                }
            }
        }
        let lefts: Vec<_> = kept.iter().filter(|r| r.0 == Side::Left).collect();
        let rights: Vec<_> = kept.iter().filter(|r| r.0 == Side::Right).collect();
        let mut out = Vec::new();
        let matches = |l: &(Side, i64, i64, i64), r: &(Side, i64, i64, i64)| {
            l.1 == r.1 && (lower..=upper).contains(&(r.2 - l.2))
        };
        for l in &lefts {
            for r in &rights {
                if matches(l, r) {
                    out.push((l.3, r.3, l.2.max(r.2)));
                }
            }
        }
        if kind == "left" || kind == "full" {
            for l in &lefts {
                if !rights.iter().any(|r| matches(l, r)) {
                    out.push((l.3, -1, l.2));
                }
            }
        }
        if kind == "right" || kind == "full" {
            for r in &rights {
                if !lefts.iter().any(|l| matches(l, r)) {
                    out.push((-1, r.3, r.2));
                }
            }
        }
        out.sort();
        out
    }

    proptest! {
        /// Whatever the interleaving of the two inputs and the watermarks, every kind gives
        /// exactly what a nested loop over the records that were not late gives; and a
        /// snapshot taken before any step, restored into a new operator, changes nothing.
        #[test]
        fn an_interval_join_gives_the_nested_loop_result_across_any_restore(
            steps in prop::collection::vec(step(), 0..80),
            kind in prop::sample::select(vec!["inner", "left", "right", "full"]),
            lower in -10i64..5,
            width in 0i64..10,
            lateness in 0i64..6,
            cut in any::<prop::sample::Index>(),
        ) {
            let upper = lower + width;
            // Ids unique per run, so results can be compared as sets.
            let steps: Vec<Step> = steps
                .into_iter()
                .enumerate()
                .map(|(i, s)| match s {
                    Step::Record(side, k, t, _) => Step::Record(side, k, t, i as i64),
                    w => w,
                })
                .collect();
            let make = || join(kind, lower, upper, lateness);
            let want = reference(kind, lower, upper, lateness, &steps);
            prop_assert_eq!(&run(&make, &steps, None), &want);
            let cut = cut.index(steps.len() + 1);
            prop_assert_eq!(&run(&make, &steps, Some(cut)), &want);
        }
    }

    /// Records leave the state once no record that is not late can match them: a left record
    /// at `t` when the watermark minus the lateness passes `t + upper`.
    #[test]
    fn held_records_leave_when_nothing_can_match_them_any_more() {
        let mut op = join("inner", -10, 0, 2);
        let mut out = Output::with_capacity(1024);
        op.process_input(0, &mut [record(1, 20, 1)], &mut out)
            .unwrap();
        op.process_input(1, &mut [record(1, 15, 2)], &mut out)
            .unwrap();
        assert_eq!(op.state_size().unwrap().keys, 1);
        // limit = 21 - 2 = 19: the right record (leaves after 15 + 10 = 25) and the left one
        // (after 20) stay.
        op.on_watermark(21 * MS, &mut out).unwrap();
        assert_eq!(op.state_size().unwrap().keys, 1);
        // limit = 23: the left one leaves; the right one stays.
        op.on_watermark(25 * MS, &mut out).unwrap();
        assert_eq!(op.state_size().unwrap().keys, 1);
        // limit = 26: both gone, the key too.
        op.on_watermark(28 * MS, &mut out).unwrap();
        assert_eq!(op.state_size().unwrap().keys, 0);
        assert_eq!(out.len(), 1);
        assert_eq!(op.records_dropped(DropReason::Unmatched), 0);
        // A record behind the limit is late.
        op.process_input(1, &mut [record(1, 25, 3)], &mut out)
            .unwrap();
        assert_eq!(op.records_dropped(DropReason::Late), 1);
    }

    /// A key group restored behind the subtask's event time (a Kafka exchange partition taken
    /// from an owner that had not got as far): until it catches up nothing is late and nothing
    /// leaves, so its records behind the subtask's watermark still join; then held records
    /// leave as usual.
    #[test]
    fn while_a_key_group_restored_behind_catches_up_nothing_is_late_and_nothing_leaves() {
        let mut op = join("left", -10, 0, 0);
        let mut out = Output::with_capacity(1024);
        op.process_input(0, &mut [record(1, 100, 1)], &mut out)
            .unwrap();
        op.on_watermark(100 * MS, &mut out).unwrap();
        let empty = KeyedSnapshot::default();
        op.restore_keyed_behind(empty, &[7], 40 * MS).unwrap();
        // A right record at 95 (behind the watermark, on time for its partition) matches the
        // left record at 100, which would otherwise have left; another key's left record at 50
        // is not late.
        op.process_input(1, &mut [record(1, 95, 2)], &mut out)
            .unwrap();
        op.process_input(0, &mut [record(2, 50, 3)], &mut out)
            .unwrap();
        assert_eq!(op.records_dropped(DropReason::Late), 0);
        assert_eq!(out.len(), 1, "the match");
        op.on_watermark(200 * MS, &mut out).unwrap();
        assert_eq!(op.state_size().unwrap().keys, 2, "nothing left yet");
        // Behind its partition's own watermark: still waiting.
        op.key_groups_event_time(8, &[7], Some(150 * MS), &mut out)
            .unwrap();
        assert_eq!(op.state_size().unwrap().keys, 2);
        // Caught up: both left records leave, the one without a match with its null result.
        op.key_groups_event_time(8, &[7], Some(200 * MS), &mut out)
            .unwrap();
        assert_eq!(op.state_size().unwrap().keys, 0);
        let results: Vec<_> = out.records().iter().map(result).collect();
        assert_eq!(results, [(1, 2, 100), (3, -1, 50)]);
        out.clear();
        // From now on, late as usual.
        op.process_input(0, &mut [record(3, 60, 4)], &mut out)
            .unwrap();
        assert_eq!(op.records_dropped(DropReason::Late), 1);
    }

    /// A join built with one input (through the library) refuses its records with a clear
    /// error instead of taking them as left records.
    #[test]
    fn a_join_with_one_input_fails_clearly() {
        for settings in [json!({"between": ["-1s", "0s"]}), json!({"kind": "table"})] {
            let mut op = operator(&INFO, settings);
            let mut out = Output::with_capacity(8);
            let e = op.process(record(1, 5, 1), &mut out).unwrap_err();
            assert!(e.to_string().contains("a join needs two inputs"), "{e}");
            assert!(out.is_empty());
        }
    }

    #[test]
    fn bad_settings_are_refused_at_their_field() {
        for (settings, want) in [
            (json!({}), "between: missing"),
            (
                json!({"between": ["5s", "1s"]}),
                "between: the lower bound is above the upper",
            ),
            (
                json!({"between": ["5s"]}),
                "between: expected two durations",
            ),
            (json!({"between": ["5 parsecs", "1s"]}), "between:"),
            (
                json!({"between": ["-1s", "0s"], "kind": "table"}),
                "between: only applies with kind: interval",
            ),
            (
                json!({"kind": "table", "join": "full"}),
                "join: a table join is inner or left",
            ),
            (
                json!({"between": ["-1s", "0s"], "as_of": "latest"}),
                "as_of: only applies with kind: table",
            ),
            (json!({"kind": "table", "as_of": "now"}), "as_of:"),
            (
                json!({"between": ["-1s", "0s"], "select": {"a": "amount + left.x", "b": "right.y"}}),
                "select.a: `amount + left.x` reads `amount`: a join's select sees `left`, `right` and `key`",
            ),
            (
                json!({"between": ["-1s", "0s"], "select": {"a": "[1, 2].exists(x, x == key)"}}),
                "__accepted__",
            ),
            (json!({"between": ["-1s", "0s"], "join": "outer"}), "join:"),
            (
                json!({"between": ["-1s", "0s"], "select": {"a": "left."}}),
                "select.a",
            ),
        ] {
            let e = match (INFO.build)(settings.clone(), &BuildEnv::default()) {
                Ok(_) if want == "__accepted__" => continue,
                Ok(_) => panic!("{settings} was accepted"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(want), "{settings}: {e}");
        }
    }
}
