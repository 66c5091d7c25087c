//! Latency markers end to end: the label set of every marker series per granularity, marker
//! conservation (what the sources emit reaches the sinks exactly once), interval 0, and the
//! precedence of flags, `-D` and the job file.

mod common;

use common::{
    as_u64, label_names, names, read_report, report_markers_emitted, report_sink_marker_count,
    Metrics, Proc, TempDir, LINGER,
};
use prometheus_parse::Value;
use std::collections::{BTreeMap, BTreeSet};

const SUMMARY: &str = "tidemark_marker_latency_window_seconds";
const HISTOGRAM: &str = "tidemark_marker_latency_seconds";
/// Buckets of the marker histogram by default: 29 bounds from 1 µs to 1 h, and `+Inf`.
const MARKER_BUCKETS: usize = 30;
const NEGATIVE: &str = "tidemark_marker_negative_latency_total";
const EMITTED: &str = "tidemark_markers_emitted_total";

/// Runs `job` (written as `job.yaml`) with `args`, waits until it has ended and lingers, scrapes
/// once, ends the lingering (exit 0) and returns the scrape and the report.
fn run_and_scrape(dir: &TempDir, job: &str, args: &[&str]) -> (Metrics, serde_json::Value) {
    let job_path = dir.write("job.yaml", job);
    let report_path = dir.join("report.json");
    let mut cmd_args: Vec<String> = vec![
        "run".into(),
        job_path.display().to_string(),
        "--metrics-addr".into(),
        "127.0.0.1:0".into(),
        "--linger".into(),
        LINGER.into(),
        "--report-file".into(),
        report_path.display().to_string(),
        "--summary".into(),
    ];
    cmd_args.extend(args.iter().map(|a| (*a).to_owned()));
    let mut proc = Proc::spawn(dir.path(), &cmd_args);
    let addr = proc.wait_lingering();
    let metrics = common::scrape(addr);
    proc.end_lingering();
    assert!(
        proc.stderr().contains("finished"),
        "the job should have finished:\n{}",
        proc.stderr()
    );
    (metrics, read_report(&report_path))
}

/// Labels of a latency key at `granularity`, per the spec's table (without `job_name`).
fn key_labels(granularity: &str) -> BTreeSet<String> {
    match granularity {
        "single" => names(&["operator_id", "operator_subtask_index"]),
        "operator" => names(&["source_id", "operator_id", "operator_subtask_index"]),
        "subtask" => names(&[
            "source_id",
            "source_subtask_index",
            "operator_id",
            "operator_subtask_index",
        ]),
        other => panic!("no granularity {other}"),
    }
}

/// Two sources (parallelism 2 and 1) → a union at `work` (2) → `out` (2): markers reach every
/// operator and sink subtask from every source subtask (hundreds of markers, random routing).
fn two_source_job(name: &str, latency: &str) -> String {
    format!(
        "name: {name}
buffer_timeout: 1ms
latency: {latency}
sources:
  a:
    type: generator
    parallelism: 2
    count: 3000
    rate: 6000
  b:
    type: generator
    count: 1500
    rate: 3000
operators:
  work:
    type: map
    input: [a, b]
    parallelism: 2
    partition: rebalance
sinks:
  out:
    type: discard
    input: work
    parallelism: 2
    partition: hash
"
    )
}

/// Vertex → parallelism of [`two_source_job`].
fn parallelism_of(vertex: &str) -> usize {
    match vertex {
        "a" | "work" | "out" => 2,
        "b" => 1,
        other => panic!("unexpected vertex {other:?}"),
    }
}

