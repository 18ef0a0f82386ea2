//! `wirebench send --iperf3`: wirebench's traffic models (constant,
//! Poisson, VoIP, ...) sent to an unmodified `iperf3 -s`, one iperf3
//! stream per flow, with iperf3's UDP header on every datagram; the
//! result holds wirebench's own send figures beside what the iperf3
//! server measured (bytes, datagrams received, loss, RFC 3550 jitter).
//! An iperf3 server reports no per-packet delay, so the delay figures of
//! what we send stay empty and `clock.method` says why. With `-R` or
//! `--bidir` the server sends constant streams (`-b`, `-l`) that we
//! measure per datagram from its own send stamps, the clock offset
//! unknown.

use crate::measure::UdpRx;
use crate::proto::{self, udp_header, Params, Results, Retransmits, State, StreamResult};
use crate::Iperf3Error;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirebench_engine::clock::{mono_ns, realtime_ns, wait_until};
use wirebench_engine::plan::{clip_to_budget, FlowPlan, SessionPlan, Stop};
use wirebench_engine::result::{CpuTime, FlowResult, Received, ResultDoc, Total};
use wirebench_engine::sys::CpuClock;
use wirebench_model::{IdtModel, SizeModel};
use wirebench_stats::{FlowConfig, IpVersion, SendAccumulator, SendSummary, Throughput};
use wirebench_wire::{Direction, MeterMode, Transport};

/// Time the server gets for each step of the exchange.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
use crate::measure::{transient, Drain, ASSUMED_MTU};

/// What the iperf3 server said about the test, beside the document.
#[derive(Debug, Clone)]
pub struct ServerView {
    /// The server's results message as it sent it.
    pub results: Results,
    /// Datagrams (UDP) the server received, all streams.
    pub packets_received: u64,
    /// Bytes the server received, all streams.
    pub bytes_received: u64,
}

/// Checks that `plan` is something an iperf3 server can take.
pub fn check(plan: &SessionPlan) -> Result<Transport, Iperf3Error> {
    let bad = |m: &str| Err(Iperf3Error::BadPlan(format!("--iperf3: {m}")));
    let Some(first) = plan.flows.first() else {
        return bad("no flow to send");
    };
    let transport = first.transport;
    if !matches!(transport, Transport::Udp | Transport::Tcp) {
        return bad("an iperf3 server takes UDP or TCP (-T udp|tcp)");
    }
    if plan.flows.iter().any(|f| f.transport != transport) {
        return bad("every flow must use one transport (iperf3 runs a test over one)");
    }
    if plan
        .flows
        .iter()
        .any(|f| f.meter_in(plan) != MeterMode::Owd)
    {
        return bad("one-way flows only (no -m rtt: an iperf3 server does not reflect)");
    }
    let (fwd, rev) = split(plan);
    if !(fwd.is_empty() || rev.is_empty() || fwd.len() == rev.len()) {
        return bad("flows of one direction, or as many forward as reverse (iperf3 --bidir runs -P streams each way)");
    }
    if rev.len() > proto::MAX_STREAMS as usize || fwd.len() > proto::MAX_STREAMS as usize {
        return bad(&format!(
            "at most {} flows each way (iperf3's limit of parallel streams)",
            proto::MAX_STREAMS
        ));
    }
    if let Some(first) = rev.first() {
        let c = served(first)?;
        for f in &rev {
            if served(f)? != c {
                return bad("-R/--bidir: every reverse flow must have the same rate, size and duration (iperf3 sets them once per test)");
            }
        }
        let fwd_max = fwd.iter().map(|f| f.spec.max_payload()).max().unwrap_or(0);
        if fwd_max > c.size {
            return bad(&format!(
                "--bidir: forward sizes up to {fwd_max} B, but the server reads blocks of the reverse size {} B",
                c.size
            ));
        }
    }
    if plan.key.is_some() {
        return bad("an iperf3 server has no wirebench key (--key-file, WIREBENCH_KEY)");
    }
    if plan.flows.iter().any(|f| f.opts.zerocopy == Some(true)) {
        return bad("--zerocopy is for the engine's TCP flows to a wirebench receiver; iperf3's own -Z is sendfile");
    }
    if plan.log.is_some() {
        return bad("-l: the per-packet log needs a wirebench receiver");
    }
    let max = plan
        .flows
        .iter()
        .map(|f| f.spec.max_payload())
        .max()
        .unwrap_or(0);
    if transport == Transport::Udp && max > proto::MAX_UDP_BLOCK {
        return bad(&format!(
            "payloads up to {max} B: a UDP datagram carries at most {} B",
            proto::MAX_UDP_BLOCK
        ));
    }
    Ok(transport)
}

