//! What the source and the sink share: broker lists, pass-through properties, the client
//! context that keeps the broker's last error, and `--kafka-timeout`: how long a job waits for
//! the brokers and its topics at start (`wait_for_topic`) and how long it runs on without
//! them (`BrokerWatch`) before it fails with the broker's own error (`docs/kafka.md`,
//! "Failures and timeouts").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tidemark_runtime::sync::lock;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use serde::Deserialize;

/// The `type` name of the source and the sink in job files.
pub const TYPE_NAME: &str = "kafka";

/// Bootstrap servers: `"h:p,h:p"` or a list of `h:p`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Brokers {
    /// `"h:p,h:p"`.
    One(String),
    /// `[h:p, h:p]`.
    List(Vec<String>),
}

impl Brokers {
    /// The comma-separated form librdkafka takes.
    pub fn to_bootstrap(&self) -> String {
        match self {
            Brokers::One(s) => s.trim().to_owned(),
            Brokers::List(l) => l.iter().map(|s| s.trim()).collect::<Vec<_>>().join(","),
        }
    }

    /// True when no server is named.
    pub fn is_empty(&self) -> bool {
        self.to_bootstrap().split(',').all(|s| s.trim().is_empty())
    }
}

/// A librdkafka property value as a job file may write it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    /// A string.
    Text(String),
    /// A number.
    Number(serde_json::Number),
    /// A boolean.
    Bool(bool),
}

impl PropertyValue {
    /// The text librdkafka gets.
    pub fn as_text(&self) -> String {
        match self {
            PropertyValue::Text(s) => s.clone(),
            PropertyValue::Number(n) => n.to_string(),
            PropertyValue::Bool(b) => b.to_string(),
        }
    }
}

/// Properties passed to librdkafka as they are.
pub type Properties = BTreeMap<String, PropertyValue>;

/// The default of `--kafka-timeout`: how long sources and sinks wait for the brokers before
/// they fail ([`crate::KafkaJob::set_timeout`] changes it per job).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A client configuration with the bootstrap servers, quiet logging, and `properties` on top.
pub(crate) fn client_config(brokers: &Brokers, properties: &Properties) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers.to_bootstrap())
        .set_log_level(RDKafkaLogLevel::Warning);
    for (k, v) in properties {
        config.set(k, v.as_text());
    }
    config
}

/// Keeps the last error librdkafka reported (a refused connection, an unknown host), so a
/// failure can say what the broker said instead of only "timed out".
#[derive(Clone, Default)]
pub struct ErrorContext {
    last: Arc<Mutex<Option<String>>>,
    /// The last connection failure librdkafka logged: the most specific words it has.
    last_failure: Arc<Mutex<Option<String>>>,
}

impl ErrorContext {
    /// The last error seen, if any: a logged connection failure, else an error event.
    pub fn last_error(&self) -> Option<String> {
        let failure = lock(&self.last_failure).clone();
        failure.or_else(|| lock(&self.last).clone())
    }
}

impl ClientContext for ErrorContext {
    /// librdkafka's own log is not printed; connection failures are kept as the last error.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) && fac == "FAIL" {
            // "[thrd:…]: 127.0.0.1:9092/1: Connect to … failed: Connection refused …": the
            // thread name says nothing to a user.
            let message = match log_message.strip_prefix("[thrd:") {
                Some(rest) => rest.split_once("]: ").map_or(log_message, |(_, m)| m),
                None => log_message,
            };
            *lock(&self.last_failure) = Some(message.to_owned());
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        *lock(&self.last) = Some(if reason.is_empty() {
            error.to_string()
        } else {
            reason.to_owned()
        });
    }
}

/// A consumer that keeps the broker's errors quietly (the clock-offset exchange's).
impl rdkafka::consumer::ConsumerContext for ErrorContext {}

/// A producer that keeps the broker's errors quietly and ignores delivery reports.
impl rdkafka::producer::ProducerContext for ErrorContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

