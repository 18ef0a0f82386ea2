//! `wirebench results`: look inside the results store without SQL — list
//! campaigns and their runs (filtered and paged), show one run's result
//! document, export runs as JSON, CSV or tidy long rows (CSV, Parquet).
//! Lists and exports read one run at a time and the values the store
//! extracted when each run was stored, never every document at once.

use crate::exit::bad_input;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use wirebench_campaign::store::{RunFilter, RunInfo};
use wirebench_campaign::{CampaignRow, RunStatus, Store, StoreError};

#[derive(clap::Args)]
pub struct Args {
    /// Results store: an SQLite file, or a PostgreSQL database a lab shares,
    /// postgres://USER@HOST[:PORT]/DB (the password from PGPASSWORD or
    /// ~/.pgpass, never from the URL; docs/campaigns.md "Results store").
    #[arg(
        long,
        value_name = "FILE|URL",
        default_value = "wirebench.db",
        env = "WIREBENCH_DB",
        hide_env_values = true,
        global = true
    )]
    pub db: PathBuf,
    #[command(subcommand)]
    pub what: What,
}

#[derive(clap::Subcommand)]
pub enum What {
    /// Without a campaign: every campaign with its finished runs. With one
    /// (name or id) or with --status: the runs, oldest first, a page at a
    /// time with --limit and --offset.
    List {
        /// Campaign name (its latest run) or id.
        campaign: Option<String>,
        /// The same as CAMPAIGN.
        #[arg(long = "campaign", value_name = "NAME", conflicts_with = "campaign")]
        campaign_flag: Option<String>,
        /// Only runs of this outcome (across every campaign when none is named).
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// Only campaigns or runs started at or after this time: a UTC date
        /// (2026-11-01), an RFC 3339 time (2026-11-01T12:00:00Z) or an age
        /// (36h, 7d).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// At most this many campaigns (the latest) or runs.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Skip this many runs first (the next page: --offset = pages × --limit).
        #[arg(long, value_name = "N", default_value_t = 0)]
        offset: u64,
    },
    /// One run's stored record and result document (JSON).
    Show {
        /// Run id (from `results list CAMPAIGN`).
        run: i64,
    },
    /// Every run of a campaign: JSON (full documents), CSV (one run per row,
    /// one metric per column), or tidy long rows, one per run and metric
    /// (long: CSV; parquet: Apache Parquet, needs -o).
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
    /// Tidy CSV: campaign, run, scenario, axes, repetition, status, started, metric, unit, value.
    Long,
    /// The long rows as Apache Parquet.
    Parquet,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum StatusArg {
    Ok,
    Failed,
}

/// A store error as the CLI reports it: what the user named wrong (a
/// missing store or campaign, a bad URL) exits 2.
pub(crate) fn store_err(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::Missing(_) | StoreError::NoCampaign(_) | StoreError::BadUrl { .. } => {
            bad_input(e)
        }
        other => anyhow::Error::new(other),
    }
}

fn campaign_row(store: &Store, which: Option<&str>) -> anyhow::Result<CampaignRow> {
    match which {
        Some(w) => store.find_campaign(w).map_err(store_err),
        None => store
            .latest()
            .map_err(store_err)?
            .ok_or_else(|| bad_input(format!("{} holds no campaign", store.path().display()))),
    }
}

/// `--since`: a UTC date, an RFC 3339 time or an age, as the RFC 3339
/// UTC text the store's times compare with.
fn since_time(s: &str) -> anyhow::Result<String> {
    let bad = || {
        bad_input(format!(
            "--since {s:?}: not a date (2026-11-01), an RFC 3339 time (2026-11-01T12:00:00Z) or an age (36h, 7d)"
        ))
    };
    if let Ok(age) = humantime::parse_duration(s) {
        let t = std::time::SystemTime::now()
            .checked_sub(age)
            .ok_or_else(bad)?;
        return Ok(humantime::format_rfc3339_millis(t).to_string());
    }
    let full = if s.len() == 10 {
        format!("{s}T00:00:00Z")
    } else {
        s.to_string()
    };
    let t = humantime::parse_rfc3339_weak(full.trim_end_matches('Z')).map_err(|_| bad())?;
    Ok(humantime::format_rfc3339_millis(t).to_string())
}

