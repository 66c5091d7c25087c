//! A keyed operator's state goes to the store the graph gives its vertex
//! (`JobGraph::set_keyed_store`) and comes back from it, without code of the operator's own:
//! a store of the test's saves every snapshot it is given and makes two moves, a restore
//! before the first record (a key with a count of its own) and the loss of one key group after
//! the second poll of the source the operator is chained behind. The job's output and the
//! store's last snapshot are compared with counts computed here; with either the saves or the
//! moves taken out of the runtime they differ.

mod common;

use common::wait_or_fail;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_runtime::keyed_state::{KeyedSnapshot, KeyedState};
use tidemark_runtime::keyed_store::{DirectoryStore, KeyedStore};
use tidemark_runtime::state_move::StateMove;
use tidemark_runtime::{
    start, BoxError, JobConfig, JobGraph, JobOutcome, Operator, Output, Partitioning, PollContext,
    Record, Sink, Source, SourceStatus, Value,
};

const N: u64 = 3_000;
const KEYS: u64 = 11;
/// Records per poll: the store's second move comes after the second poll, `2 * PER_POLL`
/// records in.
const PER_POLL: u64 = 100;
const GROUPS: u32 = 4;
/// A key no record has, restored with a count of its own.
const RESTORED_KEY: i64 = 1_000;
const RESTORED_COUNT: f64 = 5.0;
/// The key whose key group is taken away after the second poll: the first whose key group is
/// not the restored key's.
fn lost_key() -> i64 {
    (0..KEYS as i64)
        .find(|k| group_of(*k) != group_of(RESTORED_KEY))
        .expect("a key outside the restored key's group")
}

/// Numbers `0..N`, `PER_POLL` at a time, keyed by `i % KEYS`, each counting 1.
struct Numbers {
    next: u64,
}

impl Source for Numbers {
    fn poll(&mut self, _ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        if self.next >= N {
            return Ok(SourceStatus::Finished);
        }
        let end = (self.next + PER_POLL).min(N);
        for i in self.next..end {
            out.emit(Record::new(i % KEYS, 1.0, 0));
        }
        self.next = end;
        Ok(SourceStatus::Ready)
    }
}

/// A count per key in keyed state; at the end of input, one record per key.
#[derive(Default)]
struct CountPerKey {
    counts: KeyedState<f64>,
}

impl Operator for CountPerKey {
    fn process(&mut self, record: Record, _out: &mut Output) -> Result<(), BoxError> {
        *self.counts.get_or_default(&record.key()) += 1.0;
        Ok(())
    }

    fn finish(&mut self, _now: i64, out: &mut Output) -> Result<(), BoxError> {
        for (key, count) in self.counts.iter() {
            let Value::Int(k) = key else {
                return Err("an int key".into());
            };
            out.emit(Record::new(*k as u64, *count, 0));
        }
        Ok(())
    }

    fn has_keyed_state(&mut self) -> bool {
        true
    }

    fn snapshot_keyed(&mut self, _n: u64, state: &mut KeyedSnapshot) -> Result<(), BoxError> {
        Ok(self.counts.snapshot(state)?)
    }

    fn restore_keyed(&mut self, state: KeyedSnapshot) -> Result<(), BoxError> {
        Ok(self.counts.restore(&state)?)
    }

    fn forget_keyed(&mut self, forget: &dyn Fn(&Value) -> bool) -> Result<(), BoxError> {
        let gone: Vec<Value> = self
            .counts
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| forget(k))
            .collect();
        for key in gone {
            self.counts.remove(&key);
        }
        Ok(())
    }
}

type Counts = Arc<Mutex<BTreeMap<i64, f64>>>;

struct MapSink(Counts);

impl Sink for MapSink {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        let (k, v) = record.numeric_parts().ok_or("numeric")?;
        self.0.lock().unwrap().insert(k, v);
        Ok(())
    }
}

/// What the store was given: (checkpoint, key groups of the snapshot, its keys and counts).
type Saved = Arc<Mutex<Vec<(u64, u32, BTreeMap<i64, f64>)>>>;

/// The test's store: `GROUPS` key groups, every snapshot kept, two moves.
struct TestStore {
    saved: Saved,
    asked: u32,
}

