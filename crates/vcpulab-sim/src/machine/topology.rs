//! Sockets, NUMA nodes, cores and hardware threads, and which of them a scenario uses.

use serde::{Deserialize, Serialize};

use super::costs::Costs;
use super::memory::MemorySpec;

/// The `[machine]` table of a spec.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MachineSpec {
    /// Number of sockets.
    pub sockets: u32,
    /// Cores per socket.
    pub cores_per_socket: u32,
    /// NUMA nodes per socket (1 unless sub-NUMA clustering).
    pub nodes_per_socket: u32,
    /// Hardware threads per core (1 = SMT off, as in TPDS; 2 = hyperthreading).
    pub threads_per_core: u32,
    /// Core clock and TSC rate in GHz, used to convert cycle-denominated parameters
    /// (PLE window) to nanoseconds.
    pub freq_ghz: f64,
    /// Which hardware threads a run of N CPUs uses: `packed` (default, TPDS's layout: the
    /// fewest sockets that hold N, spread evenly over them) or `spread` (evenly over every
    /// socket, e.g. to give a bandwidth-bound workload every node's memory bandwidth).
    pub placement: Placement,
    /// Cost table overrides.
    pub costs: Costs,
    /// The memory system (`[machine.memory]`).
    pub memory: MemorySpec,
}

/// How a run's CPUs are chosen among the machine's sockets.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// The fewest sockets that hold the CPUs (TPDS).
    #[default]
    Packed,
    /// Every socket, evenly.
    Spread,
}

impl Default for MachineSpec {
    /// The TPDS testbed: 4 sockets × 20 cores, SMT off (Xeon Gold 6148 class, 2.4 GHz).
    fn default() -> Self {
        MachineSpec {
            sockets: 4,
            cores_per_socket: 20,
            nodes_per_socket: 1,
            threads_per_core: 1,
            freq_ghz: 2.4,
            placement: Placement::Packed,
            costs: Costs::default(),
            memory: MemorySpec::default(),
        }
    }
}

/// One hardware thread (what the host kernel calls a CPU; what the simulator calls a core).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Pcpu {
    /// Socket index.
    pub socket: u32,
    /// NUMA node index (global).
    pub node: u32,
    /// Core index (global).
    pub core: u32,
    /// Hardware thread index within the core.
    pub smt: u32,
}

/// The hardware threads a run uses, in the order the host kernel numbers them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Topology {
    /// The selected hardware threads.
    pub pcpus: Vec<Pcpu>,
    /// Sockets the selection spans.
    pub sockets_used: u32,
}

impl MachineSpec {
    /// Total hardware threads of the machine.
    pub fn total_pcpus(&self) -> u32 {
        self.sockets * self.cores_per_socket * self.threads_per_core
    }

    /// Checks the shape; returns (field, message) on error.
    pub fn check(&self) -> Result<(), (String, String)> {
        use crate::spec::bounds;
        let within = |v: u32, f: &str, max: u32| {
            if v == 0 || v > max {
                Err((f.to_string(), format!("expected an integer in 1..={max} (got {v})")))
            } else {
                Ok(())
            }
        };
        within(self.sockets, "sockets", bounds::MAX_SOCKETS)?;
        within(self.cores_per_socket, "cores_per_socket", bounds::MAX_CORES_PER_SOCKET)?;
        within(self.nodes_per_socket, "nodes_per_socket", self.cores_per_socket)?;
        within(self.threads_per_core, "threads_per_core", bounds::MAX_THREADS_PER_CORE)?;
        let cpus = u64::from(self.sockets) * u64::from(self.cores_per_socket) * u64::from(self.threads_per_core);
        if cpus > u64::from(bounds::MAX_CPUS) {
            return Err((
                "sockets".into(),
                format!(
                    "the machine would have {cpus} CPUs (sockets x cores_per_socket x threads_per_core); expected at most {}",
                    bounds::MAX_CPUS
                ),
            ));
        }
        if !self.cores_per_socket.is_multiple_of(self.nodes_per_socket) {
            return Err((
                "nodes_per_socket".into(),
                format!("must divide cores_per_socket ({}) (got {})", self.cores_per_socket, self.nodes_per_socket),
            ));
        }
        if !(self.freq_ghz.is_finite() && self.freq_ghz > 0.0) {
            return Err(("freq_ghz".into(), format!("expected a positive number (got {})", self.freq_ghz)));
        }
        self.memory.check().map_err(|(f, m)| (format!("memory.{f}"), m))
    }

