//! The fair scheduler (CFS as in Linux 4.15, the TPDS kernel; kernel/sched/fair.c).
//!
//! - Per-CPU run queues ordered by virtual runtime; `vruntime += delta × 1024 / weight`.
//! - Slices: period = `latency` (or `nr × min_gran` beyond `latency / min_gran` tasks), split by
//!   weight, floored at `min_gran`; checked at the tick, where a task that has run `min_gran`
//!   and leads the leftmost by more than its slice is preempted too (`check_preempt_tick`).
//! - Wake-up preemption when `curr.vruntime − woken.vruntime > wakeup_gran × 1024 / weight`.
//! - Sleepers are placed at `max(vruntime, min_vruntime − latency / 2)` (GENTLE_FAIR_SLEEPERS).
//! - Wake-up CPU selection as `select_task_rq_fair` (`wake_affine`, then `select_idle_sibling`
//!   within the target's last-level cache; see [`World::select_cpu`]). Idle CPUs pull a
//!   queued task when they go idle (newidle balance);
//!   busy CPUs push queued tasks to idle CPUs at their periodic balance (nohz idle balance).
//! - A thread inside a kernel spinlock section is not preemptible (preempt_count > 0).

use crate::account::{Attr, Cause, Layer};

use super::group::{calc_group_shares, tg_contrib_update};
use super::{irq, Ent, IdleState, KernelId, TaskId, TaskKind, TaskState, ThreadId, Work, HOST};
use crate::world::World;

/// `sysctl_sched_migration_cost` (Linux v3.16–v4.15 kernel/sched/fair.c: 500 µs, not scaled by
/// the CPU count): the idle time below which newidle balancing is not worth it.
pub const MIGRATION_COST: u64 = 500_000;

