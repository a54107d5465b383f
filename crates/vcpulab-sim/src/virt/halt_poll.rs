//! KVM halt polling (`kvm_vcpu_halt`, linux: virt/kvm/kvm_main.c).
//!
//! After an HLT exit the vCPU thread busy-waits in the host for up to its window
//! (`vcpu->halt_poll_ns`, clamped to the VM's maximum) hoping for a wake-up. Polling stops at
//! once when another task is runnable on the core (`single_task_running()` false) or the
//! core must reschedule; then, or when the window is over, the thread blocks. A halt whose
//! wake-up arrives before the block is a *successful* poll. After the halt the window is
//! adjusted with KVM's rule:
//!
//! ```text
//! halt_ns <= window                     → unchanged
//! window > 0 and halt_ns > max          → shrink (÷ shrink, or 0 when shrink = 0; < grow_start → 0)
//! window < max and halt_ns < max        → grow (× grow, at least grow_start)
//! ```
//! where `halt_ns` runs from the halt to the moment the vCPU runs again (poll time included).

use crate::account::{Attr, Cause, Layer};
use crate::engine::SimTime;
use crate::kernel::HOST;
use crate::world::{Leaf, Rem, Step, World};

use super::exit::ExitReason;
use super::vcpu::VcpuRun;

/// KVM's `grow_halt_poll_ns`.
pub fn grow_window(old: u64, grow: u32, grow_start: u64) -> u64 {
    if grow == 0 {
        return old;
    }
    let new = old.saturating_mul(u64::from(grow));
    if new < grow_start {
        grow_start
    } else {
        new
    }
}

/// KVM's `shrink_halt_poll_ns`.
pub fn shrink_window(old: u64, shrink: u32, grow_start: u64) -> u64 {
    let new = if shrink == 0 { 0 } else { old / u64::from(shrink) };
    if new < grow_start {
        0
    } else {
        new
    }
}

/// The window after a halt of `halt_ns` (the adjustment at the end of `kvm_vcpu_halt`).
/// Returns (new window, +1 grew / -1 shrank / 0).
pub fn adjust_window(window: u64, halt_ns: u64, max: u64, grow: u32, grow_start: u64, shrink: u32) -> (u64, i8) {
    if max == 0 {
        return (0, 0);
    }
    if halt_ns <= window {
        (window, 0)
    } else if window > 0 && halt_ns > max {
        (shrink_window(window, shrink, grow_start), -1)
    } else if window < max && halt_ns < max {
        (grow_window(window, grow, grow_start), 1)
    } else {
        (window, 0)
    }
}

