//! The result of one simulation: times, the ledger, and counters, all derived from the world.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::account::{Cause, Layer, Log2Histogram, OwnerKind};
use crate::engine::SimTime;
use crate::kernel::bandwidth::BandwidthStats;
use crate::scenario::RunConfig;
use crate::virt::allocation::AllocTotals;
use crate::virt::exit::ExitReason;
use crate::virt::vcpu::{ipi_kind, HaltPollStats, PleStats, PvStats};

use super::World;

/// Summary of a latency histogram.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean (ns).
    pub mean_ns: f64,
    /// Upper bound of the median's log2 bucket (ns).
    pub p50_ns: u64,
    /// Upper bound of the 99th percentile's log2 bucket (ns).
    pub p99_ns: u64,
    /// Largest sample (ns).
    pub max_ns: u64,
}

/// The nearest-rank quantiles `qs` of `samples` (0 for each when there are none).
pub fn quantiles<const N: usize>(samples: &[u64], qs: [f64; N]) -> [u64; N] {
    if samples.is_empty() {
        return [0; N];
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    qs.map(|q| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
}

impl From<&Log2Histogram> for LatencySummary {
    fn from(h: &Log2Histogram) -> Self {
        LatencySummary { count: h.count, mean_ns: h.mean(), p50_ns: h.quantile_upper(0.5), p99_ns: h.quantile_upper(0.99), max_ns: h.max }
    }
}

/// One workload instance.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct InstanceRecord {
    /// Name ("native0", "vm1").
    pub name: String,
    /// VM index if virtualized.
    pub vm: Option<u32>,
    /// Completion time (ns).
    pub finish_ns: u64,
    /// Busy core time of its owner(s), all layers (ns): C of TPDS before host sharing.
    pub busy_ns: u64,
    /// User-layer busy time (ns).
    pub user_ns: u64,
    /// Kernel-layer busy time (ns).
    pub kernel_ns: u64,
    /// Host-layer busy time (ns).
    pub host_ns: u64,
    /// Threads.
    pub threads: u32,
    /// Counters summed over its threads.
    #[serde(flatten)]
    pub counters: ThreadCounters,
    /// Thread wake-up latency (all threads).
    pub wake_latency: LatencySummary,
    /// Per thread.
    pub thread_stats: Vec<ThreadRecord>,
    /// A co-runner (not measured; still running when the run ended).
    pub background: bool,
    /// CPI and memory accesses of its computation (with the memory model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<super::memory::MemSummary>,
    /// TLB shootdowns sent by its threads.
    pub tlb: TlbRecord,
    /// `membarrier` calls of its threads.
    pub membarrier: MembarrierRecord,
    /// How glibc's arenas were handed to its threads ([`crate::workload::heap::ProcessHeap`]).
    pub arenas: ArenaRecord,
    /// How its threads took `mmap_sem` and the VMA locks ([`crate::kernel::rwsem`]).
    pub mm_locks: crate::kernel::rwsem::MmLockStats,
    /// Response times of the requests its threads answered (`respond`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responses: Option<ResponseRecord>,
    /// Its threads' blocking waits, wake-ups and futex calls.
    pub sync: SyncRecord,
}

/// The guest-level synchronisation statistics of an instance ([`crate::kernel::thread::SyncStats`]):
/// the numbers a trace of its threads gives.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SyncRecord {
    /// Blocking waits (all classes; a created thread's wait for its creation excluded).
    pub blocks: u64,
    /// Of which on synchronisation objects (mutex, condvar, barrier, queue).
    pub blocks_sync: u64,
    /// Of which timer sleeps.
    pub blocks_sleep: u64,
    /// Of which on memory-management locks (`mmap_sem`, VMA locks).
    pub blocks_other: u64,
    /// Waits that ended with a wake-up (those the durations describe).
    pub block_ns_count: u64,
    /// Mean wait (ns).
    pub block_mean_ns: f64,
    /// Median wait (ns, interpolated in a log-linear histogram).
    pub block_p50_ns: f64,
    /// 90th-percentile wait (ns).
    pub block_p90_ns: f64,
    /// Longest wait (ns).
    pub block_max_ns: u64,
    /// Wake-ups of sleeping threads.
    pub wakeups: u64,
    /// Of which placed the woken thread on the waker's CPU.
    pub wakeups_local: u64,
    /// Of which placed it on another CPU.
    pub wakeups_remote: u64,
    /// `futex` wait system calls.
    pub futex_waits: u64,
    /// `futex` wake (and requeue) system calls.
    pub futex_wakes: u64,
}

