//! From a parsed job file and the resolved settings to a runtime [`JobGraph`] and [`JobConfig`].
//!
//! Component types and settings are checked against a [`Registry`]; the graph's rules (edges,
//! partitioning against parallelism, keyed inputs, inputs present, a source, no cycle) are the
//! runtime's own ([`JobGraph::problems`]): this module only resolves input names and maps each
//! problem to its place in the file. Every problem is returned at once, in file order, together
//! with those parsing found ([`JobFile::problems`]).

use crate::error::{JobFileError, JobFileErrors, Problem};
use crate::jobfile::{
    section_of, sort_errors, source_event_time_fields, vertex_fields, JobFile, VertexSpec,
};
use crate::settings::Settings;
use crate::suggest::did_you_mean;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use tidemark_operators::on_error::ErrorPolicy;
use tidemark_operators::operators::key_by::key_by;
use tidemark_operators::{BuildEnv, Built, ConfigError, FieldError, Registry, SettingProblem};
use tidemark_runtime::{
    BoxError, GraphError, JobConfig, JobGraph, Operator, Partitioning, Sink, Source,
    SubtaskContext, VertexId, VertexKind,
};

/// The runtime configuration of a run with these settings.
pub fn job_config(settings: &Settings, seed: Option<u64>) -> JobConfig {
    JobConfig {
        latency: settings.latency,
        buffer_timeout: settings.buffer_timeout,
        channel_capacity: settings.channel_capacity,
        chaining: settings.chaining,
        seed,
        e2e_latency_everywhere: settings.e2e_latency_everywhere,
        marker_buckets: settings.marker_buckets.clone(),
        e2e_buckets: settings.e2e_buckets.clone(),
        checkpoint_interval: settings.checkpoint_interval,
        checkpoint_policy: settings.checkpoint_policy,
        idle_strategy: settings.idle_strategy,
        ..JobConfig::default()
    }
}

/// The fields a vertex of `kind` accepts besides its component's own.
fn common_fields(kind: VertexKind) -> Vec<&'static str> {
    match kind {
        VertexKind::Source => ["type", "parallelism"]
            .into_iter()
            .chain(source_event_time_fields().iter().copied())
            .collect(),
        _ => vertex_fields()
            .iter()
            .copied()
            .chain([EDGE_KEY, crate::exchange::FIELD])
            .collect(),
    }
}

/// On an operator or sink: the CEL expression its `hash` input edges route and group on.
const EDGE_KEY: &str = "key";

/// [`build_graph_with`] the built-in components, not checking input files.
pub fn build_graph(
    job: &JobFile,
    default_parallelism: NonZeroUsize,
) -> Result<JobGraph, JobFileErrors> {
    build_graph_with(job, default_parallelism, &Registry::builtin(), false)
}

/// Checks the job file as a graph and builds it with the components of `registry`, with
/// `default_parallelism` for vertices that set none; `check_inputs` makes sources check now
/// that their input files exist (`tidemark validate`). Every problem found, the parse's
/// included, is returned in file order.
pub fn build_graph_with(
    job: &JobFile,
    default_parallelism: NonZeroUsize,
    registry: &Registry,
    check_inputs: bool,
) -> Result<JobGraph, JobFileErrors> {
    build_graph_in(
        job,
        default_parallelism,
        registry,
        check_inputs,
        #[cfg(feature = "kafka")]
        &tidemark_kafka::KafkaJob::new(),
    )
}

