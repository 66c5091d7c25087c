//! Event time at the sources: timestamp range checks (Kafka KIP-937) and watermarks with
//! bounded out-of-orderness and idleness (as Flink's `WatermarkStrategy`).
//!
//! Both are options of a source vertex ([`SourceOptions`]) applied by the runtime to whatever
//! the source emits, so every source, built-in or user-written, gets them.

use crate::record::{Record, TimestampType};
use std::time::Duration;

/// What a source does with a record whose create timestamp is out of the allowed range.
///
/// Deserialized from its job-file name (`drop`, `clamp`, `fail`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvalidTimestampPolicy {
    /// Drop the record and count it.
    Drop,
    /// Replace the timestamp with the ingestion time (type `ingestion`) and count it.
    Clamp,
    /// Fail the job, naming the record.
    #[default]
    Fail,
}

impl std::str::FromStr for InvalidTimestampPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop" => Ok(Self::Drop),
            "clamp" => Ok(Self::Clamp),
            "fail" => Ok(Self::Fail),
            _ => Err(format!(
                "unknown invalid_timestamp policy \"{s}\": expected one of drop, clamp, fail"
            )),
        }
    }
}

/// The allowed range of create timestamps around the ingestion time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimestampCheck {
    /// How far in the past a timestamp may be; unbounded when `None`.
    pub before_max: Option<Duration>,
    /// How far in the future a timestamp may be; unbounded when `None`.
    pub after_max: Option<Duration>,
    /// What to do with a record outside the range.
    pub on_invalid: InvalidTimestampPolicy,
}

impl TimestampCheck {
    /// The valid create timestamps at `now_nanos`, both ends included.
    fn range(&self, now_nanos: i64) -> (i64, i64) {
        let low = self
            .before_max
            .map(|d| now_nanos.saturating_sub(duration_nanos(d)))
            .unwrap_or(i64::MIN);
        let high = self
            .after_max
            .map(|d| now_nanos.saturating_add(duration_nanos(d)))
            .unwrap_or(i64::MAX);
        (low, high)
    }

    /// Applies the check to a batch in place: drops or clamps invalid records and returns how
    /// many were invalid, or fails on the first one with `Fail`.
    pub fn apply(
        &self,
        records: &mut Vec<Record>,
        now_nanos: i64,
    ) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        let (low, high) = self.range(now_nanos);
        let invalid = |r: &Record| {
            r.timestamp_type != TimestampType::Ingestion
                && (r.timestamp < low || r.timestamp > high)
        };
        if low == i64::MIN && high == i64::MAX {
            return Ok(0);
        }
        let mut count = 0u64;
        match self.on_invalid {
            InvalidTimestampPolicy::Fail => {
                if let Some(r) = records.iter().find(|r| invalid(r)) {
                    let (what, limit) = if r.timestamp < low {
                        ("before", "timestamp_before_max")
                    } else {
                        ("after", "timestamp_after_max")
                    };
                    return Err(format!(
                        "record with key {} has timestamp {} ms, {} ms {what} the ingestion time, beyond {limit} (invalid_timestamp: fail)",
                        r.key(),
                        r.timestamp / 1_000_000,
                        (r.timestamp - now_nanos).abs() / 1_000_000
                    )
                    .into());
                }
            }
            InvalidTimestampPolicy::Drop => {
                let before = records.len();
                records.retain(|r| !invalid(r));
                count = (before - records.len()) as u64;
            }
            InvalidTimestampPolicy::Clamp => {
                for r in records.iter_mut() {
                    if invalid(r) {
                        r.timestamp = now_nanos;
                        r.timestamp_type = TimestampType::Ingestion;
                        count += 1;
                    }
                }
            }
        }
        Ok(count)
    }
}

/// How a source makes watermarks: the highest timestamp seen minus the allowed
/// out-of-orderness, emitted every `interval`; after `idleness` without records the source is
/// marked idle so it does not hold back the watermark downstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatermarkStrategy {
    /// How late (in event time) a record may be and still be on time.
    pub max_out_of_orderness: Duration,
    /// How often watermarks are emitted (Flink's `autoWatermarkInterval`, 200 ms).
    pub interval: Duration,
    /// After this long without records the source is idle; `None` never.
    pub idleness: Option<Duration>,
}

impl Default for WatermarkStrategy {
    fn default() -> Self {
        WatermarkStrategy {
            max_out_of_orderness: Duration::ZERO,
            interval: Duration::from_millis(200),
            idleness: None,
        }
    }
}

/// Event-time options of a source vertex.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceOptions {
    /// Timestamp range check; none by default.
    pub timestamp_check: Option<TimestampCheck>,
    /// Watermarks; none by default.
    pub watermarks: Option<WatermarkStrategy>,
}

/// Identifies one split of a [`SplitWatermarks`] tracker, from [`SplitWatermarks::add_split`]
/// until [`SplitWatermarks::remove_split`]; not to be used after its removal (the slot is
/// reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SplitId(u32);

/// The watermark state of one split.
#[derive(Clone, Copy, Debug)]
struct Split {
    live: bool,
    /// The highest record timestamp seen.
    max_timestamp: i64,
    /// The highest watermark given directly ([`SplitWatermarks::advance`]).
    watermark: i64,
    /// Input arrived since the runtime last looked.
    active: bool,
    /// When the runtime last saw input on it (or first looked at it); `i64::MIN` before.
    last_input_at: i64,
    /// No input for the idle timeout: it holds nothing back.
    idle: bool,
    /// Said to be idle ([`SplitWatermarks::set_idle`]) and no input since.
    declared_idle: bool,
    /// Its reader knows of input not read yet ([`SplitWatermarks::set_behind`]): it is not
    /// caught up, so it cannot be idle.
    behind: bool,
}

impl Split {
    const NEW: Split = Split {
        live: true,
        max_timestamp: i64::MIN,
        watermark: i64::MIN,
        active: false,
        last_input_at: i64::MIN,
        idle: false,
        declared_idle: false,
        behind: false,
    };

