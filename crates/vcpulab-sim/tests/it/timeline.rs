//! The timeline (`Plan::run_cell_with_timeline`): the pCPU tracks account for every core over
//! the window, tracks never overlap themselves, recording changes nothing, and the same seed
//! gives the same bytes.

use std::collections::BTreeMap;

use serde_json::Value;
use vcpulab_sim::account::TimelineOptions;
use vcpulab_sim::api::{Plan, ScenarioResult};

fn spec(workload: &str, scenario: &str, vcpus: u32) -> String {
    format!("[experiment]\nworkloads = [\"{workload}\"]\nscenarios = [\"{scenario}\"]\nvcpus = [{vcpus}]\nseeds = [1]\n")
}

fn opts(from_ns: u64, to_ns: Option<u64>, max_events: u64) -> TimelineOptions {
    TimelineOptions { from_ns, to_ns, max_events }
}

/// Cell 0 of `text` with a timeline: its result, the JSON text and the parsed document.
fn record(text: &str, o: TimelineOptions) -> (ScenarioResult, String, Value) {
    let mut plan = Plan::new(text, "timeline.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
    let run = plan.run_cell_with_timeline(0, o).unwrap_or_else(|e| panic!("{e}"));
    let v: Value = serde_json::from_str(&run.json).expect("valid JSON");
    assert_eq!(v["otherData"]["events"].as_u64(), Some(run.events));
    (run.result, run.json, v)
}

fn ns(x: &Value) -> u64 {
    (x.as_f64().expect("a number") * 1000.0).round() as u64
}

/// pid → process name, and (pid, tid) → track name.
fn names(v: &Value) -> (BTreeMap<u64, String>, BTreeMap<(u64, u64), String>) {
    let (mut procs, mut tracks) = (BTreeMap::new(), BTreeMap::new());
    for e in v["traceEvents"].as_array().expect("events") {
        let (pid, tid, name) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap_or(0), e["args"]["name"].as_str());
        match (e["ph"].as_str(), e["name"].as_str()) {
            (Some("M"), Some("process_name")) => drop(procs.insert(pid, name.unwrap().to_string())),
            (Some("M"), Some("thread_name")) => drop(tracks.insert((pid, tid), name.unwrap().to_string())),
            _ => {}
        }
    }
    (procs, tracks)
}

/// (pid, tid) → its slices as (start ns, end ns), in time order.
fn slices(v: &Value) -> BTreeMap<(u64, u64), Vec<(u64, u64)>> {
    let mut out: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for e in v["traceEvents"].as_array().expect("events").iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (ns(&e["ts"]), ns(&e["dur"]));
        assert!(dur > 0, "empty slice {e}");
        out.entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())).or_default().push((ts, ts + dur));
    }
    for s in out.values_mut() {
        s.sort_unstable();
    }
    out
}

/// The checks every timeline passes: each pCPU track covers the window exactly, no track
/// overlaps itself, everything lies in the window. Returns the window.
fn check_tracks(v: &Value, cores: u32) -> (u64, u64) {
    let w = &v["otherData"]["window"];
    let (from, to) = (w["from_ns"].as_u64().unwrap(), w["to_ns"].as_u64().unwrap());
    let (procs, tracks) = names(v);
    assert_eq!(procs[&1], "host (pCPUs)");
    let all = slices(v);
    let mut pcpu_total = 0;
    for (key, s) in &all {
        for pair in s.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "track {} overlaps itself: {pair:?}", tracks[key]);
        }
        assert!(s.first().unwrap().0 >= from && s.last().unwrap().1 <= to, "track {} leaves the window", tracks[key]);
        if key.0 == 1 {
            let busy: u64 = s.iter().map(|(a, b)| b - a).sum();
            assert_eq!(busy, to - from, "{} does not cover the window", tracks[key]);
            pcpu_total += busy;
        }
    }
    assert_eq!(pcpu_total, u64::from(cores) * (to - from), "conservation: pCPU slices = cores × window");
    for e in v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "i") {
        let t = ns(&e["ts"]);
        assert!(t >= from && t < to, "point event outside the window: {e}");
    }
    (from, to)
}

fn count(v: &Value, ph: &str, cat: &str) -> usize {
    v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == ph && e["cat"] == cat).count()
}

