//! The HTTP endpoint on the metrics address: `/metrics` for Prometheus, the live view page at
//! `/` and its JSON API under `/api/v1/` (`docs/live-view.md`).
//!
//! | request | answer |
//! |---|---|
//! | `GET /metrics` | 200, the Prometheus text format with [`CONTENT_TYPE`] |
//! | `GET /` | 200, the live view page (HTML, everything inline, no network fetches) |
//! | `GET /api/v1/job` | 200, JSON: the job, its settings, vertices and edges |
//! | `GET /api/v1/metrics` | 200, JSON: a snapshot of the job's numbers |
//! | `GET /livez` | 200 `ok`; 503 and why once the job has failed |
//! | `GET /readyz` | 200 when the job is ready; 503 and a JSON body with the reason if not |
//! | `HEAD` on any of these | the same headers, no body |
//! | another method on one of these paths | 405 with `Allow: GET, HEAD` |
//! | any other path | 404 naming the paths there are |
//! | a request that does not parse | 400 (431 when its head is too large) |
//!
//! A query string is ignored. Every answer closes its connection. Before the job is built the
//! probes answer (`starting`), `/metrics` holds only `tidemark_job_ready` and
//! `tidemark_job_stalled`, and the JSON API answers 503.
//!
//! # Securing it
//! With a [`WebConfig`] (`--web-config-file`), every connection is TLS (rustls over the same
//! blocking sockets: `StreamOwned`), optionally with client certificates, and every path but
//! the probes needs basic auth (401 with `WWW-Authenticate` otherwise). A server started with
//! [`Role::Probes`] (`--probe-addr`) serves the two probes alone, plain HTTP, for kubelets that
//! cannot present a client certificate.
//!
//! # Whatever the clients do
//! One thread accepts connections and hands each to a thread of its own (at most
//! [`MAX_CONNECTIONS`] at once; past that a connection gets a 503 at once). A connection must
//! deliver its whole request head within [`REQUEST_DEADLINE`] and each write of the answer must
//! progress within [`WRITE_TIMEOUT`], so a client that sends half a request and stalls, or that
//! never reads its answer, holds one thread for a bounded time and delays nobody else.
//!
//! This replaced `tiny_http`, under which a scrape made while a few half-sent requests were open
//! could hang for good: its connection pool (`util/task_pool.rs`) counts a thread as idle from
//! the moment it starts waiting until it has taken the pool's lock again after being woken, so
//! when two connections arrive within that moment both are queued but only one thread wakes. The
//! second connection (the scrape) then waits until some pool thread ends its connection, and
//! tiny_http sets no read timeout, so a thread reading a stalled request never does. Its answers
//! were also written without a write timeout, so clients that never read could hold every worker.

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tidemark_runtime::exporter::{render_text, CONTENT_TYPE};

use crate::health::Health;
use crate::live::{LiveJob, PAGE_HTML};

pub mod web_config;
pub use web_config::WebConfig;

/// The path the metrics are served on.
pub const METRICS_PATH: &str = "/metrics";
/// The path of the job description (JSON).
pub const JOB_API_PATH: &str = "/api/v1/job";
/// The path of the metrics snapshot (JSON).
pub const METRICS_API_PATH: &str = "/api/v1/metrics";
/// The liveness probe.
pub const LIVEZ_PATH: &str = "/livez";
/// The readiness probe.
pub const READYZ_PATH: &str = "/readyz";

/// Connections served at once; one more gets a 503 and is closed.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a connection has to deliver its whole request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// How long one write of an answer may block on a client that does not read.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head read (request line and headers).
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The most bytes read and thrown away after answering (requests here need no body; reading it
/// lets the client see the answer instead of a connection reset).
const MAX_DISCARD_BYTES: usize = 64 * 1024;
/// How long a connection turned away at the limit is kept for its client to close it.
const REJECT_LINGER: Duration = Duration::from_millis(50);
/// Headers a request may have.
const MAX_HEADERS: usize = 64;
/// Stack of a connection thread (rendering and JSON encoding need little).
const CONNECTION_STACK: usize = 512 * 1024;

const PLAIN: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

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
    /// The thread accepting connections could not start.
    #[error("cannot serve metrics on {addr}: {reason}")]
    Server {
        /// The address as given.
        addr: String,
        /// What went wrong.
        reason: String,
    },
}

