//! One bound on how deeply a spec nests, whatever it came from: the spec file, a `--set
//! PATH=VALUE` (its path and its value together), an `experiment.vary` key or a variant's `set`
//! (which become overrides). Everything after parsing — serde, the TOML writer that makes the
//! materialised spec, dropping the document — recurses once per level, so a document 20,000
//! levels deep overflows the stack (SIGSEGV) instead of failing. The bound is checked before
//! any of that runs, without recursion, and every way in fails with the same message.

use toml::de::{DeTable, DeValue};

use super::error::SpecError;

/// The most levels a spec may nest: keys (each part of a dotted key and each table header part
/// counts), list indices, tables and inline tables. The deepest spec or built-in workload
/// shipped is 16 levels (a built-in materialised under `[workloads.NAME]`: 18).
pub const MAX_DEPTH: usize = 64;

/// What a too-deep input is told.
pub fn too_deep() -> String {
    format!("nested more than {MAX_DEPTH} levels deep (each key, part of a dotted key and list index is a level; at most {MAX_DEPTH})")
}

/// The toml crate's own recursion guards (a dotted key of 80 parts, 80 nested inline tables or
/// lists) stop the parse before ours can look: they are the same bound, told the same way.
fn is_toml_recursion_error(e: &toml::de::Error) -> bool {
    let m = e.message();
    m.contains("recursion limit") || m.contains("max recursion depth")
}

/// Parses TOML document `text` (from `source`) into a table, refusing a document that nests
/// more than [`MAX_DEPTH`] levels before anything recursive touches it.
pub fn parse_document(text: &str, source: &str) -> Result<toml::Table, SpecError> {
    let de = match DeTable::parse(text) {
        Ok(de) => de,
        Err(e) if is_toml_recursion_error(&e) => {
            let mut e = e;
            e.set_input(Some(text));
            let at = SpecError::toml(source, &e).field;
            return Err(SpecError::new(source, at, too_deep()));
        }
        Err(e) => {
            let mut e = e;
            e.set_input(Some(text));
            return Err(SpecError::toml(source, &e));
        }
    };
    if let Some(path) = too_deep_at(de.get_ref()) {
        dismantle(de.into_inner());
        return Err(SpecError::new(source, path, too_deep()));
    }
    use serde::Deserialize as _;
    toml::Table::deserialize(toml::de::Deserializer::from(de)).map_err(|mut e| {
        e.set_input(Some(text));
        SpecError::toml(source, &e)
    })
}

/// An override's value, parsed.
#[derive(Debug, PartialEq)]
pub enum ParsedValue {
    /// A TOML value.
    Toml(toml::Value),
    /// Not TOML (the override takes it as a bare string).
    NotToml,
    /// Nested beyond the bound (or beyond the toml crate's guards).
    TooDeep,
}

/// Parses an override's value (`VALUE` of `PATH=VALUE`) as TOML.
pub fn parse_value(text: &str) -> ParsedValue {
    match parse_document(&format!("v = {text}"), "") {
        Ok(mut t) => t.remove("v").map_or(ParsedValue::NotToml, ParsedValue::Toml),
        Err(e) if e.message == too_deep() => ParsedValue::TooDeep,
        Err(_) => ParsedValue::NotToml,
    }
}

/// The path (its first parts) of the first place `root` nests more than [`MAX_DEPTH`] levels,
/// counting each key and index from the root; `None` within the bound. No recursion.
fn too_deep_at(root: &DeTable<'_>) -> Option<String> {
    // (value, its depth, its path as shown: the first SHOWN parts)
    let mut stack: Vec<(&DeValue<'_>, usize, String)> = Vec::new();
    for (k, v) in root.iter() {
        stack.push((v.get_ref(), 1, k.get_ref().to_string()));
    }
    while let Some((v, depth, at)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Some(shorten(&at));
        }
        match v {
            DeValue::Table(t) => {
                for (k, v) in t.iter() {
                    let name = if depth < SHOWN { format!("{at}.{}", k.get_ref()) } else { at.clone() };
                    stack.push((v.get_ref(), depth + 1, name));
                }
            }
            DeValue::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    let name = if depth < SHOWN { format!("{at}[{i}]") } else { at.clone() };
                    stack.push((v.get_ref(), depth + 1, name));
                }
            }
            _ => {}
        }
    }
    None
}

