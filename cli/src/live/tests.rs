use super::*;
use serde_json::json;
use std::num::NonZeroUsize;
use std::time::Duration;
use tidemark_markers::{Granularity, LatencyConfig};
use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{run, start, JobConfig, JobGraph};

/// numbers (source, p=2) -forward-> double (p=2) -rebalance-> out (sink, p=1); `numbers` and
/// `double` chain into one task.
fn graph(records: u64) -> JobGraph {
    let mut graph = JobGraph::new("live-test");
    let src = graph
        .add_source("numbers", 2, move |_| {
            Ok(Box::new(CountingSource::new(records)))
        })
        .unwrap();
    let double = graph
        .add_operator("double", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0))))
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, double, Partitioning::Forward).unwrap();
    graph
        .connect(double, sink, Partitioning::Rebalance)
        .unwrap();
    graph
}

fn config(granularity: Granularity) -> JobConfig {
    JobConfig {
        latency: LatencyConfig {
            interval: Duration::from_millis(1),
            granularity,
            history_size: NonZeroUsize::new(128).unwrap(),
        },
        ..JobConfig::default()
    }
}

fn components() -> Vec<ComponentInfo> {
    vec![
        ComponentInfo {
            id: "numbers".to_owned(),
            type_name: "generator".to_owned(),
            config: json!({"count": 5, "auth": {"sasl.password": "pw", "user": "me"}}),
        },
        ComponentInfo {
            id: "double".to_owned(),
            type_name: "map".to_owned(),
            config: json!({"set": {"v": "v * 2"}}),
        },
    ]
}

fn live(registry: Arc<MetricsRegistry>, plan: &ExecutionPlan) -> LiveJob {
    LiveJob::new(
        registry,
        plan,
        json!({"parallelism": 2, "kafka_token": "t0ken"}),
        &components(),
        QueueShape {
            channel_capacity: 8,
            batch_size: 1024,
        },
    )
}

