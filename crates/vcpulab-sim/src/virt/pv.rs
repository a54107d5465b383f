//! Paravirtual spinlock kicks and PV sched yield (Linux kernel/locking/qspinlock_paravirt.h and arch/x86/kernel/kvm.c).
//!
//! - PV spinlocks: a kernel-lock waiter spins `pv.spin_threshold` PAUSEs, then halts
//!   (`pv_wait` = HLT); the releaser that finds the next waiter halted kicks it with
//!   `KVM_HC_KICK_CPU`: a VMCALL exit, a wake-up of the halted vCPU, then `kvm_sched_yield`
//!   to it (`directed_yield_attempted/successful`).
//! - PV sched yield: after multi-target call-function IPIs, the sender hypercalls
//!   `KVM_HC_SCHED_YIELD` for the first target that is preempted (not idle) and yields to it.

use crate::kernel::KernelId;
use crate::policy::YieldTo;
use crate::world::World;

use super::exit::ExitReason;
use super::vcpu::VcpuRun;

impl World<'_> {
    /// Guest CPU (`k`, `from`) kicks guest CPU `to`, whose vCPU halted in `pv_wait`.
    pub(crate) fn pv_kick(&mut self, k: KernelId, from: u32, to: u32) {
        let (vf, vt) = (self.vcpu_of(k, from), self.vcpu_of(k, to));
        self.exit(vf, ExitReason::Vmcall);
        self.vcpus[vf as usize].pv.kicks += 1;
        match self.vcpus[vt as usize].run {
            VcpuRun::Blocked { .. } if !self.vcpu_queued(vt) && self.vcpu_core(vt).is_none() => {
                // kvm_pv_kick_cpu_op: pv_unhalted + kvm_vcpu_kick wakes the blocked thread.
                self.kernels[k as usize].cpus[to as usize].pv_unhalted = true;
                let waker = self.vcpu_core(vf);
                self.vcpu_unhalt(vt, waker);
            }
            VcpuRun::Halting { .. } => {
                self.kernels[k as usize].cpus[to as usize].pv_unhalted = true;
                if let Some(c) = self.vcpu_core(vt) {
                    self.touch(c);
                }
            }
            _ => {
                self.kernels[k as usize].cpus[to as usize].pv_unhalted = true;
            }
        }
        self.pv_sched_yield(vf, vt);
    }

    /// `kvm_sched_yield(target)` from vCPU `me`: directed yield if the target is ready.
    pub(crate) fn pv_sched_yield(&mut self, me: u32, target: u32) {
        if me == target || !self.vcpus[target as usize].ready {
            return;
        }
        self.vcpus[me as usize].pv.directed_yield_attempted += 1;
        if self.yield_to(self.vcpus[me as usize].task, self.vcpus[target as usize].task) == YieldTo::Yielded {
            self.vcpus[me as usize].pv.directed_yield_successful += 1;
        }
    }
}
