//! The controller's side: opening a byte stream to an agent and calling it.
//! How the stream is opened is the only difference between kinds of node
//! ([`Channel`]): a child process, `ip netns exec`, or the system OpenSSH
//! client. Everything above [`AgentConn`] is the same for all three.
//!
//! SSH runs with `BatchMode=yes` (a password prompt fails instead of
//! hanging) and otherwise the user's own configuration: keys, ~/.ssh/config,
//! ProxyJump, known_hosts. SSH is the authentication and encryption of this
//! path; the agent protocol adds none.

use crate::proto::{
    Allow, Controller, CpuSample, HelloInfo, HostMeta, Op, ProcessState, Reply, Request, Response,
    Role, AGENT_PROTOCOL_REVISION, AGENT_PROTOCOL_VERSION, MAX_LINE,
};
use crate::AgentError;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wirebench_testbed::IfaceCounters;

/// How to reach a node's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// `PROGRAM agent --stdio` as a child of this process.
    Local {
        /// The wirebench binary.
        program: PathBuf,
    },
    /// `ip netns exec NS PROGRAM agent --stdio` (an emulated node).
    Netns {
        /// The namespace's name.
        ns: String,
        /// The wirebench binary.
        program: PathBuf,
    },
    /// `ssh -o BatchMode=yes [OPTIONS] DEST PROGRAM agent --stdio`.
    Ssh {
        /// `[USER@]HOST`.
        dest: String,
        /// The remote command's program: `wirebench` on the remote PATH,
        /// or a path.
        program: String,
        /// Extra `ssh` arguments (e.g. `-F FILE`, `-p PORT`).
        options: Vec<String>,
    },
}

impl Channel {
    /// The command that starts the agent, `extra` appended to its
    /// arguments.
    pub fn command(&self, extra: &[String]) -> Command {
        let agent_args = ["agent".to_string(), "--stdio".to_string()];
        match self {
            Channel::Local { program } => {
                let mut c = Command::new(program);
                c.args(agent_args).args(extra);
                c
            }
            Channel::Netns { ns, program } => {
                let ip = crate::host::tool("ip").unwrap_or_else(|| PathBuf::from("ip"));
                let mut c = Command::new(ip);
                c.args(["netns", "exec", ns])
                    .arg(program)
                    .args(agent_args)
                    .args(extra);
                c
            }
            Channel::Ssh {
                dest,
                program,
                options,
            } => {
                let mut c = Command::new("ssh");
                // No terminal, no prompt; a dead link is noticed within
                // ~30 s even when nothing is being sent.
                c.args([
                    "-T",
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "ServerAliveInterval=10",
                    "-o",
                    "ServerAliveCountMax=3",
                ])
                .args(options)
                .arg(dest)
                .arg("--")
                .arg(program)
                .args(agent_args)
                .args(extra);
                c
            }
        }
    }

    /// `ssh root@10.0.1.1`, `netns wb-x-r1`, `local`.
    pub fn describe(&self) -> String {
        match self {
            Channel::Local { .. } => "local".into(),
            Channel::Netns { ns, .. } => format!("netns {ns}"),
            Channel::Ssh { dest, .. } => format!("ssh {dest}"),
        }
    }

    fn program(&self) -> String {
        match self {
            Channel::Local { program } | Channel::Netns { program, .. } => {
                program.display().to_string()
            }
            Channel::Ssh { program, .. } => program.clone(),
        }
    }
}

/// What to start and how.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Node name in the campaign (used in every error).
    pub node: String,
    /// How to reach it.
    pub channel: Channel,
    /// What the campaign lets it change (the node's own list may narrow
    /// it).
    pub allow: Allow,
    /// Extra agent arguments (tests: `--protocol-version`).
    pub extra: Vec<String>,
    /// Who is connecting (recorded in the node's lab lock).
    pub controller: Option<Controller>,
}

