//! The compiled form of a workload: objects and a flat instruction list.

use std::fmt;

use super::dist::Dist;

/// Index of a synchronisation object within its workload.
pub type ObjId = u32;

/// Kinds of synchronisation objects a workload can declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjKind {
    /// A blocking mutex (futex-based, like a default `pthread_mutex_t`).
    Mutex,
    /// A user-level test-and-set spinlock (`pthread_spin_lock`, custom spin locks).
    SpinLock,
    /// A kernel ticket spinlock (taken inside system calls; spins with PAUSE at CPL 0).
    KSpinLock,
    /// A blocking barrier (futex-based, like `pthread_barrier_t`).
    Barrier,
    /// A user-level spin barrier (threads busy-wait for the last arrival).
    SpinBarrier,
    /// A condition variable used with a mutex; see `docs/workloads.md` for its semantics.
    CondVar,
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
        }
    }

    /// Parses a kind name.
    pub fn parse(s: &str) -> Option<ObjKind> {
        [ObjKind::Mutex, ObjKind::SpinLock, ObjKind::KSpinLock, ObjKind::Barrier, ObjKind::SpinBarrier, ObjKind::CondVar]
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
    /// Barrier parties (None = every thread of the instance).
    pub parties: Option<u32>,
}

/// One compiled instruction.
#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    /// Compute for a sampled duration.
    Compute(Dist),
    /// Sleep (block on a timer) for a sampled duration.
    Sleep(Dist),
    /// Acquire a mutex (block while it is taken).
    Lock(ObjId),
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
        count: u64,
        /// Index of the matching `LoopEnd`.
        end: u32,
    },
    /// End of a loop body; `start` is the index of its `LoopStart`.
    LoopEnd {
        /// Index of the matching `LoopStart`.
        start: u32,
    },
    /// Run the following block (up to `end`, exclusive) only on thread `thread`.
    OnlyThread {
        /// Thread index that runs the block.
        thread: u32,
        /// Index of the first instruction after the block.
        end: u32,
    },
    /// `malloc` of this many bytes from the thread's arena (see [`super::heap`]).
    Malloc(u64),
    /// `free` of the thread's this-many most recent allocations.
    Free(u64),
    /// A memory-management system call that removes or downgrades mappings of this many
    /// pages (a TLB shootdown to the other CPUs running the process).
    MmUnmap {
        /// Which call.
        call: MmCall,
        /// Pages affected.
        pages: u64,
    },
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
    /// The program every thread runs.
    pub program: Program,
    /// Whether any operation draws random durations.
    pub stochastic: bool,
    /// Allocator parameters of its threads' arenas.
    pub heap: super::heap::HeapParams,
}

impl Workload {
    /// Checks what depends on the thread count of a run; returns (field, message).
    pub fn check_threads(&self, threads: u32) -> Result<(), (String, String)> {
        for o in &self.objects {
            if let Some(p) = o.parties {
                if p > threads {
                    return Err((
                        format!("objects.{}.parties", o.name),
                        format!("{p} parties but the run has {threads} threads (the barrier would never open)"),
                    ));
                }
            }
        }
        for i in &self.program.instrs {
            if let Instr::OnlyThread { thread, .. } = i {
                if *thread >= threads {
                    return Err((
                        "program".into(),
                        format!("a block runs on thread {thread} but the run has {threads} threads (0..{})", threads - 1),
                    ));
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
