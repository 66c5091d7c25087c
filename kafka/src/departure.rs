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
use std::sync::{Mutex, OnceLock};

/// Members and members ready to leave, per group (and brokers).
#[derive(Debug, Default)]
struct Party {
    members: usize,
    ready: usize,
}

fn parties() -> &'static Mutex<HashMap<String, Party>> {
    static PARTIES: OnceLock<Mutex<HashMap<String, Party>>> = OnceLock::new();
    PARTIES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn with_party<T>(key: &str, f: impl FnOnce(&mut Party) -> T) -> T {
    let mut all = parties().lock().unwrap_or_else(|e| e.into_inner());
    let party = all.entry(key.to_owned()).or_default();
    let out = f(party);
    if party.members == 0 {
        all.remove(key);
    }
    out
}

/// One member of a group in this process, from its subscription until it has left.
#[derive(Debug)]
pub(crate) struct Departure {
    key: String,
    ready: bool,
}

impl Departure {
    /// A member of `group` at `brokers` joins.
    pub(crate) fn join(brokers: &str, group: &str) -> Departure {
        let key = format!("{brokers}\n{group}");
        with_party(&key, |p| p.members += 1);
        Departure { key, ready: false }
    }

    /// This member has made its last commit and waits to leave.
    pub(crate) fn ready(&mut self) {
        if !self.ready {
            self.ready = true;
            with_party(&self.key, |p| p.ready += 1);
        }
    }

    /// Every member of the group in this process is ready to leave.
    pub(crate) fn all_ready(&self) -> bool {
        with_party(&self.key, |p| p.ready >= p.members)
    }
}

impl Drop for Departure {
    fn drop(&mut self) {
        let ready = self.ready;
        with_party(&self.key, |p| {
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
        let mut a = Departure::join("h:1", "departure-test");
        let mut b = Departure::join("h:1", "departure-test");
        // Another group, or the same name at other brokers, is not waited for.
        let other = Departure::join("h:1", "departure-test-other");
        let elsewhere = Departure::join("h:2", "departure-test");
        a.ready();
        a.ready();
        assert!(!a.all_ready() && !b.all_ready());
        b.ready();
        assert!(a.all_ready() && b.all_ready());
        // One has left: the other is still ready; a newcomer is not.
        drop(a);
        assert!(b.all_ready());
        let c = Departure::join("h:1", "departure-test");
        assert!(!b.all_ready() && !c.all_ready());
        drop(c);
        assert!(b.all_ready());
        assert!(!other.all_ready() && !elsewhere.all_ready());
    }
}
