//! JSON objects into events, for every place that reads JSON events: the `file` and `stdin`
//! sources (`json_lines`), the Kafka source's decoder and the Kafka exchange reader.
//!
//! One [`EventParser`] per reader (a source subtask) remembers what the events it parsed had in
//! common, so the next ones share it instead of allocating it again:
//! - the top-level field names, up to [`MAX_NAMES`] of them: an event of the same shape takes
//!   every name from there, and a repeated name is found by its slot, not by comparing text.
//!   They are interned ([`crate::name::intern`]): static names, the same in every
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
//! use tidemark_runtime::event_json::{EventError, EventParser};
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

mod scan;

pub use scan::INDEXED;
use scan::{Fields, Span};

use crate::name::{intern, Name as FieldName};
use crate::{Map, Value};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

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

/// Why `bytes` did not read as an event: the error [`EventParser::parse`] gives (`None` if
/// they do read as one).
fn failure(bytes: &[u8]) -> Option<EventError> {
    match Value::from_json(bytes) {
        Ok(Value::Map(_)) => None,
        Ok(other) => Some(EventError::NotAnObject(other.type_name())),
        Err(e) => Some(EventError::Invalid(e)),
    }
}

/// Checks that `bytes` are one JSON object (whitespace around it allowed) that
/// [`EventParser::parse`] reads, with the same error when not, without making the event:
/// every string and number is read as the parser reads it (invalid UTF-8, a bad escape or a
/// number out of range fail here as there), and nothing is allocated. What a source that keeps
/// an event's text ([`crate::Record::from_json_object`]) checks instead of parsing it.
pub fn check_object(bytes: &[u8]) -> Result<(), EventError> {
    check_indexed(bytes).map(|_| ())
}

/// Where the top-level fields of an event's text lie, found while checking it
/// ([`check_indexed`]), so that one field is read without reading the others
/// ([`FieldIndex::find`]): its name is compared where it lies and only its value is parsed.
/// It holds every field when the object has at most [`INDEXED`], none of their names has an
/// escape and the text is under 64 KiB; otherwise a field is looked for by reading the text
/// ([`find_field`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldIndex {
    /// Whether `spans` holds every top-level field.
    complete: bool,
    len: u8,
    spans: [Span; INDEXED],
}

impl From<Fields> for FieldIndex {
    /// The index of every field a scan found.
    fn from(fields: Fields) -> FieldIndex {
        FieldIndex {
            complete: true,
            len: fields.len,
            spans: fields.spans,
        }
    }
}

impl FieldIndex {
    /// Whether the index holds every top-level field of its text.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Whether a top-level name of `text` (the text this index was made from) appears more
    /// than once; `false` when the index does not hold every field.
    pub fn has_repeated_name(&self, text: &[u8]) -> bool {
        let names = &self.spans[..self.len as usize];
        let name = |s: &Span| text.get(s.name as usize..s.name_end as usize);
        self.complete
            && names
                .iter()
                .enumerate()
                .any(|(i, a)| names[i + 1..].iter().any(|b| name(a) == name(b)))
    }

    /// Whether the index holds no field (a complete index of `{}`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The top-level field `name` of `text` (the text this index was made from): as
    /// [`EventParser::parse`] reads it, its last value when the name repeats.
    pub fn find(&self, text: &[u8], name: &str) -> Option<Value> {
        if !self.complete {
            return find_field(text, name);
        }
        let (position, value) = self.locate(text, name)?;
        parse_value_at(value, position)
    }

