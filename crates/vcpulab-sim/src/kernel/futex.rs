//! Futexes: the kernel side of the workload's blocking synchronisation, with the hash-bucket
//! spinlock every wait and wake takes.
//!
//! Modelled on Linux kernel/futex.c, v3.16–v4.15. Every futex word hashes to a bucket of
//! `futex_queues` (`hash_futex`), whose spinlock `hb->lock` serialises the waiters and wakers
//! of the words in it:
//! - **futex_wait** (`futex_wait_setup` → `queue_lock`, `get_futex_value_locked`, `queue_me`,
//!   then `futex_wait_queue_me`): system-call entry; take `hb->lock`; read the word and queue
//!   the `futex_q` on the bucket; release the lock; sleep (`schedule()`). A word that changed
//!   before the waiter got the lock makes it return at once (-EWOULDBLOCK).
//! - **futex_wake**: system-call entry; with waiters pending in the bucket
//!   (`hb_waiters_pending`, v3.14+) take `hb->lock`, unqueue up to `nr_wake` matching
//!   `futex_q`s, release it. Where the wake-ups run depends on the kernel ([`FutexWake`]):
//!   before v4.2 under the lock (`wake_futex` → `wake_up_state`: the whole `try_to_wake_up`,
//!   with the reschedule IPI it may send, which in a VM is an ICR-write exit of the waker's
//!   vCPU); since v4.2 after it (`mark_wake_futex` → `wake_q_add`, then `wake_up_q`; commit
//!   1d0dcb3ad9d3 "futex: Implement lockless wakeups").
//!
//! The table has roundup_pow_of_two(256 × possible CPUs) buckets (`futex_init`, v3.13+), so
//! the few words of one program almost never share one: the model gives every word its own
//! bucket lock ([`WordKey`]). The time under the lock is the preset's `futex_hb` per
//! `futex_q` queued or woken. `FUTEX_CMP_REQUEUE` (glibc's condvar broadcast before 2.25)
//! takes both words' buckets (`double_lock_hb`); the model takes the condvar's only.
//!
//! A socket queue (`impl = "socket"`) uses the same paths with the socket's own spinlocks
//! (Linux net/unix/af_unix.c, kernel/sched/wait.c): a `write` or `read` takes the socket's
//! lock (`sock_lock` under it, `World::socket_section`), and sleeps on or wakes the socket's
//! wait queue behind the wait queue's lock, which `__wake_up` holds across `try_to_wake_up` in
//! every kernel version. A socket's words are its lanes' "mutex" (the socket lock) and "not
//! empty" / "not full" words (its wait queue).
//!
//! Who waits and who is woken is decided by the user-level operation, as the word's value
//! decides it in the C library; the path gives the timing. A waker's wake-up lands when its
//! path reaches it; a waiter sleeps when its path has queued it. A waiter that a waker chose
//! before it went to sleep does not sleep (its word changed: futex_wait returns at once).

use crate::account::Cause;
use crate::spec::kernel::FutexWake;
use crate::workload::program::{ObjId, QueueImpl};
use crate::world::World;

use super::kpath::KStep;
use super::spinlock::{KLockRef, TicketLock};
use super::thread::{Act, BlockOn};
use super::{KernelId, ThreadId};

use std::collections::BTreeMap;

/// A word of a program instance's synchronisation object (its object and which of the object's
/// words), which names the kernel lock behind it: a futex word's hash-bucket lock, or a socket
/// queue's lock or wait-queue lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WordKey {
    /// The instance (its address space).
    pub inst: u32,
    /// The synchronisation object.
    pub obj: ObjId,
    /// The word within it ([`word`]).
    pub word: u32,
}

/// The words of a synchronisation object.
pub mod word {
    /// A mutex's lock word, a barrier's or condition variable's sequence word.
    pub const MAIN: u32 = 0;
    /// The mutex of a mutex-and-condvar barrier.
    pub const BARRIER_MUTEX: u32 = 1;
    /// A queue's completion condition variable (`join`).
    pub const JOIN: u32 = 2;

