//! Log2 histograms, the shape KVM uses for its `halt_*_hist` statistics: bucket `i` counts
//! values in `[2^(i-1), 2^i)` ns (bucket 0 counts zeros).

use serde::Serialize;

/// A histogram of nanosecond values with power-of-two buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Log2Histogram {
    /// `buckets[i]` counts values `v` with `64 - v.leading_zeros() == i`.
    pub buckets: Vec<u64>,
    /// Number of values recorded.
    pub count: u64,
    /// Sum of the values (ns).
    pub sum: u64,
    /// Largest value recorded (ns).
    pub max: u64,
}

impl Log2Histogram {
    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        let b = (64 - v.leading_zeros()) as usize;
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    /// Mean of the recorded values (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Upper bound (exclusive, ns) of the bucket holding the `q` quantile, `q` in `[0, 1]`.
    pub fn quantile_upper(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return if i == 0 { 0 } else { 1u64 << i.min(63) };
            }
        }
        self.max
    }

    /// Adds every value of `other` into `self`.
    pub fn merge(&mut self, other: &Log2Histogram) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }
}

/// Sub-buckets per power of two of a [`LogLinHistogram`] (`2^SUB_BITS`).
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;

/// A log-linear histogram of nanosecond values (HdrHistogram's layout): values below
/// `2 × SUB` have a bucket each; above, every power of two `[2^e, 2^(e+1))` is split into
/// `SUB` = 8 equal buckets, so a bucket's width is at most 1/8 of its lower bound. At most 496
/// buckets (`u64` values), allocated up to the largest value seen: bounded memory whatever the
/// number of values. Its quantiles interpolate by rank within a bucket and are clamped to the
/// smallest and largest values recorded (exact when all values are equal); integer bucketing
/// and a fixed order of operations keep them deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogLinHistogram {
    /// Count per bucket ([`LogLinHistogram::bucket_of`]).
    pub buckets: Vec<u64>,
    /// Number of values recorded.
    pub count: u64,
    /// Sum of the values (ns, saturating).
    pub sum: u64,
    /// Smallest value recorded (ns; 0 when empty).
    pub min: u64,
    /// Largest value recorded (ns).
    pub max: u64,
}

impl LogLinHistogram {
    /// The bucket of value `v`.
    #[inline]
    pub fn bucket_of(v: u64) -> usize {
        if v < 2 * SUB {
            v as usize
        } else {
            let e = 63 - v.leading_zeros(); // >= SUB_BITS + 1
            let sub = (v >> (e - SUB_BITS)) - SUB;
            ((u64::from(e - SUB_BITS + 1) * SUB) + sub) as usize
        }
    }

    /// The values of bucket `i`: `[lower, lower + width)`.
    pub fn bucket_range(i: usize) -> (u64, u64) {
        let i = i as u64;
        if i < 2 * SUB {
            (i, 1)
        } else {
            let (g, sub) = (i / SUB, i % SUB);
            ((SUB + sub) << (g - 1), 1 << (g - 1))
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        let b = Self::bucket_of(v);
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
        self.min = if self.count == 0 { v } else { self.min.min(v) };
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    /// Mean of the recorded values (ns; 0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The `q` quantile (ns), `q` in `[0, 1]`: the value at rank `q × count` found by linear
    /// interpolation within the bucket holding that rank, clamped to `[min, max]` (0 when
    /// empty).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = q.clamp(0.0, 1.0) * self.count as f64;
        let mut seen = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (seen + c) as f64 >= rank {
                let (lower, width) = Self::bucket_range(i);
                let frac = ((rank - seen as f64) / c as f64).clamp(0.0, 1.0);
                let v = lower as f64 + width as f64 * frac;
                return v.clamp(self.min as f64, self.max as f64);
            }
            seen += c;
        }
        self.max as f64
    }

    /// Adds every value of `other` into `self`.
    pub fn merge(&mut self, other: &LogLinHistogram) {
        if other.count == 0 {
            return;
        }
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.min = if self.count == 0 { other.min } else { self.min.min(other.min) };
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_linear_buckets_tile_the_values() {
        // Every value falls in the bucket whose range holds it, and consecutive buckets abut.
        let mut next = 0u64;
        for i in 0..LogLinHistogram::bucket_of(u64::MAX) + 1 {
            let (lo, w) = LogLinHistogram::bucket_range(i);
            assert_eq!(lo, next, "bucket {i}");
            assert_eq!(LogLinHistogram::bucket_of(lo), i);
            assert_eq!(LogLinHistogram::bucket_of(lo + (w - 1)), i);
            next = lo.wrapping_add(w);
        }
        assert_eq!(next, 0, "the last bucket ends at 2^64");
        assert_eq!(LogLinHistogram::bucket_of(u64::MAX), 495);
    }

    #[test]
    fn log_linear_quantiles() {
        let mut h = LogLinHistogram::default();
        assert_eq!(h.quantile(0.5), 0.0);
        for _ in 0..10 {
            h.record(50_000);
        }
        // All equal: exact.
        assert_eq!((h.quantile(0.5), h.quantile(0.9), h.mean()), (50_000.0, 50_000.0, 50_000.0));
        // 1..=1000 µs uniformly: within an eighth of the true quantiles.
        let mut h = LogLinHistogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        for (q, exact) in [(0.5, 500_000.0), (0.9, 900_000.0)] {
            let got = h.quantile(q);
            assert!((got - exact).abs() / exact < 0.125, "q {q}: {got}");
        }
        assert_eq!((h.min, h.max, h.count), (1000, 1_000_000, 1000));
        let mut m = LogLinHistogram::default();
        m.merge(&h);
        m.merge(&LogLinHistogram::default());
        assert_eq!(m, h);
    }

    #[test]
    fn buckets_are_powers_of_two() {
        let mut h = Log2Histogram::default();
        for v in [0, 1, 2, 3, 4, 1000] {
            h.record(v);
        }
        assert_eq!(h.buckets[0], 1); // 0
        assert_eq!(h.buckets[1], 1); // 1
        assert_eq!(h.buckets[2], 2); // 2, 3
        assert_eq!(h.buckets[3], 1); // 4
        assert_eq!(h.buckets[10], 1); // 1000 in [512, 1024)
        assert_eq!(h.count, 6);
        assert_eq!(h.max, 1000);
        assert_eq!(h.quantile_upper(1.0), 1024);
        assert_eq!(h.quantile_upper(0.5), 4);
    }
}
