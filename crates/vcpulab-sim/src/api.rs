//! The public entry point: a validated spec becomes a [`Plan`] of cells (workload ×
//! scenario × vCPUs × seed); running a cell runs (or reuses) its baseline and scenario
//! simulations and pairs them into a [`ScenarioResult`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::account::metrics::{efficiency, overhead, weighted_speedup};
use crate::scenario::{simulate_run_checked, Layout, RunConfig};
use crate::spec::{Scenario, Spec, SpecError};
use crate::workload::builtin::BUILTINS;
use crate::workload::profile::parse_workload;
use crate::world::record::RunRecord;
use crate::world::RunError;

mod jobs;
mod timeline;
pub use jobs::{CellJobs, JobRef, RunSummary};
pub use timeline::{PartialTimeline, TimelineError, TimelineRun};

/// One cell of the experiment matrix.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Cell {
    /// Workload name.
    pub workload: String,
    /// Scenario.
    pub scenario: Scenario,
    /// vCPUs per VM = cores used.
    pub vcpus: u32,
    /// Threads per instance.
    pub threads: u32,
    /// VMs sharing the cores in OC and OC2 (and native instances of OC2's baseline): k.
    pub oc_vms: u32,
    /// Seed.
    pub seed: u64,
    /// The policy variant (`vm.tlb=pv`, `;`-separated for several keys; empty without
    /// `experiment.vary`).
    pub variant: String,
}

/// A failed cell: which simulation failed and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellError {
    /// One-line description.
    pub message: String,
    /// The run was interrupted by the caller (not a simulation failure).
    pub interrupted: bool,
}

impl std::fmt::Display for CellError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
impl std::error::Error for CellError {}

/// The result of one cell: the scenario's metrics against its baseline.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// Workload name.
    pub workload: String,
    /// Scenario.
    pub scenario: Scenario,
    /// vCPUs.
    pub vcpus: u32,
    /// Threads per instance.
    pub threads: u32,
    /// VMs sharing the cores in OC and OC2: k.
    pub oc_vms: u32,
    /// Seed.
    pub seed: u64,
    /// The policy variant ("" without `experiment.vary`).
    pub variant: String,
    /// The workload's profile version (`version` in its definition; 0 when unset).
    pub workload_version: u32,
    /// Content hash (hex) of the workload definition the run used, as materialised from the
    /// spec (built-in, patches and transforms included).
    pub workload_hash: String,
    /// Baseline run time (s): one native instance, or the mean of k native instances for OC2.
    pub t_native_s: f64,
    /// Mean run time of the VM instances (s); None for native.
    pub t_virt_s: Option<f64>,
    /// δη_r.
    pub delta_eta_r: Option<f64>,
    /// δη_t.
    pub delta_eta_t: Option<f64>,
    /// ω.
    pub omega: Option<f64>,
    /// Weighted speedup against one instance in one VM (UC run); None for native.
    pub weighted_speedup: Option<f64>,
    /// C_p: busy ns per baseline instance.
    pub c_native_ns: f64,
    /// C_v: busy ns per VM (host time split evenly); None for native.
    pub c_virt_ns: Option<f64>,
    /// Exits by reason, all VMs.
    pub exits: BTreeMap<String, u64>,
    /// Host time by exit reason / host activity, all VMs (ns).
    pub host_ns_by_reason: BTreeMap<String, u64>,
    /// Each host reason's part of δη_r: its host time per measured VM over C_p (TPDS Fig. 9's
    /// split of the host cycles; "TSC_DEADLINE writes alone reach a δη_r of up to 10 %" is
    /// `delta_eta_r_by_reason.MSR_WRITE_TSC_DEADLINE`). Empty for native cells.
    pub delta_eta_r_by_reason: BTreeMap<String, f64>,
    /// Guest (user + kernel) busy time, all VMs (ns); native: the instance's busy time.
    pub guest_ns: u64,
    /// Host-layer time of the VMs (ns); native: 0.
    pub host_ns: u64,
    /// Events of the scenario run.
    pub events: u64,
    /// Virtual duration of the scenario run (s).
    pub duration_s: f64,
    /// Wall-clock time of the scenario run (s) — the only non-deterministic field.
    pub wall_s: f64,
    /// Completion time per instance.
    pub instances: Vec<InstanceTime>,
    /// Busy time of the workload's owners by layer and cause (ns).
    pub breakdown: BTreeMap<String, BTreeMap<String, u64>>,
    /// Mechanism metrics of the measured instance and its VM (see `docs/spec.md`, "Metrics").
    pub metrics: BTreeMap<String, f64>,
    /// The scenario run in full (ledger, counters).
    pub run: RunRecord,
}

/// Completion time of one instance.
#[derive(Clone, Debug, Serialize)]
pub struct InstanceTime {
    /// Name.
    pub name: String,
    /// Seconds.
    pub finish_s: f64,
}

/// Information about a built-in workload.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadInfo {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Model tag.
    pub model: String,
    /// Suite (`parsec-3.0`, `splash-2x`, `system`; empty for the micro workloads).
    pub suite: String,
    /// Synchronisation mix.
    pub sync: Vec<String>,
    /// What the model is built from.
    pub basis: String,
    /// Scalability type measured by DIS (ch.4, Table 4.1; 0 = not classified).
    pub scalability_type: u8,
    /// Profile version.
    pub version: u32,
    /// The TPDS overhead categories the profile declares (`kvm_overhead`, from TPDS §6 Fig. 4).
    pub kvm_overhead: Vec<String>,
    /// Where it comes from.
    pub source: String,
}

