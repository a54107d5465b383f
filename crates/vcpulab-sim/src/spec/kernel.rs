//! Kernel settings (`[host]` and `[guest]`): tick, idle policy, CFS tunables.
//!
//! Defaults follow the TPDS setup (Ubuntu 18.04, Linux 4.15: CFS, CONFIG_HZ=250, NO_HZ_IDLE,
//! HLT idle in guests). CFS tunables are the normalised values scaled by
//! `1 + ilog2(min(ncpus, 8))` (SCHED_TUNABLESCALING_LOG) unless set explicitly (Linux 4.15 kernel/sched/fair.c).

use serde::{Deserialize, Serialize};

use super::types::Dur;

/// What an idle CPU does.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IdlePolicy {
    /// Execute HLT (in a VM: an HLT exit; natively: C1).
    Halt,
    /// Spin in the idle loop with TIF_POLLING set (`idle=poll`; in a guest this is what
    /// the DIS diagnosis uses to remove vCPU switches).
    Poll,
    /// The guest cpuidle-haltpoll driver and governor: poll for an adaptive time, then HLT;
    /// the guest disables host halt polling for its vCPUs (MSR_KVM_POLL_CONTROL = 0;
    /// Linux drivers/cpuidle/governors/haltpoll.c). Only meaningful in `[guest]`; in `[host]` it behaves as `halt`.
    Haltpoll,
    /// MWAIT in C1 with TIF_POLLING set (intel_idle, `mwait_idle_with_hints`: the CPU monitors
    /// its thread-info flags): a waker sets need_resched with `set_nr_if_polling` and the
    /// store to the monitored line wakes the CPU, so a wake-up sends no IPI and runs no
    /// interrupt handler; the CPU pays the C1 exit latency (Linux v3.16–v4.15
    /// kernel/sched/core.c `ttwu_queue_remote` / `set_nr_if_polling`,
    /// arch/x86/include/asm/mwait.h). Interrupts (timers) wake it as from HLT. Host only: KVM
    /// does not expose MWAIT to guests, where it behaves as `halt`.
    Mwait,
}

/// How the C library's `pthread_cond_broadcast` wakes the waiters of a condition variable,
/// which decides how the waiters of a mutex-and-condvar barrier (PARMACS `BARRIER`) queue
/// for the mutex they must re-acquire.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CondBroadcast {
    /// glibc 2.25 and later (the condvar rewrite, nptl/pthread_cond_common.c,
    /// `__condvar_quiesce_and_switch_g1` / `futex_wake` of the whole group): every waiter is
    /// woken at once and races for the mutex; those that find it taken block on it again.
    #[default]
    WakeAll,
    /// glibc before 2.25 (nptl/pthread_cond_broadcast.c: `lll_futex_requeue` of the
    /// condvar futex onto the mutex, `FUTEX_CMP_REQUEUE` waking 1 and moving the rest): one
    /// waiter is woken, the others are moved onto the mutex's futex and woken one by one by
    /// the unlocks, a strict chain.
    Requeue,
}

/// The kernel's spinlock implementation (x86), which decides how a lock is handed over to its
/// waiters ([`crate::kernel::spinlock`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SpinlockImpl {
    /// Queued spinlocks, Linux v4.2 and later (kernel/locking/qspinlock.c): FIFO natively and,
    /// with PV spinlocks (`vm.pv.spinlocks`), in a guest (PV qspinlock); in a guest without PV
    /// spinlocks, test-and-set (`virt_spin_lock`, arch/x86/include/asm/qspinlock.h, v4.5+).
    #[default]
    Qspinlock,
    /// Ticket spinlocks, Linux v2.6.25 to v4.1 (arch/x86/include/asm/spinlock.h): FIFO
    /// everywhere (PV ticket locks halt and kick with `vm.pv.spinlocks`, v3.12+).
    Ticket,
    /// The byte locks before v2.6.25 (`lock decb` and spin): test-and-set.
    Byte,
    /// Preemptable ticket spinlocks (PMT; Ouyang and Lange, VEE 2013, the pmtlock patch to
    /// Linux 3.x ticket locks): FIFO until a waiter's timeout, proportional to its position,
    /// runs out; then test-and-set. Guest only.
    Pmt,
}