/// How much the endpoint grants each client ([`Limits::default`] holds the constants above).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a connection has to deliver its whole request head.
    pub request_deadline: Duration,
    /// How long one write of an answer may block.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            request_deadline: REQUEST_DEADLINE,
            write_timeout: WRITE_TIMEOUT,
        }
    }
}

/// What the endpoint serves: the run's health from the start, its job once built.
#[derive(Debug)]
pub struct Site {
    health: Arc<Health>,
    job: OnceLock<Arc<LiveJob>>,
}

impl Site {
    /// A site with `health` and no job yet.
    pub fn new(health: Arc<Health>) -> Arc<Site> {
        Arc::new(Site {
            health,
            job: OnceLock::new(),
        })
    }

    /// The job, once built: served from now on.
    pub fn set_job(&self, job: Arc<LiveJob>) {
        let _ = self.job.set(job);
    }
}

/// Which paths a server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Everything.
    All,
    /// `/livez` and `/readyz` alone (`--probe-addr`).
    Probes,
}

/// What every connection of one server shares.
struct Serving {
    site: Arc<Site>,
    web: Arc<WebConfig>,
    role: Role,
    limits: Limits,
}

/// A running endpoint. Stops on [`shutdown`](Self::shutdown) or when dropped.
pub struct MetricsServer {
    local_addr: SocketAddr,
    tls: bool,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl MetricsServer {
    #[cfg(test)]
    /// Binds `addr` (e.g. `127.0.0.1:9249`; port 0 picks a free port, see
    /// [`local_addr`](Self::local_addr)) and serves `job` on threads of its own.
    ///
    /// # Errors
    /// [`EndpointError::InvalidAddress`] when `addr` does not parse or resolve,
    /// [`EndpointError::Bind`] (naming the address and the OS error) when it cannot be bound.
    pub fn start(addr: &str, job: Arc<LiveJob>) -> Result<MetricsServer, EndpointError> {
        MetricsServer::start_with(addr, job, Limits::default())
    }

    #[cfg(test)]
    /// [`start`](Self::start) with other [`Limits`].
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with(
        addr: &str,
        job: Arc<LiveJob>,
        limits: Limits,
    ) -> Result<MetricsServer, EndpointError> {
        let health = Health::new(job.registry().job_name(), "");
        health.set_phase(crate::health::Phase::Running, "");
        let site = Site::new(health);
        site.set_job(job);
        MetricsServer::serve(
            addr,
            site,
            Arc::new(WebConfig::default()),
            Role::All,
            limits,
        )
    }

    /// Binds `addr` and serves the paths of `role` of `site`, secured as `web` says.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn serve(
        addr: &str,
        site: Arc<Site>,
        web: Arc<WebConfig>,
        role: Role,
        limits: Limits,
    ) -> Result<MetricsServer, EndpointError> {
        let tls = web.tls.is_some();
        let serving = Arc::new(Serving {
            site,
            web,
            role,
            limits,
        });
        let listener = bind(addr)?;
        let local_addr = listener
            .local_addr()
            .map_err(|error| bind_error(addr, error))?;
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let stop = stop.clone();
            thread::Builder::new()
                .name("http-accept".to_owned())
                .spawn(move || accept_loop(&listener, &stop, &serving))
                .map_err(|error| EndpointError::Server {
                    addr: addr.to_owned(),
                    reason: format!("cannot start a thread: {error}"),
                })?
        };
        tracing::debug!(%local_addr, "metrics endpoint listening");
        Ok(MetricsServer {
            local_addr,
            tls,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// The address actually bound (with the real port when `addr` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The URL of the metrics, e.g. `http://127.0.0.1:9249/metrics` (`https` with TLS).
    pub fn url(&self) -> String {
        format!("{}{METRICS_PATH}", self.base_url())
    }

    /// The URL of the live view, e.g. `http://127.0.0.1:9249/`.
    pub fn page_url(&self) -> String {
        format!("{}/", self.base_url())
    }

    fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.local_addr())
    }

