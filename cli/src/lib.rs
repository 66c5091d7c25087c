//! # tidemark-cli
//!
//! The `tidemark` command, and the library behind it that loads YAML job files: a job file
//! becomes a runtime [`JobGraph`](tidemark_runtime::JobGraph) plus its
//! [`JobConfig`](tidemark_runtime::JobConfig), with every error located in the file. Library
//! users can load job files with their own component types ([`Loader::register`]).
//!
//! ## Map of the crate
//! | module | holds |
//! |---|---|
//! | [`Loader`], [`LoadedJob`], [`LoadError`] | the loading API: file → settings → graph |
//! | [`jobfile`] | the job-file model and its parsing ([`JobFile`](jobfile::JobFile)) |
//! | [`locate`] | line and column of keys in the YAML text |
//! | [`build`] | job file + settings → runtime graph and config, with a component [`Registry`] |
//! | [`settings`] | precedence: flag > `-D` > job file > default |
//! | [`error`] | job-file errors ([`JobFileErrors`](error::JobFileErrors)), exit codes, printing |
//! | [`substitute`] | `${VAR}` / `${VAR:-default}` / `$$` in job files |
//! | [`instance`] | this process's name among the instances of a job: `--instance-id`, else host and pid |
//! | [`redact`] | the one rule for secrets: keys with password/secret/token/credential print as `***` |
//! | [`args`] | the command line (clap) |
//! | `app`, `run` | command dispatch, `validate`, `plan`; `run` |
//! | `dev_kafka` | `dev-kafka`: a mock Kafka cluster in the foreground (feature `kafka`) |
//! | `endpoint`, `live` | the HTTP endpoint: `/metrics`, the live view's `/api/v1/job`, `/api/v1/metrics`, the probes; TLS and basic auth (`--web-config-file`) |
//! | `health` | `/livez`, `/readyz`, `tidemark_job_ready`, `tidemark_job_stalled`: the run's phase and the stall watchdog |
//! | `report`, `signals`, `progress`, `suggest` | the final report, SIGINT/SIGTERM, the status line, "did you mean" |
//!
//! ## Example
//! ```
//! use tidemark_cli::Loader;
//!
//! let text = "
//! name: demo
//! sources:
//!   numbers: {type: generator, count: 1000, keys: 10}
//! operators:
//!   sums: {type: reduce, input: numbers, aggregate: sum, parallelism: 2}
//! sinks:
//!   out: {type: discard, input: sums}
//! ";
//! let job = Loader::new().define("metrics.latency.interval", "0").load_str(text, "demo.yaml", ".")?;
//! let result = tidemark_runtime::run(job.graph, job.config)?;
//! assert_eq!(result.metrics.vertex("out").unwrap().subtasks[0].records_in(), 1000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod app;
pub mod args;
pub mod build;
mod deadline;
#[cfg(feature = "kafka")]
mod dev_kafka;
mod endpoint;
pub mod error;
mod exchange;
mod health;
pub mod instance;
pub mod jobfile;
#[cfg(feature = "kafka")]
mod kafka_clock;
mod live;
pub mod locate;
mod progress;
pub mod redact;
mod report;
pub mod restore;
mod run;
pub mod settings;
mod signals;
pub mod substitute;
mod suggest;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use tidemark_operators::{Component, Registry};

use crate::args::SettingFlags;
use crate::error::JobFileErrors;
use crate::jobfile::JobFile;
use crate::settings::{resolve, FileSettings, Settings, SettingsError};

/// The `tidemark` command: parses the command line, runs the command, prints any error and
/// returns the exit code.
pub fn main() -> ExitCode {
    use clap::Parser as _;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = args::Cli::parse();
    match app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            error::print(&e);
            ExitCode::from(error::exit_code(&e))
        }
    }
}

/// Loads job files: reads the YAML, resolves the settings (flags > `-D` > job file > default)
/// and builds the graph with the components of its [`Registry`].
#[derive(Debug, Clone)]
pub struct Loader {
    registry: Registry,
    flags: SettingFlags,
    defines: Vec<(String, String)>,
    metrics_addr: Option<String>,
    seed: Option<u64>,
    check_inputs: bool,
    /// Vertices whose parallelism is fixed whatever the file and flags say (a restore keeps
    /// the checkpoint's for every vertex that is not keyed).
    parallelism_overrides: std::collections::BTreeMap<String, std::num::NonZeroUsize>,
    /// What the job's Kafka parts share (instance name, clock offsets, series, timeout).
    #[cfg(feature = "kafka")]
    kafka: std::sync::Arc<tidemark_kafka::KafkaJob>,
}

impl Default for Loader {
    fn default() -> Self {
        Loader::new()
    }
}

impl Loader {
    /// A loader with the built-in components (with the `kafka` feature, the Kafka source
    /// and sink too) and no overrides.
    pub fn new() -> Self {
        #[allow(unused_mut)]
        let mut loader = Loader::with_registry(Registry::builtin());
        #[cfg(feature = "kafka")]
        for component in loader.kafka.components() {
            loader.registry.register(component);
        }
        loader
    }

