//! What an expression reads and gives: the event ([`EventRef`]) in its [`Scope`], the
//! [`Number`]s it gives and why it failed ([`EvalError`]), shared by the evaluator and its
//! conversions.

use tidemark_runtime::value::{Map, Value};

/// An event as an expression reads it: a [`Value`] (a map), or the generator's numeric event
/// `{"key": key, "value": value}` held without a map.
#[derive(Clone, Copy, Debug)]
pub enum EventRef<'a> {
    /// Any event.
    Value(&'a Value),
    /// An event's fields (what a record holds).
    Map(&'a Map),
    /// A record's event that may still be text ([`Record::from_json_object`]): the fields an
    /// expression reads are read from the text one by one ([`Record::field`]) unless the
    /// `cel` interpreter runs, which reads the event's fields made.
    ///
    /// [`Record::from_json_object`]: tidemark_runtime::Record::from_json_object
    /// [`Record::field`]: tidemark_runtime::Record::field
    Record(&'a tidemark_runtime::Record),
    /// `{"key": key, "value": value}`.
    Numeric {
        /// The `key` field.
        key: i64,
        /// The `value` field.
        value: f64,
    },
}

impl<'a> From<&'a Value> for EventRef<'a> {
    fn from(v: &'a Value) -> Self {
        EventRef::Value(v)
    }
}

impl<'a> From<&'a Map> for EventRef<'a> {
    fn from(m: &'a Map) -> Self {
        EventRef::Map(m)
    }
}

impl<'a> EventRef<'a> {
    /// The event with a record's fields made: never [`EventRef::Record`].
    pub fn made(self) -> EventRef<'a> {
        match self {
            EventRef::Record(r) => match (r.event_fields(), r.numeric_parts()) {
                (Some(m), _) => EventRef::Map(m),
                (None, Some((key, value))) => EventRef::Numeric { key, value },
                (None, None) => EventRef::Map(EMPTY.get_or_init(Map::new)),
            },
            other => other,
        }
    }

    /// The event as a value (the numeric event made into a map).
    pub fn to_value(&self) -> Value {
        match self.made() {
            EventRef::Record(_) => Value::from(Map::new()),
            EventRef::Value(v) => v.clone(),
            EventRef::Map(m) => Value::from(m.clone()),
            EventRef::Numeric { key, value } => {
                let mut m = tidemark_runtime::value::Map::with_capacity(2);
                m.insert("key", key);
                m.insert("value", value);
                Value::from(m)
            }
        }
    }

    /// The event's field names, for messages.
    pub fn field_names(&self) -> Vec<String> {
        match self.made() {
            EventRef::Record(_) => Vec::new(),
            EventRef::Value(v) => v
                .as_map()
                .map(|m| m.keys().map(str::to_owned).collect())
                .unwrap_or_default(),
            EventRef::Map(m) => m.keys().map(str::to_owned).collect(),
            EventRef::Numeric { .. } => vec!["key".to_owned(), "value".to_owned()],
        }
    }
}

/// The fields of a record that is neither numeric nor general (there is none).
static EMPTY: std::sync::OnceLock<Map> = std::sync::OnceLock::new();

/// What an expression reads: one record's event, key and timestamp.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The event; its fields are the expression's top-level variables.
    pub event: EventRef<'a>,
    /// `record.key` (`null` when the record has no key).
    pub key: &'a Value,
    /// `record.timestamp`: milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

/// Why an expression failed on a record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    /// What went wrong, e.g. `no field "w" in the event` or `division by zero: 100 / 0`.
    pub message: String,
}

/// A number an expression gave: ints kept apart from doubles, so sums of ints stay exact.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// An int (a CEL `uint` that fits is an int too).
    Int(i64),
    /// A double.
    Double(f64),
}

impl Number {
    /// The number as a double.
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Double(d) => d,
        }
    }
}

impl From<Number> for Value {
    fn from(n: Number) -> Value {
        match n {
            Number::Int(i) => Value::Int(i),
            Number::Double(d) => Value::Double(d),
        }
    }
}
