//! `exchange: {kafka: …}` on an operator's or sink's input edges (`docs/kafka.md`, "Scale-out:
//! exchanges through Kafka"): each input edge becomes `input → <v>.exchange` (a hidden writer
//! sink, chained into the input's task, after the key stage when `v` has `key:`), and
//! `<v>.exchange-in → v` (one hidden reader source with `v`'s parallelism, forward).

use std::collections::HashMap;

use crate::error::{JobFileError, Problem};
use crate::jobfile::{section_of, JobFile, VertexSpec};
use tidemark_runtime::{JobGraph, Partitioning, VertexId};

/// The field on a vertex.
pub(crate) const FIELD: &str = "exchange";
/// The type names the plan shows for the hidden vertices.
pub(crate) const WRITER_TYPE: &str = "kafka-exchange-writer";
/// See [`WRITER_TYPE`].
pub(crate) const READER_TYPE: &str = "kafka-exchange-reader";

/// Whether `v`'s keyed state moves with the partitions of its exchange: a keyed vertex
/// (`keyed`: its component is keyed in the registry, as `window` and `reduce` are and a
/// library user's [`Component::keyed`](tidemark_operators::Component::keyed) is) behind
/// `exchange: {kafka: …}` in a job that takes checkpoints. Whatever keyed state its operator
/// keeps ([`Operator::has_keyed_state`](tidemark_runtime::Operator::has_keyed_state)) moves.
#[cfg(feature = "kafka")]
pub(crate) fn keeps_state(job: &JobFile, v: &VertexSpec, keyed: bool) -> bool {
    v.exchange.is_some() && keyed && job.checkpoint_interval.is_some()
}

/// The key groups (`max_parallelism`) of a keyed vertex fed by a Kafka exchange: the
/// exchange's `partitions` (M = N), so that each exchange partition is one key group, in the
/// state topic and in a checkpoint to a directory alike (`docs/state.md`, "Key groups and
/// rescaling"). `None` for any other vertex, or when the settings have no valid partition
/// count (building the exchange names that problem). A `max_parallelism` on the vertex itself
/// other than N, or a parallelism above N, is an error.
pub(crate) fn key_groups(
    job: &JobFile,
    v: &VertexSpec,
    keyed: bool,
    parallelism: usize,
) -> Result<Option<u32>, Box<JobFileError>> {
    if !keyed {
        return Ok(None);
    }
    let Some(n) = v
        .exchange
        .as_ref()
        .and_then(|e| e.get("kafka"))
        .and_then(|k| k.get("partitions"))
        .and_then(serde_json::Value::as_u64)
        .filter(|n| (1..=u64::from(tidemark_runtime::key_group::MAX_KEY_GROUPS)).contains(n))
    else {
        return Ok(None);
    };
    let n = n as u32;
    let error = |field: &str, message: String| {
        Box::new(job.error(
            &[section_of(v.kind), v.id.as_str(), field],
            Some(v.vref()),
            Problem::Invalid {
                field: field.into(),
                message,
            },
        ))
    };
    if let Some(m) = v.max_parallelism.filter(|m| *m != n) {
        return Err(error(
            "max_parallelism",
            format!(
                "max_parallelism {m}, but the vertex is fed by a Kafka exchange of {n} \
                 partitions: its key groups are the exchange's partitions (leave \
                 max_parallelism out, or set it to {n})"
            ),
        ));
    }
    if parallelism > n as usize {
        return Err(error(
            "parallelism",
            format!(
                "parallelism {parallelism} is more than the {n} partitions of the Kafka exchange \
                 that feeds the vertex: its key groups are the exchange's partitions, one \
                 subtask holds at least one (give the exchange more partitions)"
            ),
        ));
    }
    Ok(Some(n))
}

