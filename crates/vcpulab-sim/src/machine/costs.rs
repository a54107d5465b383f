//! The cost table: every latency a mechanism charges, in nanoseconds.
//!
//! Defaults are for a Skylake-SP class server at 2.4 GHz (the TPDS testbed); each field names its
//! source (keys of docs/references.md). Cycle figures are converted at 2.4 GHz. Values no source
//! measured are marked *estimate*. Every value can be overridden in `[machine.costs]`; calibration
//! changes this table, never the mechanism code.

use serde::{Deserialize, Serialize};

/// Latencies in nanoseconds. See the module documentation for provenance rules.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Costs {
    // ---- VM exits: exit + handling + entry, charged to the vCPU in the host layer ----
    /// HLT exit handled before the vCPU thread blocks (or polls). A trivial exit costs
    /// ~1,000–2,500 cycles on Skylake–SPR (kvm-unit-tests `vmexit`-style figures, *estimate*); 1,700 cycles ≈ 700 ns.
    pub exit_hlt: u64,
    /// TSC_DEADLINE MSR write exit (fastpath). `tscdeadline_immed` = 2,468 cycles with APICv
    /// for write exit + timer exit + injection (Wanpeng Li 2020, TSCDL in docs/references.md, Skylake-SP): half ≈ 515 ns.
    pub exit_msr_tsc_deadline: u64,
    /// ICR MSR write exit (the guest sends an IPI). The guest IPI round trip is ~4,300 cycles
    /// with APICv (IPIV: kvm-unit-tests `ipi`): ~1,500 cycles of it are the sender's exit ≈ 625 ns (*estimate*).
    pub exit_msr_icr: u64,
    /// EOI MSR write exit; only without APICv, and with PV EOI only for an interrupt handled
    /// while another was pending (Linux arch/x86/kernel/kvm.c `kvm_guest_apic_eoi_write`,
    /// arch/x86/kvm/lapic.c `apic_sync_pv_eoi_to_guest`). A trivial exit ≈ 500 ns.
    pub exit_msr_eoi: u64,
    /// Interrupt-window exit and the injection that follows; only without APICv, once for
    /// every interrupt pending behind another (see `ExitReason::InterruptWindow`). A trivial
    /// exit ≈ 500 ns (*estimate*, as `exit_external_interrupt`).
    pub exit_interrupt_window: u64,
    /// VMX preemption-timer exit when the guest's deadline expires while it runs
    /// (fastpath; other half of `tscdeadline_immed`, TSCDL) ≈ 515 ns.
    pub exit_preemption_timer: u64,
    /// External-interrupt exit: a host interrupt (host tick, host IPI, or a kick without
    /// APICv) arrives while the vCPU is in guest mode. Trivial exit ≈ 500 ns (*estimate*).
    pub exit_external_interrupt: u64,
    /// PAUSE (PLE) exit handling, excluding the directed-yield decision ≈ 625 ns (*estimate*).
    pub exit_pause: u64,
    /// Delivery of a posted interrupt from a sender's exit to a running target (APICv):
    /// notification IPI + PIR sync ≈ 300 ns (IPI round trip minus the two ends, IPIV).
    pub ipi_posted_latency: u64,

    // ---- native kernel operations (any kernel: host, native, guest) ----
    /// Sending an IPI natively (x2APIC ICR write) ≈ 150 ns (*estimate*).
    pub ipi_send: u64,
    /// Native IPI delivery, send to handler entry: 0.5–2 µs (common measurements, *estimate*) → 1 µs.
    pub ipi_latency: u64,
    /// An interrupt handler (reschedule IPI, timer interrupt) incl. entry/exit ≈ 400 ns
    /// (*estimate*).
    pub irq_handler: u64,
    /// The scheduler tick's work (`scheduler_tick`, accounting) ≈ 600 ns (*estimate*).
    pub tick_handler: u64,
    /// Programming the TSC-deadline timer natively (WRMSR) ≈ 50 ns (*estimate*).
    pub timer_program: u64,
    /// A futex system call (wait or wake) excluding any IPI it sends ≈ 300 ns (*estimate*).
    pub syscall_futex: u64,
    /// Time under a futex hash bucket's spinlock per waiter queued (`futex_wait`: read the
    /// word, `queue_me`) or woken (`futex_wake`: `mark_wake_futex` / `wake_futex` bookkeeping,
    /// the `try_to_wake_up` itself excluded) ≈ 250 cycles ≈ 100 ns (*estimate*;
    /// [`crate::kernel::futex`]).
    pub futex_hb: u64,
    /// Time under a socket's spinlock per message queued (`write`) or dequeued (`read`) on a
    /// socket queue (`impl = "socket"`: `unix_state_lock`, `skb_queue_tail` / `skb_unlink`)
    /// ≈ 500 cycles ≈ 200 ns (*estimate*).
    pub sock_lock: u64,
    /// A thread context switch on one CPU: 1–2 µs (lmbench-style measurements, *estimate*).
    pub context_switch: u64,
    /// Host switch between vCPU threads: context switch + vcpu_put/vcpu_load + entry,
    /// 3–6 µs plus cache refill (*estimate*) → 4 µs.
    pub vcpu_switch: u64,
    /// Exit latency of C1, the only idle state used (TPDS disabled deeper states): SKX 2 µs
    /// (linux: drivers/idle/intel_idle.c).
    pub c1_exit: u64,
    /// Local TLB flush (full, CR3 reload / INVPCID) ≈ 200 ns; single pages cost ~100 ns each
    /// (linux: arch/x86/mm/tlb.c comment). Used by the TLB shootdown model.
    pub tlb_flush_local: u64,
    /// Flush handler run by a remote target of a shootdown (IPI handler + flush) ≈ 1 µs
    /// (native shootdown of one target 1–3 µs, AMIT17, AMIT20). Used by the TLB shootdown model.
    pub tlb_flush_remote: u64,

    // ---- mechanisms of the KVM-mechanisms issue ----
    /// One PAUSE instruction: ~140 cycles on Skylake-SP (Intel optimization manual, OPT)
    /// ≈ 58 ns at 2.4 GHz. A PV spinlock waiter spins `SPIN_THRESHOLD` × this before halting.
    pub pause: u64,
    /// One INVLPG (single-page flush) ≈ 100 ns (linux: arch/x86/mm/tlb.c comment).
    pub invlpg: u64,
    /// An mm system call (munmap / madvise / mprotect): entry, VMA work and PTE zapping
    /// ≈ 1 µs (*estimate*), TLB flushing excluded.
    pub syscall_mm: u64,
    /// A page fault on a page the heap returned to the kernel (fault + zeroing 4 KiB)
    /// ≈ 700 ns (*estimate*).
    pub page_fault: u64,
    /// One page moved between the buddy free lists and a per-CPU page list while holding
    /// `zone->lock` (`rmqueue_bulk` / `free_pcppages_bulk`, [`crate::kernel::mm`]): list
    /// manipulation, buddy merging and counters on a few `struct page` lines ≈ 150 cycles
    /// ≈ 60 ns (*estimate*).
    pub zone_page: u64,
    /// One page put on or taken off an LRU list while holding the LRU lock
    /// (`__pagevec_lru_add_fn` / `release_pages`): flag updates, list insert or delete,
    /// vmstat counters ≈ 100 cycles ≈ 40 ns (*estimate*).
    pub lru_page: u64,
    /// A hypercall (VMCALL) exit: trivial exit ≈ 625 ns like the ICR write (*estimate*).
    pub exit_vmcall: u64,
    /// `yield_to()` in the host: both run-queue locks, buddy marking ≈ 500 ns (*estimate*).
    pub yield_to: u64,
    /// Examining one vCPU in `kvm_vcpu_on_spin`'s candidate scan ≈ 20 ns (*estimate*).
    pub ple_scan_per_vcpu: u64,
    /// Shoot4U: the hypervisor invalidating one running target vCPU's TLB from the sender's
    /// hypercall: host IPI to the target's pCPU, INVVPID there, acknowledgement — a native
    /// IPI round trip of 2 × 0.5–2 µs → 2 µs (*estimate*; see docs/costs.md).
    pub shoot4u_remote: u64,

    // ---- scalability and asymmetric vCPUs (DIS ch.4-5) ----
    /// A vCPU thread running on a different core than last time (host load balancing, or the
    /// asymmetric-vCPU resolver's swaps): `vmx_vcpu_load` clears the VMCS on the old CPU by
    /// IPI and loads it on the new one (~2-3 µs, like a vCPU switch without the context
    /// switch) plus the stalls of refilling L1/L2 with the vCPU's working set (*estimate*)
    /// → 10 µs, charged to the vCPU (host layer, `vcpu_switch` cause) on top of the switch.
    pub vcpu_migration: u64,

    // ---- the halt-and-wake path (issue: idle vCPUs on the critical path) ----
    /// The host waking a blocked vCPU thread from a kick (`kvm_vcpu_kick` →
    /// `kvm_vcpu_wake_up` → `try_to_wake_up`: `select_task_rq_fair`, `enqueue_task_fair`,
    /// `check_preempt_curr`, the remote wake-up queue), charged on the waker's core to the
    /// waking vCPU (host layer, cause `vcpu_wakeup`, reported under SCHED) on top of the
    /// exit that sent the interrupt and the host IPI (`ipi_send`) to the target core.
    pub host_wakeup: u64,
    /// Saving the guest's FPU state and restoring the host thread's at `vcpu_put` (XSAVEOPT +
    /// XRSTOR), with `vm.lazy_fpu` (KVM before Linux 4.15: `kvm_arch_vcpu_put` →
    /// `kvm_put_guest_fpu`); charged to the vCPU (host layer, `vcpu_switch`) at every
    /// switch-out.
    pub fpu_switch: u64,
    /// The #NM exit of the guest's first FPU use after an entry with the guest FPU
    /// deactivated (`vm.lazy_fpu`): a light exit plus reloading the guest state
    /// (`kvm_load_guest_fpu`: XRSTOR after saving the host's).
    pub exit_exception_nm: u64,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            exit_hlt: 700,
            exit_msr_tsc_deadline: 515,
            exit_msr_icr: 625,
            exit_msr_eoi: 500,
            exit_interrupt_window: 500,
            exit_preemption_timer: 515,
            exit_external_interrupt: 500,
            exit_pause: 625,
            ipi_posted_latency: 300,
            ipi_send: 150,
            ipi_latency: 1_000,
            irq_handler: 400,
            tick_handler: 600,
            timer_program: 50,
            syscall_futex: 300,
            futex_hb: 100,
            sock_lock: 200,
            context_switch: 1_500,
            vcpu_switch: 4_000,
            c1_exit: 2_000,
            tlb_flush_local: 200,
            tlb_flush_remote: 1_000,
            pause: 58,
            invlpg: 100,
            syscall_mm: 1_000,
            page_fault: 700,
            zone_page: 60,
            lru_page: 40,
            exit_vmcall: 625,
            yield_to: 500,
            ple_scan_per_vcpu: 20,
            shoot4u_remote: 2_000,
            vcpu_migration: 10_000,
            host_wakeup: 1_000,
            fpu_switch: 200,
            exit_exception_nm: 800,
        }
    }
}
