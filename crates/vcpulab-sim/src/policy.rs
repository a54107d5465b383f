//! Pluggable policies: the decisions the research varies, each behind a trait, with KVM's
//! behaviour as one implementation among others.
//!
//! | kind | trait | implementations |
//! |---|---|---|
//! | `ple_window` | [`PleWindowPolicy`] | `kvm` ([`kvm_ple::KvmWindow`]), `fixed` ([`kvm_ple::FixedWindow`]), `aple` ([`aple::Aple`]) |
//! | `ple_yield` | [`YieldPolicy`] | `kvm` ([`kvm_yield::KvmOnSpin`]), `none` ([`kvm_yield::NoYield`]), `hvs` and its ablations ([`hvs::Hvs`]) |
//! | `tlb` | — (mechanism switch) | `ipi`, `pv`, `shoot4u` (see [`crate::kernel::tlb`]) |
//!
//! A VM gets one policy object of each trait ([`VmPolicies`]); the object keeps whatever
//! per-vCPU state it needs. [`REGISTRY`] names every implementation for the CLI
//! (`vcpulab policies`) and for spec validation.

pub mod aple;
pub mod asymmetric;
pub mod hvs;
pub mod kvm_ple;
pub mod kvm_yield;
pub mod numad;

use crate::engine::SimTime;
use crate::spec::VmSpec;

/// One registered policy.
#[derive(Clone, Copy, Debug)]
pub struct PolicyInfo {
    /// What it decides (`ple_window`, `ple_yield`, `tlb`).
    pub kind: &'static str,
    /// Its name in specs.
    pub name: &'static str,
    /// The spec field that selects it.
    pub field: &'static str,
    /// One line on what it does and where it comes from.
    pub description: &'static str,
}

/// Every policy implementation, by kind.
pub static REGISTRY: &[PolicyInfo] = &[
    PolicyInfo {
        kind: "ple_window",
        name: "kvm",
        field: "vm.ple.window_policy",
        description: "KVM's per-vCPU window: grow (x2) on every PLE exit, reset to the base when the vCPU is scheduled in (vmx.c grow/shrink_ple_window)",
    },
    PolicyInfo { kind: "ple_window", name: "fixed", field: "vm.ple.window_policy", description: "a constant window of vm.ple.window_cycles (the DIS fixed-threshold sweep)" },
    PolicyInfo {
        kind: "ple_window",
        name: "aple",
        field: "vm.ple.window_policy",
        description: "APLE (APPLES, DIS ch.3): one threshold per VM, epochs of vm.ple.aple.epoch_exits PLE exits, three-epoch probe T, T+delta, T-delta, keep the least inefficient",
    },
    PolicyInfo {
        kind: "ple_yield",
        name: "kvm",
        field: "vm.ple.yield_policy",
        description: "kvm_vcpu_on_spin: round robin after the last boosted vCPU over the candidates of the kernel generation vm.ple.yield_candidates names (v5.13: ready, in-kernel or IPI-pending vCPUs), dy_eligible toggling, up to 3 -ESRCH",
    },
    PolicyInfo { kind: "ple_yield", name: "none", field: "vm.ple.yield_policy", description: "no directed yield: the PLE exit only costs the exit, the vCPU re-enters" },
    PolicyInfo {
        kind: "ple_yield",
        name: "hvs",
        field: "vm.ple.yield_policy",
        description: "HVS (APPLES, DIS ch.3): resource waiters (newest preempted first), then lock waiters (oldest first), then the yielded list",
    },
    PolicyInfo { kind: "ple_yield", name: "hvs_causality", field: "vm.ple.yield_policy", description: "HVS ablation: causality only (resource waiters before lock waiters, ring order within each)" },
    PolicyInfo {
        kind: "ple_yield",
        name: "hvs_preemption_time",
        field: "vm.ple.yield_policy",
        description: "HVS ablation: preemption time only (one list, most recently preempted first)",
    },
    PolicyInfo { kind: "ple_yield", name: "hvs_reversed", field: "vm.ple.yield_policy", description: "HVS ablation: reversed causality (lock waiters before resource waiters)" },
    PolicyInfo { kind: "tlb", name: "ipi", field: "vm.tlb", description: "native shootdown: call-function IPIs to every target, busy-wait for all acknowledgements" },
    PolicyInfo { kind: "tlb", name: "pv", field: "vm.tlb", description: "PV TLB flush (Linux >= 4.16, 'kvmtlb'): preempted targets get a flush-on-entry flag instead of an IPI" },
    PolicyInfo { kind: "tlb", name: "shoot4u", field: "vm.tlb", description: "Shoot4U (VEE'16): one hypercall, the hypervisor invalidates every target's TLB and returns" },
];

