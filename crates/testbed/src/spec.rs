//! What a test-bed should look like, before the kernel is asked for anything:
//! presets, the TOML topology file, link rates, and the validation that
//! guarantees `up` never starts building something it cannot finish.

use crate::error::TestbedError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Default link MTU when neither the preset, the file nor an override set one.
pub const DEFAULT_MTU: u32 = 1500;
/// The link MTU range Linux veth devices accept (IPv4 minimum to IP maximum).
pub const MTU_MIN: u32 = 68;
/// Largest link MTU accepted.
pub const MTU_MAX: u32 = 65535;
/// IPv6 needs at least this link MTU (RFC 8200 §5); below it a link carries IPv4 only.
pub const IPV6_MIN_MTU: u32 = 1280;
/// Link rates accepted, bits per second (1 kbit/s … 400 Gbit/s).
pub const RATE_MIN: u64 = 1_000;
/// Fastest link rate accepted, bit/s.
pub const RATE_MAX: u64 = 400_000_000_000;
/// Longest node name; namespaces are named `wb-<testbed>-<node>`.
pub const NODE_NAME_MAX: usize = 32;

/// Packet-rate caps accepted for a router's `forward_pps` (packets/s).
pub const FORWARD_PPS_MIN: u64 = 1;
/// Highest `forward_pps` accepted.
pub const FORWARD_PPS_MAX: u64 = 100_000_000;
/// Interface queue lengths accepted (packets); Linux's default is 1000.
pub const TXQUEUELEN_MIN: u32 = 1;
/// Longest interface queue accepted (packets).
pub const TXQUEUELEN_MAX: u32 = 1_000_000;
/// Queue length of every shaped interface unless a node says otherwise:
/// the default `txqueuelen` of a Linux Ethernet device.
pub const DEFAULT_TXQUEUELEN: u32 = 1000;

/// Overrides applied to every link (the CLI's `--mtu`, `--rate`,
/// `--offloads`), every router (`--forward-pps`) and every node
/// (`--txqueuelen`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkOpts {
    /// Link MTU (`--mtu`).
    pub mtu: Option<u32>,
    /// Link rate in bit/s (`--rate`).
    pub rate_bps: Option<u64>,
    /// Offloads on or off (`--offloads`).
    pub offloads: Option<bool>,
    #[serde(default)]
    /// Routers' packet-rate cap (`--forward-pps`).
    pub forward_pps: Option<u64>,
    #[serde(default)]
    /// Interface queue length (`--txqueuelen`).
    pub txqueuelen: Option<u32>,
    /// One-way propagation delay added on every link (the link's `delay`).
    #[serde(default)]
    pub delay_ns: Option<u64>,
    /// Delay variation on every link (the link's `jitter`; needs a delay,
    /// from this or from the topology file).
    #[serde(default)]
    pub jitter_ns: Option<u64>,
    /// Loss on every link (the link's `loss`): a random rate, or
    /// Gilbert-Elliott bursts (rate 0 and the chain), as
    /// [`parse_loss_spec`] returns them.
    #[serde(default)]
    pub loss: Option<(f64, Option<GeModel>)>,
    /// Drop-tail queue of every link (the link's `queue`).
    #[serde(default)]
    pub queue: Option<QueueLimit>,
    /// CoDel or FQ-CoDel on every link with a rate (the link's `aqm`).
    #[serde(default)]
    pub aqm: Option<AqmSpec>,
    /// The link emulator's slack on every link with a rate (the link's
    /// `slack`).
    #[serde(default)]
    pub slack_ns: Option<u64>,
}

/// What a node is: hosts send and receive, routers forward, switches bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// Sends and receives (no forwarding).
    Host,
    /// Forwards between its links.
    Router,
    /// Bridges its links into one segment.
    Switch,
}

impl NodeKind {
    /// The name used in topology files.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Host => "host",
            NodeKind::Router => "router",
            NodeKind::Switch => "switch",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// One node of a topology.
pub struct NodeSpec {
    /// Node name, unique in the topology.
    pub name: String,
    /// What the node is.
    pub kind: NodeKind,
    /// Routers only: the most packets per second the node forwards out of
    /// each of its interfaces, whatever their size (a software router's
    /// per-packet cost). None = as fast as the CPU goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_pps: Option<u64>,
    /// Packets each shaped interface of the node queues before dropping
    /// (like `ip link set … txqueuelen`); None = [`DEFAULT_TXQUEUELEN`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txqueuelen: Option<u32>,
}

impl NodeSpec {
    /// A node `name` of `kind` with default settings.
    pub fn new(name: &str, kind: NodeKind) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            kind,
            forward_pps: None,
            txqueuelen: None,
        }
    }

    /// The queue length in packets of each of the node's shaped interfaces.
    pub fn queue_len(&self) -> u32 {
        self.txqueuelen.unwrap_or(DEFAULT_TXQUEUELEN)
    }
}

/// The law of a link's jitter (netem's `distribution`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// Uniform in delay ± jitter.
    #[default]
    Uniform,
    /// Normal, mean delay, standard deviation jitter.
    Normal,
    /// Pareto (shape 3), mean delay, standard deviation jitter, long tail late.
    Pareto,
}

impl JitterDist {
    /// The name used in topology files.
    pub fn as_str(self) -> &'static str {
        match self {
            JitterDist::Uniform => "uniform",
            JitterDist::Normal => "normal",
            JitterDist::Pareto => "pareto",
        }
    }
}

/// Gilbert–Elliott bursty loss (netem's `loss gemodel p r 1-h 1-k`): a good
/// and a bad state; per frame the chain moves good→bad with probability
/// `p` and bad→good with `r`, then loses the frame with the state's loss
/// probability. Mean loss p/(p+r)·loss_bad + r/(p+r)·loss_good; a stay in
/// the bad state lasts 1/r frames on average.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GeModel {
    /// Probability of moving from the good state to the bad one, per frame.
    pub p: f64,
    /// Probability of moving from the bad state to the good one, per frame.
    pub r: f64,
    /// Loss probability in the bad state (1−h), default 1.
    pub loss_bad: f64,
    /// Loss probability in the good state (1−k), default 0.
    pub loss_good: f64,
}

/// Delay, jitter, loss, reordering, duplication and corruption of a link,
/// the same in both directions. The user-space link emulator does all of
/// it on any kernel; netem only where the emulator cannot (see
/// docs/testbed.md, "Link backends").
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Impairment {
    /// Added one-way delay, ns.
    pub delay_ns: u64,
    /// Delay variation around it, ns.
    pub jitter_ns: u64,
    /// Random loss probability 0..1.
    pub loss: f64,
    #[serde(default)]
    /// The law the jitter is drawn from.
    pub dist: JitterDist,
    /// Bursty loss instead of `loss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemodel: Option<GeModel>,
    /// Fraction of frames delivered after the frame behind them.
    #[serde(default)]
    pub reorder: f64,
    /// Fraction of frames delivered twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Fraction of frames with one bit flipped past the Ethernet header.
    #[serde(default)]
    pub corrupt: f64,
}

impl Impairment {
    /// True when the impairment changes nothing.
    pub fn is_none(&self) -> bool {
        self.delay_ns == 0
            && self.jitter_ns == 0
            && self.loss == 0.0
            && self.gemodel.is_none()
            && self.reorder == 0.0
            && self.duplicate == 0.0
            && self.corrupt == 0.0
    }

    /// Whether netem could do all of it (it has every knob but our
    /// FIFO-preserving jitter and swap-with-next reordering).
    pub fn netem_line(&self) -> String {
        let mut s = String::from("netem limit 100000");
        if self.delay_ns > 0 {
            s.push_str(&format!(" delay {}us", self.delay_ns / 1000));
            if self.jitter_ns > 0 {
                s.push_str(&format!(
                    " {}us distribution {}",
                    self.jitter_ns / 1000,
                    match self.dist {
                        JitterDist::Uniform => "uniform",
                        JitterDist::Normal => "normal",
                        JitterDist::Pareto => "pareto",
                    }
                ));
            }
        }
        let pct = |x: f64| {
            let p = format!("{:.6}", x * 100.0);
            format!("{}%", p.trim_end_matches('0').trim_end_matches('.'))
        };
        if let Some(g) = self.gemodel {
            s.push_str(&format!(
                " loss gemodel {} {} {} {}",
                pct(g.p),
                pct(g.r),
                pct(g.loss_bad),
                pct(g.loss_good)
            ));
        } else if self.loss > 0.0 {
            s.push_str(&format!(" loss {}", pct(self.loss)));
        }
        if self.duplicate > 0.0 {
            s.push_str(&format!(" duplicate {}", pct(self.duplicate)));
        }
        if self.corrupt > 0.0 {
            s.push_str(&format!(" corrupt {}", pct(self.corrupt)));
        }
        if self.reorder > 0.0 {
            s.push_str(&format!(" reorder {}", pct(self.reorder)));
        }
        s
    }

    /// Checks ranges; the error names the field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let prob = |name: &'static str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err((name, format!("{name} must be 0..100 %")))
            }
        };
        prob("loss", self.loss)?;
        prob("reorder", self.reorder)?;
        prob("duplicate", self.duplicate)?;
        prob("corrupt", self.corrupt)?;
        if let Some(g) = self.gemodel {
            for v in [g.p, g.r, g.loss_bad, g.loss_good] {
                prob("loss", v)?;
            }
            if self.loss > 0.0 {
                return Err(("loss", "give either a loss rate or gemodel".into()));
            }
        }
        if self.jitter_ns > 0 && self.delay_ns == 0 {
            return Err(("jitter", "jitter needs a delay".into()));
        }
        if self.reorder > 0.0 && self.delay_ns == 0 {
            return Err((
                "reorder",
                "reorder needs a delay (a frame can only be passed while it is in flight)".into(),
            ));
        }
        Ok(())
    }
}

