//! Helpers for the unit tests.

use std::path::Path;

use tidemark_runtime::{
    Operator, Output, PollContext, Record, Source, SourceStatus, SubtaskContext,
};

use crate::component::{BuildEnv, Built, ComponentInfo};

/// The context of subtask `subtask` of `parallelism`.
pub(crate) fn ctx(subtask: usize, parallelism: usize, seed: u64) -> SubtaskContext {
    SubtaskContext {
        job_name: "test".to_owned(),
        vertex_id: "v".to_owned(),
        subtask,
        parallelism,
        seed,
    }
}

/// One poll at `now` for at most `max` records.
pub(crate) fn poll(source: &mut dyn Source, now: i64, max: usize) -> (SourceStatus, Vec<Record>) {
    let mut out = Output::with_capacity(max);
    let status = source
        .poll(
            &PollContext {
                now_nanos: now,
                max_records: max,
            },
            &mut out,
        )
        .unwrap();
    (status, out.records().to_vec())
}

/// Subtask 0 of 1 of the operator `info` built from `settings`.
pub(crate) fn operator(info: &ComponentInfo, settings: serde_json::Value) -> Box<dyn Operator> {
    match info.build(settings, &BuildEnv::default()).unwrap() {
        Built::Operator(factory) => factory(&ctx(0, 1, 0)).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// Runs `records` through `op` as one batch.
pub(crate) fn process(op: &mut dyn Operator, records: &[Record]) -> Vec<Record> {
    let mut out = Output::default();
    op.process_batch(records, &mut out).unwrap();
    out.records().to_vec()
}

/// Runs `records` through `op` as one batch changed in place (the operator must support it).
pub(crate) fn process_in_place(op: &mut dyn Operator, records: &[Record]) -> Vec<Record> {
    let mut records = records.to_vec();
    assert!(op.process_batch_in_place(&mut records).unwrap(), "in place");
    records
}

/// A fresh folder, removed when dropped.
pub(crate) struct TempDir(tempfile::TempDir);

impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        TempDir(
            tempfile::Builder::new()
                .prefix(&format!("tidemark-operators-{name}-"))
                .tempdir()
                .unwrap(),
        )
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }
}

/// The int key and numeric `value` of a numeric record.
pub(crate) fn kv(r: &Record) -> (u64, f64) {
    let key = r.int_key().unwrap_or_else(|| panic!("no int key: {r:?}"));
    let value = r
        .numeric_value()
        .unwrap_or_else(|| panic!("no value: {r:?}"));
    (key as u64, value)
}

/// The operator `info` built from `settings` with `on_error: {dead_letter: dl.jsonl}` in
/// `dir`, subtask 0 of 1.
pub(crate) fn dead_lettered(
    info: &ComponentInfo,
    settings: &serde_json::Value,
    dir: &Path,
) -> Box<dyn Operator> {
    let mut settings = settings.clone();
    settings["on_error"] = serde_json::json!({"dead_letter": "dl.jsonl"});
    match info.build(settings, &BuildEnv::new(dir)).unwrap() {
        Built::Operator(factory) => factory(&ctx(0, 1, 0)).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// Runs an operator made by `make` (writing failed records to `dl.jsonl` in the folder it is
/// given) over `records`, of which some fail its expression, three ways: uninterrupted; to a
/// checkpoint half way, on past it, then dropped (a crash); and a new instance restored from
/// that checkpoint's local state, given the records after it. The restored dead-letter file
/// must equal the uninterrupted one.
pub(crate) fn dead_letters_survive_a_restore(
    make: impl Fn(&Path) -> Box<dyn Operator>,
    records: &[Record],
) {
    let dir = TempDir::new("dead-letter-operator");
    let path = dir.path().join("dl.jsonl");
    let run = |op: &mut Box<dyn Operator>, records: &[Record]| {
        let mut out = Output::default();
        op.process_batch(records, &mut out).unwrap();
    };
    let (head, tail) = records.split_at(records.len() / 2);

    let mut whole = make(dir.path());
    run(&mut whole, records);
    whole.finish(0, &mut Output::default()).unwrap();
    drop(whole);
    let expected = std::fs::read_to_string(&path).unwrap();
    assert!(expected.lines().count() >= 4, "{expected}");

    let mut first = make(dir.path());
    run(&mut first, head);
    let state = first
        .snapshot_local(1)
        .unwrap()
        .expect("a dead-letter length");
    run(&mut first, tail);
    drop(first);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        expected,
        "the crashed run wrote everything too"
    );

    let mut restored = make(dir.path());
    restored.restore_local(&state).unwrap();
    run(&mut restored, tail);
    restored.finish(0, &mut Output::default()).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
}