    /// Stops accepting connections and closes the listening socket. Connections being served
    /// finish on their own threads (each within the timeouts above).
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept call with a connection of our own; the loop then sees `stop`.
        let wake = match self.local_addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.local_addr.port())
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.local_addr.port())
            }
            _ => self.local_addr,
        };
        match TcpStream::connect_timeout(&wake, Duration::from_secs(1)) {
            Ok(_) => {
                let _ = acceptor.join();
            }
            // Cannot wake it: it exits (closing the socket) at its next connection.
            Err(error) => tracing::warn!(%error, "metrics endpoint: cannot stop the acceptor"),
        }
    }
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("local_addr", &self.local_addr)
            .field("running", &self.acceptor.is_some())
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
        .map_err(|e| invalid(crate::error::os_reason(&e)))?
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
        reason: crate::error::os_reason(&error),
        error,
    }
}

/// Counts a connection as open while it lives.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts connections until `stop`, each served on a thread of its own.
fn accept_loop(listener: &TcpListener, stop: &AtomicBool, serving: &Arc<Serving>) {
    let limits = serving.limits;
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, a connection reset before it was accepted, ...: the
                // listener itself is fine. Pause briefly so a persistent error does not spin.
                tracing::debug!(%error, "metrics endpoint: accept failed");
                thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if open.fetch_add(1, Ordering::SeqCst) >= limits.max_connections {
            let _open = Open(open.clone());
            // A small answer fits the socket buffer: this write does not block. The short
            // linger (on this thread: the server is overloaded anyway) reads the request so
            // that the client sees the answer rather than a reset.
            // Under TLS a plain answer would be garbage to the client: just close.
            if serving.web.tls.is_none() {
                let _ = stream.set_write_timeout(Some(REJECT_LINGER));
                let _ = write_answer(
                    &mut &stream,
                    &Answer::text(503, "too many connections; try again\n"),
                    false,
                    &[],
                );
                linger(&stream, REJECT_LINGER);
            }
            continue;
        }
        let guard = Open(open.clone());
        let serving = serving.clone();
        let spawned = thread::Builder::new()
            .name("http-conn".to_owned())
            .stack_size(CONNECTION_STACK)
            .spawn(move || {
                let _guard = guard;
                if let Err(error) = serve_connection(stream, &serving) {
                    tracing::debug!(%error, "metrics endpoint: connection ended");
                }
            });
        if let Err(error) = spawned {
            // The closure (and with it the stream and the guard) is dropped: the client sees
            // its connection closed.
            tracing::warn!(%error, "metrics endpoint: cannot start a connection thread");
        }
    }
}

/// A parsed request: what routing needs.
struct Head {
    method: String,
    path: String,
    /// The `Authorization` header, if sent.
    authorization: Option<String>,
}

/// A connection the endpoint reads a request from and answers on: a plain TCP stream, or TLS
/// over one.
trait Connection: Read + Write {
    /// The TCP stream underneath (for timeouts and the shutdown).
    fn tcp(&self) -> &TcpStream;
    /// Ends the connection's own protocol before the TCP linger (TLS: `close_notify`).
    fn close(&mut self) {}
}

impl Connection for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

type TlsStream = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

impl Connection for TlsStream {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }

    fn close(&mut self) {
        self.conn.send_close_notify();
        let _ = self.flush();
    }
}

/// The answer to a plain HTTP request on a TLS port (as Go's servers give it).
const PLAIN_ON_TLS: &str =
    "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
                            Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS \
                            server.\n";

