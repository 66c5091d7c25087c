//! Running Tidemark in production (`docs/operations.md`) through the real binary: the probes
//! (`/livez`, `/readyz`, `tidemark_job_ready`, `tidemark_job_stalled`) of a job that starts,
//! runs and stalls behind a sink blocked in a write; the endpoint secured by a web config file
//! (TLS with a certificate made here by rcgen, bcrypt basic auth, an extra header, client
//! certificates with `--probe-addr`), refused without credentials and scraped by a real
//! Prometheus with them; bad web config files; and the alert rules of `docs/` through
//! `promtool check rules`.
#![cfg(unix)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{free_port, http, http_over, Proc, Prometheus, Response, TempDir, TIMEOUT};

/// A job that runs until stopped: a paced generator into standard output, in two tasks (so
/// the sink has an input queue), with a short stall timeout.
const STDOUT_JOB: &str = "name: ops
chaining: false
stall_timeout: 1s
sources:
  numbers: {type: generator, rate: 20000, keys: 10}
sinks:
  out: {type: stdout, input: numbers}
";

/// A job that runs until stopped and writes nothing anywhere.
const DISCARD_JOB: &str = "name: ops-secure
sources:
  numbers: {type: generator, rate: 1000, keys: 10}
sinks:
  out: {type: discard, input: numbers}
";

/// Polls `GET /readyz` until `done` holds for an answer; returns it.
fn readyz_until(addr: SocketAddr, what: &str, done: impl Fn(&Response) -> bool) -> Response {
    common::http_until(addr, "/readyz", what, done)
}

