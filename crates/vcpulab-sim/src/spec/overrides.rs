//! `--set PATH=VALUE` overrides, applied to the TOML document before validation.

use super::depth::{self, MAX_DEPTH};
use super::error::SpecError;

/// One parsed override.
#[derive(Clone, Debug)]
pub struct Override {
    /// The text as given.
    pub raw: String,
    /// Path segments: keys and array indices.
    pub path: Vec<Seg>,
    /// The dotted path as written (without the value).
    pub dotted: String,
    /// The value (TOML syntax; a bare word is taken as a string).
    pub value: toml::Value,
}

/// One path segment.
#[derive(Clone, Debug, PartialEq)]
pub enum Seg {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

fn bad(raw: &str, msg: impl Into<String>) -> SpecError {
    SpecError::new(format!("--set {raw}"), "", msg)
}

/// Parses every override.
pub fn parse_all(raw: &[String]) -> Result<Vec<Override>, SpecError> {
    raw.iter().map(|r| parse(r)).collect()
}

fn parse(raw: &str) -> Result<Override, SpecError> {
    let Some((path, value)) = split_assignment(raw) else {
        return Err(bad(raw, "expected PATH=VALUE, e.g. vm.apicv=false or experiment.vcpus=[4,8]"));
    };
    let written = path.trim();
    if written.is_empty() {
        return Err(bad(raw, "empty path before '='"));
    }
    let segs = split_path(written).map_err(|m| bad(raw, m))?;
    // Errors name fields without quotes (`workloads.parsec.dedup.params.x`), so blame
    // compares against the unquoted form.
    let dotted = prefix(&segs);
    let text = value.trim();
    // The path and the value nest together under the document's root: one bound for both,
    // the spec file's, checked before the value is built into the document.
    let too_deep = |segs: &[Seg]| SpecError::new(format!("--set {}", depth::shown_text(raw)), depth::shown_path(segs), depth::too_deep());
    if segs.len() > MAX_DEPTH {
        return Err(too_deep(&segs));
    }
    let value = match depth::parse_value(text) {
        depth::ParsedValue::Toml(v) => v,
        depth::ParsedValue::NotToml => toml::Value::String(text.to_string()),
        depth::ParsedValue::TooDeep => return Err(too_deep(&segs)),
    };
    if segs.len() + depth::levels(&value) > MAX_DEPTH {
        return Err(too_deep(&segs));
    }
    Ok(Override { raw: raw.to_string(), path: segs, dotted, value })
}

/// Whether dotted path `key` (of `experiment.vary` or a variant's `set`) alone nests deeper
/// than the spec's bound. A malformed path is not: its override says what is wrong with it.
pub fn path_too_deep(key: &str) -> bool {
    split_path(key.trim()).is_ok_and(|segs| segs.len() > MAX_DEPTH)
}

/// Splits `PATH=VALUE` at the first '=' outside a quoted key.
fn split_assignment(raw: &str) -> Option<(&str, &str)> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in raw.char_indices() {
        match quote {
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '=' => return Some((&raw[..i], &raw[i + 1..])),
            None => {}
        }
    }
    None
}

/// Splits a dotted path as TOML does: bare keys, `"quoted.keys"` (with `\"` and `\\`
/// escapes) or `'literal.keys'`, separated by dots, each optionally followed by `[N]` indices.
fn split_path(dotted: &str) -> Result<Vec<Seg>, String> {
    let mut segs = Vec::new();
    let mut chars = dotted.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let mut key = String::new();
        match chars.peek().copied() {
            Some(q @ ('"' | '\'')) => {
                chars.next();
                let mut closed = false;
                while let Some(c) = chars.next() {
                    if c == q {
                        closed = true;
                        break;
                    }
                    if q == '"' && c == '\\' {
                        match chars.next() {
                            Some(e @ ('"' | '\\')) => key.push(e),
                            _ => return Err(format!("unsupported escape in quoted key of path '{dotted}' (only \\\" and \\\\)")),
                        }
                        continue;
                    }
                    key.push(c);
                }
                if !closed {
                    return Err(format!("unclosed quote in path '{dotted}'"));
                }
            }
            _ => {
                while let Some(&c) = chars.peek() {
                    if c == '.' || c == '[' {
                        break;
                    }
                    if c == '"' || c == '\'' {
                        return Err(format!("a quote inside a key of path '{dotted}' (quote the whole key: \"a.b\")"));
                    }
                    key.push(c);
                    chars.next();
                }
                key = key.trim_end().to_string();
                if key.is_empty() {
                    return Err(format!("empty key in path '{dotted}'"));
                }
            }
        }
        segs.push(Seg::Key(key));
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        while chars.peek() == Some(&'[') {
            chars.next();
            let mut idx = String::new();
            let mut closed = false;
            for c in chars.by_ref() {
                if c == ']' {
                    closed = true;
                    break;
                }
                idx.push(c);
            }
            if !closed {
                return Err(format!("unclosed '[' in path '{dotted}'"));
            }
            let i: usize = idx.trim().parse().map_err(|_| format!("bad index '{idx}' in path '{dotted}'"))?;
            segs.push(Seg::Index(i));
        }
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        match chars.next() {
            None => return Ok(segs),
            Some('.') => {}
            Some(c) => {
                let rest: String = std::iter::once(c).chain(chars).collect();
                return Err(format!("unexpected '{rest}' in path '{dotted}'"));
            }
        }
    }
}