impl World<'_> {
    /// The maximum poll window of vCPU `v` (0 = polling off for its VM).
    fn halt_poll_max(&self, v: u32) -> u64 {
        let hp = &self.vspec(v).halt_poll;
        if hp.enabled {
            hp.max.0
        } else {
            0
        }
    }

    /// The guest on `v` executes HLT with nothing pending: HLT exit, then `kvm_vcpu_halt`.
    pub(crate) fn vcpu_halt(&mut self, v: u32) {
        self.exit(v, ExitReason::Hlt);
        let max = self.halt_poll_max(v);
        let vc = &mut self.vcpus[v as usize];
        let allowed = !vc.poll_control_off;
        vc.halt_poll_ns = vc.halt_poll_ns.min(max);
        let poll = allowed && vc.halt_poll_ns > 0;
        if poll {
            vc.hp.attempted += 1;
            vc.hp.window_hist.record(vc.halt_poll_ns);
        }
        vc.poll_rem = if poll { vc.halt_poll_ns } else { 0 };
        vc.run = VcpuRun::Halting { start: self.now, poll };
    }

    /// One step of a vCPU that is current on `core` in the Halting state (the host has no
    /// work queued there): wake up, keep polling, or block.
    pub(crate) fn step_halting(&mut self, v: u32, core: u32) -> Step {
        let VcpuRun::Halting { start, poll } = self.vcpus[v as usize].run else { unreachable!("not halting") };
        let (k, cpu) = (self.vcpus[v as usize].kernel, self.vcpus[v as usize].idx);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.pending != 0 || std::mem::take(&mut kc.pv_unhalted) {
            // kvm_vcpu_check_block() saw the interrupt: no sleep.
            self.vcpus[v as usize].run = VcpuRun::Guest;
            self.halt_done(v, start, None, poll);
            return Step::Again;
        }
        let hc = &self.kernels[0].cpus[core as usize];
        let contended = hc.nr_queued > 0 || hc.need_resched;
        if poll && self.vcpus[v as usize].poll_rem > 0 && !contended {
            let attr = Attr { owner: self.vcpus[v as usize].owner, layer: Layer::Host, cause: Cause::HaltPoll };
            return Step::Leaf(Leaf { attr, rem: Rem::HaltPoll(v), thread: None });
        }
        self.halt_block(v, core, start, poll);
        Step::Again
    }

    /// A halting vCPU stops polling (window over, or the core has other work) and its
    /// thread blocks in the host (`kvm_vcpu_block` → `schedule()`).
    pub(crate) fn halt_block(&mut self, v: u32, core: u32, start: SimTime, poll: bool) {
        let vc = &mut self.vcpus[v as usize];
        vc.halts += 1;
        vc.run = VcpuRun::Blocked { start, block_start: self.now, poll };
        self.block_curr(HOST, core, false);
    }

    /// The halt that began at `start` ends now (the vCPU runs again): KVM's statistics and
    /// window adjustment. `block_start` is when it blocked, None if it never did.
    pub(crate) fn halt_done(&mut self, v: u32, start: SimTime, block_start: Option<SimTime>, poll: bool) {
        let max = self.halt_poll_max(v);
        let hp = self.vspec(v).halt_poll.clone();
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        let halt_ns = now.since(start);
        if poll {
            // update_halt_poll_stats: poll time = from the halt to the end of the poll loop.
            let poll_ns = block_start.map_or(halt_ns, |b| b.since(start));
            if block_start.is_none() {
                vc.hp.successful += 1;
                vc.hp.poll_success_ns += poll_ns;
                vc.hp.success_hist.record(poll_ns);
            } else {
                vc.hp.poll_fail_ns += poll_ns;
                vc.hp.fail_hist.record(poll_ns);
            }
        }
        if let Some(b) = block_start {
            let wait = now.since(b);
            vc.hp.wait_ns += wait;
            vc.hp.wait_hist.record(wait);
        }
        if !vc.poll_control_off {
            let (w, dir) = adjust_window(vc.halt_poll_ns, halt_ns, max, hp.grow, hp.grow_start.0, hp.shrink);
            vc.halt_poll_ns = w;
            match dir {
                1 => vc.hp.grows += 1,
                -1 => vc.hp.shrinks += 1,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 200_000;
    const START: u64 = 10_000;

    #[test]
    fn window_grows_from_grow_start_and_doubles() {
        assert_eq!(adjust_window(0, 5_000, MAX, 2, START, 0), (START, 1), "a short halt with no window starts polling");
        assert_eq!(adjust_window(START, 15_000, MAX, 2, START, 0), (20_000, 1));
        assert_eq!(adjust_window(20_000, 15_000, MAX, 2, START, 0), (20_000, 0), "halt inside the window: unchanged");
        assert_eq!(adjust_window(160_000, 190_000, MAX, 2, START, 0), (320_000, 1), "the cap applies at the next halt");
    }

    #[test]
    fn long_halts_shrink_to_zero_before_6_11_and_halve_after() {
        assert_eq!(adjust_window(80_000, 500_000, MAX, 2, START, 0), (0, -1), "shrink = 0 resets");
        assert_eq!(adjust_window(80_000, 500_000, MAX, 2, START, 2), (40_000, -1), "shrink = 2 halves");
        assert_eq!(adjust_window(15_000, 500_000, MAX, 2, START, 2), (0, -1), "below grow_start → 0");
        assert_eq!(adjust_window(0, 500_000, MAX, 2, START, 2), (0, 0), "no window, long halt: stays 0");
    }

    #[test]
    fn polling_off_forces_zero() {
        assert_eq!(adjust_window(40_000, 1_000, 0, 2, START, 0), (0, 0));
    }
}
