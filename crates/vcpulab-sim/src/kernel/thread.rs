//! Workload threads: the interpreter of a compiled program and the thread's states.
//!
//! A thread is Running (computing or spinning) while current on a CPU, Ready while queued,
//! Blocked on a mutex / barrier / condition variable / timer, or Done. Zero-time operations
//! (unlocks and signals that wake nobody, loop control) execute back to back; the interpreter
//! stops at the first operation that takes time or changes the thread's state. An operation
//! that makes a system call (a futex wake, a memory operation) takes time: the next operation
//! runs after the call's kernel work and any reschedule it caused.

use crate::account::{Attr, Cause, Layer, Log2Histogram, LogLinHistogram};
use crate::engine::Stream;
use crate::workload::program::ObjId;
use crate::workload::{Instr, Share};
use crate::world::{Leaf, Rem, Step, World};

use super::spinlock::{Discipline, KLockRef};
use super::sync::Instance;
use super::{KernelId, TaskId, ThreadId, HOST};

/// What a spinning thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpinOn {
    /// A user spinlock to become free (or be handed over).
    ULock(ObjId),
    /// A kernel spinlock (its workload's or its kernel's) to get: its ticket served, or the
    /// lock free (test-and-set, a PMT waiter past its timeout).
    KLock(KLockRef),
    /// The barrier's generation to change.
    Barrier(ObjId),
    /// A mutex with a spin budget to become free.
    Mutex(ObjId),
    /// Every target of remote call `sd` (a TLB shootdown or a membarrier) to acknowledge
    /// (CPL 0, PAUSE).
    RemoteCall(u32),
    /// Its process's `mmap_sem` to become free (a writer's optimistic spinning, CPL 0,
    /// PAUSE; [`super::rwsem`]).
    Rwsem,
}

/// What a blocked thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOn {
    /// A mutex (futex wait).
    Mutex(ObjId),
    /// A blocking barrier.
    Barrier(ObjId),
    /// The mutex of a mutex-and-condvar barrier (arriving, or re-acquiring it after the
    /// broadcast).
    BarrierLock(ObjId),
    /// A condition variable.
    Cond(ObjId),
    /// A queue (full on push, empty on pop).
    Queue(ObjId),
    /// A timer (sleep).
    Sleep,
    /// Its process's `mmap_sem` ([`super::rwsem`]), asleep in `rwsem_down_read_failed` or
    /// `rwsem_down_write_failed` until a release hands it over.
    Rwsem,
    /// The faults and `madvise` calls holding a VMA it write-locks to finish
    /// (`vma_start_write`, [`super::rwsem::MmLocks`]).
    VmaLock,
}

impl BlockOn {
    /// The synchronisation object it waits on (None for a sleep).
    pub fn obj(self) -> Option<ObjId> {
        match self {
            BlockOn::Mutex(o) | BlockOn::Barrier(o) | BlockOn::BarrierLock(o) | BlockOn::Cond(o) | BlockOn::Queue(o) => Some(o),
            BlockOn::Sleep | BlockOn::Rwsem | BlockOn::VmaLock => None,
        }
    }
}

/// A mutex a thread keeps across a futex wake it makes while holding it (a `pthread_cond_signal`
/// or `pthread_cond_broadcast` before `pthread_mutex_unlock`): it is released after the
/// system call returns, at the thread's next operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldLock {
    /// The mutex of lane `.1` of queue `.0` (`queue_enqueue` / `queue_dequeue`).
    Lane(ObjId, u32),
    /// The mutex of a condvar barrier, held by the last arrival across its broadcast.
    Barrier(ObjId),
}

/// A thread's progress through a mutex-and-condvar barrier (PARMACS `BARRIER`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BarrierPhase {
    /// Arriving: it takes the barrier's mutex, then counts itself.
    #[default]
    Arrive,
    /// Counted and waiting on the condition variable (mutex released).
    Wait,
    /// Released: it re-acquires the mutex (`pthread_cond_wait` returning), then releases it.
    Relock,
}

/// The thread's activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// About to execute its next operation.
    Fresh,
    /// Computing (`compute_rem` left).
    Compute,
    /// Busy-waiting.
    Spin(SpinOn),
    /// Not runnable.
    Blocked(BlockOn),
    /// Exited.
    Done,
}

/// Per-thread statistics.
#[derive(Clone, Debug, Default)]
pub struct ThreadStats {
    /// Time computing (ns).
    pub compute_ns: u64,
    /// Time spinning (ns).
    pub spin_ns: u64,
    /// Times it blocked.
    pub blocks: u64,
    /// Time waiting for TLB-shootdown acknowledgements (ns).
    pub tlb_wait_ns: u64,
    /// Spin-then-block waits whose budget ran out (they blocked).
    pub spin_blocks: u64,
    /// Wake-up latency (woken → running) histogram.
    pub wake_latency: Log2Histogram,
    /// When its current sleep began (ns; valid while blocked).
    pub blocked_at: u64,
    /// Its current sleep is its wait for its creation ([`SyncStats`] leaves it out).
    pub creation_wait: bool,
}

/// What a blocking wait was for, as a trace of the guest's threads would class it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockClass {
    /// A synchronisation object: a mutex, condition variable, barrier or queue (a futex
    /// wait, or a socket queue's wait queue).
    Sync,
    /// A timer (`sleep`).
    Sleep,
    /// A kernel lock of the memory-management paths (`mmap_sem`, a VMA lock).
    Other,
}

