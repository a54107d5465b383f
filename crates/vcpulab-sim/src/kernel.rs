//! The OS model, written once and instantiated at two levels.
//!
//! A [`Kernel`] schedules tasks on its CPUs with a CFS-like fair scheduler (per-CPU run
//! queues ordered by virtual runtime, slices checked at the tick, wake-up preemption,
//! sleeper placement, wake-up CPU selection and idle/periodic balancing), runs an idle path
//! (tickless idle with timer reprogramming, HLT or polling), delivers interrupts (timer,
//! reschedule IPIs) and implements futex-style blocking for the workload's synchronisation.
//!
//! Kernel 0 is the *host*: its CPUs are the cores and its tasks are native threads and vCPU
//! threads. Every VM has a *guest* kernel whose CPUs are that VM's vCPUs and whose tasks are
//! the workload's threads. What differs between levels is only the platform under a CPU:
//! a guest's sensitive operations (timer writes, IPIs, HLT) become VM exits handled by the
//! host side (see [`crate::virt`]).

pub mod bandwidth;
pub mod cpu;
pub mod futex;
pub mod group;
pub mod kpath;
pub mod mm;
pub mod rwsem;
pub mod sched;
pub mod spinlock;
pub mod sync;
pub mod thread;
pub mod tlb;
pub mod waits;

use std::collections::{BTreeSet, VecDeque};

use crate::account::{Attr, OwnerId};
use crate::engine::SimTime;
use crate::spec::kernel::KernelParams;

/// Index of a kernel (0 = host).
pub type KernelId = u32;
/// Index of a schedulable task (a thread or a vCPU thread).
pub type TaskId = u32;
/// Index of a workload thread.
pub type ThreadId = u32;

/// The host kernel's id.
pub const HOST: KernelId = 0;

/// An entity of a CPU's root run queue: a task, or the group entity of a task group
/// ([`group`]; only the host has groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ent {
    /// A task not in any group.
    Task(TaskId),
    /// Task group `g`'s entity on this CPU.
    Group(u32),
}

/// Pending-interrupt bits of a kernel CPU.
pub mod irq {
    /// The local timer fired (tick and/or hrtimers due).
    pub const TIMER: u8 = 1;
    /// A reschedule IPI.
    pub const RESCHED: u8 = 2;
    /// A call-function IPI (TLB shootdown; the CSDs are queued in [`super::KCpu::csd`]).
    pub const CALL_FUNC: u8 = 4;
    /// A reschedule IPI that only delivers a remote wake-up (`ttwu_queue_remote`: the waker
    /// and the target share no cache, so the target enqueues the woken task itself in
    /// `sched_ttwu_pending`); whether it preempts was decided at the wake-up. Same vector as
    /// [`RESCHED`].
    pub const WAKE_LIST: u8 = 8;
    /// The number of distinct interrupt vectors pending in `p` (RESCHED and WAKE_LIST are one).
    pub fn vectors(p: u8) -> u32 {
        u32::from(p & TIMER != 0) + u32::from(p & (RESCHED | WAKE_LIST) != 0) + u32::from(p & CALL_FUNC != 0)
    }
}

/// What a kernel runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// The host: CPU i is core i.
    Host,
    /// A guest: CPU i is vCPU i of the VM.
    Guest {
        /// The VM.
        vm: u32,
    },
}

/// A unit of kernel or host overhead waiting to be executed on a CPU before it continues.
#[derive(Clone, Copy, Debug)]
pub struct Work {
    /// Who pays, where, for what.
    pub attr: Attr,
    /// Remaining nanoseconds.
    pub rem: u64,
    /// What happens when it completes.
    pub then: Option<Then>,
}

/// An action run when a piece of queued work completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// A target finished its call-function handler: acknowledge remote call `sd` (the
    /// target's state when the call reached it).
    CallAck(u32, tlb::TargetState),
    /// The hypervisor finished a Shoot4U hypercall for shootdown `sd`.
    Shoot4uDone(u32),
}

/// The state of a CPU's idle loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleState {
    /// Not idle, or in the idle loop but not yet halted/polling.
    Awake,
    /// Halted (HLT / C1; for a vCPU: the vCPU thread is blocked in the host).
    Halted,
    /// Polling with TIF_POLLING set (wakers set need_resched instead of sending IPIs).
    Polling,
    /// In C1 through MWAIT with TIF_POLLING set (host, `idle = "mwait"`): interrupts wake it
    /// as from HLT; a wake-up needs no IPI but pays the C1 exit latency.
    Mwait,
}

