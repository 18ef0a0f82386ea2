//! Campaign files: parsing, validation and matrix expansion.
//!
//! Everything a campaign could get wrong is checked here, before a test-bed
//! is built or a packet sent, and every error names the line and the key so
//! the user can fix the file without guessing. Expansion is deterministic:
//! the same file always yields the same scenarios with the same keys, which
//! is what lets an interrupted campaign resume without repeating a run.

//!
//! - [`axes`]: the axis table (names, value parsers, what each axis sets).
//! - `raw`: the file as TOML gives it, with spans for line numbers.
//! - `check`: raw file → validated [`Campaign`] (and `[quick]`).
//! - `expand`: matrix → [`Scenario`]s with stable keys and typed settings.
//! - `grow`: which finished runs a changed campaign file keeps (`--resume`).
//! - this module: the validated types.

pub mod axes;
mod check;
mod expand;
mod grow;
mod raw;

pub use axes::{parse_link_rate, Axis};
pub use check::{parse_selector, MAX_SCENARIOS};
pub use grow::check_growth;

use crate::summary::ReportOptions;
use raw::Quick;
use std::collections::BTreeMap;
use thiserror::Error;
use wirebench_testbed::LinkOpts;

/// Why a campaign file was refused, with the file and line to fix.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CampaignError {
    /// A key has a bad value, or a key is not known.
    #[error("{origin}:{line}: `{key}`: {reason}")]
    Invalid {
        /// The campaign file's name as given.
        origin: String,
        /// Line of the key (1-based).
        line: usize,
        /// The key as written, e.g. `payload`.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is not TOML at all.
    #[error("{origin}:{line}: {reason}")]
    Syntax {
        /// The campaign file's name as given.
        origin: String,
        /// Line of the error (1-based).
        line: usize,
        /// The TOML parser's message.
        reason: String,
    },
}

impl CampaignError {
    /// The line the error is on.
    pub fn line(&self) -> usize {
        match self {
            CampaignError::Invalid { line, .. } | CampaignError::Syntax { line, .. } => *line,
        }
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
    /// One line for people: where the runs go (stored with the environment).
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

/// `[testbed]`: an emulated test-bed and the link settings of its links.
#[derive(Debug, Clone, PartialEq)]
pub struct TestbedTarget {
    /// A preset topology (`direct`, `router`, `two-routers`).
    pub preset: Option<String>,
    /// Topology file, resolved relative to the campaign file.
    pub file: Option<String>,
    /// The node that runs `wirebench send`.
    pub sender: String,
    /// The node that runs `wirebench recv`.
    pub receiver: String,
    /// Link settings used when no matrix axis sets them.
    pub mtu: Option<u32>,
    /// Rate of every link, as written (`"1gbit"`).
    pub link_rate: Option<String>,
    /// Segmentation and receive offloads on the veths.
    pub offloads: Option<bool>,
    /// Packet-rate cap of every router (packets/s), when no axis sets it.
    pub forward_pps: Option<u64>,
    /// Name (prefix) of the test-bed.
    pub name: String,
}

/// `[hosts]`: real hosts, either a running receiver or nodes driven through agents.
#[derive(Debug, Clone, PartialEq)]
pub struct HostsTarget {
    /// IPv4 address of the running `wirebench recv`.
    pub receiver: Option<String>,
    /// IPv6 address of the running `wirebench recv`.
    pub receiver6: Option<String>,
    /// Its control port (None: 5400).
    pub port: Option<u16>,
    /// Known properties of the real path, for the upper bound (and, with
    /// `apply_mtu` nodes and no `mtu` axis, the MTU set on them).
    pub mtu: Option<u32>,
    /// Rate of the real path, as written (`"1gbit"`).
    pub link_rate: Option<String>,
    /// `[[hosts.node]]`: real nodes driven through agents. Empty: a
    /// `wirebench recv` already running at `receiver`.
    pub nodes: Vec<HostNode>,
    /// `[hosts.pairings]`: the node sets the `pairing` axis picks from.
    pub pairings: BTreeMap<String, Pairing>,
}

/// One value of the `pairing` axis: the nodes a run of it uses; every
/// other node stays idle (no traffic, no link changes, not in the run's
/// observations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    /// Sender nodes; each sends to `receiver`, whatever its own `to`.
    pub senders: Vec<String>,
    /// The receiver node every sender of the pairing sends to.
    pub receiver: String,
    /// Router nodes on the pairing's path, observed like any router.
    pub routers: Vec<String>,
}

impl Pairing {
    /// Whether the node named `name` takes part in the pairing.
    pub fn uses(&self, name: &str) -> bool {
        self.receiver == name
            || self.senders.iter().any(|s| s == name)
            || self.routers.iter().any(|r| r == name)
    }
}

/// How the controller reaches a node's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeReach {
    /// `ssh [ssh_options] DEST wirebench agent --stdio`.
    Ssh {
        /// SSH destination (`user@host` or a host alias).
        dest: String,
        /// Extra `ssh` options, before the destination.
        options: Vec<String>,
    },
    /// A child process on this host.
    Local,
    /// `ip netns exec NS ...` on this host.
    Netns(String),
}

