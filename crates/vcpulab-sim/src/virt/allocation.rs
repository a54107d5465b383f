//! Allocation periods (DIS ch.4): the host's view of what each vCPU was
//! given and what it used, period by period, and the asymmetric-vCPU policy run at each
//! period's end (DIS ch.5, [`crate::policy::asymmetric`]).
//!
//! The allocation period is the host's CFS scheduling period (`[host] sched_latency`: 24 ms
//! on ≥ 8 cores, DIS's default). In a period, vCPU v placed on core c is *given*
//! `period × w_v / W_c`, where W_c sums the weights of the vCPUs of unfinished VMs placed on
//! c (a vCPU's placement is its pinned core, or its last core when unpinned). What it does
//! not use is not carried over: CFS places a waking vCPU at most half a period behind the
//! queue (GENTLE_FAIR_SLEEPERS), so idle time cannot be banked. Per period and vCPU the
//! record keeps:
//!
//! - `unused` = max(0, given − used): slice left to other VMs;
//! - `borrowed` = max(0, used − given): time beyond the allocation, which is other tasks'
//!   unused slice (CFS is work-conserving).
//!
//! A VM's accounting stops when its instance finishes (the period it finishes in is
//! pro-rated). Reading the state never changes it, so the clock does not alter runs unless
//! `[host.asymmetric]` turns a component on.

use serde::Serialize;

use crate::engine::SimTime;
use crate::kernel::{TaskState, HOST};
use crate::policy::asymmetric::{decide, AsymmetricCounts, VcpuPeriod, VmPeriod};
use crate::spec::kernel::AsymmetricSpec;
use crate::world::{Ev, World};

/// The allocation-period clock of a run with VMs.
#[derive(Debug)]
pub(crate) struct Periods {
    /// Period length (ns).
    pub(crate) period: u64,
    /// Start of the current period.
    pub(crate) start: SimTime,
    /// The asymmetric-vCPU policy, when a component is on.
    pub(crate) asym: Option<AsymmetricSpec>,
    /// Its decisions so far.
    pub(crate) counts: AsymmetricCounts,
    /// Per VM: host vCPU-switch time of its vCPUs at the period's start (ns).
    vm_switch_start: Vec<u64>,
    /// Per VM: the instance it runs.
    vm_inst: Vec<usize>,
    /// Per VM: its accounting stopped (its instance finished in an earlier period).
    vm_closed: Vec<bool>,
}

/// One vCPU's allocation state and totals.
#[derive(Clone, Debug, Default)]
pub struct VcpuAlloc {
    /// Its weight as the spec sets it.
    pub base_weight: u64,
    /// Host run time at the period's start (ns).
    start_sum: u64,
    /// Preemptions at the period's start.
    start_preemptions: u64,
    /// Given in the current period (ns).
    given_ns: f64,
    /// Symmetric share in the current period (ns).
    fair_ns: f64,
    /// The asymmetric policy's allocation (ns per period; 0 = not set yet).
    alloc_ns: f64,
    /// Wake-ups this period that waited longer than its wake-up granularity.
    pub(crate) late_wakeups: u32,
    /// Wake-up IPIs received this period, by sending vCPU index.
    pub(crate) woken_by: Vec<u32>,
    /// Totals over the closed periods.
    totals: AllocTotals,
    /// The core it last ran on.
    pub(crate) last_core: Option<u32>,
    /// Times it ran on a different core than the time before.
    pub migrations: u64,
}

/// Allocation totals of a vCPU or a VM (ns).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct AllocTotals {
    /// Time given over the periods.
    pub allocated_ns: f64,
    /// Host run time used.
    pub consumed_ns: f64,
    /// Σ max(0, given − used) per period.
    pub unused_ns: f64,
    /// Σ max(0, used − given) per period.
    pub borrowed_ns: f64,
}

impl std::ops::AddAssign for AllocTotals {
    fn add_assign(&mut self, o: Self) {
        self.allocated_ns += o.allocated_ns;
        self.consumed_ns += o.consumed_ns;
        self.unused_ns += o.unused_ns;
        self.borrowed_ns += o.borrowed_ns;
    }
}

impl AllocTotals {
    fn period(given: f64, used: f64) -> AllocTotals {
        AllocTotals { allocated_ns: given, consumed_ns: used, unused_ns: (given - used).max(0.0), borrowed_ns: (used - given).max(0.0) }
    }
}

impl VcpuAlloc {
    /// A vCPU of a VM with `n` vCPUs and spec weight `base_weight`.
    pub fn new(n: u32, base_weight: u64) -> VcpuAlloc {
        VcpuAlloc { base_weight, woken_by: vec![0; n as usize], ..Default::default() }
    }
}

