//! The execution plan: how a job graph becomes tasks (chains of vertices) joined by channels.
//!
//! An edge is chained (its two vertices run in one thread, passing batches by a function call)
//! when chaining is on, the edge is the upstream vertex's only output and the downstream vertex's
//! only input, both sides have the same parallelism, and the edge is `forward` or joins two
//! vertices of parallelism 1 (where no partitioning has anything to exchange).

use crate::graph::{GraphError, JobGraph, Partitioning, VertexId};
use std::fmt::{self, Write as _};

/// One task: a chain of vertices run by one thread per subtask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskPlan {
    /// Vertex ids joined with `+` in chain order, the `task` metric label.
    pub name: String,
    /// The chained vertices, head first.
    pub vertices: Vec<VertexId>,
    /// Parallelism shared by the chained vertices.
    pub parallelism: usize,
}

/// One edge between two tasks, exchanged over channels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgePlan {
    /// Upstream vertex (the last of its task's chain).
    pub from: VertexId,
    /// Downstream vertex (the head of its task's chain).
    pub to: VertexId,
    /// Upstream task index.
    pub from_task: usize,
    /// Downstream task index.
    pub to_task: usize,
    /// Partitioning of the edge.
    pub partitioning: Partitioning,
    /// Number of channels: one per (upstream subtask, downstream subtask) pair that can talk.
    pub channels: usize,
}

/// Tasks, chains and exchanges of a job graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionPlan {
    /// The job's name.
    pub job_name: String,
    /// Whether chaining was on.
    pub chaining: bool,
    /// Tasks in topological order.
    pub tasks: Vec<TaskPlan>,
    /// Exchanges between tasks.
    pub edges: Vec<EdgePlan>,
    /// Chained edges (from, to) inside tasks.
    pub chained: Vec<(VertexId, VertexId, Partitioning)>,
    pub(crate) vertex_ids: Vec<String>,
    pub(crate) vertex_kinds: Vec<&'static str>,
    pub(crate) vertex_types: Vec<Option<String>>,
}

impl ExecutionPlan {
    /// Plans `graph` after validating it.
    pub fn new(graph: &JobGraph, chaining: bool) -> Result<Self, GraphError> {
        graph.validate()?;
        let order = graph.topological_order()?;
        let n = graph.vertices.len();
        let chains_into = |from: VertexId| -> Option<(VertexId, Partitioning)> {
            if !chaining {
                return None;
            }
            let mut outs = graph.outputs(from);
            let e = outs.next()?;
            if outs.next().is_some() || graph.inputs(e.to).count() != 1 {
                return None;
            }
            let (p, q) = (
                graph.vertex(e.from).parallelism,
                graph.vertex(e.to).parallelism,
            );
            let exchange_free = e.partitioning == Partitioning::Forward || (p == 1 && q == 1);
            (p == q && exchange_free).then_some((e.to, e.partitioning))
        };
        let mut chained_into_something = vec![false; n];
        let mut chained = Vec::new();
        for &v in &order {
            if let Some((to, p)) = chains_into(v) {
                chained_into_something[to.0] = true;
                chained.push((v, to, p));
            }
        }
        let mut task_of = vec![usize::MAX; n];
        let mut tasks = Vec::new();
        for &v in &order {
            if chained_into_something[v.0] {
                continue;
            }
            let mut vertices = vec![v];
            let mut cur = v;
            while let Some((next, _)) = chains_into(cur) {
                vertices.push(next);
                cur = next;
            }
            for u in &vertices {
                task_of[u.0] = tasks.len();
            }
            tasks.push(TaskPlan {
                name: vertices
                    .iter()
                    .map(|u| graph.vertex(*u).id.as_str())
                    .collect::<Vec<_>>()
                    .join("+"),
                vertices,
                parallelism: graph.vertex(v).parallelism,
            });
        }
        let mut edges = Vec::new();
        for e in &graph.edges {
            if chained.iter().any(|(a, b, _)| *a == e.from && *b == e.to) {
                continue;
            }
            let (p, q) = (
                graph.vertex(e.from).parallelism,
                graph.vertex(e.to).parallelism,
            );
            edges.push(EdgePlan {
                from: e.from,
                to: e.to,
                from_task: task_of[e.from.0],
                to_task: task_of[e.to.0],
                partitioning: e.partitioning,
                channels: if e.partitioning == Partitioning::Forward {
                    p
                } else {
                    p * q
                },
            });
        }
        Ok(ExecutionPlan {
            job_name: graph.name.clone(),
            chaining,
            tasks,
            edges,
            chained,
            vertex_ids: graph.vertices.iter().map(|v| v.id.clone()).collect(),
            vertex_kinds: graph.vertices.iter().map(|v| v.kind().as_str()).collect(),
            vertex_types: graph.vertices.iter().map(|v| v.type_name.clone()).collect(),
        })
    }

    /// The id of a vertex.
    pub fn vertex_id(&self, v: VertexId) -> &str {
        &self.vertex_ids[v.0]
    }

    /// Total number of task subtasks; each runs in a thread of its own, except the pairs of
    /// [`ExecutionPlan::thread_pairs`].
    pub fn subtask_count(&self) -> usize {
        self.tasks.iter().map(|t| t.parallelism).sum()
    }