    /// The split's own watermark: what it was given, or its highest timestamp minus the
    /// out-of-orderness minus 1 ns, whichever is higher; `i64::MIN` when it has neither.
    fn current(&self, out_of_orderness: i64) -> i64 {
        let from_records = if self.max_timestamp == i64::MIN {
            i64::MIN
        } else {
            self.max_timestamp
                .saturating_sub(out_of_orderness)
                .saturating_sub(1)
        };
        from_records.max(self.watermark)
    }
}

/// Watermarks per split, for a source that reads several independent inputs at once: Kafka
/// partitions, exchange partitions (as Flink's per-split watermarks and Kafka Streams' stream
/// time).
///
/// The source owns one tracker, adds a split when it is given one (a partition assigned) and
/// removes it when it loses it (revoked), and notes the timestamp of every record it emits with
/// the record's split ([`SplitWatermarks::observe`]: a comparison and two stores, no
/// allocation, lock, clock read or hashing). It hands the tracker to the runtime through
/// [`Source::split_watermarks`](crate::Source::split_watermarks). The runtime applies the
/// source's [`WatermarkStrategy`] every `interval`:
///
/// - each split's watermark is its highest timestamp minus `max_out_of_orderness` minus 1 ns;
/// - a split is idle when its reader has read everything there is (it is not
///   [behind](SplitWatermarks::set_behind)) and had no input for `idleness`; an idle split holds
///   nothing back until it has input again. A split merely slow to be read never goes idle;
/// - the subtask's watermark is the minimum over its splits that are not idle, and it never
///   goes back (a split that comes back behind holds it where it is until it catches up);
/// - a subtask whose splits are all idle, or that has no split at all, is idle: its markers
///   keep flowing, its watermark holds nothing back downstream; but one whose splits are still
///   to come ([`SplitWatermarks::await_splits`]) holds everything back until it has some or is
///   told none are coming;
/// - a split that has not had a record yet holds the watermark back (until it is idle).
///
/// Watermarks are made only when the source vertex has a [`WatermarkStrategy`]; without one
/// the tracker costs its comparisons and nothing else.
///
/// ```
/// use tidemark_runtime::event_time::SplitWatermarks;
///
/// let mut splits = SplitWatermarks::new();
/// let p0 = splits.add_split();
/// let p1 = splits.add_split();
/// splits.observe(p0, 5_000);
/// splits.observe(p1, 2_000);
/// assert_eq!(splits.watermark(p0, 0), Some(4_999));
/// assert_eq!(splits.len(), 2);
/// splits.remove_split(p1);
/// assert_eq!(splits.len(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct SplitWatermarks {
    splits: Vec<Split>,
    live: usize,
    /// The source's timestamp check for the coming poll ([`TimestampCheck`]): timestamps
    /// outside `valid` are dropped by the runtime (not observed) or clamped to `clamp_to`.
    valid: (i64, i64),
    clamp_to: Option<i64>,
    /// The strategy's out-of-orderness (ns), once the runtime has looked.
    out_of_orderness: Option<i64>,
    /// Each split's name, if the source gave one ([`SplitWatermarks::name_split`]).
    names: Vec<Option<std::sync::Arc<str>>>,
    /// The split holding the watermark back at the runtime's last look.
    holder: Option<usize>,
    /// The holder last given by [`SplitWatermarks::holder_changed`].
    told_holder: Option<Option<usize>>,
    /// The subtask's watermark as last sent downstream (`i64::MIN` before the first).
    emitted: i64,
    /// Splits are still to come ([`SplitWatermarks::await_splits`]): without any, the subtask
    /// holds everything back rather than being idle.
    awaiting: bool,
}

/// What one split's watermark is, as the runtime last looked ([`SplitWatermarks::status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitStatus {
    /// The split's own watermark (ns).
    pub watermark: i64,
    /// The split is idle: it holds nothing back.
    pub idle: bool,
}

/// What one split holds back, as the runtime last looked ([`SplitWatermarks::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitState {
    /// Idle: it holds nothing back.
    Idle,
    /// Active but without a watermark yet (no record read): it holds everything back.
    Pending,
    /// Its watermark (ns).
    At(i64),
}

impl Default for SplitWatermarks {
    fn default() -> Self {
        SplitWatermarks {
            splits: Vec::new(),
            live: 0,
            valid: (i64::MIN, i64::MAX),
            clamp_to: None,
            out_of_orderness: None,
            names: Vec::new(),
            holder: None,
            told_holder: None,
            emitted: i64::MIN,
            awaiting: false,
        }
    }
}

impl SplitWatermarks {
    /// A tracker with no split.
    pub fn new() -> Self {
        SplitWatermarks::default()
    }

    /// The runtime checks the timestamps of what the coming poll emits with `check` at `now`,
    /// after the source observed them: a timestamp the check drops (or fails on) must not move
    /// a split's watermark, and one it clamps counts as `now`.
    pub(crate) fn check_timestamps(&mut self, check: &TimestampCheck, now: i64) {
        self.valid = check.range(now);
        self.clamp_to = (check.on_invalid == InvalidTimestampPolicy::Clamp).then_some(now);
    }

    /// Adds a split: it holds the watermark back until it has a record (or is idle).
    pub fn add_split(&mut self) -> SplitId {
        self.live += 1;
        if let Some(i) = self.splits.iter().position(|s| !s.live) {
            self.splits[i] = Split::NEW;
            self.names[i] = None;
            return SplitId(i as u32);
        }
        self.splits.push(Split::NEW);
        self.names.push(None);
        SplitId(self.splits.len() as u32 - 1)
    }

    /// Names `split` (a Kafka partition as `<topic>/<partition>`): the name
    /// `tidemark_watermark_holder_info` gives it when it holds the subtask's watermark back.
    pub fn name_split(&mut self, split: SplitId, name: &str) {
        if let Some(n) = self.names.get_mut(split.0 as usize) {
            *n = Some(std::sync::Arc::from(name));
        }
    }

    /// The name given to `split`, if any.
    pub fn name(&self, split: SplitId) -> Option<&str> {
        self.names.get(split.0 as usize)?.as_deref()
    }

