//! A process's `mmap_sem` (`mm->mmap_sem`, renamed `mmap_lock` in v5.8): the read-write
//! semaphore that page faults and `madvise(MADV_DONTNEED)` take for reading and `munmap`,
//! `mprotect`, `mmap` and `brk` take for writing (Linux v3.16–v4.15 mm/memory.c,
//! arch/x86/mm/fault.c `__do_page_fault`, mm/madvise.c `madvise_need_mmap_write`, mm/mmap.c
//! `vm_munmap`, mm/mprotect.c).
//!
//! The semaphore follows kernel/locking/rwsem-xadd.c of those kernels:
//! - **Readers** get it at once unless a writer holds it or anyone sleeps on it (`__down_read`:
//!   the count goes negative with a writer or `RWSEM_WAITING_BIAS`); otherwise they sleep in
//!   FIFO order (`rwsem_down_read_failed`). Readers never spin.
//! - **Writers** get it when it is free and nobody sleeps on it. Otherwise a writer may first
//!   spin at CPL 0 (optimistic spinning, `rwsem_optimistic_spin`, [`SpinRule`]) and then sleeps
//!   in FIFO order (`rwsem_down_write_failed`).
//! - **Release** (`up_read` of the last reader, `up_write`) hands the semaphore to the sleepers
//!   at the head of the queue (`__rwsem_do_wake`): a writer alone, or every reader up to the
//!   first writer. The model grants it to them at the release (Linux wakes a writer, which then
//!   retries, and a spinning writer may take the semaphore first), so spinners get only a
//!   semaphore nobody sleeps on.
//!
//! **Per-VMA locks** (Linux v6.4 and later, [`MmLocks`]): an anonymous page fault first takes
//! the lock of its VMA alone (`lock_vma_under_rcu` → `vma_start_read`, a read trylock), and
//! from v6.17 so does `madvise(MADV_DONTNEED/FREE)` within one VMA; they fall back to
//! `mmap_lock` for reading only when that fails. It fails while a writer holding `mmap_lock`
//! has write-locked the VMA (`vma_start_write`: it waits for the VMA's readers to finish, and
//! the VMA stays locked until its `mmap_write_unlock`). A VMA here is an arena's heap, the
//! mapping its growth (`mprotect`), faults and trims act on ([`VmaLock`]); other mappings
//! (a mapped chunk, a traced `munmap`) are a VMA of their own that nothing else touches.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::thread::{Act, BlockOn, Flow, SpinOn};
use super::{KernelId, TaskState, ThreadId, HOST};
use crate::world::{Step, World};

/// When a writer that finds the semaphore taken spins before it sleeps
/// (`rwsem_optimistic_spin`, `[host]` / `[guest]` `rwsem_spin`).
#[derive(Clone, Copy, Debug, Default, serde::Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SpinRule {
    /// Before Linux v3.16: no optimistic spinning for rwsems; a writer sleeps at once.
    None,
    /// Linux v3.16–v4.9 (commits 4fc828e24cd9 "locking/rwsem: Support optimistic spinning"
    /// and 37e9562453b8 "Allow conservative optimistic spinning when readers have lock"): a
    /// writer starts spinning only while another writer owns the semaphore and that owner is
    /// on a CPU (`owner->on_cpu`, which a guest sees true even when the owner's vCPU is
    /// preempted). It spins while that owner stays on its CPU; once the owner releases it, it
    /// keeps spinning, readers holding it or not, until it gets it or its CPU must reschedule
    /// (`need_resched()`).
    OwnerOnCpu,
    /// Linux v4.10 and later ("locking/mutex: Break out of expensive busy-loop on
    /// {mutex,rwsem}_spin_on_owner() when owner vCPU is preempted", v4.10; "locking/rwsem: Add
    /// reader-owned state to the owner field", v4.8): as `OwnerOnCpu`, but spinning stops when
    /// the owner's vCPU is preempted (`vcpu_is_preempted`, the steal-time `preempted` flag)
    /// and never goes on while readers own the semaphore.
    #[default]
    VcpuAware,
}

