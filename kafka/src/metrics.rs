//! Kafka's own series: lag per partition (KIP-1226), lag per source subtask in records and
//! seconds, each partition's watermark lag and idleness, and commits. Sources write here at most every 100 ms; a scrape renders the
//! Prometheus text with [`KafkaMetrics::render`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// A topic and a partition.
pub type PartitionKey = (String, i32);

#[derive(Default)]
struct State {
    /// (source_id, topic, partition) → lag in records.
    partition_lag: BTreeMap<(String, String, i32), i64>,
    /// (source_id, subtask) → (records, seconds).
    subtask_lag: BTreeMap<(String, usize), (i64, f64)>,
    /// source_id → commits.
    commits: BTreeMap<String, u64>,
    /// (source_id, topic, partition) → (now − the partition's watermark in seconds, idle).
    partition_watermark: BTreeMap<(String, String, i32), (f64, bool)>,
}

/// The Kafka series of one job.
#[derive(Default)]
pub struct KafkaMetrics {
    state: Mutex<State>,
}

impl std::fmt::Debug for KafkaMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KafkaMetrics")
    }
}

impl KafkaMetrics {
    /// Sets one partition's lag.
    pub fn set_partition_lag(&self, source_id: &str, key: &PartitionKey, lag: i64) {
        if let Ok(mut s) = self.state.lock() {
            s.partition_lag
                .insert((source_id.to_owned(), key.0.clone(), key.1), lag);
        }
    }

    /// Forgets a partition that moved to another subtask.
    pub fn remove_partition(&self, source_id: &str, key: &PartitionKey) {
        if let Ok(mut s) = self.state.lock() {
            let k = (source_id.to_owned(), key.0.clone(), key.1);
            s.partition_lag.remove(&k);
            s.partition_watermark.remove(&k);
        }
    }

    /// Sets one partition's watermark lag (now − its watermark, seconds) and idleness.
    pub fn set_partition_watermark(
        &self,
        source_id: &str,
        key: &PartitionKey,
        lag_seconds: f64,
        idle: bool,
    ) {
        if let Ok(mut s) = self.state.lock() {
            s.partition_watermark.insert(
                (source_id.to_owned(), key.0.clone(), key.1),
                (lag_seconds, idle),
            );
        }
    }