    /// The name of the split holding the watermark back at the runtime's last look (the lowest
    /// among those not idle; one without a record yet is lowest), if it changed since the last
    /// call; `Some(None)` when nothing is held back or the holder has no name.
    pub(crate) fn holder_changed(&mut self) -> Option<Option<std::sync::Arc<str>>> {
        if self.told_holder == Some(self.holder) {
            return None;
        }
        self.told_holder = Some(self.holder);
        Some(
            self.holder
                .and_then(|i| self.names.get(i).cloned().flatten()),
        )
    }

    /// Removes a split: it no longer counts (a partition revoked in a rebalance).
    pub fn remove_split(&mut self, split: SplitId) {
        if let Some(s) = self.splits.get_mut(split.0 as usize) {
            if s.live {
                s.live = false;
                self.live -= 1;
            }
        }
    }

    /// A record with `timestamp` (ns) was read from `split`.
    #[inline]
    pub fn observe(&mut self, split: SplitId, timestamp: i64) {
        if let Some(s) = self.splits.get_mut(split.0 as usize) {
            s.active = true;
            let timestamp = if timestamp < self.valid.0 || timestamp > self.valid.1 {
                match self.clamp_to {
                    Some(now) => now,
                    None => return,
                }
            } else {
                timestamp
            };
            if timestamp > s.max_timestamp {
                s.max_timestamp = timestamp;
            }
        }
    }

    /// `split` carries watermarks of its own (an exchange partition whose writers send theirs):
    /// its watermark is at least `watermark` from now on. Counts as input for idleness.
    #[inline]
    pub fn advance(&mut self, split: SplitId, watermark: i64) {
        if let Some(s) = self.splits.get_mut(split.0 as usize) {
            if watermark > s.watermark {
                s.watermark = watermark;
            }
            s.active = true;
        }
    }

    /// `split` says it is idle (an exchange partition whose writers are all idle): it holds
    /// nothing back until it has input again ([`SplitWatermarks::observe`] or
    /// [`SplitWatermarks::advance`]), whatever the idle timeout.
    pub fn set_idle(&mut self, split: SplitId) {
        if let Some(s) = self.splits.get_mut(split.0 as usize) {
            s.declared_idle = true;
            s.active = false;
        }
    }

    /// Whether `split`'s reader knows of input it has not read yet (a Kafka partition's lag
    /// above 0, messages still queued). A split that is behind is not caught up: it is never
    /// idle, whatever the idle timeout or [`SplitWatermarks::set_idle`] said, and its quiet time
    /// starts again. Idle means caught up (`docs/event-time.md`, "Idleness").
    pub fn set_behind(&mut self, split: SplitId, behind: bool) {
        if let Some(s) = self.splits.get_mut(split.0 as usize) {
            s.behind = behind;
        }
    }

    /// The subtask's watermark as the runtime last sent it downstream (`i64::MIN` before the
    /// first): a split whose own watermark is below it is *behind* (it joined after the
    /// subtask's event time had passed it; [`crate::state_move`]).
    pub fn emitted(&self) -> i64 {
        self.emitted
    }

    /// How many splits there are.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when there is no split: the subtask is idle (unless it
    /// [awaits its splits](SplitWatermarks::await_splits)).
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Says whether the subtask's splits are still to come (a Kafka source before its consumer
    /// group's first assignment). While they are and it has none, the subtask holds the
    /// watermark back instead of being idle: a subtask with no split yet knows nothing of what
    /// it will read, and letting event time pass would make its first records late. Once it is
    /// told they have come (the assignment was made, perhaps empty), a subtask without splits
    /// is idle again.
    pub fn await_splits(&mut self, awaiting: bool) {
        self.awaiting = awaiting;
    }

    /// The watermark of `split` alone with the given out-of-orderness (ns), if it has one.
    pub fn watermark(&self, split: SplitId, out_of_orderness: i64) -> Option<i64> {
        self.splits
            .get(split.0 as usize)
            .filter(|s| s.live)
            .map(|s| s.current(out_of_orderness))
            .filter(|&w| w != i64::MIN)
    }

    /// The watermark of `split` and whether it is idle, as the runtime last looked (under the
    /// source's watermark settings); `None` before it has a watermark, or when the source makes
    /// no watermarks.
    pub fn status(&self, split: SplitId) -> Option<SplitStatus> {
        let out_of_orderness = self.out_of_orderness?;
        let s = self.splits.get(split.0 as usize).filter(|s| s.live)?;
        let watermark = s.current(out_of_orderness);
        (watermark != i64::MIN).then_some(SplitStatus {
            watermark,
            idle: s.idle,
        })
    }

    /// What `split` holds back, as the runtime last looked: `None` for a split that is not
    /// there, or before the runtime has looked (a source that makes no watermarks).
    pub fn state(&self, split: SplitId) -> Option<SplitState> {
        let out_of_orderness = self.out_of_orderness?;
        let s = self.splits.get(split.0 as usize).filter(|s| s.live)?;
        Some(if s.idle {
            SplitState::Idle
        } else {
            match s.current(out_of_orderness) {
                i64::MIN => SplitState::Pending,
                watermark => SplitState::At(watermark),
            }
        })
    }

    /// Looks at every split at `now` (once per watermark interval): notes input and idleness,
    /// and gives the minimum over the splits that are not idle.
    fn combined(&mut self, now: i64, strategy: &WatermarkStrategy) -> Candidate {
        let out_of_orderness = duration_nanos(strategy.max_out_of_orderness);
        self.out_of_orderness = Some(out_of_orderness);
        let idleness = strategy.idleness.map(duration_nanos);
        let mut min = i64::MAX;
        let mut any = false;
        let mut holder = None;
        for (i, s) in self.splits.iter_mut().enumerate().filter(|(_, s)| s.live) {
            if s.active {
                s.last_input_at = now;
                s.active = false;
                s.idle = false;
                s.declared_idle = false;
            } else if s.behind {
                // Not caught up: never idle, and quiet only from when it is.
                s.last_input_at = now;
                s.idle = false;
            } else {
                if s.last_input_at == i64::MIN {
                    s.last_input_at = now;
                }
                s.idle = s.declared_idle
                    || idleness.is_some_and(|i| now.saturating_sub(s.last_input_at) >= i);
            }
            if !s.idle {
                let current = s.current(out_of_orderness);
                if !any || current < min {
                    holder = Some(i);
                }
                any = true;
                min = min.min(current);
            }
        }
        self.holder = holder;
        match (any, min) {
            (false, _) if self.awaiting && self.live == 0 => Candidate::Pending,
            (false, _) => Candidate::Idle,
            (true, i64::MIN) => Candidate::Pending,
            (true, wm) => Candidate::At(wm),
        }
    }
}