/// Applies every override in order.
pub fn apply_all(doc: &mut toml::Table, sets: &[Override]) -> Result<(), SpecError> {
    for o in sets {
        apply(doc, o)?;
    }
    Ok(())
}

fn apply(doc: &mut toml::Table, o: &Override) -> Result<(), SpecError> {
    let mut root = toml::Value::Table(std::mem::take(doc));
    let result = set_path(&mut root, o);
    if let toml::Value::Table(t) = root {
        *doc = t;
    }
    result
}

fn set_path(root: &mut toml::Value, o: &Override) -> Result<(), SpecError> {
    let mut cur = root;
    for (i, seg) in o.path.iter().enumerate() {
        let last = i + 1 == o.path.len();
        match seg {
            Seg::Key(k) => {
                let Some(t) = cur.as_table_mut() else {
                    return Err(bad(&o.raw, format!("'{}' is not a table", prefix(&o.path[..i]))));
                };
                if last {
                    t.insert(k.clone(), o.value.clone());
                    return Ok(());
                }
                cur = t.entry(k.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            }
            Seg::Index(idx) => {
                let Some(a) = cur.as_array_mut() else {
                    return Err(bad(&o.raw, format!("'{}' is not a list", prefix(&o.path[..i]))));
                };
                let len = a.len();
                let Some(slot) = a.get_mut(*idx) else {
                    return Err(bad(&o.raw, format!("index {idx} out of range ('{}' has {len} items)", prefix(&o.path[..i]))));
                };
                if last {
                    *slot = o.value.clone();
                    return Ok(());
                }
                cur = slot;
            }
        }
    }
    Ok(())
}

/// A path as errors name it: keys joined with dots, unquoted.
pub fn prefix(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The source to blame for an error at `path`: the last override that set it (or a parent
/// of it), else the file.
pub fn blame(sets: &[Override], source: &str, path: &str) -> String {
    sets.iter()
        .rev()
        .find(|o| {
            path == o.dotted
                || path.starts_with(&format!("{}.", o.dotted))
                || path.starts_with(&format!("{}[", o.dotted))
                // the override created or replaced a parent of the field at fault
                || (!path.is_empty() && o.dotted.starts_with(&format!("{path}.")))
        })
        .map(|o| format!("--set {}", o.raw))
        .unwrap_or_else(|| source.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(raw: &str) -> Vec<Seg> {
        parse(raw).expect("parses").path
    }

    #[test]
    fn quoted_keys_are_single_segments() {
        let k = |s: &str| Seg::Key(s.into());
        assert_eq!(
            keys("workloads.\"parsec.dedup\".params.fragments=68"),
            vec![k("workloads"), k("parsec.dedup"), k("params"), k("fragments")]
        );
        assert_eq!(keys("experiment.vary.'vm.tlb'=[\"ipi\"]"), vec![k("experiment"), k("vary"), k("vm.tlb")]);
        assert_eq!(keys("a.\"x=y\"=1"), vec![k("a"), k("x=y")]);
        assert_eq!(keys("experiment.vcpus[1]=4"), vec![k("experiment"), k("vcpus"), Seg::Index(1)]);
        assert_eq!(parse("workloads.\"parsec.dedup\".params.x=1").unwrap().dotted, "workloads.parsec.dedup.params.x");
        for bad in ["a.\"b=1", "a..b=1", "a.b\"c\"=1", "a[x]=1", "a[1=1"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_path_and_its_value_nest_within_the_spec_bound_together() {
        let path = |n: usize| vec!["a"; n].join(".");
        let inline = |n: usize| "{ a = ".repeat(n) + "1" + &" }".repeat(n);
        assert!(parse(&format!("{}=1", path(MAX_DEPTH))).is_ok());
        assert!(parse(&format!("{}={}", path(MAX_DEPTH - 3), inline(3))).is_ok());
        assert!(parse(&format!("a[0][1]={}", inline(MAX_DEPTH - 3))).is_ok());
        for raw in [
            format!("{}=1", path(MAX_DEPTH + 1)),
            format!("{}={}", path(MAX_DEPTH - 3), inline(4)),
            format!("a[0][1]={}", inline(MAX_DEPTH - 2)),
            // Far past every bound: a stack overflow (SIGSEGV) before the bound existed.
            format!("{}=1", path(20_000)),
            format!("x.y={}{}", "[".repeat(20_000), "]".repeat(20_000)),
            format!("x.y={}", "[".repeat(20_000)),
        ] {
            let e = parse(&raw).unwrap_err();
            assert_eq!(e.message, depth::too_deep(), "{e}");
            assert!(e.source.starts_with("--set ") && e.source.len() < 120, "{e}");
        }
        let e = parse(&format!("{}=1", path(100))).unwrap_err();
        assert_eq!(e.field, "a.a.a…");
        assert_eq!(e.source, format!("--set {}… (201 characters)", &path(100)[..60]));
    }
}
