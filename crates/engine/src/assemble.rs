//! Assembles one run's result document (`wirebench.result/1`, the types
//! are `wirebench_schema::result`) from what the pacer sent and the
//! receiver reported ([`assemble_doc`]): per-flow figures, totals, the
//! bound check and the clock notes. Field meanings: docs/engine.md and
//! docs/metrics.md.

use crate::pacing::FlowSent;
use crate::plan::{SessionPlan, Stop};
use crate::session::Offset;
use crate::sys;
use std::net::{IpAddr, SocketAddr};
use wirebench_model::voip::JitterBuffer;
use wirebench_stats::{IpVersion, Throughput};
use wirebench_wire::Direction;

use wirebench_schema::result::*;

/// Formats nanoseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_millis(t).to_string()
}

pub(crate) struct DocInputs<'a> {
    pub plan: &'a SessionPlan,
    pub started_real: u64,
    pub src: SocketAddr,
    pub dst_ip: IpAddr,
    pub mtu: u32,
    pub clock: Offset,
    pub outcomes: Vec<FlowSent>,
    pub reports: Vec<FlowReport>,
    pub extra: ReportExtra,
    pub run_s: f64,
    pub cpu_sender: CpuTime,
    /// The sending namespace's UDP send drops during the run.
    pub sndbuf_errors: u64,
    pub host: sys::HostCpuShare,
    pub partial: Option<String>,
}

