//! Key groups (Flink's design): the unit keyed state is stored, routed and moved in.
//!
//! A keyed vertex has a `max_parallelism` `M` (1 to [`MAX_KEY_GROUPS`]): its key space is cut
//! into `M` key groups, and
//!
//! ```text
//! key_group(key) = key_hash(key) mod M
//! key_hash(key)  = murmur2(canonical bytes of key) & 0x7fffffff
//! ```
//!
//! where `key_hash` is [`Value::routing_hash`](crate::Value::routing_hash): Kafka's default
//! partitioner's hash of the key's canonical bytes ([`crate::key_hash`]), so a keyed vertex fed
//! by a Kafka exchange of `N` partitions, whose `M` is `N`, has one key group per partition. The
//! mapping depends on nothing but the key and `M`: not on the parallelism, the machine, the
//! Rust version or any crate's hasher (the values are pinned by a test and by the table in
//! `docs/state.md`). Subtask `i` of `P` owns the contiguous range
//! [`KeyGroupRange::of_subtask`] `[ceil(i·M/P), ceil((i+1)·M/P))`, so key group `g` is owned by
//! subtask `g·P / M` ([`owner`]). A hash edge routes each record to the owner of its key group,
//! so a key's state lives in exactly one subtask, and another parallelism only moves whole key
//! groups between subtasks.

use std::fmt;

/// The most key groups a vertex may have (Flink's upper bound too).
pub const MAX_KEY_GROUPS: u32 = 32_768;

/// The default `max_parallelism` of a vertex of parallelism `p`, as Flink's: `p + p/2` rounded
/// up to a power of two, at least 128 and at most [`MAX_KEY_GROUPS`].
pub fn default_max_parallelism(p: usize) -> u32 {
    let p = p as u64;
    (p + p / 2)
        .next_power_of_two()
        .clamp(128, MAX_KEY_GROUPS as u64) as u32
}

/// Why a `max_parallelism` does not fit a vertex.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaxParallelismError {
    /// Outside 1..=[`MAX_KEY_GROUPS`].
    #[error("max_parallelism must be from 1 to {MAX_KEY_GROUPS}, found {0}")]
    OutOfRange(u64),
    /// Smaller than the vertex's parallelism: some subtask would own no key group.
    #[error("max_parallelism {max} is less than the parallelism {parallelism}")]
    BelowParallelism {
        /// The max parallelism.
        max: u32,
        /// The vertex's parallelism.
        parallelism: usize,
    },
}

/// Checks a `max_parallelism` for a vertex of `parallelism`.
pub fn check_max_parallelism(max: u64, parallelism: usize) -> Result<u32, MaxParallelismError> {
    if max == 0 || max > MAX_KEY_GROUPS as u64 {
        return Err(MaxParallelismError::OutOfRange(max));
    }
    let max = max as u32;
    if (max as usize) < parallelism {
        return Err(MaxParallelismError::BelowParallelism { max, parallelism });
    }
    Ok(max)
}

/// The key group of a key whose [key hash](crate::Record::routing_hash) is `hash`, among
/// `max_parallelism` key groups: `hash mod max_parallelism` (see the module docs).
#[inline]
pub fn key_group(hash: u32, max_parallelism: u32) -> u32 {
    KeyGroups::new(max_parallelism).of(hash)
}

/// The subtask of `parallelism` that owns key group `group` of `max_parallelism`.
#[inline]
pub fn owner(group: u32, parallelism: usize, max_parallelism: u32) -> usize {
    (group as u64 * parallelism as u64 / max_parallelism as u64) as usize
}

/// [`key_group`] for one `max_parallelism`, with the modulo turned into two multiplications
/// (Lemire's fastmod: exact for every 32-bit dividend), for the per-record path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyGroups {
    max: u32,
    magic: u64,
}

impl KeyGroups {
    /// Key groups `0..max_parallelism` (at least 1).
    pub fn new(max_parallelism: u32) -> Self {
        let max = max_parallelism.max(1);
        KeyGroups {
            max,
            magic: (u64::MAX / max as u64).wrapping_add(1),
        }
    }

    /// How many key groups.
    pub fn max_parallelism(&self) -> u32 {
        self.max
    }

    /// The key group of key hash `hash`: `hash mod max_parallelism`.
    #[inline]
    pub fn of(&self, hash: u32) -> u32 {
        if self.max == 1 {
            return 0;
        }
        ((self.fraction(hash) as u128 * self.max as u128) >> 64) as u32
    }

