//! Event time at the sources: timestamp range checks (Kafka KIP-937) and watermarks with
//! bounded out-of-orderness and idleness (as Flink's `WatermarkStrategy`).
//!
//! Both are options of a source vertex ([`SourceOptions`]) applied by the runtime to whatever
//! the source emits, so every source, built-in or user-written, gets them.

use crate::component::BoxError;
use crate::record::{Record, TimestampType};
use std::time::Duration;

/// What a source does with a record whose create timestamp is out of the allowed range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// Applies the check to a batch in place: drops or clamps invalid records and returns how
    /// many were invalid, or fails on the first one with `Fail`.
    pub fn apply(&self, records: &mut Vec<Record>, now_nanos: i64) -> Result<u64, BoxError> {
        let low = self
            .before_max
            .map(|d| now_nanos.saturating_sub(d.as_nanos().min(i64::MAX as u128) as i64))
            .unwrap_or(i64::MIN);
        let high = self
            .after_max
            .map(|d| now_nanos.saturating_add(d.as_nanos().min(i64::MAX as u128) as i64))
            .unwrap_or(i64::MAX);
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

/// The watermark state of one source subtask.
#[derive(Debug)]
pub(crate) struct WatermarkGenerator {
    strategy: WatermarkStrategy,
    max_timestamp: i64,
    last_emitted: i64,
    next_emit: i64,
    last_record_at: i64,
    idle: bool,
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
            last_record_at: i64::MIN,
            idle: false,
        }
    }

    /// Notes the timestamps of a batch the source emitted at `now`.
    pub(crate) fn observe(&mut self, records: &[Record], now: i64) {
        if records.is_empty() {
            return;
        }
        let max = records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(i64::MIN);
        self.max_timestamp = self.max_timestamp.max(max);
        self.last_record_at = now;
    }

    /// Called once per loop iteration.
    pub(crate) fn poll(&mut self, now: i64) -> WatermarkAction {
        if now < self.next_emit {
            return WatermarkAction::None;
        }
        self.next_emit = now.saturating_add(self.strategy.interval.as_nanos() as i64);
        if let Some(idleness) = self.strategy.idleness {
            let quiet_since = if self.last_record_at == i64::MIN {
                // Never had a record: idle after `idleness` from the first poll.
                self.last_record_at = now;
                now
            } else {
                self.last_record_at
            };
            if now.saturating_sub(quiet_since) >= idleness.as_nanos() as i64 {
                if !self.idle {
                    self.idle = true;
                    return WatermarkAction::GoIdle;
                }
                return WatermarkAction::None;
            }
        }
        if self.max_timestamp == i64::MIN {
            return WatermarkAction::None;
        }
        let wm = self
            .max_timestamp
            .saturating_sub(self.strategy.max_out_of_orderness.as_nanos() as i64)
            .saturating_sub(1);
        if wm > self.last_emitted || self.idle {
            self.idle = false;
            self.last_emitted = self.last_emitted.max(wm);
            return WatermarkAction::Emit(self.last_emitted);
        }
        WatermarkAction::None
    }
}

/// The watermark of a vertex subtask with several input channels: the minimum over the
/// channels that are neither idle nor ended.
#[derive(Debug)]
pub(crate) struct InputWatermarks {
    per_slot: Vec<i64>,
    idle: Vec<bool>,
    current: i64,
}

impl InputWatermarks {
    pub(crate) fn new(slots: usize) -> Self {
        InputWatermarks {
            per_slot: vec![i64::MIN; slots],
            idle: vec![false; slots],
            current: i64::MIN,
        }
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
        g.observe(&[rec(1_000), rec(900), rec(1_200)], 5);
        assert_eq!(g.poll(10), WatermarkAction::Emit(1_099));
        g.observe(&[rec(1_100)], 12);
        assert_eq!(g.poll(15), WatermarkAction::None, "before the interval");
        assert_eq!(
            g.poll(20),
            WatermarkAction::None,
            "no advance, nothing sent"
        );
        g.observe(&[rec(1_500)], 22);
        assert_eq!(g.poll(30), WatermarkAction::Emit(1_399));
    }

    #[test]
    fn a_quiet_source_goes_idle_and_comes_back() {
        let mut g = WatermarkGenerator::new(WatermarkStrategy {
            max_out_of_orderness: Duration::ZERO,
            interval: Duration::from_nanos(10),
            idleness: Some(Duration::from_nanos(50)),
        });
        g.observe(&[rec(100)], 0);
        assert_eq!(g.poll(0), WatermarkAction::Emit(99));
        assert_eq!(g.poll(40), WatermarkAction::None);
        assert_eq!(g.poll(50), WatermarkAction::GoIdle);
        assert_eq!(g.poll(60), WatermarkAction::None, "idle is said once");
        g.observe(&[rec(90)], 65);
        assert_eq!(g.poll(70), WatermarkAction::Emit(99), "active again");
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
