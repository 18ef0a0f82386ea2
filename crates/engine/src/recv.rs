//! The receiver daemon (`wirebench recv`).
//!
//! One TCP control listener (dual-stack `[::]:5400` by default); every
//! accepted connection runs in its own thread, so sessions are served one
//! after another and several at once. A session opens one data socket per
//! flow on an ephemeral port (told back in `Ready`), runs one receive thread
//! per flow (`recvmmsg` batches with kernel timestamps for UDP, a poll loop
//! over record streams for TCP), reflects probes in RTT mode, and at the
//! end reports its side of every flow over the control connection.
//!
//! Anything that is not a well-formed session is foreign: counted and
//! dropped. A sender that goes silent for [`SESSION_IDLE`] is given up on;
//! the daemon itself keeps serving.

use crate::auth::receiver_handshake;
use crate::budget::{self, Budgets, Ledger};
use crate::clock::{mono_ns, realtime_ns, sleep_until, tighten_timer_slack};
use crate::ctl::{Ctl, Recv};
use crate::gate::{
    Gate, GateLimits, Refusal, Slot, MAX_PENDING, PENDING_PER_PEER, SESSIONS_PER_PEER,
};
use crate::live::{self, LiveQueue, LiveTap};
use crate::net::{self, enable_rx_timestamps, set_rcvbuf, AsRawFd, RecvBatch, BATCH};
use crate::records::{Fill, RecordReader};
use crate::result::{FlowReport, ReportExtra};
use crate::sys::{self, CpuClock, CpuTime};
use crate::EngineError;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wirebench_pktlog::format::FLAG_RX as LOG_RX;
use wirebench_pktlog::stream::{LogProducer, LogSink};
use wirebench_pktlog::{FlowEnd, FlowMeta, LogFooter, LogMeta, Side};
use wirebench_stats::{FlowConfig, IpVersion, MarksSeen, MarksTally, RecvAccumulator};
use wirebench_wire::auth::{Cidr, Key, ProbeKey, AUTH_RTT_MIN_LEN};
use wirebench_wire::limits::{self, MAX_HELLO_LINE, MAX_LINGER_MS};
use wirebench_wire::{
    ControlMsg, FlowSetup, MeterMode, ProbeHeader, Reflection, Transport, CONTROL_VERSION,
    FLAG_REFLECTED, PROBE_HEADER_LEN, RTT_MIN_LEN,
};

/// A session whose sender says nothing on the control connection for this
/// long is abandoned (the sender sends a keep-alive every second).
pub const SESSION_IDLE: Duration = Duration::from_secs(10);
/// Time a new connection gets to send its `Hello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive buffer asked for on each UDP data socket.
pub const UDP_RCVBUF: usize = 8 << 20;
/// Most concurrent sessions; more are refused with an error message.
pub const MAX_SESSIONS: usize = 64;
/// Default longest session (`--max-session`): a day, so that no peer can
/// hold a slot indefinitely by keeping its session alive.
pub const MAX_SESSION: Duration = Duration::from_secs(86_400);
/// How often receive threads look at their stop flag.
pub(crate) const POLL_MS: u64 = 50;

/// Default cap on one session's packet log (`recv --log-max`): 1 GiB, 33 M
/// records, over a minute at 500 kpps.
pub const LOG_MAX_SESSION: u64 = 1 << 30;
/// Default cap on all of a daemon's packet logs (`recv --log-max-total`).
pub const LOG_MAX_TOTAL: u64 = 10 << 30;

/// Names tried for one session's log before the session is refused: a
/// name already taken (an earlier session with the same id, or a file or
/// link someone planted) is never opened, the next suffix is.
const LOG_NAME_TRIES: u32 = 16;

/// Opens a new log for session `sid` in `dir`: `session-<id>.wblog`, else
/// `session-<id>-<k>.wblog` for the first k not taken.
fn open_session_log(
    dir: &std::path::Path,
    sid: u32,
    cap: &wirebench_pktlog::stream::LogCap,
) -> Result<(LogSink, std::path::PathBuf), wirebench_pktlog::LogError> {
    let mut k = 0;
    loop {
        let name = match k {
            0 => format!("session-{sid:08x}.wblog"),
            _ => format!("session-{sid:08x}-{k}.wblog"),
        };
        let path = dir.join(name);
        match LogSink::create_new(&path, cap.clone()) {
            Ok(s) => return Ok((s, path)),
            Err(_) if k + 1 < LOG_NAME_TRIES && path.symlink_metadata().is_ok() => k += 1,
            Err(e) => return Err(e),
        }
    }
}

#[derive(Debug, Clone)]
/// How a receiver daemon listens and what it allows.
pub struct DaemonConfig {
    /// Address to bind; None = `[::]` dual-stack (falls back to 0.0.0.0).
    pub bind: Option<IpAddr>,
    /// Control port.
    pub port: u16,
    /// Print one line per session event on stderr.
    pub verbose: bool,
    /// A session whose sender says nothing for this long is abandoned.
    pub idle_timeout: Duration,
    /// Write a per-packet log of every session into this directory
    /// (`session-<id>.wblog`, docs/logs.md).
    pub log_dir: Option<std::path::PathBuf>,
    /// Most bytes of records one session's log may hold.
    pub log_max_session: u64,
    /// Bytes of records all logs of this daemon may still write together
    /// (shared by clones of the configuration).
    pub log_total_left: Arc<AtomicU64>,
    /// Serve only senders that prove this key (docs/security.md).
    pub key: Option<Key>,
    /// With a key: serve only senders that also MAC every probe
    /// (`send --auth probes`), so no probe without a valid MAC can be in
    /// any session's figures, whatever the sender chose.
    pub require_probe_auth: bool,
    /// Only these address blocks may connect (empty: any).
    pub allow: Vec<Cidr>,
    /// Sessions one sender address may run at once.
    pub sessions_per_peer: usize,
    /// Longest a session may last, handshake to report; then it is ended.
    pub max_session: Duration,
    /// Sockets, socket buffers and threads per session and in total.
    pub budgets: Budgets,
    /// Per cent of each total budget one peer (address, IPv6 /64) may hold.
    pub peer_share_pct: u64,
    /// Stream live intervals to senders that ask for them (false only to
    /// play a receiver from before they existed, in tests).
    pub live_intervals: bool,
    /// `--xdp IFACE`: receive a session's UDP flow by the AF_XDP path of
    /// this interface when it can (Linux; docs/engine.md, "AF_XDP path").
    pub xdp: Option<String>,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            bind: None,
            port: crate::DEFAULT_PORT,
            verbose: false,
            idle_timeout: SESSION_IDLE,
            log_dir: None,
            log_max_session: LOG_MAX_SESSION,
            log_total_left: Arc::new(AtomicU64::new(LOG_MAX_TOTAL)),
            key: None,
            require_probe_auth: false,
            allow: Vec::new(),
            sessions_per_peer: SESSIONS_PER_PEER,
            max_session: MAX_SESSION,
            budgets: Budgets::default(),
            peer_share_pct: budget::PEER_SHARE_PCT,
            live_intervals: true,
            xdp: None,
        }
    }
}

/// Counters of the whole daemon, readable while it serves.
#[derive(Debug, Default)]
pub struct DaemonStats {
    /// Sessions that reached `Ready`.
    pub sessions_started: AtomicU64,
    /// Sessions that ended with their report sent.
    pub sessions_completed: AtomicU64,
    /// Sessions that ended in an error.
    pub sessions_failed: AtomicU64,
    /// Control connections that were not a wirebench session.
    pub foreign_control: AtomicU64,
    /// Connections closed at once: address not allowed, or no slot left.
    pub refused: AtomicU64,
    /// Sessions that did not authenticate (no key, wrong key, replay).
    pub auth_failed: AtomicU64,
    /// Sessions running now.
    pub active: AtomicUsize,
    /// Flows of the sessions started.
    pub flows: AtomicU64,
    /// Data packets the completed sessions' flows received (counted when
    /// a session reports, so the receive path pays nothing per packet).
    pub packets_received: AtomicU64,
    /// Packets on the completed sessions' data sockets that were not
    /// their data (counted when a session reports).
    pub foreign_packets: AtomicU64,
}

/// The receiver daemon: a control listener serving sessions, each on its
/// own thread.
pub struct Daemon {
    listener: TcpListener,
    cfg: Arc<DaemonConfig>,
    stats: Arc<DaemonStats>,
    gate: Arc<Gate>,
    ledger: Arc<Ledger>,
}

