//! An operator that emits very much at once (a window firing every key of many windows at the
//! end of input) does so in parts: it stops once its output is full, and the runtime passes
//! each part downstream, through chained vertices and across channels, before it asks for the
//! next (`Operator::emit_more`), so no more than about `Output::FULL` records wait at a time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tidemark_runtime::testing::CountingSource;
use tidemark_runtime::{
    run, BoxError, JobConfig, JobGraph, JobOutcome, Operator, Output, Partitioning, Record, Sink,
};

/// Swallows its input; at the end of input emits `total` records, one part per call.
struct Burst {
    total: u64,
    next: u64,
    /// How many calls emitted a part.
    parts: Arc<AtomicUsize>,
    /// The most records its output held when a call returned.
    most: Arc<AtomicUsize>,
}

impl Burst {
    fn emit_part(&mut self, out: &mut Output) -> bool {
        while self.next < self.total && !out.is_full() {
            out.emit(Record::new(self.next, 1.0, 0));
            self.next += 1;
        }
        self.parts.fetch_add(1, Ordering::Relaxed);
        self.most.fetch_max(out.len(), Ordering::Relaxed);
        self.next < self.total
    }
}

impl Operator for Burst {
    fn process(&mut self, _record: Record, _out: &mut Output) -> Result<(), BoxError> {
        Ok(())
    }

    fn finish(&mut self, _now_nanos: i64, out: &mut Output) -> Result<(), BoxError> {
        self.emit_part(out);
        Ok(())
    }

    fn emit_more(&mut self, out: &mut Output) -> Result<bool, BoxError> {
        Ok(self.emit_part(out))
    }
}

/// Counts the records and the sum of their keys.
struct Tally(Arc<AtomicU64>, Arc<AtomicU64>);

impl Sink for Tally {
    fn write(&mut self, record: &Record) -> Result<(), BoxError> {
        let (k, _) = record.numeric_parts().ok_or("not numeric")?;
        self.0.fetch_add(1, Ordering::Relaxed);
        self.1.fetch_add(k as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// source → burst → sink, the sink chained behind the burst (`Forward`) or across a channel.
fn burst_job(total: u64, edge: Partitioning) {
    let parts = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (count, sum) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut g = JobGraph::new("burst");
    let s = g
        .add_source("s", 1, |_| Ok(Box::new(CountingSource::new(10))))
        .unwrap();
    let (p, m) = (parts.clone(), most.clone());
    let b = g
        .add_operator("b", 1, move |_| {
            Ok(Box::new(Burst {
                total,
                next: 0,
                parts: p.clone(),
                most: m.clone(),
            }))
        })
        .unwrap();
    let (c, u) = (count.clone(), sum.clone());
    let k = g
        .add_sink("k", 1, move |_| Ok(Box::new(Tally(c.clone(), u.clone()))))
        .unwrap();
    g.connect(s, b, Partitioning::Forward).unwrap();
    g.connect(b, k, edge).unwrap();
    let result = run(g, JobConfig::default()).unwrap();
    assert_eq!(result.outcome, JobOutcome::Finished, "{edge:?}");
    // Every record, once.
    assert_eq!(count.load(Ordering::Relaxed), total, "{edge:?}");
    assert_eq!(
        sum.load(Ordering::Relaxed),
        total * (total - 1) / 2,
        "{edge:?}"
    );
    // In parts, each passed on before the next was asked for.
    let expected_parts = total.div_ceil(Output::FULL as u64) as usize;
    assert_eq!(parts.load(Ordering::Relaxed), expected_parts, "{edge:?}");
    assert_eq!(most.load(Ordering::Relaxed), Output::FULL, "{edge:?}");
}

#[test]
fn an_operator_that_emits_much_at_the_end_of_input_does_so_in_parts() {
    let total = 5 * Output::FULL as u64 + 17;
    burst_job(total, Partitioning::Forward);
    burst_job(total, Partitioning::Rebalance);
}
