//! The command line, as clap derives it.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::setting_flags::SettingFlags;
pub use crate::values::{parse_channel_capacity, parse_duration, parse_parallelism};
#[cfg(test)]
use tidemark_markers::Granularity;

/// Tidemark: a streaming dataflow runtime with latency markers.
#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Tidemark: run, validate and plan streaming dataflow jobs",
    propagate_version = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a job until its sources end, --duration passes, or SIGINT/SIGTERM.
    Run(Box<RunArgs>),
    /// Check a job file and print its execution plan.
    Validate(ValidateArgs),
    /// Print the execution graph: vertices, subtasks, chains, edges.
    Plan(PlanArgs),
    /// Run a Kafka mock cluster (librdkafka's) in the foreground until Ctrl-C.
    #[cfg(feature = "kafka")]
    DevKafka(DevKafkaArgs),
}

/// `tidemark dev-kafka`.
#[cfg(feature = "kafka")]
#[derive(Debug, Args)]
pub struct DevKafkaArgs {
    /// Port of broker 1 (broker i listens on PORT+i-1) [default: random free ports]
    #[arg(long, value_name = "P")]
    pub port: Option<u16>,
    /// Number of brokers
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub brokers: u16,
    /// A topic to create, NAME:PARTITIONS (repeatable); clients create others with CreateTopics
    /// (or with 4 partitions on first use, where they allow it)
    #[arg(long, value_name = "NAME:PARTITIONS")]
    pub topic: Vec<String>,
}

/// `tidemark run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file (YAML).
    #[arg(value_name = "JOB.yaml")]
    pub job: PathBuf,
    /// Settings that override the job file.
    #[command(flatten)]
    pub settings: SettingFlags,
    /// Address of the Prometheus endpoint (GET /metrics); port 0 picks a free port
    /// [default: 127.0.0.1:9249]
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// TLS, client certificates, basic auth and headers of the endpoint, in the Prometheus
    /// exporter toolkit's web config format (as node_exporter's --web.config.file)
    /// [default: the job file's web_config_file, else plain HTTP without login]
    #[arg(long, value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Also serve /livez and /readyz alone, plain HTTP without login, on this address (for
    /// kubelets when the web config requires client certificates)
    #[arg(long, value_name = "HOST:PORT")]
    pub probe_addr: Option<String>,
    /// Stop the job after this long (sources stop, in-flight records drain)
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Write the final report as JSON to this file (whatever the outcome)
    #[arg(long, value_name = "PATH")]
    pub report_file: Option<PathBuf>,
    /// After a stop (signal or --duration), how long in-flight records may take to reach the
    /// sinks; past it the job stops hard, counts what was left in flight, and exits 1
    #[arg(
        long,
        value_name = "DUR",
        value_parser = parse_duration,
        default_value = "30s",
        allow_hyphen_values = true
    )]
    pub drain_timeout: Duration,
    /// Keep serving /metrics and the live view (/, /api/v1/*) this long after the job ends
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "0s", allow_hyphen_values = true)]
    pub linger: Duration,
    /// Print the summary table at the end even when standard error is not a terminal
    #[arg(long)]
    pub summary: bool,
    /// Name of this instance when several processes run one job (Kafka scale-out): the label
    /// `tidemark_instance` on every series, the name in the clock-offset exchange, the report
    /// and /api/v1/job [default: host name and process id, `host-pid`]
    #[arg(long, value_name = "NAME", value_parser = crate::instance::parse_instance_id)]
    pub instance_id: Option<String>,
    /// How long Kafka sources and sinks wait for the brokers before the job fails
    #[cfg(feature = "kafka")]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub kafka_timeout: Duration,
    /// Seed for generators and marker routing, for repeatable runs [default: random]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Start from a checkpoint: `latest` (the newest complete one of the job under the
    /// checkpoint directory), `auto` (latest if there is one, else a fresh start; nothing once
    /// the job has finished: for supervisors), or the path of a `chk-<n>` folder
    #[arg(long, value_name = "latest|auto|PATH", value_parser = crate::restore::parse_restore)]
    pub restore: Option<crate::restore::RestoreMode>,
    /// With --restore: start even though the checkpoint holds state of vertices the job no
    /// longer has (that state is dropped), as Flink's flag
    #[arg(long)]
    pub allow_non_restored_state: bool,
    /// With a checkpoint directory, a stop (SIGTERM, SIGINT, --duration) fires open windows
    /// and emits what operators hold, as Flink's `stop --drain`, instead of keeping it in a
    /// last checkpoint for a restore
    #[arg(long)]
    pub drain: bool,
    /// Override a setting by its key (repeatable); the matching flag wins over -D (--help lists
    /// the keys)
    #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = parse_define,
          long_help = crate::settings::define_help())]
    pub defines: Vec<(String, String)>,
}

/// `tidemark validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The job file (YAML).
    #[arg(value_name = "JOB.yaml")]
    pub job: PathBuf,
    /// Settings that override the job file, as for `run`.
    #[command(flatten)]
    pub settings: SettingFlags,
    /// Override a setting by its key (repeatable), as for `run` (--help lists the keys)
    #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = parse_define,
          long_help = crate::settings::define_help())]
    pub defines: Vec<(String, String)>,
}

