//! Pacing: the fixed schedule a subtask with `rate` makes its records on.

/// The fixed schedule of a paced subtask.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    /// Nanoseconds between two records of this subtask.
    pub(super) period_nanos: f64,
    /// The first poll's wall clock.
    pub(super) start: Option<i64>,
}

impl Pace {
    /// Records due by `now`: record `n` is due at `start + n * period`.
    pub(super) fn due(&self, start: i64, now: i64) -> u64 {
        let elapsed = now.saturating_sub(start).max(0) as f64;
        ((elapsed / self.period_nanos).floor() as u64).saturating_add(1)
    }

    /// When record `n` is due, rounded up to the nanosecond.
    pub(super) fn due_at(&self, start: i64, n: u64) -> i64 {
        start.saturating_add((n as f64 * self.period_nanos).ceil() as i64)
    }
}
