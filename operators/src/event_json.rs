//! JSON objects into events, for every place that reads JSON events: the `file` and `stdin`
//! sources (`json_lines`), the Kafka source's decoder and the Kafka exchange reader.
//!
//! One [`EventParser`] per reader (a source subtask) remembers what the events it parsed had in
//! common, so the next ones share it instead of allocating it again:
//! - the top-level field names, up to [`MAX_NAMES`] of them: an event of the same shape takes
//!   every name from there, and a repeated name is found by its slot, not by comparing text.
//!   They are interned ([`tidemark_runtime::name::intern`]): static names, the same in every
//!   parser, whose copies touch no reference count, so the threads that drop events (a window
//!   after a hash edge) do not contend with the parsing thread on the names' counts;
//! - per top-level position (the first [`MAX_NAMES`]), the last [`RECENT`] distinct strings of
//!   at most [`MAX_RECENT_LEN`] bytes found there (an `Arc` clone): a value such as `"paid"` among a handful of
//!   statuses is shared, not allocated; a string seen nowhere recently costs [`RECENT`] short
//!   comparisons more than before;
//! - how many fields the last event had: the next event's map is made with room for them and
//!   for [`SPARE_FIELDS`] more, which `map set` then adds without growing the map.
//!
//! The events are exactly what [`Value::from_json`] reads: fields in order, a repeated name
//! keeps its first place and its last value, a number without fraction or exponent is an int
//! (a double beyond 64 bits), nested lists and maps as `Value::from_json` makes them. Only
//! where their strings live differs. Input that is not one JSON object is an [`EventError`]
//! (whitespace around the object is fine).
//!
//! ```
//! use tidemark_operators::event_json::{EventError, EventParser};
//!
//! let mut parser = EventParser::new();
//! let a = parser.parse(br#"{"user":"u1","status":"paid"}"#).unwrap();
//! let b = parser.parse(br#"{"user":"u2","status":"paid"}"#).unwrap();
//! assert_eq!(b.get("status").and_then(|v| v.as_str()), Some("paid"));
//! // The second event's name `status` and its value are the first one's.
//! assert!(std::ptr::eq(a.keys().nth(1).unwrap(), b.keys().nth(1).unwrap()));
//! assert!(matches!(parser.parse(b"[1]"), Err(EventError::NotAnObject("list"))));
//! ```

use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use tidemark_runtime::name::{intern, Name as FieldName};
use tidemark_runtime::{Map, Value};

/// At most this many top-level names are shared by one parser, and strings are shared at this
/// many positions.
pub const MAX_NAMES: usize = 32;

/// How many recent distinct strings are kept per top-level position.
pub const RECENT: usize = 4;

/// Only strings of at most this many bytes are kept for sharing.
pub const MAX_RECENT_LEN: usize = 32;

/// Fields an event's map has room for beyond those it was parsed with.
pub const SPARE_FIELDS: usize = 2;

/// Why bytes are not an event.
#[derive(Debug)]
pub enum EventError {
    /// Valid JSON, but not an object: the value's type name (`list`, `int`, …, as
    /// [`Value::type_name`]).
    NotAnObject(&'static str),
    /// Not one JSON value (serde_json's error, with line and column).
    Invalid(serde_json::Error),
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventError::NotAnObject(type_name) => write!(f, "found a {type_name}"),
            EventError::Invalid(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for EventError {}

/// Parses JSON objects into events, sharing names and repeated strings between the events it
/// parses (see the [module docs](self)). One per reader; it is not shared between threads.
#[derive(Debug, Default)]
pub struct EventParser {
    /// The shared top-level names, in the order first seen.
    names: Vec<FieldName>,
    /// Per top-level position, the recent strings there.
    recent: Vec<Recent>,
    /// Fields in the last event.
    fields: usize,
}

impl EventParser {
    /// A parser that has seen nothing yet.
    pub fn new() -> Self {
        EventParser::default()
    }

    /// Parses `bytes`, one JSON object (whitespace around it allowed), into an event.
    pub fn parse(&mut self, bytes: &[u8]) -> Result<Map, EventError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        match de
            .deserialize_map(EventVisitor(self))
            .and_then(|map| de.end().map(|()| map))
        {
            Ok(map) => Ok(map),
            // Not an object, or not JSON: parsed again as any value to say which (only on
            // this path, so errors read exactly as `Value::from_json`'s).
            Err(_) => match Value::from_json(bytes) {
                Ok(Value::Map(m)) => Ok(Arc::unwrap_or_clone(m)),
                Ok(other) => Err(EventError::NotAnObject(other.type_name())),
                Err(e) => Err(EventError::Invalid(e)),
            },
        }
    }
}

/// The recent distinct strings at one position; the oldest is replaced on a miss.
#[derive(Debug, Default)]
struct Recent {
    strings: [Option<Arc<str>>; RECENT],
    /// The slot the next miss replaces.
    next: usize,
}

impl Recent {
    /// `text` as a shared string: a recent one equal to it, or a new one kept from now on.
    #[inline]
    fn share(&mut self, text: &str) -> Arc<str> {
        for s in self.strings.iter().flatten() {
            if **s == *text {
                return Arc::clone(s);
            }
        }
        let s: Arc<str> = text.into();
        self.strings[self.next] = Some(Arc::clone(&s));
        self.next = (self.next + 1) % RECENT;
        s
    }
}

struct EventVisitor<'a>(&'a mut EventParser);

impl<'de> Visitor<'de> for EventVisitor<'_> {
    type Value = Map;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Map, A::Error> {
        let parser = self.0;
        let mut map = Map::with_capacity(parser.fields + SPARE_FIELDS);
        // Bit i: the shared name i is in `map` already.
        let mut seen: u64 = 0;
        let mut at = 0;
        while let Some(name) = access.next_key_seed(NameSeed {
            names: &mut parser.names,
            at,
        })? {
            let value = access.next_value_seed(FieldSeed {
                recent: &mut parser.recent,
                at,
            })?;
            match name {
                Name::Shared(name, i) if seen & (1 << i) == 0 => {
                    seen |= 1 << i;
                    map.push_unchecked(name, value);
                }
                // A repeated name (replaced in place) or one not shared: no shared name has
                // its text, so only these need a look at the names already there.
                Name::Shared(name, _) | Name::Own(name) => {
                    map.insert(name, value);
                }
            }
            at += 1;
        }
        parser.fields = map.len();
        Ok(map)
    }
}

