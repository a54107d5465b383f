//! Wait chains: who made a busy-waiting thread wait, and in what state that culprit was.
//!
//! Every interval a workload thread spends busy-waiting on a core (user spin locks and spin
//! barriers, kernel ticket locks, spin-then-block mutexes in their spin phase, TLB-shootdown
//! and membarrier acknowledgements) is charged, when the ledger closes it, to the entities it
//! waited for:
//!
//! | waiting on | culprits |
//! | --- | --- |
//! | a spin lock, a spinning mutex | the holder |
//! | a kernel ticket lock | the holder; with none, the waiter whose ticket is served (lock-waiter preemption) |
//! | a barrier | the threads of the instance that have not arrived |
//! | a remote call (TLB shootdown, membarrier) | the target CPUs that have not acknowledged |
//! | a process's `mmap_sem` (a writer's optimistic spinning) | the writer holding it, or the readers |
//!
//! Each culprit is classified: `running` (on a core: the wait is plain contention or
//! imbalance), `vcpu_preempted` (its vCPU is runnable but descheduled by the host: the double
//! scheduling of TPDS §2.3–§2.5), `vcpu_halted` (a target vCPU asleep in HLT, waiting for the
//! IPI to wake it), `thread_preempted` (descheduled by its own kernel) or `blocked`. The
//! interval is split evenly between the culprits that are not running when there are any (they
//! are why the wait lasts), else between all. A wait with no culprit (a lock released a moment
//! ago, a holder that exited) is charged to `none`. So the rows of a run sum exactly to its
//! threads' busy-wait time, which the tests check.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::kernel::futex::WordKey;
use crate::kernel::spinlock::{KLockRef, MmLock};
use crate::kernel::sync::Obj;
use crate::kernel::thread::{Act, BlockOn, SpinOn};
use crate::kernel::{KernelKind, TaskState, Then, ThreadId};
use crate::workload::program::ObjId;
use crate::world::World;

/// Who waits or is waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Who {
    /// A vCPU (VM index, vCPU index): the thread current on it, or the CPU itself.
    Vcpu(u32, u32),
    /// A thread of an instance that is not current on a vCPU (native threads, or guest
    /// threads waiting in a run queue or blocked).
    Thread(u32, u32),
    /// A native CPU (instance, CPU) as a remote-call target.
    Cpu(u32, u32),
    /// The hypervisor (a Shoot4U hypercall in progress).
    Hypervisor,
    /// Nobody (the wait ends as soon as the waiter looks again).
    Nobody,
}

/// What the waiter waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum On {
    /// A synchronisation object of the instance.
    Obj(u32, ObjId),
    /// TLB-shootdown acknowledgements.
    TlbShootdown,
    /// Membarrier acknowledgements.
    Membarrier,
    /// A page-allocator lock of kernel `.0` ([`crate::kernel::mm`]).
    KernelLock(u32, MmLock),
    /// The kernel lock behind a word of a synchronisation object ([`crate::kernel::futex`]):
    /// a futex hash bucket's, a socket's or its wait queue's.
    WordLock(WordKey),
    /// The `mmap_sem` of instance `.0` ([`crate::kernel::rwsem`]).
    MmapSem(u32),
}

/// The culprit's state while the waiter waited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum State {
    Running,
    VcpuPreempted,
    VcpuHalted,
    ThreadPreempted,
    Blocked,
    None,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::VcpuPreempted => "vcpu_preempted",
            State::VcpuHalted => "vcpu_halted",
            State::ThreadPreempted => "thread_preempted",
            State::Blocked => "blocked",
            State::None => "none",
        }
    }
}

type Key = (Who, On, Who, State);

/// Slots of the direct-mapped cache in front of the index (a power of two).
const CACHE: usize = 256;

/// The wait-chain table of a run: ns per (waiter, on, culprit, state).
///
/// Charging happens on every closed busy-wait interval, so recent keys are found through a
/// small direct-mapped cache before the ordered index.
#[derive(Debug)]
pub(crate) struct WaitChains {
    rows: Vec<(Key, u64)>,
    index: BTreeMap<Key, u32>,
    cache: Vec<Option<(Key, u32)>>,
    /// Reused buffer of the culprits of the wait being charged.
    scratch: Vec<(Who, State)>,
}

impl Default for WaitChains {
    fn default() -> Self {
        WaitChains { rows: Vec::new(), index: BTreeMap::new(), cache: vec![None; CACHE], scratch: Vec::new() }
    }
}

impl Who {
    fn code(self) -> u64 {
        match self {
            Who::Vcpu(a, b) => (1 << 60) | (u64::from(a) << 24) | u64::from(b),
            Who::Thread(a, b) => (2 << 60) | (u64::from(a) << 24) | u64::from(b),
            Who::Cpu(a, b) => (3 << 60) | (u64::from(a) << 24) | u64::from(b),
            Who::Hypervisor => 4 << 60,
            Who::Nobody => 5 << 60,
        }
    }
}

