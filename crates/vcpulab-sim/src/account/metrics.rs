//! The overhead metrics of TPDS and the weighted speedup of DIS ch.2.
//!
//! - `δη_r = (C_v − C_p) / C_p` (reduced resource efficiency),
//! - `δη_t = (t_v·γ_v − t_p·γ_p) / (t_p·γ_p)` (reduced time efficiency),
//! - `ω = (1 + δη_t) / (1 + δη_r)` (overhead impact factor),
//! - weighted speedup `= Σ_i t_baseline / t_i` over co-running instances,
//! - efficiency-based speedup (DIS ch.4) `= N × useful / available`, with the
//!   decomposition of the available time.

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

/// Efficiency-based speedup (DIS ch.4) and the decomposition of the CPU time
/// available to a workload: `available = useful + busy_wait + overhead + unused − borrowed`.
///
/// - Physical machine: available = N cores × run time; `unused` is idle time; `overhead`
///   is 0 (kernel work counts as useful, as in `Speedup_PM = N − (idle + busy-waiting) / t`).
/// - VM: available = the time slices allocated to the VM over its run; `overhead` is its
///   host time (switching vCPUs in and out, exits); `unused` is allocated slice it left;
///   `borrowed` is time it ran beyond its allocation (others' unused slice).
///
/// Busy-waiting is not useful in either. `speedup = N × useful / available`, i.e.
/// `N − N × (busy_wait + overhead + unused − borrowed) / available`.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Efficiency {
    /// N × useful / available.
    pub speedup: f64,
    /// Useful computation / available.
    pub useful: f64,
    /// Busy-waiting (spins, TLB-shootdown waits, idle polling) / available.
    pub busy_wait: f64,
    /// Host overhead / available.
    pub overhead: f64,
    /// Unused (allocated but not used; idle natively) / available.
    pub unused: f64,
    /// Borrowed beyond the allocation / available.
    pub borrowed: f64,
}

/// The [`Efficiency`] of `n` processing units given `available` ns, of which the workload
/// consumed `consumed` (busy-waiting and host overhead included) and `borrowed` beyond its
/// allocation.
pub fn efficiency(n: u32, available: f64, consumed: f64, busy_wait: f64, overhead: f64, borrowed: f64) -> Efficiency {
    let a = available.max(1.0);
    let useful = (consumed - busy_wait - overhead).max(0.0);
    let unused = available - consumed + borrowed;
    Efficiency {
        speedup: f64::from(n) * useful / a,
        useful: useful / a,
        busy_wait: busy_wait / a,
        overhead: overhead / a,
        unused: unused / a,
        borrowed: borrowed / a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_parts_sum_to_the_available_time() {
        // A PM: 4 cores × 10 s; 30 core-s busy of which 5 busy-waiting → speedup 2.5.
        let e = efficiency(4, 40.0, 30.0, 5.0, 0.0, 0.0);
        assert!((e.speedup - 2.5).abs() < 1e-12);
        assert!((e.unused - 0.25).abs() < 1e-12);
        // A VM given 10 s that used 12 (4 borrowed): parts still sum to 1.
        let e = efficiency(2, 10.0, 12.0, 1.0, 1.0, 4.0);
        assert!((e.useful + e.busy_wait + e.overhead + e.unused - e.borrowed - 1.0).abs() < 1e-12);
        assert!((e.speedup - 2.0).abs() < 1e-12);
    }

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
