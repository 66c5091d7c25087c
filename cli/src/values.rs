//! Parsers of setting values that the command-line flags, `-D` and the job file share, each
//! with the message that names the rule.

use std::num::NonZeroUsize;
use std::time::Duration;
use tidemark_markers::Granularity;

/// A duration on the command line: it needs a unit (`1.5s`, `200ms`); a bare number is an
/// error suggesting one (only `0` needs none), and a negative one says so.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!(
            "negative duration \"{s}\": a duration is 0 or more, e.g. 1s or 200ms"
        ));
    }
    if t.parse::<f64>().is_ok_and(|n| n != 0.0) {
        return Err(format!(
            "duration \"{s}\" has no unit: write {t}s for seconds or {t}ms for milliseconds \
             (units: ns, us, ms, s, m, h)"
        ));
    }
    tidemark_markers::parse_duration(t).map_err(|e| e.to_string())
}

pub(crate) fn parse_granularity(s: &str) -> Result<Granularity, String> {
    s.parse()
        .map_err(|e: tidemark_markers::ConfigError| e.to_string())
}

pub(crate) fn parse_history_size(s: &str) -> Result<NonZeroUsize, String> {
    tidemark_markers::parse_history_size(s).map_err(|e| e.to_string())
}

/// A parallelism: a whole number of at least 1.
pub fn parse_parallelism(s: &str) -> Result<NonZeroUsize, String> {
    s.trim()
        .parse::<NonZeroUsize>()
        .map_err(|_| format!("invalid parallelism \"{s}\": expected a whole number of at least 1"))
}

/// A channel capacity: a whole number of batches from 1 to
/// [`MAX_CHANNEL_CAPACITY`](tidemark_runtime::config::MAX_CHANNEL_CAPACITY).
pub fn parse_channel_capacity(s: &str) -> Result<usize, String> {
    use tidemark_runtime::config::MAX_CHANNEL_CAPACITY;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_CHANNEL_CAPACITY).contains(&n) => Ok(n),
        _ => Err(format!(
            "invalid channel capacity \"{s}\": expected a whole number of batches from 1 to \
             {MAX_CHANNEL_CAPACITY}"
        )),
    }
}
