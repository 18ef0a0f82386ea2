//! The live-frame sender (Linux 5.18+): one prebuilt frame, and a small
//! XDP program that `BPF_PROG_TEST_RUN` runs `repeat` times in live-frame
//! mode (`BPF_F_TEST_XDP_LIVE_FRAMES`). Each run stamps its copy of the
//! frame (sequence from a counter in a BPF array, transmit time when the
//! program ran) and returns `XDP_TX`, which the kernel turns into a
//! redirect out of the sending interface: on veth, `ndo_xdp_xmit` puts
//! the frame straight into the peer's XDP ring, with no skb and no copy,
//! where the peer's XDP program (the receiver's) takes it.
//!
//! Nothing is attached to the sending interface: the program runs there
//! only inside the `bpf(2)` call. It is attached, in generic mode, to
//! the namespace's `lo`, where it passes every frame, only to keep it in
//! the kernel's XDP dispatcher between calls ([`hold_dispatcher`]). The
//! program, its map and that attachment (a BPF link) are file
//! descriptors of this process, gone with it (SIGKILL included).
//!
//! There is no back-pressure: a frame the peer's ring has no room for is
//! dropped by the driver and counted in the sending interface's
//! `tx_queue_N_xdp_xmit_errors` (`ethtool -S`), which the sender reads
//! after every call. The program's counter says how many frames it
//! stamped, so "sent" is exact: stamped minus refused.

use super::frame::{self, Endpoints};
use super::prog::{self, live};
use super::sys::{self, EthStats, Words};
use super::tx::TxFlow;
use super::{kernel, XdpError, BATCH};
use crate::clock::{mono_ns, raise_priority, realtime_ns, wait_until};
use crate::pacing::{gather, min_probe_len, FlowSent, Schedule, SendRec};
use std::os::fd::{AsRawFd, OwnedFd};
use wirebench_wire::{ProbeHeader, PROBE_HEADER_LEN};

/// Name the program is loaded under.
const PROG_NAME: &str = "wirebench_live";

/// Where the live sender's transmit times are taken, for the document.
pub(crate) const TX_STAMP: &str =
    "tx time when the program stamped the frame, before the transmit (bpf_ktime_get_tai_ns)";

/// UDP port of [`LiveTx::peer_takes`]' frames: discard (RFC 863), which
/// the receiver's program passes to its kernel.
const DISCARD_PORT: u16 = 9;

/// Frames of the burst [`open_for`] sends before the flow: 16 times
/// veth's 256-frame ring. A peer whose receive half runs in the sender's
/// call (veth's NAPI as a softirq of the sending CPU, the default) takes
/// them all; one whose receive half runs in a thread of its own
/// (threaded NAPI) overflowed (measured: 2-2.5 % of a flood refused even
/// under [`send_flow`]'s rate limit, against none by the AF_XDP ring).
const CHECK_BURST: u32 = 4096;

/// Frames per call at the start. While the interface takes (almost)
/// every frame, each call doubles it up to [`MOST_PER_CALL`] (calls are
/// cheap once the dispatcher holds the program, [`hold_dispatcher`]).
/// The first call it refused more than [`REFUSED_PER_MILLE`] of (on veth:
/// the peer's 256-frame ring was full, its receive half, e.g. a
/// threaded-NAPI kernel thread, drains slower than the program fills)
/// turns on a rate limit, AIMD: calls of [`PACED_CALL`] frames spaced to
/// the rate, which starts at [`CUT`] of what the interface took in that
/// call, grows by [`GROW`] per call taken whole and is cut by [`CUT`]
/// after each call with refusals (and a [`BACK_OFF_US`] sleep).
const FIRST_PER_CALL: u64 = 4096;
/// Most frames per call: 13-20 ms at this host's 3-5 Mpps, so a timed
/// flood ends on time and a refusal is acted on soon.
const MOST_PER_CALL: u64 = 1 << 16;
/// Refused frames per thousand stamped above which the rate is cut.
const REFUSED_PER_MILLE: u64 = 1;
/// Frames per call under the rate limit: the veth peer's ring.
const PACED_CALL: u64 = 256;
/// Rate growth per call taken whole under the rate limit.
const GROW: f64 = 1.01;
/// Rate cut after a call with refusals.
const CUT: f64 = 0.7;
/// Sleep after a call the interface refused frames of: lets the peer's
/// receive half drain its ring.
const BACK_OFF_US: u64 = 200;

