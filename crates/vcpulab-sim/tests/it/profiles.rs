//! The checked characterization of the benchmark library (issue: workload library): every
//! profile that declares a scalability type shows it when run natively at 16 threads on 16
//! cores, and the profiles known for a behaviour show it in their counters.

use vcpulab_sim::characterize::{characterize, Characterization, DEFAULT_SLICE_NS};
use vcpulab_sim::workload::builtin::BUILTINS;

fn run(name: &str) -> Characterization {
    characterize(name, 16, 1, DEFAULT_SLICE_NS, &[]).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_profile_shows_its_reference_scalability_type() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (name, _) in BUILTINS.iter().filter(|(n, _)| n.contains('.')) {
        let c = run(name);
        assert!(c.version >= 1, "{name}: a profile needs a version");
        if c.expected_type == 0 {
            continue;
        }
        checked += 1;
        if c.scalability_type != c.expected_type {
            wrong.push(format!(
                "{name}: type {} (parallelism {:.1}/16, {:.0} blocks/thread/s), reference type {}",
                c.scalability_type, c.parallelism, c.sync_per_thread_s, c.expected_type
            ));
        }
    }
    assert!(checked >= 20, "only {checked} classified profiles");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn known_behaviours_show_in_the_counters() {
    for name in ["parsec.dedup", "parsec.vips"] {
        let c = run(name);
        assert!(c.shootdowns_per_s > 500.0, "{name}: heap trimming should shoot down TLBs: {:.0}/s", c.shootdowns_per_s);
    }
    for name in ["splash2x.volrend", "parsec.streamcluster"] {
        let c = run(name);
        assert!(c.spin_frac > 0.01, "{name}: user-level spinning should show: {:.3}", c.spin_frac);
    }
    let quiet = run("parsec.swaptions");
    assert!(quiet.shootdowns_per_s < 1.0 && quiet.spin_frac < 0.01);
}