fn duration_nanos(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

/// What the inputs of a source subtask say at one look.
#[derive(Debug, PartialEq, Eq)]
enum Candidate {
    /// Everything is idle (or there is nothing): hold nothing back.
    Idle,
    /// Something is active but has no watermark yet.
    Pending,
    /// The watermark the inputs allow.
    At(i64),
}

/// The watermark state of one source subtask: the strategy, and what was sent downstream.
#[derive(Debug)]
pub(crate) struct WatermarkGenerator {
    strategy: WatermarkStrategy,
    max_timestamp: i64,
    last_emitted: i64,
    next_emit: i64,
    /// Since when every poll found nothing to read (`i64::MIN`: the last poll had input).
    caught_up_since: i64,
    idle: bool,
    /// A look was due at the last [`WatermarkGenerator::poll`] or
    /// [`WatermarkGenerator::poll_splits`].
    looked: bool,
}

/// What the generator wants sent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WatermarkAction {
    None,
    Emit(i64),
    GoIdle,
}

impl WatermarkGenerator {
    pub(crate) fn new(strategy: WatermarkStrategy) -> Self {
        WatermarkGenerator {
            strategy,
            max_timestamp: i64::MIN,
            last_emitted: i64::MIN,
            next_emit: i64::MIN,
            caught_up_since: i64::MIN,
            idle: false,
            looked: false,
        }
    }

    /// The greatest timestamp seen (kept in a checkpoint).
    pub(crate) fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// Continues from a checkpoint: the greatest timestamp seen before it.
    pub(crate) fn restore_max_timestamp(&mut self, max_timestamp: i64) {
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
    }

    /// Notes the timestamps of a batch the source emitted (a source without splits).
    pub(crate) fn observe(&mut self, records: &[Record]) {
        if records.is_empty() {
            return;
        }
        let max = records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(i64::MIN);
        self.max_timestamp = self.max_timestamp.max(max);
        self.caught_up_since = i64::MIN;
    }

    /// The source's poll at `now` found nothing to read: it has read everything there is. A
    /// source without splits is idle once every poll for `idleness` found nothing (idle means
    /// caught up: a source that is slow to be polled, its thread starved, never goes idle).
    pub(crate) fn caught_up(&mut self, now: i64) {
        if self.caught_up_since == i64::MIN {
            self.caught_up_since = now;
        }
    }

    /// Whether the last poll looked at the inputs (a watermark interval had passed), whatever
    /// it decided: the source's idle claims are renewed at every look.
    pub(crate) fn looked(&self) -> bool {
        self.looked
    }

    /// True when a watermark is due at `now`; then the next is due an interval later.
    fn due(&mut self, now: i64) -> bool {
        self.looked = now >= self.next_emit;
        if now < self.next_emit {
            return false;
        }
        self.next_emit = now.saturating_add(duration_nanos(self.strategy.interval));
        true
    }

    /// Called once per loop iteration, for a source without splits: the whole subtask is one
    /// input.
    pub(crate) fn poll(&mut self, now: i64) -> WatermarkAction {
        if !self.due(now) {
            return WatermarkAction::None;
        }
        let candidate = self.whole(now);
        self.decide(candidate)
    }

    /// Called once per loop iteration, for a source that tracks its splits.
    pub(crate) fn poll_splits(
        &mut self,
        splits: &mut SplitWatermarks,
        now: i64,
    ) -> WatermarkAction {
        if !self.due(now) {
            return WatermarkAction::None;
        }
        let candidate = splits.combined(now, &self.strategy);
        let action = self.decide(candidate);
        if let WatermarkAction::Emit(wm) = action {
            splits.emitted = wm;
        }
        action
    }

    /// The whole subtask as one input: its highest timestamp, idle after `idleness` of polls
    /// that found nothing to read.
    fn whole(&mut self, now: i64) -> Candidate {
        if let Some(idleness) = self.strategy.idleness {
            if self.caught_up_since != i64::MIN
                && now.saturating_sub(self.caught_up_since) >= duration_nanos(idleness)
            {
                return Candidate::Idle;
            }
        }
        if self.max_timestamp == i64::MIN {
            return Candidate::Pending;
        }
        Candidate::At(
            self.max_timestamp
                .saturating_sub(duration_nanos(self.strategy.max_out_of_orderness))
                .saturating_sub(1),
        )
    }

    /// What to send: idleness said once; a watermark when it advanced, or to say the subtask
    /// is active again (never lower than the last one sent).
    fn decide(&mut self, candidate: Candidate) -> WatermarkAction {
        match candidate {
            Candidate::Idle if self.idle => WatermarkAction::None,
            Candidate::Idle => {
                self.idle = true;
                WatermarkAction::GoIdle
            }
            // Back from idle with nothing to say yet: active again at the last watermark, so
            // downstream waits for this subtask's new input (a partition just assigned).
            Candidate::Pending if self.idle => {
                self.idle = false;
                WatermarkAction::Emit(self.last_emitted)
            }
            Candidate::Pending => WatermarkAction::None,
            Candidate::At(wm) if wm > self.last_emitted || self.idle => {
                self.idle = false;
                self.last_emitted = self.last_emitted.max(wm);
                WatermarkAction::Emit(self.last_emitted)
            }
            Candidate::At(_) => WatermarkAction::None,
        }
    }
}

/// The watermark of a vertex subtask with several input channels: the minimum over the
/// channels that are neither idle nor ended.
#[derive(Debug)]
pub(crate) struct InputWatermarks {
    per_slot: Vec<i64>,
    idle: Vec<bool>,
    current: i64,
    /// The holder last given by [`InputWatermarks::holder_changed`].
    told_holder: Option<Option<usize>>,
}

