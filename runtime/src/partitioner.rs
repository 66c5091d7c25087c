//! Partitioners: how the last vertex of a task spreads its output over the channels of its
//! outgoing edges, and how a latency marker picks its one channel (rule 10 of the marker spec).

use crate::batch::Event;
use crate::channel::{Aborted, ChannelWriter, SendContext};
use crate::graph::Partitioning;
use crate::record::Record;
use rand::rngs::SmallRng;
use rand::Rng;
use std::time::{Duration, Instant};

/// Maps a key to one of `n` channels: a multiplicative (Fibonacci) hash, then a multiply-shift
/// range reduction, so no division is done per record.
#[inline]
pub fn hash_channel(key: u64, n: usize) -> usize {
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h as u128 * n as u128) >> 64) as usize
}

/// One outgoing edge of a subtask: its partitioning and one writer per reachable channel.
pub(crate) struct EdgeWriter {
    partitioning: Partitioning,
    channels: Vec<ChannelWriter>,
    next: usize,
    /// Records handed to this edge so far, times the copies each one makes (the channels, for
    /// broadcast); what the channels did not send of it was left undelivered.
    given: u64,
}

impl EdgeWriter {
    pub(crate) fn new(partitioning: Partitioning, channels: Vec<ChannelWriter>) -> Self {
        EdgeWriter {
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
            Partitioning::Hash => {
                for r in records {
                    self.channels[hash_channel(r.routing_hash(), n)].push(r.clone(), cx)?;
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
    use super::hash_channel;

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
    fn hash_channel_is_pinned_per_key() {
        // Pinned values (computed apart from this code: the top bits of key * 0x9E3779B97F4A7C15
        // mod 2^64, scaled to n), so a change of the hash, which would move keys between
        // subtasks of a keyed operator across versions, fails here.
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
