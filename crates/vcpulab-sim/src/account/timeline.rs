//! The timeline recorder: what ran where, and when, as a Chrome / Perfetto trace (the Trace
//! Event Format, JSON), for `vcpulab run --timeline` (docs/timeline.md).
//!
//! ```text
//!   World::sync ── each closed leaf interval ──► pCPU track of its core
//!                                              ├► vCPU track (the vCPU is current on that core)
//!                                              └► thread track (a thread of a host-kernel instance)
//!   vcpu_sched_out / vcpu_unhalt / vcpu_sched_in ──► off-core slices on the vCPU track
//!   exits, IPIs, PLE exits, remote calls ──► instant events (and IPI flow arrows)
//! ```
//!
//! Slices are clipped to the window `[from, to)` and merged with the previous slice of their
//! track when they continue it with the same label (touches split intervals at arbitrary
//! points). A track never overlaps itself: a slice is clipped to start where its track's last
//! one ended. When the event cap is reached the window ends there (`truncated_at`): the slices
//! then open are closed at that instant and nothing later is recorded, so the file covers
//! `[from, truncated_at)` completely. Recording reads the world; it never changes it.

mod json;

use crate::account::{Attr, OwnerKind};
use crate::kernel::tlb::CallKind;
use crate::virt::exit::ExitReason;

/// Default end of the window: the first 100 ms of virtual time.
pub const DEFAULT_WINDOW_NS: u64 = 100_000_000;
/// Default cap on recorded events.
pub const DEFAULT_MAX_EVENTS: u64 = 1_000_000;
/// Thread ids of process `p` are `p * TIDS_PER_PROCESS + index`.
const TIDS_PER_PROCESS: u32 = 10_000;

/// What a timeline records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineOptions {
    /// Start of the window (ns of virtual time, inclusive).
    pub from_ns: u64,
    /// End of the window (ns, exclusive); None = until the run ends.
    pub to_ns: Option<u64>,
    /// Recording stops (and the window ends) once this many events are recorded.
    pub max_events: u64,
}

impl TimelineOptions {
    /// Checks the options: the window's end after its start, at least one event allowed.
    pub fn check(&self) -> Result<(), String> {
        if let Some(to) = self.to_ns.filter(|&to| to <= self.from_ns) {
            return Err(format!("the window's end ({to} ns) must be after its start ({} ns)", self.from_ns));
        }
        if self.max_events == 0 {
            return Err("max_events must be at least 1".into());
        }
        Ok(())
    }
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions { from_ns: 0, to_ns: Some(DEFAULT_WINDOW_NS), max_events: DEFAULT_MAX_EVENTS }
    }
}

/// Where a vCPU is while it is not on a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OffCore {
    /// Runnable and waiting for a core: woken, or never run yet.
    Runnable,
    /// Scheduled out by the host while runnable (`kvm_sched_out` with `preempted`).
    Preempted,
    /// Its thread blocked in the host after HLT.
    Halted,
}

impl OffCore {
    fn name(self) -> &'static str {
        match self {
            OffCore::Runnable => "runnable",
            OffCore::Preempted => "preempted",
            OffCore::Halted => "halted",
        }
    }
}

/// What a slice shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Label {
    /// A leaf: its attribution and thread.
    Leaf(Attr, Option<u32>),
    /// A vCPU off its core.
    Off(OffCore),
}

