//! How fast W1 can go at P=2 on this machine with a hash exchange stripped to its bones: the
//! ceiling that W1's target (P=2 ≥ 1.3x P=1) is judged against.
//!
//! ```sh
//! cargo run --release -p tidemark-runtime --example exchange_bound -- [RECORDS [ROUNDS]]
//! ```
//!
//! Three loops over 32-byte records laid out as Tidemark's numeric
//! [`Record`](tidemark_runtime::Record) (timestamp, key, value, tags), plain `Copy` structs with
//! W1's work and nothing else (no metrics, markers, timers or operators behind traits), each
//! round in turn, over as many records: keys 0..1023 from a random stream, value the record's
//! number, then `value = value * 2 + 1`, a running sum per key written back into the record (as
//! `reduce` does in place), then the record is counted (the `discard` sink):
//!
//! - `chained`: one thread, batches of 1,024 records through all of it in place: W1 at P=1,
//!   where the hash edge is chained.
//! - `exchange`: two threads, each making half the records and owning half the keys (the key
//!   groups of a hash edge, as [`tidemark_runtime::key_group`] assigns them): each record is
//!   copied into the pending batch of its owner, full batches go on a bounded
//!   `crossbeam-channel` queue (8 batches) to the owner's thread, which sums them in place
//!   after each batch it makes and whenever its send would wait; batch buffers go back to their
//!   writer for reuse. W1 at P=2 with the source and its consumer sharing a thread per
//!   subtask, as Tidemark runs it.
//! - `local`: `exchange` with every record sent to its own thread (nothing crosses the cores):
//!   what the copy into channel batches costs alone.
//!
//! Each line: `bound=<mode> records=… seconds=… rec_per_s=…`; each round checks that every
//! record was summed (the sum of all running sums' last values equals the sum of the inputs).
//! The last line gives the medians of the per-round ratios `exchange/chained` and
//! `local/chained`: what any runtime built this way can reach on this machine, to set beside
//! `scripts/bench w1`'s P=2/P=1 (docs/performance.md, "The machine's own bound").

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use std::time::Instant;
use tidemark_runtime::key_group::{owner, KeyGroups};
use tidemark_runtime::key_hash::hash_int;

/// A numeric record's 32 bytes, as [`tidemark_runtime::Record`] holds them.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Record {
    timestamp: i64,
    key: i64,
    value: f64,
    tags: u64,
}

/// The two ends of one writer's pool of spare buffers.
type Pool = (Sender<Vec<Record>>, Receiver<Vec<Record>>);

const BATCH: usize = 1024;
const KEYS: u64 = 1024;
const MAX_PARALLELISM: u32 = 128;

/// Makes the values of records `first..first + out.len()` of a run: each key from a
/// xorshift stream (seeded per thread), value the record's number.
fn generate(out: &mut Vec<Record>, rng: &mut u64, first: u64, n: usize) {
    out.resize(n, Record::default());
    for (i, r) in out.iter_mut().enumerate() {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        r.key = ((*rng as u128 * KEYS as u128) >> 64) as i64;
        r.value = (first + i as u64) as f64;
    }
}

/// `value = value * 2 + 1` in place (W1's map).
fn map(records: &mut [Record]) {
    for r in records {
        r.value = r.value * 2.0 + 1.0;
    }
}

/// The running sum per key, written into each record; returns how many records it took.
fn sum(records: &mut [Record], sums: &mut [f64]) -> u64 {
    for r in records.iter_mut() {
        let s = &mut sums[(r.key as u64 % KEYS) as usize];
        *s += r.value;
        r.value = *s;
    }
    records.len() as u64
}

/// What one loop did: records summed and the sum of every key's final running sum.
struct Done {
    records: u64,
    total: f64,
}

fn chained(n: u64) -> Done {
    let mut batch = Vec::with_capacity(BATCH);
    let mut sums = vec![0.0; KEYS as usize];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut made, mut records) = (0u64, 0u64);
    while made < n {
        let k = BATCH.min((n - made) as usize);
        generate(&mut batch, &mut rng, made, k);
        map(&mut batch);
        records += sum(&mut batch, &mut sums);
        made += k as u64;
    }
    Done {
        records,
        total: sums.iter().sum(),
    }
}