/// A loaded live-frame sender for one flow's frame.
pub struct LiveTx {
    prog: OwnedFd,
    _state_fd: OwnedFd,
    state: Words,
    frame: Vec<u8>,
    /// Where the probe header starts in `frame`.
    hl: usize,
    ifindex: u32,
    /// The interface's XDP transmissions (frames its peer's ring took).
    xmit: EthStats,
    /// [`Self::xmit`] at the last reading.
    xmit_last: u64,
    /// The interface's name.
    pub iface: String,
    /// The program attached to `lo` (generic XDP, by a link this process
    /// holds), which keeps it in the kernel's XDP dispatcher between
    /// calls ([`hold_dispatcher`]), or why not.
    hold: Result<OwnedFd, String>,
    /// Frames per second of the last call (a timed flood's last calls
    /// are cut to its end by it).
    rate: f64,
}

/// What one [`LiveTx::run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ran {
    /// Frames the program stamped in this call (sequence numbers taken).
    pub stamped: u64,
    /// Frames the interface refused in this call (its transmit errors).
    pub refused: u64,
}

impl LiveTx {
    /// Loads the program for a frame to `ep` out of `iface` whose UDP
    /// payload (`payload`, at least a probe header) starts with the probe
    /// header `payload[..24]`, its sequence and time fields to be set.
    pub fn open(iface: &str, ep: &Endpoints, payload: &[u8]) -> Result<LiveTx, XdpError> {
        let ifindex = super::ifindex(iface)?;
        let hl = ep.header_len();
        let (f, udp_sum) = build(ep, payload);
        let (prog, state_fd, state) = load(hl, udp_sum, ifindex)?;
        let hold = hold_dispatcher(&prog);
        // veth counts the frames its peer's ring took per queue
        // (`tx_queue_N_xdp_xmit`); a frame it did not take is counted as
        // an error only when the peer has a ring at all, so the sender
        // counts what went, not what failed.
        let mut xmit = EthStats::open(iface, |n| {
            n.starts_with("tx_queue_") && n.ends_with("_xdp_xmit")
        })
        .map_err(|e| {
            XdpError::Unsupported(format!(
                "{iface} has no XDP transmit counter (ethtool -S tx_queue_N_xdp_xmit): {e}"
            ))
        })?;
        let xmit_last = xmit.read().map_err(kernel("ethtool statistics"))?;
        Ok(LiveTx {
            prog,
            _state_fd: state_fd,
            state,
            frame: f,
            hl,
            ifindex,
            xmit,
            xmit_last,
            iface: iface.to_string(),
            rate: 1e6,
            hold,
        })
    }

    /// Why each call waits for the kernel's RCU grace periods (the program
    /// is not held in the XDP dispatcher, [`hold_dispatcher`]); None when
    /// it is held.
    pub fn unheld(&self) -> Option<&str> {
        self.hold.as_ref().err().map(String::as_str)
    }

    /// Frames stamped so far (the next sequence number).
    pub fn stamped(&self) -> u64 {
        self.state.load(live::SEQ)
    }

    /// Frames the interface transmitted since the last call.
    fn took(&mut self) -> Result<u64, XdpError> {
        let now = self.xmit.read().map_err(kernel("ethtool statistics"))?;
        let d = now.wrapping_sub(self.xmit_last);
        self.xmit_last = now;
        Ok(d)
    }