/// Checks the label set of every marker-latency series line of `m` for `granularity`, that
/// every label value names a real vertex and subtask, and that both `work` and `out` have
/// series. Returns the keys (label maps without `job_name`) of the summary's `_count` lines.
fn check_marker_labels(
    m: &Metrics,
    job_name: &str,
    granularity: &str,
) -> BTreeSet<BTreeMap<String, String>> {
    let key = key_labels(granularity);
    let with = |extra: &[&str]| -> BTreeSet<String> {
        let mut s = key.clone();
        s.insert("job_name".into());
        // Every series of `tidemark run` names its instance (docs/kafka.md, "Instance ids").
        s.insert("tidemark_instance".into());
        s.extend(extra.iter().map(|e| (*e).to_owned()));
        s
    };

    // Every line of every marker-latency family, exactly.
    let mut lines_per_family: BTreeMap<String, usize> = BTreeMap::new();
    let mut count_keys = BTreeSet::new();
    for series in m.raw_series() {
        let expected = match series.name.as_str() {
            n if n == SUMMARY => with(&["quantile"]),
            n if n == format!("{SUMMARY}_count") || n == format!("{SUMMARY}_sum") => with(&[]),
            n if n == format!("{HISTOGRAM}_bucket") => with(&["le"]),
            n if n == format!("{HISTOGRAM}_count") || n == format!("{HISTOGRAM}_sum") => with(&[]),
            n if n == NEGATIVE => with(&[]),
            n if n.starts_with("tidemark_marker_latency")
                || n.starts_with("tidemark_marker_neg") =>
            {
                panic!("unexpected marker series {n}")
            }
            _ => continue,
        };
        assert_eq!(
            series.label_names(),
            expected,
            "labels of {series:?} at granularity {granularity}"
        );
        assert_eq!(series.label("job_name"), Some(job_name), "{series:?}");
        let op = series.label("operator_id").unwrap();
        assert!(
            op == "work" || op == "out",
            "marker latency is recorded only at operators and sinks: {series:?}"
        );
        let op_sub: usize = series
            .label("operator_subtask_index")
            .unwrap()
            .parse()
            .unwrap();
        assert!(op_sub < parallelism_of(op), "{series:?}");
        if let Some(src) = series.label("source_id") {
            assert!(src == "a" || src == "b", "{series:?}");
            if let Some(sub) = series.label("source_subtask_index") {
                let sub: usize = sub.parse().unwrap();
                assert!(sub < parallelism_of(src), "{series:?}");
            }
        }
        *lines_per_family.entry(series.name.clone()).or_default() += 1;
        if series.name == format!("{SUMMARY}_count") {
            let k: BTreeMap<String, String> = series
                .labels
                .iter()
                .filter(|(k, _)| k != "job_name" && k != "tidemark_instance")
                .cloned()
                .collect();
            assert!(count_keys.insert(k), "key twice: {series:?}");
        }
    }
    let keys = count_keys.len();
    assert!(keys > 0, "no marker series at all:\n{}", m.body);
    // Per key: 8 quantiles, _count, _sum; 30 buckets, _count, _sum; the negative counter.
    for (family, per_key) in [
        (SUMMARY.to_owned(), 8),
        (format!("{SUMMARY}_sum"), 1),
        (format!("{HISTOGRAM}_bucket"), MARKER_BUCKETS),
        (format!("{HISTOGRAM}_count"), 1),
        (format!("{HISTOGRAM}_sum"), 1),
        (NEGATIVE.to_owned(), 1),
    ] {
        assert_eq!(
            lines_per_family.get(&family).copied().unwrap_or(0),
            per_key * keys,
            "lines of {family} for {keys} keys"
        );
    }

    // The parsed view: summaries with their quantiles, histograms with their buckets.
    let quantiles = [0.0, 0.5, 0.75, 0.95, 0.98, 0.99, 0.999, 1.0];
    for s in m.samples(SUMMARY) {
        assert_eq!(label_names(&s.labels), with(&[]), "{s:?}");
        let Value::Summary(qs) = &s.value else {
            panic!("{SUMMARY} is not a summary: {s:?}")
        };
        let got: Vec<f64> = qs.iter().map(|q| q.quantile).collect();
        assert_eq!(got, quantiles, "quantiles of {s:?}");
    }
    let mut histograms = 0;
    for s in m.samples(HISTOGRAM) {
        histograms += 1;
        assert_eq!(label_names(&s.labels), with(&[]), "{s:?}");
        let Value::Histogram(buckets) = &s.value else {
            panic!("{HISTOGRAM} is not a histogram: {s:?}")
        };
        assert_eq!(buckets.len(), MARKER_BUCKETS, "buckets of {s:?}");
        assert_eq!(buckets[0].less_than, 0.000001, "{s:?}");
        assert_eq!(buckets[MARKER_BUCKETS - 2].less_than, 3600.0, "{s:?}");
        assert!(buckets.last().unwrap().less_than.is_infinite(), "{s:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].count <= w[1].count),
            "buckets are cumulative: {s:?}"
        );
        let key: Vec<(&str, &str)> = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "job_name")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let count = m
            .value(&format!("{HISTOGRAM}_count"), &key)
            .expect("histogram _count");
        assert_eq!(
            buckets.last().unwrap().count,
            count,
            "+Inf == _count: {s:?}"
        );
        let summary_count = m
            .value(&format!("{SUMMARY}_count"), &key)
            .expect("summary _count");
        assert_eq!(count, summary_count, "histogram and summary counts: {s:?}");
    }
    assert_eq!(histograms, keys, "one histogram per key");

    for vertex in ["work", "out"] {
        assert!(
            count_keys.iter().any(|k| k["operator_id"] == vertex),
            "no marker series at {vertex}:\n{}",
            m.body
        );
    }
    count_keys
}

