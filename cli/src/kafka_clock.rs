//! The clock-offset exchange between the instances of a job that uses Kafka (`docs/kafka.md`,
//! "Clock offset between instances"): started with `--instance-id`, through the brokers of the
//! job's first Kafka component.

use std::sync::Arc;
use std::time::Duration;

use tidemark_kafka::clock::{system_clock, ClockService};
use tidemark_runtime::MetricsRegistry;

use crate::jobfile::JobFile;

/// How often an instance pings the others.
const EVERY: Duration = Duration::from_secs(2);

/// Starts the exchange and exports its estimates, if this instance has a name and the job a
/// Kafka component; a failure to start is a warning, not an error (the job runs without).
pub(crate) fn start(
    job: &JobFile,
    registry: &MetricsRegistry,
    instance: Option<&str>,
) -> Option<ClockService> {
    let instance = instance?;
    let vertex = job
        .vertices
        .iter()
        .find(|v| v.type_name == tidemark_kafka::TYPE_NAME)?;
    let brokers: tidemark_kafka::Brokers =
        serde_json::from_value(vertex.config.get("brokers")?.clone()).ok()?;
    let properties = vertex
        .config
        .get("properties")
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default();
    match ClockService::start(
        &brokers,
        &properties,
        &job.name,
        instance,
        system_clock(),
        EVERY,
    ) {
        Ok(service) => {
            let offsets = service.offsets().clone();
            registry.add_text_section(Arc::new(move |labels: &str| offsets.render(labels)));
            Some(service)
        }
        Err(e) => {
            eprintln!("tidemark: warning: no clock-offset estimate between instances: {e}");
            None
        }
    }
}