/// Warnings for each path from a Kafka source (a `kafka` source, or the reader of another
/// exchange) to an exchange writer that crosses an edge other than `forward` (a `rebalance`,
/// `hash` or `broadcast` edge): the records of one source partition may then reach the writer
/// out of order, and the reader behind the exchange, which drops a record whose origin is not
/// newer than the highest it took (`docs/kafka.md`, "Replays upstream of the exchange"), could
/// drop records that were not replays. `validate` prints them and `run` logs them.
pub(crate) fn order_warnings(graph: &JobGraph) -> Vec<String> {
    let mut warnings = Vec::new();
    for source in graph.vertices() {
        let (Some("kafka" | READER_TYPE), tidemark_runtime::VertexKind::Source, Some(start)) =
            (source.type_name(), source.kind(), graph.find(source.id()))
        else {
            continue;
        };
        // Depth first, each vertex once per source: (vertex, the first edge not forward).
        let mut stack = vec![(start, None::<(VertexId, VertexId, Partitioning)>)];
        let mut seen = std::collections::HashSet::new();
        while let Some((v, crossed)) = stack.pop() {
            if !seen.insert((v, crossed.is_some())) {
                continue;
            }
            if graph.vertex(v).type_name() == Some(WRITER_TYPE) {
                if let Some((from, to, partitioning)) = crossed {
                    warnings.push(format!(
                        "the {} edge {} -> {} sits between the Kafka source \"{}\" and the \
                         exchange writer \"{}\": records of one input partition may reach the \
                         exchange out of order, and the reader drops a record whose origin is not \
                         newer than one it took, so records could be lost; connect them with \
                         forward edges (or chain them)",
                        partitioning.as_str(),
                        graph.vertex(from).id(),
                        graph.vertex(to).id(),
                        source.id(),
                        graph.vertex(v).id(),
                    ));
                }
                continue;
            }
            for edge in graph.outputs(v) {
                let crossed = crossed.or(match edge.partitioning {
                    Partitioning::Forward => None,
                    other => Some((edge.from, edge.to, other)),
                });
                stack.push((edge.to, crossed));
            }
        }
    }
    warnings.extend(window_warnings(graph));
    warnings.sort();
    warnings.dedup();
    warnings
}

/// Warnings for each `window` whose results reach an exchange writer: a window's results
/// carry no origin (they come from a watermark, not from one input message), so the reader
/// of that exchange cannot tell a result fired again after a failover from a new one, and the
/// keyed vertex behind it counts such repeats again (`docs/kafka.md`, "Replays upstream of the
/// exchange"). A `reduce` in the same place is exact: each output carries the position of the
/// exchange message it came from.
fn window_warnings(graph: &JobGraph) -> Vec<String> {
    let mut warnings = Vec::new();
    for window in graph.vertices() {
        let (Some("window"), Some(start)) = (window.type_name(), graph.find(window.id())) else {
            continue;
        };
        let mut stack = vec![start];
        let mut seen = std::collections::HashSet::new();
        while let Some(v) = stack.pop() {
            if !seen.insert(v) {
                continue;
            }
            if graph.vertex(v).type_name() == Some(WRITER_TYPE) {
                warnings.push(format!(
                    "the results of window \"{}\" cross the exchange writer \"{}\": a window's \
                     results carry no origin, so after a failover a result fired again is \
                     counted again behind that exchange (at least once between the two, not \
                     exactly once)",
                    window.id(),
                    graph.vertex(v).id(),
                ));
                continue;
            }
            stack.extend(graph.outputs(v).map(|edge| edge.to));
        }
    }
    warnings
}

/// The exchanges built so far, by downstream vertex id: its reader (`None` when its settings
/// failed, already reported).
pub(crate) struct Exchanges {
    built: HashMap<String, Option<Built>>,
    /// The job's Kafka context.
    #[cfg(feature = "kafka")]
    kafka: std::sync::Arc<tidemark_kafka::KafkaJob>,
}