/// Which lock a kernel's anonymous page faults and `madvise(MADV_DONTNEED)` take
/// (`[host]` / `[guest]` `mm_locks`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MmLocks {
    /// Before Linux v6.4: both under the process's `mmap_sem` held for reading
    /// (arch/x86/mm/fault.c `__do_page_fault`, mm/madvise.c `madvise_need_mmap_write`).
    #[default]
    MmapSem,
    /// Linux v6.4–v6.16: a page fault takes its VMA's lock instead (`CONFIG_PER_VMA_LOCK`,
    /// arch/x86/mm/fault.c `do_user_addr_fault` → mm/memory.c `lock_vma_under_rcu`, commit
    /// 0bff0aaea03e "x86/mm: try VMA lock-based page fault handling first", v6.4); `madvise`
    /// still takes `mmap_lock` for reading.
    PerVmaFaults,
    /// Linux v6.17 and later: `madvise(MADV_DONTNEED/FREE)` within one VMA takes its VMA's
    /// lock too (mm/madvise.c `get_lock_mode` → `MADVISE_VMA_READ_LOCK`, "mm: use per_vma lock
    /// for MADV_DONTNEED").
    PerVma,
}

impl MmLocks {
    /// Whether page faults take their VMA's lock.
    pub fn faults_per_vma(self) -> bool {
        self != MmLocks::MmapSem
    }

    /// Whether `madvise(MADV_DONTNEED/FREE)` takes its VMA's lock.
    pub fn madvise_per_vma(self) -> bool {
        self == MmLocks::PerVma
    }

    /// The lock of a page fault (`madvise`: false) or of an `madvise` on VMA (arena) `vma`
    /// (None: a mapping of its own).
    pub fn read_lock(self, madvise: bool, vma: Option<u32>) -> FaultLock {
        let per_vma = if madvise { self.madvise_per_vma() } else { self.faults_per_vma() };
        match (per_vma, vma) {
            (false, _) => FaultLock::MmapSem,
            (true, Some(a)) => FaultLock::Vma(a),
            (true, None) => FaultLock::OwnVma,
        }
    }
}

/// The lock of one VMA, an arena's heap (`vma->vm_lock`, [`MmLocks`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmaLock {
    /// Faults and `madvise` calls under way that hold it for reading.
    pub readers: u32,
    /// The `mmap_sem` writer that write-locked it (`vma_start_write`), until it releases
    /// `mmap_sem`.
    pub writer: Option<ThreadId>,
    /// Whether that writer sleeps until the readers are done.
    pub writer_waits: bool,
}

/// How a process's memory-management locks were taken (summed over its threads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MmLockStats {
    /// Sleeps on `mmap_sem` for reading (a fault or `madvise` behind a writer).
    pub sleeps_read: u64,
    /// Sleeps on `mmap_sem` for writing (`mmap`, `mprotect`, `munmap` behind others).
    pub sleeps_write: u64,
    /// Faults and `madvise` calls that ran under their VMA's lock alone.
    pub vma_reads: u64,
    /// Faults and `madvise` calls whose VMA a writer had write-locked: they took `mmap_sem`.
    pub vma_fallbacks: u64,
    /// Writers that slept until the faults holding the VMA they write-locked were done.
    pub vma_write_waits: u64,
}

/// The lock a page fault or `madvise` takes for reading (and holds while it runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultLock {
    /// Its process's `mmap_sem`.
    MmapSem,
    /// The lock of VMA (arena) `.0`, or `mmap_sem` while a writer has write-locked that VMA.
    Vma(u32),
    /// The lock of a VMA no other thread write-locks (a mapping the model does not track):
    /// never waited for.
    OwnVma,
}

/// How a thread wants the semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `down_read`.
    Read,
    /// `down_write`.
    Write,
}

