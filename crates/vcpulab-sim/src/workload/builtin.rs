//! The built-in workloads, shipped as TOML files in `workloads/` and embedded at build time.

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// The canonical name of a built-in: the exact name, or the only built-in whose name ends in
/// `.NAME` (`dedup` = `parsec.dedup`). `Err` lists the candidates of an ambiguous suffix.
pub fn resolve_builtin(name: &str) -> Result<Option<&'static str>, Vec<&'static str>> {
    exact_or_suffix(name, BUILTINS.iter().map(|(n, _)| *n))
}

/// The one of `names` that `name` denotes: itself, or the only one ending in `.NAME`; `Ok(None)`
/// when none does, `Err` with the candidates of an ambiguous suffix. Built-ins and traced
/// programs (`workload::traced`) are named by this one rule.
pub fn exact_or_suffix<'a>(name: &str, names: impl Iterator<Item = &'a str> + Clone) -> Result<Option<&'a str>, Vec<&'a str>> {
    if let Some(n) = names.clone().find(|n| *n == name) {
        return Ok(Some(n));
    }
    let suffix = format!(".{name}");
    let matches: Vec<&'a str> = names.filter(|n| n.ends_with(&suffix)).collect();
    match matches.len() {
        0 => Ok(None),
        1 => Ok(Some(matches[0])),
        _ => Err(matches),
    }
}

/// The TOML text of a built-in workload.
pub fn builtin_text(name: &str) -> Option<&'static str> {
    let canonical = resolve_builtin(name).ok().flatten()?;
    BUILTINS.iter().find(|(n, _)| *n == canonical).map(|(_, t)| *t)
}

/// Names of all built-ins.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::profile::parse_workload;

    #[test]
    fn every_builtin_parses() {
        for (name, text) in BUILTINS {
            let v = toml::Value::Table(toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}")));
            let w = parse_workload(name, &v).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert!(!w.description.is_empty(), "{name} needs a description");
            assert!(w.check_threads(16).is_ok(), "{name} at 16 threads: {:?}", w.check_threads(16));
        }
    }
}
