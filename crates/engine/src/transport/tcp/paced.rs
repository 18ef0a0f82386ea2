//! Paced TCP flows served by one writer thread: an earliest-deadline heap
//! of the flows' next records, and a `poll` over the flows whose socket is
//! full. With a thread per paced flow, 60 flows of 1 518 B records on two
//! CPUs spent a fifth of the sender's CPU switching between threads
//! (docs/performance.md, "One writer for paced TCP flows").

use super::zc::WritePool;
use super::{zc_finish_ms, BulkBatch, PACED_TCP_WRITE_BYTES, WRITE_TIMEOUT};
use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack};
use crate::net::{self, AsRawFd};
use crate::pacing::{
    gather, header, stop_reason, wait_or_stop, FlowEnd, FlowJob, FlowSent, Schedule, SendRec,
};
use crate::sys;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::ErrorKind;
use std::net::TcpStream;
use wirebench_wire::ProbeHeader;

/// Longest one wait of the writer, so that it looks at its stop flags
/// (Ctrl-C, a vanished receiver) at least this often.
const SLICE_NS: u64 = 50_000_000;

/// Batches a flow behind its schedule may write in one turn (each up to
/// [`PACED_TCP_WRITE_BYTES`]: 1 MiB in all, as one bulk write). One batch
/// per turn is about what a flow's share of a saturated link drains
/// between its turns, so the sockets never filled: every write then sent
/// its segments inline, in the writer's time, which the bed's emulators
/// (SCHED_FIFO) preempt, and the link stood idle whenever the writer did
/// (docs/performance.md, "Where S1's TCP at 1 518 B lost its link time").
const TURN_BATCHES: usize = 16;

/// Where a flow stands between the writer's turns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Waiting for its next record's deadline (in the heap).
    Idle,
    /// A batch in hand that the socket has no room for, or (zero-copy)
    /// no free buffer: waiting in the `poll` set.
    Blocked,
    Done,
}

/// One paced TCP flow on the shared writer: its schedule and accounting
/// as a flow thread keeps them ([`super::tcp_send`]), and the batch of
/// records it is writing.
struct PacedFlow {
    idx: usize,
    job: FlowJob,
    s: TcpStream,
    sched: Schedule,
    acc: SendRec,
    pool: WritePool,
    /// The batch's records: (scheduled time, size).
    meta: Vec<(u64, u32)>,
    b: BulkBatch,
    /// The pool's buffer holding the batch (None between batches).
    cur: Option<usize>,
    h: ProbeHeader,
    /// Sequence number of the batch's first record.
    seq: u32,
    pending: Option<(u64, u32)>,
    first_tx: u64,
    /// The batch's transmit stamp (CLOCK_REALTIME) and when it was taken
    /// (CLOCK_MONOTONIC): every record of a batch carries the one stamp
    /// and counts as sent at that time, as a flow thread's blocking write
    /// of the batch does.
    tx: u64,
    stamped: u64,
    /// When the flow found its socket full without having written since
    /// (0: it has not).
    blocked_since: u64,
    state: State,
    end: Option<FlowEnd>,
}

impl PacedFlow {
    fn new(idx: usize, mut job: FlowJob, s: TcpStream) -> Result<PacedFlow, String> {
        let sched = Schedule::new(&job.plan, job.t0, job.min_len())?;
        s.set_nonblocking(true)
            .map_err(|e| format!("TCP data connection: {e}"))?;
        let (room, cap) = batch_room(sched.max_len as usize);
        let pool = WritePool::new(
            s.as_raw_fd(),
            job.plan.opts.zerocopy == Some(true),
            cap,
            |b| job.plan.spec.payload.fill(b, job.plan.seed),
        );
        let acc = SendRec::new(job.cfg, job.log.take(), job.flow_id);
        Ok(PacedFlow {
            idx,
            h: header(&job),
            job,
            s,
            sched,
            acc,
            pool,
            meta: vec![(0, 0); room],
            b: BulkBatch::new(room),
            cur: None,
            seq: 0,
            pending: None,
            first_tx: 0,
            tx: 0,
            stamped: 0,
            blocked_since: 0,
            state: State::Idle,
            end: None,
        })
    }