impl BlockOn {
    /// Its [`BlockClass`].
    pub fn class(self) -> BlockClass {
        match self {
            BlockOn::Mutex(_) | BlockOn::Barrier(_) | BlockOn::BarrierLock(_) | BlockOn::Cond(_) | BlockOn::Queue(_) => BlockClass::Sync,
            BlockOn::Sleep => BlockClass::Sleep,
            BlockOn::Rwsem | BlockOn::VmaLock => BlockClass::Other,
        }
    }
}

/// The guest-level synchronisation statistics of a workload instance, the numbers a trace of
/// its threads gives (blocking waits, wake-ups, futex calls), natively and in a VM alike.
///
/// A replay's created thread waits for its creator's start signal, which stands for the
/// `clone` that starts it in the traced program: that hand-off is none of them. Its wait is the
/// first the thread makes while it has not been created ([`crate::kernel::Task::newborn`]): its
/// futex wait, its sleep and the wake-up that creates it, and the creator's futex wake when it
/// wakes threads being created only, are left out.
#[derive(Clone, Debug, Default)]
pub struct SyncStats {
    /// Blocking waits on synchronisation objects ([`BlockClass::Sync`]).
    pub blocks_sync: u64,
    /// Timer sleeps ([`BlockClass::Sleep`]).
    pub blocks_sleep: u64,
    /// Sleeps on memory-management locks ([`BlockClass::Other`]).
    pub blocks_other: u64,
    /// Durations of the waits that ended (ns): from going to sleep to being woken (runnable
    /// again).
    pub block_ns: LogLinHistogram,
    /// Wake-ups of a sleeping thread (each ends one wait).
    pub wakeups: u64,
    /// Of which placed the woken thread on the waker's own CPU (vCPU in a guest).
    pub wakeups_local: u64,
    /// `futex(FUTEX_WAIT)` system calls (a wait whose word changed first returns at once, not
    /// asleep).
    pub futex_waits: u64,
    /// `futex(FUTEX_WAKE)` / `FUTEX_CMP_REQUEUE` system calls.
    pub futex_wakes: u64,
}

/// A workload thread.
#[derive(Debug)]
pub struct Thread {
    /// Instance it belongs to.
    pub inst: u32,
    /// Index within its group.
    pub idx: u32,
    /// Its group in the workload.
    pub group: u32,
    /// Its task in its kernel.
    pub task: TaskId,
    /// Program counter.
    pub pc: u32,
    /// The enclosing loops (innermost last): (iterations left, iterations done).
    pub loops: Vec<(u64, u64)>,
    /// Per dynamic loop (by the pc of its `LoopStart`): how often the thread has entered it,
    /// which names the work pool it shares with its group ([`crate::workload::Share`]).
    pub pool_entries: Vec<(u32, u64)>,
    /// Current activity.
    pub act: Act,
    /// Remaining computation (ns of native work at local memory speed).
    pub compute_rem: u64,
    /// Memory intensity of the current computation ([`crate::machine::memory`]).
    pub mem: f32,
    /// Remaining PLE window while spinning in a guest kernel (ns).
    pub spin_window: u64,
    /// The vCPU's `ple_epoch` when the current PLE window started.
    pub ple_epoch: u32,
    /// Spinning left before a PV spinlock waiter halts (ns; `u64::MAX` = not armed).
    pub pv_left: u64,
    /// Where a PMT spinlock waiter is in its preemptable loop.
    pub pmt: PmtWait,
    /// Its process among its instance's ([`super::sync::Instance::heaps`]): 0, or its own
    /// where the threads stand for processes.
    pub process: u32,
    /// Its arena in its process's heap: none until its first `malloc`, the main arena from
    /// the start for a main thread ([`crate::workload::heap::ProcessHeap`]); kept after its
    /// exit, for the chunks it left there.
    pub arena: Option<u32>,
    /// Its `malloc`s so far (the next one's [`crate::workload::heap::ChunkId::seq`]).
    pub allocs: u32,
    /// Heap page faults it may still take (its group's `fault_budget`; `u64::MAX`: no bound).
    pub faults_left: u64,
    /// Memory-management consequences of a heap operation still to carry out, each with the
    /// arena whose heap (VMA) it acts on, if any.
    pub mm_queue: std::collections::VecDeque<(crate::workload::heap::MmOp, Option<u32>)>,
    /// The read lock the page fault or `madvise` under way holds.
    pub mm_held: Option<super::rwsem::FaultLock>,
    /// The kernel path of the system call or fault under way ([`super::kpath`]).
    pub kpath: std::collections::VecDeque<super::kpath::KStep>,
    /// A futex wait under way: what it will sleep on and its word, until its path puts it to
    /// sleep or a waker chooses it first ([`super::futex`]).
    pub blocking: Option<(BlockOn, super::futex::WordKey)>,
    /// Its random stream.
    pub rng: Stream,
    /// Kernel spinlocks held or waited for (> 0: kernel mode, not preemptible).
    pub kdepth: u32,
    /// Ticket taken on the kernel lock it waits for.
    pub ticket: u64,
    /// Spin-barrier generation it waits to see change.
    pub bgen: u64,
    /// A mutex to (re)acquire before continuing (after a futex wake or a condvar wait).
    pub pending_lock: Option<ObjId>,
    /// A mutex it holds across the futex wake it just made, released when its next operation
    /// runs ([`World::release_held_lock`]).
    pub held_lock: Option<HeldLock>,
    /// Where it is in a mutex-and-condvar barrier.
    pub bphase: BarrierPhase,
    /// User spinning left before a spin-then-block wait blocks (ns; `u64::MAX` = unbounded).
    pub spin_budget: u64,
    /// Push time of the item it last popped from a queue.
    pub item: crate::engine::SimTime,
    /// Statistics.
    pub stats: ThreadStats,
}