/// Lists the built-in workloads.
pub fn builtin_workloads() -> Vec<WorkloadInfo> {
    BUILTINS
        .iter()
        .map(|(name, text)| {
            let v = toml::Value::Table(toml::from_str(text).expect("built-ins parse (tested)"));
            let w = parse_workload(name, &v).expect("built-ins validate (tested)");
            WorkloadInfo {
                name: name.to_string(),
                description: w.description,
                model: w.model,
                source: "builtin".into(),
                suite: w.meta.suite,
                sync: w.meta.sync,
                basis: w.meta.basis,
                scalability_type: w.meta.scalability_type,
                version: w.meta.version,
                kvm_overhead: w.meta.kvm_overhead,
            }
        })
        .collect()
}

/// Presentation information of a plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanInfo {
    /// `[[published]]` values.
    pub published: Vec<crate::spec::PublishedSpec>,
    /// `[report]` settings.
    pub report: crate::spec::ReportSpec,
    /// Variant labels in order ("" when nothing varies).
    pub variants: Vec<String>,
    /// The platform preset the spec runs on.
    pub platform: String,
    /// `[reproduce]`: the published experiment the spec reproduces.
    pub reproduce: Option<crate::spec::ReproduceSpec>,
}

/// A validated experiment and the runs done so far.
#[derive(Debug)]
pub struct Plan {
    spec: Spec,
    /// (label, spec) per policy variant; one unlabeled entry without `experiment.vary`.
    variants: Vec<(String, Spec)>,
    cells: Vec<Cell>,
    /// Full records of recent simulations by job key (bounded: see [`RECENT_RUNS`]).
    runs: BTreeMap<String, Arc<(RunRecord, f64)>>,
    /// Insertion order of `runs`, oldest first.
    run_order: std::collections::VecDeque<String>,
    /// What a baseline contributes to its cells, by job key (simulated here or provided).
    summaries: BTreeMap<String, RunSummary>,
    /// Summaries simulated since the last [`Plan::take_new_summaries`].
    fresh: Vec<(String, RunSummary)>,
}

/// How many full run records a plan keeps for reuse (the summaries are kept for all).
const RECENT_RUNS: usize = 16;

/// Every combination of the named variants and `vary`'s values as (label, `--set` overrides).
fn variant_sets(named: &[crate::spec::NamedVariant], vary: &indexmap::IndexMap<String, Vec<toml::Value>>) -> Vec<(String, Vec<String>)> {
    let mut out = if named.is_empty() {
        vec![(String::new(), Vec::new())]
    } else {
        named.iter().map(|v| (v.name.clone(), v.set.iter().map(|(k, x)| format!("{k}={x}")).collect())).collect()
    };
    for (key, values) in vary {
        let mut next = Vec::new();
        for (label, sets) in &out {
            for v in values {
                let shown = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let l = if label.is_empty() { format!("{key}={shown}") } else { format!("{label};{key}={shown}") };
                let mut s2 = sets.clone();
                s2.push(format!("{key}={v}"));
                next.push((l, s2));
            }
        }
        out = next;
    }
    out
}

impl Plan {
    /// Validates a spec (see [`Spec::parse`]) and lists its cells.
    pub fn new(text: &str, source: &str, overrides: &[String]) -> Result<Plan, SpecError> {
        // Every variant's traced programs come from one cache: each trace file is read once.
        let mut cache = crate::workload::traced::TraceCache::default();
        let spec = Spec::parse_with(text, source, overrides, &mut cache)?;
        let e = &spec.experiment;
        let n_variants = e.vary.values().fold(e.variants.len().max(1), |n, v| n.saturating_mul(v.len()));
        let n_cells = [spec.workloads.len(), e.vcpus.0.len(), e.seeds.0.len(), e.scenarios.0.len()]
            .iter()
            .fold(n_variants, |n, &k| n.saturating_mul(k));
        if n_cells > crate::spec::bounds::MAX_CELLS {
            return Err(SpecError::new(
                source,
                "experiment",
                format!(
                    "{n_cells} cells (workloads x vcpus x seeds x scenarios x variants); expected at most {}: split the experiment",
                    crate::spec::bounds::MAX_CELLS
                ),
            ));
        }
        let mut variants = Vec::new();
        for (label, sets) in variant_sets(&spec.experiment.variants, &spec.experiment.vary) {
            if sets.is_empty() {
                variants.push((label, spec.clone()));
                continue;
            }
            let mut all = overrides.to_vec();
            all.extend(sets);
            let v = Spec::parse_with(text, source, &all, &mut cache).map_err(|mut e| {
                if e.source.starts_with("--set") {
                    e.source = format!("{source} (experiment.vary, variant {label})");
                }
                e
            })?;
            variants.push((label, v));
        }
        let mut cells = Vec::new();
        for w in &spec.workloads {
            for &vcpus in &spec.experiment.vcpus.0 {
                for &seed in &spec.experiment.seeds.0 {
                    for &scenario in &spec.experiment.scenarios.0 {
                        for (label, v) in &variants {
                            // A variant may change experiment.threads or oc_vms.
                            let threads = v.instance_threads(w, vcpus);
                            let oc_vms = v.experiment.oc_vms;
                            cells.push(Cell { workload: w.name.clone(), scenario, vcpus, threads, oc_vms, seed, variant: label.clone() });
                        }
                    }
                }
            }
        }
        Ok(Plan {
            spec,
            variants,
            cells,
            runs: BTreeMap::new(),
            run_order: Default::default(),
            summaries: BTreeMap::new(),
            fresh: Vec::new(),
        })
    }

