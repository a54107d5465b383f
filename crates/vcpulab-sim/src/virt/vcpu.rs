//! vCPU and VM state, exits, and the interrupt paths between guest and host.
//!
//! A vCPU's host-side lifecycle ([`VcpuRun`]):
//!
//! ```text
//!   Guest ──HLT──► Halting (exit handling, then halt polling) ──wake──► Guest   (poll success)
//!                      │ window over / core contended
//!                      ▼
//!                  Blocked (vCPU thread sleeps in the host) ──wake──► queued ──sched in──► Guest
//! ```
//!
//! Orthogonally its host task is Running / Queued (preempted: `preempted` + `ready`, as
//! `kvm_sched_out` sets them) / Blocked. `kvm_sched_in` / `kvm_sched_out` are
//! [`World::vcpu_sched_in`] / [`World::vcpu_sched_out`].

use crate::account::{Attr, Cause, Layer, Log2Histogram, OwnerId};
use crate::engine::SimTime;
use crate::kernel::{irq, KernelId, KernelKind, TaskId, TaskState, HOST};
use crate::policy::{SchedOut, VmPolicies};
use crate::spec::VmSpec;
use crate::world::World;

use super::exit::ExitReason;

/// Where a vCPU is in its halt cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuRun {
    /// Executing guest code (or host work on its behalf) when its task runs.
    Guest,
    /// In KVM after an HLT exit: exit handling, then polling if `poll`.
    Halting {
        /// When the halt began (`kvm_vcpu_halt` entry).
        start: SimTime,
        /// Halt polling was attempted.
        poll: bool,
    },
    /// The vCPU thread blocked in the host (`kvm_vcpu_block`).
    Blocked {
        /// When the halt began.
        start: SimTime,
        /// When it blocked.
        block_start: SimTime,
        /// Halt polling was attempted first (and failed).
        poll: bool,
    },
}

/// KVM's halt-polling statistics of one vCPU (Linux virt/kvm/kvm_main.c, `KVM_GENERIC_VCPU_STATS`).
#[derive(Clone, Debug, Default)]
pub struct HaltPollStats {
    /// `halt_attempted_poll`.
    pub attempted: u64,
    /// `halt_successful_poll`.
    pub successful: u64,
    /// `halt_poll_invalid` (always 0 on x86).
    pub invalid: u64,
    /// `halt_wakeup`: wake-ups of a vCPU that actually blocked.
    pub wakeups: u64,
    /// `halt_poll_success_ns`.
    pub poll_success_ns: u64,
    /// `halt_poll_fail_ns`.
    pub poll_fail_ns: u64,
    /// `halt_wait_ns`: time blocked after polling.
    pub wait_ns: u64,
    /// `halt_poll_success_hist`.
    pub success_hist: Log2Histogram,
    /// `halt_poll_fail_hist`.
    pub fail_hist: Log2Histogram,
    /// `halt_wait_hist`.
    pub wait_hist: Log2Histogram,
    /// The poll window (`vcpu->halt_poll_ns`, ns) at each attempted poll.
    pub window_hist: Log2Histogram,
    /// `kvm_halt_poll_ns` grow events.
    pub grows: u64,
    /// `kvm_halt_poll_ns` shrink events.
    pub shrinks: u64,
}

impl HaltPollStats {
    /// Adds another vCPU's statistics (for per-VM sums, as debugfs reports them).
    pub fn merge(&mut self, o: &HaltPollStats) {
        self.attempted += o.attempted;
        self.successful += o.successful;
        self.invalid += o.invalid;
        self.wakeups += o.wakeups;
        self.poll_success_ns += o.poll_success_ns;
        self.poll_fail_ns += o.poll_fail_ns;
        self.wait_ns += o.wait_ns;
        self.success_hist.merge(&o.success_hist);
        self.fail_hist.merge(&o.fail_hist);
        self.wait_hist.merge(&o.wait_hist);
        self.window_hist.merge(&o.window_hist);
        self.grows += o.grows;
        self.shrinks += o.shrinks;
    }
}

