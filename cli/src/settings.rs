//! The run's settings and their precedence: a flag, then `-D key=value`, then the job file,
//! then the built-in default. When a flag and a `-D` set the same setting, the flag wins.

use crate::args::{parse_parallelism, SettingFlags};
use crate::jobfile::{JobFile, LatencySection};
use crate::suggest::{did_you_mean, hint};
use std::num::NonZeroUsize;
use std::time::Duration;
use tidemark_markers::{parse_duration, Buckets, LatencyConfig};
use tidemark_runtime::config::DEFAULT_BUFFER_TIMEOUT;

/// Where `/metrics` is served unless a flag or `-D` says otherwise.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9249";

/// `-D` key of the buffer timeout.
pub const BUFFER_TIMEOUT_KEY: &str = "execution.buffer-timeout";
/// `-D` key of the default parallelism.
pub const PARALLELISM_KEY: &str = "parallelism.default";
/// `-D` key of the metrics port (the host stays that of the default address).
pub const PROM_PORT_KEY: &str = "metrics.reporter.prom.port";
/// `-D` key of chaining (Flink's `pipeline.operator-chaining.enabled`).
pub const CHAINING_KEY: &str = "pipeline.operator-chaining.enabled";
/// `-D` key of recording record end-to-end latency at every vertex.
pub const E2E_EVERYWHERE_KEY: &str = "metrics.e2e-latency.everywhere";

/// Every key `-D` accepts.
pub const KEYS: [&str; 8] = [
    LatencyConfig::INTERVAL_KEY,
    LatencyConfig::GRANULARITY_KEY,
    LatencyConfig::HISTORY_SIZE_KEY,
    BUFFER_TIMEOUT_KEY,
    PARALLELISM_KEY,
    PROM_PORT_KEY,
    CHAINING_KEY,
    E2E_EVERYWHERE_KEY,
];

/// What the job file says about the settings (its top-level fields).
#[derive(Debug, Clone, Default)]
pub struct FileSettings {
    /// `parallelism`.
    pub parallelism: Option<NonZeroUsize>,
    /// `buffer_timeout`.
    pub buffer_timeout: Option<Duration>,
    /// `chaining`.
    pub chaining: Option<bool>,
    /// `e2e_latency_everywhere`.
    pub e2e_latency_everywhere: Option<bool>,
    /// `latency`.
    pub latency: LatencySection,
    /// `e2e.buckets`.
    pub e2e_buckets: Option<Buckets>,
}

