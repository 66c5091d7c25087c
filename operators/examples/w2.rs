//! Workload W2 (latency under load): W1 at a fixed total rate with markers every 10 ms at
//! `operator` granularity, default settings otherwise.
//!
//! ```text
//! cargo run --release -p tidemark-operators --example w2 -- [RATE] [SECONDS] [PARALLELISM]
//! ```
//! Defaults: 200,000 records/s for 30 s at parallelism 1.

mod common;

use std::time::Duration;
use tidemark_markers::Granularity;

fn main() {
    let mut args = std::env::args().skip(1);
    let rate: u64 = args.next().map_or(200_000, |a| a.parse().expect("RATE"));
    let seconds: u64 = args.next().map_or(30, |a| a.parse().expect("SECONDS"));
    let p: usize = args.next().map_or(1, |a| a.parse().expect("PARALLELISM"));
    let config = common::config(Duration::from_millis(10), Granularity::Operator);
    let result = common::run_job(common::w1_graph(rate * seconds, p, Some(rate)), config);
    common::print_line("W2", p, &result, "");
}
