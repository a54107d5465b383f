//! HVS, the heuristic vCPU selection of APPLES (DIS ch.3): whom to run after a
//! PLE exit.
//!
//! Every ready (preempted) vCPU of the VM is on one of three lists, with the time it was
//! preempted:
//!
//! - **resource waiters**: preempted while runnable (slice end, wake-up preemption);
//! - **lock waiters**: switched out after their own PLE exit's directed yield;
//! - **yielded**: a vCPU HVS once picked (marked *yielded*) and later preempted at slice end;
//!   its mark is cleared and it waits here, used only when both other lists are empty
//!   (anti-starvation).
//!
//! The *causality heuristic* takes resource waiters before lock waiters (a lock waiter waits,
//! directly or through the ticket queue, for some preempted resource waiter). The
//! *preemption-time heuristic* takes the most recently preempted resource waiter (the holder
//! that made this vCPU spin was preempted recently) and the least recently preempted lock
//! waiter (with one threshold per VM, PLE order follows ticket order). The ablations the source
//! evaluated are the other [`Order`]s.
//!
//! Like KVM's scan (and the Linux 4.15 host of the TPDS setup), a vCPU preempted in user mode
//! is skipped unless an interrupt is pending for it: it holds no kernel lock. Candidates are
//! tried in order with `yield_to` until one is boosted, or three return -ESRCH.

use crate::engine::SimTime;

use super::{yield_to_first, Candidate, SchedOut, YieldPolicy, YieldTo};

/// Which heuristics order the candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Causality, then preemption time within each list (HVS).
    Full,
    /// Causality only: resource waiters, then lock waiters, each in ring order after the last
    /// boosted vCPU.
    CausalityOnly,
    /// Preemption time only: resource and lock waiters in one list, most recently preempted
    /// first.
    PreemptionTimeOnly,
    /// Reversed causality: lock waiters (oldest first) before resource waiters (newest first).
    ReversedCausality,
}

/// The list a ready vCPU is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum List {
    Resource,
    Lock,
    Yielded,
}

/// HVS's state for one VM.
#[derive(Debug, Clone)]
pub struct Hvs {
    order: Order,
    /// Per vCPU: its list and preemption time while it waits; None while it runs or halts.
    waiting: Vec<Option<(List, SimTime)>>,
    /// Per vCPU: picked as a candidate since it was last preempted at slice end.
    marked: Vec<bool>,
    last_boosted: u32,
}

impl Hvs {
    /// State for a VM of `nvcpus` vCPUs.
    pub fn new(nvcpus: u32, order: Order) -> Hvs {
        Hvs { order, waiting: vec![None; nvcpus as usize], marked: vec![false; nvcpus as usize], last_boosted: 0 }
    }

    /// The candidates of a PLE exit of `me`, best first.
    fn ranked(&self, me: u32, cands: &[Candidate]) -> Vec<u32> {
        let n = cands.len() as u32;
        let mut c: Vec<(List, SimTime, u32)> = (0..n)
            .filter(|&i| i != me)
            .filter_map(|i| {
                let (list, at) = self.waiting[i as usize]?;
                let k = cands[i as usize];
                let eligible = k.ready && (!k.blocking || k.pending_irq) && (!k.preempted || k.pending_irq || k.preempted_in_kernel);
                eligible.then_some((list, at, i))
            })
            .collect();
        // Ring distance after the last boosted vCPU (KVM's scan order), the final tie-break.
        let ring = |i: u32| (i + n - self.last_boosted - 1) % n;
        match self.order {
            Order::Full | Order::ReversedCausality => {
                let rank = |l: List| match (self.order, l) {
                    (Order::ReversedCausality, List::Resource) => 1,
                    (Order::ReversedCausality, List::Lock) => 0,
                    (_, l) => l as u8,
                };
                c.sort_by(|a, b| {
                    rank(a.0)
                        .cmp(&rank(b.0))
                        .then_with(|| match a.0 {
                            // Newest resource waiter first; oldest lock / yielded waiter first.
                            List::Resource => b.1.cmp(&a.1),
                            _ => a.1.cmp(&b.1),
                        })
                        .then_with(|| ring(a.2).cmp(&ring(b.2)))
                });
            }
            Order::CausalityOnly => c.sort_by_key(|&(l, _, i)| (l, ring(i))),
            Order::PreemptionTimeOnly => {
                c.sort_by(|a, b| (a.0 == List::Yielded).cmp(&(b.0 == List::Yielded)).then(b.1.cmp(&a.1)).then(ring(a.2).cmp(&ring(b.2))))
            }
        }
        c.into_iter().map(|(_, _, i)| i).collect()
    }
}