pub(crate) fn assemble_doc(mut p: DocInputs) -> ResultDoc {
    let mut flows = Vec::new();
    // Each flow's summary moves from its report into its result (below), so
    // what is read of the summaries across flows is read first: a copy
    // would hold every flow's histograms twice at the end of a session
    // (some 5 KiB per flow at 60 flows, beside the report's own 8 KiB).
    let received_packets: f64 = p
        .reports
        .iter()
        .map(|r| r.summary.counts.packets as f64)
        .sum();
    let total_lost: u64 = p
        .reports
        .iter()
        .map(|r| r.summary.counts.lost.unwrap_or(0))
        .sum();
    let host_drops = p.extra.rcvbuf_errors;
    let mut total = Total {
        sender_host_drops: p.sndbuf_errors,
        // Unknown as soon as one flow's is (summed below).
        lost: Some(0),
        ..Total::default()
    };
    let mut delay_weighted = 0.0;
    let mut span = UnionSpan::default();
    // Each direction crosses its own side of the link (--bidir).
    let mut by_direction = [UnionSpan::default(), UnionSpan::default()];
    for (i, (f, o)) in p.plan.flows.iter().zip(&p.outcomes).enumerate() {
        let id = (i + 1) as u16;
        let k = p.reports.iter().position(|r| r.flow_id == id);
        // Without the receiver's report nothing is known of what arrived:
        // the default summary's `lost`/`loss_ratio` are None (unknown),
        // not 0: a receiver killed mid-run must not read as "lost 0".
        let s = k
            .map(|k| std::mem::take(&mut p.reports[k].summary))
            .unwrap_or_default();
        let rep = k.map(|k| &p.reports[k]);
        let lost = s.counts.lost.unwrap_or(0);
        // Namespace-wide drops are shared out in proportion to each flow's
        // losses, and never exceed them: the sender's own first (a packet
        // its host dropped never reached the receiver), then the
        // receiver's buffers, the rest is the network's.
        let share = |drops: u64, cap: u64| {
            // A reverse flow's hosts swap roles; its losses stay unsplit.
            if total_lost > 0
                && crate::transport::caps(f.transport).kernel_udp_drops
                && f.direction == Direction::Forward
            {
                (((drops.min(total_lost) as f64) * lost as f64 / total_lost as f64).round() as u64)
                    .min(cap)
            } else {
                0
            }
        };
        let sender_host = share(p.sndbuf_errors, lost);
        let receiver_host = share(host_drops, lost - sender_host);
        // Probes the receiver refused at once never reached the accumulator;
        // they are forged all the same.
        let mut counts = s.counts.clone();
        counts.forged += rep.map(|r| r.forged).unwrap_or(0);
        let received = Received {
            counts,
            foreign: rep.map(|r| r.foreign).unwrap_or(0),
            negative_delays_beyond_error: rep.map(|r| r.negative_beyond_error).unwrap_or(0),
            implausible_delays: rep.map(|r| r.implausible_delays).unwrap_or(0),
            marks: rep.and_then(|r| r.marks.clone()),
            from: rep.and_then(|r| r.from.clone()),
        };
        total.sent_packets += o.send.packets;
        total.not_sent += o.send.not_sent;
        total.received_packets += s.counts.unique;
        total.lost = total.lost.zip(s.counts.lost).map(|(a, b)| a + b);
        span.add(&s);
        by_direction[usize::from(f.direction == Direction::Reverse)].add(&s);
        delay_weighted += s.delay_s.mean * s.counts.packets as f64;
        total.delay_max_s = total.delay_max_s.max(s.delay_s.max);
        // Addresses follow the packets: a reverse flow goes from the
        // receiver to us.
        let (src, dst) = match f.direction {
            Direction::Forward => (p.src.ip().to_string(), p.dst_ip.to_string()),
            Direction::Reverse => (p.dst_ip.to_string(), p.src.ip().to_string()),
        };
        flows.push(FlowResult {
            id,
            direction: f.direction,
            transport: f.transport,
            ip_version: if p.dst_ip.is_ipv4() {
                IpVersion::V4
            } else {
                IpVersion::V6
            },
            src,
            dst,
            mtu: p.mtu,
            requested: Requested {
                start_phase_s: crate::pacing::start_phase_ns(p.plan, i) as f64 / 1e9,
                ..f.requested()
            },
            socket: (!f.opts.is_default()).then(|| f.opts.clone()),
            sent: o.send.clone(),
            received,
            loss_split: LossSplit {
                not_sent: o.send.not_sent,
                sender_host,
                receiver_host,
                network: lost - sender_host - receiver_host,
            },
            throughput_bps: s.throughput_bps,
            frames: s.frames,
            delay_s: s.delay_s,
            jitter_s: s.jitter_s,
            rtt_s: o.rtt.as_ref().map(|r| r.delay_s),
            rtt_received: o.rtt.as_ref().map(|r| r.counts.unique),
            tcp: o.tcp,
            tcp_cc: o.tcp_cc.clone(),
            zerocopy: o.zerocopy.clone(),
            gso: o.gso.clone(),
            // No E-model without the loss it rests on.
            voip: f
                .spec
                .voip_codec()
                .zip(s.counts.loss_ratio)
                .map(|(c, loss)| {
                    // A fixed playout buffer anchored at the fastest packet: the
                    // mouth-to-ear delay is coding + fastest network delay +
                    // buffer, and packets later than the buffer are lost to the
                    // listener (the receiver measured their share).
                    let jb = JitterBuffer::new(f64::from(p.plan.jitter_buffer_ms) / 1e3);
                    let base = s.delay_s.min.max(0.0);
                    let late = s.late_share.unwrap_or(0.0);
                    let q = jb.quality(&c, base, loss, late);
                    Voip {
                        r_factor: q.r_factor,
                        mos: q.mos,
                        mouth_to_ear_s: c.coding_delay_s() + base + jb.depth_s,
                        jitter_buffer_s: jb.depth_s,
                        late_share: late,
                    }
                }),
            completion_s: (finite(f) && s.counts.unique > 0 && o.first_tx > 0).then(|| {
                (s.last_arrival_ns as i64 - p.clock.applied_ns() - o.first_tx as i64) as f64 / 1e9
            }),
            intervals: s.intervals,
            delay_hist: s.delay_hist,
            ipdv_hist: s.ipdv_hist,
        });
    }
    total.throughput_bps = span.throughput();
    if let Some(link) = p.plan.link_rate_bps {
        // The busier direction is the one that could exceed the link.
        let busiest = by_direction
            .iter()
            .max_by(|a, b| a.throughput().wire.total_cmp(&b.throughput().wire))
            .unwrap_or(&span);
        check_bound(
            &mut total,
            &busiest.throughput(),
            link as f64,
            busiest.secs(),
            p.clock.error_ns as f64 / 1e9,
        );
    }
    if total.received_packets > 0 {
        total.delay_mean_s = delay_weighted / received_packets.max(1.0);
    }
    total.fairness = fairness(&flows, total.throughput_bps.payload);
    total.loss_ratio = total.lost.map(|l| {
        if total.sent_packets > 0 {
            l as f64 / total.sent_packets as f64
        } else {
            0.0
        }
    });
    ResultDoc {
        schema: SCHEMA.into(),
        tool: Tool {
            name: "wirebench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at: rfc3339(p.started_real),
        meter: p.plan.meter,
        partial: p.partial.is_some(),
        partial_reason: p.partial,
        command: p.plan.command.clone(),
        host: sys::host_info(),
        clock: ClockInfo {
            offset_s: p.clock.offset_ns as f64 / 1e9,
            error_s: p.clock.error_ns as f64 / 1e9,
            applied: p.clock.applied(),
            method: "NTP-style 4-timestamp exchange over the control connection, smallest round trip of the samples".into(),
            samples: p.clock.samples,
        },
        flows,
        total,
        receiver: ReceiverInfo {
            host: p.extra.host.clone(),
            rcvbuf_errors: p.extra.rcvbuf_errors,
            foreign_control: p.extra.foreign_control,
            log: None,
        },
        cpu: Cpu {
            sender: p.cpu_sender.share(p.run_s),
            receiver: p.extra.cpu_s.share(p.run_s),
            host: p.host,
        },
        sessions: Vec::new(),
    }
}

/// Jain's index and the slowest and fastest of two or more flows
/// ([`Fairness`]), from each flow's received payload bytes: the flows are
/// compared over one common span, the span of the run's total
/// (`total_payload_bps` over all the flows' bytes), so that a flow that
/// stalled for part of the run is not credited with a rate over its own
/// shorter span. None with fewer than two flows or nothing received.
pub fn fairness(flows: &[FlowResult], total_payload_bps: f64) -> Option<Fairness> {
    if flows.len() < 2 {
        return None;
    }
    let bytes = |f: &FlowResult| f.received.counts.bytes as f64;
    let sum: f64 = flows.iter().map(bytes).sum();
    let squares: f64 = flows.iter().map(|f| bytes(f) * bytes(f)).sum();
    if sum <= 0.0 || squares <= 0.0 || total_payload_bps.is_nan() || total_payload_bps <= 0.0 {
        return None;
    }
    let span_s = sum * 8.0 / total_payload_bps;
    let by_bytes = |a: &&FlowResult, b: &&FlowResult| bytes(a).total_cmp(&bytes(b));
    let min = flows.iter().min_by(by_bytes)?;
    let max = flows.iter().max_by(by_bytes)?;
    Some(Fairness {
        jain: sum * sum / (flows.len() as f64 * squares),
        flows: flows.len(),
        min_flow: min.id,
        min_bps: bytes(min) * 8.0 / span_s,
        max_flow: max.id,
        max_bps: bytes(max) * 8.0 / span_s,
    })
}

/// Share by which a run's wire rate may exceed its link before it is
/// flagged, besides the clock's error: timestamps and the shaper's timer
/// resolution.
pub const BOUND_RESOLUTION: f64 = 0.001;

/// Fills the physical-bound keys of `total` for a path whose bottleneck
/// carries `link_bps` on the wire, from one direction's throughput `t`
/// over its union span. Its wire rate (every received frame's preamble,
/// header, FCS and gap) cannot exceed the link; it is flagged when it does by more than the relative
/// uncertainty of its span: the clock offset's error (it moves the span's
/// sender-side start) plus [`BOUND_RESOLUTION`].
fn check_bound(total: &mut Total, t: &Throughput, link_bps: f64, span_s: f64, clock_error_s: f64) {
    total.link_rate_bps = Some(link_bps);
    if t.wire <= 0.0 || span_s <= 0.0 {
        return;
    }
    let tol = BOUND_RESOLUTION + clock_error_s.max(0.0) / span_s;
    total.upper_bound_bps = Some(link_bps * t.payload / t.wire);
    total.bound_tolerance = Some(tol);
    total.above_bound = Some(t.wire > link_bps * (1.0 + tol));
}

/// A flow with an end of its own: `-k`, `-z` or a transfer model (the
/// file model); its completion time is reported.
fn finite(f: &crate::plan::FlowPlan) -> bool {
    f.spec.transfer_bytes.is_some() || !matches!(f.stop, Stop::DurationMs(_))
}

/// The session's throughput: every flow's bytes per layer over the union
/// of the flows' spans. Each flow's span is the one its own rate rests on
/// (`RecvSummary::duration_s`, ending at its last arrival), so one flow
/// alone gives exactly its own rate, and flows that ran one after the
/// other are not counted as if they had run side by side.
#[derive(Default)]
struct UnionSpan {
    start_ns: f64,
    end_ns: f64,
    bits: [f64; 4],
    any: bool,
}

impl UnionSpan {
    fn add(&mut self, s: &wirebench_stats::RecvSummary) {
        if s.duration_s <= 0.0 || s.last_arrival_ns == 0 {
            return;
        }
        let end = s.last_arrival_ns as f64;
        let start = end - s.duration_s * 1e9;
        if self.any {
            self.start_ns = self.start_ns.min(start);
            self.end_ns = self.end_ns.max(end);
        } else {
            (self.start_ns, self.end_ns, self.any) = (start, end, true);
        }
        let t = &s.throughput_bps;
        for (b, r) in self
            .bits
            .iter_mut()
            .zip([t.payload, t.ip, t.ethernet, t.wire])
        {
            *b += r * s.duration_s;
        }
    }

    /// Length of the union span in seconds (0 when nothing was received).
    fn secs(&self) -> f64 {
        if self.any {
            (self.end_ns - self.start_ns) / 1e9
        } else {
            0.0
        }
    }

    fn throughput(&self) -> Throughput {
        let secs = self.secs();
        if secs <= 0.0 {
            return Throughput::default();
        }
        let [payload, ip, ethernet, wire] = self.bits.map(|b| b / secs);
        Throughput {
            payload,
            ip,
            ethernet,
            wire,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(last_s: f64, duration_s: f64, payload_bps: f64) -> wirebench_stats::RecvSummary {
        wirebench_stats::RecvSummary {
            last_arrival_ns: (last_s * 1e9) as u64,
            duration_s,
            throughput_bps: Throughput {
                payload: payload_bps,
                ip: payload_bps * 2.0,
                ethernet: payload_bps * 3.0,
                wire: payload_bps * 4.0,
            },
            ..Default::default()
        }
    }

    /// Jain's index: 1 for equal flows, 1/n when one has everything, the
    /// textbook value in between; min/max over the common span.
    #[test]
    fn fairness_is_jains_index_over_the_common_span() {
        let flow = |id: u16, bytes: u64| {
            let mut f = FlowResult {
                id,
                ..Default::default()
            };
            f.received.counts.bytes = bytes;
            f
        };
        let equal: Vec<FlowResult> = (1..=4).map(|i| flow(i, 1000)).collect();
        // 4000 B over 1 s.
        let f = fairness(&equal, 32_000.0).unwrap();
        assert!((f.jain - 1.0).abs() < 1e-12);
        assert_eq!((f.flows, f.min_bps, f.max_bps), (4, 8000.0, 8000.0));
        let hog = vec![flow(1, 0), flow(2, 0), flow(3, 3000), flow(4, 0)];
        let f = fairness(&hog, 24_000.0).unwrap();
        assert!((f.jain - 0.25).abs() < 1e-12);
        assert_eq!(
            (f.min_flow, f.min_bps, f.max_flow, f.max_bps),
            (1, 0.0, 3, 24_000.0)
        );
        // 1, 2, 3: 36 / (3 * 14) = 6/7.
        let mixed = vec![flow(1, 100), flow(2, 200), flow(3, 300)];
        let f = fairness(&mixed, 4800.0).unwrap();
        assert!((f.jain - 6.0 / 7.0).abs() < 1e-12);
        assert_eq!((f.min_flow, f.max_flow), (1, 3));
        // 600 B at 4800 bit/s: a 1 s span, so flow 3 read 2400 bit/s.
        assert!((f.max_bps - 2400.0).abs() < 1e-9);
        assert_eq!(fairness(&mixed[..1], 4800.0), None);
        assert_eq!(fairness(&[flow(1, 0), flow(2, 0)], 0.0), None);
    }

    #[test]
    fn total_is_bytes_over_the_union_span() {
        // One flow alone: its own rate.
        let mut u = UnionSpan::default();
        u.add(&flow(10.0, 2.0, 1e6));
        assert_eq!(u.throughput().payload, 1e6);
        assert_eq!(u.throughput().wire, 4e6);
        // Two flows one after the other (8-10 s, then 10-12 s), 1 Mbit/s
        // each: 1 Mbit/s over 4 s, not 2.
        u.add(&flow(12.0, 2.0, 1e6));
        assert!((u.throughput().payload - 1e6).abs() < 1e-3);
        // Side by side (both 8-10 s): 2 Mbit/s.
        let mut v = UnionSpan::default();
        v.add(&flow(10.0, 2.0, 1e6));
        v.add(&flow(10.0, 2.0, 1e6));
        assert!((v.throughput().payload - 2e6).abs() < 1e-3);
        // Nothing received, or a single packet (no span): nothing to divide.
        let mut w = UnionSpan::default();
        w.add(&flow(10.0, 0.0, 0.0));
        assert_eq!(w.throughput(), Throughput::default());
    }

    #[test]
    fn above_the_link_is_flagged_beyond_the_uncertainty() {
        let mut t = Total::default();
        let mut tp = Throughput {
            payload: 941.5e6,
            ip: 0.0,
            ethernet: 0.0,
            wire: 1000e6,
        };
        // Exactly at the link: the bound, not above it.
        check_bound(&mut t, &tp, 1e9, 0.05, 10e-6);
        assert_eq!(t.above_bound, Some(false));
        assert!((t.upper_bound_bps.unwrap() - 941.5e6).abs() < 1.0);
        assert!((t.bound_tolerance.unwrap() - (0.001 + 10e-6 / 0.05)).abs() < 1e-12);
        // 1.6 % fast over 42 ms with a 10 us clock error: flagged.
        tp.wire = 1016e6;
        check_bound(&mut t, &tp, 1e9, 0.042, 10e-6);
        assert_eq!(t.above_bound, Some(true));
        // The same excess within a poor clock's error (1 ms over 42 ms): not.
        check_bound(&mut t, &tp, 1e9, 0.042, 1e-3);
        assert_eq!(t.above_bound, Some(false));
        // Nothing received: the link is recorded, nothing is judged.
        let mut e = Total::default();
        check_bound(&mut e, &Throughput::default(), 1e9, 0.0, 0.0);
        assert_eq!((e.link_rate_bps, e.above_bound), (Some(1e9), None));
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T12:34:56.789Z
        assert_eq!(
            rfc3339(1_709_210_096_789_000_000),
            "2024-02-29T12:34:56.789Z"
        );
    }
}
