//! Content keys of simulations and cells, and baselines provided from elsewhere (what a
//! distributed, resumable sweep relies on).

use vcpulab_sim::api::{Plan, RunSummary};

const SPEC: &str = r#"
[experiment]
workloads = ["lock"]
scenarios = ["native", "UC", "OC", "OC2"]
vcpus = [4]
seeds = [1, 2]
vary = { "vm.tlb" = ["ipi", "pv"] }
"#;

#[test]
fn keys_identify_simulations_by_content() {
    let plan = Plan::new(SPEC, "t.toml", &[]).unwrap();
    let jobs: Vec<_> = (0..plan.cells().len()).map(|i| plan.cell_jobs(i)).collect();
    let cells = plan.cells();
    // Cells are unique; repetitions (seeds) of one configuration share its config key.
    let mut keys: Vec<_> = jobs.iter().map(|j| j.key.clone()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), cells.len());
    for (a, ja) in cells.iter().zip(&jobs) {
        for (b, jb) in cells.iter().zip(&jobs) {
            let same_config = a.scenario == b.scenario && a.variant == b.variant;
            assert_eq!(ja.config_key == jb.config_key, same_config, "{a:?} {b:?}");
            // The native run ignores VM settings: both TLB variants share it, per seed.
            if a.seed == b.seed && a.scenario.name() == "native" && b.scenario.name() == "native" {
                assert_eq!(ja.main.key, jb.main.key);
            }
            if a.seed == b.seed && a.scenario.name() == "UC" && b.scenario.name() == "OC" {
                assert_eq!(ja.base, jb.base, "UC and OC share the native baseline");
                assert_eq!(ja.main.key == jb.alone.as_ref().unwrap().key, a.variant == b.variant, "OC's 1-VM reference is UC's run");
            }
        }
    }
    let oc2 = cells.iter().position(|c| c.scenario.name() == "OC2").unwrap();
    let base = jobs[oc2].base.as_ref().unwrap();
    assert_eq!((base.layout, base.count), ("native", 2));
    // Keys do not depend on the spec's other axes: a cell of a bigger spec has the same key.
    let bigger = Plan::new(&SPEC.replace("vcpus = [4]", "vcpus = [2, 4]"), "u.toml", &[]).unwrap();
    let same = (0..bigger.cells().len()).find(|&i| bigger.cells()[i] == cells[0]).unwrap();
    assert_eq!(bigger.cell_jobs(same), jobs[0]);
}

#[test]
fn provided_baselines_give_the_same_results_as_simulated_ones() {
    let mut whole = Plan::new(SPEC, "t.toml", &[]).unwrap();
    let oc = whole.cells().iter().position(|c| c.scenario.name() == "OC").unwrap();
    let reference = whole.run_cell(oc).unwrap();
    let summaries = whole.take_new_summaries();
    assert_eq!(summaries.len(), 3, "OC's run, its native baseline and its 1-VM reference");

    // A fresh plan that is given the baselines simulates only the OC run.
    let mut part = Plan::new(SPEC, "t.toml", &[]).unwrap();
    let jobs = part.cell_jobs(oc);
    for (k, s) in &summaries {
        if Some(k) != Some(&jobs.main.key) {
            part.provide_summary(k, *s);
        }
    }
    let r = part.run_cell(oc).unwrap();
    assert_eq!(part.take_new_summaries().len(), 1);
    assert_eq!(r.delta_eta_t, reference.delta_eta_t);
    assert_eq!(r.weighted_speedup, reference.weighted_speedup);
    assert_eq!(r.events, reference.events);

    // A dependency job on its own returns the same summary.
    let mut lone = Plan::new(SPEC, "t.toml", &[]).unwrap();
    let base = jobs.base.unwrap();
    let s: RunSummary = lone.run_job(oc, base.to_layout()).unwrap();
    assert!(summaries.iter().any(|(k, v)| *k == base.key && *v == s));
}

#[test]
fn vary_accepts_the_shape_fields_of_the_experiment() {
    let spec = SPEC.replace("vary = { \"vm.tlb\" = [\"ipi\", \"pv\"] }", "vary = { \"experiment.oc_vms\" = [2, 3] }");
    let plan = Plan::new(&spec, "t.toml", &[]).unwrap();
    let ks: Vec<u32> = plan.cells().iter().filter(|c| c.scenario.name() == "OC2").map(|c| c.oc_vms).collect();
    assert_eq!(ks, vec![2, 3, 2, 3]);
    let oc2 = plan.cells().iter().position(|c| c.scenario.name() == "OC2" && c.oc_vms == 3).unwrap();
    assert_eq!(plan.cell_jobs(oc2).base.unwrap().count, 3);
    let e = Plan::new(&SPEC.replace("\"vm.tlb\"", "\"experiment.vcpus\""), "t.toml", &[]).unwrap_err().to_string();
    assert!(e.contains("vary.\"experiment.vcpus\"") && e.contains("experiment.oc_vms"), "{e}");
}
