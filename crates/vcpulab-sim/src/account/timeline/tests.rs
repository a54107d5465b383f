//! Unit tests of the recorder: merging, clipping to the window, the event cap, off-core
//! states, IPI arrows and the JSON shape.

use serde_json::{Map, Value};

use super::*;
use crate::account::{Cause, Layer};

/// One core, one VM with one vCPU (owner 1), one native instance with one thread (owner 2).
fn timeline(from: u64, to: Option<u64>, max_events: u64) -> Timeline {
    let names = Names {
        owners: vec![OwnerKind::Host, OwnerKind::Vcpu { vm: 0, vcpu: 0 }, OwnerKind::Native { instance: 0 }],
        threads: vec![(0, 0)],
        instances: vec!["native0".into()],
    };
    let shape = Shape { cores: 1, vms: vec![vec![1]], host_instances: vec![(0, vec![0])] };
    Timeline::new(TimelineOptions { from_ns: from, to_ns: to, max_events }, names, &shape)
}

fn leaf(owner: u32, layer: Layer, cause: Cause, thread: Option<u32>) -> Label {
    Label::Leaf(Attr { owner, layer, cause }, thread)
}

const COMPUTE: Label = Label::Leaf(Attr { owner: 1, layer: Layer::User, cause: Cause::Compute }, Some(0));

/// (ts, dur) of the slices recorded on `track`, after `finish`.
fn slices(tl: &Timeline, track: u32) -> Vec<(u64, u64, Label)> {
    tl.recs
        .iter()
        .filter(|r| r.track == track)
        .filter_map(|r| match r.ev {
            Ev::Slice { dur, label } => Some((r.ts, dur, label)),
            _ => None,
        })
        .collect()
}

fn parse(tl: &Timeline) -> Value {
    serde_json::from_str(&tl.to_json(Map::new())).expect("valid JSON")
}

#[test]
fn back_to_back_slices_with_one_label_merge() {
    let mut tl = timeline(0, None, 100);
    tl.slice(0, 0, 10, COMPUTE, 10);
    tl.slice(0, 10, 25, COMPUTE, 25);
    tl.slice(0, 25, 30, leaf(1, Layer::Host, Cause::Exit(ExitReason::Hlt), None), 30);
    tl.slice(0, 30, 40, COMPUTE, 40);
    tl.finish(40);
    let s = slices(&tl, 0);
    assert_eq!(s.iter().map(|&(ts, d, _)| (ts, d)).collect::<Vec<_>>(), vec![(0, 25), (25, 5), (30, 10)]);
    // ... plus the vCPU's initial off-core slice.
    assert_eq!(tl.events(), 4);
}

#[test]
fn a_gap_or_another_thread_splits_slices() {
    let mut tl = timeline(0, None, 100);
    tl.slice(0, 0, 10, COMPUTE, 10);
    tl.slice(0, 12, 20, COMPUTE, 20);
    tl.slice(0, 20, 30, leaf(1, Layer::User, Cause::Compute, Some(1)), 30);
    tl.finish(30);
    assert_eq!(slices(&tl, 0).len(), 3);
}

#[test]
fn slices_are_clipped_to_the_window() {
    let mut tl = timeline(100, Some(200), 100);
    tl.slice(0, 0, 50, COMPUTE, 50); // before: dropped
    tl.slice(0, 50, 150, COMPUTE, 150); // straddles the start
    tl.slice(0, 150, 250, leaf(0, Layer::Host, Cause::Idle, None), 250); // straddles the end
    tl.slice(0, 250, 300, COMPUTE, 300); // after: dropped
    tl.instant(0, 99, Instant::CallDone { kind: CallKind::TlbFlush, latency_ns: 1 });
    tl.instant(0, 100, Instant::CallDone { kind: CallKind::TlbFlush, latency_ns: 2 });
    tl.instant(0, 200, Instant::CallDone { kind: CallKind::TlbFlush, latency_ns: 3 });
    tl.finish(300);
    let s = slices(&tl, 0);
    assert_eq!(s.iter().map(|&(ts, d, _)| (ts, d)).collect::<Vec<_>>(), vec![(100, 50), (150, 50)]);
    let instants: Vec<u64> = tl.recs.iter().filter(|r| matches!(r.ev, Ev::Instant(_))).map(|r| r.ts).collect();
    assert_eq!(instants, vec![100]);
    assert_eq!(tl.window(), (100, 200));
}

