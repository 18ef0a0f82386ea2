//! ICMP echo flows (`-T icmp`, D-ITG's `-T ICMP`): echo requests paced by
//! the same schedules as UDP flows (IDT and size laws, `-C`, `-c`, stop
//! conditions), answered by the destination's own IP stack, so no receiver
//! daemon and no control session. Each request carries a probe header
//! (session, flow, sequence, transmit time) in its data; the reply brings
//! it back and the round trip is the reply's kernel receive time minus the
//! transmit time, as the RTT meter does it. A reply that carries this
//! flow's echo identifier but not its probe (another program, a forged or
//! corrupt answer) is counted `foreign` and ignored.
//!
//! Sockets: an unprivileged ICMP ("ping") socket when the process's group
//! is within `net.ipv4.ping_group_range` (the kernel then owns the echo
//! identifier and hands each socket only its own replies), else a raw
//! socket (root or CAP_NET_RAW). Linux only for now.

use crate::plan::{Hooks, SessionPlan};
use crate::EngineError;
use wirebench_schema::result::ResultDoc;
use wirebench_wire::{Direction, MeterMode, Transport};

/// ICMP echo's declaration.
pub(crate) const CAPS: super::Caps = super::Caps {
    name: "icmp",
    connection_oriented: false,
    via_receiver: false,
    tcp_info: false,
    tcp_options: false,
    shares_pacer: false,
    rx_sockets: 0,
    kernel_udp_drops: false,
    needs_privilege: true,
};

/// ICMP echo's entry in the transport table: no receiver session, so
/// nothing to connect ([`run`] opens its own sockets).
pub(crate) const OPS: super::Ops = super::Ops {
    caps: CAPS,
    socket: None,
    connect: |_, _, _, _| Err(super::not_in_session(Transport::Icmp)),
    listen: None,
    dial: None,
    reverse: None,
};

/// Most ICMP echo flows in one run: each has a sending and a receiving
/// thread of its own.
pub const MAX_ICMP_FLOWS: usize = 256;

/// Largest echo data (`-c`): an IPv4 datagram of 65 535 bytes less its
/// 20-byte header and the 8-byte ICMP header.
pub const MAX_ICMP_DATA: u32 = 65_507;

/// True when the session's flows are ICMP echo flows (all of them:
/// [`check`] refuses a mixture).
pub(crate) fn is_icmp(plan: &SessionPlan) -> bool {
    plan.flows.iter().any(|f| f.transport == Transport::Icmp)
}

