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
