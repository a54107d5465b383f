//! Measurements of real programs on this machine, for the bridge commands (`vcpulab
//! characterize`, `vcpulab mitigate`): Linux performance counters that follow a process and
//! every thread and child it creates.
//!
//! ```text
//!   parent                               child (stopped before exec)
//!   ──────                               ───────────────────────────
//!   PerfCounters::attach(pid, events) ─► counters opened on pid: inherit, enable on exec
//!   release the child ─────────────────► exec(program)  ── counting starts here
//!   wait for it                          threads, children: counted too
//!   read() ◄────────────────────────────  exit
//! ```
//!
//! Software events (`context-switches`, `cpu-migrations`, `page-faults`, `task-clock`) and
//! kernel tracepoints (`syscalls:sys_enter_madvise`, ...) are supported. An event the kernel
//! does not offer here (no tracefs, no permission) is not an error of the whole measurement:
//! it is reported as unavailable, with the reason.

mod perf;

pub use perf::{EventCount, PerfCounters};