/// Why the host switched a vCPU thread out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedOut {
    /// Involuntarily, still runnable (slice end, wake-up preemption).
    Preempted,
    /// After a successful directed yield from a PLE exit.
    Yielded,
    /// Blocked after HLT.
    Halted,
}

/// The spinning cost of one VM so far, as APLE measures it (DIS ch.3); all
/// cumulative since the VM started. The simulator keeps it for every VM, whatever its policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpinCost {
    /// PLE exits.
    pub ple_exits: u64,
    /// Wasteful spinning: the window (ns) in force at each PLE exit, summed.
    pub wasted_spin_ns: u64,
    /// Wasteful vCPU switches: from each PLE exit to the next guest entry on that core (ns).
    pub switch_ns: u64,
    /// CPU time the VM's vCPU threads received (ns).
    pub cpu_ns: u64,
}

impl SpinCost {
    /// (wasted spin + switch time) / CPU time over the interval from `earlier` to `self`;
    /// 0 when the VM received no CPU time.
    pub fn inefficiency_since(&self, earlier: &SpinCost) -> f64 {
        let cpu = self.cpu_ns.saturating_sub(earlier.cpu_ns);
        if cpu == 0 {
            return 0.0;
        }
        let waste = (self.wasted_spin_ns - earlier.wasted_spin_ns) + (self.switch_ns - earlier.switch_ns);
        waste as f64 / cpu as f64
    }
}

/// One epoch of an adaptive window policy: its start, end, threshold and inefficiency.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct WindowEpoch {
    /// When the epoch started (ns).
    pub start_ns: u64,
    /// When it ended: at its last PLE exit (ns).
    pub end_ns: u64,
    /// The threshold in force (cycles).
    pub threshold: u64,
    /// (wasted spin + switch time) / CPU time of the VM in the epoch.
    pub inefficiency: f64,
}

/// Decides the PLE window of each vCPU of one VM.
pub trait PleWindowPolicy: std::fmt::Debug + Send {
    /// The current window of vCPU `vcpu`, in TSC cycles.
    fn window(&self, vcpu: u32) -> u64;
    /// vCPU `vcpu` took a PLE exit at `now`; `cost` is its VM's spinning cost so far, this exit
    /// included (its switch time is not known yet). Returns true if its window changed.
    fn on_ple_exit(&mut self, vcpu: u32, now: SimTime, cost: &SpinCost) -> bool;
    /// vCPU `vcpu` is loaded again after having been scheduled out. Returns true if its
    /// window changed.
    fn on_sched_in(&mut self, vcpu: u32, now: SimTime) -> bool;
    /// Whether [`PleWindowPolicy::on_ple_exit`] reads `cost` (computing it costs a pass over
    /// the VM's vCPUs).
    fn wants_cost(&self) -> bool {
        false
    }
    /// The completed epochs of an epoch-based policy (empty otherwise).
    fn epochs(&self) -> &[WindowEpoch] {
        &[]
    }
}

/// What the host knows about one vCPU when choosing a directed-yield candidate
/// (`kvm_vcpu_on_spin`'s inputs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Candidate {
    /// `vcpu->ready`: scheduled out while runnable, or woken and not yet running.
    pub ready: bool,
    /// `vcpu->preempted`: scheduled out while runnable.
    pub preempted: bool,
    /// Blocked (or just woken) after HLT (`kvm_vcpu_is_blocking`).
    pub blocking: bool,
    /// An interrupt is pending for it (`vcpu_dy_runnable` / `kvm_arch_dy_has_pending_interrupt`).
    pub pending_irq: bool,
    /// It was in guest kernel mode (CPL 0) when preempted.
    pub preempted_in_kernel: bool,
}