    /// How many of a burst of `n` frames to the discard port (never
    /// probes) the interface transmitted: none on veth when the peer runs
    /// no XDP program (the frames vanish uncounted), fewer than `n` when
    /// the peer's ring overflowed. The sequence counter starts again at 0
    /// afterwards.
    pub fn peer_takes(&mut self, n: u32) -> Result<u64, XdpError> {
        let udp = self.hl - 8;
        let mut f = self.frame.clone();
        f[udp + 2..udp + 4].copy_from_slice(&DISCARD_PORT.to_be_bytes());
        self.took()?;
        let r = sys::prog_run_live(&self.prog, &f, self.ifindex, n).map_err(|source| {
            XdpError::Kernel {
                what: "BPF_PROG_TEST_RUN (live frames)",
                source,
            }
        });
        self.state.store(live::SEQ, 0);
        r?;
        self.took()
    }

    /// Runs the program `n` times (one `bpf(2)` call). An interrupted
    /// call (a signal) counts what it did; any other error is returned
    /// after the frames it stamped are counted by [`LiveTx::stamped`].
    pub fn run(&mut self, n: u32) -> Result<Ran, XdpError> {
        let before = self.stamped();
        let r = sys::prog_run_live(&self.prog, &self.frame, self.ifindex, n);
        let stamped = self.stamped() - before;
        let ran = Ran {
            stamped,
            refused: stamped.saturating_sub(self.took()?),
        };
        match r {
            Ok(()) => Ok(ran),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(ran),
            Err(source) => Err(XdpError::Kernel {
                what: "BPF_PROG_TEST_RUN (live frames)",
                source,
            }),
        }
    }
}

/// Sends the frame `n` times per call for `secs` seconds, as fast as the
/// kernel runs it: the path-limit measurement of the live sender.
/// Returns (stamped, refused).
pub fn live_flood(
    iface: &str,
    ep: Endpoints,
    size: u32,
    secs: f64,
    n: u32,
) -> Result<(u64, u64), String> {
    let mut payload = vec![0x5au8; size as usize];
    let h = wirebench_wire::ProbeHeader {
        flags: 0,
        session: 1,
        flow: 0,
        len: size as u16,
        seq: 0,
        tx_ns: 0,
    };
    h.encode(&mut payload).map_err(|e| e.to_string())?;
    let mut tx = LiveTx::open(iface, &ep, &payload).map_err(|e| e.to_string())?;
    crate::clock::raise_priority();
    let end = crate::clock::mono_ns() + (secs * 1e9) as u64;
    let mut total = Ran::default();
    while crate::clock::mono_ns() < end {
        let r = tx.run(n).map_err(|e| e.to_string())?;
        total.stamped += r.stamped;
        total.refused += r.refused;
    }
    Ok((total.stamped, total.refused))
}

/// Each `BPF_PROG_TEST_RUN` of an XDP program puts it into the kernel's
/// XDP dispatcher and takes it out again, and each change waits for an
/// RCU grace period (`bpf_dispatcher_change_prog`, `synchronize_rcu`;
/// seen in /proc/PID/stack on Linux 6.18): two per call, 24 ms per call
/// on an idle host, 100-200 ms on a loaded one, during which nothing is
/// sent. A program the dispatcher already holds for an attachment is
/// only counted, not changed: so the live program is also attached, in
/// generic (skb) mode, to the sender's namespace's `lo`, where it passes
/// every frame (only frames "arriving" on the sending interface are
/// stamped). The attachment is a BPF link this process holds: gone with
/// it, SIGKILL included. Where it cannot be attached (another program on
/// `lo`), the calls pay the grace periods.
///
/// Only in a test-bed node's namespace, whose `lo` is the test-bed's: on
/// any other host or namespace a generic XDP program on `lo` would slow
/// every loopback packet of others for the run, so there the calls pay
/// the grace periods and the document says so.
fn hold_dispatcher(prog: &OwnedFd) -> Result<OwnedFd, String> {
    if !super::napi::in_testbed_node() {
        return Err("not in a test-bed node's namespace, lo left alone".into());
    }
    let lo = sys::ifindex("lo").map_err(|e| format!("lo: {e}"))?;
    sys::xdp_link(prog, lo, sys::XDP_FLAGS_SKB).map_err(|e| format!("lo: {e}"))
}

