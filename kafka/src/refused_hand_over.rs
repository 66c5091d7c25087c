//! Hand-over commits the group refused, made again (no checkpointing, `docs/kafka.md`,
//! "At least once").
//!
//! When a rebalance takes partitions from a subtask, the subtask commits the position after the
//! last record it handed to the job, so that their next owner in another process neither
//! repeats nor skips a record. That commit is made inside the revocation, and the group may
//! refuse it: librdkafka's mock cluster refuses every commit while the group is joining again
//! (`REBALANCE_IN_PROGRESS`; Kafka itself while a rebalance completes), and a consumer whose
//! session expired finds its assignment lost. The source's polls make a refused hand-over again
//! every [`RETRY_AFTER`] until the group takes it or `--kafka-timeout` has passed since the
//! first refusal (then it is said on stderr); the source's close makes what is left.
//!
//! Each attempt first reads the group's commit of those partitions and leaves out every
//! partition the group has committed at or past the hand-over's offset: its next owner has moved
//! on, and the late hand-over must not move that commit back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::metrics::PartitionKey;

/// How long after a refusal the hand-over is made again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_millis(200);

/// An attempt with no answer after this long is taken as refused (its answer was lost).
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// The refused hand-overs of one source subtask and when to make them again.
#[derive(Debug, Default)]
pub(crate) struct RefusedHandOvers {
    /// Partition → the offset to hand it over at (the newest revocation's, if it was revoked
    /// more than once).
    waiting: BTreeMap<PartitionKey, i64>,
    /// The attempt under way (the group's commits being read, or the commit's answer not yet
    /// served by a poll), and when it started.
    in_flight: Option<(Vec<(PartitionKey, i64)>, Instant)>,
    /// When to make the next attempt (none while one is in flight).
    next_attempt: Option<Instant>,
    /// `--kafka-timeout` after the first refusal of what waits.
    give_up_at: Option<Instant>,
    /// What the group (or librdkafka) said to the last attempt.
    last_refusal: String,
}

/// What a poll does next about the refused hand-overs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing now.
    Wait,
    /// Read the group's commits of these partitions, then commit those still behind
    /// ([`RefusedHandOvers::behind`]). The attempt is under way until it is answered.
    Attempt(Vec<(PartitionKey, i64)>),
    /// The time is up: say these were not handed over, with the last refusal.
    GiveUp(BTreeMap<PartitionKey, i64>, String),
}

impl RefusedHandOvers {
    /// True when nothing waits to be handed over.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// How many partitions wait.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The group refused handing `offsets` over (`why`); `timeout` is `--kafka-timeout`.
    pub(crate) fn refused(
        &mut self,
        offsets: impl IntoIterator<Item = (PartitionKey, i64)>,
        why: String,
        now: Instant,
        timeout: Duration,
    ) {
        let offsets: Vec<_> = offsets.into_iter().collect();
        if offsets.is_empty() {
            return;
        }
        self.waiting.extend(offsets);
        self.last_refusal = why;
        self.give_up_at.get_or_insert(now + timeout);
        if self.in_flight.is_none() && self.next_attempt.is_none() {
            self.next_attempt = Some(now + RETRY_AFTER);
        }
    }

    /// The answer to the attempt in flight: taken, those offsets are handed over; refused (or
    /// not made, `Err`), the next attempt follows [`RETRY_AFTER`] later.
    pub(crate) fn answered(&mut self, answer: Result<(), String>, now: Instant) {
        let Some((sent, _)) = self.in_flight.take() else {
            return;
        };
        match answer {
            Ok(()) => {
                for (key, offset) in sent {
                    if self.waiting.get(&key) == Some(&offset) {
                        self.waiting.remove(&key);
                    }
                }
                if self.waiting.is_empty() {
                    self.give_up_at = None;
                } else {
                    // Revoked again meanwhile at another offset.
                    self.next_attempt = Some(now);
                }
            }
            Err(why) => self.retry_later(why, now),
        }
    }

    /// The attempt could not be made (`why`): the next one follows [`RETRY_AFTER`] later.
    pub(crate) fn retry_later(&mut self, why: String, now: Instant) {
        self.in_flight = None;
        self.last_refusal = why;
        self.next_attempt = Some(now + RETRY_AFTER);
    }

