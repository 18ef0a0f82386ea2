//! The per-node table of campaigns run through agents (real hosts, the
//! emulated test-bed): for every scenario, each node's CPU (busy and
//! softirq share of all its cores) and the packets dropped on it per run —
//! the studies' R1/R2 CPU figures and where along the path packets were
//! lost — and, for runs on the emulated test-bed, where each hop's time
//! went (queueing, serialisation, propagation). Its own module so the main
//! document only calls it.

use crate::fmt::{esc, mean_ci, mean_ci_in};
use std::fmt::Write as _;
use wirebench_schema::summary::{CampaignSummary, HopFigures, MetricStats, NodeFigures};

/// Path order: senders, then routers (by name: r1 before r2), receivers.
fn rank(n: &NodeFigures) -> u8 {
    match n.role.as_str() {
        "sender" => 0,
        "router" => 1,
        "receiver" => 2,
        _ => 3,
    }
}

/// `mean ± ci` of `m` scaled by `k` (adding 0.0 turns an aggregate's
/// -0.0 into 0, which prints without a sign).
fn figure(m: &Option<MetricStats>, k: f64, unit: &str) -> String {
    match m {
        Some(m) => format!("{}{unit}", mean_ci(m.mean * k + 0.0, m.ci95 * k + 0.0)),
        None => "–".into(),
    }
}

/// A share of all cores in per cent, its interval cut at 0–100 %
/// ([`mean_ci_in`]): a share cannot leave the range, however wide a
/// Student-t interval over two runs is.
fn share(m: &Option<MetricStats>) -> String {
    match m {
        Some(m) => format!(
            "{} %",
            mean_ci_in(m.mean * 100.0 + 0.0, m.ci95 * 100.0 + 0.0, 0.0, 100.0)
        ),
        None => "–".into(),
    }
}

/// Whether the campaign ran on the emulated test-bed (one kernel for all
/// nodes) rather than on real hosts, from its stored environment.
fn on_testbed(s: &CampaignSummary) -> bool {
    s.environment.topology.starts_with("test-bed")
}

/// Writes the table, or nothing when no scenario has node figures.
pub fn nodes_table(out: &mut String, s: &CampaignSummary) {
    if s.scenarios.iter().all(|sc| sc.nodes.is_empty()) {
        return;
    }
    out.push_str("<h4>Nodes: CPU and drops per hop</h4>\n");
    out.push_str("<p class=\"legendnote\">Per node of the path, over the repetitions: share of all its cores busy (1 − idle) and in softirq (where a router's forwarding is accounted), and packets dropped on the node per run (its interfaces and qdiscs). ");
    out.push_str(if on_testbed(s) {
        "On the emulated test-bed every node shares one kernel, so its CPU figures are the host's.</p>\n"
    } else {
        "Each node is its own host: its CPU figures are that host's.</p>\n"
    });
    out.push_str("<div class=\"tablewrap\"><table class=\"nodes\"><thead><tr><th>Scenario</th><th>Node</th><th>Role</th><th>CPU busy</th><th>softirq</th><th>Drops per run</th><th>Links as read back</th></tr></thead><tbody>\n");
    for sc in &s.scenarios {
        let mut nodes: Vec<(&String, &NodeFigures)> = sc.nodes.iter().collect();
        nodes.sort_by_key(|(name, n)| (rank(n), name.as_str()));
        for (name, n) in nodes {
            let _ = writeln!(
                out,
                "<tr data-node=\"{}\"><td class=\"axis\">{}</td><td class=\"axis\">{}</td><td class=\"axis\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"axis\">{}</td></tr>",
                esc(name),
                esc(&sc.key),
                esc(name),
                esc(&n.role),
                share(&n.cpu_busy),
                share(&n.cpu_softirq),
                figure(&n.drops, 1.0, ""),
                if n.links.is_empty() {
                    "–".to_string()
                } else {
                    esc(&n.links.join(" | "))
                }
            );
        }
    }
    out.push_str("</tbody></table></div>\n");
}

/// Colours of the three parts of a hop's time in its bar: queueing,
/// serialisation, propagation.
const HOP_COLOURS: [&str; 3] = ["#d95f02", "#1b9e77", "#7570b3"];

/// A hop's split as a stacked bar of fixed width (the parts' shares of the
/// hop's time), so where the time goes reads at a glance.
fn hop_bar(h: &HopFigures) -> String {
    let parts = [&h.queueing_s, &h.serialisation_s, &h.propagation_s]
        .map(|m| m.as_ref().map_or(0.0, |m| m.mean.max(0.0)));
    let total: f64 = parts.iter().sum();
    if total <= 0.0 {
        return String::new();
    }
    let mut bar = String::from(
        "<span class=\"hopbar\" style=\"display:inline-flex;width:10em;height:0.9em\">",
    );
    for (p, c) in parts.iter().zip(HOP_COLOURS) {
        let _ = write!(
            bar,
            "<span style=\"width:{:.1}%;background:{c}\"></span>",
            p / total * 100.0
        );
    }
    bar.push_str("</span>");
    bar
}

/// Writes the per-hop split of the one-way delay, or nothing when no
/// scenario has one (only runs over emulated links do).
pub fn hops_table(out: &mut String, s: &CampaignSummary) {
    if s.scenarios.iter().all(|sc| sc.hops.is_empty()) {
        return;
    }
    out.push_str("<h4>Where time went, per hop</h4>\n");
    let _ = writeln!(
        out,
        "<p class=\"legendnote\">Per direction of each emulated link, the mean time a frame spent there, over the repetitions (µs): <span style=\"color:{}\">■</span> queueing behind earlier frames on the wire, <span style=\"color:{}\">■</span> serialisation (its wire bytes at the link rate), <span style=\"color:{}\">■</span> propagation (delay, jitter, waiting not to overtake). Time in a node's own queue and network stack is not in it.</p>",
        HOP_COLOURS[0], HOP_COLOURS[1], HOP_COLOURS[2]
    );
    out.push_str("<div class=\"tablewrap\"><table class=\"hops\"><thead><tr><th>Scenario</th><th>Hop</th><th>Queueing</th><th>Serialisation</th><th>Propagation</th><th>Split</th></tr></thead><tbody>\n");
    for sc in &s.scenarios {
        for h in &sc.hops {
            let _ = writeln!(
                out,
                "<tr><td class=\"axis\">{}</td><td class=\"axis\">{}→{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&sc.key),
                esc(&h.from),
                esc(&h.to),
                figure(&h.queueing_s, 1e6, " µs"),
                figure(&h.serialisation_s, 1e6, " µs"),
                figure(&h.propagation_s, 1e6, " µs"),
                hop_bar(h)
            );
        }
    }
    out.push_str("</tbody></table></div>\n");
}
