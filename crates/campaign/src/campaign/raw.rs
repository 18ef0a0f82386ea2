//! The campaign file as TOML gives it: every value keeps its span so an
//! error can name its line; nothing here is validated yet.

pub(super) use super::axes::{Quick, RawMatrix};
use serde::Deserialize;
use std::fmt;
use toml::Spanned;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(untagged)]
pub(super) enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    pub(super) fn text(&self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Str(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    Many(Vec<Scalar>),
    One(Scalar),
}

impl OneOrMany {
    pub(super) fn values(&self) -> Vec<Scalar> {
        match self {
            OneOrMany::Many(v) => v.clone(),
            OneOrMany::One(s) => vec![s.clone()],
        }
    }
}

pub(super) type AxisField = Option<Spanned<OneOrMany>>;

/// `[matrix]` (one table) or `[[matrix]]` (several). Not an untagged enum:
/// that would buffer the values and lose the spans and the unknown-key
/// errors that name the line.
#[derive(Debug)]
pub(super) enum RawMatrices {
    Many(Vec<Spanned<RawMatrix>>),
    One(Box<RawMatrix>),
}

impl<'de> Deserialize<'de> for RawMatrices {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawMatrices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a [matrix] table or [[matrix]] blocks")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawMatrices, A::Error> {
                RawMatrix::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|m| RawMatrices::One(Box::new(m)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<RawMatrices, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(RawMatrices::Many)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTestbed {
    pub(super) preset: Option<Spanned<String>>,
    pub(super) file: Option<Spanned<String>>,
    pub(super) sender: Option<Spanned<String>>,
    pub(super) receiver: Option<Spanned<String>>,
    pub(super) mtu: Option<Spanned<i64>>,
    pub(super) link_rate: Option<Spanned<String>>,
    pub(super) offloads: Option<Spanned<bool>>,
    pub(super) forward_pps: Option<Spanned<i64>>,
    pub(super) name: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHosts {
    pub(super) receiver: Option<Spanned<String>>,
    pub(super) receiver6: Option<Spanned<String>>,
    pub(super) port: Option<Spanned<i64>>,
    pub(super) mtu: Option<Spanned<i64>>,
    pub(super) link_rate: Option<Spanned<String>>,
    pub(super) node: Option<Vec<Spanned<RawNode>>>,
    /// `[hosts.pairings]`: name → the nodes one value of the `pairing`
    /// axis uses.
    pub(super) pairings: Option<Spanned<std::collections::BTreeMap<String, Spanned<RawPairing>>>>,
    pub(super) defaults: Option<RawNodeDefaults>,
}

/// One sender name or several.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(untagged)]
pub(super) enum Names {
    One(String),
    Many(Vec<String>),
}

impl Names {
    pub(super) fn list(&self) -> Vec<String> {
        match self {
            Names::One(s) => vec![s.clone()],
            Names::Many(v) => v.clone(),
        }
    }
}

/// One entry of `[hosts.pairings]` as written.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPairing {
    pub(super) sender: Spanned<Names>,
    pub(super) receiver: Spanned<String>,
    pub(super) routers: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNode {
    pub(super) name: Spanned<String>,
    pub(super) ssh: Option<Spanned<String>>,
    pub(super) ssh_options: Option<Vec<String>>,
    pub(super) local: Option<Spanned<bool>>,
    pub(super) netns: Option<Spanned<String>>,
    pub(super) agent: Option<String>,
    pub(super) role: Spanned<String>,
    pub(super) to: Option<Spanned<String>>,
    pub(super) ipv4: Option<Spanned<String>>,
    pub(super) ipv6: Option<Spanned<String>>,
    /// Unset: `[hosts.defaults]`, else off.
    pub(super) apply_mtu: Option<bool>,
    pub(super) apply_offloads: Option<bool>,
    pub(super) apply_link_rate: Option<bool>,
    #[serde(default)]
    pub(super) interfaces: Vec<String>,
}

/// `[hosts.defaults]`: node settings every `[[hosts.node]]` takes unless
/// it gives its own.
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNodeDefaults {
    pub(super) agent: Option<String>,
    pub(super) ssh_options: Option<Vec<String>>,
    pub(super) apply_mtu: Option<bool>,
    pub(super) apply_offloads: Option<bool>,
    pub(super) apply_link_rate: Option<bool>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLoopback {}

/// The `[report]` table as written.
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReport {
    pub(super) columns: Option<Spanned<String>>,
    pub(super) units: Option<Spanned<String>>,
    pub(super) zoom: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCampaign {
    pub(super) name: Option<Spanned<String>>,
    pub(super) description: Option<String>,
    pub(super) store: Option<Spanned<String>>,
    /// A whole number, or the adaptive table `{ min, max, until_cv | until_ci, metric }`.
    pub(super) repetitions: Option<Spanned<toml::Value>>,
    pub(super) duration_s: Option<Spanned<f64>>,
    pub(super) packets: Option<Spanned<i64>>,
    pub(super) kbytes: Option<Spanned<i64>>,
    pub(super) warmup_s: Option<Spanned<f64>>,
    pub(super) pause_s: Option<Spanned<f64>>,
    pub(super) linger_s: Option<Spanned<f64>>,
    pub(super) interval_ms: Option<Spanned<i64>>,
    pub(super) order: Option<Spanned<String>>,
    pub(super) seed: Option<Spanned<i64>>,
    pub(super) baseline: Option<Spanned<String>>,
    pub(super) run_timeout_s: Option<Spanned<f64>>,
    pub(super) repeat_stalled: Option<Spanned<i64>>,
    pub(super) testbed: Option<Spanned<RawTestbed>>,
    pub(super) hosts: Option<Spanned<RawHosts>>,
    pub(super) loopback: Option<Spanned<RawLoopback>>,
    pub(super) matrix: Option<RawMatrices>,
    pub(super) quick: Option<Spanned<Quick>>,
    /// An RFC 2544 search instead of a matrix (read by `crate::rfc2544`).
    pub(super) rfc2544: Option<Spanned<toml::Value>>,
    pub(super) report: Option<RawReport>,
}