/// Size of a link's queue (`queue = "1000p"`, `"256KiB"`, `"20ms"`):
/// frames, bytes, or time at the link rate. Drop-tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueLimit {
    /// At most this many frames.
    Packets(u32),
    /// At most this many bytes.
    Bytes(u64),
    /// At most this long at the link rate, ns.
    Time(u64),
}

impl QueueLimit {
    /// Bytes the queue holds at `rate_bps` (None for a packet limit).
    pub fn bytes_at(&self, rate_bps: Option<u64>) -> Option<u64> {
        match *self {
            QueueLimit::Packets(_) => None,
            QueueLimit::Bytes(b) => Some(b),
            QueueLimit::Time(ns) => {
                rate_bps.map(|r| (r as u128 * ns as u128 / 8 / 1_000_000_000) as u64)
            }
        }
    }
}

/// A link's `slack` (`"20us"`): a duration within [`SLACK_RANGE_NS`].
pub fn parse_slack(s: &str) -> Result<u64, String> {
    let ns = parse_duration_ns(s)?;
    if SLACK_RANGE_NS.contains(&ns) {
        Ok(ns)
    } else {
        Err(format!("`{s}`: slack is 1us to 1ms"))
    }
}

/// Parses `1000p`, `256KiB`, `64kb`, `1500000b`, `20ms`.
pub fn parse_queue(s: &str) -> Result<QueueLimit, String> {
    let t = s.trim();
    let bad = || format!("`{s}` is not a queue size (e.g. \"1000p\", \"256KiB\", \"20ms\")");
    if let Some(n) = t.strip_suffix('p') {
        let v: u32 = n.trim().parse().map_err(|_| bad())?;
        if !(1..=TXQUEUELEN_MAX).contains(&v) {
            return Err(format!("`{s}`: 1..={TXQUEUELEN_MAX} packets"));
        }
        return Ok(QueueLimit::Packets(v));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    if matches!(unit.as_str(), "ns" | "us" | "ms" | "s") {
        let ns = parse_duration_ns(t)?;
        if ns == 0 {
            return Err(format!("`{s}`: a queue of zero time holds nothing"));
        }
        return Ok(QueueLimit::Time(ns));
    }
    let v: f64 = num.parse().map_err(|_| bad())?;
    let mult = match unit.as_str() {
        "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let b = v * mult;
    if !(64.0..=1e10).contains(&b) {
        return Err(format!("`{s}`: 64 B ..= 10 GB"));
    }
    Ok(QueueLimit::Bytes(b.round() as u64))
}

/// The active queue management of an emulated link's queue (RFC 8289
/// CoDel, RFC 8290 FQ-CoDel), run by the link emulator because this
/// kernel, like many container kernels, has neither qdisc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AqmKind {
    /// One FIFO under CoDel.
    Codel,
    /// Flows hashed into queues served by deficit round robin, CoDel in each.
    FqCodel,
}

/// `aqm = "codel"` / `"fq_codel"` and their parameters (tc's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AqmSpec {
    /// Which algorithm.
    pub kind: AqmKind,
    /// Acceptable standing queue delay, ns (RFC 8289 §4.4: 5 ms).
    pub target_ns: u64,
    /// Window the delay must stay above target before drops start, ns
    /// (RFC 8289 §4.3: 100 ms).
    pub interval_ns: u64,
    /// Bytes a flow may send per round (RFC 8290 §4.2: one MTU, 1514).
    pub quantum: u32,
    /// Flow queues (RFC 8290 §5.2.2: 1024); 1 for plain CoDel.
    pub flows: u32,
}

impl AqmSpec {
    /// RFC defaults of `kind`.
    pub fn new(kind: AqmKind) -> AqmSpec {
        AqmSpec {
            kind,
            target_ns: 5_000_000,
            interval_ns: 100_000_000,
            quantum: 1514,
            flows: if kind == AqmKind::Codel { 1 } else { 1024 },
        }
    }

    /// The topology-file form, e.g. `fq_codel target 5ms interval 100ms`.
    pub fn as_text(&self) -> String {
        let mut s = format!(
            "{} target {}us interval {}us",
            match self.kind {
                AqmKind::Codel => "codel",
                AqmKind::FqCodel => "fq_codel",
            },
            self.target_ns / 1000,
            self.interval_ns / 1000
        );
        if self.kind == AqmKind::FqCodel {
            s.push_str(&format!(" quantum {} flows {}", self.quantum, self.flows));
        }
        s
    }
}

/// Parses `"codel"`, `"fq_codel"`, optionally followed by `target T`,
/// `interval T` and, for fq_codel, `quantum BYTES` and `flows N`.
pub fn parse_aqm(s: &str) -> Result<AqmSpec, String> {
    let mut w = s.split_whitespace();
    let mut a = match w.next() {
        Some("codel") => AqmSpec::new(AqmKind::Codel),
        Some("fq_codel") => AqmSpec::new(AqmKind::FqCodel),
        _ => {
            return Err(format!(
                "`{s}`: aqm is \"codel\" or \"fq_codel\", then optional `target 5ms interval 100ms` (fq_codel also `quantum 1514 flows 1024`)"
            ))
        }
    };
    while let Some(key) = w.next() {
        let Some(v) = w.next() else {
            return Err(format!("`{s}`: `{key}` needs a value"));
        };
        let int = |lo: u32, hi: u32| -> Result<u32, String> {
            v.parse::<u32>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| format!("`{s}`: {key} must be {lo}..={hi}"))
        };
        match key {
            "target" => a.target_ns = parse_duration_ns(v)?,
            "interval" => a.interval_ns = parse_duration_ns(v)?,
            "quantum" if a.kind == AqmKind::FqCodel => a.quantum = int(64, 65_536)?,
            "flows" if a.kind == AqmKind::FqCodel => a.flows = int(1, 65_536)?,
            _ => return Err(format!("`{s}`: unknown aqm parameter `{key}`")),
        }
    }
    if a.target_ns == 0 || a.interval_ns < a.target_ns {
        return Err(format!(
            "`{s}`: target must be above 0 and interval at least target"
        ));
    }
    Ok(a)
}

/// Bytes of IP packet one delivery opportunity of a trace carries:
/// Mahimahi's 1504 B less the 4 B header its TUN devices add.
pub const TRACE_OPPORTUNITY_BYTES: u32 = 1500;

/// One direction's trace (Mahimahi's format: one line per delivery
/// opportunity, its time in whole ms; the trace repeats with the last
/// line's time as its period).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkTrace {
    /// The file it came from.
    pub path: PathBuf,
    /// Opportunity times in ms, non-decreasing, the last one the period.
    /// Read at `up` from `path`; not stored with the test-bed.
    #[serde(skip)]
    pub ms: Vec<u64>,
}

impl LinkTrace {
    /// Reads and checks a trace file; errors name the file and line.
    pub fn load(path: &Path) -> Result<LinkTrace, TestbedError> {
        let text = wirebench_input::read_text(path)
            .map_err(|e| TestbedError::Invalid(format!("trace file {e}")))?;
        Self::parse(&text, path)
    }

    /// [`LinkTrace::load`] on text already read.
    pub fn parse(text: &str, path: &Path) -> Result<LinkTrace, TestbedError> {
        let err = |line: usize, msg: String| TestbedError::Trace {
            path: path.to_path_buf(),
            line,
            msg,
        };
        let mut ms = Vec::new();
        for (i, l) in text.lines().enumerate() {
            let t = l.trim();
            let v: u64 = t.parse().map_err(|_| {
                err(
                    i + 1,
                    format!("`{t}` is not a delivery time (whole ms, one per line)"),
                )
            })?;
            if v > 86_400_000 {
                return Err(err(i + 1, format!("{v} ms is more than a day")));
            }
            if ms.last().is_some_and(|&p| v < p) {
                return Err(err(
                    i + 1,
                    format!("{v} ms is earlier than the line before; times never go back"),
                ));
            }
            ms.push(v);
        }
        match ms.last() {
            None => Err(err(1, "no delivery opportunity in the trace".into())),
            Some(0) => Err(err(
                ms.len(),
                "the last time (the period the trace repeats with) is 0 ms".into(),
            )),
            Some(_) => Ok(LinkTrace {
                path: path.to_path_buf(),
                ms,
            }),
        }
    }

    /// Period of the trace, ms.
    pub fn period_ms(&self) -> u64 {
        self.ms.last().copied().unwrap_or(0)
    }

    /// Mean rate of IP bytes the trace carries, bit/s.
    pub fn mean_bps(&self) -> f64 {
        self.ms.len() as f64 * TRACE_OPPORTUNITY_BYTES as f64 * 8.0 * 1000.0
            / self.period_ms().max(1) as f64
    }
}

