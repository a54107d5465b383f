//! Workload instances and their synchronisation objects (futex-style, as glibc/Linux).
//!
//! - Mutex: `lock` takes a free mutex or blocks (futex wait); `unlock` frees it and wakes the
//!   first waiter, which then retries (no hand-off, as glibc's default mutex).
//! - User spinlock (test-and-set): waiters spin in user mode; on release the lock goes to a
//!   spinner that is running at that instant (chosen by the lock's random stream), else to
//!   whichever spinner runs first.
//! - Kernel spinlock ([`super::spinlock`]): waiters spin at CPL 0 and are not preemptible; the
//!   kernel's implementation hands it over in ticket order (a descheduled holder or next waiter
//!   stalls everyone: LHP / LWP), by test-and-set (only a descheduled holder does), or PMT.
//! - Barrier: the last arrival opens it; blocking barriers wake every waiter (futex wake),
//!   spin barriers are seen by spinners as soon as they run. A condvar barrier (PARMACS
//!   `BARRIER`) has a mutex that arrivals take to count themselves and that waiters re-acquire
//!   after the broadcast, which the last arrival makes holding it: woken waiters that find it
//!   taken block on it again (requeued onto it at once with `cond_broadcast = "requeue"`).
//! - Spin budgets: a mutex or barrier with `spin` busy-waits in user mode up to its budget
//!   (time running on a CPU), then blocks as above (`parsec_barrier`, libgomp, adaptive
//!   mutexes); a barrier with an unbounded budget is a spin barrier.
//! - Queue: `push` appends a timestamped item (blocking while full), a drain loop pops one
//!   (blocking while empty); a queue closes when its last producer thread exits. `join` blocks
//!   until every item pushed so far has been popped and its drain body has finished; the
//!   consumer finishing the last one wakes the joiners (a thread pool's wait-for-completion).
//!   A laned queue is that per lane (PARSEC dedup's `queue_t` array): each lane has its own
//!   items, waiters and producers; a thread uses its own lane or every lane in turn
//!   ([`Lane`]); `join` counts the items of every lane. Each lane has a mutex (`queue_t`'s): a
//!   push or pop that wakes a blocked thread holds it across the futex wake and releases it
//!   at the thread's next operation, after the system call and any wake-up preemption; a
//!   woken thread that tries the lane meanwhile blocks on the mutex.
//! - Condition variable: `signal` wakes the first waiter or, with none, leaves a token that
//!   the next `wait` consumes without blocking (the predicate a correct program re-checks);
//!   `broadcast` wakes every current waiter. `wait` needs the mutex, releases it while
//!   blocked and re-acquires it after waking.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::engine::{SimTime, Stream};
use crate::spec::kernel::{CondBroadcast, SpinlockImpl};
use crate::workload::program::{BarrierImpl, KSpinImpl, Lane, ObjDecl, ObjId, ObjKind, QueueImpl};
use crate::workload::Workload;
use crate::world::World;

use super::futex::word::{self, Lane as LaneWord};
use super::spinlock::{Discipline, KLockRef, TicketLock, PMT_TIMEOUT_PAUSES};
use super::thread::{Act, BarrierPhase, BlockOn, Flow, HeldLock, PmtWait, SpinOn};
use super::{KernelId, ThreadId};

/// The mutex of a mutex-and-condvar barrier: a default glibc mutex (no hand-off: a woken
/// waiter retries, and a running thread may take it first).
#[derive(Debug, Default)]
pub struct BarrierMutex {
    /// Holder.
    pub holder: Option<ThreadId>,
    /// Futex waiters in the order they queued.
    pub waiters: VecDeque<ThreadId>,
}

/// A synchronisation object's state.
#[derive(Debug)]
pub enum Obj {
    /// Blocking mutex.
    Mutex {
        /// Holder.
        holder: Option<ThreadId>,
        /// Futex waiters in arrival order.
        waiters: VecDeque<ThreadId>,
        /// Spin budget before blocking (ns; None = block at once).
        spin: Option<u64>,
        /// Threads spinning for it.
        spinners: Vec<ThreadId>,
    },
    /// User test-and-set spinlock.
    SpinLock {
        /// Holder.
        holder: Option<ThreadId>,
        /// Spinning threads.
        spinners: Vec<ThreadId>,
        /// Chooses among running spinners on release.
        rng: Box<Stream>,
    },
    /// Kernel spinlock, and how it is built (a `spinlock_t` or a bit spinlock).
    KSpin(TicketLock, KSpinImpl),
    /// Barrier (blocking or spin).
    Barrier {
        /// Threads that must arrive.
        parties: u32,
        /// Arrived so far in this generation.
        arrived: u32,
        /// Generation (episodes completed).
        gen: u64,
        /// Threads waiting in this generation.
        waiters: Vec<ThreadId>,
        /// Spin budget before blocking (ns; None = block at once, `u64::MAX` = never block).
        spin: Option<u64>,
        /// The mutex of a mutex-and-condvar barrier (PARMACS `BARRIER`); None for a futex
        /// barrier.
        lock: Option<BarrierMutex>,
    },
    /// FIFO of timestamped items, in one or more lanes.
    Queue {
        /// Its lanes (one unless declared with `lane_threads`).
        lanes: Vec<QueueLane>,
        /// Threads per lane (`u32::MAX` for one lane).
        lane_threads: u32,
        /// Capacity per lane (None = unbounded).
        capacity: Option<u32>,
        /// Each rotating thread's next lane.
        cursors: Vec<(ThreadId, u32)>,
        /// Items pushed whose drain body has not finished (queued or being processed).
        outstanding: u64,
        /// Threads blocked in `join` until `outstanding` is 0.
        joiners: Vec<ThreadId>,
        /// A kernel socket (`impl = "socket"`) rather than a C-library queue.
        socket: bool,
    },
    /// Condition variable.
    Cond {
        /// Signals not yet consumed.
        tokens: u64,
        /// Waiters in arrival order.
        waiters: VecDeque<ThreadId>,
    },
}

