//! Content keys of simulations and cells, and the summary a baseline contributes to its
//! cells — what a sweep needs to run cells in separate processes (or machines), reuse each
//! baseline once, skip what is already stored, and re-run any single cell bit-identically.
//!
//! A simulation is a pure function of its [`RunConfig`], so its key is a hash of the parts of
//! the config that can change its outcome (and the simulator version). A native run ignores
//! the guest and VM settings, and a single-instance run ignores the co-runner, so those are
//! left out of its key: policy variants that only change VM settings share their native
//! baselines, within a spec and across specs.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Cell, Plan};
use crate::scenario::{Layout, RunConfig};
use crate::spec::Scenario;
use crate::world::record::RunRecord;

/// What a baseline run contributes to the cells paired with it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Mean completion time of the measured instances (s): t_p, or t of the 1-VM reference.
    pub mean_time_s: f64,
    /// Busy ns per measured instance: C_p.
    pub cycles_per_instance_ns: f64,
    /// Completion time of the first measured instance (ns): the weighted speedup's reference.
    pub first_finish_ns: u64,
}

impl RunSummary {
    /// The summary of a finished run.
    pub fn of(rec: &RunRecord) -> RunSummary {
        RunSummary {
            mean_time_s: rec.mean_time_s(),
            cycles_per_instance_ns: rec.cycles_per_instance_ns(),
            first_finish_ns: rec.measured().next().map_or(0, |i| i.finish_ns),
        }
    }
}

/// One simulation a cell needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobRef {
    /// Its content key.
    pub key: String,
    /// What runs: `native` or `vms` ...
    pub layout: &'static str,
    /// ... and how many instances or VMs.
    pub count: u32,
}

impl JobRef {
    /// The layout back.
    pub fn to_layout(&self) -> Layout {
        match self.layout {
            "native" => Layout::Native { instances: self.count },
            _ => Layout::Vms { vms: self.count },
        }
    }
}

/// The simulations a cell needs, and the keys identifying its result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CellJobs {
    /// Identifies the cell's result: its simulations, scenario and labels.
    pub key: String,
    /// The same without the seed: the repetitions of one configuration share it.
    pub config_key: String,
    /// Its own run (its result carries this run's full record).
    pub main: JobRef,
    /// Its baseline (none for native).
    pub base: Option<JobRef>,
    /// The 1-VM reference of the weighted speedup (none for native).
    pub alone: Option<JobRef>,
}

fn hex16(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn job_ref(cfg: &RunConfig, name: &str) -> JobRef {
    let (layout, count) = match cfg.layout {
        Layout::Native { instances } => ("native", instances),
        Layout::Vms { vms } => ("vms", vms),
    };
    JobRef { key: job_key(cfg, name), layout, count }
}

/// The content key of a simulation (16 hex digits of a SHA-256).
pub(super) fn job_key(cfg: &RunConfig, name: &str) -> String {
    #[derive(Serialize)]
    struct View<'a> {
        simulator: String,
        workload: &'a str,
        workload_hash: &'a str,
        threads: u32,
        cores: u32,
        seed: u64,
        layout: (&'static str, u32),
        machine: &'a crate::machine::MachineSpec,
        host: &'a crate::spec::KernelSpec,
        guest: Option<&'a crate::spec::KernelSpec>,
        vm: Option<&'a crate::spec::VmSpec>,
        vm_overrides: Option<&'a std::collections::BTreeMap<u32, crate::spec::VmSpec>>,
        limits: (u64, u64),
        corunner: Option<(&'a str, u32)>,
        record: &'a crate::spec::RecordSpec,
    }
    let (layout, count, virt) = match cfg.layout {
        Layout::Native { instances } => ("native", instances, false),
        Layout::Vms { vms } => ("vms", vms, true),
    };
    let view = View {
        simulator: crate::build_id(),
        workload: name,
        workload_hash: &cfg.workload.meta.hash,
        threads: cfg.threads,
        cores: cfg.cores,
        seed: cfg.seed,
        layout: (layout, count),
        machine: &cfg.machine,
        host: &cfg.host,
        guest: virt.then_some(&cfg.guest),
        vm: virt.then_some(&cfg.vm),
        vm_overrides: virt.then_some(&cfg.vm_overrides),
        limits: (cfg.limits.max_virtual_time.0, cfg.limits.max_events),
        corunner: cfg.corunner.as_ref().filter(|_| count > 1).map(|c| (c.workload.meta.hash.as_str(), c.threads)),
        record: &cfg.record,
    };
    hex16(serde_json::to_string(&view).expect("serialisable key").as_bytes())
}

/// The simulations of `cell` and its keys.
pub(super) fn cell_jobs(plan: &Plan, cell: &Cell) -> CellJobs {
    let k = cell.oc_vms;
    let refs = |c: &Cell| {
        let main = job_ref(&plan.run_config(c, Layout::for_scenario(c.scenario, k)), &c.workload);
        let base = Layout::baseline(c.scenario, k).map(|l| job_ref(&plan.run_config(c, l), &c.workload));
        let alone = (c.scenario != Scenario::Native).then(|| job_ref(&plan.run_config(c, Layout::Vms { vms: 1 }), &c.workload));
        (main, base, alone)
    };
    let key_of = |c: &Cell, (main, base, alone): &(JobRef, Option<JobRef>, Option<JobRef>)| {
        let text = format!(
            "{}|{}|{}|{}|{}|{}|{}",
            c.scenario,
            c.workload,
            c.variant,
            k,
            main.key,
            base.as_ref().map_or("", |j| &j.key),
            alone.as_ref().map_or("", |j| &j.key)
        );
        hex16(text.as_bytes())
    };
    let own = refs(cell);
    let unseeded = Cell { seed: 0, ..cell.clone() };
    let config_key = key_of(&unseeded, &refs(&unseeded));
    let key = key_of(cell, &own);
    let (main, base, alone) = own;
    CellJobs { key, config_key, main, base, alone }
}
