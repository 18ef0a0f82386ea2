//! The run loop: matrix × repetitions, one `wirebench send` per run against
//! a `wirebench recv` that lives as long as the test-bed, every run stored
//! the moment it ends.
//!
//! Traffic runs in child processes (the same binary, or `--binary`), so a
//! crash of the engine costs one run, not the campaign, and the sender runs
//! inside the sender node's namespace exactly as a user would run it. The
//! children get their own process group (a terminal Ctrl-C reaches only
//! us, and we stop them in order) and die with us (`PR_SET_PDEATHSIG`), so
//! even a SIGKILLed campaign leaves no stray receiver holding a port.

use crate::campaign::{Campaign, Order, RunLength, Scenario, Target, TestbedTarget};
use crate::env;
use crate::store::{NewCampaign, NewRun, RunStatus, Store, StoreError};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::Value;
use std::collections::HashSet;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user asked for something impossible (exit 2 in the CLI).
    #[error("{0}")]
    BadInput(String),
    #[error("test-bed: {0}")]
    Testbed(String),
    #[error("receiver: {0}")]
    Receiver(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
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
    pub tool_version: String,
    /// The command line that started the campaign, kept in the environment.
    pub command_line: String,
}

/// What a campaign run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub campaign_id: i64,
    pub planned: usize,
    /// Runs already stored (`ok`) before this invocation (resume).
    pub already_done: usize,
    pub ok: usize,
    pub failed: usize,
    /// Stopped by SIGINT/SIGTERM; the run in flight was not stored.
    pub interrupted: bool,
}

// ---------------------------------------------------------------- signals

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    if STOP.swap(true, Ordering::SeqCst) {
        // A second Ctrl-C: the user wants out now. The test-bed is left
        // behind and removed by the next `up` of the same name.
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// SIGINT/SIGTERM set a flag the loop checks; the first one aborts the run
/// in flight (not stored) and tears down cleanly.
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only touches an
        // atomic (and _exit) is valid and async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once SIGINT/SIGTERM arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

// ---------------------------------------------------------------- children

/// Own process group (no terminal signals), killed when we die.
fn detach(cmd: &mut Command) {
    cmd.process_group(0);
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no
    // memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
}

/// SIGTERM to the child's group, SIGKILL after a grace period.
fn stop_child(child: &mut Child, grace: Duration) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child's process group.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = child.wait();
}

fn read_tail(path: &Path, max: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let s = s.trim();
    if s.len() > max {
        let mut start = s.len() - max;
        while !s.is_char_boundary(start) {
            start += 1;
        }
        format!("…{}", &s[start..])
    } else {
        s.to_string()
    }
}

/// True when process `pid` (in its own network namespace) listens on TCP `port`.
fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    for f in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A" {
                return true;
            }
        }
    }
    false
}

/// A TCP port free on both 127.0.0.1 and ::1 (loopback mode: the control
/// port must not collide with anything else on this host).
fn free_port() -> Result<u16, RunError> {
    for _ in 0..50 {
        let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| RunError::io("finding a free port", e))?;
        let port = l
            .local_addr()
            .map_err(|e| RunError::io("finding a free port", e))?
            .port();
        if std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, port)).is_ok()
            || std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_err()
        {
            return Ok(port);
        }
    }
    Err(RunError::Receiver(
        "no free control port on loopback".into(),
    ))
}

// ---------------------------------------------------------------- beds

/// Where traffic runs: loopback, an emulated test-bed or real hosts.
trait Bed {
    /// Builds or rebuilds for these link settings (no-op when unchanged).
    fn ensure(&mut self, s: &Scenario) -> Result<(), RunError>;
    fn sender(&self, program: &Path) -> Result<Command, RunError>;
    /// None when the receiver is not ours to start (real hosts).
    fn receiver(&self, program: &Path) -> Result<Option<Command>, RunError>;
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError>;
    fn port(&self) -> u16;
    /// A counter snapshot, where the bed has counters.
    fn counters(&self) -> Option<Value>;
    fn delta(&self, before: &Value, after: &Value) -> Option<Value>;
    /// True when `ensure` rebuilt since the last call (the receiver must restart).
    fn take_rebuilt(&mut self) -> bool;
    /// True when `invalidate` + `ensure` builds the bed anew.
    fn can_rebuild(&self) -> bool {
        false
    }
    /// Forget the current build so that the next `ensure` rebuilds.
    fn invalidate(&mut self) {}
    fn teardown(&mut self) -> Result<(), RunError>;
}

