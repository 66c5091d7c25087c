//! Exchange partitions that joined a reader subtask behind its event time.
//!
//! When the group moves an exchange partition to a subtask whose watermark has already
//! passed the partition's own (its previous owner died holding records the rest of the job
//! has long passed, say), the partition's records are not late: they are on time for that
//! partition, as Kafka Streams keeps stream time per task. So the restore of such a partition
//! tells the keyed operator its key group is behind, and after every poll the partition's own
//! watermark follows until it reaches the subtask's (or the partition is idle): the operator
//! judges and fires that key group's windows by it meanwhile, while the partition holds the
//! subtask's watermark back ([`tidemark_runtime::state_move`], "Event time per key group").
//! One key group per exchange partition: a group's number is its partition's.

use tidemark_runtime::state_move::StateMove;
use tidemark_runtime::SplitState;

/// The partitions of one reader subtask whose key groups follow their own event time.
#[derive(Debug, Default)]
pub(crate) struct LateJoiners {
    /// Partition and the watermark last told to the operator.
    followed: Vec<(i32, i64)>,
}

impl LateJoiners {
    /// Marks every restore among `moves` (taken from the state store, in order) made once the
    /// subtask has sent a watermark (`emitted`) as one that follows its own event time, then
    /// appends the event time of every partition followed that moved since the last call (a
    /// partition restored at or past `emitted`, or idle, is told at once, and follows the
    /// subtask's event time from then on). `state` gives a held partition's watermark state
    /// now.
    pub(crate) fn follow(
        &mut self,
        moves: &mut Vec<StateMove>,
        max_parallelism: u32,
        emitted: i64,
        state: impl Fn(i32) -> Option<SplitState>,
    ) {
        for m in moves.iter_mut() {
            match m {
                StateMove::Restore {
                    groups, event_time, ..
                } => {
                    for g in groups.iter() {
                        self.followed.retain(|(p, _)| *p != *g as i32);
                    }
                    // Every partition restored once the subtask has sent a watermark gets a
                    // lane (`restore_keyed_behind`), also one at or past the subtask's event
                    // time or idle: its restored windows that the subtask's event time has
                    // passed must fire (in the lane, at once), not join windows of the same
                    // span that already fired for the subtask's own keys (they would never
                    // fire). Such a lane is told its partition's watermark right below, and
                    // joins the subtask's event time then.
                    let behind = match groups.as_slice() {
                        [g] if emitted != i64::MIN => Some(match state(*g as i32) {
                            Some(SplitState::At(w)) if w < emitted => w,
                            _ => i64::MIN,
                        }),
                        _ => None,
                    };
                    tracing::debug!(
                        ?groups,
                        emitted,
                        ?behind,
                        "a restored exchange partition: its own event time until it catches up"
                    );
                    if let (Some(w), [g]) = (behind, groups.as_slice()) {
                        self.followed.push((*g as i32, w));
                    }
                    *event_time = behind;
                }
                StateMove::Forget { groups, .. } => {
                    self.followed
                        .retain(|(p, _)| !groups.contains(&(*p as u32)));
                }
                StateMove::EventTime { .. } => {}
            }
        }
        self.followed.retain_mut(|(p, told)| {
            let watermark = match state(*p) {
                Some(SplitState::At(w)) if w > *told => Some(w),
                Some(SplitState::Idle) => None,
                // Not moved, or not known yet: still behind.
                _ => return true,
            };
            moves.push(StateMove::EventTime {
                max_parallelism,
                groups: vec![*p as u32],
                watermark,
            });
            match watermark {
                Some(w) if w < emitted => {
                    *told = w;
                    true
                }
                // Caught up with the subtask, or idle: it follows the subtask's event time.
                _ => false,
            }
        });
    }