/// The flows we send and the flows the server sends, in plan order.
fn split(plan: &SessionPlan) -> (Vec<&FlowPlan>, Vec<&FlowPlan>) {
    plan.flows
        .iter()
        .partition(|f| f.direction == Direction::Forward)
}

/// What an iperf3 server can send for a reverse flow: one block size at a
/// constant rate (or as fast as it can), for a time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Served {
    size: u32,
    /// Bits per second of payload; 0: unpaced (`--max`).
    bps: u64,
    ms: u64,
}

fn served(f: &FlowPlan) -> Result<Served, Iperf3Error> {
    let bad = |m: &str| Err(Iperf3Error::BadPlan(format!("--iperf3 -R/--bidir: {m}")));
    let s = &f.spec;
    let SizeModel::Constant { bytes } = s.size else {
        return bad("the server sends one block size: give -c BYTES");
    };
    let bps = match s.idt {
        IdtModel::Constant { pps } => (pps * f64::from(bytes) * 8.0).round() as u64,
        IdtModel::Max => 0,
        IdtModel::Random(_) => {
            return bad("the server paces at a constant rate: give -C PPS, --rate or --max")
        }
    };
    if s.burst.is_some() || s.packetize.is_some() || s.transfer_bytes.is_some() || s.app.is_some() {
        return bad("the server plays no application model, bursts or transfers");
    }
    if s.start_delay_ms > 0 {
        return bad("-d: the server starts its streams with the test");
    }
    let Stop::DurationMs(ms) = f.stop else {
        return bad("the server's streams run for a time: give -t MS (not -z or -k)");
    };
    Ok(Served {
        size: bytes,
        bps,
        ms,
    })
}

