//! The live view's short memory: readings of the job's cumulative counters, from which the
//! snapshot ([`super::snapshot`]) computes ratios and rates over the last few seconds.

use std::collections::VecDeque;
use std::time::Instant;

/// The span ratios and rates are computed over.
pub const RATIO_SPAN: std::time::Duration = std::time::Duration::from_secs(5);
/// Readings older than this are dropped.
const KEEP: std::time::Duration = std::time::Duration::from_secs(15);
/// Readings closer together than this replace each other (many clients polling).
const MIN_GAP: std::time::Duration = std::time::Duration::from_millis(200);

/// Cumulative counters of every vertex subtask at one moment.
#[derive(Clone, Debug)]
pub(super) struct Reading {
    pub at: Instant,
    /// Per vertex, per subtask: records in, records out, busy, backpressured and idle seconds.
    pub vertices: Vec<Vec<SubtaskCounters>>,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SubtaskCounters {
    pub records_in: u64,
    pub records_out: u64,
    /// The vertex's own busy seconds (sampled; `tidemark_operator_busy_seconds_total`).
    pub own_busy: f64,
    pub busy: f64,
    pub backpressured: f64,
    pub idle: f64,
}

/// Recent readings, oldest first.
#[derive(Debug, Default)]
pub struct History {
    readings: VecDeque<Reading>,
}

impl History {
    /// Keeps `now` and returns the reading to compare it with, if any.
    pub(super) fn push(&mut self, now: Reading) -> Option<Reading> {
        while self
            .readings
            .front()
            .is_some_and(|r| now.at.duration_since(r.at) > KEEP)
        {
            self.readings.pop_front();
        }
        let base = self
            .readings
            .iter()
            .rev()
            .find(|r| now.at.duration_since(r.at) >= RATIO_SPAN)
            .or_else(|| self.readings.front())
            .cloned();
        if self
            .readings
            .back()
            .is_some_and(|r| now.at.duration_since(r.at) < MIN_GAP)
        {
            self.readings.pop_back();
        }
        self.readings.push_back(now);
        base
    }
}
