//! Platform presets: one per testbed of the published experiments (`[platform] preset`).
//!
//! A preset is a TOML fragment of a spec (`presets/NAME.toml`): the machine's shape and costs,
//! and the host kernel, guest kernel and KVM behaviour of that testbed, each value preceded by
//! its source. A spec names one with `[platform] preset = "NAME"`; the preset is the base and
//! every field the spec (or `--set`) gives overrides it. Without a `[platform]` table the
//! spec runs on [`DEFAULT_PRESET`], the TPDS testbed. See docs/platforms.md.

use serde::Deserialize;

/// One built-in preset: its name and its TOML text (with the sources as comments).
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// Its name in specs (`TPDS-4S`).
    pub name: &'static str,
    /// The TOML file, comments included.
    pub text: &'static str,
}

/// The preset of a spec without a `[platform]` table: the TPDS testbed.
pub const DEFAULT_PRESET: &str = "TPDS-4S";

macro_rules! preset {
    ($name:literal) => {
        Preset { name: $name, text: include_str!(concat!("../presets/", $name, ".toml")) }
    };
}

/// Every built-in preset: the TPDS, S4U, BAS and DIS testbeds.
pub const PRESETS: [Preset; 6] =
    [preset!("TPDS-4S"), preset!("TPDS-4S-k419"), preset!("S4U-2S"), preset!("BAS-OPT"), preset!("DIS-R720"), preset!("DIS-R420")];

/// The `[platform]` metadata of a preset file (not merged into specs).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PresetMeta {
    /// The preset's name (equal to its file name).
    pub name: String,
    /// One line: machine, CPU, kernels.
    pub title: String,
    /// The experiment ids that run on it.
    #[serde(default)]
    pub used_by: Vec<String>,
}

/// The names of the presets.
pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// The preset called `name` (ASCII case-insensitive).
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// The error for an unknown preset name, with the closest name if one is close.
pub fn unknown(name: &str) -> String {
    let hint = crate::spec::suggest::did_you_mean(name, names());
    format!("unknown platform preset '{name}'{hint} (known: {}; `vcpulab platforms` lists them)", names().join(", "))
}

impl Preset {
    fn document(&self) -> toml::Table {
        toml::from_str(self.text).expect("built-in presets are valid TOML (tested)")
    }

    /// The `[platform]` metadata.
    pub fn meta(&self) -> PresetMeta {
        let doc = self.document();
        let meta = doc.get("platform").cloned().expect("built-in presets have a [platform] table (tested)");
        meta.try_into().expect("built-in preset metadata is valid (tested)")
    }

    /// The spec tables the preset sets (everything but `[platform]`).
    pub fn tables(&self) -> toml::Table {
        let mut doc = self.document();
        doc.remove("platform");
        doc
    }
}

/// One `# estimate:` value of a preset and the range a calibration may fit it in.
///
/// In a preset, the comment block right above an estimated key ends with its bounds:
///
/// ```toml
/// # estimate: a trivial exit = 500 ns. Built-in default.
/// # bounds: [417, 1042] the trivial-exit range of exit_hlt, 1,000-2,500 cycles at 2.4 GHz
/// exit_external_interrupt = 500
/// ```
///
/// `# bounds: [MIN, MAX] REASON` for a number (in the key's own unit, integers for an integer
/// key, `MIN <= value <= MAX`), `# bounds: fixed REASON` for a bool, string, array or table (a
/// choice, never fitted). The reason may continue on `#   ` lines. Only estimates carry bounds:
/// a calibration fits nothing else, and nothing outside its bounds (docs/costs.md, "Bounds of
/// the estimates").
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// The dotted TOML path of the key (`machine.costs.exit_hlt`).
    pub key: String,
    /// The value as the preset gives it.
    pub toml: toml::Value,
    /// The value if it is a number (integer or float); `None` for a bool, string, array or table.
    pub value: Option<f64>,
    /// Whether the value is a TOML integer (its bounds are integers too).
    pub integer: bool,
    /// `(min, max)`, or `None` for `fixed`.
    pub bounds: Option<(f64, f64)>,
    /// Why that range (or why fixed), continuation lines joined.
    pub reason: String,
    /// The key's line in the preset (1-based).
    pub line: usize,
}

