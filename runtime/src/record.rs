//! The record: what flows through a Tidemark job: a key, an event and a timestamp.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::mem::ManuallyDrop;
use std::sync::{Arc, OnceLock};

use crate::event_json::{self, EventError, FieldIndex};
use crate::event_text::{AddedFields, EventText};
use crate::name::Name;
use crate::record_id::{Origin, ResultId};
use crate::value::{Map, Value};

/// Where a record's timestamp came from (Kafka KIP-32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TimestampType {
    /// Set where the event was made (the generator, a file's `timestamp` field).
    #[default]
    Create = 0,
    /// Set by the source when it read the record.
    Ingestion = 1,
    /// Set by the Kafka broker when it appended the message to its log (Kafka's
    /// LogAppendTime, KIP-32).
    LogAppend = 2,
}

impl TimestampType {
    /// The lowercase name used in job files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            TimestampType::Create => "create",
            TimestampType::Ingestion => "ingestion",
            TimestampType::LogAppend => "log_append",
        }
    }
}

/// One record: a key, an event and a timestamp with its type.
///
/// - The **event** is the data, always an object of the JSON data model ([`Map`] of
///   [`Value`]s). Read it with [`Record::get`] (one field) or [`Record::event_map`] (the
///   whole event), change it with [`Record::set`], [`Record::remove`] or
///   [`Record::event_mut`].
/// - The **key** ([`Record::key`]) is what `hash` edges route on ([`Record::routing_hash`]) and
///   what `reduce` and `window` group by; [`Value::Null`] means the record has none. It stays
///   outside the event: the generator's events carry their key also as the field `key`, other
///   sources take it from the event (`key:` in the job file).
/// - The **timestamp** is nanoseconds since the Unix epoch, with its [`TimestampType`].
///
/// Two representations hold the same thing. The generator's numeric events
/// `{"key": <int>, "value": <double>}` keyed by that int are held inline, without heap
/// allocation, so a record is 32 bytes and cloning one is a copy: a numeric job's throughput
/// path moves them as cheaply as plain numbers. Every other record holds its key and event behind
/// one reference count (one allocation, the event's map inside it), so cloning it never copies
/// the event either. Changing a field turns a
/// numeric record into the general form only when the result is no longer numeric, and a
/// shared event is copied before it is changed (copy on write).
pub struct Record {
    /// Nanoseconds since the Unix epoch.
    pub timestamp: i64,
    /// Where `timestamp` came from.
    pub timestamp_type: TimestampType,
    /// Which field of `body` is live: `false` numeric, `true` general. It sits beside
    /// `timestamp_type` rather than in an enum's own tag word, which keeps a record at 32
    /// bytes instead of 40.
    general: bool,
    body: Body,
}

/// The payload of a record; `Record::general` says which field is live.
union Body {
    /// Key `Int(key)`, event `{"key": key, "value": value}`.
    numeric: Numeric,
    /// Any key and event (one strong count of the `Arc` is owned by the record).
    general: ManuallyDrop<Shared>,
}

#[derive(Clone, Copy)]
struct Numeric {
    key: i64,
    value: f64,
}

/// The general form's reference, padded to the numeric form's size so that every byte of
/// a record is always initialised (a bitwise copy of any record reads no uninitialised
/// memory).
struct Shared {
    event: Arc<General>,
    _pad: u64,
}

#[derive(Clone)]
struct General {
    key: Value,
    /// The event's fields: made from `raw` when first read, if the record was made from text.
    event: OnceLock<Map>,
    /// The event's JSON text as it was read ([`Record::from_json_object`]), while the event is
    /// unchanged: one line holding one JSON object that [`event_json::check_object`]
    /// accepted. At least one of `event` and `raw` is set.
    raw: Option<EventText>,
    /// Where the fields lie in `raw`.
    index: FieldIndex,
    /// Fields set on an event kept as text while its fields are not made
    /// ([`Record::set_field`]): none of them is in `raw`, and the event is `raw`'s fields
    /// followed by these, in the order set. Empty for every other record; the first two are
    /// held inline (no allocation).
    added: AddedFields,
    /// The input message the record was made from ([`crate::provenance`]).
    origin: Option<Origin>,
    /// Which result of an operator the record is ([`crate::provenance`]): boxed, as only
    /// results carry one.
    result_id: Option<Box<ResultId>>,
    /// A tombstone: a Kafka message without a value, kept as a record whose event is null
    /// ([`Record::tombstone`]).
    tombstone: bool,
    /// Which input of the vertex behind a Kafka exchange the record was written for, plus
    /// one (0: none said; [`Record::exchange_input`]).
    exchange_input: u8,
}

impl General {
    fn parsed(key: Value, event: Map) -> General {
        General {
            key,
            event: OnceLock::from(event),
            raw: None,
            index: FieldIndex::default(),
            added: AddedFields::default(),
            origin: None,
            result_id: None,
            tombstone: false,
            exchange_input: 0,
        }
    }

    /// The event's fields, made from its text (and the fields added to it) on the first read.
    #[inline]
    fn map(&self) -> &Map {
        self.event.get_or_init(|| match &self.raw {
            Some(raw) => {
                let mut event = event_json::parse_checked(raw);
                for (name, value) in self.added.iter() {
                    event.insert(name.clone(), value.clone());
                }
                event
            }
            None => {
                // Every constructor sets the fields or the text.
                debug_assert!(false, "a record with neither fields nor text");
                Map::new()
            }
        })
    }

    /// The event's fields for changing: made first if need be; the text no longer says what
    /// the event is, so it is dropped (with the fields added to it, now in the map).
    fn map_mut(&mut self) -> &mut Map {
        self.map();
        self.raw = None;
        self.added = AddedFields::default();
        self.event.get_mut().expect("made by `map` just above")
    }

