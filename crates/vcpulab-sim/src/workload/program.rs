//! The compiled form of a workload: objects and a flat instruction list.

use std::fmt;

use super::dist::Dist;

/// Index of a synchronisation object within its workload.
pub type ObjId = u32;

/// Kinds of synchronisation objects a workload can declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjKind {
    /// A blocking mutex (futex-based, like a default `pthread_mutex_t`).
    Mutex,
    /// A user-level test-and-set spinlock (`pthread_spin_lock`, custom spin locks).
    SpinLock,
    /// A kernel spinlock (taken inside system calls; spins with PAUSE at CPL 0): a
    /// `spinlock_t` of the kernel's implementation, or a bit spinlock ([`KSpinImpl`]).
    KSpinLock,
    /// A blocking barrier (futex-based, like `pthread_barrier_t`).
    Barrier,
    /// A user-level spin barrier (threads busy-wait for the last arrival).
    SpinBarrier,
    /// A condition variable used with a mutex; see `docs/workloads.md` for its semantics.
    CondVar,
    /// A FIFO of timestamped items between threads (pipeline stages, task queues, requests).
    Queue,
}

impl ObjKind {
    /// Name used in workload files.
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Mutex => "mutex",
            ObjKind::SpinLock => "spinlock",
            ObjKind::KSpinLock => "kspinlock",
            ObjKind::Barrier => "barrier",
            ObjKind::SpinBarrier => "spin_barrier",
            ObjKind::CondVar => "condvar",
            ObjKind::Queue => "queue",
        }
    }

    /// Parses a kind name.
    pub fn parse(s: &str) -> Option<ObjKind> {
        [ObjKind::Mutex, ObjKind::SpinLock, ObjKind::KSpinLock, ObjKind::Barrier, ObjKind::SpinBarrier, ObjKind::CondVar, ObjKind::Queue]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// A declared object.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjDecl {
    /// Its name in the workload file.
    pub name: String,
    /// Its kind.
    pub kind: ObjKind,
    /// Barrier parties (None = every thread whose program uses it).
    pub parties: Option<u32>,
    /// User-level spinning before blocking (mutexes and barriers; ns): None blocks at once,
    /// `Some(u64::MAX)` never blocks (spin barriers).
    pub spin: Option<u64>,
    /// Queue capacity, per lane (None = unbounded).
    pub capacity: Option<u32>,
    /// A queue split into lanes, one per this many threads: `ceil(n / lane_threads)` lanes
    /// (None = one lane). PARSEC dedup's stage queues (encoder.c: `nqueues = ceil(nthreads /
    /// MAX_THREADS_PER_QUEUE)`, thread `tid` uses queue `tid / MAX_THREADS_PER_QUEUE`).
    pub lane_threads: Option<u32>,
    /// How a blocking barrier is built (`impl`): a futex word (`pthread_barrier_wait`) or a
    /// mutex and a condition variable (PARMACS `BARRIER`).
    pub barrier_impl: BarrierImpl,
    /// How a queue is built (`impl`): a C-library queue (a mutex and two condition variables)
    /// or a kernel socket.
    pub queue_impl: QueueImpl,
    /// How a kernel spinlock is built (`impl`): a `spinlock_t` or a bit spinlock.
    pub kspin_impl: KSpinImpl,
    /// Groups whose programs use it.
    pub users: Vec<u32>,
}

/// How a blocking barrier is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BarrierImpl {
    /// One futex word (glibc `pthread_barrier_wait`, nptl/pthread_barrier_wait.c): the last
    /// arrival wakes every waiter with one `FUTEX_WAKE`, and each leaves at once.
    #[default]
    Futex,
    /// A mutex, a condition variable and a counter, as PARSEC's PARMACS macros build
    /// `BARRIER` for the SPLASH-2x programs (pkgs/libs/parmacs/src/m4/parmacs.pthreads.c.m4):
    /// lock the mutex, count the arrival; the last arrival broadcasts the condition variable
    /// and unlocks, the others wait on it (releasing the mutex) and, once woken, re-acquire
    /// the mutex inside `pthread_cond_wait` and release it. The waiters therefore leave one
    /// after the other through the mutex; how they queue on it depends on the C library's
    /// broadcast (`cond_broadcast` of the kernel spec).
    Condvar,
}

