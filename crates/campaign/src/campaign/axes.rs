//! The campaign axes: one row each, naming the axis, parsing and checking
//! its values, and saying whether it changes the test-bed's links.

use super::check::Ctx;
use super::raw::{OneOrMany, Scalar};
use super::CampaignError;
use std::fmt;
use toml::Spanned;
use wirebench_model::app::{DitgCodec, ALL_APPS};
use wirebench_model::{MAX_PAYLOAD, MIN_PAYLOAD};

/// The `app` axis: the constant model (no `--app`) or one of D-ITG's
/// application models as the engine's model crate names them.
fn known_app(name: &str) -> bool {
    name == "constant" || ALL_APPS.contains(&name)
}

/// One matrix dimension. The declaration order is the order axes appear
/// in scenario keys, so keys stay stable whatever order the file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Axis {
    Ip,
    Transport,
    Meter,
    App,
    Codec,
    Payload,
    Frame,
    Pps,
    Flows,
    Mtu,
    LinkRate,
    Offloads,
    ForwardPps,
    /// Which sender node(s) of `[[hosts.node]]` send in the scenario: one
    /// node name per value (comparing systems: a Windows and a Linux
    /// sender to the same receiver).
    Sender,
    /// `send --dscp` of every flow: "EF vs best effort".
    Dscp,
    /// `send --cc` (TCP congestion control): "cubic vs bbr".
    Cc,
    /// `send --window` (socket buffers).
    Window,
    /// `send --rate` (payload bit/s) instead of `pps`.
    Rate,
    /// An inter-departure law in D-ITG letters, e.g. "E 1000" (`send -E 1000`).
    Idt,
    /// A size law in D-ITG letters, e.g. "u 100 1400" (`send -u 100 1400`).
    Size,
    /// Which way the flows run: forward, reverse (`send -R`) or bidir
    /// (`send --bidir`).
    Direction,
    /// Seconds per run (`send -t`), instead of the campaign's length: a
    /// pilot sweep of run lengths (10 s … 120 s) in one campaign.
    Duration,
}

