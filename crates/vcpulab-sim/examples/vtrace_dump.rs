//! Prints a summary of a vtrace file as JSON (or every record with `--records`).
//!
//! ```sh
//! cargo run --example vtrace_dump -- app.vtrace            # per process and thread: record counts by kind
//! cargo run --example vtrace_dump -- --records app.vtrace  # the whole trace
//! ```
//!
//! A file that cannot be read prints its one-line error on stderr and exits with status 1.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde_json::{json, Value};
use vcpulab_sim::trace::{self, Event, Trace};

fn summary(t: &Trace) -> Value {
    let processes: Vec<Value> = t
        .processes
        .iter()
        .map(|p| {
            let threads: Vec<Value> = p
                .threads
                .iter()
                .map(|th| {
                    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
                    for r in &th.records {
                        *kinds.entry(r.event.kind_name()).or_default() += 1;
                    }
                    let wait_ns: u64 = th
                        .records
                        .iter()
                        .map(|r| match r.event {
                            Event::MutexLock { wait_ns, .. }
                            | Event::SpinLock { wait_ns, .. }
                            | Event::RwReadLock { wait_ns, .. }
                            | Event::RwWriteLock { wait_ns, .. }
                            | Event::BarrierWait { wait_ns, .. }
                            | Event::CondWait { wait_ns, .. }
                            | Event::ThreadJoin { wait_ns, .. } => wait_ns,
                            _ => 0,
                        })
                        .sum();
                    json!({
                        "tid": th.tid,
                        "parent": th.parent,
                        "seq": th.seq,
                        "blocks": th.blocks,
                        "lost_blocks": th.lost_blocks,
                        "records": th.records.len(),
                        "first_t": th.records.first().map(|r| r.t),
                        "last_t": th.records.last().map(|r| r.t),
                        "last_cpu": th.records.iter().rev().find_map(|r| r.cpu),
                        "wait_ns": wait_ns,
                        "kinds": kinds,
                    })
                })
                .collect();
            json!({
                "pid": p.pid,
                "base_ns": p.base_ns,
                "ppid": p.start.as_ref().map(|s| s.ppid),
                "origin": p.start.as_ref().map(|s| format!("{:?}", s.origin).to_lowercase()),
                "cpus": p.start.as_ref().map(|s| s.cpus),
                "cmdline": p.start.as_ref().map(|s| s.cmdline.clone()),
                "kernel": p.start.as_ref().and_then(|s| s.kernel.clone()),
                "libc": p.start.as_ref().and_then(|s| s.libc.clone()),
                "threads": threads,
            })
        })
        .collect();
    json!({ "version": t.header.version, "creator_pid": t.header.creator_pid, "processes": processes })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let records = args.iter().any(|a| a == "--records");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [file] = files.as_slice() else {
        eprintln!("usage: vtrace_dump [--records] FILE.vtrace");
        return ExitCode::from(2);
    };
    match trace::read(file.as_str()) {
        Ok(t) => {
            let v = if records { serde_json::to_value(&t).unwrap_or(Value::Null) } else { summary(&t) };
            println!("{v:#}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