/// How a declared kernel spinlock is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KSpinImpl {
    /// A `spinlock_t`: the kernel's spinlock implementation decides who gets it on release
    /// (`spinlock` of `[host]` / `[guest]`: ticket, queued, byte or PMT;
    /// [`crate::kernel::spinlock`]).
    #[default]
    Spinlock,
    /// A bit spinlock: one bit of a word taken with `test_and_set_bit_lock`, its waiters
    /// spinning with `cpu_relax` (PAUSE) until the bit clears (include/linux/bit_spinlock.h,
    /// the same from v2.6 to v6.x). Test-and-set in every kernel version and never
    /// paravirtualised, so a waiter whose vCPU is preempted is passed (no lock-waiter
    /// preemption) and PV spinlocks do not halt its waiters. jbd2's per-buffer
    /// `jbd_lock_bh_state` and the dcache's hash-bucket locks are bit spinlocks.
    Bit,
}

/// How a queue is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueImpl {
    /// A user-level queue guarded by a pthread mutex with "not empty" and "not full" condition
    /// variables (PARSEC's `queue_t`, pkgs/apps/dedup/src/queue.c): a push or pop takes the
    /// mutex, and a blocked partner is woken with a futex call while the mutex is held.
    #[default]
    Pthread,
    /// A kernel socket (a Unix-domain stream socket, or a pipe): a push is a `write`, a pop a
    /// `read`. Each takes the socket's spinlock to queue or dequeue the message, and sleeps on
    /// or wakes the socket's wait queue, whose spinlock is held across the wake-up
    /// (`__wake_up` → `try_to_wake_up`) in every kernel version ([`crate::kernel::futex`]).
    Socket,
}

/// A thread count that depends on the run's thread parameter n: `max(1, n·mul/div + add)`,
/// or exactly `add` when `fixed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountExpr {
    /// Multiplier of n.
    pub mul: u32,
    /// Divisor of n·mul (integer division).
    pub div: u32,
    /// Constant added.
    pub add: i64,
    /// A constant count (n is not used).
    pub fixed: bool,
}

impl CountExpr {
    /// n itself.
    pub const N: CountExpr = CountExpr { mul: 1, div: 1, add: 0, fixed: false };

    /// A constant.
    pub fn fixed(k: u32) -> CountExpr {
        CountExpr { mul: 0, div: 1, add: i64::from(k), fixed: true }
    }

    /// Its value for thread parameter `n`.
    pub fn value(&self, n: u32) -> u32 {
        if self.fixed {
            return self.add.max(0) as u32;
        }
        let v = (u64::from(n) * u64::from(self.mul) / u64::from(self.div.max(1))) as i64 + self.add;
        v.clamp(1, i64::from(u32::MAX)) as u32
    }

    /// Parses `8`, `"n"`, `"3n+2"`, `"n/2"`, `"2n-1"`.
    pub fn parse(s: &str) -> Option<CountExpr> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        if let Ok(k) = s.parse::<u32>() {
            return Some(CountExpr::fixed(k));
        }
        let (coef, rest) = s.split_once('n')?;
        let mul = if coef.is_empty() { 1 } else { coef.parse().ok()? };
        let (div, rest) = match rest.strip_prefix('/') {
            Some(r) => {
                let end = r.find(['+', '-']).unwrap_or(r.len());
                (r[..end].parse().ok().filter(|&d: &u32| d > 0)?, &r[end..])
            }
            None => (1, rest),
        };
        let add = if rest.is_empty() { 0 } else { rest.parse::<i64>().ok()? };
        Some(CountExpr { mul, div, add, fixed: false })
    }
}

impl fmt::Display for CountExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.fixed {
            return write!(f, "{}", self.add);
        }
        if self.mul != 1 {
            write!(f, "{}", self.mul)?;
        }
        write!(f, "n")?;
        if self.div != 1 {
            write!(f, "/{}", self.div)?;
        }
        match self.add {
            0 => Ok(()),
            a if a > 0 => write!(f, "+{a}"),
            a => write!(f, "{a}"),
        }
    }
}

/// How many times a loop body runs: a constant, or a function of the run's thread parameter n
/// (a fork-join that enqueues one task per thread: `times = "n"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// A constant count (0 skips the body).
    Fixed(u64),
    /// A count that depends on n.
    PerN(CountExpr),
}

impl Times {
    /// Its value for thread parameter `n`.
    pub fn value(&self, n: u32) -> u64 {
        match self {
            Times::Fixed(k) => *k,
            Times::PerN(e) => u64::from(e.value(n)),
        }
    }
}