fn check_granularity(granularity: &str) {
    let dir = TempDir::new(&format!("labels-{granularity}"));
    let name = format!("labels-{granularity}");
    let job = two_source_job(
        &name,
        &format!("{{interval: 2ms, granularity: {granularity}}}"),
    );
    let (m, report) = run_and_scrape(&dir, &job, &[]);
    let keys = check_marker_labels(&m, &name, granularity);
    // With hundreds of markers routed at random, every key that can exist does.
    let sources_per_subtask = match granularity {
        "single" => 1,
        "operator" => 2,
        _ => 3,
    };
    assert_eq!(keys.len(), 4 * sources_per_subtask, "keys: {keys:?}");

    // The report's latency objects carry the same labels.
    let key = key_labels(granularity);
    for l in report["latency"].as_array().expect("latency array") {
        let obj = l.as_object().expect("latency object");
        for label in ["source_id", "source_subtask_index"] {
            assert_eq!(
                obj.contains_key(label),
                key.contains(label),
                "{label} in the report's latency object at {granularity}: {l}"
            );
        }
        assert!(obj.contains_key("operator_id") && obj.contains_key("operator_subtask_index"));
    }
    assert_eq!(report["latency"].as_array().unwrap().len(), keys.len());
    assert_eq!(report["settings"]["latency_granularity"], granularity);
}

#[test]
fn labels_at_granularity_single() {
    check_granularity("single");
}

#[test]
fn labels_at_granularity_operator() {
    check_granularity("operator");
}

#[test]
fn labels_at_granularity_subtask() {
    check_granularity("subtask");
}