    /// A loader with the components of `registry`.
    pub fn with_registry(registry: Registry) -> Self {
        Loader {
            registry,
            flags: SettingFlags::default(),
            defines: Vec::new(),
            metrics_addr: None,
            seed: None,
            check_inputs: false,
            parallelism_overrides: Default::default(),
            #[cfg(feature = "kafka")]
            kafka: tidemark_kafka::KafkaJob::new(),
        }
    }

    /// The Kafka context of the jobs this loader builds: set the instance name and
    /// `--kafka-timeout` on it before the job starts, read its series. The `kafka` source and
    /// sink of [`Loader::new`] and every exchange use it.
    #[cfg(feature = "kafka")]
    pub fn kafka(&self) -> &std::sync::Arc<tidemark_kafka::KafkaJob> {
        &self.kafka
    }

    /// Adds (or replaces) a component type job files can name.
    pub fn register(&mut self, component: Component) -> &mut Self {
        self.registry.register(component);
        self
    }

    /// The components job files can name.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A setting by its `-D` key (`metrics.latency.interval`, `parallelism.default`, …): it
    /// overrides the job file; later ones win.
    pub fn define(mut self, key: &str, value: &str) -> Self {
        self.defines.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Settings from command-line flags: they override `-D` and the job file.
    pub fn flags(mut self, flags: SettingFlags) -> Self {
        self.flags = flags;
        self
    }

    /// The metrics address given on the command line, if any.
    pub fn metrics_addr(mut self, addr: Option<String>) -> Self {
        self.metrics_addr = addr;
        self
    }

    /// The seed for generators and marker routing (random when `None`).
    pub fn seed(mut self, seed: Option<u64>) -> Self {
        self.seed = seed;
        self
    }

    /// Fixes the parallelism of the vertices named (a restore keeps the checkpoint's for every
    /// vertex that is not keyed).
    pub fn parallelism_overrides(
        mut self,
        overrides: std::collections::BTreeMap<String, std::num::NonZeroUsize>,
    ) -> Self {
        self.parallelism_overrides = overrides;
        self
    }

    /// Whether sources check now that their input files exist (as `tidemark validate` does),
    /// rather than failing when the job starts.
    pub fn check_inputs(mut self, check: bool) -> Self {
        self.check_inputs = check;
        self
    }

    /// Loads the job file at `path`; relative paths in it resolve against its folder.
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<LoadedJob, LoadError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        self.load_str(&text, &path.display().to_string(), dir)
    }

    /// Loads a job file's `text`; `file` names it in errors and relative paths resolve against
    /// `dir`.
    pub fn load_str(
        &self,
        text: &str,
        file: &str,
        dir: impl Into<PathBuf>,
    ) -> Result<LoadedJob, LoadError> {
        let mut job = JobFile::parse(text, file)?;
        job.dir = dir.into();
        for v in &mut job.vertices {
            if let Some(p) = self.parallelism_overrides.get(&v.id) {
                v.parallelism = Some(*p);
            }
        }
        let settings = resolve(
            &FileSettings::of(&job),
            &self.flags,
            self.metrics_addr.as_deref(),
            &self.defines,
        );
        let settings = match settings {
            Ok(s) => s,
            // The job file's own errors first: they are what the user edits.
            Err(e) if job.problems.is_empty() => return Err(e.into()),
            Err(_) => return Err(JobFileErrors(job.problems).into()),
        };
        // `-D pipeline.max-parallelism` over the file's top-level `max_parallelism`.
        job.max_parallelism = settings.max_parallelism;
        let graph = build::build_graph_in(
            &job,
            settings.parallelism,
            &self.registry,
            self.check_inputs,
            #[cfg(feature = "kafka")]
            &self.kafka,
        )?;
        let config = build::job_config(&settings, self.seed);
        Ok(LoadedJob {
            job,
            settings,
            graph,
            config,
        })
    }
}

/// A loaded job: the parsed file, the settings after precedence, the graph and the runtime
/// configuration, ready for [`tidemark_runtime::run`] or [`tidemark_runtime::start`].
#[derive(Debug)]
pub struct LoadedJob {
    /// The job file as parsed.
    pub job: JobFile,
    /// The settings after precedence.
    pub settings: Settings,
    /// The job graph.
    pub graph: tidemark_runtime::JobGraph,
    /// The runtime configuration from the settings.
    pub config: tidemark_runtime::JobConfig,
}

/// Why a job file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read job file {}: {source}", path.display())]
    Read {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The job file has errors: every one, in file order.
    #[error("{0}")]
    JobFile(#[from] JobFileErrors),
    /// A `-D` or flag is invalid.
    #[error("{0}")]
    Settings(#[from] SettingsError),
}

/// The library guide (`docs/library.md`), compiled and run as a doc test so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
pub struct LibraryGuide;
