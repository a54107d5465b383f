//! A traced real program (`vcpulab trace`, [`crate::trace`]) as a workload: each traced thread
//! becomes a group of one thread whose program is its trace, in order.
//!
//! ```text
//!   trace record (one thread)            replayed as
//!   ─────────────────────────            ───────────
//!   CPU time since the last record  ──►  compute (that long; see below)
//!   pthread_create → child               cond_signal(child's start)   child: waits for it first
//!   pthread_join(child)                  wait for child's end         child: signals at its end
//!   mutex / spin / rwlock (writer)       lock, spin_lock, lock on the same object (by address)
//!   barrier_wait                         barrier (parties: its init count, else its users)
//!   cond_wait that was woken             wait for a token from each thread that signalled or
//!                                        broadcast on it while it waited (see Wake-ups)
//!   cond_signal / broadcast              a token to each waiter it preceded in the trace
//!   malloc / calloc / memalign / realloc malloc of that size (the thread's arena, see heap.rs)
//!   free                                 free of that chunk, whichever thread allocated it
//!                                        (FreeChunk: back to the arena it came from)
//!   munmap, madvise(DONTNEED),           a TLB shootdown of that many pages
//!   mprotect(read-only or none)
//! ```
//!
//! **Compute.** Records carry the thread's CPU time when they returned, measured or (between
//! measurements, see docs/trace-format.md) extrapolated; the allocator's carry none. Between two
//! *measured* records (a segment), every gap between a record's return and the next call is
//! compute, scaled down in proportion so that the segment's compute equals the CPU time measured
//! over it, less what its calls spin (spin locks: the simulator spins again) and less the
//! allocator's kernel work the simulator re-creates (page faults, heap growth, trims and their
//! shootdowns: what all threads' allocations and frees, in time order, make the arenas glibc
//! gave them do, each thread's read from its chunks' addresses, [`malloc_history`]; page faults at most as many as the kernel
//! counted for the thread; at the default cost table's prices) and the
//! tracer's own cost per record (measured in docs/trace-format.md). What
//! the wall time leaves over was spent off a CPU without a traced reason (I/O, preemption); it
//! is counted in [`ReplayStats`] and not replayed.
//!
//! **Wake-ups.** Condition variables are matched, not re-run: a wait returns when every signal
//! and broadcast sent on the same condition variable by another thread between the wait's call
//! and its return has been sent (the first woke it; the others changed, under the mutex it was
//! getting back, the state it acted on). Wake-ups travel on condition variables with token
//! semantics, one per (waiter, sender) pair, so no wake-up is lost and none is taken by the
//! wrong wait whatever the simulated order. A wait nobody ended (a time-out) sleeps as long as
//! it lasted.
//!
//! Not replayed: rwlock readers (readers never wait for each other; a writer waits only for
//! writers), failed try-locks, frees of another thread's chunks (counted), threads of other
//! processes than the chosen one.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::dist::Dist;
use super::heap::{request2size, ChunkId, HeapParams, MmOp, ProcessHeap, PAGE};
use super::program::{CountExpr, Group, Instr, Memory, Meta, MmCall, ObjDecl, ObjId, ObjKind, Program, Workload};
use crate::machine::costs::Costs;
use crate::trace::{Event, Process, Record, ThreadTrace, Trace};

/// The shortest off-CPU time the replay makes a sleep of (see `replay_untraced_blocking`): the
/// tracer's default CPU-time sampling gap (`VTRACE_CPU_GAP_NS`, 10 µs).
pub const MIN_UNTRACED_SLEEP_NS: u64 = 10_000;

/// The tracer's own CPU time per record, which the traced CPU time includes: an allocator
/// record, any other record (docs/trace-format.md, "Overhead": ≈ 66 ns and ≈ 110 ns there).
pub const TRACER_RECORD_NS: [u64; 2] = [66, 110];

/// `MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`: advice that drops pages (a shootdown).
const MADV_DROPS: [i32; 3] = [4, 8, 9];
/// `PROT_WRITE`.
const PROT_WRITE: i32 = 2;
/// `ETIMEDOUT`.
const ETIMEDOUT: i32 = 110;

/// What the conversion did, for the user to judge the replay's fidelity.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplayStats {
    /// The process replayed.
    pub pid: u32,
    /// Its command line.
    pub cmdline: Vec<String>,
    /// Online CPUs when it was traced.
    pub cpus: u32,
    /// The release of the kernel it was traced on (`uname -r`; None before trace format 4).
    pub kernel: Option<String>,
    /// The version of the C library it was traced with (glibc; None before trace format 4).
    pub libc: Option<String>,
    /// Threads replayed.
    pub threads: u32,
    /// The most of them alive and not in a traced wait (a join, a lock, a barrier, a condition
    /// wait) at one instant: how many CPUs the program could use at most.
    pub threads_at_once: u32,
    /// Records read.
    pub records: u64,
    /// Instructions of the program.
    pub instructions: u64,
    /// Wall time of the traced run, from the first record to the last (ns).
    pub traced_ns: u64,
    /// Compute replayed, over all threads (ns).
    pub compute_ns: u64,
    /// Time off a CPU with no traced reason, over all threads (ns): the sum of the next three.
    pub unexplained_ns: u64,
    /// Of it, time the threads waited for a CPU (their `run_delay`): the traced machine's
    /// scheduling, not replayed (the simulation schedules again).
    pub held_off_ns: u64,
    /// Of it, time blocked in calls the tracer does not see (inline system calls, I/O):
    /// replayed as sleeps where it happened.
    pub blocked_untraced_ns: u64,
    /// Of it, time of threads without a `THREAD_STATS` record, which cannot be split: not
    /// replayed.
    pub unexplained_unsplit_ns: u64,
    /// The threads' lifetimes, first record to last, summed (ns).
    pub thread_ns: u64,
    /// Condition-variable waits matched with the wake-ups that preceded their return.
    pub wakeups_matched: u64,
    /// The wake-ups those waits wait for (each signal or broadcast sent on the condition
    /// variable by another thread between the wait's call and its return).
    pub wakeups_tied: u64,
    /// Waits replayed as a sleep (timed out, or their wake-up was not traced).
    pub waits_slept: u64,
    /// futex(2) waits that slept (calls through libc's `syscall()`; counted in the two above).
    pub futex_waits: u64,
    /// Threads that glibc gave, in the traced run, an arena an exited thread had left
    /// (`get_free_list`): the arena its chunks lie in ([`traced_arenas`]), no other thread
    /// attached to it at its first `malloc` (in the traced order of first `malloc`s and exits).
    pub arenas_reused_traced: u32,
    /// Threads it gave an arena other threads were attached to (past its arena limit,
    /// `reused_arena`): they share it, and trim less than in arenas of their own.
    pub arenas_shared_traced: u32,
    /// Frees of a chunk another thread allocated: replayed, back to its arena.
    pub frees_remote: u64,
    /// Page faults the heap model would have made beyond the minor faults the kernel counted
    /// for the threads (memory allocated and never touched): not replayed.
    pub heap_faults_dropped: u64,
    /// Frees of chunks never seen allocated (not replayed).
    pub frees_unmatched: u64,
    /// Unlocks of locks this thread was not seen taking (not replayed).
    pub unlocks_unmatched: u64,
    /// Trace blocks lost (a killed process; see [`crate::trace::ThreadTrace::lost_blocks`]).
    pub lost_blocks: u64,
}

/// How long a spin lock replayed as spin-then-block spins before it blocks (ns): about the
/// 2,000 PAUSE iterations of `tracer/vtrace/spinblock.c`.
pub const SPIN_THEN_BLOCK_NS: u64 = 2_000;

/// How to replay a trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// The process (None: see [`choose_process`]).
    pub pid: Option<u32>,
    /// The allocator tunables.
    pub heap: HeapParams,
    /// Spin locks become mutexes that spin this long, then block (None: they spin).
    pub spin_then_block: Option<u64>,
    /// The tracer's CPU time per record to take out of the compute (allocator, other):
    /// [`TRACER_RECORD_NS`] for real traces.
    pub tracer_record_ns: [u64; 2],
}

/// Which process of a trace to replay: `None` = the first started by exec with any thread
/// that created threads, else the first.
pub fn choose_process(trace: &Trace, pid: Option<u32>) -> Result<&Process, String> {
    if let Some(pid) = pid {
        return trace.processes.iter().find(|p| p.pid == pid).ok_or_else(|| {
            let pids: Vec<String> = trace.processes.iter().map(|p| p.pid.to_string()).collect();
            format!("no process {pid} in the trace (it has {})", pids.join(", "))
        });
    }
    trace
        .processes
        .iter()
        .find(|p| p.threads.len() > 1)
        .or_else(|| trace.processes.first())
        .ok_or_else(|| "the trace has no process (is it empty?)".to_string())
}

/// The workload replaying process `pid` (see [`choose_process`]) of `trace`.
pub fn from_trace(name: &str, trace: &Trace, opts: &Options) -> Result<(Workload, ReplayStats), String> {
    let process = choose_process(trace, opts.pid)?;
    let mut b = Builder::new(process, opts.heap);
    b.spin_then_block = opts.spin_then_block;
    b.tracer_record_ns = opts.tracer_record_ns;
    b.match_wakeups();
    b.order_joins_under_locks();
    for i in 0..b.threads.len() {
        b.thread(i);
    }
    // Each traced thread is a group of one, in the order of `b.threads`.
    let main_thread = b.threads.iter().position(|t| t.tid == process.pid).map(|i| i as u32);
    let Builder { objects, instrs, groups, mut stats, .. } = b;
    stats.instructions = instrs.len() as u64;
    let start = process.start.as_ref();
    stats.pid = process.pid;
    stats.cmdline = start.map(|s| s.cmdline.clone()).unwrap_or_default();
    stats.cpus = start.map_or(0, |s| s.cpus);
    stats.kernel = start.and_then(|s| s.kernel.clone());
    stats.libc = start.and_then(|s| s.libc.clone());
    let program_name = stats.cmdline.first().cloned().unwrap_or_else(|| format!("pid {}", process.pid));
    let workload = Workload {
        name: name.to_string(),
        description: format!("replay of {} ({} threads, traced)", program_name, groups.len()),
        model: "replay".into(),
        threads: Some(groups.len() as u32),
        objects,
        program: Program { instrs },
        groups,
        meta: Meta {
            version: 1,
            suite: "trace".into(),
            basis: format!("vtrace of `{}`, pid {}", stats.cmdline.join(" "), process.pid),
            ..Meta::default()
        },
        memory: Memory::default(),
        qos: None,
        stochastic: false,
        heap: opts.heap,
        processes: false,
        main_thread,
    };
    Ok((workload, stats))
}

/// Wake-up condition variables and start/end handshakes of one thread.
#[derive(Clone, Copy, Debug)]
struct Handshake {
    own_mutex: ObjId,
    start: ObjId,
    end: ObjId,
}

