//! The Grafana dashboard for real: Debian's `prometheus` scrapes a running job with the scrape
//! configuration of `docs/grafana/prometheus.yml`, and every query of every panel of
//! `docs/grafana/tidemark.json` (and the `job_name` variable's) must return data through
//! Prometheus' HTTP API. `.ci/run` installs `prometheus`; the test fails, never skips, without it.
#![cfg(unix)]

mod common;

use common::{encode, http, Proc, Prometheus, TempDir, PROMETHEUS, TIMEOUT};
use serde_json::Value;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// Two sources (a rate generator with watermarks, and a file read at once), a keyed reduce at
/// parallelism 2 and a sink: every series a panel needs exists and moves.
const JOB: &str = "name: grafana
parallelism: 2
latency:
  interval: 10ms
  granularity: operator
sources:
  gen:
    type: generator
    rate: 20000
    keys: 100
    watermarks:
      max_out_of_orderness: 100ms
  lines:
    type: file
    path: input.jsonl
    parallelism: 1
operators:
  total:
    type: reduce
    input: [gen, lines]
    partition: hash
    aggregate: sum
sinks:
  out:
    type: discard
    input: total
";

fn docs(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/grafana")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every query of the dashboard: (panel title, expression).
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("panel title").to_owned();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr").to_owned();
            queries.push((title.clone(), expr));
        }
    }
    queries
}

/// Whether a result has at least one sample with a number (not NaN).
fn has_number(result: &[Value]) -> bool {
    result.iter().any(|series| {
        series["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| !v.is_nan())
    })
}

#[test]
fn every_panel_of_the_dashboard_returns_data_from_prometheus() {
    assert!(
        Path::new(PROMETHEUS).exists(),
        "{PROMETHEUS} is missing: this test needs Debian's prometheus (apt-get install -y \
         prometheus; .ci/run installs it)"
    );
    let dashboard: Value = serde_json::from_str(&docs("tidemark.json")).expect("dashboard JSON");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(variables.contains(&"job_name"), "{variables:?}");
    let titles: Vec<String> = dashboard_queries(&dashboard)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    for wanted in [
        "Marker latency p99 per operator",
        "Record end-to-end latency p99",
        "Source lag (records)",
        "Busy ratio per task",
        "Backpressured ratio per task",
        "Throughput (records/s)",
    ] {
        assert!(
            titles.iter().any(|t| t == wanted),
            "no panel {wanted}: {titles:?}"
        );
    }

    let dir = TempDir::new("grafana");
    dir.write("job.yaml", JOB);
    let lines: String = (0..50_000)
        .map(|i| format!("{{\"key\": {}, \"value\": 1}}\n", i % 100))
        .collect();
    dir.write("input.jsonl", &lines);
    let mut job = Proc::spawn(
        dir.path(),
        ["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = job.metrics_addr();

    // The documented scrape configuration, pointed at this job and scraping every second.
    let config = docs("prometheus.yml");
    assert!(config.contains("127.0.0.1:9249"), "{config}");
    let config = config
        .replace("127.0.0.1:9249", &addr.to_string())
        .replace("scrape_interval: 5s", "scrape_interval: 1s");
    let prometheus = Prometheus::start(&dir, &config);

    // The variable's query finds the job.
    let deadline = Instant::now() + TIMEOUT;
    while prometheus
        .query("count by (job_name) (tidemark_job_running)")
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the job"
        );
        thread::sleep(Duration::from_millis(200));
    }
    let names = http(
        prometheus.addr,
        "GET",
        &format!(
            "/api/v1/label/job_name/values?{}={}",
            encode("match[]"),
            encode("tidemark_job_running")
        ),
    );
    assert!(names.body.contains("\"grafana\""), "{}", names.body);

    // Every panel's query, as Grafana sends it for this job: each returns data once a few
    // scrapes are in (the wait only guards a hang).
    let queries: Vec<(String, String)> = dashboard_queries(&dashboard)
        .into_iter()
        .map(|(title, expr)| {
            let expr = expr
                .replace("$job_name", "grafana")
                .replace("$__rate_interval", "30s");
            assert!(!expr.contains('$'), "unknown variable in {expr}");
            (title, expr)
        })
        .collect();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let empty: Vec<&(String, String)> = queries
            .iter()
            .filter(|(_, expr)| !has_number(&prometheus.query(expr)))
            .collect();
        if empty.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "panels without data after {TIMEOUT:?}: {empty:#?}"
        );
        thread::sleep(Duration::from_millis(500));
    }
    // The marker latency panel has one series per operator that markers reach.
    let markers = prometheus.query(&queries[0].1);
    let operators: Vec<&str> = markers
        .iter()
        .map(|s| s["metric"]["operator_id"].as_str().unwrap())
        .collect();
    assert!(
        operators.contains(&"total") && operators.contains(&"out"),
        "{operators:?}"
    );

    job.terminate();
    job.wait();
}
