//! The registry: every built-in component, found by its kind and `type` name.
//!
//! [`build`] turns the settings of one job-file vertex (a JSON object without the common keys
//! `type`, `input`, `parallelism` and `partition`, and the sources' event-time fields, which the
//! runtime applies) into a factory that makes one instance per subtask. Settings are checked when the component is built, before the job starts; resources
//! such as files are opened by the factory, when the job starts.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tidemark_runtime::component::{OperatorFactory, SinkFactory, SourceFactory};

use crate::{operators, sinks, sources};

/// Whether a component is a source, an operator or a sink: the runtime's
/// [`VertexKind`](tidemark_runtime::VertexKind), one enum for both crates.
pub type ComponentKind = tidemark_runtime::VertexKind;

/// Builds a built-in component from its settings.
pub(crate) type BuildFn = fn(serde_json::Value, &BuildEnv) -> Result<Built, ConfigError>;

/// What the registry knows about one built-in component type.
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

/// The built-in component of `kind` named `type_name`, if there is one.
pub fn find(kind: ComponentKind, type_name: &str) -> Option<&'static ComponentInfo> {
    components()
        .iter()
        .find(|c| c.kind == kind && c.type_name == type_name)
}

/// The type names of every built-in component of `kind`.
pub fn type_names(kind: ComponentKind) -> Vec<&'static str> {
    components()
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| c.type_name)
        .collect()
}

/// The function a registered component is built with: its settings (a JSON object, `null`
/// for none) and the job's [`BuildEnv`] to a factory, or a [`ConfigError`].
pub type ComponentBuilder =
    Arc<dyn Fn(serde_json::Value, &BuildEnv) -> Result<Built, ConfigError> + Send + Sync>;

/// One component type of a [`Registry`].
#[derive(Clone)]
pub struct Component {
    /// The `type` name used in job files.
    pub type_name: String,
    /// Source, operator or sink.
    pub kind: ComponentKind,
    /// The settings it accepts (besides the fields every vertex has), for error messages and
    /// "did you mean" hints.
    pub fields: Vec<String>,
    /// One line saying what it does.
    pub summary: String,
    /// Keyed components (`reduce`, `window`) group records by key: their input edges default
    /// to `hash`, and another partitioning above parallelism 1 is an error.
    pub keyed: bool,
    builder: ComponentBuilder,
}

impl Component {
    /// A component of `kind` named `type_name` accepting `fields`, built by `builder`.
    pub fn new<F>(kind: ComponentKind, type_name: &str, fields: &[&str], builder: F) -> Self
    where
        F: Fn(serde_json::Value, &BuildEnv) -> Result<Built, ConfigError> + Send + Sync + 'static,
    {
        Component {
            type_name: type_name.to_owned(),
            kind,
            fields: fields.iter().map(|f| f.to_string()).collect(),
            summary: String::new(),
            keyed: false,
            builder: Arc::new(builder),
        }
    }

    /// Sets the one-line summary.
    pub fn summary(mut self, summary: &str) -> Self {
        self.summary = summary.to_owned();
        self
    }

    /// Marks the component as keyed (see [`Component::keyed`]).
    pub fn keyed(mut self) -> Self {
        self.keyed = true;
        self
    }

    /// Builds the component from `config`.
    pub fn build(&self, config: serde_json::Value, env: &BuildEnv) -> Result<Built, ConfigError> {
        let built = (self.builder)(config, env)?;
        if built.kind() != self.kind {
            return Err(ConfigError::invalid(
                &self.type_name,
                FieldError::new(
                    "",
                    format!(
                        "the {} type built {}, not {}",
                        self.type_name,
                        built.kind().with_article(),
                        self.kind.with_article()
                    ),
                ),
            ));
        }
        Ok(built)
    }
}

impl From<&ComponentInfo> for Component {
    fn from(info: &ComponentInfo) -> Self {
        let mut c = Component::new(info.kind, info.type_name, info.fields, info.build)
            .summary(info.summary);
        c.keyed = KEYED_BUILTINS.contains(&info.type_name) && info.kind == ComponentKind::Operator;
        c
    }
}

/// The built-in operators that group by key.
const KEYED_BUILTINS: [&str; 2] = ["reduce", "window"];

