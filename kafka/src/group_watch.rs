//! Partitions nobody reads: a Kafka source's (or exchange reader's) partition with unread
//! messages that no subtask of this instance holds, whose group's committed offset does not
//! move. Its owner may have died (the group notices only after `session.timeout.ms`, 45 s by
//! default), the group may be stuck rebalancing, or the instance holding it may be stuck: from
//! here it looks the same, data waits and nothing reads it. The stall watchdog names such a
//! partition (`docs/operations.md`, "Stalls").
//!
//! Every source vertex registers its group and topics when its first subtask is made
//! (`KafkaJob::watch_group`); a [`GroupWatch`] thread then asks the brokers, every tick, for
//! each partition's end offset and the group's committed offset, with a client of its own that
//! never joins the group (an OffsetFetch needs no membership). What it learns is read by
//! [`GroupWatch::unread`] without any broker call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tidemark_runtime::sync::lock;

use crate::job::{KafkaJob, WatchedGroup};

/// What the watch last saw of one partition.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The group's committed offset (or where reading would start without one).
    committed: i64,
    /// Messages past it.
    unread: i64,
    /// Since when the committed offset has not moved while messages were unread.
    since: Instant,
}

/// (source vertex id, topic, partition) → what was seen.
type Partitions = BTreeMap<(String, String, i32), Seen>;

/// The thread that asks the brokers where each watched group is; stops when dropped.
pub struct GroupWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Partitions>>,
    kafka: Arc<KafkaJob>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for GroupWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupWatch")
    }
}

impl KafkaJob {
    /// Starts asking the brokers, every `every`, where the groups of this job's Kafka sources
    /// are (see the [module docs](crate::group_watch)).
    pub fn start_group_watch(self: &Arc<Self>, every: Duration) -> GroupWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Partitions::new()));
        let (ended, into, kafka) = (stop.clone(), seen.clone(), self.clone());
        let thread = std::thread::Builder::new()
            .name("tidemark-group-watch".into())
            .spawn(move || {
                let mut consumers: BTreeMap<String, BaseConsumer> = BTreeMap::new();
                let mut warned = std::collections::BTreeSet::new();
                while !ended.load(Ordering::SeqCst) {
                    let watched: Vec<(String, WatchedGroup)> = lock(&kafka.watched)
                        .iter()
                        .map(|(id, g)| (id.clone(), g.clone()))
                        .collect();
                    let timeout = every.max(Duration::from_secs(1));
                    for (source_id, group) in watched {
                        if ended.load(Ordering::SeqCst) {
                            break;
                        }
                        let consumer = match consumers.get(&source_id) {
                            Some(c) => c,
                            None => match group.client.create::<BaseConsumer>() {
                                Ok(c) => consumers.entry(source_id.clone()).or_insert(c),
                                Err(e) => {
                                    // Said once per source: the stall rule then does not see
                                    // this source's partitions that nobody here reads.
                                    if warned.insert(source_id.clone()) {
                                        tracing::warn!(
                                            "kafka source \"{source_id}\": cannot watch its group \
                                             for partitions nobody reads: {e}"
                                        );
                                    }
                                    continue;
                                }
                            },
                        };
                        look(consumer, &source_id, &group, timeout, &into);
                    }
                    std::thread::park_timeout(every);
                }
            })
            .ok();
        GroupWatch {
            stop,
            seen,
            kafka: self.clone(),
            thread,
        }
    }
}

/// One look at a group: each partition's end offset and the group's committed offset. A
/// partition the brokers did not answer for keeps what was seen before.
fn look(
    consumer: &BaseConsumer,
    source_id: &str,
    group: &WatchedGroup,
    timeout: Duration,
    into: &Mutex<Partitions>,
) {
    let mut list = TopicPartitionList::new();
    for topic in &group.topics {
        let Ok(metadata) = consumer.fetch_metadata(Some(topic), timeout) else {
            continue;
        };
        for t in metadata.topics().iter().filter(|t| t.name() == topic) {
            for p in t.partitions() {
                list.add_partition(topic, p.id());
            }
        }
    }
    if list.count() == 0 {
        return;
    }
    // The watch's client has the source's group id: an OffsetFetch, no membership.
    let Ok(committed) = consumer.committed_offsets(list, timeout) else {
        return;
    };
    let now = Instant::now();
    for e in committed.elements() {
        let (topic, partition) = (e.topic(), e.partition());
        let Ok((low, high)) = consumer.fetch_watermarks(topic, partition, timeout) else {
            continue;
        };
        let at = match e.offset() {
            Offset::Offset(n) => n,
            _ if group.from_earliest => low,
            _ => high,
        };
        let unread = (high - at.max(low)).max(0);
        let key = (source_id.to_owned(), topic.to_owned(), partition);
        let mut seen = lock(into);
        let moved = seen
            .get(&key)
            .is_none_or(|s| s.committed != at || s.unread == 0 || unread == 0);
        let since = match (moved, seen.get(&key)) {
            (false, Some(s)) => s.since,
            _ => now,
        };
        seen.insert(
            key,
            Seen {
                committed: at,
                unread,
                since,
            },
        );
    }
}

impl GroupWatch {
    /// The first partition (in source, topic, partition order) with unread messages that no
    /// subtask of this instance holds and whose group's committed offset has not moved for
    /// longer than `timeout`, in words; `None` when there is none.
    pub fn unread(&self, timeout: Duration) -> Option<String> {
        let held = self.kafka.metrics().held_partitions();
        let now = Instant::now();
        let seen = lock(&self.seen);
        seen.iter().find_map(|((source_id, topic, partition), s)| {
            let still = now.saturating_duration_since(s.since);
            let key = (source_id.clone(), topic.clone(), *partition);
            (s.unread > 0 && still > timeout && !held.contains(&key)).then(|| {
                format!(
                    "kafka source \"{source_id}\": partition {topic}/{partition} has {} unread \
                     messages, no subtask of this instance reads it, and its group's committed \
                     offset has not moved for {:.1} s (stall_timeout {})",
                    s.unread,
                    still.as_secs_f64(),
                    tidemark_markers::format_duration(timeout)
                )
            })
        })
    }
}

impl Drop for GroupWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // Broker calls are bounded by the tick (at least 1 s each): the watch is left to
            // end on its own rather than hold up a stop.
            drop(thread);
        }
    }
}
