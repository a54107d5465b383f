//! CFS bandwidth control in the host: cgroup `cpu.max` (v1 `cpu.cfs_quota_us` /
//! `cpu.cfs_period_us`), as Linux v4.15 kernel/sched/fair.c implements it
//! (`CONFIG_CFS_BANDWIDTH`). libvirt writes it from `<cputune>`: `<quota>`/`<period>` on each
//! vCPU's `vcpuN` cgroup, `<global_quota>`/`<global_period>` on the VM's.
//!
//! - A [`Bandwidth`] (`struct cfs_bandwidth`) holds the group's global runtime, refilled to
//!   `quota` by a period timer (`sched_cfs_period_timer` → `do_sched_cfs_period_timer` →
//!   `__refill_cfs_bandwidth_runtime`); unused runtime is not carried over.
//! - Each run queue of the group (per core for the VM's group; the single vCPU thread for a
//!   `vcpuN` group) runs on a [`LocalRuntime`] (`cfs_rq->runtime_remaining`), topped up from the
//!   global runtime a slice at a time (`assign_cfs_rq_runtime`, `sched_cfs_bandwidth_slice` =
//!   5 ms) as its running task's time is accounted (`__account_cfs_rq_runtime` from
//!   `update_curr`). Local runtime expires with the period it was drawn in
//!   (`expire_cfs_rq_runtime`, v3.2–v5.3).
//! - Out of runtime, the running task is rescheduled (`resched_curr`) and its run queue
//!   throttled when the task is put back (`put_prev_entity` → `check_cfs_rq_runtime` →
//!   `throttle_cfs_rq`): the group entity leaves its parent's run queue (`DEQUEUE_SLEEP`) and
//!   the core's runnable count. A run queue woken with no runtime left is throttled at once
//!   (`check_enqueue_throttle`). Throttled run queues are listed most recent first
//!   (`list_add_rcu` at the head).
//! - The period timer hands the new runtime to the throttled run queues in list order, each
//!   getting its debt plus 1 ns (`distribute_cfs_runtime`); an unthrottled entity is placed as a
//!   waking one (`unthrottle_cfs_rq` enqueues with `ENQUEUE_WAKEUP`) and an idle core is
//!   rescheduled. The timer stops after a period with no runtime drawn and nothing throttled,
//!   and restarts on the grid `k × period` (`start_cfs_bandwidth`: `hrtimer_forward_now` from
//!   the timer's initial expiry, 0).
//! - A run queue that empties returns its runtime above 1 ms (`min_cfs_rq_runtime`) to the
//!   group (`__return_cfs_rq_runtime`); when the group then holds more than a slice and has
//!   throttled run queues, the slack timer (5 ms, re-armed by each return, not within 2 ms of
//!   a refill) distributes it (`do_sched_cfs_slack_timer`).
//!
//! Approximations: the timers' own interrupt handling costs nothing and they fire exactly on
//! time; throttling is noticed where the model accounts run time (the tick, events on the
//! core), as Linux notices it at `update_curr`; a `vcpuN` group's run queue is the vCPU thread's
//! own (it runs on one core at a time; the kernel keeps one per core).

use std::collections::VecDeque;

use serde::Serialize;

use crate::engine::SimTime;
use crate::world::{Ev, World};

use super::{KernelId, TaskId, TaskState, HOST};

/// `sysctl_sched_cfs_bandwidth_slice` (5000 µs): runtime drawn from the group at a time.
pub const SLICE_NS: i64 = 5_000_000;
/// `min_cfs_rq_runtime` (1 ms): what an emptied run queue keeps.
pub const MIN_RUNTIME_NS: i64 = 1_000_000;
/// `cfs_bandwidth_slack_period` (5 ms).
pub const SLACK_PERIOD_NS: u64 = 5_000_000;
/// `min_bandwidth_expiration` (2 ms): no slack distribution this close to a refill.
pub const MIN_EXPIRATION_NS: u64 = 2_000_000;
/// `min_cfs_quota_period` (1 ms): the smallest quota and period the kernel accepts.
pub const MIN_QUOTA_PERIOD_NS: u64 = 1_000_000;
/// `max_cfs_quota_period` (1 s): the largest period.
pub const MAX_PERIOD_NS: u64 = 1_000_000_000;

