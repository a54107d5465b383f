//! Specs: the TOML a user writes, validated into a run plan.
//!
//! A spec has separate tables for the experiment (which workloads, scenarios, vCPU counts and
//! seeds), the machine, the host kernel, the guest kernel, the VMs, the run limits and inline
//! workload definitions. Parsing goes: text → TOML table → `--set` overrides → built-in
//! workloads materialised under `[workloads.NAME]` → serde (unknown fields rejected) →
//! semantic checks. Every error is a [`SpecError`] naming the source, the field path and what
//! was expected.

pub mod depth;
pub mod error;
pub mod kernel;
pub mod overrides;
pub mod published;
pub mod suggest;
pub mod types;
pub mod vm;

use std::collections::BTreeMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::Deserialize;

pub use error::SpecError;
pub use kernel::{IdlePolicy, KernelSpec};
pub use published::{Aggregate, Compare, Direction, PublishedSpec, ReproduceSpec, Rule, Sign, Tolerance, Visibility};
pub use types::{Dur, OneOrMany, Scenario};
pub use vm::{HaltPollSpec, PleSpec, PvSpec, TlbPolicy, VmSpec};

use crate::machine::MachineSpec;
use crate::workload::builtin::{builtin_names, builtin_text, resolve_builtin};
use crate::workload::profile::parse_workload;
use crate::workload::traced::{self, TraceCache};
use crate::workload::Workload;

/// The `[experiment]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Workloads to run (built-in names, names defined under `[workloads]`, or traced programs
    /// `traced.<suite>.<program>`).
    pub workloads: OneOrMany<String>,
    /// Scenarios to run.
    #[serde(default = "default_scenarios")]
    pub scenarios: OneOrMany<Scenario>,
    /// vCPU counts (= cores used = threads unless `threads` is set).
    #[serde(default = "default_vcpus")]
    pub vcpus: OneOrMany<u32>,
    /// Seeds (repetitions).
    #[serde(default = "default_seeds")]
    pub seeds: OneOrMany<u64>,
    /// Threads per instance (default: the vCPU count, as in TPDS).
    #[serde(default)]
    pub threads: Option<u32>,
    /// Number of identical VMs in OC/OC2 (TPDS: 2).
    #[serde(default = "default_oc_vms")]
    pub oc_vms: u32,
    /// A different workload for the other VMs of OC/OC2 (and the other native instances of
    /// OC2's baseline): it runs until the measured instance finishes (S4U's sysbench VM).
    /// `"none"` (the same as leaving it out) runs identical instances, so that a `vary` over
    /// co-runners can include that case.
    #[serde(default)]
    pub corunner: Option<String>,
    /// Threads of each co-runner instance (default: the vCPU count).
    #[serde(default)]
    pub corunner_threads: Option<u32>,
    /// Policy variants: `{ "vm.tlb" = ["ipi", "pv", "shoot4u"] }` runs every cell once per
    /// value (the cross product for several keys), each value applied like `--set`.
    #[serde(default)]
    pub vary: IndexMap<String, Vec<toml::Value>>,
    /// Named policy variants (`[[experiment.variants]]`), in order: each sets several fields
    /// at once (`{ name = "fixed 512", set = { "vm.ple.window_policy" = "fixed", ... } }`).
    /// Combined with `vary` as a cross product.
    #[serde(default)]
    pub variants: Vec<NamedVariant>,
}

/// One named policy variant: a label and the `--set` assignments it makes.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamedVariant {
    /// Its label in results (`variant`).
    pub name: String,
    /// Dotted spec paths and their values, applied like `--set PATH=VALUE`.
    #[serde(default)]
    pub set: IndexMap<String, toml::Value>,
}

/// The `experiment.corunner` value meaning "identical instances, no co-runner".
pub const NO_CORUNNER: &str = "none";

fn default_scenarios() -> OneOrMany<Scenario> {
    OneOrMany(vec![Scenario::Native, Scenario::Uc, Scenario::Oc, Scenario::Oc2])
}
fn default_vcpus() -> OneOrMany<u32> {
    OneOrMany(vec![8])
}
fn default_seeds() -> OneOrMany<u64> {
    OneOrMany(vec![1])
}
fn default_oc_vms() -> u32 {
    2
}

/// The `[limits]` table: a run that reaches a limit ends with an error.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSpec {
    /// Maximum virtual time of one run.
    pub max_virtual_time: Dur,
    /// Maximum number of events of one run.
    pub max_events: u64,
    /// Maximum number of program steps (interpreted workload instructions, summed over
    /// every thread) of one run: it ends work that takes no virtual time and no events, such
    /// as a long `repeat` of `compute = "0ns"`.
    pub max_steps: u64,
}

impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec { max_virtual_time: Dur(600_000_000_000), max_events: 2_000_000_000, max_steps: 1_000_000_000 }
    }
}

/// Documented maxima of a spec's sizes (docs/spec.md, "Size limits"): generous for real
/// experiments, small enough that validation and one cell stay within memory and time.
pub mod bounds {
    /// Threads of one workload instance (`experiment.threads`, `corunner_threads`, a
    /// workload's `threads` and its groups' sizes).
    pub const MAX_THREADS: u32 = 4096;
    /// Sockets of the machine.
    pub const MAX_SOCKETS: u32 = 64;
    /// Cores per socket.
    pub const MAX_CORES_PER_SOCKET: u32 = 1024;
    /// Hardware threads per core.
    pub const MAX_THREADS_PER_CORE: u32 = 8;
    /// Hardware threads (CPUs) of the whole machine.
    pub const MAX_CPUS: u32 = 4096;
    /// VMs of an OC/OC2 run (`experiment.oc_vms`).
    pub const MAX_OC_VMS: u32 = 64;
    /// Seeds of an experiment.
    pub const MAX_SEEDS: usize = 10_000;
    /// Cells of a plan (workloads × vCPU counts × seeds × scenarios × variants).
    pub const MAX_CELLS: usize = 100_000;
}

