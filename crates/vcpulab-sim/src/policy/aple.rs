//! APLE, the adaptive pause-loop-exiting threshold of APPLES (DIS ch.3): one
//! threshold per VM, tuned by trial.
//!
//! The VM's time is cut into *epochs* of a fixed number of PLE exits, so an epoch is short when
//! the VM spins often and long (and cheap to run) when it rarely does. An epoch's
//! *inefficiency* is
//!
//! ```text
//!   (threshold × PLE exits  +  Σ time from a PLE exit to the next guest entry on its core)
//!   ─────────────────────────────────────────────────────────────────────────────────────
//!                        CPU time the VM received in the epoch
//! ```
//!
//! (wasteful spinning plus wasteful vCPU switches; the simulator measures both for every VM,
//! see [`SpinCost`]). APLE runs three epochs: at the desired threshold `T_d`, at
//! `min(T_u, T_d + δ)` and at `max(T_l, T_d − δ)`, then makes the threshold of the least
//! inefficient one the new `T_d` (a tie keeps the earlier probe, so `T_d` itself wins ties), and
//! repeats while the VM runs.

use crate::engine::SimTime;
use crate::spec::vm::ApleSpec;

use super::{PleWindowPolicy, SpinCost, WindowEpoch};

/// APLE's state for one VM.
#[derive(Debug, Clone)]
pub struct Aple {
    spec: ApleSpec,
    /// The desired threshold `T_d` (cycles).
    desired: u64,
    /// Which of the three probe epochs runs (0: `T_d`, 1: `T_d + δ`, 2: `T_d − δ`).
    probe: usize,
    /// The inefficiency measured by each probe of the current round.
    measured: [f64; 3],
    /// The threshold in force (cycles).
    current: u64,
    /// The VM's cost counters when the epoch started.
    start: SpinCost,
    start_ns: u64,
    epochs: Vec<WindowEpoch>,
}

impl Aple {
    /// Starts at `spec.initial` (validated: within `[spec.min, spec.max]`).
    pub fn new(spec: &ApleSpec) -> Aple {
        Aple {
            spec: spec.clone(),
            desired: spec.initial,
            probe: 0,
            measured: [0.0; 3],
            current: spec.initial,
            start: SpinCost::default(),
            start_ns: 0,
            epochs: Vec::new(),
        }
    }

    /// The threshold probe `i` of the round around `desired` uses.
    fn probe_threshold(&self, i: usize) -> u64 {
        match i {
            0 => self.desired,
            1 => self.desired.saturating_add(self.spec.delta).min(self.spec.max),
            _ => self.desired.saturating_sub(self.spec.delta).max(self.spec.min),
        }
    }

    /// The desired threshold `T_d` (cycles).
    pub fn desired(&self) -> u64 {
        self.desired
    }
}

impl PleWindowPolicy for Aple {
    fn window(&self, _vcpu: u32) -> u64 {
        self.current
    }

    fn on_ple_exit(&mut self, _vcpu: u32, now: SimTime, cost: &SpinCost) -> bool {
        if cost.ple_exits - self.start.ple_exits < self.spec.epoch_exits {
            return false;
        }
        let inefficiency = cost.inefficiency_since(&self.start);
        self.epochs.push(WindowEpoch { start_ns: self.start_ns, end_ns: now.0, threshold: self.current, inefficiency });
        self.measured[self.probe] = inefficiency;
        self.probe += 1;
        if self.probe == 3 {
            let best = (0..3).fold(0, |b, i| if self.measured[i] < self.measured[b] { i } else { b });
            self.desired = self.probe_threshold(best);
            self.probe = 0;
        }
        self.start = *cost;
        self.start_ns = now.0;
        let old = self.current;
        self.current = self.probe_threshold(self.probe);
        self.current != old
    }

    fn on_sched_in(&mut self, _vcpu: u32, _now: SimTime) -> bool {
        false
    }

    fn wants_cost(&self) -> bool {
        true
    }

    fn epochs(&self) -> &[WindowEpoch] {
        &self.epochs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(epoch_exits: u64) -> ApleSpec {
        ApleSpec { epoch_exits, ..ApleSpec::default() }
    }

    /// Feeds `p` one epoch of `n` exits whose inefficiency is `ineff` (with 1 ms of CPU time).
    fn epoch(p: &mut Aple, cost: &mut SpinCost, n: u64, ineff: f64) {
        for i in 0..n {
            cost.ple_exits += 1;
            if i == n - 1 {
                cost.cpu_ns += 1_000_000;
                cost.switch_ns += (ineff * 1e6) as u64;
            }
            p.on_ple_exit(0, SimTime(cost.cpu_ns), cost);
        }
    }

    #[test]
    fn three_probe_epochs_then_the_least_inefficient_threshold() {
        let mut p = Aple::new(&spec(10));
        let mut c = SpinCost::default();
        assert_eq!(p.window(3), 8192, "one threshold for every vCPU, starting at T_0");
        epoch(&mut p, &mut c, 10, 0.10);
        assert_eq!(p.window(0), 8192 + 1024, "second probe: T_d + delta");
        epoch(&mut p, &mut c, 10, 0.05);
        assert_eq!(p.window(0), 8192 - 1024, "third probe: T_d - delta");
        epoch(&mut p, &mut c, 10, 0.08);
        assert_eq!(p.desired(), 9216, "T_d + delta was the least inefficient");
        assert_eq!(p.window(0), 9216, "the next round starts at the new T_d");
        let e = p.epochs();
        assert_eq!(e.len(), 3);
        assert_eq!(e.iter().map(|e| e.threshold).collect::<Vec<_>>(), vec![8192, 9216, 7168]);
        assert!((e[1].inefficiency - 0.05).abs() < 1e-9);
    }

    #[test]
    fn probes_stay_within_the_bounds_and_ties_keep_the_threshold() {
        let s = ApleSpec { epoch_exits: 1, initial: 4096, min: 4096, max: 32768, delta: 1024 };
        let mut p = Aple::new(&s);
        let mut c = SpinCost::default();
        epoch(&mut p, &mut c, 1, 0.1);
        epoch(&mut p, &mut c, 1, 0.2);
        assert_eq!(p.window(0), 4096, "T_d - delta is clamped to T_l");
        epoch(&mut p, &mut c, 1, 0.1);
        assert_eq!(p.desired(), 4096, "a tie keeps T_d");
        // Always cheaper upwards: T_d climbs by delta per round up to T_u.
        for _ in 0..40 {
            epoch(&mut p, &mut c, 1, 0.2);
            epoch(&mut p, &mut c, 1, 0.1);
            epoch(&mut p, &mut c, 1, 0.3);
        }
        assert_eq!(p.desired(), 32768, "capped at T_u");
    }

    #[test]
    fn no_cpu_time_means_no_inefficiency() {
        let a = SpinCost { ple_exits: 5, wasted_spin_ns: 100, switch_ns: 100, cpu_ns: 10 };
        assert_eq!(a.inefficiency_since(&a), 0.0);
        let b = SpinCost { ple_exits: 6, wasted_spin_ns: 150, switch_ns: 200, cpu_ns: 1010 };
        assert!((b.inefficiency_since(&a) - 0.15).abs() < 1e-12);
    }
}