struct Loopback {
    port: u16,
    started: bool,
}

impl Bed for Loopback {
    fn ensure(&mut self, _s: &Scenario) -> Result<(), RunError> {
        Ok(())
    }
    fn sender(&self, program: &Path) -> Result<Command, RunError> {
        Ok(Command::new(program))
    }
    fn receiver(&self, program: &Path) -> Result<Option<Command>, RunError> {
        Ok(Some(Command::new(program)))
    }
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError> {
        Ok(if v6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        })
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn counters(&self) -> Option<Value> {
        None
    }
    fn delta(&self, _b: &Value, _a: &Value) -> Option<Value> {
        None
    }
    fn take_rebuilt(&mut self) -> bool {
        !std::mem::replace(&mut self.started, true)
    }
    fn teardown(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

struct Hosts {
    v4: Option<IpAddr>,
    v6: Option<IpAddr>,
    port: u16,
}

impl Bed for Hosts {
    fn ensure(&mut self, _s: &Scenario) -> Result<(), RunError> {
        Ok(())
    }
    fn sender(&self, program: &Path) -> Result<Command, RunError> {
        Ok(Command::new(program))
    }
    fn receiver(&self, _program: &Path) -> Result<Option<Command>, RunError> {
        Ok(None)
    }
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError> {
        let a = if v6 { self.v6 } else { self.v4 };
        a.ok_or_else(|| {
            RunError::BadInput(format!(
                "[hosts] has no IPv{} receiver address for an ip={} scenario",
                if v6 { 6 } else { 4 },
                if v6 { 6 } else { 4 }
            ))
        })
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn counters(&self) -> Option<Value> {
        None
    }
    fn delta(&self, _b: &Value, _a: &Value) -> Option<Value> {
        None
    }
    fn take_rebuilt(&mut self) -> bool {
        false
    }
    fn teardown(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

struct Emulated {
    target: TestbedTarget,
    /// Directory of the campaign file (topology files are relative to it).
    base: PathBuf,
    tb: Option<wirebench_testbed::Testbed>,
    current: Option<(Option<u32>, Option<String>, Option<bool>)>,
    rebuilt: bool,
}

fn tb_err(e: wirebench_testbed::TestbedError) -> RunError {
    if e.is_bad_input() {
        RunError::BadInput(e.to_string())
    } else {
        RunError::Testbed(e.to_string())
    }
}

impl Emulated {
    fn tb(&self) -> Result<&wirebench_testbed::Testbed, RunError> {
        self.tb
            .as_ref()
            .ok_or_else(|| RunError::Testbed("not up".into()))
    }
}

impl Bed for Emulated {
    fn ensure(&mut self, s: &Scenario) -> Result<(), RunError> {
        let want = s.link_key();
        if self.tb.is_some() && self.current.as_ref() == Some(&want) {
            return Ok(());
        }
        self.teardown()?;
        let rate_bps = match &s.settings.link_rate {
            Some(r) => Some(wirebench_testbed::parse_rate(r).map_err(tb_err)?),
            None => None,
        };
        let opts = wirebench_testbed::LinkOpts {
            mtu: s.settings.mtu,
            rate_bps,
            offloads: s.settings.offloads,
        };
        let spec = match (&self.target.preset, &self.target.file) {
            (Some(p), _) => wirebench_testbed::preset(p, &opts).map_err(tb_err)?,
            (None, Some(f)) => {
                let path = self.base.join(f);
                wirebench_testbed::load_file(&path, &opts).map_err(tb_err)?
            }
            (None, None) => {
                return Err(RunError::BadInput("[testbed] needs preset or file".into()))
            }
        };
        let tb = wirebench_testbed::Testbed::up(&self.target.name, &spec).map_err(tb_err)?;
        self.tb = Some(tb);
        self.current = Some(want);
        self.rebuilt = true;
        Ok(())
    }
    fn sender(&self, program: &Path) -> Result<Command, RunError> {
        self.tb()?
            .command(&self.target.sender, &program.to_string_lossy())
            .map_err(tb_err)
    }
    fn receiver(&self, program: &Path) -> Result<Option<Command>, RunError> {
        self.tb()?
            .command(&self.target.receiver, &program.to_string_lossy())
            .map(Some)
            .map_err(tb_err)
    }
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError> {
        self.tb()?.addr(&self.target.receiver, v6).map_err(tb_err)
    }
    fn port(&self) -> u16 {
        5400
    }
    fn counters(&self) -> Option<Value> {
        let c = self.tb.as_ref()?.counters().ok()?;
        serde_json::to_value(c).ok()
    }
    fn delta(&self, before: &Value, after: &Value) -> Option<Value> {
        let b: wirebench_testbed::Counters = serde_json::from_value(before.clone()).ok()?;
        let a: wirebench_testbed::Counters = serde_json::from_value(after.clone()).ok()?;
        let d = a.delta(&b);
        let sites = d.drop_sites();
        Some(serde_json::json!({ "nodes": d.nodes, "drop_sites": sites }))
    }
    fn take_rebuilt(&mut self) -> bool {
        std::mem::replace(&mut self.rebuilt, false)
    }
    fn can_rebuild(&self) -> bool {
        true
    }
    fn invalidate(&mut self) {
        self.current = None;
    }
    fn teardown(&mut self) -> Result<(), RunError> {
        self.current = None;
        match self.tb.take() {
            Some(tb) => tb.down().map_err(tb_err),
            None => Ok(()),
        }
    }
}

// ---------------------------------------------------------------- plan

/// One planned run.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    pub scenario: Scenario,
    pub repetition: u32,
}

/// The order runs are made in: scenarios grouped by link settings (so the
/// test-bed is rebuilt only when a link setting changes), and within a
/// group repetition rounds (every scenario once, then again), so slow drift
/// of the machine spreads over all scenarios instead of biasing one.
/// `shuffled` permutes the groups and each round with the campaign's seed.
pub fn plan(c: &Campaign) -> Vec<PlannedRun> {
    let scenarios = c.expand();
    let mut groups: Vec<Vec<Scenario>> = Vec::new();
    for s in scenarios {
        match groups.iter_mut().find(|g| g[0].link_key() == s.link_key()) {
            Some(g) => g.push(s),
            None => groups.push(vec![s]),
        }
    }
    let mut rng = match c.order {
        Order::Shuffled { seed } => Some(rand_chacha::ChaCha8Rng::seed_from_u64(seed)),
        Order::Sequential => None,
    };
    if let Some(r) = rng.as_mut() {
        groups.shuffle(r);
    }
    let mut out = Vec::new();
    for g in &groups {
        for rep in 0..c.repetitions {
            let mut round: Vec<&Scenario> = g.iter().collect();
            if let Some(r) = rng.as_mut() {
                round.shuffle(r);
            }
            out.extend(round.into_iter().map(|s| PlannedRun {
                scenario: s.clone(),
                repetition: rep,
            }));
        }
    }
    out
}

/// A stable per-run seed: campaign seed, scenario key and repetition.
fn run_seed(c: &Campaign, key: &str, rep: u32) -> u64 {
    // FNV-1a: stable across Rust versions, unlike DefaultHasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ c.seed;
    for b in key.as_bytes().iter().chain(&rep.to_le_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % (1 << 53)
}

/// The `wirebench send` arguments for one run (without `--json`).
pub fn send_args(
    c: &Campaign,
    s: &Scenario,
    dest: IpAddr,
    port: u16,
    seed: u64,
    length: RunLength,
) -> Vec<String> {
    let st = &s.settings;
    let mut a: Vec<String> = vec![
        "send".into(),
        "-a".into(),
        dest.to_string(),
        "-p".into(),
        port.to_string(),
    ];
    a.push(if st.ip == 6 { "-6" } else { "-4" }.into());
    a.extend([
        "-T".into(),
        st.transport.clone(),
        "-m".into(),
        st.meter.clone(),
    ]);
    if st.app == "constant" {
        if st.max_rate {
            a.push("--max".into());
        } else if let Some(p) = st.pps {
            a.extend(["-C".into(), p.to_string()]);
        }
        if let Some(p) = st.payload {
            a.extend(["-c".into(), p.to_string()]);
        }
    } else {
        a.extend(["--app".into(), st.app.clone()]);
        if let Some(codec) = &st.codec {
            a.extend(["--codec".into(), codec.clone()]);
        }
    }
    if st.flows > 1 {
        a.extend(["--flows".into(), st.flows.to_string()]);
    }
    match length {
        RunLength::Duration { seconds } => {
            a.extend(["-t".into(), ((seconds * 1000.0).round() as u64).to_string()])
        }
        RunLength::Packets { count } => a.extend(["-z".into(), count.to_string()]),
        RunLength::KBytes { count } => a.extend(["-k".into(), count.to_string()]),
    }
    if let Some(l) = c.linger_s {
        a.extend(["--linger".into(), ((l * 1000.0).round() as u64).to_string()]);
    }
    a.extend(["--seed".into(), seed.to_string()]);
    a
}

/// How long a run may take before it is killed: the expected length plus
/// the receiver's linger (2 s) and generous slack for setup.
fn run_timeout(c: &Campaign, s: &Scenario) -> Duration {
    if let Some(t) = c.run_timeout_s {
        return Duration::from_secs_f64(t);
    }
    let expected = match c.length {
        RunLength::Duration { seconds } => seconds,
        RunLength::Packets { count } => match s.settings.pps {
            Some(p) if !s.settings.max_rate => count as f64 / p,
            _ => 300.0,
        },
        RunLength::KBytes { .. } => 300.0,
    };
    Duration::from_secs_f64(expected * 1.5 + 30.0 + c.linger_s.unwrap_or(2.0))
}

// ---------------------------------------------------------------- loop

struct Receiver {
    child: Child,
    command: String,
    log: PathBuf,
}

struct Ctx<'a> {
    c: &'a Campaign,
    store: &'a Store,
    opts: &'a RunOptions,
    work: PathBuf,
    receiver: Option<Receiver>,
}

enum RunEnd {
    Stored(RunStatus),
    Interrupted,
}

fn cmd_text(program: &Path, args: &[String]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

impl Ctx<'_> {
    fn stop_receiver(&mut self) {
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
    fn send(
        &self,
        bed: &dyn Bed,
        args: &[String],
        json: &Path,
        timeout: Duration,
    ) -> Result<Option<(std::process::ExitStatus, String, bool)>, RunError> {
        let mut cmd = bed.sender(&self.opts.binary)?;
        let err_path = self.work.join("send.err");
        let errf = std::fs::File::create(&err_path)
            .map_err(|e| RunError::io("creating the sender log", e))?;
        let _ = std::fs::remove_file(json);
        cmd.args(args)
            .arg(format!("--json={}", json.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(errf);
        detach(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| RunError::io(format!("starting {}", self.opts.binary.display()), e))?;
        let t0 = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return Ok(Some((st, read_tail(&err_path, 800), false))),
                Ok(None) => {}
                Err(e) => return Err(RunError::io("waiting for the sender", e)),
            }
            if stop_requested() {
                stop_child(&mut child, Duration::from_secs(2));
                return Ok(None);
            }
            if t0.elapsed() > timeout {
                stop_child(&mut child, Duration::from_secs(2));
                let st = child
                    .wait()
                    .map_err(|e| RunError::io("waiting for the sender", e))?;
                return Ok(Some((st, read_tail(&err_path, 800), true)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn one_run(
        &mut self,
        bed: &mut dyn Bed,
        cid: i64,
        pr: &PlannedRun,
    ) -> Result<RunEnd, RunError> {
        let s = &pr.scenario;
        bed.ensure(s)?;
        let receiver_dead = self
            .receiver
            .as_mut()
            .is_some_and(|r| !matches!(r.child.try_wait(), Ok(None)));
        if bed.take_rebuilt() || receiver_dead || self.receiver.is_none() {
            if let Err(first) = self.start_receiver(bed) {
                if !bed.can_rebuild() {
                    return Err(first);
                }
                // Something removed the test-bed under us (a stray `testbed
                // down`, a crashed run's cleanup): build it again, once.
                eprintln!("wirebench: {first}; rebuilding the test-bed and retrying once");
                bed.invalidate();
                bed.ensure(s)?;
                bed.take_rebuilt();
                self.start_receiver(bed)?;
            }
        }
        if stop_requested() {
            return Ok(RunEnd::Interrupted);
        }
        let dest = bed.dest(s.settings.ip == 6)?;
        let seed = run_seed(self.c, &s.key, pr.repetition);
        let timeout = run_timeout(self.c, s);
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
            if self.send(bed, &args, &warm, t)?.is_none() {
                return Ok(RunEnd::Interrupted);
            }
        }
        let args = send_args(self.c, s, dest, bed.port(), seed, self.c.length);
        let json = self.work.join("result.json");
        let mut command = cmd_text(&self.opts.binary, &args);
        command.push_str(" --json=FILE");
        if let Some(r) = &self.receiver {
            command = format!("receiver: {}\nsender: {command}", r.command);
        }
        let before = bed.counters();
        let started = env::now_rfc3339();
        let Some((status, stderr, timed_out)) = self.send(bed, &args, &json, timeout)? else {
            return Ok(RunEnd::Interrupted);
        };
        let ended = env::now_rfc3339();
        let after = bed.counters();
        let counters = match (&before, &after) {
            (Some(b), Some(a)) => bed.delta(b, a),
            _ => None,
        };
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
            counters: counters.as_ref(),
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
}

fn make_bed(c: &Campaign) -> Result<Box<dyn Bed>, RunError> {
    Ok(match &c.target {
        Target::Loopback => Box::new(Loopback {
            port: free_port()?,
            started: false,
        }),
        Target::Hosts(h) => Box::new(Hosts {
            v4: h.receiver.as_deref().and_then(|a| a.parse().ok()),
            v6: h.receiver6.as_deref().and_then(|a| a.parse().ok()),
            port: h.port.unwrap_or(5400),
        }),
        Target::Testbed(t) => {
            if !wirebench_testbed::sys::is_root() {
                return Err(RunError::BadInput(
                    "an emulated [testbed] needs root (network namespaces); run as root, or use [loopback]".into(),
                ));
            }
            let base = Path::new(&c.origin)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            Box::new(Emulated {
                target: t.clone(),
                base,
                tb: None,
                current: None,
                rebuilt: false,
            })
        }
    })
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

/// Consecutive failures, with no success yet, after which a campaign stops.
pub const FAIL_FAST_RUNS: usize = 3;

/// Runs (or resumes) a campaign into `store`.
pub fn run_campaign(c: &Campaign, store: &Store, opts: &RunOptions) -> Result<Outcome, RunError> {
    let planned = plan(c);
    let mut env_ = env::collect(&c.target.describe(), &opts.tool_version);
    env_.extra
        .insert("command".into(), opts.command_line.clone());
    env_.extra
        .insert("binary".into(), opts.binary.display().to_string());
    let (cid, done) = if opts.resume {
        let row = store.latest_by_name(&c.name)?.ok_or_else(|| {
            RunError::BadInput(format!(
                "--resume: no campaign named {:?} in {}",
                c.name,
                store.path().display()
            ))
        })?;
        if row.file_text != c.text {
            return Err(RunError::BadInput(format!(
                "--resume: the campaign file changed since campaign {} ({}) started; run without --resume to start a new campaign",
                row.id, row.started_at
            )));
        }
        if row.quick != c.quick {
            return Err(RunError::BadInput(format!(
                "--resume: campaign {} was started {} --quick; resume it the same way",
                row.id,
                if row.quick { "with" } else { "without" }
            )));
        }
        store.set_campaign_status(row.id, "running")?;
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
    let todo: Vec<&PlannedRun> = planned
        .iter()
        .filter(|p| !done.contains(&(p.scenario.key.clone(), p.repetition)))
        .collect();
    let already = planned.len() - todo.len();
    let mut out = Outcome {
        campaign_id: cid,
        planned: planned.len(),
        already_done: already,
        ok: 0,
        failed: 0,
        interrupted: false,
    };
    if todo.is_empty() {
        store.set_campaign_status(cid, "done")?;
        return Ok(out);
    }

    let work = std::env::temp_dir().join(format!("wirebench-campaign-{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .map_err(|e| RunError::io(format!("creating {}", work.display()), e))?;
    let mut bed = make_bed(c)?;
    let mut ctx = Ctx {
        c,
        store,
        opts,
        work: work.clone(),
        receiver: None,
    };
    let pb = progress_bar(planned.len(), already, opts.progress);
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
    for (i, pr) in todo.iter().enumerate() {
        if stop_requested() {
            out.interrupted = true;
            break;
        }
        if i > 0 && c.pause_s > 0.0 {
            let t0 = Instant::now();
            while t0.elapsed().as_secs_f64() < c.pause_s && !stop_requested() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        pb.set_message(format!("{} #{}", pr.scenario.key, pr.repetition + 1));
        match ctx.one_run(bed.as_mut(), cid, pr) {
            Ok(RunEnd::Stored(st)) => {
                match st {
                    RunStatus::Ok => out.ok += 1,
                    RunStatus::Failed => out.failed += 1,
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
                let n = already + out.ok + out.failed;
                say(
                    &pb,
                    format!(
                        "[{n}/{}] {} #{}: {}",
                        planned.len(),
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
    let status = if out.interrupted || result.is_err() {
        "interrupted"
    } else if store.finished(cid)?.len() == planned.len() {
        "done"
    } else {
        "incomplete"
    };
    store.set_campaign_status(cid, status)?;
    result?;
    down?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
repetitions = 2
[testbed]
preset = "router"
[matrix]
ip = [4, 6]
payload = [100, 200]
mtu = [1500, 9000]
"#;

    fn order(text: &str) -> Vec<(String, u32)> {
        let c = Campaign::parse(text, "t.toml").unwrap();
        plan(&c)
            .into_iter()
            .map(|p| (p.scenario.key, p.repetition))
            .collect()
    }

    #[test]
    fn runs_grouped_by_link_settings_in_rounds() {
        let o = order(FILE);
        assert_eq!(o.len(), 16);
        // All MTU 1500 runs first (one build), then all MTU 9000 runs.
        assert!(o[..8].iter().all(|(k, _)| k.ends_with("mtu=1500")));
        assert!(o[8..].iter().all(|(k, _)| k.ends_with("mtu=9000")));
        // Within a group: every scenario once (round 0), then again (round 1).
        assert!(o[..4].iter().all(|(_, r)| *r == 0));
        assert!(o[4..8].iter().all(|(_, r)| *r == 1));
        let unique: HashSet<_> = o.iter().collect();
        assert_eq!(unique.len(), 16);
    }

    #[test]
    fn shuffled_is_a_seeded_permutation_that_keeps_groups() {
        let shuffled = format!("order = \"shuffled\"\nseed = 7\n{FILE}");
        let a = order(&shuffled);
        assert_eq!(a, order(&shuffled), "same seed, same order");
        let other = order(&shuffled.replace("seed = 7", "seed = 8"));
        let seq = order(FILE);
        assert_ne!(a, seq);
        assert_ne!(a, other);
        let mut sa = a.clone();
        let mut ss = seq.clone();
        sa.sort();
        ss.sort();
        assert_eq!(sa, ss, "a permutation of the same runs");
        let mtu_of = |k: &str| k.rsplit('=').next().unwrap().to_string();
        assert!(
            a[..8].iter().all(|(k, _)| mtu_of(k) == mtu_of(&a[0].0)),
            "groups stay together"
        );
    }

    #[test]
    fn send_args_follow_the_scenario() {
        let c = Campaign::parse(
            "linger_s = 0.5\npackets = 100\n[loopback]\n[[matrix]]\nip = [6]\ntransport = [\"tcp\"]\nframe = [1518]\npps = [\"max\"]\nflows = [4]\n[[matrix]]\napp = [\"voip\"]\ncodec = [\"G.729.2\"]\nmeter = [\"rtt\"]\n",
            "t.toml",
        )
        .unwrap();
        let s = c.expand();
        let a = send_args(&c, &s[0], "::1".parse().unwrap(), 5401, 9, c.length).join(" ");
        assert_eq!(a, "send -a ::1 -p 5401 -6 -T tcp -m owd --max -c 1428 --flows 4 -z 100 --linger 500 --seed 9");
        let b = send_args(&c, &s[1], "127.0.0.1".parse().unwrap(), 5401, 9, c.length).join(" ");
        assert_eq!(b, "send -a 127.0.0.1 -p 5401 -4 -T udp -m rtt --app voip --codec G.729.2 -z 100 --linger 500 --seed 9");
        assert_ne!(run_seed(&c, &s[0].key, 0), run_seed(&c, &s[0].key, 1));
    }
}