/// One thread of `exchange`/`local`: its queue, the queues of both threads, and the pools its
/// writers take buffers from (one per destination) and its reader gives them back to.
struct Side {
    me: usize,
    queue: Receiver<(usize, Vec<Record>)>,
    to: Vec<Sender<(usize, Vec<Record>)>>,
    /// `pools[d]`: spare buffers of this thread's channel to thread `d`.
    pools: Vec<Receiver<Vec<Record>>>,
    /// `returns[w]`: where buffers that thread `w` sent here go back.
    returns: Vec<Sender<Vec<Record>>>,
}

fn exchange(n: u64, local: bool) -> Done {
    let (senders, queues): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(8)).unzip();
    // pool[w][d]: buffers of writer w's channel to d, given back by reader d.
    let pools: Vec<Vec<Pool>> = (0..2)
        .map(|_| (0..2).map(|_| bounded(10)).collect())
        .collect();
    let sides: Vec<Side> = (0..2)
        .map(|me| Side {
            me,
            queue: queues[me].clone(),
            to: senders.clone(),
            pools: (0..2).map(|d| pools[me][d].1.clone()).collect(),
            returns: (0..2).map(|w| pools[w][me].0.clone()).collect(),
        })
        .collect();
    drop(senders);
    let threads: Vec<_> = sides
        .into_iter()
        .map(|side| std::thread::spawn(move || run_side(side, n, local)))
        .collect();
    let (mut records, mut total) = (0, 0.0);
    for t in threads {
        let done = t.join().expect("an exchange thread");
        records += done.records;
        total += done.total;
    }
    Done { records, total }
}

fn run_side(side: Side, n: u64, local: bool) -> Done {
    let groups = KeyGroups::new(MAX_PARALLELISM);
    let mut sums = vec![0.0; KEYS as usize];
    let mut taken = 0u64;
    let mut take = |message: (usize, Vec<Record>), sums: &mut Vec<f64>| {
        let (from, mut batch) = message;
        taken += sum(&mut batch, sums);
        batch.clear();
        let _ = side.returns[from].try_send(batch);
    };
    let mut source = Vec::with_capacity(BATCH);
    let mut pending: Vec<Vec<Record>> = (0..2).map(|_| Vec::with_capacity(BATCH)).collect();
    let mut rng =
        0x9E37_79B9_7F4A_7C15u64 ^ (side.me as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    // This thread makes its half of the records.
    let (first, end) = (
        n / 2 * side.me as u64,
        n / 2 * (side.me as u64 + 1) + n % 2 * side.me as u64,
    );
    let mut made = first;
    while made < end {
        let k = BATCH.min((end - made) as usize);
        generate(&mut source, &mut rng, made, k);
        map(&mut source);
        let mut rest = &source[..];
        while !rest.is_empty() {
            // As Tidemark's hash edge over two channels: each record written straight into
            // its owner's pending batch, both fill counts in registers, lengths set once.
            let room = (BATCH - pending[0].len()).min(BATCH - pending[1].len());
            let (now, later) = rest.split_at(room.min(rest.len()));
            rest = later;
            let bases = [
                pending[0].spare_capacity_mut().as_mut_ptr(),
                pending[1].spare_capacity_mut().as_mut_ptr(),
            ];
            let (mut k0, mut k1) = (0usize, 0usize);
            for r in now {
                let d = match local {
                    true => side.me,
                    false => owner(groups.of(hash_int(r.key)), 2, MAX_PARALLELISM),
                };
                let k = if d == 0 { k0 } else { k1 };
                // SAFETY: `k` < `room`, the spare capacity of batch `d`.
                unsafe { (*bases[d].add(k)).write(*r) };
                k0 += 1 - d;
                k1 += d;
            }
            // SAFETY: the loop wrote `k0` and `k1` records after each batch's length.
            unsafe {
                let (n0, n1) = (pending[0].len(), pending[1].len());
                pending[0].set_len(n0 + k0);
                pending[1].set_len(n1 + k1);
            }
            #[allow(clippy::needless_range_loop)] // `d` names the queue and the pool too
            for d in 0..2 {
                if pending[d].len() < BATCH {
                    continue;
                }
                let fresh = side.pools[d]
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BATCH));
                let message = (side.me, std::mem::replace(&mut pending[d], fresh));
                send(&side, d, message, &mut take, &mut sums);
            }
        }
        made += k as u64;
        while let Ok(got) = side.queue.try_recv() {
            take(got, &mut sums);
        }
    }
    for (d, batch) in pending.into_iter().enumerate() {
        send(&side, d, (side.me, batch), &mut take, &mut sums);
    }
    // Every thread sends its last batches, then both take until all records are in.
    drop(side.to);
    while let Ok(got) = side.queue.recv() {
        take(got, &mut sums);
    }
    Done {
        records: taken,
        total: sums.iter().sum(),
    }
}

