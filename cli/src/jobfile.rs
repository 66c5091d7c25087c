//! The job file: its model, and parsing it from YAML with errors that name file, line, vertex
//! and what is expected.
//!
//! Parsing checks everything a single field can tell (types, names, durations, parallelism,
//! partitions, `input` presence). What needs the whole graph or the component registry (types,
//! component fields, inputs, cycles) is checked in [`crate::build`], which reports the
//! parse's problems ([`JobFile::problems`]) together with its own, so every error comes out at
//! once, in file order.
//!
//! The structure is derived with serde (`deny_unknown_fields`, as the components' settings are):
//! the keys a mapping's struct has are read into it and the others are reported as unknown in a
//! pass of their own (serde would stop at the first), every field is checked by its own reader,
//! and each vertex is read on its own, so that one mistake hides no other. Positions come from
//! [`crate::locate`].
//!
//! Top-level keys starting with `x-` are ignored, so YAML anchors can live there.

use crate::error::{JobFileError, JobFileErrors, Problem, VertexRef};
use crate::locate::{Pos, SourceMap};
use crate::suggest::did_you_mean;
use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_aux::serde_introspection::serde_introspect;
use serde_yaml_ng::{Mapping, Value};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tidemark_markers::{parse_duration, parse_history_size, Buckets, ConfigError, Granularity};
use tidemark_runtime::{
    check_parallelism, valid_id, IdleStrategy, InvalidTimestampPolicy, ParallelismError,
    Partitioning, SourceOptions, TimestampCheck, VertexKind, WatermarkStrategy,
};

/// The top-level fields of a job file.
pub const TOP_LEVEL_FIELDS: [&str; 16] = [
    "name",
    "parallelism",
    "max_parallelism",
    "buffer_timeout",
    "channel_capacity",
    "chaining",
    "e2e_latency_everywhere",
    "idle_strategy",
    "latency",
    "e2e",
    "checkpoint",
    "stall_timeout",
    "web_config_file",
    "sources",
    "operators",
    "sinks",
];
/// The fields of the `latency` section.
pub const LATENCY_FIELDS: [&str; 4] = ["interval", "granularity", "history_size", "buckets"];
/// The fields of the `e2e` section (record end-to-end latency).
pub const E2E_FIELDS: [&str; 1] = ["buckets"];
/// The fields of the `checkpoint` section.
pub const CHECKPOINT_FIELDS: [&str; 3] = ["interval", "dir", "retain"];
/// The fields every vertex has, besides its component's own.
pub const VERTEX_FIELDS: [&str; 5] = [
    "type",
    "input",
    "parallelism",
    "max_parallelism",
    "partition",
];
/// The event-time fields every source has, besides its component's own: applied by the
/// runtime to whatever the source emits ([`SourceOptions`]).
pub const SOURCE_EVENT_TIME_FIELDS: [&str; 4] = [
    "timestamp_before_max",
    "timestamp_after_max",
    "invalid_timestamp",
    "watermarks",
];
/// The fields of a source's `watermarks` mapping.
pub const WATERMARK_FIELDS: [&str; 3] = ["max_out_of_orderness", "interval", "idleness"];
/// The values of `invalid_timestamp`.
pub const INVALID_TIMESTAMP_POLICIES: [&str; 3] = ["drop", "clamp", "fail"];
/// The YAML tag the reader gives integers too large for 64 bits (kept as their digits).
const BIG_NUMBER_TAG: &str = "!tidemark-big-number";

/// A parsed job file.
#[derive(Debug, Clone)]
pub struct JobFile {
    /// The file name as given, used in error messages.
    pub file: String,
    /// The directory relative paths in component configs are resolved against.
    pub dir: PathBuf,
    /// The job's name.
    pub name: String,
    /// The default parallelism of every vertex.
    pub parallelism: Option<NonZeroUsize>,
    /// The default number of key groups of every vertex (`max_parallelism`).
    pub max_parallelism: Option<u32>,
    /// The buffer timeout.
    pub buffer_timeout: Option<Duration>,
    /// Batches each channel holds before its sender blocks.
    pub channel_capacity: Option<usize>,
    /// Whether forward edges are chained into one task.
    pub chaining: Option<bool>,
    /// Whether record end-to-end latency is recorded at every vertex.
    pub e2e_latency_everywhere: Option<bool>,
    /// How tasks wait when they have nothing to do.
    pub idle_strategy: Option<IdleStrategy>,
    /// `checkpoint.interval`: barriers for at-least-once delivery (`docs/kafka.md`).
    pub checkpoint_interval: Option<Duration>,
    /// `checkpoint.dir`: where checkpoints are written (relative to the working directory).
    pub checkpoint_dir: Option<PathBuf>,
    /// `checkpoint.retain`: complete checkpoints kept.
    pub checkpoint_retain: Option<usize>,
    /// `stall_timeout`: how long a vertex subtask with input waiting may take no record before
    /// `/readyz` says `stalled` (`docs/operations.md`).
    pub stall_timeout: Option<Duration>,
    /// `web_config_file`: TLS and basic auth of the HTTP endpoint, in the Prometheus exporter
    /// toolkit's format (relative to the job file's folder).
    pub web_config_file: Option<PathBuf>,
    /// The `latency` section.
    pub latency: LatencySection,
    /// `e2e.buckets`: the bucket bounds of `tidemark_record_e2e_latency_seconds`.
    pub e2e_buckets: Option<Buckets>,
    /// Sources, operators and sinks, each section in file order.
    pub vertices: Vec<VertexSpec>,
    /// Key positions, to locate errors found later.
    pub source_map: SourceMap,
    /// What parsing found wrong, in file order. A job file with problems still holds what could
    /// be read, so that [`crate::build::build_graph`] can report its own problems too; it
    /// reports these with them and builds nothing.
    pub problems: Vec<JobFileError>,
}

/// The `latency` section; absent fields fall back to flags or defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencySection {
    /// Marker interval; 0 disables markers.
    pub interval: Option<Duration>,
    /// `single`, `operator` or `subtask`.
    pub granularity: Option<Granularity>,
    /// Samples in each key's sliding window.
    pub history_size: Option<NonZeroUsize>,
    /// Bucket bounds of `tidemark_marker_latency_seconds`.
    pub buckets: Option<Buckets>,
}

/// One source, operator or sink.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexSpec {
    /// The vertex id (its key in its section).
    pub id: String,
    /// Which section it is in.
    pub kind: VertexKind,
    /// The component type, e.g. `generator`; empty when the file gives none (an error).
    pub type_name: String,
    /// The ids it reads from (empty for sources).
    pub inputs: Vec<String>,
    /// Its own parallelism, overriding the job's default.
    pub parallelism: Option<NonZeroUsize>,
    /// Its own number of key groups, overriding the job's `max_parallelism`.
    pub max_parallelism: Option<u32>,
    /// The partitioning of its input edges.
    pub partition: Option<Partitioning>,
    /// `exchange:` of an operator or sink: its input edges cross instances through Kafka
    /// (checked when the graph is built).
    pub exchange: Option<serde_json::Value>,
    /// A source's timestamp check and watermarks (default for other vertices).
    pub source_options: SourceOptions,
    /// Every other field, for the component to interpret.
    pub config: serde_json::Map<String, serde_json::Value>,
}

impl VertexSpec {
    /// The reference used in error messages.
    pub fn vref(&self) -> VertexRef {
        VertexRef {
            kind: self.kind,
            id: self.id.clone(),
        }
    }
}

/// The section name of a vertex kind.
pub fn section_of(kind: VertexKind) -> &'static str {
    kind.section()
}

