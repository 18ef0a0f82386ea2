//! From stored runs to a [`CampaignSummary`]: one number per metric per run
//! (extracted from the result document), then mean / sd / CI / cv per
//! scenario over its repetitions, the percentage change against the
//! baseline scenario and the Ethernet upper bound beside throughput.
//!
//! Runs with several flows are folded into one number per metric so that a
//! repetition stays one sample: throughputs and packet counts add up,
//! means are weighted by received packets, tails (p99, max, PDV) take the
//! worst flow.

use crate::campaign::{parse_selector, Campaign, Scenario};
use crate::facts::Readable;
use crate::metrics::num;
use crate::store::{RunFilter, RunInfo, RunRow, RunStatus, Store, StoreError};
use crate::summary::{
    CampaignSummary, HopFigures, MetricInfo, MetricStats, NodeFigures, ScenarioSummary,
};
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;
pub(crate) use wirebench_report::text::{render_rows, si};
use wirebench_stats::result::ResultDoc;
use wirebench_stats::{aggregate, pct_change, upper_bound_tcp_bps, upper_bound_udp_bps, IpVersion};

/// Why a campaign summary could not be drawn.
#[derive(Debug, Error)]
pub enum AnalysisError {
    /// Reading the runs from the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The RFC 2544 search results could not be summarised.
    #[error(transparent)]
    Rfc2544(#[from] crate::rfc2544::SummaryError),
}

pub use wirebench_schema::metrics::metric_catalogue;
pub use wirebench_schema::summary::{above_bound, ABOVE_BOUND_TOLERANCE};

/// Per node of runs through agents (their counters hold `roles`): CPU
/// busy and softirq shares and the packets dropped on the node, gathered
/// one run's counters at a time and then aggregated over the runs.
#[derive(Default)]
struct NodeAcc(BTreeMap<String, NodeSamples>);

#[derive(Default)]
struct NodeSamples {
    role: String,
    busy: Vec<f64>,
    softirq: Vec<f64>,
    drops: Vec<f64>,
    links: std::collections::BTreeSet<String>,
}

impl NodeAcc {
    fn add(&mut self, c: &Value) {
        let Some(roles) = c.get("roles").and_then(Value::as_object) else {
            return;
        };
        for (node, role) in roles {
            let a = self.0.entry(node.clone()).or_default();
            a.role = role.as_str().unwrap_or("").to_string();
            if let Some(h) = c
                .get("cpu")
                .and_then(|x| x.get(node))
                .and_then(|x| x.get("host"))
            {
                if let Some(idle) = num(h, &["idle"]) {
                    a.busy.push(1.0 - idle);
                }
                if let Some(s) = num(h, &["softirq"]) {
                    a.softirq.push(s);
                }
            }
            if let Some(l) = c.get("links").and_then(|x| x.get(node)) {
                let t = crate::runner::links_text(l);
                if !t.is_empty() {
                    a.links.insert(t);
                }
            }
            // Only runs whose counters reached this node say how many it dropped.
            if c.get("nodes").and_then(|n| n.get(node)).is_some() {
                let d = c
                    .get("drop_sites")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|s| s.get("node").and_then(Value::as_str) == Some(node))
                    .filter_map(|s| num(s, &["count"]))
                    .sum();
                a.drops.push(d);
            }
        }
    }

    fn finish(self) -> BTreeMap<String, NodeFigures> {
        let stats = |v: &[f64]| aggregate(v).map(MetricStats::from);
        self.0
            .into_iter()
            .map(|(n, a)| {
                (
                    n,
                    NodeFigures {
                        role: a.role,
                        cpu_busy: stats(&a.busy),
                        cpu_softirq: stats(&a.softirq),
                        drops: stats(&a.drops),
                        links: a.links.into_iter().collect(),
                    },
                )
            })
            .collect()
    }
}

/// Per emulated hop (test-bed runs: the counters' `hops`), each run's mean
/// queueing, serialisation and propagation, in the order hops first
/// appear (a path's order).
#[derive(Default)]
struct HopAcc(Vec<(HopKey, [Vec<f64>; 3])>);

/// A hop: the nodes a frame leaves and reaches.
type HopKey = (String, String);

impl HopAcc {
    fn add(&mut self, c: &Value) {
        for h in c
            .get("hops")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // A direction listed only for its stalls timed no frame.
            if num(h, &["frames"]) == Some(0.0) {
                continue;
            }
            let end = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
            let key = (end("from"), end("to"));
            let i = match self.0.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    self.0.push((key, Default::default()));
                    self.0.len() - 1
                }
            };
            for (v, k) in
                self.0[i]
                    .1
                    .iter_mut()
                    .zip(["queueing_s", "serialisation_s", "propagation_s"])
            {
                if let Some(x) = num(h, &[k]) {
                    v.push(x);
                }
            }
        }
    }

    fn finish(self) -> Vec<HopFigures> {
        let stats = |v: &[f64]| aggregate(v).map(MetricStats::from);
        self.0
            .into_iter()
            .map(|((from, to), [q, s, p])| HopFigures {
                from,
                to,
                queueing_s: stats(&q),
                serialisation_s: stats(&s),
                propagation_s: stats(&p),
            })
            .collect()
    }
}

/// One value per metric key for one run: its result document and the
/// test-bed counters stored beside it (the metric table says how).
pub fn extract_metrics(doc: &ResultDoc, counters: Option<&Value>) -> BTreeMap<String, f64> {
    crate::metrics::extract(doc, counters)
}

/// The physical limit of payload throughput for a scenario (Gamess–Suros
/// Ethernet model), when link rate and MTU are known and the traffic is
/// the constant-size model.
pub fn upper_bound(s: &Scenario) -> Option<f64> {
    let st = &s.settings;
    let link = st.link_bps()?;
    let mtu = st.link.mtu?;
    if st.app != "constant" {
        return None;
    }
    let ip = if st.ip == 6 {
        IpVersion::V6
    } else {
        IpVersion::V4
    };
    if st.transport == "tcp" {
        Some(upper_bound_tcp_bps(link, mtu, ip))
    } else {
        Some(upper_bound_udp_bps(link, mtu, ip, st.payload?))
    }
}

/// The scenario `s` is compared with: its axes with the baseline
/// selector's values put in.
fn baseline_key(
    s: &BTreeMap<String, String>,
    selector: &[(String, String)],
    by_axes: &BTreeMap<BTreeMap<String, String>, String>,
) -> Option<String> {
    let mut want = s.clone();
    for (k, v) in selector {
        if !want.contains_key(k) {
            return None;
        }
        want.insert(k.clone(), v.clone());
    }
    by_axes.get(&want).cloned()
}