    /// What the CLI needs besides the cells: published values, report settings, variants.
    pub fn info(&self) -> PlanInfo {
        PlanInfo {
            published: self.spec.published.clone(),
            report: self.spec.report.clone(),
            variants: self.variants.iter().map(|(l, _)| l.clone()).collect(),
            platform: self.spec.platform.clone(),
            reproduce: self.spec.reproduce.clone(),
        }
    }

    fn variant_index(&self, cell: &Cell) -> usize {
        self.variants.iter().position(|(l, _)| *l == cell.variant).expect("cell variant exists")
    }

    /// The cells in order.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// The validated spec.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The configuration of one simulation of `cell`'s workload with `layout`.
    pub fn run_config(&self, cell: &Cell, layout: Layout) -> RunConfig {
        let spec = &self.variants[self.variant_index(cell)].1;
        RunConfig {
            workload: spec.workload_at(&cell.workload, cell.threads).expect("cell workload exists"),
            threads: cell.threads,
            cores: cell.vcpus,
            seed: cell.seed,
            layout,
            machine: spec.machine.clone(),
            host: spec.host.clone(),
            guest: spec.guest.clone(),
            vm: spec.vm.clone(),
            limits: spec.limits.clone(),
            vm_overrides: spec.vm_overrides.clone(),
            corunner: spec.corunner_at(cell.vcpus),
            record: spec.record.clone(),
        }
    }

    /// The content key of the simulation of `cell` with `layout` (see [`jobs::job_key`]).
    pub fn job_key(&self, cell: &Cell, layout: Layout) -> String {
        jobs::job_key(&self.run_config(cell, layout), &cell.workload)
    }

    /// The simulations cell `i` needs and its content keys.
    pub fn cell_jobs(&self, i: usize) -> CellJobs {
        jobs::cell_jobs(self, &self.cells[i])
    }

    /// Records what the simulation `key` contributes as a baseline, computed elsewhere (by
    /// another process of a sweep, or stored earlier), so cells paired with it do not
    /// simulate it again.
    pub fn provide_summary(&mut self, key: &str, summary: RunSummary) {
        self.summaries.insert(key.to_string(), summary);
    }

    /// The baseline summaries simulated since the last call, by job key.
    pub fn take_new_summaries(&mut self) -> Vec<(String, RunSummary)> {
        std::mem::take(&mut self.fresh)
    }

    /// The full record of `cell` with `layout`: reused if recent, else simulated.
    fn run(&mut self, cell: &Cell, layout: Layout, check: &mut dyn FnMut() -> bool) -> Result<Arc<(RunRecord, f64)>, CellError> {
        let cfg = self.run_config(cell, layout);
        let key = jobs::job_key(&cfg, &cell.workload);
        if let Some(r) = self.runs.get(&key) {
            return Ok(Arc::clone(r));
        }
        let start = Instant::now();
        let rec = simulate_run_checked(&cfg, check).map_err(|e| cell_error(cell, layout, e))?;
        Ok(self.remember(key, rec, start.elapsed().as_secs_f64()))
    }

    /// Keeps the record of simulation `key` for reuse (and its summary for the baselines).
    fn remember(&mut self, key: String, rec: RunRecord, wall: f64) -> Arc<(RunRecord, f64)> {
        let r = Arc::new((rec, wall));
        let summary = RunSummary::of(&r.0);
        if self.summaries.insert(key.clone(), summary).is_none() {
            self.fresh.push((key.clone(), summary));
        }
        if self.runs.len() >= RECENT_RUNS {
            if let Some(old) = self.run_order.pop_front() {
                self.runs.remove(&old);
            }
        }
        self.run_order.push_back(key.clone());
        self.runs.insert(key, Arc::clone(&r));
        r
    }

    /// The summary of `cell` with `layout`: provided or simulated earlier, else simulated now.
    fn summary(&mut self, cell: &Cell, layout: Layout, check: &mut dyn FnMut() -> bool) -> Result<RunSummary, CellError> {
        let key = self.job_key(cell, layout);
        match self.summaries.get(&key) {
            Some(s) => Ok(*s),
            None => Ok(RunSummary::of(&self.run(cell, layout, check)?.0)),
        }
    }

    /// Simulates (or finds) the baseline `layout` of cell `i` and returns its summary; a
    /// sweep uses it for baselines that are no cell's own run (OC2's k native instances, or
    /// the native and 1-VM runs when those scenarios are not in the matrix).
    pub fn run_job(&mut self, i: usize, layout: Layout) -> Result<RunSummary, CellError> {
        self.run_job_checked(i, layout, &mut || false)
    }

    /// Like [`Plan::run_job`], asking `check` every few thousand events whether to stop.
    pub fn run_job_checked(&mut self, i: usize, layout: Layout, check: &mut dyn FnMut() -> bool) -> Result<RunSummary, CellError> {
        let cell = self.cells[i].clone();
        self.summary(&cell, layout, check)
    }

    /// Runs cell `i` (and its baselines, once per plan) and pairs the results.
    pub fn run_cell(&mut self, i: usize) -> Result<ScenarioResult, CellError> {
        self.run_cell_checked(i, &mut || false)
    }

