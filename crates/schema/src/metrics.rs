//! The metric table: every metric a campaign summary may carry, declared
//! once with its family, label, unit, how the flows of one run combine into
//! one number, which direction is better and where the number comes from
//! (flent's idea: a series is declared with its units and combine rule, and
//! everything else refers to it by key). Extraction, report charts, tables
//! and better/worse colouring all read this table; it lives in the
//! contract crate because the campaign (extraction) and the report (charts,
//! colouring) both read it and neither depends on the other's internals.
//!
//! Adding a metric is one row in [`METRICS`]: a key, its description and a
//! [`Source`] that reads the typed result document
//! ([`crate::result::ResultDoc`]) or the test-bed counters.

use crate::result::{FlowResult, ResultDoc};
use crate::summary::{Better, Combine, MetricFamily, MetricInfo};
use crate::Direction;
use serde_json::Value;

/// Where one run's number comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// A number of each flow of the result document (None: the flow has
    /// none, e.g. no TCP figures on a UDP flow), combined over the flows by
    /// the metric's [`Combine`] rule.
    Flow(fn(&FlowResult) -> Option<f64>),
    /// A number of the whole result document (totals, CPU, loss ratio).
    Run(fn(&ResultDoc) -> Option<f64>),
    /// A number from the test-bed / node counters stored beside the result
    /// (not a result document: their shape is the test-bed's and the
    /// agent's).
    Counters(fn(&Value) -> Option<f64>),
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// Stable key, as stored and exported, e.g. `throughput_payload_bps`.
    pub key: &'static str,
    pub family: MetricFamily,
    /// Human label for charts and tables.
    pub label: &'static str,
    /// SI unit as stored: "bit/s", "s", "ratio", "share of one core", "packets", "".
    pub unit: &'static str,
    pub combine: Combine,
    pub better: Better,
    pub source: Source,
}

impl Metric {
    /// The serialisable description carried in a summary.
    pub fn info(&self) -> MetricInfo {
        MetricInfo {
            key: self.key.into(),
            family: self.family,
            label: self.label.into(),
            unit: self.unit.into(),
            combine: self.combine,
            better: self.better,
        }
    }
}

const fn m(
    key: &'static str,
    family: MetricFamily,
    label: &'static str,
    unit: &'static str,
    combine: Combine,
    better: Better,
    source: Source,
) -> Metric {
    Metric {
        key,
        family,
        label,
        unit,
        combine,
        better,
        source,
    }
}

use Better::{Higher, Lower, Neither};
use Combine::{Max, Mean, Min, Sum, WeightedMean};
use MetricFamily::*;
use Source::{Counters, Flow, Run};

const BPS: &str = "bit/s";
const PKTS: &str = "packets";
const CORE: &str = "share of one core";