/// Why a topic could not be used at start.
#[derive(Debug)]
pub(crate) enum TopicWait {
    /// No broker answered within the timeout (the client's error of the last attempt).
    Unreachable(KafkaError),
    /// The brokers answered, but with this error for the topic until the timeout passed
    /// (`Unknown topic or partition`, `Topic authorization failed`, …).
    Topic(RDKafkaErrorCode),
}

/// Asks the brokers for `topic`'s metadata until they answer with the topic and its
/// partitions, or `timeout` passes, calling `serve` between attempts so librdkafka's queued logs
/// and errors reach the context. A topic the brokers do not know is waited for too (it may be
/// being created); a producer's request lets a broker that creates topics on first use create
/// it, a consumer's does not (librdkafka's `allow.auto.create.topics`).
pub(crate) fn wait_for_topic<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
    mut serve: impl FnMut(),
) -> Result<(), TopicWait> {
    let deadline = Instant::now() + timeout;
    // Once a broker has answered about the topic, its answer is the error to report, even if
    // a later attempt timed out.
    let mut answered = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = left
            .min(Duration::from_millis(500))
            .max(Duration::from_millis(1));
        let result = client.fetch_metadata(Some(topic), attempt);
        serve();
        let failure = match result {
            Ok(metadata) => match topic_state(&metadata, topic) {
                Ok(()) => return Ok(()),
                Err(code) => {
                    answered = Some(code);
                    TopicWait::Topic(code)
                }
            },
            Err(e) => TopicWait::Unreachable(e),
        };
        if Instant::now() >= deadline {
            return Err(answered.map_or(failure, TopicWait::Topic));
        }
        // A broker that answered is asked again after a pause, not in a busy loop.
        if matches!(failure, TopicWait::Topic(_)) {
            std::thread::sleep(
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(200)),
            );
        }
    }
}

/// [`wait_for_topic`] with its failure as librdkafka's error.
pub(crate) fn wait_for_metadata<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
    serve: impl FnMut(),
) -> Result<(), KafkaError> {
    wait_for_topic(client, topic, timeout, serve).map_err(|w| match w {
        TopicWait::Unreachable(e) => e,
        TopicWait::Topic(code) => KafkaError::MetadataFetch(code),
    })
}

/// Whether `metadata` shows `topic` ready to use: known, without error, with partitions.
fn topic_state(metadata: &Metadata, topic: &str) -> Result<(), RDKafkaErrorCode> {
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(RDKafkaErrorCode::UnknownTopicOrPartition);
    };
    match t.error() {
        Some(e) => Err(e.into()),
        None if t.partitions().is_empty() => Err(RDKafkaErrorCode::UnknownTopicOrPartition),
        None => Ok(()),
    }
}

/// The message for a [`TopicWait`] failure: the broker's own words, and what to do.
pub(crate) fn topic_wait_message(
    what: &str,
    brokers: &Brokers,
    topic: &str,
    timeout: Duration,
    wait: &TopicWait,
    context: &ErrorContext,
    producer: bool,
) -> String {
    match wait {
        TopicWait::Unreachable(e) => unreachable_message(what, brokers, timeout, e, context),
        TopicWait::Topic(code) => {
            let hint = match code {
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
                    if producer =>
                {
                    " (create it, or let the brokers create topics on first write: \
                     auto.create.topics.enable)"
                }
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => {
                    " (create it, or check the name)"
                }
                _ => "",
            };
            format!(
                "{what}: topic \"{topic}\" is not usable on {} after waiting {}: \
                 {}{hint}",
                brokers.to_bootstrap(),
                humantime(timeout),
                code
            )
        }
    }
}

/// Whether the brokers are still there while a job runs: opened by a consumer error that says
/// they are not (all brokers down, a topic gone), closed by a record read or a metadata
/// probe that succeeds, and failing once open longer than `--kafka-timeout`.
#[derive(Debug)]
pub(crate) struct BrokerWatch {
    timeout: Duration,
    /// Since when, and the error that opened it.
    down: Option<(Instant, String)>,
    next_probe: Instant,
}

/// How often an open [`BrokerWatch`] asks the brokers whether they are back.
const PROBE_EVERY: Duration = Duration::from_millis(1000);