    /// Whether the event is text whose index holds every field and whose fields are not made:
    /// a field can then be read, or added, without making the event.
    #[inline]
    fn text_only(&self) -> Option<&[u8]> {
        match (&self.raw, self.event.get()) {
            (Some(raw), None) if self.index.is_complete() => Some(raw),
            _ => None,
        }
    }

    /// Writes the event kept as text with its added fields: the text without its closing
    /// brace, then each added field, then the brace.
    fn write_text_with_added<W: io::Write>(&self, raw: &[u8], mut w: W) -> io::Result<()> {
        let Some(open) = raw.strip_suffix(b"}") else {
            // A checked object's text always ends with its brace (it is trimmed).
            return serde_json::to_writer(w, self.map()).map_err(io::Error::from);
        };
        w.write_all(open)?;
        let mut first = self.index.is_empty();
        for (name, value) in self.added.iter() {
            if !first {
                w.write_all(b",")?;
            }
            first = false;
            serde_json::to_writer(&mut w, name.as_str()).map_err(io::Error::from)?;
            w.write_all(b":")?;
            value.write_json(&mut w)?;
        }
        w.write_all(b"}")
    }
}

/// A borrowed view of a record's payload.
enum BodyRef<'a> {
    Numeric { key: i64, value: f64 },
    General(&'a Arc<General>),
}

impl Record {
    #[inline(always)]
    fn body(&self) -> BodyRef<'_> {
        // SAFETY: `general` says which field of the union was written last (every
        // constructor and every change of the body sets both together).
        unsafe {
            if self.general {
                BodyRef::General(&self.body.general.event)
            } else {
                let Numeric { key, value } = self.body.numeric;
                BodyRef::Numeric { key, value }
            }
        }
    }

    #[inline(always)]
    fn numeric_mut(&mut self) -> Option<&mut Numeric> {
        if self.general {
            None
        } else {
            // SAFETY: the numeric field is the live one.
            Some(unsafe { &mut self.body.numeric })
        }
    }

    /// Replaces the body by `body` (dropping the old general reference, if any).
    #[inline(always)]
    fn replace_body(&mut self, general: bool, body: Body) {
        self.drop_general();
        self.general = general;
        self.body = body;
    }

    /// Drops the general reference, if the record holds one, leaving the record numeric
    /// `{"key": 0, "value": 0.0}`.
    #[inline(always)]
    fn drop_general(&mut self) {
        if self.general {
            self.general = false;
            // SAFETY: the general field was live and is dropped exactly once: the flag was
            // cleared first, and the body is overwritten with a numeric one right after.
            unsafe { ManuallyDrop::drop(&mut self.body.general) };
            self.body = Body {
                numeric: Numeric { key: 0, value: 0.0 },
            };
        }
    }

    fn shared(general: General) -> Body {
        Body {
            general: ManuallyDrop::new(Shared {
                event: Arc::new(general),
                _pad: 0,
            }),
        }
    }
}

impl Drop for Record {
    #[inline(always)]
    fn drop(&mut self) {
        self.drop_general();
    }
}

impl Clone for Record {
    /// A numeric record is copied; any other shares its event (a reference count).
    #[inline(always)]
    fn clone(&self) -> Record {
        let body = match self.body() {
            BodyRef::Numeric { key, value } => Body {
                numeric: Numeric { key, value },
            },
            BodyRef::General(g) => Body {
                general: ManuallyDrop::new(Shared {
                    event: Arc::clone(g),
                    _pad: 0,
                }),
            },
        };
        Record {
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            general: self.general,
            body,
        }
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Record");
        d.field("timestamp", &self.timestamp)
            .field("timestamp_type", &self.timestamp_type);
        match self.body() {
            BodyRef::Numeric { key, value } => d.field("key", &key).field("value", &value),
            BodyRef::General(g) => d.field("key", &g.key).field("event", g.map()),
        };
        d.finish()
    }
}

impl Default for Record {
    /// The numeric record `{"key": 0, "value": 0.0}` at time 0.
    fn default() -> Self {
        Record::new(0, 0.0, 0)
    }
}

impl PartialEq for Record {
    /// Equal when timestamps, keys and events are (whatever the representation).
    fn eq(&self, other: &Record) -> bool {
        self.timestamp == other.timestamp
            && self.timestamp_type == other.timestamp_type
            && match (self.body(), other.body()) {
                (
                    BodyRef::Numeric { key: k1, value: v1 },
                    BodyRef::Numeric { key: k2, value: v2 },
                ) => k1 == k2 && v1.to_bits() == v2.to_bits(),
                _ => self.key() == other.key() && self.event_map() == other.event_map(),
            }
    }
}

fn numeric_map(key: i64, value: f64) -> Map {
    let mut m = Map::with_capacity(2);
    // Static names: no allocation, no reference count.
    m.push_unchecked(arcstr::literal!("key"), key);
    m.push_unchecked(arcstr::literal!("value"), value);
    m
}

impl Record {
    /// A numeric record: key `key`, event `{"key": key, "value": value}`, a create-time
    /// timestamp. (`key` is taken as a two's-complement `i64`.)
    #[inline(always)]
    pub fn new(key: u64, value: f64, timestamp: i64) -> Self {
        Record {
            timestamp,
            timestamp_type: TimestampType::Create,
            general: false,
            body: Body {
                numeric: Numeric {
                    key: key as i64,
                    value,
                },
            },
        }
    }

    /// A record of any event (and key: `Value::Null` for none), with a create-time timestamp.
    /// The event is a [`Map`], or an `Arc<Map>` (taken over when not shared, else copied).
    pub fn with_event(key: impl Into<Value>, event: impl Into<Map>, timestamp: i64) -> Self {
        Record {
            timestamp,
            timestamp_type: TimestampType::Create,
            general: true,
            body: Record::shared(General::parsed(key.into(), event.into())),
        }
    }

