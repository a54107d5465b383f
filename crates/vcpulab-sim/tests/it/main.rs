//! Integration tests of the simulator through its public API (one binary, several modules).

mod apples;
mod bandwidth;
mod examples;
mod futex;
mod golden;
mod groups;
mod invariants;
mod jobs;
mod kernel_locks;
mod language;
mod mechanisms;
mod numa;
mod profiles;
mod scalability;
mod scenarios;
mod storms;
mod timeline;

use vcpulab_sim::api::{CellError, Plan, ScenarioResult};

/// A spec with one inline workload `w`.
fn inline_text(experiment: &str, workload: &str) -> String {
    format!("[experiment]\nworkloads = [\"w\"]\n{experiment}\n[workloads.w]\n{workload}\n")
}

/// Builds a spec with one inline workload `w` and runs every cell.
pub fn run_inline(experiment: &str, workload: &str, sets: &[&str]) -> Vec<ScenarioResult> {
    run_text(&inline_text(experiment, workload), sets)
}

/// Like [`run_inline`], yielding each cell's outcome (cells run one by one, as consumed) for
/// a test that accepts some failures.
pub fn try_run_inline(experiment: &str, workload: &str, sets: &[&str]) -> impl Iterator<Item = Result<ScenarioResult, CellError>> {
    try_run_text(&inline_text(experiment, workload), sets)
}

/// Runs every cell of a spec text.
pub fn run_text(text: &str, sets: &[&str]) -> Vec<ScenarioResult> {
    try_run_text(text, sets).map(|r| r.unwrap_or_else(|e| panic!("{e}"))).collect()
}

fn try_run_text(text: &str, sets: &[&str]) -> impl Iterator<Item = Result<ScenarioResult, CellError>> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let mut plan = Plan::new(text, "test.toml", &sets).unwrap_or_else(|e| panic!("{e}"));
    (0..plan.cells().len()).map(move |i| plan.run_cell(i))
}

/// Sets that make every virtualization-specific cost zero.
pub const NO_VIRT_COSTS: &[&str] = &[
    "machine.costs.exit_hlt=0",
    "machine.costs.exit_msr_tsc_deadline=0",
    "machine.costs.exit_msr_icr=0",
    "machine.costs.exit_msr_eoi=0",
    "machine.costs.exit_interrupt_window=0",
    "machine.costs.exit_preemption_timer=0",
    "machine.costs.exit_external_interrupt=0",
    "machine.costs.exit_pause=0",
    "machine.costs.exit_vmcall=0",
    "machine.costs.yield_to=0",
    "machine.costs.ple_scan_per_vcpu=0",
    "machine.costs.vcpu_switch=0",
    "machine.costs.host_wakeup=0",
    "machine.costs.ipi_posted_latency=1000",
];
