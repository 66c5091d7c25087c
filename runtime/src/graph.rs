//! The job graph: vertices (sources, operators, sinks) with parallelism, joined by edges.

use crate::component::{
    BoxError, Operator, OperatorFactory, Sink, SinkFactory, Source, SourceFactory, SubtaskContext,
};
use crate::event_time::SourceOptions;
use crate::keyed_store::KeyedStoreFactory;
pub use crate::vertex_kind::VertexKind;
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
///
/// Deserialized from its job-file name (`forward`, `rebalance`, `hash`, `broadcast`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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

/// The most subtasks one vertex may have. Each subtask is a thread, so this bounds a typo
/// (`parallelism: 4294967297`) before it becomes a failed thread start; the job's whole
/// thread count is the sum over its tasks.
pub const MAX_PARALLELISM: usize = 1024;

/// Checks a parallelism: a whole number from 1 to [`MAX_PARALLELISM`]. The one rule the
/// graph, the job file and the command line share.
pub fn check_parallelism(parallelism: u64) -> Result<usize, ParallelismError> {
    match parallelism {
        0 => Err(ParallelismError::Zero),
        n if n > MAX_PARALLELISM as u64 => Err(ParallelismError::TooHigh(n)),
        n => Ok(n as usize),
    }
}

/// A parallelism out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParallelismError {
    /// 0.
    #[error("parallelism must be at least 1, found 0")]
    Zero,
    /// Above [`MAX_PARALLELISM`].
    #[error("parallelism {0} is more than the maximum of {MAX_PARALLELISM} subtasks per vertex")]
    TooHigh(u64),
}