    /// Total NUMA nodes of the machine.
    pub fn nodes(&self) -> u32 {
        self.sockets * self.nodes_per_socket
    }

    /// Hardware threads of one NUMA node.
    pub fn pcpus_per_node(&self) -> u32 {
        self.cores_per_socket / self.nodes_per_socket * self.threads_per_core
    }

    /// Converts cycles at the machine clock to nanoseconds (rounded, at least 1).
    pub fn cycles_to_ns(&self, cycles: u64) -> u64 {
        ((cycles as f64 / self.freq_ghz).round() as u64).max(1)
    }

    /// Chooses `n` hardware threads the way TPDS laid out its VMs: the fewest sockets that
    /// hold `n` (filling whole cores before their SMT siblings), spread evenly over those
    /// sockets, so a 32-CPU run spans 2 sockets and a 64-CPU run 4 on the 4 × 20 testbed.
    /// With `placement = "spread"`, every socket (up to `n`) is used.
    pub fn select(&self, n: u32) -> Result<Topology, String> {
        let per_socket = self.cores_per_socket * self.threads_per_core;
        if n == 0 || n > self.total_pcpus() {
            return Err(format!("the machine has {} CPUs (got {n})", self.total_pcpus()));
        }
        let sockets_used = match self.placement {
            Placement::Packed => n.div_ceil(per_socket),
            Placement::Spread => self.sockets.min(n),
        };
        let cores_per_node = self.cores_per_socket / self.nodes_per_socket;
        let mut pcpus = Vec::with_capacity(n as usize);
        for i in 0..n {
            // Round-robin over the used sockets; within a socket, cores first, then siblings.
            let socket = i % sockets_used;
            let k = i / sockets_used;
            let smt = k / self.cores_per_socket;
            let local_core = k % self.cores_per_socket;
            let core = socket * self.cores_per_socket + local_core;
            let node = socket * self.nodes_per_socket + local_core / cores_per_node;
            pcpus.push(Pcpu { socket, node, core, smt });
        }
        // Number CPUs socket by socket, like the host kernel enumerates them.
        pcpus.sort_by_key(|p| (p.socket, p.smt, p.core));
        Ok(Topology { pcpus, sockets_used })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpds_layout_spreads_evenly() {
        let m = MachineSpec::default();
        assert_eq!(m.select(16).unwrap().sockets_used, 1);
        let t32 = m.select(32).unwrap();
        assert_eq!(t32.sockets_used, 2);
        assert_eq!(t32.pcpus.iter().filter(|p| p.socket == 0).count(), 16);
        let t64 = m.select(64).unwrap();
        assert_eq!(t64.sockets_used, 4);
        assert!(t64.pcpus.iter().all(|p| p.smt == 0));
        assert!(m.select(81).is_err());
        assert!(m.select(0).is_err());
    }

    #[test]
    fn smt_siblings_come_after_cores() {
        let m = MachineSpec { sockets: 1, cores_per_socket: 4, threads_per_core: 2, ..Default::default() };
        let t = m.select(6).unwrap();
        assert_eq!(t.pcpus.iter().filter(|p| p.smt == 1).count(), 2);
    }

    #[test]
    fn spread_uses_every_socket() {
        let m = MachineSpec { placement: Placement::Spread, ..Default::default() };
        let t = m.select(16).unwrap();
        assert_eq!(t.sockets_used, 4);
        assert!((0..4).all(|s| t.pcpus.iter().filter(|p| p.socket == s).count() == 4));
        assert_eq!(m.select(2).unwrap().sockets_used, 2);
    }

    #[test]
    fn cycles_convert() {
        let m = MachineSpec::default();
        assert_eq!(m.cycles_to_ns(4096), 1707);
    }
}