/// Parses a loss: `"1%"`, `0.01`, or `"gemodel P R [1-H [1-K]]"` (netem's
/// order: P good→bad, R bad→good, 1−h loss in bad, 1−k loss in good).
pub fn parse_loss_spec(s: &str) -> Result<(f64, Option<GeModel>), String> {
    let t = s.trim();
    let Some(rest) = t.strip_prefix("gemodel") else {
        return parse_loss(t).map(|l| (l, None));
    };
    let v: Vec<f64> = rest
        .split_whitespace()
        .map(parse_loss)
        .collect::<Result<_, _>>()?;
    if !(2..=4).contains(&v.len()) {
        return Err(format!(
            "`{s}`: gemodel takes P R [1-H [1-K]] (e.g. \"gemodel 1% 25%\")"
        ));
    }
    if v[1] == 0.0 {
        return Err(format!(
            "`{s}`: R (bad→good) 0 % never leaves the bad state"
        ));
    }
    Ok((
        0.0,
        Some(GeModel {
            p: v[0],
            r: v[1],
            loss_bad: v.get(2).copied().unwrap_or(1.0),
            loss_good: v.get(3).copied().unwrap_or(0.0),
        }),
    ))
}

/// Parses a jitter law name.
pub fn parse_dist(s: &str) -> Result<JitterDist, String> {
    match s.trim() {
        "uniform" => Ok(JitterDist::Uniform),
        "normal" => Ok(JitterDist::Normal),
        "pareto" => Ok(JitterDist::Pareto),
        _ => Err(format!("`{s}`: distribution is uniform, normal or pareto")),
    }
}

/// One point-to-point cable between two nodes (a node may be a switch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// The two nodes it joins.
    pub endpoints: [String; 2],
    /// Link MTU.
    pub mtu: u32,
    /// Link rate in bits per second on the wire (the token bucket charges
    /// preamble, FCS and inter-frame gap); `None` = as fast as the CPU goes.
    pub rate_bps: Option<u64>,
    /// Segmentation/receive offloads (TSO, GSO, GRO, UDP GSO) on both ends.
    pub offloads: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Delay, jitter, loss and other laws; None: a clean link.
    pub impairment: Option<Impairment>,
    /// The link's queue at each end; None = the node's `txqueuelen` packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueLimit>,
    /// CoDel or FQ-CoDel on the link's queue, which then lives in the
    /// emulator (docs/testbed.md, "Active queue management").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aqm: Option<AqmSpec>,
    /// Trace-driven capacity instead of a rate: [first→second,
    /// second→first] (docs/testbed.md, "Trace-driven links").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Box<[LinkTrace; 2]>>,
    /// How late the link emulator may send a frame on a saturated wire
    /// to give the hosts their CPU (ns); None = [`DEFAULT_SLACK_NS`]
    /// (docs/testbed.md, "How exact it is").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_ns: Option<u64>,
}

/// The link emulator's default slack: the shortest sleep its loop takes
/// once its spin budget is spent. Frames that fall due meanwhile leave on
/// waking, so on a saturated wire a send is late by up to this plus the
/// wake-up (p99 73.7 µs at 1 Gbit/s of 1518 B on a 2-core VM, under
/// 50 µs with 10 µs). A shorter one is more exact and costs the hosts
/// CPU: with 20 µs a host's UDP sender at 1 Gbit/s of 1518 B fell 1.5 %
/// short of the link in 1 of 4 runs, with 50 µs in none of 6, and with
/// 10 µs a campaign's receiver at normal priority dropped 29-51 % of
/// what the link delivered (docs/testbed.md).
pub const DEFAULT_SLACK_NS: u64 = 50_000;

/// The slack a link may ask for (ns): from a µs (the loop then mostly
/// spins) to a ms (the link's timing then follows the hosts' load).
pub const SLACK_RANGE_NS: std::ops::RangeInclusive<u64> = 1_000..=1_000_000;

impl LinkSpec {
    /// A link between `a` and `b` with default settings.
    pub fn new(a: &str, b: &str) -> LinkSpec {
        LinkSpec {
            endpoints: [a.to_string(), b.to_string()],
            mtu: DEFAULT_MTU,
            rate_bps: None,
            offloads: false,
            impairment: None,
            queue: None,
            aqm: None,
            trace: None,
            slack_ns: None,
        }
    }

    /// `a—b` for messages.
    pub fn label(&self) -> String {
        format!("{}—{}", self.endpoints[0], self.endpoints[1])
    }
}

/// A whole topology: nodes and the links between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologySpec {
    /// Where it came from: the preset name or the file path.
    pub source: String,
    /// Its nodes.
    pub nodes: Vec<NodeSpec>,
    /// Its links.
    pub links: Vec<LinkSpec>,
}

impl TopologySpec {
    /// Hosts `a` and `b` joined by `routers` routers `r1`, `r2`, ... in a
    /// line (default links).
    pub fn chain(routers: usize) -> TopologySpec {
        let mut nodes = vec![NodeSpec::new("a", NodeKind::Host)];
        for i in 1..=routers {
            nodes.push(NodeSpec::new(&format!("r{i}"), NodeKind::Router));
        }
        nodes.push(NodeSpec::new("b", NodeKind::Host));
        let links = nodes
            .windows(2)
            .map(|w| LinkSpec::new(&w[0].name, &w[1].name))
            .collect();
        TopologySpec {
            source: "chain".into(),
            nodes,
            links,
        }
    }
}

