//! The job file: its model, and parsing it from YAML with errors that name file, line, vertex
//! and what is expected.
//!
//! Parsing checks everything a single field can tell (types, names, durations, parallelism,
//! partitions, `input` presence). What needs the whole graph or the component registry (types,
//! component fields, inputs, cycles) is checked in [`crate::build`], which reports the
//! parse's problems ([`JobFile::problems`]) together with its own, so every error comes out at
//! once, in file order.
//!
//! Serde reads the fields into the structs of [`crate::job_fields`], each field a
//! [`Spanned`] of its type, through [`crate::spanned`]: a value that is not of its field's
//! type is a fault at the field's path, unknown keys are faults of their own, and the rest is
//! still read, so that one mistake hides no other. Here the faults become errors (positions
//! from [`crate::locate`]), the vertex sections are read id by id, each vertex on its own, and
//! the rules that take more than one field are checked.
//!
//! Top-level keys starting with `x-` are ignored, so YAML anchors can live there.

use crate::error::{JobFileError, JobFileErrors, Problem, VertexRef};
use crate::job_fields::{
    fields_of, CheckpointFields, EventTimeFields, JobName, TopLevel, VertexFields, WatermarkFields,
    Watermarks,
};
use crate::locate::{Pos, SourceMap};
use crate::spanned::{read, Fault, FaultKind, Spanned};
use crate::suggest::did_you_mean;
use crate::yaml::{describe, key_text, to_json, Document};
use anyhow::Context as _;
use serde_yaml_ng::{Mapping, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tidemark_markers::{Buckets, Granularity};
use tidemark_runtime::{
    valid_id, IdleStrategy, InvalidTimestampPolicy, Partitioning, SourceOptions, TimestampCheck,
    VertexKind, WatermarkStrategy,
};

/// The fields every vertex has, besides its component's own (and `exchange`), in order.
pub fn vertex_fields() -> &'static [&'static str] {
    fields_of::<VertexFields>()
}

/// The event-time fields every source has, besides its component's own: applied by the
/// runtime to whatever the source emits ([`SourceOptions`]).
pub fn source_event_time_fields() -> &'static [&'static str] {
    fields_of::<EventTimeFields>()
}

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
    /// `checkpoint.max_concurrent`: checkpoints in flight at once.
    pub checkpoint_max_concurrent: Option<u64>,
    /// `checkpoint.min_pause`: the least time from one checkpoint settling to the next.
    pub checkpoint_min_pause: Option<Duration>,
    /// `checkpoint.tolerable_failures`: checkpoints that may fail in a row.
    pub checkpoint_tolerable_failures: Option<u64>,
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

/// The `type` of a join, whose inputs are its `left` and `right`.
const JOIN: &str = "join";
/// A join's input fields, in input order.
pub(crate) const JOIN_SIDES: [&str; 2] = ["left", "right"];

/// One source, operator or sink.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexSpec {
    /// The vertex id (its key in its section).
    pub id: String,
    /// Which section it is in.
    pub kind: VertexKind,
    /// The component type, e.g. `generator`; empty when the file gives none (an error).
    pub type_name: String,
    /// The ids it reads from (empty for sources); a join's `left` then `right`.
    pub inputs: Vec<String>,
    /// The field each input is written in: `input`, or a join's `left` and `right`.
    pub input_fields: &'static [&'static str],
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

    /// `path` as written in the job file, relative to the job file's folder: without the `.`
    /// steps the two add (`./ckpt` beside `job.yaml` is `ckpt`, not `././ckpt`); an absolute
    /// path as it is.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        let joined: PathBuf = self
            .dir
            .join(path)
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect();
        match joined.as_os_str().is_empty() {
            true => PathBuf::from("."),
            false => joined,
        }
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
            faults: RefCell::default(),
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

/// What a section of vertices is.
const VERTICES: &str = "a mapping of vertex ids to vertices";