    /// Scheduled time of the flow's next record (while Idle).
    fn next_at(&self) -> u64 {
        self.pending.map_or(0, |(at, _)| at)
    }

    /// The flow's turn: a batch, and while the socket takes each whole and
    /// records are still due, up to [`TURN_BATCHES`] in all. Each batch
    /// reads the clock (`clock`) afresh: a round of long turns must not
    /// judge a record's lateness (the 1 s limit) by the round's start.
    fn turn(&mut self, clock: impl Fn() -> u64) -> State {
        let mut st = self.start(clock());
        for _ in 1..TURN_BATCHES {
            let now = clock();
            if st != State::Idle || self.next_at() > now {
                break;
            }
            st = self.start(now);
        }
        st
    }

    /// Takes the records due at `now` (up to a batch) into a buffer,
    /// stamps them and writes what the socket takes.
    fn start(&mut self, now: u64) -> State {
        if self.cur.is_none() {
            match self.pool.acquire(self.s.as_raw_fd()) {
                Some(i) => self.cur = Some(i),
                None => return self.blocked(now),
            }
        }
        let room = self.meta.len();
        let n = gather(
            &mut self.sched,
            &mut self.pending,
            now,
            &mut self.acc,
            &mut self.meta,
            room,
            self.seq,
        );
        if n == 0 {
            // Only hopelessly late records were due (counted not sent).
            return self.between_batches();
        }
        let Some(cur) = self.cur else {
            return self.between_batches();
        };
        self.tx = realtime_ns();
        self.stamped = mono_ns();
        if self.first_tx == 0 {
            self.first_tx = self.tx;
        }
        let buf = self.pool.buf(cur);
        let mut o = 0;
        for (i, &(_, size)) in self.meta[..n].iter().enumerate() {
            self.h.seq = self.seq.wrapping_add(i as u32);
            self.h.tx_ns = self.tx;
            self.b.starts[i] = o;
            let rec = &mut buf[o..o + size as usize];
            let _ = self.h.encode_record(rec);
            if let Some(k) = &self.job.probe_key {
                k.sign(rec);
            }
            o += size as usize;
        }
        self.b.starts[n] = o;
        (self.b.n, self.b.done, self.b.off) = (n, 0, 0);
        self.write(now)
    }

    /// Writes what the socket takes of the batch in hand; a record counts
    /// as sent once its last byte is accepted.
    fn write(&mut self, now: u64) -> State {
        let Some(cur) = self.cur else {
            return self.start(now);
        };
        let b = &mut self.b;
        match self.pool.send(&self.s, cur, b.off..b.end()) {
            Ok(0) => self.fail("TCP data connection closed by the receiver".into()),
            Ok(k) => {
                b.off += k;
                while b.done < b.n && b.starts[b.done + 1] <= b.off {
                    let (at, size) = self.meta[b.done];
                    let sq = self.seq.wrapping_add(b.done as u32);
                    self.acc.record_sent(at, self.stamped, size, sq, self.tx);
                    b.done += 1;
                }
                self.blocked_since = 0;
                if !b.is_empty() {
                    // A partial write: the socket is full now.
                    return self.blocked(now);
                }
                self.seq = self.seq.wrapping_add(b.n as u32);
                (b.n, b.done, b.off) = (0, 0, 0);
                self.pool.release(cur);
                self.cur = None;
                self.between_batches()
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                self.blocked(now)
            }
            Err(e) => self.fail(format!("TCP data connection failed: {e}")),
        }
    }

    fn blocked(&mut self, now: u64) -> State {
        if self.blocked_since == 0 {
            self.blocked_since = now;
        }
        self.state = State::Blocked;
        self.state
    }