/// Drops a parsed document a level at a time: dropping it whole recurses once per level, and
/// a refused one can be thousands of levels deep (the toml crate's guards allow 80 nested
/// inline tables, each under an 80-part dotted key).
fn dismantle(root: DeTable<'_>) {
    let mut pending: Vec<DeValue<'_>> = vec![DeValue::Table(root)];
    while let Some(v) = pending.pop() {
        match v {
            DeValue::Table(t) => pending.extend(t.into_iter().map(|(_, v)| v.into_inner())),
            DeValue::Array(a) => pending.extend(a.into_iter().map(|v| v.into_inner())),
            _ => {}
        }
    }
}

/// The parts of a too-deep path an error shows.
const SHOWN: usize = 3;

fn shorten(at: &str) -> String {
    format!("{at}…")
}

/// The first [`SHOWN`] parts of a too-deep override's path, as errors name it.
pub fn shown_path(path: &[super::overrides::Seg]) -> String {
    let end = path.len().min(SHOWN);
    let mut s = super::overrides::prefix(&path[..end]);
    if end < path.len() {
        s.push('…');
    }
    s
}

/// A too-long input as an error shows it: its first characters.
pub fn shown_text(text: &str) -> String {
    const CHARS: usize = 60;
    match text.char_indices().nth(CHARS) {
        Some((i, _)) => format!("{}… ({} characters)", &text[..i], text.chars().count()),
        None => text.to_string(),
    }
}

/// Levels below `v`: 0 for a scalar or an empty table or list, else 1 + the deepest
/// element's. No recursion.
pub fn levels(v: &toml::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        if depth > MAX_DEPTH {
            break; // too deep already: the exact figure does not matter
        }
        match v {
            toml::Value::Table(t) => stack.extend(t.values().map(|c| (c, depth + 1))),
            toml::Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_keys(n: usize) -> String {
        vec!["a"; n].join(".")
    }

    #[test]
    fn a_document_at_the_bound_parses_one_level_more_does_not() {
        // Dotted keys inside nested inline tables multiply past the toml crate's own guards.
        let inline = |levels: usize| {
            let mut v = "1".to_string();
            for _ in 0..levels {
                v = format!("{{ a = {v} }}");
            }
            format!("x = {v}\n")
        };
        assert!(parse_document(&inline(MAX_DEPTH - 1), "t.toml").is_ok());
        let e = parse_document(&inline(MAX_DEPTH), "t.toml").unwrap_err();
        assert_eq!(e.message, too_deep());
        assert_eq!(e.field, "x.a.a…", "{e}");
        let k = nested_keys(60);
        let multiplied = format!("x = {{ {k} = {{ {k} = {{ {k} = 1 }} }} }}\n");
        let e = parse_document(&multiplied, "t.toml").unwrap_err();
        assert_eq!((e.source.as_str(), e.message.as_str()), ("t.toml", too_deep().as_str()));
        // Past the toml crate's guards: the same message, with its line and column.
        let e = parse_document(&format!("{} = 1\n", nested_keys(20_000)), "t.toml").unwrap_err();
        assert_eq!(e.message, too_deep());
        let e = parse_document(&format!("x = {}{}\n", "[".repeat(20_000), "]".repeat(20_000)), "t.toml").unwrap_err();
        assert_eq!(e.message, too_deep());
        assert!(e.field.starts_with("line 1"), "{e}");
        // Other errors are unchanged.
        let e = parse_document("[x\n", "t.toml").unwrap_err();
        assert!(e.message.starts_with("malformed TOML") && e.field.starts_with("line 1"), "{e}");
    }

    #[test]
    fn levels_counts_keys_and_indices() {
        let v: toml::Value = toml::Value::Table(toml::from_str("a = { b = [[1]] }").unwrap());
        assert_eq!(levels(&v), 4); // a.b[0][0]
        assert_eq!(levels(&toml::Value::Integer(1)), 0);
        let list = toml::Value::Array;
        assert_eq!(parse_value("[[[]]]"), ParsedValue::Toml(list(vec![list(vec![list(vec![])])])));
        assert_eq!(parse_value("ipi"), ParsedValue::NotToml);
        assert_eq!(parse_value(&"[".repeat(50_000)), ParsedValue::TooDeep);
    }
}
