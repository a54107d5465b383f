//! Futex calls as kernel paths (`kernel::futex`): the hash-bucket spinlock that every
//! `futex_wait` and `futex_wake` takes, and where the wake-ups run (under the lock before
//! Linux 4.2, after it since).

use vcpulab_sim::api::ScenarioResult;

use super::run_inline;

fn kernel_ns(r: &ScenarioResult, cause: &str) -> u64 {
    r.run.ledger.iter().filter(|l| l.layer == "kernel" && l.cause == cause).map(|l| l.ns).sum()
}

/// Three native threads on 3 CPUs (default costs). Two arrive at a 3-party barrier at once
/// (both start at 1,550 ns: switch 1,500 + tick 50) and call futex_wait: after the call's
/// 300 ns both ask for the barrier word's bucket lock at 1,850; one holds it 100 ns (read the
/// word, queue itself), the other spins those 100 ns at CPL 0, then holds it 100 ns. The third
/// arrives after 1 ms and wakes both: 300 ns of call, then 2 × 100 ns under the lock.
/// Kernel system-call time: 2 × 400 + 500 = 1,300 ns; kernel spinning: 100 ns, on the barrier's
/// bucket lock, waiting for the other early thread.
#[test]
fn two_waiters_queue_on_the_futex_words_bucket_lock_by_hand() {
    let prog = "objects = { b = { kind = \"barrier\", parties = 3 } }\n\
                [[workloads.w.groups]]\nname = \"early\"\nthreads = 2\nprogram = [ { barrier = \"b\" } ]\n\
                [[workloads.w.groups]]\nname = \"late\"\nthreads = 1\nprogram = [ { compute = \"1ms\" }, { barrier = \"b\" } ]\n";
    let r = &run_inline("scenarios = [\"native\"]\nvcpus = [3]\n", prog, &["record.wait_chains=true"])[0];
    assert_eq!(kernel_ns(r, "syscall"), 1_300, "{:?}", r.run.ledger);
    assert_eq!(kernel_ns(r, "spin_kernel"), 100, "{:?}", r.run.ledger);
    let chains = r.run.wait_chains.as_ref().expect("recorded");
    assert_eq!(chains.len(), 1, "{chains:?}");
    let w = &chains[0];
    assert_eq!((w.on.as_str(), w.ns), ("kspinlock 'futex hb->lock' of barrier 'b'", 100));
    assert!(w.waiter.starts_with("native0/t") && w.culprit.starts_with("native0/t") && w.waiter != w.culprit, "{w:?}");
}

/// A barrier in one VM of 8 vCPUs on 8 cores (TPDS-4S, PLE off), 300 episodes with a little
/// work between them. The last arrival wakes the 7 waiters, each a wake-up IPI to a halted
/// vCPU: an ICR-write exit of the waker's vCPU (625 ns) with the host's wake-up of the target
/// (1,000 ns). With the wake-ups under the bucket lock (`futex_wake = "locked"`, Linux before
/// 4.2) the waker holds the barrier word's lock across all 7 exits, and the threads it woke
/// first, back at the barrier for the next episode, spin behind it at CPL 0 in their
/// futex_wait: far more kernel spinning than when the wake-ups follow the release
/// (`"deferred"`, Linux 4.2+), where only the 100 ns sections contend. The work is the same.
#[test]
fn wake_ups_under_the_bucket_lock_hold_it_across_the_ipi_exits() {
    let prog = "objects = { b = \"barrier\" }\n\
                program = [ { repeat = { times = 300, body = [ { compute = { exp = \"2us\" } }, { barrier = \"b\" } ] } } ]\n";
    let exp = "scenarios = [\"UC\"]\nvcpus = [8]\nseeds = [1, 2]\n";
    let common = ["vm.ple.enabled=false", "record.wait_chains=true"];
    let locked = run_inline(exp, prog, &[&common[..], &["guest.futex_wake=\"locked\""]].concat());
    let deferred = run_inline(exp, prog, &[&common[..], &["guest.futex_wake=\"deferred\""]].concat());
    for (l, d) in locked.iter().zip(&deferred) {
        let (sl, sd) = (kernel_ns(l, "spin_kernel"), kernel_ns(d, "spin_kernel"));
        assert!(l.exits["MSR_WRITE_ICR"] > 1_000, "wake-ups of halted vCPUs: {:?}", l.exits);
        assert!(sl > 10 * sd.max(1_000), "spinning on the bucket lock: locked {sl} ns vs deferred {sd} ns");
        let chains = l.run.wait_chains.as_ref().expect("recorded");
        assert!(chains.iter().any(|w| w.on == "kspinlock 'futex hb->lock' of barrier 'b'"), "{chains:?}");
        assert_eq!(l.run.instances[0].counters.compute_ns, d.run.instances[0].counters.compute_ns, "same work");
    }
}

