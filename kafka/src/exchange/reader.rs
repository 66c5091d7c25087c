//! The reader of an exchange: inside a `kafka` source subtask reading the exchange topic, it
//! turns messages back into records, markers (in the local clock) and watermarks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rdkafka::message::{Headers, Message};
use tidemark_operators::event_json::{EventError, EventParser};
use tidemark_runtime::markers::{origin, LatencyMarker};
use tidemark_runtime::name::Name;
use tidemark_runtime::provenance::{Origin, OriginText};
use tidemark_runtime::{BoxError, Output, Record, TimestampType, Value};

use super::coordination::Exchange;
use super::naming::*;
use super::replays::ReplayFilter;
use super::state::{KeptState, PartitionProgress};
use crate::input_report::InputReport;
use crate::watermarks::PartitionWatermarks;

/// What turns the exchange's messages back into records and markers inside a `kafka` source
/// subtask (the reader), and knows when the exchange has ended.
pub(crate) struct Relay {
    pub(super) exchange: Arc<Exchange>,
    pub(super) subtask: usize,
    pub(super) readers: usize,
    pub(super) local: String,
    pub(crate) what: String,
    /// When the end was last checked (ns).
    pub(crate) last_check: i64,
    /// Parses the records' events, sharing names and repeated strings between them.
    pub(super) parser: EventParser,
    /// The highest origin taken per source partition, per exchange partition.
    pub(super) replays: ReplayFilter,
    /// Whether records not newer than the highest origin are dropped: when the vertex behind
    /// keeps its state per partition (the highest origins are part of that state).
    pub(super) drops_replays: bool,
    /// Records dropped as replays since the metrics were last told.
    pub(crate) replays_dropped: u64,
    /// The restores of the kept state whose origins were taken in.
    pub(super) restores_taken: u64,
    /// The exchange topic, the origin of every record read here (interned once).
    pub(super) topic: Name,
}

/// How often a reader checks whether the exchange has ended, once the local writers have.
pub(crate) const END_CHECK_EVERY_NANOS: i64 = 100_000_000;

fn header<'a, M: Message>(message: &'a M, name: &str) -> Option<&'a [u8]> {
    let headers = message.headers()?;
    headers.iter().find(|h| h.key == name).and_then(|h| h.value)
}

fn header_int<M: Message>(message: &M, name: &str) -> Option<i64> {
    std::str::from_utf8(header(message, name)?)
        .ok()?
        .parse()
        .ok()
}