/// `tidemark run job.yaml` in `dir` with `extra` flags, and its metrics address.
fn run(dir: &TempDir, extra: &[&str]) -> (Proc, SocketAddr) {
    common::run_instance(dir.path(), &dir.join("job.yaml"), "ops", extra)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Ready once running; then the sink blocks in a write to a pipe nobody reads, records wait in
/// its queue, and past `stall_timeout` the watchdog says `stalled` (probe, gauge and live view)
/// while `/livez` stays 200.
#[test]
fn a_sink_blocked_in_a_write_makes_the_job_stalled() {
    let dir = TempDir::new("ops-stall");
    dir.write("job.yaml", STDOUT_JOB);
    // Standard output: a pipe whose reading end is kept open and never read.
    let (never_read, writer) = std::io::pipe().expect("a pipe");
    let mut command = Command::new(common::tidemark_bin());
    command.args(["run", "job.yaml", "--metrics-addr", "127.0.0.1:0"]);
    let mut p = Proc::spawn_command_to(
        command,
        dir.path(),
        "tidemark run (stdout unread)",
        writer.into(),
    );
    let addr = p.metrics_addr();

    let stalled = readyz_until(addr, "stalled", |r| {
        r.status == 503 && json(&r.body)["reason"] == "stalled"
    });
    let body = json(&stalled.body);
    assert_eq!(body["ready"], false, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("sink \"out\" subtask 0 has ")
            && detail.contains("records in its input queue and has taken no record for")
            && detail.ends_with("(stall_timeout 1s)"),
        "{detail}"
    );
    assert_eq!(stalled.header("content-type"), Some("application/json"));
    let metrics = common::scrape(addr);
    assert_eq!(metrics.value("tidemark_job_stalled", &[]), Some(1.0));
    assert_eq!(metrics.value("tidemark_job_ready", &[]), Some(0.0));
    let live = json(&http(addr, "GET", "/api/v1/metrics").body);
    assert_eq!(live["health"]["stalled"], true, "{}", live["health"]);
    assert_eq!(live["health"]["reason"], "stalled", "{}", live["health"]);
    let livez = http(addr, "GET", "/livez");
    assert_eq!((livez.status, livez.body.as_str()), (200, "ok\n"));

    // A stop: the probe says so. The sink stays blocked, so the drain times out.
    p.terminate();
    readyz_until(addr, "stopping", |r| {
        r.status == 503 && json(&r.body)["reason"] == "stopping"
    });
    drop(never_read);
    p.wait_for(TIMEOUT);
}

/// A job whose source waits for a broker that never answers: `/readyz` answers 503 `starting`
/// (and `/livez` 200) while the job is being built, and SIGTERM then still ends the process
/// within `--drain-timeout` plus 2 s; a job that runs is ready (200, `tidemark_job_ready` 1).
#[test]
fn readyz_is_starting_before_the_job_runs_and_200_after() {
    let dir = TempDir::new("ops-starting");
    // A "broker" that accepts connections and never answers: the Kafka source's start waits.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let broker = silent.local_addr().unwrap();
    dir.write(
        "kafka.yaml",
        &format!(
            "name: waits
sources:
  orders: {{type: kafka, brokers: {broker}, topics: [orders]}}
sinks:
  out: {{type: discard, input: orders}}
"
        ),
    );
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut waiting = Proc::spawn(
        dir.path(),
        [
            "run",
            "kafka.yaml",
            "--kafka-timeout",
            "60s",
            "--drain-timeout",
            "1s",
            "--metrics-addr",
            &addr.to_string(),
        ],
    );
    let deadline = Instant::now() + TIMEOUT;
    let first = loop {
        if TcpStream::connect(addr).is_ok() {
            break http(addr, "GET", "/readyz");
        }
        assert!(!waiting.has_exited(), "{}", waiting.stderr());
        assert!(Instant::now() < deadline, "the endpoint never listened");
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(first.status, 503, "{}", first.body);
    assert_eq!(
        json(&first.body),
        serde_json::json!({"ready": false, "reason": "starting",
                           "detail": "the job is being built"})
    );
    assert_eq!(http(addr, "GET", "/livez").status, 200);
    let metrics = common::scrape(addr);
    assert_eq!(metrics.value("tidemark_job_ready", &[]), Some(0.0));
    // SIGTERM while the job is still being built (its source still waits for the broker):
    // the process exits within --drain-timeout plus 2 s all the same, saying why.
    let signalled = Instant::now();
    waiting.terminate();
    let status = waiting.wait_for(TIMEOUT);
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "exited {took:?} after SIGTERM; stderr:\n{}",
        waiting.stderr()
    );
    assert_eq!(status.code(), Some(1), "{}", waiting.stderr());
    assert!(
        waiting
            .stderr()
            .contains("tidemark: still not ended at --drain-timeout plus 2s after the stop"),
        "{}",
        waiting.stderr()
    );
    drop(silent);

    dir.write("job.yaml", DISCARD_JOB);
    let (mut p, addr) = run(&dir, &[]);
    let ready = readyz_until(addr, "ready", |r| r.status == 200);
    assert_eq!(json(&ready.body), serde_json::json!({"ready": true}));
    let metrics = common::scrape(addr);
    assert_eq!(metrics.value("tidemark_job_ready", &[]), Some(1.0));
    assert_eq!(metrics.value("tidemark_job_stalled", &[]), Some(0.0));
    p.terminate();
    assert_eq!(p.wait_code(), 0, "{}", p.stderr());
}

// ---------------------------------------------------------------------------------------------
// The secured endpoint

/// A certificate authority, a server certificate for 127.0.0.1 signed by it, and a client
/// certificate signed by it, as PEM files in `dir`: `ca.crt`, `server.crt`, `server.key`,
/// `client.crt`, `client.key`.
fn certificates(dir: &TempDir) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["prometheus".to_owned()])
        .unwrap()
        .signed_by(&client_key, &issuer)
        .unwrap();
    dir.write("ca.crt", &ca_cert.pem());
    dir.write("server.crt", &server.pem());
    dir.write("server.key", &server_key.serialize_pem());
    dir.write("client.crt", &client.pem());
    dir.write("client.key", &client_key.serialize_pem());
}

