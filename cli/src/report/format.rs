//! How the report writes numbers, counts and times.

use serde::Serializer;
use std::time::SystemTime;
use tidemark_runtime::exporter::round_value;

/// `1 record`, `2 records`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Milliseconds with about three significant digits (sub-microsecond latencies are common in
/// chained tasks); `-` for no value.
pub fn ms(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".to_string()
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        // Digits after the point so that three significant digits show (at most 6).
        let digits = (2 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.digits$}")
    }
}

/// `t` as RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T08:15:02.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Serializes a number as `/metrics` writes computed numbers: [`round_value`] (9 significant
/// digits), so `0.003474116659999998` is written `0.00347411666`.
pub fn number<S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round_value(*value))
}

/// [`number`], or `null`.
pub fn optional_number<S: Serializer>(value: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.serialize_some(&round_value(*v)),
        None => s.serialize_none(),
    }
}