/// Reads one request from `stream`, answers it and closes the connection.
fn serve_connection(stream: TcpStream, serving: &Serving) -> io::Result<()> {
    let limits = serving.limits;
    stream.set_write_timeout(Some(limits.write_timeout))?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = &serving.web.tls else {
        return answer_on(stream, serving);
    };
    // A TLS connection starts with a handshake record (0x16); a letter is a plain request.
    stream.set_read_timeout(Some(limits.request_deadline))?;
    let mut first = [0u8; 1];
    if stream.peek(&mut first)? == 1 && first[0].is_ascii_alphabetic() {
        (&stream).write_all(PLAIN_ON_TLS.as_bytes())?;
        linger(&stream, LINGER);
        return Ok(());
    }
    let connection = rustls::ServerConnection::new(tls.clone()).map_err(io::Error::other)?;
    answer_on(rustls::StreamOwned::new(connection, stream), serving)
}

/// Reads one request from `connection`, answers it and lingers.
fn answer_on<C: Connection>(mut connection: C, serving: &Serving) -> io::Result<()> {
    let headers = &serving.web.headers;
    let answer = match read_head(&mut connection, serving.limits.request_deadline)? {
        Ok(head) => {
            let answer = respond(&head, serving);
            write_answer(&mut connection, &answer, head.method == "HEAD", headers)?;
            answer
        }
        Err(answer) => {
            write_answer(&mut connection, &answer, false, headers)?;
            answer
        }
    };
    tracing::trace!(status = answer.status, "metrics endpoint: answered");
    connection.close();
    linger(connection.tcp(), LINGER);
    Ok(())
}

/// How long a connection is kept after its answer for the client to close it.
const LINGER: Duration = Duration::from_secs(1);

/// Closes our side and reads (dropping it) what the client still sends until it closes, at
/// most `time` and [`MAX_DISCARD_BYTES`]: closing a socket with unread data resets the
/// connection, and a reset can destroy the answer before the client has read it.
fn linger(mut stream: &TcpStream, time: Duration) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + time;
    let mut buf = [0u8; 4096];
    let mut read = 0;
    while read < MAX_DISCARD_BYTES {
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n,
        }
    }
}

/// Reads the request head within `deadline` (the TLS handshake included). `Ok(Err(answer))` is
/// a bad request answered with `answer`; `Err` an I/O error, a failed handshake or a timeout
/// (the connection is dropped).
fn read_head<C: Connection>(
    stream: &mut C,
    deadline: Duration,
) -> io::Result<Result<Head, Answer>> {
    let deadline = Instant::now() + deadline;
    let mut buf = vec![0u8; MAX_HEAD_BYTES];
    let mut len = 0;
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "request head too slow"))?;
        stream.tcp().set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a whole request",
            ));
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                let bad_length = request.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("content-length")
                        && std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<u64>().ok())
                            .is_none()
                });
                if bad_length {
                    return Ok(Err(Answer::text(
                        400,
                        "bad request: Content-Length is not a number\n",
                    )));
                }
                let authorization = request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("authorization"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(str::to_owned);
                return Ok(Ok(Head {
                    method: request.method.unwrap_or("").to_owned(),
                    path: request.path.unwrap_or("").to_owned(),
                    authorization,
                }));
            }
            Ok(httparse::Status::Partial) if len == buf.len() => {
                return Ok(Err(Answer::text(
                    431,
                    format!("request head larger than {MAX_HEAD_BYTES} bytes\n"),
                )))
            }
            Ok(httparse::Status::Partial) => {}
            Err(error) => {
                return Ok(Err(Answer::text(
                    400,
                    format!("bad request: {error}; expected an HTTP/1.x request\n"),
                )))
            }
        }
    }
}

/// An answer to write.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    allow: bool,
    /// Ask for basic auth (`WWW-Authenticate`).
    login: bool,
}

impl Answer {
    fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            content_type,
            body: body.into(),
            allow: false,
            login: false,
        }
    }

    fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer::new(status, PLAIN, body.into())
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

fn write_answer(
    stream: &mut impl Write,
    answer: &Answer,
    head_only: bool,
    headers: &[(String, String)],
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        answer.status,
        reason(answer.status),
        answer.content_type,
        answer.body.len()
    );
    if answer.allow {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    if answer.login {
        out.push_str("WWW-Authenticate: Basic realm=\"tidemark\", charset=\"UTF-8\"\r\n");
    }
    out.push_str("Cache-Control: no-store\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(&answer.body);
    }
    stream.write_all(&bytes)?;
    stream.flush()
}

