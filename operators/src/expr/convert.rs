//! Between event [`Value`]s and the `cel` crate's values: the resolver that hands an event's
//! fields to an expression (strings borrowed, not copied), the conversion of results back, and
//! run-time error messages in the spec's words.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::ExecutionError;
use tidemark_runtime::value::{Map, Value};

use super::event::{EvalError, EventRef, Number, Scope};

/// Hands the scope's event fields and `record` to an expression, on demand.
pub(crate) struct Resolver<'a> {
    pub scope: Scope<'a>,
}

impl VariableResolver for Resolver<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if variable == "record" {
            let mut map: HashMap<CelMapKey<'b>, Box<dyn Val + 'b>> = HashMap::with_capacity(2);
            map.insert(CelMapKey::from("key"), to_val(self.scope.key));
            map.insert(
                CelMapKey::from("timestamp"),
                Box::new(CelInt::from(self.scope.timestamp_ms)),
            );
            return Some(CowVal::owned(CelMap::from(map)));
        }
        match self.scope.event.made() {
            // `made` never gives a record.
            EventRef::Record(_) => None,
            EventRef::Value(event) => match event.get(variable) {
                Some(v) => Some(CowVal::Owned(to_val(v))),
                // The whole event, for `has(event.field)`, unless it has a field `event`.
                None if variable == "event" => Some(CowVal::Owned(to_val(event))),
                None => None,
            },
            EventRef::Map(event) => match event.get(variable) {
                Some(v) => Some(CowVal::Owned(to_val(v))),
                // As above.
                None if variable == "event" => Some(CowVal::Owned(map_to_val(event))),
                None => None,
            },
            EventRef::Numeric { key, value } if variable == "event" => {
                let mut map: HashMap<CelMapKey<'b>, Box<dyn Val + 'b>> = HashMap::with_capacity(2);
                map.insert(CelMapKey::from("key"), Box::new(CelInt::from(key)));
                map.insert(CelMapKey::from("value"), Box::new(CelDouble::from(value)));
                Some(CowVal::owned(CelMap::from(map)))
            }
            EventRef::Numeric { key, value } => match variable {
                "key" => Some(CowVal::owned(CelInt::from(key))),
                "value" => Some(CowVal::owned(CelDouble::from(value))),
                _ => None,
            },
        }
    }
}

/// An event value as a CEL value, borrowing its strings.
pub(crate) fn to_val<'b>(v: &'b Value) -> Box<dyn Val + 'b> {
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Int(i) => Box::new(CelInt::from(*i)),
        Value::Double(d) => Box::new(CelDouble::from(*d)),
        Value::String(s) => Box::new(CelString::from(&**s)),
        Value::List(l) => Box::new(CelList::from(l.iter().map(to_val).collect::<Vec<_>>())),
        Value::Map(m) => map_to_val(m),
    }
}

/// An event map as a CEL map, borrowing its strings.
fn map_to_val<'b>(m: &'b Map) -> Box<dyn Val + 'b> {
    let map: HashMap<CelMapKey<'b>, Box<dyn Val + 'b>> = m
        .iter()
        .map(|(k, v)| (CelMapKey::from(k), to_val(v)))
        .collect();
    Box::new(CelMap::from(map))
}

/// A CEL result as an event value. A `uint` becomes an int where it fits, else a double;
/// timestamps, durations and bytes become their string forms.
pub(crate) fn to_value(v: &dyn Val) -> Result<Value, EvalError> {
    if let Some(b) = v.downcast_ref::<CelBool>() {
        return Ok(Value::Bool(*b.inner()));
    }
    if let Some(i) = v.downcast_ref::<CelInt>() {
        return Ok(Value::Int(*i.inner()));
    }
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        return Ok(Value::Double(*d.inner()));
    }
    if let Some(s) = v.downcast_ref::<CelString>() {
        return Ok(Value::String(Arc::from(s.inner())));
    }
    if v.downcast_ref::<CelNull>().is_some() {
        return Ok(Value::Null);
    }
    match cel::Value::try_from(v) {
        Ok(value) => Ok(from_cel(&value)),
        Err(e) => Err(EvalError {
            message: format!("gave a value that is not JSON data: {e}"),
        }),
    }
}