impl Axis {
    pub const ALL: [Axis; 22] = [
        Axis::Ip,
        Axis::Transport,
        Axis::Meter,
        Axis::App,
        Axis::Codec,
        Axis::Payload,
        Axis::Frame,
        Axis::Pps,
        Axis::Flows,
        Axis::Mtu,
        Axis::LinkRate,
        Axis::Offloads,
        Axis::ForwardPps,
        Axis::Sender,
        Axis::Dscp,
        Axis::Cc,
        Axis::Window,
        Axis::Rate,
        Axis::Idt,
        Axis::Size,
        Axis::Direction,
        Axis::Duration,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Axis::Ip => "ip",
            Axis::Transport => "transport",
            Axis::Meter => "meter",
            Axis::App => "app",
            Axis::Codec => "codec",
            Axis::Payload => "payload",
            Axis::Frame => "frame",
            Axis::Pps => "pps",
            Axis::Flows => "flows",
            Axis::Mtu => "mtu",
            Axis::LinkRate => "link_rate",
            Axis::Offloads => "offloads",
            Axis::ForwardPps => "forward_pps",
            Axis::Sender => "sender",
            Axis::Dscp => "dscp",
            Axis::Cc => "cc",
            Axis::Window => "window",
            Axis::Rate => "rate",
            Axis::Idt => "idt",
            Axis::Size => "size",
            Axis::Direction => "direction",
            Axis::Duration => "duration",
        }
    }

    pub fn from_name(s: &str) -> Option<Axis> {
        Axis::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Axes that change the test-bed's links (a change forces a rebuild).
    pub fn is_link(self) -> bool {
        matches!(
            self,
            Axis::Mtu | Axis::LinkRate | Axis::Offloads | Axis::ForwardPps
        )
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
/// Parses a link rate (`100mbit`, `1gbit`, …) into bit/s with the
/// test-bed's own parser, so a campaign accepts exactly what `testbed up`
/// accepts.
pub fn parse_link_rate(s: &str) -> Option<f64> {
    wirebench_testbed::parse_rate(s).ok().map(|b| b as f64)
}

/// Validates one axis value and returns its canonical text.
fn check_value(ctx: &Ctx, offset: usize, axis: Axis, v: &Scalar) -> Result<String, CampaignError> {
    let key = axis.name();
    let bad = |reason: String| Err(ctx.err(offset, key, reason));
    let int = |v: &Scalar| match v {
        Scalar::Int(i) => Some(*i),
        _ => None,
    };
    match axis {
        Axis::Ip => match int(v) {
            Some(4) | Some(6) => Ok(v.text()),
            _ => bad(format!("IP version must be 4 or 6, got {}", v.text())),
        },
        Axis::Transport => match v {
            Scalar::Str(s) if s == "udp" || s == "tcp" => Ok(s.clone()),
            _ => bad(format!("transport must be \"udp\" or \"tcp\", got {}", v.text())),
        },
        Axis::Meter => match v {
            Scalar::Str(s) if s == "owd" || s == "rtt" => Ok(s.clone()),
            _ => bad(format!("meter must be \"owd\" or \"rtt\", got {}", v.text())),
        },
        Axis::App => match v {
            Scalar::Str(s) if known_app(&s.to_ascii_lowercase()) => Ok(s.to_ascii_lowercase()),
            _ => bad(format!(
                "unknown application {}; known: constant, {}",
                v.text(),
                ALL_APPS.join(", ")
            )),
        },
        Axis::Codec => match v {
            Scalar::Str(s) => DitgCodec::parse(s).ok(),
            _ => None,
        }
        .map_or_else(
            || {
                bad(format!(
                    "unknown codec {}; known: {}",
                    v.text(),
                    DitgCodec::ALL.map(DitgCodec::name).join(", ")
                ))
            },
            |c| Ok(c.name().to_string()),
        ),
        Axis::Payload => match int(v) {
            Some(b) if (MIN_PAYLOAD as i64..=MAX_PAYLOAD as i64).contains(&b) => Ok(b.to_string()),
            _ => bad(format!(
                "payload must be {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes (the probe header alone is {MIN_PAYLOAD}), got {}",
                v.text()
            )),
        },
        Axis::Frame => match int(v) {
            Some(b) if (64..=65553).contains(&b) => Ok(b.to_string()),
            _ => bad(format!("Ethernet frame size must be 64..=65553 bytes, got {}", v.text())),
        },
        Axis::Pps => match v {
            Scalar::Str(s) if s == "max" => Ok("max".into()),
            Scalar::Int(i) if *i > 0 => Ok(i.to_string()),
            Scalar::Float(f) if f.is_finite() && *f > 0.0 => Ok(f.to_string()),
            _ => bad(format!(
                "rate must be a positive number of packets per second or \"max\", got {}",
                v.text()
            )),
        },
        Axis::Flows => match int(v) {
            Some(n) if (1..=1024).contains(&n) => Ok(n.to_string()),
            _ => bad(format!("flows must be 1..=1024, got {}", v.text())),
        },
        Axis::Mtu => match int(v) {
            Some(m) if (68..=65535).contains(&m) => Ok(m.to_string()),
            _ => bad(format!("MTU must be 68..=65535, got {}", v.text())),
        },
        Axis::LinkRate => match v {
            Scalar::Str(s) if parse_link_rate(s).is_some() => Ok(s.to_ascii_lowercase()),
            _ => bad(format!(
                "link rate must look like \"100mbit\" or \"1gbit\", got {}",
                v.text()
            )),
        },
        Axis::ForwardPps => match int(v) {
            Some(p) if (1..=100_000_000).contains(&p) => Ok(p.to_string()),
            _ => bad(format!(
                "router packet-rate cap must be 1..=100000000 packets/s, got {}",
                v.text()
            )),
        },
        Axis::Offloads => match v {
            Scalar::Bool(b) => Ok(b.to_string()),
            Scalar::Str(s) if s == "on" || s == "off" => Ok((s == "on").to_string()),
            _ => bad(format!("offloads must be true/false (or \"on\"/\"off\"), got {}", v.text())),
        },
        // Checked against the nodes once the matrix is known.
        Axis::Sender => match v {
            Scalar::Str(s) if !s.is_empty() => Ok(s.clone()),
            _ => bad(format!("sender must be a sender node's name, got {}", v.text())),
        },
        Axis::Dscp => match wirebench_stats::opts::parse_dscp(&v.text()) {
            Ok(_) => Ok(v.text().to_ascii_lowercase()),
            Err(e) => bad(e),
        },
        Axis::Cc => match v {
            Scalar::Str(s) => wirebench_stats::opts::parse_cc(s).or_else(bad),
            _ => bad(format!("cc must be a name such as \"cubic\" or \"bbr\", got {}", v.text())),
        },
        Axis::Window => match wirebench_stats::opts::parse_window(&v.text()) {
            Ok(_) => Ok(v.text()),
            Err(e) => bad(e),
        },
        Axis::Rate => match wirebench_stats::opts::parse_bits(&v.text()) {
            Ok(_) => Ok(v.text()),
            Err(e) => bad(e),
        },
        Axis::Direction => match v {
            Scalar::Str(s) if ["forward", "reverse", "bidir"].contains(&s.as_str()) => {
                Ok(s.clone())
            }
            _ => bad(format!(
                "direction must be \"forward\", \"reverse\" (send -R) or \"bidir\" (send --bidir), got {}",
                v.text()
            )),
        },
        Axis::Idt | Axis::Size => match v {
            Scalar::Str(s) => law_text(s, axis == Axis::Idt).or_else(bad),
            _ => bad(format!("{key} must be a law in D-ITG letters such as \"E 1000\", got {}", v.text())),
        },
        Axis::Duration => match v {
            Scalar::Int(i) if (1..=86_400).contains(i) => Ok(i.to_string()),
            Scalar::Float(f) if f.is_finite() && *f > 0.0 && *f <= 86_400.0 => Ok(f.to_string()),
            _ => bad(format!(
                "duration must be more than 0 and at most 86400 seconds per run, got {}",
                v.text()
            )),
        },
    }
}

/// Checks a law in D-ITG letters ("E 1000", "u 100 1400"; upper case for
/// inter-departure times, lower case for sizes) with the model's own
/// parser; returns it with single spaces.
fn law_text(s: &str, idt: bool) -> Result<String, String> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut chars = words.first().map(|w| w.chars()).into_iter().flatten();
    let letter = match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_uppercase() == idt && c.is_ascii_alphabetic() => c,
        _ => {
            return Err(format!(
                "expected a D-ITG {} letter then its values, e.g. {:?}, got {s:?}",
                if idt {
                    "upper-case IDT"
                } else {
                    "lower-case size"
                },
                if idt { "E 1000" } else { "u 100 1400" }
            ))
        }
    };
    let mut values = Vec::new();
    for w in &words[1..] {
        values.push(
            w.parse::<f64>()
                .map_err(|_| format!("not a number: {w:?} in {s:?}"))?,
        );
    }
    let checked = if idt {
        wirebench_model::IdtModel::from_ditg(letter, &values).map(|_| ())
    } else {
        wirebench_model::SizeModel::from_ditg(letter, &values).map(|_| ())
    };
    checked.map_err(|e| e.to_string())?;
    Ok(words.join(" "))
}

pub(super) fn check_axis(
    ctx: &Ctx,
    axis: Axis,
    field: &Spanned<OneOrMany>,
) -> Result<Vec<String>, CampaignError> {
    let values = field.get_ref().values();
    if values.is_empty() {
        return Err(ctx.at(field, axis.name(), "axis is empty; give at least one value"));
    }
    let mut out: Vec<String> = Vec::new();
    for v in &values {
        let t = check_value(ctx, field.span().start, axis, v)?;
        if out.contains(&t) {
            return Err(ctx.at(field, axis.name(), format!("value {t} is listed twice")));
        }
        out.push(t);
    }
    Ok(out)
}
