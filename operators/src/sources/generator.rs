//! The `generator` source: synthetic records, as many and as fast as asked.
//!
//! ```yaml
//! sources:
//!   clicks:
//!     type: generator
//!     parallelism: 2
//!     count: 1000000            # in total over all subtasks; absent = unbounded
//!     rate: 50000               # records per second in total; absent = as fast as possible
//!     keys: 1000                # keys 0..keys-1 (default 1024)
//!     key_distribution: zipf    # uniform (default) | zipf
//!     zipf_exponent: 1.2        # default 1.0; only with zipf
//!     value: counter            # counter (default) | random
//!     timestamps: create        # create (default) | ingestion
//!     disorder:                 # optional: hold back a fraction of the records
//!       fraction: 0.01          # of the records, chosen at random (seeded)
//!       delay: 1h               # how long each is held: the fixed delay, the maximum or the mean
//!       distribution: fixed     # fixed (default) | uniform | exponential
//!       max_held: 100000        # records held at most per subtask (default 100000)
//! ```
//!
//! - **Count.** Subtask `i` of `p` makes the records numbered `i, i+p, i+2p, …` below `count`,
//!   so the shares sum to `count` exactly and differ by at most one.
//! - **Values.** `counter`: a record's value is its number (above), so the values of a bounded
//!   run are exactly `0..count` over all subtasks. `random`: uniform in `[0, 1)`.
//! - **Keys.** Every subtask draws from all of `0..keys` with a [`SmallRng`] seeded from the
//!   subtask's seed (so `--seed` repeats a run). `uniform` maps a 64-bit draw onto the range by
//!   a multiply-shift (bias below `keys / 2^64`); `zipf` gives key `k` a weight
//!   `1 / (k+1)^zipf_exponent`, sampled from an alias table built once per vertex (12 bytes a
//!   key, up to 2^20 keys: one random number and no search per record) or, above that, by
//!   rejection-inversion without a table (`rand_distr::Zipf`).
//! - **Timestamps.** `create` timestamps are when the record was made: with `rate`, its place on
//!   the schedule (record `n` of a subtask is stamped `start + n · period`, computed per record
//!   from the first poll's time, no clock read per record), so a subtask held back by
//!   backpressure makes records stamped in the past and the end-to-end latency at the source
//!   shows how far behind schedule it is; without `rate`, the poll's wall clock
//!   (`PollContext::now_nanos`, read once per poll). `ingestion` timestamps are always the wall
//!   clock of the poll that emits the record.
//! - **Disorder.** With `disorder`, each record is picked with probability `fraction` (from a
//!   random generator seeded from the subtask's seed, separate from the keys' so the keys do not
//!   change; gaps between picked records are drawn geometrically, so unpicked records cost
//!   nothing) and held back: it is emitted by the first poll at or after `timestamp + delay`,
//!   keeping its original create timestamp, so it arrives late in event time — the device that
//!   comes back online after a flight and pushes an hour of old events. `delay` per record is
//!   `fixed`: exactly `delay`; `uniform`: uniform in `[0, delay]`; `exponential`: exponential
//!   with mean `delay`, cut at `10 · delay`. Held records wait in a min-heap by release time
//!   (about 48 bytes each) holding at most `max_held` records per subtask: when it is full, a
//!   picked record goes out on time instead, so memory stays bounded (steady state holds about
//!   `rate / parallelism · fraction · mean delay` records a subtask; set `max_held` above that
//!   to get the full fraction). With `count`, held records are released once every record has
//!   been made, at the latest, so exactly `count` records come out. With `timestamps:
//!   ingestion` a held record is stamped when it is released (so it is not late). Released
//!   records go out before the poll's new ones.
//! - **Pacing.** With `rate`, each subtask makes `rate / parallelism` records a second on a
//!   fixed schedule from its first poll: record `n` is due `n / rate_per_subtask` seconds after
//!   it. A poll emits the records due by then (at most the batch size) and, once caught up,
//!   returns [`SourceStatus::Idle`] until the next one is due, so the rate neither drifts nor
//!   bursts; a subtask held back by backpressure catches up at full speed.
//! - **Lag.** With `rate`: the records due on the schedule but not yet made (backpressure made
//!   visible; records held back by `disorder` are on schedule and do not count). With `count` and
//!   no `rate`: the records not yet emitted (held ones included). Otherwise -1 (unknown).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Deserialize;
use tidemark_runtime::{
    BoxError, Output, PollContext, Record, Source, SourceLag, SourceStatus, SubtaskContext,
    TimestampType,
};

use crate::config::{self, duration, nanos_i64, Timestamps};
use crate::registry::{BuildEnv, Built, ComponentInfo, ComponentKind, ConfigError, FieldError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "generator",
    kind: ComponentKind::Source,
    fields: &[
        "count",
        "rate",
        "keys",
        "key_distribution",
        "zipf_exponent",
        "value",
        "timestamps",
        "disorder",
    ],
    summary: "synthetic records: count, rate, keys (uniform or zipf), counter or random values, \
              optional disorder",
    build,
};

