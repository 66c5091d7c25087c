//! `tidemark run --restore latest|auto|PATH`: which checkpoint to start from, reading it whole
//! and checking it against the job before anything starts (exit 2 naming the cause and the
//! folder), the parallelism that sources, sinks and other non-keyed vertices keep, and the
//! marker a finished job leaves.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use tidemark_runtime::checkpoint_store::{
    complete_checkpoints, folder_name, highest_id, job_dir, read_checkpoint, LoadedCheckpoint,
    FINISHED,
};
use tidemark_runtime::{JobGraph, VertexKind};

/// What `--restore` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreMode {
    /// The newest complete checkpoint of the job under the checkpoint directory; none is an
    /// error.
    Latest,
    /// For supervisors: the newest complete checkpoint if there is one, else a fresh start;
    /// nothing at all after the job finished.
    Auto,
    /// A `chk-<n>` folder.
    Path(PathBuf),
}

/// Parses `--restore`'s value.
pub fn parse_restore(s: &str) -> Result<RestoreMode, String> {
    match s.trim() {
        "" => Err("expected latest, auto or the path of a chk-<n> folder".into()),
        "latest" => Ok(RestoreMode::Latest),
        "auto" => Ok(RestoreMode::Auto),
        path => Ok(RestoreMode::Path(PathBuf::from(path))),
    }
}

/// What a run starts from.
#[derive(Debug)]
pub enum Start {
    /// Nothing restored.
    Fresh,
    /// This checkpoint, read whole and checked.
    Restore(Box<LoadedCheckpoint>),
    /// `--restore auto` after the job finished: nothing to do (the message says so).
    Finished(String),
}

/// Resolves `mode` for job `job` with checkpoint directory `dir`, reading the checkpoint whole
/// (every file's header, length and checksum). Errors name the cause and the folder.
pub fn resolve(mode: Option<&RestoreMode>, job: &str, dir: Option<&Path>) -> anyhow::Result<Start> {
    let Some(mode) = mode else {
        return Ok(Start::Fresh);
    };
    let path =
        match mode {
            RestoreMode::Path(p) => p.clone(),
            RestoreMode::Latest | RestoreMode::Auto => {
                let Some(dir) = dir else {
                    bail!(
                    "--restore {}: the job has no checkpoint directory: set checkpoint.dir in the \
                     job file or -D execution.checkpointing.dir=…",
                    if *mode == RestoreMode::Auto { "auto" } else { "latest" }
                );
                };
                let job_dir = job_dir(dir, job);
                let finished = job_dir.join(FINISHED);
                if *mode == RestoreMode::Auto && finished.is_file() {
                    return Ok(Start::Finished(format!(
                    "job \"{job}\" finished (marker {}): nothing to restore or run; delete the \
                     marker to run it again",
                    finished.display()
                )));
                }
                let complete = complete_checkpoints(&job_dir)?;
                match complete.last() {
                    Some((_, p)) => p.clone(),
                    None if *mode == RestoreMode::Auto => return Ok(Start::Fresh),
                    None => bail!(
                        "--restore latest: no complete checkpoint of job \"{job}\" in {}",
                        job_dir.display()
                    ),
                }
            }
        };
    let loaded = read_checkpoint(&path)
        .map_err(|e| anyhow!("cannot restore from {}: {e}", path.display()))?;
    if loaded.metadata.job != job {
        bail!(
            "cannot restore from {}: it is a checkpoint of job \"{}\", not \"{job}\"",
            path.display(),
            loaded.metadata.job
        );
    }
    Ok(Start::Restore(Box::new(loaded)))
}

/// The parallelism every non-keyed vertex of the checkpoint keeps (sources and file sinks:
/// their positions and files belong to their subtasks; only keyed vertices rescale).
pub fn kept_parallelism(loaded: &LoadedCheckpoint) -> BTreeMap<String, NonZeroUsize> {
    loaded
        .metadata
        .vertices
        .iter()
        .filter(|v| !v.keyed)
        .filter_map(|v| Some((v.id.clone(), NonZeroUsize::new(v.parallelism as usize)?)))
        .collect()
}