/// A TLS client trusting `ca.crt` of `dir`, presenting `client.crt` when `with_cert`.
fn tls_client(dir: &TempDir, with_cert: bool) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.crt")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = if with_cert {
        let certs = CertificateDer::pem_file_iter(dir.join("client.crt"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(dir.join("client.key")).unwrap();
        builder.with_client_auth_cert(certs, key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    Arc::new(config)
}

/// `GET path` over TLS with `config`, with basic auth when `login` is given.
fn https(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    path: &str,
    login: Option<(&str, &str)>,
) -> std::io::Result<Response> {
    use base64::Engine as _;
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    tcp.set_read_timeout(Some(TIMEOUT))?;
    tcp.set_write_timeout(Some(TIMEOUT))?;
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let connection =
        rustls::ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    let stream = rustls::StreamOwned::new(connection, tcp);
    let headers = match login {
        Some((user, password)) => format!(
            "Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ),
        None => String::new(),
    };
    http_over(stream, addr, "GET", path, &headers, "")
}

/// The web config of the tests: TLS with `server.crt`, one user `prometheus` whose bcrypt hash
/// (made here) is of `password`, and a header.
fn web_config(dir: &TempDir, password: &str, client_certs: bool) -> String {
    let hash = bcrypt::hash(password, 4).unwrap();
    let client = if client_certs {
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    } else {
        ""
    };
    dir.write(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{client}\
             basic_auth_users:\n  prometheus: {hash}\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        ),
    )
    .display()
    .to_string()
}

/// TLS and basic auth on every endpoint but the probes: 401 (with `WWW-Authenticate`)
/// without credentials or with wrong ones, 200 with them; plain HTTP fails; the header of the
/// file is on every answer. A real Prometheus scrapes it with `tls_config` and `basic_auth`
/// (`up` 1) and fails without the login (`up` 0).
#[test]
fn a_web_config_secures_the_endpoint_and_prometheus_scrapes_it() {
    assert!(
        Path::new(common::PROMETHEUS).exists(),
        "{} is missing: this test needs Debian's prometheus (scripts/test installs it)",
        common::PROMETHEUS
    );
    let dir = TempDir::new("ops-tls");
    certificates(&dir);
    dir.write("job.yaml", DISCARD_JOB);
    let web = web_config(&dir, "s3cret", false);
    let (mut p, addr) = run(&dir, &["--web-config-file", &web]);
    assert!(
        p.stderr()
            .contains(&format!("metrics at https://{addr}/metrics")),
        "{}",
        p.stderr()
    );
    let client = tls_client(&dir, false);
    for path in ["/metrics", "/", "/api/v1/job", "/api/v1/metrics"] {
        let refused = https(addr, &client, path, None).unwrap();
        assert_eq!(refused.status, 401, "{path}: {}", refused.body);
        assert_eq!(
            refused.header("www-authenticate"),
            Some("Basic realm=\"tidemark\", charset=\"UTF-8\""),
            "{path}"
        );
        assert_eq!(refused.header("x-frame-options"), Some("deny"), "{path}");
        let wrong = https(addr, &client, path, Some(("prometheus", "guess"))).unwrap();
        assert_eq!(wrong.status, 401, "{path}");
        let allowed = https(addr, &client, path, Some(("prometheus", "s3cret"))).unwrap();
        assert_eq!(allowed.status, 200, "{path}: {}", allowed.body);
        assert_eq!(allowed.header("x-frame-options"), Some("deny"), "{path}");
    }
    // The probes need no login, but TLS all the same.
    assert_eq!(https(addr, &client, "/livez", None).unwrap().status, 200);
    let deadline = Instant::now() + TIMEOUT;
    while https(addr, &client, "/readyz", None).unwrap().status != 200 {
        assert!(Instant::now() < deadline, "never ready");
        thread::sleep(Duration::from_millis(50));
    }
    // Plain HTTP gets no answer from the job: a 400 saying to use HTTPS.
    let plain = http(addr, "GET", "/metrics");
    assert_eq!(plain.status, 400);
    assert!(
        plain.body.contains("HTTP request to an HTTPS server"),
        "{}",
        plain.body
    );
    // A client that does not trust the certificate cannot even connect.
    let stranger = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth(),
    );
    assert!(https(addr, &stranger, "/metrics", None).is_err());

    let prometheus_dir = TempDir::new("ops-tls-prometheus");
    let ca = dir.join("ca.crt").display().to_string();
    let scrape = |job: &str, auth: &str| {
        format!(
            "  - job_name: {job}\n    scheme: https\n    scrape_interval: 1s\n    \
             tls_config: {{ca_file: {ca}}}\n{auth}    static_configs:\n      \
             - targets: ['{addr}']\n"
        )
    };
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n{}{}",
        scrape(
            "with_login",
            "    basic_auth: {username: prometheus, password: s3cret}\n"
        ),
        scrape("without_login", "")
    );
    let prometheus = Prometheus::start(&prometheus_dir, &config);
    let up = |job: &str| {
        prometheus
            .query(&format!("up{{job=\"{job}\"}}"))
            .first()
            .and_then(|s| s["value"][1].as_str().map(str::to_owned))
    };
    let deadline = Instant::now() + TIMEOUT;
    while up("with_login").is_none() || up("without_login").is_none() {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the job"
        );
        thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(up("with_login").as_deref(), Some("1"));
    assert_eq!(up("without_login").as_deref(), Some("0"));
    let ready = prometheus.query("tidemark_job_ready{job=\"with_login\"}");
    assert_eq!(ready[0]["value"][1], "1", "{ready:?}");
    drop(prometheus);

    p.terminate();
    assert_eq!(p.wait_code(), 0, "{}", p.stderr());
    // Nothing of the file's secrets in the output.
    assert!(!p.stderr().contains("$2"), "{}", p.stderr());
}