impl Thread {
    /// Its arena (given it at its first `malloc`) and the malloc thresholds of its process.
    pub fn heap<'a>(
        &mut self,
        inst: &'a mut super::sync::Instance,
    ) -> (&'a mut crate::workload::heap::Arena, &'a mut crate::workload::heap::MallocPar) {
        let heap = &mut inst.heaps[self.process as usize];
        let a = *self.arena.get_or_insert_with(|| heap.attach());
        heap.get(a)
    }

    /// Whether it executes at CPL 0 (inside a kernel spinlock section or a shootdown wait).
    pub fn in_kernel(&self) -> bool {
        self.kdepth > 0
    }

    /// What it waits on in a futex wait: asleep, or on its way to sleep (its path not done).
    pub fn futex_wait_on(&self) -> Option<BlockOn> {
        match self.act {
            Act::Blocked(on) => Some(on),
            _ => self.blocking.map(|(on, _)| on),
        }
    }

    /// Describes what a blocked or spinning thread waits on (for deadlock reports).
    pub(crate) fn blocked_on_desc(&self, insts: &[Instance]) -> Option<String> {
        let name = |o: ObjId| insts[self.inst as usize].wl.objects[o as usize].name.clone();
        match self.act {
            Act::Blocked(BlockOn::Mutex(o)) => Some(format!("blocked on mutex '{}'", name(o))),
            Act::Blocked(BlockOn::Barrier(o)) => Some(format!("blocked on barrier '{}'", name(o))),
            Act::Blocked(BlockOn::BarrierLock(o)) => Some(format!("blocked on the mutex of barrier '{}'", name(o))),
            Act::Blocked(BlockOn::Cond(o)) => Some(format!("blocked on condvar '{}'", name(o))),
            Act::Blocked(BlockOn::Queue(o)) => Some(format!("blocked on queue '{}'", name(o))),
            Act::Blocked(BlockOn::Sleep) => Some("sleeping".into()),
            Act::Blocked(BlockOn::Rwsem) => Some("blocked on its process's mmap_sem".into()),
            Act::Blocked(BlockOn::VmaLock) => Some("waiting for the page faults in a VMA it write-locks".into()),
            Act::Spin(SpinOn::Rwsem) => Some("spinning on its process's mmap_sem".into()),
            Act::Spin(SpinOn::ULock(o) | SpinOn::KLock(KLockRef::Obj(o)) | SpinOn::Barrier(o) | SpinOn::Mutex(o)) => {
                Some(format!("spinning on '{}'", name(o)))
            }
            Act::Spin(SpinOn::KLock(KLockRef::Mm(m))) => Some(format!("spinning on the kernel's {}", m.name())),
            Act::Spin(SpinOn::KLock(KLockRef::Word(f))) => {
                Some(format!("spinning on the kernel lock behind '{}' (a futex bucket or a socket lock)", name(f.obj)))
            }
            Act::Spin(SpinOn::RemoteCall(_)) => Some("waiting for remote CPUs to acknowledge a TLB shootdown or membarrier".into()),
            _ => None,
        }
    }
}

/// A PMT spinlock waiter's preemptable loop ([`super::spinlock::Discipline::Pmt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmtWait {
    /// Spinning left before it competes out of order (ns); `u64::MAX` = it competes already
    /// (its turn came, its timeout ran out, or the lock is not PMT).
    pub left: u64,
    /// The lock's `head` when the timeout was last computed.
    pub head: u64,
}

impl PmtWait {
    /// Competing for the lock by test-and-set.
    pub const RACING: PmtWait = PmtWait { left: u64::MAX, head: 0 };
}

/// `spin_window` of a thread that just started spinning: its first PLE window is not armed yet.
pub(crate) const SPIN_WINDOW_UNSET: u64 = u64::MAX;

/// Whether the interpreter continues with the next operation.
pub(crate) enum Flow {
    Continue,
    Stop,
}

