//! One exchange edge in this process: its settings, its topic (created if needed), and when
//! its local side has ended.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::Producer as _;
use rdkafka::types::RDKafkaErrorCode;
use serde::Deserialize;
use tidemark_operators::config::parse_settings;
use tidemark_operators::event_json::EventParser;
use tidemark_operators::{ConfigError, FieldError};
use tidemark_runtime::component::{SinkFactory, SourceFactory};
use tidemark_runtime::{Sink, Source, SubtaskContext};

use super::naming::{topic_name, KIND};
use super::reader::Relay;
use super::writer::ExchangeWriter;
use crate::client::{client_config, unreachable_message, Brokers, Properties};
use crate::source::{KafkaSourceConfig, KafkaSourceFactory, Start};
use crate::KafkaJob;

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

/// One exchange: the writers (one per input edge) and the reader of one downstream vertex in
/// this process, sharing the topic and knowing when the local side has ended.
pub struct Exchange {
    pub(super) config: ExchangeConfig,
    pub(super) topic: String,
    /// Writer subtasks in this process, over every input edge.
    pub(super) writers: AtomicUsize,
    pub(super) writers_done: AtomicUsize,
    /// The topic's partition count once it exists (created if needed).
    pub(super) topic_ready: OnceLock<Result<i32, String>>,
    /// Reader subtask → (partitions held, read to their end after every writer flushed).
    pub(super) readers: Mutex<BTreeMap<usize, (BTreeSet<i32>, bool)>>,
    pub(super) ended: AtomicBool,
    /// The keyed state of the vertex behind is kept per partition in [`Exchange::state_topic`]
    /// ([`super::state`]).
    pub(super) keeps_state: AtomicBool,
    /// `tidemark-<job>-<vertex>-state`.
    pub(super) state_topic: String,
    /// The vertex behind.
    pub(super) vertex: String,
    /// The state topic's partition count once it exists and matches the exchange's.
    pub(super) state_ready: OnceLock<Result<i32, String>>,
    /// The job's Kafka context: instance name, clock offsets, series, timeout.
    pub(super) kafka: Arc<KafkaJob>,
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
            keeps_state: AtomicBool::new(false),
            state_topic: super::state::state_topic_name(job, vertex),
            vertex: vertex.to_owned(),
            state_ready: OnceLock::new(),
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

    /// The vertex behind keeps keyed state (a `window` or a `reduce`) and the job takes
    /// checkpoints: its state moves with the exchange's partitions through the state topic
    /// ([`super::state`]). Called while the job is built, before any subtask is made.
    pub fn keep_state(&self) {
        self.keeps_state.store(true, Ordering::SeqCst);
    }

    /// The state topic, `tidemark-<job>-<vertex>-state`.
    pub fn state_topic(&self) -> &str {
        &self.state_topic
    }

    /// Whether the state of the vertex behind moves with the partitions.
    pub fn keeps_state(&self) -> bool {
        self.keeps_state.load(Ordering::SeqCst)
    }