/// Keys at most this many get an alias table for `zipf`; more use rejection sampling.
pub const ZIPF_TABLE_MAX_KEYS: u64 = 1 << 20;

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
    fn validate(&self) -> Result<(), FieldError> {
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

/// How keys are drawn, prepared once per vertex and shared by its subtasks.
#[derive(Clone, Debug)]
enum KeySampler {
    Uniform {
        keys: u64,
    },
    /// An alias table over the keys.
    ZipfTable(Arc<AliasTable>),
    ZipfRejection(rand_distr::Zipf<f64>),
}

impl KeySampler {
    fn new(config: &GeneratorConfig) -> Result<Self, String> {
        if config.key_distribution == KeyDistribution::Uniform {
            return Ok(KeySampler::Uniform { keys: config.keys });
        }
        let s = config.zipf_exponent.unwrap_or(1.0);
        if config.keys <= ZIPF_TABLE_MAX_KEYS {
            let weights: Vec<f64> = (1..=config.keys).map(|k| (k as f64).powf(-s)).collect();
            Ok(KeySampler::ZipfTable(Arc::new(AliasTable::new(&weights))))
        } else {
            rand_distr::Zipf::new(config.keys as f64, s)
                .map(KeySampler::ZipfRejection)
                .map_err(|e| format!("zipf_exponent: {e}"))
        }
    }
}

/// Walker's alias table (Vose's construction) over `0..n`: a draw picks a column uniformly and
/// either keeps it or takes its alias, so sampling costs one random number and no search.
#[derive(Debug)]
struct AliasTable {
    /// Column `i` keeps `i` when the draw's fraction is below `keep[i] / 2^64`.
    keep: Vec<u64>,
    /// Otherwise it gives `alias[i]`.
    alias: Vec<u32>,
}

impl AliasTable {
    /// A table for `weights` (not all zero, at most `u32::MAX` of them).
    fn new(weights: &[f64]) -> Self {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut keep = vec![u64::MAX; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            keep[s] = (scaled[s] * TWO_POW_64) as u64;
            alias[s] = l as u32;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // What is left has (up to rounding) weight 1: it keeps itself.
        AliasTable { keep, alias }
    }

    /// A key for the 64 random bits `x`: its high part picks the column, the low part is the
    /// fraction compared with the column's threshold.
    #[inline(always)]
    fn sample(&self, x: u64) -> u64 {
        let wide = x as u128 * self.keep.len() as u128;
        let (column, fraction) = ((wide >> 64) as usize, wide as u64);
        if fraction < self.keep[column] {
            column as u64
        } else {
            self.alias[column] as u64
        }
    }
}

const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// The checked settings and prepared key sampler, shared by all subtasks of a vertex.
#[derive(Debug)]
pub struct GeneratorPlan {
    config: GeneratorConfig,
    keys: KeySampler,
}

impl GeneratorPlan {
    /// Checks `config` and prepares the key distribution.
    pub fn new(config: GeneratorConfig) -> Result<Self, FieldError> {
        config.validate()?;
        let keys = KeySampler::new(&config).map_err(|m| FieldError::new("", m))?;
        Ok(GeneratorPlan { config, keys })
    }

    /// The settings.
    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: GeneratorConfig = config::parse(INFO.type_name, config)?;
    let plan =
        Arc::new(GeneratorPlan::new(config).map_err(|e| ConfigError::invalid("generator", e))?);
    Ok(Built::Source(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(GeneratorSource::new(plan.clone(), ctx)) as Box<dyn Source>)
    })))
}

/// The fixed schedule of a paced subtask.
#[derive(Clone, Copy, Debug)]
struct Pace {
    /// Nanoseconds between two records of this subtask.
    period_nanos: f64,
    /// The first poll's wall clock.
    start: Option<i64>,
}

impl Pace {
    /// Records due by `now`: record `n` is due at `start + n * period`.
    fn due(&self, start: i64, now: i64) -> u64 {
        let elapsed = now.saturating_sub(start).max(0) as f64;
        ((elapsed / self.period_nanos).floor() as u64).saturating_add(1)
    }

    /// When record `n` is due, rounded up to the nanosecond.
    fn due_at(&self, start: i64, n: u64) -> i64 {
        start.saturating_add((n as f64 * self.period_nanos).ceil() as i64)
    }
}

/// A record held back by `disorder`, ordered so that a [`BinaryHeap`] pops the one due first
/// (ties in the order they were held).
#[derive(Clone, Debug)]
struct Held {
    release_at: i64,
    seq: u64,
    record: Record,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.release_at, self.seq) == (other.release_at, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.release_at, other.seq).cmp(&(self.release_at, self.seq))
    }
}

/// The disorder state of one subtask.
#[derive(Debug)]
struct Disorder {
    rng: SmallRng,
    /// `ln(1 - fraction)`, for geometric gaps between held records; 0 when none is held.
    ln_keep: f64,
    fraction: f64,
    delay_nanos: f64,
    distribution: DelayDistribution,
    max_held: usize,
    /// The number (among the records this subtask makes) of the next record to hold.
    next_hold: u64,
    held: BinaryHeap<Held>,
    seq: u64,
}

impl Disorder {
    fn new(config: &DisorderConfig, seed: u64) -> Self {
        let mut d = Disorder {
            rng: SmallRng::seed_from_u64(seed ^ 0x5DEE_CE66_D1CE_F00D),
            ln_keep: (1.0 - config.fraction).ln(),
            fraction: config.fraction,
            delay_nanos: nanos_i64(config.delay) as f64,
            distribution: config.distribution,
            max_held: config.max_held,
            next_hold: 0,
            held: BinaryHeap::new(),
            seq: 0,
        };
        d.next_hold = d.gap();
        d
    }