    /// Like [`Plan::run_cell`], asking `check` every few thousand events whether to stop.
    pub fn run_cell_checked(&mut self, i: usize, check: &mut dyn FnMut() -> bool) -> Result<ScenarioResult, CellError> {
        let cell = self.cells[i].clone();
        let main = self.run(&cell, Layout::for_scenario(cell.scenario, cell.oc_vms), check)?;
        self.pair(&cell, &main, check)
    }

    /// Pairs `cell`'s own run `main` (record, wall seconds) with its baselines (simulated
    /// now if needed) into its result.
    fn pair(&mut self, cell: &Cell, main: &(RunRecord, f64), check: &mut dyn FnMut() -> bool) -> Result<ScenarioResult, CellError> {
        let k = cell.oc_vms;
        let base = match Layout::baseline(cell.scenario, k) {
            Some(l) => Some(self.summary(cell, l, check)?),
            None => None,
        };
        let alone = match cell.scenario {
            Scenario::Native => None,
            _ => Some(self.summary(cell, Layout::Vms { vms: 1 }, check)?),
        };
        let (rec, wall) = (&main.0, main.1);
        let virt = cell.scenario != Scenario::Native;
        let (t_native, c_native) = match &base {
            Some(b) => (b.mean_time_s, b.cycles_per_instance_ns),
            None => (rec.mean_time_s(), rec.cycles_per_instance_ns()),
        };
        let (t_virt, c_virt) = (rec.mean_time_s(), rec.cycles_per_instance_ns());
        let o = virt.then(|| overhead(t_native, c_native, t_virt, c_virt, Layout::gamma_ratio(cell.scenario, k)));
        let ws = alone.map(|a| {
            let times: Vec<f64> = rec.measured().map(|i| i.finish_ns as f64).collect();
            weighted_speedup(a.first_finish_ns as f64, &times)
        });
        let mut exits = BTreeMap::new();
        let mut host_by = BTreeMap::new();
        for vm in &rec.vms {
            for (r, n) in &vm.exits {
                *exits.entry(r.clone()).or_insert(0) += n;
            }
            for (r, n) in &vm.host_ns_by_reason {
                *host_by.entry(r.clone()).or_insert(0) += n;
            }
        }
        let measured_vms: Vec<u32> = rec.measured().filter_map(|i| i.vm).collect();
        let mut dr_by = BTreeMap::new();
        if virt && c_native > 0.0 && !measured_vms.is_empty() {
            for vm in rec.vms.iter().filter(|v| measured_vms.contains(&v.vm)) {
                for (r, n) in &vm.host_ns_by_reason {
                    *dr_by.entry(r.clone()).or_insert(0.0) += *n as f64 / measured_vms.len() as f64 / c_native;
                }
            }
        }
        let guest_ns = rec.measured().map(|i| i.user_ns + i.kernel_ns).sum();
        let host_ns = if virt { rec.measured().map(|i| i.host_ns).sum() } else { 0 };
        let mut breakdown: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for row in &rec.ledger {
            if row.owner != "host" && row.busy {
                *breakdown.entry(row.layer.to_string()).or_default().entry(row.cause.clone()).or_insert(0) += row.ns;
            }
        }
        let spec = &self.variants[self.variant_index(cell)].1;
        let wl = spec.workload_at(&cell.workload, cell.threads).expect("cell workload exists");
        let mut metrics = mechanism_metrics(rec);
        if virt && !dr_by.is_empty() {
            // The host's part of δη_r (TPDS Fig. 9 plots it by cause): the sum of the causes.
            metrics.insert("delta_eta_r_host".into(), dr_by.values().sum());
        }
        Ok(ScenarioResult {
            workload: cell.workload.clone(),
            workload_version: wl.meta.version,
            workload_hash: wl.meta.hash.clone(),
            scenario: cell.scenario,
            vcpus: cell.vcpus,
            threads: cell.threads,
            oc_vms: cell.oc_vms,
            seed: cell.seed,
            variant: cell.variant.clone(),
            t_native_s: t_native,
            t_virt_s: virt.then_some(t_virt),
            delta_eta_r: o.map(|o| o.delta_eta_r),
            delta_eta_t: o.map(|o| o.delta_eta_t),
            omega: o.map(|o| o.omega),
            weighted_speedup: ws,
            c_native_ns: c_native,
            c_virt_ns: virt.then_some(c_virt),
            exits,
            host_ns_by_reason: host_by,
            delta_eta_r_by_reason: dr_by,
            guest_ns,
            host_ns,
            events: rec.events,
            duration_s: rec.duration_ns as f64 * 1e-9,
            wall_s: wall,
            instances: rec.measured().map(|i| InstanceTime { name: i.name.clone(), finish_s: i.finish_ns as f64 * 1e-9 }).collect(),
            breakdown,
            metrics,
            run: rec.clone(),
        })
    }
}

/// The error of a failed simulation of `cell` with `layout`.
fn cell_error(cell: &Cell, layout: Layout, e: RunError) -> CellError {
    CellError {
        message: format!(
            "workload '{}' {} vcpus {} seed {} ({}): {e}",
            cell.workload,
            cell.scenario,
            cell.vcpus,
            cell.seed,
            layout.describe()
        ),
        interrupted: e == RunError::Interrupted,
    }
}

