//! Where a generator subtask continues from after a restore: the records made and emitted so
//! far, the next counter value, the random generators' states, the pacing schedule's start and
//! the records held back by `disorder`. A resumed subtask makes exactly the records an
//! uninterrupted one would have made after that point: the same keys, values and (with a `rate`
//! or from the disorder schedule) the same create timestamps.

use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use tidemark_runtime::{state_codec, BoxError};

use super::disorder::DisorderPosition;
use super::source::GeneratorSource;
use crate::positions::{self, RestoreError};

/// A generator subtask's [`tidemark_runtime::Source::position`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeneratorPosition {
    parallelism: u64,
    made: u64,
    emitted: u64,
    counter: u64,
    rng: Xoshiro256PlusPlus,
    /// The first poll's wall clock, with a `rate`: the schedule continues from it (a restored
    /// subtask is behind schedule by the time it was down and catches up at full speed).
    schedule_start: Option<i64>,
    disorder: Option<DisorderPosition>,
}

impl GeneratorSource {
    pub(super) fn take_position(&self) -> Result<Vec<u8>, BoxError> {
        let position = GeneratorPosition {
            parallelism: self.step,
            made: self.made,
            emitted: self.emitted,
            counter: self.counter,
            rng: self.rng.clone(),
            schedule_start: self.pace.and_then(|p| p.start),
            disorder: self.disorder.as_ref().map(|d| d.position()).transpose()?,
        };
        Ok(state_codec::encode(&position)?)
    }

    pub(super) fn resume_from(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        let what = format!("the generator `{}` subtask {}", self.vertex, self.subtask);
        let p: GeneratorPosition = positions::decode(&what, bytes)?;
        if p.parallelism != self.step {
            return Err(RestoreError::Parallelism {
                what,
                recorded: p.parallelism,
                current: self.step,
            }
            .into());
        }
        if let Some(share) = self.share.filter(|&s| s < p.made) {
            return Err(format!(
                "{what}: the checkpoint has {} records made, more than its share of `count` \
                 now ({share}); restore with the count the checkpoint was taken with",
                p.made
            )
            .into());
        }
        if p.disorder.as_ref().is_some_and(|d| d.next_hold() < p.made) {
            return Err(format!(
                "{what}: the checkpoint's position is damaged (the next record to hold back is \
                 before the records made)"
            )
            .into());
        }
        match (&mut self.disorder, p.disorder) {
            (Some(d), Some(position)) => d.resume(position),
            (None, None) => {}
            (now, _) => {
                return Err(format!(
                    "{what}: the checkpoint was taken {} `disorder`, the job has it {}",
                    if now.is_some() { "without" } else { "with" },
                    if now.is_some() { "now" } else { "no more" },
                )
                .into())
            }
        }
        if let Some(pace) = &mut self.pace {
            pace.start = p.schedule_start;
        }
        self.made = p.made;
        self.emitted = p.emitted;
        self.counter = p.counter;
        self.rng = p.rng;
        Ok(())
    }
}
