//! A Kafka cluster for everyone: librdkafka's built-in mock cluster (a real Kafka protocol
//! endpoint on loopback), as `tidemark dev-kafka` runs it and as the tests use it.
//!
//! The mock cluster is `!Send`: [`DevCluster::start`] makes it on a thread of its own, which
//! keeps it until the [`DevCluster`] is dropped, so the handle itself can go anywhere.
//!
//! With a fixed `port`, broker `i` (1-based) is reached at `port + i - 1`: a small TCP
//! forwarder listens there and the brokers advertise those addresses in their metadata, so
//! clients never see the mock's random ports.
//!
//! What the mock lacks compared with a real broker: admin CreateTopics (topics are made here, or
//! auto-created with 4 partitions on first use), `offsetsForTimes`, topic configs (so no
//! LogAppendTime), meaningful timestamps in produce responses, and leader moves on a broker
//! going down.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};

/// What to start.
#[derive(Clone, Debug)]
pub struct DevClusterOptions {
    /// Number of brokers (at least 1).
    pub brokers: u16,
    /// The port of broker 1 (broker i listens on `port + i - 1`); `None`: random ports.
    pub port: Option<u16>,
    /// Topics to create: name and partition count.
    pub topics: Vec<(String, i32)>,
}

impl Default for DevClusterOptions {
    fn default() -> Self {
        DevClusterOptions {
            brokers: 1,
            port: None,
            topics: Vec::new(),
        }
    }
}

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevClusterError {
    /// librdkafka refused to make the mock cluster or a topic.
    #[error("cannot start the mock Kafka cluster: {0}")]
    Kafka(String),
    /// A fixed port could not be bound.
    #[error("cannot listen on 127.0.0.1:{port}: {error}")]
    Port {
        /// The port.
        port: u16,
        /// What the system said.
        error: std::io::Error,
    },
    /// `brokers` was 0.
    #[error("brokers must be at least 1")]
    NoBrokers,
}

/// A running mock cluster; dropping it stops the cluster.
pub struct DevCluster {
    bootstrap: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    commands: mpsc::Sender<Command>,
}

impl std::fmt::Debug for DevCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCluster")
            .field("bootstrap", &self.bootstrap)
            .finish()
    }
}

enum Command {
    CreateTopic(String, i32, mpsc::Sender<Result<(), String>>),
    TrackRequests(mpsc::Sender<()>),
    CountRequests(Request, mpsc::Sender<usize>),
    ServeAgain(Request, mpsc::Sender<()>),
    Refuse(
        Request,
        Vec<rdkafka::types::RDKafkaRespErr>,
        mpsc::Sender<()>,
    ),
}

/// Kinds of Kafka protocol requests the cluster can count once
/// [`DevCluster::track_requests`] was called (tests use them to see what clients did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// A consumer joining (or rejoining) a group.
    JoinGroup,
    /// A consumer leaving its group (a clean close).
    LeaveGroup,
    /// A consumer committing offsets.
    OffsetCommit,
}

impl Request {
    /// The request's key in the Kafka protocol.
    fn api_key(self) -> i16 {
        match self {
            Request::OffsetCommit => 8,
            Request::JoinGroup => 11,
            Request::LeaveGroup => 13,
        }
    }
}

