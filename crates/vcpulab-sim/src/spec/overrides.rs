//! `--set PATH=VALUE` overrides, applied to the TOML document before validation.

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
    let Some((path, value)) = raw.split_once('=') else {
        return Err(bad(raw, "expected PATH=VALUE, e.g. vm.apicv=false or experiment.vcpus=[4,8]"));
    };
    let dotted = path.trim().to_string();
    if dotted.is_empty() {
        return Err(bad(raw, "empty path before '='"));
    }
    let mut segs = Vec::new();
    for part in dotted.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if key.is_empty() {
            return Err(bad(raw, format!("empty key in path '{dotted}'")));
        }
        segs.push(Seg::Key(key.to_string()));
        while let Some(r) = rest.strip_prefix('[') {
            let Some(close) = r.find(']') else { return Err(bad(raw, format!("unclosed '[' in path '{dotted}'"))) };
            let idx: usize = r[..close].parse().map_err(|_| bad(raw, format!("bad index '{}' in path '{dotted}'", &r[..close])))?;
            segs.push(Seg::Index(idx));
            rest = &r[close + 1..];
        }
        if !rest.is_empty() {
            return Err(bad(raw, format!("unexpected '{rest}' in path '{dotted}'")));
        }
    }
    let text = value.trim();
    let value = match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(_) => toml::Value::String(text.to_string()),
    };
    Ok(Override { raw: raw.to_string(), path: segs, dotted, value })
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

fn prefix(path: &[Seg]) -> String {
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
