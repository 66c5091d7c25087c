//! Avro and Protobuf in and out of Kafka with a Schema Registry, through the real binary
//! (`docs/formats.md`): the spec's worked cases on librdkafka's mock cluster and on tansu, with
//! the test data written and read by Confluent's own serialisers (`formats/confluent.py`) and a
//! stand-in registry (`formats/registry.py`).
#![cfg(unix)]

mod common;
mod formats;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::brokers::{Broker, Kind as BrokerKind};
use common::{Proc, TempDir};
use formats::{confluent, confluent_with, require_python, Registry};

/// The longest a test waits for output.
const DEADLINE: Duration = Duration::from_secs(120);

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until `path` has at least `n` lines (failing with the job's stderr after the
/// deadline); returns them.
fn wait_for_lines(job: &mut Proc, path: &Path, n: usize) -> Vec<String> {
    let started = Instant::now();
    loop {
        let l = lines(path);
        if l.len() >= n {
            return l;
        }
        assert!(
            !job.has_exited(),
            "the job ended with {} of {n} lines in {}:\n{}",
            l.len(),
            path.display(),
            job.stderr()
        );
        assert!(
            started.elapsed() < DEADLINE,
            "{} of {n} lines in {} after {DEADLINE:?}:\n{}",
            l.len(),
            path.display(),
            job.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(dir: &TempDir, job: &str) -> Proc {
    let mut p = Proc::spawn(
        dir.path(),
        [
            "run",
            job,
            "--metrics-addr",
            "127.0.0.1:0",
            "--kafka-timeout",
            "10s",
        ],
    );
    p.metrics_addr();
    p
}

/// The reference of the worked case's windows: per customer and 10 s window of `created_at`,
/// the paid orders, their items and their amounts' total.
fn reference(events: &[serde_json::Value]) -> BTreeMap<(String, i64), (i64, i64, f64)> {
    let mut windows = BTreeMap::new();
    for e in events.iter().filter(|e| e["status"] == "PAID") {
        let start = e["created_at"].as_i64().unwrap().div_euclid(10_000) * 10_000;
        let w = windows
            .entry((e["customer"].as_str().unwrap().to_owned(), start))
            .or_insert((0, 0, 0.0));
        w.0 += 1;
        w.1 += e["quantity"].as_i64().unwrap();
        w.2 += e["amount"].as_str().unwrap().parse::<f64>().unwrap();
    }
    windows
}

/// The spec's worked case (checkpoints every 200 ms flush the file sinks): a topic written by Confluent's `AvroSerializer` in two schema
/// versions (the second adds a field with a default), with a nested record, a nullable union,
/// an enum, an array, a map, a decimal and a timestamp-millis, and two bad messages. One job
/// reads it three ways:
/// - as written (every version with its own writer schema) into JSON lines, compared with the
///   events the mapping gives, field for field and in order;
/// - resolved to `reader.avsc` (a field dropped, one filled with its default);
/// - filtered and windowed in event time, written as Avro with its own schema, which
///   Confluent's `AvroDeserializer` reads; the values equal the reference computed here.
///
/// The message without the magic byte, one that does not decode with its schema and one with
/// an unknown id go to the dead letter with their offsets, are counted as malformed, and the
/// job goes on.
fn worked_case(kind: BrokerKind) {
    require_python();
    let broker = Broker::start(kind, &[("orders", 1), ("out", 1)]);
    let bootstrap = broker.bootstrap();
    let registry = Registry::start(None);
    let url = registry.url();
    let dir = TempDir::new("avro-worked-case");
    confluent(&["schemas", dir.path().to_str().unwrap()]);
    let written: serde_json::Value = serde_json::from_str(&confluent(&[
        "produce-avro",
        bootstrap,
        &url,
        "orders",
        "--bad",
    ]))
    .unwrap();
    let events = written["events"].as_array().unwrap();
    dir.write(
        "job.yaml",
        &format!(
            r#"name: avro-worked-case
checkpoint: {{interval: 200ms}}
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [orders]
    group: windows
    format: avro
    schema_registry: {{url: "{url}"}}
    timestamp: created_at
    on_error: {{dead_letter: bad.jsonl}}
    watermarks: {{max_out_of_orderness: 0s}}
    properties: {{session.timeout.ms: 6000}}
  as_written:
    type: kafka
    brokers: {bootstrap}
    topics: [orders]
    group: as-written
    format: avro
    schema_registry: {{url: "{url}"}}
    on_error: skip
    properties: {{session.timeout.ms: 6000}}
  resolved:
    type: kafka
    brokers: {bootstrap}
    topics: [orders]
    group: resolved
    format: avro
    schema_registry: {{url: "{url}"}}
    reader_schema: reader.avsc
    on_error: skip
    properties: {{session.timeout.ms: 6000}}
operators:
  paid:
    type: filter
    input: orders
    where: 'status == "PAID"'
  per_customer:
    type: window
    input: paid
    key: customer
    size: 10s
    time: event
    aggregates: {{orders: count, items: {{sum: quantity}}, total: {{sum: 'double(amount)'}}}}
sinks:
  out:
    type: kafka
    input: per_customer
    brokers: {bootstrap}
    topic: out
    format: avro
    schema: out.avsc
    schema_registry: {{url: "{url}"}}
  written:
    type: file
    input: as_written
    path: written.jsonl
  read_resolved:
    type: file
    input: resolved
    path: resolved.jsonl
"#
        ),
    );
    let mut job = run(&dir, "job.yaml");
    let n = events.len() + 1; // and the far-future order
    let as_written = wait_for_lines(&mut job, &dir.join("written.jsonl"), n);
    // Compact JSON, fields in the schema's order.
    let text = |name: &str| -> Vec<String> {
        written[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(as_written[..events.len()], text("events_text")[..]);
    let resolved = wait_for_lines(&mut job, &dir.join("resolved.jsonl"), n);
    assert_eq!(resolved[..events.len()], text("resolved_text")[..]);
    assert!(resolved.iter().all(|l| !l.contains("\"tags\"")));

    let expected = reference(events);
    let read = confluent(&[
        "consume-avro",
        bootstrap,
        &url,
        "out",
        &expected.len().to_string(),
    ]);
    let mut got = BTreeMap::new();
    for line in read.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            v["window_end"].as_i64().unwrap() - v["window_start"].as_i64().unwrap(),
            10_000
        );
        got.insert(
            (
                v["key"].as_str().unwrap().to_owned(),
                v["window_start"].as_i64().unwrap(),
            ),
            (
                v["orders"].as_i64().unwrap(),
                v["items"].as_i64().unwrap(),
                v["total"].as_f64().unwrap(),
            ),
        );
    }
    assert_eq!(got, expected);

    let dead = lines(&dir.join("bad.jsonl"));
    let offsets: Vec<i64> = dead
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["vertex"], "orders", "{l}");
            assert_eq!(v["record"]["topic"], "orders", "{l}");
            assert_eq!(v["record"]["partition"], 0, "{l}");
            v["record"]["offset"].as_i64().unwrap()
        })
        .collect();
    let bad: Vec<i64> = written["bad_offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_i64().unwrap())
        .collect();
    assert_eq!(offsets, bad);
    let reasons = [
        "not in the Confluent wire format: the first byte is 0x7b, expected 0x00".to_owned(),
        "value does not decode with schema id 1: ".to_owned(),
        format!("schema id 999 is not in the schema registry {url}"),
    ];
    for ((line, offset), reason) in dead.iter().zip(&bad).zip(&reasons) {
        assert!(
            line.contains(&format!("message at orders/0 offset {offset}: {reason}")),
            "{line}"
        );
    }
    let malformed = |m: &common::Metrics| {
        m.sum("tidemark_records_dropped_total", |l| {
            l.get("reason") == Some("malformed") && l.get("operator_id") == Some("orders")
        })
    };
    let metrics = common::scrape_until(job.metrics_addr(), "3 malformed messages counted", |m| {
        malformed(m) >= 3.0
    });
    assert_eq!(malformed(&metrics), 3.0);
    // Each schema id is fetched once per source, not per message.
    let stats = registry.stats();
    for id in [1, 2] {
        let asked = stats[format!("GET /schemas/ids/{id}")]
            .as_u64()
            .unwrap_or(0);
        assert!(
            (1..=3).contains(&asked),
            "schema {id} asked {asked} times: {stats}"
        );
    }
    job.terminate();
    job.wait();
}

#[test]
fn worked_case_on_the_mock_cluster() {
    worked_case(BrokerKind::Mock);
}

#[test]
fn worked_case_on_tansu() {
    worked_case(BrokerKind::Tansu);
}

/// A registry that does not answer at start: the job fails after `--kafka-timeout`, naming
/// the URL, with exit 1.
#[test]
fn a_stopped_registry_fails_the_start_naming_the_url() {
    let broker = Broker::start(BrokerKind::Mock, &[("orders", 1)]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = TempDir::new("avro-no-registry");
    dir.write(
        "job.yaml",
        &format!(
            "name: no-registry
sources:
  orders:
    type: kafka
    brokers: {}
    topics: [orders]
    format: avro
    schema_registry: {{url: 'http://127.0.0.1:{port}'}}
sinks:
  out:
    type: discard
    input: orders
",
            broker.bootstrap()
        ),
    );
    let started = Instant::now();
    let out = common::tidemark(
        dir.path(),
        [
            "run",
            "job.yaml",
            "--kafka-timeout",
            "2s",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(
        out.stderr.contains(&format!(
            "kafka source \"orders\": schema registry http://127.0.0.1:{port}/subjects did not answer within 2s"
        )),
        "{}",
        out.stderr
    );
}

/// `validate` refuses bad format settings with the file, line and column and exit 2, before
/// any broker or registry is asked.
#[test]
fn validate_refuses_bad_format_settings_at_their_line() {
    let dir = TempDir::new("avro-validate");
    dir.write(
        "bad.avsc",
        r#"{"type":"record","name":"X","fields":[{"name":"a","type":"lng"}]}"#,
    );
    dir.write(
        "default.avsc",
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}"#,
    );
    dir.write(
        "a.proto",
        "syntax = \"proto3\";\nmessage A { int64 x = 1; }\n",
    );
    let source = |settings: &str| {
        format!(
            "name: bad
sources:
  orders:
    type: kafka
    brokers: 127.0.0.1:1
    topics: [in]
{settings}sinks:
  out:
    type: discard
    input: orders
"
        )
    };
    let cases = [
        (
            source("    format: xml\n"),
            "7:5",
            "format: unknown value `xml`, expected one of `json`, `text`, `avro`, `protobuf`",
        ),
        (
            source("    format: avro\n"),
            "7:5",
            "format: avro needs a schema: schema_registry: {url: …} for messages in the \
             Confluent wire format, or schema: FILE for plain messages",
        ),
        (
            source("    format: avro\n    schema: bad.avsc\n"),
            "8:5",
            "schema: ./bad.avsc: Unknown primitive type: lng",
        ),
        (
            source(
                "    format: avro\n    schema_registry: {url: 'http://127.0.0.1:1'}\n    reader_schema: default.avsc\n",
            ),
            "9:5",
            "reader_schema: ./default.avsc: `default`'s value type of field `a` in `R` must be a `\"int\"`",
        ),
        (
            source("    format: protobuf\n    schema: a.proto\n"),
            "3:3",
            "message: format: protobuf with schema: FILE.proto needs message: pkg.Name",
        ),
        (
            source("    format: protobuf\n    schema: a.proto\n    message: B\n"),
            "9:5",
            "message: no message `B` in the schema (it has A)",
        ),
        (
            source("    schema: a.proto\n"),
            "7:5",
            "schema: applies to format: avro or format: protobuf only",
        ),
        (
            source("    format: avro\n    schema_registry: {url: 'localhost:8081'}\n"),
            "8:23",
            "schema_registry.url: expected an http:// or https:// URL, found \"localhost:8081\"",
        ),
        (
            "name: bad
sources:
  g: {type: generator, count: 1}
sinks:
  out:
    type: kafka
    input: g
    brokers: 127.0.0.1:1
    topic: out
    format: avro
"
            .to_owned(),
            "10:5",
            "format: avro needs schema: FILE.avsc (the writer schema)",
        ),
    ];
    for (i, (text, at, what)) in cases.iter().enumerate() {
        let file = format!("bad{i}.yaml");
        dir.write(&file, text);
        let out = common::tidemark(dir.path(), ["validate", file.as_str()]);
        assert_eq!(out.code(), 2, "{file}: {}", out.stderr);
        let prefix = format!("error: {file}:{at}: ");
        assert!(
            out.stderr
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(what)),
            "{file}: expected {prefix}…{what}, got:\n{}",
            out.stderr
        );
    }
}

/// The sink writes Avro registered under `<topic>-value` through a registry that needs basic
/// auth: Confluent's `AvroDeserializer` reads every message; events that do not fit the schema
/// go to the sink's dead letter naming the field, and nothing half is written. The password
/// (from the environment) is in no output; a wrong one fails the start naming the URL and the
/// HTTP status, without the password.
#[test]
fn the_sink_writes_avro_that_confluent_reads_with_basic_auth() {
    require_python();
    let broker = Broker::start(BrokerKind::Mock, &[("out", 1)]);
    let bootstrap = broker.bootstrap();
    let registry = Registry::start(Some(("svc", "hunter2")));
    let url = registry.url();
    let dir = TempDir::new("avro-sink");
    confluent(&["schemas", dir.path().to_str().unwrap()]);
    let fits = [
        r#"{"key":"c1","window_start":1700000000000,"window_end":1700000010000,"items":3,"orders":2,"total":12.5}"#,
        r#"{"key":"c2","window_start":1700000010000,"window_end":1700000020000,"items":1,"orders":1,"total":0.25,"extra":"not written"}"#,
    ];
    dir.write(
        "in.jsonl",
        &format!(
            "{}\n{}\n{}\n{}\n",
            fits[0],
            r#"{"key":"c3","window_start":1,"window_end":2,"items":1,"total":1.0}"#,
            r#"{"key":"c4","window_start":1,"window_end":2,"items":"many","orders":1,"total":1.0}"#,
            fits[1]
        ),
    );
    dir.write(
        "job.yaml",
        &format!(
            r#"name: avro-sink
sources:
  results: {{type: file, path: in.jsonl, timestamps: ingestion}}
sinks:
  out:
    type: kafka
    input: results
    brokers: {bootstrap}
    topic: out
    format: avro
    schema: out.avsc
    schema_registry:
      url: "{url}"
      basic_auth: {{username: svc, password: "${{SR_PASSWORD}}"}}
    on_error: {{dead_letter: unfit.jsonl}}
"#
        ),
    );
    let tidemark = |args: &[&str], password: &str| {
        let mut cmd = std::process::Command::new(common::tidemark_bin());
        cmd.args(args).env("SR_PASSWORD", password);
        let mut p = Proc::spawn_command(cmd, dir.path(), "tidemark");
        let code = p.wait_code();
        (code, format!("{}{}", p.stdout(), p.stderr()))
    };
    let run = |password: &str| {
        tidemark(
            &[
                "run",
                "job.yaml",
                "--kafka-timeout",
                "5s",
                "--metrics-addr",
                "127.0.0.1:0",
                "--report-file",
                "report.json",
            ],
            password,
        )
    };
    let (code, output) = run("hunter2");
    assert_eq!(code, 0, "{output}");
    assert!(!output.contains("hunter2"), "{output}");
    assert!(!dir.read("report.json").contains("hunter2"));
    let read = confluent_with(
        &["consume-avro", bootstrap, &url, "out", "2"],
        &[("REGISTRY_AUTH", "svc:hunter2")],
    );
    let got: Vec<serde_json::Value> = read
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut want: Vec<serde_json::Value> = fits
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    want[1].as_object_mut().unwrap().remove("extra");
    assert_eq!(got, want);
    assert_eq!(
        registry.stats()["POST /subjects/out-value/versions"],
        1,
        "registered once"
    );
    let unfit = lines(&dir.join("unfit.jsonl"));
    assert_eq!(unfit.len(), 2, "{unfit:?}");
    assert!(
        unfit[0].contains(
            "the event does not fit the schema: field `orders`: missing, expected an int (long) \
             (the schema gives no default)"
        ),
        "{}",
        unfit[0]
    );
    assert!(
        unfit[1].contains("field `items`: expected an int (long), found string \\\"many\\\""),
        "{}",
        unfit[1]
    );

    let (code, output) = run("wrong-password");
    assert_eq!(code, 1, "{output}");
    assert!(
        output.contains(&format!(
            "kafka sink \"out\": schema registry {url}/subjects/out-value/versions: HTTP 401: Unauthorized"
        )),
        "{output}"
    );
    assert!(!output.contains("wrong-password"), "{output}");
    // auto_register: false and a subject without the schema: the start fails naming it.
    dir.write(
        "lookup.yaml",
        &dir.read("job.yaml").replace(
            "on_error:",
            "auto_register: false\n    subject: missing-value\n    on_error:",
        ),
    );
    let (code, output) = tidemark(
        &[
            "run",
            "lookup.yaml",
            "--kafka-timeout",
            "5s",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
        "hunter2",
    );
    assert_eq!(code, 1, "{output}");
    assert!(
        output.contains(&format!(
            "kafka sink \"out\": schema registry {url}/subjects/missing-value: the schema under \
             subject \"missing-value\" not found (HTTP 404: Subject 'missing-value' not found.)"
        )),
        "{output}"
    );
    // validate shows the settings with the password redacted.
    let (code, output) = tidemark(&["validate", "job.yaml"], "hunter2");
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("\"password\":\"***\""), "{output}");
    assert!(!output.contains("hunter2"), "{output}");
}

fn texts(written: &serde_json::Value) -> Vec<String> {
    written["events_text"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

/// Protobuf written by Confluent's `ProtobufSerializer` (which registers the schema as a
/// base64 file descriptor; the message uses a well-known `Timestamp`, an enum, a repeated
/// field, a map and a `oneof`) reads as the mapping says.
#[test]
fn protobuf_from_confluents_serializer_reads_as_events() {
    require_python();
    let broker = Broker::start(BrokerKind::Mock, &[("porders", 1)]);
    let bootstrap = broker.bootstrap();
    let registry = Registry::start(None);
    let url = registry.url();
    let dir = TempDir::new("protobuf");
    let written: serde_json::Value = serde_json::from_str(&confluent(&[
        "produce-protobuf",
        bootstrap,
        &url,
        "porders",
    ]))
    .unwrap();
    let expected = texts(&written);
    dir.write(
        "job.yaml",
        &format!(
            r#"name: protobuf
checkpoint: {{interval: 200ms}}
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [porders]
    format: protobuf
    schema_registry: {{url: "{url}"}}
    timestamp: created_at
    properties: {{session.timeout.ms: 6000}}
sinks:
  out: {{type: file, input: orders, path: out.jsonl}}
"#
        ),
    );
    let mut job = run(&dir, "job.yaml");
    let got = wait_for_lines(&mut job, &dir.join("out.jsonl"), expected.len());
    assert_eq!(got, expected);
    job.terminate();
    job.wait();
}

/// Without a registry: plain Avro values of `schema:` on a topic (written by fastavro), and an
/// Avro object container file on the `file` source (deflate, schema in the file).
#[test]
fn plain_avro_and_container_files_read_without_a_registry() {
    require_python();
    let broker = Broker::start(BrokerKind::Mock, &[("plain", 1)]);
    let bootstrap = broker.bootstrap();
    let dir = TempDir::new("plain-avro");
    confluent(&["schemas", dir.path().to_str().unwrap()]);
    let plain: serde_json::Value =
        serde_json::from_str(&confluent(&["produce-plain-avro", bootstrap, "plain"])).unwrap();
    let container: serde_json::Value = serde_json::from_str(&confluent(&[
        "write-container",
        dir.join("orders.avro").to_str().unwrap(),
    ]))
    .unwrap();
    dir.write(
        "job.yaml",
        &format!(
            r#"name: plain-avro
checkpoint: {{interval: 200ms}}
sources:
  topic:
    type: kafka
    brokers: {bootstrap}
    topics: [plain]
    format: avro
    schema: v1.avsc
    properties: {{session.timeout.ms: 6000}}
  history:
    type: file
    path: orders.avro
    format: avro
    timestamp: created_at
sinks:
  from_topic: {{type: file, input: topic, path: topic.jsonl}}
  from_file: {{type: file, input: history, path: file.jsonl}}
"#
        ),
    );
    let mut job = run(&dir, "job.yaml");
    let got = wait_for_lines(&mut job, &dir.join("topic.jsonl"), 10);
    assert_eq!(got, texts(&plain));
    let got = wait_for_lines(&mut job, &dir.join("file.jsonl"), 10);
    assert_eq!(got, texts(&container));
    job.terminate();
    job.wait();
}

/// `on_error: fail` (the default) stops the job at a bad message, naming its topic, partition
/// and offset; a registry lost while the job runs fails it after `--kafka-timeout`, naming the
/// URL, when a message needs a schema it has not fetched yet.
#[test]
fn a_bad_message_or_a_lost_registry_fails_the_job_naming_where() {
    require_python();
    let broker = Broker::start(BrokerKind::Mock, &[("orders", 1), ("later", 1)]);
    let bootstrap = broker.bootstrap();
    let registry = Registry::start(None);
    let url = registry.url();
    let dir = TempDir::new("avro-failures");
    let written: serde_json::Value = serde_json::from_str(&confluent(&[
        "produce-avro",
        bootstrap,
        &url,
        "orders",
        "--bad",
    ]))
    .unwrap();
    let job = |topic: &str, url: &str| {
        format!(
            r#"name: failing-{topic}
sources:
  orders:
    type: kafka
    brokers: {bootstrap}
    topics: [{topic}]
    format: avro
    schema_registry: {{url: "{url}"}}
    properties: {{session.timeout.ms: 6000}}
sinks:
  out: {{type: discard, input: orders}}
"#
        )
    };
    dir.write("fail.yaml", &job("orders", &url));
    let out = common::tidemark(
        dir.path(),
        [
            "run",
            "fail.yaml",
            "--kafka-timeout",
            "10s",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "kafka source \"orders\": message at orders/0 offset {}: not in the Confluent wire \
             format: the first byte is 0x7b, expected 0x00 (on_error: fail)",
            written["bad_offsets"][0]
        )),
        "{}",
        out.stderr
    );

    // The job's registry answers at start, then goes away; the messages come later, written
    // with another registry's ids.
    let lost = Registry::start(None);
    let lost_url = lost.url();
    dir.write("lost.yaml", &job("later", &lost_url));
    let mut p = Proc::spawn(
        dir.path(),
        [
            "run",
            "lost.yaml",
            "--kafka-timeout",
            "2s",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    p.metrics_addr();
    drop(lost);
    confluent(&["produce-avro", bootstrap, &url, "later"]);
    assert_eq!(p.wait_code(), 1, "{}", p.stderr());
    assert!(
        p.stderr().contains(&format!(
            "kafka source \"orders\": message at later/0 offset 0: schema registry \
             {lost_url}/schemas/ids/1 did not answer within 2s"
        )),
        "{}",
        p.stderr()
    );
}
