//! Partitioners: how the last vertex of a task spreads its output over the channels of its
//! outgoing edges, and how a latency marker picks its one channel (rule 10 of the marker spec).

use crate::batch::Event;
use crate::channel::{Aborted, ChannelWriter, SendContext};
use crate::graph::Partitioning;
use crate::key_group::Owners;
use crate::record::Record;
use rand::rngs::SmallRng;
use rand::Rng;
use std::time::{Duration, Instant};

/// Maps a key to one of `n` channels: a multiplicative (Fibonacci) hash, then a multiply-shift
/// range reduction, so no division is done per record. (Hash edges route by key group instead,
/// [`crate::key_group`], so that keyed state can be checkpointed and rescaled.)
#[inline]
pub fn hash_channel(key: u64, n: usize) -> usize {
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h as u128 * n as u128) >> 64) as usize
}

/// One outgoing edge of a subtask: its partitioning and one writer per reachable channel.
pub(crate) struct EdgeWriter {
    partitioning: Partitioning,
    channels: Vec<ChannelWriter>,
    /// A hash edge: the channel owning each key group of the target vertex.
    owners: Owners,
    next: usize,
    /// Records handed to this edge so far, times the copies each one makes (the channels, for
    /// broadcast); what the channels did not send of it was left undelivered.
    given: u64,
}

impl EdgeWriter {
    /// An edge over `channels`; a hash edge routes by the key groups of `max_parallelism` (the
    /// target vertex's, see [`crate::key_group`]).
    pub(crate) fn new(
        partitioning: Partitioning,
        channels: Vec<ChannelWriter>,
        max_parallelism: u32,
    ) -> Self {
        let owners = Owners::new(channels.len(), max_parallelism);
        EdgeWriter {
            owners,
            partitioning,
            channels,
            next: 0,
            given: 0,
        }
    }

    fn write(&mut self, records: &[Record], cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        let n = self.channels.len();
        if n == 1 {
            return self.channels[0].push_slice(records, cx);
        }
        match self.partitioning {
            Partitioning::Forward => self.channels[0].push_slice(records, cx),
            Partitioning::Rebalance => {
                let mut next = self.next;
                for r in records {
                    self.channels[next].push(r.clone(), cx)?;
                    next += 1;
                    if next == n {
                        next = 0;
                    }
                }
                self.next = next;
                Ok(())
            }
            Partitioning::Hash if n == 2 => self.write_hashed_two(records, cx),
            Partitioning::Hash if n <= MANY_CHANNELS => self.write_hashed_many(records, cx),
            Partitioning::Hash => {
                for r in records {
                    let c = self.owners.channel(r.routing_hash());
                    self.channels[c].push(r.clone(), cx)?;
                }
                Ok(())
            }
            Partitioning::Broadcast => {
                for c in &mut self.channels {
                    c.push_slice(records, cx)?;
                }
                Ok(())
            }
        }
    }
}

