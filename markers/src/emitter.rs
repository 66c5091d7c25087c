//! When a source subtask emits a marker: first at start, then with a fixed delay (rules 2-4).

use std::time::Duration;

use crate::marker::LatencyMarker;

/// Decides when one source subtask emits latency markers, and stamps them.
///
/// The first [`poll`](Self::poll) emits at once; afterwards a poll emits iff at least `interval`
/// has passed since the previous emission. The next marker is due `interval` after the time of
/// the previous *emission* (fixed delay), so after a stall exactly one marker is emitted, not a
/// burst catching up the missed ones. An interval of 0 disables markers: nothing is ever emitted.
///
/// The emitter holds no clock; the source passes the current time, which keeps it deterministic
/// to test. Calling `poll` while the source is idle and not calling it once the source has
/// finished implements rule 4.
///
/// ```
/// use std::time::Duration;
/// use tidemark_markers::MarkerEmitter;
///
/// let mut emitter = MarkerEmitter::new(Duration::from_nanos(10), 0, 0);
/// assert!(emitter.poll(0).is_some()); // first poll emits at once
/// assert!(emitter.poll(9).is_none());
/// assert_eq!(emitter.poll(55).unwrap().marked_time, 55); // after a stall: one marker
/// assert_eq!(emitter.next_due(), Some(65));
/// ```
#[derive(Clone, Debug)]
pub struct MarkerEmitter {
    interval_nanos: i64,
    source_id: u32,
    source_subtask: u32,
    last_emission: Option<i64>,
    emitted: u64,
}

impl MarkerEmitter {
    /// Creates an emitter for subtask `source_subtask` of source vertex `source_id`.
    ///
    /// An `interval` longer than `i64::MAX` nanoseconds (292 years) is treated as that.
    pub fn new(interval: Duration, source_id: u32, source_subtask: u32) -> Self {
        Self {
            interval_nanos: i64::try_from(interval.as_nanos()).unwrap_or(i64::MAX),
            source_id,
            source_subtask,
            last_emission: None,
            emitted: 0,
        }
    }

    /// Whether markers are enabled, i.e. the interval is greater than 0.
    pub fn is_enabled(&self) -> bool {
        self.interval_nanos > 0
    }

    /// The marker to emit at `now_nanos`, if one is due; it is stamped `now_nanos`.
    ///
    /// Never emits when the interval is 0.
    pub fn poll(&mut self, now_nanos: i64) -> Option<LatencyMarker> {
        let due = self.next_due()?;
        if now_nanos < due {
            return None;
        }
        self.last_emission = Some(now_nanos);
        self.emitted += 1;
        Some(LatencyMarker::new(
            now_nanos,
            self.source_id,
            self.source_subtask,
        ))
    }

    /// When the next marker is due, in nanoseconds since the Unix epoch: the previous emission
    /// time plus the interval.
    ///
    /// `None` when markers are disabled. Before the first emission the marker is due at once,
    /// which is reported as `Some(i64::MIN)`; compare with `now >= due` or use saturating
    /// arithmetic.
    pub fn next_due(&self) -> Option<i64> {
        if !self.is_enabled() {
            return None;
        }
        Some(match self.last_emission {
            None => i64::MIN,
            Some(last) => last.saturating_add(self.interval_nanos),
        })
    }

    /// Number of markers emitted so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// The interval between emissions.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_nanos.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    /// Steps a manual clock from 0 to 100 by 1 and polls at every step.
    fn stamps_over_0_to_100(interval: Duration) -> (Vec<i64>, MarkerEmitter) {
        let clock = ManualClock::new(0);
        let mut emitter = MarkerEmitter::new(interval, 7, 2);
        let mut stamps = Vec::new();
        for step in 0..=100 {
            assert_eq!(clock.now_nanos(), step);
            if let Some(marker) = emitter.poll(clock.now_nanos()) {
                assert_eq!((marker.source_id, marker.source_subtask), (7, 2));
                stamps.push(marker.marked_time);
            }
            clock.advance(1);
        }
        (stamps, emitter)
    }

    /// Worked case: interval 10 over 0..=100 gives exactly the 11 markers 0, 10, ..., 100.
    #[test]
    fn worked_case_interval_10_emits_11_markers() {
        let (stamps, emitter) = stamps_over_0_to_100(Duration::from_nanos(10));
        assert_eq!(stamps, (0..=100).step_by(10).collect::<Vec<i64>>());
        assert_eq!(stamps.len(), 11);
        assert_eq!(emitter.emitted(), 11);
        assert_eq!(emitter.next_due(), Some(110));
    }

    /// Worked case: interval 0 emits nothing.
    #[test]
    fn worked_case_interval_0_emits_none() {
        let (stamps, emitter) = stamps_over_0_to_100(Duration::ZERO);
        assert!(stamps.is_empty());
        assert_eq!(emitter.emitted(), 0);
        assert!(!emitter.is_enabled());
        assert_eq!(emitter.next_due(), None);
    }

    #[test]
    fn stall_emits_one_marker_and_restarts_the_delay() {
        let mut emitter = MarkerEmitter::new(Duration::from_nanos(10), 0, 0);
        assert_eq!(emitter.poll(0).map(|m| m.marked_time), Some(0));
        assert_eq!(emitter.next_due(), Some(10));
        // Stall: the clock jumps from 0 to 55. Markers 10..50 are not caught up.
        assert_eq!(emitter.poll(55).map(|m| m.marked_time), Some(55));
        assert_eq!(emitter.poll(55), None);
        assert_eq!(emitter.next_due(), Some(65));
        for now in 56..65 {
            assert_eq!(emitter.poll(now), None, "no marker at {now}");
        }
        assert_eq!(emitter.poll(65).map(|m| m.marked_time), Some(65));
        assert_eq!(emitter.emitted(), 3);
    }

    #[test]
    fn first_poll_emits_whatever_the_time() {
        let mut emitter = MarkerEmitter::new(Duration::from_millis(200), 1, 0);
        assert!(emitter.is_enabled());
        assert_eq!(emitter.next_due(), Some(i64::MIN));
        let start = 1_700_000_000_000_000_000;
        assert_eq!(emitter.poll(start), Some(LatencyMarker::new(start, 1, 0)));
        assert_eq!(emitter.next_due(), Some(start + 200_000_000));
        assert_eq!(emitter.interval(), Duration::from_millis(200));
    }

    #[test]
    fn huge_interval_saturates() {
        let mut emitter = MarkerEmitter::new(Duration::MAX, 0, 0);
        assert!(emitter.poll(5).is_some());
        assert_eq!(emitter.next_due(), Some(i64::MAX));
        assert!(emitter.poll(i64::MAX - 1).is_none());
    }
}
