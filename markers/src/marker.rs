//! The latency marker itself (rule 1 of the latency-marker contract).

/// A latency marker: a timestamp created by a source subtask that travels through the job graph
/// in order with the records and lets every operator measure how long it took to get there.
///
/// Only sources create markers (rule 1). Operators record `now - marked_time` on arrival
/// (rule 13) and forward the marker unchanged.
///
/// ```
/// use tidemark_markers::LatencyMarker;
///
/// let marker = LatencyMarker::new(1_000, 2, 0);
/// assert_eq!(marker.source_id, 2);
/// assert_eq!(marker.latency_at(1_750), 750);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LatencyMarker {
    /// Wall-clock time at which the source emitted the marker, in nanoseconds since the Unix
    /// epoch.
    pub marked_time: i64,
    /// Index of the source vertex in the job graph.
    pub source_id: u32,
    /// Index of the emitting source subtask, `0..parallelism`.
    pub source_subtask: u32,
    /// The instance the marker came from when it crossed instances through a Kafka exchange:
    /// an index of [`crate::origin`] (`0`, [`crate::origin::LOCAL`], for a marker made in this
    /// process). Its `marked_time` is then already corrected into this instance's clock.
    pub origin: u32,
}

impl LatencyMarker {
    /// Creates a marker stamped `marked_time` (ns since the Unix epoch) by subtask
    /// `source_subtask` of source vertex `source_id`.
    pub const fn new(marked_time: i64, source_id: u32, source_subtask: u32) -> Self {
        Self {
            marked_time,
            source_id,
            source_subtask,
            origin: crate::origin::LOCAL,
        }
    }

    /// The same marker, coming from the instance `origin` (an index of [`crate::origin`]).
    pub const fn with_origin(mut self, origin: u32) -> Self {
        self.origin = origin;
        self
    }

    /// The latency this marker shows when it arrives at `now_nanos`: `now_nanos - marked_time`.
    ///
    /// The value is not clamped (rule 13), so it is negative when the receiving clock is behind
    /// the source's clock; it only saturates at the `i64` limits instead of overflowing.
    pub const fn latency_at(&self, now_nanos: i64) -> i64 {
        now_nanos.saturating_sub(self.marked_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_sets_every_field() {
        let m = LatencyMarker::new(42, 7, 3);
        assert_eq!(
            m,
            LatencyMarker {
                marked_time: 42,
                source_id: 7,
                source_subtask: 3,
                origin: 0
            }
        );
    }

    #[test]
    fn latency_is_not_clamped_and_saturates() {
        let m = LatencyMarker::new(1_000, 0, 0);
        assert_eq!(m.latency_at(1_500), 500);
        assert_eq!(m.latency_at(400), -600);
        assert_eq!(LatencyMarker::new(i64::MIN, 0, 0).latency_at(1), i64::MAX);
    }
}
