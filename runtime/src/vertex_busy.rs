//! Per-vertex busy time inside a task, measured by sampling.
//!
//! A task runs a chain of vertices on one thread, so the task's busy time cannot say which
//! vertex is slow. Reading the clock around every vertex for every batch would cost two clock
//! reads per vertex per batch; instead the task times one turn of its loop (one batch) now and
//! then, and shares out its own busy time by what it saw:
//!
//! - a turn is timed when [`SAMPLE_INTERVAL_NANOS`] have passed since the last timed one (on the
//!   clock the task reads for the batch anyway), or after [`MAX_UNTIMED_TURNS`] turns, whichever
//!   comes first: sampled by time, so that under load every vertex's count moves several times
//!   a second however long its batches take;
//! - in a timed turn the clock is read around each vertex's calls (a source's poll, an
//!   operator's processing and timers, a sink's writes), and around the turn as a whole, in the
//!   task's busy time (what it spent neither idle nor blocked on a full output);
//! - when the timed turn ends, the task's busy time since the previous share-out is shared out:
//!   each vertex gets the part its calls took of the timed turn, the rest is the runtime's own
//!   (routing, channels, metrics). So the vertices never add up to more than the task, and a
//!   stall (the thread preempted) inside a timed turn moves one share-out, about a millisecond of
//!   busy time, instead of being multiplied by the turns the sample stands for;
//! - rare calls outside timed turns (watermarks, barriers, the end of input) are timed every
//!   time and counted as they are, not shared out again.
//!
//! Untimed turns cost one comparison; a timed turn two clock reads per vertex call and two more
//! for the turn.

use std::time::Instant;

/// At most this long between timed turns of a task under load: 1 ms.
pub(crate) const SAMPLE_INTERVAL_NANOS: i64 = 1_000_000;

/// At most this many turns between timed turns, whatever the clock says (a clock that stands
/// still in a test, a burst of tiny batches).
pub(crate) const MAX_UNTIMED_TURNS: u64 = 1024;

/// Decides which turns of a task's loop are timed, and shares out the task's busy time.
#[derive(Debug)]
pub(crate) struct BusySampler {
    next_at: i64,
    turns: u64,
    timed_turn: u64,
    /// Whether the current turn is timed.
    timing: bool,
    /// The task's busy time (ns) when the current timed turn began.
    turn_began: Option<u64>,
    /// The task's busy time (ns) shared out so far.
    shared_to: u64,
    /// Time of calls timed outside timed turns since the last share-out (ns): counted as it
    /// is, so left out of the next share-out.
    counted_apart: u64,
}

impl BusySampler {
    pub(crate) fn new() -> Self {
        BusySampler {
            next_at: i64::MIN,
            turns: 0,
            timed_turn: 0,
            timing: false,
            turn_began: None,
            shared_to: 0,
            counted_apart: 0,
        }
    }

    /// A new turn begins at `now_nanos` (the clock the task read for the batch); returns
    /// whether it is timed.
    #[inline]
    fn turn(&mut self, now_nanos: i64) -> bool {
        self.turns += 1;
        let since = self.turns - self.timed_turn;
        self.timing = now_nanos >= self.next_at || since >= MAX_UNTIMED_TURNS;
        if self.timing {
            self.timed_turn = self.turns;
            self.next_at = now_nanos.saturating_add(SAMPLE_INTERVAL_NANOS);
        }
        self.timing
    }

