//! The overhead metrics of TPDS §1.1 and the weighted speedup of DIS ch.2 (digest §1.1–§1.3).
//!
//! - `δη_r = (C_v − C_p) / C_p` (reduced resource efficiency),
//! - `δη_t = (t_v·γ_v − t_p·γ_p) / (t_p·γ_p)` (reduced time efficiency),
//! - `ω = (1 + δη_t) / (1 + δη_r)` (overhead impact factor),
//! - weighted speedup `= Σ_i t_baseline / t_i` over co-running instances.

use serde::Serialize;

/// Overhead of a virtualized run against its baseline.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Overhead {
    /// δη_r.
    pub delta_eta_r: f64,
    /// δη_t.
    pub delta_eta_t: f64,
    /// ω.
    pub omega: f64,
}

/// Computes δη_r, δη_t and ω from baseline (t_p, C_p), virtual (t_v, C_v) and `γ_v / γ_p`.
pub fn overhead(t_p: f64, c_p: f64, t_v: f64, c_v: f64, gamma_ratio: f64) -> Overhead {
    let delta_eta_r = (c_v - c_p) / c_p;
    let delta_eta_t = (t_v * gamma_ratio - t_p) / t_p;
    Overhead { delta_eta_r, delta_eta_t, omega: (1.0 + delta_eta_t) / (1.0 + delta_eta_r) }
}

/// Weighted speedup of co-running instances against one instance alone.
pub fn weighted_speedup(t_alone: f64, t_instances: &[f64]) -> f64 {
    t_instances.iter().map(|t| t_alone / t).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions() {
        // UC: 10 % slower, 20 % more cycles.
        let o = overhead(1.0, 100.0, 1.1, 120.0, 1.0);
        assert!((o.delta_eta_t - 0.1).abs() < 1e-12);
        assert!((o.delta_eta_r - 0.2).abs() < 1e-12);
        assert!((o.omega - 1.1 / 1.2).abs() < 1e-12);
        // OC with 2 VMs: twice the time with half the CPUs is no overhead.
        let o = overhead(1.0, 100.0, 2.0, 100.0, 0.5);
        assert!(o.delta_eta_t.abs() < 1e-12);
        assert!((weighted_speedup(1.0, &[2.0, 2.0]) - 1.0).abs() < 1e-12);
    }
}
