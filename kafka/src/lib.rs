//! # tidemark-kafka
//!
//! Kafka for Tidemark: a source whose subtasks (of every instance running the job) form one
//! consumer group, a sink that keeps record timestamps, Kafka's lag series, and the mock
//! cluster behind `tidemark dev-kafka`. The user guide (and the
//! contract) is `docs/kafka.md`. Built on `rdkafka` with librdkafka compiled from the crate's bundled
//! sources, without tokio (`BaseConsumer`, `ThreadedProducer`).
//!
//! ## Map of the crate
//! | module | holds |
//! |---|---|
//! | [`source`] | the `kafka` source: config, consumer group, positions, commits, lag |
//! | [`sink`] | the `kafka` sink: config, producer, delivery reports |
//! | [`decode`] | messages → records: formats, key, timestamp types |
//! | `departure` | the group's subtasks in this process leave it together, after their last commits |
//! | [`KafkaJob`] | what one job's Kafka parts share in this process: instance name, clock offsets, series, `--kafka-timeout` |
//! | [`client`] | broker lists, pass-through properties, the broker's last error |
//! | `handoff` | partitions moved between local subtasks resume where the previous one stopped |
//! | `refused_hand_over` | hand-over commits the group refused on a revocation, made again unless the group has passed them |
//! | `restored` | partition offsets and event time restored from a checkpoint directory, taken by whichever subtask is assigned the partition |
//! | [`input_report`] | event time per input partition across the group, through exchanges |
//! | [`group_watch`] | partitions with unread messages that nobody here reads and whose group's commit does not move, for the stall watchdog |
//! | [`metrics`] | `tidemark_kafka_lag_records`, `tidemark_source_lag_seconds`, `tidemark_kafka_commits_total` |
//! | [`exchange`] | exchanges through Kafka: the hidden writer and reader of an `exchange: {kafka: …}` edge, markers as control messages |
//! | [`clock`] | clock offset between instances, NTP-style through the job's clock topic |
//! | [`watermarks`] | per-partition watermarks of the source: partitions as the runtime's splits |
//! | [`dev_cluster`] | librdkafka's mock cluster on its own thread (`tidemark dev-kafka`, tests) |
//! | `testing` | test set-up: produce with back-pressure retry, read a topic back, committed offsets (cargo feature `testing`, off by default) |
//!
//! ## Example
//! ```
//! use tidemark_kafka::dev_cluster::{DevCluster, DevClusterOptions};
//!
//! let cluster = DevCluster::start(DevClusterOptions {
//!     topics: vec![("orders".into(), 4)],
//!     ..DevClusterOptions::default()
//! })
//! .unwrap();
//! assert!(cluster.bootstrap_servers().starts_with("127.0.0.1:"));
//! ```
#![deny(missing_docs)]

mod assigned_start;
pub mod client;
pub mod clock;
mod dead_letter;
pub mod decode;
mod departure;
pub mod dev_cluster;
pub mod exchange;
pub mod group_watch;
mod handoff;
pub mod input_report;
mod job;
pub mod metrics;
mod refused_hand_over;
mod restored;
pub mod sink;
pub mod source;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod topics;
pub mod watermarks;

use std::sync::Arc;

use tidemark_operators::config::parse_settings;
use tidemark_operators::{Built, Component, ComponentKind, ConfigError, FieldError};
use tidemark_runtime::component::{SinkFactory, SourceFactory};
use tidemark_runtime::{Sink, Source, SubtaskContext};

pub use client::{Brokers, DEFAULT_TIMEOUT, TYPE_NAME};
pub use dev_cluster::{DevCluster, DevClusterError, DevClusterOptions, Request};
pub use group_watch::GroupWatch;
pub use job::KafkaJob;
pub use metrics::KafkaMetrics;
pub use sink::{KafkaSink, KafkaSinkConfig, KafkaSinkFactory};
pub use source::{
    KafkaSource, KafkaSourceConfig, KafkaSourceFactory, KafkaSourcePosition, PartitionPosition,
    Start,
};

/// One-line summaries for the component registry.
pub const SOURCE_SUMMARY: &str =
    "reads Kafka topics in a consumer group shared by every instance of the job";
/// One-line summary of the sink.
pub const SINK_SUMMARY: &str = "writes records to a Kafka topic as JSON, keeping their timestamps";