impl On {
    fn code(self) -> u64 {
        match self {
            On::Obj(i, o) => (u64::from(i) << 32) | u64::from(o),
            On::TlbShootdown => 1 << 62,
            On::Membarrier => 2 << 62,
            On::KernelLock(k, m) => (3 << 62) | (u64::from(k) << 32) | m.index() as u64,
            On::WordLock(f) => (3 << 62) | (1 << 61) | (u64::from(f.inst) << 40) | (u64::from(f.obj) << 16) | u64::from(f.word),
            On::MmapSem(i) => (3 << 62) | (1 << 60) | u64::from(i),
        }
    }
}

impl WaitChains {
    fn add(&mut self, key: Key, ns: u64) {
        let (w, o, c, s) = key;
        let h = (w.code().wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ o.code().wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ c.code().wrapping_mul(0x1656_67B1_9E37_79F9)
            ^ s as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (h >> 56) as usize % CACHE;
        if let Some((k, i)) = self.cache[slot] {
            if k == key {
                self.rows[i as usize].1 += ns;
                return;
            }
        }
        let rows = &mut self.rows;
        let i = *self.index.entry(key).or_insert_with(|| {
            rows.push((key, 0));
            rows.len() as u32 - 1
        });
        self.rows[i as usize].1 += ns;
        self.cache[slot] = Some((key, i));
    }
}

/// One row of `run.wait_chains`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WaitChainRow {
    /// The busy-waiting vCPU (`vm0/vcpu1`) or native thread (`native0/t2`).
    pub waiter: String,
    /// What it waited on: `spin_barrier 'b'`, `kspinlock 'k'`, `tlb_shootdown`, ...
    pub on: String,
    /// Who it waited for: a vCPU (`vm0/vcpu3`), a thread not current on a vCPU (`vm0/t5`,
    /// `native0/t5`), a native CPU (`native0/cpu2`), `host` (the hypervisor, in a Shoot4U
    /// hypercall) or `none`.
    pub culprit: String,
    /// The culprit's state: `running`, `vcpu_preempted`, `vcpu_halted`, `thread_preempted`,
    /// `blocked` or `none`.
    pub state: &'static str,
    /// Busy-wait time charged (ns).
    pub ns: u64,
}