fn finished(records: u64, granularity: Granularity) -> LiveJob {
    let g = graph(records);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let result = run(g, config(granularity)).unwrap();
    let job = live(result.metrics, &plan);
    job.set_outcome(&result.outcome);
    job
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn job_json_describes_vertices_edges_and_settings() {
    let job = finished(1_000, Granularity::Operator);
    let json = parse(&job.job_json());
    assert_eq!(json["name"], "live-test");
    assert_eq!(json["state"], "finished");
    assert_eq!(json["error"], Value::Null);
    assert_eq!(json["granularity"], "operator");
    assert!(json["started"].as_str().unwrap().ends_with('Z'));
    assert!(json["started_unix_ms"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(
        json["settings"],
        json!({"parallelism": 2, "kafka_token": "***"})
    );
    assert_eq!(
        json["vertices"],
        json!([
            {"id": "numbers", "kind": "source", "type": "generator", "parallelism": 2,
             "task": "numbers+double", "terminal": false, "input_queue_capacity_records": 0,
             "config": {"count": 5, "auth": {"sasl.password": "***", "user": "me"}}},
            {"id": "double", "kind": "operator", "type": "map", "parallelism": 2,
             "task": "numbers+double", "terminal": false, "input_queue_capacity_records": 0,
             "config": {"set": {"v": "v * 2"}}},
            // Two upstream subtasks, each a channel of 8 batches of 1024 records.
            {"id": "out", "kind": "sink", "type": "sink", "parallelism": 1,
             "task": "out", "terminal": true, "input_queue_capacity_records": 16384,
             "config": {}},
        ])
    );
    assert_eq!(
        json["edges"],
        json!([
            {"from": "numbers", "to": "double", "partitioning": "forward", "exchange": "chained"},
            {"from": "double", "to": "out", "partitioning": "rebalance", "exchange": "channel"},
        ])
    );
    // No checkpoint directory and no restore: both are null, not left out.
    assert_eq!(json["checkpoint"], Value::Null);
    assert_eq!(json["restored_from"], Value::Null);
}

#[test]
fn job_json_names_the_checkpoint_the_run_was_restored_from() {
    let job = finished(10, Granularity::Operator);
    job.set_restored_from(super::RestoredFrom {
        id: 7,
        path: "ckpt/live-test/chk-7".to_owned(),
    });
    let json = parse(&job.job_json());
    assert_eq!(
        json["restored_from"],
        json!({"id": 7, "path": "ckpt/live-test/chk-7"})
    );
}

#[test]
fn metrics_json_has_counts_ratios_and_latency() {
    let job = finished(20_000, Granularity::Subtask);
    let json = parse(&job.metrics_json());
    assert_eq!(json["job"], "live-test");
    assert_eq!(json["state"], "finished");
    assert_eq!(json["granularity"], "subtask");
    let vertices = json["vertices"].as_array().unwrap();
    let ids: Vec<&str> = vertices.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["numbers", "double", "out"]);
    let out = &vertices[2];
    // Every record reached the sink: 2 source subtasks × 20 000.
    assert_eq!(out["records_in"], 40_000);
    assert_eq!(vertices[0]["records_out"], 40_000);
    assert_eq!(vertices[0]["subtasks"].as_array().unwrap().len(), 2);
    for v in vertices {
        for s in v["subtasks"].as_array().unwrap() {
            let (b, p, i) = (
                s["busy"].as_f64().unwrap(),
                s["backpressured"].as_f64().unwrap(),
                s["idle"].as_f64().unwrap(),
            );
            for r in [b, p, i] {
                assert!((0.0..=1.0).contains(&r), "{s}");
            }
            // Every task spent some time, so the three ratios cover it.
            assert!((b + p + i - 1.0).abs() < 1e-9, "{s}");
        }
        assert!(v["busy_max"].as_f64().unwrap() >= 0.0);
    }
    // The counting source does not know its lag.
    assert_eq!(vertices[0]["lag_records"], Value::Null, "{}", vertices[0]);
    // The sink is terminal and records e2e latency; markers reached it.
    assert_eq!(out["terminal"], true);
    let e2e = &out["e2e_latency"];
    assert_eq!(e2e["count"], 40_000, "{out}");
    assert!(e2e["p50_seconds"].as_f64().unwrap() <= e2e["p99_seconds"].as_f64().unwrap());
    assert!(e2e["p99_seconds"].as_f64().unwrap() <= e2e["max_seconds"].as_f64().unwrap());
    assert!(
        out["marker_latency"]["count"].as_u64().unwrap() > 0,
        "{out}"
    );
    assert!(out["subtasks"][0]["input_queue_fill"].as_f64().unwrap() >= 0.0);

    // Latency keys carry the labels /metrics has at subtask granularity.
    let latency = json["latency"].as_array().unwrap();
    assert!(!latency.is_empty());
    for entry in latency {
        let labels = entry["labels"].as_object().unwrap();
        let names: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "operator_id",
                "operator_subtask_index",
                "source_id",
                "source_subtask_index"
            ],
            "{entry}"
        );
        assert_eq!(labels["source_id"], "numbers");
        assert!(entry["count"].as_u64().unwrap() > 0);
        assert!(entry["p99_seconds"].as_f64().unwrap() <= entry["max_seconds"].as_f64().unwrap());
    }
    // Both source subtasks' markers reached the sink.
    let at_sink: Vec<&str> = latency
        .iter()
        .filter(|e| e["labels"]["operator_id"] == "out")
        .map(|e| e["labels"]["source_subtask_index"].as_str().unwrap())
        .collect();
    assert_eq!(at_sink, ["0", "1"]);
}

