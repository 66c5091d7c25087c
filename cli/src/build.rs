//! From a parsed job file and the resolved settings to a runtime [`JobGraph`] and [`JobConfig`]:
//! component types and fields, inputs, cycles, partitioning and parallelism are checked here,
//! each error located in the file.

use crate::error::{JobFileError, JobFileErrors, Problem};
use crate::jobfile::{
    component_kind, known_types, section_of, JobFile, VertexSpec, SOURCE_EVENT_TIME_FIELDS,
    VERTEX_FIELDS,
};
use crate::settings::Settings;
use crate::suggest::did_you_mean;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use tidemark_operators::{self as operators, BuildEnv, Built};
use tidemark_runtime::{JobConfig, JobGraph, Partitioning, VertexId, VertexKind};

/// The runtime configuration of a run with these settings.
pub fn job_config(settings: &Settings, seed: Option<u64>) -> JobConfig {
    JobConfig {
        latency: settings.latency,
        buffer_timeout: settings.buffer_timeout,
        chaining: settings.chaining,
        seed,
        e2e_latency_everywhere: settings.e2e_latency_everywhere,
        marker_buckets: settings.marker_buckets.clone(),
        e2e_buckets: settings.e2e_buckets.clone(),
        ..JobConfig::default()
    }
}

/// The fields a vertex of `kind` accepts besides its component's own.
fn common_fields(kind: VertexKind) -> Vec<&'static str> {
    match kind {
        VertexKind::Source => ["type", "parallelism"]
            .into_iter()
            .chain(SOURCE_EVENT_TIME_FIELDS)
            .collect(),
        _ => VERTEX_FIELDS.to_vec(),
    }
}