    /// Records to skip before the next held one: geometric with success `fraction`.
    fn gap(&mut self) -> u64 {
        if self.fraction <= 0.0 {
            return u64::MAX;
        }
        if self.fraction >= 1.0 {
            return 0;
        }
        // u in (0, 1]: ln(u) is finite.
        let u = 1.0 - unit_f64(&mut self.rng);
        let g = (u.ln() / self.ln_keep).floor();
        if g >= u64::MAX as f64 {
            u64::MAX
        } else {
            g as u64
        }
    }

    /// A delay in nanoseconds.
    fn delay(&mut self) -> i64 {
        let d = match self.distribution {
            DelayDistribution::Fixed => self.delay_nanos,
            DelayDistribution::Uniform => {
                // 53 random bits over [0, 1]: both ends included.
                let u = (self.rng.next_u64() >> 11) as f64 / ((1u64 << 53) - 1) as f64;
                u * self.delay_nanos
            }
            DelayDistribution::Exponential => {
                let u = 1.0 - unit_f64(&mut self.rng);
                (-u.ln() * self.delay_nanos).min(10.0 * self.delay_nanos)
            }
        };
        d.round() as i64
    }

    /// Emits `records` (numbered from `first`), holding back the picked ones.
    fn put(&mut self, records: &[Record], first: u64, out: &mut Output) {
        let end = first + records.len() as u64;
        let mut from = 0usize;
        while self.next_hold < end {
            let j = (self.next_hold - first) as usize;
            out.emit_all(&records[from..j]);
            let record = records[j].clone();
            if self.held.len() < self.max_held {
                let release_at = record.timestamp.saturating_add(self.delay());
                self.held.push(Held {
                    release_at,
                    seq: self.seq,
                    record,
                });
                self.seq += 1;
            } else {
                out.emit(record);
            }
            from = j + 1;
            self.next_hold = self.next_hold.saturating_add(1).saturating_add(self.gap());
        }
        out.emit_all(&records[from..]);
    }

    /// Emits up to `max` held records due by `now` (all of them, due or not, with `all`);
    /// returns how many.
    fn release(&mut self, now: i64, max: u64, all: bool, out: &mut Output) -> u64 {
        let mut n = 0;
        while n < max {
            match self.held.peek() {
                Some(h) if all || h.release_at <= now => {
                    let mut record = self.held.pop().expect("peeked").record;
                    if record.timestamp_type == TimestampType::Ingestion {
                        record.timestamp = now;
                    }
                    out.emit(record);
                    n += 1;
                }
                _ => break,
            }
        }
        n
    }

    /// When the next held record is due, if any is held.
    fn next_release(&self) -> Option<i64> {
        self.held.peek().map(|h| h.release_at)
    }
}

/// One subtask of the `generator` source.
#[derive(Debug)]
pub struct GeneratorSource {
    plan: Arc<GeneratorPlan>,
    rng: SmallRng,
    /// This subtask's share of `count`.
    share: Option<u64>,
    /// Records made so far (emitted or held).
    made: u64,
    /// Records emitted so far.
    emitted: u64,
    /// The next counter value.
    counter: u64,
    step: u64,
    pace: Option<Pace>,
    timestamp_type: TimestampType,
    disorder: Option<Disorder>,
}

impl GeneratorSource {
    /// Subtask `ctx.subtask` of `ctx.parallelism`.
    pub fn new(plan: Arc<GeneratorPlan>, ctx: &SubtaskContext) -> Self {
        let p = ctx.parallelism.max(1) as u64;
        let i = ctx.subtask as u64;
        let config = &plan.config;
        let share = config.count.map(|n| n / p + u64::from(i < n % p));
        let pace = config.rate.map(|rate| Pace {
            period_nanos: 1e9 * p as f64 / rate,
            start: None,
        });
        GeneratorSource {
            rng: SmallRng::seed_from_u64(ctx.seed),
            share,
            made: 0,
            emitted: 0,
            counter: i,
            step: p,
            pace,
            timestamp_type: config.timestamps.timestamp_type(),
            disorder: config.disorder.as_ref().map(|d| Disorder::new(d, ctx.seed)),
            plan,
        }
    }

    /// How many records this subtask makes in all, if bounded.
    pub fn share(&self) -> Option<u64> {
        self.share
    }

    /// Records emitted so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Records held back by `disorder` now.
    pub fn held(&self) -> usize {
        self.disorder.as_ref().map_or(0, |d| d.held.len())
    }

    fn emit(&mut self, n: u64, now: i64, out: &mut Output) {
        if n == 0 {
            return;
        }
        let plan = self.plan.clone();
        match &plan.keys {
            KeySampler::Uniform { keys } => {
                let keys = *keys;
                self.emit_with(n, now, out, move |rng| {
                    ((rng.next_u64() as u128 * keys as u128) >> 64) as u64
                })
            }
            KeySampler::ZipfTable(table) => {
                self.emit_with(n, now, out, |rng| table.sample(rng.next_u64()))
            }
            KeySampler::ZipfRejection(zipf) => self.emit_with(n, now, out, |rng| {
                (rng.sample(zipf) as u64).saturating_sub(1)
            }),
        }
    }

