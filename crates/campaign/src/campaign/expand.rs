//! Expansion: each matrix block's cross product becomes scenarios with
//! stable keys (axes in table order) and typed settings.

use super::axes::Sets;
use super::*;
use wirebench_rfc2544::frame::frame_to_payload;
use wirebench_stats::IpVersion;

impl Campaign {
    /// Every axis name used by any matrix, in key order.
    pub fn axis_names(&self) -> Vec<String> {
        let mut set: Vec<Axis> = self
            .matrices
            .iter()
            .flat_map(|m| m.axes.keys().copied())
            .collect();
        set.sort();
        set.dedup();
        set.into_iter().map(|a| a.name().to_string()).collect()
    }

    /// The matrix expanded to scenarios (repetitions not included), in file
    /// order, duplicates across blocks removed.
    pub fn expand(&self) -> Vec<Scenario> {
        let mut out: Vec<Scenario> = Vec::new();
        // Keys seen, so duplicates go in O(log n), not by scanning `out`.
        let mut seen: std::collections::BTreeSet<String> = Default::default();
        for m in &self.matrices {
            let axes: Vec<(&Axis, &Vec<String>)> = m.axes.iter().collect();
            let total: usize = axes.iter().map(|(_, v)| v.len()).product();
            for idx in 0..total {
                // Mixed-radix counter: the last axis varies fastest.
                let mut rem = idx;
                let mut pick: BTreeMap<Axis, String> = BTreeMap::new();
                for (a, vals) in axes.iter().rev() {
                    pick.insert(**a, vals[rem % vals.len()].clone());
                    rem /= vals.len();
                }
                if pick.get(&Axis::App).is_some_and(|a| a != "voip") {
                    pick.remove(&Axis::Codec);
                }
                let s = self.scenario_from(pick);
                if seen.insert(s.key.clone()) {
                    out.push(s);
                }
            }
        }
        out
    }

    pub(crate) fn scenario_from(&self, pick: BTreeMap<Axis, String>) -> Scenario {
        let key = pick
            .iter()
            .map(|(a, v)| format!("{}={v}", a.name()))
            .collect::<Vec<_>>()
            .join(",");
        let mut settings = Settings::base(self.target_link());
        for (axis, value) in &pick {
            match axis.def().sets {
                Sets::Send(set) => set(&mut settings, value),
                Sets::Link(set) => set(&mut settings.link, value),
            }
        }
        // Without a transport axis an application model runs on its own
        // transport (telnet and file are TCP, as `send --app` does).
        if settings.transport.is_empty() {
            settings.transport = match settings.app.as_str() {
                "telnet" | "file" => "tcp",
                _ => "udp",
            }
            .into();
        }
        if let Some(f) = settings.frame {
            settings.payload = frame_payload(f, settings.ip, &settings.transport);
        }
        let axes = pick
            .into_iter()
            .map(|(a, v)| (a.name().to_string(), v))
            .collect();
        Scenario {
            key,
            axes,
            settings,
        }
    }

    /// The link options of the target itself, before any axis.
    fn target_link(&self) -> LinkOpts {
        let rate = |r: &Option<String>| {
            r.as_deref()
                .and_then(|r| wirebench_testbed::parse_rate(r).ok())
        };
        match &self.target {
            Target::Testbed(t) => LinkOpts {
                mtu: t.mtu,
                rate_bps: rate(&t.link_rate),
                offloads: t.offloads,
                forward_pps: t.forward_pps,
                ..LinkOpts::default()
            },
            Target::Hosts(h) => LinkOpts {
                mtu: h.mtu,
                rate_bps: rate(&h.link_rate),
                ..LinkOpts::default()
            },
            Target::Loopback => LinkOpts::default(),
        }
    }

    /// How long each run of `s` lasts: its `duration` axis value when it
    /// has one, the campaign's own length otherwise.
    pub fn run_length(&self, s: &Scenario) -> RunLength {
        match s.settings.duration_s {
            Some(seconds) => RunLength::Duration { seconds },
            None => self.length,
        }
    }

    /// The most repetitions a scenario may take.
    pub fn repetitions_max(&self) -> u32 {
        self.adaptive.as_ref().map_or(self.repetitions, |a| a.max)
    }

    /// The repetitions as the file gives them.
    pub fn repetitions_text(&self) -> String {
        match &self.adaptive {
            None => self.repetitions.to_string(),
            Some(a) => format!(
                "{}..{} until {} of {}",
                self.repetitions,
                a.max,
                match a.until {
                    Until::Cv(x) => format!("cv <= {x}"),
                    Until::Ci(x) => format!("95 % CI <= ±{}%", x * 100.0),
                },
                a.metric
            ),
        }
    }

    /// Total planned runs: scenarios × repetitions.
    pub fn planned_runs(&self) -> usize {
        self.expand().len() * self.repetitions as usize
    }

    /// The axis a chart should put on x: the first of payload, frame, mtu,
    /// pps that has more than one value.
    pub fn x_axis(&self) -> Option<String> {
        for a in [
            Axis::Payload,
            Axis::Frame,
            Axis::Mtu,
            Axis::Pps,
            Axis::Flows,
        ] {
            let n: usize = self
                .matrices
                .iter()
                .filter_map(|m| m.axes.get(&a).map(|v| v.len()))
                .max()
                .unwrap_or(0);
            if n > 1 {
                return Some(a.name().to_string());
            }
        }
        None
    }
}
/// The transport payload an Ethernet frame of `frame` bytes carries for a
/// scenario's IP version and transport, by the RFC 2544 crate's framing.
pub(super) fn frame_payload(frame: u32, ip: u8, transport: &str) -> Option<u32> {
    let ip = if ip == 6 {
        IpVersion::V6
    } else {
        IpVersion::V4
    };
    frame_to_payload(frame, ip, transport.parse().unwrap_or_default())
}
