//! Shared helpers of the end-to-end tests: the `tidemark` binary under test, write job files to
//! a temporary folder, run the binary with a guard that kills it on drop, wait with timeouts,
//! scrape `/metrics` over plain HTTP and parse it with `prometheus-parse`.
//!
//! Nothing here waits without a deadline: a test that would hang fails after [`TIMEOUT`].

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

#[cfg(feature = "kafka")]
pub mod brokers;

use prometheus_parse::{Labels, Sample, Scrape, Value};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The longest any single wait in a test may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// How long bounded jobs keep serving `/metrics` after they end. Tests end the lingering early
/// with SIGTERM once they have scraped, so this only bounds a test that fails half-way.
pub const LINGER: &str = "300s";

/// Polling period of the waits.
const POLL: Duration = Duration::from_millis(20);

// ---------------------------------------------------------------------------------------------
// The binary

/// Path of the `tidemark` binary under test: the one Cargo built for this test run
/// (`CARGO_BIN_EXE_tidemark`; these tests are test targets of tidemark-cli, see its Cargo.toml),
/// so it is built in the same profile and with the same features as the tests.
pub fn tidemark_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidemark"))
}

/// Joins `thread`, failing the test, naming `what` it waited for, if it has not ended within
/// [`TIMEOUT`].
pub fn join<T>(thread: JoinHandle<T>, what: &str) -> T {
    let deadline = Instant::now() + TIMEOUT;
    while !thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "gave up after {TIMEOUT:?} waiting for {what}"
        );
        thread::sleep(POLL);
    }
    thread.join().unwrap_or_else(|_| panic!("{what} panicked"))
}

// ---------------------------------------------------------------------------------------------
// Temporary folders

/// A fresh folder under the system temp dir (made by `tempfile`), removed on drop (kept when the
/// test panicked, and its path printed, to look at the job files and outputs).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tidemark-it-{label}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary folder: {e}"));
        // Removed by our Drop, which keeps it when the test failed.
        TempDir { path: dir.keep() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `contents` to `name` in the folder; returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, contents)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn read(&self, name: &str) -> String {
        let path = self.path.join(name);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("test files kept in {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// The output of a finished command.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// The exit code; panics when the process was killed by a signal.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or_else(|| {
            panic!(
                "process killed by a signal ({:?}); stderr:\n{}",
                self.status, self.stderr
            )
        })
    }
}

/// Runs a prepared command to its end, killing it and panicking after `timeout`.
pub fn run_command(cmd: Command, timeout: Duration, what: &str) -> Output {
    run_command_with_stdin(cmd, Stdio::null(), timeout, what)
}

/// [`run_command`] with `stdin` as the command's standard input (a file, say).
pub fn run_command_with_stdin(
    mut cmd: Command,
    stdin: Stdio,
    timeout: Duration,
    what: &str,
) -> Output {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut proc = Proc::from_child(child, what.to_owned());
    let status = proc.wait_for(timeout);
    Output {
        status,
        stdout: proc.stdout(),
        stderr: proc.stderr(),
    }
}

/// Runs `tidemark ARGS` in `dir` to its end (at most [`TIMEOUT`]).
pub fn tidemark<I, S>(dir: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut proc = Proc::spawn(dir, args);
    let status = proc.wait();
    Output {
        status,
        stdout: proc.stdout(),
        stderr: proc.stderr(),
    }
}

/// A running child process: killed (and reaped) on drop unless it has been waited for; its
/// standard output and error are read by threads into buffers, so it never blocks on a pipe.
pub struct Proc {
    child: Child,
    what: String,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

fn pump(mut from: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into.lock().unwrap().extend_from_slice(&buf[..n]),
            }
        }
    })
}

impl Proc {
    /// Starts `tidemark ARGS` in `dir`, standard input closed.
    pub fn spawn<I, S>(dir: &Path, args: I) -> Proc
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args
            .into_iter()
            .map(|a| a.as_ref().to_os_string())
            .collect();
        let what = format!(
            "tidemark {}",
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let child = Command::new(tidemark_bin())
            .args(&args)
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .envs(test_log())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Proc::from_child(child, what)
    }

