//! TCP: a connection per flow carrying length-framed records. Paced flows
//! write each batch of due records in one `write`, on a thread of their
//! own or, several, sharing one writer ([`run_paced_shared`]); `--max`
//! flows write as fast as the socket takes them ([`tcp_bulk`]), or, two
//! or more, share one writer thread ([`run_bulk_shared`]).

mod paced;
pub(crate) mod rx;
mod zc;

pub(crate) use paced::{buffer_bytes as paced_buffer_bytes, run_paced_shared};

use super::{connect_err, hello_record, Caps, DataSock, FlowRun, FlowTx, Ident, Ops};
use crate::clock::{mono_ns, realtime_ns, wait_until};
use crate::net::AsRawFd;
use crate::pacing::{each_batch, gather, header, FlowEnd, FlowJob, FlowSent, Schedule, SendRec};
use crate::plan::FlowPlan;
use crate::rtt::{Reflected, RttRx};
use crate::session::CONNECT_TIMEOUT;
use crate::sys;
use crate::EngineError;
use socket2::{Protocol, Socket, Type};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use wirebench_schema::result::ZeroCopy;
use wirebench_stats::{FlowConfig, SendSummary};
use wirebench_wire::ProbeHeader;
use zc::WritePool;

/// TCP's declaration.
pub(crate) const CAPS: Caps = Caps {
    name: "tcp",
    connection_oriented: true,
    via_receiver: true,
    tcp_info: true,
    tcp_options: true,
    shares_pacer: false,
    rx_sockets: 1 + rx::GRANTED_CONNS as u64,
    kernel_udp_drops: false,
    needs_privilege: false,
};

/// TCP's entry in the transport table.
pub(crate) const OPS: Ops = Ops {
    caps: CAPS,
    socket: Some((Type::STREAM, Protocol::TCP)),
    connect,
    listen: Some(rx::listen),
    dial: Some(rx::dial),
    reverse: Some(rx::reverse_port),
};

/// Longest a paced flow's `write` may block before it fails the flow.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects, then names the session and flow on the fresh connection
/// ([`hello_record`]): the receiver closes connections that have not
/// identified within 2 s, and a flow's first probe may come later than
/// that (`-d` start delay, slow rates).
fn connect(
    sock: Socket,
    peer: SocketAddr,
    f: &FlowPlan,
    id: Ident,
) -> Result<DataSock, EngineError> {
    sock.connect_timeout(&peer.into(), CONNECT_TIMEOUT)
        .map_err(connect_err(peer))?;
    let mut s: TcpStream = sock.into();
    let _ = s.set_nodelay(crate::sockopt::nodelay(&f.opts, &f.spec));
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    s.write_all(&hello_record(id)?)
        .map_err(|e| EngineError::io("TCP data connection", e))?;
    Ok(Box::new(TcpTx::new(s)))
}

/// A TCP flow's connected sending end.
pub(crate) struct TcpTx {
    s: TcpStream,
    /// A `--max` flow's writer span (first write, stop; CLOCK_MONOTONIC).
    ran: Option<(u64, u64)>,
    /// `--zerocopy`: what the kernel did with the flow's sends.
    zc: Option<ZeroCopy>,
}

impl TcpTx {
    /// The sending end of an accepted or connected, identified stream.
    pub(crate) fn new(s: TcpStream) -> TcpTx {
        TcpTx {
            s,
            ran: None,
            zc: None,
        }
    }
}

impl FlowTx for TcpTx {
    fn caps(&self) -> &'static Caps {
        &CAPS
    }

    fn pace(&mut self, r: FlowRun<'_>) -> FlowEnd {
        if r.sched.max {
            let mut ran = (0, 0);
            let end = tcp_bulk(
                r.job,
                &self.s,
                r.sched,
                r.acc,
                r.first_tx,
                &mut ran,
                &mut self.zc,
            );
            self.ran = Some(ran);
            end
        } else {
            tcp_send(r.job, &self.s, r.sched, r.acc, r.first_tx, &mut self.zc)
        }
    }

    fn reflector(&self, r: &Reflected) -> std::io::Result<RttRx> {
        Ok(RttRx::start_tcp(self.s.try_clone()?, r))
    }

    fn ended(&self, job: &FlowJob, sent: &mut FlowSent) {
        if let Some(ran) = self.ran {
            writer_span(&mut sent.send, ran, job.cfg);
        }
        sent.tcp = Some(sys::tcp_info(&self.s).unwrap_or_default());
        sent.tcp_cc = crate::sockopt::tcp_cc(&self.s);
        sent.zerocopy = self.zc.clone();
    }

    fn into_udp(self: Box<Self>) -> Result<std::net::UdpSocket, DataSock> {
        Err(self)
    }

    fn into_tcp(self: Box<Self>) -> Result<TcpStream, DataSock> {
        Ok(self.s)
    }

    fn tcp_stream(&self) -> Option<&TcpStream> {
        Some(&self.s)
    }
}

/// Bytes of records per TCP write (see `tcp_send`): larger writes cost
/// fewer syscalls per byte; docs/performance.md has the loopback figures
/// for this size and smaller ones.
pub(crate) const TCP_WRITE_BYTES: usize = 1 << 20;

