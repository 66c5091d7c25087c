//! `JobConfig::channel_capacity`: a channel holds that many batches, and its sender blocks
//! (backpressure) on the next one.

mod common;

use common::wait_or_fail;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tidemark_runtime::config::DEFAULT_CHANNEL_CAPACITY;
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, Output, Partitioning, PollContext, Record, Sink, Source,
    SourceStatus,
};

/// Emits one record per poll, for ever, counting its polls; notes when it is dropped (its task
/// ended).
struct CountingPolls {
    polls: Arc<AtomicU64>,
    dropped: Arc<AtomicBool>,
}

impl Source for CountingPolls {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let n = self.polls.fetch_add(1, Ordering::SeqCst);
        out.emit(Record::new(n, 1.0, ctx.now_nanos));
        Ok(SourceStatus::Ready)
    }
}

impl Drop for CountingPolls {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Holds the first record it is given until the test releases it, so nothing more is taken
/// from its channel.
struct HoldingSink {
    release: Arc<Mutex<mpsc::Receiver<()>>>,
    held: bool,
}

impl Sink for HoldingSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        if !self.held {
            self.held = true;
            let _ = self.release.lock().unwrap().recv();
        }
        Ok(())
    }
}

/// Waits for `done`, failing the test instead of hanging (no timing threshold: the limit only
/// guards against a hang).
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "waited a minute for {what}: a hang"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs source → sink (not chained, one-record batches) with the sink holding its first record,
/// and returns how many polls the source made before its output blocked.
fn polls_before_backpressure(capacity: Option<usize>) -> u64 {
    let polls = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let (release_tx, release_rx) = mpsc::channel();
    let release = Arc::new(Mutex::new(release_rx));
    let mut g = JobGraph::new("capacity");
    let (p, d) = (polls.clone(), dropped.clone());
    let s = g
        .add_source("s", 1, move |_| {
            Ok(Box::new(CountingPolls {
                polls: p.clone(),
                dropped: d.clone(),
            }))
        })
        .unwrap();
    let k = g
        .add_sink("k", 1, move |_| {
            Ok(Box::new(HoldingSink {
                release: release.clone(),
                held: false,
            }))
        })
        .unwrap();
    g.connect(s, k, Partitioning::Rebalance).unwrap();
    let mut config = JobConfig {
        batch_size: 1,
        chaining: false,
        ..JobConfig::default()
    };
    // Markers off (the default latency config): only records travel on the channel.
    assert!(config.latency.interval.is_zero());
    if let Some(c) = capacity {
        config.channel_capacity = c;
    }
    let expected = config.channel_capacity as u64 + 2;
    let handle = start(g, config).unwrap();
    // One record is in the sink's hands, `capacity` wait in the channel, and the output of poll
    // `capacity + 2` is being sent: the source cannot be polled again until the sink takes one.
    wait_for("the source to fill the channel", || {
        polls.load(Ordering::SeqCst) >= expected
    });
    // The blocked send gives up on abort; only then may the sink take from the channel.
    handle.abort();
    wait_for("the source task to end", || dropped.load(Ordering::SeqCst));
    release_tx.send(()).unwrap();
    wait_or_fail(handle, Duration::from_secs(60));
    polls.load(Ordering::SeqCst)
}

#[test]
fn a_channel_holds_capacity_batches_before_its_sender_blocks() {
    for capacity in [1, 3, 32] {
        assert_eq!(
            polls_before_backpressure(Some(capacity)),
            capacity as u64 + 2,
            "capacity {capacity}: 1 batch in the sink, {capacity} in the channel, 1 blocked"
        );
    }
    assert_eq!(
        polls_before_backpressure(None),
        DEFAULT_CHANNEL_CAPACITY as u64 + 2
    );
}
