//! Validation: the raw file becomes a [`Campaign`], or an error naming the
//! file, line and key. `[quick]` is applied here too, with the same checks.

use super::axes::{check_axis, QuickRule};
use super::expand::frame_payload;
use super::raw::*;
use super::*;
use crate::summary::ThroughputUnits;
use toml::Spanned;
use wirebench_model::MIN_PAYLOAD;

pub(super) struct Ctx<'a> {
    pub(super) origin: &'a str,
    pub(super) text: &'a str,
}

impl Ctx<'_> {
    pub(super) fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    pub(super) fn err(&self, offset: usize, key: &str, reason: impl Into<String>) -> CampaignError {
        CampaignError::Invalid {
            origin: self.origin.to_string(),
            line: self.line_of(offset),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    pub(super) fn at<T>(
        &self,
        s: &Spanned<T>,
        key: &str,
        reason: impl Into<String>,
    ) -> CampaignError {
        self.err(s.span().start, key, reason)
    }

    /// A serde/toml error: pull out the key of "unknown field `x`" so the
    /// message names it like every other error.
    pub(super) fn toml_err(&self, e: toml::de::Error) -> CampaignError {
        let line = e.span().map(|s| self.line_of(s.start)).unwrap_or(1);
        // toml's message may span lines, or be empty (a lone "\r"): one
        // line, never blank.
        let msg = e.message().trim().replace('\n', "; ");
        let msg = if msg.is_empty() {
            "not valid TOML".to_string()
        } else {
            msg
        };
        if let Some(rest) = msg.strip_prefix("unknown field `") {
            if let Some(end) = rest.find('`') {
                let key = &rest[..end];
                let expected = rest[end + 1..].trim_start_matches(',').trim();
                return CampaignError::Invalid {
                    origin: self.origin.to_string(),
                    line,
                    key: key.to_string(),
                    reason: format!("unknown key ({expected})"),
                };
            }
        }
        CampaignError::Syntax {
            origin: self.origin.to_string(),
            line,
            reason: msg,
        }
    }
}

fn positive_u64(ctx: &Ctx, v: &Spanned<i64>, key: &str) -> Result<u64, CampaignError> {
    let x = *v.get_ref();
    if x <= 0 {
        return Err(ctx.at(v, key, format!("must be a positive whole number, got {x}")));
    }
    Ok(x as u64)
}

fn seconds(ctx: &Ctx, v: &Spanned<f64>, key: &str, allow_zero: bool) -> Result<f64, CampaignError> {
    let x = *v.get_ref();
    let ok = x.is_finite() && (x > 0.0 || (allow_zero && x == 0.0)) && x <= 86_400.0;
    if !ok {
        let want = if allow_zero { "0" } else { "more than 0" };
        return Err(ctx.at(
            v,
            key,
            format!("must be {want} and at most 86400 seconds, got {x}"),
        ));
    }
    Ok(x)
}

fn check_matrix(
    ctx: &Ctx,
    raw: &RawMatrix,
    at: usize,
    target: &Target,
) -> Result<Matrix, CampaignError> {
    let mut m = Matrix::default();
    let fields = raw.fields();
    for (axis, field) in &fields {
        let values = check_axis(ctx, *axis, field)?;
        m.axes.insert(*axis, values);
    }
    let span_of = |a: Axis| {
        fields
            .iter()
            .find(|(x, _)| *x == a)
            .map(|(_, f)| f.span().start)
            .unwrap_or(at)
    };
    if m.axes.contains_key(&Axis::Payload) && m.axes.contains_key(&Axis::Frame) {
        return Err(ctx.err(
            span_of(Axis::Frame),
            "frame",
            "give either `payload` or `frame`, not both, in one matrix",
        ));
    }
    // One rate law and one size law per run.
    for (a, b) in [
        (Axis::Pps, Axis::Rate),
        (Axis::Pps, Axis::Idt),
        (Axis::Rate, Axis::Idt),
        (Axis::Payload, Axis::Size),
        (Axis::Frame, Axis::Size),
    ] {
        if m.axes.contains_key(&a) && m.axes.contains_key(&b) {
            return Err(ctx.err(
                span_of(b),
                b.name(),
                format!(
                    "give either `{}` or `{}`, not both, in one matrix",
                    a.name(),
                    b.name()
                ),
            ));
        }
    }
    if let Some(apps) = m.axes.get(&Axis::App) {
        let modelled = apps.iter().any(|a| a != "constant");
        for a in [
            Axis::Payload,
            Axis::Frame,
            Axis::Pps,
            Axis::Rate,
            Axis::Idt,
            Axis::Size,
        ] {
            if modelled && m.axes.contains_key(&a) {
                return Err(ctx.err(
                    span_of(a),
                    a.name(),
                    "application models set their own sizes and rates; put this sweep in its own [[matrix]] block",
                ));
            }
        }
    }
    if m.axes.contains_key(&Axis::Cc)
        && m.axes
            .get(&Axis::Transport)
            .is_none_or(|t| t.iter().any(|x| x != "tcp"))
    {
        return Err(ctx.err(
            span_of(Axis::Cc),
            "cc",
            "congestion control applies to TCP flows; give transport = [\"tcp\"] in this matrix",
        ));
    }
    // A reverse flow is sent by the receiver from its own sockets and
    // measured one way by us (send refuses these combinations too).
    if m.axes
        .get(&Axis::Direction)
        .is_some_and(|d| d.iter().any(|x| x != "forward"))
    {
        if m.axes
            .get(&Axis::Meter)
            .is_some_and(|x| x.iter().any(|v| v == "rtt"))
        {
            return Err(ctx.err(
                span_of(Axis::Direction),
                "direction",
                "reverse and bidir flows are measured one way; put meter = \"rtt\" in a [[matrix]] of its own",
            ));
        }
        for a in [Axis::Dscp, Axis::Cc, Axis::Window] {
            if m.axes.contains_key(&a) {
                return Err(ctx.err(
                    span_of(Axis::Direction),
                    "direction",
                    format!(
                        "`{}` sets the sender's sockets and does not reach the receiver's reverse flows; put it in a [[matrix]] without reverse or bidir",
                        a.name()
                    ),
                ));
            }
        }
    }
    if m.axes.contains_key(&Axis::Codec)
        && !m
            .axes
            .get(&Axis::App)
            .is_some_and(|a| a.iter().any(|x| x == "voip"))
    {
        return Err(ctx.err(
            span_of(Axis::Codec),
            "codec",
            "a codec needs app = \"voip\" in the same matrix",
        ));
    }
    if let Some(apps) = m.axes.get(&Axis::App) {
        if apps.iter().any(|a| a == "voip") && !m.axes.contains_key(&Axis::Codec) {
            return Err(ctx.err(
                span_of(Axis::App),
                "app",
                "app \"voip\" needs a `codec` axis",
            ));
        }
    }
    // Impairments a preset's links cannot take are refused here, naming the
    // axis, rather than when the run's test-bed is built (a topology file
    // may give its links their own delay and rate; the bed checks those).
    if let Target::Testbed(t) = target {
        let preset = t.preset.is_some();
        let nonzero_delays = m.axes.get(&Axis::Delay).is_some_and(|d| {
            d.iter()
                .all(|v| wirebench_testbed::spec::parse_duration_ns(v).is_ok_and(|ns| ns > 0))
        });
        if preset && m.axes.contains_key(&Axis::Jitter) && !nonzero_delays {
            return Err(ctx.err(
                span_of(Axis::Jitter),
                "jitter",
                "jitter needs a delay: give a `delay` axis with non-zero values in this matrix",
            ));
        }
        // Axes that only act on a link with a rate ("none" is no AQM).
        let unrated = preset && t.link_rate.is_none() && !m.axes.contains_key(&Axis::LinkRate);
        let needs_rate = [
            (Axis::Aqm, "aqm manages a rated link's queue"),
            (Axis::Slack, "slack times a rated link's emulator"),
        ];
        for (a, why) in needs_rate {
            let on = m
                .axes
                .get(&a)
                .is_some_and(|v| v.iter().any(|v| v != "none"));
            if unrated && on {
                return Err(ctx.err(
                    span_of(a),
                    a.name(),
                    format!("{why}: set link_rate in [testbed] or give a `link_rate` axis"),
                ));
            }
        }
    }
    for a in Axis::ALL.into_iter().filter(|a| a.is_link()) {
        // Real nodes that allow it take MTU and offload axes.
        let real_ok = match target {
            Target::Hosts(h) => match a {
                Axis::Mtu => h.nodes.iter().any(|n| n.apply_mtu),
                Axis::Offloads => h.nodes.iter().any(|n| n.apply_offloads),
                Axis::LinkRate => h.nodes.iter().any(|n| n.apply_link_rate),
                _ => false,
            },
            _ => false,
        };
        if m.axes.contains_key(&a) && !matches!(target, Target::Testbed(_)) && !real_ok {
            return Err(ctx.err(
                span_of(a),
                a.name(),
                "link settings can only be varied on an emulated [testbed] (mtu, offloads and link_rate also on [[hosts.node]]s with apply_mtu / apply_offloads / apply_link_rate)",
            ));
        }
    }
    if let Some(senders) = m.axes.get(&Axis::Sender) {
        let names: Vec<&str> = match target {
            Target::Hosts(h) => h
                .nodes
                .iter()
                .filter(|n| n.role == NodeRole::Sender)
                .map(|n| n.name.as_str())
                .collect(),
            _ => Vec::new(),
        };
        if names.is_empty() {
            return Err(ctx.err(
                span_of(Axis::Sender),
                "sender",
                "the sender axis picks among [[hosts.node]] senders; this campaign has none",
            ));
        }
        if let Some(s) = senders.iter().find(|s| !names.contains(&s.as_str())) {
            return Err(ctx.err(
                span_of(Axis::Sender),
                "sender",
                format!(
                    "no sender node named {s:?} (sender nodes: {})",
                    names.join(", ")
                ),
            ));
        }
    }
    check_pairing_axis(
        ctx,
        &m,
        span_of(Axis::Pairing),
        span_of(Axis::Sender),
        target,
    )?;
    if let Some(frames) = m.axes.get(&Axis::Frame) {
        // Every payload the frame axis produces must still hold the probe header.
        let one = |a: Axis, d: &str| {
            m.axes
                .get(&a)
                .cloned()
                .unwrap_or_else(|| vec![d.to_string()])
        };
        for f in frames {
            let f: u32 = f.parse().unwrap_or(0);
            for ip in one(Axis::Ip, "4") {
                for tr in one(Axis::Transport, "udp") {
                    let ipv: u8 = ip.parse().unwrap_or(4);
                    if frame_payload(f, ipv, &tr).is_none_or(|p| p < MIN_PAYLOAD) {
                        return Err(ctx.err(
                            span_of(Axis::Frame),
                            "frame",
                            format!(
                                "frame {f} B leaves less than the {MIN_PAYLOAD} B probe header after Ethernet, IPv{ip} and {} headers",
                                tr.to_uppercase()
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(m)
}

/// The `pairing` axis names defined pairings, is not mixed with the
/// `sender` axis, and a campaign with pairings gives one in every block
/// (senders without `to` have no receiver otherwise).
fn check_pairing_axis(
    ctx: &Ctx,
    m: &Matrix,
    at: usize,
    sender_at: usize,
    target: &Target,
) -> Result<(), CampaignError> {
    let defined = match target {
        Target::Hosts(h) => Some(&h.pairings),
        _ => None,
    }
    .filter(|p| !p.is_empty());
    let Some(values) = m.axes.get(&Axis::Pairing) else {
        if defined.is_some() {
            return Err(ctx.err(
                at,
                "pairing",
                "[hosts.pairings] is given: every matrix block needs a `pairing` axis naming the pairings it runs",
            ));
        }
        return Ok(());
    };
    let Some(defined) = defined else {
        return Err(ctx.err(
            at,
            "pairing",
            "the pairing axis picks among [hosts.pairings] entries; this campaign has none",
        ));
    };
    if m.axes.contains_key(&Axis::Sender) {
        return Err(ctx.err(
            sender_at,
            "sender",
            "give either `sender` or `pairing`, not both, in one matrix (a pairing names its senders)",
        ));
    }
    if let Some(p) = values.iter().find(|p| !defined.contains_key(*p)) {
        return Err(ctx.err(
            at,
            "pairing",
            format!(
                "no pairing named {p:?} in [hosts.pairings] (pairings: {})",
                defined.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(())
}

fn opt_string(s: &Option<Spanned<String>>) -> Option<String> {
    s.as_ref().map(|x| x.get_ref().clone())
}

fn check_mtu(ctx: &Ctx, v: &Option<Spanned<i64>>) -> Result<Option<u32>, CampaignError> {
    match v {
        None => Ok(None),
        Some(m) if (68..=65535).contains(m.get_ref()) => Ok(Some(*m.get_ref() as u32)),
        Some(m) => Err(ctx.at(
            m,
            "mtu",
            format!("MTU must be 68..=65535, got {}", m.get_ref()),
        )),
    }
}

fn check_rate(ctx: &Ctx, v: &Option<Spanned<String>>) -> Result<Option<String>, CampaignError> {
    match v {
        None => Ok(None),
        Some(r) if parse_link_rate(r.get_ref()).is_some() => {
            Ok(Some(r.get_ref().to_ascii_lowercase()))
        }
        Some(r) => Err(ctx.at(
            r,
            "link_rate",
            format!(
                "link rate must look like \"100mbit\" or \"1gbit\", got {:?}",
                r.get_ref()
            ),
        )),
    }
}

use wirebench_testbed::PRESETS;

type AddrCheck<'x> =
    dyn Fn(&Option<Spanned<String>>, &str, bool) -> Result<Option<String>, CampaignError> + 'x;

/// `[[hosts.node]]`: names unique, exactly one way in, a known role,
/// receivers with an address, every sender's receiver known.
fn check_nodes(
    ctx: &Ctx,
    hr: &RawHosts,
    check_addr: &AddrCheck,
) -> Result<Vec<HostNode>, CampaignError> {
    let mut out: Vec<HostNode> = Vec::new();
    let raw = hr.node.as_deref().unwrap_or_default();
    let dflt = hr.defaults.clone().unwrap_or_default();
    for rn in raw {
        let n = rn.get_ref();
        let name = n.name.get_ref().clone();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ctx.at(&n.name, "name", "node names are letters, digits, - and _"));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(ctx.at(&n.name, "name", format!("node {name:?} is given twice")));
        }
        let ways = [
            n.ssh.is_some(),
            n.local.as_ref().is_some_and(|l| *l.get_ref()),
            n.netns.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() != 1 {
            return Err(ctx.at(
                rn,
                "ssh",
                format!("node {name:?} needs exactly one of `ssh = \"user@host\"`, `local = true` or `netns = \"NS\"`"),
            ));
        }
        let reach = if let Some(d) = &n.ssh {
            if d.get_ref().is_empty() || d.get_ref().starts_with('-') {
                return Err(ctx.at(d, "ssh", "must be a destination like \"user@host\""));
            }
            NodeReach::Ssh {
                dest: d.get_ref().clone(),
                options: n
                    .ssh_options
                    .clone()
                    .or_else(|| dflt.ssh_options.clone())
                    .unwrap_or_default(),
            }
        } else if let Some(ns) = &n.netns {
            NodeReach::Netns(ns.get_ref().clone())
        } else {
            NodeReach::Local
        };
        let role = match n.role.get_ref().as_str() {
            "sender" => NodeRole::Sender,
            "receiver" => NodeRole::Receiver,
            "router" => NodeRole::Router,
            other => {
                return Err(ctx.at(
                    &n.role,
                    "role",
                    format!("role must be sender, receiver or router, got {other:?}"),
                ))
            }
        };
        let parse = |a: Option<String>| a.and_then(|t| t.parse().ok());
        let ipv4 = parse(check_addr(&n.ipv4, "ipv4", false)?);
        let ipv6 = parse(check_addr(&n.ipv6, "ipv6", true)?);
        if role == NodeRole::Receiver && ipv4.is_none() && ipv6.is_none() {
            return Err(ctx.at(
                rn,
                "ipv4",
                format!("receiver node {name:?} needs its data address: `ipv4` and/or `ipv6`"),
            ));
        }
        out.push(HostNode {
            name,
            reach,
            agent: n.agent.clone().or_else(|| dflt.agent.clone()),
            role,
            to: n.to.as_ref().map(|t| t.get_ref().clone()),
            ipv4,
            ipv6,
            apply_mtu: n.apply_mtu.or(dflt.apply_mtu).unwrap_or(false),
            apply_offloads: n.apply_offloads.or(dflt.apply_offloads).unwrap_or(false),
            apply_link_rate: n.apply_link_rate.or(dflt.apply_link_rate).unwrap_or(false),
            interfaces: n.interfaces.clone(),
        });
    }
    if out.is_empty() {
        return Ok(out);
    }
    let receivers: Vec<String> = out
        .iter()
        .filter(|n| n.role == NodeRole::Receiver)
        .map(|n| n.name.clone())
        .collect();
    if receivers.is_empty() || !out.iter().any(|n| n.role == NodeRole::Sender) {
        return Err(ctx.err(
            0,
            "node",
            "[[hosts.node]] needs at least one sender and one receiver",
        ));
    }
    if hr.receiver.is_some() || hr.receiver6.is_some() || hr.port.is_some() {
        return Err(ctx.err(
            0,
            "receiver",
            "with [[hosts.node]] the receivers are nodes: drop `receiver`/`receiver6`/`port` from [hosts]",
        ));
    }
    for (n, rn) in out.iter_mut().zip(raw) {
        if n.role != NodeRole::Sender {
            if let Some(t) = &rn.get_ref().to {
                return Err(ctx.at(t, "to", "only a sender has `to`"));
            }
            continue;
        }
        match &n.to {
            None if receivers.len() == 1 => n.to = Some(receivers[0].clone()),
            // Each pairing names its receiver.
            None if hr.pairings.is_some() => {}
            None => {
                return Err(ctx.at(
                    rn,
                    "to",
                    format!(
                        "sender {:?}: several receivers, say which with `to`",
                        n.name
                    ),
                ))
            }
            Some(t) if receivers.contains(t) => {}
            Some(t) => {
                return Err(ctx.at(
                    rn.get_ref().to.as_ref().unwrap_or(&rn.get_ref().name),
                    "to",
                    format!("{t:?} is not a receiver node"),
                ))
            }
        }
    }
    Ok(out)
}

/// `[hosts.pairings]`: each entry's nodes exist with the role it gives
/// them.
fn check_pairings(
    ctx: &Ctx,
    hr: &RawHosts,
    nodes: &[HostNode],
) -> Result<BTreeMap<String, Pairing>, CampaignError> {
    let mut out = BTreeMap::new();
    let Some(raw) = &hr.pairings else {
        return Ok(out);
    };
    if nodes.is_empty() {
        return Err(ctx.at(
            raw,
            "pairings",
            "pairings pick among [[hosts.node]] nodes; this campaign has none",
        ));
    }
    if raw.get_ref().is_empty() {
        return Err(ctx.at(raw, "pairings", "is empty; give at least one pairing"));
    }
    for (name, p) in raw.get_ref() {
        if !super::axes::is_name(name) {
            return Err(ctx.at(
                p,
                "pairings",
                format!("pairing name {name:?}: letters, digits, - and _ only"),
            ));
        }
        let rp = p.get_ref();
        let role_of = |n: &str| nodes.iter().find(|x| x.name == n).map(|x| x.role);
        let want = |at: usize, key: &str, n: &str, role: NodeRole| match role_of(n) {
            Some(r) if r == role => Ok(n.to_string()),
            Some(r) => Err(ctx.err(
                at,
                &format!("pairings.{name}.{key}"),
                format!("node {n:?} is a {}, not a {}", r.as_str(), role.as_str()),
            )),
            None => Err(ctx.err(
                at,
                &format!("pairings.{name}.{key}"),
                format!(
                    "no node named {n:?} in [[hosts.node]] (nodes: {})",
                    nodes
                        .iter()
                        .map(|x| x.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        };
        let senders = rp.sender.get_ref().list();
        if senders.is_empty() {
            return Err(ctx.at(
                &rp.sender,
                &format!("pairings.{name}.sender"),
                "give at least one sender node",
            ));
        }
        let s_at = rp.sender.span().start;
        let senders = senders
            .iter()
            .map(|n| want(s_at, "sender", n, NodeRole::Sender))
            .collect::<Result<Vec<_>, _>>()?;
        let receiver = want(
            rp.receiver.span().start,
            "receiver",
            rp.receiver.get_ref(),
            NodeRole::Receiver,
        )?;
        let routers = match &rp.routers {
            None => Vec::new(),
            Some(r) => r
                .get_ref()
                .iter()
                .map(|n| want(r.span().start, "routers", n, NodeRole::Router))
                .collect::<Result<Vec<_>, _>>()?,
        };
        out.insert(
            name.clone(),
            Pairing {
                senders,
                receiver,
                routers,
            },
        );
    }
    Ok(out)
}

fn check_target(ctx: &Ctx, raw: &RawCampaign) -> Result<Target, CampaignError> {
    let given = [
        raw.testbed.is_some(),
        raw.hosts.is_some(),
        raw.loopback.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if given != 1 {
        return Err(ctx.err(
            0,
            "testbed",
            "give exactly one of [testbed], [hosts] or [loopback]",
        ));
    }
    if raw.loopback.is_some() {
        return Ok(Target::Loopback);
    }
    if let Some(h) = &raw.hosts {
        let hr = h.get_ref();
        let check_addr = |a: &Option<Spanned<String>>,
                          key: &str,
                          v6: bool|
         -> Result<Option<String>, CampaignError> {
            match a {
                None => Ok(None),
                Some(s) => {
                    let ok = s
                        .get_ref()
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_ipv6() == v6);
                    let want = if v6 { "an IPv6" } else { "an IPv4" };
                    if ok {
                        Ok(Some(s.get_ref().clone()))
                    } else {
                        Err(ctx.at(
                            s,
                            key,
                            format!("must be {want} address, got {:?}", s.get_ref()),
                        ))
                    }
                }
            }
        };
        let receiver = check_addr(&hr.receiver, "receiver", false)?;
        let receiver6 = check_addr(&hr.receiver6, "receiver6", true)?;
        let nodes = check_nodes(ctx, hr, &check_addr)?;
        if hr.defaults.is_some() && nodes.is_empty() {
            return Err(ctx.at(
                h,
                "defaults",
                "[hosts.defaults] sets [[hosts.node]] settings; this campaign has no nodes",
            ));
        }
        if receiver.is_none() && receiver6.is_none() && nodes.is_empty() {
            return Err(ctx.at(
                h,
                "receiver",
                "[hosts] needs `receiver` (IPv4) and/or `receiver6` (IPv6)",
            ));
        }
        let port = match &hr.port {
            None => None,
            Some(p) if (1..=65535).contains(p.get_ref()) => Some(*p.get_ref() as u16),
            Some(p) => {
                return Err(ctx.at(
                    p,
                    "port",
                    format!("port must be 1..=65535, got {}", p.get_ref()),
                ))
            }
        };
        return Ok(Target::Hosts(HostsTarget {
            receiver,
            receiver6,
            port,
            mtu: check_mtu(ctx, &hr.mtu)?,
            link_rate: check_rate(ctx, &hr.link_rate)?,
            pairings: check_pairings(ctx, hr, &nodes)?,
            nodes,
        }));
    }
    let t = raw
        .testbed
        .as_ref()
        .map(|t| t.get_ref().clone())
        .unwrap_or_else(|| RawTestbed {
            preset: None,
            file: None,
            sender: None,
            receiver: None,
            mtu: None,
            link_rate: None,
            offloads: None,
            forward_pps: None,
            name: None,
        });
    let span = raw.testbed.as_ref().map(|s| s.span().start).unwrap_or(0);
    match (&t.preset, &t.file) {
        (Some(_), Some(f)) => {
            return Err(ctx.at(f, "file", "give either `preset` or `file`, not both"))
        }
        (None, None) => return Err(ctx.err(span, "preset", "[testbed] needs `preset` or `file`")),
        (Some(p), None) if !PRESETS.contains(&p.get_ref().as_str()) => {
            return Err(ctx.at(
                p,
                "preset",
                format!(
                    "unknown preset {:?}; known: {}",
                    p.get_ref(),
                    PRESETS.join(", ")
                ),
            ))
        }
        _ => {}
    }
    let default_receiver = match t.preset.as_ref().map(|p| p.get_ref().as_str()) {
        Some(_) => "b",
        None => "",
    };
    let sender = opt_string(&t.sender).unwrap_or_else(|| {
        if default_receiver.is_empty() {
            String::new()
        } else {
            "a".into()
        }
    });
    let receiver = opt_string(&t.receiver).unwrap_or_else(|| default_receiver.to_string());
    if sender.is_empty() || receiver.is_empty() {
        return Err(ctx.err(
            span,
            "sender",
            "a topology file needs `sender` and `receiver` node names",
        ));
    }
    if sender == receiver {
        return Err(ctx.err(
            span,
            "receiver",
            "sender and receiver must be different nodes",
        ));
    }
    let name = opt_string(&t.name).unwrap_or_else(|| "wbc".into());
    if wirebench_testbed::check_testbed_name(&name).is_err() {
        let at = t.name.as_ref().map(|n| n.span().start).unwrap_or(span);
        return Err(ctx.err(
            at,
            "name",
            format!("test-bed name must be 1-12 lowercase letters or digits, got {name:?}"),
        ));
    }
    Ok(Target::Testbed(TestbedTarget {
        preset: opt_string(&t.preset),
        file: opt_string(&t.file),
        sender,
        receiver,
        mtu: check_mtu(ctx, &t.mtu)?,
        link_rate: check_rate(ctx, &t.link_rate)?,
        offloads: t.offloads.as_ref().map(|o| *o.get_ref()),
        forward_pps: match &t.forward_pps {
            Some(p) => {
                let v = *p.get_ref();
                if !(1..=100_000_000).contains(&v) {
                    return Err(ctx.at(
                        p,
                        "forward_pps",
                        format!("router packet-rate cap must be 1..=100000000 packets/s, got {v}"),
                    ));
                }
                Some(v as u64)
            }
            None => None,
        },
        name,
    }))
}

fn check_length(
    ctx: &Ctx,
    duration: &Option<Spanned<f64>>,
    packets: &Option<Spanned<i64>>,
    kbytes: &Option<Spanned<i64>>,
) -> Result<Option<RunLength>, CampaignError> {
    let n = [duration.is_some(), packets.is_some(), kbytes.is_some()]
        .iter()
        .filter(|x| **x)
        .count();
    if n > 1 {
        let at = packets
            .as_ref()
            .map(|p| p.span().start)
            .or(kbytes.as_ref().map(|k| k.span().start))
            .unwrap_or(0);
        return Err(ctx.err(
            at,
            "duration_s",
            "give only one of `duration_s`, `packets` or `kbytes`",
        ));
    }
    if let Some(d) = duration {
        return Ok(Some(RunLength::Duration {
            seconds: seconds(ctx, d, "duration_s", false)?,
        }));
    }
    if let Some(p) = packets {
        return Ok(Some(RunLength::Packets {
            count: positive_u64(ctx, p, "packets")?,
        }));
    }
    if let Some(k) = kbytes {
        return Ok(Some(RunLength::KBytes {
            count: positive_u64(ctx, k, "kbytes")?,
        }));
    }
    Ok(None)
}

/// Most scenarios one campaign may expand to (all matrix blocks
/// together, before duplicates are removed). Each is at least one run of
/// about a second, so this is already more than a day of measuring; the
/// bound keeps a few lines of TOML (three 1000-value axes: 10^9
/// scenarios) from hanging `run` while it expands them.
pub const MAX_SCENARIOS: usize = 100_000;

/// The matrix blocks' scenarios (the product of each block's value
/// counts, summed) must stay within [`MAX_SCENARIOS`]; the error names
/// the block that passes it. `at(i)` is where block `i` starts.
fn check_matrix_size(
    ctx: &Ctx,
    matrices: &[Matrix],
    at: impl Fn(usize) -> usize,
) -> Result<(), CampaignError> {
    let mut total: usize = 0;
    for (i, m) in matrices.iter().enumerate() {
        let n = m
            .axes
            .values()
            .try_fold(1usize, |acc, v| acc.checked_mul(v.len()));
        match n.and_then(|n| total.checked_add(n)) {
            Some(t) if t <= MAX_SCENARIOS => total = t,
            _ => {
                let counts: Vec<String> = m
                    .axes
                    .iter()
                    .map(|(a, v)| format!("{} {}", v.len(), a.name()))
                    .collect();
                return Err(ctx.err(
                    at(i),
                    "matrix",
                    format!(
                        "more than {MAX_SCENARIOS} scenarios ({}{}); split the campaign",
                        counts.join(" x "),
                        if i > 0 {
                            ", with the blocks before it"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `repetitions = N`, or `{ min = 5, max = 30, until_cv = 0.10 }` /
/// `{ ..., until_ci = "2%" }` with an optional `metric` (the headline the
/// rule watches; payload throughput unless it says).
fn check_repetitions_value(
    ctx: &Ctx,
    r: &Spanned<toml::Value>,
) -> Result<(u32, Option<Adaptive>), CampaignError> {
    let bad = |reason: String| ctx.at(r, "repetitions", reason);
    let whole = |v: &toml::Value, what: &str| match v {
        toml::Value::Integer(x) if (1..=10_000).contains(x) => Ok(*x as u32),
        other => Err(bad(format!("{what}must be 1..=10000, got {other}"))),
    };
    let t = match r.get_ref() {
        toml::Value::Integer(_) => return Ok((whole(r.get_ref(), "")?, None)),
        toml::Value::Table(t) => t,
        other => {
            return Err(bad(format!(
                "must be a whole number 1..=10000 or a table {{ min = 5, max = 30, until_cv = 0.10 }}, got {other}"
            )))
        }
    };
    if let Some(k) = t
        .keys()
        .find(|k| !["min", "max", "until_cv", "until_ci", "metric"].contains(&k.as_str()))
    {
        return Err(bad(format!(
            "unknown key {k:?} (expected min, max, until_cv or until_ci, metric)"
        )));
    }
    let min = match t.get("min") {
        Some(v) => whole(v, "min ")?,
        None => return Err(bad("an adaptive table needs `min` (at least 2)".into())),
    };
    let max = match t.get("max") {
        Some(v) => whole(v, "max ")?,
        None => return Err(bad("an adaptive table needs `max`".into())),
    };
    if min < 2 || max < min {
        return Err(bad(format!(
            "needs 2 <= min <= max (a spread needs two runs), got min = {min}, max = {max}"
        )));
    }
    let until = match (t.get("until_cv"), t.get("until_ci")) {
        (Some(v), None) => match v.as_float().or(v.as_integer().map(|i| i as f64)) {
            Some(x) if x > 0.0 && x < 10.0 => Until::Cv(x),
            _ => {
                return Err(bad(format!(
                    "until_cv must be a ratio such as 0.10, got {v}"
                )))
            }
        },
        (None, Some(v)) => match v
            .as_str()
            .and_then(|s| s.trim().strip_suffix('%'))
            .and_then(|s| s.trim().parse::<f64>().ok())
        {
            Some(p) if p > 0.0 && p < 100.0 => Until::Ci(p / 100.0),
            _ => {
                return Err(bad(format!(
                    "until_ci must be a percentage of the mean such as \"2%\", got {v}"
                )))
            }
        },
        _ => {
            return Err(bad(
                "give one of until_cv (e.g. 0.10) or until_ci (e.g. \"2%\")".into(),
            ))
        }
    };
    let metric = match t.get("metric") {
        None => DEFAULT_SETTLE_METRIC.to_string(),
        Some(toml::Value::String(m)) if crate::metrics::metric(m).is_some() => m.clone(),
        Some(other) => return Err(bad(format!("metric must be a metric key such as \"throughput_payload_bps\" or \"delay_mean_s\", got {other}"))),
    };
    Ok((min, Some(Adaptive { max, until, metric })))
}

/// Most repeats `repeat_stalled` allows per planned run: each costs a
/// whole run, and a host that stalls run after run will not be outwaited.
pub const REPEAT_STALLED_MAX: i64 = 5;

/// `repeat_stalled = N`: 0..=[`REPEAT_STALLED_MAX`], and only where link
/// emulators count stalls (an emulated `[testbed]`, runs of a plan).
fn check_repeat_stalled(
    ctx: &Ctx,
    raw: &RawCampaign,
    target: &Target,
) -> Result<u32, CampaignError> {
    let Some(r) = &raw.repeat_stalled else {
        return Ok(0);
    };
    let n = *r.get_ref();
    if !(0..=REPEAT_STALLED_MAX).contains(&n) {
        return Err(ctx.at(
            r,
            "repeat_stalled",
            format!("must be 0..={REPEAT_STALLED_MAX}, got {n}"),
        ));
    }
    if n > 0 {
        if !matches!(target, Target::Testbed(_)) {
            return Err(ctx.at(
                r,
                "repeat_stalled",
                "only an emulated [testbed] has link emulators that count host stalls; on [loopback] and [hosts] it could never act",
            ));
        }
        if raw.rfc2544.is_some() {
            return Err(ctx.at(
                r,
                "repeat_stalled",
                "an [rfc2544] search decides each trial from the last and does not repeat trials",
            ));
        }
    }
    Ok(n as u32)
}

fn check_repetitions(ctx: &Ctx, r: &Spanned<i64>) -> Result<u32, CampaignError> {
    let x = *r.get_ref();
    if !(1..=10_000).contains(&x) {
        return Err(ctx.at(r, "repetitions", format!("must be 1..=10000, got {x}")));
    }
    Ok(x as u32)
}

/// Parses `axis=value,axis=value`.
pub fn parse_selector(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=')?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    (!out.is_empty()).then_some(out)
}
impl Campaign {
    /// Parses and validates a campaign file. `origin` (usually the path)
    /// prefixes every error message.
    pub fn parse(text: &str, origin: &str) -> Result<Campaign, CampaignError> {
        let ctx = Ctx { origin, text };
        let raw: RawCampaign = toml::from_str(text).map_err(|e| ctx.toml_err(e))?;
        let target = check_target(&ctx, &raw)?;

        let matrix_at = text.find("matrix]").unwrap_or(0);
        let raw_matrices: Vec<(RawMatrix, usize)> = match &raw.matrix {
            None if raw.rfc2544.is_some() => Vec::new(),
            Some(_) if raw.rfc2544.is_some() => {
                return Err(ctx.err(
                    matrix_at,
                    "matrix",
                    "give either a [matrix] or an [rfc2544] search, not both",
                ))
            }
            None => {
                return Err(ctx.err(
                    0,
                    "matrix",
                    "a campaign needs a [matrix] table (or [[matrix]] blocks)",
                ))
            }
            Some(RawMatrices::One(one)) => vec![((**one).clone(), matrix_at)],
            Some(RawMatrices::Many(many)) => many
                .iter()
                .map(|m| (m.get_ref().clone(), m.span().start))
                .collect(),
        };
        if raw_matrices.is_empty() && raw.rfc2544.is_none() {
            return Err(ctx.err(matrix_at, "matrix", "no matrix blocks given"));
        }
        let matrices = raw_matrices
            .iter()
            .map(|(m, at)| check_matrix(&ctx, m, *at, &target))
            .collect::<Result<Vec<_>, _>>()?;
        check_matrix_size(&ctx, &matrices, |i| raw_matrices[i].1)?;
        let length_given = check_length(&ctx, &raw.duration_s, &raw.packets, &raw.kbytes)?;
        if !matches!(length_given, Some(RunLength::KBytes { .. })) {
            if let Some((_, at)) = matrices.iter().zip(&raw_matrices).find_map(|(m, (_, at))| {
                m.axes
                    .get(&Axis::App)
                    .is_some_and(|a| a.iter().any(|x| x == "file"))
                    .then_some(((), *at))
            }) {
                return Err(ctx.err(
                    at,
                    "app",
                    "app \"file\" is a transfer: give its size as the campaign's `kbytes` (its completion time is the metric completion_s)",
                ));
            }
        }
        // A file transfer lasts as long as its bytes take; a run length
        // in seconds would cut it.
        if let Some((_, at)) = matrices.iter().zip(&raw_matrices).find(|(m, _)| {
            m.axes.contains_key(&Axis::Duration)
                && m.axes
                    .get(&Axis::App)
                    .is_some_and(|a| a.iter().any(|x| x == "file"))
        }) {
            return Err(ctx.err(
                at.1,
                "duration",
                "app \"file\" runs until its `kbytes` are through; put the duration sweep in its own [[matrix]] block",
            ));
        }

        let (repetitions, adaptive) = match &raw.repetitions {
            Some(r) => check_repetitions_value(&ctx, r)?,
            None => (1, None),
        };
        let length = check_length(&ctx, &raw.duration_s, &raw.packets, &raw.kbytes)?
            .unwrap_or(RunLength::Duration { seconds: 10.0 });
        let warmup_s = match &raw.warmup_s {
            Some(w) => seconds(&ctx, w, "warmup_s", true)?,
            None => 0.0,
        };
        let pause_s = match &raw.pause_s {
            Some(w) => seconds(&ctx, w, "pause_s", true)?,
            None => 0.0,
        };
        let linger_s = match &raw.linger_s {
            Some(l) => Some(seconds(&ctx, l, "linger_s", true)?),
            None => None,
        };
        let interval_ms = match &raw.interval_ms {
            Some(i) if (10..=3_600_000).contains(i.get_ref()) => Some(*i.get_ref() as u64),
            Some(i) => {
                return Err(ctx.at(
                    i,
                    "interval_ms",
                    format!("must be 10..=3600000 ms, got {}", i.get_ref()),
                ))
            }
            None => None,
        };
        let seed = match &raw.seed {
            Some(s) if *s.get_ref() >= 0 => *s.get_ref() as u64,
            Some(s) => return Err(ctx.at(s, "seed", "seed must not be negative")),
            None => 1,
        };
        let order = match &raw.order {
            None => Order::Sequential,
            Some(o) => match o.get_ref().as_str() {
                "sequential" => Order::Sequential,
                "shuffled" => Order::Shuffled { seed },
                other => {
                    return Err(ctx.at(
                        o,
                        "order",
                        format!("order must be \"sequential\" or \"shuffled\", got {other:?}"),
                    ))
                }
            },
        };
        let run_timeout_s = match &raw.run_timeout_s {
            Some(t) => Some(seconds(&ctx, t, "run_timeout_s", false)?),
            None => None,
        };
        let repeat_stalled = check_repeat_stalled(&ctx, &raw, &target)?;
        let name = match &raw.name {
            Some(n) => {
                let s = n.get_ref().trim().to_string();
                if s.is_empty() {
                    return Err(ctx.at(n, "name", "name must not be empty"));
                }
                s
            }
            None => std::path::Path::new(origin)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "campaign".into()),
        };
        let store = match &raw.store {
            None => None,
            Some(s) => {
                let t = s.get_ref().trim();
                if t.is_empty() {
                    return Err(ctx.at(s, "store", "store must not be empty"));
                }
                if crate::store::postgres::is_url(t) {
                    crate::store::postgres::Target::check(t)
                        .map_err(|why| ctx.at(s, "store", why))?;
                }
                Some(t.to_string())
            }
        };
        let quick_overrides = match &raw.quick {
            None => None,
            Some(q) => {
                let qr = q.get_ref();
                if let Some(r) = &qr.repetitions {
                    check_repetitions(&ctx, r)?;
                }
                check_length(&ctx, &qr.duration_s, &qr.packets, &qr.kbytes)?;
                for (k, v) in [
                    ("warmup_s", &qr.warmup_s),
                    ("pause_s", &qr.pause_s),
                    ("linger_s", &qr.linger_s),
                ] {
                    if let Some(v) = v {
                        seconds(&ctx, v, k, true)?;
                    }
                }
                for (axis, field) in qr.axes().fields() {
                    check_axis(&ctx, axis, field)?;
                    if !matrices.iter().any(|m| m.axes.contains_key(&axis)) {
                        return Err(ctx.at(
                            field,
                            axis.name(),
                            "[quick] overrides an axis no matrix has",
                        ));
                    }
                }
                Some(qr.clone())
            }
        };

        let mut c = Campaign {
            name,
            description: raw.description.clone().unwrap_or_default(),
            store,
            origin: origin.to_string(),
            text: text.to_string(),
            target,
            matrices,
            repetitions,
            adaptive,
            length,
            warmup_s,
            pause_s,
            linger_s,
            interval_ms,
            order,
            seed,
            baseline: None,
            run_timeout_s,
            repeat_stalled,
            quick: false,
            quick_overrides,
            rfc2544: raw
                .rfc2544
                .as_ref()
                .map(|r| (r.get_ref().clone(), ctx.line_of(r.span().start))),
            report: ReportOptions::default(),
        };
        if let Some(r) = &raw.report {
            c.report = c.check_report(&ctx, r)?;
        }
        // Overridden matrices must still be valid (e.g. quick sizes with apps).
        if c.quick_overrides.is_some() {
            let mut q = c.clone();
            q.apply_quick_inner(&ctx)?;
        }
        if let Some(b) = &raw.baseline {
            c.check_baseline(&ctx, b)?;
            c.baseline = Some(b.get_ref().clone());
        }
        Ok(c)
    }

    fn check_report(&self, ctx: &Ctx, r: &RawReport) -> Result<ReportOptions, CampaignError> {
        let mut o = ReportOptions::default();
        if let Some(c) = &r.columns {
            let axis = c.get_ref().trim();
            if Axis::from_name(axis).is_none() {
                return Err(ctx.at(c, "columns", format!("unknown axis {axis:?}")));
            }
            let values: std::collections::BTreeSet<String> = self
                .expand()
                .into_iter()
                .filter_map(|s| s.axes.get(axis).cloned())
                .collect();
            if values.len() < 2 {
                return Err(ctx.at(
                    c,
                    "columns",
                    format!("no [[matrix]] block varies {axis:?}: nothing to put side by side"),
                ));
            }
            o.columns = Some(axis.to_string());
        }
        if let Some(u) = &r.units {
            o.units = ThroughputUnits::parse(u.get_ref()).ok_or_else(|| {
                ctx.at(
                    u,
                    "units",
                    format!(
                        "units must be one of {}, got {:?}",
                        ThroughputUnits::NAMES.join(", "),
                        u.get_ref().trim()
                    ),
                )
            })?;
        }
        if let Some(z) = r.zoom {
            o.zoom = z;
        }
        Ok(o)
    }

    fn check_baseline(&self, ctx: &Ctx, b: &Spanned<String>) -> Result<(), CampaignError> {
        let sel = parse_selector(b.get_ref()).ok_or_else(|| {
            ctx.at(
                b,
                "baseline",
                "baseline must look like \"mtu=1500\" or \"ip=4,transport=udp\"",
            )
        })?;
        let scenarios = self.expand();
        for (k, v) in &sel {
            if Axis::from_name(k).is_none() {
                return Err(ctx.at(b, "baseline", format!("unknown axis {k:?}")));
            }
            if !scenarios.iter().any(|s| s.axes.get(k) == Some(v)) {
                return Err(ctx.at(b, "baseline", format!("no scenario has {k}={v}")));
            }
        }
        Ok(())
    }

    /// Applies the `[quick]` table (and repetitions = 2 unless it says
    /// otherwise): a short version of the same study.
    pub fn apply_quick(&mut self) -> Result<(), CampaignError> {
        let text = self.text.clone();
        let origin = self.origin.clone();
        let ctx = Ctx {
            origin: &origin,
            text: &text,
        };
        self.apply_quick_inner(&ctx)
    }

    fn apply_quick_inner(&mut self, ctx: &Ctx) -> Result<(), CampaignError> {
        self.quick = true;
        let q = self.quick_overrides.clone().unwrap_or_default();
        self.repetitions = match &q.repetitions {
            Some(r) => check_repetitions(ctx, r)?,
            None => 2,
        };
        // A quick adaptive campaign stops at twice its repetitions.
        let min = self.repetitions;
        if let Some(a) = &mut self.adaptive {
            a.max = a.max.min(2 * min).max(min);
        }
        match check_length(ctx, &q.duration_s, &q.packets, &q.kbytes)? {
            Some(l) => self.length = l,
            None => {
                if let RunLength::Duration { seconds } = self.length {
                    self.length = RunLength::Duration {
                        seconds: seconds.min(2.0),
                    };
                }
            }
        }
        if let Some(w) = &q.warmup_s {
            self.warmup_s = *w.get_ref();
        }
        if let Some(p) = &q.pause_s {
            self.pause_s = *p.get_ref();
        }
        if let Some(l) = &q.linger_s {
            self.linger_s = Some(*l.get_ref());
        }
        for (axis, field) in q.axes().fields() {
            let values = check_axis(ctx, axis, field)?;
            for m in &mut self.matrices {
                if m.axes.contains_key(&axis) {
                    m.axes.insert(axis, values.clone());
                }
            }
        }
        // Axes the [quick] table leaves alone follow their quick rule.
        let overridden: Vec<Axis> = q.axes().fields().iter().map(|(a, _)| *a).collect();
        let cap = match self.length {
            RunLength::Duration { seconds } => seconds,
            _ => 2.0,
        };
        for m in &mut self.matrices {
            for (axis, values) in m.axes.iter_mut() {
                if overridden.contains(axis) || axis.def().quick != QuickRule::CapAtRunLength {
                    continue;
                }
                let mut short: Vec<String> = Vec::new();
                for v in values.iter() {
                    let t = match v.parse::<f64>() {
                        Ok(x) if x > cap => cap.to_string(),
                        _ => v.clone(),
                    };
                    if !short.contains(&t) {
                        short.push(t);
                    }
                }
                *values = short;
            }
        }
        let quick_at = ctx.text.find("quick]").unwrap_or(0);
        check_matrix_size(ctx, &self.matrices, |_| quick_at)?;
        Ok(())
    }
}
