//! vCPU and VM state, and the exits and interrupt paths between guest and host.

use crate::account::{Log2Histogram, OwnerId};
use crate::kernel::{irq, KernelId, KernelKind, TaskId, TaskState, HOST};
use crate::world::World;

use super::exit::ExitReason;

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
    /// Blocked in the host after HLT.
    pub halted: bool,
    /// Exits by reason.
    pub exits: [u64; ExitReason::COUNT],
    /// IPIs sent by the guest on this vCPU.
    pub ipis_sent: u64,
    /// IPIs sent to this vCPU by the guest.
    pub ipis_received: u64,
    /// HLTs that blocked the vCPU thread.
    pub halts: u64,
    /// Wake-ups of the halted vCPU thread.
    pub wakeups: u64,
    /// Times the host preempted it while runnable.
    pub preemptions: u64,
    /// Host wake-up latency (woken → running).
    pub wake_latency: Log2Histogram,
}

/// VM-wide settings and members.
#[derive(Debug)]
pub struct Vm {
    /// Its guest kernel.
    pub kernel: KernelId,
    /// Global vCPU ids, by vCPU index.
    pub vcpus: Vec<u32>,
    /// APICv on.
    pub apicv: bool,
    /// IPI virtualization on.
    pub ipiv: bool,
    /// PLE window in ns (None = PLE off).
    pub ple_window_ns: Option<u64>,
}

impl World {
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

    /// The core vCPU `v` is current on, if it is.
    #[inline]
    pub(crate) fn vcpu_core(&self, v: u32) -> Option<u32> {
        let t = &self.tasks[self.vcpus[v as usize].task as usize];
        (t.state == TaskState::Running).then_some(t.cpu)
    }

    /// vCPU `v` exits for `reason`: counts it and queues its handling cost on the vCPU's core.
    pub(crate) fn exit(&mut self, v: u32, reason: ExitReason) {
        let Some(core) = self.vcpu_core(v) else {
            debug_assert!(false, "exit of a vCPU that is not running");
            return;
        };
        let vc = &mut self.vcpus[v as usize];
        vc.exits[reason.index()] += 1;
        let attr = crate::account::Attr { owner: vc.owner, layer: crate::account::Layer::Host, cause: crate::account::Cause::Exit(reason) };
        let cost = match reason {
            ExitReason::Hlt => self.costs.exit_hlt,
            ExitReason::MsrWriteIcr => self.costs.exit_msr_icr,
            ExitReason::MsrWriteTscDeadline => self.costs.exit_msr_tsc_deadline,
            ExitReason::MsrWriteEoi => self.costs.exit_msr_eoi,
            ExitReason::PreemptionTimer => self.costs.exit_preemption_timer,
            ExitReason::ExternalInterrupt => self.costs.exit_external_interrupt,
            ExitReason::PauseInstruction => self.costs.exit_pause,
        };
        self.push_work(HOST, core, attr, cost);
    }

    /// The guest on `v` executes HLT with nothing pending: HLT exit, and the vCPU thread
    /// blocks in the host (the default handler; halt polling is a separate policy).
    pub(crate) fn vcpu_halt(&mut self, v: u32) {
        let core = self.vcpu_core(v).expect("a halting vCPU runs");
        self.exit(v, ExitReason::Hlt);
        let vc = &mut self.vcpus[v as usize];
        vc.halted = true;
        vc.halts += 1;
        self.block_curr(HOST, core, false);
    }

    /// Wakes the halted vCPU `v`'s thread; `waker_core` is the core executing the wake-up
    /// (the sender's exit handler), None for an interrupt on the vCPU's own core (its timer).
    fn vcpu_unhalt(&mut self, v: u32, waker_core: Option<u32>) {
        let vc = &mut self.vcpus[v as usize];
        vc.halted = false;
        vc.wakeups += 1;
        let task = vc.task;
        self.wake_task(task, waker_core.map(|c| (HOST, c)));
    }

    /// Platform part of raising an interrupt on guest CPU (`k`, `cpu`); the pending bit is
    /// already set.
    pub(crate) fn virt_deliver(&mut self, k: KernelId, cpu: u32, kind: u8) {
        let v = self.vcpu_of(k, cpu);
        if self.vcpus[v as usize].halted {
            self.vcpu_unhalt(v, None);
            return;
        }
        let Some(core) = self.vcpu_core(v) else { return }; // preempted: injected at next entry
        let in_guest = self.kernels[0].cpus[core as usize].kwork.is_empty();
        if in_guest {
            if kind & irq::TIMER != 0 {
                self.exit(v, ExitReason::PreemptionTimer);
            } else if !self.vm_of(k).apicv {
                self.exit(v, ExitReason::ExternalInterrupt);
            }
        }
        self.touch(core);
    }

    /// A guest IPI: the sender's ICR write exits (unless IPIv); a halted target is woken by
    /// the host from the sender's exit handler, a running or preempted one gets it posted.
    pub(crate) fn virt_send_ipi(&mut self, k: KernelId, from: u32, to: u32, kind: u8) {
        let (vf, vt) = (self.vcpu_of(k, from), self.vcpu_of(k, to));
        self.vcpus[vf as usize].ipis_sent += 1;
        self.vcpus[vt as usize].ipis_received += 1;
        if !self.vm_of(k).ipiv {
            self.exit(vf, ExitReason::MsrWriteIcr);
        }
        if self.vcpus[vt as usize].halted {
            self.kernels[k as usize].cpus[to as usize].pending |= kind;
            let waker = self.vcpu_core(vf);
            self.vcpu_unhalt(vt, waker);
        } else {
            let at = self.now + self.costs.ipi_posted_latency;
            self.q.schedule(at, crate::world::Ev::Ipi { k, cpu: to, kind });
        }
    }

    /// A PLE exit of vCPU `v` (its guest spun in kernel mode for a whole window). The simple
    /// default handler: exit, and give the core to another runnable host task if there is one.
    pub(crate) fn ple_exit(&mut self, v: u32) {
        let Some(core) = self.vcpu_core(v) else { return };
        self.exit(v, ExitReason::PauseInstruction);
        if !self.kernels[0].cpus[core as usize].rq.is_empty() {
            self.yield_curr(HOST, core);
        }
    }
}
