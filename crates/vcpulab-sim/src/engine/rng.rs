//! Seeded per-entity random streams.
//!
//! Every entity that draws random numbers (a thread, a lock) owns a [`Stream`] whose seed is
//! derived from the run seed and the entity's identity with SplitMix64, so adding an entity or
//! changing the order in which entities draw never perturbs the others. Transcendental functions
//! come from the pure-Rust `libm` crate, not the platform's C library, so samples are
//! bit-identical on every machine.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// SplitMix64 finaliser: a bijective 64-bit mixer.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Derives the seed of one entity's stream from the run seed and a path of identifiers
/// (e.g. `[KIND_THREAD, instance, thread]`).
pub fn stream_seed(run_seed: u64, path: &[u64]) -> u64 {
    path.iter().fold(mix64(run_seed), |acc, &p| mix64(acc ^ mix64(p)))
}

/// One entity's random stream (ChaCha8).
#[derive(Debug, Clone)]
pub struct Stream {
    rng: ChaCha8Rng,
}

impl Stream {
    /// A stream seeded with `seed` (usually from [`stream_seed`]).
    pub fn new(seed: u64) -> Self {
        Stream { rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// A uniform `u64`.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A uniform float in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `[0, n)` (`n > 0`), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        // Lemire's multiply-shift with rejection.
        loop {
            let x = self.next_u64();
            let m = (x as u128) * (n as u128);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// An exponential sample with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * libm::log(1.0 - self.unit())
    }

    /// A standard normal sample (Box–Muller).
    pub fn std_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        libm::sqrt(-2.0 * libm::log(u1)) * libm::cos(2.0 * std::f64::consts::PI * u2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a1: Vec<u64> = (0..4)
            .map({
                let mut s = Stream::new(stream_seed(1, &[1, 2]));
                move |_| s.next_u64()
            })
            .collect();
        let mut s2 = Stream::new(stream_seed(1, &[1, 2]));
        let a2: Vec<u64> = (0..4).map(|_| s2.next_u64()).collect();
        assert_eq!(a1, a2);
        assert_ne!(stream_seed(1, &[1, 2]), stream_seed(1, &[2, 1]));
        assert_ne!(stream_seed(1, &[1, 2]), stream_seed(2, &[1, 2]));
    }

    #[test]
    fn exponential_mean_is_close() {
        let mut s = Stream::new(7);
        let n = 200_000;
        let mean: f64 = (0..n).map(|_| s.exp(10.0)).sum::<f64>() / n as f64;
        assert!((mean - 10.0).abs() < 0.1, "{mean}");
    }

    #[test]
    fn below_is_in_range() {
        let mut s = Stream::new(3);
        for n in 1..50 {
            assert!(s.below(n) < n);
        }
    }

    /// Golden values: the streams must not change across machines or dependency updates
    /// without us noticing (stored results would silently stop being reproducible).
    #[test]
    fn golden_first_values() {
        assert_eq!(stream_seed(42, &[7]), 17_120_185_283_933_592_140);
        let mut s = Stream::new(stream_seed(42, &[7]));
        assert_eq!(s.next_u64(), 12_197_934_783_592_099_125);
        assert_eq!(s.next_u64(), 13_168_405_123_909_464_022);
    }
}
