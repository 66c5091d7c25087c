//! The final report of a run: a JSON document (`--report-file`) and a compact table for
//! standard error, both read from the job's [`MetricsRegistry`](tidemark_runtime::MetricsRegistry)
//! after it ended.
//!
//! | module | holds |
//! |---|---|
//! | `model` | the report's fields ([`Report`] and its parts) and what a run hands over |
//! | `collect` | [`Report::collect`]: reading them from the registry |
//! | `table` | [`Report::table`]: the summary on standard error |
//! | `format` | milliseconds, plurals, RFC 3339 times |

mod collect;
mod format;
mod model;
mod table;

pub use collect::{markers_chained, series_report};
pub use format::{ms, number, optional_number, plural, rfc3339};
#[cfg(feature = "kafka")]
pub use model::PartitionRestore;
pub use model::{
    CheckpointReport, FailureReport, NotStarted, Report, RunSummary, SeriesReport,
    StateRestoresReport,
};

#[cfg(test)]
mod tests;