/// One lane of a queue.
#[derive(Debug, Default)]
pub struct QueueLane {
    /// Push times of the items.
    items: VecDeque<SimTime>,
    /// Producer threads not finished.
    producers: u32,
    /// Consumers blocked on it while empty.
    pop_waiters: VecDeque<ThreadId>,
    /// Producers blocked on it while full.
    push_waiters: VecDeque<ThreadId>,
    /// The thread holding the lane's mutex across the futex wake it makes inside it.
    holder: Option<ThreadId>,
    /// Threads blocked on the lane's mutex (they retry their `push` or pop when woken).
    lock_waiters: VecDeque<ThreadId>,
}

impl QueueLane {
    fn closed_and_empty(&self) -> bool {
        self.producers == 0 && self.items.is_empty()
    }
}

/// One running copy of a workload.
#[derive(Debug)]
pub struct Instance {
    /// Display name ("native0", "vm1").
    pub name: String,
    /// The kernel its threads run in.
    pub kernel: KernelId,
    /// Its VM, if virtualized.
    pub vm: Option<u32>,
    /// The workload.
    pub wl: Arc<Workload>,
    /// Its threads.
    pub threads: Vec<ThreadId>,
    /// Its objects, by `ObjId`.
    pub objs: Vec<Obj>,
    /// Threads not finished.
    pub live: u32,
    /// When the last thread finished.
    pub finish: Option<SimTime>,
    /// A co-runner that runs until the measured instances finish (not waited for).
    pub background: bool,
    /// TLB shootdowns of its threads.
    pub tlb: super::tlb::TlbStats,
    /// `membarrier` calls of its threads (same fields; `deferred` is always 0).
    pub membarrier: super::tlb::TlbStats,
    /// The run's thread parameter n.
    pub n: u32,
    /// Response times recorded by `respond` (ns).
    pub responses: Vec<u64>,
    /// Its process's `mmap_sem` ([`super::rwsem`]): the threads of an instance share one
    /// address space.
    pub mmap_sem: super::rwsem::Rwsem,
    /// The locks of its arenas' heaps (VMAs), by arena, where its kernel has per-VMA locks
    /// ([`super::rwsem::MmLocks`]).
    pub vmas: Vec<super::rwsem::VmaLock>,
    /// How its threads took `mmap_sem` and the VMA locks.
    pub mm_locks: super::rwsem::MmLockStats,
    /// Its process's heap (glibc's `mp_` thresholds and its arenas); one per thread where its
    /// threads stand for processes (`processes = true`), each thread the main one of its own.
    pub heaps: Vec<crate::workload::heap::ProcessHeap>,
    /// The work pools of dynamic loops, by (pc of the `LoopStart`, episode): the k-th
    /// time the threads of a group reach the loop they share pool k.
    pub pools: BTreeMap<(u32, u64), WorkPool>,
    /// Its threads' blocking waits, wake-ups and futex calls.
    pub sync: super::thread::SyncStats,
}

/// The iterations of one episode of a dynamic loop ([`crate::workload::Share::Dynamic`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkPool {
    /// Iterations not taken yet.
    pub left: u64,
    /// Threads of the group that have reached the loop.
    pub arrived: u32,
}

impl Instance {
    /// A thread of a group of `size` reaches episode `key` of a dynamic loop of `total`
    /// iterations (the first arrival creates its pool) and takes its first iteration: 1 if one
    /// was left, else 0.
    pub fn enter_pool(&mut self, key: (u32, u64), total: u64, size: u32) -> u8 {
        self.pools.entry(key).or_insert(WorkPool { left: total, arrived: 0 }).arrived += 1;
        self.take_pool_item(key, size)
    }

    /// Takes one iteration of pool `key` for a thread of a group of `size`: 1 if one was
    /// left, else 0. A pool is dropped once it is empty and the whole group has reached it
    /// (no thread can ask it again).
    pub fn take_pool_item(&mut self, key: (u32, u64), size: u32) -> u8 {
        let Some(pool) = self.pools.get_mut(&key) else { return 0 };
        let took = u8::from(pool.left > 0);
        pool.left -= u64::from(took);
        if pool.left == 0 && pool.arrived >= size {
            self.pools.remove(&key);
        }
        took
    }
}

impl Obj {
    /// Fresh state for a declared object; `users` = threads whose program uses it (barrier
    /// parties by default); `producers` = producer threads of each lane of a queue.
    pub fn new(d: &ObjDecl, users: u32, producers: &[u32], rng: Stream) -> Obj {
        match d.kind {
            ObjKind::Mutex => Obj::Mutex { holder: None, waiters: VecDeque::new(), spin: d.spin, spinners: Vec::new() },
            ObjKind::SpinLock => Obj::SpinLock { holder: None, spinners: Vec::new(), rng: Box::new(rng) },
            ObjKind::KSpinLock => Obj::KSpin(TicketLock::default(), d.kspin_impl),
            ObjKind::Barrier | ObjKind::SpinBarrier => {
                let spin = if d.kind == ObjKind::SpinBarrier { Some(u64::MAX) } else { d.spin };
                let lock = (d.barrier_impl == BarrierImpl::Condvar).then(BarrierMutex::default);
                Obj::Barrier { parties: d.parties.unwrap_or(users), arrived: 0, gen: 0, waiters: Vec::new(), spin, lock }
            }
            ObjKind::CondVar => Obj::Cond { tokens: 0, waiters: VecDeque::new() },
            ObjKind::Queue => Obj::Queue {
                lanes: producers.iter().map(|&p| QueueLane { producers: p, ..Default::default() }).collect(),
                lane_threads: d.lane_threads.unwrap_or(u32::MAX),
                capacity: d.capacity,
                cursors: Vec::new(),
                outstanding: 0,
                joiners: Vec::new(),
                socket: d.queue_impl == QueueImpl::Socket,
            },
        }
    }
}

