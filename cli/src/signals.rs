//! SIGINT and SIGTERM: the first asks the job to stop (sources stop, in-flight records drain
//! for at most `--drain-timeout`, the report is written, exit 0; with a checkpoint directory and
//! without `--drain`, a last checkpoint keeps open windows for a restore instead of firing
//! them, see `run.rs`); the second stops it hard (what
//! is in flight is dropped and counted, the report is written, exit 130); a third one exits at
//! once with code 130, in case even the hard stop hangs.
//!
//! Whatever the job is doing meanwhile (still being built, a broker call that hangs), the
//! process exits within `--drain-timeout` plus [`EXIT_WITHIN`] of the first signal, and within
//! [`EXIT_WITHIN`] of the second: this thread arms [`crate::deadline`] as each arrives.

use crate::deadline::{self, ExitCode, EXIT_WITHIN};
use crate::error::EXIT_INTERRUPTED;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// A signal's name and when it arrived.
pub type Signal = (&'static str, Instant);

/// Installs the handlers. The receiver gets the first two signals; a third signal exits the
/// process from the handler thread.
pub fn install(drain_timeout: Duration) -> anyhow::Result<Receiver<Signal>> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut received = 0;
            let code = ExitCode::default();
            for signal in signals.forever() {
                received += 1;
                let now = Instant::now();
                let name = if signal == SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                match received {
                    1 => {
                        eprintln!(
                            "tidemark: {name}: stopping the job (sources stop, in-flight \
                             records drain); send it again to stop at once"
                        );
                        deadline::arm(now + drain_timeout + EXIT_WITHIN, code.clone());
                    }
                    2 => {
                        eprintln!(
                            "tidemark: {name} again: stopping hard (records in flight are \
                             dropped and counted); send it once more to exit without a report"
                        );
                        code.set(EXIT_INTERRUPTED);
                        deadline::arm(now + EXIT_WITHIN, code.clone());
                    }
                    _ => {
                        eprintln!("tidemark: {name} a third time: exiting at once");
                        std::process::exit(i32::from(EXIT_INTERRUPTED));
                    }
                }
                let _ = tx.send((name, now));
            }
        })?;
    Ok(rx)
}
