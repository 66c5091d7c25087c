//! A client of the Schema Registry's REST API (Confluent's, and the compatible ones of
//! Redpanda, Karapace and Apicurio): schemas by id (cached), registering and looking up a
//! schema under a subject, a subject's versions for Protobuf imports.
//!
//! Every call that fails for a reason that may pass (no connection, a timeout, HTTP 5xx, 429)
//! is retried with exponential backoff (100 ms doubling to 2 s) until the client's timeout
//! (`--kafka-timeout`), then it is a [`RegistryError::Unreachable`] naming the URL and the last
//! status or error. An answer that says the thing is not there (HTTP 404) is
//! [`RegistryError::NotFound`] at once. The basic-auth password appears in no message and no
//! `Debug` output.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde::Deserialize;
use serde_json::json;

/// The `schema_registry:` setting of a source or sink.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The registry's base URL (`http://host:8081`).
    pub url: String,
    /// HTTP basic authentication.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
}

impl fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("url", &self.url)
            .field("basic_auth", &self.basic_auth)
            .finish()
    }
}

/// `basic_auth: {username, password}`.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// The user name.
    pub username: String,
    /// The password (never printed).
    pub password: String,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

impl RegistryConfig {
    /// Checks the URL's form: `http://` or `https://`, a host.
    pub fn check(&self) -> Result<(), String> {
        let rest = self
            .url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("https://"));
        match rest {
            Some(host) if !host.trim_matches('/').is_empty() => Ok(()),
            _ => Err(format!(
                "expected an http:// or https:// URL, found \"{}\"",
                self.url
            )),
        }
    }
}

/// What kind of schema the registry holds (`schemaType`; Avro when absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaKind {
    /// An Avro schema (JSON text).
    #[default]
    Avro,
    /// A `.proto` file.
    Protobuf,
    /// A JSON schema (not read by Tidemark).
    Json,
}

/// A reference of a schema to another one (a Protobuf import): the import's name, and the
/// subject and version holding it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Reference {
    /// The name it is imported by (`other.proto`).
    pub name: String,
    /// The subject holding it.
    pub subject: String,
    /// Its version under the subject.
    pub version: i64,
}

/// A schema as the registry returns it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RegisteredSchema {
    /// The schema's text.
    pub schema: String,
    /// Its kind.
    #[serde(default, rename = "schemaType")]
    pub kind: SchemaKind,
    /// Schemas it imports.
    #[serde(default)]
    pub references: Vec<Reference>,
}

/// Why a registry call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The registry did not answer usefully within the timeout.
    #[error("schema registry {url} did not answer within {waited:?}: {detail}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// How long the client tried.
        waited: Duration,
        /// The last HTTP status or error.
        detail: String,
    },
    /// The registry answered that it does not have it (HTTP 404).
    #[error("schema registry {url}: {what} not found ({detail})")]
    NotFound {
        /// The URL asked.
        url: String,
        /// What was asked for (`schema id 7`).
        what: String,
        /// The registry's message.
        detail: String,
    },
    /// The registry refused the request, or answered something that is not its API.
    #[error("schema registry {url}: {detail}")]
    Refused {
        /// The URL asked.
        url: String,
        /// The status and message.
        detail: String,
    },
}

/// A Schema Registry client shared by the subtasks of a vertex (and by the vertices of a job
/// that name the same registry). Schemas fetched by id are kept for the life of the job.
pub struct Registry {
    base: String,
    authorization: Option<String>,
    agent: ureq::Agent,
    timeout: Duration,
    by_id: Mutex<HashMap<u32, Arc<RegisteredSchema>>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.base)
            .field("basic_auth", &self.authorization.as_ref().map(|_| "***"))
            .finish()
    }
}

/// One attempt's failure: worth trying again, or final.
enum Attempt {
    Retry(String),
    Final(RegistryError),
}

impl Registry {
    /// A client of the registry `config`; calls give up after `timeout`.
    pub fn new(config: &RegistryConfig, timeout: Duration) -> Registry {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // One attempt never takes longer than the whole wait.
            .timeout_global(Some(
                timeout.clamp(Duration::from_millis(100), Duration::from_secs(10)),
            ))
            .build()
            .new_agent();
        let authorization = config.basic_auth.as_ref().map(|a| {
            let token = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", a.username, a.password));
            format!("Basic {token}")
        });
        Registry {
            base: config.url.trim_end_matches('/').to_owned(),
            authorization,
            agent,
            timeout,
            by_id: Mutex::new(HashMap::new()),
        }
    }

