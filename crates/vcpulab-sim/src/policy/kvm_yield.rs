//! Directed yield on a PLE exit: KVM's `kvm_vcpu_on_spin` (linux: virt/kvm/kvm_main.c, the
//! single-loop version with the Nov 2025 index fix; Linux virt/kvm/kvm_main.c) and a no-yield baseline.
//!
//! The scan is the same in every kernel the presets describe (round robin from the vCPU after
//! `last_boosted_vcpu`, every-other-time eligibility of spinning vCPUs, three `-ESRCH` at most);
//! which vCPUs count as candidates changed between kernel generations ([`Generation`]).

use serde::{Deserialize, Serialize};

use super::{yield_to_first, Candidate, YieldPolicy, YieldTo};

/// The candidate filter of `kvm_vcpu_on_spin` in a kernel generation (`vm.ple.yield_candidates`).
/// Each generation is named after the release that introduced its rule; VMX PLE exits always
/// pass `yield_to_kernel_mode = true` where the argument exists.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum Generation {
    /// Linux 3.10 to 4.13: every **preempted** vCPU (scheduled out while runnable, in user or
    /// kernel mode), none that is blocked or running. `vcpu->preempted` is set by the preempt
    /// notifier (commits "kvm: Record the preemption status of vcpus using preempt notifiers" and
    /// "kvm: Iterate over only vcpus that are preempted", Linux 3.10); a halted vCPU blocks
    /// voluntarily and is never `preempted`. DIS's 3.19.8 and S4U's 3.16.
    #[serde(rename = "v3.10")]
    V3_10,
    /// Linux 4.14 to 5.2: preempted vCPUs that were in **guest kernel mode** when preempted
    /// (`yield_to_kernel_mode && !kvm_arch_vcpu_in_kernel(vcpu)` → skip; commit 199b5763d329
    /// "KVM: add spinlock optimization framework", Linux 4.14; `kvm_arch_vcpu_in_kernel` is the
    /// CPL-0 flag saved at sched-out, `preempted_in_kernel`). A preempted vCPU running user code,
    /// the usual TLB-shootdown target, is no candidate even with the shootdown's IPI pending.
    /// TPDS's 4.15 and 4.19.
    #[serde(rename = "v4.14")]
    V4_14,
    /// Linux 5.3 to 5.12: also vCPUs being woken from a halt (`vcpu->ready`, set by
    /// `kvm_vcpu_wake_up`; commit d73eb57b80b9 "KVM: Boost vCPUs that are delivering
    /// interrupts", Linux 5.3); the kernel-mode filter applies to preempted vCPUs only.
    #[serde(rename = "v5.3")]
    V5_3,
    /// Linux 5.13 on: also preempted user-mode vCPUs with an interrupt pending
    /// (`kvm_arch_dy_has_pending_interrupt`; commit 52acd22faa1a "KVM: Boost vCPU candidate in
    /// user mode which is delivering interrupt", Linux 5.13): a preempted TLB-shootdown target
    /// is boosted. The built-in default.
    #[default]
    #[serde(rename = "v5.13")]
    V5_13,
}

impl Generation {
    /// Whether `kvm_vcpu_on_spin` of this generation would try to yield to `c`.
    pub fn is_candidate(self, c: &Candidate) -> bool {
        match self {
            Generation::V3_10 => c.preempted,
            Generation::V4_14 => c.preempted && c.preempted_in_kernel,
            Generation::V5_3 => c.ready && (!c.blocking || c.pending_irq) && (!c.preempted || c.preempted_in_kernel),
            Generation::V5_13 => c.ready && (!c.blocking || c.pending_irq) && (!c.preempted || c.pending_irq || c.preempted_in_kernel),
        }
    }
}

/// `kvm_vcpu_on_spin` with KVM's per-VM `last_boosted_vcpu` and per-vCPU `in_spin_loop` /
/// `dy_eligible` state.
#[derive(Debug, Clone)]
pub struct KvmOnSpin {
    last_boosted: u32,
    in_spin_loop: Vec<bool>,
    dy_eligible: Vec<bool>,
    generation: Generation,
}

impl KvmOnSpin {
    /// State for a VM of `nvcpus` vCPUs (`last_boosted_vcpu` starts at 0), with the candidate
    /// filter of kernel `generation`.
    pub fn new(nvcpus: u32, generation: Generation) -> Self {
        KvmOnSpin { last_boosted: 0, in_spin_loop: vec![false; nvcpus as usize], dy_eligible: vec![false; nvcpus as usize], generation }
    }

    /// `kvm_vcpu_eligible_for_directed_yield`: a vCPU that is itself in a spin loop is
    /// eligible every other time it is examined.
    fn eligible(&mut self, v: usize) -> bool {
        let eligible = !self.in_spin_loop[v] || self.dy_eligible[v];
        if self.in_spin_loop[v] {
            self.dy_eligible[v] = !self.dy_eligible[v];
        }
        eligible
    }

    /// The vCPU index boosted last.
    pub fn last_boosted(&self) -> u32 {
        self.last_boosted
    }
}

impl YieldPolicy for KvmOnSpin {
    fn on_spin(&mut self, me: u32, cands: &[Candidate], try_yield: &mut dyn FnMut(u32) -> YieldTo) -> u32 {
        let n = cands.len() as u32;
        if n < 2 {
            return 0;
        }
        self.in_spin_loop[me as usize] = true;
        let start = self.last_boosted + 1;
        let mut examined = 0;
        let scan = (0..n).map(|i| (start + i) % n).filter(|&idx| idx != me).filter(|&idx| {
            examined += 1;
            self.generation.is_candidate(&cands[idx as usize]) && self.eligible(idx as usize)
        });
        if let Some(idx) = yield_to_first(scan, try_yield) {
            self.last_boosted = idx;
        }
        examined
    }