    /// Where `hash` falls in `[0, 1)`, as a 64-bit fraction: its key group is this times
    /// `max_parallelism`, rounded down (the fastmod remainder before its last multiplication).
    #[inline(always)]
    fn fraction(&self, hash: u32) -> u64 {
        self.magic.wrapping_mul(hash as u64)
    }
}

/// A contiguous range of key groups `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyGroupRange {
    /// The first key group.
    pub start: u32,
    /// One past the last key group.
    pub end: u32,
}

impl KeyGroupRange {
    /// The key groups subtask `subtask` of `parallelism` owns among `max_parallelism`:
    /// `[ceil(i·M/P), ceil((i+1)·M/P))`.
    pub fn of_subtask(subtask: usize, parallelism: usize, max_parallelism: u32) -> Self {
        let m = max_parallelism as u64;
        let p = parallelism.max(1) as u64;
        let i = subtask as u64;
        KeyGroupRange {
            start: (i * m).div_ceil(p) as u32,
            end: ((i + 1) * m).div_ceil(p) as u32,
        }
    }

    /// Whether `group` is in the range.
    pub fn contains(&self, group: u32) -> bool {
        (self.start..self.end).contains(&group)
    }

    /// Whether the two ranges share a key group.
    pub fn overlaps(&self, other: &KeyGroupRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// How many key groups.
    pub fn len(&self) -> u32 {
        self.end.saturating_sub(self.start)
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// Per key group, the subtask that owns it: the routing table of a hash edge (one byte pair per
/// key group, so a lookup per record instead of a division).
#[derive(Clone, Debug)]
pub(crate) struct Owners {
    groups: KeyGroups,
    owner: Box<[u16]>,
    /// Whether the parallelism divides `max_parallelism`: every subtask then owns as many key
    /// groups, and [`Owners::channel_of_even`] finds the owner without the table.
    even: bool,
}

impl Owners {
    pub(crate) fn new(parallelism: usize, max_parallelism: u32) -> Self {
        let groups = KeyGroups::new(max_parallelism);
        let max = groups.max_parallelism();
        let owner = (0..max)
            .map(|g| owner(g, parallelism, max) as u16)
            .collect();
        let even = parallelism >= 1 && (max as usize).is_multiple_of(parallelism);
        Owners {
            groups,
            owner,
            even,
        }
    }

    /// The channel (subtask) of key hash `hash`.
    #[inline]
    pub(crate) fn channel(&self, hash: u32) -> usize {
        let g = self.groups.of(hash) as usize;
        // `of` is below `max_parallelism`, the table's length.
        self.owner[g] as usize
    }

    /// Whether [`Owners::channel_of_even`] may be used: the parallelism divides
    /// `max_parallelism`. With the default max parallelism (a power of two, at least 128) that
    /// holds for every power-of-two parallelism, P = 2 included.
    #[inline(always)]
    pub(crate) fn is_even(&self) -> bool {
        self.even
    }

    /// [`Owners::channel`] where [`Owners::is_even`] holds and `parallelism` is the one the
    /// table was made for: no table lookup, one multiplication fewer (a shift when
    /// `parallelism` is a constant power of two, as on a two-channel edge).
    ///
    /// With `P` dividing `M`, the owner `⌊g·P/M⌋` of key group `g = ⌊f·M⌋` (`f` the hash's
    /// [fraction](KeyGroups::fraction)) is `⌊⌊f·M⌋ / (M/P)⌋ = ⌊f·M / (M/P)⌋ = ⌊f·P⌋`.
    #[inline(always)]
    pub(crate) fn channel_of_even(&self, hash: u32, parallelism: usize) -> usize {
        debug_assert!(self.even);
        ((self.groups.fraction(hash) as u128 * parallelism as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    #[test]
    fn default_max_parallelism_is_flinks() {
        assert_eq!(default_max_parallelism(1), 128);
        assert_eq!(default_max_parallelism(2), 128);
        assert_eq!(default_max_parallelism(100), 256);
        assert_eq!(default_max_parallelism(1024), 2048);
        assert_eq!(default_max_parallelism(30_000), 32_768);
    }

    #[test]
    fn max_parallelism_is_checked() {
        assert_eq!(check_max_parallelism(128, 4), Ok(128));
        assert_eq!(
            check_max_parallelism(0, 1),
            Err(MaxParallelismError::OutOfRange(0))
        );
        assert_eq!(
            check_max_parallelism(32_769, 1),
            Err(MaxParallelismError::OutOfRange(32_769))
        );
        assert_eq!(
            check_max_parallelism(3, 4),
            Err(MaxParallelismError::BelowParallelism {
                max: 3,
                parallelism: 4
            })
        );
    }

    #[test]
    fn key_groups_are_the_hash_mod_max_parallelism() {
        // Computed apart from `KeyGroups` (a plain `%`), for every M that matters.
        for m in [1u32, 2, 3, 7, 128, 1000, 32_768] {
            let groups = KeyGroups::new(m);
            for hash in (0..5000u32).chain([u32::MAX, 0x7fff_ffff, 1 << 30, 0xDEAD_BEEF]) {
                assert_eq!(groups.of(hash), hash % m, "hash {hash}, M {m}");
                assert_eq!(key_group(hash, m), hash % m, "hash {hash}, M {m}");
            }
        }
    }

    #[test]
    fn key_groups_are_pinned() {
        // Pinned: a change here moves keys between key groups, so a checkpoint written by an
        // older version would restore keys into the wrong subtask. Never change these. (They
        // were changed once, on purpose, when the hash became Kafka's murmur2 of the key's
        // canonical bytes instead of rustc-hash's FxHasher with a Fibonacci multiplication;
        // checkpoints and state topics record the hash, and those of the old one are refused.)
        // Computed apart from this code (Python, Kafka's murmur2 as in librdkafka's
        // rdmurmur2.c over the canonical bytes, `& 0x7fffffff`, `% M`).
        for (key, m, group) in [
            (Value::Int(0), 128, 3),
            (Value::Int(1), 128, 44),
            (Value::Int(42), 128, 64),
            (Value::Int(-1), 128, 61),
            (Value::Int(7), 1000, 315),
            (Value::from("u1"), 128, 112),
            (Value::from("user-17"), 32_768, 20_332),
        ] {
            assert_eq!(
                key_group(key.routing_hash(), m),
                group,
                "key {key:?}, M {m}"
            );
        }
    }

    #[test]
    fn ranges_cover_every_key_group_once_and_owner_agrees() {
        for m in [1u32, 2, 5, 128, 130, 1000] {
            for p in 1..=(m as usize).min(9) {
                let mut next = 0;
                for i in 0..p {
                    let r = KeyGroupRange::of_subtask(i, p, m);
                    assert_eq!(r.start, next, "M {m}, P {p}, subtask {i}");
                    assert!(!r.is_empty(), "M {m}, P {p}, subtask {i}");
                    for g in r.start..r.end {
                        assert_eq!(owner(g, p, m), i, "M {m}, P {p}, group {g}");
                    }
                    next = r.end;
                }
                assert_eq!(next, m);
            }
        }
        assert_eq!(
            KeyGroupRange::of_subtask(1, 3, 128),
            KeyGroupRange { start: 43, end: 86 }
        );
    }

    #[test]
    fn even_owners_route_as_the_table_does() {
        // Spread hashes, small keys (the generator's) and the ends of the range.
        let mut hashes: Vec<u32> = (0..20_000u32).collect();
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            hashes.push(x as u32 & 0x7fff_ffff);
        }
        hashes.extend([u32::MAX, u32::MAX - 1, 1 << 31, 0x7fff_ffff, 0x7fff_fffe]);
        for (p, max) in [
            (1, 1),
            (1, 128),
            (2, 128),
            (4, 128),
            (8, 256),
            (3, 96),
            (5, 5),
            (7, 448),
            (16, 4096),
        ] {
            let owners = Owners::new(p, max);
            assert!(owners.is_even(), "{p} divides {max}");
            for &h in &hashes {
                assert_eq!(
                    owners.channel_of_even(h, p),
                    owners.channel(h),
                    "hash {h}, parallelism {p}, max parallelism {max}"
                );
            }
        }
        for (p, max) in [(3, 128), (5, 128), (6, 128), (7, 100)] {
            assert!(!Owners::new(p, max).is_even(), "{p} does not divide {max}");
        }
    }

    #[test]
    fn owners_route_to_the_owner_of_the_key_group() {
        let owners = Owners::new(3, 128);
        for key in 0..10_000u32 {
            assert_eq!(owners.channel(key), owner(key_group(key, 128), 3, 128));
        }
    }
}
