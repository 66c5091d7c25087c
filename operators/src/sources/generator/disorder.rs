//! Disorder: the records a subtask holds back, and when each is released.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use tidemark_runtime::{Output, Record, TimestampType};

use super::config::{DelayDistribution, DisorderConfig};
use super::random::unit_f64;
use crate::config::nanos_i64;

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
pub(super) struct Disorder {
    rng: Xoshiro256PlusPlus,
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
    pub(super) fn new(config: &DisorderConfig, seed: u64) -> Self {
        let mut d = Disorder {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5DEE_CE66_D1CE_F00D),
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
    pub(super) fn delay(&mut self) -> i64 {
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
    pub(super) fn put(&mut self, records: &[Record], first: u64, out: &mut Output) {
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
    pub(super) fn release(&mut self, now: i64, max: u64, all: bool, out: &mut Output) -> u64 {
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

    /// Records held now.
    pub(super) fn held(&self) -> usize {
        self.held.len()
    }

    /// When the next held record is due, if any is held.
    pub(super) fn next_release(&self) -> Option<i64> {
        self.held.peek().map(|h| h.release_at)
    }
}

/// The disorder state of a subtask as a checkpoint keeps it: the random generator, the next
/// record to hold and every record held now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisorderPosition {
    rng: Xoshiro256PlusPlus,
    next_hold: u64,
    seq: u64,
    held: Vec<HeldPosition>,
}

impl DisorderPosition {
    /// The number of the next record to hold.
    pub(super) fn next_hold(&self) -> u64 {
        self.next_hold
    }
}

/// A held record in a checkpoint (the generator's records are numeric: key and value).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct HeldPosition {
    release_at: i64,
    seq: u64,
    key: i64,
    value: f64,
    timestamp: i64,
    ingestion: bool,
}

impl Disorder {
    /// The state to keep in a checkpoint.
    pub(super) fn position(&self) -> Result<DisorderPosition, String> {
        let held = self
            .held
            .iter()
            .map(|h| {
                let (key, value) = h
                    .record
                    .numeric_parts()
                    .ok_or("a held record is not a generator record")?;
                Ok(HeldPosition {
                    release_at: h.release_at,
                    seq: h.seq,
                    key,
                    value,
                    timestamp: h.record.timestamp,
                    ingestion: h.record.timestamp_type == TimestampType::Ingestion,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(DisorderPosition {
            rng: self.rng.clone(),
            next_hold: self.next_hold,
            seq: self.seq,
            held,
        })
    }

    /// Continues from `position`.
    pub(super) fn resume(&mut self, position: DisorderPosition) {
        self.rng = position.rng;
        self.next_hold = position.next_hold;
        self.seq = position.seq;
        self.held = position
            .held
            .into_iter()
            .map(|h| {
                let mut record = Record::new(0, 0.0, h.timestamp);
                record.set_numeric(h.key, h.value);
                if h.ingestion {
                    record.timestamp_type = TimestampType::Ingestion;
                }
                Held {
                    release_at: h.release_at,
                    seq: h.seq,
                    record,
                }
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
