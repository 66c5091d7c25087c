//! The event data model: [`Value`], the JSON data model (null, bool, int, double, string, list,
//! map with string keys in insertion order), and [`Map`], its object.
//!
//! A `Value` is 24 bytes; strings, lists and maps are reference counted, so cloning a value (or
//! a record holding one) never copies its data. Changing a shared list or map copies it first
//! (copy on write, [`Arc::make_mut`]).
//!
//! Numbers follow the spec: a JSON number without a fraction or exponent is an [`Value::Int`]
//! (64-bit; one too large for `i64` reads as a double), any other a [`Value::Double`]. Written
//! back, ints stay ints (`3`) and doubles keep full precision and their fraction (`5.0`); NaN and
//! infinities, which JSON cannot hold, are written as `null`.
//!
//! Equality is structural: `Int(1)` and `Double(1.0)` are different values (CEL's numeric
//! comparisons that mix them live in the expression code), and doubles compare by bits, so a
//! value can be a hash-map key ([`Eq`], [`Hash`]).
//!
//! (The runtime's in-band control elements, markers and watermarks, are [`crate::batch::Event`];
//! the data a record carries is a `Value` map, the record's *event*.)
//!
//! ```
//! use tidemark_runtime::value::{Map, Value};
//!
//! let v = Value::from_json(br#"{"user":"u1","amount":5.0,"n":3,"tags":["a"]}"#).unwrap();
//! assert_eq!(v.get("user").and_then(Value::as_str), Some("u1"));
//! assert_eq!(v.get("n"), Some(&Value::Int(3)));
//! assert_eq!(v.get("amount").and_then(Value::as_f64), Some(5.0));
//! assert_eq!(v.to_string(), r#"{"user":"u1","amount":5.0,"n":3,"tags":["a"]}"#);
//!
//! let mut m = Map::new();
//! m.insert("key", "a");
//! m.insert("total", 2.5);
//! assert_eq!(Value::from(m).to_string(), r#"{"key":"a","total":2.5}"#);
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::key_hash;
use crate::name::Name;

/// One value of the JSON data model.
#[derive(Clone, Debug, Default)]
pub enum Value {
    /// `null`
    #[default]
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A 64-bit integer: a JSON number without fraction or exponent.
    Int(i64),
    /// A double: any other JSON number.
    Double(f64),
    /// A UTF-8 string.
    String(Arc<str>),
    /// A list of values.
    List(Arc<Vec<Value>>),
    /// An object: string keys in insertion order.
    Map(Arc<Map>),
}

