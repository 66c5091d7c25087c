//! The settings of the `generator` source, as the job file gives them, and their checks.

use std::time::Duration;

use serde::Deserialize;

use crate::config::{duration, Timestamps};
use crate::error::FieldError;

/// Settings of the `generator` source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    /// Records in total over all subtasks; `None` is unbounded.
    #[serde(default)]
    pub count: Option<u64>,
    /// Records per second in total over all subtasks; `None` is as fast as possible.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Keys are `0..keys`.
    #[serde(default = "default_keys")]
    pub keys: u64,
    /// How keys are drawn.
    #[serde(default)]
    pub key_distribution: KeyDistribution,
    /// The exponent of the `zipf` distribution (default 1.0).
    #[serde(default)]
    pub zipf_exponent: Option<f64>,
    /// What a record's value is.
    #[serde(default)]
    pub value: ValueKind,
    /// Which timestamp type records carry.
    #[serde(default)]
    pub timestamps: Timestamps,
    /// Hold back a fraction of the records, so they arrive late.
    #[serde(default)]
    pub disorder: Option<DisorderConfig>,
    /// The event time of the first record, RFC 3339: create timestamps are then
    /// `start_time + m / event_rate` for record `m` over all subtasks (subtask `i` of `p` makes
    /// `i, i+p, …`), whatever the wall clock does, so two runs with the same seed give the
    /// same records.
    #[serde(default)]
    pub start_time: Option<String>,
    /// Records per second of event time with `start_time`; default `rate`.
    #[serde(default)]
    pub event_rate: Option<f64>,
}

fn default_keys() -> u64 {
    1024
}

impl GeneratorConfig {
    /// With `start_time`: the first record's event time (ns since the Unix epoch) and the
    /// records per second of event time; the message names the field.
    pub fn event_clock(&self) -> Result<Option<(i64, f64)>, FieldError> {
        let Some(start) = &self.start_time else {
            return match self.event_rate {
                Some(_) => Err(FieldError::new(
                    "event_rate",
                    "goes with start_time (the event time of the first record)",
                )),
                None => Ok(None),
            };
        };
        let start = chrono::DateTime::parse_from_rfc3339(start)
            .ok()
            .and_then(|t| t.timestamp_nanos_opt())
            .ok_or_else(|| {
                FieldError::new(
                    "start_time",
                    format!("\"{start}\" is not an RFC 3339 time such as 2026-01-01T00:00:00Z"),
                )
            })?;
        let rate = match (self.event_rate, self.rate) {
            (Some(r), _) if !(r.is_finite() && r > 0.0) => {
                return Err(FieldError::new(
                    "event_rate",
                    format!("{r} is not a positive number of records per second"),
                ))
            }
            (Some(r), _) | (None, Some(r)) => r,
            (None, None) => {
                return Err(FieldError::new(
                    "start_time",
                    "needs event_rate (or rate): how far apart in event time the records are",
                ))
            }
        };
        if self.timestamps == crate::config::Timestamps::Ingestion {
            return Err(FieldError::new(
                "start_time",
                "sets create timestamps; it does not go with timestamps: ingestion",
            ));
        }
        if self.disorder.is_some() {
            return Err(FieldError::new(
                "start_time",
                "does not go with disorder yet (held records are released by the wall clock)",
            ));
        }
        Ok(Some((start, rate)))
    }
}

/// Records held back at most per subtask unless `max_held` says otherwise.
pub const DEFAULT_MAX_HELD: usize = 100_000;

/// Settings of `disorder`: which records are held back, and for how long.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisorderConfig {
    /// The fraction of records held back, 0 to 1.
    pub fraction: f64,
    /// The delay: exact (`fixed`), the maximum (`uniform`) or the mean (`exponential`).
    #[serde(with = "duration")]
    pub delay: Duration,
    /// How delays are drawn.
    #[serde(default)]
    pub distribution: DelayDistribution,
    /// Records held at most per subtask.
    #[serde(default = "default_max_held")]
    pub max_held: usize,
}

fn default_max_held() -> usize {
    DEFAULT_MAX_HELD
}

/// How the delay of a held-back record is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DelayDistribution {
    /// Exactly `delay`.
    #[default]
    Fixed,
    /// Uniform in `[0, delay]`.
    Uniform,
    /// Exponential with mean `delay`, cut at `10 · delay`.
    Exponential,
}

impl DisorderConfig {
    pub(super) fn validate(&self) -> Result<(), FieldError> {
        if !(self.fraction.is_finite() && (0.0..=1.0).contains(&self.fraction)) {
            return Err(FieldError::new(
                "disorder.fraction",
                format!("{} is not a fraction from 0 to 1", self.fraction),
            ));
        }
        if self.delay.is_zero() {
            return Err(FieldError::new("disorder.delay", "must be more than 0"));
        }
        if self.max_held == 0 {
            return Err(FieldError::new("disorder.max_held", "must be at least 1"));
        }
        Ok(())
    }
}

/// How the generator draws keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDistribution {
    /// Every key equally likely.
    #[default]
    Uniform,
    /// Key `k` with weight `1 / (k+1)^zipf_exponent`: small keys are hot.
    Zipf,
}

/// What the generator puts in a record's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    /// The record's number: subtask `i` of `p` counts `i, i+p, i+2p, …`.
    #[default]
    Counter,
    /// Uniform in `[0, 1)`.
    Random,
}

impl GeneratorConfig {
    /// Checks the settings; the message names the field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(FieldError::new(
                    "rate",
                    format!("{rate} is not a positive number of records per second"),
                ));
            }
        }
        if self.keys == 0 {
            return Err(FieldError::new("keys", "must be at least 1"));
        }
        self.event_clock()?;
        if let Some(d) = &self.disorder {
            d.validate()?;
        }
        match (self.key_distribution, self.zipf_exponent) {
            (KeyDistribution::Uniform, Some(_)) => Err(FieldError::new(
                "zipf_exponent",
                "only applies with key_distribution: zipf (the distribution is uniform)",
            )),
            (KeyDistribution::Zipf, Some(s)) if !(s.is_finite() && s >= 0.0) => {
                Err(FieldError::new(
                    "zipf_exponent",
                    format!("{s} is not a number of at least 0"),
                ))
            }
            _ => Ok(()),
        }
    }
}
