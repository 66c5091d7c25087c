//! # tidemark-operators
//!
//! Tidemark's built-in sources, operators and sinks, each found by its job-file `type` name in
//! one [`registry`].
//!
//! ## Map of the crate
//! | module | holds |
//! |---|---|
//! | [`registry`] | [`Registry`] (built-ins plus your own [`Component`]s), [`components`], [`find`], [`build`]: settings → [`Built`] factory |
//! | [`component`] | what every component shares and the registry lists: its entry ([`ComponentInfo`]), [`BuildEnv`], [`Built`]; no component needs the registry |
//! | [`error`] | structured [`ConfigError`]s ([`FieldError`]: field path + [`SettingProblem`]) |
//! | [`sources`] | [`generator`](sources::generator), [`file`](sources::file), [`stdin`](sources::stdin) |
//! | [`operators`] | [`map`](operators::map), [`filter`](operators::filter), [`delay`](operators::delay), [`reduce`](operators::reduce), [`window`](operators::window) |
//! | [`sinks`] | [`discard`](sinks::discard), [`stdout`](sinks::stdout), [`file`](sinks::file) |
//! | [`event_json`] | (from `tidemark-runtime`) JSON objects into events: [`EventParser`](event_json::EventParser), one per reader, shares names and repeated strings between events (file, stdin, Kafka) |
//! | [`expr`] | CEL expressions over events: [`Expr`](expr::Expr) compiled once, [`Evaluator`](expr::Evaluator) per subtask |
//! | [`formats`] | Avro and Protobuf: the mapping to events, the Schema Registry client, the Confluent wire format, Avro container files (Kafka source and sink, `file` source) |
//! | [`on_error`] | `on_error: fail \| skip \| {dead_letter: PATH}` for records an expression fails on |
//! | [`positions`] | what sources and sinks record in a checkpoint about their files ([`FileLength`](positions::FileLength)) and the checks a restore makes ([`RestoreError`](positions::RestoreError)) |
//! | [`aggregates`] | `aggregates:` of `window` and `reduce`: count, sum, min, max, mean over expressions |
//! | [`window_assigner`] | window kinds (tumbling, sliding, session): which windows a timestamp is in, session merging, when a window fires and expires |
//! | [`config`] | settings several components share ([`Timestamps`](config::Timestamps), [`OnError`](config::OnError), [`Aggregate`](config::Aggregate), …) |
//!
//! Each component is one file holding its settings struct (`serde`, unknown fields rejected),
//! its registry entry and its code; the module docs say what it does, edge cases included.
//! Internally, `json_lines` holds the record format of files and standard input/output and
//! `aggregate` the per-key state `reduce` and `window` share. Sources outside this crate (Kafka)
//! take their `key:`/`timestamp:` settings as [`Extract`] and read timestamps with
//! [`timestamp_nanos`], as `file` and `stdin` do.
//!
//! ## Settings
//! [`build`] takes a vertex's settings as a JSON object without the keys the job file handles
//! (`type`, `input`, `parallelism`, `partition`, and on sources the event-time fields
//! `timestamp_before_max`, `timestamp_after_max`, `invalid_timestamp` and `watermarks`, which
//! the runtime applies to every source: [`tidemark_runtime::SourceOptions`]). Durations are
//! strings such as `"2us"`,
//! `"200ms"`, `"1s"` or bare numbers of milliseconds, read by
//! [`tidemark_markers::parse_duration`]. Errors name the field: ``unknown field `rat`, expected
//! one of `count`, `rate`, …`` or ``cost: invalid duration "fast": …``. Relative paths resolve
//! against [`BuildEnv::job_dir`].
//!
//! ## Events in files
//! The `file` and `stdin` sources read one event per line: a JSON object (`format: json`, the
//! default) or a text line as `{"message": "<line>"}` (`format: text`). The record key is the
//! field named by `key:` (default: the field `key` if present, else none) and the timestamp the
//! field named by `timestamp:` (default: `timestamp` if present, else the ingestion time), as
//! milliseconds since the Unix epoch or an RFC 3339 string. The `stdout` and `file` sinks write
//! each record's event as one JSON object per line, fields in order, ints as ints (`3`) and
//! doubles with their fraction (`5.0`). The generator's events are `{"key": <int>, "value":
//! <double>}`, so `{"key":7,"value":1.5}` lines round-trip.
//!
//! ## Example
//! A generator of 10,000 records over two subtasks, a `map`, a running sum per key behind a
//! `hash` edge, and a `discard` sink:
//! ```
//! use serde_json::json;
//! use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
//! use tidemark_runtime::{run, JobConfig, JobGraph, JobOutcome, Partitioning};
//!
//! let env = BuildEnv::new(".");
//! let mut graph = JobGraph::new("example");
//! let Built::Source(generator) =
//!     build(ComponentKind::Source, "generator", json!({"count": 10_000, "keys": 100}), &env)?
//! else { unreachable!() };
//! let Built::Operator(map) =
//!     build(ComponentKind::Operator, "map", json!({"scale": 2, "offset": 1}), &env)?
//! else { unreachable!() };
//! let Built::Operator(sum) =
//!     build(ComponentKind::Operator, "reduce", json!({"aggregate": "sum"}), &env)?
//! else { unreachable!() };
//! let Built::Sink(discard) = build(ComponentKind::Sink, "discard", json!({}), &env)?
//! else { unreachable!() };
//!
//! let src = graph.add_source("numbers", 2, generator)?;
//! let map = graph.add_operator("double", 2, map)?;
//! let sum = graph.add_operator("sum", 2, sum)?;
//! let out = graph.add_sink("out", 1, discard)?;
//! graph.connect(src, map, Partitioning::Forward)?;
//! graph.connect(map, sum, Partitioning::Hash)?;
//! graph.connect(sum, out, Partitioning::Rebalance)?;
//!
//! let result = run(graph, JobConfig::default())?;
//! assert_eq!(result.outcome, JobOutcome::Finished);
//! assert_eq!(result.metrics.vertex("out").unwrap().subtasks[0].records_in(), 10_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod aggregate;
pub mod aggregates;
pub mod component;
pub mod config;
pub mod error;
pub use tidemark_runtime::event_json;
pub mod expr;
pub mod formats;
mod json_lines;
pub mod on_error;
pub mod operators;
pub mod positions;
pub mod registry;
pub mod sinks;
pub mod sources;
#[cfg(test)]
mod test_util;
pub mod window_assigner;
mod window_lanes;
mod window_snapshot;
mod window_state;

pub use config::parse_settings;
pub use json_lines::{timestamp_nanos, Extract};
pub use registry::{
    build, components, find, type_names, BuildEnv, Built, Component, ComponentBuilder,
    ComponentInfo, ComponentKind, ConfigError, FieldError, Registry, SettingProblem,
};