impl Exchanges {
    /// None built yet; they will share `kafka`.
    pub(crate) fn new(
        #[cfg(feature = "kafka")] kafka: &std::sync::Arc<tidemark_kafka::KafkaJob>,
    ) -> Self {
        Exchanges {
            built: HashMap::new(),
            #[cfg(feature = "kafka")]
            kafka: kafka.clone(),
        }
    }
}

#[cfg(feature = "kafka")]
struct Built {
    exchange: std::sync::Arc<tidemark_kafka::exchange::Exchange>,
}

#[cfg(not(feature = "kafka"))]
struct Built;

/// The problem with `v`'s `exchange` value, at `exchange` (or deeper).
fn problem(job: &JobFile, v: &VertexSpec, path: &[&str], message: String) -> JobFileError {
    let mut full = vec![section_of(v.kind), v.id.as_str(), FIELD];
    full.extend_from_slice(path);
    job.error(
        &full,
        Some(v.vref()),
        Problem::Invalid {
            field: FIELD.into(),
            message,
        },
    )
}

/// The settings under `exchange: {kafka: …}`, or the problem with the shape.
#[cfg(feature = "kafka")]
fn kafka_settings<'a>(
    job: &JobFile,
    v: &'a VertexSpec,
) -> Result<&'a serde_json::Value, Box<JobFileError>> {
    let shape = "expected `exchange: {kafka: {brokers: HOST:PORT, partitions: N}}`";
    let Some(serde_json::Value::Object(m)) = &v.exchange else {
        return Err(Box::new(problem(
            job,
            v,
            &[],
            format!("{shape}, found {}", describe(v)),
        )));
    };
    for key in m.keys() {
        if key != "kafka" {
            return Err(Box::new(problem(
                job,
                v,
                &[key],
                format!("unknown exchange kind \"{key}\": the only kind is `kafka`"),
            )));
        }
    }
    match m.get("kafka") {
        Some(settings @ serde_json::Value::Object(_)) => Ok(settings),
        Some(other) => Err(Box::new(problem(
            job,
            v,
            &["kafka"],
            format!("{shape}, found {other}"),
        ))),
        None => Err(Box::new(problem(
            job,
            v,
            &[],
            format!("{shape}, found {{}}"),
        ))),
    }
}

#[cfg(feature = "kafka")]
fn describe(v: &VertexSpec) -> String {
    v.exchange
        .as_ref()
        .map_or_else(|| "nothing".to_owned(), |e| e.to_string())
}

/// Connects `input` (vertex `from`, `parallelism` subtasks; the key stage when `v` has `key:`)
/// to `v` (vertex `to`, `to_parallelism`) through the exchange of `v`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect(
    job: &JobFile,
    v: &VertexSpec,
    input: &str,
    (from, parallelism): (VertexId, usize),
    (to, to_parallelism): (VertexId, usize),
    graph: &mut JobGraph,
    errors: &mut Vec<JobFileError>,
    exchanges: &mut Exchanges,
) {
    if v.partition.is_some_and(|p| p != Partitioning::Hash) {
        errors.push(
            job.error(
                &[section_of(v.kind), &v.id, "partition"],
                Some(v.vref()),
                Problem::Invalid {
                    field: "partition".into(),
                    message: "an exchange through Kafka routes by the record key (one key, one \
                          partition): use partition: hash, or leave partition out"
                        .into(),
                },
            ),
        );
        return;
    }
    if !exchanges.built.contains_key(&v.id) {
        #[cfg(feature = "kafka")]
        let built = build(
            job,
            v,
            (to, to_parallelism),
            graph,
            errors,
            &exchanges.kafka,
        );
        #[cfg(not(feature = "kafka"))]
        let built = build(job, v, (to, to_parallelism), graph, errors);
        exchanges.built.insert(v.id.clone(), built);
    }
    let Some(Some(built)) = exchanges.built.get(&v.id) else {
        return;
    };
    add_writer(job, v, input, (from, parallelism), built, graph, errors);
}

