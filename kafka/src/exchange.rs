//! Exchanges through Kafka: an edge marked `exchange: {kafka: …}` crosses instances
//! (`docs/kafka.md`, "Scale-out: exchanges through Kafka").
//!
//! ```yaml
//! operators:
//!   per_customer:
//!     type: reduce
//!     input: orders
//!     key: customer_id
//!     exchange: {kafka: {brokers: 127.0.0.1:9092, partitions: 8, properties: {}}}
//! ```
//!
//! At build time the edge `orders → per_customer` becomes `orders → per_customer.exchange`, a
//! hidden **writer** sink chained into the upstream task, and `per_customer.exchange-in →
//! per_customer`, a hidden **reader** source with the downstream's parallelism, forward into
//! it. Both are one [`Exchange`].
//!
//! - The writer writes each record to the topic `tidemark-<job>-<vertex>-exchange` (created
//!   with `partitions`, replication as the brokers allow): the message key is the record's key
//!   as JSON, so one key always lands in one partition; the value is the event as JSON; the
//!   headers [`HEADER_TIMESTAMP`] and [`HEADER_TIMESTAMP_TYPE`] keep the timestamp in
//!   nanoseconds and its type, so end-to-end latency continues.
//! - The reader is the `kafka` source's code (consumer group of the job, cooperative
//!   rebalancing, commits, checkpoints, lag) reading that topic: every key is handled by one
//!   subtask in the whole group, whichever instance holds its partition.
//! - A marker reaching the writer is a **control message** ([`HEADER_CONTROL`] =
//!   [`CONTROL_MARKER`], no value, no key) to one random partition, behind the records before
//!   it; the reader turns it back into the same marker, corrected into its own clock by the
//!   clock-offset estimate of the instance that wrote it, and labelled with the instance it came
//!   from (`source_instance`) when that is another one. Control messages never reach user code
//!   or external sinks.
//! - Barriers are not written to Kafka: the writer flushes and acknowledges each checkpoint
//!   when the broker has every message before it; the reader commits its positions when the
//!   downstream sinks have acknowledged.
//! - Watermarks: the writer writes each watermark it gets ([`Sink::on_watermark`]) as a
//!   control message ([`CONTROL_WATERMARK`], headers [`HEADER_WATERMARK`] and [`HEADER_WRITER`],
//!   the writer's id `<instance>/<vertex>/<subtask>`) to **every** partition, behind the
//!   records before it; a hello (`i64::MIN`) when it starts, so readers wait for it; and
//!   [`CONTROL_IDLE`] when its inputs are idle ([`Sink::on_idle`]) or it finishes. The reader's
//!   watermark of a partition is the minimum over the writers it has heard from that are not
//!   idle ([`crate::watermarks::WriterWatermarks`]); its subtask's is the minimum over its
//!   partitions, as for any `kafka` source (the reader vertex makes watermarks when any source
//!   of the job does).
//!
//! **How a job with an exchange ends.** The writer ends with its upstream (finite sources). A
//! reader subtask ends by itself only when its instance is alone in the group: every writer of
//! this instance has flushed, this instance's readers hold every partition of the topic between
//! them, and each has read its partitions to their end. With several instances none can know
//! whether another still writes, so the readers run until the instance is stopped (SIGTERM,
//! `--duration`): they stop reading, the last checkpoint commits what was processed, and what
//! is left in the topic is read by whoever holds the partition next, from the last commit.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use serde::Deserialize;
use tidemark_operators::config::parse_settings;
use tidemark_operators::event_json::{EventError, EventParser};
use tidemark_operators::{ConfigError, FieldError};
use tidemark_runtime::component::{SinkFactory, SourceFactory};
use tidemark_runtime::markers::{origin, LatencyMarker};
use tidemark_runtime::{
    BoxError, Output, Record, Sink, Source, SubtaskContext, TimestampType, Value,
};

use crate::client::{client_config, unreachable_message, Brokers, Properties};
use crate::input_report::InputReport;
use crate::sink::{flush_producer, produce, DeliveryContext};
use crate::source::{KafkaSourceConfig, KafkaSourceFactory, Start};
use crate::watermarks::PartitionWatermarks;
use crate::KafkaJob;

