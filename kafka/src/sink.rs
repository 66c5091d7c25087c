//! The `kafka` sink: writes each record as a JSON message, keyed by the record's key, with the
//! record's timestamp as the message timestamp, so end-to-end latency continues downstream
//! (KIP-613).
//!
//! ```yaml
//! sinks:
//!   totals:
//!     type: kafka
//!     input: per_customer
//!     brokers: 127.0.0.1:9092
//!     topic: totals
//!     key: 'string(key)'      # CEL over the record; default: the record key
//!     properties: {}          # passed to librdkafka as they are
//!     format: json            # json (default) | avro (docs/formats.md)
//!     schema: totals.avsc     # avro: the writer schema
//!     schema_registry: {url: http://127.0.0.1:8081}   # avro in the Confluent wire format
//!     subject: totals-value   # default: <topic>-value
//!     auto_register: true     # false: the schema must be registered already
//!     on_error: fail          # an event that does not fit the schema: fail | skip | {dead_letter: PATH}
//! ```
//!
//! - `format: avro`: at start the schema is registered under the subject (or looked up), and
//!   each event is written as an Avro value in the Confluent wire format with that id (plain
//!   Avro without `schema_registry`). An event that does not fit the schema is never written
//!   half: `on_error` decides, the message naming the field and what the schema expects.
//!
//! - The message key is the value of `key:` (event fields at top level, `record.key`,
//!   `record.timestamp` in ms), compiled when the job is built; without it, the record's key. A
//!   string is written as it is, `null` as no key, any other value as JSON (`42`). An
//!   expression that fails on a record fails the job, naming the sink and the expression.
//!
//! - A tombstone ([`Record::is_tombstone`]: a deletion a `kafka` source read with
//!   `tombstones: keep`) is written as a tombstone: its key and no value (null, not `{}`), in
//!   any `format`, so a deletion read from one compacted topic stays one in the next.
//!
//! - A record that is an operator's result (a `window`'s, a `reduce`'s) carries its id in the
//!   header [`HEADER_RESULT_ID`] ([`tidemark_runtime::provenance::write_result_id`]): a result
//!   emitted again after a failover is the same message with the same id, so a consumer drops
//!   repeats by it (`docs/kafka.md`, "Result ids").
//! - Messages go through librdkafka's producer queue; a full queue makes the sink wait
//!   (backpressure), never drop.
//! - Delivery failures (after librdkafka's own retries) fail the job, naming the topic and the
//!   broker's error. `finish` and every checkpoint wait until every message written so far is
//!   acknowledged by the broker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tidemark_runtime::sync::lock;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use serde::Deserialize;
use tidemark_operators::expr::{with_record, Evaluator, Expr};
use tidemark_operators::formats::{avro, wire, AvroWriter, Registry, RegistryConfig, SchemaKind};
use tidemark_operators::on_error::{DeadLetterWriter, ErrorPolicy, OnErrorFactory};
use tidemark_operators::{ConfigError, FieldError};
use tidemark_runtime::provenance::write_result_id;
use tidemark_runtime::{BoxError, Record, Sink, SubtaskContext, Value};

use crate::client::{
    client_config, topic_wait_message, wait_for_topic, Brokers, ErrorContext, Properties,
};

/// The header naming the result a message holds ([`tidemark_runtime::provenance`]).
pub const HEADER_RESULT_ID: &str = "tidemark-result-id";

/// [`HEADER_RESULT_ID`] as the C string librdkafka takes.
const HEADER_RESULT_ID_C: &std::ffi::CStr = c"tidemark-result-id";