/// PLE and directed-yield counters of one vCPU (or summed over a VM).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PleStats {
    /// `kvm_vcpu_yield_to` calls from `kvm_vcpu_on_spin`.
    pub yield_attempts: u64,
    /// ... that boosted the target.
    pub yields: u64,
    /// ... that returned -ESRCH.
    pub esrch: u64,
    /// `kvm_ple_window_update` events (grow).
    pub window_grows: u64,
    /// `kvm_ple_window_update` events (shrink).
    pub window_shrinks: u64,
    /// The PLE windows in effect at its PLE exits, summed (cycles): over the exits, the mean
    /// window the guest's spins ran into (DIS-3.11 plots it per epoch of 1,000 exits).
    pub window_cycles_at_exits: u64,
}

impl PleStats {
    /// Adds another vCPU's counters.
    pub fn merge(&mut self, o: &PleStats) {
        self.yield_attempts += o.yield_attempts;
        self.yields += o.yields;
        self.esrch += o.esrch;
        self.window_grows += o.window_grows;
        self.window_shrinks += o.window_shrinks;
        self.window_cycles_at_exits += o.window_cycles_at_exits;
    }
}

/// Paravirtual-feature counters of one vCPU (or summed over a VM).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PvStats {
    /// `KVM_HC_KICK_CPU` hypercalls sent (PV spinlock unlock of a halted waiter).
    pub kicks: u64,
    /// PV spinlock waits that halted.
    pub spin_halts: u64,
    /// `directed_yield_attempted` (PV kick / PV sched yield).
    pub directed_yield_attempted: u64,
    /// `directed_yield_successful`.
    pub directed_yield_successful: u64,
    /// PV TLB flushes deferred to this vCPU's next entry (target side).
    pub tlb_deferred: u64,
}

impl PvStats {
    /// Adds another vCPU's counters.
    pub fn merge(&mut self, o: &PvStats) {
        self.kicks += o.kicks;
        self.spin_halts += o.spin_halts;
        self.directed_yield_attempted += o.directed_yield_attempted;
        self.directed_yield_successful += o.directed_yield_successful;
        self.tlb_deferred += o.tlb_deferred;
    }
}

/// IPI kinds counted separately (as `/proc/interrupts` separates RES, TLB and CAL).
pub mod ipi_kind {
    /// Reschedule IPIs (RES).
    pub const RESCHED: usize = 0;
    /// Call-function IPIs of TLB shootdowns (TLB).
    pub const TLB: usize = 1;
    /// Other call-function IPIs (CAL minus TLB): `membarrier`.
    pub const CALL: usize = 2;
    /// Number of kinds.
    pub const COUNT: usize = 3;
    /// Names, indexed by kind.
    pub const NAMES: [&str; COUNT] = ["resched", "tlb", "call"];
}

/// The host-side life of a vCPU (beyond its host task's scheduling state).
#[derive(Debug)]
pub struct Vcpu {
    /// Its VM.
    pub vm: u32,
    /// Index within the VM (= its guest CPU number).
    pub idx: u32,
    /// Its thread in the host kernel.
    pub task: TaskId,
    /// The guest kernel.
    pub kernel: KernelId,
    /// Owner id of its time.
    pub owner: OwnerId,
    /// Halt cycle state.
    pub run: VcpuRun,
    /// Current halt-poll window (`vcpu->halt_poll_ns`).
    pub halt_poll_ns: u64,
    /// Poll time left in the current halt.
    pub poll_rem: u64,
    /// The guest wrote 0 to MSR_KVM_POLL_CONTROL (guest haltpoll): no host polling.
    pub poll_control_off: bool,
    /// `vcpu->preempted`: scheduled out while runnable.
    pub preempted: bool,
    /// `vcpu->ready`: preempted, or woken and not yet running.
    pub ready: bool,
    /// CPL was 0 when it was preempted.
    pub preempted_in_kernel: bool,
    /// (`ready`, `preempted`) as they were when the host last picked this vCPU's thread: what
    /// `kvm_sched_in` clears once that switch has released the run-queue lock
    /// ([`crate::kernel::KCpu::rq_locked_until`]); `kvm_vcpu_on_spin` still sees them until then.
    pub sched_in_clears: (bool, bool),
    /// The guest-visible steal-time `preempted` byte (KVM_VCPU_PREEMPTED).
    pub st_preempted: bool,
    /// KVM_VCPU_FLUSH_TLB set by a PV TLB flush: flush before the next entry.
    pub flush_on_entry: bool,
    /// Inside `kvm_vcpu_on_spin` (a PLE exit whose directed yield has not returned).
    pub in_on_spin: bool,
    /// During a PLE exit's scan: how far into the exit's handling (ns) its next `yield_to`
    /// starts, after the exit itself and the earlier attempts with their run-queue lock waits.
    pub yield_scan_ns: u64,
    /// The guest FPU is deactivated (`vm.lazy_fpu`, after a `vcpu_put`): the guest's next
    /// FPU use exits with #NM.
    pub fpu_inactive: bool,
    /// Bumped at every interruption of guest execution (exit, interrupt): a PAUSE loop
    /// interrupted for longer than `ple_gap` starts a new PLE window.
    pub ple_epoch: u32,
    /// Exits by reason.
    pub exits: [u64; ExitReason::COUNT],
    /// IPIs sent by the guest on this vCPU, by kind.
    pub ipis_sent: [u64; ipi_kind::COUNT],
    /// IPIs sent to this vCPU by the guest, by kind.
    pub ipis_received: [u64; ipi_kind::COUNT],
    /// HLTs that blocked the vCPU thread.
    pub halts: u64,
    /// Times the host preempted it while runnable.
    pub preemptions: u64,
    /// Host wake-up latency (woken → running).
    pub wake_latency: Log2Histogram,
    /// Halt polling.
    pub hp: HaltPollStats,
    /// PLE / directed yield.
    pub ple: PleStats,
    /// PV features.
    pub pv: PvStats,
    /// Allocation periods: given and used time, asymmetric-policy inputs, migrations.
    pub alloc: crate::virt::allocation::VcpuAlloc,
}

