//! Per-vertex busy time inside a task, measured by sampling.
//!
//! A task runs a chain of vertices on one thread, so the task's busy time cannot say which
//! vertex is slow. Reading the clock around every vertex for every batch would cost two clock
//! reads per vertex per batch; instead the task times one batch (one turn of its loop) now and
//! then and scales what it measured up to the work done since the previous timed batch:
//!
//! - a turn is timed when [`SAMPLE_INTERVAL_NANOS`] have passed since the last timed one (on the
//!   clock the task reads for the batch anyway), or after [`MAX_UNTIMED_TURNS`] turns, whichever
//!   comes first: sampled by time, so that under load every vertex's count moves several times
//!   a second however long its batches take;
//! - a vertex's processing of records is scaled by records: the time it took for the timed
//!   batch, per record, times the records it received since its previous timed batch;
//! - calls made once per turn (a source's poll, operators' timers) are scaled by turns;
//! - rare calls (watermarks, barriers, end of input) are always timed.
//!
//! Untimed turns cost one comparison; a timed turn two clock reads per vertex call.

use std::time::Instant;

/// At most this long between timed turns of a task under load: 1 ms.
pub(crate) const SAMPLE_INTERVAL_NANOS: i64 = 1_000_000;

/// At most this many turns between timed turns, whatever the clock says (a clock that stands
/// still in a test, a burst of tiny batches).
pub(crate) const MAX_UNTIMED_TURNS: u64 = 1024;

/// Decides which turns of a task's loop are timed.
#[derive(Debug)]
pub(crate) struct BusySampler {
    next_at: i64,
    turns: u64,
    timed_turn: u64,
    /// Whether the current turn is timed.
    timing: bool,
    /// Turns the current timed turn stands for (itself and the untimed ones before it).
    turns_per_sample: u64,
}

impl BusySampler {
    pub(crate) fn new() -> Self {
        BusySampler {
            next_at: i64::MIN,
            turns: 0,
            timed_turn: 0,
            timing: false,
            turns_per_sample: 1,
        }
    }

    /// A new turn begins at `now_nanos` (the clock the task read for the batch).
    #[inline]
    pub(crate) fn turn(&mut self, now_nanos: i64) {
        self.turns += 1;
        let since = self.turns - self.timed_turn;
        self.timing = now_nanos >= self.next_at || since >= MAX_UNTIMED_TURNS;
        if self.timing {
            self.turns_per_sample = since;
            self.timed_turn = self.turns;
            self.next_at = now_nanos.saturating_add(SAMPLE_INTERVAL_NANOS);
        }
    }

    /// The start of a timed call, `None` in an untimed turn.
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        self.timing.then(Instant::now)
    }

    /// Turns the current timed turn stands for.
    pub(crate) fn turns_per_sample(&self) -> u64 {
        self.turns_per_sample
    }
}

/// The estimated busy time of one vertex subtask.
#[derive(Debug, Default)]
pub(crate) struct VertexBusy {
    /// Estimated time so far, in ns.
    nanos: f64,
    /// The vertex's records-in count at the end of its last timed batch.
    records_at_sample: u64,
    /// Time per record of the last timed batch, in ns, to account for records after it.
    last_per_record: f64,
}

impl VertexBusy {
    /// The vertex took `since.elapsed()` for a timed batch of `n` records, which brought its
    /// records-in count to `records_in`: count that time per record for every record received
    /// since its last timed batch.
    #[inline]
    pub(crate) fn records(&mut self, since: Instant, n: usize, records_in: u64) {
        let took = since.elapsed().as_nanos() as f64;
        let per_record = took / n.max(1) as f64;
        let records = records_in.saturating_sub(self.records_at_sample);
        self.nanos += per_record * records as f64;
        self.records_at_sample = records_in;
        self.last_per_record = per_record;
    }

    /// A call made once per turn took `since.elapsed()` in a timed turn standing for `turns`.
    #[inline]
    pub(crate) fn per_turn(&mut self, since: Instant, turns: u64) {
        self.nanos += since.elapsed().as_nanos() as f64 * turns as f64;
    }

    /// A rare call, timed every time.
    #[inline]
    pub(crate) fn always(&mut self, since: Instant) {
        self.nanos += since.elapsed().as_nanos() as f64;
    }

    /// The records received since the last timed batch, at the last measured cost per record
    /// (at the end of the task, so that the last untimed batches count too).
    pub(crate) fn settle(&mut self, records_in: u64) {
        let records = records_in.saturating_sub(self.records_at_sample);
        self.nanos += self.last_per_record * records as f64;
        self.records_at_sample = records_in;
    }

    /// The estimate so far, in whole ns.
    pub(crate) fn nanos(&self) -> u64 {
        self.nanos as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_timed_once_per_interval_and_stand_for_the_turns_between() {
        let mut s = BusySampler::new();
        s.turn(0);
        assert!(s.start().is_some(), "the first turn is timed");
        assert_eq!(s.turns_per_sample(), 1);
        // Nine turns within the interval: untimed.
        for i in 1..10 {
            s.turn(i * SAMPLE_INTERVAL_NANOS / 10);
            assert!(s.start().is_none(), "turn {i}");
        }
        // The interval has passed: timed, standing for itself and the nine before it.
        s.turn(SAMPLE_INTERVAL_NANOS);
        assert!(s.start().is_some());
        assert_eq!(s.turns_per_sample(), 10);
        // Turns slower than the interval: every one is timed.
        s.turn(3 * SAMPLE_INTERVAL_NANOS);
        assert!(s.start().is_some());
        assert_eq!(s.turns_per_sample(), 1);
    }

    #[test]
    fn a_clock_that_stands_still_still_gets_timed_turns() {
        let mut s = BusySampler::new();
        s.turn(5);
        let mut timed = 0;
        for _ in 0..10 * MAX_UNTIMED_TURNS {
            s.turn(5);
            if s.start().is_some() {
                timed += 1;
                assert_eq!(s.turns_per_sample(), MAX_UNTIMED_TURNS);
            }
        }
        assert_eq!(timed, 10);
    }

    #[test]
    fn a_timed_batch_counts_for_every_record_since_the_last() {
        let mut b = VertexBusy::default();
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        // 10 records timed; 90 untimed before them.
        b.records(t, 10, 100);
        let per_record = b.last_per_record;
        assert!(per_record >= 200_000.0, "{per_record}");
        assert_eq!(b.nanos(), (per_record * 100.0) as u64);
        // 50 more untimed records at the end are settled at the same cost.
        b.settle(150);
        assert_eq!(b.nanos(), (per_record * 150.0) as u64);
        b.settle(150);
        assert_eq!(b.nanos(), (per_record * 150.0) as u64, "settled once");
    }
}