impl JobFile {
    /// Reads and parses the job file at `path`. An unreadable file is an error without a
    /// position; a file that cannot be read as a job at all comes back as [`JobFileErrors`];
    /// other problems are in [`JobFile::problems`] (see [`JobFile::parse`]).
    pub fn load(path: &Path) -> anyhow::Result<JobFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read job file {}", path.display()))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut job = JobFile::parse(&text, &path.display().to_string())?;
        job.dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        Ok(job)
    }

    /// Parses a job file's text; `file` names it in errors.
    ///
    /// Fails only when the text is not a job file at all (YAML syntax, empty, not a mapping).
    /// Otherwise the job comes back with what could be read and its [`problems`](Self::problems),
    /// which [`crate::build::build_graph`] reports together with the graph's: check them (or use
    /// [`JobFile::checked`]) before using a job file on its own.
    ///
    /// `${NAME}` and `${NAME:-default}` are first replaced by environment variables
    /// ([`crate::substitute`]).
    pub fn parse(text: &str, file: &str) -> Result<JobFile, JobFileErrors> {
        JobFile::parse_with_vars(text, file, &|name| std::env::var(name).ok())
    }

    /// [`JobFile::parse`] with the variables of `lookup` instead of the environment.
    pub fn parse_with_vars(
        text: &str,
        file: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<JobFile, JobFileErrors> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let text = crate::substitute::substitute(text, lookup).map_err(|errors| {
            JobFileErrors(
                errors
                    .into_iter()
                    .map(|e| JobFileError {
                        file: file.to_string(),
                        pos: Some(e.pos()),
                        vertex: None,
                        problem: Problem::Substitution(e),
                    })
                    .collect(),
            )
        })?;
        let text = text.as_str();
        let map = SourceMap::new(text);
        let mut p = Parser {
            file: file.to_string(),
            map,
            errors: Vec::new(),
        };
        let job = p.parse(text);
        sort_errors(&mut p.errors);
        match job {
            Some(mut job) => {
                job.problems = p.errors;
                Ok(job)
            }
            None => Err(JobFileErrors(p.errors)),
        }
    }

    /// The job file if parsing found no problem, else its problems.
    pub fn checked(self) -> Result<JobFile, JobFileErrors> {
        if self.problems.is_empty() {
            Ok(self)
        } else {
            Err(JobFileErrors(self.problems))
        }
    }

    /// Where the key at `path` is written, falling back to its closest written parent.
    pub fn pos(&self, path: &[&str]) -> Option<Pos> {
        locate(&self.source_map, path)
    }

    /// An error about the key at `path` (parents first), about `vertex` if given.
    pub fn error(
        &self,
        path: &[&str],
        vertex: Option<VertexRef>,
        problem: Problem,
    ) -> JobFileError {
        JobFileError {
            file: self.file.clone(),
            pos: self.pos(path),
            vertex,
            problem,
        }
    }

    /// The vertex with this id.
    pub fn vertex(&self, id: &str) -> Option<&VertexSpec> {
        self.vertices.iter().find(|v| v.id == id)
    }
}

/// Sorts errors into file order: by line and column, those without a position last, and
/// otherwise in the order they were found.
pub fn sort_errors(errors: &mut [JobFileError]) {
    errors.sort_by_key(|e| e.pos.map_or((usize::MAX, 0), |p| (p.line, p.column)));
}

fn locate(map: &SourceMap, path: &[&str]) -> Option<Pos> {
    (1..=path.len()).rev().find_map(|n| map.find(&path[..n]))
}

struct Parser {
    file: String,
    map: SourceMap,
    errors: Vec<JobFileError>,
}

/// A short description of a YAML value for "found …".
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string \"{s}\""),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) if t.tag == BIG_NUMBER_TAG => match &t.value {
            Value::String(digits) => format!("the number {digits}"),
            _ => "a number".into(),
        },
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

/// A YAML document as a [`Value`], except that integers beyond 64 bits are kept (as their
/// digits, tagged [`BIG_NUMBER_TAG`]) rather than failing the whole document, so that
/// `parallelism: 99999999999999999999` is one error about one field.
struct Document(Value);

impl<'de> serde::Deserialize<'de> for Document {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocumentVisitor).map(Document)
    }
}

struct DocumentVisitor;

impl<'de> serde::de::Visitor<'de> for DocumentVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(big_number(v.to_string()))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(big_number(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(DocumentVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Document(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Sequence(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Mapping::new();
        while let Some(Document(k)) = map.next_key()? {
            let Document(v) = map.next_value()?;
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate key {}",
                    describe(&k)
                )));
            }
            out.insert(k, v);
        }
        Ok(Value::Mapping(out))
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        use serde::de::VariantAccess as _;
        let (tag, variant): (String, _) = data.variant()?;
        let Document(value) = variant.newtype_variant()?;
        Ok(Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue {
            tag: serde_yaml_ng::value::Tag::new(tag),
            value,
        })))
    }
}

fn big_number(digits: String) -> Value {
    Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue {
        tag: serde_yaml_ng::value::Tag::new(BIG_NUMBER_TAG),
        value: Value::String(digits),
    }))
}

/// A mapping key as text (ids and fields may be written as numbers or booleans in YAML).
fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The text of a scalar, for the markers' parsers (a bare number means milliseconds).
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn valid_name(s: &str) -> bool {
    valid_id(s)
}

/// The vertex sections, in the order their vertices are added to the graph.
fn section_kinds() -> [(&'static str, VertexKind); 3] {
    VertexKind::ALL.map(|k| (k.section(), k))
}

/// A field's value as written (`null` too), or `None` when the field is absent. Reading one
/// never fails, so that one bad value hides no other problem: each field's reader in
/// [`Parser`] checks it, naming it.
#[derive(Debug, Default)]
struct Written(Option<Value>);

impl Written {
    /// What `read` makes of the value, if the field is written.
    fn read<R>(&self, read: impl FnOnce(&Value) -> Option<R>) -> Option<R> {
        self.0.as_ref().and_then(read)
    }
}

impl<'de> serde::Deserialize<'de> for Written {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Document::deserialize(d).map(|Document(v)| Written(Some(v)))
    }
}

/// The top-level fields ([`TOP_LEVEL_FIELDS`]; keys starting with `x-` are ignored).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct TopLevel {
    name: Written,
    parallelism: Written,
    max_parallelism: Written,
    buffer_timeout: Written,
    channel_capacity: Written,
    chaining: Written,
    e2e_latency_everywhere: Written,
    idle_strategy: Written,
    latency: Written,
    e2e: Written,
    checkpoint: Written,
    stall_timeout: Written,
    web_config_file: Written,
    sources: Written,
    operators: Written,
    sinks: Written,
}

/// The fields of `latency` ([`LATENCY_FIELDS`]).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LatencyFields {
    interval: Written,
    granularity: Written,
    history_size: Written,
    buckets: Written,
}

/// The fields of `e2e` ([`E2E_FIELDS`]).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct E2eFields {
    buckets: Written,
}

/// The fields of `checkpoint` ([`CHECKPOINT_FIELDS`]).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CheckpointFields {
    interval: Written,
    dir: Written,
    retain: Written,
}

/// The fields of a source's `watermarks` ([`WATERMARK_FIELDS`]).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct WatermarkFields {
    max_out_of_orderness: Written,
    interval: Written,
    idleness: Written,
}

/// A vertex's own fields: [`VERTEX_FIELDS`], `exchange` and [`SOURCE_EVENT_TIME_FIELDS`].
/// Every other field is its component's.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct VertexFields {
    #[serde(rename = "type")]
    type_name: Written,
    input: Written,
    parallelism: Written,
    max_parallelism: Written,
    partition: Written,
    exchange: Written,
    timestamp_before_max: Written,
    timestamp_after_max: Written,
    invalid_timestamp: Written,
    watermarks: Written,
}