    /// The start of a call timed in this turn, `None` in an untimed turn.
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        self.timing.then(Instant::now)
    }

    /// Whether the current turn is timed.
    #[inline]
    pub(crate) fn timing(&self) -> bool {
        self.timing
    }

    /// A new turn begins at `now_nanos`: closes the timed turn before it, if any, sharing out
    /// the task's busy time among `vertices`, and opens this one if it is timed. `task_busy`
    /// (the task's busy time so far, ns: a clock read) is called only around timed turns.
    #[inline]
    pub(crate) fn begin_turn<'a>(
        &mut self,
        now_nanos: i64,
        task_busy: impl FnOnce() -> u64,
        vertices: impl Iterator<Item = &'a mut VertexBusy>,
    ) {
        let closing = self.turn_began.is_some();
        let timed = self.turn(now_nanos);
        if closing || timed {
            let busy = task_busy();
            if closing {
                self.close_turn(busy, vertices);
            }
            if timed {
                self.turn_began = Some(busy);
            }
        }
    }

    /// The timed turn ended with the task's busy time at `busy`: shares out what the task was
    /// busy since the last share-out by each vertex's part of the timed turn.
    fn close_turn<'a>(&mut self, busy: u64, vertices: impl Iterator<Item = &'a mut VertexBusy>) {
        let Some(began) = self.turn_began.take() else {
            return;
        };
        let turn = busy.saturating_sub(began);
        let to_share = busy
            .saturating_sub(self.shared_to)
            .saturating_sub(self.counted_apart);
        if turn == 0 {
            // The task was not busy in the turn: share out at the next one. (No allocation here:
            // this runs once per timed turn.)
            for v in vertices {
                v.in_turn = 0;
            }
            return;
        }
        for v in vertices {
            // The calls lie inside the turn (a share above 1 only from the clock's granularity).
            v.last_share = (v.in_turn as f64 / turn as f64).min(1.0);
            v.nanos += to_share as f64 * v.last_share;
            v.in_turn = 0;
        }
        self.shared_to = busy;
        self.counted_apart = 0;
    }

    /// A rare call outside a timed turn took `since.elapsed()`: counted for `vertex` as it is.
    #[inline]
    pub(crate) fn count_apart(&mut self, vertex: &mut VertexBusy, since: Instant) {
        let took = since.elapsed().as_nanos() as u64;
        vertex.nanos += took as f64;
        self.counted_apart += took;
    }

    /// The task ends with its busy time at `busy`: closes a timed turn still open. Then
    /// [`BusySampler::share_rest`].
    pub(crate) fn finish_turn<'a>(
        &mut self,
        busy: u64,
        vertices: impl Iterator<Item = &'a mut VertexBusy>,
    ) {
        if self.turn_began.is_some() {
            self.close_turn(busy, vertices);
        }
    }

    /// At the task's end, with its busy time at `busy`: shares out what is left by the last
    /// shares.
    pub(crate) fn share_rest<'a>(
        &mut self,
        busy: u64,
        vertices: impl Iterator<Item = &'a mut VertexBusy>,
    ) {
        let rest = busy
            .saturating_sub(self.shared_to)
            .saturating_sub(self.counted_apart) as f64;
        for v in vertices {
            v.nanos += rest * v.last_share;
        }
        self.shared_to = busy;
        self.counted_apart = 0;
    }
}

/// The estimated busy time of one vertex subtask.
#[derive(Debug, Default)]
pub(crate) struct VertexBusy {
    /// Estimated time so far, in ns.
    nanos: f64,
    /// Time its calls took in the current timed turn, in ns.
    in_turn: u64,
    /// Its part of the last timed turn (0 to 1).
    last_share: f64,
}

impl VertexBusy {
    /// A call of this vertex in a timed turn took `since.elapsed()`.
    #[inline]
    pub(crate) fn timed(&mut self, since: Instant) {
        self.in_turn += since.elapsed().as_nanos() as u64;
    }

    /// This vertex took `nanos` more in the timed turn.
    #[inline]
    pub(crate) fn add_in_turn(&mut self, nanos: u64) {
        self.in_turn += nanos;
    }

