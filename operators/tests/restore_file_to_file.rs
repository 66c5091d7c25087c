//! A `file` → `filter` → `file` pipeline, with dead letters on the source and the filter,
//! checkpointed part way, run on past the checkpoint (what a crash leaves in the files), then
//! made anew and restored from the checkpoint's positions and local state: every file ends
//! byte for byte as after an uninterrupted run. (The runtime drives the same calls; this drives
//! them by hand, one subtask each, so the order of lines is fixed.)

use std::path::Path;

use serde_json::json;
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::{Operator, Output, PollContext, Sink, Source, SourceStatus, SubtaskContext};

/// One subtask of each vertex, made from the registry for a job in `dir`.
struct Pipeline {
    source: Box<dyn Source>,
    filter: Box<dyn Operator>,
    sink: Box<dyn Sink>,
}

/// What checkpoint `n` keeps of the pipeline.
struct Saved {
    source: Vec<u8>,
    filter: Vec<u8>,
    sink: Vec<u8>,
}

fn ctx(vertex: &str) -> SubtaskContext {
    SubtaskContext {
        job_name: "restore".into(),
        vertex_id: vertex.into(),
        subtask: 0,
        parallelism: 1,
        seed: 1,
    }
}

fn make(dir: &Path) -> Pipeline {
    let env = BuildEnv::new(dir);
    let source = json!({"path": "in.jsonl", "on_error": {"dead_letter": "bad-lines.jsonl"}});
    let filter = json!({"where": "v > 0", "on_error": {"dead_letter": "bad-records.jsonl"}});
    let Built::Source(source) = build(ComponentKind::Source, "file", source, &env).unwrap() else {
        panic!("not a source")
    };
    let Built::Operator(filter) = build(ComponentKind::Operator, "filter", filter, &env).unwrap()
    else {
        panic!("not an operator")
    };
    let Built::Sink(sink) = build(
        ComponentKind::Sink,
        "file",
        json!({"path": "out.jsonl"}),
        &env,
    )
    .unwrap() else {
        panic!("not a sink")
    };
    Pipeline {
        source: source(&ctx("in")).unwrap(),
        filter: filter(&ctx("positive")).unwrap(),
        sink: sink(&ctx("out")).unwrap(),
    }
}

impl Pipeline {
    /// One poll of the source, through the filter into the sink; false once the source is done.
    fn step(&mut self) -> bool {
        let mut read = Output::default();
        let status = self
            .source
            .poll(
                &PollContext {
                    now_nanos: 1,
                    max_records: 7,
                },
                &mut read,
            )
            .unwrap();
        let mut kept = Output::default();
        self.filter
            .process_batch(read.records(), &mut kept)
            .unwrap();
        self.sink.write_batch(kept.records()).unwrap();
        status != SourceStatus::Finished
    }

    /// Barrier `n` through the pipeline, in the order the runtime calls them.
    fn checkpoint(&mut self, n: u64) -> Saved {
        self.source.snapshot(n).unwrap();
        let source = self.source.position(n).unwrap();
        let filter = self.filter.snapshot_local(n).unwrap().unwrap();
        self.sink.flush().unwrap();
        let sink = self.sink.position(n).unwrap();
        Saved {
            source,
            filter,
            sink,
        }
    }

    fn finish(mut self) {
        while self.step() {}
        self.filter.finish(1, &mut Output::default()).unwrap();
        self.sink.finish().unwrap();
    }
}

/// 600 lines: every 41st malformed, every 13th without `v`, `v` from -2 to 4.
fn input() -> String {
    (0..600)
        .map(|n| match n {
            _ if n % 41 == 40 => format!("garbage {n}\n"),
            _ if n % 13 == 12 => format!("{{\"key\":{n},\"timestamp\":{n}}}\n"),
            _ => format!("{{\"key\":{n},\"v\":{},\"timestamp\":{n}}}\n", n % 7 - 2),
        })
        .collect()
}

const FILES: [&str; 3] = ["out.jsonl", "bad-lines.jsonl", "bad-records.jsonl"];

/// The file's text, with the folder it is in written `DIR` (messages name the input file).
fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .replace(&dir.display().to_string(), "DIR")
}

#[test]
fn a_restored_pipeline_writes_every_file_as_an_uninterrupted_run() {
    let reference = tempfile::tempdir().unwrap();
    std::fs::write(reference.path().join("in.jsonl"), input()).unwrap();
    make(reference.path()).finish();
    let expected = FILES.map(|f| read(reference.path(), f));
    assert!(
        expected.iter().all(|text| text.lines().count() >= 10),
        "{expected:?}"
    );

    for (before, after) in [(20, 15), (40, 25)] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.jsonl"), input()).unwrap();
        // Stale output of an earlier run is replaced, not appended to.
        std::fs::write(dir.path().join("out.jsonl"), "an earlier run\n").unwrap();
        let mut first = make(dir.path());
        for _ in 0..before {
            assert!(first.step());
        }
        let saved = first.checkpoint(1);
        for _ in 0..after {
            assert!(first.step());
        }
        // The process dies with everything after the checkpoint in its files.
        first.sink.flush().unwrap();
        drop(first);
        let crashed = FILES.map(|f| read(dir.path(), f));
        for ((crashed, expected), file) in crashed.iter().zip(&expected).zip(FILES) {
            assert!(
                crashed.len() < expected.len() && expected.starts_with(crashed.as_str()),
                "{file}: {crashed}"
            );
        }

        // Made anew and restored: nothing is cut until the pipeline runs.
        let mut restored = make(dir.path());
        restored.source.resume(&saved.source).unwrap();
        restored.filter.restore_local(&saved.filter).unwrap();
        restored.sink.restore(&saved.sink).unwrap();
        assert_eq!(FILES.map(|f| read(dir.path(), f)), crashed);
        restored.finish();
        assert_eq!(
            FILES.map(|f| read(dir.path(), f)),
            expected,
            "checkpoint after {before} polls"
        );
    }
}
