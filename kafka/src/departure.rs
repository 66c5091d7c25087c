//! Leaving a consumer group together: the `kafka` source subtasks of one group in this process
//! (the sources and the readers of exchanges, `docs/kafka.md`, "Stopping") leave the group at
//! the same moment, once every one of them has made its last commit.
//!
//! Every member that leaves a group starts a rebalance, and the group refuses commits while it
//! rebalances (`REBALANCE_IN_PROGRESS`): a commit waits until the rebalance ends, which takes
//! until every remaining member has joined again — on librdkafka's mock cluster always
//! `session.timeout.ms` less 1 s. Subtasks that left one by one, each as soon as its own last
//! checkpoint was committed, made the last commits of the others wait for one rebalance after
//! another; the last checkpoint of one subtask often waits for another subtask to end (barrier
//! alignment), so with two instances stopped at once the waits added up past
//! `--drain-timeout`. Leaving together costs one rebalance per instance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Members and members ready to leave, per group (and brokers).
#[derive(Debug, Default)]
struct Party {
    members: usize,
    ready: usize,
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
}