    /// Starts `tidemark ARGS` in `dir` with a pipe to its standard input, returned beside it
    /// (drop it to close the input).
    pub fn spawn_with_stdin<I, S>(dir: &Path, args: I) -> (Proc, std::process::ChildStdin)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args
            .into_iter()
            .map(|a| a.as_ref().to_os_string())
            .collect();
        let what = format!(
            "tidemark {}",
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut child = Command::new(tidemark_bin())
            .args(&args)
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .envs(test_log())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        (Proc::from_child(child, what), stdin)
    }

    /// Starts `command` (`tidemark …`, perhaps behind a wrapper such as `faketime`) in `dir`
    /// with its output captured and standard input closed.
    pub fn spawn_command(command: Command, dir: &Path, what: &str) -> Proc {
        Proc::spawn_command_to(command, dir, what, Stdio::piped())
    }

    /// [`Proc::spawn_command`] with standard output going to `stdout` (a pipe nobody reads,
    /// say) rather than captured.
    pub fn spawn_command_to(mut command: Command, dir: &Path, what: &str, stdout: Stdio) -> Proc {
        let child = command
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .envs(test_log())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Proc::from_child(child, what.to_owned())
    }

    fn from_child(mut child: Child, what: String) -> Proc {
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(pump(out, stdout.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(pump(err, stderr.clone()));
        }
        Proc {
            child,
            what,
            stdout,
            stderr,
            readers,
            status: None,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Standard output so far (all of it once the process has been waited for).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Standard error so far (all of it once the process has been waited for).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Whether the process has exited (reaping it if so).
    pub fn has_exited(&mut self) -> bool {
        if self.status.is_none() {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.status = Some(status);
            }
        }
        self.status.is_some()
    }

    /// Waits for the process to exit, at most [`TIMEOUT`].
    pub fn wait(&mut self) -> ExitStatus {
        self.wait_for(TIMEOUT)
    }

    /// Waits for the process to exit, at most `timeout`; then kills it and panics.
    pub fn wait_for(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        while !self.has_exited() {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not exit within {timeout:?}; stderr:\n{}",
                    self.what,
                    self.stderr()
                );
            }
            thread::sleep(POLL);
        }
        // The pipes close when the process exits: the readers end, and the buffers are whole.
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        self.status.expect("exited")
    }

    /// Waits for the exit and returns its code; panics if killed by a signal.
    pub fn wait_code(&mut self) -> i32 {
        let status = self.wait();
        status.code().unwrap_or_else(|| {
            panic!(
                "{} was killed by a signal ({status:?}); stderr:\n{}",
                self.what,
                self.stderr()
            )
        })
    }

    /// Waits until standard error contains `needle`; returns standard error. Panics after
    /// [`TIMEOUT`] or when the process exits without having written it.
    pub fn wait_for_stderr(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let text = self.stderr();
            if text.contains(needle) {
                return text;
            }
            if self.has_exited() {
                // Read what is left in the pipe before giving up.
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                let text = self.stderr();
                if text.contains(needle) {
                    return text;
                }
                panic!(
                    "{} exited ({:?}) without writing {needle:?} to stderr:\n{text}",
                    self.what, self.status
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not write {needle:?} to stderr within {TIMEOUT:?}:\n{text}",
                self.what
            );
            thread::sleep(POLL);
        }
    }

    /// Waits for the start line (`...; metrics at http://ADDR/metrics`, or `https://` with
    /// TLS) and returns ADDR.
    pub fn metrics_addr(&mut self) -> SocketAddr {
        let text = self.wait_for_stderr("/metrics\n");
        find_url_addr(&text, "metrics at http://")
            .or_else(|| find_url_addr(&text, "metrics at https://"))
            .unwrap_or_else(|| panic!("no metrics address in stderr:\n{text}"))
    }