/// What a real node does in the runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    /// Runs `wirebench send`.
    Sender,
    /// Runs `wirebench recv`.
    Receiver,
    /// Only observed: CPU, counters, metadata.
    Router,
}

impl NodeRole {
    /// The role as written in the campaign file.
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
    /// The node's name (unique in the campaign).
    pub name: String,
    /// How the controller reaches its agent.
    pub reach: NodeReach,
    /// The wirebench program on that node (default `wirebench` on PATH
    /// over SSH, this binary locally).
    pub agent: Option<String>,
    /// What the node does in the runs.
    pub role: NodeRole,
    /// Senders: the receiver node they send to.
    pub to: Option<String>,
    /// Data addresses traffic is sent to (receivers) or from.
    pub ipv4: Option<std::net::IpAddr>,
    /// The IPv6 data address (see `ipv4`).
    pub ipv6: Option<std::net::IpAddr>,
    /// The `mtu` axis (or `[hosts] mtu`) is set on its interfaces.
    pub apply_mtu: bool,
    /// The `offloads` axis is set on its interfaces.
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
    /// `duration_s`: seconds of traffic (`send -t`).
    Duration {
        /// Seconds.
        seconds: f64,
    },
    /// `packets`: packets per flow (`send -z`).
    Packets {
        /// Packets.
        count: u64,
    },
    /// `kbytes`: KB (1024 B) per flow (`send -k`).
    KBytes {
        /// Kilobytes.
        count: u64,
    },
}

/// The order runs are made in (see [`crate::runner::plan`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Order {
    /// Scenarios in matrix order, repetitions in rounds.
    Sequential,
    /// Link groups and rounds permuted with a seed.
    Shuffled {
        /// Seed of the permutation.
        seed: u64,
    },
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
    /// The campaign's name (the store finds it by name for `--resume`).
    pub name: String,
    /// Free text from the file.
    pub description: String,
    /// `store = "…"`: the results store `run` writes to when `--db` is
    /// not given (an SQLite file, relative to the campaign file, or a
    /// `postgres://` URL).
    pub store: Option<String>,
    /// The file's name as given, used in messages and to resolve relative paths.
    pub origin: String,
    /// The campaign file exactly as read.
    pub text: String,
    /// Where the traffic runs.
    pub target: Target,
    /// The `[[matrix]]` blocks.
    pub matrices: Vec<Matrix>,
    /// Runs per scenario; with [`Campaign::adaptive`] the least.
    pub repetitions: u32,
    /// `repetitions = { min, max, until_cv | until_ci }`: more runs of a
    /// scenario until its headline metric settles.
    pub adaptive: Option<Adaptive>,
    /// How long each run lasts unless a `duration` axis says otherwise.
    pub length: RunLength,
    /// Seconds of the same traffic before every run, not stored.
    pub warmup_s: f64,
    /// Idle seconds between runs.
    pub pause_s: f64,
    /// How long the receiver waits for late packets after the sender stops
    /// (`send --linger`); None = the engine's default (2 s, RFC 2544).
    pub linger_s: Option<f64>,
    /// Per-interval series of every run (`send --interval`), stored with
    /// the run and drawn over time in the report.
    pub interval_ms: Option<u64>,
    /// The order runs are made in.
    pub order: Order,
    /// Base of every run's `--seed`.
    pub seed: u64,
    /// Baseline selector, e.g. `mtu=1500` or `ip=4`.
    pub baseline: Option<String>,
    /// Longest a single run may take before it is killed and counted failed.
    pub run_timeout_s: Option<f64>,
    /// `repeat_stalled = N`: a test-bed run during which the link
    /// emulators counted a host stall is stored failed and made again, at
    /// most N times per planned run and invocation (0: never). Not part of
    /// the campaign's identity: it changes when runs are made, not what
    /// one measures, so `--resume` accepts a file that changed it.
    pub repeat_stalled: u32,
    /// True once `apply_quick` ran.
    pub quick: bool,
    quick_overrides: Option<Quick>,
    /// The `[rfc2544]` table and its line, when the campaign is an RFC 2544
    /// search (then `matrices` is empty; `crate::rfc2544` reads the table).
    pub rfc2544: Option<(toml::Value, usize)>,
    /// How the report presents the campaign (`[report]`).
    pub report: ReportOptions,
}

