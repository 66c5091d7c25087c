//! Latency-marker settings and their parsing from text (rules 2, 6 and 7).

use std::num::NonZeroUsize;
use std::time::Duration;

use crate::error::ConfigError;
use crate::granularity::Granularity;

/// Default number of samples in each key's sliding window (rule 15).
pub const DEFAULT_HISTORY_SIZE: usize = 128;

/// What `parse_duration` accepts, for error messages.
const EXPECTED_DURATION: &str =
    "expected a duration like 200ms, 1s, 5us; a bare number means milliseconds";

/// Units accepted by `parse_duration`, with their length in nanoseconds.
const UNITS: [(&str, u128); 9] = [
    ("", 1_000_000), // a bare number means milliseconds
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5 MICRO SIGN
    ("μs", 1_000), // U+03BC GREEK SMALL LETTER MU
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// The latency-marker settings of a job.
///
/// The default is markers disabled (interval 0), `operator` granularity and a history of
/// [`DEFAULT_HISTORY_SIZE`]. [`apply`](Self::apply) sets one setting from its configuration key
/// and text, so that layering defaults, the job file and command-line overrides in that order
/// gives rule 6's precedence.
///
/// ```
/// use std::time::Duration;
/// use tidemark_markers::{Granularity, LatencyConfig};
///
/// let mut config = LatencyConfig::default();
/// assert!(!config.is_enabled());
/// config.apply("metrics.latency.interval", "200ms").unwrap();
/// config.apply("metrics.latency.granularity", "subtask").unwrap();
/// assert_eq!(config.interval, Duration::from_millis(200));
/// assert_eq!(config.granularity, Granularity::Subtask);
/// assert!(config.apply("metrics.latency.history-size", "0").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyConfig {
    /// Time between two markers of one source subtask; 0 disables markers (rule 2).
    pub interval: Duration,
    /// How finely latency series are split (rule 14).
    pub granularity: Granularity,
    /// Number of samples in each key's sliding window (rule 15).
    pub history_size: NonZeroUsize,
}

impl LatencyConfig {
    /// Configuration key of [`interval`](Self::interval).
    pub const INTERVAL_KEY: &'static str = "metrics.latency.interval";
    /// Configuration key of [`granularity`](Self::granularity).
    pub const GRANULARITY_KEY: &'static str = "metrics.latency.granularity";
    /// Configuration key of [`history_size`](Self::history_size).
    pub const HISTORY_SIZE_KEY: &'static str = "metrics.latency.history-size";

    /// Whether markers are enabled, i.e. the interval is greater than 0.
    pub fn is_enabled(&self) -> bool {
        !self.interval.is_zero()
    }

    /// Sets the setting named by `key` from `value`.
    ///
    /// Returns `Ok(true)` if `key` is one of the three latency keys and `Ok(false)`, changing
    /// nothing, for any other key. An invalid value is an error and changes nothing.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        match key {
            Self::INTERVAL_KEY => self.interval = parse_duration(value)?,
            Self::GRANULARITY_KEY => self.granularity = value.parse()?,
            Self::HISTORY_SIZE_KEY => self.history_size = parse_history_size(value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl Default for LatencyConfig {
    fn default() -> Self {
        Self {
            interval: Duration::ZERO,
            granularity: Granularity::default(),
            history_size: NonZeroUsize::new(DEFAULT_HISTORY_SIZE).expect("default is not zero"),
        }
    }
}

/// Parses a duration such as `0`, `200ms`, `1s`, `5us`, `5µs`, `100ns`, `2m`, `1h`, `1.5s` or
/// `250 ms`.
///
/// A bare number means milliseconds. Units are `ns`, `us` (or `µs`), `ms`, `s`, `m` and `h`,
/// in any ASCII case, optionally separated from the number by spaces. A decimal fraction is
/// allowed as long as the result is a whole number of nanoseconds.
///
/// # Errors
/// [`ConfigError::InvalidDuration`] for an empty, negative or unparsable value, an unknown unit,
/// a value finer than a nanosecond or one too large for [`Duration`].
///
/// ```
/// use std::time::Duration;
/// use tidemark_markers::parse_duration;
///
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
/// assert!(parse_duration("-1s").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidDuration {
        value: text.to_owned(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid(format!("the value is empty; {EXPECTED_DURATION}")));
    }
    if trimmed.starts_with('-') {
        return Err(invalid(format!(
            "a duration cannot be negative; {EXPECTED_DURATION}"
        )));
    }