#[test]
fn markers_are_conserved_from_sources_to_sinks() {
    // Two generators; rebalance, hash, broadcast and forward edges; unions at `u` and `s2`;
    // parallelism 1 to 4; a marker every 2 ms from each of the five source subtasks.
    let job = "name: conservation
buffer_timeout: 1ms
latency:
  interval: 2ms
  granularity: subtask
sources:
  a: {type: generator, parallelism: 2, count: 8000, rate: 8000}
  b: {type: generator, parallelism: 3, count: 3000, rate: 3000}
operators:
  m: {type: map, input: a, parallelism: 4, partition: rebalance, cost: 1us}
  u: {type: reduce, input: [m, b], parallelism: 3, partition: hash, aggregate: sum}
  f: {type: filter, input: u, parallelism: 3, partition: forward, keep: 0.5}
  w: {type: map, input: m, parallelism: 2, partition: broadcast}
sinks:
  s1: {type: discard, input: f, parallelism: 4, partition: rebalance}
  s2: {type: discard, input: [w, u], parallelism: 1}
";
    let dir = TempDir::new("conservation");
    let (m, report) = run_and_scrape(&dir, job, &["--seed", "7"]);

    let emitted = m.total(EMITTED);
    let sink = |l: &prometheus_parse::Labels| matches!(l.get("operator_id"), Some("s1" | "s2"));
    let at_sinks = m.sum(&format!("{SUMMARY}_count"), sink);
    let at_sinks_hist = m.sum(&format!("{HISTOGRAM}_count"), sink);
    assert!(emitted > 0.0, "no markers emitted:\n{}", m.body);
    assert_eq!(
        at_sinks, emitted,
        "markers counted at the sinks vs emitted by the sources"
    );
    assert_eq!(at_sinks_hist, emitted, "histogram counts at the sinks");
    // Every source subtask emitted.
    for (src, p) in [("a", 2), ("b", 3)] {
        for i in 0..p {
            let n = m
                .value(
                    EMITTED,
                    &[("source_id", src), ("source_subtask_index", &i.to_string())],
                )
                .unwrap_or_else(|| panic!("no {EMITTED} for {src}#{i}"));
            assert!(n > 0.0, "{src}#{i} emitted no marker");
        }
    }
    // No marker was recorded at a source.
    assert!(m
        .samples(&format!("{SUMMARY}_count"))
        .all(|s| !matches!(s.labels.get("operator_id"), Some("a" | "b"))));

    // The report agrees with the metrics.
    assert_eq!(report["outcome"], "finished");
    let report_emitted = report_markers_emitted(&report);
    assert_eq!(report_emitted as f64, emitted, "report markers_emitted");
    assert_eq!(
        report_sink_marker_count(&report),
        report_emitted,
        "report: sinks' latency counts vs markers_emitted"
    );
    assert_eq!(
        as_u64(
            &report["records"]["emitted_by_sources"],
            "emitted_by_sources"
        ),
        11000
    );
}

/// Conservation through chains (markers passed on synchronously inside a task, rule 11) and a
/// broadcast edge, with chaining on and off.
fn check_conservation_through_chains(extra: &[&str]) {
    let job = "name: chained
parallelism: 3
buffer_timeout: 1ms
latency:
  interval: 1ms
sources:
  gen: {type: generator, count: 4500, rate: 9000}
operators:
  scale: {type: map, input: gen, scale: 2}
  keep: {type: filter, input: scale, keep: 0.3}
  fan: {type: map, input: keep, parallelism: 2, partition: broadcast}
sinks:
  out: {type: discard, input: fan, parallelism: 2}
";
    let dir = TempDir::new("conservation-chained");
    let (m, report) = run_and_scrape(&dir, job, extra);
    let emitted = m.total(EMITTED);
    assert!(emitted > 0.0, "no markers emitted:\n{}", m.body);
    let at_sink = m.sum(&format!("{SUMMARY}_count"), |l| {
        l.get("operator_id") == Some("out")
    });
    assert_eq!(
        at_sink, emitted,
        "markers at the sink vs emitted ({extra:?})"
    );
    // Every chained operator recorded the markers that passed through it: all of them.
    for vertex in ["scale", "keep", "fan"] {
        let seen = m.sum(&format!("{SUMMARY}_count"), |l| {
            l.get("operator_id") == Some(vertex)
        });
        assert_eq!(seen, emitted, "markers recorded at {vertex} ({extra:?})");
    }
    assert_eq!(report_markers_emitted(&report) as f64, emitted);
    assert_eq!(report_sink_marker_count(&report) as f64, emitted);
}

#[test]
fn markers_are_conserved_through_chains() {
    check_conservation_through_chains(&[]);
}

#[test]
fn markers_are_conserved_without_chaining() {
    check_conservation_through_chains(&["--no-chaining"]);
}

/// Runs `job` and checks that no marker series exists and no marker was emitted.
fn check_no_markers(job_name: &str, job: &str, args: &[&str]) {
    let dir = TempDir::new(job_name);
    let (m, report) = run_and_scrape(&dir, job, args);
    for s in &m.scrape.samples {
        assert!(
            !s.metric.starts_with("tidemark_marker_latency")
                && !s.metric.starts_with("tidemark_marker_negative"),
            "a marker series with markers off: {s:?}"
        );
    }
    assert!(
        !m.body.contains("tidemark_marker_latency") && !m.body.contains(NEGATIVE),
        "marker families with markers off:\n{}",
        m.body
    );
    assert!(m.has(EMITTED), "{EMITTED} missing:\n{}", m.body);
    assert_eq!(m.total(EMITTED), 0.0, "markers emitted with markers off");
    assert_eq!(report_markers_emitted(&report), 0);
    assert_eq!(report["latency"].as_array().map(Vec::len), Some(0));
    // The job did run.
    assert!(m.total("tidemark_records_in_total") > 0.0);
}

