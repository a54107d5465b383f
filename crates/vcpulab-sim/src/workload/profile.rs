//! Parsing a workload definition (a TOML table) into a [`Workload`].
//!
//! The format is documented in `docs/workloads.md`. Parsing is done by hand from
//! `toml::Value` rather than with derived serde so that every error names the exact place
//! (`program[2].repeat.body[0].compute`) and what was expected there.

use indexmap::IndexMap;
use toml::Value;

use super::dist::{parse_duration, Dist};
use super::heap::{parse_size, HeapParams};
use super::program::{Instr, MmCall, ObjDecl, ObjId, ObjKind, Program, Workload};

/// A parse error: the path inside the workload table and a message.
pub type ParseError = (String, String);

struct Ctx<'a> {
    params: &'a toml::Table,
    objects: IndexMap<String, ObjKind>,
    stochastic: bool,
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
    const KEYS: [&str; 7] = ["description", "model", "threads", "params", "objects", "program", "heap"];
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
    let description = string("description")?;
    let model = string("model")?;
    let empty = toml::Table::new();
    let params = match t.get("params") {
        None => &empty,
        Some(Value::Table(p)) => p,
        Some(o) => return err("params", format!("expected a table of parameters (got {})", type_name(o))),
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
    let mut ctx = Ctx { params, objects: IndexMap::new(), stochastic: false };
    let mut decls = Vec::new();
    match t.get("objects") {
        None => {}
        Some(Value::Table(objs)) => {
            for (oname, ov) in objs {
                let path = format!("objects.{oname}");
                let (kind, parties) = parse_object(params, ov, &path)?;
                ctx.objects.insert(oname.clone(), kind);
                decls.push(ObjDecl { name: oname.clone(), kind, parties });
            }
        }
        Some(o) => return err("objects", format!("expected a table of named objects (got {})", type_name(o))),
    }
    let Some(prog) = t.get("program") else {
        return err("program", "missing: a workload needs a program (a list of operations)");
    };
    let mut instrs = Vec::new();
    compile_block(&mut ctx, prog, "program", &mut instrs)?;
    instrs.push(Instr::End);
    Ok(Workload {
        name: name.to_string(),
        description,
        model,
        threads,
        objects: decls,
        program: Program { instrs },
        stochastic: ctx.stochastic,
        heap,
    })
}