/// One scenario's figures while its runs are read.
#[derive(Default)]
struct ScenarioAcc {
    samples: BTreeMap<String, Vec<f64>>,
    ok: usize,
    runs_above_bound: usize,
    fragmented: bool,
    sites: BTreeMap<String, f64>,
    nodes: NodeAcc,
    hops: HopAcc,
    /// Runs in which a link emulator's nap ran out a ms or more late (the
    /// counters' `hops[].stalls`), and those stalls' summed lateness (s).
    stalled_runs: usize,
    stall_s: f64,
    /// Ok runs made again after a stall (`repeat_stalled`), and the
    /// attempts they set aside.
    repeated_runs: usize,
    set_aside: usize,
    series: crate::series::SeriesAcc,
    dist: crate::dist::ScenarioDist,
    systems: std::collections::BTreeSet<String>,
}

/// Builds a campaign's scenario summaries from its runs fed one at a
/// time: [`Summarizer::run`] for every run, then any of its metric values,
/// counters and (for series and histograms) result document. Memory grows
/// with scenarios and repetitions' numbers, never with documents.
pub struct Summarizer<'c> {
    campaign: Option<&'c Campaign>,
    planned: Vec<Scenario>,
    /// Scenario key, axes, bound; planned order, then as first seen.
    order: Vec<(String, BTreeMap<String, String>, Option<f64>)>,
    index: BTreeMap<String, usize>,
    acc: Vec<ScenarioAcc>,
    /// Run id → (scenario, its document read, its status ok).
    runs: std::collections::HashMap<i64, (usize, bool, bool)>,
    failed: usize,
    unreadable: Vec<String>,
    node_env: Option<serde_json::Map<String, Value>>,
}

impl<'c> Summarizer<'c> {
    /// `campaign` gives scenario order and the planned count; scenarios
    /// seen only in runs are appended.
    pub fn new(campaign: Option<&'c Campaign>) -> Summarizer<'c> {
        let planned: Vec<Scenario> = campaign.map(|c| c.expand()).unwrap_or_default();
        let mut s = Summarizer {
            campaign,
            planned: Vec::new(),
            order: Vec::new(),
            index: BTreeMap::new(),
            acc: Vec::new(),
            runs: std::collections::HashMap::new(),
            failed: 0,
            unreadable: Vec::new(),
            node_env: None,
        };
        for p in &planned {
            s.scenario(&p.key, &p.axes, upper_bound(p));
        }
        s.planned = planned;
        s
    }

    fn scenario(&mut self, key: &str, axes: &BTreeMap<String, String>, ub: Option<f64>) -> usize {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        self.order.push((key.to_string(), axes.clone(), ub));
        self.acc.push(ScenarioAcc::default());
        self.index.insert(key.to_string(), self.order.len() - 1);
        self.order.len() - 1
    }

    /// One run, with the facts extracted from its document.
    pub fn run(&mut self, r: &RunInfo) {
        let i = self.scenario(&r.scenario_key, &r.axes, None);
        let ok = r.status == RunStatus::Ok;
        let read = ok && r.facts.readable == Readable::Yes;
        self.runs.insert(r.id, (i, read, ok));
        if !ok {
            self.failed += 1;
            return;
        }
        if !read {
            // A document this version cannot read is left out and named.
            self.unreadable.push(format!(
                "run {} ({}): {}",
                r.id,
                r.scenario_key,
                r.facts.why.as_deref().unwrap_or("not a result document")
            ));
            return;
        }
        let a = &mut self.acc[i];
        a.ok += 1;
        a.runs_above_bound += usize::from(r.facts.above_bound);
        a.fragmented |= r.facts.fragmented;
        if let Some(s) = &r.facts.systems {
            a.systems.insert(s.clone());
        }
    }

    /// One metric value of a run already given to [`Summarizer::run`].
    pub fn value(&mut self, run_id: i64, key: &str, v: f64) {
        if let Some(&(i, true, _)) = self.runs.get(&run_id) {
            match self.acc[i].samples.get_mut(key) {
                Some(s) => s.push(v),
                None => {
                    self.acc[i].samples.insert(key.to_string(), vec![v]);
                }
            }
        }
    }

    /// A run's test-bed counters: its drop sites and node figures (ok
    /// runs) and the nodes' metadata (the latest run that stored some).
    pub fn counters(&mut self, run_id: i64, c: &Value) {
        if let Some(m) = c
            .get("metadata")
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty())
        {
            self.node_env = Some(m.clone());
        }
        let Some(&(i, _, true)) = self.runs.get(&run_id) else {
            return;
        };
        let a = &mut self.acc[i];
        let list = c.get("drop_sites").and_then(Value::as_array);
        for site in list.into_iter().flatten() {
            let name = format!(
                "{}/{} {}",
                site.get("node").and_then(Value::as_str).unwrap_or("?"),
                site.get("iface").and_then(Value::as_str).unwrap_or("?"),
                site.get("kind").and_then(Value::as_str).unwrap_or("?")
            );
            *a.sites.entry(name).or_default() += num(site, &["count"]).unwrap_or(0.0);
        }
        a.nodes.add(c);
        a.hops.add(c);
        let (stalls, stall_s) = crate::stalls::run_stalls(c);
        if stalls > 0 {
            a.stalled_runs += 1;
            a.stall_s += stall_s;
        }
        let n = crate::stalls::set_aside_count(c);
        if n > 0 {
            a.repeated_runs += 1;
            a.set_aside += n;
        }
    }

    /// A run's result document, for the figures drawn from whole
    /// documents (series, distributions).
    pub fn figures(&mut self, run_id: i64, doc: &ResultDoc) {
        if let Some(&(i, true, _)) = self.runs.get(&run_id) {
            let a = &mut self.acc[i];
            a.series.add(doc);
            crate::dist::add_doc(&mut a.dist, doc);
        }
    }

    /// Every agent node's metadata as environment lines (see
    /// `node_lines`), from the latest run that stored them.
    pub fn node_environment(&self) -> BTreeMap<String, String> {
        self.node_env.as_ref().map(node_lines).unwrap_or_default()
    }

