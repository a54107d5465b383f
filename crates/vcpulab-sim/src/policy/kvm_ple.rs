//! KVM's PLE window (linux: arch/x86/kvm/x86.h `__grow_ple_window` / `__shrink_ple_window`,
//! vmx.c `grow_ple_window` on every PLE exit and `shrink_ple_window` when a vCPU that was
//! scheduled out is loaded again; Linux arch/x86/kvm/vmx/vmx.c), and a fixed window.

use crate::engine::SimTime;

use super::{PleWindowPolicy, SpinCost};

/// `__grow_ple_window`: modifier < 1 resets to base, < base multiplies, else adds; capped.
pub fn grow(w: u64, base: u64, modifier: u64, max: u64) -> u64 {
    let v = if modifier < 1 {
        base
    } else if modifier < base {
        w.saturating_mul(modifier)
    } else {
        w.saturating_add(modifier)
    };
    v.min(max)
}

/// `__shrink_ple_window`: modifier < 1 resets to base, < base divides, else subtracts; floor at base.
pub fn shrink(w: u64, base: u64, modifier: u64, min: u64) -> u64 {
    let v = if modifier < 1 {
        base
    } else if modifier < base {
        w / modifier
    } else {
        w.saturating_sub(modifier)
    };
    v.max(min)
}

/// KVM's adaptive per-vCPU window.
#[derive(Debug, Clone)]
pub struct KvmWindow {
    windows: Vec<u64>,
    base: u64,
    grow: u64,
    shrink: u64,
    max: u64,
}

impl KvmWindow {
    /// Windows start at `base` (`ple_window`).
    pub fn new(nvcpus: u32, base: u64, grow: u64, shrink: u64, max: u64) -> Self {
        KvmWindow { windows: vec![base; nvcpus as usize], base, grow, shrink, max }
    }
}

impl PleWindowPolicy for KvmWindow {
    fn window(&self, vcpu: u32) -> u64 {
        self.windows[vcpu as usize]
    }

    fn on_ple_exit(&mut self, vcpu: u32, _now: SimTime, _cost: &SpinCost) -> bool {
        let w = &mut self.windows[vcpu as usize];
        let old = *w;
        *w = grow(old, self.base, self.grow, self.max);
        *w != old
    }

    fn on_sched_in(&mut self, vcpu: u32, _now: SimTime) -> bool {
        let w = &mut self.windows[vcpu as usize];
        let old = *w;
        *w = shrink(old, self.base, self.shrink, self.base);
        *w != old
    }
}

/// A constant window.
#[derive(Debug, Clone)]
pub struct FixedWindow {
    window: u64,
}

impl FixedWindow {
    /// Always `window` cycles.
    pub fn new(window: u64) -> Self {
        FixedWindow { window }
    }
}

impl PleWindowPolicy for FixedWindow {
    fn window(&self, _vcpu: u32) -> u64 {
        self.window
    }
    fn on_ple_exit(&mut self, _vcpu: u32, _now: SimTime, _cost: &SpinCost) -> bool {
        false
    }
    fn on_sched_in(&mut self, _vcpu: u32, _now: SimTime) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_doubles_on_exits_and_resets_on_sched_in() {
        let mut p = KvmWindow::new(2, 4096, 2, 0, u64::from(u32::MAX));
        assert!(p.on_ple_exit(0, SimTime::ZERO, &SpinCost::default()));
        assert_eq!(p.window(0), 8192);
        p.on_ple_exit(0, SimTime::ZERO, &SpinCost::default());
        assert_eq!(p.window(0), 16384);
        assert_eq!(p.window(1), 4096, "windows are per vCPU");
        assert!(p.on_sched_in(0, SimTime::ZERO));
        assert_eq!(p.window(0), 4096);
        assert!(!p.on_sched_in(0, SimTime::ZERO), "no change at the base");
    }

    #[test]
    fn kvm_arithmetic_edge_cases() {
        assert_eq!(grow(4096, 4096, 5000, 1 << 20), 9096, "modifier >= base adds");
        assert_eq!(grow(1 << 31, 4096, 2, u64::from(u32::MAX)), u64::from(u32::MAX), "capped at max");
        assert_eq!(grow(8192, 4096, 0, 1 << 20), 4096, "modifier 0 resets");
        assert_eq!(shrink(16384, 4096, 2, 4096), 8192);
        assert_eq!(shrink(5000, 4096, 2, 4096), 4096, "floor at base");
        assert_eq!(shrink(20000, 4096, 5000, 4096), 15000);
    }
}
