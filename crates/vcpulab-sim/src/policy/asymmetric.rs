//! Dynamic asymmetric vCPUs (DIS ch.5): what the host decides at the end of an
//! allocation period, from what every vCPU did in it.
//!
//! The decision is a pure function of a [`VcpuPeriod`] per vCPU ([`decide`]); the world
//! gathers the inputs and applies the [`Decisions`] (weights, wake-up granularities, core
//! swaps) in `virt/allocation.rs`. The three components:
//!
//! 1. **CPU-time allocation.** A vCPU that did not use all of the time it was given needs
//!    what it used (its demand falls at most `max_drop` per period); one that used it all
//!    and is still ready needs more: the larger of its allocation and its symmetric share,
//!    plus `growth`. The VM's time (its symmetric share, less the switch overhead charged by
//!    component 2) is split among its vCPUs in proportion to these predictions, which become
//!    the next allocations; each is applied as the vCPU's weight scaled by its allocation
//!    over its symmetric share (per-vCPU cgroup shares in the DIS prototype).
//! 2. **Scheduling latency.** A vCPU that did not get its time but could still run is
//!    urgent: its wake-up granularity is divided by `latency_step` (down to `latency_min`);
//!    one that used its time and is idle is raised (up to `latency_max`). When an urgent
//!    vCPU is already at the minimum, it is waiting for slower vCPUs: those that sent it
//!    wake-up IPIs in the period are lowered instead.
//! 3. **Resource-conflict resolver.** (a) Per core, the allocations of its vCPUs are summed;
//!    if the largest sum exceeds the smallest by more than `imbalance`, the pair of vCPUs
//!    of those two cores whose exchange best evens them is swapped. (b) vCPUs below the
//!    default granularity are high-urgency; a core's conflicts are its high-urgency vCPUs'
//!    preemptions and wake-ups that waited longer than their granularity; if the busiest
//!    core has more than `urgency_ratio` × the conflicts of the calmest, half of its
//!    high-urgency vCPUs swap places with low-urgency vCPUs of the calmest core.
//!
//!    A swap never puts two vCPUs of one VM on a core (vCPU stacking, which TPDS's layouts
//!    also avoid): per-core sums are blind to it, and without this rule the resolver piles
//!    a VM's vCPUs onto a few cores, serialising its threads (the project's reading; DIS
//!    does not say how it picks the pair).

use crate::spec::kernel::AsymmetricSpec;

/// What one vCPU did in the period that ended, and its current settings.
#[derive(Clone, Debug, Default)]
pub struct VcpuPeriod {
    /// Its VM.
    pub vm: u32,
    /// The core it is placed on.
    pub core: u32,
    /// Its symmetric share of the period (ns): the period × its base weight / the base
    /// weights placed on its core.
    pub fair_ns: f64,
    /// What it was given in the period (ns): as `fair_ns`, with the weights in force.
    pub given_ns: f64,
    /// What it used (ns of host run time).
    pub used_ns: f64,
    /// Runnable (running or queued) at the period's end.
    pub ready: bool,
    /// Its current allocation (ns per period; `fair_ns` until the allocation component
    /// changes it).
    pub alloc_ns: f64,
    /// Its current wake-up granularity (ns).
    pub gran_ns: u64,
    /// Its base weight (the spec's).
    pub base_weight: u64,
    /// Times it was preempted while runnable in the period.
    pub preemptions: u32,
    /// Wake-ups in the period that waited longer than its granularity to run.
    pub late_wakeups: u32,
    /// Wake-up IPIs received in the period, by sender (index into the same slice).
    pub woken_by: Vec<(usize, u32)>,
}

/// The VM-wide inputs.
#[derive(Clone, Debug, Default)]
pub struct VmPeriod {
    /// Host vCPU-switch time of the VM's vCPUs in the period (ns).
    pub switch_ns: f64,
    /// The VM's instance still runs (finished VMs are left alone).
    pub live: bool,
}

/// What the host changes for the next period.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decisions {
    /// New allocation per vCPU (ns per period).
    pub alloc_ns: Vec<f64>,
    /// New weight per vCPU.
    pub weights: Vec<u64>,
    /// New wake-up granularity per vCPU (ns).
    pub gran_ns: Vec<u64>,
    /// Pairs of vCPUs (indices) exchanging cores.
    pub swaps: Vec<(usize, usize)>,
    /// What happened, for the record.
    pub counts: AsymmetricCounts,
}