#[test]
fn the_window_ends_with_the_run() {
    let mut tl = timeline(0, Some(1_000), 100);
    tl.slice(0, 0, 400, COMPUTE, 400);
    tl.finish(400);
    assert_eq!(tl.window(), (0, 400));
}

#[test]
fn a_track_never_overlaps_itself() {
    let mut tl = timeline(0, None, 100);
    tl.slice(1, 0, 100, COMPUTE, 100);
    tl.slice(1, 60, 120, leaf(1, Layer::Kernel, Cause::Interrupt, None), 120);
    tl.slice(1, 70, 90, leaf(1, Layer::Kernel, Cause::Syscall, None), 120); // entirely covered: dropped
    tl.finish(120);
    let s = slices(&tl, 1);
    assert_eq!(s.iter().map(|&(ts, d, _)| (ts, d)).collect::<Vec<_>>(), vec![(0, 100), (100, 20)]);
}

#[test]
fn the_cap_ends_the_window_where_it_was_reached() {
    let mut tl = timeline(0, None, 3);
    for i in 0..10u64 {
        // Alternating labels: every slice is an event.
        let label = if i % 2 == 0 { COMPUTE } else { leaf(1, Layer::Kernel, Cause::Syscall, None) };
        tl.slice(0, i * 10, i * 10 + 10, label, i * 10 + 10);
        tl.instant(0, i * 10 + 10, Instant::Exit { reason: ExitReason::Hlt, cost_ns: 1, pcpu: 0 });
    }
    tl.finish(100);
    let at = tl.truncated_at().expect("capped");
    assert_eq!(at, 20);
    assert_eq!(tl.window(), (0, at));
    // Everything recorded lies inside [0, at), and the slices cover it exactly.
    let s = slices(&tl, 0);
    assert_eq!(s.iter().map(|&(_, d, _)| d).sum::<u64>(), at);
    assert!(tl.recs.iter().all(|r| r.ts < at));
    let v = parse(&tl);
    assert_eq!(v["otherData"]["truncated_at_ns"], 20);
    assert_eq!(v["otherData"]["window"]["to_ns"], 20);
}

#[test]
fn a_vcpu_off_its_core_shows_where_it_is() {
    let mut tl = timeline(0, None, 100);
    let vt = tl.vcpu_track[0];
    tl.vcpu_on(0, 5); // starts runnable
    tl.slice(vt, 5, 10, COMPUTE, 10);
    tl.vcpu_off(0, OffCore::Halted, 10);
    tl.vcpu_woken(0, 30);
    tl.vcpu_on(0, 35);
    tl.slice(vt, 35, 40, COMPUTE, 40);
    tl.vcpu_off(0, OffCore::Preempted, 40);
    tl.vcpu_woken(0, 45); // not halted: stays preempted
    tl.finish(50);
    let s = slices(&tl, vt);
    let want = vec![
        (0, 5, Label::Off(OffCore::Runnable)),
        (5, 5, COMPUTE),
        (10, 20, Label::Off(OffCore::Halted)),
        (30, 5, Label::Off(OffCore::Runnable)),
        (35, 5, COMPUTE),
        (40, 10, Label::Off(OffCore::Preempted)),
    ];
    assert_eq!(s, want);
}

#[test]
fn an_ipi_has_an_arrow_from_sender_to_receiver() {
    let mut tl = timeline(0, Some(1_000), 100);
    let (a, b) = (tl.vcpu_track[0], tl.vcpu_track[0]);
    tl.ipi_send(a, 10, 1, 0, 3, 2, "resched", 310);
    tl.ipi_recv(b, 310, 1, 3, 2);
    tl.ipi_recv(b, 400, 1, 3, 2); // no flight: a point event only
    tl.ipi_send(a, 990, 1, 0, 3, 4, "tlb", 1_290);
    tl.ipi_recv(b, 1_290, 1, 3, 4); // outside the window: dropped
    tl.finish(2_000);
    let v = parse(&tl);
    let events = v["traceEvents"].as_array().expect("array");
    let flows: Vec<(&str, u64)> = events
        .iter()
        .filter(|e| e["cat"] == "ipi" && e["name"] == "IPI")
        .map(|e| (e["ph"].as_str().unwrap(), e["id"].as_u64().unwrap()))
        .collect();
    assert_eq!(flows, vec![("s", 0), ("f", 0), ("s", 1)]);
    let recv: Vec<&Value> = events.iter().filter(|e| e["name"] == "IPI recv: resched").collect();
    assert_eq!(recv.len(), 2);
    assert_eq!(recv[0]["args"]["from"], "vCPU 0");
    assert!(recv[1]["args"].get("from").is_none());
    assert!(tl.flights.is_empty(), "an arrival outside the window still ends its flight");
}

