//! Kafka's own series: lag per partition (KIP-1226), lag per source subtask in records and
//! seconds, each partition's watermark lag and idleness, and commits. Sources write here at most
//! every 100 ms; [`KafkaMetrics`] is a [`SeriesSource`] of the job's metrics registry, so a
//! scrape of `/metrics` or `/api/v1/metrics` reads them with the job's other series.

use std::collections::BTreeMap;
use std::sync::Mutex;
use tidemark_runtime::sync::lock;

use tidemark_runtime::metrics::{SeriesFamily, SeriesSource, SeriesWriter};

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
    /// (operator_id, partition) → seconds the last restore of its state took.
    state_restore_seconds: BTreeMap<(String, i32), f64>,
    /// operator_id → state messages read by restores.
    state_restored_records: BTreeMap<String, u64>,
    /// operator_id → exchange records dropped as replays upstream.
    replayed_records: BTreeMap<String, u64>,
    /// (source_id, subtask) → where the subtask is with its consumer group.
    assignments: BTreeMap<(String, usize), Assignment>,
    /// (source_id, subtask) → the broker call a closing subtask is in, if any.
    closing_steps: BTreeMap<(String, usize), &'static str>,
}

/// Where a Kafka source subtask (or exchange reader) is with its consumer group, for the
/// readiness probe (`docs/operations.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignment {
    /// Subscribed, waiting for its first assignment.
    Waiting,
    /// Being given partitions whose keyed state it restores from the state topic first.
    Restoring,
    /// Holds its assignment (possibly empty: more subtasks than partitions).
    Assigned,
    /// Lost its partitions in a rebalance and waits to be given partitions again.
    Rebalancing,
}

