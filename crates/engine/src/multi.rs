//! Several receivers in one run (a D-ITG script whose lines name different
//! `-a`, TOML flows with different `dest`): one session per receiver, each
//! on a thread of its own, started together — every session is open, its
//! clock offset measured and its data sockets ready before any of them
//! sends `Start` ([`Together`]) — and one result document with all flows
//! ([`run_many`]). A session that cannot open stops the others before they
//! start; a Ctrl-C (the plans share one cancel flag) stops them all.
//! With `-l FILE`, each session logs to a part beside FILE and the parts
//! are joined into FILE at the end ([`wirebench_pktlog::merge`]), flows
//! numbered as in the document.

use crate::plan::{CheckedPlan, Hooks};
use crate::EngineError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use wirebench_schema::result::{ResultDoc, SessionPart};

/// A start line for `n` sessions: each waits at [`Arrival::arrive`] until
/// all have arrived, or one has failed.
#[derive(Debug)]
pub struct Together {
    n: usize,
    /// (arrived, failed)
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Together {
    /// A start line for `n` sessions.
    pub fn new(n: usize) -> Arc<Together> {
        Arc::new(Together {
            n,
            state: Mutex::new((0, false)),
            cv: Condvar::new(),
        })
    }

    fn update(&self, f: impl FnOnce(&mut (usize, bool))) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s);
        self.cv.notify_all();
    }
}

/// A session's place at the start line: arrives once its sockets are ready;
/// dropped without arriving (the session failed), it releases the others
/// with an error.
pub(crate) struct Arrival {
    together: Option<Arc<Together>>,
    arrived: bool,
}

impl Arrival {
    pub fn new(together: Option<Arc<Together>>) -> Arrival {
        Arrival {
            together,
            arrived: false,
        }
    }

    /// Waits until every session is ready to start.
    pub fn arrive(&mut self) -> Result<(), EngineError> {
        let Some(t) = &self.together else {
            return Ok(());
        };
        self.arrived = true;
        t.update(|s| s.0 += 1);
        let mut s = t.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 < t.n && !s.1 {
            s = t.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.1 {
            return Err(EngineError::PeerGone(
                "another receiver's session failed before the start".into(),
            ));
        }
        Ok(())
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if let (Some(t), false) = (&self.together, self.arrived) {
            t.update(|s| s.1 = true);
        }
    }
}

/// Runs the plans (one per receiver) at once, started together, and
/// merges their documents: flows renumbered 1.. in plan order, totals over
/// all, `sessions` naming each receiver's flows, clock and counters. Any
/// part partial: the whole is, and the error is [`EngineError::Partial`].
/// `hooks.live` streams the intervals of a lone receiver only; with
/// several, the series are in the document.
pub fn run_many(plans: Vec<CheckedPlan>, hooks: Hooks) -> Result<ResultDoc, EngineError> {
    if plans.len() == 1 {
        if let Some(p) = plans.into_iter().next() {
            return crate::send::run_checked(p, hooks);
        }
        return Err(EngineError::BadPlan("no receiver".into()));
    }
    let log = plans.first().and_then(|p| p.log.clone());
    let parts: Vec<PathBuf> = match &log {
        Some(path) => (0..plans.len()).map(|k| part_path(path, k)).collect(),
        None => Vec::new(),
    };
    let plans: Vec<CheckedPlan> = plans
        .into_iter()
        .enumerate()
        .map(|(k, p)| match parts.get(k) {
            Some(part) => p.with_log(part.clone()),
            None => p,
        })
        .collect();
    let run = run_sessions(plans, hooks);
    let Some(path) = log else { return run };
    let joined = match &run {
        Ok(_) | Err(EngineError::Partial { .. }) => join_logs(&parts, &path),
        Err(_) => Ok(()),
    };
    for p in &parts {
        let _ = std::fs::remove_file(p);
    }
    match (run, joined) {
        (run, Ok(())) => run,
        (Ok(doc), Err(why)) => Err(EngineError::Partial {
            reason: why,
            doc: Box::new(doc),
        }),
        (Err(EngineError::Partial { reason, doc }), Err(why)) => Err(EngineError::Partial {
            reason: format!("{reason}; {why}"),
            doc,
        }),
        (Err(e), Err(_)) => Err(e),
    }
}

/// Where session `k`'s part of the log `path` is written: a hidden file
/// beside it, removed once joined.
fn part_path(path: &Path, k: usize) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "log".into());
    path.with_file_name(format!(".{name}.part{k}"))
}

/// Joins the sessions' parts into `path`.
fn join_logs(parts: &[PathBuf], path: &Path) -> Result<(), String> {
    let why = |e: String| {
        format!(
            "-l {}: the sessions' logs were not joined: {e}",
            path.display()
        )
    };
    let file = std::fs::File::create(path).map_err(|e| why(e.to_string()))?;
    let refs: Vec<&Path> = parts.iter().map(PathBuf::as_path).collect();
    wirebench_pktlog::merge::merge(&refs, std::io::BufWriter::new(file))
        .map(|_| ())
        .map_err(|e| why(e.to_string()))
}