/// A group of threads running the same program (a pipeline stage, a pool, a generator).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// How many threads, as a function of n.
    pub threads: CountExpr,
    /// Index of its first instruction.
    pub entry: u32,
    /// Queues its program pushes to, and how it picks their lanes (a lane closes when all
    /// its producer threads have finished).
    pub pushes: Vec<(ObjId, Lane)>,
    /// Queues its program drains, and how it picks their lanes.
    pub drains: Vec<(ObjId, Lane)>,
    /// Its threads are created by another thread during the run (a replay's traced threads
    /// that a THREAD_CREATE names): each waits for its creation first, and the wake-up that
    /// ends that wait is its `wake_up_new_task` (kernel/sched/fair.c `task_fork_fair`).
    pub created: bool,
    /// The most page faults its threads' heap `malloc`s make, each: a replayed thread whose
    /// kernel-counted minor faults are fewer than the heap model's did not touch all it
    /// allocated, and takes no more than the kernel counted. None: no bound.
    pub fault_budget: Option<u64>,
}

/// How a loop's iterations are shared among the threads of its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Every thread runs all `count` iterations.
    Each,
    /// `count` is the group's total, divided statically: each thread runs its share
    /// (`count / size`, the remainder going one each to the lowest-indexed threads).
    Split,
    /// `count` is the group's total, handed out one iteration at a time: a thread that
    /// reaches the loop, or finishes an iteration, takes the next iteration left, until none
    /// is (a work pool with a shared counter, as task queues with stealing, ticket dispensers
    /// and OpenMP dynamic schedules do). The k-th time the threads reach the loop they share
    /// the k-th pool, so a thread that is held up (descheduled, slower) runs fewer
    /// iterations instead of delaying the others.
    Dynamic,
}

/// Which lane of a laned queue a `push` or a drain uses (an unlaned queue has one lane).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// The thread's own lane: index `i` in its group uses lane `i / lane_threads` (modulo the
    /// lanes). A pusher is a producer of its own lane only.
    Own,
    /// Every lane in turn, one operation each, starting at lane 0: a pusher moves to the next
    /// lane after each push (dedup's Fragment), a drainer after each pop and blocks on the
    /// lane whose turn it is even when others have items (dedup's Reorder). A rotating pusher
    /// is a producer of every lane; a rotating drainer finishes when every lane is closed and
    /// empty.
    Rotate,
}

impl Lane {
    /// Parses `"own"` or `"rotate"`.
    pub fn parse(s: &str) -> Option<Lane> {
        match s {
            "own" => Some(Lane::Own),
            "rotate" => Some(Lane::Rotate),
            _ => None,
        }
    }

    /// The lane a thread of index `idx` in its group uses as its own: `idx / lane_threads`,
    /// modulo the `lanes` (for groups larger than n).
    pub fn own(idx: u32, lane_threads: u32, lanes: usize) -> usize {
        (idx / lane_threads) as usize % lanes
    }
}

impl ObjDecl {
    /// Lanes of a queue for thread parameter `n`: `ceil(n / lane_threads)`, or one.
    pub fn lanes(&self, n: u32) -> usize {
        self.lane_threads.map_or(1, |lt| n.div_ceil(lt).max(1)) as usize
    }
}