impl fmt::Debug for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Component")
            .field("type_name", &self.type_name)
            .field("kind", &self.kind)
            .field("fields", &self.fields)
            .field("keyed", &self.keyed)
            .finish()
    }
}

/// The component types a job file may name, found by kind and `type` name: the built-ins
/// ([`Registry::builtin`]) plus any a library user registers.
///
/// ```
/// use tidemark_operators::{config, Built, Component, ComponentKind, Registry};
/// use tidemark_runtime::testing::DiscardSink;
///
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Settings { #[serde(default)] verbose: bool }
///
/// let mut registry = Registry::builtin();
/// registry.register(Component::new(ComponentKind::Sink, "null", &["verbose"], |settings, _env| {
///     let Settings { verbose: _ } = config::parse_settings("null", settings)?;
///     Ok(Built::Sink(Box::new(|_| Ok(Box::new(DiscardSink)))))
/// }));
/// assert!(registry.find(ComponentKind::Sink, "null").is_some());
/// assert!(registry.find(ComponentKind::Source, "generator").is_some());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Registry {
    components: Vec<Component>,
}

impl Registry {
    /// A registry with no component at all.
    pub fn empty() -> Self {
        Registry::default()
    }

    /// The built-in components.
    pub fn builtin() -> Self {
        Registry {
            components: components().iter().map(Component::from).collect(),
        }
    }

    /// Adds a component type, replacing one of the same kind and name.
    pub fn register(&mut self, component: Component) -> &mut Self {
        match self
            .components
            .iter_mut()
            .find(|c| c.kind == component.kind && c.type_name == component.type_name)
        {
            Some(c) => *c = component,
            None => self.components.push(component),
        }
        self
    }

    /// Every component, in registration order.
    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// The component of `kind` named `type_name`.
    pub fn find(&self, kind: ComponentKind, type_name: &str) -> Option<&Component> {
        self.components
            .iter()
            .find(|c| c.kind == kind && c.type_name == type_name)
    }

    /// The type names of `kind`, in registration order.
    pub fn type_names(&self, kind: ComponentKind) -> Vec<&str> {
        self.components
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.type_name.as_str())
            .collect()
    }

    /// Builds the component of `kind` named `type_name` from `config`.
    pub fn build(
        &self,
        kind: ComponentKind,
        type_name: &str,
        config: serde_json::Value,
        env: &BuildEnv,
    ) -> Result<Built, ConfigError> {
        let c = self
            .find(kind, type_name)
            .ok_or_else(|| ConfigError::UnknownType {
                kind,
                type_name: type_name.to_owned(),
                known: self
                    .type_names(kind)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                elsewhere: ComponentKind::ALL
                    .into_iter()
                    .filter(|&k| k != kind && self.find(k, type_name).is_some())
                    .collect(),
            })?;
        c.build(config, env)
    }
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
    /// Check now that input files exist (`tidemark validate`), rather than when the job
    /// starts.
    pub check_inputs: bool,
}

impl BuildEnv {
    /// An environment whose relative paths resolve against `job_dir`.
    pub fn new(job_dir: impl Into<PathBuf>) -> Self {
        BuildEnv {
            job_dir: job_dir.into(),
            check_inputs: false,
        }
    }
}

/// What is wrong with one setting of a component.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingProblem {
    /// A field the component does not have.
    #[error("unknown field `{field}`, {}", expected_fields(expected))]
    UnknownField {
        /// As written.
        field: String,
        /// The fields accepted in that mapping.
        expected: Vec<String>,
    },
    /// A value outside a fixed set of names.
    #[error("unknown value `{value}`, expected {}", one_of(expected))]
    UnknownValue {
        /// As written.
        value: String,
        /// The accepted values.
        expected: Vec<String>,
    },
    /// A required field is absent.
    #[error("missing field `{0}`")]
    MissingField(String),
    /// Anything else: what is wrong and what is expected.
    #[error("{0}")]
    Message(String),
    /// A CEL expression that does not compile; `line` and `column` (1-based) are within the
    /// expression, for the job-file loader to turn into a position in the file.
    #[error("{message}, in `{expression}`")]
    Expression {
        /// The expression as written.
        expression: String,
        /// Line within the expression.
        line: usize,
        /// Column within that line.
        column: usize,
        /// What is wrong.
        message: String,
    },
}