/// The `[record]` table: what a run keeps beyond its summary.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RecordSpec {
    /// Keep every TLB-shootdown latency (for CDFs), not only the histogram.
    pub tlb_samples: bool,
    /// Keep each VM's PLE window over time: the mean window in force at its PLE exits, per
    /// interval of `ple_window_interval` (the APPLES window-over-time figure).
    pub ple_window: bool,
    /// The interval of the PLE-window series.
    pub ple_window_interval: Dur,
    /// Blame every busy-wait interval on what the thread waited for (`run.wait_chains`; costs
    /// some speed on spin-heavy runs, so off by default; `vcpulab diagnose` turns it on).
    pub wait_chains: bool,
}

impl Default for RecordSpec {
    fn default() -> Self {
        RecordSpec { tlb_samples: false, ple_window: false, ple_window_interval: Dur(1_000_000), wait_chains: false }
    }
}

/// The `[report]` table: what the CLI shows beyond the standard columns.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReportSpec {
    /// Extra columns from each result's `metrics` (e.g. `halt_poll_success_rate`).
    pub columns: Vec<String>,
    /// Print and save the empirical CDF of this sampled latency (`tlb_latency`; needs
    /// `[record] tlb_samples = true`).
    pub cdf: Option<String>,
    /// Print every cell's performance relative to the cell of this variant (same workload,
    /// scenario, vCPUs and seed), as t_v(baseline) / t_v(variant): `"KVM"`.
    pub baseline: Option<String>,
    /// Print the PLE section: each variant's average inefficiency, the spinlock-intensive
    /// classification, and (with `--window-out`) the PLE window over time.
    pub ple: bool,
    /// Print the scalability section (DIS ch.4): per workload, scenario and variant, the
    /// speedup over the vCPU counts (t at the smallest count / t) and the efficiency-based
    /// speedup with its decomposition (`eff_*` metrics).
    pub scalability: bool,
    /// Print the performance spread over the values of this variant key (e.g.
    /// `"experiment.corunner"`): for each workload and remaining variant, the mean and
    /// standard deviation of the run time over those values (DIS ch.5's stability).
    pub spread: Option<String>,
}

/// The `[platform]` table: which testbed preset the spec runs on.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlatformSpec {
    /// A preset name (`vcpulab platforms`); default [`crate::platform::DEFAULT_PRESET`].
    #[serde(default)]
    pub preset: Option<String>,
}

/// A whole spec file as deserialised.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    experiment: ExperimentSpec,
    #[serde(default)]
    machine: MachineSpec,
    #[serde(default)]
    host: KernelSpec,
    #[serde(default)]
    guest: KernelSpec,
    #[serde(default)]
    vm: VmSpec,
    #[serde(default)]
    limits: LimitsSpec,
    #[serde(default)]
    record: RecordSpec,
    #[serde(default)]
    published: Vec<PublishedSpec>,
    #[serde(default)]
    report: ReportSpec,
    #[serde(default)]
    platform: PlatformSpec,
    #[serde(default)]
    reproduce: Option<ReproduceSpec>,
    #[serde(default)]
    workloads: IndexMap<String, toml::Value>,
}

/// A validated spec.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The experiment axes.
    pub experiment: ExperimentSpec,
    /// The machine.
    pub machine: MachineSpec,
    /// Host kernel settings.
    pub host: KernelSpec,
    /// Guest kernel settings (every VM).
    pub guest: KernelSpec,
    /// VM settings (every VM).
    pub vm: VmSpec,
    /// Per-VM overrides (`[vms.N]`: VM N's settings, the `[vm]` table with these fields replaced).
    pub vm_overrides: std::collections::BTreeMap<u32, VmSpec>,
    /// Run limits.
    pub limits: LimitsSpec,
    /// What runs record.
    pub record: RecordSpec,
    /// Published values to compare with.
    pub published: Vec<PublishedSpec>,
    /// Report settings.
    pub report: ReportSpec,
    /// The platform preset the spec runs on (its canonical name).
    pub platform: String,
    /// The published experiment this spec reproduces (`[reproduce]`).
    pub reproduce: Option<ReproduceSpec>,
    /// Workloads named by the experiment, validated, in experiment order. A traced program's
    /// (`traced.<suite>.<program>`) is its replay at the first thread count the experiment runs
    /// it with; [`Spec::workload_at`] gives the one of a run.
    pub workloads: Vec<Arc<Workload>>,
    /// The co-runner workload, validated (a traced program's: as for `workloads`).
    pub corunner: Option<Arc<Workload>>,
    /// The replays of the traced programs the experiment runs (listed, or the co-runner), by
    /// the name the spec gives them and thread count: every count its runs need.
    pub traced: BTreeMap<String, BTreeMap<u32, Arc<Workload>>>,
    /// The fully materialised spec as TOML (after overrides), for provenance.
    pub materialized: String,
}

impl Spec {
    /// Parses and validates spec `text` read from `source` (a file name or `<flags>`), after
    /// applying `--set PATH=VALUE` overrides.
    pub fn parse(text: &str, source: &str, overrides: &[String]) -> Result<Spec, SpecError> {
        Spec::parse_with(text, source, overrides, &mut TraceCache::default())
    }