/// With client certificates required, a client without one is refused in the handshake and
/// one with it gets in (with the login); `--probe-addr` serves the two probes alone over plain
/// HTTP, without login or certificate, and nothing else.
#[test]
fn client_certificates_with_probes_on_their_own_address() {
    let dir = TempDir::new("ops-mtls");
    certificates(&dir);
    dir.write("job.yaml", DISCARD_JOB);
    let web = web_config(&dir, "s3cret", true);
    let probes: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let probes_text = probes.to_string();
    let (mut p, addr) = run(
        &dir,
        &["--web-config-file", &web, "--probe-addr", &probes_text],
    );
    let without = tls_client(&dir, false);
    // TLS 1.3 reports the refused certificate at the first read.
    assert!(https(addr, &without, "/livez", None).is_err());
    let with = tls_client(&dir, true);
    let login = Some(("prometheus", "s3cret"));
    assert_eq!(https(addr, &with, "/metrics", login).unwrap().status, 200);
    assert_eq!(https(addr, &with, "/metrics", None).unwrap().status, 401);

    let ready = readyz_until(probes, "ready on the probe address", |r| r.status == 200);
    assert_eq!(json(&ready.body)["ready"], true);
    assert_eq!(http(probes, "GET", "/livez").body, "ok\n");
    let other = http(probes, "GET", "/metrics");
    assert_eq!(other.status, 404);
    assert!(
        other.body.contains("the probes /livez and /readyz alone"),
        "{}",
        other.body
    );
    p.terminate();
    assert_eq!(p.wait_code(), 0, "{}", p.stderr());
}

/// A web config that cannot be used stops the run before the job starts: exit 2 naming the
/// file, the field and what is wrong, and never a secret of the file.
#[test]
fn a_bad_web_config_exits_2_naming_the_file_and_the_field() {
    let dir = TempDir::new("ops-bad-web");
    certificates(&dir);
    dir.write("job.yaml", DISCARD_JOB);
    // Named as given on the command line; the paths in it relative to its folder.
    let web = "web.yml";
    let cases = [
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: gone.key\n".to_owned(),
            format!(
                "error: web config file {web}: tls_server_config.key_file: cannot read gone.key: \
                 No such file or directory"
            ),
        ),
        (
            "basic_auth_users:\n  prometheus: hunter2-not-a-hash\n".to_owned(),
            format!("error: web config file {web}: basic_auth_users.prometheus: not a bcrypt hash"),
        ),
        (
            "tls_server_config: [cert_file]\n".to_owned(),
            format!("error: web config file {web}: (file): tls_server_config: invalid type"),
        ),
    ];
    for (text, expected) in cases {
        dir.write("web.yml", &text);
        let out = common::tidemark(
            dir.path(),
            [
                "run",
                "job.yaml",
                "--metrics-addr",
                "127.0.0.1:0",
                "--web-config-file",
                "web.yml",
            ],
        );
        assert_eq!(out.code(), 2, "{}", out.stderr);
        assert!(
            out.stderr.starts_with(&expected),
            "{}\nexpected: {expected}",
            out.stderr
        );
        assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
        assert!(!out.stderr.contains("running"), "{}", out.stderr);
    }
    // The job file's `web_config_file`, relative to its folder, is read the same way.
    dir.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: gone.key\n",
    );
    dir.write(
        "sub.yaml",
        &format!("{DISCARD_JOB}web_config_file: web.yml\n"),
    );
    let out = common::tidemark(
        dir.path(),
        ["run", "sub.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("tls_server_config.key_file: cannot read"),
        "{}",
        out.stderr
    );
}

