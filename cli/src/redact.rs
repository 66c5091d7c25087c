//! Secrets are never shown: a setting whose key contains `password`, `secret`, `token` or
//! `credential` (any case, e.g. Kafka's `sasl.password`) is printed as `***` by `plan`,
//! `validate`, the report, `/api/v1/job`, logs and error messages. This module is the one rule;
//! everything that prints settings calls it.

use serde_json::Value;

/// What a secret is printed as.
pub const REDACTED: &str = "***";

/// The words that make a key secret, matched anywhere in the key, ignoring case.
pub const SECRET_WORDS: [&str; 4] = ["password", "secret", "token", "credential"];

/// Whether a setting with this key holds a secret.
///
/// ```
/// use tidemark_cli::redact::is_secret_key;
/// assert!(is_secret_key("sasl.password"));
/// assert!(is_secret_key("API_Token"));
/// assert!(!is_secret_key("bootstrap.servers"));
/// ```
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| key.contains(w))
}

/// `value`, or `***` when `key` is secret.
pub fn redact_value<'a>(key: &str, value: &'a str) -> &'a str {
    if is_secret_key(key) {
        REDACTED
    } else {
        value
    }
}

/// Replaces, at any depth, the value of every secret key of `value`'s objects with `"***"`
/// (whole sub-objects and lists included).
///
/// ```
/// use serde_json::json;
/// let mut config = json!({"brokers": "b:9092", "sasl": {"password": "hunter2"}, "Token": [1]});
/// tidemark_cli::redact::redact_json(&mut config);
/// assert_eq!(config, json!({"brokers": "b:9092", "sasl": {"password": "***"}, "Token": "***"}));
/// ```
pub fn redact_json(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if is_secret_key(k) {
                    *v = Value::String(REDACTED.to_owned());
                } else {
                    redact_json(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        _ => {}
    }
}

/// A redacted copy of `value`; see [`redact_json`].
pub fn redacted_json(value: &Value) -> Value {
    let mut v = value.clone();
    redact_json(&mut v);
    v
}

/// Whether any key along `path` is secret (then anything said about its value is hidden).
pub fn path_is_secret<'a>(path: impl IntoIterator<Item = &'a str>) -> bool {
    path.into_iter().any(is_secret_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_in_any_case_and_position() {
        for k in [
            "password",
            "sasl.password",
            "SASL_PASSWORD",
            "clientSecret",
            "token",
            "auth_token_file",
            "Credentials",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in ["pass", "count", "path", "tok", "brokers"] {
            assert!(!is_secret_key(k), "{k}");
        }
        assert_eq!(redact_value("db.password", "hunter2"), "***");
        assert_eq!(redact_value("db.user", "alice"), "alice");
        assert!(path_is_secret(["sasl", "password"]));
        assert!(!path_is_secret(["sasl", "mechanism"]));
    }
}