impl Daemon {
    /// Binds the control port as `cfg` says.
    pub fn bind(cfg: DaemonConfig) -> Result<Daemon, EngineError> {
        if cfg.require_probe_auth && cfg.key.is_none() {
            // Probe MACs are keyed from the handshake: without a key every
            // session would be refused.
            return Err(EngineError::BadPlan(
                "requiring probe MACs needs the pre-shared key".into(),
            ));
        }
        // A socket per flow: sessions of thousands of flows pass the
        // default limit of 1024 open files.
        sys::raise_open_files_limit();
        let listener = match cfg.bind {
            Some(ip) => listen(SocketAddr::new(ip, cfg.port), false)?,
            None => match listen(
                SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), cfg.port),
                true,
            ) {
                Ok(l) => l,
                // No IPv6 on this host: IPv4 only.
                Err(EngineError::Bind { source, .. }) if source.kind() != ErrorKind::AddrInUse => {
                    listen(
                        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), cfg.port),
                        false,
                    )?
                }
                Err(e) => return Err(e),
            },
        };
        let gate = Gate::new(GateLimits {
            max_sessions: MAX_SESSIONS,
            sessions_per_peer: cfg.sessions_per_peer,
            max_pending: MAX_PENDING,
            pending_per_peer: PENDING_PER_PEER,
            allow: cfg.allow.clone(),
        });
        let ledger = Ledger::with_peer_share(cfg.budgets, cfg.peer_share_pct);
        Ok(Daemon {
            ledger,
            listener,
            cfg: Arc::new(cfg),
            stats: Arc::new(DaemonStats::default()),
            gate,
        })
    }

    /// The address the control port is bound to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The daemon's counters, to read while it serves.
    pub fn stats(&self) -> Arc<DaemonStats> {
        self.stats.clone()
    }

    /// The admission gate (`--allow`, slots), for other protocols served
    /// beside this daemon (`recv --iperf3`) to share.
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }

    /// The budget ledger, likewise shared.
    pub fn ledger(&self) -> Arc<Ledger> {
        self.ledger.clone()
    }

    /// Serves forever.
    pub fn serve(&self) -> Result<(), EngineError> {
        self.serve_until(&AtomicBool::new(false))
    }

    /// Serves until `stop` is set (checked every 100 ms); running sessions
    /// finish on their own threads.
    pub fn serve_until(&self, stop: &AtomicBool) -> Result<(), EngineError> {
        self.listener
            .set_nonblocking(true)
            .map_err(|e| EngineError::io("control listener", e))?;
        while !stop.load(Ordering::Relaxed) {
            net::poll(
                &mut [net::pollfd(self.listener.as_raw_fd(), net::POLLIN)],
                100,
            );
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let _ = stream.set_nonblocking(false);
                    let stats = self.stats.clone();
                    let cfg = self.cfg.clone();
                    let ledger = self.ledger.clone();
                    let verbose = cfg.verbose;
                    let Some(slot) = self.admit(&stream, peer) else {
                        continue;
                    };
                    stats.active.fetch_add(1, Ordering::Relaxed);
                    let spawned =
                        std::thread::Builder::new()
                            .name("wb-session".into())
                            .spawn(move || {
                                let r = session(stream, peer, &stats, &cfg, slot, &ledger);
                                stats.active.fetch_sub(1, Ordering::Relaxed);
                                if verbose {
                                    if let Err(e) = &r {
                                        eprintln!("wirebench recv: session from {peer}: {e}");
                                    }
                                }
                            });
                    if spawned.is_err() {
                        self.stats.active.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EMFILE and friends: back off instead of spinning.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        Ok(())
    }

    /// A pending slot for a new connection, or it is closed at once: an
    /// address outside `--allow` gets no answer at all, one over a limit a
    /// one-line error.
    fn admit(&self, stream: &TcpStream, peer: SocketAddr) -> Option<Slot> {
        match self.gate.admit(unmap(peer.ip()), stream.try_clone().ok()) {
            Ok(slot) => Some(slot),
            Err(refusal) => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                if refusal != Refusal::NotAllowed {
                    // The line fits any fresh socket buffer; never wait on a
                    // peer that does not read.
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                    let mut w = stream;
                    let _ = w.write_all(
                        ControlMsg::Error {
                            message: refusal.to_string(),
                        }
                        .to_line()
                        .as_bytes(),
                    );
                }
                if self.cfg.verbose {
                    eprintln!("wirebench recv: connection from {peer} refused: {refusal}");
                }
                None
            }
        }
    }
}

fn listen(addr: SocketAddr, dual: bool) -> Result<TcpListener, EngineError> {
    let err = |e| EngineError::Bind {
        addr: addr.to_string(),
        source: e,
    };
    let sock =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    if dual {
        sock.set_only_v6(false).map_err(err)?;
    }
    sock.set_reuse_address(true).map_err(err)?;
    sock.bind(&addr.into()).map_err(err)?;
    sock.listen(128).map_err(err)?;
    Ok(sock.into())
}

/// An IPv4-mapped IPv6 address is the IPv4 address it maps.
pub(crate) fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Shared between a session and one of its receive threads.
#[derive(Default)]
pub(crate) struct FlowShared {
    pub(crate) stop: AtomicBool,
    pub(crate) offset_ns: AtomicI64,
    /// Error bound of the offset; delays below its negative are flagged.
    error_ns: AtomicI64,
    negative_beyond_error: AtomicU64,
    pub(crate) foreign: AtomicU64,
    /// Receiver clock at `Start` (0: not yet): bounds the sequence numbers
    /// the sender can have reached.
    start_ns: AtomicU64,
    /// Probes of this session whose sequence number the sender cannot have
    /// reached yet ([`limits::max_plausible_seq`]): forged.
    forged: AtomicU64,
    /// Probes whose delay is outside [`limits::plausible_delay`].
    implausible: AtomicU64,
    /// Finished live intervals on their way to the session thread.
    live: Arc<LiveQueue>,
    /// Receive buffer the sender asked for (`--window`); 0: the default.
    rcvbuf: usize,
    /// `--auth probes`: probes must end in this session key's MAC, else
    /// they are `forged`; reflections get one.
    probe_key: Option<ProbeKey>,
    /// Where the flow's data comes from (the registered UDP source, the
    /// identified TCP connection's peer), for the report: set once.
    from: std::sync::OnceLock<SocketAddr>,
}