#[test]
fn json_has_tracks_metadata_and_microsecond_times() {
    let mut tl = timeline(0, None, 100);
    tl.slice(0, 1_234_567, 1_234_568, leaf(0, Layer::Host, Cause::Idle, None), 1_234_568);
    tl.slice(0, 1_234_568, 1_300_000, leaf(2, Layer::User, Cause::Compute, Some(0)), 1_300_000);
    tl.slice(tl.thread_track[0].unwrap(), 1_234_568, 1_300_000, leaf(2, Layer::User, Cause::Compute, Some(0)), 1_300_000);
    tl.finish(1_300_000);
    let v = parse(&tl);
    assert!(v.get("displayTimeUnit").is_none());
    let events = v["traceEvents"].as_array().expect("array");
    let names: Vec<&str> =
        events.iter().filter(|e| e["ph"] == "M" && e["name"] == "thread_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["pCPU 0", "vCPU 0", "t0"]);
    let procs: Vec<&str> =
        events.iter().filter(|e| e["ph"] == "M" && e["name"] == "process_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    assert_eq!(procs, vec!["host (pCPUs)", "vm0 (vCPUs)", "native0 (threads)"]);
    let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["cat"] != "vcpu_off").collect();
    assert_eq!(x[0]["name"], "idle");
    assert_eq!(x[0]["ts"].as_f64(), Some(1234.567));
    assert_eq!(x[0]["dur"].as_f64(), Some(0.001));
    assert_eq!(x[1]["name"], "native0 t0");
    assert_eq!(x[1]["args"]["owner"], "native0");
    assert_eq!(x[2]["name"], "compute");
    // Thread ids are unique over the trace and never a process id; process metadata has none.
    let tids: Vec<u64> = events.iter().filter(|e| e["name"] == "thread_name").map(|e| e["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids, vec![10_000, 20_000, 30_000]);
    assert!(events.iter().filter(|e| e["name"] == "process_name").all(|e| e.get("tid").is_none()));
}

#[test]
fn leaf_names_say_who_runs_on_a_pcpu_and_what_a_vcpu_does() {
    let tl = timeline(0, None, 100);
    let exit = Attr { owner: 1, layer: Layer::Host, cause: Cause::Exit(ExitReason::Hlt) };
    let guest_kernel = Attr { owner: 1, layer: Layer::Kernel, cause: Cause::TlbFlush };
    let user = Attr { owner: 1, layer: Layer::User, cause: Cause::Compute };
    assert_eq!(tl.leaf_name(TrackKind::Pcpu, exit, None), "host: exit:HLT");
    assert_eq!(tl.leaf_name(TrackKind::Pcpu, guest_kernel, None), "vm0 vcpu0");
    assert_eq!(tl.leaf_name(TrackKind::Pcpu, user, Some(0)), "vm0 vcpu0");
    assert_eq!(tl.leaf_name(TrackKind::Vcpu, exit, None), "host: exit:HLT");
    assert_eq!(tl.leaf_name(TrackKind::Vcpu, guest_kernel, None), "kernel: tlb_flush");
    assert_eq!(tl.leaf_name(TrackKind::Vcpu, user, Some(0)), "t0");
    let host_irq = Attr { owner: 0, layer: Layer::Host, cause: Cause::Interrupt };
    assert_eq!(tl.leaf_name(TrackKind::Pcpu, host_irq, None), "host: interrupt");
    let native_switch = Attr { owner: 2, layer: Layer::Kernel, cause: Cause::ContextSwitch };
    assert_eq!(tl.leaf_name(TrackKind::Pcpu, native_switch, None), "native0: context_switch");
    assert_eq!(tl.leaf_name(TrackKind::Thread, native_switch, Some(0)), "kernel: context_switch");
}