/// One compiled instruction.
#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    /// Compute for a sampled duration, scaled per thread by the skew (see `docs/profiles.md`).
    Compute {
        /// Duration.
        dist: Dist,
        /// Per-thread imbalance in 0..=1.
        skew: f32,
        /// Fraction of the time stalled on memory (recorded for the memory model).
        mem: f32,
        /// The duration is the work of the whole group, divided evenly among its threads
        /// (strong scaling: the total stays fixed as n varies).
        split: bool,
    },
    /// Sleep (block on a timer) for a sampled duration.
    Sleep(Dist),
    /// Acquire a mutex (spin up to its budget, then block while it is taken).
    Lock(ObjId),
    /// Acquire a mutex blocking at once, whatever its spin budget: `pthread_mutex_lock` on a
    /// mutex the program elsewhere takes with a trylock loop (PARSEC's `parsec_barrier`).
    LockBlock(ObjId),
    /// Release a mutex.
    Unlock(ObjId),
    /// Acquire a user spinlock (spin while it is taken).
    SpinLock(ObjId),
    /// Release a user spinlock.
    SpinUnlock(ObjId),
    /// Acquire a kernel ticket spinlock.
    KSpinLock(ObjId),
    /// Release a kernel ticket spinlock.
    KSpinUnlock(ObjId),
    /// Arrive at a barrier (blocking or spinning according to its kind).
    Barrier(ObjId),
    /// Arrive at a barrier without waiting for it to open: count the arrival and go on, or,
    /// as its last arrival, open it and wake its waiters (a counter that signals the thread
    /// waiting for it, as C++20's `std::barrier::arrive` or a count-down latch).
    Arrive(ObjId),
    /// Wait on a condition variable with a mutex held.
    CondWait {
        /// The condition variable.
        cond: ObjId,
        /// The mutex held by the caller.
        mutex: ObjId,
    },
    /// Signal one waiter (or leave a token).
    CondSignal(ObjId),
    /// Wake every waiter.
    CondBroadcast(ObjId),
    /// Start of a loop body executed `count` times; `end` is the index of its `LoopEnd`.
    LoopStart {
        /// Iterations.
        count: Times,
        /// Index of the matching `LoopEnd`.
        end: u32,
        /// How the iterations are shared among the group's threads.
        share: Share,
    },
    /// End of a loop body; `start` is the index of its `LoopStart`.
    LoopEnd {
        /// Index of the matching `LoopStart`.
        start: u32,
    },
    /// Run the following block (up to `end`, exclusive) only on the threads of the group
    /// with index in `first .. first + count(n)`.
    OnlyThreads {
        /// First thread index that runs the block.
        first: u32,
        /// How many run it.
        count: CountExpr,
        /// Index of the first instruction after the block.
        end: u32,
        /// The first thread moves on by one each iteration of the innermost enclosing loop
        /// (`first + iteration`, modulo the group size): a rotating serial part.
        rotate: bool,
    },
    /// `malloc` of a sampled number of bytes from the thread's arena (see [`super::heap`]).
    Malloc(Dist),
    /// Append an item to a queue (block while its lane is full).
    Push {
        /// The queue.
        queue: ObjId,
        /// Which lane.
        lane: Lane,
    },
    /// Start of a drain loop: pop an item (block while the lane is empty and open); when
    /// the lane (with `Lane::Rotate`, every lane) is closed and empty, continue at `end`.
    DrainPop {
        /// The queue.
        queue: ObjId,
        /// Index of the first instruction after the matching `DrainEnd`.
        end: u32,
        /// Which lane.
        lane: Lane,
    },
    /// End of a drain body: back to the `DrainPop` at `start`.
    DrainEnd {
        /// Index of the `DrainPop`.
        start: u32,
    },
    /// Record the response time of the item last popped from the queue.
    Respond(ObjId),
    /// Wait until every item pushed to the queue so far has been popped and its drain body
    /// has finished (a thread pool's wait-for-completion; Python's `Queue.join`).
    Join(ObjId),
    /// `free` of the thread's this-many most recent allocations.
    Free(u64),
    /// `free` of one allocation, what a replayed trace frees: the `seq`-th `malloc` (0-based,
    /// in program order) of the instance's thread `owner` (its index among the instance's
    /// threads; this thread or another). It goes back to the arena it came from whoever frees
    /// it (glibc `__libc_free` → `arena_for_chunk`), where it may merge into the top and trim;
    /// a mapped one is unmapped and raises the process's thresholds
    /// ([`super::heap::Arena::free_chunk`]). Nothing if it is not live.
    FreeChunk {
        /// The allocating thread, by index in its instance.
        owner: u32,
        /// Which of its allocations.
        seq: u32,
    },
    /// A memory-management system call that removes or downgrades mappings of this many
    /// pages (a TLB shootdown to the other CPUs running the process).
    MmUnmap {
        /// Which call.
        call: MmCall,
        /// Pages affected.
        pages: u64,
    },
    /// The first touch of this many pages of fresh anonymous memory (a new process's, or a
    /// mapping the program set up without the allocator): one page fault per page through the
    /// kernel's page allocator ([`crate::kernel::mm`]).
    Fault(u64),
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: a function-call IPI to every other CPU
    /// running a thread of the process, waiting until all have executed a memory barrier.
    Membarrier,
    /// The thread exits.
    End,
}

/// Memory-management calls that flush TLBs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmCall {
    /// `munmap`.
    Munmap,
    /// `madvise(MADV_DONTNEED)`.
    Madvise,
    /// `mprotect` removing permissions.
    Mprotect,
}

/// A compiled program.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    /// Instructions; the last one is [`Instr::End`].
    pub instrs: Vec<Instr>,
}