/// The name of the exchange kind in job files: `exchange: {kafka: …}`.
pub const KIND: &str = "kafka";
/// Header of a control message: its kind ([`CONTROL_MARKER`], [`CONTROL_WATERMARK`]).
pub const HEADER_CONTROL: &str = "tidemark-control";
/// Control kind of a latency marker.
pub const CONTROL_MARKER: &str = "marker";
/// Control kind of a watermark: headers [`HEADER_WATERMARK`] and [`HEADER_WRITER`], to every
/// partition.
pub const CONTROL_WATERMARK: &str = "watermark";
/// Control kind of a writer whose inputs are idle (or that finished): header [`HEADER_WRITER`],
/// to every partition; the writer holds nothing back until its next watermark.
pub const CONTROL_IDLE: &str = "idle";
/// Header of a watermark: nanoseconds since the Unix epoch, as decimal text; `i64::MIN` is the
/// writer's hello, written before its first record so that readers wait for it.
pub const HEADER_WATERMARK: &str = "tidemark-watermark";
/// Header of a watermark control message of a writer chained behind a `kafka` source: what
/// each of the source's partitions holds back, as JSON ([`crate::input_report::InputReport`]).
/// The reader then counts the source's partitions, not the writer
/// ([`crate::watermarks::WriterWatermarks`]).
pub const HEADER_INPUTS: &str = "tidemark-inputs";
/// Header of a watermark or idle control message: the writer, `<instance>/<vertex>/<subtask>`.
pub const HEADER_WRITER: &str = "tidemark-writer";
/// Header: a record's timestamp, nanoseconds since the Unix epoch, as decimal text.
pub const HEADER_TIMESTAMP: &str = "tidemark-timestamp";
/// Header: a record's timestamp type (`create`, `ingestion`, `log_append`).
pub const HEADER_TIMESTAMP_TYPE: &str = "tidemark-timestamp-type";
/// Header of a marker: its `marked_time` in the clock of [`HEADER_CLOCK`]'s instance, ns.
pub const HEADER_MARKED_TIME: &str = "tidemark-marked-time";
/// Header of a marker: the index of its source vertex in the job graph.
pub const HEADER_SOURCE_VERTEX: &str = "tidemark-source-vertex";
/// Header of a marker: the index of its source subtask.
pub const HEADER_SOURCE_SUBTASK: &str = "tidemark-source-subtask";
/// Header of a marker: the instance whose source made it (`source_instance`).
pub const HEADER_ORIGIN: &str = "tidemark-origin-instance";
/// Header of a marker: the instance whose clock `marked_time` is in (the writer's).
pub const HEADER_CLOCK: &str = "tidemark-clock-instance";

/// Settings of `exchange: {kafka: …}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeConfig {
    /// Bootstrap servers.
    pub brokers: Brokers,
    /// Partitions of the exchange topic when Tidemark creates it: the most subtasks, over all
    /// instances, that can read it.
    pub partitions: u32,
    /// Passed to librdkafka as they are (writer, reader and topic creation).
    #[serde(default)]
    pub properties: Properties,
}

/// The settings' names, for "did you mean".
pub const FIELDS: &[&str] = &["brokers", "partitions", "properties"];

/// How long topic creation may take before the broker is taken not to support it.
const CREATE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most partitions an exchange topic may have.
pub const MAX_PARTITIONS: u32 = 10_000;

impl ExchangeConfig {
    /// Checks what can be checked without a broker.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.brokers.is_empty() {
            return Err(("brokers", "must name at least one host:port".into()));
        }
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return Err((
                "partitions",
                format!(
                    "must be between 1 and {MAX_PARTITIONS}, found {}",
                    self.partitions
                ),
            ));
        }
        Ok(())
    }
}

/// The internal topic of the exchange into `vertex`: `tidemark-<job>-<vertex>-exchange`.
pub fn topic_name(job: &str, vertex: &str) -> String {
    format!("tidemark-{job}-{vertex}-exchange")
}

/// The id of the hidden writer of the exchange into `vertex` from `input` (`<vertex>.exchange`,
/// or `<vertex>.exchange.<input>` when `vertex` has several inputs).
pub fn writer_id(vertex: &str, input: &str, inputs: usize) -> String {
    if inputs > 1 {
        format!("{vertex}.exchange.{input}")
    } else {
        format!("{vertex}.exchange")
    }
}

/// The id of the hidden reader of the exchange into `vertex`: `<vertex>.exchange-in`.
pub fn reader_id(vertex: &str) -> String {
    format!("{vertex}.exchange-in")
}

// ---- The edge ----