    /// What to do at `now`.
    pub(crate) fn next(&mut self, now: Instant) -> Next {
        if let Some((_, since)) = &self.in_flight {
            if now.saturating_duration_since(*since) < ANSWER_WITHIN {
                return Next::Wait;
            }
            self.retry_later("no answer".into(), now);
        }
        if self.waiting.is_empty() {
            return Next::Wait;
        }
        if self.give_up_at.is_some_and(|at| now >= at) {
            let waiting = std::mem::take(&mut self.waiting);
            let why = std::mem::take(&mut self.last_refusal);
            *self = RefusedHandOvers::default();
            return Next::GiveUp(waiting, why);
        }
        match self.next_attempt {
            Some(at) if now >= at => {
                self.next_attempt = None;
                let attempt: Vec<_> = self.waiting.iter().map(|(k, o)| (k.clone(), *o)).collect();
                self.in_flight = Some((attempt.clone(), now));
                Next::Attempt(attempt)
            }
            _ => Next::Wait,
        }
    }

    /// The group's commits were read for the attempt under way: leaves out of it (and of what
    /// waits) each partition `committed` holds at or past the hand-over's offset, and returns
    /// the rest, to commit (the attempt stays under way until answered). Empty: nothing left
    /// to commit in this attempt.
    pub(crate) fn behind(
        &mut self,
        committed: &BTreeMap<PartitionKey, i64>,
        now: Instant,
    ) -> Vec<(PartitionKey, i64)> {
        let Some((attempt, since)) = self.in_flight.take() else {
            return Vec::new();
        };
        let (passed, behind): (Vec<_>, Vec<_>) = attempt
            .into_iter()
            .partition(|(key, offset)| passed(committed, key, *offset));
        for (key, offset) in passed {
            if self.waiting.get(&key) == Some(&offset) {
                self.waiting.remove(&key);
            }
        }
        if self.waiting.is_empty() {
            self.give_up_at = None;
        } else if behind.is_empty() {
            self.next_attempt = Some(now);
        }
        if !behind.is_empty() {
            self.in_flight = Some((behind.clone(), since));
        }
        behind
    }

    /// Everything that waits, for the source's last commit (forgotten here).
    pub(crate) fn take_all(&mut self) -> BTreeMap<PartitionKey, i64> {
        std::mem::take(self).waiting
    }
}