/// Sends `message` to thread `d`; while its queue is full, sums what this thread was sent
/// meanwhile, as Tidemark's paired threads do, so that neither waits for the other.
fn send(
    side: &Side,
    d: usize,
    mut message: (usize, Vec<Record>),
    take: &mut impl FnMut((usize, Vec<Record>), &mut Vec<f64>),
    sums: &mut Vec<f64>,
) {
    loop {
        match side.to[d].try_send(message) {
            Ok(()) => return,
            Err(TrySendError::Full(m)) => {
                message = m;
                match side.queue.try_recv() {
                    Ok(got) => take(got, sums),
                    Err(_) => std::thread::yield_now(),
                }
            }
            Err(TrySendError::Disconnected(_)) => unreachable!("both threads run"),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// RECORDS (at least 2, default 200 million) and ROUNDS (at least 1, default 3).
fn parse_args(args: &[String]) -> Result<(u64, usize), String> {
    if args.len() > 2 {
        return Err(format!("{} arguments, expected at most 2", args.len()));
    }
    let n = match args.first() {
        None => 200_000_000,
        Some(a) => match a.parse::<u64>() {
            Ok(n) if n >= 2 => n,
            _ => {
                return Err(format!(
                    "RECORDS is '{a}', expected a whole number of at least 2"
                ))
            }
        },
    };
    let rounds = match args.get(1) {
        None => 3,
        Some(a) => match a.parse::<usize>() {
            Ok(r) if r >= 1 => r,
            _ => {
                return Err(format!(
                    "ROUNDS is '{a}', expected a whole number of at least 1"
                ))
            }
        },
    };
    Ok((n, rounds))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (n, rounds) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("exchange_bound: {message}\nusage: exchange_bound [RECORDS [ROUNDS]]");
            std::process::exit(2);
        }
    };
    // Sum of the mapped values 2i + 1 for i < n: what every loop's sums must add up to.
    let expected = (n as f64) * (n as f64);
    let (mut exchange_ratio, mut local_ratio) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let rate = |mode: &str, run: &dyn Fn() -> Done| {
            let started = Instant::now();
            let done = run();
            let seconds = started.elapsed().as_secs_f64();
            assert_eq!(done.records, n, "{mode}: every record summed once");
            assert!(
                (done.total - expected).abs() <= expected * 1e-9,
                "{mode}: sums {} against {expected}",
                done.total
            );
            let rate = n as f64 / seconds;
            println!(
                "bound={mode} records={n} seconds={seconds:.3} rec_per_s={rate:.0} round={round}"
            );
            rate
        };
        let c = rate("chained", &|| chained(n));
        let e = rate("exchange", &|| exchange(n, false));
        let l = rate("local", &|| exchange(n, true));
        exchange_ratio.push(e / c);
        local_ratio.push(l / c);
    }
    println!(
        "bound=ratio exchange_over_chained={:.3} local_over_chained={:.3} stat=median rounds={rounds}",
        median(exchange_ratio),
        median(local_ratio)
    );
}
