//! Components shared by the runtime's integration tests.
#![allow(dead_code)]

use std::sync::mpsc;
use std::time::{Duration, Instant};
use tidemark_runtime::{
    BoxError, JobHandle, JobResult, Output, PollContext, Record, Source, SourceStatus,
};

/// Emits `batches` batches of `per_batch` records with key `key_of(i)`, pausing `gap` between
/// batches so that time passes and markers are emitted while the job runs.
pub struct PacedSource {
    pub batches: u64,
    pub per_batch: u64,
    pub gap: Duration,
    pub key_of: fn(u64) -> u64,
    sent: u64,
    next_at: i64,
}

impl PacedSource {
    pub fn new(batches: u64, per_batch: u64, gap: Duration, key_of: fn(u64) -> u64) -> Self {
        PacedSource {
            batches,
            per_batch,
            gap,
            key_of,
            sent: 0,
            next_at: i64::MIN,
        }
    }
}

impl Source for PacedSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.sent == self.batches {
            return Ok(SourceStatus::Finished);
        }
        if ctx.now_nanos < self.next_at {
            return Ok(SourceStatus::Idle {
                until: Some(self.next_at),
            });
        }
        for i in 0..self.per_batch {
            let n = self.sent * self.per_batch + i;
            out.emit(Record::new((self.key_of)(n), n as f64, ctx.now_nanos));
        }
        self.sent += 1;
        self.next_at = ctx.now_nanos + self.gap.as_nanos() as i64;
        Ok(SourceStatus::Ready)
    }
}

/// The longest a test waits for anything before it fails: it only turns a hang into a failure
/// (no test measures time against it).
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Polls `done` until it holds, failing the test, naming `what` it waited for, if it does not
/// hold within [`DEADLINE`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < DEADLINE,
            "gave up after {DEADLINE:?} waiting for {what}: a hang"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for the job, failing the test instead of hanging if it does not end in `limit`.
pub fn wait_or_fail(handle: JobHandle, limit: Duration) -> JobResult {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.wait());
    });
    rx.recv_timeout(limit).expect("the job did not end: a hang")
}
