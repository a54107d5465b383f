//! TLB shootdowns (Linux arch/x86/mm/tlb.c, kernel/smp.c; TPDS §2, §6; S4U): the kernel side, native and in a guest, with
//! the guest's flush policy (`[vm] tlb`).
//!
//! A thread that removes mappings flushes its own TLB (per page up to
//! `tlb_single_page_flush_ceiling` = 33 pages, else a full flush), then every other CPU of
//! its kernel whose current thread belongs to the same process must flush too. Idle CPUs that
//! last ran the process are in lazy-TLB mode: with `tlb_lazy_skip` (Linux >= 4.20
//! `tlb_is_not_lazy`; or 4.14–4.19 with PCID, where `enter_lazy_tlb` switches to init_mm at
//! once, `tlb_defer_switch_to_init_mm`) they are skipped; without it (older kernels, or no
//! PCID) they are targets until the first flush they receive makes them leave the mm:
//!
//! - `ipi` (native `flush_tlb_others`): queue a call-function entry on each target, send a
//!   call-function IPI to targets whose queue was empty, and busy-wait at CPL 0 (preemption
//!   off) until every target's handler has run. In a VM a preempted target handles it only
//!   when the host runs it again.
//! - `pv` (PV TLB flush): targets whose steal-time `preempted` byte is set get
//!   `KVM_VCPU_FLUSH_TLB` instead (flushed by the host before their next entry); the rest
//!   get IPIs as above. A target preempted between the check and the delivery is waited for
//!   (the race the issue names).
//! - `shoot4u`: one hypercall; the hypervisor invalidates each target itself — a synchronous
//!   host IPI to the pCPU of each running target, a flush-on-entry request for the others —
//!   and returns; the guest never waits for a vCPU.
//!
//! The latency of each shootdown (from the decision to flush remote CPUs to the last
//! acknowledgement, the sender's view that S4U measured) goes to the instance's histogram.
//!
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` (linux: kernel/sched/membarrier.c) uses the
//! same call-function machinery without a flush: an IPI to every other CPU whose current task
//! belongs to the process (idle CPUs are never targets), a handler that only executes a memory
//! barrier, and a wait with preemption off for all of them. These are the "other"
//! call-function IPIs, counted apart from the TLB ones; PV TLB flush and Shoot4U do not apply.

use serde::Serialize;

use crate::account::{Attr, Cause, Layer};
use crate::engine::SimTime;
use crate::spec::vm::TlbPolicy;
use crate::virt::exit::ExitReason;
use crate::virt::vcpu::{ipi_kind, VcpuRun};
use crate::world::World;

use super::thread::{Act, Flow, SpinOn};
use super::{irq, KernelId, TaskKind, Then, ThreadId, HOST};

/// `tlb_single_page_flush_ceiling` (linux: arch/x86/mm/tlb.c).
pub const SINGLE_PAGE_FLUSH_CEILING: u64 = 33;

/// What a remote call asks its targets to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// Flush TLB entries (a shootdown).
    TlbFlush,
    /// Execute a memory barrier (`membarrier`).
    Membarrier,
}

impl CallKind {
    /// What the caller's wait is attributed to.
    pub fn wait_cause(self) -> Cause {
        match self {
            CallKind::TlbFlush => Cause::TlbWait,
            CallKind::Membarrier => Cause::CallWait,
        }
    }

    /// How its IPIs are counted ([`ipi_kind`]).
    fn ipi_kind(self) -> usize {
        match self {
            CallKind::TlbFlush => ipi_kind::TLB,
            CallKind::Membarrier => ipi_kind::CALL,
        }
    }
}

/// Where a shootdown's target was when the shootdown reached it: what its acknowledgement
/// waited for. S4U-F3/T1 explain the latency by it (a preempted target handles the IPI only when
/// next scheduled); the model has no long interrupts-off section in a guest, so no target is
/// ever waited for with interrupts off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetState {
    /// Running the process (natively, or its vCPU in guest mode).
    Running,
    /// Its vCPU on a core but in the host: exit handling or host work for it.
    InHost,
    /// Its vCPU in KVM's halt path: exit handling or halt polling (`Halting`).
    HaltPolling,
    /// Its vCPU blocked in the host after HLT (a lazy-TLB idle CPU in a C-state).
    Halted,
    /// Its vCPU runnable but descheduled by the host (preempted).
    Preempted,
    /// A native idle CPU in lazy-TLB mode.
    Idle,
    /// Not waited for: deferred to its next VM entry (PV TLB flush of a preempted vCPU;
    /// Shoot4U's descheduled targets).
    Deferred,
    /// Handled by the hypervisor in one call (Shoot4U): the sender waits for the hypercall.
    Hypervisor,
}

impl TargetState {
    /// Every state, in index order.
    pub const ALL: [TargetState; 8] = [
        TargetState::Running,
        TargetState::InHost,
        TargetState::HaltPolling,
        TargetState::Halted,
        TargetState::Preempted,
        TargetState::Idle,
        TargetState::Deferred,
        TargetState::Hypervisor,
    ];
    /// Number of states.
    pub const COUNT: usize = Self::ALL.len();

    /// Its name in results (`tlb.by_target_state`, metrics `tlb_critical_share_<name>`).
    pub fn name(self) -> &'static str {
        match self {
            TargetState::Running => "running",
            TargetState::InHost => "in_host",
            TargetState::HaltPolling => "halt_polling",
            TargetState::Halted => "halted",
            TargetState::Preempted => "preempted",
            TargetState::Idle => "idle",
            TargetState::Deferred => "deferred",
            TargetState::Hypervisor => "hypervisor",
        }
    }
}

/// Shootdown targets in one [`TargetState`], over an instance's run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TargetStateStats {
    /// Targets found in this state when the shootdown reached them.
    pub targets: u64,
    /// Their time from the shootdown's start to their acknowledgement, summed (ns).
    pub wait_ns: u64,
    /// Shootdowns whose last acknowledgement came from a target in this state (it set the
    /// latency).
    pub critical: u64,
    /// Those shootdowns' latencies, summed (ns): the part of the total latency this state
    /// explains.
    pub critical_ns: u64,
}

/// One remote call (TLB shootdown or membarrier) in progress.
#[derive(Clone, Copy, Debug)]
pub struct RemoteCall {
    /// What the targets do.
    pub kind: CallKind,
    /// The thread waiting for it.
    pub sender: ThreadId,
    /// When the remote part started.
    pub start: SimTime,
    /// Acknowledgements outstanding.
    pub pending: u32,
    /// The state of the target whose acknowledgement came last (so far).
    pub last: TargetState,
}

/// Remote-call statistics of one instance: its TLB shootdowns, or its membarriers.
#[derive(Clone, Debug, Default)]
pub struct TlbStats {
    /// Remote calls (at least one target).
    pub shootdowns: u64,
    /// Calls that needed no remote CPU.
    pub local_only: u64,
    /// Targets (all policies).
    pub targets: u64,
    /// Call-function IPIs sent.
    pub ipis: u64,
    /// Targets deferred to their next VM entry (PV TLB flush / Shoot4U, not running).
    pub deferred: u64,
    /// Latency histogram (ns).
    pub latency: crate::account::Log2Histogram,
    /// Every latency (ns), for exact quantiles (saved in the result when `[record]
    /// tlb_samples` is on).
    pub samples: Vec<u64>,
    /// Targets by their state when the shootdown reached them (indexed by [`TargetState`]).
    pub by_state: [TargetStateStats; TargetState::COUNT],
}

