//! The agent itself: reads [`Request`] lines, runs them, writes one
//! [`Response`] line each. It owns the children it started (receivers and
//! senders of the same binary) and a journal of what it changed on the host
//! (MTUs, offloads, link-rate qdiscs), and [`Shared::cleanup`] undoes both: on `bye`, on
//! end of input (the controller or its SSH link went away), on a write
//! error, and — wired by the CLI — on SIGHUP/SIGINT/SIGTERM. Nothing the
//! campaign changed outlives the session.
//!
//! Requests run one at a time in arrival order; only `wait` blocks, in
//! short slices, so that end of input is noticed within 100 ms even while
//! a sender runs. A sender started with `stream` prints its `--json-stream`
//! into a pipe; a thread keeps its interval lines in a bounded buffer and
//! `wait` returns as soon as there are some, so they reach the controller
//! while the run goes on.

use crate::child::{adopt, detach, listening, stop_child, tail};
use crate::host;
use crate::journal::{Before, Journal, JournalError};
use crate::policy::{check_start_args, NodeAllow};
use crate::proto::{
    Allow, HelloInfo, Op, ProcTicks, ProcessState, Reply, Request, Response, Role, MAX_LINE,
    MAX_STREAM_BUFFER, REVISION_HOLDER, REVISION_LAB, REVISION_STREAM,
};
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use wirebench_testbed::probe::{peer_path_mtu, PeerResponder};

/// How an agent is set up by its command line.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The wirebench binary children run (normally the agent's own).
    pub program: PathBuf,
    /// Protocol version this agent speaks (always
    /// [`crate::AGENT_PROTOCOL_VERSION`] except in tests of the mismatch).
    pub version: u32,
    /// Revision it speaks (always [`crate::AGENT_PROTOCOL_REVISION`]
    /// except in tests that play an older agent).
    pub revision: u32,
    /// wirebench release, reported at hello and in metadata.
    pub tool_version: String,
    /// The interfaces this node lets a controller change; a controller's
    /// `hello` can only narrow it.
    pub node_allow: NodeAllow,
}

struct Proc {
    child: Child,
    role: Role,
    pid: u32,
    log: PathBuf,
    json: Option<PathBuf>,
    /// A streaming sender's interval lines and the thread reading them.
    stream: Option<(Arc<StreamBuf>, std::thread::JoinHandle<()>)>,
}

/// Interval lines of one streaming sender, waiting for the next `wait`.
#[derive(Default)]
struct StreamBuf {
    lines: Mutex<VecDeque<serde_json::Value>>,
    dropped: AtomicU64,
}

impl StreamBuf {
    fn lock(&self) -> MutexGuard<'_, VecDeque<serde_json::Value>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Everything waiting, and how many were dropped since the last take.
    fn take(&self) -> (Vec<serde_json::Value>, u64) {
        let lines = self.lock().drain(..).collect();
        (lines, self.dropped.swap(0, Ordering::Relaxed))
    }

