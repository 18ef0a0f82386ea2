//! Campaign files: parsing, validation and matrix expansion.
//!
//! Everything a campaign could get wrong is checked here, before a test-bed
//! is built or a packet sent, and every error names the line and the key so
//! the user can fix the file without guessing. Expansion is deterministic:
//! the same file always yields the same scenarios with the same keys, which
//! is what lets an interrupted campaign resume without repeating a run.

use crate::summary::{ReportOptions, ThroughputUnits};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;
use toml::Spanned;

use wirebench_model::app::{DitgCodec, ALL_APPS};
use wirebench_model::{MAX_PAYLOAD, MIN_PAYLOAD};

/// The `app` axis: the constant model (no `--app`) or one of D-ITG's
/// application models as the engine's model crate names them.
fn known_app(name: &str) -> bool {
    name == "constant" || ALL_APPS.contains(&name)
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CampaignError {
    /// A key has a bad value, or a key is not known.
    #[error("{origin}:{line}: `{key}`: {reason}")]
    Invalid {
        origin: String,
        line: usize,
        key: String,
        reason: String,
    },
    /// The file is not TOML at all.
    #[error("{origin}:{line}: {reason}")]
    Syntax {
        origin: String,
        line: usize,
        reason: String,
    },
}

impl CampaignError {
    pub fn line(&self) -> usize {
        match self {
            CampaignError::Invalid { line, .. } | CampaignError::Syntax { line, .. } => *line,
        }
    }
}

/// One matrix dimension. The declaration order is the order axes appear
/// in scenario keys, so keys stay stable whatever order the file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Axis {
    Ip,
    Transport,
    Meter,
    App,
    Codec,
    Payload,
    Frame,
    Pps,
    Flows,
    Mtu,
    LinkRate,
    Offloads,
    ForwardPps,
    /// Which sender node(s) of `[[hosts.node]]` send in the scenario: one
    /// node name per value (comparing systems: a Windows and a Linux
    /// sender to the same receiver).
    Sender,
    /// `send --dscp` of every flow: "EF vs best effort".
    Dscp,
    /// `send --cc` (TCP congestion control): "cubic vs bbr".
    Cc,
    /// `send --window` (socket buffers).
    Window,
    /// `send --rate` (payload bit/s) instead of `pps`.
    Rate,
    /// An inter-departure law in D-ITG letters, e.g. "E 1000" (`send -E 1000`).
    Idt,
    /// A size law in D-ITG letters, e.g. "u 100 1400" (`send -u 100 1400`).
    Size,
    /// Which way the flows run: forward, reverse (`send -R`) or bidir
    /// (`send --bidir`).
    Direction,
    /// Seconds per run (`send -t`), instead of the campaign's length: a
    /// pilot sweep of run lengths (10 s … 120 s) in one campaign.
    Duration,
}