/// Checks the job file as a graph and builds it, with `default_parallelism` for vertices that
/// set none. Every problem found is returned, in file order.
pub fn build_graph(
    job: &JobFile,
    default_parallelism: NonZeroUsize,
) -> Result<JobGraph, JobFileErrors> {
    let mut errors: Vec<JobFileError> = Vec::new();
    let env = BuildEnv {
        job_dir: job.dir.clone(),
    };

    // Components: type, fields, configuration.
    let mut factories = Vec::with_capacity(job.vertices.len());
    for v in &job.vertices {
        factories.push(component(job, v, &env, &mut errors));
    }

    // Inputs.
    let by_id: HashMap<&str, &VertexSpec> =
        job.vertices.iter().map(|v| (v.id.as_str(), v)).collect();
    let readable: Vec<String> = job
        .vertices
        .iter()
        .filter(|v| v.kind != VertexKind::Sink)
        .map(|v| v.id.clone())
        .collect();
    let mut inputs_ok = true;
    for v in &job.vertices {
        let path = [section_of(v.kind), v.id.as_str(), "input"];
        // A vertex reading itself would be a cycle: do not offer it.
        let known: Vec<String> = readable.iter().filter(|id| **id != v.id).cloned().collect();
        for (i, input) in v.inputs.iter().enumerate() {
            let problem = match by_id.get(input.as_str()) {
                None => Some(Problem::UnknownInput {
                    input: input.clone(),
                    suggestion: did_you_mean(input, known.iter().map(String::as_str)),
                    known: known.clone(),
                }),
                Some(u) if u.kind == VertexKind::Sink => Some(Problem::InputIsSink(input.clone())),
                Some(_) if v.inputs[..i].contains(input) => {
                    Some(Problem::DuplicateInput(input.clone()))
                }
                Some(_) => None,
            };
            if let Some(problem) = problem {
                inputs_ok = false;
                errors.push(job.error(&path, Some(v.vref()), problem));
            }
        }
    }
    if !job.vertices.iter().any(|v| v.kind == VertexKind::Source) {
        errors.push(JobFileError {
            file: job.file.clone(),
            pos: None,
            vertex: None,
            problem: Problem::NoSource,
        });
    }
    if inputs_ok {
        if let Some(cycle) = find_cycle(job) {
            let first = job.vertex(&cycle[0]).expect("cycle of known ids");
            let path = [section_of(first.kind), first.id.as_str(), "input"];
            errors.push(job.error(&path, Some(first.vref()), Problem::Cycle(cycle)));
        }
    }

    // Partitioning against parallelism.
    let parallelism = |v: &VertexSpec| v.parallelism.unwrap_or(default_parallelism).get();
    let mut edges = Vec::new();
    if inputs_ok {
        for (to, v) in job.vertices.iter().enumerate() {
            for input in &v.inputs {
                let from = job
                    .vertices
                    .iter()
                    .position(|u| &u.id == input)
                    .expect("inputs checked");
                let (p, q) = (parallelism(&job.vertices[from]), parallelism(v));
                let partitioning = v.partition.unwrap_or(if p == q {
                    Partitioning::Forward
                } else {
                    Partitioning::Rebalance
                });
                if partitioning == Partitioning::Forward && p != q {
                    let path = [section_of(v.kind), v.id.as_str(), "partition"];
                    errors.push(job.error(
                        &path,
                        Some(v.vref()),
                        Problem::ForwardMismatch {
                            from: input.clone(),
                            to: v.id.clone(),
                            from_parallelism: p,
                            to_parallelism: q,
                        },
                    ));
                }
                edges.push((from, to, partitioning));
            }
        }
    }

    if !errors.is_empty() {
        errors.sort_by_key(|e| e.pos.map_or(usize::MAX, |p| p.line));
        return Err(JobFileErrors(errors));
    }

    let mut graph = JobGraph::new(job.name.clone());
    let graph_error = |v: Option<&VertexSpec>, e: tidemark_runtime::GraphError| {
        JobFileErrors(vec![JobFileError {
            file: job.file.clone(),
            pos: v.and_then(|v| job.pos(&[section_of(v.kind), &v.id])),
            vertex: v.map(VertexSpec::vref),
            problem: Problem::Component(e.to_string()),
        }])
    };
    let mut ids: Vec<VertexId> = Vec::with_capacity(job.vertices.len());
    for (v, factory) in job.vertices.iter().zip(factories) {
        let p = parallelism(v);
        let added = match factory.expect("no errors, so every component was built") {
            Built::Source(f) => graph.add_source(&v.id, p, f),
            Built::Operator(f) => graph.add_operator(&v.id, p, f),
            Built::Sink(f) => graph.add_sink(&v.id, p, f),
        };
        let id = added.map_err(|e| graph_error(Some(v), e))?;
        if v.kind == VertexKind::Source {
            graph.set_source_options(id, v.source_options);
        }
        ids.push(id);
    }
    for (from, to, partitioning) in edges {
        graph
            .connect(ids[from], ids[to], partitioning)
            .map_err(|e| graph_error(Some(&job.vertices[to]), e))?;
    }
    graph.validate().map_err(|e| graph_error(None, e))?;
    Ok(graph)
}