impl InputWatermarks {
    pub(crate) fn new(slots: usize) -> Self {
        InputWatermarks {
            per_slot: vec![i64::MIN; slots],
            idle: vec![false; slots],
            current: i64::MIN,
            told_holder: None,
        }
    }

    /// The slot holding the watermark back now: the one with the lowest watermark among those
    /// neither idle nor ended (one that never sent a watermark is at the lowest); the first of
    /// them on a tie. `None` when every slot is idle or ended.
    pub(crate) fn holder(&self) -> Option<usize> {
        let mut holder: Option<usize> = None;
        for (slot, (&wm, &idle)) in self.per_slot.iter().zip(&self.idle).enumerate() {
            if idle || wm == i64::MAX {
                continue;
            }
            if holder.is_none_or(|h| wm < self.per_slot[h]) {
                holder = Some(slot);
            }
        }
        holder
    }

    /// The holder, if it changed since the last call (the first call always gives it).
    pub(crate) fn holder_changed(&mut self) -> Option<Option<usize>> {
        let holder = self.holder();
        (self.told_holder != Some(holder)).then(|| {
            self.told_holder = Some(holder);
            holder
        })
    }

    /// A watermark from `slot`; returns the new combined watermark if it advanced.
    pub(crate) fn on_watermark(&mut self, slot: usize, wm: i64) -> Option<i64> {
        self.per_slot[slot] = self.per_slot[slot].max(wm);
        self.idle[slot] = false;
        self.advance()
    }

    /// `slot` went idle; returns the new combined watermark if it advanced.
    pub(crate) fn on_idle(&mut self, slot: usize) -> Option<i64> {
        self.idle[slot] = true;
        self.advance()
    }

    /// `slot` ended: it no longer holds anything back.
    pub(crate) fn on_end(&mut self, slot: usize) -> Option<i64> {
        self.per_slot[slot] = i64::MAX;
        self.idle[slot] = false;
        self.advance()
    }

