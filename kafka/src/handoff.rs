//! Partitions that move between the `kafka` source subtasks of one process resume exactly
//! where the previous local owner stopped (`docs/kafka.md`, "Failover").
//!
//! The subtasks of one instance join the group one by one, so at a cold start the first to
//! join is given every partition, reads, and then hands some over to the next as it joins.
//! With checkpoints nothing is committed at that moment, and the new owner would resume at the
//! group's commit (or, with none, at `start`): reading again what the first one already handed
//! to the job. So the subtask that loses a partition leaves its read position here (the offset
//! after the last message it handed to the job), and the subtask of this process given the
//! partition next starts there, or at the group's commit if that lies further (the partition
//! went to another instance meanwhile, which committed past it).
//!
//! **The previous owner's records go out first.** Each source subtask has its own exchange
//! writer (chained behind it, with a producer of its own), and the reader behind a Kafka
//! exchange that keeps state drops a record whose origin is not newer than the highest it
//! took from that source partition (`exchange/replays.rs`). Were the new owner's first records
//! of a partition to reach an exchange partition before the last ones the previous owner's
//! writer still had queued, those would be dropped there as replays though nobody wrote them
//! again: the window counts they belong to would come out too low. So a position is left with
//! a [`Fence`], which the previous owner releases once its writers have delivered everything
//! it handed to the job (at its next poll, after the task wrote the records of the poll that
//! lost the partition); the new owner keeps the partition paused until then.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::metrics::PartitionKey;

/// Released (true) once the records the previous owner of a partition handed to the job have
/// left this process (module doc).
#[derive(Clone, Debug, Default)]
pub(crate) struct Fence(Arc<AtomicBool>);

impl Fence {
    pub(crate) fn release(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub(crate) fn released(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Read positions per (brokers and group, partition), of one job in this process
/// ([`crate::KafkaJob`]).
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    positions: Mutex<HashMap<(String, PartitionKey), (i64, Fence)>>,
}

impl Handoff {
    /// A subtask of group `group` lost `key` having handed everything before `offset` to the
    /// job; the new owner waits for `fence`.
    pub(crate) fn leave(&self, group: &str, key: &PartitionKey, offset: i64, fence: Fence) {
        self.positions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((group.to_owned(), key.clone()), (offset, fence));
    }

    /// A subtask of group `group` is given `key`: where the previous owner in this process
    /// stopped, if one did, and the fence to wait for before reading on (taken: it is used
    /// once).
    pub(crate) fn take(&self, group: &str, key: &PartitionKey) -> Option<(i64, Fence)> {
        self.positions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(group.to_owned(), key.clone()))
    }
}

/// Flushes one exchange writer chained in this thread's task: waits until everything it was
/// given is acknowledged by the brokers.
pub(crate) type FlushWriter = Box<dyn Fn() -> Result<(), String>>;

thread_local! {
    /// The exchange writers chained behind this task's source (registered at their first
    /// write, on the task's thread).
    static TASK_WRITERS: RefCell<Vec<FlushWriter>> = const { RefCell::new(Vec::new()) };
}

/// An exchange writer of this thread's task: flushed before the source releases a fence.
pub(crate) fn register_task_writer(flush: FlushWriter) {
    TASK_WRITERS.with(|w| w.borrow_mut().push(flush));
}

/// Flushes every exchange writer of this thread's task (none: nothing to wait for).
pub(crate) fn flush_task_writers() -> Result<(), String> {
    TASK_WRITERS.with(|w| w.borrow().iter().try_for_each(|flush| flush()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_left_is_taken_once_by_group() {
        let h = Handoff::default();
        let key = ("t".to_owned(), 3);
        h.leave("brokers|g", &key, 42, Fence::default());
        assert!(h.take("brokers|other", &key).is_none());
        assert_eq!(h.take("brokers|g", &key).map(|(o, _)| o), Some(42));
        assert!(h.take("brokers|g", &key).is_none());
    }

    #[test]
    fn the_new_owner_sees_the_fence_the_previous_one_releases() {
        let h = Handoff::default();
        let key = ("t".to_owned(), 3);
        let fence = Fence::default();
        h.leave("g", &key, 42, fence.clone());
        let (_, taken) = h.take("g", &key).expect("left");
        assert!(!taken.released());
        fence.release();
        assert!(taken.released());
    }

    #[test]
    fn the_task_writers_are_flushed_on_their_own_thread() {
        use std::sync::atomic::AtomicUsize;
        let flushed = Arc::new(AtomicUsize::new(0));
        let f = flushed.clone();
        std::thread::spawn(move || {
            assert_eq!(flush_task_writers(), Ok(()));
            register_task_writer(Box::new(move || {
                f.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }));
            assert_eq!(flush_task_writers(), Ok(()));
        })
        .join()
        .unwrap();
        assert_eq!(flushed.load(Ordering::Relaxed), 1);
        // Another thread (task) has none of them.
        assert_eq!(flush_task_writers(), Ok(()));
        assert_eq!(flushed.load(Ordering::Relaxed), 1);
    }
}