/// Settings of the `kafka` sink.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// Bootstrap servers.
    pub brokers: Brokers,
    /// The topic to write.
    pub topic: String,
    /// A CEL expression over the record giving the message key; default: the record's key.
    #[serde(default)]
    pub key: Option<String>,
    /// Passed to librdkafka as they are.
    #[serde(default)]
    pub properties: Properties,
    /// How events are written.
    #[serde(default)]
    pub format: SinkFormat,
    /// `format: avro`: the writer schema (`.avsc`).
    #[serde(default)]
    pub schema: Option<std::path::PathBuf>,
    /// The Schema Registry the schema is registered in (Confluent wire format).
    #[serde(default)]
    pub schema_registry: Option<RegistryConfig>,
    /// The subject; default `<topic>-value`.
    #[serde(default)]
    pub subject: Option<String>,
    /// Register the schema at start (default), or only look its id up.
    #[serde(default = "yes")]
    pub auto_register: bool,
    /// An event that does not fit the schema.
    #[serde(default)]
    pub on_error: ErrorPolicy,
}

fn yes() -> bool {
    true
}

/// How the `kafka` sink writes events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkFormat {
    /// A JSON object per message.
    #[default]
    Json,
    /// An Avro value of the sink's schema.
    Avro,
}

/// The settings' names, for the registry's "did you mean".
pub const FIELDS: &[&str] = &[
    "brokers",
    "topic",
    "key",
    "properties",
    "format",
    "schema",
    "schema_registry",
    "subject",
    "auto_register",
    "on_error",
];

impl KafkaSinkConfig {
    /// Checks what can be checked without a broker.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.brokers.is_empty() {
            return Err(("brokers", "must name at least one host:port".into()));
        }
        if self.topic.trim().is_empty() {
            return Err(("topic", "must not be empty".into()));
        }
        match self.format {
            SinkFormat::Avro if self.schema.is_none() => {
                return Err((
                    "format",
                    "avro needs schema: FILE.avsc (the writer schema)".into(),
                ))
            }
            SinkFormat::Json => {
                for (set, name) in [
                    (self.schema.is_some(), "schema"),
                    (self.schema_registry.is_some(), "schema_registry"),
                    (self.subject.is_some(), "subject"),
                ] {
                    if set {
                        return Err((name, "applies to format: avro only".into()));
                    }
                }
            }
            SinkFormat::Avro => {}
        }
        if self.subject.is_some() && self.schema_registry.is_none() {
            return Err(("subject", "needs schema_registry".into()));
        }
        if let Some(r) = &self.schema_registry {
            r.check().map_err(|e| ("schema_registry.url", e))?;
        }
        Ok(())
    }

    /// Makes the relative paths of the settings (schema, dead letter) relative to `dir`.
    pub fn resolve_paths(&mut self, dir: &std::path::Path) {
        if let Some(p) = &mut self.schema {
            *p = dir.join(&*p);
        }
        if let ErrorPolicy::DeadLetter(p) = &mut self.on_error {
            *p = dir.join(&*p);
        }
    }
}

/// `format: avro`: the writer, its schema's text and the id it has in the registry.
struct AvroOut {
    writer: Arc<AvroWriter>,
    text: String,
    registry: Option<Registry>,
    /// Made by the first subtask: the schema's id.
    id: OnceLock<Result<u32, String>>,
}

/// Counts deliveries and keeps the first failure.
#[derive(Clone, Default)]
pub struct DeliveryContext {
    errors: ErrorContext,
    delivered: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
}

impl DeliveryContext {
    /// The first delivery failure, if any.
    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.failed).clone()
    }
}

impl rdkafka::client::ClientContext for DeliveryContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.errors.log(level, fac, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.error(error, reason)
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, m)) => {
                let mut f = lock(&self.failed);
                f.get_or_insert_with(|| {
                    format!("delivery to {}/{} failed: {e}", m.topic(), m.partition())
                });
            }
        }
    }
}

/// Makes the subtasks of one `kafka` sink vertex; the first checks that the brokers answer.
pub struct KafkaSinkFactory {
    config: Arc<KafkaSinkConfig>,
    key: Option<Expr>,
    avro: Option<AvroOut>,
    on_error: OnErrorFactory,
    reachable: OnceLock<Result<(), String>>,
    /// `--kafka-timeout`.
    timeout: Duration,
}