/// The `# estimate:` values of a preset's TOML text, each with its `# bounds:` line, in file
/// order. The text is walked as `every_preset_value_has_a_source` walks it: a `[a.b]` header
/// starts a table, a blank line or a header ends a comment block, and a `key = value` line
/// takes the block right above it. Values are read with the `toml` crate at the key's dotted
/// path. The error is one line naming the preset line and what was expected there.
pub fn estimates(text: &str) -> Result<Vec<Estimate>, String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| format!("not valid TOML: {}", e.message().trim()))?;
    let mut table: Vec<String> = Vec::new();
    let mut block: Vec<(usize, &str)> = Vec::new();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            table = header_path(t).ok_or_else(|| format!("line {}: expected a table header `[a.b]`, found `{t}`", n + 1))?;
            block.clear();
        } else if t.starts_with('#') {
            block.push((n + 1, t));
        } else if t.is_empty() {
            block.clear();
        } else if t.contains('=') && !t.starts_with(['"', ']', '{', '}']) {
            let mut path = table.clone();
            path.extend(split_key(t.split('=').next().unwrap_or("")));
            let key = path.join(".");
            let bounds_at = block.iter().position(|(_, c)| c.starts_with("# bounds:"));
            if block.first().is_some_and(|(_, c)| c.starts_with("# estimate:")) {
                out.push(estimate(&doc, &path, key, n + 1, &block, bounds_at)?);
            } else if let Some(i) = bounds_at {
                return Err(format!(
                    "line {}: `{key}` has a `# bounds:` line but is not an estimate (only `# estimate:` values are fitted)",
                    block[i].0
                ));
            }
            block.clear();
        }
    }
    Ok(out)
}

/// The dotted path of a `[a.b]` (or `[[a.b]]`) header, a trailing comment allowed.
fn header_path(t: &str) -> Option<Vec<String>> {
    let inner = t.strip_prefix("[[").and_then(|r| r.split_once("]]")).or_else(|| t.strip_prefix('[').and_then(|r| r.split_once(']')))?.0;
    let path = split_key(inner);
    (!path.is_empty() && path.iter().all(|s| !s.is_empty())).then_some(path)
}

/// `a.b` or `"a".b` → `["a", "b"]` (quoted segments holding a dot are not supported).
fn split_key(k: &str) -> Vec<String> {
    k.split('.').map(|s| s.trim().trim_matches(['"', '\'']).to_string()).collect()
}

/// The estimate of `key` (at `line`) from its comment block; `bounds_at` indexes the
/// `# bounds:` line in `block`.
fn estimate(
    doc: &toml::Table,
    path: &[String],
    key: String,
    line: usize,
    block: &[(usize, &str)],
    bounds_at: Option<usize>,
) -> Result<Estimate, String> {
    let mut node: Option<&toml::Value> = None;
    let mut here = doc;
    for (i, seg) in path.iter().enumerate() {
        let v = here.get(seg).ok_or_else(|| format!("line {line}: `{key}` is not in the parsed TOML"))?;
        if i + 1 < path.len() {
            here = v.as_table().ok_or_else(|| format!("line {line}: `{key}`: `{seg}` is not a table"))?;
        } else {
            node = Some(v);
        }
    }
    let toml = node.cloned().ok_or_else(|| format!("line {line}: `{key}` is not in the parsed TOML"))?;
    let (value, integer) = match &toml {
        toml::Value::Integer(i) => (Some(*i as f64), true),
        toml::Value::Float(f) => (Some(*f), false),
        _ => (None, false),
    };
    let want = if value.is_some() { "[MIN, MAX] REASON" } else { "fixed REASON" };
    let Some(at) = bounds_at else {
        return Err(format!(
            "line {line}: `{key}` is an estimate: expected a `# bounds: {want}` line as the last line of its comment block"
        ));
    };
    let (bline, btext) = block[at];
    if at == 0 {
        return Err(format!("line {bline}: `{key}`: the `# bounds:` line must follow the `# estimate:` text"));
    }
    let mut reason = vec![];
    for &(n, c) in &block[at + 1..] {
        let cont = c.strip_prefix("#   ").ok_or_else(|| {
            format!(
                "line {n}: `{key}`: expected the bounds' reason to continue on `#   ` lines or the key; `# bounds:` ends the comment block"
            )
        })?;
        reason.push(cont.trim());
    }
    let spec = btext["# bounds:".len()..].trim();
    let (bounds, first) = if let Some(rest) = spec.strip_prefix("fixed").filter(|r| r.is_empty() || r.starts_with(' ')) {
        if value.is_some() {
            return Err(format!("line {bline}: `{key}` is a number: expected `[MIN, MAX] REASON` after `# bounds:`, not `fixed`"));
        }
        (None, rest)
    } else if let Some(rest) = spec.strip_prefix('[') {
        let (inside, rest) = rest.split_once(']').ok_or_else(|| format!("line {bline}: `{key}`: expected `[MIN, MAX]`, found no `]`"))?;
        let Some(v) = value else {
            return Err(format!("line {bline}: `{key}` is not a number: expected `fixed REASON` after `# bounds:`, not a range"));
        };
        let nums: Vec<&str> = inside.split(',').map(str::trim).collect();
        let [lo, hi] = nums[..] else {
            return Err(format!("line {bline}: `{key}`: expected two numbers `[MIN, MAX]`, found `[{inside}]`"));
        };
        let (lo, hi) = (bound(lo, integer, &key, bline)?, bound(hi, integer, &key, bline)?);
        if lo > hi {
            return Err(format!("line {bline}: `{key}`: MIN {lo} > MAX {hi} in `[{inside}]`"));
        }
        if v < lo || v > hi {
            return Err(format!("line {bline}: `{key}` = {toml} lies outside its bounds [{lo}, {hi}]"));
        }
        (Some((lo, hi)), rest)
    } else {
        return Err(format!("line {bline}: `{key}`: expected `{want}` after `# bounds:`, found `{spec}`"));
    };
    let mut text = first.trim().to_string();
    for r in reason {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(r);
    }
    if text.is_empty() {
        return Err(format!("line {bline}: `{key}`: the bounds need a reason after them (why that range)"));
    }
    Ok(Estimate { key, toml, value, integer, bounds, reason: text, line })
}

