use super::collect::{merged_quantile_seconds, vm_hwm_mb};
use super::model::{LatencyReport, SinkLatency};
use super::*;
use crate::settings::{resolve, FileSettings};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tidemark_markers::LatencyHistogram;
use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{
    run, DropReason, JobConfig, JobGraph, JobOutcome, MetricsRegistry, Partitioning,
};

#[test]
fn milliseconds_keep_three_significant_digits() {
    assert_eq!(ms(0.000411), "0.000411");
    assert_eq!(ms(0.0123), "0.0123");
    assert_eq!(ms(1.5), "1.50");
    assert_eq!(ms(12.345), "12.3");
    assert_eq!(ms(250.4), "250");
    assert_eq!(ms(0.0), "0");
    assert_eq!(ms(f64::NAN), "-");
}

#[test]
fn rfc3339_formats_utc() {
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    let t = UNIX_EPOCH + Duration::from_millis(1_764_403_200_123); // 2025-11-29
    assert_eq!(rfc3339(t), "2025-11-29T08:00:00.123Z");
    let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
    assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    // Milliseconds are cut, never rounded up into the next second.
    let late = UNIX_EPOCH + Duration::from_nanos(1_999_999_999);
    assert_eq!(rfc3339(late), "1970-01-01T00:00:01.999Z");
}

fn finished_registry() -> (Arc<MetricsRegistry>, Duration) {
    let mut graph = JobGraph::new("report-test");
    let src = graph
        .add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(500))))
        .unwrap();
    let op = graph
        .add_operator("double", 2, |_| Ok(Box::new(MapOperator(|v| v * 2.0))))
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, op, Partitioning::Forward).unwrap();
    graph.connect(op, sink, Partitioning::Rebalance).unwrap();
    let mut config = JobConfig::default();
    config.latency.interval = Duration::from_millis(1);
    let result = run(graph, config).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished);
    (result.metrics, result.elapsed)
}

