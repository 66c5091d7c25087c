//! The compact table the command prints on standard error when a run ends.

use super::format::{ms, plural};
use super::model::{DroppedByReason, LatencyReport, Report};
use std::fmt::Write as _;
use tidemark_runtime::DropReason;

/// `malformed 3, in flight 1024`: the reasons with a count, in [`DropReason::ALL`] order.
fn why(dropped: &DroppedByReason) -> String {
    DropReason::ALL
        .iter()
        .filter_map(|r| {
            let n = *dropped.get(r.as_str())?;
            (n > 0).then(|| format!("{n} {}", r.as_str().replace('_', " ")))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Report {
    /// A compact human-readable summary: per vertex records, per sink key marker latency.
    pub fn table(&self) -> String {
        /// Most latency rows shown; the report file has them all.
        const MAX_LATENCY_ROWS: usize = 16;
        let mut s = String::new();
        let name = self.job_name.as_deref().unwrap_or("?");
        let _ = write!(
            s,
            "tidemark: job \"{name}\" {} after {:.2}s",
            self.outcome, self.elapsed_seconds
        );
        if let Some(reason) = &self.stop_reason {
            let _ = write!(s, " ({reason})");
        }
        let r = &self.records;
        let _ = write!(
            s,
            "; {} from sources, {} to sinks",
            plural(r.emitted_by_sources, "record", "records"),
            r.received_by_sinks
        );
        if r.dropped_total > 0 {
            let _ = write!(s, ", {} dropped ({})", r.dropped_total, why(&r.dropped));
        }
        s.push('\n');
        if self.vertices.is_empty() {
            return s;
        }
        let id_w = self
            .vertices
            .iter()
            .map(|v| v.id.len())
            .max()
            .unwrap_or(0)
            .max("vertex".len());
        let _ = writeln!(
            s,
            "  {:<id_w$}  {:<8}  {:>3}  {:>12}  {:>12}  {:>6}  {:>9}",
            "vertex", "kind", "par", "records in", "records out", "busy", "dropped"
        );
        for v in &self.vertices {
            let dropped: u64 = v.dropped.values().sum();
            let line = format!(
                "  {:<id_w$}  {:<8}  {:>3}  {:>12}  {:>12}  {:>6}  {:>9}  {}",
                v.id,
                v.kind,
                v.subtasks.len(),
                v.records_in,
                v.records_out,
                percent(v.busy_ratio),
                dropped,
                why(&v.dropped)
            );
            let _ = writeln!(s, "{}", line.trim_end());
        }
        let sinks: Vec<&LatencyReport> = self
            .latency
            .iter()
            .filter(|l| l.operator_kind == "sink")
            .collect();
        if !sinks.is_empty() {
            let label = |l: &LatencyReport| {
                let mut k = format!("{}#{}", l.operator_id, l.operator_subtask_index);
                if let Some(src) = &l.source_id {
                    let _ = write!(k, " <- {src}");
                    if let Some(i) = l.source_subtask_index {
                        let _ = write!(k, "#{i}");
                    }
                }
                k
            };
            let key_w = sinks
                .iter()
                .map(|l| label(l).len())
                .max()
                .unwrap_or(0)
                .max("marker latency (ms)".len());
            let _ = writeln!(
                s,
                "  {:<key_w$}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}",
                "marker latency (ms)", "count", "p50", "p99", "max", "e2e p99"
            );
            for l in sinks.iter().take(MAX_LATENCY_ROWS) {
                let e2e = self
                    .vertices
                    .iter()
                    .find(|v| v.id == l.operator_id)
                    .and_then(|v| v.e2e_p99_ms);
                let line = format!(
                    "  {:<key_w$}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}  {}",
                    label(l),
                    l.count,
                    ms(l.p50_ms),
                    ms(l.p99_ms),
                    ms(l.max_ms),
                    ms(e2e.unwrap_or(f64::NAN)),
                    if l.chained { CHAINED } else { "" }
                );
                let _ = writeln!(s, "{}", line.trim_end());
            }
            if sinks.len() > MAX_LATENCY_ROWS {
                let _ = writeln!(
                    s,
                    "  … {} more latency series (all of them are in --report-file)",
                    sinks.len() - MAX_LATENCY_ROWS
                );
            }
        }
        if let Some(line) = self.headline() {
            let _ = writeln!(s, "  {line}");
        }
        if let Some(b) = &self.bottleneck {
            let _ = writeln!(
                s,
                "bottleneck: {} (busy {})",
                b.vertex,
                percent(b.busy_ratio)
            );
        }
        s
    }

    /// The three lenses side by side: the sinks' marker p99 (marked when taken across chained
    /// vertices only), their record end-to-end p99, and the sources' lag. `None` when the run
    /// has none of them.
    fn headline(&self) -> Option<String> {
        let mut parts = Vec::new();
        let sinks: Vec<&LatencyReport> = self
            .latency
            .iter()
            .filter(|l| l.operator_kind == "sink")
            .collect();
        if let Some(p99) = self.sink_latency.marker_p99_ms {
            let mut part = format!("marker p99 {} ms", ms(p99));
            if !sinks.is_empty() && sinks.iter().all(|l| l.chained) {
                let _ = write!(part, " ({CHAINED})");
            }
            parts.push(part);
        }
        if let Some(p99) = self.sink_latency.e2e_p99_ms {
            parts.push(format!("record e2e p99 {} ms", ms(p99)));
        }
        let lags: Vec<String> = self
            .vertices
            .iter()
            .filter_map(|v| Some(format!("{} {}", v.id, v.lag_records?)))
            .collect();
        if !lags.is_empty() {
            parts.push(format!("source lag {} records", lags.join(", ")));
        }
        (!parts.is_empty()).then(|| format!("at sinks: {}", parts.join("; ")))
    }
}

/// How a marker figure taken across chained vertices only is marked.
pub(super) const CHAINED: &str = "chained: no queue between these vertices";

/// A ratio as a whole percentage (`99%`), with one decimal below 10 % (`0.3%`).
fn percent(ratio: f64) -> String {
    let p = ratio * 100.0;
    if p >= 9.95 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}
