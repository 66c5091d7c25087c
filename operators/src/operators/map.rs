//! The `map` operator: `value = value * scale + offset`, with simulated CPU work per record.
//!
//! ```yaml
//! operators:
//!   work:
//!     type: map
//!     input: clicks
//!     cost: 2us      # busy CPU work per record (default 0)
//!     scale: 2       # default 1
//!     offset: 1      # default 0
//! ```
//!
//! `cost` spins a counting loop through [`std::hint::black_box`] rather than reading the clock
//! per record: how many iterations take one microsecond is measured once per process
//! ([`spins_per_microsecond`]), when the first `map` with a cost is built. Under CPU contention
//! a record then takes longer than `cost`, as real work would. Keys and timestamps pass through.
//!
//! `scale` and `offset` work on the event's numeric field `value` (an int becomes a double);
//! an event without a numeric `value` fails the job, naming it, unless `scale` is 1 and
//! `offset` 0, when every event passes unchanged (a `map` with only `cost`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::config::{self, duration};
use crate::registry::{BuildEnv, Built, ComponentInfo, ComponentKind, ConfigError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "map",
    kind: ComponentKind::Operator,
    fields: &["cost", "scale", "offset"],
    summary: "value = value * scale + offset, spinning `cost` of CPU work per record",
    build,
};

/// Settings of the `map` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapConfig {
    /// Simulated CPU work per record.
    #[serde(default, with = "duration")]
    pub cost: Duration,
    /// Multiplies the value.
    #[serde(default = "one")]
    pub scale: f64,
    /// Is added to the scaled value.
    #[serde(default)]
    pub offset: f64,
}

fn one() -> f64 {
    1.0
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: MapConfig = config::parse(INFO.type_name, config)?;
    if !config.scale.is_finite() || !config.offset.is_finite() {
        return Err(config::invalid(
            INFO.type_name,
            "",
            "scale and offset must be finite numbers",
        ));
    }
    let op = MapOperator::new(&config);
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(Box::new(op) as Box<dyn Operator>)
    })))
}

/// How many iterations of the spin loop take one microsecond on this machine, measured once.
pub fn spins_per_microsecond() -> f64 {
    static SPINS: OnceLock<f64> = OnceLock::new();
    *SPINS.get_or_init(|| {
        const N: u64 = 1_000_000;
        spin(N / 10); // warm up
        let fastest = (0..5)
            .map(|_| {
                let t = Instant::now();
                spin(N);
                t.elapsed()
            })
            .min()
            .expect("five runs");
        N as f64 / (fastest.as_nanos().max(1) as f64 / 1_000.0)
    })
}

/// Busy work: `iterations` rounds of a loop the optimiser cannot remove.
#[inline]
pub fn spin(iterations: u64) {
    let mut i = 0u64;
    while i < iterations {
        std::hint::black_box(i);
        i += 1;
    }
}

/// One subtask of the `map` operator.
#[derive(Clone, Copy, Debug)]
pub struct MapOperator {
    scale: f64,
    offset: f64,
    /// Spin-loop iterations per record.
    spins: u64,
}

impl MapOperator {
    /// A map with these settings; a non-zero `cost` is converted to spin iterations here.
    pub fn new(config: &MapConfig) -> Self {
        let spins = if config.cost.is_zero() {
            0
        } else {
            let micros = config.cost.as_nanos() as f64 / 1_000.0;
            ((micros * spins_per_microsecond()).round() as u64).max(1)
        };
        MapOperator {
            scale: config.scale,
            offset: config.offset,
            spins,
        }
    }

    /// Spin-loop iterations per record (0 without `cost`).
    pub fn spins_per_record(&self) -> u64 {
        self.spins
    }

    /// `value * scale + offset` on the event's numeric field `value` (an event without one
    /// is an error).
    #[inline(always)]
    fn apply(&self, record: &Record) -> Result<Record, BoxError> {
        let mut record = record.clone();
        self.apply_in_place(&mut record)?;
        Ok(record)
    }

    #[inline(always)]
    fn apply_in_place(&self, record: &mut Record) -> Result<(), BoxError> {
        if record.is_numeric() {
            let value = record.numeric_value().unwrap_or_default();
            record.set_numeric_value(value * self.scale + self.offset);
            Ok(())
        } else {
            self.apply_to_general(record)
        }
    }

