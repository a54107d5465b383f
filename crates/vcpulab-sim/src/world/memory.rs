//! The memory model at run time ([`crate::machine::memory`] has the formula): where each
//! thread's data lives, each node's bandwidth demand, the stretch of every compute segment,
//! and the counters (local and remote accesses, CPI, bandwidth per node).
//!
//! Placement of a thread's data, by the kernel it runs in (TPDS §6.1, §7.2):
//! - **native**, and a guest with **NUMA exposed**: the kernel is NUMA-aware. First touch
//!   places a thread's pages on its node and NUMA balancing keeps them with it, so its
//!   private data is modelled as local to the node it runs on (for an exposed guest: the
//!   host node its vCPU's virtual node is bound to).
//! - a guest with **NUMA hidden**: the guest places pages without node knowledge, so where
//!   they are on the host depends on the VM's memory placement (`vm.memory`). With
//!   `interleave` (the default) a thread's private data follows the host's first touch: it
//!   lies on the node of the vCPU the thread first computed on and stays there if the guest
//!   moves the thread; data shared between threads (the profile's `memory.sharing` of its
//!   accesses, all of them when the main thread builds the data: `memory.first_touch =
//!   "main"`) is spread over the vCPUs' nodes. `first_touch` puts all of a thread's data on
//!   its first node, `bind` all on one node ([`MemState::data_placement`] has the kernel
//!   code behind it).
//!
//! A numad-like balancer ([`crate::policy::numad`]) can later bind a VM's memory to chosen
//! nodes, which overrides all of the above for that VM.
//!
//! A compute segment's stretch is computed when the core's leaf is resolved, and again
//! whenever the saturation of a node it reads from moves by more than 1 % (bandwidth is
//! shared like a processor-sharing server).

use serde::Serialize;

use crate::account::{Attr, Cause};
use crate::engine::SimTime;
use crate::kernel::{KernelKind, ThreadId};
use crate::machine::memory::{stretch, Access};
use crate::machine::{MachineSpec, MemorySpec};
use crate::policy::numad::NumadCounts;
use crate::spec::vm::{MemoryPlacement, NumaView};

use super::World;

/// Fixed-point unit of a stretch factor.
pub(crate) const ONE: u64 = 1 << 16;

/// Relative change of a node's bandwidth saturation that re-times the computations reading
/// from it (smaller changes wait for their next resolution: at most 1 % off, far fewer events).
const RETIME: f64 = 0.01;

/// What one core's current compute segment does to memory.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    /// Wall time per unit of work, in units of [`ONE`].
    pub(crate) factor: u64,
    /// Memory intensity of the operation.
    intensity: f64,
    /// Fraction of its accesses served remotely.
    remote: f64,
    /// Its bandwidth demand per node (GB/s).
    demand: Vec<(u32, f64)>,
    /// Thread, and counter slots: owner and instance.
    owner: u32,
    inst: u32,
}

/// Memory counters of one (v)CPU, core or instance.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MemCounters {
    /// Native work done by computation (ns at native local speed).
    pub(crate) work_ns: u64,
    /// Wall time computing (ns).
    pub(crate) wall_ns: u64,
    /// Estimated memory accesses served locally / remotely.
    pub(crate) local: f64,
    pub(crate) remote: f64,
}

impl MemCounters {
    fn add(&mut self, work: u64, wall: u64, accesses: f64, remote: f64) {
        self.work_ns += work;
        self.wall_ns += wall;
        self.local += accesses * (1.0 - remote);
        self.remote += accesses * remote;
    }
}

/// Memory placement of one VM.
#[derive(Clone, Debug)]
pub(crate) struct VmMem {
    pub(crate) view: NumaView,
    placement: MemoryPlacement,
    bind: u32,
    /// Host node of each vCPU's (virtual) node: where it was laid out.
    pub(crate) vnode: Vec<u32>,
    /// Interleave shares over nodes (in proportion to the vCPUs on each).
    pub(crate) shares: Vec<(u32, f64)>,
    /// Set by the NUMA balancer: the VM's memory is on these nodes, in these shares.
    pub(crate) bound: Option<Vec<(u32, f64)>>,
}