impl From<&crate::kernel::thread::SyncStats> for SyncRecord {
    fn from(s: &crate::kernel::thread::SyncStats) -> Self {
        let h = &s.block_ns;
        SyncRecord {
            blocks: s.blocks_sync + s.blocks_sleep + s.blocks_other,
            blocks_sync: s.blocks_sync,
            blocks_sleep: s.blocks_sleep,
            blocks_other: s.blocks_other,
            block_ns_count: h.count,
            block_mean_ns: h.mean(),
            block_p50_ns: h.quantile(0.5),
            block_p90_ns: h.quantile(0.9),
            block_max_ns: h.max,
            wakeups: s.wakeups,
            wakeups_local: s.wakeups_local,
            wakeups_remote: s.wakeups - s.wakeups_local,
            futex_waits: s.futex_waits,
            futex_wakes: s.futex_wakes,
        }
    }
}

/// Response times of a server instance (`respond`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ResponseRecord {
    /// Requests answered.
    pub count: u64,
    /// Requests per second of the instance's run time.
    pub throughput_rps: f64,
    /// Mean (µs).
    pub mean_us: f64,
    /// Percentiles (µs): 50th, 90th, 95th, 99th, and the maximum.
    pub p50_us: f64,
    /// 90th percentile (µs).
    pub p90_us: f64,
    /// 95th percentile (µs).
    pub p95_us: f64,
    /// 99th percentile (µs).
    pub p99_us: f64,
    /// Maximum (µs).
    pub max_us: f64,
    /// Fraction answered within the workload's `qos.good` bound (None without `qos`).
    pub good_frac: Option<f64>,
    /// Fraction answered within `qos.tolerable`.
    pub tolerable_frac: Option<f64>,
}

impl ResponseRecord {
    /// BAS's QoS rule (BAS, SPECweb2005): 97 % of requests within "good" and 99 % within
    /// "tolerable". None without a `qos` table.
    pub fn meets_qos(&self) -> Option<bool> {
        Some(self.good_frac? >= 0.97 && self.tolerable_frac? >= 0.99)
    }

