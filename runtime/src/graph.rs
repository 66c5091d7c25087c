//! The job graph: vertices (sources, operators, sinks) with parallelism, joined by edges.

use crate::component::{
    BoxError, Operator, OperatorFactory, Sink, SinkFactory, Source, SourceFactory, SubtaskContext,
};
use crate::event_time::SourceOptions;
use std::fmt;

/// A vertex's position in its [`JobGraph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VertexId(pub(crate) usize);

impl VertexId {
    /// The vertex's index in the graph (the order in which it was added).
    pub fn index(self) -> usize {
        self.0
    }
}

/// How an edge spreads records over the downstream subtasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Partitioning {
    /// Subtask `i` sends to subtask `i`; needs equal parallelism.
    #[default]
    Forward,
    /// Round-robin over the downstream subtasks.
    Rebalance,
    /// By a hash of the record's key: one key always goes to the same subtask.
    Hash,
    /// Every record to every downstream subtask.
    Broadcast,
}

impl Partitioning {
    /// The lowercase name used in job files.
    pub fn as_str(self) -> &'static str {
        match self {
            Partitioning::Forward => "forward",
            Partitioning::Rebalance => "rebalance",
            Partitioning::Hash => "hash",
            Partitioning::Broadcast => "broadcast",
        }
    }

    /// All partitionings, for error messages.
    pub const ALL: [Partitioning; 4] = [
        Partitioning::Forward,
        Partitioning::Rebalance,
        Partitioning::Hash,
        Partitioning::Broadcast,
    ];
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Partitioning {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Partitioning::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown partitioning \"{s}\": expected one of forward, rebalance, hash, broadcast")
            })
    }
}

/// What a vertex is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

pub(crate) enum Factory {
    Source(SourceFactory),
    Operator(OperatorFactory),
    Sink(SinkFactory),
}

/// One vertex of the graph.
pub struct Vertex {
    pub(crate) id: String,
    pub(crate) parallelism: usize,
    pub(crate) factory: Factory,
    pub(crate) source_options: SourceOptions,
}

impl Vertex {
    /// The vertex id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// How many parallel subtasks it runs.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }
    /// Source, operator or sink.
    pub fn kind(&self) -> VertexKind {
        match self.factory {
            Factory::Source(_) => VertexKind::Source,
            Factory::Operator(_) => VertexKind::Operator,
            Factory::Sink(_) => VertexKind::Sink,
        }
    }
}

impl fmt::Debug for Vertex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vertex")
            .field("id", &self.id)
            .field("kind", &self.kind())
            .field("parallelism", &self.parallelism)
            .finish()
    }
}

/// A directed edge between two vertices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// Upstream vertex.
    pub from: VertexId,
    /// Downstream vertex.
    pub to: VertexId,
    /// How records are spread over the downstream subtasks.
    pub partitioning: Partitioning,
}

/// Why a graph is not a valid job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// Two vertices share an id.
    #[error("duplicate vertex id \"{0}\": vertex ids must be unique across sources, operators and sinks")]
    DuplicateId(String),
    /// Parallelism 0.
    #[error("vertex \"{0}\": parallelism must be at least 1")]
    ZeroParallelism(String),
    /// An id with characters outside letters, digits, '.', '_' and '-'.
    #[error("vertex id \"{0}\" is invalid: expected letters, digits, '.', '_' or '-'")]
    InvalidId(String),
    /// An edge into a source.
    #[error("vertex \"{0}\" is a source and cannot have an input")]
    InputIntoSource(String),
    /// An edge out of a sink.
    #[error("vertex \"{0}\" is a sink and cannot be the input of \"{1}\"")]
    OutputFromSink(String, String),
    /// An operator or sink without input.
    #[error("{kind} \"{id}\" has no input: every operator and sink needs `input`")]
    MissingInput {
        /// Operator or sink.
        kind: &'static str,
        /// The vertex.
        id: String,
    },
    /// `forward` between different parallelisms.
    #[error("edge \"{from}\" -> \"{to}\": forward partitioning needs equal parallelism, but \"{from}\" has {from_parallelism} and \"{to}\" has {to_parallelism}; use rebalance or hash")]
    ForwardParallelismMismatch {
        /// Upstream vertex.
        from: String,
        /// Downstream vertex.
        to: String,
        /// Upstream parallelism.
        from_parallelism: usize,
        /// Downstream parallelism.
        to_parallelism: usize,
    },
    /// The same edge twice.
    #[error("vertex \"{to}\" lists \"{from}\" as input twice")]
    DuplicateEdge {
        /// Upstream vertex.
        from: String,
        /// Downstream vertex.
        to: String,
    },
    /// A cycle.
    #[error("the graph has a cycle through {0}: a job graph must be acyclic")]
    Cycle(String),
    /// A graph with no source.
    #[error("the job has no source")]
    NoSource,
}

/// A job graph under construction. Add vertices with their factories, then connect them.
///
/// ```
/// use tidemark_runtime::{JobGraph, Partitioning};
/// # use tidemark_runtime::testing::{CountingSource, DiscardSink};
/// let mut graph = JobGraph::new("example");
/// let src = graph.add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(100)))).unwrap();
/// let sink = graph.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
/// graph.connect(src, sink, Partitioning::Rebalance).unwrap();
/// assert!(graph.validate().is_ok());
/// ```
#[derive(Debug)]
pub struct JobGraph {
    pub(crate) name: String,
    pub(crate) vertices: Vec<Vertex>,
    pub(crate) edges: Vec<Edge>,
}

