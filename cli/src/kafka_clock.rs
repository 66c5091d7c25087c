//! The clock-offset exchange between the instances of a job that uses Kafka (`docs/kafka.md`,
//! "Clock offset between instances"): started by every instance of a job with a Kafka
//! component or exchange, named by its instance id, through the brokers of the first one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tidemark_kafka::clock::{system_clock, ClockService};
use tidemark_runtime::MetricsRegistry;

use crate::jobfile::JobFile;

/// How often an instance pings the others.
const EVERY: Duration = Duration::from_secs(2);

/// This instance's clock-offset exchange: started on a thread of its own, because the clock
/// topic may take up to `--kafka-timeout` to appear (or never, on brokers that do not create
/// topics) and the job does not wait for it; stopped when dropped.
pub(crate) struct Clock {
    service: Arc<Mutex<Option<ClockService>>>,
    ended: Arc<AtomicBool>,
}

impl Drop for Clock {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::SeqCst);
        let service = self
            .service
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(service);
    }
}

/// Starts the exchange as `instance` and exports its estimates once it runs, if the job has a
/// Kafka component; a failure to start is a warning, not an error (the job runs without).
pub(crate) fn start(
    job: &JobFile,
    registry: &Arc<MetricsRegistry>,
    instance: &str,
    kafka: &Arc<tidemark_kafka::KafkaJob>,
) -> Option<Clock> {
    // The brokers of the first Kafka component, or of the first exchange through Kafka.
    let config = job.vertices.iter().find_map(|v| {
        if v.type_name == tidemark_kafka::TYPE_NAME {
            return Some(&v.config);
        }
        match v.exchange.as_ref()?.get(tidemark_kafka::exchange::KIND)? {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        }
    })?;
    let brokers: tidemark_kafka::Brokers =
        serde_json::from_value(config.get("brokers")?.clone()).ok()?;
    let properties = config
        .get("properties")
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default();
    let clock = Clock {
        service: Arc::new(Mutex::new(None)),
        ended: Arc::new(AtomicBool::new(false)),
    };
    let (slot, ended) = (clock.service.clone(), clock.ended.clone());
    let (registry, job_name, instance) = (registry.clone(), job.name.clone(), instance.to_owned());
    let kafka = kafka.clone();
    let starter = move || {
        let started = ClockService::start(
            &brokers,
            &properties,
            &job_name,
            &instance,
            system_clock(),
            EVERY,
            kafka.timeout(),
        );
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if ended.load(Ordering::SeqCst) {
            return;
        }
        match started {
            Ok(service) => {
                let offsets = service.offsets().clone();
                // Markers that crossed an exchange are corrected with these estimates.
                kafka.set_clock_offsets(offsets.clone());
                registry.register_series(offsets);
                *slot = Some(service);
            }
            Err(e) => {
                eprintln!("tidemark: warning: no clock-offset estimate between instances: {e}");
            }
        }
    };
    std::thread::Builder::new()
        .name("tidemark-clock-start".into())
        .spawn(starter)
        .ok()?;
    Some(clock)
}