/// Counters of the policy's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AsymmetricCounts {
    /// Periods decided.
    pub periods: u64,
    /// vCPUs predicted to need more than they were given (used it all and still ready).
    pub grown: u64,
    /// Latencies lowered (urgent vCPUs).
    pub latency_lowered: u64,
    /// Latencies raised (vCPUs that used their time and went idle).
    pub latency_raised: u64,
    /// Latencies of wake-up IPI senders lowered on behalf of an urgent vCPU at the minimum.
    pub source_lowered: u64,
    /// Swaps for per-core allocation imbalance.
    pub balance_swaps: u64,
    /// Swaps for urgency conflicts.
    pub urgency_swaps: u64,
}

impl std::ops::AddAssign for AsymmetricCounts {
    fn add_assign(&mut self, o: Self) {
        self.periods += o.periods;
        self.grown += o.grown;
        self.latency_lowered += o.latency_lowered;
        self.latency_raised += o.latency_raised;
        self.source_lowered += o.source_lowered;
        self.balance_swaps += o.balance_swaps;
        self.urgency_swaps += o.urgency_swaps;
    }
}

/// Weights the host scheduler accepts (cgroup v1 `cpu.shares` bounds).
const WEIGHT_RANGE: (u64, u64) = (2, 262_144);

/// Decides the next period for `vcpus` (all VMs' vCPUs) and `vms`, on `cores` cores, with
/// the host's default wake-up granularity `default_gran`.
pub fn decide(spec: &AsymmetricSpec, default_gran: u64, cores: u32, vcpus: &[VcpuPeriod], vms: &[VmPeriod]) -> Decisions {
    let mut d = Decisions {
        alloc_ns: vcpus.iter().map(|v| v.alloc_ns).collect(),
        weights: Vec::with_capacity(vcpus.len()),
        gran_ns: vcpus.iter().map(|v| v.gran_ns).collect(),
        swaps: Vec::new(),
        counts: AsymmetricCounts { periods: 1, ..Default::default() },
    };
    let used_all = |v: &VcpuPeriod| v.used_ns >= spec.full * v.given_ns;
    let urgent = |v: &VcpuPeriod| !used_all(v) && v.ready;
    let live = |v: &VcpuPeriod| vms.get(v.vm as usize).is_some_and(|m| m.live);
    if spec.allocation {
        allocate(spec, vcpus, vms, default_gran, &used_all, &mut d);
    }
    if spec.latency {
        let (lo, hi) = (spec.latency_min.0, spec.latency_max.map_or(default_gran, |x| x.0).max(spec.latency_min.0));
        let down = |g: u64| ((g as f64 / spec.latency_step) as u64).max(lo);
        let up = |g: u64| ((g as f64 * spec.latency_step) as u64).min(hi);
        for (i, v) in vcpus.iter().enumerate().filter(|(_, v)| live(v)) {
            if urgent(v) {
                if v.gran_ns <= lo {
                    for &(s, n) in &v.woken_by {
                        if n > 0 && d.gran_ns[s] > lo {
                            d.gran_ns[s] = down(d.gran_ns[s]);
                            d.counts.source_lowered += 1;
                        }
                    }
                } else {
                    d.gran_ns[i] = down(d.gran_ns[i]);
                    d.counts.latency_lowered += 1;
                }
            } else if used_all(v) && !v.ready && d.gran_ns[i] < hi {
                d.gran_ns[i] = up(d.gran_ns[i]);
                d.counts.latency_raised += 1;
            }
        }
    }
    for (i, v) in vcpus.iter().enumerate() {
        let w = if spec.allocation && v.fair_ns > 0.0 { v.base_weight as f64 * d.alloc_ns[i] / v.fair_ns } else { v.base_weight as f64 };
        d.weights.push((w.round() as u64).clamp(WEIGHT_RANGE.0, WEIGHT_RANGE.1));
    }
    if spec.resolver && cores > 1 {
        balance_swap(spec, cores, vcpus, &mut d);
        urgency_swaps(spec, default_gran, cores, vcpus, &mut d);
    }
    d
}