    /// A socket full for [`WRITE_TIMEOUT`] fails the flow, as a flow
    /// thread's blocking write times out.
    fn stuck(&mut self, now: u64) -> bool {
        if now.saturating_sub(self.blocked_since) <= WRITE_TIMEOUT.as_nanos() as u64 {
            return false;
        }
        self.fail(format!(
            "TCP data connection failed: the socket took nothing for {} s",
            WRITE_TIMEOUT.as_secs()
        ));
        true
    }

    fn between_batches(&mut self) -> State {
        self.state = if self.pending.is_some() {
            State::Idle
        } else {
            self.end = Some(Ok(None));
            State::Done
        };
        self.state
    }

    /// Ends the flow with `end`; the batch's records not wholly written
    /// are not sent.
    fn stop(&mut self, end: FlowEnd) -> State {
        let b = &mut self.b;
        for i in b.done..b.n {
            let (at, size) = self.meta[i];
            self.acc
                .record_not_sent(1, at, self.seq.wrapping_add(b.done as u32), size);
        }
        b.done = b.n;
        if let Some(cur) = self.cur.take() {
            self.pool.release(cur);
        }
        self.end = Some(end);
        self.state = State::Done;
        self.state
    }

    fn fail(&mut self, e: String) -> State {
        self.stop(Err(e))
    }

    fn finish(mut self, finish_by: u64) -> (usize, FlowSent) {
        let end = self.end.take().unwrap_or(Ok(None));
        let send = self.acc.summary(&self.sched);
        let left = finish_by.saturating_sub(mono_ns()) / 1_000_000;
        let zerocopy = self
            .pool
            .finish(self.s.as_raw_fd(), zc_finish_ms(&end).min(left));
        (
            self.idx,
            FlowSent {
                tcp: Some(sys::tcp_info(&self.s).unwrap_or_default()),
                tcp_cc: crate::sockopt::tcp_cc(&self.s),
                zerocopy,
                ..FlowSent::ran(self.first_tx, send, None, end)
            },
        )
    }
}

/// A batch of a paced flow of records up to `max_len` bytes: how many
/// records it holds at most, and its buffer's bytes.
fn batch_room(max_len: usize) -> (usize, usize) {
    let room = (PACED_TCP_WRITE_BYTES / max_len.max(1)).max(1);
    (room, room * max_len.max(1))
}

/// Bytes of write buffers the writer allocates and fills for a paced
/// flow of records up to `max_len` bytes before its first write (with
/// `--zerocopy`, the pool's several), for the session's start lead.
pub(crate) fn buffer_bytes(max_len: usize, zerocopy: bool) -> usize {
    let n = if zerocopy { super::zc::ZC_BUFFERS } else { 1 };
    batch_room(max_len).1 * n
}

