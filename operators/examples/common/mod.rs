//! Shared by the benchmark examples: the W1 graph of the workloads spec, built with the
//! library API and the built-in components, and the one-line result the spec defines.

use serde_json::{json, Value};
use std::num::NonZeroUsize;
use std::time::Duration;
use tidemark_markers::{legacy_quantile, Granularity, LatencyConfig};
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::{run, JobConfig, JobGraph, JobOutcome, JobResult, Partitioning, VertexKind};

fn component(kind: ComponentKind, type_name: &str, config: Value) -> Built {
    build(kind, type_name, config, &BuildEnv::default()).expect("valid benchmark component")
}

/// W1: generator (count, keys 0..1023 uniform, `rate` if given) → map `value*2+1` → hash by
/// key → running sum per key → discard, every vertex at parallelism `p`.
pub fn w1_graph(records: u64, p: usize, rate: Option<u64>) -> JobGraph {
    let mut generator = json!({"count": records, "keys": 1024});
    if let Some(rate) = rate {
        generator["rate"] = json!(rate);
    }
    let mut g = JobGraph::new("w1");
    let Built::Source(gen) = component(ComponentKind::Source, "generator", generator) else {
        unreachable!()
    };
    let Built::Operator(map) = component(
        ComponentKind::Operator,
        "map",
        json!({"scale": 2, "offset": 1}),
    ) else {
        unreachable!()
    };
    let Built::Operator(sum) = component(
        ComponentKind::Operator,
        "reduce",
        json!({"aggregate": "sum"}),
    ) else {
        unreachable!()
    };
    let Built::Sink(discard) = component(ComponentKind::Sink, "discard", json!({})) else {
        unreachable!()
    };
    let src = g.add_source("gen", p, gen).unwrap();
    let map = g.add_operator("map", p, map).unwrap();
    let sum = g.add_operator("sum", p, sum).unwrap();
    let out = g.add_sink("out", p, discard).unwrap();
    g.connect(src, map, Partitioning::Forward).unwrap();
    g.connect(map, sum, Partitioning::Hash).unwrap();
    g.connect(sum, out, Partitioning::Forward).unwrap();
    g
}

/// A job configuration with markers every `interval` (zero: off) at `granularity`.
pub fn config(interval: Duration, granularity: Granularity) -> JobConfig {
    JobConfig {
        latency: LatencyConfig {
            interval,
            granularity,
            history_size: NonZeroUsize::new(128).unwrap(),
        },
        ..JobConfig::default()
    }
}

/// Runs `graph` and returns the result, failing loudly if the job did not finish.
pub fn run_job(graph: JobGraph, config: JobConfig) -> JobResult {
    let result = run(graph, config).expect("the benchmark job starts");
    assert_eq!(
        result.outcome,
        JobOutcome::Finished,
        "the benchmark job failed"
    );
    result
}

/// The sinks' marker latency quantiles (ms) over the union of their windows, and the record
/// e2e p99 (ms) over the sinks' windows.
pub fn sink_latency(result: &JobResult) -> (f64, f64, f64, f64) {
    let mut markers: Vec<f64> = Vec::new();
    let mut e2e: Vec<f64> = Vec::new();
    for v in result
        .metrics
        .vertices()
        .iter()
        .filter(|v| v.kind == VertexKind::Sink)
    {
        for s in &v.subtasks {
            for (_, stats) in s.latency().iter() {
                markers.extend(stats.window().samples().map(|x| x as f64 / 1e6));
            }
            if let Some(stats) = s.e2e_latency().as_ref() {
                e2e.extend(stats.window().samples().map(|x| x as f64 / 1e6));
            }
        }
    }
    let q = |v: &mut Vec<f64>, p: f64| {
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        legacy_quantile(v, p)
    };
    let max = markers.iter().copied().fold(f64::NAN, f64::max);
    (
        q(&mut markers, 0.5),
        q(&mut markers, 0.99),
        max,
        q(&mut e2e, 0.99),
    )
}

/// Peak resident set size of this process in MiB (VmHWM), or NaN where /proc is missing.
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Prints the line of the workloads spec for one run.
pub fn print_line(workload: &str, p: usize, result: &JobResult, extra: &str) {
    let records: u64 = result
        .metrics
        .vertices()
        .iter()
        .filter(|v| v.kind == VertexKind::Source)
        .flat_map(|v| v.subtasks.iter())
        .map(|s| s.records_out())
        .sum();
    let secs = result.elapsed.as_secs_f64();
    let (p50, p99, max, e2e_p99) = sink_latency(result);
    println!(
        "workload={workload} parallelism={p} records={records} seconds={secs:.3} rec_per_s={:.0} marker_p50_ms={p50:.4} marker_p99_ms={p99:.4} marker_max_ms={max:.4} e2e_p99_ms={e2e_p99:.4} rss_mb={:.1}{extra}",
        records as f64 / secs,
        peak_rss_mb(),
    );
}
