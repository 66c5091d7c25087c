//! A live status line on standard error while a job runs: elapsed time, records reaching the
//! sinks and their rate per second, the sources' lag, and the sinks' marker p99. Only when
//! standard error is a terminal.

use crate::report::plural;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal as _;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tidemark_runtime::{MetricsRegistry, VertexKind};

/// The status line; `None` from [`Progress::new`] when standard error is not a terminal.
pub struct Progress {
    bar: ProgressBar,
    registry: Arc<MetricsRegistry>,
    started: Instant,
    last: (Instant, u64),
}

impl Progress {
    /// Starts the line, or gives `None` when standard error is not a terminal.
    pub fn new(registry: Arc<MetricsRegistry>) -> Option<Progress> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").ok()?);
        let now = Instant::now();
        Some(Progress {
            bar,
            registry,
            started: now,
            last: (now, 0),
        })
    }

    /// Refreshes the line; call a few times a second.
    pub fn tick(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.last.0);
        if dt < Duration::from_millis(250) {
            return;
        }
        let sinks = sink_records(&self.registry);
        let rate = (sinks.saturating_sub(self.last.1)) as f64 / dt.as_secs_f64();
        self.last = (now, sinks);
        let msg = status_line(
            self.started.elapsed(),
            sinks,
            rate,
            source_lag(&self.registry),
            sink_marker_p99_ms(&self.registry),
        );
        self.bar.set_message(msg);
        self.bar.tick();
    }

    /// Prints a line above the status line.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    /// Removes the line.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// The sources' lag summed over the subtasks that know theirs: records and bytes not yet read
/// (`None` where no subtask knows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Lag {
    records: Option<u64>,
    bytes: Option<u64>,
}

/// `12s  1024 records to sinks  45.6k/s  lag 1.2k records  marker p99 0.250 ms`.
fn status_line(
    elapsed: Duration,
    sinks: u64,
    rate: f64,
    lag: Lag,
    marker_p99_ms: Option<f64>,
) -> String {
    let mut msg = format!(
        "{:.0}s  {} to sinks  {}/s",
        elapsed.as_secs_f64(),
        plural(sinks, "record", "records"),
        human(rate)
    );
    match (lag.records, lag.bytes) {
        (Some(records), _) => msg.push_str(&format!(
            "  lag {}",
            if records == 1 {
                "1 record".to_string()
            } else {
                format!("{} records", human(records as f64))
            }
        )),
        (None, Some(bytes)) => msg.push_str(&format!("  lag {}B", human(bytes as f64))),
        (None, None) => {}
    }
    if let Some(p99) = marker_p99_ms {
        msg.push_str(&format!("  marker p99 {} ms", crate::report::ms(p99)));
    }
    msg
}

fn sink_records(registry: &MetricsRegistry) -> u64 {
    registry
        .vertices()
        .iter()
        .filter(|v| v.kind == VertexKind::Sink)
        .flat_map(|v| v.subtasks.iter())
        .map(|s| s.records_in())
        .sum()
}

/// The sources' lag: sums over the subtasks whose lag is known (not -1).
fn source_lag(registry: &MetricsRegistry) -> Lag {
    let mut lag = Lag::default();
    for s in registry
        .vertices()
        .iter()
        .filter(|v| v.kind == VertexKind::Source)
        .flat_map(|v| v.subtasks.iter())
    {
        if let Ok(records) = u64::try_from(s.lag_records()) {
            *lag.records.get_or_insert(0) += records;
        }
        if let Ok(bytes) = u64::try_from(s.lag_bytes()) {
            *lag.bytes.get_or_insert(0) += bytes;
        }
    }
    lag
}

/// The largest window p99 over every sink series, in milliseconds.
fn sink_marker_p99_ms(registry: &MetricsRegistry) -> Option<f64> {
    registry
        .vertices()
        .iter()
        .filter(|v| v.kind == VertexKind::Sink)
        .flat_map(|v| v.subtasks.iter())
        .flat_map(|s| {
            let tracker = s.latency();
            tracker
                .iter()
                .filter_map(|(_, stats)| stats.window_stats().quantile(0.99))
                .collect::<Vec<_>>()
        })
        .filter(|v| v.is_finite())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        .map(|ns| ns / 1e6)
}

/// 12.3M, 45.6k, 789.
fn human(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_shows_rate_lag_and_marker_p99() {
        let line = status_line(
            Duration::from_secs(12),
            1024,
            45_600.0,
            Lag {
                records: Some(1_200),
                bytes: None,
            },
            Some(0.25),
        );
        assert_eq!(
            line,
            "12s  1024 records to sinks  45.6k/s  lag 1.2k records  marker p99 0.250 ms"
        );
    }

    #[test]
    fn the_status_line_shows_byte_lag_when_records_are_unknown_and_says_one_record() {
        let line = status_line(
            Duration::from_secs(1),
            1,
            1.0,
            Lag {
                records: None,
                bytes: Some(2_500_000),
            },
            None,
        );
        assert_eq!(line, "1s  1 record to sinks  1/s  lag 2.5MB");
        let no_lag = status_line(Duration::ZERO, 0, 0.0, Lag::default(), None);
        assert_eq!(no_lag, "0s  0 records to sinks  0/s");
    }
}