/// The frame to `ep` carrying `payload` (a probe header first) with its
/// sequence and time zero, and for IPv6 the one's-complement sum of its
/// UDP checksum's inputs as the program loads 16-bit words (native
/// order; the complement of the checksum `frame::finish` wrote).
fn build(ep: &Endpoints, payload: &[u8]) -> (Vec<u8>, Option<u16>) {
    use wirebench_wire::probe::field;
    let hl = ep.header_len();
    let mut f = vec![0u8; hl + payload.len()];
    frame::write_headers(&mut f, ep);
    f[hl..].copy_from_slice(payload);
    f[hl + field::SEQ.start..hl + field::TX_TIME.end].fill(0);
    frame::finish(&mut f, ep.v6());
    let udp_sum = ep.v6().then(|| !u16::from_ne_bytes([f[hl - 2], f[hl - 1]]));
    (f, udp_sum)
}

/// The program for frames whose probe header starts at `hl`, its state
/// map (clock word set) and that map's mapping.
fn load(
    hl: usize,
    udp_sum: Option<u16>,
    ifindex: u32,
) -> Result<(OwnedFd, OwnedFd, Words), XdpError> {
    let state_fd = sys::map_create_flags(
        sys::MAP_ARRAY,
        4,
        (live::WORDS * 8) as u32,
        1,
        sys::MAP_F_MMAPABLE,
        "wb_live",
    )
    .map_err(kernel("BPF live-sender map"))?;
    let state = Words::map(&state_fd, live::WORDS).map_err(kernel("BPF map mmap"))?;
    state.store(live::CLOCK, (-sys::tai_offset_ns()) as u64);
    let code = prog::live_tx_program(state_fd.as_raw_fd(), hl, udp_sum, ifindex);
    let prog = sys::prog_load(&code, PROG_NAME)
        .map_err(|(source, log)| XdpError::Verifier { source, log })?;
    Ok((prog, state_fd, state))
}

/// A live sender for flow `f` out of `iface` to `ep`, checked to reach
/// the peer ([`LiveTx::peer_takes`]) and, unless `strict` (`--xdp-tx
/// live`), to find the peer's ring keeping up with a burst; else why
/// not.
pub(crate) fn open_for(
    iface: &str,
    ep: &Endpoints,
    f: &TxFlow,
    strict: bool,
) -> Result<LiveTx, String> {
    let size = f
        .plan
        .spec
        .max_payload()
        .max(min_probe_len(f.probe_key.is_some()));
    let mut payload = vec![0u8; size as usize];
    if let Some(rest) = payload.get_mut(PROBE_HEADER_LEN..) {
        f.plan.spec.payload.fill(rest, f.plan.seed);
    }
    let h = ProbeHeader {
        flags: 0,
        session: f.session,
        flow: f.flow_id,
        len: size as u16,
        seq: 0,
        tx_ns: 0,
    };
    h.encode(&mut payload).map_err(|e| e.to_string())?;
    let mut tx = LiveTx::open(iface, ep, &payload).map_err(|e| match e {
        XdpError::Kernel { source, .. } | XdpError::Verifier { source, .. }
            if matches!(
                source.raw_os_error(),
                Some(libc::EINVAL | libc::ENOTSUP | 524)
            ) =>
        {
            format!("the kernel refused live frames: {source}")
        }
        e => e.to_string(),
    })?;
    match tx.peer_takes(CHECK_BURST) {
        Ok(0) => Err(format!(
            "{iface} did not transmit a live frame (the receiving end runs no XDP program)"
        )),
        Ok(took) if !strict && took * 1000 < u64::from(CHECK_BURST) * 999 => Err(format!(
            "{} of a burst of {CHECK_BURST} frames overflowed the receiving end's ring (its \
             receive half runs apart from the sender, e.g. threaded NAPI: live frames have \
             no back-pressure, the ring's queue has)",
            u64::from(CHECK_BURST) - took
        )),
        Ok(_) => Ok(tx),
        Err(e) => Err(format!("the kernel refused live frames: {e}")),
    }
}