    /// Makes sure the state topic exists with the exchange topic's partition count (creating
    /// it compacted, [`super::state::STATE_TOPIC_CONFIG`]); one with another count is an error.
    pub(super) fn state_ready(&self, what: &str) -> Result<i32, String> {
        let partitions = self.ready(what)?;
        self.state_ready
            .get_or_init(|| {
                let n = self.ensure_topic(
                    what,
                    &self.state_topic,
                    partitions,
                    super::state::STATE_TOPIC_CONFIG,
                )?;
                if n != partitions {
                    return Err(format!(
                        "{what}: the state topic {} has {n} partitions, but the exchange topic {} \
                         has {partitions}: each exchange partition keeps its state in the state \
                         partition of the same number. Create {} with {partitions} partitions \
                         (cleanup.policy=compact, min.compaction.lag.ms=3600000), or delete it \
                         so that Tidemark creates it",
                        self.state_topic, self.topic, self.state_topic
                    ));
                }
                Ok(n)
            })
            .clone()
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
            schema_registry: None,
            schema: None,
            reader_schema: None,
            message: None,
            key_format: Default::default(),
        };
        let factory = KafkaSourceFactory::new(source, &self.kafka)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        Box::new(move |ctx: &SubtaskContext| {
            let factory = factory.clone()?;
            let what = format!("kafka exchange reader \"{}\"", ctx.vertex_id);
            exchange.ready(&what)?;
            // Checked before the consumer joins the group: a subtask that fails after joining
            // leaves a member behind that the group waits for.
            let state_partitions = match exchange.keeps_state() {
                true => Some(exchange.state_ready(&what)?),
                false => None,
            };
            let mut source = factory.make(ctx)?;
            if let Some(partitions) = state_partitions {
                let store = super::state::StateStore::new(
                    exchange.state_topic.clone(),
                    partitions as u32,
                    what.clone(),
                    &exchange.config.brokers,
                    &exchange.config.properties,
                    exchange.kafka.timeout(),
                )?;
                source.keep_state(super::state::KeptState::new(
                    store,
                    exchange.topic.clone(),
                    exchange.vertex.clone(),
                    exchange.kafka.metrics().clone(),
                ));
            }
            source.relay = Some(Relay {
                exchange: exchange.clone(),
                subtask: ctx.subtask,
                readers: ctx.parallelism,
                local: exchange.kafka.instance(),
                what,
                last_check: i64::MIN,
                parser: EventParser::new(),
                replays: Default::default(),
                drops_replays: exchange.keeps_state(),
                replays_dropped: 0,
                restores_taken: 0,
                topic: tidemark_runtime::name::name_of(&exchange.topic),
            });
            Ok(Box::new(source) as Box<dyn Source>)
        })
    }

    /// Makes sure the topic exists (creating it with `partitions`, replication as the brokers
    /// allow) and returns its partition count.
    pub(super) fn ready(&self, what: &str) -> Result<i32, String> {
        self.topic_ready
            .get_or_init(|| {
                let n = self.ensure_topic(what, &self.topic, self.config.partitions as i32, &[])?;
                Ok(self.checked_count(what, n))
            })
            .clone()
    }

    /// Makes sure `topic` exists (creating it with `partitions` and `configs`, replication as
    /// the brokers allow) and returns its partition count.
    fn ensure_topic(
        &self,
        what: &str,
        topic: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<i32, String> {
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
        if let Some(n) = partitions_in(&metadata, topic) {
            return Ok(n);
        }
        let replication = metadata.brokers().len().clamp(1, 3) as i32;
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
        for (k, v) in configs {
            new = new.set(k, v);
        }
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
                    .fetch_metadata(Some(topic), Duration::from_millis(500));
            }
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let metadata = admin
                .inner()
                .fetch_metadata(Some(topic), Duration::from_millis(500));
            if let Some(n) = metadata.ok().and_then(|m| partitions_in(&m, topic)) {
                return Ok(n);
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "{what}: cannot create the topic {topic} at {}: {}",
                    self.config.brokers.to_bootstrap(),
                    refusal.unwrap_or_else(|| "it does not appear in the metadata".into())
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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

    pub(super) fn writer_finished(&self) {
        self.writers_done.fetch_add(1, Ordering::SeqCst);
    }

    /// Every writer of this process has flushed and ended.
    pub(super) fn writers_done(&self) -> bool {
        self.writers_done.load(Ordering::SeqCst) >= self.writers.load(Ordering::SeqCst)
    }

    /// Reader `subtask` (of `readers`) holds `held` and has (or has not) read them to their
    /// end. True once the exchange has ended in this process (see the module docs).
    pub(super) fn report(
        &self,
        subtask: usize,
        readers: usize,
        held: BTreeSet<i32>,
        caught_up: bool,
    ) -> bool {
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

/// `topic`'s partition count in `metadata`, if it exists there.
fn partitions_in(metadata: &rdkafka::metadata::Metadata, topic: &str) -> Option<i32> {
    metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len() as i32)
        .filter(|n| *n > 0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
