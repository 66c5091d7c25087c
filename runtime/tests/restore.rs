//! Checkpoints to a directory and restore, with test components that implement the state
//! interface: a resumable sequence source (two subtasks), a keyed operator keeping a sum per
//! key through the keyed-state API, and a sink that can be cut back (a shared vector standing
//! in for a file).
//!
//! A run is stopped hard at a forced point (the source holds its second half back until the
//! test has seen a checkpoint complete, then emits part of it and the test aborts once the sink
//! has it: records after the checkpoint were written and must be cut back). A second run
//! restores the newest complete checkpoint and must end with exactly the totals an
//! uninterrupted run gives, computed here independently; the same when the keyed operator is
//! restored at another parallelism. With at-least-once barriers (records of the faster input
//! after the barrier in the snapshot) the sums would count those records twice.

mod common;

use common::{wait_or_fail, wait_until};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::checkpoint::CheckpointStorage;
use tidemark_runtime::checkpoint_store::{complete_checkpoints, read_checkpoint};
use tidemark_runtime::keyed_state::{KeyedSnapshot, KeyedState};
use tidemark_runtime::state_codec::{decode, encode};
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, Operator, Output, Partitioning, PollContext,
    Record, Sink, Source, SourceStatus, Value,
};

const N: u64 = 40_000;
const KEYS: u64 = 37;
const LIMIT: Duration = Duration::from_secs(120);

/// How far the sources may go: every subtask emits its numbers `i < gate` (`i % 2 ==
/// subtask`), then waits; `u64::MAX` lets it run to `N`.
type Gate = Arc<AtomicU64>;

struct SeqSource {
    next: u64,
    step: u64,
    gate: Gate,
}

impl Source for SeqSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let gate = self.gate.load(Ordering::Acquire).min(N);
        let mut emitted = 0;
        // Past the first half, subtask 1 is slow: its barriers come well after subtask 0's,
        // so that a keyed subtask gets records of subtask 0 after a barrier before subtask 1
        // delivers it (what alignment holds back).
        let most = if self.next >= N / 2 && self.next % 2 == 1 {
            std::thread::sleep(Duration::from_millis(2));
            20
        } else {
            ctx.max_records
        };
        while self.next < gate && emitted < most {
            out.emit(Record::new(self.next % KEYS, self.next as f64, 0));
            self.next += self.step;
            emitted += 1;
        }
        Ok(if self.next >= N {
            SourceStatus::Finished
        } else if emitted == 0 {
            SourceStatus::Idle { until: None }
        } else {
            SourceStatus::Ready
        })
    }

    fn resumable(&self) -> bool {
        true
    }

    fn position(&mut self, _checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        Ok(encode(&self.next)?)
    }

    fn resume(&mut self, position: &[u8]) -> Result<(), BoxError> {
        self.next = decode(position)?;
        Ok(())
    }
}

/// A running sum per key, in keyed state; at the end of input, one record per key with its
/// sum.
#[derive(Default)]
struct SumPerKey {
    sums: KeyedState<f64>,
}

impl Operator for SumPerKey {
    fn process(&mut self, record: Record, _out: &mut Output) -> Result<(), BoxError> {
        let v = record.numeric_value().ok_or("no value")?;
        *self.sums.get_or_default(&record.key()) += v;
        Ok(())
    }

    fn finish(&mut self, _now: i64, out: &mut Output) -> Result<(), BoxError> {
        for (key, sum) in self.sums.iter() {
            let Value::Int(k) = key else {
                return Err("an int key".into());
            };
            out.emit(Record::new(*k as u64, *sum, 0));
        }
        Ok(())
    }

    fn has_keyed_state(&mut self) -> bool {
        true
    }

    fn snapshot_keyed(&mut self, _n: u64, state: &mut KeyedSnapshot) -> Result<(), BoxError> {
        Ok(self.sums.snapshot(state)?)
    }

    fn restore_keyed(&mut self, state: KeyedSnapshot) -> Result<(), BoxError> {
        Ok(self.sums.restore(&state)?)
    }

    fn state_size(&self) -> Option<tidemark_runtime::StateSize> {
        Some(tidemark_runtime::StateSize {
            keys: self.sums.len() as u64,
            ..Default::default()
        })
    }
}

type Written = Arc<Mutex<Vec<(u64, f64)>>>;

/// Appends what it gets to a shared vector (the "file"); its position is the length, and a
/// restore cuts the vector back to it.
struct VecSink(Written);

