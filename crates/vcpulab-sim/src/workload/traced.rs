//! Traced real programs by name: `traced.<suite>.<program>` (`traced.parsec.dedup`) is the
//! program's committed trace at the run's thread count, replayed as
//! `[workloads.X] trace = "<that file>"` is ([`super::profile`], [`super::replay`]).
//!
//! ```text
//!  $VCPULAB_TRACES/                       (the repository's traces/; the Python package sets it)
//!    <suite>/<program>/manifest.toml      what was recorded (read by the Python package only)
//!    <suite>/<program>/t<N>.vtrace.xz     the trace at N threads (or an uncompressed t<N>.vtrace)
//! ```
//!
//! A name resolves like a built-in's: `traced.parsec.dedup` exactly, or `traced.dedup` when
//! exactly one traced program is called `dedup` (`traced.raytrace` of two suites is
//! ambiguous). A run whose instances have T threads replays `t<T>.vtrace.xz` (else
//! `t<T>.vtrace`). [`TraceCache`] parses each file once per plan.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Workload;

/// The prefix of a traced program's workload name.
pub const PREFIX: &str = "traced.";
/// The environment variable naming the directory of traced programs.
pub const ENV: &str = "VCPULAB_TRACES";

/// Whether `name` is of the form `traced.…` (a traced program's name, unless the spec defines a
/// workload of that name itself).
pub fn is_traced(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// A traced program found under the traces directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedProgram {
    /// Its canonical workload name, `traced.<suite>.<program>`.
    pub name: String,
    /// `<suite>/<program>`, its directory relative to the traces directory.
    pub rel: String,
    /// Its directory.
    pub dir: PathBuf,
}

/// The traces directory, `$VCPULAB_TRACES`; errors name the workload `name` that needed it.
pub fn root(name: &str) -> Result<PathBuf, String> {
    root_from(name, std::env::var_os(ENV))
}

fn root_from(name: &str, var: Option<OsString>) -> Result<PathBuf, String> {
    match var.filter(|v| !v.is_empty()) {
        None => Err(format!("workload '{name}': {ENV} is not set (the directory of traced programs, the repository's traces/)")),
        Some(v) => {
            let dir = PathBuf::from(v);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(format!("workload '{name}': {ENV} is '{}', which is not a directory (the directory of traced programs, the repository's traces/)", dir.display()))
            }
        }
    }
}

/// The traced programs under `root`, as `<suite>.<program>`, sorted: every directory
/// `root/<suite>/<program>` that holds a `manifest.toml` or a trace (`t<N>.vtrace.xz`,
/// `t<N>.vtrace`). Hidden directories and other files (`programs/*.toml`) are not programs.
pub fn programs(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for suite in subdirs(root) {
        for program in subdirs(&root.join(&suite)) {
            let dir = root.join(&suite).join(&program);
            if dir.join("manifest.toml").is_file() || !thread_counts(&dir).is_empty() {
                out.push(format!("{suite}.{program}"));
            }
        }
    }
    out.sort();
    out
}

/// The names of the directories in `dir` that are UTF-8 and not hidden.
fn subdirs(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && !n.contains('.'))
        .collect()
}

