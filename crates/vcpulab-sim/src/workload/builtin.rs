//! The built-in workloads, shipped as TOML files in `workloads/` and embedded at build time.

/// (name, TOML text) of every built-in workload, in listing order.
pub const BUILTINS: &[(&str, &str)] = &[
    ("ep", include_str!("../../../../workloads/ep.toml")),
    ("lock", include_str!("../../../../workloads/lock.toml")),
    ("barrier", include_str!("../../../../workloads/barrier.toml")),
    ("spinbarrier", include_str!("../../../../workloads/spinbarrier.toml")),
    ("forkjoin", include_str!("../../../../workloads/forkjoin.toml")),
    ("kspin", include_str!("../../../../workloads/kspin.toml")),
    ("handoff", include_str!("../../../../workloads/handoff.toml")),
    ("heapchurn", include_str!("../../../../workloads/heapchurn.toml")),
    ("cpuhog", include_str!("../../../../workloads/cpuhog.toml")),
];

/// The TOML text of a built-in workload.
pub fn builtin_text(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
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
        }
    }
}