    /// One partition's watermark lag in seconds and whether it is idle, if this instance holds
    /// it and it has a watermark.
    pub fn partition_watermark(
        &self,
        source_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<(f64, bool)> {
        self.state.lock().ok().and_then(|s| {
            s.partition_watermark
                .get(&(source_id.to_owned(), topic.to_owned(), partition))
                .copied()
        })
    }

    /// Sets a subtask's lag: records over its partitions, seconds since its last record's
    /// timestamp (0 when it is caught up).
    pub fn set_subtask_lag(&self, source_id: &str, subtask: usize, records: i64, seconds: f64) {
        if let Ok(mut s) = self.state.lock() {
            s.subtask_lag
                .insert((source_id.to_owned(), subtask), (records, seconds));
        }
    }

    /// Counts one commit of offsets.
    pub fn count_commit(&self, source_id: &str) {
        if let Ok(mut s) = self.state.lock() {
            *s.commits.entry(source_id.to_owned()).or_default() += 1;
        }
    }

    /// The lag of one partition, if this instance holds it.
    pub fn partition_lag(&self, source_id: &str, topic: &str, partition: i32) -> Option<i64> {
        self.state.lock().ok().and_then(|s| {
            s.partition_lag
                .get(&(source_id.to_owned(), topic.to_owned(), partition))
                .copied()
        })
    }

    /// Commits made by a source's subtasks.
    pub fn commits(&self, source_id: &str) -> u64 {
        self.state
            .lock()
            .map(|s| s.commits.get(source_id).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// The Prometheus text of these series, each with the labels `base` first (rendered, as
    /// [`MetricsRegistry::add_text_section`](tidemark_runtime::MetricsRegistry::add_text_section)
    /// gives them: `job_name="j"`).
    pub fn render(&self, base: &str) -> String {
        let Ok(s) = self.state.lock() else {
            return String::new();
        };
        let mut out = String::new();
        if !s.partition_lag.is_empty() {
            out.push_str("# HELP tidemark_kafka_lag_records Messages not yet read: the partition's high watermark (as the last fetch gave it) minus the position.\n# TYPE tidemark_kafka_lag_records gauge\n");
            for ((source, topic, partition), lag) in &s.partition_lag {
                let _ = writeln!(
                    out,
                    "tidemark_kafka_lag_records{{{base},source_id=\"{}\",topic=\"{}\",partition=\"{partition}\"}} {lag}",
                    escape(source),
                    escape(topic)
                );
            }
        }
        if !s.subtask_lag.is_empty() {
            out.push_str("# HELP tidemark_source_lag_seconds Seconds between now and the timestamp of the last record a source subtask read (0 when caught up).\n# TYPE tidemark_source_lag_seconds gauge\n");
            for ((source, subtask), (_, seconds)) in &s.subtask_lag {
                let _ = writeln!(
                    out,
                    "tidemark_source_lag_seconds{{{base},source_id=\"{}\",source_subtask_index=\"{subtask}\"}} {seconds}",
                    escape(source)
                );
            }
        }
        if !s.partition_watermark.is_empty() {
            out.push_str("# HELP tidemark_kafka_watermark_lag_seconds Now minus the partition's own watermark (its highest timestamp minus the out-of-orderness), as its source subtask last looked.\n# TYPE tidemark_kafka_watermark_lag_seconds gauge\n");
            for ((source, topic, partition), (lag, _)) in &s.partition_watermark {
                let _ = writeln!(
                    out,
                    "tidemark_kafka_watermark_lag_seconds{{{base},source_id=\"{}\",topic=\"{}\",partition=\"{partition}\"}} {lag}",
                    escape(source),
                    escape(topic)
                );
            }
            out.push_str("# HELP tidemark_kafka_partition_idle 1 while the partition is idle (no message for watermarks.idleness): it does not hold its subtask's watermark back.\n# TYPE tidemark_kafka_partition_idle gauge\n");
            for ((source, topic, partition), (_, idle)) in &s.partition_watermark {
                let _ = writeln!(
                    out,
                    "tidemark_kafka_partition_idle{{{base},source_id=\"{}\",topic=\"{}\",partition=\"{partition}\"}} {}",
                    escape(source),
                    escape(topic),
                    u8::from(*idle)
                );
            }
        }
        if !s.commits.is_empty() {
            out.push_str("# HELP tidemark_kafka_commits_total Offset commits made to Kafka.\n# TYPE tidemark_kafka_commits_total counter\n");
            for (source, n) in &s.commits {
                let _ = writeln!(
                    out,
                    "tidemark_kafka_commits_total{{{base},source_id=\"{}\"}} {n}",
                    escape(source)
                );
            }
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_lag_and_commits() {
        let m = KafkaMetrics::default();
        assert_eq!(m.render("job_name=\"j\""), "");
        m.set_partition_lag("in", &("t".into(), 3), 12);
        m.set_subtask_lag("in", 1, 12, 0.5);
        m.count_commit("in");
        m.count_commit("in");
        let text = m.render("job_name=\"j\",tidemark_instance=\"a\"");
        assert!(text.contains(
            "tidemark_kafka_lag_records{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",topic=\"t\",partition=\"3\"} 12\n"
        ), "{text}");
        assert!(text.contains("tidemark_source_lag_seconds{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",source_subtask_index=\"1\"} 0.5\n"), "{text}");
        assert!(text.contains("tidemark_kafka_commits_total{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\"} 2\n"), "{text}");
        m.set_partition_watermark("in", &("t".into(), 3), 2.5, true);
        let text = m.render("job_name=\"j\"");
        assert!(text.contains("tidemark_kafka_watermark_lag_seconds{job_name=\"j\",source_id=\"in\",topic=\"t\",partition=\"3\"} 2.5\n"), "{text}");
        assert!(text.contains("tidemark_kafka_partition_idle{job_name=\"j\",source_id=\"in\",topic=\"t\",partition=\"3\"} 1\n"), "{text}");
        m.remove_partition("in", &("t".into(), 3));
        assert_eq!(m.partition_lag("in", "t", 3), None);
        assert_eq!(m.partition_watermark("in", "t", 3), None);
        assert!(!m.render("").contains("watermark"));
        assert_eq!(m.commits("in"), 2);
    }
}
