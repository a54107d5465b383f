//! `[[published]]` and `[reproduce]`: published values, the rules that judge them, and the
//! published experiment a spec reproduces (docs/reproduce.md).

use indexmap::IndexMap;
use serde::Deserialize;

/// A published value or shape to compare with (`[[published]]`), and how the reproduction
/// scoreboard judges it (`rule`; docs/reproduce.md). Without a rule it is only printed next to
/// the simulated value.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PublishedSpec {
    /// What was measured, in words (the scoreboard's row label).
    #[serde(default)]
    pub what: Option<String>,
    /// Metric name in the results (`vcpulab run --json` keys, e.g. `tlb_latency_mean_us`).
    pub metric: String,
    /// The published value (required by `rule = "value"`; absent for a withheld or
    /// figure-only result).
    #[serde(default)]
    pub value: Option<f64>,
    /// Where it comes from (and, for a tolerance, the variance that justifies it).
    #[serde(default)]
    pub source: String,
    /// Which cells it applies to: cell keys (`scenario`, `workload`, `vcpus`) and variant keys
    /// (`vm.tlb`) with the value they must have.
    #[serde(default, rename = "where")]
    pub when: IndexMap<String, toml::Value>,
    /// How a verdict is reached.
    #[serde(default)]
    pub rule: Rule,
    /// `rule = "value"`: the half-width of the accepted band, absolute (a number) or relative
    /// to the value (`"20%"`).
    #[serde(default)]
    pub tolerance: Option<Tolerance>,
    /// `rule = "sign"`: the side of `value` (0 when no value is given).
    #[serde(default)]
    pub sign: Option<Sign>,
    /// `rule = "order"`: selectors (merged over `where`) whose values must be in `direction`.
    #[serde(default)]
    pub order: Vec<IndexMap<String, toml::Value>>,
    /// `rule = "trend"` / `"peak"`: the cell field or variant key varied.
    #[serde(default)]
    pub over: Option<String>,
    /// `rule = "order"` / `"trend"`: increasing (default) or decreasing.
    #[serde(default)]
    pub direction: Direction,
    /// `rule = "peak"`: the value of `over` where the maximum lies.
    #[serde(default)]
    pub at: Option<toml::Value>,
    /// Baseline cells (a selector merged over `where`): the quantity becomes the metric
    /// relative to theirs, seed by seed.
    #[serde(default)]
    pub relative_to: Option<IndexMap<String, toml::Value>>,
    /// How a value relates to its baseline (`relative_to`).
    #[serde(default)]
    pub compare: Compare,
    /// How the cells one seed matches are combined.
    #[serde(default)]
    pub aggregate: Aggregate,
}

/// How a published entry is judged (docs/reproduce.md).
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Shown, not judged (withheld, figure-only, or a plain comparison).
    #[default]
    None,
    /// Within `tolerance` of `value`.
    Value,
    /// On the `sign` side of zero.
    Sign,
    /// The `order` selectors' values in `direction`.
    Order,
    /// Monotone in `direction` over `over`.
    Trend,
    /// Largest at `over = at`.
    Peak,
}

/// The side of `value` (default 0) of `rule = "sign"`.
#[derive(Clone, Copy, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Sign {
    /// Above it.
    Positive,
    /// Below it.
    Negative,
}

/// The direction of `rule = "order"` and `"trend"`.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Each value above the previous one.
    #[default]
    Increasing,
    /// Each value below the previous one.
    Decreasing,
}

/// How a value relates to its `relative_to` baseline.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// value / baseline.
    #[default]
    Ratio,
    /// value / baseline - 1.
    Change,
    /// value - baseline.
    Difference,
}

/// How the cells one seed matches are combined.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// Their mean.
    #[default]
    Mean,
    /// Their largest value.
    Max,
    /// Their smallest value.
    Min,
    /// Their sum.
    Sum,
}

/// The tolerance of `rule = "value"`: a number (absolute) or a percentage string (relative to
/// the published value), serialised as `{ absolute = x }` or `{ relative = x }`.
#[derive(Clone, Copy, Debug, serde::Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Tolerance {
    /// The band is value ± this.
    Absolute(f64),
    /// The band is value ± this × |value| (0.2 for `"20%"`).
    Relative(f64),
}