/// As [`build_graph_with`], its exchanges through Kafka in the job's Kafka context `kafka`.
pub(crate) fn build_graph_in(
    job: &JobFile,
    default_parallelism: NonZeroUsize,
    registry: &Registry,
    check_inputs: bool,
    #[cfg(feature = "kafka")] kafka: &std::sync::Arc<tidemark_kafka::KafkaJob>,
) -> Result<JobGraph, JobFileErrors> {
    let mut errors: Vec<JobFileError> = job.problems.clone();
    let env = BuildEnv {
        job_dir: job.dir.clone(),
        check_inputs,
    };

    // Components: type, fields, settings.
    let built: Vec<Option<Built>> = job
        .vertices
        .iter()
        .map(|v| component(job, v, &env, registry, &mut errors))
        .collect();

    // The graph: every vertex (a placeholder factory for one whose component failed), so that
    // the graph's rules are checked all the same.
    let mut graph = JobGraph::new(job.name.clone());
    let mut ids: HashMap<&str, VertexId> = HashMap::new();
    let mut exchanges = crate::exchange::Exchanges::new(
        #[cfg(feature = "kafka")]
        kafka,
    );
    for (v, built) in job.vertices.iter().zip(built) {
        let p = v.parallelism.unwrap_or(default_parallelism).get();
        let added = match built {
            Some(Built::Source(f)) => graph.add_source(&v.id, p, f),
            Some(Built::Operator(f)) => graph.add_operator(&v.id, p, f),
            Some(Built::Sink(f)) => graph.add_sink(&v.id, p, f),
            None => add_placeholder(&mut graph, v.kind, &v.id, p),
        };
        match added {
            Ok(id) => {
                if v.kind == VertexKind::Source {
                    graph.set_source_options(id, v.source_options);
                }
                let keyed = registry.find(v.kind, &v.type_name).is_some_and(|c| c.keyed);
                graph.set_keyed(id, keyed);
                match crate::exchange::key_groups(job, v, keyed, p) {
                    // Behind a Kafka exchange: one key group per exchange partition.
                    Ok(Some(n)) => graph.set_max_parallelism(id, n),
                    Ok(None) => {
                        if let Some(m) = v.max_parallelism.or(job.max_parallelism) {
                            graph.set_max_parallelism(id, m);
                        }
                    }
                    Err(e) => errors.push(*e),
                }
                if !v.type_name.is_empty() {
                    graph.set_type_name(id, &v.type_name);
                }
                ids.insert(v.id.as_str(), id);
            }
            Err(e) => {
                let path = [section_of(v.kind), v.id.as_str(), "parallelism"];
                errors.push(job.error(&path, Some(v.vref()), Problem::Graph(e)));
            }
        }
    }

    // Inputs: names resolve to vertices; the edges go in unchecked, for the graph to judge.
    let readable: Vec<String> = job
        .vertices
        .iter()
        .filter(|v| v.kind != VertexKind::Sink)
        .map(|v| v.id.clone())
        .collect();
    for v in &job.vertices {
        let Some(&to) = ids.get(v.id.as_str()) else {
            continue;
        };
        // A vertex reading itself would be a cycle: do not offer it.
        let known: Vec<String> = readable.iter().filter(|id| **id != v.id).cloned().collect();
        for (i, input) in v.inputs.iter().enumerate() {
            let input_field = v.input_fields.get(i).copied().unwrap_or("input");
            // Written in the file but unreadable (its own error says why): not unknown.
            let written = VertexKind::ALL
                .iter()
                .any(|k| job.source_map.find(&[k.section(), input]).is_some());
            if job.vertex(input).is_none() && written {
                continue;
            }
            if job.vertex(input).is_none() {
                let path = [section_of(v.kind), v.id.as_str(), input_field];
                errors.push(job.error(
                    &path,
                    Some(v.vref()),
                    Problem::UnknownInput {
                        input: input.clone(),
                        suggestion: did_you_mean(input, known.iter().map(String::as_str)),
                        known: known.clone(),
                    },
                ));
                continue;
            }
            let Some(&from) = ids.get(input.as_str()) else {
                continue; // not in the graph: its own error says why
            };
            let partitioning = v
                .partition
                .unwrap_or_else(|| graph.default_partitioning(from, to));
            let input_p = || {
                let input_v = job.vertex(input).expect("known input");
                input_v.parallelism.unwrap_or(default_parallelism).get()
            };
            let keyed = v.kind != VertexKind::Source && v.config.contains_key(EDGE_KEY);
            if v.exchange.is_some() {
                let p = input_p();
                let from = match keyed {
                    true => {
                        match keyed_edge(job, v, input, (from, p), &env, &mut graph, &mut errors) {
                            Some(stage) => stage,
                            None => continue,
                        }
                    }
                    false => from,
                };
                let to_p = v.parallelism.unwrap_or(default_parallelism).get();
                let (graph, errors) = (&mut graph, &mut errors);
                crate::exchange::connect(
                    job,
                    v,
                    input,
                    (from, p),
                    (to, to_p),
                    graph,
                    errors,
                    &mut exchanges,
                );
                continue;
            }
            if keyed {
                let p = input_p();
                if let Some(stage) =
                    keyed_edge(job, v, input, (from, p), &env, &mut graph, &mut errors)
                {
                    graph.add_edge(stage, to, Partitioning::Hash);
                }
                continue;
            }
            graph.add_edge(from, to, partitioning);
        }
    }

    // The graph's rules, mapped to the file.
    for problem in graph.problems() {
        let vertex_of = |id: &str| job.vertex(id);
        let (v, field, problem) = match problem {
            // Said already where the file lacks `input` or names unknown ones.
            GraphError::MissingInput { .. } => continue,
            // A source written but unreadable has its own error.
            GraphError::NoSource
                if job.problems.iter().any(|e| {
                    e.vertex
                        .as_ref()
                        .is_some_and(|v| v.kind == VertexKind::Source)
                }) =>
            {
                continue
            }
            GraphError::NoSource => (None, "", Problem::NoSource),
            GraphError::OutputFromSink(from, to) => {
                (vertex_of(&to), "input", Problem::InputIsSink(from))
            }
            GraphError::DuplicateEdge { from, to } => {
                (vertex_of(&to), "input", Problem::DuplicateInput(from))
            }
            GraphError::InputIntoSource(ref to) => {
                (vertex_of(to), "input", Problem::Graph(problem.clone()))
            }
            GraphError::ForwardParallelismMismatch { ref to, .. }
            | GraphError::KeyedNotHashed { ref to, .. } => {
                let v = vertex_of(to);
                // Point at `partition` when written, else at the parallelism that differs.
                let field = if v.is_some_and(|v| v.partition.is_some()) {
                    "partition"
                } else {
                    "input"
                };
                (v, field, Problem::Graph(problem.clone()))
            }
            GraphError::Cycle(ref path) => (
                vertex_of(&path[0]),
                "input",
                Problem::Graph(problem.clone()),
            ),
            GraphError::DuplicateId(ref id)
            | GraphError::InvalidId(ref id)
            | GraphError::Parallelism { ref id, .. } => {
                (vertex_of(id), "", Problem::Graph(problem.clone()))
            }
            GraphError::MaxParallelism { ref id, .. } => {
                let v = vertex_of(id);
                // Point at the vertex's own `max_parallelism` when written.
                let field = if v.is_some_and(|v| v.max_parallelism.is_some()) {
                    "max_parallelism"
                } else {
                    ""
                };
                (v, field, Problem::Graph(problem.clone()))
            }
        };
        let error = match v {
            Some(v) => {
                let mut path = vec![section_of(v.kind), v.id.as_str()];
                if !field.is_empty() {
                    path.push(field);
                }
                job.error(&path, Some(v.vref()), problem)
            }
            None => JobFileError {
                file: job.file.clone(),
                pos: None,
                vertex: None,
                problem,
            },
        };
        errors.push(error);
    }

    if errors.is_empty() {
        Ok(graph)
    } else {
        sort_errors(&mut errors);
        Err(JobFileErrors(errors))
    }
}