/// Mechanism metrics of a run's measured instance (the first) and its VM.
pub fn mechanism_metrics(rec: &RunRecord) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    if let Some(i) = rec.measured().next() {
        let t = &i.tlb;
        m.insert("tlb_shootdowns".into(), t.shootdowns as f64);
        // Mapping changes that needed no other CPU's flush (no other CPU ran the process).
        m.insert("tlb_local_only".into(), t.local_only as f64);
        m.insert("tlb_shootdowns_per_s".into(), t.shootdowns as f64 / (i.finish_ns.max(1) as f64 * 1e-9));
        m.insert("tlb_ipis".into(), t.ipis as f64);
        m.insert("tlb_deferred".into(), t.deferred as f64);
        if t.latency.count > 0 {
            m.insert("tlb_latency_mean_us".into(), t.latency.mean_ns / 1e3);
            m.insert("tlb_latency_max_us".into(), t.latency.max_ns as f64 / 1e3);
            m.insert("tlb_latency_p99_bucket_us".into(), t.latency.p99_ns as f64 / 1e3);
            tlb_distribution(&mut m, t);
        }
        m.insert("tlb_wait_ms".into(), i.counters.tlb_wait_ns as f64 / 1e6);
        // glibc's arenas, where threads other than a main one allocated.
        if i.arenas.made > 0 {
            m.insert("arenas_reused".into(), i.arenas.reused as f64);
            m.insert("arenas_shared".into(), i.arenas.shared as f64);
        }
        // mmap_sem and the VMA locks, where the threads took them.
        let l = &i.mm_locks;
        if l.sleeps_read + l.sleeps_write + l.vma_reads + l.vma_fallbacks > 0 {
            m.insert("mmap_sem_sleeps".into(), (l.sleeps_read + l.sleeps_write) as f64);
            m.insert("vma_lock_fallbacks".into(), l.vma_fallbacks as f64);
        }
        // DIS ch.4 inputs (see `characterize`): average running threads, and voluntary
        // context switches per thread per second.
        let secs = i.finish_ns.max(1) as f64 * 1e-9;
        m.insert("parallelism".into(), i.busy_ns as f64 / i.finish_ns.max(1) as f64);
        m.insert("sync_per_thread_s".into(), i.counters.nvcsw as f64 / f64::from(i.threads.max(1)) / secs);
        // The guest-level synchronisation a trace of its threads gives (`SyncRecord`): blocking
        // waits, their durations, wake-ups (on the waker's CPU or another), futex calls.
        let y = &i.sync;
        m.insert("blocks".into(), y.blocks as f64);
        m.insert("blocks_per_s".into(), y.blocks as f64 / secs);
        m.insert("blocks_sync".into(), y.blocks_sync as f64);
        m.insert("blocks_sleep".into(), y.blocks_sleep as f64);
        m.insert("blocks_other".into(), y.blocks_other as f64);
        m.insert("block_mean_us".into(), y.block_mean_ns / 1e3);
        m.insert("block_p50_us".into(), y.block_p50_ns / 1e3);
        m.insert("block_p90_us".into(), y.block_p90_ns / 1e3);
        m.insert("wakeups".into(), y.wakeups as f64);
        m.insert("wakeups_per_s".into(), y.wakeups as f64 / secs);
        m.insert("wakeups_local".into(), y.wakeups_local as f64);
        m.insert("wakeups_remote".into(), y.wakeups_remote as f64);
        m.insert("futex_calls".into(), (y.futex_waits + y.futex_wakes) as f64);
        m.insert("futex_calls_per_s".into(), (y.futex_waits + y.futex_wakes) as f64 / secs);
        m.insert("futex_waits".into(), y.futex_waits as f64);
        m.insert("futex_wakes".into(), y.futex_wakes as f64);
        if let Some(r) = &i.responses {
            m.insert("requests".into(), r.count as f64);
            m.insert("throughput_rps".into(), r.throughput_rps);
            m.insert("resp_mean_us".into(), r.mean_us);
            m.insert("resp_p50_us".into(), r.p50_us);
            m.insert("resp_p95_us".into(), r.p95_us);
            m.insert("resp_p99_us".into(), r.p99_us);
            if let (Some(g), Some(t), Some(met)) = (r.good_frac, r.tolerable_frac, r.meets_qos()) {
                m.insert("qos_good_frac".into(), g);
                m.insert("qos_tolerable_frac".into(), t);
                m.insert("qos_met".into(), f64::from(u8::from(met)));
            }
        }
        // Consolidation (BAS): over every measured instance (all VMs in OC/OC2).
        let served: Vec<&crate::world::record::ResponseRecord> = rec.measured().filter_map(|x| x.responses.as_ref()).collect();
        if !served.is_empty() {
            m.insert("throughput_rps_total".into(), served.iter().map(|r| r.throughput_rps).sum());
            if let Some(met) = served.iter().map(|r| r.meets_qos()).collect::<Option<Vec<bool>>>() {
                m.insert("qos_met_instances".into(), met.iter().filter(|&&x| x).count() as f64);
            }
        }
        if let Some(e) = instance_efficiency(rec, i) {
            m.insert("eff_speedup".into(), e.speedup);
            m.insert("eff_useful".into(), e.useful);
            m.insert("eff_busy_wait".into(), e.busy_wait);
            m.insert("eff_overhead".into(), e.overhead);
            m.insert("eff_unused".into(), e.unused);
            m.insert("eff_borrowed".into(), e.borrowed);
        }
        if let Some(mem) = &i.memory {
            // The memory model's counters (TPDS §6.1: CPI, local vs remote accesses).
            if let Some(c) = mem.cpi {
                m.insert("cpi".into(), c);
            }
            m.insert("mem_local_accesses".into(), mem.local_accesses);
            m.insert("mem_remote_accesses".into(), mem.remote_accesses);
            if let Some(r) = mem.remote_fraction {
                m.insert("mem_remote_fraction".into(), r);
            }
        }
        if let Some(mem) = &rec.memory {
            if let Some(u) = mem.nodes.iter().map(|n| n.utilization).reduce(f64::max) {
                m.insert("mem_bw_util_max".into(), u);
            }
            if let Some(n) = &mem.numad {
                m.insert("numad_moves".into(), n.moves as f64);
                m.insert("numad_migrated_mib".into(), n.migrated_mib);
                m.insert("numad_host_ms".into(), n.host_ns as f64 / 1e6);
            }
        }
        if i.membarrier.calls > 0 {
            m.insert("membarriers".into(), i.membarrier.calls as f64);
            m.insert("membarrier_latency_mean_us".into(), i.membarrier.latency.mean_ns / 1e3);
        }
        if let Some(vm) = i.vm.and_then(|v| rec.vms.get(v as usize)) {
            let hp = &vm.halt_poll;
            m.insert("halt_exits".into(), hp.exits as f64);
            m.insert("halt_poll_attempted".into(), hp.attempted as f64);
            m.insert("halt_poll_successful".into(), hp.successful as f64);
            if let Some(r) = hp.success_rate {
                m.insert("halt_poll_success_rate".into(), r);
            }
            m.insert("halt_poll_ms".into(), (hp.poll_success_ns + hp.poll_fail_ns) as f64 / 1e6);
            m.insert("ple_exits".into(), vm.ple.exits as f64);
            m.insert("ple_exits_per_s".into(), vm.ple.exits as f64 / secs);
            exit_rates(&mut m, vm, secs);
            // The VM's guest CPU time in user space and in its kernel (its vCPUs', all threads).
            m.insert("vm_user_ms".into(), vm.guest_user_ns as f64 / 1e6);
            m.insert("vm_kernel_ms".into(), vm.guest_kernel_ns as f64 / 1e6);
            if hp.window.count > 0 {
                m.insert("halt_poll_window_mean_us".into(), hp.window.mean_ns / 1e3);
                m.insert("halt_poll_window_p50_bucket_us".into(), hp.window.p50_ns as f64 / 1e3);
            }
            m.insert("halt_poll_attempts_per_s".into(), hp.attempted as f64 / secs);
            m.insert("halt_poll_successes_per_s".into(), hp.successful as f64 / secs);
            m.insert("ple_inefficiency".into(), vm.spin.inefficiency);
            m.insert("ple_yields".into(), vm.ple.counters.yields as f64);
            if vm.ple.exits > 0 {
                m.insert("ple_window_mean_cycles".into(), vm.ple.counters.window_cycles_at_exits as f64 / vm.ple.exits as f64);
            }
            m.insert("ipis_resched".into(), vm.ipis_by_kind.get("resched").copied().unwrap_or(0) as f64);
            m.insert("ipis_tlb".into(), vm.ipis_by_kind.get("tlb").copied().unwrap_or(0) as f64);
            m.insert("ipis_call".into(), vm.ipis_by_kind.get("call").copied().unwrap_or(0) as f64);
            m.insert("pv_kicks".into(), vm.pv.kicks as f64);
            m.insert("pv_directed_yields".into(), vm.pv.directed_yield_successful as f64);
            if let Some(p) = guest_cpu_profile(rec, i.vm.unwrap_or(0)) {
                m.insert("vm_cpu_tlb_share".into(), p.shares[0]);
                m.insert("vm_cpu_lock_share".into(), p.shares[1]);
                m.insert("vm_cpu_kernel_other_share".into(), p.shares[2]);
                m.insert("vm_cpu_user_share".into(), p.shares[3]);
                m.insert("vm_cpu_smp_call_share".into(), p.smp_call);
                m.insert("vm_cpu_user_spin_share".into(), p.user_spin);
                m.insert("vm_cpu_user_spin_ms".into(), p.user_spin_ns as f64 / 1e6);
                m.insert("vm_cpu_lock_ms".into(), p.lock_ns as f64 / 1e6);
            }
        }
    }
    m
}

