//! `tidemark_state_keys`, `tidemark_state_windows_open` and `tidemark_state_bytes`: the state
//! sizes a `reduce` and a `window` publish while a job runs, against what the job put in them.

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::exporter::render_text;
use tidemark_runtime::{start, JobConfig, JobGraph, Partitioning, StateSize, VertexId};

fn add(
    graph: &mut JobGraph,
    env: &BuildEnv,
    kind: ComponentKind,
    type_name: &str,
    id: &str,
    settings: Value,
) -> VertexId {
    match build(kind, type_name, settings, env).unwrap() {
        Built::Source(f) => graph.add_source(id, 1, f),
        Built::Operator(f) => graph.add_operator(id, 1, f),
        Built::Sink(f) => graph.add_sink(id, 1, f),
    }
    .unwrap()
}

#[test]
fn reduce_and_window_publish_their_state_size_while_the_job_runs() {
    const KEYS: u64 = 37;
    let env = BuildEnv::new(std::env::temp_dir());
    let mut g = JobGraph::new("state");
    // Records stamped on a 2,000/s schedule: within a minute every key has had records.
    let gen = add(
        &mut g,
        &env,
        ComponentKind::Source,
        "generator",
        "gen",
        json!({"rate": 2000, "keys": KEYS}),
    );
    let sum = add(
        &mut g,
        &env,
        ComponentKind::Operator,
        "reduce",
        "sum",
        json!({"aggregate": "sum"}),
    );
    // Processing-time windows of an hour: they stay open while the test looks.
    let win = add(
        &mut g,
        &env,
        ComponentKind::Operator,
        "window",
        "win",
        json!({"time": "processing", "size": "1h", "aggregate": "count"}),
    );
    let out = add(
        &mut g,
        &env,
        ComponentKind::Sink,
        "discard",
        "out",
        json!({}),
    );
    g.connect(gen, sum, Partitioning::Hash).unwrap();
    g.connect(sum, win, Partitioning::Hash).unwrap();
    g.connect(win, out, Partitioning::Forward).unwrap();
    let job = start(g, JobConfig::default()).unwrap();
    let m = job.metrics().clone();
    let size = |id: &str| m.vertex(id).unwrap().subtasks[0].state_size();

    // Stateless vertices publish no state size.
    assert_eq!(size("gen"), None);
    assert_eq!(size("out"), None);

    let deadline = Instant::now() + Duration::from_secs(60);
    let every_key = |s: Option<StateSize>| s.is_some_and(|s| s.keys == KEYS);
    while !(every_key(size("sum")) && every_key(size("win"))) {
        assert!(
            Instant::now() < deadline,
            "not every key in the state within 60 s: sum {:?}, win {:?}",
            size("sum"),
            size("win")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (sum, win) = (size("sum").unwrap(), size("win").unwrap());
    assert_eq!(sum.windows_open, 0, "a reduce has no windows");
    // One processing-time window of an hour holds every key (two if the hour turned).
    assert!((1..=2).contains(&win.windows_open), "{win:?}");
    assert!(sum.bytes > 0 && win.bytes > 0, "{sum:?} {win:?}");
    // On /metrics too, for exactly the stateful vertices.
    let text = render_text(&m).unwrap();
    for family in [
        "tidemark_state_keys",
        "tidemark_state_windows_open",
        "tidemark_state_bytes",
    ] {
        let ids: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .map(|l| {
                l.split("operator_id=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
            })
            .collect();
        assert_eq!(ids, ["sum", "win"], "{family}:\n{text}");
    }
    job.stop();
    job.wait();
}