    /// Whether no partition follows its own event time.
    pub(crate) fn is_empty(&self) -> bool {
        self.followed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_runtime::keyed_state::KeyedSnapshot;

    fn restore(partition: u32) -> StateMove {
        StateMove::Restore {
            state: KeyedSnapshot::new(8),
            forget_first: Vec::new(),
            groups: vec![partition],
            event_time: None,
        }
    }

    fn event_times(moves: &[StateMove]) -> Vec<(Vec<u32>, Option<i64>)> {
        moves
            .iter()
            .filter_map(|m| match m {
                StateMove::EventTime {
                    groups, watermark, ..
                } => Some((groups.clone(), *watermark)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_partition_behind_the_subtask_follows_its_own_event_time_until_it_catches_up() {
        let mut late = LateJoiners::default();
        let mut moves = vec![restore(3)];
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::At(400)));
        match &moves[0] {
            StateMove::Restore { event_time, .. } => assert_eq!(*event_time, Some(400)),
            m => panic!("{m:?}"),
        }
        assert!(event_times(&moves).is_empty(), "nothing moved yet");
        // Its watermark moves: the operator is told; unchanged: nothing.
        let mut moves = Vec::new();
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::At(700)));
        assert_eq!(event_times(&moves), vec![(vec![3], Some(700))]);
        let mut moves = Vec::new();
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::At(700)));
        assert!(moves.is_empty());
        // Caught up: told once more, then no longer followed.
        let mut moves = Vec::new();
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::At(1_200)));
        assert_eq!(event_times(&moves), vec![(vec![3], Some(1_200))]);
        assert!(late.is_empty());
    }

    /// A partition restored at or past the subtask's event time, or idle, is not behind, but
    /// its restored windows may be due by the subtask's event time (the old owner's subtask
    /// was held back by another partition): it gets a lane all the same, told its watermark at
    /// once, so that the operator fires those windows and then joins the lane to the subtask.
    /// Merged straight into the subtask's windows they were lost when the subtask had already
    /// fired the same window for its own keys.
    #[test]
    fn a_partition_at_or_past_the_subtask_or_idle_is_told_its_event_time_at_once() {
        let mut late = LateJoiners::default();
        let mut moves = vec![restore(1), restore(2)];
        late.follow(&mut moves, 8, 1_000, |p| match p {
            1 => Some(SplitState::At(1_000)),
            _ => Some(SplitState::Idle),
        });
        for m in &moves[..2] {
            match m {
                StateMove::Restore { event_time, .. } => assert_eq!(*event_time, Some(i64::MIN)),
                m => panic!("{m:?}"),
            }
        }
        assert_eq!(
            event_times(&moves),
            vec![(vec![1], Some(1_000)), (vec![2], None)]
        );
        assert!(late.is_empty(), "caught up: no longer followed");
        // Before the subtask sent any watermark nothing is behind, and nothing has fired.
        let mut moves = vec![restore(1)];
        late.follow(&mut moves, 8, i64::MIN, |_| None);
        assert!(late.is_empty());
        match &moves[0] {
            StateMove::Restore { event_time, .. } => assert_eq!(*event_time, None),
            m => panic!("{m:?}"),
        }
    }

    #[test]
    fn a_pending_partition_is_behind_everything_and_an_idle_one_stops_being_followed() {
        let mut late = LateJoiners::default();
        let mut moves = vec![restore(5)];
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::Pending));
        match &moves[0] {
            StateMove::Restore { event_time, .. } => assert_eq!(*event_time, Some(i64::MIN)),
            m => panic!("{m:?}"),
        }
        let mut moves = Vec::new();
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::Idle));
        assert_eq!(event_times(&moves), vec![(vec![5], None)]);
        assert!(late.is_empty());
    }

    #[test]
    fn a_revoked_partition_is_no_longer_followed() {
        let mut late = LateJoiners::default();
        let mut moves = vec![restore(4)];
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::At(10)));
        let mut moves = vec![StateMove::Forget {
            max_parallelism: 8,
            groups: vec![4],
        }];
        late.follow(&mut moves, 8, 1_000, |_| Some(SplitState::At(20)));
        assert!(event_times(&moves).is_empty());
        assert!(late.is_empty());
    }
}