/// A point event.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Instant {
    /// A VM exit (handled on `pcpu`, costing `cost_ns` of host work).
    Exit { reason: ExitReason, cost_ns: u64, pcpu: u32 },
    /// An IPI sent (`kind`: an `ipi_kind` name) from CPU `from` to CPU `to` of one kernel.
    IpiSend { kind: &'static str, from: u32, to: u32 },
    /// An IPI received from CPU `from` (when it was sent inside the window).
    IpiRecv { kind: &'static str, from: Option<u32>, to: u32 },
    /// A PLE exit: the window that expired, the window after it, candidates examined, yields.
    PleExit { window_cycles: u64, window_ns: u64, next_window_cycles: u64, examined: u32, yielded: bool },
    /// A remote call (TLB shootdown or membarrier) starts, to these CPUs of the sender's kernel.
    CallStart { kind: CallKind, targets: Box<[u32]>, policy: &'static str, pages: u64, deferred: u64 },
    /// A remote call completes (the sender sees the last acknowledgement).
    CallDone { kind: CallKind, latency_ns: u64 },
}

#[derive(Clone, Debug, PartialEq)]
enum Ev {
    Slice { dur: u64, label: Label },
    Instant(Instant),
    FlowStart(u32),
    FlowEnd(u32),
}

/// One recorded event: a time (ns), a track and what happened.
#[derive(Clone, Debug, PartialEq)]
struct Rec {
    ts: u64,
    track: u32,
    ev: Ev,
}

/// What a track shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TrackKind {
    /// A core: who occupies it.
    Pcpu,
    /// A vCPU: what it executes, and where it is while off its core.
    Vcpu,
    /// A thread of an instance in the host kernel (native or host daemon).
    Thread,
}

/// A track: a Perfetto thread inside a Perfetto process.
#[derive(Clone, Debug)]
struct Track {
    kind: TrackKind,
    pid: u32,
    tid: u32,
    name: String,
    sort: u32,
}

/// A group of tracks.
#[derive(Clone, Debug)]
struct Process {
    pid: u32,
    name: String,
}

/// An IPI on its way: where it goes, when it arrives, where it came from, its arrow.
#[derive(Clone, Copy, Debug)]
struct Flight {
    kernel: u32,
    to: u32,
    bit: u8,
    arrival: u64,
    from: u32,
    kind: &'static str,
    flow: u32,
}

/// A slice not yet written: it may still be extended.
#[derive(Clone, Copy, Debug)]
struct Open {
    start: u64,
    end: u64,
    label: Label,
}

/// Names of the world's entities, for labels.
#[derive(Clone, Debug, Default)]
pub(crate) struct Names {
    /// Every owner (index = owner id).
    pub(crate) owners: Vec<OwnerKind>,
    /// Every thread: (instance name, index within its instance).
    pub(crate) threads: Vec<(u32, u32)>,
    /// Every instance's name.
    pub(crate) instances: Vec<String>,
}

/// A timeline being recorded (see the module docs).
#[derive(Debug)]
pub struct Timeline {
    opts: TimelineOptions,
    /// Effective end of the window (the requested end, or where the cap stopped recording).
    to: u64,
    truncated_at: Option<u64>,
    names: Names,
    processes: Vec<Process>,
    tracks: Vec<Track>,
    /// Per track: the slice that may still be extended.
    open: Vec<Option<Open>>,
    /// Tracks with an open slice.
    n_open: u64,
    /// Per owner: its vCPU's global id (vCPU owners only).
    pub(crate) owner_vcpu: Vec<Option<u32>>,
    /// Per thread: its thread track (threads of host-kernel instances only).
    pub(crate) thread_track: Vec<Option<u32>>,
    /// Per vCPU (global id): its track.
    pub(crate) vcpu_track: Vec<u32>,
    /// Per vCPU: where it is while off its core, and since when.
    off: Vec<Option<(OffCore, u64)>>,
    /// IPIs in flight that were sent inside the window.
    flights: Vec<Flight>,
    next_flow: u32,
    recs: Vec<Rec>,
    /// The run's end, once finished.
    end: Option<u64>,
}

/// The shape of a run, as the timeline needs it.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    /// Cores.
    pub(crate) cores: u32,
    /// Per VM: its vCPUs' owner ids, by vCPU index.
    pub(crate) vms: Vec<Vec<u32>>,
    /// Instances in the host kernel: (instance id, its threads).
    pub(crate) host_instances: Vec<(u32, Vec<u32>)>,
}

