//! The registry: every built-in component, found by its kind and `type` name.
//!
//! [`build`] turns the settings of one job-file vertex (a JSON object without the common keys
//! `type`, `input`, `parallelism` and `partition`, and the sources' event-time fields, which the
//! runtime applies) into a factory that makes one instance per subtask. Settings are checked when the component is built, before the job starts; resources
//! such as files are opened by the factory, when the job starts.

use std::fmt;
use std::path::PathBuf;

use tidemark_runtime::component::{OperatorFactory, SinkFactory, SourceFactory};

use crate::{operators, sinks, sources};

/// Whether a component is a source, an operator or a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComponentKind {
    /// Makes records; has no input.
    Source,
    /// Transforms records.
    Operator,
    /// Consumes records.
    Sink,
}

impl ComponentKind {
    /// `"source"`, `"operator"` or `"sink"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Source => "source",
            ComponentKind::Operator => "operator",
            ComponentKind::Sink => "sink",
        }
    }

    /// The job-file section that holds components of this kind: `"sources"`, `"operators"`
    /// or `"sinks"`.
    pub fn section(self) -> &'static str {
        match self {
            ComponentKind::Source => "sources",
            ComponentKind::Operator => "operators",
            ComponentKind::Sink => "sinks",
        }
    }

    /// All kinds, in job-file order.
    pub const ALL: [ComponentKind; 3] = [
        ComponentKind::Source,
        ComponentKind::Operator,
        ComponentKind::Sink,
    ];
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Builds a component from its settings.
pub(crate) type BuildFn = fn(serde_json::Value, &BuildEnv) -> Result<Built, ConfigError>;

/// What the registry knows about one component type.
#[derive(Clone, Copy)]
pub struct ComponentInfo {
    /// The `type` name used in job files.
    pub type_name: &'static str,
    /// Source, operator or sink.
    pub kind: ComponentKind,
    /// The settings it accepts (besides `type`, `input`, `parallelism` and `partition`), for
    /// "did you mean" hints.
    pub fields: &'static [&'static str],
    /// One line saying what it does.
    pub summary: &'static str,
    pub(crate) build: BuildFn,
}

impl ComponentInfo {
    /// Builds this component from `config`; see [`build`].
    pub fn build(&self, config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
        (self.build)(config, env)
    }
}

impl fmt::Debug for ComponentInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentInfo")
            .field("type_name", &self.type_name)
            .field("kind", &self.kind)
            .field("fields", &self.fields)
            .field("summary", &self.summary)
            .finish()
    }
}

static COMPONENTS: [ComponentInfo; 11] = [
    sources::generator::INFO,
    sources::file::INFO,
    sources::stdin::INFO,
    operators::map::INFO,
    operators::filter::INFO,
    operators::delay::INFO,
    operators::reduce::INFO,
    operators::window::INFO,
    sinks::discard::INFO,
    sinks::stdout::INFO,
    sinks::file::INFO,
];

/// Every built-in component: sources, then operators, then sinks.
pub fn components() -> &'static [ComponentInfo] {
    &COMPONENTS
}

/// The component of `kind` named `type_name`, if there is one.
pub fn find(kind: ComponentKind, type_name: &str) -> Option<&'static ComponentInfo> {
    components()
        .iter()
        .find(|c| c.kind == kind && c.type_name == type_name)
}

/// The type names of every component of `kind`.
pub fn type_names(kind: ComponentKind) -> Vec<&'static str> {
    components()
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| c.type_name)
        .collect()
}

/// A component built from its settings: it makes one instance per subtask.
pub enum Built {
    /// A source factory.
    Source(SourceFactory),
    /// An operator factory.
    Operator(OperatorFactory),
    /// A sink factory.
    Sink(SinkFactory),
}

impl Built {
    /// Source, operator or sink.
    pub fn kind(&self) -> ComponentKind {
        match self {
            Built::Source(_) => ComponentKind::Source,
            Built::Operator(_) => ComponentKind::Operator,
            Built::Sink(_) => ComponentKind::Sink,
        }
    }
}

impl fmt::Debug for Built {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Built::{:?}(..)", self.kind())
    }
}

/// What building a component may need to know about its job.
#[derive(Clone, Debug, Default)]
pub struct BuildEnv {
    /// The folder of the job file: relative paths in settings resolve against it.
    pub job_dir: PathBuf,
}

impl BuildEnv {
    /// An environment whose relative paths resolve against `job_dir`.
    pub fn new(job_dir: impl Into<PathBuf>) -> Self {
        BuildEnv {
            job_dir: job_dir.into(),
        }
    }
}

/// Why a component could not be built from its settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No component of this kind has this `type`.
    #[error("{}", unknown_type_message(*kind, type_name, known))]
    UnknownType {
        /// The kind that was looked in.
        kind: ComponentKind,
        /// The `type` that was given.
        type_name: String,
        /// The types of that kind, for the message.
        known: Vec<&'static str>,
    },
    /// The settings are not valid for the component: an unknown or missing field, a value of
    /// the wrong type or out of range. The message names the field.
    #[error("invalid {type_name} settings: {message}")]
    Invalid {
        /// The component's `type`.
        type_name: String,
        /// What is wrong and what is expected, e.g. ``unknown field `rat`, expected one of
        /// `count`, `rate`, ...`` or ``cost: invalid duration "fast": ...``.
        message: String,
    },
}