    /// A tombstone: the record of a Kafka message without a value (a delete in a compacted
    /// topic, read with `tombstones: keep`), keyed `key`. Its event is null
    /// ([`Record::is_tombstone`]); read as fields, it has none. A table join takes it as the
    /// deletion of its key's row.
    pub fn tombstone(key: impl Into<Value>, timestamp: i64) -> Self {
        let mut general = General::parsed(key.into(), Map::new());
        general.tombstone = true;
        Record {
            timestamp,
            timestamp_type: TimestampType::Create,
            general: true,
            body: Record::shared(general),
        }
    }

    /// Whether this record is a tombstone ([`Record::tombstone`]).
    #[inline]
    pub fn is_tombstone(&self) -> bool {
        match self.body() {
            BodyRef::General(g) => g.tombstone,
            BodyRef::Numeric { .. } => false,
        }
    }

    /// A record whose event is the JSON object `json` (whitespace around it allowed), with
    /// key `key` and a create-time timestamp; the error [`event_json::EventParser::parse`]
    /// gives when `json` is not one.
    ///
    /// The text is checked, not parsed (nothing allocated but a copy of it), and kept: the
    /// event's fields are made when something first reads them ([`Record::event_map`],
    /// [`Record::get`] and every other reader; [`Record::field`] reads one field from the text
    /// without making the rest), and while the event is unchanged [`Record::write_event_json`]
    /// writes the text as it was read, byte for byte (spacing, number spelling and a repeated
    /// name included). A job that only reads a few fields of each event and writes it on, such
    /// as Kafka → `filter` → Kafka, never makes the event at all. Text that spans lines is
    /// parsed at once instead, so the kept text is always one line (a JSON-lines sink can
    /// write it as it is).
    pub fn from_json_object(
        key: impl Into<Value>,
        json: &[u8],
        timestamp: i64,
    ) -> Result<Record, EventError> {
        let general = if json.contains(&b'\n') || json.contains(&b'\r') {
            let event = event_json::EventParser::new().parse(json)?;
            General::parsed(key.into(), event)
        } else {
            let json = json.trim_ascii();
            let index = event_json::check_indexed(json)?;
            General {
                key: key.into(),
                event: OnceLock::new(),
                raw: Some(EventText::new(json)),
                index,
                added: AddedFields::default(),
                origin: None,
                result_id: None,
                tombstone: false,
                exchange_input: 0,
            }
        };
        Ok(Record {
            timestamp,
            timestamp_type: TimestampType::Create,
            general: true,
            body: Record::shared(general),
        })
    }

    /// The JSON text of the event's field `name` as it was read, while the event is kept as
    /// text and not yet made, and where the text's index holds every field (see
    /// [`event_json::FieldIndex`]): what a comparison of the field with a string reads without
    /// making a value. `None` otherwise, and when there is no such field.
    #[inline]
    pub fn field_text(&self, name: &str) -> Option<&[u8]> {
        match self.body() {
            BodyRef::General(g) => match (g.event.get(), &g.raw) {
                // An added field is never in the text (so the text's answer is the field's).
                (None, Some(raw)) => g.index.value_text(raw, name),
                _ => None,
            },
            BodyRef::Numeric { .. } => None,
        }
    }

    /// Whether the event's fields are made: always, except for a record kept as text
    /// ([`Record::from_json_object`]) whose fields nothing has read as a whole yet.
    pub fn event_made(&self) -> bool {
        match self.body() {
            BodyRef::General(g) => g.event.get().is_some(),
            BodyRef::Numeric { .. } => true,
        }
    }

    /// The event's JSON text as it was read, while the event is unchanged
    /// ([`Record::from_json_object`]); `None` for a record made from fields or changed since
    /// (fields added to the text included: [`Record::set_field`]).
    pub fn raw_json(&self) -> Option<&[u8]> {
        match self.body() {
            BodyRef::General(g) if g.added.is_empty() => g.raw.as_deref(),
            _ => None,
        }
    }

    /// Whether the record keeps its event as the JSON text it was read as
    /// ([`Record::from_json_object`]), maybe with fields added beside it
    /// ([`Record::set_field`]): its fields are then best read one by one ([`Record::field`]).
    #[inline]
    pub fn is_text(&self) -> bool {
        match self.body() {
            BodyRef::General(g) => g.raw.is_some(),
            BodyRef::Numeric { .. } => false,
        }
    }

    /// The record `{"key": key, "value": value}` keyed by `key`: numeric (no allocation) when
    /// the key is an int. What the old single-aggregate `reduce` and `window` emit.
    #[inline]
    pub fn keyed_value(key: &Value, value: f64, timestamp: i64) -> Self {
        match key {
            Value::Int(k) => Record::new(*k as u64, value, timestamp),
            other => {
                let mut m = Map::with_capacity(2);
                m.push_unchecked(arcstr::literal!("key"), other.clone());
                m.push_unchecked(arcstr::literal!("value"), value);
                Record::with_event(other.clone(), m, timestamp)
            }
        }
    }

    /// Takes the record out of `self`, leaving the numeric record `{"key": 0, "value": 0.0}`
    /// with the same timestamp and timestamp type (no heap data, nothing to drop). What an
    /// operator uses to own the records of a batch ([`crate::Operator::process_batch_owned`]).
    #[inline(always)]
    pub fn take(&mut self) -> Record {
        let rest = Record::new(0, 0.0, self.timestamp).with_timestamp_type(self.timestamp_type);
        std::mem::replace(self, rest)
    }

