//! The writer of an exchange: a sink chained into the upstream task that writes records as
//! keyed messages, and markers, watermarks and input reports as control messages.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use tidemark_runtime::component::SinkFactory;
use tidemark_runtime::key_group::KeyGroups;
use tidemark_runtime::key_hash;
use tidemark_runtime::markers::{origin, LatencyMarker};
use tidemark_runtime::provenance::Origin;
use tidemark_runtime::{BoxError, Record, Sink, SubtaskContext};

use super::coordination::Exchange;
use super::naming::*;
use crate::client::{client_config, Properties};
use crate::sink::{flush_producer, produce, DeliveryContext};

/// One subtask of the writer: records as keyed messages, markers as control messages.
pub struct ExchangeWriter {
    exchange: Arc<Exchange>,
    /// Shared with this task's source, which flushes it before it lets a partition it lost go
    /// on in another subtask of this process (`crate::handoff`).
    producer: Arc<ThreadedProducer<DeliveryContext>>,
    context: DeliveryContext,
    what: String,
    partitions: i32,
    /// A record goes to partition `key_hash mod partitions`, its key's key group among one per
    /// partition: the state behind the exchange is kept per partition ([`super::state`]).
    key_groups: KeyGroups,
    /// xorshift state for the marker's random partition.
    random: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    /// The last record's origin as written (its `seq` as numbered here), and its text.
    last_origin: Option<Origin>,
    origin_text: Vec<u8>,
    /// This instance's name, read at the first marker.
    instance: Option<String>,
    finished: bool,
    /// `<instance>/<vertex>/<subtask>`: names this writer's watermarks.
    writer: String,
    /// Chained behind a `kafka` source: it reports the source's partitions instead of its own
    /// watermark ([`crate::input_report`]). Known at the first record or watermark.
    reports: Option<bool>,
    /// It speaks for itself and its last word was that it is idle: renewed at every look.
    idle: bool,
    /// The input of the vertex behind the exchange this writer's records are for, as the
    /// [`HEADER_INPUT`] text, when that vertex has two (a join).
    input: Option<&'static str>,
}

impl std::fmt::Debug for ExchangeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeWriter")
            .field("topic", &self.exchange.topic)
            .finish()
    }
}

impl ExchangeWriter {
    pub(super) fn new(
        exchange: Arc<Exchange>,
        ctx: &SubtaskContext,
        input: Option<&'static str>,
    ) -> Result<Self, BoxError> {
        let what = format!("kafka exchange writer \"{}\"", ctx.vertex_id);
        let partitions = exchange.ready(&what)?;
        let mut client = client_config(&exchange.config.brokers, &Properties::new());
        // Idempotent: messages reach each partition in the order written, even when a request
        // is retried, which the reader's replay filter relies on ([`super::replays`]).
        client
            .set("linger.ms", "5")
            .set("enable.idempotence", "true")
            .set(
                "client.id",
                format!(
                    "tidemark-{}-{}-{}",
                    ctx.job_name, ctx.vertex_id, ctx.subtask
                ),
            );
        for (k, v) in &exchange.config.properties {
            client.set(k, v.as_text());
        }
        let context = DeliveryContext::default();
        let producer: ThreadedProducer<DeliveryContext> = client
            .create_with_context(context.clone())
            .map_err(|e| format!("{what}: invalid Kafka settings: {e}"))?;
        let writer = format!(
            "{}/{}/{}",
            exchange.kafka.instance(),
            ctx.vertex_id,
            ctx.subtask
        );
        let mut writer = ExchangeWriter {
            exchange,
            producer: Arc::new(producer),
            context,
            what,
            partitions,
            key_groups: KeyGroups::new(partitions.max(1) as u32),
            random: ctx.seed | 1,
            key: Vec::with_capacity(24),
            value: Vec::with_capacity(128),
            last_origin: None,
            origin_text: Vec::with_capacity(48),
            instance: None,
            finished: false,
            writer,
            reports: None,
            idle: false,
            input,
        };
        // The hello: readers wait for this writer from now on, before its first record.
        writer.control(CONTROL_WATERMARK, Some(i64::MIN))?;
        Ok(writer)
    }

    /// Whether this writer reports the partitions of the `kafka` source chained before it
    /// (decided once, on this task's thread, after the source's first poll). The first time,
    /// a report goes out at once, so readers stop waiting for this writer's own watermark.
    fn reports(&mut self) -> Result<bool, BoxError> {
        if let Some(reports) = self.reports {
            return Ok(reports);
        }
        let reports = crate::input_report::present();
        self.reports = Some(reports);
        // The source of this task flushes this writer before another subtask of this process
        // reads on in a partition it lost (`crate::handoff`).
        let (producer, context) = (self.producer.clone(), self.context.clone());
        let (what, timeout) = (self.what.clone(), self.exchange.kafka.timeout());
        crate::handoff::register_task_writer(Box::new(move || {
            flush_producer(&producer, &context, &what, timeout).map_err(|e| e.to_string())
        }));
        if reports {
            self.report()?;
        }
        Ok(reports)
    }

