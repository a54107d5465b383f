//! Parsing a workload definition (a TOML table) into a [`Workload`].
//!
//! The format is documented in `docs/workloads.md`. Parsing is done by hand from
//! `toml::Value` rather than with derived serde so that every error names the exact place
//! (`program[2].repeat.body[0].compute`) and what was expected there.

use indexmap::IndexMap;
use toml::Value;

use super::dist::{parse_duration, Dist};
use super::heap::{parse_size, HeapParams};
use super::program::{
    BarrierImpl, CountExpr, Group, Instr, KSpinImpl, Lane, Memory, Meta, MmCall, ObjDecl, ObjId, ObjKind, Program, Qos, QueueImpl, Share,
    Times, Workload, MODELS,
};

/// A parse error: the path inside the workload table and a message.
pub type ParseError = (String, String);

struct Ctx<'a> {
    params: &'a toml::Table,
    objects: IndexMap<String, ObjKind>,
    stochastic: bool,
    /// Default memory intensity of compute operations.
    mem: f32,
    /// Objects the group being compiled uses.
    used: Vec<ObjId>,
    /// Queues it pushes to, with their lane choice.
    pushes: Vec<(ObjId, Lane)>,
    /// Queues declared with lanes.
    laned: Vec<ObjId>,
    /// Queues it drains, with their lane choice.
    drains: Vec<(ObjId, Lane)>,
    /// Queues of the enclosing drain loops (innermost last).
    draining: Vec<ObjId>,
    /// Depth of enclosing `repeat` loops.
    loops: u32,
}

fn err<T>(path: &str, msg: impl Into<String>) -> Result<T, ParseError> {
    Err((path.to_string(), msg.into()))
}

fn type_name(v: &Value) -> &'static str {
    v.type_str()
}

/// Parses the workload `name` from its TOML table.
pub fn parse_workload(name: &str, v: &Value) -> Result<Workload, ParseError> {
    let Some(t) = v.as_table() else {
        return err("", format!("expected a table describing a workload (got {})", type_name(v)));
    };
    if t.contains_key("trace") {
        return parse_trace_workload(name, t);
    }
    const KEYS: [&str; 18] = [
        "description",
        "model",
        "processes",
        "threads",
        "params",
        "objects",
        "program",
        "groups",
        "heap",
        "version",
        "suite",
        "sync",
        "basis",
        "scalability_type",
        "kvm_overhead",
        "memory",
        "qos",
        "transform",
    ];
    for k in t.keys() {
        if !KEYS.contains(&k.as_str()) {
            return err(k, format!("unknown field '{k}' (expected one of {})", KEYS.join(", ")));
        }
    }
    let string = |k: &str| -> Result<String, ParseError> {
        match t.get(k) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(o) => err(k, format!("expected a string (got {})", type_name(o))),
        }
    };
    let strings = |k: &str| -> Result<Vec<String>, ParseError> {
        match t.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| v.as_str().map(String::from).ok_or_else(|| (format!("{k}[{i}]"), "expected a string".to_string())))
                .collect(),
            Some(o) => err(k, format!("expected a list of strings (got {})", type_name(o))),
        }
    };
    let description = string("description")?;
    let model = string("model")?;
    if !model.is_empty() && !MODELS.iter().any(|m| model == *m || model.starts_with(&format!("{m} "))) {
        return err("model", format!("unknown model '{model}' (expected one of {})", MODELS.join(", ")));
    }
    let empty = toml::Table::new();
    let params = match t.get("params") {
        None => &empty,
        Some(Value::Table(p)) => p,
        Some(o) => return err("params", format!("expected a table of parameters (got {})", type_name(o))),
    };
    for (k, pv) in params {
        check_param(k, pv)?;
    }
    // A parameter nothing refers to is a misspelling (`params.iteratons`): it would be
    // silently ignored.
    let used = params_used(t);
    for k in params.keys() {
        if !used.contains(k.as_str()) {
            let others: Vec<&str> = params.keys().map(String::as_str).filter(|p| used.contains(p)).collect();
            let hint = crate::spec::suggest::did_you_mean(k, others.iter().copied());
            let known = if others.is_empty() { "none".to_string() } else { others.join(", ") };
            return err(
                &format!("params.{k}"),
                format!("unknown parameter '{k}'{hint}: the workload never uses it (its parameters: {known})"),
            );
        }
    }
    let small = |k: &str, max: i64| -> Result<i64, ParseError> {
        match t.get(k) {
            None => Ok(0),
            Some(Value::Integer(i)) if (0..=max).contains(i) => Ok(*i),
            Some(o) => err(k, format!("expected an integer in 0..={max} (got {o})")),
        }
    };
    let meta = Meta {
        version: small("version", i64::from(u32::MAX))? as u32,
        suite: string("suite")?,
        sync: strings("sync")?,
        basis: string("basis")?,
        scalability_type: small("scalability_type", 4)? as u8,
        kvm_overhead: strings("kvm_overhead")?,
        hash: String::new(),
    };
    let threads = match t.get("threads") {
        None => None,
        Some(v) => Some(positive_u32(&resolve(params, v, "threads")?, "threads")?),
    };
    let heap = match t.get("heap") {
        None => HeapParams::default(),
        Some(Value::Table(h)) => parse_heap(params, h)?,
        Some(o) => return err("heap", format!("expected a table like {{ trim_threshold = \"128KiB\" }} (got {})", type_name(o))),
    };
    let processes = t.get("processes").map(|v| flag(v, "processes")).transpose()?.unwrap_or(false);
    let memory = match t.get("memory") {
        None => Memory::default(),
        Some(Value::Table(m)) => parse_memory(params, m)?,
        Some(o) => return err("memory", format!("expected a table like {{ intensity = 0.3 }} (got {})", type_name(o))),
    };
    let qos = match t.get("qos") {
        None => None,
        Some(Value::Table(q)) => Some(parse_qos(params, q)?),
        Some(o) => return err("qos", format!("expected a table like {{ good = \"5ms\", tolerable = \"20ms\" }} (got {})", type_name(o))),
    };
    let transform = match t.get("transform") {
        None => Transform::Keep,
        Some(Value::Table(x)) => parse_transform(params, x)?,
        Some(o) => return err("transform", format!("expected a table like {{ spin = \"block\" }} (got {})", type_name(o))),
    };
    let mut ctx = Ctx {
        params,
        objects: IndexMap::new(),
        stochastic: false,
        mem: memory.intensity,
        used: Vec::new(),
        pushes: Vec::new(),
        laned: Vec::new(),
        drains: Vec::new(),
        draining: Vec::new(),
        loops: 0,
    };
    let mut decls = Vec::new();
    match t.get("objects") {
        None => {}
        Some(Value::Table(objs)) => {
            for (oname, ov) in objs {
                let path = format!("objects.{oname}");
                let mut d = parse_object(params, ov, &path)?;
                d.name = oname.clone();
                transform.apply(&mut d);
                ctx.objects.insert(oname.clone(), d.kind);
                if d.lane_threads.is_some() {
                    ctx.laned.push(decls.len() as ObjId);
                }
                decls.push(d);
            }
        }
        Some(o) => return err("objects", format!("expected a table of named objects (got {})", type_name(o))),
    }
    // One group per `[[groups]]` entry, or one "main" group of n threads for `program`.
    let group_defs: Vec<(String, CountExpr, &Value, String)> = match (t.get("program"), t.get("groups")) {
        (Some(_), Some(_)) => return err("groups", "a workload has either a program (every thread runs it) or groups, not both"),
        (None, None) => return err("program", "missing: a workload needs a program (a list of operations) or groups"),
        (Some(p), None) => vec![("main".into(), CountExpr::N, p, "program".into())],
        (None, Some(Value::Array(gs))) if !gs.is_empty() => {
            let mut out = Vec::new();
            for (i, g) in gs.iter().enumerate() {
                let path = format!("groups[{i}]");
                let gt = sub_table(g, &path, &["name", "threads", "program"])?;
                let gname = match gt.get("name") {
                    Some(Value::String(s)) => s.clone(),
                    None => format!("group{i}"),
                    Some(o) => return err(&format!("{path}.name"), format!("expected a string (got {})", type_name(o))),
                };
                if out.iter().any(|(n, ..): &(String, CountExpr, &Value, String)| *n == gname) {
                    return err(&format!("{path}.name"), format!("duplicate group name '{gname}'"));
                }
                let count = match gt.get("threads") {
                    None => CountExpr::N,
                    Some(v) => count_expr(params, v, &format!("{path}.threads"))?,
                };
                let prog = gt.get("program").ok_or_else(|| (format!("{path}.program"), "missing".to_string()))?;
                out.push((gname, count, prog, format!("{path}.program")));
            }
            out
        }
        (None, Some(o)) => {
            return err("groups", format!("expected a non-empty list of {{ name, threads, program }} tables (got {})", type_name(o)))
        }
    };
    let mut instrs = Vec::new();
    let mut groups = Vec::new();
    for (gi, (gname, count, prog, path)) in group_defs.into_iter().enumerate() {
        let entry = instrs.len() as u32;
        ctx.used.clear();
        ctx.pushes.clear();
        ctx.drains.clear();
        compile_block(&mut ctx, prog, &path, &mut instrs)?;
        instrs.push(Instr::End);
        for &o in &ctx.used {
            if !decls[o as usize].users.contains(&(gi as u32)) {
                decls[o as usize].users.push(gi as u32);
            }
        }
        let mut pushes = ctx.pushes.clone();
        pushes.sort_unstable();
        pushes.dedup();
        let mut drains = ctx.drains.clone();
        drains.sort_unstable();
        drains.dedup();
        groups.push(Group { name: gname, threads: count, entry, pushes, drains, created: false, fault_budget: None });
    }
    check_queues(&decls, &groups)?;
    Ok(Workload {
        name: name.to_string(),
        description,
        model,
        threads,
        objects: decls,
        program: Program { instrs },
        groups,
        meta,
        memory,
        qos,
        stochastic: ctx.stochastic,
        heap,
        processes,
        main_thread: None,
    })
}

