//! Per-flow socket options a user asks for (IP marking: TOS/DSCP, TTL or
//! hop limit, IPv6 flow label) and what the receiver saw of them
//! ([`MarksSeen`]). They live here, beside the result document, because
//! the plan, the control protocol, the scripts and the result all carry
//! them; the engine applies them in one per-socket setup function.
//!
//! DSCP names follow RFC 2474/2597/3246/5865/8622 (`ef`, `af11`…`af43`,
//! `cs0`…`cs7`, `va`, `le`); `-b` takes the whole TOS byte as D-ITG does
//! (DSCP in the upper six bits, ECN in the lower two).

use serde::{Deserialize, Serialize};

/// Socket options of one flow; `None` leaves the system default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SockOpts {
    /// The IPv4 TOS byte / IPv6 traffic class (DSCP << 2 | ECN).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// IPv4 TTL / IPv6 unicast hop limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// IPv6 flow label (20 bits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_label: Option<u32>,
    /// TCP congestion control algorithm (TCP_CONGESTION; Linux, FreeBSD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    /// Socket buffer in bytes: the send buffer at the sender, the receive
    /// buffer at the receiver (iperf3 -w).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// TCP maximum segment size (TCP_MAXSEG, set before connecting).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// Nagle's algorithm on (true) or off (false, TCP_NODELAY); unset:
    /// off for paced flows, on for `--max` and Telnet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nagle: Option<bool>,
    /// TCP: send with MSG_ZEROCOPY (`--zerocopy`, Linux); what the kernel
    /// made of it is the flow's `zerocopy` result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zerocopy: Option<bool>,
    /// UDP: send runs of same-size datagrams as one segmented send (UDP
    /// GSO, `--gso on|off`, Linux); unset (`auto`): for `--max` flows where
    /// the kernel takes it. What was used is the flow's `gso` result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gso: Option<bool>,
    /// Source address of the flow's data socket (D-ITG `-sa`, iperf3
    /// `-B`); the session's control connection leaves from it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<std::net::IpAddr>,
    /// Source port of the flow's data socket (D-ITG `-sp`, iperf3
    /// `--cport`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cport: Option<u16>,
    /// Network interface the flow's sockets are bound to (SO_BINDTODEVICE,
    /// `--bind-dev`; Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_dev: Option<String>,
    /// The receiver's data port for the flow (D-ITG `-rp`), agreed in the
    /// session: the receiver opens it or refuses the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_port: Option<u16>,
}

impl SockOpts {
    /// Nothing asked for: the socket keeps every system default.
    pub fn is_default(&self) -> bool {
        *self == SockOpts::default()
    }

    /// These options, with every one not given taken from `base` (a
    /// script line's own values over the command line's).
    pub fn over(&self, base: &SockOpts) -> SockOpts {
        SockOpts {
            tos: self.tos.or(base.tos),
            ttl: self.ttl.or(base.ttl),
            flow_label: self.flow_label.or(base.flow_label),
            cc: self.cc.clone().or_else(|| base.cc.clone()),
            window: self.window.or(base.window),
            mss: self.mss.or(base.mss),
            nagle: self.nagle.or(base.nagle),
            zerocopy: self.zerocopy.or(base.zerocopy),
            gso: self.gso.or(base.gso),
            bind: self.bind.or(base.bind),
            cport: self.cport.or(base.cport),
            bind_dev: self.bind_dev.clone().or_else(|| base.bind_dev.clone()),
            data_port: self.data_port.or(base.data_port),
        }
    }

    /// The first TCP-only option set, by its command-line name.
    pub fn tcp_only(&self) -> Option<&'static str> {
        if self.cc.is_some() {
            Some("--cc")
        } else if self.mss.is_some() {
            Some("-M")
        } else if self.nagle.is_some() {
            Some("-D/--nagle")
        } else if self.zerocopy == Some(true) {
            Some("--zerocopy")
        } else {
            None
        }
    }

    /// The DSCP the TOS byte carries, if a TOS was asked for.
    pub fn dscp(&self) -> Option<u8> {
        self.tos.map(|t| t >> 2)
    }
}

