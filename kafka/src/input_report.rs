//! Event time per input partition across the group (`docs/kafka.md`, "Failover").
//!
//! An exchange writer chained behind a `kafka` source (the usual case: source → filter/map →
//! exchange, forward edges at one parallelism) does not speak for itself but for the source
//! partitions its records come from: with each watermark it writes an [`InputReport`], each
//! partition's own watermark (or that it is idle, or that it has been given to this subtask
//! and nothing is read from it yet) and how many partitions each topic has. The reader keeps,
//! per source partition, the highest watermark any owner reported, and its watermark is the
//! minimum over *every* partition of the input topics
//! ([`crate::watermarks::WriterWatermarks`]):
//!
//! - an owner that dies or leaves stops reporting, and its partitions keep their last
//!   watermark until their new owner has read past it: nothing they still hold becomes late,
//!   and the dead owner holds nothing back once the new one has caught up;
//! - a partition nobody has reported yet (subtasks still joining the group) holds event time
//!   back, unless its owner says it is idle;
//! - idle is a lease: only the partition's current owner can say it, having read everything
//!   there is, and it says so again every watermark interval. An owner that died, lost the
//!   partition or is starved stops saying it, and the partition is held at its last watermark
//!   from the reader's next advance on, until an owner reports it again.
//!
//! The source hands its partitions' states to the writer through this thread (the task's):
//! the runtime calls [`tidemark_runtime::Source::watermarks_looked`] after every record before
//! the watermark went down the chain, so what the report says is true of everything the writer
//! was given. A writer not chained to a `kafka` source (a generator upstream, a channel between
//! them) finds no report here and speaks for itself, as before.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};

/// What one source partition holds back, as its owner last looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionMark {
    /// Read to its end (lag 0) and quiet for `watermarks.idleness`: it holds nothing back
    /// while its owner keeps saying so (every watermark interval; a claim not renewed lapses,
    /// [`crate::watermarks::WriterWatermarks`]).
    Idle,
    /// Held, nothing read from it yet: it holds event time where it was.
    Pending,
    /// Its watermark (ns).
    At(i64),
}

/// The partitions of one topic that a source subtask holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicReport {
    /// The topic.
    pub topic: String,
    /// How many partitions the topic has: every one of them counts, held here or not.
    pub partitions: i32,
    /// The partitions this subtask holds and what each holds back.
    pub marks: Vec<(i32, PartitionMark)>,
}

/// What a source subtask's partitions hold back, written by the exchange writer chained to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputReport {
    /// The source vertex.
    pub source: String,
    /// Per topic.
    pub topics: Vec<TopicReport>,
}

impl InputReport {
    /// As the header's text (JSON).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a report is always JSON")
    }

    /// From the header's text.
    pub fn from_text(text: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(text).map_err(|e| e.to_string())
    }
}

thread_local! {
    /// The report of this task's `kafka` source, if its head is one.
    static TASK_INPUT: RefCell<Option<InputReport>> = const { RefCell::new(None) };
}

/// The `kafka` source at the head of this thread's task says what its partitions hold back.
pub(crate) fn publish(report: InputReport) {
    TASK_INPUT.with(|t| *t.borrow_mut() = Some(report));
}

/// The `kafka` source at the head of this thread's task exists (before its first report).
pub(crate) fn announce(source: &str) {
    TASK_INPUT.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_none() {
            *t = Some(InputReport {
                source: source.to_owned(),
                topics: Vec::new(),
            });
        }
    });
}

/// The last report of this thread's `kafka` source, as header text; `None` when the task has
/// no `kafka` source at its head.
pub(crate) fn current_text() -> Option<String> {
    TASK_INPUT.with(|t| t.borrow().as_ref().map(InputReport::to_text))
}

/// Whether the last report of this thread's `kafka` source says some partition is idle (an
/// idle claim to renew).
pub(crate) fn current_has_idle() -> bool {
    TASK_INPUT.with(|t| {
        t.borrow().as_ref().is_some_and(|r| {
            r.topics
                .iter()
                .any(|t| t.marks.iter().any(|(_, m)| *m == PartitionMark::Idle))
        })
    })
}

/// Whether this thread's task has a `kafka` source at its head.
pub(crate) fn present() -> bool {
    TASK_INPUT.with(|t| t.borrow().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_travel_as_text() {
        let report = InputReport {
            source: "orders".into(),
            topics: vec![TopicReport {
                topic: "in".into(),
                partitions: 4,
                marks: vec![
                    (0, PartitionMark::At(-5)),
                    (2, PartitionMark::Idle),
                    (3, PartitionMark::Pending),
                ],
            }],
        };
        let text = report.to_text();
        assert_eq!(InputReport::from_text(text.as_bytes()).unwrap(), report);
        assert!(InputReport::from_text(b"{\"source\": 1}").is_err());
    }

    #[test]
    fn a_task_without_a_kafka_source_has_no_report() {
        std::thread::spawn(|| {
            assert!(!present());
            assert_eq!(current_text(), None);
            announce("s");
            assert!(present());
            let empty = InputReport::from_text(current_text().unwrap().as_bytes()).unwrap();
            assert_eq!(empty.source, "s");
            assert!(empty.topics.is_empty());
        })
        .join()
        .unwrap();
    }
}
