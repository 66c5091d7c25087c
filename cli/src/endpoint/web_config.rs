//! `--web-config-file`: TLS, client certificates, basic auth and extra headers of the HTTP
//! endpoint, in the file format of the Prometheus exporter toolkit (node_exporter's
//! `--web.config.file`), so one file serves both (`docs/operations.md`).
//!
//! The file is read and checked whole before the job starts: a field that does not parse, a
//! certificate or key that cannot be read, or a password hash that is not bcrypt is an error
//! naming the file, the field and what is wrong. No error quotes a value from the file (hashes
//! and keys stay out of logs). Paths in it are relative to the file's folder, as in the toolkit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// Headers `http_server_config.headers` may set (the toolkit's list).
pub const ALLOWED_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// Successful logins remembered, so that a client polling every second (the live view) does
/// not pay for a bcrypt verification each time.
const REMEMBERED_LOGINS: usize = 64;

/// A web configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("web config file {}: {field}: {problem}", file.display())]
pub struct WebConfigError {
    /// The file.
    pub file: PathBuf,
    /// The field, as a path (`tls_server_config.key_file`), or `(file)` for the file itself.
    pub field: String,
    /// What is wrong and what is expected.
    pub problem: String,
}

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFields>,
    #[serde(default)]
    http_server_config: Option<HttpFields>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFields {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<serde_yaml_ng::Value>,
    curve_preferences: Option<serde_yaml_ng::Value>,
    prefer_server_cipher_suites: Option<bool>,
    client_allowed_sans: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFields {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// What the endpoint enforces: TLS, basic auth, extra headers. [`WebConfig::default`] is
/// plain HTTP without authentication.
#[derive(Default)]
pub struct WebConfig {
    /// TLS on every connection, when set.
    pub tls: Option<Arc<ServerConfig>>,
    /// Whether clients must present a certificate signed by `client_ca_file`.
    pub client_cert_required: bool,
    /// User name → bcrypt hash; empty: no authentication.
    users: BTreeMap<String, String>,
    /// Headers added to every answer.
    pub headers: Vec<(String, String)>,
    /// `Authorization` values that passed, to skip bcrypt next time.
    remembered: Mutex<Vec<String>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("client_cert_required", &self.client_cert_required)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    /// [`WebConfigError`] naming the field and what is wrong with it.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let fail = |field: &str, problem: String| WebConfigError {
            file: path.to_path_buf(),
            field: field.to_owned(),
            problem,
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            fail(
                "(file)",
                format!("cannot read it: {}", crate::error::os_reason(&e)),
            )
        })?;
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(&text).map_err(|e| fail("(file)", yaml_problem(&e)))?
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut config = WebConfig::default();
        if let Some(tls) = &file.tls_server_config {
            let (server, required) = tls_config(tls, &dir, &fail)?;
            config.tls = Some(Arc::new(server));
            config.client_cert_required = required;
        }
        for (user, hash) in file.basic_auth_users.unwrap_or_default() {
            let field = format!("basic_auth_users.{user}");
            if user.is_empty() || user.contains(':') {
                return Err(fail(
                    "basic_auth_users",
                    "a user name is empty or holds ':'; expected names without ':'".into(),
                ));
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(fail(
                    &field,
                    "not a bcrypt hash; expected one as `htpasswd -nBC 10 \"\" | tr -d ':\\n'` \
                     writes it ($2y$10$ followed by 53 characters)"
                        .into(),
                ));
            }
            config.users.insert(user, hash);
        }
        if let Some(http) = file.http_server_config {
            // `http2`: accepted for the toolkit's sake; the endpoint speaks HTTP/1.1.
            let _ = http.http2;
            for (name, value) in http.headers.unwrap_or_default() {
                let field = format!("http_server_config.headers.{name}");
                let Some(known) = ALLOWED_HEADERS
                    .iter()
                    .find(|h| h.eq_ignore_ascii_case(&name))
                else {
                    return Err(fail(
                        &field,
                        format!(
                            "this header cannot be set; expected one of {}",
                            ALLOWED_HEADERS.join(", ")
                        ),
                    ));
                };
                if value.chars().any(|c| c.is_control()) {
                    return Err(fail(&field, "the value holds a control character".into()));
                }
                config.headers.push(((*known).to_owned(), value));
            }
        }
        Ok(config)
    }

    /// Whether the `Authorization` header value `authorization` names a user of the file with
    /// the right password.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some(value) = authorization.map(str::trim) else {
            return false;
        };
        let remembered = || {
            self.remembered
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if remembered().iter().any(|v| v == value) {
            return true;
        }
        let Some((user, password)) = basic_credentials(value) else {
            return false;
        };
        let allowed = match self.users.get(&user) {
            Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
            None => {
                // As long as for a known user, so that names cannot be told apart by time.
                if let Some(hash) = self.users.values().next() {
                    let _ = bcrypt::verify(&password, hash);
                }
                false
            }
        };
        if allowed {
            let mut remembered = remembered();
            if remembered.len() >= REMEMBERED_LOGINS {
                remembered.clear();
            }
            remembered.push(value.to_owned());
        }
        allowed
    }
}

