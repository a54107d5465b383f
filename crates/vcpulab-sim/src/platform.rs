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

    #[test]
    fn an_unknown_name_suggests_the_closest() {
        let m = unknown("DIS-R72");
        assert!(m.contains("did you mean 'DIS-R720'"), "{m}");
        assert!(m.contains("TPDS-4S"), "{m}");
    }
}