    /// The record with timestamp type `timestamp_type`.
    #[inline(always)]
    pub fn with_timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }

    /// Makes this the numeric record keyed by `key` with event `{"key": key, "value": value}`,
    /// keeping the timestamp.
    #[inline(always)]
    pub fn set_numeric(&mut self, key: i64, value: f64) {
        self.replace_body(
            false,
            Body {
                numeric: Numeric { key, value },
            },
        );
    }

    /// The key and value of a numeric record (see [`Record::new`]); `None` for any other.
    #[inline(always)]
    pub fn numeric_parts(&self) -> Option<(i64, f64)> {
        match self.body() {
            BodyRef::Numeric { key, value } => Some((key, value)),
            BodyRef::General(_) => None,
        }
    }

    /// The key and the value, for changing, of a numeric record (see [`Record::new`]); `None`
    /// for any other.
    #[inline(always)]
    pub fn numeric_parts_mut(&mut self) -> Option<(i64, &mut f64)> {
        self.numeric_mut().map(|n| (n.key, &mut n.value))
    }

    /// True when the record is held in the numeric form (no heap data).
    #[inline(always)]
    pub fn is_numeric(&self) -> bool {
        !self.general
    }

    /// The key (`Value::Null` when the record has none).
    #[inline]
    pub fn key(&self) -> Cow<'_, Value> {
        match self.body() {
            BodyRef::Numeric { key, .. } => Cow::Owned(Value::Int(key)),
            BodyRef::General(g) => Cow::Borrowed(&g.key),
        }
    }

    /// The key's int, if it is one (no clone).
    #[inline(always)]
    pub fn int_key(&self) -> Option<i64> {
        match self.body() {
            BodyRef::Numeric { key, .. } => Some(key),
            BodyRef::General(g) => g.key.as_i64(),
        }
    }

    /// The key hash `hash` edges route on: [`Value::routing_hash`] of the key (Kafka's murmur2
    /// of its canonical bytes, [`crate::key_hash`]).
    #[inline(always)]
    pub fn routing_hash(&self) -> u32 {
        match self.body() {
            BodyRef::Numeric { key, .. } => crate::key_hash::hash_int(key),
            BodyRef::General(g) => g.key.routing_hash(),
        }
    }

    /// Sets the key (the event stays as it is).
    pub fn set_key(&mut self, key: impl Into<Value>) {
        let key = key.into();
        if let (BodyRef::Numeric { key: k, .. }, Value::Int(new)) = (self.body(), &key) {
            if k == *new {
                return;
            }
        }
        self.general_keep_event().key = key;
    }

    /// The event's fields (built for a numeric record, borrowed otherwise).
    #[inline]
    pub fn event_map(&self) -> Cow<'_, Map> {
        match self.body() {
            BodyRef::Numeric { key, value } => Cow::Owned(numeric_map(key, value)),
            BodyRef::General(g) => Cow::Borrowed(g.map()),
        }
    }

    /// The event's fields when the record holds them (made from its text if need be); `None`
    /// for a numeric record, whose event [`Record::event_map`] builds.
    #[inline]
    pub fn event_fields(&self) -> Option<&Map> {
        match self.body() {
            BodyRef::General(g) => Some(g.map()),
            BodyRef::Numeric { .. } => None,
        }
    }

    /// The event as a [`Value::Map`]: a copy of its fields (cheap clones of the values) in a
    /// new map. To read fields, [`Record::get`] and [`Record::event_map`] copy nothing.
    pub fn event(&self) -> Value {
        Value::from(self.event_map().into_owned())
    }

    /// The event's field `name`, if it has one (a cheap clone).
    #[inline]
    pub fn get(&self, name: &str) -> Option<Value> {
        match self.body() {
            BodyRef::Numeric { key, value } => match name {
                "key" => Some(Value::Int(key)),
                "value" => Some(Value::Double(value)),
                _ => None,
            },
            BodyRef::General(_) => self.field(name).map(Cow::into_owned),
        }
    }

    /// The event's field `name`, if it has one: borrowed where the event's fields are made,
    /// read from the event's text where they are not yet and the text's index holds every
    /// field ([`Record::from_json_object`], [`event_json::FieldIndex`]: only the field's value
    /// is parsed, and the event stays unmade); otherwise the event is made first.
    #[inline]
    pub fn field(&self, name: &str) -> Option<Cow<'_, Value>> {
        match self.body() {
            BodyRef::Numeric { key, value } => match name {
                "key" => Some(Cow::Owned(Value::Int(key))),
                "value" => Some(Cow::Owned(Value::Double(value))),
                _ => None,
            },
            BodyRef::General(g) => match (g.event.get(), &g.raw) {
                // Through the index only: without one (more fields than it holds, an escaped
                // name), each read would scan the whole text, and a few reads would cost more
                // than making the event once.
                (None, Some(raw)) if g.index.is_complete() => match g.added.get(name) {
                    Some(added) => Some(Cow::Borrowed(added)),
                    None => g.index.find(raw, name).map(Cow::Owned),
                },
                _ => g.map().get(name).map(Cow::Borrowed),
            },
        }
    }

    /// The event's field `value` as a double when it is a number (int or double): what the
    /// numeric operators (`map` scale/offset, `aggregate: sum`) work on.
    #[inline(always)]
    pub fn numeric_value(&self) -> Option<f64> {
        match self.body() {
            BodyRef::Numeric { value, .. } => Some(value),
            BodyRef::General(_) => self.field("value").and_then(|v| v.as_f64()),
        }
    }

    /// Sets the numeric field `value` (a double), keeping a numeric record numeric.
    #[inline(always)]
    pub fn set_numeric_value(&mut self, v: f64) {
        match self.numeric_mut() {
            Some(n) => n.value = v,
            None => self.set("value", v),
        }
    }

    /// Sets the event's field `name` (replaced in place, or appended). A numeric record stays
    /// numeric when `value` is set to a double.
    pub fn set(&mut self, name: &str, value: impl Into<Value>) {
        let value = value.into();
        if let (Some(n), "value", Value::Double(d)) = (self.numeric_mut(), name, &value) {
            n.value = *d;
            return;
        }
        self.set_field(Name::from(name), value);
    }

    /// Sets the event's field `name` as [`Record::set`] does, taking a name made once (an
    /// interned one is shared without allocating). On an event kept as text whose fields are
    /// not made, a field the text does not have is kept beside the text rather than making the
    /// event: reads see it ([`Record::field`]), and the event is written as the text with the
    /// added fields after its own ([`Record::write_event_json`]). Setting a field the text has
    /// makes the event first.
    pub fn set_field(&mut self, name: Name, value: Value) {
        if self.not_in_text(&name) {
            self.general_keep_event().added.insert(name, value);
            return;
        }
        self.event_mut().insert(name, value);
    }

    /// Removes the event's field `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        if self.is_numeric() && name != "key" && name != "value" {
            return None;
        }
        if self.not_in_text(name) {
            // An added field, or none: the event stays text.
            return self.general_keep_event().added.remove(name);
        }
        // A shared event is not copied to remove nothing.
        self.field(name)?;
        self.event_mut().remove(name)
    }

    /// Whether the event is kept as text, unmade, with a complete index that has no field
    /// `name` and no name twice: what lets a field be added or removed beside the text. (A
    /// text with a repeated name is made first, so that a changed event is written with each
    /// name once, as a made event is.)
    #[inline]
    fn not_in_text(&self, name: &str) -> bool {
        match self.body() {
            BodyRef::General(g) => g.text_only().is_some_and(|raw| {
                g.index.value_text(raw, name).is_none() && !g.index.has_repeated_name(raw)
            }),
            BodyRef::Numeric { .. } => false,
        }
    }

    /// The event's fields for changing (a numeric record takes the general form; a shared
    /// event is copied first).
    pub fn event_mut(&mut self) -> &mut Map {
        self.general_mut()
    }

    /// Replaces the event, keeping the key and timestamp (a [`Map`], or an `Arc<Map>` taken
    /// over when not shared, else copied).
    pub fn set_event(&mut self, event: impl Into<Map>) {
        let g = self.general_keep_event();
        g.event = OnceLock::from(event.into());
        g.raw = None;
        g.added = AddedFields::default();
    }

    /// The event's fields for changing (made from the text if need be, which is dropped).
    fn general_mut(&mut self) -> &mut Map {
        self.general_keep_event().map_mut()
    }

    /// The key and event for changing the key: the event is left as it is (its text too).
    fn general_keep_event(&mut self) -> &mut General {
        if let BodyRef::Numeric { key, value } = self.body() {
            let body = Record::shared(General::parsed(Value::Int(key), numeric_map(key, value)));
            self.replace_body(true, body);
        }
        debug_assert!(self.general);
        // SAFETY: the general field is live (made so above).
        Arc::make_mut(unsafe { &mut (*self.body.general).event })
    }

    /// The input message the record was made from, if a source said
    /// ([`crate::provenance`]).
    #[inline]
    pub fn origin(&self) -> Option<&Origin> {
        match self.body() {
            BodyRef::General(g) => g.origin.as_ref(),
            BodyRef::Numeric { .. } => None,
        }
    }

    /// Sets the input message the record was made from (a numeric record takes the general
    /// form to hold it).
    pub fn set_origin(&mut self, origin: Origin) {
        self.general_keep_event().origin = Some(origin);
    }

    /// Which input of its vertex the record was written for, when it came over a Kafka
    /// exchange that carries several inputs (a join's left, 0, and right, 1): the exchange's
    /// reader is the vertex's only input then. `None` for any other record.
    #[inline]
    pub fn exchange_input(&self) -> Option<usize> {
        match self.body() {
            BodyRef::General(g) => (g.exchange_input > 0).then(|| g.exchange_input as usize - 1),
            BodyRef::Numeric { .. } => None,
        }
    }

    /// Says which input of the vertex behind a Kafka exchange the record is for
    /// ([`Record::exchange_input`]; at most 254; a numeric record takes the general form).
    pub fn set_exchange_input(&mut self, input: usize) {
        self.general_keep_event().exchange_input = u8::try_from(input + 1).unwrap_or(u8::MAX);
    }

    /// Which result of an operator the record is, if one said ([`crate::provenance`]).
    #[inline]
    pub fn result_id(&self) -> Option<&ResultId> {
        match self.body() {
            BodyRef::General(g) => g.result_id.as_deref(),
            BodyRef::Numeric { .. } => None,
        }
    }

    /// Sets which result of an operator the record is (a numeric record takes the general
    /// form to hold it).
    pub fn set_result_id(&mut self, id: ResultId) {
        self.general_keep_event().result_id = Some(Box::new(id));
    }

    /// Writes the event as one compact JSON object, fields in order; an event kept as text
    /// and unchanged ([`Record::from_json_object`]) as its text was read.
    pub fn write_event_json<W: io::Write>(&self, mut w: W) -> io::Result<()> {
        match self.body() {
            BodyRef::Numeric { key, value } => {
                write!(w, "{{\"key\":{key},\"value\":")?;
                Value::Double(value).write_json(&mut w)?;
                w.write_all(b"}")
            }
            BodyRef::General(g) => match &g.raw {
                Some(raw) if g.added.is_empty() => w.write_all(raw),
                Some(raw) => g.write_text_with_added(raw, w),
                None => serde_json::to_writer(w, g.map()).map_err(io::Error::from),
            },
        }
    }

    /// The event as compact JSON text.
    pub fn event_json(&self) -> String {
        let mut buf = Vec::new();
        self.write_event_json(&mut buf)
            .expect("writing to memory cannot fail");
        String::from_utf8(buf).expect("JSON is UTF-8")
    }

    /// The timestamp in whole milliseconds since the Unix epoch (rounded down), as expressions
    /// and sinks see it.
    #[inline]
    pub fn timestamp_millis(&self) -> i64 {
        self.timestamp.div_euclid(1_000_000)
    }
}

