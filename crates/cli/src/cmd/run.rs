//! `wirebench run CAMPAIGN.toml`: runs (or resumes) a campaign into the
//! results store and prints a summary table. Every run is committed when it
//! ends, so Ctrl-C or a crash loses at most the run in flight; `--resume`
//! continues from there.

use crate::exit::bad_input;
use anyhow::Context;
use std::path::{Path, PathBuf};
use wirebench_campaign::analysis::{summarize, text_table, DEFAULT_TABLE_METRICS};
use wirebench_campaign::runner::{install_signal_handlers, run_campaign, RunError, RunOptions};
use wirebench_campaign::{Campaign, Store};

#[derive(clap::Args)]
pub struct Args {
    /// The campaign file (TOML; see docs/campaigns.md).
    #[arg(value_name = "CAMPAIGN.toml")]
    pub campaign: PathBuf,
    /// Results store: an SQLite file, or a PostgreSQL database a lab shares,
    /// postgres://USER@HOST[:PORT]/DB (the password from PGPASSWORD or
    /// ~/.pgpass, never from the URL; docs/campaigns.md "Results store").
    /// Created if missing. Default: the campaign file's `store`, else the
    /// WIREBENCH_DB environment variable, else wirebench.db.
    #[arg(long, value_name = "FILE|URL")]
    pub db: Option<PathBuf>,
    /// Continue the latest campaign of the same name: finished runs are kept, the rest are run.
    /// The file may have grown since (more repetitions, axis values, blocks, report settings):
    /// only the new runs run; a change to what finished runs were measured with is refused.
    #[arg(long)]
    pub resume: bool,
    /// The short version of the campaign: its [quick] table, 2 repetitions.
    #[arg(long)]
    pub quick: bool,
    /// The wirebench binary to run as sender and receiver (default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// No progress bar and no per-run lines.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Print how many runs the campaign has and how long it will take, then exit.
    #[arg(long)]
    pub estimate: bool,
    /// [[hosts.node]] campaigns: connect to every node and print what the
    /// campaign would touch there (the interfaces each apply_* changes, with
    /// their MTU, root qdisc and offloads now), the path MTU of every pair,
    /// clock sync, versions, and what would be refused; changes nothing.
    #[arg(long, conflicts_with_all = ["estimate", "resume"])]
    pub check: bool,
    /// Append progress to FILE as JSON lines: each run's start and end and,
    /// for campaigns with interval_ms, the live figures of every interval
    /// (throughput, delay, loss; what the progress bar shows) while it runs,
    /// local or through agents, and notes (an agent too old to relay them).
    #[arg(long, value_name = "FILE")]
    pub progress_log: Option<PathBuf>,
    /// [[hosts.node]] campaigns: when another controller's campaign holds
    /// a node (its lab lock), wait up to SECS (default 3600) for it to end
    /// instead of refusing at once; asked every 2 s, holding nothing
    /// meanwhile. Without it a held lab ends `run` at once with exit
    /// status 75, naming the campaign, controller host and pid holding it.
    #[arg(long, value_name = "SECS", num_args = 0..=1, require_equals = true, default_missing_value = "3600")]
    pub wait_lab: Option<u64>,
}

/// Loads, validates and (with `quick`) shortens a campaign file.
pub fn load_campaign(path: &std::path::Path, quick: bool) -> anyhow::Result<Campaign> {
    let text =
        wirebench_input::read_text(path).map_err(|e| bad_input(format!("campaign file {e}")))?;
    let mut c = Campaign::parse(&text, &path.display().to_string()).map_err(bad_input)?;
    if quick {
        c.apply_quick().map_err(bad_input)?;
    }
    Ok(c)
}

pub fn binary_path(binary: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match binary {
        Some(b) => {
            if !b.is_file() {
                return Err(bad_input(format!(
                    "--binary: {} is not a file",
                    b.display()
                )));
            }
            Ok(std::fs::canonicalize(&b).unwrap_or(b))
        }
        None => std::env::current_exe().context("finding this wirebench binary"),
    }
}