    /// Summarises response times (ns) of an instance that ran for `run_ns`.
    pub fn new(samples: &[u64], run_ns: u64, qos: Option<crate::workload::program::Qos>) -> Option<ResponseRecord> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let n = s.len();
        // Nearest-rank percentile.
        let pct = |p: f64| s[((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3;
        let within = |b: u64| s.partition_point(|&x| x <= b) as f64 / n as f64;
        Some(ResponseRecord {
            count: n as u64,
            throughput_rps: n as f64 / (run_ns.max(1) as f64 * 1e-9),
            mean_us: s.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1e3,
            p50_us: pct(50.0),
            p90_us: pct(90.0),
            p95_us: pct(95.0),
            p99_us: pct(99.0),
            max_us: s[n - 1] as f64 / 1e3,
            good_frac: qos.map(|q| within(q.good)),
            tolerable_frac: qos.map(|q| within(q.tolerable)),
        })
    }
}

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` calls of one instance.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MembarrierRecord {
    /// Calls that had remote targets.
    pub calls: u64,
    /// Calls with no other CPU running the process.
    pub local_only: u64,
    /// Remote targets, all calls.
    pub targets: u64,
    /// Call-function IPIs sent.
    pub ipis: u64,
    /// Latency from the call to the last target's acknowledgement.
    pub latency: LatencySummary,
}

/// The arenas of an instance's process(es), summed (glibc malloc/arena.c).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ArenaRecord {
    /// Arenas made beside the main ones.
    pub made: u64,
    /// Threads given an exited thread's arena at their first `malloc`.
    pub reused: u64,
    /// Threads given an arena other threads were attached to (past the arena limit).
    pub shared: u64,
}

/// TLB shootdowns of one instance (sender's view, as S4U measured).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TlbRecord {
    /// Flushes with remote targets.
    pub shootdowns: u64,
    /// Flushes with no remote CPU running the process.
    pub local_only: u64,
    /// Remote targets, all shootdowns.
    pub targets: u64,
    /// Call-function IPIs sent.
    pub ipis: u64,
    /// Targets deferred to their next VM entry (PV TLB flush / Shoot4U).
    pub deferred: u64,
    /// Latency from the remote flush's start to the last acknowledgement.
    pub latency: LatencySummary,
    /// Exact quantiles of that latency (nearest rank; ns): 10th, 50th, 90th and 99th
    /// percentiles, [0, 0, 0, 0] without shootdowns.
    pub quantiles_ns: [u64; 4],
    /// Targets by their state when the shootdown reached them, and the latency each state
    /// explains (the state of the last target to acknowledge; [`crate::kernel::tlb::TargetState`]).
    pub by_target_state: BTreeMap<String, crate::kernel::tlb::TargetStateStats>,
    /// Every latency (ns), if `[record] tlb_samples` is on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub samples_ns: Vec<u64>,
}

/// Counters of one thread, or summed over the threads of an instance.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ThreadCounters {
    /// Time computing (ns).
    pub compute_ns: u64,
    /// Time spinning (ns).
    pub spin_ns: u64,
    /// Blocking operations.
    pub blocks: u64,
    /// Voluntary context switches.
    pub nvcsw: u64,
    /// Involuntary context switches.
    pub nivcsw: u64,
    /// Time waiting for TLB-shootdown acknowledgements (ns).
    pub tlb_wait_ns: u64,
}

impl std::ops::AddAssign<&ThreadCounters> for ThreadCounters {
    fn add_assign(&mut self, o: &ThreadCounters) {
        self.tlb_wait_ns += o.tlb_wait_ns;
        self.compute_ns += o.compute_ns;
        self.spin_ns += o.spin_ns;
        self.blocks += o.blocks;
        self.nvcsw += o.nvcsw;
        self.nivcsw += o.nivcsw;
    }
}

/// One thread.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadRecord {
    /// Index within the instance.
    pub idx: u32,
    /// Its counters.
    #[serde(flatten)]
    pub counters: ThreadCounters,
    /// Wake-up latency.
    pub wake_latency: LatencySummary,
}

/// One vCPU.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VcpuRecord {
    /// Busy time (ns), all layers.
    pub busy_ns: u64,
    /// Guest user (ns).
    pub user_ns: u64,
    /// Guest kernel (ns).
    pub kernel_ns: u64,
    /// Host for this vCPU (ns).
    pub host_ns: u64,
    /// Exits.
    pub exits: u64,
    /// Exits by reason (the reasons it had).
    pub exits_by_reason: BTreeMap<String, u64>,
    /// HLTs that blocked.
    pub halts: u64,
    /// Host preemptions.
    pub preemptions: u64,
    /// IPIs its guest CPU sent.
    pub ipis_sent: u64,
    /// IPIs its guest CPU received.
    pub ipis_received: u64,
    /// Halt polls attempted.
    pub halt_poll_attempted: u64,
    /// Halt polls that succeeded.
    pub halt_poll_successful: u64,
    /// Its halt-poll window at the end (ns).
    pub halt_poll_ns: u64,
    /// Its PLE window at the end (cycles).
    pub ple_window: u64,
    /// Allocation periods: time given, used, unused and borrowed (ns).
    pub allocation: AllocTotals,
    /// Its host weight at the end (changed by the asymmetric allocation).
    pub weight: u64,
    /// Its wake-up granularity at the end (ns; changed by the asymmetric latency component).
    pub wakeup_gran_ns: u64,
    /// The core it is placed on at the end.
    pub core: u32,
    /// Times it ran on another core than the time before.
    pub migrations: u64,
    /// With a quota (`vm.quota`): its `vcpuN` group's `cpu.stat` (periods, periods throttled,
    /// throttled time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<BandwidthStats>,
}

/// KVM's halt-polling statistics of a VM (Linux virt/kvm/kvm_main.c, `KVM_GENERIC_VCPU_STATS`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HaltPollRecord {
    /// `halt_exits`.
    pub exits: u64,
    /// `halt_attempted_poll`.
    pub attempted: u64,
    /// `halt_successful_poll`.
    pub successful: u64,
    /// `halt_poll_invalid` (0 on x86).
    pub invalid: u64,
    /// `halt_wakeup`.
    pub wakeups: u64,
    /// `halt_poll_success_ns`.
    pub poll_success_ns: u64,
    /// `halt_poll_fail_ns`.
    pub poll_fail_ns: u64,
    /// `halt_wait_ns`.
    pub wait_ns: u64,
    /// successful / attempted (None when nothing was attempted).
    pub success_rate: Option<f64>,
    /// Window grow events.
    pub grows: u64,
    /// Window shrink events.
    pub shrinks: u64,
    /// `halt_wait_hist`.
    pub wait: LatencySummary,
    /// `halt_poll_success_hist`.
    pub poll_success: LatencySummary,
    /// `halt_poll_fail_hist`.
    pub poll_fail: LatencySummary,
    /// The poll window at each attempted poll (ns; log2 buckets).
    pub window: LatencySummary,
}

/// PLE and directed yield of a VM.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PleRecord {
    /// PAUSE_INSTRUCTION exits.
    pub exits: u64,
    /// Directed-yield and window counters summed over the vCPUs.
    #[serde(flatten)]
    pub counters: PleStats,
}

impl HaltPollRecord {
    /// A VM's record from its vCPUs' summed statistics and its HLT exit count.
    fn new(exits: u64, hp: &HaltPollStats) -> HaltPollRecord {
        HaltPollRecord {
            exits,
            attempted: hp.attempted,
            successful: hp.successful,
            invalid: hp.invalid,
            wakeups: hp.wakeups,
            poll_success_ns: hp.poll_success_ns,
            poll_fail_ns: hp.poll_fail_ns,
            wait_ns: hp.wait_ns,
            success_rate: (hp.attempted > 0).then(|| hp.successful as f64 / hp.attempted as f64),
            grows: hp.grows,
            shrinks: hp.shrinks,
            wait: (&hp.wait_hist).into(),
            poll_success: (&hp.success_hist).into(),
            poll_fail: (&hp.fail_hist).into(),
            window: (&hp.window_hist).into(),
        }
    }
}

/// One VM.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VmRecord {
    /// VM index.
    pub vm: u32,
    /// Exits by reason.
    pub exits: BTreeMap<String, u64>,
    /// Host time by exit reason / host activity (ns).
    pub host_ns_by_reason: BTreeMap<String, u64>,
    /// Guest user time (ns).
    pub guest_user_ns: u64,
    /// Guest kernel time (ns).
    pub guest_kernel_ns: u64,
    /// Host time (ns).
    pub host_ns: u64,
    /// IPIs sent by the guest.
    pub ipis_sent: u64,
    /// IPIs sent by the guest, by kind (`resched`, `tlb`, `call`).
    pub ipis_by_kind: BTreeMap<String, u64>,
    /// IPIs its vCPUs received, by kind.
    pub ipis_received_by_kind: BTreeMap<String, u64>,
    /// HLTs that blocked a vCPU.
    pub halts: u64,
    /// Halt polling.
    pub halt_poll: HaltPollRecord,
    /// PLE and directed yield.
    pub ple: PleRecord,
    /// PV features (counters summed over the vCPUs).
    pub pv: PvStats,
    /// Host preemptions of runnable vCPUs.
    pub preemptions: u64,
    /// vCPU wake-up latency in the host (woken → running).
    pub vcpu_wake_latency: LatencySummary,
    /// Per vCPU.
    pub vcpus: Vec<VcpuRecord>,
    /// With `[record] ple_window`: `[t_ns, window_cycles]` per interval that had PLE exits,
    /// `t_ns` the interval's start and the window the mean in force at those exits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ple_window_series: Option<Vec<(u64, f64)>>,
    /// Its PLE window and directed-yield policies (`vm.ple.window_policy`, `yield_policy`).
    pub window_policy: String,
    /// See `window_policy`.
    pub yield_policy: String,
    /// Its spinning cost over the run, as APLE measures it (DIS ch.3).
    pub spin: SpinRecord,
    /// The epochs of an epoch-based window policy (APLE): start, end, threshold, inefficiency.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ple_epochs: Vec<crate::policy::WindowEpoch>,
    /// Allocation periods over its vCPUs (ns; DIS ch.4): time given, used, unused and
    /// borrowed, up to its instance's finish ([`crate::virt::allocation`]).
    pub allocation: AllocTotals,
    /// The allocation period (ns): the host's scheduling period.
    pub period_ns: u64,
    /// With `vm.global_quota`: the VM group's `cpu.stat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<BandwidthStats>,
}

/// A VM's spinning cost over a run (APLE's inefficiency, DIS ch.3).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SpinRecord {
    /// PLE exits.
    pub ple_exits: u64,
    /// Wasteful spinning: the window in force at each PLE exit, summed (ns).
    pub wasted_spin_ns: u64,
    /// Wasteful vCPU switches: from each PLE exit to the next guest entry on its core (ns).
    pub switch_ns: u64,
    /// CPU time the VM's vCPU threads received (ns).
    pub cpu_ns: u64,
    /// (wasted_spin_ns + switch_ns) / cpu_ns.
    pub inefficiency: f64,
}

