//! A kernel CPU's life: interrupts, the reschedule point, queued overhead, the idle path
//! (newidle balance, tick stop, HLT or polling), the local timer (tick + hrtimers, with
//! reprogramming on every change of the earliest deadline) and IPIs.
//!
//! [`World::step_core`] walks core → host CPU → (vCPU → guest CPU) → thread and performs
//! one state change or returns the leaf the core executes.

use crate::account::{Attr, Cause, Layer, OwnerKind};
use crate::engine::SimTime;
use crate::spec::kernel::IdlePolicy;
use crate::virt::exit::ExitReason;
use crate::virt::vcpu::ipi_kind;
use crate::world::{Leaf, Rem, Step, World};

use super::{irq, IdleState, KernelId, KernelKind, TaskKind, HOST};

impl World<'_> {
    /// One resolution step for `core`.
    pub(crate) fn step_core(&mut self, core: u32) -> Step {
        if let Some(s) = self.halting_preempt_check(core) {
            return s;
        }
        if let Some(s) = self.step_common(HOST, core) {
            return s;
        }
        match self.kernels[0].cpus[core as usize].curr {
            None => self.step_idle(HOST, core),
            Some(task) => match self.tasks[task as usize].kind {
                TaskKind::Thread(t) => self.step_thread(HOST, core, t),
                TaskKind::Vcpu(v) => self.step_guest(v),
            },
        }
    }

    /// A halting vCPU whose core must reschedule stops polling and blocks instead of being
    /// preempted (`kvm_vcpu_halt`'s loop checks `need_resched()`).
    fn halting_preempt_check(&mut self, core: u32) -> Option<Step> {
        let hc = &self.kernels[0].cpus[core as usize];
        if !hc.need_resched || hc.pending != 0 {
            return None;
        }
        let Some(TaskKind::Vcpu(v)) = hc.curr.map(|t| self.tasks[t as usize].kind) else { return None };
        if !matches!(self.vcpus[v as usize].run, crate::virt::vcpu::VcpuRun::Halting { .. }) {
            return None;
        }
        Some(self.step_halting(v, core))
    }

    /// The vCPU `v` is current on its core and the host has nothing queued: guest mode.
    fn step_guest(&mut self, v: u32) -> Step {
        let core = self.vcpu_core(v).expect("a vCPU in guest mode runs");
        if matches!(self.vcpus[v as usize].run, crate::virt::vcpu::VcpuRun::Halting { .. }) {
            return self.step_halting(v, core);
        }
        self.ple_reentry(core);
        self.ple_spin_done(v);
        let (k, cpu) = (self.vcpus[v as usize].kernel, self.vcpus[v as usize].idx);
        if std::mem::take(&mut self.kernels[k as usize].cpus[cpu as usize].pv_unhalted) {
            self.touch(core);
        }
        if let Some(s) = self.step_common(k, cpu) {
            return s;
        }
        match self.kernels[k as usize].cpus[cpu as usize].curr {
            None => self.step_idle(k, cpu),
            Some(task) => match self.tasks[task as usize].kind {
                TaskKind::Thread(t) => self.step_thread(k, cpu, t),
                TaskKind::Vcpu(_) => unreachable!("guest kernels schedule threads only"),
            },
        }
    }

    /// Interrupts, then queued overhead, then the reschedule point.
    fn step_common(&mut self, k: KernelId, cpu: u32) -> Option<Step> {
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.pending != 0 {
            let p = std::mem::take(&mut kc.pending);
            self.handle_irqs(k, cpu, p);
            return Some(Step::Again);
        }
        // Queued kernel work (exit handling, a context switch, an interrupt handler) runs to
        // its end before the reschedule point: the kernel is not preempted inside it, so a
        // reschedule requested meanwhile takes effect once, afterwards.
        if let Some(w) = kc.kwork.front() {
            if w.rem == 0 {
                if let Some(t) = w.then {
                    // Close the intervals its completion ends while the work is still queued,
                    // so they are charged to this state (wait chains see who was waited for).
                    self.before_work_done(t);
                }
                let then = self.kernels[k as usize].cpus[cpu as usize].kwork.pop_front().and_then(|w| w.then);
                if let Some(t) = then {
                    self.work_done(t);
                }
                return Some(Step::Again);
            }
            let rem = if k == HOST { Rem::HostWork } else { Rem::GuestWork(k, cpu) };
            return Some(Step::Leaf(Leaf { attr: w.attr, rem, thread: None }));
        }
        if kc.need_resched {
            self.schedule(k, cpu);
            return Some(Step::Again);
        }
        None
    }

    /// Handles the interrupts in `p` on a CPU that is executing (for a guest: injected at
    /// VM entry).
    fn handle_irqs(&mut self, k: KernelId, cpu: u32, p: u8) {
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        let was = std::mem::replace(&mut kc.idle, IdleState::Awake);
        if k == HOST {
            let curr = kc.curr;
            let host_busy = !kc.kwork.is_empty();
            if matches!(was, IdleState::Halted | IdleState::Mwait) {
                let attr = Attr { owner: 0, layer: Layer::Host, cause: Cause::CStateExit };
                self.push_work(HOST, cpu, attr, self.costs.c1_exit);
            }
            if let Some(TaskKind::Vcpu(v)) = curr.map(|t| self.tasks[t as usize].kind) {
                if !host_busy {
                    self.exit(v, ExitReason::ExternalInterrupt);
                }
            }
        } else {
            let v = self.vcpu_of(k, cpu);
            let vc = &mut self.vcpus[v as usize];
            vc.ple_epoch = vc.ple_epoch.wrapping_add(1);
            let (apicv, pv_eoi) = (self.vspec(v).apicv, self.vspec(v).pv.eoi);
            if !apicv {
                // Without virtual-interrupt delivery KVM injects one interrupt per entry: each
                // further pending one costs an interrupt-window exit (x86.c
                // `kvm_check_and_inject_events`, irq.c `kvm_cpu_has_injectable_intr`). Each
                // handler ends with an EOI write, which exits unless PV EOI is armed; KVM arms
                // it only when nothing else is pending (lapic.c `apic_sync_pv_eoi_to_guest`:
                // "IRR set ... could be nested"), so with PV EOI only the last one is free.
                let pending = irq::vectors(p);
                for _ in 1..pending {
                    self.exit(v, ExitReason::InterruptWindow);
                }
                let eoi_exits = if pv_eoi { pending.saturating_sub(1) } else { pending };
                for _ in 0..eoi_exits {
                    self.exit(v, ExitReason::MsrWriteEoi);
                }
            }
        }
        if was == IdleState::Halted {
            self.haltpoll_woken(k, cpu);
        }
        let attr = self.ctx_attr(k, cpu, Cause::Interrupt);
        self.push_work(k, cpu, attr, self.costs.irq_handler);
        if p & irq::CALL_FUNC != 0 {
            self.run_csds(k, cpu);
        }
        if p & irq::TIMER != 0 {
            self.timer_fire(k, cpu);
        }
        if p & irq::RESCHED != 0 {
            self.kernels[k as usize].cpus[cpu as usize].need_resched = true;
        }
    }

    /// The idle path of a CPU with nothing to run.
    fn step_idle(&mut self, k: KernelId, cpu: u32) -> Step {
        let params = &self.kernels[k as usize].params;
        let (tickless, policy) = (params.tickless, params.idle);
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        if kc.idle == IdleState::Awake && self.idle_balance(k, cpu) {
            return Step::Again;
        }
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        // The haltpoll governor keeps the tick while polling and stops it when it halts.
        let keeps_tick = policy == IdlePolicy::Haltpoll && k != HOST;
        if tickless && kc.tick_on && !keeps_tick {
            kc.tick_on = false;
            self.update_timer(k, cpu);
            return Step::Again;
        }
        match policy {
            IdlePolicy::Haltpoll if k != HOST => self.step_haltpoll(k, cpu),
            IdlePolicy::Poll => {
                self.kernels[k as usize].cpus[cpu as usize].idle = IdleState::Polling;
                let attr = if k == HOST {
                    Attr { owner: 0, layer: Layer::Host, cause: Cause::IdlePoll }
                } else {
                    self.ctx_attr(k, cpu, Cause::IdlePoll)
                };
                Step::Leaf(Leaf { attr, rem: Rem::Inf, thread: None })
            }
            IdlePolicy::Halt | IdlePolicy::Haltpoll | IdlePolicy::Mwait if k == HOST => {
                let state = if policy == IdlePolicy::Mwait { IdleState::Mwait } else { IdleState::Halted };
                self.kernels[0].cpus[cpu as usize].idle = state;
                Step::Leaf(Leaf { attr: Attr { owner: 0, layer: Layer::Host, cause: Cause::Idle }, rem: Rem::Inf, thread: None })
            }
            IdlePolicy::Halt | IdlePolicy::Haltpoll | IdlePolicy::Mwait => {
                self.guest_idle_halt(k, cpu);
                Step::Again
            }
        }
    }

    /// The attribution of kernel overhead on `cpu` of kernel `k` right now.
    pub(crate) fn ctx_attr(&self, k: KernelId, cpu: u32, cause: Cause) -> Attr {
        if k != HOST {
            let v = self.vcpu_of(k, cpu);
            return Attr { owner: self.vcpus[v as usize].owner, layer: Layer::Kernel, cause };
        }
        match self.kernels[0].cpus[cpu as usize].curr {
            Some(t) => {
                let owner = self.tasks[t as usize].owner;
                let layer = match self.owners[owner as usize] {
                    OwnerKind::Vcpu { .. } => Layer::Host,
                    OwnerKind::Native { .. } => Layer::Kernel,
                    OwnerKind::Host => Layer::Host,
                };
                Attr { owner, layer, cause }
            }
            None => Attr { owner: 0, layer: Layer::Host, cause },
        }
    }

    /// The core a kernel CPU executes on right now, if any.
    pub(crate) fn kcpu_core(&self, k: KernelId, cpu: u32) -> Option<u32> {
        match self.kernels[k as usize].kind {
            KernelKind::Host => Some(cpu),
            KernelKind::Guest { .. } => self.vcpu_core(self.vcpu_of(k, cpu)),
        }
    }

    /// Touches the core under a kernel CPU (if it is on one).
    pub(crate) fn touch_kcpu(&mut self, k: KernelId, cpu: u32) {
        if let Some(c) = self.kcpu_core(k, cpu) {
            self.touch(c);
        }
    }

    // ---------------------------------------------------------------- timers

    /// Reprograms the local timer if its earliest deadline changed (natively a cheap WRMSR;
    /// in a guest a TSC_DEADLINE MSR-write exit).
    pub(crate) fn update_timer(&mut self, k: KernelId, cpu: u32) {
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        let tick = if kc.tick_on { kc.next_tick } else { SimTime::NEVER };
        let sleep = kc.sleepers.first().map_or(SimTime::NEVER, |&(t, _)| t);
        let want = tick.min(sleep);
        if want == kc.programmed {
            return;
        }
        kc.programmed = want;
        kc.timer_gen = kc.timer_gen.wrapping_add(1);
        if want != SimTime::NEVER {
            let gen = kc.timer_gen;
            self.q.schedule(want.max(self.now), crate::world::Ev::Timer { k, cpu, gen });
        }
        if k == HOST {
            let attr = self.ctx_attr(k, cpu, Cause::TimerProgram);
            self.push_work(k, cpu, attr, self.costs.timer_program);
        } else {
            let v = self.vcpu_of(k, cpu);
            self.exit(v, ExitReason::MsrWriteTscDeadline);
        }
    }

    /// The local timer's deadline passed.
    pub(crate) fn timer_event(&mut self, k: KernelId, cpu: u32, gen: u32) {
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.timer_gen != gen {
            return;
        }
        kc.programmed = SimTime::NEVER;
        self.raise_irq(k, cpu, irq::TIMER);
    }

    /// Timer interrupt handling: tick work, expired hrtimers, reprogramming.
    fn timer_fire(&mut self, k: KernelId, cpu: u32) {
        let next = self.kernels[k as usize].next_tick_after(self.now);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.tick_on && kc.next_tick <= self.now {
            kc.next_tick = next;
            let attr = self.ctx_attr(k, cpu, Cause::Interrupt);
            self.push_work(k, cpu, attr, self.costs.tick_handler);
            self.tick_sched(k, cpu);
        }
        while let Some(&(t, th)) = self.kernels[k as usize].cpus[cpu as usize].sleepers.first() {
            if t > self.now {
                break;
            }
            self.kernels[k as usize].cpus[cpu as usize].sleepers.pop_first();
            self.wake_thread(th, (k, cpu));
        }
        self.update_timer(k, cpu);
    }

    // ---------------------------------------------------------------- interrupts

    /// Raises interrupt `kind` on a kernel CPU: natively it is handled at once; for a vCPU the
    /// virtualization layer decides (exit, posted delivery, wake-up, or pending until entry).
    pub(crate) fn raise_irq(&mut self, k: KernelId, cpu: u32, kind: u8) {
        if k == HOST {
            self.touch(cpu);
            self.kernels[0].cpus[cpu as usize].pending |= kind;
        } else {
            self.kernels[k as usize].cpus[cpu as usize].pending |= kind;
            self.virt_deliver(k, cpu, kind);
        }
    }

    /// Sends an IPI from one CPU of kernel `k` to another.
    pub(crate) fn send_ipi(&mut self, k: KernelId, from: u32, to: u32, kind: u8) {
        let ki = if kind & irq::CALL_FUNC != 0 { ipi_kind::CALL } else { ipi_kind::RESCHED };
        self.send_ipi_ex(k, from, to, kind, ki, true);
    }

    /// Sends an IPI counted as [`ipi_kind`] `ki`; `sender_cost` false when the sender already
    /// paid for a multi-target send (a PV send-IPI hypercall).
    pub(crate) fn send_ipi_ex(&mut self, k: KernelId, from: u32, to: u32, kind: u8, ki: usize, sender_cost: bool) {
        if k == HOST {
            if sender_cost {
                let attr = self.ctx_attr(k, from, Cause::IpiSend);
                self.push_work(k, from, attr, self.costs.ipi_send);
            }
            let at = self.now + self.send_delay(from) + self.costs.ipi_latency;
            if self.timeline.is_some() {
                self.tl_ipi_send(k, from, to, kind, ki, at);
            }
            self.q.schedule(at, crate::world::Ev::Ipi { k, cpu: to, kind });
        } else {
            self.virt_send_ipi(k, from, to, kind, ki, sender_cost);
        }
    }

    /// A guest CPU's idle loop halts: HLT (an exit, then KVM's halt polling).
    fn guest_idle_halt(&mut self, k: KernelId, cpu: u32) {
        let v = self.vcpu_of(k, cpu);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        kc.idle = IdleState::Halted;
        kc.halt_since = Some(self.now);
        self.vcpu_halt(v);
    }

    /// The guest cpuidle-haltpoll governor (`haltpoll_select`, Linux drivers/cpuidle/governors/haltpoll.c): poll while the
    /// limit allows (tick kept running), else halt.
    fn step_haltpoll(&mut self, k: KernelId, cpu: u32) -> Step {
        let v = self.vcpu_of(k, cpu);
        self.vcpus[v as usize].poll_control_off = true;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.idle == IdleState::Awake {
            if kc.hp_limit == 0 || kc.hp_timed_out {
                kc.hp_timed_out = false;
                return self.haltpoll_halt(k, cpu);
            }
            kc.idle = IdleState::Polling;
            kc.hp_poll_rem = kc.hp_limit;
        }
        if kc.idle == IdleState::Polling {
            if kc.hp_poll_rem == 0 {
                kc.hp_timed_out = true;
                kc.idle = IdleState::Awake;
                return Step::Again;
            }
            let attr = self.ctx_attr(k, cpu, Cause::IdlePoll);
            return Step::Leaf(Leaf { attr, rem: Rem::GuestPoll(k, cpu), thread: None });
        }
        Step::Again
    }

    /// Haltpoll chose to halt: stop the tick (NO_HZ_IDLE), then HLT.
    fn haltpoll_halt(&mut self, k: KernelId, cpu: u32) -> Step {
        let tickless = self.kernels[k as usize].params.tickless;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if tickless && kc.tick_on {
            kc.tick_on = false;
            self.update_timer(k, cpu);
        }
        self.guest_idle_halt(k, cpu);
        Step::Again
    }

    /// A guest CPU's halted idle ended: the haltpoll governor adapts its poll limit to the
    /// halt's length (`adjust_poll_limit`).
    fn haltpoll_woken(&mut self, k: KernelId, cpu: u32) {
        let params = &self.kernels[k as usize].params;
        let (policy, hp) = (params.idle, params.haltpoll.clone());
        let now = self.now;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        let Some(since) = kc.halt_since.take() else { return };
        if policy != IdlePolicy::Haltpoll {
            return;
        }
        let block_ns = now.since(since);
        if block_ns > kc.hp_limit && block_ns <= hp.max.0 {
            let grown = kc.hp_limit.saturating_mul(u64::from(hp.grow)).max(hp.grow_start.0);
            kc.hp_limit = grown.min(hp.max.0);
        } else if block_ns > hp.max.0 && hp.allow_shrink {
            kc.hp_limit = if hp.shrink == 0 { 0 } else { kc.hp_limit / u64::from(hp.shrink) };
        }
    }
}
