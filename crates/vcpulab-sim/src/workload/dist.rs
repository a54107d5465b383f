//! Durations and the distributions compute and sleep operations draw from.

use crate::engine::Stream;

/// A distribution of durations in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    /// Always the same value.
    Fixed(u64),
    /// Exponential with the given mean.
    Exp {
        /// Mean (ns).
        mean: f64,
    },
    /// Uniform in `[lo, hi]`.
    Uniform {
        /// Lower bound (ns).
        lo: u64,
        /// Upper bound (ns).
        hi: u64,
    },
    /// Normal, truncated at zero.
    Normal {
        /// Mean (ns).
        mean: f64,
        /// Standard deviation (ns).
        sd: f64,
    },
    /// Log-normal with the given mean and standard deviation of the value itself.
    LogNormal {
        /// Mean (ns).
        mean: f64,
        /// Standard deviation (ns).
        sd: f64,
    },
}

impl Dist {
    /// Draws one duration (ns).
    pub fn sample(&self, rng: &mut Stream) -> u64 {
        let v = match *self {
            Dist::Fixed(v) => return v,
            Dist::Exp { mean } => rng.exp(mean),
            Dist::Uniform { lo, hi } => return lo + rng.below(hi - lo + 1),
            Dist::Normal { mean, sd } => {
                // Truncated at zero: redraw negative values (bounded; a mean far below zero
                // yields 0).
                let mut v = -1.0;
                for _ in 0..64 {
                    v = mean + sd * rng.std_normal();
                    if v >= 0.0 {
                        break;
                    }
                }
                v
            }
            Dist::LogNormal { mean, sd } => {
                let s2 = libm::log(1.0 + (sd * sd) / (mean * mean));
                let mu = libm::log(mean) - s2 / 2.0;
                libm::exp(mu + libm::sqrt(s2) * rng.std_normal())
            }
        };
        if v <= 0.0 {
            0
        } else {
            libm::round(v) as u64
        }
    }

    /// Expected value (ns), for documentation and sanity checks.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Fixed(v) => v as f64,
            Dist::Exp { mean } | Dist::Normal { mean, .. } | Dist::LogNormal { mean, .. } => mean,
            Dist::Uniform { lo, hi } => (lo + hi) as f64 / 2.0,
        }
    }

    /// True when every sample is the same.
    pub fn is_deterministic(&self) -> bool {
        matches!(self, Dist::Fixed(_))
    }
}

/// Parses a duration: an integer number of nanoseconds, or a string with a unit
/// (`"250ns"`, `"50us"`, `"1.5ms"`, `"2s"`). Negative values are rejected.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => return Err(format!("unknown time unit '{u}' in '{s}' (use ns, us, ms or s)")),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("expected a duration like '50us' (got '{s}')"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("expected a non-negative duration (got '{s}')"));
    }
    let ns = v * scale;
    if ns > 1e18 {
        return Err(format!("duration too large (got '{s}')"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("250ns"), Ok(250));
        assert_eq!(parse_duration("50us"), Ok(50_000));
        assert_eq!(parse_duration("50µs"), Ok(50_000));
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration("2s"), Ok(2_000_000_000));
        assert_eq!(parse_duration("12"), Ok(12));
        assert!(parse_duration("-5us").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("abc").is_err());
    }

    #[test]
    fn samples_are_reasonable() {
        let mut r = Stream::new(1);
        for d in [
            Dist::Exp { mean: 1000.0 },
            Dist::Uniform { lo: 500, hi: 1500 },
            Dist::Normal { mean: 1000.0, sd: 100.0 },
            Dist::LogNormal { mean: 1000.0, sd: 300.0 },
        ] {
            let n = 50_000;
            let m = (0..n).map(|_| d.sample(&mut r) as f64).sum::<f64>() / n as f64;
            assert!((m - 1000.0).abs() < 30.0, "{d:?} mean {m}");
        }
        assert_eq!(Dist::Fixed(7).sample(&mut r), 7);
    }
}
