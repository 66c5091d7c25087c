//! Errors of the job file, of a failed run, and the one place that prints errors and picks the
//! exit code.

use crate::locate::Pos;
use crate::suggest::hint;
use std::fmt;
use tidemark_runtime::{TaskFailure, VertexKind};

/// Exit code: the job finished, or was stopped cleanly.
pub const EXIT_OK: u8 = 0;
/// Exit code: the job failed while running.
pub const EXIT_JOB_FAILED: u8 = 1;
/// Exit code: bad usage, an invalid job file or settings, or the metrics address in use.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a second SIGINT/SIGTERM ended the process at once (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// What is wrong in a job file (without where: see [`JobFileError`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// YAML syntax, as the parser reports it.
    #[error("{0}")]
    Syntax(String),
    /// No document at all.
    #[error("the job file is empty: expected a mapping with at least \"name\" and \"sources\"")]
    Empty,
    /// A value that should be a mapping is not.
    #[error("expected {what}, found {found}")]
    NotAMapping {
        /// What was expected.
        what: &'static str,
        /// What was found.
        found: String,
    },
    /// A field no one accepts here.
    #[error("unknown field \"{field}\", expected one of {}{}", expected.join(", "), hint(suggestion))]
    UnknownField {
        /// The field as written.
        field: String,
        /// The accepted fields.
        expected: Vec<String>,
        /// The closest accepted field.
        suggestion: Option<String>,
    },
    /// A required field is absent.
    #[error("missing field \"{field}\": expected {expected}")]
    MissingField {
        /// The field.
        field: &'static str,
        /// What it should hold.
        expected: String,
    },
    /// A field's value has the wrong type or form.
    #[error("field \"{field}\": expected {expected}, found {found}")]
    WrongType {
        /// The field.
        field: String,
        /// What it should hold.
        expected: String,
        /// What it holds.
        found: String,
    },
    /// The job name has characters outside the allowed set.
    #[error("invalid job name \"{0}\": expected letters, digits, '.', '_' or '-'")]
    InvalidName(String),
    /// A vertex id has characters outside the allowed set.
    #[error("invalid vertex id \"{0}\": expected letters, digits, '.', '_' or '-'")]
    InvalidId(String),
    /// A value outside the field's set of names.
    #[error(
        "field \"{field}\": unknown value \"{value}\", expected one of {expected}{}",
        hint(suggestion)
    )]
    UnknownValue {
        /// The field.
        field: String,
        /// As written.
        value: String,
        /// The accepted values, comma-separated.
        expected: String,
        /// The closest accepted value.
        suggestion: Option<String>,
    },
    /// A value that is well-formed but not allowed here (a duration that does not parse, a
    /// parallelism out of range, …).
    #[error("field \"{field}\": {message}")]
    Invalid {
        /// The field.
        field: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// An event-time field of sources on an operator or sink.
    #[error(
        "field \"{0}\" belongs on a source: timestamps are checked and watermarks made where \
             records enter the job; set it on the sources this vertex reads from"
    )]
    SourceOnlyField(String),
    /// A `type` that no component of this section has.
    #[error("unknown {section} type \"{type_name}\", expected one of {}{}{}", known.join(", "), hint(suggestion), elsewhere_hint(type_name, elsewhere))]
    UnknownType {
        /// source, operator or sink.
        section: &'static str,
        /// The type as written.
        type_name: String,
        /// The types of this section.
        known: Vec<String>,
        /// The closest known type.
        suggestion: Option<String>,
        /// The kind (source, operator, sink) that does have this type, if another one does.
        elsewhere: Option<VertexKind>,
    },
    /// A `partition` that is not one of the four.
    #[error(
        "unknown partition \"{value}\", expected one of forward, rebalance, hash, broadcast{}",
        hint(suggestion)
    )]
    UnknownPartition {
        /// As written.
        value: String,
        /// The closest partitioning.
        suggestion: Option<String>,
    },
    /// `input` on a source.
    #[error("a source reads no input: remove \"input\" (or move this vertex to \"operators\")")]
    InputOnSource,
    /// `partition` on a source.
    #[error("a source has no input edge to partition: remove \"partition\"")]
    PartitionOnSource,
    /// An operator or sink without `input`.
    #[error("missing field \"input\": every {0} needs the id (or a list of ids) of the vertices it reads from")]
    MissingInput(&'static str),
    /// An `input` naming no vertex.
    #[error("unknown input \"{input}\", {}{}", id_list(known), hint(suggestion))]
    UnknownInput {
        /// As written.
        input: String,
        /// Every vertex id that can be an input (sources and operators).
        known: Vec<String>,
        /// The closest id.
        suggestion: Option<String>,
    },
    /// An `input` naming a sink.
    #[error(
        "input \"{0}\" is a sink, and sinks have no output: read from a source or an operator"
    )]
    InputIsSink(String),
    /// The same input listed twice.
    #[error("input \"{0}\" is listed twice")]
    DuplicateInput(String),
    /// A vertex id used twice.
    #[error("duplicate vertex id \"{id}\": already used by the {first_kind} at line {first_line}; ids must be unique across sources, operators and sinks")]
    DuplicateId {
        /// The id.
        id: String,
        /// The kind of the first vertex with that id.
        first_kind: &'static str,
        /// Where the first one is.
        first_line: usize,
    },
    /// A mapping key written twice.
    #[error("duplicate field \"{key}\" (first at line {first_line})")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where the first one is.
        first_line: usize,
    },
    /// No source at all.
    #[error("the job has no source: add one under \"sources\"")]
    NoSource,
    /// The component rejected one of its settings.
    #[error("invalid {type_name} settings: {error}{}", hint(suggestion))]
    ComponentSetting {
        /// The component type.
        type_name: String,
        /// Which setting (its path) and what is wrong.
        error: tidemark_operators::FieldError,
        /// For an unknown field or value: the closest accepted one.
        suggestion: Option<String>,
    },
    /// A `${VAR}` that cannot be replaced.
    #[error("{0}")]
    Substitution(crate::substitute::SubstitutionError),
    /// The job graph's rules (the runtime's [`tidemark_runtime::JobGraph::problems`]).
    #[error("{0}")]
    Graph(tidemark_runtime::GraphError),
    /// The component rejected its configuration.
    #[error("{0}")]
    Component(String),
}

