//! What the runtime measures of real jobs built from the registry: per-vertex busy time inside
//! a chain (four chained vertices, one of them slow: its busy counter must name it and the
//! vertices add up to the task's busy time), and the state sizes a `reduce` and a `window`
//! publish while a job runs, against what the job put in them.

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::exporter::render_text;
use tidemark_runtime::{
    run, start, JobConfig, JobGraph, JobOutcome, Partitioning, StateSize, VertexId,
};

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

/// Runs generator → (map and `delay`, in `order`) → discard, all chained in one task, and checks
/// the busy counters.
fn check(order: [&str; 2]) {
    const RECORDS: u64 = 60_000;
    let env = BuildEnv::new(std::env::temp_dir());
    let mut g = JobGraph::new("busy");
    let gen = add(
        &mut g,
        &env,
        ComponentKind::Source,
        "generator",
        "gen",
        json!({"count": RECORDS, "keys": 16}),
    );
    let mut previous = gen;
    for id in order {
        let v = match id {
            // 30 µs of sleep per record against well under a microsecond of work per record
            // for each other vertex: `slow` takes far more than 90 % of the time on any machine.
            "slow" => add(
                &mut g,
                &env,
                ComponentKind::Operator,
                "delay",
                "slow",
                json!({"per_record": "30us"}),
            ),
            _ => add(
                &mut g,
                &env,
                ComponentKind::Operator,
                "map",
                "map",
                json!({"scale": 2, "offset": 1}),
            ),
        };
        g.connect(previous, v, Partitioning::Forward).unwrap();
        previous = v;
    }
    let out = add(
        &mut g,
        &env,
        ComponentKind::Sink,
        "discard",
        "out",
        json!({}),
    );
    g.connect(previous, out, Partitioning::Forward).unwrap();

    let result = run(g, JobConfig::default()).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);
    let m = &result.metrics;
    let tasks = m.tasks();
    assert_eq!(tasks.len(), 1, "all four vertices run chained in one task");
    let expected_name = format!("gen+{}+{}+out", order[0], order[1]);
    assert_eq!(tasks[0].name, expected_name);
    let task_busy = tasks[0].subtasks[0].busy_seconds();

    let busy: Vec<(&str, f64)> = ["gen", "map", "slow", "out"]
        .iter()
        .map(|&id| (id, m.vertex(id).unwrap().subtasks[0].busy_seconds()))
        .collect();
    assert_eq!(
        m.vertex("out").unwrap().subtasks[0].records_in(),
        RECORDS,
        "every record went through"
    );
    for (id, b) in &busy {
        assert!(*b > 0.0, "{id} has a busy time: {busy:?}");
    }
    let (busiest, slow) = busy
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    assert_eq!(busiest, "slow", "{busy:?}");
    let sum: f64 = busy.iter().map(|(_, b)| b).sum();
    // The spec's tolerance: the vertices of a task add up to its busy time within 10 %.
    let ratio = sum / task_busy;
    eprintln!(
        "{expected_name}: task busy {task_busy:.4} s, vertices {busy:?}, sum/task {ratio:.4}"
    );
    assert!(
        (0.9..=1.1).contains(&ratio),
        "vertices {sum} s against task {task_busy} s (ratio {ratio}): {busy:?}"
    );
    // And the slow vertex really is where the time went.
    assert!(
        slow / task_busy > 0.9,
        "slow {slow} s of task {task_busy} s: {busy:?}"
    );
}

#[test]
fn the_slow_vertex_of_a_chain_has_the_busy_time_and_the_vertices_add_up_to_the_task() {
    check(["map", "slow"]);
    check(["slow", "map"]);
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
