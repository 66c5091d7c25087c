//! The per-record path does not allocate: a job ten times longer makes (almost) no more
//! allocations than a short one. Batch buffers are reused, counters are stores, statistics are
//! preallocated; what allocates is set-up (threads, queues, the first batches) and the first
//! marker of each latency key.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tidemark_runtime::markers::{Granularity, LatencyConfig};
use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{run, JobConfig, JobGraph, JobOutcome, Partitioning};

struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations made while running a job whose sources emit `records` in total.
fn allocations_for(records: u64) -> u64 {
    let mut g = JobGraph::new("alloc");
    let per = records / 2;
    let s = g
        .add_source("s", 2, move |_| Ok(Box::new(CountingSource::new(per))))
        .unwrap();
    let m = g
        .add_operator("m", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0))))
        .unwrap();
    let r = g
        .add_operator("r", 2, |_| Ok(Box::new(MapOperator(|v| v + 1.0))))
        .unwrap();
    let k = g.add_sink("k", 2, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(s, m, Partitioning::Forward).unwrap();
    g.connect(m, r, Partitioning::Hash).unwrap();
    g.connect(r, k, Partitioning::Rebalance).unwrap();
    let config = JobConfig {
        latency: LatencyConfig {
            interval: Duration::from_micros(500),
            granularity: Granularity::Subtask,
            ..LatencyConfig::default()
        },
        ..JobConfig::default()
    };
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let result = run(g, config).unwrap();
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(result.outcome, JobOutcome::Finished);
    let sunk: u64 = result
        .metrics
        .vertex("k")
        .unwrap()
        .subtasks
        .iter()
        .map(|s| s.records_in())
        .sum();
    assert_eq!(sunk, records);
    after - before
}

#[test]
fn allocations_do_not_grow_with_the_number_of_records() {
    let short = allocations_for(200_000);
    let long = allocations_for(2_000_000);
    // 1.8 M more records are ~1,800 more batches over 8 channels: one allocation per batch or
    // per marker would show as thousands. Buffers circulating before every pool has filled
    // and latency keys first seen in the longer run account for a few dozen.
    assert!(
        long < short + 300,
        "short job: {short} allocations, ten times longer job: {long}"
    );
}