impl VertexFields {
    /// The event-time fields, which only sources have.
    fn event_time(&self) -> [(&'static str, &Written); 4] {
        [
            ("timestamp_before_max", &self.timestamp_before_max),
            ("timestamp_after_max", &self.timestamp_after_max),
            ("invalid_timestamp", &self.invalid_timestamp),
            ("watermarks", &self.watermarks),
        ]
    }
}

/// The fields of mapping `m` that `T` has, read as `T`, and the other entries, in file order.
fn split<T: DeserializeOwned + Default>(m: &Mapping) -> (T, Vec<(&Value, &Value)>) {
    let names = serde_introspect::<T>();
    let mut known = Mapping::new();
    let mut others = Vec::new();
    for (k, v) in m {
        match key_text(k) {
            Some(key) if names.contains(&key.as_str()) => {
                known.insert(Value::String(key), v.clone());
            }
            _ => others.push((k, v)),
        }
    }
    // Only `T`'s fields, each `Written`, which takes any value: this does not fail.
    let fields = serde_yaml_ng::from_value(Value::Mapping(known)).unwrap_or_else(|e| {
        debug_assert!(false, "reading the known fields of a mapping: {e}");
        T::default()
    });
    (fields, others)
}

/// What a section of vertices is.
const VERTICES: &str = "a mapping of vertex ids to vertices";

/// `field` holds `found` where `expected` is wanted.
fn wrong_type(field: impl Into<String>, expected: &'static str, found: &Value) -> Problem {
    Problem::WrongType {
        field: field.into(),
        expected,
        found: describe(found),
    }
}

/// A mapping (`what`) is wanted, `found` is written.
fn not_a_mapping(what: &'static str, found: &Value) -> Problem {
    let found = describe(found);
    Problem::NotAMapping { what, found }
}

impl Parser {
    /// [`Parser::err`], and `None` for a reader to return.
    fn fail<T>(&mut self, path: &[&str], vertex: Option<VertexRef>, problem: Problem) -> Option<T> {
        self.err(path, vertex, problem);
        None
    }

    fn err(&mut self, path: &[&str], vertex: Option<VertexRef>, problem: Problem) {
        self.errors.push(JobFileError {
            file: self.file.clone(),
            pos: locate(&self.map, path),
            vertex,
            problem,
        });
    }

    fn syntax(&mut self, e: serde_yaml_ng::Error) {
        // A key written twice in one mapping fails the YAML parser: the source map says which
        // and where (both places), without reading the parser's message.
        let duplicates = self.map.duplicates();
        if !duplicates.is_empty() {
            for (path, first, second) in duplicates {
                let section = section_kinds()
                    .into_iter()
                    .find(|(s, _)| *s == path[0])
                    .map(|s| s.1);
                let key = path.last().cloned().unwrap_or_default();
                let (problem, vertex) = match section {
                    Some(kind) if path.len() == 2 => (
                        Problem::DuplicateId {
                            id: key,
                            first_kind: kind.as_str(),
                            first_line: first.line,
                        },
                        None,
                    ),
                    _ => (
                        Problem::DuplicateKey {
                            key,
                            first_line: first.line,
                        },
                        section.filter(|_| path.len() >= 3).map(|kind| VertexRef {
                            kind,
                            id: path[1].clone(),
                        }),
                    ),
                };
                self.errors.push(JobFileError {
                    file: self.file.clone(),
                    pos: Some(second),
                    vertex,
                    problem,
                });
            }
            return;
        }
        let pos = e.location().map(|l| Pos {
            line: l.line(),
            column: l.column(),
        });
        let mut message = e.to_string();
        // The location is ours to print: leave out the parser's own " at line L column C".
        if let Some(l) = e.location() {
            let suffix = format!(" at line {} column {}", l.line(), l.column());
            if let Some(i) = message.find(&suffix) {
                message.replace_range(i..i + suffix.len(), "");
            }
        }
        self.errors.push(JobFileError {
            file: self.file.clone(),
            pos,
            vertex: None,
            problem: Problem::Syntax(message),
        });
    }

    fn parse(&mut self, text: &str) -> Option<JobFile> {
        // Merge keys (`<<: *defaults`) are applied, so shared settings can be written once.
        let root: Value = match serde_yaml_ng::from_str(text).and_then(|Document(mut v)| {
            v.apply_merge()?;
            Ok(v)
        }) {
            Ok(v) => v,
            Err(e) => {
                self.syntax(e);
                return None;
            }
        };
        let root = match root {
            Value::Mapping(m) => m,
            Value::Null => {
                self.err(&[], None, Problem::Empty);
                return None;
            }
            other => {
                let what = "a mapping of fields (name, sources, operators, sinks, …)";
                return self.fail(&[], None, not_a_mapping(what, &other));
            }
        };

        let (top, others) = split::<TopLevel>(&root);
        for (k, _) in others {
            match key_text(k) {
                None => self.err(&[], None, wrong_type("(a key)", "a field name", k)),
                // Extension keys: ignored, so YAML anchors can live there.
                Some(key) if key.starts_with("x-") => {}
                Some(key) => self.unknown_field::<TopLevel>(&[], None, "", &key),
            }
        }
        let name = top.name.read(|v| self.name(v));
        if top.name.0.is_none() {
            self.err(
                &[],
                None,
                Problem::MissingField {
                    field: "name",
                    expected: "the job's name (letters, digits, '.', '_' or '-')".into(),
                },
            );
        }
        let parallelism = (top.parallelism).read(|v| self.parallelism(&["parallelism"], None, v));
        let max_parallelism =
            (top.max_parallelism).read(|v| self.max_parallelism(&["max_parallelism"], None, v));
        let buffer_timeout =
            (top.buffer_timeout).read(|v| self.duration(&["buffer_timeout"], None, v));
        let channel_capacity = top.channel_capacity.read(|v| self.channel_capacity(v));
        let chaining = top.chaining.read(|v| self.boolean("chaining", v));
        let e2e_latency_everywhere =
            (top.e2e_latency_everywhere).read(|v| self.boolean("e2e_latency_everywhere", v));
        let idle_strategy = top.idle_strategy.read(|v| self.idle_strategy(v));
        let latency = top.latency.read(|v| self.latency(v)).unwrap_or_default();
        let e2e = top
            .e2e
            .read(|v| self.section::<E2eFields>("e2e", "a mapping with buckets", v));
        let e2e_buckets =
            e2e.and_then(|e| e.buckets.read(|v| self.buckets(&["e2e", "buckets"], v)));
        let checkpoint = (top.checkpoint)
            .read(|v| self.section::<CheckpointFields>("checkpoint", "a mapping with interval", v));
        let checkpoint_interval = checkpoint.as_ref().and_then(|c| {
            c.interval
                .read(|v| self.duration(&["checkpoint", "interval"], None, v))
        });
        let checkpoint_dir = checkpoint.as_ref().and_then(|c| {
            c.dir.read(|v| match v {
                Value::String(s) if !s.trim().is_empty() => Some(PathBuf::from(s)),
                other => {
                    let problem = wrong_type("dir", "a directory path as a string", other);
                    self.fail(&["checkpoint", "dir"], None, problem)
                }
            })
        });
        let checkpoint_retain = checkpoint.as_ref().and_then(|c| {
            c.retain.read(|v| match v.as_u64() {
                Some(n @ 1..=1000) => Some(n as usize),
                _ => {
                    let expected = "a whole number of checkpoints from 1 to 1000";
                    self.fail(
                        &["checkpoint", "retain"],
                        None,
                        wrong_type("retain", expected, v),
                    )
                }
            })
        });
        let stall_timeout =
            (top.stall_timeout).read(|v| self.duration(&["stall_timeout"], None, v));
        let web_config_file = top.web_config_file.read(|v| match v {
            Value::String(s) if !s.trim().is_empty() => Some(PathBuf::from(s)),
            other => {
                let problem = wrong_type("web_config_file", "a file path as a string", other);
                self.fail(&["web_config_file"], None, problem)
            }
        });

        let mut vertices = Vec::new();
        let mut seen: HashMap<String, (VertexKind, usize)> = HashMap::new();
        for (section, kind) in section_kinds() {
            let written = match section {
                "sources" => &top.sources,
                "operators" => &top.operators,
                _ => &top.sinks,
            };
            let Some(m) = written.read(|v| self.mapping(section, VERTICES, v).cloned()) else {
                continue;
            };
            for (k, v) in &m {
                let Some(id) = key_text(k) else {
                    let problem = wrong_type("(a vertex id)", "a vertex id", k);
                    self.err(&[section], None, problem);
                    continue;
                };
                let vref = VertexRef {
                    kind,
                    id: id.clone(),
                };
                if !valid_name(&id) {
                    self.err(&[section, &id], Some(vref), Problem::InvalidId(id.clone()));
                    continue;
                }
                let line = self.map.find(&[section, &id]).map_or(0, |p| p.line);
                if let Some((first_kind, first_line)) = seen.get(&id) {
                    self.err(
                        &[section, &id],
                        Some(vref),
                        Problem::DuplicateId {
                            id: id.clone(),
                            first_kind: first_kind.as_str(),
                            first_line: *first_line,
                        },
                    );
                    continue;
                }
                seen.insert(id.clone(), (kind, line));
                if let Some(vertex) = self.vertex(section, vref, v) {
                    vertices.push(vertex);
                }
            }
        }
        Some(JobFile {
            file: self.file.clone(),
            dir: PathBuf::from("."),
            name: name.unwrap_or_default(),
            parallelism,
            max_parallelism,
            buffer_timeout,
            channel_capacity,
            chaining,
            e2e_latency_everywhere,
            idle_strategy,
            checkpoint_interval,
            checkpoint_dir,
            checkpoint_retain,
            stall_timeout,
            web_config_file,
            latency,
            e2e_buckets,
            vertices,
            source_map: std::mem::take(&mut self.map),
            problems: Vec::new(),
        })
    }

