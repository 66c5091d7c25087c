//! `tidemark plan`: the text form shows chained tasks joined with `+`; `--format dot` prints a
//! Graphviz digraph; and the tasks planned are the tasks the metrics name.
#![cfg(unix)]

mod common;

use common::{tidemark, Proc, TempDir, LINGER};
use std::collections::BTreeSet;

/// gen → work (forward, chained) → agg (hash: an exchange) → out (forward, chained), all with
/// parallelism 2.
const JOB: &str = "name: planned
parallelism: 2
sources:
  gen:
    type: generator
    count: 2000
operators:
  work:
    type: map
    input: gen
  agg:
    type: reduce
    input: work
    partition: hash
    aggregate: sum
sinks:
  out:
    type: discard
    input: agg
";

/// The task names of a text plan: the lines under `tasks:` look like `  NAME xP: ...`.
fn planned_tasks(text: &str) -> BTreeSet<String> {
    text.lines()
        .skip_while(|l| l.trim() != "tasks:")
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .map(|l| {
            let name = l.trim().split(' ').next().unwrap();
            name.to_owned()
        })
        .collect()
}

#[test]
fn plan_text_shows_chained_tasks_joined_with_plus() {
    let dir = TempDir::new("plan-text");
    dir.write("job.yaml", JOB);
    let out = tidemark(dir.path(), ["plan", "job.yaml"]);
    assert_eq!(out.code(), 0, "stderr:\n{}", out.stderr);
    let text = &out.stdout;
    assert!(text.starts_with("job planned:"), "{text}");
    assert!(text.contains("chaining on"), "{text}");
    assert_eq!(
        planned_tasks(text),
        BTreeSet::from(["gen+work".to_owned(), "agg+out".to_owned()]),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("gen+work x2:")),
        "{text}"
    );
    assert!(text.contains("gen -> work: forward (chained)"), "{text}");
    assert!(text.contains("agg -> out: forward (chained)"), "{text}");
    assert!(text.contains("work -> agg: hash, 4 channels"), "{text}");

    // --format text is the default.
    let explicit = tidemark(dir.path(), ["plan", "job.yaml", "--format", "text"]);
    assert_eq!(explicit.code(), 0);
    assert_eq!(explicit.stdout, out.stdout);

    // Without chaining every vertex is a task of its own.
    let unchained = tidemark(dir.path(), ["plan", "job.yaml", "--no-chaining"]);
    assert_eq!(unchained.code(), 0, "stderr:\n{}", unchained.stderr);
    assert_eq!(
        planned_tasks(&unchained.stdout),
        ["gen", "work", "agg", "out"]
            .map(String::from)
            .into_iter()
            .collect::<BTreeSet<_>>(),
        "{}",
        unchained.stdout
    );
    assert!(!unchained.stdout.contains("(chained)"));
}

#[test]
fn plan_dot_prints_a_digraph() {
    let dir = TempDir::new("plan-dot");
    dir.write("job.yaml", JOB);
    let out = tidemark(dir.path(), ["plan", "job.yaml", "--format", "dot"]);
    assert_eq!(out.code(), 0, "stderr:\n{}", out.stderr);
    let dot = out.stdout.trim();
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.ends_with('}'), "{dot}");
    assert_eq!(
        dot.matches('{').count(),
        dot.matches('}').count(),
        "balanced braces:\n{dot}"
    );
    for edge in [
        "\"gen\" -> \"work\"",
        "\"work\" -> \"agg\"",
        "\"agg\" -> \"out\"",
    ] {
        assert!(dot.contains(edge), "edge {edge} in:\n{dot}");
    }
    assert!(dot.contains("gen+work"), "the chain gen+work:\n{dot}");

    // Graphviz, when installed, accepts it.
    if let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(out.stdout.as_bytes())
            .unwrap();
        let result = child.wait_with_output().unwrap();
        assert!(
            result.status.success(),
            "dot -Tsvg: {}",
            String::from_utf8_lossy(&result.stderr)
        );
    }

    let bad = tidemark(dir.path(), ["plan", "job.yaml", "--format", "svg"]);
    assert_eq!(bad.code(), 2, "an unknown format is bad usage");
}

#[test]
fn the_metrics_name_the_planned_tasks() {
    let dir = TempDir::new("plan-tasks");
    dir.write("job.yaml", JOB);
    let plan = tidemark(dir.path(), ["plan", "job.yaml"]);
    assert_eq!(plan.code(), 0, "stderr:\n{}", plan.stderr);
    let planned = planned_tasks(&plan.stdout);

    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--linger",
            LINGER,
        ],
    );
    let addr = proc.wait_lingering();
    let m = common::scrape(addr);
    proc.end_lingering();
    for metric in [
        "tidemark_task_busy_seconds_total",
        "tidemark_task_backpressured_seconds_total",
        "tidemark_task_idle_seconds_total",
    ] {
        let tasks: BTreeSet<String> = m
            .samples(metric)
            .map(|s| s.labels.get("task").expect("task label").to_owned())
            .collect();
        assert_eq!(tasks, planned, "{metric}:\n{}", m.body);
        let subtasks: BTreeSet<(String, String)> = m
            .samples(metric)
            .map(|s| {
                (
                    s.labels.get("task").unwrap().to_owned(),
                    s.labels
                        .get("subtask_index")
                        .expect("subtask_index")
                        .to_owned(),
                )
            })
            .collect();
        assert_eq!(subtasks.len(), 4, "two tasks of two subtasks: {subtasks:?}");
    }
}

/// The channel capacity is shown by `plan` as resolved from the job file, `-D` and the flag,
/// and a run's report records the one it ran with.
#[test]
fn channel_capacity_is_shown_by_plan_and_recorded_in_the_report() {
    let dir = TempDir::new("plan-capacity");
    dir.write("job.yaml", JOB);
    dir.write("deep.yaml", &format!("channel_capacity: 32\n{JOB}"));
    for (args, shown) in [
        (&["plan", "job.yaml"][..], "execution.channel-capacity = 8"),
        (
            &["plan", "deep.yaml"][..],
            "execution.channel-capacity = 32",
        ),
        (
            &["plan", "deep.yaml", "-D", "execution.channel-capacity=64"][..],
            "execution.channel-capacity = 64",
        ),
        (
            &["validate", "deep.yaml", "--channel-capacity", "2"][..],
            "execution.channel-capacity = 2",
        ),
    ] {
        let out = tidemark(dir.path(), args);
        assert_eq!(out.code(), 0, "{args:?}: {}", out.stderr);
        assert!(
            out.stdout.lines().any(|l| l.trim() == shown),
            "{args:?}: {shown:?} in\n{}",
            out.stdout
        );
    }
    let out = tidemark(
        dir.path(),
        [
            "run",
            "deep.yaml",
            "--channel-capacity",
            "3",
            "--metrics-addr",
            "127.0.0.1:0",
            "--report-file",
            "report.json",
        ],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&dir.read("report.json")).unwrap();
    assert_eq!(report["settings"]["channel_capacity"], 3, "{report}");
}
