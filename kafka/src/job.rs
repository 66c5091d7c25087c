//! What the Kafka parts of one job share in this process: the instance name, the clock
//! offsets to the other instances, the Kafka series, `--kafka-timeout`, the group members that
//! leave together and the partitions handed between local subtasks. One per job, not per
//! process: two jobs in one process (a library user's, or tests) keep theirs apart.
//!
//! ```
//! use tidemark_kafka::KafkaJob;
//! use std::time::Duration;
//!
//! let kafka = KafkaJob::new();
//! kafka.set_instance("eu-1");
//! kafka.set_timeout(Duration::from_secs(5));
//! assert_eq!(kafka.instance(), "eu-1");
//! // Its `kafka` source and sink, for a component registry.
//! assert_eq!(kafka.components().len(), 2);
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;

use crate::clock::ClockOffsets;
use crate::departure::Departures;
use crate::handoff::Handoff;
use crate::metrics::KafkaMetrics;
use crate::restored::RestoredPositions;
use tidemark_runtime::sync::lock;

/// What a source vertex reads, for the [`crate::GroupWatch`]: its topics, and its client
/// settings with its group id.
#[derive(Clone, Debug)]
pub(crate) struct WatchedGroup {
    /// The topics it reads.
    pub topics: Vec<String>,
    /// Brokers and pass-through properties, as the source's consumer has them.
    pub client: ClientConfig,
    /// Without a committed offset, a partition is read from its start (else from its end:
    /// nothing in it is unread).
    pub from_earliest: bool,
}

/// The Kafka context of one job: what its Kafka parts share in this process. Cheap to share:
/// an `Arc`.
#[derive(Debug)]
pub struct KafkaJob {
    instance: Mutex<Option<String>>,
    clock_offsets: Mutex<Option<Arc<ClockOffsets>>>,
    metrics: Arc<KafkaMetrics>,
    timeout_ms: AtomicU64,
    pub(crate) departures: Arc<Departures>,
    pub(crate) handoff: Handoff,
    /// Partition positions restored from a checkpoint directory (`crate::restored`).
    pub(crate) restored: RestoredPositions,
    /// Per source vertex: its group and topics, for the [`crate::GroupWatch`].
    pub(crate) watched: Mutex<BTreeMap<String, WatchedGroup>>,
    /// The checks of the state topics of the job's exchanges that keep state, run before the
    /// job starts ([`KafkaJob::check_state_topics`]).
    state_checks: Mutex<Vec<StateCheck>>,
    /// An exchange keeps its vertex's keyed state in a state topic ([`KafkaJob::keeps_state`]).
    keeps_state: std::sync::atomic::AtomicBool,
}

/// One check of a state topic before the job starts: the refusal, if any.
pub(crate) struct StateCheck(pub(crate) Box<dyn Fn() -> Result<(), String> + Send + Sync>);

impl std::fmt::Debug for StateCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCheck")
    }
}

