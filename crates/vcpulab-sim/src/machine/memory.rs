//! The memory system seen by computation: NUMA latencies, per-node bandwidth and cross-socket
//! data sharing (TPDS §6.1, §7.2; DIS ch.2 §2.4.5).
//!
//! A compute operation of native duration `W` has a memory intensity `m`: the fraction of `W`
//! stalled on memory when every access is served locally by an unloaded node (how profiles are
//! calibrated). Where it runs stretches that stall:
//!
//! ```text
//! time = W × [ (1 − m) + m × ( (1 − s) × Σₙ p(n) × L(n) × B(n)  +  s × S ) ]
//! L(n) = 1 on the core's node, else 1 + a × (remote_latency / local_latency − 1)
//! B(n) = max(1, demand(n) / node_bandwidth)                     (bandwidth saturation)
//! S    = 1 + x × a × (share_remote_latency / share_local_latency − 1)
//! ```
//!
//! `p(n)` is where the thread's data lives (placement, [`crate::world::memory`]); `s` the
//! fraction of its accesses to data other threads write (`memory.sharing` × `sharing_weight`),
//! served from the
//! socket's shared LLC when the writer is on the same socket and by a cross-socket transfer
//! otherwise (`x` = fraction of the other threads on other sockets); `a` the latency
//! sensitivity of the stalls (`memory.numa`: 1 = pointer chasing, every stall pays the full
//! latency; lower = streaming, where prefetching hides part of it). A thread streaming from
//! memory draws `memory.bandwidth × core_bandwidth` GB/s, spread over its data's nodes.
//!
//! Defaults describe the TPDS testbed (Xeon Gold 6148, 4 sockets, DDR4-2666, 6 channels per
//! socket). They are estimates from public measurements of that generation and can be
//! overridden in `[machine.memory]`:
//! - local idle latency ≈ 90 ns, one-hop remote ≈ 150 ns (Intel MLC on Skylake-SP servers);
//! - a line last written by another core of the socket ≈ 45 ns (LLC/snoop hit), by a core of
//!   another socket ≈ 130 ns (cross-socket cache-to-cache transfer);
//! - sustained (STREAM-like) bandwidth ≈ 100 GB/s per socket of the 128 GB/s peak
//!   (6 × 21.3 GB/s), ≈ 12 GB/s for one core.

use serde::{Deserialize, Serialize};

/// The `[machine.memory]` table.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySpec {
    /// Simulate the memory system (`false`: every computation takes its native duration).
    pub model: bool,
    /// Idle latency of a local memory access (ns).
    pub local_latency_ns: f64,
    /// Idle latency of a remote (other node) memory access (ns).
    pub remote_latency_ns: f64,
    /// Latency of reading a line another core of the same socket wrote (ns).
    pub share_local_latency_ns: f64,
    /// Latency of reading a line a core of another socket wrote (ns).
    pub share_remote_latency_ns: f64,
    /// Sustained memory bandwidth of one NUMA node (GB/s).
    pub node_bandwidth_gbs: f64,
    /// Bandwidth one core draws when it streams (GB/s).
    pub core_bandwidth_gbs: f64,
    /// Fraction of a computation's memory accesses that go to lines other threads write,
    /// per unit of the profile's `memory.sharing` score (0..1 judgement): 0.25 means a
    /// profile scored 1 has a quarter of its stalls on shared lines (*estimate*: boundary
    /// exchanges, reductions and queues are a minority of the accesses even in the most
    /// sharing-intensive benchmarks).
    pub sharing_weight: f64,
    /// Instructions per cycle of computation at native local speed, to report CPI.
    pub ipc: f64,
}

impl Default for MemorySpec {
    fn default() -> Self {
        MemorySpec {
            model: true,
            local_latency_ns: 90.0,
            remote_latency_ns: 150.0,
            share_local_latency_ns: 45.0,
            share_remote_latency_ns: 130.0,
            node_bandwidth_gbs: 100.0,
            core_bandwidth_gbs: 12.0,
            sharing_weight: 0.25,
            ipc: 1.0,
        }
    }
}

impl MemorySpec {
    /// Checks values; returns (field, message) with the field relative to `[machine.memory]`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let positive = |v: f64, f: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err((f.to_string(), format!("expected a positive number (got {v})")))
            }
        };
        positive(self.local_latency_ns, "local_latency_ns")?;
        positive(self.remote_latency_ns, "remote_latency_ns")?;
        positive(self.share_local_latency_ns, "share_local_latency_ns")?;
        positive(self.share_remote_latency_ns, "share_remote_latency_ns")?;
        positive(self.node_bandwidth_gbs, "node_bandwidth_gbs")?;
        positive(self.core_bandwidth_gbs, "core_bandwidth_gbs")?;
        positive(self.ipc, "ipc")?;
        if !(0.0..=1.0).contains(&self.sharing_weight) {
            return Err(("sharing_weight".into(), format!("expected a number in 0..=1 (got {})", self.sharing_weight)));
        }
        if self.remote_latency_ns < self.local_latency_ns {
            return Err((
                "remote_latency_ns".into(),
                format!("expected at least local_latency_ns ({}) (got {})", self.local_latency_ns, self.remote_latency_ns),
            ));
        }
        if self.share_remote_latency_ns < self.share_local_latency_ns {
            return Err((
                "share_remote_latency_ns".into(),
                format!(
                    "expected at least share_local_latency_ns ({}) (got {})",
                    self.share_local_latency_ns, self.share_remote_latency_ns
                ),
            ));
        }
        Ok(())
    }
}

