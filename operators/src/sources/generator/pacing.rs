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

/// How a subtask stamps its records with create timestamps on a schedule: record `n` of the
/// subtask at `start + offset + n · period` (ns), rounded up.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamps {
    pub(super) start: i64,
    pub(super) offset_nanos: f64,
    pub(super) period_nanos: f64,
}

impl Stamps {
    /// The paced schedule's own times: record `n` when it is due.
    pub(super) fn of_pace(pace: &Pace, start: i64) -> Stamps {
        Stamps {
            start,
            offset_nanos: 0.0,
            period_nanos: pace.period_nanos,
        }
    }

    /// Event time from `start_time`: subtask `i` of `p` stamps its record `n`, record
    /// `i + n · p` over all subtasks, `(i + n · p) / rate` seconds after `start`.
    pub(super) fn of_event_time(start: i64, rate: f64, subtask: u64, parallelism: u64) -> Stamps {
        Stamps {
            start,
            offset_nanos: 1e9 * subtask as f64 / rate,
            period_nanos: 1e9 * parallelism as f64 / rate,
        }
    }

    /// The timestamp of the subtask's record `n`.
    #[inline(always)]
    pub(super) fn at(&self, n: u64) -> i64 {
        self.start
            .saturating_add((self.offset_nanos + n as f64 * self.period_nanos).ceil() as i64)
    }
}
