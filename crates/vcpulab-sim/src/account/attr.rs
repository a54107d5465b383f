//! The attribution key: (owner, layer, cause).

use serde::Serialize;

use crate::virt::exit::ExitReason;

/// Index of an owner in the run's owner table (0 is always the host).
pub type OwnerId = u32;

/// Who a nanosecond of core time belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OwnerKind {
    /// The host itself (idle time, interrupts with no task to charge).
    Host,
    /// A workload instance running natively on the host kernel.
    Native {
        /// Instance index.
        instance: u32,
    },
    /// One vCPU of a VM (a VM's time is the sum over its vCPUs).
    Vcpu {
        /// VM index.
        vm: u32,
        /// vCPU index within the VM.
        vcpu: u32,
    },
}

/// Which software layer the time was spent in.
///
/// For a VM owner: `User` = guest user mode, `Kernel` = guest kernel, `Host` = the host
/// (KVM exit handling, host scheduling of the vCPU thread). For a native owner: `User` and
/// `Kernel` are the process's user and kernel time. For the host owner: `Host`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// User mode of the workload.
    User,
    /// The kernel that runs the workload (guest kernel in a VM, host kernel natively).
    Kernel,
    /// The host acting for a VM, or the host's own time.
    Host,
}

impl Layer {
    /// Every layer in dense order.
    pub const ALL: [Layer; 3] = [Layer::User, Layer::Kernel, Layer::Host];
    /// Reporting name.
    pub fn name(self) -> &'static str {
        match self {
            Layer::User => "user",
            Layer::Kernel => "kernel",
            Layer::Host => "host",
        }
    }
}

/// What the time was spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// Useful computation of the workload (user, or kernel work inside a kernel lock section).
    Compute,
    /// Busy-waiting in user space (user spinlock, spin barrier).
    SpinUser,
    /// Busy-waiting in kernel mode with PAUSE (kernel spinlocks).
    SpinKernel,
    /// An idle loop that polls instead of halting (guest haltpoll / idle=poll).
    IdlePoll,
    /// The core is halted (nothing runs). Not a busy cause.
    Idle,
    /// The core is leaving a C-state after a wake-up. Not a busy cause.
    CStateExit,
    /// A thread context switch inside a kernel.
    ContextSwitch,
    /// The host switching between vCPU threads (context switch + vcpu_put/vcpu_load).
    VcpuSwitch,
    /// An interrupt handler (IPI or timer) in a kernel.
    Interrupt,
    /// Sending an IPI natively (the ICR write).
    IpiSend,
    /// Programming the local timer natively (TSC-deadline write).
    TimerProgram,
    /// A synchronisation system call (futex wait/wake).
    Syscall,
    /// Host halt polling: the vCPU thread busy-waits in KVM after HLT (host layer).
    HaltPoll,
    /// A TLB-shootdown sender busy-waiting for the targets' acknowledgements
    /// (`smp_call_function_many` / `csd_lock_wait`, CPL 0).
    TlbWait,
    /// Flushing TLB entries: the sender's local flush, a target's flush handler, a deferred
    /// PV flush at VM entry, or the hypervisor's Shoot4U invalidations.
    TlbFlush,
    /// Memory-management system calls (munmap / madvise / mprotect) and page faults.
    MemoryOp,
    /// A `membarrier` caller busy-waiting for the other CPUs' function-call handlers
    /// (`smp_call_function_many` with wait, CPL 0); the handlers' own time is `interrupt`.
    CallWait,
    /// Computation slowed by where its memory is: the time beyond its native duration
    /// spent on remote accesses, saturated node bandwidth and cross-socket sharing
    /// ([`crate::machine::memory`]).
    MemoryStall,
    /// A NUMA balancer migrating a VM's memory (host layer, charged to the VM).
    NumaMigrate,
    /// The host waking a blocked vCPU thread (`try_to_wake_up` from a kick), on the waker's
    /// core (host layer, charged to the waking vCPU).
    VcpuWakeup,
    /// Handling a VM exit of the given reason (host layer, charged to the vCPU).
    Exit(ExitReason),
}