    /// The JSON text of the top-level field `name`'s value in `text` (its last value when the
    /// name repeats), and the field's position; `None` when the index does not hold every
    /// field or there is no such field.
    pub fn value_text<'t>(&self, text: &'t [u8], name: &str) -> Option<&'t [u8]> {
        self.locate(text, name).map(|(_, value)| value)
    }

    fn locate<'t>(&self, text: &'t [u8], name: &str) -> Option<(usize, &'t [u8])> {
        if !self.complete {
            return None;
        }
        let at = |a: u16, b: u16| text.get(a as usize..b as usize);
        let (position, span) = self.spans[..self.len as usize]
            .iter()
            .enumerate()
            .rev()
            .find(|(_, s)| at(s.name, s.name_end) == Some(name.as_bytes()))?;
        Some((position, at(span.value, span.value_end)?))
    }

    /// Finds where the values lie, between the names found while checking `text`.
    fn place_values(&mut self, text: &[u8]) {
        let n = self.len as usize;
        // Where the object's closing brace is (the text is checked: it ends with it, maybe
        // followed by whitespace).
        let Some(close) = text.iter().rposition(|&b| b == b'}') else {
            self.complete = false;
            return;
        };
        for i in 0..n {
            let mut start = self.spans[i].name_end as usize + 1;
            while text.get(start).is_some_and(|&b| b != b':') {
                start += 1;
            }
            start += 1;
            while text.get(start).is_some_and(u8::is_ascii_whitespace) {
                start += 1;
            }
            // Up to the comma before the next name's opening quote, or the closing brace.
            let mut end = if i + 1 < n {
                let mut e = self.spans[i + 1].name as usize - 1;
                while e > start && text[e - 1] != b',' {
                    e -= 1;
                }
                e - 1
            } else {
                close
            };
            while end > start && text[end - 1].is_ascii_whitespace() {
                end -= 1;
            }
            self.spans[i].value = start as u16;
            self.spans[i].value_end = end as u16;
        }
    }
}

/// [`check_object`], also finding where the top-level fields lie: a quick scan settles most
/// events ([`scan`]); serde_json checks the others, and says what is wrong with a bad one.
pub fn check_indexed(bytes: &[u8]) -> Result<FieldIndex, EventError> {
    // UTF-8 is checked once for the whole text (outside strings only ASCII is valid anyway),
    // so that strings are then read without checking each again.
    if std::str::from_utf8(bytes).is_ok() {
        if let Some(fields) = scan::object_index(bytes) {
            return Ok(FieldIndex::from(fields));
        }
    }
    check_indexed_by_serde(bytes)
}

/// [`check_indexed`] by serde_json alone.
fn check_indexed_by_serde(bytes: &[u8]) -> Result<FieldIndex, EventError> {
    let mut index = FieldIndex {
        complete: bytes.len() <= u16::MAX as usize,
        ..FieldIndex::default()
    };
    // UTF-8 is checked once for the whole text (outside strings only ASCII is valid anyway),
    // so that strings are then read without checking each again.
    let Ok(text) = std::str::from_utf8(bytes) else {
        return failure(bytes).map_or(Ok(FieldIndex::default()), Err);
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let top = TopVisitor {
        text: bytes,
        index: &mut index,
    };
    match de.deserialize_map(top).and_then(|()| de.end()) {
        Ok(()) => {
            if index.complete {
                index.place_values(bytes);
            }
            Ok(index)
        }
        Err(_) => failure(bytes).map_or(Ok(FieldIndex::default()), Err),
    }
}

/// Checks the top-level object, noting where its names lie.
struct TopVisitor<'t, 'i> {
    text: &'t [u8],
    index: &'i mut FieldIndex,
}

impl<'de> Visitor<'de> for TopVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let index = self.index;
        let base = self.text.as_ptr() as usize;
        while let Some(name) = map.next_key_seed(NameAt)? {
            map.next_value::<Check>()?;
            let len = index.len as usize;
            match name {
                Some(name) if index.complete && len < INDEXED => {
                    let at = (name.as_ptr() as usize).wrapping_sub(base);
                    if at == 0 || at + name.len() > self.text.len() {
                        index.complete = false;
                        continue;
                    }
                    index.spans[len].name = at as u16;
                    index.spans[len].name_end = (at + name.len()) as u16;
                    index.len += 1;
                }
                _ => index.complete = false,
            }
        }
        Ok(())
    }
}

/// A name where it lies in the text (`None` for one with an escape, which is read into a
/// buffer).
struct NameAt;