    /// An unknown field `key` of the mapping at `path` (of `T`'s fields), with the closest
    /// known one; `prefix` goes before its name in the message (`watermarks.`).
    fn unknown_field<'de, T: serde::Deserialize<'de>>(
        &mut self,
        path: &[&str],
        vertex: Option<&VertexRef>,
        prefix: &str,
        key: &str,
    ) {
        let expected = serde_introspect::<T>();
        let mut at = path.to_vec();
        at.push(key);
        self.err(
            &at,
            vertex.cloned(),
            Problem::UnknownField {
                field: format!("{prefix}{key}"),
                expected: expected.iter().map(|s| s.to_string()).collect(),
                suggestion: did_you_mean(key, expected.iter().copied()),
            },
        );
    }

    /// The mapping `m` at `path` as `T`, each field it does not have reported as unknown.
    fn fields<T: DeserializeOwned + Default>(
        &mut self,
        path: &[&str],
        vertex: Option<&VertexRef>,
        prefix: &str,
        m: &Mapping,
    ) -> T {
        let (fields, others) = split::<T>(m);
        for (k, _) in others {
            let key = key_text(k).unwrap_or_default();
            self.unknown_field::<T>(path, vertex, prefix, &key);
        }
        fields
    }

    /// A top-level section read as `T`: `None` for `null`, and for anything but a mapping (an
    /// error saying it should be `what`).
    fn section<T: DeserializeOwned + Default>(
        &mut self,
        name: &str,
        what: &'static str,
        v: &Value,
    ) -> Option<T> {
        let m = self.mapping(name, what, v)?;
        Some(self.fields(&[name], None, "", m))
    }

    /// The mapping at top-level field `name`: `None` for `null`, and for anything else (an
    /// error saying it should be `what`).
    fn mapping<'v>(&mut self, name: &str, what: &'static str, v: &'v Value) -> Option<&'v Mapping> {
        match v {
            Value::Mapping(m) => Some(m),
            Value::Null => None,
            other => self.fail(&[name], None, not_a_mapping(what, other)),
        }
    }

    fn name(&mut self, v: &Value) -> Option<String> {
        match v {
            Value::String(s) if valid_name(s) => Some(s.clone()),
            Value::String(s) => self.fail(&["name"], None, Problem::InvalidName(s.clone())),
            other => {
                let expected = "the job's name (letters, digits, '.', '_' or '-')";
                self.fail(&["name"], None, wrong_type("name", expected, other))
            }
        }
    }

    fn parallelism(
        &mut self,
        path: &[&str],
        vertex: Option<VertexRef>,
        v: &Value,
    ) -> Option<NonZeroUsize> {
        let field = path.last().copied().unwrap_or("parallelism").to_string();
        let error = match (v, v.as_u64()) {
            (Value::Tagged(t), _) if t.tag == BIG_NUMBER_TAG => {
                let number = describe(v).trim_start_matches("the number ").to_string();
                let error = ParallelismError::TooHigh(u64::MAX).to_string();
                error.replacen(&u64::MAX.to_string(), &number, 1)
            }
            (_, Some(n)) => match check_parallelism(n) {
                Ok(n) => return NonZeroUsize::new(n),
                Err(e) => e.to_string(),
            },
            (_, None) => {
                let problem = wrong_type(field, "a whole number of at least 1", v);
                return self.fail(path, vertex, problem);
            }
        };
        self.fail(path, vertex, Problem::Parallelism { field, error })
    }

    /// `max_parallelism`: the number of key groups, 1 to 32768 (checked against the vertex's
    /// parallelism when the graph is built).
    fn max_parallelism(
        &mut self,
        path: &[&str],
        vertex: Option<VertexRef>,
        v: &Value,
    ) -> Option<u32> {
        let max = tidemark_runtime::key_group::MAX_KEY_GROUPS;
        match v.as_u64() {
            Some(n) if (1..=max as u64).contains(&n) => Some(n as u32),
            _ => {
                debug_assert_eq!(max, 32_768);
                let expected = "a whole number of key groups from 1 to 32768";
                self.fail(path, vertex, wrong_type("max_parallelism", expected, v))
            }
        }
    }

    /// `channel_capacity`: a whole number of batches within the bounds `--channel-capacity`
    /// takes.
    fn channel_capacity(&mut self, v: &Value) -> Option<usize> {
        let (path, field) = (["channel_capacity"], "channel_capacity");
        let text = match v {
            Value::Number(n) => n.to_string(),
            // Too large for 64 bits: kept as its digits, and out of range all the same.
            Value::Tagged(t) if t.tag == BIG_NUMBER_TAG => {
                describe(v).trim_start_matches("the number ").to_string()
            }
            other => {
                let expected = "a whole number of batches from 1 to 4096";
                return self.fail(&path, None, wrong_type(field, expected, other));
            }
        };
        crate::args::parse_channel_capacity(&text)
            .map_err(|message| {
                let field = field.into();
                self.err(&path, None, Problem::Invalid { field, message })
            })
            .ok()
    }

    /// `idle_strategy`: `park` or `spin`.
    fn idle_strategy(&mut self, v: &Value) -> Option<IdleStrategy> {
        let field = "idle_strategy";
        let Value::String(text) = v else {
            return self.fail(&[field], None, wrong_type(field, "park or spin", v));
        };
        text.parse()
            .map_err(|message| {
                let problem = Problem::Invalid {
                    field: field.into(),
                    message,
                };
                self.err(&[field], None, problem)
            })
            .ok()
    }

    fn boolean(&mut self, field: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => self.fail(&[field], None, wrong_type(field, "true or false", other)),
        }
    }

    fn duration(
        &mut self,
        path: &[&str],
        vertex: Option<VertexRef>,
        v: &Value,
    ) -> Option<Duration> {
        self.duration_named(path, vertex, path.join("."), v)
    }

    /// A duration whose field is called `field` in messages.
    fn duration_named(
        &mut self,
        path: &[&str],
        vertex: Option<VertexRef>,
        field: String,
        v: &Value,
    ) -> Option<Duration> {
        let Some(text) = scalar_text(v) else {
            let expected = "a duration like 200ms, 1s, 5us (a bare number means milliseconds)";
            return self.fail(path, vertex, wrong_type(field, expected, v));
        };
        parse_duration(&text)
            .map_err(|error| self.err(path, vertex, Problem::Setting { field, error }))
            .ok()
    }

    /// A list of durations, ascending, as histogram bucket bounds (`latency.buckets`,
    /// `e2e.buckets`).
    fn buckets(&mut self, path: &[&str], v: &Value) -> Option<Buckets> {
        let field = path.join(".");
        let Value::Sequence(items) = v else {
            let expected = "a list of durations in ascending order, like [1ms, 10ms, 100ms, 1s]";
            return self.fail(path, None, wrong_type(field, expected, v));
        };
        let mut bounds = Vec::with_capacity(items.len());
        for item in items {
            bounds.push(self.duration_named(path, None, field.clone(), item)?);
        }
        Buckets::new(&bounds)
            .map_err(|e| {
                let error = ConfigError::from(e);
                self.err(path, None, Problem::Setting { field, error })
            })
            .ok()
    }

