//! Partitions that move between the `kafka` source subtasks of one process resume exactly
//! where the previous local owner stopped (`docs/kafka.md`, "Failover").
//!
//! The subtasks of one instance join the group one by one, so at a cold start the first to
//! join is given every partition, reads, and then hands some over to the next as it joins.
//! With checkpoints nothing is committed at that moment, and the new owner would resume at the
//! group's commit (or, with none, at `start`): reading again what the first one already handed
//! to the job. So the subtask that loses a partition leaves its read position here (the offset
//! after the last message it handed to the job), and the subtask of this process given the
//! partition next starts there, or at the group's commit if that lies further (the partition
//! went to another instance meanwhile, which committed past it).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::metrics::PartitionKey;

/// Read positions per (brokers and group, partition), of one job in this process
/// ([`crate::KafkaJob`]).
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    positions: Mutex<HashMap<(String, PartitionKey), i64>>,
}

impl Handoff {
    /// A subtask of group `group` lost `key` having handed everything before `offset` to the
    /// job.
    pub(crate) fn leave(&self, group: &str, key: &PartitionKey, offset: i64) {
        self.positions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((group.to_owned(), key.clone()), offset);
    }

    /// A subtask of group `group` is given `key`: where the previous owner in this process
    /// stopped, if one did (taken: it is used once).
    pub(crate) fn take(&self, group: &str, key: &PartitionKey) -> Option<i64> {
        self.positions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(group.to_owned(), key.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_left_is_taken_once_by_group() {
        let h = Handoff::default();
        let key = ("t".to_owned(), 3);
        h.leave("brokers|g", &key, 42);
        assert_eq!(h.take("brokers|other", &key), None);
        assert_eq!(h.take("brokers|g", &key), Some(42));
        assert_eq!(h.take("brokers|g", &key), None);
    }
}
