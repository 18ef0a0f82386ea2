//! One run: keep the receiver alive (restarting it when it died), run the
//! optional warm-up and the sender, classify the outcome and store it the
//! moment it ends. Beds with agent nodes run through them instead
//! (rebuilding the test-bed once when it vanished under us).

use super::args::{cmd_text, run_seed, run_timeout, send_args};
use super::bed::Bed;
use super::child::{detach, listening, read_tail, stop_child};
use super::order::PlannedRun;
use super::signals::stop_requested;
use super::{RunError, RunOptions};
use crate::campaign::{Campaign, RunLength};
use crate::env;
use crate::store::{NewRun, RunStatus, Store};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Receiver {
    child: Child,
    command: String,
    log: PathBuf,
}

pub(super) struct Ctx<'a> {
    c: &'a Campaign,
    store: &'a Store,
    opts: &'a RunOptions,
    work: PathBuf,
    receiver: Option<Receiver>,
    /// The nodes' metadata is in the campaign's environment record.
    env_has_nodes: bool,
    /// Progress bar and log; the senders of campaigns with `interval_ms`
    /// (local, or relayed by their agents) feed it their live intervals.
    pub(super) progress: Option<super::live::Progress>,
}

pub(super) enum RunEnd {
    Stored(RunStatus),
    /// Ended ok but the host stalled its link emulators: stored `failed`
    /// with this error, to be made again (`repeat_stalled`).
    SetAside(String),
    Interrupted,
}

impl<'a> Ctx<'a> {
    /// A context with no receiver running yet; `work` holds the logs and
    /// result files of the run in flight.
    pub(super) fn new(
        c: &'a Campaign,
        store: &'a Store,
        opts: &'a RunOptions,
        work: PathBuf,
    ) -> Self {
        Ctx {
            c,
            store,
            opts,
            work,
            receiver: None,
            env_has_nodes: false,
            progress: None,
        }
    }

    /// The directory holding the run in flight's files (`result.json`).
    pub(super) fn work(&self) -> &Path {
        &self.work
    }

