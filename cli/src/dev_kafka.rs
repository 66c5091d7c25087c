//! `tidemark dev-kafka`: librdkafka's mock cluster in the foreground until Ctrl-C, so the Kafka
//! quick start needs nothing installed (`docs/kafka.md`).

use crate::args::DevKafkaArgs;
use crate::error::EXIT_OK;
use anyhow::Context as _;
use signal_hook::consts::{SIGINT, SIGTERM};
use tidemark_kafka::{DevCluster, DevClusterOptions};

/// Starts the cluster, prints its bootstrap address, and waits for SIGINT or SIGTERM.
pub fn run(args: DevKafkaArgs) -> anyhow::Result<u8> {
    let topics = args
        .topic
        .iter()
        .map(|t| parse_topic(t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot install the signal handlers")?;
    let cluster = DevCluster::start(DevClusterOptions {
        brokers: args.brokers,
        port: args.port,
        topics: topics.clone(),
    })
    .map_err(|e| crate::error::RunError(e.into()))?;
    println!("bootstrap: {}", cluster.bootstrap_servers());
    for (name, partitions) in &topics {
        println!("topic: {name} ({partitions} partitions)");
    }
    println!(
        "mock Kafka cluster with {} broker(s) running; Ctrl-C stops it",
        args.brokers
    );
    eprintln!(
        "tidemark: note: librdkafka's mock cluster keeps at most 5 MB per partition (older \
         messages are deleted) and never compacts; see docs/kafka.md, \"Limits of the mock cluster\""
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = signals.forever().next();
    drop(cluster);
    eprintln!("tidemark: mock Kafka cluster stopped");
    Ok(EXIT_OK)
}

/// `NAME:PARTITIONS`, or `NAME` for one partition.
fn parse_topic(text: &str) -> Result<(String, i32), String> {
    let (name, partitions) = match text.rsplit_once(':') {
        Some((name, n)) => {
            let n: i32 = n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("--topic {text}: the partition count must be a whole number above 0")
            })?;
            (name, n)
        }
        None => (text, 1),
    };
    if name.is_empty() {
        return Err(format!(
            "--topic {text}: expected NAME:PARTITIONS, e.g. orders:4"
        ));
    }
    Ok((name.to_owned(), partitions))
}

#[cfg(test)]
mod tests {
    use super::parse_topic;

    #[test]
    fn topics_with_and_without_partitions() {
        assert_eq!(parse_topic("orders:4"), Ok(("orders".into(), 4)));
        assert_eq!(parse_topic("orders"), Ok(("orders".into(), 1)));
        assert!(parse_topic("orders:0").unwrap_err().contains("above 0"));
        assert!(parse_topic(":3").unwrap_err().contains("NAME:PARTITIONS"));
    }
}