/// Every metric, in display order.
#[rustfmt::skip]
pub const METRICS: &[Metric] = &[
    m("throughput_payload_bps", Throughput, "Payload throughput", BPS, Sum, Higher, Run(|d| run_throughput(d, |t| t.payload))),
    // Header layers: at one payload rate more IP/Ethernet/wire bits are more
    // overhead (IPv6's 20 extra header bytes), not an improvement, so their
    // change is left uncoloured.
    m("throughput_ip_bps", Throughput, "IP throughput", BPS, Sum, Neither, Run(|d| run_throughput(d, |t| t.ip))),
    m("throughput_ethernet_bps", Throughput, "Ethernet throughput", BPS, Sum, Neither, Run(|d| run_throughput(d, |t| t.ethernet))),
    m("throughput_wire_bps", Throughput, "On-wire throughput", BPS, Sum, Neither, Run(|d| run_throughput(d, |t| t.wire))),
    // Only runs with flows both ways (`--bidir`): each direction's share.
    m("throughput_forward_payload_bps", Throughput, "Payload throughput, forward flows (bidir)", BPS, Sum, Higher, Run(|d| bidir_payload(d, Direction::Forward))),
    m("throughput_reverse_payload_bps", Throughput, "Payload throughput, reverse flows (bidir)", BPS, Sum, Higher, Run(|d| bidir_payload(d, Direction::Reverse))),
    // Runs of two or more flows: how evenly they shared the run (total.fairness).
    m("fairness_jain", Throughput, "Jain's fairness index over flows", "", Mean, Higher, Run(|d| d.total.fairness.map(|f| f.jain))),
    m("throughput_min_flow_bps", Throughput, "Payload throughput, slowest flow", BPS, Min, Higher, Run(|d| d.total.fairness.map(|f| f.min_bps))),
    m("throughput_max_flow_bps", Throughput, "Payload throughput, fastest flow", BPS, Max, Neither, Run(|d| d.total.fairness.map(|f| f.max_bps))),
    m("delay_mean_s", Delay, "One-way delay, mean", "s", WeightedMean, Lower, Flow(|f| Some(f.delay_s.mean))),
    m("delay_min_s", Delay, "One-way delay, min", "s", Min, Lower, Flow(|f| Some(f.delay_s.min))),
    m("delay_p50_s", Delay, "One-way delay, median", "s", Max, Lower, Flow(|f| Some(f.delay_s.p50))),
    m("delay_p90_s", Delay, "One-way delay, 90th percentile", "s", Max, Lower, Flow(|f| Some(f.delay_s.p90))),
    m("delay_p99_s", Delay, "One-way delay, 99th percentile", "s", Max, Lower, Flow(|f| Some(f.delay_s.p99))),
    m("delay_p999_s", Delay, "One-way delay, 99.9th percentile", "s", Max, Lower, Flow(|f| Some(f.delay_s.p999))),
    m("delay_max_s", Delay, "One-way delay, max", "s", Max, Lower, Flow(|f| Some(f.delay_s.max))),
    m("rtt_mean_s", Rtt, "Round-trip time, mean", "s", WeightedMean, Lower, Flow(|f| f.rtt_s.map(|r| r.mean))),
    m("rtt_min_s", Rtt, "Round-trip time, min", "s", Min, Lower, Flow(|f| f.rtt_s.map(|r| r.min))),
    m("rtt_p99_s", Rtt, "Round-trip time, 99th percentile", "s", Max, Lower, Flow(|f| f.rtt_s.map(|r| r.p99))),
    m("jitter_mean_abs_ipdv_s", Jitter, "Jitter, mean |IPDV| (D-ITG)", "s", WeightedMean, Lower, Flow(|f| Some(f.jitter_s.mean_abs_ipdv))),
    m("jitter_rfc3550_s", Jitter, "Jitter, RFC 3550", "s", Mean, Lower, Flow(|f| Some(f.jitter_s.rfc3550))),
    // From each flow's |IPDV| histogram (results that carry one); the worst flow, as delay percentiles combine.
    m("jitter_ipdv_p50_s", Jitter, "|IPDV|, median", "s", Max, Lower, Flow(|f| ipdv_quantile(f, 0.5))),
    m("jitter_ipdv_p90_s", Jitter, "|IPDV|, 90th percentile", "s", Max, Lower, Flow(|f| ipdv_quantile(f, 0.9))),
    m("jitter_ipdv_p99_s", Jitter, "|IPDV|, 99th percentile", "s", Max, Lower, Flow(|f| ipdv_quantile(f, 0.99))),
    m("jitter_ipdv_p999_s", Jitter, "|IPDV|, 99.9th percentile", "s", Max, Lower, Flow(|f| ipdv_quantile(f, 0.999))),
    m("pdv_s", Jitter, "PDV, p99.9 - min (RFC 5481)", "s", Max, Lower, Flow(|f| Some(f.jitter_s.pdv_p999))),
    m("loss_ratio", Loss, "Loss ratio", "ratio", Sum, Lower, Run(loss_ratio)),
    m("lost_packets", Loss, "Packets lost", PKTS, Sum, Lower, Run(|d| known_lost(d).map(|l| l as f64))),
    m("not_sent", Loss, "Packets not sent", PKTS, Sum, Lower, Flow(|f| Some(f.sent.not_sent as f64))),
    m("loss_sender_host", Loss, "Dropped in the sending host", PKTS, Sum, Lower, Flow(|f| Some(f.loss_split.sender_host as f64))),
    m("loss_receiver_host", Loss, "Dropped in the receiving host", PKTS, Sum, Lower, Flow(|f| Some(f.loss_split.receiver_host as f64))),
    m("loss_network", Loss, "Lost in the network", PKTS, Sum, Lower, Flow(|f| Some(f.loss_split.network as f64))),
    m("packets_sent", Loss, "Packets sent", PKTS, Sum, Higher, Flow(|f| Some(f.sent.packets as f64))),
    m("packets_received", Loss, "Packets received", PKTS, Sum, Higher, Flow(|f| Some(f.received.counts.packets as f64))),
    m("reordered", Loss, "Packets reordered", PKTS, Sum, Lower, Flow(|f| Some(f.received.counts.reordered as f64))),
    m("duplicates", Loss, "Duplicate packets", PKTS, Sum, Lower, Flow(|f| Some(f.received.counts.duplicates as f64))),
    m("testbed_drops", Loss, "Drops counted on test-bed interfaces and qdiscs", PKTS, Sum, Lower, Counters(counter_drops)),
    m("cpu_sender", Cpu, "CPU, sender process", CORE, Sum, Lower, Run(|d| Some(d.cpu.sender.user + d.cpu.sender.system))),
    m("cpu_receiver", Cpu, "CPU, receiver process", CORE, Sum, Lower, Run(|d| Some(d.cpu.receiver.user + d.cpu.receiver.system))),
    m("cpu_host_user", Cpu, "CPU, host user", CORE, Sum, Lower, Run(|d| Some(d.cpu.host.user))),
    m("cpu_host_system", Cpu, "CPU, host system", CORE, Sum, Lower, Run(|d| Some(d.cpu.host.system))),
    m("cpu_host_softirq", Cpu, "CPU, host softirq (incl. router forwarding)", CORE, Sum, Lower, Run(|d| Some(d.cpu.host.softirq))),
    m("cpu_host_steal", Cpu, "CPU, host steal (taken by the hypervisor)", CORE, Sum, Lower, Run(|d| Some(d.cpu.host.steal))),
    m("cpu_router_busy", Cpu, "CPU, busiest real router (1 − idle)", "share of all its cores", Max, Lower, Counters(|c| router_cpu(c, "busy"))),
    m("cpu_router_softirq", Cpu, "CPU, busiest real router, softirq (forwarding)", "share of all its cores", Max, Lower, Counters(|c| router_cpu(c, "softirq"))),
    m("tcp_retransmits", Tcp, "TCP retransmits", PKTS, Sum, Lower, Flow(|f| f.tcp.map(|t| t.retransmits as f64))),
    m("tcp_rtt_s", Tcp, "TCP smoothed RTT", "s", Mean, Lower, Flow(|f| f.tcp.map(|t| t.rtt_s))),
    m("tcp_cwnd_bytes", Tcp, "TCP congestion window", "bytes", Mean, Neither, Flow(|f| f.tcp.map(|t| t.cwnd_bytes as f64))),
    m("r_factor", Voip, "E-model R factor", "", Mean, Higher, Flow(|f| f.voip.map(|v| v.r_factor))),
    m("mos", Voip, "MOS (E-model)", "", Mean, Higher, Flow(|f| f.voip.map(|v| v.mos))),
    // Only a finite transfer has a completion time; the sender's write
    // span is not one (a 5 MiB TCP write finishes in the socket buffer
    // long before the last byte arrives).
    m("completion_s", Completion, "Completion time", "s", Max, Lower, Flow(|f| f.completion_s)),
    m("fragmented_datagrams", Loss, "Datagrams sent as IP fragments", PKTS, Sum, Neither, Flow(|f| Some(f.frames.fragmented as f64))),
];

