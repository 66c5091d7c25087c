use super::*;
use crate::live::{ComponentInfo, QueueShape};
use std::io::{Read, Write};
use std::net::TcpStream;
use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{
    run, start, ExecutionPlan, JobConfig, JobGraph, MetricsRegistry, Partitioning,
};

/// A guard against a hang, never a measure of speed.
const TIMEOUT: Duration = Duration::from_secs(30);

fn graph(records: u64, parallelism: usize) -> JobGraph {
    let mut graph = JobGraph::new("endpoint-test");
    let src = graph
        .add_source("numbers", parallelism, move |_| {
            Ok(Box::new(CountingSource::new(records)))
        })
        .unwrap();
    let double = graph
        .add_operator("double", parallelism, |_| {
            Ok(Box::new(MapOperator(|v| v * 2.0)))
        })
        .unwrap();
    let sink = graph
        .add_sink("out", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    graph.connect(src, double, Partitioning::Rebalance).unwrap();
    graph
        .connect(double, sink, Partitioning::Rebalance)
        .unwrap();
    graph
}

fn live(registry: Arc<MetricsRegistry>, plan: &ExecutionPlan) -> Arc<LiveJob> {
    let components = [ComponentInfo {
        id: "numbers".to_owned(),
        type_name: "counting".to_owned(),
        config: serde_json::json!({"count": 1000, "api_token": "hunter2"}),
    }];
    Arc::new(LiveJob::new(
        registry,
        plan,
        serde_json::json!({"parallelism": 1}),
        &components,
        QueueShape {
            channel_capacity: 8,
            batch_size: 1024,
        },
    ))
}

fn finished_job() -> Arc<LiveJob> {
    let g = graph(1_000, 1);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let result = run(g, JobConfig::default()).unwrap();
    let job = live(result.metrics, &plan);
    job.set_outcome(&result.outcome);
    job
}

/// A parsed HTTP answer.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `raw` as is, closes the sending side and reads the whole answer.
fn exchange(addr: SocketAddr, raw: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    stream.write_all(raw.as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn request(addr: SocketAddr, method: &str, path: &str) -> Answer {
    request_with(addr, method, path, "")
}

/// [`request`] with `headers` (each ending in CRLF).
fn request_with(addr: SocketAddr, method: &str, path: &str, headers: &str) -> Answer {
    let text = exchange(
        addr,
        &format!("{method} {path} HTTP/1.0\r\nHost: test\r\n{headers}\r\n"),
    )
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let (head, body) = text
        .split_once("\r\n\r\n")
        .expect("a blank line after headers");
    let mut lines = head.lines();
    let status_line = lines.next().unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

#[test]
fn get_metrics_serves_the_text_format() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    assert_eq!(server.url(), format!("http://{addr}/metrics"));

    let answer = request(addr, "GET", "/metrics");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("Content-Type"), Some(CONTENT_TYPE));
    assert_eq!(
        answer.header("Content-Length"),
        Some(answer.body.len().to_string().as_str())
    );
    assert!(answer.body.contains(
        r#"tidemark_records_in_total{job_name="endpoint-test",operator_id="out",operator_subtask_index="0"} 1000"#
    ), "{}", answer.body);
    assert!(answer.body.contains("# TYPE tidemark_job_running gauge"));

    // A query string does not matter.
    assert_eq!(request(addr, "GET", "/metrics?x=1").status, 200);
    server.shutdown();
}

#[test]
fn the_api_answers_json() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    for path in [JOB_API_PATH, METRICS_API_PATH] {
        let answer = request(addr, "GET", path);
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.header("Content-Type"), Some("application/json"));
        let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(json["state"], "finished", "{path}: {json}");
    }
    let job: serde_json::Value =
        serde_json::from_str(&request(addr, "GET", JOB_API_PATH).body).unwrap();
    assert_eq!(job["vertices"][0]["config"]["api_token"], "***");
}