/// `; "x" is a sink type: move the vertex under "sinks"` or nothing.
fn elsewhere_hint(type_name: &str, elsewhere: &Option<VertexKind>) -> String {
    match elsewhere {
        Some(kind) => {
            let section = kind.section();
            let kind = kind.with_article();
            format!("; \"{type_name}\" is {kind} type: move the vertex under \"{section}\"")
        }
        None => String::new(),
    }
}

/// "expected one of the vertex ids a, b", or that there is none.
fn id_list(known: &[String]) -> String {
    if known.is_empty() {
        "and there is no source or operator to read from".to_string()
    } else {
        format!("expected one of the vertex ids {}", known.join(", "))
    }
}

/// A vertex an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexRef {
    /// Source, operator or sink.
    pub kind: VertexKind,
    /// Its id.
    pub id: String,
}

/// One error in a job file: which file, where, which vertex, and what.
///
/// Displays as `FILE:LINE:COLUMN: KIND "ID": PROBLEM`, leaving out what is unknown.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct JobFileError {
    /// The file as given on the command line.
    pub file: String,
    /// Where the problem is, when known.
    pub pos: Option<Pos>,
    /// The vertex it is about, if any.
    pub vertex: Option<VertexRef>,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for JobFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.file)?;
        if let Some(pos) = self.pos {
            write!(f, "{pos}:")?;
        }
        f.write_str(" ")?;
        if let Some(v) = &self.vertex {
            write!(f, "{} \"{}\": ", v.kind.as_str(), v.id)?;
        }
        write!(f, "{}", self.problem)
    }
}

/// All errors found in a job file, in file order; never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFileErrors(pub Vec<JobFileError>);

impl fmt::Display for JobFileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for JobFileErrors {}

/// A job that failed while running (exit code 1).
#[derive(Debug, thiserror::Error)]
#[error("job \"{job}\" failed: {failure}")]
pub struct JobFailed {
    /// The job name.
    pub job: String,
    /// Which vertex subtask failed, and why.
    pub failure: TaskFailure,
}

/// Any other error once the job has started (exit code 1), e.g. the report cannot be written.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RunError(#[from] pub anyhow::Error);

/// The exit code for an error: 1 for failures while the job ran, 2 for everything before.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.is::<JobFailed>() || error.is::<RunError>() {
        EXIT_JOB_FAILED
    } else {
        EXIT_USAGE
    }
}

/// Prints an error to standard error: one `error:` line per job-file error, or the error with
/// its causes.
pub fn print(error: &anyhow::Error) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    // Job-file errors, or a load error made of them (their source): one line each.
    let errors = error
        .chain()
        .find_map(|e| e.downcast_ref::<JobFileErrors>());
    if let Some(errors) = errors {
        for e in &errors.0 {
            let _ = writeln!(err, "error: {e}");
        }
        if errors.0.len() > 1 {
            let _ = writeln!(err, "tidemark: {} errors in the job file", errors.0.len());
        }
    } else {
        let _ = writeln!(err, "error: {error:#}");
    }
}

/// An I/O error's message without the ` (os error N)` suffix.
pub(crate) fn os_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_owned(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_of_another_kind_is_named_with_its_article() {
        let problem = |elsewhere| Problem::UnknownType {
            section: "sink",
            type_name: "map".into(),
            known: vec!["discard".into()],
            suggestion: None,
            elsewhere: Some(elsewhere),
        };
        let text = problem(VertexKind::Operator).to_string();
        assert!(
            text.ends_with("; \"map\" is an operator type: move the vertex under \"operators\""),
            "{text}"
        );
        let text = problem(VertexKind::Source).to_string();
        assert!(text.contains("\"map\" is a source type"), "{text}");
    }
}