/// The result of `yield_to()` (Linux kernel/sched/core.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YieldTo {
    /// > 0: the target was boosted and the caller gave up its CPU.
    Yielded,
    /// 0: not possible (target running, not runnable, ...).
    Failed,
    /// -ESRCH: both run queues have a single task.
    Esrch,
}

/// `kvm_vcpu_on_spin`'s attempts: tries `candidates` in order with `try_yield` until one is
/// boosted or three return -ESRCH; returns the boosted vCPU. `candidates` is consumed lazily,
/// so a scan's per-candidate checks run only for the vCPUs reached.
pub fn yield_to_first(candidates: impl IntoIterator<Item = u32>, try_yield: &mut dyn FnMut(u32) -> YieldTo) -> Option<u32> {
    let mut esrch_left = 3;
    for i in candidates {
        match try_yield(i) {
            YieldTo::Yielded => return Some(i),
            YieldTo::Esrch => {
                esrch_left -= 1;
                if esrch_left == 0 {
                    return None;
                }
            }
            YieldTo::Failed => {}
        }
    }
    None
}

/// Chooses the vCPU to yield to on a PLE exit.
pub trait YieldPolicy: std::fmt::Debug + Send {
    /// vCPU `me` took a PLE exit; `cands[i]` describes vCPU i. Calls `try_yield(i)` for the
    /// candidates it picks, in order, and stops when it is done. Returns how many vCPUs it
    /// examined (the scan cost).
    fn on_spin(&mut self, me: u32, cands: &[Candidate], try_yield: &mut dyn FnMut(u32) -> YieldTo) -> u32;
    /// vCPU `me`'s `kvm_vcpu_on_spin` returned: it is back in the guest after a PLE exit, or
    /// its thread, switched out by its yield, has been switched back in.
    fn spin_done(&mut self, me: u32);
    /// The host switched vCPU `vcpu` out.
    fn on_sched_out(&mut self, _vcpu: u32, _why: SchedOut, _now: SimTime) {}
    /// The host switched vCPU `vcpu` in.
    fn on_sched_in(&mut self, _vcpu: u32, _now: SimTime) {}
}

/// The policy objects of one VM.
#[derive(Debug)]
pub struct VmPolicies {
    /// PLE window.
    pub window: Box<dyn PleWindowPolicy>,
    /// Directed-yield candidate selection.
    pub yielder: Box<dyn YieldPolicy>,
}

impl VmPolicies {
    /// Instantiates the policies `spec` names (validated) for a VM of `nvcpus` vCPUs.
    pub fn new(spec: &VmSpec, nvcpus: u32) -> VmPolicies {
        let p = &spec.ple;
        let window: Box<dyn PleWindowPolicy> = match p.window_policy.as_str() {
            "fixed" => Box::new(kvm_ple::FixedWindow::new(p.window_cycles)),
            "aple" => Box::new(aple::Aple::new(&p.aple)),
            _ => Box::new(kvm_ple::KvmWindow::new(nvcpus, p.window_cycles, p.grow, p.shrink, p.max_cycles)),
        };
        let yielder: Box<dyn YieldPolicy> = match p.yield_policy.as_str() {
            "none" => Box::new(kvm_yield::NoYield),
            "hvs" => Box::new(hvs::Hvs::new(nvcpus, hvs::Order::Full)),
            "hvs_causality" => Box::new(hvs::Hvs::new(nvcpus, hvs::Order::CausalityOnly)),
            "hvs_preemption_time" => Box::new(hvs::Hvs::new(nvcpus, hvs::Order::PreemptionTimeOnly)),
            "hvs_reversed" => Box::new(hvs::Hvs::new(nvcpus, hvs::Order::ReversedCausality)),
            _ => Box::new(kvm_yield::KvmOnSpin::new(nvcpus, p.yield_candidates)),
        };
        VmPolicies { window, yielder }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_default_is_registered() {
        let s = VmSpec::default();
        assert!(s.check().is_ok());
        for e in REGISTRY {
            assert!(!e.description.is_empty());
        }
    }
}