/// Writes a copy of the numeric record `src` with its value replaced by `value` to `dst`:
/// one block copy of the record, then the value (fewer stores than writing field by field).
///
/// # Safety
/// `src` must be numeric, and `dst` valid for writing one record (its old content, if any, is
/// overwritten without being dropped).
#[inline(always)]
pub(crate) unsafe fn write_numeric_with_value(src: &Record, dst: *mut Record, value: f64) {
    debug_assert!(src.is_numeric());
    // SAFETY (caller): `dst` is writable; the copy is an independent record because `src`
    // owns no heap data, and its live field stays the numeric one.
    std::ptr::copy_nonoverlapping(src, dst, 1);
    (*dst).body.numeric.value = value;
}

/// Writes a copy of the numeric record `template` with key `key` and value `value` to `dst`
/// (timestamp and its type from `template`).
///
/// # Safety
/// As [`write_numeric_with_value`].
#[inline(always)]
pub(crate) unsafe fn write_numeric_like(template: &Record, dst: *mut Record, key: i64, value: f64) {
    debug_assert!(template.is_numeric());
    // SAFETY: as in `write_numeric_with_value`.
    std::ptr::copy_nonoverlapping(template, dst, 1);
    (*dst).body.numeric = Numeric { key, value };
}

/// True when every record of `records` is numeric: a branch-free scan, four records at a time.
#[inline]
pub(crate) fn all_numeric(records: &[Record]) -> bool {
    let mut general = [false; 4];
    let mut quads = records.chunks_exact(4);
    for q in &mut quads {
        for (g, r) in general.iter_mut().zip(q) {
            *g |= r.general;
        }
    }
    for r in quads.remainder() {
        general[0] |= r.general;
    }
    general == [false; 4]
}