    /// Reads the sender's stdout to its end, keeping the interval objects.
    /// Only those are parsed: the last line (`end`, the whole result
    /// document) comes back as the result file anyway.
    fn fill(&self, out: impl Read) {
        let mut r = BufReader::new(out);
        let mut line = String::new();
        while matches!(r.read_line(&mut line), Ok(n) if n > 0) {
            if line.starts_with(r#"{"event":"interval""#) {
                if let Ok(v) = serde_json::from_str(&line) {
                    let mut q = self.lock();
                    if q.len() >= MAX_STREAM_BUFFER {
                        q.pop_front();
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    q.push_back(v);
                }
            }
            line.clear();
        }
    }
}

#[derive(Default)]
struct State {
    /// Every change of this session: the interface and what it had
    /// before (a rate: the default root qdisc our tbf replaced).
    changes: Vec<(String, Before)>,
    /// The node's journal on disk, held while the session may change
    /// links.
    journal: Option<Journal>,
    procs: BTreeMap<u32, Proc>,
    /// Children that ended, with their final CPU ticks (the newest few:
    /// a run's sender ends before the sample after it is taken).
    ended: VecDeque<ProcTicks>,
    next_handle: u32,
    /// The work directory was created by this agent (only then is it
    /// removed).
    workdir_made: bool,
}

/// The part of an agent a signal handler must reach: children and the
/// change journal.
#[derive(Clone)]
pub struct Shared {
    state: Arc<Mutex<State>>,
    workdir: PathBuf,
}

impl Shared {
    fn new() -> Shared {
        // A root agent writes there: a name another user cannot guess
        // and plant first (see `ensure_workdir`).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let workdir = std::env::temp_dir().join(format!(
            "wirebench-agent-{}-{nanos:08x}",
            std::process::id()
        ));
        Shared {
            state: Arc::new(Mutex::new(State {
                next_handle: 1,
                ..Default::default()
            })),
            workdir,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not stop the restore.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Restores every change (newest first, so the first value recorded
    /// for an interface wins) and returns what was done; the journal on
    /// disk goes when everything went back.
    pub fn restore(&self) -> Vec<String> {
        let changes = std::mem::take(&mut self.lock().changes);
        let mut done = Vec::new();
        let mut failed = false;
        for (iface, before) in changes.into_iter().rev() {
            match put_back(&iface, &before) {
                Ok(s) => done.push(format!("restored {s}")),
                Err(e) => {
                    eprintln!("wirebench agent: restoring failed: {e}");
                    failed = true;
                    done.push(format!("FAILED to restore: {e}"));
                }
            }
        }
        if !failed {
            if let Some(j) = self.lock().journal.as_mut() {
                if let Err(e) = j.clear() {
                    done.push(format!("FAILED to remove the journal: {e}"));
                }
            }
        }
        done
    }

    /// Writes what `iface` has before a change to the journal on disk;
    /// the change may only follow when this succeeded.
    fn journal(&self, iface: &str, before: &Before) -> Result<(), String> {
        match self.lock().journal.as_mut() {
            Some(j) => j
                .record(iface, before.clone())
                .map_err(|e| format!("not changed, the journal could not be written: {e}")),
            None => Ok(()),
        }
    }

    /// Stops every child, restores every change, removes the work
    /// directory. Safe to call more than once and from a signal thread.
    pub fn cleanup(&self) -> Vec<String> {
        let procs = std::mem::take(&mut self.lock().procs);
        for (_, mut p) in procs {
            stop_child(&mut p.child, Duration::from_secs(2));
        }
        let done = self.restore();
        // Restored (or not): either way this session is over, and the
        // next agent must not take it for a dead one.
        if let Some(j) = self.lock().journal.take() {
            j.release();
        }
        if std::mem::take(&mut self.lock().workdir_made) {
            let _ = std::fs::remove_dir_all(&self.workdir);
        }
        done
    }

    /// Creates the work directory once, private to this agent's user; one
    /// already there is not ours and is refused rather than written into.
    fn ensure_workdir(&self) -> Result<(), String> {
        let mut st = self.lock();
        if st.workdir_made {
            return Ok(());
        }
        let b = std::fs::DirBuilder::new();
        // Elsewhere the temporary directory is the user's own already.
        #[cfg(unix)]
        let b = {
            let mut b = b;
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            b
        };
        b.create(&self.workdir).map_err(|e| {
            format!(
                "creating the work directory {}: {e}",
                self.workdir.display()
            )
        })?;
        st.workdir_made = true;
        Ok(())
    }
}

/// On SIGHUP (the terminal or SSH session went away), SIGINT or SIGTERM:
/// stop the children, restore every change, exit with 128 + signal.
#[cfg(unix)]
pub fn cleanup_on_signal(shared: Shared) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM])?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            for d in shared.cleanup() {
                eprintln!("wirebench agent: {d}");
            }
            std::process::exit(128 + sig);
        }
    });
    Ok(())
}

/// Marks the agent a supervisor started (it must not start another).
const SUPERVISED: &str = "WIREBENCH_AGENT_SUPERVISED";

/// Under sshd (`SSH_CONNECTION` set) the agent runs as a child of a small
/// supervisor that passes its exit on as a status: sshd reports a command
/// killed by a signal to the client only as "exit-signal", which OpenSSH's
/// client turns into its own 255, and the controller could not name the
/// signal. Here it becomes 128 + N, which the controller names
/// (`killed by SIGKILL (9) on the node`). SIGHUP, SIGINT and SIGTERM are
/// passed to the agent (which restores, then exits 128 + N); if the
/// supervisor itself dies, the agent gets SIGTERM (Linux). Returns the
/// status to exit with, or None: run the agent in this process.
#[cfg(unix)]
pub fn supervise_under_ssh() -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var_os("SSH_CONNECTION").is_none() || std::env::var_os(SUPERVISED).is_some() {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1)).env(SUPERVISED, "1");
    crate::child::die_with_parent(&mut cmd, libc::SIGTERM);
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    // Without the handlers in place a signal would end the supervisor
    // alone: run the agent in this process instead.
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM]).ok()?;
    let mut child = cmd.spawn().ok()?;
    let pid = child.id() as libc::pid_t;
    let handle = signals.handle();
    let fwd = std::thread::spawn(move || {
        for sig in signals.forever() {
            // SAFETY: a signal to the child this process started.
            unsafe { libc::kill(pid, sig) };
        }
    });
    let st = child.wait();
    handle.close();
    let _ = fwd.join();
    Some(match st {
        Ok(st) => st
            .code()
            .or_else(|| st.signal().map(|sig| 128 + sig))
            .unwrap_or(1),
        Err(_) => 1,
    })
}

/// Elsewhere the agent runs in the process sshd started.
#[cfg(not(unix))]
pub fn supervise_under_ssh() -> Option<i32> {
    None
}

/// Windows: the console events that stand for those signals (Ctrl-C,
/// Ctrl-Break, the console closing, log-off, shutdown) do the same, exit
/// 130 or 143.
#[cfg(windows)]
pub fn cleanup_on_signal(shared: Shared) -> std::io::Result<()> {
    crate::win::cleanup_on_console_event(shared)
}

/// Elsewhere only end of input and `bye` clean up.
#[cfg(not(any(unix, windows)))]
pub fn cleanup_on_signal(_shared: Shared) -> std::io::Result<()> {
    Ok(())
}