/// One exchange: the writers (one per input edge) and the reader of one downstream vertex in
/// this process, sharing the topic and knowing when the local side has ended.
pub struct Exchange {
    config: ExchangeConfig,
    topic: String,
    /// Writer subtasks in this process, over every input edge.
    writers: AtomicUsize,
    writers_done: AtomicUsize,
    /// The topic's partition count once it exists (created if needed).
    topic_ready: OnceLock<Result<i32, String>>,
    /// Reader subtask → (partitions held, read to their end after every writer flushed).
    readers: Mutex<BTreeMap<usize, (BTreeSet<i32>, bool)>>,
    ended: AtomicBool,
    /// The job's Kafka context: instance name, clock offsets, series, timeout.
    kafka: Arc<KafkaJob>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("topic", &self.topic)
            .finish()
    }
}

/// The messages of the job-file settings of an exchange, located at `exchange.kafka.<field>`.
fn invalid((path, message): (&str, String)) -> ConfigError {
    ConfigError::invalid(KIND, FieldError::new(path, message))
}

impl Exchange {
    /// The exchange into `vertex` of job `job` (its Kafka context `kafka`), from the settings
    /// under `exchange: {kafka: …}`. Errors name the setting and what is expected.
    pub fn new(
        settings: serde_json::Value,
        job: &str,
        vertex: &str,
        kafka: &Arc<KafkaJob>,
    ) -> Result<Arc<Exchange>, ConfigError> {
        let config: ExchangeConfig = parse_settings(KIND, settings)?;
        config.check().map_err(invalid)?;
        Ok(Arc::new(Exchange {
            config,
            topic: topic_name(job, vertex),
            writers: AtomicUsize::new(0),
            writers_done: AtomicUsize::new(0),
            topic_ready: OnceLock::new(),
            readers: Mutex::new(BTreeMap::new()),
            ended: AtomicBool::new(false),
            kafka: kafka.clone(),
        }))
    }

    /// The exchange topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The settings.
    pub fn config(&self) -> &ExchangeConfig {
        &self.config
    }

    /// The factory of the writer of one input edge whose upstream has `parallelism` subtasks.
    pub fn writer_factory(self: &Arc<Self>, parallelism: usize) -> SinkFactory {
        self.writers.fetch_add(parallelism, Ordering::SeqCst);
        let exchange = self.clone();
        Box::new(move |ctx: &SubtaskContext| {
            Ok(Box::new(ExchangeWriter::new(exchange.clone(), ctx)?) as Box<dyn Sink>)
        })
    }

    /// The factory of the reader (parallelism: the downstream vertex's).
    pub fn reader_factory(self: &Arc<Self>) -> SourceFactory {
        let exchange = self.clone();
        let source = KafkaSourceConfig {
            brokers: self.config.brokers.clone(),
            topics: vec![self.topic.clone()],
            group: None,
            start: Start::Committed,
            format: Default::default(),
            key: None,
            timestamp: None,
            on_error: Default::default(),
            properties: self.config.properties.clone(),
        };
        let factory = KafkaSourceFactory::new(source, &self.kafka)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        Box::new(move |ctx: &SubtaskContext| {
            let factory = factory.clone()?;
            let what = format!("kafka exchange reader \"{}\"", ctx.vertex_id);
            exchange.ready(&what)?;
            let mut source = factory.make(ctx)?;
            source.relay = Some(Relay {
                exchange: exchange.clone(),
                subtask: ctx.subtask,
                readers: ctx.parallelism,
                local: exchange.kafka.instance(),
                what,
                last_check: i64::MIN,
                parser: EventParser::new(),
            });
            Ok(Box::new(source) as Box<dyn Source>)
        })
    }

    /// Makes sure the topic exists (creating it with `partitions`, replication as the brokers
    /// allow) and returns its partition count.
    fn ready(&self, what: &str) -> Result<i32, String> {
        self.topic_ready
            .get_or_init(|| self.create_topic(what))
            .clone()
    }

