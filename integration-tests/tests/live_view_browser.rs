//! The live view in a real browser: Debian's headless Chromium driven over WebDriver by
//! Debian's `chromedriver` (`.ci/run` installs both; the test fails, never skips, without them).
//!
//! A job of W5's size (a source, ten maps and a sink, 8 subtasks each but the source, markers at
//! subtask granularity) reads lines the test writes to its standard input, so the test decides
//! when the job ends. While it runs: no console errors, every vertex id on the page, numbers that
//! change between two looks, a click that opens the panel with per-subtask rows, a chart and a
//! heatmap. Then the input closes: the page shows the final state; then the process exits: the
//! page says it is gone. A screenshot is kept in `target/live-view.png` (and copied to
//! `docs/live-view.png` when `TIDEMARK_DOCS_SCREENSHOT=1`).
#![cfg(unix)]

mod common;

use common::{http, http_with_body, Proc, TempDir, TIMEOUT};
use serde_json::{json, Value};
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const POLL: Duration = Duration::from_millis(100);
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn job_yaml() -> String {
    let mut yaml = String::from(
        "name: browser
parallelism: 8
latency:
  interval: 10ms
  granularity: subtask
sources:
  input:
    type: stdin
    parallelism: 1
    timestamps: ingestion
operators:
  m01: {type: map, input: input, partition: rebalance}
",
    );
    for i in 2..=10 {
        yaml.push_str(&format!("  m{i:02}: {{type: map, input: m{:02}}}\n", i - 1));
    }
    yaml.push_str("sinks:\n  out: {type: discard, input: m10}\n");
    yaml
}

fn ids() -> Vec<String> {
    let mut ids = vec!["input".to_owned()];
    ids.extend((1..=10).map(|i| format!("m{i:02}")));
    ids.push("out".to_owned());
    ids
}

/// Both programs must be there: a missing one is a failure that says how to install it.
fn require_tools() {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: the browser tests need Debian's chromium and chromium-driver \
             (apt-get install -y chromium chromium-driver; scripts/test installs them)"
        );
    }
}

/// A chromedriver process on a free local port; killed on drop.
struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Driver {
    fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let driver = Driver { child, addr };
        let deadline = Instant::now() + TIMEOUT;
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            thread::sleep(POLL);
        }
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One WebDriver session: a small synchronous client of the W3C protocol.
struct Session {
    driver: SocketAddr,
    id: String,
}

impl Session {
    fn new(driver: &Driver, profile: &Path) -> Session {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                    format!("--user-data-dir={}", profile.display()),
                    "--window-size=1600,1000",
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let answer = call(driver.addr, "POST", "/session", Some(caps));
        let id = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Session {
            driver: driver.addr,
            id,
        }
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        call(
            self.driver,
            method,
            &format!("/session/{}{path}", self.id),
            body,
        )
    }

    fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` (a function body; `return` its result) in the page.
    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Waits until `script` returns true; panics (naming `what`) after [`TIMEOUT`].
    fn wait_for(&self, what: &str, script: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while self.js(script) != Value::Bool(true) {
            assert!(Instant::now() < deadline, "the page never showed {what}");
            thread::sleep(POLL);
        }
    }

    fn find(&self, css: &str) -> String {
        let found = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Finds the element `css` selects and runs `command` on it (`/element/{id}/{command}`).
    /// The page redraws every second, replacing elements: one replaced between the find and
    /// the command ("stale element reference") is found again.
    fn on_element(&self, css: &str, method: &str, command: &str, body: Option<Value>) -> Value {
        for _ in 0..20 {
            let element = self.find(css);
            let path = format!("/session/{}/element/{element}/{command}", self.id);
            let body_text = body.as_ref().map(|b| b.to_string()).unwrap_or_default();
            let response = http_with_body(self.driver, method, &path, &body_text);
            let answer: Value = serde_json::from_str(&response.body)
                .unwrap_or_else(|e| panic!("{method} {path}: {e}: {}", response.body));
            if response.status == 200 {
                return answer["value"].clone();
            }
            assert_eq!(
                answer["value"]["error"], "stale element reference",
                "{method} {path} failed: {answer}"
            );
        }
        panic!("{css} was replaced by every redraw of 20");
    }

    fn text(&self, css: &str) -> String {
        let v = self.on_element(css, "GET", "text", None);
        v.as_str().unwrap_or_default().to_owned()
    }

    fn displayed(&self, css: &str) -> bool {
        self.on_element(css, "GET", "displayed", None) == Value::Bool(true)
    }

    fn click(&self, css: &str) {
        self.on_element(css, "POST", "click", Some(json!({})));
    }

    /// Browser log entries at level SEVERE (console errors, uncaught exceptions, failed loads)
    /// since the last call.
    fn severe_logs(&self) -> Vec<String> {
        let logs = self.cmd("POST", "/se/log", Some(json!({"type": "browser"})));
        logs.as_array()
            .unwrap_or_else(|| panic!("no browser log: {logs}"))
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].to_string())
            .collect()
    }

    fn screenshot(&self, path: &Path) {
        let png = self.cmd("GET", "/screenshot", None);
        let bytes = base64_decode(png.as_str().expect("base64 PNG"));
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            http(self.driver, "DELETE", &format!("/session/{}", self.id))
        });
    }
}

/// A WebDriver command; returns its `value`, panicking on an error answer.
fn call(driver: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let response = http_with_body(driver, method, path, &body);
    let answer: Value = serde_json::from_str(&response.body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}: {}", response.body));
    assert_eq!(response.status, 200, "{method} {path} failed: {answer}");
    answer["value"].clone()
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            other => panic!("not base64: {other}"),
        }
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for chunk in clean.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let mut acc = 0u32;
        for (i, &c) in data.iter().enumerate() {
            acc |= value(c) << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..data.len()]);
    }
    out
}

/// `<target>/live-view.png`: the target dir the test binary was built in.
fn screenshot_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // <target>/<profile>/deps/<test>
    let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
    target.join("live-view.png")
}

/// Writes JSON lines to the job's standard input until `stop`, then closes it.
fn feed(mut stdin: std::process::ChildStdin, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut key = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let mut lines = String::new();
            for _ in 0..200 {
                key = (key + 7) % 1000;
                lines.push_str(&format!("{{\"key\": {key}, \"value\": 1.5}}\n"));
            }
            if stdin.write_all(lines.as_bytes()).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
    })
}

#[test]
fn the_live_view_in_headless_chromium() {
    require_tools();
    let dir = TempDir::new("live-view");
    dir.write("job.yaml", &job_yaml());
    let (mut proc, stdin) = Proc::spawn_with_stdin(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--linger",
            common::LINGER,
        ],
    );
    let addr = proc.metrics_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = feed(stdin, stop.clone());

    let driver = Driver::start();
    let session = Session::new(&driver, &dir.join("chromium-profile"));
    session.goto(&format!("http://{addr}/"));
    session.wait_for(
        "the graph of a running job",
        "return document.querySelectorAll('[data-vertex]').length === 12 \
         && document.getElementById('state').textContent === 'running' \
         && !document.querySelector('[data-vertex=\"out\"] text.rate').textContent.startsWith('0/s');",
    );
    // Readiness beside the state: the job runs and nothing stalls.
    session.wait_for(
        "the job shown ready",
        "const h = document.getElementById('health'); \
         return !h.hidden && h.textContent === 'ready' && h.className === 'state ready';",
    );

    // Every vertex id is on the page, visible.
    for id in ids() {
        let vertex = format!("g[data-vertex=\"{id}\"]");
        assert!(session.displayed(&vertex), "vertex {id} is not displayed");
        assert!(
            session.text(&vertex).contains(&id),
            "vertex {id} shows {:?}",
            session.text(&vertex)
        );
    }
    // The source's lag is up front.
    let lag = "#lag .lagcard[data-source=\"input\"]";
    assert!(session.text(lag).contains("how far behind"));

    // Two looks at the sink's numbers: they change while the job runs.
    let look = || {
        session
            .js("return document.querySelector('[data-vertex=\"out\"] text.rate').textContent;")
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = look();
    let deadline = Instant::now() + TIMEOUT;
    let mut second = look();
    while second == first {
        assert!(
            Instant::now() < deadline,
            "the numbers never changed: {first}"
        );
        thread::sleep(POLL);
        second = look();
    }

    // A click opens the panel: one row per subtask, the latency chart, the heatmap (one source
    // subtask × 8 subtasks at subtask granularity).
    session.click("g[data-vertex=\"m05\"]");
    session.wait_for(
        "the panel of m05",
        "return document.getElementById('panel').classList.contains('open') \
         && document.getElementById('panel-title').textContent === 'm05' \
         && document.querySelectorAll('#subtasks tr.subtask').length === 8 \
         && document.querySelectorAll('#heatmap rect.cell').length === 8 \
         && document.querySelectorAll('#chart polyline').length >= 2;",
    );
    let panel = "#panel";
    assert!(session.displayed(panel));
    assert!(session.text(panel).contains("type map, parallelism 8"));

    let shot = screenshot_path();
    session.screenshot(&shot);
    if std::env::var_os("TIDEMARK_DOCS_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/live-view.png");
        std::fs::copy(&shot, &docs).expect("copy the screenshot into docs/");
    }
    let errors = session.severe_logs();
    assert!(
        errors.is_empty(),
        "console errors while running: {errors:#?}"
    );

    // No checkpoints to a directory: no checkpoint line.
    assert_eq!(
        session.js("return document.getElementById('checkpoint').textContent;"),
        ""
    );

    // The input closes: the job finishes and lingers; the page shows its final state.
    stop.store(true, Ordering::SeqCst);
    common::join(feeder, "the thread feeding the job's standard input");
    proc.wait_lingering();
    session.wait_for(
        "the final state",
        "return document.getElementById('state').textContent === 'finished' \
         && document.getElementById('banner').textContent.includes('final numbers');",
    );
    let errors = session.severe_logs();
    assert!(
        errors.is_empty(),
        "console errors after the end: {errors:#?}"
    );
    // The numbers stay: the panel still shows m05.
    assert_eq!(
        session.js("return document.getElementById('panel-title').textContent;"),
        "m05"
    );

    // The process exits: the page says so plainly and keeps the last numbers.
    proc.end_lingering();
    session.wait_for(
        "that the process is gone",
        "return document.getElementById('state').textContent === 'process gone' \
         && document.getElementById('banner').textContent.includes('process is gone') \
         && document.querySelectorAll('[data-vertex]').length === 12;",
    );
}

/// A keyed sum with checkpoints to a directory every 100 ms.
const CHECKPOINT_JOB: &str = "name: ckpt-view
parallelism: 2
latency:
  interval: 0
checkpoint:
  interval: 100ms
  dir: ckpt
sources:
  gen: {type: generator, rate: 2000, keys: 100}
operators:
  sum: {type: reduce, input: gen, partition: hash, aggregate: sum}
sinks:
  out: {type: discard, input: sum}
";

/// `/api/v1/job` of the job at `addr`.
fn job_api(addr: SocketAddr) -> Value {
    let response = http(addr, "GET", "/api/v1/job");
    assert_eq!(response.status, 200, "{}", response.body);
    serde_json::from_str(&response.body).expect("/api/v1/job is JSON")
}

/// What the page's checkpoint line shows: its text and the ids in its data- attributes.
fn checkpoint_line(session: &Session) -> Value {
    session.js(
        "const e = document.getElementById('checkpoint'); \
         return {text: e.textContent, id: e.dataset.checkpointId, restored: e.dataset.restoredFrom, \
                 state: document.getElementById('state').textContent};",
    )
}

/// The page shows the last complete checkpoint `/api/v1/job` reports while a job with
/// checkpoints to a directory runs (a later one than it first showed: it follows them) and once
/// it has stopped (`--duration`; the same id as the API); after `--restore latest` it also names
/// the checkpoint the run was restored from, the one the first run stopped with.
#[test]
fn the_live_view_shows_the_last_checkpoint_and_the_one_restored_from() {
    require_tools();
    let dir = TempDir::new("live-view-checkpoint");
    dir.write("job.yaml", CHECKPOINT_JOB);
    let args = |restore: bool| {
        let mut a = vec![
            "run",
            "job.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--linger",
            common::LINGER,
            // Long enough for the page to see checkpoints come while the job runs; the stop
            // takes a last checkpoint, and then the job lingers (a signal would end it).
            "--duration",
            "10s",
        ];
        if restore {
            a.extend(["--restore", "latest"]);
        }
        a
    };
    let driver = Driver::start();
    let session = Session::new(&driver, &dir.join("chromium-profile"));

    // 1. A fresh run: the page follows the checkpoints while the job runs.
    let mut first = Proc::spawn(dir.path(), args(false));
    let addr = first.metrics_addr();
    session.goto(&format!("http://{addr}/"));
    let running_id = |session: &Session| -> Option<u64> {
        let line = checkpoint_line(session);
        if line["state"] != "running" {
            return None;
        }
        line["id"].as_str().and_then(|id| id.parse().ok())
    };
    let deadline = Instant::now() + TIMEOUT;
    let seen = loop {
        if let Some(id) = running_id(&session) {
            break id;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed a checkpoint while the job ran: {}",
            checkpoint_line(&session)
        );
        thread::sleep(POLL);
    };
    let line = checkpoint_line(&session);
    let text = line["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("checkpoint {seen} · ")) && text.ends_with(" ago"),
        "{text}"
    );
    assert!(!text.contains("restored"), "{text}");
    // A later checkpoint replaces it without reloading the page.
    session.wait_for(
        "a later checkpoint while the job runs",
        &format!(
            "return document.getElementById('state').textContent === 'running' \
             && +document.getElementById('checkpoint').dataset.checkpointId > {seen};"
        ),
    );
    assert!(
        job_api(addr)["checkpoint"]["id"].as_u64().unwrap() > seen,
        "the API is behind the page"
    );

    // The stop takes a last checkpoint; the job lingers and the page shows the id the API
    // reports.
    first.wait_lingering();
    let api = job_api(addr);
    assert_eq!(api["state"], "stopped", "{api}");
    assert_eq!(api["restored_from"], Value::Null, "{api}");
    let last = api["checkpoint"]["id"].as_u64().expect("a last checkpoint");
    assert!(
        first
            .stderr()
            .contains(&format!("stopped with checkpoint {last} ")),
        "{}",
        first.stderr()
    );
    session.wait_for(
        "the last checkpoint of the stopped job",
        &format!(
            "const e = document.getElementById('checkpoint'); \
             return document.getElementById('state').textContent === 'stopped' \
               && e.dataset.checkpointId === '{last}' \
               && e.textContent.startsWith('checkpoint {last} · ');"
        ),
    );
    first.end_lingering();

    // 2. Restored from that checkpoint: the page names it and follows the new ones.
    let mut second = Proc::spawn(dir.path(), args(true));
    let addr = second.metrics_addr();
    let api = job_api(addr);
    assert_eq!(api["restored_from"]["id"].as_u64(), Some(last), "{api}");
    assert!(
        api["restored_from"]["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("chk-{last}")),
        "{api}"
    );
    session.goto(&format!("http://{addr}/"));
    session.wait_for(
        "the restored checkpoint and a new one",
        &format!(
            "const e = document.getElementById('checkpoint'); \
             return e.dataset.restoredFrom === '{last}' \
               && e.textContent.endsWith(' · restored from chk-{last}') \
               && +e.dataset.checkpointId > {last};"
        ),
    );
    second.wait_lingering();
    let api = job_api(addr);
    let final_id = api["checkpoint"]["id"].as_u64().expect("a last checkpoint");
    assert!(final_id > last, "ids continue after a restore: {api}");
    session.wait_for(
        "the last checkpoint of the restored job",
        &format!(
            "const e = document.getElementById('checkpoint'); \
             return document.getElementById('state').textContent === 'stopped' \
               && e.dataset.checkpointId === '{final_id}' \
               && e.textContent.startsWith('checkpoint {final_id} · ') \
               && e.textContent.endsWith(' · restored from chk-{last}');"
        ),
    );
    let errors = session.severe_logs();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    second.end_lingering();
}

/// A chain with one slow vertex feeding a window whose other input (standard input) never
/// sends anything: the page names the bottleneck and says, in words, which input holds the
/// window's event time back.
const CHAIN_AND_HOLDER_JOB: &str = "name: chain-holder
latency:
  interval: 20ms
sources:
  clock:
    type: generator
    rate: 5000
    keys: 8
    watermarks: {interval: 50ms}
  typed:
    type: stdin
    watermarks: {interval: 50ms}
operators:
  work: {type: map, input: clock, scale: 2}
  slow: {type: delay, input: work, per_record: 150us}
  win: {type: window, input: [slow, typed], time: event, size: 1s, aggregate: count}
sinks:
  out: {type: discard, input: win}
";

#[test]
fn the_live_view_names_the_bottleneck_inside_a_chain_and_the_input_holding_event_time() {
    require_tools();
    let dir = TempDir::new("live-view-chain");
    dir.write("job.yaml", CHAIN_AND_HOLDER_JOB);
    let (mut proc, stdin) = Proc::spawn_with_stdin(
        dir.path(),
        ["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = proc.metrics_addr();
    let driver = Driver::start();
    let session = Session::new(&driver, &dir.join("chromium-profile"));
    session.goto(&format!("http://{addr}/"));
    // `slow` (150 us of sleep per record, chained with the generator and `work`) is named, and
    // `typed`, which has sent nothing, is said to hold `win` back.
    session.wait_for(
        "the bottleneck and the holder",
        "const b = document.getElementById('bottleneck'); \
         const h = document.querySelector('#eventtime .holder[data-vertex=\"win\"]'); \
         return !!b && b.textContent.startsWith(' · bottleneck: slow (busy ') \
           && !!h && h.dataset.input === 'typed' \
           && h.textContent.startsWith('Event time at win is held back by typed');",
    );
    let headline = session.text("#headline");
    assert!(
        headline.contains("marker p99")
            && headline.contains("record e2e p99")
            && headline.contains("source lag"),
        "{headline}"
    );
    // The vertex boxes show the vertex's own busy share: `slow` is the busiest of its chain.
    let own_busy = |id: &str| -> f64 {
        session
            .js(&format!(
                "return last.vertices.find(v => v.id === '{id}').own_busy_max;"
            ))
            .as_f64()
            .unwrap()
    };
    assert!(
        own_busy("slow") > own_busy("work") && own_busy("slow") > own_busy("clock"),
        "slow {} work {} clock {}",
        own_busy("slow"),
        own_busy("work"),
        own_busy("clock")
    );
    let slow_box = session.text("g[data-vertex=\"slow\"]");
    assert!(slow_box.contains("busy "), "{slow_box}");
    let shot = screenshot_path().with_file_name("live-view-chain.png");
    session.screenshot(&shot);
    let errors = session.severe_logs();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    drop(stdin);
    proc.terminate();
    proc.wait();
}

/// A job running in a folder of its own, and the live view open on it in Chromium.
struct LivePage {
    proc: Proc,
    addr: SocketAddr,
    // (Fields drop in this order: the session before its driver.)
    session: Session,
    _driver: Driver,
    _dir: TempDir,
}

impl LivePage {
    /// Writes `job` and `files` (name, text) into a new folder `name` and runs the job there.
    fn open(name: &str, job: &str, files: &[(&str, &str)]) -> LivePage {
        require_tools();
        let dir = TempDir::new(name);
        dir.write("job.yaml", job);
        for (file, text) in files {
            dir.write(file, text);
        }
        // The browser first: the job's page is opened as soon as it listens.
        let driver = Driver::start();
        let session = Session::new(&driver, &dir.join("chromium-profile"));
        let mut proc = Proc::spawn(
            dir.path(),
            ["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"],
        );
        let addr = proc.metrics_addr();
        session.goto(&format!("http://{addr}/"));
        LivePage {
            proc,
            addr,
            session,
            _driver: driver,
            _dir: dir,
        }
    }

    /// Checks that the page logged no error, then stops the job.
    fn close(mut self) {
        let errors = self.session.severe_logs();
        assert!(errors.is_empty(), "console errors: {errors:#?}");
        self.proc.terminate();
        self.proc.wait();
    }
}

/// A file source read slowly (a `delay` chained behind it), so its lag is in bytes for a while.
const FILE_LAG_JOB: &str = "name: file-lag
latency: {interval: 20ms}
sources: {lines: {type: file, path: lines.jsonl}}
operators: {slow: {type: delay, input: lines, per_record: 200us}}
sinks: {out: {type: discard, input: slow}}
";

#[test]
fn the_headline_writes_durations_in_human_units_and_the_lag_as_the_cards_do() {
    let lines: String = (0..100_000)
        .map(|i| format!("{{\"key\": {}, \"value\": {i}}}\n", i % 100))
        .collect();
    let page = LivePage::open(
        "live-view-file-lag",
        FILE_LAG_JOB,
        &[("lines.jsonl", &lines)],
    );
    let session = &page.session;
    // The file source counts its lag in bytes only: the headline says so as its card does,
    // not "unknown".
    session.wait_for(
        "the file's lag in the headline and on its card",
        "const h = document.getElementById('headline-lag'); \
         const c = document.querySelector('#lag .lagcard[data-source=\"lines\"] .big'); \
         return !!h && !!c && /^[0-9.]+ (B|KiB|MiB)$/.test(h.textContent) \
           && c.textContent === 'lag ' + h.textContent;",
    );
    let headline = session.text("#headline");
    assert!(!headline.contains("unknown"), "{headline}");
    assert!(!headline.contains("e+"), "{headline}");
    // Long durations, counts and sizes in units a reader takes in at a glance: never in
    // exponent notation.
    let shown = session.js(
        "return [fmtSeconds(1790 * 3600), fmtSeconds(0.00042), fmtSeconds(95000000), \
                 fmtSeconds(30), fmtSeconds(5400), fmtCount(2.5e12), fmtBytes(3 * 2 ** 40), \
                 fmtBytes(51800000)];",
    );
    assert_eq!(
        shown,
        json!([
            "74.6 days",
            "420 µs",
            "3.01 years",
            "30.0 s",
            "90.0 min",
            "2500G",
            "3.00 TiB",
            "49.4 MiB"
        ])
    );
    // The delay behind the source keeps its thread busy: it is the bottleneck, in red.
    session.wait_for(
        "the bottleneck",
        "const b = document.getElementById('bottleneck'); \
         return !!b && b.textContent.startsWith(' · bottleneck: slow (busy ') \
           && last.bottleneck.busy >= 0.5;",
    );
    page.close();
}

/// An interval join of payments and clicks read from files (docs/examples/joins.yaml's shape),
/// with a slow step behind it so that the job runs for a while (results pass the `delay` at
/// 1 ms each per subtask: about 50 s for the 100 000 results).
const JOIN_JOB: &str = "name: join-view
latency: {interval: 20ms}
sources:
  payments:
    type: file
    path: payments.jsonl
    format: json
    timestamp: ts
    watermarks: {max_out_of_orderness: 1s}
  clicks:
    type: file
    path: clicks.jsonl
    format: json
    timestamp: ts
    watermarks: {max_out_of_orderness: 1s}
operators:
  paid_after_click:
    type: join
    left: payments
    right: clicks
    key: user
    between: [-10m, 0s]
    join: left
    parallelism: 2
  slow: {type: delay, input: paid_after_click, per_record: 1ms, parallelism: 2}
sinks:
  out: {type: discard, input: slow, parallelism: 2}
";

/// 100 000 payments, one a second of event time over 1000 users, and 100 000 clicks, each 30 s
/// before the payment of the same number and by the same user (every tenth by a user who pays
/// nothing): 90 % of the payments match one click, the others none.
fn payments_and_clicks() -> (String, String) {
    const T0: u64 = 1_700_000_000_000;
    let mut payments = String::new();
    let mut clicks = String::new();
    for i in 0..100_000u64 {
        let ts = T0 + i * 1000;
        payments.push_str(&format!(
            "{{\"id\": {i}, \"user\": \"u{}\", \"amount\": {}, \"ts\": {ts}}}\n",
            i % 1000,
            i % 97
        ));
        let user = if i.is_multiple_of(10) {
            format!("x{i}")
        } else {
            format!("u{}", i % 1000)
        };
        clicks.push_str(&format!(
            "{{\"user\": \"{user}\", \"page\": \"p{}\", \"ts\": {}}}\n",
            i % 13,
            ts - 30_000
        ));
    }
    (payments, clicks)
}

#[test]
fn a_join_is_one_vertex_with_two_input_edges_and_its_counts_in_the_panel() {
    const JOIN: &str = "paid_after_click";
    let (payments, clicks) = payments_and_clicks();
    let page = LivePage::open(
        "live-view-join",
        JOIN_JOB,
        &[("payments.jsonl", &payments), ("clicks.jsonl", &clicks)],
    );
    let session = &page.session;

    // The job document names each input edge's side.
    let job: Value = serde_json::from_str(&http(page.addr, "GET", "/api/v1/job").body).unwrap();
    let sides: Vec<(String, String)> = job["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["to"] == JOIN)
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_owned(),
                e["side"].as_str().unwrap_or("none").to_owned(),
            )
        })
        .collect();
    let key_stage = |input: &str| format!("{JOIN}.key.{input}");
    assert_eq!(
        sides,
        [
            (key_stage("payments"), "left".to_owned()),
            (key_stage("clicks"), "right".to_owned())
        ],
        "{job}"
    );

    // The join is one box; exactly two edges end at it, from two different vertices, each to
    // its left, and their labels fill in once markers reach it.
    session.wait_for(
        "the join's two input edges with their labels",
        &format!(
            "const into = [...document.querySelectorAll('g.edge[data-to=\"{JOIN}\"]')]; \
             return document.querySelectorAll('g[data-vertex=\"{JOIN}\"]').length === 1 \
               && into.length === 2 \
               && into.every(e => {{ const t = e.querySelector('text').textContent; \
                    return t.includes('p99 ') && !t.includes('—'); }});"
        ),
    );
    let edges = session.js(&format!(
        "const box = id => document.querySelector('g[data-vertex=\"' + id + '\"] rect.box') \
           .getBoundingClientRect(); \
         const join = box('{JOIN}'); \
         return [...document.querySelectorAll('g.edge[data-to=\"{JOIN}\"]')].map(e => {{ \
           const from = document.querySelectorAll('g[data-vertex=\"' + e.dataset.from + '\"]'); \
           return {{ from: e.dataset.from, side: e.dataset.side || null, \
             boxes: from.length, \
             left_of_join: from.length === 1 && box(e.dataset.from).right <= join.left, \
             label: e.querySelector('text').textContent, \
             title: e.querySelector('title').textContent }}; }});"
    ));
    let edges = edges.as_array().expect("the edges into the join");
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert_ne!(edges[0]["from"], edges[1]["from"], "{edges:?}");
    for (edge, (input, side)) in edges
        .iter()
        .zip([("payments", "left"), ("clicks", "right")])
    {
        assert_eq!(edge["from"], key_stage(input), "{edge}");
        assert_eq!(edge["side"], side, "{edge}");
        assert_eq!(edge["boxes"], 1, "{edge}");
        assert_eq!(edge["left_of_join"], true, "{edge}");
        let label = edge["label"].as_str().unwrap();
        // The label names the side too: "left" over "p99 1.20 s" over "queue 46%".
        assert!(
            label.starts_with(&format!("{side}p99 ")) && label.contains("queue "),
            "{edge}"
        );
        // Hovering says which side of the join the edge is, and where its markers come from.
        let title = edge["title"].as_str().unwrap();
        assert!(
            title.contains(&format!("the {side} input ({input}) of join {JOIN}"))
                && title.contains(&format!("markers from {input} at {JOIN}: p99 ")),
            "{title}"
        );
    }

    // A click on the join opens its panel with its results and held records per side, and the
    // matched results rise above 0.
    session.click(&format!("g[data-vertex=\"{JOIN}\"]"));
    session.wait_for(
        "the join's panel with its counts",
        &format!(
            "const j = document.getElementById('join-section'); \
             return document.getElementById('panel').classList.contains('open') \
               && document.getElementById('panel-title').textContent === '{JOIN}' \
               && !j.hidden && +j.dataset.matched > 0 \
               && document.querySelectorAll('#join-table tr.join-row').length === 3;"
        ),
    );
    assert!(session.displayed("#join-section"));
    let shown = session.js("const j = document.getElementById('join-section'); \
         return [+j.dataset.matched, +j.dataset.unmatched, +j.dataset.heldLeft, \
                 +j.dataset.heldRight];");
    let shown: Vec<u64> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_f64().unwrap_or_else(|| panic!("{n}")) as u64)
        .collect();
    let title = session.text("#join-title");
    assert_eq!(
        title,
        "Join: left interval join of payments (left) and clicks (right)"
    );
    let line = session.text("#join-line");
    assert!(
        line.starts_with("results: ")
            && line.contains(" matched · ")
            && line.contains(" unmatched · held now: ")
            && line.contains(" left (payments) · ")
            && line.ends_with(" right (clicks)"),
        "{line}"
    );
    // The page shows what /api/v1/metrics says (counts only grow: the API, asked after, has at
    // least as many results), the total the sum of the two subtasks.
    let metrics: Value =
        serde_json::from_str(&http(page.addr, "GET", "/api/v1/metrics").body).unwrap();
    let join = metrics["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == JOIN)
        .expect("the join in /api/v1/metrics");
    let count = |v: &Value, field: &str| v[field].as_u64().unwrap_or_else(|| panic!("{v}"));
    let api = &join["join"];
    assert!(
        count(api, "matched") >= shown[0],
        "page {shown:?}, API {api}"
    );
    assert!(
        count(api, "unmatched") >= shown[1],
        "page {shown:?}, API {api}"
    );
    let subtasks = join["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2);
    for field in ["matched", "unmatched", "held_left", "held_right"] {
        let sum: u64 = subtasks.iter().map(|s| count(&s["join"], field)).sum();
        assert_eq!(sum, count(api, field), "{field}: {join}");
    }
    for other in metrics["vertices"].as_array().unwrap() {
        if other["id"] != JOIN {
            assert_eq!(other["join"], Value::Null, "{other}");
        }
    }
    // The matched results keep rising on the page while the job runs.
    session.wait_for(
        "more matched results",
        &format!(
            "return +document.getElementById('join-section').dataset.matched > {};",
            shown[0]
        ),
    );
    // Another vertex's panel has no join section.
    session.click("g[data-vertex=\"slow\"]");
    session.wait_for(
        "the panel of slow, without join counts",
        "return document.getElementById('panel-title').textContent === 'slow' \
           && document.getElementById('join-section').hidden;",
    );
    session.click(&format!("g[data-vertex=\"{JOIN}\"]"));
    session.wait_for(
        "the join's panel again",
        "return !document.getElementById('join-section').hidden;",
    );

    session.screenshot(&screenshot_path().with_file_name("live-view-join.png"));
    page.close();
}

/// A paced generator: every vertex has time to spare.
const QUIET_JOB: &str = "name: quiet
latency: {interval: 20ms}
sources: {ticks: {type: generator, rate: 20000, keys: 8}}
operators: {double: {type: map, input: ticks, scale: 2}}
sinks: {out: {type: discard, input: double}}
";

#[test]
fn a_vertex_busy_less_than_half_the_time_is_not_called_the_bottleneck() {
    let page = LivePage::open("live-view-quiet", QUIET_JOB, &[]);
    let session = &page.session;
    // The busiest vertex is named, in grey, and nothing is called the bottleneck.
    session.wait_for(
        "the busiest vertex, not called a bottleneck",
        "const b = document.getElementById('busiest'); \
         return !!b && b.textContent.startsWith(' · no bottleneck: busiest ') \
           && !document.getElementById('bottleneck');",
    );
    let api = http(page.addr, "GET", "/api/v1/metrics");
    let metrics: Value = serde_json::from_str(&api.body).expect("/api/v1/metrics is JSON");
    assert_eq!(metrics["bottleneck"], Value::Null, "{metrics}");
    assert!(
        metrics["busiest"]["busy"].as_f64().unwrap() < 0.5,
        "{metrics}"
    );
    let colours = session.js("const b = document.getElementById('busiest'); \
         return [getComputedStyle(b).color, getComputedStyle(b).fontWeight];");
    assert_ne!(
        colours[0], "rgb(180, 35, 24)",
        "not in the bottleneck's red"
    );
    assert_ne!(colours[1], "700", "not in bold");
    page.close();
}

/// Not a test but a measurement, run by hand (numbers, no thresholds): the page at W5's size
/// (docs/examples/bench/w5.yaml: 12 vertices × 8 subtasks, 704 latency series, both cores
/// saturated by the job). Prints how long the page's updates take and how long
/// `/api/v1/metrics` takes to answer.
///
/// `cargo test --release -p tidemark-cli --test live_view_browser -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_the_page_at_w5_size() {
    require_tools();
    let dir = TempDir::new("live-view-w5");
    // W5 as the benchmark runs it, with a count that lasts the whole measurement.
    let w5 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/bench/w5.yaml"),
    )
    .unwrap();
    assert!(w5.contains("count: 400000000\n"));
    dir.write(
        "w5.yaml",
        &w5.replace("count: 400000000\n", "count: 400000000000\n"),
    );
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run",
            "w5.yaml",
            "--metrics-addr",
            "127.0.0.1:0",
            "--duration",
            "120s",
        ],
    );
    let addr = proc.metrics_addr();
    let driver = Driver::start();
    let session = Session::new(&driver, &dir.join("chromium-profile"));
    session.goto(&format!("http://{addr}/"));
    session.wait_for(
        "the graph",
        "return document.querySelectorAll('[data-vertex]').length === 12 && !!document.body.dataset.updateMs;",
    );
    thread::sleep(Duration::from_secs(5));
    session.click("g[data-vertex=\"m05\"]");
    session.wait_for(
        "the heatmap",
        "return document.querySelectorAll('#heatmap rect.cell').length === 64;",
    );
    thread::sleep(Duration::from_secs(10));
    session.screenshot(&screenshot_path().with_file_name("live-view-w5.png"));
    let update =
        session.js("return [document.body.dataset.updateMs, document.body.dataset.maxUpdateMs];");
    let mut api = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let response = http(addr, "GET", "/api/v1/metrics");
        api.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(response.status, 200);
        thread::sleep(Duration::from_millis(500));
    }
    api.sort_by(f64::total_cmp);
    println!(
        "W5 live view: page update {} ms (last), {} ms (max, panel open); /api/v1/metrics median {:.1} ms, max {:.1} ms",
        update[0], update[1], api[api.len() / 2], api[api.len() - 1]
    );
    let errors = session.severe_logs();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    proc.terminate();
    proc.wait();
}
