//! The run loop: matrix × repetitions, one `wirebench send` per run against
//! a `wirebench recv` that lives as long as the test-bed, every run stored
//! the moment it ends.
//!
//! Traffic runs in child processes (the same binary, or `--binary`), so a
//! crash of the engine costs one run, not the campaign. On the emulated
//! test-bed and on real hosts the children are started by a `wirebench
//! agent` on each node (`nodes`), so both share everything above the
//! transport; on loopback and plain `[hosts]` this process starts them. The
//! children get their own process group (a terminal Ctrl-C reaches only
//! us, and we stop them in order) and die with us (`PR_SET_PDEATHSIG`), so
//! even a SIGKILLed campaign leaves no stray receiver holding a port.
//!
//! - [`signals`]: Ctrl-C sets a flag everything below polls.
//! - `child`: starting, watching and stopping child processes.
//! - `bed`: loopback, emulated test-bed or real hosts behind one interface.
//! - `nodes`: runs through agents (the test-bed's namespaces, real hosts).
//! - [`order`]: which run comes when.
//! - `args`: the sender's command line, seed and time limit for one run.
//! - `one_run`: receiver upkeep, warm-up, sender, classification, storing.
//! - `session`: runs chosen one at a time by the caller (RFC 2544 searches).
//! - this module: the public types and the loop over the planned runs.

mod args;
mod bed;
mod child;
mod live;
mod nodes;
mod one_run;
pub mod order;
mod session;
pub mod signals;

pub use args::send_args;
pub use nodes::links_text;
pub use order::{plan, PlannedRun};
pub use session::{Session, SessionRun};
pub use signals::{install_signal_handlers, stop_requested};

use crate::adaptive;
use crate::campaign::Campaign;
use crate::env;
use crate::store::{NewCampaign, RunStatus, Store, StoreError};
use bed::make_bed;
use one_run::{Ctx, RunEnd};
use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a campaign (or a run session) stopped with an error.
#[derive(Debug, Error)]
pub enum RunError {
    /// The results store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user asked for something impossible (exit 2 in the CLI).
    #[error("{0}")]
    BadInput(String),
    /// Building or removing the test-bed failed.
    #[error("test-bed: {0}")]
    Testbed(String),
    /// The receiver did not start or listen, or the first runs all failed.
    #[error("receiver: {0}")]
    Receiver(String),
    /// A node's agent could not be reached or refused (real hosts).
    #[error("{0}")]
    Agent(String),
    /// Another controller's campaign holds a node (its lab lock); the CLI
    /// exits 75 (EX_TEMPFAIL: try again later).
    #[error("{0}")]
    LabBusy(String),
    /// A local file, directory or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RunError::Io {
            what: what.into(),
            source,
        }
    }
}

/// How to run a campaign.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `wirebench` binary run as sender and receiver.
    pub binary: PathBuf,
    /// Continue the latest campaign of the same name instead of starting anew.
    pub resume: bool,
    /// Show a progress bar (stderr, only when it is a terminal).
    pub progress: bool,
    /// Print one line per finished run.
    pub verbose: bool,
    /// This wirebench's version, stored with the campaign's environment.
    pub tool_version: String,
    /// The command line that started the campaign, kept in the environment.
    pub command_line: String,
    /// Append progress (run start/end, live interval figures of campaigns
    /// with `interval_ms`) to this file as JSON lines.
    pub progress_log: Option<PathBuf>,
    /// `[[hosts.node]]` campaigns: how long to wait for nodes another
    /// campaign holds (None: refuse at once).
    pub wait_lab: Option<Duration>,
}

/// What a campaign run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The campaign's id in the store.
    pub campaign_id: i64,
    /// Runs of the plan (repetitions × scenarios, before adaptive extras).
    pub planned: usize,
    /// Runs already stored (`ok`) before this invocation (resume).
    pub already_done: usize,
    /// Runs stored `ok` by this invocation.
    pub ok: usize,
    /// Runs stored `failed` by this invocation (attempts set aside for a
    /// host stall not included).
    pub failed: usize,
    /// Attempts stored `failed` because the host stalled the link
    /// emulators, and made again (`repeat_stalled`).
    pub repeated: usize,
    /// Stopped by SIGINT/SIGTERM; the run in flight was not stored.
    pub interrupted: bool,
}

