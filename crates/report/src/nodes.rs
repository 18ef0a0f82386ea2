//! The per-node table of campaigns run through agents (real hosts, the
//! emulated test-bed): for every scenario, each node's CPU (busy and
//! softirq share of all its cores) and the packets dropped on it per run —
//! the studies' R1/R2 CPU figures and where along the path packets were
//! lost. Its own module so the main document only calls it.

use crate::fmt::{esc, mean_ci, mean_ci_in};
use std::fmt::Write as _;
use wirebench_schema::summary::{CampaignSummary, MetricStats, NodeFigures};

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
