//! The Prometheus endpoint: `GET /metrics` served over HTTP by [`tiny_http`] on threads of its
//! own, rendering the live [`MetricsRegistry`] at each scrape (`spec/metrics.md`).
//!
//! - `GET /metrics` (a query string is ignored) answers 200 with the text format and
//!   [`CONTENT_TYPE`]; `HEAD /metrics` the same without a body.
//! - Another method on `/metrics` answers 405 with `Allow: GET, HEAD`; any other path 404.
//! - A request tiny_http cannot parse gets its 400 from tiny_http; nothing a client sends can
//!   stop the server.
//!
//! tiny_http reads each connection on a thread of its pool and queues the parsed requests;
//! [`WORKERS`] threads of ours take them from the queue, render and write the answers, so a
//! client that reads its answer slowly holds up one worker, not the others. None of these
//! threads does anything else, so a scrape is answered promptly even while the job keeps every
//! core busy (rendering takes each latency lock only long enough to copy the statistics).

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tidemark_runtime::exporter::{render_text, CONTENT_TYPE};
use tidemark_runtime::MetricsRegistry;
use tiny_http::{Header, Method, Request, Response, Server, StatusCode};

/// Threads answering requests.
pub const WORKERS: usize = 3;

/// The path the metrics are served on.
pub const METRICS_PATH: &str = "/metrics";

/// How long [`MetricsServer::shutdown`] waits for a worker still writing an answer to a slow
/// client before leaving it to finish on its own.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The address is not `host:port` or does not resolve.
    #[error(
        "invalid metrics address \"{addr}\": {reason}; expected host:port, e.g. 127.0.0.1:9249"
    )]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Binding failed (address in use, permission denied, address not local, ...).
    #[error("cannot listen on {addr}: {reason}; pick another with --metrics-addr")]
    Bind {
        /// The address as given.
        addr: String,
        /// The OS error, without its `(os error N)` suffix.
        reason: String,
        /// The OS error.
        error: io::Error,
    },
    /// tiny_http refused the bound socket.
    #[error("cannot serve metrics on {addr}: {reason}")]
    Server {
        /// The address as given.
        addr: String,
        /// What tiny_http said.
        reason: String,
    },
}

/// A running metrics endpoint. Stops on [`shutdown`](Self::shutdown) or when dropped.
pub struct MetricsServer {
    local_addr: SocketAddr,
    server: Option<Arc<Server>>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    exited: Option<mpsc::Receiver<()>>,
}

impl MetricsServer {
    /// Binds `addr` (e.g. `127.0.0.1:9249`; port 0 picks a free port, see
    /// [`local_addr`](Self::local_addr)) and serves `registry` on threads of its own: `GET
    /// /metrics` answers 200 with the Prometheus text format and [`CONTENT_TYPE`], `HEAD` the same
    /// without a body, another method on `/metrics` 405, any other path 404.
    ///
    /// # Errors
    /// [`EndpointError::InvalidAddress`] when `addr` does not parse or resolve,
    /// [`EndpointError::Bind`] (naming the address and the OS error) when it cannot be bound.
    pub fn start(
        addr: &str,
        registry: Arc<MetricsRegistry>,
    ) -> Result<MetricsServer, EndpointError> {
        let listener = bind(addr)?;
        let local_addr = listener
            .local_addr()
            .map_err(|error| bind_error(addr, error))?;
        let server = Server::from_listener(listener, None).map_err(|e| EndpointError::Server {
            addr: addr.to_owned(),
            reason: e.to_string(),
        })?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let (exited_tx, exited) = mpsc::channel();
        let mut workers = Vec::with_capacity(WORKERS);
        for i in 0..WORKERS {
            let (server, stop, registry, exited_tx) = (
                server.clone(),
                stop.clone(),
                registry.clone(),
                exited_tx.clone(),
            );
            let spawned = thread::Builder::new()
                .name(format!("metrics-http-{i}"))
                .spawn(move || {
                    serve(&server, &stop, &registry);
                    drop(exited_tx);
                });
            match spawned {
                Ok(handle) => workers.push(handle),
                // Serve with the workers we have; with none, report it.
                Err(error) if workers.is_empty() => {
                    return Err(EndpointError::Server {
                        addr: addr.to_owned(),
                        reason: format!("cannot start a thread: {error}"),
                    })
                }
                Err(error) => tracing::warn!(%error, "metrics endpoint: fewer worker threads"),
            }
        }
        tracing::debug!(%local_addr, "metrics endpoint listening");
        Ok(MetricsServer {
            local_addr,
            server: Some(server),
            stop,
            workers,
            exited: Some(exited),
        })
    }

