//! Two jobs with exchanges through Kafka in one process, loaded from job files with two
//! [`Loader`]s named as two instances: each job's Kafka parts keep to their own context
//! (`tidemark_kafka::KafkaJob`): the exchange writers of each are named by its own instance,
//! each job's Kafka series hold only its own vertices, and both end with every record.
#![cfg(feature = "kafka")]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tidemark_cli::Loader;
use tidemark_kafka::{DevCluster, DevClusterOptions};

const RECORDS: u64 = 500;

/// The job `name`: a generator of `RECORDS` keyed records through an exchange into a reduce
/// `vertex`, to a file.
fn job(bootstrap: &str, name: &str, vertex: &str, out: &std::path::Path) -> String {
    format!(
        "name: {name}
parallelism: 2
sources:
  gen: {{type: generator, count: {RECORDS}, keys: 8}}
operators:
  {vertex}:
    type: reduce
    input: gen
    aggregates: {{n: count}}
    exchange: {{kafka: {{brokers: \"{bootstrap}\", partitions: 2, properties: {{session.timeout.ms: 6000, heartbeat.interval.ms: 500}}}}}}
sinks:
  out:
    type: file
    input: {vertex}
    parallelism: 1
    path: {}
",
        out.display()
    )
}

/// The writer names (`tidemark-writer` headers) of the control messages in `topic`.
fn writers_in(bootstrap: &str, topic: &str) -> BTreeSet<String> {
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("check-{topic}"))
        .create()
        .unwrap();
    let mut writers = BTreeSet::new();
    for partition in 0..2 {
        let (_, end) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let started = Instant::now();
        let mut next = 0;
        while next < end {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "gave up reading {topic}/{partition}"
            );
            if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                let m = m.unwrap();
                next = m.offset() + 1;
                for h in m.headers().iter().flat_map(|h| h.iter()) {
                    if h.key == "tidemark-writer" {
                        writers.insert(String::from_utf8(h.value.unwrap().to_vec()).unwrap());
                    }
                }
            }
        }
    }
    writers
}

#[test]
fn two_kafka_jobs_in_one_process_keep_their_instances_apart() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![
            ("tidemark-first-sum1-exchange".into(), 2),
            ("tidemark-second-sum2-exchange".into(), 2),
        ],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let bootstrap = cluster.bootstrap_servers().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = [("first", "sum1", "one"), ("second", "sum2", "two")]
        .into_iter()
        .map(|(name, vertex, instance)| {
            let out = dir.path().join(format!("{name}.jsonl"));
            let loader = Loader::new();
            loader.kafka().set_instance(instance);
            let loaded = loader
                .load_str(&job(&bootstrap, name, vertex, &out), name, dir.path())
                .unwrap();
            let thread = std::thread::spawn(move || {
                tidemark_runtime::run(loaded.graph, loaded.config).map(|_| ())
            });
            (name, vertex, instance, loader, out, thread)
        })
        .collect();
    for (name, vertex, instance, loader, out, thread) in runs {
        thread
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Every record reached the reduce: its running counts sum to the records per key.
        let lines = std::fs::read_to_string(&out).unwrap();
        assert_eq!(lines.lines().count() as u64, RECORDS, "{name}");
        // The exchange's writers are named by this job's instance only.
        let writers = writers_in(&bootstrap, &format!("tidemark-{name}-{vertex}-exchange"));
        assert!(!writers.is_empty(), "{name}: no writer heard");
        for w in &writers {
            assert!(
                w.starts_with(&format!("{instance}/{vertex}.exchange/")),
                "{name}: writer {w}"
            );
        }
        // The job's Kafka series count its own reader's commits, not the other job's.
        let other = if vertex == "sum1" { "sum2" } else { "sum1" };
        let series = loader.kafka().metrics();
        assert!(
            series.commits(&format!("{vertex}.exchange-in")) > 0,
            "{name}"
        );
        assert_eq!(series.commits(&format!("{other}.exchange-in")), 0, "{name}");
    }
}