/// Where a validation problem sits, so that the file loader can name a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    Node(usize, &'static str),
    Link(usize, &'static str),
    /// A value two links must share (the MTU on one switch): the first
    /// link's own line for it if the file sets it there, else the second's.
    /// One of the two is written in the file, or they would not differ.
    LinkPair(usize, usize, &'static str),
    Whole,
}

impl TopologySpec {
    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// What the node called `name` is.
    pub fn kind(&self, name: &str) -> Option<NodeKind> {
        self.node(name).map(|n| n.kind)
    }

    /// Applies overrides to every link, router and node.
    pub fn apply(&mut self, o: &LinkOpts) {
        for n in &mut self.nodes {
            if let (Some(p), NodeKind::Router) = (o.forward_pps, n.kind) {
                n.forward_pps = Some(p);
            }
            if let Some(q) = o.txqueuelen {
                n.txqueuelen = Some(q);
            }
        }
        for l in &mut self.links {
            if let Some(m) = o.mtu {
                l.mtu = m;
            }
            if let Some(r) = o.rate_bps {
                l.rate_bps = Some(r);
            }
            if let Some(off) = o.offloads {
                l.offloads = off;
            }
            if let Some(d) = o.delay_ns {
                l.impairment.get_or_insert_default().delay_ns = d;
            }
            if let Some(j) = o.jitter_ns {
                l.impairment.get_or_insert_default().jitter_ns = j;
            }
            if let Some((p, ge)) = o.loss {
                let i = l.impairment.get_or_insert_default();
                (i.loss, i.gemodel) = (p, ge);
            }
            if let Some(q) = o.queue {
                l.queue = Some(q);
            }
            if let (Some(a), Some(_)) = (o.aqm, l.rate_bps) {
                l.aqm = Some(a);
            }
            if let (Some(n), Some(_)) = (o.slack_ns, l.rate_bps) {
                l.slack_ns = Some(n);
            }
        }
    }

    /// Gives every link the same impairment (the CLI's `--delay`,
    /// `--jitter`, `--loss`, …), replacing what a file said.
    pub fn impair_all(&mut self, imp: &Impairment) {
        for l in &mut self.links {
            l.impairment = (!imp.is_none()).then_some(*imp);
        }
    }

    /// Gives every link the same queue (the CLI's `--queue`).
    pub fn queue_all(&mut self, q: QueueLimit) {
        for l in &mut self.links {
            l.queue = Some(q);
        }
    }

    /// Gives every link with a rate the same AQM (the CLI's `--aqm`).
    pub fn aqm_all(&mut self, a: AqmSpec) {
        for l in self.links.iter_mut().filter(|l| l.rate_bps.is_some()) {
            l.aqm = Some(a);
        }
    }

    /// Checks everything that can be checked without the kernel: names,
    /// references, ranges, and that every host can reach every other host
    /// through routers (hosts do not forward).
    pub fn validate(&self) -> Result<(), TestbedError> {
        self.validate_loc()
            .map_err(|(_, msg)| TestbedError::Invalid(format!("topology {}: {msg}", self.source)))
    }

    pub(crate) fn validate_loc(&self) -> Result<(), (Loc, String)> {
        if self.nodes.is_empty() {
            return Err((Loc::Whole, "no nodes".into()));
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            check_node_name(&n.name).map_err(|m| (Loc::Node(i, "name"), m))?;
            if let Some(p) = n.forward_pps {
                if n.kind != NodeKind::Router {
                    return Err((
                        Loc::Node(i, "forward_pps"),
                        format!(
                            "node `{}`: forward_pps applies to routers only (this is a {})",
                            n.name,
                            n.kind.as_str()
                        ),
                    ));
                }
                if !(FORWARD_PPS_MIN..=FORWARD_PPS_MAX).contains(&p) {
                    return Err((
                        Loc::Node(i, "forward_pps"),
                        format!(
                            "node `{}`: forward_pps {p} is outside {FORWARD_PPS_MIN}..={FORWARD_PPS_MAX} packets/s",
                            n.name
                        ),
                    ));
                }
            }
            if let Some(q) = n.txqueuelen {
                if !(TXQUEUELEN_MIN..=TXQUEUELEN_MAX).contains(&q) {
                    return Err((
                        Loc::Node(i, "txqueuelen"),
                        format!(
                            "node `{}`: txqueuelen {q} is outside {TXQUEUELEN_MIN}..={TXQUEUELEN_MAX} packets",
                            n.name
                        ),
                    ));
                }
            }
            if let Some(j) = seen.insert(n.name.to_ascii_lowercase(), i) {
                return Err((
                    Loc::Node(i, "name"),
                    format!(
                        "duplicate node name `{}` (also node {})",
                        n.name, self.nodes[j].name
                    ),
                ));
            }
        }
        if self.links.is_empty() {
            return Err((Loc::Whole, "no links".into()));
        }
        if self.links.len() > 250 {
            return Err((Loc::Whole, "more than 250 links".into()));
        }
        for (i, l) in self.links.iter().enumerate() {
            for e in &l.endpoints {
                if self.node(e).is_none() {
                    return Err((
                        Loc::Link(i, "endpoints"),
                        format!("link {} names node `{e}`, which is not defined", l.label()),
                    ));
                }
            }
            if l.endpoints[0] == l.endpoints[1] {
                return Err((
                    Loc::Link(i, "endpoints"),
                    format!("link {} connects a node to itself", l.label()),
                ));
            }
            if !(MTU_MIN..=MTU_MAX).contains(&l.mtu) {
                return Err((
                    Loc::Link(i, "mtu"),
                    format!(
                        "link {}: MTU {} is outside {MTU_MIN}..={MTU_MAX}",
                        l.label(),
                        l.mtu
                    ),
                ));
            }
            if let Some(r) = l.rate_bps {
                if !(RATE_MIN..=RATE_MAX).contains(&r) {
                    return Err((
                        Loc::Link(i, "rate"),
                        format!(
                            "link {}: rate {r} bit/s is outside {RATE_MIN}..={RATE_MAX} bit/s",
                            l.label()
                        ),
                    ));
                }
            }
            if let Some(imp) = &l.impairment {
                imp.check()
                    .map_err(|(f, m)| (Loc::Link(i, f), format!("link {}: {m}", l.label())))?;
            }
            if l.trace.is_some() {
                let why = if l.rate_bps.is_some() {
                    Some(("rate", "a trace link's capacity is its trace; drop `rate`"))
                } else if l.offloads {
                    Some((
                        "offloads",
                        "a trace link runs in the user-space emulator, which carries frames, not GSO super-packets; set offloads = false",
                    ))
                } else if l
                    .queue
                    .is_some_and(|q| !matches!(q, QueueLimit::Packets(_)))
                {
                    Some((
                        "queue",
                        "a trace link's queue is counted in packets (\"100p\")",
                    ))
                } else {
                    None
                };
                if let Some((f, m)) = why {
                    return Err((Loc::Link(i, f), format!("link {}: {m}", l.label())));
                }
            }
            let paced = l.rate_bps.is_some() || l.trace.is_some();
            if l.aqm.is_some() && !paced {
                return Err((
                    Loc::Link(i, "aqm"),
                    format!(
                        "link {}: an aqm manages the queue behind a rate; give the link a rate or a trace",
                        l.label()
                    ),
                ));
            }
            if l.queue.is_some() && !paced {
                return Err((
                    Loc::Link(i, "queue"),
                    format!(
                        "link {}: a queue fills only behind a rate; give the link a rate or a trace",
                        l.label()
                    ),
                ));
            }
        }
        // A bridged segment has one MTU: a bridge silently drops frames larger
        // than the egress port's MTU, which would black-hole path MTU discovery.
        let mut switch_mtu: BTreeMap<&str, (u32, usize)> = BTreeMap::new();
        for (i, l) in self.links.iter().enumerate() {
            for e in &l.endpoints {
                if self.kind(e) == Some(NodeKind::Switch) {
                    if let Some(&(m, j)) = switch_mtu.get(e.as_str()) {
                        if m != l.mtu {
                            return Err((
                                Loc::LinkPair(i, j, "mtu"),
                                format!(
                                    "link {}: MTU {} differs from MTU {m} of link {} on switch `{e}`; a bridged segment has one MTU",
                                    l.label(),
                                    l.mtu,
                                    self.links[j].label()
                                ),
                            ));
                        }
                    } else {
                        switch_mtu.insert(e.as_str(), (l.mtu, i));
                    }
                }
            }
        }
        // Per node, at most 64 links (interface names eth0..eth63).
        let mut degree: BTreeMap<&str, usize> = BTreeMap::new();
        for l in &self.links {
            for e in &l.endpoints {
                *degree.entry(e.as_str()).or_default() += 1;
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            match degree.get(n.name.as_str()) {
                None => {
                    return Err((
                        Loc::Node(i, "name"),
                        format!("node `{}` has no link", n.name),
                    ))
                }
                Some(&d) if d > 64 => {
                    return Err((
                        Loc::Node(i, "name"),
                        format!("node `{}` has more than 64 links", n.name),
                    ))
                }
                _ => {}
            }
        }
        let hosts: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].kind == NodeKind::Host)
            .collect();
        if hosts.is_empty() {
            return Err((Loc::Whole, "no host (kind = \"host\")".into()));
        }
        // Reachability: from the first host, walk through switches and routers
        // (never through another host) and require every node to be seen.
        let idx: BTreeMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for l in &self.links {
            let (a, b) = (idx[l.endpoints[0].as_str()], idx[l.endpoints[1].as_str()]);
            adj[a].push(b);
            adj[b].push(a);
        }
        let start = hosts[0];
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![start];
        seen[start] = true;
        while let Some(u) = stack.pop() {
            if u != start && self.nodes[u].kind == NodeKind::Host {
                continue;
            }
            for &v in &adj[u] {
                if !seen[v] {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
        if let Some(i) = (0..self.nodes.len()).find(|&i| !seen[i]) {
            return Err((
                Loc::Node(i, "name"),
                format!(
                    "topology is disconnected: node `{}` cannot be reached from host `{}` (hosts do not forward; put a router between)",
                    self.nodes[i].name, self.nodes[start].name
                ),
            ));
        }
        self.check_path_lengths(&hosts, &adj)
    }

    /// Every host must reach every other through at most
    /// [`MAX_ROUTERS_ON_PATH`] routers: beyond, the default TTL runs out and
    /// the test-bed that was built cannot carry traffic (a 250-link chain
    /// was built, then `check` failed).
    fn check_path_lengths(&self, hosts: &[usize], adj: &[Vec<usize>]) -> Result<(), (Loc, String)> {
        let n = self.nodes.len();
        for &h in hosts {
            // 0-1 breadth-first search: entering a router costs one hop,
            // a switch none; hosts end a path.
            let mut cost = vec![usize::MAX; n];
            let mut queue = std::collections::VecDeque::from([h]);
            cost[h] = 0;
            while let Some(u) = queue.pop_front() {
                if u != h && self.nodes[u].kind == NodeKind::Host {
                    continue;
                }
                for &v in &adj[u] {
                    let step = usize::from(self.nodes[v].kind == NodeKind::Router);
                    if cost[u] + step < cost[v] {
                        cost[v] = cost[u] + step;
                        if step == 0 {
                            queue.push_front(v);
                        } else {
                            queue.push_back(v);
                        }
                    }
                }
            }
            if let Some(&far) = hosts
                .iter()
                .find(|&&o| cost[o] != usize::MAX && cost[o] > MAX_ROUTERS_ON_PATH)
            {
                return Err((
                    Loc::Whole,
                    format!(
                        "host `{}` reaches host `{}` through {} routers; at most {MAX_ROUTERS_ON_PATH} (each router takes one of the 64 hops of the default IP TTL)",
                        self.nodes[h].name, self.nodes[far].name, cost[far]
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Most routers between two hosts: Linux sends with TTL (hop limit) 64, and
/// each router decrements it.
pub const MAX_ROUTERS_ON_PATH: usize = 63;

/// Node names: letters, digits and `-`, starting with a letter (they become
/// host names and part of namespace names).
fn check_node_name(n: &str) -> Result<(), String> {
    if n.is_empty() || n.len() > NODE_NAME_MAX {
        return Err(format!(
            "node name `{n}` must be 1..={NODE_NAME_MAX} characters"
        ));
    }
    let mut chars = n.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') || n.ends_with('-') {
        return Err(format!(
            "node name `{n}`: use letters, digits and `-`, starting with a letter"
        ));
    }
    Ok(())
}

/// Test-bed names: 1..=12 lowercase letters or digits (no `-`, so that the
/// namespace prefix `wb-<name>-` of one test-bed is never a prefix of another's).
pub fn check_testbed_name(n: &str) -> Result<(), TestbedError> {
    if n.is_empty()
        || n.len() > 12
        || !n
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Err(TestbedError::Invalid(format!(
            "test-bed name `{n}`: use 1 to 12 lowercase letters or digits"
        )));
    }
    Ok(())
}

/// The built-in topologies: `direct` (a — b), `router` (a — r1 — b),
/// `two-routers` (a — r1 — r2 — b). Every link 1500 B, no rate limit,
/// offloads off, unless overridden.
pub fn preset(name: &str, o: &LinkOpts) -> Result<TopologySpec, TestbedError> {
    let chain: &[(&str, NodeKind)] = match name {
        "direct" => &[("a", NodeKind::Host), ("b", NodeKind::Host)],
        "router" => &[
            ("a", NodeKind::Host),
            ("r1", NodeKind::Router),
            ("b", NodeKind::Host),
        ],
        "two-routers" => &[
            ("a", NodeKind::Host),
            ("r1", NodeKind::Router),
            ("r2", NodeKind::Router),
            ("b", NodeKind::Host),
        ],
        _ => {
            return Err(TestbedError::Invalid(format!(
                "unknown preset `{name}` (presets: {}; or give a .toml topology file)",
                PRESETS.join(", ")
            )))
        }
    };
    let nodes = chain.iter().map(|(n, k)| NodeSpec::new(n, *k)).collect();
    let links = chain
        .windows(2)
        .map(|w| LinkSpec::new(w[0].0, w[1].0))
        .collect();
    let mut spec = TopologySpec {
        source: name.to_string(),
        nodes,
        links,
    };
    spec.apply(o);
    spec.validate()?;
    Ok(spec)
}

/// Names accepted by [`preset`].
pub const PRESETS: &[&str] = &["direct", "router", "two-routers"];

/// Parses a link rate into bits per second: `100mbit`, `1gbit`, `10Mbit/s`,
/// `1.5gbit`, `500kbit`, `1000000` (bit/s), `100M`. Decimal prefixes (k = 1000);
/// `kibit`/`mibit`/`gibit` are binary. `mbps` is refused: tc reads it as
/// megabytes per second and people mean megabits.
pub fn parse_rate(s: &str) -> Result<u64, TestbedError> {
    let bad = |why: &str| {
        TestbedError::Invalid(format!(
            "rate `{s}`: {why} (examples: 100mbit, 1gbit, 10Mbit/s, 500kbit)"
        ))
    };
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("/s").unwrap_or(&t);
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    if num.is_empty() {
        return Err(bad("no number"));
    }
    let value: f64 = num.parse().map_err(|_| bad("not a number"))?;
    if unit.ends_with("bps") || unit.ends_with("byte") || unit.ends_with('b') && unit != "b" {
        return Err(bad(
            "ambiguous unit (tc reads `mbps` as megabytes/s); write bits, e.g. `mbit`",
        ));
    }
    let mult: f64 = match unit {
        "" | "bit" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        "t" | "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad("unknown unit")),
    };
    let bps = value * mult;
    if !bps.is_finite() || bps < RATE_MIN as f64 || bps > RATE_MAX as f64 {
        return Err(bad(&format!("out of range {RATE_MIN}..={RATE_MAX} bit/s")));
    }
    Ok(bps.round() as u64)
}

/// Formats bits per second the way tc and people read it: `100mbit`, `1.5gbit`.
pub fn format_rate(bps: u64) -> String {
    for (m, u) in [(1e12, "tbit"), (1e9, "gbit"), (1e6, "mbit"), (1e3, "kbit")] {
        let v = bps as f64 / m;
        if v >= 1.0 {
            let s = format!("{v:.3}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{u}");
        }
    }
    format!("{bps}bit")
}

/// Parses a duration: `10ms`, `250us`, `1s`, `0.5ms`.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 10ms, 250us)"))?;
    let mult = match unit.trim() {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("`{s}`: unit must be ns, us, ms or s")),
    };
    let ns = v * mult;
    if !ns.is_finite() || !(0.0..=60e9).contains(&ns) {
        return Err(format!("`{s}` is out of range 0..60s"));
    }
    Ok(ns.round() as u64)
}

fn parse_loss(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, pct) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (t, false),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a loss (e.g. \"0.5%\")"))?;
    let p = if pct { v / 100.0 } else { v };
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("`{s}` is outside 0..100 %"));
    }
    Ok(p)
}

// ---------------------------------------------------------------- TOML file

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: Option<RawLinkSettings>,
    #[serde(default)]
    node: Vec<RawNode>,
    #[serde(default)]
    link: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: toml::Spanned<String>,
    kind: toml::Spanned<String>,
    forward_pps: Option<toml::Spanned<i64>>,
    txqueuelen: Option<toml::Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLinkSettings {
    mtu: Option<toml::Spanned<i64>>,
    rate: Option<toml::Spanned<toml::Value>>,
    offloads: Option<toml::Spanned<bool>>,
    delay: Option<toml::Spanned<String>>,
    jitter: Option<toml::Spanned<String>>,
    loss: Option<toml::Spanned<toml::Value>>,
    distribution: Option<toml::Spanned<String>>,
    reorder: Option<toml::Spanned<toml::Value>>,
    duplicate: Option<toml::Spanned<toml::Value>>,
    corrupt: Option<toml::Spanned<toml::Value>>,
    queue: Option<toml::Spanned<String>>,
    aqm: Option<toml::Spanned<String>>,
    trace: Option<toml::Spanned<toml::Value>>,
    slack: Option<toml::Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    endpoints: toml::Spanned<Vec<String>>,
    mtu: Option<toml::Spanned<i64>>,
    rate: Option<toml::Spanned<toml::Value>>,
    offloads: Option<toml::Spanned<bool>>,
    delay: Option<toml::Spanned<String>>,
    jitter: Option<toml::Spanned<String>>,
    loss: Option<toml::Spanned<toml::Value>>,
    distribution: Option<toml::Spanned<String>>,
    reorder: Option<toml::Spanned<toml::Value>>,
    duplicate: Option<toml::Spanned<toml::Value>>,
    corrupt: Option<toml::Spanned<toml::Value>>,
    queue: Option<toml::Spanned<String>>,
    aqm: Option<toml::Spanned<String>>,
    trace: Option<toml::Spanned<toml::Value>>,
    slack: Option<toml::Spanned<String>>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Loads a TOML topology file (format in docs/testbed.md), then applies the
/// overrides to every link. Errors name the file, line and field.
pub fn load_file(path: &Path, o: &LinkOpts) -> Result<TopologySpec, TestbedError> {
    let text = wirebench_input::read_text(path)
        .map_err(|e| TestbedError::Invalid(format!("topology file {e}")))?;
    parse_topology(&text, path, o)
}

/// [`load_file`] on text already read; `path` is only used in messages.
pub fn parse_topology(text: &str, path: &Path, o: &LinkOpts) -> Result<TopologySpec, TestbedError> {
    let ferr = |off: usize, field: &str, msg: String| TestbedError::File {
        path: path.to_path_buf(),
        line: line_of(text, off),
        field: field.to_string(),
        msg,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let off = e.span().map(|s| s.start).unwrap_or(0);
        let msg = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        // toml's message is empty for a lone "\r".
        let msg = if msg.is_empty() {
            "not valid TOML".to_string()
        } else {
            msg
        };
        // serde names the field for unknown/missing ones; otherwise the key
        // written on the offending line is the field.
        let field = backticked(&msg)
            .filter(|_| msg.contains("field"))
            .or_else(|| key_on_line(text, off))
            .unwrap_or_else(|| line_text(text, off));
        ferr(off, &field, msg)
    })?;

    let mut spec = TopologySpec {
        source: path.display().to_string(),
        nodes: Vec::new(),
        links: Vec::new(),
    };
    let mut node_spans = Vec::new();
    for n in &raw.node {
        let kind = match n.kind.get_ref().as_str() {
            "host" => NodeKind::Host,
            "router" => NodeKind::Router,
            "switch" => NodeKind::Switch,
            other => {
                return Err(ferr(
                    n.kind.span().start,
                    "kind",
                    format!("unknown node kind `{other}` (host, router or switch)"),
                ))
            }
        };
        let mut node = NodeSpec::new(n.name.get_ref(), kind);
        let mut spans = BTreeMap::new();
        spans.insert("name", n.name.span().start);
        spans.insert("kind", n.kind.span().start);
        if let Some(p) = &n.forward_pps {
            spans.insert("forward_pps", p.span().start);
            let v = *p.get_ref();
            if !(FORWARD_PPS_MIN as i64..=FORWARD_PPS_MAX as i64).contains(&v) {
                return Err(ferr(
                    p.span().start,
                    "forward_pps",
                    format!(
                        "forward_pps {v} is outside {FORWARD_PPS_MIN}..={FORWARD_PPS_MAX} packets/s"
                    ),
                ));
            }
            node.forward_pps = Some(v as u64);
        }
        if let Some(q) = &n.txqueuelen {
            spans.insert("txqueuelen", q.span().start);
            let v = *q.get_ref();
            if !(TXQUEUELEN_MIN as i64..=TXQUEUELEN_MAX as i64).contains(&v) {
                return Err(ferr(
                    q.span().start,
                    "txqueuelen",
                    format!(
                        "txqueuelen {v} is outside {TXQUEUELEN_MIN}..={TXQUEUELEN_MAX} packets"
                    ),
                ));
            }
            node.txqueuelen = Some(v as u32);
        }
        spec.nodes.push(node);
        node_spans.push(spans);
    }
    let defaults = raw.defaults.unwrap_or_default();
    let mut link_spans: Vec<BTreeMap<&'static str, usize>> = Vec::new();
    for l in &raw.link {
        let mut spans = BTreeMap::new();
        spans.insert("endpoints", l.endpoints.span().start);
        let eps = l.endpoints.get_ref();
        if eps.len() != 2 {
            return Err(ferr(
                l.endpoints.span().start,
                "endpoints",
                format!("a link has exactly two endpoints, found {}", eps.len()),
            ));
        }
        let mut link = LinkSpec::new(&eps[0], &eps[1]);
        let settings = [RawRef::from_link(l), RawRef::from_defaults(&defaults)];
        // Per-link value first, then [defaults].
        if let Some(m) = settings.iter().find_map(|s| s.mtu) {
            spans.insert("mtu", m.span().start);
            let v = *m.get_ref();
            if !(MTU_MIN as i64..=MTU_MAX as i64).contains(&v) {
                return Err(ferr(
                    m.span().start,
                    "mtu",
                    format!("MTU {v} is outside {MTU_MIN}..={MTU_MAX}"),
                ));
            }
            link.mtu = v as u32;
        }
        if let Some(r) = settings.iter().find_map(|s| s.rate) {
            spans.insert("rate", r.span().start);
            let bps = match r.get_ref() {
                toml::Value::String(s) => parse_rate(s),
                toml::Value::Integer(i) if *i > 0 => parse_rate(&i.to_string()),
                _ => Err(TestbedError::Invalid(
                    "rate must be a string like \"100mbit\" or bits per second".into(),
                )),
            }
            .map_err(|e| ferr(r.span().start, "rate", e.to_string()))?;
            link.rate_bps = Some(bps);
        }
        if let Some(off) = settings.iter().find_map(|s| s.offloads) {
            spans.insert("offloads", off.span().start);
            link.offloads = *off.get_ref();
        }
        let mut imp = Impairment::default();
        if let Some(d) = settings.iter().find_map(|s| s.delay) {
            spans.insert("delay", d.span().start);
            imp.delay_ns =
                parse_duration_ns(d.get_ref()).map_err(|m| ferr(d.span().start, "delay", m))?;
        }
        if let Some(j) = settings.iter().find_map(|s| s.jitter) {
            spans.insert("jitter", j.span().start);
            imp.jitter_ns =
                parse_duration_ns(j.get_ref()).map_err(|m| ferr(j.span().start, "jitter", m))?;
        }
        if let Some(lo) = settings.iter().find_map(|s| s.loss) {
            spans.insert("loss", lo.span().start);
            (imp.loss, imp.gemodel) = parse_loss_spec(&value_text(lo.get_ref()))
                .map_err(|m| ferr(lo.span().start, "loss", m))?;
        }
        if let Some(d) = settings.iter().find_map(|s| s.distribution) {
            spans.insert("distribution", d.span().start);
            imp.dist =
                parse_dist(d.get_ref()).map_err(|m| ferr(d.span().start, "distribution", m))?;
        }
        for (field, value, slot) in [
            (
                "reorder",
                settings.iter().find_map(|s| s.reorder),
                &mut imp.reorder,
            ),
            (
                "duplicate",
                settings.iter().find_map(|s| s.duplicate),
                &mut imp.duplicate,
            ),
            (
                "corrupt",
                settings.iter().find_map(|s| s.corrupt),
                &mut imp.corrupt,
            ),
        ] {
            if let Some(v) = value {
                spans.insert(field, v.span().start);
                *slot = parse_loss(&value_text(v.get_ref()))
                    .map_err(|m| ferr(v.span().start, field, m))?;
            }
        }
        if let Some(q) = settings.iter().find_map(|s| s.queue) {
            spans.insert("queue", q.span().start);
            link.queue =
                Some(parse_queue(q.get_ref()).map_err(|m| ferr(q.span().start, "queue", m))?);
        }
        if let Some(q) = settings.iter().find_map(|s| s.slack) {
            spans.insert("slack", q.span().start);
            link.slack_ns =
                Some(parse_slack(q.get_ref()).map_err(|m| ferr(q.span().start, "slack", m))?);
        }
        if let Some(q) = settings.iter().find_map(|s| s.aqm) {
            spans.insert("aqm", q.span().start);
            link.aqm = Some(parse_aqm(q.get_ref()).map_err(|m| ferr(q.span().start, "aqm", m))?);
        }
        if let Some(t) = settings.iter().find_map(|s| s.trace) {
            spans.insert("trace", t.span().start);
            let at = t.span().start;
            let names: Vec<&str> = match t.get_ref() {
                toml::Value::String(s) => vec![s, s],
                toml::Value::Array(a) if a.len() == 2 => {
                    a.iter().filter_map(|v| v.as_str()).collect()
                }
                _ => vec![],
            };
            if names.len() != 2 {
                return Err(ferr(
                    at,
                    "trace",
                    "trace is a file (both directions) or two: [\"first-to-second\", \"second-to-first\"]".into(),
                ));
            }
            let dir = path.parent().unwrap_or(Path::new("."));
            let load = |n: &str| -> Result<LinkTrace, TestbedError> {
                let p = dir.join(n);
                if !p.is_file() {
                    return Err(ferr(at, "trace", format!("no trace file {}", p.display())));
                }
                LinkTrace::load(&p)
            };
            link.trace = Some(Box::new([load(names[0])?, load(names[1])?]));
        }
        if !imp.is_none() {
            link.impairment = Some(imp);
        }
        spec.links.push(link);
        link_spans.push(spans);
    }
    spec.apply(o);
    // A value the file does not write (a default, or one from the command
    // line) is pinned on its link's line by the endpoints. A pair's value
    // (the MTU on one switch) is found on either link, the first one first.
    let link_err = |i: usize, j: usize, field: &str, msg: String| match link_spans[i]
        .get(field)
        .or_else(|| link_spans[j].get(field))
    {
        Some(&off) => ferr(off, field, msg),
        None => ferr(link_spans[i]["endpoints"], "endpoints", msg),
    };
    spec.validate_loc().map_err(|(loc, msg)| match loc {
        Loc::Node(i, field) => match node_spans[i].get(field) {
            Some(&off) => ferr(off, field, msg),
            None => ferr(node_spans[i]["name"], "name", msg),
        },
        Loc::Link(i, field) => link_err(i, i, field, msg),
        Loc::LinkPair(i, j, field) => link_err(i, j, field, msg),
        Loc::Whole => TestbedError::Invalid(format!("topology file {}: {msg}", path.display())),
    })?;
    Ok(spec)
}

/// The settings of one link, borrowed from either the link or [defaults].
struct RawRef<'a> {
    mtu: Option<&'a toml::Spanned<i64>>,
    rate: Option<&'a toml::Spanned<toml::Value>>,
    offloads: Option<&'a toml::Spanned<bool>>,
    delay: Option<&'a toml::Spanned<String>>,
    jitter: Option<&'a toml::Spanned<String>>,
    loss: Option<&'a toml::Spanned<toml::Value>>,
    distribution: Option<&'a toml::Spanned<String>>,
    reorder: Option<&'a toml::Spanned<toml::Value>>,
    duplicate: Option<&'a toml::Spanned<toml::Value>>,
    corrupt: Option<&'a toml::Spanned<toml::Value>>,
    queue: Option<&'a toml::Spanned<String>>,
    aqm: Option<&'a toml::Spanned<String>>,
    trace: Option<&'a toml::Spanned<toml::Value>>,
    slack: Option<&'a toml::Spanned<String>>,
}

impl<'a> RawRef<'a> {
    fn from_link(l: &'a RawLink) -> Self {
        RawRef {
            mtu: l.mtu.as_ref(),
            rate: l.rate.as_ref(),
            offloads: l.offloads.as_ref(),
            delay: l.delay.as_ref(),
            jitter: l.jitter.as_ref(),
            loss: l.loss.as_ref(),
            distribution: l.distribution.as_ref(),
            reorder: l.reorder.as_ref(),
            duplicate: l.duplicate.as_ref(),
            corrupt: l.corrupt.as_ref(),
            queue: l.queue.as_ref(),
            aqm: l.aqm.as_ref(),
            trace: l.trace.as_ref(),
            slack: l.slack.as_ref(),
        }
    }
    fn from_defaults(l: &'a RawLinkSettings) -> Self {
        RawRef {
            mtu: l.mtu.as_ref(),
            rate: l.rate.as_ref(),
            offloads: l.offloads.as_ref(),
            delay: l.delay.as_ref(),
            jitter: l.jitter.as_ref(),
            loss: l.loss.as_ref(),
            distribution: l.distribution.as_ref(),
            reorder: l.reorder.as_ref(),
            duplicate: l.duplicate.as_ref(),
            corrupt: l.corrupt.as_ref(),
            queue: l.queue.as_ref(),
            aqm: l.aqm.as_ref(),
            trace: l.trace.as_ref(),
            slack: l.slack.as_ref(),
        }
    }
}

/// A probability written as a string (`"1%"`) or a number (`0.01`).
fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn backticked(msg: &str) -> Option<String> {
    let a = msg.find('`')?;
    let b = msg[a + 1..].find('`')?;
    Some(msg[a + 1..a + 1 + b].to_string())
}

/// The (trimmed) text of the line holding byte `off`, for syntax errors
/// that are not about one key; a line of only blanks or control
/// characters is shown escaped, so the message never names an empty field.
fn line_text(text: &str, off: usize) -> String {
    let off = off.min(text.len());
    let start = text[..off].rfind('\n').map(|p| p + 1).unwrap_or(0);
    let end = text[off..]
        .find('\n')
        .map(|p| off + p)
        .unwrap_or(text.len());
    let line = text[start..end].trim();
    if !line.is_empty() {
        return line.to_string();
    }
    let escaped = text[start..end].escape_debug().to_string();
    if escaped.is_empty() {
        "(empty line)".to_string()
    } else {
        escaped
    }
}

fn key_on_line(text: &str, off: usize) -> Option<String> {
    let off = off.min(text.len());
    let start = text[..off].rfind('\n').map(|p| p + 1).unwrap_or(0);
    let end = text[off..]
        .find('\n')
        .map(|p| off + p)
        .unwrap_or(text.len());
    let line = &text[start..end];
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty()).then(|| key.to_string())
}