impl YieldPolicy for Hvs {
    fn on_spin(&mut self, me: u32, cands: &[Candidate], try_yield: &mut dyn FnMut(u32) -> YieldTo) -> u32 {
        let ranked = self.ranked(me, cands);
        if let Some(i) = yield_to_first(ranked.iter().copied(), try_yield) {
            self.marked[i as usize] = true;
            self.last_boosted = i;
        }
        // The lists replace KVM's scan of every vCPU: the cost is their length.
        ranked.len() as u32
    }

    fn spin_done(&mut self, _me: u32) {}

    fn on_sched_out(&mut self, vcpu: u32, why: SchedOut, now: SimTime) {
        let v = vcpu as usize;
        self.waiting[v] = match why {
            SchedOut::Preempted if std::mem::take(&mut self.marked[v]) => Some((List::Yielded, now)),
            SchedOut::Preempted => Some((List::Resource, now)),
            SchedOut::Yielded => Some((List::Lock, now)),
            SchedOut::Halted => None,
        };
    }

    fn on_sched_in(&mut self, vcpu: u32, _now: SimTime) {
        self.waiting[vcpu as usize] = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_kernel() -> Candidate {
        Candidate { ready: true, preempted: true, preempted_in_kernel: true, ..Default::default() }
    }

    /// vCPUs 1, 2 resource waiters (preempted at t = 10, 20), 3, 4 lock waiters (t = 15, 25).
    fn setup(order: Order) -> (Hvs, Vec<Candidate>) {
        let mut h = Hvs::new(5, order);
        h.on_sched_out(1, SchedOut::Preempted, SimTime(10));
        h.on_sched_out(3, SchedOut::Yielded, SimTime(15));
        h.on_sched_out(2, SchedOut::Preempted, SimTime(20));
        h.on_sched_out(4, SchedOut::Yielded, SimTime(25));
        let mut c = vec![in_kernel(); 5];
        c[0] = Candidate::default();
        (h, c)
    }

    #[test]
    fn causality_then_preemption_time() {
        let (h, c) = setup(Order::Full);
        assert_eq!(h.ranked(0, &c), vec![2, 1, 3, 4], "newest resource waiter first, then the oldest lock waiter");
        let (h, c) = setup(Order::ReversedCausality);
        assert_eq!(h.ranked(0, &c), vec![3, 4, 2, 1]);
        let (h, c) = setup(Order::PreemptionTimeOnly);
        assert_eq!(h.ranked(0, &c), vec![4, 2, 3, 1], "most recently preempted first, whatever the list");
        let (h, c) = setup(Order::CausalityOnly);
        assert_eq!(h.ranked(0, &c), vec![1, 2, 3, 4], "ring order within each list");
    }

    #[test]
    fn running_halted_and_user_mode_vcpus_are_not_candidates() {
        let (mut h, mut c) = setup(Order::Full);
        h.on_sched_in(2, SimTime(30));
        h.on_sched_out(4, SchedOut::Halted, SimTime(31));
        c[1].preempted_in_kernel = false;
        assert_eq!(h.ranked(0, &c), vec![3], "2 runs, 4 halted, 1 was preempted in user mode");
        c[1].pending_irq = true;
        assert_eq!(h.ranked(0, &c), vec![1, 3], "unless an interrupt is pending for it");
        assert_eq!(h.ranked(3, &c), vec![1], "never itself");
    }

    #[test]
    fn a_picked_vcpu_preempted_at_slice_end_waits_on_the_yielded_list() {
        let (mut h, c) = setup(Order::Full);
        let mut tried = Vec::new();
        h.on_spin(0, &c, &mut |i| {
            tried.push(i);
            if i == 1 {
                YieldTo::Yielded
            } else {
                YieldTo::Failed
            }
        });
        assert_eq!(tried, vec![2, 1], "failed attempts move on to the next candidate");
        h.on_sched_in(1, SimTime(40));
        h.on_sched_out(1, SchedOut::Preempted, SimTime(50));
        assert_eq!(h.ranked(0, &c), vec![2, 3, 4, 1], "the marked vCPU comes last");
        h.on_sched_in(1, SimTime(60));
        h.on_sched_out(1, SchedOut::Preempted, SimTime(70));
        assert_eq!(h.ranked(0, &c)[0], 1, "the mark was cleared: a resource waiter again, the newest");
    }

    #[test]
    fn three_esrch_stop_the_attempts() {
        let (mut h, c) = setup(Order::Full);
        let mut tried = 0;
        h.on_spin(0, &c, &mut |_| {
            tried += 1;
            YieldTo::Esrch
        });
        assert_eq!(tried, 3);
    }
}