/// Every queue needs a producer and a consumer, and the stage graph (a group that pushes to a
/// queue another group drains) must be acyclic: a cycle could never close its queues.
fn check_queues(decls: &[ObjDecl], groups: &[Group]) -> Result<(), ParseError> {
    let drains = |g: &Group, q: ObjId| g.drains.iter().any(|(d, _)| *d == q);
    for (q, d) in decls.iter().enumerate().filter(|(_, d)| d.kind == ObjKind::Queue) {
        let q = q as ObjId;
        let pushed = groups.iter().any(|g| g.pushes.iter().any(|(p, _)| *p == q));
        let drained = groups.iter().any(|g| drains(g, q));
        if !pushed || !drained {
            let what = if pushed { "drains" } else { "pushes to" };
            return err(&format!("objects.{}", d.name), format!("no group {what} queue '{}'", d.name));
        }
    }
    // Depth-first search for a cycle over group → group edges.
    let edges: Vec<Vec<usize>> =
        groups.iter().map(|g| (0..groups.len()).filter(|&h| g.pushes.iter().any(|&(q, _)| drains(&groups[h], q))).collect()).collect();
    fn visit(g: usize, edges: &[Vec<usize>], state: &mut [u8], stack: &mut Vec<usize>) -> Option<Vec<usize>> {
        state[g] = 1;
        stack.push(g);
        for &h in &edges[g] {
            if state[h] == 1 {
                let at = stack.iter().position(|&x| x == h).expect("on the stack");
                let mut cycle = stack[at..].to_vec();
                cycle.push(h);
                return Some(cycle);
            }
            if state[h] == 0 {
                if let Some(c) = visit(h, edges, state, stack) {
                    return Some(c);
                }
            }
        }
        stack.pop();
        state[g] = 2;
        None
    }
    let mut state = vec![0u8; groups.len()];
    for g in 0..groups.len() {
        if state[g] == 0 {
            if let Some(cycle) = visit(g, &edges, &mut state, &mut Vec::new()) {
                let names: Vec<&str> = cycle.iter().map(|&i| groups[i].name.as_str()).collect();
                let path = if groups.len() > 1 { format!("groups[{}]", cycle[0]) } else { "program".into() };
                return err(
                    &path,
                    format!(
                        "a cycle in the pipeline stages: {} (a stage would wait for its own output and its queues could never close)",
                        names.join(" -> ")
                    ),
                );
            }
        }
    }
    Ok(())
}

/// A parameter is a value or `{ value, estimate, source }`.
fn check_param(k: &str, v: &Value) -> Result<(), ParseError> {
    let Value::Table(t) = v else { return Ok(()) };
    let path = format!("params.{k}");
    for key in t.keys() {
        if !["value", "estimate", "source"].contains(&key.as_str()) {
            return err(&format!("{path}.{key}"), "unknown field (expected value, estimate, source)");
        }
    }
    if !t.contains_key("value") {
        return err(&format!("{path}.value"), "missing: a sourced parameter is { value = ..., estimate = ..., source = \"...\" }");
    }
    if let Some(e) = t.get("estimate") {
        if !e.is_bool() {
            return err(&format!("{path}.estimate"), "expected true or false");
        }
        let sourced = t.get("source").and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty());
        if !sourced {
            return err(
                &format!("{path}.source"),
                "missing: say where the value comes from (paper, code, measurement, or \"estimate: ...\")",
            );
        }
    }
    if let Some(s) = t.get("source") {
        if !s.is_str() {
            return err(&format!("{path}.source"), "expected a string");
        }
    }
    Ok(())
}

/// A thread count: an integer, or an expression of n like "n", "3n+2", "n/2".
fn count_expr(params: &toml::Table, v: &Value, path: &str) -> Result<CountExpr, ParseError> {
    let r = resolve(params, v, path)?;
    via_param(
        v,
        match r {
            Value::Integer(i) if i >= 1 && i <= i64::from(u32::MAX) => Ok(CountExpr::fixed(i as u32)),
            Value::String(s) => CountExpr::parse(&s)
                .ok_or_else(|| (path.to_string(), format!("expected a thread count like 4, \"n\", \"3n+2\" or \"n/2\" (got \"{s}\")"))),
            o => err(path, format!("expected a thread count like 4, \"n\", \"3n+2\" or \"n/2\" (got {o})")),
        },
    )
}