struct Builder<'a> {
    threads: Vec<&'a crate::trace::ThreadTrace>,
    index_of: BTreeMap<u32, usize>,
    objects: Vec<ObjDecl>,
    by_addr: BTreeMap<(ObjKind, u64), ObjId>,
    handshakes: Vec<Handshake>,
    /// (thread, record) of a signal/broadcast → the threads it woke.
    wakes: BTreeMap<(usize, usize), Vec<usize>>,
    /// (thread, record) of a wait that is matched → the threads whose wake-ups it waits for,
    /// one entry per wake-up.
    matched: BTreeMap<(usize, usize), Vec<usize>>,
    /// (waiter, sender, what) → the condition variable carrying `what` from the sender to the
    /// waiter (see [`Builder::channel`]).
    channels: BTreeMap<(usize, usize, Carries), ObjId>,
    /// (joiner, record that takes a mutex it will hold while it joins) → the (child, mutex
    /// address) whose last unlock by the child must come first (see
    /// [`Builder::order_joins_under_locks`]).
    lock_after: BTreeMap<(usize, usize), Vec<(usize, u64)>>,
    /// (child, record of that last unlock) → the (joiner, mutex address) it lets go on.
    unlock_lets: BTreeMap<(usize, usize), Vec<(usize, u64)>>,
    barrier_parties: BTreeMap<u64, u32>,
    joined: BTreeSet<usize>,
    /// Threads whose creation is recorded (a THREAD_CREATE names them).
    linked: BTreeSet<usize>,
    instrs: Vec<Instr>,
    groups: Vec<Group>,
    stats: ReplayStats,
    /// The current thread's computes that lost off-CPU time, and how much (see
    /// [`Builder::replay_untraced_blocking`]).
    off_cpu: Vec<(usize, u64)>,
    /// The process's allocations and frees together ([`malloc_history`]).
    malloc: MallocHistory,
    costs: Costs,
    spin_then_block: Option<u64>,
    tracer_record_ns: [u64; 2],
    /// Page faults the heap model may still give the thread being built: the minor faults
    /// the kernel counted for it where the model makes more ([`Builder::fault_budget`]).
    faults_left: u64,
}

/// A thread's CPU-time account while its records are converted: the current *segment* runs
/// from the last record with a measured CPU time to the next one.
#[derive(Debug, Default)]
struct Account {
    /// End of the previous record.
    prev_t: u64,
    /// CPU time measured at the segment's start.
    cpu_start: u64,
    /// The segment's compute instructions (indices), each provisionally its whole wall gap.
    computes: Vec<usize>,
    /// Their sum (ns).
    wall: u64,
    /// CPU time the segment's calls spin, the allocator's modelled kernel work, and the
    /// tracer's own work (ns).
    spin: u64,
    kernel: u64,
    tracer: u64,
}