    /// [`Spec::parse`], taking traced programs' replays from `cache` (and adding the ones it
    /// reads): the variants of a plan share one.
    pub fn parse_with(text: &str, source: &str, overrides: &[String], cache: &mut TraceCache) -> Result<Spec, SpecError> {
        let mut doc: toml::Table = depth::parse_document(text, source)?;
        if let Some(why) = doc.get("reproduce").and_then(|r| r.get("not_expressible")).and_then(toml::Value::as_str) {
            let path = "reproduce.not_expressible";
            return Err(SpecError::new(
                source,
                path,
                format!("this published experiment cannot be run by the model yet ({why}); `vcpulab reproduce --list` lists it"),
            ));
        }
        let sets = overrides::parse_all(overrides)?;
        // Overrides outside [workloads] first (they may change which workloads run), then the
        // named built-ins are copied in, then every override (so workload fields land on the copies).
        let outside: Vec<_> = sets.iter().filter(|o| !o.dotted.starts_with("workloads.")).cloned().collect();
        overrides::apply_all(&mut doc, &outside)?;
        let platform = apply_preset(&mut doc, &|path: &str| overrides::blame(&sets, source, path))?;
        materialize_builtins(&mut doc, &|path: &str| overrides::blame(&sets, source, path))?;
        overrides::apply_all(&mut doc, &sets)?;
        // The second pass puts back a `--set platform.preset=` as typed; the stored spec names
        // the preset as the catalogue spells it.
        if let Some(toml::Value::Table(t)) = doc.get_mut("platform") {
            t.insert("preset".into(), toml::Value::String(platform.clone()));
        }
        fold_suite_tables(&mut doc);
        drop_params_unused_after_patches(&mut doc);
        let materialized = toml::to_string(&doc).unwrap_or_default();
        let blame = |path: String| overrides::blame(&sets, source, &path);
        check_workload_tables(&doc).map_err(|(path, m)| {
            // A spec's settings for one of its workloads, left out by a narrower
            // `--set experiment.workloads=[...]`: point at the selector that keeps them.
            let narrowed = sets.iter().any(|o| o.dotted == "experiment.workloads") && blame(path.clone()) == source;
            let m = if narrowed && m.starts_with("no workload") {
                format!("{m} (the spec sets it, and --set experiment.workloads leaves it out: to run some of the spec's workloads, select them with --only workload=NAME)")
            } else {
                m
            };
            SpecError::new(blame(path.clone()), path, m)
        })?;
        let vms_table = doc.remove("vms");
        let file: SpecFile = serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let path = e.path().to_string();
            SpecError::new(blame(path.clone()), path.clone(), clean_serde_message(&e.inner().to_string(), &path))
        })?;
        let check = |section: &str, r: Result<(), (String, String)>| {
            r.map_err(|(f, m)| {
                let path = format!("{section}.{f}");
                SpecError::new(blame(path.clone()), path, m)
            })
        };
        check("machine", file.machine.check())?;
        check("host", file.host.check())?;
        check("guest", file.guest.check())?;
        if file.host.spinlock == crate::spec::kernel::SpinlockImpl::Pmt {
            return Err(SpecError::new(
                blame("host.spinlock".into()),
                "host.spinlock",
                "expected one of qspinlock, ticket, byte: preemptable ticket spinlocks (pmt) are a guest policy, use [guest] spinlock = \"pmt\"",
            ));
        }
        if file.guest.asymmetric.enabled() {
            return Err(SpecError::new(
                blame("guest.asymmetric".into()),
                "guest.asymmetric",
                "asymmetric vCPUs are a host policy: use [host.asymmetric]",
            ));
        }
        if file.guest.numad.enabled {
            return Err(SpecError::new(
                blame("guest.numad.enabled".into()),
                "guest.numad.enabled",
                "numad is a host daemon: use [host.numad]",
            ));
        }
        if file.guest.native_groups {
            return Err(SpecError::new(
                blame("guest.native_groups".into()),
                "guest.native_groups",
                "native instances run on the host: use [host] native_groups",
            ));
        }
        if file.guest.daemons.count > 0 {
            return Err(SpecError::new(blame("guest.daemons.count".into()), "guest.daemons.count", "only [host.daemons] is supported"));
        }
        check("vm", file.vm.check())?;
        check("vm", file.vm.check_machine(&file.machine))?;
        check("vm", file.vm.check_host(&file.host))?;
        if file.vm.vcpus.is_some() {
            return Err(SpecError::new(
                blame("vm.vcpus".into()),
                "vm.vcpus",
                "set a co-running VM's vCPU count in [vms.N] (N >= 1); every VM's default is experiment.vcpus",
            ));
        }
        let vm_overrides = parse_vm_overrides(&doc_vm(&file.vm), vms_table, &blame)?;
        let min_vcpus = file.experiment.vcpus.0.iter().copied().min().unwrap_or(1);
        for (i, v) in &vm_overrides {
            check(&format!("vms.{i}"), v.check_machine(&file.machine))?;
            check(&format!("vms.{i}"), v.check_host(&file.host))?;
            match v.vcpus {
                Some(_) if *i == 0 => {
                    return Err(SpecError::new(
                        blame(format!("vms.{i}.vcpus")),
                        format!("vms.{i}.vcpus"),
                        "the measured VM's vCPU count is experiment.vcpus (vms.N.vcpus is for co-running VMs, N >= 1)",
                    ))
                }
                Some(m) if m == 0 || m > min_vcpus => {
                    return Err(SpecError::new(
                        blame(format!("vms.{i}.vcpus")),
                        format!("vms.{i}.vcpus"),
                        format!("expected 1..={min_vcpus}, at most the run's cores (the smallest of experiment.vcpus) (got {m})"),
                    ))
                }
                _ => {}
            }
        }
        check("experiment", check_experiment(&file.experiment, &file.machine))?;
        if file.limits.max_virtual_time.0 == 0 {
            return Err(SpecError::new(blame("limits.max_virtual_time".into()), "limits.max_virtual_time", "expected a positive duration"));
        }
        if file.limits.max_steps == 0 {
            return Err(SpecError::new(blame("limits.max_steps".into()), "limits.max_steps", "expected at least 1 program step"));
        }
        let mut traced = BTreeMap::new();
        // A traced program (not defined by the spec): its replay at every thread count of
        // `counts` (the first returned for `workloads`).
        let mut load_traced = |name: &str, field: String, counts: Vec<u32>| -> Result<Arc<Workload>, SpecError> {
            let fail = |m: String| {
                let m = if m.starts_with("workload '") || m.starts_with("unknown traced") { m } else { format!("workload '{name}': {m}") };
                SpecError::new(blame(field.clone()), field.clone(), m)
            };
            let program = traced::resolve(name).map_err(fail)?;
            let mut at = BTreeMap::new();
            for &t in &counts {
                at.insert(t, cache.load(name, &program, t).map_err(fail)?);
            }
            let first = Arc::clone(&at[&counts[0]]);
            traced.insert(name.to_string(), at);
            Ok(first)
        };
        let is_traced = |name: &str| traced::is_traced(name) && !file.workloads.contains_key(name);
        let vcpus = &file.experiment.vcpus.0;
        let parse_named = |name: &str| {
            parse_workload(name, &file.workloads[name])
                .map(|mut w| {
                    // A replayed trace's hash (of the file's bytes) joins its definition's.
                    let own = content_hash(&file.workloads[name]);
                    w.meta.hash = if w.meta.hash.is_empty() { own } else { format!("{own}{}", &w.meta.hash[..8.min(w.meta.hash.len())]) };
                    w
                })
                .map_err(|(f, m)| {
                    let path = if f.is_empty() { format!("workloads.{name}") } else { format!("workloads.{name}.{f}") };
                    // A bad parameter value is blamed on whoever set the parameter.
                    let origin = match m.rsplit_once("(value of params.") {
                        Some((_, p)) => format!("workloads.{name}.params.{}", p.trim_end_matches(')')),
                        None => path.clone(),
                    };
                    SpecError::new(blame(origin), path, m)
                })
        };
        let mut workloads = Vec::new();
        for (i, name) in file.experiment.workloads.0.iter().enumerate() {
            if is_traced(name) {
                let counts = vcpus.iter().map(|&v| instance_threads(None, file.experiment.threads, v)).collect();
                workloads.push(load_traced(name, format!("experiment.workloads[{i}]"), counts)?);
                continue;
            }
            let w = parse_named(name)?;
            for &vcpus in vcpus {
                let threads = instance_threads(w.threads, file.experiment.threads, vcpus);
                w.check_threads(threads).map_err(|(f, m)| {
                    let path = format!("workloads.{name}.{f}");
                    SpecError::new(blame(path.clone()), path, m)
                })?;
            }
            workloads.push(Arc::new(w));
        }
        let corunner = match file.experiment.corunner.as_deref().filter(|c| *c != NO_CORUNNER) {
            None => None,
            Some(c) if is_traced(c) => {
                let counts = vcpus.iter().map(|&v| instance_threads(None, file.experiment.corunner_threads, v)).collect();
                Some(load_traced(c, "experiment.corunner".into(), counts)?)
            }
            Some(c) => Some(Arc::new(parse_named(c)?)),
        };
        if let Some(c) = &file.report.cdf {
            if c != "tlb_latency" {
                return Err(SpecError::new(
                    blame("report.cdf".into()),
                    "report.cdf",
                    format!("unknown sampled metric '{c}' (expected tlb_latency)"),
                ));
            }
            if !file.record.tlb_samples {
                return Err(SpecError::new(blame("report.cdf".into()), "report.cdf", "needs [record] tlb_samples = true"));
            }
        }
        if file.record.ple_window_interval.0 == 0 {
            let path = "record.ple_window_interval".to_string();
            return Err(SpecError::new(blame(path.clone()), path, "expected a positive duration (e.g. \"1ms\")"));
        }
        debug_assert!(file.platform.preset.as_deref() == Some(platform.as_str()));
        for (i, p) in file.published.iter().enumerate() {
            check(&format!("published[{i}]"), p.check())?;
        }
        if let Some(r) = &file.reproduce {
            if r.id.trim().is_empty() {
                return Err(SpecError::new(blame("reproduce.id".into()), "reproduce.id", "expected an experiment id such as \"TPDS-F4\""));
            }
        }
        Ok(Spec {
            experiment: file.experiment,
            machine: file.machine,
            host: file.host,
            guest: file.guest,
            vm: file.vm,
            vm_overrides,
            limits: file.limits,
            record: file.record,
            published: file.published,
            report: file.report,
            platform,
            reproduce: file.reproduce,
            workloads,
            corunner,
            traced,
            materialized,
        })
    }

    /// Whether the workload `name` is a traced program (`traced.<suite>.<program>`), whose
    /// replay depends on the run's thread count.
    pub fn is_traced(&self, name: &str) -> bool {
        self.traced.contains_key(name)
    }

    /// Threads of one instance of workload `w` in a run on `vcpus` vCPUs: the workload's own
    /// count, else `experiment.threads`, else `vcpus` (a traced program's is the count of the
    /// trace it replays, chosen by the latter two).
    pub fn instance_threads(&self, w: &Workload, vcpus: u32) -> u32 {
        let own = if self.is_traced(&w.name) { None } else { w.threads };
        instance_threads(own, self.experiment.threads, vcpus)
    }

    /// The workload `name` as a run with `threads` threads per instance runs it: a traced
    /// program's replay at that count, else the spec's workload of that name.
    pub fn workload_at(&self, name: &str, threads: u32) -> Option<Arc<Workload>> {
        match self.traced.get(name) {
            Some(at) => at.get(&threads).cloned(),
            None => self.workloads.iter().chain(&self.corunner).find(|w| w.name == name).cloned(),
        }
    }

    /// The co-runner of a run on `vcpus` vCPUs: its workload, its threads per instance, and
    /// whether that count was set (`corunner_threads` or the workload's own; otherwise a VM
    /// with its own vCPU count runs one thread per vCPU). A traced co-runner replays its trace
    /// at `corunner_threads`, else `vcpus`, in every co-running VM.
    pub fn corunner_at(&self, vcpus: u32) -> Option<crate::scenario::Corunner> {
        let c = self.corunner.as_ref()?;
        if self.is_traced(&c.name) {
            let threads = instance_threads(None, self.experiment.corunner_threads, vcpus);
            let workload = self.workload_at(&c.name, threads).expect("every thread count of the co-runner is loaded");
            return Some(crate::scenario::Corunner { workload, threads, threads_set: true });
        }
        let set = c.threads.or(self.experiment.corunner_threads);
        Some(crate::scenario::Corunner { workload: Arc::clone(c), threads: set.unwrap_or(vcpus), threads_set: set.is_some() })
    }
}