/// Restores of exchange partitions' keyed state ([`KafkaMetrics::state_restores`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StateRestores {
    /// (operator_id, partition, seconds the last restore of it took).
    pub last_seconds: Vec<(String, i32, f64)>,
    /// operator_id → state messages read by its restores.
    pub records: BTreeMap<String, u64>,
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
        let mut s = lock(&self.state);
        s.partition_lag
            .insert((source_id.to_owned(), key.0.clone(), key.1), lag);
    }

    /// The partitions the source subtasks of this instance hold: (source_id, topic,
    /// partition).
    pub fn held_partitions(&self) -> std::collections::BTreeSet<(String, String, i32)> {
        lock(&self.state).partition_lag.keys().cloned().collect()
    }

    /// Forgets a partition that moved to another subtask.
    pub fn remove_partition(&self, source_id: &str, key: &PartitionKey) {
        let mut s = lock(&self.state);
        let k = (source_id.to_owned(), key.0.clone(), key.1);
        s.partition_lag.remove(&k);
        s.partition_watermark.remove(&k);
    }

    /// Sets one partition's watermark lag (now − its watermark, seconds) and idleness.
    pub fn set_partition_watermark(
        &self,
        source_id: &str,
        key: &PartitionKey,
        lag_seconds: f64,
        idle: bool,
    ) {
        let mut s = lock(&self.state);
        s.partition_watermark.insert(
            (source_id.to_owned(), key.0.clone(), key.1),
            (lag_seconds, idle),
        );
    }

    /// One partition's watermark lag in seconds and whether it is idle, if this instance holds
    /// it and it has a watermark.
    pub fn partition_watermark(
        &self,
        source_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<(f64, bool)> {
        lock(&self.state)
            .partition_watermark
            .get(&(source_id.to_owned(), topic.to_owned(), partition))
            .copied()
    }

    /// Sets a subtask's lag: records over its partitions, seconds since its last record's
    /// timestamp (0 when it is caught up).
    pub fn set_subtask_lag(&self, source_id: &str, subtask: usize, records: i64, seconds: f64) {
        let mut s = lock(&self.state);
        s.subtask_lag
            .insert((source_id.to_owned(), subtask), (records, seconds));
    }

    /// Sets where a source subtask is with its group.
    pub fn set_assignment(&self, source_id: &str, subtask: usize, assignment: Assignment) {
        let mut s = lock(&self.state);
        s.assignments
            .insert((source_id.to_owned(), subtask), assignment);
    }

    /// Every source subtask's [`Assignment`]: (source_id, subtask, assignment).
    pub fn assignments(&self) -> Vec<(String, usize, Assignment)> {
        let s = lock(&self.state);
        (s.assignments.iter())
            .map(|((id, subtask), a)| (id.clone(), *subtask, *a))
            .collect()
    }

    /// A closing source subtask is now in `step` (`committing its offsets`, ...), or done
    /// with broker calls (`None`): what a hard stop cuts short, for the run's summary.
    pub fn set_closing_step(&self, source_id: &str, subtask: usize, step: Option<&'static str>) {
        let mut s = lock(&self.state);
        let key = (source_id.to_owned(), subtask);
        match step {
            Some(step) => s.closing_steps.insert(key, step),
            None => s.closing_steps.remove(&key),
        };
    }

    /// The broker calls closing source subtasks are in: (source_id, subtask, step).
    pub fn closing_steps(&self) -> Vec<(String, usize, &'static str)> {
        let s = lock(&self.state);
        (s.closing_steps.iter())
            .map(|((id, subtask), step)| (id.clone(), *subtask, *step))
            .collect()
    }

    /// Counts one commit of offsets.
    pub fn count_commit(&self, source_id: &str) {
        let mut s = lock(&self.state);
        *s.commits.entry(source_id.to_owned()).or_default() += 1;
    }

    /// The lag of one partition, if this instance holds it.
    pub fn partition_lag(&self, source_id: &str, topic: &str, partition: i32) -> Option<i64> {
        lock(&self.state)
            .partition_lag
            .get(&(source_id.to_owned(), topic.to_owned(), partition))
            .copied()
    }

    /// A restore of exchange partition `partition`'s state for `operator_id` took `seconds`
    /// and read `records` state messages (`docs/kafka.md`, "State that moves with its
    /// partitions").
    pub fn state_restored(&self, operator_id: &str, partition: i32, seconds: f64, records: u64) {
        let mut s = lock(&self.state);
        s.state_restore_seconds
            .insert((operator_id.to_owned(), partition), seconds);
        *s.state_restored_records
            .entry(operator_id.to_owned())
            .or_insert(0) += records;
    }

    /// The reader of the exchange into `operator_id` dropped `records` records read twice
    /// upstream (`docs/kafka.md`, "Replays upstream of the exchange").
    pub fn replays_dropped(&self, operator_id: &str, records: u64) {
        let mut s = lock(&self.state);
        *s.replayed_records
            .entry(operator_id.to_owned())
            .or_insert(0) += records;
    }

    /// Exchange records dropped as replays into `operator_id` so far.
    pub fn replayed_records(&self, operator_id: &str) -> u64 {
        lock(&self.state)
            .replayed_records
            .get(operator_id)
            .copied()
            .unwrap_or(0)
    }

    /// Restores of partitions' state so far, for the live view and the report.
    pub fn state_restores(&self) -> StateRestores {
        let s = lock(&self.state);
        StateRestores {
            last_seconds: s
                .state_restore_seconds
                .iter()
                .map(|((o, p), t)| (o.clone(), *p, *t))
                .collect(),
            records: s.state_restored_records.clone(),
        }
    }

    /// Commits made by a source's subtasks.
    pub fn commits(&self, source_id: &str) -> u64 {
        lock(&self.state)
            .commits
            .get(source_id)
            .copied()
            .unwrap_or(0)
    }
}

/// `tidemark_kafka_lag_records{source_id, topic, partition}`.
pub const LAG_RECORDS: SeriesFamily = SeriesFamily::gauge(
    "tidemark_kafka_lag_records",
    "Messages not yet read: the partition's high watermark (as the last fetch gave it) minus the position.",
);

/// `tidemark_source_lag_seconds{source_id, source_subtask_index}`.
pub const SOURCE_LAG_SECONDS: SeriesFamily = SeriesFamily::gauge(
    "tidemark_source_lag_seconds",
    "Seconds between now and the timestamp of the last record a source subtask read (0 when caught up).",
);

/// `tidemark_kafka_watermark_lag_seconds{source_id, topic, partition}`.
pub const WATERMARK_LAG_SECONDS: SeriesFamily = SeriesFamily::gauge(
    "tidemark_kafka_watermark_lag_seconds",
    "Now minus the partition's own watermark (its highest timestamp minus the out-of-orderness), as its source subtask last looked.",
);