    #[inline(always)]
    fn emit_with<K: FnMut(&mut SmallRng) -> u64>(
        &mut self,
        n: u64,
        now: i64,
        out: &mut Output,
        mut key: K,
    ) {
        let timestamp_type = self.timestamp_type;
        // Create timestamps of paced records: their place on the schedule.
        let schedule = match (&self.pace, timestamp_type) {
            (Some(pace), TimestampType::Create) => pace.start.map(|start| (*pace, start)),
            _ => None,
        };
        // A local copy of the generator state stays in registers through the loop.
        let mut rng = self.rng.clone();
        if schedule.is_none() && self.disorder.is_none() {
            // Every record at `now`, none held back: written straight into the output.
            let n = n as usize;
            match self.plan.config.value {
                ValueKind::Counter => {
                    let step = self.step;
                    let counter = self.counter;
                    let end = (n as u64)
                        .checked_mul(step)
                        .and_then(|span| counter.checked_add(span));
                    if end.is_some_and(|end| end <= EXACT_F64_INTS) {
                        // Every value on the way is an integer a double holds exactly, so
                        // counting in doubles gives the same values as converting each one
                        // (and spares the conversion per record).
                        let (mut value, step) = (counter as f64, step as f64);
                        out.emit_numeric_with(n, now, timestamp_type, || {
                            let v = value;
                            value += step;
                            (key(&mut rng) as i64, v)
                        });
                    } else {
                        let mut counter = counter;
                        out.emit_numeric_with(n, now, timestamp_type, || {
                            let v = counter as f64;
                            counter += step;
                            (key(&mut rng) as i64, v)
                        });
                    }
                    self.counter = counter.wrapping_add((n as u64).wrapping_mul(step));
                }
                ValueKind::Random => out.emit_numeric_with(n, now, timestamp_type, || {
                    let k = key(&mut rng);
                    (k as i64, unit_f64(&mut rng))
                }),
            }
            self.rng = rng;
            return;
        }
        let mut number = self.made;
        let mut template = Record::new(0, 0.0, now);
        template.timestamp_type = timestamp_type;
        // Records are built in a small array on the stack and copied out in chunks, which
        // keeps the per-record work free of the output buffer's capacity checks.
        let mut chunk: [Record; CHUNK] = std::array::from_fn(|_| template.clone());
        let mut left = n;
        match self.plan.config.value {
            ValueKind::Counter => {
                let step = self.step;
                let mut counter = self.counter;
                while left > 0 {
                    let m = left.min(CHUNK as u64) as usize;
                    for slot in &mut chunk[..m] {
                        set_numeric(slot, key(&mut rng), counter as f64);
                        counter += step;
                    }
                    self.put(&mut chunk[..m], schedule, number, out);
                    number += m as u64;
                    left -= m as u64;
                }
                self.counter = counter;
            }
            ValueKind::Random => {
                while left > 0 {
                    let m = left.min(CHUNK as u64) as usize;
                    for slot in &mut chunk[..m] {
                        let k = key(&mut rng);
                        set_numeric(slot, k, unit_f64(&mut rng));
                    }
                    self.put(&mut chunk[..m], schedule, number, out);
                    number += m as u64;
                    left -= m as u64;
                }
            }
        }
        self.rng = rng;
    }

    /// Stamps paced records with their schedule and emits them (numbered from `first`),
    /// holding back those `disorder` picks.
    #[inline(always)]
    fn put(
        &mut self,
        records: &mut [Record],
        schedule: Option<(Pace, i64)>,
        first: u64,
        out: &mut Output,
    ) {
        if let Some((pace, start)) = schedule {
            for (n, r) in (first..).zip(records.iter_mut()) {
                r.timestamp = pace.due_at(start, n);
            }
        }
        match &mut self.disorder {
            None => out.emit_all(records),
            Some(d) => d.put(records, first, out),
        }
    }
}

/// Makes `slot` the numeric event `{"key": key, "value": value}` keyed by `key`.
#[inline(always)]
fn set_numeric(slot: &mut Record, key: u64, value: f64) {
    slot.set_numeric(key as i64, value);
}

/// Integers up to this are exactly representable as doubles (2^53).
const EXACT_F64_INTS: u64 = 1 << 53;

/// Records built on the stack before they are copied to the output.
const CHUNK: usize = 64;

