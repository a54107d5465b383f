//! Kernel paths: what a thread does inside its kernel on behalf of a system call or a fault,
//! step by step, where the steps take kernel spinlocks.
//!
//! A path is a queue of [`KStep`]s on the thread ([`super::thread::Thread::kpath`]), run
//! before the thread's next operation: kernel work (queued on its CPU and charged to the
//! thread's owner in the kernel layer, under the step's cause), taking a kernel spinlock
//! (spinning at CPL 0 while it is taken, [`super::spinlock`]), releasing it, waking a
//! blocked thread (`try_to_wake_up`, with the IPI it may send), and, last, going to sleep
//! (`schedule()` of a futex wait). A lock, unlock, wake-up or sleep waits for the work queued
//! before it, so each happens at the instant the kernel reaches it. The memory paths
//! ([`super::mm`]: page faults, the pages a zap frees, each under the process's `mmap_sem`,
//! [`super::rwsem`]) and the futex paths ([`super::futex`]) are written in these steps.

use crate::account::{Attr, Cause, Layer};
use crate::world::World;

use super::mm::SWAP_CLUSTER_MAX;
use super::rwsem::{FaultLock, Mode};
use super::spinlock::{KLockRef, MmLock};
use super::thread::Flow;
use super::{KernelId, ThreadId, HOST};

/// Page-granular work on more pages than this (1 GiB of 4 KiB pages) is modelled in bulk
/// beyond them, [`BULK_PIECE`] pages at a time: the per-page costs times the pages, the same
/// CPU time under the same cause, without the per-pagevec (per-batch) spinlock round trips
/// whose contention the simulator models for ordinary sizes. Page faults keep taking the read
/// lock of `mmap_sem` (or the VMA's) for each piece, so a writer gets in between pieces. A
/// range of at most this many pages (every ordinary allocation, mapping or zap) is modelled
/// page batch by page batch as before; a larger one no longer costs simulator events in
/// proportion to its pages (a traced 1 TiB `malloc` is 2^28 pages).
pub const BULK_ABOVE: u64 = 1 << 18;
/// Pages of one bulk piece (256 MiB of 4 KiB pages).
pub const BULK_PIECE: u64 = 1 << 16;

/// One step of a kernel path still to run on behalf of a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KStep {
    /// Anonymous page faults still to take (allocate, zero, map, add to the LRU), each
    /// pagevec's worth under the process's `mmap_sem` held for reading (`__do_page_fault`), or
    /// under its VMA's lock where the kernel has per-VMA locks.
    Faults(u64, FaultLock),
    /// Page faults of one pagevec's worth at most, the lock held; then its release and the
    /// rest.
    FaultChunk(u64, FaultLock),
    /// `down_read` / `down_write` of the process's `mmap_sem` ([`super::rwsem`]).
    Down(Mode),
    /// `up_read` / `up_write` of the process's `mmap_sem`.
    Up,
    /// A fault's or `madvise`'s read lock ([`World::mm_read_lock`]).
    ReadLock(FaultLock),
    /// Release of that read lock.
    ReadUnlock,
    /// `vma_start_write` of VMA (arena) `.0` by the `mmap_sem` writer.
    VmaWrite(u32),
    /// The zap of `munmap`, `madvise(MADV_DONTNEED)` or `mprotect`: the system call's work and
    /// the TLB shootdown, then (`release`) the pages go.
    Zap {
        /// Pages of the range.
        pages: u64,
        /// Pages freed after the flush: those of the range that were resident (none for
        /// `mprotect`).
        release: u64,
    },
    /// A zap's pages (after its TLB flush): `left` of its `total` still to take off the LRU;
    /// then all `total` are freed.
    Release {
        /// Pages not yet off the LRU.
        left: u64,
        /// Pages of the zap.
        total: u64,
    },
    /// Pages still to put on the CPU's free list.
    Free(u64),
    /// Take the lock (spin while it is taken).
    Lock(KLockRef),
    /// Kernel work (ns) with its cause.
    Work(u64, Cause),
    /// Release the lock.
    Unlock(KLockRef),
    /// Wake the thread (`try_to_wake_up` of a futex waiter).
    Wake(ThreadId),
    /// Go to sleep on the futex wait under way ([`super::thread::Thread::blocking`]), unless a
    /// wake-up came first.
    Block,
    /// The thread exits (after the wake-ups of the queues its exit closed).
    Exit,
}

