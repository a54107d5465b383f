//! Writing a [`Timeline`] as Trace Event Format JSON: metadata events naming the tracks, then
//! the events ordered by time (slices before point events at the same instant), one per line.
//! `ts` and `dur` are µs with ns precision (ns / 1000).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{Ev, Instant, Label, Rec, Timeline, TrackKind};
use crate::account::{Attr, Layer, OwnerKind};
use crate::kernel::tlb::CallKind;

/// One Trace Event Format event.
#[derive(Serialize)]
struct Event<'a> {
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    /// Absent on process metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    /// Scope of an instant event ("t": its thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u32>,
    /// Binding point of a flow end ("e": the enclosing slice).
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    args: Map<String, Value>,
}

impl<'a> Event<'a> {
    fn new(name: impl Into<Cow<'a, str>>, ph: &'static str, pid: u32, tid: Option<u32>) -> Self {
        Event { name: name.into(), cat: None, ph, ts: None, dur: None, pid, tid, s: None, id: None, bp: None, args: Map::new() }
    }
}

/// ns → µs.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn args(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

impl Timeline {
    fn owner_name(&self, o: u32) -> String {
        match self.names.owners[o as usize] {
            OwnerKind::Host => "host".into(),
            OwnerKind::Native { instance } => format!("native{instance}"),
            OwnerKind::Vcpu { vm, vcpu } => format!("vm{vm}/vcpu{vcpu}"),
        }
    }

    fn thread_name(&self, t: u32) -> String {
        format!("t{}", self.names.threads[t as usize].1)
    }

    /// The name of a leaf interval on a track of `kind`.
    pub(super) fn leaf_name(&self, kind: TrackKind, a: Attr, thread: Option<u32>) -> String {
        let cause = a.cause.name();
        match kind {
            TrackKind::Pcpu => match self.names.owners[a.owner as usize] {
                OwnerKind::Host => match thread {
                    Some(t) => format!("{} {}", self.names.instances[self.names.threads[t as usize].0 as usize], self.thread_name(t)),
                    None if cause == "idle" => cause,
                    None => format!("host: {cause}"),
                },
                OwnerKind::Native { instance } => match thread {
                    Some(t) => format!("native{instance} {}", self.thread_name(t)),
                    None => format!("native{instance}: {cause}"),
                },
                OwnerKind::Vcpu { vm, vcpu } => match a.layer {
                    Layer::Host => format!("host: {cause}"),
                    _ => format!("vm{vm} vcpu{vcpu}"),
                },
            },
            TrackKind::Vcpu => match (thread, a.layer) {
                (Some(t), _) => self.thread_name(t),
                (None, Layer::User) => cause,
                (None, layer) => format!("{}: {cause}", layer.name()),
            },
            TrackKind::Thread => match a.layer {
                Layer::User => cause,
                layer => format!("{}: {cause}", layer.name()),
            },
        }
    }