    /// The source's partitions as its last look saw them, to every partition.
    fn report(&mut self) -> Result<(), BoxError> {
        let text = crate::input_report::current_text().unwrap_or_default();
        self.send_control(CONTROL_WATERMARK, None, Some(&text))
    }

    /// A watermark (`Some`) or idle control message to every partition.
    fn control(&mut self, kind: &str, watermark: Option<i64>) -> Result<(), BoxError> {
        self.send_control(kind, watermark, None)
    }

    fn send_control(
        &mut self,
        kind: &str,
        watermark: Option<i64>,
        inputs: Option<&str>,
    ) -> Result<(), BoxError> {
        let mut buf = itoa_buf();
        let mut headers = OwnedHeaders::new_with_capacity(4)
            .insert(Header {
                key: HEADER_CONTROL,
                value: Some(kind),
            })
            .insert(Header {
                key: HEADER_WRITER,
                value: Some(self.writer.as_str()),
            });
        if let Some(wm) = watermark {
            headers = headers.insert(Header {
                key: HEADER_WATERMARK,
                value: Some(format_i64(&mut buf, wm)),
            });
        }
        if let Some(inputs) = inputs {
            headers = headers.insert(Header {
                key: HEADER_INPUTS,
                value: Some(inputs),
            });
        }
        for partition in 0..self.partitions.max(1) {
            let pending: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.exchange.topic)
                .partition(partition)
                .headers(headers.clone());
            produce(&self.producer, &self.context, &self.what, pending)?;
        }
        Ok(())
    }

    fn next_partition(&mut self) -> i32 {
        // xorshift64: a uniform partition for each marker (rule 10: one output at random).
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        (x % self.partitions.max(1) as u64) as i32
    }

    fn send(&mut self, record: &Record) -> Result<(), BoxError> {
        self.value.clear();
        self.key.clear();
        record
            .write_event_json(&mut self.value)
            .expect("writing to memory cannot fail");
        // The message key is the key's canonical bytes and the partition their key hash
        // modulo the partition count: where Kafka's default partitioner (librdkafka's
        // `murmur2_random`, the Java client's) puts a message with that key.
        let key = record.key();
        key.write_canonical_bytes(&mut self.key);
        let partition = self.key_groups.of(key_hash::hash_bytes(&self.key)) as i32;
        let mut ts = itoa_buf();
        let ts = format_i64(&mut ts, record.timestamp);
        let mut headers = OwnedHeaders::new_with_capacity(4)
            .insert(Header {
                key: HEADER_KEY_TYPE,
                value: Some(key.type_name()),
            })
            .insert(Header {
                key: HEADER_TIMESTAMP,
                value: Some(ts),
            })
            .insert(Header {
                key: HEADER_TIMESTAMP_TYPE,
                value: Some(record.timestamp_type.as_str()),
            });
        if let Some(input) = self.input {
            headers = headers.insert(Header {
                key: HEADER_INPUT,
                value: Some(input),
            });
        }
        if let Some(origin) = record.origin() {
            self.number(origin);
            self.origin_text.clear();
            if let Some(numbered) = &self.last_origin {
                numbered.write_text(&mut self.origin_text);
            }
            headers = headers.insert(Header {
                key: HEADER_ORIGIN_MESSAGE,
                value: Some(&self.origin_text[..]),
            });
        }
        let mut pending: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.exchange.topic)
            .partition(partition)
            .key(&self.key[..])
            .timestamp(record.timestamp.div_euclid(1_000_000))
            .headers(headers);
        // A tombstone (a deletion read with `tombstones: keep`) crosses as one: no value, and
        // the reader makes it a tombstone again.
        if !record.is_tombstone() {
            pending = pending.payload(&self.value[..]);
        }
        produce(&self.producer, &self.context, &self.what, pending)
    }
}

impl ExchangeWriter {
    /// Numbers the records one input message gave: a record of the same message as the one
    /// before (they come one after the other) is one more than it, any other keeps its own
    /// `seq`. Kept in `last_origin` (no allocation: the topic is an interned name).
    fn number(&mut self, origin: &Origin) {
        match &mut self.last_origin {
            Some(last)
                if last.offset == origin.offset
                    && last.partition == origin.partition
                    && last.topic == origin.topic =>
            {
                last.seq += 1;
            }
            last => *last = Some(origin.clone()),
        }
    }
}

fn itoa_buf() -> [u8; 24] {
    [0; 24]
}

/// `v` as decimal text in `buf`, without allocating.
fn format_i64(buf: &mut [u8; 24], v: i64) -> &str {
    use std::io::Write as _;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{v}");
    let n = cursor.position() as usize;
    std::str::from_utf8(&buf[..n]).unwrap_or("0")
}

