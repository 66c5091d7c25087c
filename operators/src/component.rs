//! What a component is to the registry, without the registry: the entry each built-in
//! declares ([`ComponentInfo`]), the job it is built for ([`BuildEnv`]) and the factory it
//! builds ([`Built`]).
//!
//! Components take these from here and [`crate::registry`] lists the components, so no
//! component depends on the registry.

use std::fmt;
use std::path::PathBuf;

use tidemark_runtime::component::{OperatorFactory, SinkFactory, SourceFactory};

use crate::error::ConfigError;

/// Whether a component is a source, an operator or a sink: the runtime's
/// [`VertexKind`](tidemark_runtime::VertexKind), one enum for both crates.
pub type ComponentKind = tidemark_runtime::VertexKind;

/// Builds a built-in component from its settings.
pub(crate) type BuildFn = fn(serde_json::Value, &BuildEnv) -> Result<Built, ConfigError>;

/// What the registry knows about one built-in component type.
#[derive(Clone, Copy)]
pub struct ComponentInfo {
    /// The `type` name used in job files.
    pub type_name: &'static str,
    /// Source, operator or sink.
    pub kind: ComponentKind,
    /// The settings it accepts (besides `type`, `input`, `parallelism` and `partition`), for
    /// "did you mean" hints.
    pub fields: &'static [&'static str],
    /// One line saying what it does.
    pub summary: &'static str,
    pub(crate) build: BuildFn,
}

impl ComponentInfo {
    /// Builds this component from `config`; see [`build`](crate::build).
    pub fn build(&self, config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
        (self.build)(config, env)
    }
}

impl fmt::Debug for ComponentInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentInfo")
            .field("type_name", &self.type_name)
            .field("kind", &self.kind)
            .field("fields", &self.fields)
            .field("summary", &self.summary)
            .finish()
    }
}

/// A component built from its settings: it makes one instance per subtask.
pub enum Built {
    /// A source factory.
    Source(SourceFactory),
    /// An operator factory.
    Operator(OperatorFactory),
    /// A sink factory.
    Sink(SinkFactory),
}

impl Built {
    /// Source, operator or sink.
    pub fn kind(&self) -> ComponentKind {
        match self {
            Built::Source(_) => ComponentKind::Source,
            Built::Operator(_) => ComponentKind::Operator,
            Built::Sink(_) => ComponentKind::Sink,
        }
    }
}

impl fmt::Debug for Built {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Built::{:?}(..)", self.kind())
    }
}

/// What building a component may need to know about its job.
#[derive(Clone, Debug, Default)]
pub struct BuildEnv {
    /// The folder of the job file: relative paths in settings resolve against it.
    pub job_dir: PathBuf,
    /// Check now that input files exist (`tidemark validate`), rather than when the job
    /// starts.
    pub check_inputs: bool,
}

impl BuildEnv {
    /// An environment whose relative paths resolve against `job_dir`.
    pub fn new(job_dir: impl Into<PathBuf>) -> Self {
        BuildEnv {
            job_dir: job_dir.into(),
            check_inputs: false,
        }
    }
}