fn expected_fields(expected: &[String]) -> String {
    if expected.is_empty() {
        "there are no fields".to_owned()
    } else {
        format!("expected {}", one_of(expected))
    }
}

fn one_of(expected: &[String]) -> String {
    match expected {
        [] => "nothing".to_owned(),
        [one] => format!("`{one}`"),
        many => format!(
            "one of {}",
            many.iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One problem with a component's settings, at a field path: `["disorder", "fraction"]`
/// for `disorder: {fraction: 2}`. For an unknown field the path is that of the mapping it
/// is in, and the field is in the problem. An empty path is about the settings as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The keys from the component's settings down to the field.
    pub path: Vec<String>,
    /// What is wrong.
    pub problem: SettingProblem,
}

impl FieldError {
    /// A problem described by `message` at the dotted `path` (`"disorder.fraction"`, or `""`
    /// for the settings as a whole).
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        FieldError {
            path: path
                .split('.')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            problem: SettingProblem::Message(message.into()),
        }
    }

    /// The keys down to where the problem is written: the path, plus the field for an
    /// unknown field.
    pub fn location(&self) -> Vec<&str> {
        let mut at: Vec<&str> = self.path.iter().map(String::as_str).collect();
        if let SettingProblem::UnknownField { field, .. } = &self.problem {
            at.push(field);
        }
        at
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path.join("."))?;
        }
        write!(f, "{}", self.problem)
    }
}

/// Why a component could not be built from its settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No component of this kind has this `type`.
    #[error("{}", unknown_type_message(*kind, type_name, known, elsewhere))]
    UnknownType {
        /// The kind that was looked in.
        kind: ComponentKind,
        /// The `type` that was given.
        type_name: String,
        /// The types of that kind, for the message.
        known: Vec<String>,
        /// The other kinds that have a component of this name.
        elsewhere: Vec<ComponentKind>,
    },
    /// The settings are not valid for the component: unknown or missing fields, values of
    /// the wrong type or out of range. Every problem found, each at its field path.
    #[error("invalid {type_name} settings: {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The component's `type`.
        type_name: String,
        /// What is wrong, where; never empty.
        problems: Vec<FieldError>,
    },
}

impl ConfigError {
    /// An [`ConfigError::Invalid`] of `type_name` with one problem.
    pub fn invalid(type_name: &str, problem: FieldError) -> Self {
        ConfigError::Invalid {
            type_name: type_name.to_owned(),
            problems: vec![problem],
        }
    }
}

fn unknown_type_message(
    kind: ComponentKind,
    type_name: &str,
    known: &[String],
    elsewhere: &[ComponentKind],
) -> String {
    let mut message = format!(
        "unknown {kind} type \"{type_name}\": expected one of {}",
        known.join(", ")
    );
    if !elsewhere.is_empty() {
        let sections: Vec<&str> = elsewhere.iter().map(|k| k.section()).collect();
        message.push_str(&format!(
            " (\"{type_name}\" is listed under {})",
            sections.join(" and ")
        ));
    }
    message
}