impl FlowShared {
    /// Decides whether a probe of this session counts as data: its delay
    /// (offset applied) must be plausible and its sequence number within
    /// reach of the sender. Counts what it refuses; returns the delay.
    /// A refused probe is neither recorded nor reflected, so no forged
    /// number moves the sequence window or a statistic.
    fn admit(&self, acc: &RecvAccumulator, h: &ProbeHeader, ts: u64, offset: i64) -> Option<i64> {
        let delay = i128::from(ts) - i128::from(h.tx_ns) - i128::from(offset);
        let Some(delay) = i64::try_from(delay)
            .ok()
            .filter(|&d| limits::plausible_delay(d))
        else {
            self.implausible.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let start = self.start_ns.load(Ordering::Relaxed);
        let elapsed = if start == 0 {
            0
        } else {
            ts.saturating_sub(start)
        };
        if acc.peek_seq(h.seq) > limits::max_plausible_seq(elapsed) {
            self.forged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if delay < -self.error_ns.load(Ordering::Relaxed) {
            self.negative_beyond_error.fetch_add(1, Ordering::Relaxed);
        }
        Some(delay)
    }
}

/// What a receive thread hands back: for each flow it served (in the
/// order of [`Worker::flows`]) its accumulator and the IP marking seen on
/// its data packets (UDP; None when untold), and its CPU time.
pub(crate) struct WorkerOutcome {
    pub(crate) accs: Vec<FlowRecv>,
    pub(crate) cpu: CpuTime,
}

/// A flow's statistics and the IP marking its packets carried.
pub(crate) type FlowRecv = (RecvAccumulator, Option<MarksSeen>);

struct SessionFlow {
    flow_id: u16,
    shared: Arc<FlowShared>,
}

/// A receive thread and the flows (positions in the session) it serves.
pub(crate) struct Worker {
    pub(crate) flows: Vec<usize>,
    pub(crate) handle: Option<JoinHandle<WorkerOutcome>>,
}

/// A session's flows and the receive threads serving them: one per TCP
/// flow; UDP flows get one each while they are no more than the CPUs, and
/// beyond that share one receive worker per CPU ([`udp_rx_many`]).
struct Flows(Vec<SessionFlow>, Vec<Worker>);

/// Flow accumulators in session order (None: its thread failed) and the
/// receive threads' CPU time.
type Finished = (Vec<Option<FlowRecv>>, CpuTime);

impl Flows {
    /// Stops every receive thread and collects what the flows received.
    fn finish(&mut self) -> Finished {
        for f in &self.0 {
            f.shared.stop.store(true, Ordering::Relaxed);
        }
        let mut accs: Vec<Option<FlowRecv>> = (0..self.0.len()).map(|_| None).collect();
        let mut cpu = CpuTime::default();
        for w in &mut self.1 {
            let Some(out) = w.handle.take().and_then(|h| h.join().ok()) else {
                continue;
            };
            cpu = cpu.plus(out.cpu);
            for (&i, acc) in w.flows.iter().zip(out.accs) {
                if let Some(slot) = accs.get_mut(i) {
                    *slot = Some(acc);
                }
            }
        }
        (accs, cpu)
    }
}

impl Drop for Flows {
    fn drop(&mut self) {
        // Whatever happened, receive threads end and sockets close.
        self.finish();
    }
}

fn session(
    stream: TcpStream,
    peer: SocketAddr,
    stats: &DaemonStats,
    cfg: &DaemonConfig,
    mut slot: Slot,
    ledger: &Arc<Ledger>,
) -> Result<(), EngineError> {
    let (verbose, idle, log_dir) = (cfg.verbose, cfg.idle_timeout, &cfg.log_dir);
    // The whole handshake (Hello, and the challenge with a key) must be
    // done by this time; the session must end by `ends`.
    let accepted = std::time::Instant::now();
    let handshake_by = accepted + HELLO_TIMEOUT;
    let ends = accepted + cfg.max_session;
    let local = stream
        .local_addr()
        .map_err(|e| EngineError::io("control socket", e))?;
    let mut ctl = Ctl::new(stream);
    // Nothing a sender says to a receiver needs more than a Hello; a longer
    // line is refused before it is buffered.
    ctl.set_limit(MAX_HELLO_LINE);
    let hello = match ctl.recv(HELLO_TIMEOUT) {
        Ok(Recv::Msg(m)) => m,
        Ok(_) | Err(_) => {
            stats.foreign_control.fetch_add(1, Ordering::Relaxed);
            return Err(EngineError::Protocol(
                "not a wirebench session (no valid Hello)".into(),
            ));
        }
    };
    let ControlMsg::Hello {
        version,
        session: sid,
        meter,
        flows: setups,
        auth,
        live: live_asked,
        auth_probes,
    } = hello
    else {
        stats.foreign_control.fetch_add(1, Ordering::Relaxed);
        let _ = ctl.send(&ControlMsg::Error {
            message: "expected Hello".into(),
        });
        return Err(EngineError::Protocol("first message was not Hello".into()));
    };
    let refuse = |ctl: &mut Ctl, m: String| {
        let _ = ctl.send(&ControlMsg::Error { message: m.clone() });
        Err(EngineError::Protocol(m))
    };
    if version != CONTROL_VERSION {
        return refuse(
            &mut ctl,
            format!("control protocol version {version} not supported (this receiver speaks {CONTROL_VERSION})"),
        );
    }
    let probe_key = match receiver_handshake(
        &mut ctl,
        cfg.key.as_ref(),
        sid,
        auth.as_deref(),
        handshake_by,
    ) {
        Ok(k) => k.filter(|_| auth_probes),
        Err(m) => {
            stats.auth_failed.fetch_add(1, Ordering::Relaxed);
            if verbose {
                eprintln!("wirebench recv: session {sid:08x} from {peer}: {m}");
            }
            return refuse(&mut ctl, m);
        }
    };
    if auth_probes && probe_key.is_none() {
        // Probe MACs are keyed from the handshake: without one (this
        // receiver has no key) there is nothing to check them with.
        return refuse(
            &mut ctl,
            "--auth probes: this receiver runs without a key, so it cannot check probe MACs".into(),
        );
    }
    if cfg.require_probe_auth && !auth_probes {
        // The sender proved the key but would send untagged probes, which
        // this receiver was told never to measure.
        stats.auth_failed.fetch_add(1, Ordering::Relaxed);
        return refuse(
            &mut ctl,
            "this receiver requires MACs on every probe (recv --require-auth probes): \
             run send with --auth probes"
                .into(),
        );
    }
    if let Err(busy) = slot.promote() {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        return refuse(&mut ctl, busy.to_string());
    }
    // Every number is range-checked before anything is allocated for it.
    if let Err(e) = limits::check_flows(&setups) {
        return refuse(&mut ctl, format!("bad Hello: {e}"));
    }
    // The session's sockets, buffers and threads are reserved before any
    // is opened, and given back when `_grant` goes, however it ends.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let session_budget = &cfg.budgets.session;
    let _grant = match ledger.reserve_for(peer.ip(), budget::cost(&setups, cores, session_budget)) {
        Ok(g) => g,
        Err(e) => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            if verbose {
                eprintln!("wirebench recv: session {sid:08x} from {peer}: {e}");
            }
            return refuse(&mut ctl, e.to_string());
        }
    };
    stats.sessions_started.fetch_add(1, Ordering::Relaxed);
    stats
        .flows
        .fetch_add(setups.len() as u64, Ordering::Relaxed);
    if verbose {
        eprintln!(
            "wirebench recv: session {sid:08x} from {peer}: {} flow(s), meter {meter:?}",
            setups.len()
        );
    }

    let local_ip = unmap(local.ip());
    let peer_ip = unmap(peer.ip());
    let max_intervals = limits::intervals_per_flow(setups.len());
    let ip = if local_ip.is_ipv4() {
        IpVersion::V4
    } else {
        IpVersion::V6
    };
    let live_ms = setups.iter().filter_map(|s| s.interval_ms).min();
    let at = FlowAt {
        local_ip,
        peer_ip,
        ip,
        sid,
        meter,
        max_intervals,
        live: live_asked && live_ms.is_some() && cfg.live_intervals,
        probe_key: probe_key.clone(),
        udp_buf: budget::default_buffer(budget::UDP_RCVBUF, setups.len(), session_budget),
    };
    // Declared before `flows`, so that on every way out the flows' threads
    // (and with them the log producers) are gone before the sink is dropped.
    let mut sink = match log_dir {
        None => None,
        Some(dir) => {
            let cap = wirebench_pktlog::stream::LogCap {
                per_log_bytes: Some(cfg.log_max_session),
                shared_left: Some(cfg.log_total_left.clone()),
            };
            match open_session_log(dir, sid, &cap) {
                Ok(s) => Some(s),
                Err(e) => {
                    stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                    return refuse(&mut ctl, format!("receiver cannot log: {e}"));
                }
            }
        }
    };
    let mut flows = Flows(Vec::new(), Vec::new());
    let mut ports = Vec::new();
    let mut udp = Vec::new();
    // Reverse flows (we send them): their sockets, and threads from Start.
    let mut remote = crate::reverse::Remote::default();
    for (i, s) in setups.iter().enumerate() {
        if let Some(model) = &s.reverse {
            match remote.open(i, s, model, local_ip) {
                Ok(port) => {
                    ports.push(port);
                    flows.0.push(SessionFlow {
                        flow_id: s.flow_id,
                        shared: Arc::default(),
                    });
                }
                Err(e) => {
                    stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                    return refuse(&mut ctl, format!("flow {} (reverse): {e}", s.flow_id));
                }
            }
            continue;
        }
        let log = sink.as_ref().map(|(k, _)| k.producer());
        match open_flow(s, &at, log) {
            Ok((port, f, rx)) => {
                ports.push(port);
                flows.0.push(f);
                match rx {
                    FlowRx::Udp(u) => udp.push((i, u)),
                    FlowRx::Thread(h) => flows.1.push(Worker {
                        flows: vec![i],
                        handle: Some(h),
                    }),
                }
            }
            Err(e) => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return refuse(&mut ctl, format!("flow {}: {e}", s.flow_id));
            }
        }
    }
    #[cfg(target_os = "linux")]
    let (udp, xdp) = crate::xdp::rx::take(cfg.xdp.as_deref(), udp, &mut flows.1);
    #[cfg(target_os = "linux")]
    if let (Some(Err(why)), true) = (&xdp, verbose) {
        eprintln!("wirebench recv: session {sid:08x}: socket path, not XDP: {why}");
    }
    if let Err(e) = start_udp_workers(udp, &mut flows.1) {
        stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
        return refuse(&mut ctl, format!("receiver: {e}"));
    }
    if verbose {
        for (s, p) in setups.iter().zip(&ports) {
            eprintln!(
                "wirebench recv: session {sid:08x} flow {}: {} port {p}",
                s.flow_id, s.transport
            );
        }
    }
    ctl.send(&ControlMsg::Ready {
        ports,
        live: at.live,
        reverse: remote.any(),
        auth_probes: probe_key.is_some(),
    })?;
    let live_queues: Vec<Arc<LiveQueue>> = if at.live {
        flows.0.iter().map(|f| f.shared.live.clone()).collect()
    } else {
        Vec::new()
    };
    let live_every = live::stream_every(live_ms.unwrap_or(1000));

