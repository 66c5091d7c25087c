//! State that survives a restart, with the real binary: checkpoints to a directory,
//! `--restore latest|auto|PATH`, the refusals (exit 2 naming the cause, before anything is
//! written or cut), the marker of a finished job, and the spec's worked cases.
//!
//! The worked cases (SIGKILL half way then `--restore latest`, the same at `--parallelism 3`,
//! SIGTERM then restore) need the file source and file sink to record and take back their
//! positions (`Source::position/resume`, `Sink::position/restore`), which the branch
//! h-state-io adds; until both branches are merged they are ignored. The kill comes at a
//! forced point: once the sink has written part of the output and a checkpoint completed
//! after that, never after a sleep. The result is compared with a reference computed here
//! from the input.
#![cfg(unix)]

mod common;

use common::{complete_checkpoints as complete, tidemark, Proc, TempDir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `tidemark run ARGS` in `dir` to its end, serving metrics on a free port.
fn run(dir: &TempDir, args: &[&str]) -> common::Output {
    let mut all = vec!["run", "--metrics-addr", "127.0.0.1:0"];
    all.extend_from_slice(args);
    tidemark(dir.path(), all)
}

/// Waits until `done`, failing after [`DEADLINE`] with `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A finite generator job: window of counts and sums per key, into a file.
fn generator_job(window_id: &str, extra: &str) -> String {
    format!(
        "name: gen-state
checkpoint:
  interval: 50ms
  dir: ckpt
{extra}sources:
  gen:
    type: generator
    count: 60000
    rate: 40000
    keys: 20
    watermarks:
      max_out_of_orderness: 0
operators:
  {window_id}:
    type: window
    input: gen
    size: 100ms
    time: event
    aggregates:
      n: count
sinks:
  out:
    type: file
    input: {window_id}
    path: out.jsonl
"
    )
}

#[test]
fn checkpoints_are_written_and_a_finished_job_is_not_restarted_by_auto() {
    let dir = TempDir::new("state-finished");
    dir.write("job.yaml", &generator_job("per_key", ""));
    let out = run(&dir, &["job.yaml", "--report-file", "report.json"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let chks = complete(&dir.join("ckpt"), "gen-state");
    assert!(!chks.is_empty(), "no checkpoint written:\n{}", out.stderr);
    // The report carries the last complete checkpoint.
    let report: serde_json::Value = serde_json::from_str(&dir.read("report.json")).unwrap();
    let last = chks.last().unwrap();
    assert_eq!(
        report["checkpoint"]["id"].as_u64(),
        Some(last.0),
        "{report}"
    );
    assert!(
        report["checkpoint"]["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("chk-{}", last.0)),
        "{report}"
    );
    assert!(report["checkpoint"]["size_bytes"].as_u64().unwrap() > 0);
    assert!(chks.len() <= 3, "retain 3 by default: {chks:?}");
    let (_, newest) = chks.last().unwrap();
    // One file per (vertex, key-group range): the window owns key groups 0..128 at P=1.
    assert!(newest.join("per_key.kg-0-128").is_file(), "{newest:?}");
    assert!(newest.join("gen.subtask-0").is_file(), "{newest:?}");
    assert!(dir.join("ckpt/gen-state/_finished").is_file());
    let written = dir.read("out.jsonl");
    // A supervisor restarting the command after the job finished starts nothing.
    let again = run(&dir, &["job.yaml", "--restore", "auto"]);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert!(again.stderr.contains("finished"), "{}", again.stderr);
    assert_eq!(dir.read("out.jsonl"), written, "the output is left alone");
}

/// A store that cannot be written (the job's checkpoint folder is a file): each checkpoint
/// fails and the job goes on, until more than `tolerable_failures` failed in a row; then it
/// fails naming the cause. The generator would run for 15 s: the failure ends it long before.
#[test]
fn checkpoints_that_keep_failing_fail_the_job_after_tolerable_failures_naming_the_cause() {
    let dir = TempDir::new("state-failing");
    let job = generator_job("per_key", "")
        .replace("count: 60000", "count: 600000")
        .replace("  dir: ckpt\n", "  dir: ckpt\n  tolerable_failures: 2\n");
    dir.write("job.yaml", &job);
    std::fs::create_dir_all(dir.join("ckpt")).unwrap();
    dir.write("ckpt/gen-state", "not a folder");
    let out = run(&dir, &["job.yaml"]);
    assert_ne!(out.code(), 0, "{}", out.stderr);
    for n in 1..=3 {
        assert!(
            out.stderr.contains(&format!("checkpoint {n} failed")),
            "each failure is told: {}",
            out.stderr
        );
    }
    assert!(
        out.stderr.contains(
            "3 checkpoints in a row failed (checkpoint.tolerable_failures is 2); the last: \
             checkpoint 3: "
        ) && out.stderr.contains("Not a directory"),
        "{}",
        out.stderr
    );
    let written = dir.read("out.jsonl");
    // The whole input is 15 s of event time: 150 windows of 100 ms for each of 20 keys.
    assert!(
        written.lines().count() < 150 * 20,
        "the job stopped early, not at the end of its input"
    );
}

#[test]
fn restore_latest_without_a_checkpoint_is_refused_naming_the_folder() {
    let dir = TempDir::new("state-none");
    dir.write("job.yaml", &generator_job("per_key", ""));
    dir.write("out.jsonl", "kept\n");
    let out = run(&dir, &["job.yaml", "--restore", "latest"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("no complete checkpoint") && out.stderr.contains("gen-state"),
        "{}",
        out.stderr
    );
    assert_eq!(
        dir.read("out.jsonl"),
        "kept\n",
        "nothing written before the refusal"
    );
    let out = run(&dir, &["job.yaml", "--restore", "ckpt/gen-state/chk-7"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(out.stderr.contains("chk-7"), "{}", out.stderr);
}

/// Runs the generator job to its end and returns the newest checkpoint folder.
fn finished_run(dir: &TempDir) -> PathBuf {
    dir.write("job.yaml", &generator_job("per_key", ""));
    let out = run(dir, &["job.yaml"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    complete(&dir.join("ckpt"), "gen-state").pop().unwrap().1
}

#[test]
fn a_checkpoint_that_does_not_fit_is_refused_before_anything_is_written() {
    let dir = TempDir::new("state-refused");
    let newest = finished_run(&dir);
    let written = dir.read("out.jsonl");
    let chk = newest.display().to_string();

    // The window vertex renamed: its state has nowhere to go.
    dir.write("renamed.yaml", &generator_job("per_user", ""));
    let out = run(&dir, &["renamed.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("\"per_key\"") && out.stderr.contains("--allow-non-restored-state"),
        "{}",
        out.stderr
    );
    assert_eq!(dir.read("out.jsonl"), written);

    // Another max_parallelism.
    dir.write(
        "other-m.yaml",
        &generator_job("per_key", "max_parallelism: 64\n"),
    );
    let out = run(&dir, &["other-m.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("max_parallelism 128") && out.stderr.contains("64"),
        "{}",
        out.stderr
    );

    // One flipped byte in a state file: refused naming the file.
    let state = newest.join("per_key.kg-0-128");
    let mut bytes = std::fs::read(&state).unwrap();
    let (intact, metadata) = (
        bytes.clone(),
        std::fs::read(newest.join("_metadata")).unwrap(),
    );
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&state, &bytes).unwrap();
    let out = run(&dir, &["job.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("per_key.kg-0-128") && out.stderr.contains("checksum"),
        "{}",
        out.stderr
    );
    // Cut short: refused naming the file too.
    std::fs::write(&state, &bytes[..bytes.len() / 2]).unwrap();
    let out = run(&dir, &["job.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(out.stderr.contains("per_key.kg-0-128"), "{}", out.stderr);
    // A folder without _metadata is incomplete.
    std::fs::remove_file(newest.join("_metadata")).unwrap();
    let out = run(&dir, &["job.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(out.stderr.contains("incomplete"), "{}", out.stderr);
    assert_eq!(
        dir.read("out.jsonl"),
        written,
        "the sink's file is untouched"
    );

    // The checkpoint mended: the renamed job runs with --allow-non-restored-state, dropping the
    // state of the vertex it no longer has and saying so.
    std::fs::write(&state, &intact).unwrap();
    std::fs::write(newest.join("_metadata"), &metadata).unwrap();
    let out = run(
        &dir,
        &[
            "renamed.yaml",
            "--restore",
            &chk,
            "--allow-non-restored-state",
        ],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("\"per_key\" is not restored"),
        "{}",
        out.stderr
    );
}

/// A checkpoint whose keyed state was grouped by the key hash before murmur2 (its `_metadata`
/// as format version 2 wrote it: no key hash) is refused with exit 2 naming the hash and the
/// folder, before anything is written; one that names murmur2 is restored.
#[test]
fn a_checkpoint_of_the_old_key_hash_is_refused_with_exit_2() {
    use tidemark_runtime::checkpoint_store::{decode_metadata, encode_file};
    let dir = TempDir::new("state-old-hash");
    let newest = finished_run(&dir);
    let written = dir.read("out.jsonl");
    let chk = newest.display().to_string();
    let meta_path = newest.join("_metadata");
    let current = std::fs::read(&meta_path).unwrap();
    let (meta, version) = decode_metadata(&meta_path, &current).unwrap();
    assert_eq!((meta.key_hash.as_str(), version), ("murmur2", 3));
    // The same `_metadata` as version 2 wrote it (postcard writes a struct as the tuple of its
    // fields): without the key hash.
    let mut old = encode_file(&(meta.job, meta.id, meta.completed_ms, meta.vertices)).unwrap();
    old[8..10].copy_from_slice(&2u16.to_le_bytes());
    std::fs::write(&meta_path, &old).unwrap();
    let out = run(&dir, &["job.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&chk)
            && out.stderr.contains("rustc-hash's FxHasher")
            && out.stderr.contains("checkpoint format version 2")
            && out.stderr.contains("\"murmur2\""),
        "{}",
        out.stderr
    );
    assert_eq!(
        dir.read("out.jsonl"),
        written,
        "nothing written before the refusal"
    );
    // With the key hash recorded it is restored (the job had finished: nothing more to do).
    std::fs::write(&meta_path, &current).unwrap();
    let out = run(&dir, &["job.yaml", "--restore", &chk]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
}

#[test]
fn a_source_that_cannot_resume_is_refused() {
    let dir = TempDir::new("state-stdin");
    dir.write(
        "job.yaml",
        "name: from-stdin
checkpoint: {interval: 20ms, dir: ckpt}
sources:
  lines: {type: stdin}
sinks:
  out: {type: file, input: lines, path: out.jsonl}
",
    );
    let (mut proc, mut stdin) = Proc::spawn_with_stdin(
        dir.path(),
        ["run", "--metrics-addr", "127.0.0.1:0", "job.yaml"],
    );
    use std::io::Write as _;
    writeln!(stdin, r#"{{"a": 1}}"#).unwrap();
    stdin.flush().unwrap();
    let ckpt = dir.join("ckpt");
    wait_until("a checkpoint of the stdin job", || {
        !complete(&ckpt, "from-stdin").is_empty()
    });
    let pid = libc::pid_t::try_from(proc.id()).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let _ = proc.wait();
    drop(stdin);
    let out = run(&dir, &["job.yaml", "--restore", "latest"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("source \"lines\" cannot resume"),
        "{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// The worked cases (need h-state-io's file source and sink positions).

const EVENTS: usize = 1_000_000;

/// W6-style events: `ts` rising 1 ms per event, 40 users, a third not paid.
fn write_events(path: &Path) {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(EVENTS * 80);
    for i in 0..EVENTS {
        let status = if i % 3 == 2 { "open" } else { "paid" };
        let amount = (i * 7919) % 10_000;
        let _ = writeln!(
            text,
            r#"{{"ts":{},"user":"u{}","status":"{status}","amount":{}.{:02}}}"#,
            1_700_000_000_000u64 + i as u64,
            (i * 31) % 40,
            amount / 100,
            amount % 100
        );
    }
    std::fs::write(path, text).unwrap();
}

/// Per (user, window start ms): count and sum of `amount * 0.92` of the paid events, computed
/// from the input as written by [`write_events`].
fn reference() -> BTreeMap<(String, i64), (u64, f64)> {
    let mut r: BTreeMap<(String, i64), (u64, f64)> = BTreeMap::new();
    for i in 0..EVENTS {
        if i % 3 == 2 {
            continue;
        }
        let amount = ((i * 7919) % 10_000) as f64 / 100.0;
        let ts = 1_700_000_000_000i64 + i as i64;
        let e = r
            .entry((format!("u{}", (i * 31) % 40), ts - ts.rem_euclid(1000)))
            .or_default();
        e.0 += 1;
        e.1 += amount * 0.92;
    }
    r
}

const W6_JOB: &str = "name: w6-state
checkpoint:
  interval: 200ms
  dir: ckpt
sources:
  events:
    type: file
    path: events.jsonl
    format: json
    timestamp: ts
    parallelism: 1
    watermarks:
      max_out_of_orderness: 0
operators:
  paid:
    type: filter
    input: events
    where: 'status == \"paid\"'
  eur:
    type: map
    input: paid
    set:
      eur: 'amount * 0.92'
  slow:
    type: map
    input: eur
    cost: 3us
  per_user:
    type: window
    input: slow
    partition: hash
    key: user
    size: 1s
    time: event
    aggregates:
      n: count
      total: {sum: eur}
sinks:
  out:
    type: file
    input: per_user
    parallelism: 1
    path: out.jsonl
";

/// Every window result in `out.jsonl`, checked against the reference: each window once, the
/// same count, the same sum up to summation order.
fn check_output(dir: &TempDir) {
    let text = dir.read("out.jsonl");
    let mut got: BTreeMap<(String, i64), (u64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (
            v["key"].as_str().unwrap().to_string(),
            v["window_start"].as_i64().unwrap(),
        );
        let value = (v["n"].as_u64().unwrap(), v["total"].as_f64().unwrap());
        assert!(
            got.insert(key.clone(), value).is_none(),
            "window twice: {key:?}"
        );
    }
    let want = reference();
    assert_eq!(got.len(), want.len(), "windows");
    for (k, (n, total)) in &want {
        let (gn, gt) = got[k];
        assert_eq!(gn, *n, "count of {k:?}");
        assert!(
            (gt - total).abs() <= 1e-6 * total.abs().max(1.0),
            "sum of {k:?}: {gt} vs {total}"
        );
    }
}

/// Starts `job.yaml` of job `job` in `dir` with `args`; once the sink has written `lines`
/// lines and a checkpoint completed after that (a forced point, not a sleep), sends `signal`
/// and waits for the process to end.
fn signal_at_forced_point(
    dir: &TempDir,
    job: &str,
    args: &[&str],
    lines: usize,
    signal: libc::c_int,
) -> Proc {
    let mut all = vec!["run", "--metrics-addr", "127.0.0.1:0", "job.yaml"];
    all.extend_from_slice(args);
    let mut proc = Proc::spawn(dir.path(), all);
    let out = dir.join("out.jsonl");
    wait_until("output", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.lines().count() >= lines)
    });
    let ckpt = dir.join("ckpt");
    let seen = complete(&ckpt, job).last().map_or(0, |c| c.0);
    wait_until("a checkpoint after that", || {
        complete(&ckpt, job).last().is_some_and(|c| c.0 > seen)
    });
    let pid = libc::pid_t::try_from(proc.id()).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let _ = proc.wait();
    proc
}

/// The W6 job stopped with `signal` half way (see [`signal_at_forced_point`]).
fn run_until_half(dir: &TempDir, args: &[&str], signal: libc::c_int) -> Proc {
    signal_at_forced_point(dir, "w6-state", args, 20_000, signal)
}

fn w6_dir(label: &str) -> TempDir {
    let dir = TempDir::new(label);
    write_events(&dir.join("events.jsonl"));
    dir.write("job.yaml", W6_JOB);
    dir
}

#[test]
fn sigkill_half_way_then_restore_latest_writes_the_uninterrupted_result() {
    let dir = w6_dir("state-w6-kill");
    run_until_half(&dir, &["--parallelism", "2"], libc::SIGKILL);
    let out = run(
        &dir,
        &["job.yaml", "--parallelism", "2", "--restore", "latest"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("restoring checkpoint"),
        "{}",
        out.stderr
    );
    check_output(&dir);
}

/// An input file that changed since the checkpoint (here: cut shorter than the position the
/// checkpoint holds) is refused as a usage error, exit 2, before the restore is announced and
/// before anything is written.
#[test]
fn a_changed_input_file_is_refused_with_exit_2_before_the_restore_starts() {
    let dir = w6_dir("state-w6-changed");
    run_until_half(&dir, &["--parallelism", "2"], libc::SIGKILL);
    let events = dir.join("events.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, &text[..text.len() / 10]).unwrap();
    let written = std::fs::read(dir.join("out.jsonl")).unwrap();
    let out = run(
        &dir,
        &["job.yaml", "--parallelism", "2", "--restore", "latest"],
    );
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("error: cannot restore checkpoint ")
            && out.stderr.contains("cannot restore the file source input"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("restoring checkpoint"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read(dir.join("out.jsonl")).unwrap(), written);
}

#[test]
fn sigkill_half_way_then_restore_at_parallelism_3_writes_the_same() {
    let dir = w6_dir("state-w6-rescale");
    run_until_half(&dir, &["--parallelism", "2"], libc::SIGKILL);
    let out = run(
        &dir,
        &["job.yaml", "--parallelism", "3", "--restore", "latest"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    check_output(&dir);
}

#[test]
fn sigterm_half_way_keeps_open_windows_for_the_restore() {
    let dir = w6_dir("state-w6-term");
    let proc = run_until_half(&dir, &["--parallelism", "2"], libc::SIGTERM);
    assert!(
        proc.stderr().contains("stopped with checkpoint"),
        "{}",
        proc.stderr()
    );
    let out = run(
        &dir,
        &["job.yaml", "--parallelism", "2", "--restore", "auto"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    check_output(&dir);
}

// ---------------------------------------------------------------------------------------------
// docs/state.md: the systemd unit's and the Kubernetes manifest's command lines.

/// The command lines the docs ship: the unit's `ExecStart=` and the manifest's `command`, and
/// the manifest's volume mount paths.
fn documented_commands() -> (Vec<String>, Vec<String>, Vec<String>) {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/state.md"))
        .expect("docs/state.md");
    let unit: Vec<String> = doc
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart= line")
        .split_whitespace()
        .map(String::from)
        .collect();
    let start = doc.find("apiVersion: apps/v1").expect("the manifest");
    let manifest = &doc[start..start + doc[start..].find("```").expect("its end")];
    let manifest: serde_json::Value =
        serde_yaml_ng::from_str(manifest).expect("the manifest parses");
    let container = &manifest["spec"]["template"]["spec"]["containers"][0];
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("a list: {v}"))
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let command = strings(&container["command"]);
    let mounts = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap().to_string())
        .collect();
    (unit, command, mounts)
}

/// Runs a documented command line in `dir`: the binary under test for `tidemark`, the test's
/// job file for `/etc/tidemark/job.yaml`, a free port for the metrics address.
fn run_documented(dir: &TempDir, command: &[String]) -> common::Output {
    assert!(command[0].ends_with("tidemark"), "{command:?}");
    let args: Vec<String> = command[1..]
        .iter()
        .map(|a| match a.as_str() {
            "/etc/tidemark/job.yaml" => dir.join("job.yaml").display().to_string(),
            a if a.ends_with(":9249") => "127.0.0.1:0".to_string(),
            a => a.to_string(),
        })
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--restore", "auto"]),
        "{command:?}"
    );
    tidemark(dir.path(), args)
}

#[test]
fn the_documented_unit_and_manifest_commands_start_and_restart_the_job() {
    let (unit, command, mounts) = documented_commands();
    // The pod keeps its checkpoints on the volume mounted where the job file writes them.
    assert!(
        mounts.iter().any(|m| m == "/var/lib/tidemark/checkpoints"),
        "{mounts:?}"
    );
    for line in [unit, command] {
        let dir = TempDir::new("state-supervised");
        dir.write(
            "job.yaml",
            &generator_job("per_key", "").replace("dir: ckpt", "dir: checkpoints"),
        );
        // First start: nothing to restore, a fresh run to the end.
        let first = run_documented(&dir, &line);
        assert_eq!(first.code(), 0, "{line:?}: {}", first.stderr);
        assert!(first.stderr.contains("starting fresh"), "{}", first.stderr);
        assert!(!complete(&dir.join("checkpoints"), "gen-state").is_empty());
        let written = dir.read("out.jsonl");
        // The supervisor restarts the same command: the job finished, nothing runs again.
        let again = run_documented(&dir, &line);
        assert_eq!(again.code(), 0, "{}", again.stderr);
        assert!(again.stderr.contains("finished"), "{}", again.stderr);
        assert_eq!(dir.read("out.jsonl"), written);
    }
}

// ---------------------------------------------------------------------------------------------
// SIGTERM with a checkpoint directory: open windows stay in the last checkpoint (`--drain`
// fires them).

/// An unbounded generator job: 100 ms event-time windows per key into a file.
const ENDLESS: &str = "name: endless
checkpoint: {interval: 50ms, dir: ckpt}
chaining: false   # the window behind a channel: an input that ends must not fire it either
sources:
  gen:
    type: generator
    rate: 20000
    keys: 20
    watermarks:
      max_out_of_orderness: 0
operators:
  per_key:
    type: window
    input: gen
    size: 100ms
    time: event
    aggregates:
      n: count
sinks:
  out:
    type: file
    input: per_key
    path: out.jsonl
";

/// Runs [`ENDLESS`] until the sink has written some windows and a checkpoint completed after
/// that, then sends SIGTERM; returns standard error, the window progress (ms) and the number
/// of keys with state in the newest checkpoint, and the greatest `window_end` written.
fn terminated(args: &[&str]) -> (String, i64, usize, i64) {
    use tidemark_runtime::checkpoint_store::read_checkpoint;
    let dir = TempDir::new("state-sigterm");
    dir.write("job.yaml", ENDLESS);
    let mut proc = signal_at_forced_point(&dir, "endless", args, 40, libc::SIGTERM);
    let code = proc.wait_code();
    let stderr = proc.stderr();
    assert_eq!(code, 0, "{stderr}");
    let (_, newest) = complete(&dir.join("ckpt"), "endless").pop().unwrap();
    let loaded = read_checkpoint(&newest).unwrap();
    let keyed = loaded.files["per_key"][0].keyed.clone().unwrap();
    let progress = keyed.shared::<i64>().unwrap()[0].div_euclid(1_000_000);
    let last_end = dir
        .read("out.jsonl")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["window_end"].as_i64().unwrap()
        })
        .max()
        .unwrap();
    (stderr, progress, keyed.len(), last_end)
}

#[test]
fn sigterm_with_a_checkpoint_directory_keeps_open_windows_in_the_last_checkpoint() {
    let (stderr, progress, keys, last_end) = terminated(&[]);
    assert!(stderr.contains("stopped with checkpoint"), "{stderr}");
    // The last checkpoint holds the open windows of the keys …
    assert!(keys > 0, "no window state in the last checkpoint");
    // … and none of them was fired: every window written ended by the checkpoint's progress.
    assert!(
        last_end <= progress + 1,
        "a window ending at {last_end} ms was fired past the progress {progress} ms"
    );
}

#[test]
fn sigterm_with_drain_fires_the_open_windows() {
    let (stderr, progress, _, last_end) = terminated(&["--drain"]);
    assert!(!stderr.contains("stopped with checkpoint"), "{stderr}");
    assert!(
        last_end > progress + 1,
        "--drain: the open windows (past {progress} ms) were not fired; last end {last_end} ms"
    );
}

// ---------------------------------------------------------------------------------------------
// The README's "Stop and continue": docs/examples/state.yaml killed half way and restored.

/// Per key: the summed counts and totals of every window in `text`, and whether any window
/// (key, start) came twice.
fn per_key(text: &str) -> (BTreeMap<i64, (u64, f64)>, bool) {
    let mut keys: BTreeMap<i64, (u64, f64)> = BTreeMap::new();
    let mut windows = std::collections::BTreeSet::new();
    let mut twice = false;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_i64().unwrap();
        twice |= !windows.insert((key, v["window_start"].as_i64().unwrap()));
        let e = keys.entry(key).or_default();
        e.0 += v["n"].as_u64().unwrap();
        e.1 += v["total"].as_f64().unwrap();
    }
    (keys, twice)
}

#[test]
fn the_readme_example_killed_half_way_continues_exactly() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/state.yaml"
    ))
    .expect("docs/examples/state.yaml");
    let args = [
        "run",
        "--metrics-addr",
        "127.0.0.1:0",
        "--seed",
        "7",
        "state.yaml",
    ];

    // The reference: the same job and seed, never interrupted. (The schedule starts at the
    // wall clock, so window bounds differ between runs; what a key counted and summed does not.)
    let whole = TempDir::new("state-example-whole");
    whole.write("state.yaml", &example);
    let out = tidemark(whole.path(), args);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let (want, twice) = per_key(&whole.read("state-out.jsonl"));
    assert!(!twice);
    assert_eq!(want.values().map(|v| v.0).sum::<u64>(), 200_000);

    // Killed once some windows are out and a checkpoint completed after them, then restored.
    let dir = TempDir::new("state-example-kill");
    dir.write("state.yaml", &example);
    let mut proc = Proc::spawn(dir.path(), args);
    let out_file = dir.join("state-out.jsonl");
    wait_until("some window results", || {
        std::fs::read_to_string(&out_file).is_ok_and(|t| t.lines().count() >= 100)
    });
    let ckpt = dir.join("checkpoints");
    let seen = complete(&ckpt, "state-example").last().map_or(0, |c| c.0);
    wait_until("a checkpoint after them", || {
        complete(&ckpt, "state-example")
            .last()
            .is_some_and(|c| c.0 > seen)
    });
    let pid = libc::pid_t::try_from(proc.id()).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let _ = proc.wait();
    let mut restore = args.to_vec();
    restore.extend(["--restore", "latest"]);
    let out = tidemark(dir.path(), restore);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("restoring checkpoint"),
        "{}",
        out.stderr
    );
    let (got, twice) = per_key(&dir.read("state-out.jsonl"));
    assert!(!twice, "a window written twice");
    assert_eq!(got.len(), want.len(), "keys");
    for (key, (n, total)) in &want {
        let (gn, gt) = got[key];
        assert_eq!(gn, *n, "count of key {key}");
        assert!(
            (gt - total).abs() <= 1e-6 * total.abs().max(1.0),
            "sum of key {key}: {gt} vs {total}"
        );
    }
}

/// A generator with `start_time` into 1 s event-time windows, at P=2.
const EVENT_TIME_JOB: &str = "name: gen-event-time
parallelism: 2
sources:
  gen:
    type: generator
    count: 20000
    keys: 5
    start_time: 2026-01-01T00:00:00Z
    event_rate: 1000
    watermarks:
      max_out_of_orderness: 1s
operators:
  per_key:
    type: window
    input: gen
    key: key
    size: 1s
    time: event
    aggregates:
      n: count
      total: {sum: value}
sinks:
  out:
    type: file
    input: per_key
    parallelism: 1
    path: out.jsonl
";

#[test]
fn two_runs_with_the_same_seed_and_start_time_write_the_same_windows() {
    // Event time from `start_time`, not the wall clock: two runs started at different moments
    // with one seed can be compared line by line (after sorting: two subtasks write the sink).
    // Counter values: their sums are exact whatever order the window adds them in (floating
    // sums of random values from two subtasks can differ in their last digits).
    let lines = |label: &str| {
        let dir = TempDir::new(label);
        dir.write("job.yaml", EVENT_TIME_JOB);
        let out = run(&dir, &["job.yaml", "--seed", "7"]);
        assert_eq!(out.code(), 0, "{}", out.stderr);
        let mut lines: Vec<String> = dir.read("out.jsonl").lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    let first = lines("state-seed-a");
    std::thread::sleep(Duration::from_millis(1_100));
    let second = lines("state-seed-b");
    assert!(first == second, "the two runs differ");
    // 20 s of event time from 2026-01-01: every record in the window its number says.
    const START_MS: i64 = 1_767_225_600_000;
    let mut per_window: BTreeMap<i64, u64> = BTreeMap::new();
    for line in &first {
        let w: serde_json::Value = serde_json::from_str(line).unwrap();
        *per_window
            .entry(w["window_start"].as_i64().unwrap())
            .or_default() += w["n"].as_u64().unwrap();
    }
    let expected: BTreeMap<i64, u64> = (0..20).map(|s| (START_MS + s * 1_000, 1_000)).collect();
    assert_eq!(per_window, expected);
}