/// Checks `loaded` against the job's `graph`: every vertex with state is still there (unless
/// `allow_non_restored`), keyed ones with the same `max_parallelism` and no more subtasks than
/// that, and every source can resume. Returns the notes to print (state left behind).
pub fn check(
    loaded: &LoadedCheckpoint,
    graph: &JobGraph,
    allow_non_restored: bool,
) -> anyhow::Result<Vec<String>> {
    let folder = loaded.path.display();
    let mut notes = Vec::new();
    for v in &loaded.metadata.vertices {
        let Some(id) = graph.find(&v.id) else {
            let has_state = loaded.files.get(&v.id).is_some_and(|files| {
                files.iter().any(|f| {
                    f.keyed.as_ref().is_some_and(|k| !k.is_empty())
                        || f.local.is_some()
                        || f.position.is_some()
                })
            });
            if allow_non_restored || !has_state {
                notes.push(format!(
                    "the checkpoint's state of vertex \"{}\" is not restored: the job has no such \
                     vertex (--allow-non-restored-state)",
                    v.id
                ));
                continue;
            }
            bail!(
                "cannot restore from {folder}: the checkpoint holds state of vertex \"{}\", which \
                 the job no longer has (renamed or removed?); pass --allow-non-restored-state to \
                 start without it",
                v.id
            );
        };
        let vertex = graph.vertex(id);
        if v.keyed && vertex.max_parallelism() != v.max_parallelism {
            bail!(
                "cannot restore from {folder}: vertex \"{}\" has max_parallelism {} in the \
                 checkpoint and {} now; keyed state is stored in key groups, so max_parallelism \
                 must stay the same",
                v.id,
                v.max_parallelism,
                vertex.max_parallelism()
            );
        }
    }
    // Then the sources (a vertex gone is the likelier mistake, and named first).
    for v in &loaded.metadata.vertices {
        if graph.find(&v.id).is_some() && v.kind == VertexKind::Source.as_str() {
            let files = loaded.files.get(&v.id).map(Vec::as_slice).unwrap_or(&[]);
            if files.iter().any(|f| f.position.is_none()) {
                bail!(
                    "cannot restore from {folder}: source \"{}\" cannot resume from a checkpoint \
                     (it recorded no position: a source such as stdin cannot be read again)",
                    v.id
                );
            }
        }
    }
    Ok(notes)
}

/// The first id of this run's checkpoints follows this one: the restored checkpoint's or the
/// highest in the folder (complete or not), so ids are never reused.
pub fn last_id(job_dir: &Path, restored: Option<u64>) -> u64 {
    highest_id(job_dir).max(restored.unwrap_or(0))
}

