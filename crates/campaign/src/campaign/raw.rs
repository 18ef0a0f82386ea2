//! The campaign file as TOML gives it: every value keeps its span so an
//! error can name its line; nothing here is validated yet.

use super::Axis;
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

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMatrix {
    pub(super) ip: AxisField,
    pub(super) transport: AxisField,
    pub(super) meter: AxisField,
    pub(super) app: AxisField,
    pub(super) codec: AxisField,
    pub(super) payload: AxisField,
    pub(super) frame: AxisField,
    pub(super) pps: AxisField,
    pub(super) flows: AxisField,
    pub(super) mtu: AxisField,
    pub(super) link_rate: AxisField,
    pub(super) offloads: AxisField,
    pub(super) forward_pps: AxisField,
    pub(super) sender: AxisField,
    pub(super) dscp: AxisField,
    pub(super) cc: AxisField,
    pub(super) window: AxisField,
    pub(super) rate: AxisField,
    pub(super) idt: AxisField,
    pub(super) size: AxisField,
    pub(super) direction: AxisField,
    pub(super) duration: AxisField,
}

impl RawMatrix {
    pub(super) fn fields(&self) -> Vec<(Axis, &Spanned<OneOrMany>)> {
        let all = [
            (Axis::Ip, &self.ip),
            (Axis::Transport, &self.transport),
            (Axis::Meter, &self.meter),
            (Axis::App, &self.app),
            (Axis::Codec, &self.codec),
            (Axis::Payload, &self.payload),
            (Axis::Frame, &self.frame),
            (Axis::Pps, &self.pps),
            (Axis::Flows, &self.flows),
            (Axis::Mtu, &self.mtu),
            (Axis::LinkRate, &self.link_rate),
            (Axis::Offloads, &self.offloads),
            (Axis::ForwardPps, &self.forward_pps),
            (Axis::Sender, &self.sender),
            (Axis::Dscp, &self.dscp),
            (Axis::Cc, &self.cc),
            (Axis::Window, &self.window),
            (Axis::Rate, &self.rate),
            (Axis::Idt, &self.idt),
            (Axis::Size, &self.size),
            (Axis::Direction, &self.direction),
            (Axis::Duration, &self.duration),
        ];
        all.into_iter()
            .filter_map(|(a, f)| f.as_ref().map(|f| (a, f)))
            .collect()
    }
}

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
    #[serde(default)]
    pub(super) apply_mtu: bool,
    #[serde(default)]
    pub(super) apply_offloads: bool,
    #[serde(default)]
    pub(super) apply_link_rate: bool,
    #[serde(default)]
    pub(super) interfaces: Vec<String>,
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

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Quick {
    pub(super) repetitions: Option<Spanned<i64>>,
    pub(super) duration_s: Option<Spanned<f64>>,
    pub(super) packets: Option<Spanned<i64>>,
    pub(super) kbytes: Option<Spanned<i64>>,
    pub(super) warmup_s: Option<Spanned<f64>>,
    pub(super) pause_s: Option<Spanned<f64>>,
    pub(super) linger_s: Option<Spanned<f64>>,
    // The axes, spelled out: `#[serde(flatten)]` would buffer the values
    // and lose their line numbers.
    pub(super) ip: AxisField,
    pub(super) transport: AxisField,
    pub(super) meter: AxisField,
    pub(super) app: AxisField,
    pub(super) codec: AxisField,
    pub(super) payload: AxisField,
    pub(super) frame: AxisField,
    pub(super) pps: AxisField,
    pub(super) flows: AxisField,
    pub(super) mtu: AxisField,
    pub(super) link_rate: AxisField,
    pub(super) offloads: AxisField,
    pub(super) forward_pps: AxisField,
    pub(super) sender: AxisField,
    pub(super) dscp: AxisField,
    pub(super) cc: AxisField,
    pub(super) window: AxisField,
    pub(super) rate: AxisField,
    pub(super) idt: AxisField,
    pub(super) size: AxisField,
    pub(super) direction: AxisField,
    pub(super) duration: AxisField,
}

impl Quick {
    pub(super) fn axes(&self) -> RawMatrix {
        RawMatrix {
            ip: self.ip.clone(),
            transport: self.transport.clone(),
            meter: self.meter.clone(),
            app: self.app.clone(),
            codec: self.codec.clone(),
            payload: self.payload.clone(),
            frame: self.frame.clone(),
            pps: self.pps.clone(),
            flows: self.flows.clone(),
            mtu: self.mtu.clone(),
            link_rate: self.link_rate.clone(),
            offloads: self.offloads.clone(),
            forward_pps: self.forward_pps.clone(),
            sender: self.sender.clone(),
            dscp: self.dscp.clone(),
            cc: self.cc.clone(),
            window: self.window.clone(),
            rate: self.rate.clone(),
            idt: self.idt.clone(),
            size: self.size.clone(),
            direction: self.direction.clone(),
            duration: self.duration.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCampaign {
    pub(super) name: Option<Spanned<String>>,
    pub(super) description: Option<String>,
    pub(super) repetitions: Option<Spanned<i64>>,
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
    pub(super) testbed: Option<Spanned<RawTestbed>>,
    pub(super) hosts: Option<Spanned<RawHosts>>,
    pub(super) loopback: Option<Spanned<RawLoopback>>,
    pub(super) matrix: Option<RawMatrices>,
    pub(super) quick: Option<Spanned<Quick>>,
    /// An RFC 2544 search instead of a matrix (read by `crate::rfc2544`).
    pub(super) rfc2544: Option<Spanned<toml::Value>>,
    pub(super) report: Option<RawReport>,
}