/// Where the kernel's `futex_wake` wakes the waiters it found: under the futex hash bucket's
/// spinlock, or after releasing it ([`crate::kernel::futex`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FutexWake {
    /// Linux v4.2 and later (kernel/futex.c, commit 1d0dcb3ad9d3 "futex: Implement lockless
    /// wakeups"): the waiters are put on a wake queue under `hb->lock` (`mark_wake_futex` →
    /// `wake_q_add`) and woken after it is released (`wake_up_q`).
    #[default]
    Deferred,
    /// Before v4.2 (v3.19 kernel/futex.c `wake_futex`: "The hash bucket lock must be held when
    /// this is called"): each waiter's `wake_up_state` (the whole `try_to_wake_up`, with any
    /// IPI it sends) runs under `hb->lock`.
    Locked,
}

/// When the C library's malloc gives the free top of a thread's heap back to the kernel
/// (`madvise(MADV_DONTNEED)`, a TLB shootdown; the pages fault in again when reused).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ArenaTrim {
    /// glibc 2.22 and later: only once the free top reaches `M_TRIM_THRESHOLD`, as for the
    /// main heap (malloc/arena.c `heap_trim`, glibc commit c26efef979, BZ #17195).
    #[default]
    Threshold,
    /// glibc before 2.22: on every free that leaves at least a page free above `M_TOP_PAD`,
    /// whatever the threshold (`heap_trim` is tried on each such free, "even if the top chunk
    /// is not large", and shrinks by every whole page above the pad).
    Always,
}

/// How the host groups the threads it schedules into CFS task groups (cgroups).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Cgroups {
    /// libvirt's layout: each VM's vCPU threads in a task group of their own
    /// (`machine.slice/machine-qemu-N.scope`, a `vcpuN` child per vCPU thread, libvirt
    /// src/qemu/qemu_cgroup.c), with the VM's `weight` as its `cpu.shares`, under CFS group
    /// scheduling (Linux kernel/sched/fair.c `CONFIG_FAIR_GROUP_SCHED`). Native threads and host
    /// daemons stay in the root group.
    #[default]
    Libvirt,
    /// No groups: every thread, vCPU threads included, is an entity of the root run queue, and a
    /// VM's `weight` multiplies its vCPU threads' weights (the model before group scheduling).
    None,
}

/// Guest halt-poll governor parameters (`/sys/module/haltpoll/parameters/`, Linux drivers/cpuidle/governors/haltpoll.c).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HaltpollSpec {
    /// `guest_halt_poll_ns`: maximum poll time (200 µs).
    pub max: Dur,
    /// `guest_halt_poll_grow` (2).
    pub grow: u32,
    /// `guest_halt_poll_shrink` (2; 0 = reset to 0).
    pub shrink: u32,
    /// `guest_halt_poll_grow_start` (50 µs).
    pub grow_start: Dur,
    /// `guest_halt_poll_allow_shrink` (true).
    pub allow_shrink: bool,
}

impl Default for HaltpollSpec {
    fn default() -> Self {
        HaltpollSpec { max: Dur(200_000), grow: 2, shrink: 2, grow_start: Dur(50_000), allow_shrink: true }
    }
}