impl<'de> DeserializeSeed<'de> for NameAt {
    type Value = Option<&'de str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<&'de str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for NameAt {
    type Value = Option<&'de str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Self::Value, E> {
        Ok(Some(name))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// The top-level field `name` of `bytes`, a JSON object that [`check_object`] accepted, as
/// [`EventParser::parse`] would read it (when the name repeats, its last value); `None` when
/// there is no such field. The other fields are skipped, not made.
pub fn find_field(bytes: &[u8], name: &str) -> Option<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.deserialize_map(FindVisitor(name)).ok().flatten()
}

thread_local! {
    /// Makes the events kept as text ([`crate::Record::from_json_object`]) on the thread that
    /// first reads their fields, sharing names and strings as a source's parser does.
    static PARSER: std::cell::RefCell<EventParser> = std::cell::RefCell::new(EventParser::new());
}

/// Parses `bytes`, one JSON value found at top-level position `at` of an event, as this
/// thread's parser reads a value there: a short string seen there recently is shared, not
/// allocated.
fn parse_value_at(bytes: &[u8], at: usize) -> Option<Value> {
    if let Some(number) = plain_number(bytes) {
        return Some(number);
    }
    let parse = |recent: &mut Vec<Recent>| {
        // A string without escapes is the text between its quotes (checked UTF-8).
        if let Some(inner) = bytes
            .strip_prefix(b"\"")
            .and_then(|b| b.strip_suffix(b"\""))
        {
            if !inner.contains(&b'\\') {
                if let Ok(text) = std::str::from_utf8(inner) {
                    return Some(shared_string(recent, at, text));
                }
            }
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let value = FieldSeed { recent, at }.deserialize(&mut de).ok()?;
        de.end().ok().map(|()| value)
    };
    let value = PARSER.with(|p| match p.try_borrow_mut() {
        Ok(mut parser) => parse(&mut parser.recent),
        // Only if this thread is already parsing (it never is here): nothing shared.
        Err(_) => parse(&mut Vec::new()),
    });
    // The value's text was checked with the whole event's: it always parses.
    debug_assert!(value.is_some(), "a checked field value did not parse");
    value
}

/// Powers of ten a double holds exactly.
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A checked JSON number of the common, short kinds read without serde_json, exactly as it
/// reads them: an int of at most 18 digits, or a decimal without exponent of at most 15
/// digits (its digits as an integer, exact in a double, divided by an exact power of ten:
/// the one rounding serde_json's parse does too, so the double is the same to the bit).
/// `None` for anything else (serde_json then reads it).
#[inline]
fn plain_number(bytes: &[u8]) -> Option<Value> {
    let (negative, digits) = match bytes.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, bytes),
    };
    let mut significand: u64 = 0;
    let mut count = 0;
    let mut fraction: Option<usize> = None;
    for &b in digits {
        match b {
            b'0'..=b'9' => {
                significand = significand * 10 + u64::from(b - b'0');
                count += 1;
                if let Some(f) = &mut fraction {
                    *f += 1;
                }
            }
            b'.' if fraction.is_none() => fraction = Some(0),
            _ => return None,
        }
        if count > 18 {
            return None;
        }
    }
    match fraction {
        // serde_json reads `-0` as the double -0.0.
        None if count > 0 && !(negative && significand == 0) => {
            // At most 18 digits: fits an i64.
            let v = significand as i64;
            Some(Value::Int(if negative { -v } else { v }))
        }
        Some(f) if f > 0 && count <= 15 => {
            let v = significand as f64 / EXACT_POW10[f];
            Some(Value::Double(if negative { -v } else { v }))
        }
        _ => None,
    }
}

/// `text`, a string value at top-level position `at`, as the parser keeps it: a short one
/// seen there recently shared.
#[inline]
fn shared_string(recent: &mut Vec<Recent>, at: usize, text: &str) -> Value {
    if at >= MAX_NAMES || text.len() > MAX_RECENT_LEN {
        return Value::from(text);
    }
    if recent.len() <= at {
        recent.resize_with(at + 1, Recent::default);
    }
    Value::String(recent[at].share(text))
}

/// Parses `bytes`, a JSON object that [`check_object`] accepted, with this thread's parser.
pub(crate) fn parse_checked(bytes: &[u8]) -> Map {
    let parsed = PARSER.with(|p| match p.try_borrow_mut() {
        Ok(mut parser) => parser.parse(bytes),
        Err(_) => EventParser::new().parse(bytes),
    });
    // `check_object` reads exactly what `parse` reads, so this cannot fail; a failure would
    // be a bug in this module, not bad input.
    parsed.expect("an event's text was checked when the record was made")
}

