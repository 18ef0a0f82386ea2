//! Expansion: each matrix block's cross product becomes scenarios with
//! stable keys (axes in table order) and typed settings.

use super::*;

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
        let get = |a: Axis| pick.get(&a).cloned();
        let (tb_mtu, tb_rate, tb_off, tb_fwd) = match &self.target {
            Target::Testbed(t) => (t.mtu, t.link_rate.clone(), t.offloads, t.forward_pps),
            Target::Hosts(h) => (h.mtu, h.link_rate.clone(), None, None),
            Target::Loopback => (None, None, None, None),
        };
        let ip: u8 = get(Axis::Ip).and_then(|v| v.parse().ok()).unwrap_or(4);
        // Without a transport axis an application model runs on its own
        // transport (telnet and file are TCP, as `send --app` does).
        let transport = get(Axis::Transport).unwrap_or_else(|| {
            match get(Axis::App).as_deref() {
                Some("telnet" | "file") => "tcp",
                _ => "udp",
            }
            .into()
        });
        let frame: Option<u32> = get(Axis::Frame).and_then(|v| v.parse().ok());
        let payload = match frame {
            Some(f) => frame_to_payload(f, ip, &transport),
            None => get(Axis::Payload).and_then(|v| v.parse().ok()),
        };
        let pps_text = get(Axis::Pps);
        let link_rate = get(Axis::LinkRate).or(tb_rate);
        let settings = Settings {
            ip,
            transport,
            meter: get(Axis::Meter).unwrap_or_else(|| "owd".into()),
            app: get(Axis::App).unwrap_or_else(|| "constant".into()),
            codec: get(Axis::Codec),
            payload,
            size_mix: None,
            frame,
            pps: pps_text.as_deref().and_then(|p| p.parse().ok()),
            max_rate: pps_text.as_deref() == Some("max"),
            flows: get(Axis::Flows).and_then(|v| v.parse().ok()).unwrap_or(1),
            mtu: get(Axis::Mtu).and_then(|v| v.parse().ok()).or(tb_mtu),
            link_bps: link_rate.as_deref().and_then(parse_link_rate),
            link_rate,
            offloads: get(Axis::Offloads).and_then(|v| v.parse().ok()).or(tb_off),
            forward_pps: get(Axis::ForwardPps)
                .and_then(|v| v.parse().ok())
                .or(tb_fwd),
            sender: get(Axis::Sender),
            dscp: get(Axis::Dscp),
            cc: get(Axis::Cc),
            window: get(Axis::Window),
            rate: get(Axis::Rate),
            idt: get(Axis::Idt),
            size: get(Axis::Size),
            direction: get(Axis::Direction).filter(|d| d != "forward"),
            duration_s: get(Axis::Duration).and_then(|v| v.parse().ok()),
        };
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

    /// How long each run of `s` lasts: its `duration` axis value when it
    /// has one, the campaign's own length otherwise.
    pub fn run_length(&self, s: &Scenario) -> RunLength {
        match s.settings.duration_s {
            Some(seconds) => RunLength::Duration { seconds },
            None => self.length,
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
/// Transport payload carried by an Ethernet frame of `frame` bytes (header
/// and FCS included): frame − 18 − IP header − transport header (UDP 8;
/// TCP 20 + 12 of timestamps).
pub fn frame_to_payload(frame: u32, ip: u8, transport: &str) -> Option<u32> {
    let ip_h = if ip == 6 { 40 } else { 20 };
    let l4 = if transport == "tcp" { 32 } else { 8 };
    frame.checked_sub(18 + ip_h + l4)
}
