//! One exchange edge in this process: its settings, its topic (created if needed), and when
//! its local side has ended.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;
use tidemark_operators::config::parse_settings;
use tidemark_operators::{ConfigError, FieldError};

use super::naming::{topic_name, KIND};
use crate::client::{Brokers, Properties, PropertyValue};
use crate::topics::{TopicAdmin, AUTO_CREATE};
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
    /// Passed to librdkafka as they are (writer, reader, state and topic creation), with
    /// `allow.auto.create.topics=false` always: Tidemark creates its topics itself.
    #[serde(default)]
    pub properties: Properties,
}

/// The settings' names, for "did you mean".
pub const FIELDS: &[&str] = &["brokers", "partitions", "properties"];

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
        if let Some(v) = self.properties.get(AUTO_CREATE) {
            if v.as_text() != "false" {
                return Err((
                    "properties.allow.auto.create.topics",
                    format!(
                        "Tidemark creates the exchange and state topics itself and never lets \
                         the brokers create them on first use: leave it out (found {})",
                        v.as_text()
                    ),
                ));
            }
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
    /// The state each reader subtask made keeps, until the store of the keyed subtask
    /// chained behind it takes it ([`super::StateTopicStore`]).
    pub(super) kept: Mutex<BTreeMap<usize, Arc<super::state::KeptState>>>,
    /// The state restored from a checkpoint directory, until each partition takes its own
    /// ([`super::seed`]).
    pub(crate) seed: Arc<super::seed::DirectorySeed>,
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
        let mut config: ExchangeConfig = parse_settings(KIND, settings)?;
        config.check().map_err(invalid)?;
        // Every client of the exchange (writer, reader, state, admin) gets it.
        config
            .properties
            .insert(AUTO_CREATE.into(), PropertyValue::Bool(false));
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
            kept: Mutex::new(BTreeMap::new()),
            seed: Arc::default(),
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
    /// Its state topic is checked before the job starts ([`KafkaJob::check_state_topics`]).
    pub fn keep_state(self: &Arc<Self>) {
        self.keeps_state.store(true, Ordering::SeqCst);
        self.kafka.set_keeps_state();
        let exchange = Arc::downgrade(self);
        self.kafka
            .add_state_check(crate::job::StateCheck(Box::new(move || {
                match exchange.upgrade() {
                    Some(e) => super::state::check_key_hash(
                        &e.config.brokers,
                        &e.config.properties,
                        &e.state_topic,
                        &format!(
                            "kafka exchange reader \"{}\"",
                            super::naming::reader_id(&e.vertex)
                        ),
                        e.kafka.timeout(),
                    ),
                    None => Ok(()),
                }
            })));
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
    /// it compacted, [`super::state::STATE_TOPIC_CONFIG`]) and a configuration that keeps
    /// committed state; one with another count or configuration is an error. Where the brokers
    /// cannot describe topic configs, a warning says so (once: the answer is kept).
    pub(super) fn state_ready(&self, what: &str) -> Result<i32, String> {
        let partitions = self.ready(what)?;
        self.state_ready
            .get_or_init(|| {
                let admin = self.admin(what);
                let n = admin.ensure_topic(
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
                admin.check_state_config(&self.state_topic)?;
                Ok(n)
            })
            .clone()
    }

    /// Creates and checks this exchange's topics for `what`.
    fn admin<'a>(&'a self, what: &'a str) -> TopicAdmin<'a> {
        TopicAdmin {
            what,
            brokers: &self.config.brokers,
            properties: &self.config.properties,
            timeout: self.kafka.timeout(),
        }
    }

    /// Makes sure the topic exists (creating it with `partitions`, replication as the brokers
    /// allow) and returns its partition count.
    pub(super) fn ready(&self, what: &str) -> Result<i32, String> {
        self.topic_ready
            .get_or_init(|| {
                let n = self.admin(what).ensure_topic(
                    &self.topic,
                    self.config.partitions as i32,
                    &[],
                )?;
                Ok(self.checked_count(what, n))
            })
            .clone()
    }

    /// `n`, with a warning when it is not what the job file asks for.
    fn checked_count(&self, what: &str, n: i32) -> i32 {
        if n as u32 != self.config.partitions {
            tracing::warn!(
                "{what}: the exchange topic {} has {n} partitions, not the {} \
                 the job file asks for (it existed already)",
                self.topic,
                self.config.partitions
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
        let e = err(json!({"brokers": "h:1", "partitions": 2,
                           "properties": {"allow.auto.create.topics": true}}));
        assert!(
            e.contains(
                "properties.allow.auto.create.topics: Tidemark creates the exchange and \
                        state topics itself"
            ),
            "{e}"
        );
        let e = err(json!({"brokers": "", "partitions": 2}));
        assert!(
            e.contains("brokers: must name at least one host:port"),
            "{e}"
        );
    }
}
