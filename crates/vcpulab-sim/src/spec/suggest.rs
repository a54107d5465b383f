//! "Did you mean" suggestions for misspelt names (fields, workloads, parameters).

/// The candidate closest to `name` by edit distance, if it is close enough to be a likely
/// misspelling (at most a third of the longer name's length, and at least one edit allowed).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        let d = strsim::damerau_levenshtein(name, c);
        let limit = (name.chars().count().max(c.chars().count()) / 3).max(1);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// " (did you mean 'X'?)" when a candidate is close to `name`, else "".
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, candidates).map(|c| format!(" (did you mean '{c}'?)")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(closest("iteratons", ["iterations", "work", "critical"]), Some("iterations"));
        assert_eq!(closest("lcok", ["lock", "barrier"]), Some("lock"));
        assert_eq!(closest("parsec.dedupp", ["parsec.dedup", "ep"]), Some("parsec.dedup"));
        assert_eq!(closest("zzzz", ["lock", "barrier"]), None);
        assert_eq!(did_you_mean("x", ["lock"]), "");
    }
}