/// Every metric a summary may carry, in display order (the metric table).
pub fn metric_catalogue() -> Vec<MetricInfo> {
    METRICS.iter().map(Metric::info).collect()
}

/// The row of `key`, if it is a known metric.
pub fn metric(key: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.key == key)
}

/// One number per metric key for one run: its result document and the
/// test-bed counters stored beside it. Values that are not finite are left
/// out (a metric the run has no number for is absent, never zero).
pub fn extract(
    doc: &ResultDoc,
    counters: Option<&Value>,
) -> std::collections::BTreeMap<String, f64> {
    METRICS
        .iter()
        .filter_map(|m| {
            let v = match m.source {
                Flow(get) => combine_flows(&doc.flows, get, m.combine),
                Run(get) => get(doc),
                Counters(get) => counters.and_then(get),
            };
            v.filter(|x| x.is_finite()).map(|x| (m.key.to_string(), x))
        })
        .collect()
}

/// One number from every flow, combined by the table's rule; None when no
/// flow has one.
fn combine_flows(
    flows: &[FlowResult],
    get: fn(&FlowResult) -> Option<f64>,
    c: Combine,
) -> Option<f64> {
    let vals = || flows.iter().filter_map(|f| get(f).map(|x| (f, x)));
    let n = vals().count();
    if n == 0 {
        return None;
    }
    let plain_mean = || vals().map(|(_, x)| x).sum::<f64>() / n as f64;
    Some(match c {
        Combine::Sum => vals().map(|(_, x)| x).sum(),
        Combine::Mean => plain_mean(),
        Combine::Max => vals().map(|(_, x)| x).fold(f64::NEG_INFINITY, f64::max),
        Combine::Min => vals().map(|(_, x)| x).fold(f64::INFINITY, f64::min),
        // Weighted by the flow's received packets (plain mean when no flow
        // received any).
        Combine::WeightedMean => {
            let (sw, s) = vals().fold((0.0, 0.0), |(sw, s), (f, x)| {
                let w = f.received.counts.packets as f64;
                (sw + w, s + w * x)
            });
            if sw > 0.0 {
                s / sw
            } else {
                plain_mean()
            }
        }
    })
}