/// A source address (`-sa`, `--bind`): an IPv4 or IPv6 address literal.
pub fn parse_addr(s: &str) -> Result<std::net::IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("expected an IPv4 or IPv6 address, got {s:?}"))
}

/// A source port (`-sp`, `--cport`): 1..65535.
pub fn parse_cport(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(p) if p >= 1 => Ok(p),
        _ => Err(format!("expected a port 1..65535, got {s:?}")),
    }
}

/// Lowest data port a sender may ask the receiver to open: the ports below
/// are privileged, and a receiver running as root must not be steered
/// into them.
pub const MIN_DATA_PORT: u16 = 1024;

/// The receiver's data port (`-rp`, `--data-port`): 1024..65535.
pub fn parse_data_port(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(p) if p >= MIN_DATA_PORT => Ok(p),
        _ => Err(format!(
            "expected a port {MIN_DATA_PORT}..65535 (not a privileged port), got {s:?}"
        )),
    }
}

/// A network interface name (`--bind-dev`): 1..15 bytes, no `/`, blank or
/// NUL (the kernel's IFNAMSIZ rules); whether it exists is checked when the
/// plan is validated.
pub fn parse_dev(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() < 16
        && !s.contains(['/', '\0'])
        && !s.chars().any(char::is_whitespace)
        && s != "."
        && s != "..";
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("not an interface name: {s:?}"))
    }
}

/// Largest IPv6 flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0xF_FFFF;

/// DSCP code points by name.
const DSCP_NAMES: &[(&str, u8)] = &[
    ("be", 0),
    ("default", 0),
    ("cs0", 0),
    ("le", 1),
    ("cs1", 8),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("cs2", 16),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("cs3", 24),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("cs4", 32),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("cs5", 40),
    ("va", 44),
    ("ef", 46),
    ("cs6", 48),
    ("cs7", 56),
];

/// An integer in decimal or `0x` hex.
fn int(s: &str) -> Option<u64> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// `--dscp`: a name (`ef`, `af41`, `cs6`, any case) or a number 0..=63.
pub fn parse_dscp(s: &str) -> Result<u8, String> {
    let l = s.trim().to_ascii_lowercase();
    if let Some(&(_, v)) = DSCP_NAMES.iter().find(|(n, _)| *n == l) {
        return Ok(v);
    }
    match int(&l) {
        Some(v) if v <= 63 => Ok(v as u8),
        Some(v) => Err(format!("{v} is not a DSCP (0..63)")),
        None => Err(format!(
            "unknown DSCP {s:?}; a number 0..63 or one of ef af11..af43 cs0..cs7 va le be"
        )),
    }
}

/// `-b`: the whole TOS byte, 0..=255 (decimal or 0x hex), as D-ITG takes it.
pub fn parse_tos(s: &str) -> Result<u8, String> {
    match int(s) {
        Some(v) if v <= 255 => Ok(v as u8),
        _ => Err(format!("not a TOS byte (0..255 or 0x00..0xff): {s:?}")),
    }
}

/// `-f`: TTL / hop limit, 1..=255.
pub fn parse_ttl(s: &str) -> Result<u8, String> {
    match int(s) {
        Some(v) if (1..=255).contains(&v) => Ok(v as u8),
        _ => Err(format!("not a TTL (1..255): {s:?}")),
    }
}

/// `--flow-label`: 0..=0xFFFFF (decimal or 0x hex).
pub fn parse_flow_label(s: &str) -> Result<u32, String> {
    match int(s) {
        Some(v) if v <= u64::from(MAX_FLOW_LABEL) => Ok(v as u32),
        _ => Err(format!("not a flow label (0..0xfffff): {s:?}")),
    }
}

/// `--cc`: a congestion-control name as the kernel spells them (`cubic`,
/// `bbr`, `reno`): lower-case letters, digits, `_`, at most 15 characters.
/// Whether the kernel has it is its own answer.
pub fn parse_cc(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "not a congestion-control name (e.g. cubic, bbr, reno): {s:?}"
        ))
    }
}

