//! The flags every task of a job shares (stop, abort, suspend) and the wake-ups that go with
//! them: the tasks and the chains they run read them, the job sets them.

use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Flags shared by all tasks of a job, and the wake-ups that go with them.
///
/// Set them with [`JobFlags::request_stop`] and [`JobFlags::request_abort`]: besides the flag,
/// each drops the sending ends of channels nothing is ever sent on, so every task waiting on
/// its receiving end ([`Wakes`]: a source's wait for its next record, a channel task's
/// blocking receive) wakes at once rather than at its next timed look.
pub(crate) struct JobFlags {
    pub stop: AtomicBool,
    pub abort: AtomicBool,
    /// Stop keeping state: operators do not emit what they hold at the end (open windows stay
    /// in the last checkpoint for a restore).
    pub suspend: AtomicBool,
    /// One per task, dropped at a stop or an abort (then `None`): wakes sources waiting for
    /// their next record.
    stop_wakes: Mutex<Option<Vec<Sender<()>>>>,
    /// One per task, dropped at an abort: wakes channel tasks blocked on their input.
    abort_wakes: Mutex<Option<Vec<Sender<()>>>>,
}

/// One task's ends of the [`JobFlags`] wake-ups.
///
/// Each task has its own channels: waiting in a `select!` registers with, then leaves, the
/// channel's waker list under its lock, and one list shared by every task was contended on each
/// wait (a channel task waits once per batch on a busy hash edge, and such a job spent much of
/// its context switches in `SyncWaker::unregister`).
pub(crate) struct Wakes {
    /// Disconnected at a stop or an abort.
    pub(crate) stopped: Receiver<()>,
    /// Disconnected at an abort.
    pub(crate) aborted: Receiver<()>,
}

impl JobFlags {
    pub(crate) fn new() -> Self {
        JobFlags {
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            suspend: AtomicBool::new(false),
            stop_wakes: Mutex::new(Some(Vec::new())),
            abort_wakes: Mutex::new(Some(Vec::new())),
        }
    }

    /// A task's own wake-ups; disconnected already if the stop or abort was requested before.
    pub(crate) fn wakes(&self) -> Wakes {
        Wakes {
            stopped: wake(&self.stop_wakes),
            aborted: wake(&self.abort_wakes),
        }
    }

    /// Asks the sources to stop, and wakes those that wait.
    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(take(&self.stop_wakes));
    }

    /// Asks every task to end at once, and wakes those that wait.
    pub(crate) fn request_abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
        drop(take(&self.stop_wakes));
        drop(take(&self.abort_wakes));
    }
}

impl Wakes {
    /// Sleeps for `wait`, or less if a stop or an abort is requested meanwhile.
    pub(crate) fn wait_for_stop(&self, wait: Duration) {
        let _ = self.stopped.recv_timeout(wait);
    }
}

/// A new wake-up channel whose sender `wakes` keeps (or drops at once, if it fired already).
fn wake(wakes: &Mutex<Option<Vec<Sender<()>>>>) -> Receiver<()> {
    // Capacity 1, not 0: waiting in a `select!` on a zero-capacity channel allocates.
    let (tx, rx) = crossbeam_channel::bounded(1);
    if let Some(senders) = wakes.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        senders.push(tx);
    }
    rx
}

fn take(wakes: &Mutex<Option<Vec<Sender<()>>>>) -> Option<Vec<Sender<()>>> {
    wakes.lock().unwrap_or_else(|e| e.into_inner()).take()
}