    fn slice_event(&self, r: &Rec, dur: u64, label: Label) -> Event<'_> {
        let track = &self.tracks[r.track as usize];
        let mut e = match label {
            Label::Leaf(a, thread) => {
                let mut e = Event::new(self.leaf_name(track.kind, a, thread), "X", track.pid, Some(track.tid));
                let mut pairs = Vec::with_capacity(4);
                if track.kind == TrackKind::Pcpu {
                    pairs.push(("owner", Value::from(self.owner_name(a.owner))));
                }
                pairs.push(("layer", Value::from(a.layer.name())));
                pairs.push(("cause", Value::from(a.cause.name())));
                if let (Some(t), false) = (thread, track.kind == TrackKind::Thread) {
                    pairs.push(("thread", Value::from(self.thread_name(t))));
                }
                e.args = args(pairs);
                e.cat = Some(match track.kind {
                    TrackKind::Pcpu => "pcpu",
                    TrackKind::Vcpu => "vcpu",
                    TrackKind::Thread => "thread",
                });
                e
            }
            Label::Off(state) => {
                let mut e = Event::new(state.name(), "X", track.pid, Some(track.tid));
                e.cat = Some("vcpu_off");
                e
            }
        };
        e.ts = Some(us(r.ts));
        e.dur = Some(us(dur));
        e
    }

    fn instant_event(&self, r: &Rec, what: &Instant) -> Event<'_> {
        let track = &self.tracks[r.track as usize];
        let cpu = |n: u32| -> Value {
            match track.kind {
                TrackKind::Pcpu | TrackKind::Thread => format!("pCPU {n}").into(),
                TrackKind::Vcpu => format!("vCPU {n}").into(),
            }
        };
        let call = |k: CallKind| match k {
            CallKind::TlbFlush => ("TLB shootdown", "tlb"),
            CallKind::Membarrier => ("membarrier", "membarrier"),
        };
        let (name, cat, pairs): (Cow<'_, str>, &'static str, Vec<(&str, Value)>) = match what {
            Instant::Exit { reason, cost_ns, pcpu } => {
                (reason.name().into(), "exit", vec![("reason", json!(reason.name())), ("cost_ns", json!(cost_ns)), ("pcpu", json!(pcpu))])
            }
            Instant::IpiSend { kind, from, to, .. } => {
                (format!("IPI send: {kind}").into(), "ipi", vec![("kind", json!(kind)), ("from", cpu(*from)), ("to", cpu(*to))])
            }
            Instant::IpiRecv { kind, from, to, .. } => {
                let mut p = vec![("kind", json!(kind))];
                if let Some(f) = from {
                    p.push(("from", cpu(*f)));
                }
                p.push(("to", cpu(*to)));
                (format!("IPI recv: {kind}").into(), "ipi", p)
            }
            Instant::PleExit { window_cycles, window_ns, next_window_cycles, examined, yielded } => (
                "PLE exit".into(),
                "ple",
                vec![
                    ("window_cycles", json!(window_cycles)),
                    ("window_ns", json!(window_ns)),
                    ("next_window_cycles", json!(next_window_cycles)),
                    ("candidates_examined", json!(examined)),
                    ("yielded", json!(yielded)),
                ],
            ),
            Instant::CallStart { kind, targets, policy, pages, deferred } => {
                let (name, cat) = call(*kind);
                let mut p = vec![("targets", Value::Array(targets.iter().map(|&t| cpu(t)).collect())), ("policy", json!(policy))];
                if *kind == CallKind::TlbFlush {
                    p.push(("pages", json!(pages)));
                    p.push(("deferred", json!(deferred)));
                }
                (name.into(), cat, p)
            }
            Instant::CallDone { kind, latency_ns } => {
                let (name, cat) = call(*kind);
                (format!("{name} done").into(), cat, vec![("latency_ns", json!(latency_ns))])
            }
        };
        let mut e = Event::new(name, "i", track.pid, Some(track.tid));
        e.cat = Some(cat);
        e.ts = Some(us(r.ts));
        e.s = Some("t");
        e.args = args(pairs);
        e
    }

    fn flow_event(&self, r: &Rec, id: u32, start: bool) -> Event<'_> {
        let track = &self.tracks[r.track as usize];
        let mut e = Event::new("IPI", if start { "s" } else { "f" }, track.pid, Some(track.tid));
        e.cat = Some("ipi");
        e.ts = Some(us(r.ts));
        e.id = Some(id);
        if !start {
            e.bp = Some("e");
        }
        e
    }

    fn metadata(&self) -> Vec<Event<'_>> {
        let mut out = Vec::new();
        for (i, p) in self.processes.iter().enumerate() {
            let mut e = Event::new("process_name", "M", p.pid, None);
            e.args = args(vec![("name", json!(p.name))]);
            out.push(e);
            let mut e = Event::new("process_sort_index", "M", p.pid, None);
            e.args = args(vec![("sort_index", json!(i))]);
            out.push(e);
        }
        for t in &self.tracks {
            let mut e = Event::new("thread_name", "M", t.pid, Some(t.tid));
            e.args = args(vec![("name", json!(t.name))]);
            out.push(e);
            let mut e = Event::new("thread_sort_index", "M", t.pid, Some(t.tid));
            e.args = args(vec![("sort_index", json!(t.sort))]);
            out.push(e);
        }
        out
    }

    /// The trace as JSON text (`{"traceEvents": [...], "otherData": {...}}`); `other` is added
    /// to `otherData` (what ran: workload, scenario, ...). Call after the run finished.
    /// Byte-identical for identical runs.
    ///
    /// There is no `displayTimeUnit`: it only changes how the legacy viewer prints times, and
    /// some Perfetto versions took `"ns"` to be the unit of `ts`.
    pub fn to_json(&self, other: Map<String, Value>) -> String {
        let mut order: Vec<&Rec> = self.recs.iter().collect();
        let rank = |r: &Rec| match r.ev {
            Ev::Slice { .. } => 0u8,
            Ev::Instant(_) => 1,
            Ev::FlowStart(_) | Ev::FlowEnd(_) => 2,
        };
        order.sort_by_key(|r| (r.ts, rank(r)));
        let mut out = String::with_capacity(64 + 140 * order.len());
        out.push_str("{\"traceEvents\":[\n");
        let mut first = true;
        let mut put = |e: &Event<'_>| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
            out.push_str(&serde_json::to_string(e).expect("events serialize"));
        };
        for e in self.metadata() {
            put(&e);
        }
        for r in order {
            let e = match &r.ev {
                Ev::Slice { dur, label } => self.slice_event(r, *dur, *label),
                Ev::Instant(what) => self.instant_event(r, what),
                Ev::FlowStart(id) => self.flow_event(r, *id, true),
                Ev::FlowEnd(id) => self.flow_event(r, *id, false),
            };
            put(&e);
        }
        let (from, to) = self.window();
        let mut data = other;
        data.insert("window".into(), json!({ "from_ns": from, "to_ns": to, "requested_to_ns": self.opts.to_ns }));
        data.insert("truncated_at_ns".into(), json!(self.truncated_at));
        data.insert("max_events".into(), json!(self.opts.max_events));
        data.insert("events".into(), json!(self.recs.len()));
        data.insert("run_end_ns".into(), json!(self.end));
        out.push_str("\n],\n\"otherData\":");
        out.push_str(&serde_json::to_string(&data).expect("metadata serializes"));
        out.push_str("}\n");
        out
    }
}