    /// The words of lane `l` of a queue: its mutex, its "not empty" and "not full" condition
    /// variables (PARSEC's `queue_t`).
    pub fn lane(l: usize, which: Lane) -> u32 {
        3 + 3 * l as u32 + which as u32
    }

    /// The inverse of [`lane`]: the lane of word `w` and which of its words it is (as the
    /// `Lane` discriminant), or None for a word that is not a lane's.
    pub fn lane_parts(w: u32) -> Option<(u32, u32)> {
        w.checked_sub(3).map(|x| (x / 3, x % 3))
    }

    /// A word of a queue lane.
    #[derive(Clone, Copy, Debug)]
    pub enum Lane {
        /// The lane's mutex.
        Mutex = 0,
        /// Waited on while the lane is empty.
        NotEmpty = 1,
        /// Waited on while the lane is full.
        NotFull = 2,
    }
}

/// A kernel's locks behind words: the futex hash buckets' and the sockets', created on first
/// use.
#[derive(Debug, Default)]
pub struct WordLocks {
    /// The bucket lock of each word used so far.
    pub locks: BTreeMap<WordKey, TicketLock>,
}

impl WordLocks {
    /// The bucket lock of `key`.
    pub fn lock(&mut self, key: WordKey) -> &mut TicketLock {
        self.locks.entry(key).or_default()
    }

    /// Who a spinner on `key`'s bucket lock waits for.
    pub fn culprit(&self, key: WordKey, d: super::spinlock::Discipline) -> Option<ThreadId> {
        self.locks.get(&key).and_then(|l| l.culprit(d))
    }
}