/// A validated workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// Model tag (data-parallel, pipeline, ...).
    pub model: String,
    /// Thread count fixed by the workload (None = the experiment's thread count).
    pub threads: Option<u32>,
    /// Declared objects, indexed by [`ObjId`].
    pub objects: Vec<ObjDecl>,
    /// The instructions of every group.
    pub program: Program,
    /// Its thread groups (one, "main" with n threads, for a plain `program`).
    pub groups: Vec<Group>,
    /// Descriptive metadata.
    pub meta: Meta,
    /// Memory behaviour (for the memory model).
    pub memory: Memory,
    /// Response-time bounds of a server workload.
    pub qos: Option<Qos>,
    /// Whether any operation draws random durations.
    pub stochastic: bool,
    /// Allocator parameters of its threads' arenas.
    pub heap: super::heap::HeapParams,
    /// Its threads stand for separate single-threaded processes (forked clients, a build's
    /// compiler processes): they share no address space, so no `mmap_sem`
    /// ([`crate::kernel::rwsem`]) is taken by two of them.
    pub processes: bool,
    /// The thread (its index among the instance's threads) that is the process's main thread,
    /// on glibc's main arena from its start (a replay's traced main thread). None: the main
    /// thread is not among its threads (a profile's threads are the ones it creates) and holds
    /// the main arena unused ([`super::heap::ProcessHeap`]).
    pub main_thread: Option<u32>,
}

/// Descriptive metadata of a workload profile (`docs/profiles.md`).
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize)]
pub struct Meta {
    /// Profile version (bumped when the model changes).
    pub version: u32,
    /// Suite (`parsec-3.0`, `splash-2x`, `system`, `micro`).
    pub suite: String,
    /// Synchronisation mix.
    pub sync: Vec<String>,
    /// What the model is built from.
    pub basis: String,
    /// Scalability type measured by DIS (ch.4, Table 4.1; 0 = not classified).
    pub scalability_type: u8,
    /// Overhead categories found by TPDS (§6, Fig. 4).
    pub kvm_overhead: Vec<String>,
    /// Content hash of the definition (hex), set by whoever loads it.
    pub hash: String,
}

/// Memory behaviour of a workload.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize)]
pub struct Memory {
    /// Default fraction of compute time stalled on memory.
    pub intensity: f32,
    /// Resident footprint (bytes).
    pub footprint: u64,
    /// 0..1 scores: memory-bandwidth boundness, NUMA sensitivity, data sharing.
    pub bandwidth: f32,
    /// NUMA sensitivity.
    pub numa: f32,
    /// Data sharing between threads.
    pub sharing: f32,
    /// The main thread builds all the data before it creates the workers (`first_touch =
    /// "main"`, workloads.md §2.3): no thread owns private data, it is all shared. Otherwise
    /// (`"threads"`, the default) each thread first-touches its own private data.
    pub main_first_touch: bool,
}

/// Response-time bounds (BAS's "good" and "tolerable").
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Qos {
    /// A good response time (ns).
    pub good: u64,
    /// A tolerable response time (ns).
    pub tolerable: u64,
}

/// Models a workload can declare.
pub const MODELS: &[&str] =
    &["data-parallel", "pipeline", "task-queue", "fork-join", "server", "independent", "cpu-bound", "micro", "daemon"];

impl Workload {
    /// Threads of an instance for thread parameter `n`.
    pub fn thread_count(&self, n: u32) -> u32 {
        self.groups.iter().map(|g| g.threads.value(n)).sum()
    }

    /// Threads that use object `o` (its default barrier parties).
    pub fn users(&self, o: ObjId, n: u32) -> u32 {
        self.objects[o as usize].users.iter().map(|&g| self.groups[g as usize].threads.value(n)).sum()
    }

    /// Checks what depends on the thread count of a run; returns (field, message).
    pub fn check_threads(&self, n: u32) -> Result<(), (String, String)> {
        let max = crate::spec::bounds::MAX_THREADS;
        let total: u64 = self.groups.iter().map(|g| u64::from(g.threads.value(n))).sum();
        if total > u64::from(max) {
            let field = if self.threads.is_some() { "threads" } else { "groups" };
            return Err((field.into(), format!("{total} threads per instance at n = {n}; expected at most {max}")));
        }
        let threads = self.thread_count(n);
        for (i, o) in self.objects.iter().enumerate() {
            if let Some(p) = o.parties {
                let users = self.users(i as ObjId, n);
                if p > users {
                    return Err((
                        format!("objects.{}.parties", o.name),
                        format!("{p} parties but only {users} of the run's {threads} threads use it (the barrier would never open)"),
                    ));
                }
            }
        }
        for g in &self.groups {
            let size = g.threads.value(n);
            let end = self.groups.iter().map(|h| h.entry).filter(|&e| e > g.entry).min().unwrap_or(self.program.instrs.len() as u32);
            for i in &self.program.instrs[g.entry as usize..end as usize] {
                if let Instr::OnlyThreads { first, .. } = i {
                    if *first >= size {
                        let place = if self.groups.len() > 1 { format!("group '{}'", g.name) } else { "the run".into() };
                        return Err((
                            "program".into(),
                            format!("a block runs on thread {first} but {place} has {size} threads (0..{})", size - 1),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}