/// Component 1: the next allocation of every vCPU of a live VM.
fn allocate(
    spec: &AsymmetricSpec,
    vcpus: &[VcpuPeriod],
    vms: &[VmPeriod],
    default_gran: u64,
    used_all: &dyn Fn(&VcpuPeriod) -> bool,
    d: &mut Decisions,
) {
    for (vm, m) in vms.iter().enumerate().filter(|(_, m)| m.live) {
        let members: Vec<usize> = (0..vcpus.len()).filter(|&i| vcpus[i].vm as usize == vm).collect();
        let share: f64 = members.iter().map(|&i| vcpus[i].fair_ns).sum();
        // The switch overhead of low latency is the VM's own time (component 2).
        let urgent_vm = spec.latency && members.iter().any(|&i| vcpus[i].gran_ns < default_gran);
        let budget = (share - if urgent_vm { m.switch_ns } else { 0.0 }).max(share * spec.min_share);
        let mut pred: Vec<f64> = Vec::with_capacity(members.len());
        for &i in &members {
            let v = &vcpus[i];
            let p = if used_all(v) && v.ready {
                d.counts.grown += 1;
                // It needed more: at least its symmetric share, + `growth`.
                v.alloc_ns.max(v.fair_ns) * (1.0 + spec.growth)
            } else {
                // Demand = what it used, falling at most `max_drop` per period.
                v.used_ns.max(v.alloc_ns * (1.0 - spec.max_drop))
            };
            pred.push(p.max(spec.min_share * v.fair_ns));
        }
        let total: f64 = pred.iter().sum();
        if total > 0.0 {
            for (&i, p) in members.iter().zip(pred) {
                d.alloc_ns[i] = budget * p / total;
            }
        }
    }
}

/// The vCPUs placed on each core.
fn by_core(cores: u32, vcpus: &[VcpuPeriod]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); cores as usize];
    for (i, v) in vcpus.iter().enumerate() {
        if let Some(c) = out.get_mut(v.core as usize) {
            c.push(i);
        }
    }
    out
}

/// Component 3a: one swap between the most and least allocated cores, when they differ by
/// more than `imbalance` and a swap narrows the gap.
fn balance_swap(spec: &AsymmetricSpec, cores: u32, vcpus: &[VcpuPeriod], d: &mut Decisions) {
    let on = by_core(cores, vcpus);
    let load: Vec<f64> = on.iter().map(|c| c.iter().map(|&i| d.alloc_ns[i]).sum()).collect();
    let (hi, lo) = extremes(&load);
    if load[hi] <= load[lo] * (1.0 + spec.imbalance) {
        return;
    }
    let gap = load[hi] - load[lo];
    let mut best: Option<(f64, usize, usize)> = None;
    for &x in &on[hi] {
        for &y in on[lo].iter().filter(|&&y| !stacks(vcpus, &on, x, y)) {
            let moved = d.alloc_ns[x] - d.alloc_ns[y];
            let new_gap = (gap - 2.0 * moved).abs();
            if moved > 0.0 && new_gap < gap && best.is_none_or(|(g, _, _)| new_gap < g) {
                best = Some((new_gap, x, y));
            }
        }
    }
    if let Some((_, x, y)) = best {
        d.swaps.push((x, y));
        d.counts.balance_swaps += 1;
    }
}