/// The edge `input` → `v` where `v` has `key:`: a key stage ([`key_by`]) after the input, with
/// its parallelism and a forward edge (so it runs in the input's task); the caller connects
/// the stage to `v` (a `hash` edge, or an exchange). The stage is named `<v>.key`
/// (`<v>.key.<input>` when `v` has several inputs).
fn keyed_edge(
    job: &JobFile,
    v: &VertexSpec,
    input: &str,
    (from, parallelism): (VertexId, usize),
    env: &BuildEnv,
    graph: &mut JobGraph,
    errors: &mut Vec<JobFileError>,
) -> Option<VertexId> {
    let section = section_of(v.kind);
    if v.partition.is_some_and(|p| p != Partitioning::Hash) {
        errors.push(
            job.error(
                &[section, &v.id, "partition"],
                Some(v.vref()),
                Problem::Invalid {
                    field: "partition".into(),
                    message: "`key` is what a hash edge routes on: use partition: hash, or leave \
                          partition out"
                        .into(),
                },
            ),
        );
        return None;
    }
    // A join's key may differ per side: `{left: EXPR, right: EXPR}`.
    let side = v
        .inputs
        .iter()
        .position(|i| i == input)
        .and_then(|i| v.input_fields.get(i))
        .filter(|f| **f != "input");
    let written = match (v.config.get(EDGE_KEY), side) {
        (Some(serde_json::Value::Object(sides)), Some(side)) => sides.get(*side),
        (other, _) => other,
    };
    let expression = match written {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        other => {
            errors.push(job.error(
                &[section, &v.id, EDGE_KEY],
                Some(v.vref()),
                Problem::Invalid {
                    field: EDGE_KEY.into(),
                    message: match side {
                        Some(side) => format!(
                            "expected a CEL expression (a string), or one per side \
                             ({{left: EXPR, right: EXPR}}); found {} for the {side} side",
                            other.map_or("nothing".to_owned(), |o| o.to_string())
                        ),
                        None => format!(
                            "expected a CEL expression (a string), found {}",
                            other.map_or("nothing".to_owned(), |o| o.to_string())
                        ),
                    },
                },
            ));
            return None;
        }
    };
    // A bad `on_error` is the component's to report; the stage then fails records.
    let on_error: ErrorPolicy = v
        .config
        .get("on_error")
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default();
    let factory = match key_by(&expression, on_error, env) {
        Ok(f) => f,
        Err(e) => {
            let type_name = v.type_name.clone();
            let error = e.into_config_error(&type_name, EDGE_KEY);
            if let ConfigError::Invalid { problems, .. } = error {
                for error in problems {
                    errors.push(setting_error(job, v, type_name.clone(), error, None));
                }
            }
            return None;
        }
    };
    let name = if v.inputs.len() > 1 {
        format!("{}.key.{input}", v.id)
    } else {
        format!("{}.key", v.id)
    };
    if job.vertex(&name).is_some() {
        errors.push(job.error(
            &[section, &v.id, EDGE_KEY],
            Some(v.vref()),
            Problem::Invalid {
                field: EDGE_KEY.into(),
                message: format!(
                    "the key stage would be named \"{name}\", which is taken by another vertex"
                ),
            },
        ));
        return None;
    }
    match graph.add_operator(&name, parallelism, factory) {
        Ok(stage) => {
            graph.add_edge(from, stage, Partitioning::Forward);
            Some(stage)
        }
        Err(e) => {
            errors.push(job.error(
                &[section, &v.id, EDGE_KEY],
                Some(v.vref()),
                Problem::Graph(e),
            ));
            None
        }
    }
}

/// Adds a vertex whose component could not be built, so that the graph's rules still see it.
/// Never run: a job with errors is not started.
fn add_placeholder(
    graph: &mut JobGraph,
    kind: VertexKind,
    id: &str,
    parallelism: usize,
) -> Result<VertexId, GraphError> {
    fn unbuilt() -> BoxError {
        "this vertex's component has errors and was not built".into()
    }
    match kind {
        VertexKind::Source => graph.add_source(
            id,
            parallelism,
            |_: &SubtaskContext| -> Result<Box<dyn Source>, BoxError> { Err(unbuilt()) },
        ),
        VertexKind::Operator => graph.add_operator(
            id,
            parallelism,
            |_: &SubtaskContext| -> Result<Box<dyn Operator>, BoxError> { Err(unbuilt()) },
        ),
        VertexKind::Sink => graph.add_sink(
            id,
            parallelism,
            |_: &SubtaskContext| -> Result<Box<dyn Sink>, BoxError> { Err(unbuilt()) },
        ),
    }
}

