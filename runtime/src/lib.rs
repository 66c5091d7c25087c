//! # tidemark-runtime
//!
//! The streaming runtime of Tidemark: job graphs of sources, operators and sinks, run as
//! parallel subtasks on threads joined by bounded channels of record batches, with Flink-style
//! latency markers flowing through them.
//!
//! ## Map of the crate
//! | module | holds |
//! |---|---|
//! | [`record`] | [`Record`]: key, event, timestamp and its [`TimestampType`] |
//! | [`checkpoint`] | barriers and the [`Checkpoints`](checkpoint::Checkpoints) coordinator (at least once) |
//! | [`checkpoint_store`] | checkpoints to a directory: layout, versioned file format, reading back whole |
//! | [`batch`] | [`Batch`]: records plus positioned [`Event`]s (markers, watermarks) |
//! | [`component`] | the traits users implement: [`Source`], [`Operator`], [`Sink`] |
//! | [`output`] | [`Output`], the reusable buffer components emit into |
//! | [`graph`] | [`JobGraph`] builder, [`Partitioning`], validation |
//! | [`event_time`] | per-source timestamp checks and watermarks ([`SourceOptions`]), per split ([`SplitWatermarks`]) |
//! | [`plan`] | [`ExecutionPlan`]: chaining vertices into tasks, channels between them |
//! | [`config`] | [`JobConfig`]: markers, buffer timeout, batch size, seed, clock |
//! | [`key_group`] | key groups: `max_parallelism`, the key-group hash, each subtask's range |
//! | [`key_hash`] | the key hash: Kafka's murmur2 of a key's canonical bytes, which key groups and exchange partitions come from |
//! | [`keyed_state`] | the keyed-state API: [`KeyedState`](keyed_state::KeyedState), [`KeyedSnapshot`](keyed_state::KeyedSnapshot) |
//! | [`keyed_table`] | keyed state an operator declares ([`KeyedTable`](keyed_table::KeyedTable)) and its kinds: value, list, time-ordered buffer ([`TimeBuffer`](keyed_table::TimeBuffer)), map |
//! | [`keyed_store`] | where keyed state goes and comes from: [`KeyedStore`](keyed_store::KeyedStore), the directory's [`DirectoryStore`](keyed_store::DirectoryStore) |
//! | [`job`] | [`start`]/[`run`] a job, [`JobHandle`], [`JobResult`] |
//! | [`metrics`] | [`MetricsRegistry`]: live per-subtask counters and latency statistics |
//! | [`exporter`] | the Prometheus collector reading the registry at scrape time |
//! | [`value`] | [`Value`] and [`Map`]: the JSON data model of the events records carry |
//! | [`event_json`] | JSON objects into events ([`EventParser`](event_json::EventParser)), and checked without parsing for records kept as text ([`Record::from_json_object`]) |
//! | [`sync`] | [`lock`](sync::lock): the one policy for poisoned locks |
//! | [`name`] | [`Name`](name::Name), a field name, and [`intern`](name::intern): names made static once per process |
//! | `testing` | small components for tests and examples (cargo feature `testing`, off by default) |
//!
//! Internally, `channel` holds the batched queues with buffer reuse, `partitioner` the
//! per-edge routing and marker routing, `chain` the chained vertices of one task and `task` the
//! loop each thread runs.
//!
//! ## Example
//! ```
//! use tidemark_runtime::{run, JobConfig, JobGraph, JobOutcome, Partitioning};
//! // Test components (the cargo feature `testing`); a job brings its own.
//! use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
//!
//! let mut graph = JobGraph::new("example");
//! let src = graph.add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(10_000)))).unwrap();
//! let double = graph.add_operator("double", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0)))).unwrap();
//! let sink = graph.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
//! graph.connect(src, double, Partitioning::Forward).unwrap();
//! graph.connect(double, sink, Partitioning::Rebalance).unwrap();
//!
//! let result = run(graph, JobConfig::default()).unwrap();
//! assert_eq!(result.outcome, JobOutcome::Finished);
//! assert_eq!(result.metrics.vertex("out").unwrap().subtasks[0].records_in(), 20_000);
//! ```
#![deny(missing_docs)]

pub mod batch;
mod chain;
mod channel;
pub mod checkpoint;
pub mod checkpoint_store;
mod checkpoint_v1;
pub mod component;
pub mod config;
pub mod event_json;
mod event_text;
pub mod event_time;
pub mod exporter;
pub mod graph;
pub mod job;
mod job_flags;
pub mod key_group;
pub mod key_hash;
pub mod keyed_state;
pub mod keyed_store;
pub mod keyed_table;
pub mod metrics;
pub mod name;
pub mod output;
mod partitioner;
pub mod plan;
pub mod provenance;
pub mod record;
mod record_id;
pub mod state_codec;
mod state_file;
pub mod state_move;
pub mod sync;
mod task;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod text_encoder;
pub mod value;
mod vertex_busy;
mod vertex_kind;
mod worker;

pub use batch::{Batch, Event};
pub use component::{
    process_taken, BoxError, Operator, OutputClosed, PollContext, Sink, Source, SourceErrorCounts,
    SourceLag, SourceStatus, StateSize, SubtaskContext,
};
pub use config::{IdleStrategy, JobConfig, PARK_QUIET, PARK_TICK};
pub use event_time::{
    InvalidTimestampPolicy, SourceOptions, SplitId, SplitState, SplitStatus, SplitWatermarks,
    TimestampCheck, WatermarkStrategy,
};
pub use graph::{
    check_parallelism, valid_id, Edge, GraphError, JobGraph, ParallelismError, Partitioning,
    VertexId, VertexKind, MAX_PARALLELISM,
};
pub use job::{
    prepare, run, start, JobHandle, JobOutcome, JobResult, PreparedJob, StartError, StopHandle,
    TaskFailure,
};
pub use metrics::{DropReason, JoinCounts, MetricsRegistry, SubtaskMetrics, TaskMetrics};
pub use output::Output;
pub use partitioner::hash_channel;
pub use plan::ExecutionPlan;
pub use record::{Record, TimestampType};
pub use tidemark_markers as markers;
pub use value::{Map, Value};