/// A run's throughput at one layer: the result's total (all flows' bytes
/// over the union of their spans); documents written before the total
/// existed read it as zero, and then the flows' rates add up (the same
/// answer for a run that carried nothing).
fn run_throughput(d: &ResultDoc, layer: fn(&crate::flow::Throughput) -> f64) -> Option<f64> {
    if d.flows.is_empty() {
        return None;
    }
    let total = layer(&d.total.throughput_bps);
    if total > 0.0 {
        return Some(total);
    }
    Some(d.flows.iter().map(|f| layer(&f.throughput_bps)).sum())
}

/// The payload throughput of one direction's flows, for a run whose flows
/// go both ways (None otherwise: a one-way run's total already is it).
fn bidir_payload(d: &ResultDoc, dir: Direction) -> Option<f64> {
    let both = d.flows.iter().any(|f| f.direction == Direction::Forward)
        && d.flows.iter().any(|f| f.direction == Direction::Reverse);
    both.then(|| {
        d.flows
            .iter()
            .filter(|f| f.direction == dir)
            .map(|f| f.throughput_bps.payload)
            .sum()
    })
}

/// Quantile `q` of a flow's |IPDV| histogram; None when it has none (a
/// result from before they existed) or it is empty.
fn ipdv_quantile(f: &FlowResult, q: f64) -> Option<f64> {
    f.ipdv_hist
        .as_ref()
        .filter(|d| d.count() > 0)
        .and_then(|d| d.quantile(q))
}

/// All flows' lost packets; None when any flow's loss is unknown (its
/// receiver report is missing: `received.lost` is null), since the others'
/// sum would pass for the run's.
fn known_lost(d: &ResultDoc) -> Option<u64> {
    if d.flows.is_empty() {
        return None;
    }
    d.flows.iter().map(|f| f.received.counts.lost).sum()
}

/// Lost over sent, all flows (unknown as [`known_lost`]); the flows' mean
/// loss ratio when nothing was sent (a receiver-only view).
fn loss_ratio(d: &ResultDoc) -> Option<f64> {
    let lost = known_lost(d)?;
    let sent: u64 = d.flows.iter().map(|f| f.sent.packets).sum();
    if sent > 0 {
        return Some(lost as f64 / sent as f64);
    }
    let ratios: Option<Vec<f64>> = d
        .flows
        .iter()
        .map(|f| f.received.counts.loss_ratio)
        .collect();
    let ratios = ratios?;
    Some(ratios.iter().sum::<f64>() / ratios.len() as f64)
}

