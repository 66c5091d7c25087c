//! Granularity of latency statistics and the key it derives from a marker (rule 14).

use std::fmt;
use std::str::FromStr;

use crate::error::ConfigError;
use crate::marker::LatencyMarker;

/// How finely an operator subtask splits its latency statistics (rule 14).
///
/// Every operator subtask always keeps its own statistics; the granularity says whether they are
/// further split by the marker's source vertex and source subtask.
///
/// ```
/// use tidemark_markers::{Granularity, LatencyKey, LatencyMarker};
///
/// let g: Granularity = "subtask".parse().unwrap();
/// let key = g.key_for(&LatencyMarker::new(0, 4, 1));
/// assert_eq!(key, LatencyKey { source_id: Some(4), source_subtask: Some(1), origin: 0 });
/// assert_eq!(Granularity::default(), Granularity::Operator);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Granularity {
    /// One series per operator subtask, whatever the source.
    Single,
    /// One series per operator subtask and source vertex (the default).
    #[default]
    Operator,
    /// One series per operator subtask, source vertex and source subtask.
    Subtask,
}

impl Granularity {
    /// Every granularity, from coarsest to finest.
    pub const ALL: [Granularity; 3] = [
        Granularity::Single,
        Granularity::Operator,
        Granularity::Subtask,
    ];

    /// The lowercase name used in configuration: `single`, `operator` or `subtask`.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Single => "single",
            Granularity::Operator => "operator",
            Granularity::Subtask => "subtask",
        }
    }

    /// The statistics key under which `marker` is recorded at this granularity.
    pub fn key_for(self, marker: &LatencyMarker) -> LatencyKey {
        match self {
            Granularity::Single => LatencyKey {
                origin: marker.origin,
                ..LatencyKey::SINGLE
            },
            Granularity::Operator => LatencyKey {
                source_id: Some(marker.source_id),
                source_subtask: None,
                origin: marker.origin,
            },
            Granularity::Subtask => LatencyKey {
                source_id: Some(marker.source_id),
                source_subtask: Some(marker.source_subtask),
                origin: marker.origin,
            },
        }
    }
}

impl FromStr for Granularity {
    type Err = ConfigError;

    /// Parses `single`, `operator` or `subtask`, ignoring ASCII case and surrounding whitespace.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.trim();
        Granularity::ALL
            .into_iter()
            .find(|g| g.as_str().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| ConfigError::UnknownGranularity {
                value: text.to_owned(),
            })
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key of one latency series inside an operator subtask.
///
/// The operator and operator subtask are implied by the tracker that holds the key; the key only
/// carries the source part, filled in as the granularity asks:
/// `single` leaves both fields `None`, `operator` sets `source_id`, `subtask` sets both.
///
/// Keys order by `source_id`, then `source_subtask`, with `None` first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LatencyKey {
    /// Source vertex index, present at `operator` and `subtask` granularity.
    pub source_id: Option<u32>,
    /// Source subtask index, present at `subtask` granularity only.
    pub source_subtask: Option<u32>,
    /// The instance a marker that crossed instances came from ([`crate::origin`]; `0` for
    /// markers made in this process), at every granularity: exported as `source_instance`.
    pub origin: u32,
}

impl LatencyKey {
    /// The only key at `single` granularity: no source information.
    pub const SINGLE: LatencyKey = LatencyKey {
        source_id: None,
        source_subtask: None,
        origin: crate::origin::LOCAL,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for g in Granularity::ALL {
            assert_eq!(g.as_str().parse::<Granularity>(), Ok(g));
            assert_eq!(g.to_string(), g.as_str());
        }
        assert_eq!(Granularity::Single.to_string(), "single");
        assert_eq!(Granularity::Operator.to_string(), "operator");
        assert_eq!(Granularity::Subtask.to_string(), "subtask");
    }

    #[test]
    fn parse_ignores_case_and_whitespace() {
        assert_eq!("SUBTASK".parse::<Granularity>(), Ok(Granularity::Subtask));
        assert_eq!(" Single ".parse::<Granularity>(), Ok(Granularity::Single));
    }

    #[test]
    fn parse_error_names_value_and_valid_choices() {
        let err = "opertor".parse::<Granularity>().unwrap_err();
        assert_eq!(
            err,
            ConfigError::UnknownGranularity {
                value: "opertor".to_owned()
            }
        );
        assert_eq!(
            err.to_string(),
            r#"unknown latency granularity "opertor": expected one of single, operator, subtask"#
        );
        assert!("".parse::<Granularity>().is_err());
        assert!("operators".parse::<Granularity>().is_err());
        assert!("task".parse::<Granularity>().is_err());
    }

    #[test]
    fn keys_follow_the_granularity() {
        let m = LatencyMarker::new(5, 9, 2);
        assert_eq!(Granularity::Single.key_for(&m), LatencyKey::SINGLE);
        assert_eq!(
            Granularity::Operator.key_for(&m),
            LatencyKey {
                source_id: Some(9),
                source_subtask: None,
                origin: 0
            }
        );
        assert_eq!(
            Granularity::Subtask.key_for(&m),
            LatencyKey {
                source_id: Some(9),
                source_subtask: Some(2),
                origin: 0
            }
        );
    }

    #[test]
    fn a_marker_from_another_instance_keeps_its_origin_at_every_granularity() {
        let m = LatencyMarker::new(5, 9, 2).with_origin(3);
        for g in Granularity::ALL {
            assert_eq!(g.key_for(&m).origin, 3, "{g}");
        }
        assert_ne!(
            Granularity::Single.key_for(&m),
            Granularity::Single.key_for(&LatencyMarker::new(5, 9, 2))
        );
    }

    #[test]
    fn keys_order_by_source_then_subtask() {
        let k = |s, t| LatencyKey {
            source_id: s,
            source_subtask: t,
            origin: 0,
        };
        let mut keys = vec![
            k(Some(2), Some(0)),
            k(Some(1), Some(3)),
            k(None, None),
            k(Some(1), None),
        ];
        keys.sort();
        assert_eq!(
            keys,
            vec![
                k(None, None),
                k(Some(1), None),
                k(Some(1), Some(3)),
                k(Some(2), Some(0))
            ]
        );
    }
}