impl KafkaSinkFactory {
    /// A factory for `config` of the job `kafka`. Compiles the `key` expression: a bad one is a
    /// setting error located inside the expression.
    pub fn new(config: KafkaSinkConfig, kafka: &crate::KafkaJob) -> Result<Self, ConfigError> {
        let key = config
            .key
            .as_deref()
            .map(|s| {
                Expr::compile(s).map_err(|e| e.into_config_error(crate::client::TYPE_NAME, "key"))
            })
            .transpose()?;
        let invalid = |(path, message): (&str, String)| {
            ConfigError::invalid(crate::client::TYPE_NAME, FieldError::new(path, message))
        };
        let avro = match (config.format, &config.schema) {
            (SinkFormat::Avro, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(("schema", format!("cannot read {}: {e}", path.display())))
                })?;
                let schema = avro::parse_schema(&text)
                    .and_then(AvroWriter::new)
                    .map_err(|e| invalid(("schema", format!("{}: {e}", path.display()))))?;
                Some(AvroOut {
                    writer: Arc::new(schema),
                    text,
                    registry: config
                        .schema_registry
                        .as_ref()
                        .map(|r| Registry::new(r, kafka.timeout())),
                    id: OnceLock::new(),
                })
            }
            _ => None,
        };
        let on_error = OnErrorFactory::new(config.on_error.clone(), std::path::Path::new(""));
        Ok(KafkaSinkFactory {
            config: Arc::new(config),
            key,
            avro,
            on_error,
            reachable: OnceLock::new(),
            timeout: kafka.timeout(),
        })
    }

    /// Makes one subtask's producer.
    pub fn make(&self, ctx: &SubtaskContext) -> Result<KafkaSink, BoxError> {
        let config = &*self.config;
        let what = format!("kafka sink \"{}\"", ctx.vertex_id);
        let mut client = client_config(&config.brokers, &Properties::new());
        client
            .set("linger.ms", "5")
            // A message not acknowledged within --kafka-timeout fails the job (librdkafka's
            // default waits 5 minutes); `properties` may say otherwise.
            .set(
                "message.timeout.ms",
                self.timeout.as_millis().max(1).to_string(),
            )
            .set(
                "client.id",
                format!(
                    "tidemark-{}-{}-{}",
                    ctx.job_name, ctx.vertex_id, ctx.subtask
                ),
            );
        for (k, v) in &config.properties {
            client.set(k, v.as_text());
        }
        let context = DeliveryContext::default();
        let producer: ThreadedProducer<DeliveryContext> = client
            .create_with_context(context.clone())
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        let reachable = self.reachable.get_or_init(|| {
            let timeout = self.timeout;
            wait_for_topic(producer.client(), &config.topic, timeout, || {}).map_err(|wait| {
                let topic = &config.topic;
                topic_wait_message(
                    &what,
                    &config.brokers,
                    topic,
                    timeout,
                    &wait,
                    &context.errors,
                    true,
                )
            })
        });
        reachable.clone()?;
        let avro = match &self.avro {
            Some(out) => {
                let id = match &out.registry {
                    None => None,
                    Some(registry) => Some(
                        out.id
                            .get_or_init(|| {
                                let subject = config
                                    .subject
                                    .clone()
                                    .unwrap_or_else(|| format!("{}-value", config.topic));
                                let id = if config.auto_register {
                                    registry.register(&subject, &out.text, SchemaKind::Avro)
                                } else {
                                    registry.lookup(&subject, &out.text, SchemaKind::Avro)
                                };
                                id.map_err(|e| format!("{what}: {e}"))
                            })
                            .clone()?,
                    ),
                };
                Some((out.writer.clone(), id))
            }
            None => None,
        };
        let topic = TopicHandle::new(&producer, &config.topic)
            .map_err(|e| format!("{what}: topic \"{}\": {e}", config.topic))?;
        Ok(KafkaSink {
            topic_handle: topic,
            producer,
            context,
            topic: config.topic.clone(),
            what,
            written: 0,
            value: Vec::with_capacity(128),
            key: Vec::with_capacity(24),
            result_id: Vec::with_capacity(64),
            key_expr: self.key.clone().map(|e| (e, Evaluator::new())),
            timeout: self.timeout,
            avro,
            on_error: config.on_error.clone(),
            dead_letter: self.on_error.dead_letter()?,
            vertex: ctx.vertex_id.clone(),
        })
    }
}

