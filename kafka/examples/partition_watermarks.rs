//! What per-partition watermarks cost the `kafka` source per record: the time of
//! `PartitionWatermarks::observe` (find the record's partition, note its timestamp) against the
//! per-batch maximum over the same timestamps that a source without splits pays, in the same
//! run. No broker involved: only the per-record bookkeeping is timed.
//!
//! ```sh
//! cargo run --release -p tidemark-kafka --example partition_watermarks
//! ```
//!
//! Prints `case=… ns_per_record=…` lines, then the ratios.

use std::hint::black_box;
use std::time::Instant;

use tidemark_kafka::watermarks::PartitionWatermarks;

const RECORDS: usize = 20_000_000;
const BATCH: usize = 1_024;
const PARTITIONS: i32 = 4;

/// Nanoseconds per record of `f` over `RECORDS` records, best of 5 rounds.
fn time(mut f: impl FnMut() -> i64) -> f64 {
    (0..5)
        .map(|_| {
            let started = Instant::now();
            black_box(f());
            started.elapsed().as_nanos() as f64 / RECORDS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let timestamps: Vec<i64> = (0..BATCH as i64)
        .map(|i| 1_700_000_000_000 + i * 7)
        .collect();
    let topic = String::from("orders");

    let batch_max = time(|| {
        let mut max = i64::MIN;
        for _ in 0..RECORDS / BATCH {
            let m = black_box(&timestamps)
                .iter()
                .copied()
                .max()
                .unwrap_or(i64::MIN);
            max = max.max(m);
        }
        max
    });
    // librdkafka hands a poll runs of messages of one partition (a fetch response per
    // partition): here runs of 256.
    let runs = time(|| {
        let mut w = PartitionWatermarks::new();
        for _ in 0..RECORDS / BATCH {
            for (i, &ts) in black_box(&timestamps).iter().enumerate() {
                w.observe(&topic, (i / 256) as i32 % PARTITIONS, ts);
            }
        }
        w.watermark(&topic, 0, 0).unwrap_or(0)
    });
    // The worst case: every record from another partition than the one before.
    let interleaved = time(|| {
        let mut w = PartitionWatermarks::new();
        for _ in 0..RECORDS / BATCH {
            for (i, &ts) in black_box(&timestamps).iter().enumerate() {
                w.observe(&topic, i as i32 % PARTITIONS, ts);
            }
        }
        w.watermark(&topic, 0, 0).unwrap_or(0)
    });
    println!("case=batch_max ns_per_record={batch_max:.3}");
    println!("case=per_partition_runs_of_256 ns_per_record={runs:.3}");
    println!("case=per_partition_interleaved ns_per_record={interleaved:.3}");
    println!(
        "stat=extra_ns_per_record runs={:.3} interleaved={:.3}",
        runs - batch_max,
        interleaved - batch_max
    );
}
