//! The record: what flows through a Tidemark job.

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

/// One record: a key, a value and a timestamp with its type.
///
/// Records are small `Copy` values so that batches of them move through channels without any
/// per-record allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Record {
    /// The partitioning key (`hash` edges route on it).
    pub key: u64,
    /// The payload.
    pub value: f64,
    /// Nanoseconds since the Unix epoch.
    pub timestamp: i64,
    /// Where `timestamp` came from.
    pub timestamp_type: TimestampType,
}

impl Record {
    /// A record with a create-time timestamp.
    pub fn new(key: u64, value: f64, timestamp: i64) -> Self {
        Record {
            key,
            value,
            timestamp,
            timestamp_type: TimestampType::Create,
        }
    }
}