/// A campaign's runs as records for the wide exports: status (with the
/// error when `with_error`), axes and every extracted metric value.
pub(crate) fn run_records(
    store: &Store,
    c: &CampaignRow,
    with_error: bool,
) -> Result<Vec<wirebench_report::RunRecord>, StoreError> {
    let mut out = Vec::new();
    let mut index = std::collections::HashMap::new();
    let filter = RunFilter::campaign(c.id);
    store.for_each_run(&filter, |r| {
        let mut status = r.status.as_str().to_string();
        if let Some(e) = r.error.as_deref().filter(|e| with_error && !e.is_empty()) {
            status = format!("{status}: {e}");
        }
        index.insert(r.id, out.len());
        out.push(wirebench_report::RunRecord {
            campaign: c.name.clone(),
            scenario: r.scenario_key,
            // Counted from 1, as `results list` shows it.
            repetition: u64::from(r.repetition) + 1,
            run_id: Some(r.id),
            started_at: r.started_at,
            ended_at: r.ended_at,
            status,
            axes: r.axes,
            metrics: BTreeMap::new(),
        });
        Ok::<_, StoreError>(())
    })?;
    store.for_each_value(&filter, |id, k, v| {
        if let Some(&i) = index.get(&id) {
            out[i].metrics.insert(k.to_string(), v);
        }
        Ok::<_, StoreError>(())
    })?;
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = Store::open_existing(&args.db).map_err(store_err)?;
    match args.what {
        What::List {
            campaign,
            campaign_flag,
            status,
            since,
            limit,
            offset,
        } => {
            let since = since.as_deref().map(since_time).transpose()?;
            let campaign = campaign.or(campaign_flag);
            if campaign.is_none() && status.is_none() {
                return list_campaigns(&store, since.as_deref(), limit);
            }
            let c = campaign
                .map(|w| campaign_row(&store, Some(&w)))
                .transpose()?;
            let filter = RunFilter {
                campaign_id: c.as_ref().map(|c| c.id),
                status: status.map(|s| match s {
                    StatusArg::Ok => RunStatus::Ok,
                    StatusArg::Failed => RunStatus::Failed,
                }),
                since,
                limit,
                offset,
            };
            list_runs(&store, c.as_ref(), &filter)
        }
        What::Show { run } => {
            let r = store
                .run(run)
                .map_err(store_err)?
                .ok_or_else(|| bad_input(format!("no run {run} in {}", args.db.display())))?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
            Ok(())
        }
        What::Export {
            campaign,
            format,
            output,
        } => {
            if format == Format::Parquet && output.is_none() {
                return Err(bad_input(
                    "--format parquet: give the output file with -o (Parquet is binary)",
                ));
            }
            if let Some(p) = &output {
                crate::cmd::report::check_parent("-o", p)?;
            }
            let c = campaign_row(&store, campaign.as_deref())?;
            export(&store, &c, format, output.as_deref())
        }
    }
}

fn list_campaigns(store: &Store, since: Option<&str>, limit: Option<u64>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let ok = store.ok_counts().map_err(store_err)?;
    let mut rows: Vec<CampaignRow> = store
        .campaigns()
        .map_err(store_err)?
        .into_iter()
        .filter(|c| since.is_none_or(|t| c.started_at.as_str() >= t))
        .collect();
    if let Some(n) = limit {
        let skip = rows.len().saturating_sub(n as usize);
        rows.drain(..skip);
    }
    writeln!(
        out,
        "{:>4}  {:<24}  {:<24}  {:>9}  {:<11}  file",
        "id", "name", "started", "runs", "status"
    )?;
    for c in rows {
        writeln!(
            out,
            "{:>4}  {:<24}  {:<24}  {:>9}  {:<11}  {}{}",
            c.id,
            c.name,
            c.started_at,
            format!("{}/{}", ok.get(&c.id).copied().unwrap_or(0), c.planned_runs),
            c.status,
            c.origin,
            if c.quick { " (quick)" } else { "" }
        )?;
    }
    Ok(())
}