/// Checks a vertex's type and fields and builds its factory; records problems in `errors`.
fn component(
    job: &JobFile,
    v: &VertexSpec,
    env: &BuildEnv,
    registry: &Registry,
    errors: &mut Vec<JobFileError>,
) -> Option<Built> {
    let section = section_of(v.kind);
    let known: Vec<String> = registry
        .type_names(v.kind)
        .into_iter()
        .map(str::to_owned)
        .collect();
    if v.type_name.is_empty() {
        // A `type` of the wrong form was reported by the parse.
        if job.source_map.find(&[section, &v.id, "type"]).is_none() {
            errors.push(job.error(
                &[section, &v.id],
                Some(v.vref()),
                Problem::MissingField {
                    field: "type",
                    expected: format!("the component type, one of {}", known.join(", ")),
                },
            ));
        }
        return None;
    }
    let Some(info) = registry.find(v.kind, &v.type_name) else {
        let suggestion = did_you_mean(&v.type_name, known.iter().map(String::as_str));
        let elsewhere = VertexKind::ALL
            .into_iter()
            .find(|&k| k != v.kind && registry.find(k, &v.type_name).is_some());
        errors.push(job.error(
            &[section, &v.id, "type"],
            Some(v.vref()),
            Problem::UnknownType {
                section: v.kind.as_str(),
                type_name: v.type_name.clone(),
                known,
                suggestion,
                elsewhere,
            },
        ));
        return None;
    };
    let accepted: Vec<&str> = info
        .fields
        .iter()
        .map(String::as_str)
        .chain(common_fields(v.kind))
        .collect();
    let mut config = v.config.clone();
    if v.kind != VertexKind::Source {
        config.remove(EDGE_KEY); // the edge's, see `keyed_edge`
    }
    let mut unknown = false;
    let mut suggested: Vec<String> = Vec::new();
    for field in config.clone().keys() {
        if !info.fields.iter().any(|f| f == field) {
            unknown = true;
            config.remove(field);
            let suggestion = did_you_mean(field, accepted.iter().copied());
            suggested.extend(suggestion.clone());
            errors.push(job.error(
                &[section, &v.id, field],
                Some(v.vref()),
                Problem::UnknownField {
                    field: field.clone(),
                    expected: accepted.iter().map(|s| s.to_string()).collect(),
                    suggestion,
                },
            ));
        }
    }
    // The other settings are still checked, so every problem shows at once.
    match info.build(serde_json::Value::Object(config), env) {
        Ok(built) if !unknown => Some(built),
        Ok(_) => None,
        Err(ConfigError::Invalid {
            type_name,
            problems,
        }) => {
            for error in problems {
                // `topic` for `topics`: the unknown field's suggestion says it already.
                if let SettingProblem::MissingField(field) = &error.problem {
                    if error.path.is_empty() && suggested.contains(field) {
                        continue;
                    }
                }
                let suggestion = match &error.problem {
                    SettingProblem::UnknownField { field, expected } => {
                        did_you_mean(field, expected.iter().map(String::as_str))
                    }
                    SettingProblem::UnknownValue { value, expected } => {
                        did_you_mean(value, expected.iter().map(String::as_str))
                    }
                    _ => None,
                };
                errors.push(setting_error(job, v, type_name.clone(), error, suggestion));
            }
            None
        }
        Err(other) => {
            errors.push(job.error(
                &[section, &v.id],
                Some(v.vref()),
                Problem::Component(other.to_string()),
            ));
            None
        }
    }
}