impl Vcpu {
    /// A vCPU in guest mode with nothing counted yet.
    pub fn new(vm: u32, idx: u32, task: TaskId, kernel: KernelId, owner: OwnerId) -> Vcpu {
        Vcpu {
            vm,
            idx,
            task,
            kernel,
            owner,
            run: VcpuRun::Guest,
            halt_poll_ns: 0,
            poll_rem: 0,
            poll_control_off: false,
            preempted: false,
            ready: false,
            preempted_in_kernel: false,
            sched_in_clears: (false, false),
            st_preempted: false,
            flush_on_entry: false,
            in_on_spin: false,
            yield_scan_ns: 0,
            fpu_inactive: false,
            ple_epoch: 0,
            exits: [0; ExitReason::COUNT],
            ipis_sent: [0; ipi_kind::COUNT],
            ipis_received: [0; ipi_kind::COUNT],
            halts: 0,
            preemptions: 0,
            wake_latency: Log2Histogram::default(),
            hp: HaltPollStats::default(),
            ple: PleStats::default(),
            pv: PvStats::default(),
            alloc: Default::default(),
        }
    }
}

/// VM-wide settings, members and policies.
#[derive(Debug)]
pub struct Vm {
    /// Its guest kernel.
    pub kernel: KernelId,
    /// Global vCPU ids, by vCPU index.
    pub vcpus: Vec<u32>,
    /// Its settings (the `[vm]` table with its `[vms.N]` overrides applied).
    pub spec: VmSpec,
    /// Its policy objects.
    pub policies: VmPolicies,
    /// The PLE window over time (`[record] ple_window`): per interval, the sum of the windows
    /// (cycles) in force at its PLE exits and their count, keyed by the interval's index.
    pub ple_series: Vec<(u64, u64, u64)>,
    /// Its spinning cost so far (APLE's inputs, kept for every VM); `cpu_ns` is filled in
    /// only when read through [`World::spin_cost`].
    pub spin: crate::policy::SpinCost,
}