/// A top-level name: a shared one with its slot, or one of this event's own.
enum Name {
    Shared(FieldName, usize),
    Own(FieldName),
}

struct NameSeed<'a> {
    names: &'a mut Vec<FieldName>,
    at: usize,
}

impl<'de> DeserializeSeed<'de> for NameSeed<'_> {
    type Value = Name;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Name, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for NameSeed<'_> {
    type Value = Name;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    #[inline]
    fn visit_str<E: de::Error>(self, name: &str) -> Result<Name, E> {
        // Events of one shape: the name at this position is the one seen there before.
        if let Some(k) = self.names.get(self.at).filter(|k| ***k == *name) {
            return Ok(Name::Shared(k.clone(), self.at));
        }
        if let Some(i) = self.names.iter().position(|k| **k == *name) {
            return Ok(Name::Shared(self.names[i].clone(), i));
        }
        if self.names.len() < MAX_NAMES {
            if let Some(k) = intern(name) {
                self.names.push(k.clone());
                return Ok(Name::Shared(k, self.names.len() - 1));
            }
        }
        Ok(Name::Own(FieldName::from(name)))
    }
}

/// A top-level value: a short string is shared with a recent equal one at this position.
struct FieldSeed<'a> {
    recent: &'a mut Vec<Recent>,
    at: usize,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    // As `Value::from_json`: beyond i64, a double.
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Double(v as f64), Value::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Double(v))
    }
    #[inline]
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        if self.at >= MAX_NAMES || v.len() > MAX_RECENT_LEN {
            return Ok(Value::from(v));
        }
        if self.recent.len() <= self.at {
            self.recent.resize_with(self.at + 1, Recent::default);
        }
        Ok(Value::String(self.recent[self.at].share(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_of(m: &Map, name: &str) -> Arc<str> {
        match m.get(name) {
            Some(Value::String(s)) => Arc::clone(s),
            other => panic!("{name} is {other:?}"),
        }
    }

    #[test]
    fn events_read_as_from_json_reads_them() {
        let mut parser = EventParser::new();
        let many: String = (0..40)
            .map(|i| format!(r#""f{i}":"v{}""#, i % 3))
            .collect::<Vec<_>>()
            .join(",");
        // One after the other through one parser: shapes change, names repeat, strings
        // repeat at a position and then differ, names beyond the shared ones repeat.
        for text in [
            r#"{"id":1,"user":"u1","value":2,"status":"paid"}"#,
            r#"{"id":2,"user":"u2","value":3,"status":"paid"}"#,
            r#"{"status":"open","id":3,"user":"u2"}"#,
            r#"{"a":"x","a":"y","b":{"c":["paid",1.5,null,true]},"big":18446744073709551615}"#,
            r#"{"a":1,"b":2,"a":3,"a":4,"b":5}"#,
            r#"{"esc":"a\"b\u00e9","n":-7,"d":1e2,"l":[{"k":"v"}]}"#,
            r#"  {}  "#,
            &format!("{{{many}}}"),
            &format!("{{{many}}}"),
            &format!(
                r#"{{{many},"f39":1,"f0":2,"x":1,"x":"long string beyond the limit of what is kept"}}"#
            ),
            r#"{"id":1,"user":"u1","value":2,"status":"paid"}"#,
        ] {
            let event = parser.parse(text.as_bytes()).unwrap();
            assert_eq!(
                Value::from(event),
                Value::from_json(text.as_bytes()).unwrap(),
                "{text}"
            );
        }
    }

    #[test]
    fn a_repeated_name_keeps_its_first_place_and_last_value() {
        let mut parser = EventParser::new();
        for _ in 0..2 {
            let m = parser
                .parse(br#"{"a":1,"b":"x","a":"y","c":2,"b":3}"#)
                .unwrap();
            assert_eq!(
                Value::from(m).to_string(),
                r#"{"a":"y","b":3,"c":2}"#,
                "the second time every name is shared"
            );
        }
    }

    #[test]
    fn events_of_one_shape_share_names_and_recent_strings() {
        let mut parser = EventParser::new();
        let statuses = [
            "paid", "refunded", "open", "paid", "open", "refunded", "x", "paid",
        ];
        let events: Vec<Map> = statuses
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let text = format!(r#"{{"user":"u{i}","status":"{s}"}}"#);
                parser.parse(text.as_bytes()).unwrap()
            })
            .collect();
        for (e, s) in events.iter().zip(statuses) {
            assert_eq!(e.keys().collect::<Vec<_>>(), ["user", "status"]);
            assert_eq!(&*string_of(e, "status"), s);
        }
        // Names: one allocation for all events.
        for e in &events[1..] {
            for (a, b) in events[0].keys().zip(e.keys()) {
                assert!(std::ptr::eq(a, b), "name {a} is shared");
            }
        }
        // Statuses: the first "paid" serves every later one (three other strings came in
        // between, fewer than `RECENT`), and the second "open" is the first.
        let paid: Vec<_> = [0, 3, 7]
            .iter()
            .map(|&i| string_of(&events[i], "status"))
            .collect();
        assert!(Arc::ptr_eq(&paid[0], &paid[1]) && Arc::ptr_eq(&paid[0], &paid[2]));
        assert!(Arc::ptr_eq(
            &string_of(&events[2], "status"),
            &string_of(&events[4], "status")
        ));
        // Users all differ: each is its own, equal to what a fresh parse gives.
        let fresh = EventParser::new()
            .parse(br#"{"user":"u5","status":"refunded"}"#)
            .unwrap();
        assert_eq!(events[5], fresh, "a hit and a miss give equal events");
    }

    #[test]
    fn names_are_interned_across_parsers() {
        let a = EventParser::new().parse(br#"{"interned_x":1}"#).unwrap();
        let b = EventParser::new().parse(br#"{"interned_x":2}"#).unwrap();
        assert!(std::ptr::eq(
            a.keys().next().unwrap(),
            b.keys().next().unwrap()
        ));
        let name = tidemark_runtime::name::intern("interned_x").unwrap();
        assert!(std::ptr::eq(a.keys().next().unwrap(), &*name));
    }

    #[test]
    fn the_oldest_recent_string_makes_room_and_long_strings_are_not_kept() {
        let mut parser = EventParser::new();
        let mut status = |s: &str| {
            let text = format!(r#"{{"status":"{s}"}}"#);
            string_of(&parser.parse(text.as_bytes()).unwrap(), "status")
        };
        let a = status("a");
        for s in ["b", "c", "d", "e"] {
            status(s);
        }
        // `RECENT` other strings came after "a": it was replaced.
        let a2 = status("a");
        assert_eq!((&*a, &*a2), ("a", "a"));
        assert!(!Arc::ptr_eq(&a, &a2));
        let long = "l".repeat(MAX_RECENT_LEN + 1);
        assert!(!Arc::ptr_eq(&status(&long), &status(&long)));
        let short = "s".repeat(MAX_RECENT_LEN);
        assert!(Arc::ptr_eq(&status(&short), &status(&short)));
    }

    #[test]
    fn maps_have_room_for_fields_a_map_set_adds() {
        let mut parser = EventParser::new();
        parser.parse(br#"{"a":1,"b":2,"c":3}"#).unwrap();
        let mut m = parser.parse(br#"{"a":1,"b":2,"c":3}"#).unwrap();
        for (i, name) in ["d", "e", "f", "g"].into_iter().enumerate() {
            m.insert(name, i as i64);
        }
        assert_eq!(
            Value::from(m).to_string(),
            r#"{"a":1,"b":2,"c":3,"d":0,"e":1,"f":2,"g":3}"#,
            "fields beyond the spare room still go at the end"
        );
    }

    #[test]
    fn anything_but_one_object_is_an_error_naming_what_it_is() {
        let mut parser = EventParser::new();
        for (text, type_name) in [("[1, 2]", "list"), ("42", "int"), ("\"s\"", "string")] {
            match parser.parse(text.as_bytes()) {
                Err(EventError::NotAnObject(t)) => assert_eq!(t, type_name, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let Err(EventError::Invalid(e)) = parser.parse(br#"{"a": }"#) else {
            panic!("invalid JSON")
        };
        assert_eq!((e.line(), e.column()), (1, 7));
        assert_eq!(e.to_string(), "expected value at line 1 column 7");
        assert!(matches!(
            parser.parse(br#"{"a":1} {"b":2}"#),
            Err(EventError::Invalid(_))
        ));
        // After errors, the parser still reads events.
        let m = parser.parse(br#"{"a":1}"#).unwrap();
        assert_eq!(m.get("a"), Some(&Value::Int(1)));
    }
}