/// Writes a clone of `src` to `dst`: a block copy for a numeric record, a reference count
/// for any other.
///
/// # Safety
/// `dst` must be valid for writing one record (its old content, if any, is overwritten
/// without being dropped).
#[inline(always)]
pub(crate) unsafe fn clone_to(src: &Record, dst: *mut Record) {
    if src.general {
        dst.write(src.clone());
    } else {
        // SAFETY (caller): `dst` is writable; a numeric record owns no heap data, so the copy
        // is an independent record.
        std::ptr::copy_nonoverlapping(src, dst, 1);
    }
}

/// Appends clones of `src` to `dst`. When every record of `src` is numeric (the throughput
/// path), they are copied as one block of bytes, as `Copy` records would be. Returns whether
/// they were all numeric.
#[inline]
pub(crate) fn extend_cloned(dst: &mut Vec<Record>, src: &[Record]) -> bool {
    if all_numeric(src) {
        dst.reserve(src.len());
        let len = dst.len();
        // SAFETY: a numeric record owns no heap data (its body is two plain numbers), so a
        // bitwise copy is a valid, independent clone, and dropping either copy frees nothing.
        // `reserve` made room for `src.len()` more records after `len`, `src` cannot overlap
        // `dst`'s spare capacity (it is borrowed while `dst` is borrowed mutably), and the
        // length is raised only over records just written.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().add(len), src.len());
            dst.set_len(len + src.len());
        }
        true
    } else {
        dst.extend_from_slice(src);
        false
    }
}

/// Empties `records`, known to hold only numeric records, without visiting them. (Were a
/// general record among them, its event would leak: never unsafe, but wasteful.)
#[inline(always)]
pub(crate) fn forget_numeric(records: &mut Vec<Record>) {
    debug_assert!(records.iter().all(Record::is_numeric));
    // SAFETY: length 0 is always valid; numeric records own no heap data, so not running
    // their drop code loses nothing.
    unsafe { records.set_len(0) }
}