impl EdgeWriter {
    /// A hash edge over two channels: each record is written straight into its channel's
    /// pending batch, with both channels' fill counts in registers and the batch chosen by a
    /// select rather than a branch; the batches' lengths are set once per run.
    ///
    /// Pushing each record into its channel's batch would chain every record to the previous
    /// one through memory: the batch's length is loaded, the record stored, the length stored,
    /// and the next record for the same channel waits for that store. Here no record waits for
    /// another, and no record is copied twice.
    fn write_hashed_two(
        &mut self,
        records: &[Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), Aborted> {
        let [first, second] = &mut self.channels[..] else {
            unreachable!("a two-channel edge");
        };
        let owners = &self.owners;
        // The owner found by a shift where the two subtasks own as many key groups each (the
        // defaults), by the table otherwise; chosen once, so each has its own loop.
        if owners.is_even() {
            scatter_two(first, second, records, cx, |h| owners.channel_of_even(h, 2))
        } else {
            scatter_two(first, second, records, cx, |h| owners.channel(h) & 1)
        }
    }
}

/// [`EdgeWriter::write_hashed_two`] with `channel` giving the channel (0 or 1) of a routing
/// hash.
#[inline(always)]
fn scatter_two(
    first: &mut ChannelWriter,
    second: &mut ChannelWriter,
    mut records: &[Record],
    cx: &mut SendContext<'_>,
    channel: impl Fn(u32) -> usize,
) -> Result<(), Aborted> {
    while !records.is_empty() {
        let (base0, room0) = first.spare();
        let (base1, room1) = second.spare();
        // As many records as both batches have room for, whatever their channels.
        let (now, rest) = records.split_at(records.len().min(room0.min(room1)));
        let bases: [*mut Record; 2] = [base0, base1];
        let (mut k0, mut k1) = (0usize, 0usize);
        for r in now {
            let c = channel(r.routing_hash()) & 1;
            // A select, not a branch: the channel is as good as random.
            let k = if c == 0 { k0 } else { k1 };
            // SAFETY: `bases[c]` is the first free slot of channel `c`'s pending batch,
            // with room for `now.len()` records, and `k` counts the records written
            // there so far in this run, so the slot is in bounds and not yet initialised.
            unsafe { crate::record::clone_to(r, bases[c].add(k)) };
            k0 += 1 - c;
            k1 += c;
        }
        // SAFETY: the loop wrote `k0` and `k1` records at the slots `spare` gave.
        unsafe {
            first.commit(k0);
            second.commit(k1);
        }
        first.send_if_full(cx)?;
        second.send_if_full(cx)?;
        records = rest;
    }
    Ok(())
}

/// The most channels a hash edge routes with [`EdgeWriter::write_hashed_many`]; beyond, one
/// record at a time.
const MANY_CHANNELS: usize = 16;

impl EdgeWriter {
    /// A hash edge over 3 to [`MANY_CHANNELS`] channels: as [`Self::write_hashed_two`], each
    /// record straight into its channel's pending batch, with the fill counts in a small array
    /// on the stack and the batches' lengths set once per run.
    fn write_hashed_many(
        &mut self,
        mut records: &[Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), Aborted> {
        let n = self.channels.len();
        debug_assert!((1..=MANY_CHANNELS).contains(&n));
        while !records.is_empty() {
            let mut bases = [std::ptr::null_mut::<Record>(); MANY_CHANNELS];
            let mut room = records.len();
            for (base, channel) in bases.iter_mut().zip(&mut self.channels) {
                let (b, r) = channel.spare();
                *base = b;
                room = room.min(r);
            }
            // As many records as every batch has room for, whatever their channels.
            let (now, rest) = records.split_at(room);
            let mut counts = [0usize; MANY_CHANNELS];
            let owners = &self.owners;
            for r in now {
                // The owner of the record's key group: below `n`.
                let c = owners.channel(r.routing_hash()) % MANY_CHANNELS;
                let k = counts[c];
                // SAFETY: `c < n`, so `bases[c]` is the first free slot of channel `c`'s
                // pending batch, with room for `now.len()` records, and `k` counts the records
                // written there so far in this run: in bounds and not yet initialised.
                unsafe { crate::record::clone_to(r, bases[c].add(k)) };
                counts[c] = k + 1;
            }
            for (channel, k) in self.channels.iter_mut().zip(counts) {
                // SAFETY: the loop wrote `k` records at the slots `spare` gave this channel.
                unsafe { channel.commit(k) };
            }
            for channel in &mut self.channels {
                channel.send_if_full(cx)?;
            }
            records = rest;
        }
        Ok(())
    }
}

/// All outgoing edges of a task's last vertex.
pub(crate) struct Router {
    edges: Vec<EdgeWriter>,
    rng: SmallRng,
    buffer_timeout: Duration,
}

impl Router {
    pub(crate) fn new(edges: Vec<EdgeWriter>, rng: SmallRng, buffer_timeout: Duration) -> Self {
        Router {
            edges,
            rng,
            buffer_timeout,
        }
    }

    /// Sends records down every outgoing edge, each by its partitioning.
    pub(crate) fn write(
        &mut self,
        records: &[Record],
        cx: &mut SendContext<'_>,
    ) -> Result<(), Aborted> {
        for e in &mut self.edges {
            let copies = match e.partitioning {
                Partitioning::Broadcast => e.channels.len(),
                _ => 1,
            };
            e.given += (records.len() * copies) as u64;
            e.write(records, cx)?;
        }
        Ok(())
    }