impl Relay {
    /// Turns one message of the exchange topic into a record or a marker in `out`. Returns
    /// whether a record was emitted.
    pub(crate) fn take<M: Message>(
        &mut self,
        message: &M,
        out: &mut Output,
        watermarks: &mut PartitionWatermarks,
    ) -> Result<bool, BoxError> {
        let place = || {
            format!(
                "{}: message at {}/{} offset {}",
                self.what,
                message.topic(),
                message.partition(),
                message.offset()
            )
        };
        if let Some(kind) = header(message, HEADER_CONTROL) {
            if kind == CONTROL_MARKER.as_bytes() {
                let field = |name| {
                    header_int(message, name)
                        .ok_or_else(|| format!("{}: marker without a valid {name} header", place()))
                };
                let marked = field(HEADER_MARKED_TIME)?;
                let vertex = field(HEADER_SOURCE_VERTEX)?;
                let subtask = field(HEADER_SOURCE_SUBTASK)?;
                let text = |name| {
                    header(message, name)
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .unwrap_or("")
                };
                let clock = text(HEADER_CLOCK);
                let from = text(HEADER_ORIGIN);
                let marked = self
                    .exchange
                    .kafka
                    .to_local_clock(marked, clock, &self.local);
                let origin = if from.is_empty() || from == self.local {
                    origin::LOCAL
                } else {
                    origin::intern(from)
                };
                out.emit_marker(
                    LatencyMarker::new(marked, vertex as u32, subtask as u32).with_origin(origin),
                );
            }
            let writer = || {
                header(message, HEADER_WRITER)
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .ok_or_else(|| format!("{}: {HEADER_WRITER} header missing", place()))
            };
            if let Some(inputs) = header(message, HEADER_INPUTS) {
                let report = InputReport::from_text(inputs).map_err(|e| {
                    format!("{}: {HEADER_INPUTS} header is not a report: {e}", place())
                })?;
                watermarks.writer_report(message.topic(), message.partition(), writer()?, &report);
            } else if kind == CONTROL_WATERMARK.as_bytes() {
                let wm = header_int(message, HEADER_WATERMARK).ok_or_else(|| {
                    format!(
                        "{}: watermark without a valid {HEADER_WATERMARK} header",
                        place()
                    )
                })?;
                watermarks.writer_watermark(message.topic(), message.partition(), writer()?, wm);
            } else if kind == CONTROL_IDLE.as_bytes() {
                watermarks.writer_idle(message.topic(), message.partition(), writer()?);
            } else if kind == CONTROL_ENDED.as_bytes() {
                watermarks.writer_ended(message.topic(), message.partition(), writer()?);
            }
            // Control messages never reach user code.
            return Ok(false);
        }
        // Read twice upstream (the input message's origin is not newer than the highest taken
        // from its source partition here): counted already, in this partition's state.
        if let Some(text) = header(message, HEADER_ORIGIN_MESSAGE) {
            let text = OriginText::parse(text).ok_or_else(|| {
                format!(
                    "{}: a {HEADER_ORIGIN_MESSAGE} header that is not \
                     <topic>/<partition>/<offset>/<seq>",
                    place()
                )
            })?;
            if !self.replays.admit(message.partition(), &text) && self.drops_replays {
                tracing::debug!(
                    what = %self.what,
                    partition = message.partition(),
                    offset = message.offset(),
                    origin = %String::from_utf8_lossy(header(message, HEADER_ORIGIN_MESSAGE).unwrap_or_default()),
                    "record dropped as a replay"
                );
                self.replays_dropped += 1;
                return Ok(false);
            }
        }
        let key = key_of(header(message, HEADER_KEY_TYPE), message.key())
            .map_err(|e| format!("{}: {e}", place()))?;
        // Only exchange writers write this topic, and they always write both timestamp headers
        // and a value, but for a tombstone: anything else is named, never read as a default.
        let event = match message.payload().map(|p| self.parser.parse(p)) {
            None => None,
            Some(Ok(event)) => Some(event),
            Some(Err(EventError::Invalid(e))) => {
                return Err(format!("{}: value is not JSON: {e}", place()).into())
            }
            Some(Err(EventError::NotAnObject(_))) => {
                return Err(format!("{}: value is not a JSON object", place()).into())
            }
        };
        let timestamp = header_int(message, HEADER_TIMESTAMP).ok_or_else(|| {
            format!(
                "{}: record without a valid {HEADER_TIMESTAMP} header (nanoseconds)",
                place()
            )
        })?;
        let timestamp_type =
            timestamp_type_of(header(message, HEADER_TIMESTAMP_TYPE)).ok_or_else(|| {
                format!(
                    "{}: record without a valid {HEADER_TIMESTAMP_TYPE} header \
                     (create, ingestion or log_append)",
                    place()
                )
            })?;
        // No value: a tombstone (a deletion read with `tombstones: keep`) written as one.
        let mut record = match event {
            Some(event) => Record::with_event(key, event, timestamp),
            None => Record::tombstone(key, timestamp),
        }
        .with_timestamp_type(timestamp_type);
        // From here on the record comes from this exchange message: the position a next
        // exchange's reader orders it by (one reader reads a partition, in offset order, and
        // reads it again from the same offsets after a failover), and a reduce's result id.
        record.set_origin(Origin {
            topic: self.topic.clone(),
            partition: message.partition(),
            offset: message.offset(),
            seq: 0,
        });
        // One input of a join: this reader feeds both.
        match header(message, HEADER_INPUT) {
            None => {}
            Some(b"0") => record.set_exchange_input(0),
            Some(b"1") => record.set_exchange_input(1),
            Some(other) => {
                return Err(format!(
                    "{}: a {HEADER_INPUT} header that is not 0 or 1: {:?}",
                    place(),
                    String::from_utf8_lossy(other)
                )
                .into())
            }
        }
        out.emit(record);
        Ok(true)
    }

    /// Takes in the highest origins and event-time states of the partitions `kept` restored
    /// since the last call (one atomic load when there is nothing new): before the partition's
    /// first record is read, and before a barrier saves them. `watermarks` must follow the
    /// rebalances that made the restores already.
    pub(crate) fn take_restored(&mut self, kept: &KeptState, watermarks: &mut PartitionWatermarks) {
        if let Some((restores, restored)) = kept.restored_progress(self.restores_taken) {
            self.restores_taken = restores;
            for (partition, progress) in restored {
                self.replays
                    .restored(partition, progress.origins.unwrap_or_default());
                if let Some(heard) = progress.marks {
                    watermarks.restore_heard(&kept.exchange_topic, partition, heard);
                }
            }
        }
    }

