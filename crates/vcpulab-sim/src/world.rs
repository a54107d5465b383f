//! The simulated world: every entity of one run, the event loop, and the per-core ledger
//! bookkeeping that keeps time conserved.
//!
//! ```text
//!   core c ── host kernel CPU c ── curr task ─┬─ native thread ─ its operation (leaf)
//!                                              └─ vCPU thread ── guest kernel CPU ── curr thread ─ op (leaf)
//! ```
//!
//! At any instant each core executes exactly one *leaf* (a piece of host overhead, a vCPU's
//! guest-kernel overhead, a thread's computation or spin, or idle), found by walking that
//! chain ([`World::step_core`]). The leaf's interval is charged to the ledger when anything on
//! the chain changes: every mutation first *touches* the core, which closes the interval
//! (charging it and decrementing the leaf's remaining time) and marks the core dirty; after
//! each event, dirty cores are resolved to their new leaf and their segment-end event is
//! re-armed. Conservation (attributed time = cores × duration) therefore holds by
//! construction, and tests check it.

pub mod build;
pub mod memory;
pub mod record;
pub mod timeline;

use std::collections::VecDeque;

use crate::account::{Attr, Cause, Layer, Ledger, OwnerKind};
use crate::engine::{EventQueue, SimTime};
use crate::kernel::sync::Instance;
use crate::kernel::thread::Thread;
use crate::kernel::{Kernel, KernelId, Task, ThreadId};
use crate::machine::Costs;
use crate::virt::vcpu::{Vcpu, Vm};

/// Why a run stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// The run reached `limits.max_virtual_time`, `limits.max_events` or `limits.max_steps`.
    Limit(String),
    /// Nothing can ever happen again but threads have not finished.
    Deadlock(String),
    /// The workload did something impossible (e.g. unlocked a mutex it does not hold).
    Workload(String),
    /// The caller asked the run to stop (e.g. Ctrl-C).
    Interrupted,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Limit(m) => write!(f, "run limit reached: {m}"),
            RunError::Deadlock(m) => write!(f, "deadlock: {m}"),
            RunError::Workload(m) => write!(f, "workload error: {m}"),
            RunError::Interrupted => write!(f, "interrupted"),
        }
    }
}

/// Events of the simulation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ev {
    /// The leaf installed on `core` with generation `gen` reaches its end (the core's queue
    /// slot: re-resolving the core replaces it, so it is always the current leaf's).
    LeafEnd { core: u32, gen: u32 },
    /// The local timer of a kernel CPU fires (if `gen` is still current).
    Timer { k: KernelId, cpu: u32, gen: u32 },
    /// An IPI reaches a kernel CPU.
    Ipi { k: KernelId, cpu: u32, kind: u8 },
    /// A waker's store to the monitored flags of a core in MWAIT lands (`set_nr_if_polling`):
    /// the core leaves C1.
    MwaitWake { core: u32 },
    /// An allocation period ends ([`crate::virt::allocation`]).
    Period,
    /// The numad-like balancer scans the VMs ([`crate::policy::numad`]).
    Numad,
    /// The period timer of host bandwidth pool `b` ([`crate::kernel::bandwidth`]).
    BwPeriod { b: u32 },
    /// The slack timer of host bandwidth pool `b`, armed as generation `gen`.
    BwSlack { b: u32, gen: u32 },
}

/// How much of a leaf remains, and where that count lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rem {
    /// Until something else happens.
    Inf,
    /// The front of the host CPU's work queue of this core.
    HostWork,
    /// The front of a guest CPU's work queue.
    GuestWork(KernelId, u32),
    /// A thread's current computation.
    Compute(ThreadId),
    /// The PLE window (or PV spinlock threshold) of a thread spinning in a guest kernel.
    SpinWindow(ThreadId),
    /// The spin budget of a thread in a spin-then-block wait.
    SpinBudget(ThreadId),
    /// The halt-poll window of a halting vCPU.
    HaltPoll(u32),
    /// The poll time left of a guest CPU in the haltpoll governor's poll state.
    GuestPoll(KernelId, u32),
}

/// What a core executes now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Leaf {
    pub(crate) attr: Attr,
    pub(crate) rem: Rem,
    pub(crate) thread: Option<ThreadId>,
}

/// Result of one resolution step.
pub(crate) enum Step {
    /// The core executes this leaf until its end or the next touch.
    Leaf(Leaf),
    /// State changed; walk the chain again.
    Again,
}

#[derive(Debug)]
pub(crate) struct Core {
    leaf: Leaf,
    since: SimTime,
    gen: u32,
    /// A PLE exit on this core not yet followed by a guest entry: (VM, time of the exit).
    pub(crate) ple_switch_from: Option<(u32, SimTime)>,
}