    fn create_topic(&self, what: &str) -> Result<i32, String> {
        let timeout = self.kafka.timeout();
        let mut config = client_config(&self.config.brokers, &self.config.properties);
        // Asking for the topic's metadata must not create it with the broker's defaults.
        config.set("allow.auto.create.topics", "false");
        // First the brokers must answer: a producer whose context keeps the broker's own
        // words (a refused connection) for the error, its log served while waiting.
        let probe: rdkafka::producer::BaseProducer<crate::client::ErrorContext> = config
            .create_with_context(crate::client::ErrorContext::default())
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        let deadline = std::time::Instant::now() + timeout;
        let metadata = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let attempt = left.clamp(Duration::from_millis(1), Duration::from_millis(500));
            let answer = probe.client().fetch_metadata(None, attempt);
            probe.poll(Duration::ZERO);
            match answer {
                Ok(m) => break m,
                Err(e) if std::time::Instant::now() >= deadline => {
                    let errors = probe.context();
                    return Err(unreachable_message(
                        what,
                        &self.config.brokers,
                        timeout,
                        &e,
                        errors,
                    ));
                }
                Err(_) => {}
            }
        };
        let admin: AdminClient<DefaultClientContext> = config
            .create()
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        if let Some(n) = self.partitions_in(&metadata) {
            return Ok(self.checked_count(what, n));
        }
        let replication = metadata.brokers().len().clamp(1, 3) as i32;
        let new = NewTopic::new(
            &self.topic,
            self.config.partitions as i32,
            TopicReplication::Fixed(replication),
        );
        let wait = timeout.min(CREATE_TIMEOUT);
        let options = AdminOptions::new()
            .request_timeout(Some(wait))
            .operation_timeout(Some(wait));
        let refusal = match block_on(admin.create_topics([&new], &options)) {
            Ok(results) => results.into_iter().find_map(|r| match r {
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) | Ok(_) => None,
                Err((_, code)) => Some(code.to_string()),
            }),
            Err(e) => Some(e.to_string()),
        };
        if refusal.is_some() {
            // A broker without CreateTopics (librdkafka's mock cluster): let it create the
            // topic itself, as a producer would, with its default partition count.
            let mut config = client_config(&self.config.brokers, &self.config.properties);
            config.set("allow.auto.create.topics", "true");
            if let Ok(producer) = config.create::<rdkafka::producer::BaseProducer>() {
                use rdkafka::producer::Producer as _;
                let _ = producer
                    .client()
                    .fetch_metadata(Some(&self.topic), Duration::from_millis(500));
            }
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let metadata = admin
                .inner()
                .fetch_metadata(Some(&self.topic), Duration::from_millis(500));
            if let Some(n) = metadata.ok().and_then(|m| self.partitions_in(&m)) {
                return Ok(self.checked_count(what, n));
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "{what}: cannot create the exchange topic {} at {}: {}",
                    self.topic,
                    self.config.brokers.to_bootstrap(),
                    refusal.unwrap_or_else(|| "it does not appear in the metadata".into())
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The topic's partition count in `metadata`, if it exists there.
    fn partitions_in(&self, metadata: &rdkafka::metadata::Metadata) -> Option<i32> {
        metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic && t.error().is_none())
            .map(|t| t.partitions().len() as i32)
            .filter(|n| *n > 0)
    }

    /// `n`, with a warning when it is not what the job file asks for.
    fn checked_count(&self, what: &str, n: i32) -> i32 {
        if n as u32 != self.config.partitions {
            eprintln!(
                "tidemark: warning: {what}: the exchange topic {} has {n} partitions, not the {} \
                 the job file asks for (it existed already, or the broker created it itself)",
                self.topic, self.config.partitions
            );
        }
        n
    }

    fn writer_finished(&self) {
        self.writers_done.fetch_add(1, Ordering::SeqCst);
    }

    /// Every writer of this process has flushed and ended.
    fn writers_done(&self) -> bool {
        self.writers_done.load(Ordering::SeqCst) >= self.writers.load(Ordering::SeqCst)
    }

    /// Reader `subtask` (of `readers`) holds `held` and has (or has not) read them to their
    /// end. True once the exchange has ended in this process (see the module docs).
    fn report(&self, subtask: usize, readers: usize, held: BTreeSet<i32>, caught_up: bool) -> bool {
        if self.ended.load(Ordering::SeqCst) {
            return true;
        }
        let Some(Ok(partitions)) = self.topic_ready.get() else {
            return false;
        };
        let mut all = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        all.insert(subtask, (held, caught_up));
        let held: BTreeSet<i32> = all.values().flat_map(|(h, _)| h.iter().copied()).collect();
        let ended = self.writers_done()
            && all.len() == readers
            && all.values().all(|(_, c)| *c)
            && held.len() == *partitions as usize;
        if ended {
            self.ended.store(true, Ordering::SeqCst);
        }
        ended
    }
}

