//! Live interval figures: what a receiver tells its sender while a run is
//! still going (`wirebench send --interval MS`, `--json-stream`).
//!
//! The receiver cuts each flow's running totals at interval boundaries and
//! sends the differences, so every byte and packet is in exactly one live
//! interval and the live intervals of a flow add up to its final totals
//! whatever arrives late or out of order. Cutting is O(1) and happens once
//! per interval, never per packet.

pub use wirebench_schema::live::LiveInterval;

const NS: f64 = 1e9;

/// One flow's running totals, as [`crate::RecvAccumulator::live_totals`]
/// reads them: cumulative since the flow's first packet.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LiveTotals {
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Payload bytes of those packets (the result's `received.bytes`).
    pub bytes: u64,
    /// Sum of their one-way delays (or round-trip times), ns.
    pub delay_sum_ns: i128,
    /// Sum and count of |D_i − D_{i−1}| over consecutive received packets.
    pub ipdv_sum_ns: u128,
    /// Number of such pairs.
    pub ipdv_n: u64,
    /// Highest sequence number received plus one: what should have arrived
    /// so far if nothing was lost.
    pub expected: u64,
}

impl LiveTotals {
    /// Sequence numbers below the highest one received that are missing.
    pub fn missing(&self) -> u64 {
        self.expected.saturating_sub(self.unique)
    }
}

/// Turns successive [`LiveTotals`] into [`LiveInterval`]s.
#[derive(Debug, Clone, Default)]
pub struct LiveCutter {
    prev: LiveTotals,
    /// Most sequence gaps already charged to an interval.
    missing_charged: u64,
}

impl LiveCutter {
    /// The interval `index` of `len_ns`, ending with totals `now`.
    pub fn cut(&mut self, flow_id: u16, index: u64, len_ns: u64, now: LiveTotals) -> LiveInterval {
        let p = self.prev;
        let packets = now.unique.saturating_sub(p.unique);
        let bytes = now.bytes.saturating_sub(p.bytes);
        let ipdv_n = now.ipdv_n.saturating_sub(p.ipdv_n);
        let missing = now.missing();
        let lost = missing.saturating_sub(self.missing_charged);
        self.missing_charged = self.missing_charged.max(missing);
        self.prev = now;
        let len_s = len_ns as f64 / NS;
        LiveInterval {
            flow_id,
            index,
            t_s: index as f64 * len_s,
            len_s,
            packets,
            bytes,
            throughput_bps: if len_s > 0.0 {
                bytes as f64 * 8.0 / len_s
            } else {
                0.0
            },
            delay_mean_s: (packets > 0)
                .then(|| (now.delay_sum_ns - p.delay_sum_ns) as f64 / packets as f64 / NS),
            jitter_s: (ipdv_n > 0)
                .then(|| now.ipdv_sum_ns.saturating_sub(p.ipdv_sum_ns) as f64 / ipdv_n as f64 / NS),
            lost,
            tcp: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_are_differences_and_add_up() {
        let mut c = LiveCutter::default();
        let t1 = LiveTotals {
            unique: 10,
            bytes: 5_000,
            delay_sum_ns: 10 * 2_000_000,
            ipdv_sum_ns: 9 * 100_000,
            ipdv_n: 9,
            expected: 12,
        };
        let a = c.cut(1, 0, 100_000_000, t1);
        assert_eq!((a.packets, a.bytes, a.lost), (10, 5_000, 2));
        assert!((a.throughput_bps - 400_000.0).abs() < 1e-6);
        assert!((a.delay_mean_s.unwrap() - 0.002).abs() < 1e-12);
        assert!((a.jitter_s.unwrap() - 0.0001).abs() < 1e-12);
        assert!((a.t_s, a.len_s) == (0.0, 0.1));
        // Nothing arrived: an empty interval, no delay.
        let b = c.cut(1, 1, 100_000_000, t1);
        assert_eq!((b.packets, b.bytes, b.lost), (0, 0, 0));
        assert_eq!((b.delay_mean_s, b.jitter_s), (None, None));
        // The two missing packets arrive late, with 3 more: gaps close,
        // nothing is taken back, nothing new is lost.
        let t3 = LiveTotals {
            unique: 15,
            bytes: 7_500,
            delay_sum_ns: 10 * 2_000_000 + 5 * 4_000_000,
            ipdv_sum_ns: 9 * 100_000 + 5 * 200_000,
            ipdv_n: 14,
            expected: 15,
        };
        let d = c.cut(1, 2, 100_000_000, t3);
        assert_eq!((d.packets, d.bytes, d.lost), (5, 2_500, 0));
        assert!((d.delay_mean_s.unwrap() - 0.004).abs() < 1e-12);
        assert!((d.t_s - 0.2).abs() < 1e-12);
        assert_eq!(a.bytes + b.bytes + d.bytes, t3.bytes);
        // A new gap beyond the two already charged is charged once.
        let t4 = LiveTotals {
            expected: 18,
            unique: 16,
            ..t3
        };
        assert_eq!(c.cut(1, 3, 100_000_000, t4).lost, 0);
        let t5 = LiveTotals {
            expected: 20,
            unique: 17,
            ..t3
        };
        assert_eq!(c.cut(1, 4, 100_000_000, t5).lost, 1);
    }
}