/// Reads any JSON value as the parser does, making nothing.
struct Check;

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Check, D::Error> {
        // `deserialize_any`, not `deserialize_ignored_any`: serde_json's ignoring skips numbers
        // without reading them, so `1e400` would pass.
        d.deserialize_any(CheckVisitor).map(|()| Check)
    }
}

struct CheckVisitor;

impl<'de> Visitor<'de> for CheckVisitor {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Check>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<Check>()?.is_some() {
            map.next_value::<Check>()?;
        }
        Ok(())
    }
}

/// Finds one top-level field of an object.
struct FindVisitor<'n>(&'n str);

impl<'de> Visitor<'de> for FindVisitor<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut found = None;
        while let Some(matches) = map.next_key_seed(NameIs(self.0))? {
            if matches {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a key is the name looked for (compared where it lies, not copied).
struct NameIs<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for NameIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for NameIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
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
        Ok(shared_string(self.recent, self.at, v))
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

    /// serde_json's own reading of a number, through the parser's field seed.
    fn serde_number(text: &str) -> Value {
        let mut de = serde_json::Deserializer::from_str(text);
        let v = FieldSeed {
            recent: &mut Vec::new(),
            at: 0,
        }
        .deserialize(&mut de)
        .unwrap();
        de.end().unwrap();
        v
    }

    #[test]
    fn plain_numbers_read_as_serde_json_reads_them_to_the_bit() {
        let same = |text: &str| {
            let expected = serde_number(text);
            match plain_number(text.as_bytes()) {
                Some(Value::Double(d)) => {
                    let Value::Double(e) = expected else {
                        panic!("{text}: {expected:?}")
                    };
                    assert_eq!(d.to_bits(), e.to_bits(), "{text}");
                }
                Some(v) => assert_eq!(v, expected, "{text}"),
                // Left to serde_json: only the long and the exponent forms, and `-0`.
                None => assert!(
                    text.contains(['e', 'E'])
                        || text.trim_start_matches('-').len() > 15
                        || text == "-0",
                    "{text}"
                ),
            }
        };
        for text in [
            "0",
            "-0",
            "7",
            "-7",
            "0.0",
            "-0.0",
            "636.74",
            "999.99",
            "1.00",
            "0.1",
            "0.3",
            "123456789012345678",
            "-123456789012345678",
            "1234567890123456789",
            "9223372036854775807",
            "123456789.012345",
            "1234567890.1234567",
            "1e2",
            "1.5E-3",
            "0.000000000000000000001",
            "1790000000000",
        ] {
            same(text);
        }
        // Every amount of the form `<d>.dd`, and a spread of other decimals.
        for cents in (0..100_000u64).chain((0..2_000).map(|i| i * 7_919_113)) {
            same(&format!("{}.{:02}", cents / 100, cents % 100));
            same(&format!("-{}.{:03}", cents / 1000, cents % 1000));
            same(&format!("{}.{:06}", cents, cents % 1_000_000));
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
        let name = crate::name::intern("interned_x").unwrap();
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

    /// Inputs at the edges of what the parser reads: each is checked exactly as it is parsed.
    fn edge_cases() -> Vec<Vec<u8>> {
        let mut cases: Vec<Vec<u8>> = [
            r#"{"id":1,"user":"u1","value":2.5,"status":"paid"}"#,
            r#"  { "a" : 1 , "a" : [1, {"b": null}] }  "#,
            r#"{}"#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"e":1e308}"#,
            r#"{"esc":"a\"b\u00e9\ud83d\ude00","k\u0065y":1}"#,
            r#"{"a":1e400}"#,
            r#"{"a":[1,2,-1e999]}"#,
            r#"{"a":{"b":{"c":1e400}}}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\x"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":1} x"#,
            r#"{"a":1}{"b":2}"#,
            r#"{"a":"#,
            r#"{"a" 1}"#,
            r#"{1:2}"#,
            r#"[1,2]"#,
            r#"42"#,
            r#""s""#,
            r#"null"#,
            "",
            "   ",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        for text in [
            r#"{"a":1E400}"#,
            r#"{"a":1e5,"b":2}"#,
            r#"{"a":[[[1]]],"b":{"c":{"d":[]}}}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"é":"ü","b":{"ç":["ñ"]}}"#,
            "{\"a\":\"x\u{1}\"}",
            "{\"a\":\"x\ty\"}",
        ] {
            cases.push(text.as_bytes().to_vec());
        }
        cases.push(format!("{{\"a\":{}}}", "9".repeat(350)).into_bytes());
        cases.push(format!("{{\"a\":{}}}", "9".repeat(250)).into_bytes());
        cases.push(b"{\"a\":{\"\xff\":1}}".to_vec());
        cases.push(b"{\"a\":\"\xff\"}".to_vec());
        cases.push(b"{\"\xc3\":1}".to_vec());
        cases.push(format!("{}1{}", "{\"a\":[".repeat(60), "]}".repeat(60)).into_bytes());
        cases.push(format!("{}1{}", "{\"a\":[".repeat(200), "]}".repeat(200)).into_bytes());
        cases
    }

    #[test]
    fn checking_accepts_and_refuses_exactly_what_parsing_does() {
        let mut parser = EventParser::new();
        for bytes in edge_cases() {
            let shown = String::from_utf8_lossy(&bytes).into_owned();
            let shown = &shown[..shown.len().min(60)];
            match (check_object(&bytes), parser.parse(&bytes)) {
                (Ok(()), Ok(_)) => {}
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{shown}"),
                (a, b) => panic!("{shown}: checked {a:?}, parsed {b:?}"),
            }
        }
        // The cases do cover both sides.
        let ok = edge_cases()
            .iter()
            .filter(|b| check_object(b).is_ok())
            .count();
        assert_eq!(ok, 10);
    }

    #[test]
    fn a_field_is_found_as_parsing_reads_it() {
        let mut parser = EventParser::new();
        for bytes in edge_cases() {
            let Ok(map) = parser.parse(&bytes) else {
                continue;
            };
            for name in [
                "id", "user", "value", "status", "a", "big", "e", "esc", "key", "zz",
            ] {
                assert_eq!(
                    find_field(&bytes, name).as_ref(),
                    map.get(name),
                    "{name} in {}",
                    String::from_utf8_lossy(&bytes)
                );
            }
        }
        // The same through an index of where the fields lie, complete or not.
        let mut texts = edge_cases();
        texts.extend(
            [
                r#"{ "a" : "}" , "b":{"c":"{\"d\"","e":[1,{"f":2}]} ,"c" :null}"#,
                r#"{"a":1,"a":2,"b":[],"a":3}"#,
                r#"{"\u0061":1,"b":2}"#,
                r#"{"f1":1,"f2":2,"f3":3,"f4":4,"f5":5,"f6":6,"f7":7,"f8":8,"a":9}"#,
                r#"{"a":"x","b":true,"c":-0.5e-3,"d":"","e":{},"f":[],"g":false,"h":null}"#,
            ]
            .iter()
            .map(|t| t.as_bytes().to_vec()),
        );
        let mut complete = 0;
        for bytes in texts {
            let Ok(map) = parser.parse(&bytes) else {
                continue;
            };
            let index = check_indexed(&bytes).unwrap();
            complete += usize::from(index.complete);
            for name in map.keys().chain(["zz", "a", "f8"]) {
                assert_eq!(
                    index.find(&bytes, name).as_ref(),
                    map.get(name),
                    "{name} in {}",
                    String::from_utf8_lossy(&bytes)
                );
            }
        }
        // Complete for all but the two escaped names and the nine fields.
        assert_eq!(complete, 12);
        assert!(!check_indexed(br#"{"\u0061":1}"#).unwrap().complete);
        // A repeated name: its last value, as the parser keeps it.
        assert_eq!(
            find_field(br#"{"a":1,"b":2,"a":{"c":[true]}}"#, "a").map(|v| v.to_string()),
            Some(r#"{"c":[true]}"#.to_owned())
        );
    }
}