/// One subtask of the `kafka` sink.
pub struct KafkaSink {
    /// Declared before `producer`: a topic handle is released before its client.
    topic_handle: TopicHandle,
    producer: ThreadedProducer<DeliveryContext>,
    context: DeliveryContext,
    topic: String,
    what: String,
    written: u64,
    value: Vec<u8>,
    key: Vec<u8>,
    /// The record's result id, reused.
    result_id: Vec<u8>,
    /// The `key:` expression and this subtask's evaluator.
    key_expr: Option<(Expr, Evaluator)>,
    /// `--kafka-timeout`.
    timeout: Duration,
    /// `format: avro`: the writer and the schema id for the wire format's header (`None`:
    /// plain Avro).
    avro: Option<(Arc<AvroWriter>, Option<u32>)>,
    on_error: ErrorPolicy,
    dead_letter: Option<DeadLetterWriter>,
    vertex: String,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topic", &self.topic)
            .finish()
    }
}

impl KafkaSink {
    fn failure(&self) -> Option<String> {
        self.context.failure()
    }

    /// Messages the broker acknowledged.
    pub fn delivered(&self) -> u64 {
        self.context.delivered.load(Ordering::Relaxed)
    }

    /// Waits until every message written so far is acknowledged (or failed).
    pub fn flush_and_wait(&mut self) -> Result<(), BoxError> {
        flush_producer(&self.producer, &self.context, &self.what, self.timeout)
    }

    fn send(&mut self, record: &Record) -> Result<(), BoxError> {
        self.value.clear();
        self.key.clear();
        // A tombstone (a deletion read with `tombstones: keep`) is written as one: its key and
        // no value, so a compacted topic downstream deletes the key too.
        let tombstone = record.is_tombstone();
        match &self.avro {
            _ if tombstone => {}
            None => write_json(&mut self.value, record),
            Some((writer, id)) => {
                if let Some(id) = id {
                    wire::write_header(&mut self.value, *id);
                }
                if let Err(e) = writer.write(&record.event_map(), &mut self.value) {
                    return self.reject(record, &e);
                }
            }
        }
        let has_key = match &self.key_expr {
            None => write_key(&mut self.key, &record.key()),
            Some((expr, eval)) => {
                let key = with_record(record, |scope| eval.eval(expr, scope)).map_err(|e| {
                    format!(
                        "{}: key: expression `{}` failed: {}",
                        self.what,
                        expr.source(),
                        e.message
                    )
                })?;
                write_key(&mut self.key, &key)
            }
        };
        let ms = record.timestamp.div_euclid(1_000_000);
        // A null key is no key (not an empty one).
        let key = has_key.then_some(&self.key[..]);
        self.result_id.clear();
        let result_id = write_result_id(record, &mut self.result_id).then_some(&self.result_id[..]);
        let message = OutMessage {
            value: (!tombstone).then_some(&self.value[..]),
            key,
            timestamp_ms: ms,
            result_id,
        };
        self.topic_handle
            .produce(&self.producer, &self.context, &self.what, &message)?;
        self.written += 1;
        Ok(())
    }
}

impl KafkaSink {
    /// An event that does not fit the schema: `on_error` decides.
    fn reject(&mut self, record: &Record, error: &str) -> Result<(), BoxError> {
        let reason = format!("the event does not fit the schema: {error}");
        match &self.on_error {
            ErrorPolicy::Fail => Err(format!("{}: {reason} (on_error: fail)", self.what).into()),
            ErrorPolicy::Skip => Ok(()),
            ErrorPolicy::DeadLetter(_) => match &self.dead_letter {
                Some(file) => file
                    .write(
                        &self.vertex,
                        &reason,
                        &Value::from(record.event_map().into_owned()),
                    )
                    .map_err(|e| {
                        format!(
                            "{}: cannot write to dead-letter file {}: {e} (after {reason})",
                            self.what,
                            file.path().display()
                        )
                        .into()
                    }),
                None => Ok(()),
            },
        }
    }
}

