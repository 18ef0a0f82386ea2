//! An iperf3 server inside `wirebench recv --iperf3`: unmodified iperf3
//! clients (TCP, UDP, `-R`, `--bidir`, `-P`, `-l`, `-n`/`-k`) are served
//! on one TCP and one UDP port, several at once, each session admitted by
//! the daemon's own gate (`--allow`, per-peer and total slots) and budget
//! ledger, and recorded as a `wirebench.result/1` document.
//!
//! UDP streams of every session share one socket and one receive thread,
//! which tells them apart by source address: no session has to own the
//! port, so sessions from many clients run at once without SO_REUSEPORT.
//! TCP data connections are matched to their session by cookie.

use crate::measure::{transient, Drain, UdpRx, ASSUMED_MTU, DRAIN_MAX_NS, QUIET_NS};
use crate::proto::{self, errno, udp_header, Params, Results, Retransmits, State, StreamResult};
use crate::Iperf3Error;
use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use wirebench_engine::budget::{Ledger, Resources};
use wirebench_engine::clock::{mono_ns, realtime_ns, wait_until};
use wirebench_engine::gate::{Gate, Refusal};
use wirebench_engine::result::{CpuTime, FlowResult, Requested, ResultDoc, Total};
use wirebench_engine::sys::{self, CpuClock};
use wirebench_stats::{IpVersion, SendSummary, Throughput};
use wirebench_wire::{Direction, Transport};

/// Time a new connection has to send its cookie.
const COOKIE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client has to send its parameters, open its streams, answer.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// A reverse sender stops this long (plus four round trips of the control
/// connection) before the client's timer ends, so that what it sent has
/// arrived when the client stops counting.
const REVERSE_MARGIN_NS: u64 = 20_000_000;
/// Receive buffer asked for on the shared UDP socket.
const UDP_RCVBUF: usize = 8 << 20;
/// Buffer-bytes charged to the budget per TCP stream.
const TCP_STREAM_BUF: u64 = 4 << 20;

/// How an iperf3 server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; None: `[::]` dual-stack, else 0.0.0.0.
    pub bind: Option<IpAddr>,
    /// TCP and UDP port (iperf3's default 5201).
    pub port: u16,
    /// One line per session on stderr.
    pub verbose: bool,
    /// Write each session's result document into this directory.
    pub results_dir: Option<std::path::PathBuf>,
    /// Longest a session may last.
    pub max_session: Duration,
}

/// Counters of the iperf3 server, readable while it serves.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Sessions admitted (cookie read, a slot taken).
    pub sessions_started: AtomicU64,
    /// Sessions that exchanged results (with a results directory: and
    /// whose document is stored there).
    pub sessions_completed: AtomicU64,
    /// Sessions that ended in an error (refusals included).
    pub sessions_failed: AtomicU64,
    /// Connections or sessions refused (`--allow`, slots, budgets, what
    /// cannot be mapped).
    pub refused: AtomicU64,
    /// TCP connections without a cookie, UDP datagrams of no stream.
    pub foreign: AtomicU64,
    /// Streams of the sessions whose test ran to its end, both directions.
    pub streams: AtomicU64,
    /// UDP datagrams the completed sessions' client streams delivered
    /// (counted when a session ends; TCP streams count no packets).
    pub datagrams_received: AtomicU64,
}

/// The running server; [`Server::serve_until`] serves until told to stop.
pub struct Server {
    tcp: TcpListener,
    udp: Arc<UdpSocket>,
    ctx: Arc<Ctx>,
}

/// Where a session's TCP data connections go, with their accept order.
type DataConnTx = mpsc::Sender<(u64, TcpStream)>;

struct Ctx {
    cfg: ServerConfig,
    gate: Arc<Gate>,
    ledger: Arc<Ledger>,
    stats: Arc<ServerStats>,
    udp: Arc<UdpSocket>,
    /// TCP data connections of sessions opening their streams, by cookie;
    /// each carries its accept order (iperf3 numbers streams in the order
    /// it opens them).
    pending_tcp: Mutex<HashMap<[u8; proto::COOKIE_LEN], DataConnTx>>,
    /// Peers with a session opening UDP streams now: one at a time per
    /// address, because a connect datagram carries no cookie.
    udp_opening: Mutex<HashSet<IpAddr>>,
    udp_cmds: Mutex<mpsc::Sender<UdpCmd>>,
    udp_rx: Mutex<Option<mpsc::Receiver<UdpCmd>>>,
    accepted: AtomicU64,
    sessions: AtomicU64,
}