/// Checks a vertex's type and fields and builds its factory; records problems in `errors`.
fn component(
    job: &JobFile,
    v: &VertexSpec,
    env: &BuildEnv,
    errors: &mut Vec<JobFileError>,
) -> Option<Built> {
    let section = section_of(v.kind);
    let kind = component_kind(v.kind);
    let Some(info) = operators::find(kind, &v.type_name) else {
        let known = known_types(v.kind);
        let suggestion = did_you_mean(&v.type_name, known.iter().map(String::as_str));
        let elsewhere = operators::components()
            .iter()
            .find(|c| c.type_name == v.type_name)
            .map(|c| c.kind.as_str());
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
        .copied()
        .chain(common_fields(v.kind))
        .collect();
    let before = errors.len();
    for field in v.config.keys() {
        if !info.fields.contains(&field.as_str()) {
            errors.push(job.error(
                &[section, &v.id, field],
                Some(v.vref()),
                Problem::UnknownField {
                    field: field.clone(),
                    expected: accepted.iter().map(|s| s.to_string()).collect(),
                    suggestion: did_you_mean(field, accepted.iter().copied()),
                },
            ));
        }
    }
    if errors.len() > before {
        return None;
    }
    let config = serde_json::Value::Object(v.config.clone());
    match operators::build(kind, &v.type_name, config, env) {
        Ok(built) => {
            let matches = matches!(
                (&built, v.kind),
                (Built::Source(_), VertexKind::Source)
                    | (Built::Operator(_), VertexKind::Operator)
                    | (Built::Sink(_), VertexKind::Sink)
            );
            if matches {
                Some(built)
            } else {
                errors.push(job.error(
                    &[section, &v.id],
                    Some(v.vref()),
                    Problem::Component(format!(
                        "type \"{}\" did not build a {}",
                        v.type_name,
                        v.kind.as_str()
                    )),
                ));
                None
            }
        }
        Err(e) => {
            let mut message = e.to_string();
            if let Some(suggestion) = variant_suggestion(&message) {
                message.push_str(&format!("; did you mean \"{suggestion}\"?"));
            }
            // Point at the field the message is about, if it names one, and at the key inside
            // it for a nested one (`disorder.fraction: …`).
            let field = v.config.keys().find(|k| {
                [
                    format!("`{k}`"),
                    format!("\"{k}\""),
                    format!("{k}:"),
                    format!(": {k}."),
                ]
                .iter()
                .any(|p| message.contains(p.as_str()))
            });
            let nested = field.and_then(|f| {
                let at = [format!(": {f}."), format!("{f}: unknown field `")]
                    .iter()
                    .find_map(|p| message.find(p.as_str()).map(|at| at + p.len()))?;
                let tail = &message[at..];
                Some(tail[..tail.find([':', ' ', '`'])?].to_string())
            });
            let path: Vec<&str> = match (field, &nested) {
                (Some(f), Some(sub)) => vec![section, &v.id, f, sub.as_str()],
                (Some(f), None) => vec![section, &v.id, f],
                _ => vec![section, &v.id],
            };
            errors.push(job.error(&path, Some(v.vref()), Problem::Component(message)));
            None
        }
    }
}

/// For serde's ``unknown variant `summ`, expected one of `count`, `sum`, …`` (or ``unknown
/// field `…`, …`` in a nested mapping): the closest expected name.
fn variant_suggestion(message: &str) -> Option<String> {
    let (at, prefix) = ["unknown variant `", "unknown field `"]
        .into_iter()
        .find_map(|p| message.find(p).map(|at| (at, p)))?;
    let rest = &message[at + prefix.len()..];
    let (value, rest) = rest.split_once('`')?;
    let expected = &rest[rest.find("expected ")?..];
    let variants: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    did_you_mean(value, variants)
}

/// A cycle among the vertices' inputs, in data-flow order and closed (`a -> b -> a`), if any.
fn find_cycle(job: &JobFile) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = job
        .vertices
        .iter()
        .enumerate()
        .map(|(i, v)| (v.id.as_str(), i))
        .collect();
    let n = job.vertices.len();
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut state = vec![0u8; n];
    let mut stack: Vec<usize> = Vec::new();
    fn visit(
        i: usize,
        job: &JobFile,
        index: &HashMap<&str, usize>,
        state: &mut [u8],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        state[i] = 1;
        stack.push(i);
        for input in &job.vertices[i].inputs {
            let Some(&j) = index.get(input.as_str()) else {
                continue;
            };
            if state[j] == 1 {
                let at = stack.iter().position(|&s| s == j).expect("on the stack");
                return Some(stack[at..].to_vec());
            }
            if state[j] == 0 {
                if let Some(c) = visit(j, job, index, state, stack) {
                    return Some(c);
                }
            }
        }
        stack.pop();
        state[i] = 2;
        None
    }
    for i in 0..n {
        if state[i] == 0 {
            if let Some(mut cycle) = visit(i, job, &index, &mut state, &mut stack) {
                // The stack follows inputs (downstream to upstream); data flows the other way.
                cycle.reverse();
                // Start at the vertex written first in the file.
                let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
                cycle.rotate_left(first);
                let mut ids: Vec<String> =
                    cycle.iter().map(|&k| job.vertices[k].id.clone()).collect();
                ids.push(ids[0].clone());
                return Some(ids);
            }
        }
    }
    None
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
            e.starts_with("job.yaml:12:5: operator \"work\": partition forward needs equal parallelism, but input \"gen\" has 2 and \"work\" has 1"),
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
        assert!(e.starts_with("job.yaml:9:7: source \"gen\": invalid generator settings: disorder.distribution: unknown variant `expnential`"), "{e}");
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