impl<'a> Builder<'a> {
    fn new(process: &'a Process, heap: HeapParams) -> Builder<'a> {
        let threads: Vec<_> = process.threads.iter().filter(|t| !t.records.is_empty()).collect();
        let index_of = threads.iter().enumerate().map(|(i, t)| (t.tid, i)).collect();
        let mut b = Builder {
            threads,
            index_of,
            objects: Vec::new(),
            by_addr: BTreeMap::new(),
            handshakes: Vec::new(),
            wakes: BTreeMap::new(),
            matched: Default::default(),
            channels: BTreeMap::new(),
            lock_after: BTreeMap::new(),
            unlock_lets: BTreeMap::new(),
            barrier_parties: BTreeMap::new(),
            joined: Default::default(),
            linked: Default::default(),
            instrs: Vec::new(),
            groups: Vec::new(),
            stats: ReplayStats::default(),
            off_cpu: Vec::new(),
            malloc: MallocHistory::default(),
            costs: Costs::default(),
            spin_then_block: None,
            tracer_record_ns: [0, 0],
            faults_left: u64::MAX,
        };
        let cpus = process.start.as_ref().map_or(1, |s| s.cpus);
        let arenas = traced_arenas(&b.threads, process.pid, &heap);
        b.malloc = malloc_history(&b.threads, &heap, (process.pid, &arenas), cpus);
        (b.stats.arenas_reused_traced, b.stats.arenas_shared_traced) = (b.malloc.arenas.reused, b.malloc.arenas.shared);
        for i in 0..b.threads.len() {
            let g = i as u32;
            let hs = Handshake {
                own_mutex: b.declare(format!("t{i}.mutex"), ObjKind::Mutex, g),
                start: b.declare(format!("t{i}.start"), ObjKind::CondVar, g),
                end: b.declare(format!("t{i}.end"), ObjKind::CondVar, g),
            };
            b.handshakes.push(hs);
        }
        // Barrier parties, and who is joined.
        let mut users: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
        for (i, t) in b.threads.iter().enumerate() {
            b.stats.lost_blocks += u64::from(t.lost_blocks);
            for r in &t.records {
                match r.event {
                    Event::BarrierInit { addr, count, ret: 0 } => {
                        b.barrier_parties.insert(addr, count);
                    }
                    Event::BarrierWait { addr, .. } => {
                        users.entry(addr).or_default().insert(i);
                    }
                    Event::ThreadJoin { tid: Some(tid), ret: 0, .. } => {
                        if let Some(&j) = b.index_of.get(&tid) {
                            b.joined.insert(j);
                        }
                    }
                    Event::ThreadCreate { ret: 0, child: Some(child), .. } => {
                        if let Some(&c) = b.index_of.get(&child) {
                            b.linked.insert(c);
                        }
                    }
                    _ => {}
                }
            }
        }
        for (addr, u) in users {
            b.barrier_parties.entry(addr).or_insert(u.len() as u32);
        }
        let first = b.threads.iter().filter_map(|t| t.records.first()).map(|r| r.t).min().unwrap_or(0);
        let last = b.threads.iter().filter_map(|t| t.records.last()).map(|r| r.t).max().unwrap_or(0);
        b.stats.traced_ns = last - first;
        b.stats.threads = b.threads.len() as u32;
        b.stats.threads_at_once = most_at_once(b.threads.iter().flat_map(|t| busy_spans(&t.records)), cpus);
        b
    }

    fn declare(&mut self, name: String, kind: ObjKind, user: u32) -> ObjId {
        let id = self.objects.len() as ObjId;
        self.objects.push(ObjDecl {
            name,
            kind,
            parties: None,
            spin: None,
            capacity: None,
            lane_threads: None,
            barrier_impl: Default::default(),
            queue_impl: Default::default(),
            kspin_impl: Default::default(),
            users: vec![user],
        });
        id
    }

    /// The object of `kind` at `addr`, used by thread `user`.
    fn object(&mut self, kind: ObjKind, addr: u64, user: usize) -> ObjId {
        let id = match self.by_addr.get(&(kind, addr)) {
            Some(&id) => id,
            None => {
                let id = self.declare(format!("{}@{addr:#x}", kind.name()), kind, user as u32);
                if kind == ObjKind::Barrier {
                    self.objects[id as usize].parties = self.barrier_parties.get(&addr).copied();
                }
                if let (ObjKind::SpinLock, Some(ns)) = (kind, self.spin_then_block) {
                    // Keyed as a spin lock (its address space), declared as a spinning mutex.
                    self.objects[id as usize].kind = ObjKind::Mutex;
                    self.objects[id as usize].spin = Some(ns);
                }
                self.by_addr.insert((kind, addr), id);
                id
            }
        };
        let users = &mut self.objects[id as usize].users;
        if !users.contains(&(user as u32)) {
            users.push(user as u32);
        }
        id
    }

    /// Ties each condition wait to the signals and broadcasts that preceded its return: every
    /// one sent on the same condition variable by another thread between the wait's call and
    /// its return. The first of them woke it; the others were sent before it got its mutex back,
    /// so the state it found when it returned (flags set under that mutex) depends on them too.
    /// A program that waits once and then acts on several threads' updates (pigz's `join_all`:
    /// three workers broadcast before the main thread returns, and it joins all three holding
    /// the mutex) deadlocks in replay if the wait waits for one of them only.
    fn match_wakeups(&mut self) {
        // Per condition variable or futex word: its wake-ups in time order.
        let mut sends: BTreeMap<WaitedOn, Vec<Wakeup>> = BTreeMap::new();
        let mut waits: Vec<(u64, u64, WaitedOn, usize, usize)> = Vec::new(); // (end, call, on, thread, record)
        for (i, t) in self.threads.iter().enumerate() {
            for (k, r) in t.records.iter().enumerate() {
                match r.event {
                    Event::CondSignal { cond } | Event::CondBroadcast { cond } => sends.entry((0, cond)).or_default().push((r.t, i, k)),
                    Event::CondWait { cond, wait_ns, ret, .. } if ret != ETIMEDOUT => {
                        waits.push((r.t, r.t.saturating_sub(wait_ns), (0, cond), i, k));
                    }
                    Event::Futex { addr, op, ret, wait_ns, .. } => match futex_call(op, ret) {
                        FutexCall::Wake => sends.entry((1, addr)).or_default().push((r.t, i, k)),
                        FutexCall::Woken => waits.push((r.t, r.t.saturating_sub(wait_ns), (1, addr), i, k)),
                        FutexCall::NoSleep | FutexCall::Slept | FutexCall::Other => {}
                    },
                    _ => {}
                }
            }
        }
        for list in sends.values_mut() {
            list.sort_by_key(|s| s.0);
        }
        for (end, call, cond, i, k) in waits {
            let Some(list) = sends.get(&cond) else { continue };
            let from = list.partition_point(|s| s.0 < call);
            let to = list.partition_point(|s| s.0 <= end);
            let mut senders: Vec<usize> = Vec::new();
            for &(_, j, m) in list[from..to].iter().filter(|s| s.1 != i) {
                self.wakes.entry((j, m)).or_default().push(i);
                senders.push(j);
            }
            if !senders.is_empty() {
                senders.sort_unstable();
                self.matched.insert((i, k), senders);
            }
        }
    }

    /// Keeps a thread that waits for another thread while holding a mutex (joins it, or waits
    /// on a condition variable for its wake-ups while holding a second mutex) from taking that
    /// mutex before the other thread is done with it. In the trace every critical section of
    /// the other thread on the mutex before the event waited for (its end, its signal) came
    /// before the waiter took the mutex: the waiter held it from then until the event. The
    /// replay leaves mutexes free to be taken in any order, so a waiter that got the mutex
    /// first would wait for a thread that waits for the mutex (pigz's `join_all` joins a worker
    /// that finished before the main thread locked, without waiting on the condition variable
    /// at all). So the waiter's acquisition waits for the other thread's last unlock of that
    /// mutex before it: one more happens-before edge of the trace, kept only where a deadlock
    /// needs it.
    fn order_joins_under_locks(&mut self) {
        for (a, t) in self.threads.iter().enumerate() {
            // Mutexes held (writer side): address → (depth, record that took it, its time).
            let mut held: BTreeMap<u64, (u32, usize, u64)> = BTreeMap::new();
            let mut readers: BTreeMap<u64, u32> = BTreeMap::new();
            for (k, r) in t.records.iter().enumerate() {
                // The threads waited for, and the mutex the wait itself gives up (if any).
                let (awaited, released): (Vec<usize>, Option<u64>) = match r.event {
                    Event::ThreadJoin { tid: Some(tid), ret: 0, .. } => (self.index_of.get(&tid).copied().into_iter().collect(), None),
                    Event::CondWait { mutex, .. } => (self.matched.get(&(a, k)).cloned().unwrap_or_default(), Some(mutex)),
                    Event::Futex { .. } => (self.matched.get(&(a, k)).cloned().unwrap_or_default(), None),
                    _ => (Vec::new(), None),
                };
                for &x in &awaited {
                    for (&addr, &(_, ka, ta)) in held.iter().filter(|(addr, _)| Some(**addr) != released) {
                        let last = self.threads[x].records.iter().rposition(|u| {
                            u.t < ta && matches!(u.event, Event::MutexUnlock { addr: y, .. } | Event::RwUnlock { addr: y, .. } if y == addr)
                        });
                        if let Some(m) = last {
                            if !self.unlock_lets.get(&(x, m)).is_some_and(|v| v.contains(&(a, addr))) {
                                self.lock_after.entry((a, ka)).or_default().push((x, addr));
                                self.unlock_lets.entry((x, m)).or_default().push((a, addr));
                            }
                        }
                    }
                }
                match r.event {
                    Event::MutexLock { addr, ret: 0, .. } | Event::RwWriteLock { addr, ret: 0, .. } => {
                        let e = held.entry(addr).or_insert((0, k, r.t));
                        e.0 += 1;
                    }
                    Event::RwReadLock { addr, ret: 0, .. } => *readers.entry(addr).or_insert(0) += 1,
                    Event::MutexUnlock { addr, .. } | Event::RwUnlock { addr, .. } => {
                        if let Some(n) = readers.get_mut(&addr).filter(|n| **n > 0) {
                            *n -= 1;
                        } else if let Some(e) = held.get_mut(&addr) {
                            e.0 -= 1;
                            if e.0 == 0 {
                                held.remove(&addr);
                            }
                        }
                    }
                    // The wait gives the mutex up; the thread takes it again as it returns.
                    Event::CondWait { mutex, .. } => {
                        if let Some(e) = held.get_mut(&mutex) {
                            (e.1, e.2) = (k, r.t);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The condition variable that carries `what` from `sender` to `waiter`: its wake-ups, or
    /// "my last unlock of the mutex at `addr` before you take it". One per (waiter, sender,
    /// what) makes the matching exact although tokens are counts: the sender sends them in its
    /// program order, which is their time order, and the waiter's waits consume them in
    /// theirs, so the n-th token on the channel is the one the waiter's n-th wait on it needs.
    /// (One channel per waiter let a wait take a token sent early for a later wait.)
    fn channel(&mut self, waiter: usize, sender: usize, what: Carries) -> ObjId {
        if let Some(&o) = self.channels.get(&(waiter, sender, what)) {
            return o;
        }
        let name = match what {
            Carries::Wakeups => format!("t{waiter}.wake.t{sender}"),
            Carries::UnlockOf(addr) => format!("t{waiter}.after.t{sender}@{addr:#x}"),
        };
        let o = self.declare(name, ObjKind::CondVar, waiter as u32);
        self.objects[o as usize].users.push(sender as u32);
        self.channels.insert((waiter, sender, what), o);
        o
    }

    /// Thread `me` waits for one token on each of `conds` in turn, under its own mutex.
    fn wait_tokens(&mut self, me: usize, conds: &[ObjId]) {
        let own = self.handshakes[me].own_mutex;
        self.push(Instr::Lock(own));
        for &cond in conds {
            self.push(Instr::CondWait { cond, mutex: own });
        }
        self.push(Instr::Unlock(own));
    }

    /// The waits of record `k` of thread `me` for the wake-ups [`Builder::match_wakeups`] tied
    /// to it; false when none was.
    fn wait_for_wakeups(&mut self, me: usize, k: usize) -> bool {
        let Some(senders) = self.matched.get(&(me, k)).cloned() else { return false };
        self.stats.wakeups_matched += 1;
        self.stats.wakeups_tied += senders.len() as u64;
        let conds: Vec<ObjId> = senders.into_iter().map(|j| self.channel(me, j, Carries::Wakeups)).collect();
        self.wait_tokens(me, &conds);
        true
    }

    /// The tokens record `k` of thread `me` (a signal, broadcast or futex wake) sends.
    fn send_wakeups(&mut self, me: usize, k: usize) {
        for w in self.wakes.get(&(me, k)).cloned().unwrap_or_default() {
            let cond = self.channel(w, me, Carries::Wakeups);
            self.push(Instr::CondSignal(cond));
        }
    }

    /// Before record `k` of thread `me` takes a mutex: the waits of [`Builder::order_joins_under_locks`].
    fn wait_lock_order(&mut self, me: usize, k: usize) {
        let Some(edges) = self.lock_after.get(&(me, k)).cloned() else { return };
        let conds: Vec<ObjId> = edges.into_iter().map(|(c, addr)| self.channel(me, c, Carries::UnlockOf(addr))).collect();
        self.wait_tokens(me, &conds);
    }

    /// After record `k` of thread `me` unlocks a mutex: the tokens it owes joiners.
    fn send_lock_order(&mut self, me: usize, k: usize) {
        for (a, addr) in self.unlock_lets.get(&(me, k)).cloned().unwrap_or_default() {
            let cond = self.channel(a, me, Carries::UnlockOf(addr));
            self.push(Instr::CondSignal(cond));
        }
    }

    fn push(&mut self, instr: Instr) {
        self.instrs.push(instr);
    }

    /// Compute of `ns` in the current segment (merged with the segment's last instruction
    /// when that is a compute).
    fn compute(&mut self, ns: u64, a: &mut Account) {
        if ns == 0 {
            return;
        }
        a.wall += ns;
        let last = self.instrs.len().wrapping_sub(1);
        if a.computes.last() == Some(&last) {
            if let Some(Instr::Compute { dist: Dist::Fixed(d), .. }) = self.instrs.last_mut() {
                *d += ns;
                return;
            }
        }
        a.computes.push(self.instrs.len());
        self.push(Instr::Compute { dist: Dist::Fixed(ns), skew: 0.0, mem: 0.0, split: false });
    }

    /// Ends the segment at a measured CPU time `cpu`: its computes shrink in proportion so
    /// that they add up to the CPU time measured, less spinning and modelled kernel work.
    fn close_segment(&mut self, cpu: u64, a: &mut Account) {
        let used = cpu.saturating_sub(a.cpu_start);
        let budget = used.saturating_sub(a.spin + a.kernel + a.tracer);
        let scale = if a.wall == 0 { 1.0 } else { (budget as f64 / a.wall as f64).min(1.0) };
        // Off a CPU: the wall gaps less the CPU time spent in them (all of the segment's but
        // what its spin locks spun inside their calls). Not the compute the scaling drops,
        // which also holds the kernel work the simulator re-creates and the tracer's own.
        let off = a.wall.saturating_sub(used.saturating_sub(a.spin));
        let mut off_left = off;
        for (n, &i) in a.computes.iter().enumerate() {
            if let Instr::Compute { dist: Dist::Fixed(d), .. } = &mut self.instrs[i] {
                let kept = (*d as f64 * scale).round() as u64;
                self.stats.compute_ns += kept;
                // Each compute's share of the off-CPU time, in proportion to its wall gap (the
                // last takes what rounding left, so the shares add up to `off`).
                let share = if n + 1 == a.computes.len() {
                    off_left
                } else {
                    ((off as f64 * *d as f64 / a.wall as f64).round() as u64).min(off_left)
                };
                off_left -= share;
                if share > 0 {
                    self.off_cpu.push((i, share));
                }
                *d = kept;
            }
        }
        self.stats.unexplained_ns += off - off_left;
        *a = Account { prev_t: a.prev_t, cpu_start: cpu, ..Account::default() };
    }

    /// Splits the thread's off-CPU time with no traced reason (the wall time its computes lost
    /// to the CPU time measured) with its `THREAD_STATS` record: the time it waited for a CPU
    /// (`run_delay`) is the traced machine's scheduling, which the simulation makes again, and
    /// is dropped; the rest was spent blocked in calls the tracer does not see (inline system
    /// calls, I/O) and is replayed as sleeps where it happened, each compute's share in
    /// proportion to the off-CPU time it lost. Without the record (a thread killed by the
    /// process's exit, a version-1 trace) nothing is replayed and the time is counted as
    /// unsplit.
    fn replay_untraced_blocking(&mut self, from: usize, t: &crate::trace::ThreadTrace) {
        let lost: Vec<(usize, u64)> = std::mem::take(&mut self.off_cpu);
        let total: u64 = lost.iter().map(|&(_, d)| d).sum();
        self.stats.thread_ns += t.records.last().map_or(0, |r| r.t).saturating_sub(t.records.first().map_or(0, |r| r.t));
        let run_delay = t.records.iter().rev().find_map(|r| match r.event {
            Event::ThreadStats { run_delay_ns, .. } => run_delay_ns,
            _ => None,
        });
        let Some(run_delay) = run_delay else {
            self.stats.unexplained_unsplit_ns += total;
            return;
        };
        let blocked = total.saturating_sub(run_delay);
        let share = if total == 0 { 0.0 } else { blocked as f64 / total as f64 };
        let mut sleeps: BTreeMap<usize, u64> = BTreeMap::new();
        for (i, d) in lost {
            *sleeps.entry(i).or_insert(0) += ((d as f64 * share).round() as u64).min(d);
        }
        // A sleep shorter than the tracer's CPU-time sampling gap is not a blocking call the
        // trace can tell from the extrapolation of its CPU time (docs/trace-format.md, "CPU
        // time"): replayed, thousands of nanosecond sleeps become as many blocks and wake-ups
        // (an allocation-heavy thread: 64,907 sleeps with a median of 5 ns). They are dropped
        // with the time held off a CPU.
        sleeps.retain(|_, ns| *ns >= MIN_UNTRACED_SLEEP_NS);
        let slept: u64 = sleeps.values().sum();
        // What the rounded sleeps leave is the time held off a CPU: the two add up exactly.
        self.stats.blocked_untraced_ns += slept;
        self.stats.held_off_ns += total - slept;
        if slept == 0 {
            return;
        }
        let tail = self.instrs.split_off(from);
        for (j, instr) in tail.into_iter().enumerate() {
            self.instrs.push(instr);
            if let Some(&ns) = sleeps.get(&(from + j)).filter(|&&ns| ns > 0) {
                self.instrs.push(Instr::Sleep(Dist::Fixed(ns)));
            }
        }
    }

    /// Merges adjacent computes from `from` on and drops empty ones (segments end between
    /// them; the program has no jumps, so indices may change).
    fn tidy(&mut self, from: usize) {
        let tail = self.instrs.split_off(from);
        for i in tail {
            let extends = self.instrs.len() > from;
            match (i, self.instrs.last_mut()) {
                (Instr::Compute { dist: Dist::Fixed(0), .. }, _) => {}
                (Instr::Compute { dist: Dist::Fixed(d), .. }, Some(Instr::Compute { dist: Dist::Fixed(e), .. })) if extends => *e += d,
                (i, _) => self.instrs.push(i),
            }
        }
    }

    /// Ends the thread: a segment without a closing measurement keeps its wall gaps.
    fn finish_segment(&mut self, a: &mut Account) {
        self.stats.compute_ns += a.wall;
        a.computes.clear();
        a.wall = 0;
    }

    fn thread(&mut self, me: usize) {
        let t = self.threads[me];
        let entry = self.instrs.len() as u32;
        // Waits for its creator's start token only if a THREAD_CREATE names it: a child the
        // reader could not link (traces of tracers before the THREAD_CREATE seq fix) would
        // wait forever; it starts at once instead.
        let created = self.linked.contains(&me);
        let fault_budget = self.fault_budget(me);
        self.faults_left = fault_budget.unwrap_or(u64::MAX);
        self.groups.push(Group {
            name: format!("tid{}", t.tid),
            threads: CountExpr::fixed(1),
            entry,
            pushes: Vec::new(),
            drains: Vec::new(),
            created,
            fault_budget,
        });
        if created {
            self.wait_tokens(me, &[self.handshakes[me].start]);
        }
        let mut held: BTreeMap<ObjId, u32> = BTreeMap::new();
        let mut readers: BTreeMap<u64, u32> = BTreeMap::new();
        let mut acct = Account { prev_t: t.records[0].t, cpu_start: t.records[0].cpu.unwrap_or(0), ..Account::default() };
        for (k, r) in t.records.iter().enumerate() {
            self.stats.records += 1;
            self.gap(r, &mut acct);
            match r.event {
                Event::ThreadExit | Event::Exec { .. } => break,
                Event::ThreadCreate { ret: 0, child: Some(child), .. } => {
                    if let Some(&c) = self.index_of.get(&child) {
                        self.push(Instr::CondSignal(self.handshakes[c].start));
                    }
                }
                Event::ThreadJoin { tid: Some(tid), ret: 0, wait_ns, .. } => match self.index_of.get(&tid) {
                    Some(&c) => self.wait_tokens(me, &[self.handshakes[c].end]),
                    None => self.sleep(wait_ns),
                },
                Event::MutexLock { addr, ret: 0, .. } | Event::RwWriteLock { addr, ret: 0, .. } => {
                    let o = self.object(ObjKind::Mutex, addr, me);
                    let n = held.entry(o).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        self.wait_lock_order(me, k);
                        self.push(Instr::Lock(o));
                    }
                }
                Event::SpinLock { addr, ret: 0, .. } => {
                    let o = self.object(ObjKind::SpinLock, addr, me);
                    if held.insert(o, 1).is_none() {
                        let blocking = self.objects[o as usize].kind == ObjKind::Mutex;
                        self.push(if blocking { Instr::Lock(o) } else { Instr::SpinLock(o) });
                    }
                }
                Event::MutexUnlock { addr, .. } => {
                    self.unlock(ObjKind::Mutex, addr, &mut held);
                    self.send_lock_order(me, k);
                }
                Event::SpinUnlock { addr, .. } => self.unlock(ObjKind::SpinLock, addr, &mut held),
                Event::RwReadLock { addr, ret: 0, .. } => *readers.entry(addr).or_insert(0) += 1,
                Event::RwUnlock { addr, .. } => match readers.get_mut(&addr) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => {
                        self.unlock(ObjKind::Mutex, addr, &mut held);
                        self.send_lock_order(me, k);
                    }
                },
                Event::BarrierWait { addr, .. } => {
                    let o = self.object(ObjKind::Barrier, addr, me);
                    self.push(Instr::Barrier(o));
                }
                Event::CondWait { mutex, wait_ns, .. } => {
                    let m = self.by_addr.get(&(ObjKind::Mutex, mutex)).copied().filter(|o| held.get(o).is_some_and(|&n| n > 0));
                    if let Some(m) = m {
                        self.push(Instr::Unlock(m));
                    }
                    if !self.wait_for_wakeups(me, k) {
                        self.stats.waits_slept += 1;
                        self.sleep(wait_ns);
                    }
                    if let Some(m) = m {
                        self.wait_lock_order(me, k);
                        self.push(Instr::Lock(m));
                    }
                }
                Event::Futex { op, ret, wait_ns, .. } => match futex_call(op, ret) {
                    FutexCall::Woken => {
                        self.stats.futex_waits += 1;
                        if !self.wait_for_wakeups(me, k) {
                            self.stats.waits_slept += 1;
                            self.sleep(wait_ns);
                        }
                    }
                    FutexCall::Slept => {
                        self.stats.futex_waits += 1;
                        self.stats.waits_slept += 1;
                        self.sleep(wait_ns);
                    }
                    FutexCall::Wake => self.send_wakeups(me, k),
                    FutexCall::NoSleep | FutexCall::Other => {}
                },
                Event::CondSignal { .. } | Event::CondBroadcast { .. } => self.send_wakeups(me, k),
                Event::Malloc { .. } | Event::Memalign { .. } | Event::Calloc { .. } | Event::Realloc { .. } | Event::Free { .. } => {
                    self.heap_record(&r.event, (me, k), &mut acct);
                }
                Event::Munmap { len, ret: 0, .. } => self.shootdown(MmCall::Munmap, len),
                Event::Madvise { len, advice, ret: 0, .. } if MADV_DROPS.contains(&advice) => self.shootdown(MmCall::Madvise, len),
                Event::Mprotect { len, prot, ret: 0, .. } if prot & PROT_WRITE == 0 => self.shootdown(MmCall::Mprotect, len),
                _ => {}
            }
        }
        self.finish_segment(&mut acct);
        self.replay_untraced_blocking(entry as usize, t);
        self.tidy(entry as usize);
        if self.joined.contains(&me) {
            self.push(Instr::CondSignal(self.handshakes[me].end));
        }
        self.push(Instr::End);
    }

    /// The compute before record `r`'s call (see the module's notes).
    fn gap(&mut self, r: &Record, a: &mut Account) {
        let wait = wait_of(&r.event);
        let call = r.t.saturating_sub(wait).max(a.prev_t);
        self.compute(call - a.prev_t, a);
        if matches!(r.event, Event::SpinLock { .. }) {
            a.spin += wait;
        }
        a.tracer += self.tracer_record_ns[usize::from(r.cpu.is_some())];
        a.prev_t = r.t.max(a.prev_t);
        if let (Some(cpu), false) = (r.cpu, r.cpu_estimated) {
            self.close_segment(cpu, a);
        }
    }

    /// The page faults the heap model may give thread `me`: the minor faults the kernel
    /// counted for it, where the model (the time-ordered pass, [`malloc_history`]) makes more,
    /// which happens when a thread allocates memory it never touches (the model faults every
    /// page a `malloc` hands out). None where it does not, or where the trace has no count
    /// (format version 2). The count includes the thread's stack and code faults, so it is a
    /// bound, not an estimate.
    fn fault_budget(&mut self, me: usize) -> Option<u64> {
        let counted = self.threads[me].records.iter().rev().find_map(|r| match r.event {
            Event::ThreadStats { minor_faults, .. } => minor_faults,
            _ => None,
        })?;
        let modelled: u64 = self
            .malloc
            .ops
            .range((me, 0)..(me + 1, 0))
            .flat_map(|(_, ops)| ops)
            .map(|op| if let MmOp::Faults(n) = *op { n } else { 0 })
            .sum();
        (modelled > counted).then(|| {
            self.stats.heap_faults_dropped += modelled - counted;
            counted
        })
    }

    /// Kernel work the simulator will model for `ops`, at the default costs; faults within
    /// what is left of the thread's budget.
    fn kernel_work(&mut self, ops: &[MmOp], a: &mut Account) {
        let c = &self.costs;
        let left = &mut self.faults_left;
        a.kernel += ops
            .iter()
            .map(|op| match *op {
                MmOp::Mmap(_) | MmOp::Grow(_) => c.syscall_mm,
                MmOp::Faults(n) => {
                    let n = n.min(*left);
                    *left -= n;
                    n * c.page_fault
                }
                MmOp::Munmap(..) | MmOp::Trim(_) | MmOp::Protect(_) => {
                    c.syscall_mm + c.tlb_flush_local + c.ipi_send + c.ipi_latency + c.tlb_flush_remote
                }
            })
            .sum::<u64>();
    }

    fn sleep(&mut self, ns: u64) {
        if ns > 0 {
            self.push(Instr::Sleep(Dist::Fixed(ns)));
        }
    }

    fn unlock(&mut self, kind: ObjKind, addr: u64, held: &mut BTreeMap<ObjId, u32>) {
        let Some(&o) = self.by_addr.get(&(kind, addr)) else {
            self.stats.unlocks_unmatched += 1;
            return;
        };
        match held.get_mut(&o) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    held.remove(&o);
                    let spinning = self.objects[o as usize].kind == ObjKind::SpinLock;
                    self.push(if spinning { Instr::SpinUnlock(o) } else { Instr::Unlock(o) });
                }
            }
            _ => self.stats.unlocks_unmatched += 1,
        }
    }

    /// An allocator record of thread `at.0` (its record `at.1`): each successful allocation a
    /// `malloc` of its size, each free a free of the chunk it names, the thread's own or
    /// another's (found by the time-ordered pass, [`malloc_history`]; the simulation returns
    /// it to the arena it came from), and the kernel work the pass's arenas made for it taken
    /// out of the compute.
    fn heap_record(&mut self, ev: &Event, at: (usize, usize), a: &mut Account) {
        let Some((freed, alloc)) = heap_event(ev) else { return };
        if freed != 0 {
            match self.malloc.frees.get(&at).copied() {
                Some((owner, seq)) => {
                    if owner != at.0 {
                        self.stats.frees_remote += 1;
                    }
                    self.push(Instr::FreeChunk { owner: owner as u32, seq });
                }
                None => self.stats.frees_unmatched += 1,
            }
        }
        if let Some((size, _)) = alloc.filter(|&(_, p)| p != 0) {
            self.push(Instr::Malloc(Dist::Fixed(size)));
        }
        // Each record is converted once (its thread's budget was counted before).
        if let Some(ops) = self.malloc.ops.remove(&at) {
            self.kernel_work(&ops, a);
        }
    }

    fn shootdown(&mut self, call: MmCall, len: u64) {
        let pages = len.div_ceil(PAGE);
        if pages > 0 {
            self.push(Instr::MmUnmap { call, pages });
        }
    }
}

/// What the process's allocations and frees, taken together in time order, decide (glibc's
/// `mp_` is one per process, and any thread may free any thread's chunk).
#[derive(Debug, Default, PartialEq)]
struct MallocHistory {
    /// Every free of a chunk seen allocated, by (thread, record): the allocating thread and
    /// which of its allocations it was.
    frees: BTreeMap<(usize, usize), (usize, u32)>,
    /// What each allocator record made the arenas do, by (thread, record).
    ops: BTreeMap<(usize, usize), Vec<MmOp>>,
    /// The arenas glibc handed out in the traced run's order of first `malloc`s and exits.
    arenas: ProcessHeap,
}

/// glibc's `HEAP_MAX_SIZE` on 64-bit (2 × `DEFAULT_MMAP_THRESHOLD_MAX`): a non-main arena's
/// heaps are mapped at multiples of it, so a chunk's heap is its address rounded down to it
/// (malloc/arena.c `heap_for_ptr`).
const HEAP_MAX_SIZE: u64 = 64 << 20;

/// The largest chunk glibc's tcache holds (malloc/malloc.c `MAX_TCACHE_SIZE`: `tidx2usize(63)`
/// = 1,032 bytes of request, a 1,040-byte chunk; glibc 2.26 and later).
const TCACHE_MAX_CHUNK: u64 = 1040;

/// The arena glibc gave each thread in the traced run, read from the addresses of its heap
/// chunks, numbered in the order the threads first used them: 0 is the main arena (the main
/// thread's, whose chunks lie in the `brk` heap), and every other is known by its heaps, the
/// `HEAP_MAX_SIZE`-aligned windows its chunks lie in (`heap_for_ptr`). A thread's arena is the
/// one of its first heap chunk (glibc binds a thread to one arena at its first `malloc`); its
/// later chunks in another window are that arena's next heap (`new_heap` when one fills up).
/// A heap chunk is one that cannot be a mapped one: below the initial mmap threshold (the
/// thresholds only rise), or not at the page offset 16 of a mapped chunk's user pointer. Only
/// fresh allocations past the tcache's sizes count: a small one may come from the thread's
/// tcache, which holds chunks of any arena it freed (a Python worker's first `malloc` returns
/// the main arena's chunk it had just freed), and a `realloc` of an existing chunk stays in
/// that chunk's arena. None: a thread that allocated no such chunk.
fn traced_arenas(threads: &[&ThreadTrace], pid: u32, heap: &HeapParams) -> Vec<Option<u32>> {
    let heap_chunk = |size: u64, ptr: u64| {
        let nb = request2size(size);
        ptr != 0 && nb > TCACHE_MAX_CHUNK && (nb < heap.mmap_threshold || ptr % PAGE != 16)
    };
    // Each thread's heap chunks' windows, in its order, and when it first used the heap.
    let windows: Vec<Vec<(u64, u64)>> = threads
        .iter()
        .map(|t| {
            t.records
                .iter()
                .filter_map(|r| match heap_event(&r.event) {
                    // A `realloc` of a chunk keeps it in that chunk's arena (`arena_for_chunk`),
                    // whichever thread calls it: only fresh allocations show the thread's own.
                    Some((0, Some((size, ptr)))) if heap_chunk(size, ptr) => Some((r.t, ptr / HEAP_MAX_SIZE)),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let mut of_window: BTreeMap<u64, u32> = BTreeMap::new();
    let mut arenas: Vec<Option<u32>> = vec![None; threads.len()];
    if let Some(m) = threads.iter().position(|t| t.tid == pid) {
        arenas[m] = Some(ProcessHeap::MAIN);
        for &(_, w) in &windows[m] {
            of_window.insert(w, ProcessHeap::MAIN);
        }
    }
    let mut order: Vec<usize> = (0..threads.len()).filter(|&i| arenas[i].is_none() && !windows[i].is_empty()).collect();
    order.sort_by_key(|&i| (windows[i][0].0, i));
    let mut next = 1;
    for i in order {
        let a = *of_window.entry(windows[i][0].1).or_insert_with(|| {
            next += 1;
            next - 1
        });
        arenas[i] = Some(a);
        for &(_, w) in &windows[i] {
            of_window.entry(w).or_insert(a);
        }
    }
    arenas
}

/// The allocations and frees of all the process's threads in time order, through the heap
/// model as the simulation runs it: the arenas glibc gave each thread in the traced run
/// (`arenas`, [`traced_arenas`]; the main thread, `pid`, on the main arena; where unknown, the
/// arena glibc's rules give in the order of the threads' first `malloc`s and exits,
/// [`ProcessHeap`] with `cpus` as traced), the process's thresholds
/// (`mp_`: any thread's free of a mapped chunk raises them), and every chunk freed back to the
/// arena it came from, whichever thread frees it. What each record made the arenas do is the
/// kernel work the simulation will re-create, taken out of the traced compute; the arenas
/// reused and shared are for the user to compare with the simulation's.
fn malloc_history(threads: &[&ThreadTrace], heap: &HeapParams, (pid, arenas): (u32, &[Option<u32>]), cpus: u32) -> MallocHistory {
    let mut events: Vec<(u64, usize, usize, &Event)> = Vec::new();
    for (i, t) in threads.iter().enumerate() {
        for (k, r) in t.records.iter().enumerate() {
            if matches!(r.event, Event::ThreadExit | Event::Exec { .. }) {
                events.push((r.t, i, k, &r.event));
                break;
            }
            if heap_event(&r.event).is_some() {
                events.push((r.t, i, k, &r.event));
            }
        }
    }
    events.sort_unstable_by_key(|&(t, i, k, _)| (t, i, k));
    let mut history = MallocHistory { arenas: ProcessHeap::new(*heap, cpus), ..MallocHistory::default() };
    let h = &mut history.arenas;
    let mut arena: Vec<Option<u32>> = threads.iter().map(|t| (t.tid == pid).then_some(ProcessHeap::MAIN)).collect();
    // Every live allocation: ptr -> (thread, its allocation number, the arena it is in),
    // numbered as the builder numbers each thread's `malloc`s (the successful ones, in order).
    let mut owners: BTreeMap<u64, (usize, u32, u32)> = BTreeMap::new();
    let mut allocs = vec![0u32; threads.len()];
    for (_, i, k, ev) in events {
        let Some((freed, alloc)) = heap_event(ev) else {
            // The thread's exit (or exec) detaches it from its arena.
            if let Some(a) = arena[i].take() {
                h.detach(a);
            }
            continue;
        };
        let mut ops = Vec::new();
        if let Some((j, seq, a)) = owners.remove(&freed).filter(|_| freed != 0) {
            history.frees.insert((i, k), (j, seq));
            let (ar, par) = h.get(a);
            ar.free_chunk(par, ChunkId { thread: j as u32, seq }, &mut ops);
        }
        if let Some((size, ptr)) = alloc {
            let a = *arena[i].get_or_insert_with(|| h.attach_as(arenas[i]));
            if ptr != 0 {
                let (ar, par) = h.get(a);
                ar.malloc(par, ChunkId { thread: i as u32, seq: allocs[i] }, size.max(1), &mut ops);
                owners.insert(ptr, (i, allocs[i], a));
                allocs[i] += 1;
            }
        }
        if !ops.is_empty() {
            history.ops.insert((i, k), ops);
        }
    }
    history
}

/// What an allocator record does: the pointer it frees (0: none) and the allocation it makes
/// (size, pointer; a pointer of 0 is a failed one). None for other records.
fn heap_event(ev: &Event) -> Option<(u64, Option<(u64, u64)>)> {
    Some(match *ev {
        Event::Malloc { size, ptr } | Event::Memalign { size, ptr, .. } => (0, Some((size, ptr))),
        Event::Calloc { nmemb, size, ptr } => (0, Some((nmemb.saturating_mul(size), ptr))),
        Event::Realloc { old, size, ptr } => (old, (size > 0).then_some((size, ptr))),
        Event::Free { ptr } => (ptr, None),
        _ => return None,
    })
}

/// A thread's time from its first record to its last, less its traced waits, as spans.
fn busy_spans(records: &[Record]) -> Vec<(u64, u64)> {
    let mut spans = Vec::new();
    let Some(first) = records.first() else { return spans };
    let mut from = first.t;
    for r in records {
        let call = r.t.saturating_sub(wait_of(&r.event)).max(from);
        spans.push((from, call));
        from = from.max(r.t);
    }
    spans.retain(|&(a, b)| b > a);
    spans
}

/// The most of the `[start, end)` spans that overlap for at least 1 % of the time they cover,
/// and for at least one scheduling period of the traced machine where that is under a tenth of
/// the run: so that a thread starting while its creator has not yet reached its join does not
/// count, nor a creator that a loaded machine kept waiting for a CPU before its join (a
/// runnable thread can wait up to a period for its turn).
fn most_at_once(spans: impl Iterator<Item = (u64, u64)>, cpus: u32) -> u32 {
    let mut edges: Vec<(u64, i64)> = spans.flat_map(|(a, b)| [(a, 1), (b, -1)]).collect();
    edges.sort_unstable();
    let (Some(&(first, _)), Some(&(last, _))) = (edges.first(), edges.last()) else { return 0 };
    // Time with exactly n spans open, for each n.
    let mut time_at: Vec<u64> = Vec::new();
    let (mut open, mut since) = (0i64, first);
    for (t, e) in edges {
        let n = open as usize;
        if time_at.len() <= n {
            time_at.resize(n + 1, 0);
        }
        time_at[n] += t - since;
        (open, since) = (open + e, t);
    }
    let run = last - first;
    let floor = (run.div_ceil(100)).max(sched_period_ns(cpus).min(run / 10));
    // The highest n such that the time with n or more open reaches the floor.
    let mut at_least = 0u64;
    for n in (1..time_at.len()).rev() {
        at_least += time_at[n];
        if at_least >= floor {
            return n as u32;
        }
    }
    0
}

/// CFS's scheduling period on `cpus` CPUs: `sysctl_sched_latency` (6 ms) scaled by
/// `1 + ilog2(min(cpus, 8))` (kernel/sched/fair.c, `get_update_sysctl_factor`, the default
/// `SCHED_TUNABLESCALING_LOG`, Linux 4.x–6.5): the time in which every runnable task on a CPU
/// gets its turn.
fn sched_period_ns(cpus: u32) -> u64 {
    6_000_000 * u64::from(1 + cpus.clamp(1, 8).ilog2())
}

/// What a token channel between two threads carries (see [`Builder::channel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Carries {
    /// The sender's signals, broadcasts and futex wakes the waiter's waits are tied to.
    Wakeups,
    /// The sender's last unlock of the mutex at this address before the waiter takes it.
    UnlockOf(u64),
}

/// What a wait waits on: `(0, condition variable)` or `(1, futex word)`, by address.
type WaitedOn = (u8, u64);
/// A signal, broadcast or futex wake: (its time, its thread, its record).
type Wakeup = (u64, usize, usize);

/// What a traced futex call was, for the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FutexCall {
    /// A wait that slept and was woken (`FUTEX_WAIT`, `FUTEX_WAIT_BITSET` returning 0).
    Woken,
    /// A wait that slept and was not woken: timed out, or interrupted by a signal.
    Slept,
    /// A wait that found the word changed and did not sleep (`EAGAIN`), or failed at once.
    NoSleep,
    /// A wake (`FUTEX_WAKE`, `FUTEX_WAKE_BITSET`, `FUTEX_WAKE_OP`, `FUTEX_REQUEUE`,
    /// `FUTEX_CMP_REQUEUE`) that succeeded.
    Wake,
    /// Anything else (priority-inheritance operations, failed wakes): not replayed.
    Other,
}

/// `op` with `FUTEX_PRIVATE_FLAG` and `FUTEX_CLOCK_REALTIME` masked off
/// (include/uapi/linux/futex.h `FUTEX_CMD_MASK`), and the call's result.
fn futex_call(op: u32, ret: i32) -> FutexCall {
    const EAGAIN: i32 = 11;
    const EINTR: i32 = 4;
    match (op & 0x7f, ret) {
        (0 | 9, 0) => FutexCall::Woken,
        (0 | 9, r) if r == -ETIMEDOUT || r == -EINTR => FutexCall::Slept,
        (0 | 9, r) if r == -EAGAIN || r < 0 => FutexCall::NoSleep,
        (1 | 3 | 4 | 5 | 10, r) if r >= 0 => FutexCall::Wake,
        _ => FutexCall::Other,
    }
}

/// How long a record's call waited before returning.
fn wait_of(e: &Event) -> u64 {
    match *e {
        Event::ThreadJoin { wait_ns, .. }
        | Event::MutexLock { wait_ns, .. }
        | Event::SpinLock { wait_ns, .. }
        | Event::RwReadLock { wait_ns, .. }
        | Event::RwWriteLock { wait_ns, .. }
        | Event::BarrierWait { wait_ns, .. }
        | Event::CondWait { wait_ns, .. } => wait_ns,
        Event::Futex { op, ret, wait_ns, .. } if matches!(futex_call(op, ret), FutexCall::Woken | FutexCall::Slept) => wait_ns,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Header, LockMode, Origin, ProcessStart, ThreadTrace};

    fn rec(t: u64, cpu: Option<u64>, event: Event) -> Record {
        Record { t, cpu, cpu_estimated: false, event }
    }

    fn thread(tid: u32, parent: Option<u32>, records: Vec<Record>) -> ThreadTrace {
        ThreadTrace { tid, parent, seq: parent.map(|_| tid), blocks: 1, lost_blocks: 0, records }
    }

    fn trace(threads: Vec<ThreadTrace>) -> Trace {
        let start = ProcessStart {
            ppid: 1,
            cpus: 2,
            origin: Origin::Exec,
            realtime_base_ns: 0,
            cmdline: vec!["app".into()],
            kernel: None,
            libc: None,
        };
        Trace {
            header: Header { version: 1, flags: 0, created_unix_ns: 0, creator_pid: 10 },
            processes: vec![Process { pid: 10, base_ns: 0, start: Some(start), threads }],
        }
    }

    fn start(tid: u32, parent: Option<u32>) -> Event {
        Event::ThreadStart { tid, parent, seq: parent.map(|_| tid), handle: 0 }
    }

    fn replay(t: &Trace) -> (Workload, ReplayStats) {
        from_trace("app", t, &Options::default()).expect("replays")
    }

    /// A main thread that creates a worker and joins it; the worker computes 1 ms of its 3 ms.
    fn fork_join() -> Trace {
        let main = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(100_000, Some(100_000), Event::ThreadCreate { seq: 11, ret: 0, handle: 7, child: Some(11) }),
                rec(4_000_000, Some(150_000), Event::ThreadJoin { tid: Some(11), ret: 0, handle: 7, wait_ns: 3_800_000 }),
                rec(4_100_000, Some(250_000), Event::ThreadExit),
            ],
        );
        let worker =
            thread(11, Some(10), vec![rec(150_000, Some(0), start(11, Some(10))), rec(3_150_000, Some(1_000_000), Event::ThreadExit)]);
        trace(vec![main, worker])
    }

    #[test]
    fn threads_start_when_created_and_signal_their_joiner() {
        let (w, stats) = replay(&fork_join());
        assert_eq!(w.threads, Some(2));
        assert_eq!(w.groups.len(), 2);
        let main = &w.program.instrs[w.groups[0].entry as usize..w.groups[1].entry as usize];
        let worker = &w.program.instrs[w.groups[1].entry as usize..];
        let name = |o: &ObjId| w.objects[*o as usize].name.clone();
        // main: compute 100 µs, start the worker, compute 50 µs, wait for its end, compute 100 µs.
        assert!(matches!(main[0], Instr::Compute { dist: Dist::Fixed(100_000), .. }), "{main:?}");
        assert!(matches!(&main[1], Instr::CondSignal(o) if name(o) == "t1.start"), "{main:?}");
        assert!(matches!(main[2], Instr::Compute { dist: Dist::Fixed(50_000), .. }), "{main:?}");
        assert!(matches!(&main[4], Instr::CondWait { cond, .. } if name(cond) == "t1.end"), "{main:?}");
        assert!(matches!(main[6], Instr::Compute { dist: Dist::Fixed(100_000), .. }), "{main:?}");
        assert_eq!(main.last(), Some(&Instr::End));
        // worker: waits for its start, computes its 1 ms of CPU (of 3 ms of wall), signals its end.
        assert!(matches!(&worker[1], Instr::CondWait { cond, .. } if name(cond) == "t1.start"), "{worker:?}");
        assert!(matches!(worker[3], Instr::Compute { dist: Dist::Fixed(1_000_000), .. }), "{worker:?}");
        assert!(matches!(&worker[4], Instr::CondSignal(o) if name(o) == "t1.end"), "{worker:?}");
        assert_eq!(stats.compute_ns, 1_250_000);
        // The worker's 2 ms off a CPU, and 50 µs of main's before it joined.
        assert_eq!(stats.unexplained_ns, 2_050_000);
        assert_eq!(stats.traced_ns, 4_100_000);
        // main waits in the join while the worker runs: two at once only for the 50 µs between
        // the worker's start and main's join, 1.2 % of the run but under a tenth of it (the
        // 12 ms period of 2 CPUs, capped at a tenth of a 4.1 ms run): one at once.
        assert_eq!(stats.threads_at_once, 1);
        assert_eq!(most_at_once([(0, 1000), (0, 1000), (500, 501)].into_iter(), 2), 2, "1 ‰ of three at once");
        let (ms, s) = (1_000_000, 1_000_000_000);
        assert_eq!(most_at_once([(0, 10 * s), (0, 10 * s), (5 * s, 5 * s + 200 * ms)].into_iter(), 2), 3, "2 % of three at once");
        assert_eq!(most_at_once([(0, 10), (11, 20)].into_iter(), 2), 1);
        assert_eq!(most_at_once(std::iter::empty(), 2), 0);
        // 100 ms runs on 2 CPUs (a 12 ms period, capped at a tenth of the run): 5 ms of three
        // at once is a creator kept waiting for a CPU; 15 ms is three threads.
        assert_eq!(sched_period_ns(2), 12 * ms);
        assert_eq!(sched_period_ns(64), 24 * ms);
        assert_eq!(most_at_once([(0, 100 * ms), (0, 100 * ms), (50 * ms, 55 * ms)].into_iter(), 2), 2);
        assert_eq!(most_at_once([(0, 100 * ms), (0, 100 * ms), (50 * ms, 65 * ms)].into_iter(), 2), 3);
        assert_eq!(most_at_once([(0, 1000 * ms), (0, 1000 * ms), (500 * ms, 511 * ms)].into_iter(), 2), 2);
    }

    /// [`fork_join`] whose worker (1 ms of CPU in 3 ms) ends with a THREAD_STATS record: it
    /// waited `run_delay_ns` for a CPU and blocked `voluntary` times.
    fn fork_join_with_run_delay(run_delay_ns: u64, voluntary: u64) -> Trace {
        let mut t = fork_join();
        let stats = Event::ThreadStats {
            run_delay_ns: Some(run_delay_ns),
            voluntary_switches: Some(voluntary),
            involuntary_switches: Some(1),
            minor_faults: None,
        };
        t.processes[0].threads[1].records.insert(1, rec(3_150_000, Some(1_000_000), stats));
        t
    }

    /// The worker of [`fork_join`] computes 1 ms of its 3 ms: 2 ms off a CPU with no traced
    /// reason. Its THREAD_STATS record says it waited 0.5 ms for a CPU: the other 1.5 ms it was
    /// blocked in calls the tracer does not see, and sleeps that long in the replay.
    #[test]
    fn off_cpu_time_is_split_into_waiting_for_a_cpu_and_blocking_where_the_thread_says() {
        let (w, stats) = replay(&fork_join_with_run_delay(500_000, 3));
        let worker = &w.program.instrs[w.groups[1].entry as usize..];
        assert!(worker.iter().any(|i| matches!(i, Instr::Sleep(Dist::Fixed(1_500_000)))), "{worker:?}");
        assert_eq!((stats.held_off_ns, stats.blocked_untraced_ns), (500_000, 1_500_000));
        // main has no THREAD_STATS: its 50 µs cannot be split and are not replayed.
        assert_eq!(stats.unexplained_unsplit_ns, 50_000);
        assert_eq!(stats.unexplained_ns, stats.held_off_ns + stats.blocked_untraced_ns + stats.unexplained_unsplit_ns);
        assert_eq!(stats.thread_ns, 4_100_000 + 3_000_000);
    }

    /// The same worker, blocked only 4 µs in calls the tracer does not see: below the tracer's
    /// CPU-time sampling gap that is not told from the CPU time's extrapolation, and no sleep
    /// is replayed; the time counts as held off a CPU.
    #[test]
    fn off_cpu_time_below_the_sampling_gap_is_not_replayed_as_a_sleep() {
        let (w, stats) = replay(&fork_join_with_run_delay(2_000_000 - 4_000, 1));
        let worker = &w.program.instrs[w.groups[1].entry as usize..];
        assert!(!worker.iter().any(|i| matches!(i, Instr::Sleep(_))), "{worker:?}");
        assert_eq!((stats.held_off_ns, stats.blocked_untraced_ns), (2_000_000, 0));
        assert_eq!(stats.unexplained_ns, stats.held_off_ns + stats.blocked_untraced_ns + stats.unexplained_unsplit_ns);
    }

    /// A thread on a CPU all along, whose allocations make kernel work the simulator
    /// re-creates (the compute shrinks by it): none of that is off-CPU time, so nothing is
    /// replayed as a sleep (a first version of the split slept it, +63 % on heap_churn).
    #[test]
    fn kernel_work_taken_out_of_the_compute_is_not_off_cpu_time() {
        let stats =
            Event::ThreadStats { run_delay_ns: Some(0), voluntary_switches: Some(0), involuntary_switches: Some(0), minor_faults: None };
        let t = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(10, None, Event::Malloc { size: 8 << 20, ptr: 0xa }),
                rec(1_000_000, Some(1_000_000), stats),
                rec(1_000_010, Some(1_000_010), Event::ThreadExit),
            ],
        );
        let (w, stats) = replay(&trace(vec![t]));
        assert!(!w.program.instrs.iter().any(|i| matches!(i, Instr::Sleep(_))), "{:?}", w.program.instrs);
        assert_eq!((stats.unexplained_ns, stats.blocked_untraced_ns), (0, 0));
        assert!(stats.compute_ns < 1_000_000, "the 8 MiB's page faults come out of the compute: {stats:?}");
    }