/// One CPU of a kernel.
#[derive(Debug)]
pub struct KCpu {
    /// The root run queue: queued (runnable, not current) entities ordered by (vruntime,
    /// entity): tasks outside any group and the entities of groups with runnable tasks here.
    pub rq: BTreeSet<(u64, Ent)>,
    /// Queued tasks on this CPU, those in groups' run queues included.
    pub nr_queued: usize,
    /// Each task group's run queue and entity on this CPU (host only; empty without groups).
    pub groups: Vec<group::GroupRq>,
    /// The running task (None = idle).
    pub curr: Option<TaskId>,
    /// CFS min_vruntime.
    pub min_vr: u64,
    /// A reschedule is pending.
    pub need_resched: bool,
    /// Overhead to execute before continuing.
    pub kwork: VecDeque<Work>,
    /// Idle-loop state.
    pub idle: IdleState,
    /// The periodic tick is running.
    pub tick_on: bool,
    /// Next tick instant when the tick runs.
    pub next_tick: SimTime,
    /// The instant the local timer is programmed for (NEVER = disarmed).
    pub programmed: SimTime,
    /// Generation of the programmed timer event (stale events are ignored).
    pub timer_gen: u32,
    /// Threads sleeping on this CPU's hrtimers: (wake time, thread).
    pub sleepers: BTreeSet<(SimTime, ThreadId)>,
    /// Interrupts raised but not yet handled.
    pub pending: u8,
    /// Ticks since the last periodic balance.
    pub ticks_since_balance: u32,
    /// Ticks this CPU has taken while busy (paces its busy load balancing).
    pub busy_ticks: u64,
    /// A reschedule was requested while the running thread was not preemptible; it happens
    /// when the thread leaves its kernel spinlock section (`preempt_enable`).
    pub resched_deferred: bool,
    /// CFS next buddy (a `yield_to` target to pick if within wake-up granularity).
    pub next_buddy: Option<TaskId>,
    /// CFS skip buddy (the yielding task).
    pub skip_buddy: Option<TaskId>,
    /// Host only: when this CPU's switch in progress releases its run-queue lock. `__schedule`
    /// holds `rq->lock` from the pick through `context_switch` until `finish_lock_switch`
    /// (Linux v3.19.8 kernel/sched/core.c); a `yield_to` aimed at this CPU waits for it in
    /// `double_rq_lock`, and a vCPU switched in here has not been through `kvm_sched_in` before
    /// then (`World::rq_lock_wait`).
    pub rq_locked_until: SimTime,
    /// Queued call-function data: remote calls (shootdowns, membarriers) whose handler this CPU
    /// must run, each with this CPU's state when the call reached it.
    pub csd: VecDeque<(u32, tlb::TargetState)>,
    /// PV spinlock kick received (`pv_unhalted`): a halt in `pv_wait` ends.
    pub pv_unhalted: bool,
    /// Guest haltpoll governor: current poll limit (ns).
    pub hp_limit: u64,
    /// Guest haltpoll: the last poll timed out (the next idle period halts).
    pub hp_timed_out: bool,
    /// Guest haltpoll: poll time left in the current idle period.
    pub hp_poll_rem: u64,
    /// When the current halt of the idle loop began (guest haltpoll's `block_ns`).
    pub halt_since: Option<SimTime>,
    /// `rq->idle_stamp`: when this CPU last entered newidle balancing with nothing to run.
    pub idle_stamp: Option<SimTime>,
    /// `rq->avg_idle`: running average of its idle periods (ns), capped at twice the
    /// migration cost; newidle balance is skipped while it is below the migration cost.
    pub avg_idle: u64,
    /// The instance (address space) this CPU last ran a thread of: still loaded while idle
    /// (lazy TLB).
    pub last_mm: Option<u32>,
    /// Its per-CPU page list and LRU pagevec ([`mm`]).
    pub pcp: mm::PcpState,
}

impl KCpu {
    fn new() -> Self {
        KCpu {
            rq: BTreeSet::new(),
            nr_queued: 0,
            groups: Vec::new(),
            curr: None,
            min_vr: 0,
            need_resched: false,
            kwork: VecDeque::new(),
            idle: IdleState::Awake,
            tick_on: false,
            next_tick: SimTime::NEVER,
            programmed: SimTime::NEVER,
            timer_gen: 0,
            sleepers: BTreeSet::new(),
            pending: 0,
            ticks_since_balance: 0,
            busy_ticks: 0,
            resched_deferred: false,
            next_buddy: None,
            skip_buddy: None,
            rq_locked_until: SimTime::ZERO,
            csd: VecDeque::new(),
            pv_unhalted: false,
            hp_limit: 0,
            hp_timed_out: false,
            hp_poll_rem: 0,
            halt_since: None,
            idle_stamp: None,
            avg_idle: 2 * crate::kernel::sched::MIGRATION_COST,
            last_mm: None,
            pcp: mm::PcpState::default(),
        }
    }

    /// Tasks running or queued here.
    pub fn nr_running(&self) -> usize {
        self.nr_queued + usize::from(self.curr.is_some())
    }
}

impl Kernel {
    /// The first tick instant of this kernel strictly after `now`.
    pub fn next_tick_after(&self, now: crate::engine::SimTime) -> crate::engine::SimTime {
        let (tick, phase) = (self.params.tick_ns, self.tick_phase);
        let n = now.ns().saturating_sub(phase) / tick + 1;
        crate::engine::SimTime(n * tick + phase)
    }
}