/// Runs `plan` against the iperf3 server at `addr`; `cancel` (a Ctrl-C
/// flag) stops the flows early.
pub fn run(
    plan: &SessionPlan,
    addr: SocketAddr,
    cancel: Option<&'static AtomicBool>,
) -> Result<(ResultDoc, ServerView), Iperf3Error> {
    let transport = check(plan)?;
    let udp = transport == Transport::Udp;
    let (fwd, rev) = split(plan);
    let rev_served = rev.first().map(|f| served(f)).transpose()?;
    let mut ctl = TcpStream::connect_timeout(&addr, STEP_TIMEOUT)
        .map_err(|e| Iperf3Error::io(format!("cannot connect to {addr}"), e))?;
    let _ = ctl.set_nodelay(true);
    ctl.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(Iperf3Error::control)?;
    let _ = ctl.set_write_timeout(Some(STEP_TIMEOUT));
    let cookie = proto::new_cookie();
    ctl.write_all(&cookie).map_err(Iperf3Error::control)?;
    expect(&mut ctl, State::ParamExchange)?;
    let len = plan
        .flows
        .iter()
        .map(|f| f.spec.max_payload())
        .max()
        .unwrap_or(0)
        .max(if udp {
            udp_header::len(false) as u32
        } else {
            1
        });
    let longest_ms = plan
        .flows
        .iter()
        .map(|f| match f.stop {
            Stop::DurationMs(ms) => ms + f.spec.start_delay_ms,
            _ => 0,
        })
        .max()
        .unwrap_or(0);
    let params = Params {
        tcp: !udp,
        udp,
        // The server only shows it (and bounds the test by it): our
        // TEST_END ends the test, to the millisecond.
        time: longest_ms.div_ceil(1000),
        parallel: fwd.len().max(rev.len()) as u32,
        reverse: fwd.is_empty(),
        bidirectional: !fwd.is_empty() && !rev.is_empty(),
        len,
        // Per stream: what the server sends at; else only shown.
        bandwidth: match rev_served {
            Some(c) => c.bps,
            None => fwd
                .iter()
                .filter_map(|f| {
                    f.spec
                        .nominal_rate_pps()
                        .map(|r| r * f.spec.nominal_payload_bytes() * 8.0)
                })
                .sum::<f64>() as u64,
        },
        pacing_timer: 1000,
        client_version: Some(format!("wirebench {}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    };
    proto::write_json(&mut ctl, &params)?;
    expect(&mut ctl, State::CreateStreams)?;
    // iperf3's order: the streams we send on first, then those we receive.
    let mut socks = Vec::with_capacity(plan.flows.len());
    for _ in 0..plan.flows.len() {
        socks.push(open_stream(addr, udp, &cookie)?);
    }
    let mut rev_socks = socks.split_off(fwd.len());
    for s in &mut rev_socks {
        if let StreamSock::Udp(u) = s {
            u.set_read_timeout(Some(Duration::from_millis(10)))
                .map_err(Iperf3Error::control)?;
        }
    }
    expect(&mut ctl, State::TestStart)?;
    expect(&mut ctl, State::TestRunning)?;
    let cpu0 = CpuTime::process();
    let started_real = realtime_ns();
    let t0 = mono_ns() + 1_000_000;
    let draining = AtomicBool::new(false);
    let stopped =
        |now: u64, end: u64| now >= end || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    let (sent, got, elapsed_s, ended) = std::thread::scope(|s| {
        let draining = &draining;
        let senders: Vec<_> = fwd
            .iter()
            .zip(socks)
            .map(|(f, sock)| s.spawn(move || send_flow(f, sock, t0, cancel)))
            .collect();
        let receivers: Vec<_> = rev_socks
            .into_iter()
            .map(|sock| s.spawn(move || receive_stream(sock, len as usize, draining)))
            .collect();
        let sent: Vec<FlowSent> = senders
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| FlowSent::failed("sender thread panicked"))
            })
            .collect();
        if let Some(c) = rev_served {
            let end = t0 + c.ms * 1_000_000;
            while !stopped(mono_ns(), end) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let elapsed_s = (mono_ns().saturating_sub(t0)) as f64 / 1e9;
        // An iperf3 server stops reading its streams at TEST_END: the last
        // datagrams get the plan's linger time to land first (RFC 2544's
        // 2 s by default, as for a wirebench receiver).
        if !fwd.is_empty() {
            std::thread::sleep(Duration::from_millis(plan.linger_ms));
        }
        let ended = proto::write_state(&mut ctl, State::TestEnd);
        draining.store(true, Ordering::Relaxed);
        let got: Vec<Got> = receivers
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        (sent, got, elapsed_s, ended)
    });
    ended?;
    expect(&mut ctl, State::ExchangeResults)?;
    let ours = Results {
        sender_has_retransmits: Retransmits(None),
        streams: sent
            .iter()
            .map(|f| StreamResult {
                bytes: f.acc.summary().bytes,
                packets: f.acc.packets() as i64,
                ..StreamResult::default()
            })
            .chain(got.iter().map(|g| match &g.rx {
                Some(rx) => StreamResult {
                    bytes: rx.bytes,
                    packets: rx.highest as i64,
                    errors: rx.summary.counts.lost.unwrap_or(0) as i64,
                    jitter: rx.summary.jitter_s.rfc3550,
                    ..StreamResult::default()
                },
                None => StreamResult {
                    bytes: g.bytes,
                    ..StreamResult::default()
                },
            }))
            .enumerate()
            .map(|(i, r)| StreamResult {
                id: proto::stream_id(i),
                retransmits: Retransmits(None),
                end_time: elapsed_s,
                ..r
            })
            .collect(),
        ..Results::default()
    };
    proto::write_json(&mut ctl, &ours)?;
    let theirs: Results = proto::read_json(&mut ctl, "server results")?;
    // DISPLAY_RESULTS, then our IPERF_DONE; a server that closes first
    // has already given its figures.
    if let Ok(State::DisplayResults) = proto::read_state(&mut ctl) {
        let _ = proto::write_state(&mut ctl, State::IperfDone);
    }
    let cpu = CpuTime::process().since(cpu0).share(elapsed_s.max(1e-3));
    let doc = build_doc(
        plan,
        addr,
        ctl.local_addr().ok(),
        started_real,
        (&sent, &got),
        &theirs,
        cpu,
        transport,
    );
    let forward = || {
        doc.flows
            .iter()
            .filter(|f| f.direction == Direction::Forward)
    };
    let view = ServerView {
        packets_received: forward().map(|f| f.received.counts.packets).sum(),
        bytes_received: forward().map(|f| f.received.counts.bytes).sum(),
        results: theirs,
    };
    if let Some(e) = sent.iter().find_map(|f| f.error.clone()) {
        return Err(Iperf3Error::Protocol(format!("a flow failed: {e}")));
    }
    Ok((doc, view))
}

/// What we measured of a stream the server sent.
#[derive(Default)]
struct Got {
    /// UDP: per datagram.
    rx: Option<UdpRx>,
    /// Payload bytes (TCP: all of the stream).
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
}

/// Reads a stream the server sends until it closes, or until it has been
/// quiet after TEST_END ([`Drain`]).
fn receive_stream(sock: StreamSock, len: usize, draining: &AtomicBool) -> Got {
    let mut buf = vec![0u8; len.max(udp_header::len(true)) + 1];
    let mut g = Got::default();
    let mut drain = Drain::default();
    let ip = match &sock {
        StreamSock::Udp(s) => s.peer_addr(),
        StreamSock::Tcp(s) => s.peer_addr(),
    }
    .map_or(IpVersion::V4, |a| {
        if a.is_ipv6() {
            IpVersion::V6
        } else {
            IpVersion::V4
        }
    });
    if let StreamSock::Udp(_) = sock {
        g.rx = Some(UdpRx::new(false, ip));
    }
    if let StreamSock::Tcp(s) = &sock {
        let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
    }
    loop {
        let r = match &sock {
            StreamSock::Udp(s) => s.recv(&mut buf),
            StreamSock::Tcp(s) => {
                let mut r: &TcpStream = s;
                r.read(&mut buf)
            }
        };
        match r {
            Ok(0) if matches!(sock, StreamSock::Tcp(_)) => break,
            Ok(n) => {
                let now = mono_ns();
                let wall = realtime_ns();
                // A datagram without iperf3's header is not data.
                let data = match g.rx.as_mut() {
                    Some(rx) => rx.record(&buf[..n], now, wall),
                    None => {
                        g.bytes += n as u64;
                        true
                    }
                };
                if data {
                    if g.first_ns == 0 {
                        g.first_ns = now;
                    }
                    g.last_ns = now;
                    drain.data(now);
                }
            }
            Err(e) if transient(&e) => {}
            // A refused UDP port (ICMP) or a reset: the stream is over.
            Err(_) => break,
        }
        if drain.over(draining.load(Ordering::Relaxed), mono_ns()) {
            break;
        }
    }
    if let Some(rx) = g.rx.as_mut() {
        rx.finish();
        g.bytes = rx.bytes;
    }
    g
}

/// Reads the next state and insists on `want`; the server's refusals are
/// told in iperf3's words.
fn expect(ctl: &mut TcpStream, want: State) -> Result<(), Iperf3Error> {
    match proto::read_state(ctl)? {
        s if s == want => Ok(()),
        State::AccessDenied => Err(Iperf3Error::Refused(
            "the server is busy running a test (iperf3 serves one client at a time)".into(),
        )),
        State::ServerError => {
            let mut e = [0u8; 8];
            let _ = ctl.read_exact(&mut e);
            let code = i32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            Err(Iperf3Error::Refused(format!("iperf3 error number {code}")))
        }
        other => Err(Iperf3Error::Protocol(format!(
            "expected {want:?}, the server sent {other:?}"
        ))),
    }
}

enum StreamSock {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

fn open_stream(addr: SocketAddr, udp: bool, cookie: &[u8]) -> Result<StreamSock, Iperf3Error> {
    let err = |e| Iperf3Error::io(format!("opening a stream to {addr}"), e);
    if !udp {
        let mut s = TcpStream::connect_timeout(&addr, STEP_TIMEOUT).map_err(err)?;
        s.write_all(cookie).map_err(err)?;
        return Ok(StreamSock::Tcp(s));
    }
    let local: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(local).map_err(err)?;
    s.connect(addr).map_err(err)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(err)?;
    let msg = if cfg!(target_endian = "little") {
        proto::UDP_CONNECT_LE
    } else {
        proto::UDP_CONNECT_BE
    };
    // The connect datagram may be lost like any other: a few tries.
    for _ in 0..5 {
        s.send(&msg).map_err(err)?;
        let mut r = [0u8; 4];
        if let Ok(4) = s.recv(&mut r) {
            if proto::udp_connect_reply(msg) == Some(r) {
                return Ok(StreamSock::Udp(s));
            }
        }
    }
    Err(Iperf3Error::Protocol(format!(
        "the iperf3 server at {addr} did not answer the UDP stream's connect datagram"
    )))
}

struct FlowSent {
    acc: SendAccumulator,
    error: Option<String>,
}

impl FlowSent {
    fn failed(why: &str) -> FlowSent {
        FlowSent {
            acc: SendAccumulator::new(flow_config(Transport::Udp, IpVersion::V4)),
            error: Some(why.into()),
        }
    }
}

fn flow_config(transport: Transport, ip: IpVersion) -> FlowConfig {
    FlowConfig {
        transport,
        ip,
        mtu: ASSUMED_MTU,
        interval_ns: None,
    }
}

/// One flow on its stream, on the absolute schedule of its model.
fn send_flow(f: &FlowPlan, sock: StreamSock, t0: u64, cancel: Option<&AtomicBool>) -> FlowSent {
    let ip = match &sock {
        StreamSock::Udp(s) => s.peer_addr().map(|a| a.is_ipv6()),
        StreamSock::Tcp(s) => s.peer_addr().map(|a| a.is_ipv6()),
    };
    let ipv = if ip.unwrap_or(false) {
        IpVersion::V6
    } else {
        IpVersion::V4
    };
    let mut out = FlowSent {
        acc: SendAccumulator::new(flow_config(f.transport, ipv)),
        error: None,
    };
    let mut gen = match f.spec.generator(f.seed) {
        Ok(g) => g,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let hdr = udp_header::len(false) as u32;
    let max = f.spec.max_payload().max(hdr) as usize;
    let mut buf = vec![0u8; max];
    f.spec.payload.fill(&mut buf, f.seed);
    let start = t0 + f.spec.start_delay_ms * 1_000_000;
    let mut due = start;
    let mut seq = 0u64;
    let mut bytes = 0u64;
    let mut tcp_sock = match &sock {
        StreamSock::Tcp(s) => Some(s),
        StreamSock::Udp(_) => None,
    };
    loop {
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            break;
        }
        let d = gen.next();
        let size = match f.stop {
            // `--max` never moves `due`: the clock ends its flows.
            Stop::DurationMs(ms) if due.max(mono_ns()) - start >= ms * 1_000_000 => break,
            Stop::Packets(n) if seq >= n => break,
            Stop::KBytes(k) => {
                let left = (k * 1024).saturating_sub(bytes);
                if left == 0 {
                    break;
                }
                clip_to_budget(d.size, left, 1)
            }
            _ => d.size,
        };
        // iperf3's header must fit: smaller model sizes are sent as 12 B.
        let size = match sock {
            StreamSock::Udp(_) => size.max(hdr),
            StreamSock::Tcp(_) => size.max(1),
        } as usize;
        let size = size.min(max);
        let now = wait_until(due);
        seq += 1;
        let sent = match (&sock, tcp_sock.as_mut()) {
            (StreamSock::Udp(s), _) => {
                udp_header::write(&mut buf, realtime_ns(), seq, false);
                s.send(&buf[..size]).map(|_| ())
            }
            (_, Some(s)) => s.write_all(&buf[..size]),
            _ => Ok(()),
        };
        match sent {
            Ok(()) => {
                out.acc.record_sent(due, now, size as u32);
                bytes += size as u64;
            }
            Err(e) if matches!(sock, StreamSock::Udp(_)) => {
                // A refused or full socket: this datagram is not sent.
                let _ = e;
                out.acc.record_not_sent(1);
            }
            Err(e) => {
                out.error = Some(format!("TCP stream: {e}"));
                break;
            }
        }
        due += d.gap_ns;
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn build_doc(
    plan: &SessionPlan,
    addr: SocketAddr,
    local: Option<SocketAddr>,
    started_real: u64,
    (sent, got): (&[FlowSent], &[Got]),
    theirs: &Results,
    cpu: CpuTime,
    transport: Transport,
) -> ResultDoc {
    let mut total = Total {
        lost: Some(0),
        ..Total::default()
    };
    let mut flows = Vec::new();
    let (mut nf, mut nr) = (0, 0);
    // Per-datagram delays exist only for the streams the server sent.
    let mut delay_sum = 0.0;
    for (i, f) in plan.flows.iter().enumerate() {
        if f.direction == Direction::Reverse {
            let Some(g) = got.get(nr) else { continue };
            let id = proto::stream_id(sent.len() + nr);
            nr += 1;
            let r = reverse_flow(
                (i + 1) as u16,
                f,
                g,
                theirs.streams.iter().find(|r| r.id == id),
                (addr, local),
                transport,
            );
            total.sent_packets += r.sent.packets;
            total.received_packets += r.received.counts.unique;
            total.lost = total.lost.zip(r.received.counts.lost).map(|(a, b)| a + b);
            total.throughput_bps.payload += r.throughput_bps.payload;
            total.delay_max_s = total.delay_max_s.max(r.delay_s.max);
            delay_sum += r.delay_s.mean * r.received.counts.unique as f64;
            flows.push(r);
            continue;
        }
        let Some(s) = sent.get(nf) else { continue };
        let id = proto::stream_id(nf);
        nf += 1;
        let sum = s.acc.summary();
        let server = theirs.streams.iter().find(|r| r.id == id);
        let mut r = FlowResult {
            id: (i + 1) as u16,
            direction: Direction::Forward,
            transport,
            ip_version: if addr.is_ipv6() {
                IpVersion::V6
            } else {
                IpVersion::V4
            },
            src: local.map_or(String::new(), |a| a.ip().to_string()),
            dst: addr.ip().to_string(),
            mtu: ASSUMED_MTU,
            requested: f.requested(),
            sent: sum.clone(),
            ..FlowResult::default()
        };
        if let Some(srv) = server {
            let received = match transport {
                // The server counts the highest sequence number and the gaps below it.
                Transport::Udp => (srv.packets - srv.errors).max(0) as u64,
                _ => 0,
            };
            let lost = match transport {
                Transport::Udp => Some(sum.packets.saturating_sub(received)),
                _ => Some(0),
            };
            r.received = Received {
                counts: wirebench_stats::RecvCounts {
                    packets: received,
                    unique: received,
                    bytes: srv.bytes,
                    lost,
                    loss_ratio: lost.map(|l| l as f64 / sum.packets.max(1) as f64),
                    ..Default::default()
                },
                ..Received::default()
            };
            r.jitter_s.rfc3550 = srv.jitter;
            // The server's span is its whole test, our linger included:
            // the rate is over our sending span. The server gives payload
            // bytes; the other layers carry the same datagrams, so they
            // scale as what was sent did.
            let span = sum.duration_s;
            let payload = if span > 0.0 {
                srv.bytes as f64 * 8.0 / span
            } else {
                0.0
            };
            let k = |layer: f64| {
                if sum.throughput_bps.payload > 0.0 {
                    layer / sum.throughput_bps.payload * payload
                } else {
                    0.0
                }
            };
            r.throughput_bps = Throughput {
                payload,
                ip: k(sum.throughput_bps.ip),
                ethernet: k(sum.throughput_bps.ethernet),
                wire: k(sum.throughput_bps.wire),
            };
            total.received_packets += received;
            total.lost = total.lost.zip(lost).map(|(a, b)| a + b);
            total.throughput_bps.payload += r.throughput_bps.payload;
        } else {
            total.lost = None;
        }
        total.sent_packets += sum.packets;
        total.not_sent += sum.not_sent;
        flows.push(r);
    }
    total.loss_ratio = total
        .lost
        .map(|l| l as f64 / total.sent_packets.max(1) as f64);
    let measured: u64 = flows
        .iter()
        .filter(|f| f.direction == Direction::Reverse)
        .map(|f| f.received.counts.unique)
        .sum();
    if measured > 0 {
        total.delay_mean_s = delay_sum / measured as f64;
    }
    let rev_udp = transport == Transport::Udp && !got.is_empty();
    let mut doc = crate::doc_shell(
        started_real,
        match (rev_udp, sent.is_empty()) {
            (false, _) => NO_DELAY,
            (true, true) => STAMP_DELAY,
            (true, false) => BOTH_DELAYS,
        },
    );
    doc.command = plan.command.clone();
    doc.flows = flows;
    doc.total = total;
    doc.cpu.sender = cpu;
    doc
}

const NO_DELAY: &str =
    "none: an iperf3 server reports bytes, datagrams, loss and RFC 3550 jitter, \
     not per-packet delay; delay figures are not measured";
const STAMP_DELAY: &str =
    "unknown: the iperf3 server stamps its datagrams without an offset exchange; \
     delays are our receive time minus its stamp on whichever of our clocks (wall or monotonic) \
     the first stamp was closer to, so only their variation (jitter) is comparable across hosts";
const BOTH_DELAYS: &str = "forward flows: none (an iperf3 server reports no per-packet delay); \
     reverse flows: unknown offset (our receive time minus the server's stamp on whichever of \
     our clocks the first stamp was closer to; only the variation is comparable across hosts)";

/// A flow the server sent: what it says it sent, what we measured.
fn reverse_flow(
    id: u16,
    f: &FlowPlan,
    g: &Got,
    server: Option<&StreamResult>,
    (addr, local): (SocketAddr, Option<SocketAddr>),
    transport: Transport,
) -> FlowResult {
    let mut r = FlowResult {
        id,
        direction: Direction::Reverse,
        transport,
        ip_version: if addr.is_ipv6() {
            IpVersion::V6
        } else {
            IpVersion::V4
        },
        src: addr.ip().to_string(),
        dst: local.map_or(String::new(), |a| a.ip().to_string()),
        mtu: ASSUMED_MTU,
        requested: f.requested(),
        ..FlowResult::default()
    };
    if let Some(srv) = server {
        let span = srv.end_time - srv.start_time;
        r.sent = SendSummary {
            packets: srv.packets.max(0) as u64,
            bytes: srv.bytes,
            duration_s: span.max(0.0),
            rate_pps: if span > 0.0 {
                srv.packets.max(0) as f64 / span
            } else {
                0.0
            },
            ..SendSummary::default()
        };
    }
    r.received.from = Some(addr.to_string());
    match &g.rx {
        Some(rx) => rx.fill(&mut r),
        None => {
            let span = g.last_ns.saturating_sub(g.first_ns) as f64 / 1e9;
            r.received.counts.bytes = g.bytes;
            r.received.counts.lost = Some(0);
            r.throughput_bps.payload = if span > 0.0 {
                g.bytes as f64 * 8.0 / span
            } else {
                0.0
            };
        }
    }
    r
}