impl KafkaJob {
    /// The `kafka` source and sink of this job, for a component
    /// [`Registry`](tidemark_operators::Registry).
    pub fn components(self: &Arc<Self>) -> Vec<Component> {
        let (source, sink) = (self.clone(), self.clone());
        vec![
            Component::new(
                ComponentKind::Source,
                TYPE_NAME,
                source::FIELDS,
                move |settings, env| {
                    Ok(Built::Source(
                        source.build_source_in(settings, &env.job_dir)?,
                    ))
                },
            )
            .summary(SOURCE_SUMMARY),
            Component::new(
                ComponentKind::Sink,
                TYPE_NAME,
                sink::FIELDS,
                move |settings, env| Ok(Built::Sink(sink.build_sink_in(settings, &env.job_dir)?)),
            )
            .summary(SINK_SUMMARY),
        ]
    }

    /// Builds the `kafka` source from its job-file settings: checks them and returns the
    /// factory of its subtasks. Errors name the setting and what is expected.
    pub fn build_source(
        self: &Arc<Self>,
        config: serde_json::Value,
    ) -> Result<SourceFactory, ConfigError> {
        self.build_source_in(config, std::path::Path::new(""))
    }

    /// [`KafkaJob::build_source`] with relative paths in the settings (schema files, dead
    /// letter) relative to `dir`, the job file's folder.
    pub fn build_source_in(
        self: &Arc<Self>,
        config: serde_json::Value,
        dir: &std::path::Path,
    ) -> Result<SourceFactory, ConfigError> {
        let mut config: KafkaSourceConfig = parse_settings(TYPE_NAME, config)?;
        config.check().map_err(invalid)?;
        config.resolve_paths(dir);
        let factory = Arc::new(KafkaSourceFactory::new(config, self)?);
        Ok(Box::new(move |ctx: &SubtaskContext| {
            Ok(Box::new(factory.make(ctx)?) as Box<dyn Source>)
        }))
    }

    /// Builds the `kafka` sink from its job-file settings.
    pub fn build_sink(&self, config: serde_json::Value) -> Result<SinkFactory, ConfigError> {
        self.build_sink_in(config, std::path::Path::new(""))
    }

    /// [`KafkaJob::build_sink`] with relative paths in the settings relative to `dir`.
    pub fn build_sink_in(
        &self,
        config: serde_json::Value,
        dir: &std::path::Path,
    ) -> Result<SinkFactory, ConfigError> {
        let mut config: KafkaSinkConfig = parse_settings(TYPE_NAME, config)?;
        config.check().map_err(invalid)?;
        config.resolve_paths(dir);
        let factory = Arc::new(KafkaSinkFactory::new(config, self)?);
        Ok(Box::new(move |ctx: &SubtaskContext| {
            Ok(Box::new(factory.make(ctx)?) as Box<dyn Sink>)
        }))
    }
}

fn invalid((path, message): (&str, String)) -> ConfigError {
    ConfigError::invalid(TYPE_NAME, FieldError::new(path, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn settings_are_checked_before_any_broker() {
        let kafka = KafkaJob::new();
        let err = |r: Result<SourceFactory, ConfigError>| r.err().unwrap().to_string();
        let e = err(kafka.build_source(json!({"brokers": "h:1", "topics": ["t"], "strat": "x"})));
        assert!(e.contains("unknown field `strat`"), "{e}");
        assert!(e.contains("`start`"), "{e}");
        let e = err(kafka.build_source(json!({"brokers": "h:1", "topics": []})));
        assert_eq!(
            e,
            "invalid kafka settings: topics: must list at least one topic name"
        );
        let e = err(kafka.build_source(json!({"brokers": "h:1", "topics": ["t"], "start": "now"})));
        assert!(e.contains("start: "), "{e}");
        assert!(e.contains("`earliest`"), "{e}");
        let e = kafka
            .build_sink(json!({"brokers": "", "topic": "t"}))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            "invalid kafka settings: brokers: must name at least one host:port"
        );
        let e = kafka
            .build_sink(json!({"brokers": "h:1"}))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("topic"), "{e}");
        assert!(kafka
            .build_sink(json!({"brokers": ["h:1"], "topic": "t", "properties": {"acks": "all"}}))
            .is_ok());
        let names: Vec<_> = kafka
            .components()
            .iter()
            .map(|c| (c.kind, c.type_name.clone()))
            .collect();
        assert_eq!(
            names,
            [
                (ComponentKind::Source, "kafka".to_owned()),
                (ComponentKind::Sink, "kafka".to_owned())
            ]
        );
    }
}