/// A 0..=1 fraction.
fn fraction(params: &toml::Table, v: &Value, path: &str) -> Result<f32, ParseError> {
    let r = resolve(params, v, path)?;
    via_param(
        v,
        match r {
            Value::Float(f) if (0.0..=1.0).contains(&f) => Ok(f as f32),
            Value::Integer(i) if (0..=1).contains(&i) => Ok(i as f32),
            o => err(path, format!("expected a number between 0 and 1 (got {o})")),
        },
    )
}

fn parse_memory(params: &toml::Table, m: &toml::Table) -> Result<Memory, ParseError> {
    let mut out = Memory::default();
    for (k, v) in m {
        let path = format!("memory.{k}");
        match k.as_str() {
            "intensity" => out.intensity = fraction(params, v, &path)?,
            "bandwidth" => out.bandwidth = fraction(params, v, &path)?,
            "numa" => out.numa = fraction(params, v, &path)?,
            "sharing" => out.sharing = fraction(params, v, &path)?,
            "footprint" => out.footprint = size(params, v, &path)?,
            "first_touch" => {
                out.main_first_touch = match resolve(params, v, &path)? {
                    Value::String(s) if s == "main" => true,
                    Value::String(s) if s == "threads" => false,
                    o => return err(&path, format!("expected \"threads\" or \"main\" (got {o})")),
                }
            }
            _ => return err(&path, "unknown field (expected intensity, footprint, bandwidth, numa, sharing, first_touch)"),
        }
    }
    Ok(out)
}

fn parse_qos(params: &toml::Table, q: &toml::Table) -> Result<Qos, ParseError> {
    for k in q.keys() {
        if k != "good" && k != "tolerable" {
            return err(&format!("qos.{k}"), "unknown field (expected good, tolerable)");
        }
    }
    let get = |k: &str| q.get(k).ok_or_else(|| (format!("qos.{k}"), "missing".to_string()));
    let good = duration(params, get("good")?, "qos.good")?;
    let tolerable = duration(params, get("tolerable")?, "qos.tolerable")?;
    if good == 0 || tolerable < good {
        return err("qos.tolerable", format!("expected 0 < good <= tolerable (got good {good} ns, tolerable {tolerable} ns)"));
    }
    Ok(Qos { good, tolerable })
}

/// An application-level mitigation applied to the objects as the workload loads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Transform {
    Keep,
    Block,
    SpinThenBlock(u64),
}

impl Transform {
    fn apply(self, d: &mut ObjDecl) {
        let user_spin = matches!(d.kind, ObjKind::SpinLock) || d.spin.is_some();
        if !user_spin || self == Transform::Keep {
            return;
        }
        if d.kind == ObjKind::SpinLock {
            d.kind = ObjKind::Mutex;
            d.spin = Some(u64::MAX);
        }
        d.spin = match self {
            Transform::Block => None,
            Transform::SpinThenBlock(b) => d.spin.map(|s| if s == u64::MAX { b } else { s }),
            Transform::Keep => d.spin,
        };
    }
}

fn parse_transform(params: &toml::Table, x: &toml::Table) -> Result<Transform, ParseError> {
    for k in x.keys() {
        if k != "spin" && k != "spin_budget" {
            return err(&format!("transform.{k}"), "unknown field (expected spin, spin_budget)");
        }
    }
    let budget = match x.get("spin_budget") {
        None => 50_000,
        Some(v) => duration(params, v, "transform.spin_budget")?.max(1),
    };
    match x.get("spin").map(|v| resolve(params, v, "transform.spin")).transpose()? {
        None => Ok(Transform::Keep),
        Some(Value::String(s)) => match s.as_str() {
            "keep" => Ok(Transform::Keep),
            "block" => Ok(Transform::Block),
            "spin_then_block" => Ok(Transform::SpinThenBlock(budget)),
            o => err("transform.spin", format!("unknown transform '{o}' (expected keep, block or spin_then_block)")),
        },
        Some(o) => err("transform.spin", format!("expected \"keep\", \"block\" or \"spin_then_block\" (got {o})")),
    }
}

/// The `heap` table: glibc's allocator tunables. Setting any of them turns the dynamic
/// thresholds off, as `mallopt` / `GLIBC_TUNABLES` do.
/// `[workloads.NAME] trace = "app.vtrace"` (or an xz-compressed `app.vtrace.xz`): a traced real
/// program replayed ([`super::replay`]); optional `pid` (which process of the trace), `heap` (the allocator
/// tunables the replay runs with) and `spinlocks = "spin-then-block"` (its spin locks spin
/// briefly, then block: the mitigation of user spinning). The workload's hash covers the
/// trace's bytes.
fn parse_trace_workload(name: &str, t: &toml::Table) -> Result<Workload, ParseError> {
    const KEYS: [&str; 5] = ["trace", "pid", "heap", "spinlocks", "description"];
    for k in t.keys() {
        if !KEYS.contains(&k.as_str()) {
            return err(k, format!("unknown field '{k}' for a traced workload (expected one of {})", KEYS.join(", ")));
        }
    }
    let Some(Value::String(path)) = t.get("trace") else {
        return err("trace", "expected the path of a trace file (vcpulab trace -o FILE -- PROGRAM)");
    };
    let pid = match t.get("pid") {
        None => None,
        Some(Value::Integer(p)) if (1..=i64::from(u32::MAX)).contains(p) => Some(*p as u32),
        Some(o) => return err("pid", format!("expected a process id (got {o})")),
    };
    let heap = match t.get("heap") {
        None => HeapParams::default(),
        Some(Value::Table(h)) => parse_heap(&toml::Table::new(), h)?,
        Some(o) => return err("heap", format!("expected a table like {{ trim_threshold = \"128KiB\" }} (got {})", type_name(o))),
    };
    // The kernel work the replay takes out of the traced compute is the default C library's
    // (the simulation then runs the kernel's own, `tcache_bytes`).
    let heap = HeapParams { tcache: u64::from(crate::spec::kernel::KernelSpec::default().tcache_bytes), ..heap };
    let spin_then_block = match t.get("spinlocks") {
        None => None,
        Some(Value::String(m)) if m == "spin" => None,
        Some(Value::String(m)) if m == "spin-then-block" => Some(super::replay::SPIN_THEN_BLOCK_NS),
        Some(o) => return err("spinlocks", format!("expected \"spin\" or \"spin-then-block\" (got {o})")),
    };
    // An xz-compressed file is decompressed by the reader; the hash is of the file as stored.
    let bytes = crate::trace::read_bytes(path).map_err(|e| match e.kind {
        crate::trace::TraceErrorKind::Io(m) => ("trace".to_string(), format!("cannot read trace file '{path}': {m}")),
        _ => ("trace".to_string(), e.to_string()),
    })?;
    let trace = crate::trace::from_bytes_named(path, &bytes).map_err(|e| ("trace".to_string(), e.to_string()))?;
    let opts = super::replay::Options { pid, heap, spin_then_block, tracer_record_ns: super::replay::TRACER_RECORD_NS };
    let (mut w, _) = super::replay::from_trace(name, &trace, &opts).map_err(|m| ("trace".to_string(), m))?;
    if let Some(Value::String(d)) = t.get("description") {
        w.description = d.clone();
    }
    use sha2::{Digest, Sha256};
    w.meta.hash = Sha256::digest(&bytes).iter().take(8).map(|b| format!("{b:02x}")).collect();
    Ok(w)
}