#[test]
fn latency_labels_follow_the_granularity() {
    let names = |g: Granularity| -> Vec<String> {
        let json = parse(&finished(5_000, g).metrics_json());
        let entry = json["latency"][0].clone();
        entry["labels"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(
        names(Granularity::Single),
        ["operator_id", "operator_subtask_index"]
    );
    assert_eq!(
        names(Granularity::Operator),
        ["operator_id", "operator_subtask_index", "source_id"]
    );
}

#[test]
fn a_failed_job_says_why() {
    let job = finished(10, Granularity::Operator);
    job.set_outcome(&JobOutcome::Stopped);
    assert_eq!(parse(&job.job_json())["state"], "stopped");
    assert_eq!(job.state(), (JobState::Stopped, None));
}

/// While the job runs, records flow between two snapshots and the rates say so; ratios cover
/// the span between them.
#[test]
fn rates_and_ratios_cover_the_last_seconds() {
    let g = graph(u64::MAX);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let handle = start(g, config(Granularity::Operator)).unwrap();
    let job = live(handle.metrics().clone(), &plan);
    assert_eq!(parse(&job.job_json())["state"], "running");
    let first = parse(&job.metrics_json());
    assert_eq!(first["state"], "running");
    // The first snapshot has nothing to compare with: ratios and rates over the whole run.
    assert_eq!(first["span_seconds"], 0.0);
    std::thread::sleep(Duration::from_millis(300));
    let second = parse(&job.metrics_json());
    handle.stop();
    let result = handle.wait();
    job.set_outcome(&result.outcome);

    assert!(
        second["span_seconds"].as_f64().unwrap() > 0.0,
        "{}",
        second["span_seconds"]
    );
    let sink = &second["vertices"][2];
    assert!(sink["records_in"].as_u64() > first["vertices"][2]["records_in"].as_u64());
    assert!(
        sink["records_in_per_second"].as_f64().unwrap() > 0.0,
        "{sink}"
    );
    let after = parse(&job.metrics_json());
    assert_eq!(after["state"], "stopped");
}

#[test]
fn redaction_reaches_every_depth_and_any_case() {
    let v = redact_secrets(json!({
        "Password": "a",
        "list": [{"clientSecret": "b"}, {"fine": 1}],
        "nested": {"refresh_token_file": "c", "credentials": {"x": 1}},
        "plain": "d",
    }));
    assert_eq!(
        v,
        json!({
            "Password": "***",
            "list": [{"clientSecret": "***"}, {"fine": 1}],
            "nested": {"refresh_token_file": "***", "credentials": "***"},
            "plain": "d",
        })
    );
}

/// Every floating-point number in `value`, with where it is.
fn floats(value: &Value, at: &str, out: &mut Vec<(String, f64)>) {
    match value {
        Value::Number(n) if n.is_f64() => out.push((at.to_owned(), n.as_f64().unwrap_or(0.0))),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                floats(item, &format!("{at}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                floats(item, &format!("{at}.{key}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_number_is_written_as_metrics_writes_it() {
    // A running job: ratios, rates and latencies come out of divisions.
    let g = graph(u64::MAX);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let handle = start(g, config(Granularity::Subtask)).unwrap();
    let job = live(handle.metrics().clone(), &plan);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let json = loop {
        let json = parse(&job.metrics_json());
        let out = &json["vertices"][2];
        if out["records_in"].as_u64().unwrap_or(0) > 0 && !json["latency"][0].is_null() {
            break json;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no record reached the sink in 30 s: {json}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    handle.stop();
    handle.wait();
    let mut numbers = Vec::new();
    floats(&json, "", &mut numbers);
    assert!(numbers.len() > 20, "{numbers:?}");
    for (at, n) in numbers {
        assert_eq!(
            n,
            tidemark_runtime::exporter::round_value(n),
            "{at}: {n} has more than 9 significant digits"
        );
    }
}

#[test]
fn registered_series_are_in_the_metrics_api_once() {
    let g = graph(50_000);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let config = JobConfig {
        checkpoint_interval: Some(Duration::from_millis(1)),
        ..config(Granularity::Single)
    };
    let result = run(g, config).unwrap();
    let completed = result.checkpoints.completed_total();
    let job = live(result.metrics.clone(), &plan);
    let json = parse(&job.metrics_json());
    let series = json["series"].as_array().unwrap();
    let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "tidemark_checkpoints_completed_total",
            "tidemark_checkpoints_failed_total",
            "tidemark_checkpoints_skipped_total",
            "tidemark_checkpoint_duration_seconds"
        ],
        "{json}"
    );
    assert_eq!(series[0]["type"], "counter");
    assert_eq!(series[0]["labels"], json!({}));
    assert_eq!(series[0]["value"].as_f64(), Some(completed as f64));
    assert_eq!(series[1]["value"].as_f64(), Some(0.0), "none failed");
    assert_eq!(series[3]["type"], "histogram");
    assert_eq!(series[3]["count"].as_u64(), Some(completed));
    let bounds: Vec<f64> = series[3]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["le"].as_f64().unwrap())
        .collect();
    assert_eq!(bounds, tidemark_runtime::checkpoint::DURATION_BUCKETS);

    // A component registered later (Kafka, say) follows, with its own labels.
    struct Commits;
    impl tidemark_runtime::metrics::SeriesSource for Commits {
        fn collect(&self, out: &mut tidemark_runtime::metrics::SeriesWriter) {
            const FAMILY: tidemark_runtime::metrics::SeriesFamily =
                tidemark_runtime::metrics::SeriesFamily::counter("test_commits_total", "Commits.");
            out.number(&FAMILY, &[("source_id", "in")], 3.0);
        }
    }
    result.metrics.register_series(Arc::new(Commits));
    let json = parse(&job.metrics_json());
    let series = json["series"].as_array().unwrap();
    assert_eq!(series.len(), 5, "{json}");
    assert_eq!(
        series[4],
        json!({"name": "test_commits_total", "type": "counter", "labels": {"source_id": "in"}, "value": 3.0})
    );
    // Without checkpoints or components, the list is empty.
    let plain = parse(&finished(10, Granularity::Single).metrics_json());
    assert_eq!(plain["series"], json!([]));
}

#[test]
fn the_busiest_vertex_is_the_bottleneck_only_when_busy_half_the_time() {
    use snapshot::{bottleneck, busiest, Bottleneck, BOTTLENECK_BUSY};
    let named = |vertex: &str, busy: f64| Bottleneck {
        vertex: vertex.to_owned(),
        busy,
    };
    // A job whose vertices barely work (a paced source): the busiest is named, but is no
    // bottleneck.
    let quiet = busiest([("src", 0.004), ("sum", 0.01), ("out", 0.002)]);
    assert_eq!(quiet, Some(named("sum", 0.01)));
    assert_eq!(bottleneck(quiet.as_ref()), None);
    // Just below and at the threshold.
    let below = busiest([("src", 0.2), ("slow", BOTTLENECK_BUSY - 0.001)]);
    assert_eq!(bottleneck(below.as_ref()), None);
    let at = busiest([("src", 0.2), ("slow", BOTTLENECK_BUSY)]);
    assert_eq!(
        bottleneck(at.as_ref()),
        Some(named("slow", BOTTLENECK_BUSY))
    );
    let busy = busiest([("slow", 0.97), ("src", 0.03)]);
    assert_eq!(bottleneck(busy.as_ref()), Some(named("slow", 0.97)));
    // Nothing busy at all: neither.
    let idle = busiest([("src", 0.0), ("out", 0.0)]);
    assert_eq!(idle, None);
    assert_eq!(bottleneck(idle.as_ref()), None);
}

#[test]
fn metrics_json_names_the_busiest_vertex_and_calls_it_a_bottleneck_only_when_busy() {
    let job = finished(20_000, Granularity::Operator);
    let json = parse(&job.metrics_json());
    let busiest = &json["busiest"];
    let vertices = json["vertices"].as_array().unwrap();
    let most = vertices
        .iter()
        .map(|v| v["own_busy_max"].as_f64().unwrap())
        .fold(0.0, f64::max);
    if most > 0.0 {
        let vertex = vertices
            .iter()
            .find(|v| v["id"] == busiest["vertex"])
            .unwrap_or_else(|| panic!("{busiest}"));
        assert_eq!(vertex["own_busy_max"].as_f64().unwrap(), most, "{json}");
        assert_eq!(busiest["busy"].as_f64().unwrap(), most);
    } else {
        assert_eq!(*busiest, Value::Null);
    }
    if most >= snapshot::BOTTLENECK_BUSY {
        assert_eq!(json["bottleneck"], *busiest);
    } else {
        assert_eq!(json["bottleneck"], Value::Null, "{json}");
    }
}

/// Counts what comes over each of its two inputs as a join's held records (left: input 0,
/// right: input 1), and each left record as a match; emits nothing.
#[derive(Default)]
struct CountingJoin(tidemark_runtime::JoinCounts);

impl tidemark_runtime::Operator for CountingJoin {
    fn process(
        &mut self,
        _record: tidemark_runtime::Record,
        _out: &mut tidemark_runtime::Output,
    ) -> Result<(), tidemark_runtime::BoxError> {
        Err("every record comes through process_input".into())
    }

    fn process_input(
        &mut self,
        input: usize,
        records: &mut [tidemark_runtime::Record],
        _out: &mut tidemark_runtime::Output,
    ) -> Result<bool, tidemark_runtime::BoxError> {
        let n = records.len() as u64;
        if input == 0 {
            self.0.held_left += n;
            self.0.matched += n;
        } else {
            self.0.held_right += n;
        }
        Ok(true)
    }

    fn join_counts(&self) -> Option<tidemark_runtime::JoinCounts> {
        Some(self.0)
    }
}

/// pay (50 records) and click (20) into a join `j` at parallelism 2 (pay its left input, click
/// its right), then a sink; `type_of_j` is the type the job file gives `j`.
fn join_job(type_of_j: &str) -> (LiveJob, Value, Value) {
    let mut g = JobGraph::new("live-join");
    let pay = g
        .add_source("pay", 1, |_| Ok(Box::new(CountingSource::new(50))))
        .unwrap();
    let click = g
        .add_source("click", 1, |_| Ok(Box::new(CountingSource::new(20))))
        .unwrap();
    let j = g
        .add_operator("j", 2, |_| Ok(Box::new(CountingJoin::default())))
        .unwrap();
    let out = g.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
    g.connect(pay, j, Partitioning::Hash).unwrap();
    g.connect(click, j, Partitioning::Hash).unwrap();
    g.connect(j, out, Partitioning::Rebalance).unwrap();
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let result = run(g, config(Granularity::Operator)).unwrap();
    let components = [ComponentInfo {
        id: "j".to_owned(),
        type_name: type_of_j.to_owned(),
        config: json!({"left": "pay", "right": "click"}),
    }];
    let queue = QueueShape {
        channel_capacity: 8,
        batch_size: 1024,
    };
    let job = LiveJob::new(result.metrics, &plan, json!({}), &components, queue);
    job.set_outcome(&result.outcome);
    let (job_json, metrics_json) = (parse(&job.job_json()), parse(&job.metrics_json()));
    (job, job_json, metrics_json)
}

#[test]
fn an_edge_into_a_join_names_its_side_and_other_edges_name_none() {
    let (_job, json, _) = join_job("join");
    assert_eq!(
        json["edges"],
        json!([
            {"from": "pay", "to": "j", "partitioning": "hash", "exchange": "channel", "side": "left"},
            {"from": "click", "to": "j", "partitioning": "hash", "exchange": "channel", "side": "right"},
            {"from": "j", "to": "out", "partitioning": "rebalance", "exchange": "channel"},
        ])
    );
    // Two inputs into anything but a join: no sides.
    let (_job, json, _) = join_job("window");
    for edge in json["edges"].as_array().unwrap() {
        assert!(edge.get("side").is_none(), "{edge}");
    }
    // A join fed by one edge (both sides through one Kafka exchange): that edge is no side's.
    let g = graph(10);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let result = run(g, config(Granularity::Operator)).unwrap();
    let components = [ComponentInfo {
        id: "out".to_owned(),
        type_name: "join".to_owned(),
        config: json!({}),
    }];
    let queue = QueueShape {
        channel_capacity: 8,
        batch_size: 1024,
    };
    let job = LiveJob::new(result.metrics, &plan, json!({}), &components, queue);
    let json = parse(&job.job_json());
    assert_eq!(json["edges"][1]["to"], "out", "{json}");
    for edge in json["edges"].as_array().unwrap() {
        assert!(edge.get("side").is_none(), "{edge}");
    }
}

#[test]
fn metrics_json_has_a_joins_counts_per_subtask_and_summed() {
    let (_job, _, json) = join_job("join");
    let vertex = |id: &str| {
        json["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no vertex {id}: {json}"))
            .clone()
    };
    let j = vertex("j");
    // Every record of each side reached one of the two subtasks.
    assert_eq!(
        j["join"],
        json!({"matched": 50, "unmatched": 0, "held_left": 50, "held_right": 20}),
        "{j}"
    );
    let subtasks = j["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2);
    let sum = |field: &str| -> u64 {
        subtasks
            .iter()
            .map(|s| s["join"][field].as_u64().unwrap_or_else(|| panic!("{s}")))
            .sum()
    };
    assert_eq!(
        [sum("matched"), sum("held_left"), sum("held_right")],
        [50, 50, 20]
    );
    // Any other vertex: null, not left out.
    for id in ["pay", "click", "out"] {
        let v = vertex(id);
        assert_eq!(v["join"], Value::Null, "{v}");
        assert_eq!(v["subtasks"][0]["join"], Value::Null, "{v}");
    }
}