/// Whose `cpu.max` it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwOwner {
    /// A VM's task group (`<global_quota>`): a run queue per core.
    Group(u32),
    /// A vCPU thread's `vcpuN` group (`<quota>`).
    Task(TaskId),
}

/// `cpu.stat` of a group with bandwidth control.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct BandwidthStats {
    /// `nr_periods`: period-timer expiries while the timer was active.
    pub nr_periods: u64,
    /// `nr_throttled`: those periods that found a run queue throttled.
    pub nr_throttled: u64,
    /// `throttled_time` (ns): summed over the group's run queues, from throttle to unthrottle.
    pub throttled_ns: u64,
}

/// A group's bandwidth pool (`struct cfs_bandwidth`).
#[derive(Clone, Debug)]
pub struct Bandwidth {
    /// Whose it is.
    pub owner: BwOwner,
    /// Runtime per period (ns).
    pub quota: u64,
    /// The period (ns).
    pub period: u64,
    /// Global runtime left this period.
    pub runtime: u64,
    /// End of the current period (`runtime_expires`).
    pub expires: SimTime,
    /// The period timer runs (`period_active`).
    pub timer_active: bool,
    /// Its next expiry.
    pub next_period: SimTime,
    /// No runtime was drawn since the last refill (`idle`).
    pub idle: bool,
    /// Generation of the armed slack timer (a re-arm makes the older event stale).
    pub slack_gen: u32,
    /// Throttled run queues, most recent first: cores for a VM group, `0` for a vCPU's.
    pub throttled: VecDeque<u32>,
    /// Runtime was drawn while the period timer was stopped: it is to be started
    /// (`start_cfs_bandwidth`).
    pub start_pending: bool,
    /// `cpu.stat`.
    pub stats: BandwidthStats,
}

/// A run queue's local runtime (`cfs_rq->runtime_remaining` and its throttle state).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalRuntime {
    /// Runtime left (ns; negative after an overrun).
    pub rem: i64,
    /// When it expires (`runtime_expires`).
    pub expires: SimTime,
    /// Throttled.
    pub throttled: bool,
    /// Since when.
    pub throttled_at: SimTime,
}

impl Bandwidth {
    /// A pool of `quota` per `period`, full.
    pub fn new(owner: BwOwner, quota: u64, period: u64) -> Self {
        Bandwidth {
            owner,
            quota,
            period,
            runtime: quota,
            expires: SimTime::ZERO,
            timer_active: false,
            next_period: SimTime::NEVER,
            idle: false,
            slack_gen: 0,
            throttled: VecDeque::new(),
            start_pending: false,
            stats: BandwidthStats::default(),
        }
    }

    /// `assign_cfs_rq_runtime`: tops `local` up towards a slice from the global runtime.
    /// Whether it has runtime now.
    pub fn assign(&mut self, local: &mut LocalRuntime) -> bool {
        let want = SLICE_NS - local.rem;
        let amount = want.clamp(0, self.runtime as i64);
        self.runtime -= amount as u64;
        self.idle = false;
        self.start_pending |= !self.timer_active;
        local.rem += amount;
        if self.expires > local.expires {
            local.expires = self.expires;
        }
        local.rem > 0
    }

    /// `expire_cfs_rq_runtime`: local runtime drawn in an earlier period is void; if the period
    /// has not been refilled (the timer is late or stopped), the expiry moves on by a tick.
    fn expire(&self, local: &mut LocalRuntime, now: SimTime, tick: u64) {
        if now < local.expires {
            return;
        }
        if local.expires == self.expires {
            local.expires += tick;
        } else {
            local.rem = 0;
        }
    }

    /// `__account_cfs_rq_runtime`: `delta` ns ran on `local`. Whether it may keep running.
    pub fn account(&mut self, local: &mut LocalRuntime, delta: u64, now: SimTime, tick: u64) -> bool {
        local.rem -= delta as i64;
        self.expire(local, now, tick);
        local.rem > 0 || self.assign(local)
    }

    /// `__refill_cfs_bandwidth_runtime` at a period boundary `now`.
    pub fn refill(&mut self, now: SimTime) {
        self.runtime = self.quota;
        self.expires = now + self.period;
    }