    /// Records handed to this router that no channel sent: pending in a partly filled batch,
    /// in a batch whose send failed, or not yet pushed when a send failed. 0 after a clean
    /// [`Router::close`]; what a hard stop left behind otherwise.
    pub(crate) fn undelivered(&self) -> u64 {
        self.edges
            .iter()
            .map(|e| {
                let sent: u64 = e.channels.iter().map(|c| c.sent).sum();
                e.given.saturating_sub(sent)
            })
            .sum()
    }

    /// Forwards a marker down one edge chosen uniformly at random, and on it one of this
    /// subtask's channels chosen uniformly at random, whatever the partitioning. Never copies.
    pub(crate) fn route_marker(&mut self, event: Event) {
        if self.edges.is_empty() {
            return;
        }
        let e = self.rng.random_range(0..self.edges.len());
        let edge = &mut self.edges[e];
        let c = self.rng.random_range(0..edge.channels.len());
        edge.channels[c].push_event(event);
    }

    /// Sends an event (a watermark) on every channel of every edge.
    pub(crate) fn broadcast_event(&mut self, event: Event) {
        for e in &mut self.edges {
            for c in &mut e.channels {
                c.push_event(event);
            }
        }
    }

    /// Sends batches that have waited for the buffer timeout.
    pub(crate) fn flush_expired(
        &mut self,
        now: Instant,
        cx: &mut SendContext<'_>,
    ) -> Result<(), Aborted> {
        for e in &mut self.edges {
            for c in &mut e.channels {
                c.flush_if_expired(now, self.buffer_timeout, cx)?;
            }
        }
        Ok(())
    }

    /// Sends every partly filled batch.
    pub(crate) fn flush_all(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        for e in &mut self.edges {
            for c in &mut e.channels {
                c.flush(cx)?;
            }
        }
        Ok(())
    }