impl VmMem {
    /// Its placement while NUMA is hidden.
    pub(crate) fn placement(&self) -> MemoryPlacement {
        self.placement
    }

    /// The node of `memory = "bind"`.
    pub(crate) fn bind_node(&self) -> u32 {
        self.bind
    }
}

/// The memory system of one run.
#[derive(Debug)]
pub(crate) struct MemState {
    pub(crate) spec: MemorySpec,
    ipc_ghz: f64,
    /// Node and socket of each core.
    pub(crate) core_node: Vec<u32>,
    core_socket: Vec<u32>,
    pub(crate) nodes: u32,
    /// Host node of a thread's private data in a NUMA-hidden guest (`interleave`, `first_touch`):
    /// that of the core it first computed on.
    home: Vec<Option<u32>>,
    /// Socket each thread last computed on, and per instance the count per socket.
    thread_socket: Vec<Option<u32>>,
    inst_sockets: Vec<Vec<u32>>,
    pub(crate) vms: Vec<VmMem>,
    /// Current compute segment of each core.
    pub(crate) seg: Vec<Option<Segment>>,
    /// Bandwidth demand per node (GB/s), its time integral (GB) and peak.
    demand: Vec<f64>,
    /// Per node, the saturation factor its readers were last re-timed at.
    told: Vec<f64>,
    gb: Vec<f64>,
    peak: Vec<f64>,
    since: SimTime,
    pub(crate) by_owner: Vec<MemCounters>,
    pub(crate) by_core: Vec<MemCounters>,
    pub(crate) by_inst: Vec<MemCounters>,
}

impl MemState {
    /// The memory system of a run on `machine`'s first `cores` selected CPUs, or None when
    /// the model is off.
    pub(crate) fn new(machine: &MachineSpec, cores: u32) -> Option<MemState> {
        if !machine.memory.model {
            return None;
        }
        let topo = machine.select(cores).ok()?;
        Some(MemState {
            spec: machine.memory.clone(),
            ipc_ghz: machine.memory.ipc * machine.freq_ghz,
            core_node: topo.pcpus.iter().map(|p| p.node).collect(),
            core_socket: topo.pcpus.iter().map(|p| p.socket).collect(),
            nodes: machine.nodes(),
            home: Vec::new(),
            thread_socket: Vec::new(),
            inst_sockets: Vec::new(),
            vms: Vec::new(),
            seg: vec![None; cores as usize],
            demand: vec![0.0; machine.nodes() as usize],
            told: vec![1.0; machine.nodes() as usize],
            gb: vec![0.0; machine.nodes() as usize],
            peak: vec![0.0; machine.nodes() as usize],
            since: SimTime::ZERO,
            by_owner: Vec::new(),
            by_core: vec![MemCounters::default(); cores as usize],
            by_inst: Vec::new(),
        })
    }

    /// Adds a VM whose vCPU i starts on core `first_core[i]`.
    pub(crate) fn add_vm(&mut self, view: NumaView, placement: MemoryPlacement, bind: u32, first_core: &[u32]) {
        let vnode: Vec<u32> = first_core.iter().map(|&c| self.core_node[c as usize]).collect();
        self.vms.push(VmMem { view, placement, bind, shares: shares_of(&vnode), vnode, bound: None });
    }

    /// Sizes the per-thread, per-instance and per-owner tables.
    pub(crate) fn size(&mut self, threads: usize, insts: usize, owners: usize) {
        self.home = vec![None; threads];
        self.thread_socket = vec![None; threads];
        self.inst_sockets = vec![vec![0; self.core_socket.iter().max().map_or(1, |&s| s as usize + 1)]; insts];
        self.by_owner = vec![MemCounters::default(); owners];
        self.by_inst = vec![MemCounters::default(); insts];
    }