impl Sink for ExchangeWriter {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        if self.reports.is_none() {
            self.reports()?;
        }
        self.send(record)
    }

    fn write_batch(&mut self, records: &[Record]) -> Result<(), BoxError> {
        if let Some(f) = self.context.failure() {
            return Err(format!("{}: {f}", self.what).into());
        }
        if self.reports.is_none() {
            self.reports()?;
        }
        for r in records {
            self.send(r)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BoxError> {
        flush_producer(
            &self.producer,
            &self.context,
            &self.what,
            self.exchange.kafka.timeout(),
        )
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        // Ended: a writer that speaks for itself holds nothing back any more. One that reports
        // its source's partitions says nothing: they keep their watermarks until their next
        // owner has read them (this instance is stopping; another takes them over).
        if !self.finished && self.reports == Some(false) {
            self.control(CONTROL_ENDED, None)?;
        }
        flush_producer(
            &self.producer,
            &self.context,
            &self.what,
            self.exchange.kafka.timeout(),
        )?;
        if !self.finished {
            self.finished = true;
            self.exchange.writer_finished();
        }
        Ok(())
    }

    fn relays_markers(&self) -> bool {
        true
    }

    /// Writes the watermark to every partition, behind the records written before it.
    /// Chained behind a `kafka` source, it writes what each of the source's partitions holds
    /// back instead ([`crate::input_report`]).
    fn on_watermark(&mut self, watermark: i64) -> Result<(), BoxError> {
        // The first time, deciding already sent a report.
        let first = self.reports.is_none();
        match self.reports()? {
            true if first => Ok(()),
            true => self.report(),
            false => {
                self.idle = false;
                self.control(CONTROL_WATERMARK, Some(watermark))
            }
        }
    }

    /// Tells every partition's reader this writer holds nothing back until its next watermark
    /// (or, behind a `kafka` source, which of its partitions are idle).
    fn on_idle(&mut self) -> Result<(), BoxError> {
        let first = self.reports.is_none();
        match self.reports()? {
            true if first => Ok(()),
            true => self.report(),
            false => {
                self.idle = true;
                self.control(CONTROL_IDLE, None)
            }
        }
    }

    /// Renews the idle claims readers hold for this writer (each is a lease that lapses at
    /// the first advance after its last renewal): its own, or its source's idle partitions.
    fn on_inputs_unchanged(&mut self) -> Result<(), BoxError> {
        match self.reports {
            Some(true) if crate::input_report::current_has_idle() => self.report(),
            Some(false) if self.idle => self.control(CONTROL_IDLE, None),
            _ => Ok(()),
        }
    }

    /// Writes the marker as a control message to one random partition, behind the records
    /// written before it.
    fn on_marker(&mut self, marker: LatencyMarker) -> Result<(), BoxError> {
        let kafka = &self.exchange.kafka;
        let local = self
            .instance
            .get_or_insert_with(|| kafka.instance())
            .clone();
        let origin = origin::name(marker.origin).unwrap_or_else(|| local.clone());
        let (mut a, mut b, mut c) = (itoa_buf(), itoa_buf(), itoa_buf());
        let headers = OwnedHeaders::new_with_capacity(6)
            .insert(Header {
                key: HEADER_CONTROL,
                value: Some(CONTROL_MARKER),
            })
            .insert(Header {
                key: HEADER_MARKED_TIME,
                value: Some(format_i64(&mut a, marker.marked_time)),
            })
            .insert(Header {
                key: HEADER_SOURCE_VERTEX,
                value: Some(format_i64(&mut b, marker.source_id as i64)),
            })
            .insert(Header {
                key: HEADER_SOURCE_SUBTASK,
                value: Some(format_i64(&mut c, marker.source_subtask as i64)),
            })
            .insert(Header {
                key: HEADER_ORIGIN,
                value: Some(origin.as_str()),
            })
            .insert(Header {
                key: HEADER_CLOCK,
                value: Some(local.as_str()),
            });
        let partition = self.next_partition();
        let pending: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.exchange.topic)
            .partition(partition)
            .headers(headers);
        produce(&self.producer, &self.context, &self.what, pending)
    }
}

impl Exchange {
    /// The factory of the writer of one input edge whose upstream has `parallelism` subtasks.
    pub fn writer_factory(self: &Arc<Self>, parallelism: usize) -> SinkFactory {
        self.input_writer_factory(parallelism, None)
    }

    /// [`Exchange::writer_factory`] for input `input` (`0` or `1`) of a vertex with two inputs
    /// (a join): each record says which input it is for ([`HEADER_INPUT`]).
    pub fn input_writer_factory(
        self: &Arc<Self>,
        parallelism: usize,
        input: Option<usize>,
    ) -> SinkFactory {
        self.writers.fetch_add(parallelism, Ordering::SeqCst);
        let exchange = self.clone();
        debug_assert!(input.is_none_or(|i| i < 2), "a join has two inputs");
        let input = input.map(|i| if i == 0 { "0" } else { "1" });
        Box::new(move |ctx: &SubtaskContext| {
            Ok(Box::new(ExchangeWriter::new(exchange.clone(), ctx, input)?) as Box<dyn Sink>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_text_without_allocation() {
        let mut b = itoa_buf();
        assert_eq!(format_i64(&mut b, i64::MIN), "-9223372036854775808");
        assert_eq!(format_i64(&mut b, 42), "42");
    }
}