/// The alert rules in `docs/` are valid for Prometheus (`promtool check rules`) and cover the
/// four conditions the docs name.
#[test]
fn the_alert_rules_pass_promtool() {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/alerts.yml");
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .stdin(Stdio::null())
        .output()
        .expect("promtool (Debian's prometheus; scripts/test installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SUCCESS: 4 rules found"), "{text}");
    let mut file = String::new();
    std::fs::File::open(&rules)
        .and_then(|mut f| f.read_to_string(&mut file))
        .unwrap();
    for metric in [
        "tidemark_job_stalled",
        "tidemark_job_ready",
        "tidemark_source_lag_seconds",
        "tidemark_checkpoints_failed_total",
    ] {
        assert!(file.contains(metric), "{metric} not in the alert rules");
    }
    let _ = std::io::stdout().flush();
}

/// The Kubernetes container of `docs/operations.md` (TLS with client certificates, the probes
/// on `--probe-addr`) runs as written: its command starts the job with the test's files and
/// ports, and its liveness and readiness probes, on the port they name, answer over plain HTTP.
#[test]
fn the_documented_container_with_probe_addr_serves_its_probes() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/operations.md"
    ))
    .expect("docs/operations.md");
    let start = doc.find("      containers:").expect("the container");
    let fragment = &doc[start..start + doc[start..].find("```").expect("its end")];
    let pod: serde_json::Value = serde_yaml_ng::from_str(fragment).expect("it parses");
    let container = &pod["containers"][0];
    let command: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(command[..2], ["tidemark", "run"], "{command:?}");
    // The probes' port, by its name.
    let port_of = |name: &str| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}"))["containerPort"]
            .as_u64()
            .unwrap()
    };
    let (liveness, readiness) = (&container["livenessProbe"], &container["readinessProbe"]);
    assert_eq!(liveness["httpGet"]["path"], "/livez");
    assert_eq!(readiness["httpGet"]["path"], "/readyz");
    let probe_port = port_of(liveness["httpGet"]["port"].as_str().unwrap());
    assert_eq!(readiness["httpGet"]["port"], liveness["httpGet"]["port"]);

    let dir = TempDir::new("ops-manifest");
    certificates(&dir);
    // `--restore auto` wants a checkpoint directory, as the pod's job file has.
    dir.write(
        "job.yaml",
        &format!("{DISCARD_JOB}checkpoint: {{interval: 1s, dir: checkpoints}}\n"),
    );
    let web = web_config(&dir, "s3cret", true);
    let probes: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let args: Vec<String> = command[1..]
        .iter()
        .map(|a| match *a {
            "/etc/tidemark/job.yaml" => dir.join("job.yaml").display().to_string(),
            "/etc/tidemark-web/web.yml" => web.clone(),
            a if a == format!("0.0.0.0:{probe_port}") => probes.to_string(),
            a if a.starts_with("0.0.0.0:") => "127.0.0.1:0".to_owned(),
            a => a.to_owned(),
        })
        .collect();
    assert!(args.contains(&probes.to_string()), "{command:?}");
    let mut p = Proc::spawn(dir.path(), &args);
    p.metrics_addr();
    let ready = readyz_until(probes, "ready", |r| r.status == 200);
    assert_eq!(json(&ready.body)["ready"], true);
    assert_eq!(http(probes, "GET", "/livez").status, 200);
    p.terminate();
    assert_eq!(p.wait_code(), 0, "{}", p.stderr());
}