    /// Where the data of thread `t` lives while it computes on a core of host node `node`
    /// (`guest` = its VM and vCPU, None natively), as shares over nodes summing to 1; `shared`
    /// is the fraction of its memory accesses that go to data shared between threads.
    ///
    /// In a NUMA-hidden guest with `memory = "interleave"` (the default), a thread's
    /// **private** data (the fraction `1 − shared`) lies on the host node of the vCPU the
    /// thread first computed on, and stays there when the guest moves the thread (to another
    /// socket: it is read remotely from then on). Its **shared** data is spread over the VM's
    /// nodes as before. Why, on a Linux 4.15 host (KVM, QEMU anonymous guest memory, default
    /// memory policy):
    /// - a guest page the host has not backed yet is backed when a vCPU first touches it: the
    ///   EPT violation (`handle_ept_violation`, arch/x86/kvm/vmx.c) goes through
    ///   `tdp_page_fault` → `try_async_pf` (arch/x86/kvm/mmu.c) → `__gfn_to_pfn_memslot` →
    ///   `hva_to_pfn` (virt/kvm/kvm_main.c) → `get_user_pages_unlocked` (mm/gup.c), i.e. a host
    ///   page fault on the QEMU mapping, taken by the vCPU thread itself;
    /// - that fault allocates in `do_anonymous_page` (mm/memory.c) with
    ///   `alloc_zeroed_user_highpage_movable` → `alloc_page_vma(…)` =
    ///   `alloc_pages_vma(gfp, 0, vma, addr, numa_node_id(), false)` (include/linux/gfp.h;
    ///   transparent huge pages: `do_huge_pmd_anonymous_page` → `alloc_hugepage_vma`, the same
    ///   call with `hugepage = true`), and `alloc_pages_vma` (mm/mempolicy.c) with no VMA or
    ///   task policy (MPOL_DEFAULT: `get_task_policy` falls back to the local-node preferred
    ///   policy) allocates on `numa_node_id()`: the node of the CPU the vCPU thread runs on;
    /// - a thread's private data is first touched by that thread (the guest zeroes a fresh
    ///   page on the faulting vCPU), so it lands on its vCPU's node. A guest with NUMA hidden
    ///   has one node and never migrates pages toward a thread.
    ///
    /// Assumption: the host's automatic NUMA balancing does not move them afterwards.
    /// `task_numa_work` (kernel/sched/fair.c) does scan the QEMU process, and the guest's
    /// re-access of an unmapped page faults through `get_user_pages` into `do_numa_page`
    /// (mm/memory.c), which can migrate it toward the vCPU thread; but it starts only after
    /// `sysctl_numa_balancing_scan_delay` (1 s) and migrates at a rate limit, and TPDS-F14
    /// measured locality with NUMA hidden far below native, so it is left out. Shared data is
    /// spread over the VM's nodes (first touched by whichever thread came first, or guest
    /// pages the guest recycled), as before this split.
    ///
    /// Natively and with NUMA exposed the kernel is NUMA-aware (all local to the thread's
    /// node or its vCPU's virtual node); `memory = "first_touch"` puts all of a thread's data
    /// (shared too) on its first node, `"bind"` all on one node, and a numad binding
    /// overrides everything.
    fn data_placement(&mut self, t: usize, guest: Option<(u32, u32)>, node: u32, shared: f64) -> Vec<(u32, f64)> {
        let Some((vm, cpu)) = guest else { return vec![(node, 1.0)] };
        let vmm = &self.vms[vm as usize];
        if let Some(b) = &vmm.bound {
            return b.clone();
        }
        if vmm.view == NumaView::Exposed {
            return vec![(vmm.vnode[cpu as usize], 1.0)];
        }
        match vmm.placement {
            MemoryPlacement::Bind => vec![(vmm.bind, 1.0)],
            MemoryPlacement::FirstTouch => vec![(*self.home[t].get_or_insert(node), 1.0)],
            MemoryPlacement::Interleave => {
                let home = *self.home[t].get_or_insert(node);
                split_placement(home, 1.0 - shared, &self.vms[vm as usize].shares)
            }
        }
    }

