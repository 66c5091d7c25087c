//! Clock offset between instances, NTP-style through the control topic
//! `tidemark-<job>-clock` (spec `kafka.md`, "Clock offset between instances").
//!
//! Every few seconds each instance writes a ping with its send time `t1`. Every other instance
//! stamps `t2` when it reads the ping and `t3` when it writes its reply; the first stamps `t4`
//! when it reads the reply. Then
//!
//! - offset θ = ((t2 − t1) + (t3 − t4)) / 2: how far the peer's clock is ahead of ours;
//! - error bound ε = ((t4 − t1) − (t3 − t2)) / 2: half the round trip spent in transit.
//!
//! Whatever the delays, the true offset lies in [θ − ε, θ + ε] (both messages travel forward in
//! time). Of the samples of the last minute the one with the smallest ε is kept. The estimates
//! are exported as `tidemark_clock_offset_seconds{peer_instance}` and
//! `tidemark_clock_offset_error_seconds{peer_instance}`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tidemark_runtime::sync::lock;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use tidemark_runtime::metrics::{SeriesFamily, SeriesSource, SeriesWriter};

use crate::client::{client_config, Brokers, ErrorContext, Properties};

/// A wall clock in nanoseconds since the Unix epoch (tests inject a shifted one).
pub type WallClock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system's wall clock.
pub fn system_clock() -> WallClock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0)
    })
}

/// How long a sample counts.
const WINDOW: Duration = Duration::from_secs(60);

/// One estimate of a peer's offset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The peer's clock minus ours, nanoseconds.
    pub offset_nanos: i64,
    /// The error bound ε, nanoseconds: the true offset is within `offset ± error`.
    pub error_nanos: i64,
}

impl Estimate {
    /// From the four time stamps of one exchange.
    pub fn from_exchange(t1: i64, t2: i64, t3: i64, t4: i64) -> Estimate {
        Estimate {
            offset_nanos: ((t2 - t1) + (t3 - t4)) / 2,
            error_nanos: ((t4 - t1) - (t3 - t2)) / 2,
        }
    }
}

/// The offsets of every peer heard from: the best sample of the last minute each.
#[derive(Debug, Default)]
pub struct ClockOffsets {
    peers: Mutex<BTreeMap<String, VecDeque<(Instant, Estimate)>>>,
}

impl ClockOffsets {
    /// Adds a sample for `peer`.
    pub fn record(&self, peer: &str, estimate: Estimate, now: Instant) {
        let mut peers = lock(&self.peers);
        let samples = peers.entry(peer.to_owned()).or_default();
        samples.push_back((now, estimate));
        while samples
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > WINDOW)
        {
            samples.pop_front();
        }
    }

    /// The sample with the smallest error bound of the last minute, for `peer`.
    pub fn best(&self, peer: &str) -> Option<Estimate> {
        let peers = lock(&self.peers);
        peers
            .get(peer)?
            .iter()
            .map(|(_, e)| *e)
            .min_by_key(|e| e.error_nanos)
    }

    /// Every peer heard from.
    pub fn peers(&self) -> Vec<String> {
        lock(&self.peers).keys().cloned().collect()
    }
}

/// `tidemark_clock_offset_seconds{peer_instance}`.
pub const OFFSET_SECONDS: SeriesFamily = SeriesFamily::gauge(
    "tidemark_clock_offset_seconds",
    "How far a peer instance's clock is ahead of this one's (NTP-style estimate through the clock topic).",
);

/// `tidemark_clock_offset_error_seconds{peer_instance}`.
pub const OFFSET_ERROR_SECONDS: SeriesFamily = SeriesFamily::gauge(
    "tidemark_clock_offset_error_seconds",
    "The error bound of tidemark_clock_offset_seconds: the true offset is within plus or minus this.",
);