/// Limits of one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_time: SimTime,
    pub(crate) max_events: u64,
    pub(crate) max_steps: u64,
}

/// Every entity of one run.
#[derive(Debug)]
pub struct World<'i> {
    pub(crate) now: SimTime,
    pub(crate) q: EventQueue<Ev>,
    pub(crate) costs: Costs,
    pub(crate) cores: Vec<Core>,
    pub(crate) kernels: Vec<Kernel>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) threads: Vec<Thread>,
    pub(crate) vcpus: Vec<Vcpu>,
    pub(crate) vms: Vec<Vm>,
    pub(crate) insts: Vec<Instance>,
    pub(crate) owners: Vec<OwnerKind>,
    pub(crate) ledger: Ledger,
    pub(crate) limits: Limits,
    dirty: Vec<bool>,
    worklist: VecDeque<u32>,
    /// Instances not finished yet.
    pub(crate) live: u32,
    /// First error raised inside an event (a workload error, the step limit, an interrupt):
    /// ends the run.
    pub(crate) fault: Option<RunError>,
    /// Program steps interpreted (workload instructions, every thread).
    pub(crate) steps: u64,
    /// Asked every [`CHECK_EVERY`] program steps (and events) whether to stop: a run of
    /// steps that take no virtual time makes no events, and must stay interruptible.
    pub(crate) interrupt: Option<Interrupt<'i>>,
    /// Events processed.
    pub(crate) events: u64,
    /// Remote calls in progress: TLB shootdowns and membarriers (slab; freed ids in
    /// `free_remote_calls`).
    pub(crate) remote_calls: Vec<crate::kernel::tlb::RemoteCall>,
    pub(crate) free_remote_calls: Vec<u32>,
    /// Keep every shootdown latency.
    pub(crate) record_tlb_samples: bool,
    /// Record each VM's PLE window over time, in intervals of this many ns.
    pub(crate) record_ple_window: Option<u64>,
    /// Core clock (GHz), for cycle counts such as the PLE window.
    pub(crate) freq_ghz: f64,
    /// Keep the wait chains (`[record] wait_chains`).
    pub(crate) record_wait_chains: bool,
    /// Who made busy-waiting threads wait ([`crate::kernel::waits`]).
    pub(crate) waits: crate::kernel::waits::WaitChains,
    /// The timeline being recorded, if any (`vcpulab run --timeline`; [`World::enable_timeline`]).
    pub(crate) timeline: Option<Box<crate::account::Timeline>>,
    /// The allocation-period clock and the asymmetric-vCPU policy (runs with VMs).
    pub(crate) periods: Option<crate::virt::allocation::Periods>,
    /// The memory model ([`memory`]); None when `machine.memory.model` is off.
    pub(crate) mem: Option<Box<memory::MemState>>,
    /// The numad-like balancer, when `[host.numad]` is on.
    pub(crate) numad: Option<crate::policy::numad::Numad>,
}

/// The caller's "should the run stop?" callback.
pub(crate) struct Interrupt<'i>(&'i mut dyn FnMut() -> bool);

impl std::fmt::Debug for Interrupt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt")
    }
}

/// How often (in events, and in program steps) a run asks its caller whether to stop.
pub const CHECK_EVERY: u64 = 1 << 16;

const IDLE_ATTR: Attr = Attr { owner: 0, layer: Layer::Host, cause: Cause::Idle };

impl<'i> World<'i> {
    /// Runs until every instance finished; returns the end time.
    pub fn run(&mut self) -> Result<SimTime, RunError> {
        self.run_loop()
    }

    /// Like [`World::run`], calling `interrupted` every [`CHECK_EVERY`] events; the run
    /// stops with [`RunError::Interrupted`] when it returns true.
    pub fn run_checked(&mut self, interrupted: &'i mut dyn FnMut() -> bool) -> Result<SimTime, RunError> {
        self.interrupt = Some(Interrupt(interrupted));
        let r = self.run_loop();
        self.interrupt = None;
        r
    }

