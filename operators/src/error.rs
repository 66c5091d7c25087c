//! Why a component's settings are wrong: [`ConfigError`], made of [`FieldError`]s (a field
//! path and its [`SettingProblem`]).

use std::fmt;

// The runtime's type, as `crate::component::ComponentKind` is: this module needs nothing of the
// components' contract, which uses it.
use tidemark_runtime::VertexKind as ComponentKind;

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