impl DevCluster {
    /// Starts a mock cluster as `options` say and returns once it accepts connections.
    pub fn start(options: DevClusterOptions) -> Result<DevCluster, DevClusterError> {
        if options.brokers == 0 {
            return Err(DevClusterError::NoBrokers);
        }
        // Bind the fixed ports first, so a taken port is reported before anything starts.
        let mut listeners = Vec::new();
        if let Some(port) = options.port {
            for i in 0..options.brokers {
                let port = port.saturating_add(i);
                let listener = TcpListener::bind(("127.0.0.1", port))
                    .map_err(|error| DevClusterError::Port { port, error })?;
                listeners.push(listener);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let (cmd_tx, cmd_rx) = mpsc::channel::<Command>();
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tidemark-dev-kafka".into())
            .spawn(move || run_cluster(options, listeners, thread_stop, ready_tx, cmd_rx))
            .map_err(|e| DevClusterError::Kafka(e.to_string()))?;
        match ready_rx.recv() {
            Ok(Ok(bootstrap)) => Ok(DevCluster {
                bootstrap,
                stop,
                thread: Some(thread),
                commands: cmd_tx,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(DevClusterError::Kafka(e))
            }
            Err(_) => {
                let _ = thread.join();
                Err(DevClusterError::Kafka("the cluster thread ended".into()))
            }
        }
    }

    /// The bootstrap servers, `host:port,host:port`.
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap
    }

    /// Sends a command to the cluster's thread and waits for its answer.
    fn ask<T>(
        &self,
        command: impl FnOnce(mpsc::Sender<T>) -> Command,
    ) -> Result<T, DevClusterError> {
        let ended = || DevClusterError::Kafka("the cluster thread ended".into());
        let (tx, rx) = mpsc::channel();
        self.commands.send(command(tx)).map_err(|_| ended())?;
        rx.recv().map_err(|_| ended())
    }

    /// Starts recording the requests clients send (kept in memory until the cluster stops:
    /// for tests, not for a long-running `dev-kafka`).
    pub fn track_requests(&self) -> Result<(), DevClusterError> {
        self.ask(Command::TrackRequests)
    }

    /// How many requests of `kind` the brokers received since [`DevCluster::track_requests`].
    pub fn requests_seen(&self, kind: Request) -> Result<usize, DevClusterError> {
        self.ask(|tx| Command::CountRequests(kind, tx))
    }

    /// Makes the brokers answer the next requests of `kind`, from any client, with `errors`
    /// in turn (one request each) instead of serving them: for tests that need a broker to
    /// refuse something at a point they choose.
    pub fn refuse_next(
        &self,
        kind: Request,
        errors: &[rdkafka::types::RDKafkaRespErr],
    ) -> Result<(), DevClusterError> {
        self.ask(|tx| Command::Refuse(kind, errors.to_vec(), tx))
    }

    /// Forgets the refusals [`DevCluster::refuse_next`] left for requests of `kind`.
    pub fn serve_again(&self, kind: Request) -> Result<(), DevClusterError> {
        self.ask(|tx| Command::ServeAgain(kind, tx))
    }

    /// Creates a topic with `partitions` partitions (replication 1).
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), DevClusterError> {
        self.ask(|tx| Command::CreateTopic(name.to_owned(), partitions, tx))?
            .map_err(DevClusterError::Kafka)
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_cluster(
    options: DevClusterOptions,
    listeners: Vec<TcpListener>,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<Result<String, String>>,
    commands: mpsc::Receiver<Command>,
) {
    // A client configured with test.mock.num.brokers owns a mock cluster for its lifetime.
    let producer: BaseProducer = match ClientConfig::new()
        .set("test.mock.num.brokers", options.brokers.to_string())
        .set("log_level", "3")
        .create()
    {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let Some(cluster) = producer.client().mock_cluster() else {
        let _ = ready.send(Err("librdkafka made no mock cluster".into()));
        return;
    };
    for (name, partitions) in &options.topics {
        if let Err(e) = cluster.create_topic(name, *partitions, 1) {
            let _ = ready.send(Err(format!("cannot create topic {name}: {e}")));
            return;
        }
    }
    let inner = cluster.bootstrap_servers();
    let mut forwarders = Vec::new();
    // SAFETY: the producer owns the mock cluster; the pointer is used on this thread only, while
    // the producer lives.
    let raw =
        unsafe { rdkafka::bindings::rd_kafka_handle_mock_cluster(producer.client().native_ptr()) };
    let bootstrap = if listeners.is_empty() {
        inner
    } else {
        let targets: Vec<String> = inner.split(',').map(str::to_owned).collect();
        let mut outer = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
            // Broker ids are 1-based and listed in order in the bootstrap string.
            let host = std::ffi::CString::new("127.0.0.1").expect("no NUL");
            unsafe {
                rdkafka::bindings::rd_kafka_mock_broker_set_host_port(
                    raw,
                    i as i32 + 1,
                    host.as_ptr(),
                    port as i32,
                );
            }
            outer.push(format!("127.0.0.1:{port}"));
            let target = targets
                .get(i)
                .cloned()
                .unwrap_or_else(|| targets[0].clone());
            forwarders.push(spawn_forwarder(listener, target, stop.clone()));
        }
        outer.join(",")
    };
    let _ = ready.send(Ok(bootstrap));
    while !stop.load(Ordering::SeqCst) {
        match commands.recv_timeout(Duration::from_millis(50)) {
            Ok(Command::CreateTopic(name, partitions, reply)) => {
                let _ = reply.send(
                    cluster
                        .create_topic(&name, partitions, 1)
                        .map_err(|e| format!("cannot create topic {name}: {e}")),
                );
            }
            Ok(Command::TrackRequests(reply)) => {
                // SAFETY: `raw` is the live mock cluster of `producer`.
                unsafe { rdkafka::bindings::rd_kafka_mock_start_request_tracking(raw) };
                let _ = reply.send(());
            }
            Ok(Command::CountRequests(kind, reply)) => {
                let _ = reply.send(count_requests(raw, kind.api_key()));
            }
            Ok(Command::Refuse(kind, errors, reply)) => {
                // SAFETY: `raw` is the live mock cluster of `producer`; the array is copied
                // within the call.
                unsafe {
                    rdkafka::bindings::rd_kafka_mock_push_request_errors_array(
                        raw,
                        kind.api_key(),
                        errors.len(),
                        errors.as_ptr(),
                    )
                };
                let _ = reply.send(());
            }
            Ok(Command::ServeAgain(kind, reply)) => {
                // SAFETY: `raw` is the live mock cluster of `producer`.
                unsafe {
                    rdkafka::bindings::rd_kafka_mock_clear_request_errors(raw, kind.api_key())
                };
                let _ = reply.send(());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The handle is gone without Drop having run (leaked): keep serving.
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    drop(cluster);
    drop(producer);
    for f in forwarders {
        let _ = f.join();
    }
}

/// How many tracked requests with `api_key` the mock cluster `raw` received.
fn count_requests(raw: *mut rdkafka::bindings::rd_kafka_mock_cluster_t, api_key: i16) -> usize {
    let mut count = 0usize;
    // SAFETY: `raw` is a live mock cluster; the array it returns holds `count` valid requests
    // and is freed here, once.
    unsafe {
        let requests = rdkafka::bindings::rd_kafka_mock_get_requests(raw, &mut count);
        if requests.is_null() {
            return 0;
        }
        let seen = (0..count)
            .filter(|i| {
                rdkafka::bindings::rd_kafka_mock_request_api_key(*requests.add(*i)) == api_key
            })
            .count();
        rdkafka::bindings::rd_kafka_mock_request_destroy_array(requests, count);
        seen
    }
}

/// Accepts connections on `listener` and relays each to `target` until `stop`.
fn spawn_forwarder(listener: TcpListener, target: String, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = listener.set_nonblocking(true);
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((client, _)) => {
                    let _ = client.set_nonblocking(false);
                    if let Ok(server) = TcpStream::connect(&target) {
                        relay(client, server);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    })
}

/// Copies bytes both ways between two sockets on two threads.
fn relay(a: TcpStream, b: TcpStream) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    std::thread::spawn(move || pipe(a, b2));
    std::thread::spawn(move || pipe(b, a2));
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