/// The `heap` table: glibc's allocator tunables. Setting any of them turns the dynamic
/// thresholds off, as `mallopt` / `GLIBC_TUNABLES` do.
fn parse_heap(params: &toml::Table, h: &toml::Table) -> Result<HeapParams, ParseError> {
    let mut p = HeapParams::default();
    for (k, v) in h {
        let path = format!("heap.{k}");
        let bytes = size(params, v, &path)?;
        match k.as_str() {
            "trim_threshold" => p.trim_threshold = bytes,
            "top_pad" => p.top_pad = bytes,
            "mmap_threshold" => p.mmap_threshold = bytes.max(1),
            _ => return err(&path, format!("unknown field '{k}' (expected trim_threshold, top_pad or mmap_threshold)")),
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

fn parse_object(params: &toml::Table, v: &Value, path: &str) -> Result<(ObjKind, Option<u32>), ParseError> {
    let kinds = "mutex, spinlock, kspinlock, barrier, spin_barrier, condvar";
    let kind_of =
        |s: &str, p: &str| ObjKind::parse(s).ok_or_else(|| (p.to_string(), format!("unknown object kind '{s}' (expected one of {kinds})")));
    match v {
        Value::String(s) => Ok((kind_of(s, path)?, None)),
        Value::Table(t) => {
            for k in t.keys() {
                if k != "kind" && k != "parties" {
                    return err(&format!("{path}.{k}"), "unknown field (expected kind, parties)");
                }
            }
            let Some(Value::String(ks)) = t.get("kind") else {
                return err(&format!("{path}.kind"), format!("missing or not a string (expected one of {kinds})"));
            };
            let kind = kind_of(ks, &format!("{path}.kind"))?;
            let parties = match t.get("parties") {
                None => None,
                Some(p) => {
                    if !matches!(kind, ObjKind::Barrier | ObjKind::SpinBarrier) {
                        return err(&format!("{path}.parties"), "only barriers have parties");
                    }
                    Some(positive_u32(&resolve(params, p, path)?, &format!("{path}.parties"))?)
                }
            };
            Ok((kind, parties))
        }
        o => err(path, format!("expected an object kind like \"mutex\" or {{ kind = \"barrier\", parties = 4 }} (got {})", type_name(o))),
    }
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

const OPS: &str = "compute, sleep, lock, unlock, spin_lock, spin_unlock, kspin_lock, kspin_unlock, barrier, cond_wait, cond_signal, cond_broadcast, malloc, free, munmap, madvise, mprotect, membarrier, repeat, single, serial";

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

fn compile_op(ctx: &mut Ctx<'_>, op: &Value, path: &str, out: &mut Vec<Instr>) -> Result<(), ParseError> {
    let Some(t) = op.as_table().filter(|t| t.len() == 1) else {
        return err(path, format!("expected an operation like {{ compute = \"50us\" }} (one of {OPS})"));
    };
    let (name, a) = t.iter().next().expect("one entry");
    let p = format!("{path}.{name}");
    use ObjKind as K;
    let instr = match name.as_str() {
        "compute" => Instr::Compute(dist(ctx, a, &p)?),
        "sleep" => Instr::Sleep(dist(ctx, a, &p)?),
        "lock" => Instr::Lock(object(ctx, a, &p, &[K::Mutex])?),
        "unlock" => Instr::Unlock(object(ctx, a, &p, &[K::Mutex])?),
        "spin_lock" => Instr::SpinLock(object(ctx, a, &p, &[K::SpinLock])?),
        "spin_unlock" => Instr::SpinUnlock(object(ctx, a, &p, &[K::SpinLock])?),
        "kspin_lock" => Instr::KSpinLock(object(ctx, a, &p, &[K::KSpinLock])?),
        "kspin_unlock" => Instr::KSpinUnlock(object(ctx, a, &p, &[K::KSpinLock])?),
        "barrier" => Instr::Barrier(object(ctx, a, &p, &[K::Barrier, K::SpinBarrier])?),
        "cond_signal" => Instr::CondSignal(object(ctx, a, &p, &[K::CondVar])?),
        "cond_broadcast" => Instr::CondBroadcast(object(ctx, a, &p, &[K::CondVar])?),
        "malloc" => Instr::Malloc(size(ctx.params, a, &p)?.max(1)),
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
                cond: object(ctx, get("cond")?, &format!("{p}.cond"), &[K::CondVar])?,
                mutex: object(ctx, get("mutex")?, &format!("{p}.mutex"), &[K::Mutex])?,
            }
        }
        "repeat" => {
            let t = sub_table(a, &p, &["times", "body"])?;
            let times = t.get("times").ok_or_else(|| (format!("{p}.times"), "missing".to_string()))?;
            let count = count(ctx.params, times, &format!("{p}.times"))?;
            let body = t.get("body").ok_or_else(|| (format!("{p}.body"), "missing".to_string()))?;
            let start = out.len();
            out.push(Instr::LoopStart { count, end: 0 });
            compile_block(ctx, body, &format!("{p}.body"), out)?;
            let end = out.len() as u32;
            out.push(Instr::LoopEnd { start: start as u32 });
            out[start] = Instr::LoopStart { count, end };
            return Ok(());
        }
        "single" | "serial" => {
            let keys: &[&str] = if name == "serial" { &["barrier", "thread", "body"] } else { &["thread", "body"] };
            let t = sub_table(a, &p, keys)?;
            let thread = match t.get("thread") {
                None => 0,
                Some(v) => count(ctx.params, v, &format!("{p}.thread"))? as u32,
            };
            let body = t.get("body").ok_or_else(|| (format!("{p}.body"), "missing".to_string()))?;
            let barrier = if name == "serial" {
                let b = t.get("barrier").ok_or_else(|| (format!("{p}.barrier"), "missing: serial needs a barrier".to_string()))?;
                Some(object(ctx, b, &format!("{p}.barrier"), &[K::Barrier, K::SpinBarrier])?)
            } else {
                None
            };
            if let Some(b) = barrier {
                out.push(Instr::Barrier(b));
            }
            let start = out.len();
            out.push(Instr::OnlyThread { thread, end: 0 });
            compile_block(ctx, body, &format!("{p}.body"), out)?;
            let end = out.len() as u32;
            out[start] = Instr::OnlyThread { thread, end };
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
        assert_eq!(w.program.instrs.first(), Some(&Instr::LoopStart { count: 3, end: 4 }));
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
    }
}