impl Sink for VecSink {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        let (k, v) = record.numeric_parts().ok_or("numeric")?;
        self.0.lock().unwrap().push((k as u64, v));
        Ok(())
    }

    fn resumable(&self) -> bool {
        true
    }

    fn position(&mut self, _n: u64) -> Result<Vec<u8>, BoxError> {
        Ok(encode(&(self.0.lock().unwrap().len() as u64))?)
    }

    fn restore(&mut self, position: &[u8]) -> Result<(), BoxError> {
        let len: u64 = decode(position)?;
        self.0.lock().unwrap().truncate(len as usize);
        Ok(())
    }
}

/// A pass-through that also forwards each record (so the sink sees the stream too).
struct Forward;

impl Operator for Forward {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        out.emit(record);
        Ok(())
    }
}

fn graph(gate: &Gate, sums: &Written, seen: &Written, keyed_parallelism: usize) -> JobGraph {
    let mut g = JobGraph::new("restore-test");
    let gate = gate.clone();
    let src = g
        .add_source("numbers", 2, move |ctx| {
            Ok(Box::new(SeqSource {
                next: ctx.subtask as u64,
                step: 2,
                gate: gate.clone(),
            }))
        })
        .unwrap();
    let sum = g
        .add_operator(
            "sum",
            keyed_parallelism,
            |_| Ok(Box::<SumPerKey>::default()),
        )
        .unwrap();
    g.set_keyed(sum, true);
    g.set_max_parallelism(sum, 16);
    let fwd = g
        .add_operator("forward", 2, |_| Ok(Box::new(Forward)))
        .unwrap();
    let sums = sums.clone();
    let out = g
        .add_sink("out", 1, move |_| Ok(Box::new(VecSink(sums.clone()))))
        .unwrap();
    let seen = seen.clone();
    let tap = g
        .add_sink("tap", 1, move |_| Ok(Box::new(VecSink(seen.clone()))))
        .unwrap();
    g.connect(src, sum, Partitioning::Hash).unwrap();
    g.connect(src, fwd, Partitioning::Forward).unwrap();
    g.connect(sum, out, Partitioning::Rebalance).unwrap();
    g.connect(fwd, tap, Partitioning::Rebalance).unwrap();
    g
}

fn config(dir: &std::path::Path, last_id: u64) -> JobConfig {
    JobConfig {
        checkpoint_interval: Some(Duration::from_millis(5)),
        checkpoint_storage: Some(CheckpointStorage {
            job_dir: dir.join("restore-test"),
            retain: 2,
            last_id,
        }),
        ..JobConfig::default()
    }
}

