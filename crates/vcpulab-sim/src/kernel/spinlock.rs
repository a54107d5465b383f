//! Kernel spinlocks: the lock word, its waiters, and the order in which they get it.
//!
//! One object serves a workload's declared `kspinlock`s and the locks the kernel model takes
//! itself (the page allocator's, [`super::mm`]; the futex hash buckets' and the sockets',
//! [`super::futex`]). Every waiter takes a ticket (its arrival order); the kernel's spinlock
//! implementation ([`Discipline`], from `spinlock` of `[host]` / `[guest]`) decides who
//! gets the lock when it is released:
//! - **FIFO**: x86 ticket locks, Linux v2.6.25–v4.1 (arch/x86/include/asm/spinlock.h: `xadd`
//!   takes the next ticket, the waiter spins with PAUSE until `head` reaches it, unlock
//!   increments `head`); also queued spinlocks (v4.2+, kernel/locking/qspinlock.c: an MCS
//!   queue behind a pending bit) natively and, with PV spinlocks, in a guest
//!   (qspinlock_paravirt.h). A waiter whose vCPU is preempted when its turn comes stalls every
//!   later one (lock-waiter preemption); a preempted holder stalls them all (lock-holder
//!   preemption).
//! - **Test-and-set**: whoever finds it free first takes it. The byte locks before v2.6.25, and
//!   qspinlock in a guest without PV spinlocks: `virt_spin_lock` (arch/x86/include/asm/
//!   qspinlock.h, v4.5+, "revert to test-and-set on hypervisors" because of lock-waiter
//!   preemption) makes the slow path a test-and-set loop whenever the kernel runs on a
//!   hypervisor. Only a preempted holder stalls the others.
//! - **PMT**: preemptable ticket spinlocks (Ouyang and Lange, VEE 2013; pmtlock v2.0,
//!   arch/x86/include/asm/spinlock.h): a waiter first waits for its turn in ticket order, for
//!   at most `(ticket - head) << pmtlock_timeout_shift` PAUSE iterations (the timeout restarts
//!   whenever `head` moves, shift 14); when its turn comes or the timeout runs out it competes
//!   for the lock by test-and-set (`xchg(&lock->acquired, 1)`). Unlock increments `head` and
//!   clears `acquired`, so later waiters can pass one whose vCPU was preempted.

use std::collections::BTreeMap;

use super::ThreadId;
use crate::workload::program::ObjId;

/// How a kernel's spinlocks hand the lock over ([`TicketLock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// In ticket order.
    Fifo,
    /// To whichever waiter finds it free first.
    TestAndSet,
    /// In ticket order, until a waiter's timeout (`unit_ns` per position in the queue) runs out.
    Pmt {
        /// Spinning time per queue position before a waiter competes out of order (ns).
        unit_ns: u64,
    },
}

/// PAUSE iterations per queue position before a PMT waiter competes out of order:
/// 1 << `pmtlock_timeout_shift` (14, pmtlock v2.0 kernel/spinlock.c).
pub const PMT_TIMEOUT_PAUSES: u64 = 1 << 14;

/// A kernel spinlock: tickets, the holder and the waiters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TicketLock {
    /// Next ticket to hand out (`tail`).
    pub next: u64,
    /// Ticket being served (`head`).
    pub serving: u64,
    /// Holder.
    pub holder: Option<ThreadId>,
    /// Waiters by ticket.
    pub waiting: BTreeMap<u64, ThreadId>,
}

impl TicketLock {
    /// Thread `t` takes a ticket: Ok = it holds the lock; Err(ticket) = it must spin until
    /// [`TicketLock::try_take`] succeeds with that ticket. Under FIFO and PMT a thread gets a
    /// free lock at once only if nobody is queued before it; under test-and-set if it is free.
    pub fn lock(&mut self, t: ThreadId, d: Discipline) -> Result<(), u64> {
        let ticket = self.next;
        self.next += 1;
        let first = ticket == self.serving || d == Discipline::TestAndSet;
        if first && self.holder.is_none() {
            self.holder = Some(t);
            return Ok(());
        }
        self.waiting.insert(ticket, t);
        Err(ticket)
    }

    /// A spinner with `ticket` checks the lock word: true = it now holds the lock. `racing`:
    /// it competes for a free lock whatever its turn (test-and-set, or a PMT waiter whose turn
    /// came or whose timeout ran out); otherwise it takes the lock only on its turn.
    pub fn try_take(&mut self, t: ThreadId, ticket: u64, racing: bool) -> bool {
        if self.holder.is_none() && (racing || self.serving == ticket) {
            self.holder = Some(t);
            self.waiting.remove(&ticket);
            true
        } else {
            false
        }
    }

    /// The holder releases the lock (`head` moves on one ticket); returns the waiters that may
    /// take it now: the one whose turn it is under FIFO, every waiter otherwise.
    pub fn unlock(&mut self, d: Discipline) -> Vec<ThreadId> {
        self.holder = None;
        self.serving += 1;
        self.may_take(d)
    }

    /// The waiters that may take the lock once it is free (see [`TicketLock::unlock`]).
    pub fn may_take(&self, d: Discipline) -> Vec<ThreadId> {
        self.takers(self.serving, d)
    }

