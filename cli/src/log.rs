//! What the command writes on standard error through `tracing`: the libraries' warnings
//! (a checkpoint that failed, a Kafka commit not made, an exchange topic with the wrong number
//! of partitions) as the command's own lines, `tidemark: warning: <message>`, whatever
//! `RUST_LOG` says; and, with `RUST_LOG` set, the command's log in `tracing`'s format
//! (docs/cli.md, "Logging").

use std::fmt::{self, Write as _};
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt as _};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// The library crates whose warnings a user of the command reads.
const LIBRARIES: [&str; 3] = ["tidemark_runtime", "tidemark_operators", "tidemark_kafka"];

/// Whether `meta` is a library's warning, written as the command's own line.
fn for_the_user(meta: &Metadata<'_>) -> bool {
    meta.is_event()
        && *meta.level() == Level::WARN
        && LIBRARIES.iter().any(|crate_name| {
            meta.target()
                .strip_prefix(crate_name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
}

/// Installs the command's subscriber: [`UserLines`] for the libraries' warnings, and the
/// `RUST_LOG` log (without those, so a warning is not written twice).
pub(crate) fn init() {
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::from_default_env().and(filter_fn(|meta| !for_the_user(meta))));
    tracing_subscriber::registry()
        .with(log)
        .with(UserLines.with_filter(filter_fn(for_the_user)))
        .init();
}

/// Writes each event it is given as `tidemark: warning: <message>` on standard error.
pub(crate) struct UserLines;

impl<S: Subscriber> Layer<S> for UserLines {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let _ = writeln!(std::io::stderr(), "{}", user_line(event));
    }
}

/// `tidemark: warning: <message>`, the event's fields other than the message after it.
fn user_line(event: &Event<'_>) -> String {
    let mut line = Line(String::from("tidemark: warning: "));
    event.record(&mut line);
    line.0
}

/// The line being written: the message first, then `name=value` for every other field.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Keeps the lines [`user_line`] makes, for the events [`for_the_user`] lets through.
    struct Keep(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Keep {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            self.0.lock().unwrap().push(user_line(event));
        }
    }

    #[test]
    fn a_library_warning_reads_as_the_command_s_own_line() {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(Keep(kept.clone()).with_filter(filter_fn(for_the_user)));
        tracing::subscriber::with_default(subscriber, || {
            let n = 3;
            tracing::warn!(target: "tidemark_runtime::checkpoint", "checkpoint {n} failed: disk full");
            tracing::warn!(target: "tidemark_kafka::source", "kafka source \"in\": commit not made");
            tracing::warn!(target: "tidemark_kafka", partitions = 4, "exchange topic");
            // Not for the user: not a warning, or not one of the libraries.
            tracing::error!(target: "tidemark_runtime::job", "an error is the log's");
            tracing::info!(target: "tidemark_runtime::job", "started");
            tracing::warn!(target: "tidemark_cli::endpoint", "metrics endpoint");
            tracing::warn!(target: "tidemark_runtimes", "another crate");
        });
        assert_eq!(
            *kept.lock().unwrap(),
            [
                "tidemark: warning: checkpoint 3 failed: disk full",
                "tidemark: warning: kafka source \"in\": commit not made",
                "tidemark: warning: exchange topic partitions=4",
            ]
        );
    }
}
