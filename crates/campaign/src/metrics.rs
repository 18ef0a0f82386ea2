//! The metric table: every metric a campaign summary may carry, declared
//! once with its family, label, unit, how the flows of one run combine into
//! one number, and which direction is better (flent's idea: a series is
//! declared with its units and combine rule, and everything else refers to
//! it by key). Extraction, report charts, tables and better/worse colouring
//! all read this table; it lives here because the report sits above the
//! campaign layer and the campaign above stats.

use crate::summary::{Better, Combine, MetricFamily, MetricInfo};

/// Where one run's number comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A number in every flow of the result document, at this path,
    /// combined over the flows by the metric's [`Combine`] rule.
    Flow(&'static [&'static str]),
    /// Computed from the whole document (CPU, loss ratio, completion) or
    /// from the test-bed counters by the extraction code.
    Derived,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
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
use Source::{Derived, Flow};

const BPS: &str = "bit/s";
const PKTS: &str = "packets";
const CORE: &str = "share of one core";

/// Every metric, in display order.
#[rustfmt::skip]
pub const METRICS: &[Metric] = &[
    m("throughput_payload_bps", Throughput, "Payload throughput", BPS, Sum, Higher, Derived),
    m("throughput_ip_bps", Throughput, "IP throughput", BPS, Sum, Higher, Derived),
    m("throughput_ethernet_bps", Throughput, "Ethernet throughput", BPS, Sum, Higher, Derived),
    m("throughput_wire_bps", Throughput, "On-wire throughput", BPS, Sum, Higher, Derived),
    m("delay_mean_s", Delay, "One-way delay, mean", "s", WeightedMean, Lower, Flow(&["delay_s", "mean"])),
    m("delay_min_s", Delay, "One-way delay, min", "s", Min, Lower, Flow(&["delay_s", "min"])),
    m("delay_p50_s", Delay, "One-way delay, median", "s", Max, Lower, Flow(&["delay_s", "p50"])),
    m("delay_p90_s", Delay, "One-way delay, 90th percentile", "s", Max, Lower, Flow(&["delay_s", "p90"])),
    m("delay_p99_s", Delay, "One-way delay, 99th percentile", "s", Max, Lower, Flow(&["delay_s", "p99"])),
    m("delay_p999_s", Delay, "One-way delay, 99.9th percentile", "s", Max, Lower, Flow(&["delay_s", "p999"])),
    m("delay_max_s", Delay, "One-way delay, max", "s", Max, Lower, Flow(&["delay_s", "max"])),
    m("rtt_mean_s", Rtt, "Round-trip time, mean", "s", WeightedMean, Lower, Flow(&["rtt_s", "mean"])),
    m("rtt_min_s", Rtt, "Round-trip time, min", "s", Min, Lower, Flow(&["rtt_s", "min"])),
    m("rtt_p99_s", Rtt, "Round-trip time, 99th percentile", "s", Max, Lower, Flow(&["rtt_s", "p99"])),
    m("jitter_mean_abs_ipdv_s", Jitter, "Jitter, mean |IPDV| (D-ITG)", "s", WeightedMean, Lower, Flow(&["jitter_s", "mean_abs_ipdv"])),
    m("jitter_rfc3550_s", Jitter, "Jitter, RFC 3550", "s", Mean, Lower, Flow(&["jitter_s", "rfc3550"])),
    m("jitter_ipdv_p50_s", Jitter, "|IPDV|, median", "s", Max, Lower, Derived),
    m("jitter_ipdv_p90_s", Jitter, "|IPDV|, 90th percentile", "s", Max, Lower, Derived),
    m("jitter_ipdv_p99_s", Jitter, "|IPDV|, 99th percentile", "s", Max, Lower, Derived),
    m("jitter_ipdv_p999_s", Jitter, "|IPDV|, 99.9th percentile", "s", Max, Lower, Derived),
    m("pdv_s", Jitter, "PDV, p99.9 - min (RFC 5481)", "s", Max, Lower, Flow(&["jitter_s", "pdv_p999"])),
    m("loss_ratio", Loss, "Loss ratio", "ratio", Sum, Lower, Derived),
    m("lost_packets", Loss, "Packets lost", PKTS, Sum, Lower, Flow(&["received", "lost"])),
    m("not_sent", Loss, "Packets not sent", PKTS, Sum, Lower, Flow(&["sent", "not_sent"])),
    m("loss_sender_host", Loss, "Dropped in the sending host", PKTS, Sum, Lower, Flow(&["loss_split", "sender_host"])),
    m("loss_receiver_host", Loss, "Dropped in the receiving host", PKTS, Sum, Lower, Flow(&["loss_split", "receiver_host"])),
    m("loss_network", Loss, "Lost in the network", PKTS, Sum, Lower, Flow(&["loss_split", "network"])),
    m("packets_sent", Loss, "Packets sent", PKTS, Sum, Higher, Flow(&["sent", "packets"])),
    m("packets_received", Loss, "Packets received", PKTS, Sum, Higher, Flow(&["received", "packets"])),
    m("reordered", Loss, "Packets reordered", PKTS, Sum, Lower, Flow(&["received", "reordered"])),
    m("duplicates", Loss, "Duplicate packets", PKTS, Sum, Lower, Flow(&["received", "duplicates"])),
    m("testbed_drops", Loss, "Drops counted on test-bed interfaces and qdiscs", PKTS, Sum, Lower, Derived),
    m("cpu_sender", Cpu, "CPU, sender process", CORE, Sum, Lower, Derived),
    m("cpu_receiver", Cpu, "CPU, receiver process", CORE, Sum, Lower, Derived),
    m("cpu_host_user", Cpu, "CPU, host user", CORE, Sum, Lower, Derived),
    m("cpu_host_system", Cpu, "CPU, host system", CORE, Sum, Lower, Derived),
    m("cpu_host_softirq", Cpu, "CPU, host softirq (incl. router forwarding)", CORE, Sum, Lower, Derived),
    m("cpu_router_busy", Cpu, "CPU, busiest real router (1 − idle)", "share of all its cores", Max, Lower, Derived),
    m("cpu_router_softirq", Cpu, "CPU, busiest real router, softirq (forwarding)", "share of all its cores", Max, Lower, Derived),
    m("tcp_retransmits", Tcp, "TCP retransmits", PKTS, Sum, Lower, Flow(&["tcp", "retransmits"])),
    m("tcp_rtt_s", Tcp, "TCP smoothed RTT", "s", Mean, Lower, Flow(&["tcp", "rtt_s"])),
    m("tcp_cwnd_bytes", Tcp, "TCP congestion window", "bytes", Mean, Neither, Flow(&["tcp", "cwnd_bytes"])),
    m("r_factor", Voip, "E-model R factor", "", Mean, Higher, Flow(&["voip", "r_factor"])),
    m("mos", Voip, "MOS (E-model)", "", Mean, Higher, Flow(&["voip", "mos"])),
    m("completion_s", Completion, "Completion time", "s", Max, Lower, Derived),
    m("fragmented_datagrams", Loss, "Datagrams sent as IP fragments", PKTS, Sum, Neither, Flow(&["frames", "fragmented"])),
];

/// The row of `key`, if it is a known metric.
pub fn metric(key: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.key == key)
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
