//! How the report writes numbers, counts and times.

use std::time::SystemTime;

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
