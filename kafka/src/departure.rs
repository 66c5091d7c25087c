//! Leaving a consumer group together: the `kafka` source subtasks of one group in this process
//! (the sources and the readers of exchanges, `docs/kafka.md`, "Stopping") leave the group only
//! once every one of them has made its last commit, and then one after another.
//!
//! Every member that leaves a group starts a rebalance, and the group refuses commits while it
//! rebalances (`REBALANCE_IN_PROGRESS`): a commit waits until the rebalance ends, which takes
//! until every remaining member has joined again — on librdkafka's mock cluster always
//! `session.timeout.ms` less 1 s. Subtasks that left one by one, each as soon as its own last
//! checkpoint was committed, made the last commits of the others wait for one rebalance after
//! another; the last checkpoint of one subtask often waits for another subtask to end (barrier
//! alignment), so with two instances stopped at once the waits added up past
//! `--drain-timeout`. Leaving together costs one rebalance per instance.
//!
//! Once all are ready they leave one at a time: a member takes the group's turn, asks the
//! coordinator for the group's state (DescribeGroups), leaves and closes, and gives the turn on.
//! Kafka takes a leave at any moment, also in the middle of a rebalance
//! (`PreparingRebalance`, `CompletingRebalance`): no one waits for those. A coordinator that
//! names a state Kafka's protocol does not have is another matter: tansu 0.6 says `Unknown`
//! while a rebalance waits for the SyncGroup of the leader it has chosen, and when that leader
//! leaves then, it keeps the departed leader and refuses every remaining member's sync for good
//! (two members of one process leaving back to back, the second of them the leader, was
//! enough). So while the coordinator names such a state, the member serves the group (polling:
//! its own rejoin may be what completes the rebalance) until the group is settled or
//! `--kafka-timeout` passed, and leaves then. Where the coordinator does not answer
//! DescribeGroups (librdkafka's mock cluster), nobody waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use rdkafka::consumer::Consumer;

/// Members and members ready to leave, per group (and brokers).
#[derive(Debug, Default)]
struct Party {
    members: usize,
    ready: usize,
    /// Held by the member that is leaving.
    turn: Arc<Mutex<()>>,
}

/// The parties of one job in this process ([`crate::KafkaJob`]).
#[derive(Debug, Default)]
pub(crate) struct Departures {
    parties: Mutex<HashMap<String, Party>>,
}

impl Departures {
    fn with_party<T>(&self, key: &str, f: impl FnOnce(&mut Party) -> T) -> T {
        let mut all = self.parties.lock().unwrap_or_else(|e| e.into_inner());
        let party = all.entry(key.to_owned()).or_default();
        let out = f(party);
        if party.members == 0 {
            all.remove(key);
        }
        out
    }
}

/// One member of a group in this process, from its subscription until it has left.
#[derive(Debug)]
pub(crate) struct Departure {
    departures: Arc<Departures>,
    key: String,
    ready: bool,
}

impl Departure {
    /// A member of `group` at `brokers` joins.
    pub(crate) fn join(departures: &Arc<Departures>, brokers: &str, group: &str) -> Departure {
        let key = format!("{brokers}\n{group}");
        departures.with_party(&key, |p| p.members += 1);
        Departure {
            departures: departures.clone(),
            key,
            ready: false,
        }
    }

    /// This member has made its last commit and waits to leave.
    pub(crate) fn ready(&mut self) {
        if !self.ready {
            self.ready = true;
            self.departures.with_party(&self.key, |p| p.ready += 1);
        }
    }

    /// Every member of the group in this process is ready to leave.
    pub(crate) fn all_ready(&self) -> bool {
        self.departures
            .with_party(&self.key, |p| p.ready >= p.members)
    }

    /// The lock a member holds while it leaves: one member of the group in this process leaves
    /// at a time.
    pub(crate) fn turn(&self) -> Arc<Mutex<()>> {
        self.departures.with_party(&self.key, |p| p.turn.clone())
    }
}

/// Takes `turn` once it is free, calling `meanwhile` between tries (serving the group); gives
/// up when `meanwhile` says so (false).
pub(crate) fn take_turn<'a>(
    turn: &'a Mutex<()>,
    mut meanwhile: impl FnMut() -> bool,
) -> Option<MutexGuard<'a, ()>> {
    loop {
        match turn.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => {
                if !meanwhile() {
                    return None;
                }
            }
        }
    }
}