#[test]
fn report_json_has_the_documented_shape() {
    let (registry, elapsed) = finished_registry();
    let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
    let outcome = JobOutcome::Finished;
    let report = Report::collect(
        &registry,
        &RunSummary {
            outcome: &outcome,
            elapsed,
            ended: SystemTime::now(),
            settings: &settings,
            stop_reason: None,
            error: None,
            exit_code: 0,
            tasks_not_ended: Vec::new(),
        },
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["job_name"], "report-test");
    assert_eq!(json["outcome"], "finished");
    assert!(json.get("failure").is_none());
    assert!(json["start_time"].as_str().unwrap().ends_with('Z'));
    assert!(json["end_time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        json["elapsed_seconds"].as_f64(),
        Some(elapsed.as_secs_f64())
    );
    assert_eq!(json["records"]["emitted_by_sources"], 1000);
    assert_eq!(json["records"]["received_by_sinks"], 1000);
    let vertices = json["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), 3);
    assert_eq!(vertices[0]["id"], "numbers");
    assert_eq!(vertices[0]["kind"], "source");
    assert_eq!(vertices[0]["subtasks"].as_array().unwrap().len(), 2);
    assert_eq!(vertices[0]["subtasks"][1]["subtask"], 1);
    assert_eq!(vertices[0]["subtasks"][1]["records_out"], 500);
    assert_eq!(vertices[2]["subtasks"][0]["records_in"], 1000);
    let markers = json["markers_emitted"].as_array().unwrap();
    assert_eq!(markers.len(), 2);
    assert_eq!(markers[0]["source_id"], "numbers");
    assert_eq!(markers[0]["source_subtask_index"], 0);
    assert!(markers[0]["count"].as_u64().unwrap() >= 1);
    let latency = json["latency"].as_array().unwrap();
    let sink_rows: Vec<_> = latency
        .iter()
        .filter(|l| l["operator_kind"] == "sink")
        .collect();
    assert!(!sink_rows.is_empty());
    let row = sink_rows[0];
    assert_eq!(row["operator_id"], "out");
    assert_eq!(row["operator_subtask_index"], 0);
    assert_eq!(row["source_id"], "numbers");
    assert!(
        row.get("source_subtask_index").is_none(),
        "operator granularity"
    );
    for field in [
        "count",
        "min_ms",
        "max_ms",
        "mean_ms",
        "stddev_ms",
        "p50_ms",
        "p75_ms",
        "p95_ms",
        "p98_ms",
        "p99_ms",
        "p999_ms",
        "negative_count",
    ] {
        assert!(row.get(field).is_some(), "{field} missing in {row}");
    }
    let sink_markers: u64 = sink_rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let emitted: u64 = markers.iter().map(|m| m["count"].as_u64().unwrap()).sum();
    assert_eq!(sink_markers, emitted);

    let table = report.table();
    assert!(
        table.starts_with("tidemark: job \"report-test\" finished after"),
        "{table}"
    );
    assert!(table.contains("marker latency (ms)"), "{table}");
    assert!(table.contains("out#0 <- numbers"), "{table}");
}

#[test]
fn sink_latency_and_peak_rss_are_in_the_report() {
    let (registry, elapsed) = finished_registry();
    let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
    let outcome = JobOutcome::Finished;
    let report = Report::collect(
        &registry,
        &RunSummary {
            outcome: &outcome,
            elapsed,
            ended: SystemTime::now(),
            settings: &settings,
            stop_reason: None,
            error: None,
            exit_code: 0,
            tasks_not_ended: Vec::new(),
        },
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let summary = &json["sink_latency"];
    for field in [
        "marker_p50_ms",
        "marker_p99_ms",
        "marker_max_ms",
        "e2e_p99_ms",
        "marker_p99_ms_since_start",
        "marker_max_ms_since_start",
        "e2e_p99_ms_since_start",
    ] {
        let v = summary[field].as_f64();
        assert!(v.is_some_and(|v| v >= 0.0), "{field}: {summary}");
    }
    // The summary covers exactly the sink rows' windows.
    let sink_rows: Vec<&LatencyReport> = report
        .latency
        .iter()
        .filter(|l| l.operator_kind == "sink")
        .collect();
    let max = sink_rows.iter().map(|l| l.max_ms).fold(f64::MIN, f64::max);
    assert_eq!(report.sink_latency.marker_max_ms, Some(max));
    let s = &report.sink_latency;
    assert!(s.marker_p50_ms <= s.marker_p99_ms && s.marker_p99_ms <= s.marker_max_ms);
    if cfg!(target_os = "linux") {
        let rss = json["peak_rss_mb"].as_f64().unwrap();
        assert!(rss > 0.0 && rss < 1e6, "{rss}");
    }
}

#[test]
fn sink_latency_without_samples_is_null() {
    let summary = SinkLatency::from_samples(Vec::new(), Vec::new(), &[], &[]);
    assert_eq!(summary, SinkLatency::default());
    let json = serde_json::to_value(&summary).unwrap();
    assert!(json["marker_p99_ms"].is_null());
    assert!(json["e2e_p99_ms_since_start"].is_null());
}

#[test]
fn sink_latency_pools_windows_and_histograms() {
    // Two sinks' windows: 1..=100 ms and 101..=200 ms (in ns), pooled before the quantiles.
    let markers: Vec<f64> = (1..=200).map(|i| f64::from(i) * 1e6).collect();
    let e2e: Vec<f64> = (1..=100).map(|i| f64::from(i) * 1e6).collect();
    let mut low = LatencyHistogram::new();
    let mut high = LatencyHistogram::new();
    for i in 1..=100 {
        low.record(i * 1_000_000);
        high.record((100 + i) * 1_000_000);
    }
    let summary = SinkLatency::from_samples(markers, e2e, &[low.clone(), high], &[low]);
    // legacy quantile: pos = p * (n + 1).
    assert_eq!(summary.marker_p50_ms, Some(100.5));
    assert!((summary.marker_p99_ms.unwrap() - 198.99).abs() < 1e-9);
    assert_eq!(summary.marker_max_ms, Some(200.0));
    assert!((summary.e2e_p99_ms.unwrap() - 99.99).abs() < 1e-9);
    // 198 of 200 samples are at or below 198 ms; within the histograms' 1%.
    let p99 = summary.marker_p99_ms_since_start.unwrap();
    assert!((p99 - 198.0).abs() / 198.0 < 0.015, "{p99}");
    let max = summary.marker_max_ms_since_start.unwrap();
    assert!((max - 200.0).abs() / 200.0 < 0.015, "{max}");
    let e2e = summary.e2e_p99_ms_since_start.unwrap();
    assert!((e2e - 99.0).abs() / 99.0 < 0.015, "{e2e}");
}

#[test]
fn merged_quantile_of_zeros_and_tiny_values() {
    let mut zeros = LatencyHistogram::new();
    zeros.record_n(0, 10);
    assert_eq!(merged_quantile_seconds(&[zeros.clone()], 0.99), 0.0);
    let mut tiny = LatencyHistogram::new();
    tiny.record_n(500, 90); // 0.5 us
    let p = merged_quantile_seconds(&[zeros, tiny], 0.99);
    assert!((p - 500e-9).abs() <= 5e-9, "{p}");
    assert!(merged_quantile_seconds(&[], 0.5).is_nan());
}

#[test]
fn peak_rss_is_read_from_vm_hwm() {
    let status = "Name:\ttidemark\nVmPeak:\t  200000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t 40000 kB\n";
    assert_eq!(vm_hwm_mb(status), Some(50.0));
    assert_eq!(vm_hwm_mb("Name:\tx\n"), None);
    assert_eq!(vm_hwm_mb("VmHWM:\tlots kB\n"), None);
}

#[test]
fn failed_outcome_names_the_subtask() {
    let (registry, elapsed) = finished_registry();
    let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
    let outcome = JobOutcome::Failed(tidemark_runtime::TaskFailure {
        vertex_id: "double".into(),
        subtask: 1,
        message: "boom".into(),
    });
    let report = Report::collect(
        &registry,
        &RunSummary {
            outcome: &outcome,
            elapsed,
            ended: SystemTime::now(),
            settings: &settings,
            stop_reason: None,
            error: Some("job \"report-test\" failed: boom".into()),
            exit_code: 1,
            tasks_not_ended: Vec::new(),
        },
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["outcome"], "failed");
    assert_eq!(json["failure"]["vertex_id"], "double");
    assert_eq!(json["failure"]["subtask"], 1);
    assert_eq!(json["failure"]["message"], "boom");
    assert_eq!(json["exit_code"], 1);
    assert_eq!(json["error"], "job \"report-test\" failed: boom");
}

/// Reads no record: `malformed` lines skipped, nothing else.
struct AllMalformed(u64);

impl tidemark_runtime::Source for AllMalformed {
    fn poll(
        &mut self,
        _ctx: &tidemark_runtime::PollContext,
        _out: &mut tidemark_runtime::Output,
    ) -> Result<tidemark_runtime::SourceStatus, tidemark_runtime::BoxError> {
        Ok(tidemark_runtime::SourceStatus::Finished)
    }
    fn input_errors(&self) -> tidemark_runtime::SourceErrorCounts {
        tidemark_runtime::SourceErrorCounts {
            malformed: self.0,
            ..Default::default()
        }
    }
}

fn report_of(registry: &MetricsRegistry, outcome: &JobOutcome) -> Report {
    let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
    Report::collect(
        registry,
        &RunSummary {
            outcome,
            elapsed: Duration::from_millis(10),
            ended: SystemTime::now(),
            settings: &settings,
            stop_reason: None,
            error: None,
            exit_code: 0,
            tasks_not_ended: Vec::new(),
        },
    )
}

#[test]
fn skipped_lines_show_in_the_table_and_the_report() {
    let mut graph = JobGraph::new("binary-input");
    let src = graph
        .add_source("src", 1, |_| Ok(Box::new(AllMalformed(37))))
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, sink, Partitioning::Forward).unwrap();
    let result = run(graph, JobConfig::default()).unwrap();
    let report = report_of(&result.metrics, &result.outcome);

    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["records"]["dropped_total"], 37);
    assert_eq!(json["records"]["dropped"]["malformed"], 37);
    for reason in DropReason::ALL {
        assert!(
            json["records"]["dropped"][reason.as_str()].is_u64(),
            "{reason}"
        );
    }
    assert_eq!(json["vertices"][0]["dropped"]["malformed"], 37);
    assert_eq!(
        json["vertices"][0]["subtasks"][0]["dropped"]["malformed"],
        37
    );
    assert_eq!(json["vertices"][1]["dropped"], serde_json::json!({}));

    let table = report.table();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "tidemark: job \"binary-input\" finished after 0.01s; 0 records from sources, 0 to \
             sinks, 37 dropped (37 malformed)"
    );
    assert!(lines[1].ends_with("dropped"), "{table}");
    let src_row = lines
        .iter()
        .find(|l| l.trim_start().starts_with("src"))
        .unwrap();
    assert!(src_row.ends_with("37  37 malformed"), "{table}");
    assert_eq!(
        report.warnings(),
        [
            "the sources read no record: all 37 lines were malformed and skipped \
              (on_error: skip); is it the right input?"
        ]
    );
}