    /// Records that thread `t` of instance `inst` computes on `socket`; returns the fraction
    /// of the instance's other computing threads last seen on other sockets.
    fn move_to_socket(&mut self, t: usize, inst: usize, socket: u32) -> f64 {
        if self.thread_socket[t] != Some(socket) {
            let counts = &mut self.inst_sockets[inst];
            if let Some(s) = self.thread_socket[t] {
                counts[s as usize] -= 1;
            }
            counts[socket as usize] += 1;
            self.thread_socket[t] = Some(socket);
        }
        let counts = &self.inst_sockets[inst];
        let others: u32 = counts.iter().sum::<u32>() - 1;
        if others == 0 {
            0.0
        } else {
            f64::from(others - (counts[socket as usize] - 1)) / f64::from(others)
        }
    }

    /// Counters of instance `i`.
    pub(crate) fn inst(&self, i: usize) -> Option<MemSummary> {
        self.by_inst.get(i).map(|c| self.summary(c))
    }

    /// Charges the bandwidth integral up to `now`.
    fn integrate(&mut self, now: SimTime) {
        let dt = now.since(self.since) as f64 * 1e-9;
        if dt > 0.0 {
            for (g, d) in self.gb.iter_mut().zip(&self.demand) {
                *g += d * dt;
            }
            self.since = now;
        }
    }

    fn add_demand(&mut self, now: SimTime, demand: &[(u32, f64)], sign: f64) {
        if demand.is_empty() {
            return;
        }
        self.integrate(now);
        for &(n, d) in demand {
            let x = &mut self.demand[n as usize];
            *x = (*x + sign * d).max(0.0);
            self.peak[n as usize] = self.peak[n as usize].max(*x);
        }
    }

    /// The record of a run that ended at `end`: `cpus` names each (v)CPU and gives its
    /// counters; `numad` what the balancer did.
    pub(crate) fn record(&self, end: SimTime, cpus: Vec<(String, u32, MemCounters)>, numad: Option<NumadCounts>) -> MemoryRecord {
        let secs = (end.0 as f64 * 1e-9).max(1e-12);
        let tail = end.since(self.since) as f64 * 1e-9;
        let nodes = (0..self.nodes as usize)
            .filter(|&n| self.core_node.contains(&(n as u32)) || self.gb[n] > 0.0)
            .map(|n| {
                let mean = (self.gb[n] + self.demand[n] * tail) / secs;
                NodeRecord {
                    node: n as u32,
                    cores: self.core_node.iter().filter(|&&c| c == n as u32).count() as u32,
                    mean_gbs: mean,
                    peak_gbs: self.peak[n],
                    utilization: mean / self.spec.node_bandwidth_gbs,
                }
            })
            .collect();
        let total = cpus.iter().fold(MemCounters::default(), |mut a, (_, _, c)| {
            a.work_ns += c.work_ns;
            a.wall_ns += c.wall_ns;
            a.local += c.local;
            a.remote += c.remote;
            a
        });
        MemoryRecord {
            totals: self.summary(&total),
            cpus: cpus.into_iter().map(|(name, node, c)| CpuRecord { cpu: name, node, counters: self.summary(&c) }).collect(),
            nodes,
            numad,
        }
    }

    /// CPI, instructions and access counts of `c`.
    pub(crate) fn summary(&self, c: &MemCounters) -> MemSummary {
        let accesses = c.local + c.remote;
        MemSummary {
            instructions: c.work_ns as f64 * self.ipc_ghz,
            cpi: (c.work_ns > 0).then(|| c.wall_ns as f64 / (c.work_ns as f64 * self.spec.ipc)),
            local_accesses: c.local,
            remote_accesses: c.remote,
            remote_fraction: (accesses > 0.0).then(|| c.remote / accesses),
        }
    }
}

/// CPI and memory accesses of some computation (estimates of the model).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MemSummary {
    /// Instructions retired by computation (native work × clock × `ipc`).
    pub instructions: f64,
    /// Cycles per instruction of that computation (its wall time over its native work /
    /// `ipc`); None without computation.
    pub cpi: Option<f64>,
    /// Memory accesses served by the local node (and same-socket sharing).
    pub local_accesses: f64,
    /// Memory accesses served by another node (and cross-socket sharing).
    pub remote_accesses: f64,
    /// remote / (local + remote); None without accesses.
    pub remote_fraction: Option<f64>,
}