/// Sends flow `f` (a `--max` flood of one payload size) by live frames:
/// what it sent, and how many of those frames the interface refused (the
/// sending host's drops). Every stamped frame is recorded as sent (it
/// took a sequence number); the refused ones are the sending host's loss
/// in the loss split, as the ring path's driver drops are. Per-frame
/// send times are not known: a call's frames are recorded at the call's
/// end, the first frame at its start, so the flow's span is the calls'.
pub(crate) fn send_flow(tx: &mut LiveTx, f: TxFlow) -> (FlowSent, u64) {
    raise_priority();
    crate::clock::tighten_timer_slack();
    let mut sched = match Schedule::new(&f.plan, f.t0, min_probe_len(false)) {
        Ok(s) => s,
        Err(e) => return (FlowSent::failed(&e), 0),
    };
    let size = (tx.frame.len() - tx.hl) as u32;
    let mut acc = SendRec::new(f.cfg, None, f.flow_id);
    let mut meta = [(0u64, 0u32); BATCH];
    let (mut seq, mut first_tx, mut refused) = (0u32, 0u64, 0u64);
    let mut per_call = FIRST_PER_CALL;
    // The AIMD rate limit (frames/s), once the interface refused frames.
    let mut limit: Option<f64> = None;
    wait_until(f.t0);
    let mut pending = sched.next(mono_ns());
    let end = loop {
        if pending.is_none() {
            break Ok(None);
        }
        if let Some(h) = crate::pacing::stop_reason(&f.abort, f.cancel) {
            break Ok(Some(h));
        }
        let now = mono_ns();
        // A timed flood ends on time: a call holds at most what the last
        // call's rate sends in the time left.
        let mut want_max = per_call;
        if let Some(end_at) = sched.end_at {
            let left_s = end_at.saturating_sub(now) as f64 / 1e9;
            want_max = want_max.min((tx.rate * left_s) as u64 + BATCH as u64);
        }
        let mut want = 0u64;
        while want < want_max {
            let room = (want_max - want).min(BATCH as u64) as usize;
            let k = gather(
                &mut sched,
                &mut pending,
                now,
                &mut acc,
                &mut meta,
                room,
                seq.wrapping_add(want as u32),
            );
            // One payload size (`live_allowed`): every frame is `frame`.
            debug_assert!(meta[..k].iter().all(|&(_, s)| s == size));
            want += k as u64;
            if k < room {
                break;
            }
        }
        if want == 0 {
            continue;
        }
        let t_start = mono_ns();
        let wall = realtime_ns();
        let ran = tx.run(want as u32);
        let t_end = mono_ns();
        let ran = match ran {
            Ok(r) => r,
            Err(e) => {
                acc.record_not_sent(want, t_end, seq, size);
                break Err(e.to_string());
            }
        };
        for j in 0..ran.stamped {
            let at = if first_tx == 0 && j == 0 {
                t_start
            } else {
                t_end
            };
            acc.record_sent(at, at, size, seq.wrapping_add(j as u32), wall);
        }
        if first_tx == 0 && ran.stamped > 0 {
            first_tx = wall;
        }
        seq = seq.wrapping_add(ran.stamped as u32);
        refused += ran.refused;
        if ran.stamped < want {
            // Interrupted by a signal: what was gathered and not stamped
            // did not leave.
            acc.record_not_sent(want - ran.stamped, t_end, seq, size);
        }
        if ran.stamped > 0 {
            tx.rate = ran.stamped as f64 / ((t_end - t_start) as f64 / 1e9).max(1e-6);
            if let Some(r) = limit {
                tx.rate = tx.rate.min(r);
            }
        }
        let secs = ((t_end - t_start) as f64 / 1e9).max(1e-6);
        if ran.refused * 1000 > ran.stamped * REFUSED_PER_MILLE {
            let took = (ran.stamped - ran.refused) as f64 / secs;
            limit = Some(limit.unwrap_or(took) * CUT);
            per_call = PACED_CALL;
            std::thread::sleep(std::time::Duration::from_micros(BACK_OFF_US));
        } else if let Some(r) = limit {
            limit = Some(r * GROW);
        } else {
            per_call = (per_call * 2).min(MOST_PER_CALL);
        }
        if let Some(r) = limit {
            let gap = (per_call as f64 / r.max(1.0) * 1e9) as u64;
            // Sleeping only: the CPU may be the peer's receive half's.
            crate::clock::wait_until_spin(t_start + gap, 0);
        }
    };
    (
        FlowSent::ran(first_tx, acc.summary(&sched), None, end),
        refused,
    )
}