    /// The address actually bound (with the real port when `addr` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The URL of the metrics, e.g. `http://127.0.0.1:9249/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}{METRICS_PATH}", self.local_addr())
    }

    /// Stops serving: wakes the workers, waits for them (at most about a second for one still
    /// writing to a slow client), and closes the listening socket.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Each unblock wakes one worker waiting in `recv`.
        for _ in 0..self.workers.len() {
            server.unblock();
        }
        // Wait until every worker has exited (the channel disconnects) or the grace runs out.
        if let Some(exited) = self.exited.take() {
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                match exited.recv_timeout(left) {
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                    Ok(()) => {}
                }
            }
        }
        for worker in self.workers.drain(..) {
            if worker.is_finished() {
                let _ = worker.join();
            }
            // Otherwise it is still writing to a slow client; it exits (and releases the server)
            // when that write ends.
        }
        // Dropping the last reference closes the listener (tiny_http wakes its accept thread).
        drop(server);
    }
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("local_addr", &self.local_addr)
            .field("workers", &self.workers.len())
            .field("running", &self.server.is_some())
            .finish()
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Resolves `addr` and binds the first address that works.
fn bind(addr: &str) -> Result<TcpListener, EndpointError> {
    let invalid = |reason: String| EndpointError::InvalidAddress {
        addr: addr.to_owned(),
        reason,
    };
    let candidates: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| invalid(os_reason(&e)))?
        .collect();
    let mut last_error = None;
    for candidate in candidates {
        match TcpListener::bind(candidate) {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    Err(match last_error {
        Some(error) => bind_error(addr, error),
        None => invalid("it resolves to no address".to_owned()),
    })
}

fn bind_error(addr: &str, error: io::Error) -> EndpointError {
    EndpointError::Bind {
        addr: addr.to_owned(),
        reason: os_reason(&error),
        error,
    }
}

/// An I/O error's message without the ` (os error N)` suffix.
fn os_reason(error: &io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_owned(),
        _ => text,
    }
}