/// One (v)CPU's memory counters.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CpuRecord {
    /// "vm0/vcpu3" in VM runs, "cpu3" natively.
    pub cpu: String,
    /// The host node it ended on.
    pub node: u32,
    /// Its counters.
    #[serde(flatten)]
    pub counters: MemSummary,
}

/// One NUMA node's memory bandwidth.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeRecord {
    /// Node index.
    pub node: u32,
    /// Cores of the run on it.
    pub cores: u32,
    /// Mean demand over the run (GB/s).
    pub mean_gbs: f64,
    /// Highest demand (GB/s).
    pub peak_gbs: f64,
    /// mean / `node_bandwidth_gbs` (above 1: saturated on average).
    pub utilization: f64,
}

/// The memory system's counters of a run (`run.memory`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MemoryRecord {
    /// Over every (v)CPU of the run.
    #[serde(flatten)]
    pub totals: MemSummary,
    /// Per vCPU of every VM (VM runs) or per core (native runs).
    pub cpus: Vec<CpuRecord>,
    /// Per node the run's cores or memory are on.
    pub nodes: Vec<NodeRecord>,
    /// What the numad-like balancer did (`[host.numad]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numad: Option<NumadCounts>,
}

/// How many of `nodes` are on each node, by node.
pub(crate) fn count_nodes(nodes: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &n in nodes {
        match out.iter_mut().find(|(m, _)| *m == n) {
            Some((_, k)) => *k += 1,
            None => out.push((n, 1)),
        }
    }
    out.sort_by_key(|&(n, _)| n);
    out
}

/// Shares over nodes in proportion to how many of `nodes` are on each.
pub(crate) fn shares_of(nodes: &[u32]) -> Vec<(u32, f64)> {
    let total = nodes.len().max(1) as f64;
    count_nodes(nodes).into_iter().map(|(n, k)| (n, f64::from(k) / total)).collect()
}

/// Placement of data of which `private` (0..=1) lies on node `home` and the rest is spread in
/// `shares` (summing to 1): shares by node, in node order, without empty ones.
pub(crate) fn split_placement(home: u32, private: f64, shares: &[(u32, f64)]) -> Vec<(u32, f64)> {
    if private <= 0.0 {
        return shares.to_vec();
    }
    let spread = 1.0 - private;
    let mut out: Vec<(u32, f64)> = shares.iter().map(|&(n, s)| (n, s * spread)).filter(|&(n, s)| s > 0.0 || n == home).collect();
    match out.iter_mut().find(|(n, _)| *n == home) {
        Some((_, s)) => *s += private,
        None => {
            out.push((home, private));
            out.sort_by_key(|&(n, _)| n);
        }
    }
    out
}