/// The TLB-shootdown latency's exact distribution and its decomposition by the targets'
/// states (S4U-T1/F3/F5): `tlb_latency_p{10,50,90,99}_us`, the spread p90 / p10,
/// `tlb_critical_share_<state>` (the part of the summed latency whose last acknowledgement came
/// from a target in that state), `tlb_targets_share_<state>` (the targets found in it) and
/// `tlb_target_wait_us_<state>` (their mean time to acknowledge).
fn tlb_distribution(m: &mut BTreeMap<String, f64>, t: &crate::world::record::TlbRecord) {
    let [p10, p50, p90, p99] = t.quantiles_ns;
    for (name, q) in [("p10", p10), ("p50", p50), ("p90", p90), ("p99", p99)] {
        m.insert(format!("tlb_latency_{name}_us"), q as f64 / 1e3);
    }
    if p10 > 0 {
        m.insert("tlb_latency_spread".into(), p90 as f64 / p10 as f64);
    }
    let total_lat: u64 = t.by_target_state.values().map(|s| s.critical_ns).sum();
    let total_targets: u64 = t.by_target_state.values().map(|s| s.targets).sum();
    for (state, s) in &t.by_target_state {
        if total_lat > 0 {
            m.insert(format!("tlb_critical_share_{state}"), s.critical_ns as f64 / total_lat as f64);
        }
        m.insert(format!("tlb_targets_share_{state}"), s.targets as f64 / total_targets.max(1) as f64);
        if s.wait_ns > 0 {
            m.insert(format!("tlb_target_wait_us_{state}"), s.wait_ns as f64 / s.targets.max(1) as f64 / 1e3);
        }
    }
}

