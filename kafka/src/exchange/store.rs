//! The Kafka state topic as the store of a keyed vertex behind an exchange
//! ([`tidemark_runtime::keyed_store`]).
//!
//! The reader of the exchange is an ordinary source: what it shares with the store of the
//! keyed operator chained behind it is the partitions' [`KeptState`], made with the reader
//! subtask (whose consumer's rebalances restore and revoke partitions in it) and taken by the
//! store of the operator subtask with the same index. Its key groups are the exchange topic's
//! partitions; the store writes each checkpoint's changed keys to the state topic once the
//! checkpoint is complete (`state.rs`) and gives the operator the partitions the group moved,
//! in the order the reader handed them on after its polls. A restore from a checkpoint
//! directory puts the checkpoint's keys aside for the partitions (`seed.rs`): the store of
//! whichever subtask the group gives a partition restores it from there, once.

use std::sync::Arc;

use tidemark_runtime::keyed_state::KeyedSnapshot;
use tidemark_runtime::keyed_store::{DirectoryStore, KeyedStore, KeyedStoreFactory};
use tidemark_runtime::state_move::StateMove;
use tidemark_runtime::{BoxError, SubtaskContext};

use super::coordination::Exchange;
use super::state::KeptState;

/// The state topic's store of one keyed operator subtask behind a Kafka exchange.
#[derive(Debug)]
pub struct StateTopicStore {
    kept: Arc<KeptState>,
    /// The checkpoint directory's store, when the job also writes checkpoints there: each
    /// snapshot is handed on to it.
    directory: Option<DirectoryStore>,
}

impl KeyedStore for StateTopicStore {
    fn key_groups(&self) -> u32 {
        self.kept.partitions()
    }

    fn save(&mut self, checkpoint: u64, state: KeyedSnapshot) -> Result<(), BoxError> {
        self.kept.save(checkpoint, &state)?;
        match &mut self.directory {
            Some(directory) => directory.save(checkpoint, state),
            None => Ok(()),
        }
    }

    fn take_moves(&mut self) -> Vec<StateMove> {
        self.kept.take_handed()
    }
}

impl Exchange {
    /// The factory of the stores of the keyed vertex behind this exchange, when it keeps state
    /// ([`Exchange::keep_state`]): each takes the state of the reader subtask it is chained
    /// behind.
    pub fn store_factory(self: &Arc<Self>) -> KeyedStoreFactory {
        let exchange = self.clone();
        Box::new(
            move |ctx: &SubtaskContext, directory: Option<DirectoryStore>| {
                let kept = exchange
                    .kept
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&ctx.subtask)
                    .ok_or_else(|| {
                        format!(
                            "vertex \"{}\" subtask {}: its state moves with the partitions of \
                             the Kafka exchange before it, so it must be chained behind the \
                             exchange's reader (same parallelism, forward edge)",
                            ctx.vertex_id, ctx.subtask
                        )
                    })?;
                // Restored from a checkpoint directory: its keys wait for their partitions
                // ([`super::seed`]), whichever subtask the group gives them to.
                let mut directory = directory;
                for m in directory.iter_mut().flat_map(|d| d.take_moves()) {
                    if let StateMove::Restore { state, .. } = m {
                        if state.max_parallelism() != kept.partitions() {
                            return Err(format!(
                                "vertex \"{}\": the checkpoint holds its keys in {} key groups \
                                 (the partitions of its Kafka exchange then) and the exchange \
                                 has {} partitions now; a restore needs the same count",
                                ctx.vertex_id,
                                state.max_parallelism(),
                                kept.partitions()
                            )
                            .into());
                        }
                        exchange.seed.put_state(ctx.subtask, &state).map_err(|e| {
                            format!(
                                "vertex \"{}\" subtask {}: the checkpoint's state: {e}",
                                ctx.vertex_id, ctx.subtask
                            )
                        })?;
                    }
                }
                Ok(Box::new(StateTopicStore { kept, directory }) as Box<dyn KeyedStore>)
            },
        )
    }
}