    /// Waits until the job has ended and the endpoint lingers (`--linger`); returns the metrics
    /// address. The numbers scraped from then on are final.
    pub fn wait_lingering(&mut self) -> SocketAddr {
        let text = self.wait_for_stderr("tidemark: job ended; serving http://");
        find_url_addr(&text, "tidemark: job ended; serving http://")
            .unwrap_or_else(|| panic!("no lingering address in stderr:\n{text}"))
    }

    /// Sends SIGTERM.
    #[cfg(unix)]
    pub fn terminate(&mut self) {
        assert!(!self.has_exited(), "{} has already exited", self.what);
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) with a valid signal number on our own child's pid, not yet reaped.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(
            rc,
            0,
            "kill(SIGTERM) failed: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Ends the lingering of a job that has finished (SIGTERM ends it at once) and expects
    /// exit code 0.
    #[cfg(unix)]
    pub fn end_lingering(&mut self) {
        self.terminate();
        let code = self.wait_code();
        assert_eq!(
            code,
            0,
            "{} exit code; stderr:\n{}",
            self.what,
            self.stderr()
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A process that had already exited on its own (not by the test's hand) says how: a
        // crash by signal writes nothing to stderr.
        let exited_before = match self.status {
            Some(status) => Some(status),
            None => self.child.try_wait().ok().flatten(),
        };
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // A failing test shows what each of its processes said last (its output is printed
        // only for failing tests).
        if thread::panicking() {
            // The pipes close with the process: let the readers take the last lines (a process
            // that wrote why it failed and exited a moment before the test noticed) first.
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
            let stderr = self.stderr.lock().map(|e| e.clone()).unwrap_or_default();
            let stderr = String::from_utf8_lossy(&stderr);
            // The whole of it in a file beside the kept test folders: a debug log
            // (`TIDEMARK_TEST_RUST_LOG`) runs to far more than the tail.
            let whole = std::env::temp_dir().join(format!(
                "tidemark-it-stderr-{}-{}.log",
                std::process::id(),
                self.child.id()
            ));
            if std::fs::write(&whole, stderr.as_bytes()).is_ok() {
                eprintln!(
                    "--- {}: its whole stderr is in {}",
                    self.what,
                    whole.display()
                );
            }
            match exited_before {
                Some(status) => eprintln!("--- {}: had exited: {status}", self.what),
                None => eprintln!("--- {}: was still running (killed now)", self.what),
            }
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!(
                "--- {}: the last {} lines of its stderr",
                self.what,
                tail.len()
            );
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}

/// The `HOST:PORT` in the first `PREFIX HOST:PORT/...` of `text`.
fn find_url_addr(text: &str, prefix: &str) -> Option<SocketAddr> {
    let start = text.find(prefix)? + prefix.len();
    let rest = &text[start..];
    let end = rest.find('/')?;
    rest[..end].parse().ok()
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// Kills `p` with SIGKILL (no clean-up of any kind, as `kill -9`) and waits for it.
#[cfg(unix)]
pub fn sigkill(p: &mut Proc) {
    // SAFETY: kill(2) on our own child.
    assert_eq!(
        unsafe { libc::kill(p.id() as libc::pid_t, libc::SIGKILL) },
        0
    );
    p.wait();
}

/// `tidemark run <job> --metrics-addr 127.0.0.1:0 --instance-id <id> <extra…>` in `dir`, and
/// its metrics address once it serves.
pub fn run_instance(dir: &Path, job: &Path, id: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    let mut p = spawn_instance(dir, job, id, extra);
    let addr = p.metrics_addr();
    (p, addr)
}

/// [`run_instance`] without waiting for the instance to serve.
pub fn spawn_instance(dir: &Path, job: &Path, id: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "run",
        job.to_str().unwrap(),
        "--metrics-addr",
        "127.0.0.1:0",
        "--instance-id",
        id,
    ];
    args.extend_from_slice(extra);
    Proc::spawn(dir, args)
}

/// Asks `ready` every 100 ms until it says yes; fails naming `what` after `deadline` (a bound
/// on waiting, not a timing assertion).
pub fn wait_until(what: &str, deadline: Duration, mut ready: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !ready() {
        assert!(started.elapsed() < deadline, "gave up waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// A port of 127.0.0.1 free a moment ago (for a process that must be told its address before
/// it prints it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Kafka partitions of `source_id` the instance at `addr` holds (its lag series).
pub fn partitions_held(addr: SocketAddr, source_id: &str) -> usize {
    scrape(addr)
        .samples("tidemark_kafka_lag_records")
        .filter(|s| s.labels.get("source_id") == Some(source_id))
        .count()
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `METHOD PATH` to `addr` over a fresh connection and reads the whole response (every
/// step at most [`TIMEOUT`]). Understands `Content-Length`, chunked bodies and bodiless `HEAD`.
pub fn http(addr: SocketAddr, method: &str, path: &str) -> Response {
    http_with_body(addr, method, path, "")
}

/// Polls `GET PATH` on `addr` until `done` holds for an answer (at most [`TIMEOUT`]); returns
/// it. `what` names what is waited for in the failure.
pub fn http_until(
    addr: SocketAddr,
    path: &str,
    what: &str,
    done: impl Fn(&Response) -> bool,
) -> Response {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let answer = http(addr, "GET", path);
        if done(&answer) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never said {what}; last: {} {}",
            answer.status,
            answer.body
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// [`http`] with a JSON request body (sent when not empty).
pub fn http_with_body(addr: SocketAddr, method: &str, path: &str, body: &str) -> Response {
    let stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    let content_type = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json; charset=utf-8\r\n"
    };
    http_over(stream, addr, method, path, content_type, body)
        .unwrap_or_else(|e| panic!("{method} {path} to {addr}: {e}"))
}

/// Sends `METHOD PATH` with `headers` (each ending in CRLF) and `body` over `stream` (plain
/// or TLS, already connected to `addr`) and reads the whole response. Understands
/// `Content-Length`, chunked bodies and bodiless `HEAD`.
pub fn http_over<S: Read + Write>(
    mut stream: S,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> std::io::Result<Response> {
    use std::io::{Error, ErrorKind};
    let bad = |what: String| Error::new(ErrorKind::InvalidData, what);
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;

    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let read_line = |reader: &mut BufReader<S>, line: &mut String| {
        line.clear();
        reader.read_line(line).map(|_| ())
    };
    read_line(&mut reader, &mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        read_line(&mut reader, &mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (name, value) = l
            .split_once(':')
            .ok_or_else(|| bad(format!("bad header line {l:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut response = Response {
        status,
        headers,
        body: String::new(),
    };
    if method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304 {
        return Ok(response);
    }
    let mut body = Vec::new();
    let chunked = response
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            read_line(&mut reader, &mut line)?;
            let size_text = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| bad(format!("bad chunk size line {line:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line (or the end of the stream).
                loop {
                    read_line(&mut reader, &mut line)?;
                    if line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            read_line(&mut reader, &mut line)?; // the CRLF after the chunk
        }
    } else if let Some(len) = response.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| bad(format!("bad content-length {len:?}")))?;
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader.read_to_end(&mut body)?;
    }
    response.body = String::from_utf8(body).map_err(|e| bad(format!("body: {e}")))?;
    Ok(response)
}

// ---------------------------------------------------------------------------------------------
// Metrics

/// One scrape of `/metrics`: the text and its parse.
pub struct Metrics {
    pub body: String,
    pub scrape: Scrape,
}

/// `GET /metrics`, expecting 200 and the Prometheus text format.
pub fn scrape(addr: SocketAddr) -> Metrics {
    let response = http(addr, "GET", "/metrics");
    assert_eq!(
        response.status, 200,
        "GET /metrics answered {}: {}",
        response.status, response.body
    );
    Metrics::parse(response.body)
}

/// Scrapes until `ready` holds for a scrape (at most [`TIMEOUT`]); returns that scrape.
pub fn scrape_until(addr: SocketAddr, what: &str, ready: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let m = scrape(addr);
        if ready(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen within {TIMEOUT:?}; last scrape:\n{}",
            m.body
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to `deadline` until instance `me` (at `addr`) estimates the clock offset of
/// instance `peer`; returns that estimate and its error bound in seconds
/// (`tidemark_clock_offset_seconds`, `tidemark_clock_offset_error_seconds`).
pub fn clock_offset_estimate(
    addr: SocketAddr,
    me: &str,
    peer: &str,
    deadline: Duration,
) -> (f64, f64) {
    let labels = [("tidemark_instance", me), ("peer_instance", peer)];
    let started = Instant::now();
    loop {
        let m = scrape(addr);
        if let Some(offset) = m.value("tidemark_clock_offset_seconds", &labels) {
            let error = m
                .value("tidemark_clock_offset_error_seconds", &labels)
                .unwrap();
            return (offset, error);
        }
        assert!(
            started.elapsed() < deadline,
            "gave up waiting for {me}'s clock-offset estimate of {peer}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

impl Metrics {
    pub fn parse(body: String) -> Metrics {
        let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
            .expect("the body parses as the Prometheus text format");
        Metrics { body, scrape }
    }

    /// The parsed samples named exactly `metric`. (prometheus-parse gathers a summary's quantile
    /// lines into one sample named after the family and a histogram's `_bucket` lines into one
    /// sample named after the family; `_count` and `_sum` lines stay samples of their own.)
    pub fn samples<'a>(&'a self, metric: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.scrape
            .samples
            .iter()
            .filter(move |s| s.metric == metric)
    }

    /// Sum of the scalar samples named `metric` whose labels pass `keep`.
    pub fn sum(&self, metric: &str, keep: impl Fn(&Labels) -> bool) -> f64 {
        self.samples(metric)
            .filter(|s| keep(&s.labels))
            .map(|s| scalar(&s.value).unwrap_or_else(|| panic!("{metric} is not a scalar: {s:?}")))
            .sum()
    }

    /// Sum of all samples named `metric`.
    pub fn total(&self, metric: &str) -> f64 {
        self.sum(metric, |_| true)
    }

    /// Whether any sample is named `metric`.
    pub fn has(&self, metric: &str) -> bool {
        self.samples(metric).next().is_some()
    }

    /// The value of the only sample named `metric` with exactly these labels (besides
    /// `job_name`, and `tidemark_instance` unless given), if any.
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let implied = |s: &Sample| {
            let instance = labels.iter().all(|(k, _)| *k != "tidemark_instance")
                && s.labels.get("tidemark_instance").is_some();
            1 + usize::from(instance)
        };
        self.samples(metric)
            .filter(|s| {
                s.labels.len() == labels.len() + implied(s)
                    && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            })
            .map(|s| scalar(&s.value).expect("scalar"))
            .next()
    }

    /// The series lines of the text (no comments), split into name, labels and value.
    pub fn raw_series(&self) -> Vec<RawSeries> {
        self.body
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(RawSeries::parse)
            .collect()
    }
}

/// A sample's value when it is a counter, gauge or untyped value.
pub fn scalar(value: &Value) -> Option<f64> {
    match value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

/// The names of a sample's labels.
pub fn label_names(labels: &Labels) -> BTreeSet<String> {
    labels.keys().cloned().collect()
}

/// A set of label names.
pub fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// One series line of the text format, parsed by hand (label values may hold escapes).
#[derive(Debug, Clone)]
pub struct RawSeries {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: String,
}

impl RawSeries {
    pub fn parse(line: &str) -> RawSeries {
        RawSeries::try_parse(line).unwrap_or_else(|| panic!("bad series line {line:?}"))
    }

    fn try_parse(line: &str) -> Option<RawSeries> {
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
        let name = line[..name_end].to_owned();
        let mut labels = Vec::new();
        let mut rest = &line[name_end..];
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            let end;
            loop {
                // Skip separators.
                while chars.next_if(|&(_, c)| c == ',' || c == ' ').is_some() {}
                let &(i, c) = chars.peek()?;
                if c == '}' {
                    end = i + 1;
                    break;
                }
                let mut key = String::new();
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                }
                if chars.next()?.1 != '"' {
                    return None;
                }
                let mut value = String::new();
                loop {
                    match chars.next()?.1 {
                        '\\' => match chars.next()?.1 {
                            'n' => value.push('\n'),
                            c => value.push(c),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.push((key, value));
            }
            rest = &inner[end..];
        }
        let value = rest.split_whitespace().next()?.to_owned();
        Some(RawSeries {
            name,
            labels,
            value,
        })
    }

    pub fn label_names(&self) -> BTreeSet<String> {
        self.labels.iter().map(|(k, _)| k.clone()).collect()
    }

    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus

/// Debian's Prometheus server (`scripts/test` installs the package `prometheus`).
pub const PROMETHEUS: &str = "/usr/bin/prometheus";

/// Percent-encodes a query parameter.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server (Debian's `prometheus`, [`PROMETHEUS`]) on a free port of 127.0.0.1,
/// with its storage in the test's folder; killed on drop.
pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    pub fn start(dir: &TempDir, config: &str) -> Prometheus {
        let config_path = dir.write("prometheus.yml", config);
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus { child, addr };
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if std::net::TcpStream::connect(addr).is_ok()
                && http(addr, "GET", "/-/ready").status == 200
            {
                break;
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    /// An instant query; returns its result vector.
    pub fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let response = http(
            self.addr,
            "GET",
            &format!("/api/v1/query?query={}", encode(expr)),
        );
        let answer: serde_json::Value = serde_json::from_str(&response.body)
            .unwrap_or_else(|e| panic!("{e}: {}", response.body));
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{expr}: {answer}"))
            .clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Reports

/// Reads and parses a `--report-file`.
pub fn read_report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the report {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the report {} is not JSON: {e}\n{text}", path.display()))
}

/// A JSON value as u64, or a panic naming `what`.
pub fn as_u64(v: &serde_json::Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not a whole number: {v}"))
}

/// Sum of the report's `markers_emitted[].count`.
pub fn report_markers_emitted(report: &serde_json::Value) -> u64 {
    report["markers_emitted"]
        .as_array()
        .expect("markers_emitted is an array")
        .iter()
        .map(|m| as_u64(&m["count"], "markers_emitted[].count"))
        .sum()
}

/// Sum of the report's `latency[].count` over the objects of `operator_kind` "sink".
pub fn report_sink_marker_count(report: &serde_json::Value) -> u64 {
    report["latency"]
        .as_array()
        .expect("latency is an array")
        .iter()
        .filter(|l| l["operator_kind"] == "sink")
        .map(|l| as_u64(&l["count"], "latency[].count"))
        .sum()
}

// ---------------------------------------------------------------------------------------------
// A loaded machine

/// Processes that keep `n` cores busy until dropped: a test of a job on a loaded machine
/// (threads starved, polls late) runs beside one.
pub struct CpuHog(Vec<Child>);

impl CpuHog {
    /// Starts `n` busy loops.
    pub fn start(n: usize) -> CpuHog {
        CpuHog(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("sh starts")
                })
                .collect(),
        )
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `RUST_LOG` for the processes a test starts: `TIDEMARK_TEST_RUST_LOG`'s value when set (to see
/// a failing test's log, say `tidemark_kafka=debug`), else none.
fn test_log() -> Option<(&'static str, String)> {
    std::env::var("TIDEMARK_TEST_RUST_LOG")
        .ok()
        .map(|v| ("RUST_LOG", v))
}

/// The complete checkpoints (`chk-<n>` holding `_metadata`) of job `job` in checkpoint
/// directory `dir`, by id.
pub fn complete_checkpoints(dir: &Path, job: &str) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join(job))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
            e.path().join("_metadata").is_file().then(|| (n, e.path()))
        })
        .collect();
    found.sort();
    found
}