impl<'de> Deserialize<'de> for Tolerance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        const EXPECTED: &str = "expected a positive number (absolute) or a percentage such as \"20%\" (relative)";
        let v = toml::Value::deserialize(d)?;
        let parsed = match &v {
            toml::Value::Integer(i) => Some(Tolerance::Absolute(*i as f64)),
            toml::Value::Float(f) => Some(Tolerance::Absolute(*f)),
            toml::Value::String(s) => {
                s.trim().strip_suffix('%').and_then(|n| n.trim().parse::<f64>().ok()).map(|p| Tolerance::Relative(p / 100.0))
            }
            _ => None,
        };
        match parsed {
            Some(t @ (Tolerance::Absolute(x) | Tolerance::Relative(x))) if x.is_finite() && x > 0.0 => Ok(t),
            _ => Err(D::Error::custom(format!("{EXPECTED} (got {v})"))),
        }
    }
}

impl PublishedSpec {
    /// Checks that the fields the rule needs are there and no others; returns (field, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        let rule = self.rule;
        let needs = |ok: bool, field: &str, what: &str| {
            if ok {
                Ok(())
            } else {
                Err((field.to_string(), format!("rule = \"{}\" needs {what}", rule_name(rule))))
            }
        };
        let only = |present: bool, field: &str, rules: &str| {
            if present {
                Err((field.to_string(), format!("only applies to {rules} (this entry has rule = \"{}\")", rule_name(rule))))
            } else {
                Ok(())
            }
        };
        if self.metric.trim().is_empty() {
            return Err(("metric".into(), "expected a metric name".into()));
        }
        if let Some(v) = self.value {
            if !v.is_finite() {
                return Err(("value".into(), format!("expected a finite number (got {v})")));
            }
        }
        match rule {
            Rule::Value => {
                needs(self.value.is_some(), "value", "the published value")?;
                needs(self.tolerance.is_some(), "tolerance", "a tolerance (a number, or a percentage such as \"20%\")")?;
            }
            Rule::Sign => needs(self.sign.is_some(), "sign", "sign = \"positive\" or \"negative\"")?,
            Rule::Order => needs(self.order.len() >= 2, "order", "at least two selectors (order = [{ ... }, { ... }])")?,
            Rule::Trend => needs(self.over.is_some(), "over", "the field varied (over = \"vcpus\")")?,
            Rule::Peak => {
                needs(self.over.is_some(), "over", "the field varied (over = \"vcpus\")")?;
                needs(self.at.is_some(), "at", "the value of `over` at the peak (at = 32)")?;
            }
            Rule::None => {}
        }
        only(self.tolerance.is_some() && rule != Rule::Value, "tolerance", "rule = \"value\"")?;
        only(self.sign.is_some() && rule != Rule::Sign, "sign", "rule = \"sign\"")?;
        only(!self.order.is_empty() && rule != Rule::Order, "order", "rule = \"order\"")?;
        only(self.over.is_some() && !matches!(rule, Rule::Trend | Rule::Peak), "over", "rule = \"trend\" or \"peak\"")?;
        only(self.at.is_some() && rule != Rule::Peak, "at", "rule = \"peak\"")?;
        if self.compare != Compare::Ratio && self.relative_to.is_none() {
            return Err(("compare".into(), "needs relative_to (the baseline cells)".into()));
        }
        Ok(())
    }
}

fn rule_name(r: Rule) -> &'static str {
    match r {
        Rule::None => "none",
        Rule::Value => "value",
        Rule::Sign => "sign",
        Rule::Order => "order",
        Rule::Trend => "trend",
        Rule::Peak => "peak",
    }
}

/// Whether a reproduced experiment's published result is visible or withheld.
#[derive(Clone, Copy, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Its published values are given.
    Visible,
    /// Withheld to validate the simulator (W): the spec only produces the figure.
    Withheld,
}

/// The `[reproduce]` table of a published-experiment spec (`experiments/published/ID.toml`).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReproduceSpec {
    /// The experiment id (`TPDS-F4`: the source and its figure, table or prose result).
    pub id: String,
    /// What the experiment asks, in a line.
    pub title: String,
    /// Visible or withheld.
    pub status: Visibility,
    /// Where the setup comes from.
    #[serde(default)]
    pub source: String,
    /// Where the spec departs from the source's setup, and why.
    #[serde(default)]
    pub notes: Option<String>,
    /// `--set` overrides of `vcpulab reproduce --quick` (reduced sizes).
    #[serde(default)]
    pub quick: IndexMap<String, toml::Value>,
    /// Set when the source's result is an idealised illustration (exact arithmetic, not a
    /// measurement): why the model may depart from it. Its rows are scored apart and never
    /// counted as reproduced or not (issue 51 item 7).
    #[serde(default)]
    pub illustration: Option<String>,
}