    /// One step of `distribute_cfs_runtime`: a throttled `local` gets its debt plus 1 ns, as far
    /// as the global runtime goes. Whether it can run again.
    pub fn give(&mut self, local: &mut LocalRuntime) -> bool {
        let want = (1 - local.rem) as u64;
        let amount = want.min(self.runtime);
        self.runtime -= amount;
        local.rem += amount as i64;
        local.expires = self.expires;
        local.rem > 0
    }

    /// `__return_cfs_rq_runtime`: an emptied run queue keeps 1 ms and returns the rest, if it
    /// belongs to the current period. Whether the slack timer should be armed.
    pub fn return_slack(&mut self, local: &mut LocalRuntime) -> bool {
        let slack = local.rem - MIN_RUNTIME_NS;
        if slack <= 0 {
            return false;
        }
        let mut arm = false;
        if local.expires == self.expires {
            self.runtime += slack as u64;
            arm = self.runtime > SLICE_NS as u64 && !self.throttled.is_empty();
        }
        local.rem -= slack;
        arm
    }

    /// `runtime_refresh_within`: the period timer expires within `ns` (or is not running).
    pub fn refresh_within(&self, now: SimTime, ns: u64) -> bool {
        !self.timer_active || self.next_period.since(now) < ns
    }

    /// The first instant of the grid `k × period` after `now` (`hrtimer_forward_now`).
    pub fn next_boundary(&self, now: SimTime) -> SimTime {
        SimTime((now.ns() / self.period + 1) * self.period)
    }
}