/// What the endpoint serves at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    Metrics,
    Page,
    JobApi,
    MetricsApi,
    Livez,
    Readyz,
}

impl Resource {
    /// The probes: served without a login, and on the probe address.
    fn is_probe(self) -> bool {
        matches!(self, Resource::Livez | Resource::Readyz)
    }
}

/// What the endpoint answers to `method` on `target`.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Serve(Resource),
    MethodNotAllowed,
    NotFound,
}

fn route(method: &str, target: &str, role: Role) -> Route {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let resource = match path {
        METRICS_PATH => Resource::Metrics,
        "/" | "/index.html" => Resource::Page,
        JOB_API_PATH => Resource::JobApi,
        METRICS_API_PATH => Resource::MetricsApi,
        LIVEZ_PATH => Resource::Livez,
        READYZ_PATH => Resource::Readyz,
        _ => return Route::NotFound,
    };
    if role == Role::Probes && !resource.is_probe() {
        return Route::NotFound;
    }
    match method {
        "GET" | "HEAD" => Route::Serve(resource),
        _ => Route::MethodNotAllowed,
    }
}

fn respond(head: &Head, serving: &Serving) -> Answer {
    let (method, target) = (head.method.as_str(), head.path.as_str());
    match route(method, target, serving.role) {
        Route::Serve(resource)
            if !resource.is_probe() && !serving.web.allows(head.authorization.as_deref()) =>
        {
            let mut answer = Answer::text(401, "unauthorized: log in (basic auth)\n");
            answer.login = true;
            answer
        }
        Route::Serve(resource) => {
            match catch_unwind(AssertUnwindSafe(|| serve(resource, &serving.site))) {
                Ok(answer) => answer,
                Err(_) => Answer::text(500, "cannot answer; see the log\n"),
            }
        }
        Route::MethodNotAllowed => {
            let mut answer = Answer::text(
                405,
                format!("method not allowed: {method}; this path answers GET and HEAD\n"),
            );
            answer.allow = true;
            answer
        }
        Route::NotFound if serving.role == Role::Probes => Answer::text(
            404,
            format!(
                "not found: {target}; this address serves the probes {LIVEZ_PATH} and \
                 {READYZ_PATH} alone\n"
            ),
        ),
        Route::NotFound => Answer::text(
            404,
            format!(
                "not found: {target}; this endpoint serves {METRICS_PATH} (Prometheus), / (the \
                 live view), {JOB_API_PATH}, {METRICS_API_PATH}, {LIVEZ_PATH} and \
                 {READYZ_PATH}\n"
            ),
        ),
    }
}

fn serve(resource: Resource, site: &Site) -> Answer {
    let job = site.job.get();
    match (resource, job) {
        (Resource::Livez, _) => match site.health.live() {
            Ok(()) => Answer::text(200, "ok\n"),
            Err(why) => Answer::text(503, format!("{why}\n")),
        },
        (Resource::Readyz, _) => {
            let (status, body) = site.health.readyz();
            Answer::new(status, JSON, body)
        }
        (Resource::Page, _) => Answer::new(200, HTML, PAGE_HTML),
        (Resource::Metrics, Some(job)) => match render_text(job.registry()) {
            Ok(text) => Answer::new(200, CONTENT_TYPE, text),
            Err(error) => Answer::text(500, format!("cannot render the metrics: {error}\n")),
        },
        (Resource::Metrics, None) => Answer::new(200, CONTENT_TYPE, site.health.metrics_text()),
        (Resource::JobApi, Some(job)) => Answer::new(200, JSON, job.job_json()),
        (Resource::MetricsApi, Some(job)) => Answer::new(200, JSON, job.metrics_json()),
        (Resource::JobApi | Resource::MetricsApi, None) => Answer::new(
            503,
            JSON,
            "{\"error\": \"the job is starting: nothing to show yet\"}\n",
        ),
    }
}

#[cfg(test)]
mod tests;