/// All node names of a kind, in definition order.
pub(crate) fn names_of(spec: &TopologySpec, kind: NodeKind) -> Vec<String> {
    spec.nodes
        .iter()
        .filter(|n| n.kind == kind)
        .map(|n| n.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("10Mbit/s").unwrap(), 10_000_000);
        assert_eq!(parse_rate("1.5gbit").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("500kbit").unwrap(), 500_000);
        assert_eq!(parse_rate("100M").unwrap(), 100_000_000);
        assert_eq!(parse_rate("64000").unwrap(), 64_000);
        assert!(parse_rate("100mbps").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("1000gbit").is_err());
        assert_eq!(format_rate(100_000_000), "100mbit");
        assert_eq!(format_rate(1_500_000_000), "1.5gbit");
    }

    #[test]
    fn presets_and_overrides() {
        let o = LinkOpts {
            mtu: Some(9000),
            rate_bps: Some(1_000_000_000),
            offloads: Some(true),
            ..Default::default()
        };
        let s = preset("two-routers", &o).unwrap();
        assert_eq!(s.nodes.len(), 4);
        assert_eq!(s.links.len(), 3);
        assert!(s
            .links
            .iter()
            .all(|l| l.mtu == 9000 && l.rate_bps == Some(1_000_000_000) && l.offloads));
        let d = preset("direct", &LinkOpts::default()).unwrap();
        assert_eq!(d.links[0].mtu, 1500);
        assert!(!d.links[0].offloads);
        assert!(preset("ring", &LinkOpts::default()).is_err());
        let bad = LinkOpts {
            mtu: Some(67),
            ..Default::default()
        };
        assert!(preset("router", &bad).is_err());
    }

    fn parse(t: &str) -> Result<TopologySpec, TestbedError> {
        parse_topology(t, Path::new("t.toml"), &LinkOpts::default())
    }

    fn file_err(t: &str) -> (usize, String) {
        match parse(t) {
            Err(TestbedError::File { line, field, .. }) => (line, field),
            other => panic!("expected a file error, got {other:?}"),
        }
    }

    const GOOD: &str = r#"
