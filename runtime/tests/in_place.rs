//! Operators that change records in place (`Operator::process_batch_in_place`): their records
//! go on to the next vertex and across hash edges like emitted ones, also when the change
//! turns a numeric record into a general one, and every copy of a shared event the job made
//! is dropped exactly once (the event's reference count is back to the test's own).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::testing::CountingSource;
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, Map, Operator, Output, Partitioning, Record,
    Sink, Value,
};

/// In place: every third record gets the shared event (it becomes general), the others get
/// `value + 0.5`.
struct Tag {
    shared: Arc<Map>,
}

impl Tag {
    fn change(&self, record: &mut Record) {
        let k = record.int_key().expect("int keys");
        if k % 3 == 0 {
            record.set_event(Arc::clone(&self.shared));
        } else {
            let v = record.numeric_value().expect("numeric");
            record.set_numeric_value(v + 0.5);
        }
    }
}

impl Operator for Tag {
    fn process(&mut self, mut record: Record, out: &mut Output) -> Result<(), BoxError> {
        self.change(&mut record);
        out.emit(record);
        Ok(())
    }
    fn process_batch_in_place(&mut self, records: &mut [Record]) -> Result<bool, BoxError> {
        for r in records {
            self.change(r);
        }
        Ok(true)
    }
}

/// Emits each record twice (not in place), so the records `Tag` changes in place sit in
/// a chained vertex's output buffer.
struct Twice;

impl Operator for Twice {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        out.emit(record.clone());
        out.emit(record);
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

/// source → [twice] → tag (in place) → `edge` → collect, every vertex at parallelism `p`.
fn run(n: u64, p: usize, twice: bool, edge: Partitioning, shared: &Arc<Map>) -> Vec<Record> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut g = JobGraph::new("in-place");
    let s = g
        .add_source("s", 1, move |_| Ok(Box::new(CountingSource::new(n))))
        .unwrap();
    let mut last = s;
    if twice {
        let t = g.add_operator("twice", 1, |_| Ok(Box::new(Twice))).unwrap();
        g.connect(last, t, Partitioning::Forward).unwrap();
        last = t;
    }
    let shared = Arc::clone(shared);
    let tag = g
        .add_operator("tag", 1, move |_| {
            Ok(Box::new(Tag {
                shared: Arc::clone(&shared),
            }))
        })
        .unwrap();
    g.connect(last, tag, Partitioning::Forward).unwrap();
    let sink_got = Arc::clone(&got);
    let k = g
        .add_sink("k", p, move |_| {
            Ok(Box::new(Collect(Arc::clone(&sink_got))))
        })
        .unwrap();
    g.connect(tag, k, edge).unwrap();
    let result = common::wait_or_fail(
        start(g, JobConfig::default()).unwrap(),
        Duration::from_secs(60),
    );
    assert_eq!(result.outcome, JobOutcome::Finished);
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    got.sort_by_key(|r| (r.int_key(), r.is_numeric()));
    got
}

#[test]
fn records_changed_in_place_go_on_and_are_dropped_once() {
    let shared: Arc<Map> = Arc::new([("tag", Value::from("x"))].into_iter().collect());
    let n = 5_000u64;
    for (p, twice, edge) in [
        (1, false, Partitioning::Forward),
        (1, true, Partitioning::Forward),
        (2, false, Partitioning::Hash),
        (2, true, Partitioning::Hash),
        (3, true, Partitioning::Hash),
    ] {
        let got = run(n, p, twice, edge, &shared);
        let copies = if twice { 2 } else { 1 };
        let mut expected = Vec::new();
        for k in 0..n {
            for _ in 0..copies {
                expected.push(if k % 3 == 0 {
                    Record::with_event(k as i64, Arc::clone(&shared), 0)
                } else {
                    Record::new(k, k as f64 + 0.5, 0)
                });
            }
        }
        assert_eq!(got.len(), expected.len(), "p {p}, twice {twice}");
        for (g, e) in got.iter().zip(&expected) {
            // Timestamps are the source's wall clock: compare the rest.
            assert_eq!(*g.key(), *e.key(), "p {p}, twice {twice}");
            assert_eq!(g.event_json(), e.event_json(), "p {p}, twice {twice}");
        }
        drop(expected);
        drop(got);
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "p {p}, twice {twice}: every copy the job made was dropped once"
        );
    }
}
