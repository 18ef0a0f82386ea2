//! The aggregated view of a campaign that reports and exports are made from.
//!
//! This is the contract between the campaign layer (which fills it from the
//! results store) and the report layer (which draws it): plain serialisable
//! data, so the report never needs to know how runs were made.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Payload throughput may exceed the Ethernet bound by this share before a
/// scenario is flagged even with a zero CI: the shaper's 375 µs token
/// bucket lets that much extra data through at the start of a run (under
/// 0.1 % of a 1 s run), docs/testbed.md.
pub const ABOVE_BOUND_TOLERANCE: f64 = 0.001;

/// True when a scenario's mean payload throughput lies above its physical
/// bound by more than its uncertainty (95 % CI, or the shaper's
/// resolution): a measurement error or an emulation artefact, never a
/// result.
pub fn above_bound(mean: f64, ci95: f64, bound: f64) -> bool {
    bound > 0.0 && mean - ci95.max(0.0) > bound * (1.0 + ABOVE_BOUND_TOLERANCE)
}

/// Statistics of one metric over the repetitions of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricStats {
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Half-width of the 95 % confidence interval of the mean (Student t).
    pub ci95: f64,
    /// Coefficient of variation, sd / mean (NaN-free: 0 when mean is 0).
    pub cv: f64,
    /// True when cv > 10 %, the studies' limit for trustworthy repetitions.
    pub cv_warning: bool,
    /// Percentage change of the mean against the baseline scenario's mean.
    pub pct_vs_baseline: Option<f64>,
}

/// What kind of chart and unit a metric belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum MetricFamily {
    Throughput,
    Delay,
    Rtt,
    Jitter,
    Loss,
    Cpu,
    Tcp,
    Voip,
    Completion,
}

/// How the flows of one run combine into the run's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Totals: throughput, packet counts.
    Sum,
    /// Means weighted by each flow's received packets.
    WeightedMean,
    /// Plain mean over the flows that have the number.
    #[default]
    Mean,
    /// The worst (largest) flow: tails, completion.
    Max,
    /// The smallest flow value: minimum delays.
    Min,
}

/// Which direction of change is an improvement (report colouring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
    /// Neither: a change is neither good nor bad news (a window size).
    #[default]
    Neither,
}

/// Static description of a metric key (a row of
/// `wirebench_campaign::metrics::METRICS`, in serialisable form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricInfo {
    /// Stable key, e.g. `throughput_payload_bps`.
    pub key: String,
    pub family: MetricFamily,
    /// Human label, e.g. "Payload throughput".
    pub label: String,
    /// SI unit as stored: "bit/s", "s", "ratio", "share of one core", "packets", "".
    pub unit: String,
    /// How flows combine (summaries stored before the table carry none).
    #[serde(default)]
    pub combine: Combine,
    /// Which direction is better (absent in older summaries: neither).
    #[serde(default)]
    pub better: Better,
}

/// One point of the matrix: all repetitions with the same axis values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    /// Stable identifier, e.g. `ip=4,transport=udp,payload=1408,mtu=1500`.
    pub key: String,
    /// Axis name → value as text, e.g. {"ip": "4", "payload": "1408"}.
    pub axes: BTreeMap<String, String>,
    /// Runs that finished / were planned.
    pub runs_ok: usize,
    pub runs_planned: usize,
    /// Metric key → statistics over the repetitions.
    pub metrics: BTreeMap<String, MetricStats>,
    /// The Ethernet upper bound of payload throughput for this scenario
    /// (bit/s), where the link rate is known.
    pub upper_bound_bps: Option<f64>,
    /// Ok runs whose own bound check fired (`total.above_bound` of the
    /// result: more wire bits per second than the link by more than the
    /// run's uncertainty). Such a scenario's numbers are a measurement or
    /// emulation error, whatever its mean says.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs_above_bound: usize,
    /// Per node of runs through agents (real hosts, the emulated
    /// test-bed): its CPU and drops over the repetitions — the R1/R2 CPU
    /// figures of a lab. Empty for other runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, NodeFigures>,
    /// Where the time went on each emulated hop (test-bed runs whose
    /// counters hold `hops`), in path order of first appearance. Empty for
    /// other runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<HopFigures>,
    /// Throughput, delay, jitter and loss over time (campaigns with
    /// `interval_ms`): mean and min–max band over the repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<crate::series::ScenarioSeries>,
    /// Delay and |IPDV| distributions over all flows and repetitions
    /// (results that carry histograms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist: Option<crate::dist::ScenarioDist>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ScenarioSummary {
    /// True when the scenario's payload throughput is above its physical
    /// bound: its mean by more than the 95 % CI
    /// ([`above_bound`]), or any run by its own check.
    pub fn above_bound(&self) -> bool {
        self.runs_above_bound > 0
            || self.upper_bound_bps.is_some_and(|b| {
                self.metrics
                    .get("throughput_payload_bps")
                    .is_some_and(|m| above_bound(m.mean, m.ci95, b))
            })
    }
}

