//! One subtask of the `generator` source ([`GeneratorSource`]): makes its share of the
//! records, paced and disordered as configured.

use std::sync::Arc;

use rand::{Rng, RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use tidemark_runtime::{
    BoxError, Output, PollContext, Record, Source, SourceLag, SourceStatus, SubtaskContext,
    TimestampType,
};

use super::config::ValueKind;
use super::disorder::Disorder;
use super::keys::KeySampler;
use super::pacing::{Pace, Stamps};
use super::plan::GeneratorPlan;
use super::random::unit_f64;

/// One subtask of the `generator` source.
#[derive(Debug)]
pub struct GeneratorSource {
    pub(super) plan: Arc<GeneratorPlan>,
    pub(super) rng: Xoshiro256PlusPlus,
    /// This subtask's share of `count`.
    pub(super) share: Option<u64>,
    /// Records made so far (emitted or held).
    pub(super) made: u64,
    /// Records emitted so far.
    pub(super) emitted: u64,
    /// The next counter value.
    pub(super) counter: u64,
    pub(super) step: u64,
    pub(super) pace: Option<Pace>,
    /// With `start_time`: every record's event time, whatever the wall clock does.
    pub(super) event_time: Option<Stamps>,
    pub(super) timestamp_type: TimestampType,
    pub(super) disorder: Option<Disorder>,
    pub(super) vertex: String,
    pub(super) subtask: usize,
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
        // Checked when the plan was made.
        let event_time = config
            .event_clock()
            .ok()
            .flatten()
            .map(|(start, rate)| Stamps::of_event_time(start, rate, i, p));
        GeneratorSource {
            event_time,
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
        // Create timestamps in event time from `start_time`, or of paced records: their place
        // on the schedule.
        let schedule = match (&self.event_time, &self.pace, timestamp_type) {
            (Some(stamps), _, TimestampType::Create) => Some(*stamps),
            (None, Some(pace), TimestampType::Create) => {
                pace.start.map(|start| Stamps::of_pace(pace, start))
            }
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
        schedule: Option<Stamps>,
        first: u64,
        out: &mut Output,
    ) {
        if let Some(stamps) = schedule {
            for (n, r) in (first..).zip(records.iter_mut()) {
                r.timestamp = stamps.at(n);
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