fn run_tool(name: &str, args: &[&str]) -> Result<(), String> {
    let path = host::tool(name).ok_or_else(|| format!("`{name}` not found on this host"))?;
    let out = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting {name}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{name} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Puts back what `iface` had; the text names what now holds.
pub(crate) fn put_back(iface: &str, before: &Before) -> Result<String, String> {
    match before {
        Before::Mtu { mtu } => set_mtu_now(iface, *mtu).map(|_| format!("{iface} mtu {mtu}")),
        Before::DefaultRoot => {
            // Only a tbf can be ours; anything else was put there since by
            // someone else and is theirs.
            let (kind, handle) = root_qdisc(iface)?;
            if handle != "0:" && kind == "tbf" {
                run_tool("tc", &["qdisc", "del", "dev", iface, "root"])?;
            }
            Ok(format!("{iface} default root qdisc"))
        }
        Before::Offloads { features } => set_features(iface, features).map(|_| {
            let v: Vec<String> = features
                .iter()
                .map(|(k, on)| format!("{k} {}", if *on { "on" } else { "off" }))
                .collect();
            format!("{iface} {}", v.join(" "))
        }),
    }
}

fn set_mtu_now(iface: &str, mtu: u32) -> Result<(), String> {
    run_tool(
        "ip",
        &["link", "set", "dev", iface, "mtu", &mtu.to_string()],
    )
}

/// The root qdisc of `iface`: (kind, handle), from `tc qdisc show`.
fn root_qdisc(iface: &str) -> Result<(String, String), String> {
    let tc = host::tool("tc").ok_or("`tc` not found on this host (install iproute2)")?;
    let text = host::output(Command::new(tc).args(["qdisc", "show", "dev", iface, "root"]))
        .ok_or_else(|| format!("`tc qdisc show dev {iface} root` failed"))?;
    let mut w = text.split_whitespace();
    match (w.next(), w.next(), w.next()) {
        (Some("qdisc"), Some(kind), Some(handle)) => Ok((kind.to_string(), handle.to_string())),
        _ => Err(format!("no root qdisc on {iface}: {}", text.trim())),
    }
}

/// The interface's transmit queue length (packets), 1000 when unknown.
fn tx_queue_len(iface: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/tx_queue_len"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .filter(|&n: &u32| n > 0)
        .unwrap_or(1000)
}

/// The offloads a campaign switches, as `ethtool -K` names them, with the
/// `ethtool -k` names they are read by.
const FEATURES: &[(&str, &str)] = &[
    ("tso", "tcp-segmentation-offload"),
    ("gso", "generic-segmentation-offload"),
    ("gro", "generic-receive-offload"),
];

fn set_features(iface: &str, vals: &[(String, bool)]) -> Result<(), String> {
    let mut args = vec!["-K".to_string(), iface.to_string()];
    for (k, on) in vals {
        args.push(k.clone());
        args.push(if *on { "on" } else { "off" }.into());
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    run_tool("ethtool", &a)
}

fn read_features(iface: &str) -> Result<Vec<(String, bool)>, String> {
    let e = host::tool("ethtool").ok_or("`ethtool` not found on this host")?;
    let text = host::output(Command::new(e).args(["-k", iface]))
        .ok_or_else(|| format!("`ethtool -k {iface}` failed"))?;
    let m = host::parse_ethtool_k(&text);
    Ok(FEATURES
        .iter()
        .filter_map(|(short, long)| m.get(*long).map(|v| (short.to_string(), *v)))
        .collect())
}

/// Runs one agent session over `input`/`output` until `bye`, end of input
/// or a write error; everything changed is restored before it returns.
pub struct Agent {
    cfg: AgentConfig,
    shared: Shared,
    allow: Allow,
    hello: bool,
    responders: BTreeMap<u16, PeerResponder>,
    eof: Arc<AtomicBool>,
    /// Interfaces carrying this agent's SSH connection: never changed.
    mgmt: Vec<String>,
    /// The controller's revision, from its `hello`.
    peer_revision: u32,
}

enum Step {
    Go,
    End,
}

impl Agent {
    /// An agent set up by `cfg`, before its session.
    pub fn new(cfg: AgentConfig) -> Agent {
        Agent {
            cfg,
            shared: Shared::new(),
            allow: Allow::default(),
            hello: false,
            responders: BTreeMap::new(),
            eof: Arc::new(AtomicBool::new(false)),
            mgmt: host::mgmt_ifaces(),
            peer_revision: 0,
        }
    }

    /// Whether `iface` may be changed: the campaign's `list` names it (or
    /// says `*`) and the node's own list allows it. The management path
    /// never may, whatever either says, so that no campaign can cut the
    /// controller off.
    fn may_change(&self, list: &[String], iface: &str, what: &str) -> Result<(), String> {
        if self.mgmt.iter().any(|m| m == iface) {
            return Err(format!(
                "{iface} carries this agent's own SSH connection (the management path); wirebench never changes it"
            ));
        }
        // The controller's `*` only means "whatever the node allows".
        if !list.iter().any(|i| i == iface || i == "*") {
            return Err(format!(
                "{what} is not allowed by the campaign (allowed: {})",
                list_or_none(list)
            ));
        }
        self.cfg
            .node_allow
            .permits(iface)
            .map_err(|why| format!("{what} is refused: {why}"))
    }

    /// A handle for a signal thread: `cleanup()` then exit.
    pub fn shared(&self) -> Shared {
        self.shared.clone()
    }

    /// Runs one session: reads requests from `input` until `bye`, its
    /// end or a write error, answers each on `output`, and cleans up.
    pub fn serve<R, W>(mut self, input: R, mut output: W)
    where
        R: Read + Send + 'static,
        W: Write,
    {
        // Ok(Ok(line)), Ok(Err(why)) for a line answered with an error and
        // skipped (not UTF-8), Err(why) for the end of the input.
        let (tx, rx) = mpsc::channel::<Result<Result<String, String>, String>>();
        let eof = self.eof.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(input);
            loop {
                let mut bytes = Vec::new();
                match r
                    .by_ref()
                    .take(MAX_LINE as u64 + 1)
                    .read_until(b'\n', &mut bytes)
                {
                    Ok(0) => break,
                    // The limit counts the line without its newline.
                    Ok(n) if n > MAX_LINE && bytes.last() != Some(&b'\n') => {
                        let _ = tx.send(Err(format!("request line over {MAX_LINE} bytes")));
                        break;
                    }
                    Ok(_) => {
                        let line = String::from_utf8(bytes)
                            .map_err(|_| "bad request: the line is not UTF-8 text".to_string());
                        if tx.send(Ok(line)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("reading requests: {e}")));
                        break;
                    }
                }
            }
            eof.store(true, Ordering::SeqCst);
        });
        while let Ok(msg) = rx.recv() {
            let line = match msg {
                Ok(Ok(l)) => l,
                Ok(Err(why)) => {
                    let resp = Response {
                        id: 0,
                        reply: Reply::Error { message: why },
                    };
                    if write_response(&mut output, &resp).is_err() {
                        break;
                    }
                    continue;
                }
                Err(e) => {
                    // The controller hears why before the session ends.
                    eprintln!("wirebench agent: {e}");
                    let resp = Response {
                        id: 0,
                        reply: Reply::Error { message: e },
                    };
                    let _ = write_response(&mut output, &resp);
                    break;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let (resp, step) = match serde_json::from_str::<Request>(&line) {
                Ok(req) => {
                    let id = req.id;
                    let (reply, step) = self.handle(req.op);
                    (Response { id, reply }, step)
                }
                Err(e) => (
                    Response {
                        id: serde_json::from_str::<serde_json::Value>(&line)
                            .ok()
                            .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
                            .unwrap_or(0),
                        reply: Reply::Error {
                            message: format!("bad request: {e}"),
                        },
                    },
                    Step::Go,
                ),
            };
            if write_response(&mut output, &resp).is_err() {
                // The controller is gone: same as end of input.
                break;
            }
            if matches!(step, Step::End) {
                break;
            }
        }
        self.responders.clear();
        let done = self.shared.cleanup();
        for d in done {
            eprintln!("wirebench agent: {d}");
        }
    }

    fn handle(&mut self, op: Op) -> (Reply, Step) {
        let err = |m: String| (Reply::Error { message: m }, Step::Go);
        if !self.hello && !matches!(op, Op::Hello { .. }) {
            return err("the first request must be `hello` with the protocol version".into());
        }
        match op {
            // The controller's revision needs no answer: each feature is
            // asked for explicitly (`start` with `stream`).
            Op::Hello {
                version,
                allow,
                revision,
                controller,
            } => {
                self.peer_revision = revision;
                let info = HelloInfo {
                    version: self.cfg.version,
                    tool_version: self.cfg.tool_version.clone(),
                    hostname: host::hostname(),
                    pid: std::process::id(),
                    net_admin: host::net_admin(),
                    revision: self.cfg.revision,
                    mgmt: if self.cfg.revision >= REVISION_LAB {
                        self.mgmt.clone()
                    } else {
                        Vec::new()
                    },
                    recovered: Vec::new(),
                };
                if version != self.cfg.version {
                    // Answer with our version so the controller can name
                    // both, then end: nothing else would be understood.
                    eprintln!(
                        "wirebench agent: the controller speaks agent protocol {version}, this agent (wirebench {}) speaks {}; install the same wirebench release on both",
                        self.cfg.tool_version, self.cfg.version
                    );
                    return (Reply::Hello(info), Step::End);
                }
                // Before anything else: what a dead agent left goes back,
                // and a session that may change links holds the node.
                let changes =
                    !(allow.mtu.is_empty() && allow.offloads.is_empty() && allow.rate.is_empty());
                let mut info = info;
                match Journal::open(&crate::journal::state_dir(), controller) {
                    Ok((j, recovered)) => {
                        for r in &recovered {
                            eprintln!(
                                "wirebench agent: a previous agent died without restoring: {r}"
                            );
                        }
                        if self.cfg.revision >= REVISION_LAB {
                            info.recovered = recovered;
                        }
                        if changes {
                            self.shared.lock().journal = Some(j);
                        } else {
                            j.release();
                        }
                    }
                    Err(e @ JournalError::Busy { .. }) if changes => return err(e.to_string()),
                    Err(e) if changes => {
                        return err(format!("cannot keep a journal of its changes: {e}"))
                    }
                    // Only observing: nothing of ours to guard.
                    Err(_) => {}
                }
                self.hello = true;
                self.allow = allow;
                (Reply::Hello(info), Step::Go)
            }
            Op::Metadata => (
                Reply::Metadata(Box::new(host::metadata(&self.cfg.tool_version))),
                Step::Go,
            ),
            Op::Cpu => {
                let mut s = host::cpu_sample();
                let st = self.shared.lock();
                for (h, p) in &st.procs {
                    if let Some((user, system)) = host::pid_ticks(p.pid) {
                        s.procs.push(ProcTicks {
                            handle: *h,
                            pid: p.pid,
                            role: p.role,
                            user,
                            system,
                            ended: false,
                        });
                    }
                }
                // A controller of an older revision would not know these.
                if self.peer_revision >= REVISION_HOLDER && self.cfg.revision >= REVISION_HOLDER {
                    let me = std::process::id();
                    if let Some((user, system)) = host::pid_ticks(me) {
                        s.procs.push(ProcTicks {
                            handle: 0,
                            pid: me,
                            role: Role::Agent,
                            user,
                            system,
                            ended: false,
                        });
                    }
                    s.procs.extend(st.ended.iter().cloned());
                }
                (Reply::Cpu(s), Step::Go)
            }
            Op::Counters => match host::counters() {
                Ok(ifaces) => (Reply::Counters { ifaces }, Step::Go),
                Err(e) => err(e),
            },
            Op::SetMtu { iface, mtu } => match self.set_mtu(&iface, mtu) {
                Ok(()) => (Reply::Done, Step::Go),
                Err(e) => err(e),
            },
            Op::SetOffloads { iface, on } => match self.set_offloads(&iface, on) {
                Ok(()) => (Reply::Done, Step::Go),
                Err(e) => err(e),
            },
            Op::SetRate { iface, rate_bps } => match self.set_rate(&iface, rate_bps) {
                Ok(()) => (Reply::Done, Step::Go),
                Err(e) => err(e),
            },
            Op::Restore => (
                Reply::Restored {
                    actions: self.shared.restore(),
                },
                Step::Go,
            ),
            Op::Start {
                role,
                args,
                port,
                stream,
            } => match self.start(role, args, port, stream) {
                Ok((handle, pid)) => (Reply::Started { handle, pid }, Step::Go),
                Err(e) => err(e),
            },
            Op::Wait { handle, timeout_ms } => match self.wait(handle, timeout_ms) {
                Ok(p) => (Reply::Process(p), Step::Go),
                Err(e) => err(e),
            },
            Op::Stop { handle } => {
                let p = self.shared.lock().procs.remove(&handle);
                match p {
                    Some(mut p) => {
                        // Its ticks just before the end (stopping reaps it).
                        let ticks = host::pid_ticks(p.pid);
                        stop_child(&mut p.child, Duration::from_secs(2));
                        note_ended(&mut self.shared.lock(), handle, &p, ticks);
                        (Reply::Process(finish(handle, p)), Step::Go)
                    }
                    None => err(format!("no child with handle {handle}")),
                }
            }
            Op::PmtuListen { bind } => match PeerResponder::bind(bind) {
                Ok(r) => {
                    let port = r.port();
                    self.responders.insert(port, r);
                    (Reply::PmtuPort { port }, Step::Go)
                }
                Err(e) => err(e.to_string()),
            },
            Op::PmtuProbe { dest, port } => {
                // A path MTU learnt before a campaign changed some MTU stays
                // cached for minutes and would be measured instead of the
                // path; forget it first (best effort: needs CAP_NET_ADMIN).
                if host::net_admin() {
                    let v = if dest.is_ipv6() { "-6" } else { "-4" };
                    let _ = run_tool("ip", &[v, "route", "flush", "cache"]);
                }
                match peer_path_mtu(std::net::SocketAddr::new(dest, port)) {
                    Ok(mtu) => (Reply::Pmtu { mtu }, Step::Go),
                    Err(e) => err(e.to_string()),
                }
            }
            Op::PmtuClose { port } => {
                self.responders.remove(&port);
                (Reply::Done, Step::Go)
            }
            Op::RouteIfaces { dests } => (
                Reply::RouteIfaces {
                    ifaces: dests
                        .into_iter()
                        .filter_map(|d| Some((d, host::route_iface(d)?)))
                        .collect(),
                },
                Step::Go,
            ),
            Op::Bye => {
                self.responders.clear();
                let actions = self.shared.cleanup();
                (Reply::Restored { actions }, Step::End)
            }
        }
    }

    fn set_mtu(&mut self, iface: &str, mtu: u32) -> Result<(), String> {
        self.may_change(
            &self.allow.mtu,
            iface,
            &format!("changing the MTU of {iface}"),
        )?;
        if !(68..=65535).contains(&mtu) {
            return Err(format!("MTU {mtu} is outside 68..=65535"));
        }
        let old = host::iface_mtu(iface).ok_or_else(|| format!("no interface {iface}"))?;
        if old == mtu {
            return Ok(());
        }
        let before = Before::Mtu { mtu: old };
        self.shared.journal(iface, &before)?;
        // The first recorded value is the one to go back to; restoring
        // newest-first reaches it last. Recorded before the change: a
        // half-made one is put back too.
        self.shared.lock().changes.push((iface.to_string(), before));
        set_mtu_now(iface, mtu)
    }

    fn set_offloads(&mut self, iface: &str, on: bool) -> Result<(), String> {
        self.may_change(
            &self.allow.offloads,
            iface,
            &format!("changing the offloads of {iface}"),
        )?;
        let old = read_features(iface)?;
        let new: Vec<(String, bool)> = old.iter().map(|(k, _)| (k.clone(), on)).collect();
        if old == new {
            return Ok(());
        }
        let before = Before::Offloads { features: old };
        self.shared.journal(iface, &before)?;
        self.shared.lock().changes.push((iface.to_string(), before));
        set_features(iface, &new)
    }

    /// Shapes `iface` to `rate` bit/s on the wire (None: back to the
    /// kernel's default root qdisc). Only over a default root: a qdisc
    /// someone else configured could not be put back exactly, so it is
    /// refused rather than replaced.
    fn set_rate(&mut self, iface: &str, rate: Option<u64>) -> Result<(), String> {
        self.may_change(&self.allow.rate, iface, &format!("shaping {iface}"))?;
        let ours = self
            .shared
            .lock()
            .changes
            .iter()
            .any(|(i, b)| i == iface && *b == Before::DefaultRoot);
        if rate == Some(0) {
            return Err("link rate 0 bit/s".into());
        }
        if rate.is_none() && !ours {
            return Ok(());
        }
        if !ours {
            let (kind, handle) = root_qdisc(iface)?;
            if handle != "0:" {
                return Err(format!(
                    "{iface} has a configured root qdisc ({kind} {handle}); remove it or leave link_rate to that interface's owner"
                ));
            }
        }
        if ours {
            // Only a tbf of ours is removed: after a failed attempt there
            // may be none, and that must not fail every later one.
            put_back(iface, &Before::DefaultRoot)?;
            self.forget_rate(iface);
        }
        let Some(rate) = rate else {
            return Ok(());
        };
        let mtu = host::iface_mtu(iface).ok_or_else(|| format!("no interface {iface}"))?;
        // Journalled before the first command: a half-made tbf is removed too.
        self.shared.journal(iface, &Before::DefaultRoot)?;
        self.shared
            .lock()
            .changes
            .push((iface.to_string(), Before::DefaultRoot));
        for line in wirebench_testbed::rate_qdisc_lines(iface, rate, mtu, tx_queue_len(iface)) {
            let args: Vec<&str> = line.split_whitespace().collect();
            if let Err(e) = run_tool("tc", &args) {
                // Undone at once, so that the interface is as it was and
                // neither the next `set_rate` nor `restore` trips over it.
                return Err(match put_back(iface, &Before::DefaultRoot) {
                    Ok(_) => {
                        self.forget_rate(iface);
                        format!("{e} (nothing changed)")
                    }
                    Err(u) => format!("{e}; undoing it failed too, restore will try again: {u}"),
                });
            }
        }
        Ok(())
    }

    /// Drops the session's record of a link rate on `iface` (its qdisc is
    /// gone).
    fn forget_rate(&self, iface: &str) {
        self.shared
            .lock()
            .changes
            .retain(|(i, b)| !(i == iface && *b == Before::DefaultRoot));
    }

    fn start(
        &mut self,
        role: Role,
        args: Vec<String>,
        port: Option<u16>,
        stream: bool,
    ) -> Result<(u32, u32), String> {
        // An agent playing an older revision ignores the request, as one
        // would that does not know the field.
        let stream = stream && role == Role::Sender && self.cfg.revision >= REVISION_STREAM;
        self.shared.ensure_workdir()?;
        check_start_args(&args, &self.shared.workdir)?;
        let handle = {
            let mut st = self.shared.lock();
            st.next_handle += 1;
            st.next_handle - 1
        };
        let log = self.shared.workdir.join(format!("{handle}.log"));
        let logf = std::fs::File::create(&log).map_err(|e| format!("creating a log: {e}"))?;
        let mut cmd = Command::new(&self.cfg.program);
        let json = match role {
            Role::Agent => return Err("start: an agent is not started by an agent".into()),
            Role::Receiver => {
                cmd.arg("recv");
                None
            }
            Role::Sender => {
                cmd.arg("send");
                Some(self.shared.workdir.join(format!("{handle}.json")))
            }
        };
        // Relative paths in `args` were checked against the work directory.
        cmd.current_dir(&self.shared.workdir).args(&args);
        if let Some(j) = &json {
            cmd.arg(format!("--json={}", j.display()));
        }
        let logf2 = logf
            .try_clone()
            .map_err(|e| format!("creating a log: {e}"))?;
        cmd.stdin(Stdio::null()).stdout(logf).stderr(logf2);
        if stream {
            cmd.arg("--json-stream").stdout(Stdio::piped());
        }
        detach(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "starting {} {}: {e}",
                self.cfg.program.display(),
                args.join(" ")
            )
        })?;
        adopt(&child);
        let pid = child.id();
        // The thread ends when the sender's stdout closes (it exited or
        // was stopped); `finish` joins it for the last lines.
        let stream = child.stdout.take().map(|out| {
            let buf = Arc::new(StreamBuf::default());
            let b = buf.clone();
            (buf, std::thread::spawn(move || b.fill(out)))
        });
        // Linux and Windows can tell when the receiver listens; elsewhere
        // give it half a second.
        let can_tell = cfg!(any(target_os = "linux", windows));
        if let (Role::Receiver, Some(port)) = (role, port) {
            let t0 = Instant::now();
            loop {
                if can_tell && listening(pid, port) {
                    break;
                }
                if !can_tell && t0.elapsed() > Duration::from_millis(500) {
                    break;
                }
                if let Ok(Some(st)) = child.try_wait() {
                    return Err(format!("the receiver exited ({st}): {}", tail(&log, 600)));
                }
                if t0.elapsed() > Duration::from_secs(10) || self.eof.load(Ordering::SeqCst) {
                    stop_child(&mut child, Duration::from_secs(1));
                    return Err(format!(
                        "the receiver did not listen on port {port} within 10 s: {}",
                        tail(&log, 600)
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.shared.lock().procs.insert(
            handle,
            Proc {
                child,
                role,
                pid,
                log,
                json,
                stream,
            },
        );
        Ok((handle, pid))
    }

    fn wait(&mut self, handle: u32, timeout_ms: u64) -> Result<ProcessState, String> {
        let end = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            {
                let mut st = self.shared.lock();
                let p = st
                    .procs
                    .get_mut(&handle)
                    .ok_or_else(|| format!("no child with handle {handle}"))?;
                // Read before reaping: an exited child's ticks are only
                // there until then.
                let ticks = host::pid_ticks(p.pid);
                if let Ok(Some(_)) = p.child.try_wait() {
                    let p = st.procs.remove(&handle).ok_or("child vanished")?;
                    note_ended(&mut st, handle, &p, ticks);
                    return Ok(finish(handle, p));
                }
                // Interval lines go out as soon as they are there.
                if let Some((buf, _)) = p.stream.as_ref().filter(|(b, _)| !b.is_empty()) {
                    return Ok(running(handle, buf.take()));
                }
            }
            // End of input: stop waiting so the session can clean up.
            if Instant::now() >= end || self.eof.load(Ordering::SeqCst) {
                return Ok(running(handle, (Vec::new(), 0)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Children whose final ticks are kept for the next samples: enough for
/// every sender of a run to be in the sample after it.
const ENDED_KEPT: usize = 64;

/// Keeps an ended child's last ticks for the next `cpu` samples.
fn note_ended(st: &mut State, handle: u32, p: &Proc, ticks: Option<(u64, u64)>) {
    let Some((user, system)) = ticks else {
        return;
    };
    if st.ended.len() >= ENDED_KEPT {
        st.ended.pop_front();
    }
    st.ended.push_back(ProcTicks {
        handle,
        pid: p.pid,
        role: p.role,
        user,
        system,
        ended: true,
    });
}

/// Writes one response line and flushes it: an error means the
/// controller is gone.
fn write_response(output: &mut impl Write, resp: &Response) -> std::io::Result<()> {
    let mut text = resp.line();
    text.push('\n');
    output.write_all(text.as_bytes())?;
    output.flush()
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// A child still running, with the interval lines that came meanwhile.
fn running(handle: u32, (stream, stream_dropped): (Vec<serde_json::Value>, u64)) -> ProcessState {
    ProcessState {
        handle,
        running: true,
        code: None,
        signal: None,
        stderr: String::new(),
        result: None,
        stream,
        stream_dropped,
    }
}

/// The final state of an ended (or just stopped) child; its files go.
fn finish(handle: u32, mut p: Proc) -> ProcessState {
    let status = p.child.wait().ok();
    // Its stdout is closed now: the reader reaches the end and the last
    // interval lines go with the final state.
    let (stream, stream_dropped) = match p.stream.take() {
        Some((buf, reader)) => {
            let _ = reader.join();
            buf.take()
        }
        None => (Vec::new(), 0),
    };
    #[cfg(unix)]
    let signal = {
        use std::os::unix::process::ExitStatusExt;
        status.and_then(|s| s.signal())
    };
    #[cfg(not(unix))]
    let signal = None;
    let result = p.json.as_ref().and_then(|j| {
        let text = std::fs::read_to_string(j).ok()?;
        let _ = std::fs::remove_file(j);
        serde_json::from_str(&text).ok()
    });
    let stderr = tail(&p.log, 1200);
    let _ = std::fs::remove_file(&p.log);
    ProcessState {
        handle,
        running: false,
        code: status.and_then(|s| s.code()),
        signal,
        stderr,
        result,
        stream,
        stream_dropped,
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    fn agent(node_allow: NodeAllow) -> Agent {
        // The journal a session holds: in the build's directory, not the
        // node's /var/lib/wirebench (set once, before any test reads it).
        static STATE: std::sync::Once = std::sync::Once::new();
        STATE.call_once(|| {
            let d = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/test-agent-state");
            std::env::set_var("WIREBENCH_STATE_DIR", d);
        });
        Agent::new(AgentConfig {
            program: PathBuf::from("/nonexistent"),
            version: crate::AGENT_PROTOCOL_VERSION,
            revision: crate::AGENT_PROTOCOL_REVISION,
            tool_version: "test".into(),
            node_allow,
        })
    }

    /// The agent's answers to `lines`, one string each. One session at a
    /// time: a session that may change links holds the node's journal
    /// lock, and the tests share one state directory.
    fn session(a: Agent, lines: &[&str]) -> Vec<String> {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        let mut out = Vec::new();
        a.serve(std::io::Cursor::new(input.into_bytes()), &mut out);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn hello(allow: &str) -> String {
        format!(
            r#"{{"id":1,"op":"hello","version":{},"allow":{allow}}}"#,
            crate::AGENT_PROTOCOL_VERSION
        )
    }

    #[test]
    fn a_controllers_wildcard_cannot_widen_the_nodes_list() {
        let node = NodeAllow::List {
            ifaces: vec!["wbtest0".into()],
            from: "--allow-iface".into(),
        };
        let r = session(
            agent(node),
            &[
                &hello(r#"{"mtu":["*"],"rate":["*"]}"#),
                r#"{"id":2,"op":"set_mtu","iface":"wbtest1","mtu":1400}"#,
                r#"{"id":3,"op":"set_rate","iface":"wbtest1","rate_bps":1000000}"#,
                r#"{"id":4,"op":"set_mtu","iface":"wbtest0","mtu":1400}"#,
            ],
        );
        assert_eq!(r.len(), 4, "{r:?}");
        for l in &r[1..3] {
            assert!(
                l.contains("is refused: wbtest1 is not among the interfaces this node allows (--allow-iface: wbtest0)"),
                "{l}"
            );
        }
        // Both lists allow wbtest0: it gets as far as looking for it.
        assert!(r[3].contains("no interface wbtest0"), "{}", r[3]);
        // A node that allows nothing: even a named interface is refused.
        let r = session(
            agent(NodeAllow::Nothing),
            &[
                &hello(r#"{"mtu":["wbtest0"]}"#),
                r#"{"id":2,"op":"set_mtu","iface":"wbtest0","mtu":1400}"#,
            ],
        );
        assert!(
            r[1].contains("this node lets no controller change its interfaces"),
            "{r:?}"
        );
    }

    #[test]
    fn a_start_naming_a_file_outside_the_work_directory_is_refused() {
        let r = session(
            agent(NodeAllow::Nothing),
            &[
                &hello("{}"),
                r#"{"id":2,"op":"start","role":"sender","args":["-a","127.0.0.1","-l","../out/x"]}"#,
                r#"{"id":3,"op":"start","role":"receiver","args":["-x","/etc"]}"#,
            ],
        );
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(
            r[1].contains(r#""reply":"error""#)
                && r[1].contains("start: -l ../out/x: `..` is not allowed"),
            "{}",
            r[1]
        );
        assert!(
            r[2].contains("start: -x /etc: outside the agent's work directory"),
            "{}",
            r[2]
        );
    }

    #[test]
    fn an_agent_line_over_the_limit_ends_the_session_with_one_error_line() {
        let mut input = hello("{}").into_bytes();
        input.push(b'\n');
        input.extend(std::iter::repeat_n(b' ', MAX_LINE + 1));
        input.extend_from_slice(b"\n{\"id\":3,\"op\":\"cpu\"}\n");
        let mut out = Vec::new();
        agent(NodeAllow::Nothing).serve(std::io::Cursor::new(input), &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[1].contains(&format!("request line over {MAX_LINE} bytes")),
            "{text}"
        );
    }

    #[test]
    fn stream_lines_beyond_the_buffer_are_dropped_and_counted() {
        let b = StreamBuf::default();
        let text: String = (0..MAX_STREAM_BUFFER + 10)
            .map(|i| format!("{{\"event\":\"interval\",\"data\":{{\"n\":{i}}}}}\nnoise\n"))
            .collect();
        b.fill(text.as_bytes());
        let (lines, dropped) = b.take();
        assert_eq!((lines.len(), dropped), (MAX_STREAM_BUFFER, 10));
        assert_eq!(lines[0]["data"]["n"], 10);
        assert_eq!(b.take().1, 0);
    }

    #[test]
    fn a_line_that_is_not_utf8_gets_an_error_line_and_the_agent_goes_on() {
        let agent = agent(NodeAllow::Nothing);
        let mut input = b"{\"id\":1,\"op\":\"cpu\xff\"}\n".to_vec();
        input.extend_from_slice(b"{\"id\":2,\"op\":\"cpu\"}\n");
        let mut out = Vec::new();
        agent.serve(std::io::Cursor::new(input), &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains("not UTF-8"), "{text}");
        // The next request was read and answered (hello must come first).
        assert!(
            lines[1].contains("\"id\":2") && lines[1].contains("hello"),
            "{text}"
        );
    }
}