/// The offset series, one per peer heard from (registered with
/// [`MetricsRegistry::register_series`](tidemark_runtime::MetricsRegistry::register_series)).
impl SeriesSource for ClockOffsets {
    fn collect(&self, out: &mut SeriesWriter) {
        let best: Vec<(String, Estimate)> = self
            .peers()
            .into_iter()
            .filter_map(|peer| Some((peer.clone(), self.best(&peer)?)))
            .collect();
        for (peer, e) in &best {
            out.number(
                &OFFSET_SECONDS,
                &[("peer_instance", peer)],
                e.offset_nanos as f64 / 1e9,
            );
        }
        for (peer, e) in &best {
            out.number(
                &OFFSET_ERROR_SECONDS,
                &[("peer_instance", peer)],
                e.error_nanos as f64 / 1e9,
            );
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ClockMessage {
    Ping {
        from: String,
        t1: i64,
    },
    Pong {
        from: String,
        to: String,
        t1: i64,
        t2: i64,
        t3: i64,
    },
}

/// The name of a job's clock topic.
pub fn clock_topic(job: &str) -> String {
    format!("tidemark-{job}-clock")
}

/// Runs the exchange on a thread of its own until dropped.
pub struct ClockService {
    offsets: Arc<ClockOffsets>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ClockService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClockService")
    }
}

impl ClockService {
    /// Starts pinging every `every` on the clock topic of `job` as `instance`, reading time
    /// from `clock`; the topic must be there within `timeout` (`--kafka-timeout`).
    pub fn start(
        brokers: &Brokers,
        properties: &Properties,
        job: &str,
        instance: &str,
        clock: WallClock,
        every: Duration,
        timeout: Duration,
    ) -> Result<ClockService, String> {
        let topic = clock_topic(job);
        // Quiet contexts: a broker gone is the sources' and sinks' to report, not this thread's.
        let producer: BaseProducer<ErrorContext> = client_config(brokers, properties)
            .set("linger.ms", "0")
            .create_with_context(ErrorContext::default())
            .map_err(|e| format!("clock offset: {e}"))?;
        let consumer: BaseConsumer<ErrorContext> = client_config(brokers, properties)
            .set(
                "group.id",
                format!("tidemark-{job}-clock-{instance}-{}", std::process::id()),
            )
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "5")
            .set("fetch.error.backoff.ms", "50")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .create_with_context(ErrorContext::default())
            .map_err(|e| format!("clock offset: {e}"))?;
        // Ask for the topic first: a broker that auto-creates topics makes it now, before the
        // consumer is pointed at it.
        crate::client::wait_for_metadata(producer.client(), &topic, timeout, || {
            producer.poll(Duration::ZERO);
        })
        .map_err(|e| format!("clock offset: topic {topic}: {e}"))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::End)
            .map_err(|e| format!("clock offset: {e}"))?;
        consumer
            .assign(&tpl)
            .map_err(|e| format!("clock offset: {e}"))?;
        let offsets = Arc::new(ClockOffsets::default());
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            producer,
            consumer,
            topic,
            instance: instance.to_owned(),
            clock,
            every,
            offsets: offsets.clone(),
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("tidemark-clock".into())
            .spawn(move || worker.run())
            .map_err(|e| format!("clock offset: {e}"))?;
        Ok(ClockService {
            offsets,
            stop,
            thread: Some(thread),
        })
    }

    /// The estimates so far.
    pub fn offsets(&self) -> &Arc<ClockOffsets> {
        &self.offsets
    }
}

/// How long dropping a [`ClockService`] waits for its thread to end.
const CLOSE_WITHIN: Duration = Duration::from_millis(500);