[defaults]
mtu = 9000

[[node]]
name = "a"
kind = "host"
[[node]]
name = "s1"
kind = "switch"
[[node]]
name = "b"
kind = "host"
[[node]]
name = "r1"
kind = "router"
[[node]]
name = "c"
kind = "host"

[[link]]
endpoints = ["a", "s1"]
[[link]]
endpoints = ["b", "s1"]
rate = "100mbit"
[[link]]
endpoints = ["s1", "r1"]
[[link]]
endpoints = ["r1", "c"]
mtu = 1500
offloads = true
"#;

    #[test]
    fn good_file() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.nodes.len(), 5);
        assert_eq!(s.links[0].mtu, 9000);
        assert_eq!(s.links[1].rate_bps, Some(100_000_000));
        assert_eq!(s.links[3].mtu, 1500);
        assert!(s.links[3].offloads);
        let s = parse_topology(
            GOOD,
            Path::new("t"),
            &LinkOpts {
                mtu: Some(4000),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(s.links.iter().all(|l| l.mtu == 4000));
    }

    #[test]
    fn file_errors_name_line_and_field() {
        let t = GOOD.replace("mtu = 1500", "mtu = 70000");
        assert_eq!(file_err(&t), (30, "mtu".into()));
        let t = GOOD.replace("rate = \"100mbit\"", "rate = \"fast\"");
        assert_eq!(file_err(&t), (25, "rate".into()));
        let t = GOOD.replace("kind = \"router\"", "kind = \"hub\"");
        assert_eq!(file_err(&t), (16, "kind".into()));
        let t = GOOD.replace("endpoints = [\"r1\", \"c\"]", "endpoints = [\"r1\", \"x\"]");
        assert_eq!(file_err(&t), (29, "endpoints".into()));
        let t = GOOD.replace("name = \"c\"", "name = \"a\"");
        assert_eq!(file_err(&t), (18, "name".into()));
        let t = GOOD.replace("offloads = true", "offload = true");
        assert_eq!(file_err(&t), (31, "offload".into()));
        let t = GOOD.replace("mtu = 1500", "mtu = \"big\"");
        assert_eq!(file_err(&t), (30, "mtu".into()));
        // c's only link removed: disconnected
        let t = GOOD.replace(
            "endpoints = [\"r1\", \"c\"]\nmtu = 1500",
            "endpoints = [\"r1\", \"s1\"]\nmtu = 9000",
        );
        assert_eq!(file_err(&t), (18, "name".into()));
        let t = GOOD.replace("[[node]]\nname = \"r1\"", "[[node]]\nnam = \"r1\"");
        assert_eq!(file_err(&t).1, "nam");
    }

    /// Two links on one switch with different MTUs: the error points at an
    /// `mtu` the file writes, whichever of the two links writes it, and never
    /// names a field that is not on the line it points at.
    #[test]
    fn switch_mtu_conflict_points_at_a_written_mtu() {
        let line_of = |t: &str, s: &str| t.lines().position(|l| l == s).unwrap() + 1;
        let base = GOOD.replace("[defaults]\nmtu = 9000\n", "");
        // The second link on s1 writes the odd MTU.
        let t = base.replace("rate = \"100mbit\"", "mtu = 4000");
        assert_eq!(file_err(&t), (line_of(&t, "mtu = 4000"), "mtu".into()));
        // The first writes it and the second keeps the default: still that line.
        let t = base.replace(
            "endpoints = [\"a\", \"s1\"]",
            "endpoints = [\"a\", \"s1\"]\nmtu = 4000",
        );
        assert_eq!(file_err(&t), (line_of(&t, "mtu = 4000"), "mtu".into()));
        // An MTU from the command line conflicts with none: all links take it.
        let s = parse_topology(
            &t,
            Path::new("t.toml"),
            &LinkOpts {
                mtu: Some(1500),
                ..Default::default()
            },
        );
        assert!(s.is_ok(), "{s:?}");
    }

    #[test]
    fn forward_pps_and_txqueuelen() {
        let t = GOOD.replace(
            "name = \"r1\"\nkind = \"router\"",
            "name = \"r1\"\nkind = \"router\"\nforward_pps = 29000\ntxqueuelen = 500",
        );
        let s = parse(&t).unwrap();
        let r1 = s.node("r1").unwrap();
        assert_eq!((r1.forward_pps, r1.queue_len()), (Some(29000), 500));
        assert_eq!(s.node("a").unwrap().queue_len(), DEFAULT_TXQUEUELEN);
        // Only routers forward; the line of the key is named.
        let t = GOOD.replacen(
            "name = \"a\"\nkind = \"host\"",
            "name = \"a\"\nkind = \"host\"\nforward_pps = 1000",
            1,
        );
        assert_eq!(file_err(&t), (8, "forward_pps".into()));
        let t = GOOD.replace("kind = \"router\"", "kind = \"router\"\nforward_pps = 0");
        assert_eq!(file_err(&t), (17, "forward_pps".into()));
        let t = GOOD.replace("kind = \"router\"", "kind = \"router\"\ntxqueuelen = -1");
        assert_eq!(file_err(&t), (17, "txqueuelen".into()));
        // Overrides: the cap goes to routers only, the queue to every node.
        let o = LinkOpts {
            forward_pps: Some(29000),
            txqueuelen: Some(100),
            ..Default::default()
        };
        let s = preset("two-routers", &o).unwrap();
        let caps: Vec<Option<u64>> = s.nodes.iter().map(|n| n.forward_pps).collect();
        assert_eq!(caps, [None, Some(29000), Some(29000), None]);
        assert!(s.nodes.iter().all(|n| n.queue_len() == 100));
        let bad = LinkOpts {
            forward_pps: Some(FORWARD_PPS_MAX + 1),
            ..Default::default()
        };
        assert!(preset("router", &bad).is_err());
    }

    /// `trace` in a file: one file for both directions or one each,
    /// relative to the topology file; a bad line is named by trace file
    /// and line, a missing file by the topology's line.
    #[test]
    fn trace_settings() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("up.trace"), "1\n1\n2\n4\n").unwrap();
        std::fs::write(dir.path().join("down.trace"), "5\n10\n").unwrap();
        std::fs::write(dir.path().join("bad.trace"), "1\n2\nx3\n").unwrap();
        std::fs::write(dir.path().join("back.trace"), "1\n5\n4\n").unwrap();
        std::fs::write(dir.path().join("zero.trace"), "0\n0\n").unwrap();
        std::fs::write(dir.path().join("empty.trace"), "").unwrap();
        let topo = dir.path().join("t.toml");
        let parse_at = |t: &str| parse_topology(t, &topo, &LinkOpts::default());
        let t = GOOD.replace(
            "mtu = 1500\noffloads = true",
            "mtu = 1500\ntrace = [\"up.trace\", \"down.trace\"]\naqm = \"codel\"\nqueue = \"100p\"",
        );
        let s = parse_at(&t).unwrap();
        let tr = s.links[3].trace.as_ref().unwrap();
        assert_eq!(tr[0].ms, [1, 1, 2, 4]);
        assert_eq!(tr[1].ms, [5, 10]);
        // 4 opportunities of 1500 B per 4 ms: 12 Mbit/s; 2 per 10 ms.
        assert_eq!(tr[0].mean_bps(), 12e6);
        assert_eq!(tr[1].mean_bps(), 2.4e6);
        let one = t.replace("[\"up.trace\", \"down.trace\"]", "\"up.trace\"");
        let s = parse_at(&one).unwrap();
        assert_eq!(s.links[3].trace.as_ref().unwrap()[1].ms, [1, 1, 2, 4]);
        for (file, line) in [
            ("bad.trace", 3),
            ("back.trace", 3),
            ("zero.trace", 2),
            ("empty.trace", 1),
        ] {
            match parse_at(&one.replace("up.trace", file)) {
                Err(e @ TestbedError::Trace { .. }) => {
                    let TestbedError::Trace {
                        line: l, ref path, ..
                    } = e
                    else {
                        unreachable!()
                    };
                    assert_eq!((l, path.file_name().unwrap().to_str()), (line, Some(file)));
                    assert!(e.is_bad_input());
                }
                other => panic!("{file}: {other:?}"),
            }
        }
        let line = |t: &str, s: &str| t.lines().position(|l| l == s).unwrap() + 1;
        let missing = one.replace("up.trace", "nowhere.trace");
        match parse_at(&missing) {
            Err(TestbedError::File { line: l, field, .. }) => {
                assert_eq!(
                    (l, field.as_str()),
                    (line(&missing, "trace = \"nowhere.trace\""), "trace")
                )
            }
            other => panic!("{other:?}"),
        }
        // A trace is the link's capacity: no rate beside it, a queue in
        // packets, no offloads.
        for (extra, field) in [
            ("\nrate = \"10mbit\"", "rate"),
            ("\noffloads = true", "offloads"),
        ] {
            let b = one.replace("queue = \"100p\"", &format!("queue = \"100p\"{extra}"));
            match parse_at(&b) {
                Err(TestbedError::File { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{extra}: {other:?}"),
            }
        }
        match parse_at(&one.replace("queue = \"100p\"", "queue = \"20ms\"")) {
            Err(TestbedError::File { field, .. }) => assert_eq!(field, "queue"),
            other => panic!("{other:?}"),
        }
    }

    /// `aqm` in a file: parameters parsed and printed back, bad ones named
    /// with their line.
    #[test]
    fn aqm_settings() {
        let t = GOOD.replace(
            "mtu = 1500\noffloads = true",
            "mtu = 1500\nrate = \"10mbit\"\naqm = \"fq_codel target 2ms flows 64\"",
        );
        let s = parse(&t).unwrap();
        let a = s.links[3].aqm.unwrap();
        assert_eq!(
            a,
            AqmSpec {
                kind: AqmKind::FqCodel,
                target_ns: 2_000_000,
                interval_ns: 100_000_000,
                quantum: 1514,
                flows: 64,
            }
        );
        assert_eq!(parse_aqm(&a.as_text()), Ok(a));
        let c = parse_aqm("codel").unwrap();
        assert_eq!(
            (c.target_ns, c.interval_ns, c.flows),
            (5_000_000, 100_000_000, 1)
        );
        assert_eq!(parse_aqm(&c.as_text()), Ok(c));
        for bad in [
            "red",
            "codel flows 4",
            "codel target",
            "codel target 5 parsecs",
            "fq_codel quantum 10",
            "codel target 200ms interval 100ms",
            "codel target 0ms",
        ] {
            assert!(parse_aqm(bad).is_err(), "{bad}");
        }
        let line = |t: &str, s: &str| t.lines().position(|l| l == s).unwrap() + 1;
        let b = t.replace("flows 64", "flows 0");
        assert_eq!(
            file_err(&b),
            (
                line(&b, "aqm = \"fq_codel target 2ms flows 0\""),
                "aqm".into()
            )
        );
        // An aqm manages the queue behind a rate.
        let b = t.replace("rate = \"10mbit\"\n", "");
        assert_eq!(file_err(&b).1, "aqm");
    }

    /// `slack` from a link or from [defaults], the per-link value first;
    /// one out of range is named with its line; the CLI's override reaches
    /// rated links only.
    #[test]
    fn slack_settings() {
        let t = GOOD
            .replace(
                "mtu = 9000
",
                "mtu = 9000
slack = \"50us\"
",
            )
            .replace(
                "mtu = 1500\noffloads = true",
                "mtu = 1500\nrate = \"10mbit\"\nslack = \"5us\"",
            );
        let s = parse(&t).unwrap();
        assert_eq!(s.links[3].slack_ns, Some(5_000));
        assert_eq!(s.links[0].slack_ns, Some(50_000));
        assert_eq!(parse_slack("1ms"), Ok(1_000_000));
        for bad in ["0us", "500ns", "2ms", "fast"] {
            assert!(parse_slack(bad).is_err(), "{bad}");
        }
        let line = |t: &str, s: &str| t.lines().position(|l| l == s).unwrap() + 1;
        let b = t.replace("slack = \"5us\"", "slack = \"5s\"");
        assert_eq!(file_err(&b), (line(&b, "slack = \"5s\""), "slack".into()));
        let mut c = parse(GOOD).unwrap();
        c.apply(&LinkOpts {
            slack_ns: Some(7_000),
            ..LinkOpts::default()
        });
        let got: Vec<_> = c.links.iter().map(|l| l.slack_ns).collect();
        assert_eq!(got, [None, Some(7_000), None, None]);
    }

    /// Impairments and queues in a file: every field parsed, bad values
    /// named with their line, and the laws' parameters kept.
    #[test]
    fn impairments_and_queues() {
        let t = GOOD.replace(
            "mtu = 1500\noffloads = true",
            "mtu = 1500\ndelay = \"20ms\"\njitter = \"2ms\"\ndistribution = \"pareto\"\nloss = \"gemodel 1% 25% 90%\"\nreorder = \"1%\"\nduplicate = 0.001\ncorrupt = \"0.01%\"\nrate = \"10mbit\"\nqueue = \"20ms\"",
        );
        let s = parse(&t).unwrap();
        let l = &s.links[3];
        let i = l.impairment.unwrap();
        assert_eq!((i.delay_ns, i.jitter_ns), (20_000_000, 2_000_000));
        assert_eq!(i.dist, JitterDist::Pareto);
        assert_eq!(
            i.gemodel,
            Some(GeModel {
                p: 0.01,
                r: 0.25,
                loss_bad: 0.9,
                loss_good: 0.0
            })
        );
        assert_eq!((i.reorder, i.duplicate, i.corrupt), (0.01, 0.001, 0.0001));
        assert_eq!(l.queue, Some(QueueLimit::Time(20_000_000)));
        // 20 ms at 10 Mbit/s is 25 000 B.
        assert_eq!(l.queue.unwrap().bytes_at(l.rate_bps), Some(25_000));
        assert_eq!(parse_queue("1000p"), Ok(QueueLimit::Packets(1000)));
        assert_eq!(parse_queue("256KiB"), Ok(QueueLimit::Bytes(262_144)));
        assert_eq!(parse_queue("64kb"), Ok(QueueLimit::Bytes(64_000)));
        for bad in ["0p", "lots", "10", "0ms", "1b"] {
            assert!(parse_queue(bad).is_err(), "{bad}");
        }
        let line = |t: &str, s: &str| t.lines().position(|l| l == s).unwrap() + 1;
        for (from, to, field) in [
            ("queue = \"20ms\"", "queue = \"20 parsecs\"", "queue"),
            (
                "distribution = \"pareto\"",
                "distribution = \"cauchy\"",
                "distribution",
            ),
            ("reorder = \"1%\"", "reorder = \"150%\"", "reorder"),
            (
                "loss = \"gemodel 1% 25% 90%\"",
                "loss = \"gemodel 1%\"",
                "loss",
            ),
            (
                "loss = \"gemodel 1% 25% 90%\"",
                "loss = \"gemodel 1% 0%\"",
                "loss",
            ),
        ] {
            let b = t.replace(from, to);
            assert_eq!(file_err(&b), (line(&b, to), field.to_string()), "{to}");
        }
        // Rules across fields: jitter and reorder need a delay, a queue a rate.
        let b = t.replace("delay = \"20ms\"\n", "");
        assert_eq!(file_err(&b).1, "jitter");
        let b = t
            .replace("delay = \"20ms\"\n", "")
            .replace("jitter = \"2ms\"\n", "");
        assert_eq!(file_err(&b).1, "reorder");
        let b = t.replace("rate = \"10mbit\"\n", "");
        assert_eq!(file_err(&b).1, "queue");
        // Random loss and gemodel at once is refused.
        let mut imp = i;
        imp.loss = 0.01;
        assert_eq!(imp.check().unwrap_err().0, "loss");
        // netem gets the same knobs where it is the backend.
        assert_eq!(
            i.netem_line(),
            "netem limit 100000 delay 20000us 2000us distribution pareto loss gemodel 1% 25% 90% 0% duplicate 0.1% corrupt 0.01% reorder 1%"
        );
    }

    #[test]
    fn hosts_do_not_forward() {
        let t = r#"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "m"
kind = "host"
[[node]]
name = "b"
kind = "host"
[[link]]
endpoints = ["a", "m"]
[[link]]
endpoints = ["m", "b"]
"#;
        let (line, field) = file_err(t);
        assert_eq!((line, field.as_str()), (9, "name"));
    }

    #[test]
    fn testbed_names() {
        assert!(check_testbed_name("wb").is_ok());
        assert!(check_testbed_name("t1").is_ok());
        assert!(check_testbed_name("a-b").is_err());
        assert!(check_testbed_name("").is_err());
        assert!(check_testbed_name("abcdefghijklm").is_err());
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    /// A chain longer than the TTL is refused before anything is
    /// created, naming the limit.
    #[test]
    fn paths_longer_than_the_ttl_are_refused() {
        let chain = TopologySpec::chain;
        chain(MAX_ROUTERS_ON_PATH).validate().unwrap();
        let e = chain(MAX_ROUTERS_ON_PATH + 1).validate().unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("host `a` reaches host `b` through 64 routers; at most 63"),
            "{m}"
        );
        assert!(chain(249).validate().is_err());
    }
}
