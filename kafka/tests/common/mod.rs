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

/// The Kafka context of a test binary's jobs (one per binary, as one per `tidemark run`).
pub fn kafka() -> &'static std::sync::Arc<tidemark_kafka::KafkaJob> {
    static KAFKA: std::sync::OnceLock<std::sync::Arc<tidemark_kafka::KafkaJob>> =
        std::sync::OnceLock::new();
    KAFKA.get_or_init(tidemark_kafka::KafkaJob::new)
}

/// Wall-clock time in nanoseconds, as the runtime gives a source.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Subtask `subtask` of 2 of source `in` of job `job`, made by `factory`, with checkpoints on
/// (it commits only when a checkpoint completes).
pub fn checkpointing_subtask(
    factory: &tidemark_kafka::KafkaSourceFactory,
    job: &str,
    subtask: usize,
) -> tidemark_kafka::KafkaSource {
    use tidemark_runtime::Source;
    let mut source = factory
        .make(&tidemark_runtime::SubtaskContext {
            job_name: job.into(),
            vertex_id: "in".into(),
            subtask,
            parallelism: 2,
            seed: 1,
        })
        .unwrap();
    source.enable_checkpoints();
    source
}
