//! The key of a `hash` edge: `key:` on an operator or sink, a CEL expression over the event
//! that its input records are routed and grouped on.
//!
//! ```yaml
//! operators:
//!   per_customer:
//!     type: window
//!     input: orders
//!     partition: hash          # the default for window and reduce
//!     key: customer_id         # CEL over the event
//!     size: 10s
//!     aggregates: {orders: count}
//! ```
//!
//! The job-file loader puts one small operator, [`key_by`], between each input and the vertex,
//! with the input's parallelism and a forward edge, so that it runs in the input's task (no
//! extra hop); it is named `<vertex>.key` (`<vertex>.key.<input>` when the vertex has several
//! inputs) in metrics and reports. It sets each record's key to the expression's value, which
//! the `hash` edge then routes on, so equal keys meet in one subtask and windows and reduces
//! group by it (and write it as their output's `key`). An expression that fails on a record
//! follows the vertex's `on_error`.

use tidemark_runtime::component::OperatorFactory;
use tidemark_runtime::{BoxError, DropReason, Operator, Output, Record, SubtaskContext};

use crate::component::BuildEnv;
use crate::expr::{self, CompileError, Evaluator, Expr};
use crate::on_error::{ErrorPolicy, OnError, OnErrorFactory};

/// The factory of the operator that keys records by `expression`, failing records handled by
/// `on_error`. Compile errors come back for the loader to locate.
pub fn key_by(
    expression: &str,
    on_error: ErrorPolicy,
    env: &BuildEnv,
) -> Result<OperatorFactory, CompileError> {
    let key = Expr::compile(expression)?;
    let on_error = OnErrorFactory::new(on_error, &env.job_dir);
    Ok(Box::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(KeyBy {
            key: key.clone(),
            eval: Evaluator::new(),
            on_error: on_error.subtask(&ctx.vertex_id)?,
        }) as Box<dyn Operator>)
    }))
}

/// One subtask of a key stage.
#[derive(Debug)]
struct KeyBy {
    key: Expr,
    eval: Evaluator,
    on_error: OnError,
}

impl Operator for KeyBy {
    /// No processing-time timers: its task may sleep until input comes.
    fn uses_time(&self) -> bool {
        false
    }

    /// The dead-letter file's length ([`OnError::snapshot`]).
    fn snapshot_local(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, BoxError> {
        self.on_error.snapshot(checkpoint)
    }

    /// Cuts the dead-letter file back to its recorded length ([`OnError::restore`]).
    fn restore_local(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.on_error.restore(state)
    }

    fn finish(&mut self, _now_nanos: i64, _out: &mut Output) -> Result<(), BoxError> {
        self.on_error.finish()
    }

    fn process(&mut self, mut record: Record, out: &mut Output) -> Result<(), BoxError> {
        let (eval, key, on_error) = (&self.eval, &self.key, &mut self.on_error);
        let value = expr::with_record(&record, |scope| match eval.eval(key, scope) {
            Ok(v) => Ok(Some(v)),
            Err(e) => on_error.handle(key, e, &scope.event).map(|()| None),
        })?;
        if let Some(value) = value {
            expr::set_key(&mut record, value);
            out.emit(record);
        }
        Ok(())
    }

    /// Takes each record ([`Record::take`]): setting the key then changes the
    /// record where it is instead of copying its body first.
    fn process_batch_owned(
        &mut self,
        records: &mut [Record],
        out: &mut Output,
    ) -> Result<(), BoxError> {
        tidemark_runtime::process_taken(self, records, out)
    }

    fn records_dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::ExpressionError => self.on_error.dropped,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::ctx;

    /// A batch the runtime hands over is taken, not cloned: setting the key changes each
    /// general record where it lies (its event keeps its address).
    #[test]
    fn an_owned_batch_is_re_keyed_without_copying_its_events() {
        let factory = key_by("user", ErrorPolicy::Fail, &BuildEnv::default()).unwrap();
        let mut op = factory(&ctx(0, 1, 0)).unwrap();
        let mut records: Vec<Record> = ["a", "b"]
            .iter()
            .map(|u| {
                let mut m = tidemark_runtime::Map::new();
                m.insert("user", *u);
                Record::with_event(0, m, 0)
            })
            .collect();
        let before: Vec<*const tidemark_runtime::Map> = records
            .iter()
            .map(|r| &*r.event_map() as *const _)
            .collect();
        let mut out = Output::default();
        op.process_batch_owned(&mut records, &mut out).unwrap();
        let after: Vec<*const tidemark_runtime::Map> = out
            .records()
            .iter()
            .map(|r| &*r.event_map() as *const _)
            .collect();
        assert_eq!(after, before, "events were copied");
        let keys: Vec<_> = out.records().iter().map(expr::key_of).collect();
        assert_eq!(keys, ["a".into(), "b".into()]);
    }

    #[test]
    fn sets_the_key_from_the_expression() {
        let factory = key_by("int(value) % 3", ErrorPolicy::Fail, &BuildEnv::default()).unwrap();
        let mut op = factory(&ctx(0, 1, 0)).unwrap();
        let mut out = Output::default();
        for v in [4.0, 5.0, 7.0] {
            op.process(Record::new(100, v, 0), &mut out).unwrap();
        }
        let keys: Vec<_> = out.records().iter().map(expr::key_of).collect();
        assert_eq!(keys, [1.into(), 2.into(), 1.into()]);
        // Equal keys route alike.
        assert_eq!(
            out.records()[0].routing_hash(),
            out.records()[2].routing_hash()
        );
    }

    #[test]
    fn failures_follow_on_error() {
        let factory = key_by("missing", ErrorPolicy::Skip, &BuildEnv::default()).unwrap();
        let mut op = factory(&ctx(0, 1, 0)).unwrap();
        let mut out = Output::default();
        op.process(Record::new(1, 1.0, 0), &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(op.records_dropped(DropReason::ExpressionError), 1);
        match key_by("a +", ErrorPolicy::Fail, &BuildEnv::default()) {
            Err(err) => assert_eq!(err.column, 4),
            Ok(_) => panic!("`a +` compiled"),
        }
    }

    #[test]
    fn dead_letters_are_cut_back_on_restore() {
        let records: Vec<Record> = (0..12)
            .map(|i| {
                let mut m = tidemark_runtime::Map::new();
                if i % 2 == 0 {
                    m.insert("user", i);
                }
                Record::with_event(i, m, 0)
            })
            .collect();
        crate::test_util::dead_letters_survive_a_restore(
            |dir| {
                let policy = ErrorPolicy::DeadLetter("dl.jsonl".into());
                key_by("user", policy, &BuildEnv::new(dir)).unwrap()(&ctx(0, 1, 0)).unwrap()
            },
            &records,
        );
    }
}
