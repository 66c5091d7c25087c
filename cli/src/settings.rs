//! The run's settings and their precedence: a flag, then `-D key=value`, then the job file,
//! then the built-in default. When a flag and a `-D` set the same setting, the flag wins.
//!
//! [`SETTINGS`] is the one table of them: each row's `-D` key, job-file field, flag, default
//! and help, how the job file, a `-D` value and the flags set it, and how the value is shown. It
//! drives the precedence ([`resolve`] walks it layer by layer), the `-D` keys and their parsing,
//! the `-D` help, "did you mean", `plan`'s and `validate`'s settings section,
//! [`Settings::entries`] and [`Settings::json`] (the report's `settings` object and
//! `/api/v1/job`'s).

use crate::jobfile::{JobFile, LatencySection};
use crate::setting_flags::SettingFlags;
use crate::suggest::{did_you_mean, hint};
use crate::values::{parse_channel_capacity, parse_duration, parse_parallelism};
use serde_json::{Map, Value};
use std::num::NonZeroUsize;
use std::time::Duration;
use tidemark_markers::{format_duration, Buckets, LatencyConfig};
use tidemark_runtime::config::{DEFAULT_BUFFER_TIMEOUT, DEFAULT_CHANNEL_CAPACITY};
use tidemark_runtime::IdleStrategy;

/// Where `/metrics` is served unless a flag or `-D` says otherwise.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9249";

/// `-D` key of the buffer timeout.
pub const BUFFER_TIMEOUT_KEY: &str = "execution.buffer-timeout";
/// `-D` key of the channel capacity (batches per channel).
pub const CHANNEL_CAPACITY_KEY: &str = "execution.channel-capacity";
/// `-D` key of the default parallelism.
pub const PARALLELISM_KEY: &str = "parallelism.default";
/// `-D` key of the metrics port (the host stays that of the default address).
pub const PROM_PORT_KEY: &str = "metrics.reporter.prom.port";
/// `-D` key of chaining (Flink's `pipeline.operator-chaining.enabled`).
pub const CHAINING_KEY: &str = "pipeline.operator-chaining.enabled";
/// `-D` key of recording record end-to-end latency at every vertex.
pub const E2E_EVERYWHERE_KEY: &str = "metrics.e2e-latency.everywhere";
/// `-D` key of the checkpoint interval (Flink's).
pub const CHECKPOINT_INTERVAL_KEY: &str = "execution.checkpointing.interval";
/// `-D` key of the default number of key groups (Flink's).
pub const MAX_PARALLELISM_KEY: &str = "pipeline.max-parallelism";
/// `-D` key of the checkpoint directory (Flink's).
pub const CHECKPOINT_DIR_KEY: &str = "execution.checkpointing.dir";
/// `-D` key of the number of complete checkpoints kept (Flink's).
pub const CHECKPOINT_RETAIN_KEY: &str = "state.checkpoints.num-retained";
/// `-D` key of the checkpoints in flight at once (Flink's).
pub const CHECKPOINT_MAX_CONCURRENT_KEY: &str =
    "execution.checkpointing.max-concurrent-checkpoints";
/// `-D` key of the least pause between checkpoints (Flink's).
pub const CHECKPOINT_MIN_PAUSE_KEY: &str = "execution.checkpointing.min-pause";
/// `-D` key of the checkpoints that may fail in a row (Flink's).
pub const CHECKPOINT_TOLERABLE_KEY: &str = "execution.checkpointing.tolerable-failed-checkpoints";
/// Complete checkpoints kept unless `checkpoint.retain` says otherwise.
pub const DEFAULT_CHECKPOINT_RETAIN: usize = 3;
/// `-D` key of how tasks wait when they have nothing to do.
pub const IDLE_STRATEGY_KEY: &str = "execution.idle-strategy";
/// `-D` key of the stall timeout (`/readyz` says `stalled` past it).
pub const STALL_TIMEOUT_KEY: &str = "execution.stall-timeout";
/// How long a vertex subtask with input waiting may take no record before it counts as
/// stalled, unless `stall_timeout` says otherwise.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The default marker interval: markers are on unless turned off with 0 (they cost under 1 %).
pub const DEFAULT_MARKER_INTERVAL: Duration = Duration::from_millis(200);

/// One setting of a run.
pub struct SettingSpec {
    /// Its `-D` key (Flink's where Flink has one).
    pub key: &'static str,
    /// Its field in the report's `settings` object and `/api/v1/job`'s.
    pub json_name: &'static str,
    /// How its value is written there.
    pub json_kind: JsonKind,
    /// Its job-file field, if the job file can set it.
    pub file_field: Option<&'static str>,
    /// Its `run` flag, if any.
    pub flag: Option<&'static str>,
    /// The built-in default, as shown.
    pub default: &'static str,
    /// What it does.
    pub help: &'static str,
    /// Sets it in `s` from a `-D` value.
    apply: fn(&mut Settings, &str) -> Result<(), String>,
    /// Its value in `s`, as shown.
    show: fn(&Settings) -> String,
    /// Sets it in `s` from the job file, if the file sets it.
    from_file: fn(&FileSettings, &mut Settings),
    /// Sets it in `s` from the flags (and `--metrics-addr`), if one is given.
    from_flags: fn(&SettingFlags, Option<&str>, &mut Settings),
}

