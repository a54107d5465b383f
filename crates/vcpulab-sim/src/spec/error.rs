//! The spec error: one line naming the source, the field and what was expected.

use std::fmt;

/// A problem with a spec, a workload definition or an override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// Where the input came from: a file name, `<flags>`, or `--set PATH=VALUE`.
    pub source: String,
    /// The dotted path of the offending field (may be empty for whole-file problems).
    pub field: String,
    /// What was expected (and what was found).
    pub message: String,
}

impl SpecError {
    /// A new error.
    pub fn new(source: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError { source: source.into(), field: field.into(), message: message.into() }
    }

    /// A TOML syntax error, reported with its line and column.
    pub fn toml(source: &str, e: &toml::de::Error) -> Self {
        let msg = e.message().lines().next().unwrap_or("invalid TOML").trim().to_string();
        let at = e.span().map(|_| String::new()).unwrap_or_default();
        let line_col =
            e.to_string().lines().next().and_then(|l| l.find("line ").map(|i| l[i..].trim_end_matches(':').to_string())).unwrap_or(at);
        let field = if line_col.is_empty() { String::new() } else { line_col };
        SpecError::new(source, field, format!("malformed TOML: {msg}"))
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.source, self.message)
        } else {
            write!(f, "{}: {}: {}", self.source, self.field, self.message)
        }
    }
}

impl std::error::Error for SpecError {}