impl Timeline {
    /// An empty timeline of a run with this shape.
    pub(crate) fn new(opts: TimelineOptions, names: Names, shape: &Shape) -> Timeline {
        let mut processes = vec![Process { pid: 1, name: "host (pCPUs)".into() }];
        let mut tracks: Vec<Track> =
            (0..shape.cores).map(|c| Track { kind: TrackKind::Pcpu, pid: 1, tid: 0, name: format!("pCPU {c}"), sort: c }).collect();
        let mut owner_vcpu = vec![None; names.owners.len()];
        let mut vcpu_track = Vec::new();
        for (vm, owners) in shape.vms.iter().enumerate() {
            let pid = processes.len() as u32 + 1;
            processes.push(Process { pid, name: format!("vm{vm} (vCPUs)") });
            for (i, &o) in owners.iter().enumerate() {
                owner_vcpu[o as usize] = Some(vcpu_track.len() as u32);
                vcpu_track.push(tracks.len() as u32);
                tracks.push(Track { kind: TrackKind::Vcpu, pid, tid: 0, name: format!("vCPU {i}"), sort: i as u32 });
            }
        }
        let mut thread_track = vec![None; names.threads.len()];
        for (inst, threads) in &shape.host_instances {
            let pid = processes.len() as u32 + 1;
            processes.push(Process { pid, name: format!("{} (threads)", names.instances[*inst as usize]) });
            for (i, &t) in threads.iter().enumerate() {
                thread_track[t as usize] = Some(tracks.len() as u32);
                tracks.push(Track { kind: TrackKind::Thread, pid, tid: 0, name: format!("t{i}"), sort: i as u32 });
            }
        }
        // Thread ids unique over the trace and never equal to a process id (Perfetto takes a
        // missing tid to be the pid).
        for t in &mut tracks {
            t.tid = t.pid * TIDS_PER_PROCESS + t.sort;
        }
        let n = tracks.len();
        Timeline {
            opts,
            to: opts.to_ns.unwrap_or(u64::MAX),
            truncated_at: None,
            names,
            processes,
            tracks,
            open: vec![None; n],
            n_open: 0,
            owner_vcpu,
            thread_track,
            off: vec![Some((OffCore::Runnable, 0)); vcpu_track.len()],
            vcpu_track,
            flights: Vec::new(),
            next_flow: 0,
            recs: Vec::new(),
            end: None,
        }
    }

    /// Whether `now` lies in the window (instants are recorded only then).
    #[inline]
    pub(crate) fn in_window(&self, now: u64) -> bool {
        now >= self.opts.from_ns && now < self.to
    }

    /// Events recorded so far (metadata not counted).
    pub fn events(&self) -> u64 {
        self.recs.len() as u64 + self.n_open
    }

    /// Where the event cap stopped recording (ns), if it did.
    pub fn truncated_at(&self) -> Option<u64> {
        self.truncated_at
    }

    fn push(&mut self, rec: Rec, now: u64) {
        // Point events and arrows lie in the window `[from, to)`; once the cap has ended the
        // window at the instant it was reached, one at that instant (the one that reached it, or
        // an arrow sent with it) lies outside.
        let point = !matches!(rec.ev, Ev::Slice { .. });
        if point && rec.ts >= self.to {
            return;
        }
        self.recs.push(rec);
        if self.events() >= self.opts.max_events && self.truncated_at.is_none() {
            let at = now.clamp(self.opts.from_ns, self.to);
            self.truncated_at = Some(at);
            self.to = at;
            if point && self.recs.last().is_some_and(|r| r.ts >= at) {
                self.recs.pop();
            }
        }
    }

    /// Interval `[start, end)` of `track` shows `label`; `now` is the current time.
    pub(crate) fn slice(&mut self, track: u32, start: u64, end: u64, label: Label, now: u64) {
        let t = track as usize;
        let last = self.open[t].map_or(0, |o| o.end);
        let (s, e) = (start.max(self.opts.from_ns).max(last), end.min(self.to));
        if s >= e {
            return;
        }
        match &mut self.open[t] {
            Some(o) if o.label == label && o.end == s => o.end = e,
            slot => match slot.replace(Open { start: s, end: e, label }) {
                Some(p) => self.push(Rec { ts: p.start, track, ev: Ev::Slice { dur: p.end - p.start, label: p.label } }, now),
                None => self.n_open += 1,
            },
        }
    }