fn progress_bar(total: usize, done: usize, show: bool) -> indicatif::ProgressBar {
    let pb = if show {
        indicatif::ProgressBar::new(total as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  ETA {eta}  {msg}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_position(done as u64);
    // Runs stored before a resume took no time now: keep them out of the ETA.
    pb.reset_eta();
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// The campaign file changed since `row` started: what grew, or a refusal
/// naming the setting finished runs depend on.
fn grown(
    c: &Campaign,
    row: &crate::store::CampaignRow,
    done: &HashSet<(String, u32)>,
) -> Result<Vec<String>, RunError> {
    let refuse = |why: String| {
        RunError::BadInput(format!(
            "--resume: campaign {} ({}) cannot grow into this file: {why}; run without --resume to start a new campaign",
            row.id, row.started_at
        ))
    };
    let mut old = Campaign::parse(&row.file_text, &c.origin)
        .map_err(|e| refuse(format!("its stored file no longer reads ({e})")))?;
    if row.quick {
        old.apply_quick()
            .map_err(|e| refuse(format!("its stored file no longer reads ({e})")))?;
    }
    crate::campaign::check_growth(&old, c, done).map_err(refuse)
}

/// Per node name: the state of its `apply_*` interfaces when the latest
/// campaign of the store that recorded one first reached it (its
/// environment's `links NAME`), and that campaign.
fn earlier_links(
    store: &Store,
) -> Result<std::collections::BTreeMap<String, (String, String)>, RunError> {
    let mut rows = store.campaigns()?;
    rows.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    let mut out = std::collections::BTreeMap::new();
    for r in rows {
        for (k, v) in &r.environment.extra {
            if let Some(node) = k.strip_prefix("links ") {
                out.insert(
                    node.to_string(),
                    (v.clone(), format!("{:?} ({})", r.name, r.started_at)),
                );
            }
        }
    }
    Ok(out)
}

/// Consecutive failures, with no success yet, after which a campaign stops.
pub const FAIL_FAST_RUNS: usize = 3;

/// Runs (or resumes) a campaign into `store`.
/// `run --check` of a `[[hosts.node]]` campaign: what it would touch and
/// refuse on every node, changing nothing (see `Nodes::check`).
pub fn check_nodes(c: &Campaign, binary: &std::path::Path) -> Result<String, RunError> {
    let crate::campaign::Target::Hosts(h) = &c.target else {
        return Err(RunError::BadInput(
            "--check: only a campaign with [[hosts.node]] has nodes to check".into(),
        ));
    };
    if h.nodes.is_empty() {
        return Err(RunError::BadInput(
            "--check: only a campaign with [[hosts.node]] has nodes to check".into(),
        ));
    }
    let mut nodes = nodes::Nodes::new(h.nodes.clone(), binary.to_path_buf());
    nodes.set_pairings(h.pairings.clone());
    nodes.set_lab(&c.name, None);
    let r = nodes.check();
    let end = nodes.teardown();
    let text = r?;
    end?;
    Ok(text)
}

/// Runs campaign `c` (or resumes it, with `opts.resume`) and stores every
/// run in `store`, holding the campaign's lock throughout.
pub fn run_campaign(c: &Campaign, store: &Store, opts: &RunOptions) -> Result<Outcome, RunError> {
    let planned = plan(c);
    let mut env_ = env::collect(&c.target.describe(), &opts.tool_version);
    env_.extra
        .insert("command".into(), opts.command_line.clone());
    env_.extra
        .insert("binary".into(), opts.binary.display().to_string());
    // Held to the end: a second runner of this campaign (a resume started
    // twice, or a resume beside the first run) is refused, not run twice.
    let _lock = store.lock_campaign(&c.name)?;
    let (cid, done) = if opts.resume {
        let row = store.latest_by_name(&c.name)?.ok_or_else(|| {
            RunError::BadInput(format!(
                "--resume: no campaign named {:?} in {}",
                c.name,
                store.path().display()
            ))
        })?;
        if row.quick != c.quick {
            return Err(RunError::BadInput(format!(
                "--resume: campaign {} was started {} --quick; resume it the same way",
                row.id,
                if row.quick { "with" } else { "without" }
            )));
        }
        // Checked before anything is written, so a refusal changes nothing.
        if row.file_text != c.text {
            let grew = grown(c, &row, &store.finished(row.id)?)?;
            store.set_campaign_plan(row.id, &c.text, planned.len())?;
            if !grew.is_empty() {
                eprintln!(
                    "wirebench: --resume: campaign {} grew: {}",
                    row.id,
                    grew.join(", ")
                );
            }
        }
        store.set_campaign_status(row.id, "running")?;
        let bad = store.requeue_unreadable(row.id)?;
        if !bad.is_empty() {
            eprintln!(
                "wirebench: --resume: {} stored run(s) of campaign {} no longer read as results and are run again:",
                bad.len(),
                row.id
            );
            for u in &bad {
                eprintln!("  {} #{}: {}", u.scenario_key, u.repetition + 1, u.why);
            }
        }
        (row.id, store.finished(row.id)?)
    } else {
        let started = env::now_rfc3339();
        let id = store.create_campaign(&NewCampaign {
            name: &c.name,
            origin: &c.origin,
            file_text: &c.text,
            started_at: &started,
            environment: &env_,
            planned_runs: planned.len(),
            quick: c.quick,
        })?;
        (id, HashSet::new())
    };
    let mut todo: VecDeque<PlannedRun> = planned
        .iter()
        .filter(|p| !done.contains(&(p.scenario.key.clone(), p.repetition)))
        .cloned()
        .collect();
    let already = planned.len() - todo.len();
    // An adaptive campaign resumed after its planned runs continues its
    // rule where the stored runs left it.
    let mut adaptive_skip: HashSet<String> = HashSet::new();
    if todo.is_empty() && c.adaptive.is_some() {
        todo.extend(adaptive::next_round(c, &store.runs(cid)?, &adaptive_skip));
    }
    if opts.resume {
        eprintln!(
            "wirebench: --resume: kept {}, running {}{}",
            done.len(),
            todo.len(),
            if c.adaptive.is_some() {
                " (and more while scenarios have not settled)"
            } else {
                ""
            }
        );
    }
    let mut out = Outcome {
        campaign_id: cid,
        planned: planned.len(),
        already_done: already,
        ok: 0,
        failed: 0,
        repeated: 0,
        interrupted: false,
    };
    // Per planned run: how often it was set aside for a stall so far.
    let mut repeats: std::collections::HashMap<(String, u32), u32> = Default::default();
    if todo.is_empty() {
        store.set_campaign_status(cid, "done")?;
        return Ok(out);
    }

    let work = std::env::temp_dir().join(format!("wirebench-campaign-{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .map_err(|e| RunError::io(format!("creating {}", work.display()), e))?;
    let mut bed = make_bed(c, &opts.binary)?;
    if let Some(n) = bed.nodes() {
        n.set_lab(&c.name, opts.wait_lab);
        n.set_earlier_links(earlier_links(store)?);
        // Before the first run: a lab another campaign holds is refused
        // (or waited for) here, not inside a run that then seems to have
        // started while it waited.
        n.connect()?;
    }
    let mut ctx = Ctx::new(c, store, opts, work.clone());
    let mut total = already + todo.len();
    let pb = progress_bar(total, already, opts.progress);
    let progress = live::Progress::new(pb.clone(), opts.progress_log.as_deref())
        .map_err(|e| RunError::io("opening the progress log", e))?;
    ctx.progress = Some(progress.clone());
    let say = |pb: &indicatif::ProgressBar, line: String| {
        if opts.verbose {
            if pb.is_hidden() {
                eprintln!("{line}");
            } else {
                pb.println(line);
            }
        }
    };
    let mut result: Result<(), RunError> = Ok(());
    let mut i = 0;
    loop {
        if stop_requested() {
            out.interrupted = true;
            break;
        }
        if todo.is_empty() && c.adaptive.is_some() {
            let more = adaptive::next_round(c, &store.runs(cid)?, &adaptive_skip);
            total += more.len();
            pb.set_length(total as u64);
            todo.extend(more);
        }
        let Some(pr) = todo.pop_front() else {
            break;
        };
        let pr = &pr;
        if i > 0 && c.pause_s > 0.0 {
            let t0 = Instant::now();
            while t0.elapsed().as_secs_f64() < c.pause_s && !stop_requested() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let label = format!("{} #{}", pr.scenario.key, pr.repetition + 1);
        progress.run_start(&label);
        let id = (pr.scenario.key.clone(), pr.repetition);
        let done = repeats.get(&id).copied().unwrap_or(0);
        match ctx.one_run(
            bed.as_mut(),
            cid,
            pr,
            c.run_length(&pr.scenario),
            Some(done),
        ) {
            Ok(RunEnd::SetAside(why)) => {
                progress.run_end(&label, "failed");
                progress.note(&format!("{label}: stalled, repeating: {why}"));
                out.repeated += 1;
                i += 1;
                repeats.insert(id, done + 1);
                // Not a failure of the set-up: fail-fast does not count it.
                total += 1;
                pb.set_length(total as u64);
                pb.inc(1);
                let n = already + out.ok + out.failed + out.repeated;
                say(&pb, format!("[{n}/{total}] {label}: stalled, repeating"));
                todo.push_front(pr.clone());
            }
            Ok(RunEnd::Stored(st)) => {
                progress.run_end(&label, st.as_str());
                match st {
                    RunStatus::Ok => out.ok += 1,
                    RunStatus::Failed => out.failed += 1,
                }
                i += 1;
                // An extra run that failed is not tried again now (a
                // scenario that always fails would loop); `--resume` does.
                if st == RunStatus::Failed && pr.repetition >= c.repetitions {
                    adaptive_skip.insert(pr.scenario.key.clone());
                }
                // Nothing has worked yet and the first runs all failed: the
                // set-up is broken, not the network; stop instead of failing
                // every run of a long campaign.
                if out.ok == 0 && out.failed >= FAIL_FAST_RUNS {
                    let last = store
                        .runs(cid)?
                        .into_iter()
                        .rev()
                        .find_map(|r| r.error)
                        .unwrap_or_default();
                    result = Err(RunError::Receiver(format!(
                        "the first {FAIL_FAST_RUNS} runs all failed, so the campaign stopped; last error: {last}"
                    )));
                    pb.inc(1);
                    break;
                }
                pb.inc(1);
                let n = already + out.ok + out.failed + out.repeated;
                say(
                    &pb,
                    format!(
                        "[{n}/{}] {} #{}: {}",
                        total,
                        pr.scenario.key,
                        pr.repetition + 1,
                        st.as_str()
                    ),
                );
            }
            Ok(RunEnd::Interrupted) => {
                out.interrupted = true;
                break;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    pb.finish_and_clear();
    ctx.stop_receiver();
    let down = bed.teardown();
    let _ = std::fs::remove_dir_all(&work);
    let finished = store.finished(cid)?;
    let status = if out.interrupted || result.is_err() {
        "interrupted"
    } else if planned
        .iter()
        .all(|p| finished.contains(&(p.scenario.key.clone(), p.repetition)))
        && adaptive::next_round(c, &store.runs(cid)?, &HashSet::new()).is_empty()
    {
        "done"
    } else {
        "incomplete"
    };
    store.set_campaign_status(cid, status)?;
    result?;
    down?;
    Ok(out)
}
