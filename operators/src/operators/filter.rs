//! The `filter` operator: keeps a fraction of the keys, chosen by a hash of the key.
//!
//! ```yaml
//! operators:
//!   some_users:
//!     type: filter
//!     input: clicks
//!     keep: 0.25     # fraction of keys kept, 0..=1 (default 1)
//! ```
//!
//! A record is kept iff the top 53 bits of a 64-bit hash of its key, read as a fraction of 1,
//! are below `keep`. So one key is always kept or always dropped, on every subtask and in every
//! run; `keep: 1` keeps all and `keep: 0` none; and the keys kept at a smaller `keep` are a
//! subset of those kept at a larger one. The hash (a SplitMix64 finaliser over the key with a
//! constant of its own) is independent of the one `hash` edges partition by, so a filter does
//! not unbalance the subtasks after it.

use serde::Deserialize;
use tidemark_runtime::{BoxError, Operator, Output, Record, SubtaskContext};

use crate::config;
use crate::registry::{BuildEnv, Built, ComponentInfo, ComponentKind, ConfigError};

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "filter",
    kind: ComponentKind::Operator,
    fields: &["keep"],
    summary: "keeps the fraction `keep` of the keys, chosen by a hash of the key",
    build,
};

/// Settings of the `filter` operator.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// The fraction of keys kept, from 0 to 1.
    #[serde(default = "one")]
    pub keep: f64,
}

fn one() -> f64 {
    1.0
}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let config: FilterConfig = config::parse(INFO.type_name, config)?;
    let op =
        FilterOperator::new(config.keep).map_err(|m| config::invalid(INFO.type_name, "keep", m))?;
    Ok(Built::Operator(Box::new(move |_: &SubtaskContext| {
        Ok(Box::new(op) as Box<dyn Operator>)
    })))
}

/// The filter's hash of a key.
#[inline(always)]
pub fn key_hash(key: u64) -> u64 {
    let mut z = key ^ 0x5851_F42D_4C95_7F2D;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One subtask of the `filter` operator.
#[derive(Clone, Copy, Debug)]
pub struct FilterOperator {
    /// Kept iff `key_hash(key) >> 11 < threshold`; `2^53` keeps all.
    threshold: u64,
}

impl FilterOperator {
    /// A filter keeping the fraction `keep` of the keys.
    pub fn new(keep: f64) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&keep) {
            return Err(format!("{keep} is not a fraction from 0 to 1"));
        }
        Ok(FilterOperator {
            threshold: (keep * (1u64 << 53) as f64) as u64,
        })
    }

    /// Whether records with `key` pass.
    #[inline(always)]
    pub fn keeps(&self, key: u64) -> bool {
        key_hash(key) >> 11 < self.threshold
    }
}

impl Operator for FilterOperator {
    fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
        if self.keeps(record.key) {
            out.emit(record);
        }
        Ok(())
    }

    fn process_batch(&mut self, records: &[Record], out: &mut Output) -> Result<(), BoxError> {
        match self.threshold {
            0 => {}
            t if t >= 1 << 53 => out.emit_all(records),
            _ => {
                for record in records {
                    if self.keeps(record.key) {
                        out.emit(*record);
                    }
                }
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

    fn kept_keys(keep: f64, keys: u64) -> Vec<u64> {
        let mut op = operator(&INFO, json!({ "keep": keep }));
        let input: Vec<Record> = (0..keys).map(|k| Record::new(k, k as f64, 0)).collect();
        let out = process(op.as_mut(), &input);
        assert!(out.iter().all(|r| r.value == r.key as f64));
        out.iter().map(|r| r.key).collect()
    }

    #[test]
    fn keeps_a_fraction_of_keys_by_hash() {
        assert_eq!(kept_keys(1.0, 1000).len(), 1000);
        assert!(kept_keys(0.0, 1000).is_empty());
        let quarter = kept_keys(0.25, 10_000);
        let half = kept_keys(0.5, 10_000);
        // About a quarter / half of the keys (the hash is fixed, so this is deterministic).
        assert!((2_300..2_700).contains(&quarter.len()), "{}", quarter.len());
        assert!((4_700..5_300).contains(&half.len()), "{}", half.len());
        assert!(quarter.iter().all(|k| half.contains(k)));
        // Not simply the smallest keys.
        assert!(quarter.iter().any(|&k| k > 9_000));
    }

    #[test]
    fn a_key_is_always_kept_or_always_dropped() {
        let mut op = operator(&INFO, json!({"keep": 0.5}));
        let input: Vec<Record> = (0..50).flat_map(|k| [Record::new(k, 1.0, 0); 3]).collect();
        let out = process(op.as_mut(), &input);
        assert_eq!(out.len() % 3, 0);
        for chunk in out.chunks(3) {
            assert!(chunk.iter().all(|r| r.key == chunk[0].key));
        }
        // Single-record processing agrees with the batch path.
        let mut single = FilterOperator::new(0.5).unwrap();
        let mut out2 = Output::default();
        for r in &input {
            single.process(*r, &mut out2).unwrap();
        }
        assert_eq!(out2.records(), out);
    }

    #[test]
    fn keep_must_be_a_fraction() {
        for keep in [json!(1.5), json!(-0.1)] {
            let err = build(json!({ "keep": keep }), &BuildEnv::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("is not a fraction from 0 to 1"), "{err}");
        }
    }
}