    /// What this reader has of each exchange partition besides its keys, for a checkpoint:
    /// the highest origins taken there, and what it heard of the writers and their inputs.
    pub(crate) fn progress(
        &self,
        watermarks: &PartitionWatermarks,
    ) -> BTreeMap<i32, PartitionProgress> {
        let mut progress: BTreeMap<i32, PartitionProgress> = BTreeMap::new();
        for (partition, origins) in self.replays.snapshot() {
            progress.entry(partition).or_default().origins = Some(origins);
        }
        for (partition, heard) in watermarks.heard() {
            progress.entry(partition).or_default().marks = Some(heard.clone());
        }
        progress
    }

    /// Puts the position of a checkpoint restored from a directory aside for the partitions
    /// it names, for whichever reader subtask the group gives them to (`seed.rs`).
    pub(crate) fn resume(&self, position: super::ReaderPosition) {
        self.exchange.seed.put_position(self.subtask, position);
    }

    /// Exchange partition `partition` is no longer read by this subtask.
    pub(crate) fn forget(&mut self, partition: i32) {
        self.replays.forget(partition);
    }

    /// How many restores of the kept state this reader has taken in.
    pub(crate) fn restores_taken(&self) -> u64 {
        self.restores_taken
    }

    /// The vertex behind the exchange (for the series).
    pub(crate) fn vertex(&self) -> &str {
        &self.exchange.vertex
    }

    /// Whether the local writers have all ended (only then is the end worth checking).
    pub(crate) fn writers_done(&self) -> bool {
        self.exchange.writers_done()
    }

    /// Reports what this reader holds and whether it has read it all; true once the exchange
    /// has ended in this process.
    pub(crate) fn report(&self, held: BTreeSet<i32>, caught_up: bool) -> bool {
        self.exchange
            .report(self.subtask, self.readers, held, caught_up)
    }
}

/// A record's key from its message: the key's canonical bytes (`key`; none is an empty key)
/// and its type (`key_type`, the header [`HEADER_KEY_TYPE`]); without the type, a message of a
/// Tidemark from before the key hash was Kafka's murmur2, whose key is JSON text (none: null).
fn key_of(key_type: Option<&[u8]>, key: Option<&[u8]>) -> Result<Value, String> {
    match key_type {
        Some(type_name) => {
            let type_name = std::str::from_utf8(type_name).unwrap_or("?");
            Value::from_canonical_bytes(type_name, key.unwrap_or_default())
                .map_err(|e| format!("the key does not fit its {HEADER_KEY_TYPE} header: {e}"))
        }
        None => match key {
            None => Ok(Value::Null),
            Some(bytes) => Value::from_json(bytes).map_err(|e| format!("key is not JSON: {e}")),
        },
    }
}

/// The timestamp type a writer put in [`HEADER_TIMESTAMP_TYPE`]; `None` when missing or unknown.
fn timestamp_type_of(value: Option<&[u8]>) -> Option<TimestampType> {
    [
        TimestampType::Create,
        TimestampType::Ingestion,
        TimestampType::LogAppend,
    ]
    .into_iter()
    .find(|t| Some(t.as_str().as_bytes()) == value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_back_from_their_canonical_bytes_and_type_or_as_json_without_it() {
        for key in [
            Value::Null,
            Value::Bool(true),
            Value::Int(-42),
            Value::Double(2.5),
            Value::from("zürich"),
            Value::from_json(br#"{"a":[1,null]}"#).unwrap(),
        ] {
            let mut bytes = Vec::new();
            key.write_canonical_bytes(&mut bytes);
            let t = key.type_name().as_bytes();
            assert_eq!(key_of(Some(t), Some(&bytes)), Ok(key.clone()));
            // A message of a Tidemark before: the key as JSON, none for null.
            let json = (!key.is_null()).then(|| key.to_string().into_bytes());
            assert_eq!(key_of(None, json.as_deref()), Ok(key));
        }
        // An empty key read back as no key: null.
        assert_eq!(key_of(Some(b"null"), None), Ok(Value::Null));
        // "42" as canonical bytes is a string, as JSON an int.
        assert_eq!(key_of(Some(b"string"), Some(b"42")), Ok(Value::from("42")));
        assert_eq!(key_of(None, Some(b"42")), Ok(Value::Int(42)));
        let e = key_of(Some(b"int"), Some(b"42")).unwrap_err();
        assert!(e.contains("tidemark-key-type") && e.contains("8"), "{e}");
    }

    #[test]
    fn timestamp_types_are_read_back_and_anything_else_is_refused() {
        for t in [
            TimestampType::Create,
            TimestampType::Ingestion,
            TimestampType::LogAppend,
        ] {
            assert_eq!(timestamp_type_of(Some(t.as_str().as_bytes())), Some(t));
        }
        assert_eq!(timestamp_type_of(None), None);
        assert_eq!(timestamp_type_of(Some(b"Create")), None);
        assert_eq!(timestamp_type_of(Some(b"")), None);
    }
}
