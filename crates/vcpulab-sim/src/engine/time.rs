//! Virtual time: a nanosecond count in a `u64` newtype.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in virtual time, in nanoseconds since the start of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// A time later than any reachable instant ("never").
    pub const NEVER: SimTime = SimTime(u64::MAX);

    /// Nanoseconds since the start of the run.
    #[inline]
    pub fn ns(self) -> u64 {
        self.0
    }

    /// Seconds since the start of the run (for reporting only).
    pub fn secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }

    /// `self + d`, saturating at [`SimTime::NEVER`].
    #[inline]
    pub fn after(self, d: u64) -> SimTime {
        SimTime(self.0.saturating_add(d))
    }

    /// `self - earlier` in nanoseconds (0 if `earlier` is later).
    #[inline]
    pub fn since(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<u64> for SimTime {
    type Output = SimTime;
    #[inline]
    fn add(self, rhs: u64) -> SimTime {
        self.after(rhs)
    }
}

impl AddAssign<u64> for SimTime {
    #[inline]
    fn add_assign(&mut self, rhs: u64) {
        *self = self.after(rhs);
    }
}

impl Sub for SimTime {
    type Output = u64;
    #[inline]
    fn sub(self, rhs: SimTime) -> u64 {
        self.since(rhs)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_ns(self.0))
    }
}

/// Formats a nanosecond count with the largest unit that keeps it readable ("1.5ms").
pub fn format_ns(ns: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    for (scale, unit) in UNITS {
        if ns >= scale {
            let v = ns as f64 / scale as f64;
            let s = format!("{v:.3}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{unit}");
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(SimTime(5) + 3, SimTime(8));
        assert_eq!(SimTime::NEVER + 1, SimTime::NEVER);
        assert_eq!(SimTime(3) - SimTime(5), 0);
        assert_eq!(SimTime(9).since(SimTime(4)), 5);
    }

    #[test]
    fn formats_with_units() {
        assert_eq!(format_ns(999), "999ns");
        assert_eq!(format_ns(1_500), "1.5us");
        assert_eq!(format_ns(10_000_000), "10ms");
        assert_eq!(format_ns(2_000_000_000), "2s");
    }
}
