//! Where a keyed operator's state is kept between checkpoints and found again: the
//! [`KeyedStore`].
//!
//! An operator declares that it keeps keyed state ([`Operator::has_keyed_state`]) and writes
//! and reads it through [`KeyedSnapshot`] ([`Operator::snapshot_keyed`],
//! [`Operator::restore_keyed`]); everything else is the runtime's and the store's. At every
//! checkpoint barrier the runtime takes the operator's snapshot, grouped by the store's
//! [`KeyedStore::key_groups`], and hands it to the store ([`KeyedStore::save`]); before the
//! first record, and after every poll of the source the operator is chained behind, it asks the
//! store which key groups were given to or taken from the subtask ([`KeyedStore::take_moves`],
//! [`crate::state_move`]) and applies them to the operator. No operator has code of its own
//! for either store.
//!
//! There are two stores:
//! - **the checkpoint directory** ([`DirectoryStore`]): each subtask owns a fixed range of key
//!   groups ([`crate::key_group::KeyGroupRange`]); the snapshot goes to the checkpoint
//!   coordinator, whose writer thread writes it into the checkpoint's files; a restore gives
//!   each subtask its range's keys from the checkpoint once, before the first record (at
//!   another parallelism too);
//! - **the Kafka state topic** (`tidemark-kafka`'s `StateTopicStore`), for a keyed vertex fed
//!   by a Kafka exchange: the key groups are the exchange topic's partitions, and they move
//!   with the consumer group while the job runs. When the job also checkpoints to a directory,
//!   the state topic's store hands each snapshot on to the directory's.
//!
//! A vertex gets the directory's store when the job writes or restores checkpoints to a
//! directory, and another one when the graph says so ([`crate::JobGraph::set_keyed_store`]).
//!
//! [`Operator::has_keyed_state`]: crate::Operator::has_keyed_state
//! [`Operator::snapshot_keyed`]: crate::Operator::snapshot_keyed
//! [`Operator::restore_keyed`]: crate::Operator::restore_keyed

use std::sync::Arc;

use crate::checkpoint::Checkpoints;
use crate::component::{BoxError, SubtaskContext};
use crate::key_group::KeyGroupRange;
use crate::keyed_state::KeyedSnapshot;
use crate::state_move::StateMove;

/// Where the keyed state of one operator subtask goes at each checkpoint and comes from.
pub trait KeyedStore: Send {
    /// The number of key groups the state is grouped by in this store (the snapshots the
    /// runtime hands to [`KeyedStore::save`] have that many).
    fn key_groups(&self) -> u32;

    /// The operator's keyed state as checkpoint barrier `checkpoint` passes it, after every
    /// record before the barrier: a copy in memory, the store's to keep. An error fails the
    /// job, naming the store.
    fn save(&mut self, checkpoint: u64, state: KeyedSnapshot) -> Result<(), BoxError>;

    /// Key groups given to this subtask (with their keys) or taken from it since the store
    /// was last asked: asked once before the first record, and after every poll when the
    /// operator is chained behind a source. Applied in order
    /// ([`StateMove::before_records`]).
    fn take_moves(&mut self) -> Vec<StateMove>;
}

/// Makes the store of one operator subtask; given the directory's store of that subtask when
/// the job writes or restores checkpoints to a directory (a store may hand its snapshots on to
/// it).
pub type KeyedStoreFactory = Box<
    dyn Fn(&SubtaskContext, Option<DirectoryStore>) -> Result<Box<dyn KeyedStore>, BoxError>
        + Send
        + Sync,
>;

/// The checkpoint directory as a [`KeyedStore`]: a fixed range of key groups per subtask.
pub struct DirectoryStore {
    /// The coordinator, when the job writes checkpoints (a job restored from a directory
    /// without writing new checkpoints keeps nothing).
    writer: Option<Arc<Checkpoints>>,
    vertex: usize,
    subtask: u32,
    max_parallelism: u32,
    /// The keys of this subtask's key groups from the checkpoint restored, until taken.
    restored: Option<(KeyedSnapshot, Vec<u32>)>,
}

impl std::fmt::Debug for DirectoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryStore")
            .field("vertex", &self.vertex)
            .field("subtask", &self.subtask)
            .field("max_parallelism", &self.max_parallelism)
            .field("writes", &self.writer.is_some())
            .field("restores", &self.restored.is_some())
            .finish()
    }
}

impl DirectoryStore {
    /// The store of subtask `subtask` (of `parallelism`) of vertex `vertex`, whose keys are
    /// grouped by `max_parallelism` key groups: it writes through `writer` and restores
    /// `restored` (this subtask's key groups' keys, merged from the checkpoint's files).
    pub(crate) fn new(
        writer: Option<Arc<Checkpoints>>,
        vertex: usize,
        subtask: usize,
        parallelism: usize,
        max_parallelism: u32,
        restored: Option<KeyedSnapshot>,
    ) -> Self {
        let range = KeyGroupRange::of_subtask(subtask, parallelism, max_parallelism);
        DirectoryStore {
            writer,
            vertex,
            subtask: subtask as u32,
            max_parallelism,
            restored: restored.map(|state| (state, (range.start..range.end).collect())),
        }
    }

    /// Whether a checkpoint restored gave this subtask keys not taken yet.
    pub fn restores(&self) -> bool {
        self.restored.is_some()
    }
}

impl KeyedStore for DirectoryStore {
    fn key_groups(&self) -> u32 {
        self.max_parallelism
    }

    /// Hands the snapshot to the coordinator, which writes it with the subtask's other state
    /// into checkpoint `checkpoint`'s files.
    fn save(&mut self, checkpoint: u64, state: KeyedSnapshot) -> Result<(), BoxError> {
        if let Some(c) = &self.writer {
            c.keep_keyed(checkpoint, self.vertex, self.subtask, state);
        }
        Ok(())
    }

    /// The restored keys, once.
    fn take_moves(&mut self) -> Vec<StateMove> {
        match self.restored.take() {
            Some((state, groups)) => vec![StateMove::Restore {
                state,
                forget_first: Vec::new(),
                groups,
                event_time: None,
            }],
            None => Vec::new(),
        }
    }
}