fn parse_heap(params: &toml::Table, h: &toml::Table) -> Result<HeapParams, ParseError> {
    let mut p = HeapParams::default();
    for (k, v) in h {
        let path = format!("heap.{k}");
        let bytes = size(params, v, &path)?;
        match k.as_str() {
            "trim_threshold" => p.trim_threshold = bytes,
            "top_pad" => p.top_pad = bytes,
            "mmap_threshold" => p.mmap_threshold = bytes.max(1),
            // Where the heap starts, not a tunable: the thresholds stay dynamic.
            "mprotect_size" => {
                p.mprotect_size = bytes;
                continue;
            }
            _ => return err(&path, format!("unknown field '{k}' (expected trim_threshold, top_pad, mmap_threshold or mprotect_size)")),
        }
        p.dynamic = false;
    }
    Ok(p)
}

/// A byte size: a string like "64KiB" or an integer number of bytes, possibly a `$param`.
fn size(params: &toml::Table, v: &Value, path: &str) -> Result<u64, ParseError> {
    let r = resolve(params, v, path)?;
    via_param(
        v,
        match r {
            Value::Integer(i) if i >= 0 => Ok(i as u64),
            Value::String(s) => parse_size(&s).map_err(|m| (path.to_string(), m)),
            o => err(path, format!("expected a size like '64KiB' or an integer number of bytes (got {})", type_name(&o))),
        },
    )
}

/// Drops the parameters of a built-in profile that a spec's patches (`[workloads.NAME]`
/// without a program, `--set workloads.NAME...`) left unused: setting
/// `workloads.ebizzy.heap.mmap_threshold` replaces the `"$mmap_threshold"` that read
/// `params.mmap_threshold`, which is then no misspelling of the user's. `table` is the patched
/// profile, `builtin` the built-in's own. A parameter with a value of the user's (absent from
/// the built-in or different) stays, so [`parse_workload`] still reports a misspelt one.
pub(crate) fn drop_params_unused_after_patch(table: &mut toml::Table, builtin: &toml::Table) {
    let used: std::collections::BTreeSet<String> = params_used(table).into_iter().map(String::from).collect();
    let own = builtin.get("params").and_then(Value::as_table);
    if let Some(Value::Table(params)) = table.get_mut("params") {
        params.retain(|k, v| used.contains(k) || own.and_then(|o| o.get(k)) != Some(v));
    }
}

/// The parameters a profile refers to (`"$NAME"`) outside its `params` table.
fn params_used(t: &toml::Table) -> std::collections::BTreeSet<&str> {
    let mut used = std::collections::BTreeSet::new();
    for (k, v) in t {
        if k != "params" {
            collect_refs(v, &mut used);
        }
    }
    used
}

/// Adds every parameter name referred to (`"$NAME"`) anywhere in `v` to `out`.
fn collect_refs<'a>(v: &'a Value, out: &mut std::collections::BTreeSet<&'a str>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        Value::Table(t) => t.values().for_each(|x| collect_refs(x, out)),
        v => out.extend(param_ref(v)),
    }
}

/// The `params.NAME` a `"$NAME"` reference points to, if `v` is one.
fn param_ref(v: &Value) -> Option<&str> {
    v.as_str().and_then(|s| s.strip_prefix('$'))
}

/// Appends "(value of params.NAME)" to errors about a value that came from a parameter, so
/// the message (and the spec layer's blame) names the parameter, not only its use.
fn via_param<T>(v: &Value, r: Result<T, ParseError>) -> Result<T, ParseError> {
    match (param_ref(v), r) {
        (Some(name), Err((path, msg))) if !msg.contains("unknown parameter") => Err((path, format!("{msg} (value of params.{name})"))),
        (_, r) => r,
    }
}

/// Follows a `"$name"` reference into `params` (one level).
fn resolve<'a>(params: &'a toml::Table, v: &'a Value, path: &str) -> Result<Value, ParseError> {
    if let Value::String(s) = v {
        if let Some(p) = s.strip_prefix('$') {
            return match params.get(p) {
                Some(Value::Table(t)) if t.contains_key("value") => Ok(t["value"].clone()),
                Some(pv) => Ok(pv.clone()),
                None => {
                    let known: Vec<&str> = params.keys().map(String::as_str).collect();
                    err(
                        path,
                        format!("unknown parameter '${p}' (params: {})", if known.is_empty() { "none".into() } else { known.join(", ") }),
                    )
                }
            };
        }
    }
    Ok(v.clone())
}

fn positive_u32(v: &Value, path: &str) -> Result<u32, ParseError> {
    match v {
        Value::Integer(i) if *i >= 1 && *i <= u32::MAX as i64 => Ok(*i as u32),
        Value::Integer(i) => err(path, format!("expected an integer >= 1 (got {i})")),
        o => err(path, format!("expected an integer >= 1 (got {})", type_name(o))),
    }
}

/// A loop's iteration count: a non-negative integer, or a count of n like `"n"` or `"2n"`.
fn loop_times(params: &toml::Table, v: &Value, path: &str) -> Result<Times, ParseError> {
    match resolve(params, v, path)? {
        Value::String(s) => via_param(
            v,
            CountExpr::parse(&s).filter(|e| !e.fixed).map(Times::PerN).ok_or_else(|| {
                (path.to_string(), format!("expected a non-negative integer or a count of n like \"n\" or \"2n\" (got \"{s}\")"))
            }),
        ),
        _ => count(params, v, path).map(Times::Fixed),
    }
}

fn count(params: &toml::Table, v: &Value, path: &str) -> Result<u64, ParseError> {
    via_param(v, count_resolved(params, v, path))
}

fn count_resolved(params: &toml::Table, v: &Value, path: &str) -> Result<u64, ParseError> {
    match resolve(params, v, path)? {
        Value::Integer(i) if i >= 0 => Ok(i as u64),
        Value::Integer(i) => err(path, format!("expected a non-negative integer (got {i})")),
        o => err(path, format!("expected a non-negative integer (got {})", type_name(&o))),
    }
}

fn duration(params: &toml::Table, v: &Value, path: &str) -> Result<u64, ParseError> {
    via_param(v, duration_resolved(params, v, path))
}