    fn latency(&mut self, v: &Value) -> Option<LatencySection> {
        let what = "a mapping with interval, granularity, history_size";
        let l = self.section::<LatencyFields>("latency", what, v)?;
        Some(LatencySection {
            interval: (l.interval).read(|v| self.duration(&["latency", "interval"], None, v)),
            granularity: l.granularity.read(|v| self.granularity(v)),
            history_size: l.history_size.read(|v| self.history_size(v)),
            buckets: l.buckets.read(|v| self.buckets(&["latency", "buckets"], v)),
        })
    }

    fn granularity(&mut self, v: &Value) -> Option<Granularity> {
        let (path, field) = (
            ["latency", "granularity"],
            "latency.granularity".to_string(),
        );
        let problem = match v {
            Value::String(s) => match s.parse::<Granularity>() {
                Ok(g) => return Some(g),
                Err(error) => Problem::Setting { field, error },
            },
            other => wrong_type(field, "one of single, operator, subtask", other),
        };
        self.fail(&path, None, problem)
    }

    fn history_size(&mut self, v: &Value) -> Option<NonZeroUsize> {
        let text = scalar_text(v).unwrap_or_else(|| describe(v));
        parse_history_size(&text)
            .map_err(|error| {
                let field = "latency.history_size".into();
                let problem = Problem::Setting { field, error };
                self.err(&["latency", "history_size"], None, problem)
            })
            .ok()
    }

    /// A source's `invalid_timestamp`.
    fn invalid_timestamp(
        &mut self,
        path: &[&str],
        vref: &VertexRef,
        v: &Value,
    ) -> Option<InvalidTimestampPolicy> {
        let field = "invalid_timestamp".to_string();
        let problem = match v {
            Value::String(s) => match s.parse::<InvalidTimestampPolicy>() {
                Ok(p) => return Some(p),
                Err(_) => Problem::UnknownValue {
                    field,
                    value: s.clone(),
                    expected: INVALID_TIMESTAMP_POLICIES.join(", "),
                    suggestion: did_you_mean(s, INVALID_TIMESTAMP_POLICIES),
                },
            },
            other => wrong_type(field, "one of drop, clamp, fail", other),
        };
        self.fail(path, Some(vref.clone()), problem)
    }

    /// A source's `watermarks`: a mapping (empty or `null` for the defaults) or `true` turns
    /// them on, `false` leaves them off. `Some(None)` is off.
    fn watermarks(
        &mut self,
        path: &[&str],
        vref: &VertexRef,
        v: &Value,
    ) -> Option<Option<WatermarkStrategy>> {
        let mut strategy = WatermarkStrategy::default();
        let m = match v {
            Value::Mapping(m) => m,
            Value::Null | Value::Bool(true) => return Some(Some(strategy)),
            Value::Bool(false) => return Some(None),
            other => {
                let expected = "a mapping with max_out_of_orderness, interval, idleness (empty \
                                for the defaults), or true or false";
                return self.fail(
                    path,
                    Some(vref.clone()),
                    wrong_type("watermarks", expected, other),
                );
            }
        };
        let before = self.errors.len();
        let w: WatermarkFields = self.fields(path, Some(vref), "watermarks.", m);
        let mut duration = |key: &str, written: &Written| {
            let at = [path, &[key]].concat();
            let field = format!("watermarks.{key}");
            written.read(|v| self.duration_named(&at, Some(vref.clone()), field, v))
        };
        if let Some(d) = duration("max_out_of_orderness", &w.max_out_of_orderness) {
            strategy.max_out_of_orderness = d;
        }
        if let Some(d) = duration("interval", &w.interval) {
            strategy.interval = d;
        }
        match duration("idleness", &w.idleness) {
            Some(d) if d.is_zero() => self.err(
                &[path, &["idleness"]].concat(),
                Some(vref.clone()),
                Problem::Invalid {
                    field: "watermarks.idleness".into(),
                    message: "must be more than 0 (leave it out to never mark the source idle)"
                        .into(),
                },
            ),
            Some(d) => strategy.idleness = Some(d),
            None => {}
        }
        (self.errors.len() == before).then_some(Some(strategy))
    }

    /// One vertex: its own fields ([`VertexFields`]) are checked here, every other field is
    /// kept for its component (checked when the graph is built).
    fn vertex(&mut self, section: &'static str, vref: VertexRef, v: &Value) -> Option<VertexSpec> {
        let (kind, id) = (vref.kind, vref.id.as_str());
        let Value::Mapping(m) = v else {
            let problem = not_a_mapping("a mapping with at least \"type\"", v);
            return self.fail(&[section, id], Some(vref.clone()), problem);
        };
        let (fields, others) = split::<VertexFields>(m);
        let mut config = serde_json::Map::new();
        for (k, v) in others {
            let Some(key) = key_text(k) else {
                let problem = wrong_type("(a key)", "a field name", k);
                self.err(&[section, id], Some(vref.clone()), problem);
                continue;
            };
            match to_json(v) {
                Ok(j) => {
                    config.insert(key, j);
                }
                Err(expected) => {
                    let problem = wrong_type(&key, expected, v);
                    self.err(&[section, id, &key], Some(vref.clone()), problem)
                }
            }
        }
        let at = |field: &'static str| [section, id, field];
        let vertex = Some(vref.clone());
        let source = kind == VertexKind::Source;
        let type_name = fields.type_name.read(|v| match v {
            Value::String(s) => Some(s.clone()),
            other => {
                let problem = wrong_type("type", "the component type as a string", other);
                self.fail(&at("type"), vertex.clone(), problem)
            }
        });
        let inputs = match &fields.input.0 {
            Some(_) if source => {
                self.err(&at("input"), vertex.clone(), Problem::InputOnSource);
                Vec::new()
            }
            Some(v) => self.inputs(&at("input"), &vref, v),
            None => Vec::new(),
        };
        let parallelism =
            (fields.parallelism).read(|v| self.parallelism(&at("parallelism"), vertex.clone(), v));
        let max_parallelism = (fields.max_parallelism)
            .read(|v| self.max_parallelism(&at("max_parallelism"), vertex.clone(), v));
        let partition = fields.partition.read(|v| match source {
            true => self.fail(&at("partition"), vertex.clone(), Problem::PartitionOnSource),
            false => self.partition(&at("partition"), &vref, v),
        });
        let exchange = fields.exchange.read(|v| {
            let problem = match to_json(v) {
                _ if source => Problem::Invalid {
                    field: "exchange".into(),
                    message: "an exchange is on an input edge: set it on the operator or sink \
                              that reads this source"
                        .into(),
                },
                Ok(j) => return Some(j),
                Err(expected) => wrong_type("exchange", expected, v),
            };
            self.fail(&at("exchange"), vertex.clone(), problem)
        });
        let source_options = match source {
            true => self.source_options(section, &vref, &fields),
            false => {
                for (field, written) in fields.event_time() {
                    if written.0.is_some() {
                        let problem = Problem::SourceOnlyField(field.to_string());
                        self.err(&at(field), vertex.clone(), problem);
                    }
                }
                SourceOptions::default()
            }
        };
        if !source && fields.input.0.is_none() {
            self.err(&[section, id], vertex, Problem::MissingInput(kind.as_str()));
        }
        Some(VertexSpec {
            id: id.to_string(),
            kind,
            type_name: type_name.unwrap_or_default(),
            inputs,
            parallelism,
            max_parallelism,
            partition,
            exchange,
            source_options,
            config,
        })
    }

    /// An operator's or sink's `input`: an id or a non-empty list of ids.
    fn inputs(&mut self, path: &[&str], vref: &VertexRef, v: &Value) -> Vec<String> {
        let (items, expected) = match v {
            Value::Sequence(items) if !items.is_empty() => (&items[..], "a vertex id"),
            other => (
                std::slice::from_ref(other),
                "a vertex id or a non-empty list of vertex ids",
            ),
        };
        let mut inputs = Vec::new();
        for item in items {
            match key_text(item) {
                Some(s) => inputs.push(s),
                None => self.err(
                    path,
                    Some(vref.clone()),
                    wrong_type("input", expected, item),
                ),
            }
        }
        inputs
    }