impl World<'_> {
    /// Charges `elapsed` ns of thread `t`'s busy-wait to whoever it waits for.
    pub(crate) fn charge_wait(&mut self, t: ThreadId, elapsed: u64) {
        let Act::Spin(on) = self.threads[t as usize].act else { return };
        let mut culprits = std::mem::take(&mut self.waits.scratch);
        culprits.clear();
        let what = self.culprits(t, on, &mut culprits);
        let waiter = self.where_thread(t).0;
        let stalled = culprits.iter().filter(|c| c.1 != State::Running).count() as u64;
        let (n, only_stalled) = if stalled > 0 { (stalled, true) } else { (culprits.len() as u64, false) };
        match (elapsed.checked_div(n), elapsed.checked_rem(n)) {
            (Some(each), Some(extra)) => {
                let waiting = culprits.iter().filter(|c| !only_stalled || c.1 != State::Running);
                for (i, &(who, state)) in waiting.enumerate() {
                    let share = each + u64::from((i as u64) < extra);
                    if share > 0 {
                        self.waits.add((waiter, what, who, state), share);
                    }
                }
            }
            _ => self.waits.add((waiter, what, Who::Nobody, State::None), elapsed),
        }
        self.waits.scratch = culprits;
    }

    /// The culprits of thread `t`'s wait `on` (into `out`) and what it waits on.
    fn culprits(&self, t: ThreadId, on: SpinOn, out: &mut Vec<(Who, State)>) -> On {
        let inst = self.threads[t as usize].inst;
        let objs = &self.insts[inst as usize].objs;
        match on {
            SpinOn::ULock(o) | SpinOn::Mutex(o) => {
                if let Obj::SpinLock { holder: Some(h), .. } | Obj::Mutex { holder: Some(h), .. } = objs[o as usize] {
                    out.push(self.where_thread(h));
                }
                On::Obj(inst, o)
            }
            SpinOn::KLock(KLockRef::Obj(o)) => {
                if let Obj::KSpin(l, _) = &objs[o as usize] {
                    if let Some(h) = l.culprit(self.klock_discipline(t, KLockRef::Obj(o))) {
                        out.push(self.where_thread(h));
                    }
                }
                On::Obj(inst, o)
            }
            SpinOn::KLock(KLockRef::Mm(m)) => {
                let k = self.insts[inst as usize].kernel;
                if let Some(h) = self.kernels[k as usize].mm.culprit(m, self.lock_discipline(k)) {
                    out.push(self.where_thread(h));
                }
                On::KernelLock(k, m)
            }
            SpinOn::KLock(KLockRef::Word(key)) => {
                let k = self.insts[inst as usize].kernel;
                if let Some(h) = self.kernels[k as usize].word_locks.culprit(key, self.lock_discipline(k)) {
                    out.push(self.where_thread(h));
                }
                On::WordLock(key)
            }
            SpinOn::Barrier(o) => {
                let Obj::Barrier { gen, .. } = objs[o as usize] else { unreachable!("a barrier wait") };
                for &u in &self.insts[inst as usize].threads {
                    let th = &self.threads[u as usize];
                    // A spinner of an earlier generation has not noticed the opening yet: it
                    // has not arrived at this one.
                    let arrived = match th.act {
                        Act::Done => true,
                        Act::Spin(SpinOn::Barrier(_)) => th.bgen == gen,
                        _ => matches!(th.futex_wait_on(), Some(BlockOn::Barrier(_))),
                    };
                    if u != t && !arrived {
                        out.push(self.where_thread(u));
                    }
                }
                On::Obj(inst, o)
            }
            SpinOn::Rwsem => {
                for h in self.insts[inst as usize].mmap_sem.holders() {
                    out.push(self.where_thread(h));
                }
                On::MmapSem(inst)
            }
            SpinOn::RemoteCall(sd) => {
                let k = self.insts[inst as usize].kernel;
                // Targets that have not run the handler yet, or are running it.
                for (cpu, kc) in self.kernels[k as usize].cpus.iter().enumerate() {
                    if kc.csd.iter().any(|c| c.0 == sd) || kc.kwork.iter().any(|w| matches!(w.then, Some(Then::CallAck(s, _)) if s == sd)) {
                        out.push(self.where_cpu(inst, k, cpu as u32));
                    }
                }
                if out.is_empty() && self.remote_calls[sd as usize].pending > 0 {
                    // A Shoot4U hypercall: the hypervisor flushes for every target itself.
                    out.push((Who::Hypervisor, State::Running));
                }
                match self.remote_calls[sd as usize].kind {
                    crate::kernel::tlb::CallKind::TlbFlush => On::TlbShootdown,
                    crate::kernel::tlb::CallKind::Membarrier => On::Membarrier,
                }
            }
        }
    }

    /// Where thread `u` is and in what state: its vCPU when it is current on one.
    fn where_thread(&self, u: ThreadId) -> (Who, State) {
        let th = &self.threads[u as usize];
        let task = &self.tasks[th.task as usize];
        let me = Who::Thread(th.inst, th.idx);
        match task.state {
            TaskState::Running => match self.kernels[task.kernel as usize].kind {
                KernelKind::Guest { vm } => {
                    let v = self.vms[vm as usize].vcpus[task.cpu as usize];
                    let state = if self.vcpu_core(v).is_some() { State::Running } else { State::VcpuPreempted };
                    (Who::Vcpu(vm, task.cpu), state)
                }
                KernelKind::Host => (me, State::Running),
            },
            TaskState::Queued => (me, State::ThreadPreempted),
            TaskState::Blocked | TaskState::Done => (me, State::Blocked),
        }
    }

    /// Remote-call target CPU `cpu` of kernel `k` (instance `inst`) and its state.
    fn where_cpu(&self, inst: u32, k: u32, cpu: u32) -> (Who, State) {
        match self.kernels[k as usize].kind {
            KernelKind::Guest { vm } => {
                let v = self.vms[vm as usize].vcpus[cpu as usize];
                let state = match self.tasks[self.vcpus[v as usize].task as usize].state {
                    TaskState::Running => State::Running,
                    TaskState::Queued => State::VcpuPreempted,
                    TaskState::Blocked | TaskState::Done => State::VcpuHalted,
                };
                (Who::Vcpu(vm, cpu), state)
            }
            KernelKind::Host => (Who::Cpu(inst, cpu), State::Running),
        }
    }

    /// The wait-chain rows of the run, largest first (ties in key order).
    pub(crate) fn wait_chain_rows(&self) -> Vec<WaitChainRow> {
        let who = |w: Who| match w {
            Who::Vcpu(vm, v) => format!("vm{vm}/vcpu{v}"),
            Who::Thread(i, t) => format!("{}/t{t}", self.insts[i as usize].name),
            Who::Cpu(i, c) => format!("{}/cpu{c}", self.insts[i as usize].name),
            Who::Hypervisor => "host".to_string(),
            Who::Nobody => "none".to_string(),
        };
        let on = |o: On| match o {
            On::Obj(i, o) => {
                let d = &self.insts[i as usize].wl.objects[o as usize];
                let spin_barrier = matches!(self.insts[i as usize].objs[o as usize], Obj::Barrier { spin: Some(u64::MAX), .. });
                let kind = if spin_barrier { "spin_barrier" } else { d.kind.name() };
                format!("{kind} '{}'", d.name)
            }
            On::TlbShootdown => "tlb_shootdown".to_string(),
            On::Membarrier => "membarrier".to_string(),
            On::KernelLock(_, m) => format!("kspinlock '{}'", m.name()),
            On::WordLock(f) => self.word_lock_name(f),
            On::MmapSem(i) => format!("rwsem 'mmap_sem' of {}", self.insts[i as usize].name),
        };
        // In key order, then largest first (a stable sort keeps key order among ties).
        let mut rows: Vec<WaitChainRow> = self
            .waits
            .index
            .iter()
            .map(|(&(w, o, c, s), &i)| WaitChainRow {
                waiter: who(w),
                on: on(o),
                culprit: who(c),
                state: s.name(),
                ns: self.waits.rows[i as usize].1,
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.ns));
        rows
    }
}