#[test]
fn the_page_is_served_from_the_binary() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    for path in ["/", "/index.html", "/?refresh=1"] {
        let answer = request(server.local_addr(), "GET", path);
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(
            answer.header("Content-Type"),
            Some("text/html; charset=utf-8")
        );
        assert!(answer.body.starts_with("<!DOCTYPE html>"));
        // The page asks only its own endpoint: no absolute URL to fetch from.
        assert!(answer.body.contains("getJson(\"/api/v1/metrics\")"));
        assert!(!answer.body.contains("src=\"http"), "an external script");
        assert!(!answer.body.contains("href=\"http"), "an external style");
    }
}

#[test]
fn head_answers_without_body() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    for path in [METRICS_PATH, "/", JOB_API_PATH, METRICS_API_PATH] {
        let answer = request(server.local_addr(), "HEAD", path);
        assert_eq!(answer.status, 200);
        assert!(answer.header("Content-Type").is_some());
        assert_ne!(answer.header("Content-Length"), Some("0"));
        assert_eq!(answer.body, "");
    }
}

#[test]
fn other_paths_and_methods() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    for path in [
        "/other",
        "/metrics/x",
        "/metricsx",
        "/api/v1",
        "/api/v1/jobs",
    ] {
        let answer = request(addr, "GET", path);
        assert_eq!(answer.status, 404, "{path}");
        assert!(
            answer.body.starts_with(&format!("not found: {path};")),
            "{}",
            answer.body
        );
        assert!(answer.body.contains("/metrics"), "{}", answer.body);
        assert!(answer.body.contains("/api/v1/job"), "{}", answer.body);
    }
    for path in [METRICS_PATH, "/", JOB_API_PATH, METRICS_API_PATH] {
        for method in ["POST", "PUT", "DELETE"] {
            let answer = request(addr, method, path);
            assert_eq!(answer.status, 405, "{method} {path}");
            assert_eq!(answer.header("Allow"), Some("GET, HEAD"));
            assert!(answer.body.contains(method), "{}", answer.body);
        }
    }
    // A request with a body is answered, and the body read, so the client sees the answer.
    let text = exchange(
        addr,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    )
    .unwrap();
    assert!(text.starts_with("HTTP/1.1 405 "), "{text}");
}

#[test]
fn bad_requests_do_not_stop_the_server() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    for raw in [
        "GARBAGE\r\n\r\n",
        "GET\r\n\r\n",
        "GET /metrics HTTP/9.9\r\n\r\n",
        "\u{0}\u{1}\u{2}\r\n\r\n",
        "GET /metrics HTTP/1.0\r\nContent-Length: nope\r\n\r\n",
    ] {
        let answer = exchange(addr, raw).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400 "), "{raw:?}: {answer:?}");
    }
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let answer = exchange(addr, &huge).unwrap();
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer:?}");
    for raw in [
        "GET /%ff%fe HTTP/1.0\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort",
        "GET /metr",
        "",
    ] {
        // Whatever the answer (or a closed connection), the server lives on.
        let _ = exchange(addr, raw);
    }
    assert_eq!(request(addr, "GET", "/metrics").status, 200);
}

#[test]
fn address_in_use_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = MetricsServer::start(&addr, finished_job()).unwrap_err();
    match &err {
        EndpointError::Bind { error, .. } => assert_eq!(error.kind(), io::ErrorKind::AddrInUse),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "cannot listen on {addr}: Address already in use; pick another with --metrics-addr"
        )
    );
}

#[test]
fn invalid_address_is_a_clear_error() {
    for addr in ["nonsense", "127.0.0.1", "127.0.0.1:99999", ""] {
        let err = MetricsServer::start(addr, finished_job()).unwrap_err();
        assert!(
            matches!(err, EndpointError::InvalidAddress { .. }),
            "{addr}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("invalid metrics address \"{addr}\": ")),
            "{text}"
        );
        assert!(
            text.ends_with("expected host:port, e.g. 127.0.0.1:9249"),
            "{text}"
        );
    }
}