    /// The scenario summaries and the notes about them.
    pub fn finish(self) -> (Vec<ScenarioSummary>, Vec<String>) {
        let Summarizer {
            campaign,
            planned,
            order,
            acc,
            failed,
            mut unreadable,
            ..
        } = self;
        let mut notes = campaign
            .map(|c| {
                let metric = c.adaptive.as_ref().map(|a| a.metric.as_str());
                let values = order
                    .iter()
                    .zip(&acc)
                    .map(|((key, _, _), a)| {
                        let v = metric.and_then(|m| a.samples.get(m)).cloned();
                        (key.clone(), v.unwrap_or_default())
                    })
                    .collect();
                crate::adaptive::notes_from_values(c, values)
            })
            .unwrap_or_default();
        let reps = campaign.map(|c| c.repetitions as usize).unwrap_or(0);
        let mut fragmented: Vec<String> = Vec::new();
        let mut drop_notes: Vec<String> = Vec::new();
        let mut stall_notes: Vec<String> = Vec::new();
        let mut repeat_notes: Vec<String> = Vec::new();
        let mut scenarios: Vec<ScenarioSummary> = Vec::new();
        let mut systems: Vec<Option<String>> = Vec::new();
        for ((key, axes, ub), a) in order.into_iter().zip(acc) {
            if a.fragmented {
                fragmented.push(key.clone());
            }
            if a.stalled_runs > 0 {
                stall_notes.push(format!(
                    "{key}: {} run(s), {:.1} ms",
                    a.stalled_runs,
                    a.stall_s * 1e3
                ));
            }
            if a.repeated_runs > 0 {
                repeat_notes.push(format!(
                    "{key}: {} run(s), {} attempt(s) set aside",
                    a.repeated_runs, a.set_aside
                ));
            }
            if !a.sites.is_empty() {
                let mut v: Vec<(String, f64)> = a.sites.into_iter().collect();
                v.sort_by(|a, b| b.1.total_cmp(&a.1));
                let list: Vec<String> = v.iter().map(|(n, c)| format!("{n} {c:.0}")).collect();
                drop_notes.push(format!("{key}: {}", list.join(", ")));
            }
            let metrics = a
                .samples
                .into_iter()
                .filter_map(|(k, v)| aggregate(&v).map(|x| (k, MetricStats::from(x))))
                .collect();
            let mut sys = a.systems;
            systems.push(if sys.len() == 1 {
                sys.pop_first()
            } else {
                None
            });
            scenarios.push(ScenarioSummary {
                // An adaptive scenario plans its least runs and takes more
                // until it settles (the notes say how many and which did not).
                runs_planned: if planned.iter().any(|p| p.key == key) {
                    if campaign.is_some_and(|c| c.adaptive.is_some()) {
                        reps.max(a.ok)
                    } else {
                        reps
                    }
                } else {
                    a.ok
                },
                key,
                axes,
                runs_ok: a.ok,
                metrics,
                upper_bound_bps: ub,
                runs_above_bound: a.runs_above_bound,
                nodes: a.nodes.finish(),
                hops: a.hops.finish(),
                series: a.series.finish(),
                dist: (a.dist.runs > 0).then_some(a.dist),
            });
        }
        if let Some(sel) = campaign
            .and_then(|c| c.baseline.as_deref())
            .and_then(parse_selector)
        {
            let by_axes: BTreeMap<BTreeMap<String, String>, String> = scenarios
                .iter()
                .map(|s| (s.axes.clone(), s.key.clone()))
                .collect();
            let means: BTreeMap<String, BTreeMap<String, f64>> = scenarios
                .iter()
                .map(|s| {
                    (
                        s.key.clone(),
                        s.metrics.iter().map(|(k, m)| (k.clone(), m.mean)).collect(),
                    )
                })
                .collect();
            // Scenarios left without a Δ: the selector names an axis they lack
            // (another [[matrix]] block) or their counterpart did not run.
            let mut unmatched: Vec<String> = Vec::new();
            for s in &mut scenarios {
                let base = baseline_key(&s.axes, &sel, &by_axes).and_then(|bk| means.get(&bk));
                let Some(base) = base else {
                    unmatched.push(s.key.clone());
                    continue;
                };
                for (k, m) in s.metrics.iter_mut() {
                    m.pct_vs_baseline = base.get(k).and_then(|b| pct_change(m.mean, *b));
                }
            }
            let sel_text = sel
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            if unmatched.len() == scenarios.len() {
                notes.push(format!(
                    "Baseline {sel_text} matches no scenario: no Δ column."
                ));
            } else if !unmatched.is_empty() {
                let n = unmatched.len();
                let more = n.saturating_sub(8);
                let mut list = unmatched[..n.min(8)].join("; ");
                if more > 0 {
                    list.push_str(&format!("; and {more} more"));
                }
                notes.push(format!(
                "Baseline {sel_text} has no counterpart for {n} of {} scenarios (their Δ is empty): {list}.",
                scenarios.len()
            ));
            }
        }
        // Two checks: the scenario's mean against the Ethernet bound of its
        // settings, and each run's own check (its packet mix and clock error,
        // total.above_bound), which also covers models without a fixed size.
        let above: Vec<String> = scenarios
            .iter()
            .filter(|s| s.above_bound())
            .map(|s| {
                let mut why = Vec::new();
                if let (Some(b), Some(m)) =
                    (s.upper_bound_bps, s.metrics.get("throughput_payload_bps"))
                {
                    if above_bound(m.mean, m.ci95, b) {
                        why.push(format!(
                            "{:.1} % of {:.2} Mbit/s",
                            100.0 * m.mean / b,
                            b / 1e6
                        ));
                    }
                }
                if s.runs_above_bound > 0 {
                    why.push(format!(
                        "{} of {} runs above their own bound",
                        s.runs_above_bound, s.runs_ok
                    ));
                }
                format!("{} ({})", s.key, why.join("; "))
            })
            .collect();
        if !above.is_empty() {
            notes.push(format!(
            "Above the physical bound: payload throughput exceeds the Ethernet upper bound by more than its 95 % CI (and the shaper's {:.1} % resolution), or runs carried more than their link by more than their own uncertainty (the result's total.above_bound), in {}. No link carries more than its bound; treat these numbers as a measurement or emulation error.",
            ABOVE_BOUND_TOLERANCE * 100.0,
            above.join("; ")
        ));
        }
        let noisy: Vec<&str> = scenarios
            .iter()
            .filter(|s| {
                s.metrics
                    .get("throughput_payload_bps")
                    .is_some_and(|m| m.cv_warning)
            })
            .map(|s| s.key.as_str())
            .collect();
        // RFC 2544 trials of one scenario run at different rates on purpose.
        let searches = campaign.is_some_and(|c| c.rfc2544.is_some());
        if !noisy.is_empty() && !searches {
            notes.push(format!(
                "{} scenario(s) have a payload-throughput coefficient of variation over 10 %: {}",
                noisy.len(),
                noisy.join("; ")
            ));
        }
        if failed > 0 {
            notes.push(format!("{failed} run(s) failed and are left out of the statistics; `wirebench results list` shows why"));
        }
        if !stall_notes.is_empty() {
            notes.push(format!(
                "Stalls: a link emulator woke a ms or more after a frame was due (its CPU was held: the hypervisor did not run it, kernel work ran there, or the real-time budget ran out) in {}. Those runs' throughput and delay carry the stall; `hops[].stall_s` in each run's counters says how long.",
                stall_notes.join("; ")
            ));
        }
        if !repeat_notes.is_empty() {
            notes.push(format!(
                "Repeated after a host stall (repeat_stalled): {}. Each attempt set aside is in the counters of the run that replaced it (`stalled_attempts`, with its result and counters).",
                repeat_notes.join("; ")
            ));
        }
        if !drop_notes.is_empty() {
            let more = drop_notes.len().saturating_sub(12);
            drop_notes.truncate(12);
            let mut n = format!(
            "Packet drops located by test-bed counters (node/interface kind, summed over the runs): {}",
            drop_notes.join("; ")
        );
            if more > 0 {
                n.push_str(&format!("; and {more} more scenario(s)"));
            }
            notes.push(n);
        }
        if !fragmented.is_empty() {
            notes.push(format!(
                "IP fragmentation detected in: {}",
                fragmented.join("; ")
            ));
        }
        if !unreadable.is_empty() {
            let n = unreadable.len();
            unreadable.truncate(4);
            notes.push(format!(
            "{n} run(s) have a result document this version cannot read and are left out of the statistics: {}{}",
            unreadable.join("; "),
            if n > 4 { "; ..." } else { "" }
        ));
        }
        add_systems(&mut scenarios, &systems);
        (scenarios, notes)
    }
}

