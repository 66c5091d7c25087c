//! A Kafka cluster for everyone: librdkafka's built-in mock cluster (a real Kafka protocol
//! endpoint on loopback), as `tidemark dev-kafka` runs it and as the tests use it.
//!
//! The mock cluster is `!Send`: [`DevCluster::start`] makes it on a thread of its own, which
//! keeps it until the [`DevCluster`] is dropped, so the handle itself can go anywhere.
//!
//! Clients never talk to the mock directly: each broker is reached through a small TCP
//! forwarder on 127.0.0.1 (random ports, or with a fixed `port` broker `i` (1-based) at
//! `port + i - 1`), whose address the broker advertises in its metadata. The forwarder answers
//! **CreateTopics** itself, which the mock lacks: it creates each topic on the mock with the
//! partition count asked for (`TOPIC_ALREADY_EXISTS` when it exists, `INVALID_PARTITIONS`
//! below 1, `INVALID_REPLICATION_FACTOR` above the number of brokers) and adds CreateTopics
//! (versions 2–6) to the versions the brokers offer, so admin clients create topics here as on
//! a real broker.
//!
//! What the mock still lacks compared with a real broker: DescribeConfigs and topic configs
//! (so no compaction and no LogAppendTime), `offsetsForTimes`, meaningful timestamps in
//! produce responses, and leader moves on a broker going down. A client that allows it still
//! makes a topic it asks for with 4 partitions (auto-creation); Tidemark's clients never do.

mod forwarder;
mod protocol;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, DefaultProducerContext, Producer};
use rdkafka::types::RDKafkaErrorCode;

use forwarder::{spawn_forwarder, CreateTopicsFn};
use protocol::{code, settle, CreateTopics, TopicOutcome, WantedTopic};

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
    /// A CreateTopics request a forwarder received: the topics, whether only to validate,
    /// and where its outcomes go.
    CreateTopics(Vec<WantedTopic>, bool, mpsc::Sender<Vec<TopicOutcome>>),
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
    /// A consumer reading its group's committed offsets.
    OffsetFetch,
}

impl Request {
    /// The request's key in the Kafka protocol.
    fn api_key(self) -> i16 {
        match self {
            Request::OffsetCommit => 8,
            Request::OffsetFetch => 9,
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
        // Bind the ports first, so a taken port is reported before anything starts. Every
        // broker is reached through a forwarder (random ports unless `port` is fixed), which
        // answers what the mock lacks ([`forwarder`]).
        let mut listeners = Vec::new();
        for i in 0..options.brokers {
            let port = options.port.map_or(0, |p| p.saturating_add(i));
            let listener = TcpListener::bind(("127.0.0.1", port))
                .map_err(|error| DevClusterError::Port { port, error })?;
            listeners.push(listener);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let (cmd_tx, cmd_rx) = mpsc::channel::<Command>();
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tidemark-dev-kafka".into())
            .spawn({
                let cmd_tx = cmd_tx.clone();
                move || run_cluster(options, listeners, thread_stop, ready_tx, (cmd_tx, cmd_rx))
            })
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
    (sender, commands): (mpsc::Sender<Command>, mpsc::Receiver<Command>),
) {
    let brokers = i32::from(options.brokers);
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
    let targets: Vec<String> = inner.split(',').map(str::to_owned).collect();
    // The forwarders ask this thread to create the topics of CreateTopics requests.
    let create: CreateTopicsFn = Arc::new(move |request: &CreateTopics| {
        let (tx, rx) = mpsc::channel();
        let topics = request.topics.clone();
        sender
            .send(Command::CreateTopics(topics, request.validate_only, tx))
            .ok()?;
        rx.recv().ok()
    });
    let mut outer = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        // Broker ids are 1-based and listed in order in the bootstrap string.
        let host = std::ffi::CString::new("127.0.0.1").expect("no NUL");
        // SAFETY: `raw` is the live mock cluster of `producer`; the host is copied.
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
        forwarders.push(spawn_forwarder(
            listener,
            target,
            stop.clone(),
            create.clone(),
        ));
    }
    drop(create);
    let bootstrap = outer.join(",");
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
            Ok(Command::CreateTopics(topics, validate_only, reply)) => {
                let outcomes = topics
                    .iter()
                    .map(|t| make_topic(&cluster, &producer, brokers, t, validate_only))
                    .collect();
                let _ = reply.send(outcomes);
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

/// The mock's partition count for a topic made with the broker's default (`-1`).
const MOCK_DEFAULT_PARTITIONS: i32 = 4;

/// Creates `wanted` on `cluster` (of `brokers` brokers), or only checks that it could be
/// (`validate_only`, asking `producer`, the cluster's owner, for the topics there are).
fn make_topic(
    cluster: &MockCluster<'_, DefaultProducerContext>,
    producer: &BaseProducer,
    brokers: i32,
    wanted: &WantedTopic,
    validate_only: bool,
) -> TopicOutcome {
    let (partitions, replication) = match settle(wanted, brokers, MOCK_DEFAULT_PARTITIONS) {
        Ok(counts) => counts,
        Err(refused) => return refused,
    };
    let name = &wanted.name;
    let made = if validate_only {
        match producer
            .client()
            .fetch_metadata(None, Duration::from_secs(5))
        {
            Ok(m) if m.topics().iter().any(|t| t.name() == name) => Err(KafkaError::MockCluster(
                RDKafkaErrorCode::TopicAlreadyExists,
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    } else {
        cluster.create_topic(name, partitions, replication)
    };
    match made {
        Ok(()) => TopicOutcome {
            error: 0,
            message: None,
            partitions,
            replication,
        },
        Err(KafkaError::MockCluster(RDKafkaErrorCode::TopicAlreadyExists)) => {
            TopicOutcome::refused(
                code::TOPIC_ALREADY_EXISTS,
                format!("Topic '{name}' already exists."),
            )
        }
        Err(KafkaError::MockCluster(c)) => TopicOutcome::refused(c as i16, c.to_string()),
        // UNKNOWN_SERVER_ERROR
        Err(e) => TopicOutcome::refused(-1, e.to_string()),
    }
}