    fn spin_done(&mut self, me: u32) {
        self.in_spin_loop[me as usize] = false;
        self.dy_eligible[me as usize] = false;
    }
}

/// No directed yield.
#[derive(Debug, Clone, Copy)]
pub struct NoYield;

impl YieldPolicy for NoYield {
    fn on_spin(&mut self, _me: u32, _cands: &[Candidate], _try_yield: &mut dyn FnMut(u32) -> YieldTo) -> u32 {
        0
    }
    fn spin_done(&mut self, _me: u32) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preempted_in_kernel() -> Candidate {
        Candidate { ready: true, preempted: true, preempted_in_kernel: true, ..Default::default() }
    }

    #[test]
    fn skips_running_vcpus_and_starts_after_last_boosted() {
        let mut p = KvmOnSpin::new(4, Generation::V5_13);
        // vCPU 1 runs (not ready), 2 and 3 are preempted in kernel mode.
        let cands = [Candidate::default(), Candidate::default(), preempted_in_kernel(), preempted_in_kernel()];
        let mut tried = Vec::new();
        p.on_spin(0, &cands, &mut |i| {
            tried.push(i);
            YieldTo::Yielded
        });
        assert_eq!(tried, vec![2], "vCPU 1 is running: skipped");
        assert_eq!(p.last_boosted(), 2);
        p.spin_done(0);
        let mut tried = Vec::new();
        p.on_spin(0, &cands, &mut |i| {
            tried.push(i);
            YieldTo::Yielded
        });
        assert_eq!(tried, vec![3], "round robin continues after the last boosted vCPU");
    }

    #[test]
    fn user_mode_preempted_vcpus_are_skipped_unless_an_irq_is_pending() {
        let mut p = KvmOnSpin::new(3, Generation::V5_13);
        let user = Candidate { ready: true, preempted: true, ..Default::default() };
        let user_irq = Candidate { pending_irq: true, ..user };
        let mut tried = Vec::new();
        p.on_spin(0, &[Candidate::default(), user, user_irq], &mut |i| {
            tried.push(i);
            YieldTo::Failed
        });
        assert_eq!(tried, vec![2]);
    }

    /// A TLB-shootdown target preempted in user mode with the call-function IPI pending, a
    /// vCPU preempted inside the guest kernel, a halted vCPU being woken, one blocked for good.
    fn kinds() -> [Candidate; 4] {
        let user_irq = Candidate { ready: true, preempted: true, pending_irq: true, ..Default::default() };
        let waking = Candidate { ready: true, blocking: true, pending_irq: true, ..Default::default() };
        let halted = Candidate { blocking: true, ..Default::default() };
        [user_irq, preempted_in_kernel(), waking, halted]
    }

    #[test]
    fn each_generation_has_its_candidates() {
        let want: [(Generation, [bool; 4]); 4] = [
            (Generation::V3_10, [true, true, false, false]),
            (Generation::V4_14, [false, true, false, false]),
            (Generation::V5_3, [false, true, true, false]),
            (Generation::V5_13, [true, true, true, false]),
        ];
        for (g, expected) in want {
            let got = kinds().map(|c| g.is_candidate(&c));
            assert_eq!(got, expected, "{g:?}");
        }
    }

    #[test]
    fn before_5_13_a_user_mode_shootdown_target_is_not_boosted() {
        // vCPU 0 spins in a TLB shootdown; vCPU 1, its target, was preempted in user mode with
        // the IPI pending; vCPU 2 is preempted in user mode with nothing pending.
        let user_irq = kinds()[0];
        let user = Candidate { pending_irq: false, ..user_irq };
        let cands = [Candidate::default(), user_irq, user];
        for (g, expected) in [(Generation::V3_10, vec![1, 2]), (Generation::V4_14, vec![]), (Generation::V5_13, vec![1])] {
            let mut p = KvmOnSpin::new(3, g);
            let mut tried = Vec::new();
            p.on_spin(0, &cands, &mut |i| {
                tried.push(i);
                YieldTo::Failed
            });
            assert_eq!(tried, expected, "{g:?}");
        }
    }

    #[test]
    fn spinning_candidates_are_eligible_every_other_time() {
        let mut p = KvmOnSpin::new(3, Generation::V5_13);
        let cands = [preempted_in_kernel(), Candidate::default(), Candidate::default()];
        // vCPU 0 yielded from its own spin loop and is still inside kvm_vcpu_on_spin.
        p.on_spin(0, &cands, &mut |_| YieldTo::Failed);
        p.in_spin_loop[0] = true;
        let mut tried = 0;
        let mut count = |_i: u32| {
            tried += 1;
            YieldTo::Failed
        };
        p.on_spin(1, &cands, &mut count);
        p.spin_done(1);
        p.on_spin(1, &cands, &mut count);
        assert_eq!(tried, 1, "examined twice, eligible once");
    }

    #[test]
    fn three_esrch_stop_the_scan() {
        let mut p = KvmOnSpin::new(6, Generation::V5_13);
        let mut cands = [preempted_in_kernel(); 6];
        cands[0] = Candidate::default();
        let mut tried = 0;
        p.on_spin(0, &cands, &mut |_| {
            tried += 1;
            YieldTo::Esrch
        });
        assert_eq!(tried, 3);
    }
}