/// `extra`, and for an agent on this host (a child, or in a namespace of
/// this host) the interfaces its `allow` names as its `--allow-iface`: the
/// controller is that node's owner, so its word is the node's. A remote
/// node decides for itself (docs/agents.md).
fn local_allow(spec: &AgentSpec) -> Vec<String> {
    let mut extra = spec.extra.clone();
    if matches!(spec.channel, Channel::Ssh { .. }) {
        return extra;
    }
    let a = &spec.allow;
    let mut names: Vec<&String> = a.mtu.iter().chain(&a.offloads).chain(&a.rate).collect();
    names.sort();
    names.dedup();
    if !names.is_empty() {
        extra.push("--allow-iface".into());
        extra.push(
            names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    extra
}

enum Line {
    Text(String),
    Eof,
    Err(String),
}

/// A connected agent that answered `hello` with our protocol version.
pub struct AgentConn {
    node: String,
    channel: Channel,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Line>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
    broken: Option<String>,
    /// The agent's answer to `hello`.
    pub hello: HelloInfo,
}

/// How long an ordinary request may take (metadata runs ethtool per
/// interface; a path-MTU search sends ~20 probes).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn spawn_reader<R: Read + Send + 'static>(r: R) -> mpsc::Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        loop {
            let mut line = String::new();
            match r.by_ref().take(MAX_LINE as u64 + 1).read_line(&mut line) {
                Ok(0) => {
                    let _ = tx.send(Line::Eof);
                    break;
                }
                Ok(_) if line.len() > MAX_LINE => {
                    let _ = tx.send(Line::Err(format!("a reply line over {MAX_LINE} bytes")));
                    break;
                }
                Ok(_) => {
                    if tx.send(Line::Text(line)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Line::Err(e.to_string()));
                    break;
                }
            }
        }
    });
    rx
}

/// Keeps the last few KB of the agent's stderr for error messages.
fn spawn_stderr<R: Read + Send + 'static>(r: R) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = String::new();
        while matches!(r.read_line(&mut line), Ok(n) if n > 0) {
            let mut s = b.lock().unwrap_or_else(|p| p.into_inner());
            s.push_str(&line);
            if s.len() > 8192 {
                let mut cut = s.len() - 4096;
                while !s.is_char_boundary(cut) {
                    cut += 1;
                }
                s.drain(..cut);
            }
            line.clear();
        }
    });
    buf
}