fn from_cel(v: &cel::Value) -> Value {
    match v {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::Int(*i),
        cel::Value::UInt(u) => match i64::try_from(*u) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Double(*u as f64),
        },
        cel::Value::Float(d) => Value::Double(*d),
        cel::Value::String(s) => Value::String(Arc::from(s.as_str())),
        cel::Value::List(l) => Value::List(Arc::new(l.iter().map(from_cel).collect())),
        cel::Value::Map(m) => {
            // CEL maps have no order: sort the keys so output is stable.
            let mut entries: Vec<(String, Value)> = m
                .map
                .iter()
                .map(|(k, v)| (key_text(k), from_cel(v)))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut map = Map::with_capacity(entries.len());
            for (k, v) in entries {
                map.insert(k, v);
            }
            Value::Map(Arc::new(map))
        }
        other => Value::String(Arc::from(display(other).as_str())),
    }
}

fn key_text(k: &cel::objects::Key) -> String {
    match k {
        cel::objects::Key::String(s) => s.to_string(),
        cel::objects::Key::Int(i) => i.to_string(),
        cel::objects::Key::Uint(u) => u.to_string(),
        cel::objects::Key::Bool(b) => b.to_string(),
    }
}

/// Timestamps, durations, bytes and the rest as text.
fn display(v: &cel::Value) -> String {
    match v {
        cel::Value::Timestamp(t) => t.to_rfc3339(),
        cel::Value::Duration(d) => format!("{}s", d.num_milliseconds() as f64 / 1000.0),
        cel::Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

pub(crate) fn as_bool(v: &dyn Val) -> Option<bool> {
    v.downcast_ref::<CelBool>().map(|b| *b.inner())
}

pub(crate) fn is_null(v: &dyn Val) -> bool {
    v.downcast_ref::<CelNull>().is_some()
}

pub(crate) fn as_number(v: &dyn Val) -> Option<Number> {
    if let Some(i) = v.downcast_ref::<CelInt>() {
        return Some(Number::Int(*i.inner()));
    }
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        return Some(Number::Double(*d.inner()));
    }
    v.downcast_ref::<CelUInt>()
        .map(|u| match i64::try_from(*u.inner()) {
            Ok(i) => Number::Int(i),
            Err(_) => Number::Double(*u.inner() as f64),
        })
}

/// A value for a message: its type and, for scalars, the value (`a string "x"`).
pub(crate) fn describe(v: &dyn Val) -> String {
    match to_value(v) {
        Ok(value @ (Value::String(_) | Value::Int(_) | Value::Double(_))) => {
            format!("{} {value}", a(value.type_name()))
        }
        Ok(value) => a(value.type_name()).to_string(),
        Err(_) => format!("a {}", v.get_type().name()),
    }
}

fn a(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {type_name}")
}

/// The crate's error in the spec's words: a missing field names the event's fields.
pub(crate) fn error_message(e: &ExecutionError, event: &EventRef<'_>) -> String {
    match e {
        ExecutionError::UndeclaredReference(name) => {
            let fields = event.field_names();
            if fields.is_empty() {
                format!("no field \"{name}\" in the event (it has no fields)")
            } else {
                format!(
                    "no field \"{name}\" in the event (it has {})",
                    fields.join(", ")
                )
            }
        }
        ExecutionError::NoSuchKey(name) => format!("no field \"{name}\""),
        ExecutionError::DivisionByZero(v) => format!("division by zero: {} / 0", scalar(v)),
        ExecutionError::RemainderByZero(v) => format!("remainder by zero: {} % 0", scalar(v)),
        ExecutionError::Overflow(op, l, r) => {
            format!("int overflow: {} {} {}", scalar(l), symbol(op), scalar(r))
        }
        ExecutionError::UnsupportedBinaryOperator(op, l, r) => format!(
            "'{}' cannot be applied to {} and {}",
            symbol(op),
            cel_describe(l),
            cel_describe(r)
        ),
        ExecutionError::ValuesNotComparable(l, r) => format!(
            "{} and {} cannot be compared",
            cel_describe(l),
            cel_describe(r)
        ),
        other => other.to_string(),
    }
}

fn symbol(op: &str) -> &str {
    match op {
        "add" => "+",
        "sub" => "-",
        "mul" => "*",
        "div" => "/",
        "rem" => "%",
        other => other,
    }
}

fn scalar(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => format!("{u}u"),
        cel::Value::Float(d) => format!("{d:?}"),
        cel::Value::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}

fn cel_describe(v: &cel::Value) -> String {
    let t = match v {
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bool(_) => "bool",
        cel::Value::Null => "null",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        _ => return format!("{v:?}"),
    };
    match v {
        cel::Value::Int(_) | cel::Value::UInt(_) | cel::Value::Float(_) | cel::Value::String(_) => {
            format!("{} {}", a(t), scalar(v))
        }
        _ => a(t),
    }
}