/// Component 3b: swaps of high-urgency vCPUs off the core where they conflict most.
fn urgency_swaps(spec: &AsymmetricSpec, default_gran: u64, cores: u32, vcpus: &[VcpuPeriod], d: &mut Decisions) {
    let high = |i: usize| d.gran_ns[i] < default_gran;
    let swapped = |i: usize, d: &Decisions| d.swaps.iter().any(|&(a, b)| a == i || b == i);
    let on = by_core(cores, vcpus);
    let conflicts: Vec<f64> =
        on.iter().map(|c| c.iter().filter(|&&i| high(i)).map(|&i| f64::from(vcpus[i].preemptions + vcpus[i].late_wakeups)).sum()).collect();
    let (busy, calm) = extremes(&conflicts);
    if conflicts[busy] < f64::from(spec.min_conflicts) || conflicts[busy] <= spec.urgency_ratio * conflicts[calm] {
        return;
    }
    let mut hs: Vec<usize> = on[busy].iter().copied().filter(|&i| high(i) && !swapped(i, d)).collect();
    hs.sort_by_key(|&i| std::cmp::Reverse(vcpus[i].preemptions + vcpus[i].late_wakeups));
    let mut ls: Vec<usize> = on[calm].iter().copied().filter(|&i| !high(i) && !swapped(i, d)).collect();
    let n = hs.len().div_ceil(2);
    for &x in &hs {
        if d.counts.urgency_swaps as usize >= n {
            break;
        }
        if let Some(k) = ls.iter().position(|&y| !stacks(vcpus, &on, x, y)) {
            d.swaps.push((x, ls.remove(k)));
            d.counts.urgency_swaps += 1;
        }
    }
}

/// Whether exchanging the cores of `x` and `y` would put two vCPUs of one VM on a core.
fn stacks(vcpus: &[VcpuPeriod], on: &[Vec<usize>], x: usize, y: usize) -> bool {
    let (cx, cy) = (vcpus[x].core as usize, vcpus[y].core as usize);
    let clash = |mover: usize, core: usize, leaving: usize| on[core].iter().any(|&o| o != leaving && vcpus[o].vm == vcpus[mover].vm);
    clash(x, cy, y) || clash(y, cx, x)
}