fn duration_resolved(params: &toml::Table, v: &Value, path: &str) -> Result<u64, ParseError> {
    match resolve(params, v, path)? {
        Value::Integer(i) if i >= 0 => Ok(i as u64),
        Value::Integer(i) => err(path, format!("expected a non-negative duration like '50us' or an integer number of ns (got {i})")),
        Value::Float(f) if f >= 0.0 && f.is_finite() => Ok(f.round() as u64),
        Value::Float(f) => err(path, format!("expected a non-negative duration (got {f})")),
        Value::String(s) => parse_duration(&s).map_err(|m| (path.to_string(), m)),
        o => err(path, format!("expected a duration like '50us' or an integer number of ns (got {})", type_name(&o))),
    }
}

fn dist(ctx: &mut Ctx<'_>, v: &Value, path: &str) -> Result<Dist, ParseError> {
    let v = resolve(ctx.params, v, path)?;
    let Value::Table(t) = &v else {
        return Ok(Dist::Fixed(duration(ctx.params, &v, path)?));
    };
    if t.len() != 1 {
        return err(path, "expected one distribution: fixed, exp, uniform, normal or lognormal");
    }
    let (k, a) = t.iter().next().expect("one entry");
    let p = format!("{path}.{k}");
    let d = match k.as_str() {
        "fixed" => Dist::Fixed(duration(ctx.params, a, &p)?),
        "exp" => Dist::Exp { mean: duration(ctx.params, a, &p)? as f64 },
        "uniform" => {
            let arr = a.as_array().filter(|a| a.len() == 2);
            let Some(arr) = arr else { return err(&p, "expected [low, high]") };
            let lo = duration(ctx.params, &arr[0], &format!("{p}[0]"))?;
            let hi = duration(ctx.params, &arr[1], &format!("{p}[1]"))?;
            if hi < lo {
                return err(&p, format!("high ({hi} ns) is below low ({lo} ns)"));
            }
            Dist::Uniform { lo, hi }
        }
        "normal" | "lognormal" => {
            let Some(mt) = a.as_table() else { return err(&p, "expected { mean = ..., sd = ... }") };
            for key in mt.keys() {
                if key != "mean" && key != "sd" {
                    return err(&format!("{p}.{key}"), "unknown field (expected mean, sd)");
                }
            }
            let get = |key: &str| mt.get(key).ok_or_else(|| (format!("{p}.{key}"), "missing".to_string()));
            let mean = duration(ctx.params, get("mean")?, &format!("{p}.mean"))? as f64;
            let sd = duration(ctx.params, get("sd")?, &format!("{p}.sd"))? as f64;
            if k == "lognormal" && mean <= 0.0 {
                return err(&format!("{p}.mean"), "a log-normal needs a positive mean");
            }
            if k == "normal" {
                Dist::Normal { mean, sd }
            } else {
                Dist::LogNormal { mean, sd }
            }
        }
        other => return err(&p, format!("unknown distribution '{other}' (expected fixed, exp, uniform, normal or lognormal)")),
    };
    if !d.is_deterministic() {
        ctx.stochastic = true;
    }
    Ok(d)
}

/// The option named by `v` (a string, or a `"$param"` naming one), from `options` (name, value).
fn one_of<T: Copy>(params: &toml::Table, v: &Value, path: &str, options: &[(&str, T)]) -> Result<T, ParseError> {
    let names = options.iter().map(|(n, _)| format!("\"{n}\"")).collect::<Vec<_>>().join(" or ");
    match resolve(params, v, path)? {
        Value::String(s) => match options.iter().find(|(n, _)| *n == s) {
            Some(&(_, o)) => Ok(o),
            None => err(path, format!("expected {names} (got '{s}')")),
        },
        o => err(path, format!("expected {names} (got {})", type_name(&o))),
    }
}

fn parse_object(params: &toml::Table, v: &Value, path: &str) -> Result<ObjDecl, ParseError> {
    let kinds = "mutex, spinlock, kspinlock, barrier, spin_barrier, condvar, queue";
    let kind_of =
        |s: &str, p: &str| ObjKind::parse(s).ok_or_else(|| (p.to_string(), format!("unknown object kind '{s}' (expected one of {kinds})")));
    let mut d = ObjDecl {
        name: String::new(),
        kind: ObjKind::Mutex,
        parties: None,
        spin: None,
        capacity: None,
        lane_threads: None,
        barrier_impl: BarrierImpl::Futex,
        queue_impl: QueueImpl::Pthread,
        kspin_impl: KSpinImpl::Spinlock,
        users: Vec::new(),
    };
    match v {
        Value::String(s) => d.kind = kind_of(s, path)?,
        Value::Table(t) => {
            for k in t.keys() {
                if !["kind", "parties", "spin", "capacity", "lane_threads", "impl"].contains(&k.as_str()) {
                    return err(&format!("{path}.{k}"), "unknown field (expected kind, parties, spin, capacity, lane_threads, impl)");
                }
            }
            let Some(Value::String(ks)) = t.get("kind") else {
                return err(&format!("{path}.kind"), format!("missing or not a string (expected one of {kinds})"));
            };
            d.kind = kind_of(ks, &format!("{path}.kind"))?;
            if let Some(p) = t.get("parties") {
                if !matches!(d.kind, ObjKind::Barrier | ObjKind::SpinBarrier) {
                    return err(&format!("{path}.parties"), "only barriers have parties");
                }
                d.parties = Some(positive_u32(&resolve(params, p, path)?, &format!("{path}.parties"))?);
            }
            if let Some(sp) = t.get("spin") {
                if !matches!(d.kind, ObjKind::Barrier | ObjKind::Mutex) {
                    return err(&format!("{path}.spin"), "only mutexes and barriers take a spin budget");
                }
                let p = format!("{path}.spin");
                d.spin = match resolve(params, sp, &p)? {
                    Value::String(s) if s == "forever" => Some(u64::MAX),
                    _ => match duration(params, sp, &p)? {
                        0 => None,
                        ns => Some(ns),
                    },
                };
            }
            if let Some(i) = t.get("impl") {
                let p = format!("{path}.impl");
                match d.kind {
                    ObjKind::Queue => {
                        d.queue_impl = one_of(params, i, &p, &[("pthread", QueueImpl::Pthread), ("socket", QueueImpl::Socket)])?
                    }
                    ObjKind::KSpinLock => {
                        d.kspin_impl = one_of(params, i, &p, &[("spinlock", KSpinImpl::Spinlock), ("bit", KSpinImpl::Bit)])?
                    }
                    ObjKind::Barrier => {
                        d.barrier_impl = one_of(params, i, &p, &[("futex", BarrierImpl::Futex), ("condvar", BarrierImpl::Condvar)])?
                    }
                    _ => return err(&p, "only blocking barriers, queues and kernel spinlocks have an impl"),
                }
                if d.barrier_impl == BarrierImpl::Condvar && d.spin.is_some() {
                    return err(&p, "a condvar barrier blocks at once: it takes no spin budget");
                }
            }
            if let Some(c) = t.get("capacity") {
                if d.kind != ObjKind::Queue {
                    return err(&format!("{path}.capacity"), "only queues have a capacity");
                }
                let p = format!("{path}.capacity");
                d.capacity = Some(positive_u32(&resolve(params, c, &p)?, &p)?);
            }
            if let Some(c) = t.get("lane_threads") {
                if d.kind != ObjKind::Queue {
                    return err(&format!("{path}.lane_threads"), "only queues have lanes");
                }
                let p = format!("{path}.lane_threads");
                d.lane_threads = Some(positive_u32(&resolve(params, c, &p)?, &p)?);
            }
        }
        o => {
            return err(
                path,
                format!("expected an object kind like \"mutex\" or {{ kind = \"barrier\", parties = 4 }} (got {})", type_name(o)),
            )
        }
    }
    if d.kind == ObjKind::SpinBarrier {
        // A spin barrier is a barrier that never stops spinning.
        d.kind = ObjKind::Barrier;
        d.spin = Some(u64::MAX);
    }
    Ok(d)
}