    /// A thread that mallocs 8 MiB and touches 256 pages of it: the kernel counted 300 minor
    /// faults (its stack and code's too), the heap model faults the 2,048 pages of the mapped
    /// chunk. Its group takes at most 300 of the model's faults, and its compute keeps the CPU
    /// time the other faults would have taken; without the count, all of them.
    #[test]
    fn a_thread_takes_only_the_page_faults_the_kernel_counted() {
        let run = |minor_faults| {
            let stats =
                Event::ThreadStats { run_delay_ns: Some(0), voluntary_switches: Some(0), involuntary_switches: Some(0), minor_faults };
            let t = thread(
                10,
                None,
                vec![
                    rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                    rec(10, None, Event::Malloc { size: 8 << 20, ptr: 0xa }),
                    rec(1_000_000, Some(1_000_000), stats),
                    rec(1_000_010, Some(1_000_010), Event::ThreadExit),
                ],
            );
            replay(&trace(vec![t]))
        };
        let (w, counted) = run(Some(300));
        assert_eq!(w.groups[0].fault_budget, Some(300));
        assert_eq!(counted.heap_faults_dropped, 2048 - 300);
        let (w, uncounted) = run(None);
        assert_eq!(w.groups[0].fault_budget, None);
        assert!(counted.compute_ns > uncounted.compute_ns, "{counted:?} {uncounted:?}");
        let (w, _) = run(Some(5_000));
        assert_eq!(w.groups[0].fault_budget, None, "more faults counted than modelled: no bound");
        // Simulated: the kernel time of 300 faults, not 2,048.
        let kernel = |w: Workload| {
            let mut cfg = native_config(1);
            cfg.workload = std::sync::Arc::new(w);
            crate::scenario::simulate_run(&cfg).expect("runs").measured().next().expect("instance").kernel_ns
        };
        let (few, all) = (kernel(run(Some(300)).0), kernel(run(None).0));
        assert!(few * 4 < all, "{few} against {all}");
    }

