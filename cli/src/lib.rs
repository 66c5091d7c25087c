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
//! | `log` | standard error through `tracing`: the libraries' warnings as `tidemark: warning: …` lines, the `RUST_LOG` log |
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
mod job_fields;
pub mod jobfile;
#[cfg(feature = "kafka")]
mod kafka_clock;
mod live;
mod load;
pub mod locate;
mod log;
mod progress;
pub mod redact;
mod report;
pub mod restore;
mod run;
mod setting_flags;
pub mod settings;
mod signals;
mod spanned;
pub mod substitute;
mod suggest;
mod values;
mod yaml;

use std::process::ExitCode;

pub use load::{LoadError, LoadedJob, Loader};
pub use tidemark_operators::{Component, Registry};

/// The `tidemark` command: parses the command line, runs the command, prints any error and
/// returns the exit code.
pub fn main() -> ExitCode {
    use clap::Parser as _;
    log::init();
    let cli = args::Cli::parse();
    match app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            error::print(&e);
            ExitCode::from(error::exit_code(&e))
        }
    }
}

/// The library guide (`docs/library.md`), compiled and run as a doc test so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
pub struct LibraryGuide;