fn list_runs(store: &Store, c: Option<&CampaignRow>, filter: &RunFilter) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if let Some(c) = c {
        writeln!(
            out,
            "campaign {} {:?} ({}), {} planned runs",
            c.id, c.name, c.status, c.planned_runs
        )?;
    }
    writeln!(
        out,
        "{:>6}  {}{:>3}  {:<6}  {:>14}  scenario / error",
        "run",
        if c.is_none() { "campaign  " } else { "" },
        "rep",
        "status",
        "payload bit/s"
    )?;
    let mut shown = 0u64;
    store.for_each_run(filter, |r: RunInfo| {
        shown += 1;
        let tp = r
            .throughput_payload_bps
            .map(|v| format!("{v:.0}"))
            .unwrap_or_else(|| "-".into());
        let cid = match c {
            None => format!("{:>8}  ", r.campaign_id),
            Some(_) => String::new(),
        };
        writeln!(
            out,
            "{:>6}  {cid}{:>3}  {:<6}  {:>14}  {}",
            r.id,
            r.repetition + 1,
            r.status.as_str(),
            tp,
            r.scenario_key
        )?;
        if let Some(e) = &r.error {
            let pad = if c.is_none() { 45 } else { 35 };
            writeln!(out, "{:>pad$}  {}", "", e.lines().next().unwrap_or(""))?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    if filter.limit.is_some() || filter.offset > 0 {
        let total = store.count_runs(filter).map_err(store_err)?;
        let first = filter.offset.min(total);
        writeln!(
            out,
            "runs {}–{} of {total}{}",
            first + u64::from(shown > 0),
            first + shown,
            if first + shown < total {
                format!("; the next page: --offset {}", first + shown)
            } else {
                String::new()
            }
        )?;
    }
    out.flush()?;
    Ok(())
}

fn export(
    store: &Store,
    c: &CampaignRow,
    format: Format,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    match format {
        Format::Json => {
            // The document `{"campaign": …, "runs": […]}` written one run
            // at a time, laid out as serde_json's pretty printer lays it.
            let mut w = Output::open(output)?;
            let camp = serde_json::to_string_pretty(&serde_json::to_value(c)?)?;
            write!(
                w,
                "{{\n  \"campaign\": {},\n  \"runs\": [",
                indent(&camp, 2)
            )?;
            let mut first = true;
            store.for_each_run_row(c.id, |r| {
                let run = serde_json::to_string_pretty(&serde_json::to_value(&r)?)?;
                write!(
                    w,
                    "{}\n    {}",
                    if first { "" } else { "," },
                    indent(&run, 4)
                )?;
                first = false;
                Ok::<_, anyhow::Error>(())
            })?;
            writeln!(w, "{}]\n}}", if first { "" } else { "\n  " })?;
            w.finish()
        }
        Format::Csv => {
            let text = wirebench_report::runs_csv(&run_records(store, c, false)?);
            let mut w = Output::open(output)?;
            writeln!(w, "{text}")?;
            w.finish()
        }
        Format::Long | Format::Parquet => {
            let filter = RunFilter::campaign(c.id);
            // Runs without documents (a few hundred bytes each), then
            // their values streamed in run order.
            let mut runs: BTreeMap<i64, RunInfo> = BTreeMap::new();
            let mut axes: Vec<String> = Vec::new();
            store.for_each_run(&filter, |r| {
                for k in r.axes.keys() {
                    if !axes.contains(k) {
                        axes.push(k.clone());
                    }
                }
                runs.insert(r.id, r);
                Ok::<_, anyhow::Error>(())
            })?;
            let mut w = crate::cmd::results_long::LongWriter::new(
                format == Format::Parquet,
                axes,
                Output::open(output)?,
            )?;
            store.for_each_value(&filter, |id, k, v| {
                if let Some(r) = runs.get(&id) {
                    w.row(c, r, k, v)?;
                }
                Ok::<_, anyhow::Error>(())
            })?;
            w.finish()?.finish()
        }
    }
}

/// `text` with every line after the first indented by `n` spaces.
fn indent(text: &str, n: usize) -> String {
    text.replace('\n', &format!("\n{}", " ".repeat(n)))
}

/// Standard output, or a file written all or nothing.
pub(crate) struct Output {
    target: Option<(PathBuf, tempfile::NamedTempFile)>,
    out: Box<dyn Write + Send>,
}

impl Output {
    pub(crate) fn open(path: Option<&Path>) -> anyhow::Result<Output> {
        match path {
            None => Ok(Output {
                target: None,
                out: Box::new(std::io::BufWriter::new(std::io::stdout())),
            }),
            Some(p) => {
                let dir = p
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                let tmp = tempfile::NamedTempFile::new_in(dir)?;
                let f = tmp.reopen()?;
                Ok(Output {
                    target: Some((p.to_path_buf(), tmp)),
                    out: Box::new(std::io::BufWriter::new(f)),
                })
            }
        }
    }

    /// Flushes, and puts a file in place (fsync, rename).
    pub(crate) fn finish(mut self) -> anyhow::Result<()> {
        self.out.flush()?;
        drop(self.out);
        if let Some((path, tmp)) = self.target {
            tmp.as_file().sync_all()?;
            tmp.persist(&path)?;
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
