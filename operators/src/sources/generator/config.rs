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
}

fn default_keys() -> u64 {
    1024
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
