use super::*;
use crate::test_util::{ctx, kv, poll};
use serde_json::json;

fn plan(config: serde_json::Value) -> Arc<GeneratorPlan> {
    let config: GeneratorConfig = crate::config::parse("generator", config).unwrap();
    Arc::new(GeneratorPlan::new(config).unwrap())
}

fn drain(source: &mut GeneratorSource, max: usize) -> Vec<Record> {
    let mut all = Vec::new();
    loop {
        let (status, records) = poll(source, 1_000, max);
        all.extend(records);
        match status {
            SourceStatus::Finished => return all,
            SourceStatus::Ready => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn count_is_split_over_subtasks_exactly() {
    let plan = plan(json!({"count": 10_007, "keys": 13}));
    let mut values = Vec::new();
    let mut shares = Vec::new();
    for i in 0..3 {
        let mut s = GeneratorSource::new(plan.clone(), &ctx(i, 3, 7));
        let records = drain(&mut s, 1000);
        assert_eq!(Some(records.len() as u64), s.share());
        assert_eq!(s.lag(0).records, 0);
        shares.push(records.len());
        for r in &records {
            assert!(kv(r).0 < 13, "key {:?} out of range", r.key());
            assert_eq!(r.timestamp, 1_000);
            assert_eq!(r.timestamp_type, TimestampType::Create);
        }
        values.extend(records.iter().map(|r| kv(r).1 as u64));
    }
    assert_eq!(shares, [3336, 3336, 3335]);
    values.sort_unstable();
    assert_eq!(values, (0..10_007).collect::<Vec<u64>>());
}

#[test]
fn count_lag_is_records_not_yet_emitted() {
    let plan = plan(json!({"count": 100, "timestamps": "ingestion"}));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 1));
    assert_eq!(s.lag(0).records, 100);
    let (status, records) = poll(&mut s, 5, 30);
    assert_eq!((status, records.len()), (SourceStatus::Ready, 30));
    assert_eq!(records[0].timestamp_type, TimestampType::Ingestion);
    assert_eq!(
        s.lag(0),
        SourceLag {
            records: 70,
            bytes: -1
        }
    );
    let unbounded = GeneratorSource::new(
        Arc::new(
            GeneratorPlan::new(crate::config::parse("generator", json!({})).unwrap()).unwrap(),
        ),
        &ctx(0, 1, 1),
    );
    assert_eq!(unbounded.lag(0), SourceLag::UNKNOWN);
}

#[test]
fn uniform_keys_cover_the_range_and_repeat_with_the_seed() {
    let plan = plan(json!({"count": 20_000, "keys": 10, "value": "random"}));
    let a = drain(
        &mut GeneratorSource::new(plan.clone(), &ctx(0, 1, 42)),
        1024,
    );
    let b = drain(
        &mut GeneratorSource::new(plan.clone(), &ctx(0, 1, 42)),
        1024,
    );
    let c = drain(&mut GeneratorSource::new(plan, &ctx(0, 1, 43)), 1024);
    assert_eq!(a, b);
    assert_ne!(a, c);
    let mut hits = [0u32; 10];
    for r in &a {
        hits[kv(r).0 as usize] += 1;
        assert!((0.0..1.0).contains(&kv(r).1));
    }
    // Each key expects 2000 hits; 1500 is more than 11 standard deviations away.
    assert!(hits.iter().all(|&h| h > 1500), "{hits:?}");
}

#[test]
fn zipf_skews_toward_small_keys() {
    for keys in [100u64, ZIPF_TABLE_MAX_KEYS + 1] {
        let plan = plan(json!({"count": 50_000, "keys": keys, "key_distribution": "zipf"}));
        let records = drain(&mut GeneratorSource::new(plan, &ctx(0, 1, 3)), 1024);
        let count = |k: u64| records.iter().filter(|r| kv(r).0 == k).count();
        assert!(records.iter().all(|r| kv(r).0 < keys));
        // With exponent 1, key 0 is twice as likely as key 1 and ten times key 9.
        let (c0, c1, c9) = (count(0), count(1), count(9));
        assert!(c0 > c1 * 3 / 2 && c1 > c9 * 3, "{keys}: {c0} {c1} {c9}");
        let low_half = records.iter().filter(|r| kv(r).0 < keys / 2).count();
        assert!(low_half > records.len() * 3 / 4, "{keys}: {low_half}");
    }
    // A steeper exponent concentrates further.
    let plan = plan(
        json!({"count": 10_000, "keys": 100, "key_distribution": "zipf", "zipf_exponent": 3.0}),
    );
    let records = drain(&mut GeneratorSource::new(plan, &ctx(0, 1, 3)), 1024);
    let zeros = records.iter().filter(|r| kv(r).0 == 0).count();
    assert!(zeros > 7_500, "{zeros}"); // 1/zeta(3) = 0.83
}

#[test]
fn pacing_emits_exactly_the_due_records() {
    // 2000/s over 2 subtasks: 1000/s each, one record per millisecond.
    let plan = plan(json!({"rate": 2000, "keys": 4}));
    let mut s = GeneratorSource::new(plan, &ctx(1, 2, 9));
    let ms = 1_000_000i64;
    let t0 = 1_700_000_000_000 * ms;
    // The first record is due at the first poll.
    let (status, r) = poll(&mut s, t0, 100);
    assert_eq!(r.len(), 1);
    assert_eq!(kv(&r[0]).1, 1.0); // subtask 1 of 2 counts 1, 3, 5, ...
    assert_eq!(
        status,
        SourceStatus::Idle {
            until: Some(t0 + ms)
        }
    );
    // Nothing new is due half a millisecond later.
    let (status, r) = poll(&mut s, t0 + ms / 2, 100);
    assert_eq!(
        (r.len(), status),
        (
            0,
            SourceStatus::Idle {
                until: Some(t0 + ms)
            }
        )
    );
    // Exactly on time for the second record.
    let (status, r) = poll(&mut s, t0 + ms, 100);
    assert_eq!(r.len(), 1);
    assert_eq!(
        status,
        SourceStatus::Idle {
            until: Some(t0 + 2 * ms)
        }
    );
    assert_eq!(s.lag(t0 + ms).records, 0);
    // 10.5 ms in: records 0..=10 are due, 2 were emitted.
    let (status, r) = poll(&mut s, t0 + 10 * ms + ms / 2, 100);
    assert_eq!(r.len(), 9);
    // Create timestamps are the records' places on the schedule, not the poll's time.
    let stamps: Vec<i64> = r.iter().map(|r| r.timestamp).collect();
    assert_eq!(stamps, (2..=10).map(|n| t0 + n * ms).collect::<Vec<_>>());
    assert_eq!(
        status,
        SourceStatus::Idle {
            until: Some(t0 + 11 * ms)
        }
    );
    // A poll one second late: 1001 due, 11 emitted; the batch size caps the catch-up.
    let late = t0 + 1000 * ms;
    assert_eq!(s.lag(late).records, 990);
    let (status, r) = poll(&mut s, late, 100);
    assert_eq!((r.len(), status), (100, SourceStatus::Ready));
    assert_eq!(s.lag(late).records, 890);
    // Made late, stamped on time: now - timestamp shows how far behind schedule it is.
    assert_eq!(r[0].timestamp, t0 + 11 * ms);
    assert_eq!(late - r[99].timestamp, 890 * ms);
    for _ in 0..8 {
        poll(&mut s, late, 100);
    }
    let (status, r) = poll(&mut s, late, 100);
    assert_eq!(r.len(), 90);
    assert_eq!(
        status,
        SourceStatus::Idle {
            until: Some(late + ms)
        }
    );
    assert_eq!(s.lag(late).records, 0);
    assert_eq!(s.emitted(), 1001);
}

#[test]
fn paced_count_finishes_and_lag_counts_only_its_share() {
    let plan = plan(json!({"rate": 1000, "count": 5}));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
    let ms = 1_000_000i64;
    assert_eq!(s.lag(0).records, 0); // not started
    let (status, r) = poll(&mut s, 0, 100);
    assert_eq!(
        (r.len(), status),
        (1, SourceStatus::Idle { until: Some(ms) })
    );
    assert_eq!(s.lag(60 * ms).records, 4); // 61 due, but only 5 exist
    let (status, r) = poll(&mut s, 60 * ms, 100);
    assert_eq!((r.len(), status), (4, SourceStatus::Finished));
}

#[test]
fn fractional_rates_schedule_to_the_nanosecond() {
    // 3 records per second: due at 0, 333_333_334 ns (rounded up), 666_666_667 ns, 1 s.
    let plan = plan(json!({"rate": 3}));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
    let (status, _) = poll(&mut s, 0, 10);
    assert_eq!(
        status,
        SourceStatus::Idle {
            until: Some(333_333_334)
        }
    );
    let (status, r) = poll(&mut s, 333_333_334, 10);
    assert_eq!(r.len(), 1);
    assert_eq!(
        status,
        SourceStatus::Idle {
            until: Some(666_666_667)
        }
    );
}

#[test]
fn paced_ingestion_timestamps_are_the_poll_time() {
    let plan = plan(json!({"rate": 1000, "timestamps": "ingestion"}));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
    let ms = 1_000_000i64;
    poll(&mut s, 0, 100);
    let (_, r) = poll(&mut s, 50 * ms, 100);
    assert_eq!(r.len(), 50);
    assert!(r
        .iter()
        .all(|r| r.timestamp == 50 * ms && r.timestamp_type == TimestampType::Ingestion));
}

/// Polls every `step` ns from `t0` until the source finishes; returns each record with the
/// time of the poll that emitted it.
fn drain_timed(source: &mut GeneratorSource, t0: i64, step: i64, max: usize) -> Vec<(i64, Record)> {
    let mut all = Vec::new();
    let mut now = t0;
    loop {
        let (status, records) = poll(source, now, max);
        assert!(records.len() <= max);
        all.extend(records.into_iter().map(|r| (now, r)));
        if status == SourceStatus::Finished {
            return all;
        }
        now += step;
    }
}

/// Records whose timestamp is below the highest one emitted before them.
fn late(records: &[(i64, Record)]) -> usize {
    let mut max = i64::MIN;
    let mut late = 0;
    for (_, r) in records {
        if r.timestamp < max {
            late += 1;
        }
        max = max.max(r.timestamp);
    }
    late
}

#[test]
fn disorder_holds_a_fraction_back_and_still_emits_exactly_count() {
    let ms = 1_000_000i64;
    let plan = plan(json!({
        "count": 100_000, "keys": 10,
        "disorder": {"fraction": 0.01, "delay": "50ms"}
    }));
    let mut s = GeneratorSource::new(plan.clone(), &ctx(0, 1, 11));
    let records = drain_timed(&mut s, 1_000 * ms, ms, 500);
    assert_eq!(records.len(), 100_000);
    assert_eq!(s.emitted(), 100_000);
    assert_eq!(s.held(), 0);
    let mut values: Vec<u64> = records.iter().map(|(_, r)| kv(r).1 as u64).collect();
    values.sort_unstable();
    assert_eq!(values, (0..100_000).collect::<Vec<u64>>());
    // About 1 % come out late (seeded, so this count is fixed; 1 % is 1000).
    let n_late = late(&records);
    assert!((800..1200).contains(&n_late), "{n_late}");
    // Each came out on time (made by this poll) or after waiting its 50 ms, except those
    // let out when everything was made.
    let last_made = records
        .iter()
        .filter(|(at, r)| r.timestamp == *at)
        .map(|(at, _)| *at)
        .max()
        .unwrap();
    let waited = records
        .iter()
        .filter(|(at, r)| *at - r.timestamp >= 50 * ms)
        .count();
    assert!(waited > 0);
    assert!(records
        .iter()
        .all(|(at, r)| r.timestamp == *at || *at - r.timestamp >= 50 * ms || *at > last_made));
    // Without disorder the same seed gives the same records, in order.
    let mut plain = GeneratorSource::new(
        Arc::new(
            GeneratorPlan::new(
                crate::config::parse("generator", json!({"count": 100_000, "keys": 10})).unwrap(),
            )
            .unwrap(),
        ),
        &ctx(0, 1, 11),
    );
    let plain = drain_timed(&mut plain, 1_000 * ms, ms, 500);
    assert_eq!(late(&plain), 0);
    let pairs = |rs: &[(i64, Record)]| {
        let mut p: Vec<(u64, u64)> = rs.iter().map(|(_, r)| (kv(r).1 as u64, kv(r).0)).collect();
        p.sort_unstable();
        p
    };
    assert_eq!(
        pairs(&records),
        pairs(&plain),
        "disorder does not change the keys"
    );
}

#[test]
fn paced_disorder_releases_on_time_with_the_original_timestamp() {
    let ms = 1_000_000i64;
    // 1000/s, every record held 5 ms: each comes out 5 ms after its place on the schedule.
    let plan = plan(json!({
        "rate": 1000, "count": 20,
        "disorder": {"fraction": 1.0, "delay": "5ms"}
    }));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
    let (status, r) = poll(&mut s, 0, 100);
    assert!(r.is_empty());
    assert_eq!(s.held(), 1);
    // The next thing due is record 1 at 1 ms (before record 0's release at 5 ms).
    assert_eq!(status, SourceStatus::Idle { until: Some(ms) });
    for t in 1..5 {
        assert!(poll(&mut s, t * ms, 100).1.is_empty());
    }
    let (_, r) = poll(&mut s, 5 * ms, 100);
    assert_eq!(r.len(), 1);
    assert_eq!((kv(&r[0]).1, r[0].timestamp), (0.0, 0));
    assert_eq!(s.lag(5 * ms).records, 0, "held records are on schedule");
    // Polled late, at 19 ms: the held records due come out (records 1..=5; the others were
    // not made yet), then the last 14 records are made and held.
    let (status, r) = poll(&mut s, 19 * ms, 100);
    assert_eq!((status, s.held()), (SourceStatus::Ready, 14));
    let stamps: Vec<i64> = r.iter().map(|r| r.timestamp).collect();
    assert_eq!(stamps, (1..=5).map(|n| n * ms).collect::<Vec<_>>());
    // All made: everything still held comes out at once, in order, with its timestamp.
    let (status, r) = poll(&mut s, 19 * ms, 100);
    assert_eq!(status, SourceStatus::Finished);
    let stamps: Vec<i64> = r.iter().map(|r| r.timestamp).collect();
    assert_eq!(stamps, (6..=19).map(|n| n * ms).collect::<Vec<_>>());
    assert_eq!(s.emitted(), 20);
}

#[test]
fn held_records_are_bounded_by_max_held() {
    let plan = plan(json!({
        "count": 1000,
        "disorder": {"fraction": 1.0, "delay": "1h", "max_held": 10}
    }));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
    let (status, r) = poll(&mut s, 0, 600);
    assert_eq!((status, r.len(), s.held()), (SourceStatus::Ready, 590, 10));
    // Count-only lag: what is not emitted yet, held records included.
    assert_eq!(s.lag(0).records, 410);
    let (status, r) = poll(&mut s, 0, 600);
    assert_eq!((status, r.len(), s.held()), (SourceStatus::Ready, 400, 10));
    // Everything is made: the held ones come out, an hour early, up to the batch size.
    let (status, r) = poll(&mut s, 0, 4);
    assert_eq!((status, r.len()), (SourceStatus::Ready, 4));
    let (status, r) = poll(&mut s, 0, 600);
    assert_eq!((status, r.len()), (SourceStatus::Finished, 6));
    assert_eq!((s.emitted(), s.lag(0).records), (1000, 0));
}

#[test]
fn ingestion_timestamps_are_set_when_a_held_record_is_released() {
    let ms = 1_000_000i64;
    let plan = plan(json!({
        "timestamps": "ingestion",
        "disorder": {"fraction": 1.0, "delay": "10ms"}
    }));
    let mut s = GeneratorSource::new(plan, &ctx(0, 1, 0));
    assert!(poll(&mut s, 0, 3).1.is_empty());
    let (_, r) = poll(&mut s, 10 * ms, 3);
    assert_eq!(r.len(), 3);
    assert!(r
        .iter()
        .all(|r| r.timestamp == 10 * ms && r.timestamp_type == TimestampType::Ingestion));
}

#[test]
fn invalid_settings_are_named() {
    let cases = [
        (json!({"rate": 0}), "rate: 0 is not a positive number"),
        (json!({"keys": 0}), "keys: must be at least 1"),
        (json!({"zipf_exponent": 2}), "zipf_exponent: only applies"),
        (
            json!({"key_distribution": "zipf", "zipf_exponent": -1}),
            "zipf_exponent: -1 is not a number of at least 0",
        ),
        (json!({"count": -3}), "count: invalid value: integer `-3`"),
        (
            json!({"key_distribution": "pareto"}),
            "key_distribution: unknown value `pareto`, expected one of `uniform`, `zipf`",
        ),
        (
            json!({"disorder": {"fraction": 1.5, "delay": "1s"}}),
            "disorder.fraction: 1.5 is not a fraction from 0 to 1",
        ),
        (
            json!({"disorder": {"fraction": 0.1, "delay": 0}}),
            "disorder.delay: must be more than 0",
        ),
        (
            json!({"disorder": {"fraction": 0.1, "delay": "1s", "max_held": 0}}),
            "disorder.max_held: must be at least 1",
        ),
        (
            json!({"disorder": {"fraction": 0.1}}),
            "disorder: missing field `delay`",
        ),
        (
            json!({"disorder": {"fraction": 0.1, "delay": "1s", "distribution": "normal"}}),
            "disorder.distribution: unknown value `normal`, expected one of `fixed`, \
             `uniform`, `exponential`",
        ),
        (
            json!({"disorder": {"fractoin": 0.1, "delay": "1s"}}),
            "disorder: unknown field `fractoin`, expected one of `fraction`",
        ),
    ];
    for (config, expected) in cases {
        let err = build(config.clone(), &BuildEnv::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{config}: {err}");
    }
}

/// Every record as (key, value bits, timestamp, type), in the order emitted.
type Seen = Vec<(i64, u64, i64, TimestampType)>;

fn seen(records: &[Record]) -> Seen {
    records
        .iter()
        .map(|r| {
            let (k, v) = kv(r);
            (k as i64, v.to_bits(), r.timestamp, r.timestamp_type)
        })
        .collect()
}

/// Polls `s` at `t0`, `t0 + step`, … for at most `polls` polls (all of them when `None`),
/// batches of `max`; returns what came out and the next poll's time.
fn run_clocked(
    s: &mut GeneratorSource,
    t0: i64,
    step: i64,
    max: usize,
    polls: Option<usize>,
) -> (Vec<Record>, i64) {
    let mut all = Vec::new();
    let mut now = t0;
    for _ in 0..polls.unwrap_or(usize::MAX) {
        let (status, records) = poll(s, now, max);
        all.extend(records);
        now += step;
        if status == SourceStatus::Finished {
            break;
        }
    }
    (all, now)
}

/// Settings whose records depend on every piece of a subtask's state: keys (uniform, zipf by
/// table, zipf by rejection), random values, the schedule of a `rate`, disorder's picks and
/// delays, and held records at the position.
fn resumable_settings() -> Vec<serde_json::Value> {
    let disorder = json!({"fraction": 0.05, "delay": "3ms", "distribution": "exponential"});
    vec![
        json!({"count": 20_000, "keys": 97}),
        json!({"count": 20_000, "keys": 1000, "key_distribution": "zipf", "value": "random",
               "rate": 2_000_000, "disorder": disorder}),
        json!({"count": 20_000, "keys": 3_000_000, "key_distribution": "zipf",
               "zipf_exponent": 1.1, "value": "random", "rate": 1_000_000,
               "disorder": {"fraction": 0.1, "delay": "2ms", "distribution": "uniform"}}),
    ]
}

#[test]
fn a_resumed_subtask_makes_exactly_what_an_uninterrupted_one_would() {
    let ms = 1_000_000i64;
    let (t0, step) = (1_000_000 * ms, 50_000);
    for settings in resumable_settings() {
        let plan = plan(settings.clone());
        for (i, p) in [(0, 1), (2, 3)] {
            let context = ctx(i, p, 42);
            // The reference: one uninterrupted run on a clock that advances 50 µs a poll.
            let mut whole = GeneratorSource::new(plan.clone(), &context);
            let (expected, _) = run_clocked(&mut whole, t0, step, 64, None);
            assert_eq!(expected.len() as u64, whole.share().unwrap());

            // Run 40 polls, take the position, run on (records a crash loses), then resume a
            // new instance at the position and run it on the same clock.
            let mut first = GeneratorSource::new(plan.clone(), &context);
            let (before, now) = run_clocked(&mut first, t0, step, 64, Some(40));
            let position = first.position(7).unwrap();
            assert!(before.len() > 100 && before.len() < expected.len());
            if settings.get("disorder").is_some() {
                assert!(first.held() > 0, "{settings}: records held at the position");
            }
            let (lost, _) = run_clocked(&mut first, now, step, 64, Some(5));
            assert!(!lost.is_empty());
            let mut resumed = GeneratorSource::new(plan.clone(), &context);
            resumed.resume(&position).unwrap();
            let (after, _) = run_clocked(&mut resumed, now, step, 64, None);
            let mut got = seen(&before);
            got.extend(seen(&after));
            assert_eq!(got, seen(&expected), "{settings}, subtask {i} of {p}");
            assert_eq!(resumed.emitted(), whole.emitted());
        }
    }
}

#[test]
fn resumed_after_downtime_a_paced_subtask_keeps_its_timestamps() {
    // Restored ten seconds later: it is behind its schedule and catches up, and every record
    // carries the create timestamp it had in the uninterrupted run.
    let ms = 1_000_000i64;
    let (t0, step) = (1_000_000 * ms, 50_000);
    let settings = resumable_settings()[1].clone();
    let plan = plan(settings);
    let context = ctx(1, 2, 7);
    let mut whole = GeneratorSource::new(plan.clone(), &context);
    let (expected, _) = run_clocked(&mut whole, t0, step, 64, None);
    let mut first = GeneratorSource::new(plan.clone(), &context);
    let (before, now) = run_clocked(&mut first, t0, step, 64, Some(30));
    let position = first.position(1).unwrap();
    let mut resumed = GeneratorSource::new(plan.clone(), &context);
    resumed.resume(&position).unwrap();
    let (after, _) = run_clocked(&mut resumed, now + 10_000 * ms, step, 64, None);
    let mut got = seen(&before);
    got.extend(seen(&after));
    let key = |s: &(i64, u64, i64, TimestampType)| (s.0, s.1, s.2, s.3 as u8);
    got.sort_unstable_by_key(key);
    let mut expected = seen(&expected);
    expected.sort_unstable_by_key(key);
    assert_eq!(got, expected);
}

#[test]
fn a_position_that_does_not_fit_is_refused() {
    let settings =
        json!({"count": 1000, "keys": 10, "disorder": {"fraction": 0.1, "delay": "1ms"}});
    let mut s = GeneratorSource::new(plan(settings.clone()), &ctx(0, 2, 1));
    run_clocked(&mut s, 0, 1_000, 50, Some(3));
    let position = s.position(1).unwrap();
    let error = |settings: serde_json::Value, p: usize, bytes: &[u8]| {
        let mut s = GeneratorSource::new(plan(settings), &ctx(0, p, 1));
        s.resume(bytes).unwrap_err().to_string()
    };
    let err = error(settings.clone(), 3, &position);
    assert!(err.contains("parallelism 2, restored with 3"), "{err}");
    let err = error(json!({"count": 1000, "keys": 10}), 2, &position);
    assert!(err.contains("`disorder`"), "{err}");
    let err = error(
        json!({"count": 100, "keys": 10, "disorder": {"fraction": 0.1, "delay": "1ms"}}),
        2,
        &position,
    );
    assert!(err.contains("more than its share of `count`"), "{err}");
    let err = error(settings, 2, &position[..position.len() - 2]);
    assert!(
        err.contains("generator `v` subtask 0") && err.contains("damaged"),
        "{err}"
    );
}

/// The generator's streams are `rand`'s `SmallRng` streams (xoshiro256++ from the same seed),
/// so `--seed` gives the same records as before positions were kept.
#[cfg(target_pointer_width = "64")]
#[test]
fn the_streams_are_small_rng_streams() {
    use rand::rngs::SmallRng;
    for seed in [0, 1, 42, u64::MAX] {
        let mut a = SmallRng::seed_from_u64(seed);
        let mut b = Xoshiro256PlusPlus::seed_from_u64(seed);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }
}

#[test]
fn with_start_time_timestamps_are_event_time_whatever_the_wall_clock() {
    // 2026-01-01T00:00:00Z, 1,000 records a second of event time: record m at start + m ms.
    const START: i64 = 1_767_225_600_000_000_000;
    let events = plan(json!({
        "count": 5_000, "keys": 7, "start_time": "2026-01-01T00:00:00Z", "event_rate": 1000
    }));
    let mut all = Vec::new();
    for i in 0..3 {
        let mut s = GeneratorSource::new(events.clone(), &ctx(i, 3, 9));
        // Polled at wildly different wall-clock times: the stamps do not move.
        let mut now = 5;
        loop {
            let (status, records) = poll(&mut s, now, 700);
            all.extend(records);
            now = now * 1_000 + 17;
            if status == SourceStatus::Finished {
                break;
            }
        }
    }
    assert_eq!(all.len(), 5_000);
    for r in &all {
        let m = kv(r).1 as i64;
        assert_eq!(r.timestamp, START + m * 1_000_000, "record {m}");
        assert_eq!(r.timestamp_type, TimestampType::Create);
    }
    // The same seed gives the same records, stamps included.
    let again = drain(
        &mut GeneratorSource::new(events.clone(), &ctx(1, 3, 9)),
        333,
    );
    let first: Vec<_> = all
        .iter()
        .filter(|r| kv(r).1 as u64 % 3 == 1)
        .map(|r| (kv(r), r.timestamp))
        .collect();
    let second: Vec<_> = again.iter().map(|r| (kv(r), r.timestamp)).collect();
    assert_eq!(first, second);
    // Without event_rate, rate is the event rate.
    let paced = plan(json!({"count": 4, "rate": 2, "start_time": "2026-01-01T00:00:01Z"}));
    let mut s = GeneratorSource::new(paced, &ctx(0, 1, 1));
    let (_, records) = poll(&mut s, 42, 10);
    assert_eq!(records[0].timestamp, START + 1_000_000_000);
}

#[test]
fn start_time_and_event_rate_are_checked() {
    for (config, field, says) in [
        (
            json!({"start_time": "yesterday", "rate": 1}),
            "start_time",
            "RFC 3339",
        ),
        (
            json!({"start_time": "2026-01-01T00:00:00Z"}),
            "start_time",
            "needs event_rate",
        ),
        (
            json!({"event_rate": 10}),
            "event_rate",
            "goes with start_time",
        ),
        (
            json!({"start_time": "2026-01-01T00:00:00Z", "event_rate": 0}),
            "event_rate",
            "positive",
        ),
        (
            json!({"start_time": "2026-01-01T00:00:00Z", "rate": 5, "timestamps": "ingestion"}),
            "start_time",
            "ingestion",
        ),
    ] {
        let config: GeneratorConfig = crate::config::parse("generator", config.clone()).unwrap();
        let err = GeneratorPlan::new(config).unwrap_err();
        let text = format!("{err:?}");
        assert!(text.contains(field) && text.contains(says), "{text}");
    }
}