fn group_of(key: i64) -> u32 {
    let mut s = KeyedSnapshot::new(GROUPS);
    s.put(&Value::Int(key), &0.0).unwrap();
    let group = s.entries().next().unwrap().0;
    group
}

impl KeyedStore for TestStore {
    fn key_groups(&self) -> u32 {
        GROUPS
    }

    fn save(&mut self, checkpoint: u64, state: KeyedSnapshot) -> Result<(), BoxError> {
        let counts = state
            .decoded::<f64>()?
            .into_iter()
            .map(|(k, v)| match k {
                Value::Int(k) => Ok((k, v)),
                other => Err(format!("an int key, found {other:?}")),
            })
            .collect::<Result<_, _>>()?;
        let groups = state.max_parallelism();
        self.saved
            .lock()
            .unwrap()
            .push((checkpoint, groups, counts));
        Ok(())
    }

    fn take_moves(&mut self) -> Vec<StateMove> {
        self.asked += 1;
        match self.asked {
            // Before the first record.
            1 => {
                let mut state = KeyedSnapshot::new(GROUPS);
                state
                    .put(&Value::Int(RESTORED_KEY), &RESTORED_COUNT)
                    .unwrap();
                vec![StateMove::Restore {
                    state,
                    forget_first: Vec::new(),
                    groups: vec![group_of(RESTORED_KEY)],
                    event_time: None,
                }]
            }
            // After the second poll.
            3 => vec![StateMove::Forget {
                max_parallelism: GROUPS,
                groups: vec![group_of(lost_key())],
            }],
            _ => Vec::new(),
        }
    }
}

/// The counts the job must end with, computed from the numbers.
fn reference() -> BTreeMap<i64, f64> {
    let lost = group_of(lost_key());
    let mut counts = BTreeMap::new();
    for i in 0..N {
        let key = (i % KEYS) as i64;
        // Keys of the lost group count again from the records after the second poll.
        if group_of(key) == lost && i < 2 * PER_POLL {
            continue;
        }
        *counts.entry(key).or_insert(0.0) += 1.0;
    }
    counts.insert(RESTORED_KEY, RESTORED_COUNT);
    counts
}

#[test]
fn a_keyed_operator_saves_to_and_moves_with_the_store_its_vertex_is_given() {
    let saved: Saved = Arc::default();
    let counts: Counts = Arc::default();
    let mut g = JobGraph::new("keyed-store-test");
    let src = g
        .add_source("numbers", 1, |_| Ok(Box::new(Numbers { next: 0 })))
        .unwrap();
    let count = g
        .add_operator("count", 1, |_| Ok(Box::<CountPerKey>::default()))
        .unwrap();
    g.set_keyed(count, true);
    let kept = saved.clone();
    g.set_keyed_store(
        count,
        Box::new(move |_ctx, directory: Option<DirectoryStore>| {
            assert!(directory.is_none(), "no checkpoint directory in this job");
            Ok(Box::new(TestStore {
                saved: kept.clone(),
                asked: 0,
            }) as Box<dyn KeyedStore>)
        }),
    );
    let out = counts.clone();
    let sink = g
        .add_sink("out", 1, move |_| Ok(Box::new(MapSink(out.clone()))))
        .unwrap();
    g.connect(src, count, Partitioning::Forward).unwrap();
    g.connect(count, sink, Partitioning::Forward).unwrap();
    let config = JobConfig {
        checkpoint_interval: Some(Duration::from_millis(1)),
        ..JobConfig::default()
    };
    let result = wait_or_fail(start(g, config).unwrap(), Duration::from_secs(60));
    assert!(
        matches!(result.outcome, JobOutcome::Finished),
        "{:?}",
        result.outcome
    );

    let expected = reference();
    assert_eq!(*counts.lock().unwrap(), expected, "the job's output");
    let saved = saved.lock().unwrap();
    let (last, groups, state) = saved.last().expect("the store was given no snapshot");
    assert_eq!(
        *groups, GROUPS,
        "snapshots are grouped by the store's key groups"
    );
    // The last barrier follows every record: its snapshot holds the final counts.
    assert_eq!(*state, expected, "checkpoint {last}'s snapshot");
    assert!(
        saved.windows(2).all(|w| w[0].0 < w[1].0),
        "one snapshot per checkpoint, in order"
    );
}
