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
//!
//! A group tansu calls `Stable` is not yet safe to leave either: its leader may be a member of
//! this process that has just synced while the others still rejoin (they learn of the rebalance
//! from their next heartbeat, and a cooperative member rejoins once more after giving partitions
//! up), and a rejoin with changed metadata puts the group back into a rebalance led by that
//! same leader — if the leader's LeaveGroup is on its way then, the group is stuck as above.
//! So the members waiting in this process say where they stand (their generation and how many
//! rebalances they have served, [`Standing`]), and a member leaves a stable group only once
//! all of them are in one generation and nothing has changed for [`CALM`] ([`Calm`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;

/// Members and members ready to leave, per group (and brokers).
#[derive(Debug, Default)]
struct Party {
    members: usize,
    ready: usize,
    /// Held by the member that is leaving.
    turn: Arc<Mutex<()>>,
    /// Where the members waiting to leave stand, by member.
    standings: BTreeMap<u64, Standing>,
}

/// Where a member waiting to leave stands in its group, as its consumer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Standing {
    /// The generation the member is in (librdkafka's; -1 outside the group).
    pub(crate) generation: i32,
    /// Rebalance events the member has served.
    pub(crate) rebalances: u64,
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
    /// Tells this member's standing apart from the others'.
    id: u64,
}

/// The next [`Departure::id`].
static NEXT_MEMBER: AtomicU64 = AtomicU64::new(0);