/// The thread counts traced in the program directory `dir`: N of every `t<N>.vtrace.xz` and
/// `t<N>.vtrace`, ascending, each once.
pub fn thread_counts(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut counts: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| {
            let n = n.strip_prefix('t')?;
            let digits = n.strip_suffix(".vtrace.xz").or_else(|| n.strip_suffix(".vtrace"))?;
            // `t04` is not the trace at 4 threads (its file would be `t4`).
            if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok().filter(|&t| t > 0)
        })
        .collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The traced program `name` (`traced.<suite>.<program>`, or `traced.<program>` when one suite
/// has it) under `$VCPULAB_TRACES`.
pub fn resolve(name: &str) -> Result<TracedProgram, String> {
    resolve_in(&root(name)?, name)
}

/// [`resolve`] under the traces directory `root`.
pub fn resolve_in(root: &Path, name: &str) -> Result<TracedProgram, String> {
    let rest = name.strip_prefix(PREFIX).unwrap_or(name);
    let all = programs(root);
    let found: Vec<&str> = match super::builtin::exact_or_suffix(rest, all.iter().map(String::as_str)) {
        Ok(p) => p.into_iter().collect(),
        Err(candidates) => candidates,
    };
    match found[..] {
        [p] => {
            let (suite, program) = p.split_once('.').expect("programs are <suite>.<program>");
            Ok(TracedProgram { name: format!("{PREFIX}{p}"), rel: format!("{suite}/{program}"), dir: root.join(suite).join(program) })
        }
        [] => {
            let known: Vec<String> = all.iter().map(|p| format!("{PREFIX}{p}")).collect();
            // Close to a full name or to a program's short form (`traced.dedupp`).
            let short: Vec<String> = all.iter().filter_map(|p| p.split_once('.')).map(|(_, s)| format!("{PREFIX}{s}")).collect();
            let hint = crate::spec::suggest::did_you_mean(name, known.iter().chain(&short).map(String::as_str));
            let listed = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            Err(format!("unknown traced program '{name}'{hint} (traced programs in {}: {listed})", root.display()))
        }
        _ => {
            let names: Vec<String> = found.iter().map(|p| format!("{PREFIX}{p}")).collect();
            Err(format!("workload '{name}' is ambiguous: it can mean {} (write the full name)", names.join(" or ")))
        }
    }
}

impl TracedProgram {
    /// Its trace at `threads` threads: `t<T>.vtrace.xz`, else `t<T>.vtrace`. `shown` is the
    /// workload's name as the spec writes it.
    pub fn trace_at(&self, shown: &str, threads: u32) -> Result<PathBuf, String> {
        for file in [format!("t{threads}.vtrace.xz"), format!("t{threads}.vtrace")] {
            let path = self.dir.join(file);
            if path.is_file() {
                return Ok(path);
            }
        }
        let counts = thread_counts(&self.dir);
        let at = if counts.is_empty() {
            "no thread count".to_string()
        } else {
            counts.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        };
        Err(format!("workload '{shown}' has no trace at {threads} threads (traced at {at}; `vcpulab workloads show {}`)", self.name))
    }
}

/// Traced programs' replays, parsed once per plan: a [`crate::api::Plan`]'s variants share one
/// cache, so every (workload, trace file) is read, decompressed and replayed once however many
/// cells and variants run it.
#[derive(Debug, Default)]
pub struct TraceCache {
    loaded: BTreeMap<(String, PathBuf), Arc<Workload>>,
}

impl TraceCache {
    /// The workload `name` (as the spec writes it) of `program` at `threads` threads: its trace
    /// at that count replayed as `[workloads.NAME] trace = "<file>"` is, with the default
    /// replay options. Its hash covers the file's path under the traces directory and the
    /// file's bytes (not where the directory is, so the same files give the same keys on
    /// every machine).
    pub fn load(&mut self, name: &str, program: &TracedProgram, threads: u32) -> Result<Arc<Workload>, String> {
        let path = program.trace_at(name, threads)?;
        let key = (name.to_string(), path.clone());
        if let Some(w) = self.loaded.get(&key) {
            return Ok(Arc::clone(w));
        }
        let Some(text) = path.to_str() else {
            return Err(format!("workload '{name}': the path of its trace is not UTF-8: {}", path.display()));
        };
        let mut table = toml::Table::new();
        table.insert("trace".into(), toml::Value::String(text.to_string()));
        let mut w = super::profile::parse_workload(name, &toml::Value::Table(table)).map_err(|(_, m)| m)?;
        use sha2::{Digest, Sha256};
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let own: String =
            Sha256::digest(format!("traced = \"{}/{file}\"", program.rel).as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
        w.meta.hash = format!("{own}{}", &w.meta.hash[..8.min(w.meta.hash.len())]);
        let w = Arc::new(w);
        self.loaded.insert(key, Arc::clone(&w));
        Ok(w)
    }

    /// How many replays it holds.
    pub fn len(&self) -> usize {
        self.loaded.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A traces directory of its own (removed first) with `parsec/dedup` at 1 (plain) and 2
    /// (xz) threads, `splash2x/fft` at 4 (xz), `raytrace` in both suites, and `programs/` (not
    /// a suite) beside them.
    pub(crate) fn traces_dir(tag: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("vcpulab-traced-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        fill(&root);
        root
    }

    /// Writes [`traces_dir`]'s files under `root`, each atomically (written aside, then
    /// renamed): test processes sharing `root` see every file whole, never a missing one.
    pub(crate) fn fill(root: &Path) {
        let put = |rel: &str, bytes: &[u8]| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("temp dir");
            let aside = p.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&aside, bytes).expect("written");
            std::fs::rename(&aside, &p).expect("renamed");
        };
        let sample = crate::trace::sample_bytes();
        put("parsec/dedup/manifest.toml", b"");
        put("parsec/dedup/t1.vtrace", &sample);
        put("parsec/dedup/t2.vtrace.xz", &crate::trace::xz(&sample));
        put("splash2x/fft/t4.vtrace.xz", &crate::trace::xz(&sample));
        put("parsec/raytrace/t1.vtrace.xz", &crate::trace::xz(&sample));
        put("splash2x/raytrace/t1.vtrace.xz", &crate::trace::xz(&sample));
        put("programs/parsec.dedup.toml", b"");
    }

    #[test]
    fn names_resolve_exactly_or_by_a_unique_suffix() {
        let root = traces_dir("resolve");
        assert_eq!(programs(&root), ["parsec.dedup", "parsec.raytrace", "splash2x.fft", "splash2x.raytrace"]);
        let dedup = resolve_in(&root, "traced.parsec.dedup").expect("found");
        assert_eq!((dedup.name.as_str(), dedup.rel.as_str()), ("traced.parsec.dedup", "parsec/dedup"));
        assert_eq!(resolve_in(&root, "traced.dedup"), Ok(dedup.clone()));
        assert_eq!(resolve_in(&root, "traced.fft").map(|p| p.name), Ok("traced.splash2x.fft".into()));
        assert_eq!(
            resolve_in(&root, "traced.raytrace"),
            Err("workload 'traced.raytrace' is ambiguous: it can mean traced.parsec.raytrace or traced.splash2x.raytrace (write the full name)".into())
        );
        let e = resolve_in(&root, "traced.parsec.dedupp").expect_err("unknown");
        assert!(
            e.starts_with("unknown traced program 'traced.parsec.dedupp' (did you mean 'traced.parsec.dedup'?) (traced programs in "),
            "{e}"
        );
        assert!(e.ends_with(": traced.parsec.dedup, traced.parsec.raytrace, traced.splash2x.fft, traced.splash2x.raytrace)"), "{e}");
        let e = resolve_in(&root, "traced.programs").expect_err("not a program");
        assert!(e.starts_with("unknown traced program 'traced.programs'"), "{e}");
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn the_trace_is_the_one_at_the_thread_count() {
        let root = traces_dir("threads");
        let dedup = resolve_in(&root, "traced.dedup").expect("found");
        assert_eq!(thread_counts(&dedup.dir), [1, 2]);
        assert_eq!(dedup.trace_at("traced.dedup", 1), Ok(dedup.dir.join("t1.vtrace")));
        assert_eq!(dedup.trace_at("traced.dedup", 2), Ok(dedup.dir.join("t2.vtrace.xz")));
        assert_eq!(
            dedup.trace_at("traced.dedup", 32),
            Err("workload 'traced.dedup' has no trace at 32 threads (traced at 1, 2; `vcpulab workloads show traced.parsec.dedup`)".into())
        );
        // The xz one when both are there.
        std::fs::write(dedup.dir.join("t1.vtrace.xz"), crate::trace::xz(&crate::trace::sample_bytes())).expect("written");
        assert_eq!(dedup.trace_at("traced.dedup", 1), Ok(dedup.dir.join("t1.vtrace.xz")));
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn the_directory_comes_from_the_environment() {
        let e = root_from("traced.parsec.dedup", None).expect_err("unset");
        assert_eq!(
            e,
            "workload 'traced.parsec.dedup': VCPULAB_TRACES is not set (the directory of traced programs, the repository's traces/)"
        );
        assert_eq!(root_from("traced.x", Some(OsString::new())), Err(e.replace("traced.parsec.dedup", "traced.x")));
        let e = root_from("traced.x", Some("/nonexistent/traces".into())).expect_err("no directory");
        assert!(e.contains("VCPULAB_TRACES is '/nonexistent/traces', which is not a directory"), "{e}");
    }

    #[test]
    fn each_file_is_replayed_once() {
        let root = traces_dir("cache");
        let dedup = resolve_in(&root, "traced.dedup").expect("found");
        let mut cache = TraceCache::default();
        let a = cache.load("traced.dedup", &dedup, 2).expect("replays");
        let b = cache.load("traced.dedup", &dedup, 2).expect("replays");
        assert!(Arc::ptr_eq(&a, &b));
        let one = cache.load("traced.dedup", &dedup, 1).expect("replays");
        assert_eq!(cache.len(), 2);
        // Same trace, stored differently (plain, xz): the same program, another file.
        assert_eq!(one.groups.len(), a.groups.len());
        assert_ne!(one.meta.hash, a.meta.hash);
        assert_eq!(a.name, "traced.dedup");
        std::fs::remove_dir_all(&root).ok();
    }
}