/// A component's problem with one setting, located at the setting (or the closest written
/// parent of it).
fn setting_error(
    job: &JobFile,
    v: &VertexSpec,
    type_name: String,
    error: FieldError,
    suggestion: Option<String>,
) -> JobFileError {
    let location: Vec<String> = error.location().into_iter().map(str::to_owned).collect();
    // What is said about a secret's value is not shown.
    let (error, suggestion) = if crate::redact::path_is_secret(location.iter().map(String::as_str))
    {
        let problem = match error.problem {
            SettingProblem::Message(_) => SettingProblem::Message(
                "invalid value (not shown: the setting is secret)".to_string(),
            ),
            SettingProblem::UnknownValue { expected, .. } => SettingProblem::UnknownValue {
                value: crate::redact::REDACTED.to_owned(),
                expected,
            },
            other => other,
        };
        (
            FieldError {
                path: error.path,
                problem,
            },
            None,
        )
    } else {
        (error, suggestion)
    };
    let mut path = vec![section_of(v.kind), v.id.as_str()];
    path.extend(location.iter().map(String::as_str));
    // An expression's error points into the expression as written in the file.
    let in_expression = match &error.problem {
        SettingProblem::Expression {
            expression,
            line,
            column,
            ..
        } => job.pos(&path).and_then(|key| {
            job.source_map
                .position_in_value(key, expression, *line, *column)
        }),
        _ => None,
    };
    let mut located = job.error(
        &path,
        Some(v.vref()),
        Problem::ComponentSetting {
            type_name,
            error,
            suggestion,
        },
    );
    if in_expression.is_some() {
        located.pos = in_expression;
    }
    located
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        let job = JobFile::parse(text, "job.yaml").expect("parses");
        match build_graph(&job, NonZeroUsize::MIN) {
            Ok(_) => vec![],
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    fn one_error(text: &str) -> String {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        errs.into_iter().next().unwrap()
    }

    const GOOD: &str = "\
name: demo
sources:
  gen:
    type: generator
    rate: 1000
operators:
  work:
    type: map
    input: gen
    cost: 2us
sinks:
  out:
    type: discard
    input: work
    partition: rebalance
";

    #[test]
    fn max_parallelism_from_the_vertex_then_the_job_then_the_default() {
        let text = GOOD
            .replace("name: demo\n", "name: demo\nmax_parallelism: 256\n")
            .replace("    cost: 2us\n", "    cost: 2us\n    max_parallelism: 4\n");
        let job = JobFile::parse(&text, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::new(2).unwrap()).unwrap();
        let m: Vec<u32> = graph
            .vertices()
            .iter()
            .map(|v| v.max_parallelism())
            .collect();
        assert_eq!(m, [256, 4, 256]);
        let graph = build_graph(
            &JobFile::parse(GOOD, "job.yaml").unwrap(),
            NonZeroUsize::MIN,
        );
        assert!(graph
            .unwrap()
            .vertices()
            .iter()
            .all(|v| v.max_parallelism() == 128));
        // Below the parallelism: named at the vertex's own field.
        let e = one_error(&GOOD.replace(
            "    cost: 2us\n",
            "    cost: 2us\n    parallelism: 3\n    max_parallelism: 2\n",
        ));
        assert!(
            e.contains("job.yaml:10:5: operator \"work\": field \"max_parallelism\"")
                || e.contains("max_parallelism 2 is less than the parallelism 3"),
            "{e}"
        );
        assert!(
            e.contains("max_parallelism 2 is less than the parallelism 3"),
            "{e}"
        );
        // Out of range: a parse error naming the field.
        let job = JobFile::parse(
            &GOOD.replace("name: demo\n", "name: demo\nmax_parallelism: 0\n"),
            "job.yaml",
        );
        let e = job.map(|j| j.problems.iter().map(|e| e.to_string()).collect::<Vec<_>>());
        let e = format!("{e:?}");
        assert!(
            e.contains("max_parallelism") && e.contains("from 1 to 32768"),
            "{e}"
        );
    }

    #[test]
    fn builds_a_good_job() {
        let job = JobFile::parse(GOOD, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::new(2).unwrap()).unwrap();
        assert_eq!(graph.vertices().len(), 3);
        assert_eq!(graph.edges().len(), 2);
        assert_eq!(graph.edges()[0].partitioning, Partitioning::Forward);
        assert_eq!(graph.edges()[1].partitioning, Partitioning::Rebalance);
        assert!(graph.vertices().iter().all(|v| v.parallelism() == 2));
    }

    #[test]
    fn unknown_field_suggests_the_component_field() {
        let e = one_error(&GOOD.replace("    cost: 2us", "    cots: 2us"));
        assert!(
            e.starts_with(
                "job.yaml:10:5: operator \"work\": unknown field \"cots\", expected one of "
            ),
            "{e}"
        );
        assert!(e.contains("cost"), "{e}");
        assert!(e.ends_with("did you mean \"cost\"?"), "{e}");
    }

    #[test]
    fn unknown_field_suggests_a_common_field() {
        let e = one_error(&GOOD.replace("partition: rebalance", "partiton: rebalance"));
        assert!(
            e.starts_with("job.yaml:15:5: sink \"out\": unknown field \"partiton\""),
            "{e}"
        );
        assert!(e.ends_with("did you mean \"partition\"?"), "{e}");
    }

    #[test]
    fn unknown_type_lists_the_section_types() {
        let e = one_error(&GOOD.replace("type: map", "type: mapp"));
        assert!(
            e.starts_with(
                "job.yaml:8:5: operator \"work\": unknown operator type \"mapp\", expected one of "
            ),
            "{e}"
        );
        assert!(e.contains("map"), "{e}");
        assert!(e.ends_with("did you mean \"map\"?"), "{e}");
        let e = one_error(&GOOD.replace("type: discard", "type: generator"));
        assert!(e.contains("unknown sink type \"generator\""), "{e}");
        assert!(
            e.ends_with("; \"generator\" is a source type: move the vertex under \"sources\""),
            "{e}"
        );
    }

    /// Parse problems, component problems and graph problems come out together, in file
    /// order: nothing is held back for a second round.
    #[test]
    fn every_error_at_once_in_file_order() {
        let text = "\
name: three
sources:
  gen:
    type: generator
    cuont: 10
    parallelism: 0
    scael: 2
    rate: fast
operators:
  work:
    type: map
    input: [gen, nowhere]
sinks:
  out:
    type: discard
    input: work
    parallelism: 4294967297
";
        let errs = errors(text);
        let lines: Vec<&str> = errs.iter().map(|e| e.split(' ').next().unwrap()).collect();
        assert_eq!(
            lines,
            [
                "job.yaml:5:5:",
                "job.yaml:6:5:",
                "job.yaml:7:5:",
                "job.yaml:8:5:",
                "job.yaml:12:5:",
                "job.yaml:17:5:"
            ],
            "{errs:#?}"
        );
        assert!(
            errs[0].contains("unknown field \"cuont\"")
                && errs[0].ends_with("did you mean \"count\"?"),
            "{errs:#?}"
        );
        assert!(
            errs[1].contains("parallelism must be at least 1, found 0"),
            "{errs:#?}"
        );
        assert!(errs[2].contains("unknown field \"scael\""), "{errs:#?}");
        assert!(
            errs[3].contains("invalid generator settings: rate: invalid type"),
            "{errs:#?}"
        );
        assert!(errs[4].contains("unknown input \"nowhere\""), "{errs:#?}");
        assert!(
            errs[5].contains("parallelism 4294967297 is more than the maximum of 1024"),
            "{errs:#?}"
        );
    }

    /// The line of a component's error comes from its field path, not from its message.
    #[test]
    fn component_errors_are_located_by_path() {
        let text = GOOD.replace(
            "    rate: 1000",
            "    rate: 1000\n    keys: 0\n    disorder:\n      delay: 1h\n      fraction: 3",
        );
        let e = one_error(&text);
        // `keys: 0` is checked after the disorder mapping parses; its problem is the first.
        assert!(e.starts_with("job.yaml:6:5: source \"gen\": invalid generator settings: keys: must be at least 1"), "{e}");
        let e = one_error(&GOOD.replace(
            "    rate: 1000",
            "    rate: 1000\n    disorder:\n      delay: 1h\n      fraction: 3",
        ));
        assert!(
            e.starts_with(
                "job.yaml:8:7: source \"gen\": invalid generator settings: disorder.fraction:"
            ),
            "{e}"
        );
    }

    const KEYED: &str = "\
name: keyed
sources:
  gen:
    type: generator
    parallelism: 2
operators:
  sum:
    type: reduce
    input: gen
    parallelism: 2
    aggregate: sum
sinks:
  out:
    type: discard
    input: sum
";

    #[test]
    fn keyed_operators_default_to_hash() {
        let job = JobFile::parse(KEYED, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        assert_eq!(graph.edges()[0].partitioning, Partitioning::Hash);
        assert_eq!(graph.edges()[1].partitioning, Partitioning::Rebalance);
        // A window too.
        let text = KEYED.replace("type: reduce", "type: window\n    size: 1s");
        let job = JobFile::parse(&text, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        assert_eq!(graph.edges()[0].partitioning, Partitioning::Hash);
    }

    #[test]
    fn other_partitioning_into_a_keyed_operator_is_an_error() {
        for p in ["forward", "rebalance", "broadcast"] {
            let text = KEYED.replace(
                "    aggregate: sum",
                &format!("    aggregate: sum\n    partition: {p}"),
            );
            let e = one_error(&text);
            assert!(
                e.starts_with(&format!("job.yaml:12:5: operator \"sum\": edge \"gen\" -> \"sum\": \"sum\" groups records by key, so its input must be partitioned by hash, not {p}")),
                "{e}"
            );
        }
        // At parallelism 1 there is nothing to split.
        let text = KEYED
            .replace("parallelism: 2", "parallelism: 1")
            .replace("parallelism: 2", "parallelism: 1")
            .replace(
                "    aggregate: sum",
                "    aggregate: sum\n    partition: rebalance",
            );
        assert!(errors(&text).is_empty(), "{:?}", errors(&text));
    }

    #[test]
    fn x_keys_are_ignored() {
        let text = format!(
            "x-defaults: &gen\n  type: generator\n  rate: 5\n{}",
            GOOD.replace("    type: generator\n    rate: 1000", "    <<: *gen")
        );
        assert!(errors(&text).is_empty(), "{:?}", errors(&text));
        let job = JobFile::parse(&text, "job.yaml").unwrap();
        assert_eq!(
            job.vertex("gen").unwrap().config["rate"],
            serde_json::json!(5)
        );
    }

    #[test]
    fn huge_parallelism_is_one_bounded_error() {
        let text = GOOD.replace(
            "    rate: 1000",
            "    rate: 1000\n    parallelism: 99999999999999999999",
        );
        let errs = errors(&text.replace("cost: 2us", "cost: fast"));
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert_eq!(
            errs[0],
            "job.yaml:6:5: source \"gen\": field \"parallelism\": parallelism 99999999999999999999 \
             is more than the maximum of 1024 subtasks per vertex"
        );
        assert!(
            errs[1].contains("cost: invalid duration \"fast\""),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_misspelt_required_field_is_one_error() {
        let text = GOOD.replace("    type: discard", "    type: file\n    pth: out.jsonl");
        let e = one_error(&text);
        assert!(
            e.contains("unknown field \"pth\"") && e.ends_with("did you mean \"path\"?"),
            "{e}"
        );
    }

    #[test]
    fn a_malformed_vertex_is_not_also_an_unknown_input() {
        let text = GOOD.replace(
            "  gen:\n    type: generator\n    rate: 1000\n",
            "  gen: 5\n",
        );
        let e = one_error(&text);
        assert!(
            e.starts_with("job.yaml:3:3: source \"gen\": expected a mapping"),
            "{e}"
        );
    }

    #[test]
    fn missing_type_lists_the_registered_types() {
        let e = one_error("name: x\nsources:\n  gen:\n    rate: 5\n");
        assert_eq!(
            e,
            "job.yaml:3:3: source \"gen\": missing field \"type\": expected the component type, \
             one of generator, file, stdin"
        );
    }

    #[test]
    fn unknown_input_lists_ids_and_suggests() {
        let e = one_error(&GOOD.replace("input: work", "input: wrok"));
        assert_eq!(
            e,
            "job.yaml:14:5: sink \"out\": unknown input \"wrok\", expected one of the vertex ids \
             gen, work; did you mean \"work\"?"
        );
    }

    #[test]
    fn component_errors_point_at_the_field_and_suggest_variants() {
        let text = "\
name: demo
sources:
  gen:
    type: generator
operators:
  sum:
    type: reduce
    input: gen
    aggregate: summ
sinks:
  out:
    type: discard
    input: sum
";
        let e = one_error(text);
        assert!(
            e.starts_with("job.yaml:9:5: operator \"sum\": invalid reduce settings: aggregate:"),
            "{e}"
        );
        assert!(e.ends_with("did you mean \"sum\"?"), "{e}");
        let e = one_error(&GOOD.replace("cost: 2us", "cost: fast"));
        assert!(
            e.starts_with("job.yaml:10:5: operator \"work\": invalid map settings: cost: invalid duration \"fast\""),
            "{e}"
        );
    }

    #[test]
    fn sink_as_input() {
        let text = format!("{GOOD}  out2:\n    type: discard\n    input: out\n");
        let e = one_error(&text);
        assert!(
            e.starts_with("job.yaml:18:5: sink \"out2\": input \"out\" is a sink"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_input() {
        let e = one_error(&GOOD.replace("input: gen", "input: [gen, gen]"));
        assert!(
            e.contains("operator \"work\": input \"gen\" is listed twice"),
            "{e}"
        );
    }

    #[test]
    fn cycles_name_the_vertices() {
        let text = "\
name: loop
sources:
  gen:
    type: generator
operators:
  a:
    type: map
    input: [gen, c]
  b:
    type: map
    input: a
  c:
    type: map
    input: b
sinks:
  out:
    type: discard
    input: c
";
        let e = one_error(text);
        assert_eq!(
            e,
            "job.yaml:8:5: operator \"a\": the inputs form a cycle: a -> b -> c -> a; a job graph \
             must be acyclic"
        );
        let e = one_error(&GOOD.replace("input: gen", "input: work"));
        assert!(e.contains("cycle: work -> work"), "{e}");
    }

    #[test]
    fn no_source() {
        let errs = errors("name: x\nsinks:\n  out:\n    type: discard\n    input: nothing\n");
        assert_eq!(
            errs,
            [
                "job.yaml:5:5: sink \"out\": unknown input \"nothing\", and there is no source or \
                 operator to read from",
                "job.yaml: the job has no source: add one under \"sources\""
            ]
        );
        let errs = errors("name: x\n");
        assert_eq!(
            errs,
            ["job.yaml: the job has no source: add one under \"sources\""]
        );
    }

    #[test]
    fn forward_needs_equal_parallelism() {
        let text = GOOD
            .replace("    rate: 1000", "    rate: 1000\n    parallelism: 2")
            .replace("    cost: 2us", "    cost: 2us\n    partition: forward");
        let e = one_error(&text);
        assert!(
            e.starts_with("job.yaml:12:5: operator \"work\": edge \"gen\" -> \"work\": forward partitioning needs equal parallelism, but \"gen\" has 2 and \"work\" has 1"),
            "{e}"
        );
        // Without an explicit partition, different parallelism means rebalance.
        let text = GOOD.replace("    rate: 1000", "    rate: 1000\n    parallelism: 2");
        let job = JobFile::parse(&text, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        assert_eq!(graph.edges()[0].partitioning, Partitioning::Rebalance);
    }

    #[test]
    fn several_errors_at_once() {
        let text = GOOD
            .replace("type: map", "type: mapp")
            .replace("input: work", "input: wrok");
        assert_eq!(errors(&text).len(), 2);
    }

    #[test]
    fn source_unknown_fields_list_the_event_time_fields() {
        let e = one_error(&GOOD.replace("    rate: 1000", "    rate: 1000\n    watermark: {}"));
        assert!(
            e.starts_with(
                "job.yaml:6:5: source \"gen\": unknown field \"watermark\", expected one of "
            ),
            "{e}"
        );
        for field in [
            "count",
            "disorder",
            "type",
            "parallelism",
            "timestamp_before_max",
            "timestamp_after_max",
            "invalid_timestamp",
            "watermarks",
        ] {
            assert!(
                e.contains(&format!(" {field},")) || e.contains(&format!(" {field};")),
                "{field}: {e}"
            );
        }
        assert!(e.ends_with("did you mean \"watermarks\"?"), "{e}");
        // Operators do not list them.
        let e = one_error(&GOOD.replace("    cost: 2us", "    cost: 2us\n    watermark: {}"));
        assert!(!e.contains("watermarks"), "{e}");
    }

    const EDGE_KEY_JOB: &str = "\
name: keyed
sources:
  gen:
    type: generator
    parallelism: 2
  more:
    type: generator
operators:
  per_mod:
    type: reduce
    input: gen
    key: 'key % 5'
    aggregate: count
    parallelism: 3
sinks:
  out:
    type: discard
    input: per_mod
";

    #[test]
    fn an_edge_key_adds_a_key_stage_before_a_hash_edge() {
        let job = JobFile::parse(EDGE_KEY_JOB, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        let plan = tidemark_runtime::ExecutionPlan::new(&graph, true)
            .unwrap()
            .to_string();
        assert!(
            plan.contains("gen -> per_mod.key: forward (chained)"),
            "{plan}"
        );
        assert!(plan.contains("per_mod.key -> per_mod: hash"), "{plan}");
        assert!(plan.contains("gen+per_mod.key x2"), "{plan}");
        // Several inputs: one stage each, named after the input.
        let two = EDGE_KEY_JOB.replace("input: gen\n    key", "input: [gen, more]\n    key");
        let job = JobFile::parse(&two, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        let plan = tidemark_runtime::ExecutionPlan::new(&graph, true)
            .unwrap()
            .to_string();
        assert!(plan.contains("gen -> per_mod.key.gen: forward"), "{plan}");
        assert!(plan.contains("more -> per_mod.key.more: forward"), "{plan}");
    }

    const JOIN_JOB: &str = "\
name: joined
sources:
  pay:
    type: generator
  click:
    type: generator
operators:
  j:
    type: join
    left: pay
    right: click
    key: {left: 'key % 5', right: 'key % 7'}
    between: [-10s, 0s]
    parallelism: 3
sinks:
  out:
    type: discard
    input: j
";

    #[test]
    fn a_join_reads_left_then_right_over_hash_edges_with_a_key_per_side() {
        let job = JobFile::parse(JOIN_JOB, "job.yaml").unwrap();
        let j = job.vertex("j").unwrap();
        assert_eq!(j.inputs, ["pay", "click"]);
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        let plan = tidemark_runtime::ExecutionPlan::new(&graph, true)
            .unwrap()
            .to_string();
        assert!(
            plan.contains("pay -> j.key.pay: forward (chained)"),
            "{plan}"
        );
        assert!(
            plan.contains("click -> j.key.click: forward (chained)"),
            "{plan}"
        );
        assert!(plan.contains("j.key.pay -> j: hash"), "{plan}");
        assert!(plan.contains("j.key.click -> j: hash"), "{plan}");
        // The left input is the join's first: the order the runtime numbers them in.
        let to_j: Vec<&str> = graph
            .inputs(graph.find("j").unwrap())
            .map(|e| graph.vertex(e.from).id())
            .collect();
        assert_eq!(to_j, ["j.key.pay", "j.key.click"]);
    }

    /// Behind a Kafka exchange both sides go through one topic, each writer after its side's
    /// key stage, and one reader feeds the join.
    #[cfg(feature = "kafka")]
    #[test]
    fn a_join_behind_an_exchange_has_a_writer_per_side_and_one_reader() {
        let text = JOIN_JOB.replace(
            "    parallelism: 3\n",
            "    parallelism: 3\n    exchange: {kafka: {brokers: \"127.0.0.1:9\", partitions: 4}}\n",
        );
        let job = JobFile::parse(&text, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::MIN).unwrap();
        let plan = tidemark_runtime::ExecutionPlan::new(&graph, true)
            .unwrap()
            .to_string();
        for side in ["pay", "click"] {
            assert!(
                plan.contains(&format!(
                    "j.key.{side} -> j.exchange.{side}: forward (chained)"
                )),
                "{plan}"
            );
        }
        let to_j: Vec<&str> = graph
            .inputs(graph.find("j").unwrap())
            .map(|e| graph.vertex(e.from).id())
            .collect();
        assert_eq!(to_j, ["j.exchange-in"], "{plan}");
        // One key group per exchange partition, on both sides.
        assert_eq!(graph.vertex(graph.find("j").unwrap()).max_parallelism(), 4);
    }

    #[test]
    fn join_errors_point_at_their_field() {
        let e = one_error(&JOIN_JOB.replace("    right: click\n", ""));
        assert!(
            e.starts_with(
                "job.yaml:8:3: operator \"j\": field \"right\": missing: a join needs `right`"
            ),
            "{e}"
        );
        let e = one_error(&JOIN_JOB.replace("right: click", "right: clik"));
        assert!(
            e.starts_with("job.yaml:11:5: operator \"j\": unknown input \"clik\"")
                && e.contains("did you mean \"click\""),
            "{e}"
        );
        let e = one_error(&JOIN_JOB.replace("    left: pay\n", "    left: pay\n    input: pay\n"));
        assert!(
            e.starts_with(
                "job.yaml:11:5: operator \"j\": field \"input\": a join reads `left` and `right`"
            ),
            "{e}"
        );
        let e = one_error(&JOIN_JOB.replace("[-10s, 0s]", "[10s, 0s]"));
        assert!(
            e.starts_with("job.yaml:13:5: operator \"j\": invalid join settings: between: the lower bound is above the upper bound"),
            "{e}"
        );
        let e = one_error(&JOIN_JOB.replace("right: 'key % 7'", "other: 'key'"));
        assert!(
            e.starts_with(
                "job.yaml:12:5: operator \"j\": field \"key\": expected a CEL expression"
            ) && e.contains("for the right side"),
            "{e}"
        );
        // Said at the join's `partition` (once per input edge).
        let errs = errors(&JOIN_JOB.replace(
            "    between: [-10s, 0s]\n",
            "    between: [-10s, 0s]\n    partition: rebalance\n",
        ));
        assert!(!errs.is_empty());
        for e in &errs {
            assert!(
                e.starts_with("job.yaml:14:5: operator \"j\": field \"partition\": `key` is what a hash edge routes on"),
                "{e}"
            );
        }
    }

    #[test]
    fn edge_key_errors() {
        let e = one_error(&EDGE_KEY_JOB.replace("'key % 5'", "'key %'"));
        assert!(
            e.starts_with(
                "job.yaml:12:16: operator \"per_mod\": invalid reduce settings: key: syntax error"
            ),
            "{e}"
        );
        let e = one_error(&EDGE_KEY_JOB.replace("    key:", "    partition: rebalance\n    key:"));
        assert!(e.starts_with("job.yaml:12:5: operator \"per_mod\": field \"partition\": `key` is what a hash edge routes on"), "{e}");
    }

    #[test]
    fn expression_errors_point_into_the_expression() {
        let job = |where_: &str| {
            format!(
                "name: x\nsources:\n  gen:\n    type: generator\noperators:\n  paid:\n    \
                 type: filter\n    input: gen\n    where: {where_}\nsinks:\n  out:\n    \
                 type: discard\n    input: paid\n"
            )
        };
        assert_eq!(
            one_error(&job("'v +'")),
            "job.yaml:9:16: operator \"paid\": invalid filter settings: where: syntax error: \
             the expression ends too early, in `v +`"
        );
        assert_eq!(
            one_error(&job("\"value > 1 && lenght(s) > 2\"")),
            "job.yaml:9:26: operator \"paid\": invalid filter settings: where: unknown \
             function 'lenght' (did you mean 'size'?), in `value > 1 && lenght(s) > 2`"
        );
        // A block scalar: the line inside it.
        let e = one_error(&job("|\n      value > 1 &&\n        sise(s) > 2"));
        assert!(e.starts_with("job.yaml:11:9: "), "{e}");
        assert!(
            e.contains("unknown function 'sise' (did you mean 'size'?)"),
            "{e}"
        );
        // Folded text is found from the column on.
        let e = one_error(&job(">-\n      value > 1 &&\n      sise(s) > 2"));
        assert!(e.starts_with("job.yaml:11:7: "), "{e}");
    }

    #[test]
    fn nested_component_errors_point_at_the_nested_key() {
        let text = GOOD.replace(
            "    rate: 1000",
            "    rate: 1000\n    disorder:\n      fraction: 2\n      delay: 1h",
        );
        let e = one_error(&text);
        assert_eq!(
            e,
            "job.yaml:7:7: source \"gen\": invalid generator settings: disorder.fraction: 2 is \
             not a fraction from 0 to 1"
        );
        let text = GOOD.replace(
            "    rate: 1000",
            "    rate: 1000\n    disorder:\n      fractoin: 0.1\n      delay: 1h",
        );
        let e = one_error(&text);
        assert!(
            e.starts_with("job.yaml:7:7: source \"gen\": invalid generator settings: disorder: unknown field `fractoin`"),
            "{e}"
        );
        assert!(e.ends_with("did you mean \"fraction\"?"), "{e}");
        let text = GOOD.replace(
            "    rate: 1000",
            "    rate: 1000\n    disorder:\n      fraction: 0.1\n      delay: 1h\n      distribution: expnential",
        );
        let e = one_error(&text);
        assert!(e.starts_with("job.yaml:9:7: source \"gen\": invalid generator settings: disorder.distribution: unknown value `expnential`"), "{e}");
        assert!(e.ends_with("did you mean \"exponential\"?"), "{e}");
    }

    #[test]
    fn window_event_time_settings() {
        let text = "\
name: w
sources:
  gen:
    type: generator
    watermarks: {}
operators:
  w:
    type: window
    input: gen
    size: 1s
    aggregate: count
    time: event
    allowed_lateness: 5s
sinks:
  out:
    type: discard
    input: w
";
        assert!(errors(text).is_empty(), "{:?}", errors(text));
        let e = one_error(&text.replace("    time: event\n", ""));
        assert!(
            e.starts_with("job.yaml:12:5: operator \"w\": invalid window settings: allowed_lateness: only applies with time: event"),
            "{e}"
        );
        let e = one_error(&text.replace("time: event", "time: evnet"));
        assert!(e.ends_with("did you mean \"event\"?"), "{e}");
    }
}
