//! A numad-like NUMA balancer (TPDS §7.2; numad(8)): a host daemon that, every interval,
//! measures each VM's CPU use and, when the VM would fit in fewer NUMA nodes than it spans,
//! binds it to the nodes that hold most of its vCPUs: the vCPUs are re-pinned onto those
//! nodes' cores and the memory is migrated there, costing host CPU time. It sizes by CPU use
//! (at a target utilization of each node) and never considers memory bandwidth, so it packs
//! a bandwidth-bound VM onto fewer memory controllers, as TPDS reports for ocean_cp.
//!
//! numad sees the run's cores as the CPUs it may give VMs (as a cpuset would): a node's
//! capacity is its cores in the run × the target utilization. A VM whose measured use fits
//! fewer nodes than it spans is bound to them, even if that puts two vCPUs on a core: numad
//! packs by measured use, and a VM that uses half its vCPUs' time fits in half the cores.
//! Simplification: a VM is bound at most once (numad re-evaluates, but a bound VM rarely
//! moves again within a benchmark run).

use serde::Serialize;

use crate::account::{Attr, Cause, Layer};
use crate::engine::SimTime;
use crate::spec::kernel::NumadSpec;
use crate::spec::vm::{MemoryPlacement, NumaView};
use crate::world::{Ev, World};

/// What the balancer did in a run.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct NumadCounts {
    /// Scans.
    pub scans: u64,
    /// VMs bound to fewer nodes.
    pub moves: u64,
    /// vCPUs re-pinned.
    pub vcpus_moved: u64,
    /// Memory migrated (MiB).
    pub migrated_mib: f64,
    /// Host CPU time spent migrating (ns).
    pub host_ns: u64,
}

/// The balancer's state.
#[derive(Clone, Debug)]
pub struct Numad {
    spec: NumadSpec,
    /// Each VM's vCPU run time at the last scan, and whether it is bound.
    last_busy: Vec<u64>,
    bound: Vec<bool>,
    /// Its decisions.
    pub counts: NumadCounts,
}

impl Numad {
    /// A balancer over `vms` VMs.
    pub fn new(spec: NumadSpec, vms: usize) -> Numad {
        Numad { spec, last_busy: vec![0; vms], bound: vec![false; vms], counts: NumadCounts::default() }
    }

    /// The scan interval (ns).
    pub fn interval(&self) -> u64 {
        self.spec.interval.0
    }
}

/// The nodes to bind a VM to, or None to leave it. `cores_used` is its measured CPU use (in
/// cores), `vcpu_nodes` the node each vCPU is on, `node_cores` the run's cores per node. Nodes
/// are taken in order of most vCPUs of the VM (lowest index on ties), then the other nodes,
/// until their cores at `target` utilization hold `cores_used`; if that takes fewer nodes
/// than the VM spans, it is bound to them.
pub fn plan(node_cores: &[(u32, u32)], target: f64, cores_used: f64, vcpu_nodes: &[u32]) -> Option<Vec<u32>> {
    let count = |n: u32| vcpu_nodes.iter().filter(|&&m| m == n).count();
    let mut order: Vec<(u32, u32)> = node_cores.to_vec();
    order.sort_by(|a, b| count(b.0).cmp(&count(a.0)).then(a.0.cmp(&b.0)));
    let span = order.iter().filter(|&&(n, _)| count(n) > 0).count();
    let mut capacity = 0.0;
    let mut nodes = Vec::new();
    for (n, cores) in order {
        if capacity >= cores_used && !nodes.is_empty() {
            break;
        }
        capacity += f64::from(cores) * target;
        nodes.push(n);
    }
    if nodes.len() >= span {
        return None;
    }
    nodes.sort_unstable();
    Some(nodes)
}

