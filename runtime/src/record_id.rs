//! The ids a record carries beside its event ([`Origin`], [`ResultId`]); what they are for is
//! told in [`crate::provenance`], which also names them.

use std::fmt;
use std::io::Write as _;

use crate::name::Name;

/// The input message a record was made from: a Kafka topic-partition, the message's offset,
/// and the record's number among those the message gave (`seq`, 0 for the first).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The source topic.
    pub topic: Name,
    /// The source partition.
    pub partition: i32,
    /// The message's offset.
    pub offset: i64,
    /// The record's number among those one message gave.
    pub seq: u32,
}

impl Origin {
    /// Whether `self` comes after `other` in their partition: a higher offset, or the same
    /// offset and a higher `seq`.
    pub fn is_after(&self, offset: i64, seq: u32) -> bool {
        (self.offset, self.seq) > (offset, seq)
    }

    /// Appends `<topic>/<partition>/<offset>/<seq>` (topic names hold no `/`).
    pub fn write_text(&self, out: &mut Vec<u8>) {
        let _ = write!(
            out,
            "{}/{}/{}/{}",
            self.topic, self.partition, self.offset, self.seq
        );
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.topic, self.partition, self.offset, self.seq
        )
    }
}

/// An origin's text read back ([`Origin::write_text`]), borrowing the topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OriginText<'a> {
    /// The source topic.
    pub topic: &'a str,
    /// The source partition.
    pub partition: i32,
    /// The message's offset.
    pub offset: i64,
    /// The record's number among those one message gave.
    pub seq: u32,
}

impl<'a> OriginText<'a> {
    /// Reads `<topic>/<partition>/<offset>/<seq>`; `None` for anything else.
    pub fn parse(text: &'a [u8]) -> Option<OriginText<'a>> {
        let text = std::str::from_utf8(text).ok()?;
        let mut parts = text.rsplitn(4, '/');
        let seq = parts.next()?.parse().ok()?;
        let offset = parts.next()?.parse().ok()?;
        let partition = parts.next()?.parse().ok()?;
        let topic = parts.next()?;
        if topic.is_empty() || topic.contains('/') {
            return None;
        }
        Some(OriginText {
            topic,
            partition,
            offset,
            seq,
        })
    }
}

/// Which result of an operator a record is. With the record's key (and, for a reduce, its
/// origin) it names the result: computed again after a failover, the same result has the
/// same id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResultId {
    /// A window's result: the key's result in the window `[start, end)` (ns since the epoch)
    /// at its `firing`-th firing: 0 when the window fired on time, 1, 2, … for the updates
    /// late records made within the allowed lateness.
    Window {
        /// The `window` vertex.
        vertex: Name,
        /// The window's first instant (ns).
        start: i64,
        /// The window's end, exclusive (ns).
        end: i64,
        /// The firing's number.
        firing: u32,
    },
    /// A reduce's output for the input record whose origin the record carries.
    Reduce {
        /// The `reduce` vertex.
        vertex: Name,
    },
    /// A join's result: of the left record and the right record with these origins (`None`:
    /// the side is null, an unmatched record's result).
    Join {
        /// The `join` vertex.
        vertex: Name,
        /// The left record's origin.
        left: Option<Origin>,
        /// The right record's origin.
        right: Option<Origin>,
    },
}
