//! Runs a spec file and prints one summary line per cell (a debugging aid; the user-facing
//! CLI is `vcpulab run`). Usage: `cargo run --release --example run_spec -- SPEC [PATH=VALUE ...]`.

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: run_spec SPEC [PATH=VALUE ...]");
    let sets: Vec<String> = args.collect();
    let text = std::fs::read_to_string(&path).expect("readable spec");
    let mut plan = match vcpulab_sim::api::Plan::new(&text, &path, &sets) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    for i in 0..plan.cells().len() {
        match plan.run_cell(i) {
            Ok(r) => println!(
                "{:<12} {:<14} {:<6} v={:<3} tn={:.4} tv={:<8} dt={:<8} dr={:<8} ws={:<6} ev={} wall={:.3}s exits={:?}\n    metrics={:?}",
                r.workload,
                r.variant,
                r.scenario.name(),
                r.vcpus,
                r.t_native_s,
                r.t_virt_s.map_or("-".into(), |v| format!("{v:.4}")),
                r.delta_eta_t.map_or("-".into(), |v| format!("{v:.4}")),
                r.delta_eta_r.map_or("-".into(), |v| format!("{v:.4}")),
                r.weighted_speedup.map_or("-".into(), |v| format!("{v:.3}")),
                r.events,
                r.wall_s,
                r.exits,
                r.metrics
            ),
            Err(e) => eprintln!("error: {e}"),
        }
    }
}