/// The vertex sections, in the order their vertices are added to the graph.
fn section_kinds() -> [(&'static str, VertexKind); 3] {
    VertexKind::ALL.map(|k| (k.section(), k))
}

/// `field` holds `found` where `expected` is wanted.
fn wrong_type(field: impl Into<String>, expected: &str, found: &Value) -> Problem {
    Problem::WrongType {
        field: field.into(),
        expected: expected.into(),
        found: describe(found),
    }
}

/// A mapping (`what`) is wanted, `found` is written.
fn not_a_mapping(what: &'static str, found: &Value) -> Problem {
    let found = describe(found);
    Problem::NotAMapping { what, found }
}

struct Parser {
    file: String,
    map: SourceMap,
    errors: Vec<JobFileError>,
    /// What serde found wrong with single values ([`crate::spanned`]), made errors at the end.
    faults: RefCell<Vec<Fault>>,
}

impl Parser {
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
        let fields = match &root {
            Value::Mapping(fields) => fields,
            Value::Null => {
                self.err(&[], None, Problem::Empty);
                return None;
            }
            other => {
                let what = "a mapping of fields (name, sources, operators, sinks, …)";
                let problem = not_a_mapping(what, other);
                self.err(&[], None, problem);
                return None;
            }
        };
        let top: TopLevel = read(&root, &[], &self.faults).unwrap_or_default();
        let name = self.name(top.name);
        let latency = top.latency.value.flatten().map(|l| LatencySection {
            interval: l.interval.value.map(|d| d.0),
            granularity: l.granularity.value.map(|g| g.0),
            history_size: l.history_size.value.map(|h| h.0),
            buckets: l.buckets.value.map(|b| b.0),
        });
        let e2e_buckets = top.e2e.value.flatten().and_then(|e| e.buckets.value);
        let checkpoint: CheckpointFields = top.checkpoint.value.flatten().unwrap_or_default();
        let vertices = self.vertices(fields);
        for fault in self.faults.take() {
            self.fault(fault);
        }
        Some(JobFile {
            file: self.file.clone(),
            dir: PathBuf::from("."),
            name: name.unwrap_or_default(),
            parallelism: top.parallelism.value.map(|p| p.0),
            max_parallelism: top.max_parallelism.value.map(|m| m.0),
            buffer_timeout: top.buffer_timeout.value.map(|d| d.0),
            channel_capacity: top.channel_capacity.value.map(|c| c.0),
            chaining: top.chaining.value.map(|f| f.0),
            e2e_latency_everywhere: top.e2e_latency_everywhere.value.map(|f| f.0),
            idle_strategy: top.idle_strategy.value.map(|s| s.0),
            checkpoint_interval: checkpoint.interval.value.map(|d| d.0),
            checkpoint_dir: checkpoint.dir.value.map(|d| d.0),
            checkpoint_retain: checkpoint.retain.value.map(|r| r.0),
            checkpoint_max_concurrent: checkpoint.max_concurrent.value.map(|m| m.0),
            checkpoint_min_pause: checkpoint.min_pause.value.map(|d| d.0),
            checkpoint_tolerable_failures: checkpoint.tolerable_failures.value.map(|t| t.0),
            stall_timeout: top.stall_timeout.value.map(|d| d.0),
            web_config_file: top.web_config_file.value.map(|f| f.0),
            latency: latency.unwrap_or_default(),
            e2e_buckets: e2e_buckets.map(|b| b.0),
            vertices,
            source_map: std::mem::take(&mut self.map),
            problems: Vec::new(),
        })
    }

    /// The job's name: required, and made of the characters ids are.
    fn name(&mut self, name: Spanned<JobName>) -> Option<String> {
        if !name.written {
            let problem = Problem::MissingField {
                field: "name",
                expected: "the job's name (letters, digits, '.', '_' or '-')".into(),
            };
            self.err(&[], None, problem);
        }
        let text = name.value.as_ref()?.0.clone();
        if valid_id(&text) {
            return Some(text);
        }
        self.err(&name.at(), None, Problem::InvalidName(text));
        None
    }

    /// The faults serde found, as errors: the field named by its path (within its vertex,
    /// for a vertex's field), at the position of its key.
    fn fault(&mut self, fault: Fault) {
        let path: Vec<&str> = fault.path.iter().map(String::as_str).collect();
        let vertex = match path.as_slice() {
            [section, id, ..] => {
                section_kinds()
                    .into_iter()
                    .find(|(s, _)| s == section)
                    .map(|(_, kind)| VertexRef {
                        kind,
                        id: id.to_string(),
                    })
            }
            _ => None,
        };
        let own = if vertex.is_some() {
            &path[2..]
        } else {
            &path[..]
        };
        let field = match own {
            // Named alone, as they have always been.
            ["checkpoint", name @ ("dir" | "retain")] => name.to_string(),
            _ => own.join("."),
        };
        let found = fault.found;
        let problem = match fault.kind {
            FaultKind::Expected(expected) => Problem::WrongType {
                field,
                expected,
                found,
            },
            FaultKind::Message(message) => Problem::Invalid { field, message },
            FaultKind::UnknownVariant { value, expected } if own.last() == Some(&"partition") => {
                Problem::UnknownPartition {
                    suggestion: did_you_mean(&value, expected.iter().copied()),
                    value,
                }
            }
            FaultKind::UnknownVariant { value, expected } => Problem::UnknownValue {
                field,
                suggestion: did_you_mean(&value, expected.iter().copied()),
                expected: expected.join(", "),
                value,
            },
            FaultKind::UnknownField {
                field: key,
                expected,
            } => Problem::UnknownField {
                // A vertex's by their path within it (`watermarks.intervall`), the others alone.
                field: if vertex.is_some() { field } else { key.clone() },
                expected: expected.iter().map(|s| s.to_string()).collect(),
                suggestion: did_you_mean(&key, expected.iter().copied()),
            },
            FaultKind::NotAMapping { what } => Problem::NotAMapping { what, found },
            FaultKind::KeyNotText => Problem::WrongType {
                field: "(a key)".into(),
                expected: "a field name".into(),
                found,
            },
        };
        self.err(&path, vertex, problem);
    }

    /// The vertices of every section, each id checked, each vertex read on its own.
    fn vertices(&mut self, root: &Mapping) -> Vec<VertexSpec> {
        let mut vertices = Vec::new();
        let mut seen: HashMap<String, (VertexKind, usize)> = HashMap::new();
        for (section, kind) in section_kinds() {
            let m = match root.get(section) {
                None | Some(Value::Null) => continue,
                Some(Value::Mapping(m)) => m,
                Some(other) => {
                    let problem = not_a_mapping(VERTICES, other);
                    self.err(&[section], None, problem);
                    continue;
                }
            };
            for (k, v) in m {
                let Some(id) = key_text(k) else {
                    let problem = wrong_type("(a vertex id)", "a vertex id", k);
                    self.err(&[section], None, problem);
                    continue;
                };
                let vref = VertexRef {
                    kind,
                    id: id.clone(),
                };
                if !valid_id(&id) {
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
        vertices
    }

    /// One vertex: its own fields ([`VertexFields`], a source's [`EventTimeFields`]) are read
    /// here, every other field is kept for its component (checked when the graph is built).
    fn vertex(&mut self, section: &'static str, vref: VertexRef, v: &Value) -> Option<VertexSpec> {
        let (kind, id) = (vref.kind, vref.id.clone());
        let Value::Mapping(m) = v else {
            let problem = not_a_mapping("a mapping with at least \"type\"", v);
            self.err(&[section, &id], Some(vref), problem);
            return None;
        };
        let source = kind == VertexKind::Source;
        let (mut own, mut event_time) = (Mapping::new(), Mapping::new());
        let mut config = serde_json::Map::new();
        for (k, v) in m {
            let Some(key) = key_text(k) else {
                let problem = wrong_type("(a key)", "a field name", k);
                self.err(&[section, &id], Some(vref.clone()), problem);
                continue;
            };
            let problem = if vertex_fields().contains(&key.as_str()) {
                match key.as_str() {
                    "input" if source => Some(Problem::InputOnSource),
                    "partition" if source => Some(Problem::PartitionOnSource),
                    _ => own.insert(Value::String(key.clone()), v.clone()).and(None),
                }
            } else if source_event_time_fields().contains(&key.as_str()) {
                match source {
                    true => event_time
                        .insert(Value::String(key.clone()), v.clone())
                        .and(None),
                    false => Some(Problem::SourceOnlyField(key.clone())),
                }
            } else if key == EXCHANGE && source {
                Some(Problem::Invalid {
                    field: EXCHANGE.into(),
                    message: "an exchange is on an input edge: set it on the operator or sink \
                              that reads this source"
                        .into(),
                })
            } else {
                match to_json(v) {
                    Ok(j) => config.insert(key.clone(), j).and(None),
                    Err(expected) => Some(wrong_type(&key, expected, v)),
                }
            };
            if let Some(problem) = problem {
                self.err(&[section, &id, &key], Some(vref.clone()), problem);
            }
        }
        let path = [section.to_owned(), id.clone()];
        let fields: VertexFields =
            read(&Value::Mapping(own), &path, &self.faults).unwrap_or_default();
        let source_options = match source {
            true => self.source_options(&path, &vref, event_time),
            false => SourceOptions::default(),
        };
        let type_name = fields
            .type_name
            .value
            .as_ref()
            .map(|t| t.0.clone())
            .unwrap_or_default();
        let (inputs, input_fields): (Vec<String>, &'static [&'static str]) =
            if kind == VertexKind::Operator && type_name == JOIN {
                (
                    self.join_inputs(&path, &vref, fields.input.written, &mut config),
                    &JOIN_SIDES,
                )
            } else {
                if !source && !fields.input.written {
                    self.err(
                        &[section, &id],
                        Some(vref),
                        Problem::MissingInput(kind.as_str()),
                    );
                }
                (
                    fields.input.value.map(|i| i.0).unwrap_or_default(),
                    &["input"],
                )
            };
        Some(VertexSpec {
            id,
            kind,
            type_name,
            inputs,
            input_fields,
            parallelism: fields.parallelism.value.map(|p| p.0),
            max_parallelism: fields.max_parallelism.value.map(|m| m.0),
            partition: fields.partition.value,
            exchange: config.remove(EXCHANGE),
            source_options,
            config,
        })
    }

    /// A join's inputs: its `left` and its `right` (each one vertex id), taken out of the
    /// component's settings; a join reads no `input`.
    fn join_inputs(
        &mut self,
        path: &[String],
        vref: &VertexRef,
        input_written: bool,
        config: &mut serde_json::Map<String, serde_json::Value>,
    ) -> Vec<String> {
        fn at<'a>(path: &'a [String], field: &'a str) -> Vec<&'a str> {
            path.iter()
                .map(String::as_str)
                .chain(std::iter::once(field))
                .collect()
        }
        if input_written {
            self.err(
                &at(path, "input"),
                Some(vref.clone()),
                Problem::Invalid {
                    field: "input".into(),
                    message: "a join reads `left` and `right`, not `input`".into(),
                },
            );
        }
        let mut inputs = Vec::with_capacity(2);
        for side in JOIN_SIDES {
            match config.remove(side) {
                Some(serde_json::Value::String(id)) => inputs.push(id),
                Some(other) => {
                    self.err(
                        &at(path, side),
                        Some(vref.clone()),
                        Problem::Invalid {
                            field: side.into(),
                            message: format!("expected one vertex id (a string), found {other}"),
                        },
                    );
                }
                None => {
                    let at: Vec<&str> = path.iter().map(String::as_str).collect();
                    self.err(
                        &at,
                        Some(vref.clone()),
                        Problem::Invalid {
                            field: side.into(),
                            message: format!(
                                "missing: a join needs `{side}`, the vertex id of its {side} input"
                            ),
                        },
                    );
                }
            }
        }
        inputs
    }

    /// A source's timestamp check and watermarks ([`EventTimeFields`], as `written`).
    fn source_options(
        &mut self,
        path: &[String],
        vref: &VertexRef,
        written: Mapping,
    ) -> SourceOptions {
        let fields: EventTimeFields =
            read(&Value::Mapping(written), path, &self.faults).unwrap_or_default();
        let before_max = fields.timestamp_before_max.value.map(|d| d.0);
        let after_max = fields.timestamp_after_max.value.map(|d| d.0);
        let on_invalid: Option<InvalidTimestampPolicy> = fields.invalid_timestamp.value;
        let bound_written =
            fields.timestamp_before_max.written || fields.timestamp_after_max.written;
        if on_invalid.is_some() && !bound_written {
            self.err(
                &fields.invalid_timestamp.at(),
                Some(vref.clone()),
                Problem::Invalid {
                    field: "invalid_timestamp".into(),
                    message: "has no effect without timestamp_before_max or \
                              timestamp_after_max: set a bound, or remove it"
                        .into(),
                },
            );
        }
        let watermarks = match fields.watermarks.value {
            Some(Watermarks::On(w)) => self.watermarks(w, &fields.watermarks.path, vref),
            Some(Watermarks::Off) | None => None,
        };
        let bounded = before_max.is_some() || after_max.is_some();
        SourceOptions {
            timestamp_check: bounded.then(|| TimestampCheck {
                before_max,
                after_max,
                on_invalid: on_invalid.unwrap_or_default(),
            }),
            watermarks,
        }
    }

    /// The watermark strategy of a source's `watermarks` fields (the defaults for those not
    /// written); `None` when anything in them is wrong.
    fn watermarks(
        &mut self,
        w: WatermarkFields,
        at: &[String],
        vref: &VertexRef,
    ) -> Option<WatermarkStrategy> {
        let wrong = self.faults.borrow().iter().any(|f| f.path.starts_with(at));
        let mut strategy = WatermarkStrategy::default();
        if let Some(d) = w.max_out_of_orderness.value {
            strategy.max_out_of_orderness = d.0;
        }
        if let Some(d) = w.interval.value {
            strategy.interval = d.0;
        }
        match w.idleness.value.as_ref().map(|d| d.0) {
            Some(d) if d.is_zero() => {
                self.err(
                    &w.idleness.at(),
                    Some(vref.clone()),
                    Problem::Invalid {
                        field: "watermarks.idleness".into(),
                        message: "must be more than 0 (leave it out to never mark the source \
                                  idle)"
                            .into(),
                    },
                );
                return None;
            }
            Some(d) => strategy.idleness = Some(d),
            None => {}
        }
        (!wrong).then_some(strategy)
    }
}

/// The field of an operator or sink whose input edges cross instances through Kafka
/// ([`crate::exchange`]): read as a setting, kept apart from the component's.
const EXCHANGE: &str = "exchange";

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

    #[test]
    fn paths_resolve_against_the_job_files_folder_without_dot_steps() {
        let mut job = JobFile::parse(MINIMAL_FOR_PATHS, "job.yaml").unwrap();
        job.dir = PathBuf::from(".");
        assert_eq!(job.resolve(Path::new("./ckpt")), PathBuf::from("ckpt"));
        assert_eq!(job.resolve(Path::new("ckpt/./a")), PathBuf::from("ckpt/a"));
        assert_eq!(job.resolve(Path::new(".")), PathBuf::from("."));
        assert_eq!(
            job.resolve(Path::new("/var/ckpt")),
            PathBuf::from("/var/ckpt")
        );
        job.dir = PathBuf::from("jobs/./w6");
        assert_eq!(
            job.resolve(Path::new("./ckpt")),
            PathBuf::from("jobs/w6/ckpt")
        );
        assert_eq!(
            job.resolve(Path::new("../ckpt")),
            PathBuf::from("jobs/w6/../ckpt")
        );
    }

    const MINIMAL_FOR_PATHS: &str = "name: j
sources:
  s: {type: generator, count: 1}
sinks:
  o: {type: stdout, input: s}
";
}
