//! VM exit reasons. Names follow `perf kvm stat` / the VMX exit-reason table
//! (linux: arch/x86/include/uapi/asm/vmx.h); the two MSR writes the research separates
//! (TPDS §6: ICR for IPIs, TSC_DEADLINE for the timer) are kept apart here and can be summed
//! to compare with `perf kvm stat`'s single `MSR_WRITE` row.

use serde::Serialize;

/// Why a vCPU left guest mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ExitReason {
    /// The guest executed HLT (idle).
    Hlt,
    /// WRMSR to the x2APIC ICR (0x830): the guest sends an IPI.
    MsrWriteIcr,
    /// WRMSR to IA32_TSC_DEADLINE (0x6e0): the guest (re)programs its timer.
    MsrWriteTscDeadline,
    /// WRMSR to the x2APIC EOI register (0x80b): only without APICv.
    MsrWriteEoi,
    /// The VMX preemption timer backing the guest's TSC-deadline timer expired.
    PreemptionTimer,
    /// A host interrupt arrived on the pCPU while the vCPU was in guest mode.
    ExternalInterrupt,
    /// Pause-loop exiting: the vCPU spun in guest kernel mode longer than its PLE window.
    PauseInstruction,
    /// A hypercall (VMCALL): PV kick, PV send-IPI, PV sched yield, Shoot4U.
    Vmcall,
    /// Interrupt-window exiting: without APICv, KVM injects one interrupt per VM entry and, if
    /// another is pending, asks to exit as soon as the guest can take it (Linux
    /// arch/x86/kvm/x86.c `kvm_check_and_inject_events` → `enable_irq_window`; with virtual
    /// interrupt delivery `kvm_cpu_has_injectable_intr` leaves LAPIC interrupts to the CPU,
    /// arch/x86/kvm/irq.c; Intel SDM Vol. 3C, "Interrupt-Window Exiting and Virtual-Interrupt
    /// Delivery").
    InterruptWindow,
    /// A guest exception KVM intercepts: here #NM (device not available), the guest's first
    /// FPU/SSE instruction after KVM deactivated the guest FPU at the last `vcpu_put`
    /// (`vm.lazy_fpu`; Linux v3.19 arch/x86/kvm/vmx.c `handle_exception` →
    /// `vmx_fpu_activate`). perf kvm names the exit EXCEPTION_NMI.
    ExceptionNmi,
}

impl ExitReason {
    /// Every reason, in a fixed order (the dense index order).
    pub const ALL: [ExitReason; 10] = [
        ExitReason::Hlt,
        ExitReason::MsrWriteIcr,
        ExitReason::MsrWriteTscDeadline,
        ExitReason::MsrWriteEoi,
        ExitReason::PreemptionTimer,
        ExitReason::ExternalInterrupt,
        ExitReason::PauseInstruction,
        ExitReason::Vmcall,
        ExitReason::InterruptWindow,
        ExitReason::ExceptionNmi,
    ];
    /// Number of reasons.
    pub const COUNT: usize = Self::ALL.len();

    /// Dense index in `0..COUNT`.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in reports (perf-kvm style, with the MSR written where it matters).
    pub fn name(self) -> &'static str {
        match self {
            ExitReason::Hlt => "HLT",
            ExitReason::MsrWriteIcr => "MSR_WRITE_ICR",
            ExitReason::MsrWriteTscDeadline => "MSR_WRITE_TSC_DEADLINE",
            ExitReason::MsrWriteEoi => "MSR_WRITE_EOI",
            ExitReason::PreemptionTimer => "PREEMPTION_TIMER",
            ExitReason::ExternalInterrupt => "EXTERNAL_INTERRUPT",
            ExitReason::PauseInstruction => "PAUSE_INSTRUCTION",
            ExitReason::Vmcall => "VMCALL",
            ExitReason::InterruptWindow => "INTERRUPT_WINDOW",
            ExitReason::ExceptionNmi => "EXCEPTION_NMI",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense() {
        for (i, r) in ExitReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
