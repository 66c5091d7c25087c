//! The uniform doubles the generator's values and its disorder draw.

use rand::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;

/// Uniform in `[0, 1)` with 53 random bits.
#[inline(always)]
pub(super) fn unit_f64(rng: &mut Xoshiro256PlusPlus) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}
