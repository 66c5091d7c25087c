//! `tidemark`: run, validate and plan Tidemark job files.
//!
//! | module | holds |
//! |---|---|
//! | [`args`] | the command line (clap) |
//! | [`app`] | command dispatch, `validate` and `plan` |
//! | [`run`] | `run`: start, wait, stop, report, linger |
//! | [`jobfile`] | the job-file model and its parsing |
//! | [`locate`] | line and column of keys in the YAML text |
//! | [`build`] | job file + settings → runtime graph and config |
//! | [`settings`] | precedence: flag > `-D` > job file > default |
//! | [`report`] | the final report (JSON and table) |
//! | [`endpoint`] | the Prometheus `/metrics` server |
//! | [`signals`], [`progress`] | SIGINT/SIGTERM; the live status line |
//! | [`error`], [`suggest`] | errors, exit codes, "did you mean" |

mod app;
mod args;
mod build;
mod endpoint;
mod error;
#[cfg(test)]
mod event_time_jobs;
mod jobfile;
mod locate;
mod progress;
mod report;
mod run;
mod settings;
mod signals;
mod suggest;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
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
