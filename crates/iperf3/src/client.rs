//! `wirebench send --iperf3`: wirebench's traffic models (constant,
//! Poisson, VoIP, ...) sent to an unmodified `iperf3 -s`, one iperf3
//! stream per flow, with iperf3's UDP header on every datagram; the
//! result holds wirebench's own send figures beside what the iperf3
//! server measured (bytes, datagrams received, loss, RFC 3550 jitter).
//! An iperf3 server reports no per-packet delay, so the document's delay
//! figures stay empty and `clock.method` says why.

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
use wirebench_stats::{FlowConfig, IpVersion, SendAccumulator, Throughput};
use wirebench_wire::{Direction, MeterMode, Transport};

/// Time the server gets for each step of the exchange.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Path MTU assumed for the framing model of the send figures.
const ASSUMED_MTU: u32 = 1500;

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
    if plan.flows.len() > proto::MAX_STREAMS as usize {
        return bad(&format!(
            "at most {} flows (iperf3's limit of parallel streams)",
            proto::MAX_STREAMS
        ));
    }
    if plan
        .flows
        .iter()
        .any(|f| f.direction != Direction::Forward || f.meter_in(plan) != MeterMode::Owd)
    {
        return bad("only forward one-way flows (no -R, --bidir or -m rtt: an iperf3 server neither reflects nor plays a model)");
    }
    if plan.key.is_some() {
        return bad("an iperf3 server has no wirebench key (--key-file, WIREBENCH_KEY)");
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

/// Runs `plan` against the iperf3 server at `addr`; `cancel` (a Ctrl-C
/// flag) stops the flows early.
pub fn run(
    plan: &SessionPlan,
    addr: SocketAddr,
    cancel: Option<&'static AtomicBool>,
) -> Result<(ResultDoc, ServerView), Iperf3Error> {
    let transport = check(plan)?;
    let udp = transport == Transport::Udp;
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
        // The server only shows it; a finite flow (-z, -k) ends the test
        // itself by TEST_END.
        time: longest_ms.div_ceil(1000),
        parallel: plan.flows.len() as u32,
        len,
        bandwidth: plan
            .flows
            .iter()
            .filter_map(|f| {
                f.spec
                    .nominal_rate_pps()
                    .map(|r| r * f.spec.nominal_payload_bytes() * 8.0)
            })
            .sum::<f64>() as u64,
        pacing_timer: 1000,
        client_version: Some(format!("wirebench {}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    };
    proto::write_json(&mut ctl, &params)?;
    expect(&mut ctl, State::CreateStreams)?;
    let mut socks = Vec::with_capacity(plan.flows.len());
    for _ in &plan.flows {
        socks.push(open_stream(addr, udp, &cookie)?);
    }
    expect(&mut ctl, State::TestStart)?;
    expect(&mut ctl, State::TestRunning)?;
    let cpu0 = CpuTime::process();
    let started_real = realtime_ns();
    let t0 = mono_ns() + 1_000_000;
    let sent: Vec<FlowSent> = std::thread::scope(|s| {
        let hs: Vec<_> = plan
            .flows
            .iter()
            .zip(socks)
            .map(|(f, sock)| s.spawn(move || send_flow(f, sock, t0, cancel)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| FlowSent::failed("sender thread panicked"))
            })
            .collect()
    });
    let elapsed_s = (mono_ns().saturating_sub(t0)) as f64 / 1e9;
    // An iperf3 server stops reading its streams at TEST_END: the last
    // datagrams get the plan's linger time to land first (RFC 2544's 2 s
    // by default, as for a wirebench receiver).
    std::thread::sleep(Duration::from_millis(plan.linger_ms));
    proto::write_state(&mut ctl, State::TestEnd)?;
    expect(&mut ctl, State::ExchangeResults)?;
    let ours = Results {
        sender_has_retransmits: Retransmits(None),
        streams: sent
            .iter()
            .enumerate()
            .map(|(i, f)| StreamResult {
                id: proto::stream_id(i),
                bytes: f.acc.summary().bytes,
                retransmits: Retransmits(None),
                packets: f.acc.packets() as i64,
                end_time: elapsed_s,
                ..StreamResult::default()
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
        &sent,
        &theirs,
        cpu,
        transport,
    );
    let view = ServerView {
        packets_received: doc.flows.iter().map(|f| f.received.counts.packets).sum(),
        bytes_received: doc.flows.iter().map(|f| f.received.counts.bytes).sum(),
        results: theirs,
    };
    if let Some(e) = sent.iter().find_map(|f| f.error.clone()) {
        return Err(Iperf3Error::Protocol(format!("a flow failed: {e}")));
    }
    Ok((doc, view))
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
    sent: &[FlowSent],
    theirs: &Results,
    cpu: CpuTime,
    transport: Transport,
) -> ResultDoc {
    let mut total = Total {
        lost: Some(0),
        ..Total::default()
    };
    let mut flows = Vec::new();
    for (i, (f, s)) in plan.flows.iter().zip(sent).enumerate() {
        let id = proto::stream_id(i);
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
    let mut doc = crate::doc_shell(
        started_real,
        "none: an iperf3 server reports bytes, datagrams, loss and RFC 3550 jitter, \
         not per-packet delay; delay figures are not measured",
    );
    doc.command = plan.command.clone();
    doc.flows = flows;
    doc.total = total;
    doc.cpu.sender = cpu;
    doc
}