impl World<'_> {
    /// Global id of the vCPU behind CPU `cpu` of guest kernel `k`.
    #[inline]
    pub(crate) fn vcpu_of(&self, k: KernelId, cpu: u32) -> u32 {
        match self.kernels[k as usize].kind {
            KernelKind::Guest { vm } => self.vms[vm as usize].vcpus[cpu as usize],
            KernelKind::Host => unreachable!("the host kernel has no vCPUs"),
        }
    }

    /// The VM of guest kernel `k`.
    pub(crate) fn vm_of(&self, k: KernelId) -> &Vm {
        match self.kernels[k as usize].kind {
            KernelKind::Guest { vm } => &self.vms[vm as usize],
            KernelKind::Host => unreachable!("the host kernel is not a VM"),
        }
    }

    /// VM `vm`'s spinning cost so far, with the CPU time its vCPU threads received until now.
    pub(crate) fn spin_cost(&self, vm: usize) -> crate::policy::SpinCost {
        let cpu_ns = self.vms[vm]
            .vcpus
            .iter()
            .map(|&v| {
                let t = &self.tasks[self.vcpus[v as usize].task as usize];
                t.sum_exec + if t.state == TaskState::Running { self.now.since(t.exec_start) } else { 0 }
            })
            .sum();
        crate::policy::SpinCost { cpu_ns, ..self.vms[vm].spin }
    }

    /// The settings of vCPU `v`'s VM.
    pub(crate) fn vspec(&self, v: u32) -> &VmSpec {
        &self.vms[self.vcpus[v as usize].vm as usize].spec
    }

    /// The core vCPU `v` is current on, if it is.
    #[inline]
    pub(crate) fn vcpu_core(&self, v: u32) -> Option<u32> {
        let t = &self.tasks[self.vcpus[v as usize].task as usize];
        (t.state == TaskState::Running).then_some(t.cpu)
    }

    /// vCPU `v` exits for `reason`: counts it and queues its handling cost on the vCPU's core.
    pub(crate) fn exit(&mut self, v: u32, reason: ExitReason) {
        let cost = match reason {
            ExitReason::Hlt => self.costs.exit_hlt,
            ExitReason::MsrWriteIcr => self.costs.exit_msr_icr,
            ExitReason::MsrWriteTscDeadline => self.costs.exit_msr_tsc_deadline,
            ExitReason::MsrWriteEoi => self.costs.exit_msr_eoi,
            ExitReason::InterruptWindow => self.costs.exit_interrupt_window,
            ExitReason::PreemptionTimer => self.costs.exit_preemption_timer,
            ExitReason::ExternalInterrupt => self.costs.exit_external_interrupt,
            ExitReason::PauseInstruction => self.costs.exit_pause,
            ExitReason::Vmcall => self.costs.exit_vmcall,
            ExitReason::ExceptionNmi => self.costs.exit_exception_nm,
        };
        self.exit_with(v, reason, cost);
    }

    /// Like [`World::exit`] with an explicit handling cost (e.g. a hypercall doing extra work).
    pub(crate) fn exit_with(&mut self, v: u32, reason: ExitReason, cost: u64) {
        let Some(core) = self.vcpu_core(v) else {
            debug_assert!(false, "exit of a vCPU that is not running");
            return;
        };
        let vc = &mut self.vcpus[v as usize];
        vc.exits[reason.index()] += 1;
        vc.ple_epoch = vc.ple_epoch.wrapping_add(1);
        let attr = Attr { owner: vc.owner, layer: Layer::Host, cause: Cause::Exit(reason) };
        self.push_work(HOST, core, attr, cost);
        if self.timeline.is_some() {
            self.tl_exit(v, reason, cost, core);
        }
    }

    /// Host-layer work charged to vCPU `v` on its core (no exit counted).
    pub(crate) fn vcpu_host_work(&mut self, v: u32, cause: Cause, cost: u64) {
        if let Some(core) = self.vcpu_core(v) {
            let attr = Attr { owner: self.vcpus[v as usize].owner, layer: Layer::Host, cause };
            self.push_work(HOST, core, attr, cost);
        }
    }

    /// Whether vCPU `v` is executing guest code right now (running, no host work queued, not
    /// halting).
    pub(crate) fn vcpu_in_guest(&self, v: u32) -> bool {
        match self.vcpu_core(v) {
            Some(core) => self.kernels[0].cpus[core as usize].kwork.is_empty() && self.vcpus[v as usize].run == VcpuRun::Guest,
            None => false,
        }
    }

    /// Platform part of raising an interrupt on guest CPU (`k`, `cpu`); the pending bit is
    /// already set.
    pub(crate) fn virt_deliver(&mut self, k: KernelId, cpu: u32, kind: u8) {
        let v = self.vcpu_of(k, cpu);
        match self.vcpus[v as usize].run {
            VcpuRun::Blocked { .. } => {
                if self.tasks[self.vcpus[v as usize].task as usize].state == TaskState::Blocked {
                    self.vcpu_unhalt(v, None);
                }
                return;
            }
            VcpuRun::Halting { .. } => {
                // The poll loop (or the check before blocking) sees the pending interrupt.
                if let Some(core) = self.vcpu_core(v) {
                    self.touch(core);
                }
                return;
            }
            VcpuRun::Guest => {}
        }
        let Some(core) = self.vcpu_core(v) else { return }; // preempted: injected at next entry
        if self.vcpu_in_guest(v) {
            if kind & irq::TIMER != 0 {
                let reason = if self.vspec(v).preemption_timer { ExitReason::PreemptionTimer } else { ExitReason::ExternalInterrupt };
                self.exit(v, reason);
            } else if !self.vspec(v).apicv {
                self.exit(v, ExitReason::ExternalInterrupt);
            }
        }
        self.touch(core);
    }

    /// A guest IPI from `from` to `to` (interrupt bit `kind`, counted as [`ipi_kind`] `ki`):
    /// the sender's ICR write exits (unless IPIv, or
    /// `sender_exit` is false because the caller charged a PV send-IPI hypercall); a halted
    /// target is woken by the host from the sender's exit handler, a running or preempted one
    /// gets it posted.
    pub(crate) fn virt_send_ipi(&mut self, k: KernelId, from: u32, to: u32, kind: u8, ki: usize, sender_exit: bool) {
        let (vf, vt) = (self.vcpu_of(k, from), self.vcpu_of(k, to));
        self.vcpus[vf as usize].ipis_sent[ki] += 1;
        self.vcpus[vt as usize].ipis_received[ki] += 1;
        if sender_exit && !self.vspec(vf).ipiv {
            self.exit(vf, ExitReason::MsrWriteIcr);
        }
        let blocked = matches!(self.vcpus[vt as usize].run, VcpuRun::Blocked { .. })
            && self.tasks[self.vcpus[vt as usize].task as usize].state == TaskState::Blocked;
        if blocked {
            if self.timeline.is_some() {
                // The host wakes the target at once: sent and received now.
                self.tl_ipi_send(k, from, to, kind, ki, self.now);
                self.tl_ipi_recv(k, to, kind);
            }
            self.kernels[k as usize].cpus[to as usize].pending |= kind;
            if let Some(n) = self.vcpus[vt as usize].alloc.woken_by.get_mut(from as usize) {
                *n += 1;
            }
            let waker = self.vcpu_core(vf);
            self.vcpu_unhalt(vt, waker);
        } else {
            // Posted delivery: KVM sets the PIR bit and sends the notification IPI from the
            // ICR-write exit handler (vmx_deliver_posted_interrupt), so the latency runs from
            // the write; the exit delays the sender only.
            let at = self.now + self.costs.ipi_posted_latency;
            if self.timeline.is_some() {
                self.tl_ipi_send(k, from, to, kind, ki, at);
            }
            self.q.schedule(at, crate::world::Ev::Ipi { k, cpu: to, kind });
        }
    }

    /// Wakes the blocked vCPU `v`'s thread (`kvm_vcpu_wake_up`); `waker_core` is the core
    /// executing the wake-up (the sender's exit handler), None for an interrupt on the
    /// vCPU's own core (its timer).
    pub(crate) fn vcpu_unhalt(&mut self, v: u32, waker_core: Option<u32>) {
        if let Some(c) = waker_core {
            // try_to_wake_up of the vCPU thread, in the waker's exit handler.
            let payer = self.kernels[HOST as usize].cpus[c as usize].curr;
            let owner = payer.map_or(0, |t| self.tasks[t as usize].owner);
            self.push_work(HOST, c, Attr { owner, layer: Layer::Host, cause: Cause::VcpuWakeup }, self.costs.host_wakeup);
        }
        let vc = &mut self.vcpus[v as usize];
        vc.hp.wakeups += 1;
        vc.ready = true;
        let task = vc.task;
        if self.timeline.is_some() {
            self.tl_vcpu_woken(v);
        }
        self.wake_task(task, waker_core.map(|c| (HOST, c)));
    }

    /// `kvm_sched_out`: the host switches vCPU `v`'s thread out; `runnable` = preempted.
    pub(crate) fn vcpu_sched_out(&mut self, v: u32, runnable: bool, yielded: bool) {
        let in_kernel = self.vcpu_in_kernel(v);
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        let why = if runnable {
            vc.preempted = true;
            vc.ready = true;
            vc.preempted_in_kernel = in_kernel;
            vc.st_preempted = true;
            vc.preemptions += 1;
            if yielded {
                SchedOut::Yielded
            } else {
                SchedOut::Preempted
            }
        } else {
            SchedOut::Halted
        };
        let vm = vc.vm as usize;
        let idx = vc.idx;
        if self.vms[vm].spec.lazy_fpu {
            // kvm_arch_vcpu_put → kvm_put_guest_fpu: if the guest FPU is loaded (the guest used
            // it since the last put: `guest_fpu_loaded`), save it and restore QEMU's; then
            // deactivate the guest FPU for the next entry (KVM_REQ_DEACTIVATE_FPU). A vCPU
            // switched out again before its guest touched the FPU saves nothing.
            let vc = &mut self.vcpus[v as usize];
            let loaded = !std::mem::replace(&mut vc.fpu_inactive, true);
            if loaded {
                let (core, owner) = (self.tasks[vc.task as usize].cpu, vc.owner);
                self.push_work(HOST, core, Attr { owner, layer: Layer::Host, cause: Cause::VcpuSwitch }, self.costs.fpu_switch);
            }
        }
        self.vms[vm].policies.yielder.on_sched_out(idx, why, now);
        if self.timeline.is_some() {
            self.tl_vcpu_off(v, runnable);
        }
        self.rwsem_vcpu_moved(self.vcpus[v as usize].kernel);
    }

    /// `kvm_sched_in` + `vcpu_load`: vCPU `v`'s thread runs again on `core`.
    pub(crate) fn vcpu_sched_in(&mut self, v: u32) {
        if self.timeline.is_some() {
            self.tl_vcpu_on(v);
        }
        let now = self.now;
        let core = self.tasks[self.vcpus[v as usize].task as usize].cpu;
        let vc = &mut self.vcpus[v as usize];
        let migrated = vc.alloc.last_core.replace(core).is_some_and(|c| c != core);
        if migrated {
            vc.alloc.migrations += 1;
        }
        vc.sched_in_clears = (vc.ready, vc.preempted);
        vc.preempted = false;
        vc.ready = false;
        vc.st_preempted = false;
        let (vm, idx) = (vc.vm as usize, vc.idx);
        let flush = std::mem::take(&mut vc.flush_on_entry);
        if let VcpuRun::Blocked { start, block_start, poll } = vc.run {
            vc.run = VcpuRun::Guest;
            self.halt_done(v, start, Some(block_start), poll);
        }
        // vmx_vcpu_load after the thread was scheduled out: shrink the PLE window.
        if self.vms[vm].policies.window.on_sched_in(idx, now) {
            self.vcpus[v as usize].ple.window_shrinks += 1;
        }
        self.vms[vm].policies.yielder.on_sched_in(idx, now);
        // A vCPU switched out by its own directed yield is still inside `kvm_vcpu_on_spin`
        // (`yield_to` calls `schedule()` from there): it returns, clearing `in_spin_loop` and
        // `dy_eligible`, when the thread runs again, before the next entry is even tried
        // (Linux v3.19.8 virt/kvm/kvm_main.c `kvm_vcpu_on_spin`, kernel/sched/core.c `yield_to`).
        // An entry cancelled by a reschedule then does not keep it in a spin loop.
        self.ple_spin_done(v);
        self.rwsem_vcpu_moved(self.vcpus[v as usize].kernel);
        if migrated {
            self.vcpu_host_work(v, Cause::VcpuSwitch, self.costs.vcpu_migration);
        }
        if flush {
            // record_steal_time: KVM_VCPU_FLUSH_TLB set → kvm_vcpu_flush_tlb_guest before entry.
            self.vcpu_host_work(v, Cause::TlbFlush, self.costs.tlb_flush_local);
        }
    }

    /// Whether vCPU `v`'s guest CPU is at CPL 0 right now (kernel work, a thread inside a
    /// kernel section or spinning in the kernel, or the idle loop).
    pub(crate) fn vcpu_in_kernel(&self, v: u32) -> bool {
        let (k, cpu) = (self.vcpus[v as usize].kernel, self.vcpus[v as usize].idx);
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        if !kc.kwork.is_empty() {
            return true;
        }
        match kc.curr {
            None => true,
            Some(t) => match self.tasks[t as usize].kind {
                crate::kernel::TaskKind::Thread(th) => self.threads[th as usize].in_kernel(),
                crate::kernel::TaskKind::Vcpu(_) => false,
            },
        }
    }
}
