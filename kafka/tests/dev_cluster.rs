//! The mock cluster on fixed ports, as `tidemark dev-kafka --port P --brokers 3` runs it.

mod common;

use std::time::Duration;

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