/// Gives one run held in memory to a summarizer.
fn feed(s: &mut Summarizer, r: &RunRow) {
    let doc = match r.result_doc() {
        Some(Ok(d)) if r.status == RunStatus::Ok => Some(d),
        _ => None,
    };
    let x = match &doc {
        Some(d) => crate::facts::extract_doc(d, r.counters.as_ref()),
        None => crate::facts::extract_stored(r.result.as_ref(), r.counters.as_ref()),
    };
    s.run(&RunInfo {
        id: r.id,
        campaign_id: r.campaign_id,
        scenario_key: r.scenario_key.clone(),
        axes: r.axes.clone(),
        repetition: r.repetition,
        status: r.status,
        error: r.error.clone(),
        started_at: r.started_at.clone(),
        ended_at: r.ended_at.clone(),
        throughput_payload_bps: x.metrics.get("throughput_payload_bps").copied(),
        facts: x.facts,
    });
    for (k, v) in &x.metrics {
        s.value(r.id, k, *v);
    }
    if let Some(c) = &r.counters {
        s.counters(r.id, c);
    }
    if let Some(d) = &doc {
        s.figures(r.id, d);
    }
}

/// Builds the summary from runs held in memory (the store's reports read
/// it run by run instead, [`summarize`]).
pub fn summarize_runs(
    campaign: Option<&Campaign>,
    runs: &[RunRow],
) -> (Vec<ScenarioSummary>, Vec<String>) {
    let mut s = Summarizer::new(campaign);
    for r in runs {
        feed(&mut s, r);
    }
    s.finish()
}

/// How a report names an operating system (`host.os` of a result).
pub fn os_label(os: &str) -> String {
    match os {
        "linux" => "Linux".into(),
        "windows" => "Windows".into(),
        "macos" => "macOS".into(),
        "freebsd" => "FreeBSD".into(),
        other => other.to_string(),
    }
}

/// "Windows → Linux": the systems at the sending and the receiving end of
/// a run, from its result document (`host.os`, `receiver.host.os`); None
/// for documents written before they carried it.
pub fn systems(doc: &ResultDoc) -> Option<String> {
    let os = |s: &str| (!s.is_empty()).then(|| os_label(s));
    Some(format!(
        "{} → {}",
        os(&doc.host.os)?,
        os(&doc.receiver.host.os)?
    ))
}

