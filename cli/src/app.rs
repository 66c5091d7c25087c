//! The commands: dispatch, and the small ones (`validate`, `plan`). `run` has its own module.

use crate::args::{Cli, Command, PlanArgs, PlanFormat, ValidateArgs};
use crate::build::build_graph;
use crate::error::EXIT_OK;
use crate::jobfile::JobFile;
use std::num::NonZeroUsize;
use tidemark_runtime::ExecutionPlan;

/// Runs the command; returns the exit code, or an error whose kind sets it.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Run(args) => crate::run::run(args),
        Command::Validate(args) => validate(args),
        Command::Plan(args) => plan(args),
    }
}

/// Loads, checks and plans a job file with the file's own settings, unless `parallelism` or
/// `no_chaining` override them.
fn load_plan(
    path: &std::path::Path,
    parallelism: Option<NonZeroUsize>,
    no_chaining: bool,
) -> anyhow::Result<ExecutionPlan> {
    let job = JobFile::load(path)?;
    let chaining = !no_chaining && job.chaining.unwrap_or(true);
    let parallelism = parallelism.or(job.parallelism).unwrap_or(NonZeroUsize::MIN);
    let graph = build_graph(&job, parallelism)?;
    Ok(ExecutionPlan::new(&graph, chaining)?)
}

/// `tidemark validate`: the plan and `ok` on standard output.
fn validate(args: ValidateArgs) -> anyhow::Result<u8> {
    let plan = load_plan(&args.job, None, false)?;
    print!("{plan}");
    println!("ok");
    Ok(EXIT_OK)
}

/// `tidemark plan`: the plan as text or DOT on standard output.
fn plan(args: PlanArgs) -> anyhow::Result<u8> {
    let plan = load_plan(&args.job, args.parallelism, args.no_chaining)?;
    match args.format {
        PlanFormat::Text => print!("{plan}"),
        PlanFormat::Dot => print!("{}", plan.to_dot()),
    }
    Ok(EXIT_OK)
}