/// Runs a future to completion on this thread (the admin client's futures need no runtime).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

// ---- The writer ----

/// One subtask of the writer: records as keyed messages, markers as control messages.
pub struct ExchangeWriter {
    exchange: Arc<Exchange>,
    producer: ThreadedProducer<DeliveryContext>,
    context: DeliveryContext,
    what: String,
    partitions: i32,
    /// xorshift state for the marker's random partition.
    random: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    /// This instance's name, read at the first marker.
    instance: Option<String>,
    finished: bool,
    /// `<instance>/<vertex>/<subtask>`: names this writer's watermarks.
    writer: String,
    /// Chained behind a `kafka` source: it reports the source's partitions instead of its own
    /// watermark ([`crate::input_report`]). Known at the first record or watermark.
    reports: Option<bool>,
}

impl std::fmt::Debug for ExchangeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeWriter")
            .field("topic", &self.exchange.topic)
            .finish()
    }
}

impl ExchangeWriter {
    fn new(exchange: Arc<Exchange>, ctx: &SubtaskContext) -> Result<Self, BoxError> {
        let what = format!("kafka exchange writer \"{}\"", ctx.vertex_id);
        let partitions = exchange.ready(&what)?;
        let mut client = client_config(&exchange.config.brokers, &Properties::new());
        client.set("linger.ms", "5").set(
            "client.id",
            format!(
                "tidemark-{}-{}-{}",
                ctx.job_name, ctx.vertex_id, ctx.subtask
            ),
        );
        for (k, v) in &exchange.config.properties {
            client.set(k, v.as_text());
        }
        let context = DeliveryContext::default();
        let producer: ThreadedProducer<DeliveryContext> = client
            .create_with_context(context.clone())
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        let writer = format!(
            "{}/{}/{}",
            exchange.kafka.instance(),
            ctx.vertex_id,
            ctx.subtask
        );
        let mut writer = ExchangeWriter {
            exchange,
            producer,
            context,
            what,
            partitions,
            random: ctx.seed | 1,
            key: Vec::with_capacity(24),
            value: Vec::with_capacity(128),
            instance: None,
            finished: false,
            writer,
            reports: None,
        };
        // The hello: readers wait for this writer from now on, before its first record.
        writer.control(CONTROL_WATERMARK, Some(i64::MIN))?;
        Ok(writer)
    }

    /// Whether this writer reports the partitions of the `kafka` source chained before it
    /// (decided once, on this task's thread, after the source's first poll). The first time,
    /// a report goes out at once, so readers stop waiting for this writer's own watermark.
    fn reports(&mut self) -> Result<bool, BoxError> {
        if let Some(reports) = self.reports {
            return Ok(reports);
        }
        let reports = crate::input_report::present();
        self.reports = Some(reports);
        if reports {
            self.report()?;
        }
        Ok(reports)
    }

    /// The source's partitions as its last look saw them, to every partition.
    fn report(&mut self) -> Result<(), BoxError> {
        let text = crate::input_report::current_text().unwrap_or_default();
        self.send_control(CONTROL_WATERMARK, None, Some(&text))
    }

    /// A watermark (`Some`) or idle control message to every partition.
    fn control(&mut self, kind: &str, watermark: Option<i64>) -> Result<(), BoxError> {
        self.send_control(kind, watermark, None)
    }