impl Periods {
    /// The clock of a run with `vms` VMs whose instances are `vm_inst`.
    pub(crate) fn new(period: u64, asym: &AsymmetricSpec, vm_inst: Vec<usize>) -> Periods {
        let n = vm_inst.len();
        Periods {
            period,
            start: SimTime::ZERO,
            asym: asym.enabled().then(|| asym.clone()),
            counts: AsymmetricCounts::default(),
            vm_switch_start: vec![0; n],
            vm_inst,
            vm_closed: vec![false; n],
        }
    }
}

impl World<'_> {
    /// Starts the allocation-period clock (runs with VMs).
    pub(crate) fn start_periods(&mut self) {
        let Some(p) = &self.periods else { return };
        let period = p.period;
        self.entitle();
        self.q.schedule(SimTime(period), Ev::Period);
    }

    /// Host run time of task `t` so far, without accounting it (read-only).
    pub(crate) fn run_time_now(&self, t: u32) -> u64 {
        let task = &self.tasks[t as usize];
        if task.state == TaskState::Running {
            task.sum_exec + self.now.since(task.exec_start)
        } else {
            task.sum_exec
        }
    }

    /// The end of an allocation period: account it, run the asymmetric policy, give out the
    /// next one.
    pub(crate) fn period_end(&mut self) {
        let p = self.periods.as_ref().expect("period events only with a clock");
        let (start, period) = (p.start, p.period);
        let now = self.now;
        let mut views = Vec::new();
        let mut vm_views = Vec::new();
        for vm in 0..self.vms.len() {
            let p = self.periods.as_ref().expect("clock");
            let closed = p.vm_closed[vm];
            let finish = self.insts[p.vm_inst[vm]].finish;
            let switch_now = self.vm_switch_ns(vm);
            let switch_ns = switch_now.saturating_sub(p.vm_switch_start[vm]);
            // A VM finishing in this period is accounted up to its finish, then closed.
            let frac = match finish {
                Some(f) if f < now => (f.since(start) as f64 / period as f64).min(1.0),
                _ => 1.0,
            };
            for i in 0..self.vms[vm].vcpus.len() {
                let v = self.vms[vm].vcpus[i] as usize;
                let used = (self.run_time_now(self.vcpus[v].task) - self.vcpus[v].alloc.start_sum) as f64;
                let a = &mut self.vcpus[v].alloc;
                if !closed {
                    a.totals += AllocTotals::period(a.given_ns * frac, used);
                }
                let task = &self.tasks[self.vcpus[v].task as usize];
                let preempted = self.vcpus[v].preemptions - self.vcpus[v].alloc.start_preemptions;
                let a = &self.vcpus[v].alloc;
                views.push(VcpuPeriod {
                    vm: vm as u32,
                    core: task.pinned.unwrap_or(task.cpu),
                    fair_ns: a.fair_ns,
                    given_ns: a.given_ns,
                    used_ns: used,
                    ready: matches!(task.state, TaskState::Queued | TaskState::Running),
                    alloc_ns: if a.alloc_ns > 0.0 { a.alloc_ns } else { a.fair_ns },
                    gran_ns: task.wakeup_gran.unwrap_or(self.kernels[HOST as usize].params.wakeup_gran),
                    base_weight: a.base_weight,
                    preemptions: preempted as u32,
                    late_wakeups: a.late_wakeups,
                    woken_by: Vec::new(),
                });
            }
            let base = views.len() - self.vms[vm].vcpus.len();
            for i in 0..self.vms[vm].vcpus.len() {
                let v = self.vms[vm].vcpus[i] as usize;
                views[base + i].woken_by =
                    self.vcpus[v].alloc.woken_by.iter().enumerate().filter(|(_, &n)| n > 0).map(|(s, &n)| (base + s, n)).collect();
            }
            let p = self.periods.as_mut().expect("clock");
            p.vm_switch_start[vm] = switch_now;
            if finish.is_some() {
                p.vm_closed[vm] = true;
            }
            vm_views.push(VmPeriod { switch_ns: switch_ns as f64, live: finish.is_none() });
        }
        if let Some(spec) = self.periods.as_ref().and_then(|p| p.asym.clone()) {
            let d = decide(&spec, self.kernels[HOST as usize].params.wakeup_gran, self.cores.len() as u32, &views, &vm_views);
            self.apply(&views, &d);
        }
        for v in 0..self.vcpus.len() {
            let run = self.run_time_now(self.vcpus[v].task);
            let pre = self.vcpus[v].preemptions;
            let a = &mut self.vcpus[v].alloc;
            a.start_sum = run;
            a.start_preemptions = pre;
            a.late_wakeups = 0;
            a.woken_by.iter_mut().for_each(|n| *n = 0);
        }
        self.entitle();
        let p = self.periods.as_mut().expect("clock");
        p.start = now;
        if !self.q.is_empty() {
            // Only while something else can still happen: a deadlocked run must end.
            self.q.schedule(now + period, Ev::Period);
        }
    }

    /// Applies the asymmetric policy's decisions.
    fn apply(&mut self, views: &[VcpuPeriod], d: &crate::policy::asymmetric::Decisions) {
        let default_gran = self.kernels[HOST as usize].params.wakeup_gran;
        let ids: Vec<u32> = self.vms.iter().flat_map(|vm| vm.vcpus.iter().copied()).collect();
        for (i, &v) in ids.iter().enumerate() {
            self.vcpus[v as usize].alloc.alloc_ns = d.alloc_ns[i];
            let t = self.vcpus[v as usize].task;
            let (w, g) = (d.weights[i], d.gran_ns[i]);
            self.set_task_weight(t, w);
            let task = &mut self.tasks[t as usize];
            task.wakeup_gran = (g != default_gran || task.wakeup_gran.is_some()).then_some(g);
        }
        for &(x, y) in &d.swaps {
            let (tx, ty) = (self.vcpus[ids[x] as usize].task, self.vcpus[ids[y] as usize].task);
            self.set_affinity(tx, views[y].core);
            self.set_affinity(ty, views[x].core);
        }
        if let Some(p) = self.periods.as_mut() {
            p.counts += d.counts;
        }
    }

    /// Gives out the next period: each vCPU's share of its core with the weights in force
    /// (`given`) and with the spec's weights (`fair`).
    fn entitle(&mut self) {
        let Some(p) = &self.periods else { return };
        let period = p.period as f64;
        let n = self.cores.len();
        let (mut w_now, mut w_base) = (vec![0u64; n], vec![0u64; n]);
        let placed: Vec<(usize, usize, bool)> = (0..self.vcpus.len())
            .map(|v| {
                let task = &self.tasks[self.vcpus[v].task as usize];
                let vm = self.vcpus[v].vm as usize;
                let live = self.insts[p.vm_inst[vm]].finish.is_none();
                (v, task.pinned.unwrap_or(task.cpu) as usize % n, live)
            })
            .collect();
        for &(v, c, live) in &placed {
            if live {
                w_now[c] += self.tasks[self.vcpus[v].task as usize].weight;
                w_base[c] += self.vcpus[v].alloc.base_weight;
            }
        }
        for (v, c, live) in placed {
            let weight = self.tasks[self.vcpus[v].task as usize].weight;
            let a = &mut self.vcpus[v].alloc;
            (a.given_ns, a.fair_ns) = if live {
                (period * weight as f64 / w_now[c].max(1) as f64, period * a.base_weight as f64 / w_base[c].max(1) as f64)
            } else {
                (0.0, 0.0)
            };
        }
    }

    /// Host vCPU-switch time of VM `vm`'s vCPUs so far (ns).
    fn vm_switch_ns(&self, vm: usize) -> u64 {
        let cause = crate::account::Cause::VcpuSwitch;
        self.vms[vm].vcpus.iter().map(|&v| self.ledger.get(self.vcpus[v as usize].owner, crate::account::Layer::Host, cause)).sum()
    }

    /// Allocation totals of vCPU `v` at the end of a run (`end`), the current period
    /// pro-rated up to the end or to its VM's finish.
    pub(crate) fn alloc_totals(&self, v: u32, end: SimTime) -> AllocTotals {
        let a = &self.vcpus[v as usize].alloc;
        let Some(p) = &self.periods else { return a.totals };
        let vm = self.vcpus[v as usize].vm as usize;
        if p.vm_closed[vm] {
            return a.totals;
        }
        let stop = self.insts[p.vm_inst[vm]].finish.unwrap_or(end).min(end);
        let frac = (stop.since(p.start) as f64 / p.period as f64).min(1.0);
        let used = (self.run_time_now(self.vcpus[v as usize].task) - a.start_sum) as f64;
        let mut t = a.totals;
        t += AllocTotals::period(a.given_ns * frac, used);
        t
    }

    /// Whether the asymmetric policy runs, and its decisions.
    pub(crate) fn asymmetric_counts(&self) -> Option<AsymmetricCounts> {
        self.periods.as_ref().filter(|p| p.asym.is_some()).map(|p| p.counts)
    }
}
