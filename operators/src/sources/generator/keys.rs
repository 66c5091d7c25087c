//! The key sampler: how a subtask draws keys, `uniform` or `zipf` (an alias table up to
//! [`ZIPF_TABLE_MAX_KEYS`] keys, rejection-inversion above).

use std::sync::Arc;

use super::config::{GeneratorConfig, KeyDistribution};

/// Keys at most this many get an alias table for `zipf`; more use rejection sampling.
pub const ZIPF_TABLE_MAX_KEYS: u64 = 1 << 20;

/// How keys are drawn, prepared once per vertex and shared by its subtasks.
#[derive(Clone, Debug)]
pub(super) enum KeySampler {
    Uniform {
        keys: u64,
    },
    /// An alias table over the keys.
    ZipfTable(Arc<AliasTable>),
    ZipfRejection(rand_distr::Zipf<f64>),
}

impl KeySampler {
    pub(super) fn new(config: &GeneratorConfig) -> Result<Self, String> {
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
pub(super) struct AliasTable {
    /// Column `i` keeps `i` when the draw's fraction is below `keep[i] / 2^64`.
    keep: Vec<u64>,
    /// Otherwise it gives `alias[i]`.
    alias: Vec<u32>,
}

impl AliasTable {
    /// A table for `weights` (not all zero, at most `u32::MAX` of them).
    pub(super) fn new(weights: &[f64]) -> Self {
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
    pub(super) fn sample(&self, x: u64) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_alias_table_gives_each_key_its_zipf_probability() {
        for s in [0.0, 1.0, 2.5] {
            let keys = 257;
            let config: GeneratorConfig = crate::config::parse(
                "generator",
                json!({"keys": keys, "key_distribution": "zipf", "zipf_exponent": s}),
            )
            .unwrap();
            let KeySampler::ZipfTable(table) = KeySampler::new(&config).unwrap() else {
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
}