/// A `[host]` or `[guest]` table.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KernelSpec {
    /// Tick frequency (CONFIG_HZ).
    pub hz: u32,
    /// Stop the tick on idle CPUs (NO_HZ_IDLE). `false` = periodic tick always.
    pub tickless: bool,
    /// Idle policy.
    pub idle: IdlePolicy,
    /// `sched_latency_ns`; default 6 ms × scaling factor.
    pub sched_latency: Option<Dur>,
    /// `sched_min_granularity_ns`; default 0.75 ms × scaling factor.
    pub min_granularity: Option<Dur>,
    /// `sched_wakeup_granularity_ns`; default 1 ms × scaling factor.
    pub wakeup_granularity: Option<Dur>,
    /// Period of the periodic load balancer.
    pub balance_interval: Dur,
    /// Guest halt-poll governor (used with `idle = "haltpoll"`).
    pub haltpoll: HaltpollSpec,
    /// TLB shootdowns skip CPUs in lazy-TLB mode (idle CPUs that last ran the process):
    /// Linux >= 4.20 (`tlb_is_not_lazy`, arch/x86/mm/tlb.c), or 4.14–4.19 on a CPU with PCID
    /// (`enter_lazy_tlb` switches to init_mm at once: `tlb_defer_switch_to_init_mm`). `false`
    /// = older kernels, or no PCID (e.g. a guest whose CPU model lacks it): a lazy CPU gets
    /// the flush IPI and leaves the mm in its handler (`leave_mm`), so it is a target once per
    /// idle period.
    pub tlb_lazy_skip: bool,
    /// How the C library's condition-variable broadcast wakes its waiters ([`CondBroadcast`]).
    pub cond_broadcast: CondBroadcast,
    /// When the C library's malloc trims per-thread heaps ([`ArenaTrim`]).
    pub arena_trim: ArenaTrim,
    /// The size of the C library malloc's per-thread cache (`tcache_perthread_struct`, bytes;
    /// 0: none, before glibc 2.26). A thread's first `malloc` (or `calloc`, `realloc`)
    /// allocates it first (malloc/malloc.c `tcache_init`, `MAYBE_INIT_TCACHE`), and that request
    /// is what gets the thread its arena: a new arena's first heap is sized for it
    /// (`_int_new_arena` → `new_heap(size + header, top_pad)`), not for the program's request,
    /// and its chunk stays at the bottom of the heap for the thread's life. 576 in glibc
    /// 2.26–2.29 (`char counts[64]` and 64 entry pointers), 640 once the counts became
    /// `uint16_t` (glibc 2.30 or 2.31: the references found disagree; 640 in 2.35's and 2.36's).
    pub tcache_bytes: u32,
    /// The kernel's spinlock implementation ([`SpinlockImpl`]).
    pub spinlock: SpinlockImpl,
    /// Where `futex_wake` wakes its waiters ([`FutexWake`]).
    pub futex_wake: FutexWake,
    /// When a writer that finds a process's `mmap_sem` taken spins before it sleeps
    /// ([`crate::kernel::rwsem::SpinRule`]): `none` (before v3.16), `owner_on_cpu` (v3.16–v4.9)
    /// or `vcpu_aware` (v4.10 and later, the default).
    pub rwsem_spin: crate::kernel::rwsem::SpinRule,
    /// Which lock page faults and `madvise(MADV_DONTNEED)` take
    /// ([`crate::kernel::rwsem::MmLocks`]): `mmap_sem` (before v6.4, the default),
    /// `per_vma_faults` (v6.4–v6.16) or `per_vma` (v6.17 and later).
    pub mm_locks: crate::kernel::rwsem::MmLocks,
    /// CFS task groups of the host's threads ([`Cgroups`]); a guest runs no VMs, so in
    /// `[guest]` it has no effect.
    pub cgroups: Cgroups,
    /// Host only: each native program instance's threads form a task group of their own
    /// (`cpu.shares` 1024), as systemd gives each service or scope its cgroup, or as
    /// `CONFIG_SCHED_AUTOGROUP` groups the processes of each session (Linux
    /// kernel/sched/autogroup.c). Needs `cgroups = "libvirt"`. Default `false`: native threads
    /// are entities of the root run queue (one session, no CPU controller).
    pub native_groups: bool,
    /// Bind thread i of each program instance this kernel runs to CPU i mod n, as a program
    /// does with `pthread_setaffinity_np` / `sched_setaffinity` (or `taskset`, OpenMP's
    /// `OMP_PROC_BIND`). Default `false`: threads start where fork balancing puts them and
    /// the scheduler moves them.
    pub pin_threads: bool,
    /// Background kernel/daemon threads (`[host.daemons]`: QEMU I/O threads, vhost, kworkers)
    /// that wake up now and then and run briefly; only the host supports them.
    pub daemons: DaemonSpec,
    /// Dynamic asymmetric vCPUs (`[host.asymmetric]`, DIS ch.5); only the host supports it.
    pub asymmetric: AsymmetricSpec,
    /// A numad-like NUMA balancer (`[host.numad]`, TPDS §7.2); only the host supports it.
    pub numad: NumadSpec,
}

