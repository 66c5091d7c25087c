//! Tidemark's own topics (an exchange's, a state topic): created by Tidemark with the partition
//! count the job asks for, through the brokers' CreateTopics, and never left to a broker's
//! auto-creation (which would make them with its default count); a state topic's
//! configuration is checked when the brokers can describe it.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigResource, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::Producer as _;
use rdkafka::types::RDKafkaErrorCode;

use crate::client::{client_config, unreachable_message, Brokers, ErrorContext, Properties};

/// The librdkafka property that lets a client make a topic by asking for it; Tidemark's
/// clients of its own topics set it to `false`.
pub const AUTO_CREATE: &str = "allow.auto.create.topics";

/// How long topic creation and a config description may take before the broker is taken not
/// to answer them.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how to reach the brokers, and who asks (for messages).
pub(crate) struct TopicAdmin<'a> {
    /// "kafka exchange reader \"v\"" and the like.
    pub what: &'a str,
    /// The bootstrap servers.
    pub brokers: &'a Brokers,
    /// The job file's pass-through properties.
    pub properties: &'a Properties,
    /// How long to wait for the brokers (`--kafka-timeout`).
    pub timeout: Duration,
}

impl TopicAdmin<'_> {
    /// A client configuration that never auto-creates a topic.
    fn config(&self) -> ClientConfig {
        let mut config = client_config(self.brokers, self.properties);
        config.set(AUTO_CREATE, "false");
        config
    }

    /// Makes sure `topic` exists, creating it with `partitions` and `configs` (replication as
    /// the brokers allow, at most 3), and returns its partition count (an existing topic's may
    /// differ). A broker that refuses to create it fails with its refusal.
    pub(crate) fn ensure_topic(
        &self,
        topic: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<i32, String> {
        let what = self.what;
        let config = self.config();
        // First the brokers must answer: a producer whose context keeps the broker's own
        // words (a refused connection) for the error, its log served while waiting.
        let probe: rdkafka::producer::BaseProducer<ErrorContext> = config
            .create_with_context(ErrorContext::default())
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        let deadline = Instant::now() + self.timeout;
        let metadata = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = left.clamp(Duration::from_millis(1), Duration::from_millis(500));
            let answer = probe.client().fetch_metadata(None, attempt);
            probe.poll(Duration::ZERO);
            match answer {
                Ok(m) => break m,
                Err(e) if Instant::now() >= deadline => {
                    return Err(unreachable_message(
                        what,
                        self.brokers,
                        self.timeout,
                        &e,
                        probe.context(),
                    ));
                }
                Err(_) => {}
            }
        };
        if let Some(n) = partitions_in(&metadata, topic) {
            return Ok(n);
        }
        let admin = self.admin()?;
        let replication = metadata.brokers().len().clamp(1, 3) as i32;
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
        for (k, v) in configs {
            new = new.set(k, v);
        }
        let refusal = match block_on(admin.create_topics([&new], &self.admin_options())) {
            Ok(results) => results.into_iter().find_map(|r| match r {
                // Another instance made it at the same moment: its count is checked below.
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) | Ok(_) => None,
                Err((_, code)) => Some(code.to_string()),
            }),
            Err(e) => Some(e.to_string()),
        };
        if let Some(refusal) = refusal {
            return Err(refused_message(
                what,
                self.brokers,
                topic,
                partitions,
                configs,
                &refusal,
            ));
        }
        // Created: wait until the metadata shows it.
        loop {
            let metadata = admin
                .inner()
                .fetch_metadata(Some(topic), Duration::from_millis(500));
            if let Some(n) = metadata.ok().and_then(|m| partitions_in(&m, topic)) {
                return Ok(n);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{what}: created the topic {topic} at {}, but it does not appear in the \
                     brokers' metadata",
                    self.brokers.to_bootstrap()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn admin(&self) -> Result<AdminClient<DefaultClientContext>, String> {
        self.config()
            .create()
            .map_err(|e| format!("{}: invalid Kafka settings: {e}", self.what))
    }

    fn admin_options(&self) -> AdminOptions {
        let wait = self.timeout.min(ADMIN_TIMEOUT);
        AdminOptions::new()
            .request_timeout(Some(wait))
            .operation_timeout(Some(wait))
    }

    /// Checks the configuration of the state topic `topic` as the brokers describe it
    /// ([`check_state_config`]): one that does not fit is an error naming the setting; a
    /// setting the brokers do not describe (DescribeConfigs unsupported, or left out of the
    /// description) is a warning on stderr, as each call says it once.
    pub(crate) fn check_state_config(&self, topic: &str) -> Result<(), String> {
        let (unchecked, reason) = match self.describe(topic) {
            Ok(config) => (
                check_state_config(self.what, topic, &config)?.join(" and "),
                "the brokers' description of the topic leaves it out".to_owned(),
            ),
            Err(why) => (
                "cleanup.policy and min.compaction.lag.ms".to_owned(),
                format!(
                    "the brokers at {} do not describe topic configs ({why})",
                    self.brokers.to_bootstrap()
                ),
            ),
        };
        if !unchecked.is_empty() {
            tracing::warn!(
                "{}",
                unchecked_state_config_warning(self.what, topic, &unchecked, &reason)
            );
        }
        Ok(())
    }

    /// `topic`'s configuration as the brokers describe it (DescribeConfigs), or why they do not.
    pub(crate) fn describe(&self, topic: &str) -> Result<ConfigResource, String> {
        let admin = self.admin()?;
        let resource = ResourceSpecifier::Topic(topic);
        let answer = block_on(admin.describe_configs([&resource], &self.admin_options()))
            .map_err(|e| e.to_string())?;
        match answer.into_iter().next() {
            Some(Ok(config)) => Ok(config),
            Some(Err(code)) => Err(code.to_string()),
            None => Err("no answer for the topic".into()),
        }
    }
}

/// The message for a broker that refused to create `topic`.
fn refused_message(
    what: &str,
    brokers: &Brokers,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
    refusal: &str,
) -> String {
    let settings: String = configs.iter().map(|(k, v)| format!(", {k}={v}")).collect();
    format!(
        "{what}: the brokers at {} refused to create the topic {topic}: {refusal}. Tidemark \
         creates its exchange and state topics itself and never lets a broker create them on \
         first use: create {topic} by hand ({partitions} partitions{settings}), or use brokers \
         that answer CreateTopics",
        brokers.to_bootstrap()
    )
}

/// What a state topic must be configured with; the smallest `min.compaction.lag.ms` that is
/// long enough (see [`crate::exchange::state`]).
pub(crate) const STATE_MIN_COMPACTION_LAG_MS: i64 = 3_600_000;

/// Checks the configuration the brokers describe for the state topic `topic`: its
/// `cleanup.policy` must be `compact` (never `delete`: deleting old messages could delete the
/// only copy of a committed value) and its `min.compaction.lag.ms` at least
/// [`STATE_MIN_COMPACTION_LAG_MS`]. `Ok` with the settings the description left out.
pub(crate) fn check_state_config(
    what: &str,
    topic: &str,
    config: &ConfigResource,
) -> Result<Vec<&'static str>, String> {
    let value = |name: &str| config.get(name).and_then(|e| e.value.clone());
    let fix = |setting: &str| {
        format!(
            "set {setting} on it (kafka-configs.sh --alter --entity-type topics --entity-name \
             {topic} --add-config {setting}), or delete it so that Tidemark creates it"
        )
    };
    let mut unknown = Vec::new();
    match value("cleanup.policy") {
        Some(policy) if policy.trim() == "compact" => {}
        Some(policy) => {
            return Err(format!(
                "{what}: the state topic {topic} has cleanup.policy={policy}, but state needs \
                 cleanup.policy=compact (deleting old messages could delete the only copy of a \
                 committed value): {}",
                fix("cleanup.policy=compact")
            ))
        }
        None => unknown.push("cleanup.policy"),
    }
    match value("min.compaction.lag.ms").map(|v| (v.trim().parse::<i64>(), v)) {
        Some((Ok(lag), _)) if lag >= STATE_MIN_COMPACTION_LAG_MS => {}
        Some((_, lag)) => {
            return Err(format!(
                "{what}: the state topic {topic} has min.compaction.lag.ms={lag}, but state \
                 needs at least {STATE_MIN_COMPACTION_LAG_MS} (1 h), so that compaction cannot \
                 act between a crash and the next owner's rewrite: {}",
                fix(&format!(
                    "min.compaction.lag.ms={STATE_MIN_COMPACTION_LAG_MS}"
                ))
            ))
        }
        None => unknown.push("min.compaction.lag.ms"),
    }
    Ok(unknown)
}

