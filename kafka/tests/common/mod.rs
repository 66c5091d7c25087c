//! Helpers for the Kafka tests: write and read topics of a mock cluster
//! (they live in [`tidemark_kafka::testing`]).
// Each test file uses some of these.
#![allow(unused_imports, dead_code)]

pub use tidemark_kafka::testing::{produce_ids, read_keys, read_keys_of_values};

/// Runs `step` until it says done (pausing 10 ms between tries), or fails naming `what` after
/// two minutes.
pub fn until(what: &str, mut step: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !step() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "gave up waiting: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
