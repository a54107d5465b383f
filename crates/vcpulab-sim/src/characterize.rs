//! The characterization of a workload run natively (DIS ch.4): workload
//! parallelism, synchronization frequency, the scalability type they give, and the rates of
//! the events that cost most in VMs (`vcpulab characterize-sim`).

use serde::Serialize;

use crate::api::{CellError, Plan, ScenarioResult};
use crate::spec::SpecError;

/// Parallelism is *high* at or above this fraction of the CPUs (DIS ch.4: 75 %).
pub const HIGH_PARALLELISM: f64 = 0.75;

/// DIS's default allocation period, the "time slice" of the synchronization cut-off (24 ms).
pub const DEFAULT_SLICE_NS: u64 = 24_000_000;

/// What a native run of a workload shows.
#[derive(Clone, Debug, Serialize)]
pub struct Characterization {
    /// Workload name.
    pub workload: String,
    /// Profile version and content hash.
    pub version: u32,
    /// Content hash of the definition.
    pub hash: String,
    /// Scalability type the workload's definition declares (0 = not classified).
    pub expected_type: u8,
    /// CPUs (= n, the thread parameter).
    pub cpus: u32,
    /// Threads created.
    pub threads: u32,
    /// Run time (s).
    pub run_s: f64,
    /// Average number of running threads: busy time of the instance / run time.
    pub parallelism: f64,
    /// Whether `parallelism` ≥ 75 % of the CPUs.
    pub high_parallelism: bool,
    /// Voluntary context switches per thread per second.
    pub sync_per_thread_s: f64,
    /// The cut-off: one block per time slice (per second).
    pub sync_threshold_per_s: f64,
    /// Whether `sync_per_thread_s` reaches the cut-off.
    pub high_sync: bool,
    /// The type these give: 1 high/low, 2 low/high, 3 high/high, 4 low/low.
    pub scalability_type: u8,
    /// Share of busy time spent busy-waiting in user mode or on kernel locks.
    pub spin_frac: f64,
    /// Blocking operations per second (all threads).
    pub blocks_per_s: f64,
    /// Blocking waits that ended, their mean, median and 90th-percentile duration (µs): from
    /// going to sleep to being woken ([`crate::world::record::SyncRecord`]).
    pub block_mean_us: f64,
    /// Median blocking wait (µs).
    pub block_p50_us: f64,
    /// 90th-percentile blocking wait (µs).
    pub block_p90_us: f64,
    /// Wake-ups of sleeping threads per second.
    pub wakeups_per_s: f64,
    /// Share of the wake-ups that placed the woken thread on another CPU than the waker's.
    pub wakeups_remote_frac: f64,
    /// Futex system calls (waits and wakes) per second.
    pub futex_calls_per_s: f64,
    /// TLB shootdowns with remote targets per second.
    pub shootdowns_per_s: f64,
    /// Call-function IPIs of shootdowns and membarriers per second.
    pub call_ipis_per_s: f64,
    /// Responses per second (server workloads).
    pub requests_per_s: Option<f64>,
}

/// The DIS ch.4 scalability type of (high parallelism, high synchronization).
pub fn scalability_type(high_parallelism: bool, high_sync: bool) -> u8 {
    match (high_parallelism, high_sync) {
        (true, false) => 1,
        (false, true) => 2,
        (true, true) => 3,
        (false, false) => 4,
    }
}

/// The DIS ch.4 classification of a native run: its levels of parallelism and
/// synchronization and the scalability type they give.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Classification {
    /// Whether `parallelism` ≥ `high_parallelism` × the CPUs.
    pub high_parallelism: bool,
    /// The synchronization cut-off: one voluntary switch per thread per time slice (per second).
    pub sync_threshold_per_s: f64,
    /// Whether the synchronization rate reaches the cut-off.
    pub high_sync: bool,
    /// [`scalability_type`] of the two levels.
    pub scalability_type: u8,
}

/// The one rule of DIS ch.4 (used by `characterize-sim` and, through the Python binding,
/// by `vcpulab analyze`'s categories): parallelism (average running threads) is high at or
/// above `high_parallelism` (a fraction, [`HIGH_PARALLELISM`] by default) of the `cpus`;
/// synchronization (voluntary context switches per thread per second) is high at or above one
/// per time slice of `slice_ns`.
pub fn classify(parallelism: f64, sync_per_thread_s: f64, cpus: u32, high_parallelism: f64, slice_ns: f64) -> Classification {
    let high_p = parallelism >= high_parallelism * f64::from(cpus);
    let sync_threshold_per_s = 1e9 / slice_ns.max(1.0);
    let high_s = sync_per_thread_s >= sync_threshold_per_s;
    Classification { high_parallelism: high_p, sync_threshold_per_s, high_sync: high_s, scalability_type: scalability_type(high_p, high_s) }
}