/// Bytes of records per write of each of `flows` `--max` TCP flows on
/// `cores` CPUs: [`TCP_WRITE_BYTES`] while each flow can have a CPU, then
/// shared out, down to 64 KiB. The write buffer is the flow's one
/// allocation; 1 000 flows of 1 MiB each would hold 1 GiB.
///
/// Why 64 KiB and not iperf3's 128 KiB: with 60 flows on the 1 Gbit/s
/// router bed (check K1), writes of 128 000 B made node a's TCP detect
/// reordering and fast-retransmit segments the receiver then reported as
/// duplicates (TCPSACKReorder and TCPDSACKRecv in the hundreds per run,
/// iperf3 3.12's 128 KiB writes alike), 256 KB and 1 MB writes more so;
/// 64 000 B writes, wirebench's or iperf3's (`-l 64000`), left mostly
/// tail-loss probes (docs/performance.md, "K1's retransmits in pairs").
pub(crate) fn bulk_write_bytes(flows: usize, cores: usize) -> usize {
    const FLOOR: usize = 64 << 10;
    if flows <= cores.max(1) {
        return TCP_WRITE_BYTES;
    }
    (TCP_WRITE_BYTES * cores.max(1) / flows).clamp(FLOOR, TCP_WRITE_BYTES)
}

/// Longest a `--max` TCP flow's `write` may block (SO_SNDTIMEO) before
/// the flow looks at its stop flags and clock again; in its last slice the
/// timeout is what is left of the run, so the flow stops on time.
const BULK_WRITE_SLICE_NS: u64 = 50_000_000;

/// The records of a `--max` TCP flow's write buffer: offsets, and which
/// have been handed to the kernel.
struct BulkBatch {
    /// Record i occupies `starts[i]..starts[i + 1]` of the buffer.
    starts: Vec<usize>,
    /// Transmit time (CLOCK_REALTIME) stamped into each record.
    tx: Vec<u64>,
    /// Records in the buffer.
    n: usize,
    /// Records wholly handed to the kernel.
    done: usize,
    /// Bytes handed to the kernel.
    off: usize,
}

impl BulkBatch {
    fn new(records: usize) -> BulkBatch {
        BulkBatch {
            starts: vec![0; records + 1],
            tx: vec![0; records],
            n: 0,
            done: 0,
            off: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.done == self.n
    }

    fn end(&self) -> usize {
        self.starts[self.n]
    }

    /// First record of which no byte has been written: from it on, the
    /// records can still be stamped with the time of the write that
    /// starts them.
    fn unbegun(&self) -> usize {
        if self.done < self.n && self.starts[self.done] < self.off {
            self.done + 1
        } else {
            self.done
        }
    }
}

/// A `--max` TCP flow: writes whole records as fast as the socket takes
/// them until the run's time is up, and stops then, on the session's
/// clock, whatever the path's speed. Each write may block at most
/// [`BULK_WRITE_SLICE_NS`] (less at the end): a write of the whole
/// buffer, blocked on a path shared by many flows, would hold the flow
/// past its end or record a run's records all at its start.
/// A record counts as sent when its last byte is accepted, at that time;
/// records not yet begun carry the time of the write that begins them
/// (a partial write leaves the rest for the next one, which restamps
/// it). When the time is up, records not begun are not part of the run
/// (a timed `--max` flow has no schedule they were due on), and a record
/// begun but not finished ends truncated by the close: the receiver
/// drops an incomplete record, and neither side counts it.
///
/// `ran` gets the writer's first write and its stop (CLOCK_MONOTONIC),
/// `zc` what became of `--zerocopy`.
fn tcp_bulk(
    job: &FlowJob,
    s: &TcpStream,
    sched: &mut Schedule,
    acc: &mut SendRec,
    first_tx: &mut u64,
    ran: &mut (u64, u64),
    zc: &mut Option<ZeroCopy>,
) -> FlowEnd {
    let mut w = BulkWriter::new(job, sched, s.as_raw_fd());
    let mut timeout_ns = 0;
    wait_until(job.t0);
    w.pending = sched.next(mono_ns());
    let r = loop {
        if let Some(h) = job.halted() {
            break Ok(Some(h));
        }
        let now = mono_ns();
        // The timeout changes only in the run's last slice.
        let left = sched.end_at.map_or(u64::MAX, |e| e.saturating_sub(now));
        let want = BULK_WRITE_SLICE_NS.min(left).max(1_000_000);
        if want != timeout_ns {
            let _ = s.set_write_timeout(Some(Duration::from_nanos(want)));
            timeout_ns = want;
        }
        match w.write_once(job, s, sched, acc, now) {
            Ok(true) => {}
            Ok(false) => break Ok(None),
            Err(e) => break Err(e),
        }
        if w.starved() {
            w.pool.wait(s.as_raw_fd(), (want / 1_000_000) as i32);
        }
    };
    *first_tx = w.first_tx;
    *ran = w.ran(sched, mono_ns());
    *zc = w.pool.finish(s.as_raw_fd(), zc_finish_ms(&r));
    r
}

/// How long a flow's end waits for its last zero-copy completions: those
/// of a run's last writes come within a round trip or two of the data
/// leaving; a halted run does not wait.
fn zc_finish_ms(end: &FlowEnd) -> u64 {
    match end {
        Ok(None) => 2_000,
        _ => 0,
    }
}

/// One bulk TCP flow's writing between writes: the write buffer of
/// records, which of them the kernel has, and the schedule's next record.
struct BulkWriter {
    pool: WritePool,
    /// The pool's buffer that holds the batch (None: between batches).
    cur: Option<usize>,
    meta: Vec<(u64, u32)>,
    b: BulkBatch,
    h: ProbeHeader,
    /// Sequence number of the buffer's first record.
    seq: u32,
    pending: Option<(u64, u32)>,
    first_tx: u64,
    /// CLOCK_MONOTONIC of the first write (0: none yet).
    began: u64,
}

impl BulkWriter {
    fn new(job: &FlowJob, sched: &Schedule, fd: crate::net::RawFd) -> BulkWriter {
        let max_len = sched.max_len as usize;
        let cap = job.tcp_write.max(max_len);
        let pool = WritePool::new(fd, job.plan.opts.zerocopy == Some(true), cap, |b| {
            job.plan.spec.payload.fill(b, job.plan.seed)
        });
        let records = (cap / max_len.max(1)).max(1);
        BulkWriter {
            pool,
            cur: None,
            meta: vec![(0, 0); records],
            b: BulkBatch::new(records),
            h: header(job),
            seq: 0,
            pending: None,
            first_tx: 0,
            began: 0,
        }
    }

