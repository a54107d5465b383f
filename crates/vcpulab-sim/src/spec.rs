//! Specs: the TOML a user writes, validated into a run plan.
//!
//! A spec has separate tables for the experiment (which workloads, scenarios, vCPU counts and
//! seeds), the machine, the host kernel, the guest kernel, the VMs, the run limits and inline
//! workload definitions. Parsing goes: text → TOML table → `--set` overrides → built-in
//! workloads materialised under `[workloads.NAME]` → serde (unknown fields rejected) →
//! semantic checks. Every error is a [`SpecError`] naming the source, the field path and what
//! was expected.

pub mod error;
pub mod kernel;
pub mod overrides;
pub mod types;
pub mod vm;

use indexmap::IndexMap;
use serde::Deserialize;

pub use error::SpecError;
pub use kernel::{IdlePolicy, KernelSpec};
pub use types::{Dur, OneOrMany, Scenario};
pub use vm::{PleSpec, VmSpec};

use crate::machine::MachineSpec;
use crate::workload::builtin::{builtin_names, builtin_text};
use crate::workload::profile::parse_workload;
use crate::workload::Workload;

/// The `[experiment]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Workloads to run (built-in names or names defined under `[workloads]`).
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
    /// Number of identical VMs in OC/OC2 (digest §1.2: 2).
    #[serde(default = "default_oc_vms")]
    pub oc_vms: u32,
}

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
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSpec {
    /// Maximum virtual time of one run.
    pub max_virtual_time: Dur,
    /// Maximum number of events of one run.
    pub max_events: u64,
}

impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec { max_virtual_time: Dur(600_000_000_000), max_events: 2_000_000_000 }
    }
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
    /// Run limits.
    pub limits: LimitsSpec,
    /// Workloads named by the experiment, validated, in experiment order.
    pub workloads: Vec<Workload>,
    /// The fully materialised spec as TOML (after overrides), for provenance.
    pub materialized: String,
}

impl Spec {
    /// Parses and validates spec `text` read from `source` (a file name or `<flags>`), after
    /// applying `--set PATH=VALUE` overrides.
    pub fn parse(text: &str, source: &str, overrides: &[String]) -> Result<Spec, SpecError> {
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| SpecError::toml(source, &e))?;
        let sets = overrides::parse_all(overrides)?;
        // Overrides outside [workloads] first (they may change which workloads run), then the
        // named built-ins are copied in, then every override (so workload fields land on the copies).
        let outside: Vec<_> = sets.iter().filter(|o| !o.dotted.starts_with("workloads.")).cloned().collect();
        overrides::apply_all(&mut doc, &outside)?;
        materialize_builtins(&mut doc, source)?;
        overrides::apply_all(&mut doc, &sets)?;
        let materialized = toml::to_string(&doc).unwrap_or_default();
        let blame = |path: String| overrides::blame(&sets, source, &path);
        let file: SpecFile = serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let path = e.path().to_string();
            SpecError::new(blame(path.clone()), path, clean_serde_message(&e.inner().to_string()))
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
        check("vm", file.vm.check())?;
        check("experiment", check_experiment(&file.experiment, &file.machine))?;
        if file.limits.max_virtual_time.0 == 0 {
            return Err(SpecError::new(blame("limits.max_virtual_time".into()), "limits.max_virtual_time", "expected a positive duration"));
        }
        let mut workloads = Vec::new();
        for name in &file.experiment.workloads.0 {
            let v = &file.workloads[name.as_str()];
            let w = parse_workload(name, v).map_err(|(f, m)| {
                let path = if f.is_empty() { format!("workloads.{name}") } else { format!("workloads.{name}.{f}") };
                // A bad parameter value is blamed on whoever set the parameter.
                let origin = match m.rsplit_once("(value of params.") {
                    Some((_, p)) => format!("workloads.{name}.params.{}", p.trim_end_matches(')')),
                    None => path.clone(),
                };
                SpecError::new(blame(origin), path, m)
            })?;
            for &vcpus in &file.experiment.vcpus.0 {
                let threads = w.threads.or(file.experiment.threads).unwrap_or(vcpus);
                w.check_threads(threads).map_err(|(f, m)| {
                    let path = format!("workloads.{name}.{f}");
                    SpecError::new(blame(path.clone()), path, m)
                })?;
            }
            workloads.push(w);
        }
        Ok(Spec {
            experiment: file.experiment,
            machine: file.machine,
            host: file.host,
            guest: file.guest,
            vm: file.vm,
            limits: file.limits,
            workloads,
            materialized,
        })
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
    if e.threads == Some(0) {
        return Err(("threads".into(), "expected an integer >= 1 (got 0)".into()));
    }
    if e.oc_vms < 2 {
        return Err(("oc_vms".into(), format!("expected at least 2 co-running VMs (got {})", e.oc_vms)));
    }
    Ok(())
}

/// Copies the TOML of every built-in workload the experiment names (and the spec does not
/// define itself) into `[workloads.NAME]`.
fn materialize_builtins(doc: &mut toml::Table, source: &str) -> Result<(), SpecError> {
    let names: Vec<String> = match doc.get("experiment").and_then(|e| e.get("workloads")) {
        Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        Some(toml::Value::String(s)) => vec![s.clone()],
        _ => return Ok(()), // serde reports the problem with its path
    };
    let defined: Vec<String> = match doc.get("workloads") {
        Some(toml::Value::Table(t)) => t.keys().cloned().collect(),
        Some(_) => return Ok(()),
        None => Vec::new(),
    };
    for (i, name) in names.iter().enumerate() {
        if defined.contains(name) {
            continue;
        }
        let Some(text) = builtin_text(name) else {
            let mut known: Vec<String> = builtin_names().into_iter().map(String::from).collect();
            known.extend(defined.iter().cloned());
            return Err(SpecError::new(
                source.to_string(),
                format!("experiment.workloads[{i}]"),
                format!("unknown workload '{name}' (known: {}; or define [workloads.{name}])", known.join(", ")),
            ));
        };
        let table: toml::Table = toml::from_str(text).expect("built-in workloads are valid TOML (tested)");
        let wl = doc.entry("workloads").or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(t) = wl {
            t.insert(name.clone(), toml::Value::Table(table));
        }
    }
    Ok(())
}

/// Serde messages mention Rust types; keep them short and about the file.
fn clean_serde_message(m: &str) -> String {
    let first = m.lines().next().unwrap_or(m).trim();
    first.replace("invalid type: ", "").replace("invalid value: ", "")
}

#[cfg(test)]
mod tests;
