//! The loading library as a user sees it: a component type of one's own, registered and named
//! from YAML; secrets never shown in its errors; `${VAR}` substitution.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tidemark_cli::{Component, LoadError, Loader};
use tidemark_operators::{config::parse_settings, Built, ComponentKind};
use tidemark_runtime::{run, BoxError, Record, Sink};

/// A sink counting what it receives into a shared counter.
struct Counting(Arc<AtomicU64>);

impl Sink for Counting {
    fn write(&mut self, _record: &Record) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VaultSettings {
    #[allow(dead_code)]
    token: u64,
}

fn loader(count: Arc<AtomicU64>) -> Loader {
    let mut loader = Loader::new();
    loader.register(Component::new(
        ComponentKind::Sink,
        "counting",
        &[],
        move |settings, _env| {
            // No settings of its own: anything given is an unknown field.
            let _: std::collections::BTreeMap<String, ()> = parse_settings("counting", settings)?;
            let count = count.clone();
            Ok(Built::Sink(Box::new(move |_| {
                Ok(Box::new(Counting(count.clone())) as Box<dyn Sink>)
            })))
        },
    ));
    loader.register(Component::new(
        ComponentKind::Sink,
        "vault",
        &["token"],
        |settings, _env| {
            let _: VaultSettings = parse_settings("vault", settings)?;
            Ok(Built::Sink(Box::new(|_| {
                Ok(Box::new(tidemark_runtime::testing::DiscardSink) as Box<dyn Sink>)
            })))
        },
    ));
    loader
}

#[test]
fn a_registered_component_runs_from_yaml() {
    let count = Arc::new(AtomicU64::new(0));
    let text = "
name: mine
sources:
  gen: {type: generator, count: 500}
sinks:
  out: {type: counting, input: gen}
";
    let job = loader(count.clone())
        .load_str(text, "mine.yaml", ".")
        .unwrap_or_else(|e| panic!("{e}"));
    let result = run(job.graph, job.config).unwrap();
    assert_eq!(result.outcome, tidemark_runtime::JobOutcome::Finished);
    assert_eq!(count.load(Ordering::Relaxed), 500);
}

#[test]
fn unknown_types_list_registered_ones_and_secrets_stay_hidden() {
    let text = "
name: mine
sources:
  gen: {type: generator, count: 5}
sinks:
  out:
    type: countng
    input: gen
  safe:
    type: vault
    input: gen
    token: hunter2
";
    let err = loader(Arc::default())
        .load_str(text, "mine.yaml", ".")
        .unwrap_err();
    let LoadError::JobFile(errors) = &err else {
        panic!("{err}")
    };
    let text = err.to_string();
    assert_eq!(errors.0.len(), 2, "{text}");
    assert!(text.contains("unknown sink type \"countng\""), "{text}");
    assert!(text.contains("counting"), "{text}");
    assert!(text.contains("did you mean \"counting\"?"), "{text}");
    assert!(text.contains("mine.yaml:12:5: sink \"safe\": invalid vault settings: token: invalid value (not shown: the setting is secret)"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn variables_are_substituted_and_unset_ones_named_with_their_line() {
    let text = "
name: ${JOB_NAME:-vars}
sources:
  gen: {type: generator, count: ${TIDEMARK_TEST_COUNT_UNSET_123}}
sinks:
  out: {type: discard, input: gen}
";
    let err = Loader::new().load_str(text, "vars.yaml", ".").unwrap_err();
    assert_eq!(
        err.to_string(),
        "vars.yaml:4:33: environment variable TIDEMARK_TEST_COUNT_UNSET_123 is not set: set it, \
         or write ${TIDEMARK_TEST_COUNT_UNSET_123:-default} for a default"
    );
    let job = Loader::new()
        .load_str(
            &text.replace("_UNSET_123}", "_UNSET_123:-7}"),
            "vars.yaml",
            ".",
        )
        .unwrap();
    assert_eq!(job.job.name, "vars");
    assert_eq!(
        job.job.vertex("gen").unwrap().config["count"],
        serde_json::json!(7)
    );
}

/// `channel_capacity` reaches the runtime's `JobConfig` from the job file, `-D` and the flag, in
/// that order of precedence, and is 8 when nothing sets it.
#[test]
fn channel_capacity_reaches_the_job_config() {
    let text = |capacity: &str| {
        format!(
            "name: queues\n{capacity}sources:\n  gen: {{type: generator, count: 1}}\nsinks:\n  out: {{type: discard, input: gen}}\n"
        )
    };
    let load = |loader: Loader, capacity: &str| {
        loader
            .load_str(&text(capacity), "queues.yaml", ".")
            .unwrap()
    };
    let job = load(Loader::new(), "");
    assert_eq!(job.config.channel_capacity, 8);
    assert_eq!(job.settings.json()["channel_capacity"], 8);
    let job = load(Loader::new(), "channel_capacity: 32\n");
    assert_eq!(job.config.channel_capacity, 32);
    assert_eq!(job.settings.json()["channel_capacity"], 32);
    let job = load(
        Loader::new().define("execution.channel-capacity", "64"),
        "channel_capacity: 32\n",
    );
    assert_eq!(job.config.channel_capacity, 64);
    let flags = tidemark_cli::args::SettingFlags {
        channel_capacity: Some(2),
        ..Default::default()
    };
    let job = load(
        Loader::new()
            .define("execution.channel-capacity", "64")
            .flags(flags),
        "channel_capacity: 32\n",
    );
    assert_eq!(job.config.channel_capacity, 2);
}

/// A keyed operator of one's own: it counts records per key and keeps the counts as keyed
/// state.
#[cfg(feature = "kafka")]
mod tally {
    use std::collections::HashMap;

    use tidemark_runtime::keyed_state::KeyedSnapshot;
    use tidemark_runtime::{BoxError, Operator, Output, Record, Value};

    #[derive(Default)]
    pub struct Tally(HashMap<Value, u64>);

    impl Operator for Tally {
        fn process(&mut self, record: Record, out: &mut Output) -> Result<(), BoxError> {
            *self.0.entry(record.key().into_owned()).or_default() += 1;
            out.emit(record);
            Ok(())
        }

        fn has_keyed_state(&mut self) -> bool {
            true
        }

        fn snapshot_keyed(&mut self, _: u64, state: &mut KeyedSnapshot) -> Result<(), BoxError> {
            for (key, n) in &self.0 {
                state.put(key, n)?;
            }
            Ok(())
        }
    }
}

/// Whether the job `type_name` (behind a Kafka exchange, with checkpoints) is loaded as,
/// with `tally` registered keyed or not, keeps its state in a state topic.
#[cfg(feature = "kafka")]
fn keeps_state_behind_an_exchange(type_name: &str, keyed: bool) -> bool {
    let mut component = Component::new(ComponentKind::Operator, "tally", &[], |_, _| {
        Ok(Built::Operator(Box::new(|_| {
            Ok(Box::new(tally::Tally::default()) as Box<dyn tidemark_runtime::Operator>)
        })))
    });
    if keyed {
        component = component.keyed();
    }
    let mut loader = Loader::new();
    loader.register(component);
    let extra = match type_name {
        "window" => "size: 1s, aggregates: {n: count}, ",
        _ => "",
    };
    let text = format!(
        "
name: mine
checkpoint: {{interval: 1s}}
sources:
  gen: {{type: generator, count: 10}}
operators:
  counted: {{type: {type_name}, input: gen, {extra}exchange: {{kafka: {{brokers: \"127.0.0.1:9\", partitions: 4}}}}}}
sinks:
  out: {{type: discard, input: counted}}
"
    );
    let job = loader.load_str(&text, "mine.yaml", ".");
    if let Err(e) = &job {
        panic!("{e}");
    }
    loader.kafka().keeps_state()
}

/// Behind a Kafka exchange, the state of every keyed vertex moves with the exchange's
/// partitions: a library user's component marked keyed as much as `window`, none that is not
/// keyed.
#[cfg(feature = "kafka")]
#[test]
fn a_keyed_component_of_ones_own_keeps_its_state_with_its_exchange() {
    assert!(keeps_state_behind_an_exchange("tally", true));
    assert!(keeps_state_behind_an_exchange("window", false));
    assert!(!keeps_state_behind_an_exchange("tally", false));
}
