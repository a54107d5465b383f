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

#[cfg(test)]
mod tests {
    use super::*;

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