fn unknown_type_message(kind: ComponentKind, type_name: &str, known: &[&str]) -> String {
    let mut message = format!(
        "unknown {kind} type \"{type_name}\": expected one of {}",
        known.join(", ")
    );
    let elsewhere: Vec<&str> = ComponentKind::ALL
        .into_iter()
        .filter(|&k| k != kind && find(k, type_name).is_some())
        .map(ComponentKind::section)
        .collect();
    if !elsewhere.is_empty() {
        message.push_str(&format!(
            " (\"{type_name}\" is listed under {})",
            elsewhere.join(" and ")
        ));
    }
    message
}

/// Builds the component of `kind` named `type_name` from `config`: deserializes the settings
/// into its config struct (unknown fields are errors), checks them, and returns a factory.
///
/// `config` is the vertex's JSON object without the common keys `type`, `input`, `parallelism`
/// and `partition`; `null` counts as no settings.
pub fn build(
    kind: ComponentKind,
    type_name: &str,
    config: serde_json::Value,
    env: &BuildEnv,
) -> Result<Built, ConfigError> {
    let info = find(kind, type_name).ok_or_else(|| ConfigError::UnknownType {
        kind,
        type_name: type_name.to_owned(),
        known: type_names(kind),
    })?;
    info.build(config, env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_component_is_found_by_kind_and_name() {
        let names: Vec<_> = components()
            .iter()
            .map(|c| (c.kind.as_str(), c.type_name))
            .collect();
        assert_eq!(
            names,
            [
                ("source", "generator"),
                ("source", "file"),
                ("source", "stdin"),
                ("operator", "map"),
                ("operator", "filter"),
                ("operator", "delay"),
                ("operator", "reduce"),
                ("operator", "window"),
                ("sink", "discard"),
                ("sink", "stdout"),
                ("sink", "file"),
            ]
        );
        for c in components() {
            assert!(std::ptr::eq(find(c.kind, c.type_name).unwrap(), c));
            assert!(!c.summary.is_empty());
        }
        assert!(find(ComponentKind::Operator, "generator").is_none());
        assert!(find(ComponentKind::Sink, "").is_none());
    }

    /// The `fields` lists must be exactly what serde accepts: an unknown field makes serde list
    /// the expected ones.
    #[test]
    fn field_lists_match_the_config_structs() {
        for c in components() {
            let err = c
                .build(json!({"no_such_field": 1}), &BuildEnv::default())
                .unwrap_err();
            let message = match err {
                ConfigError::Invalid { message, .. } => message,
                other => panic!("{other}"),
            };
            assert!(
                message.contains("unknown field `no_such_field`"),
                "{}: {message}",
                c.type_name
            );
            let listed: Vec<String> = if message.contains("there are no fields") {
                Vec::new()
            } else {
                let (_, rest) = message.split_once("expected ").expect(&message);
                let rest = rest.strip_prefix("one of ").unwrap_or(rest);
                rest.split(", ")
                    .flat_map(|part| part.split(" or "))
                    .map(|f| f.replace('`', ""))
                    .collect()
            };
            assert_eq!(listed, c.fields, "{}", c.type_name);
        }
    }

    #[test]
    fn unknown_types_list_the_known_ones() {
        let err = build(
            ComponentKind::Source,
            "generatr",
            json!({}),
            &BuildEnv::default(),
        )
        .unwrap_err();
        assert!(matches!(
            &err,
            ConfigError::UnknownType { kind: ComponentKind::Source, type_name, known }
                if type_name == "generatr" && known == &["generator", "file", "stdin"]
        ));
        assert_eq!(
            err.to_string(),
            "unknown source type \"generatr\": expected one of generator, file, stdin"
        );
        let err = build(
            ComponentKind::Source,
            "map",
            json!({}),
            &BuildEnv::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with("(\"map\" is listed under operators)"),
            "{err}"
        );
        let err = build(
            ComponentKind::Operator,
            "file",
            json!({}),
            &BuildEnv::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with("(\"file\" is listed under sources and sinks)"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = build(
            ComponentKind::Source,
            "generator",
            json!({"count": 10, "rat": 5}),
            &BuildEnv::default(),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("invalid generator settings: unknown field `rat`, expected one of"),
            "{text}"
        );
        assert!(text.contains("`rate`"), "{text}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let err = build(
            ComponentKind::Operator,
            "map",
            json!({"cost": "fast"}),
            &BuildEnv::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cost: invalid duration \"fast\": expected a duration like"),
            "{err}"
        );
        let err = build(
            ComponentKind::Operator,
            "reduce",
            json!({"aggregate": "avg"}),
            &BuildEnv::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("aggregate: unknown variant `avg`, expected one of `count`"),
            "{err}"
        );
    }

    #[test]
    fn components_without_settings_accept_null() {
        let built = build(
            ComponentKind::Sink,
            "discard",
            serde_json::Value::Null,
            &BuildEnv::default(),
        )
        .unwrap();
        assert_eq!(built.kind(), ComponentKind::Sink);
    }
}
