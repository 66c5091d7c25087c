//! How much a partition just assigned to a subtask holds before the subtask has read from it:
//! where its reading starts and where it ends, asked of the brokers after the assignment.
//!
//! Idle means caught up (`docs/kafka.md`, "Failover"), and a source knows it is caught up on a
//! partition by comparing its position with the partition's end. Before the first record, the
//! subtask has no position of its own, and librdkafka's cached end may be from the last time this
//! consumer held the partition, long before: a partition taken over from a dead instance looked
//! caught up at once, went idle while the group's commit was still being fetched (seconds, while
//! a rebalance goes on), and what was read from it afterwards came late. So a partition assigned
//! is behind until this lookup has answered with its start (the offset the source chose, else the
//! group's commit, else `start`'s reset) and its end (a ListOffsets, not the cache), or until a
//! record was read from it (the fetch that carried it brought a fresh end too). An empty
//! partition is caught up as soon as the lookup answers, and can go idle.
//!
//! A partition handed over inside this process starts where the local subtask that gave it up
//! stopped, unless the group's commit lies further: the partition may have been with another
//! instance since, which read on and committed. That comparison needs the commit too, which the
//! coordinator serves only once a rebalance under way has ended; the source keeps such a
//! partition paused until this lookup has answered (`verify`), rather than guess.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::metrics::PartitionKey;

/// What is known of a partition assigned and not read from yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unread {
    /// Asked of the brokers, no answer yet: behind.
    Asking,
    /// Reading starts at `start`; the partition ended at `end` after the assignment.
    Known {
        /// The first offset the subtask reads.
        start: i64,
        /// The partition's end (next offset to be written) when asked.
        end: i64,
    },
}

/// How many records of a held partition are not read yet, if that is known: from the subtask's
/// `position` once it read from it (against librdkafka's `cached_end`, which the fetches that
/// brought the records renewed); before, from where its reading starts to the larger of the
/// ends known; `None` while the lookup of an assigned partition has not answered.
pub(crate) fn records_unread(
    position: Option<i64>,
    unread: Option<Unread>,
    cached_end: i64,
) -> Option<i64> {
    match (position, unread) {
        (Some(p), _) => Some((cached_end - p).max(0)),
        (None, Some(Unread::Known { start, end })) => Some((end.max(cached_end) - start).max(0)),
        (None, Some(Unread::Asking) | None) => None,
    }
}

/// The partitions a subtask holds and has not read from yet, and the lookup of their starts.
pub(crate) struct AssignedStarts {
    unread: BTreeMap<PartitionKey, Unread>,
    /// Since when each partition still asking has been asked, and whether that was said.
    asked_at: BTreeMap<PartitionKey, (Instant, bool)>,
    lookup: Option<JoinHandle<Answer>>,
    /// After a lookup that failed: when to ask again.
    retry_at: Option<Instant>,
    /// Without a committed offset: from the earliest (else the latest).
    from_earliest: bool,
    /// How long one lookup may wait for the group coordinator and the leaders.
    within: Duration,
}

/// What one lookup found of the partitions asked, and why it could not answer the others (a
/// partition whose start needs no commit is answered even when the commits cannot be read).
type Answer = (Vec<(PartitionKey, Unread)>, Option<String>);

