//! The PLE exit handler (`handle_pause`, linux: arch/x86/kvm/vmx/vmx.c, and `kvm_vcpu_on_spin` in virt/kvm/kvm_main.c):
//! grow the window through the VM's [`PleWindowPolicy`](crate::policy::PleWindowPolicy),
//! then let its [`YieldPolicy`](crate::policy::YieldPolicy) pick directed-yield candidates,
//! each tried with the host's `yield_to`.

use crate::account::{Attr, Cause, Layer};
use crate::kernel::{TaskState, HOST};
use crate::policy::{kvm_yield::NoYield, Candidate, YieldTo};
use crate::world::World;

use super::exit::ExitReason;
use super::vcpu::VcpuRun;

impl World<'_> {
    /// The PLE window of vCPU `v` in ns (None = PLE off for its VM).
    pub(crate) fn ple_window_ns(&self, v: u32) -> Option<u64> {
        let vc = &self.vcpus[v as usize];
        let vm = &self.vms[vc.vm as usize];
        vm.spec.ple.enabled.then(|| self.cycles_to_ns(vm.policies.window.window(vc.idx)))
    }

    /// A PLE exit of vCPU `v` (its guest spun in kernel mode for a whole window).
    pub(crate) fn ple_exit(&mut self, v: u32) {
        let Some(core) = self.vcpu_core(v) else { return };
        self.exit(v, ExitReason::PauseInstruction);
        let (vm, idx) = (self.vcpus[v as usize].vm as usize, self.vcpus[v as usize].idx);
        if let Some(interval) = self.record_ple_window {
            let window = self.vms[vm].policies.window.window(idx);
            let bucket = self.now.0 / interval;
            let series = &mut self.vms[vm].ple_series;
            match series.last_mut() {
                Some((b, sum, n)) if *b == bucket => {
                    *sum += window;
                    *n += 1;
                }
                _ => series.push((bucket, window, 1)),
            }
        }
        let traced = self.timeline.is_some().then(|| (self.vms[vm].policies.window.window(idx), self.vcpus[v as usize].ple.yields));
        // APLE's measures, for every VM: the spin this exit ended, and the switch it starts
        // (closed at the core's next guest entry, `ple_reentry`).
        let window_cycles = self.vms[vm].policies.window.window(idx);
        self.vcpus[v as usize].ple.window_cycles_at_exits += window_cycles;
        let window_ns = self.cycles_to_ns(window_cycles);
        let spin = &mut self.vms[vm].spin;
        spin.ple_exits += 1;
        spin.wasted_spin_ns += window_ns;
        self.cores[core as usize].ple_switch_from = Some((vm as u32, self.now));
        let cost = if self.vms[vm].policies.window.wants_cost() { self.spin_cost(vm) } else { self.vms[vm].spin };
        if self.vms[vm].policies.window.on_ple_exit(idx, self.now, &cost) {
            self.vcpus[v as usize].ple.window_grows += 1;
        }
        let cands: Vec<Candidate> = self.vms[vm].vcpus.iter().map(|&u| self.candidate(u)).collect();
        let members = self.vms[vm].vcpus.clone();
        let mut yielder = std::mem::replace(&mut self.vms[vm].policies.yielder, Box::new(NoYield));
        self.vcpus[v as usize].in_on_spin = true;
        self.vcpus[v as usize].yield_scan_ns = self.costs.exit_pause;
        let examined = yielder.on_spin(idx, &cands, &mut |i| self.directed_yield(v, members[i as usize]));
        self.vms[vm].policies.yielder = yielder;
        let attr = Attr { owner: self.vcpus[v as usize].owner, layer: Layer::Host, cause: Cause::Exit(ExitReason::PauseInstruction) };
        self.push_work(HOST, core, attr, u64::from(examined) * self.costs.ple_scan_per_vcpu);
        if let Some((window_cycles, yields)) = traced {
            let what = crate::account::timeline::Instant::PleExit {
                window_cycles,
                window_ns: self.cycles_to_ns(window_cycles),
                next_window_cycles: self.vms[vm].policies.window.window(idx),
                examined,
                yielded: self.vcpus[v as usize].ple.yields > yields,
            };
            self.tl_vcpu_instant(v, what);
        }
    }

    /// What `kvm_vcpu_on_spin` sees of vCPU `u`.
    pub(crate) fn candidate(&self, u: u32) -> Candidate {
        let vc = &self.vcpus[u as usize];
        let kc = &self.kernels[vc.kernel as usize].cpus[vc.idx as usize];
        // `kvm_sched_in` clears `vcpu->preempted` (and `vcpu->ready`) only in
        // `finish_task_switch`, after the switch to the vCPU thread has released the run-queue
        // lock (Linux v3.19.8 virt/kvm/kvm_main.c `kvm_sched_in`, kernel/sched/core.c
        // `finish_task_switch`): until then a vCPU being switched in still looks preempted, and a
        // yield to it waits for the lock and fails (`task_running`).
        let loading = self.vcpu_core(u).is_some_and(|c| self.kernels[HOST as usize].cpus[c as usize].rq_locked_until > self.now);
        let (was_ready, was_preempted) = if loading { vc.sched_in_clears } else { (false, false) };
        Candidate {
            ready: vc.ready || was_ready,
            preempted: vc.preempted || was_preempted,
            blocking: matches!(vc.run, VcpuRun::Blocked { .. }),
            pending_irq: kc.pending != 0 || !kc.csd.is_empty(),
            preempted_in_kernel: vc.preempted_in_kernel,
        }
    }

    /// `kvm_vcpu_yield_to(target)` from vCPU `me`'s exit handler, with its cost and counters.
    ///
    /// Past its -ESRCH test, `yield_to` takes both run-queue locks (`double_rq_lock`, Linux
    /// v3.19.8 kernel/sched/core.c), so the spinner waits while the target's CPU is inside a
    /// switch (`World::rq_lock_wait`) before it boosts the target or finds it running: a
    /// directed yield to a CPU that is busy switching vCPUs costs the spinner that time. The
    /// attempt starts after the exit's handling and the scan's earlier attempts
    /// (`yield_scan_ns`). (The boost takes effect at once: it lands before the switched-in
    /// vCPU's entry either way.)
    pub(crate) fn directed_yield(&mut self, me: u32, target: u32) -> YieldTo {
        let (mt, tt) = (self.vcpus[me as usize].task, self.vcpus[target as usize].task);
        let wait = self.rq_lock_wait(mt, tt, self.now + self.vcpus[me as usize].yield_scan_ns);
        let r = self.yield_to(mt, tt);
        let wait = if r == YieldTo::Esrch { 0 } else { wait };
        self.vcpus[me as usize].yield_scan_ns += self.costs.yield_to + wait;
        let vc = &mut self.vcpus[me as usize];
        vc.ple.yield_attempts += 1;
        match r {
            YieldTo::Yielded => vc.ple.yields += 1,
            YieldTo::Esrch => vc.ple.esrch += 1,
            YieldTo::Failed => {}
        }
        let attr = Attr { owner: vc.owner, layer: Layer::Host, cause: Cause::Exit(ExitReason::PauseInstruction) };
        if let Some(core) = self.vcpu_core(me) {
            self.push_work(HOST, core, attr, self.costs.yield_to + wait);
        }
        r
    }

    /// `core` enters guest mode: the switch time of a PLE exit on it ends (whichever vCPU
    /// enters: the spinner itself after an unsuccessful yield, or the vCPU switched to).
    #[inline]
    pub(crate) fn ple_reentry(&mut self, core: u32) {
        if let Some((vm, at)) = self.cores[core as usize].ple_switch_from.take() {
            self.vms[vm as usize].spin.switch_ns += self.now.since(at);
        }
    }

    /// A pending `kvm_vcpu_on_spin` of vCPU `v` has returned: `v` is back in guest mode after a
    /// PLE exit that left it on its core, or its thread has been switched back in after one
    /// whose yield switched it out.
    pub(crate) fn ple_spin_done(&mut self, v: u32) {
        let vc = &mut self.vcpus[v as usize];
        if std::mem::take(&mut vc.in_on_spin) {
            let (vm, idx) = (vc.vm as usize, vc.idx);
            self.vms[vm].policies.yielder.spin_done(idx);
        }
    }

    /// Whether the host task of vCPU `v` is queued (runnable, not running).
    pub(crate) fn vcpu_queued(&self, v: u32) -> bool {
        self.tasks[self.vcpus[v as usize].task as usize].state == TaskState::Queued
    }
}
