//! What the parts of an exchange are called: its topic, its hidden vertices, and the headers of
//! its messages (the wire format between instances).

/// The name of the exchange kind in job files: `exchange: {kafka: …}`.
pub const KIND: &str = "kafka";
/// Header of a control message: its kind ([`CONTROL_MARKER`], [`CONTROL_WATERMARK`]).
pub const HEADER_CONTROL: &str = "tidemark-control";
/// Control kind of a latency marker.
pub const CONTROL_MARKER: &str = "marker";
/// Control kind of a watermark: headers [`HEADER_WATERMARK`] and [`HEADER_WRITER`], to every
/// partition.
pub const CONTROL_WATERMARK: &str = "watermark";
/// Control kind of a writer whose inputs are idle: header [`HEADER_WRITER`], to every
/// partition, renewed every watermark interval while they are; the writer holds nothing back
/// until its next watermark, as long as it keeps renewing the claim (a lease,
/// [`crate::watermarks::WriterWatermarks`]).
pub const CONTROL_IDLE: &str = "idle";
/// Control kind of a writer that finished (its inputs ended): header [`HEADER_WRITER`], to every
/// partition; the writer holds nothing back, for good.
pub const CONTROL_ENDED: &str = "ended";
/// Header of a watermark: nanoseconds since the Unix epoch, as decimal text; `i64::MIN` is the
/// writer's hello, written before its first record so that readers wait for it.
pub const HEADER_WATERMARK: &str = "tidemark-watermark";
/// Header of a watermark control message of a writer chained behind a `kafka` source: what
/// each of the source's partitions holds back, as JSON ([`crate::input_report::InputReport`]).
/// The reader then counts the source's partitions, not the writer
/// ([`crate::watermarks::WriterWatermarks`]).
pub const HEADER_INPUTS: &str = "tidemark-inputs";
/// Header of a watermark or idle control message: the writer, `<instance>/<vertex>/<subtask>`.
pub const HEADER_WRITER: &str = "tidemark-writer";
/// Header: a record's timestamp, nanoseconds since the Unix epoch, as decimal text.
pub const HEADER_TIMESTAMP: &str = "tidemark-timestamp";
/// Header of a record: the type of its key (`null`, `bool`, `int`, `double`, `string`, `list`,
/// `map`), which the message key, the key's canonical bytes
/// ([`tidemark_runtime::key_hash`]), does not say. The reader reads the key back from the
/// two; a message without it (written by a Tidemark before the key hash became Kafka's
/// murmur2) has the key's JSON text as its message key.
pub const HEADER_KEY_TYPE: &str = "tidemark-key-type";
/// Header: a record's timestamp type (`create`, `ingestion`, `log_append`).
pub const HEADER_TIMESTAMP_TYPE: &str = "tidemark-timestamp-type";
/// Header of a marker: its `marked_time` in the clock of [`HEADER_CLOCK`]'s instance, ns.
pub const HEADER_MARKED_TIME: &str = "tidemark-marked-time";
/// Header of a record: the input message it was made from, `<topic>/<partition>/<offset>/<seq>`
/// ([`tidemark_runtime::provenance::Origin`]; `seq` numbers the records one input message
/// gave). The reader drops a record whose origin is not newer than the highest it has taken
/// from that source partition ([`super::replays`]). Absent for a record without an origin (a
/// source other than `kafka`).
pub const HEADER_ORIGIN_MESSAGE: &str = "tidemark-origin";
/// Header of a record written for one input of a vertex with two (a join): the input's number
/// in the vertex (`0` left, `1` right), as decimal text. The reader puts it on the record
/// ([`tidemark_runtime::Record::exchange_input`]), as one reader feeds both inputs.
pub const HEADER_INPUT: &str = "tidemark-input";
/// Header of a marker: the index of its source vertex in the job graph.
pub const HEADER_SOURCE_VERTEX: &str = "tidemark-source-vertex";
/// Header of a marker: the index of its source subtask.
pub const HEADER_SOURCE_SUBTASK: &str = "tidemark-source-subtask";
/// Header of a marker: the instance whose source made it (`source_instance`).
pub const HEADER_ORIGIN: &str = "tidemark-origin-instance";
/// Header of a marker: the instance whose clock `marked_time` is in (the writer's).
pub const HEADER_CLOCK: &str = "tidemark-clock-instance";

/// The internal topic of the exchange into `vertex`: `tidemark-<job>-<vertex>-exchange`.
pub fn topic_name(job: &str, vertex: &str) -> String {
    format!("tidemark-{job}-{vertex}-exchange")
}

/// The id of the hidden writer of the exchange into `vertex` from `input` (`<vertex>.exchange`,
/// or `<vertex>.exchange.<input>` when `vertex` has several inputs).
pub fn writer_id(vertex: &str, input: &str, inputs: usize) -> String {
    if inputs > 1 {
        format!("{vertex}.exchange.{input}")
    } else {
        format!("{vertex}.exchange")
    }
}

/// The id of the hidden reader of the exchange into `vertex`: `<vertex>.exchange-in`.
pub fn reader_id(vertex: &str) -> String {
    format!("{vertex}.exchange-in")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(topic_name("job", "sum"), "tidemark-job-sum-exchange");
        assert_eq!(writer_id("sum", "gen", 1), "sum.exchange");
        assert_eq!(writer_id("sum", "gen", 2), "sum.exchange.gen");
        assert_eq!(reader_id("sum"), "sum.exchange-in");
    }
}
