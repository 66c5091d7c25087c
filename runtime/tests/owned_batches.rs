//! Operators that take the records of a batch (`Operator::process_batch_owned` with
//! `Record::take`): a general record taken is its event's only holder, so changing it changes
//! the event where it lies (no copy on write); the default (`process_batch`, which hands out
//! clones) still copies. Timestamps stay with what the runtime keeps (end-to-end latency reads
//! them), every record arrives once, and every event is dropped once.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::testing::CountingSource;
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, Map, Operator, Output, Partitioning, Record,
    Sink, Value,
};

/// Makes each numeric record general: a fresh event `{"k": key, "tag": <the shared string>}`.
struct General {
    tag: Arc<str>,
}

impl Operator for General {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        let k = record.int_key().expect("int keys");
        let mut event = Map::with_capacity(3);
        event.insert("k", k);
        event.insert("tag", Value::String(Arc::clone(&self.tag)));
        out.emit(Record::with_event(k, event, record.timestamp));
        Ok(())
    }
}

/// Sets `n` on each record and counts the records whose event was copied to do so (the map's
/// address changed).
struct SetN {
    owned: bool,
    copied: Arc<AtomicU64>,
}

impl SetN {
    fn set(&self, mut record: Record, out: &mut Output) {
        let before = &*record.event_map() as *const Map;
        let event = record.event_mut();
        event.insert("n", 1);
        if !std::ptr::eq(before, event) {
            self.copied.fetch_add(1, Ordering::Relaxed);
        }
        out.emit(record);
    }
}

impl Operator for SetN {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.set(record, out);
        Ok(())
    }

    fn process_batch_owned(
        &mut self,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<(), BoxError> {
        if !self.owned {
            return self.process_batch(records, out);
        }
        for r in records.iter_mut() {
            let timestamp = r.timestamp;
            self.set(r.take(), out);
            // What stays behind: the same timestamp, nothing to drop.
            assert!(r.is_numeric() && r.timestamp == timestamp);
        }
        Ok(())
    }
}

/// Keeps what it gets.
struct Collect(Arc<Mutex<Vec<Record>>>);

impl Sink for Collect {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        self.0.lock().unwrap().push(record.clone());
        Ok(())
    }
}

/// source → general → set n (owned or not) → `edge` → collect; returns the records collected
/// and how many events `set n` copied.
fn run(n: u64, owned: bool, p: usize, edge: Partitioning, tag: &Arc<str>) -> (Vec<Record>, u64) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let copied = Arc::new(AtomicU64::new(0));
    let mut g = JobGraph::new("owned");
    let s = g
        .add_source("s", 1, move |_| Ok(Box::new(CountingSource::new(n))))
        .unwrap();
    let tag = Arc::clone(tag);
    let general = g
        .add_operator("general", 1, move |_| {
            Ok(Box::new(General {
                tag: Arc::clone(&tag),
            }))
        })
        .unwrap();
    let op_copied = Arc::clone(&copied);
    let set = g
        .add_operator("set", 1, move |_| {
            Ok(Box::new(SetN {
                owned,
                copied: Arc::clone(&op_copied),
            }))
        })
        .unwrap();
    let sink_got = Arc::clone(&got);
    let k = g
        .add_sink("k", p, move |_| {
            Ok(Box::new(Collect(Arc::clone(&sink_got))))
        })
        .unwrap();
    g.connect(s, general, Partitioning::Forward).unwrap();
    g.connect(general, set, Partitioning::Forward).unwrap();
    g.connect(set, k, edge).unwrap();
    let result = common::wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    got.sort_by_key(|r| r.int_key());
    (got, copied.load(Ordering::Relaxed))
}

#[test]
fn taken_records_change_without_a_copy_and_arrive_once() {
    let tag: Arc<str> = "shared".into();
    let n = 3_000u64;
    for (owned, p, edge) in [
        (true, 1, Partitioning::Forward),
        (true, 2, Partitioning::Hash),
        (false, 1, Partitioning::Forward),
    ] {
        let (got, copied) = run(n, owned, p, edge, &tag);
        assert_eq!(got.len() as u64, n, "owned {owned}, p {p}");
        for (k, r) in got.iter().enumerate() {
            assert_eq!(r.int_key(), Some(k as i64));
            assert_eq!(
                r.event_json(),
                format!(r#"{{"k":{k},"tag":"shared","n":1}}"#)
            );
        }
        if owned {
            assert_eq!(copied, 0, "p {p}: a taken record is changed where it lies");
        } else {
            assert_eq!(
                copied, n,
                "the default hands out clones: each change copies"
            );
        }
        drop(got);
        assert_eq!(
            Arc::strong_count(&tag),
            1,
            "owned {owned}, p {p}: every event the job made was dropped once"
        );
    }
}