/// One `mmap_sem`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rwsem {
    /// The readers holding it, in the order they got it.
    pub readers: Vec<ThreadId>,
    /// The writer holding it.
    pub writer: Option<ThreadId>,
    /// Sleepers in FIFO order.
    pub waiters: VecDeque<(ThreadId, Mode)>,
    /// Writers spinning on it (optimistic spinning; the OSQ order).
    pub spinners: Vec<ThreadId>,
}

impl Rwsem {
    /// Whether nobody holds it.
    pub fn free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    /// `down_read` fast path: true = `t` holds it for reading.
    pub fn try_read(&mut self, t: ThreadId) -> bool {
        if self.writer.is_none() && self.waiters.is_empty() {
            self.readers.push(t);
            true
        } else {
            false
        }
    }

    /// `down_write` fast path (and a spinner's `rwsem_try_write_lock_unqueued`): true = `t`
    /// holds it for writing.
    pub fn try_write(&mut self, t: ThreadId) -> bool {
        if self.free() && self.waiters.is_empty() {
            self.writer = Some(t);
            self.spinners.retain(|&s| s != t);
            true
        } else {
            false
        }
    }

    /// `t` sleeps on it.
    pub fn sleep(&mut self, t: ThreadId, mode: Mode) {
        self.spinners.retain(|&s| s != t);
        self.waiters.push_back((t, mode));
    }

    /// `up_read` / `up_write` by `t`; returns the sleepers it is handed to (to be woken).
    pub fn release(&mut self, t: ThreadId) -> Vec<ThreadId> {
        if self.writer == Some(t) {
            self.writer = None;
        } else {
            let i = self.readers.iter().position(|&r| r == t).expect("the releaser holds the rwsem");
            self.readers.remove(i);
        }
        if !self.free() {
            return Vec::new();
        }
        let mut woken = Vec::new();
        match self.waiters.front() {
            Some(&(w, Mode::Write)) => {
                self.waiters.pop_front();
                self.writer = Some(w);
                woken.push(w);
            }
            Some(&(_, Mode::Read)) => {
                while let Some(&(r, Mode::Read)) = self.waiters.front() {
                    self.waiters.pop_front();
                    self.readers.push(r);
                    woken.push(r);
                }
            }
            None => {}
        }
        woken
    }

    /// Who holds it (for wait chains): the writer, or the readers.
    pub fn holders(&self) -> Vec<ThreadId> {
        match self.writer {
            Some(w) => vec![w],
            None => self.readers.clone(),
        }
    }
}