/// How a setting's value is written in JSON (the report, `/api/v1/job`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// A string, as shown (durations, names).
    Text,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
}

impl SettingSpec {
    /// Its value in `s`, as shown (secrets as `***`).
    pub fn show(&self, s: &Settings) -> String {
        crate::redact::redact_value(self.key, &(self.show)(s)).to_owned()
    }

    /// Its value in `s` as JSON, typed by [`JsonKind`] (secrets as `"***"`).
    pub fn json(&self, s: &Settings) -> Value {
        use crate::redact::{is_secret_key, REDACTED};
        if is_secret_key(self.key) || is_secret_key(self.json_name) {
            return Value::String(REDACTED.to_owned());
        }
        let shown = self.show(s);
        match self.json_kind {
            JsonKind::Text => Value::String(shown),
            JsonKind::Number => shown
                .parse::<u64>()
                .map_or_else(|_| Value::String(shown.clone()), Value::from),
            JsonKind::Bool => match shown.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => Value::String(shown),
            },
        }
    }
}

impl std::fmt::Debug for SettingSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingSpec")
            .field("key", &self.key)
            .finish()
    }
}

/// Every setting, in the order help and `plan` list them.
pub static SETTINGS: [SettingSpec; 18] = [
    SettingSpec {
        key: LatencyConfig::INTERVAL_KEY,
        json_name: "latency_interval",
        json_kind: JsonKind::Text,
        file_field: Some("latency.interval"),
        flag: Some("--latency-interval"),
        default: "200ms",
        help: "marker interval; 0 disables markers (a bare -D number is milliseconds, as in Flink)",
        apply: |s, v| apply_latency(s, LatencyConfig::INTERVAL_KEY, v),
        show: |s| format_duration(s.latency.interval),
        from_file: |f, s| {
            if let Some(i) = f.latency.interval {
                s.latency.interval = i;
            }
        },
        from_flags: |f, _, s| {
            if let Some(i) = f.latency_interval {
                s.latency.interval = i;
            }
        },
    },
    SettingSpec {
        key: LatencyConfig::GRANULARITY_KEY,
        json_name: "latency_granularity",
        json_kind: JsonKind::Text,
        file_field: Some("latency.granularity"),
        flag: Some("--latency-granularity"),
        default: "operator",
        help: "latency series per: single | operator | subtask",
        apply: |s, v| apply_latency(s, LatencyConfig::GRANULARITY_KEY, v),
        show: |s| s.latency.granularity.to_string(),
        from_file: |f, s| {
            if let Some(g) = f.latency.granularity {
                s.latency.granularity = g;
            }
        },
        from_flags: |f, _, s| {
            if let Some(g) = f.latency_granularity {
                s.latency.granularity = g;
            }
        },
    },
    SettingSpec {
        key: LatencyConfig::HISTORY_SIZE_KEY,
        json_name: "latency_history_size",
        json_kind: JsonKind::Number,
        file_field: Some("latency.history_size"),
        flag: Some("--latency-history-size"),
        default: "128",
        help: "samples in each latency series' sliding window",
        apply: |s, v| apply_latency(s, LatencyConfig::HISTORY_SIZE_KEY, v),
        show: |s| s.latency.history_size.to_string(),
        from_file: |f, s| {
            if let Some(h) = f.latency.history_size {
                s.latency.history_size = h;
            }
        },
        from_flags: |f, _, s| {
            if let Some(h) = f.latency_history_size {
                s.latency.history_size = h;
            }
        },
    },
    SettingSpec {
        key: BUFFER_TIMEOUT_KEY,
        json_name: "buffer_timeout",
        json_kind: JsonKind::Text,
        file_field: Some("buffer_timeout"),
        flag: Some("--buffer-timeout"),
        default: "1ms",
        help: "longest a partly filled batch waits before it is sent",
        apply: |s, v| {
            s.buffer_timeout = parse_duration(v)?;
            Ok(())
        },
        show: |s| format_duration(s.buffer_timeout),
        from_file: |f, s| {
            if let Some(b) = f.buffer_timeout {
                s.buffer_timeout = b;
            }
        },
        from_flags: |f, _, s| {
            if let Some(b) = f.buffer_timeout {
                s.buffer_timeout = b;
            }
        },
    },
    SettingSpec {
        key: CHANNEL_CAPACITY_KEY,
        json_name: "channel_capacity",
        json_kind: JsonKind::Number,
        file_field: Some("channel_capacity"),
        flag: Some("--channel-capacity"),
        default: "8",
        help: "batches each channel holds before its sender blocks (1 to 4096); deeper: fewer context switches, more queued under backpressure",
        apply: |s, v| {
            s.channel_capacity = parse_channel_capacity(v)?;
            Ok(())
        },
        show: |s| s.channel_capacity.to_string(),
        from_file: |f, s| {
            if let Some(c) = f.channel_capacity {
                s.channel_capacity = c;
            }
        },
        from_flags: |f, _, s| {
            if let Some(c) = f.channel_capacity {
                s.channel_capacity = c;
            }
        },
    },
    SettingSpec {
        key: PARALLELISM_KEY,
        json_name: "parallelism",
        json_kind: JsonKind::Number,
        file_field: Some("parallelism"),
        flag: Some("--parallelism"),
        default: "1",
        help: "default parallelism of every vertex (at most 1024)",
        apply: |s, v| {
            s.parallelism = parse_parallelism(v)?;
            Ok(())
        },
        show: |s| s.parallelism.to_string(),
        from_file: |f, s| {
            if let Some(p) = f.parallelism {
                s.parallelism = p;
            }
        },
        from_flags: |f, _, s| {
            if let Some(p) = f.parallelism {
                s.parallelism = p;
            }
        },
    },
    SettingSpec {
        key: PROM_PORT_KEY,
        json_name: "metrics_port",
        json_kind: JsonKind::Number,
        file_field: None,
        flag: Some("--metrics-addr"),
        default: "9249",
        help: "port of the Prometheus endpoint on 127.0.0.1 (the flag takes HOST:PORT)",
        apply: |s, v| {
            let port: u16 = v
                .trim()
                .parse()
                .map_err(|_| format!("invalid port \"{v}\": expected a number from 0 to 65535"))?;
            let host = DEFAULT_METRICS_ADDR
                .rsplit_once(':')
                .map_or("127.0.0.1", |h| h.0);
            s.metrics_addr = format!("{host}:{port}");
            Ok(())
        },
        show: |s| {
            s.metrics_addr
                .rsplit(':')
                .next()
                .unwrap_or_default()
                .to_owned()
        },
        from_file: |_, _| {},
        from_flags: |_, addr, s| {
            if let Some(a) = addr {
                s.metrics_addr = a.to_string();
            }
        },
    },
    SettingSpec {
        key: CHAINING_KEY,
        json_name: "chaining",
        json_kind: JsonKind::Bool,
        file_field: Some("chaining"),
        flag: Some("--no-chaining"),
        default: "true",
        help: "chain forward edges into one task",
        apply: |s, v| {
            s.chaining = parse_bool(v)?;
            Ok(())
        },
        show: |s| s.chaining.to_string(),
        from_file: |f, s| {
            if let Some(c) = f.chaining {
                s.chaining = c;
            }
        },
        from_flags: |f, _, s| {
            if f.no_chaining {
                s.chaining = false;
            }
        },
    },
    SettingSpec {
        key: E2E_EVERYWHERE_KEY,
        json_name: "e2e_latency_everywhere",
        json_kind: JsonKind::Bool,
        file_field: Some("e2e_latency_everywhere"),
        flag: Some("--e2e-latency-everywhere"),
        default: "false",
        help: "record end-to-end latency at every vertex, not only at sources and terminal ones",
        apply: |s, v| {
            s.e2e_latency_everywhere = parse_bool(v)?;
            Ok(())
        },
        show: |s| s.e2e_latency_everywhere.to_string(),
        from_file: |f, s| {
            if let Some(e) = f.e2e_latency_everywhere {
                s.e2e_latency_everywhere = e;
            }
        },
        from_flags: |f, _, s| {
            if f.e2e_latency_everywhere {
                s.e2e_latency_everywhere = true;
            }
        },
    },
    SettingSpec {
        key: CHECKPOINT_INTERVAL_KEY,
        json_name: "checkpoint_interval",
        json_kind: JsonKind::Text,
        file_field: Some("checkpoint.interval"),
        flag: None,
        default: "0",
        help: "checkpoint barriers for at-least-once delivery (Kafka offsets commit when every sink has flushed); 0 turns them off",
        apply: |s, v| {
            let d = parse_duration(v)?;
            s.checkpoint_interval = (!d.is_zero()).then_some(d);
            Ok(())
        },
        show: |s| format_duration(s.checkpoint_interval.unwrap_or_default()),
        from_file: |f, s| {
            if let Some(c) = f.checkpoint_interval {
                s.checkpoint_interval = (!c.is_zero()).then_some(c);
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: CHECKPOINT_DIR_KEY,
        json_name: "checkpoint_dir",
        json_kind: JsonKind::Text,
        file_field: Some("checkpoint.dir"),
        flag: None,
        default: "none",
        help: "where checkpoints are written (<dir>/<job>/chk-<n>/), for `run --restore`; none: barriers for at-least-once only",
        apply: |s, v| {
            let v = v.trim();
            s.checkpoint_dir = (!v.is_empty()).then(|| std::path::PathBuf::from(v));
            Ok(())
        },
        show: |s| {
            s.checkpoint_dir
                .as_ref()
                .map_or_else(|| "none".to_string(), |d| d.display().to_string())
        },
        from_file: |f, s| {
            if let Some(d) = &f.checkpoint_dir {
                s.checkpoint_dir = Some(d.clone());
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: CHECKPOINT_RETAIN_KEY,
        json_name: "checkpoint_retain",
        json_kind: JsonKind::Number,
        file_field: Some("checkpoint.retain"),
        flag: None,
        default: "3",
        help: "complete checkpoints kept in the checkpoint directory (1 to 1000)",
        apply: |s, v| {
            s.checkpoint_retain = match v.trim().parse::<usize>() {
                Ok(n @ 1..=1000) => n,
                _ => return Err("expected a whole number of checkpoints from 1 to 1000".into()),
            };
            Ok(())
        },
        show: |s| s.checkpoint_retain.to_string(),
        from_file: |f, s| {
            if let Some(r) = f.checkpoint_retain {
                s.checkpoint_retain = r;
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: CHECKPOINT_MAX_CONCURRENT_KEY,
        json_name: "checkpoint_max_concurrent",
        json_kind: JsonKind::Number,
        file_field: Some("checkpoint.max_concurrent"),
        flag: None,
        default: "1",
        help: "checkpoints in flight at once (1 to 100); one due while that many are in flight is skipped and starts as soon as one settles",
        apply: |s, v| {
            s.checkpoint_policy.max_concurrent = match v.trim().parse::<u64>() {
                Ok(n @ 1..=100) => n,
                _ => return Err("expected a whole number of checkpoints from 1 to 100".into()),
            };
            Ok(())
        },
        show: |s| s.checkpoint_policy.max_concurrent.to_string(),
        from_file: |f, s| {
            if let Some(n) = f.checkpoint_max_concurrent {
                s.checkpoint_policy.max_concurrent = n;
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: CHECKPOINT_MIN_PAUSE_KEY,
        json_name: "checkpoint_min_pause",
        json_kind: JsonKind::Text,
        file_field: Some("checkpoint.min_pause"),
        flag: None,
        default: "0",
        help: "the least time from one checkpoint settling (completed or failed) to the next starting",
        apply: |s, v| {
            s.checkpoint_policy.min_pause = parse_duration(v)?;
            Ok(())
        },
        show: |s| format_duration(s.checkpoint_policy.min_pause),
        from_file: |f, s| {
            if let Some(d) = f.checkpoint_min_pause {
                s.checkpoint_policy.min_pause = d;
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: CHECKPOINT_TOLERABLE_KEY,
        json_name: "checkpoint_tolerable_failures",
        json_kind: JsonKind::Number,
        file_field: Some("checkpoint.tolerable_failures"),
        flag: None,
        default: "3",
        help: "checkpoints that may fail in a row (a write error, a failed snapshot) before the job fails naming the last cause (0 to 1000000)",
        apply: |s, v| {
            s.checkpoint_policy.tolerable_failures = match v.trim().parse::<u64>() {
                Ok(n @ 0..=1_000_000) => n,
                _ => {
                    return Err("expected a whole number of checkpoints from 0 to 1000000".into())
                }
            };
            Ok(())
        },
        show: |s| s.checkpoint_policy.tolerable_failures.to_string(),
        from_file: |f, s| {
            if let Some(n) = f.checkpoint_tolerable_failures {
                s.checkpoint_policy.tolerable_failures = n;
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: MAX_PARALLELISM_KEY,
        json_name: "max_parallelism",
        json_kind: JsonKind::Text,
        file_field: Some("max_parallelism"),
        flag: None,
        default: "auto",
        help: "key groups of every vertex that sets none (1 to 32768, at least its parallelism); auto: parallelism * 1.5 rounded up to a power of two, at least 128",
        apply: |s, v| {
            let max = tidemark_runtime::key_group::MAX_KEY_GROUPS;
            s.max_parallelism = match v.trim() {
                "auto" => None,
                t => match t.parse::<u32>() {
                    Ok(n) if (1..=max).contains(&n) => Some(n),
                    _ => return Err(format!("expected a whole number of key groups from 1 to {max}, or auto")),
                },
            };
            Ok(())
        },
        show: |s| s.max_parallelism.map_or_else(|| "auto".to_string(), |m| m.to_string()),
        from_file: |f, s| {
            if let Some(m) = f.max_parallelism {
                s.max_parallelism = Some(m);
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: IDLE_STRATEGY_KEY,
        json_name: "idle_strategy",
        json_kind: JsonKind::Text,
        file_field: Some("idle_strategy"),
        flag: None,
        default: "park",
        help: "how tasks wait with nothing to do: park (sleep until something is due; CPU follows the work) | spin (wake for every record due; lowest latency, about a core)",
        apply: |s, v| {
            s.idle_strategy = v.parse()?;
            Ok(())
        },
        show: |s| s.idle_strategy.to_string(),
        from_file: |f, s| {
            if let Some(i) = f.idle_strategy {
                s.idle_strategy = i;
            }
        },
        from_flags: |_, _, _| {},
    },
    SettingSpec {
        key: STALL_TIMEOUT_KEY,
        json_name: "stall_timeout",
        json_kind: JsonKind::Text,
        file_field: Some("stall_timeout"),
        flag: None,
        default: "5m",
        help: "how long a vertex subtask with input waiting may take no record before /readyz says stalled (and tidemark_job_stalled is 1); 0 turns the rule off",
        apply: |s, v| {
            s.stall_timeout = parse_duration(v)?;
            Ok(())
        },
        show: |s| format_duration(s.stall_timeout),
        from_file: |f, s| {
            if let Some(t) = f.stall_timeout {
                s.stall_timeout = t;
            }
        },
        from_flags: |_, _, _| {},
    },
];

fn apply_latency(s: &mut Settings, key: &str, value: &str) -> Result<(), String> {
    match s.latency.apply(key, value) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("not a latency setting: {key}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Every key `-D` accepts, from [`SETTINGS`].
pub fn keys() -> Vec<&'static str> {
    SETTINGS.iter().map(|s| s.key).collect()
}

/// The `-D` help: every key with its default and what it does, from [`SETTINGS`].
pub fn define_help() -> String {
    let mut help = String::from(
        "Override a setting by its key (repeatable); the matching flag wins over -D. Keys:",
    );
    for s in &SETTINGS {
        help.push_str(&format!(
            "\n  {} (default {}): {}",
            s.key, s.default, s.help
        ));
    }
    help
}

/// What the job file says about the settings (its top-level fields).
#[derive(Debug, Clone, Default)]
pub struct FileSettings {
    /// `parallelism`.
    pub parallelism: Option<NonZeroUsize>,
    /// `buffer_timeout`.
    pub buffer_timeout: Option<Duration>,
    /// `channel_capacity`.
    pub channel_capacity: Option<usize>,
    /// `chaining`.
    pub chaining: Option<bool>,
    /// `e2e_latency_everywhere`.
    pub e2e_latency_everywhere: Option<bool>,
    /// `latency`.
    pub latency: LatencySection,
    /// `e2e.buckets`.
    pub e2e_buckets: Option<Buckets>,
    /// `checkpoint.interval`.
    pub checkpoint_interval: Option<Duration>,
    /// `checkpoint.dir`, resolved against the job file's directory.
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// `checkpoint.retain`.
    pub checkpoint_retain: Option<usize>,
    /// `checkpoint.max_concurrent`.
    pub checkpoint_max_concurrent: Option<u64>,
    /// `checkpoint.min_pause`.
    pub checkpoint_min_pause: Option<Duration>,
    /// `checkpoint.tolerable_failures`.
    pub checkpoint_tolerable_failures: Option<u64>,
    /// `max_parallelism`.
    pub max_parallelism: Option<u32>,
    /// `idle_strategy`.
    pub idle_strategy: Option<IdleStrategy>,
    /// `stall_timeout`.
    pub stall_timeout: Option<Duration>,
}

impl FileSettings {
    /// The settings part of a job file.
    pub fn of(job: &JobFile) -> FileSettings {
        FileSettings {
            parallelism: job.parallelism,
            buffer_timeout: job.buffer_timeout,
            channel_capacity: job.channel_capacity,
            chaining: job.chaining,
            e2e_latency_everywhere: job.e2e_latency_everywhere,
            latency: job.latency.clone(),
            e2e_buckets: job.e2e_buckets.clone(),
            checkpoint_interval: job.checkpoint_interval,
            checkpoint_dir: job.checkpoint_dir.as_ref().map(|d| job.resolve(d)),
            checkpoint_retain: job.checkpoint_retain,
            checkpoint_max_concurrent: job.checkpoint_max_concurrent,
            checkpoint_min_pause: job.checkpoint_min_pause,
            checkpoint_tolerable_failures: job.checkpoint_tolerable_failures,
            max_parallelism: job.max_parallelism,
            idle_strategy: job.idle_strategy,
            stall_timeout: job.stall_timeout,
        }
    }
}

/// The settings a run uses, after precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Marker interval, granularity and history size.
    pub latency: LatencyConfig,
    /// Longest a partly filled batch waits.
    pub buffer_timeout: Duration,
    /// Batches each channel holds before its sender blocks.
    pub channel_capacity: usize,
    /// Parallelism of vertices that set none.
    pub parallelism: NonZeroUsize,
    /// Where `/metrics` is served.
    pub metrics_addr: String,
    /// Whether forward edges are chained.
    pub chaining: bool,
    /// Whether record end-to-end latency is recorded at every vertex (not only at sources and
    /// terminal vertices).
    pub e2e_latency_everywhere: bool,
    /// Bucket bounds of the marker latency histogram.
    pub marker_buckets: Buckets,
    /// Bucket bounds of the record end-to-end latency histogram.
    pub e2e_buckets: Buckets,
    /// How often sources start a checkpoint; `None`: no checkpoints.
    pub checkpoint_interval: Option<Duration>,
    /// Where checkpoints are written; `None`: barriers for at-least-once only.
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// Complete checkpoints kept in the directory.
    pub checkpoint_retain: usize,
    /// When checkpoints start and how many may fail in a row.
    pub checkpoint_policy: tidemark_runtime::checkpoint::CheckpointPolicy,
    /// Key groups of every vertex that sets none; `None`: the default for its parallelism.
    pub max_parallelism: Option<u32>,
    /// How tasks wait when they have nothing to do.
    pub idle_strategy: IdleStrategy,
    /// How long a vertex subtask with input waiting may take no record before the job counts
    /// as stalled; zero: never.
    pub stall_timeout: Duration,
}

/// A bad `-D`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A key no setting has.
    #[error("unknown setting -D {key}: valid keys are {}{}", keys().join(", "), hint(suggestion))]
    UnknownKey {
        /// As written.
        key: String,
        /// The closest valid key.
        suggestion: Option<String>,
    },
    /// A value that does not parse.
    #[error("-D {key}={value}: {message}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

impl Settings {
    /// The built-in defaults (the `default` column of [`SETTINGS`]).
    pub fn defaults() -> Settings {
        Settings {
            latency: LatencyConfig {
                interval: DEFAULT_MARKER_INTERVAL,
                ..LatencyConfig::default()
            },
            buffer_timeout: DEFAULT_BUFFER_TIMEOUT,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            parallelism: NonZeroUsize::MIN,
            metrics_addr: DEFAULT_METRICS_ADDR.to_string(),
            chaining: true,
            e2e_latency_everywhere: false,
            marker_buckets: Buckets::marker_latency(),
            e2e_buckets: Buckets::e2e_latency(),
            checkpoint_interval: None,
            checkpoint_dir: None,
            checkpoint_retain: DEFAULT_CHECKPOINT_RETAIN,
            checkpoint_policy: Default::default(),
            max_parallelism: None,
            idle_strategy: IdleStrategy::Park,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }

    /// Every setting of [`SETTINGS`] with its value, as shown (secrets as `***`): for `plan`,
    /// the report and JSON APIs.
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        SETTINGS
            .iter()
            .map(|spec| (spec.key, spec.show(self)))
            .collect()
    }

    /// Every setting of [`SETTINGS`] as a JSON object, keyed by [`SettingSpec::json_name`], in
    /// table order, typed by [`JsonKind`], secrets as `"***"`: the report's `settings` object
    /// and `/api/v1/job`'s.
    pub fn json(&self) -> Map<String, Value> {
        SETTINGS
            .iter()
            .map(|spec| (spec.json_name.to_owned(), spec.json(self)))
            .collect()
    }
}

/// Resolves the settings: defaults, then the job file, then each `-D` in order, then flags.
pub fn resolve(
    file: &FileSettings,
    flags: &SettingFlags,
    metrics_addr: Option<&str>,
    defines: &[(String, String)],
) -> Result<Settings, SettingsError> {
    let mut s = Settings::defaults();
    // The job file.
    for spec in &SETTINGS {
        (spec.from_file)(file, &mut s);
    }
    if let Some(b) = &file.latency.buckets {
        s.marker_buckets = b.clone();
    }
    if let Some(b) = &file.e2e_buckets {
        s.e2e_buckets = b.clone();
    }
    // -D, in order: the last one for a key wins.
    for (key, value) in defines {
        let Some(spec) = SETTINGS.iter().find(|s| s.key == key) else {
            return Err(SettingsError::UnknownKey {
                key: key.clone(),
                suggestion: did_you_mean(key, keys()),
            });
        };
        (spec.apply)(&mut s, value).map_err(|message| SettingsError::InvalidValue {
            key: key.clone(),
            value: crate::redact::redact_value(key, value).to_owned(),
            message,
        })?;
    }
    // Flags.
    for spec in &SETTINGS {
        (spec.from_flags)(flags, metrics_addr, &mut s);
    }
    Ok(s)
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_markers::Granularity;

    fn d(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    fn file() -> FileSettings {
        FileSettings {
            parallelism: Some(nz(2)),
            buffer_timeout: Some(Duration::from_millis(5)),
            channel_capacity: Some(16),
            chaining: Some(true),
            e2e_latency_everywhere: Some(false),
            latency: LatencySection {
                interval: Some(Duration::from_millis(200)),
                granularity: Some(Granularity::Single),
                history_size: Some(nz(64)),
                buckets: None,
            },
            e2e_buckets: None,
            checkpoint_interval: Some(Duration::from_secs(1)),
            checkpoint_dir: Some("ckpt".into()),
            checkpoint_retain: Some(5),
            checkpoint_max_concurrent: Some(2),
            checkpoint_min_pause: Some(Duration::from_millis(300)),
            checkpoint_tolerable_failures: Some(7),
            max_parallelism: Some(256),
            idle_strategy: Some(IdleStrategy::Spin),
            stall_timeout: Some(Duration::from_secs(60)),
        }
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let s = resolve(
            &FileSettings::default(),
            &SettingFlags::default(),
            None,
            &[],
        )
        .unwrap();
        // Markers are on by default, every 200 ms.
        assert_eq!(s.latency.interval, Duration::from_millis(200));
        assert_eq!(s.latency.granularity, LatencyConfig::default().granularity);
        assert_eq!(
            s.latency.history_size,
            LatencyConfig::default().history_size
        );
        assert_eq!(s.buffer_timeout, DEFAULT_BUFFER_TIMEOUT);
        assert_eq!(s.channel_capacity, DEFAULT_CHANNEL_CAPACITY);
        assert_eq!(s.parallelism, nz(1));
        assert_eq!(s.metrics_addr, "127.0.0.1:9249");
        assert!(s.chaining);
        assert!(!s.e2e_latency_everywhere);
    }

    /// The table's `default` column is what the defaults are, and every row's key is accepted
    /// by `-D` with the value it shows.
    #[test]
    fn the_settings_table_agrees_with_the_defaults_and_round_trips() {
        let defaults = Settings::defaults();
        for spec in &SETTINGS {
            assert_eq!(spec.show(&defaults), spec.default, "{}", spec.key);
        }
        // Showing a value and reading it back with -D gives the same settings.
        let mut changed = Settings::defaults();
        let defines: Vec<(String, String)> = d(&[
            ("metrics.latency.interval", "15ms"),
            ("metrics.latency.granularity", "subtask"),
            ("execution.buffer-timeout", "3ms"),
            ("execution.channel-capacity", "64"),
            ("parallelism.default", "4"),
            ("pipeline.operator-chaining.enabled", "false"),
        ]);
        for (k, v) in &defines {
            let spec = SETTINGS.iter().find(|s| s.key == k).unwrap();
            (spec.apply)(&mut changed, v).unwrap();
        }
        for spec in &SETTINGS {
            let mut again = Settings::defaults();
            (spec.apply)(&mut again, &spec.show(&changed)).unwrap();
            assert_eq!(spec.show(&again), spec.show(&changed), "{}", spec.key);
        }
        let keys: Vec<&str> = changed.entries().iter().map(|e| e.0).collect();
        assert_eq!(keys, super::keys());
        assert!(define_help().contains("metrics.latency.interval (default 200ms)"));
    }

    /// JSON names are unique, and a secret setting is `"***"` in JSON whatever its kind.
    #[test]
    fn json_names_are_unique_and_secrets_are_redacted() {
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.json_name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SETTINGS.len());
        let secret = SettingSpec {
            key: "sasl.password",
            json_name: "sasl_password",
            json_kind: JsonKind::Number,
            file_field: None,
            flag: None,
            default: "",
            help: "",
            apply: |_, _| Ok(()),
            show: |_| "12345".to_owned(),
            from_file: |_, _| {},
            from_flags: |_, _, _| {},
        };
        assert_eq!(secret.json(&Settings::defaults()), Value::from("***"));
        assert_eq!(secret.show(&Settings::defaults()), "***");
        let plain = SettingSpec {
            key: "some.count",
            json_name: "some_count",
            ..secret
        };
        assert_eq!(plain.json(&Settings::defaults()), Value::from(12345u64));
    }

    #[test]
    fn durations_in_defines_need_a_unit_except_the_marker_interval() {
        let e = resolve(
            &file(),
            &SettingFlags::default(),
            None,
            &d(&[("execution.buffer-timeout", "5")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("has no unit: write 5s for seconds or 5ms for milliseconds"),
            "{e}"
        );
        let s = resolve(
            &file(),
            &SettingFlags::default(),
            None,
            &d(&[("metrics.latency.interval", "5")]),
        )
        .unwrap();
        assert_eq!(s.latency.interval, Duration::from_millis(5));
    }

    #[test]
    fn job_file_beats_defaults() {
        let s = resolve(&file(), &SettingFlags::default(), None, &[]).unwrap();
        assert_eq!(s.latency.interval, Duration::from_millis(200));
        assert_eq!(s.latency.granularity, Granularity::Single);
        assert_eq!(s.latency.history_size, nz(64));
        assert_eq!(s.buffer_timeout, Duration::from_millis(5));
        assert_eq!(s.channel_capacity, 16);
        assert_eq!(s.parallelism, nz(2));
    }

    #[test]
    fn defines_beat_the_job_file() {
        let defines = d(&[
            ("metrics.latency.interval", "10ms"),
            ("metrics.latency.granularity", "subtask"),
            ("metrics.latency.history-size", "16"),
            ("execution.buffer-timeout", "1s"),
            ("execution.channel-capacity", "32"),
            ("parallelism.default", "3"),
            ("metrics.reporter.prom.port", "9300"),
            ("pipeline.operator-chaining.enabled", "false"),
            ("metrics.e2e-latency.everywhere", "true"),
        ]);
        let s = resolve(&file(), &SettingFlags::default(), None, &defines).unwrap();
        assert!(!s.chaining);
        assert!(s.e2e_latency_everywhere);
        assert_eq!(s.latency.interval, Duration::from_millis(10));
        assert_eq!(s.latency.granularity, Granularity::Subtask);
        assert_eq!(s.latency.history_size, nz(16));
        assert_eq!(s.buffer_timeout, Duration::from_secs(1));
        assert_eq!(s.channel_capacity, 32);
        assert_eq!(s.parallelism, nz(3));
        assert_eq!(s.metrics_addr, "127.0.0.1:9300");
    }

    /// `idle_strategy` in the job file beats the default (park), `-D` beats the file, and a
    /// bad value names the key and what is expected.
    #[test]
    fn idle_strategy_from_the_file_and_defines() {
        let none = FileSettings::default();
        let s = resolve(&none, &SettingFlags::default(), None, &[]).unwrap();
        assert_eq!(s.idle_strategy, IdleStrategy::Park);
        let s = resolve(&file(), &SettingFlags::default(), None, &[]).unwrap();
        assert_eq!(s.idle_strategy, IdleStrategy::Spin);
        let defines = d(&[("execution.idle-strategy", "park")]);
        let s = resolve(&file(), &SettingFlags::default(), None, &defines).unwrap();
        assert_eq!(s.idle_strategy, IdleStrategy::Park);
        let defines = d(&[("execution.idle-strategy", "busy")]);
        let e = resolve(&none, &SettingFlags::default(), None, &defines).unwrap_err();
        assert_eq!(
            e.to_string(),
            "-D execution.idle-strategy=busy: invalid idle strategy \"busy\": expected park or spin"
        );
    }

    #[test]
    fn flags_beat_defines_and_the_job_file() {
        let flags = SettingFlags {
            latency_interval: Some(Duration::from_millis(1)),
            latency_granularity: Some(Granularity::Operator),
            latency_history_size: Some(nz(8)),
            buffer_timeout: Some(Duration::ZERO),
            channel_capacity: Some(2),
            parallelism: Some(nz(4)),
            no_chaining: true,
            e2e_latency_everywhere: true,
        };
        let defines = d(&[
            ("metrics.latency.interval", "10ms"),
            ("parallelism.default", "3"),
            ("metrics.reporter.prom.port", "9300"),
            ("execution.channel-capacity", "128"),
        ]);
        let s = resolve(&file(), &flags, Some("0.0.0.0:1234"), &defines).unwrap();
        assert_eq!(s.channel_capacity, 2);
        assert_eq!(s.latency.interval, Duration::from_millis(1));
        assert_eq!(s.latency.granularity, Granularity::Operator);
        assert_eq!(s.latency.history_size, nz(8));
        assert_eq!(s.buffer_timeout, Duration::ZERO);
        assert_eq!(s.parallelism, nz(4));
        assert_eq!(s.metrics_addr, "0.0.0.0:1234");
        assert!(!s.chaining);
        assert!(s.e2e_latency_everywhere);
    }

    #[test]
    fn e2e_everywhere_from_the_job_file_and_defines() {
        let mut f = file();
        f.e2e_latency_everywhere = Some(true);
        let s = resolve(&f, &SettingFlags::default(), None, &[]).unwrap();
        assert!(s.e2e_latency_everywhere);
        let defines = d(&[("metrics.e2e-latency.everywhere", "false")]);
        let s = resolve(&f, &SettingFlags::default(), None, &defines).unwrap();
        assert!(!s.e2e_latency_everywhere);
    }

    #[test]
    fn checkpoint_interval_from_the_job_file_and_defines() {
        let s = resolve(&file(), &SettingFlags::default(), None, &[]).unwrap();
        assert_eq!(s.checkpoint_interval, Some(Duration::from_secs(1)));
        assert_eq!(Settings::defaults().checkpoint_interval, None);
        let defines = d(&[("execution.checkpointing.interval", "250ms")]);
        let s = resolve(&file(), &SettingFlags::default(), None, &defines).unwrap();
        assert_eq!(s.checkpoint_interval, Some(Duration::from_millis(250)));
        let defines = d(&[("execution.checkpointing.interval", "0s")]);
        let s = resolve(&file(), &SettingFlags::default(), None, &defines).unwrap();
        assert_eq!(s.checkpoint_interval, None);
    }

    #[test]
    fn last_define_wins() {
        let defines = d(&[
            ("metrics.latency.interval", "10ms"),
            ("metrics.latency.interval", "20ms"),
        ]);
        let s = resolve(&file(), &SettingFlags::default(), None, &defines).unwrap();
        assert_eq!(s.latency.interval, Duration::from_millis(20));
    }

    #[test]
    fn unknown_key_lists_the_valid_ones() {
        let e = resolve(
            &file(),
            &SettingFlags::default(),
            None,
            &d(&[("metrics.latency.intervall", "1s")]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown setting -D metrics.latency.intervall: valid keys are \
             metrics.latency.interval, metrics.latency.granularity, metrics.latency.history-size, \
             execution.buffer-timeout, execution.channel-capacity, parallelism.default, metrics.reporter.prom.port, \
             pipeline.operator-chaining.enabled, metrics.e2e-latency.everywhere, \
             execution.checkpointing.interval, execution.checkpointing.dir, \
             state.checkpoints.num-retained, execution.checkpointing.max-concurrent-checkpoints, \
             execution.checkpointing.min-pause, execution.checkpointing.tolerable-failed-checkpoints, \
             pipeline.max-parallelism, execution.idle-strategy, \
             execution.stall-timeout; did you mean \"metrics.latency.interval\"?"
        );
    }

    #[test]
    fn invalid_values_are_rejected() {
        for (k, v, needle) in [
            ("metrics.latency.interval", "-1s", "cannot be negative"),
            (
                "metrics.latency.granularity",
                "task",
                "unknown latency granularity",
            ),
            ("metrics.latency.history-size", "0", "at least 1"),
            ("execution.buffer-timeout", "soon", "invalid duration"),
            ("execution.channel-capacity", "0", "from 1 to 4096"),
            ("execution.channel-capacity", "4097", "from 1 to 4096"),
            ("parallelism.default", "0", "at least 1"),
            ("metrics.reporter.prom.port", "70000", "invalid port"),
            ("pipeline.operator-chaining.enabled", "no", "true or false"),
            ("metrics.e2e-latency.everywhere", "yes", "true or false"),
        ] {
            let e = resolve(&file(), &SettingFlags::default(), None, &d(&[(k, v)])).unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("-D {k}={v}: ")), "{msg}");
            assert!(msg.contains(needle), "{msg}");
        }
    }
}