/// The sessions, one thread each, started together; their documents merged.
fn run_sessions(plans: Vec<CheckedPlan>, hooks: Hooks) -> Result<ResultDoc, EngineError> {
    let together = Together::new(plans.len());
    let mut handles = Vec::new();
    for (k, p) in plans.into_iter().enumerate() {
        let hooks = Hooks {
            cancel: hooks.cancel,
            live: None,
            together: Some(together.clone()),
        };
        let dest = p.dest.clone();
        let h = std::thread::Builder::new()
            .name(format!("wb-session-{k}"))
            .spawn(move || crate::send::run_checked(p, hooks));
        match h {
            Ok(h) => handles.push((dest, h)),
            Err(e) => {
                // The ones already started are released by this failure.
                together.update(|s| s.1 = true);
                for (_, h) in handles {
                    let _ = h.join();
                }
                return Err(EngineError::io("session thread", e));
            }
        }
    }
    let mut parts = Vec::new();
    let mut first_err: Option<EngineError> = None;
    for (dest, h) in handles {
        match h.join() {
            Ok(Ok(doc)) => parts.push((dest, doc, None)),
            Ok(Err(EngineError::Partial { reason, doc })) => parts.push((dest, *doc, Some(reason))),
            Ok(Err(e)) => {
                // The session that failed first says why, not the ones it
                // released.
                let knock_on =
                    matches!(&e, EngineError::PeerGone(m) if m.starts_with("another receiver"));
                if first_err.as_ref().is_none_or(|f| {
                    matches!(f, EngineError::PeerGone(m) if m.starts_with("another receiver"))
                        && !knock_on
                }) {
                    first_err = Some(match e {
                        e if knock_on => e,
                        e => prefix(&dest, e),
                    });
                }
            }
            Err(_) => {
                first_err.get_or_insert(EngineError::Protocol(format!(
                    "session with {dest} panicked"
                )));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let mut parts = parts.into_iter();
    let Some(head) = parts.next() else {
        return Err(EngineError::Protocol("no session ran".into()));
    };
    let (doc, partial) = merge(head, parts.collect());
    match partial {
        None => Ok(doc),
        Some(reason) => Err(EngineError::Partial {
            reason,
            doc: Box::new(doc),
        }),
    }
}

/// Names the receiver in a session's error (keeping its kind, so bad input
/// stays bad input).
fn prefix(dest: &str, e: EngineError) -> EngineError {
    match e {
        EngineError::BadPlan(m) => EngineError::BadPlan(format!("receiver {dest}: {m}")),
        EngineError::Remote(m) => EngineError::Remote(format!("{dest}: {m}")),
        EngineError::Protocol(m) => EngineError::Protocol(format!("{dest}: {m}")),
        EngineError::PeerGone(m) => EngineError::PeerGone(format!("{dest}: {m}")),
        other => other,
    }
}

/// A session's receiver, document and partial reason.
type Part = (String, ResultDoc, Option<String>);

/// One document from the sessions' parts (the first one's host, clock and
/// receiver head it).
fn merge(first: Part, rest: Vec<Part>) -> (ResultDoc, Option<String>) {
    let (dest0, first, why0) = first;
    let mut doc = ResultDoc {
        flows: Vec::new(),
        sessions: Vec::new(),
        ..first.clone()
    };
    let mut reasons = Vec::new();
    let mut delay_weight = 0.0;
    let mut received = 0u64;
    let mut lost = Some(0u64);
    let mut payload = [0.0f64; 4];
    let mut cpu_rx = wirebench_schema::result::CpuTime::default();
    doc.total = Default::default();
    for (dest, part, why) in std::iter::once((dest0, first, why0)).chain(rest) {
        let mut ids = Vec::new();
        for mut f in part.flows {
            f.id = (doc.flows.len() + 1) as u16;
            ids.push(f.id);
            doc.flows.push(f);
        }
        let t = &part.total;
        doc.total.sent_packets += t.sent_packets;
        doc.total.not_sent += t.not_sent;
        doc.total.received_packets += t.received_packets;
        // Unknown in any part (no receiver report): unknown in the whole.
        lost = lost.zip(t.lost).map(|(a, b)| a + b);
        doc.total.sender_host_drops = doc.total.sender_host_drops.max(t.sender_host_drops);
        doc.total.delay_max_s = doc.total.delay_max_s.max(t.delay_max_s);
        delay_weight += t.delay_mean_s * t.received_packets as f64;
        received += t.received_packets;
        // The sessions ran side by side: their throughputs add.
        let tp = &t.throughput_bps;
        for (a, b) in payload
            .iter_mut()
            .zip([tp.payload, tp.ip, tp.ethernet, tp.wire])
        {
            *a += b;
        }
        cpu_rx = cpu_rx.plus(part.cpu.receiver);
        if let Some(r) = &why {
            reasons.push(format!("{dest}: {r}"));
        }
        doc.sessions.push(SessionPart {
            dest,
            flows: ids,
            clock: part.clock,
            receiver: part.receiver,
            partial_reason: why,
        });
    }
    let [p, ip, e, w] = payload;
    doc.total.throughput_bps = wirebench_stats::Throughput {
        payload: p,
        ip,
        ethernet: e,
        wire: w,
    };
    if received > 0 {
        doc.total.delay_mean_s = delay_weight / received as f64;
    }
    doc.total.lost = lost;
    doc.total.loss_ratio = lost.map(|l| l as f64 / doc.total.sent_packets.max(1) as f64);
    doc.total.fairness = crate::assemble::fairness(&doc.flows, p);
    doc.cpu.receiver = cpu_rx;
    let partial = (!reasons.is_empty()).then(|| reasons.join("; "));
    doc.partial = partial.is_some();
    doc.partial_reason = partial.clone();
    (doc, partial)
}