    fn run_loop(&mut self) -> Result<SimTime, RunError> {
        for c in 0..self.cores.len() as u32 {
            self.touch(c);
        }
        self.drain()?;
        while self.live > 0 {
            let Some((t, ev)) = self.q.pop() else {
                return Err(RunError::Deadlock(format!(
                    "at {} every unfinished thread is blocked and no event is pending ({})",
                    self.now,
                    self.describe_threads()
                )));
            };
            if t > self.limits.max_time {
                // The cores ran their leaves up to the limit (a partial timeline ends there).
                self.now = self.now.max(self.limits.max_time);
                return Err(RunError::Limit(format!(
                    "virtual time passed {} (limits.max_virtual_time) with {} of {} instances unfinished ({})",
                    self.limits.max_time,
                    self.live,
                    self.insts.len(),
                    self.describe_threads()
                )));
            }
            self.events += 1;
            if self.events.is_multiple_of(CHECK_EVERY) && self.interrupted() {
                return Err(RunError::Interrupted);
            }
            if self.events > self.limits.max_events {
                self.now = t;
                return Err(RunError::Limit(format!(
                    "more than {} events (limits.max_events) at virtual time {} ({})",
                    self.limits.max_events,
                    t,
                    self.describe_threads()
                )));
            }
            debug_assert!(t >= self.now, "time went backwards");
            self.now = t;
            match ev {
                Ev::LeafEnd { core, gen } => {
                    debug_assert_eq!(self.cores[core as usize].gen, gen, "a core's slot holds its current leaf's end");
                    self.touch(core);
                }
                Ev::Timer { k, cpu, gen } => self.timer_event(k, cpu, gen),
                Ev::Ipi { k, cpu, kind } => {
                    if self.timeline.is_some() {
                        self.tl_ipi_recv(k, cpu, kind);
                    }
                    self.raise_irq(k, cpu, kind)
                }
                Ev::MwaitWake { core } => self.mwait_wake(core),
                Ev::Period => self.period_end(),
                Ev::Numad => self.numad_scan(),
                Ev::BwPeriod { b } => self.bw_period(b),
                Ev::BwSlack { b, gen } => self.bw_slack(b, gen),
            }
            self.drain()?;
        }
        for c in 0..self.cores.len() {
            self.sync(c);
        }
        Ok(self.now)
    }

    /// Closes the current interval of `core` and marks it for re-resolution.
    #[inline]
    pub(crate) fn touch(&mut self, core: u32) {
        self.sync(core as usize);
        if !self.dirty[core as usize] {
            self.dirty[core as usize] = true;
            self.worklist.push_back(core);
        }
    }

    /// Charges the elapsed part of `core`'s leaf.
    fn sync(&mut self, core: usize) {
        let c = &mut self.cores[core];
        let elapsed = self.now.since(c.since);
        if elapsed == 0 {
            return;
        }
        c.since = self.now;
        let leaf = c.leaf;
        if let Rem::Compute(t) = leaf.rem {
            // Computation progresses at its memory stretch; the time beyond the work done is
            // the memory's (remote, saturated or shared data).
            let work = self.mem_progress(core, elapsed, self.threads[t as usize].compute_rem);
            self.threads[t as usize].compute_rem -= work;
            let stall = elapsed - work.min(elapsed);
            self.ledger.add(core, leaf.attr, elapsed - stall);
            if stall > 0 {
                self.ledger.add(core, Attr { cause: Cause::MemoryStall, ..leaf.attr }, stall);
            }
        } else {
            self.ledger.add(core, leaf.attr, elapsed);
        }
        match leaf.rem {
            Rem::Inf => {}
            Rem::HostWork => {
                let w = self.kernels[0].cpus[core].kwork.front_mut().expect("host work leaf");
                w.rem -= elapsed;
            }
            Rem::GuestWork(k, cpu) => {
                let w = self.kernels[k as usize].cpus[cpu as usize].kwork.front_mut().expect("guest work leaf");
                w.rem -= elapsed;
            }
            Rem::Compute(_) => {}
            Rem::SpinBudget(t) => {
                let th = &mut self.threads[t as usize];
                th.spin_budget = th.spin_budget.saturating_sub(elapsed);
            }
            Rem::SpinWindow(t) => {
                let th = &mut self.threads[t as usize];
                th.spin_window = th.spin_window.saturating_sub(elapsed);
                th.pv_left = th.pv_left.saturating_sub(elapsed);
                if th.pmt.left != u64::MAX {
                    th.pmt.left = th.pmt.left.saturating_sub(elapsed);
                }
            }
            Rem::HaltPoll(v) => self.vcpus[v as usize].poll_rem -= elapsed,
            Rem::GuestPoll(k, cpu) => self.kernels[k as usize].cpus[cpu as usize].hp_poll_rem -= elapsed,
        }
        if let Some(t) = leaf.thread {
            let th = &mut self.threads[t as usize];
            match leaf.attr.cause {
                Cause::Compute => th.stats.compute_ns += elapsed,
                Cause::TlbWait => th.stats.tlb_wait_ns += elapsed,
                _ => th.stats.spin_ns += elapsed,
            }
            if self.record_wait_chains && leaf.attr.cause != Cause::Compute {
                self.charge_wait(t, elapsed);
            }
        }
        if self.timeline.is_some() {
            self.tl_interval(core, elapsed);
        }
    }