/// User and password of `Basic <base64(user:password)>`.
fn basic_credentials(value: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

type Fail<'a> = dyn Fn(&str, String) -> WebConfigError + 'a;

/// The rustls configuration of `tls_server_config`, and whether client certificates are
/// required.
fn tls_config(
    tls: &TlsFields,
    dir: &Path,
    fail: &Fail<'_>,
) -> Result<(ServerConfig, bool), WebConfigError> {
    let field = |name: &str| format!("tls_server_config.{name}");
    for (name, set) in [
        ("cipher_suites", tls.cipher_suites.is_some()),
        ("curve_preferences", tls.curve_preferences.is_some()),
        ("client_allowed_sans", tls.client_allowed_sans.is_some()),
    ] {
        if set {
            return Err(fail(
                &field(name),
                "not supported by Tidemark (its TLS library offers only modern cipher suites \
                 and curves); remove it"
                    .into(),
            ));
        }
    }
    let _ = tls.prefer_server_cipher_suites;
    let required = |name: &str, value: &Option<String>| match value.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => Ok(dir.join(v)),
        _ => Err(fail(
            &field(name),
            "missing; expected the path of a PEM file (relative to this file's folder)".into(),
        )),
    };
    let cert_path = required("cert_file", &tls.cert_file)?;
    let key_path = required("key_file", &tls.key_file)?;
    let certs = read_certs(&cert_path).map_err(|p| fail(&field("cert_file"), p))?;
    let key = read_key(&key_path).map_err(|p| fail(&field("key_file"), p))?;
    let versions = versions(tls, fail)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| fail(&field("min_version"), e.to_string()))?;
    let auth = tls.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let (verify, require) = match auth {
        "NoClientCert" => (false, false),
        "VerifyClientCertIfGiven" => (true, false),
        "RequireAndVerifyClientCert" => (true, true),
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(fail(
                &field("client_auth_type"),
                format!(
                    "{auth} (a certificate that is not verified) is not supported; expected \
                     NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
                ),
            ))
        }
        other => {
            return Err(fail(
                &field("client_auth_type"),
                format!(
                    "unknown value \"{other}\"; expected NoClientCert, VerifyClientCertIfGiven \
                     or RequireAndVerifyClientCert"
                ),
            ))
        }
    };
    let builder = if verify {
        let ca_path =
            required("client_ca_file", &tls.client_ca_file).map_err(|e| WebConfigError {
                problem: format!("{}; client_auth_type {auth} needs it", e.problem),
                ..e
            })?;
        let mut roots = RootCertStore::empty();
        for cert in read_certs(&ca_path).map_err(|p| fail(&field("client_ca_file"), p))? {
            roots.add(cert).map_err(|e| {
                fail(
                    &field("client_ca_file"),
                    format!("unusable certificate: {e}"),
                )
            })?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if require {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        let verifier = verifier
            .build()
            .map_err(|e| fail(&field("client_ca_file"), e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| fail(&field("key_file"), format!("does not suit cert_file: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, require))
}

/// The TLS versions from `min_version` to `max_version` (TLS12 and TLS13 only).
fn versions(
    tls: &TlsFields,
    fail: &Fail<'_>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, WebConfigError> {
    let parse = |name: &str, value: &Option<String>, default: u8| match value.as_deref() {
        None => Ok(default),
        Some("TLS12") => Ok(12),
        Some("TLS13") => Ok(13),
        Some(v @ ("TLS10" | "TLS11")) => Err(fail(
            &format!("tls_server_config.{name}"),
            format!("{v} is not supported (it is insecure); expected TLS12 or TLS13"),
        )),
        Some(other) => Err(fail(
            &format!("tls_server_config.{name}"),
            format!("unknown version \"{other}\"; expected TLS12 or TLS13"),
        )),
    };
    let min = parse("min_version", &tls.min_version, 12)?;
    let max = parse("max_version", &tls.max_version, 13)?;
    if min > max {
        return Err(fail(
            "tls_server_config.min_version",
            "is above max_version".into(),
        ));
    }
    let mut versions = Vec::new();
    if min <= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    Ok(versions)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: holds no certificate; expected PEM (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        format!(
            "{}: holds no private key; expected PEM (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        )
    })
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| {
        format!(
            "cannot read {}: {}",
            path.display(),
            crate::error::os_reason(&e)
        )
    })
}

/// A YAML error without the text around it (the file may hold secrets): the message and
/// where.
fn yaml_problem(error: &serde_yaml_ng::Error) -> String {
    let mut message = error.to_string();
    // A wrong type or value is quoted between backticks: hidden (it may be a secret). Unknown
    // fields, also quoted so, are the file's own keys: shown.
    if message.contains("invalid type") || message.contains("invalid value") {
        let parts: Vec<&str> = message.split('`').collect();
        message = parts
            .iter()
            .enumerate()
            .map(|(i, part)| if i % 2 == 1 { "(value hidden)" } else { part })
            .collect();
    }
    match error.location() {
        Some(at) if !message.contains(" at line ") => {
            format!("{message} at line {} column {}", at.line(), at.column())
        }
        _ => message,
    }
}

#[cfg(test)]
mod tests;