impl Departure {
    /// A member of `group` at `brokers` joins.
    pub(crate) fn join(departures: &Arc<Departures>, brokers: &str, group: &str) -> Departure {
        let key = format!("{brokers}\n{group}");
        departures.with_party(&key, |p| p.members += 1);
        Departure {
            departures: departures.clone(),
            key,
            ready: false,
            id: NEXT_MEMBER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Says where this member stands now (it is waiting to leave).
    pub(crate) fn report(&self, standing: Standing) {
        self.departures.with_party(&self.key, |p| {
            p.standings.insert(self.id, standing);
        });
    }

    /// This member has left the group: its standing no longer counts.
    pub(crate) fn gone(&self) {
        self.departures.with_party(&self.key, |p| {
            p.standings.remove(&self.id);
        });
    }

    /// Where the members of the group in this process that wait to leave stand, by member.
    pub(crate) fn standings(&self) -> Vec<(u64, Standing)> {
        self.departures.with_party(&self.key, |p| {
            p.standings.iter().map(|(k, v)| (*k, *v)).collect()
        })
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

/// How the warning of a member that leaves a group never settled within `--kafka-timeout`
/// begins (tests look for it: such a leave may leave tansu's group stuck).
pub(crate) const NOT_SETTLED: &str = "the consumer group is not settled";

/// How long the standings of the members waiting in this process must stay the same, all in
/// one generation, before one of them leaves a stable group. librdkafka starts a member's
/// follow-up rejoin (cooperative rebalancing) as soon as it has served the revocation, and a
/// member that joined learns of the rebalance at its next heartbeat: the wait covers the first
/// and the generations cover the second.
pub(crate) const CALM: Duration = Duration::from_millis(500);

/// Whether the members waiting in this process have been calm for [`CALM`]: all in one
/// generation, none serving a rebalance since.
#[derive(Debug, Default)]
pub(crate) struct Calm {
    since: Option<(Vec<(u64, Standing)>, Instant)>,
}

impl Calm {
    /// Looks at `standings` at `now`: true once they have been the same, all in one generation
    /// of the group, for [`CALM`].
    pub(crate) fn observe(&mut self, standings: Vec<(u64, Standing)>, now: Instant) -> bool {
        let one_generation = standings.first().is_some_and(|(_, first)| {
            first.generation >= 0
                && standings
                    .iter()
                    .all(|(_, s)| s.generation == first.generation)
        });
        if !one_generation {
            self.since = None;
            return false;
        }
        match &self.since {
            Some((seen, at)) if *seen == standings => now.duration_since(*at) >= CALM,
            _ => {
                self.since = Some((standings, now));
                false
            }
        }
    }

    /// Something moved (the coordinator is in a rebalance): start again.
    pub(crate) fn reset(&mut self) {
        self.since = None;
    }
}

/// Whether a member may leave now: the coordinator's `state` of the group, the standings of the
/// members waiting in this process and how calm they have been.
pub(crate) fn may_leave(
    state: &GroupState,
    standings: Vec<(u64, Standing)>,
    calm: &mut Calm,
    now: Instant,
) -> bool {
    match state {
        // Kafka copes with a leave in its own rebalance states; a coordinator that does not
        // say is not waited for (librdkafka's mock cluster).
        GroupState::Rebalancing(_) | GroupState::NotSaid(_) => true,
        GroupState::Undefined(_) => {
            calm.reset();
            false
        }
        GroupState::Settled => calm.observe(standings, now),
    }
}

impl Drop for Departure {
    fn drop(&mut self) {
        let ready = self.ready;
        let id = self.id;
        self.departures.with_party(&self.key, |p| {
            p.standings.remove(&id);
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

    fn standing(generation: i32, rebalances: u64) -> Standing {
        Standing {
            generation,
            rebalances,
        }
    }

    /// At a time (ms after the first step), the coordinator's state, two members' (generation,
    /// rebalances), and whether a member may leave then.
    type Step = (u64, GroupState, (i32, u64), (i32, u64), bool);

    /// Asks [`may_leave`] step after step, with one [`Calm`].
    fn walk(steps: &[Step]) {
        let t0 = Instant::now();
        let mut calm = Calm::default();
        for (ms, state, a, b, expected) in steps {
            let standings = vec![(1, standing(a.0, a.1)), (2, standing(b.0, b.1))];
            let now = t0 + Duration::from_millis(*ms);
            assert_eq!(
                may_leave(state, standings, &mut calm, now),
                *expected,
                "at {ms} ms: {state:?}, {a:?}, {b:?}"
            );
        }
    }

    #[test]
    fn a_stable_group_is_left_once_the_members_here_are_calm_in_one_generation() {
        use GroupState::*;
        let unknown = || Undefined("Unknown".into());
        walk(&[
            // One member still in the generation before (it has yet to rejoin): however long.
            (0, Settled, (9, 4), (10, 6), false),
            (900, Settled, (9, 4), (10, 6), false),
            // One generation: calm only once nothing changed for CALM.
            (1000, Settled, (10, 5), (10, 6), false),
            (1200, Settled, (10, 5), (10, 6), false),
            // A rebalance served meanwhile (a cooperative member's follow-up): it starts over.
            (1600, Settled, (10, 5), (10, 7), false),
            (2000, Settled, (10, 5), (10, 7), false),
            (2100, Settled, (10, 5), (10, 7), true),
            // The coordinator in a rebalance of its own kind: start over, whatever the standings.
            (2200, unknown(), (10, 5), (10, 7), false),
            (2300, Settled, (10, 5), (10, 7), false),
            (2800, Settled, (10, 5), (10, 7), true),
        ]);
        // Outside the group (-1) is no generation to agree on.
        walk(&[
            (0, Settled, (-1, 0), (-1, 0), false),
            (1000, Settled, (-1, 0), (-1, 0), false),
            (2000, Settled, (-1, 0), (-1, 0), false),
        ]);
        // Kafka's own rebalance states and a coordinator that does not say: no wait, even with
        // the members in different generations.
        walk(&[
            (
                0,
                Rebalancing("PreparingRebalance".into()),
                (3, 1),
                (4, 1),
                true,
            ),
            (0, NotSaid("no DescribeGroups".into()), (3, 1), (4, 1), true),
        ]);
    }

    #[test]
    fn a_member_that_left_no_longer_counts() {
        let d = Arc::new(Departures::default());
        let a = Departure::join(&d, "h:1", "standing-test");
        let b = Departure::join(&d, "h:1", "standing-test");
        a.report(standing(4, 2));
        b.report(standing(5, 3));
        assert_eq!(a.standings().len(), 2);
        b.gone();
        assert_eq!(a.standings(), vec![(a.id, standing(4, 2))]);
        b.report(standing(5, 3));
        drop(b);
        assert_eq!(a.standings(), vec![(a.id, standing(4, 2))]);
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
