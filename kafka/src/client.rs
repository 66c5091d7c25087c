//! What the source and the sink share: broker lists, pass-through properties, the client
//! context that keeps the broker's last error, and the connection timeout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use serde::Deserialize;

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

/// Milliseconds of the default connection timeout (`--kafka-timeout`), 30 s unless set.
static DEFAULT_TIMEOUT_MS: AtomicU64 = AtomicU64::new(30_000);

/// Sets how long sources and sinks wait for the brokers before they fail (`--kafka-timeout`).
pub fn set_default_timeout(timeout: Duration) {
    DEFAULT_TIMEOUT_MS.store(timeout.as_millis().max(1) as u64, Ordering::Relaxed);
}

/// How long sources and sinks wait for the brokers before they fail.
pub fn default_timeout() -> Duration {
    Duration::from_millis(DEFAULT_TIMEOUT_MS.load(Ordering::Relaxed))
}

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
        let failure = self.last_failure.lock().ok().and_then(|l| l.clone());
        failure.or_else(|| self.last.lock().ok().and_then(|l| l.clone()))
    }
}

impl ClientContext for ErrorContext {
    /// librdkafka's own log is not printed; connection failures are kept as the last error.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) && fac == "FAIL" {
            if let Ok(mut last) = self.last_failure.lock() {
                *last = Some(log_message.to_owned());
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(if reason.is_empty() {
                error.to_string()
            } else {
                reason.to_owned()
            });
        }
    }
}

/// Asks the brokers for `topic`'s metadata until they answer or `timeout` passes, calling
/// `serve` between attempts so librdkafka's queued logs and errors reach the context.
pub(crate) fn wait_for_metadata<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
    mut serve: impl FnMut(),
) -> Result<(), KafkaError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let attempt = left
            .min(Duration::from_millis(500))
            .max(Duration::from_millis(1));
        let result = client.fetch_metadata(Some(topic), attempt);
        serve();
        match result {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
    }
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
