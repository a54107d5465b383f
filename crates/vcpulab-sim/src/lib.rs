//! # vcpulab-sim
//!
//! A deterministic discrete-event simulator of a virtualized multicore server: cores, a host
//! kernel that schedules vCPU threads, KVM-style exits, guest kernels that schedule workload
//! threads, and workloads written as data. The same kernel model runs natively (its CPUs are
//! the cores) and inside VMs (its CPUs are vCPUs), so every virtualized run has a native twin.
//!
//! ```text
//!  spec (TOML) ──► Spec ──► Plan ──► cells ──► RunConfig ──► World::run ──► RunRecord ──► ScenarioResult
//!                                                   │
//!   core ─ host kernel CPU ─ task ─┬─ native thread ─ op
//!                                   └─ vCPU ─ guest kernel CPU ─ thread ─ op
//! ```
//!
//! Quick start:
//!
//! ```
//! use vcpulab_sim::api::Plan;
//! let spec = "[experiment]\nworkloads = [\"lock\"]\nscenarios = [\"UC\"]\nvcpus = [2]\n\
//!             [workloads.lock]\nobjects = { m = \"mutex\" }\n\
//!             program = [ { repeat = { times = 50, body = [ { compute = \"20us\" }, { lock = \"m\" }, { compute = \"2us\" }, { unlock = \"m\" } ] } } ]\n";
//! let mut plan = Plan::new(spec, "example.toml", &[]).unwrap();
//! let r = plan.run_cell(0).unwrap();
//! assert!(r.delta_eta_t.unwrap() > -0.5);
//! assert_eq!(r.run.attributed_ns, u64::from(r.run.cores) * r.run.duration_ns);
//! ```
//!
//! Modules: [`engine`] (time, queue, random streams), [`machine`] (topology, costs),
//! [`kernel`] (the OS model), [`virt`] (exits, vCPUs), [`workload`] (the workload language),
//! [`account`] (ledger, metrics), [`world`] (the simulation), [`scenario`] (native/UC/OC/OC2),
//! [`spec`] (input validation), [`api`] (plans and results), [`trace`] (traces of real programs).

pub mod account;
pub mod api;
pub mod characterize;
pub mod engine;
pub mod kernel;
pub mod machine;
pub mod platform;
pub mod policy;
pub mod scenario;
pub mod spec;
pub mod trace;
pub mod virt;
pub mod workload;
pub mod world;

/// The version of the simulator (recorded with every result).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Fingerprint of the simulator's source (computed by `build.rs`): two builds with the same
/// fingerprint simulate identically.
pub const MODEL_HASH: &str = env!("VCPULAB_MODEL_HASH");

/// `VERSION+MODEL_HASH`: what results record, and part of every stored result's key.
pub fn build_id() -> String {
    format!("{VERSION}+{MODEL_HASH}")
}