impl Axis {
    pub const ALL: [Axis; 22] = [
        Axis::Ip,
        Axis::Transport,
        Axis::Meter,
        Axis::App,
        Axis::Codec,
        Axis::Payload,
        Axis::Frame,
        Axis::Pps,
        Axis::Flows,
        Axis::Mtu,
        Axis::LinkRate,
        Axis::Offloads,
        Axis::ForwardPps,
        Axis::Sender,
        Axis::Dscp,
        Axis::Cc,
        Axis::Window,
        Axis::Rate,
        Axis::Idt,
        Axis::Size,
        Axis::Direction,
        Axis::Duration,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Axis::Ip => "ip",
            Axis::Transport => "transport",
            Axis::Meter => "meter",
            Axis::App => "app",
            Axis::Codec => "codec",
            Axis::Payload => "payload",
            Axis::Frame => "frame",
            Axis::Pps => "pps",
            Axis::Flows => "flows",
            Axis::Mtu => "mtu",
            Axis::LinkRate => "link_rate",
            Axis::Offloads => "offloads",
            Axis::ForwardPps => "forward_pps",
            Axis::Sender => "sender",
            Axis::Dscp => "dscp",
            Axis::Cc => "cc",
            Axis::Window => "window",
            Axis::Rate => "rate",
            Axis::Idt => "idt",
            Axis::Size => "size",
            Axis::Direction => "direction",
            Axis::Duration => "duration",
        }
    }

    pub fn from_name(s: &str) -> Option<Axis> {
        Axis::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Axes that change the test-bed's links (a change forces a rebuild).
    pub fn is_link(self) -> bool {
        matches!(
            self,
            Axis::Mtu | Axis::LinkRate | Axis::Offloads | Axis::ForwardPps
        )
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the traffic runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Sender and receiver both on this host over 127.0.0.1 / ::1; no root
    /// needed, no link settings possible.
    Loopback,
    /// An emulated test-bed built in network namespaces.
    Testbed(TestbedTarget),
    /// Real hosts: this host sends, a `wirebench recv` already runs on the
    /// receiver.
    Hosts(HostsTarget),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Loopback => "loopback (127.0.0.1 / ::1)".into(),
            Target::Testbed(t) => {
                let what = match (&t.preset, &t.file) {
                    (Some(p), _) => format!("preset {p}"),
                    (None, Some(f)) => format!("topology file {f}"),
                    _ => String::new(),
                };
                format!("test-bed {what}, {} -> {}", t.sender, t.receiver)
            }
            Target::Hosts(h) if !h.nodes.is_empty() => format!(
                "real nodes: {}",
                h.nodes
                    .iter()
                    .map(|n| format!("{} ({})", n.name, n.role.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Target::Hosts(h) => format!(
                "real hosts: receiver {}{}",
                h.receiver.as_deref().unwrap_or("-"),
                h.receiver6
                    .as_deref()
                    .map(|a| format!(" / {a}"))
                    .unwrap_or_default()
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestbedTarget {
    pub preset: Option<String>,
    /// Topology file, resolved relative to the campaign file.
    pub file: Option<String>,
    pub sender: String,
    pub receiver: String,
    /// Link settings used when no matrix axis sets them.
    pub mtu: Option<u32>,
    pub link_rate: Option<String>,
    pub offloads: Option<bool>,
    /// Packet-rate cap of every router (packets/s), when no axis sets it.
    pub forward_pps: Option<u64>,
    /// Name (prefix) of the test-bed.
    pub name: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostsTarget {
    pub receiver: Option<String>,
    pub receiver6: Option<String>,
    pub port: Option<u16>,
    /// Known properties of the real path, for the upper bound (and, with
    /// `apply_mtu` nodes and no `mtu` axis, the MTU set on them).
    pub mtu: Option<u32>,
    pub link_rate: Option<String>,
    /// `[[hosts.node]]`: real nodes driven through agents. Empty: the old
    /// form, a `wirebench recv` already running at `receiver`.
    pub nodes: Vec<HostNode>,
}

/// How the controller reaches a node's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeReach {
    /// `ssh [ssh_options] DEST wirebench agent --stdio`.
    Ssh { dest: String, options: Vec<String> },
    /// A child process on this host.
    Local,
    /// `ip netns exec NS ...` on this host.
    Netns(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    Sender,
    Receiver,
    /// Only observed: CPU, counters, metadata.
    Router,
}

impl NodeRole {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeRole::Sender => "sender",
            NodeRole::Receiver => "receiver",
            NodeRole::Router => "router",
        }
    }
}

/// One real node of a `[hosts]` topology.
#[derive(Debug, Clone, PartialEq)]
pub struct HostNode {
    pub name: String,
    pub reach: NodeReach,
    /// The wirebench program on that node (default `wirebench` on PATH
    /// over SSH, this binary locally).
    pub agent: Option<String>,
    pub role: NodeRole,
    /// Senders: the receiver node they send to.
    pub to: Option<String>,
    /// Data addresses traffic is sent to (receivers) or from.
    pub ipv4: Option<std::net::IpAddr>,
    pub ipv6: Option<std::net::IpAddr>,
    pub apply_mtu: bool,
    pub apply_offloads: bool,
    /// The `link_rate` axis (or `[hosts] link_rate`) shapes its interfaces.
    pub apply_link_rate: bool,
    /// Interfaces `apply_*` act on; empty: those holding the node's data
    /// addresses (routers: every interface that is up).
    pub interfaces: Vec<String>,
}

/// How long one run lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunLength {
    Duration { seconds: f64 },
    Packets { count: u64 },
    KBytes { count: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Order {
    Sequential,
    Shuffled { seed: u64 },
}

/// One block of axes; the campaign's scenarios are the union of the
/// cross products of all blocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    /// Axis → its values as canonical text, in the file's order.
    pub axes: BTreeMap<Axis, Vec<String>>,
}

/// A parsed and validated campaign.
#[derive(Debug, Clone, PartialEq)]
pub struct Campaign {
    pub name: String,
    pub description: String,
    pub origin: String,
    /// The campaign file exactly as read.
    pub text: String,
    pub target: Target,
    pub matrices: Vec<Matrix>,
    pub repetitions: u32,
    pub length: RunLength,
    pub warmup_s: f64,
    pub pause_s: f64,
    /// How long the receiver waits for late packets after the sender stops
    /// (`send --linger`); None = the engine's default (2 s, RFC 2544).
    pub linger_s: Option<f64>,
    /// Per-interval series of every run (`send --interval`), stored with
    /// the run and drawn over time in the report.
    pub interval_ms: Option<u64>,
    pub order: Order,
    /// Base of every run's `--seed`.
    pub seed: u64,
    /// Baseline selector, e.g. `mtu=1500` or `ip=4`.
    pub baseline: Option<String>,
    /// Longest a single run may take before it is killed and counted failed.
    pub run_timeout_s: Option<f64>,
    /// True once `apply_quick` ran.
    pub quick: bool,
    quick_overrides: Option<Quick>,
    /// The `[rfc2544]` table and its line, when the campaign is an RFC 2544
    /// search (then `matrices` is empty; `crate::rfc2544` reads the table).
    pub rfc2544: Option<(toml::Value, usize)>,
    /// How the report presents the campaign (`[report]`).
    pub report: ReportOptions,
}

/// The typed settings of one scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub ip: u8,
    pub transport: String,
    pub meter: String,
    pub app: String,
    pub codec: Option<String>,
    /// Transport payload per packet (probe header included), when the
    /// model is the constant one.
    pub payload: Option<u32>,
    /// A payload mix instead of one payload (`send --size-mix`, e.g. an
    /// RFC 2544 IMIX trial); wins over `payload`.
    pub size_mix: Option<String>,
    pub frame: Option<u32>,
    /// Packets per second, `None` = engine default; `max` = unpaced.
    pub pps: Option<f64>,
    pub max_rate: bool,
    pub flows: u32,
    pub mtu: Option<u32>,
    pub link_rate: Option<String>,
    pub link_bps: Option<f64>,
    pub offloads: Option<bool>,
    /// Packet-rate cap of every router of the test-bed (packets/s).
    pub forward_pps: Option<u64>,
    /// `[[hosts.node]]`: the one sender node that sends (None: all).
    pub sender: Option<String>,
    /// `send --dscp` (a name or number).
    pub dscp: Option<String>,
    /// `send --cc`.
    pub cc: Option<String>,
    /// `send --window`.
    pub window: Option<String>,
    /// `send --rate` (payload bit/s with k/M/G).
    pub rate: Option<String>,
    /// An IDT law in D-ITG letters ("E 1000"): `send -E 1000`.
    pub idt: Option<String>,
    /// A size law in D-ITG letters ("u 100 1400"): `send -u 100 1400`.
    pub size: Option<String>,
    /// "forward" (None: the default), "reverse" (`send -R`) or "bidir"
    /// (`send --bidir`).
    pub direction: Option<String>,
    /// The `duration` axis: seconds this scenario's runs last, whatever
    /// the campaign's own length (see [`Campaign::run_length`]).
    pub duration_s: Option<f64>,
}

/// What the test-bed is built from: MTU, link rate, offloads, router cap.
pub type LinkKey = (Option<u32>, Option<String>, Option<bool>, Option<u64>);

/// One point of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Stable identifier, e.g. `ip=4,transport=udp,payload=1408,mtu=1500`.
    pub key: String,
    /// Axis name → value text.
    pub axes: BTreeMap<String, String>,
    pub settings: Settings,
}

impl Scenario {
    /// The link settings as a comparable key; a change means the test-bed
    /// has to be rebuilt.
    pub fn link_key(&self) -> LinkKey {
        (
            self.settings.mtu,
            self.settings.link_rate.clone(),
            self.settings.offloads,
            self.settings.forward_pps,
        )
    }

    /// True when the scenario matches every `axis=value` of a selector.
    pub fn matches(&self, selector: &[(String, String)]) -> bool {
        selector
            .iter()
            .all(|(k, v)| self.axes.get(k).is_some_and(|x| x == v))
    }
}

// ---------------------------------------------------------------- raw TOML

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    fn text(&self) -> String {
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
enum OneOrMany {
    Many(Vec<Scalar>),
    One(Scalar),
}

impl OneOrMany {
    fn values(&self) -> Vec<Scalar> {
        match self {
            OneOrMany::Many(v) => v.clone(),
            OneOrMany::One(s) => vec![s.clone()],
        }
    }
}

type AxisField = Option<Spanned<OneOrMany>>;

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
struct RawMatrix {
    ip: AxisField,
    transport: AxisField,
    meter: AxisField,
    app: AxisField,
    codec: AxisField,
    payload: AxisField,
    frame: AxisField,
    pps: AxisField,
    flows: AxisField,
    mtu: AxisField,
    link_rate: AxisField,
    offloads: AxisField,
    forward_pps: AxisField,
    sender: AxisField,
    dscp: AxisField,
    cc: AxisField,
    window: AxisField,
    rate: AxisField,
    idt: AxisField,
    size: AxisField,
    direction: AxisField,
    duration: AxisField,
}

impl RawMatrix {
    fn fields(&self) -> Vec<(Axis, &Spanned<OneOrMany>)> {
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
enum RawMatrices {
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
struct RawTestbed {
    preset: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
    sender: Option<Spanned<String>>,
    receiver: Option<Spanned<String>>,
    mtu: Option<Spanned<i64>>,
    link_rate: Option<Spanned<String>>,
    offloads: Option<Spanned<bool>>,
    forward_pps: Option<Spanned<i64>>,
    name: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawHosts {
    receiver: Option<Spanned<String>>,
    receiver6: Option<Spanned<String>>,
    port: Option<Spanned<i64>>,
    mtu: Option<Spanned<i64>>,
    link_rate: Option<Spanned<String>>,
    node: Option<Vec<Spanned<RawNode>>>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Spanned<String>,
    ssh: Option<Spanned<String>>,
    ssh_options: Option<Vec<String>>,
    local: Option<Spanned<bool>>,
    netns: Option<Spanned<String>>,
    agent: Option<String>,
    role: Spanned<String>,
    to: Option<Spanned<String>>,
    ipv4: Option<Spanned<String>>,
    ipv6: Option<Spanned<String>>,
    #[serde(default)]
    apply_mtu: bool,
    #[serde(default)]
    apply_offloads: bool,
    #[serde(default)]
    apply_link_rate: bool,
    #[serde(default)]
    interfaces: Vec<String>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawLoopback {}

/// The `[report]` table as written.
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
struct RawReport {
    columns: Option<Spanned<String>>,
    units: Option<Spanned<String>>,
    zoom: Option<bool>,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
struct Quick {
    repetitions: Option<Spanned<i64>>,
    duration_s: Option<Spanned<f64>>,
    packets: Option<Spanned<i64>>,
    kbytes: Option<Spanned<i64>>,
    warmup_s: Option<Spanned<f64>>,
    pause_s: Option<Spanned<f64>>,
    linger_s: Option<Spanned<f64>>,
    // The axes, spelled out: `#[serde(flatten)]` would buffer the values
    // and lose their line numbers.
    ip: AxisField,
    transport: AxisField,
    meter: AxisField,
    app: AxisField,
    codec: AxisField,
    payload: AxisField,
    frame: AxisField,
    pps: AxisField,
    flows: AxisField,
    mtu: AxisField,
    link_rate: AxisField,
    offloads: AxisField,
    forward_pps: AxisField,
    sender: AxisField,
    dscp: AxisField,
    cc: AxisField,
    window: AxisField,
    rate: AxisField,
    idt: AxisField,
    size: AxisField,
    direction: AxisField,
    duration: AxisField,
}

impl Quick {
    fn axes(&self) -> RawMatrix {
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
struct RawCampaign {
    name: Option<Spanned<String>>,
    description: Option<String>,
    repetitions: Option<Spanned<i64>>,
    duration_s: Option<Spanned<f64>>,
    packets: Option<Spanned<i64>>,
    kbytes: Option<Spanned<i64>>,
    warmup_s: Option<Spanned<f64>>,
    pause_s: Option<Spanned<f64>>,
    linger_s: Option<Spanned<f64>>,
    interval_ms: Option<Spanned<i64>>,
    order: Option<Spanned<String>>,
    seed: Option<Spanned<i64>>,
    baseline: Option<Spanned<String>>,
    run_timeout_s: Option<Spanned<f64>>,
    testbed: Option<Spanned<RawTestbed>>,
    hosts: Option<Spanned<RawHosts>>,
    loopback: Option<Spanned<RawLoopback>>,
    matrix: Option<RawMatrices>,
    quick: Option<Spanned<Quick>>,
    /// An RFC 2544 search instead of a matrix (read by `crate::rfc2544`).
    rfc2544: Option<Spanned<toml::Value>>,
    report: Option<RawReport>,
}

// ---------------------------------------------------------------- parsing

struct Ctx<'a> {
    origin: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    fn err(&self, offset: usize, key: &str, reason: impl Into<String>) -> CampaignError {
        CampaignError::Invalid {
            origin: self.origin.to_string(),
            line: self.line_of(offset),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    fn at<T>(&self, s: &Spanned<T>, key: &str, reason: impl Into<String>) -> CampaignError {
        self.err(s.span().start, key, reason)
    }

    /// A serde/toml error: pull out the key of "unknown field `x`" so the
    /// message names it like every other error.
    fn toml_err(&self, e: toml::de::Error) -> CampaignError {
        let line = e.span().map(|s| self.line_of(s.start)).unwrap_or(1);
        // toml's message may span lines, or be empty (a lone "\r"): one
        // line, never blank.
        let msg = e.message().trim().replace('\n', "; ");
        let msg = if msg.is_empty() {
            "not valid TOML".to_string()
        } else {
            msg
        };
        if let Some(rest) = msg.strip_prefix("unknown field `") {
            if let Some(end) = rest.find('`') {
                let key = &rest[..end];
                let expected = rest[end + 1..].trim_start_matches(',').trim();
                return CampaignError::Invalid {
                    origin: self.origin.to_string(),
                    line,
                    key: key.to_string(),
                    reason: format!("unknown key ({expected})"),
                };
            }
        }
        CampaignError::Syntax {
            origin: self.origin.to_string(),
            line,
            reason: msg,
        }
    }
}

fn positive_u64(ctx: &Ctx, v: &Spanned<i64>, key: &str) -> Result<u64, CampaignError> {
    let x = *v.get_ref();
    if x <= 0 {
        return Err(ctx.at(v, key, format!("must be a positive whole number, got {x}")));
    }
    Ok(x as u64)
}

fn seconds(ctx: &Ctx, v: &Spanned<f64>, key: &str, allow_zero: bool) -> Result<f64, CampaignError> {
    let x = *v.get_ref();
    let ok = x.is_finite() && (x > 0.0 || (allow_zero && x == 0.0)) && x <= 86_400.0;
    if !ok {
        let want = if allow_zero { "0" } else { "more than 0" };
        return Err(ctx.at(
            v,
            key,
            format!("must be {want} and at most 86400 seconds, got {x}"),
        ));
    }
    Ok(x)
}

/// Parses a link rate (`100mbit`, `1gbit`, …) into bit/s with the
/// test-bed's own parser, so a campaign accepts exactly what `testbed up`
/// accepts.
pub fn parse_link_rate(s: &str) -> Option<f64> {
    wirebench_testbed::parse_rate(s).ok().map(|b| b as f64)
}

/// Validates one axis value and returns its canonical text.
fn check_value(ctx: &Ctx, offset: usize, axis: Axis, v: &Scalar) -> Result<String, CampaignError> {
    let key = axis.name();
    let bad = |reason: String| Err(ctx.err(offset, key, reason));
    let int = |v: &Scalar| match v {
        Scalar::Int(i) => Some(*i),
        _ => None,
    };
    match axis {
        Axis::Ip => match int(v) {
            Some(4) | Some(6) => Ok(v.text()),
            _ => bad(format!("IP version must be 4 or 6, got {}", v.text())),
        },
        Axis::Transport => match v {
            Scalar::Str(s) if s == "udp" || s == "tcp" => Ok(s.clone()),
            _ => bad(format!("transport must be \"udp\" or \"tcp\", got {}", v.text())),
        },
        Axis::Meter => match v {
            Scalar::Str(s) if s == "owd" || s == "rtt" => Ok(s.clone()),
            _ => bad(format!("meter must be \"owd\" or \"rtt\", got {}", v.text())),
        },
        Axis::App => match v {
            Scalar::Str(s) if known_app(&s.to_ascii_lowercase()) => Ok(s.to_ascii_lowercase()),
            _ => bad(format!(
                "unknown application {}; known: constant, {}",
                v.text(),
                ALL_APPS.join(", ")
            )),
        },
        Axis::Codec => match v {
            Scalar::Str(s) => DitgCodec::parse(s).ok(),
            _ => None,
        }
        .map_or_else(
            || {
                bad(format!(
                    "unknown codec {}; known: {}",
                    v.text(),
                    DitgCodec::ALL.map(DitgCodec::name).join(", ")
                ))
            },
            |c| Ok(c.name().to_string()),
        ),
        Axis::Payload => match int(v) {
            Some(b) if (MIN_PAYLOAD as i64..=MAX_PAYLOAD as i64).contains(&b) => Ok(b.to_string()),
            _ => bad(format!(
                "payload must be {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes (the probe header alone is {MIN_PAYLOAD}), got {}",
                v.text()
            )),
        },
        Axis::Frame => match int(v) {
            Some(b) if (64..=65553).contains(&b) => Ok(b.to_string()),
            _ => bad(format!("Ethernet frame size must be 64..=65553 bytes, got {}", v.text())),
        },
        Axis::Pps => match v {
            Scalar::Str(s) if s == "max" => Ok("max".into()),
            Scalar::Int(i) if *i > 0 => Ok(i.to_string()),
            Scalar::Float(f) if f.is_finite() && *f > 0.0 => Ok(f.to_string()),
            _ => bad(format!(
                "rate must be a positive number of packets per second or \"max\", got {}",
                v.text()
            )),
        },
        Axis::Flows => match int(v) {
            Some(n) if (1..=1024).contains(&n) => Ok(n.to_string()),
            _ => bad(format!("flows must be 1..=1024, got {}", v.text())),
        },
        Axis::Mtu => match int(v) {
            Some(m) if (68..=65535).contains(&m) => Ok(m.to_string()),
            _ => bad(format!("MTU must be 68..=65535, got {}", v.text())),
        },
        Axis::LinkRate => match v {
            Scalar::Str(s) if parse_link_rate(s).is_some() => Ok(s.to_ascii_lowercase()),
            _ => bad(format!(
                "link rate must look like \"100mbit\" or \"1gbit\", got {}",
                v.text()
            )),
        },
        Axis::ForwardPps => match int(v) {
            Some(p) if (1..=100_000_000).contains(&p) => Ok(p.to_string()),
            _ => bad(format!(
                "router packet-rate cap must be 1..=100000000 packets/s, got {}",
                v.text()
            )),
        },
        Axis::Offloads => match v {
            Scalar::Bool(b) => Ok(b.to_string()),
            Scalar::Str(s) if s == "on" || s == "off" => Ok((s == "on").to_string()),
            _ => bad(format!("offloads must be true/false (or \"on\"/\"off\"), got {}", v.text())),
        },
        // Checked against the nodes once the matrix is known.
        Axis::Sender => match v {
            Scalar::Str(s) if !s.is_empty() => Ok(s.clone()),
            _ => bad(format!("sender must be a sender node's name, got {}", v.text())),
        },
        Axis::Dscp => match wirebench_stats::opts::parse_dscp(&v.text()) {
            Ok(_) => Ok(v.text().to_ascii_lowercase()),
            Err(e) => bad(e),
        },
        Axis::Cc => match v {
            Scalar::Str(s) => wirebench_stats::opts::parse_cc(s).or_else(bad),
            _ => bad(format!("cc must be a name such as \"cubic\" or \"bbr\", got {}", v.text())),
        },
        Axis::Window => match wirebench_stats::opts::parse_window(&v.text()) {
            Ok(_) => Ok(v.text()),
            Err(e) => bad(e),
        },
        Axis::Rate => match wirebench_stats::opts::parse_bits(&v.text()) {
            Ok(_) => Ok(v.text()),
            Err(e) => bad(e),
        },
        Axis::Direction => match v {
            Scalar::Str(s) if ["forward", "reverse", "bidir"].contains(&s.as_str()) => {
                Ok(s.clone())
            }
            _ => bad(format!(
                "direction must be \"forward\", \"reverse\" (send -R) or \"bidir\" (send --bidir), got {}",
                v.text()
            )),
        },
        Axis::Idt | Axis::Size => match v {
            Scalar::Str(s) => law_text(s, axis == Axis::Idt).or_else(bad),
            _ => bad(format!("{key} must be a law in D-ITG letters such as \"E 1000\", got {}", v.text())),
        },
        Axis::Duration => match v {
            Scalar::Int(i) if (1..=86_400).contains(i) => Ok(i.to_string()),
            Scalar::Float(f) if f.is_finite() && *f > 0.0 && *f <= 86_400.0 => Ok(f.to_string()),
            _ => bad(format!(
                "duration must be more than 0 and at most 86400 seconds per run, got {}",
                v.text()
            )),
        },
    }
}

/// Checks a law in D-ITG letters ("E 1000", "u 100 1400"; upper case for
/// inter-departure times, lower case for sizes) with the model's own
/// parser; returns it with single spaces.
fn law_text(s: &str, idt: bool) -> Result<String, String> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut chars = words.first().map(|w| w.chars()).into_iter().flatten();
    let letter = match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_uppercase() == idt && c.is_ascii_alphabetic() => c,
        _ => {
            return Err(format!(
                "expected a D-ITG {} letter then its values, e.g. {:?}, got {s:?}",
                if idt {
                    "upper-case IDT"
                } else {
                    "lower-case size"
                },
                if idt { "E 1000" } else { "u 100 1400" }
            ))
        }
    };
    let mut values = Vec::new();
    for w in &words[1..] {
        values.push(
            w.parse::<f64>()
                .map_err(|_| format!("not a number: {w:?} in {s:?}"))?,
        );
    }
    let checked = if idt {
        wirebench_model::IdtModel::from_ditg(letter, &values).map(|_| ())
    } else {
        wirebench_model::SizeModel::from_ditg(letter, &values).map(|_| ())
    };
    checked.map_err(|e| e.to_string())?;
    Ok(words.join(" "))
}

fn check_axis(
    ctx: &Ctx,
    axis: Axis,
    field: &Spanned<OneOrMany>,
) -> Result<Vec<String>, CampaignError> {
    let values = field.get_ref().values();
    if values.is_empty() {
        return Err(ctx.at(field, axis.name(), "axis is empty; give at least one value"));
    }
    let mut out: Vec<String> = Vec::new();
    for v in &values {
        let t = check_value(ctx, field.span().start, axis, v)?;
        if out.contains(&t) {
            return Err(ctx.at(field, axis.name(), format!("value {t} is listed twice")));
        }
        out.push(t);
    }
    Ok(out)
}

fn check_matrix(
    ctx: &Ctx,
    raw: &RawMatrix,
    at: usize,
    target: &Target,
) -> Result<Matrix, CampaignError> {
    let mut m = Matrix::default();
    let fields = raw.fields();
    for (axis, field) in &fields {
        let values = check_axis(ctx, *axis, field)?;
        m.axes.insert(*axis, values);
    }
    let span_of = |a: Axis| {
        fields
            .iter()
            .find(|(x, _)| *x == a)
            .map(|(_, f)| f.span().start)
            .unwrap_or(at)
    };
    if m.axes.contains_key(&Axis::Payload) && m.axes.contains_key(&Axis::Frame) {
        return Err(ctx.err(
            span_of(Axis::Frame),
            "frame",
            "give either `payload` or `frame`, not both, in one matrix",
        ));
    }
    // One rate law and one size law per run.
    for (a, b) in [
        (Axis::Pps, Axis::Rate),
        (Axis::Pps, Axis::Idt),
        (Axis::Rate, Axis::Idt),
        (Axis::Payload, Axis::Size),
        (Axis::Frame, Axis::Size),
    ] {
        if m.axes.contains_key(&a) && m.axes.contains_key(&b) {
            return Err(ctx.err(
                span_of(b),
                b.name(),
                format!(
                    "give either `{}` or `{}`, not both, in one matrix",
                    a.name(),
                    b.name()
                ),
            ));
        }
    }
    if let Some(apps) = m.axes.get(&Axis::App) {
        let modelled = apps.iter().any(|a| a != "constant");
        for a in [
            Axis::Payload,
            Axis::Frame,
            Axis::Pps,
            Axis::Rate,
            Axis::Idt,
            Axis::Size,
        ] {
            if modelled && m.axes.contains_key(&a) {
                return Err(ctx.err(
                    span_of(a),
                    a.name(),
                    "application models set their own sizes and rates; put this sweep in its own [[matrix]] block",
                ));
            }
        }
    }
    if m.axes.contains_key(&Axis::Cc)
        && m.axes
            .get(&Axis::Transport)
            .is_none_or(|t| t.iter().any(|x| x != "tcp"))
    {
        return Err(ctx.err(
            span_of(Axis::Cc),
            "cc",
            "congestion control applies to TCP flows; give transport = [\"tcp\"] in this matrix",
        ));
    }
    // A reverse flow is sent by the receiver from its own sockets and
    // measured one way by us (send refuses these combinations too).
    if m.axes
        .get(&Axis::Direction)
        .is_some_and(|d| d.iter().any(|x| x != "forward"))
    {
        if m.axes
            .get(&Axis::Meter)
            .is_some_and(|x| x.iter().any(|v| v == "rtt"))
        {
            return Err(ctx.err(
                span_of(Axis::Direction),
                "direction",
                "reverse and bidir flows are measured one way; put meter = \"rtt\" in a [[matrix]] of its own",
            ));
        }
        for a in [Axis::Dscp, Axis::Cc, Axis::Window] {
            if m.axes.contains_key(&a) {
                return Err(ctx.err(
                    span_of(Axis::Direction),
                    "direction",
                    format!(
                        "`{}` sets the sender's sockets and does not reach the receiver's reverse flows; put it in a [[matrix]] without reverse or bidir",
                        a.name()
                    ),
                ));
            }
        }
    }
    if m.axes.contains_key(&Axis::Codec)
        && !m
            .axes
            .get(&Axis::App)
            .is_some_and(|a| a.iter().any(|x| x == "voip"))
    {
        return Err(ctx.err(
            span_of(Axis::Codec),
            "codec",
            "a codec needs app = \"voip\" in the same matrix",
        ));
    }
    if let Some(apps) = m.axes.get(&Axis::App) {
        if apps.iter().any(|a| a == "voip") && !m.axes.contains_key(&Axis::Codec) {
            return Err(ctx.err(
                span_of(Axis::App),
                "app",
                "app \"voip\" needs a `codec` axis",
            ));
        }
    }
    for a in [Axis::Mtu, Axis::LinkRate, Axis::Offloads, Axis::ForwardPps] {
        // Real nodes that allow it take MTU and offload axes.
        let real_ok = match target {
            Target::Hosts(h) => match a {
                Axis::Mtu => h.nodes.iter().any(|n| n.apply_mtu),
                Axis::Offloads => h.nodes.iter().any(|n| n.apply_offloads),
                Axis::LinkRate => h.nodes.iter().any(|n| n.apply_link_rate),
                _ => false,
            },
            _ => false,
        };
        if m.axes.contains_key(&a) && !matches!(target, Target::Testbed(_)) && !real_ok {
            return Err(ctx.err(
                span_of(a),
                a.name(),
                "link settings can only be varied on an emulated [testbed] (mtu, offloads and link_rate also on [[hosts.node]]s with apply_mtu / apply_offloads / apply_link_rate)",
            ));
        }
    }
    if let Some(senders) = m.axes.get(&Axis::Sender) {
        let names: Vec<&str> = match target {
            Target::Hosts(h) => h
                .nodes
                .iter()
                .filter(|n| n.role == NodeRole::Sender)
                .map(|n| n.name.as_str())
                .collect(),
            _ => Vec::new(),
        };
        if names.is_empty() {
            return Err(ctx.err(
                span_of(Axis::Sender),
                "sender",
                "the sender axis picks among [[hosts.node]] senders; this campaign has none",
            ));
        }
        if let Some(s) = senders.iter().find(|s| !names.contains(&s.as_str())) {
            return Err(ctx.err(
                span_of(Axis::Sender),
                "sender",
                format!(
                    "no sender node named {s:?} (sender nodes: {})",
                    names.join(", ")
                ),
            ));
        }
    }
    if let Some(frames) = m.axes.get(&Axis::Frame) {
        // Every payload the frame axis produces must still hold the probe header.
        let one = |a: Axis, d: &str| {
            m.axes
                .get(&a)
                .cloned()
                .unwrap_or_else(|| vec![d.to_string()])
        };
        for f in frames {
            let f: u32 = f.parse().unwrap_or(0);
            for ip in one(Axis::Ip, "4") {
                for tr in one(Axis::Transport, "udp") {
                    let ipv: u8 = ip.parse().unwrap_or(4);
                    if frame_to_payload(f, ipv, &tr).is_none_or(|p| p < MIN_PAYLOAD) {
                        return Err(ctx.err(
                            span_of(Axis::Frame),
                            "frame",
                            format!(
                                "frame {f} B leaves less than the {MIN_PAYLOAD} B probe header after Ethernet, IPv{ip} and {} headers",
                                tr.to_uppercase()
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(m)
}

/// Transport payload carried by an Ethernet frame of `frame` bytes (header
/// and FCS included): frame − 18 − IP header − transport header (UDP 8;
/// TCP 20 + 12 of timestamps).
pub fn frame_to_payload(frame: u32, ip: u8, transport: &str) -> Option<u32> {
    let ip_h = if ip == 6 { 40 } else { 20 };
    let l4 = if transport == "tcp" { 32 } else { 8 };
    frame.checked_sub(18 + ip_h + l4)
}

fn opt_string(s: &Option<Spanned<String>>) -> Option<String> {
    s.as_ref().map(|x| x.get_ref().clone())
}

fn check_mtu(ctx: &Ctx, v: &Option<Spanned<i64>>) -> Result<Option<u32>, CampaignError> {
    match v {
        None => Ok(None),
        Some(m) if (68..=65535).contains(m.get_ref()) => Ok(Some(*m.get_ref() as u32)),
        Some(m) => Err(ctx.at(
            m,
            "mtu",
            format!("MTU must be 68..=65535, got {}", m.get_ref()),
        )),
    }
}

fn check_rate(ctx: &Ctx, v: &Option<Spanned<String>>) -> Result<Option<String>, CampaignError> {
    match v {
        None => Ok(None),
        Some(r) if parse_link_rate(r.get_ref()).is_some() => {
            Ok(Some(r.get_ref().to_ascii_lowercase()))
        }
        Some(r) => Err(ctx.at(
            r,
            "link_rate",
            format!(
                "link rate must look like \"100mbit\" or \"1gbit\", got {:?}",
                r.get_ref()
            ),
        )),
    }
}

use wirebench_testbed::PRESETS;

type AddrCheck<'x> =
    dyn Fn(&Option<Spanned<String>>, &str, bool) -> Result<Option<String>, CampaignError> + 'x;

/// `[[hosts.node]]`: names unique, exactly one way in, a known role,
/// receivers with an address, every sender's receiver known.
fn check_nodes(
    ctx: &Ctx,
    hr: &RawHosts,
    check_addr: &AddrCheck,
) -> Result<Vec<HostNode>, CampaignError> {
    let mut out: Vec<HostNode> = Vec::new();
    let raw = hr.node.as_deref().unwrap_or_default();
    for rn in raw {
        let n = rn.get_ref();
        let name = n.name.get_ref().clone();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ctx.at(&n.name, "name", "node names are letters, digits, - and _"));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(ctx.at(&n.name, "name", format!("node {name:?} is given twice")));
        }
        let ways = [
            n.ssh.is_some(),
            n.local.as_ref().is_some_and(|l| *l.get_ref()),
            n.netns.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() != 1 {
            return Err(ctx.at(
                rn,
                "ssh",
                format!("node {name:?} needs exactly one of `ssh = \"user@host\"`, `local = true` or `netns = \"NS\"`"),
            ));
        }
        let reach = if let Some(d) = &n.ssh {
            if d.get_ref().is_empty() || d.get_ref().starts_with('-') {
                return Err(ctx.at(d, "ssh", "must be a destination like \"user@host\""));
            }
            NodeReach::Ssh {
                dest: d.get_ref().clone(),
                options: n.ssh_options.clone().unwrap_or_default(),
            }
        } else if let Some(ns) = &n.netns {
            NodeReach::Netns(ns.get_ref().clone())
        } else {
            NodeReach::Local
        };
        let role = match n.role.get_ref().as_str() {
            "sender" => NodeRole::Sender,
            "receiver" => NodeRole::Receiver,
            "router" => NodeRole::Router,
            other => {
                return Err(ctx.at(
                    &n.role,
                    "role",
                    format!("role must be sender, receiver or router, got {other:?}"),
                ))
            }
        };
        let parse = |a: Option<String>| a.and_then(|t| t.parse().ok());
        let ipv4 = parse(check_addr(&n.ipv4, "ipv4", false)?);
        let ipv6 = parse(check_addr(&n.ipv6, "ipv6", true)?);
        if role == NodeRole::Receiver && ipv4.is_none() && ipv6.is_none() {
            return Err(ctx.at(
                rn,
                "ipv4",
                format!("receiver node {name:?} needs its data address: `ipv4` and/or `ipv6`"),
            ));
        }
        out.push(HostNode {
            name,
            reach,
            agent: n.agent.clone(),
            role,
            to: n.to.as_ref().map(|t| t.get_ref().clone()),
            ipv4,
            ipv6,
            apply_mtu: n.apply_mtu,
            apply_offloads: n.apply_offloads,
            apply_link_rate: n.apply_link_rate,
            interfaces: n.interfaces.clone(),
        });
    }
    if out.is_empty() {
        return Ok(out);
    }
    let receivers: Vec<String> = out
        .iter()
        .filter(|n| n.role == NodeRole::Receiver)
        .map(|n| n.name.clone())
        .collect();
    if receivers.is_empty() || !out.iter().any(|n| n.role == NodeRole::Sender) {
        return Err(ctx.err(
            0,
            "node",
            "[[hosts.node]] needs at least one sender and one receiver",
        ));
    }
    if hr.receiver.is_some() || hr.receiver6.is_some() || hr.port.is_some() {
        return Err(ctx.err(
            0,
            "receiver",
            "with [[hosts.node]] the receivers are nodes: drop `receiver`/`receiver6`/`port` from [hosts]",
        ));
    }
    for (n, rn) in out.iter_mut().zip(raw) {
        if n.role != NodeRole::Sender {
            if let Some(t) = &rn.get_ref().to {
                return Err(ctx.at(t, "to", "only a sender has `to`"));
            }
            continue;
        }
        match &n.to {
            None if receivers.len() == 1 => n.to = Some(receivers[0].clone()),
            None => {
                return Err(ctx.at(
                    rn,
                    "to",
                    format!(
                        "sender {:?}: several receivers, say which with `to`",
                        n.name
                    ),
                ))
            }
            Some(t) if receivers.contains(t) => {}
            Some(t) => {
                return Err(ctx.at(
                    rn.get_ref().to.as_ref().unwrap_or(&rn.get_ref().name),
                    "to",
                    format!("{t:?} is not a receiver node"),
                ))
            }
        }
    }
    Ok(out)
}

fn check_target(ctx: &Ctx, raw: &RawCampaign) -> Result<Target, CampaignError> {
    let given = [
        raw.testbed.is_some(),
        raw.hosts.is_some(),
        raw.loopback.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if given != 1 {
        return Err(ctx.err(
            0,
            "testbed",
            "give exactly one of [testbed], [hosts] or [loopback]",
        ));
    }
    if raw.loopback.is_some() {
        return Ok(Target::Loopback);
    }
    if let Some(h) = &raw.hosts {
        let hr = h.get_ref();
        let check_addr = |a: &Option<Spanned<String>>,
                          key: &str,
                          v6: bool|
         -> Result<Option<String>, CampaignError> {
            match a {
                None => Ok(None),
                Some(s) => {
                    let ok = s
                        .get_ref()
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_ipv6() == v6);
                    let want = if v6 { "an IPv6" } else { "an IPv4" };
                    if ok {
                        Ok(Some(s.get_ref().clone()))
                    } else {
                        Err(ctx.at(
                            s,
                            key,
                            format!("must be {want} address, got {:?}", s.get_ref()),
                        ))
                    }
                }
            }
        };
        let receiver = check_addr(&hr.receiver, "receiver", false)?;
        let receiver6 = check_addr(&hr.receiver6, "receiver6", true)?;
        let nodes = check_nodes(ctx, hr, &check_addr)?;
        if receiver.is_none() && receiver6.is_none() && nodes.is_empty() {
            return Err(ctx.at(
                h,
                "receiver",
                "[hosts] needs `receiver` (IPv4) and/or `receiver6` (IPv6)",
            ));
        }
        let port = match &hr.port {
            None => None,
            Some(p) if (1..=65535).contains(p.get_ref()) => Some(*p.get_ref() as u16),
            Some(p) => {
                return Err(ctx.at(
                    p,
                    "port",
                    format!("port must be 1..=65535, got {}", p.get_ref()),
                ))
            }
        };
        return Ok(Target::Hosts(HostsTarget {
            receiver,
            receiver6,
            port,
            mtu: check_mtu(ctx, &hr.mtu)?,
            link_rate: check_rate(ctx, &hr.link_rate)?,
            nodes,
        }));
    }
    let t = raw
        .testbed
        .as_ref()
        .map(|t| t.get_ref().clone())
        .unwrap_or_else(|| RawTestbed {
            preset: None,
            file: None,
            sender: None,
            receiver: None,
            mtu: None,
            link_rate: None,
            offloads: None,
            forward_pps: None,
            name: None,
        });
    let span = raw.testbed.as_ref().map(|s| s.span().start).unwrap_or(0);
    match (&t.preset, &t.file) {
        (Some(_), Some(f)) => {
            return Err(ctx.at(f, "file", "give either `preset` or `file`, not both"))
        }
        (None, None) => return Err(ctx.err(span, "preset", "[testbed] needs `preset` or `file`")),
        (Some(p), None) if !PRESETS.contains(&p.get_ref().as_str()) => {
            return Err(ctx.at(
                p,
                "preset",
                format!(
                    "unknown preset {:?}; known: {}",
                    p.get_ref(),
                    PRESETS.join(", ")
                ),
            ))
        }
        _ => {}
    }
    let default_receiver = match t.preset.as_ref().map(|p| p.get_ref().as_str()) {
        Some(_) => "b",
        None => "",
    };
    let sender = opt_string(&t.sender).unwrap_or_else(|| {
        if default_receiver.is_empty() {
            String::new()
        } else {
            "a".into()
        }
    });
    let receiver = opt_string(&t.receiver).unwrap_or_else(|| default_receiver.to_string());
    if sender.is_empty() || receiver.is_empty() {
        return Err(ctx.err(
            span,
            "sender",
            "a topology file needs `sender` and `receiver` node names",
        ));
    }
    if sender == receiver {
        return Err(ctx.err(
            span,
            "receiver",
            "sender and receiver must be different nodes",
        ));
    }
    let name = opt_string(&t.name).unwrap_or_else(|| "wbc".into());
    if wirebench_testbed::check_testbed_name(&name).is_err() {
        let at = t.name.as_ref().map(|n| n.span().start).unwrap_or(span);
        return Err(ctx.err(
            at,
            "name",
            format!("test-bed name must be 1-12 lowercase letters or digits, got {name:?}"),
        ));
    }
    Ok(Target::Testbed(TestbedTarget {
        preset: opt_string(&t.preset),
        file: opt_string(&t.file),
        sender,
        receiver,
        mtu: check_mtu(ctx, &t.mtu)?,
        link_rate: check_rate(ctx, &t.link_rate)?,
        offloads: t.offloads.as_ref().map(|o| *o.get_ref()),
        forward_pps: match &t.forward_pps {
            Some(p) => {
                let v = *p.get_ref();
                if !(1..=100_000_000).contains(&v) {
                    return Err(ctx.at(
                        p,
                        "forward_pps",
                        format!("router packet-rate cap must be 1..=100000000 packets/s, got {v}"),
                    ));
                }
                Some(v as u64)
            }
            None => None,
        },
        name,
    }))
}

fn check_length(
    ctx: &Ctx,
    duration: &Option<Spanned<f64>>,
    packets: &Option<Spanned<i64>>,
    kbytes: &Option<Spanned<i64>>,
) -> Result<Option<RunLength>, CampaignError> {
    let n = [duration.is_some(), packets.is_some(), kbytes.is_some()]
        .iter()
        .filter(|x| **x)
        .count();
    if n > 1 {
        let at = packets
            .as_ref()
            .map(|p| p.span().start)
            .or(kbytes.as_ref().map(|k| k.span().start))
            .unwrap_or(0);
        return Err(ctx.err(
            at,
            "duration_s",
            "give only one of `duration_s`, `packets` or `kbytes`",
        ));
    }
    if let Some(d) = duration {
        return Ok(Some(RunLength::Duration {
            seconds: seconds(ctx, d, "duration_s", false)?,
        }));
    }
    if let Some(p) = packets {
        return Ok(Some(RunLength::Packets {
            count: positive_u64(ctx, p, "packets")?,
        }));
    }
    if let Some(k) = kbytes {
        return Ok(Some(RunLength::KBytes {
            count: positive_u64(ctx, k, "kbytes")?,
        }));
    }
    Ok(None)
}

/// Most scenarios one campaign may expand to (all matrix blocks
/// together, before duplicates are removed). Each is at least one run of
/// about a second, so this is already more than a day of measuring; the
/// bound keeps a few lines of TOML (three 1000-value axes: 10^9
/// scenarios) from hanging `run` while it expands them.
pub const MAX_SCENARIOS: usize = 100_000;

/// The matrix blocks' scenarios (the product of each block's value
/// counts, summed) must stay within [`MAX_SCENARIOS`]; the error names
/// the block that passes it. `at(i)` is where block `i` starts.
fn check_matrix_size(
    ctx: &Ctx,
    matrices: &[Matrix],
    at: impl Fn(usize) -> usize,
) -> Result<(), CampaignError> {
    let mut total: usize = 0;
    for (i, m) in matrices.iter().enumerate() {
        let n = m
            .axes
            .values()
            .try_fold(1usize, |acc, v| acc.checked_mul(v.len()));
        match n.and_then(|n| total.checked_add(n)) {
            Some(t) if t <= MAX_SCENARIOS => total = t,
            _ => {
                let counts: Vec<String> = m
                    .axes
                    .iter()
                    .map(|(a, v)| format!("{} {}", v.len(), a.name()))
                    .collect();
                return Err(ctx.err(
                    at(i),
                    "matrix",
                    format!(
                        "more than {MAX_SCENARIOS} scenarios ({}{}); split the campaign",
                        counts.join(" x "),
                        if i > 0 {
                            ", with the blocks before it"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_repetitions(ctx: &Ctx, r: &Spanned<i64>) -> Result<u32, CampaignError> {
    let x = *r.get_ref();
    if !(1..=10_000).contains(&x) {
        return Err(ctx.at(r, "repetitions", format!("must be 1..=10000, got {x}")));
    }
    Ok(x as u32)
}

/// Parses `axis=value,axis=value`.
pub fn parse_selector(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=')?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    (!out.is_empty()).then_some(out)
}

impl Campaign {
    /// Parses and validates a campaign file. `origin` (usually the path)
    /// prefixes every error message.
    pub fn parse(text: &str, origin: &str) -> Result<Campaign, CampaignError> {
        let ctx = Ctx { origin, text };
        let raw: RawCampaign = toml::from_str(text).map_err(|e| ctx.toml_err(e))?;
        let target = check_target(&ctx, &raw)?;

        let matrix_at = text.find("matrix]").unwrap_or(0);
        let raw_matrices: Vec<(RawMatrix, usize)> = match &raw.matrix {
            None if raw.rfc2544.is_some() => Vec::new(),
            Some(_) if raw.rfc2544.is_some() => {
                return Err(ctx.err(
                    matrix_at,
                    "matrix",
                    "give either a [matrix] or an [rfc2544] search, not both",
                ))
            }
            None => {
                return Err(ctx.err(
                    0,
                    "matrix",
                    "a campaign needs a [matrix] table (or [[matrix]] blocks)",
                ))
            }
            Some(RawMatrices::One(one)) => vec![((**one).clone(), matrix_at)],
            Some(RawMatrices::Many(many)) => many
                .iter()
                .map(|m| (m.get_ref().clone(), m.span().start))
                .collect(),
        };
        if raw_matrices.is_empty() && raw.rfc2544.is_none() {
            return Err(ctx.err(matrix_at, "matrix", "no matrix blocks given"));
        }
        let matrices = raw_matrices
            .iter()
            .map(|(m, at)| check_matrix(&ctx, m, *at, &target))
            .collect::<Result<Vec<_>, _>>()?;
        check_matrix_size(&ctx, &matrices, |i| raw_matrices[i].1)?;
        let length_given = check_length(&ctx, &raw.duration_s, &raw.packets, &raw.kbytes)?;
        if !matches!(length_given, Some(RunLength::KBytes { .. })) {
            if let Some((_, at)) = matrices.iter().zip(&raw_matrices).find_map(|(m, (_, at))| {
                m.axes
                    .get(&Axis::App)
                    .is_some_and(|a| a.iter().any(|x| x == "file"))
                    .then_some(((), *at))
            }) {
                return Err(ctx.err(
                    at,
                    "app",
                    "app \"file\" is a transfer: give its size as the campaign's `kbytes` (its completion time is the metric completion_s)",
                ));
            }
        }
        // A file transfer lasts as long as its bytes take; a run length
        // in seconds would cut it.
        if let Some((_, at)) = matrices.iter().zip(&raw_matrices).find(|(m, _)| {
            m.axes.contains_key(&Axis::Duration)
                && m.axes
                    .get(&Axis::App)
                    .is_some_and(|a| a.iter().any(|x| x == "file"))
        }) {
            return Err(ctx.err(
                at.1,
                "duration",
                "app \"file\" runs until its `kbytes` are through; put the duration sweep in its own [[matrix]] block",
            ));
        }

        let repetitions = match &raw.repetitions {
            Some(r) => check_repetitions(&ctx, r)?,
            None => 1,
        };
        let length = check_length(&ctx, &raw.duration_s, &raw.packets, &raw.kbytes)?
            .unwrap_or(RunLength::Duration { seconds: 10.0 });
        let warmup_s = match &raw.warmup_s {
            Some(w) => seconds(&ctx, w, "warmup_s", true)?,
            None => 0.0,
        };
        let pause_s = match &raw.pause_s {
            Some(w) => seconds(&ctx, w, "pause_s", true)?,
            None => 0.0,
        };
        let linger_s = match &raw.linger_s {
            Some(l) => Some(seconds(&ctx, l, "linger_s", true)?),
            None => None,
        };
        let interval_ms = match &raw.interval_ms {
            Some(i) if (10..=3_600_000).contains(i.get_ref()) => Some(*i.get_ref() as u64),
            Some(i) => {
                return Err(ctx.at(
                    i,
                    "interval_ms",
                    format!("must be 10..=3600000 ms, got {}", i.get_ref()),
                ))
            }
            None => None,
        };
        let seed = match &raw.seed {
            Some(s) if *s.get_ref() >= 0 => *s.get_ref() as u64,
            Some(s) => return Err(ctx.at(s, "seed", "seed must not be negative")),
            None => 1,
        };
        let order = match &raw.order {
            None => Order::Sequential,
            Some(o) => match o.get_ref().as_str() {
                "sequential" => Order::Sequential,
                "shuffled" => Order::Shuffled { seed },
                other => {
                    return Err(ctx.at(
                        o,
                        "order",
                        format!("order must be \"sequential\" or \"shuffled\", got {other:?}"),
                    ))
                }
            },
        };
        let run_timeout_s = match &raw.run_timeout_s {
            Some(t) => Some(seconds(&ctx, t, "run_timeout_s", false)?),
            None => None,
        };
        let name = match &raw.name {
            Some(n) => {
                let s = n.get_ref().trim().to_string();
                if s.is_empty() {
                    return Err(ctx.at(n, "name", "name must not be empty"));
                }
                s
            }
            None => std::path::Path::new(origin)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "campaign".into()),
        };
        let quick_overrides = match &raw.quick {
            None => None,
            Some(q) => {
                let qr = q.get_ref();
                if let Some(r) = &qr.repetitions {
                    check_repetitions(&ctx, r)?;
                }
                check_length(&ctx, &qr.duration_s, &qr.packets, &qr.kbytes)?;
                for (k, v) in [
                    ("warmup_s", &qr.warmup_s),
                    ("pause_s", &qr.pause_s),
                    ("linger_s", &qr.linger_s),
                ] {
                    if let Some(v) = v {
                        seconds(&ctx, v, k, true)?;
                    }
                }
                for (axis, field) in qr.axes().fields() {
                    check_axis(&ctx, axis, field)?;
                    if !matrices.iter().any(|m| m.axes.contains_key(&axis)) {
                        return Err(ctx.at(
                            field,
                            axis.name(),
                            "[quick] overrides an axis no matrix has",
                        ));
                    }
                }
                Some(qr.clone())
            }
        };

        let mut c = Campaign {
            name,
            description: raw.description.clone().unwrap_or_default(),
            origin: origin.to_string(),
            text: text.to_string(),
            target,
            matrices,
            repetitions,
            length,
            warmup_s,
            pause_s,
            linger_s,
            interval_ms,
            order,
            seed,
            baseline: None,
            run_timeout_s,
            quick: false,
            quick_overrides,
            rfc2544: raw
                .rfc2544
                .as_ref()
                .map(|r| (r.get_ref().clone(), ctx.line_of(r.span().start))),
            report: ReportOptions::default(),
        };
        if let Some(r) = &raw.report {
            c.report = c.check_report(&ctx, r)?;
        }
        // Overridden matrices must still be valid (e.g. quick sizes with apps).
        if c.quick_overrides.is_some() {
            let mut q = c.clone();
            q.apply_quick_inner(&ctx)?;
        }
        if let Some(b) = &raw.baseline {
            c.check_baseline(&ctx, b)?;
            c.baseline = Some(b.get_ref().clone());
        }
        Ok(c)
    }

    fn check_report(&self, ctx: &Ctx, r: &RawReport) -> Result<ReportOptions, CampaignError> {
        let mut o = ReportOptions::default();
        if let Some(c) = &r.columns {
            let axis = c.get_ref().trim();
            if Axis::from_name(axis).is_none() {
                return Err(ctx.at(c, "columns", format!("unknown axis {axis:?}")));
            }
            let values: std::collections::BTreeSet<String> = self
                .expand()
                .into_iter()
                .filter_map(|s| s.axes.get(axis).cloned())
                .collect();
            if values.len() < 2 {
                return Err(ctx.at(
                    c,
                    "columns",
                    format!("no [[matrix]] block varies {axis:?}: nothing to put side by side"),
                ));
            }
            o.columns = Some(axis.to_string());
        }
        if let Some(u) = &r.units {
            o.units = match u.get_ref().trim() {
                "si" => ThroughputUnits::Si,
                "ditg" => ThroughputUnits::Ditg,
                other => {
                    return Err(ctx.at(
                        u,
                        "units",
                        format!("units must be \"si\" or \"ditg\", got {other:?}"),
                    ))
                }
            };
        }
        if let Some(z) = r.zoom {
            o.zoom = z;
        }
        Ok(o)
    }

    fn check_baseline(&self, ctx: &Ctx, b: &Spanned<String>) -> Result<(), CampaignError> {
        let sel = parse_selector(b.get_ref()).ok_or_else(|| {
            ctx.at(
                b,
                "baseline",
                "baseline must look like \"mtu=1500\" or \"ip=4,transport=udp\"",
            )
        })?;
        let scenarios = self.expand();
        for (k, v) in &sel {
            if Axis::from_name(k).is_none() {
                return Err(ctx.at(b, "baseline", format!("unknown axis {k:?}")));
            }
            if !scenarios.iter().any(|s| s.axes.get(k) == Some(v)) {
                return Err(ctx.at(b, "baseline", format!("no scenario has {k}={v}")));
            }
        }
        Ok(())
    }

    /// Applies the `[quick]` table (and repetitions = 2 unless it says
    /// otherwise): a short version of the same study.
    pub fn apply_quick(&mut self) -> Result<(), CampaignError> {
        let text = self.text.clone();
        let origin = self.origin.clone();
        let ctx = Ctx {
            origin: &origin,
            text: &text,
        };
        self.apply_quick_inner(&ctx)
    }

    fn apply_quick_inner(&mut self, ctx: &Ctx) -> Result<(), CampaignError> {
        self.quick = true;
        let q = self.quick_overrides.clone().unwrap_or_default();
        self.repetitions = match &q.repetitions {
            Some(r) => check_repetitions(ctx, r)?,
            None => 2,
        };
        match check_length(ctx, &q.duration_s, &q.packets, &q.kbytes)? {
            Some(l) => self.length = l,
            None => {
                if let RunLength::Duration { seconds } = self.length {
                    self.length = RunLength::Duration {
                        seconds: seconds.min(2.0),
                    };
                }
            }
        }
        if let Some(w) = &q.warmup_s {
            self.warmup_s = *w.get_ref();
        }
        if let Some(p) = &q.pause_s {
            self.pause_s = *p.get_ref();
        }
        if let Some(l) = &q.linger_s {
            self.linger_s = Some(*l.get_ref());
        }
        for (axis, field) in q.axes().fields() {
            let values = check_axis(ctx, axis, field)?;
            for m in &mut self.matrices {
                if m.axes.contains_key(&axis) {
                    m.axes.insert(axis, values.clone());
                }
            }
        }
        // A `duration` axis the [quick] table leaves alone is shortened
        // like the campaign's own length: no run longer than a quick run
        // (values that become equal merge).
        if q.duration.is_none() {
            let cap = match self.length {
                RunLength::Duration { seconds } => seconds,
                _ => 2.0,
            };
            for m in &mut self.matrices {
                if let Some(values) = m.axes.get_mut(&Axis::Duration) {
                    let mut short: Vec<String> = Vec::new();
                    for v in values.iter() {
                        let t = match v.parse::<f64>() {
                            Ok(x) if x > cap => cap.to_string(),
                            _ => v.clone(),
                        };
                        if !short.contains(&t) {
                            short.push(t);
                        }
                    }
                    *values = short;
                }
            }
        }
        let quick_at = ctx.text.find("quick]").unwrap_or(0);
        check_matrix_size(ctx, &self.matrices, |_| quick_at)?;
        Ok(())
    }

    /// Every axis name used by any matrix, in key order.
    pub fn axis_names(&self) -> Vec<String> {
        let mut set: Vec<Axis> = self
            .matrices
            .iter()
            .flat_map(|m| m.axes.keys().copied())
            .collect();
        set.sort();
        set.dedup();
        set.into_iter().map(|a| a.name().to_string()).collect()
    }

    /// The matrix expanded to scenarios (repetitions not included), in file
    /// order, duplicates across blocks removed.
    pub fn expand(&self) -> Vec<Scenario> {
        let mut out: Vec<Scenario> = Vec::new();
        // Keys seen, so duplicates go in O(log n), not by scanning `out`.
        let mut seen: std::collections::BTreeSet<String> = Default::default();
        for m in &self.matrices {
            let axes: Vec<(&Axis, &Vec<String>)> = m.axes.iter().collect();
            let total: usize = axes.iter().map(|(_, v)| v.len()).product();
            for idx in 0..total {
                // Mixed-radix counter: the last axis varies fastest.
                let mut rem = idx;
                let mut pick: BTreeMap<Axis, String> = BTreeMap::new();
                for (a, vals) in axes.iter().rev() {
                    pick.insert(**a, vals[rem % vals.len()].clone());
                    rem /= vals.len();
                }
                if pick.get(&Axis::App).is_some_and(|a| a != "voip") {
                    pick.remove(&Axis::Codec);
                }
                let s = self.scenario_from(pick);
                if seen.insert(s.key.clone()) {
                    out.push(s);
                }
            }
        }
        out
    }

    pub(crate) fn scenario_from(&self, pick: BTreeMap<Axis, String>) -> Scenario {
        let key = pick
            .iter()
            .map(|(a, v)| format!("{}={v}", a.name()))
            .collect::<Vec<_>>()
            .join(",");
        let get = |a: Axis| pick.get(&a).cloned();
        let (tb_mtu, tb_rate, tb_off, tb_fwd) = match &self.target {
            Target::Testbed(t) => (t.mtu, t.link_rate.clone(), t.offloads, t.forward_pps),
            Target::Hosts(h) => (h.mtu, h.link_rate.clone(), None, None),
            Target::Loopback => (None, None, None, None),
        };
        let ip: u8 = get(Axis::Ip).and_then(|v| v.parse().ok()).unwrap_or(4);
        // Without a transport axis an application model runs on its own
        // transport (telnet and file are TCP, as `send --app` does).
        let transport = get(Axis::Transport).unwrap_or_else(|| {
            match get(Axis::App).as_deref() {
                Some("telnet" | "file") => "tcp",
                _ => "udp",
            }
            .into()
        });
        let frame: Option<u32> = get(Axis::Frame).and_then(|v| v.parse().ok());
        let payload = match frame {
            Some(f) => frame_to_payload(f, ip, &transport),
            None => get(Axis::Payload).and_then(|v| v.parse().ok()),
        };
        let pps_text = get(Axis::Pps);
        let link_rate = get(Axis::LinkRate).or(tb_rate);
        let settings = Settings {
            ip,
            transport,
            meter: get(Axis::Meter).unwrap_or_else(|| "owd".into()),
            app: get(Axis::App).unwrap_or_else(|| "constant".into()),
            codec: get(Axis::Codec),
            payload,
            size_mix: None,
            frame,
            pps: pps_text.as_deref().and_then(|p| p.parse().ok()),
            max_rate: pps_text.as_deref() == Some("max"),
            flows: get(Axis::Flows).and_then(|v| v.parse().ok()).unwrap_or(1),
            mtu: get(Axis::Mtu).and_then(|v| v.parse().ok()).or(tb_mtu),
            link_bps: link_rate.as_deref().and_then(parse_link_rate),
            link_rate,
            offloads: get(Axis::Offloads).and_then(|v| v.parse().ok()).or(tb_off),
            forward_pps: get(Axis::ForwardPps)
                .and_then(|v| v.parse().ok())
                .or(tb_fwd),
            sender: get(Axis::Sender),
            dscp: get(Axis::Dscp),
            cc: get(Axis::Cc),
            window: get(Axis::Window),
            rate: get(Axis::Rate),
            idt: get(Axis::Idt),
            size: get(Axis::Size),
            direction: get(Axis::Direction).filter(|d| d != "forward"),
            duration_s: get(Axis::Duration).and_then(|v| v.parse().ok()),
        };
        let axes = pick
            .into_iter()
            .map(|(a, v)| (a.name().to_string(), v))
            .collect();
        Scenario {
            key,
            axes,
            settings,
        }
    }

    /// How long each run of `s` lasts: its `duration` axis value when it
    /// has one, the campaign's own length otherwise.
    pub fn run_length(&self, s: &Scenario) -> RunLength {
        match s.settings.duration_s {
            Some(seconds) => RunLength::Duration { seconds },
            None => self.length,
        }
    }

    /// Total planned runs: scenarios × repetitions.
    pub fn planned_runs(&self) -> usize {
        self.expand().len() * self.repetitions as usize
    }

    /// The axis a chart should put on x: the first of payload, frame, mtu,
    /// pps that has more than one value.
    pub fn x_axis(&self) -> Option<String> {
        for a in [
            Axis::Payload,
            Axis::Frame,
            Axis::Mtu,
            Axis::Pps,
            Axis::Flows,
        ] {
            let n: usize = self
                .matrices
                .iter()
                .filter_map(|m| m.axes.get(&a).map(|v| v.len()))
                .max()
                .unwrap_or(0);
            if n > 1 {
                return Some(a.name().to_string());
            }
        }
        None
    }
}