    /// The (source task, channel task) pairs, by task index, whose subtasks may share a
    /// thread, subtask `i` with subtask `i` (docs/architecture.md, "Threads"): a hash edge
    /// that is the only output of a task headed by a source and the only input of a task of
    /// the same parallelism (2 or more). Whether they do depends on the source too: it must
    /// never wait inside its poll.
    ///
    /// The channel task may send on (say a window sending to a file sink of parallelism 1).
    /// Every task downstream of it has an input from a task not headed by a source, so it is
    /// in no pair and runs alone; and it keeps taking from its queue (barrier alignment holds
    /// what blocked inputs send, it does not stop reading) unless it waits for room itself,
    /// further down the same acyclic graph. So a paired channel task that waits for room waits
    /// for threads that get on without it.
    pub fn thread_pairs(&self) -> Vec<(usize, usize)> {
        let outputs = |t: usize| self.edges.iter().filter(move |e| e.from_task == t);
        let inputs = |t: usize| self.edges.iter().filter(move |e| e.to_task == t);
        self.edges
            .iter()
            .filter(|e| {
                let (a, b) = (&self.tasks[e.from_task], &self.tasks[e.to_task]);
                e.partitioning == Partitioning::Hash
                    && a.parallelism == b.parallelism
                    && a.parallelism >= 2
                    && self.vertex_kinds[a.vertices[0].0] == "source"
                    && outputs(e.from_task).count() == 1
                    && inputs(e.to_task).count() == 1
            })
            .map(|e| (e.from_task, e.to_task))
            .collect()
    }

    /// `source generator`, or `source` when the type is not known.
    fn kind_and_type(&self, v: VertexId) -> String {
        match &self.vertex_types[v.0] {
            Some(t) => format!("{} {t}", self.vertex_kinds[v.0]),
            None => self.vertex_kinds[v.0].to_string(),
        }
    }

    /// The plan as a Graphviz DOT digraph: one cluster per task, a box per vertex labelled
    /// with its id, kind, component type and parallelism.
    pub fn to_dot(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "digraph \"{}\" {{", self.job_name);
        let _ = writeln!(s, "  rankdir=LR;\n  node [shape=box];");
        for (i, t) in self.tasks.iter().enumerate() {
            let _ = writeln!(s, "  subgraph cluster_{i} {{");
            let _ = writeln!(s, "    label=\"task {} x{}\";", t.name, t.parallelism);
            for v in &t.vertices {
                let _ = writeln!(
                    s,
                    "    \"{}\" [label=\"{}\\n{} x{}\"];",
                    self.vertex_id(*v),
                    self.vertex_id(*v),
                    self.kind_and_type(*v),
                    t.parallelism
                );
            }
            let _ = writeln!(s, "  }}");
        }
        for (a, b, p) in &self.chained {
            let _ = writeln!(
                s,
                "  \"{}\" -> \"{}\" [label=\"{} (chained)\", style=dashed];",
                self.vertex_id(*a),
                self.vertex_id(*b),
                p
            );
        }
        for e in &self.edges {
            let _ = writeln!(
                s,
                "  \"{}\" -> \"{}\" [label=\"{} ({})\"];",
                self.vertex_id(e.from),
                self.vertex_id(e.to),
                e.partitioning,
                plural(e.channels, "channel", "channels")
            );
        }
        s.push_str("}\n");
        s
    }
}

impl fmt::Display for ExecutionPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "job {}: {} in {}, {}, chaining {}",
            self.job_name,
            plural(self.vertex_ids.len(), "vertex", "vertices"),
            plural(self.tasks.len(), "task", "tasks"),
            plural(self.subtask_count(), "subtask", "subtasks"),
            if self.chaining { "on" } else { "off" }
        )?;
        writeln!(f, "tasks:")?;
        for t in &self.tasks {
            let members: Vec<String> = t
                .vertices
                .iter()
                .map(|v| match &self.vertex_types[v.0] {
                    Some(t) => format!("{} {} ({t})", self.vertex_kinds[v.0], self.vertex_id(*v)),
                    None => format!("{} {}", self.vertex_kinds[v.0], self.vertex_id(*v)),
                })
                .collect();
            writeln!(
                f,
                "  {} x{}: {}",
                t.name,
                t.parallelism,
                members.join(" -> ")
            )?;
        }
        writeln!(f, "edges:")?;
        for (a, b, p) in &self.chained {
            writeln!(
                f,
                "  {} -> {}: {} (chained)",
                self.vertex_id(*a),
                self.vertex_id(*b),
                p
            )?;
        }
        for e in &self.edges {
            writeln!(
                f,
                "  {} -> {}: {}, {}",
                self.vertex_id(e.from),
                self.vertex_id(e.to),
                e.partitioning,
                plural(e.channels, "channel", "channels")
            )?;
        }
        let pairs = self.thread_pairs();
        if !pairs.is_empty() {
            writeln!(f, "threads (one per task subtask, except):")?;
        }
        for (a, b) in pairs {
            writeln!(
                f,
                "  {}#i and {}#i share one if the source never waits in its poll (generator)",
                self.tasks[a].name, self.tasks[b].name
            )?;
        }
        Ok(())
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