    fn send_control(
        &mut self,
        kind: &str,
        watermark: Option<i64>,
        inputs: Option<&str>,
    ) -> Result<(), BoxError> {
        let mut buf = itoa_buf();
        let mut headers = OwnedHeaders::new_with_capacity(4)
            .insert(Header {
                key: HEADER_CONTROL,
                value: Some(kind),
            })
            .insert(Header {
                key: HEADER_WRITER,
                value: Some(self.writer.as_str()),
            });
        if let Some(wm) = watermark {
            headers = headers.insert(Header {
                key: HEADER_WATERMARK,
                value: Some(format_i64(&mut buf, wm)),
            });
        }
        if let Some(inputs) = inputs {
            headers = headers.insert(Header {
                key: HEADER_INPUTS,
                value: Some(inputs),
            });
        }
        for partition in 0..self.partitions.max(1) {
            let pending: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.exchange.topic)
                .partition(partition)
                .headers(headers.clone());
            produce(&self.producer, &self.context, &self.what, pending)?;
        }
        Ok(())
    }

    fn next_partition(&mut self) -> i32 {
        // xorshift64: a uniform partition for each marker (rule 10: one output at random).
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        (x % self.partitions.max(1) as u64) as i32
    }

    fn send(&mut self, record: &Record) -> Result<(), BoxError> {
        self.value.clear();
        self.key.clear();
        record
            .write_event_json(&mut self.value)
            .expect("writing to memory cannot fail");
        let key = record.key();
        let has_key = !key.is_null();
        if has_key {
            key.write_json(&mut self.key)
                .expect("writing to memory cannot fail");
        }
        let mut ts = itoa_buf();
        let ts = format_i64(&mut ts, record.timestamp);
        let headers = OwnedHeaders::new_with_capacity(2)
            .insert(Header {
                key: HEADER_TIMESTAMP,
                value: Some(ts),
            })
            .insert(Header {
                key: HEADER_TIMESTAMP_TYPE,
                value: Some(record.timestamp_type.as_str()),
            });
        let mut pending = BaseRecord::to(&self.exchange.topic)
            .payload(&self.value[..])
            .timestamp(record.timestamp.div_euclid(1_000_000))
            .headers(headers);
        if has_key {
            pending = pending.key(&self.key[..]);
        }
        produce(&self.producer, &self.context, &self.what, pending)
    }
}

fn itoa_buf() -> [u8; 24] {
    [0; 24]
}

/// `v` as decimal text in `buf`, without allocating.
fn format_i64(buf: &mut [u8; 24], v: i64) -> &str {
    use std::io::Write as _;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{v}");
    let n = cursor.position() as usize;
    std::str::from_utf8(&buf[..n]).unwrap_or("0")
}

impl Sink for ExchangeWriter {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        if self.reports.is_none() {
            self.reports()?;
        }
        self.send(record)
    }

    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        if let Some(f) = self.context.failure() {
            return Err(format!("{}: {f}", self.what).into());
        }
        if self.reports.is_none() {
            self.reports()?;
        }
        for r in records {
            self.send(r)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BoxError> {
        flush_producer(
            &self.producer,
            &self.context,
            &self.what,
            self.exchange.kafka.timeout(),
        )
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        // Ended: a writer that speaks for itself holds nothing back any more. One that reports
        // its source's partitions says nothing: they keep their watermarks until their next
        // owner has read them (this instance is stopping; another takes them over).
        if !self.finished && self.reports == Some(false) {
            self.control(CONTROL_IDLE, None)?;
        }
        flush_producer(
            &self.producer,
            &self.context,
            &self.what,
            self.exchange.kafka.timeout(),
        )?;
        if !self.finished {
            self.finished = true;
            self.exchange.writer_finished();
        }
        Ok(())
    }

    fn relays_markers(&self) -> bool {
        true
    }

    /// Writes the watermark to every partition, behind the records written before it.
    /// Chained behind a `kafka` source, it writes what each of the source's partitions holds
    /// back instead ([`crate::input_report`]).
    fn on_watermark(&mut self, watermark: i64) -> Result<(), BoxError> {
        // The first time, deciding already sent a report.
        let first = self.reports.is_none();
        match self.reports()? {
            true if first => Ok(()),
            true => self.report(),
            false => self.control(CONTROL_WATERMARK, Some(watermark)),
        }
    }

    /// Tells every partition's reader this writer holds nothing back until its next watermark
    /// (or, behind a `kafka` source, which of its partitions are idle).
    fn on_idle(&mut self) -> Result<(), BoxError> {
        let first = self.reports.is_none();
        match self.reports()? {
            true if first => Ok(()),
            true => self.report(),
            false => self.control(CONTROL_IDLE, None),
        }
    }

    /// Writes the marker as a control message to one random partition, behind the records
    /// written before it.
    fn on_marker(&mut self, marker: LatencyMarker) -> Result<(), BoxError> {
        let kafka = &self.exchange.kafka;
        let local = self
            .instance
            .get_or_insert_with(|| kafka.instance())
            .clone();
        let origin = origin::name(marker.origin).unwrap_or_else(|| local.clone());
        let (mut a, mut b, mut c) = (itoa_buf(), itoa_buf(), itoa_buf());
        let headers = OwnedHeaders::new_with_capacity(6)
            .insert(Header {
                key: HEADER_CONTROL,
                value: Some(CONTROL_MARKER),
            })
            .insert(Header {
                key: HEADER_MARKED_TIME,
                value: Some(format_i64(&mut a, marker.marked_time)),
            })
            .insert(Header {
                key: HEADER_SOURCE_VERTEX,
                value: Some(format_i64(&mut b, marker.source_id as i64)),
            })
            .insert(Header {
                key: HEADER_SOURCE_SUBTASK,
                value: Some(format_i64(&mut c, marker.source_subtask as i64)),
            })
            .insert(Header {
                key: HEADER_ORIGIN,
                value: Some(origin.as_str()),
            })
            .insert(Header {
                key: HEADER_CLOCK,
                value: Some(local.as_str()),
            });
        let partition = self.next_partition();
        let pending: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.exchange.topic)
            .partition(partition)
            .headers(headers);
        produce(&self.producer, &self.context, &self.what, pending)
    }
}

