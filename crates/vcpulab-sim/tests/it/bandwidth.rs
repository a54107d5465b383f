//! Host CFS bandwidth control (`vm.quota`, `vm.global_quota`: libvirt's `<cputune>` written to
//! `cpu.max`): golden run times of CPU-bound vCPUs under a quota.

use super::run_inline;

/// One VM of `vcpus` vCPUs on as many cores (pinned), `busy` threads computing `work` each,
/// alone on the host; returns the VM's run time and its result record.
fn quota_run(vcpus: u32, busy: u32, work: &str, sets: &[&str]) -> (f64, vcpulab_sim::api::ScenarioResult) {
    let exp = format!("scenarios = [\"UC\"]\nvcpus = [{vcpus}]\n");
    let prog = format!("[[workloads.w.groups]]\nname = \"busy\"\nthreads = {busy}\nprogram = [ {{ compute = \"{work}\" }} ]\n");
    let mut all = vec!["vm.pin=true"];
    all.extend_from_slice(sets);
    let mut r = run_inline(&exp, &prog, &all);
    let r = r.remove(0);
    (r.t_virt_s.expect("a VM time"), r)
}

/// A vCPU capped at 10 ms per 20 ms gets half its core: 0.2 s for 0.1 s of work. The run
/// overshoots the quota by at most a tick per period (throttling is noticed at the host's
/// `update_curr`, the 4 ms tick on an otherwise idle core), and the debt is paid from the next
/// period's quota, so the long-run share is the quota's.
#[test]
fn a_vcpu_quota_caps_its_share_of_the_core() {
    let (t, r) = quota_run(2, 1, "100ms", &["vm.quota=\"10ms\"", "vm.period=\"20ms\""]);
    assert!((0.185..0.215).contains(&t), "{t}");
    let vm = &r.run.vms[0];
    let busy = vm.vcpus.iter().map(|v| v.bandwidth.expect("a vcpuN cpu.stat")).max_by_key(|b| b.nr_throttled).unwrap();
    // About one throttle per period of the run.
    assert!((8..=11).contains(&busy.nr_throttled), "{busy:?}");
    assert!(busy.throttled_ns > 80_000_000, "{busy:?}");
    assert!(vm.bandwidth.is_none(), "no VM-wide quota");
}

/// Without a quota the same run takes its 0.1 s.
#[test]
fn no_quota_no_throttling() {
    let (t, r) = quota_run(2, 1, "100ms", &[]);
    assert!((0.099..0.103).contains(&t), "{t}");
    assert!(r.run.vms[0].vcpus.iter().all(|v| v.bandwidth.is_none()));
}

/// A VM-wide quota of one core's worth per period over 2 busy vCPUs: each runs half the time,
/// 0.2 s for 0.1 s of work each; the VM group's `cpu.stat` counts the throttling.
#[test]
fn a_global_quota_caps_the_whole_vm() {
    let (t, r) = quota_run(2, 2, "100ms", &["vm.global_quota=\"20ms\"", "vm.global_period=\"20ms\""]);
    assert!((0.185..0.23).contains(&t), "{t}");
    let bw = r.run.vms[0].bandwidth.expect("the VM group's cpu.stat");
    assert!(bw.nr_throttled >= 8, "{bw:?}");
}

/// A quota above what the vCPU uses changes nothing but the bookkeeping.
#[test]
fn a_generous_quota_does_not_throttle() {
    let (t, r) = quota_run(2, 1, "100ms", &["vm.quota=\"30ms\"", "vm.period=\"20ms\""]);
    assert!((0.099..0.103).contains(&t), "{t}");
    assert!(r.run.vms[0].vcpus.iter().all(|v| v.bandwidth.is_some_and(|b| b.nr_throttled == 0)));
}