fn object(ctx: &Ctx<'_>, v: &Value, path: &str, want: &[ObjKind]) -> Result<ObjId, ParseError> {
    let Value::String(name) = v else {
        return err(path, format!("expected the name of a declared object (got {})", type_name(v)));
    };
    let Some((idx, _, kind)) = ctx.objects.get_full(name) else {
        let known: Vec<&str> = ctx.objects.keys().map(String::as_str).collect();
        return err(
            path,
            format!(
                "unknown object '{name}' (declared: {})",
                if known.is_empty() { "none; declare it under objects".into() } else { known.join(", ") }
            ),
        );
    };
    if !want.contains(kind) {
        let names: Vec<&str> = want.iter().map(|k| k.name()).collect();
        return err(path, format!("object '{name}' is a {} but this operation needs a {}", kind.name(), names.join(" or ")));
    }
    Ok(idx as ObjId)
}

/// [`object`], recording that the group being compiled uses it.
fn use_object(ctx: &mut Ctx<'_>, v: &Value, path: &str, want: &[ObjKind]) -> Result<ObjId, ParseError> {
    let o = object(ctx, v, path, want)?;
    if !ctx.used.contains(&o) {
        ctx.used.push(o);
    }
    Ok(o)
}

/// A byte-size distribution: a size, `{ fixed = SIZE }` or `{ uniform = [LOW, HIGH] }`.
fn size_dist(ctx: &mut Ctx<'_>, v: &Value, path: &str) -> Result<Dist, ParseError> {
    let r = resolve(ctx.params, v, path)?;
    let Value::Table(t) = &r else { return Ok(Dist::Fixed(size(ctx.params, v, path)?.max(1))) };
    match t.iter().next() {
        Some((k, a)) if t.len() == 1 && k == "fixed" => Ok(Dist::Fixed(size(ctx.params, a, &format!("{path}.fixed"))?.max(1))),
        Some((k, a)) if t.len() == 1 && k == "uniform" => {
            let p = format!("{path}.uniform");
            let Some(arr) = a.as_array().filter(|a| a.len() == 2) else { return err(&p, "expected [low, high]") };
            let lo = size(ctx.params, &arr[0], &format!("{p}[0]"))?.max(1);
            let hi = size(ctx.params, &arr[1], &format!("{p}[1]"))?;
            if hi < lo {
                return err(&p, format!("high ({hi} bytes) is below low ({lo} bytes)"));
            }
            ctx.stochastic = true;
            Ok(Dist::Uniform { lo, hi })
        }
        _ => err(path, "expected a size like \"64KiB\", { fixed = SIZE } or { uniform = [LOW, HIGH] }"),
    }
}

const OPS: &str = "compute, sleep, lock, unlock, spin_lock, spin_unlock, kspin_lock, kspin_unlock, barrier, arrive, cond_wait, cond_signal, cond_broadcast, push, drain, respond, malloc, free, fault, munmap, madvise, mprotect, membarrier, repeat, single, serial, subset";

/// The lane of a `push` or drain: `"own"` (the default) or `"rotate"`, only on a queue
/// declared with `lane_threads`.
fn lane(ctx: &Ctx<'_>, q: ObjId, v: Option<&Value>, path: &str) -> Result<Lane, ParseError> {
    let Some(v) = v else { return Ok(Lane::Own) };
    let Some(l) = v.as_str().and_then(Lane::parse) else {
        return err(path, format!("expected \"own\" or \"rotate\" (got {v})"));
    };
    if !ctx.laned.contains(&q) {
        return err(path, "only a queue declared with lane_threads has lanes to choose");
    }
    Ok(l)
}

fn compile_block(ctx: &mut Ctx<'_>, v: &Value, path: &str, out: &mut Vec<Instr>) -> Result<(), ParseError> {
    let Some(ops) = v.as_array() else {
        return err(path, format!("expected a list of operations (got {})", type_name(v)));
    };
    for (i, op) in ops.iter().enumerate() {
        compile_op(ctx, op, &format!("{path}[{i}]"), out)?;
    }
    Ok(())
}

fn sub_table<'v>(v: &'v Value, path: &str, keys: &[&str]) -> Result<&'v toml::Table, ParseError> {
    let Some(t) = v.as_table() else {
        return err(path, format!("expected a table with {} (got {})", keys.join(", "), type_name(v)));
    };
    for k in t.keys() {
        if !keys.contains(&k.as_str()) {
            return err(&format!("{path}.{k}"), format!("unknown field (expected {})", keys.join(", ")));
        }
    }
    Ok(t)
}

/// Modifiers an operation accepts beside its own key.
const MODIFIERS: &[(&str, &[&str])] = &[("compute", &["skew", "mem", "split"]), ("push", &["lane"]), ("lock", &["spin"])];

fn flag(v: &Value, path: &str) -> Result<bool, ParseError> {
    v.as_bool().ok_or_else(|| (path.to_string(), format!("expected true or false (got {})", type_name(v))))
}