impl FileSettings {
    /// The settings part of a job file.
    pub fn of(job: &JobFile) -> FileSettings {
        FileSettings {
            parallelism: job.parallelism,
            buffer_timeout: job.buffer_timeout,
            chaining: job.chaining,
            e2e_latency_everywhere: job.e2e_latency_everywhere,
            latency: job.latency.clone(),
            e2e_buckets: job.e2e_buckets.clone(),
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
}

/// A bad `-D`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A key no setting has.
    #[error("unknown setting -D {key}: valid keys are {}{}", KEYS.join(", "), hint(suggestion))]
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

/// Resolves the settings: defaults, then the job file, then each `-D` in order, then flags.
pub fn resolve(
    file: &FileSettings,
    flags: &SettingFlags,
    metrics_addr: Option<&str>,
    defines: &[(String, String)],
) -> Result<Settings, SettingsError> {
    // Defaults.
    let mut s = Settings {
        latency: LatencyConfig::default(),
        buffer_timeout: DEFAULT_BUFFER_TIMEOUT,
        parallelism: NonZeroUsize::MIN,
        metrics_addr: DEFAULT_METRICS_ADDR.to_string(),
        chaining: true,
        e2e_latency_everywhere: false,
        marker_buckets: Buckets::marker_latency(),
        e2e_buckets: Buckets::e2e_latency(),
    };
    // The job file.
    if let Some(b) = &file.latency.buckets {
        s.marker_buckets = b.clone();
    }
    if let Some(b) = &file.e2e_buckets {
        s.e2e_buckets = b.clone();
    }
    if let Some(i) = file.latency.interval {
        s.latency.interval = i;
    }
    if let Some(g) = file.latency.granularity {
        s.latency.granularity = g;
    }
    if let Some(h) = file.latency.history_size {
        s.latency.history_size = h;
    }
    if let Some(b) = file.buffer_timeout {
        s.buffer_timeout = b;
    }
    if let Some(p) = file.parallelism {
        s.parallelism = p;
    }
    if let Some(c) = file.chaining {
        s.chaining = c;
    }
    if let Some(e) = file.e2e_latency_everywhere {
        s.e2e_latency_everywhere = e;
    }
    // -D, in order: the last one for a key wins.
    for (key, value) in defines {
        let invalid = |message: String| SettingsError::InvalidValue {
            key: key.clone(),
            value: value.clone(),
            message,
        };
        match s.latency.apply(key, value) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => return Err(invalid(e.to_string())),
        }
        match key.as_str() {
            BUFFER_TIMEOUT_KEY => {
                s.buffer_timeout = parse_duration(value).map_err(|e| invalid(e.to_string()))?
            }
            PARALLELISM_KEY => s.parallelism = parse_parallelism(value).map_err(invalid)?,
            PROM_PORT_KEY => {
                let port: u16 = value.trim().parse().map_err(|_| {
                    invalid(format!(
                        "invalid port \"{value}\": expected a number from 0 to 65535"
                    ))
                })?;
                let host = DEFAULT_METRICS_ADDR
                    .rsplit_once(':')
                    .map_or("127.0.0.1", |h| h.0);
                s.metrics_addr = format!("{host}:{port}");
            }
            CHAINING_KEY => s.chaining = parse_bool(value).map_err(invalid)?,
            E2E_EVERYWHERE_KEY => s.e2e_latency_everywhere = parse_bool(value).map_err(invalid)?,
            _ => {
                return Err(SettingsError::UnknownKey {
                    key: key.clone(),
                    suggestion: did_you_mean(key, KEYS),
                })
            }
        }
    }
    // Flags.
    if let Some(i) = flags.latency_interval {
        s.latency.interval = i;
    }
    if let Some(g) = flags.latency_granularity {
        s.latency.granularity = g;
    }
    if let Some(h) = flags.latency_history_size {
        s.latency.history_size = h;
    }
    if let Some(b) = flags.buffer_timeout {
        s.buffer_timeout = b;
    }
    if let Some(p) = flags.parallelism {
        s.parallelism = p;
    }
    if let Some(a) = metrics_addr {
        s.metrics_addr = a.to_string();
    }
    if flags.no_chaining {
        s.chaining = false;
    }
    if flags.e2e_latency_everywhere {
        s.e2e_latency_everywhere = true;
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
            chaining: Some(true),
            e2e_latency_everywhere: Some(false),
            latency: LatencySection {
                interval: Some(Duration::from_millis(200)),
                granularity: Some(Granularity::Single),
                history_size: Some(nz(64)),
                buckets: None,
            },
            e2e_buckets: None,
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
        assert_eq!(s.latency, LatencyConfig::default());
        assert_eq!(s.buffer_timeout, DEFAULT_BUFFER_TIMEOUT);
        assert_eq!(s.parallelism, nz(1));
        assert_eq!(s.metrics_addr, "127.0.0.1:9249");
        assert!(s.chaining);
        assert!(!s.e2e_latency_everywhere);
    }

    #[test]
    fn job_file_beats_defaults() {
        let s = resolve(&file(), &SettingFlags::default(), None, &[]).unwrap();
        assert_eq!(s.latency.interval, Duration::from_millis(200));
        assert_eq!(s.latency.granularity, Granularity::Single);
        assert_eq!(s.latency.history_size, nz(64));
        assert_eq!(s.buffer_timeout, Duration::from_millis(5));
        assert_eq!(s.parallelism, nz(2));
    }

    #[test]
    fn defines_beat_the_job_file() {
        let defines = d(&[
            ("metrics.latency.interval", "10ms"),
            ("metrics.latency.granularity", "subtask"),
            ("metrics.latency.history-size", "16"),
            ("execution.buffer-timeout", "1s"),
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
        assert_eq!(s.parallelism, nz(3));
        assert_eq!(s.metrics_addr, "127.0.0.1:9300");
    }

    #[test]
    fn flags_beat_defines_and_the_job_file() {
        let flags = SettingFlags {
            latency_interval: Some(Duration::from_millis(1)),
            latency_granularity: Some(Granularity::Operator),
            latency_history_size: Some(nz(8)),
            buffer_timeout: Some(Duration::ZERO),
            parallelism: Some(nz(4)),
            no_chaining: true,
            e2e_latency_everywhere: true,
        };
        let defines = d(&[
            ("metrics.latency.interval", "10ms"),
            ("parallelism.default", "3"),
            ("metrics.reporter.prom.port", "9300"),
        ]);
        let s = resolve(&file(), &flags, Some("0.0.0.0:1234"), &defines).unwrap();
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
             execution.buffer-timeout, parallelism.default, metrics.reporter.prom.port, \
             pipeline.operator-chaining.enabled, metrics.e2e-latency.everywhere; \
             did you mean \"metrics.latency.interval\"?"
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