/// The group's commits `committed` hold `key` at or past `offset`: its hand-over there is
/// left out.
pub(crate) fn passed(
    committed: &BTreeMap<PartitionKey, i64>,
    key: &PartitionKey,
    offset: i64,
) -> bool {
    committed.get(key).is_some_and(|&c| c >= offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartitionKey {
        ("in".to_owned(), p)
    }

    #[test]
    fn a_refused_hand_over_is_attempted_again_after_the_pause_until_taken() {
        let t0 = Instant::now();
        let mut h = RefusedHandOvers::default();
        assert_eq!(h.next(t0), Next::Wait);
        h.refused([(key(0), 10)], "busy".into(), t0, Duration::from_secs(30));
        assert_eq!(h.len(), 1);
        assert_eq!(h.next(t0), Next::Wait);
        let t1 = t0 + RETRY_AFTER;
        let Next::Attempt(attempt) = h.next(t1) else {
            panic!("an attempt after the pause");
        };
        assert_eq!(attempt, vec![(key(0), 10)]);
        assert_eq!(h.behind(&BTreeMap::new(), t0), vec![(key(0), 10)]);
        // Under way: no second attempt until it is answered.
        assert_eq!(h.next(t1 + RETRY_AFTER * 10), Next::Wait);
        h.answered(Err("busy again".into()), t1);
        assert_eq!(h.next(t1), Next::Wait);
        let t2 = t1 + RETRY_AFTER;
        let Next::Attempt(_) = h.next(t2) else {
            panic!("a second attempt");
        };
        assert_eq!(h.behind(&BTreeMap::new(), t0).len(), 1);
        h.answered(Ok(()), t2);
        assert!(h.is_empty());
        assert_eq!(h.next(t2 + Duration::from_secs(60)), Next::Wait);
    }

    #[test]
    fn no_attempt_while_the_groups_commits_are_read_and_a_lost_answer_is_a_refusal() {
        let t0 = Instant::now();
        let mut h = RefusedHandOvers::default();
        h.refused([(key(0), 10)], "busy".into(), t0, Duration::from_secs(60));
        assert!(matches!(h.next(t0 + RETRY_AFTER), Next::Attempt(_)));
        // The read of the group's commits has not come back yet.
        assert_eq!(h.next(t0 + RETRY_AFTER * 20), Next::Wait);
        assert_eq!(h.behind(&BTreeMap::new(), t0), vec![(key(0), 10)]);
        // The commit's answer never comes: after `ANSWER_WITHIN` it counts as refused.
        let late = t0 + RETRY_AFTER + ANSWER_WITHIN;
        assert_eq!(h.next(late - RETRY_AFTER), Next::Wait);
        assert_eq!(h.next(late), Next::Wait);
        assert_eq!(
            h.next(late + RETRY_AFTER),
            Next::Attempt(vec![(key(0), 10)])
        );
    }

    #[test]
    fn a_partition_the_group_committed_at_or_past_the_hand_over_is_left_out() {
        let t0 = Instant::now();
        let mut h = RefusedHandOvers::default();
        let offsets = [(key(0), 10), (key(1), 20), (key(2), 30)];
        h.refused(offsets, "busy".into(), t0, Duration::from_secs(30));
        let Next::Attempt(_) = h.next(t0 + RETRY_AFTER) else {
            panic!("an attempt");
        };
        // The next owner committed 10 (equal) and 25 (past); partition 2 is behind.
        let committed = BTreeMap::from([(key(0), 10), (key(1), 25), (key(2), 5)]);
        assert_eq!(h.behind(&committed, t0), vec![(key(2), 30)]);
        assert_eq!(h.len(), 1);
        h.answered(Ok(()), t0);
        assert!(h.is_empty());
        // All passed: nothing is committed and nothing waits.
        h.refused([(key(3), 7)], "busy".into(), t0, Duration::from_secs(30));
        let Next::Attempt(_) = h.next(t0 + RETRY_AFTER) else {
            panic!("an attempt");
        };
        assert!(h.behind(&BTreeMap::from([(key(3), 9)]), t0).is_empty());
        assert!(h.is_empty());
    }

    #[test]
    fn after_the_timeout_the_hand_over_is_given_up_with_the_last_refusal() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(1);
        let mut h = RefusedHandOvers::default();
        h.refused([(key(0), 10)], "first".into(), t0, timeout);
        let Next::Attempt(_) = h.next(t0 + RETRY_AFTER) else {
            panic!("an attempt");
        };
        h.behind(&BTreeMap::new(), t0);
        h.answered(Err("second".into()), t0 + RETRY_AFTER);
        assert_eq!(
            h.next(t0 + timeout),
            Next::GiveUp(BTreeMap::from([(key(0), 10)]), "second".into())
        );
        assert!(h.is_empty());
        assert_eq!(h.next(t0 + timeout * 2), Next::Wait);
    }

    #[test]
    fn a_partition_revoked_again_is_handed_over_at_its_newest_offset() {
        let t0 = Instant::now();
        let mut h = RefusedHandOvers::default();
        h.refused([(key(0), 10)], "busy".into(), t0, Duration::from_secs(30));
        let Next::Attempt(_) = h.next(t0 + RETRY_AFTER) else {
            panic!("an attempt");
        };
        h.behind(&BTreeMap::new(), t0);
        // Given back and revoked again, refused again, while the first attempt is in flight.
        h.refused([(key(0), 40)], "busy".into(), t0, Duration::from_secs(30));
        h.answered(Ok(()), t0 + RETRY_AFTER);
        assert_eq!(h.len(), 1, "the newer offset still waits");
        let Next::Attempt(attempt) = h.next(t0 + RETRY_AFTER) else {
            panic!("an attempt at once");
        };
        assert_eq!(attempt, vec![(key(0), 40)]);
        assert_eq!(h.take_all(), BTreeMap::from([(key(0), 40)]));
        assert!(h.is_empty());
    }
}