#[test]
fn shutdown_frees_the_port() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    // A connection being served when the server stops does not keep it from stopping.
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    assert_eq!(request(addr, "GET", "/metrics").status, 200);
    server.shutdown();
    // The listening socket is closed when shutdown returns.
    TcpListener::bind(addr).expect("the port is free again");
    // Dropping without shutdown stops as well.
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    drop(server);
    TcpListener::bind(addr).expect("the port is free again");
    drop(stalled);
}

#[test]
fn concurrent_scrapes_and_a_slow_client() {
    let server = MetricsServer::start("127.0.0.1:0", finished_job()).unwrap();
    let addr = server.local_addr();
    // A client that sends a request but never reads its answer.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let scrapers: Vec<_> = (0..8)
        .map(|_| thread::spawn(move || request(addr, "GET", "/metrics").status))
        .collect();
    for s in scrapers {
        assert_eq!(s.join().unwrap(), 200);
    }
    drop(slow);
}

/// Opens a connection and sends `bytes` on it, then leaves it open.
fn hold(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap();
    stream.write_all(bytes).unwrap();
    stream
}

/// The endpoint keeps answering while 50 connections have sent half a request and stall and 50
/// more have sent a whole request and never read the answer. Under tiny_http (before this
/// server) a scrape made right after a burst of 8 half-sent requests hung in about 1 of 10
/// tries: its connection-pool race queued the scrape behind a stalled connection for good.
#[test]
fn stalled_and_non_reading_connections_delay_nobody() {
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    let g = graph(u64::MAX, cores);
    let plan = ExecutionPlan::new(&g, true).unwrap();
    let handle = start(g, JobConfig::default()).unwrap();
    let server =
        MetricsServer::start("127.0.0.1:0", live(handle.metrics().clone(), &plan)).unwrap();
    let addr = server.local_addr();

    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..50 {
        held.push(hold(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"));
        held.push(hold(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    }
    for round in 0..20 {
        // A fresh burst of half-sent requests just before each scrape, from several threads at
        // once: the pattern that made tiny_http queue the scrape behind them (58 stalled
        // connections in all while it scrapes).
        let burst: Vec<TcpStream> = thread::scope(|s| {
            let openers: Vec<_> = (0..8)
                .map(|_| s.spawn(|| hold(addr, b"GET /api/v1/metrics HTTP/1.1\r\nHo")))
                .collect();
            openers.into_iter().map(|o| o.join().unwrap()).collect()
        });
        let answer = request(addr, "GET", "/metrics");
        assert_eq!(answer.status, 200, "round {round}");
        assert!(answer
            .body
            .contains(r#"tidemark_job_running{job_name="endpoint-test"} 1"#));
        assert_eq!(request(addr, "GET", "/").status, 200, "round {round}");
        assert_eq!(
            request(addr, "GET", JOB_API_PATH).status,
            200,
            "round {round}"
        );
        assert_eq!(
            request(addr, "GET", METRICS_API_PATH).status,
            200,
            "round {round}"
        );
        drop(burst);
    }
    handle.stop();
    handle.wait();
    drop(held);
    server.shutdown();
}

/// A connection that stalls in the middle of its request is closed once the request deadline
/// passes, so stalled clients cannot pile up for ever.
#[test]
fn a_stalled_request_is_dropped_after_the_deadline() {
    let limits = Limits {
        request_deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = MetricsServer::start_with("127.0.0.1:0", finished_job(), limits).unwrap();
    let mut stalled = hold(server.local_addr(), b"GET /metrics HTTP/1.1\r\n");
    stalled.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut rest = Vec::new();
    // The server closes the connection without an answer: end of stream, no error.
    stalled
        .read_to_end(&mut rest)
        .expect("closed by the server");
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
}

/// Past the connection limit a client gets a 503 at once, and the server serves again as soon
/// as connections end.
#[test]
fn past_the_connection_limit_clients_get_503() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = MetricsServer::start_with("127.0.0.1:0", finished_job(), limits).unwrap();
    let addr = server.local_addr();
    let held = [
        hold(addr, b"GET /metrics HTTP/1.1\r\n"),
        hold(addr, b"GET /metrics HTTP/1.1\r\n"),
    ];
    let answer = request(addr, "GET", "/metrics");
    assert_eq!(answer.status, 503);
    assert!(
        answer.body.contains("too many connections"),
        "{}",
        answer.body
    );
    drop(held);
    // The two held connections end (their threads see end of stream); then a scrape works.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = request(addr, "GET", "/metrics").status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            Instant::now() < deadline,
            "the held connections never ended"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// A server with basic auth (no TLS) for `user:password`, its site not yet holding a job.
fn guarded_server(dir: &tempfile::TempDir) -> (MetricsServer, Arc<Health>, Arc<Site>) {
    let hash = bcrypt::hash("pw", 4).unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(
        &path,
        format!("basic_auth_users:\n  user: {hash}\nhttp_server_config:\n  headers: {{X-Content-Type-Options: nosniff}}\n"),
    )
    .unwrap();
    let web = Arc::new(WebConfig::load(&path).unwrap());
    let health = Health::new("guarded", "");
    let site = Site::new(health.clone());
    let server = MetricsServer::serve(
        "127.0.0.1:0",
        site.clone(),
        web,
        Role::All,
        Limits::default(),
    )
    .unwrap();
    (server, health, site)
}

#[test]
fn every_path_but_the_probes_needs_the_login() {
    let dir = tempfile::tempdir().unwrap();
    let (server, health, site) = guarded_server(&dir);
    let addr = server.local_addr();
    // Before the job: the probes say starting, /metrics holds the two gauges, the API 503.
    let ready = request(addr, "GET", "/readyz");
    assert_eq!(ready.status, 503);
    assert!(
        ready.body.contains("\"reason\":\"starting\""),
        "{}",
        ready.body
    );
    assert_eq!(ready.header("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(request(addr, "GET", "/livez").status, 200);
    let login = {
        use base64::Engine as _;
        format!(
            "Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode("user:pw")
        )
    };
    let early = request_with(addr, "GET", "/metrics", &login);
    assert_eq!(early.status, 200);
    assert!(
        early
            .body
            .contains("tidemark_job_ready{job_name=\"guarded\"} 0"),
        "{}",
        early.body
    );
    assert_eq!(request_with(addr, "GET", "/api/v1/job", &login).status, 503);

    site.set_job(finished_job());
    health.set_phase(crate::health::Phase::Running, "");
    for path in ["/metrics", "/", "/api/v1/job", "/api/v1/metrics"] {
        let refused = request(addr, "GET", path);
        assert_eq!(refused.status, 401, "{path}");
        assert!(
            refused
                .header("WWW-Authenticate")
                .is_some_and(|v| v.starts_with("Basic realm=")),
            "{path}"
        );
        let wrong = request_with(addr, "GET", path, "Authorization: Basic dXNlcjpubw==\r\n");
        assert_eq!(wrong.status, 401, "{path}");
        assert_eq!(
            request_with(addr, "GET", path, &login).status,
            200,
            "{path}"
        );
    }
    let ready = request(addr, "GET", "/readyz");
    assert_eq!(
        (ready.status, ready.body.as_str()),
        (200, "{\"ready\":true}\n")
    );
}

#[test]
fn the_probe_role_serves_the_probes_alone() {
    let health = Health::new("probes", "");
    let site = Site::new(health.clone());
    let server = MetricsServer::serve(
        "127.0.0.1:0",
        site,
        Arc::new(WebConfig::default()),
        Role::Probes,
        Limits::default(),
    )
    .unwrap();
    let addr = server.local_addr();
    health.set_phase(
        crate::health::Phase::Failed,
        "vertex \"m\" subtask 0 failed: boom",
    );
    let live = request(addr, "GET", "/livez");
    assert_eq!(
        (live.status, live.body.as_str()),
        (503, "failed: vertex \"m\" subtask 0 failed: boom\n")
    );
    assert_eq!(request(addr, "GET", "/readyz").status, 503);
    for path in ["/metrics", "/", "/api/v1/job"] {
        assert_eq!(request(addr, "GET", path).status, 404, "{path}");
    }
}
