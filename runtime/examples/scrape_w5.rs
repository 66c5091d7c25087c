//! The cost of rendering one W5 scrape (`docs/examples/bench/w5.yaml`: a source and 10 maps in
//! a row and a sink, every vertex at parallelism 8, markers every 1 ms at `subtask`
//! granularity, so ~700 marker latency keys), measured on the finished job so that nothing
//! else competes for the CPU: it runs the job, then renders `/metrics` many times.
//!
//! ```text
//! cargo run --release -p tidemark-runtime --example scrape_w5 -- [RENDERS]
//! ```
//! Prints `series=… bytes=… render_ms_min=… render_ms_median=… renders=…`.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};
use tidemark_runtime::exporter::render_text;
use tidemark_runtime::markers::{Granularity, LatencyConfig};
use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};

fn main() {
    let renders: usize = std::env::args()
        .nth(1)
        .map_or(50, |a| a.parse().expect("RENDERS"));
    let p = 8;
    let mut g = JobGraph::new("w5");
    let mut prev = g
        .add_source("gen", p, |_| Ok(Box::new(CountingSource::new(3_000_000))))
        .unwrap();
    for i in 1..=10 {
        let m = g
            .add_operator(&format!("m{i:02}"), p, |_| {
                Ok(Box::new(MapOperator(|v| v * 2.0 + 1.0)))
            })
            .unwrap();
        let partitioning = if i == 1 {
            Partitioning::Rebalance
        } else {
            Partitioning::Forward
        };
        g.connect(prev, m, partitioning).unwrap();
        prev = m;
    }
    let out = g.add_sink("out", p, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(prev, out, Partitioning::Forward).unwrap();
    let config = JobConfig {
        latency: LatencyConfig {
            interval: Duration::from_millis(1),
            granularity: Granularity::Subtask,
            history_size: NonZeroUsize::new(128).unwrap(),
        },
        seed: Some(5),
        ..JobConfig::default()
    };
    let registry = run(g, config).expect("the job runs").metrics;

    let mut times = Vec::with_capacity(renders);
    let mut text = String::new();
    for _ in 0..renders {
        let t = Instant::now();
        text = render_text(&registry).expect("renders");
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    println!(
        "series={series} bytes={} render_ms_min={:.3} render_ms_median={:.3} renders={renders}",
        text.len(),
        times[0],
        times[times.len() / 2]
    );
}