impl Drop for ClockService {
    /// Stops the thread and waits for it at most [`CLOSE_WITHIN`]: it flushes its last ping
    /// and closes its clients, which waits for the brokers (up to their own timeouts when they
    /// stopped answering); past that it ends in the background, so a process on its way out
    /// does not wait for them.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let deadline = Instant::now() + CLOSE_WITHIN;
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

struct Worker {
    producer: BaseProducer<ErrorContext>,
    consumer: BaseConsumer<ErrorContext>,
    topic: String,
    instance: String,
    clock: WallClock,
    every: Duration,
    offsets: Arc<ClockOffsets>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    fn run(self) {
        let mut next_ping = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_ping {
                let t1 = (self.clock)();
                self.send(&ClockMessage::Ping {
                    from: self.instance.clone(),
                    t1,
                });
                next_ping = Instant::now() + self.every;
            }
            self.producer.poll(Duration::ZERO);
            let Some(Ok(message)) = self.consumer.poll(Duration::from_millis(20)) else {
                continue;
            };
            let received = (self.clock)();
            let Some(Ok(parsed)) = message
                .payload()
                .map(serde_json::from_slice::<ClockMessage>)
            else {
                continue;
            };
            match parsed {
                ClockMessage::Ping { from, t1 } if from != self.instance => {
                    let t3 = (self.clock)();
                    self.send(&ClockMessage::Pong {
                        from: self.instance.clone(),
                        to: from,
                        t1,
                        t2: received,
                        t3,
                    });
                }
                ClockMessage::Pong {
                    from,
                    to,
                    t1,
                    t2,
                    t3,
                } if to == self.instance => {
                    let estimate = Estimate::from_exchange(t1, t2, t3, received);
                    self.offsets.record(&from, estimate, Instant::now());
                }
                _ => {}
            }
        }
        let _ = self.producer.flush(Duration::from_secs(1));
    }

    fn send(&self, message: &ClockMessage) {
        let Ok(payload) = serde_json::to_vec(message) else {
            return;
        };
        let _ = self.producer.send(
            BaseRecord::<(), _>::to(&self.topic)
                .partition(0)
                .payload(&payload),
        );
        self.producer.poll(Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formulas() {
        // The peer is 3 s ahead; 10 ms each way; the peer takes 1 ms to answer.
        let ms = 1_000_000i64;
        let (t1, t2, t3, t4) = (0, 3000 * ms + 10 * ms, 3000 * ms + 11 * ms, 21 * ms);
        let e = Estimate::from_exchange(t1, t2, t3, t4);
        assert_eq!(e.offset_nanos, 3000 * ms);
        assert_eq!(e.error_nanos, 10 * ms);
    }

    #[test]
    fn the_best_sample_of_the_last_minute() {
        let o = Arc::new(ClockOffsets::default());
        let start = Instant::now();
        let e = |offset, error| Estimate {
            offset_nanos: offset,
            error_nanos: error,
        };
        o.record("b", e(100, 50), start);
        o.record("b", e(90, 5), start + Duration::from_secs(1));
        o.record("b", e(120, 30), start + Duration::from_secs(2));
        assert_eq!(o.best("b"), Some(e(90, 5)));
        // A minute later the good sample has aged out.
        o.record("b", e(130, 40), start + Duration::from_secs(63));
        assert_eq!(o.best("b"), Some(e(130, 40)));
        // Scraped through the job's registry, as `tidemark run` registers it.
        let mut graph = tidemark_runtime::JobGraph::new("j");
        let src = graph
            .add_source("in", 1, |_| {
                Ok(Box::new(tidemark_runtime::testing::CountingSource::new(1)))
            })
            .unwrap();
        let sink = graph
            .add_sink("out", 1, |_| {
                Ok(Box::new(tidemark_runtime::testing::DiscardSink))
            })
            .unwrap();
        graph
            .connect(src, sink, tidemark_runtime::Partitioning::Forward)
            .unwrap();
        let registry = tidemark_runtime::run(graph, Default::default())
            .unwrap()
            .metrics;
        registry.register_series(o.clone());
        let text = tidemark_runtime::exporter::render_text(&registry).unwrap();
        for line in [
            "tidemark_clock_offset_seconds{job_name=\"j\",peer_instance=\"b\"} 0.00000013\n",
            "tidemark_clock_offset_error_seconds{job_name=\"j\",peer_instance=\"b\"} 0.00000004\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert_eq!(o.best("c"), None);
    }
}