    /// A point event on `track` at `now` (dropped outside the window).
    pub(crate) fn instant(&mut self, track: u32, now: u64, what: Instant) {
        if self.in_window(now) {
            self.push(Rec { ts: now, track, ev: Ev::Instant(what) }, now);
        }
    }

    /// vCPU `v` left its core at `now`.
    pub(crate) fn vcpu_off(&mut self, v: u32, state: OffCore, now: u64) {
        self.vcpu_on(v, now);
        self.off[v as usize] = Some((state, now));
    }

    /// vCPU `v` runs again at `now`: closes its off-core slice.
    pub(crate) fn vcpu_on(&mut self, v: u32, now: u64) {
        if let Some((state, since)) = self.off[v as usize].take() {
            self.slice(self.vcpu_track[v as usize], since, now, Label::Off(state), now);
        }
    }

    /// vCPU `v` was woken: a halted vCPU becomes runnable.
    pub(crate) fn vcpu_woken(&mut self, v: u32, now: u64) {
        if matches!(self.off[v as usize], Some((OffCore::Halted, _))) {
            self.vcpu_off(v, OffCore::Runnable, now);
        }
    }

    /// An IPI of `kind` (an `ipi_kind` name; irq bit `bit`) leaves CPU `from` of kernel `k`
    /// for CPU `to`, arriving at `arrival`: a point event and the start of an arrow.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn ipi_send(&mut self, track: u32, now: u64, k: u32, from: u32, to: u32, bit: u8, kind: &'static str, arrival: u64) {
        if !self.in_window(now) {
            return;
        }
        self.instant(track, now, Instant::IpiSend { kind, from, to });
        let flow = self.next_flow;
        self.next_flow += 1;
        self.push(Rec { ts: now, track, ev: Ev::FlowStart(flow) }, now);
        self.flights.push(Flight { kernel: k, to, bit, arrival, from, kind, flow });
    }

    /// An IPI (irq bit `bit`) reaches CPU `to` of kernel `k` at `now`: a point event and the
    /// end of its arrow (when it was sent inside the window).
    pub(crate) fn ipi_recv(&mut self, track: u32, now: u64, k: u32, to: u32, bit: u8) {
        let found = self.flights.iter().position(|f| f.kernel == k && f.to == to && f.bit == bit && f.arrival == now);
        let flight = found.map(|i| self.flights.swap_remove(i));
        if !self.in_window(now) {
            return;
        }
        let kind = match flight {
            Some(f) => f.kind,
            None if bit & crate::kernel::irq::CALL_FUNC != 0 => "call",
            None => "resched",
        };
        self.instant(track, now, Instant::IpiRecv { kind, from: flight.map(|f| f.from), to });
        if let Some(f) = flight {
            self.push(Rec { ts: now, track, ev: Ev::FlowEnd(f.flow) }, now);
        }
    }

    /// The run ended at `end`: closes the off-core slices and every open slice.
    pub(crate) fn finish(&mut self, end: u64) {
        for v in 0..self.off.len() as u32 {
            self.vcpu_on(v, end);
        }
        self.to = self.to.min(end.max(self.opts.from_ns));
        for t in 0..self.open.len() {
            if let Some(p) = self.open[t].take() {
                self.n_open -= 1;
                self.recs.push(Rec { ts: p.start, track: t as u32, ev: Ev::Slice { dur: p.end - p.start, label: p.label } });
            }
        }
        self.end = Some(end);
    }

    /// The window actually covered: `[from, to)` in ns.
    pub fn window(&self) -> (u64, u64) {
        (self.opts.from_ns, self.to.max(self.opts.from_ns))
    }

    /// The options it was recorded with.
    pub fn options(&self) -> TimelineOptions {
        self.opts
    }
}

#[cfg(test)]
mod tests;