/// How long to wait before asking again after a lookup failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl AssignedStarts {
    /// No partition yet; `from_earliest` is the reset for partitions without a commit.
    pub(crate) fn new(from_earliest: bool, within: Duration) -> Self {
        AssignedStarts {
            unread: BTreeMap::new(),
            asked_at: BTreeMap::new(),
            lookup: None,
            retry_at: None,
            from_earliest,
            within,
        }
    }

    /// `key` was assigned (again): what it holds is asked anew.
    pub(crate) fn assigned(&mut self, key: &PartitionKey) {
        self.unread.insert(key.clone(), Unread::Asking);
        self.asked_at.insert(key.clone(), (Instant::now(), false));
    }

    /// `key` is no longer held.
    pub(crate) fn revoked(&mut self, key: &PartitionKey) {
        self.unread.remove(key);
        self.asked_at.remove(key);
    }

    /// Whether `key` is waiting for its lookup or known unread.
    pub(crate) fn contains(&self, key: &PartitionKey) -> bool {
        self.unread.contains_key(key)
    }

    /// What is known of `key`, assigned and not read from yet; `None` when it is not followed
    /// (read from already, or not held).
    pub(crate) fn get(&self, key: &PartitionKey) -> Option<Unread> {
        self.unread.get(key).copied()
    }

    /// `key` has been read from: its position and the cached end tell from now on.
    pub(crate) fn read(&mut self, key: &PartitionKey) {
        self.unread.remove(key);
        self.asked_at.remove(key);
    }

    /// The partitions whose start has been asked for longer than `limit` without an answer,
    /// each returned once (to be reported), with how long.
    pub(crate) fn unanswered_for(
        &mut self,
        limit: Duration,
        now: Instant,
    ) -> Vec<(PartitionKey, Duration)> {
        let mut late = Vec::new();
        for (key, (since, said)) in &mut self.asked_at {
            let waited = now.saturating_duration_since(*since);
            if !*said && waited > limit && self.unread.get(key) == Some(&Unread::Asking) {
                *said = true;
                late.push((key.clone(), waited));
            }
        }
        late
    }

    /// Takes a finished lookup's answer and starts one for the partitions still asking, on a
    /// thread of its own (the group coordinator answers only once a rebalance under way has
    /// ended). `chosen` holds the starts the source chose itself (hand-over, restore); of
    /// those, the ones in `verify` start at the group's commit where it lies further. Returns
    /// the partitions answered now, with their starts.
    pub(crate) fn poll<C: ConsumerContext + 'static>(
        &mut self,
        consumer: &Arc<BaseConsumer<C>>,
        chosen: &BTreeMap<PartitionKey, i64>,
        verify: &BTreeMap<PartitionKey, i64>,
        now: Instant,
    ) -> Vec<(PartitionKey, i64)> {
        let mut answered = Vec::new();
        if let Some(lookup) = self.lookup.take_if(|l| l.is_finished()) {
            match lookup.join() {
                Ok((answers, failed)) => {
                    if let Some(why) = failed {
                        tracing::debug!("looking up where assigned partitions start: {why}");
                        self.retry_at = Some(now + RETRY_AFTER);
                    }
                    for (key, known) in answers {
                        // Revoked or read meanwhile: the answer is of no use.
                        if let Some(entry) = self.unread.get_mut(&key) {
                            if *entry == Unread::Asking {
                                *entry = known;
                                self.asked_at.remove(&key);
                                if let Unread::Known { start, .. } = known {
                                    answered.push((key, start));
                                }
                            }
                        }
                    }
                }
                Err(_) => self.retry_at = Some(now + RETRY_AFTER),
            }
        }
        if self.lookup.is_some() || self.retry_at.is_some_and(|at| now < at) {
            return answered;
        }
        let asking: Vec<Asking> = self
            .unread
            .iter()
            .filter(|(_, u)| **u == Unread::Asking)
            .map(|(key, _)| Asking {
                key: key.clone(),
                chosen: verify.get(key).or_else(|| chosen.get(key)).copied(),
                or_commit: verify.contains_key(key),
            })
            .collect();
        if asking.is_empty() {
            return answered;
        }
        self.retry_at = None;
        let consumer = Arc::clone(consumer);
        let (from_earliest, within) = (self.from_earliest, self.within);
        let spawned = std::thread::Builder::new()
            .name("tidemark-kafka-starts".into())
            .spawn(move || look_up(&consumer, &asking, from_earliest, within));
        match spawned {
            Ok(handle) => self.lookup = Some(handle),
            Err(_) => self.retry_at = Some(now + RETRY_AFTER),
        }
        answered
    }
}

/// A partition whose start and end are asked.
struct Asking {
    key: PartitionKey,
    /// The offset the source chose to start at, if it did.
    chosen: Option<i64>,
    /// Start at the group's commit instead of `chosen` where the commit lies further.
    or_commit: bool,
}

