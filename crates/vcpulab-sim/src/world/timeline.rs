//! The world's side of the timeline ([`crate::account::Timeline`]): attaching it, and the
//! hooks that feed it. Every hook is called behind `if self.timeline.is_some()`, and reads the
//! world without changing it, so a run records the same simulation it would run without.

use crate::account::timeline::{Instant, Label, Names, OffCore, Shape};
use crate::account::{Timeline, TimelineOptions};
use crate::engine::SimTime;
use crate::kernel::tlb::CallKind;
use crate::kernel::{KernelId, ThreadId, HOST};
use crate::virt::exit::ExitReason;
use crate::virt::vcpu::ipi_kind;

use super::World;

impl World<'_> {
    /// Records a timeline of this run (call before [`World::run`]).
    pub fn enable_timeline(&mut self, opts: TimelineOptions) {
        let mut threads = vec![(0, 0); self.threads.len()];
        for (i, inst) in self.insts.iter().enumerate() {
            for (j, &t) in inst.threads.iter().enumerate() {
                threads[t as usize] = (i as u32, j as u32);
            }
        }
        let names = Names { owners: self.owners.clone(), threads, instances: self.insts.iter().map(|i| i.name.clone()).collect() };
        let shape = Shape {
            cores: self.cores.len() as u32,
            vms: self.vms.iter().map(|vm| vm.vcpus.iter().map(|&v| self.vcpus[v as usize].owner).collect()).collect(),
            host_instances: self
                .insts
                .iter()
                .enumerate()
                .filter(|(_, i)| i.kernel == HOST)
                .map(|(n, i)| (n as u32, i.threads.clone()))
                .collect(),
        };
        self.timeline = Some(Box::new(Timeline::new(opts, names, &shape)));
    }

    /// The timeline of a run that ended at `end` (None if none was enabled).
    pub fn take_timeline(&mut self, end: SimTime) -> Option<Timeline> {
        let mut tl = self.timeline.take()?;
        tl.finish(end.ns());
        Some(*tl)
    }

    /// The timeline of a run that failed (a run limit, a deadlock) at the current virtual
    /// time: every core's interval so far is closed first, so the tracks reach the failure.
    /// None if none was enabled.
    pub fn take_partial_timeline(&mut self) -> Option<Timeline> {
        self.timeline.as_ref()?;
        for c in 0..self.cores.len() {
            self.sync(c);
        }
        self.take_timeline(self.now)
    }

    /// `core` executed its leaf for the last `elapsed` ns: a slice on its pCPU track, on its
    /// vCPU's track while that vCPU is current there, and on its thread's track (host-kernel
    /// threads).
    #[cold]
    #[inline(never)]
    pub(super) fn tl_interval(&mut self, core: usize, elapsed: u64) {
        let leaf = self.cores[core].leaf;
        let start = SimTime(self.now.ns() - elapsed);
        let Some(tl) = self.timeline.as_deref() else { return };
        let vcpu = tl.owner_vcpu[leaf.attr.owner as usize].filter(|&v| self.vcpu_core(v) == Some(core as u32));
        let vtrack = vcpu.map(|v| tl.vcpu_track[v as usize]);
        let ttrack = leaf.thread.and_then(|t| tl.thread_track[t as usize]);
        let (start, now) = (start.ns(), self.now.ns());
        let label = Label::Leaf(leaf.attr, leaf.thread);
        let tl = self.timeline.as_deref_mut().expect("checked");
        tl.slice(core as u32, start, now, label, now);
        if let Some(t) = vtrack {
            tl.slice(t, start, now, label, now);
        }
        if let Some(t) = ttrack {
            tl.slice(t, start, now, label, now);
        }
    }

    /// The track of CPU `cpu` of kernel `k`: a pCPU for the host, else its vCPU.
    fn tl_track(&self, k: KernelId, cpu: u32) -> u32 {
        if k == HOST {
            cpu
        } else {
            self.timeline.as_deref().expect("timeline on").vcpu_track[self.vcpu_of(k, cpu) as usize]
        }
    }

    /// A point event on vCPU `v`'s track.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_vcpu_instant(&mut self, v: u32, what: Instant) {
        let now = self.now.ns();
        if let Some(tl) = self.timeline.as_deref_mut() {
            let track = tl.vcpu_track[v as usize];
            tl.instant(track, now, what);
        }
    }

    /// vCPU `v` exited for `reason`, with `cost` ns of host work on `core`.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_exit(&mut self, v: u32, reason: ExitReason, cost: u64, core: u32) {
        self.tl_vcpu_instant(v, Instant::Exit { reason, cost_ns: cost, pcpu: core });
    }

    /// vCPU `v` left its core: preempted (`runnable`) or halted.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_vcpu_off(&mut self, v: u32, runnable: bool) {
        let now = self.now.ns();
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.vcpu_off(v, if runnable { OffCore::Preempted } else { OffCore::Halted }, now);
        }
    }

    /// vCPU `v` is on a core again.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_vcpu_on(&mut self, v: u32) {
        let now = self.now.ns();
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.vcpu_on(v, now);
        }
    }

    /// vCPU `v`'s blocked thread was woken.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_vcpu_woken(&mut self, v: u32) {
        let now = self.now.ns();
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.vcpu_woken(v, now);
        }
    }

    /// An IPI (irq bit `bit`, counted as [`ipi_kind`] `ki`) from CPU `from` to CPU `to` of
    /// kernel `k`, arriving at `arrival`.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_ipi_send(&mut self, k: KernelId, from: u32, to: u32, bit: u8, ki: usize, arrival: SimTime) {
        let (track, now) = (self.tl_track(k, from), self.now.ns());
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.ipi_send(track, now, k, from, to, bit, ipi_kind::NAMES[ki], arrival.ns());
        }
    }

    /// An IPI (irq bit `bit`) reaches CPU `cpu` of kernel `k` now.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_ipi_recv(&mut self, k: KernelId, cpu: u32, bit: u8) {
        let (track, now) = (self.tl_track(k, cpu), self.now.ns());
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.ipi_recv(track, now, k, cpu, bit);
        }
    }

    /// A remote call starts from CPU `cpu` of kernel `k` to `targets`.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_call_start(
        &mut self,
        k: KernelId,
        cpu: u32,
        kind: CallKind,
        targets: &[u32],
        policy: &'static str,
        pages: u64,
        deferred: u64,
    ) {
        let (track, now) = (self.tl_track(k, cpu), self.now.ns());
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.instant(track, now, Instant::CallStart { kind, targets: targets.into(), policy, pages, deferred });
        }
    }

    /// The remote call thread `t` waited for completed after `latency` ns.
    #[cold]
    #[inline(never)]
    pub(crate) fn tl_call_done(&mut self, t: ThreadId, kind: CallKind, latency: u64) {
        let task = &self.tasks[self.threads[t as usize].task as usize];
        let (track, now) = (self.tl_track(task.kernel, task.cpu), self.now.ns());
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.instant(track, now, Instant::CallDone { kind, latency_ns: latency });
        }
    }
}