/// Whether `id` is a valid vertex id (and job name): letters, digits, '.', '_' or '-'. The one
/// grammar for ids, shared by the graph and the job file.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
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
    pub(crate) keyed: bool,
    pub(crate) type_name: Option<String>,
    /// Each subtask gets whole keys (see [`JobGraph::set_partitioned_by_key`]).
    pub(crate) partitioned_by_key: bool,
    /// Its number of key groups, when set ([`JobGraph::set_max_parallelism`]).
    pub(crate) max_parallelism: Option<u32>,
    /// Where its keyed state is kept, when not (only) in the checkpoint directory
    /// ([`JobGraph::set_keyed_store`]).
    pub(crate) keyed_store: Option<KeyedStoreFactory>,
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
    /// The component type it was built from (`generator`, `map`, …), if known; shown by the
    /// plan.
    pub fn type_name(&self) -> Option<&str> {
        self.type_name.as_deref()
    }
    /// Whether it groups records by key (see [`JobGraph::set_keyed`]).
    pub fn is_keyed(&self) -> bool {
        self.keyed
    }
    /// Its number of key groups ([`crate::key_group`]): the one set with
    /// [`JobGraph::set_max_parallelism`], or the default for its parallelism
    /// ([`default_max_parallelism`](crate::key_group::default_max_parallelism)).
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
            .unwrap_or_else(|| crate::key_group::default_max_parallelism(self.parallelism))
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
    /// Parallelism 0 or above [`MAX_PARALLELISM`].
    #[error("vertex \"{id}\": {error}")]
    Parallelism {
        /// The vertex.
        id: String,
        /// What is wrong.
        error: ParallelismError,
    },
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
    /// A partitioning other than `hash` into a keyed vertex above parallelism 1.
    #[error("edge \"{from}\" -> \"{to}\": \"{to}\" groups records by key, so its input must be partitioned by hash, not {partitioning}: with {partitioning} one key's records would be split over its {parallelism} subtasks; remove \"partition\" (hash is the default) or set parallelism 1")]
    KeyedNotHashed {
        /// Upstream vertex.
        from: String,
        /// The keyed vertex.
        to: String,
        /// The partitioning given.
        partitioning: Partitioning,
        /// The keyed vertex's parallelism.
        parallelism: usize,
    },
    /// The same edge twice.
    #[error("vertex \"{to}\" lists \"{from}\" as input twice")]
    DuplicateEdge {
        /// Upstream vertex.
        from: String,
        /// Downstream vertex.
        to: String,
    },
    /// A cycle, as the path of vertex ids it follows in data-flow order, closed (`a -> b -> a`),
    /// starting at the vertex added first.
    #[error("the inputs form a cycle: {}; a job graph must be acyclic", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// A graph with no source.
    #[error("the job has no source")]
    NoSource,
    /// A `max_parallelism` out of range or below the parallelism.
    #[error("vertex \"{id}\": {error}")]
    MaxParallelism {
        /// The vertex.
        id: String,
        /// What is wrong.
        error: crate::key_group::MaxParallelismError,
    },
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
        if !valid_id(id) {
            return Err(GraphError::InvalidId(id.to_string()));
        }
        if self.find(id).is_some() {
            return Err(GraphError::DuplicateId(id.to_string()));
        }
        check_parallelism(parallelism as u64).map_err(|error| GraphError::Parallelism {
            id: id.to_string(),
            error,
        })?;
        self.vertices.push(Vertex {
            id: id.to_string(),
            parallelism,
            factory,
            source_options: SourceOptions::default(),
            keyed: false,
            type_name: None,
            partitioned_by_key: false,
            max_parallelism: None,
            keyed_store: None,
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

    /// Keeps the keyed state of operator vertex `vertex` in the store `factory` makes for each
    /// of its subtasks (the Kafka state topic behind a Kafka exchange), instead of only in the
    /// checkpoint directory ([`crate::keyed_store`]). The factory is given the directory's
    /// store of the subtask when the job writes or restores checkpoints.
    pub fn set_keyed_store(&mut self, vertex: VertexId, factory: KeyedStoreFactory) {
        self.vertices[vertex.0].keyed_store = Some(factory);
    }

    /// Sets a source's event-time options: timestamp range check and watermarks.
    pub fn set_source_options(&mut self, source: VertexId, options: SourceOptions) {
        self.vertices[source.0].source_options = options;
    }

    /// Marks a source whose subtasks each get whole keys, every record of a key from the same
    /// subtask (the reader of a Kafka exchange: a key lives in one Kafka partition, a partition
    /// is read by one subtask): a `forward` edge from it into a keyed vertex is allowed.
    pub fn set_partitioned_by_key(&mut self, source: VertexId) {
        self.vertices[source.0].partitioned_by_key = true;
    }

    /// Marks a vertex as keyed: it groups records by key (`reduce`, `window`), so above
    /// parallelism 1 its input edges must be `hash` ([`GraphError::KeyedNotHashed`]).
    pub fn set_keyed(&mut self, vertex: VertexId, keyed: bool) {
        self.vertices[vertex.0].keyed = keyed;
    }

    /// Sets a vertex's number of key groups, its `max_parallelism` (1 to
    /// [`MAX_KEY_GROUPS`](crate::key_group::MAX_KEY_GROUPS), at least its parallelism; checked
    /// by [`JobGraph::validate`]). Keyed state is stored per key group, so a checkpoint restores
    /// only into the same `max_parallelism`.
    pub fn set_max_parallelism(&mut self, vertex: VertexId, max_parallelism: u32) {
        self.vertices[vertex.0].max_parallelism = Some(max_parallelism);
    }

    /// Records the component type a vertex was built from, for the plan (`plan`, DOT).
    pub fn set_type_name(&mut self, vertex: VertexId, type_name: impl Into<String>) {
        self.vertices[vertex.0].type_name = Some(type_name.into());
    }

    /// The partitioning an edge from `from` to `to` gets when none is asked for: `hash` into a
    /// keyed vertex, `forward` between equal parallelisms, `rebalance` otherwise.
    pub fn default_partitioning(&self, from: VertexId, to: VertexId) -> Partitioning {
        let (f, t) = (&self.vertices[from.0], &self.vertices[to.0]);
        if t.keyed {
            Partitioning::Hash
        } else if f.parallelism == t.parallelism {
            Partitioning::Forward
        } else {
            Partitioning::Rebalance
        }
    }

    /// Connects `from` to `to`, checking this edge at once. A vertex with several inputs
    /// receives their union.
    pub fn connect(
        &mut self,
        from: VertexId,
        to: VertexId,
        partitioning: Partitioning,
    ) -> Result<(), GraphError> {
        let edge = Edge {
            from,
            to,
            partitioning,
        };
        if let Some(problem) = self.edge_problems(&edge, &self.edges).into_iter().next() {
            return Err(problem);
        }
        self.edges.push(edge);
        Ok(())
    }

    /// Adds an edge without checking it: [`JobGraph::problems`] reports what is wrong with it
    /// together with everything else. For tools (the job-file loader) that report every problem
    /// at once.
    pub fn add_edge(&mut self, from: VertexId, to: VertexId, partitioning: Partitioning) {
        self.edges.push(Edge {
            from,
            to,
            partitioning,
        });
    }

    /// The problems of one edge, given the edges before it.
    fn edge_problems(&self, edge: &Edge, earlier: &[Edge]) -> Vec<GraphError> {
        let (f, t) = (&self.vertices[edge.from.0], &self.vertices[edge.to.0]);
        let mut problems = Vec::new();
        if t.kind() == VertexKind::Source {
            problems.push(GraphError::InputIntoSource(t.id.clone()));
        }
        if f.kind() == VertexKind::Sink {
            problems.push(GraphError::OutputFromSink(f.id.clone(), t.id.clone()));
        }
        if edge.partitioning == Partitioning::Forward && f.parallelism != t.parallelism {
            problems.push(GraphError::ForwardParallelismMismatch {
                from: f.id.clone(),
                to: t.id.clone(),
                from_parallelism: f.parallelism,
                to_parallelism: t.parallelism,
            });
        } else if t.keyed
            && t.parallelism > 1
            && edge.partitioning != Partitioning::Hash
            && !(edge.partitioning == Partitioning::Forward && f.partitioned_by_key)
        {
            problems.push(GraphError::KeyedNotHashed {
                from: f.id.clone(),
                to: t.id.clone(),
                partitioning: edge.partitioning,
                parallelism: t.parallelism,
            });
        }
        if earlier
            .iter()
            .any(|e| e.from == edge.from && e.to == edge.to)
        {
            problems.push(GraphError::DuplicateEdge {
                from: f.id.clone(),
                to: t.id.clone(),
            });
        }
        problems
    }

    /// Edges leaving `v`, in insertion order.
    pub fn outputs(&self, v: VertexId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == v)
    }

    /// Edges entering `v`, in insertion order.
    pub fn inputs(&self, v: VertexId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.to == v)
    }

    /// Checks the whole graph; the first of [`JobGraph::problems`].
    pub fn validate(&self) -> Result<(), GraphError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem of the graph, the one rule set for a valid job: each edge (into a source,
    /// out of a sink, `forward` between different parallelisms, not `hash` into a keyed vertex,
    /// twice the same), every operator and sink without input, no source at all, and a cycle
    /// as its path. Empty for a valid graph.
    pub fn problems(&self) -> Vec<GraphError> {
        let mut problems = Vec::new();
        for (i, edge) in self.edges.iter().enumerate() {
            problems.extend(self.edge_problems(edge, &self.edges[..i]));
        }
        for (i, v) in self.vertices.iter().enumerate() {
            if let Some(max) = v.max_parallelism {
                if let Err(error) =
                    crate::key_group::check_max_parallelism(max as u64, v.parallelism)
                {
                    problems.push(GraphError::MaxParallelism {
                        id: v.id.clone(),
                        error,
                    });
                }
            }
            if v.kind() != VertexKind::Source && self.inputs(VertexId(i)).next().is_none() {
                problems.push(GraphError::MissingInput {
                    kind: v.kind().as_str(),
                    id: v.id.clone(),
                });
            }
        }
        if !self.vertices.iter().any(|v| v.kind() == VertexKind::Source) {
            problems.push(GraphError::NoSource);
        }
        if let Some(cycle) = self.find_cycle() {
            problems.push(GraphError::Cycle(cycle));
        }
        problems
    }

    /// A cycle among the edges, as vertex ids in data-flow order, closed, starting at the
    /// vertex added first; `None` if the graph is acyclic.
    fn find_cycle(&self) -> Option<Vec<String>> {
        let n = self.vertices.len();
        // 0 = unvisited, 1 = on the path, 2 = done.
        let mut state = vec![0u8; n];
        let mut path: Vec<usize> = Vec::new();
        fn visit(
            g: &JobGraph,
            i: usize,
            state: &mut [u8],
            path: &mut Vec<usize>,
        ) -> Option<Vec<usize>> {
            state[i] = 1;
            path.push(i);
            for e in g.edges.iter().filter(|e| e.from.0 == i) {
                let j = e.to.0;
                if state[j] == 1 {
                    let at = path.iter().position(|&p| p == j).expect("on the path");
                    return Some(path[at..].to_vec());
                }
                if state[j] == 0 {
                    if let Some(c) = visit(g, j, state, path) {
                        return Some(c);
                    }
                }
            }
            path.pop();
            state[i] = 2;
            None
        }
        for i in 0..n {
            if state[i] == 0 {
                if let Some(mut cycle) = visit(self, i, &mut state, &mut path) {
                    let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
                    cycle.rotate_left(first);
                    let mut ids: Vec<String> =
                        cycle.iter().map(|&k| self.vertices[k].id.clone()).collect();
                    ids.push(ids[0].clone());
                    return Some(ids);
                }
            }
        }
        None
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
            let cycle = self
                .find_cycle()
                .expect("a graph without a topological order has a cycle");
            return Err(GraphError::Cycle(cycle));
        }
        Ok(order)
    }
}