/// One message of the sink, borrowing the sink's buffers.
#[derive(Clone, Copy)]
struct OutMessage<'a> {
    /// `None`: no value (a tombstone).
    value: Option<&'a [u8]>,
    /// `None`: no key.
    key: Option<&'a [u8]>,
    timestamp_ms: i64,
    /// The header [`HEADER_RESULT_ID`], for a result.
    result_id: Option<&'a [u8]>,
}

/// The producer's handle of the sink's topic, made once. A [`BaseRecord`] names its topic,
/// and for each message so named rdkafka copies the name into a new C string and librdkafka
/// looks the topic up under the client's write lock; through the handle a message costs
/// neither (librdkafka's `RD_KAFKA_VTYPE_RKT`).
struct TopicHandle(std::ptr::NonNull<rdkafka::bindings::rd_kafka_topic_t>);

// SAFETY: librdkafka's topic handles may be used from any thread.
unsafe impl Send for TopicHandle {}

impl TopicHandle {
    fn new(producer: &ThreadedProducer<DeliveryContext>, topic: &str) -> Result<Self, String> {
        let name = std::ffi::CString::new(topic).map_err(|e| e.to_string())?;
        // SAFETY: the client pointer is valid while `producer` lives, and the handle is
        // destroyed before it (`KafkaSink`'s field order); a null configuration takes the
        // client's default topic settings, as a topic named in a message does.
        let rkt = unsafe {
            rdkafka::bindings::rd_kafka_topic_new(
                producer.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        std::ptr::NonNull::new(rkt).map(TopicHandle).ok_or_else(|| {
            // SAFETY: reads librdkafka's thread-local last error.
            let code = unsafe { rdkafka::bindings::rd_kafka_last_error() };
            RDKafkaErrorCode::from(code).to_string()
        })
    }

    /// Hands one message to the producer (librdkafka copies key and value), waiting while its
    /// queue is full (backpressure, never a drop); fails on a delivery failure seen meanwhile
    /// or an error of the producer.
    fn produce(
        &self,
        producer: &ThreadedProducer<DeliveryContext>,
        context: &DeliveryContext,
        what: &str,
        message: &OutMessage<'_>,
    ) -> Result<(), BoxError> {
        let OutMessage {
            value,
            key,
            timestamp_ms,
            result_id,
        } = *message;
        use rdkafka::bindings as rd;
        let mem = |ptr: *const u8, size: usize| rd::rd_kafka_vu_s__bindgen_ty_1 {
            mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                ptr: ptr as *mut std::ffi::c_void,
                size,
            },
        };
        let vu = |vtype, u| rd::rd_kafka_vu_t { vtype, u };
        // A null pointer is no key, and no value: a tombstone (librdkafka writes length -1).
        let (key_ptr, key_len) = key.map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len()));
        let (value_ptr, value_len) = value.map_or((std::ptr::null(), 0), |v| (v.as_ptr(), v.len()));
        let args = [
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT,
                rd::rd_kafka_vu_s__bindgen_ty_1 {
                    rkt: self.0.as_ptr(),
                },
            ),
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                rd::rd_kafka_vu_s__bindgen_ty_1 { i32_: -1 },
            ),
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                rd::rd_kafka_vu_s__bindgen_ty_1 {
                    i: rd::RD_KAFKA_MSG_F_COPY as std::ffi::c_int,
                },
            ),
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                mem(value_ptr, value_len),
            ),
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
                mem(key_ptr, key_len),
            ),
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TIMESTAMP,
                rd::rd_kafka_vu_s__bindgen_ty_1 { i64_: timestamp_ms },
            ),
            // Passed only with a result id (see `count` below).
            vu(
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADER,
                rd::rd_kafka_vu_s__bindgen_ty_1 {
                    header: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_2 {
                        name: HEADER_RESULT_ID_C.as_ptr(),
                        val: result_id.unwrap_or_default().as_ptr() as *const std::ffi::c_void,
                        size: result_id.map_or(0, <[u8]>::len) as isize,
                    },
                },
            ),
        ];
        let count = if result_id.is_some() {
            args.len()
        } else {
            args.len() - 1
        };
        loop {
            // SAFETY: the client and topic handle are valid (see `new`); the arguments point
            // into `value`, `key` and `result_id`, which librdkafka copies before returning
            // (MSG_F_COPY; a header's name and value are always copied).
            let error = unsafe {
                rd::rd_kafka_produceva(producer.client().native_ptr(), args.as_ptr(), count)
            };
            if error.is_null() {
                return Ok(());
            }
            // SAFETY: a non-null error is ours to read and destroy, once.
            let (code, text) = unsafe {
                let code = RDKafkaErrorCode::from(rd::rd_kafka_error_code(error));
                let text = std::ffi::CStr::from_ptr(rd::rd_kafka_error_string(error))
                    .to_string_lossy()
                    .into_owned();
                rd::rd_kafka_error_destroy(error);
                (code, text)
            };
            if code != RDKafkaErrorCode::QueueFull {
                let topic = self.name();
                return Err(format!("{what}: cannot write to {topic}: {text}").into());
            }
            if let Some(f) = context.failure() {
                return Err(format!("{what}: {f}").into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn name(&self) -> String {
        // SAFETY: the handle is valid; librdkafka returns its own NUL-terminated name.
        unsafe {
            std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_topic_name(self.0.as_ptr()))
                .to_string_lossy()
                .into_owned()
        }
    }
}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: made by `rd_kafka_topic_new`, destroyed once, before its client.
        unsafe { rdkafka::bindings::rd_kafka_topic_destroy(self.0.as_ptr()) }
    }
}

