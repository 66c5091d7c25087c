//! The W1 throughput workload without the CLI: generator → map → hash → keyed sum → discard.
//!
//! `cargo run --release -p tidemark-operators --example w1 -- [RECORDS] [PARALLELISM]`

use serde_json::json;
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::{run, JobConfig, JobGraph, Partitioning};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().map_or(Ok(50_000_000), |a| a.parse())?;
    let p: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    let env = BuildEnv::default();
    let mut g = JobGraph::new("w1");
    let Built::Source(gen) = build(
        ComponentKind::Source,
        "generator",
        json!({"count": records, "keys": 1024}),
        &env,
    )?
    else {
        unreachable!()
    };
    let Built::Operator(map) = build(
        ComponentKind::Operator,
        "map",
        json!({"scale": 2, "offset": 1}),
        &env,
    )?
    else {
        unreachable!()
    };
    let Built::Operator(sum) = build(
        ComponentKind::Operator,
        "reduce",
        json!({"aggregate": "sum"}),
        &env,
    )?
    else {
        unreachable!()
    };
    let Built::Sink(discard) = build(ComponentKind::Sink, "discard", json!({}), &env)? else {
        unreachable!()
    };
    let src = g.add_source("gen", p, gen)?;
    let map = g.add_operator("map", p, map)?;
    let sum = g.add_operator("sum", p, sum)?;
    let out = g.add_sink("out", p, discard)?;
    g.connect(src, map, Partitioning::Forward)?;
    g.connect(map, sum, Partitioning::Hash)?;
    g.connect(sum, out, Partitioning::Forward)?;
    let result = run(g, JobConfig::default())?;
    let secs = result.elapsed.as_secs_f64();
    println!(
        "workload=W1 parallelism={p} records={records} seconds={secs:.3} rec_per_s={:.0} outcome={:?}",
        records as f64 / secs,
        result.outcome
    );
    Ok(())
}
