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
//! - **Keys.** Every subtask draws from all of `0..keys` with a xoshiro256++ generator
//!   ([`Xoshiro256PlusPlus`], the algorithm of `rand`'s `SmallRng` on 64-bit machines, whose
//!   state can be kept in a checkpoint) seeded from the subtask's seed (so `--seed` repeats a
//!   run). `uniform` maps a 64-bit draw onto the range by
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
//! - **On restore** (checkpoints to a directory): each subtask records the records it made and
//!   emitted, its next counter value, the states of its random generators (keys and values,
//!   disorder), the start of its `rate` schedule and the records it holds back
//!   ([`GeneratorPosition`]); a restored subtask makes exactly the records an uninterrupted run
//!   would have made after that point, with the same keys, values and, with a `rate`, the same
//!   create timestamps (it is behind its schedule by the time it was down and catches up at full
//!   speed). Without a `rate`, create timestamps are the wall clock of the poll, and so are
//!   ingestion timestamps: those are not replayed.

mod config;
mod disorder;
mod keys;
mod pacing;
mod position;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rand::{Rng, RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use tidemark_runtime::{
    BoxError, Output, PollContext, Record, Source, SourceLag, SourceStatus, SubtaskContext,
    TimestampType,
};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::error::{ConfigError, FieldError};

pub use config::{
    DelayDistribution, DisorderConfig, GeneratorConfig, KeyDistribution, ValueKind,
    DEFAULT_MAX_HELD,
};
use disorder::Disorder;
use keys::KeySampler;
pub use keys::ZIPF_TABLE_MAX_KEYS;
use pacing::Pace;
pub use position::GeneratorPosition;

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
    let config: GeneratorConfig = crate::config::parse(INFO.type_name, config)?;
    let plan =
        Arc::new(GeneratorPlan::new(config).map_err(|e| ConfigError::invalid("generator", e))?);
    Ok(Built::Source(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(GeneratorSource::new(plan.clone(), ctx)) as Box<dyn Source>)
    })))
}

/// One subtask of the `generator` source.
#[derive(Debug)]
pub struct GeneratorSource {
    plan: Arc<GeneratorPlan>,
    rng: Xoshiro256PlusPlus,
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
    vertex: String,
    subtask: usize,
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
            rng: Xoshiro256PlusPlus::seed_from_u64(ctx.seed),
            share,
            made: 0,
            emitted: 0,
            counter: i,
            step: p,
            pace,
            timestamp_type: config.timestamps.timestamp_type(),
            disorder: config.disorder.as_ref().map(|d| Disorder::new(d, ctx.seed)),
            vertex: ctx.vertex_id.clone(),
            subtask: ctx.subtask,
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
        self.disorder.as_ref().map_or(0, Disorder::held)
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
    fn emit_with<K: FnMut(&mut Xoshiro256PlusPlus) -> u64>(
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
fn unit_f64(rng: &mut Xoshiro256PlusPlus) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

impl Source for GeneratorSource {
    /// A paced generator says when its next record is due instead of waiting for it.
    fn polls_without_waiting(&self) -> bool {
        true
    }

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

    fn resumable(&self) -> bool {
        true
    }

    /// Records made and emitted, the next counter value, the random generators' states, the
    /// schedule's start and the held records ([`GeneratorPosition`]).
    fn position(&mut self, _checkpoint: u64) -> Result<Vec<u8>, BoxError> {
        self.take_position()
    }

    fn resume(&mut self, position: &[u8]) -> Result<(), BoxError> {
        self.resume_from(position)
    }
}