impl World<'_> {
    /// Accounts the running task's time since it was last accounted (and its group entity's).
    pub(crate) fn update_curr(&mut self, k: KernelId, cpu: u32) {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        let Some(t) = kc.curr else { return };
        let task = &mut self.tasks[t as usize];
        if task.state != TaskState::Running {
            // Blocked (and maybe already woken and queued elsewhere) but not yet switched out:
            // its time was accounted when it blocked; its queue key must not change.
            task.exec_start = self.now;
            return;
        }
        let delta = self.now.since(task.exec_start);
        task.exec_start = self.now;
        if delta > 0 {
            task.sum_exec += delta;
            task.vr += delta * 1024 / task.weight;
            if let Some(g) = task.group {
                let gr = &mut self.kernels[k as usize].cpus[cpu as usize].groups[g as usize];
                gr.se_vr += delta * 1024 / gr.se_w;
                gr.sum_exec += delta;
            }
            if k == HOST && self.has_bw(t) {
                self.bw_account(cpu, t, delta);
            }
        }
        self.update_min_vr(k, cpu);
    }

    /// The running task of a CPU, if it is still runnable.
    pub(crate) fn running(&self, k: KernelId, cpu: u32) -> Option<TaskId> {
        self.kernels[k as usize].cpus[cpu as usize].curr.filter(|&c| self.tasks[c as usize].state == TaskState::Running)
    }

    /// The root-run-queue entity of task `t`: itself, or its group's entity.
    fn top(&self, t: TaskId) -> Ent {
        match self.tasks[t as usize].group {
            Some(g) => Ent::Group(g),
            None => Ent::Task(t),
        }
    }

    /// Virtual runtime of a root entity of `cpu`.
    fn ent_vr(&self, k: KernelId, cpu: u32, e: Ent) -> u64 {
        match e {
            Ent::Task(t) => self.tasks[t as usize].vr,
            Ent::Group(g) => self.kernels[k as usize].cpus[cpu as usize].groups[g as usize].se_vr,
        }
    }

    /// Load weight of a root entity of `cpu`.
    fn ent_weight(&self, k: KernelId, cpu: u32, e: Ent) -> u64 {
        match e {
            Ent::Task(t) => self.tasks[t as usize].weight,
            Ent::Group(g) => self.kernels[k as usize].cpus[cpu as usize].groups[g as usize].se_w,
        }
    }

    /// The `min_vruntime` of the run queue task `t` is queued in on `cpu` (its group's there,
    /// or the root's).
    fn cfs_min_vr(&self, k: KernelId, cpu: u32, t: TaskId) -> u64 {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        match self.tasks[t as usize].group {
            Some(g) => kc.groups[g as usize].min_vr,
            None => kc.min_vr,
        }
    }

    fn update_min_vr(&mut self, k: KernelId, cpu: u32) {
        let run = self.running(k, cpu);
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        let curr_vr = run.map(|t| self.ent_vr(k, cpu, self.top(t)));
        let left = kc.rq.first().map(|&(v, _)| v);
        if let Some(cand) = min_some(curr_vr, left) {
            let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
            kc.min_vr = kc.min_vr.max(cand);
        }
        if let Some(g) = run.and_then(|t| self.tasks[t as usize].group) {
            self.update_group_min_vr(k, cpu, g);
        }
    }

    /// `update_min_vruntime` of group `g`'s run queue on `cpu`.
    fn update_group_min_vr(&mut self, k: KernelId, cpu: u32, g: u32) {
        let run = self.running(k, cpu).filter(|&t| self.tasks[t as usize].group == Some(g));
        let gr = &self.kernels[k as usize].cpus[cpu as usize].groups[g as usize];
        let cand = min_some(run.map(|t| self.tasks[t as usize].vr), gr.rq.first().map(|&(v, _)| v));
        if let Some(cand) = cand {
            let gr = &mut self.kernels[k as usize].cpus[cpu as usize].groups[g as usize];
            gr.min_vr = gr.min_vr.max(cand);
        }
    }

    /// Inserts runnable task `t` into its run queue's tree on `cpu` (the root's or its group's).
    fn tree_insert(&mut self, k: KernelId, cpu: u32, t: TaskId) {
        let (vr, group) = (self.tasks[t as usize].vr, self.tasks[t as usize].group);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        // A throttled group's tasks do not count as runnable on the CPU (`throttle_cfs_rq`).
        match group {
            Some(g) => {
                kc.nr_queued += usize::from(!kc.groups[g as usize].bw.throttled);
                kc.groups[g as usize].rq.insert((vr, t))
            }
            None => {
                kc.nr_queued += 1;
                kc.rq.insert((vr, Ent::Task(t)))
            }
        };
    }

    fn tree_remove(&mut self, k: KernelId, cpu: u32, t: TaskId) {
        let (vr, group) = (self.tasks[t as usize].vr, self.tasks[t as usize].group);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        let removed = match group {
            Some(g) => {
                kc.nr_queued -= usize::from(!kc.groups[g as usize].bw.throttled);
                kc.groups[g as usize].rq.remove(&(vr, t))
            }
            None => {
                kc.nr_queued -= 1;
                kc.rq.remove(&(vr, Ent::Task(t)))
            }
        };
        debug_assert!(removed, "dequeue of a task not queued");
    }

    /// Task `t` becomes runnable on `cpu` (woken, migrated in, started): it is queued there.
    fn enqueue(&mut self, k: KernelId, cpu: u32, t: TaskId) {
        let task = &mut self.tasks[t as usize];
        task.state = TaskState::Queued;
        task.cpu = cpu;
        if k == HOST && self.bw_task_out_of_runtime(t, true) {
            // check_enqueue_throttle of its vcpuN run queue: it stays out of the trees.
            self.bw_throttle_task(t);
            return;
        }
        self.tree_insert(k, cpu, t);
        if let Some(g) = self.tasks[t as usize].group {
            self.group_add(k, cpu, t, true);
            let cur = self.running(k, cpu);
            if k == HOST && cur.is_none_or(|c| self.tasks[c as usize].group != Some(g)) {
                self.bw_check_group(cpu, g, true);
            }
            self.sync_group(k, cpu, g, cur);
        }
    }

    /// Task `t`, queued but throttled at its own level, runs again on host core `cpu`
    /// (`unthrottle_cfs_rq`): its entity is enqueued as a waking one (`ENQUEUE_WAKEUP`:
    /// `place_entity`), which may throttle its group's run queue there.
    pub(crate) fn requeue_unthrottled(&mut self, cpu: u32, t: TaskId) {
        let half_latency = self.kernels[HOST as usize].params.latency / 2;
        let min = self.cfs_min_vr(HOST, cpu, t);
        let task = &mut self.tasks[t as usize];
        task.vr = task.vr.max(min.saturating_sub(half_latency));
        self.tree_insert(HOST, cpu, t);
        if let Some(g) = self.tasks[t as usize].group {
            self.group_add(HOST, cpu, t, true);
            let cur = self.running(HOST, cpu);
            if cur.is_none_or(|c| self.tasks[c as usize].group != Some(g)) {
                self.bw_check_group(cpu, g, true);
            }
            self.sync_group(HOST, cpu, g, cur);
        }
    }

    /// Queued task `t` leaves `cpu` (migration).
    fn detach(&mut self, k: KernelId, cpu: u32, t: TaskId) {
        self.tree_remove(k, cpu, t);
        if let Some(g) = self.tasks[t as usize].group {
            self.group_remove(k, cpu, t);
            let cur = self.running(k, cpu);
            self.sync_group(k, cpu, g, cur);
        }
    }

    /// Puts a task that is runnable at start-up into its CPU's queue.
    pub(crate) fn enqueue_initial(&mut self, t: TaskId) {
        let (k, cpu) = (self.tasks[t as usize].kernel, self.tasks[t as usize].cpu);
        self.enqueue(k, cpu, t);
        self.kernels[k as usize].cpus[cpu as usize].need_resched = true;
    }

    /// Picks the next task on `cpu` (the `schedule()` of the model) and charges the switch.
    pub(crate) fn schedule(&mut self, k: KernelId, cpu: u32) {
        self.kernels[k as usize].cpus[cpu as usize].need_resched = false;
        self.update_curr(k, cpu);
        let prev = self.kernels[k as usize].cpus[cpu as usize].curr;
        let prev_runnable = prev.filter(|&p| self.tasks[p as usize].state == TaskState::Running);
        let in_call = |p: TaskId| matches!(self.tasks[p as usize].kind, TaskKind::Thread(th) if self.in_futex_call(th));
        if prev_runnable.is_some_and(|p| self.nonpreemptible(p) || in_call(p)) {
            // preempt_count > 0, or inside a futex call: the switch happens at
            // preempt_enable() or at the call's return.
            self.kernels[k as usize].cpus[cpu as usize].resched_deferred = true;
            return;
        }
        // A task re-pinned elsewhere while it ran leaves this CPU (the migration stopper).
        let stays = prev_runnable.filter(|&p| self.allowed(p, cpu));
        let prev_group = prev.and_then(|p| self.tasks[p as usize].group);
        // CFS bandwidth (`put_prev_entity` → `check_cfs_rq_runtime`): a prev whose vcpuN run
        // queue is out of runtime is throttled, and so is its group's run queue here.
        let throttle_prev = k == HOST && prev_runnable.is_some_and(|p| self.bw_task_out_of_runtime(p, false));
        if let Some(p) = prev_runnable.filter(|_| stays.is_none() || throttle_prev) {
            self.group_remove(k, cpu, p);
        }
        if let Some(p) = prev_runnable.filter(|_| throttle_prev) {
            self.bw_throttle_task(p);
        }
        if let Some(g) = prev_group.filter(|_| k == HOST) {
            self.bw_check_group(cpu, g, false);
        }
        // A throttled prev (its own run queue or its group's here) is not a candidate.
        let cand = stays.filter(|&p| !self.throttled(k, p));
        if let Some(g) = prev_group {
            // The group entity of a prev that no longer runs competes in the tree again.
            self.sync_group(k, cpu, g, cand);
        }
        let chosen = self.pick_next(k, cpu, cand);
        let yielded = prev_runnable.is_some() && self.kernels[k as usize].cpus[cpu as usize].skip_buddy == prev_runnable;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        kc.next_buddy = None;
        kc.skip_buddy = None;
        if chosen.is_some() && chosen == prev_runnable {
            return; // prev stays
        }
        if let Some(p) = prev_runnable {
            self.tasks[p as usize].state = TaskState::Queued;
            if throttle_prev {
                if stays.is_none() {
                    self.move_throttled(k, p, cpu);
                }
            } else if stays.is_some() {
                self.tree_insert(k, cpu, p);
            } else {
                self.send_to_affine(k, p, cpu);
            }
            self.tasks[p as usize].nivcsw += 1;
        }
        if let Some(TaskKind::Vcpu(v)) = prev.map(|p| self.tasks[p as usize].kind) {
            if k == HOST && self.tasks[prev.unwrap() as usize].state != TaskState::Done {
                self.vcpu_sched_out(v, prev_runnable.is_some(), yielded);
            }
        }
        let next = chosen;
        if let Some(n) = next {
            self.tree_remove(k, cpu, n);
            debug_assert!(
                self.kernels[k as usize].cpus.iter().all(|c| c.curr != Some(n)),
                "task {n} picked on CPU {cpu} of kernel {k} while current elsewhere"
            );
        }
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        kc.curr = next;
        if let Some(n) = next {
            let now = self.now;
            let task = &mut self.tasks[n as usize];
            task.state = TaskState::Running;
            task.cpu = cpu;
            task.exec_start = now;
            task.prev_sum_exec = task.sum_exec;
            let next_group = task.group;
            if let TaskKind::Thread(th) = task.kind {
                self.kernels[k as usize].cpus[cpu as usize].last_mm = Some(self.threads[th as usize].inst);
            }
            if let Some(g) = next_group {
                // set_next_entity of the group entity, unless it already was current.
                if prev_group != Some(g) || stays.is_none() {
                    let gr = &mut self.kernels[k as usize].cpus[cpu as usize].groups[g as usize];
                    gr.prev_sum_exec = gr.sum_exec;
                }
                self.sync_group(k, cpu, g, next);
            }
            let task = &mut self.tasks[n as usize];
            if let Some(w) = task.woken_at.take() {
                let lat = now.since(w);
                match task.kind {
                    TaskKind::Thread(th) => self.threads[th as usize].stats.wake_latency.record(lat),
                    TaskKind::Vcpu(v) => {
                        self.vcpus[v as usize].wake_latency.record(lat);
                        if lat > task.wakeup_gran.unwrap_or(self.kernels[k as usize].params.wakeup_gran) {
                            self.vcpus[v as usize].alloc.late_wakeups += 1;
                        }
                    }
                }
            }
        }
        if let Some(g) = prev_group {
            self.sync_group(k, cpu, g, next);
        }
        if next != prev {
            if let Some(TaskKind::Thread(th)) = prev.map(|p| self.tasks[p as usize].kind) {
                // An mmap_sem writer leaves its CPU (`owner->on_cpu` turns false): its
                // spinners look again.
                let inst = self.threads[th as usize].inst;
                if self.insts[inst as usize].mmap_sem.writer == Some(th) {
                    self.rwsem_touch_spinners(inst);
                }
            }
            self.charge_switch(k, cpu, prev, next);
            if let Some(TaskKind::Vcpu(v)) = next.map(|n| self.tasks[n as usize].kind) {
                self.vcpu_sched_in(v);
            }
        }
        if next.is_some() {
            self.exit_idle(k, cpu);
        }
        self.update_min_vr(k, cpu);
    }

    /// CFS `pick_next_entity` (Linux 4.15), level by level: in the root run queue among its
    /// entities and the still-runnable `prev`'s, then, when a group entity wins, in that
    /// group's run queue (`pick_next_task_fair` walking down the hierarchy). At each level:
    /// the leftmost entity, unless it is the skip buddy (a yielder) and the second is within
    /// wake-up granularity of it; a next buddy (a `yield_to` target) within wake-up
    /// granularity of the leftmost wins. Ties keep `prev`.
    fn pick_next(&self, k: KernelId, cpu: u32, prev: Option<TaskId>) -> Option<TaskId> {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        let runnable_here = |n: TaskId| {
            Some(n) == prev
                || self.tasks[n as usize].state == TaskState::Queued && self.tasks[n as usize].cpu == cpu && !self.throttled(k, n)
        };
        let next = kc.next_buddy.filter(|&n| runnable_here(n));
        // Root level.
        let mut it = kc.rq.iter().copied();
        let tree = [it.next(), it.next()];
        let at = |e: Ent| (self.ent_vr(k, cpu, e), e);
        let gran = |e: Ent| self.ent_gran(k, cpu, e);
        let top =
            pick_entity(&tree, prev.map(|p| at(self.top(p))), kc.skip_buddy.map(|s| self.top(s)), next.map(|n| at(self.top(n))), gran)?;
        let g = match top {
            Ent::Task(t) => return Some(t),
            Ent::Group(g) => g,
        };
        // The group's level.
        let gr = &kc.groups[g as usize];
        let mut it = gr.rq.iter().copied();
        let tree = [it.next(), it.next()];
        let in_g = |t: &TaskId| self.tasks[*t as usize].group == Some(g);
        let vr = |t: TaskId| (self.tasks[t as usize].vr, t);
        pick_entity(&tree, prev.filter(in_g).map(vr), kc.skip_buddy.filter(in_g), next.filter(in_g).map(vr), |t| self.wakeup_gran(t))
    }

    /// Wake-up granularity of a root entity in virtual time: a task's own
    /// ([`World::wakeup_gran`]), a group entity's the kernel's scaled by the entity's weight.
    fn ent_gran(&self, k: KernelId, cpu: u32, e: Ent) -> u64 {
        match e {
            Ent::Task(t) => self.wakeup_gran(t),
            Ent::Group(g) => {
                self.kernels[k as usize].params.wakeup_gran * 1024 / self.kernels[k as usize].cpus[cpu as usize].groups[g as usize].se_w
            }
        }
    }

    /// Advances the PELT of group `g` on `cpu` to now and publishes its contribution to the
    /// group's `load_avg` (`update_load_avg` → `update_tg_load_avg`).
    fn pelt_advance(&mut self, k: KernelId, cpu: u32, g: u32) {
        let now = self.now;
        let kern = &mut self.kernels[k as usize];
        let gr = &mut kern.cpus[cpu as usize].groups[g as usize];
        gr.pelt.advance(now, gr.load_w);
        if let Some(c) = tg_contrib_update(gr.pelt.load_avg(), gr.contrib) {
            let tg = &mut kern.groups[g as usize];
            tg.load_avg = tg.load_avg + c - gr.contrib;
            gr.contrib = c;
        }
    }

    /// `update_cfs_group`: recomputes the weight of group `g`'s entity on `cpu`
    /// ([`calc_group_shares`]). A current group entity first accounts its time at the old weight
    /// (`reweight_entity`); its virtual runtime, the tree key, does not change.
    fn update_group_weight(&mut self, k: KernelId, cpu: u32, g: u32) {
        if self.running(k, cpu).is_some_and(|t| self.tasks[t as usize].group == Some(g)) {
            self.update_curr(k, cpu);
        }
        let kern = &mut self.kernels[k as usize];
        let tg = &kern.groups[g as usize];
        let gr = &mut kern.cpus[cpu as usize].groups[g as usize];
        gr.se_w = calc_group_shares(tg.shares, gr.load_w, gr.pelt.load_avg(), tg.load_avg, gr.contrib);
    }

    /// Runnable task `t` starts counting in its group's load on `cpu` (`account_entity_enqueue`).
    /// `wakeup`: the group entity, if it had nothing runnable here, is placed as a waking
    /// entity (`enqueue_task_fair` enqueues parents with `ENQUEUE_WAKEUP`: `place_entity`,
    /// at most half a latency behind the root's `min_vruntime`).
    fn group_add(&mut self, k: KernelId, cpu: u32, t: TaskId, wakeup: bool) {
        let Some(g) = self.tasks[t as usize].group else { return };
        self.pelt_advance(k, cpu, g);
        let w = self.tasks[t as usize].weight;
        let half_latency = self.kernels[k as usize].params.latency / 2;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        let root_min = kc.min_vr;
        let gr = &mut kc.groups[g as usize];
        if gr.nr == 0 && wakeup {
            gr.se_vr = gr.se_vr.max(root_min.saturating_sub(half_latency));
        }
        gr.nr += 1;
        gr.load_w += w;
        self.update_group_weight(k, cpu, g);
    }

    /// Task `t` stops counting in its group's load on `cpu` (blocked, exited, migrated away).
    fn group_remove(&mut self, k: KernelId, cpu: u32, t: TaskId) {
        let Some(g) = self.tasks[t as usize].group else { return };
        self.pelt_advance(k, cpu, g);
        let w = self.tasks[t as usize].weight;
        let gr = &mut self.kernels[k as usize].cpus[cpu as usize].groups[g as usize];
        gr.nr -= 1;
        gr.load_w -= w;
        let emptied = gr.nr == 0;
        self.update_group_weight(k, cpu, g);
        if let Some(b) = self.kernels[k as usize].groups[g as usize].bw.filter(|_| emptied && k == HOST) {
            self.bw_return_slack(b, cpu);
        }
    }

    /// Puts group `g`'s entity in the root tree of `cpu` exactly when it has runnable tasks
    /// there and is not the current entity (`cur`: the task taken as current).
    pub(crate) fn sync_group(&mut self, k: KernelId, cpu: u32, g: u32, cur: Option<TaskId>) {
        let cur_in_g = cur.is_some_and(|t| self.tasks[t as usize].group == Some(g));
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        let gr = &mut kc.groups[g as usize];
        let want = gr.nr > 0 && !cur_in_g && !gr.bw.throttled;
        if want != gr.queued {
            gr.queued = want;
            let key = (gr.se_vr, Ent::Group(g));
            if want {
                kc.rq.insert(key);
            } else {
                kc.rq.remove(&key);
            }
        }
    }

    /// Changes task `t`'s load weight (a policy re-weighting a vCPU thread): its time so far
    /// is accounted at the old weight, and its group's load and entity weight follow.
    pub(crate) fn set_task_weight(&mut self, t: TaskId, w: u64) {
        let task = &self.tasks[t as usize];
        if task.weight == w {
            return;
        }
        let (k, cpu, state, group) = (task.kernel, task.cpu, task.state, task.group);
        if state == TaskState::Running {
            self.touch_kcpu(k, cpu);
            self.update_curr(k, cpu);
        }
        let runnable = matches!(state, TaskState::Running | TaskState::Queued) && !self.tasks[t as usize].bw.throttled;
        if let Some(g) = group.filter(|_| runnable) {
            self.pelt_advance(k, cpu, g);
            let old = self.tasks[t as usize].weight;
            let gr = &mut self.kernels[k as usize].cpus[cpu as usize].groups[g as usize];
            gr.load_w = gr.load_w - old + w;
            self.tasks[t as usize].weight = w;
            self.update_group_weight(k, cpu, g);
        } else {
            self.tasks[t as usize].weight = w;
        }
    }

    /// The nohz idle balance's and the periodic balancer's `update_blocked_averages`: brings
    /// the group loads of `cpu` up to date.
    fn refresh_group_loads(&mut self, k: KernelId, cpu: u32) {
        for g in 0..self.kernels[k as usize].groups.len() as u32 {
            self.pelt_advance(k, cpu, g);
        }
    }

    /// `yield_to(p, preempt = true)` in the host (Linux 4.15 kernel/sched/core.c and `yield_to_task_fair`) from the task
    /// current on its CPU: -ESRCH when both run queues hold a single task; fails when the
    /// target is running or not runnable; otherwise marks the target as next buddy on its
    /// CPU (rescheduling that CPU), the caller as skip buddy on its own, and reschedules.
    pub(crate) fn yield_to(&mut self, curr: TaskId, target: TaskId) -> crate::policy::YieldTo {
        use crate::policy::YieldTo;
        let (k, c) = (self.tasks[curr as usize].kernel, self.tasks[curr as usize].cpu);
        let tc = self.tasks[target as usize].cpu;
        let nr = |cpu: u32| self.kernels[k as usize].cpus[cpu as usize].nr_running();
        let target_queued = self.tasks[target as usize].state == TaskState::Queued;
        let src_single = nr(c) == 1;
        let dst_single = if target_queued { nr(tc) == 1 } else { nr(tc) <= 1 };
        if src_single && dst_single {
            return YieldTo::Esrch;
        }
        // yield_to_task_fair: not on a throttled hierarchy.
        if !target_queued || self.throttled(k, target) {
            return YieldTo::Failed;
        }
        self.kernels[k as usize].cpus[tc as usize].next_buddy = Some(target);
        self.touch_kcpu(k, c);
        self.update_curr(k, c);
        self.kernels[k as usize].cpus[c as usize].skip_buddy = Some(curr);
        self.kernels[k as usize].cpus[c as usize].need_resched = true;
        if tc != c {
            self.resched_cpu(k, tc, Some((k, c)));
        }
        YieldTo::Yielded
    }

    fn charge_switch(&mut self, k: KernelId, cpu: u32, prev: Option<TaskId>, next: Option<TaskId>) {
        let payer = next.or(prev).expect("a switch involves a task");
        let owner = self.tasks[payer as usize].owner;
        let (attr, cost) = if k != HOST {
            (self.ctx_attr(k, cpu, Cause::ContextSwitch), self.costs.context_switch)
        } else {
            match self.tasks[payer as usize].kind {
                TaskKind::Vcpu(_) => {
                    let cost = if next.is_some() { self.costs.vcpu_switch } else { self.costs.context_switch.min(self.costs.vcpu_switch) };
                    (Attr { owner, layer: Layer::Host, cause: Cause::VcpuSwitch }, cost)
                }
                TaskKind::Thread(_) => (Attr { owner, layer: Layer::Kernel, cause: Cause::ContextSwitch }, self.costs.context_switch),
            }
        };
        if k == HOST {
            // `__schedule` keeps this CPU's run-queue lock through `context_switch`, with
            // `kvm_sched_out`'s `vcpu_put` (the FPU save queued before this), until
            // `finish_lock_switch`; `kvm_sched_in` (`vcpu_load`) and the KVM entry path run after
            // it (Linux v3.19.8 kernel/sched/core.c `context_switch`, `finish_task_switch`). The
            // model takes the share of a thread switch (`context_switch`) as the locked part.
            let queued: u64 = self.kernels[k as usize].cpus[cpu as usize].kwork.iter().map(|w| w.rem).sum();
            let locked = cost.min(self.costs.context_switch);
            self.kernels[k as usize].cpus[cpu as usize].rq_locked_until = self.now + queued + locked;
        }
        self.push_work(k, cpu, attr, cost);
    }

    /// How long a `yield_to` from `curr` to `target` issued at `at` spins in `double_rq_lock`
    /// (Linux v3.19.8 kernel/sched/core.c `yield_to`) before it can look at the target: until
    /// a switch in progress on either CPU has released that CPU's run-queue lock
    /// ([`super::KCpu::rq_locked_until`]). 0 when neither CPU is switching then.
    pub(crate) fn rq_lock_wait(&self, curr: TaskId, target: TaskId, at: crate::engine::SimTime) -> u64 {
        let locked = |t: TaskId| {
            let task = &self.tasks[t as usize];
            self.kernels[task.kernel as usize].cpus[task.cpu as usize].rq_locked_until
        };
        locked(curr).max(locked(target)).since(at)
    }

    /// Leaves the idle loop because a task was picked: restart the tick (NO_HZ_IDLE exit) and
    /// fold the idle period into `avg_idle` (`ttwu_do_wakeup`: `update_avg`, 1/8 weight,
    /// capped at twice the migration cost).
    fn exit_idle(&mut self, k: KernelId, cpu: u32) {
        let next = self.kernels[k as usize].next_tick_after(self.now);
        let now = self.now;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if let Some(stamp) = kc.idle_stamp.take() {
            let delta = now.since(stamp) as i64;
            let avg = kc.avg_idle as i64;
            kc.avg_idle = ((avg + (delta - avg) / 8).max(0) as u64).min(2 * MIGRATION_COST);
        }
        kc.idle = IdleState::Awake;
        if !kc.tick_on {
            kc.tick_on = true;
            kc.next_tick = next;
            self.update_timer(k, cpu);
        }
    }

    /// The running task of `cpu` stops being runnable (blocks, sleeps, halts, exits).
    pub(crate) fn block_curr(&mut self, k: KernelId, cpu: u32, done: bool) {
        self.touch_kcpu(k, cpu);
        self.update_curr(k, cpu);
        let t = self.kernels[k as usize].cpus[cpu as usize].curr.expect("block_curr with a running task");
        let task = &mut self.tasks[t as usize];
        task.state = if done { TaskState::Done } else { TaskState::Blocked };
        if !done {
            task.nvcsw += 1;
        }
        self.group_remove(k, cpu, t);
        if let Some(b) = self.tasks[t as usize].bw_pool.filter(|_| k == HOST) {
            self.bw_return_slack(b, 0);
        }
        self.kernels[k as usize].cpus[cpu as usize].need_resched = true;
    }

    /// Makes a blocked task runnable. `waker` is the CPU (of the same kernel) executing the
    /// wake-up, or None when it happens in interrupt context on the target CPU.
    pub(crate) fn wake_task(&mut self, t: TaskId, waker: Option<(KernelId, u32)>) {
        let k = self.tasks[t as usize].kernel;
        debug_assert_eq!(self.tasks[t as usize].state, TaskState::Blocked);
        let prev = self.tasks[t as usize].cpu;
        if self.kernels[k as usize].cpus[prev as usize].curr == Some(t) {
            // Still current on its CPU: that CPU has not switched it out yet (in a guest, its
            // vCPU was preempted before the guest's schedule() ran). Linux cannot move a task
            // that is still on_cpu (try_to_wake_up waits for p->on_cpu); the wake-up simply
            // makes it runnable again where it is, and the pending schedule() keeps it or
            // queues it there.
            let task = &mut self.tasks[t as usize];
            task.state = TaskState::Running;
            task.exec_start = self.now;
            self.touch_kcpu(k, prev);
            if let Some(g) = self.tasks[t as usize].group {
                self.group_add(k, prev, t, false);
                self.sync_group(k, prev, g, Some(t));
            }
            return;
        }
        if std::mem::take(&mut self.tasks[t as usize].newborn) {
            self.wake_up_new_task(t, waker);
            return;
        }
        let affine = !self.wake_wide(t, waker);
        let target = self.select_cpu(t, waker.filter(|_| affine));
        let half_latency = self.kernels[k as usize].params.latency / 2;
        let (old_min, new_min) = (self.cfs_min_vr(k, prev, t), self.cfs_min_vr(k, target, t));
        let task = &mut self.tasks[t as usize];
        if target != prev {
            task.vr = task.vr.saturating_sub(old_min) + new_min;
        }
        task.vr = task.vr.max(new_min.saturating_sub(half_latency));
        task.woken_at = Some(self.now);
        self.enqueue(k, target, t);
        self.preempt_for(k, target, t, waker);
    }

    /// A thread's creation (Linux 4.15 kernel/sched/core.c `wake_up_new_task`):
    /// - its CPU is the idlest (`select_task_rq` with `SD_BALANCE_FORK` → `find_idlest_group`
    ///   / `find_idlest_cpu`): an idle CPU, the creator's first, else the least loaded; no
    ///   `wake_affine`;
    /// - `task_fork_fair` starts it at its creator's vruntime and `place_entity(initial)` with
    ///   `START_DEBIT` at least one virtual slice past `min_vruntime` (`sched_vslice`, the
    ///   slice it would get with itself queued), so it queues behind the tasks already there
    ///   instead of taking the sleeper's credit a woken task gets;
    /// - then `check_preempt_curr` as for any wake-up.
    ///
    /// (The task groups' share of the slice is left out: the root's is used.)
    fn wake_up_new_task(&mut self, t: TaskId, waker: Option<(KernelId, u32)>) {
        let k = self.tasks[t as usize].kernel;
        let parent = waker.filter(|&(wk, _)| wk == k).and_then(|(_, c)| self.running(k, c));
        let target = match self.tasks[t as usize].pinned {
            Some(p) => p,
            None => {
                let n = self.kernels[k as usize].cpus.len() as u32;
                let from = parent.map_or(self.tasks[t as usize].cpu, |p| self.tasks[p as usize].cpu);
                let order = (0..n).map(|i| (from + i) % n);
                order.clone().find(|&c| self.cpu_idle(k, c)).unwrap_or_else(|| order.min_by_key(|&c| self.cpu_load(k, c)).unwrap_or(from))
            }
        };
        let parent_rel = parent.map_or(0, |p| {
            let pc = self.tasks[p as usize].cpu;
            self.tasks[p as usize].vr.saturating_sub(self.cfs_min_vr(k, pc, p))
        });
        let w = self.tasks[t as usize].weight;
        let kc = &self.kernels[k as usize].cpus[target as usize];
        let nr = kc.rq.len() as u64 + u64::from(self.running(k, target).is_some()) + 1;
        let slice = self.sched_period(k, nr) * w / (self.cpu_load(k, target) + w).max(1);
        let vslice = slice * 1024 / w.max(1);
        let min = self.cfs_min_vr(k, target, t);
        let task = &mut self.tasks[t as usize];
        task.vr = min + parent_rel.max(vslice);
        task.woken_at = Some(self.now);
        self.enqueue(k, target, t);
        self.preempt_for(k, target, t, waker);
    }

    /// `record_wakee`, then `wake_wide` (Linux v4.15 kernel/sched/fair.c, both called by
    /// `select_task_rq_fair` for every wake-up): the task running on the waker's CPU counts a
    /// flip whenever it wakes a different task than the last one (the count halves once a
    /// second, `wakee_flip_decay_ts + HZ`); the wake-up is *wide*, and `wake_affine` is
    /// skipped (the wakee stays with its previous CPU), when the smaller of the waker's and
    /// the wakee's flip counts is at least the LLC domain's size (`sd_llc_size`) and the
    /// larger at least that many times the smaller. In a guest whose vCPUs share no cache
    /// (`sd_llc_size` = 1, one vCPU per socket) any two tasks that both wake others make
    /// every wake-up between them wide. A wake-up from interrupt context (no waker) records
    /// nothing and is not affine anyway.
    fn wake_wide(&mut self, t: TaskId, waker: Option<(KernelId, u32)>) -> bool {
        /// HZ jiffies: `record_wakee` halves the flips once their stamp is a second old.
        const DECAY: u64 = 1_000_000_000;
        let k = self.tasks[t as usize].kernel;
        let Some((_, wcpu)) = waker.filter(|&(wk, _)| wk == k) else { return false };
        let Some(w) = self.kernels[k as usize].cpus[wcpu as usize].curr.filter(|&w| w != t) else { return false };
        let now = self.now;
        let waker_task = &mut self.tasks[w as usize];
        if now.0 > waker_task.wakee_flip_decay.0 + DECAY {
            waker_task.wakee_flips >>= 1;
            waker_task.wakee_flip_decay = now;
        }
        if waker_task.last_wakee != Some(t) {
            waker_task.last_wakee = Some(t);
            waker_task.wakee_flips += 1;
        }
        wide_wakeup(waker_task.wakee_flips, self.tasks[t as usize].wakee_flips, self.kernels[k as usize].llc_size)
    }

    /// `check_preempt_wakeup`: the woken task preempts the current one when, at the first level
    /// of the hierarchy where their entities share a run queue (`find_matching_se`), the
    /// current entity's virtual runtime exceeds the woken one's by more than the woken entity's
    /// wake-up granularity.
    fn wakeup_preempts(&mut self, k: KernelId, cpu: u32, woken: TaskId) -> bool {
        let Some(c) = self.kernels[k as usize].cpus[cpu as usize].curr else { return true };
        if self.nonpreemptible(c) || self.throttled(k, woken) {
            return false;
        }
        self.update_curr(k, cpu);
        let (cg, wg) = (self.tasks[c as usize].group, self.tasks[woken as usize].group);
        if cg.is_some() && cg == wg {
            return self.tasks[c as usize].vr > self.tasks[woken as usize].vr + self.wakeup_gran(woken);
        }
        let (ce, we) = (self.top(c), self.top(woken));
        let gran = match we {
            // The woken task's own granularity (DIS ch.5's per-vCPU latency) scaled by its
            // group entity's weight.
            Ent::Group(g) => {
                let task = &self.tasks[woken as usize];
                let se_w = self.kernels[k as usize].cpus[cpu as usize].groups[g as usize].se_w;
                task.wakeup_gran.unwrap_or(self.kernels[k as usize].params.wakeup_gran) * 1024 / se_w
            }
            Ent::Task(t) => self.wakeup_gran(t),
        };
        self.ent_vr(k, cpu, ce) > self.ent_vr(k, cpu, we) + gran
    }

    /// `wakeup_gran(se)`: the wake-up granularity of task `t` in virtual time (its own, or
    /// its kernel's), scaled by its weight.
    fn wakeup_gran(&self, t: TaskId) -> u64 {
        let task = &self.tasks[t as usize];
        task.wakeup_gran.unwrap_or(self.kernels[task.kernel as usize].params.wakeup_gran) * 1024 / task.weight
    }

    /// Thread `t` (running) left its last kernel spinlock section: a deferred reschedule of its
    /// CPU happens now.
    pub(crate) fn preempt_enable(&mut self, t: ThreadId) {
        let task = &self.tasks[self.threads[t as usize].task as usize];
        let (k, cpu) = (task.kernel, task.cpu);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if std::mem::take(&mut kc.resched_deferred) {
            kc.need_resched = true;
        }
    }

    /// A thread inside a kernel spinlock section cannot be preempted by its kernel.
    pub(crate) fn nonpreemptible(&self, t: TaskId) -> bool {
        match self.tasks[t as usize].kind {
            TaskKind::Thread(th) => self.threads[th as usize].kdepth > 0,
            TaskKind::Vcpu(_) => false,
        }
    }

    /// Asks `cpu` to reschedule: locally, by setting need_resched on a polling CPU, or with a
    /// reschedule IPI from the waker (or an interrupt on the target when there is no waker).
    pub(crate) fn resched_cpu(&mut self, k: KernelId, cpu: u32, waker: Option<(KernelId, u32)>) {
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        if kc.need_resched {
            return;
        }
        kc.need_resched = true;
        let idle_loop_awake = kc.curr.is_none() && kc.idle == IdleState::Awake;
        if waker == Some((k, cpu)) || kc.idle == IdleState::Polling || idle_loop_awake {
            self.touch_kcpu(k, cpu);
        } else if kc.idle == IdleState::Mwait {
            // set_nr_if_polling: the waker's store to the monitored flags, once the work it
            // queued before the wake-up is done, wakes the core from C1.
            let delay = match waker {
                Some((HOST, c)) if c != cpu => self.send_delay(c),
                _ => 0,
            };
            self.q.schedule(self.now + delay, crate::world::Ev::MwaitWake { core: cpu });
        } else if let Some((wk, wcpu)) = waker {
            self.send_ipi(wk, wcpu, cpu, irq::RESCHED);
        } else {
            self.raise_irq(k, cpu, irq::RESCHED);
        }
    }

    /// A core in MWAIT sees the store to its monitored flags: it leaves C1 (exit latency
    /// `c1_exit`) and reschedules.
    pub(crate) fn mwait_wake(&mut self, core: u32) {
        let kc = &mut self.kernels[HOST as usize].cpus[core as usize];
        if kc.idle != IdleState::Mwait {
            return; // already woken (an interrupt came first)
        }
        kc.idle = IdleState::Awake;
        let attr = Attr { owner: 0, layer: Layer::Host, cause: Cause::CStateExit };
        self.push_work(HOST, core, attr, self.costs.c1_exit);
        self.touch(core);
    }

    fn allowed(&self, t: TaskId, cpu: u32) -> bool {
        self.tasks[t as usize].pinned.is_none_or(|p| p == cpu)
    }

    fn cpu_idle(&self, k: KernelId, cpu: u32) -> bool {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        kc.curr.is_none() && kc.nr_queued == 0
    }

    /// The weighted load of a CPU's run queue (current task included): the instantaneous
    /// stand-in for `weighted_cpuload` (the runnable load average) that `wake_affine` compares.
    fn cpu_load(&self, k: KernelId, cpu: u32) -> u64 {
        self.root_load(k, cpu, self.running(k, cpu))
    }

    /// The summed weight of the root run queue's entities of `cpu` (`cfs_rq->load.weight` of
    /// the root), with the entity of `cur` (taken as current) included.
    fn root_load(&self, k: KernelId, cpu: u32, cur: Option<TaskId>) -> u64 {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        let curr = cur.map_or(0, |c| self.ent_weight(k, cpu, self.top(c)));
        curr + kc.rq.iter().map(|&(_, e)| self.ent_weight(k, cpu, e)).sum::<u64>()
    }

    /// `select_task_rq_fair` for a wake-up (Linux v4.15 kernel/sched/fair.c, fast path):
    /// `wake_affine` picks the waker's CPU or the previous one, then `select_idle_sibling`
    /// takes that target if idle, else the previous CPU if idle and in the same LLC, else the
    /// first idle CPU of the target's LLC, else the target. A kernel whose CPUs share no
    /// cache (a guest with one vCPU per socket) never looks beyond the target: a woken thread
    /// can queue behind a busy vCPU while others idle, until load balancing moves it.
    /// A wide wake-up ([`World::wake_wide`]) comes here without a waker: no `wake_affine`, the
    /// previous CPU is the target. Approximations: SMT (`select_idle_core`) is not modelled, the idle
    /// scan is not cut short by `avg_idle`, and loads are instantaneous.
    fn select_cpu(&self, t: TaskId, waker: Option<(KernelId, u32)>) -> u32 {
        let task = &self.tasks[t as usize];
        if let Some(p) = task.pinned {
            return p;
        }
        let k = task.kernel;
        let kern = &self.kernels[k as usize];
        let n = kern.cpus.len() as u32;
        let prev = task.cpu;
        let mut target = prev;
        if let Some(this) = waker.filter(|&(wk, c)| wk == k && c != prev).map(|(_, c)| c) {
            if self.cpu_idle(k, this) && kern.llc[this as usize] == kern.llc[prev as usize] {
                // wake_affine_idle
                target = if self.cpu_idle(k, prev) { prev } else { this };
            } else if 100 * self.cpu_load(k, this) <= 112 * self.cpu_load(k, prev) {
                // wake_affine_weight: imbalance_pct 125 → prev's load counts 112 %.
                target = this;
            }
        }
        if self.cpu_idle(k, target) {
            return target;
        }
        if prev != target && kern.llc[prev as usize] == kern.llc[target as usize] && self.cpu_idle(k, prev) {
            return prev;
        }
        let llc = kern.llc[target as usize];
        (1..n).map(|i| (target + i) % n).find(|&c| kern.llc[c as usize] == llc && self.cpu_idle(k, c)).unwrap_or(target)
    }

    /// `__sched_period(nr)`: the latency, stretched to `nr × min_gran` beyond
    /// `latency / min_gran` entities.
    fn sched_period(&self, k: KernelId, nr: u64) -> u64 {
        let p = &self.kernels[k as usize].params;
        let nr_latency = (p.latency / p.min_gran).max(1);
        if nr > nr_latency {
            nr * p.min_gran
        } else {
            p.latency
        }
    }

    /// `sched_slice` of the current task `t` (Linux 4.15): the period of its own run queue's
    /// entity count, times its weight's share at each level of the hierarchy; at least the
    /// minimum granularity.
    fn sched_slice(&self, k: KernelId, cpu: u32, t: TaskId) -> u64 {
        let p = &self.kernels[k as usize].params;
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        let w = self.tasks[t as usize].weight;
        let slice = match self.tasks[t as usize].group {
            None => self.root_slice(k, cpu, w, t),
            Some(g) => {
                let gr = &kc.groups[g as usize];
                let in_group = self.sched_period(k, u64::from(gr.nr)) * w / gr.load_w.max(1);
                in_group * gr.se_w / self.root_load(k, cpu, Some(t))
            }
        };
        slice.max(p.min_gran)
    }

    /// The slice of group `g`'s entity, current on `cpu`, in the root run queue.
    fn group_slice(&self, k: KernelId, cpu: u32, g: u32, t: TaskId) -> u64 {
        let se_w = self.kernels[k as usize].cpus[cpu as usize].groups[g as usize].se_w;
        self.root_slice(k, cpu, se_w, t).max(self.kernels[k as usize].params.min_gran)
    }

    /// The unfloored slice of a root entity of weight `w` whose task `t` is current on `cpu`:
    /// the period of the root's entity count times `w`'s share of the root's load.
    fn root_slice(&self, k: KernelId, cpu: u32, w: u64, t: TaskId) -> u64 {
        let nr = self.kernels[k as usize].cpus[cpu as usize].rq.len() as u64 + 1;
        self.sched_period(k, nr) * w / self.root_load(k, cpu, Some(t))
    }

    /// Scheduler work of a tick: slice expiry and periodic balancing.
    /// Per level of the hierarchy (`entity_tick` → `check_preempt_tick`, [`preempt_tick`]):
    /// the current entity is preempted once it has run its slice while another entity waits in
    /// its run queue, or has run the minimum granularity and leads the leftmost by a slice.
    /// The current group's weight is brought up to date first (`update_cfs_group`).
    pub(crate) fn tick_sched(&mut self, k: KernelId, cpu: u32) {
        if let Some(g) = self.running(k, cpu).and_then(|c| self.tasks[c as usize].group) {
            self.pelt_advance(k, cpu, g);
            self.update_group_weight(k, cpu, g);
        }
        self.update_curr(k, cpu);
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        if let Some(c) = kc.curr.filter(|&c| !self.nonpreemptible(c)) {
            let min_gran = self.kernels[k as usize].params.min_gran;
            let task = &self.tasks[c as usize];
            let ran = task.sum_exec - task.prev_sum_exec;
            let root_left = kc.rq.first().map(|&(v, _)| v);
            let expired = match task.group {
                None => root_left.is_some_and(|l| preempt_tick(ran, self.sched_slice(k, cpu, c), task.vr, l, min_gran)),
                Some(g) => {
                    let gr = &kc.groups[g as usize];
                    let group_left = gr.rq.first().map(|&(v, _)| v);
                    group_left.is_some_and(|l| preempt_tick(ran, self.sched_slice(k, cpu, c), task.vr, l, min_gran))
                        || root_left.is_some_and(|l| {
                            preempt_tick(gr.sum_exec - gr.prev_sum_exec, self.group_slice(k, cpu, g, c), gr.se_vr, l, min_gran)
                        })
                }
            };
            if expired {
                self.kernels[k as usize].cpus[cpu as usize].need_resched = true;
            }
        }
        let balance_ticks = self.kernels[k as usize].params.balance_ticks;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        kc.ticks_since_balance += 1;
        if kc.ticks_since_balance >= balance_ticks {
            kc.ticks_since_balance = 0;
            self.refresh_group_loads(k, cpu);
            self.push_to_idle(k, cpu);
        }
        self.busy_balance(k, cpu);
    }

    /// Periodic load balancing of a busy CPU (`rebalance_domains` → `load_balance`, Linux
    /// v4.15 kernel/sched/fair.c): at each domain's busy interval the CPU pulls a queued task
    /// from the busiest CPU of the domain when their run queues differ by two tasks or more,
    /// so CPU-bound tasks end up spread evenly (e.g. 3-1 becomes 2-2) instead of sharing
    /// unequally for the rest of the run. Domains: the CPU's last-level cache, then all its
    /// kernel's CPUs. A domain of `w` CPUs balances every `w` ms (`sd_init`, kernel/sched/
    /// topology.c: `balance_interval = sd_weight` ms) times `busy_factor` = 32 while the CPU is
    /// busy, counted in this CPU's busy ticks. Approximations: the load is the run queue's
    /// task count (equal weights), the cache-hot check (`task_hot`, 500 µs) and the
    /// `imbalance_pct` margins are not modelled, and the moved task is the last queued one.
    fn busy_balance(&mut self, k: KernelId, cpu: u32) {
        /// `sd->busy_factor` (Linux v4.15 kernel/sched/topology.c `sd_init`).
        const BUSY_FACTOR: u64 = 32;
        let kern = &self.kernels[k as usize];
        if kern.cpus[cpu as usize].curr.is_none() {
            return;
        }
        let n = kern.cpus.len() as u32;
        let llc = kern.llc[cpu as usize];
        let llc_weight = kern.llc.iter().filter(|&&l| l == llc).count() as u64;
        let tick_ms = (kern.params.tick_ns / 1_000_000).max(1);
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        kc.busy_ticks += 1;
        let busy = kc.busy_ticks;
        // The lowest domain first, as rebalance_domains walks them.
        for (weight, whole) in [(llc_weight, false), (u64::from(n), true)] {
            if weight < 2 || (whole && weight == llc_weight) {
                continue;
            }
            let interval = (weight * BUSY_FACTOR / tick_ms).max(1);
            if busy.is_multiple_of(interval) && self.pull_from_busiest(k, cpu, whole) {
                return;
            }
        }
    }

    /// `load_balance` at one domain: pulls one queued task from the CPU of the domain with
    /// the most runnable tasks if it has at least two more than this one. Returns whether a
    /// task moved.
    fn pull_from_busiest(&mut self, k: KernelId, cpu: u32, whole: bool) -> bool {
        let kern = &self.kernels[k as usize];
        let n = kern.cpus.len() as u32;
        let llc = kern.llc[cpu as usize];
        let local = kern.cpus[cpu as usize].nr_running();
        let mut best: Option<(usize, u32, TaskId)> = None;
        for c in (1..n).map(|i| (cpu + i) % n) {
            if !whole && kern.llc[c as usize] != llc {
                continue;
            }
            let src = &kern.cpus[c as usize];
            let nr = src.nr_running();
            if nr < local + 2 || best.is_some_and(|(len, _, _)| nr <= len) {
                continue;
            }
            if let Some(t) = self.find_queued_rev(k, c, |t| self.allowed(t, cpu)) {
                best = Some((nr, c, t));
            }
        }
        let Some((_, src, t)) = best else { return false };
        self.migrate(k, t, src, cpu);
        true
    }

    /// Newidle balance (`idle_balance`, Linux v4.15 kernel/sched/fair.c): an idle CPU pulls a
    /// queued task from the busiest CPU. Skipped, as Linux does, while the CPU's average idle
    /// period is shorter than the migration cost (`avg_idle < sysctl_sched_migration_cost`)
    /// and when no CPU is overloaded (`rd->overload`: no run queue holds more than one
    /// runnable task), so a task just woken onto a CPU that is still waking up (a halted
    /// vCPU) stays there.
    pub(crate) fn idle_balance(&mut self, k: KernelId, cpu: u32) -> bool {
        let n = self.kernels[k as usize].cpus.len() as u32;
        let now = self.now;
        let kc = &mut self.kernels[k as usize].cpus[cpu as usize];
        kc.idle_stamp.get_or_insert(now);
        if kc.avg_idle < MIGRATION_COST {
            return false;
        }
        let mut best: Option<(usize, u32, TaskId)> = None;
        for c in (1..n).map(|i| (cpu + i) % n) {
            let src = &self.kernels[k as usize].cpus[c as usize];
            let queued = src.nr_queued;
            if src.nr_running() < 2 {
                continue;
            }
            let movable = self.find_queued_rev(k, c, |t| self.allowed(t, cpu));
            if let Some(t) = movable {
                if best.is_none_or(|(len, _, _)| queued > len) {
                    best = Some((queued, c, t));
                }
            }
        }
        let Some((_, src, t)) = best else { return false };
        self.migrate(k, t, src, cpu);
        self.kernels[k as usize].cpus[cpu as usize].need_resched = true;
        true
    }

    /// Periodic balance of a busy CPU: hand queued tasks to idle CPUs (nohz idle balance).
    /// With task groups, the balancer kicked by an overloaded CPU (`nohz_balancer_kick` at
    /// `nr_running >= 2`) also brings the idle CPUs' blocked group loads up to date
    /// (`nohz_idle_balance` → `rebalance_domains` → `update_blocked_averages`), once per tick.
    fn push_to_idle(&mut self, k: KernelId, cpu: u32) {
        let n = self.kernels[k as usize].cpus.len() as u32;
        let kern = &self.kernels[k as usize];
        if !kern.groups.is_empty() && kern.cpus[cpu as usize].nr_running() >= 2 && kern.last_ilb < self.now {
            self.kernels[k as usize].last_ilb = self.now;
            for c in 0..n {
                if self.cpu_idle(k, c) {
                    self.refresh_group_loads(k, c);
                }
            }
        }
        loop {
            let queued = self.queued_tasks_rev(k, cpu);
            let mut moved = false;
            for t in queued {
                let dst = (1..n).map(|i| (cpu + i) % n).find(|&c| self.cpu_idle(k, c) && self.allowed(t, c));
                if let Some(dst) = dst {
                    self.migrate(k, t, cpu, dst);
                    self.resched_cpu(k, dst, Some((k, cpu)));
                    moved = true;
                    break;
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Re-pins task `t` to CPU `to` (`sched_setaffinity`): a queued task moves to `to`'s
    /// queue now; a running one is moved when its CPU reschedules, which is asked for now; a
    /// blocked one wakes up on `to`.
    pub(crate) fn set_affinity(&mut self, t: TaskId, to: u32) {
        let (k, from, state) = (self.tasks[t as usize].kernel, self.tasks[t as usize].cpu, self.tasks[t as usize].state);
        self.tasks[t as usize].pinned = Some(to);
        if from == to {
            return;
        }
        match state {
            TaskState::Queued if self.tasks[t as usize].bw.throttled => self.move_throttled(k, t, from),
            TaskState::Queued => {
                self.touch_kcpu(k, from);
                self.migrate(k, t, from, to);
                self.preempt_for(k, to, t, None);
            }
            TaskState::Running => self.resched_cpu(k, from, None),
            TaskState::Blocked | TaskState::Done => {}
        }
    }

    /// Moves a task throttled at its own level (in no tree) from CPU `from` to the CPU it is
    /// pinned to, where it will be enqueued when unthrottled.
    fn move_throttled(&mut self, k: KernelId, t: TaskId, from: u32) {
        let to = self.tasks[t as usize].pinned.expect("only a pinned task can be disallowed");
        let (fm, tm) = (self.cfs_min_vr(k, from, t), self.cfs_min_vr(k, to, t));
        let task = &mut self.tasks[t as usize];
        task.vr = task.vr.saturating_sub(fm) + tm;
        task.cpu = to;
    }

    /// Queues the runnable task `t`, just switched out of CPU `from` that it may no longer
    /// use, on the CPU it is pinned to.
    fn send_to_affine(&mut self, k: KernelId, t: TaskId, from: u32) {
        let to = self.tasks[t as usize].pinned.expect("only a pinned task can be disallowed");
        let (fm, tm) = (self.cfs_min_vr(k, from, t), self.cfs_min_vr(k, to, t));
        let task = &mut self.tasks[t as usize];
        task.vr = task.vr.saturating_sub(fm) + tm;
        self.enqueue(k, to, t);
        self.preempt_for(k, to, t, Some((k, from)));
    }

    /// Reschedules `cpu` if the task `t` just queued there should run now (idle CPU, or
    /// wake-up preemption of the current task).
    fn preempt_for(&mut self, k: KernelId, cpu: u32, t: TaskId, waker: Option<(KernelId, u32)>) {
        if self.kernels[k as usize].cpus[cpu as usize].curr.is_none() || self.wakeup_preempts(k, cpu, t) {
            self.resched_cpu(k, cpu, waker);
        } else if let Some((wk, wcpu)) = waker.filter(|&(wk, c)| wk == k && c != cpu) {
            // ttwu_queue: a waker that shares no cache with the target queues the task on the
            // target's wake list and interrupts it (Linux v3.16–v4.15 kernel/sched/core.c
            // `ttwu_queue_remote`), even when the wake-up does not preempt.
            if self.kernels[k as usize].llc[wcpu as usize] != self.kernels[k as usize].llc[cpu as usize] {
                self.send_ipi(wk, wcpu, cpu, irq::WAKE_LIST);
            }
        }
    }

    /// The first queued task of `cpu` that `ok` accepts, last first: the root run queue's from
    /// its right end, a group entity standing for its group's queued tasks (also right to
    /// left), then the queued tasks of the current task's group (whose entity is not in the
    /// tree).
    fn find_queued_rev(&self, k: KernelId, cpu: u32, mut ok: impl FnMut(TaskId) -> bool) -> Option<TaskId> {
        let kc = &self.kernels[k as usize].cpus[cpu as usize];
        let in_group = |g: u32| kc.groups[g as usize].rq.iter().rev().map(|&(_, t)| t);
        for &(_, e) in kc.rq.iter().rev() {
            let found = match e {
                Ent::Task(t) => Some(t).filter(|&t| ok(t)),
                Ent::Group(g) => in_group(g).find(|&t| ok(t)),
            };
            if found.is_some() {
                return found;
            }
        }
        let curr_group = kc
            .curr
            .and_then(|c| self.tasks[c as usize].group)
            .filter(|&g| !kc.groups[g as usize].queued && !kc.groups[g as usize].bw.throttled);
        curr_group.and_then(|g| in_group(g).find(|&t| ok(t)))
    }

    /// Every queued task of `cpu`, in [`World::find_queued_rev`]'s order.
    fn queued_tasks_rev(&self, k: KernelId, cpu: u32) -> Vec<TaskId> {
        let mut out = Vec::with_capacity(self.kernels[k as usize].cpus[cpu as usize].nr_queued);
        self.find_queued_rev(k, cpu, |t| {
            out.push(t);
            false
        });
        out
    }

    fn migrate(&mut self, k: KernelId, t: TaskId, from: u32, to: u32) {
        self.detach(k, from, t);
        let (fm, tm) = (self.cfs_min_vr(k, from, t), self.cfs_min_vr(k, to, t));
        let task = &mut self.tasks[t as usize];
        task.vr = task.vr.saturating_sub(fm) + tm;
        self.enqueue(k, to, t);
    }

    /// Queues overhead on a CPU (no-op for zero cost).
    pub(crate) fn push_work(&mut self, k: KernelId, cpu: u32, attr: Attr, cost: u64) {
        if cost == 0 {
            return;
        }
        self.touch_kcpu(k, cpu);
        self.kernels[k as usize].cpus[cpu as usize].kwork.push_back(Work { attr, rem: cost, then: None });
    }

    /// Time until the work queued on `core` right now is done: the host's queue, then the
    /// guest's of the vCPU current there. An interrupt a CPU sends leaves only when the work
    /// before it is done (the sender's exit handling, `try_to_wake_up`, the ICR write), so
    /// the waker's side of a wake-up lies on the wakee's critical path.
    pub(crate) fn send_delay(&mut self, core: u32) -> u64 {
        self.touch(core);
        let hc = &self.kernels[0].cpus[core as usize];
        let host: u64 = hc.kwork.iter().map(|w| w.rem).sum();
        let guest = match hc.curr.map(|t| self.tasks[t as usize].kind) {
            Some(TaskKind::Vcpu(v)) => {
                let (k, cpu) = (self.vcpus[v as usize].kernel, self.vcpus[v as usize].idx);
                self.kernels[k as usize].cpus[cpu as usize].kwork.iter().map(|w| w.rem).sum()
            }
            _ => 0,
        };
        host + guest
    }

    /// Queues overhead on a CPU followed by an action when it completes.
    pub(crate) fn push_work_then(&mut self, k: KernelId, cpu: u32, attr: Attr, cost: u64, then: super::Then) {
        self.touch_kcpu(k, cpu);
        self.kernels[k as usize].cpus[cpu as usize].kwork.push_back(Work { attr, rem: cost.max(1), then: Some(then) });
    }
}

/// `check_preempt_tick` (Linux v4.15 kernel/sched/fair.c) at one level: the current entity,
/// having run `ran` since it was picked, is preempted once that exceeds its slice `ideal`, or,
/// after at least the minimum granularity, once its virtual runtime leads the leftmost queued
/// entity's (`left_vr`) by more than `ideal`.
fn preempt_tick(ran: u64, ideal: u64, curr_vr: u64, left_vr: u64, min_gran: u64) -> bool {
    ran > ideal || (ran >= min_gran && curr_vr > left_vr.saturating_add(ideal))
}

/// The smaller of two optional values.
fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// CFS `pick_next_entity` at one level of the hierarchy (Linux 4.15 kernel/sched/fair.c): among
/// the two leftmost queued entities (`tree`, by vruntime) and the still-runnable current one
/// (`prev`, which wins ties), the leftmost, unless it is the `skip` buddy and the second is
/// within its own wake-up granularity of it; a runnable `next` buddy within its granularity of
/// the leftmost wins.
fn pick_entity<E: Copy + PartialEq>(
    tree: &[Option<(u64, E)>; 2],
    prev: Option<(u64, E)>,
    skip: Option<E>,
    next: Option<(u64, E)>,
    gran: impl Fn(E) -> u64,
) -> Option<E> {
    let [q1, q2] = *tree;
    let before_prev = |q: Option<(u64, E)>| q.filter(|&(v, _)| prev.is_none_or(|(pv, _)| v < pv));
    let (left, second) = match (before_prev(q1), prev) {
        (Some(a), Some(p)) => (a, Some(before_prev(q2).unwrap_or(p))),
        (_, Some(p)) => (p, q1),
        (a, None) => (a?, q2),
    };
    let gran_ok = |(v, e): (u64, E)| v <= left.0.saturating_add(gran(e));
    let mut se = left;
    if skip == Some(left.1) {
        if let Some(second) = second.filter(|&s| gran_ok(s)) {
            se = second;
        }
    }
    if let Some(n) = next.filter(|&n| gran_ok(n)) {
        se = n;
    }
    Some(se.1)
}

/// `wake_wide`'s test (Linux v4.15 kernel/sched/fair.c) on the waker's and the wakee's flip
/// counts and the LLC domain's size: wide when the smaller count is at least `llc_size` and
/// the larger at least `llc_size` times the smaller.
pub(crate) fn wide_wakeup(waker_flips: u32, wakee_flips: u32, llc_size: u32) -> bool {
    let factor = llc_size.max(1);
    let (master, slave) = (waker_flips.max(wakee_flips), waker_flips.min(wakee_flips));
    !(slave < factor || master < slave.saturating_mul(factor))
}

#[cfg(test)]
mod tests {
    use super::wide_wakeup;

    #[test]
    fn one_cpu_caches_make_every_flipping_pair_wide() {
        // sd_llc_size = 1 (a guest with one vCPU per socket): any two tasks that both wake others.
        assert!(wide_wakeup(1, 1, 1));
        assert!(wide_wakeup(7, 300, 1));
        assert!(!wide_wakeup(0, 5, 1), "a wakee that wakes nobody is woken affine");
        assert!(!wide_wakeup(5, 0, 1));
    }

    #[test]
    fn a_socket_needs_a_waker_of_many() {
        // A 20-core socket: the smaller count must reach 20 and the larger 20 times it.
        assert!(!wide_wakeup(19, 400, 20), "wakee below the socket size");
        assert!(!wide_wakeup(399, 20, 20), "waker not 20 times the wakee");
        assert!(wide_wakeup(400, 20, 20));
        assert!(wide_wakeup(20, 400, 20), "master and slave are whichever is larger");
    }
}