/// `100M`, `1.5G`, `64k`, `2000000`: bits per second, SI suffixes.
pub fn parse_bits(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * mult <= 1e12 => Ok(v * mult),
        _ => Err(format!(
            "expected bits per second above 0 (at most 1T) with an optional k, M or G, e.g. 100M; got {s:?}"
        )),
    }
}

/// `--window`: bytes, with K/M/G suffixes of 1024 as iperf3 takes them
/// (`256K`), 1 KiB ..= 1 GiB.
pub fn parse_window(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown suffix in {s:?} (K, M or G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    match num.parse::<u64>().ok().map(|n| n.saturating_mul(mult)) {
        Some(b) if (1024..=1 << 30).contains(&b) => Ok(b as u32),
        _ => Err(format!("not a buffer size of 1K..1G bytes: {s:?}")),
    }
}

/// `-M`: TCP maximum segment size, 88..=65535 bytes (Linux's floor is 88).
pub fn parse_mss(s: &str) -> Result<u32, String> {
    match int(s) {
        Some(v) if (88..=65535).contains(&v) => Ok(v as u32),
        _ => Err(format!("not an MSS (88..65535 bytes): {s:?}")),
    }
}

/// The name of a DSCP value, if it has one (`46` → `ef`).
pub fn dscp_name(v: u8) -> Option<&'static str> {
    // The first of the aliases of 0 ("be") is the one printed.
    DSCP_NAMES.iter().find(|(_, x)| *x == v).map(|(n, _)| *n)
}

/// How many data packets of a flow carried one DSCP value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DscpCount {
    /// The code point, 0..=63.
    pub dscp: u8,
    /// Data packets that arrived with it.
    pub packets: u64,
}

/// What the receiver saw in the IP headers of a flow's data packets (UDP
/// flows on Linux, from IP_RECVTOS/IP_RECVTTL, IPV6_RECVTCLASS/
/// IPV6_RECVHOPLIMIT and IPV6_FLOWINFO): a marking rewritten along the
/// path shows here, not in what the sender asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MarksSeen {
    /// Every DSCP value seen, with its packet count (ascending DSCP).
    pub dscp: Vec<DscpCount>,
    /// Packets with ECN bits set (ECT(0), ECT(1) or CE).
    pub ecn_marked: u64,
    /// Smallest TTL / hop limit seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_min: Option<u8>,
    /// Largest TTL / hop limit seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_max: Option<u8>,
    /// IPv6: the flow label of the first packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_label: Option<u32>,
    /// IPv6: later packets that carried another flow label.
    pub flow_label_other: u64,
}

/// The per-packet tally behind [`MarksSeen`]: fixed arrays, no allocation
/// on the receive path.
#[derive(Debug, Clone)]
pub struct MarksTally {
    dscp: [u64; 64],
    ecn: u64,
    ttl_min: u8,
    ttl_max: u8,
    label: Option<u32>,
    label_other: u64,
    any: bool,
}

impl Default for MarksTally {
    fn default() -> Self {
        MarksTally {
            dscp: [0; 64],
            ecn: 0,
            ttl_min: u8::MAX,
            ttl_max: 0,
            label: None,
            label_other: 0,
            any: false,
        }
    }
}

impl MarksTally {
    /// One admitted data packet and what its IP header carried (`None`:
    /// the kernel did not say).
    #[inline]
    pub fn see(&mut self, tos: Option<u8>, ttl: Option<u8>, label: Option<u32>) {
        if let Some(t) = tos {
            self.any = true;
            self.dscp[usize::from(t >> 2)] += 1;
            if t & 3 != 0 {
                self.ecn += 1;
            }
        }
        if let Some(t) = ttl {
            self.any = true;
            self.ttl_min = self.ttl_min.min(t);
            self.ttl_max = self.ttl_max.max(t);
        }
        if let Some(l) = label {
            self.any = true;
            match self.label {
                None => self.label = Some(l),
                Some(first) if first != l => self.label_other += 1,
                Some(_) => {}
            }
        }
    }

