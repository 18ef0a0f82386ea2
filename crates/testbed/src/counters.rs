//! Per-node, per-interface packet counters, so that a campaign can say where
//! packets were dropped: "3 120 drops in the qdisc of r1/eth1". Read from
//! `ip -s -j link` and `tc -s -j qdisc` in each namespace; a campaign takes a
//! snapshot before and after a run and keeps the [`Counters::delta`].
//! Absolute values count from creation: the first IPv6 multicast report of
//! an interface that came up before its peer shows as one tx drop there.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Counters of one queueing discipline tree on an interface, all read from
/// the root, whose drops include its children's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscCounters {
    /// Root qdisc kind (`tbf`, `noqueue`, `netem`, …).
    pub kind: String,
    /// Bytes the qdisc sent.
    pub sent_bytes: u64,
    /// Packets the qdisc sent.
    pub sent_packets: u64,
    /// Packets the qdisc dropped.
    pub drops: u64,
    /// Times the qdisc was over its limit (tbf: the rate held a packet back).
    pub overlimits: u64,
    /// Packets handed back to the qdisc by the device.
    pub requeues: u64,
    /// A gauge: bytes queued when the snapshot was taken (not differenced).
    pub backlog_bytes: u64,
    /// A gauge: packets queued when the snapshot was taken.
    pub backlog_packets: u64,
}

/// Kernel interface statistics (`rtnl_link_stats64`) plus the qdisc.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets dropped on receive.
    pub rx_dropped: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// The root qdisc's counters.
    pub qdisc: QdiscCounters,
}

impl IfaceCounters {
    /// All drops seen at this interface: receive and transmit drops of the
    /// device and drops of its qdisc.
    pub fn drops(&self) -> u64 {
        self.rx_dropped + self.tx_dropped + self.qdisc.drops
    }
}

/// One place where packets were dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropSite {
    /// Node of the interface.
    pub node: String,
    /// Interface name inside the node's namespace.
    pub iface: String,
    /// `qdisc`, `rx` (device receive drops) or `tx` (device transmit drops).
    pub kind: String,
    /// Packets dropped there.
    pub count: u64,
}

/// A snapshot: node → interface → counters. Loopback is left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Counters by node name, then interface name.
    pub nodes: BTreeMap<String, BTreeMap<String, IfaceCounters>>,
}

impl Counters {
    /// The counters of `iface` on `node`, if the snapshot has them.
    pub fn get(&self, node: &str, iface: &str) -> Option<&IfaceCounters> {
        self.nodes.get(node)?.get(iface)
    }

    /// Drops at node X interface Y (device and qdisc); 0 if unknown.
    pub fn drops_at(&self, node: &str, iface: &str) -> u64 {
        self.get(node, iface).map(|c| c.drops()).unwrap_or(0)
    }

    /// Drops summed over a node's interfaces.
    pub fn node_drops(&self, node: &str) -> u64 {
        self.nodes
            .get(node)
            .map(|m| m.values().map(|c| c.drops()).sum())
            .unwrap_or(0)
    }

    /// Every non-zero drop counter, by node and interface.
    pub fn drop_sites(&self) -> Vec<DropSite> {
        let mut v = Vec::new();
        for (node, ifs) in &self.nodes {
            for (iface, c) in ifs {
                for (kind, count) in [
                    ("qdisc", c.qdisc.drops),
                    ("rx", c.rx_dropped),
                    ("tx", c.tx_dropped),
                ] {
                    if count > 0 {
                        v.push(DropSite {
                            node: node.clone(),
                            iface: iface.clone(),
                            kind: kind.to_string(),
                            count,
                        });
                    }
                }
            }
        }
        v
    }

    /// What happened between `before` and `self`: counters differenced
    /// (saturating, so a reset counter reads 0), backlog gauges kept.
    pub fn delta(&self, before: &Counters) -> Counters {
        let mut out = Counters::default();
        for (node, ifs) in &self.nodes {
            let mut m = BTreeMap::new();
            for (iface, now) in ifs {
                let b = before.get(node, iface).cloned().unwrap_or_default();
                m.insert(
                    iface.clone(),
                    IfaceCounters {
                        rx_packets: now.rx_packets.saturating_sub(b.rx_packets),
                        rx_bytes: now.rx_bytes.saturating_sub(b.rx_bytes),
                        rx_dropped: now.rx_dropped.saturating_sub(b.rx_dropped),
                        rx_errors: now.rx_errors.saturating_sub(b.rx_errors),
                        tx_packets: now.tx_packets.saturating_sub(b.tx_packets),
                        tx_bytes: now.tx_bytes.saturating_sub(b.tx_bytes),
                        tx_dropped: now.tx_dropped.saturating_sub(b.tx_dropped),
                        tx_errors: now.tx_errors.saturating_sub(b.tx_errors),
                        qdisc: QdiscCounters {
                            kind: now.qdisc.kind.clone(),
                            sent_bytes: now.qdisc.sent_bytes.saturating_sub(b.qdisc.sent_bytes),
                            sent_packets: now
                                .qdisc
                                .sent_packets
                                .saturating_sub(b.qdisc.sent_packets),
                            drops: now.qdisc.drops.saturating_sub(b.qdisc.drops),
                            overlimits: now.qdisc.overlimits.saturating_sub(b.qdisc.overlimits),
                            requeues: now.qdisc.requeues.saturating_sub(b.qdisc.requeues),
                            backlog_bytes: now.qdisc.backlog_bytes,
                            backlog_packets: now.qdisc.backlog_packets,
                        },
                    },
                );
            }
            out.nodes.insert(node.clone(), m);
        }
        out
    }
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v.get(k).and_then(|x| x.as_u64()).unwrap_or(0)
}