/// A kernel instance.
#[derive(Debug)]
pub struct Kernel {
    /// Host or guest.
    pub kind: KernelKind,
    /// Its CPUs.
    pub cpus: Vec<KCpu>,
    /// Scheduler and timer parameters.
    pub params: KernelParams,
    /// Offset of this kernel's tick grid (ns in `0..tick`): a guest's jiffies are not in
    /// phase with the host's.
    pub tick_phase: u64,
    /// The last-level-cache domain of each CPU, as the kernel sees it (`cpus_share_cache`,
    /// `sd_llc`): the socket of each core for the host; for a guest, what the VM's CPU
    /// topology says (`vm.llc`).
    pub llc: Vec<u32>,
    /// `sd_llc_size`: how many CPUs the kernel's last-level-cache domain spans. The host
    /// builds its domains over all online CPUs, so this is a whole socket's CPUs even when a
    /// run uses fewer cores of it (`taskset`); a guest's is 1 (one vCPU per socket) or all its
    /// vCPUs (`vm.llc = "shared"`).
    pub llc_size: u32,
    /// Task groups (host with `cgroups = "libvirt"`: one per VM).
    pub groups: Vec<group::TaskGroup>,
    /// CFS bandwidth pools (`cpu.max`) of the groups and vCPU threads that have a quota.
    pub bandwidth: Vec<bandwidth::Bandwidth>,
    /// The last tick instant at which a nohz idle balance refreshed idle CPUs' group loads.
    pub last_ilb: SimTime,
    /// The page allocator's locks ([`mm`]).
    pub mm: mm::PageAllocator,
    /// The locks behind the words of synchronisation objects: the futex hash buckets' and the
    /// sockets' ([`futex`]).
    pub word_locks: futex::WordLocks,
}

impl Kernel {
    /// A kernel with `n` idle CPUs, each its own cache domain.
    pub fn new(kind: KernelKind, n: u32, params: KernelParams) -> Self {
        Kernel {
            kind,
            cpus: (0..n).map(|_| KCpu::new()).collect(),
            params,
            tick_phase: 0,
            llc: (0..n).collect(),
            llc_size: 1,
            groups: Vec::new(),
            bandwidth: Vec::new(),
            last_ilb: SimTime::ZERO,
            mm: mm::PageAllocator::default(),
            word_locks: futex::WordLocks::default(),
        }
    }

    /// Adds a task group with `shares` and returns its index.
    pub fn add_group(&mut self, shares: u64) -> u32 {
        self.groups.push(group::TaskGroup { shares, load_avg: 0, bw: None });
        for c in &mut self.cpus {
            c.groups.push(group::GroupRq { se_w: shares, ..Default::default() });
        }
        (self.groups.len() - 1) as u32
    }
}

/// What a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// A workload thread.
    Thread(ThreadId),
    /// The thread of a vCPU (host kernel only).
    Vcpu(u32),
}

/// Scheduling state of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// In a run queue.
    Queued,
    /// Current on its CPU.
    Running,
    /// Not runnable (blocked, sleeping, halted vCPU).
    Blocked,
    /// Exited.
    Done,
}

/// A schedulable entity.
#[derive(Debug)]
pub struct Task {
    /// Thread or vCPU.
    pub kind: TaskKind,
    /// The kernel that schedules it.
    pub kernel: KernelId,
    /// Who its time belongs to.
    pub owner: OwnerId,
    /// Scheduling state.
    pub state: TaskState,
    /// Current or last CPU.
    pub cpu: u32,
    /// CFS virtual runtime.
    pub vr: u64,
    /// CFS load weight (1024 = nice 0).
    pub weight: u64,
    /// Its task group (host only), None = the root group.
    pub group: Option<u32>,
    /// The bandwidth pool of its own `vcpuN` group (`<cputune><quota>`), if any.
    pub bw_pool: Option<u32>,
    /// That group's run queue's local runtime and throttle state.
    pub bw: bandwidth::LocalRuntime,
    /// When the current run started being accounted.
    pub exec_start: SimTime,
    /// Total run time.
    pub sum_exec: u64,
    /// `sum_exec` when last picked (for slice checks).
    pub prev_sum_exec: u64,
    /// Only this CPU is allowed (pinning).
    pub pinned: Option<u32>,
    /// Its own wake-up preemption granularity (ns) instead of the kernel's (DIS ch.5's
    /// per-vCPU scheduling latency, set by the asymmetric-vCPU policy).
    pub wakeup_gran: Option<u64>,
    /// When it was last woken (for wake-up latency), if it has not run since.
    pub woken_at: Option<SimTime>,
    /// Voluntary context switches (blocked).
    pub nvcsw: u64,
    /// Involuntary context switches (preempted).
    pub nivcsw: u64,
    /// `wakee_flips`: how often this task, waking others, woke a different task than the
    /// last one (halved every second), the input of `wake_wide`.
    pub wakee_flips: u32,
    /// `last_wakee`: the task it last woke.
    pub last_wakee: Option<TaskId>,
    /// `wakee_flip_decay_ts`: when `wakee_flips` was last halved.
    pub wakee_flip_decay: SimTime,
    /// A thread not yet created: its first wake-up is its creation (`wake_up_new_task`,
    /// [`World::wake_task`]), not a sleeper's return.
    pub newborn: bool,
}
