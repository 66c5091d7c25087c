//! The commands: dispatch, and the small ones (`validate`, `plan`). `run` has its own module.

use crate::args::{Cli, Command, PlanArgs, PlanFormat, SettingFlags, ValidateArgs};
use crate::error::EXIT_OK;
use crate::redact::redacted_json;
use crate::{LoadedJob, Loader};
use tidemark_runtime::ExecutionPlan;

/// Runs the command; returns the exit code, or an error whose kind sets it.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Run(args) => crate::run::run(*args),
        Command::Validate(args) => validate(args),
        Command::Plan(args) => plan(args),
        #[cfg(feature = "kafka")]
        Command::DevKafka(args) => crate::dev_kafka::run(args),
    }
}

/// `tidemark validate`: the plan and `ok` on standard output. Input files must exist.
fn validate(args: ValidateArgs) -> anyhow::Result<u8> {
    let mut loader = Loader::new().flags(args.settings).check_inputs(true);
    for (k, v) in &args.defines {
        loader = loader.define(k, v);
    }
    let job = loader.load_file(&args.job)?;
    let plan = ExecutionPlan::new(&job.graph, job.settings.chaining)?;
    print!("{plan}");
    print!("{}", settings_text(&job));
    for warning in crate::exchange::order_warnings(&job.graph) {
        eprintln!("tidemark: warning: {warning}");
    }
    println!("ok");
    Ok(EXIT_OK)
}

/// `tidemark plan`: the plan as text or DOT on standard output.
fn plan(args: PlanArgs) -> anyhow::Result<u8> {
    let flags = SettingFlags {
        parallelism: args.parallelism,
        no_chaining: args.no_chaining,
        ..SettingFlags::default()
    };
    let mut loader = Loader::new().flags(flags);
    for (k, v) in &args.defines {
        loader = loader.define(k, v);
    }
    let job = loader.load_file(&args.job)?;
    let plan = ExecutionPlan::new(&job.graph, job.settings.chaining)?;
    match args.format {
        PlanFormat::Text => {
            print!("{plan}");
            print!("{}", crate::exchange::plan_text(&job.job));
            print!("{}", settings_text(&job));
        }
        PlanFormat::Dot => print!("{}", plan.to_dot()),
    }
    Ok(EXIT_OK)
}

/// The run's settings (from the one settings table) and each vertex's own settings, secrets
/// shown as `***`.
pub fn settings_text(job: &LoadedJob) -> String {
    let mut out = String::from("settings:\n");
    for (key, value) in job.settings.entries() {
        out.push_str(&format!("  {key} = {value}\n"));
    }
    let configured: Vec<_> = job
        .job
        .vertices
        .iter()
        .filter(|v| !v.config.is_empty())
        .collect();
    if !configured.is_empty() {
        out.push_str("vertex settings:\n");
        for v in configured {
            let config = redacted_json(&serde_json::Value::Object(v.config.clone()));
            out.push_str(&format!("  {} ({}): {config}\n", v.id, v.type_name));
        }
    }
    out
}