/// One worker: answers requests until [`MetricsServer::shutdown`].
fn serve(server: &Server, stop: &AtomicBool, registry: &MetricsRegistry) {
    loop {
        match server.recv() {
            Ok(request) => {
                if let Err(error) = respond(request, registry) {
                    // The client went away; nothing to do.
                    tracing::debug!(%error, "metrics endpoint: cannot answer");
                }
            }
            Err(_) if stop.load(Ordering::SeqCst) => return,
            Err(error) => {
                // tiny_http's accept loop failed (e.g. out of file descriptors) and stopped; the
                // endpoint cannot accept connections any more. Wait for shutdown.
                tracing::warn!(%error, "metrics endpoint: cannot accept connections");
            }
        }
        if stop.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// What the endpoint answers to `method` on `url`.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    MethodNotAllowed,
    NotFound,
}

fn route(method: &Method, url: &str) -> Route {
    let path = url.split(['?', '#']).next().unwrap_or("");
    match (path, method) {
        (METRICS_PATH, Method::Get | Method::Head) => Route::Metrics,
        (METRICS_PATH, _) => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("constant headers are valid")
}

fn respond(request: Request, registry: &MetricsRegistry) -> io::Result<()> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    let (status, content_type, body, allow) = match route(request.method(), request.url()) {
        Route::Metrics => match catch_unwind(AssertUnwindSafe(|| render_text(registry))) {
            Ok(Ok(text)) => (200, CONTENT_TYPE, text, false),
            Ok(Err(error)) => (
                500,
                PLAIN,
                format!("cannot render the metrics: {error}\n"),
                false,
            ),
            Err(_) => (
                500,
                PLAIN,
                "cannot render the metrics; see the log\n".to_owned(),
                false,
            ),
        },
        Route::MethodNotAllowed => (
            405,
            PLAIN,
            format!("method not allowed: {METRICS_PATH} answers GET and HEAD\n"),
            true,
        ),
        Route::NotFound => (
            404,
            PLAIN,
            format!("not found: the metrics are at {METRICS_PATH}\n"),
            false,
        ),
    };
    let mut response = Response::from_string(body)
        .with_status_code(StatusCode(status))
        .with_header(header("Content-Type", content_type));
    if allow {
        response = response.with_header(header("Allow", "GET, HEAD"));
    }
    request.respond(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
    use tidemark_runtime::{run, start, JobConfig, JobGraph, Partitioning};

    const TIMEOUT: Duration = Duration::from_secs(5);

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

    fn finished_registry() -> Arc<MetricsRegistry> {
        run(graph(1_000, 1), JobConfig::default()).unwrap().metrics
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
        let text = exchange(
            addr,
            &format!("{method} {path} HTTP/1.0\r\nHost: test\r\n\r\n"),
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
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        assert_eq!(server.url(), format!("http://{addr}/metrics"));

        let answer = request(addr, "GET", "/metrics");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("Content-Type"), Some(CONTENT_TYPE));
        assert!(answer.body.contains(
            r#"tidemark_records_in_total{job_name="endpoint-test",operator_id="out",operator_subtask_index="0"} 1000"#
        ), "{}", answer.body);
        assert!(answer.body.contains("# TYPE tidemark_job_running gauge"));

        // A query string does not matter.
        assert_eq!(request(addr, "GET", "/metrics?x=1").status, 200);
        server.shutdown();
    }

    #[test]
    fn head_answers_without_body() {
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
        let answer = request(server.local_addr(), "HEAD", "/metrics");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("Content-Type"), Some(CONTENT_TYPE));
        assert_eq!(answer.body, "");
    }

    #[test]
    fn other_paths_and_methods() {
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
        let addr = server.local_addr();
        for path in ["/other", "/", "/metrics/x", "/metricsx"] {
            let answer = request(addr, "GET", path);
            assert_eq!(answer.status, 404, "{path}");
            assert!(answer.body.contains("/metrics"), "{}", answer.body);
        }
        for method in ["POST", "PUT", "DELETE"] {
            let answer = request(addr, method, "/metrics");
            assert_eq!(answer.status, 405, "{method}");
            assert_eq!(answer.header("Allow"), Some("GET, HEAD"));
        }
    }

    #[test]
    fn bad_requests_do_not_stop_the_server() {
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
        let addr = server.local_addr();
        for raw in [
            "GARBAGE\r\n\r\n",
            "GET\r\n\r\n",
            "GET /metrics HTTP/9.9\r\n\r\n",
            "\u{0}\u{1}\u{2}\r\n\r\n",
        ] {
            let answer = exchange(addr, raw).unwrap();
            assert!(answer.starts_with("HTTP/1.1 400 "), "{raw:?}: {answer:?}");
        }
        for raw in [
            "GET /metrics HTTP/1.0\r\nContent-Length: nope\r\n\r\n",
            "GET /%ff%fe HTTP/1.0\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort",
            "",
        ] {
            // Whatever the answer (or a closed connection), the server lives on.
            let _ = exchange(addr, raw);
        }
        // A client that connects and says nothing holds no worker.
        let _silent = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        assert_eq!(request(addr, "GET", "/metrics").status, 200);
        assert!(started.elapsed() < TIMEOUT);
    }

    #[test]
    fn address_in_use_is_a_clear_error() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = MetricsServer::start(&addr, finished_registry()).unwrap_err();
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
            let err = MetricsServer::start(addr, finished_registry()).unwrap_err();
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
    fn shutdown_is_prompt_and_frees_the_port() {
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
        let addr = server.local_addr();
        assert_eq!(request(addr, "GET", "/metrics").status, 200);
        let started = Instant::now();
        server.shutdown();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // The port can be bound again once tiny_http's accept thread has closed it.
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match TcpListener::bind(addr) {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => panic!("port still taken: {e}"),
                Err(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
        // Dropping without shutdown stops as well.
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
        drop(server);
    }

    #[test]
    fn concurrent_scrapes_and_a_slow_client() {
        let server = MetricsServer::start("127.0.0.1:0", finished_registry()).unwrap();
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

    /// Scrapes answer promptly while the job keeps every core busy.
    #[test]
    fn scrapes_are_prompt_while_the_job_saturates_the_cores() {
        let cores = thread::available_parallelism().map_or(2, |n| n.get());
        let job = start(graph(u64::MAX, cores), JobConfig::default()).unwrap();
        let server = MetricsServer::start("127.0.0.1:0", job.metrics().clone()).unwrap();
        let addr = server.local_addr();
        thread::sleep(Duration::from_millis(100));
        let mut slowest = Duration::ZERO;
        for _ in 0..5 {
            let started = Instant::now();
            let answer = request(addr, "GET", "/metrics");
            slowest = slowest.max(started.elapsed());
            assert_eq!(answer.status, 200);
            assert!(answer
                .body
                .contains(r#"tidemark_job_running{job_name="endpoint-test"} 1"#));
            thread::sleep(Duration::from_millis(20));
        }
        job.stop();
        job.wait();
        server.shutdown();
        assert!(
            slowest < Duration::from_secs(2),
            "slowest scrape {slowest:?}"
        );
    }
}
