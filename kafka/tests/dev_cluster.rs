//! The mock cluster on fixed ports, as `tidemark dev-kafka --port P --brokers 3` runs it.

mod common;

use std::time::Duration;

use tidemark_kafka::testing::create_topics;
use tidemark_kafka::{DevCluster, DevClusterError, DevClusterOptions};

fn free_port_block(n: u16) -> u16 {
    // Ask the system for a free port and hope the next n-1 are free too; retry otherwise.
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        drop(l);
        if p < 60000 && (1..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok()) {
            return p;
        }
    }
}

#[test]
fn three_brokers_on_fixed_ports_carry_messages() {
    let port = free_port_block(3);
    let cluster = DevCluster::start(DevClusterOptions {
        brokers: 3,
        port: Some(port),
        topics: vec![("t".into(), 3)],
    })
    .unwrap();
    assert_eq!(
        cluster.bootstrap_servers(),
        format!(
            "127.0.0.1:{port},127.0.0.1:{},127.0.0.1:{}",
            port + 1,
            port + 2
        )
    );
    // Clients that know only broker 1's port reach the others through the advertised ports.
    let bootstrap = format!("127.0.0.1:{port}");
    common::produce_ids(&bootstrap, "t", 0..300);
    let seen = common::read_keys_of_values(&bootstrap, "t", 300, Duration::from_secs(60));
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (0..300).collect::<Vec<_>>()
    );

    // The port is taken now: a second cluster says so.
    let err = DevCluster::start(DevClusterOptions {
        brokers: 1,
        port: Some(port),
        topics: vec![],
    })
    .unwrap_err();
    assert!(
        matches!(err, DevClusterError::Port { port: p, .. } if p == port),
        "{err}"
    );
    assert!(err
        .to_string()
        .starts_with(&format!("cannot listen on 127.0.0.1:{port}: ")));
}

#[test]
fn admin_clients_create_topics_with_the_partitions_they_ask_for() {
    use rdkafka::types::RDKafkaErrorCode;
    use tidemark_kafka::testing::partition_count;
    let cluster = DevCluster::start(DevClusterOptions::default()).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    // Validating creates nothing.
    assert_eq!(
        create_topics(bootstrap, &[("eight", 8, 1)], true),
        [Ok("eight".to_owned())]
    );
    assert_eq!(partition_count(bootstrap, "eight"), None);
    assert_eq!(
        create_topics(
            bootstrap,
            &[("eight", 8, 1), ("zero", 0, 1), ("three-replicas", 1, 3)],
            false
        ),
        [
            Ok("eight".to_owned()),
            Err(RDKafkaErrorCode::InvalidPartitions),
            Err(RDKafkaErrorCode::InvalidReplicationFactor),
        ]
    );
    assert_eq!(partition_count(bootstrap, "eight"), Some(8));
    assert_eq!(partition_count(bootstrap, "zero"), None);
    // The topic carries messages in each of its partitions.
    produce_ids_to_partitions(bootstrap, "eight", 8);
    assert_eq!(
        create_topics(bootstrap, &[("eight", 2, 1)], false),
        [Err(RDKafkaErrorCode::TopicAlreadyExists)]
    );
    assert_eq!(
        create_topics(bootstrap, &[("eight", 2, 1)], true),
        [Err(RDKafkaErrorCode::TopicAlreadyExists)]
    );
    assert_eq!(partition_count(bootstrap, "eight"), Some(8));
}

#[test]
fn topics_are_created_on_fixed_ports_with_three_brokers_too() {
    let port = free_port_block(3);
    let cluster = DevCluster::start(DevClusterOptions {
        brokers: 3,
        port: Some(port),
        topics: vec![],
    })
    .unwrap();
    // Through broker 2: any broker answers.
    let bootstrap = format!("127.0.0.1:{}", port + 1);
    assert_eq!(
        create_topics(&bootstrap, &[("twelve", 12, 3)], false),
        [Ok("twelve".to_owned())]
    );
    assert_eq!(
        tidemark_kafka::testing::partition_count(cluster.bootstrap_servers(), "twelve"),
        Some(12)
    );
}

/// Writes one message to each partition `0..partitions` of `topic` and reads them back.
fn produce_ids_to_partitions(bootstrap: &str, topic: &str, partitions: i32) {
    use rdkafka::producer::{BaseRecord, Producer};
    let producer = tidemark_kafka::testing::producer(bootstrap);
    for p in 0..partitions {
        let key = p.to_string();
        producer
            .send(BaseRecord::to(topic).partition(p).key(&key).payload(&key))
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let seen = tidemark_kafka::testing::read_keys(
        bootstrap,
        topic,
        partitions as usize,
        Duration::from_secs(60),
    );
    assert_eq!(seen.len(), partitions as usize);
}
