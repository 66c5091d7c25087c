//! A live status line on standard error while a job runs: elapsed time, records per second
//! reaching the sinks, and the sinks' marker p99. Only when standard error is a terminal.

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
        let mut msg = format!(
            "{:.0}s  {} records to sinks  {}/s",
            self.started.elapsed().as_secs_f64(),
            sinks,
            human(rate)
        );
        if let Some(p99) = sink_marker_p99_ms(&self.registry) {
            msg.push_str(&format!("  marker p99 {} ms", crate::report::ms(p99)));
        }
        self.bar.set_message(msg);
        self.bar.tick();
    }

    /// Removes the line.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
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