fn reference() -> BTreeMap<u64, f64> {
    let mut sums = BTreeMap::new();
    for i in 0..N {
        *sums.entry(i % KEYS).or_insert(0.0) += i as f64;
    }
    sums
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-restore-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs until a forced point and aborts; returns the newest complete checkpoint's id.
fn crashed_run(dir: &std::path::Path, sums: &Written, seen: &Written) -> u64 {
    let gate: Gate = Arc::new(AtomicU64::new(N / 2));
    let handle = start(graph(&gate, sums, seen, 2), config(dir, 0)).unwrap();
    // Every source subtask emitted its first half: wait for a checkpoint covering it.
    wait_until("the first half reached the tap", || {
        seen.lock().unwrap().len() as u64 == N / 2
    });
    let c = handle.checkpoints().clone();
    let first = c.completed();
    wait_until("a checkpoint after the first half", || {
        c.completed() > first + 1
    });
    // The rest flows (subtask 1 slowly); the crash comes after some checkpoints taken while
    // records flow, and after records that followed the last of them.
    gate.store(u64::MAX, Ordering::Release);
    let opened = c.completed();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(c.completed() > opened + 3 && seen.lock().unwrap().len() as u64 > 5 * N / 8) {
        assert!(
            std::time::Instant::now() < deadline,
            "checkpoints while the second half flows: completed {} (opened at {opened}), \
             failed {}, tap {} records",
            c.completed(),
            c.failed_total(),
            seen.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = seen.lock().unwrap().len();
    wait_until("records after the checkpoint", || {
        seen.lock().unwrap().len() > before
    });
    handle.abort();
    let result = wait_or_fail(handle, LIMIT);
    assert_eq!(result.outcome, JobOutcome::Aborted);
    // The series of checkpoints to a directory: alignment of the two-input keyed vertex, and
    // every key with state in one of its two subtasks.
    let text = tidemark_runtime::exporter::render_text(&result.metrics).unwrap();
    assert!(
        text.contains("tidemark_checkpoint_alignment_seconds_count{job_name=\"restore-test\",operator_id=\"sum\"}"),
        "{text}"
    );
    // The snapshot time is observed once per barrier a `sum` subtask forwarded, as the
    // alignment is.
    let count_of = |family: &str| -> f64 {
        let prefix = format!("{family}_count{{job_name=\"restore-test\",operator_id=\"sum\"}}");
        text.lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix}: {text}"))
    };
    let synced = count_of("tidemark_checkpoint_sync_seconds");
    assert!(synced > 0.0, "{text}");
    assert_eq!(
        synced,
        count_of("tidemark_checkpoint_alignment_seconds"),
        "{text}"
    );
    let keys: f64 = text
        .lines()
        .filter(|l| l.starts_with("tidemark_state_keys{") && l.contains("operator_id=\"sum\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(keys, KEYS as f64, "{text}");
    assert!(text.contains("tidemark_checkpoint_size_bytes{"), "{text}");
    assert!(
        text.contains("tidemark_checkpoints_failed_total{"),
        "{text}"
    );
    assert!(
        sums.lock().unwrap().is_empty(),
        "nothing fired before the end"
    );
    let complete = complete_checkpoints(&dir.join("restore-test")).unwrap();
    // Retain 2; one more while the newest was being written when the job stopped.
    assert!(!complete.is_empty() && complete.len() <= 3, "{complete:?}");
    complete.last().unwrap().0
}

fn restored_run(dir: &std::path::Path, sums: &Written, seen: &Written, p: usize) {
    let last = crashed_run(dir, sums, seen);
    let path = dir.join("restore-test").join(format!("chk-{last}"));
    let loaded = read_checkpoint(&path).unwrap();
    assert_eq!(loaded.metadata.id, last);
    let gate: Gate = Arc::new(AtomicU64::new(u64::MAX));
    let mut config = config(dir, last);
    config.restore = Some(Arc::new(loaded));
    let handle = start(graph(&gate, sums, seen, p), config).unwrap();
    let c = handle.checkpoints().clone();
    let result = wait_or_fail(handle, LIMIT);
    assert_eq!(result.outcome, JobOutcome::Finished);
    // Ids continue after the restored one.
    assert!(c.completed() > last, "{} after {last}", c.completed());
    let got: BTreeMap<u64, f64> = sums.lock().unwrap().iter().copied().collect();
    assert_eq!(sums.lock().unwrap().len(), KEYS as usize, "each key once");
    assert_eq!(got, reference());
    // The tap (cut back to the checkpoint, then appended) has every record exactly once.
    let mut tapped: Vec<u64> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, v)| *v as u64)
        .collect();
    tapped.sort_unstable();
    assert_eq!(tapped, (0..N).collect::<Vec<_>>());
}

#[test]
fn a_crashed_job_restored_gives_the_uninterrupted_result() {
    let dir = tmp("same");
    let (sums, seen): (Written, Written) = Default::default();
    restored_run(&dir, &sums, &seen, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A library user restoring into another `max_parallelism` gets the refusal the command
/// gives, naming the vertex and both counts, before anything runs.
#[test]
fn a_restore_at_another_max_parallelism_is_refused_by_the_runtime() {
    let dir = tmp("max-parallelism");
    let (sums, seen): (Written, Written) = Default::default();
    let last = crashed_run(&dir, &sums, &seen);
    let path = dir.join("restore-test").join(format!("chk-{last}"));
    let gate: Gate = Arc::new(AtomicU64::new(u64::MAX));
    let mut g = graph(&gate, &sums, &seen, 2);
    let sum = g.find("sum").unwrap();
    g.set_max_parallelism(sum, 32);
    let mut config = config(&dir, last);
    config.restore = Some(Arc::new(read_checkpoint(&path).unwrap()));
    let e = match start(g, config) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a restore into other key groups started"),
    };
    assert!(
        e.contains("vertex \"sum\"")
            && e.contains("max_parallelism 16 in the checkpoint")
            && e.contains("and 32 now"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_crashed_job_restored_at_another_parallelism_gives_the_same_result() {
    for p in [1, 3] {
        let dir = tmp(&format!("rescale-{p}"));
        let (sums, seen): (Written, Written) = Default::default();
        restored_run(&dir, &sums, &seen, p);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