/// The warning when `settings` of the state topic `topic` cannot be checked, and `reason`.
pub(crate) fn unchecked_state_config_warning(
    what: &str,
    topic: &str,
    settings: &str,
    reason: &str,
) -> String {
    format!(
        "{what}: cannot check {settings} of the state topic {topic}: \
         {reason}; for no committed state to be lost the topic must have \
         cleanup.policy=compact and min.compaction.lag.ms of at least \
         {STATE_MIN_COMPACTION_LAG_MS}"
    )
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
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
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
    use rdkafka::admin::{ConfigEntry, ConfigSource, OwnedResourceSpecifier};

    fn described(entries: &[(&str, &str)]) -> ConfigResource {
        ConfigResource {
            specifier: OwnedResourceSpecifier::Topic("s".into()),
            entries: entries
                .iter()
                .map(|(name, value)| ConfigEntry {
                    name: (*name).into(),
                    value: Some((*value).into()),
                    source: ConfigSource::DynamicTopic,
                    is_read_only: false,
                    is_default: false,
                    is_sensitive: false,
                })
                .collect(),
        }
    }

    #[test]
    fn a_state_topic_must_be_compacted_with_a_long_enough_lag() {
        let check = |entries: &[(&str, &str)]| check_state_config("w", "s", &described(entries));
        let fits = [
            ("cleanup.policy", "compact"),
            ("min.compaction.lag.ms", "3600000"),
        ];
        assert_eq!(check(&fits), Ok(vec![]));
        assert_eq!(
            check(&[
                ("cleanup.policy", "compact"),
                ("min.compaction.lag.ms", "86400000")
            ]),
            Ok(vec![])
        );
        for policy in ["delete", "compact,delete"] {
            let e = check(&[
                ("cleanup.policy", policy),
                ("min.compaction.lag.ms", "3600000"),
            ])
            .unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "w: the state topic s has cleanup.policy={policy}, but state needs \
                     cleanup.policy=compact"
                )),
                "{e}"
            );
            assert!(e.contains("--add-config cleanup.policy=compact"), "{e}");
        }
        for lag in ["0", "3599999", "soon"] {
            let e = check(&[
                ("cleanup.policy", "compact"),
                ("min.compaction.lag.ms", lag),
            ])
            .unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "w: the state topic s has min.compaction.lag.ms={lag}, but state needs at \
                     least 3600000"
                )),
                "{e}"
            );
        }
        // A description without them (a broker that keeps few configs) cannot be checked.
        assert_eq!(
            check(&[("retention.ms", "1")]),
            Ok(vec!["cleanup.policy", "min.compaction.lag.ms"])
        );
    }

    #[test]
    fn a_refusal_names_the_topic_what_to_create_and_the_brokers_words() {
        let m = refused_message(
            "kafka exchange reader \"w\"",
            &Brokers::One("h:1".into()),
            "tidemark-j-w-state",
            8,
            &[("cleanup.policy", "compact")],
            "PolicyViolation (Broker: Policy violation)",
        );
        assert_eq!(
            m,
            "kafka exchange reader \"w\": the brokers at h:1 refused to create the topic \
             tidemark-j-w-state: PolicyViolation (Broker: Policy violation). Tidemark creates \
             its exchange and state topics itself and never lets a broker create them on first \
             use: create tidemark-j-w-state by hand (8 partitions, cleanup.policy=compact), or \
             use brokers that answer CreateTopics"
        );
    }
}