    /// The writer's span for [`writer_span`]: from the schedule's start
    /// (or its first write, if earlier) to `stopped`, the end at the
    /// latest.
    fn ran(&self, sched: &Schedule, stopped: u64) -> (u64, u64) {
        (
            self.began.min(sched.start_at),
            sched.end_at.map_or(stopped, |e| stopped.min(e)),
        )
    }

    /// Its next batch needs a buffer and every one is still with the
    /// kernel (zero-copy): wait for completions, not for socket room.
    fn starved(&self) -> bool {
        self.cur.is_none() && self.pending.is_some() && self.pool.starved()
    }

    /// One write of what the buffer holds, refilled from the schedule when
    /// it is empty (into a free buffer of the pool). Ok(false) when the
    /// flow's time is up or its records are out; a write the socket
    /// refuses for now (full buffer, timeout) or no free buffer is
    /// Ok(true) with nothing written.
    fn write_once(
        &mut self,
        job: &FlowJob,
        s: &TcpStream,
        sched: &mut Schedule,
        acc: &mut SendRec,
        now: u64,
    ) -> Result<bool, String> {
        if sched.time_up(now) {
            return Ok(false);
        }
        let b = &mut self.b;
        if b.is_empty() {
            if self.pending.is_none() {
                return Ok(false);
            }
            if let Some(i) = self.cur.take() {
                self.pool.release(i);
            }
            let Some(i) = self.pool.acquire(s.as_raw_fd()) else {
                return Ok(true);
            };
            self.cur = Some(i);
            let buf = self.pool.buf(i);
            self.seq = self.seq.wrapping_add(b.n as u32);
            let room = self.meta.len();
            let n = gather(
                sched,
                &mut self.pending,
                now,
                acc,
                &mut self.meta,
                room,
                self.seq,
            );
            let mut o = 0;
            for (i, &(_, size)) in self.meta[..n].iter().enumerate() {
                self.h.seq = self.seq.wrapping_add(i as u32);
                b.starts[i] = o;
                let _ = self.h.encode_record(&mut buf[o..o + size as usize]);
                o += size as usize;
            }
            b.starts[n] = o;
            (b.n, b.done, b.off) = (n, 0, 0);
            if n == 0 {
                return Ok(true);
            }
        }
        let Some(cur) = self.cur else {
            return Ok(true);
        };
        let tx = realtime_ns();
        if self.first_tx == 0 {
            self.first_tx = tx;
            self.began = now;
        }
        let buf = self.pool.buf(cur);
        // Only records of which no byte went out are restamped: the kernel
        // may still be reading the others from this buffer.
        for i in b.unbegun()..b.n {
            let rec = &mut buf[b.starts[i]..b.starts[i + 1]];
            ProbeHeader::stamp_tx(rec, tx);
            if let Some(k) = &job.probe_key {
                k.sign(rec);
            }
            b.tx[i] = tx;
        }
        match self.pool.send(s, cur, b.off..b.end()) {
            Ok(0) => Err("TCP data connection closed by the receiver".into()),
            Ok(k) => {
                b.off += k;
                let at = mono_ns();
                while b.done < b.n && b.starts[b.done + 1] <= b.off {
                    let size = self.meta[b.done].1;
                    let sq = self.seq.wrapping_add(b.done as u32);
                    acc.record_sent(at, at, size, sq, b.tx[b.done]);
                    b.done += 1;
                }
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(true)
            }
            Err(e) => Err(format!("TCP data connection failed: {e}")),
        }
    }
}

/// One bulk TCP flow on a shared writer ([`run_bulk_shared`]).
struct SharedBulk {
    idx: usize,
    job: FlowJob,
    s: TcpStream,
    sched: Schedule,
    acc: SendRec,
    w: BulkWriter,
    /// How the flow ended (None while it runs) and when.
    end: Option<FlowEnd>,
    stopped: u64,
}

/// Bulk TCP flows served by one writer thread in rounds, as iperf3
/// serves its streams: the writer waits until some
/// of its flows' sockets have room (`poll`), then gives each of those one
/// write of up to [`bulk_write_bytes`], and again, until each flow's time
/// is up. With a thread per flow, 256 flows on 2 CPUs shared a 1 Gbit/s
/// link with a Jain index of 0.35 (some flows read 0) where iperf3 -P
/// read 1.00: the threads that the scheduler ran kept the link. The
/// sockets are non-blocking; a flow's records, stamps, stop and send
/// span are those of [`tcp_bulk`].
pub(crate) fn run_bulk_shared(jobs: Vec<(usize, FlowJob, TcpStream)>) -> Vec<(usize, FlowSent)> {
    let mut done = Vec::with_capacity(jobs.len());
    let mut flows = Vec::with_capacity(jobs.len());
    for (idx, mut job, s) in jobs {
        let sched = match Schedule::new(&job.plan, job.t0, job.min_len()) {
            Ok(x) => x,
            Err(e) => {
                done.push((idx, FlowSent::failed(&e)));
                continue;
            }
        };
        if let Err(e) = s.set_nonblocking(true) {
            done.push((idx, FlowSent::failed(&format!("TCP data connection: {e}"))));
            continue;
        }
        let acc = SendRec::new(job.cfg, job.log.take(), job.flow_id);
        let w = BulkWriter::new(&job, &sched, s.as_raw_fd());
        flows.push(SharedBulk {
            idx,
            job,
            s,
            sched,
            acc,
            w,
            end: None,
            stopped: 0,
        });
    }
    if let Some(t0) = flows.iter().map(|f| f.job.t0).min() {
        wait_until(t0);
    }
    let now = mono_ns();
    for f in &mut flows {
        f.w.pending = f.sched.next(now);
    }
    let mut pfds = Vec::with_capacity(flows.len());
    let mut live = Vec::with_capacity(flows.len());
    loop {
        let now = mono_ns();
        let halt = flows.first().and_then(|f| f.job.halted());
        pfds.clear();
        live.clear();
        let mut next_end = BULK_WRITE_SLICE_NS;
        for (k, f) in flows.iter_mut().enumerate() {
            if f.end.is_some() {
                continue;
            }
            if halt.is_some() || f.sched.time_up(now) {
                f.end = Some(Ok(halt));
                f.stopped = now;
                continue;
            }
            if let Some(e) = f.sched.end_at {
                next_end = next_end.min(e - now);
            }
            // A flow waiting for zero-copy completions waits for its error
            // queue (POLLERR, always reported), not for socket room.
            let events = if f.w.starved() {
                0
            } else {
                crate::net::POLLOUT
            };
            pfds.push(crate::net::pollfd(f.s.as_raw_fd(), events));
            live.push(k);
        }
        if live.is_empty() {
            break;
        }
        let timeout_ms = next_end.div_ceil(1_000_000).max(1) as i32;
        if crate::net::poll(&mut pfds, timeout_ms) <= 0 {
            continue;
        }
        let now = mono_ns();
        for (j, &k) in live.iter().enumerate() {
            if pfds[j].revents == 0 {
                continue;
            }
            let f = &mut flows[k];
            let r = f.w.write_once(&f.job, &f.s, &mut f.sched, &mut f.acc, now);
            match r {
                Ok(true) => {}
                Ok(false) => f.end = Some(Ok(None)),
                Err(e) => f.end = Some(Err(e)),
            }
            if f.end.is_some() {
                f.stopped = mono_ns();
            }
        }
    }
    // The last completions of every flow arrive together; one flow's
    // wait is the others' too.
    let finish_by = mono_ns() + 2_000_000_000;
    for mut f in flows {
        let mut send = f.acc.summary(&f.sched);
        writer_span(&mut send, f.w.ran(&f.sched, f.stopped), f.job.cfg);
        let end = f.end.unwrap_or(Ok(None));
        let left = finish_by.saturating_sub(mono_ns()) / 1_000_000;
        let zerocopy =
            f.w.pool
                .finish(f.s.as_raw_fd(), zc_finish_ms(&end).min(left));
        done.push((
            f.idx,
            FlowSent {
                tcp: Some(sys::tcp_info(&f.s).unwrap_or_default()),
                tcp_cc: crate::sockopt::tcp_cc(&f.s),
                zerocopy,
                ..FlowSent::ran(f.w.first_tx, send, None, end)
            },
        ));
    }
    done
}

/// A bulk TCP flow's send span is the time its writer ran on the
/// session's clock (`ran`: its schedule's start, and its stop, no later
/// than its end), as iperf3 counts a stream's seconds: a flow that the
/// path held back for its last second still ran for the whole run, and a
/// thread the host scheduled late still started with the others. Spans
/// of accepted records would say otherwise: with 60 flows sharing
/// 1 Gbit/s, whole writes were accepted late or all at once, and flows of
/// a 5 s run read 0 to 6.4 s. No write takes bytes after the end (its
/// timeout ends there, to the kernel's timer tick), so the end bounds the
/// span.
fn writer_span(send: &mut SendSummary, ran: (u64, u64), cfg: FlowConfig) {
    let (began, stopped) = ran;
    if send.packets == 0 || began == 0 || stopped <= began {
        return;
    }
    let d = (stopped - began) as f64 / 1e9;
    let lb = wirebench_stats::tcp_stream(send.bytes, cfg.mtu, cfg.ip);
    let bps = |b: u64| b as f64 * 8.0 / d;
    send.duration_s = d;
    send.rate_pps = send.packets as f64 / d;
    send.throughput_bps = wirebench_stats::Throughput {
        payload: bps(lb.payload),
        ip: bps(lb.ip),
        ethernet: bps(lb.ethernet),
        wire: bps(lb.wire),
    };
}

/// Most bytes of records per write of a paced TCP flow: a write blocked
/// on a full socket buffer waits for this much room, 5 ms at 100 Mbit/s.
const PACED_TCP_WRITE_BYTES: usize = 64 << 10;

fn tcp_send(
    job: &FlowJob,
    s: &TcpStream,
    sched: &mut Schedule,
    acc: &mut SendRec,
    first_tx: &mut u64,
    zc: &mut Option<ZeroCopy>,
) -> FlowEnd {
    let fd = s.as_raw_fd();
    // One write carries as many whole records as fit in TCP_WRITE_BYTES,
    // whatever their size: a cap on records would make small records go
    // out in small writes (docs/performance.md). The buffers are
    // allocated once per flow.
    let max_len = sched.max_len as usize;
    let cap = TCP_WRITE_BYTES.max(max_len);
    let mut meta = vec![(0u64, 0u32); (cap / max_len.max(1)).max(1)];
    let max = sched.max;
    // A paced flow behind its schedule writes its backlog in pieces, so
    // a write blocked on a slow path ends soon after the run does.
    let room = if max {
        meta.len()
    } else {
        meta.len()
            .min((PACED_TCP_WRITE_BYTES / max_len.max(1)).max(1))
    };
    // The stream cycles through the content; each record's header is
    // written over it.
    let mut pool = WritePool::new(
        fd,
        job.plan.opts.zerocopy == Some(true),
        (room * max_len).clamp(max_len.max(1), cap),
        |b| job.plan.spec.payload.fill(b, job.plan.seed),
    );
    let mut h = header(job);
    let r = each_batch(job, sched, acc, &mut meta, room, |due, acc, seq| {
        let Some(i) = acquire_within(&mut pool, fd, WRITE_TIMEOUT) else {
            for &(at, size) in due {
                acc.record_not_sent(1, at, *seq, size);
            }
            return Err(format!(
                "--zerocopy: the kernel completed none of the flow's zero-copy sends within {} s",
                WRITE_TIMEOUT.as_secs()
            ));
        };
        let buf = pool.buf(i);
        let tx = realtime_ns();
        if *first_tx == 0 {
            *first_tx = tx;
        }
        let mut off = 0;
        for (i, &(_, size)) in due.iter().enumerate() {
            h.seq = seq.wrapping_add(i as u32);
            h.tx_ns = tx;
            let rec = &mut buf[off..off + size as usize];
            let _ = h.encode_record(rec);
            if let Some(k) = &job.probe_key {
                k.sign(rec);
            }
            off += size as usize;
        }
        let actual = mono_ns();
        let sent = send_all(&mut pool, s, i, off);
        pool.release(i);
        if let Err(e) = sent {
            for &(at, size) in due {
                acc.record_not_sent(1, at, *seq, size);
            }
            return Err(format!("TCP data connection failed: {e}"));
        }
        for (j, &(at, size)) in due.iter().enumerate() {
            let sq = seq.wrapping_add(j as u32);
            acc.record_sent(if max { actual } else { at }, actual, size, sq, tx);
        }
        *seq = seq.wrapping_add(due.len() as u32);
        Ok(())
    });
    if matches!(r, Ok(None)) {
        let mut out = s;
        let _ = out.flush();
    }
    *zc = pool.finish(fd, zc_finish_ms(&r));
    r
}

/// A free buffer of `pool`, waiting up to `limit` for zero-copy
/// completions when every buffer is with the kernel.
fn acquire_within(pool: &mut WritePool, fd: crate::net::RawFd, limit: Duration) -> Option<usize> {
    let until = mono_ns() + limit.as_nanos() as u64;
    loop {
        if let Some(i) = pool.acquire(fd) {
            return Some(i);
        }
        let now = mono_ns();
        if now >= until {
            return None;
        }
        pool.wait(fd, ((until - now) / 1_000_000).clamp(1, 100) as i32);
    }
}

/// The first `len` bytes of buffer `i` to the socket, as `write_all`.
fn send_all(pool: &mut WritePool, s: &TcpStream, i: usize, len: usize) -> std::io::Result<()> {
    let mut o = 0;
    while o < len {
        match pool.send(s, i, o..len) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(k) => o += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::run_flow;
    use crate::pacing::tests::{flow, job};
    use crate::plan::Stop;
    use wirebench_model::FlowSpec;
    use wirebench_testkit::{check, measure};
    use wirebench_wire::Transport;

    /// A `--max` TCP flow behind a slow reader stops when its time is up,
    /// not when its blocked write would have ended; its send span is the
    /// run's, and exactly the records it counts arrive, numbered from 0,
    /// followed by at most one record cut short by the close.
    #[test]
    fn a_bulk_tcp_flow_stops_on_time_behind_a_slow_reader() {
        measure("a bulk TCP flow behind a slow reader", || {
            use std::io::Read;
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let to = l.local_addr().unwrap();
            let reader = std::thread::spawn(move || {
                let (mut c, _) = l.accept().unwrap();
                let mut buf = vec![0u8; 16 << 10];
                let mut got = Vec::new();
                loop {
                    std::thread::sleep(Duration::from_millis(1));
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                got
            });
            let s = TcpStream::connect(to).unwrap();
            let mut plan = flow(1.0, 8000, Stop::DurationMs(300));
            plan.spec = FlowSpec::max_rate(8000).unwrap();
            plan.transport = Transport::Tcp;
            let t0 = mono_ns() + 2_000_000;
            let mut j = job(plan, 1, t0);
            j.cfg.transport = Transport::Tcp;
            let out = run_flow(j, Box::new(TcpTx::new(s)));
            let took = mono_ns() - t0;
            assert_eq!(out.error, None);
            let n = out.send.packets;
            let got = reader.join().unwrap();
            let whole = got.len() / 8000;
            assert_eq!(whole as u64, n, "{} bytes", got.len());
            for (k, rec) in got.chunks_exact(8000).enumerate() {
                let h = ProbeHeader::decode_prefix(rec).unwrap();
                assert_eq!((h.session, h.flow, h.seq, h.len), (7, 1, k as u32, 8000));
            }
            // When the host runs the flow and the reader on time: the reader
            // takes ~16 MB/s, a 1 MiB write alone would block for 60 ms, the
            // socket buffer's backlog for longer.
            check(took < 300_000_000 + 150_000_000, || format!("{took} ns"))?;
            check((out.send.duration_s - 0.3).abs() < 0.006, || {
                format!("{:?}", out.send)
            })?;
            check(n > 10, || format!("{n} records"))?;
            Ok(())
        });
    }

    /// A paced flow held back by a stalled reader (small socket buffers at
    /// both ends) writes the records that fell due meanwhile in one write
    /// each time the socket takes more: the reader finds runs of records
    /// sharing one transmit stamp, yet every record whole, with its own
    /// sequence number, in order, none missing, and the stamps never
    /// going back; every record of the schedule is either sent or counted
    /// not sent, and the run keeps its length.
    #[test]
    fn a_paced_flow_behind_schedule_writes_due_records_together_each_whole() {
        measure("a paced flow behind its schedule", || {
            use std::io::Read;
            const REC: usize = 1518;
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let _ = socket2::SockRef::from(&l).set_recv_buffer_size(4096);
            let to = l.local_addr().unwrap();
            let reader = std::thread::spawn(move || {
                let (mut c, _) = l.accept().unwrap();
                // 300 records fall due while nothing is read.
                std::thread::sleep(Duration::from_millis(150));
                let mut got = Vec::new();
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                got
            });
            let s = TcpStream::connect(to).unwrap();
            s.set_nodelay(true).unwrap();
            let _ = socket2::SockRef::from(&s).set_send_buffer_size(4096);
            let mut plan = flow(2000.0, REC as u32, Stop::DurationMs(400));
            plan.transport = Transport::Tcp;
            let mut j = job(plan, 1, mono_ns() + 2_000_000);
            j.cfg.transport = Transport::Tcp;
            let out = run_flow(j, Box::new(TcpTx::new(s)));
            assert_eq!(out.error, None);
            assert_eq!(out.send.packets + out.send.not_sent, 800, "{:?}", out.send);
            let got = reader.join().unwrap();
            assert_eq!(got.len() as u64, out.send.packets * REC as u64);
            let mut stamps = Vec::new();
            for (k, rec) in got.chunks_exact(REC).enumerate() {
                let h = ProbeHeader::decode_prefix(rec).unwrap();
                assert_eq!(
                    (h.session, h.flow, h.seq, usize::from(h.len)),
                    (7, 1, k as u32, REC)
                );
                assert!(stamps.last().is_none_or(|&t| h.tx_ns >= t), "record {k}");
                stamps.push(h.tx_ns);
            }
            // Consecutive records with one stamp went out in one write.
            let longest = stamps
                .chunk_by(|a, b| a == b)
                .map(<[u64]>::len)
                .max()
                .unwrap_or(0);
            assert!(longest >= 10, "longest run of one write: {longest} records");
            // Every record sent in time, when the host ran the writer on time.
            check(out.send.not_sent == 0, || format!("{:?}", out.send))?;
            Ok(())
        });
    }

    /// Four bulk TCP flows on one shared writer, read round-robin by a
    /// slow reader: each stops on time with a whole run's send span, the
    /// records each counts arrive intact and in order, and the writer's
    /// rounds share the reader's pace evenly.
    #[test]
    fn a_shared_writer_serves_its_bulk_flows_in_rounds_and_stops_on_time() {
        measure("bulk TCP flows on one shared writer", || {
            use std::io::Read;
            const REC: usize = 8000;
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let to = l.local_addr().unwrap();
            let socks: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(to).unwrap()).collect();
            let mut peers: Vec<std::net::TcpStream> =
                (0..4).map(|_| l.accept().unwrap().0).collect();
            // Connections are accepted in the order they connected; the reader
            // knows each one by the flow id in its records.
            let reader = std::thread::spawn(move || {
                for p in &peers {
                    p.set_nonblocking(true).unwrap();
                }
                let mut got = vec![Vec::new(); peers.len()];
                let mut open = peers.len();
                let mut buf = vec![0u8; 8 << 10];
                while open > 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    open = 0;
                    for (p, g) in peers.iter_mut().zip(&mut got) {
                        match p.read(&mut buf) {
                            Ok(0) => {}
                            Ok(n) => {
                                g.extend_from_slice(&buf[..n]);
                                open += 1;
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => open += 1,
                            Err(_) => {}
                        }
                    }
                }
                got
            });
            let t0 = mono_ns() + 2_000_000;
            let jobs: Vec<(usize, FlowJob, TcpStream)> = socks
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut plan = flow(1.0, REC as u32, Stop::DurationMs(400));
                    plan.spec = FlowSpec::max_rate(REC as u32).unwrap();
                    plan.transport = Transport::Tcp;
                    let mut j = job(plan, i as u16 + 1, t0);
                    j.cfg.transport = Transport::Tcp;
                    // What each of K1's 60 flows writes at a time on 2 CPUs.
                    j.tcp_write = bulk_write_bytes(60, 2);
                    (i, j, s)
                })
                .collect();
            let mut out = run_bulk_shared(jobs);
            let took = mono_ns() - t0;
            out.sort_by_key(|(i, _)| *i);
            let got = reader.join().unwrap();
            let mut bytes = Vec::new();
            for (i, o) in &out {
                assert_eq!(o.error, None);
                let n = o.send.packets;
                let g = got
                    .iter()
                    .find(|g| {
                        g.len() >= REC
                            && ProbeHeader::decode_prefix(g).unwrap().flow == *i as u16 + 1
                    })
                    .unwrap();
                assert_eq!((g.len() / REC) as u64, n, "flow {}", i + 1);
                let mut stamps = Vec::new();
                for (k, rec) in g.chunks_exact(REC).enumerate() {
                    let h = ProbeHeader::decode_prefix(rec).unwrap();
                    assert_eq!(
                        (h.flow, h.seq, usize::from(h.len)),
                        (*i as u16 + 1, k as u32, REC)
                    );
                    stamps.push(h.tx_ns);
                }
                // Records of one write share its stamp: no write of a flow
                // among many carries more than 64 KiB of records (8 of 8000 B).
                let longest = stamps.chunk_by(|a, b| a == b).map(<[u64]>::len).max();
                assert!(
                    longest.is_some_and(|l| l <= 8),
                    "flow {}: {longest:?}",
                    i + 1
                );
                bytes.push(n as f64);
            }
            let (lo, hi) = bytes
                .iter()
                .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            assert!(lo > 0.0 && hi / lo < 2.0, "{bytes:?}");
            // Stopping on time needs the host to run the writer on time.
            check(took < 400_000_000 + 150_000_000, || format!("{took} ns"))?;
            for (_, o) in &out {
                check((o.send.duration_s - 0.4).abs() < 0.008, || {
                    format!("{:?}", o.send)
                })?;
            }
            Ok(())
        });
    }

