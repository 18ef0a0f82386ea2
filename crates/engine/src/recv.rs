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
use crate::clock::realtime_ns;
use crate::ctl::{Ctl, Recv};
use crate::gate::{
    Gate, GateLimits, Refusal, Slot, MAX_PENDING, PENDING_PER_PEER, SESSIONS_PER_PEER,
};
use crate::live::{self, LiveQueue};
use crate::net::{self, AsRawFd};
use crate::result::{FlowReport, ReportExtra};
use crate::sys::{self, CpuClock, CpuTime};
pub(crate) use crate::transport::rx::unmap;
use crate::transport::rx::{
    flow_report, rx_flow, DataPort, FlowRecv, FlowShared, RxAt, RxEnd, Worker,
};
use crate::EngineError;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wirebench_pktlog::stream::{LogProducer, LogSink};
use wirebench_pktlog::{FlowEnd, FlowMeta, LogFooter, LogMeta, Side};
use wirebench_stats::IpVersion;
use wirebench_wire::auth::{Cidr, Key};
use wirebench_wire::limits::{self, MAX_HELLO_LINE, MAX_LINGER_MS};
use wirebench_wire::{ControlMsg, FlowSetup, MeterMode, CONTROL_VERSION};

/// A session whose sender says nothing on the control connection for this
/// long is abandoned (the sender sends a keep-alive every second).
pub const SESSION_IDLE: Duration = Duration::from_secs(10);
/// Time a new connection gets to send its `Hello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive buffer asked for on each UDP data socket.
pub const UDP_RCVBUF: usize = budget::UDP_RCVBUF as usize;
/// Most concurrent sessions; more are refused with an error message.
pub const MAX_SESSIONS: usize = 64;
/// Default longest session (`--max-session`): a day, so that no peer can
/// hold a slot indefinitely by keeping its session alive.
pub const MAX_SESSION: Duration = Duration::from_secs(86_400);

/// Default cap on one session's packet log (`recv --log-max`): 1 GiB, 33 M
/// records, over a minute at 500 kpps.
pub const LOG_MAX_SESSION: u64 = 1 << 30;
/// Default cap on all of a daemon's packet logs (`recv --log-max-total`).
pub const LOG_MAX_TOTAL: u64 = 10 << 30;

/// Names tried for one session's log before the session is refused: a
/// name already taken (an earlier session with the same id, or a file or
/// link someone planted) is never opened, the next suffix is.
const LOG_NAME_TRIES: u32 = 16;

