//! What both kinds of `join` share ([`super::join`], [`super::table_join`]): building a
//! result (its event, `select`, its `tidemark-result-id`), late records and the counts of what
//! was dropped, and the snapshot forms of held events and their origins.

use std::sync::Arc;

use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::provenance::{Origin, ResultId};
use tidemark_runtime::value::{Map, Value};
use tidemark_runtime::{BoxError, DropReason, JoinCounts, Output, Record};

use crate::expr::{self, Evaluator, EventRef, Expr, Scope};
use crate::on_error::{self, OnError};

/// Why a join refuses records that came over its only input.
pub(crate) const ONE_INPUT: &str =
    "a join needs two inputs, its left (connected first) and its right: this one has one";

/// The watermark a join continues from after taking in restored state whose old subtasks had
/// the watermarks `restored`: the smallest of them, and never above the one it has (`current`,
/// `i64::MIN` before any).
///
/// Not the largest: behind a Kafka exchange a subtask takes partitions from several old
/// holders, one after another while it runs, and each holder's watermark was the minimum over
/// *its* partitions only. The largest could lie past the event time of another partition taken
/// in, whose records would then be dropped as late (seen: 33 records late after a new instance
/// took partitions from the survivor). The reader's watermark, the minimum over this subtask's
/// partitions, moves the join on from there. Restored from a directory through hash edges the
/// old subtasks' watermarks differ by what was in flight at the barrier, so the smallest keeps
/// no record out that the run before took in.
pub(crate) fn restored_watermark(current: i64, restored: impl IntoIterator<Item = i64>) -> i64 {
    let Some(smallest) = restored.into_iter().min() else {
        return current;
    };
    match current {
        i64::MIN => smallest,
        _ => current.min(smallest),
    }
}

/// Key groups restored behind the subtask's event time (behind a Kafka exchange: a partition
/// that moved here from an owner that had not got as far, `runtime::state_move`): while any
/// is catching up, a join calls no record late and lets no held record leave (a table join
/// also joins no left record yet), for any key: it cannot tell which records belong to which
/// partition's event time. Records that would have been late in the meantime are then taken
/// in; nothing on time is lost, and what leaves, leaves once they caught up.
///
/// Whether the last of `behind` caught up, now that `groups` are at `watermark` (`None`: idle)
/// and the subtask at `current`; those that did are taken out of `behind`.
pub(crate) fn caught_up(
    behind: &mut Vec<u32>,
    groups: &[u32],
    watermark: Option<i64>,
    current: i64,
) -> bool {
    if behind.is_empty() {
        return false;
    }
    if watermark.is_none_or(|w| w >= current) {
        behind.retain(|g| !groups.contains(g));
    }
    behind.is_empty()
}

/// One side of a result: the record's event and its origin, if it has one.
pub(crate) type Part<'a> = (&'a Value, Option<&'a Origin>);

/// A result record, named by `id` if it has one.
fn result(key: &Value, event: Map, t: i64, id: Option<ResultId>) -> Record {
    let mut record = Record::with_event(key.clone(), event, t);
    if let Some(id) = id {
        record.set_result_id(id);
    }
    record
}

/// What both kinds of join share: building results (`select`), late records, the counts of
/// records dropped.
pub(crate) struct JoinResults {
    /// The join vertex, for its results' ids.
    vertex: Name,
    select: Option<Arc<[(Name, Expr)]>>,
    eval: Evaluator,
    on_error: OnError,
    late: Option<OnError>,
    lateness: i64,
    late_dropped: u64,
    pub(crate) unmatched_dropped: u64,
    /// Tombstones dropped: where they mean nothing (an interval join's inputs, a table join's
    /// left input).
    pub(crate) tombstones_dropped: u64,
    /// Results emitted: of a match, of a record that matched nothing.
    matched: u64,
    unmatched: u64,
    /// `left`, `right`, `key`: the output's and `select`'s names, made once.
    names: [Name; 3],
}

impl JoinResults {
    /// The results of join vertex `vertex`, with its `select`, `on_error`, `late` handling and
    /// lateness (ns).
    pub(crate) fn new(
        vertex: &str,
        select: Option<Arc<[(Name, Expr)]>>,
        on_error: OnError,
        late: Option<OnError>,
        lateness: i64,
    ) -> Self {
        JoinResults {
            vertex: name_of(vertex),
            select,
            eval: Evaluator::new(),
            on_error,
            late,
            lateness,
            late_dropped: 0,
            unmatched_dropped: 0,
            tombstones_dropped: 0,
            matched: 0,
            unmatched: 0,
            names: [name_of("left"), name_of("right"), name_of("key")],
        }
    }

    /// Emits the result of `left` and `right` (`None`: unmatched) at `t`, keyed `key`. It names
    /// the records it comes from (`tidemark-result-id`) where each of them has an origin.
    pub(crate) fn emit(
        &mut self,
        key: &Value,
        left: Option<Part<'_>>,
        right: Option<Part<'_>>,
        t: i64,
        out: &mut Output,
    ) -> Result<(), BoxError> {
        match left.is_some() && right.is_some() {
            true => self.matched += 1,
            false => self.unmatched += 1,
        }
        let named = [left, right]
            .iter()
            .all(|p| p.is_none_or(|(_, origin)| origin.is_some()));
        let id = named.then(|| ResultId::Join {
            vertex: self.vertex.clone(),
            left: left.and_then(|(_, o)| o.cloned()),
            right: right.and_then(|(_, o)| o.cloned()),
        });
        let (left, right) = (left.map(|(e, _)| e), right.map(|(e, _)| e));
        let mut both = Map::with_capacity(2);
        both.push_unchecked(self.names[0].clone(), left.cloned().unwrap_or(Value::Null));
        both.push_unchecked(self.names[1].clone(), right.cloned().unwrap_or(Value::Null));
        let Some(select) = &self.select else {
            out.emit(result(key, both, t, id));
            return Ok(());
        };
        both.push_unchecked(self.names[2].clone(), key.clone());
        let scope = Scope {
            event: EventRef::Map(&both),
            key,
            timestamp_ms: t.div_euclid(1_000_000),
        };
        let mut fields = Map::with_capacity(select.len());
        for (name, e) in select.iter() {
            match self.eval.eval(e, &scope) {
                Ok(v) => fields.push_unchecked(name.clone(), v),
                Err(error) => return self.on_error.handle(e, error, &scope.event),
            }
        }
        out.emit(result(key, fields, t, id));
        Ok(())
    }