    let cpu0 = CpuTime::thread();
    let mut snmp0 = sys::udp_rcvbuf_errors();
    let mut foreign0 = stats.foreign_control.load(Ordering::Relaxed);
    let mut last_heard = std::time::Instant::now();
    loop {
        if remote.take_done() {
            ctl.send(&ControlMsg::ReverseDone)?;
        }
        let left = ends.saturating_duration_since(std::time::Instant::now());
        // While reverse flows run, look at them every few ms to say
        // `ReverseDone` soon after the last one ends.
        let watch = remote.running();
        let wait = if watch {
            crate::reverse::WATCH_EVERY.min(left)
        } else {
            idle.min(left)
        };
        let msg = match live::recv_streaming(&mut ctl, wait, live_every, &live_queues) {
            Ok(Recv::Msg(m)) => {
                last_heard = std::time::Instant::now();
                m
            }
            Ok(Recv::Timeout) if watch && !left.is_zero() && last_heard.elapsed() < idle => {
                continue
            }
            Ok(Recv::Timeout) if left <= idle => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return refuse(
                    &mut ctl,
                    format!(
                        "session ended: the receiver's lifetime limit of {} s per session was reached",
                        cfg.max_session.as_secs()
                    ),
                );
            }
            Ok(Recv::Timeout) => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return Err(EngineError::PeerGone(format!(
                    "sender silent for {:.1} s, session abandoned",
                    idle.as_secs_f64()
                )));
            }
            Ok(Recv::Closed) => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return Err(EngineError::PeerGone(
                    "sender closed the control connection before the report".into(),
                ));
            }
            Err(e) => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        match msg {
            ControlMsg::TimeReq { t1_ns } => {
                let t2 = realtime_ns();
                let t3 = realtime_ns();
                ctl.send(&ControlMsg::TimeResp {
                    t1_ns,
                    t2_ns: t2,
                    t3_ns: t3,
                })?;
            }
            ControlMsg::ClockOffset {
                offset_ns,
                error_ns,
            } => {
                if let Err(e) = limits::check_clock(offset_ns, error_ns) {
                    stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                    return refuse(&mut ctl, format!("bad ClockOffset: {e}"));
                }
                for f in &flows.0 {
                    f.shared.offset_ns.store(offset_ns, Ordering::Relaxed);
                    f.shared
                        .error_ns
                        .store(error_ns.min(i64::MAX as u64) as i64, Ordering::Relaxed);
                }
            }
            ControlMsg::Start => {
                if let Some((k, _)) = &sink {
                    k.start(log_meta(&setups, &flows, sid, meter, peer_ip, local_ip));
                }
                let now = realtime_ns();
                for f in &flows.0 {
                    f.shared.start_ns.store(now, Ordering::Relaxed);
                    f.shared.live.start_ns.store(now, Ordering::Relaxed);
                }
                snmp0 = sys::udp_rcvbuf_errors();
                foreign0 = stats.foreign_control.load(Ordering::Relaxed);
                if let Err(e) = remote.start(sid, peer_ip, ip, probe_key.as_ref()) {
                    stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                    return refuse(&mut ctl, format!("receiver: {e}"));
                }
            }
            ControlMsg::Stop { linger_ms, sent } => {
                let bad = limits::in_range("linger_ms", linger_ms, 0, MAX_LINGER_MS)
                    .map_err(|e| e.to_string())
                    .err()
                    .or_else(|| {
                        (!sent.is_empty() && sent.len() != flows.0.len()).then(|| {
                            format!("sent: {} counts for {} flows", sent.len(), flows.0.len())
                        })
                    });
                if let Some(e) = bad {
                    stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                    return refuse(&mut ctl, format!("bad Stop: {e}"));
                }
                // Reverse flows end (at once, if the sender stopped early)
                // before the linger, which then covers their stragglers too.
                let mut rev_sent = match remote.finish() {
                    Ok(r) => r,
                    Err(e) => {
                        stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                        return refuse(&mut ctl, e);
                    }
                };
                std::thread::sleep(Duration::from_millis(linger_ms));
                let snmp1 = sys::udp_rcvbuf_errors();
                let foreign1 = stats.foreign_control.load(Ordering::Relaxed);
                let (accs, rx_cpu) = flows.finish();
                let cpu = CpuTime::thread().since(cpu0).plus(rx_cpu);
                // Every flow the receiver measured must have its figures
                // before any of the report is written.
                for (i, (f, acc)) in flows.0.iter().zip(&accs).enumerate() {
                    let by_us = rev_sent.get(i).is_some_and(Option::is_some);
                    if !by_us && acc.is_none() {
                        stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                        return refuse(
                            &mut ctl,
                            format!("flow {} receive thread failed", f.flow_id),
                        );
                    }
                }
                let budget = wirebench_stats::dist::per_flow_budget(flows.0.len());
                // Each flow's report is made as the line is written, and
                // its accumulator freed then (see Ctl::send_report).
                let reports = flows.0.iter().zip(accs).enumerate().filter_map(|(i, (f, acc))| {
                    if let Some(sent) = rev_sent.get_mut(i).and_then(Option::take) {
                        if verbose {
                            eprintln!(
                                "wirebench recv: session {sid:08x} flow {} (reverse): sent {} packets, {} bytes to {peer_ip}",
                                f.flow_id, sent.packets, sent.bytes
                            );
                        }
                        return Some(FlowReport {
                            flow_id: f.flow_id,
                            sent: Some(sent),
                            ..FlowReport::default()
                        });
                    }
                    // Present: checked above.
                    let (acc, marks) = acc?;
                    let playout = setups.get(i).and_then(|s| s.playout_buffer_ms);
                    let mut r = flow_report(
                        f.flow_id,
                        &f.shared,
                        (acc, marks),
                        sent.get(i).copied(),
                        playout,
                    );
                    r.summary.fit_dists(budget);
                    stats.packets_received.fetch_add(r.summary.counts.packets, Ordering::Relaxed);
                    stats.foreign_packets.fetch_add(r.foreign, Ordering::Relaxed);
                    Some(r)
                });
                if let Some((k, path)) = sink.take() {
                    let footer = LogFooter {
                        flows: flows
                            .0
                            .iter()
                            .enumerate()
                            .map(|(i, f)| FlowEnd {
                                id: f.flow_id,
                                sent: sent.get(i).copied(),
                                not_sent: 0,
                            })
                            .collect(),
                        ..Default::default()
                    };
                    let dropped = k.dropped();
                    match k.finish_counted(footer) {
                        // A capped log is said even with -q: it is incomplete.
                        Ok((n, capped)) if verbose || capped > 0 => eprintln!(
                            "wirebench recv: session {sid:08x}: {n} packets logged to {}{}{}",
                            path.display(),
                            if dropped > 0 {
                                format!(", {dropped} NOT logged (disk too slow)")
                            } else {
                                String::new()
                            },
                            match capped {
                                0 => String::new(),
                                c => format!(
                                    ", {c} NOT logged (the log reached its cap: \
                                     recv --log-max, --log-max-total)"
                                ),
                            }
                        ),
                        Ok(_) => {}
                        Err(e) => eprintln!(
                            "wirebench recv: session {sid:08x}: log {}: {e}",
                            path.display()
                        ),
                    }
                }
                #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
                let mut host = sys::host_info();
                #[cfg(target_os = "linux")]
                let ring_drops = crate::xdp::rx::describe(&mut host, &xdp);
                #[cfg(not(target_os = "linux"))]
                let ring_drops = 0;
                let extra = ReportExtra {
                    host,
                    rcvbuf_errors: snmp1.saturating_sub(snmp0) + ring_drops,
                    foreign_control: foreign1.saturating_sub(foreign0),
                    cpu_s: cpu,
                };
                // The last intervals (the receive threads closed theirs
                // when they ended) go before the report.
                live::send_pending(&mut ctl, &live_queues)?;
                // Counted before the send so that a sender holding the
                // report always sees the session counted.
                stats.sessions_completed.fetch_add(1, Ordering::Relaxed);
                ctl.send_report(reports, &extra)?;
                // Wait briefly for Bye so the sender reads the report before
                // the connection closes.
                let _ = ctl.recv(Duration::from_secs(5));
                if verbose {
                    eprintln!("wirebench recv: session {sid:08x} from {peer}: done");
                }
                return Ok(());
            }
            ControlMsg::Bye => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return Err(EngineError::PeerGone("sender said Bye before Stop".into()));
            }
            ControlMsg::Error { message } => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return Err(EngineError::Remote(message));
            }
            // Anything else is out of order here but harmless: ignore it.
            _ => {}
        }
    }
}

/// How a flow's packets are counted (framing, series) from its setup.
fn flow_config(s: &FlowSetup, ip: IpVersion) -> FlowConfig {
    FlowConfig {
        transport: s.transport,
        ip,
        mtu: if s.mtu >= 68 { s.mtu } else { 1500 },
        // Checked by `check_flows`; an unchecked value turns the series off
        // rather than wrap.
        interval_ns: s.interval_ms.and_then(|m| limits::interval_ns(m).ok()),
    }
}

/// A flow's report from what its receive thread gathered (`sent`: the
/// sender's count, for loss; `playout`: the VoIP buffer to judge against).
fn flow_report(
    flow_id: u16,
    sh: &FlowShared,
    (acc, marks): FlowRecv,
    sent: Option<u64>,
    playout: Option<u32>,
) -> FlowReport {
    let mut summary = acc.summary(sent);
    if let Some(ms) = playout {
        summary.late_share = Some(acc.late_share(u64::from(ms) * 1_000_000));
    }
    FlowReport {
        flow_id,
        summary,
        foreign: sh.foreign.load(Ordering::Relaxed),
        negative_beyond_error: sh.negative_beyond_error.load(Ordering::Relaxed),
        forged: sh.forged.load(Ordering::Relaxed),
        implausible_delays: sh.implausible.load(Ordering::Relaxed),
        marks,
        from: sh.from.get().map(SocketAddr::to_string),
        sent: None,
    }
}