/// Empties `records`, keeping the buffer. Numeric records have nothing to drop, so a batch of
/// them is emptied without visiting each record's drop code.
#[inline]
pub(crate) fn clear_records(records: &mut Vec<Record>) {
    if all_numeric(records) {
        // SAFETY: length 0 is always valid; the records given up own no heap data (checked
        // above), so not running their drop code loses nothing.
        unsafe { records.set_len(0) }
    } else {
        records.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_copies_and_clears_agree_with_clone_and_clear() {
        let mut m = Map::new();
        m.insert("a", "x");
        let general = Record::with_event("k", m, 3);
        for src in [
            vec![Record::new(1, 1.0, 1), Record::new(2, 2.0, 2)],
            vec![Record::new(1, 1.0, 1), general.clone()],
        ] {
            let mut dst = vec![Record::new(9, 9.0, 9)];
            extend_cloned(&mut dst, &src);
            assert_eq!(dst[1..], src[..]);
            assert_eq!(dst.len(), 3);
            clear_records(&mut dst);
            assert!(dst.is_empty());
        }
        // The general record's event is shared by `general` and `src` only again.
        let mut m = Map::new();
        m.insert("a", "x");
        assert_eq!(general, Record::with_event("k", m, 3));
    }

    #[test]
    fn numeric_records_read_like_maps_and_stay_numeric_while_they_can() {
        let mut r = Record::new(7, 1.5, 0);
        assert_eq!(r.get("key"), Some(Value::Int(7)));
        assert_eq!(r.get("value"), Some(Value::Double(1.5)));
        assert_eq!(r.get("other"), None);
        assert_eq!(*r.key(), Value::Int(7));
        assert_eq!(r.routing_hash(), Value::Int(7).routing_hash());
        r.set("value", 2.5);
        assert!(r.is_numeric());
        assert_eq!(r.event_json(), r#"{"key":7,"value":2.5}"#);
        assert_eq!(r.remove("nope"), None);
        assert!(r.is_numeric());
        // Setting anything else takes the general form, fields in the same order.
        r.set("value", 3);
        r.set("tier", "gold");
        assert!(!r.is_numeric());
        assert_eq!(r.event_json(), r#"{"key":7,"value":3,"tier":"gold"}"#);
        assert_eq!(r.remove("key"), Some(Value::Int(7)));
        assert_eq!(r.event_json(), r#"{"value":3,"tier":"gold"}"#);
        assert_eq!(r.numeric_value(), Some(3.0));
        // The key stays outside the event.
        assert_eq!(*r.key(), Value::Int(7));
        r.set_key("u1");
        assert_eq!(*r.key(), Value::from("u1"));
        assert_eq!(r.int_key(), None);
        assert_eq!(r.routing_hash(), Value::from("u1").routing_hash());
    }

    #[test]
    fn clones_share_the_event_and_changes_copy_it() {
        let mut m = Map::new();
        m.insert("a", 1);
        let a = Record::with_event("k", m, 5);
        let mut b = a.clone();
        b.set("a", 2);
        assert_eq!(a.get("a"), Some(Value::Int(1)));
        assert_eq!(b.get("a"), Some(Value::Int(2)));
        assert_ne!(a, b);
        b.set("a", 1);
        assert_eq!(a, b);
    }

    #[test]
    fn equality_ignores_the_representation() {
        let numeric = Record::new(1, 2.0, 0);
        let general = Record::with_event(
            1,
            [("key", Value::Int(1)), ("value", Value::Double(2.0))]
                .into_iter()
                .collect::<Map>(),
            0,
        );
        assert_eq!(numeric, general);
        assert_eq!(numeric.event(), general.event());
        assert_eq!(numeric.event_map(), general.event_map());
        assert_ne!(numeric, Record::new(1, 2.0, 1));
        assert_eq!(Record::keyed_value(&Value::Int(1), 2.0, 0), numeric);
        let keyed = Record::keyed_value(&Value::from("a"), 2.0, 0);
        assert_eq!(keyed.event_json(), r#"{"key":"a","value":2.0}"#);
    }

    #[test]
    fn take_leaves_a_numeric_record_with_the_same_timestamp() {
        let mut m = Map::new();
        m.insert("a", 1);
        let mut r = Record::with_event("k", m, 5).with_timestamp_type(TimestampType::Ingestion);
        let expected = r.clone();
        let taken = r.take();
        assert_eq!(taken, expected);
        assert!(r.is_numeric());
        assert_eq!(
            (r.timestamp, r.timestamp_type),
            (5, TimestampType::Ingestion)
        );
        assert_eq!(r.event_json(), r#"{"key":0,"value":0.0}"#);
    }

    #[test]
    fn a_general_record_holds_its_event_without_copying_it() {
        let first = |m: &Map| m.iter().next().unwrap().1 as *const Value;
        let m: Map = [("a", Value::from("x"))].into_iter().collect();
        let at = first(&m);
        let r = Record::with_event("k", m, 0);
        // The fields were moved in, not copied, and reading borrows them.
        assert!(matches!(r.event_map(), Cow::Borrowed(_)));
        assert_eq!(first(&r.event_map()), at);
        // An `Arc<Map>` held nowhere else is taken over; a shared one is copied.
        let alone = Arc::new(r.event_map().into_owned());
        let at = first(&alone);
        assert_eq!(first(&Record::with_event(1, alone, 0).event_map()), at);
        let shared = Arc::new(r.event_map().into_owned());
        let copy = Record::with_event(1, Arc::clone(&shared), 0);
        assert_ne!(first(&copy.event_map()), first(&shared));
        assert_eq!(*copy.event_map(), *shared);
        // `event()` is the same fields as a value.
        assert_eq!(r.event().to_string(), r#"{"a":"x"}"#);
    }

    fn made(r: &Record) -> bool {
        r.event_made()
    }

    #[test]
    fn an_event_kept_as_text_is_read_field_by_field_and_written_as_read() {
        let text = br#"  {"id": 7, "status":"paid", "amount": 1.50e2, "id": 8}  "#;
        let r = Record::from_json_object("k", text, 5).unwrap();
        assert_eq!(r.raw_json(), Some(text.trim_ascii()));
        assert_eq!((r.timestamp, r.timestamp_type), (5, TimestampType::Create));
        // One field, read from the text: the event stays unmade.
        assert_eq!(r.field("status").as_deref(), Some(&Value::from("paid")));
        assert_eq!(r.field("id").as_deref(), Some(&Value::Int(8)));
        assert_eq!(r.field("nope"), None);
        assert_eq!(r.numeric_value(), None);
        assert!(!made(&r));
        // Unchanged, it is written byte for byte (spacing, number spelling, a repeated name).
        assert_eq!(r.event_json().as_bytes(), text.trim_ascii());
        // Sharing the record and changing the key keep the text.
        let mut keyed = r.clone();
        keyed.set_key(Value::Int(3));
        assert_eq!(keyed.raw_json(), r.raw_json());
        assert!(!made(&keyed));
        assert_eq!(r.key().into_owned(), Value::from("k"));
        // Reading the whole event makes it once, as `Value::from_json` reads it.
        let expected = Value::from_json(text).unwrap();
        assert_eq!(r.event(), expected);
        assert!(made(&r));
        assert_eq!(r.field("id").as_deref(), Some(&Value::Int(8)));
        assert!(matches!(r.field("id"), Some(Cow::Borrowed(_))));
        // Equal to the same event made from fields.
        let fields = Record::with_event("k", expected.as_map().unwrap().clone(), 5);
        assert_eq!(r, fields);
        assert_eq!(fields.raw_json(), None);
    }

    #[test]
    fn without_a_complete_index_a_field_read_makes_the_event() {
        let many: String = (0..9).map(|i| format!("\"f{i}\":{i},")).collect();
        for text in [format!("{{{many}\"a\":1}}"), r#"{"\u0061":1}"#.to_owned()] {
            let r = Record::from_json_object(Value::Null, text.as_bytes(), 0).unwrap();
            assert!(!made(&r));
            assert_eq!(r.field("a").as_deref(), Some(&Value::Int(1)), "{text}");
            assert!(made(&r), "{text}");
            // Still written as read.
            assert_eq!(r.event_json(), text);
        }
    }

    const AB: &[u8] = br#"{"a": 1, "b": "x"}"#;

    /// The event `AB` kept as text, and a copy of it with `c` set to 2.
    fn ab_and_c() -> (Record, Record) {
        let original = Record::from_json_object(Value::Null, AB, 0).unwrap();
        let mut r = original.clone();
        r.set("c", 2);
        (original, r)
    }

    #[test]
    fn fields_added_to_an_event_kept_as_text_stay_beside_the_text() {
        let (original, mut r) = ab_and_c();
        let text = AB;
        r.set_field(Name::from("d"), Value::Double(0.5));
        r.set("c", 3);
        // Still text, unmade: the added fields are read beside it.
        assert!(r.is_text() && !made(&r));
        assert_eq!(r.raw_json(), None, "the text alone is no longer the event");
        assert_eq!(r.field("c").as_deref(), Some(&Value::Int(3)));
        assert_eq!(r.field("b").as_deref(), Some(&Value::from("x")));
        assert_eq!(r.get("d"), Some(Value::Double(0.5)));
        assert_eq!(r.field_text("c"), None);
        // Written as the text with the added fields after its own, as the made event would be.
        let written = r.event_json();
        assert_eq!(written, r#"{"a": 1, "b": "x","c":3,"d":0.5}"#);
        let expected: Map = [
            ("a", Value::Int(1)),
            ("b", Value::from("x")),
            ("c", Value::Int(3)),
            ("d", Value::Double(0.5)),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            Value::from_json(written.as_bytes()).unwrap(),
            Value::from(expected.clone())
        );
        // Removing an added field, or one the event has not, keeps the text.
        assert_eq!(r.remove("d"), Some(Value::Double(0.5)));
        assert_eq!(r.remove("nope"), None);
        assert!(!made(&r));
        assert_eq!(r.event_json(), r#"{"a": 1, "b": "x","c":3}"#);
        // Making the whole event gives the same fields, in the same order.
        r.set("d", 0.5);
        assert_eq!(*r.event_map(), expected);
        assert_eq!(r.event_json(), r#"{"a": 1, "b": "x","c":3,"d":0.5}"#);
        // A text with a repeated name is made first: each name is written once.
        let mut twice = Record::from_json_object(Value::Null, br#"{"a": 1, "a": 2}"#, 0).unwrap();
        twice.set("b", 3);
        assert!(!twice.is_text());
        assert_eq!(twice.event_json(), r#"{"a":2,"b":3}"#);
        // An empty object, and the clone the record was made from, untouched.
        let mut empty = Record::from_json_object(Value::Null, b"{ }", 0).unwrap();
        empty.set("k", "v");
        assert_eq!(empty.event_json(), r#"{ "k":"v"}"#);
        assert_eq!(original.event_json().as_bytes(), text);
        assert!(!made(&original));
    }

    #[test]
    fn a_changed_event_drops_its_text() {
        let text = AB;
        // Setting a field the text has makes the event.
        let (original, mut r) = ab_and_c();
        r.set("a", 5);
        assert!(!r.is_text());
        assert_eq!(r.raw_json(), None);
        assert_eq!(r.event_json(), r#"{"a":5,"b":"x","c":2}"#);
        // The record it was cloned from is untouched.
        assert_eq!(original.event_json().as_bytes(), text);
        let mut r = original.clone();
        assert_eq!(r.remove("a"), Some(Value::Int(1)));
        assert_eq!(r.event_json(), r#"{"b":"x"}"#);
        let mut r = original.clone();
        r.set_event(Map::new());
        assert_eq!((r.raw_json(), r.event_json().as_str()), (None, "{}"));
        let mut r = original;
        r.event_mut().insert("a", 5);
        assert_eq!(r.event_json(), r#"{"a":5,"b":"x"}"#);
    }

    #[test]
    fn text_that_is_not_one_line_or_not_an_object() {
        // Over several lines: parsed at once, written compact (a JSON-lines sink stays one
        // record per line).
        let r = Record::from_json_object(1, b"{\"a\":\n 1}", 0).unwrap();
        assert_eq!(r.raw_json(), None);
        assert!(made(&r));
        assert_eq!(r.event_json(), r#"{"a":1}"#);
        for (text, message) in [
            (&b"[1]"[..], "found a list"),
            (b"{\"a\":1e400}", "number out of range at line 1 column 10"),
            (b"{\"a\":\n}", "expected value at line 2 column 1"),
        ] {
            let e = Record::from_json_object(1, text, 0).unwrap_err();
            assert_eq!(e.to_string(), message);
        }
    }

    #[test]
    fn records_stay_small() {
        assert_eq!(std::mem::size_of::<Record>(), 32);
    }

    #[test]
    fn timestamps_in_millis_round_down() {
        assert_eq!(Record::new(0, 0.0, 1_999_999).timestamp_millis(), 1);
        assert_eq!(Record::new(0, 0.0, -1).timestamp_millis(), -1);
    }
}