#[test]
fn one_record_is_singular() {
    let mut graph = JobGraph::new("one");
    let src = graph
        .add_source("numbers", 1, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, sink, Partitioning::Forward).unwrap();
    let result = run(graph, JobConfig::default()).unwrap();
    let table = report_of(&result.metrics, &result.outcome).table();
    assert!(
        table.contains("; 1 record from sources, 1 to sinks\n"),
        "{table}"
    );
    assert!(!table.contains("dropped ("), "nothing dropped: {table}");
}

/// Significant digits of a JSON number as written (`0.00442742` has 6).
fn significant_digits(number: &str) -> usize {
    let mantissa = number.split(['e', 'E']).next().unwrap();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    digits.trim_start_matches('0').trim_end_matches('0').len()
}

#[test]
fn latencies_have_at_most_six_significant_digits() {
    assert_eq!(significant_digits("0.004427419999999993"), 16);
    assert_eq!(significant_digits("0.00442742"), 6);
    let (registry, elapsed) = finished_registry();
    let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
    let outcome = JobOutcome::Finished;
    let report = Report::collect(
        &registry,
        &RunSummary {
            outcome: &outcome,
            elapsed,
            ended: SystemTime::now(),
            settings: &settings,
            stop_reason: None,
            error: None,
            exit_code: 0,
            tasks_not_ended: Vec::new(),
        },
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let mut checked = 0;
    let mut check = |key: &str, v: &serde_json::Value| {
        if key.ends_with("_ms") || key.contains("_ms_") {
            if let Some(n) = v.as_f64() {
                let text = v.to_string();
                assert!(significant_digits(&text) <= 6, "{key}: {text} ({n})");
                checked += 1;
            }
        }
    };
    for row in json["latency"].as_array().unwrap() {
        for (k, v) in row.as_object().unwrap() {
            check(k, v);
        }
    }
    for (k, v) in json["sink_latency"].as_object().unwrap() {
        check(k, v);
    }
    assert!(checked > 10, "{checked} latencies checked");
}

#[test]
fn a_job_that_never_ran_still_has_a_report() {
    let settings = resolve(&FileSettings::default(), &Default::default(), None, &[]).unwrap();
    let report = Report::not_started(&NotStarted {
        job_name: Some("etl"),
        instance: Some("db7-41532"),
        settings: Some(&settings),
        started: SystemTime::now(),
        error: "the job could not start: vertex \"src\" subtask 0: no file".into(),
        exit_code: 1,
        failure: Some(FailureReport {
            vertex_id: "src".into(),
            subtask: 0,
            message: "no file".into(),
        }),
    });
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["job_name"], "etl");
    assert_eq!(json["instance"], "db7-41532");
    assert_eq!(json["outcome"], "failed");
    assert_eq!(json["exit_code"], 1);
    assert!(json["error"].as_str().unwrap().contains("no file"));
    assert_eq!(json["failure"]["vertex_id"], "src");
    assert_eq!(json["records"]["emitted_by_sources"], 0);
    assert_eq!(json["settings"]["parallelism"], 1);
    assert_eq!(
        report.table(),
        "tidemark: job \"etl\" failed after 0.00s; 0 records from sources, 0 to sinks\n"
    );
    let unknown = Report::not_started(&NotStarted {
        job_name: None,
        instance: None,
        settings: None,
        started: SystemTime::now(),
        error: "job.yaml:1:1: bad".into(),
        exit_code: 2,
        failure: None,
    });
    let json: serde_json::Value = serde_json::from_str(&unknown.to_json()).unwrap();
    assert!(json["job_name"].is_null());
    assert!(json["settings"].is_null());
    assert_eq!(json["exit_code"], 2);
}