#[test]
fn interval_zero_in_the_job_file_disables_markers() {
    let job = two_source_job("interval-zero", "{interval: 0, granularity: subtask}");
    check_no_markers("interval-zero", &job, &[]);
}

/// Markers are on by default (every 200 ms), so latency shows without configuring anything; the
/// sources run about half a second at their rate, past the first interval.
#[test]
fn markers_are_on_by_default_every_200ms() {
    let dir = TempDir::new("default-markers");
    let job = two_source_job("default-markers", "{}");
    let (m, report) = run_and_scrape(&dir, &job, &[]);
    assert!(
        m.total(EMITTED) > 0.0,
        "markers should be on by default:\n{}",
        m.body
    );
    assert!(m.body.contains("tidemark_marker_latency_seconds"));
    assert_eq!(report["settings"]["latency_interval"], "200ms");
}

#[test]
fn interval_zero_in_the_job_file_turns_markers_off() {
    let job = two_source_job("file-zero", "{interval: 0}");
    check_no_markers("file-zero", &job, &[]);
}

#[test]
fn interval_zero_define_beats_the_job_file() {
    let job = two_source_job("define-zero", "{interval: 2ms}");
    check_no_markers("define-zero", &job, &["-D", "metrics.latency.interval=0"]);
}

#[test]
fn interval_flag_beats_the_job_file() {
    let dir = TempDir::new("interval-flag");
    let job = two_source_job("interval-flag", "{interval: 0, granularity: single}");
    let (m, report) = run_and_scrape(&dir, &job, &["--latency-interval", "3ms"]);
    assert!(m.total(EMITTED) > 0.0, "the flag should turn markers on");
    check_marker_labels(&m, "interval-flag", "single");
    assert_eq!(report["settings"]["latency_interval"], "3ms");
}

#[test]
fn interval_flag_beats_define() {
    let dir = TempDir::new("interval-flag-define");
    let job = two_source_job("interval-flag-define", "{interval: 2ms}");
    let (m, report) = run_and_scrape(
        &dir,
        &job,
        &[
            "--latency-interval",
            "0",
            "-D",
            "metrics.latency.interval=5ms",
        ],
    );
    assert_eq!(m.total(EMITTED), 0.0);
    assert!(!m.body.contains("tidemark_marker_latency"));
    assert_eq!(report["settings"]["latency_interval"], "0");
}

#[test]
fn granularity_define_beats_the_job_file() {
    let dir = TempDir::new("granularity-define");
    let job = two_source_job("granularity-define", "{interval: 2ms, granularity: single}");
    let (m, report) = run_and_scrape(
        &dir,
        &job,
        &[
            "-D",
            "metrics.latency.granularity=subtask",
            "-D",
            "metrics.latency.history-size=7",
        ],
    );
    check_marker_labels(&m, "granularity-define", "subtask");
    assert_eq!(report["settings"]["latency_granularity"], "subtask");
    assert_eq!(report["settings"]["latency_history_size"], 7);
}

#[test]
fn granularity_flag_beats_the_job_file() {
    let dir = TempDir::new("granularity-flag");
    let job = two_source_job("granularity-flag", "{interval: 2ms, granularity: single}");
    let (m, report) = run_and_scrape(&dir, &job, &["--latency-granularity", "operator"]);
    check_marker_labels(&m, "granularity-flag", "operator");
    assert_eq!(report["settings"]["latency_granularity"], "operator");
}

#[test]
fn granularity_flag_beats_define() {
    let dir = TempDir::new("granularity-flag-define");
    let job = two_source_job(
        "granularity-flag-define",
        "{interval: 2ms, granularity: single}",
    );
    let (m, report) = run_and_scrape(
        &dir,
        &job,
        &[
            "-D",
            "metrics.latency.granularity=subtask",
            "--latency-granularity",
            "operator",
        ],
    );
    check_marker_labels(&m, "granularity-flag-define", "operator");
    assert_eq!(report["settings"]["latency_granularity"], "operator");
}