/// A socket queue (`impl = "socket"`) on 2 native CPUs, by hand (default costs): the reader
/// starts at 1,550 ns and reads an empty socket: the call (300), the socket's lock (200 under
/// it), then it sleeps on the socket's wait queue (100 under the wait queue's lock): 600. The
/// writer writes after 1 ms: the call (300), the socket's lock (200), and the wake-up of the
/// reader under the wait queue's lock (100): 600. The woken reader reads again (300 + 200), gets
/// the message, works 10 µs and reads once more (300 + 200): the writer has exited meanwhile,
/// so the socket is closed and empty and the drain ends. Kernel system-call time: 600 + 600 +
/// 500 + 500 = 2,200 ns; nobody waits on either lock.
#[test]
fn a_socket_write_and_read_take_the_sockets_locks_by_hand() {
    let prog = "objects = { q = { kind = \"queue\", impl = \"socket\" } }\n\
                [[workloads.w.groups]]\nname = \"writer\"\nthreads = 1\nprogram = [ { compute = \"1ms\" }, { push = \"q\" } ]\n\
                [[workloads.w.groups]]\nname = \"reader\"\nthreads = 1\nprogram = [ { drain = { queue = \"q\", body = [ { compute = \"10us\" } ] } } ]\n";
    let r = &run_inline("scenarios = [\"native\"]\nvcpus = [2]\n", prog, &["record.wait_chains=true"])[0];
    assert_eq!(kernel_ns(r, "syscall"), 2_200, "{:?}", r.run.ledger);
    assert_eq!(kernel_ns(r, "spin_kernel"), 0);
    assert!(r.run.wait_chains.as_ref().expect("recorded").is_empty());
    assert_eq!(r.run.instances[0].counters.blocks, 1, "the reader slept once");
}

/// hackbench's sockets in a VM of 4 vCPUs on 4 cores (TPDS-4S, 4 groups): the 20 writers of a
/// group and its reader wait for each other on their socket's lock, and the wait chains name
/// the lock and the socket (each group's sockets are lanes of the 20 socket queues).
#[test]
fn hackbench_spins_on_its_sockets_locks_in_a_vm() {
    let r = super::run_text(
        "[experiment]\nworkloads = [\"hackbench\"]\nscenarios = [\"UC\"]\nvcpus = [4]\n[workloads.hackbench.params]\nloops = 10\n",
        &["record.wait_chains=true"],
    );
    let chains = r[0].run.wait_chains.as_ref().expect("recorded");
    let on = |lock: &str| chains.iter().filter(|w| w.on.starts_with(&format!("kspinlock '{lock}' of lane "))).map(|w| w.ns).sum::<u64>();
    assert!(on("sk->lock") > 0, "{chains:?}");
    let lanes: std::collections::BTreeSet<&str> =
        chains.iter().filter_map(|w| w.on.strip_prefix("kspinlock 'sk->lock' of lane ")).filter_map(|r| r.split(' ').next()).collect();
    assert!(lanes.len() > 1, "the groups' sockets are distinct: {lanes:?}");
    assert!(kernel_ns(&r[0], "spin_kernel") > 0);
}