#[cfg(test)]
mod on_the_mock_cluster {
    use super::*;
    use crate::testing::partition_count;
    use crate::{DevCluster, DevClusterOptions};

    #[test]
    fn topics_are_created_with_their_count_and_refusals_named() {
        let cluster = DevCluster::start(DevClusterOptions::default()).unwrap();
        let brokers = Brokers::One(cluster.bootstrap_servers().into());
        let properties = Properties::new();
        let admin = TopicAdmin {
            what: "w",
            brokers: &brokers,
            properties: &properties,
            timeout: Duration::from_secs(30),
        };
        assert_eq!(admin.ensure_topic("t", 8, &[]), Ok(8));
        assert_eq!(partition_count(cluster.bootstrap_servers(), "t"), Some(8));
        // An existing topic keeps its count: the caller compares it with what it needs.
        assert_eq!(admin.ensure_topic("t", 3, &[]), Ok(8));
        let e = admin.ensure_topic("no such name", 2, &[]).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "w: the brokers at {} refused to create the topic no such name: InvalidTopic \
                 (Broker: Invalid topic). Tidemark creates",
                cluster.bootstrap_servers()
            )),
            "{e}"
        );
        assert!(
            e.contains("create no such name by hand (2 partitions)"),
            "{e}"
        );
        assert_eq!(
            partition_count(cluster.bootstrap_servers(), "no such name"),
            None
        );
        // The mock cannot describe topic configs: the caller warns.
        assert!(admin.describe("t").is_err());
    }
}