impl World<'_> {
    /// Arms the first scan.
    pub(crate) fn start_numad(&mut self) {
        if let Some(n) = &self.numad {
            let at = SimTime(n.interval());
            self.q.schedule(at, Ev::Numad);
        }
    }

    /// One scan of the balancer over every running VM.
    pub(crate) fn numad_scan(&mut self) {
        let Some(mut nd) = self.numad.take() else { return };
        nd.counts.scans += 1;
        let node_cores = self.mem.as_ref().map(|m| crate::world::memory::count_nodes(&m.core_node)).unwrap_or_default();
        for vm in 0..self.vms.len() {
            let finished = self.insts.iter().any(|i| i.vm == Some(vm as u32) && i.finish.is_some());
            if nd.bound[vm] || finished {
                continue;
            }
            let vcpus = self.vms[vm].vcpus.clone();
            let busy: u64 = vcpus.iter().map(|&v| self.run_time_now(self.vcpus[v as usize].task)).sum();
            let used = busy.saturating_sub(nd.last_busy[vm]) as f64 / nd.interval() as f64;
            nd.last_busy[vm] = busy;
            let place = |w: &World, v: u32| {
                let task = &w.tasks[w.vcpus[v as usize].task as usize];
                task.pinned.unwrap_or(task.cpu)
            };
            let nodes: Vec<u32> = vcpus.iter().map(|&v| self.core_node(place(self, v))).collect();
            let Some(targets) = plan(&node_cores, nd.spec.target_utilization, used, &nodes) else { continue };
            let cores: Vec<u32> = (0..self.cores.len() as u32).filter(|&c| targets.contains(&self.core_node(c))).collect();
            // Memory not yet on the chosen nodes moves there.
            let Some(mem) = self.mem.as_ref() else { continue };
            let vmm = &mem.vms[vm];
            let now_on: Vec<(u32, f64)> = match (&vmm.bound, vmm.view, vmm.placement()) {
                (Some(b), _, _) => b.clone(),
                (None, NumaView::Exposed, _) | (None, NumaView::Hidden, MemoryPlacement::FirstTouch) => {
                    crate::world::memory::shares_of(&vmm.vnode)
                }
                (None, NumaView::Hidden, MemoryPlacement::Interleave) => vmm.shares.clone(),
                (None, NumaView::Hidden, MemoryPlacement::Bind) => vec![(vmm.bind_node(), 1.0)],
            };
            let moved: f64 = now_on.iter().filter(|(n, _)| !targets.contains(n)).map(|(_, s)| s).sum();
            let inst = self.insts.iter().position(|i| i.vm == Some(vm as u32)).expect("a VM runs an instance");
            let mib = moved * self.insts[inst].wl.memory.footprint as f64 / f64::from(1u32 << 20);
            let cost = (mib * nd.spec.migrate_cost.0 as f64).round() as u64;
            let new_cores: Vec<u32> = (0..vcpus.len()).map(|i| cores[i % cores.len()]).collect();
            for (i, &v) in vcpus.iter().enumerate() {
                if place(self, v) != new_cores[i] {
                    nd.counts.vcpus_moved += 1;
                }
                self.set_affinity(self.vcpus[v as usize].task, new_cores[i]);
            }
            let owner = self.vcpus[vcpus[0] as usize].owner;
            self.push_work(crate::kernel::HOST, new_cores[0], Attr { owner, layer: Layer::Host, cause: Cause::NumaMigrate }, cost);
            let new_nodes: Vec<u32> = new_cores.iter().map(|&c| self.core_node(c)).collect();
            let mem = self.mem.as_mut().expect("memory model");
            mem.vms[vm].bound = Some(crate::world::memory::shares_of(&new_nodes));
            mem.vms[vm].vnode = new_nodes;
            nd.bound[vm] = true;
            nd.counts.moves += 1;
            nd.counts.migrated_mib += mib;
            nd.counts.host_ns += cost;
        }
        let at = self.now + nd.interval();
        self.numad = Some(nd);
        if self.live > 0 {
            self.q.schedule(at, Ev::Numad);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_using_less_than_a_node_is_bound_to_its_biggest_node() {
        // 32 vCPUs over two 16-core nodes of the run, using 12 cores at 85 %: one node.
        let nodes: Vec<u32> = (0..32).map(|i| i % 2).collect();
        let cores = [(0, 16), (1, 16)];
        assert_eq!(plan(&cores, 0.85, 12.0, &nodes), Some(vec![0]));
        // Using 20 cores needs both: left alone.
        assert_eq!(plan(&cores, 0.85, 20.0, &nodes), None);
        // Already on one node: nothing to do.
        assert_eq!(plan(&[(3, 20)], 0.85, 1.0, &[3, 3, 3]), None);
    }

    #[test]
    fn nodes_with_most_vcpus_come_first() {
        let cores = [(0, 4), (1, 4), (2, 4), (3, 4)];
        assert_eq!(plan(&cores, 0.85, 3.0, &[2, 2, 1, 1, 3]), Some(vec![1]));
        assert_eq!(plan(&cores, 0.85, 3.0, &[2, 2, 2, 1, 1, 3]), Some(vec![2]));
        assert_eq!(plan(&cores, 0.85, 6.0, &[0, 1, 2, 3, 3]), Some(vec![0, 3]));
        // A fully used spread VM stays.
        assert_eq!(plan(&cores, 0.85, 16.0, &[0, 1, 2, 3, 0, 1, 2, 3]), None);
    }
}