/// One bound of a range: a finite number, an integer if the key is one.
fn bound(s: &str, integer: bool, key: &str, line: usize) -> Result<f64, String> {
    let clean = s.replace('_', "");
    if integer {
        clean
            .parse::<i64>()
            .map(|i| i as f64)
            .map_err(|_| format!("line {line}: `{key}` is an integer: expected integer bounds, found `{s}`"))
    } else {
        match clean.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(f),
            _ => Err(format!("line {line}: `{key}`: expected a number as bound, found `{s}`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_names_itself() {
        for p in PRESETS {
            let meta = p.meta();
            assert_eq!(meta.name, p.name, "presets/{}.toml: platform.name", p.name);
            assert!(!meta.title.is_empty(), "presets/{}.toml: platform.title", p.name);
        }
        assert!(find(DEFAULT_PRESET).is_some());
        assert_eq!(find("dis-r720").map(|p| p.name), Some("DIS-R720"));
    }

    /// Every value of a preset carries its source: the comment lines right above each key
    /// (outside `[platform]`) start with `# source:` or `# estimate:`.
    #[test]
    fn every_preset_value_has_a_source() {
        for p in PRESETS {
            let mut in_platform = false;
            let mut comment: Option<&str> = None;
            for (n, line) in p.text.lines().enumerate() {
                let t = line.trim();
                if t.starts_with('[') {
                    in_platform = t == "[platform]";
                    comment = None;
                } else if t.starts_with('#') {
                    comment.get_or_insert(t);
                } else if t.is_empty() {
                    comment = None;
                } else if !in_platform && t.contains('=') && !t.starts_with(['"', ']', '{', '}']) {
                    let first = comment.unwrap_or("");
                    assert!(
                        first.starts_with("# source:") || first.starts_with("# estimate:"),
                        "presets/{}.toml line {}: `{t}` needs a `# source:` or `# estimate:` comment right above it",
                        p.name,
                        n + 1
                    );
                    comment = None;
                }
            }
        }
    }

    /// Every `# estimate:` value of every preset has bounds: a range holding the value for a
    /// number (integers for an integer), `fixed` for anything else, and a reason.
    #[test]
    fn every_estimate_has_bounds() {
        for p in PRESETS {
            let est = estimates(p.text).unwrap_or_else(|e| panic!("presets/{}.toml {e}", p.name));
            let marked = p.text.lines().filter(|l| l.trim().starts_with("# estimate:")).count();
            assert_eq!(est.len(), marked, "presets/{}.toml: one estimate per `# estimate:` block", p.name);
            for e in &est {
                let at = format!("presets/{}.toml line {}: {}", p.name, e.line, e.key);
                assert!(!e.reason.is_empty(), "{at}: no reason");
                match (e.value, e.bounds) {
                    (Some(v), Some((lo, hi))) => {
                        assert!(lo <= v && v <= hi, "{at}: {v} outside [{lo}, {hi}]");
                        if e.integer {
                            assert!(lo.fract() == 0.0 && hi.fract() == 0.0, "{at}: integer bounds");
                        }
                    }
                    (None, None) => assert!(!matches!(e.toml, toml::Value::Integer(_) | toml::Value::Float(_)), "{at}"),
                    _ => panic!("{at}: a number needs [MIN, MAX], anything else `fixed`"),
                }
            }
        }
        let tpds = estimates(find("TPDS-4S").unwrap().text).unwrap();
        let hlt = tpds.iter().find(|e| e.key == "machine.costs.exit_hlt").expect("exit_hlt is an estimate");
        assert_eq!((hlt.value, hlt.integer), (Some(700.0), true));
        let cg = tpds.iter().find(|e| e.key == "host.cgroups").expect("host.cgroups is an estimate");
        assert_eq!((cg.value, cg.bounds, cg.toml.as_str()), (None, None, Some("libvirt")));
    }

    const PRESET: &str = "[platform]\nname = \"X\"\n\n[machine.costs]\n# source: a measurement\nipi_send = 150\n";

    fn with(block: &str) -> Result<Vec<Estimate>, String> {
        estimates(&format!("{PRESET}{block}"))
    }

    #[test]
    fn bounds_are_read_with_their_reason() {
        let e = with("# estimate: a trivial exit\n#   = 500 ns\n# bounds: [417, 1_042] the trivial-exit\n#   range\nexit_hlt = 500\n[vm]\n# estimate: a choice\n# bounds: fixed not a magnitude\napicv = true\n").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].key.as_str(), e[0].value, e[0].bounds, e[0].line),
            ("machine.costs.exit_hlt", Some(500.0), Some((417.0, 1042.0)), 11)
        );
        assert_eq!(e[0].reason, "the trivial-exit range");
        assert_eq!((e[1].key.as_str(), e[1].value, e[1].bounds, e[1].reason.as_str()), ("vm.apicv", None, None, "not a magnitude"));
        let f = estimates("[machine.memory]\n# estimate: ~90 ns\n# bounds: [72.0, 108] about 20 %\nlocal_latency_ns = 90.0\n").unwrap();
        assert_eq!((f[0].integer, f[0].bounds), (false, Some((72.0, 108.0))));
    }

    #[test]
    fn a_missing_bounds_line_is_an_error() {
        let e = with("# estimate: a trivial exit = 500 ns\nexit_hlt = 500\n").unwrap_err();
        assert_eq!(
            e,
            "line 8: `machine.costs.exit_hlt` is an estimate: expected a `# bounds: [MIN, MAX] REASON` line as the last line of its comment block"
        );
        let e = with("[vm]\n# estimate: a choice\napicv = true\n").unwrap_err();
        assert!(e.starts_with("line 9: `vm.apicv`") && e.contains("`# bounds: fixed REASON`"), "{e}");
        let e = with("# estimate: x\n# bounds: [1, 900] why\n# and more\nexit_hlt = 500\n").unwrap_err();
        assert!(e.starts_with("line 9: ") && e.contains("`#   `"), "{e}");
        let e = with("# estimate: x\n# bounds: [1, 900]\nexit_hlt = 500\n").unwrap_err();
        assert!(e.starts_with("line 8: ") && e.contains("need a reason"), "{e}");
    }

    #[test]
    fn an_inverted_range_is_an_error() {
        let e = with("# estimate: x\n# bounds: [900, 400] why\nexit_hlt = 500\n").unwrap_err();
        assert_eq!(e, "line 8: `machine.costs.exit_hlt`: MIN 900 > MAX 400 in `[900, 400]`");
    }

    #[test]
    fn a_value_outside_its_bounds_is_an_error() {
        let e = with("# estimate: x\n# bounds: [600, 900] why\nexit_hlt = 500\n").unwrap_err();
        assert_eq!(e, "line 8: `machine.costs.exit_hlt` = 500 lies outside its bounds [600, 900]");
    }

    #[test]
    fn bounds_must_fit_the_value() {
        let cases = [
            ("# estimate: x\n# bounds: fixed a choice\nexit_hlt = 500\n", "is a number: expected `[MIN, MAX] REASON`"),
            ("# estimate: x\n# bounds: [400, 1e3] why\nexit_hlt = 500\n", "is an integer: expected integer bounds, found `1e3`"),
            ("# estimate: x\n# bounds: [400, high] why\nlocal = 500.0\n", "expected a number as bound, found `high`"),
            ("# estimate: x\n# bounds: [400] why\nexit_hlt = 500\n", "expected two numbers `[MIN, MAX]`"),
            ("# estimate: x\n# bounds: about 500 why\nexit_hlt = 500\n", "expected `[MIN, MAX] REASON` after `# bounds:`"),
            ("[vm]\n# estimate: x\n# bounds: [0, 1] why\napicv = true\n", "is not a number: expected `fixed REASON`"),
            ("# source: y\n# bounds: [1, 900] why\nexit_hlt = 500\n", "is not an estimate"),
        ];
        for (block, want) in cases {
            let e = with(block).unwrap_err();
            assert!(e.starts_with("line ") && e.contains(want), "{block:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn an_unknown_name_suggests_the_closest() {
        let m = unknown("DIS-R72");
        assert!(m.contains("did you mean 'DIS-R720'"), "{m}");
        assert!(m.contains("TPDS-4S"), "{m}");
    }
}