    fn partition(&mut self, path: &[&str], vref: &VertexRef, v: &Value) -> Option<Partitioning> {
        let problem = match v {
            Value::String(s) => match s.parse::<Partitioning>() {
                Ok(p) => return Some(p),
                Err(_) => Problem::UnknownPartition {
                    value: s.clone(),
                    suggestion: did_you_mean(s, Partitioning::ALL.iter().map(|p| p.as_str())),
                },
            },
            other => wrong_type(
                "partition",
                "one of forward, rebalance, hash, broadcast",
                other,
            ),
        };
        self.fail(path, Some(vref.clone()), problem)
    }

    /// A source's timestamp check and watermarks ([`SOURCE_EVENT_TIME_FIELDS`]).
    fn source_options(
        &mut self,
        section: &'static str,
        vref: &VertexRef,
        fields: &VertexFields,
    ) -> SourceOptions {
        let id = vref.id.as_str();
        let mut duration = |key: &'static str, written: &Written| {
            written.read(|v| {
                self.duration_named(&[section, id, key], Some(vref.clone()), key.into(), v)
            })
        };
        let before_max = duration("timestamp_before_max", &fields.timestamp_before_max);
        let after_max = duration("timestamp_after_max", &fields.timestamp_after_max);
        let path = [section, id, "invalid_timestamp"];
        let on_invalid =
            (fields.invalid_timestamp).read(|v| self.invalid_timestamp(&path, vref, v));
        let path = [section, id, "watermarks"];
        let watermarks = fields.watermarks.read(|v| self.watermarks(&path, vref, v));
        let bound_written =
            fields.timestamp_before_max.0.is_some() || fields.timestamp_after_max.0.is_some();
        if on_invalid.is_some() && !bound_written {
            self.err(
                &[section, id, "invalid_timestamp"],
                Some(vref.clone()),
                Problem::Invalid {
                    field: "invalid_timestamp".into(),
                    message: "has no effect without timestamp_before_max or \
                              timestamp_after_max: set a bound, or remove it"
                        .into(),
                },
            );
        }
        let bounded = before_max.is_some() || after_max.is_some();
        SourceOptions {
            timestamp_check: bounded.then(|| TimestampCheck {
                before_max,
                after_max,
                on_invalid: on_invalid.unwrap_or_default(),
            }),
            watermarks: watermarks.flatten(),
        }
    }
}