    pub(super) fn store(&self) -> &'a Store {
        self.store
    }

    pub(super) fn stop_receiver(&mut self) {
        if let Some(mut r) = self.receiver.take() {
            stop_child(&mut r.child, Duration::from_secs(2));
        }
    }

    fn start_receiver(&mut self, bed: &dyn Bed) -> Result<(), RunError> {
        self.stop_receiver();
        let Some(mut cmd) = bed.receiver(&self.opts.binary)? else {
            return Ok(());
        };
        let args = vec!["recv".to_string(), "-p".into(), bed.port().to_string()];
        let log = self.work.join("recv.log");
        let logf = std::fs::File::create(&log)
            .map_err(|e| RunError::io("creating the receiver log", e))?;
        let logf2 = logf
            .try_clone()
            .map_err(|e| RunError::io("creating the receiver log", e))?;
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(logf)
            .stderr(logf2);
        detach(&mut cmd);
        let text = format!("{:?}", cmd).replace('"', "");
        let mut child = cmd
            .spawn()
            .map_err(|e| RunError::io(format!("starting {}", text), e))?;
        let t0 = Instant::now();
        loop {
            if listening(child.id(), bed.port()) {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                return Err(RunError::Receiver(format!(
                    "`{text}` exited ({st}): {}",
                    read_tail(&log, 600)
                )));
            }
            if stop_requested() {
                // The caller sees the flag and ends the campaign as interrupted.
                stop_child(&mut child, Duration::from_secs(1));
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(10) {
                stop_child(&mut child, Duration::from_secs(1));
                return Err(RunError::Receiver(format!(
                    "`{text}` did not listen on port {} within 10 s: {}",
                    bed.port(),
                    read_tail(&log, 600)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.receiver = Some(Receiver {
            child,
            command: text,
            log,
        });
        Ok(())
    }

    /// Runs `wirebench send` and waits for it. Ok(None) = interrupted.
    /// `live`: the run's label when its intervals should reach the
    /// progress bar (campaigns with `interval_ms`; not the warm-up).
    fn send(
        &self,
        args: &[String],
        json: &Path,
        timeout: Duration,
        live: Option<&str>,
    ) -> Result<Option<(std::process::ExitStatus, String, bool)>, RunError> {
        let mut cmd = Command::new(&self.opts.binary);
        let err_path = self.work.join("send.err");
        let errf = std::fs::File::create(&err_path)
            .map_err(|e| RunError::io("creating the sender log", e))?;
        let _ = std::fs::remove_file(json);
        let follow = match (live, &self.progress, self.c.interval_ms) {
            (Some(label), Some(p), Some(_)) => Some((label.to_string(), p.clone())),
            _ => None,
        };
        cmd.args(args)
            .arg(format!("--json={}", json.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(errf);
        if follow.is_some() {
            cmd.arg("--json-stream").stdout(Stdio::piped());
        }
        detach(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| RunError::io(format!("starting {}", self.opts.binary.display()), e))?;
        // The reader ends when the child's stdout closes (it exited or was
        // stopped); joined once the child is gone so its last interval
        // is shown before the run's end.
        let reader = match (follow, child.stdout.take()) {
            (Some((label, p)), Some(out)) => {
                Some(std::thread::spawn(move || p.follow(&label, out)))
            }
            _ => None,
        };
        let join = |r: Option<std::thread::JoinHandle<()>>| {
            if let Some(h) = r {
                let _ = h.join();
            }
        };
        let t0 = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    join(reader);
                    return Ok(Some((st, read_tail(&err_path, 800), false)));
                }
                Ok(None) => {}
                Err(e) => return Err(RunError::io("waiting for the sender", e)),
            }
            if stop_requested() {
                stop_child(&mut child, Duration::from_secs(2));
                join(reader);
                return Ok(None);
            }
            if t0.elapsed() > timeout {
                stop_child(&mut child, Duration::from_secs(2));
                let st = child
                    .wait()
                    .map_err(|e| RunError::io("waiting for the sender", e))?;
                join(reader);
                return Ok(Some((st, read_tail(&err_path, 800), true)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `repeats_done`: how often this planned run was already set aside
    /// for a stall in this invocation (None: never set it aside, as in
    /// sessions whose caller decides every trial).
    pub(super) fn one_run(
        &mut self,
        bed: &mut dyn Bed,
        cid: i64,
        pr: &PlannedRun,
        length: RunLength,
        repeats_done: Option<u32>,
    ) -> Result<RunEnd, RunError> {
        let s = &pr.scenario;
        bed.ensure(s)?;
        if bed.nodes().is_some() {
            return self.nodes_run(bed, cid, pr, length, repeats_done);
        }
        let receiver_dead = self
            .receiver
            .as_mut()
            .is_some_and(|r| !matches!(r.child.try_wait(), Ok(None)));
        if bed.take_rebuilt() || receiver_dead || self.receiver.is_none() {
            self.start_receiver(bed)?;
        }
        if stop_requested() {
            return Ok(RunEnd::Interrupted);
        }
        let dest = bed.dest(s.settings.ip == 6)?;
        let seed = run_seed(self.c, &s.key, pr.repetition);
        let timeout = run_timeout(self.c, s, length);
        if self.c.warmup_s > 0.0 {
            let args = send_args(
                self.c,
                s,
                dest,
                bed.port(),
                seed ^ 0x5eed,
                RunLength::Duration {
                    seconds: self.c.warmup_s,
                },
            );
            let warm = self.work.join("warmup.json");
            let t = Duration::from_secs_f64(self.c.warmup_s * 1.5 + 30.0);
            if self.send(&args, &warm, t, None)?.is_none() {
                return Ok(RunEnd::Interrupted);
            }
        }
        let args = send_args(self.c, s, dest, bed.port(), seed, length);
        let json = self.work.join("result.json");
        let mut command = cmd_text(&self.opts.binary, &args);
        command.push_str(" --json=FILE");
        if let Some(r) = &self.receiver {
            command = format!("receiver: {}\nsender: {command}", r.command);
        }
        let started = env::now_rfc3339();
        let label = format!("{} #{}", s.key, pr.repetition + 1);
        let Some((status, stderr, timed_out)) = self.send(&args, &json, timeout, Some(&label))?
        else {
            return Ok(RunEnd::Interrupted);
        };
        let ended = env::now_rfc3339();
        let doc: Option<Value> = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let mut error = None;
        if timed_out {
            error = Some(format!(
                "killed after {:.0} s (run_timeout_s): {stderr}",
                timeout.as_secs_f64()
            ));
        } else if !status.success() {
            error = Some(format!("sender exited with {status}: {stderr}"));
        } else if let Some(d) = &doc {
            if d.get("schema").and_then(Value::as_str) != Some("wirebench.result/1") {
                error =
                    Some("the sender's result document has no `schema: wirebench.result/1`".into());
            } else if d.get("partial").and_then(Value::as_bool) == Some(true) {
                let why = d
                    .get("partial_reason")
                    .and_then(Value::as_str)
                    .unwrap_or("peer gone");
                error = Some(format!("partial run: {why}"));
            }
        } else {
            error = Some(format!("the sender wrote no result document: {stderr}"));
        }
        if error.is_some() {
            // A dead receiver is restarted before the next run.
            if let Some(r) = self.receiver.as_mut() {
                if !matches!(r.child.try_wait(), Ok(None)) {
                    let tail = read_tail(&r.log, 400);
                    error = error.map(|e| format!("{e}; receiver died: {tail}"));
                }
            }
        }
        let st = if error.is_none() {
            RunStatus::Ok
        } else {
            RunStatus::Failed
        };
        // Exit status 2 = the sender refused its arguments: every further
        // run of this campaign would be refused too, so stop after storing it.
        let refused = !timed_out && status.code() == Some(2);
        self.store.record_run(&NewRun {
            campaign_id: cid,
            scenario_key: &s.key,
            axes: &s.axes,
            repetition: pr.repetition,
            status: st,
            result: doc.as_ref(),
            counters: None,
            command: &command,
            error: error.as_deref(),
            started_at: &started,
            ended_at: &ended,
        })?;
        if refused {
            return Err(RunError::BadInput(format!(
                "scenario {}: the sender refused its arguments, so the campaign stopped: {stderr}",
                s.key
            )));
        }
        Ok(RunEnd::Stored(st))
    }

    /// Adds a `node NAME` line per node (OS, kernel, CPU, NICs, offloads,
    /// sysctls, clock sync) to the campaign's environment record, once.
    fn record_node_environment(&mut self, cid: i64, observed: &Value) -> Result<(), RunError> {
        let Some(meta) = observed.get("metadata").and_then(Value::as_object) else {
            return Ok(());
        };
        if meta.is_empty() {
            return Ok(());
        }
        if let Some(row) = self.store.campaign(cid)? {
            let mut env = row.environment;
            env.extra.extend(crate::analysis::node_lines(meta));
            // What the nodes' links were when the campaign first reached
            // them (a resume keeps its first record): the next campaign
            // compares with it.
            if let Some(before) = observed.get("links_before").and_then(Value::as_object) {
                for (node, text) in before {
                    if let Some(t) = text.as_str() {
                        env.extra
                            .entry(format!("links {node}"))
                            .or_insert_with(|| t.to_string());
                    }
                }
            }
            self.store.set_environment(cid, &env)?;
        }
        self.env_has_nodes = true;
        Ok(())
    }

    /// One run through agents (real nodes, the emulated test-bed's
    /// namespaces): the agents do the work, we store it.
    fn nodes_run(
        &mut self,
        bed: &mut dyn Bed,
        cid: i64,
        pr: &PlannedRun,
        length: RunLength,
        repeats_done: Option<u32>,
    ) -> Result<RunEnd, RunError> {
        let s = &pr.scenario;
        let seed = run_seed(self.c, &s.key, pr.repetition);
        let timeout = run_timeout(self.c, s, length);
        let started = env::now_rfc3339();
        let no_nodes = || RunError::Agent("the bed has no agent nodes".into());
        let label = format!("{} #{}", s.key, pr.repetition + 1);
        let live = match (&self.progress, self.c.interval_ms) {
            (Some(p), Some(_)) => Some((label.as_str(), p)),
            _ => None,
        };
        let mut wires = bed.wire_counters();
        let first = bed
            .nodes()
            .ok_or_else(no_nodes)?
            .run(self.c, s, seed, length, timeout, live);
        let mut r = match first {
            Err(e @ (RunError::Agent(_) | RunError::Receiver(_))) if bed.can_rebuild() => {
                // Something removed the test-bed under us (a stray `testbed
                // down`, a crashed run's cleanup): build it again, once.
                eprintln!("wirebench: {e}; rebuilding the test-bed and retrying once");
                bed.invalidate();
                bed.ensure(s)?;
                bed.take_rebuilt();
                wires = bed.wire_counters();
                bed.nodes()
                    .ok_or_else(no_nodes)?
                    .run(self.c, s, seed, length, timeout, live)?
            }
            r => r?,
        };
        if r.interrupted {
            return Ok(RunEnd::Interrupted);
        }
        if let (Some((links, before)), Some((_, after)), Some(o)) =
            (wires, bed.wire_counters(), r.observed.as_object_mut())
        {
            // Beside the drop sites: where each emulated hop's time went.
            let hops = wirebench_testbed::hop_times(&links, &before, &after);
            o.insert("hops".into(), serde_json::json!(hops));
        }
        let ended = env::now_rfc3339();
        // Callers that read the run back (RFC 2544 sessions) find it where
        // a local sender would have written it.
        let json = self.work.join("result.json");
        let _ = std::fs::remove_file(&json);
        if let Some(d) = &r.doc {
            let _ = std::fs::write(&json, d.to_string());
        }
        let mut error = r.error.clone();
        if error.is_none() {
            match &r.doc {
                None => error = Some("no result document".into()),
                Some(d) if d.get("partial").and_then(Value::as_bool) == Some(true) => {
                    let why = d
                        .get("partial_reason")
                        .and_then(Value::as_str)
                        .unwrap_or("peer gone");
                    error = Some(format!("partial run: {why}"));
                }
                Some(_) => {}
            }
        }
        // A run the host stalled is set aside while the budget lasts.
        let set_aside = match (&error, repeats_done) {
            (None, Some(done)) => {
                crate::stalls::repeat_reason(&r.observed, done, self.c.repeat_stalled)
            }
            _ => None,
        };
        if set_aside.is_some() {
            error.clone_from(&set_aside);
        }
        // The row this run replaces was an attempt set aside for a stall
        // (in this invocation or before a resume): the store keeps one row
        // per planned run, so its documents move into this run's counters.
        if let Some(prev) = self
            .store
            .run_of(cid, &s.key, pr.repetition)?
            .filter(crate::stalls::is_set_aside)
        {
            if let Some(o) = r.observed.as_object_mut() {
                o.insert(
                    crate::stalls::SET_ASIDE_KEY.into(),
                    Value::Array(crate::stalls::set_aside(&prev)),
                );
            }
        }
        let st = if error.is_none() {
            RunStatus::Ok
        } else {
            RunStatus::Failed
        };
        self.store.record_run(&NewRun {
            campaign_id: cid,
            scenario_key: &s.key,
            axes: &s.axes,
            repetition: pr.repetition,
            status: st,
            result: r.doc.as_ref(),
            counters: Some(&r.observed),
            command: &r.command,
            error: error.as_deref(),
            started_at: &started,
            ended_at: &ended,
        })?;
        if !self.env_has_nodes {
            self.record_node_environment(cid, &r.observed)?;
        }
        if r.refused {
            return Err(RunError::BadInput(format!(
                "scenario {}: a sender refused its arguments, so the campaign stopped: {}",
                s.key,
                error.unwrap_or_default()
            )));
        }
        Ok(match set_aside {
            Some(why) => RunEnd::SetAside(why),
            None => RunEnd::Stored(st),
        })
    }
}
