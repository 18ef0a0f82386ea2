//! One UDP stream of iperf3 datagrams measured per packet: loss, bursts,
//! reordering, delay and jitter from the sender's own stamps, with the
//! same accumulator as wirebench's flows. Both ends use it: the server for
//! what clients send, the client for what an iperf3 server sends (`-R`).

use crate::proto::udp_header;
use wirebench_engine::result::FlowResult;
use wirebench_stats::{FlowConfig, IpVersion, RecvAccumulator, RecvSummary};
use wirebench_wire::Transport;

/// Path MTU assumed for the framing model (neither end knows the path).
pub(crate) const ASSUMED_MTU: u32 = 1500;

/// Which of our clocks the sender's stamps are on: iperf3 3.12 stamps with
/// its monotonic clock, older versions with the wall clock.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum StampClock {
    Wall,
    Mono,
}

/// One UDP stream being measured.
pub(crate) struct UdpRx {
    pub(crate) acc: RecvAccumulator,
    wide: bool,
    pub(crate) clock: Option<StampClock>,
    /// Payload bytes of the datagrams recorded.
    pub(crate) bytes: u64,
    /// Highest sequence number seen (what iperf3 reports as `packets`).
    pub(crate) highest: u64,
    pub(crate) last_rx_mono: u64,
    /// Filled in when the stream ends.
    pub(crate) summary: RecvSummary,
}

impl UdpRx {
    /// A stream with 32- or (`wide`) 64-bit sequence numbers.
    pub(crate) fn new(wide: bool, ip: IpVersion) -> UdpRx {
        UdpRx {
            acc: RecvAccumulator::new(FlowConfig {
                transport: Transport::Udp,
                ip,
                mtu: ASSUMED_MTU,
                interval_ns: None,
            }),
            wide,
            clock: None,
            bytes: 0,
            highest: 0,
            last_rx_mono: 0,
            summary: RecvSummary::default(),
        }
    }

    /// Records datagram `d` that arrived at `now_mono` (our monotonic
    /// clock) and `now_wall` (the wall clock, the kernel's stamp when
    /// there is one); false when it is not an iperf3 datagram.
    pub(crate) fn record(&mut self, d: &[u8], now_mono: u64, now_wall: u64) -> bool {
        let Some((stamp, seq)) = udp_header::read(d, self.wide) else {
            return false;
        };
        if seq == 0 {
            return false;
        }
        // Without an offset exchange the first stamp tells which clock
        // the sender used: the one it is nearer to.
        let clock =
            *self
                .clock
                .get_or_insert(if now_wall.abs_diff(stamp) <= now_mono.abs_diff(stamp) {
                    StampClock::Wall
                } else {
                    StampClock::Mono
                });
        let arrival = match clock {
            StampClock::Wall => now_wall,
            StampClock::Mono => now_mono,
        };
        let delay = (arrival as i64).saturating_sub(stamp as i64);
        self.acc
            .record((seq - 1) as u32, delay, arrival, d.len() as u32);
        self.bytes += d.len() as u64;
        self.highest = self.highest.max(seq);
        self.last_rx_mono = now_mono;
        true
    }

    /// Closes the stream: its summary is taken once.
    pub(crate) fn finish(&mut self) {
        self.summary = self.acc.summary(None);
    }

    /// Puts the closed stream's receive figures (counts, throughput,
    /// framing, delay, jitter and their histograms) into `f`.
    pub(crate) fn fill(&self, f: &mut FlowResult) {
        let s = &self.summary;
        f.received.counts = s.counts.clone();
        f.throughput_bps = s.throughput_bps;
        f.frames = s.frames;
        f.delay_s = s.delay_s;
        f.jitter_s = s.jitter_s;
        f.delay_hist = s.delay_hist.clone();
        f.ipdv_hist = s.ipdv_hist.clone();
    }
}

/// A stream is finished once nothing arrived on it for this long after
/// TEST_END (what was sent before it is still landing) ...
pub(crate) const QUIET_NS: u64 = 50_000_000;
/// ... and at the latest this long after TEST_END.
pub(crate) const DRAIN_MAX_NS: u64 = 2_000_000_000;

/// When a stream being read is over, once the test has ended.
#[derive(Default)]
pub(crate) struct Drain {
    last_data: u64,
    start: u64,
}

impl Drain {
    /// Data arrived at `now`.
    pub(crate) fn data(&mut self, now: u64) {
        self.last_data = now;
    }

    /// True when the stream is finished: the test has ended (`draining`)
    /// and the stream has been quiet for [`QUIET_NS`], or the drain took
    /// [`DRAIN_MAX_NS`].
    pub(crate) fn over(&mut self, draining: bool, now: u64) -> bool {
        if !draining {
            return false;
        }
        if self.start == 0 {
            self.start = now;
        }
        now.saturating_sub(self.last_data.max(self.start)) >= QUIET_NS
            || now - self.start >= DRAIN_MAX_NS
    }
}

/// A read that timed out or was interrupted: the stream goes on.
pub(crate) fn transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_engine::clock::{mono_ns, realtime_ns};

    #[test]
    fn a_stream_drains_until_quiet_or_the_bound() {
        let mut d = Drain::default();
        d.data(1_000);
        assert!(!d.over(false, 10 * QUIET_NS), "the test runs");
        let t = 2 * QUIET_NS;
        assert!(!d.over(true, t), "the drain starts now");
        d.data(t + QUIET_NS / 2);
        assert!(!d.over(true, t + QUIET_NS));
        assert!(d.over(true, t + 2 * QUIET_NS));
        let mut busy = Drain::default();
        busy.over(true, 1);
        busy.data(DRAIN_MAX_NS);
        assert!(busy.over(true, DRAIN_MAX_NS + 1), "the bound");
    }

    #[test]
    fn stamps_are_measured_on_the_nearer_clock() {
        let mut rx = UdpRx::new(false, IpVersion::V4);
        let mut d = [0u8; 100];
        for seq in [1u64, 2, 4] {
            udp_header::write(&mut d, mono_ns() - 1_000_000, seq, false);
            assert!(rx.record(&d, mono_ns(), realtime_ns()));
        }
        assert!(
            !rx.record(&d[..8], mono_ns(), realtime_ns()),
            "short datagram"
        );
        udp_header::write(&mut d, mono_ns(), 0, false);
        assert!(!rx.record(&d, mono_ns(), realtime_ns()), "sequence 0");
        assert_eq!(rx.clock, Some(StampClock::Mono));
        rx.finish();
        let s = &rx.summary;
        assert_eq!(
            (rx.highest, s.counts.unique, s.counts.lost, rx.bytes),
            (4, 3, Some(1), 300)
        );
        assert!(
            s.delay_s.min >= 0.001 && s.delay_s.max < 0.5,
            "{:?}",
            s.delay_s
        );
        let mut wall = UdpRx::new(true, IpVersion::V6);
        udp_header::write(&mut d, realtime_ns() - 2_000_000, 1, true);
        assert!(wall.record(&d, mono_ns(), realtime_ns()));
        assert_eq!(wall.clock, Some(StampClock::Wall));
    }
}