/// Writes the marker of a finished job (`--restore auto` then starts nothing).
pub fn write_finished(job_dir: &Path, last_checkpoint: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(job_dir)?;
    let path = job_dir.join(FINISHED);
    std::fs::write(
        &path,
        format!(
            "finished; last checkpoint {}\n",
            if last_checkpoint == 0 {
                "none".to_string()
            } else {
                folder_name(last_checkpoint)
            }
        ),
    )
    .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// Removes the marker of an earlier finished run, as a fresh run starts.
pub fn clear_finished(job_dir: &Path) {
    let _ = std::fs::remove_file(job_dir.join(FINISHED));
}

#[cfg(test)]
mod tests {
    use super::*;

    use tidemark_runtime::checkpoint_store::{Metadata, StateFile, VertexMeta};
    use tidemark_runtime::keyed_state::KeyedSnapshot;
    use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
    use tidemark_runtime::{Partitioning, Value};

    /// A checkpoint of `src` (a source, with a position when `resumable`) -> keyed `per_key`
    /// (128 key groups, one key) -> `out`.
    fn loaded(resumable: bool) -> LoadedCheckpoint {
        let vertex = |id: &str, kind: &str, keyed: bool| VertexMeta {
            id: id.into(),
            kind: kind.into(),
            parallelism: 1,
            max_parallelism: 128,
            keyed,
            files: vec![],
        };
        let mut keyed = KeyedSnapshot::new(128);
        keyed.put(&Value::Int(3), &1u64).unwrap();
        let file = |id: &str| StateFile {
            vertex: id.into(),
            parallelism: 1,
            ..StateFile::default()
        };
        let mut files = BTreeMap::new();
        files.insert(
            "src".to_string(),
            vec![StateFile {
                position: resumable.then(|| vec![7]),
                ..file("src")
            }],
        );
        files.insert(
            "per_key".to_string(),
            vec![StateFile {
                key_groups: Some((0, 128)),
                keyed: Some(keyed),
                ..file("per_key")
            }],
        );
        files.insert("out".to_string(), vec![file("out")]);
        LoadedCheckpoint {
            path: "ck/j/chk-4".into(),
            metadata: Metadata {
                job: "j".into(),
                id: 4,
                completed_ms: 0,
                vertices: vec![
                    vertex("src", "source", false),
                    vertex("per_key", "operator", true),
                    vertex("out", "sink", false),
                ],
                key_hash: tidemark_runtime::key_hash::KEY_HASH.into(),
            },
            files,
        }
    }

    /// The job now: `src` -> `keyed` (a keyed vertex named so, with `max` key groups) -> `out`.
    fn graph(keyed: &str, max: u32) -> JobGraph {
        let mut g = JobGraph::new("j");
        let src = g
            .add_source("src", 1, |_| Ok(Box::new(CountingSource::new(1))))
            .unwrap();
        let op = g
            .add_operator(keyed, 1, |_| Ok(Box::new(MapOperator(|v| v))))
            .unwrap();
        g.set_keyed(op, true);
        g.set_max_parallelism(op, max);
        let out = g.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
        g.connect(src, op, Partitioning::Hash).unwrap();
        g.connect(op, out, Partitioning::Forward).unwrap();
        g
    }

    #[test]
    fn a_checkpoint_that_does_not_fit_is_refused_naming_the_cause() {
        assert!(check(&loaded(true), &graph("per_key", 128), false)
            .unwrap()
            .is_empty());
        // The keyed vertex renamed: refused, unless its state may be left behind.
        let e = check(&loaded(true), &graph("per_user", 128), false).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("ck/j/chk-4") && e.contains("\"per_key\"") && e.contains("--allow"),
            "{e}"
        );
        let notes = check(&loaded(true), &graph("per_user", 128), true).unwrap();
        assert!(
            notes.len() == 1 && notes[0].contains("\"per_key\""),
            "{notes:?}"
        );
        // Another max_parallelism.
        let e = check(&loaded(true), &graph("per_key", 64), false).unwrap_err();
        assert!(e.to_string().contains("max_parallelism 128"), "{e}");
        // A source that recorded no position.
        let e = check(&loaded(false), &graph("per_key", 128), false).unwrap_err();
        assert!(
            e.to_string().contains("source \"src\" cannot resume"),
            "{e}"
        );
        // Only non-keyed vertices keep the checkpoint's parallelism.
        let kept: Vec<String> = kept_parallelism(&loaded(true)).into_keys().collect();
        assert_eq!(kept, ["out", "src"]);
    }

    #[test]
    fn restore_values() {
        assert_eq!(parse_restore("latest"), Ok(RestoreMode::Latest));
        assert_eq!(parse_restore("auto"), Ok(RestoreMode::Auto));
        assert_eq!(
            parse_restore("ck/job/chk-3"),
            Ok(RestoreMode::Path("ck/job/chk-3".into()))
        );
        assert!(parse_restore(" ").is_err());
    }

    #[test]
    fn latest_without_a_checkpoint_names_the_folder_and_auto_starts_fresh() {
        let dir = std::env::temp_dir().join(format!("tidemark-restore-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let e = resolve(Some(&RestoreMode::Latest), "j", Some(&dir)).unwrap_err();
        assert!(
            e.to_string().contains(&dir.join("j").display().to_string()),
            "{e}"
        );
        assert!(matches!(
            resolve(Some(&RestoreMode::Auto), "j", Some(&dir)).unwrap(),
            Start::Fresh
        ));
        write_finished(&dir.join("j"), 4).unwrap();
        assert!(matches!(
            resolve(Some(&RestoreMode::Auto), "j", Some(&dir)).unwrap(),
            Start::Finished(_)
        ));
        clear_finished(&dir.join("j"));
        let e = resolve(Some(&RestoreMode::Path(dir.join("nope"))), "j", None).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        // A checkpoint of another job.
        let other = Metadata {
            job: "other".into(),
            id: 2,
            completed_ms: 0,
            vertices: vec![],
            key_hash: tidemark_runtime::key_hash::KEY_HASH.into(),
        };
        let (folder, _) = tidemark_runtime::checkpoint_store::write_checkpoint(
            &dir.join("other"),
            other,
            vec![],
            3,
        )
        .unwrap();
        let e = resolve(Some(&RestoreMode::Path(folder)), "j", None).unwrap_err();
        assert!(
            e.to_string()
                .contains("checkpoint of job \"other\", not \"j\""),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