    /// Raw futex calls: a wait that was woken waits for the wakes on its word while it slept;
    /// one that found the word changed (EAGAIN) does nothing; one that timed out sleeps.
    #[test]
    fn futex_waits_wait_for_the_wakes_on_their_word() {
        let word = 0xf0;
        let futex = |t, op, wait_ns, ret| rec(t, Some(t), Event::Futex { addr: word, op, val: 0, timed: false, wait_ns, ret });
        let waiter = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                futex(1_000, 128, 900, 0),      // FUTEX_WAIT_PRIVATE, woken
                futex(1_100, 128, 5, -11),      // EAGAIN: no sleep
                futex(3_000, 128, 1_000, -110), // timed out
            ],
        );
        let waker = thread(11, None, vec![rec(0, Some(0), start(11, None)), futex(500, 129, 3, 1)]); // FUTEX_WAKE_PRIVATE, woke 1
        let (w, stats) = replay(&trace(vec![waiter, waker]));
        let name = |o: &ObjId| w.objects[*o as usize].name.clone();
        let waiter = &w.program.instrs[..w.groups[1].entry as usize];
        let waker = &w.program.instrs[w.groups[1].entry as usize..];
        assert_eq!(
            waiter.iter().filter(|i| matches!(i, Instr::CondWait { cond, .. } if name(cond) == "t0.wake.t1")).count(),
            1,
            "{waiter:?}"
        );
        assert!(waiter.iter().any(|i| matches!(i, Instr::Sleep(Dist::Fixed(1_000)))), "{waiter:?}");
        assert!(waker.iter().any(|i| matches!(i, Instr::CondSignal(o) if name(o) == "t0.wake.t1")), "{waker:?}");
        assert_eq!((stats.futex_waits, stats.wakeups_matched, stats.waits_slept), (2, 1, 1));
    }

    #[test]
    fn a_condition_wait_waits_for_the_signal_that_ended_it() {
        let cv = 0xc0;
        let m = 0x30;
        let waiter = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(10, Some(10), Event::MutexLock { addr: m, mode: LockMode::Block, wait_ns: 0, ret: 0 }),
                rec(900, Some(20), Event::CondWait { cond: cv, mutex: m, timed: false, wait_ns: 880, ret: 0 }),
                rec(910, Some(30), Event::MutexUnlock { addr: m, hold_ns: Some(10) }),
                // A timed wait nobody ended: slept.
                rec(2000, Some(40), Event::CondWait { cond: cv, mutex: 0x99, timed: true, wait_ns: 1000, ret: 110 }),
            ],
        );
        let signaller = thread(
            11,
            None,
            vec![
                rec(0, Some(0), start(11, None)),
                rec(500, Some(400), Event::CondSignal { cond: cv }),
                rec(600, Some(500), Event::CondSignal { cond: cv }),
            ],
        );
        let (w, stats) = replay(&trace(vec![waiter, signaller]));
        let name = |o: &ObjId| w.objects[*o as usize].name.clone();
        let waiter = &w.program.instrs[..w.groups[1].entry as usize];
        let signaller = &w.program.instrs[w.groups[1].entry as usize..];
        // The mutex is released around the wait, and re-taken after it.
        assert!(matches!(&waiter[1], Instr::Lock(o) if name(o).starts_with("mutex@")), "{waiter:?}");
        assert!(matches!(&waiter[3], Instr::Unlock(o) if name(o).starts_with("mutex@")), "{waiter:?}");
        assert!(matches!(&waiter[5], Instr::CondWait { cond, .. } if name(cond).starts_with("t0.wake.t")), "{waiter:?}");
        assert!(matches!(&waiter[8], Instr::Lock(o) if name(o).starts_with("mutex@")), "{waiter:?}");
        assert!(waiter.iter().any(|i| matches!(i, Instr::Sleep(Dist::Fixed(1000)))), "{waiter:?}");
        // Both signals came while it waited: the first woke it and the second came before it
        // had its mutex back, so it waits for both (two tokens under its own mutex).
        assert!(matches!(&waiter[6], Instr::CondWait { cond, .. } if name(cond).starts_with("t0.wake.t")), "{waiter:?}");
        assert!(matches!(signaller[0], Instr::Compute { dist: Dist::Fixed(400), .. }), "{signaller:?}");
        assert!(matches!(&signaller[1], Instr::CondSignal(o) if name(o).starts_with("t0.wake.t")), "{signaller:?}");
        assert!(matches!(signaller[2], Instr::Compute { dist: Dist::Fixed(100), .. }), "{signaller:?}");
        assert!(matches!(&signaller[3], Instr::CondSignal(o) if name(o).starts_with("t0.wake.t")), "{signaller:?}");
        assert_eq!(signaller.len(), 5, "{signaller:?}");
        assert_eq!((stats.wakeups_matched, stats.wakeups_tied, stats.waits_slept), (1, 2, 1));
    }

    /// pigz's `join_all` (yarn.c): each worker, as it ends, sets its `done` flag and broadcasts
    /// under `threads_lock`; the main thread waits once, wakes after all three have, and joins
    /// them **holding** `threads_lock`. Tied to the last broadcast only, the replay let the main
    /// thread take the lock and join worker 1 before worker 1 had broadcast: a deadlock.
    #[test]
    fn a_wait_that_returns_after_several_broadcasts_waits_for_all_of_them() {
        let (cv, m) = (0xc0, 0x30);
        let lock = |t, wait_ns| rec(t, Some(t), Event::MutexLock { addr: m, mode: LockMode::Block, wait_ns, ret: 0 });
        let unlock = |t| rec(t, Some(t), Event::MutexUnlock { addr: m, hold_ns: None });
        let mut main = vec![rec(0, Some(0), Event::ProcessStart { pid: 10 })];
        for (n, tid) in [11u32, 12, 13].into_iter().enumerate() {
            let n = n as u64;
            main.push(rec(10 + n, Some(10 + n), Event::ThreadCreate { seq: tid, ret: 0, handle: u64::from(tid), child: Some(tid) }));
        }
        main.push(lock(20, 0));
        main.push(rec(2_000, Some(30), Event::CondWait { cond: cv, mutex: m, timed: false, wait_ns: 1_970, ret: 0 }));
        for (n, tid) in [11u32, 12, 13].into_iter().enumerate() {
            let t = 2_010 + n as u64 * 10;
            main.push(rec(t, Some(t), Event::ThreadJoin { tid: Some(tid), ret: 0, handle: u64::from(tid), wait_ns: 0 }));
        }
        main.push(unlock(2_100));
        let mut threads = vec![thread(10, None, main)];
        for (n, tid) in [11u32, 12, 13].into_iter().enumerate() {
            let t = 1_000 + n as u64 * 300;
            threads.push(thread(
                tid,
                Some(10),
                vec![
                    rec(100, Some(0), start(tid, Some(10))),
                    lock(t, 0),
                    rec(t + 50, Some(t + 50), Event::CondBroadcast { cond: cv }),
                    unlock(t + 60),
                    rec(t + 70, Some(t + 70), Event::ThreadExit),
                ],
            ));
        }
        let (w, stats) = replay(&trace(threads));
        let name = |o: &ObjId| w.objects[*o as usize].name.clone();
        let main = &w.program.instrs[..w.groups[1].entry as usize];
        let waits = main.iter().filter(|i| matches!(i, Instr::CondWait { cond, .. } if name(cond).starts_with("t0.wake.t"))).count();
        assert_eq!(waits, 3, "{main:?}");
        for g in 1..4 {
            let end = w.groups.get(g + 1).map_or(w.program.instrs.len(), |n| n.entry as usize);
            let worker = &w.program.instrs[w.groups[g].entry as usize..end];
            assert_eq!(
                worker.iter().filter(|i| matches!(i, Instr::CondSignal(o) if name(o).starts_with("t0.wake.t"))).count(),
                1,
                "{worker:?}"
            );
        }
        assert_eq!((stats.wakeups_matched, stats.wakeups_tied), (1, 3));
    }

    /// The other half of pigz's `join_all`: a worker that finished before the main thread took
    /// the lock is joined without any wait on the condition variable. The main thread's lock
    /// must wait for the worker's last unlock, or it may join, holding the lock, a worker that
    /// still needs it.
    #[test]
    fn a_join_under_a_lock_takes_the_lock_after_the_child_let_it_go() {
        let m = 0x30;
        let main = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(10, Some(10), Event::ThreadCreate { seq: 11, ret: 0, handle: 7, child: Some(11) }),
                rec(500, Some(20), Event::MutexLock { addr: m, mode: LockMode::Block, wait_ns: 0, ret: 0 }),
                rec(510, Some(30), Event::ThreadJoin { tid: Some(11), ret: 0, handle: 7, wait_ns: 5 }),
                rec(520, Some(40), Event::MutexUnlock { addr: m, hold_ns: Some(20) }),
            ],
        );
        let worker = thread(
            11,
            Some(10),
            vec![
                rec(20, Some(0), start(11, Some(10))),
                rec(200, Some(180), Event::MutexLock { addr: m, mode: LockMode::Block, wait_ns: 0, ret: 0 }),
                rec(300, Some(280), Event::MutexUnlock { addr: m, hold_ns: Some(100) }),
                rec(400, Some(380), Event::ThreadExit),
            ],
        );
        let (w, _) = replay(&trace(vec![main, worker]));
        let name = |o: &ObjId| w.objects[*o as usize].name.clone();
        let main = &w.program.instrs[..w.groups[1].entry as usize];
        let worker = &w.program.instrs[w.groups[1].entry as usize..];
        let order = main.iter().position(|i| matches!(i, Instr::CondWait { cond, .. } if name(cond) == "t0.after.t1@0x30"));
        let lock = main.iter().position(|i| matches!(i, Instr::Lock(o) if name(o) == "mutex@0x30"));
        assert!(order.is_some() && order < lock, "{main:?}");
        let unlock = worker.iter().position(|i| matches!(i, Instr::Unlock(o) if name(o) == "mutex@0x30"));
        let lets = worker.iter().position(|i| matches!(i, Instr::CondSignal(o) if name(o) == "t0.after.t1@0x30"));
        assert!(unlock.is_some() && lets == unlock.map(|u| u + 1), "{worker:?}");
    }

    /// A condition wait while holding a second (outer) mutex: the signaller's last unlock of
    /// the outer mutex before the waiter took it comes first; the wait's own mutex gets no edge.
    #[test]
    fn a_wait_holding_an_outer_mutex_takes_it_after_the_signaller_let_it_go() {
        let (outer, inner, cv) = (0x10, 0x20, 0xc0);
        let lock = |t, addr| rec(t, Some(t), Event::MutexLock { addr, mode: LockMode::Block, wait_ns: 0, ret: 0 });
        let unlock = |t, addr| rec(t, Some(t), Event::MutexUnlock { addr, hold_ns: None });
        let waiter = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                lock(300, outer),
                lock(310, inner),
                rec(600, Some(320), Event::CondWait { cond: cv, mutex: inner, timed: false, wait_ns: 280, ret: 0 }),
                unlock(610, inner),
                unlock(620, outer),
            ],
        );
        let signaller = thread(
            11,
            None,
            vec![
                rec(0, Some(0), start(11, None)),
                lock(100, outer),
                unlock(200, outer),
                lock(400, inner),
                rec(410, Some(410), Event::CondSignal { cond: cv }),
                unlock(420, inner),
            ],
        );
        let (w, _) = replay(&trace(vec![waiter, signaller]));
        let names: Vec<String> = w.objects.iter().map(|o| o.name.clone()).collect();
        assert!(names.contains(&"t0.after.t1@0x10".to_string()), "{names:?}");
        assert!(!names.iter().any(|n| n.ends_with("@0x20") && n.contains(".after.")), "{names:?}");
    }

    #[test]
    fn frees_name_their_chunk_and_strangers_are_counted() {
        let t = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(1, None, Event::Malloc { size: 100, ptr: 0xa }),
                rec(2, None, Event::Malloc { size: 200, ptr: 0xb }),
                rec(3, None, Event::Malloc { size: 300, ptr: 0xc }),
                rec(4, None, Event::Free { ptr: 0xa }),
                rec(5, None, Event::Free { ptr: 0xc }),
                rec(6, None, Event::Free { ptr: 0xdead }),
                rec(7, None, Event::Realloc { old: 0xb, size: 400, ptr: 0xd }),
            ],
        );
        let (w, stats) = replay(&trace(vec![t]));
        let mem: Vec<&Instr> = w.program.instrs.iter().filter(|i| matches!(i, Instr::Malloc(_) | Instr::FreeChunk { .. })).collect();
        let free = |seq| Instr::FreeChunk { owner: 0, seq };
        assert_eq!(
            mem,
            vec![
                &Instr::Malloc(Dist::Fixed(100)),
                &Instr::Malloc(Dist::Fixed(200)),
                &Instr::Malloc(Dist::Fixed(300)),
                &free(0),
                &free(2),
                &free(1),
                &Instr::Malloc(Dist::Fixed(400)),
            ]
        );
        assert_eq!(stats.frees_unmatched, 1);
        assert_eq!(stats.frees_remote, 0);
    }

    /// The arena glibc gave each thread, read from its heap chunks' addresses: the main
    /// thread's `brk` heap is arena 0, each other 64 MiB-aligned heap window an arena in the
    /// order the threads first used them, a window whose arena grew into it the same arena.
    /// Neither a mapped chunk (at a page offset of 16, above the mmap threshold), nor a chunk
    /// small enough for the tcache (which hands back chunks of any arena), nor a `realloc` of
    /// another thread's chunk tells a thread's arena.
    #[test]
    fn each_thread_is_on_the_arena_its_chunks_lie_in() {
        let heap = |k: u64| k * HEAP_MAX_SIZE;
        let malloc = |t: u64, size: u64, ptr: u64| rec(t, None, Event::Malloc { size, ptr });
        let main = thread(10, None, vec![rec(0, Some(0), Event::ProcessStart { pid: 10 }), malloc(1, 2048, 0x5555_0000_0040)]);
        // 11 first reallocates a chunk of the main thread's and gets a small one from its
        // tcache (both in the main arena), then maps 1 MiB.
        let realloc = rec(10, None, Event::Realloc { old: 0x5555_0000_0040, size: 4096, ptr: 0x5555_0000_0040 });
        let t11 = thread(
            11,
            Some(10),
            vec![
                rec(10, Some(0), start(11, Some(10))),
                realloc,
                malloc(10, 32, 0x5555_0000_2040),
                malloc(11, 1 << 20, heap(7) + 0x10),
                malloc(12, 2048, heap(9) + 0x8a0),
            ],
        );
        let t12 = thread(
            12,
            Some(10),
            vec![
                rec(5, Some(0), start(12, Some(10))),
                malloc(6, 4096, heap(8) + 0x8a0),
                malloc(40, 1 << 26, heap(3) + 0x10),
                malloc(41, 2048, heap(2) + 0x20),
            ],
        );
        let t13 = thread(13, Some(10), vec![rec(20, Some(0), start(13, Some(10))), malloc(21, 2048, heap(9) + 0x900)]);
        let t14 = thread(14, Some(10), vec![rec(30, Some(0), start(14, Some(10))), malloc(31, 2048, 0x5555_0000_1040)]);
        let t15 = thread(15, Some(10), vec![rec(50, Some(0), start(15, Some(10))), malloc(51, 2048, heap(2) + 0x40)]);
        let t16 = thread(16, Some(10), vec![rec(60, Some(0), start(16, Some(10))), malloc(61, 1 << 20, heap(5) + 0x10)]);
        let t = trace(vec![main, t11, t12, t13, t14, t15, t16]);
        let threads: Vec<&ThreadTrace> = t.processes[0].threads.iter().collect();
        let arenas = traced_arenas(&threads, 10, &HeapParams::default());
        // 12 first (window 8: arena 1), then 11 (window 9, arena 2), 13 shares 11's, 14 is on
        // the main arena, 12's later chunk in window 2 is its arena's next heap, so 15 there
        // shares 12's; 16 allocated only a mapped chunk.
        assert_eq!(arenas, vec![Some(0), Some(2), Some(1), Some(2), Some(0), Some(1), None]);
        let (_, stats) = replay(&t);
        assert_eq!((stats.arenas_reused_traced, stats.arenas_shared_traced), (0, 3), "13, 14 and 15 share");
    }

    /// glibc's thresholds are the process's: a mapped buffer freed by any thread (here by
    /// another than its allocator's) raises them for all, in time order; a second buffer of
    /// the same size then comes from the heap and its free changes nothing.
    #[test]
    fn the_malloc_thresholds_follow_the_process_in_time_order() {
        use crate::workload::heap::MallocPar;
        let mib = 1u64 << 20;
        let a = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(10, None, Event::Malloc { size: mib, ptr: 0xa }),
                rec(40, None, Event::Malloc { size: mib, ptr: 0xc }),
                rec(50, None, Event::Free { ptr: 0xc }),
            ],
        );
        let b = thread(
            11,
            None,
            vec![
                rec(1, Some(0), start(11, None)),
                rec(20, None, Event::Malloc { size: 64 << 10, ptr: 0xb }),
                rec(30, None, Event::Free { ptr: 0xa }),
            ],
        );
        let t = trace(vec![a, b]);
        let threads: Vec<&ThreadTrace> = t.processes[0].threads.iter().collect();
        let raised = MallocPar { mmap_threshold: mib + PAGE, trim_threshold: 2 * (mib + PAGE), dynamic: true };
        let h = malloc_history(&threads, &HeapParams::default(), (10, &[Some(0), None]), 2);
        assert_eq!(h.arenas.par, raised);
        assert_eq!(h.frees, BTreeMap::from([((1, 2), (0, 0)), ((0, 3), (0, 1))]), "thread 1's record 2 frees thread 0's first allocation");
        let unmaps = |h: &MallocHistory, at| h.ops.get(&at).is_some_and(|ops| ops.iter().any(|o| matches!(o, MmOp::Munmap(..))));
        assert!(unmaps(&h, (1, 2)), "thread 0's mapping unmapped by thread 1: {:?}", h.ops);
        assert!(!unmaps(&h, (0, 3)), "the second buffer, below the raised threshold, came from the heap: {:?}", h.ops);
        // Set thresholds stay put: the second buffer is mapped too.
        let fixed = HeapParams { dynamic: false, ..HeapParams::default() };
        let h = malloc_history(&threads, &fixed, (10, &[Some(0), None]), 2);
        assert!(unmaps(&h, (0, 3)), "{:?}", h.ops);
        // The replay: thread 1 frees thread 0's buffer (the simulation unmaps it and raises
        // the thresholds); thread 0 frees its own second one.
        let (w, stats) = replay(&t);
        assert!(w.program.instrs.contains(&Instr::FreeChunk { owner: 0, seq: 0 }), "{:?}", w.program.instrs);
        assert!(w.program.instrs.contains(&Instr::FreeChunk { owner: 0, seq: 1 }), "{:?}", w.program.instrs);
        assert_eq!((stats.frees_unmatched, stats.frees_remote), (0, 1));
    }

    #[test]
    fn spin_locks_and_barriers_map_to_their_primitives() {
        let b = 0xb0;
        let mut threads = Vec::new();
        for tid in [10u32, 11] {
            threads.push(thread(
                tid,
                None,
                vec![
                    rec(0, Some(0), if tid == 10 { Event::ProcessStart { pid: 10 } } else { start(11, None) }),
                    rec(5, Some(5), Event::BarrierInit { addr: b, count: 2, ret: 0 }),
                    rec(100, Some(50), Event::SpinLock { addr: 0x5, mode: LockMode::Block, wait_ns: 40, ret: 0 }),
                    rec(120, Some(70), Event::SpinUnlock { addr: 0x5, hold_ns: Some(20) }),
                    rec(121, Some(70), Event::SpinUnlock { addr: 0x5, hold_ns: None }),
                    rec(300, Some(80), Event::BarrierWait { addr: b, wait_ns: 100, ret: 0 }),
                ],
            ));
        }
        let blocking =
            from_trace("app", &trace(threads.clone()), &Options { spin_then_block: Some(2000), ..Options::default() }).expect("replays").0;
        let lock = blocking.objects.iter().find(|o| o.name.starts_with("spinlock@")).expect("the lock");
        assert_eq!((lock.kind, lock.spin), (ObjKind::Mutex, Some(2000)));
        assert!(blocking.program.instrs.iter().any(|i| matches!(i, Instr::Lock(_))));
        assert!(!blocking.program.instrs.iter().any(|i| matches!(i, Instr::SpinLock(_) | Instr::SpinUnlock(_))));
        let (w, stats) = replay(&trace(threads));
        let barrier = w.objects.iter().find(|o| o.kind == ObjKind::Barrier).expect("a barrier");
        assert_eq!(barrier.parties, Some(2));
        let first = &w.program.instrs[..w.groups[1].entry as usize];
        // 5 ns before the init, 5 before the spin lock's call: its 40 ns of spinning are not
        // compute (the simulator spins again).
        assert!(matches!(first[0], Instr::Compute { dist: Dist::Fixed(10), .. }), "{first:?}");
        assert!(matches!(first[1], Instr::SpinLock(_)), "{first:?}");
        assert_eq!(first.iter().filter(|i| matches!(i, Instr::SpinUnlock(_))).count(), 1);
        assert_eq!(stats.unlocks_unmatched, 2, "each thread's second unlock");
    }

    /// A child whose THREAD_CREATE names no child (the tracer once recorded a freed `seq`)
    /// starts at once instead of waiting forever for a start token nobody sends.
    #[test]
    fn a_child_nobody_is_seen_creating_starts_at_once() {
        let mut t = fork_join();
        if let Event::ThreadCreate { child, .. } = &mut t.processes[0].threads[0].records[1].event {
            *child = None;
        }
        let (w, _) = replay(&t);
        let name = |o: &ObjId| w.objects[*o as usize].name.clone();
        let worker = &w.program.instrs[w.groups[1].entry as usize..];
        assert!(!worker.iter().any(|i| matches!(i, Instr::CondWait { cond, .. } if name(cond) == "t1.start")), "{worker:?}");
    }

    #[test]
    fn choosing_a_process() {
        let t = fork_join();
        assert_eq!(choose_process(&t, None).map(|p| p.pid), Ok(10));
        assert!(choose_process(&t, Some(99)).unwrap_err().contains("no process 99"));
    }

    /// A native run of `cpus` CPUs to put a replayed workload in.
    fn native_config(cpus: u32) -> crate::scenario::RunConfig {
        let text = format!(
            "[experiment]\nworkloads = [\"w\"]\nscenarios = [\"native\"]\nvcpus = [{cpus}]\n[workloads.w]\nprogram = [{{ compute = \"1ms\" }}]\n"
        );
        let plan = crate::api::Plan::new(&text, "test.toml", &[]).expect("spec");
        let cell = plan.cells()[0].clone();
        plan.run_config(&cell, crate::scenario::Layout::Native { instances: 1 })
    }

    /// A created thread starts as a new task (`wake_up_new_task`, `START_DEBIT`): on one CPU
    /// the worker main creates after 5 ms of compute queues behind main, which computes on to
    /// its join and is never preempted; a woken sleeper's credit (placed half a latency behind
    /// `min_vruntime`, 3 ms ahead of main by more than the wake-up granularity) would have
    /// preempted it at once.
    #[test]
    fn a_created_thread_queues_behind_its_creator() {
        let mut cfg = native_config(1);
        // main computes 5 ms, creates the worker, computes 1 ms and joins it.
        let main = thread(
            10,
            None,
            vec![
                rec(0, Some(0), Event::ProcessStart { pid: 10 }),
                rec(5_000_000, Some(5_000_000), Event::ThreadCreate { seq: 11, ret: 0, handle: 7, child: Some(11) }),
                rec(7_000_000, Some(6_000_000), Event::ThreadJoin { tid: Some(11), ret: 0, handle: 7, wait_ns: 1_000_000 }),
                rec(7_000_100, Some(6_000_100), Event::ThreadExit),
            ],
        );
        let worker =
            thread(11, Some(10), vec![rec(5_000_100, Some(0), start(11, Some(10))), rec(7_000_000, Some(1_000_000), Event::ThreadExit)]);
        let (w, _) = replay(&trace(vec![main, worker]));
        cfg.workload = std::sync::Arc::new(w);
        let rec = crate::scenario::simulate_run(&cfg).expect("runs");
        let inst = rec.measured().next().expect("the instance");
        let main = &inst.thread_stats[0];
        assert_eq!(main.counters.nivcsw, 0, "main was preempted: {:?}", inst.thread_stats);
        assert!(inst.thread_stats[1].counters.compute_ns > 0);
    }
}
