//! APPLES (DIS ch.3) at reduced size: the shipped `examples/apples.toml` with fewer workloads,
//! seeds and dbench cycles, checked against the shapes DIS reports.

use std::collections::BTreeMap;

use vcpulab_sim::api::ScenarioResult;

use super::run_text;

fn example() -> String {
    let path = format!("{}/../../examples/apples.toml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const FIXED: [u64; 5] = [512, 4096, 8192, 16384, 32768];

/// Mean over seeds of t(KVM) / t(variant), by (workload, scenario, variant).
fn performance(r: &[ScenarioResult]) -> BTreeMap<(String, String, String), f64> {
    let mut sums: BTreeMap<(String, String, String), (f64, u32)> = BTreeMap::new();
    for c in r {
        let kvm = r
            .iter()
            .find(|k| k.variant == "KVM" && k.workload == c.workload && k.scenario == c.scenario && k.seed == c.seed)
            .expect("every cell has its KVM cell");
        let e = sums.entry((c.workload.clone(), c.scenario.name().to_string(), c.variant.clone())).or_default();
        e.0 += kvm.t_virt_s.unwrap() / c.t_virt_s.unwrap();
        e.1 += 1;
    }
    sums.into_iter().map(|(k, (s, n))| (k, s / f64::from(n))).collect()
}

#[test]
fn apples_example_reproduces_the_shapes_of_dis() {
    let r = run_text(
        &example(),
        // kspin at 8,000 iterations: long enough for APLE's threshold to settle (below).
        // The 5.13 candidate rule (the DIS presets' until 2026-12-08): at this reduced size, with
        // 3.19's own rule (`v3.10`, the presets' now), dbench spins too little to count as
        // spinlock-intensive and kspin's best fixed window is 512 cycles, with APLE 11 % behind
        // KVM. The shapes under 3.19's rule are judged at full size by the suite (DIS-3.1, 3.5,
        // 3.10a), where APPLES gains 10 % on average; the reduced-size gap is listed in
        // docs/inversions.md.
        &[
            "vm.ple.yield_candidates=\"v5.13\"",
            "experiment.workloads=[\"dbench\", \"kspin\", \"kernbench\"]",
            "experiment.seeds=[1, 2]",
            "workloads.dbench.params.cycles=1500",
            "workloads.kspin.params.iterations=8000",
        ],
    );
    let perf = performance(&r);
    let p = |w: &str, sc: &str, v: &str| perf[&(w.to_string(), sc.to_string(), v.to_string())];
    let ineff = |w: &str, v: &str| {
        let cells: Vec<f64> = r
            .iter()
            .filter(|c| c.workload == w && c.scenario.name() == "OC" && c.variant == v)
            .map(|c| c.metrics["ple_inefficiency"])
            .collect();
        cells.iter().sum::<f64>() / cells.len() as f64
    };
    let workloads = ["dbench", "kspin", "kernbench"];
    // Spinlock-intensive: inefficiency > 5 % with the fixed 512-cycle window.
    let intensive: Vec<&str> = workloads.iter().copied().filter(|w| ineff(w, "fixed 512") > 0.05).collect();
    assert!(intensive.contains(&"dbench") && intensive.contains(&"kspin"), "spinlock-intensive: {intensive:?}");
    assert!(!intensive.contains(&"kernbench"), "kernbench at 512 cycles: {}", ineff("kernbench", "fixed 512"));

    // The fixed-window sweep: the window matters for a spin-heavy workload (its best fixed
    // window beats the 512-cycle one by more than 5 %). Whether the optimum is interior is
    // DIS-3.1's published shape, judged at full size by the reproduction suite: on DIS's
    // testbed (DIS-R720) at this reduced size the best and the largest windows differ by < 1 %.
    let best = |w: &str| {
        FIXED.iter().copied().max_by(|a, b| p(w, "OC", &format!("fixed {a}")).total_cmp(&p(w, "OC", &format!("fixed {b}")))).unwrap()
    };
    let matters = intensive.iter().any(|w| p(w, "OC", &format!("fixed {}", best(w))) > p(w, "OC", "fixed 512") + 0.05);
    assert!(matters, "no spin-heavy workload gains from a larger window: {perf:?}");
    let bests: Vec<u64> = workloads.iter().map(|w| best(w)).collect();
    assert!(bests.iter().any(|&b| b != bests[0]), "the best fixed window is the same for all: {bests:?}");

    // APLE within 3 % of the best fixed window on the spin-heavy set; APPLES >= KVM on average.
    for w in &intensive {
        let (aple, fixed) = (p(w, "OC", "APLE"), p(w, "OC", &format!("fixed {}", best(w))));
        assert!(aple >= fixed - 0.03, "{w}: APLE {aple} vs best fixed {fixed}");
    }
    let apples = intensive.iter().map(|w| p(w, "OC", "APPLES")).sum::<f64>() / intensive.len() as f64;
    assert!(apples >= 1.0, "APPLES vs KVM on the spin-heavy set: {apples}");

    // Undercommitted (1 VM): APPLES costs no more than KVM's default, within 2 %.
    for w in workloads {
        let uc = p(w, "UC", "APPLES");
        assert!(uc >= 0.98, "{w} UC: APPLES {uc}");
    }

    // APLE's threshold settles: over the last half of its rounds, T_d stays within 4 delta.
    // The longer of the two seeds' runs: enough APLE rounds to see the threshold settle.
    let cell = r
        .iter()
        .filter(|c| c.workload == "kspin" && c.scenario.name() == "OC" && c.variant == "APLE")
        .max_by_key(|c| c.run.vms[0].ple_epochs.len())
        .unwrap();
    let epochs = &cell.run.vms[0].ple_epochs;
    let desired: Vec<u64> = epochs.iter().step_by(3).map(|e| e.threshold).collect();
    assert!(desired.len() >= 4, "too few APLE rounds: {epochs:?}");
    let tail = &desired[desired.len() / 2..];
    let (lo, hi) = (tail.iter().min().unwrap(), tail.iter().max().unwrap());
    assert!(hi - lo <= 4 * 1024, "T_d still moving: {desired:?}");
    assert!(epochs.iter().all(|e| (4096..=32768).contains(&e.threshold)), "{epochs:?}");
}

#[test]
fn every_vm_measures_its_spinning_cost() {
    // Without PLE exits nothing is wasted; with them the record's parts add up.
    let r = run_text(
        &example(),
        &[
            "experiment.workloads=[\"kspin\"]",
            "experiment.seeds=[1]",
            "experiment.scenarios=[\"OC\"]",
            "workloads.kspin.params.iterations=500",
        ],
    );
    for c in &r {
        for vm in &c.run.vms {
            let s = &vm.spin;
            assert_eq!(s.ple_exits, vm.ple.exits, "{}: every PLE exit is counted", c.variant);
            assert!(s.cpu_ns > 0 && s.cpu_ns <= c.run.duration_ns * c.run.cores as u64);
            let expect = (s.wasted_spin_ns + s.switch_ns) as f64 / s.cpu_ns as f64;
            assert!((s.inefficiency - expect).abs() < 1e-12);
            if c.variant.starts_with("fixed ") {
                let w: u64 = c.variant[6..].parse().unwrap();
                let ns = ((w as f64 / 2.4).round() as u64).max(1);
                assert_eq!(s.wasted_spin_ns, s.ple_exits * ns, "{}: the window is wasted at every exit", c.variant);
            }
            // An APLE epoch closes at every 1,000th PLE exit; other policies have none.
            let epochs = if vm.window_policy == "aple" { s.ple_exits / 1000 } else { 0 };
            assert_eq!(vm.ple_epochs.len() as u64, epochs, "{}", c.variant);
        }
    }
}