impl World<'_> {
    fn obj(&mut self, t: ThreadId, o: ObjId) -> &mut Obj {
        let inst = self.threads[t as usize].inst;
        &mut self.insts[inst as usize].objs[o as usize]
    }

    fn obj_name(&self, t: ThreadId, o: ObjId) -> String {
        let inst = &self.insts[self.threads[t as usize].inst as usize];
        inst.wl.objects[o as usize].name.clone()
    }

    fn misuse(&mut self, t: ThreadId, o: ObjId, what: &str) -> Flow {
        let th = &self.threads[t as usize];
        let msg = format!("{} thread {} {what} '{}'", self.insts[th.inst as usize].name, th.idx, self.obj_name(t, o));
        self.fail(msg);
        Flow::Stop
    }

    /// `lock`; `may_spin` is false when the thread already spent its spin budget (it is
    /// retrying after a futex wake).
    pub(crate) fn op_lock_ex(&mut self, k: KernelId, cpu: u32, t: ThreadId, m: ObjId, may_spin: bool) -> Flow {
        let Obj::Mutex { holder, waiters, spin, spinners } = self.obj(t, m) else { unreachable!("checked at parse") };
        match *holder {
            None => {
                *holder = Some(t);
                Flow::Continue
            }
            Some(h) if h == t => self.misuse(t, m, "locks again the mutex it holds"),
            Some(_) => match *spin {
                Some(budget) if may_spin => {
                    spinners.push(t);
                    self.spin_for(t, SpinOn::Mutex(m), budget);
                    Flow::Stop
                }
                _ => {
                    waiters.push_back(t);
                    self.threads[t as usize].pending_lock = Some(m);
                    self.futex_wait(k, cpu, t, BlockOn::Mutex(m), word::MAIN);
                    Flow::Stop
                }
            },
        }
    }

    pub(crate) fn op_lock(&mut self, k: KernelId, cpu: u32, t: ThreadId, m: ObjId) -> Flow {
        self.op_lock_ex(k, cpu, t, m, true)
    }

    pub(crate) fn op_unlock(&mut self, k: KernelId, cpu: u32, t: ThreadId, m: ObjId) -> Flow {
        let Obj::Mutex { holder, waiters, spinners, .. } = self.obj(t, m) else { unreachable!("checked at parse") };
        if *holder != Some(t) {
            return self.misuse(t, m, "unlocks a mutex it does not hold:");
        }
        *holder = None;
        let spinning = spinners.clone();
        if let Some(w) = waiters.pop_front() {
            self.futex_wake(k, cpu, t, m, word::MAIN, vec![w]);
        }
        // Running spinners see the lock free at once.
        for s in spinning {
            if let Some(core) = self.thread_core(s) {
                self.touch(core);
            }
        }
        Flow::Continue
    }

    /// Thread `t` busy-waits in user mode for `on`, at most `budget` ns of running time
    /// (`u64::MAX` = unbounded), then blocks.
    fn spin_for(&mut self, t: ThreadId, on: SpinOn, budget: u64) {
        let th = &mut self.threads[t as usize];
        th.spin_budget = budget;
        th.act = Act::Spin(on);
    }

    /// A spinner's budget ran out before its wait ended: it blocks (futex) instead.
    pub(crate) fn spin_budget_spent(&mut self, k: KernelId, cpu: u32, t: ThreadId, on: SpinOn) {
        self.threads[t as usize].spin_budget = u64::MAX;
        self.threads[t as usize].stats.spin_blocks += 1;
        match on {
            SpinOn::Mutex(m) => {
                // Block as a futex waiter; the wake-up retries without spinning.
                let Obj::Mutex { spinners, waiters, .. } = self.obj(t, m) else { unreachable!() };
                spinners.retain(|&s| s != t);
                waiters.push_back(t);
                self.threads[t as usize].pending_lock = Some(m);
                self.futex_wait(k, cpu, t, BlockOn::Mutex(m), word::MAIN);
            }
            SpinOn::Barrier(b) => self.futex_wait(k, cpu, t, BlockOn::Barrier(b), word::MAIN),
            SpinOn::ULock(_) | SpinOn::KLock(_) | SpinOn::RemoteCall(_) | SpinOn::Rwsem => unreachable!("no budget"),
        }
    }

    pub(crate) fn op_spin_lock(&mut self, t: ThreadId, l: ObjId) -> Flow {
        let Obj::SpinLock { holder, spinners, .. } = self.obj(t, l) else { unreachable!("checked at parse") };
        match *holder {
            None => {
                *holder = Some(t);
                Flow::Continue
            }
            Some(h) if h == t => self.misuse(t, l, "locks again the spinlock it holds"),
            Some(_) => {
                spinners.push(t);
                self.threads[t as usize].act = Act::Spin(SpinOn::ULock(l));
                Flow::Stop
            }
        }
    }

    pub(crate) fn op_spin_unlock(&mut self, t: ThreadId, l: ObjId) -> Flow {
        let running: Vec<(usize, u32)> = {
            let Obj::SpinLock { holder, spinners, .. } = self.obj(t, l) else { unreachable!("checked at parse") };
            if *holder != Some(t) {
                return self.misuse(t, l, "unlocks a spinlock it does not hold:");
            }
            *holder = None;
            let spinners = spinners.clone();
            spinners.iter().enumerate().filter_map(|(i, &s)| self.thread_core(s).map(|c| (i, c))).collect()
        };
        if running.is_empty() {
            return Flow::Continue;
        }
        let Obj::SpinLock { holder, spinners, rng } = self.obj(t, l) else { unreachable!() };
        let (i, core) = running[rng.below(running.len() as u64) as usize];
        *holder = Some(spinners.remove(i));
        self.touch(core);
        Flow::Continue
    }

    /// The kernel spinlock `r` of thread `t`: one its workload declares, or one of its kernel's.
    pub(crate) fn klock(&mut self, t: ThreadId, r: KLockRef) -> &mut TicketLock {
        match r {
            KLockRef::Obj(o) => {
                let Obj::KSpin(l, _) = self.obj(t, o) else { unreachable!("checked at parse") };
                l
            }
            KLockRef::Mm(m) => {
                let k = self.tasks[self.threads[t as usize].task as usize].kernel;
                self.kernels[k as usize].mm.lock(m)
            }
            KLockRef::Word(key) => {
                let k = self.tasks[self.threads[t as usize].task as usize].kernel;
                self.kernels[k as usize].word_locks.lock(key)
            }
        }
    }

    /// How the spinlocks of kernel `k` hand the lock over (`spinlock` of `[host]` / `[guest]`;
    /// see [`super::spinlock`]): queued spinlocks are FIFO natively and with PV spinlocks, and
    /// test-and-set in a guest without them (`virt_spin_lock`).
    pub(crate) fn lock_discipline(&self, k: KernelId) -> Discipline {
        let kern = &self.kernels[k as usize];
        match (kern.params.spinlock, kern.kind) {
            (SpinlockImpl::Ticket, _) => Discipline::Fifo,
            (SpinlockImpl::Byte, _) => Discipline::TestAndSet,
            (SpinlockImpl::Pmt, _) => Discipline::Pmt { unit_ns: PMT_TIMEOUT_PAUSES * self.costs.pause },
            (SpinlockImpl::Qspinlock, super::KernelKind::Host) => Discipline::Fifo,
            (SpinlockImpl::Qspinlock, super::KernelKind::Guest { vm }) => {
                if self.vms[vm as usize].spec.pv.spinlocks {
                    Discipline::Fifo
                } else {
                    Discipline::TestAndSet
                }
            }
        }
    }

    /// How thread `t`'s kernel spinlock `r` hands the lock over: test-and-set for a declared
    /// bit spinlock in every kernel, else the discipline of the kernel `t` runs in.
    pub(crate) fn klock_discipline(&self, t: ThreadId, r: KLockRef) -> Discipline {
        if let KLockRef::Obj(o) = r {
            let inst = self.threads[t as usize].inst;
            if let Obj::KSpin(_, KSpinImpl::Bit) = self.insts[inst as usize].objs[o as usize] {
                return Discipline::TestAndSet;
            }
        }
        self.lock_discipline(self.tasks[self.threads[t as usize].task as usize].kernel)
    }

    /// `spin_lock`: take a ticket, and the lock if it is free and this thread may have it;
    /// else spin at CPL 0 until it gets it. Either way the thread is in the kernel and not
    /// preemptible until the matching unlock.
    pub(crate) fn op_kspin_lock(&mut self, t: ThreadId, r: KLockRef) -> Flow {
        if let KLockRef::Obj(o) = r {
            if self.klock(t, r).holder == Some(t) {
                return self.misuse(t, o, "locks again the kernel spinlock it holds");
            }
        }
        let d = self.klock_discipline(t, r);
        let serving = self.klock(t, r).serving;
        let taken = self.klock(t, r).lock(t, d);
        let th = &mut self.threads[t as usize];
        th.kdepth += 1;
        let Err(ticket) = taken else { return Flow::Continue };
        th.ticket = ticket;
        th.spin_window = super::thread::SPIN_WINDOW_UNSET;
        th.pv_left = u64::MAX;
        th.pmt = match d {
            // First in line (the queue was empty): compete at once; else wait for the turn or
            // the timeout.
            Discipline::Pmt { unit_ns } if ticket != serving => PmtWait { left: (ticket - serving) * unit_ns, head: serving },
            _ => PmtWait::RACING,
        };
        th.act = Act::Spin(SpinOn::KLock(r));
        Flow::Stop
    }

    /// A kernel-lock spinner looks at the lock word: true = it took the lock.
    pub(crate) fn kspin_try(&mut self, t: ThreadId, r: KLockRef) -> bool {
        let d = self.klock_discipline(t, r);
        let ticket = self.threads[t as usize].ticket;
        let head = self.klock(t, r).serving;
        let racing = match d {
            Discipline::Fifo => false,
            Discipline::TestAndSet => true,
            Discipline::Pmt { unit_ns } => {
                // pmtlock's preemptable loop: leave it when the turn comes or the timeout runs
                // out; restart the timeout when head moves without passing the ticket.
                let w = &mut self.threads[t as usize].pmt;
                if w.left != u64::MAX {
                    if head == ticket || w.left == 0 {
                        *w = PmtWait::RACING;
                    } else if head != w.head && head < ticket {
                        *w = PmtWait { left: (ticket - head) * unit_ns, head };
                    }
                }
                w.left == u64::MAX
            }
        };
        self.klock(t, r).try_take(t, ticket, racing)
    }

    /// `spin_unlock`: release the lock, let the waiters that may take it look (and kick the
    /// next one with PV spinlocks).
    pub(crate) fn op_kspin_unlock(&mut self, t: ThreadId, r: KLockRef) -> Flow {
        if let KLockRef::Obj(o) = r {
            if self.klock(t, r).holder != Some(t) {
                return self.misuse(t, o, "unlocks a kernel spinlock it does not hold:");
            }
        }
        debug_assert_eq!(self.klock(t, r).holder, Some(t), "the kernel releases what it holds");
        let d = self.klock_discipline(t, r);
        // The waiters' spins so far waited for this holder: charge them before the hand-off
        // (a wait chain would otherwise name the waiter whose turn it now is, itself).
        for w in self.klock(t, r).due_on_release(d) {
            if let Some(core) = self.thread_core(w) {
                self.touch(core);
            }
        }
        let next = self.klock(t, r).unlock(d);
        self.threads[t as usize].kdepth -= 1;
        if self.threads[t as usize].kdepth == 0 {
            self.preempt_enable(t);
        }
        for w in next {
            if let Some(core) = self.thread_core(w) {
                self.touch(core);
            }
            if d == Discipline::Fifo {
                self.pv_kick_waiter(t, w);
            }
        }
        Flow::Continue
    }

    /// PV spinlock unlock: if the next waiter's vCPU halted in `pv_wait`, kick it.
    fn pv_kick_waiter(&mut self, t: ThreadId, w: ThreadId) {
        let (ta, wa) = (&self.tasks[self.threads[t as usize].task as usize], &self.tasks[self.threads[w as usize].task as usize]);
        let (k, from, to) = (ta.kernel, ta.cpu, wa.cpu);
        if k == super::HOST || wa.state != super::TaskState::Running {
            return;
        }
        let v = self.vcpu_of(k, to);
        if !self.vspec(v).pv.spinlocks || self.vcpus[v as usize].run == crate::virt::vcpu::VcpuRun::Guest {
            return;
        }
        self.pv_kick(k, from, to);
    }

    /// Arrives at barrier `b`. With `wait` the thread waits there for the barrier to open
    /// (`barrier`); without it, an arrival that does not open the barrier goes on at once
    /// (`arrive`), and only the waiters of that generation wait.
    pub(crate) fn op_barrier(&mut self, k: KernelId, cpu: u32, t: ThreadId, b: ObjId, wait: bool) -> Flow {
        if matches!(self.obj(t, b), Obj::Barrier { lock: Some(_), .. }) {
            return self.op_barrier_cv(k, cpu, t, b, wait);
        }
        let Obj::Barrier { parties, arrived, gen, waiters, spin, .. } = self.obj(t, b) else { unreachable!("checked at parse") };
        *arrived += 1;
        if *arrived < *parties && !wait {
            return Flow::Continue;
        }
        if *arrived < *parties {
            waiters.push(t);
            let (spin, g) = (*spin, *gen);
            self.threads[t as usize].bgen = g;
            match spin {
                Some(budget) => self.spin_for(t, SpinOn::Barrier(b), budget),
                None => self.futex_wait(k, cpu, t, BlockOn::Barrier(b), word::MAIN),
            }
            return Flow::Stop;
        }
        *arrived = 0;
        *gen += 1;
        let released = std::mem::take(waiters);
        // Spinners see the new generation as soon as they run; blocked waiters need a futex wake.
        let (blocked, spinning): (Vec<ThreadId>, Vec<ThreadId>) =
            released.into_iter().partition(|&w| matches!(self.threads[w as usize].futex_wait_on(), Some(BlockOn::Barrier(_))));
        for w in spinning {
            if let Some(core) = self.thread_core(w) {
                self.touch(core);
            }
        }
        self.futex_wake(k, cpu, t, b, word::MAIN, blocked);
        Flow::Continue
    }

    /// A mutex-and-condvar barrier (PARMACS `BARRIER`, PARSEC pkgs/libs/parmacs/src/m4/
    /// parmacs.pthreads.c.m4): `pthread_mutex_lock`; count the arrival; the last arrival
    /// flips the cycle, `pthread_cond_broadcast`s and unlocks; the others
    /// `pthread_cond_wait` (which releases the mutex while blocked and re-acquires it before
    /// returning) and then unlock. The instruction is executed again at each step of the
    /// thread's [`BarrierPhase`] (the program counter is moved back while it blocks). An
    /// arrival without `wait` that is not the last unlocks and goes on (a counter under the
    /// mutex: RTTL's `deactivateThread`).
    fn op_barrier_cv(&mut self, k: KernelId, cpu: u32, t: ThreadId, b: ObjId, wait: bool) -> Flow {
        if !self.barrier_cv_lock(k, cpu, t, b) {
            return Flow::Stop;
        }
        if self.threads[t as usize].bphase != BarrierPhase::Arrive {
            // Back from the condition variable with the mutex: BARRIER's final unlock.
            self.threads[t as usize].bphase = BarrierPhase::Arrive;
            self.barrier_cv_unlock(k, cpu, t, b);
            return Flow::Continue;
        }
        let Obj::Barrier { parties, arrived, gen, waiters, .. } = self.obj(t, b) else { unreachable!("checked at parse") };
        *arrived += 1;
        if *arrived < *parties && !wait {
            self.barrier_cv_unlock(k, cpu, t, b);
            return Flow::Continue;
        }
        if *arrived < *parties {
            waiters.push(t);
            let g = *gen;
            let th = &mut self.threads[t as usize];
            th.bgen = g;
            th.bphase = BarrierPhase::Wait;
            th.pc -= 1;
            // pthread_cond_wait: release the mutex, then sleep on the condition variable.
            self.barrier_cv_unlock(k, cpu, t, b);
            self.futex_wait(k, cpu, t, BlockOn::Barrier(b), word::MAIN);
            return Flow::Stop;
        }
        *arrived = 0;
        *gen += 1;
        let released = std::mem::take(waiters);
        let requeue = self.kernels[k as usize].params.cond_broadcast == CondBroadcast::Requeue;
        for &w in &released {
            self.threads[w as usize].bphase = BarrierPhase::Relock;
        }
        let woken = if requeue && released.len() > 1 {
            // FUTEX_CMP_REQUEUE: wake one, move the others onto the mutex's futex.
            let Obj::Barrier { lock: Some(m), .. } = self.obj(t, b) else { unreachable!("a condvar barrier") };
            m.waiters.extend(released[1..].iter().copied());
            for &w in &released[1..] {
                let th = &mut self.threads[w as usize];
                match &mut th.blocking {
                    // Not asleep yet: it will sleep on the mutex.
                    Some((on, _)) => *on = BlockOn::BarrierLock(b),
                    None => th.act = Act::Blocked(BlockOn::BarrierLock(b)),
                }
            }
            vec![released[0]]
        } else {
            released
        };
        if woken.is_empty() {
            // Nobody to wake (a single party): no system call, the mutex is released at once.
            self.barrier_cv_unlock(k, cpu, t, b);
        } else {
            // The broadcaster unlocks after its system call returns (its next operation).
            self.futex_wake(k, cpu, t, b, word::MAIN, woken);
            self.threads[t as usize].held_lock = Some(HeldLock::Barrier(b));
        }
        Flow::Continue
    }

    /// Releases the mutex a thread kept across its futex wake ([`HeldLock`]).
    pub(crate) fn release_held_lock(&mut self, k: KernelId, cpu: u32, t: ThreadId, h: HeldLock) {
        match h {
            HeldLock::Lane(q, l) => self.lane_unlock(k, cpu, t, q, l as usize),
            HeldLock::Barrier(b) => self.barrier_cv_unlock(k, cpu, t, b),
        }
    }

    /// Takes the mutex of condvar barrier `b`, or queues on it and blocks (moving the
    /// program counter back so that the barrier instruction runs again once woken). Returns
    /// whether it holds the mutex.
    fn barrier_cv_lock(&mut self, k: KernelId, cpu: u32, t: ThreadId, b: ObjId) -> bool {
        let Obj::Barrier { lock: Some(m), .. } = self.obj(t, b) else { unreachable!("a condvar barrier") };
        if m.holder.is_none() {
            m.holder = Some(t);
            return true;
        }
        m.waiters.push_back(t);
        self.threads[t as usize].pc -= 1;
        self.futex_wait(k, cpu, t, BlockOn::BarrierLock(b), word::BARRIER_MUTEX);
        false
    }

    /// Releases the mutex of condvar barrier `b`, waking its first waiter (a futex system
    /// call) if any.
    fn barrier_cv_unlock(&mut self, k: KernelId, cpu: u32, t: ThreadId, b: ObjId) {
        let Obj::Barrier { lock: Some(m), .. } = self.obj(t, b) else { unreachable!("a condvar barrier") };
        debug_assert_eq!(m.holder, Some(t), "the barrier's mutex is released by its holder");
        m.holder = None;
        if let Some(w) = m.waiters.pop_front() {
            self.futex_wake(k, cpu, t, b, word::BARRIER_MUTEX, vec![w]);
        }
    }

    /// The lane thread `t` uses on `q` (its own, or its rotation's next).
    fn lane_of(&mut self, t: ThreadId, q: ObjId, lane: Lane) -> usize {
        let idx = self.threads[t as usize].idx;
        let Obj::Queue { lanes, lane_threads, cursors, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        match lane {
            Lane::Own => Lane::own(idx, *lane_threads, lanes.len()),
            Lane::Rotate => cursors.iter().find(|(c, _)| *c == t).map_or(0, |&(_, l)| l as usize),
        }
    }

    /// Moves rotating thread `t` on to the next lane of `q`.
    fn rotate_lane(&mut self, t: ThreadId, q: ObjId) {
        let Obj::Queue { lanes, cursors, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        let n = lanes.len() as u32;
        match cursors.iter_mut().find(|(c, _)| *c == t) {
            Some((_, l)) => *l = (*l + 1) % n,
            None => cursors.push((t, 1 % n)),
        }
    }

    /// Blocks thread `t` on queue `q` so that it retries its `push` or pop when woken (the
    /// program counter goes back to the instruction).
    fn block_to_retry(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, word: u32) {
        self.threads[t as usize].pc -= 1;
        if self.is_socket(t, q) {
            // Inside the `read` or `write`: sleep on the socket's wait queue.
            self.sleep_on(t, BlockOn::Queue(q), word);
        } else {
            self.futex_wait(k, cpu, t, BlockOn::Queue(q), word);
        }
    }

    /// Whether queue `q` of thread `t`'s instance is a kernel socket.
    fn is_socket(&mut self, t: ThreadId, q: ObjId) -> bool {
        matches!(self.obj(t, q), Obj::Queue { socket: true, .. })
    }

    /// Takes lane `l`'s mutex (`queue_t`'s) for a `push` or pop of thread `t`, or blocks on it
    /// while another thread holds it, as `__lll_lock_wait` (the instruction is retried after
    /// the wake-up): false = blocked.
    ///
    /// A socket has no user-level mutex: its `write` or `read` takes the socket's spinlock
    /// instead (always true).
    fn lane_lock(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, l: usize) -> bool {
        if self.is_socket(t, q) {
            self.socket_section(k, cpu, t, q, l);
            return true;
        }
        let Obj::Queue { lanes, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        let ln = &mut lanes[l];
        if ln.holder.is_some_and(|h| h != t) {
            ln.lock_waiters.push_back(t);
            self.block_to_retry(k, cpu, t, q, word::lane(l, LaneWord::Mutex));
            return false;
        }
        ln.holder = Some(t);
        true
    }

    /// Releases lane `l`'s mutex held by `t`; a thread blocked on it wakes and retries (one
    /// futex wake, no hand-off, as glibc's default mutex).
    fn lane_unlock(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, l: usize) {
        if self.is_socket(t, q) {
            return;
        }
        let Obj::Queue { lanes, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        let ln = &mut lanes[l];
        debug_assert_eq!(ln.holder, Some(t));
        ln.holder = None;
        if let Some(w) = ln.lock_waiters.pop_front() {
            self.futex_wake(k, cpu, t, q, word::lane(l, LaneWord::Mutex), vec![w]);
        }
    }

    /// Thread `t`, holding lane `l`'s mutex, wakes `w` from the lane's condition `on`
    /// (`pthread_cond_signal`, a futex wake) and keeps the mutex until its next operation
    /// runs: after the system call, and after any wake-up preemption at its return
    /// (`exit_to_user_mode_loop`), as `queue_enqueue` and `queue_dequeue` unlock only after
    /// signalling. A woken consumer that runs meanwhile blocks on the mutex
    /// (`__pthread_mutex_cond_lock`).
    ///
    /// On a socket the `write` or `read` wakes its partner from the socket's wait queue,
    /// holding the wait queue's spinlock across the wake-up (`sk_data_ready` /
    /// `sk_write_space` → `__wake_up`), with no mutex to keep.
    fn lane_wake_locked(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, (l, on): (usize, LaneWord), w: ThreadId) {
        if self.is_socket(t, q) {
            self.wake_path(t, q, word::lane(l, on), vec![w], true);
            return;
        }
        self.threads[t as usize].held_lock = Some(HeldLock::Lane(q, l as u32));
        self.futex_wake(k, cpu, t, q, word::lane(l, on), vec![w]);
    }

    /// `push`: append an item, or block while the lane is full (the instruction is retried
    /// after the wake-up).
    pub(crate) fn op_push(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, lane: Lane) -> Flow {
        let now = self.now;
        let l = self.lane_of(t, q, lane);
        if !self.lane_lock(k, cpu, t, q, l) {
            return Flow::Stop;
        }
        let Obj::Queue { lanes, capacity, outstanding, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        let ln = &mut lanes[l];
        if capacity.is_some_and(|c| ln.items.len() as u32 >= c) {
            ln.push_waiters.push_back(t);
            self.block_to_retry(k, cpu, t, q, word::lane(l, LaneWord::NotFull));
            self.lane_unlock(k, cpu, t, q, l);
            return Flow::Stop;
        }
        ln.items.push_back(now);
        *outstanding += 1;
        let popper = ln.pop_waiters.pop_front();
        if lane == Lane::Rotate {
            self.rotate_lane(t, q);
        }
        match popper {
            Some(w) => {
                self.lane_wake_locked(k, cpu, t, q, (l, LaneWord::NotEmpty), w);
                Flow::Stop
            }
            None => {
                self.lane_unlock(k, cpu, t, q, l);
                Flow::Continue
            }
        }
    }

    /// The pop of a drain loop: Some(true) = got an item, Some(false) = closed and empty (with
    /// `Lane::Rotate`, every lane), None = blocked (the instruction is retried after the
    /// wake-up). A rotating drainer skips closed and empty lanes and blocks on the first open
    /// one that is empty, as dedup's Reorder (`queue_dequeue` on each queue in turn). A pop
    /// that wakes a blocked producer leaves `held_lock` set: the caller stops there.
    pub(crate) fn op_pop(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, lane: Lane) -> Option<bool> {
        let mut l = self.lane_of(t, q, lane);
        let Obj::Queue { lanes, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        if lane == Lane::Rotate {
            let n = lanes.len();
            match (0..n).map(|i| (l + i) % n).find(|&j| !lanes[j].closed_and_empty()) {
                None => return Some(false),
                Some(j) => {
                    let skipped = (j + n - l) % n;
                    l = j;
                    for _ in 0..skipped {
                        self.rotate_lane(t, q);
                    }
                }
            }
        }
        if !self.lane_lock(k, cpu, t, q, l) {
            return None;
        }
        let Obj::Queue { lanes, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        let ln = &mut lanes[l];
        match ln.items.pop_front() {
            Some(at) => {
                let pusher = ln.push_waiters.pop_front();
                self.threads[t as usize].item = at;
                if lane == Lane::Rotate {
                    self.rotate_lane(t, q);
                }
                match pusher {
                    Some(w) => self.lane_wake_locked(k, cpu, t, q, (l, LaneWord::NotFull), w),
                    None => self.lane_unlock(k, cpu, t, q, l),
                }
                Some(true)
            }
            None if ln.producers == 0 => {
                self.lane_unlock(k, cpu, t, q, l);
                Some(false)
            }
            None => {
                ln.pop_waiters.push_back(t);
                self.block_to_retry(k, cpu, t, q, word::lane(l, LaneWord::NotEmpty));
                self.lane_unlock(k, cpu, t, q, l);
                None
            }
        }
    }

    /// The drain body of an item of `q` finished: when no item is left queued or in progress,
    /// the threads waiting in `join` wake (PhysBAM's THREAD_POOL: the worker that finds the
    /// queue empty with no other worker busy signals `workers_done_condition`).
    pub(crate) fn queue_item_done(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId) {
        let Obj::Queue { outstanding, joiners, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        *outstanding -= 1;
        if *outstanding > 0 || joiners.is_empty() {
            return;
        }
        let woken = std::mem::take(joiners);
        self.futex_wake(k, cpu, t, q, word::JOIN, woken);
    }

    /// `join`: continue when every item pushed to `q` has been processed, else block until
    /// the last one is (the instruction is not retried: the wake-up means it is done).
    pub(crate) fn op_join(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId) -> Flow {
        let Obj::Queue { outstanding, joiners, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        if *outstanding == 0 {
            return Flow::Continue;
        }
        joiners.push(t);
        self.futex_wait(k, cpu, t, BlockOn::Queue(q), word::JOIN);
        Flow::Stop
    }

    /// A producer of queue `q` exited (of its own lane, or of every lane when it pushed in
    /// rotation): a lane whose last producer it was closes, and every consumer blocked on it
    /// wakes to find it closed (`queue_terminate`'s broadcast, one per lane).
    pub(crate) fn queue_producer_done(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, lane: Lane) {
        let own = self.lane_of(t, q, Lane::Own);
        let Obj::Queue { lanes, .. } = self.obj(t, q) else { unreachable!("checked at parse") };
        let mut closed = Vec::new();
        for (l, ln) in lanes.iter_mut().enumerate() {
            if lane == Lane::Own && l != own {
                continue;
            }
            ln.producers -= 1;
            if ln.producers == 0 && !ln.pop_waiters.is_empty() {
                closed.push((l, ln.pop_waiters.drain(..).collect::<Vec<ThreadId>>()));
            }
        }
        let socket = self.is_socket(t, q);
        for (l, woken) in closed {
            let w = word::lane(l, LaneWord::NotEmpty);
            if socket {
                // The writer's `close`: its readers are woken from the wait queue, under its lock.
                self.syscall(k, cpu, t);
                self.wake_path(t, q, w, woken, true);
            } else {
                self.futex_wake(k, cpu, t, q, w, woken);
            }
        }
    }

    pub(crate) fn op_cond_wait(&mut self, k: KernelId, cpu: u32, t: ThreadId, c: ObjId, m: ObjId) -> Flow {
        let holds = matches!(self.obj(t, m), Obj::Mutex { holder: Some(h), .. } if *h == t);
        if !holds {
            return self.misuse(t, m, "waits on a condition variable without holding its mutex");
        }
        let Obj::Cond { tokens, waiters } = self.obj(t, c) else { unreachable!("checked at parse") };
        if *tokens > 0 {
            *tokens -= 1;
            return Flow::Continue;
        }
        waiters.push_back(t);
        if let Flow::Stop = self.op_unlock(k, cpu, t, m) {
            return Flow::Stop;
        }
        self.threads[t as usize].pending_lock = Some(m);
        self.futex_wait(k, cpu, t, BlockOn::Cond(c), word::MAIN);
        Flow::Stop
    }

    pub(crate) fn op_cond_wake(&mut self, k: KernelId, cpu: u32, t: ThreadId, c: ObjId, all: bool) -> Flow {
        let Obj::Cond { tokens, waiters } = self.obj(t, c) else { unreachable!("checked at parse") };
        let woken: Vec<ThreadId> = if all {
            waiters.drain(..).collect()
        } else {
            match waiters.pop_front() {
                Some(w) => vec![w],
                None => {
                    *tokens += 1;
                    Vec::new()
                }
            }
        };
        self.futex_wake(k, cpu, t, c, word::MAIN, woken);
        Flow::Continue
    }

    pub(crate) fn op_sleep(&mut self, k: KernelId, cpu: u32, t: ThreadId, ns: u64) -> Flow {
        let at = self.now + ns;
        self.kernels[k as usize].cpus[cpu as usize].sleepers.insert((at, t));
        self.block_sleep(k, cpu, t);
        self.update_timer(k, cpu);
        Flow::Stop
    }

    /// Whether a spinning thread's wait is over (and, for locks, takes the lock).
    pub(crate) fn try_finish_spin(&mut self, t: ThreadId, on: SpinOn) -> bool {
        match on {
            SpinOn::ULock(l) => {
                let Obj::SpinLock { holder, spinners, .. } = self.obj(t, l) else { unreachable!() };
                match *holder {
                    Some(h) if h == t => true,
                    None => {
                        *holder = Some(t);
                        spinners.retain(|&s| s != t);
                        true
                    }
                    Some(_) => false,
                }
            }
            SpinOn::KLock(r) => self.kspin_try(t, r),
            SpinOn::Barrier(b) => {
                let bgen = self.threads[t as usize].bgen;
                let Obj::Barrier { gen, .. } = self.obj(t, b) else { unreachable!() };
                *gen != bgen
            }
            SpinOn::Mutex(m) => {
                let Obj::Mutex { holder, spinners, .. } = self.obj(t, m) else { unreachable!() };
                if holder.is_none() {
                    *holder = Some(t);
                    spinners.retain(|&s| s != t);
                    true
                } else {
                    false
                }
            }
            SpinOn::RemoteCall(sd) => self.remote_call_finished(t, sd),
            SpinOn::Rwsem => unreachable!("stepped by rwsem_spin_step"),
        }
    }
}