/// A VM's exits and IPIs per second (DIS-2.4, TPDS-F9): `exits_per_s` and per reason
/// `exits_per_s_<reason>` (lower case), per vCPU (`exits_per_s_per_vcpu[_<reason>]`, the mean
/// over its vCPUs, and the busiest vCPU's `exits_per_s_max_vcpu`); the APIC accesses that
/// exit (`apic_exits`: x2APIC ICR and EOI writes, the guest's IPIs and end-of-interrupts; with
/// APICv only ICR writes exit); IPIs sent per second by kind and received per vCPU per second.
fn exit_rates(m: &mut BTreeMap<String, f64>, vm: &crate::world::record::VmRecord, secs: f64) {
    let n = vm.vcpus.len().max(1) as f64;
    let total: u64 = vm.exits.values().sum();
    m.insert("exits_per_s".into(), total as f64 / secs);
    m.insert("exits_per_s_per_vcpu".into(), total as f64 / secs / n);
    let busiest = vm.vcpus.iter().map(|v| v.exits).max().unwrap_or(0);
    m.insert("exits_per_s_max_vcpu".into(), busiest as f64 / secs);
    for r in crate::virt::exit::ExitReason::ALL {
        let c = vm.exits.get(r.name()).copied().unwrap_or(0);
        let key = r.name().to_ascii_lowercase();
        m.insert(format!("exits_per_s_{key}"), c as f64 / secs);
        m.insert(format!("exits_per_s_per_vcpu_{key}"), c as f64 / secs / n);
    }
    let apic: u64 = ["MSR_WRITE_ICR", "MSR_WRITE_EOI"].iter().map(|r| vm.exits.get(*r).copied().unwrap_or(0)).sum();
    m.insert("apic_exits".into(), apic as f64);
    m.insert("apic_exits_per_s_per_vcpu".into(), apic as f64 / secs / n);
    let sent: u64 = vm.ipis_by_kind.values().sum();
    m.insert("ipis_sent_per_s".into(), sent as f64 / secs);
    for (kind, c) in &vm.ipis_by_kind {
        m.insert(format!("ipis_{kind}_per_s"), *c as f64 / secs);
    }
    let received: u64 = vm.ipis_received_by_kind.values().sum();
    m.insert("ipis_received_per_s_per_vcpu".into(), received as f64 / secs / n);
}

/// VM `v`'s guest CPU time as a profile taken in the guest sees it.
struct GuestProfile {
    /// S4U Fig. 2's `k:tlb`, `k:lock`, `k:other`, `u:*`: shares of the time its vCPUs ran
    /// guest code (user and kernel layers, the idle loop left out) spent in TLB shootdowns (the
    /// sender's flush and wait, the targets' flushes), spinning on kernel spinlocks
    /// (`native_queued_spin_lock_slowpath`), the rest of the kernel, and user space.
    shares: [f64; 4],
    /// The share in `smp_call_function_many`'s busy-wait (TPDS-F11 subgroup 1): the senders'
    /// waits for remote calls' acknowledgements (TLB shootdowns and others).
    smp_call: f64,
    /// The share spent spinning in user space (TPDS-F11 subgroup 2: spin barriers and locks).
    user_spin: f64,
    /// User-space spinning (ns).
    user_spin_ns: u64,
    /// Kernel spinlock spinning (ns).
    lock_ns: u64,
}

/// VM `v`'s [`GuestProfile`]; None when the VM ran no guest code.
fn guest_cpu_profile(rec: &RunRecord, v: u32) -> Option<GuestProfile> {
    use crate::account::{Cause, Layer};
    let prefix = format!("vm{v}/");
    let (kernel, user) = (Layer::Kernel.name(), Layer::User.name());
    let idle = [Cause::Idle.name(), Cause::IdlePoll.name()];
    let tlb = [Cause::TlbWait.name(), Cause::TlbFlush.name()];
    let lock = Cause::SpinKernel.name();
    let mut sums = [0u64; 4];
    let (mut smp_call, mut user_spin) = (0u64, 0u64);
    for r in rec.ledger.iter().filter(|r| r.owner.starts_with(&prefix)) {
        if r.layer == kernel && (r.cause == Cause::TlbWait.name() || r.cause == Cause::CallWait.name()) {
            smp_call += r.ns;
        }
        if r.layer == user && r.cause == Cause::SpinUser.name() {
            user_spin += r.ns;
        }
        let slot = if r.layer == user {
            3
        } else if r.layer != kernel || idle.contains(&r.cause) {
            continue;
        } else if tlb.contains(&r.cause) {
            0
        } else if r.cause == lock {
            1
        } else {
            2
        };
        sums[slot] += r.ns;
    }
    let total: u64 = sums.iter().sum();
    (total > 0).then(|| GuestProfile {
        shares: sums.map(|s| s as f64 / total as f64),
        smp_call: smp_call as f64 / total as f64,
        user_spin: user_spin as f64 / total as f64,
        user_spin_ns: user_spin,
        lock_ns: sums[1],
    })
}

