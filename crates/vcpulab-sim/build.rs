//! Embeds the built-in workloads: every `workloads/**/*.toml` of the repository becomes an
//! entry of `BUILTINS` (see `src/workload/builtin.rs` for the naming rule). Also fingerprints
//! the simulator's source (`VCPULAB_MODEL_HASH`): stored results are keyed by it, so a changed
//! model never reuses results of the old one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// SHA-256 (first 12 hex digits) over the paths and contents of every file under `src/`.
fn model_hash(src: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = e.expect("readable").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        h.update(f.strip_prefix(src).expect("under src").to_string_lossy().replace('\\', "/").as_bytes());
        h.update([0]);
        h.update(std::fs::read(&f).expect("readable"));
        h.update([0]);
    }
    h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect()
}

fn main() {
    let src = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rustc-env=VCPULAB_MODEL_HASH={}", model_hash(&src));
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("../../workloads");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut entries: Vec<(u8, String, PathBuf)> = Vec::new();
    let mut dirs = vec![(root.clone(), String::new())];
    while let Some((dir, prefix)) = dirs.pop() {
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut list: Vec<_> = std::fs::read_dir(&dir).expect("workloads/ exists").map(|e| e.expect("readable").path()).collect();
        list.sort();
        for path in list {
            let stem = path.file_stem().and_then(|s| s.to_str()).expect("UTF-8 file names").to_string();
            if path.is_dir() {
                // Suites whose names collide get their suite as a prefix.
                let p = if stem == "parsec" || stem == "splash2x" { format!("{stem}.") } else { String::new() };
                dirs.push((path, p));
            } else if path.extension().is_some_and(|e| e == "toml") {
                let rank = match dir.file_name().and_then(|s| s.to_str()) {
                    Some("parsec") => 1,
                    Some("splash2x") => 2,
                    Some("system") => 3,
                    _ if dir == root => 0,
                    _ => 4,
                };
                entries.push((rank, format!("{prefix}{stem}"), path.canonicalize().expect("exists")));
            }
        }
    }
    entries.sort();
    let mut out =
        String::from("/// (name, TOML text) of every built-in workload, in listing order.\npub const BUILTINS: &[(&str, &str)] = &[\n");
    for (_, name, path) in &entries {
        writeln!(out, "    ({name:?}, include_str!({:?})),", path.display().to_string()).expect("string");
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("cargo sets it")).join("builtins.rs");
    std::fs::write(dest, out).expect("OUT_DIR is writable");
}