    #[inline(never)]
    fn apply_to_general(&self, record: &mut Record) -> Result<(), BoxError> {
        if self.scale == 1.0 && self.offset == 0.0 {
            // No arithmetic asked for: the event passes unchanged, `value` or not.
            return Ok(());
        }
        let Some(value) = record.numeric_value() else {
            return Err(format!(
                "map: field `value` is missing or not a number in {}",
                record.event_json()
            )
            .into());
        };
        record.set("value", value * self.scale + self.offset);
        Ok(())
    }
}

impl Operator for MapOperator {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        spin(self.spins);
        out.emit(self.apply(&record)?);
        Ok(())
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        if self.spins == 0 {
            for record in records {
                match record.numeric_parts() {
                    Some((key, value)) => out.emit_numeric(
                        key,
                        value * self.scale + self.offset,
                        record.timestamp,
                        record.timestamp_type,
                    ),
                    None => out.emit(self.apply(record)?),
                }
            }
        } else {
            for record in records {
                spin(self.spins);
                out.emit(self.apply(record)?);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{operator, process};
    use serde_json::json;
    use tidemark_runtime::TimestampType;

    #[test]
    fn scales_and_offsets_values() {
        let mut op = operator(&INFO, json!({"scale": 2, "offset": 1}));
        let input = [
            Record::new(1, 0.0, 10),
            Record::new(2, -3.5, 20).with_timestamp_type(TimestampType::Ingestion),
            // Map events: an int `value` becomes a double, other fields stay.
            Record::with_event("a", map_event(r#"{"value":2,"s":"x"}"#), 30),
        ];
        let out = process(op.as_mut(), &input);
        assert_eq!(
            out,
            [
                Record::new(1, 1.0, 10),
                Record::new(2, -6.0, 20).with_timestamp_type(TimestampType::Ingestion),
                Record::with_event("a", map_event(r#"{"value":5.0,"s":"x"}"#), 30),
            ]
        );
        let mut identity = operator(&INFO, json!({}));
        let mut input = input.to_vec();
        input.push(Record::with_event(
            "b",
            map_event(r#"{"s":"no value"}"#),
            40,
        ));
        assert_eq!(process(identity.as_mut(), &input), input);
    }

    fn map_event(s: &str) -> tidemark_runtime::Map {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn an_event_without_a_numeric_value_is_an_error() {
        let mut op = operator(&INFO, json!({"scale": 2}));
        let mut out = Output::default();
        let e = op
            .process(
                Record::with_event("a", map_event(r#"{"value":"x"}"#), 0),
                &mut out,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"map: field `value` is missing or not a number in {"value":"x"}"#
        );
    }

    #[test]
    fn cost_becomes_spins_in_proportion() {
        let one = MapOperator::new(&config::parse("map", json!({"cost": "1us"})).unwrap());
        let ten = MapOperator::new(&config::parse("map", json!({"cost": "10us"})).unwrap());
        let none = MapOperator::new(&config::parse("map", json!({})).unwrap());
        assert_eq!(none.spins_per_record(), 0);
        assert!(one.spins_per_record() >= 1);
        let ratio = ten.spins_per_record() as f64 / one.spins_per_record() as f64;
        assert!((9.0..=11.0).contains(&ratio), "{ratio}");
        // With a cost, records still come out right.
        let mut op = ten;
        let mut out = Output::default();
        op.process(Record::new(1, 2.0, 3), &mut out).unwrap();
        assert_eq!(out.records(), [Record::new(1, 2.0, 3)]);
    }

    #[test]
    fn bad_settings_are_named() {
        for (settings, expected) in [
            (
                json!({"cost": "2 parsecs"}),
                "cost: invalid duration \"2 parsecs\"",
            ),
            (
                json!({"scale": "x"}),
                "scale: invalid type: string \"x\", expected f64",
            ),
            (
                json!({"cots": "1us"}),
                "unknown field `cots`, expected one of `cost`, `scale`, `offset`",
            ),
        ] {
            let err = build(settings, &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
    }
}
