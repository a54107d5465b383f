//! The virtualization layer between a guest kernel and the host.
//!
//! A vCPU is at once a CPU of its guest kernel and a task (thread) of the host kernel. Its
//! guest CPU makes progress only while that task is current on a core and the host has no
//! overhead queued there (guest mode). Sensitive guest operations become exits charged to the
//! vCPU in the host layer: HLT (the vCPU thread blocks in the host until an interrupt wakes
//! it), TSC_DEADLINE writes, ICR writes for IPIs, preemption-timer expiry, external
//! interrupts, PLE. Interrupts for a running vCPU are posted (APICv) or cost an exit; for a
//! halted vCPU the host wakes its thread; for a preempted vCPU they wait for the next entry.

pub mod allocation;
pub mod exit;
pub mod halt_poll;
pub mod ple;
pub mod pv;
pub mod vcpu;
