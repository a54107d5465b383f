//! Assembling runs for the scenarios of TPDS §1.2 and pairing them into overhead metrics.
//!
//! | scenario | run | baseline | γ_v / γ_p |
//! |---|---|---|---|
//! | native | 1 native instance on N cores | — | — |
//! | UC | 1 VM, N vCPUs on the N cores | native | 1 |
//! | OC | k VMs (default 2), N vCPUs each, on the N cores | native | 1/k |
//! | OC2 | the OC VMs | k native instances on the N cores | 1 |
//!
//! Baseline and scenario runs use the same seed, so their workloads draw the same numbers.

use std::sync::Arc;

use crate::engine::SimTime;
use crate::machine::MachineSpec;
use crate::spec::{KernelSpec, LimitsSpec, RecordSpec, Scenario, VmSpec};
use crate::workload::Workload;
use crate::world::record::RunRecord;
use crate::world::{RunError, World};

/// What runs on the cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layout {
    /// Instances of the workload directly on the host kernel.
    Native {
        /// How many.
        instances: u32,
    },
    /// VMs, each with N vCPUs and one instance of the workload.
    Vms {
        /// How many.
        vms: u32,
    },
}

impl Layout {
    /// The run a scenario needs, with `k` co-running VMs/instances for OC and OC2.
    pub fn for_scenario(s: Scenario, k: u32) -> Layout {
        match s {
            Scenario::Native => Layout::Native { instances: 1 },
            Scenario::Uc => Layout::Vms { vms: 1 },
            Scenario::Oc | Scenario::Oc2 => Layout::Vms { vms: k },
        }
    }

    /// The run a scenario is compared against.
    pub fn baseline(s: Scenario, k: u32) -> Option<Layout> {
        match s {
            Scenario::Native => None,
            Scenario::Uc | Scenario::Oc => Some(Layout::Native { instances: 1 }),
            Scenario::Oc2 => Some(Layout::Native { instances: k }),
        }
    }

    /// γ_v / γ_p for the scenario (TPDS §1.2).
    pub fn gamma_ratio(s: Scenario, k: u32) -> f64 {
        if s == Scenario::Oc {
            1.0 / f64::from(k)
        } else {
            1.0
        }
    }

    /// Short description ("native×1", "vm×2").
    pub fn describe(self) -> String {
        match self {
            Layout::Native { instances } => format!("{instances} native instance(s)"),
            Layout::Vms { vms } => format!("{vms} VM(s)"),
        }
    }
}

/// Everything one simulation needs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The workload every instance runs.
    pub workload: Arc<Workload>,
    /// Threads per instance.
    pub threads: u32,
    /// Cores used (= vCPUs per VM).
    pub cores: u32,
    /// Seed of every random stream.
    pub seed: u64,
    /// What runs.
    pub layout: Layout,
    /// The machine and its costs.
    pub machine: MachineSpec,
    /// Host kernel settings.
    pub host: KernelSpec,
    /// Guest kernel settings.
    pub guest: KernelSpec,
    /// VM settings.
    pub vm: VmSpec,
    /// Limits.
    pub limits: LimitsSpec,
    /// Per-VM overrides of `vm` (`[vms.N]`).
    pub vm_overrides: std::collections::BTreeMap<u32, VmSpec>,
    /// The workload of VMs 1.. in multi-VM runs, if they run another workload (a co-runner).
    pub corunner: Option<Corunner>,
    /// What to record beyond the defaults.
    pub record: RecordSpec,
}

/// A co-running workload (runs in VMs 1..k until the measured VM 0 finishes).
#[derive(Clone, Debug)]
pub struct Corunner {
    /// Its workload.
    pub workload: Arc<Workload>,
    /// Its threads per instance.
    pub threads: u32,
    /// `threads` was set (`corunner_threads` or the workload's own): otherwise an instance in
    /// a VM with its own vCPU count (`vms.N.vcpus`) runs one thread per vCPU of that VM.
    pub threads_set: bool,
}

impl RunConfig {
    /// The settings of VM `vm`.
    pub fn vm_spec(&self, vm: u32) -> &VmSpec {
        self.vm_overrides.get(&vm).unwrap_or(&self.vm)
    }
}

/// Runs one simulation to completion.
pub fn simulate_run(cfg: &RunConfig) -> Result<RunRecord, RunError> {
    simulate_run_checked(cfg, &mut || false)
}

/// A failed simulation with the timeline recorded up to the failure (if one was recorded).
pub type FailedWithTimeline = (RunError, Option<Box<crate::account::Timeline>>);

/// Runs one simulation recording its timeline ([`crate::account::Timeline`]). A run that
/// fails (a run limit, a deadlock; not an interruption) returns the timeline recorded up to
/// the failure with its error.
pub fn simulate_run_with_timeline(
    cfg: &RunConfig,
    opts: crate::account::TimelineOptions,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<(RunRecord, crate::account::Timeline), FailedWithTimeline> {
    let mut w = World::new(cfg);
    w.enable_timeline(opts);
    let end: SimTime = match w.run_checked(interrupted) {
        Ok(end) => end,
        Err(RunError::Interrupted) => return Err((RunError::Interrupted, None)),
        Err(e) => return Err((e, w.take_partial_timeline().map(Box::new))),
    };
    let rec = RunRecord::from_world(&w, end, cfg);
    let tl = w.take_timeline(end).expect("enabled above");
    Ok((rec, tl))
}

/// Runs one simulation, asking `interrupted` periodically whether to stop.
pub fn simulate_run_checked(cfg: &RunConfig, interrupted: &mut dyn FnMut() -> bool) -> Result<RunRecord, RunError> {
    let mut w = World::new(cfg);
    let end: SimTime = w.run_checked(interrupted)?;
    Ok(RunRecord::from_world(&w, end, cfg))
}
