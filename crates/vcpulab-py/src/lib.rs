//! Python bindings of `vcpulab-sim`: the native module `vcpulab._vcpulab`.
//!
//! Only conversions and error mapping live here; everything else is in the simulator crate
//! (results cross the boundary as JSON text produced by serde).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use vcpulab_sim::account::timeline::{TimelineOptions, DEFAULT_MAX_EVENTS, DEFAULT_WINDOW_NS};
use vcpulab_sim::api;
use vcpulab_sim::workload::builtin::{builtin_names, builtin_text};

create_exception!(_vcpulab, VcpulabError, PyException, "Base class of every error raised by the simulator.");
create_exception!(_vcpulab, SpecError, VcpulabError, "A spec, workload or override is invalid.");
create_exception!(_vcpulab, SimulationError, VcpulabError, "A run could not complete (run limit, deadlock).");
create_exception!(_vcpulab, TraceError, VcpulabError, "A trace file cannot be read (truncated, corrupted, newer format).");

/// The simulator version.
#[pyfunction]
fn version() -> &'static str {
    vcpulab_sim::VERSION
}

/// The simulator version and its source fingerprint: `0.1.0+1a2b3c4d5e6f`.
#[pyfunction]
fn build_id() -> String {
    vcpulab_sim::build_id()
}

/// A validated experiment: its cells and the runs done so far (baselines are reused).
#[pyclass(module = "vcpulab._vcpulab")]
struct Plan {
    inner: api::Plan,
}

#[pymethods]
impl Plan {
    #[new]
    fn new(spec_text: &str, source: &str, overrides: Vec<String>) -> PyResult<Self> {
        api::Plan::new(spec_text, source, &overrides).map(|inner| Plan { inner }).map_err(|e| SpecError::new_err(e.to_string()))
    }

