use super::*;

/// A folder with a self-signed certificate (`server.crt`, `server.key`) for 127.0.0.1.
fn folder_with_certificate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(dir.path().join("server.crt"), cert.cert.pem()).unwrap();
    std::fs::write(
        dir.path().join("server.key"),
        cert.signing_key.serialize_pem(),
    )
    .unwrap();
    dir
}

fn load(dir: &tempfile::TempDir, text: &str) -> Result<WebConfig, WebConfigError> {
    let path = dir.path().join("web.yml");
    std::fs::write(&path, text).unwrap();
    WebConfig::load(&path)
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

#[test]
fn a_full_file_loads_with_paths_relative_to_its_folder() {
    let dir = folder_with_certificate();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let config = load(
        &dir,
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             min_version: TLS12\nbasic_auth_users:\n  prometheus: {hash}\n\
             http_server_config:\n  headers: {{X-Frame-Options: deny}}\n"
        ),
    )
    .unwrap();
    assert!(config.tls.is_some());
    assert!(!config.client_cert_required);
    assert_eq!(
        config.headers,
        vec![("X-Frame-Options".to_owned(), "deny".to_owned())]
    );
    assert!(config.allows(Some(&basic("prometheus", "s3cret"))));
    // Remembered: the same header passes again.
    assert!(config.allows(Some(&basic("prometheus", "s3cret"))));
    assert!(!config.allows(Some(&basic("prometheus", "wrong"))));
    assert!(!config.allows(Some(&basic("nobody", "s3cret"))));
    assert!(!config.allows(Some("Bearer abc")));
    assert!(!config.allows(None));
}

#[test]
fn without_users_everyone_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let config = load(&dir, "").unwrap();
    assert!(config.tls.is_none());
    assert!(config.allows(None));
}

#[test]
fn errors_name_the_file_the_field_and_what_is_wrong_never_a_secret() {
    let dir = folder_with_certificate();
    let file = dir.path().join("web.yml").display().to_string();
    let cases = [
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: missing.key\n".to_owned(),
            "tls_server_config.key_file: cannot read",
            "missing.key",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n".to_owned(),
            "tls_server_config.key_file: missing",
            "PEM",
        ),
        (
            format!("basic_auth_users:\n  alice: {}\n", "plain-password-here"),
            "basic_auth_users.alice: not a bcrypt hash",
            "htpasswd",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n"
                .to_owned(),
            "tls_server_config.client_ca_file: missing",
            "RequireAndVerifyClientCert needs it",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             min_version: TLS10\n"
                .to_owned(),
            "tls_server_config.min_version: TLS10 is not supported",
            "TLS12 or TLS13",
        ),
        (
            "http_server_config:\n  headers: {Set-Cookie: a}\n".to_owned(),
            "http_server_config.headers.Set-Cookie: this header cannot be set",
            "X-Frame-Options",
        ),
        (
            "basic_auth_user:\n  alice: x\n".to_owned(),
            "(file): unknown field `basic_auth_user`",
            "basic_auth_users",
        ),
        (
            "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n".to_owned(),
            "tls_server_config.cert_file:",
            "no certificate",
        ),
    ];
    for (text, field, hint) in cases {
        let error = load(&dir, &text).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("web config file {file}: {field}")),
            "{error}"
        );
        assert!(error.contains(hint), "{error}");
        assert!(!error.contains("plain-password-here"), "{error}");
        assert!(!error.contains("PRIVATE KEY-----\n"), "{error}");
    }
    let missing = WebConfig::load(&dir.path().join("nope.yml")).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("nope.yml: (file): cannot read it: No such file"),
        "{missing}"
    );
}

#[test]
fn a_hash_that_is_not_bcrypt_is_refused_and_a_valid_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("pw", 4).unwrap();
    assert!(load(&dir, &format!("basic_auth_users:\n  a: '{hash}'\n")).is_ok());
    let error = load(&dir, "basic_auth_users:\n  a: '$1$abc$def'\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("basic_auth_users.a: not a bcrypt hash"),
        "{error}"
    );
    assert!(!error.contains("$1$abc$def"), "{error}");
}