    /// `--zerocopy` (MSG_ZEROCOPY is Linux's).
    #[cfg(target_os = "linux")]
    mod zerocopy {
        use super::*;

        /// Reads a connection's records of `rec` bytes until the peer closes
        /// and checks each as it comes: session 7, `flow`, numbered from 0 in
        /// order, transmit stamps never going back, the filler all zeros (the
        /// flows under test send `Payload::Zeros`, so a buffer rewritten
        /// while the kernel still sent from it would show). Returns the whole
        /// records read; a record cut short by the close is not one.
        fn read_records(c: TcpStream, rec: usize, flow: u16) -> u64 {
            read_records_from(c, rec, flow, 0)
        }

        /// [`read_records`] from record number `first` on.
        fn read_records_from(mut c: TcpStream, rec: usize, flow: u16, first: u64) -> u64 {
            use std::io::Read;
            let mut buf = vec![0u8; rec];
            let (mut n, mut last_tx) = (first, 0u64);
            while c.read_exact(&mut buf).is_ok() {
                let h = ProbeHeader::decode_prefix(&buf).unwrap();
                assert_eq!((h.session, h.flow, h.seq), (7, flow, n as u32));
                assert_eq!(h.record_len(&buf).unwrap(), Some(rec));
                assert!(h.tx_ns >= last_tx, "record {n}: stamp went back");
                last_tx = h.tx_ns;
                let body = &buf[wirebench_wire::LONG_HEADER_LEN.min(rec)..];
                assert!(body.iter().all(|&b| b == 0), "record {n}: filler changed");
                n += 1;
            }
            n - first
        }