    /// The cells, as dicts.
    fn cells<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .cells()
            .iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("workload", &c.workload)?;
                d.set_item("scenario", c.scenario.name())?;
                d.set_item("vcpus", c.vcpus)?;
                d.set_item("threads", c.threads)?;
                d.set_item("oc_vms", c.oc_vms)?;
                d.set_item("seed", c.seed)?;
                d.set_item("variant", &c.variant)?;
                Ok(d)
            })
            .collect()
    }

    /// Published values, report settings and variant labels, as JSON text.
    fn info(&self) -> PyResult<String> {
        serde_json::to_string(&self.inner.info()).map_err(|e| VcpulabError::new_err(e.to_string()))
    }

    /// Runs cell `i` (releasing the GIL) and returns its result as JSON text.
    fn run_cell(&mut self, py: Python<'_>, i: usize) -> PyResult<String> {
        self.check_index(i)?;
        let inner = &mut self.inner;
        let r = interruptible(py, |check| inner.run_cell_checked(i, check))?;
        serde_json::to_string(&r).map_err(|e| VcpulabError::new_err(e.to_string()))
    }

    /// Runs cell `i` recording a timeline of its own simulation in the virtual-time window
    /// [`from_ns`, `to_ns`) (`to_ns` None: until the run ends), stopping at `max_events`.
    /// Returns (result JSON text, timeline JSON bytes, events, ns where the cap stopped
    /// recording or None). ValueError for a bad window. When the simulation fails (a run
    /// limit, a deadlock), the SimulationError carries the timeline up to the failure as
    /// attributes `timeline` (bytes), `timeline_events` and `timeline_truncated_at`.
    #[pyo3(signature = (i, from_ns=0, to_ns=Some(DEFAULT_WINDOW_NS), max_events=DEFAULT_MAX_EVENTS))]
    fn run_cell_with_timeline<'py>(
        &mut self,
        py: Python<'py>,
        i: usize,
        from_ns: u64,
        to_ns: Option<u64>,
        max_events: u64,
    ) -> PyResult<(String, Bound<'py, PyBytes>, u64, Option<u64>)> {
        self.check_index(i)?;
        let opts = TimelineOptions { from_ns, to_ns, max_events };
        opts.check().map_err(pyo3::exceptions::PyValueError::new_err)?;
        let inner = &mut self.inner;
        let mut partial = None;
        let r = interruptible(py, |check| {
            inner.run_cell_with_timeline_checked(i, opts, check).map_err(|e| {
                partial = e.partial;
                e.error
            })
        });
        let r = match (r, partial) {
            (Ok(r), _) => r,
            (Err(e), Some(p)) if e.is_instance_of::<SimulationError>(py) => {
                let v = e.value(py);
                v.setattr("timeline", PyBytes::new(py, p.json.as_bytes()))?;
                v.setattr("timeline_events", p.events)?;
                v.setattr("timeline_truncated_at", p.truncated_at_ns)?;
                return Err(e);
            }
            (Err(e), _) => return Err(e),
        };
        let result = serde_json::to_string(&r.result).map_err(|e| VcpulabError::new_err(e.to_string()))?;
        Ok((result, PyBytes::new(py, r.json.as_bytes()), r.events, r.truncated_at_ns))
    }

    /// The simulations cell `i` needs and its content keys, as JSON text (`key`,
    /// `config_key`, `main`, `base`, `alone`; each job has `key`, `layout`, `count`).
    fn cell_jobs(&self, i: usize) -> PyResult<String> {
        self.check_index(i)?;
        serde_json::to_string(&self.inner.cell_jobs(i)).map_err(|e| VcpulabError::new_err(e.to_string()))
    }

    /// Simulates the baseline `layout` ("native" or "vms") × `count` of cell `i` (or finds
    /// it) and returns its summary as JSON text.
    fn run_job(&mut self, py: Python<'_>, i: usize, layout: &str, count: u32) -> PyResult<String> {
        self.check_index(i)?;
        let l = match layout {
            "native" => vcpulab_sim::scenario::Layout::Native { instances: count },
            "vms" => vcpulab_sim::scenario::Layout::Vms { vms: count },
            other => return Err(pyo3::exceptions::PyValueError::new_err(format!("unknown layout {other:?} (native or vms)"))),
        };
        let inner = &mut self.inner;
        let r = interruptible(py, |check| inner.run_job_checked(i, l, check))?;
        serde_json::to_string(&r).map_err(|e| VcpulabError::new_err(e.to_string()))
    }

    /// Records a baseline summary (JSON text from `run_job` or `take_new_summaries`)
    /// computed elsewhere, so cells paired with job `key` do not simulate it again.
    fn provide_summary(&mut self, key: &str, summary: &str) -> PyResult<()> {
        let s: api::RunSummary =
            serde_json::from_str(summary).map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("bad summary for {key}: {e}")))?;
        self.inner.provide_summary(key, s);
        Ok(())
    }

    /// The baseline summaries simulated since the last call: a list of (key, JSON text).
    fn take_new_summaries(&mut self) -> PyResult<Vec<(String, String)>> {
        self.inner
            .take_new_summaries()
            .into_iter()
            .map(|(k, s)| Ok((k, serde_json::to_string(&s).map_err(|e| VcpulabError::new_err(e.to_string()))?)))
            .collect()
    }

    /// The fully materialised spec after overrides (TOML).
    fn spec_toml(&self) -> String {
        self.inner.spec().materialized.clone()
    }

    fn __len__(&self) -> usize {
        self.inner.cells().len()
    }
}

impl Plan {
    fn check_index(&self, i: usize) -> PyResult<()> {
        let n = self.inner.cells().len();
        if i >= n {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!("cell {i} out of range ({n} cells)")));
        }
        Ok(())
    }
}

/// Runs `f` with the GIL released; every few thousand events the simulation briefly
/// re-attaches to let Python handle signals, so Ctrl-C stops a long run promptly.
fn interruptible<T: Send>(py: Python<'_>, f: impl Send + FnOnce(&mut dyn FnMut() -> bool) -> Result<T, api::CellError>) -> PyResult<T> {
    let mut pending: Option<PyErr> = None;
    let r = py.detach(|| {
        f(&mut || match Python::attach(|py| py.check_signals()) {
            Ok(()) => false,
            Err(e) => {
                pending = Some(e);
                true
            }
        })
    });
    if let Some(e) = pending {
        return Err(e);
    }
    r.map_err(|e| SimulationError::new_err(e.to_string()))
}

/// The built-in workloads.
#[pyfunction]
fn workloads<'py>(py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    api::builtin_workloads()
        .into_iter()
        .map(|w| {
            let d = PyDict::new(py);
            d.set_item("name", w.name)?;
            d.set_item("description", w.description)?;
            d.set_item("model", w.model)?;
            d.set_item("source", w.source)?;
            d.set_item("suite", w.suite)?;
            d.set_item("sync", w.sync)?;
            d.set_item("basis", w.basis)?;
            d.set_item("scalability_type", w.scalability_type)?;
            d.set_item("version", w.version)?;
            d.set_item("kvm_overhead", w.kvm_overhead)?;
            Ok(d)
        })
        .collect()
}