/// A finite number (or a boolean as 0/1) at `path` in test-bed counters.
pub fn num(v: &Value, path: &[&str]) -> Option<f64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    match cur {
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite()),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// Packets the test-bed really dropped during the run. The runner stores
/// the test-bed's own list of drop sites (qdisc drops, interface rx/tx
/// drops); their sum is the answer. Without that list, only counters named
/// `drops`/`*_dropped` count: a tbf's `overlimits` counts the times the
/// shaper had to wait for tokens (a packet that waited and then left), and
/// `*_errors` are not drops either, so neither may be added in (adding
/// them, S5 at 1408 B reads some 180 000 "drops" with every drop counter
/// at 0).
fn counter_drops(c: &Value) -> Option<f64> {
    if let Some(sites) = c.get("drop_sites").and_then(Value::as_array) {
        return Some(sites.iter().filter_map(|s| num(s, &["count"])).sum());
    }
    fn walk(v: &Value, key: &str, acc: &mut f64, found: &mut bool) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, k, acc, found);
                }
            }
            Value::Number(n) if key == "drops" || key.ends_with("_dropped") => {
                *acc += n.as_f64().unwrap_or(0.0);
                *found = true;
            }
            _ => {}
        }
    }
    let mut acc = 0.0;
    let mut found = false;
    walk(c.get("nodes").unwrap_or(c), "", &mut acc, &mut found);
    found.then_some(acc)
}

/// Real nodes (`[[hosts.node]]`): the highest host-wide CPU share among the
/// router nodes over the run — `busy` (1 − idle) or one of the per-state
/// shares the agent's CPU delta holds.
fn router_cpu(c: &Value, what: &str) -> Option<f64> {
    let roles = c.get("roles")?.as_object()?;
    roles
        .iter()
        .filter(|(_, r)| r.as_str() == Some("router"))
        .filter_map(|(n, _)| {
            let h = c.get("cpu")?.get(n)?.get("host")?;
            if what == "busy" {
                Some(1.0 - num(h, &["idle"])?)
            } else {
                num(h, &[what])
            }
        })
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_unique() {
        let keys: HashSet<_> = METRICS.iter().map(|m| m.key).collect();
        assert_eq!(keys.len(), METRICS.len());
    }

    /// A bidir run reports each direction's payload throughput beside the
    /// total; a one-way run has no such split.
    #[test]
    fn bidir_runs_split_throughput_by_direction() {
        let flow = |dir, bps| FlowResult {
            direction: dir,
            throughput_bps: crate::flow::Throughput {
                payload: bps,
                ..Default::default()
            },
            ..Default::default()
        };
        let doc = ResultDoc::with_flows(vec![
            flow(Direction::Forward, 1e6),
            flow(Direction::Reverse, 3e6),
        ]);
        let m = extract(&doc, None);
        assert_eq!(m.get("throughput_forward_payload_bps"), Some(&1e6));
        assert_eq!(m.get("throughput_reverse_payload_bps"), Some(&3e6));
        let one = ResultDoc::with_flows(vec![flow(Direction::Reverse, 3e6)]);
        let m = extract(&one, None);
        assert!(!m.contains_key("throughput_reverse_payload_bps"));
        assert_eq!(m.get("throughput_payload_bps"), Some(&3e6));
    }

    /// Counts of what arrived are good news, counts of what went wrong are
    /// bad news, even though both sit in the loss family (the report once
    /// coloured more packets received as worse, by family).
    #[test]
    fn direction_is_per_metric_not_per_family() {
        let better = |k: &str| metric(k).map(|m| m.better);
        assert_eq!(better("packets_received"), Some(Higher));
        assert_eq!(better("packets_sent"), Some(Higher));
        for k in [
            "lost_packets",
            "loss_ratio",
            "not_sent",
            "duplicates",
            "reordered",
        ] {
            assert_eq!(better(k), Some(Lower), "{k}");
        }
        assert_eq!(better("throughput_payload_bps"), Some(Higher));
        assert_eq!(better("delay_p99_s"), Some(Lower));
    }
}