/// A numad-like user-level NUMA balancer (TPDS §7.2; numad(8)). Every `interval` it
/// measures each VM's CPU use; a VM that would fit fewer NUMA nodes than it spans (at
/// `target_utilization` of each node's CPUs) is bound to the nodes holding most of its vCPUs:
/// its vCPUs are re-pinned onto the run's cores of those nodes and its memory is migrated
/// there, at `migrate_cost` of host CPU time per MiB moved. Like numad, it looks at CPU and
/// memory only, never at memory bandwidth.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NumadSpec {
    /// Run the balancer.
    pub enabled: bool,
    /// Time between two scans. numad's default is 5–15 s; the profiles run at 1/20 of the
    /// benchmarks' native time, so the default is 1/20 of 5 s.
    pub interval: Dur,
    /// Target CPU utilization of a node when sizing a VM (numad `-u`, 85 %).
    pub target_utilization: f64,
    /// Host CPU time to migrate one MiB of memory (move_pages at ~4 GB/s: ≈ 250 µs/MiB,
    /// *estimate*).
    pub migrate_cost: Dur,
}

impl Default for NumadSpec {
    fn default() -> Self {
        NumadSpec { enabled: false, interval: Dur(250_000_000), target_utilization: 0.85, migrate_cost: Dur(250_000) }
    }
}

impl NumadSpec {
    /// Checks values; returns (field, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.interval.0 == 0 {
            return Err(("numad.interval".into(), "expected a positive duration".into()));
        }
        if !(self.target_utilization > 0.0 && self.target_utilization <= 1.0) {
            return Err(("numad.target_utilization".into(), format!("expected a number in (0, 1] (got {})", self.target_utilization)));
        }
        Ok(())
    }
}

/// Dynamic asymmetric vCPUs (DIS ch.5): a host policy run at the end of every
/// allocation period (the host's scheduling period, `sched_latency`) over every VM's vCPUs,
/// with three components, each switchable. Defaults are DIS ch.5's where it gives them
/// (+10 % growth, 10 % imbalance, 2× urgency conflicts); the others are the project's
/// choices, documented in `docs/scalability.md`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AsymmetricSpec {
    /// CPU-time allocation: predict each vCPU's demand from its consumption, split the VM's
    /// time among its vCPUs in proportion, applied as per-vCPU weights (cgroup shares).
    pub allocation: bool,
    /// Scheduling-latency adjustment: per-vCPU wake-up granularity, lowered for vCPUs that
    /// could run but did not get their time, raised for those that got it and went idle;
    /// at the minimum, the vCPUs sending the wake-up IPIs are lowered instead. The VM's
    /// vCPU-switch time is charged to its allocation while any of its vCPUs is urgent.
    pub latency: bool,
    /// Resource-conflict resolver: swap vCPUs between cores when per-core allocation is
    /// imbalanced, or when high-urgency vCPUs conflict on a core.
    pub resolver: bool,
    /// Demand growth of a vCPU that used all its time and is still ready (DIS ch.5: 10 %).
    pub growth: f64,
    /// A vCPU "used all its time" when it consumed at least this fraction of it.
    pub full: f64,
    /// Largest fall of a vCPU's predicted demand per period, as a fraction of its
    /// allocation (1 = DIS ch.5's literal rule, demand = consumption; see
    /// `docs/scalability.md` for why the default damps it like the growth).
    pub max_drop: f64,
    /// Floor of a vCPU's allocation, as a fraction of its symmetric share.
    pub min_share: f64,
    /// Lowest per-vCPU wake-up granularity.
    pub latency_min: Dur,
    /// Highest per-vCPU wake-up granularity (default: the host's `wakeup_granularity`).
    pub latency_max: Option<Dur>,
    /// Factor by which a latency is lowered or raised per period.
    pub latency_step: f64,
    /// Per-core allocation imbalance that triggers a swap (DIS ch.5: 10 %).
    pub imbalance: f64,
    /// Urgency conflicts of the busiest core over the calmest that trigger swaps (DIS ch.5: 2×).
    pub urgency_ratio: f64,
    /// Fewest urgency conflicts on the busiest core for an urgency swap.
    pub min_conflicts: u32,
}