impl World<'_> {
    /// The kernel lock of word `f` as wait chains name it: "kspinlock 'futex hb->lock' of mutex
    /// 'm'", "... of lane 2's "not empty" condition of queue 'q'"; for a socket queue its lock
    /// ("kspinlock 'sk->lock' of lane 0 of socket 'q'") or its wait queue's ('sk_wq->lock').
    pub(crate) fn word_lock_name(&self, f: WordKey) -> String {
        let d = &self.insts[f.inst as usize].wl.objects[f.obj as usize];
        let lane = word::lane_parts(f.word);
        if let (QueueImpl::Socket, Some((lane, which))) = (d.queue_impl, lane) {
            let lock = if which == word::Lane::Mutex as u32 { "sk->lock" } else { "sk_wq->lock" };
            return format!("kspinlock '{lock}' of lane {lane} of socket '{}'", d.name);
        }
        let obj = format!("{} '{}'", d.kind.name(), d.name);
        let word = match (f.word, lane) {
            (_, Some((lane, which))) => {
                let which = ["mutex", "\"not empty\" condition", "\"not full\" condition"][which as usize];
                format!("lane {lane}'s {which} of {obj}")
            }
            (word::BARRIER_MUTEX, _) => format!("the mutex of {obj}"),
            (word::JOIN, _) => format!("the completion condition of {obj}"),
            _ => obj,
        };
        format!("kspinlock 'futex hb->lock' of {word}")
    }

    /// The key of word `word` of thread `t`'s object `obj`.
    fn word_key(&self, t: ThreadId, obj: ObjId, word: u32) -> WordKey {
        WordKey { inst: self.threads[t as usize].inst, obj, word }
    }

    /// `futex_wait`: the current thread `t` of (`k`, `cpu`) goes to sleep on `on`, word
    /// `word` of its object. The system call's entry is charged now; its path (the bucket
    /// lock, queueing, the sleep) runs once the kernel work queued before it is done
    /// ([`World::futex_wait_path`]).
    pub(crate) fn futex_wait(&mut self, k: KernelId, cpu: u32, t: ThreadId, on: BlockOn, word: u32) {
        self.syscall(k, cpu, t);
        if !self.awaits_creation(t) {
            let inst = self.threads[t as usize].inst;
            self.insts[inst as usize].sync.futex_waits += 1;
        }
        self.sleep_on(t, on, word);
    }

    /// Whether thread `t` (a replay's created thread) has not been created yet and has not
    /// slept: its futex wait is its wait for its creation, which stands for the `clone` that
    /// starts it, not a futex call ([`super::thread::SyncStats`]).
    fn awaits_creation(&self, t: ThreadId) -> bool {
        let th = &self.threads[t as usize];
        self.tasks[th.task as usize].newborn && (th.stats.blocks == 0 || th.stats.creation_wait)
    }

    /// Thread `t`, inside a system call, goes to sleep on `on` behind the lock of word `word`
    /// of its object (a futex bucket, a socket's wait queue): its path takes the lock, queues
    /// it and sleeps once the rest of its kernel path is done ([`World::futex_wait_path`]).
    pub(crate) fn sleep_on(&mut self, t: ThreadId, on: BlockOn, word: u32) {
        let obj = on.obj().expect("a futex wait is on an object");
        let key = self.word_key(t, obj, word);
        let th = &mut self.threads[t as usize];
        th.act = Act::Fresh;
        th.blocking = Some((on, key));
    }

    /// A socket queue's `write` or `read` of thread `t` on lane `l` of `q` (a system call): the
    /// socket's spinlock is taken to queue or dequeue the message (`sock_lock` under it).
    pub(crate) fn socket_section(&mut self, k: KernelId, cpu: u32, t: ThreadId, q: ObjId, l: usize) {
        self.syscall(k, cpu, t);
        let sk = KLockRef::Word(self.word_key(t, q, word::lane(l, word::Lane::Mutex)));
        let steps = [KStep::Lock(sk), KStep::Work(self.costs.sock_lock, Cause::Syscall), KStep::Unlock(sk)];
        self.threads[t as usize].kpath.extend(steps);
    }

    /// Queues the path of thread `t`'s pending futex wait when nothing else is left on its
    /// kernel path: true if it did.
    pub(crate) fn futex_wait_path(&mut self, t: ThreadId) -> bool {
        let th = &self.threads[t as usize];
        let Some((_, key)) = th.blocking.filter(|_| th.kpath.is_empty()) else { return false };
        let hb = KLockRef::Word(key);
        let steps = [KStep::Lock(hb), KStep::Work(self.costs.futex_hb, Cause::Syscall), KStep::Unlock(hb), KStep::Block];
        self.threads[t as usize].kpath.extend(steps);
        true
    }

    /// `futex_wake`: thread `t` wakes the blocked (or about to block) threads `woken` from word
    /// `word` of object `obj`, with one system call (none when there is nobody to wake).
    pub(crate) fn futex_wake(&mut self, k: KernelId, cpu: u32, t: ThreadId, obj: ObjId, word: u32, woken: Vec<ThreadId>) {
        if woken.is_empty() {
            return;
        }
        self.syscall(k, cpu, t);
        if !woken.iter().all(|&w| self.awaits_creation(w)) {
            let inst = self.threads[t as usize].inst;
            self.insts[inst as usize].sync.futex_wakes += 1;
        }
        let locked = self.kernels[k as usize].params.futex_wake == FutexWake::Locked;
        self.wake_path(t, obj, word, woken, locked);
    }

    /// Thread `t`, inside a system call, wakes `woken` from the lock of word `word` of object
    /// `obj`: take the lock, unqueue each (`futex_hb` each), and wake them under the lock
    /// (`locked`) or after releasing it.
    pub(crate) fn wake_path(&mut self, t: ThreadId, obj: ObjId, word: u32, woken: Vec<ThreadId>, locked: bool) {
        if woken.is_empty() {
            return;
        }
        let hb = KLockRef::Word(self.word_key(t, obj, word));
        let per_waiter = KStep::Work(self.costs.futex_hb, Cause::Syscall);
        let mut steps = Vec::with_capacity(2 + 3 * woken.len());
        steps.push(KStep::Lock(hb));
        for &w in &woken {
            steps.push(per_waiter);
            if locked {
                steps.push(KStep::Wake(w));
            }
        }
        steps.push(KStep::Unlock(hb));
        if !locked {
            steps.extend(woken.iter().map(|&w| KStep::Wake(w)));
        }
        self.threads[t as usize].kpath.extend(steps);
    }
}