impl Cause {
    /// Causes that are not exits, in dense order.
    const BASE: [Cause; 20] = [
        Cause::Compute,
        Cause::SpinUser,
        Cause::SpinKernel,
        Cause::IdlePoll,
        Cause::Idle,
        Cause::CStateExit,
        Cause::ContextSwitch,
        Cause::VcpuSwitch,
        Cause::Interrupt,
        Cause::IpiSend,
        Cause::TimerProgram,
        Cause::Syscall,
        Cause::HaltPoll,
        Cause::TlbWait,
        Cause::TlbFlush,
        Cause::MemoryOp,
        Cause::CallWait,
        Cause::MemoryStall,
        Cause::NumaMigrate,
        Cause::VcpuWakeup,
    ];
    /// Number of distinct causes (dense index range).
    pub const COUNT: usize = Self::BASE.len() + ExitReason::COUNT;

    /// Dense index in `0..COUNT`.
    #[inline]
    pub fn index(self) -> usize {
        match self {
            Cause::Exit(r) => Self::BASE.len() + r.index(),
            c => c.base_index(),
        }
    }

    #[inline]
    fn base_index(self) -> usize {
        match self {
            Cause::Compute => 0,
            Cause::SpinUser => 1,
            Cause::SpinKernel => 2,
            Cause::IdlePoll => 3,
            Cause::Idle => 4,
            Cause::CStateExit => 5,
            Cause::ContextSwitch => 6,
            Cause::VcpuSwitch => 7,
            Cause::Interrupt => 8,
            Cause::IpiSend => 9,
            Cause::TimerProgram => 10,
            Cause::Syscall => 11,
            Cause::HaltPoll => 12,
            Cause::TlbWait => 13,
            Cause::TlbFlush => 14,
            Cause::MemoryOp => 15,
            Cause::CallWait => 16,
            Cause::MemoryStall => 17,
            Cause::NumaMigrate => 18,
            Cause::VcpuWakeup => 19,
            Cause::Exit(_) => unreachable!(),
        }
    }

    /// The cause with dense index `i`.
    pub fn from_index(i: usize) -> Cause {
        if i < Self::BASE.len() {
            Self::BASE[i]
        } else {
            Cause::Exit(ExitReason::ALL[i - Self::BASE.len()])
        }
    }

    /// Whether the core does work during this cause (counts as consumed cycles).
    pub fn is_busy(self) -> bool {
        !matches!(self, Cause::Idle | Cause::CStateExit)
    }

    /// Reporting name ("compute", "exit:HLT", ...).
    pub fn name(self) -> String {
        match self {
            Cause::Compute => "compute".into(),
            Cause::SpinUser => "spin_user".into(),
            Cause::SpinKernel => "spin_kernel".into(),
            Cause::IdlePoll => "idle_poll".into(),
            Cause::Idle => "idle".into(),
            Cause::CStateExit => "cstate_exit".into(),
            Cause::ContextSwitch => "context_switch".into(),
            Cause::VcpuSwitch => "vcpu_switch".into(),
            Cause::Interrupt => "interrupt".into(),
            Cause::IpiSend => "ipi_send".into(),
            Cause::TimerProgram => "timer_program".into(),
            Cause::Syscall => "syscall".into(),
            Cause::HaltPoll => "halt_poll".into(),
            Cause::TlbWait => "tlb_wait".into(),
            Cause::TlbFlush => "tlb_flush".into(),
            Cause::MemoryOp => "memory_op".into(),
            Cause::CallWait => "call_wait".into(),
            Cause::MemoryStall => "memory_stall".into(),
            Cause::NumaMigrate => "numa_migrate".into(),
            Cause::VcpuWakeup => "vcpu_wakeup".into(),
            Cause::Exit(r) => format!("exit:{}", r.name()),
        }
    }
}

/// One attribution key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Who.
    pub owner: OwnerId,
    /// Where.
    pub layer: Layer,
    /// On what.
    pub cause: Cause,
}

impl Attr {
    /// Dense slot of (layer, cause) within one owner's row.
    #[inline]
    pub fn slot(self) -> usize {
        self.layer as usize * Cause::COUNT + self.cause.index()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cause_indices_round_trip() {
        for i in 0..Cause::COUNT {
            assert_eq!(Cause::from_index(i).index(), i);
        }
    }
}
