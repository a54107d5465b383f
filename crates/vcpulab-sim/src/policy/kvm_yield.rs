//! Directed yield on a PLE exit: KVM's `kvm_vcpu_on_spin` (linux: virt/kvm/kvm_main.c, the
//! single-loop version with the Nov 2025 index fix; Linux virt/kvm/kvm_main.c) and a no-yield baseline.

use super::{yield_to_first, Candidate, YieldPolicy, YieldTo};

/// `kvm_vcpu_on_spin` with KVM's per-VM `last_boosted_vcpu` and per-vCPU `in_spin_loop` /
/// `dy_eligible` state.
#[derive(Debug, Clone)]
pub struct KvmOnSpin {
    last_boosted: u32,
    in_spin_loop: Vec<bool>,
    dy_eligible: Vec<bool>,
}

impl KvmOnSpin {
    /// State for a VM of `nvcpus` vCPUs (`last_boosted_vcpu` starts at 0).
    pub fn new(nvcpus: u32) -> Self {
        KvmOnSpin { last_boosted: 0, in_spin_loop: vec![false; nvcpus as usize], dy_eligible: vec![false; nvcpus as usize] }
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
            let c = cands[idx as usize];
            // yield_to_kernel_mode is always true for VMX PLE exits.
            let candidate = c.ready && (!c.blocking || c.pending_irq) && (!c.preempted || c.pending_irq || c.preempted_in_kernel);
            candidate && self.eligible(idx as usize)
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
        let mut p = KvmOnSpin::new(4);
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
        let mut p = KvmOnSpin::new(3);
        let user = Candidate { ready: true, preempted: true, ..Default::default() };
        let user_irq = Candidate { pending_irq: true, ..user };
        let mut tried = Vec::new();
        p.on_spin(0, &[Candidate::default(), user, user_irq], &mut |i| {
            tried.push(i);
            YieldTo::Failed
        });
        assert_eq!(tried, vec![2]);
    }

    #[test]
    fn spinning_candidates_are_eligible_every_other_time() {
        let mut p = KvmOnSpin::new(3);
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
        let mut p = KvmOnSpin::new(6);
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