/// Why a characterization failed.
#[derive(Debug)]
pub enum CharacterizeError {
    /// The workload or an override is invalid.
    Spec(SpecError),
    /// The run failed.
    Run(CellError),
}

impl std::fmt::Display for CharacterizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CharacterizeError::Spec(e) => write!(f, "{e}"),
            CharacterizeError::Run(e) => write!(f, "{e}"),
        }
    }
}

/// Runs `workload` natively with n = `cpus` threads on `cpus` cores (seed `seed`, spec
/// overrides `sets`) and characterizes it with the time slice `slice_ns`.
pub fn characterize(workload: &str, cpus: u32, seed: u64, slice_ns: u64, sets: &[String]) -> Result<Characterization, CharacterizeError> {
    characterize_checked(workload, cpus, seed, slice_ns, sets, &mut || false)
}

/// Like [`characterize`], asking `check` every few thousand events whether to stop.
pub fn characterize_checked(
    workload: &str,
    cpus: u32,
    seed: u64,
    slice_ns: u64,
    sets: &[String],
    check: &mut dyn FnMut() -> bool,
) -> Result<Characterization, CharacterizeError> {
    let text = format!("[experiment]\nworkloads = [{workload:?}]\nscenarios = [\"native\"]\nvcpus = [{cpus}]\nseeds = [{seed}]\n");
    let mut plan = Plan::new(&text, "<characterize-sim>", sets).map_err(CharacterizeError::Spec)?;
    let r = plan.run_cell_checked(0, check).map_err(CharacterizeError::Run)?;
    let declared = plan.spec().workloads.iter().find(|w| w.name == workload).map_or(0, |w| w.meta.scalability_type);
    Ok(of_result(&r, cpus, slice_ns, declared))
}

/// Characterizes a native scenario result.
pub fn of_result(r: &ScenarioResult, cpus: u32, slice_ns: u64, expected_type: u8) -> Characterization {
    let i = &r.run.instances[0];
    let secs = i.finish_ns.max(1) as f64 * 1e-9;
    // The §1.4 inputs are metrics of every run (`mechanism_metrics`).
    let parallelism = r.metrics["parallelism"];
    let sync_per_thread_s = r.metrics["sync_per_thread_s"];
    let class = classify(parallelism, sync_per_thread_s, cpus, HIGH_PARALLELISM, slice_ns as f64);
    let spin = i.counters.spin_ns as f64;
    Characterization {
        workload: r.workload.clone(),
        version: r.workload_version,
        hash: r.workload_hash.clone(),
        expected_type,
        cpus,
        threads: i.threads,
        run_s: secs,
        parallelism,
        high_parallelism: class.high_parallelism,
        sync_per_thread_s,
        sync_threshold_per_s: class.sync_threshold_per_s,
        high_sync: class.high_sync,
        scalability_type: class.scalability_type,
        spin_frac: if i.busy_ns > 0 { spin / i.busy_ns as f64 } else { 0.0 },
        blocks_per_s: i.counters.blocks as f64 / secs,
        block_mean_us: i.sync.block_mean_ns / 1e3,
        block_p50_us: i.sync.block_p50_ns / 1e3,
        block_p90_us: i.sync.block_p90_ns / 1e3,
        wakeups_per_s: i.sync.wakeups as f64 / secs,
        wakeups_remote_frac: if i.sync.wakeups > 0 { i.sync.wakeups_remote as f64 / i.sync.wakeups as f64 } else { 0.0 },
        futex_calls_per_s: (i.sync.futex_waits + i.sync.futex_wakes) as f64 / secs,
        shootdowns_per_s: i.tlb.shootdowns as f64 / secs,
        call_ipis_per_s: (i.tlb.ipis + i.membarrier.ipis) as f64 / secs,
        requests_per_s: i.responses.as_ref().map(|x| x.throughput_rps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_uses_both_cut_offs_inclusively() {
        // 8 CPUs: high parallelism from 6 running threads; 24 ms slice: high sync from 41.67/s.
        let slice = DEFAULT_SLICE_NS as f64;
        assert_eq!(classify(6.0, 1e9 / slice, 8, HIGH_PARALLELISM, slice).scalability_type, 3);
        assert_eq!(classify(6.0, 41.0, 8, HIGH_PARALLELISM, slice).scalability_type, 1);
        assert_eq!(classify(5.99, 42.0, 8, HIGH_PARALLELISM, slice).scalability_type, 2);
        assert_eq!(classify(5.99, 41.0, 8, HIGH_PARALLELISM, slice).scalability_type, 4);
        assert!((classify(1.0, 1.0, 1, HIGH_PARALLELISM, slice).sync_threshold_per_s - 1000.0 / 24.0).abs() < 1e-9);
    }
}
