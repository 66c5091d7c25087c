//! [`VertexKind`]: source, operator or sink.

use std::fmt;

/// What a vertex is: the one kind enum shared by the runtime, the component registry
/// (`tidemark_operators::ComponentKind` is this type) and the job file's three sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VertexKind {
    /// Makes records; has no inputs.
    Source,
    /// Transforms records.
    Operator,
    /// Consumes records; has no outputs.
    Sink,
}

impl VertexKind {
    /// "source", "operator" or "sink".
    pub fn as_str(self) -> &'static str {
        match self {
            VertexKind::Source => "source",
            VertexKind::Operator => "operator",
            VertexKind::Sink => "sink",
        }
    }

    /// The kind with its indefinite article, for messages: "a source", "an operator", "a sink".
    pub fn with_article(self) -> &'static str {
        match self {
            VertexKind::Source => "a source",
            VertexKind::Operator => "an operator",
            VertexKind::Sink => "a sink",
        }
    }

    /// The job-file section that holds vertices of this kind: `"sources"`, `"operators"` or
    /// `"sinks"`.
    pub fn section(self) -> &'static str {
        match self {
            VertexKind::Source => "sources",
            VertexKind::Operator => "operators",
            VertexKind::Sink => "sinks",
        }
    }

    /// All kinds, in job-file order.
    pub const ALL: [VertexKind; 3] = [VertexKind::Source, VertexKind::Operator, VertexKind::Sink];
}

impl fmt::Display for VertexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
