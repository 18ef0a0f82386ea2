//! `wirebench report`: reads campaigns from the results store, aggregates
//! them (`wirebench_campaign::summarize`) and writes the self-contained HTML
//! report, and on request CSV and JSON exports of every aggregate and run.

use crate::exit::bad_input;
use anyhow::Context;
use std::path::{Path, PathBuf};
use wirebench_campaign::store::{CampaignRow, Store, StoreError};
use wirebench_campaign::summary::{CampaignSummary, ThroughputUnits};
use wirebench_report::RunRecord;

#[derive(clap::Args)]
#[command(
    after_help = "Combining campaigns: `wirebench report win7-lin.db lin-lin.db --label \"Windows 7 → Linux\" --label \"Linux → Linux\"` draws both in one section first: one table with a column per label and one chart with a series per label."
)]
pub struct Args {
    /// Results stores to combine into one section (each store's campaigns,
    /// or those named by --campaign, in order); with one store the same as
    /// --db.
    #[arg(value_name = "DB")]
    pub dbs: Vec<PathBuf>,
    /// Results store: an SQLite file written by `wirebench run`, or a
    /// PostgreSQL database a lab shares, postgres://USER@HOST[:PORT]/DB (the
    /// password from PGPASSWORD or ~/.pgpass, never from the URL;
    /// docs/campaigns.md "Results store"); default wirebench.db when no DB
    /// is given.
    #[arg(
        long,
        value_name = "FILE|URL",
        conflicts_with = "dbs",
        env = "WIREBENCH_DB",
        hide_env_values = true
    )]
    pub db: Option<PathBuf>,
    /// Combine the campaigns into one section first, this label naming the
    /// next campaign (in store order, then --campaign order), e.g.
    /// "Windows 7 → Linux": one table with a column per label, one chart
    /// with a series per label. Repeat once per campaign. Without --label,
    /// two or more DBs are combined under their campaign names.
    #[arg(long, value_name = "TEXT")]
    pub label: Vec<String>,
    /// Campaign to report, by name (its latest run) or numeric id; repeat for
    /// several. Default: the latest campaign of every name in the store.
    #[arg(long, value_name = "NAME")]
    pub campaign: Vec<String>,
    /// HTML report to write.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "report.html"
    )]
    pub output: PathBuf,
    /// Also write aggregates.csv and runs.csv into this directory.
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Also write every aggregate and run as one JSON document.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Put the values of this axis side by side in the tables, with the
    /// change against the first and a mean row per sweep (S3's "IPv4 |
    /// IPv6"); overrides the campaign's `[report] columns`.
    #[arg(long, value_name = "AXIS")]
    pub columns: Option<String>,
    /// Throughput units: si (bit/s, kbit/s, Mbit/s or Gbit/s, chosen per
    /// chart and column), ditg (the studies' D-ITG "Kbps" = ITGDec's kbit/s,
    /// "Mbps" = kbit/s ÷ 1024), or one unit forced on every throughput:
    /// bit/s, kbit/s, Mbit/s, Gbit/s, Kbps, Mbps; overrides `[report] units`.
    #[arg(long, value_parser = parse_units, value_name = "UNITS")]
    pub units: Option<ThroughputUnits>,
    /// Every y axis starts at zero, even where the values differ by a few
    /// per cent (by default such line charts are zoomed, and say so).
    #[arg(long)]
    pub no_zoom: bool,
}

/// `--units`: the names campaign files accept.
fn parse_units(s: &str) -> Result<ThroughputUnits, String> {
    ThroughputUnits::parse(s).ok_or_else(|| {
        format!(
            "unknown units {s:?}; one of {}",
            ThroughputUnits::NAMES.join(", ")
        )
    })
}

/// The parent directory of an output file must exist: a typo there is the
/// user's, so it is bad input named by its flag, found before any work.
pub(crate) fn check_parent(flag: &str, path: &Path) -> anyhow::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() && !p.is_dir() => Err(bad_input(format!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            p.display()
        ))),
        _ => Ok(()),
    }
}

fn known_list(rows: &[CampaignRow]) -> String {
    if rows.is_empty() {
        return "the store holds no campaign".into();
    }
    let items: Vec<String> = rows
        .iter()
        .map(|r| format!("{} (id {}, {}, {})", r.name, r.id, r.started_at, r.status))
        .collect();
    format!("known campaigns: {}", items.join("; "))
}