    let number_len = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(invalid(EXPECTED_DURATION.to_owned()));
    }

    let unit = unit.trim_start();
    let unit_nanos = UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|&(_, nanos)| nanos)
        .ok_or_else(|| {
            invalid(format!(
                "unknown unit \"{unit}\"; expected one of ns, us, µs, ms, s, m, h \
                 (a bare number means milliseconds)"
            ))
        })?;

    let too_large = || invalid("the duration is too large".to_owned());
    let whole_nanos = whole
        .parse::<u128>()
        .ok()
        .and_then(|w| w.checked_mul(unit_nanos))
        .ok_or_else(too_large)?;

    let fraction = fraction.trim_end_matches('0');
    let fraction_nanos = if fraction.is_empty() {
        0
    } else {
        let sub_nanosecond = || invalid(format!("finer than one nanosecond; {EXPECTED_DURATION}"));
        // Every unit is at most 3.6e12 ns, so more than 13 significant fractional digits
        // cannot give a whole number of nanoseconds.
        if fraction.len() > 13 {
            return Err(sub_nanosecond());
        }
        let digits: u128 = fraction.parse().expect("only ASCII digits");
        let scale = 10_u128.pow(fraction.len() as u32);
        let scaled = digits * unit_nanos;
        let (nanos, remainder) = (scaled / scale, scaled % scale);
        if remainder != 0 {
            return Err(sub_nanosecond());
        }
        nanos
    };

    let total = whole_nanos
        .checked_add(fraction_nanos)
        .ok_or_else(too_large)?;
    let secs = u64::try_from(total / NANOS_PER_SECOND).map_err(|_| too_large())?;
    Ok(Duration::new(secs, (total % NANOS_PER_SECOND) as u32))
}

/// Parses a sliding-window history size: a whole number of at least 1.
///
/// # Errors
/// [`ConfigError::InvalidHistorySize`] for 0, a negative number or anything that is not a whole
/// number.
pub fn parse_history_size(text: &str) -> Result<NonZeroUsize, ConfigError> {
    text.trim()
        .parse::<NonZeroUsize>()
        .map_err(|_| ConfigError::InvalidHistorySize {
            value: text.to_owned(),
        })
}