/// Hands `pending` to the producer, waiting while its queue is full (backpressure, never a
/// drop); fails on a delivery failure seen meanwhile or an error of the producer.
pub(crate) fn produce(
    producer: &ThreadedProducer<DeliveryContext>,
    context: &DeliveryContext,
    what: &str,
    mut pending: BaseRecord<'_, [u8], [u8]>,
) -> Result<(), BoxError> {
    loop {
        match producer.send(pending) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                pending = back;
                if let Some(f) = context.failure() {
                    return Err(format!("{what}: {f}").into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, back)) => {
                return Err(format!("{what}: cannot write to {}: {e}", back.topic).into())
            }
        }
    }
}

/// Waits until every message the producer was given is acknowledged by the broker (or failed),
/// within `--kafka-timeout`.
pub(crate) fn flush_producer(
    producer: &ThreadedProducer<DeliveryContext>,
    context: &DeliveryContext,
    what: &str,
    timeout: Duration,
) -> Result<(), BoxError> {
    let started = Instant::now();
    loop {
        if let Some(f) = context.failure() {
            return Err(format!("{what}: {f}").into());
        }
        match flush_for(producer, Duration::from_millis(100)) {
            Ok(()) => break,
            Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                if started.elapsed() < timeout => {}
            Err(e) => {
                let detail = context.errors.last_error().unwrap_or(e.to_string());
                return Err(format!(
                    "{what}: messages not acknowledged within {timeout:?}: {detail}"
                )
                .into());
            }
        }
    }
    match context.failure() {
        Some(f) => Err(format!("{what}: {f}").into()),
        None => Ok(()),
    }
}

