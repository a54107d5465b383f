//! Small value types used in specs.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::workload::dist::parse_duration;

/// A duration in nanoseconds, written as an integer (ns) or a string with a unit ("4ms").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Dur(pub u64);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like '4ms' or an integer number of nanoseconds")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                if v < 0 {
                    Err(E::custom(format!("expected a non-negative duration (got {v})")))
                } else {
                    Ok(Dur(v as u64))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A value or a list of values (`vcpus = 8` or `vcpus = [4, 8]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| T::deserialize(v).map_err(|e| de::Error::custom(format!("item [{i}]: {}", e.message()))))
                .collect::<Result<Vec<T>, D::Error>>()
                .map(OneOrMany),
            v => T::deserialize(v).map(|x| OneOrMany(vec![x])).map_err(|e| de::Error::custom(e.message())),
        }
    }
}

/// The scenarios of TPDS §1.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// The workload on N cores, no VM.
    Native,
    /// Undercommitted: one VM with N vCPUs on the same N cores.
    Uc,
    /// Overcommitted: k identical VMs (default 2), each N vCPUs on the same N cores.
    Oc,
    /// The OC VMs compared against k native instances co-running on the N cores.
    Oc2,
}

impl Scenario {
    /// The name used in specs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Native => "native",
            Scenario::Uc => "UC",
            Scenario::Oc => "OC",
            Scenario::Oc2 => "OC2",
        }
    }

    /// Parses a scenario name (case-insensitive).
    pub fn parse(s: &str) -> Option<Scenario> {
        match s.to_ascii_lowercase().as_str() {
            "native" => Some(Scenario::Native),
            "uc" => Some(Scenario::Uc),
            "oc" => Some(Scenario::Oc),
            "oc2" => Some(Scenario::Oc2),
            _ => None,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Scenario {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Scenario {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Scenario::parse(&s).ok_or_else(|| de::Error::custom(format!("unknown scenario '{s}' (expected native, UC, OC or OC2)")))
    }
}