/// Uniform in `[0, 1)` with 53 random bits.
#[inline(always)]
fn unit_f64(rng: &mut SmallRng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

impl Source for GeneratorSource {
    fn poll(&mut self, ctx: &PollContext, out: &mut Output) -> Result<SourceStatus, BoxError> {
        let now = ctx.now_nanos;
        let max = ctx.max_records as u64;
        let to_make = self.share.map_or(u64::MAX, |s| s - self.made);
        // Held records due by now go first; once every record is made, all of them.
        let released = match &mut self.disorder {
            Some(d) => d.release(now, max, to_make == 0, out),
            None => 0,
        };
        self.emitted += released;
        let held = self.held();
        if to_make == 0 {
            return Ok(if held == 0 {
                SourceStatus::Finished
            } else {
                SourceStatus::Ready
            });
        }
        let mut n = (max - released).min(to_make);
        let mut schedule = None;
        if let Some(pace) = &mut self.pace {
            let start = *pace.start.get_or_insert(now);
            let due = pace.due(start, now);
            n = n.min(due.saturating_sub(self.made));
            schedule = Some((*pace, start, due));
        }
        let before = out.len();
        self.emit(n, now, out);
        self.made += n;
        self.emitted += (out.len() - before) as u64;
        if n == to_make {
            return Ok(if self.held() == 0 {
                SourceStatus::Finished
            } else {
                SourceStatus::Ready
            });
        }
        if released + n == max {
            // The batch is full: there may be more to give at once.
            return Ok(SourceStatus::Ready);
        }
        if let Some((pace, start, due)) = schedule {
            if self.made >= due {
                let mut next = pace.due_at(start, self.made);
                if let Some(r) = self.disorder.as_ref().and_then(Disorder::next_release) {
                    next = next.min(r);
                }
                return Ok(SourceStatus::Idle {
                    until: Some(next.max(now.saturating_add(1))),
                });
            }
        }
        Ok(SourceStatus::Ready)
    }

    fn lag(&self, now_nanos: i64) -> SourceLag {
        let records = match (&self.pace, self.share) {
            (Some(pace), share) => {
                let due = pace.start.map_or(0, |start| pace.due(start, now_nanos));
                let due = share.map_or(due, |s| due.min(s));
                due.saturating_sub(self.made) as i64
            }
            (None, Some(share)) => (share - self.emitted) as i64,
            (None, None) => -1,
        };
        SourceLag { records, bytes: -1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, kv, poll};
    use serde_json::json;

    fn plan(config: serde_json::Value) -> Arc<GeneratorPlan> {
        let config: GeneratorConfig = config::parse("generator", config).unwrap();
        Arc::new(GeneratorPlan::new(config).unwrap())
    }

    fn drain(source: &mut GeneratorSource, max: usize) -> Vec<Record> {
        let mut all = Vec::new();
        loop {
            let (status, records) = poll(source, 1_000, max);
            all.extend(records);
            match status {
                SourceStatus::Finished => return all,
                SourceStatus::Ready => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn count_is_split_over_subtasks_exactly() {
        let plan = plan(json!({"count": 10_007, "keys": 13}));
        let mut values = Vec::new();
        let mut shares = Vec::new();
        for i in 0..3 {
            let mut s = GeneratorSource::new(plan.clone(), &ctx(i, 3, 7));
            let records = drain(&mut s, 1000);
            assert_eq!(Some(records.len() as u64), s.share());
            assert_eq!(s.lag(0).records, 0);
            shares.push(records.len());
            for r in &records {
                assert!(kv(r).0 < 13, "key {:?} out of range", r.key());
                assert_eq!(r.timestamp, 1_000);
                assert_eq!(r.timestamp_type, TimestampType::Create);
            }
            values.extend(records.iter().map(|r| kv(r).1 as u64));
        }
        assert_eq!(shares, [3336, 3336, 3335]);
        values.sort_unstable();
        assert_eq!(values, (0..10_007).collect::<Vec<u64>>());
    }

    #[test]
    fn count_lag_is_records_not_yet_emitted() {
        let plan = plan(json!({"count": 100, "timestamps": "ingestion"}));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 1));
        assert_eq!(s.lag(0).records, 100);
        let (status, records) = poll(&mut s, 5, 30);
        assert_eq!((status, records.len()), (SourceStatus::Ready, 30));
        assert_eq!(records[0].timestamp_type, TimestampType::Ingestion);
        assert_eq!(
            s.lag(0),
            SourceLag {
                records: 70,
                bytes: -1
            }
        );
        let unbounded = GeneratorSource::new(
            Arc::new(GeneratorPlan::new(config::parse("generator", json!({})).unwrap()).unwrap()),
            &ctx(0, 1, 1),
        );
        assert_eq!(unbounded.lag(0), SourceLag::UNKNOWN);
    }

    #[test]
    fn uniform_keys_cover_the_range_and_repeat_with_the_seed() {
        let plan = plan(json!({"count": 20_000, "keys": 10, "value": "random"}));
        let a = drain(
            &mut GeneratorSource::new(plan.clone(), &ctx(0, 1, 42)),
            1024,
        );
        let b = drain(
            &mut GeneratorSource::new(plan.clone(), &ctx(0, 1, 42)),
            1024,
        );
        let c = drain(&mut GeneratorSource::new(plan, &ctx(0, 1, 43)), 1024);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut hits = [0u32; 10];
        for r in &a {
            hits[kv(r).0 as usize] += 1;
            assert!((0.0..1.0).contains(&kv(r).1));
        }
        // Each key expects 2000 hits; 1500 is more than 11 standard deviations away.
        assert!(hits.iter().all(|&h| h > 1500), "{hits:?}");
    }

    #[test]
    fn zipf_skews_toward_small_keys() {
        for keys in [100u64, ZIPF_TABLE_MAX_KEYS + 1] {
            let plan = plan(json!({"count": 50_000, "keys": keys, "key_distribution": "zipf"}));
            let records = drain(&mut GeneratorSource::new(plan, &ctx(0, 1, 3)), 1024);
            let count = |k: u64| records.iter().filter(|r| kv(r).0 == k).count();
            assert!(records.iter().all(|r| kv(r).0 < keys));
            // With exponent 1, key 0 is twice as likely as key 1 and ten times key 9.
            let (c0, c1, c9) = (count(0), count(1), count(9));
            assert!(c0 > c1 * 3 / 2 && c1 > c9 * 3, "{keys}: {c0} {c1} {c9}");
            let low_half = records.iter().filter(|r| kv(r).0 < keys / 2).count();
            assert!(low_half > records.len() * 3 / 4, "{keys}: {low_half}");
        }
        // A steeper exponent concentrates further.
        let plan = plan(
            json!({"count": 10_000, "keys": 100, "key_distribution": "zipf", "zipf_exponent": 3.0}),
        );
        let records = drain(&mut GeneratorSource::new(plan, &ctx(0, 1, 3)), 1024);
        let zeros = records.iter().filter(|r| kv(r).0 == 0).count();
        assert!(zeros > 7_500, "{zeros}"); // 1/zeta(3) = 0.83
    }

    #[test]
    fn the_alias_table_gives_each_key_its_zipf_probability() {
        for s in [0.0, 1.0, 2.5] {
            let keys = 257;
            let plan = plan(json!({"keys": keys, "key_distribution": "zipf", "zipf_exponent": s}));
            let KeySampler::ZipfTable(table) = &plan.keys else {
                panic!("expected a table")
            };
            // The probability each key gets: its column's kept share plus the columns aliasing
            // to it, each column drawn with probability 1/keys.
            let mut mass = vec![0.0; keys];
            for i in 0..keys {
                let kept = table.keep[i] as f64 / TWO_POW_64;
                mass[i] += kept / keys as f64;
                mass[table.alias[i] as usize] += (1.0 - kept) / keys as f64;
            }
            let total: f64 = (1..=keys).map(|k| (k as f64).powf(-s)).sum();
            for (k, m) in mass.iter().enumerate() {
                let expected = ((k + 1) as f64).powf(-s) / total;
                assert!(
                    (m - expected).abs() < 1e-12,
                    "s={s} key {k}: {m} vs {expected}"
                );
            }
            // The extremes of the draw map into range.
            assert!(table.sample(0) < keys as u64);
            assert!(table.sample(u64::MAX) < keys as u64);
        }
    }

    #[test]
    fn pacing_emits_exactly_the_due_records() {
        // 2000/s over 2 subtasks: 1000/s each, one record per millisecond.
        let plan = plan(json!({"rate": 2000, "keys": 4}));
        let mut s = GeneratorSource::new(plan, &ctx(1, 2, 9));
        let ms = 1_000_000i64;
        let t0 = 1_700_000_000_000 * ms;
        // The first record is due at the first poll.
        let (status, r) = poll(&mut s, t0, 100);
        assert_eq!(r.len(), 1);
        assert_eq!(kv(&r[0]).1, 1.0); // subtask 1 of 2 counts 1, 3, 5, ...
        assert_eq!(
            status,
            SourceStatus::Idle {
                until: Some(t0 + ms)
            }
        );
        // Nothing new is due half a millisecond later.
        let (status, r) = poll(&mut s, t0 + ms / 2, 100);
        assert_eq!(
            (r.len(), status),
            (
                0,
                SourceStatus::Idle {
                    until: Some(t0 + ms)
                }
            )
        );
        // Exactly on time for the second record.
        let (status, r) = poll(&mut s, t0 + ms, 100);
        assert_eq!(r.len(), 1);
        assert_eq!(
            status,
            SourceStatus::Idle {
                until: Some(t0 + 2 * ms)
            }
        );
        assert_eq!(s.lag(t0 + ms).records, 0);
        // 10.5 ms in: records 0..=10 are due, 2 were emitted.
        let (status, r) = poll(&mut s, t0 + 10 * ms + ms / 2, 100);
        assert_eq!(r.len(), 9);
        // Create timestamps are the records' places on the schedule, not the poll's time.
        let stamps: Vec<i64> = r.iter().map(|r| r.timestamp).collect();
        assert_eq!(stamps, (2..=10).map(|n| t0 + n * ms).collect::<Vec<_>>());
        assert_eq!(
            status,
            SourceStatus::Idle {
                until: Some(t0 + 11 * ms)
            }
        );
        // A poll one second late: 1001 due, 11 emitted; the batch size caps the catch-up.
        let late = t0 + 1000 * ms;
        assert_eq!(s.lag(late).records, 990);
        let (status, r) = poll(&mut s, late, 100);
        assert_eq!((r.len(), status), (100, SourceStatus::Ready));
        assert_eq!(s.lag(late).records, 890);
        // Made late, stamped on time: now - timestamp shows how far behind schedule it is.
        assert_eq!(r[0].timestamp, t0 + 11 * ms);
        assert_eq!(late - r[99].timestamp, 890 * ms);
        for _ in 0..8 {
            poll(&mut s, late, 100);
        }
        let (status, r) = poll(&mut s, late, 100);
        assert_eq!(r.len(), 90);
        assert_eq!(
            status,
            SourceStatus::Idle {
                until: Some(late + ms)
            }
        );
        assert_eq!(s.lag(late).records, 0);
        assert_eq!(s.emitted(), 1001);
    }

    #[test]
    fn paced_count_finishes_and_lag_counts_only_its_share() {
        let plan = plan(json!({"rate": 1000, "count": 5}));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
        let ms = 1_000_000i64;
        assert_eq!(s.lag(0).records, 0); // not started
        let (status, r) = poll(&mut s, 0, 100);
        assert_eq!(
            (r.len(), status),
            (1, SourceStatus::Idle { until: Some(ms) })
        );
        assert_eq!(s.lag(60 * ms).records, 4); // 61 due, but only 5 exist
        let (status, r) = poll(&mut s, 60 * ms, 100);
        assert_eq!((r.len(), status), (4, SourceStatus::Finished));
    }

    #[test]
    fn fractional_rates_schedule_to_the_nanosecond() {
        // 3 records per second: due at 0, 333_333_334 ns (rounded up), 666_666_667 ns, 1 s.
        let plan = plan(json!({"rate": 3}));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
        let (status, _) = poll(&mut s, 0, 10);
        assert_eq!(
            status,
            SourceStatus::Idle {
                until: Some(333_333_334)
            }
        );
        let (status, r) = poll(&mut s, 333_333_334, 10);
        assert_eq!(r.len(), 1);
        assert_eq!(
            status,
            SourceStatus::Idle {
                until: Some(666_666_667)
            }
        );
    }

    #[test]
    fn paced_ingestion_timestamps_are_the_poll_time() {
        let plan = plan(json!({"rate": 1000, "timestamps": "ingestion"}));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
        let ms = 1_000_000i64;
        poll(&mut s, 0, 100);
        let (_, r) = poll(&mut s, 50 * ms, 100);
        assert_eq!(r.len(), 50);
        assert!(r
            .iter()
            .all(|r| r.timestamp == 50 * ms && r.timestamp_type == TimestampType::Ingestion));
    }

    /// Polls every `step` ns from `t0` until the source finishes; returns each record with the
    /// time of the poll that emitted it.
    fn drain_timed(
        source: &mut GeneratorSource,
        t0: i64,
        step: i64,
        max: usize,
    ) -> Vec<(i64, Record)> {
        let mut all = Vec::new();
        let mut now = t0;
        loop {
            let (status, records) = poll(source, now, max);
            assert!(records.len() <= max);
            all.extend(records.into_iter().map(|r| (now, r)));
            if status == SourceStatus::Finished {
                return all;
            }
            now += step;
        }
    }

    /// Records whose timestamp is below the highest one emitted before them.
    fn late(records: &[(i64, Record)]) -> usize {
        let mut max = i64::MIN;
        let mut late = 0;
        for (_, r) in records {
            if r.timestamp < max {
                late += 1;
            }
            max = max.max(r.timestamp);
        }
        late
    }

    #[test]
    fn disorder_holds_a_fraction_back_and_still_emits_exactly_count() {
        let ms = 1_000_000i64;
        let plan = plan(json!({
            "count": 100_000, "keys": 10,
            "disorder": {"fraction": 0.01, "delay": "50ms"}
        }));
        let mut s = GeneratorSource::new(plan.clone(), &ctx(0, 1, 11));
        let records = drain_timed(&mut s, 1_000 * ms, ms, 500);
        assert_eq!(records.len(), 100_000);
        assert_eq!(s.emitted(), 100_000);
        assert_eq!(s.held(), 0);
        let mut values: Vec<u64> = records.iter().map(|(_, r)| kv(r).1 as u64).collect();
        values.sort_unstable();
        assert_eq!(values, (0..100_000).collect::<Vec<u64>>());
        // About 1 % come out late (seeded, so this count is fixed; 1 % is 1000).
        let n_late = late(&records);
        assert!((800..1200).contains(&n_late), "{n_late}");
        // Each came out on time (made by this poll) or after waiting its 50 ms, except those
        // let out when everything was made.
        let last_made = records
            .iter()
            .filter(|(at, r)| r.timestamp == *at)
            .map(|(at, _)| *at)
            .max()
            .unwrap();
        let waited = records
            .iter()
            .filter(|(at, r)| *at - r.timestamp >= 50 * ms)
            .count();
        assert!(waited > 0);
        assert!(records
            .iter()
            .all(|(at, r)| r.timestamp == *at || *at - r.timestamp >= 50 * ms || *at > last_made));
        // Without disorder the same seed gives the same records, in order.
        let mut plain = GeneratorSource::new(
            Arc::new(
                GeneratorPlan::new(
                    config::parse("generator", json!({"count": 100_000, "keys": 10})).unwrap(),
                )
                .unwrap(),
            ),
            &ctx(0, 1, 11),
        );
        let plain = drain_timed(&mut plain, 1_000 * ms, ms, 500);
        assert_eq!(late(&plain), 0);
        let pairs = |rs: &[(i64, Record)]| {
            let mut p: Vec<(u64, u64)> =
                rs.iter().map(|(_, r)| (kv(r).1 as u64, kv(r).0)).collect();
            p.sort_unstable();
            p
        };
        assert_eq!(
            pairs(&records),
            pairs(&plain),
            "disorder does not change the keys"
        );
    }

    #[test]
    fn paced_disorder_releases_on_time_with_the_original_timestamp() {
        let ms = 1_000_000i64;
        // 1000/s, every record held 5 ms: each comes out 5 ms after its place on the schedule.
        let plan = plan(json!({
            "rate": 1000, "count": 20,
            "disorder": {"fraction": 1.0, "delay": "5ms"}
        }));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
        let (status, r) = poll(&mut s, 0, 100);
        assert!(r.is_empty());
        assert_eq!(s.held(), 1);
        // The next thing due is record 1 at 1 ms (before record 0's release at 5 ms).
        assert_eq!(status, SourceStatus::Idle { until: Some(ms) });
        for t in 1..5 {
            assert!(poll(&mut s, t * ms, 100).1.is_empty());
        }
        let (_, r) = poll(&mut s, 5 * ms, 100);
        assert_eq!(r.len(), 1);
        assert_eq!((kv(&r[0]).1, r[0].timestamp), (0.0, 0));
        assert_eq!(s.lag(5 * ms).records, 0, "held records are on schedule");
        // Polled late, at 19 ms: the held records due come out (records 1..=5; the others were
        // not made yet), then the last 14 records are made and held.
        let (status, r) = poll(&mut s, 19 * ms, 100);
        assert_eq!((status, s.held()), (SourceStatus::Ready, 14));
        let stamps: Vec<i64> = r.iter().map(|r| r.timestamp).collect();
        assert_eq!(stamps, (1..=5).map(|n| n * ms).collect::<Vec<_>>());
        // All made: everything still held comes out at once, in order, with its timestamp.
        let (status, r) = poll(&mut s, 19 * ms, 100);
        assert_eq!(status, SourceStatus::Finished);
        let stamps: Vec<i64> = r.iter().map(|r| r.timestamp).collect();
        assert_eq!(stamps, (6..=19).map(|n| n * ms).collect::<Vec<_>>());
        assert_eq!(s.emitted(), 20);
    }

    #[test]
    fn held_records_are_bounded_by_max_held() {
        let plan = plan(json!({
            "count": 1000,
            "disorder": {"fraction": 1.0, "delay": "1h", "max_held": 10}
        }));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
        let (status, r) = poll(&mut s, 0, 600);
        assert_eq!((status, r.len(), s.held()), (SourceStatus::Ready, 590, 10));
        // Count-only lag: what is not emitted yet, held records included.
        assert_eq!(s.lag(0).records, 410);
        let (status, r) = poll(&mut s, 0, 600);
        assert_eq!((status, r.len(), s.held()), (SourceStatus::Ready, 400, 10));
        // Everything is made: the held ones come out, an hour early, up to the batch size.
        let (status, r) = poll(&mut s, 0, 4);
        assert_eq!((status, r.len()), (SourceStatus::Ready, 4));
        let (status, r) = poll(&mut s, 0, 600);
        assert_eq!((status, r.len()), (SourceStatus::Finished, 6));
        assert_eq!((s.emitted(), s.lag(0).records), (1000, 0));
    }

    #[test]
    fn ingestion_timestamps_are_set_when_a_held_record_is_released() {
        let ms = 1_000_000i64;
        let plan = plan(json!({
            "timestamps": "ingestion",
            "disorder": {"fraction": 1.0, "delay": "10ms"}
        }));
        let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
        assert!(poll(&mut s, 0, 3).1.is_empty());
        let (_, r) = poll(&mut s, 10 * ms, 3);
        assert_eq!(r.len(), 3);
        assert!(r
            .iter()
            .all(|r| r.timestamp == 10 * ms && r.timestamp_type == TimestampType::Ingestion));
    }

    #[test]
    fn delay_distributions() {
        let config = |d: &str| DisorderConfig {
            fraction: 0.5,
            delay: Duration::from_millis(100),
            distribution: match d {
                "uniform" => DelayDistribution::Uniform,
                "exponential" => DelayDistribution::Exponential,
                _ => DelayDistribution::Fixed,
            },
            max_held: 1,
        };
        let ms = 1_000_000.0;
        for (d, mean, max) in [
            ("fixed", 100.0, 100.0),
            ("uniform", 50.0, 100.0),
            ("exponential", 100.0, 1000.0),
        ] {
            let mut disorder = Disorder::new(&config(d), 5);
            let delays: Vec<f64> = (0..100_000).map(|_| disorder.delay() as f64 / ms).collect();
            let m = delays.iter().sum::<f64>() / delays.len() as f64;
            assert!((m - mean).abs() < mean * 0.02, "{d}: mean {m}");
            assert!(delays.iter().all(|&x| (0.0..=max).contains(&x)), "{d}");
            // Gaps: about half the records are picked.
            let gaps: u64 = (0..10_000).map(|_| disorder.gap() + 1).sum();
            assert!((19_000..21_000).contains(&gaps), "{d}: {gaps}");
        }
    }

    #[test]
    fn invalid_settings_are_named() {
        let cases = [
            (json!({"rate": 0}), "rate: 0 is not a positive number"),
            (json!({"keys": 0}), "keys: must be at least 1"),
            (json!({"zipf_exponent": 2}), "zipf_exponent: only applies"),
            (
                json!({"key_distribution": "zipf", "zipf_exponent": -1}),
                "zipf_exponent: -1 is not a number of at least 0",
            ),
            (json!({"count": -3}), "count: invalid value: integer `-3`"),
            (
                json!({"key_distribution": "pareto"}),
                "key_distribution: unknown value `pareto`, expected one of `uniform`, `zipf`",
            ),
            (
                json!({"disorder": {"fraction": 1.5, "delay": "1s"}}),
                "disorder.fraction: 1.5 is not a fraction from 0 to 1",
            ),
            (
                json!({"disorder": {"fraction": 0.1, "delay": 0}}),
                "disorder.delay: must be more than 0",
            ),
            (
                json!({"disorder": {"fraction": 0.1, "delay": "1s", "max_held": 0}}),
                "disorder.max_held: must be at least 1",
            ),
            (
                json!({"disorder": {"fraction": 0.1}}),
                "disorder: missing field `delay`",
            ),
            (
                json!({"disorder": {"fraction": 0.1, "delay": "1s", "distribution": "normal"}}),
                "disorder.distribution: unknown value `normal`, expected one of `fixed`, \
                 `uniform`, `exponential`",
            ),
            (
                json!({"disorder": {"fractoin": 0.1, "delay": "1s"}}),
                "disorder: unknown field `fractoin`, expected one of `fraction`",
            ),
        ];
        for (config, expected) in cases {
            let err = build(config.clone(), &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{config}: {err}");
        }
    }
}