#[test]
fn the_job_files_granularity_applies_without_overrides() {
    let dir = TempDir::new("granularity-file");
    let job = two_source_job("granularity-file", "{interval: 2ms, granularity: single}");
    let (m, report) = run_and_scrape(&dir, &job, &[]);
    check_marker_labels(&m, "granularity-file", "single");
    assert_eq!(report["settings"]["latency_granularity"], "single");
    assert_eq!(report["settings"]["latency_interval"], "2ms");
}

/// The `le` bounds and counts of every histogram series named `metric`.
fn bucket_bounds(m: &Metrics, metric: &str) -> Vec<Vec<(f64, f64)>> {
    m.samples(metric)
        .map(|s| match &s.value {
            Value::Histogram(buckets) => buckets.iter().map(|b| (b.less_than, b.count)).collect(),
            other => panic!("{metric} is not a histogram: {other:?}"),
        })
        .collect()
}

#[test]
fn default_buckets_cover_1us_to_1h_and_1ms_to_7d() {
    let job = "name: default-buckets
latency:
  interval: 1ms
sources:
  gen: {type: generator, count: 20000, rate: 20000}
operators:
  work: {type: map, input: gen}
sinks:
  out: {type: discard, input: work}
";
    let dir = TempDir::new("default-buckets");
    let (m, _) = run_and_scrape(&dir, job, &[]);
    let marker = bucket_bounds(&m, HISTOGRAM);
    assert!(!marker.is_empty(), "{}", m.body);
    for series in &marker {
        assert_eq!(series.len(), MARKER_BUCKETS);
        assert_eq!(series[0].0, 0.000001);
        assert_eq!(series[series.len() - 2].0, 3600.0);
    }
    let e2e = bucket_bounds(&m, "tidemark_record_e2e_latency_seconds");
    assert!(!e2e.is_empty(), "{}", m.body);
    for series in &e2e {
        assert_eq!(series.len(), 27, "26 bounds from 1 ms to 7 days, and +Inf");
        assert_eq!(series[0].0, 0.001);
        assert_eq!(series[series.len() - 2].0, 604_800.0);
    }
}

#[test]
fn buckets_are_set_in_the_job_file() {
    let job = "name: custom-buckets
latency:
  interval: 1ms
  buckets: [10us, 1ms, 1s]
e2e:
  buckets: [1ms, 1m, 24h, 720h]
sources:
  gen: {type: generator, count: 20000, rate: 20000}
sinks:
  out: {type: discard, input: gen, partition: rebalance}
";
    let dir = TempDir::new("custom-buckets");
    let (m, _) = run_and_scrape(&dir, job, &[]);
    let marker = bucket_bounds(&m, HISTOGRAM);
    assert!(!marker.is_empty(), "{}", m.body);
    for series in &marker {
        let le: Vec<f64> = series.iter().map(|b| b.0).collect();
        assert_eq!(le, [0.00001, 0.001, 1.0, f64::INFINITY]);
    }
    let e2e = bucket_bounds(&m, "tidemark_record_e2e_latency_seconds");
    assert!(!e2e.is_empty(), "{}", m.body);
    for series in &e2e {
        let le: Vec<f64> = series.iter().map(|b| b.0).collect();
        assert_eq!(le, [0.001, 60.0, 86_400.0, 2_592_000.0, f64::INFINITY]);
        assert!(series[4].1 > 0.0, "{series:?}");
    }
}

#[test]
fn a_bad_bucket_list_is_an_error_naming_its_line() {
    let dir = TempDir::new("bad-buckets");
    dir.write(
        "job.yaml",
        "name: bad\nlatency:\n  buckets: [1s, 1ms]\nsources:\n  gen: {type: generator, count: 1}\nsinks:\n  out: {type: discard, input: gen}\n",
    );
    let out = common::tidemark(dir.path(), ["validate", "job.yaml"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr.contains("job.yaml:3:3")
            && out
                .stderr
                .contains("bucket 2 (1ms) is not larger than the one before it (1s)"),
        "{}",
        out.stderr
    );
}
