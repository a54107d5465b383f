//! Golden tests: tiny scenarios whose timelines are derived by hand from the default costs.

use super::run_inline;

fn row(r: &vcpulab_sim::api::ScenarioResult, owner: &str, layer: &str, cause: &str) -> u64 {
    r.run.ledger.iter().find(|l| l.owner == owner && l.layer == layer && l.cause == cause).map_or(0, |l| l.ns)
}

/// One thread computing 1 ms on one core.
///
/// Native: t=0 the host kernel picks the thread (context switch 1,500 ns), leaves idle and
/// arms the tick (timer program 50 ns), then computes 1 ms: done at 1,001,550 ns.
///
/// UC: the host picks the vCPU (vCPU switch 4,000 ns) and arms its tick (50 ns, host layer of
/// the VM); at 4,050 ns the guest picks the thread (context switch 1,500 ns, guest kernel) and
/// arms its tick, a TSC_DEADLINE exit (608 ns on the default platform, TPDS-4S: Linux 4.15 has no
/// fastpath) that the host handles first; the thread computes from 6,158 ns and is done at
/// 1,006,158 ns.
#[test]
fn one_thread_one_core_timeline() {
    let r = run_inline("scenarios = [\"UC\"]\nvcpus = [1]\n", "program = [ { compute = \"1ms\" } ]\n", &[]);
    let uc = &r[0];
    assert_eq!((uc.t_native_s * 1e9).round() as u64, 1_001_550);
    assert_eq!(uc.run.duration_ns, 1_006_158);
    assert_eq!(row(uc, "vm0/vcpu0", "host", "vcpu_switch"), 4_000);
    assert_eq!(row(uc, "vm0/vcpu0", "host", "timer_program"), 50);
    assert_eq!(row(uc, "vm0/vcpu0", "host", "exit:MSR_WRITE_TSC_DEADLINE"), 608);
    assert_eq!(row(uc, "vm0/vcpu0", "kernel", "context_switch"), 1_500);
    assert_eq!(row(uc, "vm0/vcpu0", "user", "compute"), 1_000_000);
    assert_eq!(uc.exits.get("MSR_WRITE_TSC_DEADLINE"), Some(&1));
    assert_eq!(uc.run.attributed_ns, 1_006_158);
    // δη_t = 1,006,158 / 1,001,550 − 1, δη_r the same (no idle time in either run).
    let expect = 1_006_158.0 / 1_001_550.0 - 1.0;
    assert!((uc.delta_eta_t.unwrap() - expect).abs() < 1e-12);
    assert!((uc.delta_eta_r.unwrap() - expect).abs() < 1e-12);
}

/// Two threads on one core, 10 ms of work each. With the host's default tunables (80 CPUs:
/// 24 ms period) each gets a 12 ms slice, so they run one after the other; with a 6 ms period
/// and 0.75 ms minimum slice, 3 ms slices are checked at the 4 ms ticks and they alternate.
#[test]
fn two_threads_share_one_core_fairly() {
    let exp = "scenarios = [\"native\"]\nvcpus = [1]\nthreads = 2\n";
    let prog = "program = [ { compute = \"10ms\" } ]\n";
    let r = run_inline(exp, prog, &[]);
    let run = &r[0].run;
    assert!((20_000_000..20_100_000).contains(&run.duration_ns), "{}", run.duration_ns);
    assert_eq!(run.instances[0].counters.nivcsw, 0);
    let r = run_inline(exp, prog, &["host.sched_latency=\"6ms\"", "host.min_granularity=\"750us\""]);
    let run = &r[0].run;
    assert!((20_000_000..20_100_000).contains(&run.duration_ns), "{}", run.duration_ns);
    assert!(run.instances[0].counters.nivcsw >= 4, "{:?}", run.instances[0]);
    let finish: Vec<u64> = run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns).collect();
    assert_eq!(finish, vec![10_000_000, 10_000_000]);
}

/// The wake-up of [`halt_and_wake_path_timeline`]: t0 computes 1 ms and arrives at a 2-party
/// barrier where t1 waits; t1 then computes 100 µs.
const WAKE_UP: &str = "objects = { b = { kind = \"barrier\", parties = 2 } }\n\
    [[workloads.w.groups]]\nname = \"waker\"\nthreads = 1\nprogram = [ { compute = \"1ms\" }, { barrier = \"b\" } ]\n\
    [[workloads.w.groups]]\nname = \"wakee\"\nthreads = 1\nprogram = [ { barrier = \"b\" }, { compute = \"100us\" } ]\n";

