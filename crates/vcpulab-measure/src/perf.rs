//! Counting perf events of a process tree (`perf_event_open(2)` through `perf-event2`).

use std::ffi::CString;
use std::fmt;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use perf_event::events::{Software, Tracepoint};
use perf_event::{Builder, Counter};

/// Where tracefs may be mounted, in the order tried.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// An event's count, or why it could not be counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventCount {
    /// The number of events while the process tree ran.
    Count(u64),
    /// The event could not be opened or read here (the reason, one line).
    Unavailable(String),
}

impl fmt::Display for EventCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventCount::Count(n) => write!(f, "{n}"),
            EventCount::Unavailable(why) => write!(f, "unavailable ({why})"),
        }
    }
}

/// Counters attached to one process (inherited by its threads and children).
#[derive(Debug)]
pub struct PerfCounters {
    events: Vec<(String, Result<Counter, String>)>,
}

impl PerfCounters {
    /// Opens a counter per event name on process `pid`, enabled when it next calls `exec`
    /// and inherited by every thread and child it creates afterwards. Attach while the
    /// process is stopped before its `exec`, so nothing is missed. Names: the software
    /// events `task-clock`, `context-switches`, `cpu-migrations`, `page-faults`, or a
    /// tracepoint `CATEGORY:NAME` (`syscalls:sys_enter_madvise`), optionally counted only
    /// where a tracefs filter on its fields holds: `CATEGORY:NAME if FILTER`
    /// (`syscalls:sys_enter_madvise if behavior == 4 || behavior == 8`; the filter syntax of
    /// the kernel's Documentation/trace/events.rst, set with `PERF_EVENT_IOC_SET_FILTER`).
    pub fn attach(pid: i32, names: &[&str]) -> PerfCounters {
        let events = names.iter().map(|&name| (name.to_string(), open(pid, name))).collect();
        PerfCounters { events }
    }

    /// The counts so far, in the order of the names given to [`attach`](Self::attach).
    pub fn read(&mut self) -> Vec<(String, EventCount)> {
        self.events
            .iter_mut()
            .map(|(name, c)| {
                let count = match c {
                    Ok(counter) => match counter.read() {
                        Ok(n) => EventCount::Count(n),
                        Err(e) => EventCount::Unavailable(format!("reading the counter failed: {e}")),
                    },
                    Err(why) => EventCount::Unavailable(why.clone()),
                };
                (name.clone(), count)
            })
            .collect()
    }
}

fn open(pid: i32, name: &str) -> Result<Counter, String> {
    let (name, filter) = match name.split_once(" if ") {
        Some((event, filter)) => (event.trim(), Some(filter.trim())),
        None => (name, None),
    };
    if filter.is_some() && !name.contains(':') {
        return Err(format!("'{name}': only a tracepoint can have a filter"));
    }
    let mut builder = if let Some((category, event)) = name.split_once(':') {
        Builder::new(Tracepoint::with_id(tracepoint_id(category, event)?))
    } else {
        let sw = match name {
            "task-clock" => Software::TASK_CLOCK,
            "context-switches" => Software::CONTEXT_SWITCHES,
            "cpu-migrations" => Software::CPU_MIGRATIONS,
            "page-faults" => Software::PAGE_FAULTS,
            _ => return Err(format!("unknown event '{name}' (expected a software event or CATEGORY:TRACEPOINT)")),
        };
        Builder::new(sw)
    };
    builder.observe_pid(pid).any_cpu().inherit(true).enable_on_exec(true).exclude_kernel(false).exclude_hv(true);
    let counter = builder.build().map_err(|e| match e.raw_os_error() {
        Some(1) | Some(13) => format!("not permitted: {e} (needs root or kernel.perf_event_paranoid <= 1)"),
        _ => format!("perf_event_open failed: {e}"),
    })?;
    if let Some(filter) = filter {
        set_filter(&counter, filter)?;
    }
    Ok(counter)
}

/// Counts only the events for which `filter` holds (`PERF_EVENT_IOC_SET_FILTER`).
fn set_filter(counter: &Counter, filter: &str) -> Result<(), String> {
    let text = CString::new(filter).map_err(|_| format!("filter '{filter}' contains a NUL byte"))?;
    // SAFETY: the descriptor is the counter's, open for as long as `counter` lives; the kernel
    // copies the NUL-terminated string (strndup_user) and does not write through the pointer.
    let rc = unsafe { perf_event_open_sys::ioctls::SET_FILTER(counter.as_raw_fd(), text.as_ptr().cast_mut()) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("the kernel refused filter '{filter}': {e}"));
    }
    Ok(())
}

/// The id of tracepoint `category:event` from tracefs.
fn tracepoint_id(category: &str, event: &str) -> Result<u64, String> {
    if category.is_empty() || event.is_empty() || [category, event].iter().any(|s| s.contains(['/', '.'])) {
        return Err(format!("malformed tracepoint name '{category}:{event}'"));
    }
    let candidates: Vec<PathBuf> =
        TRACEFS.iter().map(|root| Path::new(root).join("events").join(category).join(event).join("id")).collect();
    for path in &candidates {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text.trim().parse().map_err(|_| format!("{}: not a tracepoint id", path.display()));
        }
    }
    if !TRACEFS.iter().any(|root| Path::new(root).join("events").is_dir()) {
        return Err("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)".into());
    }
    Err(format!("no tracepoint {category}:{event} in this kernel"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_malformed_events_are_reported_not_raised() {
        let mut c = PerfCounters::attach(std::process::id() as i32, &["no-such-event", "syscalls:../x", ":"]);
        let got = c.read();
        assert_eq!(got.len(), 3);
        for (name, count) in got {
            assert!(matches!(count, EventCount::Unavailable(_)), "{name}: {count}");
        }
    }

    #[test]
    fn a_filter_needs_a_tracepoint_and_a_valid_expression() {
        let mut c = PerfCounters::attach(std::process::id() as i32, &["page-faults if x == 1"]);
        let got = c.read();
        assert!(matches!(&got[0].1, EventCount::Unavailable(why) if why.contains("only a tracepoint")), "{got:?}");
        // Where the tracepoint can be opened here, a filter on a field it lacks is refused.
        let mut c = PerfCounters::attach(std::process::id() as i32, &["syscalls:sys_enter_madvise if no_such_field == 1"]);
        match &c.read()[0].1 {
            EventCount::Unavailable(why) => {
                assert!(why.contains("refused") || why.contains("tracefs") || why.contains("permitted") || why.contains("failed"), "{why}")
            }
            EventCount::Count(n) => panic!("a bad filter was accepted ({n})"),
        }
    }

    #[test]
    fn a_missing_tracepoint_names_itself() {
        match tracepoint_id("syscalls", "sys_enter_no_such_call") {
            Err(why) => assert!(why.contains("sys_enter_no_such_call") || why.contains("tracefs"), "{why}"),
            Ok(id) => panic!("unexpected tracepoint id {id}"),
        }
    }
}