impl World<'_> {
    /// Runs `f` on bandwidth pool `b` and the local runtime of its run queue `slot` (a core for
    /// a VM group's pool; ignored for a vCPU's).
    fn with_bw<R>(&mut self, b: u32, slot: u32, f: impl FnOnce(&mut Bandwidth, &mut LocalRuntime) -> R) -> R {
        let kern = &mut self.kernels[HOST as usize];
        let bw = &mut kern.bandwidth[b as usize];
        match bw.owner {
            BwOwner::Group(g) => f(bw, &mut kern.cpus[slot as usize].groups[g as usize].bw),
            BwOwner::Task(t) => f(bw, &mut self.tasks[t as usize].bw),
        }
    }

    /// The pools task `t` (current on host core `cpu`) runs on: its `vcpuN` group's (slot 0)
    /// and its VM group's (slot `cpu`).
    fn bw_pools(&self, t: TaskId, cpu: u32) -> [Option<(u32, u32)>; 2] {
        let task = &self.tasks[t as usize];
        let group = task.group.and_then(|g| self.kernels[HOST as usize].groups[g as usize].bw);
        [task.bw_pool.map(|b| (b, 0)), group.map(|b| (b, cpu))]
    }

    /// Whether task `t` has any bandwidth control (cheap test for the hot path).
    pub(crate) fn has_bw(&self, t: TaskId) -> bool {
        let task = &self.tasks[t as usize];
        task.bw_pool.is_some() || task.group.is_some_and(|g| self.kernels[HOST as usize].groups[g as usize].bw.is_some())
    }

    /// `account_cfs_rq_runtime` of the running task `t` of host core `cpu` at each level with
    /// bandwidth control: out of runtime, the core reschedules (`resched_curr`).
    pub(crate) fn bw_account(&mut self, cpu: u32, t: TaskId, delta: u64) {
        let mut ok = true;
        for (b, slot) in self.bw_pools(t, cpu).into_iter().flatten() {
            ok &= self.bw_charge(b, slot, delta);
        }
        if !ok {
            self.kernels[HOST as usize].cpus[cpu as usize].need_resched = true;
            self.touch_kcpu(HOST, cpu);
        }
    }

    /// `__account_cfs_rq_runtime` of `delta` ns on run queue `slot` of pool `b` (0 at an
    /// enqueue: only the draw), starting the period timer if the draw needs it. Whether the run
    /// queue has runtime left.
    fn bw_charge(&mut self, b: u32, slot: u32, delta: u64) -> bool {
        let (now, tick) = (self.now, self.kernels[HOST as usize].params.tick_ns);
        let ok = self.with_bw(b, slot, |bw, l| bw.account(l, delta, now, tick));
        self.bw_start_timer(b);
        ok
    }

    /// `start_cfs_bandwidth`: the period timer of pool `b` starts on its grid if it was stopped.
    fn bw_start_timer(&mut self, b: u32) {
        let now = self.now;
        let bw = &mut self.kernels[HOST as usize].bandwidth[b as usize];
        if !std::mem::take(&mut bw.start_pending) || bw.timer_active {
            return;
        }
        bw.timer_active = true;
        bw.next_period = bw.next_boundary(now);
        let at = bw.next_period;
        self.q.schedule(at, Ev::BwPeriod { b });
    }

    /// Task `t` is throttled (host; runnable): at the task's own level when its `vcpuN`
    /// group is out of runtime, else `None`. Called as `schedule()` puts the running `t` back
    /// (`put_prev_entity` → `check_cfs_rq_runtime`) and as `t` is enqueued
    /// (`check_enqueue_throttle`, after an `account_cfs_rq_runtime(cfs_rq, 0)`).
    pub(crate) fn bw_task_out_of_runtime(&mut self, t: TaskId, enqueue: bool) -> bool {
        let Some(b) = self.tasks[t as usize].bw_pool else { return false };
        if enqueue {
            return !self.bw_charge(b, 0, 0);
        }
        self.tasks[t as usize].bw.rem <= 0
    }

    /// Marks task `t`'s `vcpuN` run queue throttled (its entity is not, or no longer, counted in
    /// its parent run queue: the caller leaves it out of the trees and the group's load).
    pub(crate) fn bw_throttle_task(&mut self, t: TaskId) {
        let b = self.tasks[t as usize].bw_pool.expect("a pool");
        self.bw_mark_throttled(b, 0);
    }

    /// Group `g`'s run queue on host core `cpu` is out of runtime (after drawing what it can
    /// when `enqueue`) and none of its tasks is current there: throttle it.
    pub(crate) fn bw_check_group(&mut self, cpu: u32, g: u32, enqueue: bool) {
        let Some(b) = self.kernels[HOST as usize].groups[g as usize].bw else { return };
        if self.kernels[HOST as usize].cpus[cpu as usize].groups[g as usize].bw.throttled {
            return;
        }
        let has_runtime =
            if enqueue { self.bw_charge(b, cpu, 0) } else { self.kernels[HOST as usize].cpus[cpu as usize].groups[g as usize].bw.rem > 0 };
        if has_runtime {
            return;
        }
        // `throttle_cfs_rq`: the group's queued tasks leave the core's runnable count.
        let kc = &mut self.kernels[HOST as usize].cpus[cpu as usize];
        kc.nr_queued -= kc.groups[g as usize].rq.len();
        self.bw_mark_throttled(b, cpu);
        let cur = self.running(HOST, cpu);
        self.sync_group(HOST, cpu, g, cur);
    }

    fn bw_mark_throttled(&mut self, b: u32, slot: u32) {
        let now = self.now;
        self.with_bw(b, slot, |bw, l| {
            l.throttled = true;
            l.throttled_at = now;
            if bw.throttled.is_empty() {
                bw.start_pending = true;
            }
            bw.throttled.push_front(slot);
        });
        self.bw_start_timer(b);
    }

    /// The period timer of pool `b` (`do_sched_cfs_period_timer`).
    pub(crate) fn bw_period(&mut self, b: u32) {
        let now = self.now;
        let bw = &mut self.kernels[HOST as usize].bandwidth[b as usize];
        let throttled = !bw.throttled.is_empty();
        bw.stats.nr_periods += 1;
        if bw.idle && !throttled {
            bw.timer_active = false;
            bw.next_period = SimTime::NEVER;
            return;
        }
        bw.refill(now);
        bw.next_period = now + bw.period;
        let at = bw.next_period;
        self.q.schedule(at, Ev::BwPeriod { b });
        if !throttled {
            bw.idle = true;
            return;
        }
        bw.stats.nr_throttled += 1;
        self.bw_distribute(b);
        self.kernels[HOST as usize].bandwidth[b as usize].idle = false;
    }

    /// The slack timer of pool `b` (`do_sched_cfs_slack_timer`), if `gen` is still armed.
    pub(crate) fn bw_slack(&mut self, b: u32, gen: u32) {
        let bw = &self.kernels[HOST as usize].bandwidth[b as usize];
        if gen != bw.slack_gen || bw.refresh_within(self.now, MIN_EXPIRATION_NS) || bw.runtime <= SLICE_NS as u64 {
            return;
        }
        self.bw_distribute(b);
    }

    /// `distribute_cfs_runtime`: the throttled run queues of pool `b`, most recently throttled
    /// first, get their debt plus 1 ns while runtime lasts; those with runtime now run again.
    fn bw_distribute(&mut self, b: u32) {
        let list: Vec<u32> = self.kernels[HOST as usize].bandwidth[b as usize].throttled.iter().copied().collect();
        for slot in list {
            if self.kernels[HOST as usize].bandwidth[b as usize].runtime == 0 {
                break;
            }
            if self.with_bw(b, slot, |bw, l| bw.give(l)) {
                self.bw_unthrottle(b, slot);
            }
        }
    }

    /// `unthrottle_cfs_rq`: run queue `slot` of pool `b` runs again; its entity is enqueued as a
    /// waking one, and an idle core reschedules.
    fn bw_unthrottle(&mut self, b: u32, slot: u32) {
        let now = self.now;
        let owner = self.with_bw(b, slot, |bw, l| {
            l.throttled = false;
            bw.stats.throttled_ns += now.since(l.throttled_at);
            bw.throttled.retain(|&s| s != slot);
            bw.owner
        });
        let cpu = match owner {
            BwOwner::Group(g) => {
                let half_latency = self.kernels[HOST as usize].params.latency / 2;
                let kc = &mut self.kernels[HOST as usize].cpus[slot as usize];
                let root_min = kc.min_vr;
                let gr = &mut kc.groups[g as usize];
                kc.nr_queued += gr.rq.len();
                gr.se_vr = gr.se_vr.max(root_min.saturating_sub(half_latency));
                let cur = self.running(HOST, slot);
                self.sync_group(HOST, slot, g, cur);
                slot
            }
            BwOwner::Task(t) => {
                let cpu = self.tasks[t as usize].cpu;
                if self.tasks[t as usize].state == TaskState::Queued {
                    self.requeue_unthrottled(cpu, t);
                }
                cpu
            }
        };
        let kc = &self.kernels[HOST as usize].cpus[cpu as usize];
        if kc.curr.is_none() && kc.nr_queued > 0 {
            self.resched_cpu(HOST, cpu, None);
        }
    }

    /// A run queue of pool `b` emptied (`return_cfs_rq_runtime`): its slack goes back to the
    /// group, and the slack timer is re-armed if throttled run queues could use it.
    pub(crate) fn bw_return_slack(&mut self, b: u32, slot: u32) {
        if !self.with_bw(b, slot, |bw, l| bw.return_slack(l)) {
            return;
        }
        let now = self.now;
        let bw = &mut self.kernels[HOST as usize].bandwidth[b as usize];
        if bw.refresh_within(now, MIN_EXPIRATION_NS) {
            return;
        }
        bw.slack_gen = bw.slack_gen.wrapping_add(1);
        let gen = bw.slack_gen;
        self.q.schedule(now + SLACK_PERIOD_NS, Ev::BwSlack { b, gen });
    }

    /// Adds a pool for `owner` (host) and returns its index.
    pub(crate) fn add_bandwidth(&mut self, owner: BwOwner, quota: u64, period: u64) -> u32 {
        let kern = &mut self.kernels[HOST as usize];
        kern.bandwidth.push(Bandwidth::new(owner, quota, period));
        let b = (kern.bandwidth.len() - 1) as u32;
        match owner {
            BwOwner::Group(g) => kern.groups[g as usize].bw = Some(b),
            BwOwner::Task(t) => self.tasks[t as usize].bw_pool = Some(b),
        }
        b
    }

    /// `cpu.stat` of pool `b` at the end of the run: run queues still throttled count until now.
    pub(crate) fn bw_stats(&self, b: u32) -> BandwidthStats {
        let bw = &self.kernels[HOST as usize].bandwidth[b as usize];
        let mut st = bw.stats;
        for &slot in &bw.throttled {
            let at = match bw.owner {
                BwOwner::Group(g) => self.kernels[HOST as usize].cpus[slot as usize].groups[g as usize].bw.throttled_at,
                BwOwner::Task(t) => self.tasks[t as usize].bw.throttled_at,
            };
            st.throttled_ns += self.now.since(at);
        }
        st
    }

    /// Whether runnable task `t` of kernel `k` is throttled where it is queued: its `vcpuN`
    /// run queue, or its group's on its core.
    pub(crate) fn throttled(&self, k: KernelId, t: TaskId) -> bool {
        let task = &self.tasks[t as usize];
        task.bw.throttled || task.group.is_some_and(|g| self.kernels[k as usize].cpus[task.cpu as usize].groups[g as usize].bw.throttled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: u64 = 4_000_000;

    #[test]
    fn runtime_is_drawn_a_slice_at_a_time_and_runs_out_at_the_quota() {
        let mut b = Bandwidth::new(BwOwner::Group(0), 12_000_000, 24_000_000);
        b.refill(SimTime::ZERO);
        let mut l = LocalRuntime::default();
        assert!(b.assign(&mut l));
        assert_eq!((l.rem, b.runtime), (5_000_000, 7_000_000));
        // 4 ms ran: 1 ms left locally, no draw yet.
        assert!(b.account(&mut l, 4_000_000, SimTime(4_000_000), TICK));
        assert_eq!((l.rem, b.runtime), (1_000_000, 7_000_000));
        // 4 ms more: 3 ms overrun, topped up to a slice (8 ms drawn, only 7 left → 4 ms).
        assert!(b.account(&mut l, 4_000_000, SimTime(8_000_000), TICK));
        assert_eq!((l.rem, b.runtime), (4_000_000, 0));
        // Past the quota: no runtime, the run queue must be throttled.
        assert!(!b.account(&mut l, 5_000_000, SimTime(13_000_000), TICK));
        assert_eq!(l.rem, -1_000_000);
        // The refill pays the debt and 1 ns.
        b.refill(SimTime(24_000_000));
        assert!(b.give(&mut l));
        assert_eq!((l.rem, b.runtime), (1, 12_000_000 - 1_000_001));
    }

    #[test]
    fn local_runtime_expires_with_its_period() {
        let mut b = Bandwidth::new(BwOwner::Task(0), 10_000_000, 20_000_000);
        b.refill(SimTime::ZERO);
        let mut l = LocalRuntime::default();
        b.assign(&mut l);
        assert_eq!(l.expires, SimTime(20_000_000));
        b.refill(SimTime(20_000_000));
        // Accounted in the next period: the 5 ms left are void; a fresh slice is drawn.
        assert!(b.account(&mut l, 1_000_000, SimTime(21_000_000), TICK));
        assert_eq!((l.rem, b.runtime), (5_000_000, 5_000_000));
        assert_eq!(l.expires, SimTime(40_000_000));
        // Not refilled (timer stopped): the expiry moves on by a tick, runtime kept.
        let mut l2 = LocalRuntime { rem: 3_000_000, expires: SimTime(40_000_000), ..Default::default() };
        assert!(b.account(&mut l2, 1_000_000, SimTime(41_000_000), TICK));
        assert_eq!((l2.rem, l2.expires), (2_000_000, SimTime(44_000_000)));
    }

    #[test]
    fn an_emptied_run_queue_keeps_a_millisecond() {
        let mut b = Bandwidth::new(BwOwner::Group(0), 20_000_000, 100_000_000);
        b.refill(SimTime::ZERO);
        let mut l = LocalRuntime::default();
        b.assign(&mut l);
        assert!(!b.return_slack(&mut l), "nothing throttled: no slack timer");
        assert_eq!((l.rem, b.runtime), (1_000_000, 19_000_000));
        b.throttled.push_front(3);
        let mut l2 = LocalRuntime::default();
        b.assign(&mut l2);
        assert!(b.return_slack(&mut l2), "a throttled run queue and more than a slice left");
        assert!(!b.return_slack(&mut l2), "only 1 ms left: nothing returned");
        assert_eq!(b.next_boundary(SimTime(250_000_000)), SimTime(300_000_000));
        assert_eq!(b.next_boundary(SimTime(300_000_000)), SimTime(400_000_000));
    }
}
