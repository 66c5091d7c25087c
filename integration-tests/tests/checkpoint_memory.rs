//! Memory stays bounded while checkpoint barriers align, with the real binary: the job of
//! `docs/examples/bench/alignment.yaml` (two independent generators into one window at
//! parallelism 2, one of them behind a 50 µs step per record, the other many times faster,
//! checkpoints every 100 ms, here to a directory). At every checkpoint the fast input's barrier
//! comes long before the slow one's, and the fast side must wait (its senders are
//! backpressured), not be buffered: the process's peak resident memory through many checkpoints
//! stays within 1.5x of that of the same job without checkpoints (the spec's worked case,
//! state.md). A release build from before the bounded alignment failed a 12 s version of this
//! run by far (133.6 MB through 121 checkpoints against 38.7 MB without, 3.5x); this build
//! passes it: 63.5 against 56.8 MB through 84 checkpoints (debug, 40 s).
#![cfg(unix)]

mod common;

use common::{tidemark, TempDir};
use std::path::Path;

/// How long each run lasts (`--duration`): a run length, not a timing assertion.
const DURATION: &str = "40s";
/// Checkpoints the run with checkpoints must have completed: many alignments.
const CHECKPOINTS: u64 = 50;

/// Runs the alignment job for [`DURATION`] with the `-D` settings `settings`; returns its
/// report.
fn run(dir: &TempDir, name: &str, settings: &[String]) -> serde_json::Value {
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/bench/alignment.yaml");
    let report = dir.join(&format!("{name}.json"));
    let mut args = vec![
        "run".to_owned(),
        job.display().to_string(),
        // A free port: the default one may be taken by another test or job.
        "--metrics-addr".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--duration".to_owned(),
        DURATION.to_owned(),
        "--report-file".to_owned(),
        report.display().to_string(),
    ];
    for s in settings {
        args.extend(["-D".to_owned(), s.clone()]);
    }
    let out = tidemark(dir.path(), &args);
    assert_eq!(out.code(), 0, "{name}: {}", out.stderr);
    serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
}

#[test]
fn peak_memory_through_many_aligned_checkpoints_stays_within_1_5x_of_the_job_without_them() {
    let dir = TempDir::new("checkpoint-memory");
    let without = run(
        &dir,
        "without",
        &["execution.checkpointing.interval=0".to_owned()],
    );
    assert!(without["checkpoint"].is_null(), "{without}");
    let with = run(
        &dir,
        "with",
        &[format!(
            "execution.checkpointing.dir={}",
            dir.join("checkpoints").display()
        )],
    );
    let checkpoints = with["checkpoint"]["id"].as_u64().unwrap_or(0);
    assert!(
        checkpoints >= CHECKPOINTS,
        "only {checkpoints} checkpoints: {with}"
    );
    let (peak_with, peak_without) = (
        with["peak_rss_mb"].as_f64().unwrap(),
        without["peak_rss_mb"].as_f64().unwrap(),
    );
    eprintln!(
        "peak RSS {peak_with:.1} MB through {checkpoints} checkpoints, {peak_without:.1} MB \
         without"
    );
    // The spec's bound (state.md, worked cases): within 1.5x of the job without checkpoints.
    // Buffering the fast input while aligning added several times the job's memory.
    assert!(
        peak_with <= 1.5 * peak_without,
        "peak RSS {peak_with:.1} MB through {checkpoints} checkpoints against \
         {peak_without:.1} MB without checkpoints"
    );
}