impl World<'_> {
    /// Thread `t` on (`k`, `cpu`) changed the mappings of `pages` pages: flush locally and
    /// shoot down the other CPUs running its process. Returns Stop if it must wait.
    pub(crate) fn tlb_shootdown(&mut self, k: KernelId, cpu: u32, t: ThreadId, pages: u64) -> Flow {
        let owner = self.ctx_attr(k, cpu, Cause::TlbFlush).owner;
        let local = if pages <= SINGLE_PAGE_FLUSH_CEILING { pages * self.costs.invlpg } else { self.costs.tlb_flush_local };
        self.push_work(k, cpu, Attr { owner, layer: Layer::Kernel, cause: Cause::TlbFlush }, local);
        let inst = self.threads[t as usize].inst;
        let lazy_skip = self.kernels[k as usize].params.tlb_lazy_skip;
        let targets = self.cpus_running(k, cpu, inst, !lazy_skip);
        let stats = &mut self.insts[inst as usize].tlb;
        if targets.is_empty() {
            stats.local_only += 1;
            return Flow::Continue;
        }
        stats.shootdowns += 1;
        stats.targets += targets.len() as u64;
        let policy = if k == HOST { TlbPolicy::Ipi } else { self.vm_of(k).spec.tlb };
        let sd = self.new_remote_call(t, CallKind::TlbFlush);
        let deferred = match policy {
            TlbPolicy::Shoot4u => self.shoot4u(k, cpu, sd, &targets),
            TlbPolicy::Ipi | TlbPolicy::Pv => self.call_others(k, cpu, sd, &targets, policy == TlbPolicy::Pv),
        };
        if self.timeline.is_some() {
            self.tl_call_start(k, cpu, CallKind::TlbFlush, &targets, policy.name(), pages, deferred);
        }
        self.insts[inst as usize].tlb.deferred += deferred;
        self.wait_remote_call(t, sd)
    }

    /// Thread `t` on (`k`, `cpu`) calls `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`.
    /// Returns Stop if it must wait.
    pub(crate) fn membarrier(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Flow {
        let inst = self.threads[t as usize].inst;
        let targets = self.cpus_running(k, cpu, inst, false);
        let stats = &mut self.insts[inst as usize].membarrier;
        if targets.is_empty() {
            stats.local_only += 1;
            return Flow::Continue;
        }
        stats.shootdowns += 1;
        stats.targets += targets.len() as u64;
        let sd = self.new_remote_call(t, CallKind::Membarrier);
        if self.timeline.is_some() {
            self.tl_call_start(k, cpu, CallKind::Membarrier, &targets, "ipi", 0, 0);
        }
        self.call_others(k, cpu, sd, &targets, false);
        self.wait_remote_call(t, sd)
    }

    /// The other CPUs of kernel `k` whose current thread belongs to instance `inst`; with
    /// `lazy`, also idle CPUs that still have its mm loaded (lazy-TLB mode).
    fn cpus_running(&self, k: KernelId, cpu: u32, inst: u32, lazy: bool) -> Vec<u32> {
        let kern = &self.kernels[k as usize];
        (0..kern.cpus.len() as u32)
            .filter(|&c| c != cpu)
            .filter(|&c| {
                let kc = &kern.cpus[c as usize];
                match kc.curr.map(|x| self.tasks[x as usize].kind) {
                    Some(TaskKind::Thread(o)) => self.threads[o as usize].inst == inst,
                    Some(TaskKind::Vcpu(_)) => false,
                    None => lazy && kc.last_mm == Some(inst),
                }
            })
            .collect()
    }

    /// Thread `t` busy-waits, preemption off (`get_cpu` in `flush_tlb_mm_range`,
    /// `preempt_disable` in `smp_call_function_many`), for remote call `sd`.
    fn wait_remote_call(&mut self, t: ThreadId, sd: u32) -> Flow {
        let th = &mut self.threads[t as usize];
        th.kdepth += 1;
        th.spin_window = super::thread::SPIN_WINDOW_UNSET;
        th.act = Act::Spin(SpinOn::RemoteCall(sd));
        Flow::Stop
    }

    fn new_remote_call(&mut self, sender: ThreadId, kind: CallKind) -> u32 {
        let s = RemoteCall { kind, sender, start: self.now, pending: 0, last: TargetState::Running };
        match self.free_remote_calls.pop() {
            Some(i) => {
                self.remote_calls[i as usize] = s;
                i
            }
            None => {
                self.remote_calls.push(s);
                self.remote_calls.len() as u32 - 1
            }
        }
    }

    /// `smp_call_function_many` (and for TLB flushes `native_flush_tlb_others` /
    /// `kvm_flush_tlb_others` with `pv`): CSDs and call-function IPIs. Returns how many
    /// targets were deferred to their next VM entry.
    fn call_others(&mut self, k: KernelId, cpu: u32, sd: u32, targets: &[u32], pv: bool) -> u64 {
        let mut ipi_to = Vec::new();
        let mut deferred = 0;
        let inst = self.threads[self.remote_calls[sd as usize].sender as usize].inst as usize;
        let is_tlb = self.remote_calls[sd as usize].kind == CallKind::TlbFlush;
        for &c in targets {
            if pv {
                let v = self.vcpu_of(k, c);
                if self.vcpus[v as usize].st_preempted {
                    // cmpxchg KVM_VCPU_PREEMPTED → | KVM_VCPU_FLUSH_TLB: no IPI, no wait.
                    self.vcpus[v as usize].flush_on_entry = true;
                    self.vcpus[v as usize].pv.tlb_deferred += 1;
                    deferred += 1;
                    self.insts[inst].tlb.by_state[TargetState::Deferred as usize].targets += 1;
                    continue;
                }
            }
            let state = self.target_state(k, c);
            if is_tlb {
                self.insts[inst].tlb.by_state[state as usize].targets += 1;
            }
            let kc = &mut self.kernels[k as usize].cpus[c as usize];
            let was_empty = kc.csd.is_empty();
            kc.csd.push_back((sd, state));
            self.remote_calls[sd as usize].pending += 1;
            if was_empty {
                ipi_to.push(c);
            }
        }
        if deferred > 0 && self.remote_calls[sd as usize].pending == 0 {
            // Every target was preempted: the PV flush deferred them all, and the shootdown
            // completes without waiting on anyone; it is counted under "deferred".
            self.remote_calls[sd as usize].last = TargetState::Deferred;
        }
        let call = self.remote_calls[sd as usize];
        let inst = &mut self.insts[self.threads[call.sender as usize].inst as usize];
        match call.kind {
            CallKind::TlbFlush => inst.tlb.ipis += ipi_to.len() as u64,
            CallKind::Membarrier => inst.membarrier.ipis += ipi_to.len() as u64,
        }
        let pv_send = k != HOST && ipi_to.len() > 1 && self.vm_of(k).spec.pv.send_ipi;
        if pv_send {
            // KVM_HC_SEND_IPI: one hypercall per 128 APIC IDs.
            let v = self.vcpu_of(k, cpu);
            let span = ipi_to.iter().max().unwrap() - ipi_to.iter().min().unwrap();
            for _ in 0..=(span / 128) {
                self.exit(v, ExitReason::Vmcall);
            }
        }
        for &c in &ipi_to {
            self.send_ipi_ex(k, cpu, c, irq::CALL_FUNC, call.kind.ipi_kind(), !pv_send);
        }
        if k != HOST && targets.len() > 1 && self.vm_of(k).spec.pv.sched_yield {
            // kvm_smp_send_call_func_ipi: yield to the first preempted, non-idle target.
            let me = self.vcpu_of(k, cpu);
            let first = ipi_to.iter().map(|&c| self.vcpu_of(k, c)).find(|&v| self.vcpus[v as usize].st_preempted);
            if let Some(target) = first {
                self.exit(me, ExitReason::Vmcall);
                self.pv_sched_yield(me, target);
            }
        }
        deferred
    }

    /// The Shoot4U hypercall from guest CPU (`k`, `cpu`). Returns how many targets were
    /// deferred to their next VM entry.
    fn shoot4u(&mut self, k: KernelId, cpu: u32, sd: u32, targets: &[u32]) -> u64 {
        let me = self.vcpu_of(k, cpu);
        let inst = self.threads[self.remote_calls[sd as usize].sender as usize].inst as usize;
        self.exit(me, ExitReason::Vmcall);
        let (mut host_ns, mut deferred) = (0, 0);
        for &c in targets {
            let v = self.vcpu_of(k, c);
            match self.vcpu_core(v) {
                Some(core) => {
                    // Host IPI to the target's pCPU: INVVPID there; the target leaves guest mode briefly.
                    host_ns += self.costs.shoot4u_remote;
                    if self.vcpu_in_guest(v) {
                        self.exit(v, ExitReason::ExternalInterrupt);
                    } else {
                        self.touch(core);
                    }
                }
                None => {
                    self.vcpus[v as usize].flush_on_entry = true;
                    deferred += 1;
                    self.insts[inst].tlb.by_state[TargetState::Deferred as usize].targets += 1;
                    host_ns += self.costs.invlpg;
                }
            }
        }
        self.insts[inst].tlb.by_state[TargetState::Hypervisor as usize].targets += targets.len() as u64 - deferred;
        let call = &mut self.remote_calls[sd as usize];
        call.pending = 1;
        call.last = TargetState::Hypervisor;
        let core = self.vcpu_core(me).expect("the sender runs");
        let attr = Attr { owner: self.vcpus[me as usize].owner, layer: Layer::Host, cause: Cause::TlbFlush };
        self.push_work_then(HOST, core, attr, host_ns, Then::Shoot4uDone(sd));
        deferred
    }

    /// A CPU received a call-function IPI: run the queued handlers, acknowledging each. A
    /// flush costs `tlb_flush_remote`; a membarrier's `smp_mb` is within `irq_handler`.
    pub(crate) fn run_csds(&mut self, k: KernelId, cpu: u32) {
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.curr.is_none() && kc.csd.iter().any(|&(sd, _)| self.remote_calls[sd as usize].kind == CallKind::TlbFlush) {
            // A lazy-TLB CPU that receives a flush leaves the mm (`leave_mm`, Linux v3.16/v3.19
            // arch/x86/mm/tlb.c `flush_tlb_func`; v4.15 `flush_tlb_func_common` switches to
            // init_mm, and `switch_mm_irqs_off` clears it from the old mm's cpumask): no
            // further shootdown of that process reaches it until it runs the process again.
            kc.last_mm = None;
        }
        while let Some((sd, state)) = self.kernels[k as usize].cpus[cpu as usize].csd.pop_front() {
            let (cause, cost) = match self.remote_calls[sd as usize].kind {
                CallKind::TlbFlush => (Cause::TlbFlush, self.costs.tlb_flush_remote),
                CallKind::Membarrier => (Cause::Interrupt, 0),
            };
            let attr = self.ctx_attr(k, cpu, cause);
            self.push_work_then(k, cpu, attr, cost, Then::CallAck(sd, state));
        }
    }

    /// The state of guest (or native) CPU (`k`, `c`), a shootdown's target, right now.
    fn target_state(&self, k: KernelId, c: u32) -> TargetState {
        if k == HOST {
            return if self.kernels[k as usize].cpus[c as usize].curr.is_some() { TargetState::Running } else { TargetState::Idle };
        }
        let v = self.vcpu_of(k, c);
        match self.vcpus[v as usize].run {
            VcpuRun::Blocked { .. } => TargetState::Halted,
            VcpuRun::Halting { .. } => TargetState::HaltPolling,
            VcpuRun::Guest if self.vcpu_core(v).is_none() => TargetState::Preempted,
            VcpuRun::Guest if self.vcpu_in_guest(v) => TargetState::Running,
            VcpuRun::Guest => TargetState::InHost,
        }
    }

    /// Queued work is about to finish: the waiter it releases stops waiting now.
    pub(crate) fn before_work_done(&mut self, then: Then) {
        match then {
            Then::CallAck(sd, _) | Then::Shoot4uDone(sd) => {
                let s = &self.remote_calls[sd as usize];
                if s.pending == 1 {
                    if let Some(core) = self.thread_core(s.sender) {
                        self.touch(core);
                    }
                }
            }
        }
    }

    /// Queued work finished.
    pub(crate) fn work_done(&mut self, then: Then) {
        match then {
            Then::CallAck(sd, _) | Then::Shoot4uDone(sd) => {
                if let Then::CallAck(_, state) = then {
                    let s = &mut self.remote_calls[sd as usize];
                    s.last = state;
                    if s.kind == CallKind::TlbFlush {
                        let wait = self.now.since(s.start);
                        let inst = self.threads[s.sender as usize].inst as usize;
                        self.insts[inst].tlb.by_state[state as usize].wait_ns += wait;
                    }
                }
                let s = &mut self.remote_calls[sd as usize];
                s.pending -= 1;
                if s.pending == 0 {
                    let sender = s.sender;
                    if let Some(core) = self.thread_core(sender) {
                        self.touch(core);
                    }
                }
            }
        }
    }

    /// Whether the remote call thread `t` waits for is complete; if so, records it.
    pub(crate) fn remote_call_finished(&mut self, t: ThreadId, sd: u32) -> bool {
        let s = self.remote_calls[sd as usize];
        if s.pending > 0 {
            return false;
        }
        let lat = self.now.since(s.start);
        if self.timeline.is_some() {
            self.tl_call_done(t, s.kind, lat);
        }
        let inst = &mut self.insts[self.threads[t as usize].inst as usize];
        match s.kind {
            CallKind::TlbFlush => {
                inst.tlb.latency.record(lat);
                inst.tlb.samples.push(lat);
                let by = &mut inst.tlb.by_state[s.last as usize];
                by.critical += 1;
                by.critical_ns += lat;
            }
            CallKind::Membarrier => inst.membarrier.latency.record(lat),
        }
        self.free_remote_calls.push(sd);
        self.threads[t as usize].kdepth -= 1;
        if self.threads[t as usize].kdepth == 0 {
            self.preempt_enable(t);
        }
        true
    }
}