#[test]
fn pcpu_tracks_conserve_time_in_every_scenario() {
    for scenario in ["native", "UC", "OC", "OC2"] {
        let (r, _, v) = record(&spec("heapchurn", scenario, 2), opts(0, Some(30_000_000), 1_000_000));
        let (from, to) = check_tracks(&v, r.run.cores);
        assert_eq!((from, to), (0, 30_000_000.min(r.run.duration_ns)), "{scenario}");
        let (procs, tracks) = names(&v);
        let vcpu_tracks = tracks.keys().filter(|(pid, _)| procs[pid].ends_with("(vCPUs)")).count();
        let vms = match scenario {
            "native" => 0,
            "UC" => 1,
            _ => 2,
        };
        assert_eq!(vcpu_tracks, vms * 2, "{scenario}: one track per vCPU");
        if scenario == "native" {
            assert!(procs.values().any(|p| p == "native0 (threads)"), "native threads get tracks");
        } else {
            assert!(count(&v, "i", "exit") > 0, "{scenario}: exits");
            assert!(count(&v, "i", "tlb") > 0, "{scenario}: shootdowns");
            assert!(count(&v, "i", "ipi") > 0 && count(&v, "s", "ipi") > 0 && count(&v, "f", "ipi") > 0, "{scenario}: IPIs");
        }
    }
}

#[test]
fn the_whole_run_can_be_recorded() {
    let (r, _, v) = record(&spec("lock", "OC", 2), opts(0, None, 10_000_000));
    let (_, to) = check_tracks(&v, r.run.cores);
    assert_eq!(to, r.run.duration_ns);
    assert_eq!(v["otherData"]["run_end_ns"].as_u64(), Some(r.run.duration_ns));
    assert!(v["otherData"]["truncated_at_ns"].is_null());
}

#[test]
fn a_window_in_the_middle_is_clipped() {
    let (r, _, v) = record(&spec("heapchurn", "OC", 2), opts(10_000_000, Some(20_000_000), 1_000_000));
    assert_eq!(check_tracks(&v, r.run.cores), (10_000_000, 20_000_000));
}

#[test]
fn the_event_cap_stops_recording_without_failing_the_run() {
    let (r, _, v) = record(&spec("heapchurn", "OC", 2), opts(0, None, 500));
    let at = v["otherData"]["truncated_at_ns"].as_u64().expect("truncated");
    assert!(at > 0 && at < r.run.duration_ns);
    assert_eq!(check_tracks(&v, r.run.cores), (0, at));
    // At most one more slice per track than the cap.
    assert!(v["otherData"]["events"].as_u64().unwrap() <= 500 + 10);
}

#[test]
fn recording_does_not_change_the_result() {
    for (wl, scenario) in [("heapchurn", "OC"), ("lock", "UC"), ("barrier", "OC2"), ("spinbarrier", "native")] {
        let text = spec(wl, scenario, 4);
        let mut plain = Plan::new(&text, "t.toml", &[]).unwrap();
        let a = plain.run_cell(0).unwrap();
        let (b, _, _) = record(&text, opts(0, None, 50_000));
        assert_eq!(a.run, b.run, "{wl} {scenario}: the run record");
        let strip = |r: &ScenarioResult| {
            let mut v = serde_json::to_value(r).unwrap();
            v.as_object_mut().unwrap().remove("wall_s");
            v
        };
        assert_eq!(strip(&a), strip(&b), "{wl} {scenario}: the result");
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let text = spec("heapchurn", "OC", 2);
    let (_, a, _) = record(&text, TimelineOptions::default());
    let (_, b, _) = record(&text, TimelineOptions::default());
    assert!(a == b, "two recordings of one cell differ");
    let other = text.replace("seeds = [1]", "seeds = [2]");
    let (_, c, _) = record(&other, TimelineOptions::default());
    assert!(a != c, "the seed changes the timeline");
}

#[test]
fn a_bad_window_is_an_error() {
    let mut plan = Plan::new(&spec("ep", "UC", 2), "t.toml", &[]).unwrap();
    let e = plan.run_cell_with_timeline(0, opts(5, Some(5), 10)).unwrap_err();
    assert!(e.error.message.contains("must be after its start") && e.partial.is_none(), "{e}");
    let e = plan.run_cell_with_timeline(0, opts(0, None, 0)).unwrap_err();
    assert!(e.error.message.contains("max_events") && e.partial.is_none(), "{e}");
}

#[test]
fn a_run_limit_returns_the_timeline_up_to_the_failure() {
    // The limit fires when the first event after 3 ms is due; the cores ran their leaves up to
    // the limit, so the timeline (window 0 until the run ends) covers every core exactly up to
    // 3 ms.
    let text = spec("lock", "OC", 2) + "[limits]\nmax_virtual_time = \"3ms\"\n";
    let mut plan = Plan::new(&text, "t.toml", &[]).unwrap();
    let e = plan.run_cell_with_timeline(0, opts(0, None, 1_000_000)).unwrap_err();
    assert!(e.error.message.contains("limits.max_virtual_time") && !e.error.interrupted, "{e}");
    let p = e.partial.expect("the timeline up to the failure");
    let v: Value = serde_json::from_str(&p.json).expect("valid JSON");
    assert_eq!(v["otherData"]["events"].as_u64(), Some(p.events));
    assert!(p.events > 0 && p.truncated_at_ns.is_none());
    let (from, to) = check_tracks(&v, 2);
    assert_eq!(from, 0);
    assert_eq!(to, 3_000_000, "the window ends at the limit");
}