/// Where `run` stores a campaign: `--db`, else the campaign file's `store`
/// (a file relative to the campaign file), else `WIREBENCH_DB`, else
/// wirebench.db.
fn store_target(flag: Option<&Path>, c: &Campaign) -> PathBuf {
    if let Some(f) = flag {
        return f.to_path_buf();
    }
    if let Some(s) = &c.store {
        if wirebench_campaign::store::is_postgres(Path::new(s)) {
            return PathBuf::from(s);
        }
        let dir = Path::new(&c.origin).parent().unwrap_or(Path::new(""));
        return dir.join(s);
    }
    std::env::var_os("WIREBENCH_DB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("wirebench.db"))
}

pub fn map_run_error(e: RunError) -> anyhow::Error {
    match e {
        RunError::BadInput(m) => bad_input(m),
        RunError::LabBusy(m) => anyhow::Error::new(crate::exit::LabBusy(m)),
        other => anyhow::Error::new(other),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let c = load_campaign(&args.campaign, args.quick)?;
    let est = wirebench_campaign::estimate::estimate(&c);
    if args.estimate {
        println!(
            "campaign {:?}{}: {} scenarios, {} ({} test-bed builds)",
            c.name,
            if c.quick { " (quick)" } else { "" },
            est.scenarios,
            est.describe(),
            est.builds
        );
        return Ok(());
    }
    let binary = binary_path(args.binary.clone())?;
    if args.check {
        let text = wirebench_campaign::runner::check_nodes(&c, &binary).map_err(map_run_error)?;
        print!("{text}");
        return Ok(());
    }
    let db = store_target(args.db.as_deref(), &c);
    let store = Store::open(&db).map_err(crate::cmd::results::store_err)?;
    install_signal_handlers().map_err(anyhow::Error::new)?;
    let opts = RunOptions {
        binary,
        resume: args.resume,
        progress: !args.quiet,
        verbose: !args.quiet,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        progress_log: args.progress_log.clone(),
        wait_lab: args.wait_lab.map(std::time::Duration::from_secs),
    };
    if c.rfc2544.is_some() {
        return run_rfc2544(&c, &store, &opts, &args, &db);
    }
    let planned = c.planned_runs();
    if !args.quiet {
        eprintln!(
            "campaign {:?}: {} scenarios × {} repetitions = {planned} runs on {}{}; estimate: {}",
            c.name,
            c.expand().len(),
            c.repetitions_text(),
            c.target.describe(),
            if c.quick { " (quick)" } else { "" },
            est.describe()
        );
    }
    let out = run_campaign(&c, &store, &opts).map_err(map_run_error)?;
    if out.interrupted {
        let stored = store
            .finished(out.campaign_id)
            .map(|f| f.len())
            .unwrap_or(0);
        eprintln!(
            "wirebench: interrupted; {stored} of {} runs are stored in {} (campaign {}). Continue with: wirebench run {} --db {} --resume{}",
            out.planned,
            db.display(),
            out.campaign_id,
            args.campaign.display(),
            db.display(),
            if c.quick { " --quick" } else { "" }
        );
        std::process::exit(130);
    }
    let summary = summarize(&store, &out.campaign_id.to_string()).map_err(anyhow::Error::new)?;
    println!("{}", text_table(&summary, DEFAULT_TABLE_METRICS));
    for n in &summary.notes {
        println!("note: {n}");
    }
    println!(
        "campaign {} (id {}): {} runs ok, {} failed, {} already stored; results in {}",
        c.name,
        out.campaign_id,
        out.ok,
        out.failed,
        out.already_done,
        db.display()
    );
    if out.repeated > 0 {
        println!(
            "{} run(s) repeated after a host stall (repeat_stalled = {}); each attempt set aside is kept in the counters of the run that replaced it (`stalled_attempts`)",
            out.repeated, c.repeat_stalled
        );
    }
    if out.failed > 0 {
        anyhow::bail!(
            "{} run(s) failed (see `wirebench results list {} --db {}`); rerun with --resume to retry them",
            out.failed,
            out.campaign_id,
            db.display()
        );
    }
    Ok(())
}

/// A campaign with an `[rfc2544]` block: the searches instead of a matrix.
fn run_rfc2544(
    c: &Campaign,
    store: &Store,
    opts: &RunOptions,
    args: &Args,
    db: &Path,
) -> anyhow::Result<()> {
    let quiet = args.quiet;
    let mut say = |line: String| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let out = wirebench_campaign::rfc2544::run(c, store, opts, &mut say).map_err(map_run_error)?;
    if out.interrupted {
        eprintln!(
            "wirebench: interrupted; the trials so far are stored in {} (campaign {})",
            db.display(),
            out.campaign_id
        );
        std::process::exit(130);
    }
    crate::cmd::rfc2544::print_summary(store, out.campaign_id, None)
}
