//! Scalability on big VMs and dynamic asymmetric vCPUs (DIS ch.4, ch.5) at reduced
//! size: the shipped examples with fewer workloads, vCPU counts and seeds, checked against
//! the shapes DIS describes.

use vcpulab_sim::api::ScenarioResult;

use super::run_text;

fn example(name: &str) -> String {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Mean of `f` over the cells matching `keep`.
fn mean(r: &[ScenarioResult], keep: impl Fn(&ScenarioResult) -> bool, f: impl Fn(&ScenarioResult) -> f64) -> f64 {
    let v: Vec<f64> = r.iter().filter(|c| keep(c)).map(f).collect();
    assert!(!v.is_empty(), "no cell matches");
    v.iter().sum::<f64>() / v.len() as f64
}

fn eff(c: &ScenarioResult) -> f64 {
    c.metrics["eff_speedup"]
}

#[test]
fn type_4_scales_better_on_the_consolidated_vm_and_longer_periods_do_not_hurt_it() {
    let r = run_text(&example("scalability.toml"), &["experiment.workloads=[\"fmm\", \"blackscholes\"]", "experiment.vcpus=[8]"]);
    for w in ["fmm", "blackscholes"] {
        let at = |sc: &str, period: &str| mean(&r, |c| c.workload == w && c.scenario.name() == sc && c.variant.ends_with(period), eff);
        let (pm, vm24, vm192) = (at("native", "=24ms"), at("OC", "=24ms"), at("OC", "=192ms"));
        assert!(vm24 > pm, "{w}: consolidated VM {vm24:.3} <= bare metal {pm:.3}");
        assert!(vm192 >= vm24, "{w}: 192 ms period {vm192:.3} < 24 ms {vm24:.3}");
        // The measured speedup agrees with the efficiency-based one natively (no
        // busy-waiting in these profiles): t(1) / t(8) ≈ eff_speedup.
        let t1 = run_text(
            &example("scalability.toml"),
            &[
                &format!("experiment.workloads=[\"{w}\"]"),
                "experiment.vcpus=[1]",
                "experiment.scenarios=[\"native\"]",
                "experiment.seeds=[1]",
                "experiment.vary={}",
            ],
        );
        let c8 = r.iter().find(|c| c.workload == w && c.scenario.name() == "native" && c.seed == 1).unwrap();
        let measured = t1[0].t_native_s / c8.t_native_s;
        assert!((measured - eff(c8)).abs() / measured < 0.1, "{w}: measured {measured:.3} vs efficiency {:.3}", eff(c8));
    }
    // The decomposition accounts for the whole available time.
    for c in &r {
        let m = &c.metrics;
        let sum = m["eff_useful"] + m["eff_busy_wait"] + m["eff_overhead"] + m["eff_unused"] - m["eff_borrowed"];
        assert!((sum - 1.0).abs() < 1e-9, "{} {}: parts sum to {sum}", c.workload, c.variant);
    }
}

#[test]
fn balanced_and_host_matched_fork_join_beat_imbalanced() {
    // The mechanisms checked on the TPDS testbed, where this example was written; on its own
    // testbed (DIS-R720) the gap between the versions is a withheld result (DIS-4.7), which the
    // reproduction suite shows without judging.
    // Flat host weights (`host.cgroups = "none"`): every vCPU gets an equal slice of its core.
    let r = run_text(&example("forkjoin.toml"), &["experiment.seeds=[1, 2, 3, 4]", "platform.preset=\"TPDS-4S\"", "host.cgroups=\"none\""]);
    let t = |w: &str, v: &str| mean(&r, |c| c.workload == w && c.variant == v, |c| c.t_virt_s.unwrap());
    let imbalanced = t("forkjoin_imbalanced", "symmetric");
    assert!(t("forkjoin_balanced", "symmetric") < 0.85 * imbalanced, "balanced {} vs {imbalanced}", t("forkjoin_balanced", "symmetric"));
    // Flat host-matched weights re-weight a vCPU only against the other VMs' vCPUs on its own
    // core: they help only when the busy vCPU shares its core with a hog, which depends on
    // where the program's threads started. Here: they never make it slower.
    assert!(
        t("forkjoin_imbalanced", "host-matched") <= 1.01 * imbalanced,
        "host-matched {} vs {imbalanced}",
        t("forkjoin_imbalanced", "host-matched")
    );
    // The asymmetric-vCPU policy also wins time back on the imbalanced version.
    let asym = t("forkjoin_imbalanced", "asymmetric");
    assert!(asym < imbalanced, "asymmetric {asym} vs symmetric {imbalanced}");
    // In libvirt's groups the asymmetric policy re-weights the vCPUs within the VM's share
    // and still wins time back.
    let r = run_text(&example("forkjoin.toml"), &["experiment.seeds=[1, 2, 3, 4]", "platform.preset=\"TPDS-4S\""]);
    let t = |w: &str, v: &str| mean(&r, |c| c.workload == w && c.variant == v, |c| c.t_virt_s.unwrap());
    let (sym, asym) = (t("forkjoin_imbalanced", "symmetric"), t("forkjoin_imbalanced", "asymmetric"));
    assert!(asym < 0.9 * sym, "groups: asymmetric {asym} vs symmetric {sym}");
}

#[test]
fn asymmetric_vcpus_beat_symmetric_on_average_with_a_cpu_hog_and_each_component_switches() {
    let r = run_text(
        &example("asymmetric.toml"),
        &[
            "experiment.workloads=[\"streamcluster\", \"bodytrack\", \"blackscholes\", \"canneal\", \"freqmine\"]",
            "experiment.vary={ \"experiment.corunner\" = [\"cpuhog\"] }",
            "experiment.seeds=[1]",
        ],
    );
    let t = |w: &str, v: &str| r.iter().find(|c| c.workload == w && c.variant.starts_with(v)).unwrap().t_virt_s.unwrap();
    let workloads = ["streamcluster", "bodytrack", "blackscholes", "canneal", "freqmine"];
    let gain = workloads.iter().map(|w| t(w, "symmetric;") / t(w, "asymmetric;")).sum::<f64>() / workloads.len() as f64;
    assert!(gain > 1.0, "asymmetric vs symmetric: mean t_sym / t_asym = {gain:.3}");
    // Each component is switchable and reported.
    for c in &r {
        let a = c.run.asymmetric.as_ref();
        match c.variant.split(';').next().unwrap() {
            "symmetric" => assert!(a.is_none()),
            "allocation only" => {
                let a = a.unwrap();
                assert!(a.allocation && !a.latency && !a.resolver && a.counts.grown > 0);
                assert_eq!(a.counts.latency_lowered + a.counts.balance_swaps + a.counts.urgency_swaps, 0);
            }
            "latency only" => {
                let a = a.unwrap();
                assert!(!a.allocation && a.latency && !a.resolver && a.counts.grown == 0);
                assert!(c.run.vms[0].vcpus.iter().all(|v| v.weight == 1024 && v.migrations == 0));
            }
            "asymmetric" => assert!(a.unwrap().allocation && a.unwrap().latency && a.unwrap().resolver),
            _ => {}
        }
    }
}

#[test]
fn asymmetric_runs_conserve_time_and_repeat_bit_for_bit() {
    let text = example("asymmetric.toml");
    let sets = [
        "experiment.workloads=[\"forkjoin_imbalanced\"]",
        "experiment.vary={ \"experiment.corunner\" = [\"none\"] }",
        "experiment.seeds=[3]",
    ];
    let (a, b) = (run_text(&text, &sets), run_text(&text, &sets));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(serde_json::to_string(&x.run).unwrap(), serde_json::to_string(&y.run).unwrap(), "{}", x.variant);
        assert_eq!(x.run.attributed_ns, u64::from(x.run.cores) * x.run.duration_ns, "{}: time not conserved", x.variant);
        // Four identical instances: every VM is measured.
        assert_eq!(x.run.measured().count(), 4);
    }
    // The resolver moved vCPUs (identical fork-join VMs put every heavy vCPU 0 on core 0).
    let full = a.iter().find(|c| c.variant.starts_with("asymmetric;")).unwrap();
    assert!(full.run.asymmetric.as_ref().unwrap().counts.balance_swaps > 0);
}