/// How one thread's computation uses memory (from its operation and its workload).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Access {
    /// Memory intensity `m` of the operation.
    pub intensity: f64,
    /// Latency sensitivity `a` (`memory.numa`).
    pub numa: f64,
    /// Fraction `s` of accesses to data other threads write (`memory.sharing`).
    pub sharing: f64,
    /// Fraction `x` of the other threads of its instance on other sockets.
    pub remote_sharers: f64,
}

/// The result of [`stretch`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    /// Wall time per unit of native work (≥ 1 in practice).
    pub factor: f64,
    /// Fraction of the memory accesses served by another node or socket.
    pub remote: f64,
}

/// Stretch of a computation on a core of node `node`, whose data lies on nodes with shares
/// `placement` (summing to 1), given each node's bandwidth `demand` (GB/s, this thread's own
/// included).
pub fn stretch(spec: &MemorySpec, a: Access, node: u32, placement: &[(u32, f64)], demand: &[f64]) -> Stretch {
    let remote_l = 1.0 + a.numa * (spec.remote_latency_ns / spec.local_latency_ns - 1.0);
    let mut private = 0.0;
    let mut private_remote = 0.0;
    for &(n, share) in placement {
        let l = if n == node { 1.0 } else { remote_l };
        let b = (demand.get(n as usize).copied().unwrap_or(0.0) / spec.node_bandwidth_gbs).max(1.0);
        private += share * l * b;
        if n != node {
            private_remote += share;
        }
    }
    let shared = 1.0 + a.remote_sharers * a.numa * (spec.share_remote_latency_ns / spec.share_local_latency_ns - 1.0);
    let stall = (1.0 - a.sharing) * private + a.sharing * shared;
    Stretch { factor: (1.0 - a.intensity) + a.intensity * stall, remote: (1.0 - a.sharing) * private_remote + a.sharing * a.remote_sharers }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(m: f64) -> Access {
        Access { intensity: m, numa: 1.0, sharing: 0.0, remote_sharers: 0.0 }
    }

    #[test]
    fn local_unloaded_memory_costs_nothing_extra() {
        let s = stretch(&MemorySpec::default(), access(0.6), 0, &[(0, 1.0)], &[12.0]);
        assert!((s.factor - 1.0).abs() < 1e-12);
        assert_eq!(s.remote, 0.0);
    }

    #[test]
    fn remote_memory_stretches_the_stall_by_the_latency_ratio() {
        let spec = MemorySpec::default();
        let s = stretch(&spec, access(0.5), 0, &[(1, 1.0)], &[0.0, 12.0]);
        assert!((s.factor - (0.5 + 0.5 * 150.0 / 90.0)).abs() < 1e-12);
        assert_eq!(s.remote, 1.0);
        // Interleaved over two nodes: half the accesses are remote.
        let half = stretch(&spec, access(0.5), 0, &[(0, 0.5), (1, 0.5)], &[6.0, 6.0]);
        assert!(half.factor > 1.0 && half.factor < s.factor);
        assert!((half.remote - 0.5).abs() < 1e-12);
    }

    #[test]
    fn saturated_bandwidth_stretches_in_proportion() {
        let s = stretch(&MemorySpec::default(), access(1.0), 0, &[(0, 1.0)], &[200.0]);
        assert!((s.factor - 2.0).abs() < 1e-12);
    }

    #[test]
    fn compute_bound_work_is_insensitive() {
        let s = stretch(&MemorySpec::default(), access(0.0), 0, &[(3, 1.0)], &[0.0, 0.0, 0.0, 500.0]);
        assert_eq!(s.factor, 1.0);
    }

    #[test]
    fn sharing_across_sockets_costs_more_than_within() {
        let spec = MemorySpec::default();
        let within = Access { intensity: 0.4, numa: 1.0, sharing: 0.5, remote_sharers: 0.0 };
        let across = Access { remote_sharers: 1.0, ..within };
        let a = stretch(&spec, within, 0, &[(0, 1.0)], &[0.0]);
        let b = stretch(&spec, across, 0, &[(0, 1.0)], &[0.0]);
        assert!((a.factor - 1.0).abs() < 1e-12);
        assert!(b.factor > 1.3);
    }

    #[test]
    fn defaults_check_and_bad_values_name_the_field() {
        assert!(MemorySpec::default().check().is_ok());
        let e = MemorySpec { remote_latency_ns: 50.0, ..Default::default() }.check().unwrap_err();
        assert_eq!(e.0, "remote_latency_ns");
        let e = MemorySpec { node_bandwidth_gbs: 0.0, ..Default::default() }.check().unwrap_err();
        assert_eq!(e.0, "node_bandwidth_gbs");
    }
}