impl AgentConn {
    /// Starts the agent and says hello; fails with a message naming the
    /// node, the transport and what to do (binary missing, other protocol
    /// version, SSH refused).
    pub fn connect(spec: &AgentSpec) -> Result<AgentConn, AgentError> {
        let mut cmd = spec.channel.command(&local_allow(spec));
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            // Own process group: a terminal Ctrl-C reaches the controller,
            // which ends the session in order (the agent restores on EOF).
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = cmd.spawn().map_err(|e| AgentError::Spawn {
            node: spec.node.clone(),
            what: format!("{:?}", cmd).replace('"', ""),
            source: e,
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(AgentError::Lost {
                node: spec.node.clone(),
                reason: "no pipes to the agent".into(),
            });
        };
        let mut conn = AgentConn {
            node: spec.node.clone(),
            channel: spec.channel.clone(),
            child,
            stdin: Some(stdin),
            lines: spawn_reader(stdout),
            stderr: spawn_stderr(stderr),
            next_id: 1,
            broken: None,
            hello: HelloInfo {
                version: 0,
                tool_version: String::new(),
                hostname: String::new(),
                pid: 0,
                net_admin: false,
                revision: 0,
                mgmt: Vec::new(),
                recovered: Vec::new(),
            },
        };
        let reply = conn.call(
            Op::Hello {
                version: AGENT_PROTOCOL_VERSION,
                allow: spec.allow.clone(),
                revision: AGENT_PROTOCOL_REVISION,
                controller: spec.controller.clone(),
            },
            CALL_TIMEOUT,
        );
        match reply {
            Ok(Reply::Hello(h)) if h.version == AGENT_PROTOCOL_VERSION => {
                conn.hello = h;
                Ok(conn)
            }
            Ok(Reply::Hello(h)) => Err(AgentError::Version {
                node: spec.node.clone(),
                how: spec.channel.describe(),
                ours: AGENT_PROTOCOL_VERSION,
                theirs: h.version,
                their_release: h.tool_version,
                our_release: env!("CARGO_PKG_VERSION").to_string(),
            }),
            Ok(other) => Err(AgentError::Protocol {
                node: spec.node.clone(),
                message: format!("expected a hello, got {other:?}"),
            }),
            Err(AgentError::Lost { reason, .. }) => Err(conn.not_started(reason)),
            Err(AgentError::Remote { node, message })
                if message.starts_with(crate::journal::BUSY_PREFIX) =>
            {
                Err(AgentError::Busy { node, message })
            }
            Err(e) => Err(e),
        }
    }

    /// Turns "the stream ended before hello" into what the user can do.
    fn not_started(&mut self, reason: String) -> AgentError {
        let cmd = format!("{} agent --stdio", self.channel.program());
        let missing = reason.contains("status 127")
            || reason.contains("not found")
            || reason.contains("No such file");
        let old = reason.contains("unrecognized subcommand");
        let hint = if missing || old {
            format!(
                "install wirebench {} (agent protocol {}) on that host and put it on PATH, or give the node `agent = \"/path/to/wirebench\"`",
                env!("CARGO_PKG_VERSION"),
                AGENT_PROTOCOL_VERSION
            )
        } else if matches!(self.channel, Channel::Ssh { .. }) {
            "check that `ssh -o BatchMode=yes HOST true` works without a prompt (keys, known_hosts, ~/.ssh/config)".into()
        } else {
            "see the message above".into()
        };
        AgentError::NotStarted {
            node: self.node.clone(),
            how: self.channel.describe(),
            command: cmd,
            reason,
            hint,
        }
    }

    /// The node's name in the campaign.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// How the agent is reached.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Why the agent went away: exit status and the end of its stderr.
    fn gone_reason(&mut self, what: &str) -> String {
        self.stdin.take();
        let mut status = None;
        for _ in 0..50 {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // The stderr reader may still be draining the last lines.
        std::thread::sleep(Duration::from_millis(20));
        let err = self
            .stderr
            .lock()
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let mut r = what.to_string();
        if let Some(s) = status {
            let ssh = matches!(self.channel, Channel::Ssh { .. });
            r.push_str(&format!(" ({})", describe_status(s, ssh)));
        }
        if !err.is_empty() {
            r.push_str(": ");
            r.push_str(&last_lines(&err, 6));
        }
        r
    }

    /// One request, one reply. After a lost stream or a timeout the
    /// connection is broken and every later call fails at once.
    pub fn call(&mut self, op: Op, timeout: Duration) -> Result<Reply, AgentError> {
        if let Some(r) = &self.broken {
            return Err(AgentError::Lost {
                node: self.node.clone(),
                reason: r.clone(),
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut line = Request { id, op }.line();
        line.push('\n');
        let wrote = match self.stdin.as_mut() {
            Some(w) => w.write_all(line.as_bytes()).and_then(|_| w.flush()),
            None => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        };
        if wrote.is_err() {
            let reason = self.gone_reason("the agent's input closed");
            return Err(self.fail(reason));
        }
        loop {
            match self.lines.recv_timeout(timeout) {
                Ok(Line::Text(t)) => {
                    let resp: Response = match serde_json::from_str(&t) {
                        Ok(r) => r,
                        Err(e) => {
                            let reason = format!(
                                "not an agent reply ({e}): {}",
                                t.trim().chars().take(200).collect::<String>()
                            );
                            self.broken = Some(reason.clone());
                            return Err(AgentError::Protocol {
                                node: self.node.clone(),
                                message: reason,
                            });
                        }
                    };
                    if resp.id != id {
                        // A late answer to an earlier, timed-out request.
                        continue;
                    }
                    return match resp.reply {
                        Reply::Error { message } => Err(AgentError::Remote {
                            node: self.node.clone(),
                            message,
                        }),
                        r => Ok(r),
                    };
                }
                Ok(Line::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let reason = self.gone_reason("the agent's stream ended");
                    return Err(self.fail(reason));
                }
                Ok(Line::Err(e)) => {
                    let reason = self.gone_reason(&format!("reading from the agent: {e}"));
                    return Err(self.fail(reason));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let reason = format!("no answer within {} s", timeout.as_secs_f64());
                    self.broken = Some(reason.clone());
                    return Err(AgentError::Lost {
                        node: self.node.clone(),
                        reason,
                    });
                }
            }
        }
    }

    fn fail(&mut self, reason: String) -> AgentError {
        self.broken = Some(reason.clone());
        AgentError::Lost {
            node: self.node.clone(),
            reason,
        }
    }

    fn unexpected(&self, r: Reply) -> AgentError {
        AgentError::Protocol {
            node: self.node.clone(),
            message: format!("unexpected reply {r:?}"),
        }
    }

    /// The node's [`HostMeta`].
    pub fn metadata(&mut self) -> Result<HostMeta, AgentError> {
        match self.call(Op::Metadata, CALL_TIMEOUT)? {
            Reply::Metadata(m) => Ok(*m),
            r => Err(self.unexpected(r)),
        }
    }

    /// A CPU sample of the node and the agent's children.
    pub fn cpu(&mut self) -> Result<CpuSample, AgentError> {
        match self.call(Op::Cpu, CALL_TIMEOUT)? {
            Reply::Cpu(c) => Ok(c),
            r => Err(self.unexpected(r)),
        }
    }

    /// Every interface's counters and qdisc statistics.
    pub fn counters(&mut self) -> Result<BTreeMap<String, IfaceCounters>, AgentError> {
        match self.call(Op::Counters, CALL_TIMEOUT)? {
            Reply::Counters { ifaces } => Ok(ifaces),
            r => Err(self.unexpected(r)),
        }
    }

    /// Sets `iface`'s MTU (if the campaign and the node allow it).
    pub fn set_mtu(&mut self, iface: &str, mtu: u32) -> Result<(), AgentError> {
        self.done(Op::SetMtu {
            iface: iface.into(),
            mtu,
        })
    }

    /// Switches `iface`'s tso, gso and gro on or off.
    pub fn set_offloads(&mut self, iface: &str, on: bool) -> Result<(), AgentError> {
        self.done(Op::SetOffloads {
            iface: iface.into(),
            on,
        })
    }

    /// Shapes `iface` to `rate_bps` on the wire; None removes the shaping.
    pub fn set_rate(&mut self, iface: &str, rate_bps: Option<u64>) -> Result<(), AgentError> {
        self.done(Op::SetRate {
            iface: iface.into(),
            rate_bps,
        })
    }

    fn done(&mut self, op: Op) -> Result<(), AgentError> {
        match self.call(op, CALL_TIMEOUT)? {
            Reply::Done => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Puts back everything the session changed; one line per change.
    pub fn restore(&mut self) -> Result<Vec<String>, AgentError> {
        match self.call(Op::Restore, CALL_TIMEOUT)? {
            Reply::Restored { actions } => Ok(actions),
            r => Err(self.unexpected(r)),
        }
    }

    /// Starts `wirebench recv|send ARGS`; a receiver is waited for until it
    /// listens on `port`.
    pub fn start(
        &mut self,
        role: Role,
        args: &[String],
        port: Option<u16>,
    ) -> Result<(u32, u32), AgentError> {
        self.start_op(Op::Start {
            role,
            args: args.to_vec(),
            port,
            stream: false,
        })
    }

    /// Starts `wirebench send ARGS --json-stream`: its interval objects
    /// come back in the `stream` of each [`AgentConn::wait`] while it runs.
    /// Only for agents whose `hello.streams_intervals()`; an older agent
    /// would run the sender without them.
    pub fn start_streaming(&mut self, args: &[String]) -> Result<(u32, u32), AgentError> {
        self.start_op(Op::Start {
            role: Role::Sender,
            args: args.to_vec(),
            port: None,
            stream: true,
        })
    }

    fn start_op(&mut self, op: Op) -> Result<(u32, u32), AgentError> {
        match self.call(op, CALL_TIMEOUT)? {
            Reply::Started { handle, pid } => Ok((handle, pid)),
            r => Err(self.unexpected(r)),
        }
    }

    /// Waits up to `timeout` for a child; `running: true` if it still runs.
    /// A streaming sender's reply comes as soon as it printed intervals.
    pub fn wait(&mut self, handle: u32, timeout: Duration) -> Result<ProcessState, AgentError> {
        match self.call(
            Op::Wait {
                handle,
                timeout_ms: timeout.as_millis() as u64,
            },
            timeout + CALL_TIMEOUT,
        )? {
            Reply::Process(p) => Ok(p),
            r => Err(self.unexpected(r)),
        }
    }

    /// Stops a child (SIGTERM, then SIGKILL) and returns its final state.
    pub fn stop(&mut self, handle: u32) -> Result<ProcessState, AgentError> {
        match self.call(Op::Stop { handle }, CALL_TIMEOUT)? {
            Reply::Process(p) => Ok(p),
            r => Err(self.unexpected(r)),
        }
    }

    /// Opens a socket on the node that acknowledges path-MTU probes; its
    /// port.
    pub fn pmtu_listen(&mut self, bind: IpAddr) -> Result<u16, AgentError> {
        match self.call(Op::PmtuListen { bind }, CALL_TIMEOUT)? {
            Reply::PmtuPort { port } => Ok(port),
            r => Err(self.unexpected(r)),
        }
    }

    /// The largest packet that reaches `dest:port` from the node.
    pub fn pmtu_probe(&mut self, dest: IpAddr, port: u16) -> Result<Option<u32>, AgentError> {
        match self.call(Op::PmtuProbe { dest, port }, CALL_TIMEOUT)? {
            Reply::Pmtu { mtu } => Ok(mtu),
            r => Err(self.unexpected(r)),
        }
    }

    /// The interface the node's route to each address leaves by (agent
    /// revision 2).
    pub fn route_ifaces(
        &mut self,
        dests: &[IpAddr],
    ) -> Result<BTreeMap<IpAddr, String>, AgentError> {
        match self.call(
            Op::RouteIfaces {
                dests: dests.to_vec(),
            },
            CALL_TIMEOUT,
        )? {
            Reply::RouteIfaces { ifaces } => Ok(ifaces),
            r => Err(self.unexpected(r)),
        }
    }

    /// Closes a socket of [`AgentConn::pmtu_listen`].
    pub fn pmtu_close(&mut self, port: u16) -> Result<(), AgentError> {
        self.done(Op::PmtuClose { port })
    }

    /// Ends the session: the agent stops its children, restores what it
    /// changed and exits. Returns what it restored.
    pub fn bye(mut self) -> Result<Vec<String>, AgentError> {
        let r = match self.call(Op::Bye, CALL_TIMEOUT)? {
            Reply::Restored { actions } => Ok(actions),
            r => Err(self.unexpected(r)),
        };
        self.close(Duration::from_secs(5));
        r
    }

    /// Closes the stream (the agent cleans up on end of input) and waits up
    /// to `grace` for it to exit before killing the transport process.
    fn close(&mut self, grace: Duration) {
        self.stdin.take();
        let t0 = std::time::Instant::now();
        while t0.elapsed() < grace {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The transport's process id (the ssh client, `ip netns exec`'s
    /// agent, or the local agent).
    pub fn transport_pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for AgentConn {
    fn drop(&mut self) {
        self.close(Duration::from_secs(5));
    }
}

/// How a transport process ended. Over SSH the status is the remote
/// one: a shell, and the agent's supervisor under sshd
/// ([`crate::server::supervise_under_ssh`]), report a command killed by
/// signal N as 128 + N, and ssh's own 255 means the connection (or the
/// remote side without a status) went.
fn describe_status(s: std::process::ExitStatus, ssh: bool) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            return format!("killed by {}", signal_name(sig));
        }
    }
    match s.code() {
        Some(c) if ssh && (129..=192).contains(&c) => {
            format!("killed by {} on the node", signal_name(c - 128))
        }
        Some(255) if ssh => "ssh exit status 255: the connection was lost".into(),
        Some(c) => format!("exit status {c}"),
        None => s.to_string(),
    }
}

/// `SIGKILL (9)`: the name a user looks up, the number for the rest.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("{name} ({sig})")
}

fn last_lines(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join(" | ")
}

/// Connects to every agent at once; results in the order of `specs`.
pub fn connect_all(specs: &[AgentSpec]) -> Vec<Result<AgentConn, AgentError>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = specs
            .iter()
            .map(|spec| s.spawn(move || AgentConn::connect(spec)))
            .collect();
        hs.into_iter()
            .zip(specs)
            .map(|(h, spec)| {
                h.join().unwrap_or_else(|_| {
                    Err(AgentError::Lost {
                        node: spec.node.clone(),
                        reason: "connecting thread panicked".into(),
                    })
                })
            })
            .collect()
    })
}

/// Runs `f` on every connection at once; results in the same order.
pub fn for_each<T, F>(conns: &mut [AgentConn], f: F) -> Vec<Result<T, AgentError>>
where
    T: Send,
    F: Fn(&mut AgentConn) -> Result<T, AgentError> + Sync,
{
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = conns
            .iter_mut()
            .map(|c| {
                let node = c.node.clone();
                (node, s.spawn(move || f(c)))
            })
            .collect();
        hs.into_iter()
            .map(|(node, h)| {
                h.join().unwrap_or_else(|_| {
                    Err(AgentError::Lost {
                        node,
                        reason: "worker thread panicked".into(),
                    })
                })
            })
            .collect()
    })
}
