//! A source task and the channel task it feeds over a hash edge share one thread
//! (`runtime/src/worker.rs`): every record still arrives once, full queues do not deadlock the
//! two threads that send to each other, checkpoints complete, and failures name their vertex.

mod common;

use common::{wait_or_fail, DEADLINE};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, JobResult, Operator, Output, Partitioning,
    PollContext, Record, Sink, Source, SourceStatus,
};

/// Keys of the records (`n % KEYS`).
const KEYS: u64 = 37;

/// Subtask `s` of `p` emits the numbers `n < count` with `n % p == s`, as record (key `n %
/// KEYS`, value `n`), and notes the name of the thread it runs in.
struct Numbers {
    next: u64,
    step: u64,
    count: u64,
    never_waits: bool,
    threads: Arc<Mutex<HashMap<String, String>>>,
    vertex: String,
}

impl Source for Numbers {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        note_thread(&self.threads, &self.vertex);
        for _ in 0..ctx.max_records {
            if self.next >= self.count {
                return Ok(SourceStatus::Finished);
            }
            out.emit(Record::new(
                self.next % KEYS,
                self.next as f64,
                ctx.now_nanos,
            ));
            self.next += self.step;
        }
        Ok(SourceStatus::Ready)
    }

    fn polls_without_waiting(&self) -> bool {
        self.never_waits
    }
}

/// Records, under `vertex` (`id#subtask`), the name of the thread running it.
fn note_thread(threads: &Mutex<HashMap<String, String>>, vertex: &str) {
    let name = std::thread::current().name().unwrap_or("").to_string();
    threads
        .lock()
        .unwrap()
        .entry(vertex.to_string())
        .or_insert(name);
}

/// A running sum per key; emits (key, sum so far) for every record. Fails (an error, or a
/// panic) at its `fail_at`-th record.
struct RunningSum {
    sums: HashMap<u64, f64>,
    seen: u64,
    fail_at: Option<(u64, bool)>,
}

impl Operator for RunningSum {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.seen += 1;
        match self.fail_at {
            Some((n, true)) if n == self.seen => panic!("sum broke at record {n}"),
            Some((n, false)) if n == self.seen => return Err(format!("bad record {n}").into()),
            _ => {}
        }
        let key = record.int_key().ok_or("a record without a numeric key")? as u64;
        let sum = self.sums.entry(key).or_insert(0.0);
        *sum += record.numeric_value().ok_or("a record without a value")?;
        out.emit(Record::new(key, *sum, record.timestamp));
        Ok(())
    }
}

/// Keeps the last sum per key, counts the records per key, and notes its thread.
struct LastSums {
    got: Arc<Mutex<HashMap<u64, (u64, f64)>>>,
    threads: Arc<Mutex<HashMap<String, String>>>,
    vertex: String,
}

impl Sink for LastSums {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        note_thread(&self.threads, &self.vertex);
        let key = record.int_key().ok_or("a record without a numeric key")? as u64;
        let mut got = self.got.lock().unwrap();
        let entry = got.entry(key).or_insert((0, 0.0));
        entry.0 += 1;
        entry.1 = entry.1.max(record.numeric_value().unwrap_or(f64::NAN));
        Ok(())
    }
}

/// What a run gave: its result, per key (records, last sum), and each vertex subtask's thread.
struct Run {
    result: JobResult,
    sums: HashMap<u64, (u64, f64)>,
    threads: HashMap<String, String>,
}

/// Names of threads by vertex subtask (`id#subtask`).
type Threads = Arc<Mutex<HashMap<String, String>>>;

