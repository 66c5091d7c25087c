//! What one vertex subtask keeps at a checkpoint ([`StateFile`]), apart from the store that
//! writes and reads it ([`crate::checkpoint_store`]), so that the readers of older formats can
//! make one too.

use serde::{Deserialize, Serialize};

use crate::keyed_state::KeyedSnapshot;

/// What one vertex subtask kept at a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    /// The vertex id.
    pub vertex: String,
    /// The subtask index.
    pub subtask: u32,
    /// The vertex's parallelism then.
    pub parallelism: u32,
    /// The key groups the subtask owned (keyed vertices).
    pub key_groups: Option<(u32, u32)>,
    /// Keyed state, per key group ([`crate::keyed_state`]).
    pub keyed: Option<KeyedSnapshot>,
    /// State that is not per key ([`crate::Operator::snapshot_local`]).
    pub local: Option<Vec<u8>>,
    /// A source's position or a sink's written length ([`crate::Source::position`],
    /// [`crate::Sink::position`]).
    pub position: Option<Vec<u8>>,
    /// A source's watermark generator state: the greatest timestamp it had seen.
    pub max_timestamp: Option<i64>,
    /// The subtask had ended (its input all read, what it held emitted) before this
    /// checkpoint: this is its state after the end, and a restore does not end it again
    /// (its operators emit nothing more at the end of input).
    pub finished: bool,
}