/// The derived axis `systems` ("Windows → Linux"), so that a report draws
/// one series per pair of systems, as the studies did. Added to every
/// scenario whose runs agree on it, and only when some run involved a
/// system other than Linux (an all-Linux campaign keeps its axes as they
/// were). A `sender` axis that only names the node behind each pair of
/// systems (one node per pair and back) is then left out of the axes: the
/// systems say the same in the words of the comparison.
fn add_systems(scenarios: &mut [ScenarioSummary], found: &[Option<String>]) {
    if !found.iter().flatten().any(|s| s != "Linux → Linux") {
        return;
    }
    for (sc, s) in scenarios.iter_mut().zip(found) {
        if let Some(s) = s {
            sc.axes.insert("systems".into(), s.clone());
        }
    }
    let mut pairs: Vec<(String, String)> = scenarios
        .iter()
        .filter_map(|sc| {
            Some((
                sc.axes.get("sender")?.clone(),
                sc.axes.get("systems")?.clone(),
            ))
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    let one_to_one = !pairs.is_empty()
        && pairs.iter().all(|(n, s)| {
            pairs.iter().filter(|(n2, _)| n2 == n).count() == 1
                && pairs.iter().filter(|(_, s2)| s2 == s).count() == 1
        });
    let all_known = scenarios
        .iter()
        .all(|sc| !sc.axes.contains_key("sender") || sc.axes.contains_key("systems"));
    if one_to_one && all_known {
        for sc in scenarios.iter_mut() {
            sc.axes.remove("sender");
        }
    }
}

/// Summarises one campaign (by id or by name, the latest of that name).
pub fn summarize(
    store: &Store,
    campaign_name_or_id: &str,
) -> Result<CampaignSummary, AnalysisError> {
    let row = store.find_campaign(campaign_name_or_id)?;
    let mut campaign = Campaign::parse(&row.file_text, &row.origin).ok();
    if row.quick {
        if let Some(c) = campaign.as_mut() {
            let _ = c.apply_quick();
        }
    }
    let mut sum = Summarizer::new(campaign.as_ref());
    // Axis names of runs, for a campaign file that no longer parses.
    let mut run_axes: std::collections::BTreeSet<String> = Default::default();
    store.for_each_run(&RunFilter::campaign(row.id), |r| {
        run_axes.extend(r.axes.keys().cloned());
        sum.run(&r);
        Ok::<_, StoreError>(())
    })?;
    let ok = RunFilter {
        status: Some(RunStatus::Ok),
        ..RunFilter::campaign(row.id)
    };
    store.for_each_value(&ok, |id, k, v| {
        sum.value(id, k, v);
        Ok::<_, StoreError>(())
    })?;
    store.for_each_counters(row.id, |id, c| {
        sum.counters(id, &c);
        Ok::<_, StoreError>(())
    })?;
    store.for_each_figures_doc(row.id, |id, d| {
        sum.figures(id, d);
        Ok::<_, StoreError>(())
    })?;
    let node_env = sum.node_environment();
    let (scenarios, mut notes) = sum.finish();
    let axes = match &campaign {
        Some(c) => c.axis_names(),
        None => run_axes.into_iter().collect(),
    };
    if let Some(c) = &campaign {
        if matches!(c.target, crate::campaign::Target::Testbed(_)) {
            notes.push(
                "Emulated test-bed: every node shares one kernel, so router forwarding shows up as host softirq CPU (cpu_host_softirq), not as a router's own CPU."
                    .into(),
            );
        }
    }
    if row.quick {
        notes.push("Quick mode (--quick): fewer sizes, shorter runs and 2 repetitions; not for publication.".into());
    }
    if row.status != "done" {
        notes.push(format!(
            "Campaign status: {} (not every planned run may be present).",
            row.status
        ));
    }
    let present: std::collections::BTreeSet<&String> =
        scenarios.iter().flat_map(|s| s.metrics.keys()).collect();
    let metrics = metric_catalogue()
        .into_iter()
        .filter(|m| present.contains(&m.key))
        .collect();
    let mut environment = row.environment.clone();
    environment.extra.extend(node_env);
    let rfc2544 = match campaign.as_ref().is_some_and(|c| c.rfc2544.is_some()) {
        true => crate::rfc2544::summarize(store, &row)?,
        false => None,
    };
    Ok(CampaignSummary {
        name: row.name.clone(),
        campaign_file: row.file_text.clone(),
        started_at: row.started_at.clone(),
        environment,
        axes,
        x_axis: campaign.as_ref().and_then(|c| c.x_axis()),
        baseline: campaign.as_ref().and_then(|c| c.baseline.clone()),
        metrics,
        scenarios,
        notes,
        report: campaign
            .as_ref()
            .map(|c| c.report.clone())
            .unwrap_or_default(),
        rfc2544,
    })
}

/// One `node NAME` environment line per node of a run's `metadata`
/// (`node r1` → "host r1, Debian 12, kernel 6.1.0, Xeon E5 × 8; eth1
/// ixgbe fw 0x8000 mtu 9000 speed 10000 offloads tso,gro;
/// net.core.rmem_max=…; clock chrony …"): what a reader of the report
/// needs to know the lab ran as described.
pub(crate) fn node_lines(meta: &serde_json::Map<String, Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    for (node, m) in meta {
        let mut parts = vec![format!(
            "host {}, {}, kernel {}, {} × {}",
            s(m, "hostname"),
            s(m, "os"),
            s(m, "kernel"),
            s(m, "cpu_model"),
            m.get("cpus").and_then(Value::as_u64).unwrap_or(0)
        )];
        for i in m
            .get("interfaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|i| i.get("name").and_then(Value::as_str) != Some("lo"))
        {
            let mut t = s(i, "name");
            for (k, label) in [("driver", ""), ("firmware", "fw ")] {
                let v = s(i, k);
                if !v.is_empty() {
                    t.push_str(&format!(" {label}{v}"));
                }
            }
            if let Some(mtu) = i.get("mtu").and_then(Value::as_u64) {
                t.push_str(&format!(" mtu {mtu}"));
            }
            if let Some(sp) = i.get("speed_mbit").and_then(Value::as_u64) {
                t.push_str(&format!(" {sp} Mbit/s"));
            }
            let on: Vec<&str> = i
                .get("offloads")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| k.as_str())
                .collect();
            t.push_str(&format!(
                " offloads {}",
                if on.is_empty() {
                    "none".into()
                } else {
                    on.join(",")
                }
            ));
            parts.push(t);
        }
        if let Some(sys) = m.get("sysctls").and_then(Value::as_object) {
            let v: Vec<String> = sys
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            if !v.is_empty() {
                parts.push(v.join(" "));
            }
        }
        if let Some(c) = m.get("clock") {
            let mut clock = Vec::new();
            if let Some(ch) = c.get("chrony").and_then(Value::as_str) {
                clock.push(format!("chrony {ch}"));
            }
            match c.get("timesyncd").and_then(Value::as_bool) {
                Some(true) => clock.push("timesyncd synchronised".into()),
                Some(false) => clock.push("timesyncd not synchronised".into()),
                None => {}
            }
            for k in ["ptp_devices", "ptp_daemons"] {
                let v: Vec<&str> = c
                    .get(k)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if !v.is_empty() {
                    clock.push(v.join(","));
                }
            }
            parts.push(format!(
                "clock {}",
                if clock.is_empty() {
                    "no sync service seen".into()
                } else {
                    clock.join(", ")
                }
            ));
        }
        out.insert(format!("node {node}"), parts.join("; "));
    }
    out
}

/// The metrics of one stored run (empty when it has no result document or
/// one this version cannot read).
pub fn run_metrics(r: &RunRow) -> BTreeMap<String, f64> {
    match r.result_doc() {
        Some(Ok(d)) => extract_metrics(&d, r.counters.as_ref()),
        _ => BTreeMap::new(),
    }
}

/// A plain-text table for the terminal: one row per scenario, for each
/// metric present `mean ± ci95` (and `%` vs baseline), plus runs and the
/// share of the upper bound for payload throughput.
pub fn text_table(s: &CampaignSummary, metric_keys: &[&str]) -> String {
    let infos = metric_catalogue();
    let keys: Vec<&MetricInfo> = metric_keys
        .iter()
        .filter_map(|k| infos.iter().find(|m| m.key == *k))
        .filter(|m| s.scenarios.iter().any(|sc| sc.metrics.contains_key(&m.key)))
        .collect();
    let mut header = vec!["scenario".to_string(), "runs".to_string()];
    header.extend(keys.iter().map(|m| m.label.clone()));
    let mut rows = vec![header];
    for sc in &s.scenarios {
        let mut row = vec![
            sc.key.clone(),
            format!("{}/{}", sc.runs_ok, sc.runs_planned),
        ];
        for m in &keys {
            let cell = match sc.metrics.get(&m.key) {
                None => "-".to_string(),
                Some(st) => {
                    let mut c = format!("{} ± {}", si(st.mean, &m.unit), si(st.ci95, &m.unit));
                    if m.key == "throughput_payload_bps" {
                        if let Some(ub) = sc.upper_bound_bps.filter(|b| *b > 0.0) {
                            c.push_str(&format!(" ({:.1} % of bound)", 100.0 * st.mean / ub));
                        }
                    }
                    if let Some(p) = st.pct_vs_baseline.filter(|p| *p != 0.0) {
                        c.push_str(&format!(" [{p:+.1} %]"));
                    }
                    if st.cv_warning {
                        c.push_str(" !cv");
                    }
                    c
                }
            };
            row.push(cell);
        }
        rows.push(row);
    }
    render_rows(&rows)
}

/// The metrics a terminal summary shows by default.
pub const DEFAULT_TABLE_METRICS: &[&str] = &[
    "throughput_payload_bps",
    "delay_mean_s",
    "rtt_mean_s",
    "jitter_mean_abs_ipdv_s",
    "loss_ratio",
    "mos",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wirebench_stats::result::FlowResult;

    fn no_flows() -> ResultDoc {
        ResultDoc::with_flows(Vec::new())
    }

    fn flow_payload_bps(bps: f64) -> FlowResult {
        let mut f = FlowResult::default();
        f.throughput_bps.payload = bps;
        f
    }

    /// A stored run of scenario `key` whose result is `doc`.
    fn stored_run(key: &str, axes: &[(&str, &str)], rep: u32, doc: &ResultDoc) -> RunRow {
        RunRow {
            id: i64::from(rep),
            campaign_id: 1,
            scenario_key: key.into(),
            axes: axes
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            repetition: rep,
            status: RunStatus::Ok,
            result: Some(serde_json::to_value(doc).unwrap()),
            counters: None,
            command: String::new(),
            error: None,
            started_at: String::new(),
            ended_at: String::new(),
        }
    }

    /// Each run's `hops` become per-hop means over the runs, in the order
    /// hops first appear; runs without hops add nothing.
    #[test]
    fn hops_aggregate_over_runs() {
        let run = |q: f64| {
            json!({"hops": [
                {"from": "a", "to": "r1", "frames": 10, "queueing_s": q, "serialisation_s": 123.04e-6, "propagation_s": 0.0},
                {"from": "r1", "to": "b", "frames": 10, "queueing_s": 0.0, "serialisation_s": 10.4e-6, "propagation_s": 0.02}
            ]})
        };
        let mut acc = HopAcc::default();
        acc.add(&run(1e-6));
        acc.add(&json!({"drop_sites": []}));
        // A direction listed for its stall alone adds no means.
        acc.add(
            &json!({"hops": [{"from": "b", "to": "r1", "frames": 0, "queueing_s": 0.0,
            "serialisation_s": 0.0, "propagation_s": 0.0, "stalls": 1, "stall_s": 0.002}]}),
        );
        acc.add(&run(3e-6));
        let h = acc.finish();
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].from.as_str(), h[0].to.as_str()), ("a", "r1"));
        let q = h[0].queueing_s.as_ref().unwrap();
        assert_eq!(q.n, 2);
        assert!((q.mean - 2e-6).abs() < 1e-15);
        assert!((h[1].propagation_s.as_ref().unwrap().mean - 0.02).abs() < 1e-15);
    }

    /// Runs whose hops counted stalls are named in a note with their
    /// summed length, per scenario; runs without stalls add none.
    #[test]
    fn stalls_are_noted_per_scenario() {
        let counters = |stalls: u64, stall_s: f64| {
            json!({"hops": [
                {"from": "a", "to": "r1", "frames": 10, "queueing_s": 0.0, "serialisation_s": 1e-6,
                 "propagation_s": 0.0, "stalls": stalls, "stall_s": stall_s},
                {"from": "r1", "to": "b", "frames": 10, "queueing_s": 0.0, "serialisation_s": 1e-6,
                 "propagation_s": 0.0}
            ]})
        };
        let row = |key: &str, rep: u32, c: Value| RunRow {
            counters: Some(c),
            ..stored_run(key, &[("ip", &key[3..])], rep, &no_flows())
        };
        let runs = [
            row("ip=4", 0, counters(2, 0.0078)),
            row("ip=4", 1, counters(0, 0.0)),
            row("ip=4", 2, counters(1, 0.0021)),
            row("ip=6", 3, counters(0, 0.0)),
        ];
        let (_, notes) = summarize_runs(None, &runs);
        let n: Vec<&String> = notes.iter().filter(|n| n.starts_with("Stalls:")).collect();
        assert_eq!(n.len(), 1, "{notes:?}");
        assert!(n[0].contains("ip=4: 2 run(s), 9.9 ms"), "{}", n[0]);
        assert!(!n[0].contains("ip=6"), "{}", n[0]);
        let (_, quiet) = summarize_runs(None, &runs[1..2]);
        assert!(!quiet.iter().any(|n| n.starts_with("Stalls:")), "{quiet:?}");
    }

    /// Ok runs that replaced attempts set aside for a stall are counted
    /// per scenario, with the attempts; runs without any add no note.
    #[test]
    fn repeats_after_stalls_are_noted_per_scenario() {
        let aside = |n: usize| {
            let one = json!({"error": "repeated (repeat_stalled): ...", "counters": {}});
            json!({ crate::stalls::SET_ASIDE_KEY: vec![one; n] })
        };
        let row = |key: &str, rep: u32, c: Value| RunRow {
            counters: Some(c),
            ..stored_run(key, &[("ip", &key[3..])], rep, &no_flows())
        };
        let runs = [
            row("ip=4", 0, aside(2)),
            row("ip=4", 1, json!({})),
            row("ip=4", 2, aside(1)),
            row("ip=6", 3, json!({})),
        ];
        let (_, notes) = summarize_runs(None, &runs);
        let n: Vec<&String> = notes
            .iter()
            .filter(|n| n.starts_with("Repeated after a host stall"))
            .collect();
        assert_eq!(n.len(), 1, "{notes:?}");
        assert!(
            n[0].contains("ip=4: 2 run(s), 3 attempt(s) set aside"),
            "{}",
            n[0]
        );
        assert!(!n[0].contains("ip=6"), "{}", n[0]);
        let (_, quiet) = summarize_runs(None, &runs[1..2]);
        assert!(
            !quiet.iter().any(|n| n.starts_with("Repeated")),
            "{quiet:?}"
        );
    }

    /// A tbf that throttled 180 720 times and dropped nothing dropped
    /// nothing; drops are the test-bed's drop sites, counted once.
    #[test]
    fn overlimits_are_not_drops() {
        let q = |drops: u64, overlimits: u64| {
            json!({"kind": "tbf", "sent_bytes": 1, "sent_packets": 1, "drops": drops,
                   "overlimits": overlimits, "requeues": 0, "backlog_bytes": 0, "backlog_packets": 0})
        };
        let iface = |drops, overlimits| {
            json!({"rx_packets": 1, "rx_bytes": 1, "rx_dropped": 0, "rx_errors": 3,
                   "tx_packets": 1, "tx_bytes": 1, "tx_dropped": 0, "tx_errors": 0,
                   "qdisc": q(drops, overlimits)})
        };
        let clean = json!({"nodes": {"a": {"eth0": iface(0, 180_720)}}, "drop_sites": []});
        let m = extract_metrics(&no_flows(), Some(&clean));
        assert_eq!(m["testbed_drops"], 0.0);
        let lossy = json!({
            "nodes": {"a": {"eth0": iface(0, 5)}, "r1": {"eth1": iface(1994, 90_000)}},
            "drop_sites": [{"node": "r1", "iface": "eth1", "kind": "qdisc", "count": 1994}]
        });
        let m = extract_metrics(&no_flows(), Some(&lossy));
        assert_eq!(m["testbed_drops"], 1994.0);
        // Older stored runs without the list: the drop counters only.
        let old = json!({"nodes": {"r1": {"eth1": iface(7, 90_000)}}});
        let m = extract_metrics(&no_flows(), Some(&old));
        assert_eq!(m["testbed_drops"], 7.0);
    }

    #[test]
    fn run_throughput_is_the_total_over_the_union_span() {
        let mut doc = ResultDoc::with_flows(vec![flow_payload_bps(35.8e9), flow_payload_bps(1e6)]);
        doc.total.throughput_bps = wirebench_stats::Throughput {
            payload: 863e6,
            ip: 1.0,
            ethernet: 2.0,
            wire: 3.0,
        };
        let m = extract_metrics(&doc, None);
        assert_eq!(m["throughput_payload_bps"], 863e6);
        assert_eq!(m["throughput_wire_bps"], 3.0);
        // A document stored before the total existed: the flows' rates add up.
        let old = ResultDoc::with_flows(vec![flow_payload_bps(2.0), flow_payload_bps(3.0)]);
        let mut row = stored_run("x", &[], 0, &old);
        if let Some(total) = row.result.as_mut().and_then(|d| d["total"].as_object_mut()) {
            total.remove("throughput_bps");
        }
        assert!(row.result.as_ref().unwrap()["total"]
            .get("throughput_bps")
            .is_none());
        assert_eq!(run_metrics(&row)["throughput_payload_bps"], 5.0);
    }

    /// Every metric of the table is read from the typed document, and the
    /// flows of one run combine by the table's rule.
    #[test]
    fn flows_combine_by_the_tables_rule() {
        let flow = |packets: u64, delay_mean: f64, p99: f64, lost: u64, tcp: bool| {
            let mut f = FlowResult::default();
            f.sent.packets = packets + lost;
            f.received.counts.packets = packets;
            f.received.counts.lost = Some(lost);
            f.delay_s.mean = delay_mean;
            f.delay_s.p99 = p99;
            f.delay_s.min = delay_mean / 2.0;
            if tcp {
                f.tcp = Some(wirebench_stats::result::TcpInfo {
                    retransmits: 7,
                    ..Default::default()
                });
            }
            f
        };
        let doc = ResultDoc::with_flows(vec![
            flow(100, 0.001, 0.004, 0, false),
            flow(300, 0.002, 0.003, 100, true),
        ]);
        let m = extract_metrics(&doc, None);
        // Packet-weighted mean: (100·1 + 300·2) / 400 ms.
        assert!((m["delay_mean_s"] - 0.00175).abs() < 1e-12);
        assert_eq!(m["delay_p99_s"], 0.004);
        assert_eq!(m["delay_min_s"], 0.0005);
        assert_eq!(m["packets_received"], 400.0);
        assert_eq!(m["lost_packets"], 100.0);
        assert_eq!(m["loss_ratio"], 100.0 / 500.0);
        // Only the TCP flow has TCP figures; no flow has an RTT or E-model.
        assert_eq!(m["tcp_retransmits"], 7.0);
        assert!(!m.contains_key("rtt_mean_s") && !m.contains_key("mos"));
    }

    /// A stored document this version cannot read is left out and named,
    /// not counted as a run with zeros.
    #[test]
    fn unreadable_documents_are_noted() {
        let good = ResultDoc::with_flows(vec![flow_payload_bps(1e6)]);
        let mut bad = stored_run("s", &[], 1, &no_flows());
        bad.result =
            Some(json!({"schema": "wirebench.result/1", "flows": [{"transport": "sctp"}]}));
        let mut other = stored_run("s", &[], 2, &no_flows());
        other.result = Some(json!({"schema": "elsewhere/9"}));
        let runs = [stored_run("s", &[], 0, &good), bad, other.clone()];
        let (sc, notes) = summarize_runs(None, &runs);
        assert_eq!(sc[0].runs_ok, 1);
        assert_eq!(sc[0].metrics["throughput_payload_bps"].n, 1);
        let note = notes
            .iter()
            .find(|n| n.contains("cannot read"))
            .unwrap_or_else(|| panic!("{notes:?}"));
        assert!(
            note.starts_with("2 run(s)") && note.contains("elsewhere/9"),
            "{note}"
        );
        assert!(run_metrics(&other).is_empty());
    }

    /// A flow whose receiver report is missing has `lost: null`: the run's
    /// loss is unknown, not the other flows' loss.
    #[test]
    fn unknown_loss_of_one_flow_makes_the_runs_unknown() {
        let f = |lost: Option<u64>| {
            let mut f = FlowResult::default();
            f.sent.packets = 100;
            f.received.counts.lost = lost;
            f.received.counts.loss_ratio = lost.map(|l| l as f64 / 100.0);
            f
        };
        let known = ResultDoc::with_flows(vec![f(Some(5)), f(Some(15))]);
        let m = extract_metrics(&known, None);
        assert_eq!((m["lost_packets"], m["loss_ratio"]), (20.0, 0.1));
        let unknown = ResultDoc::with_flows(vec![f(Some(5)), f(None)]);
        let m = extract_metrics(&unknown, None);
        assert!(
            !m.contains_key("lost_packets") && !m.contains_key("loss_ratio"),
            "{m:?}"
        );
        // Stored as JSON null, read back as unknown.
        let row = stored_run("u", &[], 0, &unknown);
        assert_eq!(
            row.result.as_ref().unwrap()["flows"][1]["received"]["lost"],
            Value::Null
        );
        assert!(!run_metrics(&row).contains_key("lost_packets"));
    }

    /// A transfer's completion is the receiver's figure, never the sender's
    /// write span (20 ms for 5 MiB, under the 42.5 ms the wire needs).
    #[test]
    fn completion_is_the_transfers_never_the_write_span() {
        let sent_for = |secs: f64, completion_s: Option<f64>| {
            let mut f = FlowResult::default();
            f.sent.duration_s = secs;
            f.completion_s = completion_s;
            f
        };
        let timed = ResultDoc::with_flows(vec![sent_for(0.02, None)]);
        assert!(!extract_metrics(&timed, None).contains_key("completion_s"));
        let k = ResultDoc::with_flows(vec![
            sent_for(0.02, Some(0.0431)),
            sent_for(0.01, Some(0.0440)),
        ]);
        assert_eq!(extract_metrics(&k, None)["completion_s"], 0.0440);
    }

    /// A scenario above its physical bound is noted, not reported as a
    /// result (5 MB of TCP at 1 Gbit/s can read 103-121 % of the bound).
    #[test]
    fn results_above_the_bound_are_noted() {
        let text = r#"
name = "ab"
repetitions = 2
[testbed]
preset = "router"
link_rate = "100mbit"
mtu = 1500
[matrix]
payload = [1408, 512]
"#;
        let c = Campaign::parse(text, "ab.toml").unwrap();
        let row = |key: &str, payload: &str, rep: u32, bps: f64, flag: Option<bool>| {
            let mut doc = ResultDoc::with_flows(vec![flow_payload_bps(bps)]);
            doc.total.above_bound = flag;
            stored_run(key, &[("payload", payload)], rep, &doc)
        };
        let runs = [
            row("payload=1408", "1408", 0, 99.0e6, None),
            row("payload=1408", "1408", 1, 99.2e6, None),
            row("payload=512", "512", 0, 80.0e6, Some(false)),
            row("payload=512", "512", 1, 80.1e6, Some(false)),
        ];
        // The summary and its "Above the physical bound" note.
        let summary = |runs: &[RunRow]| {
            let (sc, notes) = summarize_runs(Some(&c), runs);
            let note = notes
                .iter()
                .find(|n| n.starts_with("Above the physical bound"))
                .cloned()
                .unwrap_or_else(|| panic!("{notes:?}"));
            (sc, note)
        };
        let (sc, note) = summary(&runs);
        assert!(
            note.contains("payload=1408 (103.7 % of 95.52 Mbit/s)"),
            "{note}"
        );
        assert!(!note.contains("payload=512"), "{note}");
        assert_eq!((sc[0].above_bound(), sc[1].above_bound()), (true, false));
        // A run whose own check fired (its packet mix, its clock error)
        // marks the scenario even when the mean is within the bound.
        let mut runs = runs;
        runs[3] = row("payload=512", "512", 1, 80.1e6, Some(true));
        let (sc, note) = summary(&runs);
        assert_eq!(sc[1].runs_above_bound, 1);
        assert!(sc[1].above_bound());
        assert!(
            note.contains("payload=512 (1 of 2 runs above their own bound)"),
            "{note}"
        );
    }

    #[test]
    fn above_bound_needs_more_than_the_uncertainty() {
        let b = 941.5e6;
        assert!(above_bound(1.03 * b, 0.01 * b, b));
        assert!(!above_bound(1.03 * b, 0.05 * b, b));
        assert!(!above_bound(1.0005 * b, 0.0, b));
        assert!(!above_bound(0.99 * b, 0.0, b));
    }

    /// A baseline that only some scenarios can be compared with says so
    /// instead of leaving their Δ silently empty.
    #[test]
    fn partial_baseline_is_noted() {
        let text = r#"
name = "b"
baseline = "ip=4"
[loopback]
[[matrix]]
ip = [4, 6]
payload = [64, 1408]
[[matrix]]
ip = [6]
app = ["dns"]
"#;
        let c = Campaign::parse(text, "b.toml").unwrap();
        let (_, notes) = summarize_runs(Some(&c), &[]);
        let note = notes
            .iter()
            .find(|n| n.starts_with("Baseline ip=4"))
            .unwrap_or_else(|| panic!("{notes:?}"));
        assert!(
            note.contains("no counterpart for 1 of 5 scenarios") && note.contains("app=dns"),
            "{note}"
        );
    }

    #[test]
    fn router_cpu_is_the_busiest_real_router() {
        let c = json!({
            "roles": {"a": "sender", "r1": "router", "r2": "router"},
            "cpu": {
                "a": {"host": {"idle": 0.1, "softirq": 0.0}},
                "r1": {"host": {"idle": 0.75, "softirq": 0.2}},
                "r2": {"host": {"idle": 0.5, "softirq": 0.4}}
            }
        });
        let m = extract_metrics(&no_flows(), Some(&c));
        assert_eq!(m["cpu_router_busy"], 0.5);
        assert_eq!(m["cpu_router_softirq"], 0.4);
        let none = extract_metrics(&no_flows(), Some(&json!({"nodes": {}})));
        assert!(!none.contains_key("cpu_router_busy"));
    }

    #[test]
    fn each_router_gets_its_own_cpu_and_drop_figures_and_metadata_line() {
        // Two repetitions through a — r1 — r2 — b: r1 idles, r2 is the
        // bottleneck and drops at its qdisc.
        let counters = |r1_idle: f64, r2_idle: f64, r2_drops: u64| {
            json!({
                "roles": {"a": "sender", "r1": "router", "r2": "router", "b": "receiver"},
                "cpu": {
                    "a": {"host": {"idle": 0.5, "softirq": 0.01}},
                    "r1": {"host": {"idle": r1_idle, "softirq": 0.05}},
                    "r2": {"host": {"idle": r2_idle, "softirq": 0.6}},
                    "b": {"host": {"idle": 0.7, "softirq": 0.02}}
                },
                "nodes": {"a": {}, "r1": {}, "r2": {}, "b": {}},
                "drop_sites": [{"node": "r2", "iface": "eth1", "kind": "qdisc", "count": r2_drops}],
                "metadata": {"r2": {
                    "hostname": "r2", "os": "Debian 12", "kernel": "6.1.0", "cpu_model": "Xeon",
                    "cpus": 8,
                    "interfaces": [{"name": "lo", "mtu": 65536}, {"name": "eth1", "driver": "ixgbe",
                        "firmware": "0x800", "mtu": 9000, "speed_mbit": 10000,
                        "offloads": {"tcp-segmentation-offload": true, "generic-receive-offload": false}}],
                    "sysctls": {"net.ipv4.ip_forward": "1"},
                    "clock": {"chrony": "synchronised, offset 12 us", "timesyncd": null,
                        "ptp_devices": [], "ptp_daemons": []}
                }}
            })
        };
        let row = |rep: u32, c: Value| RunRow {
            counters: Some(c),
            ..stored_run("ip=4", &[("ip", "4")], rep, &no_flows())
        };
        let runs = [
            row(0, counters(0.9, 0.2, 100)),
            row(1, counters(0.8, 0.4, 300)),
        ];
        let (sc, _) = summarize_runs(None, &runs);
        let n = &sc[0].nodes;
        assert_eq!(n.len(), 4);
        assert_eq!(n["r1"].role, "router");
        let busy = |k: &str| n[k].cpu_busy.as_ref().unwrap().mean;
        assert!((busy("r1") - 0.15).abs() < 1e-9, "{}", busy("r1"));
        assert!((busy("r2") - 0.7).abs() < 1e-9, "{}", busy("r2"));
        assert!((n["r2"].cpu_softirq.as_ref().unwrap().mean - 0.6).abs() < 1e-9);
        assert_eq!(n["r2"].drops.as_ref().unwrap().mean, 200.0);
        assert_eq!(n["r1"].drops.as_ref().unwrap().mean, 0.0);
        // Runs without agents have no node figures.
        let mut plain = row(0, json!({"nodes": {}}));
        plain.counters = None;
        assert!(summarize_runs(None, &[plain]).0[0].nodes.is_empty());
        let mut s = Summarizer::new(None);
        for r in &runs {
            feed(&mut s, r);
        }
        let env = s.node_environment();
        assert_eq!(
            env["node r2"],
            "host r2, Debian 12, kernel 6.1.0, Xeon × 8; eth1 ixgbe fw 0x800 mtu 9000 10000 Mbit/s offloads tcp-segmentation-offload; net.ipv4.ip_forward=1; clock chrony synchronised, offset 12 us"
        );
    }
}