// ---- The reader ----

/// What turns the exchange's messages back into records and markers inside a `kafka` source
/// subtask (the reader), and knows when the exchange has ended.
pub(crate) struct Relay {
    exchange: Arc<Exchange>,
    subtask: usize,
    readers: usize,
    local: String,
    pub(crate) what: String,
    /// When the end was last checked (ns).
    pub(crate) last_check: i64,
    /// Parses the records' events, sharing names and repeated strings between them.
    parser: EventParser,
}

/// How often a reader checks whether the exchange has ended, once the local writers have.
pub(crate) const END_CHECK_EVERY_NANOS: i64 = 100_000_000;

fn header<'a, M: Message>(message: &'a M, name: &str) -> Option<&'a [u8]> {
    let headers = message.headers()?;
    headers.iter().find(|h| h.key == name).and_then(|h| h.value)
}

fn header_int<M: Message>(message: &M, name: &str) -> Option<i64> {
    std::str::from_utf8(header(message, name)?)
        .ok()?
        .parse()
        .ok()
}

impl Relay {
    /// Turns one message of the exchange topic into a record or a marker in `out`. Returns
    /// whether a record was emitted.
    pub(crate) fn take<M: Message>(
        &mut self,
        message: &M,
        out: &mut Output,
        watermarks: &mut PartitionWatermarks,
    ) -> Result<bool, BoxError> {
        let place = || {
            format!(
                "{}: message at {}/{} offset {}",
                self.what,
                message.topic(),
                message.partition(),
                message.offset()
            )
        };
        if let Some(kind) = header(message, HEADER_CONTROL) {
            if kind == CONTROL_MARKER.as_bytes() {
                let field = |name| {
                    header_int(message, name)
                        .ok_or_else(|| format!("{}: marker without a valid {name} header", place()))
                };
                let marked = field(HEADER_MARKED_TIME)?;
                let vertex = field(HEADER_SOURCE_VERTEX)?;
                let subtask = field(HEADER_SOURCE_SUBTASK)?;
                let text = |name| {
                    header(message, name)
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .unwrap_or("")
                };
                let clock = text(HEADER_CLOCK);
                let from = text(HEADER_ORIGIN);
                let marked = self
                    .exchange
                    .kafka
                    .to_local_clock(marked, clock, &self.local);
                let origin = if from.is_empty() || from == self.local {
                    origin::LOCAL
                } else {
                    origin::intern(from)
                };
                out.emit_marker(
                    LatencyMarker::new(marked, vertex as u32, subtask as u32).with_origin(origin),
                );
            }
            let writer = || {
                header(message, HEADER_WRITER)
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .ok_or_else(|| format!("{}: {HEADER_WRITER} header missing", place()))
            };
            if let Some(inputs) = header(message, HEADER_INPUTS) {
                let report = InputReport::from_text(inputs).map_err(|e| {
                    format!("{}: {HEADER_INPUTS} header is not a report: {e}", place())
                })?;
                watermarks.writer_report(message.topic(), message.partition(), writer()?, &report);
            } else if kind == CONTROL_WATERMARK.as_bytes() {
                let wm = header_int(message, HEADER_WATERMARK).ok_or_else(|| {
                    format!(
                        "{}: watermark without a valid {HEADER_WATERMARK} header",
                        place()
                    )
                })?;
                watermarks.writer_watermark(message.topic(), message.partition(), writer()?, wm);
            } else if kind == CONTROL_IDLE.as_bytes() {
                watermarks.writer_idle(message.topic(), message.partition(), writer()?);
            }
            // Control messages never reach user code.
            return Ok(false);
        }
        let key = match message.key() {
            None => Value::Null,
            Some(bytes) => {
                Value::from_json(bytes).map_err(|e| format!("{}: key is not JSON: {e}", place()))?
            }
        };
        // Only exchange writers write this topic, and they always write a value and both
        // timestamp headers: anything else is named, never read as a default.
        let payload = message.payload().ok_or_else(|| {
            format!(
                "{}: record without a value (expected a JSON object)",
                place()
            )
        })?;
        let event = match self.parser.parse(payload) {
            Ok(event) => event,
            Err(EventError::Invalid(e)) => {
                return Err(format!("{}: value is not JSON: {e}", place()).into())
            }
            Err(EventError::NotAnObject(_)) => {
                return Err(format!("{}: value is not a JSON object", place()).into())
            }
        };
        let timestamp = header_int(message, HEADER_TIMESTAMP).ok_or_else(|| {
            format!(
                "{}: record without a valid {HEADER_TIMESTAMP} header (nanoseconds)",
                place()
            )
        })?;
        let timestamp_type =
            timestamp_type_of(header(message, HEADER_TIMESTAMP_TYPE)).ok_or_else(|| {
                format!(
                    "{}: record without a valid {HEADER_TIMESTAMP_TYPE} header \
                     (create, ingestion or log_append)",
                    place()
                )
            })?;
        out.emit(Record::with_event(key, event, timestamp).with_timestamp_type(timestamp_type));
        Ok(true)
    }