/// Indices of the largest and smallest values (first on ties).
fn extremes(v: &[f64]) -> (usize, usize) {
    let mut hi = 0;
    let mut lo = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[hi] {
            hi = i;
        }
        if x < v[lo] {
            lo = i;
        }
    }
    (hi, lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(allocation: bool, latency: bool, resolver: bool) -> AsymmetricSpec {
        AsymmetricSpec { allocation, latency, resolver, ..Default::default() }
    }

    fn vcpu(vm: u32, core: u32, given: f64, used: f64, ready: bool) -> VcpuPeriod {
        VcpuPeriod {
            vm,
            core,
            fair_ns: given,
            given_ns: given,
            used_ns: used,
            ready,
            alloc_ns: given,
            gran_ns: 4_000_000,
            base_weight: 1024,
            ..Default::default()
        }
    }

    const LIVE: VmPeriod = VmPeriod { switch_ns: 0.0, live: true };

    #[test]
    fn allocation_follows_the_dis_example() {
        // DIS ch.5: 2 vCPUs given 40 ms each; vCPU0 used 35, vCPU1 used all 40 and is
        // ready → predictions 35 and 44; the VM's 80 ms split as 35.4 and 44.6 ms.
        // With the literal rule (no damping of the fall: max_drop = 1).
        let v = [vcpu(0, 0, 40e6, 35e6, true), vcpu(0, 1, 40e6, 40e6, true)];
        let literal = AsymmetricSpec { max_drop: 1.0, ..spec(true, false, false) };
        let d = decide(&literal, 4_000_000, 2, &v, &[LIVE]);
        assert!((d.alloc_ns[0] / 1e6 - 35.4).abs() < 0.05, "{:?}", d.alloc_ns);
        assert!((d.alloc_ns[1] / 1e6 - 44.6).abs() < 0.05, "{:?}", d.alloc_ns);
        let w = |a: f64| (1024.0 * a / 40e6).round() as u64;
        assert_eq!(d.weights, vec![w(d.alloc_ns[0]), w(d.alloc_ns[1])]);
        assert_eq!(d.counts.grown, 1);
        assert!(d.swaps.is_empty());
        // The default damps the fall to 10 % per period: 36 and 44 of 80.
        let d = decide(&spec(true, false, false), 4_000_000, 2, &v, &[LIVE]);
        assert!((d.alloc_ns[0] - 80e6 * 36.0 / 80.0).abs() < 1.0, "{:?}", d.alloc_ns);
        // A starved vCPU that used all and is ready comes back to its symmetric share + 10 %.
        let mut starved = [vcpu(0, 0, 40e6, 10e6, true), vcpu(0, 1, 40e6, 40e6, false)];
        starved[0].alloc_ns = 10e6;
        starved[0].given_ns = 10e6;
        starved[1].alloc_ns = 70e6;
        let d = decide(&spec(true, false, false), 4_000_000, 2, &starved, &[LIVE]);
        assert!((d.alloc_ns[0] - 80e6 * 44.0 / (44.0 + 63.0)).abs() < 1.0, "{:?}", d.alloc_ns);
    }

    #[test]
    fn components_off_change_nothing() {
        let v = [vcpu(0, 0, 40e6, 10e6, true), vcpu(0, 1, 40e6, 40e6, false)];
        let d = decide(&spec(false, false, false), 4_000_000, 2, &v, &[LIVE]);
        assert_eq!(d.weights, vec![1024, 1024]);
        assert_eq!(d.gran_ns, vec![4_000_000, 4_000_000]);
        assert!(d.swaps.is_empty());
    }

    #[test]
    fn latency_lowers_urgent_raises_idle_and_chases_ipi_sources() {
        let mut v = vec![vcpu(0, 0, 40e6, 10e6, true), vcpu(0, 1, 40e6, 40e6, false), vcpu(0, 2, 40e6, 40e6, true)];
        let s = AsymmetricSpec { latency_max: Some(crate::spec::Dur(8_000_000)), ..spec(false, true, false) };
        let d = decide(&s, 4_000_000, 3, &v, &[LIVE]);
        assert_eq!(d.gran_ns, vec![2_000_000, 8_000_000, 4_000_000]);
        // At the minimum, the urgent vCPU's wake-up IPI senders are lowered instead.
        v[0].gran_ns = 500_000;
        v[0].woken_by = vec![(2, 3)];
        let d = decide(&s, 4_000_000, 3, &v, &[LIVE]);
        assert_eq!(d.gran_ns, vec![500_000, 8_000_000, 2_000_000]);
        assert_eq!((d.counts.latency_lowered, d.counts.source_lowered), (0, 1));
    }

    #[test]
    fn resolver_swaps_to_even_per_core_allocation() {
        // Two identical VMs whose vCPU 0 is heavy: both heavy vCPUs sit on core 0.
        let mut v =
            vec![vcpu(0, 0, 10e6, 10e6, true), vcpu(1, 0, 10e6, 10e6, true), vcpu(0, 1, 10e6, 2e6, false), vcpu(1, 1, 10e6, 2e6, false)];
        v[0].alloc_ns = 18e6;
        v[1].alloc_ns = 18e6;
        v[2].alloc_ns = 2e6;
        v[3].alloc_ns = 2e6;
        let d = decide(&spec(false, false, true), 4_000_000, 2, &v, &[LIVE, LIVE]);
        // Exchanging VM 0's heavy and light vCPUs evens the cores (18 + 2 each); exchanging
        // VM 0's heavy one with VM 1's light one would stack VM 0 on core 1.
        assert_eq!(d.swaps, vec![(0, 2)]);
        // Within 10 %: nothing.
        v[0].alloc_ns = 10.4e6;
        v[1].alloc_ns = 10e6;
        v[2].alloc_ns = 10e6;
        v[3].alloc_ns = 10e6;
        assert!(decide(&spec(false, false, true), 4_000_000, 2, &v, &[LIVE, LIVE]).swaps.is_empty());
    }

    #[test]
    fn resolver_moves_half_of_the_conflicting_urgent_vcpus() {
        // Four VMs with one vCPU on each of two cores; core 0's are all urgent and conflict.
        let mut v: Vec<VcpuPeriod> =
            (0..4).map(|i| vcpu(i, 0, 10e6, 10e6, true)).chain((0..4).map(|i| vcpu(i, 1, 10e6, 10e6, true))).collect();
        for x in &mut v[..4] {
            x.gran_ns = 1_000_000;
            x.preemptions = 3;
        }
        let d = decide(&spec(false, false, true), 4_000_000, 2, &v, &[LIVE, LIVE, LIVE, LIVE]);
        // Half of them (2) swap with the calm core's vCPU of their own VM (no stacking).
        assert_eq!(d.counts.urgency_swaps, 2);
        assert_eq!(d.swaps, vec![(0, 4), (1, 5)]);
    }
}