/// A flow's socket on the side that measures a reverse flow (the sender,
/// crate::reverse): connected to the receiver by us.
pub(crate) enum LocalSock {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// The sender's end of a reverse flow: the daemon's own receive path
/// ([`UdpFlow::read_batch`], [`read_records`], [`Recorder`]) on a socket
/// the sender connected, so both directions are measured alike.
pub(crate) struct LocalRx {
    flow_id: u16,
    playout: Option<u32>,
    shared: Arc<FlowShared>,
    handle: Option<JoinHandle<WorkerOutcome>>,
}

/// Where a [`LocalRx`] receives from and how its delays are corrected.
pub(crate) struct LocalAt {
    pub sid: u32,
    /// The receiver daemon's address: only its datagrams are data.
    pub peer_ip: IpAddr,
    pub ip: IpVersion,
    /// Flows in the session (for the interval budget).
    pub flows: usize,
    /// Our clock minus the sender's of these packets (the daemon's), ns.
    pub offset_ns: i64,
    pub error_ns: u64,
    /// `--auth probes`: the session's probe key.
    pub probe_key: Option<ProbeKey>,
}

impl LocalRx {
    /// Starts receiving flow `s` on `sock`.
    pub(crate) fn start(
        s: &FlowSetup,
        sock: LocalSock,
        at: &LocalAt,
    ) -> Result<LocalRx, EngineError> {
        let cfg = flow_config(s, at.ip);
        let shared = Arc::new(FlowShared {
            offset_ns: AtomicI64::new(at.offset_ns),
            error_ns: AtomicI64::new(at.error_ns.min(i64::MAX as u64) as i64),
            probe_key: at.probe_key.clone(),
            ..FlowShared::default()
        });
        let acc = Recorder {
            acc: RecvAccumulator::with_max_intervals(cfg, limits::intervals_per_flow(at.flows)),
            log: None,
            marks: MarksTally::default(),
            live: None,
        };
        let (sid, flow_id, sh) = (at.sid, s.flow_id, shared.clone());
        let spawned = match sock {
            LocalSock::Udp(sock) => {
                set_rcvbuf(sock.as_raw_fd(), UDP_RCVBUF);
                enable_rx_timestamps(sock.as_raw_fd());
                net::enable_rx_marks(sock.as_raw_fd(), at.peer_ip.is_ipv6());
                sock.set_read_timeout(Some(Duration::from_millis(POLL_MS)))
                    .map_err(|e| EngineError::io("data socket", e))?;
                // Connected: the kernel delivers only the daemon's datagrams.
                let registered = sock
                    .peer_addr()
                    .ok()
                    .map(|a| SocketAddr::new(unmap(a.ip()), a.port()));
                let f = UdpFlow {
                    sock,
                    acc,
                    sh,
                    rx: UdpRx {
                        sid,
                        flow_id,
                        max_len: (s.max_len as usize).clamp(PROBE_HEADER_LEN, u16::MAX as usize),
                        reflect: false,
                        peer_ip: at.peer_ip,
                    },
                    registered,
                };
                std::thread::Builder::new()
                    .name(format!("wb-rrx-{flow_id}"))
                    .spawn(move || udp_rx(f))
            }
            LocalSock::Tcp(stream) => std::thread::Builder::new()
                .name(format!("wb-rrx-{flow_id}"))
                .spawn(move || tcp_rx_stream(stream, acc, sh, sid, flow_id)),
        };
        let handle = spawned.map_err(|e| EngineError::io("receive thread", e))?;
        Ok(LocalRx {
            flow_id,
            playout: s.playout_buffer_ms,
            shared,
            handle: Some(handle),
        })
    }

    /// The session started now: sequence numbers are judged from here.
    pub(crate) fn started(&self) {
        self.shared.start_ns.store(realtime_ns(), Ordering::Relaxed);
    }

    /// Stops receiving and reports, as the daemon would (`sent`: what the
    /// daemon sent, for loss). None when the receive thread failed.
    pub(crate) fn finish(mut self, sent: Option<u64>) -> Option<FlowReport> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let out = self.handle.take()?.join().ok()?;
        let acc = out.accs.into_iter().next()?;
        Some(flow_report(
            self.flow_id,
            &self.shared,
            acc,
            sent,
            self.playout,
        ))
    }
}

impl Drop for LocalRx {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One TCP connection we opened ourselves, read until the peer closes it or
/// the flow is stopped (the sender's end of a reverse TCP flow).
fn tcp_rx_stream(
    stream: TcpStream,
    mut acc: Recorder,
    sh: Arc<FlowShared>,
    sid: u32,
    flow_id: u16,
) -> WorkerOutcome {
    let cpu0 = CpuTime::thread();
    let _ = stream.set_nonblocking(true);
    let mut conn = TcpConn {
        stream,
        rd: RecordReader::new(TCP_BUF),
        out: Vec::new(),
        out_head: 0,
        accepted_ns: mono_ns(),
        identified: false,
        from: None,
    };
    while !sh.stop.load(Ordering::Relaxed) {
        let mut pfd = [net::pollfd(conn.stream.as_raw_fd(), net::POLLIN)];
        if net::poll(&mut pfd, POLL_MS as i32) <= 0 {
            acc.tick();
            continue;
        }
        if !read_records(&mut conn, &mut acc, &sh, sid, flow_id, false) {
            break;
        }
    }
    acc.finish_live();
    WorkerOutcome {
        accs: vec![(acc.acc, acc.marks.seen())],
        cpu: CpuTime::thread().since(cpu0),
    }
}

/// What a flow's socket and thread need to know about its session.
struct FlowAt {
    /// Address the control connection reached: data sockets bind to it.
    local_ip: IpAddr,
    /// The sender's address: only its packets are data, and only it gets
    /// reflections.
    peer_ip: IpAddr,
    ip: IpVersion,
    sid: u32,
    meter: MeterMode,
    /// This flow's share of the session's interval-bucket budget.
    max_intervals: usize,
    /// Stream live intervals to the sender.
    live: bool,
    /// `--auth probes`: the session's probe key.
    probe_key: Option<ProbeKey>,
    /// Receive buffers of UDP sockets whose sender did not ask
    /// (`--window`): [`budget::default_buffer`]. TCP connections keep the
    /// kernel's autotuning unless asked (see `tcp_rx`).
    udp_buf: u64,
}

/// The log header of a session: what `wirebench decode` needs to recompute
/// the receiver's figures (framing per flow, the offset subtracted).
fn log_meta(
    setups: &[FlowSetup],
    flows: &Flows,
    sid: u32,
    meter: MeterMode,
    peer_ip: IpAddr,
    local_ip: IpAddr,
) -> LogMeta {
    let offset = flows
        .0
        .first()
        .map_or(0, |f| f.shared.offset_ns.load(Ordering::Relaxed));
    LogMeta {
        side: Side::Recv,
        meter: meter.as_str().into(),
        session: sid,
        started_at: Some(
            humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        ),
        tool: format!("wirebench {}", env!("CARGO_PKG_VERSION")),
        delay_offset_ns: offset,
        flows: setups
            .iter()
            .map(|s| FlowMeta {
                id: s.flow_id,
                transport: s.transport.as_str().into(),
                ip_version: if local_ip.is_ipv4() { 4 } else { 6 },
                mtu: if s.mtu >= 68 { s.mtu } else { 1500 },
                src: Some(peer_ip.to_string()),
                dst: Some(local_ip.to_string()),
            })
            .collect(),
    }
}

/// A flow's statistics and, when the session is logged, its log producer:
/// every admitted probe goes into both, in the same order.
pub(crate) struct Recorder {
    pub(crate) acc: RecvAccumulator,
    log: Option<LogProducer>,
    /// DSCP / TTL / flow label of the admitted datagrams.
    pub(crate) marks: MarksTally,
    /// Cuts live intervals (sessions that stream them).
    pub(crate) live: Option<LiveTap>,
}

impl Recorder {
    /// The socket was quiet: close the live intervals that have ended.
    pub(crate) fn tick(&mut self) {
        if let Some(t) = self.live.as_mut() {
            t.tick(realtime_ns(), &self.acc);
        }
    }

    /// The flow ended: close the last live intervals.
    pub(crate) fn finish_live(&mut self) {
        if let Some(t) = self.live.as_mut() {
            t.finish(&self.acc);
        }
    }