/// The halt-and-wake path on 2 vCPUs of the default platform (TPDS-4S: Linux 4.15, APICv,
/// host idle in C1 by MWAIT). Thread t1 blocks at a barrier at once; its vCPU halts. Thread t0 (on
/// the other vCPU)
/// computes 1 ms, arrives and wakes t1, which computes 100 µs.
///
/// Native: t0 starts at 1,550 ns (switch 1,500 + tick 50) and arrives at 1,001,550. Its futex
/// wake (the call 300, then 100 under the futex bucket's lock; Linux 4.15 wakes after releasing
/// it) stores to the monitored flags of core 1 (no IPI, intel_idle MWAIT), which leaves C1
/// (2,000), switches to t1 (1,500) and restarts its tick (50): t1 runs from 1,005,500 and is
/// done at 1,105,500. The wakee's critical path: 400 + 3,550 = 3,950 ns.
///
/// UC: t0 starts at 6,158 (see `one_thread_one_core_timeline`) and arrives at 1,006,158.
/// Waker's side: the futex call (300 + 100 under the bucket lock), then the wake-up's reschedule
/// IPI: its ICR write exits (625), KVM kicks the halted vCPU 1 and the host's try_to_wake_up
/// runs in that exit (1,000): the store to core 1's monitored flags lands 2,025 ns later.
/// Wakee's side: C1 exit (2,000), the host's switch to the vCPU thread (4,000), the host tick
/// restart (50), the guest's reschedule interrupt (400), the guest's tick restart, a
/// TSC_DEADLINE exit (608), the guest's switch to t1 (1,500): t1 runs from 1,016,741 (10,583 ns
/// after the wake-up, 2.7 × native) and is done at 1,116,741.
#[test]
fn halt_and_wake_path_timeline() {
    let exp = "vcpus = [2]\n";
    let prog = WAKE_UP;
    let native = run_inline(&format!("scenarios = [\"native\"]\n{exp}"), prog, &[]);
    assert_eq!(native[0].run.duration_ns, 1_105_500);
    assert_eq!(row(&native[0], "host", "host", "cstate_exit"), 2_000);
    assert_eq!(
        row(&native[0], "native0", "kernel", "syscall"),
        800,
        "t1's futex wait and t0's futex wake, each 300 + 100 under the bucket lock"
    );
    let uc = &run_inline(&format!("scenarios = [\"UC\"]\n{exp}"), prog, &[])[0];
    assert_eq!((uc.t_native_s * 1e9).round() as u64, 1_105_500);
    assert_eq!(uc.run.duration_ns, 1_116_741);
    // Which vCPU t0 starts on depends on the seed (a program starts where its launcher ran).
    let vm = |layer: &str, cause: &str| row(uc, "vm0/vcpu0", layer, cause) + row(uc, "vm0/vcpu1", layer, cause);
    assert_eq!(vm("host", "exit:MSR_WRITE_ICR"), 625);
    assert_eq!(vm("host", "vcpu_wakeup"), 1_000);
    assert_eq!(row(uc, "host", "host", "cstate_exit"), 2_000, "one C1 exit: the wakee's core, woken by the store");
    assert_eq!(vm("kernel", "interrupt"), 400, "the reschedule IPI, posted");
    assert_eq!(uc.exits.get("MSR_WRITE_ICR"), Some(&1));
    assert_eq!(uc.exits.get("HLT"), Some(&2), "vCPU 1 at start, vCPU 0 when t0 is done");
    // TSC_DEADLINE: both vCPUs arm their tick at start; vCPU 1 stops it to halt and restarts it
    // when woken; vCPU 0 stops it when t0 is done.
    assert_eq!(uc.exits.get("MSR_WRITE_TSC_DEADLINE"), Some(&5));
    assert_eq!(uc.run.attributed_ns, 2 * 1_116_741, "every ns of both cores is attributed");
}

/// The halt-and-wake path of [`halt_and_wake_path_timeline`] with KVM's lazy FPU switching
/// (`vm.lazy_fpu`, KVM before Linux 4.15: v3.19 arch/x86/kvm/x86.c `kvm_put_guest_fpu` at every
/// `vcpu_put`; arch/x86/kvm/vmx.c `handle_exception` → `vmx_fpu_activate` at the guest's next FPU
/// use).
///
/// Each vCPU's thread is switched out once with its guest FPU loaded: vCPU 1 when it halts at
/// the start (the FPU is loaded from the first entry), vCPU 0 when t0 is done; each pays
/// `fpu_switch` (200 ns, host layer, `vcpu_switch`). Only the wakee is switched in again and
/// computes in user mode, so exactly one #NM exit (`exit_exception_nm`, 800 ns) lands on it,
/// before its 100 µs: the run ends 800 ns later than with eager switching. vCPU 0's save comes
/// after t0's last work and vCPU 1's before its wait, so neither is on the critical path.
#[test]
fn halt_and_wake_path_with_lazy_fpu() {
    let exp = "scenarios = [\"UC\"]\nvcpus = [2]\n";
    let prog = WAKE_UP;
    let eager = &run_inline(exp, prog, &[])[0];
    let lazy = &run_inline(exp, prog, &["vm.lazy_fpu=true"])[0];
    assert_eq!(eager.run.duration_ns, 1_116_741);
    assert_eq!(lazy.run.duration_ns, 1_116_741 + 800, "the wakee's #NM exit is on the critical path");
    let vm = |r, layer: &str, cause: &str| row(r, "vm0/vcpu0", layer, cause) + row(r, "vm0/vcpu1", layer, cause);
    assert_eq!(eager.exits.get("EXCEPTION_NMI"), None);
    assert_eq!(lazy.exits.get("EXCEPTION_NMI"), Some(&1));
    assert_eq!(vm(lazy, "host", "exit:EXCEPTION_NMI"), 800);
    assert_eq!(vm(lazy, "host", "vcpu_switch") - vm(eager, "host", "vcpu_switch"), 2 * 200, "two guest FPU saves");
    // Nothing else of the path moves.
    for cause in ["exit:HLT", "exit:MSR_WRITE_ICR", "exit:MSR_WRITE_TSC_DEADLINE", "vcpu_wakeup"] {
        assert_eq!(vm(lazy, "host", cause), vm(eager, "host", cause), "{cause}");
    }
    assert_eq!(lazy.run.attributed_ns, 2 * lazy.run.duration_ns, "every ns of both cores is attributed");
}