/// `tidemark plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The job file (YAML).
    #[arg(value_name = "JOB.yaml")]
    pub job: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    pub format: PlanFormat,
    /// Default parallelism of every vertex, as `run --parallelism`
    #[arg(long, value_name = "N", value_parser = parse_parallelism)]
    pub parallelism: Option<NonZeroUsize>,
    /// Plan without chaining, as `run --no-chaining`
    #[arg(long)]
    pub no_chaining: bool,
    /// Override a setting by its key (repeatable), as for `run` (--help lists the keys)
    #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = parse_define,
          long_help = crate::settings::define_help())]
    pub defines: Vec<(String, String)>,
}

/// How `plan` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// Human-readable text.
    Text,
    /// Graphviz DOT.
    Dot,
}

fn parse_define(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, found \"{s}\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_run_with_everything() {
        let cli = Cli::try_parse_from([
            "tidemark",
            "run",
            "job.yaml",
            "--latency-interval",
            "100ms",
            "--latency-granularity",
            "subtask",
            "--parallelism",
            "4",
            "-D",
            "metrics.latency.history-size=16",
            "-Dexecution.buffer-timeout=2ms",
            "--duration",
            "3s",
            "--no-chaining",
            "--channel-capacity",
            "32",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.settings.channel_capacity, Some(32));
        assert_eq!(
            run.settings.latency_interval,
            Some(Duration::from_millis(100))
        );
        assert_eq!(run.settings.latency_granularity, Some(Granularity::Subtask));
        assert_eq!(run.settings.parallelism, NonZeroUsize::new(4));
        assert!(run.settings.no_chaining);
        assert_eq!(run.duration, Some(Duration::from_secs(3)));
        assert_eq!(run.linger, Duration::ZERO);
        assert_eq!(
            run.defines,
            vec![
                ("metrics.latency.history-size".to_string(), "16".to_string()),
                ("execution.buffer-timeout".to_string(), "2ms".to_string())
            ]
        );
    }

    #[test]
    fn channel_capacity_is_a_whole_number_from_1_to_4096() {
        assert_eq!(parse_channel_capacity("1"), Ok(1));
        assert_eq!(parse_channel_capacity(" 4096 "), Ok(4096));
        for bad in ["0", "4097", "-1", "1.5", "deep", ""] {
            assert_eq!(
                parse_channel_capacity(bad),
                Err(format!(
                    "invalid channel capacity \"{bad}\": expected a whole number of batches from \
                     1 to 4096"
                ))
            );
        }
        // Through clap: the flag's error names it and the rule.
        let e = Cli::try_parse_from(["tidemark", "run", "job.yaml", "--channel-capacity", "0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--channel-capacity"), "{e}");
        assert!(e.contains("from 1 to 4096"), "{e}");
    }

    #[test]
    fn durations_need_a_unit_and_may_not_be_negative() {
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        let e = parse_duration("1.5").unwrap_err();
        assert!(
            e.contains("has no unit: write 1.5s for seconds or 1.5ms for milliseconds"),
            "{e}"
        );
        let e = parse_duration("-1s").unwrap_err();
        assert!(e.starts_with("negative duration \"-1s\""), "{e}");
        // Through clap: a value starting with '-' reaches the parser.
        for (value, needle) in [("-1s", "negative duration"), ("1.5", "has no unit")] {
            let e = Cli::try_parse_from(["tidemark", "run", "j.yaml", "--duration", value])
                .unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn drain_timeout_defaults_to_30s_and_takes_a_duration() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["tidemark", "run", "j.yaml"];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args)
        };
        let Command::Run(run) = parse(&[]).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.drain_timeout, Duration::from_secs(30));
        let Command::Run(run) = parse(&["--drain-timeout", "250ms"]).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.drain_timeout, Duration::from_millis(250));
        for (value, needle) in [("-1s", "negative duration"), ("5", "has no unit")] {
            let e = parse(&["--drain-timeout", value]).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn validate_takes_defines_and_setting_flags() {
        let cli = Cli::try_parse_from([
            "tidemark",
            "validate",
            "j.yaml",
            "-D",
            "parallelism.default=2",
            "--parallelism",
            "3",
        ])
        .unwrap();
        let Command::Validate(v) = cli.command else {
            panic!("not validate")
        };
        assert_eq!(
            v.defines,
            vec![("parallelism.default".to_string(), "2".to_string())]
        );
        assert_eq!(v.settings.parallelism, NonZeroUsize::new(3));
    }

    #[test]
    fn bad_flag_values_are_usage_errors() {
        for args in [
            &["tidemark", "run", "j.yaml", "--latency-interval", "soon"][..],
            &["tidemark", "run", "j.yaml", "--parallelism", "0"][..],
            &["tidemark", "run", "j.yaml", "--latency-history-size", "0"][..],
            &["tidemark", "run", "j.yaml", "-D", "novalue"][..],
            &["tidemark", "plan", "j.yaml", "--format", "svg"][..],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
    }
}