    /// The registry's base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Checks that the registry answers (`GET /subjects`).
    pub fn check(&self) -> Result<(), RegistryError> {
        self.call("GET", "/subjects", None, "the subject list")
            .map(|_| ())
    }

    /// The schema with id `id` (`GET /schemas/ids/{id}`), fetched once and then kept.
    pub fn schema(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(s) = self
            .by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return Ok(s.clone());
        }
        let path = format!("/schemas/ids/{id}");
        let body = self.call("GET", &path, None, &format!("schema id {id}"))?;
        let schema: RegisteredSchema = self.parse(&path, &body)?;
        let schema = Arc::new(schema);
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, schema.clone());
        Ok(schema)
    }

    /// The schema of `subject` at `version` (a Protobuf import).
    pub fn version(&self, subject: &str, version: i64) -> Result<RegisteredSchema, RegistryError> {
        let v = if version < 0 {
            "latest".to_owned()
        } else {
            version.to_string()
        };
        let path = format!("/subjects/{}/versions/{v}", encode_path(subject));
        let body = self.call(
            "GET",
            &path,
            None,
            &format!("subject \"{subject}\" version {v}"),
        )?;
        self.parse(&path, &body)
    }

    /// Registers `schema` under `subject` (`POST /subjects/{subject}/versions`); the registry
    /// answers with the id it has (a schema registered before keeps its id).
    pub fn register(
        &self,
        subject: &str,
        schema: &str,
        kind: SchemaKind,
    ) -> Result<u32, RegistryError> {
        let path = format!("/subjects/{}/versions", encode_path(subject));
        let body = self.call(
            "POST",
            &path,
            Some(schema_body(schema, kind)),
            &format!("subject \"{subject}\""),
        )?;
        self.id_of(&path, &body)
    }

    /// The id of `schema` registered under `subject` (`POST /subjects/{subject}`); not
    /// registered is [`RegistryError::NotFound`].
    pub fn lookup(
        &self,
        subject: &str,
        schema: &str,
        kind: SchemaKind,
    ) -> Result<u32, RegistryError> {
        let path = format!("/subjects/{}", encode_path(subject));
        let body = self.call(
            "POST",
            &path,
            Some(schema_body(schema, kind)),
            &format!("the schema under subject \"{subject}\""),
        )?;
        self.id_of(&path, &body)
    }

    fn id_of(&self, path: &str, body: &str) -> Result<u32, RegistryError> {
        #[derive(Deserialize)]
        struct Id {
            id: u32,
        }
        self.parse::<Id>(path, body).map(|i| i.id)
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &str,
    ) -> Result<T, RegistryError> {
        serde_json::from_str(body).map_err(|e| RegistryError::Refused {
            url: format!("{}{path}", self.base),
            detail: format!("unexpected answer ({e}): {}", shorten(body)),
        })
    }

    /// Makes one request, retrying what may pass until the timeout; returns the body of a 2xx
    /// answer.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
        what: &str,
    ) -> Result<String, RegistryError> {
        let url = format!("{}{path}", self.base);
        let start = Instant::now();
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.attempt(method, &url, body.as_ref(), what) {
                Ok(text) => return Ok(text),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Retry(detail)) => {
                    let left = self.timeout.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Err(RegistryError::Unreachable {
                            url,
                            waited: self.timeout,
                            detail,
                        });
                    }
                    std::thread::sleep(backoff.min(left));
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    fn attempt(
        &self,
        method: &str,
        url: &str,
        body: Option<&serde_json::Value>,
        what: &str,
    ) -> Result<String, Attempt> {
        let sent = if method == "POST" {
            let mut req = self
                .agent
                .post(url)
                .header("Content-Type", "application/vnd.schemaregistry.v1+json");
            if let Some(a) = &self.authorization {
                req = req.header("Authorization", a);
            }
            req.send_json(body.unwrap_or(&serde_json::Value::Null))
        } else {
            let mut req = self.agent.get(url);
            if let Some(a) = &self.authorization {
                req = req.header("Authorization", a);
            }
            req.call()
        };
        let mut response = sent.map_err(|e| Attempt::Retry(e.to_string()))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| Attempt::Retry(format!("HTTP {status}, body not read: {e}")))?;
        match status {
            200..=299 => Ok(text),
            404 => Err(Attempt::Final(RegistryError::NotFound {
                url: url.to_owned(),
                what: what.to_owned(),
                detail: format!("HTTP 404: {}", message_of(&text)),
            })),
            408 | 429 | 500..=599 => Err(Attempt::Retry(format!(
                "HTTP {status}: {}",
                message_of(&text)
            ))),
            _ => Err(Attempt::Final(RegistryError::Refused {
                url: url.to_owned(),
                detail: format!("HTTP {status}: {}", message_of(&text)),
            })),
        }
    }
}

