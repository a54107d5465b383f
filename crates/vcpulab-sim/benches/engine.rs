//! Criterion benchmarks: the event queue on a synthetic mix, and whole small simulations.
//! Run with `cargo bench -p vcpulab-sim`; figures are recorded in docs/performance.md.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vcpulab_sim::api::Plan;
use vcpulab_sim::engine::{EventQueue, SimTime, Stream};
use vcpulab_sim::scenario::{simulate_run, Layout};

/// A steady-state queue of `live` pending events; each pop schedules one new event a random
/// distance ahead (like segment ends, timers and IPIs do), so size stays constant.
fn queue_mix(c: &mut Criterion) {
    const N: u64 = 1_000_000;
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(N));
    for live in [64usize, 4096] {
        g.bench_function(format!("queue_pop_push_live{live}"), |b| {
            b.iter(|| {
                let mut q = EventQueue::new();
                let mut rng = Stream::new(1);
                for i in 0..live {
                    q.schedule(SimTime(rng.below(10_000)), i as u32);
                }
                for _ in 0..N {
                    let (t, e) = q.pop().expect("non-empty");
                    q.schedule(t + 1 + rng.below(10_000), black_box(e));
                }
                black_box(q.len())
            })
        });
    }
    g.finish();
}

fn whole_runs(c: &mut Criterion) {
    let mut g = c.benchmark_group("model");
    g.sample_size(10);
    for (wl, layout) in [("barrier", Layout::Vms { vms: 2 }), ("lock", Layout::Vms { vms: 1 }), ("lock", Layout::Native { instances: 1 })] {
        let text = format!("[experiment]\nworkloads = [\"{wl}\"]\nscenarios = [\"native\"]\nvcpus = [16]\n");
        let plan = Plan::new(&text, "bench", &[]).expect("valid");
        let cfg = plan.run_config(&plan.cells()[0], layout);
        let events = simulate_run(&cfg).expect("runs").events;
        g.throughput(Throughput::Elements(events));
        g.bench_function(format!("{wl}_{}", layout.describe().replace(' ', "_")), |b| {
            b.iter(|| black_box(simulate_run(&cfg).expect("runs").events))
        });
    }
    g.finish();
}

criterion_group!(benches, queue_mix, whole_runs);
criterion_main!(benches);