/// One node's figures in one scenario, each over the ok repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NodeFigures {
    /// sender, receiver or router.
    pub role: String,
    /// Host-wide busy share of all its cores (1 − idle).
    pub cpu_busy: Option<MetricStats>,
    /// Host-wide softirq share (where forwarding is accounted).
    pub cpu_softirq: Option<MetricStats>,
    /// Packets dropped on the node per run (every interface and qdisc).
    pub drops: Option<MetricStats>,
    /// What its changed links were during the runs, read back from the
    /// node after they were set (`eth0 mtu 9000, qdisc tbf, gro on gso on
    /// tso on`), each distinct state once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
}

/// One direction of one emulated link in one scenario: the mean time a
/// frame spent per hop, each over the ok repetitions (seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HopFigures {
    /// Node the frames left.
    pub from: String,
    /// Node they reached.
    pub to: String,
    /// Waiting for the wire behind earlier frames.
    pub queueing_s: Option<MetricStats>,
    /// On the wire: `max(len + 24, 84) × 8 / rate`.
    pub serialisation_s: Option<MetricStats>,
    /// Delay, jitter and waiting not to overtake.
    pub propagation_s: Option<MetricStats>,
}

/// Environment a campaign ran in, as recorded with its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Environment {
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub tool_version: String,
    pub topology: String,
    /// Any further facts (commands, host names) as key → value.
    pub extra: BTreeMap<String, String>,
}

/// How throughput is shown in reports: a unit chosen per chart and table
/// column from its largest value (`si`, `ditg`), or one forced on every
/// throughput figure (`"Mbit/s"`, D-ITG's `"Kbps"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ThroughputUnits {
    /// SI: bit/s, kbit/s, Mbit/s, Gbit/s (powers of 1000), chosen per chart.
    #[default]
    #[serde(rename = "si")]
    Si,
    /// The studies' D-ITG figures, chosen per chart: ITGDec's kbit/s called
    /// "Kbps" below 1 Mbps, else kbit/s divided by 1024 called "Mbps" (S5).
    #[serde(rename = "ditg")]
    Ditg,
    /// Always bit/s.
    #[serde(rename = "bit/s")]
    Bits,
    /// Always kbit/s (1000 bit/s).
    #[serde(rename = "kbit/s")]
    Kbits,
    /// Always Mbit/s.
    #[serde(rename = "Mbit/s")]
    Mbits,
    /// Always Gbit/s.
    #[serde(rename = "Gbit/s")]
    Gbits,
    /// Always D-ITG's "Kbps" (ITGDec's kbit/s, 1000 bit/s).
    #[serde(rename = "Kbps")]
    DitgKbps,
    /// Always D-ITG's "Mbps" (kbit/s ÷ 1024).
    #[serde(rename = "Mbps")]
    DitgMbps,
}

impl ThroughputUnits {
    /// Every accepted spelling, as campaign files and `--units` write it.
    pub const NAMES: &'static [&'static str] = &[
        "si", "ditg", "bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Kbps", "Mbps",
    ];

    /// Parses one of [`Self::NAMES`] (exact, as units are case-sensitive:
    /// "Mbit/s" is not "mbit/s").
    pub fn parse(s: &str) -> Option<Self> {
        use ThroughputUnits::*;
        Some(match s.trim() {
            "si" => Si,
            "ditg" => Ditg,
            "bit/s" => Bits,
            "kbit/s" => Kbits,
            "Mbit/s" => Mbits,
            "Gbit/s" => Gbits,
            "Kbps" => DitgKbps,
            "Mbps" => DitgMbps,
            _ => return None,
        })
    }

    /// True for the D-ITG flavours (the report explains their "Mbps").
    pub fn is_ditg(self) -> bool {
        matches!(
            self,
            ThroughputUnits::Ditg | ThroughputUnits::DitgKbps | ThroughputUnits::DitgMbps
        )
    }
}

/// How the report presents a campaign: the campaign file's `[report]`
/// table, which `wirebench report` flags may override. Stored summaries
/// without it read as the defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportOptions {
    /// An axis whose values become table columns side by side (S3's
    /// "IPv4 | IPv6"), with a mean row and the % difference between them.
    pub columns: Option<String>,
    /// Throughput units in charts and tables.
    pub units: ThroughputUnits,
    /// Let a chart's y axis start above zero when every value lies close to
    /// the largest (S2's 5 % effects); the caption says so.
    pub zoom: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            columns: None,
            units: ThroughputUnits::Si,
            zoom: true,
        }
    }
}

/// Everything a report needs about one campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignSummary {
    pub name: String,
    /// The campaign file exactly as it was run.
    pub campaign_file: String,
    pub started_at: String,
    pub environment: Environment,
    /// The matrix axes in the order the campaign file gives them.
    pub axes: Vec<String>,
    /// The axis a chart puts on its x axis when it varies (payload, frame
    /// size or MTU), if any does.
    pub x_axis: Option<String>,
    pub baseline: Option<String>,
    pub metrics: Vec<MetricInfo>,
    pub scenarios: Vec<ScenarioSummary>,
    /// Notes the report must show (e.g. "router forwarding appears as host softirq").
    pub notes: Vec<String>,
    /// Presentation choices from the campaign file's `[report]` table.
    #[serde(default)]
    pub report: ReportOptions,
    /// An RFC 2544 campaign's results (`[rfc2544]` block), recomputed from
    /// its trials: the report shows the RFC tables and the loss-vs-load
    /// chart instead of per-scenario means, which mean nothing over search
    /// trials at different rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rfc2544: Option<crate::rfc2544::Rfc2544Summary>,
}