/// The metric an adaptive rule watches unless the file names another.
pub const DEFAULT_SETTLE_METRIC: &str = "throughput_payload_bps";

/// Adaptive repetitions: after [`Campaign::repetitions`] runs, a scenario
/// runs again until the spread of its headline metric over its runs is
/// within `until`, or it has `max` runs (then it is flagged as never
/// settled). S3's procedure: repeat until the standard deviation is under
/// 10 % of the mean.
#[derive(Debug, Clone, PartialEq)]
pub struct Adaptive {
    /// Most runs of one scenario.
    pub max: u32,
    /// When its runs have settled.
    pub until: Until,
    /// A key of the metric table.
    pub metric: String,
}

/// When a scenario's runs have settled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Until {
    /// Coefficient of variation (sample sd / |mean|) at most this.
    Cv(f64),
    /// Half-width of the 95 % Student-t confidence interval of the mean at
    /// most this share of |mean| (`until_ci = "2%"`: 0.02).
    Ci(f64),
}

/// The typed settings of one scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// IP version, 4 or 6.
    pub ip: u8,
    /// `udp` or `tcp` (`send -T`).
    pub transport: String,
    /// `owd` or `rtt` (`send -m`).
    pub meter: String,
    /// `constant` or an application model (`send --app`).
    pub app: String,
    /// The codec of a VoIP model (`send --codec`).
    pub codec: Option<String>,
    /// Transport payload per packet (probe header included), when the
    /// model is the constant one.
    pub payload: Option<u32>,
    /// A payload mix instead of one payload (`send --size-mix`, e.g. an
    /// RFC 2544 IMIX trial); wins over `payload`.
    pub size_mix: Option<String>,
    /// Ethernet frame size in bytes (FCS included), turned into `payload`.
    pub frame: Option<u32>,
    /// Packets per second, `None` = engine default; `max` = unpaced.
    pub pps: Option<f64>,
    /// Unpaced (`pps = "max"`, `send --max`).
    pub max_rate: bool,
    /// Parallel flows per run.
    pub flows: u32,
    /// The test-bed's link options (MTU, rate, offloads, router cap): the
    /// target's own, overridden by the link axes. Also the key of the
    /// test-bed a scenario runs on (see [`Scenario::link_key`]).
    pub link: LinkOpts,
    /// `[[hosts.node]]`: the one sender node that sends (None: all).
    pub sender: Option<String>,
    /// `[hosts.pairings]`: the node set of the scenario (see [`Pairing`]).
    pub pairing: Option<String>,
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
    /// `send --gso on|off` for a forward UDP flow (None: the sender's
    /// default, segmented for `--max`).
    pub gso: Option<bool>,
}

impl Settings {
    /// The settings of a scenario no axis touches: IPv4, one-way delay,
    /// the constant model, one flow, the target's links; the transport is
    /// chosen once the axes are known (see `expand`).
    pub(crate) fn base(link: LinkOpts) -> Settings {
        Settings {
            ip: 4,
            transport: String::new(),
            meter: "owd".into(),
            app: "constant".into(),
            codec: None,
            payload: None,
            size_mix: None,
            frame: None,
            pps: None,
            max_rate: false,
            flows: 1,
            link,
            sender: None,
            pairing: None,
            dscp: None,
            cc: None,
            window: None,
            rate: None,
            idt: None,
            size: None,
            direction: None,
            duration_s: None,
            gso: None,
        }
    }

    /// The link rate in bit/s, when the target or an axis sets one.
    pub fn link_bps(&self) -> Option<f64> {
        self.link.rate_bps.map(|b| b as f64)
    }
}

/// One point of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Stable identifier, e.g. `ip=4,transport=udp,payload=1408,mtu=1500`.
    pub key: String,
    /// Axis name → value text.
    pub axes: BTreeMap<String, String>,
    /// What the axes set, with the target's defaults elsewhere.
    pub settings: Settings,
}

impl Scenario {
    /// The link settings as a comparable key; a change means the test-bed
    /// has to be rebuilt.
    pub fn link_key(&self) -> LinkOpts {
        self.settings.link
    }

    /// True when the scenario matches every `axis=value` of a selector.
    pub fn matches(&self, selector: &[(String, String)]) -> bool {
        selector
            .iter()
            .all(|(k, v)| self.axes.get(k).is_some_and(|x| x == v))
    }
}