        fn zc_plan(spec: FlowSpec, ms: u64) -> FlowPlan {
            let mut plan = flow(1.0, 100, Stop::DurationMs(ms));
            plan.spec = spec;
            plan.spec.payload = wirebench_model::Payload::Zeros;
            plan.transport = Transport::Tcp;
            plan.opts.zerocopy = Some(true);
            plan
        }

        /// On loopback the kernel takes every send zero-copy, reports each
        /// one complete and copied (it copies when it delivers to a local
        /// socket).
        fn assert_zc_loopback(z: Option<ZeroCopy>) {
            let z = z.expect("a --zerocopy flow reports zerocopy");
            assert!(z.used && z.sends > 0, "{z:?}");
            assert_eq!(z.completed, z.sends, "{z:?}");
            assert!(z.copied > 0 && z.copied <= z.completed, "{z:?}");
            assert_eq!(z.fallback, None);
        }

        /// `--zerocopy --max` over IPv4 and IPv6 loopback, small, 64000 B and
        /// 1 MiB records: exactly the records counted arrive, intact and in
        /// order, and the completions are counted.
        #[test]
        fn zerocopy_bulk_flows_deliver_intact_records_and_count_completions() {
            for (rec, at) in [
                (200, "127.0.0.1:0"),
                (64_000, "[::1]:0"),
                (1 << 20, "127.0.0.1:0"),
            ] {
                let l = std::net::TcpListener::bind(at).unwrap();
                let to = l.local_addr().unwrap();
                let reader =
                    std::thread::spawn(move || read_records(l.accept().unwrap().0, rec, 1));
                let s = TcpStream::connect(to).unwrap();
                let plan = zc_plan(FlowSpec::max_rate(rec as u32).unwrap(), 200);
                let mut j = job(plan, 1, mono_ns() + 2_000_000);
                j.cfg.transport = Transport::Tcp;
                let out = run_flow(j, Box::new(TcpTx::new(s)));
                assert_eq!(out.error, None, "{rec} B");
                assert!(out.send.packets > 2, "{rec} B: {:?}", out.send);
                assert_eq!(reader.join().unwrap(), out.send.packets, "{rec} B");
                assert_zc_loopback(out.zerocopy);
            }
        }

