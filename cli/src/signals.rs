//! SIGINT and SIGTERM: the first asks the job to stop (sources stop, in-flight records drain,
//! the report is written, exit 0); a second one exits at once with code 130.

use crate::error::EXIT_INTERRUPTED;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::mpsc::{self, Receiver};

/// Installs the handlers. The receiver gets the first signal's name; a second signal exits the
/// process from the handler thread.
pub fn install() -> anyhow::Result<Receiver<&'static str>> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut received = 0;
            for signal in signals.forever() {
                received += 1;
                let name = if signal == SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                if received == 1 {
                    eprintln!(
                        "tidemark: {name}: stopping the job (sources stop, in-flight records \
                         drain); send it again to exit at once"
                    );
                    let _ = tx.send(name);
                } else {
                    eprintln!("tidemark: {name} again: exiting at once");
                    std::process::exit(i32::from(EXIT_INTERRUPTED));
                }
            }
        })?;
    Ok(rx)
}
