//! Workload W3 (marker overhead): W1 with markers off, and with markers every 1 ms at
//! `subtask` granularity, alternated `ROUNDS` times in one process; prints every run and the
//! ratio of the medians.
//!
//! ```text
//! cargo run --release -p tidemark-operators --example w3 -- [RECORDS] [PARALLELISM] [ROUNDS]
//! ```

mod common;

use std::time::Duration;
use tidemark_markers::Granularity;

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map_or(200_000_000, |a| a.parse().expect("RECORDS"));
    let p: usize = args.next().map_or(1, |a| a.parse().expect("PARALLELISM"));
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    let mut off = Vec::new();
    let mut on = Vec::new();
    for _ in 0..rounds {
        for (interval, rates) in [
            (Duration::ZERO, &mut off),
            (Duration::from_millis(1), &mut on),
        ] {
            let result = common::run_job(
                common::w1_graph(records, p, None),
                common::config(interval, Granularity::Subtask),
            );
            let label = if interval.is_zero() {
                " markers=off"
            } else {
                " markers=1ms/subtask"
            };
            common::print_line("W3", p, &result, label);
            rates.push(records as f64 / result.elapsed.as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (off, on) = (median(&mut off), median(&mut on));
    println!(
        "workload=W3 parallelism={p} median_rec_per_s_off={off:.0} median_rec_per_s_on={on:.0} ratio_on_off={:.4} cost_percent={:.2}",
        on / off,
        (1.0 - on / off) * 100.0
    );
}