/// Each partition's start (`chosen`, else the group's commit, else the reset; the commit where
/// it lies further than `chosen` for `or_commit`) and its end.
fn look_up<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    asking: &[Asking],
    from_earliest: bool,
    within: Duration,
) -> Answer {
    let needs_commit = |a: &Asking| a.chosen.is_none() || a.or_commit;
    let mut tpl = TopicPartitionList::new();
    for a in asking.iter().filter(|a| needs_commit(a)) {
        tpl.add_partition(&a.key.0, a.key.1);
    }
    let mut failed = None;
    let committed = if tpl.count() > 0 {
        match consumer.committed_offsets(tpl, within) {
            Ok(c) => Some(c),
            Err(e) => {
                failed = Some(format!("the group's commits: {e}"));
                None
            }
        }
    } else {
        None
    };
    let mut known = Vec::with_capacity(asking.len());
    for a in asking {
        if needs_commit(a) && committed.is_none() {
            continue;
        }
        let Asking {
            key: (topic, partition),
            chosen,
            or_commit,
        } = a;
        let (low, end) = match consumer.fetch_watermarks(topic, *partition, within) {
            Ok(ends) => ends,
            Err(e) => {
                failed = Some(format!("the end of {topic}/{partition}: {e}"));
                continue;
            }
        };
        let commit = committed
            .as_ref()
            .and_then(|c| c.find_partition(topic, *partition))
            .and_then(|e| match e.offset() {
                Offset::Offset(at) => Some(at),
                _ => None,
            });
        let start = match (*chosen, commit) {
            (Some(at), Some(c)) if *or_commit => at.max(c),
            (Some(at), _) | (None, Some(at)) => at,
            (None, None) if from_earliest => low,
            (None, None) => end,
        };
        known.push((
            (topic.clone(), *partition),
            Unread::Known {
                start: start.max(low),
                end,
            },
        ));
    }
    (known, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev_cluster::{DevCluster, DevClusterOptions};
    use crate::testing;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::CommitMode;

    fn consumer(bootstrap: &str, group: &str) -> Arc<BaseConsumer> {
        Arc::new(
            ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("group.id", group)
                .create()
                .unwrap(),
        )
    }

    fn answered(
        starts: &mut AssignedStarts,
        consumer: &Arc<BaseConsumer>,
        chosen: &BTreeMap<PartitionKey, i64>,
        verify: &BTreeMap<PartitionKey, i64>,
        key: &PartitionKey,
    ) -> Unread {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            starts.poll(consumer, chosen, verify, Instant::now());
            match starts.get(key) {
                Some(Unread::Asking) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Some(u) => return u,
                None => panic!("{key:?} is no longer followed"),
            }
        }
    }

    #[test]
    fn a_partition_not_read_from_is_behind_until_its_start_and_end_are_known() {
        // The cached end is from when this consumer last held it (40); 80 were written since.
        let (stale_end, start, end) = (40, 40, 80);
        assert_eq!(records_unread(None, Some(Unread::Asking), stale_end), None);
        assert_eq!(records_unread(None, None, stale_end), None);
        assert_eq!(
            records_unread(None, Some(Unread::Known { start, end }), stale_end),
            Some(40)
        );
        // Empty: caught up as soon as known.
        assert_eq!(
            records_unread(None, Some(Unread::Known { start: 80, end: 80 }), 80),
            Some(0)
        );
        // Read from: the position against the (renewed) cached end.
        assert_eq!(records_unread(Some(70), Some(Unread::Asking), 80), Some(10));
        assert_eq!(records_unread(Some(80), None, 80), Some(0));
    }

    #[test]
    fn a_partition_starts_where_chosen_else_at_the_commit_else_at_the_reset() {
        let cluster = DevCluster::start(DevClusterOptions {
            topics: vec![("t".into(), 4)],
            ..DevClusterOptions::default()
        })
        .unwrap();
        let bootstrap = cluster.bootstrap_servers();
        testing::produce_ids(bootstrap, "t", 0..400);
        let ends: Vec<i64> = (0..4)
            .map(|p| {
                consumer(bootstrap, "ends")
                    .fetch_watermarks("t", p, Duration::from_secs(10))
                    .unwrap()
                    .1
            })
            .collect();
        assert!(
            ends.iter().all(|e| *e > 10),
            "every partition holds some: {ends:?}"
        );
        // The group committed partitions 0, 1 and 3.
        let group = consumer(bootstrap, "g");
        let mut commit = TopicPartitionList::new();
        for (p, at) in [(0, 10), (1, 7), (3, 5)] {
            commit
                .add_partition_offset("t", p, Offset::Offset(at))
                .unwrap();
        }
        group.commit(&commit, CommitMode::Sync).unwrap();

        let key = |p: i32| ("t".to_owned(), p);
        // 0: chosen (restored), whatever the commit; 1: handed over at 2, the commit further;
        // 2: neither, from the earliest; 3: handed over at 9, the commit behind.
        let chosen = BTreeMap::from([(key(0), 3), (key(1), 2), (key(3), 9)]);
        let verify = BTreeMap::from([(key(1), 2), (key(3), 9)]);
        let mut starts = AssignedStarts::new(true, Duration::from_secs(10));
        for p in 0..4 {
            starts.assigned(&key(p));
            assert_eq!(starts.get(&key(p)), Some(Unread::Asking));
        }
        let found: Vec<Unread> = (0..4)
            .map(|p| answered(&mut starts, &group, &chosen, &verify, &key(p)))
            .collect();
        assert_eq!(
            found,
            vec![
                Unread::Known {
                    start: 3,
                    end: ends[0]
                },
                Unread::Known {
                    start: 7,
                    end: ends[1]
                },
                Unread::Known {
                    start: 0,
                    end: ends[2]
                },
                Unread::Known {
                    start: 9,
                    end: ends[3]
                },
            ]
        );

        // Without a commit and from the latest: nothing to read, caught up.
        let mut latest = AssignedStarts::new(false, Duration::from_secs(10));
        latest.assigned(&key(3));
        let other = consumer(bootstrap, "other");
        assert_eq!(
            answered(
                &mut latest,
                &other,
                &BTreeMap::new(),
                &BTreeMap::new(),
                &key(3)
            ),
            Unread::Known {
                start: ends[3],
                end: ends[3]
            }
        );

        // Answered in time: nothing to report.
        assert_eq!(
            starts.unanswered_for(Duration::ZERO, Instant::now()),
            vec![]
        );

        // Assigned again: asked anew; read from or revoked: no longer followed.
        starts.assigned(&key(1));
        assert_eq!(starts.get(&key(1)), Some(Unread::Asking));
        starts.read(&key(1));
        starts.revoked(&key(2));
        assert_eq!((starts.get(&key(1)), starts.get(&key(2))), (None, None));
        assert!(starts.contains(&key(0)));

        // The coordinator cannot serve commits: a partition whose start is chosen is answered
        // all the same; one that needs the commit waits for it.
        use crate::dev_cluster::Request;
        use rdkafka::types::RDKafkaRespErr;
        let loading = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 10_000];
        cluster.refuse_next(Request::OffsetFetch, &loading).unwrap();
        let mut partial = AssignedStarts::new(true, Duration::from_millis(500));
        partial.assigned(&key(0));
        partial.assigned(&key(2));
        let chosen_only = BTreeMap::from([(key(0), 3)]);
        assert_eq!(
            answered(
                &mut partial,
                &group,
                &chosen_only,
                &BTreeMap::new(),
                &key(0)
            ),
            Unread::Known {
                start: 3,
                end: ends[0]
            }
        );
        for _ in 0..5 {
            partial.poll(&group, &chosen_only, &BTreeMap::new(), Instant::now());
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(partial.get(&key(2)), Some(Unread::Asking));
        cluster.serve_again(Request::OffsetFetch).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while partial.get(&key(2)) == Some(Unread::Asking) && Instant::now() < deadline {
            partial.poll(&group, &chosen_only, &BTreeMap::new(), Instant::now());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            partial.get(&key(2)),
            Some(Unread::Known {
                start: 0,
                end: ends[2]
            })
        );

        // Never answered (no lookup made here): reported once past the limit.
        let mut waiting = AssignedStarts::new(true, Duration::from_secs(10));
        waiting.assigned(&key(2));
        let later = Instant::now() + Duration::from_secs(31);
        assert_eq!(
            waiting.unanswered_for(Duration::from_secs(30), Instant::now()),
            vec![]
        );
        let late = waiting.unanswered_for(Duration::from_secs(30), later);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].0, key(2));
        assert_eq!(
            waiting.unanswered_for(Duration::from_secs(30), later),
            vec![]
        );
    }
}