/// `numbers` (P=2) → hash → `sum` → `out` over `count` numbers, with `sink(i)` as subtask `i`
/// of `out`: `out` at P=2 chained to `sum` (W1's shape), or, with `sink_parallelism` 1, behind
/// a rebalance edge in a task of its own (W6's: the channel task sends on).
fn graph<F>(
    count: u64,
    never_waits: bool,
    fail_at: Option<(u64, bool)>,
    threads: &Threads,
    sink_parallelism: usize,
    sink: F,
) -> JobGraph
where
    F: Fn(usize) -> Box<dyn Sink> + Send + Sync + 'static,
{
    let mut g = JobGraph::new("shared");
    let t = threads.clone();
    let s = g
        .add_source("numbers", 2, move |ctx| {
            Ok(Box::new(Numbers {
                next: ctx.subtask as u64,
                step: ctx.parallelism as u64,
                count,
                never_waits,
                threads: t.clone(),
                vertex: format!("numbers#{}", ctx.subtask),
            }))
        })
        .unwrap();
    let sum = g
        .add_operator("sum", 2, move |ctx| {
            Ok(Box::new(RunningSum {
                sums: HashMap::new(),
                seen: 0,
                fail_at: fail_at.filter(|_| ctx.subtask == 1),
            }))
        })
        .unwrap();
    let out = g
        .add_sink("out", sink_parallelism, move |ctx| Ok(sink(ctx.subtask)))
        .unwrap();
    g.connect(s, sum, Partitioning::Hash).unwrap();
    let to_sink = match sink_parallelism {
        2 => Partitioning::Forward,
        _ => Partitioning::Rebalance,
    };
    g.connect(sum, out, to_sink).unwrap();
    g
}

/// [`graph`] with [`LastSums`] as the sink (at P=2), run to its end.
fn run(count: u64, never_waits: bool, fail_at: Option<(u64, bool)>, config: JobConfig) -> Run {
    run_to(count, never_waits, fail_at, 2, config)
}

/// [`run`] with the sink at `sink_parallelism`.
fn run_to(
    count: u64,
    never_waits: bool,
    fail_at: Option<(u64, bool)>,
    sink_parallelism: usize,
    config: JobConfig,
) -> Run {
    let threads: Threads = Arc::default();
    let got = Arc::new(Mutex::new(HashMap::new()));
    let (t, got2) = (threads.clone(), got.clone());
    let g = graph(
        count,
        never_waits,
        fail_at,
        &threads,
        sink_parallelism,
        move |subtask| {
            Box::new(LastSums {
                got: got2.clone(),
                threads: t.clone(),
                vertex: format!("out#{subtask}"),
            })
        },
    );
    let result = wait_or_fail(start(g, config).unwrap(), DEADLINE);
    let sums = got.lock().unwrap().clone();
    let threads = threads.lock().unwrap().clone();
    Run {
        result,
        sums,
        threads,
    }
}

/// Per key: how many of the numbers below `count` it has, and their sum.
fn reference(count: u64) -> HashMap<u64, (u64, f64)> {
    let mut r = HashMap::new();
    for n in 0..count {
        let e = r.entry(n % KEYS).or_insert((0u64, 0.0f64));
        e.0 += 1;
        e.1 += n as f64;
    }
    r
}

/// [`tight`] queues, and a checkpoint every millisecond.
fn checkpoint_every_millisecond() -> JobConfig {
    JobConfig {
        checkpoint_interval: Some(Duration::from_millis(1)),
        ..tight()
    }
}

/// The job finished, and every record arrived once: the sums and counts per key are those of
/// the numbers below `count`.
fn assert_every_record_arrived_once(r: &Run, count: u64, what: &str) {
    assert_eq!(r.result.outcome, JobOutcome::Finished, "{what}");
    assert_eq!(r.sums, reference(count), "{what}: records and sums per key");
}

/// Small batches in queues of one batch: senders find their queue full at nearly every batch.
fn tight() -> JobConfig {
    JobConfig {
        batch_size: 7,
        channel_capacity: 1,
        ..JobConfig::default()
    }
}

#[test]
fn a_source_and_the_channel_task_it_feeds_share_a_thread_and_every_record_arrives_once() {
    let count = 200_000;
    for (config, what) in [
        (tight(), "tight queues"),
        (JobConfig::default(), "defaults"),
    ] {
        let r = run(count, true, None, config);
        assert_every_record_arrived_once(&r, count, what);
        for s in 0..2 {
            let (source, sink) = (
                &r.threads[&format!("numbers#{s}")],
                &r.threads[&format!("out#{s}")],
            );
            assert_eq!(source, sink, "{what}: subtask {s} runs in one thread");
            assert_eq!(source, &format!("numbers+sum+out#{s}"));
        }
    }
}