    #[inline]
    fn record(&mut self, h: &ProbeHeader, delay: i64, ts: u64, len: usize) {
        if let Some(t) = self.live.as_mut() {
            t.before(ts, &self.acc);
        }
        if let Some(log) = self.log.as_mut() {
            log.push(wirebench_pktlog::Record {
                flow: h.flow,
                flags: LOG_RX,
                size: len as u32,
                seq: self.acc.peek_seq(h.seq),
                tx_ns: h.tx_ns,
                rx_ns: ts,
            });
        }
        self.acc.record(h.seq, delay, ts, len as u32);
    }
}

/// How a flow is received: a UDP flow's state waiting for its receive
/// worker ([`start_udp_workers`]), or the thread already serving a TCP flow.
enum FlowRx {
    Udp(Box<UdpFlow>),
    Thread(JoinHandle<WorkerOutcome>),
}

/// Opens a flow's data socket (the per-socket setup lives here and in the
/// functions it calls) and its receive state.
fn open_flow(
    s: &FlowSetup,
    at: &FlowAt,
    log: Option<LogProducer>,
) -> Result<(u16, SessionFlow, FlowRx), EngineError> {
    let (local_ip, peer_ip, sid, meter, max_intervals) =
        (at.local_ip, at.peer_ip, at.sid, at.meter, at.max_intervals);
    let cfg = flow_config(s, at.ip);
    let shared = Arc::new(FlowShared {
        rcvbuf: s.rcvbuf.map_or(0, |w| budget::flow_buf(w) as usize),
        probe_key: at.probe_key.clone(),
        ..FlowShared::default()
    });
    let tap = match (at.live, cfg.interval_ns) {
        (true, Some(len)) => Some(LiveTap::new(shared.live.clone(), s.flow_id, len)),
        _ => None,
    };
    // The sender may name the data port (`-rp`); a port we cannot open
    // refuses the session with the reason.
    let bind = SocketAddr::new(local_ip, s.port.unwrap_or(0));
    let bind_err = |what: &'static str| {
        move |e: std::io::Error| match s.port {
            Some(p) => {
                EngineError::BadPlan(format!("-rp/--data-port: cannot open data port {p}: {e}"))
            }
            None => EngineError::io(what, e),
        }
    };
    let max_len = (s.max_len as usize).clamp(PROBE_HEADER_LEN, u16::MAX as usize);
    let flow_id = s.flow_id;
    let sh = shared.clone();
    let acc = Recorder {
        acc: RecvAccumulator::with_max_intervals(cfg, max_intervals),
        log,
        marks: MarksTally::default(),
        live: tap,
    };
    // Per flow: a bulk flow beside an RTT flow is not reflected.
    let reflect = s.meter.unwrap_or(meter) == MeterMode::Rtt;
    let (port, rx) = match s.transport {
        Transport::Udp => {
            let sock = UdpSocket::bind(bind).map_err(bind_err("data socket"))?;
            let port = sock
                .local_addr()
                .map_err(|e| EngineError::io("data socket", e))?
                .port();
            set_rcvbuf(
                sock.as_raw_fd(),
                s.rcvbuf
                    .map_or(at.udp_buf as usize, |w| budget::flow_buf(w) as usize),
            );
            enable_rx_timestamps(sock.as_raw_fd());
            net::enable_rx_marks(sock.as_raw_fd(), local_ip.is_ipv6());
            sock.set_read_timeout(Some(Duration::from_millis(POLL_MS)))
                .map_err(|e| EngineError::io("data socket", e))?;
            let rx = UdpRx {
                sid,
                flow_id,
                max_len,
                reflect,
                peer_ip,
            };
            let flow = UdpFlow {
                sock,
                acc,
                sh,
                rx,
                registered: declared_source(s, peer_ip, at.probe_key.is_some()),
            };
            (port, FlowRx::Udp(Box::new(flow)))
        }
        Transport::Tcp => {
            let l = TcpListener::bind(bind).map_err(bind_err("data listener"))?;
            let port = l
                .local_addr()
                .map_err(|e| EngineError::io("data listener", e))?
                .port();
            l.set_nonblocking(true)
                .map_err(|e| EngineError::io("data listener", e))?;
            let peer = declared_source(s, peer_ip, at.probe_key.is_some())
                .unwrap_or(SocketAddr::new(peer_ip, 0));
            let h = std::thread::Builder::new()
                .name(format!("wb-rx-{flow_id}"))
                .spawn(move || tcp_rx(l, acc, sh, sid, flow_id, reflect, peer))
                .map_err(|e| EngineError::io("receive thread", e))?;
            (port, FlowRx::Thread(h))
        }
        // Refused with the Hello (limits::FlowSetup::check); never opened.
        Transport::Icmp => {
            return Err(EngineError::BadPlan(
                "transport icmp: echo flows need no receiver".into(),
            ))
        }
    };
    Ok((port, SessionFlow { flow_id, shared }, rx))
}

/// Starts the receive threads of a session's UDP flows (`udp`: position in
/// the session, state). While the flows are no more than the CPUs each has
/// its own thread blocking in `recvmmsg`; more share one worker per CPU,
/// each waiting on all its sockets at once ([`udp_rx_many`]): a thread per
/// flow costs a stack and a wake-up per datagram, and thousands of them
/// only take turns on the same cores.
fn start_udp_workers(
    udp: Vec<(usize, Box<UdpFlow>)>,
    workers: &mut Vec<Worker>,
) -> Result<(), EngineError> {
    if udp.is_empty() {
        return Ok(());
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let n = udp.len().min(cores);
    let mut groups: Vec<Vec<(usize, Box<UdpFlow>)>> = (0..n).map(|_| Vec::new()).collect();
    for (k, f) in udp.into_iter().enumerate() {
        groups[k % n].push(f);
    }
    for (g, group) in groups.into_iter().enumerate() {
        let ids: Vec<usize> = group.iter().map(|(i, _)| *i).collect();
        let flows: Vec<UdpFlow> = group.into_iter().map(|(_, f)| *f).collect();
        let h = match flows.as_slice() {
            [one] => {
                let name = format!("wb-rx-{}", one.rx.flow_id);
                let mut flows = flows;
                let Some(f) = flows.pop() else { continue };
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || udp_rx(f))
            }
            _ => {
                let mut poller =
                    net::Poller::new(1024).map_err(|e| EngineError::io("receive poller", e))?;
                for (t, f) in flows.iter().enumerate() {
                    f.sock
                        .set_nonblocking(true)
                        .map_err(|e| EngineError::io("data socket", e))?;
                    poller
                        .add(f.sock.as_raw_fd(), t)
                        .map_err(|e| EngineError::io("receive poller", e))?;
                }
                std::thread::Builder::new()
                    .name(format!("wb-rxw-{g}"))
                    .spawn(move || udp_rx_many(flows, poller))
            }
        }
        .map_err(|e| EngineError::io("receive thread", e))?;
        workers.push(Worker {
            flows: ids,
            handle: Some(h),
        });
    }
    Ok(())
}

/// Who a UDP flow's receive thread accepts probes from and reflects to.
pub(crate) struct UdpRx {
    sid: u32,
    pub(crate) flow_id: u16,
    max_len: usize,
    pub(crate) reflect: bool,
    /// The session's sender: probes from any other address are foreign.
    peer_ip: IpAddr,
}

/// One UDP flow as its receive thread holds it.
pub(crate) struct UdpFlow {
    pub(crate) sock: UdpSocket,
    pub(crate) acc: Recorder,
    pub(crate) sh: Arc<FlowShared>,
    pub(crate) rx: UdpRx,
    /// The sender's data address: its address as seen on the control
    /// connection, at the port it declared ([`FlowSetup::src_port`]), else
    /// (probe MACs, or an older sender) the port of the first datagram that
    /// passed every check. Everything else is foreign and never reflected,
    /// so a session cannot be used to send packets to a third party
    /// (spoofed source addresses) nor be taken over by one datagram.
    registered: Option<SocketAddr>,
}

