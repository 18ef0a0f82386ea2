//! `wirebench results`: look inside the results store without SQL — list
//! campaigns and their runs, show one run's result document, export runs
//! as JSON or CSV.

use crate::exit::bad_input;
use std::io::Write;
use std::path::PathBuf;
use wirebench_campaign::analysis::run_metrics;
use wirebench_campaign::{RunStatus, Store, StoreError};

#[derive(clap::Args)]
pub struct Args {
    /// Results store (SQLite).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "wirebench.db",
        global = true
    )]
    pub db: PathBuf,
    #[command(subcommand)]
    pub what: What,
}

#[derive(clap::Subcommand)]
pub enum What {
    /// Without CAMPAIGN: every campaign. With it (name or id): its runs.
    List { campaign: Option<String> },
    /// One run's stored record and result document (JSON).
    Show {
        /// Run id (from `results list CAMPAIGN`).
        run: i64,
    },
    /// Every run of a campaign as JSON (full documents) or CSV (one metric per column).
    Export {
        /// Campaign name (latest of that name) or id; default: the latest campaign.
        campaign: Option<String>,
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
        /// Output file (default: standard output).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

fn store_err(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::Missing(_) | StoreError::NoCampaign(_) => bad_input(e),
        other => anyhow::Error::new(other),
    }
}

fn campaign_row(
    store: &Store,
    which: Option<&str>,
) -> anyhow::Result<wirebench_campaign::CampaignRow> {
    match which {
        Some(w) => store.find_campaign(w).map_err(store_err),
        None => store
            .latest()
            .map_err(store_err)?
            .ok_or_else(|| bad_input(format!("{} holds no campaign", store.path().display()))),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = Store::open_existing(&args.db).map_err(store_err)?;
    let mut out = std::io::stdout().lock();
    match args.what {
        What::List { campaign: None } => {
            writeln!(
                out,
                "{:>4}  {:<24}  {:<24}  {:>9}  {:<11}  file",
                "id", "name", "started", "runs", "status"
            )?;
            for c in store.campaigns().map_err(store_err)? {
                let runs = store.runs(c.id).map_err(store_err)?;
                let ok = runs.iter().filter(|r| r.status == RunStatus::Ok).count();
                writeln!(
                    out,
                    "{:>4}  {:<24}  {:<24}  {:>9}  {:<11}  {}{}",
                    c.id,
                    c.name,
                    c.started_at,
                    format!("{ok}/{}", c.planned_runs),
                    c.status,
                    c.origin,
                    if c.quick { " (quick)" } else { "" }
                )?;
            }
        }
        What::List { campaign: Some(w) } => {
            let c = campaign_row(&store, Some(&w))?;
            writeln!(
                out,
                "campaign {} {:?} ({}), {} planned runs",
                c.id, c.name, c.status, c.planned_runs
            )?;
            writeln!(
                out,
                "{:>6}  {:>3}  {:<6}  {:>14}  scenario / error",
                "run", "rep", "status", "payload bit/s"
            )?;
            for r in store.runs(c.id).map_err(store_err)? {
                let m = run_metrics(&r);
                let tp = m
                    .get("throughput_payload_bps")
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into());
                writeln!(
                    out,
                    "{:>6}  {:>3}  {:<6}  {:>14}  {}",
                    r.id,
                    r.repetition + 1,
                    r.status.as_str(),
                    tp,
                    r.scenario_key
                )?;
                if let Some(e) = &r.error {
                    writeln!(out, "{:>35}  {}", "", e.lines().next().unwrap_or(""))?;
                }
            }
        }
        What::Show { run } => {
            let r = store
                .run(run)
                .map_err(store_err)?
                .ok_or_else(|| bad_input(format!("no run {run} in {}", args.db.display())))?;
            writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
        }
        What::Export {
            campaign,
            format,
            output,
        } => {
            let c = campaign_row(&store, campaign.as_deref())?;
            let runs = store.runs(c.id).map_err(store_err)?;
            let text = match format {
                Format::Json => {
                    let v = serde_json::json!({ "campaign": c, "runs": runs });
                    serde_json::to_string_pretty(&v)?
                }
                Format::Csv => {
                    let recs: Vec<wirebench_report::RunRecord> = runs
                        .iter()
                        .map(|r| wirebench_report::RunRecord {
                            campaign: c.name.clone(),
                            scenario: r.scenario_key.clone(),
                            repetition: u64::from(r.repetition),
                            status: r.status.as_str().to_string(),
                            axes: r.axes.clone(),
                            metrics: run_metrics(r),
                        })
                        .collect();
                    wirebench_report::runs_csv(&recs)
                }
            };
            match output {
                Some(p) => wirebench_input::write_file(&p, (text + "\n").as_bytes())?,
                None => writeln!(out, "{text}")?,
            }
        }
    }
    Ok(())
}
