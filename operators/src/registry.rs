//! The registry: every built-in component, found by its kind and `type` name.
//!
//! [`build`] turns the settings of one job-file vertex (a JSON object without the common keys
//! `type`, `input`, `parallelism` and `partition`, and the sources' event-time fields, which the
//! runtime applies) into a factory that makes one instance per subtask. Settings are checked when the component is built, before the job starts; resources
//! such as files are opened by the factory, when the job starts.
//!
//! The registry knows the components; no component knows the registry: what they share
//! (their entry, [`BuildEnv`], [`Built`], [`ConfigError`]) is in [`crate::component`] and
//! [`crate::error`], re-exported here.

use std::fmt;
use std::sync::Arc;

pub use crate::component::{BuildEnv, Built, ComponentInfo, ComponentKind};
pub use crate::error::{ConfigError, FieldError, SettingProblem};
use crate::{operators, sinks, sources};

static COMPONENTS: [ComponentInfo; 12] = [
    sources::generator::INFO,
    sources::file::INFO,
    sources::stdin::INFO,
    operators::map::INFO,
    operators::filter::INFO,
    operators::delay::INFO,
    operators::reduce::INFO,
    operators::window::INFO,
    operators::join::INFO,
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
const KEYED_BUILTINS: [&str; 3] = ["reduce", "window", "join"];

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
                ("operator", "join"),
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
