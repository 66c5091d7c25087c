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
            "  {:<id_w$}  {:<8}  {:>3}  {:>12}  {:>12}  {:>9}",
            "vertex", "kind", "par", "records in", "records out", "dropped"
        );
        for v in &self.vertices {
            let dropped: u64 = v.dropped.values().sum();
            let line = format!(
                "  {:<id_w$}  {:<8}  {:>3}  {:>12}  {:>12}  {:>9}  {}",
                v.id,
                v.kind,
                v.subtasks.len(),
                v.records_in,
                v.records_out,
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
                "  {:<key_w$}  {:>8}  {:>9}  {:>9}  {:>9}",
                "marker latency (ms)", "count", "p50", "p99", "max"
            );
            for l in sinks.iter().take(MAX_LATENCY_ROWS) {
                let _ = writeln!(
                    s,
                    "  {:<key_w$}  {:>8}  {:>9}  {:>9}  {:>9}",
                    label(l),
                    l.count,
                    ms(l.p50_ms),
                    ms(l.p99_ms),
                    ms(l.max_ms)
                );
            }
            if sinks.len() > MAX_LATENCY_ROWS {
                let _ = writeln!(
                    s,
                    "  … {} more latency series (all of them are in --report-file)",
                    sinks.len() - MAX_LATENCY_ROWS
                );
            }
        }
        s
    }
}