impl World<'_> {
    /// Whether thread `t` is a process of its own (a workload of `processes`): its
    /// `mmap_sem` is never contended, so the model does not keep one.
    fn own_address_space(&self, t: ThreadId) -> bool {
        self.insts[self.threads[t as usize].inst as usize].wl.processes
    }

    /// The `mmap_sem` of thread `t`'s process.
    fn mmap_sem(&mut self, t: ThreadId) -> &mut Rwsem {
        let inst = self.threads[t as usize].inst;
        &mut self.insts[inst as usize].mmap_sem
    }

    /// `down_read` / `down_write` by thread `t`, current on (`k`, `cpu`): Continue when it
    /// holds the semaphore; Stop when it spins for it (a writer) or sleeps.
    pub(crate) fn rwsem_down(&mut self, k: KernelId, cpu: u32, t: ThreadId, mode: Mode) -> Flow {
        if self.own_address_space(t) {
            return Flow::Continue;
        }
        let taken = match mode {
            Mode::Read => self.mmap_sem(t).try_read(t),
            Mode::Write => self.mmap_sem(t).try_write(t),
        };
        if taken {
            if mode == Mode::Read {
                // Readers own it now: spinners that stop for readers look again.
                self.rwsem_touch_spinners(self.threads[t as usize].inst);
            }
            return Flow::Continue;
        }
        if mode == Mode::Write && self.rwsem_may_spin(k, cpu, t, true) {
            // rwsem_optimistic_spin: preemption off, PAUSE at CPL 0 until it gets the
            // semaphore or must stop ([`SpinRule`]).
            self.mmap_sem(t).spinners.push(t);
            let th = &mut self.threads[t as usize];
            th.kdepth += 1;
            th.spin_window = super::thread::SPIN_WINDOW_UNSET;
            th.pv_left = u64::MAX;
            th.pmt = super::thread::PmtWait::RACING;
            th.act = Act::Spin(SpinOn::Rwsem);
            return Flow::Stop;
        }
        self.rwsem_sleep(k, cpu, t, mode);
        Flow::Stop
    }

    /// Thread `t` sleeps on its process's `mmap_sem` until a release hands it over.
    fn rwsem_sleep(&mut self, k: KernelId, cpu: u32, t: ThreadId, mode: Mode) {
        let stats = &mut self.insts[self.threads[t as usize].inst as usize].mm_locks;
        match mode {
            Mode::Read => stats.sleeps_read += 1,
            Mode::Write => stats.sleeps_write += 1,
        }
        self.mmap_sem(t).sleep(t, mode);
        self.block_thread(k, cpu, t, BlockOn::Rwsem);
    }

    /// `up_read` / `up_write` by thread `t` on (`k`, `cpu`): the sleepers it hands the
    /// semaphore to are woken, and its spinners look again. Stop when a wake-up's IPI made
    /// the vCPU exit (the path goes on after re-entry).
    pub(crate) fn rwsem_up(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Flow {
        if self.own_address_space(t) {
            return Flow::Continue;
        }
        let inst = self.threads[t as usize].inst as usize;
        if self.insts[inst].mmap_sem.writer == Some(t) {
            // mmap_write_unlock: every VMA it write-locked is unlocked with it.
            for v in self.insts[inst].vmas.iter_mut().filter(|v| v.writer == Some(t)) {
                v.writer = None;
            }
        }
        let woken = self.mmap_sem(t).release(t);
        self.rwsem_touch_spinners(self.threads[t as usize].inst);
        self.wake_on_release(k, cpu, &woken)
    }

    /// Wakes the sleepers a release on (`k`, `cpu`) hands a lock to. Stop when a wake-up's IPI
    /// made the vCPU exit (the path goes on after re-entry).
    fn wake_on_release(&mut self, k: KernelId, cpu: u32, woken: &[ThreadId]) -> Flow {
        for &w in woken {
            self.wake_thread(w, (k, cpu));
        }
        if k != HOST && !self.vcpu_in_guest(self.vcpu_of(k, cpu)) {
            return Flow::Stop;
        }
        Flow::Continue
    }

    /// The lock of VMA (arena) `a` of thread `t`'s process.
    fn vma_lock(&mut self, t: ThreadId, a: u32) -> &mut VmaLock {
        let vmas = &mut self.insts[self.threads[t as usize].inst as usize].vmas;
        if vmas.len() <= a as usize {
            vmas.resize_with(a as usize + 1, VmaLock::default);
        }
        &mut vmas[a as usize]
    }

    /// The read lock a page fault or `madvise` by thread `t` on (`k`, `cpu`) takes before it
    /// runs ([`FaultLock`]): its VMA's (`lock_vma_under_rcu`) unless a writer has write-locked
    /// that VMA, else its process's `mmap_sem` (`mmap_read_lock`). Continue when it holds it;
    /// Stop when it sleeps for `mmap_sem`.
    pub(crate) fn mm_read_lock(&mut self, k: KernelId, cpu: u32, t: ThreadId, lock: FaultLock) -> Flow {
        if self.own_address_space(t) {
            return Flow::Continue;
        }
        let held = match lock {
            // Write-locked by a writer (or one waiting for its readers): `mmap_read_lock`.
            FaultLock::Vma(a) if self.vma_lock(t, a).writer.is_some() => FaultLock::MmapSem,
            other => other,
        };
        if let FaultLock::Vma(a) = held {
            self.vma_lock(t, a).readers += 1;
        }
        let stats = &mut self.insts[self.threads[t as usize].inst as usize].mm_locks;
        match (lock, held) {
            (FaultLock::MmapSem, _) => {}
            (_, FaultLock::MmapSem) => stats.vma_fallbacks += 1,
            _ => stats.vma_reads += 1,
        }
        self.threads[t as usize].mm_held = Some(held);
        if held == FaultLock::MmapSem {
            return self.rwsem_down(k, cpu, t, Mode::Read);
        }
        Flow::Continue
    }

    /// Releases what [`Self::mm_read_lock`] took: the last reader of a VMA wakes the writer
    /// waiting for it. Stop when a wake-up's IPI made the vCPU exit.
    pub(crate) fn mm_read_unlock(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Flow {
        match self.threads[t as usize].mm_held.take() {
            Some(FaultLock::MmapSem) => self.rwsem_up(k, cpu, t),
            Some(FaultLock::Vma(a)) => {
                let v = self.vma_lock(t, a);
                v.readers -= 1;
                let Some(w) = v.writer.filter(|_| v.readers == 0 && v.writer_waits) else { return Flow::Continue };
                v.writer_waits = false;
                self.wake_on_release(k, cpu, &[w])
            }
            Some(FaultLock::OwnVma) | None => Flow::Continue,
        }
    }

    /// `vma_start_write` of VMA (arena) `a` by thread `t`, which holds its process's
    /// `mmap_sem` for writing: the VMA is write-locked until `t` releases `mmap_sem`, and `t`
    /// sleeps until the faults and `madvise` calls holding it are done. Continue when it has
    /// it; Stop when it sleeps.
    pub(crate) fn vma_start_write(&mut self, k: KernelId, cpu: u32, t: ThreadId, a: u32) -> Flow {
        if self.own_address_space(t) {
            return Flow::Continue;
        }
        let v = self.vma_lock(t, a);
        v.writer = Some(t);
        if v.readers == 0 {
            return Flow::Continue;
        }
        v.writer_waits = true;
        self.insts[self.threads[t as usize].inst as usize].mm_locks.vma_write_waits += 1;
        self.block_thread(k, cpu, t, BlockOn::VmaLock);
        Flow::Stop
    }

    /// Re-examines the spinners of instance `inst`'s `mmap_sem` (its state changed).
    pub(crate) fn rwsem_touch_spinners(&mut self, inst: u32) {
        for i in 0..self.insts[inst as usize].mmap_sem.spinners.len() {
            let s = self.insts[inst as usize].mmap_sem.spinners[i];
            if let Some(core) = self.thread_core(s) {
                self.touch(core);
            }
        }
    }

    /// A vCPU of kernel `k` was scheduled in or out by the host: spinners that stop when an
    /// owner's vCPU is preempted look again.
    pub(crate) fn rwsem_vcpu_moved(&mut self, k: KernelId) {
        if self.kernels[k as usize].params.rwsem_spin != SpinRule::VcpuAware {
            return;
        }
        for inst in 0..self.insts.len() as u32 {
            if self.insts[inst as usize].kernel == k && !self.insts[inst as usize].mmap_sem.spinners.is_empty() {
                self.rwsem_touch_spinners(inst);
            }
        }
    }

    /// Whether writer `t` on (`k`, `cpu`) may (`start`) or may go on spinning for its
    /// process's `mmap_sem` (`rwsem_can_spin_on_owner`, `rwsem_spin_on_owner` and the loop of
    /// `rwsem_optimistic_spin` of the kernel's [`SpinRule`]).
    fn rwsem_may_spin(&self, k: KernelId, cpu: u32, t: ThreadId, start: bool) -> bool {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        if kc.need_resched || kc.resched_deferred {
            return false;
        }
        let sem = &self.insts[self.threads[t as usize].inst as usize].mmap_sem;
        let rule = self.kernels[k as usize].params.rwsem_spin;
        match (rule, sem.writer) {
            (SpinRule::None, _) => false,
            (_, Some(w)) => {
                let task = &self.tasks[self.threads[w as usize].task as usize];
                // owner->on_cpu: current on its CPU, as its own kernel sees it.
                let on_cpu = task.state == TaskState::Running;
                on_cpu && (rule == SpinRule::OwnerOnCpu || !self.task_vcpu_preempted(task.kernel, task.cpu))
            }
            // v3.16: no owner when it starts spinning means readers may hold it: do not start
            // (37e9562453b8); once spinning, go on until it is free or need_resched().
            (SpinRule::OwnerOnCpu, None) => !start,
            // v4.8+: never spin while readers own it.
            (SpinRule::VcpuAware, None) => sem.readers.is_empty(),
        }
    }

    /// `vcpu_is_preempted(cpu)` for CPU `cpu` of kernel `k`: its vCPU is runnable but
    /// descheduled by the host (false natively).
    fn task_vcpu_preempted(&self, k: KernelId, cpu: u32) -> bool {
        k != HOST && self.vcpus[self.vcpu_of(k, cpu) as usize].st_preempted
    }

    /// One step of writer `t` spinning for its process's `mmap_sem` on (`k`, `cpu`):
    /// Some(step) when it got the semaphore or stopped spinning and went to sleep; None while
    /// it goes on spinning.
    pub(crate) fn rwsem_spin_step(&mut self, k: KernelId, cpu: u32, t: ThreadId) -> Option<Step> {
        let got = self.mmap_sem(t).try_write(t);
        if !got && self.rwsem_may_spin(k, cpu, t, false) {
            return None;
        }
        self.threads[t as usize].kdepth -= 1;
        if got {
            self.threads[t as usize].act = Act::Fresh;
            if self.threads[t as usize].kdepth == 0 {
                self.preempt_enable(t);
            }
        } else {
            self.threads[t as usize].stats.spin_blocks += 1;
            self.rwsem_sleep(k, cpu, t, Mode::Write);
        }
        Some(Step::Again)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_sleeping_writer_stops_new_readers() {
        let mut s = Rwsem::default();
        assert!(s.try_read(1) && s.try_read(2));
        assert!(!s.try_write(3), "readers hold it");
        s.sleep(3, Mode::Write);
        assert!(!s.try_read(4), "a sleeping writer queues later readers (writer fairness)");
        s.sleep(4, Mode::Read);
        assert!(s.release(1).is_empty(), "one reader still holds it");
        assert_eq!(s.release(2), vec![3], "the last reader hands it to the writer");
        assert_eq!(s.writer, Some(3));
        assert_eq!(s.release(3), vec![4], "then to the reader behind it");
        assert_eq!(s.readers, vec![4]);
    }

    #[test]
    fn a_writer_release_grants_every_reader_up_to_the_next_writer() {
        let mut s = Rwsem::default();
        assert!(s.try_write(1));
        s.sleep(2, Mode::Read);
        s.sleep(3, Mode::Read);
        s.sleep(4, Mode::Write);
        s.sleep(5, Mode::Read);
        assert_eq!(s.release(1), vec![2, 3]);
        assert_eq!(s.holders(), vec![2, 3]);
        assert!(s.release(2).is_empty());
        assert_eq!(s.release(3), vec![4]);
        assert_eq!(s.release(4), vec![5]);
        assert!(s.release(5).is_empty() && s.free() && s.waiters.is_empty());
    }

    #[test]
    fn a_spinner_takes_only_a_semaphore_nobody_sleeps_on() {
        let mut s = Rwsem::default();
        assert!(s.try_write(1));
        s.spinners.push(2);
        s.sleep(3, Mode::Write);
        assert_eq!(s.release(1), vec![3], "the sleeper gets it, not the spinner");
        assert!(!s.try_write(2));
        assert!(s.release(3).is_empty());
        assert!(s.try_write(2) && s.spinners.is_empty());
    }
}