impl Value {
    /// The type name used in error messages: `null`, `bool`, `int`, `double`, `string`,
    /// `list` or `map` (CEL's names).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Double(_) => "double",
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
        }
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The bool, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The int, if this is one (a double is not converted).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number as a double: a double, or an int converted (rounded beyond 2^53).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Double(d) => Some(*d),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The list's items, if this is a list.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The map for changing, if this is one (copied first if shared).
    pub fn as_map_mut(&mut self) -> Option<&mut Map> {
        match self {
            Value::Map(m) => Some(Arc::make_mut(m)),
            _ => None,
        }
    }

    /// The field `name` of a map; `None` for a missing field or a value that is no map.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.as_map()?.get(name)
    }

    /// Parses one JSON document.
    pub fn from_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Writes the value as compact JSON (no spaces, map fields in order).
    pub fn write_json<W: io::Write>(&self, w: W) -> io::Result<()> {
        serde_json::to_writer(w, self).map_err(io::Error::from)
    }

    /// The key hash of the value ([`crate::key_hash`]): Kafka's murmur2 of its
    /// [canonical bytes](Value::with_canonical_bytes) with the sign bit cleared, from 0 to
    /// 2^31 − 1. `hash` edges route by it, key groups are it modulo `max_parallelism`, and a
    /// Kafka exchange's partition is it modulo the partition count. Equal values give equal
    /// hashes; the values never change between versions or machines (pinned by the table in
    /// `docs/state.md`). Nothing is allocated except for a list or a map (its JSON text).
    #[inline]
    pub fn routing_hash(&self) -> u32 {
        match self {
            Value::Int(i) => key_hash::hash_int(*i),
            Value::Double(d) => key_hash::hash_double(*d),
            Value::String(s) => key_hash::hash_bytes(s.as_bytes()),
            other => other.with_canonical_bytes(key_hash::hash_bytes),
        }
    }

    /// Calls `f` with the value's canonical bytes, the bytes its [key hash](Value::routing_hash)
    /// is taken of and a Kafka exchange's message key: a string's UTF-8 bytes; an int's 8
    /// bytes big endian (Kafka's `LongSerializer`); a double's IEEE 754 bits, 8 bytes big
    /// endian; a bool one byte (`1` or `0`); null none; a list or a map its compact JSON text
    /// (as [`Value::write_json`] writes it). Only a list or a map allocates (its text).
    #[inline]
    pub fn with_canonical_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Value::Null => f(&[]),
            Value::Bool(b) => f(&[*b as u8]),
            Value::Int(i) => f(&i.to_be_bytes()),
            Value::Double(d) => f(&d.to_bits().to_be_bytes()),
            Value::String(s) => f(s.as_bytes()),
            Value::List(_) | Value::Map(_) => {
                let mut text = Vec::new();
                self.write_json(&mut text)
                    .expect("writing to memory cannot fail");
                f(&text)
            }
        }
    }

    /// Appends the value's [canonical bytes](Value::with_canonical_bytes) to `out`.
    pub fn write_canonical_bytes(&self, out: &mut Vec<u8>) {
        match self {
            Value::List(_) | Value::Map(_) => self
                .write_json(&mut *out)
                .expect("writing to memory cannot fail"),
            other => other.with_canonical_bytes(|b| out.extend_from_slice(b)),
        }
    }

    /// The value of type `type_name` ([`Value::type_name`]) whose
    /// [canonical bytes](Value::with_canonical_bytes) are `bytes`: the inverse of
    /// [`Value::write_canonical_bytes`] once the type is known. Errors say what does not fit.
    pub fn from_canonical_bytes(type_name: &str, bytes: &[u8]) -> Result<Value, String> {
        let eight = || -> Result<[u8; 8], String> {
            bytes
                .try_into()
                .map_err(|_| format!("{type_name} key of {} bytes, expected 8", bytes.len()))
        };
        match type_name {
            "null" if bytes.is_empty() => Ok(Value::Null),
            "bool" if bytes == [0] || bytes == [1] => Ok(Value::Bool(bytes[0] == 1)),
            "int" => Ok(Value::Int(i64::from_be_bytes(eight()?))),
            "double" => Ok(Value::Double(f64::from_bits(u64::from_be_bytes(eight()?)))),
            "string" => std::str::from_utf8(bytes)
                .map(Value::from)
                .map_err(|e| format!("string key that is not UTF-8: {e}")),
            "list" | "map" => match Value::from_json(bytes) {
                Ok(v) if v.type_name() == type_name => Ok(v),
                Ok(v) => Err(format!("{type_name} key whose JSON is a {}", v.type_name())),
                Err(e) => Err(format!("{type_name} key that is not JSON: {e}")),
            },
            "null" | "bool" => Err(format!(
                "{type_name} key of {} bytes ({:02x?})",
                bytes.len(),
                &bytes[..bytes.len().min(8)]
            )),
            other => Err(format!("unknown key type \"{other}\"")),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (Value::String(a), Value::String(b)) => a == b,
            (Value::List(a), Value::List(b)) => a == b,
            (Value::Map(a), Value::Map(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Value::Null => {}
            Value::Bool(b) => b.hash(state),
            Value::Int(i) => i.hash(state),
            Value::Double(d) => d.to_bits().hash(state),
            Value::String(s) => s.hash(state),
            Value::List(l) => l.hash(state),
            Value::Map(m) => m.hash(state),
        }
    }
}

impl fmt::Display for Value {
    /// Compact JSON.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

/// An object: string keys in insertion order, each at most once.
///
/// Kept as a vector of fields, so lookups scan the keys: fast for the handful of fields an
/// event has, slow for objects with hundreds of fields. Inserting an existing key replaces its
/// value in place (its position stays); parsing JSON with a repeated key keeps the last value.
/// Names are [`Name`]s: pass a `&str` or a `String`, or a [`Name`] made once (interned:
/// [`crate::name::intern`]) to share it between events without allocating.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Map {
    fields: Vec<(Name, Value)>,
}

impl Map {
    /// An empty map.
    pub fn new() -> Self {
        Map::default()
    }

    /// An empty map with room for `n` fields.
    pub fn with_capacity(n: usize) -> Self {
        Map {
            fields: Vec::with_capacity(n),
        }
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// True when the map has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The value of field `name`.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v)
    }

    /// The value of field `name`, for changing.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.fields
            .iter_mut()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v)
    }

    /// True when the map has field `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets field `name`: replaces its value where it is, or appends it. Returns the old value.
    pub fn insert(&mut self, name: impl Into<Name>, value: impl Into<Value>) -> Option<Value> {
        let name = name.into();
        let value = value.into();
        match self.get_mut(&name) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.fields.push((name, value));
                None
            }
        }
    }

    /// Removes field `name`, keeping the order of the others. Returns its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let i = self.fields.iter().position(|(k, _)| &**k == name)?;
        Some(self.fields.remove(i).1)
    }

    /// The fields in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.fields.iter().map(|(k, v)| (&**k, v))
    }

    /// The field names in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.fields.iter().map(|(k, _)| &**k)
    }

    /// Appends a field without looking for an existing one of the same name. The caller
    /// guarantees the name is new (used when building maps whose names are known distinct).
    pub fn push_unchecked(&mut self, name: impl Into<Name>, value: impl Into<Value>) {
        self.fields.push((name.into(), value.into()));
    }
}