    /// The waiters that may take the lock when its holder releases it now: what
    /// [`TicketLock::unlock`] will return.
    pub fn due_on_release(&self, d: Discipline) -> Vec<ThreadId> {
        self.takers(self.serving + 1, d)
    }

    /// The waiters that may take a free lock whose `head` is `serving`.
    fn takers(&self, serving: u64, d: Discipline) -> Vec<ThreadId> {
        match d {
            Discipline::Fifo => self.waiting.get(&serving).copied().into_iter().collect(),
            Discipline::TestAndSet | Discipline::Pmt { .. } => self.waiting.values().copied().collect(),
        }
    }

    /// Who a spinner waits for: the holder, or (FIFO and PMT) the waiter whose turn it is.
    pub fn culprit(&self, d: Discipline) -> Option<ThreadId> {
        match d {
            Discipline::TestAndSet => self.holder,
            Discipline::Fifo | Discipline::Pmt { .. } => self.holder.or_else(|| self.waiting.get(&self.serving).copied()),
        }
    }
}

/// A lock of the kernel's page allocator ([`super::mm`]), per memory node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MmLock {
    /// `zone->lock` of the node's normal zone: the buddy free lists.
    Zone(u32),
    /// The node's LRU lock (`zone->lru_lock` before v4.8, `pgdat->lru_lock` after).
    Lru(u32),
}

impl MmLock {
    /// Its index among a kernel's page-allocator locks.
    pub fn index(self) -> usize {
        match self {
            MmLock::Zone(n) => 2 * n as usize,
            MmLock::Lru(n) => 2 * n as usize + 1,
        }
    }

    /// The kernel's name for it.
    pub fn name(self) -> String {
        match self {
            MmLock::Zone(0) => "zone->lock".into(),
            MmLock::Lru(0) => "lru_lock".into(),
            MmLock::Zone(n) => format!("zone->lock (node {n})"),
            MmLock::Lru(n) => format!("lru_lock (node {n})"),
        }
    }
}

/// Which kernel spinlock a thread spins on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KLockRef {
    /// A `kspinlock` its workload declares.
    Obj(ObjId),
    /// A lock of its kernel's page allocator.
    Mm(MmLock),
    /// The kernel lock of a word of one of its synchronisation objects ([`super::futex`]): a
    /// futex word's hash-bucket lock, a socket's lock or its wait queue's.
    Word(super::futex::WordKey),
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIFO: Discipline = Discipline::Fifo;
    const TAS: Discipline = Discipline::TestAndSet;

    #[test]
    fn tickets_are_served_in_order() {
        let mut l = TicketLock::default();
        assert_eq!(l.lock(1, FIFO), Ok(()));
        assert_eq!(l.lock(2, FIFO), Err(1));
        assert_eq!(l.lock(3, FIFO), Err(2));
        assert!(!l.try_take(3, 2, false), "not its turn");
        assert_eq!(l.culprit(FIFO), Some(1));
        assert_eq!(l.unlock(FIFO), vec![2], "the next ticket's waiter is due");
        assert!(!l.try_take(3, 2, false), "ticket 2 is served first");
        assert_eq!(l.culprit(FIFO), Some(2), "a due waiter that has not taken it yet stalls the rest");
        assert!(l.try_take(2, 1, false));
        assert_eq!(l.unlock(FIFO), vec![3]);
        assert!(l.try_take(3, 2, false));
        assert_eq!(l.unlock(FIFO), Vec::<ThreadId>::new());
        assert_eq!(l.lock(4, FIFO), Ok(()), "free and no waiter: taken at once");
    }

    #[test]
    fn test_and_set_goes_to_whoever_finds_it_free() {
        let mut l = TicketLock::default();
        assert_eq!(l.lock(1, TAS), Ok(()));
        assert_eq!(l.lock(2, TAS), Err(1));
        assert_eq!(l.lock(3, TAS), Err(2));
        assert_eq!(l.unlock(TAS), vec![2, 3], "every spinner may take it");
        assert_eq!(l.culprit(TAS), None, "free: nobody is waited for");
        assert!(l.try_take(3, 2, true), "the later arrival got there first");
        assert_eq!(l.culprit(TAS), Some(3));
        assert!(!l.try_take(2, 1, true));
        assert_eq!(l.unlock(TAS), vec![2]);
        assert_eq!(l.lock(4, TAS), Ok(()), "a newcomer may take a free lock before a spinner notices");
    }

    #[test]
    fn a_racing_pmt_waiter_passes_the_one_whose_turn_it_is() {
        let pmt = Discipline::Pmt { unit_ns: 1000 };
        let mut l = TicketLock::default();
        assert_eq!(l.lock(1, pmt), Ok(()));
        assert_eq!(l.lock(2, pmt), Err(1));
        assert_eq!(l.lock(3, pmt), Err(2));
        assert_eq!(l.unlock(pmt), vec![2, 3]);
        assert!(!l.try_take(3, 2, false), "within its timeout it waits for its turn");
        assert!(l.try_take(3, 2, true), "timed out: it takes the free lock out of order");
        assert_eq!(l.unlock(pmt), vec![2]);
        assert!(l.try_take(2, 1, true), "the passed waiter still gets it");
    }
}