/// Builds the built-in component of `kind` named `type_name` from `config`: deserializes the
/// settings into its config struct (unknown fields are errors), checks them, and returns a
/// factory. See [`Registry`] for components of your own.
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
        known: type_names(kind).into_iter().map(str::to_owned).collect(),
        elsewhere: ComponentKind::ALL
            .into_iter()
            .filter(|&k| k != kind && find(k, type_name).is_some())
            .collect(),
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
            let ConfigError::Invalid { problems, .. } = err else {
                panic!("{err}")
            };
            // A required field (the file source's `path`) is missing as well.
            let unknown = problems
                .iter()
                .find(|p| matches!(p.problem, SettingProblem::UnknownField { .. }))
                .unwrap_or_else(|| panic!("{}: {problems:?}", c.type_name));
            assert!(unknown.path.is_empty(), "{problems:?}");
            match &unknown.problem {
                SettingProblem::UnknownField { field, expected } => {
                    assert_eq!(field, "no_such_field");
                    assert_eq!(expected, c.fields, "{}", c.type_name);
                }
                other => panic!("{}: {other}", c.type_name),
            }
        }
    }

    #[test]
    fn every_bad_field_is_reported_with_its_path() {
        let err = build(
            ComponentKind::Source,
            "generator",
            json!({"count": "many", "rat": 5, "key_distribution": "zipff",
                   "disorder": {"fractoin": 0.1, "delay": "1s"}}),
            &BuildEnv::default(),
        )
        .unwrap_err();
        let ConfigError::Invalid {
            type_name,
            problems,
        } = err
        else {
            panic!("{err}")
        };
        assert_eq!(type_name, "generator");
        let at: Vec<(Vec<&str>, &SettingProblem)> = problems
            .iter()
            .map(|p| (p.location(), &p.problem))
            .collect();
        assert_eq!(at.len(), 4, "{at:#?}");
        let find = |loc: &[&str]| {
            at.iter()
                .find(|(l, _)| l == loc)
                .unwrap_or_else(|| panic!("{loc:?} in {at:#?}"))
                .1
        };
        assert!(
            matches!(find(&["count"]), SettingProblem::Message(m) if m.contains("invalid type"))
        );
        assert!(
            matches!(find(&["rat"]), SettingProblem::UnknownField { field, .. } if field == "rat")
        );
        assert!(matches!(
            find(&["key_distribution"]),
            SettingProblem::UnknownValue { value, expected } if value == "zipff" && expected == &["uniform", "zipf"]
        ));
        assert!(matches!(
            find(&["disorder", "fractoin"]),
            SettingProblem::UnknownField { expected, .. } if expected.iter().any(|e| e == "fraction")
        ));
    }

    #[test]
    fn semantic_problems_carry_their_path() {
        let err = build(
            ComponentKind::Source,
            "generator",
            json!({"disorder": {"fraction": 2, "delay": "1s"}}),
            &BuildEnv::default(),
        )
        .unwrap_err();
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(problems[0].path, ["disorder", "fraction"]);
        assert_eq!(
            err.to_string(),
            "invalid generator settings: disorder.fraction: 2 is not a fraction from 0 to 1"
        );
    }

    #[test]
    fn a_registry_takes_components_of_its_own() {
        let mut registry = Registry::builtin();
        assert_eq!(registry.components().len(), components().len());
        assert!(
            registry
                .find(ComponentKind::Operator, "reduce")
                .unwrap()
                .keyed
        );
        assert!(
            registry
                .find(ComponentKind::Operator, "window")
                .unwrap()
                .keyed
        );
        assert!(!registry.find(ComponentKind::Operator, "map").unwrap().keyed);
        registry.register(
            Component::new(ComponentKind::Operator, "twice", &[], |_, env| {
                build(ComponentKind::Operator, "map", json!({"scale": 2}), env)
            })
            .keyed(),
        );
        let c = registry.find(ComponentKind::Operator, "twice").unwrap();
        assert!(c.keyed);
        let built = registry
            .build(
                ComponentKind::Operator,
                "twice",
                json!({}),
                &BuildEnv::default(),
            )
            .unwrap();
        assert_eq!(built.kind(), ComponentKind::Operator);
        // A builder that makes the wrong kind is an error, not a surprise at run time.
        registry.register(Component::new(
            ComponentKind::Sink,
            "oops",
            &[],
            |_, env| build(ComponentKind::Operator, "map", json!({}), env),
        ));
        let err = registry
            .build(ComponentKind::Sink, "oops", json!({}), &BuildEnv::default())
            .unwrap_err();
        assert!(
            err.to_string().contains("built a operator, not a sink")
                || err.to_string().contains("not a sink"),
            "{err}"
        );
        let err = registry
            .build(
                ComponentKind::Source,
                "twice",
                json!({}),
                &BuildEnv::default(),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown source type \"twice\": expected one of generator, file, stdin \
             (\"twice\" is listed under operators)"
        );
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
            ConfigError::UnknownType { kind: ComponentKind::Source, type_name, known, elsewhere }
                if type_name == "generatr" && known == &["generator", "file", "stdin"]
                    && elsewhere.is_empty()
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
        assert!(!text.contains("count:"), "{text}");
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
            err.contains("aggregate: unknown value `avg`, expected one of `count`"),
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
