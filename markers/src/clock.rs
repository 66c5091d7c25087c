//! Wall clocks: the system clock, and a manual clock for tests.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A wall clock giving nanoseconds since the Unix epoch.
///
/// Sources stamp markers and operators measure latency with the same kind of clock; inject a
/// [`ManualClock`] to make time deterministic in tests.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in nanoseconds since the Unix epoch.
    fn now_nanos(&self) -> i64;
}

/// The operating system's wall clock ([`SystemTime`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// Nanoseconds since the Unix epoch; negative before it, saturating at the `i64` limits
    /// (years 1677 and 2262).
    fn now_nanos(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_nanos())
                .map(|n| -n)
                .unwrap_or(i64::MIN),
        }
    }
}

/// A clock that only moves when told to; shareable between threads.
///
/// ```
/// use tidemark_markers::{Clock, ManualClock};
///
/// let clock = ManualClock::new(100);
/// clock.advance(5);
/// assert_eq!(clock.now_nanos(), 105);
/// clock.set(0);
/// assert_eq!(clock.now_nanos(), 0);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicI64,
}

impl ManualClock {
    /// Creates a clock showing `start` nanoseconds since the Unix epoch.
    pub fn new(start: i64) -> Self {
        Self {
            nanos: AtomicI64::new(start),
        }
    }

    /// Sets the time to `nanos`; the clock may go backwards.
    pub fn set(&self, nanos: i64) {
        self.nanos.store(nanos, Ordering::SeqCst);
    }

    /// Moves the time by `nanos` (backwards if negative).
    pub fn advance(&self, nanos: i64) {
        self.nanos.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> i64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn system_clock_is_after_2020() {
        // 2020-01-01T00:00:00Z in nanoseconds.
        assert!(SystemClock.now_nanos() > 1_577_836_800_000_000_000);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::default();
        assert_eq!(clock.now_nanos(), 0);
        clock.advance(10);
        clock.advance(-3);
        assert_eq!(clock.now_nanos(), 7);
        clock.set(1_000);
        assert_eq!(clock.now_nanos(), 1_000);
    }

    #[test]
    fn manual_clock_is_shared_across_threads() {
        let clock = Arc::new(ManualClock::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let clock = Arc::clone(&clock);
                std::thread::spawn(move || (0..1_000).for_each(|_| clock.advance(1)))
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        let as_dyn: Arc<dyn Clock> = clock;
        assert_eq!(as_dyn.now_nanos(), 4_000);
    }
}