#[cfg(feature = "kafka")]
fn build(
    job: &JobFile,
    v: &VertexSpec,
    (to, to_parallelism): (VertexId, usize),
    graph: &mut JobGraph,
    errors: &mut Vec<JobFileError>,
    kafka: &std::sync::Arc<tidemark_kafka::KafkaJob>,
) -> Option<Built> {
    use tidemark_kafka::exchange::{reader_id, Exchange};
    use tidemark_operators::ConfigError;

    let settings = match kafka_settings(job, v) {
        Ok(s) => s.clone(),
        Err(e) => {
            errors.push(*e);
            return None;
        }
    };
    let exchange = match Exchange::new(settings, &job.name, &v.id, kafka) {
        Ok(e) => e,
        Err(ConfigError::Invalid { problems, .. }) => {
            for error in problems {
                let mut path: Vec<String> = vec![FIELD.into(), "kafka".into()];
                path.extend(error.location().into_iter().map(str::to_owned));
                let at: Vec<&str> = path.iter().skip(1).map(String::as_str).collect();
                errors.push(problem(job, v, &at, error.to_string()));
            }
            return None;
        }
        Err(other) => {
            errors.push(problem(job, v, &["kafka"], other.to_string()));
            return None;
        }
    };
    if keeps_state(job, v, graph.vertex(to).is_keyed()) {
        exchange.keep_state();
        graph.set_keyed_store(to, exchange.store_factory());
    }
    let name = reader_id(&v.id);
    if let Err(e) = taken(job, v, &name) {
        errors.push(*e);
        return None;
    }
    match graph.add_source(&name, to_parallelism, exchange.reader_factory()) {
        Ok(reader) => {
            graph.set_type_name(reader, READER_TYPE);
            graph.set_partitioned_by_key(reader);
            // Watermarks cross the exchange when the job makes any: the reader passes on the
            // minimum over the writers, per partition, as soon as it has it.
            if job
                .vertices
                .iter()
                .any(|v| v.source_options.watermarks.is_some())
            {
                graph.set_source_options(
                    reader,
                    tidemark_runtime::SourceOptions {
                        timestamp_check: None,
                        watermarks: Some(tidemark_runtime::WatermarkStrategy {
                            max_out_of_orderness: std::time::Duration::ZERO,
                            interval: std::time::Duration::ZERO,
                            idleness: None,
                        }),
                    },
                );
            }
            graph.add_edge(reader, to, Partitioning::Forward);
            Some(Built { exchange })
        }
        Err(e) => {
            errors.push(problem(job, v, &[], e.to_string()));
            None
        }
    }
}

#[cfg(feature = "kafka")]
fn add_writer(
    job: &JobFile,
    v: &VertexSpec,
    input: &str,
    (from, parallelism): (VertexId, usize),
    built: &Built,
    graph: &mut JobGraph,
    errors: &mut Vec<JobFileError>,
) {
    let name = tidemark_kafka::exchange::writer_id(&v.id, input, v.inputs.len());
    if let Err(e) = taken(job, v, &name) {
        errors.push(*e);
        return;
    }
    // A join's inputs share its exchange: each record says which side it is for.
    let side = (v.input_fields == &crate::jobfile::JOIN_SIDES[..])
        .then(|| v.inputs.iter().position(|i| i == input))
        .flatten();
    match graph.add_sink(
        &name,
        parallelism,
        built.exchange.input_writer_factory(parallelism, side),
    ) {
        Ok(writer) => {
            graph.set_type_name(writer, WRITER_TYPE);
            graph.add_edge(from, writer, Partitioning::Forward);
        }
        Err(e) => errors.push(problem(job, v, &[], e.to_string())),
    }
}

#[cfg(not(feature = "kafka"))]
fn build(
    job: &JobFile,
    v: &VertexSpec,
    _: (VertexId, usize),
    _: &mut JobGraph,
    errors: &mut Vec<JobFileError>,
) -> Option<Built> {
    errors.push(problem(
        job,
        v,
        &[],
        "this tidemark was built without Kafka (cargo feature `kafka`)".into(),
    ));
    None
}

