//! Memory, NUMA and cache opacity (TPDS §6.1/§7.2; DIS ch.2 §2.4.5) at reduced size: the shipped
//! `examples/numa.toml` with fewer workloads and vCPU counts, checked against the shapes the
//! research describes.

use vcpulab_sim::api::ScenarioResult;

use super::run_text;

fn example() -> String {
    let path = format!("{}/../../examples/numa.toml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn cell<'a>(r: &'a [ScenarioResult], w: &str, variant: &str, vcpus: u32) -> &'a ScenarioResult {
    r.iter()
        .find(|c| c.workload.ends_with(w) && c.variant == variant && c.vcpus == vcpus && c.scenario.name() == "UC")
        .unwrap_or_else(|| panic!("no UC cell {w} {variant} {vcpus}"))
}

fn dt(c: &ScenarioResult) -> f64 {
    c.delta_eta_t.expect("a VM cell has δη_t")
}

#[test]
fn numa_hidden_costs_once_the_vm_spans_sockets_and_exposing_it_removes_most() {
    let r = run_text(&example(), &["experiment.workloads=[\"canneal\", \"ocean_cp\", \"swaptions\"]", "experiment.vcpus=[16, 32]"]);
    for w in ["canneal", "ocean_cp"] {
        let (fits, spans) = (dt(cell(&r, w, "hidden", 16)), dt(cell(&r, w, "hidden", 32)));
        // Within one socket hiding NUMA costs nothing: δη_t is what the VM costs anyway
        // (ocean_cp's PARMACS barriers leave through their mutex one vCPU wake-up after the
        // other, about 2 %), the same as with the topology exposed.
        let fits_exposed = dt(cell(&r, w, "exposed", 16));
        assert!((fits - fits_exposed).abs() < 0.005, "{w}: δη_t {fits:.3} hidden vs {fits_exposed:.3} exposed within one socket");
        assert!(fits.abs() < 0.04, "{w}: δη_t {fits:.3} within one socket");
        // Clearly above the within-socket bound; whether a profile reaches the "high guest"
        // category (guest part above 0.1, at some vCPU count up to 64) is judged on the TPDS
        // matrix of the scoreboard, not at this reduced size.
        assert!(spans > 0.05, "{w}: δη_t {spans:.3} spanning two sockets with NUMA hidden");
        // Exposing the topology removes most (more than half) of what spanning sockets added
        // (the rest of δη_t is the VM's cost of blocking and of its page faults' allocator
        // locks, which grow with the vCPU count on their own).
        let exposed = dt(cell(&r, w, "exposed", 32));
        assert!(
            exposed - fits < (spans - fits) / 2.0,
            "{w}: exposing NUMA leaves δη_t {exposed:.3} of {spans:.3} ({fits:.3} within a socket)"
        );
        // The cause is visible: remote accesses and CPI. With NUMA hidden, data the main
        // thread builds (canneal) is spread over the nodes; a thread's own data (ocean_cp)
        // stays where the thread first touched it, so only its shared data and the data of
        // threads the guest moved are remote.
        let (h, e) = (&cell(&r, w, "hidden", 32).metrics, &cell(&r, w, "exposed", 32).metrics);
        assert!(h["mem_remote_fraction"] > 0.15 && e["mem_remote_fraction"] < 0.1, "{w}: remote {h:?} vs {e:?}");
        assert!(h["cpi"] > e["cpi"], "{w}: CPI hidden {} <= exposed {}", h["cpi"], e["cpi"]);
    }
    // A compute-bound profile does not care.
    for v in ["hidden", "exposed", "numad", "spread"] {
        for n in [16, 32] {
            let c = cell(&r, "swaptions", v, n);
            assert!(dt(c).abs() < 0.01, "swaptions {v} {n}: δη_t {:.4}", dt(c));
            assert!((c.metrics["cpi"] - 1.0).abs() < 0.01, "swaptions {v} {n}: CPI {}", c.metrics["cpi"]);
        }
    }
}

#[test]
fn the_balancer_buys_locality_with_host_cycles_and_hurts_a_bandwidth_bound_profile() {
    let r = run_text(&example(), &["experiment.workloads=[\"radix\"]", "experiment.vcpus=[32]"]);
    let (hidden, numad) = (cell(&r, "radix", "hidden", 32), cell(&r, "radix", "numad", 32));
    let (h, n) = (&hidden.metrics, &numad.metrics);
    assert!(n["numad_moves"] >= 1.0, "numad did not act: {n:?}");
    assert!(n["mem_remote_fraction"] < h["mem_remote_fraction"] / 2.0, "locality: {h:?} vs {n:?}");
    assert!(n["numad_host_ms"] > 0.0 && numad.breakdown["host"]["numa_migrate"] > 0, "no host cycles charged");
    assert!(dt(numad) > dt(hidden) + 0.1, "radix: numad δη_t {:.3} vs hidden {:.3}", dt(numad), dt(hidden));
}

#[test]
fn spreading_helps_a_bandwidth_bound_profile_and_hurts_a_sharing_one() {
    let r = run_text(
        &example(),
        &["experiment.workloads=[\"ocean_cp\", \"canneal\"]", "experiment.vcpus=[16]", "experiment.scenarios=[\"native\"]"],
    );
    let t = |w: &str, v: &str| r.iter().find(|c| c.workload.ends_with(w) && c.variant == v).map(|c| c.t_native_s).expect("native cell");
    assert!(t("ocean_cp", "spread") < 0.9 * t("ocean_cp", "hidden"), "ocean_cp gains the other nodes' bandwidth");
    assert!(t("canneal", "spread") > t("canneal", "hidden"), "canneal's threads share data across sockets");
}

#[test]
fn one_thread_in_a_vm_spanning_sockets_reads_only_its_shared_data_remotely() {
    let r = run_text(
        &example(),
        &["experiment.workloads=[\"ocean_cp\", \"canneal\"]", "experiment.vcpus=[32]", "experiment.threads=1", "experiment.variants=[]"],
    );
    // ocean_cp's threads first-touch their own subgrids: only its shared data (memory.sharing
    // 0.4 of the memory accesses, spread over the 2 nodes) is remote, 0.9 × 0.4 / 2 = 18 %,
    // not the half of everything that 32 threads see.
    let ocean = &cell(&r, "ocean_cp", "", 32).metrics;
    assert!((ocean["mem_remote_fraction"] - 0.18).abs() < 0.02, "ocean_cp: {ocean:?}");
    assert!(dt(cell(&r, "ocean_cp", "", 32)) < 0.12, "ocean_cp 1 thread: δη_t {:.3}", dt(cell(&r, "ocean_cp", "", 32)));
    // canneal's main thread builds the netlist (memory.first_touch = "main"): all of it is
    // spread, as before.
    let canneal = &cell(&r, "canneal", "", 32).metrics;
    assert!(canneal["mem_remote_fraction"] > 0.4, "canneal: {canneal:?}");
}