fn schema_body(schema: &str, kind: SchemaKind) -> serde_json::Value {
    match kind {
        SchemaKind::Avro => json!({ "schema": schema }),
        SchemaKind::Protobuf => json!({ "schema": schema, "schemaType": "PROTOBUF" }),
        SchemaKind::Json => json!({ "schema": schema, "schemaType": "JSON" }),
    }
}

/// The registry's `message` of an error body, else the body (shortened).
fn message_of(body: &str) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        message: String,
    }
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(e) => e.message,
        Err(_) => shorten(body),
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 200;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A subject as one path segment (subjects may hold `/`, as Protobuf import names do).
fn encode_path(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_not_in_debug_output() {
        let config = RegistryConfig {
            url: "http://r:8081".into(),
            basic_auth: Some(BasicAuth {
                username: "svc".into(),
                password: "hunter2".into(),
            }),
        };
        let shown = format!(
            "{config:?} {:?}",
            Registry::new(&config, Duration::from_secs(1))
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("svc"), "{shown}");
    }

    #[test]
    fn urls_are_checked_and_subjects_encoded() {
        let url = |u: &str| {
            RegistryConfig {
                url: u.into(),
                basic_auth: None,
            }
            .check()
        };
        assert!(url("http://localhost:8081").is_ok());
        assert!(url("https://sr.example.com/").is_ok());
        assert_eq!(
            url("localhost:8081").unwrap_err(),
            "expected an http:// or https:// URL, found \"localhost:8081\""
        );
        assert_eq!(
            encode_path("google/protobuf/timestamp.proto"),
            "google%2Fprotobuf%2Ftimestamp.proto"
        );
    }

    /// A registry that answers each connection with the next of `replies` (status, body).
    fn serve(replies: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let mut requests = Vec::new();
            for (status, body) in replies {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(&stream);
                let mut head = String::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let mut sent = vec![0; length];
                reader.read_exact(&mut sent).unwrap();
                requests.push(format!("{head}\r\n{}", String::from_utf8_lossy(&sent)));
                write!(
                    &stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
            requests
        });
        (url, handle)
    }

    #[test]
    fn server_errors_are_retried_and_schemas_kept() {
        let (url, server) = serve(vec![
            (503, r#"{"error_code":50301,"message":"busy"}"#),
            (200, r#"{"schema":"\"string\""}"#),
            (
                404,
                r#"{"error_code":40403,"message":"Schema 9 not found"}"#,
            ),
            (200, r#"{"id":7}"#),
        ]);
        let config = RegistryConfig {
            url,
            basic_auth: Some(BasicAuth {
                username: "svc".into(),
                password: "pw".into(),
            }),
        };
        let registry = Registry::new(&config, Duration::from_secs(10));
        let schema = registry.schema(1).unwrap();
        assert_eq!(
            (schema.schema.as_str(), schema.kind),
            ("\"string\"", SchemaKind::Avro)
        );
        // Kept: asked again, the server is not asked.
        assert_eq!(registry.schema(1).unwrap(), schema);
        match registry.schema(9).unwrap_err() {
            RegistryError::NotFound { what, detail, .. } => {
                assert_eq!(what, "schema id 9");
                assert_eq!(detail, "HTTP 404: Schema 9 not found");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            registry
                .register("t-value", "\"long\"", SchemaKind::Avro)
                .unwrap(),
            7
        );
        let requests = server.join().unwrap();
        assert!(
            requests[0].starts_with("GET /schemas/ids/1 "),
            "{}",
            requests[0]
        );
        // svc:pw
        assert!(
            requests.iter().all(|r| r.contains("Basic c3ZjOnB3")),
            "{requests:?}"
        );
        assert!(requests[3].starts_with("POST /subjects/t-value/versions "));
        let body = requests[3].split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(body).unwrap(),
            json!({"schema": "\"long\""}),
            "{}",
            requests[3]
        );
    }

    #[test]
    fn a_closed_port_is_retried_until_the_timeout_and_named() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let registry = Registry::new(
            &RegistryConfig {
                url: format!("http://127.0.0.1:{port}"),
                basic_auth: None,
            },
            Duration::from_millis(500),
        );
        match registry.schema(1).unwrap_err() {
            RegistryError::Unreachable { url, .. } => {
                assert_eq!(url, format!("http://127.0.0.1:{port}/schemas/ids/1"))
            }
            other => panic!("{other:?}"),
        }
    }
}