/// The efficiency-based speedup of instance `i` of `rec` (DIS ch.4; see
/// [`crate::account::metrics::efficiency`]): natively over its share of the cores for its run
/// time, in a VM over the time slices allocated to its VM.
fn instance_efficiency(rec: &RunRecord, i: &crate::world::record::InstanceRecord) -> Option<crate::account::metrics::Efficiency> {
    let busy_wait = (i.counters.spin_ns + i.counters.tlb_wait_ns) as f64;
    match i.vm {
        None => {
            let available = f64::from(rec.cores) * i.finish_ns as f64 / rec.instances.len().max(1) as f64;
            Some(efficiency(rec.cores, available, i.busy_ns as f64, busy_wait, 0.0, 0.0))
        }
        Some(v) => {
            let vm = rec.vms.get(v as usize)?;
            let prefix = format!("vm{v}/");
            let idle_poll = crate::account::Cause::IdlePoll.name();
            let polled: u64 = rec.ledger.iter().filter(|r| r.owner.starts_with(&prefix) && r.cause == idle_poll).map(|r| r.ns).sum();
            let consumed = (vm.guest_user_ns + vm.guest_kernel_ns + vm.host_ns) as f64;
            let a = &vm.allocation;
            Some(efficiency(vm.vcpus.len() as u32, a.allocated_ns, consumed, busy_wait + polled as f64, vm.host_ns as f64, a.borrowed_ns))
        }
    }
}

/// Throughput of the simulator on a fixed model workload.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// What was simulated.
    pub workload: String,
    /// Events processed.
    pub events: u64,
    /// Wall time (s).
    pub wall_s: f64,
    /// Events per wall second.
    pub events_per_s: f64,
    /// Virtual time simulated (s).
    pub sim_s: f64,
    /// Virtual seconds per wall second.
    pub sim_per_wall: f64,
}

/// Simulates the fixed bench model (`barrier`, OC, 16 vCPUs, 2 VMs) repeatedly for at least
/// `seconds` of wall time.
pub fn bench(seconds: f64) -> BenchResult {
    bench_checked(seconds, &mut || false).expect("the bench model runs")
}

/// Like [`bench`], asking `check` every few thousand events whether to stop (then a
/// [`CellError`] with `interrupted`).
pub fn bench_checked(seconds: f64, check: &mut dyn FnMut() -> bool) -> Result<BenchResult, CellError> {
    let text = "[experiment]\nworkloads = [\"barrier\"]\nscenarios = [\"OC\"]\nvcpus = [16]\nseeds = [1]\n";
    let plan = Plan::new(text, "<bench>", &[]).expect("bench spec is valid");
    let cell = plan.cells()[0].clone();
    let cfg = plan.run_config(&cell, Layout::Vms { vms: 2 });
    let (mut events, mut sim_ns, mut runs) = (0u64, 0u64, 0u32);
    let start = Instant::now();
    while runs == 0 || start.elapsed().as_secs_f64() < seconds {
        let r = simulate_run_checked(&cfg, check)
            .map_err(|e| CellError { message: format!("the bench model: {e}"), interrupted: e == RunError::Interrupted })?;
        events += r.events;
        sim_ns += r.duration_ns;
        runs += 1;
    }
    let wall = start.elapsed().as_secs_f64();
    Ok(BenchResult {
        workload: "barrier, OC, 16 vCPUs x 2 VMs".into(),
        events,
        wall_s: wall,
        events_per_s: events as f64 / wall,
        sim_s: sim_ns as f64 * 1e-9,
        sim_per_wall: sim_ns as f64 * 1e-9 / wall,
    })
}

/// What a trace file holds and what its replay would be (`vcpulab trace`, `vcpulab predict`):
/// every process (pid, command line, threads, records) and the replay statistics of the
/// process chosen by `pid` (see [`crate::workload::replay::choose_process`]).
#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    /// Format version.
    pub version: u16,
    /// Every process image in the trace.
    pub processes: Vec<TraceProcessInfo>,
    /// The replay of the chosen process.
    pub replay: crate::workload::replay::ReplayStats,
}

/// One process of a trace.
#[derive(Clone, Debug, Serialize)]
pub struct TraceProcessInfo {
    /// Its pid.
    pub pid: u32,
    /// Its command line.
    pub cmdline: Vec<String>,
    /// Threads traced.
    pub threads: u32,
    /// Records read.
    pub records: u64,
    /// Blocks lost.
    pub lost_blocks: u64,
}

/// Reads trace file `path` and describes it (errors: one line naming the file and offset).
pub fn trace_info(path: impl AsRef<std::path::Path>, pid: Option<u32>) -> Result<TraceInfo, String> {
    let trace = crate::trace::read(path).map_err(|e| e.to_string())?;
    let processes = trace
        .processes
        .iter()
        .map(|p| TraceProcessInfo {
            pid: p.pid,
            cmdline: p.start.as_ref().map(|s| s.cmdline.clone()).unwrap_or_default(),
            threads: p.threads.len() as u32,
            records: p.threads.iter().map(|t| t.records.len() as u64).sum(),
            lost_blocks: p.threads.iter().map(|t| u64::from(t.lost_blocks)).sum(),
        })
        .collect();
    let opts = crate::workload::replay::Options { pid, tracer_record_ns: crate::workload::replay::TRACER_RECORD_NS, ..Default::default() };
    let (_, replay) = crate::workload::replay::from_trace("trace", &trace, &opts)?;
    Ok(TraceInfo { version: trace.header.version, processes, replay })
}