impl World<'_> {
    /// Runs thread `t`'s pending kernel-path steps on (`k`, `cpu`): Stop when it must wait
    /// (for its queued kernel work to run before a lock operation, a wake-up or its sleep;
    /// spinning on a lock; asleep).
    pub(crate) fn run_kpath(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Flow {
        let owner = self.leaf_owner(k, cpu, t);
        loop {
            let Some(&step) = self.threads[t as usize].kpath.front() else {
                // A futex wait's own path runs after everything queued before it (the unlock
                // of `pthread_cond_wait`, a lane's unlock): it is pushed once the rest is done.
                if self.futex_wait_path(t) {
                    continue;
                }
                if self.threads[t as usize].kdepth == 0 {
                    // The system call returns: a reschedule its wake-ups asked for happens
                    // now (`exit_to_user_mode_loop`), before the thread's next operation.
                    self.preempt_enable(t);
                    if self.kernels[k as usize].cpus[cpu as usize].need_resched {
                        return Flow::Stop;
                    }
                }
                return Flow::Continue;
            };
            let ordered = matches!(
                step,
                KStep::Lock(_)
                    | KStep::Unlock(_)
                    | KStep::Wake(_)
                    | KStep::Block
                    | KStep::Exit
                    | KStep::Down(_)
                    | KStep::Up
                    | KStep::ReadLock(_)
                    | KStep::ReadUnlock
                    | KStep::VmaWrite(_)
            );
            if ordered && !self.kernels[k as usize].cpus[cpu as usize].kwork.is_empty() {
                // The work queued before it runs first.
                return Flow::Stop;
            }
            match step {
                KStep::Lock(r) => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Flow::Stop = self.op_kspin_lock(t, r) {
                        return Flow::Stop;
                    }
                }
                KStep::Unlock(r) => {
                    self.threads[t as usize].kpath.pop_front();
                    self.op_kspin_unlock(t, r);
                }
                KStep::Work(ns, cause) => {
                    self.threads[t as usize].kpath.pop_front();
                    self.push_work(k, cpu, Attr { owner, layer: Layer::Kernel, cause }, ns);
                }
                KStep::Wake(w) => {
                    self.threads[t as usize].kpath.pop_front();
                    self.wake_thread(w, (k, cpu));
                    if k != HOST && !self.vcpu_in_guest(self.vcpu_of(k, cpu)) {
                        // The wake-up's IPI exited to the host: the path goes on after re-entry.
                        return Flow::Stop;
                    }
                }
                KStep::Block => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Some((on, _)) = self.threads[t as usize].blocking.take() {
                        self.block_thread(k, cpu, t, on);
                        return Flow::Stop;
                    }
                    // Woken while on its way to sleep: futex_wait returns at once.
                }
                KStep::Exit => {
                    self.threads[t as usize].kpath.pop_front();
                    self.thread_finish(k, cpu, t);
                    return Flow::Stop;
                }
                KStep::Faults(n, vma) => {
                    self.threads[t as usize].kpath.pop_front();
                    if n > BULK_ABOVE {
                        // A huge range: a piece of it in bulk, under the read lock (see
                        // BULK_ABOVE), the rest after its release.
                        let c = &self.costs;
                        let ns = BULK_PIECE * (c.page_fault + c.zone_page + c.lru_page);
                        let bulk = [KStep::ReadLock(vma), KStep::Work(ns, Cause::MemoryOp), KStep::ReadUnlock];
                        self.kpath_push_front(t, [bulk.as_slice(), &[KStep::Faults(n - BULK_PIECE, vma)]].concat());
                    } else if n > 0 {
                        self.kpath_push_front(t, vec![KStep::ReadLock(vma), KStep::FaultChunk(n, vma)]);
                    }
                }
                KStep::FaultChunk(n, vma) => {
                    let attr = Attr { owner, layer: Layer::Kernel, cause: Cause::MemoryOp };
                    self.expand_faults(k, cpu, t, n, vma, attr);
                }
                KStep::ReadLock(vma) => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Flow::Stop = self.mm_read_lock(k, cpu, t, vma) {
                        return Flow::Stop;
                    }
                }
                KStep::ReadUnlock => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Flow::Stop = self.mm_read_unlock(k, cpu, t) {
                        return Flow::Stop;
                    }
                }
                KStep::VmaWrite(a) => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Flow::Stop = self.vma_start_write(k, cpu, t, a) {
                        return Flow::Stop;
                    }
                }
                KStep::Down(mode) => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Flow::Stop = self.rwsem_down(k, cpu, t, mode) {
                        return Flow::Stop;
                    }
                }
                KStep::Up => {
                    self.threads[t as usize].kpath.pop_front();
                    if let Flow::Stop = self.rwsem_up(k, cpu, t) {
                        return Flow::Stop;
                    }
                }
                KStep::Zap { pages, release } => {
                    self.threads[t as usize].kpath.pop_front();
                    self.push_work(k, cpu, Attr { owner, layer: Layer::Kernel, cause: Cause::MemoryOp }, self.costs.syscall_mm);
                    if release > 0 {
                        // tlb_finish_mmu: the flush, then the pages go (release_pages).
                        self.kpath_push_front(t, vec![KStep::Release { left: release, total: release }]);
                    }
                    if let Flow::Stop = self.tlb_shootdown(k, cpu, t, pages) {
                        return Flow::Stop;
                    }
                }
                KStep::Release { left, total } if left > BULK_ABOVE => {
                    // A huge zap: a piece of its pages off the LRU, and freed, in bulk.
                    self.threads[t as usize].kpath.pop_front();
                    let ns = BULK_PIECE * (self.costs.lru_page + self.costs.zone_page);
                    let (left, total) = (left - BULK_PIECE, total - BULK_PIECE);
                    self.kpath_push_front(t, vec![KStep::Work(ns, Cause::MemoryOp), KStep::Release { left, total }]);
                }
                KStep::Release { left, total } => {
                    self.threads[t as usize].kpath.pop_front();
                    let lru = KLockRef::Mm(MmLock::Lru(self.mm_node(k, cpu)));
                    let now = left.min(SWAP_CLUSTER_MAX);
                    let next = if left > now { KStep::Release { left: left - now, total } } else { KStep::Free(total) };
                    let front = if now == 0 {
                        vec![next]
                    } else {
                        vec![KStep::Lock(lru), KStep::Work(now * self.costs.lru_page, Cause::MemoryOp), KStep::Unlock(lru), next]
                    };
                    self.kpath_push_front(t, front);
                }
                KStep::Free(n) => self.expand_free(k, cpu, t, n),
            }
        }
    }

    /// Whether thread task `t` is inside a futex system call, which its kernel does not preempt
    /// (no `CONFIG_PREEMPT`: a reschedule asked for meanwhile happens at the call's return).
    pub(crate) fn in_futex_call(&self, t: ThreadId) -> bool {
        let th = &self.threads[t as usize];
        th.blocking.is_some() || th.kpath.iter().any(|s| matches!(s, KStep::Wake(_) | KStep::Block | KStep::Exit))
    }

    /// Puts `steps` at the front of thread `t`'s kernel path, in order.
    pub(crate) fn kpath_push_front(&mut self, t: ThreadId, steps: Vec<KStep>) {
        let kp = &mut self.threads[t as usize].kpath;
        for s in steps.into_iter().rev() {
            kp.push_front(s);
        }
    }
}
