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

use std::collections::VecDeque;

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
        let woken = self.mmap_sem(t).release(t);
        self.rwsem_touch_spinners(self.threads[t as usize].inst);
        for w in woken {
            self.wake_thread(w, (k, cpu));
        }
        if k != HOST && !self.vcpu_in_guest(self.vcpu_of(k, cpu)) {
            return Flow::Stop;
        }
        Flow::Continue
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