/// Threads of one instance: the workload's own count (`own`), else the experiment's (`threads`
/// or `corunner_threads`), else the vCPU count.
fn instance_threads(own: Option<u32>, experiment: Option<u32>, vcpus: u32) -> u32 {
    own.or(experiment).unwrap_or(vcpus)
}

/// Lays the spec over its platform preset (`[platform] preset`, default the TPDS testbed):
/// the preset's tables are the base, every field of the spec replaces the preset's.
/// Returns the preset's name; `[platform] preset` of the materialised spec names it.
fn apply_preset(doc: &mut toml::Table, blame: &dyn Fn(&str) -> String) -> Result<String, SpecError> {
    let named = match doc.get("platform") {
        None => None,
        Some(toml::Value::Table(t)) => match t.get("preset") {
            None => None,
            Some(toml::Value::String(s)) => Some(s.clone()),
            Some(other) => {
                let path = "platform.preset";
                return Err(SpecError::new(
                    blame(path),
                    path,
                    format!("expected a preset name (a string) such as \"DIS-R720\" (got {other})"),
                ));
            }
        },
        Some(_) => return Err(SpecError::new(blame("platform"), "platform", "expected a table: [platform] preset = \"NAME\"")),
    };
    let name = named.as_deref().unwrap_or(crate::platform::DEFAULT_PRESET);
    let Some(preset) = crate::platform::find(name) else {
        let path = "platform.preset";
        return Err(SpecError::new(blame(path), path, crate::platform::unknown(name)));
    };
    let mut base = preset.tables();
    merge(&mut base, doc);
    *doc = base;
    // `platform` is a table or absent here (checked above); other keys stay for serde to reject.
    if let toml::Value::Table(t) = doc.entry("platform").or_insert_with(|| toml::Value::Table(toml::Table::new())) {
        t.insert("preset".into(), toml::Value::String(preset.name.into()));
    }
    Ok(preset.name.to_string())
}