#[cfg(test)]
mod tests {
    use super::frame::test_endpoints as ep;
    use super::*;
    use wirebench_wire::probe::field;

    /// The verifier takes the program (root only), and each run on a copy
    /// of the frame (not live: `BPF_PROG_TEST_RUN` hands the frame back)
    /// takes the next sequence number, stamps the time now on the
    /// probes' clock, sets a valid UDP checksum over IPv6 (0 over IPv4)
    /// and leaves every other byte alone.
    #[test]
    fn each_run_stamps_the_next_sequence_the_time_and_a_valid_checksum() {
        if !sys::is_root() {
            eprintln!("SKIPPED: needs root (loading BPF programs)");
            return;
        }
        for e in [
            ep("10.0.1.1:9001", "10.0.1.2:9000"),
            ep("[fd00::1]:9001", "[fd00::2]:9000"),
        ] {
            let mut payload = vec![0xa5u8; 64];
            let h = ProbeHeader {
                flags: 0,
                session: 7,
                flow: 1,
                len: 64,
                seq: 0,
                tx_ns: 0,
            };
            h.encode(&mut payload).unwrap();
            let hl = e.header_len();
            let (f, udp_sum) = build(&e, &payload);
            let (prog, _map, state) = match load(hl, udp_sum, 1) {
                Ok(x) => x,
                Err(e) => panic!("{e}"),
            };
            let mut out = vec![0u8; f.len() + 64];
            for k in 0..5u32 {
                let before = realtime_ns();
                let (ret, len) = sys::prog_test_run_out(&prog, &f, &mut out).unwrap();
                let after = realtime_ns();
                assert_eq!(ret, 3, "XDP_TX");
                assert_eq!(len, f.len());
                let o = &out[..len];
                let got = ProbeHeader::decode(&o[hl..]).unwrap();
                assert_eq!(got.seq, k);
                assert_eq!((got.session, got.flow, got.len), (7, 1, 64));
                // The program's TAI stamp less the TAI offset: this host's
                // realtime clock (the offset is whole seconds, exact).
                assert!(
                    got.tx_ns >= before && got.tx_ns <= after,
                    "{before} <= {} <= {after}",
                    got.tx_ns
                );
                let seq_at = hl + field::SEQ.start;
                let csum = hl - 2..hl;
                if e.v6() {
                    let mut c = o.to_vec();
                    frame::finish(&mut c, true);
                    assert_eq!(&o[csum.clone()], &c[csum.clone()], "run {k}");
                    assert_ne!(&o[csum.clone()], &[0, 0]);
                } else {
                    assert_eq!(&o[csum.clone()], &[0, 0]);
                }
                assert_eq!(&o[..csum.start], &f[..csum.start]);
                assert_eq!(&o[hl..seq_at], &f[hl..seq_at]);
                assert_eq!(&o[hl + field::TX_TIME.end..], &f[hl + field::TX_TIME.end..]);
            }
            assert_eq!(state.load(live::SEQ), 5);
        }
    }

    /// A frame too short for the probe header is dropped, not written
    /// past its end (the verifier insists on the check; this runs it).
    #[test]
    fn a_frame_without_a_probe_header_is_dropped() {
        if !sys::is_root() {
            eprintln!("SKIPPED: needs root (loading BPF programs)");
            return;
        }
        let e = ep("10.0.1.1:9001", "10.0.1.2:9000");
        let (f, _) = build(&e, &[0u8; 24]);
        let (prog, _map, _state) = load(e.header_len() + 16, None, 1).unwrap();
        let mut out = vec![0u8; f.len()];
        let (ret, _) = sys::prog_test_run_out(&prog, &f, &mut out).unwrap();
        assert_eq!(ret, 1, "XDP_DROP");
    }
}