impl JobGraph {
    /// An empty graph for the job `name`.
    pub fn new(name: impl Into<String>) -> Self {
        JobGraph {
            name: name.into(),
            vertices: Vec::new(),
            edges: Vec::new(),
        }
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All vertices, in the order they were added.
    pub fn vertices(&self) -> &[Vertex] {
        &self.vertices
    }

    /// All edges, in the order they were added.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The vertex with this handle.
    pub fn vertex(&self, id: VertexId) -> &Vertex {
        &self.vertices[id.0]
    }

    /// Finds a vertex by its id.
    pub fn find(&self, id: &str) -> Option<VertexId> {
        self.vertices.iter().position(|v| v.id == id).map(VertexId)
    }

    fn add(
        &mut self,
        id: &str,
        parallelism: usize,
        factory: Factory,
    ) -> Result<VertexId, GraphError> {
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(GraphError::InvalidId(id.to_string()));
        }
        if self.find(id).is_some() {
            return Err(GraphError::DuplicateId(id.to_string()));
        }
        if parallelism == 0 {
            return Err(GraphError::ZeroParallelism(id.to_string()));
        }
        self.vertices.push(Vertex {
            id: id.to_string(),
            parallelism,
            factory,
            source_options: SourceOptions::default(),
        });
        Ok(VertexId(self.vertices.len() - 1))
    }

    /// Adds a source; `factory` makes one instance per subtask.
    pub fn add_source<F>(
        &mut self,
        id: &str,
        parallelism: usize,
        factory: F,
    ) -> Result<VertexId, GraphError>
    where
        F: Fn(&SubtaskContext) -> Result<Box<dyn Source>, BoxError> + Send + Sync + 'static,
    {
        self.add(id, parallelism, Factory::Source(Box::new(factory)))
    }

    /// Adds an operator; `factory` makes one instance per subtask.
    pub fn add_operator<F>(
        &mut self,
        id: &str,
        parallelism: usize,
        factory: F,
    ) -> Result<VertexId, GraphError>
    where
        F: Fn(&SubtaskContext) -> Result<Box<dyn Operator>, BoxError> + Send + Sync + 'static,
    {
        self.add(id, parallelism, Factory::Operator(Box::new(factory)))
    }

    /// Adds a sink; `factory` makes one instance per subtask.
    pub fn add_sink<F>(
        &mut self,
        id: &str,
        parallelism: usize,
        factory: F,
    ) -> Result<VertexId, GraphError>
    where
        F: Fn(&SubtaskContext) -> Result<Box<dyn Sink>, BoxError> + Send + Sync + 'static,
    {
        self.add(id, parallelism, Factory::Sink(Box::new(factory)))
    }

    /// Sets a source's event-time options: timestamp range check and watermarks.
    pub fn set_source_options(&mut self, source: VertexId, options: SourceOptions) {
        self.vertices[source.0].source_options = options;
    }

    /// Connects `from` to `to`. A vertex with several inputs receives their union.
    pub fn connect(
        &mut self,
        from: VertexId,
        to: VertexId,
        partitioning: Partitioning,
    ) -> Result<(), GraphError> {
        let (f, t) = (&self.vertices[from.0], &self.vertices[to.0]);
        if t.kind() == VertexKind::Source {
            return Err(GraphError::InputIntoSource(t.id.clone()));
        }
        if f.kind() == VertexKind::Sink {
            return Err(GraphError::OutputFromSink(f.id.clone(), t.id.clone()));
        }
        if partitioning == Partitioning::Forward && f.parallelism != t.parallelism {
            return Err(GraphError::ForwardParallelismMismatch {
                from: f.id.clone(),
                to: t.id.clone(),
                from_parallelism: f.parallelism,
                to_parallelism: t.parallelism,
            });
        }
        if self.edges.iter().any(|e| e.from == from && e.to == to) {
            return Err(GraphError::DuplicateEdge {
                from: f.id.clone(),
                to: t.id.clone(),
            });
        }
        self.edges.push(Edge {
            from,
            to,
            partitioning,
        });
        Ok(())
    }

    /// Edges leaving `v`, in insertion order.
    pub fn outputs(&self, v: VertexId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == v)
    }

    /// Edges entering `v`, in insertion order.
    pub fn inputs(&self, v: VertexId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.to == v)
    }

    /// Checks the whole graph: a source exists, every operator and sink has an input, no cycle.
    pub fn validate(&self) -> Result<(), GraphError> {
        if !self.vertices.iter().any(|v| v.kind() == VertexKind::Source) {
            return Err(GraphError::NoSource);
        }
        for (i, v) in self.vertices.iter().enumerate() {
            if v.kind() != VertexKind::Source && self.inputs(VertexId(i)).next().is_none() {
                return Err(GraphError::MissingInput {
                    kind: v.kind().as_str(),
                    id: v.id.clone(),
                });
            }
        }
        self.topological_order().map(|_| ())
    }

    /// The vertices in an order where every edge goes forward, or the cycle that prevents one.
    pub fn topological_order(&self) -> Result<Vec<VertexId>, GraphError> {
        let n = self.vertices.len();
        let mut indegree = vec![0usize; n];
        for e in &self.edges {
            indegree[e.to.0] += 1;
        }
        let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).rev().collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop() {
            order.push(VertexId(i));
            for e in self.edges.iter().filter(|e| e.from.0 == i) {
                indegree[e.to.0] -= 1;
                if indegree[e.to.0] == 0 {
                    ready.push(e.to.0);
                }
            }
        }
        if order.len() < n {
            let stuck: Vec<String> = (0..n)
                .filter(|&i| indegree[i] > 0)
                .map(|i| format!("\"{}\"", self.vertices[i].id))
                .collect();
            return Err(GraphError::Cycle(stuck.join(", ")));
        }
        Ok(order)
    }
}