/// Opens a new log for session `sid` in `dir`: under the name the sender
/// asked for (`named`, already checked by `check_log_name`: one file name)
/// or `session-<id>.wblog`; when that is taken, the same with `-<k>`
/// before the extension for the first k not taken.
fn open_session_log(
    dir: &std::path::Path,
    sid: u32,
    named: Option<&str>,
    cap: &wirebench_pktlog::stream::LogCap,
) -> Result<(LogSink, std::path::PathBuf), wirebench_pktlog::LogError> {
    let own = format!("session-{sid:08x}.wblog");
    let base = named.unwrap_or(&own);
    // "recv.log" -> ("recv", ".log"); a name without a dot keeps it all.
    let (stem, ext) = match base.rfind('.') {
        Some(i) if i > 0 => base.split_at(i),
        _ => (base, ""),
    };
    let mut k = 0;
    loop {
        let name = match k {
            0 => base.to_string(),
            _ => format!("{stem}-{k}{ext}"),
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
    /// Senders may name their session's log (`send -x NAME`, within
    /// `log_dir`); false refuses such sessions.
    pub log_names: bool,
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
    /// Whether a session's UDP flow may arrive by the AF_XDP path (Linux;
    /// docs/engine.md, "AF_XDP path").
    pub xdp: crate::XdpUse,
    /// Whether the AF_XDP receiver switches its interface to threaded
    /// NAPI while a session holds it (docs/engine.md, "Threaded NAPI").
    pub xdp_napi: crate::NapiUse,
    /// How the AF_XDP receiver takes a session's frames: receive records
    /// written by the XDP program, or AF_XDP rings (docs/engine.md,
    /// "Receive records").
    pub xdp_rx: crate::XdpRx,
    /// One-way UDP flows' sockets take coalesced datagrams (UDP GRO,
    /// Linux; docs/engine.md, "UDP segmentation offload").
    pub udp_gro: bool,
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
            log_names: true,
            log_total_left: Arc::new(AtomicU64::new(LOG_MAX_TOTAL)),
            key: None,
            require_probe_auth: false,
            allow: Vec::new(),
            sessions_per_peer: SESSIONS_PER_PEER,
            max_session: MAX_SESSION,
            budgets: Budgets::default(),
            peer_share_pct: budget::PEER_SHARE_PCT,
            live_intervals: true,
            xdp: crate::XdpUse::Off,
            xdp_napi: crate::NapiUse::Off,
            xdp_rx: crate::XdpRx::Auto,
            udp_gro: true,
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

struct SessionFlow {
    flow_id: u16,
    shared: Arc<FlowShared>,
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
        log_name,
        xdp: xdp_asked,
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
    if let Some(name) = &log_name {
        let why = if log_dir.is_none() {
            "this receiver keeps no logs (start it with --log-dir DIR)".to_string()
        } else if !cfg.log_names {
            "this receiver does not take log names from senders (recv --no-log-names)".to_string()
        } else {
            match limits::check_log_name(name) {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            }
        };
        if !why.is_empty() {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            return refuse(&mut ctl, format!("-x {name}: {why}"));
        }
    }
    // The session's sockets, buffers and threads are reserved before any
    // is opened, and given back when `_grant` goes, however it ends.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let session_budget = &cfg.budgets.session;
    let cost = budget::cost(&setups, meter, cores, session_budget);
    let _grant = match ledger.reserve_for(peer.ip(), cost) {
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
    let at = RxAt {
        sid,
        peer_ip,
        ip,
        meter,
        max_intervals,
        live: live_asked && live_ms.is_some() && cfg.live_intervals,
        probe_key: probe_key.clone(),
        dgram_buf: budget::default_buffer(budget::UDP_RCVBUF, setups.len(), session_budget),
        offset: None,
        gro: cfg.udp_gro,
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
            match open_session_log(dir, sid, log_name.as_deref(), &cap) {
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
    let mut tcp = Vec::new();
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
        match open_flow(s, &at, local_ip, log) {
            Ok((port, shared, end)) => {
                ports.push(port);
                flows.0.push(SessionFlow {
                    flow_id: s.flow_id,
                    shared,
                });
                let end = match end.into_udp() {
                    Ok(u) => {
                        udp.push((i, u));
                        continue;
                    }
                    Err(end) => end,
                };
                let spawned = match end.into_tcp() {
                    Ok(t) => {
                        tcp.push((i, t));
                        continue;
                    }
                    Err(end) => std::thread::Builder::new()
                        .name(format!("wb-rx-{}", s.flow_id))
                        .spawn(move || end.run()),
                };
                match spawned {
                    Ok(h) => flows.1.push(Worker {
                        flows: vec![i],
                        handle: Some(h),
                    }),
                    Err(e) => {
                        stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                        return refuse(
                            &mut ctl,
                            format!("flow {}: receive thread: {e}", s.flow_id),
                        );
                    }
                }
            }
            Err(e) => {
                stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
                return refuse(&mut ctl, format!("flow {}: {e}", s.flow_id));
            }
        }
    }
    #[cfg(target_os = "linux")]
    let (udp, xdp) = crate::xdp::rx::take(
        &cfg.xdp,
        cfg.xdp_napi,
        cfg.xdp_rx,
        xdp_asked,
        local_ip,
        udp,
        &mut flows.1,
    );
    #[cfg(not(target_os = "linux"))]
    let _ = xdp_asked;
    #[cfg(target_os = "linux")]
    if let (Some(Err(why)), true) = (&xdp, verbose) {
        eprintln!("wirebench recv: session {sid:08x}: socket path, not XDP: {why}");
    }
    if let Err(e) = crate::transport::udp::rx::start_workers(udp, &mut flows.1)
        .and_then(|()| crate::transport::tcp::rx::start_workers(tcp, &mut flows.1))
    {
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
        // Only the name: the sender has no business with our directory.
        log: log_name.and(
            sink.as_ref()
                .and_then(|(_, p)| p.file_name().map(|n| n.to_string_lossy().into_owned())),
        ),
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
                #[cfg(target_os = "linux")]
                if let (Some(Ok((_, counts))), true) = (&xdp, verbose) {
                    eprintln!("wirebench recv: session {sid:08x}: {}", counts.line());
                }
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

/// Opens flow `s`'s data port on `local_ip` by its transport's receive
/// side; gives the port, the state the session shares with the flow's
/// receive loop, and the receiving end to run.
fn open_flow(
    s: &FlowSetup,
    at: &RxAt,
    local_ip: IpAddr,
    log: Option<LogProducer>,
) -> Result<(u16, Arc<FlowShared>, RxEnd), EngineError> {
    let Some(listen) = crate::transport::ops(s.transport).listen else {
        // Refused with the Hello (limits::FlowSetup::check); never opened.
        return Err(EngineError::BadPlan(format!(
            "transport {}: its flows need no receiver",
            s.transport
        )));
    };
    let rf = rx_flow(s, at, log);
    let shared = rf.sh.clone();
    // The sender may name the data port (`-rp`); a port we cannot open
    // refuses the session with the reason.
    let port = DataPort {
        addr: SocketAddr::new(local_ip, s.port.unwrap_or(0)),
        asked: s.port.is_some(),
    };
    let (port, end) = listen(port, rf)?;
    Ok((port, shared, end))
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
        sessions: Vec::new(),
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
        let (sink, path) = open_session_log(dir.path(), 42, None, &cap).unwrap();
        assert_eq!(path.file_name().unwrap(), "session-0000002a-1.wblog");
        drop(sink);
        // The same id again (an earlier session's log is there): -2.
        let (_s, path) = open_session_log(dir.path(), 42, None, &cap).unwrap();
        assert_eq!(path.file_name().unwrap(), "session-0000002a-2.wblog");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // Every name taken: refused, nothing opened.
        for k in 3..LOG_NAME_TRIES {
            std::fs::write(dir.path().join(format!("session-0000002a-{k}.wblog")), b"x").unwrap();
        }
        assert!(open_session_log(dir.path(), 42, None, &cap).is_err());
    }

    #[test]
    fn a_named_log_keeps_its_extension_when_the_name_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let cap = wirebench_pktlog::stream::LogCap::default();
        let name = |n: Option<&str>| {
            let (_s, p) = open_session_log(dir.path(), 7, n, &cap).unwrap();
            p.file_name().unwrap().to_string_lossy().into_owned()
        };
        assert_eq!(name(Some("recv.log")), "recv.log");
        assert_eq!(name(Some("recv.log")), "recv-1.log");
        assert_eq!(name(Some("plain")), "plain");
        assert_eq!(name(Some("plain")), "plain-1");
        assert_eq!(name(Some("a.b.log")), "a.b.log");
        assert_eq!(name(Some("a.b.log")), "a.b-1.log");
    }
}