/// Resolves `--campaign` values (or the default) to campaign rows.
fn select(store: &Store, wanted: &[String]) -> anyhow::Result<Vec<CampaignRow>> {
    let all = store.campaigns().context("reading the results store")?;
    if wanted.is_empty() {
        if all.is_empty() {
            return Err(bad_input(format!(
                "results store {} holds no campaign; run one with `wirebench run CAMPAIGN.toml --db {}`",
                store.path().display(),
                store.path().display()
            )));
        }
        // The latest campaign of each name, in the order names first appeared.
        let mut names: Vec<&str> = Vec::new();
        for r in &all {
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
        return Ok(names
            .iter()
            .filter_map(|n| all.iter().rev().find(|r| r.name == *n).cloned())
            .collect());
    }
    let mut out: Vec<CampaignRow> = Vec::new();
    for w in wanted {
        match store.find_campaign(w) {
            Ok(row) => {
                if !out.iter().any(|r| r.id == row.id) {
                    out.push(row);
                }
            }
            Err(StoreError::NoCampaign(_)) => {
                return Err(bad_input(format!(
                    "--campaign {w:?}: no such campaign in {}; {}",
                    store.path().display(),
                    known_list(&all)
                )))
            }
            Err(e) => return Err(e).context("reading the results store"),
        }
    }
    Ok(out)
}

fn run_records(store: &Store, rows: &[CampaignRow]) -> anyhow::Result<Vec<RunRecord>> {
    let mut out = Vec::new();
    for c in rows {
        out.extend(
            crate::cmd::results::run_records(store, c, true)
                .with_context(|| format!("reading the runs of campaign {}", c.name))?,
        );
    }
    Ok(out)
}

/// Checks a store path named by `flag` before anything is read.
fn check_store(flag: &str, db: &Path) -> anyhow::Result<()> {
    let url = wirebench_campaign::store::is_postgres(db);
    if !url && !db.exists() {
        return Err(bad_input(format!(
            "{flag} {}: results store does not exist (write one with `wirebench run CAMPAIGN.toml --db {}`)",
            db.display(),
            db.display()
        )));
    }
    if !url && db.is_dir() {
        return Err(bad_input(format!(
            "{flag} {}: is a directory, not a results store",
            db.display()
        )));
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (dbs, flag): (Vec<PathBuf>, &str) = match (&args.db, args.dbs.is_empty()) {
        (Some(d), _) => (vec![d.clone()], "--db"),
        (None, true) => (vec![PathBuf::from("wirebench.db")], "--db"),
        (None, false) => (args.dbs.clone(), "DB"),
    };
    for db in &dbs {
        check_store(flag, db)?;
    }
    check_parent("-o", &args.output)?;
    if let Some(j) = &args.json {
        check_parent("--json", j)?;
    }
    if let Some(d) = &args.csv {
        if d.exists() && !d.is_dir() {
            return Err(bad_input(format!(
                "--csv {}: exists and is not a directory",
                d.display()
            )));
        }
    }

    // Every (store, campaign) in order: store order, then --campaign order.
    let mut summaries: Vec<CampaignSummary> = Vec::new();
    let mut runs: Vec<RunRecord> = Vec::new();
    let want_runs = args.csv.is_some() || args.json.is_some();
    for db in &dbs {
        let store = Store::open_existing(db).map_err(|e| match e {
            StoreError::Missing(_) | StoreError::BadUrl { .. } => {
                bad_input(format!("{flag} {}: {e}", db.display()))
            }
            e => anyhow::Error::new(e).context(format!("{flag} {}", db.display())),
        })?;
        let rows = select(&store, &args.campaign)?;
        for r in &rows {
            let s = wirebench_campaign::summarize(&store, &r.id.to_string())
                .with_context(|| format!("summarising campaign {} (id {})", r.name, r.id))?;
            summaries.push(s);
        }
        if want_runs {
            runs.extend(run_records(&store, &rows)?);
        }
    }

    for s in &mut summaries {
        if let Some(c) = &args.columns {
            if !wirebench_report::plan::varying_axes(s).contains(c) {
                return Err(bad_input(format!(
                    "--columns {c:?}: campaign {} does not vary that axis (it varies: {})",
                    s.name,
                    wirebench_report::plan::varying_axes(s).join(", ")
                )));
            }
            s.report.columns = Some(c.clone());
        }
        if let Some(u) = args.units {
            s.report.units = u;
        }
        if args.no_zoom {
            s.report.zoom = false;
        }
    }

    if !args.label.is_empty() || dbs.len() > 1 {
        let labels: Vec<String> = if args.label.is_empty() {
            summaries.iter().map(|s| s.name.clone()).collect()
        } else if args.label.len() == summaries.len() {
            args.label.clone()
        } else {
            let names: Vec<&str> = summaries.iter().map(|s| s.name.as_str()).collect();
            return Err(bad_input(format!(
                "--label: {} given for {} campaigns ({}); give one per campaign, in that order",
                args.label.len(),
                summaries.len(),
                names.join(", ")
            )));
        };
        let parts: Vec<(String, CampaignSummary)> =
            labels.into_iter().zip(summaries.iter().cloned()).collect();
        let mut combined =
            wirebench_report::combine(&parts).map_err(|e| bad_input(format!("--label: {e}")))?;
        if let Some(c) = &args.columns {
            if wirebench_report::plan::varying_axes(&combined).contains(c) {
                combined.report.columns = Some(c.clone());
            }
        }
        summaries.insert(0, combined);
    }

    wirebench_report::write_html(&summaries, &args.output)?;
    let scenarios: usize = summaries.iter().map(|s| s.scenarios.len()).sum();
    println!(
        "wrote {} ({} campaign section{}, {} scenarios)",
        args.output.display(),
        summaries.len(),
        if summaries.len() == 1 { "" } else { "s" },
        scenarios
    );

    let runs = want_runs.then_some(runs);
    if let Some(dir) = &args.csv {
        for p in wirebench_report::write_csv(dir, &summaries, runs.as_deref())? {
            println!("wrote {}", p.display());
        }
    }
    if let Some(path) = &args.json {
        wirebench_report::write_json(path, &summaries, runs.as_deref())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