/// `tidemark_kafka_partition_idle{source_id, topic, partition}`.
pub const PARTITION_IDLE: SeriesFamily = SeriesFamily::gauge(
    "tidemark_kafka_partition_idle",
    "1 while the partition is idle (read to its end and no message for watermarks.idleness): it does not hold its subtask's watermark back.",
);

/// `tidemark_kafka_commits_total{source_id}`.
pub const COMMITS: SeriesFamily = SeriesFamily::counter(
    "tidemark_kafka_commits_total",
    "Offset commits made to Kafka.",
);

/// `tidemark_state_restore_seconds{operator_id, partition}`.
pub const STATE_RESTORE_SECONDS: SeriesFamily = SeriesFamily::gauge(
    "tidemark_state_restore_seconds",
    "Seconds the last restore of an exchange partition's keyed state took (read from the state topic, rewritten), before its records were read.",
);

/// `tidemark_state_restored_records_total{operator_id}`.
pub const STATE_RESTORED_RECORDS: SeriesFamily = SeriesFamily::counter(
    "tidemark_state_restored_records_total",
    "State-topic messages read while restoring exchange partitions' keyed state.",
);

/// `tidemark_exchange_replayed_records_total{operator_id}`.
pub const EXCHANGE_REPLAYED_RECORDS: SeriesFamily = SeriesFamily::counter(
    "tidemark_exchange_replayed_records_total",
    "Exchange records dropped by the reader because their origin (source topic, partition, offset) is not newer than one it already took: input read twice upstream of the exchange.",
);