impl From<Arc<Map>> for Map {
    /// The map itself when not shared, else a copy (cheap clones of the values).
    fn from(m: Arc<Map>) -> Map {
        Arc::unwrap_or_clone(m)
    }
}

impl<K: Into<Name>, V: Into<Value>> FromIterator<(K, V)> for Map {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::Int(v.into())
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Double(v)
    }
}

impl From<f32> for Value {
    fn from(v: f32) -> Value {
        Value::Double(v.into())
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.into())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::String(v.into())
    }
}

impl From<Arc<str>> for Value {
    fn from(v: Arc<str>) -> Value {
        Value::String(v)
    }
}

impl From<Vec<Value>> for Value {
    fn from(v: Vec<Value>) -> Value {
        Value::List(Arc::new(v))
    }
}

impl From<Map> for Value {
    fn from(v: Map) -> Value {
        Value::Map(Arc::new(v))
    }
}

impl From<Arc<Map>> for Value {
    fn from(v: Arc<Map>) -> Value {
        Value::Map(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    /// `None` is `null`.
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::from(s),
            serde_json::Value::Array(a) => {
                a.into_iter().map(Value::from).collect::<Vec<_>>().into()
            }
            serde_json::Value::Object(o) => o.into_iter().collect::<Map>().into(),
        }
    }
}