/// Paced one-way TCP flows on one writer thread. The writer keeps a heap
/// of its flows' next deadlines; it waits for the earliest (sleeping, then
/// spinning `spin_ns` as a pacer does) or, while some flows' sockets are
/// full, in `poll` on those sockets until that deadline. Each flow due
/// gets one turn per round: the records due (up to
/// [`PACED_TCP_WRITE_BYTES`]) in one buffer, each record with its own
/// header and sequence number and the batch's one transmit stamp, one
/// non-blocking write; a flow behind its schedule writes further batches
/// while the socket takes them whole ([`TURN_BATCHES`]). What the socket does not take waits, stamped, for
/// room; meanwhile the flow's next records stay in its schedule (and
/// become one batch when it has room), as a flow thread blocked in its
/// write leaves them. Records, stamps, schedule error, not-sent counting
/// and the end are a flow thread's ([`super::tcp_send`]).
pub(crate) fn run_paced_shared(
    jobs: Vec<(usize, FlowJob, TcpStream)>,
    spin_ns: u64,
) -> Vec<(usize, FlowSent)> {
    tighten_timer_slack();
    raise_priority();
    let mut done = Vec::with_capacity(jobs.len());
    let mut flows = Vec::with_capacity(jobs.len());
    for (idx, job, s) in jobs {
        match PacedFlow::new(idx, job, s) {
            Ok(f) => flows.push(f),
            Err(e) => done.push((idx, FlowSent::failed(&e))),
        }
    }
    let Some(first) = flows.first() else {
        return done;
    };
    let (abort, cancel) = (first.job.abort.clone(), first.job.cancel);
    let mut heap = BinaryHeap::with_capacity(flows.len());
    for (k, f) in flows.iter_mut().enumerate() {
        f.pending = f.sched.next(f.job.t0);
        if f.between_batches() == State::Idle {
            heap.push(Reverse((f.next_at(), k)));
        }
    }
    let mut blocked: Vec<usize> = Vec::with_capacity(flows.len());
    let mut pfds = Vec::with_capacity(flows.len());
    let mut round: Vec<usize> = Vec::with_capacity(flows.len());
    let mut halt = None;
    loop {
        if let Some(h) = stop_reason(&abort, cancel) {
            halt = Some(h);
            break;
        }
        let next = heap.peek().map(|r: &Reverse<(u64, usize)>| r.0 .0);
        if blocked.is_empty() {
            let Some(at) = next else { break };
            if let Err(h) = wait_or_stop(&abort, cancel, at, spin_ns) {
                halt = Some(h);
                break;
            }
        } else {
            let now = mono_ns();
            blocked.retain(|&k| !flows[k].stuck(now));
            pfds.clear();
            for &k in &blocked {
                let f = &flows[k];
                // A flow waiting for zero-copy completions waits for its
                // error queue (POLLERR, always reported), not for room.
                let ev = if f.cur.is_some() { net::POLLOUT } else { 0 };
                pfds.push(net::pollfd(f.s.as_raw_fd(), ev));
            }
            let wait = next
                .map_or(SLICE_NS, |at| at.saturating_sub(now))
                .min(SLICE_NS);
            if net::poll_ns(&mut pfds, wait) > 0 {
                let now = mono_ns();
                for (j, &k) in blocked.iter().enumerate() {
                    if pfds[j].revents == 0 {
                        continue;
                    }
                    let f = &mut flows[k];
                    if f.write(now) == State::Idle {
                        heap.push(Reverse((f.next_at(), k)));
                    }
                }
                blocked.retain(|&k| flows[k].state == State::Blocked);
            }
        }
        // Every flow due by now, each once and for a bounded turn: a flow
        // whose backlog fills batch after batch does not hold up the others.
        let now = mono_ns();
        round.clear();
        while let Some(&Reverse((at, k))) = heap.peek() {
            if at > now {
                break;
            }
            heap.pop();
            round.push(k);
        }
        for &k in &round {
            let f = &mut flows[k];
            match f.turn(mono_ns) {
                State::Idle => heap.push(Reverse((f.next_at(), k))),
                State::Blocked => blocked.push(k),
                State::Done => {}
            }
        }
    }
    if let Some(h) = halt {
        for f in &mut flows {
            if f.state != State::Done {
                f.stop(Ok(Some(h)));
            }
        }
    }
    // The last zero-copy completions of every flow arrive together; one
    // flow's wait is the others' too.
    let finish_by = mono_ns() + 2_000_000_000;
    done.extend(flows.into_iter().map(|f| f.finish(finish_by)));
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::mono_ns;
    use crate::pacing::tests::{flow, job};
    use crate::plan::Stop;
    use std::io::Read;
    use std::time::Duration;
    use wirebench_testkit::{check, measure};
    use wirebench_wire::Transport;

    const REC: usize = 1518;

    /// Reads one connection's records to its end, after `stall`: every
    /// record whole, of one flow, numbered from 0 in order. Returns the
    /// flow and the records read.
    fn read_flow(mut c: TcpStream, stall: Duration) -> (u16, u64) {
        std::thread::sleep(stall);
        let mut buf = vec![0u8; REC];
        let (mut n, mut id) = (0u64, None);
        while c.read_exact(&mut buf).is_ok() {
            let h = ProbeHeader::decode_prefix(&buf).unwrap();
            let f = *id.get_or_insert(h.flow);
            assert_eq!(
                (h.session, h.flow, h.seq, usize::from(h.len)),
                (7, f, n as u32, REC)
            );
            n += 1;
        }
        (id.unwrap_or(0), n)
    }

    /// `rates.len()` paced TCP flows of `REC` B records to loopback
    /// readers on one writer for `ms`; reader i waits `stall(i)` before
    /// it reads. Returns each flow's outcome and what its reader got,
    /// by flow id.
    fn run(rates: &[f64], ms: u64, stall: impl Fn(usize) -> Duration) -> Vec<(FlowSent, u64)> {
        let mut readers = Vec::new();
        let mut socks = Vec::new();
        for i in 0..rates.len() {
            let st = stall(i);
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            if !st.is_zero() {
                // Before the handshake, which sizes the window's scale.
                let _ = socket2::SockRef::from(&l).set_recv_buffer_size(4096);
            }
            let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            // As the sender's connect sets it for paced records.
            s.set_nodelay(true).unwrap();
            if !st.is_zero() {
                let _ = socket2::SockRef::from(&s).set_send_buffer_size(4096);
            }
            let c = l.accept().unwrap().0;
            readers.push(std::thread::spawn(move || read_flow(c, st)));
            socks.push(s);
        }
        let t0 = mono_ns() + 5_000_000;
        let jobs = socks
            .into_iter()
            .zip(rates)
            .enumerate()
            .map(|(i, (s, &pps))| {
                let mut plan = flow(pps, REC as u32, Stop::DurationMs(ms));
                plan.transport = Transport::Tcp;
                let mut j = job(plan, i as u16 + 1, t0);
                j.cfg.transport = Transport::Tcp;
                (i, j, s)
            })
            .collect();
        let mut out = run_paced_shared(jobs, 0);
        out.sort_by_key(|(i, _)| *i);
        let mut got: Vec<(u16, u64)> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        got.sort();
        out.into_iter()
            .map(|(i, o)| {
                assert_eq!(got[i].0, i as u16 + 1);
                (o, got[i].1)
            })
            .collect()
    }

    /// Twenty-four paced flows of different rates on one writer: each
    /// sends exactly its schedule's records at its rate (±1 %), none late
    /// enough not to be sent, and its reader gets every one, whole and in
    /// order. The books are asserted; whether every record went out on
    /// time, and the rate, depend on the host running the writer on time:
    /// checks, measured once more when the host was seen busy or held.
    #[test]
    fn many_paced_flows_on_one_writer_keep_each_flows_rate_and_sequence() {
        let rates: Vec<f64> = (0..24).map(|i| 200.0 + 50.0 * i as f64).collect();
        measure("24 paced flows on one writer", || {
            let out = run(&rates, 1000, |_| Duration::ZERO);
            for ((o, got), &pps) in out.iter().zip(&rates) {
                assert_eq!(o.error, None);
                let want = pps as u64;
                assert_eq!(o.send.packets + o.send.not_sent, want, "{pps} pps");
                assert_eq!(*got, o.send.packets, "{pps} pps");
                assert!(o.tcp.is_some());
            }
            for ((o, _), &pps) in out.iter().zip(&rates) {
                check(
                    o.send.not_sent == 0 && (o.send.rate_pps / pps - 1.0).abs() < 0.01,
                    || format!("{pps} pps: {:?}", o.send),
                )?;
            }
            Ok(())
        });
    }

    /// One flow's reader stalls (its socket fills and stays full for
    /// 300 ms) while the flow's schedule asks for far more than loopback
    /// takes: the other flows on the writer keep their schedules (no
    /// record late, rate ±1 %), and the stalled flow is written again once
    /// its reader reads, its records arriving whole and in order. A writer
    /// that waited on the full socket, or served the greedy flow's backlog
    /// before the others, fails the first; one that forgot a blocked flow
    /// fails the second. Books asserted; schedule keeping (nothing
    /// unsent, rate, p99 lateness) checked as the host's timing, as above.
    #[test]
    fn a_stalled_greedy_flow_starves_no_other_and_is_not_starved() {
        let mut rates = vec![1000.0; 8];
        rates[0] = 1_000_000.0;
        measure("a stalled greedy flow beside 7 paced ones", || {
            let out = run(&rates, 800, |i| {
                Duration::from_millis(if i == 0 { 300 } else { 0 })
            });
            let (greedy, got) = &out[0];
            assert_eq!(greedy.error, None);
            assert_eq!(greedy.send.packets, *got);
            // 4 KiB of socket buffer at each end holds a few records: most of
            // what it sent went out after the stall.
            assert!(*got > 1000, "greedy flow sent {got} records");
            for (o, got) in &out[1..] {
                assert_eq!(o.error, None);
                assert_eq!(o.send.packets + o.send.not_sent, 800, "{:?}", o.send);
                assert_eq!(*got, o.send.packets, "{:?}", o.send);
            }
            for (o, _) in &out[1..] {
                check(
                    o.send.not_sent == 0
                        && (o.send.rate_pps / 1000.0 - 1.0).abs() < 0.01
                        && o.send.schedule_error_s.p99 < 0.1,
                    || format!("{:?}", o.send),
                )?;
            }
            Ok(())
        });
    }

    /// A flow a second behind its schedule, its socket with room for
    /// several MiB and its reader reading: one turn writes [`TURN_BATCHES`] whole batches (each
    /// record once, numbered in order), not one; a flow with fewer records
    /// due writes what is due and waits for its next deadline. A writer
    /// that gave a turn one batch fails the first count.
    #[test]
    fn a_flow_behind_its_schedule_writes_several_batches_in_one_turn() {
        // A whole turn (1 MiB) must fit in the socket at once, which the
        // default sysctl caps (212 KiB) do not allow without the FORCE
        // options.
        if !wirebench_testkit::can_run_as_root(
            "a_flow_behind_its_schedule_writes_several_batches_in_one_turn",
            "root (SO_SNDBUFFORCE/SO_RCVBUFFORCE: 8 MiB socket buffers past net.core.wmem_max)",
        ) {
            return;
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // Room for the whole backlog at both ends (forced past the
        // sysctl caps where the test may), and a reader from the start.
        net::set_rcvbuf(l.as_raw_fd(), 8 << 20);
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        net::set_sndbuf(s.as_raw_fd(), 8 << 20);
        let c = l.accept().unwrap().0;
        let reader = std::thread::spawn(move || read_flow(c, Duration::ZERO));
        let now = mono_ns();
        // 3 000 records/s from a second ago: 3 000 due, far more than a turn.
        let mut plan = flow(3000.0, REC as u32, Stop::DurationMs(1010));
        plan.transport = Transport::Tcp;
        let mut j = job(plan, 1, now - 1_000_000_000);
        j.cfg.transport = Transport::Tcp;
        let mut f = PacedFlow::new(0, j, s).unwrap();
        f.pending = f.sched.next(f.job.t0);
        let (room, _) = batch_room(REC);
        assert_eq!(f.turn(|| now), State::Idle);
        assert_eq!(f.seq as usize, TURN_BATCHES * room);
        assert!(f.next_at() <= now);
        // The rest of what is due, then the flow is ahead of its records.
        let mut turns = 1;
        while f.next_at() <= now && turns < 10 {
            assert_eq!(f.turn(|| now), State::Idle);
            turns += 1;
        }
        let due = 3001;
        assert_eq!(f.seq, due);
        assert_eq!(turns, due.div_ceil((TURN_BATCHES * room) as u32));
        assert!(f.next_at() > now);
        drop(f);
        assert_eq!(reader.join().unwrap(), (1, u64::from(due)));
    }
}
