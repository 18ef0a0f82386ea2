//! Latency at the found throughput (RFC 2544 §26.2), from every packet's
//! one-way delay as the receiver measured it, not from a few tagged frames.
//! Read from a `wirebench.result/1` document (first flow: RFC trials send
//! one flow), so it works on stored runs too.

use crate::result::ResultDoc;
use serde::{Deserialize, Serialize};

/// Delay statistics of one trial, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Packets the figures cover.
    pub packets: u64,
    pub min_s: f64,
    pub mean_s: f64,
    pub max_s: f64,
    pub stddev_s: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    /// The figure RFC 2544 §26.2 reports: the average latency over the
    /// trial. The RFC averages one tagged frame per trial over 20 trials;
    /// here it is the mean over every frame of the trial.
    pub rfc2544_s: f64,
    /// RFC 5481 / RFC 8219 packet delay variation: p99.9 − min.
    pub pdv_s: f64,
}

impl Latency {
    /// From a result document; None when it has no flow or no delays.
    pub fn from_result(doc: &ResultDoc) -> Option<Latency> {
        let flow = doc.flows.first()?;
        let d = &flow.delay_s;
        let packets = flow.received.counts.unique;
        if packets == 0 {
            return None;
        }
        Some(Latency {
            packets,
            min_s: d.min,
            mean_s: d.mean,
            max_s: d.max,
            stddev_s: d.stddev,
            p50_s: d.p50,
            p90_s: d.p90,
            p99_s: d.p99,
            p999_s: d.p999,
            rfc2544_s: d.mean,
            pdv_s: d.p999 - d.min,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_flow() {
        let mut flow = crate::result::FlowResult::default();
        flow.received.counts.unique = 1000;
        flow.delay_s = crate::flow::DelayStats {
            min: 1e-5,
            mean: 2e-5,
            max: 9e-5,
            stddev: 1e-6,
            p50: 1.9e-5,
            p90: 3e-5,
            p99: 5e-5,
            p999: 8e-5,
        };
        let doc = ResultDoc::with_flows(vec![flow.clone()]);
        let l = Latency::from_result(&doc).unwrap();
        assert_eq!(l.packets, 1000);
        assert_eq!(l.rfc2544_s, 2e-5);
        assert!((l.pdv_s - 7e-5).abs() < 1e-12);
        flow.received.counts.unique = 0;
        assert!(Latency::from_result(&ResultDoc::with_flows(vec![flow])).is_none());
        assert!(Latency::from_result(&ResultDoc::with_flows(Vec::new())).is_none());
    }
}