    /// The watermark of the slots `in_input` is true of: the smallest among those neither idle
    /// nor ended, `i64::MAX` when there is none.
    pub(crate) fn of_slots(&self, in_input: impl Fn(usize) -> bool) -> i64 {
        self.per_slot
            .iter()
            .zip(&self.idle)
            .enumerate()
            .filter(|(slot, (_, &idle))| in_input(*slot) && !idle)
            .map(|(_, (&w, _))| w)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// True when every input that has not ended is idle.
    pub(crate) fn all_idle(&self) -> bool {
        let mut any = false;
        for (i, &idle) in self.idle.iter().enumerate() {
            if self.per_slot[i] != i64::MAX {
                any = true;
                if !idle {
                    return false;
                }
            }
        }
        any
    }

    fn advance(&mut self) -> Option<i64> {
        let min = self
            .per_slot
            .iter()
            .zip(&self.idle)
            .filter(|(_, &idle)| !idle)
            .map(|(&w, _)| w)
            .min()?;
        if min > self.current && min != i64::MAX {
            self.current = min;
            Some(min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: i64) -> Record {
        Record::new(1, 0.0, ts)
    }

    #[test]
    fn watermark_is_max_timestamp_minus_out_of_orderness_minus_one() {
        let mut g = WatermarkGenerator::new(WatermarkStrategy {
            max_out_of_orderness: Duration::from_nanos(100),
            interval: Duration::from_nanos(10),
            idleness: None,
        });
        assert_eq!(g.poll(0), WatermarkAction::None, "nothing seen yet");
        g.observe(&[rec(1_000), rec(900), rec(1_200)]);
        assert_eq!(g.poll(10), WatermarkAction::Emit(1_099));
        g.observe(&[rec(1_100)]);
        assert_eq!(g.poll(15), WatermarkAction::None, "before the interval");
        assert_eq!(
            g.poll(20),
            WatermarkAction::None,
            "no advance, nothing sent"
        );
        g.observe(&[rec(1_500)]);
        assert_eq!(g.poll(30), WatermarkAction::Emit(1_399));
    }

    /// Watermarks every 10 ns, idle after 50 ns, no out-of-orderness.
    fn idling() -> WatermarkGenerator {
        WatermarkGenerator::new(WatermarkStrategy {
            max_out_of_orderness: Duration::ZERO,
            interval: Duration::from_nanos(10),
            idleness: Some(Duration::from_nanos(50)),
        })
    }

    #[test]
    fn a_quiet_source_goes_idle_and_comes_back() {
        let mut g = idling();
        g.observe(&[rec(100)]);
        assert_eq!(g.poll(0), WatermarkAction::Emit(99));
        // From 5 on, every poll finds nothing to read.
        g.caught_up(5);
        assert_eq!(g.poll(40), WatermarkAction::None);
        g.caught_up(45);
        assert_eq!(g.poll(50), WatermarkAction::None, "caught up for 45 only");
        assert_eq!(g.poll(60), WatermarkAction::GoIdle);
        assert_eq!(g.poll(70), WatermarkAction::None, "idle is said once");
        g.observe(&[rec(90)]);
        assert_eq!(g.poll(80), WatermarkAction::Emit(99), "active again");
        // Quiet again only from the next poll that finds nothing.
        assert_eq!(g.poll(130), WatermarkAction::None);
        g.caught_up(131);
        assert_eq!(g.poll(180), WatermarkAction::None, "caught up for 49 only");
        assert_eq!(g.poll(190), WatermarkAction::GoIdle);
    }

    #[test]
    fn a_source_that_is_not_caught_up_never_goes_idle() {
        // A source whose polls keep finding input, or whose thread does not get to poll (a
        // starved thread): however long since its last record, it holds event time where it
        // is.
        let mut g = idling();
        g.observe(&[rec(100)]);
        assert_eq!(g.poll(0), WatermarkAction::Emit(99));
        for now in [60, 1_000, 1_000_000] {
            assert_eq!(g.poll(now), WatermarkAction::None, "at {now}");
            assert!(g.looked());
        }
        assert_eq!(g.poll(1_000_001), WatermarkAction::None);
        assert!(!g.looked(), "no look before the interval");
        // A source that never had a record and finds nothing goes idle after `idleness`.
        let mut fresh = idling();
        fresh.caught_up(0);
        assert_eq!(fresh.poll(40), WatermarkAction::None);
        assert_eq!(fresh.poll(50), WatermarkAction::GoIdle);
    }

    #[test]
    fn a_split_behind_its_input_never_goes_idle() {
        let mut g = WatermarkGenerator::new(split_strategy(Some(50)));
        let mut s = SplitWatermarks::new();
        let quiet = s.add_split();
        let behind = s.add_split();
        s.observe(quiet, 1_000);
        s.observe(behind, 500);
        assert_eq!(g.poll_splits(&mut s, 0), WatermarkAction::Emit(489));
        // Neither reads anything more; one of them knows of input it has not read (a starved
        // thread, a slow reader): it holds the watermark however long it takes.
        s.set_behind(behind, true);
        assert_eq!(g.poll_splits(&mut s, 100), WatermarkAction::None);
        assert_eq!(g.poll_splits(&mut s, 10_000), WatermarkAction::None);
        assert_eq!(s.state(quiet), Some(SplitState::Idle));
        assert_eq!(s.state(behind), Some(SplitState::At(489)));
        // Even said idle by its writers, a split behind is not idle.
        s.set_idle(behind);
        assert_eq!(g.poll_splits(&mut s, 10_001), WatermarkAction::None);
        assert_eq!(s.state(behind), Some(SplitState::At(489)));
        // Caught up: quiet from now on, idle after `idleness` (or at once, as said).
        s.set_behind(behind, false);
        assert_eq!(g.poll_splits(&mut s, 10_002), WatermarkAction::GoIdle);
        s.observe(behind, 2_000);
        s.set_behind(behind, false);
        assert_eq!(g.poll_splits(&mut s, 10_003), WatermarkAction::Emit(1_989));
        assert_eq!(g.poll_splits(&mut s, 10_040), WatermarkAction::None);
        assert_eq!(g.poll_splits(&mut s, 10_053), WatermarkAction::GoIdle);
    }

    fn split_strategy(idleness: Option<i64>) -> WatermarkStrategy {
        WatermarkStrategy {
            max_out_of_orderness: Duration::from_nanos(10),
            interval: Duration::ZERO,
            idleness: idleness.map(|n| Duration::from_nanos(n as u64)),
        }
    }

    #[test]
    fn per_split_the_watermark_is_the_minimum_over_splits_and_never_goes_back() {
        let mut g = WatermarkGenerator::new(split_strategy(None));
        let mut s = SplitWatermarks::new();
        let fast = s.add_split();
        let slow = s.add_split();
        s.observe(fast, 1_000);
        assert_eq!(
            g.poll_splits(&mut s, 0),
            WatermarkAction::None,
            "the slow split has no record yet: it holds the watermark back"
        );
        s.observe(slow, 200);
        s.observe(slow, 100);
        assert_eq!(g.poll_splits(&mut s, 1), WatermarkAction::Emit(189));
        assert_eq!(s.watermark(fast, 10), Some(989));
        assert_eq!(s.watermark(slow, 10), Some(189));
        // The fast split racing ahead changes nothing; the slow one advancing does.
        s.observe(fast, 5_000);
        assert_eq!(g.poll_splits(&mut s, 2), WatermarkAction::None);
        s.observe(slow, 600);
        assert_eq!(g.poll_splits(&mut s, 3), WatermarkAction::Emit(589));
        // Timestamps going back in a split move nothing back.
        s.observe(slow, 300);
        assert_eq!(g.poll_splits(&mut s, 4), WatermarkAction::None);
        // The slow split revoked: it drops out, the fast one alone decides.
        s.remove_split(slow);
        assert_eq!(g.poll_splits(&mut s, 5), WatermarkAction::Emit(4_989));
        // A split added afterwards behind the watermark does not move it back.
        let again = s.add_split();
        assert_eq!(again, slow, "the freed slot is reused");
        s.observe(again, 50);
        assert_eq!(
            s.watermark(again, 10),
            Some(39),
            "a fresh split, not the old one"
        );
        assert_eq!(g.poll_splits(&mut s, 6), WatermarkAction::None);
        s.observe(again, 6_000);
        s.observe(fast, 7_000);
        assert_eq!(g.poll_splits(&mut s, 7), WatermarkAction::Emit(5_989));
    }

    #[test]
    fn an_idle_split_holds_nothing_back_and_rejoins_without_moving_the_watermark_back() {
        let mut g = WatermarkGenerator::new(split_strategy(Some(50)));
        let mut s = SplitWatermarks::new();
        let busy = s.add_split();
        let quiet = s.add_split();
        s.observe(busy, 1_000);
        s.observe(quiet, 100);
        assert_eq!(g.poll_splits(&mut s, 0), WatermarkAction::Emit(89));
        for t in [10, 20, 30, 40] {
            s.observe(busy, 1_000 + t);
            assert_eq!(g.poll_splits(&mut s, t), WatermarkAction::None, "at {t}");
        }
        // 50 ns without a record on `quiet`: it is idle, `busy` alone decides.
        s.observe(busy, 1_050);
        assert_eq!(g.poll_splits(&mut s, 50), WatermarkAction::Emit(1_039));
        s.observe(busy, 1_060);
        assert_eq!(g.poll_splits(&mut s, 60), WatermarkAction::Emit(1_049));
        // `quiet` comes back behind: it holds the watermark where it is until it catches up.
        s.observe(quiet, 500);
        s.observe(busy, 2_000);
        assert_eq!(g.poll_splits(&mut s, 70), WatermarkAction::None);
        s.observe(quiet, 1_500);
        s.observe(busy, 2_010);
        assert_eq!(g.poll_splits(&mut s, 80), WatermarkAction::Emit(1_489));
        // Both quiet: the subtask is idle, said once.
        assert_eq!(g.poll_splits(&mut s, 129), WatermarkAction::None);
        assert_eq!(g.poll_splits(&mut s, 130), WatermarkAction::GoIdle);
        assert_eq!(g.poll_splits(&mut s, 140), WatermarkAction::None);
        // A record on either: active again, never below what was sent.
        s.observe(busy, 1_200);
        assert_eq!(
            g.poll_splits(&mut s, 150),
            WatermarkAction::Emit(1_999),
            "busy alone"
        );
    }

    #[test]
    fn a_subtask_without_splits_is_idle_until_it_is_given_one() {
        // No idleness configured: having no split is idle all the same.
        let mut g = WatermarkGenerator::new(split_strategy(None));
        let mut s = SplitWatermarks::new();
        assert!(s.is_empty());
        assert_eq!(g.poll_splits(&mut s, 0), WatermarkAction::GoIdle);
        assert_eq!(g.poll_splits(&mut s, 1), WatermarkAction::None);
        // Given a split with nothing in it yet: active again, so downstream waits for it.
        let p = s.add_split();
        assert_eq!(
            g.poll_splits(&mut s, 2),
            WatermarkAction::Emit(i64::MIN),
            "active again, with no watermark yet"
        );
        assert_eq!(g.poll_splits(&mut s, 3), WatermarkAction::None);
        s.observe(p, 100);
        assert_eq!(g.poll_splits(&mut s, 4), WatermarkAction::Emit(89));
        // Losing its last split makes it idle again.
        s.remove_split(p);
        assert_eq!(s.len(), 0);
        assert_eq!(g.poll_splits(&mut s, 5), WatermarkAction::GoIdle);
        // Given one again: active at the last watermark sent.
        s.add_split();
        assert_eq!(g.poll_splits(&mut s, 6), WatermarkAction::Emit(89));
    }

    #[test]
    fn a_subtask_awaiting_its_splits_holds_the_watermark_back_until_told_none_are_coming() {
        let mut g = WatermarkGenerator::new(split_strategy(Some(10)));
        let mut s = SplitWatermarks::new();
        s.await_splits(true);
        // No split yet, however long: not idle, so downstream waits for what it will read.
        for now in [0, 100, 1_000] {
            assert_eq!(g.poll_splits(&mut s, now), WatermarkAction::None);
        }
        // Its splits came: as any subtask with splits.
        let p = s.add_split();
        s.observe(p, 100);
        assert_eq!(g.poll_splits(&mut s, 1_001), WatermarkAction::Emit(89));
        // Told the assignment was made (without splits for it, say): no split is idle again.
        s.remove_split(p);
        s.await_splits(false);
        assert_eq!(g.poll_splits(&mut s, 1_002), WatermarkAction::GoIdle);
        // Awaiting alone does not hold back a subtask whose splits are all idle.
        let mut s = SplitWatermarks::new();
        let mut g = WatermarkGenerator::new(split_strategy(Some(10)));
        s.await_splits(true);
        let q = s.add_split();
        s.observe(q, 100);
        assert_eq!(g.poll_splits(&mut s, 0), WatermarkAction::Emit(89));
        assert_eq!(g.poll_splits(&mut s, 20), WatermarkAction::GoIdle);
    }

    #[test]
    fn splits_can_carry_watermarks_of_their_own() {
        let mut g = WatermarkGenerator::new(WatermarkStrategy {
            interval: Duration::from_nanos(10),
            ..split_strategy(Some(100))
        });
        let mut s = SplitWatermarks::new();
        let a = s.add_split();
        let b = s.add_split();
        assert_eq!(s.status(a), None, "the runtime has not looked yet");
        s.advance(a, 500);
        s.advance(b, 300);
        s.advance(b, 200);
        assert_eq!(g.poll_splits(&mut s, 0), WatermarkAction::Emit(300));
        // Records beyond the given watermark count too (minus the out-of-orderness).
        s.observe(b, 800);
        assert_eq!(
            g.poll_splits(&mut s, 5),
            WatermarkAction::None,
            "before the interval"
        );
        assert_eq!(g.poll_splits(&mut s, 10), WatermarkAction::Emit(500));
        assert_eq!(s.status(a).map(|s| s.idle), Some(false));
        assert_eq!(
            s.status(b),
            Some(SplitStatus {
                watermark: 800 - 11,
                idle: false
            })
        );
        // Watermarks keep a split active: `b` only gets watermarks, `a` nothing.
        for t in [50, 90] {
            s.advance(b, 900 + t);
            assert_eq!(g.poll_splits(&mut s, t), WatermarkAction::None, "at {t}");
        }
        s.advance(b, 1_100);
        assert_eq!(
            g.poll_splits(&mut s, 100),
            WatermarkAction::Emit(1_100),
            "a is idle"
        );
        assert_eq!(s.status(a).map(|s| s.idle), Some(true));
        // `a` comes back, then says it is idle: no timeout needed.
        s.advance(a, 1_200);
        assert_eq!(
            g.poll_splits(&mut s, 120),
            WatermarkAction::None,
            "b holds at 1_100"
        );
        s.set_idle(a);
        s.advance(b, 1_300);
        assert_eq!(g.poll_splits(&mut s, 130), WatermarkAction::Emit(1_300));
        s.set_idle(b);
        assert_eq!(g.poll_splits(&mut s, 140), WatermarkAction::GoIdle);
        s.advance(a, 1_400);
        assert_eq!(g.poll_splits(&mut s, 150), WatermarkAction::Emit(1_400));
        // Ids of splits never given are ignored.
        s.observe(SplitId(7), 9_999);
        s.advance(SplitId(7), 9_999);
        assert_eq!(s.watermark(SplitId(7), 0), None);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn timestamps_the_check_drops_or_clamps_do_not_move_a_split() {
        let now = 1_000_000;
        let check = |on_invalid| TimestampCheck {
            before_max: None,
            after_max: Some(Duration::from_nanos(100)),
            on_invalid,
        };
        for (policy, expected) in [
            (InvalidTimestampPolicy::Drop, 500 - 11),
            (InvalidTimestampPolicy::Fail, 500 - 11),
            (InvalidTimestampPolicy::Clamp, now - 11),
        ] {
            let mut s = SplitWatermarks::new();
            let p = s.add_split();
            s.check_timestamps(&check(policy), now);
            s.observe(p, 500);
            // A year ahead of the clock.
            s.observe(p, now + 365 * 86_400 * 1_000_000_000);
            assert_eq!(s.watermark(p, 10), Some(expected), "{policy:?}");
        }
    }

    #[test]
    fn combined_watermark_is_the_minimum_over_active_inputs() {
        let mut w = InputWatermarks::new(3);
        assert_eq!(w.on_watermark(0, 100), None, "slots 1 and 2 have none yet");
        assert_eq!(w.on_watermark(1, 50), None);
        assert_eq!(w.on_watermark(2, 70), Some(50));
        assert_eq!(w.on_watermark(1, 200), Some(70));
        // Slot 2 goes idle: it no longer holds the watermark back.
        assert_eq!(w.on_idle(2), Some(100));
        assert!(!w.all_idle());
        // It comes back behind: the combined watermark never goes back.
        assert_eq!(w.on_watermark(2, 80), None);
        assert_eq!(w.on_end(2), None);
        assert_eq!(w.on_watermark(0, 300), Some(200));
        assert_eq!(w.on_end(0), None);
        assert_eq!(w.on_end(1), None, "all ended: nothing left to advance");
    }

    #[test]
    fn the_split_holding_the_watermark_back_is_named() {
        let strategy = WatermarkStrategy {
            idleness: Some(Duration::from_secs(1)),
            ..WatermarkStrategy::default()
        };
        let mut s = SplitWatermarks::new();
        let p0 = s.add_split();
        let p1 = s.add_split();
        s.name_split(p0, "orders/0");
        s.name_split(p1, "orders/1");
        let sec = 1_000_000_000;
        // Nothing read from orders/1 yet: it holds the watermark back.
        s.observe(p0, 10 * sec);
        s.combined(0, &strategy);
        assert_eq!(s.holder_changed(), Some(Some("orders/1".into())));
        assert_eq!(s.holder_changed(), None, "told once");
        s.observe(p1, 20 * sec);
        s.observe(p0, 30 * sec);
        s.combined(sec / 2, &strategy);
        assert_eq!(
            s.holder_changed(),
            None,
            "orders/1, at 20 s, is still the lowest"
        );
        // orders/1 stops; orders/0 goes on: orders/1 (at 20 s) still holds it back.
        s.observe(p0, 40 * sec);
        s.combined(sec, &strategy);
        assert_eq!(s.holder_changed(), None, "still orders/1");
        // orders/1 quiet for the idle timeout: idle, it holds nothing back.
        s.observe(p0, 50 * sec);
        s.combined(2 * sec, &strategy);
        assert_eq!(s.holder_changed(), Some(Some("orders/0".into())));
        // Removed, then a new split in its slot: its name is not inherited.
        s.remove_split(p1);
        let p2 = s.add_split();
        s.combined(3 * sec, &strategy);
        assert_eq!(s.holder_changed(), Some(None), "the new split has no name");
        s.name_split(p2, "orders/2");
        s.observe(p2, 60 * sec);
        s.observe(p0, 55 * sec);
        s.combined(4 * sec, &strategy);
        assert_eq!(s.holder_changed(), Some(Some("orders/0".into())));
    }

    #[test]
    fn the_holder_is_the_lowest_input_that_is_neither_idle_nor_ended() {
        let mut w = InputWatermarks::new(3);
        // None has sent a watermark: each holds it back; the first is named.
        assert_eq!(w.holder_changed(), Some(Some(0)));
        assert_eq!(w.holder_changed(), None, "told once");
        w.on_watermark(0, 100);
        // Slot 1 never sent one: it holds the watermark back.
        assert_eq!(w.holder_changed(), Some(Some(1)));
        w.on_watermark(1, 50);
        w.on_watermark(2, 70);
        assert_eq!(w.holder(), Some(1));
        // Slot 1 stops while the others go on: it still holds it back.
        w.on_watermark(0, 500);
        w.on_watermark(2, 600);
        assert_eq!(w.holder_changed(), None, "still slot 1");
        // Idle, it holds nothing back: the lowest of the others does.
        w.on_idle(1);
        assert_eq!(w.holder_changed(), Some(Some(0)));
        w.on_end(0);
        assert_eq!(w.holder(), Some(2));
        w.on_end(2);
        assert_eq!(
            w.holder_changed(),
            Some(None),
            "idle or ended: nothing held"
        );
    }

    #[test]
    fn timestamp_check_drops_clamps_or_fails() {
        let now = 1_000_000_000_000;
        let sec = 1_000_000_000;
        let check = |on_invalid| TimestampCheck {
            before_max: Some(Duration::from_secs(10)),
            after_max: Some(Duration::from_secs(1)),
            on_invalid,
        };
        let batch = || {
            vec![
                rec(now - 11 * sec),
                rec(now - 5 * sec),
                rec(now + 2 * sec),
                rec(now),
            ]
        };
        let mut b = batch();
        assert_eq!(
            check(InvalidTimestampPolicy::Drop)
                .apply(&mut b, now)
                .unwrap(),
            2
        );
        assert_eq!(
            b.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
            [now - 5 * sec, now]
        );
        let mut b = batch();
        assert_eq!(
            check(InvalidTimestampPolicy::Clamp)
                .apply(&mut b, now)
                .unwrap(),
            2
        );
        assert_eq!(b[0].timestamp, now);
        assert_eq!(b[0].timestamp_type, TimestampType::Ingestion);
        assert_eq!(b[1].timestamp, now - 5 * sec);
        let err = check(InvalidTimestampPolicy::Fail)
            .apply(&mut batch(), now)
            .unwrap_err();
        assert!(err.to_string().contains("11000 ms before"), "{err}");
        assert!(err.to_string().contains("timestamp_before_max"), "{err}");
        // Ingestion timestamps are never checked.
        let mut ingested = rec(0);
        ingested.timestamp_type = TimestampType::Ingestion;
        let mut b = vec![ingested];
        assert_eq!(
            check(InvalidTimestampPolicy::Drop)
                .apply(&mut b, now)
                .unwrap(),
            0
        );
        assert_eq!(b.len(), 1);
    }
}