    /// Whether the local writers have all ended (only then is the end worth checking).
    pub(crate) fn writers_done(&self) -> bool {
        self.exchange.writers_done()
    }

    /// Reports what this reader holds and whether it has read it all; true once the exchange
    /// has ended in this process.
    pub(crate) fn report(&self, held: BTreeSet<i32>, caught_up: bool) -> bool {
        self.exchange
            .report(self.subtask, self.readers, held, caught_up)
    }
}

/// The timestamp type a writer put in [`HEADER_TIMESTAMP_TYPE`]; `None` when missing or unknown.
fn timestamp_type_of(value: Option<&[u8]>) -> Option<TimestampType> {
    [
        TimestampType::Create,
        TimestampType::Ingestion,
        TimestampType::LogAppend,
    ]
    .into_iter()
    .find(|t| Some(t.as_str().as_bytes()) == value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamp_types_are_read_back_and_anything_else_is_refused() {
        for t in [
            TimestampType::Create,
            TimestampType::Ingestion,
            TimestampType::LogAppend,
        ] {
            assert_eq!(timestamp_type_of(Some(t.as_str().as_bytes())), Some(t));
        }
        assert_eq!(timestamp_type_of(None), None);
        assert_eq!(timestamp_type_of(Some(b"Create")), None);
        assert_eq!(timestamp_type_of(Some(b"")), None);
    }

    #[test]
    fn settings_are_checked() {
        let err = |v| {
            Exchange::new(v, "j", "v", &KafkaJob::new())
                .unwrap_err()
                .to_string()
        };
        assert!(Exchange::new(
            json!({"brokers": "h:1", "partitions": 4}),
            "j",
            "v",
            &KafkaJob::new()
        )
        .is_ok());
        let e = err(json!({"brokers": "h:1", "partitions": 0}));
        assert!(
            e.contains("partitions: must be between 1 and 10000, found 0"),
            "{e}"
        );
        let e = err(json!({"brokers": "h:1"}));
        assert!(e.contains("partitions"), "{e}");
        let e = err(json!({"brokers": "h:1", "partitions": 2, "partitons": 3}));
        assert!(e.contains("unknown field `partitons`"), "{e}");
        let e = err(json!({"brokers": "", "partitions": 2}));
        assert!(
            e.contains("brokers: must name at least one host:port"),
            "{e}"
        );
    }

    #[test]
    fn names() {
        assert_eq!(topic_name("job", "sum"), "tidemark-job-sum-exchange");
        assert_eq!(writer_id("sum", "gen", 1), "sum.exchange");
        assert_eq!(writer_id("sum", "gen", 2), "sum.exchange.gen");
        assert_eq!(reader_id("sum"), "sum.exchange-in");
    }

    #[test]
    fn numbers_as_text_without_allocation() {
        let mut b = itoa_buf();
        assert_eq!(format_i64(&mut b, i64::MIN), "-9223372036854775808");
        assert_eq!(format_i64(&mut b, 42), "42");
    }
}