/// Parses `ip -s -j link show` and `tc -s -j qdisc show` of one namespace.
pub fn parse_node(
    link_json: &str,
    qdisc_json: &str,
) -> Result<BTreeMap<String, IfaceCounters>, String> {
    let links: serde_json::Value =
        serde_json::from_str(link_json).map_err(|e| format!("ip -s -j link: {e}"))?;
    let qdiscs: serde_json::Value =
        serde_json::from_str(qdisc_json).map_err(|e| format!("tc -s -j qdisc: {e}"))?;
    let mut out = BTreeMap::new();
    for l in links.as_array().into_iter().flatten() {
        let Some(name) = l.get("ifname").and_then(|x| x.as_str()) else {
            continue;
        };
        if name == "lo" {
            continue;
        }
        let s = l.get("stats64").or_else(|| l.get("stats"));
        let rx = s.and_then(|s| s.get("rx")).cloned().unwrap_or_default();
        let tx = s.and_then(|s| s.get("tx")).cloned().unwrap_or_default();
        out.insert(
            name.to_string(),
            IfaceCounters {
                rx_packets: u(&rx, "packets"),
                rx_bytes: u(&rx, "bytes"),
                rx_dropped: u(&rx, "dropped"),
                rx_errors: u(&rx, "errors"),
                tx_packets: u(&tx, "packets"),
                tx_bytes: u(&tx, "bytes"),
                tx_dropped: u(&tx, "dropped"),
                tx_errors: u(&tx, "errors"),
                qdisc: QdiscCounters::default(),
            },
        );
    }
    for q in qdiscs.as_array().into_iter().flatten() {
        let Some(dev) = q.get("dev").and_then(|x| x.as_str()) else {
            continue;
        };
        let Some(c) = out.get_mut(dev) else {
            continue;
        };
        // Ingress/clsact qdiscs do not queue egress traffic.
        let kind = q.get("kind").and_then(|x| x.as_str()).unwrap_or("");
        if kind == "ingress" || kind == "clsact" {
            continue;
        }
        // Only the root: a classful parent (tbf) counts a packet its child
        // dropped (queue full, netem loss) as its own drop too
        // (`tbf_enqueue`: `if (net_xmit_drop_count(ret)) qdisc_qstats_drop(sch)`),
        // so summing the tree counted every drop below the root twice.
        let root = q.get("root").and_then(|x| x.as_bool()).unwrap_or(false);
        if root {
            c.qdisc.drops = u(q, "drops");
            c.qdisc.overlimits = u(q, "overlimits");
            c.qdisc.requeues = u(q, "requeues");
            c.qdisc.kind = kind.to_string();
            c.qdisc.sent_bytes = u(q, "bytes");
            c.qdisc.sent_packets = u(q, "packets");
            c.qdisc.backlog_bytes = u(q, "backlog");
            c.qdisc.backlog_packets = u(q, "qlen");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: &str = r#"[{"ifname":"lo","stats64":{"rx":{"bytes":1,"packets":1,"errors":0,"dropped":0},"tx":{"bytes":1,"packets":1,"errors":0,"dropped":0}}},
      {"ifname":"eth0","stats64":{"rx":{"bytes":900,"packets":10,"errors":1,"dropped":2},"tx":{"bytes":1800,"packets":20,"errors":0,"dropped":3}}}]"#;
    const QD: &str = r#"[{"kind":"tbf","handle":"1:","dev":"eth0","root":true,"bytes":1800,"packets":20,"drops":5,"overlimits":7,"requeues":0,"backlog":3000,"qlen":2},
      {"kind":"pfifo","handle":"10:","dev":"eth0","parent":"1:1","bytes":1800,"packets":20,"drops":5,"overlimits":0,"requeues":0,"backlog":3000,"qlen":2}]"#;

    #[test]
    fn parse_and_delta() {
        let m = parse_node(LINK, QD).unwrap();
        assert!(!m.contains_key("lo"));
        let e = &m["eth0"];
        assert_eq!((e.rx_packets, e.rx_dropped, e.tx_dropped), (10, 2, 3));
        assert_eq!(
            (
                e.qdisc.kind.as_str(),
                e.qdisc.drops,
                e.qdisc.backlog_packets
            ),
            ("tbf", 5, 2)
        );
        let mut after = Counters::default();
        after.nodes.insert("r1".into(), m.clone());
        let mut before = after.clone();
        let b = before.nodes.get_mut("r1").unwrap().get_mut("eth0").unwrap();
        b.qdisc.drops = 1;
        b.rx_packets = 4;
        let d = after.delta(&before);
        assert_eq!(d.get("r1", "eth0").unwrap().qdisc.drops, 4);
        assert_eq!(d.get("r1", "eth0").unwrap().rx_packets, 6);
        assert_eq!(d.get("r1", "eth0").unwrap().qdisc.backlog_bytes, 3000);
        assert_eq!(d.drops_at("r1", "eth0"), 4);
        assert_eq!(after.drops_at("r1", "eth0"), 5 + 2 + 3);
        assert_eq!(d.drop_sites().len(), 1);
        assert_eq!(after.drop_sites().len(), 3);
        let json = serde_json::to_string(&d).unwrap();
        let back: Counters = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
    }
}