#[test]
fn tasks_keep_their_own_threads_when_sharing_is_off_or_the_source_may_wait() {
    let count = 50_000;
    let off = JobConfig {
        share_threads: false,
        ..tight()
    };
    for (never_waits, config, what) in [(true, off, "sharing off"), (false, tight(), "may wait")] {
        let r = run(count, never_waits, None, config);
        assert_every_record_arrived_once(&r, count, what);
        for s in 0..2 {
            assert_eq!(
                r.threads[&format!("numbers#{s}")],
                format!("numbers#{s}"),
                "{what}"
            );
            assert_eq!(
                r.threads[&format!("out#{s}")],
                format!("sum+out#{s}"),
                "{what}"
            );
        }
    }
}

#[test]
fn a_checkpointed_job_finishes_when_the_sink_to_acknowledge_shares_the_source_thread() {
    let count = 100_000;
    let r = run(count, true, None, checkpoint_every_millisecond());
    assert_every_record_arrived_once(&r, count, "checkpoints every 1 ms");
    // At least the last one, which each source waits for before it commits and ends.
    assert!(r.result.checkpoints.completed() >= 1);
    assert_eq!(r.threads["out#1"], "numbers+sum+out#1");
}

/// W6's shape: the paired channel task sends on, behind a rebalance edge, to a sink of
/// parallelism 1 that runs alone. With queues of one batch, both paired threads keep waiting
/// for room at that sink (it gets the records of both); the job still finishes with every
/// record, also with a checkpoint every millisecond (barriers aligned by the sink).
#[test]
fn a_channel_task_that_sends_on_shares_the_source_thread_and_every_record_arrives_once() {
    let count = 200_000;
    for (config, what) in [
        (tight(), "tight queues"),
        (checkpoint_every_millisecond(), "checkpoints every 1 ms"),
        (JobConfig::default(), "defaults"),
    ] {
        let checkpointing = config.checkpoint_interval.is_some();
        let r = run_to(count, true, None, 1, config);
        assert_every_record_arrived_once(&r, count, what);
        for s in 0..2 {
            assert_eq!(
                r.threads[&format!("numbers#{s}")],
                format!("numbers+sum#{s}"),
                "{what}: subtask {s} of the source and of `sum` share a thread"
            );
        }
        assert_eq!(r.threads["out#0"], "out#0", "{what}: the sink runs alone");
        if checkpointing {
            assert!(r.result.checkpoints.completed() >= 1, "{what}");
        }
    }
}