/// Runs a workload natively and characterizes it (DIS ch.4); returns JSON.
#[pyfunction]
#[pyo3(signature = (workload, cpus, seed, slice_ns, overrides))]
fn characterize(py: Python<'_>, workload: String, cpus: u32, seed: u64, slice_ns: u64, overrides: Vec<String>) -> PyResult<String> {
    use vcpulab_sim::characterize::{characterize_checked as run, CharacterizeError};
    let mut spec_error = None;
    let r = interruptible(py, |check| {
        run(&workload, cpus, seed, slice_ns, &overrides, check).map_err(|e| match e {
            CharacterizeError::Run(e) => e,
            CharacterizeError::Spec(e) => {
                let message = e.to_string();
                spec_error = Some(e);
                api::CellError { message, interrupted: false }
            }
        })
    });
    match (r, spec_error) {
        (_, Some(e)) => Err(SpecError::new_err(e.to_string())),
        (Ok(c), None) => serde_json::to_string(&c).map_err(|e| VcpulabError::new_err(e.to_string())),
        (Err(e), None) => Err(e),
    }
}

/// The DIS ch.4 scalability type (1 high parallelism / low synchronization, 2 low/high,
/// 3 high/high, 4 low/low) of a native run with `parallelism` average running threads and
/// `sync_per_thread_s` voluntary switches per thread per second on `cpus` CPUs: the rule of
/// `characterize-sim` (`high_parallelism`: the fraction of the CPUs; `slice_ms`: the time slice).
#[pyfunction]
#[pyo3(signature = (parallelism, sync_per_thread_s, cpus, high_parallelism=vcpulab_sim::characterize::HIGH_PARALLELISM, slice_ms=vcpulab_sim::characterize::DEFAULT_SLICE_NS as f64 / 1e6))]
fn scalability_type(parallelism: f64, sync_per_thread_s: f64, cpus: u32, high_parallelism: f64, slice_ms: f64) -> u8 {
    vcpulab_sim::characterize::classify(parallelism, sync_per_thread_s, cpus, high_parallelism, slice_ms * 1e6).scalability_type
}

/// Describes trace file `path` and the replay of process `pid` (None: the default choice); JSON.
#[pyfunction]
#[pyo3(signature = (path, pid=None))]
fn trace_info(py: Python<'_>, path: std::path::PathBuf, pid: Option<u32>) -> PyResult<String> {
    let r = py.detach(move || api::trace_info(&path, pid));
    match r {
        Ok(info) => serde_json::to_string(&info).map_err(|e| VcpulabError::new_err(e.to_string())),
        Err(e) => Err(TraceError::new_err(e)),
    }
}

/// Every pluggable policy implementation (`vcpulab policies`).
#[pyfunction]
fn policies<'py>(py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    vcpulab_sim::policy::REGISTRY
        .iter()
        .map(|p| {
            let d = PyDict::new(py);
            d.set_item("kind", p.kind)?;
            d.set_item("name", p.name)?;
            d.set_item("field", p.field)?;
            d.set_item("description", p.description)?;
            Ok(d)
        })
        .collect()
}

/// The TOML of a built-in workload.
#[pyfunction]
fn workload_toml(name: &str) -> PyResult<&'static str> {
    if let Err(c) = vcpulab_sim::workload::builtin::resolve_builtin(name) {
        return Err(SpecError::new_err(format!("workload '{name}' is ambiguous: it can mean {} (write the full name)", c.join(" or "))));
    }
    builtin_text(name).ok_or_else(|| SpecError::new_err(format!("unknown workload '{name}' (built-ins: {})", builtin_names().join(", "))))
}

/// The platform presets: name, title, the experiments that use them, and whether it is the
/// default.
#[pyfunction]
fn platforms<'py>(py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    vcpulab_sim::platform::PRESETS
        .iter()
        .map(|p| {
            let meta = p.meta();
            let d = PyDict::new(py);
            d.set_item("name", p.name)?;
            d.set_item("title", meta.title)?;
            d.set_item("used_by", meta.used_by)?;
            d.set_item("default", p.name == vcpulab_sim::platform::DEFAULT_PRESET)?;
            Ok(d)
        })
        .collect()
}

