//! Key groups of a `window` subtask whose event time is behind the subtask's: each such set of
//! key groups has its own [`WindowState`] (a *lane*), judged and fired by its own watermark,
//! until that watermark reaches the subtask's and the lane's windows join the subtask's.
//!
//! A lane comes from a restore of key groups that moved to the subtask while their event time
//! was behind ([`tidemark_runtime::state_move`], "Event time per key group": the exchange
//! partition of a dead instance, its records on time for it but behind the survivor's
//! watermark). Lanes are rare and short-lived (a failover): while there is none, a record
//! costs one length check; while there is one, a key hash to find its key group.

use tidemark_runtime::key_group::KeyGroups;
use tidemark_runtime::keyed_state::KeyedSnapshot;
use tidemark_runtime::state_codec::StateCodecError;
use tidemark_runtime::value::Value;
use tidemark_runtime::Record;

use crate::window_state::WindowState;

/// The lanes of one `window` subtask.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
}

#[derive(Debug)]
struct Lane {
    key_groups: KeyGroups,
    groups: Vec<u32>,
    state: WindowState,
}

impl Lanes {
    /// No lane: every key follows the subtask's event time.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// The lane of `key`, if its key group has one.
    pub(crate) fn state_of(&mut self, key: &Value) -> Option<&mut WindowState> {
        let hash = key.routing_hash();
        self.lanes
            .iter_mut()
            .find(|lane| lane.groups.contains(&lane.key_groups.of(hash)))
            .map(|lane| &mut lane.state)
    }

    /// Key groups `groups` (their keys and windows in `state`) were restored behind the
    /// subtask's event time: a lane of their own, shaped as `main`, at the progress their
    /// state was saved at (their records after it are not late).
    pub(crate) fn restore(
        &mut self,
        main: &WindowState,
        state: &KeyedSnapshot,
        groups: &[u32],
    ) -> Result<(), StateCodecError> {
        self.forget(groups);
        let mut lane = Lane {
            key_groups: KeyGroups::new(state.max_parallelism()),
            groups: groups.to_vec(),
            state: main.empty_like(),
        };
        lane.state.restore(state)?;
        self.lanes.push(lane);
        Ok(())
    }

    /// The watermark of key groups `groups` advanced to `watermark` (`None`: idle): their
    /// lane fires its due windows into `emit`, never past the subtask's progress; a lane that
    /// reached it, or is idle, joins `main`.
    pub(crate) fn advance(
        &mut self,
        main: &mut WindowState,
        groups: &[u32],
        watermark: Option<i64>,
        mut emit: impl FnMut(Record),
    ) -> Result<(), StateCodecError> {
        let progress = main.progress();
        let mut joined = Vec::new();
        let mut i = 0;
        while i < self.lanes.len() {
            let lane = &mut self.lanes[i];
            if !lane.groups.iter().any(|g| groups.contains(g)) {
                i += 1;
                continue;
            }
            let to = watermark.map_or(progress, |w| w.min(progress));
            lane.state.advance(to, &mut emit);
            if watermark.is_none_or(|w| w >= progress) {
                joined.push(self.lanes.swap_remove(i));
            } else {
                i += 1;
            }
        }
        for lane in joined {
            let mut state = KeyedSnapshot::new(lane.key_groups.max_parallelism());
            lane.state.snapshot(&mut state)?;
            main.restore_windows(&state)?;
        }
        Ok(())
    }

    /// Key groups `groups` moved away: their lanes forget them (and a lane left with no key
    /// group goes).
    pub(crate) fn forget(&mut self, groups: &[u32]) {
        self.lanes.retain_mut(|lane| {
            lane.groups.retain(|g| !groups.contains(g));
            !lane.groups.is_empty()
        });
    }

    /// Forgets the windows of every key `forget` is true of, in every lane.
    pub(crate) fn forget_keys(
        &mut self,
        forget: &dyn Fn(&Value) -> bool,
    ) -> Result<(), StateCodecError> {
        for lane in &mut self.lanes {
            lane.state.forget(forget)?;
        }
        Ok(())
    }

    /// Writes every lane's keys and windows into `out` beside the subtask's, whose progress
    /// `out` already holds: the progress kept is the least of theirs (a restore then takes
    /// none of the lanes' records as late).
    pub(crate) fn snapshot(&self, out: &mut KeyedSnapshot) -> Result<(), StateCodecError> {
        if self.lanes.is_empty() {
            return Ok(());
        }
        let mut least = out.shared::<i64>()?.into_iter().min().unwrap_or(i64::MAX);
        for lane in &self.lanes {
            let mut part = KeyedSnapshot::new(out.max_parallelism());
            lane.state.snapshot(&mut part)?;
            least = least.min(lane.state.progress());
            out.merge(part);
        }
        out.set_shared(&least)
    }

    /// The end of input: every lane's windows fire.
    pub(crate) fn finish(&mut self, mut emit: impl FnMut(Record)) {
        for lane in &mut self.lanes {
            lane.state.finish(&mut emit);
        }
        self.lanes.clear();
    }

    /// What the lanes hold, added to `size`.
    pub(crate) fn add_size(&self, size: &mut tidemark_runtime::StateSize) {
        for lane in &self.lanes {
            let s = lane.state.size();
            size.keys += s.keys;
            size.windows_open += s.windows_open;
            size.bytes += s.bytes;
        }
    }
}