    /// Sends what is pending and an end-of-input on every channel.
    pub(crate) fn close(&mut self, cx: &mut SendContext<'_>) -> Result<(), Aborted> {
        for e in &mut self.edges {
            for c in &mut e.channels {
                c.close(cx)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Batch;
    use crate::channel::{pool, queue, Message};
    use crate::metrics::SubtaskMetrics;
    use std::num::NonZeroUsize;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use tidemark_markers::{Buckets, Granularity};

    /// A hash edge over `n` channels with batches of `batch_size`; what each channel received,
    /// in order, after writing `records` in slices of `slice` and closing.
    fn route(
        n: usize,
        max_parallelism: u32,
        batch_size: usize,
        records: &[Record],
        slice: usize,
    ) -> Vec<Vec<Record>> {
        let metrics = Arc::new(SubtaskMetrics::new(
            Granularity::Single,
            NonZeroUsize::new(1).unwrap(),
            Buckets::marker_latency(),
        ));
        let mut receivers = Vec::new();
        let mut writers = Vec::new();
        for _ in 0..n {
            let (tx, rx) = queue(1 << 16);
            let (_ret, pool_rx) = pool(1);
            writers.push(ChannelWriter::new(
                tx,
                pool_rx,
                0,
                metrics.clone(),
                batch_size,
                usize::MAX,
            ));
            receivers.push(rx);
        }
        let mut edge = EdgeWriter::new(Partitioning::Hash, writers, max_parallelism);
        let abort = AtomicBool::new(false);
        let mut backpressured = Duration::ZERO;
        let mut cx = SendContext::alone(&abort, &mut backpressured);
        for part in records.chunks(slice) {
            edge.write(part, &mut cx).unwrap();
        }
        for c in &mut edge.channels {
            c.close(&mut cx).unwrap();
        }
        receivers
            .iter()
            .map(|rx| {
                let mut got = Vec::new();
                while let Ok(message) = rx.try_recv() {
                    if let Message::Data { batch, .. } = message {
                        let Batch { records, .. } = batch;
                        assert!(records.len() <= batch_size);
                        got.extend(records);
                    }
                }
                got
            })
            .collect()
    }

    #[test]
    fn hash_edges_send_each_record_to_its_channel_in_order() {
        // Numeric records, and every seventh a map event (sharing one map, so that a routed
        // copy leaked or dropped twice would show in its reference count).
        let shared = Arc::new(crate::value::Map::with_capacity(0));
        let records: Vec<Record> = (0..5_000u64)
            .map(|i| {
                let key = i.wrapping_mul(0x2545_F491_4F6C_DD1D) % 1024;
                if i % 7 == 0 {
                    Record::with_event(key as i64, Arc::clone(&shared), i as i64)
                } else {
                    Record::new(key, i as f64, i as i64)
                }
            })
            .collect();
        // Two channels (the select path: key groups split evenly, found by a shift, or not,
        // found in the table), 3 to 16 (counts on the stack), 17 (one by one); slices across
        // batch boundaries.
        for (n, max, batch_size, slice) in [
            (2, 128, 1024, 1024),
            (2, 128, 100, 999),
            (2, 128, 7, 3),
            (2, 127, 1024, 1024),
            (2, 9, 100, 999),
            (3, 128, 64, 500),
            (4, 128, 1, 17),
            (5, 128, 1024, 5_000),
            (16, 128, 33, 256),
            (17, 128, 64, 500),
        ] {
            let got = route(n, max, batch_size, &records, slice);
            for (c, received) in got.iter().enumerate() {
                let expected: Vec<Record> = records
                    .iter()
                    .filter(|r| {
                        crate::key_group::owner(
                            crate::key_group::key_group(r.routing_hash(), max),
                            n,
                            max,
                        ) == c
                    })
                    .cloned()
                    .collect();
                assert_eq!(
                    *received, expected,
                    "n {n}, max parallelism {max}, batch {batch_size}, channel {c}"
                );
            }
            assert_eq!(got.iter().map(Vec::len).sum::<usize>(), records.len());
        }
        drop(records);
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "every routed copy was dropped once"
        );
    }

    #[test]
    fn hash_channel_stays_in_range_and_spreads_keys() {
        for n in 1..=8 {
            let mut seen = vec![0usize; n];
            for key in 0..1024u64 {
                let c = hash_channel(key, n);
                assert!(c < n);
                seen[c] += 1;
            }
            assert!(seen.iter().all(|&c| c > 0), "n={n}: {seen:?}");
        }
    }

    #[test]
    fn hash_edges_route_by_key_group_pinned_per_key() {
        // A hash edge sends a key to the owner of its key group (max_parallelism 128 here):
        // pinned values computed apart from this code (Python: g = (murmur2(k as 8 bytes big
        // endian) & 0x7fffffff) mod 128, Kafka's murmur2 as in librdkafka's rdmurmur2.c,
        // subtask = g * n // 128). A change of routing moves keyed state between subtasks, so a
        // checkpoint would restore keys where they are not. (Changed once, on purpose, when
        // the key hash became Kafka's murmur2; checkpoints of the old hash are refused.)
        for (key, n, channel) in [
            (42u64, 4usize, 2usize),
            (0, 4, 0),
            (1, 4, 1),
            (7, 3, 2),
            (1000, 8, 5),
            (123_456_789, 2, 1),
        ] {
            let routed = route(n, 128, 16, &[Record::new(key, 0.0, 0)], 1);
            assert_eq!(routed[channel].len(), 1, "key {key}, n {n}: {routed:?}");
        }
    }

    #[test]
    fn hash_channel_is_pinned_per_key() {
        // Pinned values of the public `hash_channel` (computed apart from this code: the top
        // bits of key * 0x9E3779B97F4A7C15 mod 2^64, scaled to n). Hash edges no longer use it:
        // they route by key group (`crate::key_group`).
        for (key, n, channel) in [
            (42, 4, 3),
            (0, 4, 0),
            (1, 4, 2),
            (7, 3, 0),
            (1000, 8, 0),
            (u64::MAX, 5, 1),
            (123_456_789, 2, 1),
        ] {
            assert_eq!(hash_channel(key, n), channel, "key {key}, n {n}");
        }
    }
}