impl BrokerWatch {
    /// A watch failing after `timeout` without brokers.
    pub(crate) fn new(timeout: Duration) -> Self {
        BrokerWatch {
            timeout,
            down: None,
            next_probe: Instant::now(),
        }
    }

    /// A consumer error: opens the watch if it says the brokers or a topic are gone (other
    /// errors are librdkafka's to retry).
    pub(crate) fn error(&mut self, error: &KafkaError, now: Instant) {
        let gone = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::UnknownTopicOrPartition
                    | RDKafkaErrorCode::UnknownTopic
            )
        );
        if gone && self.down.is_none() {
            self.down = Some((now, error.to_string()));
            self.next_probe = now + PROBE_EVERY;
        }
    }

    /// Records arrived: the brokers are there.
    pub(crate) fn ok(&mut self) {
        self.down = None;
    }

    /// Since when the brokers have been missing, if they are.
    pub(crate) fn down_since(&self) -> Option<Instant> {
        self.down.as_ref().map(|(at, _)| *at)
    }

    /// While open: asks `probe` (at most once a second) whether the brokers are back, and fails
    /// with the error that opened it (or the probe's) once open for longer than the timeout.
    pub(crate) fn check(
        &mut self,
        now: Instant,
        probe: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), BrokerLost> {
        let Some((since, first)) = &self.down else {
            return Ok(());
        };
        if now < self.next_probe {
            return Ok(());
        }
        self.next_probe = now + PROBE_EVERY;
        let since = *since;
        match probe() {
            Ok(()) => {
                self.down = None;
                Ok(())
            }
            Err(latest) if now.saturating_duration_since(since) >= self.timeout => {
                Err(BrokerLost {
                    for_at_least: self.timeout,
                    error: if latest.is_empty() {
                        first.clone()
                    } else {
                        latest
                    },
                })
            }
            Err(_) => Ok(()),
        }
    }
}

/// The brokers were missing for longer than `--kafka-timeout` while the job ran.
#[derive(Debug)]
pub(crate) struct BrokerLost {
    /// The timeout that passed.
    pub for_at_least: Duration,
    /// The broker's last error.
    pub error: String,
}

impl BrokerLost {
    /// "lost Kafka at B: no broker answered for T (--kafka-timeout): E".
    pub(crate) fn message(&self, what: &str, brokers: &Brokers) -> String {
        format!(
            "{what}: lost Kafka at {}: not usable for {} (--kafka-timeout): {}",
            brokers.to_bootstrap(),
            humantime(self.for_at_least),
            self.error
        )
    }
}

/// Drops `value` on a thread of its own and waits at most `limit` for it; past that the drop
/// goes on in the background. For librdkafka clients, whose close waits for brokers that may
/// be gone. Returns whether the drop ended in time.
pub(crate) fn drop_within<T: Send + 'static>(value: T, limit: Duration) -> bool {
    let (done, ended) = std::sync::mpsc::channel::<()>();
    let dropper = std::thread::Builder::new()
        .name("tidemark-kafka-close".into())
        .spawn(move || {
            drop(value);
            let _ = done.send(());
        });
    match dropper {
        Ok(_) => ended.recv_timeout(limit).is_ok(),
        // No thread to spare: drop it here.
        Err(_) => true,
    }
}

/// Asks the brokers for the metadata of `topics`, `attempt` at most: `Ok` when every topic is
/// there, else the broker's error (the logged connection failure when there is one).
pub(crate) fn probe_topics<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topics: &[String],
    attempt: Duration,
    context: &ErrorContext,
) -> Result<(), String> {
    for topic in topics {
        let failed = match client.fetch_metadata(Some(topic), attempt) {
            Ok(metadata) => match topic_state(&metadata, topic) {
                Ok(()) => continue,
                Err(code) => format!("topic \"{topic}\": {code}"),
            },
            Err(e) => context.last_error().unwrap_or_else(|| e.to_string()),
        };
        return Err(failed);
    }
    Ok(())
}