    fn drain(&mut self) -> Result<(), RunError> {
        while let Some(core) = self.worklist.pop_front() {
            self.dirty[core as usize] = false;
            self.resolve(core);
            if let Some(f) = self.fault.take() {
                return Err(f);
            }
        }
        Ok(())
    }

    fn resolve(&mut self, core: u32) {
        let mut guard = 0u32;
        let leaf = loop {
            if self.fault.is_some() {
                break Leaf { attr: IDLE_ATTR, rem: Rem::Inf, thread: None };
            }
            match self.step_core(core) {
                Step::Leaf(l) => break l,
                Step::Again => {
                    guard += 1;
                    if guard > 1_000_000 {
                        self.fault = Some(RunError::Workload(format!(
                            "core {core} made no progress at {} (a zero-time loop in the workload?)",
                            self.now
                        )));
                        break Leaf { attr: IDLE_ATTR, rem: Rem::Inf, thread: None };
                    }
                }
            }
        };
        self.mem_install(core, leaf.thread, leaf.attr);
        let rem = self.rem_value(core, leaf.rem);
        let c = &mut self.cores[core as usize];
        c.leaf = leaf;
        c.since = self.now;
        c.gen = c.gen.wrapping_add(1);
        match rem {
            Some(r) => {
                debug_assert!(r > 0, "zero-length leaf installed");
                let gen = c.gen;
                // The core's slot: re-resolving replaces the pending end instead of leaving it stale.
                self.q.set_slot(core, self.now + r, Ev::LeafEnd { core, gen });
            }
            None => self.q.clear_slot(core),
        }
    }

    fn rem_value(&self, core: u32, rem: Rem) -> Option<u64> {
        match rem {
            Rem::Inf => None,
            Rem::HostWork => self.kernels[0].cpus[core as usize].kwork.front().map(|w| w.rem),
            Rem::GuestWork(k, cpu) => self.kernels[k as usize].cpus[cpu as usize].kwork.front().map(|w| w.rem),
            Rem::Compute(t) => Some(self.mem_wall(core, self.threads[t as usize].compute_rem)),
            Rem::SpinWindow(t) => {
                let th = &self.threads[t as usize];
                Some(th.spin_window.min(th.pv_left).min(th.pmt.left))
            }
            Rem::SpinBudget(t) => Some(self.threads[t as usize].spin_budget),
            Rem::HaltPoll(v) => Some(self.vcpus[v as usize].poll_rem),
            Rem::GuestPoll(k, cpu) => Some(self.kernels[k as usize].cpus[cpu as usize].hp_poll_rem),
        }
    }

    /// Converts core cycles to ns (at least 1).
    pub(crate) fn cycles_to_ns(&self, cycles: u64) -> u64 {
        ((cycles as f64 / self.freq_ghz).round() as u64).max(1)
    }

    /// Records a workload error; the run stops after the current event.
    pub(crate) fn fail(&mut self, msg: String) {
        if self.fault.is_none() {
            self.fault = Some(RunError::Workload(msg));
        }
    }

    /// Whether the caller of [`World::run_checked`] asks the run to stop.
    fn interrupted(&mut self) -> bool {
        self.interrupt.as_mut().is_some_and(|f| (f.0)())
    }

    /// Counts one interpreted program step; false (with the run's error recorded) when the
    /// run must stop: past `limits.max_steps`, or interrupted (asked every [`CHECK_EVERY`]
    /// steps).
    pub(crate) fn count_step(&mut self) -> bool {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            if self.fault.is_none() {
                let msg = format!(
                    "more than {} program steps (limits.max_steps) at virtual time {} (work that takes no virtual time, such as a long repeat of compute = \"0ns\"?) ({})",
                    self.limits.max_steps,
                    self.now,
                    self.describe_threads()
                );
                self.fault = Some(RunError::Limit(msg));
            }
            return false;
        }
        if self.steps.is_multiple_of(CHECK_EVERY) && self.interrupted() {
            self.fault.get_or_insert(RunError::Interrupted);
            return false;
        }
        true
    }

    /// What the unfinished threads are doing, grouped (for limit and deadlock errors).
    fn describe_threads(&self) -> String {
        let mut groups: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
        for th in &self.threads {
            let what = match th.act {
                crate::kernel::thread::Act::Done => continue,
                crate::kernel::thread::Act::Compute | crate::kernel::thread::Act::Fresh => "running or ready".to_string(),
                _ => th.blocked_on_desc(&self.insts).unwrap_or_default(),
            };
            *groups.entry(what).or_insert(0) += 1;
        }
        groups.iter().map(|(w, n)| format!("{n} thread(s) {w}")).collect::<Vec<_>>().join(", ")
    }
}