/// Formats a duration compactly in the largest unit that represents it exactly, as
/// [`parse_duration`] reads it back: `0`, `100ns`, `5us`, `200ms`, `1s`, `2m`, `1h`, `1500ms`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0".to_owned();
    }
    const LARGEST_FIRST: [(u128, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let (unit_nanos, unit) = LARGEST_FIRST
        .into_iter()
        .find(|&(unit_nanos, _)| nanos.checked_rem(unit_nanos) == Some(0))
        .expect("every duration is a whole number of nanoseconds");
    format!("{}{unit}", nanos / unit_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config() {
        let config = LatencyConfig::default();
        assert_eq!(config.interval, Duration::ZERO);
        assert_eq!(config.granularity, Granularity::Operator);
        assert_eq!(config.history_size.get(), 128);
        assert!(!config.is_enabled());
    }

    #[test]
    fn parse_duration_accepts() {
        let cases: [(&str, Duration); 19] = [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("200ms", Duration::from_millis(200)),
            ("1s", Duration::from_secs(1)),
            ("5us", Duration::from_micros(5)),
            ("5µs", Duration::from_micros(5)),
            ("5μs", Duration::from_micros(5)),
            ("100ns", Duration::from_nanos(100)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("250 ms", Duration::from_millis(250)),
            ("  10ms ", Duration::from_millis(10)),
            ("250", Duration::from_millis(250)),
            ("1.5", Duration::from_micros(1500)),
            ("1.250s", Duration::from_millis(1250)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("2MS", Duration::from_millis(2)),
            ("0.5h", Duration::from_secs(1800)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "parsing {text:?}");
        }
    }

    #[test]
    fn parse_duration_rejects() {
        for text in [
            "",
            "   ",
            "-1s",
            "-0",
            "ms",
            "abc",
            "1x",
            "1 s s",
            "1.2.3s",
            "1.s",
            ".5s",
            "1e3ms",
            "+5ms",
            "1,5s",
            "0.5ns",
            "1.0000000001ms",
            "5 days",
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(
                matches!(&err, ConfigError::InvalidDuration { value, .. } if value == text),
                "{text:?} gave {err:?}"
            );
        }
        // Too large for Duration.
        assert!(parse_duration("99999999999999999999999h").is_err());
        assert!(parse_duration("999999999999999999999999999999999999999999ns").is_err());
    }

    #[test]
    fn duration_errors_say_what_is_expected() {
        assert_eq!(
            parse_duration("fast").unwrap_err().to_string(),
            "invalid duration \"fast\": expected a duration like 200ms, 1s, 5us; \
             a bare number means milliseconds"
        );
        assert_eq!(
            parse_duration("-5ms").unwrap_err().to_string(),
            "invalid duration \"-5ms\": a duration cannot be negative; expected a duration \
             like 200ms, 1s, 5us; a bare number means milliseconds"
        );
        let unit = parse_duration("5sec").unwrap_err().to_string();
        assert!(
            unit.contains("\"5sec\"") && unit.contains("unknown unit \"sec\""),
            "{unit}"
        );
        assert!(unit.contains("ns, us, µs, ms, s, m, h"), "{unit}");
    }

    #[test]
    fn history_size() {
        assert_eq!(parse_history_size("128").unwrap().get(), 128);
        assert_eq!(parse_history_size(" 1 ").unwrap().get(), 1);
        for text in ["0", "-1", "", "ten", "1.5", "12ms"] {
            assert_eq!(
                parse_history_size(text),
                Err(ConfigError::InvalidHistorySize {
                    value: text.to_owned()
                })
            );
        }
        assert_eq!(
            parse_history_size("0").unwrap_err().to_string(),
            "invalid latency history size \"0\": expected a whole number of at least 1"
        );
    }

    #[test]
    fn format_duration_is_compact_and_round_trips() {
        let cases = [
            (Duration::ZERO, "0"),
            (Duration::from_nanos(100), "100ns"),
            (Duration::from_micros(5), "5us"),
            (Duration::from_millis(200), "200ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_nanos(1_000_001), "1000001ns"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn apply_sets_known_keys_and_rejects_bad_values() {
        let mut config = LatencyConfig::default();
        assert_eq!(config.apply(LatencyConfig::INTERVAL_KEY, "1s"), Ok(true));
        assert_eq!(
            config.apply(LatencyConfig::GRANULARITY_KEY, "single"),
            Ok(true)
        );
        assert_eq!(
            config.apply(LatencyConfig::HISTORY_SIZE_KEY, "16"),
            Ok(true)
        );
        assert_eq!(config.apply("pipeline.buffer-timeout", "5ms"), Ok(false));
        let expected = LatencyConfig {
            interval: Duration::from_secs(1),
            granularity: Granularity::Single,
            history_size: NonZeroUsize::new(16).unwrap(),
        };
        assert_eq!(config, expected);
        // Later layers override earlier ones; bad values leave the config unchanged.
        assert_eq!(config.apply(LatencyConfig::INTERVAL_KEY, "0"), Ok(true));
        assert!(!config.is_enabled());
        assert!(config
            .apply(LatencyConfig::GRANULARITY_KEY, "opertor")
            .is_err());
        assert!(config.apply(LatencyConfig::INTERVAL_KEY, "-1s").is_err());
        assert_eq!(config.granularity, Granularity::Single);
        assert_eq!(config.interval, Duration::ZERO);
    }
}