fn compile_op(ctx: &mut Ctx<'_>, op: &Value, path: &str, out: &mut Vec<Instr>) -> Result<(), ParseError> {
    let usage = || (path.to_string(), format!("expected an operation like {{ compute = \"50us\" }} (one of {OPS})"));
    let Some(t) = op.as_table() else { return Err(usage()) };
    let Some((name, a)) = t.iter().find(|(k, _)| !MODIFIERS.iter().any(|(_, ms)| ms.contains(&k.as_str()))) else {
        return Err(usage());
    };
    let allowed: &[&str] = MODIFIERS.iter().find(|(op, _)| op == name).map(|(_, m)| *m).unwrap_or(&[]);
    for k in t.keys().filter(|k| *k != name) {
        if !allowed.contains(&k.as_str()) {
            let what =
                if allowed.is_empty() { format!("'{name}' takes no modifiers") } else { format!("'{name}' takes {}", allowed.join(", ")) };
            return err(&format!("{path}.{k}"), format!("unexpected key beside the operation ({what}); one operation per table"));
        }
    }
    let p = format!("{path}.{name}");
    use ObjKind as K;
    let instr = match name.as_str() {
        "compute" => {
            let skew = t.get("skew").map(|v| fraction(ctx.params, v, &format!("{path}.skew"))).transpose()?.unwrap_or(0.0);
            let mem = t.get("mem").map(|v| fraction(ctx.params, v, &format!("{path}.mem"))).transpose()?.unwrap_or(ctx.mem);
            let split = t.get("split").map(|v| flag(v, &format!("{path}.split"))).transpose()?.unwrap_or(false);
            Instr::Compute { dist: dist(ctx, a, &p)?, skew, mem, split }
        }
        "sleep" => Instr::Sleep(dist(ctx, a, &p)?),
        // `lock` and `spin_lock` follow the object's kind, so a transform can turn one into
        // the other.
        "lock" | "spin_lock" => match use_object(ctx, a, &p, &[K::Mutex, K::SpinLock])? {
            o if ctx.objects[o as usize] == K::Mutex => match t.get("spin") {
                None => Instr::Lock(o),
                Some(Value::Boolean(false)) => Instr::LockBlock(o),
                Some(v) => {
                    return err(
                        &format!("{path}.spin"),
                        format!("expected false (take the mutex with pthread_mutex_lock, blocking at once; omit it to use the mutex's spin budget), got {v}"),
                    )
                }
            },
            _ if t.contains_key("spin") => return err(&format!("{path}.spin"), "only a mutex can be locked without spinning"),
            o => Instr::SpinLock(o),
        },
        "unlock" | "spin_unlock" => match use_object(ctx, a, &p, &[K::Mutex, K::SpinLock])? {
            o if ctx.objects[o as usize] == K::Mutex => Instr::Unlock(o),
            o => Instr::SpinUnlock(o),
        },
        "kspin_lock" => Instr::KSpinLock(use_object(ctx, a, &p, &[K::KSpinLock])?),
        "kspin_unlock" => Instr::KSpinUnlock(use_object(ctx, a, &p, &[K::KSpinLock])?),
        "barrier" => Instr::Barrier(use_object(ctx, a, &p, &[K::Barrier, K::SpinBarrier])?),
        "arrive" => Instr::Arrive(use_object(ctx, a, &p, &[K::Barrier, K::SpinBarrier])?),
        "cond_signal" => Instr::CondSignal(use_object(ctx, a, &p, &[K::CondVar])?),
        "cond_broadcast" => Instr::CondBroadcast(use_object(ctx, a, &p, &[K::CondVar])?),
        "push" => {
            let queue = use_object(ctx, a, &p, &[K::Queue])?;
            let lane = lane(ctx, queue, t.get("lane"), &format!("{path}.lane"))?;
            match ctx.pushes.iter().find(|(q, _)| *q == queue) {
                Some((_, l)) if *l != lane => {
                    return err(
                        &format!("{path}.lane"),
                        "a group pushes to a laned queue either to its own lane or in rotation, not both (the lane's producers would be ambiguous)",
                    )
                }
                Some(_) => {}
                None => ctx.pushes.push((queue, lane)),
            }
            Instr::Push { queue, lane }
        }
        "respond" => {
            let q = use_object(ctx, a, &p, &[K::Queue])?;
            if !ctx.draining.contains(&q) {
                return err(&p, "respond must be inside a drain of the same queue (it records the popped item's response time)");
            }
            Instr::Respond(q)
        }
        "join" => {
            let q = use_object(ctx, a, &p, &[K::Queue])?;
            if ctx.draining.contains(&q) {
                return err(&p, "join must not be inside a drain of the same queue (it would wait for its own item)");
            }
            Instr::Join(q)
        }
        "drain" => {
            let t = sub_table(a, &p, &["queue", "body", "lane"])?;
            let qv = t.get("queue").ok_or_else(|| (format!("{p}.queue"), "missing".to_string()))?;
            let q = use_object(ctx, qv, &format!("{p}.queue"), &[K::Queue])?;
            let lane = lane(ctx, q, t.get("lane"), &format!("{p}.lane"))?;
            ctx.drains.push((q, lane));
            let body = t.get("body").ok_or_else(|| (format!("{p}.body"), "missing".to_string()))?;
            let start = out.len();
            out.push(Instr::DrainPop { queue: q, end: 0, lane });
            ctx.draining.push(q);
            compile_block(ctx, body, &format!("{p}.body"), out)?;
            ctx.draining.pop();
            out.push(Instr::DrainEnd { start: start as u32 });
            out[start] = Instr::DrainPop { queue: q, end: out.len() as u32, lane };
            return Ok(());
        }
        "subset" => {
            let t = sub_table(a, &p, &["threads", "body"])?;
            let tv = t.get("threads").ok_or_else(|| (format!("{p}.threads"), "missing".to_string()))?;
            let count = count_expr(ctx.params, tv, &format!("{p}.threads"))?;
            let body = t.get("body").ok_or_else(|| (format!("{p}.body"), "missing".to_string()))?;
            let start = out.len();
            out.push(Instr::OnlyThreads { first: 0, count, end: 0, rotate: false });
            compile_block(ctx, body, &format!("{p}.body"), out)?;
            let end = out.len() as u32;
            out[start] = Instr::OnlyThreads { first: 0, count, end, rotate: false };
            return Ok(());
        }
        "malloc" => Instr::Malloc(size_dist(ctx, a, &p)?),
        "fault" => Instr::Fault(size(ctx.params, a, &p)?.div_ceil(super::heap::PAGE).max(1)),
        "free" => Instr::Free(count(ctx.params, a, &p)?),
        "munmap" | "madvise" | "mprotect" => {
            let call = match name.as_str() {
                "munmap" => MmCall::Munmap,
                "madvise" => MmCall::Madvise,
                _ => MmCall::Mprotect,
            };
            Instr::MmUnmap { call, pages: size(ctx.params, a, &p)?.div_ceil(super::heap::PAGE).max(1) }
        }
        "membarrier" => match a.as_str() {
            Some("private_expedited") => Instr::Membarrier,
            _ => return err(&p, "expected \"private_expedited\" (MEMBARRIER_CMD_PRIVATE_EXPEDITED, the command that sends IPIs)"),
        },
        "cond_wait" => {
            let t = sub_table(a, &p, &["cond", "mutex"])?;
            let get = |k: &str| t.get(k).ok_or_else(|| (format!("{p}.{k}"), "missing".to_string()));
            Instr::CondWait {
                cond: use_object(ctx, get("cond")?, &format!("{p}.cond"), &[K::CondVar])?,
                mutex: use_object(ctx, get("mutex")?, &format!("{p}.mutex"), &[K::Mutex])?,
            }
        }
        "repeat" => {
            let t = sub_table(a, &p, &["times", "body", "split"])?;
            let times = t.get("times").ok_or_else(|| (format!("{p}.times"), "missing".to_string()))?;
            let count = loop_times(ctx.params, times, &format!("{p}.times"))?;
            let share = match t.get("split") {
                None | Some(Value::Boolean(false)) => Share::Each,
                Some(Value::Boolean(true)) => Share::Split,
                Some(Value::String(s)) if s == "static" => Share::Split,
                Some(Value::String(s)) if s == "dynamic" => Share::Dynamic,
                Some(_) => {
                    return err(
                        &format!("{p}.split"),
                        "expected true or \"static\" (each thread runs its share of the total), \"dynamic\" (threads take iterations from a shared pool) or false",
                    )
                }
            };
            if share == Share::Dynamic && !ctx.draining.is_empty() {
                // Pools are matched by how often each thread has reached the loop; threads
                // drain different numbers of items, so their k-th passes are not one episode.
                return err(
                    &format!("{p}.split"),
                    "\"dynamic\" is not allowed inside a drain body (its threads drain different numbers of items, so they do not reach the loop together); use true",
                );
            }
            let body = t.get("body").ok_or_else(|| (format!("{p}.body"), "missing".to_string()))?;
            if body.as_array().is_some_and(Vec::is_empty) {
                return err(&format!("{p}.body"), "expected at least one operation (an empty repeat does nothing)");
            }
            let start = out.len();
            out.push(Instr::LoopStart { count, end: 0, share });
            ctx.loops += 1;
            compile_block(ctx, body, &format!("{p}.body"), out)?;
            ctx.loops -= 1;
            let end = out.len() as u32;
            out.push(Instr::LoopEnd { start: start as u32 });
            out[start] = Instr::LoopStart { count, end, share };
            return Ok(());
        }
        "single" | "serial" => {
            let keys: &[&str] = if name == "serial" { &["barrier", "thread", "body"] } else { &["thread", "body"] };
            let t = sub_table(a, &p, keys)?;
            let (thread, rotate) = match t.get("thread") {
                None => (0, false),
                Some(Value::String(s)) if s == "rotate" => {
                    if ctx.loops == 0 {
                        return err(
                            &format!("{p}.thread"),
                            "\"rotate\" moves the thread on each iteration of the enclosing repeat, but there is none",
                        );
                    }
                    (0, true)
                }
                Some(v) => (count(ctx.params, v, &format!("{p}.thread"))? as u32, false),
            };
            let body = t.get("body").ok_or_else(|| (format!("{p}.body"), "missing".to_string()))?;
            let barrier = if name == "serial" {
                let b = t.get("barrier").ok_or_else(|| (format!("{p}.barrier"), "missing: serial needs a barrier".to_string()))?;
                Some(use_object(ctx, b, &format!("{p}.barrier"), &[K::Barrier, K::SpinBarrier])?)
            } else {
                None
            };
            if let Some(b) = barrier {
                out.push(Instr::Barrier(b));
            }
            let start = out.len();
            let count = CountExpr::fixed(1);
            out.push(Instr::OnlyThreads { first: thread, count, end: 0, rotate });
            compile_block(ctx, body, &format!("{p}.body"), out)?;
            let end = out.len() as u32;
            out[start] = Instr::OnlyThreads { first: thread, count, end, rotate };
            if let Some(b) = barrier {
                out.push(Instr::Barrier(b));
            }
            return Ok(());
        }
        other => return err(path, format!("unknown operation '{other}' (expected one of {OPS})")),
    };
    out.push(instr);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Workload, ParseError> {
        let v: Value = toml::from_str::<toml::Table>(src).map(Value::Table).unwrap();
        parse_workload("t", &v)
    }

    #[test]
    fn memory_first_touch_is_threads_or_main() {
        let w = parse(
            r#"program = [ { compute = "1ms" } ]
            memory = { sharing = 0.4 }"#,
        )
        .unwrap();
        assert!(!w.memory.main_first_touch);
        let w = parse(
            r#"program = [ { compute = "1ms" } ]
            memory = { sharing = 0.4, first_touch = "main" }"#,
        )
        .unwrap();
        assert!(w.memory.main_first_touch);
        let e = parse(
            r#"program = [ { compute = "1ms" } ]
            memory = { first_touch = "worker" }"#,
        )
        .unwrap_err();
        assert_eq!(e.0, "memory.first_touch");
    }

    #[test]
    fn parses_a_full_program() {
        let w = parse(
            r#"
            description = "x"
            params = { n = 3, work = "10us" }
            objects = { m = "mutex", b = { kind = "barrier", parties = 2 }, c = "condvar" }
            program = [
              { repeat = { times = "$n", body = [ { compute = { exp = "$work" } }, { lock = "m" }, { unlock = "m" } ] } },
              { serial = { barrier = "b", body = [ { compute = "1ms" } ] } },
              { cond_wait = { cond = "c", mutex = "m" } },
            ]
            "#,
        )
        .unwrap();
        assert!(w.stochastic);
        assert_eq!(w.objects.len(), 3);
        assert_eq!(w.program.instrs.first(), Some(&Instr::LoopStart { count: Times::Fixed(3), end: 4, share: Share::Each }));
        assert_eq!(w.program.instrs.last(), Some(&Instr::End));
        assert!(w.check_threads(1).is_err());
        assert!(w.check_threads(2).is_ok());
    }

    #[test]
    fn errors_name_the_place() {
        let e = parse(r#"program = [ { compute = "5us" }, { compute = -5 } ]"#).unwrap_err();
        assert_eq!(e.0, "program[1].compute");
        assert!(e.1.contains("non-negative"), "{}", e.1);
        let e = parse(r#"program = [ { lok = "m" } ]"#).unwrap_err();
        assert!(e.1.contains("unknown operation 'lok'"), "{}", e.1);
        let e = parse(
            r#"objects = { m = "mutex" }
            program = [ { repeat = { times = 2, body = [ { barrier = "m" } ] } } ]"#,
        )
        .unwrap_err();
        assert_eq!(e.0, "program[0].repeat.body[0].barrier");
        let e = parse(r#"program = [ { compute = "$nope" } ]"#).unwrap_err();
        assert!(e.1.contains("unknown parameter"), "{}", e.1);
        let e = parse(
            r#"program = [ ]
            colour = 3"#,
        )
        .unwrap_err();
        assert_eq!(e.0, "colour");
        let e = parse(r#"description = "no program""#).unwrap_err();
        assert_eq!(e.0, "program");
        // `fault` takes a byte size, as `malloc` and `munmap` do.
        let e = parse(r#"program = [ { fault = "3 parsecs" } ]"#).unwrap_err();
        assert_eq!(e.0, "program[0].fault");
        assert!(e.1.contains("unknown size unit"), "{}", e.1);
        let e = parse(r#"program = [ { fault = true } ]"#).unwrap_err();
        assert!(e.1.contains("expected a size"), "{}", e.1);
        let e = parse(
            r#"program = [ { compute = "1ms" } ]
            processes = "yes""#,
        )
        .unwrap_err();
        assert_eq!((e.0.as_str(), e.1.as_str()), ("processes", "expected true or false (got string)"));
    }

    #[test]
    fn processes_default_to_threads_of_one_process() {
        assert!(!parse(r#"program = [ { compute = "1ms" } ]"#).unwrap().processes);
        let w = parse(
            r#"program = [ { compute = "1ms" } ]
            processes = true"#,
        )
        .unwrap();
        assert!(w.processes);
    }
}