impl Default for AsymmetricSpec {
    fn default() -> Self {
        AsymmetricSpec {
            allocation: false,
            latency: false,
            resolver: false,
            growth: 0.10,
            full: 0.95,
            max_drop: 0.10,
            min_share: 0.10,
            latency_min: Dur(500_000),
            latency_max: None,
            latency_step: 2.0,
            imbalance: 0.10,
            urgency_ratio: 2.0,
            min_conflicts: 4,
        }
    }
}

impl AsymmetricSpec {
    /// Whether any component is on.
    pub fn enabled(&self) -> bool {
        self.allocation || self.latency || self.resolver
    }

    /// Checks values; returns (field, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        let unit = |f: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err((format!("asymmetric.{f}"), format!("expected a number in {lo}..={hi} (got {v})")))
            }
        };
        unit("growth", self.growth, 0.0, 10.0)?;
        unit("full", self.full, 0.01, 1.0)?;
        unit("max_drop", self.max_drop, 0.0, 1.0)?;
        unit("min_share", self.min_share, 0.001, 1.0)?;
        unit("latency_step", self.latency_step, 1.0, 100.0)?;
        unit("imbalance", self.imbalance, 0.0, 10.0)?;
        unit("urgency_ratio", self.urgency_ratio, 1.0, 1000.0)?;
        if self.latency_min.0 == 0 {
            return Err(("asymmetric.latency_min".into(), "expected a positive duration".into()));
        }
        if let Some(max) = self.latency_max {
            if max.0 < self.latency_min.0 {
                return Err(("asymmetric.latency_max".into(), format!("expected at least latency_min ({} ns)", self.latency_min.0)));
            }
        }
        Ok(())
    }
}

/// Background threads of a kernel: `count` threads, each sleeping an exponential time of
/// mean `interval`, then running an exponential time of mean `run`, forever.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSpec {
    /// Number of daemon threads (0 = none).
    pub count: u32,
    /// Mean run time per wake-up.
    pub run: Dur,
    /// Mean sleep between runs.
    pub interval: Dur,
}

impl Default for DaemonSpec {
    fn default() -> Self {
        DaemonSpec { count: 0, run: Dur(50_000), interval: Dur(10_000_000) }
    }
}

impl Default for KernelSpec {
    fn default() -> Self {
        KernelSpec {
            hz: 250,
            tickless: true,
            idle: IdlePolicy::Halt,
            sched_latency: None,
            min_granularity: None,
            wakeup_granularity: None,
            balance_interval: Dur(4_000_000),
            haltpoll: HaltpollSpec::default(),
            tlb_lazy_skip: true,
            cond_broadcast: CondBroadcast::WakeAll,
            arena_trim: ArenaTrim::Threshold,
            tcache_bytes: 576,
            spinlock: SpinlockImpl::Qspinlock,
            futex_wake: FutexWake::Deferred,
            rwsem_spin: crate::kernel::rwsem::SpinRule::VcpuAware,
            mm_locks: crate::kernel::rwsem::MmLocks::MmapSem,
            cgroups: Cgroups::Libvirt,
            native_groups: false,
            pin_threads: false,
            daemons: DaemonSpec::default(),
            asymmetric: AsymmetricSpec::default(),
            numad: NumadSpec::default(),
        }
    }
}