    /// `record` is behind `watermark` minus the lateness: counted, and written to the dead
    /// letter if there is one.
    #[cold]
    pub(crate) fn late(&mut self, record: &Record, watermark: i64) -> Result<(), BoxError> {
        self.late_dropped += 1;
        if let Some(dead_letter) = &mut self.late {
            let message = format!(
                "late: the record's timestamp {} ms is behind the join's watermark {} ms \
                 minus allowed_lateness {} ms",
                record.timestamp.div_euclid(1_000_000),
                watermark.div_euclid(1_000_000),
                self.lateness / 1_000_000,
            );
            expr::with_record(record, |scope| {
                dead_letter.drop_record(&message, &scope.event)
            })?;
        }
        Ok(())
    }

    /// `allowed_lateness` (ns).
    pub(crate) fn lateness(&self) -> i64 {
        self.lateness
    }

    /// The end of input for the dead-letter files.
    pub(crate) fn finish(&mut self) -> Result<(), BoxError> {
        self.on_error.finish()?;
        match &mut self.late {
            Some(late) => late.finish(),
            None => Ok(()),
        }
    }

    /// The lengths of the dead-letter files ([`Operator::snapshot_local`]).
    pub(crate) fn snapshot_local(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        match &mut self.late {
            Some(late) => on_error::snapshot_handlers(&mut [&mut self.on_error, late], checkpoint),
            None => on_error::snapshot_handlers(&mut [&mut self.on_error], checkpoint),
        }
    }

    /// Cuts the dead-letter files back ([`Operator::restore_local`]).
    pub(crate) fn restore_local(&mut self, state: &[u8]) -> Result<(), BoxError> {
        match &mut self.late {
            Some(late) => on_error::restore_handlers(&mut [&mut self.on_error, late], state),
            None => on_error::restore_handlers(&mut [&mut self.on_error], state),
        }
    }

    /// The counts of [`Operator::join_counts`], with the records held now.
    pub(crate) fn counts(&self, held_left: u64, held_right: u64) -> JoinCounts {
        JoinCounts {
            matched: self.matched,
            unmatched: self.unmatched,
            held_left,
            held_right,
        }
    }

    /// Records dropped for `reason`.
    pub(crate) fn dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Late => self.late_dropped,
            DropReason::ExpressionError => self.on_error.dropped,
            DropReason::Unmatched => self.unmatched_dropped,
            DropReason::Tombstone => self.tombstones_dropped,
            _ => 0,
        }
    }
}

/// An origin as a snapshot keeps it: `(topic, partition, offset, seq)`.
pub(crate) mod origin_form {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use tidemark_runtime::name::name_of;
    use tidemark_runtime::provenance::Origin;

    pub(crate) fn serialize<S: Serializer>(o: &Option<Origin>, s: S) -> Result<S::Ok, S::Error> {
        o.as_ref()
            .map(|o| (&*o.topic, o.partition, o.offset, o.seq))
            .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Origin>, D::Error> {
        let form = Option::<(String, i32, i64, u32)>::deserialize(d)?;
        Ok(form.map(|(topic, partition, offset, seq)| Origin {
            topic: name_of(&topic),
            partition,
            offset,
            seq,
        }))
    }
}

/// An event as its JSON text.
pub(crate) mod event_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use tidemark_runtime::value::Value;

    pub(crate) fn serialize<S: Serializer>(v: &Value, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Value::from_json(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// A rough size in bytes of `v` in memory.
pub(crate) fn approximate_size(v: &Value) -> u64 {
    match v {
        Value::String(s) => 16 + s.len() as u64,
        Value::List(l) => 24 + l.iter().map(approximate_size).sum::<u64>(),
        Value::Map(m) => {
            24 + m
                .iter()
                .map(|(k, v)| 16 + k.len() as u64 + approximate_size(v))
                .sum::<u64>()
        }
        _ => 16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_behind_leave_once_at_the_subtasks_event_time_or_idle() {
        let mut behind = vec![3, 5];
        assert!(!caught_up(&mut behind, &[3], Some(90), 100));
        assert_eq!(behind, [3, 5]);
        assert!(!caught_up(&mut behind, &[3], Some(100), 100));
        assert_eq!(behind, [5]);
        assert!(caught_up(&mut behind, &[5], None, 100));
        assert!(behind.is_empty());
        assert!(
            !caught_up(&mut behind, &[5], None, 100),
            "nothing was behind"
        );
    }

    #[test]
    fn a_restore_continues_from_the_smallest_watermark_and_never_raises_one() {
        assert_eq!(restored_watermark(i64::MIN, [30, 10, 20]), 10);
        assert_eq!(restored_watermark(i64::MIN, []), i64::MIN);
        // Running, with partitions taken in one after another: lowered, never raised.
        assert_eq!(restored_watermark(15, [40]), 15);
        assert_eq!(restored_watermark(15, [12, 40]), 12);
        assert_eq!(restored_watermark(15, []), 15);
    }
}