impl From<crate::policy::SpinCost> for SpinRecord {
    fn from(c: crate::policy::SpinCost) -> Self {
        SpinRecord {
            ple_exits: c.ple_exits,
            wasted_spin_ns: c.wasted_spin_ns,
            switch_ns: c.switch_ns,
            cpu_ns: c.cpu_ns,
            inefficiency: c.inefficiency_since(&Default::default()),
        }
    }
}

/// One row of the ledger.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LedgerRow {
    /// Owner ("host", "native0", "vm0/vcpu3").
    pub owner: String,
    /// Layer.
    pub layer: &'static str,
    /// Cause.
    pub cause: String,
    /// Whether the cause is work (counts in C); false for idle and C-state exits.
    pub busy: bool,
    /// Nanoseconds.
    pub ns: u64,
}

/// Everything one simulation produced.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunRecord {
    /// What ran ("1 VM(s)", ...).
    pub layout: String,
    /// Cores simulated.
    pub cores: u32,
    /// Sockets those cores span (TPDS layout: fewest sockets, spread evenly).
    pub sockets_used: u32,
    /// Virtual end time (ns): when the last instance finished.
    pub duration_ns: u64,
    /// Events processed.
    pub events: u64,
    /// Sum of everything attributed (= cores × duration).
    pub attributed_ns: u64,
    /// Host-owned busy time not charged to any VM or instance (ns).
    pub host_busy_ns: u64,
    /// Host idle time (ns), including C-state exits.
    pub host_idle_ns: u64,
    /// Instances.
    pub instances: Vec<InstanceRecord>,
    /// VMs.
    pub vms: Vec<VmRecord>,
    /// Busy time per core (ns).
    pub core_busy_ns: Vec<u64>,
    /// The ledger.
    pub ledger: Vec<LedgerRow>,
    /// With `[record] wait_chains`: who made the workload's busy-waiting threads wait, largest
    /// first ([`crate::kernel::waits`]); the rows sum to the threads' spin and remote-call wait
    /// time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_chains: Option<Vec<crate::kernel::waits::WaitChainRow>>,
    /// With `[host.asymmetric]`: the components on and the policy's decisions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asymmetric: Option<AsymmetricRecord>,
    /// The memory system's counters (`machine.memory.model`): CPI, local and remote
    /// accesses per (v)CPU, bandwidth per node, the NUMA balancer's work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<super::memory::MemoryRecord>,
}