/// Converts a YAML value of a component's configuration to JSON, or says what is expected.
fn to_json(v: &Value) -> Result<serde_json::Value, &'static str> {
    use serde_json::Value as J;
    Ok(match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                J::from(u)
            } else if let Some(i) = n.as_i64() {
                J::from(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                J::Number(serde_json::Number::from_f64(f).ok_or("a finite number")?)
            }
        }
        Value::String(s) => J::String(s.clone()),
        Value::Sequence(items) => J::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Mapping(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let k = key_text(k).ok_or("a mapping with text keys")?;
                out.insert(k, to_json(v)?);
            }
            J::Object(out)
        }
        Value::Tagged(_) => return Err("a plain value (YAML tags are not supported)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses and returns the errors' display lines.
    pub(crate) fn errors(text: &str) -> Vec<String> {
        match JobFile::parse(text, "job.yaml") {
            Ok(job) => job.problems.iter().map(|e| e.to_string()).collect(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    fn one_error(text: &str) -> String {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        errs.into_iter().next().unwrap()
    }

    const GOOD: &str = "\
name: clicks-per-user
parallelism: 2
buffer_timeout: 5ms
latency:
  interval: 200
  granularity: subtask
  history_size: 64
sources:
  clicks:
    type: generator
    parallelism: 1
    rate: 50000
operators:
  work:
    type: map
    input: clicks
    cost: 2us
  both:
    type: map
    input: [clicks, work]
    partition: hash
sinks:
  out:
    type: discard
    input: both
";

    #[test]
    fn the_public_field_lists_are_the_derived_fields() {
        assert_eq!(serde_introspect::<TopLevel>(), TOP_LEVEL_FIELDS);
        assert_eq!(serde_introspect::<LatencyFields>(), LATENCY_FIELDS);
        assert_eq!(serde_introspect::<E2eFields>(), E2E_FIELDS);
        assert_eq!(serde_introspect::<CheckpointFields>(), CHECKPOINT_FIELDS);
        assert_eq!(serde_introspect::<WatermarkFields>(), WATERMARK_FIELDS);
        let vertex: Vec<&str> = VERTEX_FIELDS
            .into_iter()
            .chain(["exchange"])
            .chain(SOURCE_EVENT_TIME_FIELDS)
            .collect();
        assert_eq!(serde_introspect::<VertexFields>(), vertex);
    }

    #[test]
    fn flow_style_fields_are_located_at_their_column() {
        let errs = errors(
            "name: x\nsources:\n  gen: {type: generator, parallelism: 0, watermarks: {intervall: 1s}}\n",
        );
        assert_eq!(
            errs,
            [
                "job.yaml:3:26: source \"gen\": field \"parallelism\": parallelism must be at \
                 least 1, found 0",
                "job.yaml:3:55: source \"gen\": unknown field \"watermarks.intervall\", expected \
                 one of max_out_of_orderness, interval, idleness; did you mean \"interval\"?",
            ]
        );
    }

    #[test]
    fn every_vertex_is_read_and_every_problem_reported() {
        let errs = errors(
            "name: x
chaining: maybe
sources:
  a: {type: generator, partition: hash}
  b:
    type: [generator]
operators:
  c: {type: map, input: [a, [b]], timestamp_after_max: 1s}
sinks:
  d: {type: discard}
  e: {type: discard, input: c, parallelism: lots}
",
        );
        assert_eq!(
            errs,
            [
                "job.yaml:2:1: field \"chaining\": expected true or false, found the string \"maybe\"",
                "job.yaml:4:24: source \"a\": a source has no input edge to partition: remove \"partition\"",
                "job.yaml:6:5: source \"b\": field \"type\": expected the component type as a string, found a list",
                "job.yaml:8:18: operator \"c\": field \"input\": expected a vertex id, found a list",
                "job.yaml:8:35: operator \"c\": field \"timestamp_after_max\" belongs on a source: \
                 timestamps are checked and watermarks made where records enter the job; set it on \
                 the sources this vertex reads from",
                "job.yaml:10:3: sink \"d\": missing field \"input\": every sink needs the id (or a \
                 list of ids) of the vertices it reads from",
                "job.yaml:11:32: sink \"e\": field \"parallelism\": expected a whole number of at \
                 least 1, found the string \"lots\"",
            ]
        );
    }

    #[test]
    fn parses_a_full_job() {
        let job = JobFile::parse(GOOD, "job.yaml").unwrap();
        assert_eq!(job.name, "clicks-per-user");
        assert_eq!(job.parallelism, NonZeroUsize::new(2));
        assert_eq!(job.buffer_timeout, Some(Duration::from_millis(5)));
        assert_eq!(
            job.latency,
            LatencySection {
                interval: Some(Duration::from_millis(200)),
                granularity: Some(Granularity::Subtask),
                history_size: NonZeroUsize::new(64),
                buckets: None,
            }
        );
        assert_eq!(job.e2e_buckets, None);
        let ids: Vec<_> = job.vertices.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["clicks", "work", "both", "out"]);
        let clicks = job.vertex("clicks").unwrap();
        assert_eq!(clicks.kind, VertexKind::Source);
        assert_eq!(clicks.parallelism, NonZeroUsize::new(1));
        assert_eq!(clicks.config["rate"], serde_json::json!(50000));
        assert!(!clicks.config.contains_key("type"));
        let work = job.vertex("work").unwrap();
        assert_eq!(work.inputs, ["clicks"]);
        assert_eq!(work.config["cost"], serde_json::json!("2us"));
        let both = job.vertex("both").unwrap();
        assert_eq!(both.inputs, ["clicks", "work"]);
        assert_eq!(both.partition, Some(Partitioning::Hash));
        assert_eq!(job.pos(&["operators", "work", "cost"]).unwrap().line, 17);
    }

    #[test]
    fn bucket_lists_are_durations_in_ascending_order() {
        let job = JobFile::parse(
            "name: x\nlatency:\n  buckets: [1us, 250us, 1ms, 1h]\ne2e:\n  buckets: [1ms, 1s, 24h]\n",
            "job.yaml",
        )
        .unwrap();
        assert_eq!(
            job.latency.buckets.unwrap().seconds(),
            &[0.000001, 0.00025, 0.001, 3600.0]
        );
        assert_eq!(job.e2e_buckets.unwrap().seconds(), &[0.001, 1.0, 86400.0]);
        // Every problem, each at its line.
        let errs = errors(
            "name: x\nlatency:\n  buckets: [1s, 1ms]\ne2e:\n  buckets: 5s\n  bukets: [1s]\n",
        );
        assert_eq!(
            errs,
            [
                "job.yaml:3:3: field \"latency.buckets\": invalid buckets: bucket 2 (1ms) is not \
                 larger than the one before it (1s); expected ascending durations",
                "job.yaml:5:3: field \"e2e.buckets\": expected a list of durations in ascending \
                 order, like [1ms, 10ms, 100ms, 1s], found the string \"5s\"",
                "job.yaml:6:3: unknown field \"bukets\", expected one of buckets; did you mean \"buckets\"?",
            ]
        );
        let e = one_error("name: x\ne2e:\n  buckets: [1s, soon]\n");
        assert!(
            e.starts_with("job.yaml:3:3: field \"e2e.buckets\": invalid duration \"soon\""),
            "{e}"
        );
        let e = one_error("name: x\nlatency:\n  buckets: []\n");
        assert!(e.contains("the bucket list is empty"), "{e}");
    }

    #[test]
    fn unknown_top_level_field_suggests() {
        let e = one_error("name: x\nparalelism: 2\nsources: {}\n");
        assert_eq!(
            e,
            "job.yaml:2:1: unknown field \"paralelism\", expected one of name, parallelism, \
             max_parallelism, buffer_timeout, channel_capacity, chaining, e2e_latency_everywhere, idle_strategy, latency, e2e, checkpoint, stall_timeout, \
             web_config_file, sources, operators, sinks; did you mean \"parallelism\"?"
        );
    }

    #[test]
    fn unknown_latency_field_suggests() {
        let e = one_error("name: x\nlatency:\n  intervall: 1s\n");
        assert!(
            e.starts_with("job.yaml:3:3: unknown field \"intervall\""),
            "{e}"
        );
        assert!(e.ends_with("did you mean \"interval\"?"), "{e}");
    }

    #[test]
    fn missing_name() {
        let e = one_error("sources:\n  a:\n    type: generator\n");
        assert!(e.contains("missing field \"name\""), "{e}");
    }

    #[test]
    fn invalid_name() {
        let e = one_error("name: my job\n");
        assert_eq!(
            e,
            "job.yaml:1:1: invalid job name \"my job\": expected letters, digits, '.', '_' or '-'"
        );
    }

    #[test]
    fn zero_parallelism_names_vertex_and_line() {
        let e = one_error("name: x\nsources:\n  gen:\n    type: generator\n    parallelism: 0\n");
        assert_eq!(
            e,
            "job.yaml:5:5: source \"gen\": field \"parallelism\": parallelism must be at least 1, found 0"
        );
        let e = one_error("name: x\nparallelism: 0\n");
        assert!(e.starts_with("job.yaml:2:1: field \"parallelism\""), "{e}");
    }

    #[test]
    fn idle_strategy_is_park_or_spin() {
        let job = JobFile::parse("name: x\nidle_strategy: spin\n", "job.yaml").unwrap();
        assert_eq!(job.idle_strategy, Some(IdleStrategy::Spin));
        assert!(job.problems.is_empty(), "{:?}", job.problems);
        let job = JobFile::parse("name: x\nidle_strategy: park\n", "job.yaml").unwrap();
        assert_eq!(job.idle_strategy, Some(IdleStrategy::Park));
        let job = JobFile::parse("name: x\n", "job.yaml").unwrap();
        assert_eq!(job.idle_strategy, None);
        let e = one_error("name: x\nidle_strategy: busy\n");
        assert_eq!(
            e,
            "job.yaml:2:1: field \"idle_strategy\": invalid idle strategy \"busy\": \
             expected park or spin"
        );
        let e = one_error("name: x\nidle_strategy: 3\n");
        assert!(
            e.starts_with("job.yaml:2:1: field \"idle_strategy\": expected park or spin"),
            "{e}"
        );
    }

    #[test]
    fn channel_capacity_is_a_whole_number_from_1_to_4096() {
        let job = JobFile::parse("name: x\nchannel_capacity: 32\n", "job.yaml").unwrap();
        assert_eq!(job.channel_capacity, Some(32));
        assert!(job.problems.is_empty(), "{:?}", job.problems);
        let job = JobFile::parse("name: x\n", "job.yaml").unwrap();
        assert_eq!(job.channel_capacity, None);
        for (value, found) in [
            ("0", "\"0\""),
            ("4097", "\"4097\""),
            ("-3", "\"-3\""),
            ("2.5", "\"2.5\""),
            ("99999999999999999999", "\"99999999999999999999\""),
        ] {
            let e = one_error(&format!("name: x\nchannel_capacity: {value}\n"));
            assert_eq!(
                e,
                format!(
                    "job.yaml:2:1: field \"channel_capacity\": invalid channel capacity {found}: \
                     expected a whole number of batches from 1 to 4096"
                )
            );
        }
        let e = one_error("name: x\nchannel_capacity: deep\n");
        assert!(
            e.starts_with("job.yaml:2:1: field \"channel_capacity\": expected a whole number of batches from 1 to 4096"),
            "{e}"
        );
    }

    #[test]
    fn bad_durations_use_the_markers_message() {
        let e = one_error("name: x\nbuffer_timeout: 5 days\n");
        assert!(
            e.starts_with("job.yaml:2:1: field \"buffer_timeout\": invalid duration \"5 days\""),
            "{e}"
        );
        let e = one_error("name: x\nlatency:\n  interval: -5ms\n");
        assert!(
            e.contains("job.yaml:3:3: field \"latency.interval\""),
            "{e}"
        );
        assert!(e.contains("cannot be negative"), "{e}");
    }

    #[test]
    fn bad_granularity_and_history() {
        let e = one_error("name: x\nlatency:\n  granularity: opertor\n");
        assert_eq!(
            e,
            "job.yaml:3:3: field \"latency.granularity\": unknown latency granularity \
             \"opertor\": expected one of single, operator, subtask"
        );
        let e = one_error("name: x\nlatency:\n  history_size: 0\n");
        assert!(
            e.starts_with(
                "job.yaml:3:3: field \"latency.history_size\": invalid latency history size \"0\""
            ),
            "{e}"
        );
    }

    #[test]
    fn input_rules() {
        let e = one_error("name: x\nsources:\n  gen:\n    type: generator\n    input: other\n");
        assert!(
            e.starts_with("job.yaml:5:5: source \"gen\": a source reads no input"),
            "{e}"
        );
        let e = one_error("name: x\nsinks:\n  out:\n    type: discard\n");
        assert_eq!(
            e,
            "job.yaml:3:3: sink \"out\": missing field \"input\": every sink needs the id (or a \
             list of ids) of the vertices it reads from"
        );
    }

    #[test]
    fn unknown_partition_suggests() {
        let e = one_error(
            "name: x\noperators:\n  w:\n    type: map\n    input: a\n    partition: hsah\n",
        );
        assert!(
            e.starts_with("job.yaml:6:5: operator \"w\": unknown partition \"hsah\""),
            "{e}"
        );
        assert!(e.ends_with("did you mean \"hash\"?"), "{e}");
    }

    #[test]
    fn duplicate_ids_across_sections() {
        let e = one_error(
            "name: x\nsources:\n  a:\n    type: generator\noperators:\n  a:\n    type: map\n    input: a\n",
        );
        assert_eq!(
            e,
            "job.yaml:6:3: operator \"a\": duplicate vertex id \"a\": already used by the source \
             at line 3; ids must be unique across sources, operators and sinks"
        );
    }

    #[test]
    fn duplicate_ids_within_a_section() {
        let e =
            one_error("name: x\nsources:\n  a:\n    type: generator\n  a:\n    type: generator\n");
        assert!(
            e.starts_with("job.yaml:5:3: duplicate vertex id \"a\""),
            "{e}"
        );
        assert!(e.contains("at line 3"), "{e}");
    }

    #[test]
    fn duplicate_fields_in_a_vertex() {
        let e =
            one_error("name: x\nsources:\n  a:\n    type: generator\n    rate: 1\n    rate: 2\n");
        assert_eq!(
            e,
            "job.yaml:6:5: source \"a\": duplicate field \"rate\" (first at line 5)"
        );
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let job = JobFile::parse("\u{feff}name: bom\nparalelism: 2\n", "job.yaml").unwrap();
        assert_eq!(job.name, "bom");
        // Line 2 is still line 2, column 1.
        assert!(job.problems[0]
            .to_string()
            .starts_with("job.yaml:2:1: unknown field \"paralelism\""));
    }

    #[test]
    fn merge_keys_apply() {
        let text = "\
name: x
sources:
  a: &gen
    type: generator
    rate: 10
  b:
    <<: *gen
    keys: 5
";
        let job = JobFile::parse(text, "job.yaml").unwrap();
        let b = job.vertex("b").unwrap();
        assert_eq!(b.type_name, "generator");
        assert_eq!(b.config["rate"], serde_json::json!(10));
        assert_eq!(b.config["keys"], serde_json::json!(5));
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let e = one_error("name: x\nsources:\n  a: [\n");
        assert!(e.starts_with("job.yaml:"), "{e}");
        assert!(!e.contains(" at line "), "{e}");
        assert!(e.split(':').nth(1).unwrap().parse::<usize>().is_ok(), "{e}");
    }

    #[test]
    fn empty_and_wrong_shapes() {
        assert!(one_error("").contains("the job file is empty"));
        assert!(one_error("- a\n").contains("expected a mapping of fields"));
        let e = one_error("name: x\nsources:\n  a: 5\n");
        assert!(
            e.starts_with("job.yaml:3:3: source \"a\": expected a mapping"),
            "{e}"
        );
    }

    #[test]
    fn several_errors_are_reported_in_file_order() {
        let errs = errors("name: x\nparalelism: 2\nlatency:\n  interval: soon\n");
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert!(errs[0].starts_with("job.yaml:2:1"));
        assert!(errs[1].starts_with("job.yaml:4:3"));
    }

    const EVENT_TIME: &str = "\
name: et
e2e_latency_everywhere: true
sources:
  gen:
    type: generator
    rate: 100
    timestamp_before_max: 1h
    timestamp_after_max: 2s
    invalid_timestamp: clamp
    watermarks:
      max_out_of_orderness: 500ms
      interval: 50ms
      idleness: 5s
  other:
    type: generator
    timestamp_after_max: 1s
    watermarks:
  third:
    type: generator
    watermarks: {}
  fourth:
    type: generator
    watermarks: false
";

    #[test]
    fn parses_source_event_time_fields() {
        let job = JobFile::parse(EVENT_TIME, "job.yaml").unwrap();
        assert_eq!(job.e2e_latency_everywhere, Some(true));
        let gen = job.vertex("gen").unwrap();
        assert_eq!(
            gen.source_options,
            SourceOptions {
                timestamp_check: Some(TimestampCheck {
                    before_max: Some(Duration::from_secs(3600)),
                    after_max: Some(Duration::from_secs(2)),
                    on_invalid: InvalidTimestampPolicy::Clamp,
                }),
                watermarks: Some(WatermarkStrategy {
                    max_out_of_orderness: Duration::from_millis(500),
                    interval: Duration::from_millis(50),
                    idleness: Some(Duration::from_secs(5)),
                }),
            }
        );
        // Taken off the component's settings.
        assert_eq!(gen.config.keys().collect::<Vec<_>>(), ["rate"]);
        // `invalid_timestamp` defaults to fail once a bound is set; an empty `watermarks:`
        // turns them on with the defaults.
        let other = job.vertex("other").unwrap();
        assert_eq!(
            other.source_options,
            SourceOptions {
                timestamp_check: Some(TimestampCheck {
                    before_max: None,
                    after_max: Some(Duration::from_secs(1)),
                    on_invalid: InvalidTimestampPolicy::Fail,
                }),
                watermarks: Some(WatermarkStrategy::default()),
            }
        );
        assert!(other.config.is_empty());
        let third = job.vertex("third").unwrap();
        assert_eq!(
            third.source_options.watermarks,
            Some(WatermarkStrategy::default())
        );
        assert_eq!(third.source_options.timestamp_check, None);
        assert_eq!(
            job.vertex("fourth").unwrap().source_options,
            SourceOptions::default()
        );
    }

    #[test]
    fn source_event_time_errors_are_located_and_suggest() {
        let e =
            one_error(&EVENT_TIME.replace("invalid_timestamp: clamp", "invalid_timestamp: clmap"));
        assert_eq!(
            e,
            "job.yaml:9:5: source \"gen\": field \"invalid_timestamp\": unknown value \"clmap\", \
             expected one of drop, clamp, fail; did you mean \"clamp\"?"
        );
        let e = one_error(
            &EVENT_TIME.replace("timestamp_before_max: 1h", "timestamp_before_max: 1 day"),
        );
        assert!(
            e.starts_with("job.yaml:7:5: source \"gen\": field \"timestamp_before_max\": invalid duration \"1 day\""),
            "{e}"
        );
        let e = one_error(&EVENT_TIME.replace("      interval: 50ms", "      intervall: 50ms"));
        assert_eq!(
            e,
            "job.yaml:12:7: source \"gen\": unknown field \"watermarks.intervall\", expected one \
             of max_out_of_orderness, interval, idleness; did you mean \"interval\"?"
        );
        let e = one_error(&EVENT_TIME.replace("idleness: 5s", "idleness: -5s"));
        assert!(
            e.starts_with("job.yaml:13:7: source \"gen\": field \"watermarks.idleness\": invalid duration \"-5s\""),
            "{e}"
        );
        let e = one_error(&EVENT_TIME.replace("idleness: 5s", "idleness: 0"));
        assert_eq!(
            e,
            "job.yaml:13:7: source \"gen\": field \"watermarks.idleness\": must be more than 0 \
             (leave it out to never mark the source idle)"
        );
        let e = one_error(&EVENT_TIME.replace("    watermarks: {}", "    watermarks: 200ms"));
        assert!(
            e.starts_with("job.yaml:20:5: source \"third\": field \"watermarks\": expected a mapping with max_out_of_orderness"),
            "{e}"
        );
        let e = one_error(&EVENT_TIME.replace(
            "    timestamp_after_max: 1s\n",
            "    invalid_timestamp: drop\n",
        ));
        assert_eq!(
            e,
            "job.yaml:16:5: source \"other\": field \"invalid_timestamp\": has no effect without \
             timestamp_before_max or timestamp_after_max: set a bound, or remove it"
        );
        let e = one_error(&EVENT_TIME.replace(
            "e2e_latency_everywhere: true",
            "e2e_latency_everywhere: yes please",
        ));
        assert!(
            e.starts_with("job.yaml:2:1: field \"e2e_latency_everywhere\": expected true or false"),
            "{e}"
        );
    }

    #[test]
    fn event_time_fields_belong_on_sources() {
        let text = "\
name: x
sources:
  gen:
    type: generator
operators:
  w:
    type: window
    input: gen
    size: 1s
    aggregate: count
    watermarks:
      max_out_of_orderness: 1s
";
        let e = one_error(text);
        assert_eq!(
            e,
            "job.yaml:11:5: operator \"w\": field \"watermarks\" belongs on a source: timestamps \
             are checked and watermarks made where records enter the job; set it on the sources \
             this vertex reads from"
        );
    }
}
