//! The key hash: one documented function of a key's canonical bytes, the same in every version
//! and on every machine, that key groups and the partitions of a Kafka exchange come from.
//!
//! ```text
//! key_hash(key) = murmur2(canonical_bytes(key)) & 0x7fffffff
//! ```
//!
//! `murmur2` is Kafka's variant of MurmurHash2 (seed `0x9747b28c`, `m = 0x5bd1e995`, `r = 24`,
//! the input read as little-endian 32-bit words): the hash of Kafka's default partitioner,
//! `Utils.murmur2` in the Java client and `rd_murmur2` in librdkafka (its `murmur2` and
//! `murmur2_random` partitioners). So a topic of `N` partitions holds a key where a Kafka
//! producer keyed by the same bytes puts it: partition `key_hash(key) mod N`.
//!
//! The canonical bytes of a [`Value`](crate::Value) ([`Value::with_canonical_bytes`](crate::Value::with_canonical_bytes)):
//!
//! | key | canonical bytes |
//! |---|---|
//! | string | its UTF-8 bytes |
//! | int | its 8 bytes, big endian (two's complement; Kafka's `LongSerializer`) |
//! | double | its IEEE 754 binary64 bits, 8 bytes big endian |
//! | bool | one byte, `0x01` for true, `0x00` for false |
//! | null | no bytes |
//! | list, map | its compact JSON text (the form `Value`'s `Display` writes) |
//!
//! Hand-written (thirty lines, no dependency): what must hold is that it computes exactly
//! Kafka's variant, and that is checked here against librdkafka's own test vectors (the Java
//! client's results, `rdmurmur2.c`), by a test that produces through librdkafka's
//! `murmur2_random` partitioner (`kafka/tests/key_hash.rs`), and, through the table in
//! `docs/state.md`, against the docs.

/// The name of the key hash, recorded with keyed state (a checkpoint's `_metadata`, the
/// state topic's messages) so that state grouped by another hash is never restored into the
/// wrong key groups.
pub const KEY_HASH: &str = "murmur2";

const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

#[inline(always)]
const fn mix(h: u32, k: u32) -> u32 {
    let mut k = k.wrapping_mul(M);
    k ^= k >> R;
    k = k.wrapping_mul(M);
    h.wrapping_mul(M) ^ k
}

#[inline(always)]
const fn finish(mut h: u32) -> u32 {
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// Kafka's murmur2 of `bytes` (`Utils.murmur2`, librdkafka's `rd_murmur2`), before the sign bit
/// is cleared.
#[inline]
pub fn murmur2(bytes: &[u8]) -> u32 {
    let mut h = SEED ^ bytes.len() as u32;
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        h = mix(h, u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        if tail.len() == 3 {
            h ^= (tail[2] as u32) << 16;
        }
        if tail.len() >= 2 {
            h ^= (tail[1] as u32) << 8;
        }
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    finish(h)
}

/// The key hash of canonical bytes `bytes`: `murmur2(bytes) & 0x7fffffff` (Kafka's
/// `Utils.toPositive`), from 0 to 2^31 − 1.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u32 {
    murmur2(bytes) & 0x7fff_ffff
}

/// The key hash of an int key: [`hash_bytes`] of its 8 bytes big endian, without a buffer.
///
/// The keys 0 to [`SMALL_INTS`]` - 1` (dense ids, the generator's keys) read theirs from a
/// table computed at compile time: one load instead of seven dependent multiplications, on
/// the path every record of a `hash` edge takes.
#[inline(always)]
pub fn hash_int(i: i64) -> u32 {
    match SMALL_INT_HASHES.get(i as u64 as usize) {
        Some(h) => *h,
        None => hash_u64_be(i as u64),
    }
}

/// How many small non-negative int keys [`hash_int`] looks up instead of computing.
pub const SMALL_INTS: usize = 4096;

/// The key hashes of the ints `0..SMALL_INTS`, computed at compile time (16 KiB).
static SMALL_INT_HASHES: [u32; SMALL_INTS] = {
    let mut table = [0u32; SMALL_INTS];
    let mut i = 0;
    while i < SMALL_INTS {
        table[i] = hash_u64_be(i as u64);
        i += 1;
    }
    table
};

/// The key hash of a double key: [`hash_bytes`] of its IEEE 754 bits, 8 bytes big endian.
#[inline]
pub fn hash_double(d: f64) -> u32 {
    hash_u64_be(d.to_bits())
}

/// [`hash_bytes`] of `v.to_be_bytes()`: two whole words, no tail.
#[inline(always)]
const fn hash_u64_be(v: u64) -> u32 {
    // The first word is bytes 0..4 of the big-endian form read little endian: the high half
    // with its bytes swapped.
    let first = ((v >> 32) as u32).swap_bytes();
    let second = (v as u32).swap_bytes();
    let h = mix(mix(SEED ^ 8, first), second);
    finish(h) & 0x7fff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librdkafka's `unittest_murmur2` (rdmurmur2.c): Kafka's Java client's results.
    #[test]
    fn murmur2_is_kafkas() {
        let unaligned = "PreAmbleWillBeRemoved,ThePrePartThatIs";
        for (key, expected) in [
            ("kafka", 0xd067cf64u32),
            ("giberish123456789", 0x8f552b0c),
            ("1234", 0x9fc97b14),
            ("234", 0xe7c009ca),
            ("34", 0x873930da),
            ("4", 0x5a4b5ca1),
            (unaligned, 0x78424f1c),
            (&unaligned[1..], 0x4a62b377),
            (&unaligned[2..], 0xe0e4e09e),
            (&unaligned[3..], 0x62b8b43f),
            ("", 0x106e08d9),
        ] {
            assert_eq!(murmur2(key.as_bytes()), expected, "{key:?}");
            assert_eq!(
                hash_bytes(key.as_bytes()),
                expected & 0x7fff_ffff,
                "{key:?}"
            );
        }
    }

    #[test]
    fn ints_and_doubles_hash_their_big_endian_bytes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut ints = vec![0, 1, -1, 42, i64::MIN, i64::MAX, 1 << 32, -(1 << 40)];
        // Every int of the table, and those around its end.
        ints.extend(-10..SMALL_INTS as i64 + 10);
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ints.push(x as i64);
        }
        for i in ints {
            assert_eq!(hash_int(i), hash_bytes(&i.to_be_bytes()), "{i}");
            let d = f64::from_bits(i as u64);
            assert_eq!(hash_double(d), hash_bytes(&d.to_be_bytes()), "{d}");
        }
    }
}