impl Server {
    /// Binds the TCP and UDP port. `gate` and `ledger` are the receiver
    /// daemon's, so iperf3 sessions count against the same `--allow` list,
    /// slots and budgets as wirebench sessions.
    pub fn bind(
        cfg: ServerConfig,
        gate: Arc<Gate>,
        ledger: Arc<Ledger>,
    ) -> Result<Server, Iperf3Error> {
        let (tcp, udp) = match cfg.bind {
            Some(ip) => bind_pair(SocketAddr::new(ip, cfg.port), false)?,
            None => match bind_pair(
                SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), cfg.port),
                true,
            ) {
                Ok(p) => p,
                Err(_) => bind_pair(
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), cfg.port),
                    false,
                )?,
            },
        };
        let udp = Arc::new(udp);
        let (tx, rx) = mpsc::channel();
        Ok(Server {
            tcp,
            udp: udp.clone(),
            ctx: Arc::new(Ctx {
                cfg,
                gate,
                ledger,
                stats: Arc::new(ServerStats::default()),
                udp,
                pending_tcp: Mutex::new(HashMap::new()),
                udp_opening: Mutex::new(HashSet::new()),
                udp_cmds: Mutex::new(tx),
                udp_rx: Mutex::new(Some(rx)),
                accepted: AtomicU64::new(0),
                sessions: AtomicU64::new(0),
            }),
        })
    }

    /// The TCP address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.tcp.local_addr().ok()
    }

    /// The server's counters, shared with whoever reports them.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.ctx.stats.clone()
    }

    /// Serves until `stop` is set; running sessions finish on their threads.
    pub fn serve_until(&self, stop: &AtomicBool) -> Result<(), Iperf3Error> {
        let Some(cmds) = lock(&self.ctx.udp_rx).take() else {
            return Err(Iperf3Error::Protocol("server already serving".into()));
        };
        let udp_stop = Arc::new(AtomicBool::new(false));
        let udp_thread = {
            let (sock, stop, stats) = (self.udp.clone(), udp_stop.clone(), self.ctx.stats.clone());
            std::thread::Builder::new()
                .name("wb-iperf3-udp".into())
                .spawn(move || udp_loop(&sock, &cmds, &stop, &stats))
                .map_err(|e| Iperf3Error::io("starting the UDP thread", e))?
        };
        self.tcp
            .set_nonblocking(true)
            .map_err(|e| Iperf3Error::io("iperf3 listener", e))?;
        while !stop.load(Ordering::Relaxed) {
            match self.tcp.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EMFILE and friends: back off instead of spinning.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        udp_stop.store(true, Ordering::Relaxed);
        let _ = udp_thread.join();
        Ok(())
    }

    fn admit(&self, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nonblocking(false);
        let ip = unmap(peer.ip());
        let ctx = self.ctx.clone();
        let slot = match ctx.gate.admit(ip, stream.try_clone().ok()) {
            Ok(s) => s,
            Err(refusal) => {
                ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
                if refusal != Refusal::NotAllowed {
                    deny(&stream);
                }
                if ctx.cfg.verbose {
                    eprintln!("wirebench recv: iperf3 connection from {peer} refused: {refusal}");
                }
                return;
            }
        };
        let order = ctx.accepted.fetch_add(1, Ordering::Relaxed);
        let _ = std::thread::Builder::new()
            .name("wb-iperf3".into())
            .spawn(move || connection(stream, peer, order, slot, &ctx));
    }
}