    /// None when no packet told anything (TCP, or no kernel support).
    pub fn seen(&self) -> Option<MarksSeen> {
        if !self.any {
            return None;
        }
        let has_ttl = self.ttl_max > 0 || self.ttl_min == 0;
        Some(MarksSeen {
            dscp: self
                .dscp
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(d, &n)| DscpCount {
                    dscp: d as u8,
                    packets: n,
                })
                .collect(),
            ecn_marked: self.ecn,
            ttl_min: has_ttl.then_some(self.ttl_min),
            ttl_max: has_ttl.then_some(self.ttl_max),
            flow_label: self.label,
            flow_label_other: self.label_other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dscp_names_numbers_and_refusals() {
        assert_eq!(parse_dscp("EF"), Ok(46));
        assert_eq!(parse_dscp("af41"), Ok(34));
        assert_eq!(parse_dscp("cs6"), Ok(48));
        assert_eq!(parse_dscp("46"), Ok(46));
        assert_eq!(parse_dscp("0x2e"), Ok(46));
        assert!(parse_dscp("64").unwrap_err().contains("0..63"));
        assert!(parse_dscp("af44").unwrap_err().contains("unknown DSCP"));
        assert_eq!(parse_tos("0xb8"), Ok(184));
        assert_eq!(parse_tos("255"), Ok(255));
        assert!(parse_tos("256").is_err());
        assert!(parse_ttl("0").is_err());
        assert_eq!(parse_ttl("64"), Ok(64));
        assert_eq!(parse_flow_label("0xfffff"), Ok(0xFFFFF));
        assert!(parse_flow_label("0x100000").is_err());
        assert_eq!(dscp_name(46), Some("ef"));
        assert_eq!(parse_cc("bbr"), Ok("bbr".into()));
        assert!(parse_cc("BBR;rm").is_err());
        assert_eq!(parse_window("256K"), Ok(256 * 1024));
        assert_eq!(parse_window("4M"), Ok(4 << 20));
        assert_eq!(parse_window("65536"), Ok(65536));
        assert!(parse_window("2G").is_err());
        assert!(parse_window("10").is_err());
        assert!(parse_mss("87").is_err());
        assert_eq!(parse_mss("1000"), Ok(1000));
        assert_eq!(parse_addr("127.0.0.2"), Ok([127, 0, 0, 2].into()));
        assert!(parse_addr("localhost").is_err());
        assert_eq!(parse_cport("9000"), Ok(9000));
        assert!(parse_cport("0").is_err());
        assert!(parse_data_port("1023").is_err());
        assert_eq!(parse_data_port("40000"), Ok(40000));
        assert_eq!(parse_dev("lo"), Ok("lo".into()));
        assert!(parse_dev("a/b").is_err());
        assert!(parse_dev("abcdefghijklmnop").is_err());
        assert_eq!(dscp_name(0), Some("be"));
        assert_eq!(dscp_name(7), None);
        assert_eq!(
            SockOpts {
                tos: Some(0xb8),
                ..Default::default()
            }
            .dscp(),
            Some(46)
        );
    }

    #[test]
    fn tally_counts_every_dscp_and_the_ttl_range() {
        let mut t = MarksTally::default();
        assert_eq!(t.seen(), None);
        t.see(Some(0xb8), Some(64), None);
        t.see(Some(0xb8), Some(63), None);
        t.see(Some(0x01), Some(64), None);
        let s = t.seen().unwrap();
        assert_eq!(
            s.dscp,
            vec![
                DscpCount {
                    dscp: 0,
                    packets: 1
                },
                DscpCount {
                    dscp: 46,
                    packets: 2
                }
            ]
        );
        assert_eq!(s.ecn_marked, 1);
        assert_eq!((s.ttl_min, s.ttl_max), (Some(63), Some(64)));
        assert_eq!(s.flow_label, None);
        let mut t = MarksTally::default();
        t.see(None, None, Some(7));
        t.see(None, None, Some(7));
        t.see(None, None, Some(8));
        let s = t.seen().unwrap();
        assert_eq!((s.flow_label, s.flow_label_other), (Some(7), 1));
        assert_eq!((s.ttl_min, s.ttl_max), (None, None));
    }
}