/// What a group's coordinator says of the group, as far as leaving it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupState {
    /// Stable, empty or dead: nothing under way.
    Settled,
    /// In a rebalance as Kafka's protocol defines it (`PreparingRebalance`,
    /// `CompletingRebalance`, or `Assigning`): the coordinator copes with a member leaving.
    Rebalancing(String),
    /// A state Kafka's protocol does not define (tansu's `Unknown`): wait until it passes.
    Undefined(String),
    /// The coordinator did not say (no DescribeGroups, no answer in time, not authorised).
    NotSaid(String),
}

/// Asks the coordinator of `group` what state it is in, waiting at most `timeout`.
pub(crate) fn group_state<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
    consumer: &C,
    group: &str,
    timeout: Duration,
) -> GroupState {
    match consumer.fetch_group_list(Some(group), timeout) {
        Err(e) => GroupState::NotSaid(e.to_string()),
        Ok(list) => match list.groups().iter().find(|g| g.name() == group) {
            None => GroupState::NotSaid("the group is not listed".into()),
            Some(info) => state_of(info.state()),
        },
    }
}

/// A group state as DescribeGroups names it.
fn state_of(state: &str) -> GroupState {
    match state {
        "Stable" | "Empty" | "Dead" => GroupState::Settled,
        // KIP-848's `Assigning` too: the coordinator computes the assignment itself.
        "PreparingRebalance" | "CompletingRebalance" | "Assigning" | "Reconciling" => {
            GroupState::Rebalancing(state.to_owned())
        }
        "" => GroupState::NotSaid("no state given".into()),
        other => GroupState::Undefined(other.to_owned()),
    }
}

impl Drop for Departure {
    fn drop(&mut self) {
        let ready = self.ready;
        self.departures.with_party(&self.key, |p| {
            p.members = p.members.saturating_sub(1);
            if ready {
                p.ready = p.ready.saturating_sub(1);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_leave_once_all_are_ready() {
        let d = Arc::new(Departures::default());
        let mut a = Departure::join(&d, "h:1", "departure-test");
        let mut b = Departure::join(&d, "h:1", "departure-test");
        // Another group, or the same name at other brokers, is not waited for.
        let other = Departure::join(&d, "h:1", "departure-test-other");
        let elsewhere = Departure::join(&d, "h:2", "departure-test");
        a.ready();
        a.ready();
        assert!(!a.all_ready() && !b.all_ready());
        b.ready();
        assert!(a.all_ready() && b.all_ready());
        // One has left: the other is still ready; a newcomer is not.
        drop(a);
        assert!(b.all_ready());
        let c = Departure::join(&d, "h:1", "departure-test");
        assert!(!b.all_ready() && !c.all_ready());
        drop(c);
        assert!(b.all_ready());
        assert!(!other.all_ready() && !elsewhere.all_ready());
        // Another job in this process is a party of its own.
        let other_job = Arc::new(Departures::default());
        let mut x = Departure::join(&other_job, "h:1", "departure-test");
        x.ready();
        assert!(x.all_ready() && !other.all_ready());
    }

    #[test]
    fn members_of_one_group_take_turns_to_leave() {
        let d = Arc::new(Departures::default());
        let a = Departure::join(&d, "h:1", "turn-test");
        let b = Departure::join(&d, "h:1", "turn-test");
        let other = Departure::join(&d, "h:1", "turn-test-other");
        let (turn_a, turn_b, turn_other) = (a.turn(), b.turn(), other.turn());
        let held = take_turn(&turn_a, || unreachable!("the turn is free")).unwrap();
        // b waits while a leaves, serving its group meanwhile; another group does not wait.
        let mut served = 0;
        assert!(take_turn(&turn_b, || {
            served += 1;
            served < 3
        })
        .is_none());
        assert_eq!(served, 3);
        assert!(take_turn(&turn_other, || false).is_some());
        drop(held);
        assert!(take_turn(&turn_b, || false).is_some());
    }

    #[test]
    fn only_a_state_kafka_does_not_define_is_waited_for() {
        for settled in ["Stable", "Empty", "Dead"] {
            assert_eq!(state_of(settled), GroupState::Settled);
        }
        for rebalancing in ["PreparingRebalance", "CompletingRebalance", "Assigning"] {
            assert_eq!(
                state_of(rebalancing),
                GroupState::Rebalancing(rebalancing.into())
            );
        }
        // tansu's word for a rebalance waiting for its leader's sync.
        assert_eq!(state_of("Unknown"), GroupState::Undefined("Unknown".into()));
        assert!(matches!(state_of(""), GroupState::NotSaid(_)));
    }
}