/// What an ICMP echo session cannot do: everything that needs a receiver
/// daemon. Called by `SessionPlan::validate`.
pub(crate) fn check(plan: &SessionPlan) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::BadPlan(m));
    if !is_icmp(plan) {
        return Ok(());
    }
    if let Some((i, f)) = plan
        .flows
        .iter()
        .enumerate()
        .find(|(_, f)| f.transport != Transport::Icmp)
    {
        return bad(format!(
            "-T icmp: flow {} is {}; ICMP echo flows need no receiver and cannot share a \
             session with flows that do (run them separately)",
            i + 1,
            f.transport
        ));
    }
    if plan.flows.len() > MAX_ICMP_FLOWS {
        return bad(format!(
            "--flows: at most {MAX_ICMP_FLOWS} ICMP echo flows per run, got {}",
            plan.flows.len()
        ));
    }
    if plan
        .flows
        .iter()
        .any(|f| f.meter_in(plan) != MeterMode::Rtt)
    {
        return bad(
            "-m: ICMP echo flows measure round trips (the echo reply); -m owd needs a receiver"
                .into(),
        );
    }
    if let Some(i) = plan
        .flows
        .iter()
        .position(|f| f.direction != Direction::Forward)
    {
        return bad(format!(
            "-R/--bidir: flow {} is an ICMP echo flow; there is no receiver to send it back",
            i + 1
        ));
    }
    if plan.auth_probes {
        return bad(
            "--auth probes: ICMP echo flows are answered by the destination's own stack, \
             which checks no MAC"
                .into(),
        );
    }
    if plan.key.is_some() {
        return bad("--key-file: ICMP echo flows have no receiver to authenticate to".into());
    }
    if plan.remote_log.is_some() {
        return bad("-x: ICMP echo flows have no receiver to keep a log".into());
    }
    if plan.log.is_some() {
        return bad("-l: per-packet logs are written for flows to a receiver, not -T icmp".into());
    }
    for (i, f) in plan.flows.iter().enumerate() {
        if f.spec.max_payload() > MAX_ICMP_DATA {
            return bad(format!(
                "-c: flow {}: ICMP echo data is at most {MAX_ICMP_DATA} bytes, got {}",
                i + 1,
                f.spec.max_payload()
            ));
        }
        if f.spec.is_max() {
            return bad(format!(
                "--max: flow {} is an ICMP echo flow; echo requests are paced (-C, -E, ...)",
                i + 1
            ));
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn run(_plan: &SessionPlan, _hooks: &Hooks) -> Result<ResultDoc, EngineError> {
    Err(EngineError::BadPlan(
        "-T icmp: ICMP echo flows are supported on Linux only, not on this system".into(),
    ))
}

#[cfg(target_os = "linux")]
pub(crate) use linux::run;

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use crate::assemble::{assemble_doc, DocInputs};
    use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack, wait_until};
    use crate::net::{enable_rx_timestamps, set_rcvbuf, AsRawFd, RecvBatch, SendBatch, BATCH};
    use crate::pacing::{gather, stop_reason, wait_or_stop, FlowEnd, FlowSent, Schedule, SendRec};
    use crate::plan::FlowPlan;
    use crate::session::Offset;
    use crate::sys::{self, CpuClock, CpuTime, HostCpu};
    use socket2::{Domain, Protocol, Socket, Type};
    use std::io::ErrorKind;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use wirebench_schema::result::{FlowReport, ReportExtra};
    use wirebench_stats::{FlowConfig, IpVersion, RecvAccumulator, RecvSummary};
    use wirebench_wire::{ProbeHeader, PROBE_HEADER_LEN};

    /// ICMP header: type, code, checksum, identifier, sequence.
    const ICMP_HDR: usize = 8;
    const ECHO_REQUEST_V4: u8 = 8;
    const ECHO_REPLY_V4: u8 = 0;
    const ECHO_REQUEST_V6: u8 = 128;
    const ECHO_REPLY_V6: u8 = 129;

    /// One flow's echo socket.
    struct Echo {
        sock: Socket,
        /// Raw socket: we choose the identifier, fill the IPv4 checksum and
        /// see IPv4 headers and every ICMP message; a ping socket does all
        /// that for us.
        raw: bool,
        v6: bool,
        /// The identifier our requests carry (raw sockets; a ping socket's
        /// is the kernel's and its replies are already filtered by it).
        ident: u16,
    }

    impl Echo {
        fn open(f: &FlowPlan, to: SocketAddr, ident: u16) -> Result<Echo, EngineError> {
            let v6 = to.is_ipv6();
            let (domain, proto) = if v6 {
                (Domain::IPV6, Protocol::ICMPV6)
            } else {
                (Domain::IPV4, Protocol::ICMPV4)
            };
            let (sock, raw) = match Socket::new(domain, Type::DGRAM, Some(proto)) {
                Ok(s) => (s, false),
                // Not within net.ipv4.ping_group_range: a raw socket if we
                // may (root, CAP_NET_RAW).
                Err(e) if denied(&e) => match Socket::new(domain, Type::RAW, Some(proto)) {
                    Ok(s) => (s, true),
                    Err(e2) if denied(&e2) => {
                        return Err(EngineError::BadPlan(format!(
                            "-T icmp: this user may open neither an ICMP ping socket ({e}; \
                             the group must be within net.ipv4.ping_group_range) nor a raw \
                             socket ({e2}; needs root or CAP_NET_RAW)"
                        )))
                    }
                    Err(e2) => return Err(EngineError::io("ICMP raw socket", e2)),
                },
                Err(e) => return Err(EngineError::io("ICMP socket", e)),
            };
            let peer = crate::sockopt::apply(&sock, to, &f.opts)?;
            sock.connect(&peer.into())
                .map_err(|e| EngineError::Connect {
                    addr: to.ip().to_string(),
                    source: e,
                })?;
            Ok(Echo {
                sock,
                raw,
                v6,
                ident,
            })
        }
    }

    fn denied(e: &std::io::Error) -> bool {
        e.kind() == ErrorKind::PermissionDenied
            || matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
    }

    /// The Internet checksum (RFC 1071) of `b`.
    pub(super) fn checksum(b: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        let mut chunks = b.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// Writes the echo request's sequence (ICMP and probe) into a filled
    /// slot, and its checksum when we must (IPv4 raw socket; the kernel
    /// fills it for ping sockets and ICMPv6).
    fn stamp(slot: &mut [u8], seq: u32, raw_v4: bool) {
        slot[6..8].copy_from_slice(&(seq as u16).to_be_bytes());
        ProbeHeader::stamp_seq(&mut slot[ICMP_HDR..], seq);
        if raw_v4 {
            slot[2..4].copy_from_slice(&[0, 0]);
            let c = checksum(slot);
            slot[2..4].copy_from_slice(&c.to_be_bytes());
        }
    }

    /// What one flow's sender needs.
    struct Job {
        plan: FlowPlan,
        flow_id: u16,
        session: u32,
        t0: u64,
        cfg: FlowConfig,
        abort: Arc<AtomicBool>,
        cancel: Option<&'static AtomicBool>,
    }

    /// Paces one flow's echo requests on the calling thread.
    fn send_flow(job: &Job, echo: &Echo) -> FlowSent {
        tighten_timer_slack();
        raise_priority();
        let mut sched = match Schedule::new(&job.plan, job.t0, crate::pacing::min_probe_len(false))
        {
            Ok(s) => s,
            Err(e) => return FlowSent::failed(&e),
        };
        let mut acc = SendRec::new(job.cfg, None, job.flow_id);
        let mut first_tx = 0;
        let r = send_loop(job, echo, &mut sched, &mut acc, &mut first_tx);
        FlowSent::ran(first_tx, acc.summary(&sched), None, r)
    }

    fn send_loop(
        job: &Job,
        echo: &Echo,
        sched: &mut Schedule,
        acc: &mut SendRec,
        first_tx: &mut u64,
    ) -> FlowEnd {
        let fd = echo.sock.as_raw_fd();
        let raw_v4 = echo.raw && !echo.v6;
        let mut batch = SendBatch::new(ICMP_HDR + sched.max_len as usize);
        for slot in batch.slots_mut() {
            if let Some(rest) = slot.get_mut(ICMP_HDR + PROBE_HEADER_LEN..) {
                job.plan.spec.payload.fill(rest, job.plan.seed);
            }
        }
        let mut h = ProbeHeader {
            flags: 0,
            session: job.session,
            flow: job.flow_id,
            len: PROBE_HEADER_LEN as u16,
            seq: 0,
            tx_ns: 0,
        };
        let ty = if echo.v6 {
            ECHO_REQUEST_V6
        } else {
            ECHO_REQUEST_V4
        };
        let mut seq: u32 = 0;
        let mut meta = [(0u64, 0u32); BATCH];
        wait_until(job.t0);
        let mut pending = sched.next(mono_ns());
        while let Some((at, _)) = pending {
            let now = match wait_or_stop(&job.abort, job.cancel, at, crate::clock::SPIN_NS) {
                Ok(t) => t,
                Err(h) => return Ok(Some(h)),
            };
            let n = gather(sched, &mut pending, now, acc, &mut meta, BATCH, seq);
            if n == 0 {
                continue;
            }
            for (i, &(_, size)) in meta[..n].iter().enumerate() {
                let slot = batch.slot(i, ICMP_HDR + size as usize);
                slot[0] = ty;
                slot[1] = 0;
                slot[2..4].copy_from_slice(&[0, 0]);
                slot[4..6].copy_from_slice(&echo.ident.to_be_bytes());
                h.len = size as u16;
                h.seq = seq.wrapping_add(i as u32);
                let _ = h.encode(&mut slot[ICMP_HDR..]);
            }
            let tx = realtime_ns();
            if *first_tx == 0 {
                *first_tx = tx;
            }
            for (i, &(_, size)) in meta[..n].iter().enumerate() {
                let slot = batch.slot(i, ICMP_HDR + size as usize);
                ProbeHeader::stamp_tx(&mut slot[ICMP_HDR..], tx);
                stamp(slot, seq.wrapping_add(i as u32), raw_v4);
            }
            let actual = mono_ns();
            let mut i = 0;
            while i < n {
                match batch.send(fd, i, n) {
                    Ok(k) => {
                        for (j, &(at, size)) in meta[i..i + k].iter().enumerate() {
                            acc.record_sent(at, actual, size, seq.wrapping_add(j as u32), tx);
                        }
                        seq = seq.wrapping_add(k as u32);
                        i += k;
                    }
                    Err(e) => {
                        // Refused by the kernel (no route, full buffer):
                        // not sent, and the rest renumbered so that no
                        // sequence number is missing for it.
                        let (at, size) = meta[i];
                        acc.record_not_sent(1, at, seq, size);
                        for (j, &(_, size)) in meta.iter().enumerate().take(n).skip(i + 1) {
                            let cur = seq.wrapping_add((j - i) as u32 - 1);
                            stamp(batch.slot(j, ICMP_HDR + size as usize), cur, raw_v4);
                        }
                        i += 1;
                        if e.kind() == ErrorKind::WouldBlock {
                            std::thread::yield_now();
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// One flow's collector of echo replies.
    struct Replies {
        stop: Arc<AtomicBool>,
        foreign: Arc<AtomicU64>,
        handle: std::thread::JoinHandle<RecvSummary>,
    }

    fn start_replies(
        echo: &Echo,
        cfg: FlowConfig,
        session: u32,
        flow: u16,
        max_len: u32,
    ) -> Result<Replies, EngineError> {
        let sock = echo
            .sock
            .try_clone()
            .map_err(|e| EngineError::io("ICMP socket", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let foreign = Arc::new(AtomicU64::new(0));
        let (st, fo) = (stop.clone(), foreign.clone());
        let (raw, v6, ident) = (echo.raw, echo.v6, echo.ident);
        let reply_type = if v6 { ECHO_REPLY_V6 } else { ECHO_REPLY_V4 };
        // Room for an IPv4 header with options before the echo.
        let slot = 60 + ICMP_HDR + max_len as usize + 1;
        let handle = std::thread::Builder::new()
            .name(format!("wb-icmp-{flow}"))
            .spawn(move || {
                let mut acc = RecvAccumulator::new(cfg);
                let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
                set_rcvbuf(sock.as_raw_fd(), 4 << 20);
                enable_rx_timestamps(sock.as_raw_fd());
                let mut batch = RecvBatch::new(slot);
                let fd = sock.as_raw_fd();
                while !st.load(Ordering::Relaxed) {
                    let Ok(n) = batch.recv(fd) else { continue };
                    let fallback = realtime_ns();
                    for i in 0..n {
                        let t4 = batch.kernel_ts(i).unwrap_or(fallback);
                        if batch.truncated(i) {
                            continue;
                        }
                        let mut d: &[u8] = batch.data(i);
                        // A raw IPv4 socket sees the IP header first.
                        if raw && !v6 {
                            let ihl = usize::from(d.first().map_or(0, |b| b & 0x0f)) * 4;
                            d = d.get(ihl..).unwrap_or(&[]);
                        }
                        if d.len() < ICMP_HDR || d[0] != reply_type || d[1] != 0 {
                            // Our own requests (a raw socket sees them on
                            // loopback), errors, other ICMP: not replies.
                            continue;
                        }
                        let id = u16::from_be_bytes([d[4], d[5]]);
                        if raw && id != ident {
                            // Another program's echo: none of ours.
                            continue;
                        }
                        let icmp_seq = u16::from_be_bytes([d[6], d[7]]);
                        let body = &d[ICMP_HDR..];
                        match ProbeHeader::decode_datagram(body) {
                            Ok(h)
                                if h.session == session
                                    && h.flow == flow
                                    && h.seq as u16 == icmp_seq =>
                            {
                                let rtt = t4 as i64 - h.tx_ns as i64;
                                acc.record(h.seq, rtt, t4, body.len() as u32);
                            }
                            _ => {
                                fo.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                acc.summary(None)
            })
            .map_err(|e| EngineError::io("ICMP receive thread", e))?;
        Ok(Replies {
            stop,
            foreign,
            handle,
        })
    }

    /// A per-run identifier for the probes (no receiver assigns one).
    fn session_id() -> u32 {
        let mut b = [0u8; 4];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            use std::io::Read;
            let _ = f.read_exact(&mut b);
        }
        u32::from_le_bytes(b) ^ (realtime_ns() as u32) ^ std::process::id()
    }

    /// Runs an ICMP echo session: every flow paced to the destination,
    /// replies collected until `linger_ms` after the last request.
    pub(crate) fn run(plan: &SessionPlan, hooks: &Hooks) -> Result<ResultDoc, EngineError> {
        let mut arrival = crate::multi::Arrival::new(hooks.together.clone());
        let dst: SocketAddr = plan.resolve()?;
        let dst = SocketAddr::new(dst.ip(), 0);
        let ip = if dst.is_ipv4() {
            IpVersion::V4
        } else {
            IpVersion::V6
        };
        let mtu = crate::session::measure_mtu(dst.ip(), 9);
        let session = session_id();
        let mut echoes = Vec::with_capacity(plan.flows.len());
        for (i, f) in plan.flows.iter().enumerate() {
            let ident = (session as u16) ^ ((session >> 16) as u16) ^ (i as u16 + 1);
            echoes.push(Echo::open(f, dst, ident)?);
        }
        let src_ip = echoes
            .first()
            .and_then(|e| e.sock.local_addr().ok())
            .and_then(|a| a.as_socket())
            .map_or(dst.ip(), |a| a.ip());
        let cfg = FlowConfig {
            transport: Transport::Icmp,
            ip,
            mtu,
            interval_ns: plan.interval_ms.map(|ms| ms * 1_000_000),
        };
        let mut replies = Vec::with_capacity(echoes.len());
        for (i, (f, e)) in plan.flows.iter().zip(&echoes).enumerate() {
            replies.push(start_replies(
                e,
                cfg,
                session,
                (i + 1) as u16,
                f.spec.max_payload().max(PROBE_HEADER_LEN as u32),
            )?);
        }

        arrival.arrive()?;
        let started_real = realtime_ns();
        let t0 = mono_ns()
            + crate::send::START_LEAD_NS
            + crate::send::START_LEAD_PER_FLOW_NS * plan.flows.len() as u64;
        let cpu0 = CpuTime::process();
        let host0 = HostCpu::read();
        let abort = Arc::new(AtomicBool::new(false));
        let outcomes: Vec<FlowSent> = std::thread::scope(|s| {
            let handles: Vec<_> = plan
                .flows
                .iter()
                .zip(&echoes)
                .enumerate()
                .map(|(i, (f, e))| {
                    let job = Job {
                        plan: f.clone(),
                        flow_id: (i + 1) as u16,
                        session,
                        t0,
                        cfg,
                        abort: abort.clone(),
                        cancel: hooks.cancel,
                    };
                    s.spawn(move || send_flow(&job, e))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| FlowSent::failed("ICMP sender thread panicked"))
                })
                .collect()
        });
        // The last replies are still on their way.
        let until = mono_ns() + plan.linger_ms * 1_000_000;
        while mono_ns() < until && stop_reason(&abort, hooks.cancel).is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stopped_mono = mono_ns();
        let run_s = stopped_mono.saturating_sub(t0) as f64 / 1e9;
        let cpu_sender = CpuTime::process().since(cpu0);
        let host1 = HostCpu::read();

        let mut outcomes = outcomes;
        let mut reports = Vec::with_capacity(replies.len());
        for (i, (r, o)) in replies.into_iter().zip(&mut outcomes).enumerate() {
            r.stop.store(true, Ordering::Relaxed);
            let acc = r.handle.join().unwrap_or_default();
            // Lost: requests sent that no reply answered.
            let mut summary = acc;
            let sent = o.send.packets;
            let lost = sent.saturating_sub(summary.counts.unique);
            summary.counts.lost = Some(lost);
            summary.counts.loss_ratio = Some(if sent > 0 {
                lost as f64 / sent as f64
            } else {
                0.0
            });
            o.rtt = Some(summary.clone());
            reports.push(FlowReport {
                flow_id: (i + 1) as u16,
                summary,
                foreign: r.foreign.load(Ordering::Relaxed),
                negative_beyond_error: 0,
                forged: 0,
                implausible_delays: 0,
                marks: None,
                from: None,
                sent: None,
            });
        }

        let mut partial = outcomes
            .iter()
            .enumerate()
            .find_map(|(i, o)| o.error.as_ref().map(|e| format!("flow {}: {e}", i + 1)));
        if partial.is_none() && outcomes.iter().any(|o| o.cancelled) {
            partial = Some("interrupted: flows stopped early".into());
        }
        let doc = assemble_doc(DocInputs {
            plan,
            started_real,
            src: SocketAddr::new(src_ip, 0),
            dst_ip: dst.ip(),
            mtu,
            clock: Offset {
                offset_ns: 0,
                error_ns: 0,
                samples: 0,
            },
            outcomes,
            reports,
            extra: ReportExtra::default(),
            run_s,
            cpu_sender,
            sndbuf_errors: 0,
            host: sys::host_cpu_share(host0, host1, run_s),
            partial: partial.clone(),
        });
        match partial {
            None => Ok(doc),
            Some(reason) => Err(EngineError::Partial {
                reason,
                doc: Box::new(doc),
            }),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::checksum;

        #[test]
        fn internet_checksum_known_values() {
            // RFC 1071's example words: 0001 f203 f4f5 f6f7 sum to ddf2.
            let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
            assert_eq!(checksum(&b), !0xddf2);
            // A message with its checksum in place sums to zero.
            let mut m = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1, 0xab];
            let c = checksum(&m);
            m[2..4].copy_from_slice(&c.to_be_bytes());
            assert_eq!(checksum(&m), 0);
        }
    }
}
