//! Several campaigns (from one store or several) as one: each campaign's
//! scenarios gain a `campaign` axis holding the label the user gave it
//! ("Windows 7 → Linux"), so the usual charts draw the campaigns as series
//! and the side-by-side tables put them in columns. Its own module because
//! it is the only place that builds a summary instead of drawing one.

use wirebench_schema::summary::{CampaignSummary, Environment, ScenarioSummary};

/// The axis that names the campaign in a combined summary.
pub const CAMPAIGN_AXIS: &str = "campaign";

/// Why campaigns cannot be combined.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CombineError {
    /// Fewer than two campaigns.
    #[error("combining needs two or more campaigns, got {0}")]
    TooFew(usize),
    /// Two campaigns with one label would be one series.
    #[error("label {0:?} is given to two campaigns: each needs its own")]
    DuplicateLabel(String),
    /// A campaign already varies an axis called `campaign`.
    #[error("campaign {0:?} has an axis named \"campaign\", which combining adds")]
    AxisTaken(String),
}

/// One summary over `parts` (label, campaign): scenario keys and axes gain
/// `campaign=LABEL`, metrics are the union, the side-by-side column is the
/// campaign, the environment of each campaign is kept under its label.
pub fn combine(parts: &[(String, CampaignSummary)]) -> Result<CampaignSummary, CombineError> {
    if parts.len() < 2 {
        return Err(CombineError::TooFew(parts.len()));
    }
    for (i, (l, s)) in parts.iter().enumerate() {
        if parts[..i].iter().any(|(o, _)| o == l) {
            return Err(CombineError::DuplicateLabel(l.clone()));
        }
        if crate::plan::all_axes(s).iter().any(|a| a == CAMPAIGN_AXIS) {
            return Err(CombineError::AxisTaken(s.name.clone()));
        }
    }
    let first = &parts[0].1;
    let mut axes = vec![CAMPAIGN_AXIS.to_string()];
    let mut metrics = Vec::new();
    let mut scenarios: Vec<ScenarioSummary> = Vec::new();
    let mut notes = Vec::new();
    let mut files = String::new();
    let mut env = Environment::default();
    for (label, s) in parts {
        for a in &s.axes {
            if !axes.contains(a) {
                axes.push(a.clone());
            }
        }
        for m in &s.metrics {
            if !metrics
                .iter()
                .any(|x: &wirebench_schema::summary::MetricInfo| x.key == m.key)
            {
                metrics.push(m.clone());
            }
        }
        for sc in &s.scenarios {
            let mut sc = sc.clone();
            sc.axes.insert(CAMPAIGN_AXIS.into(), label.clone());
            sc.key = format!("{CAMPAIGN_AXIS}={label},{}", sc.key);
            scenarios.push(sc);
        }
        notes.push(format!(
            "{label}: campaign {} started {} ({} scenarios)",
            s.name,
            s.started_at,
            s.scenarios.len()
        ));
        notes.extend(s.notes.iter().map(|n| format!("{label}: {n}")));
        files.push_str(&format!("# ---- {label}: campaign {} ----\n", s.name));
        files.push_str(&s.campaign_file);
        if !s.campaign_file.ends_with('\n') {
            files.push('\n');
        }
        let e = &s.environment;
        let facts = [
            ("kernel", e.kernel.clone()),
            ("CPU", e.cpu_model.clone()),
            (
                "CPUs",
                if e.cpus > 0 {
                    e.cpus.to_string()
                } else {
                    String::new()
                },
            ),
            ("tool version", e.tool_version.clone()),
            ("topology", e.topology.clone()),
        ];
        let text: Vec<String> = facts
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        env.extra.insert(label.clone(), text.join("; "));
        // The CPU limit of a chart holds for every campaign: the smallest.
        env.cpus = if env.cpus == 0 {
            e.cpus
        } else {
            env.cpus.min(e.cpus.max(1))
        };
    }
    let labels: Vec<&str> = parts.iter().map(|(l, _)| l.as_str()).collect();
    let mut report = first.report.clone();
    report.columns = Some(CAMPAIGN_AXIS.into());
    Ok(CampaignSummary {
        name: format!("combined: {}", labels.join(" | ")),
        campaign_file: files,
        started_at: first.started_at.clone(),
        environment: env,
        axes,
        x_axis: first.x_axis.clone(),
        baseline: None,
        metrics,
        scenarios,
        notes,
        report,
        rfc2544: None,
    })
}