#[cfg(not(feature = "kafka"))]
fn add_writer(
    _: &JobFile,
    _: &VertexSpec,
    _: &str,
    _: (VertexId, usize),
    _: &Built,
    _: &mut JobGraph,
    _: &mut Vec<JobFileError>,
) {
}

/// A hidden vertex's name must be free.
#[cfg(feature = "kafka")]
fn taken(job: &JobFile, v: &VertexSpec, name: &str) -> Result<(), Box<JobFileError>> {
    if job.vertex(name).is_some() {
        return Err(Box::new(problem(
            job,
            v,
            &[],
            format!(
                "the exchange would add a vertex named \"{name}\", which is taken by another \
                 vertex"
            ),
        )));
    }
    Ok(())
}

/// One line per vertex with an exchange, for `tidemark plan`: which edges cross instances and
/// through which topic.
pub(crate) fn plan_text(job: &JobFile) -> String {
    let mut out = String::new();
    for v in job.vertices.iter().filter(|v| v.exchange.is_some()) {
        let settings = v
            .exchange
            .as_ref()
            .and_then(|e| e.get("kafka"))
            .cloned()
            .unwrap_or_default();
        let partitions = settings
            .get("partitions")
            .map_or_else(|| "?".to_owned(), |p| p.to_string());
        for input in &v.inputs {
            out.push_str(&format!(
                "  {input} -> {}: kafka exchange, topic tidemark-{}-{}-exchange ({partitions} \
                 partitions), keyed by the record key\n",
                v.id, job.name, v.id
            ));
        }
    }
    if out.is_empty() {
        out
    } else {
        format!("exchanges (edges across instances):\n{out}")
    }
}

#[cfg(all(test, feature = "kafka"))]
mod tests {
    use crate::build::build_graph;
    use crate::jobfile::JobFile;
    use std::num::NonZeroUsize;
    use tidemark_runtime::{ExecutionPlan, Partitioning, VertexKind};

