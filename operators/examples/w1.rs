//! Workload W1 (throughput) of the workloads spec, built with the library API.
//!
//! ```text
//! cargo run --release -p tidemark-operators --example w1 -- [RECORDS] [PARALLELISM] [INTERVAL_US] [GRANULARITY]
//! ```
//! Defaults: 200,000,000 records, parallelism 1, markers off, granularity operator.
//! Prints one line: `workload=W1 parallelism=… records=… seconds=… rec_per_s=… …`.

mod common;

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map_or(200_000_000, |a| a.parse().expect("RECORDS"));
    let p: usize = args.next().map_or(1, |a| a.parse().expect("PARALLELISM"));
    let interval_us: u64 = args.next().map_or(0, |a| a.parse().expect("INTERVAL_US"));
    let granularity = args
        .next()
        .map_or(Ok(Default::default()), |a| a.parse())
        .expect("GRANULARITY");
    let config = common::config(Duration::from_micros(interval_us), granularity);
    let result = common::run_job(common::w1_graph(records, p, None), config);
    common::print_line("W1", p, &result, "");
}