/// Kernel parameters resolved for a given CPU count.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelParams {
    /// Tick period (ns).
    pub tick_ns: u64,
    /// NO_HZ_IDLE.
    pub tickless: bool,
    /// Idle policy.
    pub idle: IdlePolicy,
    /// Scheduling period target (ns).
    pub latency: u64,
    /// Minimum slice (ns).
    pub min_gran: u64,
    /// Wake-up preemption granularity (ns).
    pub wakeup_gran: u64,
    /// Periodic balance every this many ticks (>= 1).
    pub balance_ticks: u32,
    /// Guest halt-poll governor.
    pub haltpoll: HaltpollSpec,
    /// Lazy-TLB CPUs are skipped by shootdowns.
    pub tlb_lazy_skip: bool,
    /// How the C library's condition-variable broadcast wakes its waiters.
    pub cond_broadcast: CondBroadcast,
    /// The spinlock implementation.
    pub spinlock: SpinlockImpl,
    /// Where `futex_wake` wakes its waiters.
    pub futex_wake: FutexWake,
    /// When a writer spins on a taken `mmap_sem`.
    pub rwsem_spin: crate::kernel::rwsem::SpinRule,
    /// Which lock page faults and `madvise(MADV_DONTNEED)` take.
    pub mm_locks: crate::kernel::rwsem::MmLocks,
}

impl KernelSpec {
    /// Checks values; returns (field, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.hz == 0 || self.hz > 10_000 {
            return Err(("hz".into(), format!("expected 1..=10000 (got {})", self.hz)));
        }
        if self.tcache_bytes > 65_536 {
            return Err(("tcache_bytes".into(), format!("expected 0 (no tcache) up to 65536 bytes (got {})", self.tcache_bytes)));
        }
        if self.native_groups && self.cgroups == Cgroups::None {
            return Err(("native_groups".into(), "expected cgroups = \"libvirt\": groups need CFS group scheduling".into()));
        }
        if self.daemons.count > 0 && (self.daemons.run.0 == 0 || self.daemons.interval.0 == 0) {
            return Err(("daemons".into(), "expected positive run and interval durations".into()));
        }
        self.asymmetric.check()?;
        self.numad.check()?;
        for (f, v) in [
            ("sched_latency", self.sched_latency),
            ("min_granularity", self.min_granularity),
            ("wakeup_granularity", self.wakeup_granularity),
        ] {
            if v == Some(Dur(0)) {
                return Err((f.into(), "expected a positive duration".into()));
            }
        }
        Ok(())
    }

    /// Resolves the tunables for a kernel with `ncpus` CPUs.
    pub fn params(&self, ncpus: u32) -> KernelParams {
        let factor = 1 + u64::from(ncpus.clamp(1, 8).ilog2());
        let tick_ns = 1_000_000_000 / u64::from(self.hz);
        KernelParams {
            tick_ns,
            tickless: self.tickless,
            idle: self.idle,
            latency: self.sched_latency.map_or(6_000_000 * factor, |d| d.0),
            min_gran: self.min_granularity.map_or(750_000 * factor, |d| d.0),
            wakeup_gran: self.wakeup_granularity.map_or(1_000_000 * factor, |d| d.0),
            balance_ticks: (self.balance_interval.0 / tick_ns).max(1) as u32,
            haltpoll: self.haltpoll.clone(),
            tlb_lazy_skip: self.tlb_lazy_skip,
            cond_broadcast: self.cond_broadcast,
            spinlock: self.spinlock,
            futex_wake: self.futex_wake,
            rwsem_spin: self.rwsem_spin,
            mm_locks: self.mm_locks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunables_scale_like_linux() {
        let k = KernelSpec::default();
        assert_eq!(k.params(1).latency, 6_000_000);
        assert_eq!(k.params(4).latency, 18_000_000);
        assert_eq!(k.params(64).latency, 24_000_000);
        assert_eq!(k.params(64).wakeup_gran, 4_000_000);
        assert_eq!(k.params(8).tick_ns, 4_000_000);
    }
}
