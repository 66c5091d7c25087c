//! The `discard` sink: drops every record (for benchmarks and tests).
//!
//! ```yaml
//! sinks:
//!   out:
//!     type: discard
//!     input: per_user
//! ```

use serde::Deserialize;
use tidemark_runtime::{BoxError, Record, Sink, SubtaskContext};

use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
use crate::config;
use crate::error::ConfigError;

/// The registry entry.
pub(crate) const INFO: ComponentInfo = ComponentInfo {
    type_name: "discard",
    kind: ComponentKind::Sink,
    fields: &[],
    summary: "drops every record",
    build,
};

/// Settings of the `discard` sink: none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscardConfig {}

fn build(config: serde_json::Value, _env: &BuildEnv) -> Result<Built, ConfigError> {
    let DiscardConfig {} = config::parse(INFO.type_name, config)?;
    Ok(Built::Sink(Box::new(|_: &SubtaskContext| {
        Ok(Box::new(DiscardSink) as Box<dyn Sink>)
    })))
}

/// One subtask of the `discard` sink.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        Ok(())
    }

    fn write_batch(&mut self, _records: &[Record]) -> Result<(), BoxError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_no_settings_and_drops_records() {
        let err = build(json!({"path": "x"}), &BuildEnv::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown field `path`, there are no fields"),
            "{err}"
        );
        let Built::Sink(factory) = build(json!({}), &BuildEnv::default()).unwrap() else {
            panic!("not a sink")
        };
        let mut sink = factory(&crate::test_util::ctx(0, 1, 0)).unwrap();
        sink.write_batch(&[Record::new(1, 1.0, 1)]).unwrap();
        sink.write(&Record::new(1, 1.0, 1)).unwrap();
        sink.finish().unwrap();
    }
}