impl KafkaJob {
    /// A context with no instance name (`pid-<process id>`), no clock offsets, empty series and
    /// the default timeout (30 s).
    pub fn new() -> Arc<KafkaJob> {
        Arc::new(KafkaJob {
            instance: Mutex::new(None),
            clock_offsets: Mutex::new(None),
            metrics: Arc::new(KafkaMetrics::default()),
            timeout_ms: AtomicU64::new(30_000),
            departures: Arc::new(Departures::default()),
            handoff: Handoff::default(),
            restored: RestoredPositions::default(),
            watched: Mutex::new(BTreeMap::new()),
            state_checks: Mutex::new(Vec::new()),
            keeps_state: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Adds a check [`KafkaJob::check_state_topics`] runs.
    pub(crate) fn add_state_check(&self, check: StateCheck) {
        self.state_checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(check);
    }

    /// Whether an exchange of the job keeps its vertex's keyed state in a state topic
    /// ([`crate::exchange::Exchange::keep_state`]).
    pub fn keeps_state(&self) -> bool {
        self.keeps_state.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An exchange of the job keeps its vertex's keyed state in a state topic.
    pub(crate) fn set_keeps_state(&self) {
        self.keeps_state
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Checks, before the job starts, that the state topic of each exchange whose vertex
    /// keeps its state there holds no committed state of another key hash (written by a
    /// Tidemark before the key hash was Kafka's murmur2), which the restore would refuse only
    /// once the job runs. The refusal names the hash, the state topic and the partition. What
    /// cannot be checked (the brokers unreachable, the topic not there yet) is left to the job.
    pub fn check_state_topics(&self) -> Result<(), String> {
        for check in self
            .state_checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            (check.0)()?;
        }
        Ok(())
    }

    /// Registers the group and topics of source vertex `source_id` for the [`GroupWatch`]
    /// (once per vertex: later calls are ignored).
    pub(crate) fn watch_group(&self, source_id: &str, group: WatchedGroup) {
        lock(&self.watched)
            .entry(source_id.to_owned())
            .or_insert(group);
    }

    /// Names this instance (`--instance-id`): the origin written on markers that leave it and
    /// the name in its exchange writers' ids. Set before the subtasks are made.
    pub fn set_instance(&self, name: &str) {
        *self.instance.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.to_owned());
    }

    /// This instance's name: the one set, else `pid-<process id>`.
    pub fn instance(&self) -> String {
        self.instance
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| format!("pid-{}", std::process::id()))
    }

    /// The clock offsets to the other instances ([`crate::clock::ClockService`]) that markers
    /// which crossed instances are corrected with.
    pub fn set_clock_offsets(&self, offsets: Arc<ClockOffsets>) {
        *self.clock_offsets.lock().unwrap_or_else(|e| e.into_inner()) = Some(offsets);
    }

    /// `marked_time` in the clock of instance `clock`, moved into this instance's clock:
    /// `marked_time − θ`, θ being how far `clock` is ahead of us (`marked_time + θ(origin →
    /// local)` in the spec's terms). Unchanged when `clock` is this instance or has no estimate
    /// yet.
    pub fn to_local_clock(&self, marked_time: i64, clock: &str, local: &str) -> i64 {
        if clock == local {
            return marked_time;
        }
        let offsets = self
            .clock_offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match offsets.and_then(|o| o.best(clock)) {
            Some(estimate) => marked_time.saturating_sub(estimate.offset_nanos),
            None => marked_time,
        }
    }

    /// The job's Kafka series (`tidemark_kafka_lag_records`, …).
    pub fn metrics(&self) -> &Arc<KafkaMetrics> {
        &self.metrics
    }

    /// Sets how long sources and sinks wait for the brokers before they fail
    /// (`--kafka-timeout`).
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms
            .store(timeout.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// How long sources and sinks wait for the brokers before they fail.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_jobs_keep_their_names_timeouts_and_clocks_apart() {
        let (a, b) = (KafkaJob::new(), KafkaJob::new());
        assert_eq!(a.instance(), format!("pid-{}", std::process::id()));
        a.set_instance("a");
        b.set_instance("b");
        a.set_timeout(Duration::from_secs(2));
        assert_eq!((a.instance().as_str(), b.instance().as_str()), ("a", "b"));
        assert_eq!(a.timeout(), Duration::from_secs(2));
        assert_eq!(b.timeout(), Duration::from_secs(30));
        let offsets = Arc::new(ClockOffsets::default());
        offsets.record(
            "ahead",
            crate::clock::Estimate {
                offset_nanos: 3_000_000_000,
                error_nanos: 1_000,
            },
            std::time::Instant::now(),
        );
        a.set_clock_offsets(offsets);
        // A peer 3 s ahead stamped 10 s: that is 7 s on a's clock; b has no estimate.
        assert_eq!(
            a.to_local_clock(10_000_000_000, "ahead", "a"),
            7_000_000_000
        );
        assert_eq!(
            b.to_local_clock(10_000_000_000, "ahead", "b"),
            10_000_000_000
        );
        assert_eq!(a.to_local_clock(10_000_000_000, "a", "a"), 10_000_000_000);
        assert!(!Arc::ptr_eq(a.metrics(), b.metrics()));
    }
}