    /// The estimate so far, in whole ns.
    pub(crate) fn nanos(&self) -> u64 {
        self.nanos as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn turns_are_timed_once_per_interval() {
        let mut s = BusySampler::new();
        assert!(s.turn(0), "the first turn is timed");
        // Nine turns within the interval: untimed.
        for i in 1..10 {
            assert!(!s.turn(i * SAMPLE_INTERVAL_NANOS / 10), "turn {i}");
            assert!(s.start().is_none());
        }
        // The interval has passed: timed.
        assert!(s.turn(SAMPLE_INTERVAL_NANOS));
        assert!(s.start().is_some());
        // Turns slower than the interval: every one is timed.
        assert!(s.turn(3 * SAMPLE_INTERVAL_NANOS));
    }

    #[test]
    fn a_clock_that_stands_still_still_gets_timed_turns() {
        let mut s = BusySampler::new();
        s.turn(5);
        let timed = (0..10 * MAX_UNTIMED_TURNS).filter(|_| s.turn(5)).count();
        assert_eq!(timed, 10);
    }

    /// Drives the sampler by hand: `turns` of (task busy at the turn's start, time of each
    /// vertex's calls if the turn is timed).
    fn share(turns: &[(i64, u64, [u64; 2])], end_busy: u64) -> [u64; 2] {
        let mut s = BusySampler::new();
        let mut v = [VertexBusy::default(), VertexBusy::default()];
        for &(now, busy, calls) in turns {
            s.begin_turn(now, || busy, v.iter_mut());
            if s.timing() {
                v[0].in_turn = calls[0];
                v[1].in_turn = calls[1];
            }
        }
        s.finish_turn(end_busy, v.iter_mut());
        s.share_rest(end_busy, v.iter_mut());
        [v[0].nanos(), v[1].nanos()]
    }

    #[test]
    fn the_task_busy_time_is_shared_out_by_the_timed_turns() {
        // Timed turns at 0 and 1 ms: in the first, vertex 0 took 600 of the turn's 1,000 ns and
        // vertex 1 took 300 (the runtime the rest); in the second 200 and 700 of 1,000.
        let turns = [
            (0, 0, [600, 300]),
            (MS / 2, 1_000, [0, 0]),
            (MS, 500_000, [200, 700]),
            (3 * MS / 2, 501_000, [0, 0]),
        ];
        // Each timed turn's parts share out the busy time since the share-out before it: the
        // first turn's (60 %, 30 %) busy 0..1,000, the second's (20 %, 70 %) busy
        // 1,000..501,000 (the untimed stretch before it and itself), and at the end the rest,
        // 501,000..601,000, by the last parts.
        assert_eq!(
            share(&turns, 601_000),
            [
                600 + 100_000 + 20_000, // 1,000 × 0.6 + 500,000 × 0.2 + 100,000 × 0.2
                300 + 350_000 + 70_000  // 1,000 × 0.3 + 500,000 × 0.7 + 100,000 × 0.7
            ]
        );
    }

    #[test]
    fn a_stall_in_a_timed_turn_moves_one_share_out_not_more() {
        // Vertex 0 is preempted for 5 ms inside a timed turn: that turn gives it all of what was
        // busy since the share-out before (1 ms), not 5 ms times the turns the sample stands for.
        let turns = [
            (0, 0, [500, 500]),
            (MS / 10, 1_000, [0, 0]),
            (MS, 1_000_000, [5_000_000, 500]),
            (7 * MS, 6_001_000, [500, 500]),
            (7 * MS + 1, 6_002_000, [0, 0]),
        ];
        let [a, b] = share(&turns, 6_002_000);
        // Whatever the shares, the vertices never add up to more than the task.
        assert!(a + b <= 6_002_000, "{a} + {b}");
        // Vertex 0 gets the stall, and at most the one share-out it fell in besides (the
        // millisecond before it, which it really shared with vertex 1).
        assert!(a >= 5_000_000, "{a}");
        assert!(a <= 5_000_000 + 1_001_000, "{a}");
    }

    #[test]
    fn calls_timed_apart_are_counted_once() {
        let mut s = BusySampler::new();
        let mut v = [VertexBusy::default()];
        s.begin_turn(0, || 0, v.iter_mut());
        v[0].in_turn = 1_000;
        s.begin_turn(1, || 1_000, v.iter_mut());
        // Untimed turn: a watermark call counted apart.
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        s.count_apart(&mut v[0], t);
        let apart = v[0].nanos();
        assert!(apart >= 2_000_000 + 1_000, "{apart}");
        // The task's busy time includes the call; it is not shared out a second time.
        let busy = 1_000 + (apart - 1_000);
        s.finish_turn(busy, v.iter_mut());
        s.share_rest(busy, v.iter_mut());
        assert_eq!(v[0].nanos(), apart);
    }
}