#[test]
fn a_failure_in_the_channel_task_of_a_shared_thread_names_it_without_a_hang() {
    for panics in [false, true] {
        let r = run(1_000_000, true, Some((5_000, panics)), tight());
        match r.result.outcome {
            JobOutcome::Failed(f) => {
                assert_eq!((f.vertex_id.as_str(), f.subtask), ("sum", 1), "{f:?}");
                let expected = match panics {
                    true => "panicked: sum broke at record 5000",
                    false => "bad record 5000",
                };
                assert_eq!(f.message, expected);
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert_eq!(r.threads["numbers#1"], "numbers+sum+out#1");
    }
}

/// source (P) → `first` → operator (Q) → forward → sink (Q), plus, with `tail`, the sink
/// replaced by an operator that sends on to a sink of parallelism 1.
fn shape(
    p: usize,
    q: usize,
    first: Partitioning,
    tail: bool,
    chaining: bool,
) -> Vec<(usize, usize)> {
    use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
    let mut g = JobGraph::new("shape");
    let s = g
        .add_source("s", p, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let m = g
        .add_operator("m", q, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap();
    g.connect(s, m, first).unwrap();
    let k = g.add_sink("k", q, |_| Ok(Box::new(DiscardSink))).unwrap();
    if tail {
        let n = g
            .add_operator("n", q, |_| Ok(Box::new(MapOperator(|v| v))))
            .unwrap();
        let k1 = g.add_sink("k1", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
        g.connect(m, n, Partitioning::Forward).unwrap();
        g.connect(n, k1, Partitioning::Rebalance).unwrap();
        g.connect(m, k, Partitioning::Forward).unwrap();
    } else {
        g.connect(m, k, Partitioning::Forward).unwrap();
    }
    tidemark_runtime::ExecutionPlan::new(&g, chaining)
        .unwrap()
        .thread_pairs()
}

#[test]
fn only_a_hash_edge_from_a_source_task_into_a_task_of_equal_parallelism_pairs() {
    // The W1 shape: tasks `s` (0) and `m+k` (1).
    assert_eq!(shape(2, 2, Partitioning::Hash, false, true), vec![(0, 1)]);
    assert_eq!(shape(3, 3, Partitioning::Hash, false, true), vec![(0, 1)]);
    // One subtask each: chained already, no exchange.
    assert_eq!(shape(1, 1, Partitioning::Hash, false, true), vec![]);
    // Other parallelism, other partitioning.
    assert_eq!(shape(2, 3, Partitioning::Hash, false, true), vec![]);
    assert_eq!(shape(2, 2, Partitioning::Rebalance, false, true), vec![]);
    // The channel task sends on: to `k1` (W6's shape: tasks `s`, `m+n+k`, `k1`), or, with
    // chaining off, `m` to `k`.
    assert_eq!(shape(2, 2, Partitioning::Hash, true, true), vec![(0, 1)]);
    assert_eq!(shape(2, 2, Partitioning::Hash, false, false), vec![(0, 1)]);
    // The source task sends to two tasks (`m` over hash, `x` over forward, chaining off).
    assert_eq!(shape_two_outputs(), vec![]);
}

/// A source task (P=2) with two outputs: `m` over hash, `x` over forward.
fn shape_two_outputs() -> Vec<(usize, usize)> {
    use tidemark_runtime::testing::{CountingSource, DiscardSink};
    let mut g = JobGraph::new("two");
    let s = g
        .add_source("s", 2, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let m = g.add_sink("m", 2, |_| Ok(Box::new(DiscardSink))).unwrap();
    let x = g.add_sink("x", 2, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, m, Partitioning::Hash).unwrap();
    g.connect(s, x, Partitioning::Forward).unwrap();
    tidemark_runtime::ExecutionPlan::new(&g, false)
        .unwrap()
        .thread_pairs()
}

/// Blocks in its first write until the test lets it go, after saying so.
struct Stuck {
    stuck: mpsc::Sender<()>,
    release: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Sink for Stuck {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        let _ = self.stuck.send(());
        let _ = self.release.lock().unwrap().recv();
        Ok(())
    }
}

#[test]
fn a_hard_stop_that_gives_up_on_a_shared_thread_names_both_of_its_tasks() {
    let (stuck_tx, stuck_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let release = Arc::new(Mutex::new(release_rx));
    let stuck_tx = Mutex::new(stuck_tx);
    let g = graph(
        u64::MAX,
        true,
        None,
        &Arc::default(),
        2,
        move |subtask| match subtask {
            1 => Box::new(Stuck {
                stuck: stuck_tx.lock().unwrap().clone(),
                release: release.clone(),
            }),
            _ => Box::new(tidemark_runtime::testing::DiscardSink),
        },
    );
    let handle = start(g, tight()).unwrap();
    stuck_rx
        .recv_timeout(DEADLINE)
        .expect("the sink of subtask 1 got a record");
    // Subtask 1's thread is inside the sink, called by its channel task, called by its source
    // task (after a batch, or while it waits for room): neither task can end. (Subtask 0's
    // thread ends at the abort; on a slow machine it might not within the limit, hence no
    // claim about it.)
    handle.abort();
    let result = handle.wait_at_most(Duration::from_millis(200));
    assert_eq!(result.outcome, JobOutcome::Aborted);
    let not_ended = &result.tasks_not_ended;
    for task in ["numbers#1", "sum+out#1"] {
        assert!(
            not_ended.iter().any(|t| t == task),
            "{task} in {not_ended:?}"
        );
    }
    // The batch the channel task was given counts as in flight at its head vertex.
    let dropped = result.metrics.vertex("sum").unwrap().subtasks[1]
        .records_dropped(tidemark_runtime::DropReason::InFlight);
    assert!(dropped >= 1, "{dropped}");
    drop(release_tx);
}
