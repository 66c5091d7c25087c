//! The baseline of workload W9 (joins): one thread that makes the same two streams as
//! `docs/examples/bench/w9.yaml` (the same generators with the same seeds, at the same
//! parallelism) and joins them with a hash map per key, keeping each side's records for the
//! interval and evicting them by event time, building the same output events
//! (`{"left": <event>, "right": <event>}`).
//!
//! ```text
//! cargo run --release -p tidemark-operators --example w9 -- [RECORDS] [PARALLELISM] [SEED]
//! ```
//! Defaults: 10,000,000 records per stream, parallelism 1, seed 9. Prints
//! `baseline=hash_map_join records=… results=… seconds=… rec_per_s=… peak_held=…`.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use serde_json::json;
use tidemark_operators::component::{BuildEnv, Built, ComponentKind};
use tidemark_operators::registry;
use tidemark_runtime::job::subtask_seed;
use tidemark_runtime::name::name_of;
use tidemark_runtime::value::{Map, Value};
use tidemark_runtime::{Output, PollContext, Record, Source, SourceStatus, SubtaskContext};

const LOWER: i64 = -1_000_000_000;
const UPPER: i64 = 0;

/// One side of one key: its records (timestamp, event) in time order.
type Side = VecDeque<(i64, Value)>;

fn generator(records: u64, vertex: usize, subtask: usize, p: usize, seed: u64) -> Box<dyn Source> {
    let settings = json!({
        "count": records,
        "keys": 10000,
        "key_distribution": "uniform",
        "start_time": "2026-12-01T00:00:00Z",
        "event_rate": 100000,
    });
    let info = registry::find(ComponentKind::Source, "generator").expect("generator");
    let Ok(Built::Source(factory)) = info.build(settings, &BuildEnv::default()) else {
        panic!("the generator builds");
    };
    let ctx = SubtaskContext {
        job_name: "w9".into(),
        vertex_id: if vertex == 0 { "left" } else { "right" }.into(),
        subtask,
        parallelism: p,
        seed: subtask_seed(seed, vertex, subtask),
    };
    factory(&ctx).expect("a generator subtask")
}

/// Inserts in time order (the subtasks' streams interleave).
fn insert(side: &mut Side, t: i64, event: Value) {
    let at = match side.back() {
        Some((last, _)) if *last > t => side.partition_point(|(x, _)| *x <= t),
        _ => side.len(),
    };
    side.insert(at, (t, event));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map_or(10_000_000, |a| a.parse().expect("RECORDS"));
    let p: usize = args.next().map_or(1, |a| a.parse().expect("PARALLELISM"));
    let seed: u64 = args.next().map_or(9, |a| a.parse().expect("SEED"));

    let started = Instant::now();
    // Per stream, per subtask: the generator and the last timestamp it gave.
    let mut streams: Vec<(usize, Box<dyn Source>, i64, bool)> = (0..2)
        .flat_map(|v| (0..p).map(move |i| (v, i)))
        .map(|(v, i)| (v, generator(records, v, i, p, seed), i64::MIN, false))
        .collect();
    let mut table: HashMap<Value, (Side, Side)> = HashMap::new();
    let mut out = Output::with_capacity(1024);
    let mut results_buf: Vec<Record> = Vec::with_capacity(4096);
    let (mut results, mut taken, mut held, mut peak_held) = (0u64, 0u64, 0u64, 0u64);
    let (left_name, right_name) = (name_of("left"), name_of("right"));
    let mut watermark = i64::MIN;
    while streams.iter().any(|s| !s.3) {
        for s in streams.iter_mut().filter(|s| !s.3) {
            let ctx = PollContext {
                now_nanos: 0,
                max_records: 1024,
            };
            let status = s.1.poll(&ctx, &mut out).expect("poll");
            for record in out.records() {
                taken += 1;
                let t = record.timestamp;
                s.2 = s.2.max(t);
                let key = record.key().into_owned();
                let event = record.event();
                let sides = table.entry(key.clone()).or_default();
                // Evict what no record at or after the watermark can match.
                while sides.0.front().is_some_and(|(l, _)| l + UPPER < watermark) {
                    sides.0.pop_front();
                    held -= 1;
                }
                while sides.1.front().is_some_and(|(r, _)| r - LOWER < watermark) {
                    sides.1.pop_front();
                    held -= 1;
                }
                let (own, other, from, to) = match s.0 {
                    0 => (&mut sides.0, &sides.1, t + LOWER, t + UPPER),
                    _ => (&mut sides.1, &sides.0, t - UPPER, t - LOWER),
                };
                let start = other.partition_point(|(x, _)| *x < from);
                for (o, other_event) in other.range(start..).take_while(|(x, _)| *x <= to) {
                    let (l, r) = match s.0 {
                        0 => (&event, other_event),
                        _ => (other_event, &event),
                    };
                    let mut both = Map::with_capacity(2);
                    both.push_unchecked(left_name.clone(), l.clone());
                    both.push_unchecked(right_name.clone(), r.clone());
                    results_buf.push(Record::with_event(key.clone(), both, t.max(*o)));
                    results += 1;
                }
                insert(own, t, event);
                held += 1;
            }
            peak_held = peak_held.max(held);
            out.clear();
            results_buf.clear();
            if status == SourceStatus::Finished {
                s.3 = true;
                s.2 = i64::MAX;
            }
        }
        // Each stream's watermark is its subtasks' smallest; the join's the smaller of two.
        let stream_min = |v: usize| {
            streams
                .iter()
                .filter(|s| s.0 == v)
                .map(|s| s.2)
                .min()
                .unwrap_or(i64::MAX)
        };
        watermark = watermark.max(stream_min(0).min(stream_min(1)));
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "baseline=hash_map_join parallelism={p} records={taken} results={results} seconds={seconds:.3} \
         rec_per_s={:.0} peak_held={peak_held}",
        taken as f64 / seconds
    );
}