/// The TOML of a platform preset, with its sources.
#[pyfunction]
fn platform_toml(name: &str) -> PyResult<&'static str> {
    vcpulab_sim::platform::find(name).map(|p| p.text).ok_or_else(|| SpecError::new_err(vcpulab_sim::platform::unknown(name)))
}

/// The `# estimate:` values of a platform preset with their bounds, as JSON: a list of
/// `{key, value, integer, min, max, fixed, reason, line}` (`value` as the preset gives it;
/// `min` and `max` null and `fixed` true for a value that is a choice, not a number).
#[pyfunction]
fn platform_estimates(name: &str) -> PyResult<String> {
    let p = vcpulab_sim::platform::find(name).ok_or_else(|| SpecError::new_err(vcpulab_sim::platform::unknown(name)))?;
    let list = vcpulab_sim::platform::estimates(p.text).map_err(|e| VcpulabError::new_err(format!("presets/{}.toml {e}", p.name)))?;
    let bound = |b: f64, integer: bool| if integer { serde_json::json!(b as i64) } else { serde_json::json!(b) };
    let rows: Vec<serde_json::Value> = list
        .iter()
        .map(|e| {
            let (min, max) = e
                .bounds
                .map_or((serde_json::Value::Null, serde_json::Value::Null), |(lo, hi)| (bound(lo, e.integer), bound(hi, e.integer)));
            serde_json::json!({
                "key": e.key,
                "value": e.toml,
                "integer": e.integer,
                "min": min,
                "max": max,
                "fixed": e.bounds.is_none(),
                "reason": e.reason,
                "line": e.line,
            })
        })
        .collect();
    serde_json::to_string(&rows).map_err(|e| VcpulabError::new_err(e.to_string()))
}

/// Runs the fixed bench model for at least `seconds`; returns JSON.
#[pyfunction]
#[pyo3(name = "bench")]
fn bench_sim(py: Python<'_>, seconds: f64) -> PyResult<String> {
    let r = interruptible(py, |check| api::bench_checked(seconds, check))?;
    serde_json::to_string(&r).map_err(|e| VcpulabError::new_err(e.to_string()))
}

/// Linux perf counters on a process and everything it starts (`vcpulab-measure`): attach
/// while the process waits before its `exec`; counting starts at the `exec`.
#[pyclass(module = "vcpulab._vcpulab", unsendable)]
struct PerfCounters {
    inner: vcpulab_measure::PerfCounters,
}

#[pymethods]
impl PerfCounters {
    #[new]
    fn new(pid: i32, events: Vec<String>) -> Self {
        let names: Vec<&str> = events.iter().map(String::as_str).collect();
        PerfCounters { inner: vcpulab_measure::PerfCounters::attach(pid, &names) }
    }

    /// Event name → count, or → the reason (a str) it is unavailable here.
    fn read<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, count) in self.inner.read() {
            match count {
                vcpulab_measure::EventCount::Count(n) => d.set_item(name, n)?,
                vcpulab_measure::EventCount::Unavailable(why) => d.set_item(name, why)?,
            }
        }
        Ok(d)
    }
}

#[pymodule]
fn _vcpulab(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("VcpulabError", py.get_type::<VcpulabError>())?;
    m.add("SpecError", py.get_type::<SpecError>())?;
    m.add("SimulationError", py.get_type::<SimulationError>())?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("TIMELINE_WINDOW_NS", DEFAULT_WINDOW_NS)?;
    m.add("TIMELINE_MAX_EVENTS", DEFAULT_MAX_EVENTS)?;
    m.add_class::<Plan>()?;
    m.add_class::<PerfCounters>()?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(build_id, m)?)?;
    m.add_function(wrap_pyfunction!(workloads, m)?)?;
    m.add_function(wrap_pyfunction!(workload_toml, m)?)?;
    m.add_function(wrap_pyfunction!(platforms, m)?)?;
    m.add_function(wrap_pyfunction!(platform_toml, m)?)?;
    m.add_function(wrap_pyfunction!(platform_estimates, m)?)?;
    m.add_function(wrap_pyfunction!(policies, m)?)?;
    m.add_function(wrap_pyfunction!(characterize, m)?)?;
    m.add_function(wrap_pyfunction!(scalability_type, m)?)?;
    m.add_function(wrap_pyfunction!(trace_info, m)?)?;
    m.add_function(wrap_pyfunction!(bench_sim, m)?)?;
    Ok(())
}
