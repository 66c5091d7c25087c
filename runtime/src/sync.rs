//! The one policy for poisoned locks (docs/architecture.md, "Locks and panics").
//!
//! A `Mutex` is poisoned when a thread panicked while it held the guard. In Tidemark that
//! panic is a bug, already reported where it happened: a task thread's panic is caught and ends
//! the job as [`JobOutcome::Failed`](crate::JobOutcome::Failed) with its message; any other
//! thread's is printed by the panic hook and ends that thread. Every critical
//! section in the workspace keeps the data it guards consistent at every point where it could
//! panic (the work that can fail is done before the lock is taken, or the section is a single
//! insert, update or take), so the guard is taken back and used as it is: the threads still
//! running (the stop, the checkpoint writer, the metrics endpoint, the report) see consistent
//! data and finish the job's failure, and nothing a subtask submitted (state, offsets,
//! metrics) is dropped because another thread panicked.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the guard back from a poisoned lock ([module docs](self)).
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