/// The report's `settings` object comes from the settings table: every row of `SETTINGS`
/// is in it under its JSON name with the value `plan` shows, and nothing else is.
#[test]
fn every_setting_of_the_table_is_in_the_report() {
    use crate::settings::{JsonKind, SETTINGS};
    let defines: Vec<(String, String)> = [
        ("metrics.latency.interval", "15ms"),
        ("metrics.latency.granularity", "subtask"),
        ("metrics.latency.history-size", "7"),
        ("parallelism.default", "3"),
        ("metrics.reporter.prom.port", "9300"),
        ("pipeline.operator-chaining.enabled", "false"),
        ("execution.checkpointing.interval", "2s"),
        ("execution.channel-capacity", "32"),
        ("execution.idle-strategy", "spin"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let settings = resolve(
        &FileSettings::default(),
        &Default::default(),
        None,
        &defines,
    )
    .unwrap();
    let report = Report::not_started(&NotStarted {
        job_name: Some("etl"),
        instance: None,
        settings: Some(&settings),
        started: SystemTime::now(),
        error: "no".into(),
        exit_code: 1,
        failure: None,
    });
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let object = json["settings"].as_object().unwrap();
    for spec in &SETTINGS {
        let value = object
            .get(spec.json_name)
            .unwrap_or_else(|| panic!("{} ({}) missing: {json}", spec.json_name, spec.key));
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(text, spec.show(&settings), "{}", spec.key);
        match spec.json_kind {
            JsonKind::Text => assert!(value.is_string(), "{}: {value}", spec.key),
            JsonKind::Number => assert!(value.is_u64(), "{}: {value}", spec.key),
            JsonKind::Bool => assert!(value.is_boolean(), "{}: {value}", spec.key),
        }
    }
    assert_eq!(object.len(), SETTINGS.len(), "{json}");
    // The keys scripts, tests and docs/cli.md read keep their names and types.
    assert_eq!(
        json["settings"],
        serde_json::json!({
            "latency_interval": "15ms",
            "latency_granularity": "subtask",
            "latency_history_size": 7,
            "buffer_timeout": "1ms",
            "channel_capacity": 32,
            "parallelism": 3,
            "metrics_port": 9300,
            "chaining": false,
            "e2e_latency_everywhere": false,
            "checkpoint_interval": "2s",
            "checkpoint_dir": "none",
            "checkpoint_retain": 3,
            "checkpoint_max_concurrent": 1,
            "checkpoint_min_pause": "0",
            "checkpoint_tolerable_failures": 3,
            "max_parallelism": "auto",
            "idle_strategy": "spin",
            "stall_timeout": "5m",
        })
    );
}

#[test]
fn the_report_lists_the_checkpoint_series_once_and_none_without_checkpoints() {
    let mut graph = JobGraph::new("report-checkpoints");
    let src = graph
        .add_source("numbers", 2, |_| Ok(Box::new(CountingSource::new(5_000))))
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, sink, Partitioning::Rebalance).unwrap();
    let config = JobConfig {
        checkpoint_interval: Some(Duration::from_millis(1)),
        ..JobConfig::default()
    };
    let result = run(graph, config).unwrap();
    let completed = result.checkpoints.completed_total();
    let report = report_of(&result.metrics, &result.outcome);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let series = json["series"].as_array().unwrap();
    let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "tidemark_checkpoints_completed_total",
            "tidemark_checkpoints_failed_total",
            "tidemark_checkpoints_skipped_total",
            "tidemark_checkpoint_duration_seconds"
        ]
    );
    assert_eq!(series[0]["value"].as_f64(), Some(completed as f64));
    assert_eq!(series[3]["count"].as_u64(), Some(completed));

    // A job without checkpoints writes its report as before: no `series` key at all.
    let (registry, _) = finished_registry();
    let plain = report_of(&registry, &JobOutcome::Finished).to_json();
    let plain: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert!(plain.get("series").is_none(), "{plain}");
}