        /// A paced `--zerocopy` flow of 64000 B records over IPv6: every
        /// record due is sent on its schedule and arrives, with its completion
        /// counted.
        #[test]
        fn zerocopy_paced_flow_sends_every_record_on_schedule() {
            let l = std::net::TcpListener::bind("[::1]:0").unwrap();
            let to = l.local_addr().unwrap();
            let reader = std::thread::spawn(move || read_records(l.accept().unwrap().0, 64_000, 1));
            let s = TcpStream::connect(to).unwrap();
            let plan = zc_plan(FlowSpec::constant(200.0, 64_000).unwrap(), 300);
            let mut j = job(plan, 1, mono_ns() + 2_000_000);
            j.cfg.transport = Transport::Tcp;
            let out = run_flow(j, Box::new(TcpTx::new(s)));
            assert_eq!(out.error, None);
            assert_eq!(
                (out.send.packets, out.send.not_sent),
                (60, 0),
                "{:?}",
                out.send
            );
            assert_eq!(reader.join().unwrap(), 60);
            let z = out.zerocopy.clone();
            assert_zc_loopback(z);
            // One send per due batch at 200 records/s: not one per buffer.
            assert!(out.zerocopy.unwrap().sends >= 30);
        }

        /// Three `--zerocopy --max` flows on one shared writer: each one's
        /// records arrive intact and in order, and each counts its own
        /// completions.
        #[test]
        fn zerocopy_shared_writer_keeps_each_flows_records_and_completions() {
            const REC: usize = 64_000;
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let to = l.local_addr().unwrap();
            let socks: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(to).unwrap()).collect();
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    let c = l.accept().unwrap().0;
                    std::thread::spawn(move || {
                        use std::io::Read;
                        // The flow id is in the first record; read it first.
                        let mut head = [0u8; wirebench_wire::PROBE_HEADER_LEN];
                        let mut c2 = c.try_clone().unwrap();
                        c2.read_exact(&mut head).unwrap();
                        let flow = ProbeHeader::decode_prefix(&head).unwrap().flow;
                        // The rest of record 0, then the others.
                        let mut rest = vec![0u8; REC - head.len()];
                        c2.read_exact(&mut rest).unwrap();
                        (flow, 1 + read_records_from(c, REC, flow, 1))
                    })
                })
                .collect();
            let t0 = mono_ns() + 2_000_000;
            let jobs: Vec<(usize, FlowJob, TcpStream)> = socks
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let plan = zc_plan(FlowSpec::max_rate(REC as u32).unwrap(), 300);
                    let mut j = job(plan, i as u16 + 1, t0);
                    j.cfg.transport = Transport::Tcp;
                    j.tcp_write = 256 << 10;
                    (i, j, s)
                })
                .collect();
            let out = run_bulk_shared(jobs);
            let mut got: Vec<(u16, u64)> = readers.into_iter().map(|r| r.join().unwrap()).collect();
            got.sort();
            for (i, o) in &out {
                assert_eq!(o.error, None);
                assert!(o.send.packets > 2, "{:?}", o.send);
                assert_eq!(got[*i], (*i as u16 + 1, o.send.packets));
                assert_zc_loopback(o.zerocopy.clone());
            }
        }

        /// The kernel refuses SO_ZEROCOPY on a socket that is not TCP or UDP
        /// (here a Unix stream): the pool says why, once, and its sends are
        /// plain writes that deliver the bytes.
        #[test]
        fn a_refused_zerocopy_falls_back_to_plain_writes_and_says_why() {
            use std::io::Read;
            let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut pool = WritePool::new(a.as_raw_fd(), true, 4096, |x| x.fill(9));
            let i = pool.acquire(a.as_raw_fd()).unwrap();
            assert_eq!(pool.send(&a, i, 0..4096).unwrap(), 4096);
            pool.release(i);
            let mut got = vec![0u8; 4096];
            b.read_exact(&mut got).unwrap();
            assert!(got.iter().all(|&x| x == 9));
            let z = pool.finish(a.as_raw_fd(), 0).unwrap();
            assert!(!z.used && z.sends == 0, "{z:?}");
            assert!(z.fallback.unwrap().contains("SO_ZEROCOPY"));
        }
    }

    #[test]
    fn bulk_writes_shrink_with_many_flows_down_to_64_kib() {
        assert_eq!(bulk_write_bytes(1, 2), TCP_WRITE_BYTES);
        assert_eq!(bulk_write_bytes(2, 2), TCP_WRITE_BYTES);
        assert_eq!(bulk_write_bytes(4, 2), TCP_WRITE_BYTES / 2);
        assert_eq!(bulk_write_bytes(16, 2), 128 << 10);
        assert_eq!(bulk_write_bytes(60, 2), 64 << 10);
        assert_eq!(bulk_write_bytes(1000, 0), 64 << 10);
    }
}
