//! Exchanges through Kafka: an edge marked `exchange: {kafka: …}` crosses instances
//! (`docs/kafka.md`, "Scale-out: exchanges through Kafka").
//!
//! ```yaml
//! operators:
//!   per_customer:
//!     type: reduce
//!     input: orders
//!     key: customer_id
//!     exchange: {kafka: {brokers: 127.0.0.1:9092, partitions: 8, properties: {}}}
//! ```
//!
//! At build time the edge `orders → per_customer` becomes `orders → per_customer.exchange`, a
//! hidden **writer** sink chained into the upstream task, and `per_customer.exchange-in →
//! per_customer`, a hidden **reader** source with the downstream's parallelism, forward into
//! it. Both are one [`Exchange`].
//!
//! - The writer writes each record to the topic `tidemark-<job>-<vertex>-exchange` (created
//!   with `partitions`, replication as the brokers allow): the message key is the record key's
//!   canonical bytes ([`tidemark_runtime::key_hash`]) and its partition their key hash modulo
//!   the partition count, where Kafka's default partitioner puts that key, so one key always
//!   lands in one partition (its key group behind the exchange); [`HEADER_KEY_TYPE`] says the
//!   key's type; the value is the event as JSON; the
//!   headers [`HEADER_TIMESTAMP`] and [`HEADER_TIMESTAMP_TYPE`] keep the timestamp in
//!   nanoseconds and its type, so end-to-end latency continues, and [`HEADER_ORIGIN_MESSAGE`]
//!   the input message the record came from, so that a reader keeping state drops records
//!   read twice upstream (`replays`).
//! - The reader is the `kafka` source's code (consumer group of the job, cooperative
//!   rebalancing, commits, checkpoints, lag) reading that topic: every key is handled by one
//!   subtask in the whole group, whichever instance holds its partition.
//! - A marker reaching the writer is a **control message** ([`HEADER_CONTROL`] =
//!   [`CONTROL_MARKER`], no value, no key) to one random partition, behind the records before
//!   it; the reader turns it back into the same marker, corrected into its own clock by the
//!   clock-offset estimate of the instance that wrote it, and labelled with the instance it came
//!   from (`source_instance`) when that is another one. Control messages never reach user code
//!   or external sinks.
//! - Barriers are not written to Kafka: the writer flushes and acknowledges each checkpoint
//!   when the broker has every message before it; the reader commits its positions when the
//!   downstream sinks have acknowledged.
//! - Watermarks: the writer writes each watermark it gets ([`Sink::on_watermark`](tidemark_runtime::Sink::on_watermark)) as a
//!   control message ([`CONTROL_WATERMARK`], headers [`HEADER_WATERMARK`] and [`HEADER_WRITER`],
//!   the writer's id `<instance>/<vertex>/<subtask>`) to **every** partition, behind the
//!   records before it; a hello (`i64::MIN`) when it starts, so readers wait for it;
//!   [`CONTROL_IDLE`] when its inputs are idle ([`Sink::on_idle`](tidemark_runtime::Sink::on_idle)),
//!   renewed every watermark interval while they stay idle
//!   ([`Sink::on_inputs_unchanged`](tidemark_runtime::Sink::on_inputs_unchanged)); and
//!   [`CONTROL_ENDED`] when it finishes. The reader's watermark of a partition is the minimum
//!   over the writers it has heard from that have not ended and whose idle claim still holds (a
//!   lease: it lapses at the first advance after the writer's last renewal,
//!   [`crate::watermarks::WriterWatermarks`]); its subtask's is the minimum over its
//!   partitions, as for any `kafka` source (the reader vertex makes watermarks when any source
//!   of the job does).
//!
//! **How a job with an exchange ends.** The writer ends with its upstream (finite sources). A
//! reader subtask ends by itself only when its instance is alone in the group: every writer of
//! this instance has flushed, this instance's readers hold every partition of the topic between
//! them, and each has read its partitions to their end. With several instances none can know
//! whether another still writes, so the readers run until the instance is stopped (SIGTERM,
//! `--duration`): they stop reading, the last checkpoint commits what was processed, and what
//! is left in the topic is read by whoever holds the partition next, from the last commit.

//!
//! ## Files
//! | file | holds |
//! |---|---|
//! | `naming` | the names of the exchange's topic, hidden vertices and headers (the wire format) |
//! | `coordination` | the settings, the topic's creation, and when the edge has ended in this process |
//! | `writer` | the writer sink and its factory: records, markers, watermarks and input reports as messages |
//! | `reader` | the reader: messages back into records, markers and watermarks |
//! | `reader_factory` | the reader's factory: a `kafka` source on the exchange topic with a relay |
//! | `replays` | the highest origin taken per source partition: records read again upstream dropped |
//! | [`state`] | the keyed state behind the exchange, per partition, in the state topic: written at checkpoints, restored when a partition changes hands |

mod coordination;
pub(crate) mod late_joiners;
mod naming;
mod reader;
mod reader_factory;
mod replays;
mod seed;
pub mod state;
mod store;
mod writer;

pub use coordination::{Exchange, ExchangeConfig, FIELDS, MAX_PARTITIONS};
pub use naming::*;
pub(crate) use reader::{Relay, END_CHECK_EVERY_NANOS};
pub(crate) use seed::ReaderPosition;
pub use store::StateTopicStore;
pub use writer::ExchangeWriter;
