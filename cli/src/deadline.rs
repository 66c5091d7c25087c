//! The exit deadline of a stop by a signal: the process exits within `--drain-timeout` plus
//! [`EXIT_WITHIN`] of SIGINT/SIGTERM, whatever its tasks or their broker calls are
//! doing (`docs/operations.md`, "Stopping").
//!
//! `run` meets the deadline itself: it stops the job hard when the drain times out, waits for
//! the tasks at most [`crate::run`]'s grace, writes the report and returns, and nothing it
//! drops then waits for a broker. [`arm`] is the net under that: a thread that, should the
//! process still be alive at the deadline (a report file on a disk that hangs, say), says so
//! and exits with the code the run would have had.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::error::EXIT_JOB_FAILED;

/// After a stop the process exits within `--drain-timeout` plus this, whatever its tasks or
/// broker calls are doing.
pub const EXIT_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// How much earlier than the deadline the net acts, for the exit itself to be done by then.
const EXIT_LATENCY: std::time::Duration = std::time::Duration::from_millis(250);

/// The exit code the net exits with: 1 (stopped hard after the drain timed out) unless `run`
/// says otherwise (130 after a second signal).
#[derive(Debug, Clone)]
pub struct ExitCode(Arc<AtomicU8>);

impl Default for ExitCode {
    fn default() -> Self {
        ExitCode(Arc::new(AtomicU8::new(EXIT_JOB_FAILED)))
    }
}

impl ExitCode {
    /// The code the net exits with from now on.
    pub fn set(&self, code: u8) {
        self.0.store(code, Ordering::SeqCst);
    }
}

/// Starts the net: at `at`, if the process still lives, it prints why and exits with `code`.
/// Returns at once; the thread ends with the process.
pub fn arm(at: Instant, code: ExitCode) {
    // Early by the time an exit takes on a loaded machine.
    let at = at.checked_sub(EXIT_LATENCY).unwrap_or(at);
    let spawned = std::thread::Builder::new()
        .name("tidemark-exit-deadline".into())
        .spawn(move || {
            while let Some(left) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
            let code = code.0.load(Ordering::SeqCst);
            let message = format!(
                "tidemark: still not ended at --drain-timeout plus {} after the stop: exiting \
                 now (exit {code})\n",
                tidemark_markers::format_duration(EXIT_WITHIN)
            );
            // Neither the standard streams' locks nor the exit handlers: the thread holding
            // them may be the one that is stuck.
            // SAFETY: write(2) of a valid buffer to fd 2, then _exit(2), which never returns.
            unsafe {
                libc::write(2, message.as_ptr().cast(), message.len());
                libc::_exit(i32::from(code));
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the exit deadline's thread");
    }
}
