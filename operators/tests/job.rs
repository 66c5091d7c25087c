//! Real jobs built from the registry and run by the runtime.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::{run, JobConfig, JobGraph, JobOutcome, Partitioning, VertexId};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "tidemark-operators-job-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Adds the component `type_name` of `kind` built from `settings` as vertex `id`.
fn add(
    graph: &mut JobGraph,
    env: &BuildEnv,
    kind: ComponentKind,
    type_name: &str,
    id: &str,
    parallelism: usize,
    settings: Value,
) -> VertexId {
    match build(kind, type_name, settings, env).unwrap() {
        Built::Source(f) => graph.add_source(id, parallelism, f),
        Built::Operator(f) => graph.add_operator(id, parallelism, f),
        Built::Sink(f) => graph.add_sink(id, parallelism, f),
    }
    .unwrap()
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn generator_map_keyed_sum_to_file() {
    // P=2 and P=3 take the two-channel and the many-channel hash routes; P=1 chains it all.
    for p in [2, 1, 3] {
        generator_map_keyed_sum_to_file_at(p);
    }
}

fn generator_map_keyed_sum_to_file_at(p: usize) {
    let dir = TempDir::new("w1");
    let env = BuildEnv::new(dir.path());
    let mut g = JobGraph::new("w1-small");
    let src = add(
        &mut g,
        &env,
        ComponentKind::Source,
        "generator",
        "gen",
        p,
        json!({"count": 10_000, "keys": 50}),
    );
    let map = add(
        &mut g,
        &env,
        ComponentKind::Operator,
        "map",
        "map",
        p,
        json!({"scale": 2, "offset": 1}),
    );
    let sum = add(
        &mut g,
        &env,
        ComponentKind::Operator,
        "reduce",
        "sum",
        p,
        json!({"aggregate": "sum"}),
    );
    let out = add(
        &mut g,
        &env,
        ComponentKind::Sink,
        "file",
        "out",
        1,
        json!({"path": "out.jsonl"}),
    );
    g.connect(src, map, Partitioning::Forward).unwrap();
    g.connect(map, sum, Partitioning::Hash).unwrap();
    g.connect(sum, out, Partitioning::Rebalance).unwrap();
    let config = JobConfig {
        seed: Some(1),
        ..JobConfig::default()
    };
    let result = run(g, config).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);

    let lines = read_lines(&dir.path().join("out.jsonl"));
    assert_eq!(lines.len(), 10_000);
    // Per key, the running sums in file order; each step adds one mapped value 2v+1.
    let mut sums: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for line in &lines {
        let key = line["key"].as_u64().unwrap();
        assert!(key < 50);
        // The sink writes the event only: the generator's `{"key", "value"}`.
        assert_eq!(line.as_object().unwrap().len(), 2, "{line}");
        sums.entry(key)
            .or_default()
            .push(line["value"].as_f64().unwrap());
    }
    let mut originals = Vec::new();
    for running in sums.values() {
        let mut previous = 0.0;
        for &s in running {
            let mapped = s - previous;
            assert_eq!(mapped % 2.0, 1.0, "{mapped} is not 2v+1");
            originals.push(((mapped - 1.0) / 2.0) as u64);
            previous = s;
        }
    }
    // Every generated value 0..10000 came through exactly once, in its key's running sum.
    originals.sort_unstable();
    assert_eq!(originals, (0..10_000).collect::<Vec<u64>>());
    let total: f64 = sums.values().map(|r| r.last().unwrap()).sum();
    assert_eq!(total, 100_000_000.0);
}

#[test]
fn file_source_filter_to_parallel_file_sinks() {
    let dir = TempDir::new("files");
    let input: String = (0..1000)
        .map(|k| {
            format!(
                "{{\"key\":{k},\"value\":{k},\"timestamp\":{}}}\n",
                1_000 + k
            )
        })
        .collect();
    std::fs::write(dir.path().join("in.jsonl"), input).unwrap();
    let env = BuildEnv::new(dir.path());
    let mut g = JobGraph::new("files");
    let src = add(
        &mut g,
        &env,
        ComponentKind::Source,
        "file",
        "in",
        2,
        json!({"path": "in.jsonl"}),
    );
    let keep = add(
        &mut g,
        &env,
        ComponentKind::Operator,
        "filter",
        "keep",
        2,
        json!({"keep": 0.5}),
    );
    let out = add(
        &mut g,
        &env,
        ComponentKind::Sink,
        "file",
        "out",
        2,
        json!({"path": "out.jsonl"}),
    );
    g.connect(src, keep, Partitioning::Forward).unwrap();
    g.connect(keep, out, Partitioning::Forward).unwrap();
    let result = run(g, JobConfig::default()).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);

    let mut lines = read_lines(&dir.path().join("out.jsonl"));
    lines.extend(read_lines(&dir.path().join("out.jsonl.1")));
    let mut keys: Vec<u64> = lines.iter().map(|l| l["key"].as_u64().unwrap()).collect();
    keys.sort_unstable();
    assert!((400..600).contains(&keys.len()), "{}", keys.len());
    keys.dedup();
    assert!((400..600).contains(&keys.len()), "each key once");
    for line in &lines {
        let k = line["key"].as_i64().unwrap();
        assert_eq!(line["value"].as_f64(), Some(k as f64));
        // Events pass through whole: ints stay ints.
        assert_eq!(line["value"].as_i64(), Some(k));
        assert_eq!(line["timestamp"].as_i64(), Some(1_000 + k));
    }
}

#[test]
fn a_malformed_line_fails_the_job_naming_vertex_file_and_line() {
    let dir = TempDir::new("malformed");
    std::fs::write(dir.path().join("in.jsonl"), "{\"key\":1}\n[1, 2]\n").unwrap();
    let env = BuildEnv::new(dir.path());
    let mut g = JobGraph::new("malformed");
    let src = add(
        &mut g,
        &env,
        ComponentKind::Source,
        "file",
        "in",
        1,
        json!({"path": "in.jsonl"}),
    );
    let out = add(
        &mut g,
        &env,
        ComponentKind::Sink,
        "discard",
        "out",
        1,
        json!({}),
    );
    g.connect(src, out, Partitioning::Forward).unwrap();
    let result = run(g, JobConfig::default()).unwrap();
    let JobOutcome::Failed(failure) = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert_eq!(failure.vertex_id, "in");
    assert!(
        failure
            .message
            .contains("in.jsonl: line 2: malformed line: expected a JSON object, found a list"),
        "{}",
        failure.message
    );
}
