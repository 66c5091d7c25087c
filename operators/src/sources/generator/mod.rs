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
//!     start_time: 2026-01-01T00:00:00Z  # optional: create timestamps in event time from here
//!     event_rate: 1000          # records per second of event time (default rate)
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
//! - **Event time from `start_time`.** With `start_time` (RFC 3339) create timestamps are event
//!   time: record `m` over all subtasks (subtask `i` of `p` makes `i, i+p, …`) is stamped
//!   `start_time + m / event_rate` (`event_rate` in records per second of event time, default
//!   `rate`), whatever the wall clock does, also across a restore. Two runs with the same
//!   `--seed` then give the same records and can be compared with `diff`. `rate` still paces
//!   the wall clock (absent: as fast as possible). Not with `timestamps: ingestion` or
//!   `disorder`.
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
mod plan;
mod position;
mod random;
mod source;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use tidemark_runtime::{Source, SubtaskContext};
// What the tests (`use super::*`) name of the subtask's code, now in `source`.
#[cfg(test)]
use {
    rand::{RngCore, SeedableRng},
    rand_xoshiro::Xoshiro256PlusPlus,
    tidemark_runtime::{Record, SourceLag, SourceStatus, TimestampType},
};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::error::ConfigError;

pub use config::{
    DelayDistribution, DisorderConfig, GeneratorConfig, KeyDistribution, ValueKind,
    DEFAULT_MAX_HELD,
};
pub use keys::ZIPF_TABLE_MAX_KEYS;
pub use plan::GeneratorPlan;
pub use position::GeneratorPosition;
pub use source::GeneratorSource;

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
        "start_time",
        "event_rate",
    ],
    summary: "synthetic records: count, rate, keys (uniform or zipf), counter or random values, \
              optional disorder",
    build,
};

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: GeneratorConfig = crate::config::parse(INFO.type_name, config)?;
    let plan =
        Arc::new(GeneratorPlan::new(config).map_err(|e| ConfigError::invalid("generator", e))?);
    Ok(Built::Source(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(GeneratorSource::new(plan.clone(), ctx)) as Box<dyn Source>)
    })))
}