    const JOB: &str = "name: ex
parallelism: 2
sources:
  gen:
    type: generator
operators:
  sum:
    type: reduce
    input: gen
    aggregate: sum
    exchange: {kafka: {brokers: \"127.0.0.1:9092\", partitions: 8}}
sinks:
  out:
    type: discard
    input: sum
";

    fn errors(text: &str) -> Vec<String> {
        let job = JobFile::parse(text, "job.yaml").expect("parses");
        match build_graph(&job, NonZeroUsize::new(2).unwrap()) {
            Ok(_) => vec![],
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn an_exchange_edge_becomes_a_writer_and_a_reader() {
        let job = JobFile::parse(JOB, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::new(2).unwrap()).unwrap();
        let edges: Vec<(String, String, Partitioning)> = graph
            .edges()
            .iter()
            .map(|e| {
                (
                    graph.vertex(e.from).id().to_owned(),
                    graph.vertex(e.to).id().to_owned(),
                    e.partitioning,
                )
            })
            .collect();
        let edge = |a: &str, b: &str, p| (a.to_owned(), b.to_owned(), p);
        assert!(edges.contains(&edge("gen", "sum.exchange", Partitioning::Forward)));
        assert!(edges.contains(&edge("sum.exchange-in", "sum", Partitioning::Forward)));
        assert!(!edges.iter().any(|(a, b, _)| a == "gen" && b == "sum"));
        let writer = graph.find("sum.exchange").unwrap();
        assert_eq!(graph.vertex(writer).kind(), VertexKind::Sink);
        assert_eq!(graph.vertex(writer).type_name(), Some(super::WRITER_TYPE));
        let reader = graph.find("sum.exchange-in").unwrap();
        assert_eq!(graph.vertex(reader).kind(), VertexKind::Source);
        assert_eq!(graph.vertex(reader).parallelism(), 2);
        // The writer runs in the generator's task, the reader in the reduce's.
        let plan = ExecutionPlan::new(&graph, true).unwrap().to_string();
        assert!(plan.contains("gen+sum.exchange x2"), "{plan}");
        assert!(plan.contains("sum.exchange-in+sum+out x2"), "{plan}");
        let text = super::plan_text(&job);
        assert_eq!(
            text,
            "exchanges (edges across instances):\n  gen -> sum: kafka exchange, topic \
             tidemark-ex-sum-exchange (8 partitions), keyed by the record key\n"
        );
    }

    #[test]
    fn a_keyed_vertex_behind_an_exchange_has_one_key_group_per_partition() {
        let max = |text: &str, id: &str| {
            let job = JobFile::parse(text, "job.yaml").unwrap();
            let graph = build_graph(&job, NonZeroUsize::new(2).unwrap()).unwrap();
            graph.vertex(graph.find(id).unwrap()).max_parallelism()
        };
        assert_eq!(max(JOB, "sum"), 8);
        // The job's max_parallelism is for the other keyed vertices.
        let job_wide = JOB.replace("name: ex\n", "name: ex\nmax_parallelism: 256\n");
        assert_eq!(max(&job_wide, "sum"), 8);
        // The vertex's own may say the same.
        let same = JOB.replace(
            "    aggregate: sum\n",
            "    aggregate: sum\n    max_parallelism: 8\n",
        );
        assert_eq!(max(&same, "sum"), 8);
        let other = JOB.replace(
            "    aggregate: sum\n",
            "    aggregate: sum\n    max_parallelism: 16\n",
        );
        let e = errors(&other);
        assert!(
            e.len() == 1
                && e[0].contains("operator \"sum\"")
                && e[0].contains(
                    "max_parallelism 16, but the vertex is fed by a Kafka exchange of 8 partitions"
                ),
            "{e:?}"
        );
        let wide = JOB.replace(
            "    aggregate: sum\n",
            "    aggregate: sum\n    parallelism: 9\n",
        );
        let e = errors(&wide);
        assert!(
            e.len() == 1
                && e[0]
                    .contains("parallelism 9 is more than the 8 partitions of the Kafka exchange"),
            "{e:?}"
        );
        // A vertex without keyed state behind an exchange keeps the default.
        let sink = "name: ex
sources:
  gen: {type: generator}
sinks:
  out:
    type: discard
    input: gen
    exchange: {kafka: {brokers: \"127.0.0.1:9092\", partitions: 2}}
";
        assert_eq!(max(sink, "out"), 128);
    }

    #[cfg(feature = "kafka")]
    #[test]
    fn an_edge_other_than_forward_between_a_kafka_source_and_an_exchange_is_warned_about() {
        let text = |partition: &str| {
            format!(
                "name: ex
sources:
  orders:
    type: kafka
    brokers: \"127.0.0.1:9\"
    topics: [orders]
operators:
  clean:
    type: map
    input: orders
    partition: {partition}
    set: {{seen: 'true'}}
  per_user:
    type: reduce
    input: clean
    aggregate: sum
    exchange: {{kafka: {{brokers: \"127.0.0.1:9\", partitions: 8}}}}
sinks:
  out:
    type: discard
    input: per_user
"
            )
        };
        let warnings = |partition: &str| order_warnings_of(&text(partition));
        assert_eq!(warnings("forward"), Vec::<String>::new());
        let w = warnings("rebalance");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "the rebalance edge orders -> clean sits between the Kafka source \"orders\" \
                 and the exchange writer \"per_user.exchange\""
            ),
            "{w:?}"
        );
        assert!(warnings("hash")[0].starts_with("the hash edge orders -> clean"));
    }

    /// The order warnings `validate` prints for the job file `text`, built at P=2 with the
    /// built-in types.
    fn order_warnings_of(text: &str) -> Vec<String> {
        let job = JobFile::parse(text, "job.yaml").unwrap();
        let loader = crate::Loader::new();
        let graph = crate::build::build_graph_with(
            &job,
            NonZeroUsize::new(2).unwrap(),
            loader.registry(),
            false,
        )
        .unwrap();
        super::order_warnings(&graph)
    }

    #[test]
    fn a_window_whose_results_cross_an_exchange_is_warned_about_a_reduce_is_not() {
        let warnings = |first: &str| {
            let text = format!(
                "name: ex
sources:
  orders:
    type: kafka
    brokers: \"127.0.0.1:9\"
    topics: [orders]
operators:
  first:
    input: orders
    key: user
{first}
    exchange: {{kafka: {{brokers: \"127.0.0.1:9\", partitions: 8}}}}
  second:
    type: reduce
    input: first
    key: n
    aggregates: {{c: count}}
    exchange: {{kafka: {{brokers: \"127.0.0.1:9\", partitions: 8}}}}
sinks:
  out:
    type: discard
    input: second
"
            );
            order_warnings_of(&text)
        };
        let reduce = "    type: reduce\n    aggregates: {n: count}";
        assert_eq!(warnings(reduce), Vec::<String>::new());
        let window = "    type: window\n    size: 1s\n    aggregates: {n: count}";
        let w = warnings(window);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "the results of window \"first\" cross the exchange writer \"second.exchange\""
            ),
            "{w:?}"
        );
    }

    #[test]
    fn a_key_stage_comes_before_the_writer() {
        let text = JOB.replace("    aggregate: sum\n", "    aggregate: sum\n    key: key\n");
        let job = JobFile::parse(&text, "job.yaml").unwrap();
        let graph = build_graph(&job, NonZeroUsize::new(2).unwrap()).unwrap();
        let plan = ExecutionPlan::new(&graph, true).unwrap().to_string();
        assert!(plan.contains("gen+sum.key+sum.exchange x2"), "{plan}");
    }

    #[test]
    fn bad_exchanges_are_located_errors() {
        let one = |from: &str, to: &str| {
            let errs = errors(&JOB.replace(from, to));
            assert_eq!(errs.len(), 1, "{errs:#?}");
            errs.into_iter().next().unwrap()
        };
        // At the key in the flow mapping.
        let e = one("partitions: 8", "partitions: 0");
        assert!(
            e.starts_with("job.yaml:11:51: operator \"sum\": field \"exchange\": partitions: must be between 1 and 10000, found 0"),
            "{e}"
        );
        let errs = errors(&JOB.replace("partitions: 8", "partitons: 8"));
        assert_eq!(
            errs,
            // Each at its key in the flow mapping, so in file order.
            [
                "job.yaml:11:16: operator \"sum\": field \"exchange\": missing field `partitions`",
                "job.yaml:11:51: operator \"sum\": field \"exchange\": unknown field `partitons`, \
                 expected one of `brokers`, `partitions`, `properties`"
            ]
        );
        let e = one("{kafka: {", "{kafak: {");
        assert!(
            e.starts_with("job.yaml:11:16: operator \"sum\": field \"exchange\": unknown exchange kind \"kafak\": the only kind is `kafka`"),
            "{e}"
        );
        let e = one(
            "exchange: {kafka: {brokers: \"127.0.0.1:9092\", partitions: 8}}",
            "exchange: kafka",
        );
        assert!(e.starts_with("job.yaml:11:5: operator \"sum\": field \"exchange\": expected `exchange: {kafka: {brokers: HOST:PORT, partitions: N}}`, found \"kafka\""), "{e}");
        let e = one(
            "    aggregate: sum\n",
            "    aggregate: sum\n    partition: rebalance\n",
        );
        assert!(e.starts_with("job.yaml:11:5: operator \"sum\": field \"partition\": an exchange through Kafka routes by the record key"), "{e}");
        let e = one(
            "    type: generator\n",
            "    type: generator\n    exchange: {}\n",
        );
        assert!(
            e.starts_with(
                "job.yaml:6:5: source \"gen\": field \"exchange\": an exchange is on an input edge"
            ),
            "{e}"
        );
    }
}