/// What the asymmetric-vCPU policy did in a run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AsymmetricRecord {
    /// Component 1 was on.
    pub allocation: bool,
    /// Component 2 was on.
    pub latency: bool,
    /// Component 3 was on.
    pub resolver: bool,
    /// Its decisions.
    #[serde(flatten)]
    pub counts: crate::policy::asymmetric::AsymmetricCounts,
}

/// Name of a host-layer cause in `host_ns_by_reason` (exit reasons as perf kvm names them;
/// SCHED = host scheduling of vCPU threads, as TPDS Fig. 9).
pub fn host_reason_name(c: Cause) -> String {
    match c {
        Cause::Exit(r) => r.name().to_string(),
        Cause::VcpuSwitch | Cause::VcpuWakeup => "SCHED".into(),
        Cause::Interrupt => "HOST_INTERRUPT".into(),
        Cause::TimerProgram => "HOST_TIMER".into(),
        Cause::IpiSend => "HOST_IPI".into(),
        other => other.name().to_uppercase(),
    }
}

impl RunRecord {
    /// Reads the results out of a finished world.
    pub(crate) fn from_world(w: &World, end: SimTime, cfg: &RunConfig) -> RunRecord {
        let l = &w.ledger;
        let busy = |o: u32, layer: Layer| l.owner_layer_busy(o, layer);
        let mut instances = Vec::new();
        for (i, inst) in w.insts.iter().enumerate() {
            let owners: Vec<u32> = match inst.vm {
                Some(vm) => w.vms[vm as usize].vcpus.iter().map(|&v| w.vcpus[v as usize].owner).collect(),
                None => vec![w.tasks[w.threads[inst.threads[0] as usize].task as usize].owner],
            };
            let sum = |layer: Layer| owners.iter().map(|&o| busy(o, layer)).sum::<u64>();
            let mut wake = Log2Histogram::default();
            let mut totals = ThreadCounters::default();
            let mut thread_stats = Vec::new();
            for &t in &inst.threads {
                let th = &w.threads[t as usize];
                let task = &w.tasks[th.task as usize];
                let counters = ThreadCounters {
                    compute_ns: th.stats.compute_ns,
                    spin_ns: th.stats.spin_ns,
                    blocks: th.stats.blocks,
                    nvcsw: task.nvcsw,
                    nivcsw: task.nivcsw,
                    tlb_wait_ns: th.stats.tlb_wait_ns,
                };
                totals += &counters;
                wake.merge(&th.stats.wake_latency);
                thread_stats.push(ThreadRecord { idx: th.idx, counters, wake_latency: (&th.stats.wake_latency).into() });
            }
            let (u, k, h) = (sum(Layer::User), sum(Layer::Kernel), sum(Layer::Host));
            instances.push(InstanceRecord {
                name: inst.name.clone(),
                vm: inst.vm,
                finish_ns: inst.finish.unwrap_or(end).ns(),
                busy_ns: u + k + h,
                user_ns: u,
                kernel_ns: k,
                host_ns: h,
                threads: inst.threads.len() as u32,
                counters: totals,
                wake_latency: (&wake).into(),
                thread_stats,
                background: inst.background,
                memory: w.mem.as_ref().and_then(|m| m.inst(i)),
                tlb: TlbRecord {
                    shootdowns: inst.tlb.shootdowns,
                    local_only: inst.tlb.local_only,
                    targets: inst.tlb.targets,
                    ipis: inst.tlb.ipis,
                    deferred: inst.tlb.deferred,
                    latency: (&inst.tlb.latency).into(),
                    quantiles_ns: quantiles(&inst.tlb.samples, [0.1, 0.5, 0.9, 0.99]),
                    by_target_state: crate::kernel::tlb::TargetState::ALL
                        .iter()
                        .map(|s| (s.name().to_string(), inst.tlb.by_state[*s as usize]))
                        .filter(|(_, x)| x.targets > 0)
                        .collect(),
                    samples_ns: if w.record_tlb_samples { inst.tlb.samples.clone() } else { Vec::new() },
                },
                arenas: ArenaRecord {
                    made: inst.heaps.iter().map(|h| h.arenas() as u64 - 1).sum(),
                    reused: inst.heaps.iter().map(|h| u64::from(h.reused)).sum(),
                    shared: inst.heaps.iter().map(|h| u64::from(h.shared)).sum(),
                },
                mm_locks: inst.mm_locks,
                responses: ResponseRecord::new(&inst.responses, inst.finish.unwrap_or(end).ns(), inst.wl.qos),
                sync: (&inst.sync).into(),
                membarrier: MembarrierRecord {
                    calls: inst.membarrier.shootdowns,
                    local_only: inst.membarrier.local_only,
                    targets: inst.membarrier.targets,
                    ipis: inst.membarrier.ipis,
                    latency: (&inst.membarrier.latency).into(),
                },
            });
        }
        let mut vms = Vec::new();
        for (i, vm) in w.vms.iter().enumerate() {
            let mut exits = BTreeMap::new();
            let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
            let mut vcpus = Vec::new();
            let mut wake = Log2Histogram::default();
            let (mut halts, mut pre) = (0, 0);
            let mut by_kind = [0u64; ipi_kind::COUNT];
            let mut received = [0u64; ipi_kind::COUNT];
            let (mut hp, mut hlt_exits) = (HaltPollStats::default(), 0);
            let mut ple = PleRecord::default();
            let mut pv = PvStats::default();
            for &v in &vm.vcpus {
                let vc = &w.vcpus[v as usize];
                for r in ExitReason::ALL {
                    if vc.exits[r.index()] > 0 {
                        *exits.entry(r.name().to_string()).or_insert(0) += vc.exits[r.index()];
                    }
                }
                for c in (0..Cause::COUNT).map(Cause::from_index).filter(|c| c.is_busy()) {
                    let ns = l.get(vc.owner, Layer::Host, c);
                    if ns > 0 {
                        *by_reason.entry(host_reason_name(c)).or_insert(0) += ns;
                    }
                }
                let (u, k, h) = (busy(vc.owner, Layer::User), busy(vc.owner, Layer::Kernel), busy(vc.owner, Layer::Host));
                vcpus.push(VcpuRecord {
                    busy_ns: u + k + h,
                    user_ns: u,
                    kernel_ns: k,
                    host_ns: h,
                    exits: vc.exits.iter().sum(),
                    exits_by_reason: ExitReason::ALL
                        .iter()
                        .filter(|r| vc.exits[r.index()] > 0)
                        .map(|r| (r.name().to_string(), vc.exits[r.index()]))
                        .collect(),
                    halts: vc.halts,
                    preemptions: vc.preemptions,
                    ipis_sent: vc.ipis_sent.iter().sum(),
                    ipis_received: vc.ipis_received.iter().sum(),
                    halt_poll_attempted: vc.hp.attempted,
                    halt_poll_successful: vc.hp.successful,
                    halt_poll_ns: vc.halt_poll_ns,
                    ple_window: vm.policies.window.window(vc.idx),
                    allocation: w.alloc_totals(v, end),
                    weight: w.tasks[vc.task as usize].weight,
                    wakeup_gran_ns: w.tasks[vc.task as usize].wakeup_gran.unwrap_or(w.kernels[0].params.wakeup_gran),
                    core: w.tasks[vc.task as usize].pinned.unwrap_or(w.tasks[vc.task as usize].cpu),
                    migrations: vc.alloc.migrations,
                    bandwidth: w.tasks[vc.task as usize].bw_pool.map(|b| w.bw_stats(b)),
                });
                wake.merge(&vc.wake_latency);
                for (i, n) in vc.ipis_received.iter().enumerate() {
                    received[i] += n;
                }
                for (i, n) in vc.ipis_sent.iter().enumerate() {
                    by_kind[i] += n;
                }
                halts += vc.halts;
                pre += vc.preemptions;
                hlt_exits += vc.exits[ExitReason::Hlt.index()];
                hp.merge(&vc.hp);
                ple.exits += vc.exits[ExitReason::PauseInstruction.index()];
                ple.counters.merge(&vc.ple);
                pv.merge(&vc.pv);
            }
            let mut allocation = AllocTotals::default();
            vcpus.iter().for_each(|x| allocation += x.allocation);
            vms.push(VmRecord {
                vm: i as u32,
                exits,
                host_ns_by_reason: by_reason,
                guest_user_ns: vcpus.iter().map(|v| v.user_ns).sum(),
                guest_kernel_ns: vcpus.iter().map(|v| v.kernel_ns).sum(),
                host_ns: vcpus.iter().map(|v| v.host_ns).sum(),
                ipis_sent: by_kind.iter().sum(),
                ipis_by_kind: ipi_kind::NAMES.iter().zip(by_kind).map(|(n, c)| (n.to_string(), c)).collect(),
                ipis_received_by_kind: ipi_kind::NAMES.iter().zip(received).map(|(n, c)| (n.to_string(), c)).collect(),
                halts,
                halt_poll: HaltPollRecord::new(hlt_exits, &hp),
                ple,
                pv,
                preemptions: pre,
                vcpu_wake_latency: (&wake).into(),
                vcpus,
                ple_window_series: w
                    .record_ple_window
                    .map(|interval| vm.ple_series.iter().map(|&(b, sum, n)| (b * interval, sum as f64 / n as f64)).collect()),
                window_policy: vm.spec.ple.window_policy.clone(),
                yield_policy: vm.spec.ple.yield_policy.clone(),
                spin: w.spin_cost(i).into(),
                ple_epochs: vm.policies.window.epochs().to_vec(),
                allocation,
                period_ns: w.kernels[0].params.latency,
                bandwidth: w.tasks[w.vcpus[vm.vcpus[0] as usize].task as usize]
                    .group
                    .and_then(|g| w.kernels[0].groups[g as usize].bw)
                    .map(|b| w.bw_stats(b)),
            });
        }
        let owner_name = |o: u32| match w.owners[o as usize] {
            OwnerKind::Host => "host".to_string(),
            OwnerKind::Native { instance } => format!("native{instance}"),
            OwnerKind::Vcpu { vm, vcpu } => format!("vm{vm}/vcpu{vcpu}"),
        };
        let ledger = l
            .entries()
            .map(|(o, layer, cause, ns)| LedgerRow {
                owner: owner_name(o),
                layer: layer.name(),
                cause: cause.name(),
                busy: cause.is_busy(),
                ns,
            })
            .collect();
        RunRecord {
            layout: cfg.layout.describe(),
            cores: cfg.cores,
            sockets_used: cfg.machine.select(cfg.cores).map_or(0, |t| t.sockets_used),
            duration_ns: end.ns(),
            events: w.events,
            attributed_ns: l.grand_total(),
            host_busy_ns: l.owner_total(0, true),
            host_idle_ns: l.owner_total(0, false) - l.owner_total(0, true),
            instances,
            vms,
            core_busy_ns: (0..cfg.cores as usize).map(|c| l.core_total(c, true)).collect(),
            ledger,
            wait_chains: w.record_wait_chains.then(|| w.wait_chain_rows()),
            asymmetric: w.asymmetric_counts().map(|counts| AsymmetricRecord {
                allocation: cfg.host.asymmetric.allocation,
                latency: cfg.host.asymmetric.latency,
                resolver: cfg.host.asymmetric.resolver,
                counts,
            }),
            memory: w.mem.as_ref().map(|m| {
                let cpus = if w.vcpus.is_empty() {
                    (0..w.cores.len()).map(|c| (format!("cpu{c}"), m.core_node[c], m.by_core[c])).collect()
                } else {
                    w.vcpus
                        .iter()
                        .map(|v| {
                            let task = &w.tasks[v.task as usize];
                            (owner_name(v.owner), m.core_node[task.cpu as usize], m.by_owner[v.owner as usize])
                        })
                        .collect()
                };
                m.record(end, cpus, w.numad.as_ref().map(|n| n.counts))
            }),
        }
    }

    /// The measured (not co-runner) instances.
    pub fn measured(&self) -> impl Iterator<Item = &InstanceRecord> {
        self.instances.iter().filter(|i| !i.background)
    }

    /// Mean completion time of the measured instances (s): t of TPDS §1.1.
    pub fn mean_time_s(&self) -> f64 {
        let n = self.measured().count().max(1);
        self.measured().map(|i| i.finish_ns as f64).sum::<f64>() / n as f64 * 1e-9
    }

    /// Cycles (as busy ns) per instance: the instances' own time plus host time not charged
    /// to anyone, split evenly over all instances (TPDS §1.2: C_v = C_sys / 2 in OC), for the
    /// measured instances.
    pub fn cycles_per_instance_ns(&self) -> f64 {
        let all = self.instances.len().max(1) as f64;
        let n = self.measured().count().max(1) as f64;
        let own: u64 = self.measured().map(|i| i.busy_ns).sum();
        own as f64 / n + self.host_busy_ns as f64 / all
    }
}