/// The Kafka series, each labelled as its family's documentation says (after `job_name` and
/// `tidemark_instance`, which the registry adds). Whoever runs the job registers the
/// `Arc<KafkaMetrics>` its sources write to with
/// [`MetricsRegistry::register_series`](tidemark_runtime::MetricsRegistry::register_series).
impl SeriesSource for KafkaMetrics {
    fn collect(&self, out: &mut SeriesWriter) {
        let s = lock(&self.state);
        for ((source, topic, partition), lag) in &s.partition_lag {
            let partition = partition.to_string();
            let labels = [
                ("source_id", source.as_str()),
                ("topic", topic.as_str()),
                ("partition", partition.as_str()),
            ];
            out.number(&LAG_RECORDS, &labels, *lag as f64);
        }
        for ((source, subtask), (_, seconds)) in &s.subtask_lag {
            let subtask = subtask.to_string();
            let labels = [
                ("source_id", source.as_str()),
                ("source_subtask_index", subtask.as_str()),
            ];
            out.number(&SOURCE_LAG_SECONDS, &labels, *seconds);
        }
        // Every watermark lag, then every idleness, as the two families' series.
        for family in [&WATERMARK_LAG_SECONDS, &PARTITION_IDLE] {
            for ((source, topic, partition), (lag, idle)) in &s.partition_watermark {
                let partition = partition.to_string();
                let labels = [
                    ("source_id", source.as_str()),
                    ("topic", topic.as_str()),
                    ("partition", partition.as_str()),
                ];
                let value = if family == &PARTITION_IDLE {
                    f64::from(u8::from(*idle))
                } else {
                    *lag
                };
                out.number(family, &labels, value);
            }
        }
        for (source, n) in &s.commits {
            out.number(&COMMITS, &[("source_id", source)], *n as f64);
        }
        for ((operator, partition), seconds) in &s.state_restore_seconds {
            let partition = partition.to_string();
            let labels = [
                ("operator_id", operator.as_str()),
                ("partition", partition.as_str()),
            ];
            out.number(&STATE_RESTORE_SECONDS, &labels, *seconds);
        }
        for (operator, n) in &s.state_restored_records {
            out.number(
                &STATE_RESTORED_RECORDS,
                &[("operator_id", operator)],
                *n as f64,
            );
        }
        for (operator, n) in &s.replayed_records {
            out.number(
                &EXCHANGE_REPLAYED_RECORDS,
                &[("operator_id", operator)],
                *n as f64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tidemark_runtime::exporter::render_text;
    use tidemark_runtime::testing::{CountingSource, DiscardSink};
    use tidemark_runtime::{run, JobConfig, JobGraph, MetricsRegistry, Partitioning};

    /// The registry of a small finished job named `j`.
    fn registry() -> Arc<MetricsRegistry> {
        let mut graph = JobGraph::new("j");
        let src = graph
            .add_source("in", 1, |_| Ok(Box::new(CountingSource::new(10))))
            .unwrap();
        let sink = graph
            .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
            .unwrap();
        graph.connect(src, sink, Partitioning::Forward).unwrap();
        run(graph, JobConfig::default()).unwrap().metrics
    }

    /// The text after the last `process_*` line: what the registered components added.
    fn component_text(registry: &MetricsRegistry) -> String {
        let text = render_text(registry).unwrap();
        let start = text
            .find("# HELP tidemark_kafka")
            .or_else(|| text.find("# HELP tidemark_source_lag_seconds"))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }

    #[test]
    fn a_registered_kafka_metrics_is_scraped_with_the_job() {
        let registry = registry();
        let m = Arc::new(KafkaMetrics::default());
        registry.register_series(m.clone());
        assert_eq!(component_text(&registry), "");
        registry.set_instance("a");
        m.set_partition_lag("in", &("t".into(), 3), 12);
        m.set_partition_lag("in", &("t\"x".into(), 0), 0);
        m.set_subtask_lag("in", 1, 12, 0.5);
        m.count_commit("in");
        m.count_commit("in");
        m.set_partition_watermark("in", &("t".into(), 3), 2.5, true);
        m.replays_dropped("per_user", 3);
        m.replays_dropped("per_user", 4);
        // Byte for byte what the hand-written text was before these series were registered.
        let expected = "\
# HELP tidemark_kafka_lag_records Messages not yet read: the partition's high watermark (as the last fetch gave it) minus the position.
# TYPE tidemark_kafka_lag_records gauge
tidemark_kafka_lag_records{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",topic=\"t\",partition=\"3\"} 12
tidemark_kafka_lag_records{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",topic=\"t\\\"x\",partition=\"0\"} 0
# HELP tidemark_source_lag_seconds Seconds between now and the timestamp of the last record a source subtask read (0 when caught up).
# TYPE tidemark_source_lag_seconds gauge
tidemark_source_lag_seconds{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",source_subtask_index=\"1\"} 0.5
# HELP tidemark_kafka_watermark_lag_seconds Now minus the partition's own watermark (its highest timestamp minus the out-of-orderness), as its source subtask last looked.
# TYPE tidemark_kafka_watermark_lag_seconds gauge
tidemark_kafka_watermark_lag_seconds{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",topic=\"t\",partition=\"3\"} 2.5
# HELP tidemark_kafka_partition_idle 1 while the partition is idle (read to its end and no message for watermarks.idleness): it does not hold its subtask's watermark back.
# TYPE tidemark_kafka_partition_idle gauge
tidemark_kafka_partition_idle{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\",topic=\"t\",partition=\"3\"} 1
# HELP tidemark_kafka_commits_total Offset commits made to Kafka.
# TYPE tidemark_kafka_commits_total counter
tidemark_kafka_commits_total{job_name=\"j\",tidemark_instance=\"a\",source_id=\"in\"} 2
# HELP tidemark_exchange_replayed_records_total Exchange records dropped by the reader because their origin (source topic, partition, offset) is not newer than one it already took: input read twice upstream of the exchange.
# TYPE tidemark_exchange_replayed_records_total counter
tidemark_exchange_replayed_records_total{job_name=\"j\",tidemark_instance=\"a\",operator_id=\"per_user\"} 7
";
        assert_eq!(component_text(&registry), expected);

        m.remove_partition("in", &("t".into(), 3));
        assert_eq!(m.partition_lag("in", "t", 3), None);
        assert_eq!(m.partition_watermark("in", "t", 3), None);
        let text = component_text(&registry);
        assert!(
            !text.contains("tidemark_kafka_watermark_lag_seconds"),
            "{text}"
        );
        assert!(!text.contains("tidemark_kafka_partition_idle"), "{text}");
        assert!(!text.contains("partition=\"3\""), "{text}");
        assert_eq!(m.commits("in"), 2);
        assert_eq!(m.replayed_records("per_user"), 7);
    }
}
