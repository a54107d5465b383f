//! Directed-yield storms (issue 51 item 6): two VMs whose spinners boost each other's
//! preempted vCPUs on the cores they share, faster than a vCPU switch completes, so that
//! neither VM's lock holder (or next ticket holder) ever reaches guest mode.
//!
//! What bounds them in Linux v3.19.8 (DIS's host kernel, the DIS-R720 preset), and what the
//! model lacked before:
//! - `yield_to` takes both run-queue locks (`double_rq_lock`, kernel/sched/core.c); a CPU that
//!   switches holds its own through `context_switch` until `finish_lock_switch`, so a spinner
//!   that boosts a vCPU on a core busy switching waits there;
//! - `kvm_sched_in` clears `vcpu->preempted` only after that (virt/kvm/kvm_main.c, from
//!   `finish_task_switch`): a vCPU being switched in is still a candidate of
//!   `kvm_vcpu_on_spin`, and a yield to it waits for the lock and then fails (`task_running`);
//! - `kvm_vcpu_on_spin` returns, clearing `in_spin_loop`, as soon as a vCPU switched out by its
//!   own yield runs again, not when it next enters the guest.

use super::try_run_text;

/// The cell of DIS-3.1 (and DIS-3.10a/b) that reached the suite's 200 M-event limit at 11.1 s of
/// virtual time: ebizzy (glibc 2.19, so every free trims the heap and every record faults its
/// pages back in through the guest's LRU lock) in two 16-vCPU VMs of 32 threads each, a fixed
/// 4,096-cycle PLE window, seed 2. The storm formed in the run's tail, at ~0.5 s: most threads
/// done and their vCPUs halted, so the other VM's spinners on those cores yielded for free,
/// and both VMs' blocking vCPUs (VM 0's `lru_lock` holder, VM 1's next ticket) shared core 0.
const DIS_3_1_STORM: &str = "[platform]\npreset = \"DIS-R720\"\n\
    [experiment]\nworkloads = [\"ebizzy\"]\nscenarios = [\"OC\"]\nvcpus = [16]\nthreads = 32\nseeds = [2]\n\
    vary = { \"experiment.oc_vms\" = [2] }\n\
    [vm.ple]\nwindow_policy = \"fixed\"\nwindow_cycles = 4096\n\
    [workloads.ebizzy.params]\nrecords = 300\n\
    [limits]\nmax_events = 40000000\n";

#[test]
fn the_directed_yield_storm_of_dis_3_1_ends() {
    for r in try_run_text(DIS_3_1_STORM, &[]) {
        let r = r.unwrap_or_else(|e| panic!("the run must finish: {e}"));
        // The other seeds' cells take 12-15 M events and 1.1-1.4 s.
        assert!(r.events < 20_000_000, "{} events", r.events);
        let t = r.t_virt_s.expect("OC cell");
        assert!(t < 2.0, "t_virt = {t} s");
    }
}