/// Waits at most `wait` until no message of `producer` is left unacknowledged, returning as
/// soon as that is so. rust-rdkafka's `Producer::flush` does not return before its whole
/// timeout once it had to wait at all (it then polls until the deadline), so each flush of
/// a checkpoint (exchange writer, sink, state) took 100 ms at least; librdkafka's own
/// `rd_kafka_flush` waits on the count of messages it holds, which reaches zero once the
/// producer's polling thread has handled every delivery report (so every delivery callback
/// has run).
fn flush_for(
    producer: &ThreadedProducer<DeliveryContext>,
    wait: Duration,
) -> Result<(), KafkaError> {
    use rdkafka::bindings as rd;
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: the client pointer is valid for as long as `producer` lives.
    match unsafe { rd::rd_kafka_flush(producer.client().native_ptr(), ms) } {
        rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
        e => Err(KafkaError::Flush(e.into())),
    }
}

/// Writes `key` as message key bytes into `buf`: a string as it is, any other value as JSON;
/// `false` for `null` (no key).
fn write_key(buf: &mut Vec<u8>, key: &Value) -> bool {
    match key {
        Value::Null => return false,
        Value::String(k) => buf.extend_from_slice(k.as_bytes()),
        // Straight into the buffer: no string made per message (`Display` makes one).
        other => {
            let _ = serde_json::to_writer(&mut *buf, other);
        }
    }
    true
}

/// The record's event as the JSON object the sink writes (the timestamp travels as the
/// message's timestamp, the key as its key).
pub fn write_json(buf: &mut Vec<u8>, record: &Record) {
    record
        .write_event_json(&mut *buf)
        .expect("writing to memory cannot fail");
}

impl Sink for KafkaSink {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        self.send(record)
    }

    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        if let Some(f) = self.failure() {
            return Err(format!("{}: {f}", self.what).into());
        }
        for r in records {
            self.send(r)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BoxError> {
        self.flush_and_wait()
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        self.flush_and_wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_runtime::Map;

    /// The key as the message's key: a string's text as it is, anything else as its JSON text
    /// (as `Value`'s `Display` gives it), and no key for `null`.
    #[test]
    fn keys_are_written_as_their_text() {
        let mut map = Map::new();
        map.insert("a", Value::Int(1));
        let cases = [
            Value::String("user-7".into()),
            Value::Int(-42),
            Value::Int(i64::MAX),
            Value::Double(2.5),
            Value::Double(1e21),
            Value::Bool(true),
            Value::from(map),
        ];
        for key in cases {
            let mut buf = b"left over".to_vec();
            buf.clear();
            assert!(write_key(&mut buf, &key));
            let expected = match &key {
                Value::String(s) => s.to_string(),
                other => other.to_string(),
            };
            assert_eq!(String::from_utf8(buf).unwrap(), expected, "{key:?}");
        }
        let mut buf = Vec::new();
        assert!(!write_key(&mut buf, &Value::Null));
        assert!(buf.is_empty());
    }

    /// A flush returns only once every message is acknowledged and its delivery callback has
    /// run (a flush that returned early would leave deliveries uncounted).
    #[test]
    fn a_flush_waits_for_every_delivery_report() {
        use crate::dev_cluster::{DevCluster, DevClusterOptions};
        let cluster = DevCluster::start(DevClusterOptions {
            topics: vec![("flushed".into(), 2)],
            ..DevClusterOptions::default()
        })
        .unwrap();
        let brokers = Brokers::One(cluster.bootstrap_servers().to_owned());
        let context = DeliveryContext::default();
        let producer: ThreadedProducer<DeliveryContext> =
            client_config(&brokers, &Properties::new())
                .create_with_context(context.clone())
                .unwrap();
        for round in 1..=3u64 {
            for i in 0..500 {
                let key = format!("k{i}");
                let record = BaseRecord::to("flushed")
                    .partition(i % 2)
                    .key(key.as_bytes())
                    .payload(b"v".as_slice());
                produce(&producer, &context, "test", record).unwrap();
            }
            flush_producer(&producer, &context, "test", Duration::from_secs(30)).unwrap();
            assert_eq!(context.delivered.load(Ordering::Relaxed), 500 * round);
            assert_eq!(producer.in_flight_count(), 0);
        }
    }
}