fn bind_pair(addr: SocketAddr, dual: bool) -> Result<(TcpListener, UdpSocket), Iperf3Error> {
    use socket2::{Domain, Protocol, Socket, Type};
    let err = |e| Iperf3Error::io(format!("cannot bind {addr}"), e);
    let t =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    let u =
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    if dual {
        t.set_only_v6(false).map_err(err)?;
        u.set_only_v6(false).map_err(err)?;
    }
    t.set_reuse_address(true).map_err(err)?;
    t.bind(&addr.into()).map_err(err)?;
    t.listen(128).map_err(err)?;
    u.bind(&addr.into()).map_err(err)?;
    // A smaller buffer than asked for only costs drops at high rates,
    // which the session then reports.
    let _ = u.set_recv_buffer_size(UDP_RCVBUF);
    u.set_read_timeout(Some(Duration::from_millis(10)))
        .map_err(err)?;
    Ok((t.into(), u.into()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every change is made whole under the lock: a panicked holder leaves
    // consistent data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An IPv4-mapped IPv6 address is the IPv4 address it maps.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn unmap_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(unmap(a.ip()), a.port())
}

/// iperf3's "the server is busy running a test": the one refusal every
/// iperf3 client prints.
fn deny(mut s: &TcpStream) {
    let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = s.write_all(&[State::AccessDenied.byte()]);
}

/// A new connection: a data connection of a session opening its streams
/// (its cookie is registered), or a new control connection.
fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    order: u64,
    mut slot: wirebench_engine::gate::Slot,
    ctx: &Ctx,
) {
    let _ = stream.set_read_timeout(Some(COOKIE_TIMEOUT));
    let mut cookie = [0u8; proto::COOKIE_LEN];
    if stream.read_exact(&mut cookie).is_err() {
        ctx.stats.foreign.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if let Some(tx) = lock(&ctx.pending_tcp).get(&cookie) {
        let _ = tx.send((order, stream));
        return;
    }
    if let Err(refusal) = slot.promote() {
        ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
        deny(&stream);
        if ctx.cfg.verbose {
            eprintln!("wirebench recv: iperf3 session from {peer} refused: {refusal}");
        }
        return;
    }
    ctx.stats.sessions_started.fetch_add(1, Ordering::Relaxed);
    let n = ctx.sessions.fetch_add(1, Ordering::Relaxed) + 1;
    match session(stream, peer, cookie, ctx) {
        Ok(doc) => {
            if ctx.cfg.verbose {
                eprintln!(
                    "wirebench recv: iperf3 session from {peer}: {}",
                    one_line(&doc)
                );
            }
            if let Some(dir) = &ctx.cfg.results_dir {
                let name = format!("iperf3-{}-{n}.json", realtime_ns() / 1_000_000);
                let path = dir.join(&name);
                // Written aside and renamed: whoever reads the directory
                // (a test, `results import`, a script polling it) sees a
                // session's document whole or not at all.
                let tmp = dir.join(format!(".{name}.tmp"));
                let written = serde_json::to_vec_pretty(&doc)
                    .map_err(std::io::Error::other)
                    .and_then(|b| std::fs::write(&tmp, b))
                    .and_then(|()| std::fs::rename(&tmp, &path));
                if let Err(e) = written {
                    let _ = std::fs::remove_file(&tmp);
                    eprintln!("wirebench recv: cannot write {}: {e}", path.display());
                }
            }
            // Counted once its document is stored, so a caller that waits
            // for the count finds the document there.
            ctx.stats.sessions_completed.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            ctx.stats.sessions_failed.fetch_add(1, Ordering::Relaxed);
            if matches!(e, Iperf3Error::Unsupported(_) | Iperf3Error::Admission(_)) {
                ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
            }
            if ctx.cfg.verbose {
                eprintln!("wirebench recv: iperf3 session from {peer}: {e}");
            }
        }
    }
}

/// The session's summary line for the daemon's log.
fn one_line(doc: &ResultDoc) -> String {
    let parts: Vec<String> = doc
        .flows
        .iter()
        .map(|f| {
            let dir = match f.direction {
                Direction::Forward => "client->us",
                Direction::Reverse => "us->client",
            };
            match (f.direction, f.transport) {
                (Direction::Forward, Transport::Udp) => format!(
                    "{dir} udp {:.2} Mbit/s, {} of {} datagrams lost, jitter {:.3} ms",
                    f.throughput_bps.payload / 1e6,
                    f.received.counts.lost.unwrap_or(0),
                    f.received.counts.unique + f.received.counts.lost.unwrap_or(0),
                    f.jitter_s.rfc3550 * 1e3
                ),
                (Direction::Forward, _) => format!(
                    "{dir} tcp {:.2} Mbit/s ({} bytes)",
                    f.throughput_bps.payload / 1e6,
                    f.received.counts.bytes
                ),
                (Direction::Reverse, _) => format!(
                    "{dir} {} {:.2} Mbit/s ({} bytes)",
                    f.transport,
                    f.sent.throughput_bps.payload / 1e6,
                    f.sent.bytes
                ),
            }
        })
        .collect();
    parts.join("; ")
}

/// What a session was asked for, checked.
struct Ask {
    transport: Transport,
    params: Params,
    /// Streams the client sends on (we receive), then those we send on.
    forward: usize,
    reverse: usize,
}

/// Checks the client's parameters; the error carries iperf3's error number.
fn check(params: Params, max_session: Duration) -> Result<Ask, (i32, String)> {
    if params.sctp {
        return Err((
            errno::NO_SCTP,
            "SCTP is not served (TCP and UDP are)".into(),
        ));
    }
    if params.authtoken.is_some() {
        return Err((
            errno::AUTH_FAILED,
            "iperf3's RSA authentication is not served (use --allow, or a wirebench sender with --key-file)".into(),
        ));
    }
    let transport = if params.udp {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    if params.parallel == 0 || params.parallel > proto::MAX_STREAMS {
        return Err((
            errno::TOO_MANY_STREAMS,
            format!(
                "{} parallel streams (1..={})",
                params.parallel,
                proto::MAX_STREAMS
            ),
        ));
    }
    let max_len = match transport {
        Transport::Udp => proto::MAX_UDP_BLOCK,
        _ => proto::MAX_TCP_BLOCK,
    };
    let min_len = match transport {
        Transport::Udp => udp_header::len(params.udp_counters_64bit) as u32,
        _ => 1,
    };
    if params.len < min_len || params.len > max_len {
        return Err((
            errno::BLOCK_SIZE,
            format!("block length {} ({min_len}..={max_len})", params.len),
        ));
    }
    if params.time.saturating_add(params.omit) > max_session.as_secs() {
        return Err((
            errno::DURATION,
            format!(
                "a {} s test is longer than --max-session {} s",
                params.time + params.omit,
                max_session.as_secs()
            ),
        ));
    }
    let p = params.parallel as usize;
    let (forward, reverse) = match (params.reverse, params.bidirectional) {
        (_, true) => (p, p),
        (true, false) => (0, p),
        (false, false) => (p, 0),
    };
    Ok(Ask {
        transport,
        params,
        forward,
        reverse,
    })
}

/// One stream's socket once opened.
enum Conn {
    Tcp(TcpStream),
    Udp(SocketAddr),
}

/// What a stream's worker measured.
#[derive(Default)]
struct Outcome {
    bytes: u64,
    /// UDP: datagrams sent (we sent) or highest sequence number (we received).
    packets: u64,
    first_ns: u64,
    last_ns: u64,
    retransmits: Option<u64>,
    /// UDP streams we received.
    rx: Option<UdpRx>,
    /// TCP streams we received: span on the realtime clock.
    from: Option<SocketAddr>,
}

impl Outcome {
    /// `bytes` (and `packets` datagrams) more went or came, now.
    fn count(&mut self, bytes: u64, packets: u64) {
        let now = realtime_ns();
        if self.bytes == 0 {
            self.first_ns = now;
        }
        self.last_ns = now;
        self.bytes += bytes;
        self.packets += packets;
    }
}

fn session(
    mut ctl: TcpStream,
    peer: SocketAddr,
    cookie: [u8; proto::COOKIE_LEN],
    ctx: &Ctx,
) -> Result<ResultDoc, Iperf3Error> {
    let deadline = mono_ns() + ctx.cfg.max_session.as_nanos() as u64;
    let _ = ctl.set_nodelay(true);
    ctl.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(Iperf3Error::control)?;
    let _ = ctl.set_write_timeout(Some(STEP_TIMEOUT));
    let cpu0 = CpuTime::process();
    let started_real = realtime_ns();
    proto::write_state(&mut ctl, State::ParamExchange)?;
    let params: Params = proto::read_json(&mut ctl, "parameters")?;
    let ask = match check(params, ctx.cfg.max_session) {
        Ok(a) => a,
        Err((code, why)) => {
            let _ = proto::write_server_error(&mut ctl, code);
            return Err(Iperf3Error::Unsupported(why));
        }
    };
    let streams = ask.forward + ask.reverse;
    let tcp = ask.transport == Transport::Tcp;
    // Sockets: the control connection and one per TCP stream (UDP streams
    // share the server's socket); threads: this one, one per TCP stream and
    // per UDP stream we send on.
    let need = Resources {
        sockets: 1 + if tcp { streams as u64 } else { 0 },
        buffer_bytes: if tcp {
            streams as u64 * TCP_STREAM_BUF
        } else {
            0
        },
        threads: 1 + if tcp { streams } else { ask.reverse } as u64,
    };
    let _grant = match ctx.ledger.reserve_for(peer.ip(), need) {
        Ok(g) => g,
        Err(over) => {
            deny(&ctl);
            return Err(Iperf3Error::Admission(over.to_string()));
        }
    };
    let conns = open_streams(&mut ctl, peer, cookie, &ask, ctx)?;

    let stop = Arc::new(AtomicBool::new(false));
    let draining = Arc::new(AtomicBool::new(false));
    let p = &ask.params;
    let margin = REVERSE_MARGIN_NS + sys::tcp_info(&ctl).map_or(0, |t| (t.rtt_s * 4e9) as u64);
    let run_ns = p.time.saturating_add(p.omit).saturating_mul(1_000_000_000);
    proto::write_state(&mut ctl, State::TestStart)?;
    let t0 = mono_ns();
    let stop_send_at = if p.time > 0 {
        t0 + run_ns.saturating_sub(margin)
    } else {
        deadline
    };
    let mut workers = Vec::new();
    let mut udp_measured = Vec::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let sends = i >= ask.forward;
        let (stop, draining) = (stop.clone(), draining.clone());
        let len = p.len as usize;
        let rate = p.bandwidth;
        let cap = Cap {
            bytes: p.num,
            blocks: p.blockcount,
        };
        let wide = p.udp_counters_64bit;
        let worker = match (conn, sends) {
            (Conn::Tcp(s), false) => spawn(move || tcp_receive(s, len, &draining)),
            (Conn::Tcp(s), true) => spawn(move || tcp_send(s, len, rate, stop_send_at, cap, &stop)),
            (Conn::Udp(addr), false) => {
                udp_measured.push(addr);
                send_cmd(
                    ctx,
                    UdpCmd::Measure {
                        addr,
                        wide,
                        ip: ip_version(addr.ip()),
                    },
                );
                Worker::Udp(addr)
            }
            (Conn::Udp(addr), true) => {
                let sock = ctx.udp.clone();
                spawn(move || udp_send(&sock, addr, len, rate, wide, stop_send_at, cap, &stop))
            }
        };
        workers.push((i, sends, worker));
    }
    proto::write_state(&mut ctl, State::TestRunning)?;

    // The client's timer runs the test; wait for its TEST_END.
    let wait_ns = if p.time > 0 {
        run_ns + STEP_TIMEOUT.as_nanos() as u64
    } else {
        deadline.saturating_sub(mono_ns())
    };
    let _ = ctl.set_read_timeout(Some(Duration::from_nanos(wait_ns.max(1))));
    let ended = proto::read_state(&mut ctl);
    let t_end = mono_ns();
    stop.store(true, Ordering::Relaxed);
    draining.store(true, Ordering::Relaxed);
    let forget = |ctx: &Ctx, addrs: &[SocketAddr]| {
        send_cmd(
            ctx,
            UdpCmd::Forget {
                addrs: addrs.to_vec(),
            },
        )
    };
    let all_udp: Vec<SocketAddr> = workers
        .iter()
        .filter_map(|(_, _, w)| match w {
            Worker::Udp(a) => Some(*a),
            _ => None,
        })
        .collect();
    match ended {
        Ok(State::TestEnd) => {}
        Ok(other) => {
            forget(ctx, &all_udp);
            return Err(Iperf3Error::Protocol(format!(
                "expected TEST_END, the client sent {other:?}"
            )));
        }
        Err(e) => {
            forget(ctx, &all_udp);
            return Err(e);
        }
    }
    let elapsed_s = (t_end - t0) as f64 / 1e9;

    // What the UDP thread measured, once the streams have gone quiet.
    let mut udp_out: HashMap<SocketAddr, UdpRx> = HashMap::new();
    if !udp_measured.is_empty() {
        let (tx, rx) = mpsc::channel();
        send_cmd(
            ctx,
            UdpCmd::Finish {
                addrs: udp_measured.clone(),
                deadline_ns: mono_ns() + DRAIN_MAX_NS,
                tx,
            },
        );
        if let Ok(v) = rx.recv_timeout(Duration::from_nanos(DRAIN_MAX_NS) + STEP_TIMEOUT) {
            udp_out.extend(v);
        }
    }
    let mut outcomes: Vec<(usize, bool, Outcome)> = Vec::new();
    for (i, sends, w) in workers {
        let o = match w {
            Worker::Thread(h) => h.join().unwrap_or_default(),
            Worker::Udp(addr) => {
                let rx = udp_out.remove(&addr);
                Outcome {
                    bytes: rx.as_ref().map_or(0, |r| r.bytes),
                    packets: rx.as_ref().map_or(0, |r| r.highest),
                    from: Some(addr),
                    rx,
                    ..Outcome::default()
                }
            }
        };
        outcomes.push((i, sends, o));
    }
    forget(ctx, &all_udp);
    ctx.stats
        .streams
        .fetch_add(outcomes.len() as u64, Ordering::Relaxed);
    let datagrams: u64 = outcomes
        .iter()
        .filter_map(|(_, _, o)| o.rx.as_ref())
        .map(|r| r.summary.counts.packets)
        .sum();
    ctx.stats
        .datagrams_received
        .fetch_add(datagrams, Ordering::Relaxed);

    let cpu = CpuTime::process().since(cpu0).share(elapsed_s.max(1e-3));
    let sender_tcp = tcp && ask.reverse > 0;
    let ours = Results {
        cpu_util_total: (cpu.user + cpu.system) * 100.0,
        cpu_util_user: cpu.user * 100.0,
        cpu_util_system: cpu.system * 100.0,
        sender_has_retransmits: Retransmits(if sender_tcp { Some(1) } else { None }),
        congestion_used: None,
        streams: outcomes
            .iter()
            .map(|(i, _, o)| StreamResult {
                id: proto::stream_id(*i),
                bytes: o.bytes,
                retransmits: Retransmits(o.retransmits),
                jitter: o.rx.as_ref().map_or(0.0, |r| r.summary.jitter_s.rfc3550),
                errors: o
                    .rx
                    .as_ref()
                    .map_or(0, |r| r.summary.counts.lost.unwrap_or(0) as i64),
                packets: o.packets as i64,
                start_time: 0.0,
                end_time: elapsed_s,
            })
            .collect(),
        server_output_text: None,
    };
    ctl.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(Iperf3Error::control)?;
    proto::write_state(&mut ctl, State::ExchangeResults)?;
    let theirs: Results = proto::read_json(&mut ctl, "client results")?;
    let doc = build_doc(
        &ask,
        peer,
        ctl.local_addr().ok(),
        started_real,
        &outcomes,
        &theirs,
        elapsed_s,
        cpu,
    );
    let mut ours = ours;
    if p.get_server_output {
        ours.server_output_text = Some(format!("wirebench recv --iperf3: {}\n", one_line(&doc)));
    }
    proto::write_json(&mut ctl, &ours)?;
    proto::write_state(&mut ctl, State::DisplayResults)?;
    // IPERF_DONE, or the client just closes: both end the session.
    let _ = proto::read_state(&mut ctl);
    Ok(doc)
}

enum Worker {
    Thread(std::thread::JoinHandle<Outcome>),
    /// Measured by the UDP thread.
    Udp(SocketAddr),
}

fn spawn(f: impl FnOnce() -> Outcome + Send + 'static) -> Worker {
    match std::thread::Builder::new()
        .name("wb-iperf3-stream".into())
        .spawn(f)
    {
        Ok(h) => Worker::Thread(h),
        // The thread budget was reserved; a failed spawn is a host out of
        // threads: the stream reports nothing rather than failing the rest.
        Err(_) => Worker::Thread(std::thread::spawn(Outcome::default)),
    }
}

fn send_cmd(ctx: &Ctx, cmd: UdpCmd) {
    let _ = lock(&ctx.udp_cmds).send(cmd);
}

fn ip_version(ip: IpAddr) -> IpVersion {
    match unmap(ip) {
        IpAddr::V4(_) => IpVersion::V4,
        IpAddr::V6(_) => IpVersion::V6,
    }
}

/// Sends CREATE_STREAMS and collects the client's streams in the order it
/// opened them.
fn open_streams(
    ctl: &mut TcpStream,
    peer: SocketAddr,
    cookie: [u8; proto::COOKIE_LEN],
    ask: &Ask,
    ctx: &Ctx,
) -> Result<Vec<Conn>, Iperf3Error> {
    let n = ask.forward + ask.reverse;
    let give_up = mono_ns() + STEP_TIMEOUT.as_nanos() as u64;
    let timeout = |what: &str| {
        Iperf3Error::Protocol(format!(
            "the client did not open its {what} streams within {} s",
            STEP_TIMEOUT.as_secs()
        ))
    };
    if ask.transport == Transport::Tcp {
        let (tx, rx) = mpsc::channel();
        lock(&ctx.pending_tcp).insert(cookie, tx);
        let got = collect(ctl, &rx, n, give_up).ok_or_else(|| timeout("TCP"));
        let got = got.and_then(|r| r).map(|mut v| {
            v.sort_by_key(|(order, _)| *order);
            v.into_iter().map(|(_, s)| Conn::Tcp(s)).collect()
        });
        lock(&ctx.pending_tcp).remove(&cookie);
        return got;
    }
    // UDP: the connect datagrams carry no cookie, so only one session per
    // peer address may be opening its streams at a time.
    let ip = unmap(peer.ip());
    loop {
        if lock(&ctx.udp_opening).insert(ip) {
            break;
        }
        if mono_ns() > give_up {
            return Err(Iperf3Error::Admission(format!(
                "another session from {ip} kept opening UDP streams"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (tx, rx) = mpsc::channel();
    send_cmd(ctx, UdpCmd::Expect { ip, n, tx });
    let got = collect(ctl, &rx, n, give_up)
        .ok_or_else(|| timeout("UDP"))
        .and_then(|r| r)
        .map(|v| v.into_iter().map(Conn::Udp).collect());
    send_cmd(ctx, UdpCmd::Unexpect { ip });
    lock(&ctx.udp_opening).remove(&ip);
    if got.is_err() {
        // The ones that did connect are not measured; forget them.
        let addrs = rx.try_iter().collect();
        send_cmd(ctx, UdpCmd::Forget { addrs });
    }
    got
}

/// Tells the client to open its streams and takes `n` of them from `rx`;
/// None when they did not all come by `give_up`.
fn collect<T>(
    ctl: &mut TcpStream,
    rx: &mpsc::Receiver<T>,
    n: usize,
    give_up: u64,
) -> Option<Result<Vec<T>, Iperf3Error>> {
    if let Err(e) = proto::write_state(ctl, State::CreateStreams) {
        return Some(Err(e));
    }
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let left = give_up.saturating_sub(mono_ns());
        v.push(rx.recv_timeout(Duration::from_nanos(left)).ok()?);
    }
    Some(Ok(v))
}

/// `-n`/`-k` of a reverse test: the sender stops at this many bytes or
/// blocks (0: no cap).
#[derive(Clone, Copy)]
struct Cap {
    bytes: u64,
    blocks: u64,
}

impl Cap {
    fn reached(&self, bytes: u64, blocks: u64) -> bool {
        (self.bytes > 0 && bytes >= self.bytes) || (self.blocks > 0 && blocks >= self.blocks)
    }
}

/// Reads a TCP stream the client sends on until it closes, or until it
/// has been quiet after TEST_END ([`Drain`]).
fn tcp_receive(mut s: TcpStream, len: usize, draining: &AtomicBool) -> Outcome {
    let mut buf = vec![0u8; len.max(1)];
    let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
    let mut o = Outcome {
        from: s.peer_addr().ok(),
        ..Outcome::default()
    };
    let mut drain = Drain::default();
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                o.count(n as u64, 0);
                drain.data(mono_ns());
            }
            Err(e) if transient(&e) => {}
            Err(_) => break,
        }
        if drain.over(draining.load(Ordering::Relaxed), mono_ns()) {
            break;
        }
    }
    o
}

/// Writes `len`-byte blocks on a TCP stream until `stop_at`, the cap or
/// `stop`; at `rate` bits/s when not 0.
fn tcp_send(
    mut s: TcpStream,
    len: usize,
    rate: u64,
    stop_at: u64,
    cap: Cap,
    stop: &AtomicBool,
) -> Outcome {
    let buf: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let _ = s.set_write_timeout(Some(Duration::from_millis(10)));
    let mut o = Outcome::default();
    let t0 = mono_ns();
    let mut blocks = 0u64;
    let mut off = 0usize;
    while !stop.load(Ordering::Relaxed) && mono_ns() < stop_at && !cap.reached(o.bytes, blocks) {
        if rate > 0 && off == 0 {
            // Absolute schedule: block k is due when k blocks' bits at
            // `rate` have elapsed.
            let due = t0 + (o.bytes as u128 * 8 * 1_000_000_000 / rate as u128) as u64;
            if due >= stop_at {
                break;
            }
            if due > mono_ns() {
                std::thread::sleep(Duration::from_nanos((due - mono_ns()).min(10_000_000)));
                continue;
            }
        }
        match s.write(&buf[off..]) {
            Ok(n) => {
                o.count(n as u64, 0);
                off += n;
                if off == buf.len() {
                    off = 0;
                    blocks += 1;
                }
            }
            Err(e) if transient(&e) => {}
            Err(_) => break,
        }
    }
    o.retransmits = sys::tcp_info(&s).map(|t| t.retransmits);
    // The client reads until its own end; our half stays open until then.
    let _ = s.shutdown(std::net::Shutdown::Write);
    o
}

/// Sends `len`-byte datagrams with iperf3's header to `to`, paced at
/// `rate` bits/s (as fast as the socket takes them when 0).
#[allow(clippy::too_many_arguments)]
fn udp_send(
    sock: &UdpSocket,
    to: SocketAddr,
    len: usize,
    rate: u64,
    wide: bool,
    stop_at: u64,
    cap: Cap,
    stop: &AtomicBool,
) -> Outcome {
    let mut buf: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let gap_ns = if rate > 0 {
        (len as u128 * 8 * 1_000_000_000 / rate as u128) as u64
    } else {
        0
    };
    let mut o = Outcome::default();
    let mut due = mono_ns();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) && due < stop_at && !cap.reached(o.bytes, seq) {
        wait_until(due);
        seq += 1;
        let now = realtime_ns();
        udp_header::write(&mut buf, now, seq, wide);
        // A full buffer drops this datagram; the client counts it lost.
        if let Ok(n) = sock.send_to(&buf, to) {
            o.count(n as u64, 1);
        }
        due += gap_ns;
    }
    o
}

/// What the UDP thread is told by sessions.
enum UdpCmd {
    /// The next `n` connect datagrams from `ip` open this session's streams.
    Expect {
        ip: IpAddr,
        n: usize,
        tx: mpsc::Sender<SocketAddr>,
    },
    Unexpect {
        ip: IpAddr,
    },
    /// Measure what arrives from `addr` as one stream.
    Measure {
        addr: SocketAddr,
        wide: bool,
        ip: IpVersion,
    },
    /// Hand back these streams' figures once they have been quiet for
    /// [`QUIET_NS`] (or at `deadline_ns`).
    Finish {
        addrs: Vec<SocketAddr>,
        deadline_ns: u64,
        tx: mpsc::Sender<Vec<(SocketAddr, UdpRx)>>,
    },
    /// The session is over: datagrams from these are foreign again.
    Forget {
        addrs: Vec<SocketAddr>,
    },
}

enum Entry {
    /// A stream opened by a connect datagram, not measured (we send on it,
    /// or its session is still opening).
    Open,
    Measured(Box<UdpRx>),
}

struct Finishing {
    addrs: Vec<SocketAddr>,
    asked_ns: u64,
    deadline_ns: u64,
    tx: mpsc::Sender<Vec<(SocketAddr, UdpRx)>>,
}

/// The shared UDP socket's receive loop: connect datagrams open streams,
/// the rest is measured per source address or counted as foreign.
fn udp_loop(
    sock: &UdpSocket,
    cmds: &mpsc::Receiver<UdpCmd>,
    stop: &AtomicBool,
    stats: &ServerStats,
) {
    use wirebench_engine::{enable_rx_timestamps, AsRawFd, RecvBatch};
    let fd = sock.as_raw_fd();
    // Kernel receive stamps where the system has them: the delay then
    // leaves out the time the datagram waited in the socket's queue.
    let kernel_ts = enable_rx_timestamps(fd);
    // One slot holds the largest datagram iperf3 sends.
    let mut batch = RecvBatch::new(proto::MAX_UDP_BLOCK as usize + 1);
    let mut t = UdpState {
        sock,
        cmds,
        stats,
        streams: HashMap::new(),
        expect: Vec::new(),
        finishing: Vec::new(),
    };
    let mut last_cmds = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Up to 64 datagrams a system call (recvmmsg on Linux).
        let got = batch.recv(fd).unwrap_or(0);
        let now = mono_ns();
        let wall_now = if got > 0 { realtime_ns() } else { 0 };
        for i in 0..got {
            let wall = batch.kernel_ts(i).filter(|_| kernel_ts).unwrap_or(wall_now);
            let Some(from) = batch.source(i) else {
                continue;
            };
            let foreign = batch.truncated(i);
            let d = batch.data(i);
            if foreign {
                stats.foreign.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            t.datagram(d, unmap_addr(from), now, wall);
        }
        // Commands and finishing streams are looked at every few ms, not
        // per datagram.
        if now.saturating_sub(last_cmds) < 2_000_000 {
            continue;
        }
        last_cmds = now;
        t.apply(now);
        let UdpState {
            streams, finishing, ..
        } = &mut t;
        finishing.retain(|f| {
            let quiet = f.addrs.iter().all(|a| match streams.get(a) {
                Some(Entry::Measured(rx)) => {
                    now.saturating_sub(rx.last_rx_mono.max(f.asked_ns)) >= QUIET_NS
                }
                _ => true,
            });
            if !quiet && now < f.deadline_ns {
                return true;
            }
            let out = f
                .addrs
                .iter()
                .filter_map(|a| match streams.remove(a) {
                    Some(Entry::Measured(mut rx)) => {
                        rx.finish();
                        Some((*a, *rx))
                    }
                    _ => None,
                })
                .collect();
            let _ = f.tx.send(out);
            false
        });
    }
}

type Expect = (IpAddr, usize, mpsc::Sender<SocketAddr>);

/// What the UDP thread keeps between datagrams.
struct UdpState<'a> {
    sock: &'a UdpSocket,
    cmds: &'a mpsc::Receiver<UdpCmd>,
    stats: &'a ServerStats,
    streams: HashMap<SocketAddr, Entry>,
    expect: Vec<Expect>,
    finishing: Vec<Finishing>,
}

impl UdpState<'_> {
    fn apply(&mut self, now: u64) {
        apply(
            self.cmds,
            &mut self.streams,
            &mut self.expect,
            &mut self.finishing,
            now,
        );
    }

    /// One datagram: a connect datagram opens a stream, the rest is
    /// measured per source address or counted as foreign.
    fn datagram(&mut self, d: &[u8], from: SocketAddr, now: u64, wall: u64) {
        let foreign = &self.stats.foreign;
        match self.streams.get_mut(&from) {
            Some(Entry::Measured(rx)) => {
                if !rx.record(d, now, wall) {
                    foreign.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(Entry::Open) => {
                if let Some(reply) = connect_msg(d).and_then(proto::udp_connect_reply) {
                    // A repeated connect datagram (the answer was lost).
                    let _ = self.sock.send_to(&reply, from);
                } else {
                    // Data before the session's Measure was taken in:
                    // the session sends it before TEST_START.
                    self.apply(now);
                    let recorded = match self.streams.get_mut(&from) {
                        Some(Entry::Measured(rx)) => rx.record(d, now, wall),
                        _ => false,
                    };
                    if !recorded {
                        foreign.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            None => {
                let reply = connect_msg(d).and_then(proto::udp_connect_reply);
                if reply.is_some() {
                    // The session says it expects streams just before
                    // it tells the client to open them.
                    self.apply(now);
                }
                let k = self.expect.iter().position(|(ip, _, _)| *ip == from.ip());
                match (reply, k) {
                    (Some(reply), Some(k)) => {
                        self.streams.insert(from, Entry::Open);
                        let _ = self.sock.send_to(&reply, from);
                        let (_, left, tx) = &mut self.expect[k];
                        let _ = tx.send(from);
                        *left -= 1;
                        if *left == 0 {
                            self.expect.swap_remove(k);
                        }
                    }
                    _ => {
                        foreign.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Takes in the sessions' commands.
fn apply(
    cmds: &mpsc::Receiver<UdpCmd>,
    streams: &mut HashMap<SocketAddr, Entry>,
    expect: &mut Vec<Expect>,
    finishing: &mut Vec<Finishing>,
    now: u64,
) {
    while let Ok(cmd) = cmds.try_recv() {
        match cmd {
            UdpCmd::Expect { ip, n, tx } => expect.push((ip, n, tx)),
            UdpCmd::Unexpect { ip } => expect.retain(|(i, _, _)| *i != ip),
            UdpCmd::Measure { addr, wide, ip } => {
                streams.insert(addr, Entry::Measured(Box::new(UdpRx::new(wide, ip))));
            }
            UdpCmd::Finish {
                addrs,
                deadline_ns,
                tx,
            } => finishing.push(Finishing {
                addrs,
                asked_ns: now,
                deadline_ns,
                tx,
            }),
            UdpCmd::Forget { addrs } => {
                for a in addrs {
                    streams.remove(&a);
                }
            }
        }
    }
}

fn connect_msg(d: &[u8]) -> Option<[u8; 4]> {
    d.try_into().ok()
}

/// The session as a `wirebench.result/1` document: one flow per stream,
/// "forward" for what the client sent (measured here), "reverse" for what
/// we sent (the client's figures from its results).
#[allow(clippy::too_many_arguments)]
fn build_doc(
    ask: &Ask,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    started_real: u64,
    outcomes: &[(usize, bool, Outcome)],
    theirs: &Results,
    elapsed_s: f64,
    cpu: CpuTime,
) -> ResultDoc {
    let p = &ask.params;
    let peer = unmap_addr(peer);
    let local = local.map(unmap_addr);
    let local_ip = local.map_or(String::new(), |a| a.ip().to_string());
    let mut flows = Vec::new();
    let mut total = Total {
        lost: Some(0),
        ..Total::default()
    };
    let udp = ask.transport == Transport::Udp;
    for (i, sends, o) in outcomes {
        let id = proto::stream_id(*i);
        let client = theirs.streams.iter().find(|s| s.id == id);
        let requested = Requested {
            rate_pps: (udp && p.bandwidth > 0).then(|| p.bandwidth as f64 / (8.0 * p.len as f64)),
            payload_bytes: p.len as f64,
            model: format!(
                "iperf3 client {}: -l {}{}",
                p.client_version.as_deref().unwrap_or("?"),
                p.len,
                if p.bandwidth > 0 {
                    format!(" -b {}", p.bandwidth)
                } else {
                    String::new()
                }
            ),
            stop: if p.time > 0 {
                format!("duration {} ms", p.time * 1000)
            } else if p.num > 0 {
                format!("bytes {}", p.num)
            } else {
                format!("blocks {}", p.blockcount)
            },
            ..Requested::default()
        };
        let mut f = FlowResult {
            id: id as u16,
            direction: if *sends {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            transport: ask.transport,
            ip_version: ip_version(peer.ip()),
            src: if *sends {
                local_ip.clone()
            } else {
                peer.ip().to_string()
            },
            dst: if *sends {
                peer.ip().to_string()
            } else {
                local_ip.clone()
            },
            mtu: ASSUMED_MTU,
            requested,
            ..FlowResult::default()
        };
        let span = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9;
        if *sends {
            let dur = span(o.first_ns, o.last_ns);
            f.sent = SendSummary {
                packets: o.packets,
                bytes: o.bytes,
                duration_s: dur,
                rate_pps: if dur > 0.0 {
                    o.packets as f64 / dur
                } else {
                    0.0
                },
                throughput_bps: Throughput {
                    payload: if dur > 0.0 {
                        o.bytes as f64 * 8.0 / dur
                    } else {
                        0.0
                    },
                    ..Throughput::default()
                },
                ..SendSummary::default()
            };
            // What the client says it got is its figure, not ours.
            if let Some(c) = client {
                f.received.counts.bytes = c.bytes;
                f.received.counts.packets = (c.packets - c.errors).max(0) as u64;
                f.received.counts.unique = f.received.counts.packets;
                f.received.counts.lost = Some(c.errors.max(0) as u64);
                f.jitter_s.rfc3550 = c.jitter;
            }
            total.sent_packets += o.packets;
        } else {
            if let Some(c) = client {
                f.sent.bytes = c.bytes;
                f.sent.packets = c.packets.max(0) as u64;
            }
            f.received.from = o.from.map(|a| unmap_addr(a).to_string());
            match &o.rx {
                Some(rx) => {
                    rx.fill(&mut f);
                    total.delay_max_s = total.delay_max_s.max(rx.summary.delay_s.max);
                }
                None => {
                    let dur = span(o.first_ns, o.last_ns);
                    f.received.counts.bytes = o.bytes;
                    f.received.counts.lost = (!udp).then_some(0);
                    f.throughput_bps.payload = if dur > 0.0 {
                        o.bytes as f64 * 8.0 / dur
                    } else {
                        0.0
                    };
                }
            }
            total.sent_packets += f.sent.packets;
            total.received_packets += f.received.counts.unique;
            total.lost = match (total.lost, f.received.counts.lost) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            total.throughput_bps.payload += f.throughput_bps.payload;
        }
        flows.push(f);
    }
    total.loss_ratio = total
        .lost
        .map(|l| l as f64 / (total.received_packets + l).max(1) as f64);
    let mut doc = crate::doc_shell(
        started_real,
        "unknown: iperf3 clients stamp datagrams without an offset exchange; \
                     delays are our receive time minus the client's stamp on whichever of our clocks \
                     (wall or monotonic) the first stamp was closer to, so only their variation \
                     (jitter) is comparable across hosts",
    );
    doc.command = Some(format!(
        "iperf3 client {} from {peer}: {} {} stream(s){}{} for {:.1} s",
        p.client_version.as_deref().unwrap_or("?"),
        p.parallel,
        ask.transport,
        if p.reverse { ", -R" } else { "" },
        if p.bidirectional { ", --bidir" } else { "" },
        elapsed_s
    ));
    doc.flows = flows;
    doc.total = total;
    doc.receiver.host = doc.host.clone();
    doc.cpu.receiver = cpu;
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> Params {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn what_cannot_map_is_refused_with_iperf3_error_numbers() {
        let max = Duration::from_secs(60);
        for (json, code) in [
            (
                r#"{"sctp":true,"parallel":1,"len":100,"time":1}"#,
                errno::NO_SCTP,
            ),
            (
                r#"{"tcp":true,"parallel":1,"len":100,"time":1,"authtoken":"abc"}"#,
                errno::AUTH_FAILED,
            ),
            (
                r#"{"tcp":true,"parallel":1,"len":100,"time":61}"#,
                errno::DURATION,
            ),
            (
                r#"{"tcp":true,"parallel":129,"len":100,"time":1}"#,
                errno::TOO_MANY_STREAMS,
            ),
            (
                r#"{"udp":true,"parallel":1,"len":11,"time":1}"#,
                errno::BLOCK_SIZE,
            ),
        ] {
            assert_eq!(
                check(params(json), max).err().map(|e| e.0),
                Some(code),
                "{json}"
            );
        }
        let bidir = check(
            params(r#"{"tcp":true,"parallel":2,"len":100,"time":1,"bidirectional":true}"#),
            max,
        )
        .ok()
        .map(|a| (a.forward, a.reverse));
        assert_eq!(bidir, Some((2, 2)));
    }
}