impl UdpFlow {
    /// Reads one batch from the flow's socket and records it; reflections
    /// (RTT meter) go back at once. Returns the datagrams read and the
    /// kernel time of the last one.
    fn read_batch(&mut self, batch: &mut RecvBatch) -> std::io::Result<(usize, u64)> {
        let n = batch.recv(self.sock.as_raw_fd())?;
        let fallback_ts = realtime_ns();
        let offset = self.sh.offset_ns.load(Ordering::Relaxed);
        let mut queued = [(0usize, 0usize); BATCH];
        let reply_min = reply_len(self.sh.probe_key.is_some());
        let mut k = 0;
        let mut last_ts = 0;
        for i in 0..n {
            let ts = batch.kernel_ts(i).unwrap_or(fallback_ts);
            last_ts = ts;
            if batch.truncated(i) {
                self.sh.foreign.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let from = batch
                .source(i)
                .map(|a| SocketAddr::new(unmap(a.ip()), a.port()));
            let d = batch.data(i);
            let Some(h) = self.accept(d, from, ts, offset) else {
                continue;
            };
            let len = d.len();
            let m = batch.marks(i);
            self.acc.marks.see(m.tos, m.ttl, m.flow_label);
            if self.rx.reflect && h.is_rtt() {
                let out_len = len.max(reply_min);
                let mut rh = h;
                rh.flags |= FLAG_REFLECTED;
                rh.len = out_len as u16;
                let buf = batch.slot_mut(i);
                let _ = rh.encode(&mut buf[..out_len]);
                let _ = Reflection {
                    rx_ns: ts,
                    tx_ns: 0,
                }
                .encode(&mut buf[..out_len]);
                batch.queue_reply(k, i, out_len);
                queued[k] = (i, out_len);
                k += 1;
            }
        }
        if k > 0 {
            // One transmit time for the batch, taken just before it leaves.
            let tx = realtime_ns();
            for &(i, out_len) in &queued[..k] {
                let buf = batch.slot_mut(i);
                Reflection::stamp_tx(buf, tx);
                if let Some(key) = &self.sh.probe_key {
                    key.sign(&mut buf[..out_len]);
                }
            }
            batch.flush_replies(self.sock.as_raw_fd(), k);
        }
        Ok((n, last_ts))
    }

    /// Takes one datagram `d` from `from` received at `ts`: a probe of
    /// this session and flow from the sender, authentic and plausible, is
    /// recorded and returned; anything else is counted (foreign, forged,
    /// implausible) and dropped. Shared by the socket and AF_XDP paths.
    pub(crate) fn accept(
        &mut self,
        d: &[u8],
        from: Option<SocketAddr>,
        ts: u64,
        offset: i64,
    ) -> Option<ProbeHeader> {
        let (sid, flow_id, peer_ip) = (self.rx.sid, self.rx.flow_id, self.rx.peer_ip);
        // A worker's batch slots fit its largest flow: longer than this
        // flow's largest probe is foreign, as a truncated datagram is.
        let longest = self.rx.max_len.max(RTT_MIN_LEN);
        let h = match ProbeHeader::decode_datagram(d) {
            Ok(h)
                if h.session == sid
                    && h.flow == flow_id
                    && !h.is_reflected()
                    && !h.is_hello()
                    && d.len() <= longest =>
            {
                h
            }
            _ => {
                self.sh.foreign.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let ours = match (self.registered, from) {
            (Some(r), Some(f)) => r == f,
            (None, Some(f)) => f.ip() == peer_ip,
            (_, None) => false,
        };
        if !ours {
            self.sh.foreign.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // With probe MACs, a probe of this session and flow from the
        // sender's address that does not carry a valid one is forged:
        // counted, never recorded or reflected.
        if self.sh.probe_key.as_ref().is_some_and(|k| !k.verify(d)) {
            self.sh.forged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let delay = self.sh.admit(&self.acc.acc, &h, ts, offset)?;
        // An undeclared source is learned only from a datagram that
        // passed every check above (with probe MACs: an authentic one),
        // so no single forged datagram can make the real ones foreign.
        if self.sh.from.get().is_none() {
            if let Some(f) = from {
                self.registered = Some(f);
                let _ = self.sh.from.set(f);
            }
        }
        self.acc.record(&h, delay, ts, d.len());
        Some(h)
    }
}

/// Serves several UDP flows on one thread until the session stops them:
/// `poller` watches all their (non-blocking) sockets, and each ready socket
/// is read until it is empty.
fn udp_rx_many(mut flows: Vec<UdpFlow>, mut poller: net::Poller) -> WorkerOutcome {
    crate::clock::raise_priority();
    tighten_timer_slack();
    let cpu0 = CpuTime::thread();
    let slot = flows
        .iter()
        .map(|f| f.rx.max_len.max(AUTH_RTT_MIN_LEN) + 1)
        .max()
        .unwrap_or(AUTH_RTT_MIN_LEN + 1);
    let mut batch = RecvBatch::new(slot);
    let reflect = flows.iter().any(|f| f.rx.reflect);
    // The session stops all its flows at once.
    let stop = match flows.first() {
        Some(f) => f.sh.clone(),
        None => Arc::new(FlowShared::default()),
    };
    // Live intervals of quiet flows are closed every 10 ms at most.
    let live = flows.iter().any(|f| f.acc.live.is_some());
    let mut next_tick = 0;
    while !stop.stop.load(Ordering::Relaxed) {
        if live && mono_ns() >= next_tick {
            flows.iter_mut().for_each(|f| f.acc.tick());
            next_tick = mono_ns() + 10_000_000;
        }
        let mut read = 0;
        poller.wait(POLL_MS as i32, |t| {
            let Some(f) = flows.get_mut(t) else { return };
            // Read until the socket is empty (a short batch where batches
            // are real, else an error), but at most a few batches, so one
            // fast flow cannot hold up the others' rounds.
            let mut here = 0;
            while let Ok((n, _)) = f.read_batch(&mut batch) {
                here += n;
                if n == 0 || (net::KERNEL_RX_TIMESTAMPS && n < BATCH) || here >= 4 * BATCH {
                    break;
                }
            }
            read += here;
        });
        // One-way flows with kernel timestamps may let datagrams gather
        // between rounds: the nap costs no accuracy and saves wake-ups.
        if read > 0 && !reflect && net::KERNEL_RX_TIMESTAMPS {
            sleep_until(mono_ns() + NAP_MAX_NS);
        }
    }
    WorkerOutcome {
        accs: flows
            .into_iter()
            .map(|mut f| {
                f.acc.finish_live();
                (f.acc.acc, f.acc.marks.seen())
            })
            .collect(),
        cpu: CpuTime::thread().since(cpu0),
    }
}

/// One UDP flow on its own thread: blocks in `recvmmsg` (up to the
/// socket's read timeout, to look at the stop flag) and naps between
/// batches while datagrams arrive fast ([`nap_ns`]).
fn udp_rx(mut f: UdpFlow) -> WorkerOutcome {
    crate::clock::raise_priority();
    // Naps between batches are tens of microseconds; the default 50 µs
    // timer slack would double them.
    tighten_timer_slack();
    let cpu0 = CpuTime::thread();
    // One byte more than the largest probe, so an oversize foreign datagram
    // shows up as truncated instead of fitting by accident.
    // Room for an authenticated reflection (a longer one than the probe).
    let slot = f.rx.max_len.max(AUTH_RTT_MIN_LEN) + 1;
    let mut batch = RecvBatch::new(slot);
    // Kernel time of the last datagram read (0: none yet).
    let mut last_ts = 0;
    while !f.sh.stop.load(Ordering::Relaxed) {
        // E.g. ECONNREFUSED queued by an ICMP error after a reflection is
        // not fatal for a receiving socket, nor is a timeout.
        let Ok((n, ts)) = f.read_batch(&mut batch) else {
            f.acc.tick();
            continue;
        };
        let prev_ts = last_ts;
        if n > 0 {
            last_ts = ts;
        }
        // Reflections go back at once; a one-way flow may let the batch fill,
        // but only where the kernel stamps arrivals (a nap before a
        // user-space timestamp would be measured as delay).
        if !f.rx.reflect && net::KERNEL_RX_TIMESTAMPS {
            if let Some(nap) = nap_ns(n, prev_ts, last_ts) {
                sleep_until(mono_ns() + nap);
            }
        }
    }
    f.acc.finish_live();
    WorkerOutcome {
        accs: vec![(f.acc.acc, f.acc.marks.seen())],
        cpu: CpuTime::thread().since(cpu0),
    }
}

/// Datagrams a nap between `recvmmsg` calls aims to let queue up.
const NAP_FILL: u64 = BATCH as u64 / 2;
/// Naps shorter than this are not worth a timer wake-up.
const NAP_MIN_NS: u64 = 5_000;
/// Longest nap: bounds the wait for the stop flag and the queue built up
/// when the rate rises (the next batch is then full and read at once).
const NAP_MAX_NS: u64 = 200_000;

/// How long to sleep before the next `recvmmsg` after a batch of `n`
/// datagrams, the last of which arrived at kernel time `last_ts`, while the
/// one read before them arrived at `prev_ts` (0: there was none).
///
/// Blocking in `recvmmsg` as soon as the queue is empty costs a wake-up per
/// datagram or two at high rates (measured: 1.4–2.6 datagrams per call at
/// 300 kpps, one context switch per call), and the wake-up is paid in the
/// sender's context on loopback; when both share a core, the receiver (at
/// higher priority) even preempts the sender for every datagram. The rate is
/// measured from the previous batch's last datagram, so that a run of
/// single-datagram batches is recognised as fast too. While datagrams
/// arrive faster than one per `NAP_MAX_NS / NAP_FILL`, sleeping on a timer
/// for about the time `NAP_FILL` of them take lets the kernel queue them
/// without waking anyone.
/// Delays are unaffected: they come from kernel receive timestamps.
fn nap_ns(n: usize, prev_ts: u64, last_ts: u64) -> Option<u64> {
    if n >= BATCH || n == 0 || prev_ts == 0 || last_ts < prev_ts {
        // A full batch: more is probably queued, read at once. The first
        // batch, or a clock step: the rate is unknown, block as before.
        return None;
    }
    let gap = (last_ts - prev_ts) / n as u64;
    let nap = gap.saturating_mul(NAP_FILL);
    (NAP_MIN_NS..=NAP_MAX_NS).contains(&nap).then_some(nap)
}

/// Length of a reflection: the header and the reflector's times, and
/// with probe MACs the MAC trailer (a UDP reflection keeps the probe's
/// length when that is longer).
fn reply_len(mac: bool) -> usize {
    if mac {
        AUTH_RTT_MIN_LEN
    } else {
        RTT_MIN_LEN
    }
}

/// The address a flow's data must come from, known before any arrives:
/// the control connection's address at the source port the sender
/// declared. None (learned from the first datagram that passes every
/// check) for an older sender that declares none, and with probe MACs,
/// where only an authentic probe can teach it: that also lets the data
/// pass a NAT that maps the declared port to another.
fn declared_source(s: &FlowSetup, peer_ip: IpAddr, probe_macs: bool) -> Option<SocketAddr> {
    s.src_port
        .filter(|_| !probe_macs)
        .map(|p| SocketAddr::new(peer_ip, p))
}

/// Most simultaneous connections on one TCP data port; more are foreign.
const MAX_TCP_CONNS: usize = 8;
/// Time a TCP data connection has to send its first record of this
/// session and flow, so that connections that never send a byte cannot
/// hold every slot of a data port and keep the real stream out.
pub const TCP_IDENTIFY: Duration = Duration::from_secs(2);
const TCP_BUF: usize = 256 << 10;

/// Reflections queued beyond this (the sender does not read them) are
/// dropped; the sender counts them as round-trip loss.
const TCP_OUT_MAX: usize = 1 << 20;

struct TcpConn {
    stream: TcpStream,
    rd: RecordReader,
    /// Reflection records ([`reply_len`] bytes each) waiting to be written.
    out: Vec<u8>,
    /// Bytes of `out` already written.
    out_head: usize,
    /// When it was accepted (monotonic ns), and whether a record of this
    /// session and flow has arrived on it since.
    accepted_ns: u64,
    identified: bool,
    /// The peer as accepted, until the connection identifies (then it is
    /// the flow's `from`); None on the sender's end of a reverse flow.
    from: Option<SocketAddr>,
}

impl TcpConn {
    /// Writes queued reflections. Records not yet started get their
    /// transmit time now (and, with probe MACs, their MAC), so queueing
    /// time counts as dwell, not as path. Returns false when the
    /// connection failed.
    fn flush(&mut self, key: Option<&ProbeKey>) -> bool {
        if self.out_head >= self.out.len() {
            return true;
        }
        let rlen = reply_len(key.is_some());
        let first_fresh = self.out_head.div_ceil(rlen) * rlen;
        let tx = realtime_ns();
        let mut at = first_fresh;
        while at + rlen <= self.out.len() {
            let rec = &mut self.out[at..at + rlen];
            Reflection::stamp_tx(rec, tx);
            if let Some(k) = key {
                k.sign(rec);
            }
            at += rlen;
        }
        loop {
            match self.stream.write(&self.out[self.out_head..]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.out_head += n;
                    if self.out_head >= self.out.len() {
                        self.out.clear();
                        self.out_head = 0;
                        return true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

fn tcp_rx(
    listener: TcpListener,
    mut acc: Recorder,
    sh: Arc<FlowShared>,
    sid: u32,
    flow_id: u16,
    reflect: bool,
    peer: SocketAddr,
) -> WorkerOutcome {
    let cpu0 = CpuTime::thread();
    let mut conns: Vec<TcpConn> = Vec::new();
    let mut pfds: Vec<net::PollFd> = Vec::with_capacity(MAX_TCP_CONNS + 1);
    while !sh.stop.load(Ordering::Relaxed) {
        drop_unidentified(&mut conns, &sh);
        pfds.clear();
        pfds.push(net::pollfd(listener.as_raw_fd(), net::POLLIN));
        for c in &conns {
            let want_out = c.out_head < c.out.len();
            let out = if want_out { net::POLLOUT } else { 0 };
            pfds.push(net::pollfd(c.stream.as_raw_fd(), net::POLLIN | out));
        }
        let r = net::poll(&mut pfds, POLL_MS as i32);
        if r <= 0 {
            acc.tick();
            continue;
        }
        let polled = pfds.len() - 1;
        if pfds[0].revents != 0 {
            while let Ok((s, from)) = listener.accept() {
                // Only the session's sender may connect (from the port it
                // declared, when it did): anyone else would hold one of the
                // few connection slots (and get reflections).
                // Up to twice the limit for a moment: `drop_unidentified`
                // makes room by closing a silent one, not the newcomer.
                let theirs = unmap(from.ip()) == peer.ip()
                    && (peer.port() == 0 || from.port() == peer.port());
                if conns.len() >= 2 * MAX_TCP_CONNS || !theirs {
                    sh.foreign.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let _ = s.set_nonblocking(true);
                // A fixed buffer switches the kernel's receive autotuning
                // off for the connection: 60 flows with 4 MiB each
                // advertised windows that overfilled a 1000-packet router
                // queue (50 000 retransmits where iperf3 -P 60 had 400).
                // Fixed only when the sender asks (`--window`, iperf3 -w).
                if sh.rcvbuf > 0 {
                    set_rcvbuf(s.as_raw_fd(), sh.rcvbuf);
                }
                conns.push(TcpConn {
                    stream: s,
                    rd: RecordReader::new(TCP_BUF),
                    out: Vec::with_capacity(if reflect { 64 << 10 } else { 0 }),
                    out_head: 0,
                    accepted_ns: mono_ns(),
                    identified: false,
                    from: Some(SocketAddr::new(unmap(from.ip()), from.port())),
                });
            }
        }
        // Backwards, so that swap_remove only moves an already handled
        // connection into the freed place.
        for ci in (0..polled).rev() {
            if pfds[ci + 1].revents == 0 {
                continue;
            }
            let ok = read_records(&mut conns[ci], &mut acc, &sh, sid, flow_id, reflect)
                && conns[ci].flush(sh.probe_key.as_ref());
            if !ok {
                conns.swap_remove(ci);
            }
        }
    }
    acc.finish_live();
    WorkerOutcome {
        accs: vec![(acc.acc, acc.marks.seen())],
        cpu: CpuTime::thread().since(cpu0),
    }
}

/// Closes data connections that have not sent a record of their session
/// within [`TCP_IDENTIFY`], and, while more than [`MAX_TCP_CONNS`] are
/// open, the oldest silent one (the newest if all have identified). Each
/// one closed counts as foreign.
fn drop_unidentified(conns: &mut Vec<TcpConn>, sh: &FlowShared) {
    let now = mono_ns();
    let limit = TCP_IDENTIFY.as_nanos() as u64;
    let before = conns.len();
    conns.retain(|c| c.identified || now.saturating_sub(c.accepted_ns) < limit);
    while conns.len() > MAX_TCP_CONNS {
        let victim = conns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.identified)
            .min_by_key(|(_, c)| c.accepted_ns)
            .map_or(conns.len() - 1, |(i, _)| i);
        conns.swap_remove(victim);
    }
    let dropped = before - conns.len();
    if dropped > 0 {
        sh.foreign.fetch_add(dropped as u64, Ordering::Relaxed);
    }
}

/// Reads what is available and records every complete record. Returns false
/// when the connection is to be dropped (closed, or not ours).
fn read_records(
    c: &mut TcpConn,
    acc: &mut Recorder,
    sh: &FlowShared,
    sid: u32,
    flow_id: u16,
    reflect: bool,
) -> bool {
    loop {
        let ts = match c.rd.fill(&mut c.stream) {
            Fill::Data(ts) => ts,
            Fill::Again => return true,
            Fill::Closed => return false,
        };
        let offset = sh.offset_ns.load(Ordering::Relaxed);
        let out = &mut c.out;
        let identified = &mut c.identified;
        let rlen = reply_len(sh.probe_key.is_some());
        let framed = c.rd.drain(
            |h| h.session == sid && h.flow == flow_id,
            |h, rec| {
                *identified = true;
                if h.is_hello() {
                    return;
                }
                if sh.probe_key.as_ref().is_some_and(|k| !k.verify(rec)) {
                    sh.forged.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let len = rec.len();
                let Some(delay) = sh.admit(&acc.acc, h, ts, offset) else {
                    return;
                };
                acc.record(h, delay, ts, len);
                if reflect && h.is_rtt() && out.len() + rlen <= TCP_OUT_MAX {
                    let mut rh = *h;
                    rh.flags |= FLAG_REFLECTED;
                    rh.len = rlen as u16;
                    let at = out.len();
                    out.resize(at + rlen, 0);
                    let rec = &mut out[at..];
                    let _ = rh.encode(rec);
                    let _ = Reflection {
                        rx_ns: ts,
                        tx_ns: 0,
                    }
                    .encode(rec);
                }
            },
        );
        if !framed {
            // Not a record stream of this flow (or it lost framing): the
            // whole connection is foreign.
            sh.foreign.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if c.identified {
            if let Some(f) = c.from.take() {
                let _ = sh.from.set(f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_log_takes_a_free_name_and_never_follows_a_planted_one() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&victim, dir.path().join("session-0000002a.wblog")).unwrap();
        #[cfg(not(unix))]
        std::fs::write(dir.path().join("session-0000002a.wblog"), b"x").unwrap();
        let cap = wirebench_pktlog::stream::LogCap::default();
        let (sink, path) = open_session_log(dir.path(), 42, &cap).unwrap();
        assert_eq!(path.file_name().unwrap(), "session-0000002a-1.wblog");
        drop(sink);
        // The same id again (an earlier session's log is there): -2.
        let (_s, path) = open_session_log(dir.path(), 42, &cap).unwrap();
        assert_eq!(path.file_name().unwrap(), "session-0000002a-2.wblog");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // Every name taken: refused, nothing opened.
        for k in 3..LOG_NAME_TRIES {
            std::fs::write(dir.path().join(format!("session-0000002a-{k}.wblog")), b"x").unwrap();
        }
        assert!(open_session_log(dir.path(), 42, &cap).is_err());
    }

    #[test]
    fn naps_only_while_datagrams_arrive_fast() {
        // 800 kpps (1.25 µs apart), 10 of them: nap for about 32 more.
        assert_eq!(nap_ns(10, 1_000, 1_000 + 10 * 1_250), Some(40_000));
        // A single datagram 2 µs after the previous one is fast too.
        assert_eq!(nap_ns(1, 1_000, 3_000), Some(64_000));
        // Full batch: read again at once.
        assert_eq!(nap_ns(BATCH, 1, 1_000 * BATCH as u64), None);
        // First batch (nothing read before), or nothing read: block.
        assert_eq!(nap_ns(5, 0, 5_000), None);
        assert_eq!(nap_ns(0, 5, 5), None);
        // Slow flow (10 kpps): the nap would exceed the cap, block instead.
        assert_eq!(nap_ns(2, 1_000, 201_000), None);
        // Back-to-back arrivals: not worth a timer.
        assert_eq!(nap_ns(5, 100, 200), None);
        // Timestamps out of order (clock step): no nap.
        assert_eq!(nap_ns(5, 100, 50), None);
    }
}