/// `[vm]` as a TOML table (the base that `[vms.N]` tables patch).
fn doc_vm(vm: &VmSpec) -> toml::Table {
    toml::Table::try_from(vm).expect("VmSpec serialises")
}

/// Parses `[vms.N]`: each is merged over `[vm]` and validated like it.
fn parse_vm_overrides(
    base: &toml::Table,
    vms: Option<toml::Value>,
    blame: &dyn Fn(String) -> String,
) -> Result<std::collections::BTreeMap<u32, VmSpec>, SpecError> {
    let mut out = std::collections::BTreeMap::new();
    let Some(vms) = vms else { return Ok(out) };
    let Some(t) = vms.as_table() else {
        return Err(SpecError::new(blame("vms".into()), "vms", "expected tables [vms.N] of per-VM settings, N = 0, 1, ..."));
    };
    for (key, v) in t {
        let path = format!("vms.{key}");
        let Ok(n) = key.parse::<u32>() else {
            return Err(SpecError::new(blame(path.clone()), path, format!("expected a VM index (0, 1, ...) (got '{key}')")));
        };
        let Some(over) = v.as_table() else {
            return Err(SpecError::new(blame(path.clone()), path, "expected a table of [vm] fields"));
        };
        let mut merged = base.clone();
        merge(&mut merged, over);
        let spec: VmSpec = serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|e| {
            let p = format!("{path}.{}", e.path());
            let message = clean_serde_message(&e.inner().to_string(), &format!("vm.{}", e.path()));
            SpecError::new(blame(p.clone()), p, message)
        })?;
        spec.check().map_err(|(f, m)| {
            let p = format!("{path}.{f}");
            SpecError::new(blame(p.clone()), p, m)
        })?;
        out.insert(n, spec);
    }
    Ok(out)
}

/// Deep-merges `over` into `base` (tables merge, other values replace).
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