impl World<'_> {
    /// One resolution step for thread `t`, current on CPU `cpu` of kernel `k`.
    pub(crate) fn step_thread(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Step {
        let th = &self.threads[t as usize];
        if k != HOST && th.act == Act::Compute && th.kdepth == 0 && th.compute_rem > 0 {
            let v = self.vcpu_of(k, cpu);
            if std::mem::take(&mut self.vcpus[v as usize].fpu_inactive) {
                // User computation's first FPU/SSE instruction with the guest FPU deactivated:
                // #NM exit, KVM reloads the guest FPU (vmx_fpu_activate, kvm_load_guest_fpu).
                // Guest kernel code and spin loops do not touch the FPU.
                self.exit(v, crate::virt::exit::ExitReason::ExceptionNmi);
                return Step::Again;
            }
        }
        let th = &self.threads[t as usize];
        match th.act {
            Act::Compute => {
                if th.compute_rem == 0 {
                    self.threads[t as usize].act = Act::Fresh;
                    return Step::Again;
                }
                let layer = if th.kdepth > 0 { Layer::Kernel } else { Layer::User };
                let attr = Attr { owner: self.leaf_owner(k, cpu, t), layer, cause: Cause::Compute };
                Step::Leaf(Leaf { attr, rem: Rem::Compute(t), thread: Some(t) })
            }
            Act::Spin(on) => {
                if on == SpinOn::Rwsem {
                    if let Some(s) = self.rwsem_spin_step(k, cpu, t) {
                        return s;
                    }
                } else if self.try_finish_spin(t, on) {
                    self.threads[t as usize].act = Act::Fresh;
                    self.threads[t as usize].spin_budget = u64::MAX;
                    return Step::Again;
                }
                let owner = self.leaf_owner(k, cpu, t);
                let attr = match on {
                    SpinOn::KLock(_) | SpinOn::Rwsem => Attr { owner, layer: Layer::Kernel, cause: Cause::SpinKernel },
                    SpinOn::RemoteCall(sd) => Attr { owner, layer: Layer::Kernel, cause: self.remote_calls[sd as usize].kind.wait_cause() },
                    SpinOn::ULock(_) | SpinOn::Barrier(_) | SpinOn::Mutex(_) => Attr { owner, layer: Layer::User, cause: Cause::SpinUser },
                };
                if attr.layer == Layer::User {
                    // PLE sees only CPL-0 PAUSE loops of a guest.
                    let budget = self.threads[t as usize].spin_budget;
                    if budget == 0 {
                        self.spin_budget_spent(k, cpu, t, on);
                        return Step::Again;
                    }
                    let rem = if budget == u64::MAX { Rem::Inf } else { Rem::SpinBudget(t) };
                    return Step::Leaf(Leaf { attr, rem, thread: Some(t) });
                }
                if k == HOST {
                    return Step::Leaf(Leaf { attr, rem: Rem::Inf, thread: Some(t) });
                }
                self.step_guest_kernel_spin(k, cpu, t, on, attr)
            }
            Act::Fresh => {
                self.advance(k, cpu, t);
                Step::Again
            }
            Act::Blocked(_) | Act::Done => {
                // Not runnable but still current: the reschedule point switches it out.
                self.kernels[k as usize].cpus[cpu as usize].need_resched = true;
                Step::Again
            }
        }
    }

    /// A thread spinning with PAUSE in a guest kernel: PLE window, PV spinlock threshold.
    fn step_guest_kernel_spin(&mut self, k: KernelId, cpu: u32, t: ThreadId, on: SpinOn, attr: Attr) -> Step {
        let v = self.vcpu_of(k, cpu);
        let ple = self.ple_window_ns(v);
        // PV spinlocks halt FIFO waiters (PV ticket locks, PV qspinlock); test-and-set and PMT
        // waiters never halt.
        let pv = matches!(on, SpinOn::KLock(r) if self.vspec(v).pv.spinlocks && self.klock_discipline(t, r) == Discipline::Fifo);
        let pv_spin = self.vspec(v).pv.spin_threshold.saturating_mul(self.costs.pause);
        let epoch = self.vcpus[v as usize].ple_epoch;
        let th = &mut self.threads[t as usize];
        if th.spin_window == SPIN_WINDOW_UNSET || th.ple_epoch != epoch {
            // A new PAUSE loop: the first spin, or the loop was interrupted (exit, interrupt).
            th.spin_window = ple.unwrap_or(u64::MAX);
            th.ple_epoch = epoch;
        }
        if !pv {
            th.pv_left = u64::MAX;
        } else if th.pv_left == u64::MAX {
            th.pv_left = pv_spin.max(1);
        }
        if ple.is_some() && th.spin_window == 0 {
            // A whole window of PAUSE-spinning at CPL 0: pause-loop exit.
            self.ple_exit(v);
            return Step::Again;
        }
        if pv && th.pv_left == 0 {
            // pv_wait: halt until kicked (or any interrupt); spin a full threshold after.
            th.pv_left = u64::MAX;
            self.vcpus[v as usize].pv.spin_halts += 1;
            self.vcpu_halt(v);
            return Step::Again;
        }
        let rem =
            if th.spin_window == u64::MAX && th.pv_left == u64::MAX && th.pmt.left == u64::MAX { Rem::Inf } else { Rem::SpinWindow(t) };
        Step::Leaf(Leaf { attr, rem, thread: Some(t) })
    }

    pub(crate) fn leaf_owner(&self, k: KernelId, cpu: u32, t: ThreadId) -> u32 {
        if k == HOST {
            self.tasks[self.threads[t as usize].task as usize].owner
        } else {
            self.vcpus[self.vcpu_of(k, cpu) as usize].owner
        }
    }

    /// The core thread `t` executes on, if it is current on an executing CPU.
    pub(crate) fn thread_core(&self, t: ThreadId) -> Option<u32> {
        let task = &self.tasks[self.threads[t as usize].task as usize];
        if task.state != crate::kernel::TaskState::Running {
            return None;
        }
        self.kcpu_core(task.kernel, task.cpu)
    }

    /// Executes operations of `t` until one takes time or changes its state.
    fn advance(&mut self, k: KernelId, cpu: u32, t: ThreadId) {
        debug_assert!(!self.in_syscall(k, cpu), "a thread steps only once its CPU's queued work has run");
        // The kernel path under way first (a futex call, a memory operation), to its end.
        if let Flow::Stop = self.run_mm_queue(k, cpu, t) {
            return;
        }
        if self.in_syscall(k, cpu) {
            return;
        }
        if let Some(h) = self.threads[t as usize].held_lock.take() {
            // The mutex kept across a futex wake, once the wake's system call has returned.
            self.release_held_lock(k, cpu, t, h);
            if self.in_syscall(k, cpu) {
                return;
            }
        }
        if let Some(m) = self.threads[t as usize].pending_lock.take() {
            // After a futex wake (or a condvar wait) the lock is retried without spinning.
            if let Flow::Stop = self.op_lock_ex(k, cpu, t, m, false) {
                return;
            }
        }
        let wl = self.insts[self.threads[t as usize].inst as usize].wl.clone();
        loop {
            if self.fault.is_some() || !self.count_step() {
                return;
            }
            // Every instruction moves the program counter on by one; loop and thread-block
            // instructions then set it explicitly.
            let pc = self.threads[t as usize].pc;
            self.threads[t as usize].pc = pc + 1;
            let instr = &wl.program.instrs[pc as usize];
            let flow = match instr {
                Instr::Compute { dist, skew, split, mem } => {
                    let size = if *skew > 0.0 || *split { self.group_size(&wl, t) } else { 1 };
                    let th = &mut self.threads[t as usize];
                    let mut ns = dist.sample(&mut th.rng);
                    if *split {
                        ns /= u64::from(size);
                    }
                    if *skew > 0.0 && size > 1 {
                        let f = 1.0 + f64::from(*skew) * (2.0 * f64::from(th.idx) / f64::from(size - 1) - 1.0);
                        ns = (ns as f64 * f).round() as u64;
                    }
                    match ns {
                        0 => Flow::Continue,
                        ns => {
                            th.compute_rem = ns;
                            th.mem = *mem;
                            th.act = Act::Compute;
                            Flow::Stop
                        }
                    }
                }
                Instr::Sleep(d) => match d.sample(&mut self.threads[t as usize].rng) {
                    0 => Flow::Continue,
                    ns => self.op_sleep(k, cpu, t, ns),
                },
                Instr::Lock(m) => self.op_lock(k, cpu, t, *m),
                Instr::LockBlock(m) => self.op_lock_ex(k, cpu, t, *m, false),
                Instr::Unlock(m) => self.op_unlock(k, cpu, t, *m),
                Instr::SpinLock(l) => self.op_spin_lock(t, *l),
                Instr::SpinUnlock(l) => self.op_spin_unlock(t, *l),
                Instr::KSpinLock(l) => self.op_kspin_lock(t, KLockRef::Obj(*l)),
                Instr::KSpinUnlock(l) => self.op_kspin_unlock(t, KLockRef::Obj(*l)),
                Instr::Barrier(b) => self.op_barrier(k, cpu, t, *b, true),
                Instr::Arrive(b) => self.op_barrier(k, cpu, t, *b, false),
                Instr::CondWait { cond, mutex } => self.op_cond_wait(k, cpu, t, *cond, *mutex),
                Instr::CondSignal(c) => self.op_cond_wake(k, cpu, t, *c, false),
                Instr::CondBroadcast(c) => self.op_cond_wake(k, cpu, t, *c, true),
                Instr::LoopStart { count, end, share } => {
                    let size = if *share == Share::Each { 1 } else { self.group_size(&wl, t) };
                    let th = &mut self.threads[t as usize];
                    let mut count = count.value(self.insts[th.inst as usize].n);
                    match share {
                        Share::Each => {}
                        Share::Split => {
                            let size = u64::from(size);
                            count = count / size + u64::from(u64::from(th.idx) < count % size);
                        }
                        Share::Dynamic => {
                            let entry = match th.pool_entries.iter_mut().find(|e| e.0 == pc) {
                                Some(e) => e,
                                None => {
                                    th.pool_entries.push((pc, 0));
                                    th.pool_entries.last_mut().expect("just pushed")
                                }
                            };
                            let key = (pc, entry.1);
                            entry.1 += 1;
                            count = u64::from(self.insts[th.inst as usize].enter_pool(key, count, size));
                        }
                    }
                    let th = &mut self.threads[t as usize];
                    if count == 0 {
                        th.pc = end + 1;
                    } else {
                        th.loops.push((count, 0));
                    }
                    Flow::Continue
                }
                Instr::LoopEnd { start } => {
                    let dynamic = matches!(wl.program.instrs[*start as usize], Instr::LoopStart { share: Share::Dynamic, .. });
                    let size = if dynamic { self.group_size(&wl, t) } else { 1 };
                    let th = &mut self.threads[t as usize];
                    let top = th.loops.last_mut().expect("loop stack");
                    top.0 -= 1;
                    top.1 += 1;
                    if top.0 == 0 && dynamic {
                        // Take the next iteration of the pool, if one is left.
                        let episode = th.pool_entries.iter().find(|e| e.0 == *start).expect("entered").1 - 1;
                        top.0 = u64::from(self.insts[th.inst as usize].take_pool_item((*start, episode), size));
                    }
                    if top.0 > 0 {
                        th.pc = start + 1;
                    } else {
                        th.loops.pop();
                    }
                    Flow::Continue
                }
                Instr::OnlyThreads { first, count, end, rotate } => {
                    let n = self.insts[self.threads[t as usize].inst as usize].n;
                    let size = if *rotate { u64::from(self.group_size(&wl, t)) } else { 1 };
                    let th = &mut self.threads[t as usize];
                    let mut first = *first;
                    if *rotate {
                        let iter = th.loops.last().map_or(0, |l| l.1);
                        first = ((u64::from(first) + iter) % size) as u32;
                    }
                    if th.idx < first || th.idx >= first + count.value(n) {
                        th.pc = *end;
                    }
                    Flow::Continue
                }
                Instr::Push { queue, lane } => self.op_push(k, cpu, t, *queue, *lane),
                Instr::DrainPop { queue, end, lane } => match self.op_pop(k, cpu, t, *queue, *lane) {
                    Some(true) => Flow::Continue,
                    Some(false) => {
                        self.threads[t as usize].pc = *end;
                        Flow::Continue
                    }
                    None => Flow::Stop,
                },
                Instr::DrainEnd { start } => {
                    self.threads[t as usize].pc = *start;
                    let Instr::DrainPop { queue, .. } = wl.program.instrs[*start as usize] else { unreachable!("compiled in pairs") };
                    self.queue_item_done(k, cpu, t, queue);
                    Flow::Continue
                }
                Instr::Join(q) => self.op_join(k, cpu, t, *q),
                Instr::Respond(_) => {
                    let lat = self.now.since(self.threads[t as usize].item);
                    self.insts[self.threads[t as usize].inst as usize].responses.push(lat);
                    Flow::Continue
                }
                Instr::Malloc(d) => {
                    let th = &mut self.threads[t as usize];
                    let bytes = d.sample(&mut th.rng).max(1);
                    let id = crate::workload::heap::ChunkId { thread: t, seq: th.allocs };
                    th.allocs += 1;
                    let (arena, par) = th.heap(&mut self.insts[th.inst as usize]);
                    let mut ops = Vec::new();
                    arena.malloc(par, id, bytes, &mut ops);
                    let vma = th.arena;
                    if th.faults_left != u64::MAX {
                        // A replayed thread that touched less than it allocated takes no more
                        // faults than the kernel counted for it (and a mapped chunk's munmap
                        // releases only the pages it touched).
                        for op in &mut ops {
                            if let crate::workload::heap::MmOp::Faults(n) = op {
                                *n = (*n).min(th.faults_left);
                                th.faults_left -= *n;
                                arena.touched(id, *n);
                            }
                        }
                        ops.retain(|op| *op != crate::workload::heap::MmOp::Faults(0));
                    }
                    th.mm_queue.extend(ops.into_iter().map(|op| (op, vma)));
                    self.run_mm_queue(k, cpu, t)
                }
                Instr::Free(n) => {
                    let th = &mut self.threads[t as usize];
                    let (arena, par) = th.heap(&mut self.insts[th.inst as usize]);
                    let mut ops = Vec::new();
                    arena.free(par, t, *n, &mut ops);
                    let vma = th.arena;
                    th.mm_queue.extend(ops.into_iter().map(|op| (op, vma)));
                    self.run_mm_queue(k, cpu, t)
                }
                Instr::FreeChunk { owner, seq } => {
                    let inst = self.threads[t as usize].inst as usize;
                    let o = self.insts[inst].threads[*owner as usize];
                    let (process, arena) = (self.threads[o as usize].process, self.threads[o as usize].arena);
                    let mut ops = Vec::new();
                    if let Some(a) = arena {
                        let (arena, par) = self.insts[inst].heaps[process as usize].get(a);
                        arena.free_chunk(par, crate::workload::heap::ChunkId { thread: o, seq: *seq }, &mut ops);
                    }
                    self.threads[t as usize].mm_queue.extend(ops.into_iter().map(|op| (op, arena)));
                    self.run_mm_queue(k, cpu, t)
                }
                Instr::MmUnmap { call, pages } => {
                    use crate::workload::heap::MmOp;
                    let op = if *call == crate::workload::program::MmCall::Mprotect {
                        MmOp::Protect(*pages)
                    } else {
                        MmOp::Munmap(*pages, *pages)
                    };
                    self.threads[t as usize].mm_queue.push_back((op, None));
                    self.run_mm_queue(k, cpu, t)
                }
                Instr::Fault(pages) => {
                    self.threads[t as usize].mm_queue.push_back((crate::workload::heap::MmOp::Faults(*pages), None));
                    self.run_mm_queue(k, cpu, t)
                }
                Instr::Membarrier => {
                    self.syscall(k, cpu, t);
                    self.membarrier(k, cpu, t)
                }
                Instr::End => {
                    self.thread_exit(k, cpu, t);
                    Flow::Stop
                }
            };
            if let Flow::Stop = flow {
                return;
            }
            if self.threads[t as usize].held_lock.is_some() {
                // A pop that woke a blocked producer, or the broadcast of a condvar barrier:
                // the thread holds the mutex until its futex wake returns.
                return;
            }
            if self.in_syscall(k, cpu) {
                // The operation made a system call (a futex wake, page faults, mprotect,
                // munmap or madvise with its local flush): the thread is in the kernel until
                // it returns, and may be preempted at its return (`exit_to_user_mode_loop`),
                // so its next operation (an unlock, taking a lock, arriving at a barrier)
                // happens afterwards, not at the instant the call was made.
                return;
            }
        }
    }

    /// Whether the current thread of (`k`, `cpu`) made a system call whose kernel work is
    /// queued (the CPU's work queue is empty whenever a thread is stepped).
    fn in_syscall(&self, k: KernelId, cpu: u32) -> bool {
        !self.kernels[k as usize].cpus[cpu as usize].kwork.is_empty()
    }

    /// The number of threads in thread `t`'s group (for its instance's `n`).
    fn group_size(&self, wl: &crate::workload::Workload, t: ThreadId) -> u32 {
        let th = &self.threads[t as usize];
        wl.groups[th.group as usize].threads.value(self.insts[th.inst as usize].n)
    }

    /// Carries out queued memory-management operations; stops at the first shootdown the
    /// thread must wait for.
    fn run_mm_queue(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Flow {
        use super::kpath::KStep;
        use crate::workload::heap::MmOp;
        loop {
            // The kernel path of the operation under way first (page faults, the pages a
            // zap frees after its flush).
            if let Flow::Stop = self.run_kpath(k, cpu, t) {
                return Flow::Stop;
            }
            let Some((op, vma)) = self.threads[t as usize].mm_queue.pop_front() else { return Flow::Continue };
            // Each call under the process's mmap_sem ([`super::rwsem`]): for writing in mmap,
            // mprotect (glibc's heap growth included) and munmap; for reading in
            // madvise(MADV_DONTNEED) (`madvise_need_mmap_write`) and the page faults, or under
            // their VMA's lock alone where the kernel has per-VMA locks (`mm_locks`): the
            // arena's heap, which its growth write-locks.
            use super::rwsem::Mode::Write;
            let locks = self.kernels[k as usize].params.mm_locks;
            let steps = match op {
                MmOp::Mmap(_) => vec![KStep::Down(Write), KStep::Work(self.costs.syscall_mm, Cause::MemoryOp), KStep::Up],
                MmOp::Grow(_) => {
                    let mut s = vec![KStep::Down(Write)];
                    s.extend(vma.filter(|_| locks.faults_per_vma()).map(KStep::VmaWrite));
                    s.extend([KStep::Work(self.costs.syscall_mm, Cause::MemoryOp), KStep::Up]);
                    s
                }
                MmOp::Faults(n) => vec![KStep::Faults(n, locks.read_lock(false, vma))],
                MmOp::Munmap(pages, resident) => vec![KStep::Down(Write), KStep::Zap { pages, release: resident }, KStep::Up],
                MmOp::Trim(pages) => {
                    vec![KStep::ReadLock(locks.read_lock(true, vma)), KStep::Zap { pages, release: pages }, KStep::ReadUnlock]
                }
                MmOp::Protect(pages) => vec![KStep::Down(Write), KStep::Zap { pages, release: 0 }, KStep::Up],
            };
            self.threads[t as usize].kpath.extend(steps);
        }
    }

    /// The current thread of (`k`, `cpu`) goes to sleep on a timer (`sleep`), paying a system
    /// call (`syscall_futex`, for want of a separate cost).
    pub(crate) fn block_sleep(&mut self, k: KernelId, cpu: u32, t: ThreadId) {
        let attr = self.ctx_attr_thread(k, cpu, t, Cause::Syscall);
        self.push_work(k, cpu, attr, self.costs.syscall_futex);
        self.block_thread(k, cpu, t, BlockOn::Sleep);
    }

    /// Thread `t`, current on (`k`, `cpu`), goes to sleep on `on` (a voluntary switch).
    pub(crate) fn block_thread(&mut self, k: KernelId, cpu: u32, t: ThreadId, on: BlockOn) {
        let th = &mut self.threads[t as usize];
        th.act = Act::Blocked(on);
        th.stats.creation_wait = th.stats.blocks == 0 && self.tasks[th.task as usize].newborn;
        th.stats.blocks += 1;
        th.stats.blocked_at = self.now.ns();
        if !th.stats.creation_wait {
            let s = &mut self.insts[th.inst as usize].sync;
            match on.class() {
                BlockClass::Sync => s.blocks_sync += 1,
                BlockClass::Sleep => s.blocks_sleep += 1,
                BlockClass::Other => s.blocks_other += 1,
            }
        }
        self.block_curr(k, cpu, false);
    }

    /// Charges a system call of the running thread (e.g. a futex wake).
    pub(crate) fn syscall(&mut self, k: KernelId, cpu: u32, t: ThreadId) {
        let attr = self.ctx_attr_thread(k, cpu, t, Cause::Syscall);
        self.push_work(k, cpu, attr, self.costs.syscall_futex);
    }

    /// Kernel-layer attribution of thread `t`'s overhead on (`k`, `cpu`).
    fn ctx_attr_thread(&self, k: KernelId, cpu: u32, t: ThreadId, cause: Cause) -> Attr {
        Attr { owner: self.leaf_owner(k, cpu, t), layer: Layer::Kernel, cause }
    }

    /// Makes blocked thread `t` runnable; the wake-up executes on (`k`, `cpu`). A thread still
    /// on its way into a futex wait does not go to sleep ([`super::futex`]).
    pub(crate) fn wake_thread(&mut self, t: ThreadId, waker: (KernelId, u32)) {
        let th = &mut self.threads[t as usize];
        if !matches!(th.act, Act::Blocked(_)) && th.blocking.take().is_some() {
            // Woken on its way into the wait: a thread created before it reached its start
            // wait is running already, so no later wake-up is its creation.
            let task = th.task;
            self.tasks[task as usize].newborn = false;
            return;
        }
        debug_assert!(matches!(th.act, Act::Blocked(_)));
        th.act = Act::Fresh;
        let (task, inst, slept) = (th.task, th.inst, self.now.ns() - th.stats.blocked_at);
        // A creation is no wake-up (its wait was not counted as a block).
        let created = std::mem::take(&mut th.stats.creation_wait);
        self.wake_task(task, Some(waker));
        if !created {
            let local = waker == (self.tasks[task as usize].kernel, self.tasks[task as usize].cpu);
            let s = &mut self.insts[inst as usize].sync;
            s.block_ns.record(slept);
            s.wakeups += 1;
            s.wakeups_local += u64::from(local);
        }
    }

    fn thread_exit(&mut self, k: KernelId, cpu: u32, t: ThreadId) {
        let wl = self.insts[self.threads[t as usize].inst as usize].wl.clone();
        for &(q, lane) in &wl.groups[self.threads[t as usize].group as usize].pushes {
            self.queue_producer_done(k, cpu, t, q, lane);
        }
        if !self.threads[t as usize].kpath.is_empty() {
            // The wake-ups of the queues it closed run first (`do_exit` returns after them).
            self.threads[t as usize].kpath.push_back(super::kpath::KStep::Exit);
            return;
        }
        self.thread_finish(k, cpu, t);
    }

    /// Thread `t` is gone: the last one of its instance finishes the instance.
    pub(crate) fn thread_finish(&mut self, k: KernelId, cpu: u32, t: ThreadId) {
        self.threads[t as usize].act = Act::Done;
        self.block_curr(k, cpu, true);
        let th = &self.threads[t as usize];
        let inst = &mut self.insts[th.inst as usize];
        if let Some(a) = th.arena {
            inst.heaps[th.process as usize].detach(a);
        }
        inst.live -= 1;
        if inst.live == 0 {
            inst.finish = Some(self.now);
            if !inst.background {
                self.live -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::api::{Plan, ScenarioResult};
    use crate::world::record::SyncRecord;

    /// Runs every cell of a spec with one inline workload `w`.
    fn run(experiment: &str, workload: &str) -> Vec<ScenarioResult> {
        let text = format!("[experiment]\nworkloads = [\"w\"]\n{experiment}\n[workloads.w]\n{workload}\n");
        let mut plan = Plan::new(&text, "test.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
        (0..plan.cells().len()).map(|i| plan.run_cell(i).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    fn sync(r: &ScenarioResult) -> &SyncRecord {
        &r.run.instances[0].sync
    }

    /// Conservation: the classes add up, every ended wait is one wake-up, local + remote.
    fn check_sums(s: &SyncRecord) {
        assert_eq!(s.blocks, s.blocks_sync + s.blocks_sleep + s.blocks_other, "{s:?}");
        assert_eq!(s.wakeups, s.block_ns_count, "{s:?}");
        assert!(s.wakeups <= s.blocks, "{s:?}");
        assert_eq!(s.wakeups, s.wakeups_local + s.wakeups_remote, "{s:?}");
    }

    /// Three threads, a 3-party barrier: two arrive at once and sleep (two futex waits); the
    /// third arrives 1 ms later and wakes both with one futex wake. Natively on 3 CPUs and in
    /// a VM of 3 vCPUs alike: 2 blocks (sync), 2 wake-ups, 3 futex calls; each wait lasts
    /// about the 1 ms the third thread computes; the woken threads stay on their own idle
    /// (v)CPUs, not the waker's: both wake-ups are remote.
    #[test]
    fn a_barrier_by_hand_natively_and_in_a_vm() {
        let prog = "objects = { b = { kind = \"barrier\", parties = 3 } }\n\
                    [[workloads.w.groups]]\nname = \"early\"\nthreads = 2\nprogram = [ { barrier = \"b\" } ]\n\
                    [[workloads.w.groups]]\nname = \"late\"\nthreads = 1\nprogram = [ { compute = \"1ms\" }, { barrier = \"b\" } ]\n";
        for r in &run("scenarios = [\"native\", \"UC\"]\nvcpus = [3]\n", prog) {
            let s = sync(r);
            check_sums(s);
            assert_eq!((s.blocks, s.blocks_sync, s.wakeups, s.wakeups_remote), (2, 2, 2, 2), "{:?}: {s:?}", r.scenario);
            assert_eq!((s.futex_waits, s.futex_wakes), (2, 1), "{:?}: {s:?}", r.scenario);
            for ns in [s.block_mean_ns, s.block_p50_ns, s.block_p90_ns] {
                assert!((990_000.0..1_010_000.0).contains(&ns), "{:?}: {s:?}", r.scenario);
            }
            assert!(s.block_p50_ns <= s.block_p90_ns && s.block_p90_ns <= s.block_max_ns as f64);
            let m = &r.metrics;
            assert_eq!((m["blocks"], m["wakeups_remote"], m["futex_calls"]), (2.0, 2.0, 3.0));
            assert_eq!(m["block_p50_us"], s.block_p50_ns / 1e3);
            let secs = r.run.instances[0].finish_ns as f64 * 1e-9;
            assert_eq!(m["blocks_per_s"], 2.0 / secs);
        }
    }

    /// One thread sleeping 1 ms five times: 5 timer sleeps, no futex call; the timer interrupt
    /// of its own CPU wakes it there (local); each sleep lasts 1 ms (to the timer's expiry).
    #[test]
    fn timer_sleeps_are_local_wakeups_without_futex_calls() {
        let prog = "program = [ { repeat = { times = 5, body = [ { sleep = \"1ms\" } ] } } ]\n";
        for r in &run("scenarios = [\"native\", \"UC\"]\nvcpus = [1]\nthreads = 1\n", prog) {
            let s = sync(r);
            check_sums(s);
            assert_eq!((s.blocks, s.blocks_sleep, s.wakeups, s.wakeups_local), (5, 5, 5, 5), "{:?}: {s:?}", r.scenario);
            assert_eq!((s.futex_waits, s.futex_wakes), (0, 0));
            assert!((1_000_000.0..1_010_000.0).contains(&s.block_p50_ns), "{:?}: {s:?}", r.scenario);
        }
    }

    /// The handoff built-in (2 tokens among 4 threads through a condvar): most waits are
    /// condvar waits, every wait but the last ones ends with a wake-up, and the counters are
    /// the same run after run.
    #[test]
    fn handoff_counts_are_conserved_and_deterministic() {
        let text = "[experiment]\nworkloads = [\"handoff\"]\nscenarios = [\"native\", \"UC\"]\nvcpus = [4]\nseeds = [1]\n";
        let go = || {
            let mut plan =
                Plan::new(text, "test.toml", &["workloads.handoff.params.items=200".to_string()]).unwrap_or_else(|e| panic!("{e}"));
            (0..plan.cells().len()).map(|i| plan.run_cell(i).unwrap_or_else(|e| panic!("{e}"))).collect::<Vec<_>>()
        };
        let (a, b) = (go(), go());
        for (r, again) in a.iter().zip(&b) {
            let s = sync(r);
            check_sums(s);
            assert_eq!(s, sync(again), "deterministic");
            assert!(s.blocks_sync >= 200 && s.blocks_sleep == 0, "{s:?}");
            assert_eq!(s.blocks, r.run.instances[0].counters.blocks, "no created threads: every block counts");
            assert!(s.futex_waits >= s.blocks_sync && s.futex_wakes > 0, "{s:?}");
        }
    }
}