impl World<'_> {
    /// Installs the memory segment of the leaf just resolved on `core` (removing the old
    /// one's bandwidth demand): a compute leaf of a thread whose operation touches memory.
    pub(crate) fn mem_install(&mut self, core: u32, thread: Option<ThreadId>, attr: Attr) {
        let Some(mem) = self.mem.as_mut() else { return };
        let old = mem.seg[core as usize].take().map(|o| o.demand).unwrap_or_default();
        mem.add_demand(self.now, &old, -1.0);
        self.mem_new_segment(core, thread, attr);
        // Bandwidth is shared: when this core's demand changed, the segments reading from the
        // same nodes are re-resolved at their new stretch.
        let mem = self.mem.as_mut().expect("memory model");
        let new = mem.seg[core as usize].as_ref().map_or(&[][..], |s| &s.demand[..]);
        if old.as_slice() == new {
            return;
        }
        // Only a node whose saturation moved by more than RETIME since it last re-timed its
        // readers re-times them (an unsaturated node never does: B stays 1).
        let cap = mem.spec.node_bandwidth_gbs;
        let mut changed: Vec<u32> = Vec::new();
        for &(n, _) in old.iter().chain(new) {
            let b = (mem.demand[n as usize] / cap).max(1.0);
            if (b - mem.told[n as usize]).abs() > RETIME * mem.told[n as usize] && !changed.contains(&n) {
                changed.push(n);
            }
        }
        if changed.is_empty() {
            return;
        }
        let mem = self.mem.as_mut().expect("memory model");
        for &n in &changed {
            mem.told[n as usize] = (mem.demand[n as usize] / cap).max(1.0);
        }
        let others: Vec<u32> = (0..mem.seg.len() as u32)
            .filter(|&c| c != core && mem.seg[c as usize].as_ref().is_some_and(|s| s.demand.iter().any(|(n, _)| changed.contains(n))))
            .collect();
        for c in others {
            self.touch(c);
        }
    }

    fn mem_new_segment(&mut self, core: u32, thread: Option<ThreadId>, attr: Attr) {
        let Some(t) = thread else { return };
        if attr.cause != Cause::Compute {
            return;
        }
        let th = &self.threads[t as usize];
        let intensity = f64::from(th.mem);
        if intensity <= 0.0 {
            return;
        }
        let inst = th.inst;
        let task = &self.tasks[th.task as usize];
        let (k, cpu) = (task.kernel, task.cpu);
        let m = &self.insts[inst as usize].wl.memory;
        let (bw_score, numa, sharing_score) = (f64::from(m.bandwidth), f64::from(m.numa), f64::from(m.sharing));
        // The part of its memory accesses that go to data other threads use too (or that the
        // main thread built): all of it when the profile says main builds the data.
        let shared = if m.main_first_touch { 1.0 } else { sharing_score };
        let guest = match self.kernels[k as usize].kind {
            KernelKind::Host => None,
            KernelKind::Guest { vm } => Some((vm, cpu)),
        };
        let mem = self.mem.as_mut().expect("memory model");
        let node = mem.core_node[core as usize];
        let socket = mem.core_socket[core as usize];
        let placement = mem.data_placement(t as usize, guest, node, shared);
        let remote_sharers = mem.move_to_socket(t as usize, inst as usize, socket);
        let bw = bw_score * mem.spec.core_bandwidth_gbs;
        let demand: Vec<(u32, f64)> = if bw > 0.0 { placement.iter().map(|&(n, s)| (n, s * bw)).collect() } else { Vec::new() };
        mem.add_demand(self.now, &demand, 1.0);
        let sharing = sharing_score * mem.spec.sharing_weight;
        let access = Access { intensity, numa, sharing, remote_sharers };
        let s = stretch(&mem.spec, access, node, &placement, &mem.demand);
        // Exactly 1 when nothing is remote or saturated: the native duration, to the ns.
        let factor = if (s.factor - 1.0).abs() < 1e-9 { ONE } else { ((s.factor * ONE as f64).round() as u64).max(1) };
        let inst_owner = attr.owner;
        mem.seg[core as usize] = Some(Segment { factor, intensity, remote: s.remote, demand, owner: inst_owner, inst });
    }

    /// Work done by `elapsed` ns of wall time on `core`'s compute segment (at most `rem`),
    /// with the counters updated; the whole of `elapsed` without a memory segment.
    pub(crate) fn mem_progress(&mut self, core: usize, elapsed: u64, rem: u64) -> u64 {
        let Some(mem) = self.mem.as_mut() else { return elapsed };
        let Some(seg) = &mem.seg[core] else { return elapsed };
        let work =
            if seg.factor == ONE { elapsed } else { (u128::from(elapsed) * u128::from(ONE)).div_ceil(u128::from(seg.factor)) as u64 };
        let work = work.min(rem);
        let accesses = work as f64 * seg.intensity / mem.spec.local_latency_ns;
        let (owner, inst, remote) = (seg.owner as usize, seg.inst as usize, seg.remote);
        mem.by_owner[owner].add(work, elapsed, accesses, remote);
        mem.by_core[core].add(work, elapsed, accesses, remote);
        mem.by_inst[inst].add(work, elapsed, accesses, remote);
        work
    }

    /// Wall time `core`'s compute segment needs for `rem` ns of work.
    pub(crate) fn mem_wall(&self, core: u32, rem: u64) -> u64 {
        match self.mem.as_ref().and_then(|m| m.seg[core as usize].as_ref()) {
            Some(seg) if seg.factor != ONE => (u128::from(rem) * u128::from(seg.factor)).div_ceil(u128::from(ONE)) as u64,
            _ => rem,
        }
    }

    /// The node of core `c` (0 without the memory model).
    pub(crate) fn core_node(&self, c: u32) -> u32 {
        self.mem.as_ref().map_or(0, |m| m.core_node[c as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::machine::MachineSpec;

    /// The TPDS machine's memory system for a VM of `vcpus` vCPUs, vCPU i on core i (32
    /// vCPUs: cores 0-15 on socket 0, 16-31 on socket 1), NUMA hidden, `placement`; sized for
    /// `threads` threads of one instance.
    fn hidden_vm(vcpus: u32, placement: MemoryPlacement, threads: usize) -> MemState {
        let mut mem = MemState::new(&MachineSpec::default(), vcpus).expect("memory model on");
        let cores: Vec<u32> = (0..vcpus).collect();
        mem.add_vm(NumaView::Hidden, placement, 0, &cores);
        mem.size(threads, 1, 1);
        mem
    }

    /// ocean_cp's scores: `memory.sharing` 0.4, `memory.numa` 0.8, stall fraction 0.9.
    const SHARING: f64 = 0.4;

    /// Placement and stretch of thread `t` computing on `core` of VM 0 (its vCPU = the core).
    fn compute(mem: &mut MemState, t: usize, core: u32, shared: f64) -> (Vec<(u32, f64)>, Stretch) {
        let node = mem.core_node[core as usize];
        let socket = mem.core_socket[core as usize];
        let placement = mem.data_placement(t, Some((0, core)), node, shared);
        let remote_sharers = mem.move_to_socket(t, 0, socket);
        let access = Access { intensity: 0.9, numa: 0.8, sharing: SHARING * mem.spec.sharing_weight, remote_sharers };
        let s = stretch(&mem.spec, access, node, &placement, &mem.demand);
        (placement, s)
    }

    use crate::machine::memory::Stretch;

    #[test]
    fn one_thread_in_a_vm_spanning_two_sockets_reads_its_private_data_locally() {
        let mut mem = hidden_vm(32, MemoryPlacement::Interleave, 1);
        let s_line = SHARING * mem.spec.sharing_weight;
        // On a vCPU of socket 1: its private data is on node 1, its shared data on both nodes.
        let (p, s) = compute(&mut mem, 0, 20, SHARING);
        assert_eq!(p.len(), 2);
        assert!((p[1].1 - (1.0 - SHARING + SHARING / 2.0)).abs() < 1e-12, "{p:?}");
        // Remote accesses only from the shared part: half of it interleaved on node 0; no
        // other thread writes lines, so no cross-socket transfers.
        assert!((s.remote - (1.0 - s_line) * SHARING / 2.0).abs() < 1e-12, "remote {}", s.remote);
        // With no shared data at all nothing is remote and the computation runs at native speed.
        let mut only_private = hidden_vm(32, MemoryPlacement::Interleave, 1);
        let (p, s) = compute(&mut only_private, 0, 20, 0.0);
        assert_eq!(p, vec![(1, 1.0)]);
        assert_eq!(s.remote, 0.0);
        assert!((s.factor - 1.0).abs() < 1e-12);
        // Before the split (all of it spread, as for data main built) half of it was remote.
        let mut main_built = hidden_vm(32, MemoryPlacement::Interleave, 1);
        let (p, s) = compute(&mut main_built, 0, 20, 1.0);
        assert_eq!(p, vec![(0, 0.5), (1, 0.5)]);
        assert!((s.remote - (1.0 - s_line) * 0.5).abs() < 1e-12);
    }

    #[test]
    fn sixteen_threads_over_two_sockets_read_their_shared_data_remotely() {
        let mut mem = hidden_vm(32, MemoryPlacement::Interleave, 16);
        let s_line = SHARING * mem.spec.sharing_weight;
        // Threads 0-7 on socket 0 (cores 0-7), 8-15 on socket 1 (cores 16-23).
        let core = |t: usize| if t < 8 { t as u32 } else { 8 + t as u32 };
        for t in 0..16 {
            compute(&mut mem, t, core(t), SHARING);
        }
        for t in 0..16 {
            let (p, s) = compute(&mut mem, t, core(t), SHARING);
            let home = mem.core_node[core(t) as usize];
            let local = p.iter().find(|&&(n, _)| n == home).map_or(0.0, |&(_, x)| x);
            assert!((local - (1.0 - SHARING / 2.0)).abs() < 1e-12, "thread {t}: {p:?}");
            // Half the shared data is on the other node, and 8 of the 15 other threads
            // write lines from the other socket.
            let want = (1.0 - s_line) * SHARING / 2.0 + s_line * 8.0 / 15.0;
            assert!((s.remote - want).abs() < 1e-12, "thread {t}: remote {} want {want}", s.remote);
            assert!(s.remote > 0.0 && s.factor > 1.0);
        }
    }

    #[test]
    fn a_thread_moved_to_another_socket_reads_its_private_data_remotely() {
        let mut mem = hidden_vm(32, MemoryPlacement::Interleave, 1);
        let s_line = SHARING * mem.spec.sharing_weight;
        let (_, before) = compute(&mut mem, 0, 3, SHARING);
        // The guest moves it to a vCPU on socket 1: its private data stays on node 0.
        let (p, after) = compute(&mut mem, 0, 18, SHARING);
        assert_eq!(p.iter().find(|&&(n, _)| n == 0).map(|&(_, x)| x), Some(1.0 - SHARING / 2.0));
        assert!((before.remote - (1.0 - s_line) * SHARING / 2.0).abs() < 1e-12);
        assert!((after.remote - (1.0 - s_line) * (1.0 - SHARING / 2.0)).abs() < 1e-12, "remote {}", after.remote);
        assert!(after.factor > before.factor);
        // Back on socket 0 it is local again.
        let (_, back) = compute(&mut mem, 0, 5, SHARING);
        assert_eq!(back.remote, before.remote);
    }

    #[test]
    fn native_exposed_bind_and_numad_placements_are_unchanged() {
        let mut mem = hidden_vm(32, MemoryPlacement::Interleave, 2);
        // Natively: all on the node it runs on.
        assert_eq!(mem.data_placement(0, None, 1, SHARING), vec![(1, 1.0)]);
        // A numad binding overrides first touch.
        mem.vms[0].bound = Some(vec![(1, 1.0)]);
        assert_eq!(mem.data_placement(1, Some((0, 3)), 0, SHARING), vec![(1, 1.0)]);
        let mut bind = hidden_vm(32, MemoryPlacement::Bind, 1);
        assert_eq!(bind.data_placement(0, Some((0, 3)), 0, SHARING), vec![(0, 1.0)]);
        let mut whole = hidden_vm(32, MemoryPlacement::FirstTouch, 1);
        assert_eq!(whole.data_placement(0, Some((0, 20)), 1, SHARING), vec![(1, 1.0)]);
        assert_eq!(whole.data_placement(0, Some((0, 2)), 0, SHARING), vec![(1, 1.0)]);
        let mut exposed = hidden_vm(32, MemoryPlacement::Interleave, 1);
        exposed.vms[0].view = NumaView::Exposed;
        assert_eq!(exposed.data_placement(0, Some((0, 20)), 1, SHARING), vec![(1, 1.0)]);
    }

    #[test]
    fn split_placement_merges_by_node() {
        let shares = [(0, 0.5), (1, 0.5)];
        assert_eq!(split_placement(1, 0.0, &shares), shares.to_vec());
        assert_eq!(split_placement(1, 1.0, &shares), vec![(1, 1.0)]);
        assert_eq!(split_placement(0, 0.5, &shares), vec![(0, 0.75), (1, 0.25)]);
        assert_eq!(split_placement(2, 0.5, &shares), vec![(0, 0.25), (1, 0.25), (2, 0.5)]);
    }

    #[test]
    fn spread_is_proportional() {
        assert_eq!(shares_of(&[0, 0, 1, 1]), vec![(0, 0.5), (1, 0.5)]);
        assert_eq!(shares_of(&[2, 0, 0, 0]), vec![(0, 0.75), (2, 0.25)]);
    }
}