fn check_experiment(e: &ExperimentSpec, m: &MachineSpec) -> Result<(), (String, String)> {
    if e.workloads.0.is_empty() {
        return Err(("workloads".into(), "expected at least one workload".into()));
    }
    if e.scenarios.0.is_empty() {
        return Err(("scenarios".into(), "expected at least one of native, UC, OC, OC2".into()));
    }
    if e.vcpus.0.is_empty() || e.seeds.0.is_empty() {
        return Err(("vcpus".into(), "expected at least one vCPU count and one seed".into()));
    }
    for (i, &v) in e.vcpus.0.iter().enumerate() {
        if v == 0 || v > m.total_pcpus() {
            return Err((
                format!("vcpus[{i}]"),
                format!("expected 1..={} (the machine's CPUs; vCPUs use as many cores) (got {v})", m.total_pcpus()),
            ));
        }
    }
    for (field, value) in [("threads", e.threads), ("corunner_threads", e.corunner_threads)] {
        if let Some(t) = value {
            if t == 0 || t > bounds::MAX_THREADS {
                return Err((field.into(), format!("expected an integer in 1..={} (threads per instance) (got {t})", bounds::MAX_THREADS)));
            }
        }
    }
    if e.seeds.0.len() > bounds::MAX_SEEDS {
        return Err(("seeds".into(), format!("expected at most {} seeds (got {})", bounds::MAX_SEEDS, e.seeds.0.len())));
    }
    // A key of `vary` or of a variant's `set` becomes a `--set` path: the same nesting bound.
    let keys = e
        .vary
        .keys()
        .map(|k| ("vary".to_string(), k))
        .chain(e.variants.iter().enumerate().flat_map(|(i, v)| v.set.keys().map(move |k| (format!("variants[{i}].set"), k))));
    for (table, key) in keys {
        if overrides::path_too_deep(key) {
            return Err((format!("{table}.\"{}\"", depth::shown_text(key)), depth::too_deep()));
        }
    }
    for (key, values) in &e.vary {
        if values.is_empty() {
            return Err((format!("vary.\"{key}\""), "expected at least one value".into()));
        }
        if key.starts_with("experiment.") && !VARIABLE_EXPERIMENT_FIELDS.contains(&key.as_str()) {
            return Err((
                format!("vary.\"{key}\""),
                format!(
                    "the experiment's axes cannot be varied (list them instead); of [experiment] only {} can be, besides settings such as vm.tlb",
                    VARIABLE_EXPERIMENT_FIELDS.join(", ")
                ),
            ));
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, v) in e.variants.iter().enumerate() {
        if v.name.is_empty() || v.name.contains(';') || v.name.contains('=') {
            return Err((format!("variants[{i}].name"), format!("expected a non-empty name without ';' or '=' (got {:?})", v.name)));
        }
        if names.contains(&v.name.as_str()) {
            return Err((format!("variants[{i}].name"), format!("'{}' names two variants", v.name)));
        }
        names.push(&v.name);
        for key in v.set.keys() {
            if key.starts_with("experiment.") && !VARIABLE_EXPERIMENT_FIELDS.contains(&key.as_str()) {
                return Err((
                    format!("variants[{i}].set.\"{key}\""),
                    format!(
                        "the experiment's axes cannot be set by a variant; of [experiment] only {} can be",
                        VARIABLE_EXPERIMENT_FIELDS.join(", ")
                    ),
                ));
            }
            if e.vary.contains_key(key) {
                return Err((format!("variants[{i}].set.\"{key}\""), "is also a key of experiment.vary: set it in one place".into()));
            }
        }
    }
    if e.oc_vms < 2 || e.oc_vms > bounds::MAX_OC_VMS {
        return Err(("oc_vms".into(), format!("expected 2..={} co-running VMs (got {})", bounds::MAX_OC_VMS, e.oc_vms)));
    }
    Ok(())
}

/// The `[experiment]` fields `vary` accepts: they shape a run without being an axis.
pub const VARIABLE_EXPERIMENT_FIELDS: [&str; 4] =
    ["experiment.oc_vms", "experiment.corunner", "experiment.corunner_threads", "experiment.threads"];

/// Copies the TOML of every built-in workload the experiment names (and the spec does not
/// define itself) into `[workloads.NAME]`.
/// `--set workloads.parsec.dedup.params.x=1` writes a nested table `workloads.parsec.dedup`;
/// it means the workload named "parsec.dedup" (of `experiment.workloads` or the co-runner), so
/// it is merged into that workload's table.
fn fold_suite_tables(doc: &mut toml::Table) {
    let experiment = doc.get("experiment");
    let names: Vec<String> = match experiment.and_then(|e| e.get("workloads")) {
        Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        Some(toml::Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let corunner = experiment.and_then(|e| e.get("corunner")).and_then(|c| c.as_str()).filter(|c| *c != NO_CORUNNER).map(String::from);
    let Some(toml::Value::Table(w)) = doc.get_mut("workloads") else { return };
    for name in names.iter().chain(corunner.iter()) {
        let Some((suite, short)) = name.split_once('.') else { continue };
        let Some(toml::Value::Table(top)) = w.get_mut(suite) else { continue };
        let Some(toml::Value::Table(nested)) = top.remove(short) else { continue };
        if top.is_empty() {
            w.remove(suite);
        }
        match w.get_mut(name.as_str()) {
            Some(toml::Value::Table(t)) => merge(t, &nested),
            _ => {
                w.insert(name.clone(), toml::Value::Table(nested));
            }
        }
    }
}

/// Built-in workloads patched by the spec or by `--set` lose the parameters the patches left
/// unused ([`crate::workload::profile::drop_params_unused_after_patch`]).
fn drop_params_unused_after_patches(doc: &mut toml::Table) {
    let Some(toml::Value::Table(w)) = doc.get_mut("workloads") else { return };
    for (name, v) in w.iter_mut() {
        let (Some(builtin), toml::Value::Table(table)) = (builtin_table(name), v) else { continue };
        // A program of the user's under a built-in's name is a definition of its own.
        if ["program", "groups"].iter().all(|k| table.get(*k) == builtin.get(*k)) {
            crate::workload::profile::drop_params_unused_after_patch(table, &builtin);
        }
    }
}

/// The built-in workload `name`'s TOML, parsed.
fn builtin_table(name: &str) -> Option<toml::Table> {
    builtin_text(name).map(|text| toml::from_str(text).expect("built-in workloads are valid TOML (tested)"))
}

fn materialize_builtins(doc: &mut toml::Table, blame: &dyn Fn(&str) -> String) -> Result<(), SpecError> {
    let mut names: Vec<String> = match doc.get("experiment").and_then(|e| e.get("workloads")) {
        Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        Some(toml::Value::String(s)) => vec![s.clone()],
        _ => return Ok(()), // serde reports the problem with its path
    };
    let corunner =
        doc.get("experiment").and_then(|e| e.get("corunner")).and_then(|c| c.as_str()).filter(|c| *c != NO_CORUNNER).map(String::from);
    fold_suite_tables(doc);
    let defined: Vec<String> = match doc.get("workloads") {
        Some(toml::Value::Table(t)) => t.keys().cloned().collect(),
        Some(_) => return Ok(()),
        None => Vec::new(),
    };
    let n_listed = names.len();
    names.extend(corunner);
    for (i, name) in names.iter().enumerate() {
        if defined.contains(name) {
            // A table for a built-in without a program (or groups) patches the built-in (e.g.
            // its params).
            let patch = match doc.get("workloads").and_then(|w| w.get(name.as_str())) {
                Some(toml::Value::Table(t)) if !t.contains_key("program") && !t.contains_key("groups") => t.clone(),
                _ => continue,
            };
            if traced::is_traced(name) && !patch.contains_key("trace") {
                let path = format!("workloads.{name}");
                return Err(SpecError::new(
                    blame(&path),
                    path,
                    format!("'{name}' is a traced program: it takes no settings (to replay a trace with other options, define a workload of another name with trace = \"FILE\")"),
                ));
            }
            let Some(mut table) = builtin_table(name) else { continue };
            merge(&mut table, &patch);
            if let Some(toml::Value::Table(w)) = doc.get_mut("workloads") {
                w.insert(name.clone(), toml::Value::Table(table));
            }
            continue;
        }
        let field = if i < n_listed { format!("experiment.workloads[{i}]") } else { "experiment.corunner".to_string() };
        if traced::is_traced(name) {
            // Its replay depends on the run's thread count: read when the spec is validated.
            traced::resolve(name).map_err(|m| SpecError::new(blame(&field), field, m))?;
            continue;
        }
        if let Err(candidates) = resolve_builtin(name) {
            return Err(SpecError::new(
                blame(&field),
                field,
                format!("workload '{name}' is ambiguous: it can mean {} (write the full name)", candidates.join(" or ")),
            ));
        }
        let Some(table) = builtin_table(name) else {
            let mut known: Vec<String> = builtin_names().into_iter().map(String::from).collect();
            known.extend(defined.iter().cloned());
            let hint = suggest::did_you_mean(name, known.iter().map(String::as_str));
            return Err(SpecError::new(
                blame(&field),
                field,
                format!("unknown workload '{name}'{hint} (known: {}; or define [workloads.{name}])", known.join(", ")),
            ));
        };
        let wl = doc.entry("workloads").or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(t) = wl {
            t.insert(name.clone(), toml::Value::Table(table));
        }
    }
    Ok(())
}

/// SHA-256 (first 16 hex digits) of a workload definition as materialised in the spec.
fn content_hash(v: &toml::Value) -> String {
    use sha2::{Digest, Sha256};
    let text = toml::to_string(v).unwrap_or_default();
    Sha256::digest(text.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Serde messages mention Rust types (`expected struct HaltPollSpec`, `expected u32`); say
/// what the spec should hold instead, in the user's words, and suggest the closest name for
/// an unknown field or variant. `path` is the dotted path of the value at fault.
fn clean_serde_message(m: &str, path: &str) -> String {
    let first = m.lines().next().unwrap_or(m).trim();
    let mut out = first.replace("invalid type: ", "").replace("invalid value: ", "");
    for (what, list) in [("unknown field `", "expected one of "), ("unknown variant `", "expected one of ")] {
        let Some(rest) = out.strip_prefix(what) else { continue };
        let Some((name, tail)) = rest.split_once('`') else { continue };
        let expected: Vec<String> = tail.split('`').skip(1).step_by(2).map(String::from).collect();
        let kind = if what.contains("field") { "field" } else { "value" };
        let hint = suggest::did_you_mean(name, expected.iter().map(String::as_str));
        let listed = match expected.len() {
            0 => " (there are none)".to_string(),
            _ => format!(" ({list}{})", expected.join(", ")),
        };
        return format!("unknown {kind} '{name}'{hint}{listed}");
    }
    if let Some(i) = out.find("expected struct ") {
        let fields = default_fields(path);
        let mut words = match &fields {
            Some(f) if !f.is_empty() => format!("expected a table with fields {}", f.join(", ")),
            _ => "expected a table".to_string(),
        };
        if out[..i].starts_with("boolean") && fields.as_ref().is_some_and(|f| f.iter().any(|k| k == "enabled")) {
            let value = out[..i].split('`').nth(1).unwrap_or("false");
            words.push_str(&format!(" (to switch it on or off: {path}.enabled = {value})"));
        }
        let found = out[..i].trim_end_matches([',', ' ']).to_string();
        return format!("{words}, got {found}");
    }
    if out.contains("expected string only") || out.contains("expected enum ") {
        // A name from a fixed set (`vm.tlb = "pv"`) given as another type.
        let example = match default_at(path) {
            Some(toml::Value::String(d)) => format!(" such as \"{d}\""),
            _ => String::new(),
        };
        return format!("expected a name (a string){example}");
    }
    for (rust, user) in [("expected tuple struct ", "expected a value for "), ("expected unit struct ", "expected a value for ")] {
        if let Some(i) = out.find(rust) {
            let name_end = out[i + rust.len()..].find(|c: char| !c.is_alphanumeric() && c != '_').map_or(out.len(), |j| i + rust.len() + j);
            let field = if path.is_empty() { "this field".to_string() } else { path.to_string() };
            out = format!("{}{user}{field}{}", &out[..i], &out[name_end..]);
        }
    }
    for (rust, user) in [
        ("expected u8", "expected an integer in 0..=255"),
        ("expected u16", "expected an integer in 0..=65535"),
        ("expected u32", "expected an integer in 0..=4294967295"),
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected i8", "expected an integer in -128..=127"),
        ("expected i16", "expected an integer in -32768..=32767"),
        ("expected i32", "expected an integer in -2147483648..=2147483647"),
        ("expected i64", "expected an integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a table"),
        ("expected a borrowed string", "expected a string"),
    ] {
        if let Some(i) = out.find(rust) {
            let end = i + rust.len();
            if out[end..].chars().next().is_none_or(|c| !c.is_alphanumeric()) {
                out = format!("{}{user}{}", &out[..i], &out[end..]);
            }
        }
    }
    out
}

/// The fields of the table at `path` in a spec with every default filled in (`vm.halt_poll`
/// → enabled, max, ...), when that path is a table.
fn default_fields(path: &str) -> Option<Vec<String>> {
    default_at(path)?.as_table().map(|t| t.keys().cloned().collect())
}

/// The default value at `path` (`vms.N.x` is looked up as `vm.x`), if the spec has one.
fn default_at(path: &str) -> Option<toml::Value> {
    let mut doc = toml::Table::new();
    let mut put = |k: &str, v: Result<toml::Table, toml::ser::Error>| {
        if let Ok(t) = v {
            doc.insert(k.to_string(), toml::Value::Table(t));
        }
    };
    put("machine", toml::Table::try_from(MachineSpec::default()));
    put("host", toml::Table::try_from(KernelSpec::default()));
    put("guest", toml::Table::try_from(KernelSpec::default()));
    put("vm", toml::Table::try_from(VmSpec::default()));
    put("limits", toml::Table::try_from(LimitsSpec::default()));
    put("record", toml::Table::try_from(RecordSpec::default()));
    put("report", toml::Table::try_from(ReportSpec::default()));
    let mut parts: Vec<&str> = path.split('.').collect();
    if parts.first() == Some(&"vms") && parts.len() >= 2 {
        parts.splice(0..2, ["vm"]);
    }
    let mut cur = doc.get(*parts.first()?)?;
    for p in parts.iter().skip(1).filter(|p| !p.is_empty()) {
        cur = cur.as_table()?.get(*p)?;
    }
    Some(cur.clone())
}

/// Fields that make a `[workloads.NAME]` table a definition of its own (rather than a patch
/// of a built-in's parameters or settings).
const DEFINITION_KEYS: [&str; 3] = ["program", "groups", "trace"];

/// Every `[workloads.NAME]` table must be a workload the experiment runs (listed, the
/// co-runner, or a co-runner of a variant), or a full definition: a table that only patches
/// a workload nobody runs is a misspelling (`workloads.lcok.params.iters`).
fn check_workload_tables(doc: &toml::Table) -> Result<(), (String, String)> {
    let Some(toml::Value::Table(w)) = doc.get("workloads") else { return Ok(()) };
    let experiment = doc.get("experiment").and_then(toml::Value::as_table);
    let mut runs: Vec<String> = match experiment.and_then(|e| e.get("workloads")) {
        Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        Some(toml::Value::String(s)) => vec![s.clone()],
        _ => return Ok(()), // serde reports it
    };
    if let Some(c) = experiment.and_then(|e| e.get("corunner")).and_then(toml::Value::as_str) {
        runs.push(c.to_string());
    }
    // Co-runners a variant switches to (`vary = { "experiment.corunner" = [...] }`, or a named
    // variant's `set`).
    let key = "experiment.corunner";
    if let Some(toml::Value::Array(values)) = experiment.and_then(|e| e.get("vary")).and_then(|v| v.get(key)) {
        runs.extend(values.iter().filter_map(|v| v.as_str().map(String::from)));
    }
    if let Some(toml::Value::Array(vs)) = experiment.and_then(|e| e.get("variants")) {
        runs.extend(vs.iter().filter_map(|v| v.get("set")?.get(key)?.as_str().map(String::from)));
    }
    let builtins = builtin_names();
    let suites: Vec<String> = builtins
        .iter()
        .copied()
        .chain(runs.iter().map(String::as_str))
        .filter_map(|n| n.split_once('.').map(|(s, _)| s.to_string()))
        .collect();
    let canonical = |n: &str| resolve_builtin(n).ok().flatten();
    for (name, v) in w {
        if runs.contains(name) {
            continue;
        }
        let t = match v {
            toml::Value::Table(t) => t,
            _ => continue, // parse_workload reports it if it is run
        };
        if DEFINITION_KEYS.iter().any(|k| t.contains_key(*k)) {
            continue;
        }
        // `workloads.parsec.dedupp...` arrives as a suite table holding the misspelt name.
        let full = match (suites.contains(name), t.iter().next()) {
            (true, Some((short, toml::Value::Table(_)))) if t.len() == 1 => format!("{name}.{short}"),
            _ => name.clone(),
        };
        // `parsec.dedup` when the experiment lists the same built-in as `dedup` (or the other
        // way round): the patch belongs to the listed name, under which it is read.
        if let Some(listed) = canonical(&full).and_then(|c| runs.iter().find(|r| canonical(r) == Some(c))) {
            return Err((
                format!("workloads.{full}"),
                format!(
                    "the experiment runs this workload as '{listed}': write its settings under workloads.{listed} (a table under another name of it is not read)"
                ),
            ));
        }
        let hint = suggest::did_you_mean(&full, runs.iter().map(String::as_str));
        let listed = if runs.is_empty() { "none".to_string() } else { runs.join(", ") };
        return Err((
            format!("workloads.{full}"),
            format!(
                "no workload '{full}' runs in this experiment{hint} (it runs: {listed}); list it in experiment.workloads, or give it a program to define it"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