impl From<&Value> for serde_json::Value {
    fn from(v: &Value) -> serde_json::Value {
        match v {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            Value::Double(d) => serde_json::Number::from_f64(*d)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::String(s) => (**s).into(),
            Value::List(l) => l.iter().map(serde_json::Value::from).collect(),
            Value::Map(m) => m
                .iter()
                .map(|(k, v)| (k.to_owned(), serde_json::Value::from(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            // serde_json writes non-finite doubles as null.
            Value::Double(d) => s.serialize_f64(*d),
            Value::String(v) => s.serialize_str(v),
            Value::List(l) => {
                let mut seq = s.serialize_seq(Some(l.len()))?;
                for v in l.iter() {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Map(m) => m.serialize(s),
        }
    }
}

impl Serialize for Map {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Double(v as f64), Value::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Double(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::from(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, access: A) -> Result<Value, A::Error> {
        MapVisitor.visit_map(access).map(Value::from)
    }
}

struct MapVisitor;

impl<'de> Visitor<'de> for MapVisitor {
    type Value = Map;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Map, A::Error> {
        let mut map = Map::with_capacity(access.size_hint().unwrap_or(8).min(64));
        while let Some(k) = access.next_key::<KeyStr>()? {
            let v: Value = access.next_value()?;
            map.insert(k.0, v);
        }
        Ok(map)
    }
}

/// A map key, read without an intermediate `String` when the input allows.
struct KeyStr(Name);

impl<'de> Deserialize<'de> for KeyStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyStr, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyStr, E> {
                Ok(KeyStr(v.into()))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

impl<'de> Deserialize<'de> for Map {
    /// Only a JSON object reads as a map.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Map, D::Error> {
        d.deserialize_map(MapVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Value {
        Value::from_json(s.as_bytes()).unwrap()
    }

    #[test]
    fn numbers_keep_their_kind_through_a_round_trip() {
        let v = parse(
            r#"{"i":3,"d":5.0,"e":1e2,"neg":-7,"big":18446744073709551615,"pi":3.141592653589793}"#,
        );
        assert_eq!(v.get("i"), Some(&Value::Int(3)));
        assert_eq!(v.get("d"), Some(&Value::Double(5.0)));
        assert_eq!(v.get("e"), Some(&Value::Double(100.0)));
        assert_eq!(v.get("neg"), Some(&Value::Int(-7)));
        assert_eq!(v.get("big"), Some(&Value::Double(18446744073709551615.0)));
        assert_eq!(
            v.to_string(),
            r#"{"i":3,"d":5.0,"e":100.0,"neg":-7,"big":1.8446744073709552e+19,"pi":3.141592653589793}"#
        );
        assert_eq!(Value::Double(f64::NAN).to_string(), "null");
        assert_eq!(Value::Double(0.1 + 0.2).to_string(), "0.30000000000000004");
    }

    #[test]
    fn maps_keep_insertion_order_and_repeated_keys_keep_the_last_value() {
        let v = parse(r#"{"z":1,"a":2,"m":{"y":null,"b":[true,"s"]},"z":9}"#);
        let m = v.as_map().unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
        assert_eq!(m.get("z"), Some(&Value::Int(9)));
        assert_eq!(
            v.to_string(),
            r#"{"z":9,"a":2,"m":{"y":null,"b":[true,"s"]}}"#
        );
    }

    #[test]
    fn map_insert_replaces_in_place_and_remove_keeps_order() {
        let mut m: Map = [("a", 1), ("b", 2), ("c", 3)].into_iter().collect();
        assert_eq!(m.insert("b", "x"), Some(Value::Int(2)));
        assert_eq!(m.insert("d", 4.5), None);
        assert_eq!(m.remove("a"), Some(Value::Int(1)));
        assert_eq!(m.remove("nope"), None);
        assert_eq!(Value::from(m).to_string(), r#"{"b":"x","c":3,"d":4.5}"#);
    }

    #[test]
    fn clones_share_and_changes_copy_on_write() {
        let a = parse(r#"{"k":"v","n":1}"#);
        let mut b = a.clone();
        b.as_map_mut().unwrap().insert("n", 2);
        assert_eq!(a.get("n"), Some(&Value::Int(1)));
        assert_eq!(b.get("n"), Some(&Value::Int(2)));
        assert_eq!(std::mem::size_of::<Value>(), 24);
    }

    #[test]
    fn accessors_answer_only_for_their_type() {
        assert_eq!(Value::Int(2).as_f64(), Some(2.0));
        assert_eq!(Value::Double(2.5).as_i64(), None);
        assert_eq!(Value::from("s").as_str(), Some("s"));
        assert_eq!(Value::Null.as_str(), None);
        assert_eq!(Value::Bool(true).as_bool(), Some(true));
        assert_eq!(
            Value::from(vec![Value::Int(1)]).as_list().map(<[_]>::len),
            Some(1)
        );
        assert_eq!(Value::Int(1).get("x"), None);
        assert_eq!(Value::from(None::<i64>), Value::Null);
        let names: Vec<_> = [
            Value::Null,
            Value::Bool(false),
            Value::Int(0),
            Value::Double(0.0),
            Value::from(""),
            Value::from(Vec::new()),
            Value::from(Map::new()),
        ]
        .iter()
        .map(Value::type_name)
        .collect();
        assert_eq!(
            names,
            ["null", "bool", "int", "double", "string", "list", "map"]
        );
    }

    #[test]
    fn equality_and_hash_are_structural() {
        assert_ne!(Value::Int(1), Value::Double(1.0));
        assert_eq!(Value::Double(f64::NAN), Value::Double(f64::NAN));
        assert_eq!(parse(r#"{"a":[1,"x"]}"#), parse(r#"{"a":[1,"x"]}"#));
        assert_ne!(parse(r#"{"a":1,"b":2}"#), parse(r#"{"b":2,"a":1}"#));
        assert_eq!(
            Value::from("u1").routing_hash(),
            Value::from("u1").routing_hash()
        );
        assert_ne!(
            Value::from("u1").routing_hash(),
            Value::from("u2").routing_hash()
        );
        assert_eq!(
            Value::Int(42).routing_hash(),
            crate::key_hash::hash_bytes(&42i64.to_be_bytes())
        );
    }

    #[test]
    fn canonical_bytes_read_back_as_the_same_value() {
        for v in [
            Value::Null,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(-7),
            Value::Int(i64::MIN),
            Value::Double(-0.5),
            Value::from("zürich"),
            Value::from(""),
            parse(r#"[1,"a",null]"#),
            parse(r#"{"b":2,"a":[true]}"#),
        ] {
            let mut bytes = Vec::new();
            v.write_canonical_bytes(&mut bytes);
            assert_eq!(v.with_canonical_bytes(<[u8]>::to_vec), bytes, "{v:?}");
            assert_eq!(
                v.routing_hash(),
                crate::key_hash::hash_bytes(&bytes),
                "{v:?}"
            );
            assert_eq!(
                Value::from_canonical_bytes(v.type_name(), &bytes).as_ref(),
                Ok(&v),
                "{v:?}"
            );
        }
        assert_eq!(
            Value::Int(1).with_canonical_bytes(<[u8]>::to_vec),
            [0, 0, 0, 0, 0, 0, 0, 1]
        );
        assert!(Value::from_canonical_bytes("int", &[1, 2]).is_err());
        assert!(Value::from_canonical_bytes("bool", &[2]).is_err());
        assert!(Value::from_canonical_bytes("map", b"[1]").is_err());
        assert!(Value::from_canonical_bytes("uuid", b"").is_err());
    }

    #[test]
    fn serde_json_values_convert_both_ways() {
        let j = serde_json::json!({"a": 1, "b": [2.5, null, "s", false]});
        let v = Value::from(j.clone());
        assert_eq!(v.get("a"), Some(&Value::Int(1)));
        assert_eq!(serde_json::Value::from(&v), j);
    }

    #[test]
    fn only_an_object_reads_as_a_map() {
        assert!(serde_json::from_str::<Map>(r#"{"a":1}"#).is_ok());
        assert!(serde_json::from_str::<Map>(r#"[1,2]"#).is_err());
        assert!(serde_json::from_str::<Map>("3").is_err());
    }
}
