//! Two instances estimate each other's clock offset through the clock topic; one's clock is
//! shifted 3 s ahead, and the estimates recover the shift within their own error bounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_kafka::client::DEFAULT_TIMEOUT;
use tidemark_kafka::clock::{system_clock, ClockService, WallClock};
use tidemark_kafka::{Brokers, DevCluster, DevClusterOptions};

const SHIFT: i64 = 3_000_000_000;

#[test]
fn an_injected_offset_is_recovered_within_its_error_bound() {
    let cluster = DevCluster::start(DevClusterOptions {
        topics: vec![],
        ..DevClusterOptions::default()
    })
    .unwrap();
    let brokers = Brokers::One(cluster.bootstrap_servers().to_owned());
    let real = system_clock();
    let shifted: WallClock = {
        let real = real.clone();
        Arc::new(move || real() + SHIFT)
    };
    let every = Duration::from_millis(100);
    let props = Default::default();
    let a = ClockService::start(
        &brokers,
        &props,
        "clocks",
        "a",
        real,
        every,
        DEFAULT_TIMEOUT,
    )
    .unwrap();
    let b = ClockService::start(
        &brokers,
        &props,
        "clocks",
        "b",
        shifted,
        every,
        DEFAULT_TIMEOUT,
    )
    .unwrap();
    let started = Instant::now();
    while (a.offsets().best("b").is_none() || b.offsets().best("a").is_none())
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    // A few more rounds so the best sample has a small bound.
    std::thread::sleep(Duration::from_millis(500));
    let ab = a.offsets().best("b").expect("a heard from b");
    let ba = b.offsets().best("a").expect("b heard from a");
    // The true offset lies within the bound: b is 3 s ahead of a, a 3 s behind b.
    assert!(ab.error_nanos >= 0 && ba.error_nanos >= 0);
    assert!((ab.offset_nanos - SHIFT).abs() <= ab.error_nanos, "{ab:?}");
    assert!((ba.offset_nanos + SHIFT).abs() <= ba.error_nanos, "{ba:?}");
    // Neither hears itself.
    assert_eq!(a.offsets().peers(), ["b"]);
    assert_eq!(b.offsets().peers(), ["a"]);
    println!(
        "offset a->b {:.6} s ± {:.6} s, b->a {:.6} s ± {:.6} s",
        ab.offset_nanos as f64 / 1e9,
        ab.error_nanos as f64 / 1e9,
        ba.offset_nanos as f64 / 1e9,
        ba.error_nanos as f64 / 1e9
    );
}