/// "cannot reach Kafka at B within T: E", with the broker's own error when there was one.
pub(crate) fn unreachable_message(
    what: &str,
    brokers: &Brokers,
    timeout: Duration,
    error: &dyn std::fmt::Display,
    context: &ErrorContext,
) -> String {
    let detail = context.last_error().unwrap_or_else(|| error.to_string());
    format!(
        "{what}: cannot reach Kafka at {} within {}: {detail}",
        brokers.to_bootstrap(),
        humantime(timeout)
    )
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_in_both_forms() {
        let one: Brokers = serde_json::from_value(serde_json::json!("a:1, b:2")).unwrap();
        assert_eq!(one.to_bootstrap(), "a:1, b:2");
        let list: Brokers = serde_json::from_value(serde_json::json!(["a:1", " b:2"])).unwrap();
        assert_eq!(list.to_bootstrap(), "a:1,b:2");
        assert!(Brokers::One(" ".into()).is_empty());
        assert!(!list.is_empty());
    }

    #[test]
    fn the_broker_watch_fails_only_after_the_timeout_without_brokers() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut watch = BrokerWatch::new(s(3));
        let down = KafkaError::MessageConsumption(RDKafkaErrorCode::AllBrokersDown);
        let transport = KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure);
        // One broker's connection dropping is librdkafka's to retry.
        watch.error(&transport, t0);
        assert_eq!(watch.down_since(), None);
        watch.error(&down, t0);
        assert_eq!(watch.down_since(), Some(t0));
        let refused = || Err::<(), _>("Connection refused".to_owned());
        // Not asked again within a second; within the timeout a failed probe is no failure.
        assert!(watch.check(t0, || panic!("probed too soon")).is_ok());
        assert!(watch.check(t0 + s(1), refused).is_ok());
        let lost = watch.check(t0 + s(3), refused).unwrap_err();
        assert_eq!(
            lost.message("kafka source \"in\"", &Brokers::One("h:1".into())),
            "kafka source \"in\": lost Kafka at h:1: not usable for 3s (--kafka-timeout): \
             Connection refused"
        );
        // Brokers back (a probe answers, or records arrive): the clock starts again.
        let mut watch = BrokerWatch::new(s(3));
        watch.error(&down, t0);
        assert!(watch.check(t0 + s(1), || Ok(())).is_ok());
        assert_eq!(watch.down_since(), None);
        assert!(watch.check(t0 + s(9), || panic!("closed")).is_ok());
        watch.error(&down, t0 + s(10));
        watch.ok();
        assert_eq!(watch.down_since(), None);
        // A topic deleted under a running job opens it too.
        let gone = KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition);
        watch.error(&gone, t0);
        assert_eq!(watch.down_since(), Some(t0));
    }

    #[test]
    fn a_drop_that_hangs_is_left_behind_after_the_limit() {
        struct Slow(std::sync::mpsc::Receiver<()>);
        impl Drop for Slow {
            fn drop(&mut self) {
                let _ = self.0.recv();
            }
        }
        let (release, wait) = std::sync::mpsc::channel();
        assert!(!drop_within(Slow(wait), Duration::from_millis(10)));
        release.send(()).unwrap();
        assert!(drop_within(42, Duration::from_secs(60)));
    }

    #[test]
    fn connection_failures_are_kept_without_the_thread_name() {
        let c = ErrorContext::default();
        assert_eq!(c.last_error(), None);
        c.log(
            RDKafkaLogLevel::Error,
            "FAIL",
            "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused",
        );
        assert_eq!(
            c.last_error().unwrap(),
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"
        );
    }

    #[test]
    fn properties_pass_through_as_text() {
        let p: Properties =
            serde_json::from_value(serde_json::json!({"a": "x", "b": 5, "c": true})).unwrap();
        let config = client_config(&Brokers::One("h:1".into()), &p);
        assert_eq!(config.get("bootstrap.servers"), Some("h:1"));
        assert_eq!(config.get("a"), Some("x"));
        assert_eq!(config.get("b"), Some("5"));
        assert_eq!(config.get("c"), Some("true"));
    }
}
