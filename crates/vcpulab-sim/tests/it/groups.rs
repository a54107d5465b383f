//! Host CFS group scheduling (`host.cgroups = "libvirt"`): golden shares of a VM's group on
//! its cores against a CPU-hog VM, compared with the flat model (`host.cgroups = "none"`).

use vcpulab_sim::api::ScenarioResult;

use super::run_inline;

/// The OC run of a `vcpus`-vCPU VM whose `busy` threads compute `work` each, next to a CPU-hog
/// VM (a busy thread per vCPU), with `sets`.
fn next_to_hog(vcpus: u32, busy: u32, work: &str, sets: &[&str]) -> Vec<ScenarioResult> {
    let exp = format!("scenarios = [\"OC\"]\nvcpus = [{vcpus}]\noc_vms = 2\ncorunner = \"cpuhog\"\n");
    let prog = format!("[[workloads.w.groups]]\nname = \"busy\"\nthreads = {busy}\nprogram = [ {{ compute = \"{work}\" }} ]\n");
    run_inline(&exp, &prog, sets)
}

/// A VM whose `busy` threads compute `work` each (one per vCPU, the others idle), next to a
/// CPU-hog VM with a busy thread on every vCPU, both pinned one vCPU per core on 4 cores.
fn lone_busy(busy: u32, work: &str, cgroups: &str) -> f64 {
    let cg = format!("host.cgroups=\"{cgroups}\"");
    next_to_hog(4, busy, work, &[cg.as_str(), "vm.pin=true"])[0].t_virt_s.expect("a VM time")
}

/// One busy vCPU of four, next to a hog VM. Flat, its thread weighs as much as the hog's vCPU
/// on its core: half the core, 2 s for 1 s of work. In groups, once the idle vCPUs' load
/// averages have decayed, the VM's whole share (1024) sits on the busy core, the hog VM's is
/// spread over four (256 each): 1024 / 1280 = 80 % of the core, 1.25 s, plus the PELT warm-up
/// (the hog's per-core weight starts at its full 1024 and falls with a 32 ms half-life).
#[test]
fn a_vm_concentrates_its_share_on_its_busy_vcpu() {
    check(1, 1.24..1.40);
}

/// Two busy vCPUs of four: the VM's 1024 is split over its two loaded cores (512 each) against
/// the hog VM's 256 per core: 2/3 of each core, 1.5 s for 1 s of work (flat: half, 2 s).
#[test]
fn a_vm_share_is_split_over_its_loaded_cores() {
    check(2, 1.48..1.62);
}

/// With `busy` busy vCPUs and 1 s of work each: flat, half the core (2 s); in groups, `grouped`.
fn check(busy: u32, grouped: std::ops::Range<f64>) {
    let (f, g) = (lone_busy(busy, "1s", "none"), lone_busy(busy, "1s", "libvirt"));
    assert!((1.95..2.1).contains(&f), "flat {f}");
    assert!(grouped.contains(&g), "grouped {g}");
}

/// `host.native_groups`: two native instances (OC2's baseline), one with a single busy thread
/// and one with four, on 4 cores. Flat, the lone thread shares its core with one of the other
/// instance's threads (its core holds two of the five threads): it gets about half a core, 2 s
/// for 1 s of work. With a group per instance each instance's share is its group's: the lone
/// thread's group puts its whole 1024 on its core against the other group's quarter there,
/// 80 % of the core, until the other instance's threads on the three other cores finish (1 s);
/// then that group's share moves to its last thread and the two split the core: about 1.37 s.
#[test]
fn native_instances_in_groups_share_by_instance() {
    let exp = "scenarios = [\"OC2\"]\nvcpus = [4]\n";
    let prog = "[[workloads.w.groups]]\nname = \"busy\"\nthreads = 4\nprogram = [ { compute = \"1s\" } ]\n\
                [[workloads.lone.groups]]\nname = \"one\"\nthreads = 1\nprogram = [ { compute = \"1s\" } ]\n";
    let run = |grouped: bool| {
        let g = format!("host.native_groups={grouped}");
        let r =
            run_inline(exp, prog, &[g.as_str(), "experiment.workloads=[\"lone\"]", "experiment.corunner=\"w\"", "host.pin_threads=true"]);
        r[0].t_native_s
    };
    let (flat, grouped) = (run(false), run(true));
    assert!((1.9..2.1).contains(&flat), "flat {flat}");
    assert!((1.3..1.45).contains(&grouped), "grouped {grouped}");
}

/// `vm.emulator`: QEMU's emulator threads live in their VM's group (libvirt's `emulator`
/// child). One core, a busy 1-vCPU VM whose emulator thread is always busy, next to a CPU-hog
/// VM: in groups the VM's half of the core is split between its vCPU and its emulator thread
/// (a quarter each, 4 s for 1 s of work); flat, the three threads get a third each (3 s).
#[test]
fn emulator_threads_share_their_vm_group() {
    let run = |cgroups: &str| {
        let cg = format!("host.cgroups=\"{cgroups}\"");
        let emu = "vms.0.emulator={count=1, run=\"1s\", interval=\"1us\"}";
        next_to_hog(1, 1, "1s", &[cg.as_str(), emu])[0].t_virt_s.expect("a VM time")
    };
    let (flat, grouped) = (run("none"), run("libvirt"));
    assert!((2.9..3.15).contains(&flat), "flat {flat}");
    assert!((3.85..4.2).contains(&grouped), "grouped {grouped}");
}

/// cgroup v2's `cpu.weight` 200 is v1's `cpu.shares` 2048 (Linux converts w × 1024 / 100): the
/// same run either way, and a heavier VM group gets more of the shared cores than the hog VM.
#[test]
fn cpu_weight_is_the_v2_spelling_of_the_shares() {
    let v2 = next_to_hog(2, 2, "100ms", &["vms.0.cpu_weight=200"]);
    let v1 = next_to_hog(2, 2, "100ms", &["vms.0.weight=2048"]);
    assert_eq!(v1[0].run, v2[0].run);
    let t = v2[0].t_virt_s.expect("a VM time");
    // 2048 against 1024 per core: two thirds of each core, 0.15 s for 0.1 s of work.
    assert!((0.145..0.16).contains(&t), "{t}");
}

/// `vms.N.vcpus`: a VM's share is its group's whatever its vCPU count. The measured VM has 2
/// busy vCPUs on cores 0 and 1, a CPU-hog VM one vCPU on core 0. In groups the measured VM's
/// 1024 is spread over its two cores (512 each) and the hog VM's sits whole on core 0: the
/// measured vCPU there gets a third of the core until its sibling's thread finishes (1 s), then,
/// its group's load having moved to core 0, half; flat it gets half all along (2 s for 1 s).
#[test]
fn a_vm_share_does_not_grow_with_its_vcpu_count() {
    let run = |cgroups: &str| {
        let cg = format!("host.cgroups=\"{cgroups}\"");
        let r = next_to_hog(2, 2, "1s", &[cg.as_str(), "vms.1.vcpus=1", "guest.pin_threads=true", "vm.pin=true"]);
        assert_eq!(r[0].run.vms[1].vcpus.len(), 1, "the hog VM has one vCPU");
        r[0].t_virt_s.expect("a VM time")
    };
    let (flat, grouped) = (run("none"), run("libvirt"));
    assert!((1.95..2.1).contains(&flat), "flat {flat}");
    assert!((2.3..2.45).contains(&grouped), "grouped {grouped}");
}
