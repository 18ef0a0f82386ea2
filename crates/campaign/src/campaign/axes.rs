//! The axis table: every campaign axis declared once (as `METRICS` is for
//! metrics) with its name, its value parser, what it sets (a field of the
//! scenario's send settings, or a link option of the test-bed) and what
//! `--quick` does to it. The enum, the matrix and `[quick]` tables of the
//! file and the scenario settings are all generated from or driven by
//! [`AXES`], so adding an axis is one row plus its parser and mapping.

use super::check::Ctx;
use super::raw::{AxisField, OneOrMany, Scalar};
use super::{CampaignError, Settings};
use serde::Deserialize;
use std::fmt;
use toml::Spanned;
use wirebench_model::app::{DitgCodec, ALL_APPS};
use wirebench_model::{MAX_PAYLOAD, MIN_PAYLOAD};
use wirebench_testbed::LinkOpts;

/// What a value of an axis sets.
#[derive(Debug, Clone, Copy)]
pub enum Sets {
    /// A field of the scenario's settings (the sender's command line).
    Send(fn(&mut Settings, &str)),
    /// A link option of the test-bed; a change rebuilds the test-bed.
    Link(fn(&mut LinkOpts, &str)),
}

/// What `--quick` does to an axis the `[quick]` table leaves alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuickRule {
    /// Its values stay.
    Keep,
    /// Values in seconds above the quick run length are cut to it (values
    /// that become equal merge), so no run is longer than a quick run.
    CapAtRunLength,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct AxisDef {
    /// The axis this row declares.
    pub axis: Axis,
    /// The key in `[matrix]`, in scenario keys and in selectors.
    pub name: &'static str,
    /// Checks one value as written and returns its canonical text (the
    /// text in scenario keys), or the reason it is refused.
    pub(super) parse: fn(&Scalar) -> Result<String, String>,
    /// What a value sets.
    pub sets: Sets,
    /// What `--quick` does to its values.
    pub quick: QuickRule,
}

/// Generates [`Axis`], [`AXES`] and the file's axis fields (`[matrix]` and
/// `[quick]`) from one list. The fields stay spelled out in the structs, not
/// a map or `#[serde(flatten)]`, so toml keeps each value's span and names
/// unknown keys itself.
macro_rules! axis_table {
    ($( $(#[$doc:meta])* $variant:ident $field:ident: $parse:expr, $sets:expr, $quick:expr; )*) => {
        /// One matrix dimension. The declaration order is the order axes
        /// appear in scenario keys, so keys stay stable whatever order the
        /// file uses.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Axis {
            $( $(#[$doc])* $variant, )*
        }

        /// Every axis, in key order (the order of [`Axis`]).
        pub const AXES: &[AxisDef] = &[
            $( AxisDef { axis: Axis::$variant, name: stringify!($field), parse: $parse, sets: $sets, quick: $quick }, )*
        ];

        impl Axis {
            /// Every axis, in key order.
            pub const ALL: [Axis; AXES.len()] = [ $( Axis::$variant, )* ];
        }

        #[derive(Debug, Deserialize, Clone, PartialEq, Default)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RawMatrix {
            $( pub(super) $field: AxisField, )*
        }

        impl RawMatrix {
            /// The axes the block gives, in key order.
            pub(super) fn fields(&self) -> Vec<(Axis, &Spanned<OneOrMany>)> {
                [ $( (Axis::$variant, &self.$field), )* ]
                    .into_iter()
                    .filter_map(|(a, f)| f.as_ref().map(|f| (a, f)))
                    .collect()
            }
        }

        /// The `[quick]` table: a shorter run plan and axis overrides.
        #[derive(Debug, Deserialize, Clone, PartialEq, Default)]
        #[serde(deny_unknown_fields)]
        pub(super) struct Quick {
            pub(super) repetitions: Option<Spanned<i64>>,
            pub(super) duration_s: Option<Spanned<f64>>,
            pub(super) packets: Option<Spanned<i64>>,
            pub(super) kbytes: Option<Spanned<i64>>,
            pub(super) warmup_s: Option<Spanned<f64>>,
            pub(super) pause_s: Option<Spanned<f64>>,
            pub(super) linger_s: Option<Spanned<f64>>,
            $( pub(super) $field: AxisField, )*
        }

        impl Quick {
            pub(super) fn axes(&self) -> RawMatrix {
                RawMatrix { $( $field: self.$field.clone(), )* }
            }
        }
    };
}

use QuickRule::{CapAtRunLength, Keep};
use Sets::{Link, Send};

fn some(v: &str) -> Option<String> {
    Some(v.to_string())
}

axis_table! {
    /// IP version, 4 or 6 (`send -4` / `-6`).
    Ip ip: ip, Send(|s, v| s.ip = v.parse().unwrap_or(4)), Keep;
    /// `udp` or `tcp` (`send -T`).
    Transport transport: transport, Send(|s, v| s.transport = v.into()), Keep;
    /// One-way delay (`owd`) or round trip (`rtt`) (`send -m`).
    Meter meter: meter, Send(|s, v| s.meter = v.into()), Keep;
    /// `constant` or an application model (`send --app`).
    App app: app, Send(|s, v| s.app = v.into()), Keep;
    /// The codec of a VoIP model (`send --codec`).
    Codec codec: codec, Send(|s, v| s.codec = some(v)), Keep;
    /// Transport payload per packet in bytes, probe header included (`send -c`).
    Payload payload: payload, Send(|s, v| s.payload = v.parse().ok()), Keep;
    /// Ethernet frame size in bytes (FCS included), sent as the payload that fills it.
    Frame frame: frame, Send(|s, v| s.frame = v.parse().ok()), Keep;
    /// Packets per second (`send -C`), or `max` for unpaced.
    Pps pps: pps, Send(|s, v| { s.max_rate = v == "max"; s.pps = v.parse().ok() }), Keep;
    /// Parallel flows per run (`send --flows`).
    Flows flows: flows, Send(|s, v| s.flows = v.parse().unwrap_or(1)), Keep;
    /// MTU of the test-bed links (or of nodes with `apply_mtu`).
    Mtu mtu: mtu, Link(|l, v| l.mtu = v.parse().ok()), Keep;
    /// Rate of the test-bed links, or of nodes with `apply_link_rate` (`"1gbit"`).
    LinkRate link_rate: link_rate, Link(|l, v| l.rate_bps = wirebench_testbed::parse_rate(v).ok()), Keep;
    /// Segmentation and receive offloads of the test-bed links, or of nodes
    /// with `apply_offloads`.
    Offloads offloads: offloads, Link(|l, v| l.offloads = v.parse().ok()), Keep;
    /// Packet-rate cap of every router, packets/s.
    ForwardPps forward_pps: forward_pps, Link(|l, v| l.forward_pps = v.parse().ok()), Keep;
    /// One-way delay added on every test-bed link (the link's `delay`).
    Delay delay: delay, Link(|l, v| l.delay_ns = wirebench_testbed::spec::parse_duration_ns(v).ok()), Keep;
    /// Delay variation on every test-bed link (the link's `jitter`, uniform law).
    Jitter jitter: jitter, Link(|l, v| l.jitter_ns = wirebench_testbed::spec::parse_duration_ns(v).ok()), Keep;
    /// Frame loss on every test-bed link: "1%" or "gemodel 1% 25%" (the link's `loss`).
    Loss loss: loss, Link(|l, v| l.loss = wirebench_testbed::parse_loss_spec(v).ok()), Keep;
    /// Drop-tail queue of every test-bed link: "100p", "256KiB", "20ms" (the link's `queue`).
    Queue queue: queue, Link(|l, v| l.queue = wirebench_testbed::parse_queue(v).ok()), Keep;
    /// CoDel or FQ-CoDel on every rated test-bed link (the link's `aqm`);
    /// "none" for the plain drop-tail baseline.
    Aqm aqm: aqm, Link(|l, v| l.aqm = wirebench_testbed::spec::parse_aqm(v).ok()), Keep;
    /// The link emulator's slack on every rated test-bed link (the link's
    /// `slack`): how late a saturated wire may send, against the CPU its
    /// naps leave the hosts.
    Slack slack: slack, Link(|l, v| l.slack_ns = wirebench_testbed::spec::parse_slack(v).ok()), Keep;
    /// Which sender node(s) of `[[hosts.node]]` send in the scenario: one
    /// node name per value (comparing systems: a Windows and a Linux
    /// sender to the same receiver).
    Sender sender: sender, Send(|s, v| s.sender = some(v)), Keep;
    /// `send --dscp` of every flow: "EF vs best effort".
    Dscp dscp: dscp, Send(|s, v| s.dscp = some(v)), Keep;
    /// `send --cc` (TCP congestion control): "cubic vs bbr".
    Cc cc: cc, Send(|s, v| s.cc = some(v)), Keep;
    /// `send --window` (socket buffers).
    Window window: window, Send(|s, v| s.window = some(v)), Keep;
    /// `send --rate` (payload bit/s) instead of `pps`.
    Rate rate: rate, Send(|s, v| s.rate = some(v)), Keep;
    /// An inter-departure law in D-ITG letters, e.g. "E 1000" (`send -E 1000`).
    Idt idt: |v| law(v, true), Send(|s, v| s.idt = some(v)), Keep;
    /// A size law in D-ITG letters, e.g. "u 100 1400" (`send -u 100 1400`).
    Size size: |v| law(v, false), Send(|s, v| s.size = some(v)), Keep;
    /// Which way the flows run: forward, reverse (`send -R`) or bidir
    /// (`send --bidir`).
    Direction direction: direction, Send(|s, v| s.direction = (v != "forward").then(|| v.into())), Keep;
    /// Seconds per run (`send -t`), instead of the campaign's length: a
    /// pilot sweep of run lengths (10 s … 120 s) in one campaign.
    Duration duration: duration, Send(|s, v| s.duration_s = v.parse().ok()), CapAtRunLength;
    /// Which node set of `[hosts.pairings]` runs the scenario (S4's four
    /// OS pairings in one campaign); the others stay idle.
    Pairing pairing: pairing, Send(|s, v| s.pairing = some(v)), Keep;
}

impl Axis {
    /// The axis's row of [`AXES`].
    pub fn def(self) -> &'static AxisDef {
        &AXES[self as usize]
    }

    /// The axis's name in campaign files and scenario keys.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The axis of that name, if any.
    pub fn from_name(s: &str) -> Option<Axis> {
        AXES.iter().find(|d| d.name == s).map(|d| d.axis)
    }

    /// Axes that change the test-bed's links (a change forces a rebuild).
    pub fn is_link(self) -> bool {
        matches!(self.def().sets, Sets::Link(_))
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ------------------------------------------------------- value parsers

fn int(v: &Scalar) -> Option<i64> {
    match v {
        Scalar::Int(i) => Some(*i),
        _ => None,
    }
}

fn ip(v: &Scalar) -> Result<String, String> {
    match int(v) {
        Some(4) | Some(6) => Ok(v.text()),
        _ => Err(format!("IP version must be 4 or 6, got {}", v.text())),
    }
}

fn transport(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if s == "udp" || s == "tcp" => Ok(s.clone()),
        _ => Err(format!(
            "transport must be \"udp\" or \"tcp\", got {}",
            v.text()
        )),
    }
}

fn meter(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if s == "owd" || s == "rtt" => Ok(s.clone()),
        _ => Err(format!(
            "meter must be \"owd\" or \"rtt\", got {}",
            v.text()
        )),
    }
}

/// The constant model (no `--app`) or one of D-ITG's application models as
/// the engine's model crate names them.
fn app(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s)
            if s.eq_ignore_ascii_case("constant")
                || ALL_APPS.contains(&s.to_ascii_lowercase().as_str()) =>
        {
            Ok(s.to_ascii_lowercase())
        }
        _ => Err(format!(
            "unknown application {}; known: constant, {}",
            v.text(),
            ALL_APPS.join(", ")
        )),
    }
}

fn codec(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) => DitgCodec::parse(s).ok(),
        _ => None,
    }
    .map(|c| c.name().to_string())
    .ok_or_else(|| {
        format!(
            "unknown codec {}; known: {}",
            v.text(),
            DitgCodec::ALL.map(DitgCodec::name).join(", ")
        )
    })
}

fn payload(v: &Scalar) -> Result<String, String> {
    match int(v) {
        Some(b) if (MIN_PAYLOAD as i64..=MAX_PAYLOAD as i64).contains(&b) => Ok(b.to_string()),
        _ => Err(format!(
            "payload must be {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes (the probe header alone is {MIN_PAYLOAD}), got {}",
            v.text()
        )),
    }
}

fn frame(v: &Scalar) -> Result<String, String> {
    match int(v) {
        Some(b) if (64..=65553).contains(&b) => Ok(b.to_string()),
        _ => Err(format!(
            "Ethernet frame size must be 64..=65553 bytes, got {}",
            v.text()
        )),
    }
}

fn pps(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if s == "max" => Ok("max".into()),
        Scalar::Int(i) if *i > 0 => Ok(i.to_string()),
        Scalar::Float(f) if f.is_finite() && *f > 0.0 => Ok(f.to_string()),
        _ => Err(format!(
            "rate must be a positive number of packets per second or \"max\", got {}",
            v.text()
        )),
    }
}

fn flows(v: &Scalar) -> Result<String, String> {
    match int(v) {
        Some(n) if (1..=1024).contains(&n) => Ok(n.to_string()),
        _ => Err(format!("flows must be 1..=1024, got {}", v.text())),
    }
}

fn mtu(v: &Scalar) -> Result<String, String> {
    match int(v) {
        Some(m) if (68..=65535).contains(&m) => Ok(m.to_string()),
        _ => Err(format!("MTU must be 68..=65535, got {}", v.text())),
    }
}

fn link_rate(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if parse_link_rate(s).is_some() => Ok(s.to_ascii_lowercase()),
        _ => Err(format!(
            "link rate must look like \"100mbit\" or \"1gbit\", got {}",
            v.text()
        )),
    }
}

fn forward_pps(v: &Scalar) -> Result<String, String> {
    match int(v) {
        Some(p) if (1..=100_000_000).contains(&p) => Ok(p.to_string()),
        _ => Err(format!(
            "router packet-rate cap must be 1..=100000000 packets/s, got {}",
            v.text()
        )),
    }
}

fn offloads(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Bool(b) => Ok(b.to_string()),
        Scalar::Str(s) if s == "on" || s == "off" => Ok((s == "on").to_string()),
        _ => Err(format!(
            "offloads must be true/false (or \"on\"/\"off\"), got {}",
            v.text()
        )),
    }
}

/// A duration value of axis `name` (its canonical text lower-case).
fn time_value(name: &str, example: &str, v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) => {
            wirebench_testbed::spec::parse_duration_ns(s).map(|_| s.trim().to_ascii_lowercase())
        }
        _ => Err(format!(
            "{name} must be a duration such as {example}, got {}",
            v.text()
        )),
    }
}

fn delay(v: &Scalar) -> Result<String, String> {
    time_value("delay", "\"20ms\" or \"250us\"", v)
}

fn jitter(v: &Scalar) -> Result<String, String> {
    time_value("jitter", "\"2ms\"", v)
}

/// One spelling per value: words joined by single spaces.
fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn loss(v: &Scalar) -> Result<String, String> {
    let Scalar::Str(s) = v else {
        return Err(format!(
            "loss must be a string such as \"1%\" or \"gemodel 1% 25%\", got {}",
            v.text()
        ));
    };
    let (p, ge) = wirebench_testbed::parse_loss_spec(s)?;
    let imp = wirebench_testbed::Impairment {
        loss: p,
        gemodel: ge,
        ..Default::default()
    };
    imp.check().map_err(|(_, m)| m)?;
    Ok(words(s))
}

fn queue(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) => wirebench_testbed::parse_queue(s).map(|_| s.trim().to_string()),
        _ => Err(format!(
            "queue must be a string such as \"100p\", \"256KiB\" or \"20ms\", got {}",
            v.text()
        )),
    }
}

/// `"none"` is the drop-tail baseline: no AQM (the link's own, if any,
/// stays; the key still tells the scenarios apart).
fn aqm(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if s.trim() == "none" => Ok("none".into()),
        Scalar::Str(s) => wirebench_testbed::spec::parse_aqm(s).map(|_| words(s)),
        _ => Err(format!(
            "aqm must be \"codel\", \"fq_codel\" (with optional parameters) or \"none\", got {}",
            v.text()
        )),
    }
}

fn slack(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) => {
            wirebench_testbed::spec::parse_slack(s).map(|_| s.trim().to_ascii_lowercase())
        }
        _ => Err(format!(
            "slack must be a duration from \"1us\" to \"1ms\" such as \"10us\", got {}",
            v.text()
        )),
    }
}

/// Checked against the nodes once the matrix is known.
fn sender(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if !s.is_empty() => Ok(s.clone()),
        _ => Err(format!(
            "sender must be a sender node's name, got {}",
            v.text()
        )),
    }
}

/// Checked against `[hosts.pairings]` once the matrix is known.
fn pairing(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if is_name(s) => Ok(s.clone()),
        _ => Err(format!(
            "pairing must be the name of a [hosts.pairings] entry (letters, digits, - and _), got {}",
            v.text()
        )),
    }
}

/// Node and pairing names: safe in scenario keys and selectors.
pub(super) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn dscp(v: &Scalar) -> Result<String, String> {
    wirebench_stats::opts::parse_dscp(&v.text()).map(|_| v.text().to_ascii_lowercase())
}

fn cc(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) => wirebench_stats::opts::parse_cc(s),
        _ => Err(format!(
            "cc must be a name such as \"cubic\" or \"bbr\", got {}",
            v.text()
        )),
    }
}

fn window(v: &Scalar) -> Result<String, String> {
    wirebench_stats::opts::parse_window(&v.text()).map(|_| v.text())
}

fn rate(v: &Scalar) -> Result<String, String> {
    wirebench_stats::opts::parse_bits(&v.text()).map(|_| v.text())
}

fn direction(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Str(s) if ["forward", "reverse", "bidir"].contains(&s.as_str()) => Ok(s.clone()),
        _ => Err(format!(
            "direction must be \"forward\", \"reverse\" (send -R) or \"bidir\" (send --bidir), got {}",
            v.text()
        )),
    }
}

fn duration(v: &Scalar) -> Result<String, String> {
    match v {
        Scalar::Int(i) if (1..=86_400).contains(i) => Ok(i.to_string()),
        Scalar::Float(f) if f.is_finite() && *f > 0.0 && *f <= 86_400.0 => Ok(f.to_string()),
        _ => Err(format!(
            "duration must be more than 0 and at most 86400 seconds per run, got {}",
            v.text()
        )),
    }
}

fn law(v: &Scalar, idt: bool) -> Result<String, String> {
    match v {
        Scalar::Str(s) => law_text(s, idt),
        _ => Err(format!(
            "{} must be a law in D-ITG letters such as \"E 1000\", got {}",
            if idt { "idt" } else { "size" },
            v.text()
        )),
    }
}

/// Parses a link rate (`100mbit`, `1gbit`, …) into bit/s with the
/// test-bed's own parser, so a campaign accepts exactly what `testbed up`
/// accepts.
pub fn parse_link_rate(s: &str) -> Option<f64> {
    wirebench_testbed::parse_rate(s).ok().map(|b| b as f64)
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

/// Checks an axis's values (at least one, each valid, none twice) and
/// returns their canonical texts in the file's order.
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
        let t = (axis.def().parse)(v).map_err(|reason| ctx.at(field, axis.name(), reason))?;
        if out.contains(&t) {
            return Err(ctx.at(field, axis.name(), format!("value {t} is listed twice")));
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::campaign::Campaign;

    #[test]
    fn delay_axis_sets_every_links_delay_and_is_checked() {
        let text = |target: &str, delay: &str| {
            format!("packets = 10\n{target}\n[matrix]\nip = [4]\ndelay = {delay}\n")
        };
        let c = Campaign::parse(
            &text("[testbed]\npreset = \"router\"", "[\"10ms\", \"250US\"]"),
            "t.toml",
        )
        .unwrap();
        let s = c.expand();
        assert_eq!(s[0].key, "ip=4,delay=10ms");
        assert_eq!(s[1].key, "ip=4,delay=250us");
        assert_eq!(s[0].link_key().delay_ns, Some(10_000_000));
        assert_eq!(s[1].link_key().delay_ns, Some(250_000));
        assert!(crate::campaign::Axis::Delay.is_link());
        // The test-bed is built with it on every link.
        let spec = wirebench_testbed::preset("router", &s[0].link_key()).unwrap();
        assert!(spec
            .links
            .iter()
            .all(|l| l.impairment.is_some_and(|i| i.delay_ns == 10_000_000)));
        let err = |t: String| Campaign::parse(&t, "t.toml").unwrap_err().to_string();
        let e = err(text("[testbed]\npreset = \"router\"", "[\"10 parsecs\"]"));
        assert!(e.starts_with("t.toml:6: `delay`:"), "{e}");
        let e = err(text("[testbed]\npreset = \"router\"", "[20]"));
        assert!(
            e.starts_with("t.toml:6: `delay`:") && e.contains("20ms"),
            "{e}"
        );
        let e = err(text("[loopback]", "[\"20ms\"]"));
        assert!(
            e.starts_with("t.toml:5: `delay`:") && e.contains("[testbed]"),
            "{e}"
        );
    }

    /// `jitter`, `loss`, `queue` and `aqm` reach every link of the bed a
    /// scenario is built on; values are checked (naming the axis and the
    /// line) and combinations a preset's links cannot take are refused
    /// before any run.
    #[test]
    fn impairment_queue_and_aqm_axes_set_every_link() {
        use wirebench_testbed::spec::{AqmKind, QueueLimit};
        let text = |target: &str, axes: &str| format!("packets = 10\n{target}\n[matrix]\n{axes}\n");
        let rated = "[testbed]\npreset = \"router\"\nlink_rate = \"100mbit\"";
        let c = Campaign::parse(
            &text(
                rated,
                "delay = [\"10ms\"]\njitter = [\"1MS\"]\nloss = [\"gemodel  1% 25%\", \"0.5%\"]\nqueue = [\"100p\"]\naqm = [\"none\", \"fq_codel target 2ms\"]",
            ),
            "t.toml",
        )
        .unwrap();
        let s = c.expand();
        assert_eq!(s.len(), 4);
        assert_eq!(
            s[0].key,
            "delay=10ms,jitter=1ms,loss=gemodel 1% 25%,queue=100p,aqm=none"
        );
        let k = s[1].link_key();
        assert_eq!(
            (k.delay_ns, k.jitter_ns),
            (Some(10_000_000), Some(1_000_000))
        );
        assert_eq!(k.queue, Some(QueueLimit::Packets(100)));
        assert!(k
            .aqm
            .is_some_and(|a| a.kind == AqmKind::FqCodel && a.target_ns == 2_000_000));
        // "none" is the plain drop-tail baseline, another bed than fq_codel.
        assert!(s[0].link_key().aqm.is_none());
        assert_ne!(s[0].link_key(), s[1].link_key());
        for (sc, ge) in [(&s[0], true), (&s[2], false)] {
            let spec = wirebench_testbed::preset("router", &sc.link_key()).unwrap();
            for l in &spec.links {
                let i = l.impairment.expect("impaired link");
                assert_eq!((i.delay_ns, i.jitter_ns), (10_000_000, 1_000_000));
                assert_eq!(i.gemodel.is_some(), ge, "{i:?}");
                if !ge {
                    assert!((i.loss - 0.005).abs() < 1e-12, "{i:?}");
                }
                assert_eq!(l.queue, Some(QueueLimit::Packets(100)));
            }
        }
        let spec = wirebench_testbed::preset("router", &s[1].link_key()).unwrap();
        assert!(spec.links.iter().all(|l| l.aqm.is_some()));
        for a in ["jitter", "loss", "queue", "aqm"] {
            assert!(crate::campaign::Axis::from_name(a).is_some_and(|x| x.is_link()));
        }

        let err = |t: String| Campaign::parse(&t, "t.toml").unwrap_err().to_string();
        let e = err(text(rated, "loss = [\"150%\"]"));
        assert!(e.starts_with("t.toml:6: `loss`:"), "{e}");
        let e = err(text(rated, "queue = [\"lots\"]"));
        assert!(
            e.starts_with("t.toml:6: `queue`:") && e.contains("1000p"),
            "{e}"
        );
        let e = err(text(rated, "aqm = [\"red\"]"));
        assert!(
            e.starts_with("t.toml:6: `aqm`:") && e.contains("fq_codel"),
            "{e}"
        );
        let e = err(text(rated, "jitter = [\"1ms\"]"));
        assert!(
            e.starts_with("t.toml:6: `jitter`:") && e.contains("delay"),
            "{e}"
        );
        let e = err(text(
            rated,
            "delay = [\"0ms\", \"5ms\"]\njitter = [\"1ms\"]",
        ));
        assert!(e.contains("`jitter`:") && e.contains("non-zero"), "{e}");
        let unrated = "[testbed]\npreset = \"router\"";
        let e = err(text(unrated, "aqm = [\"codel\"]"));
        assert!(
            e.starts_with("t.toml:5: `aqm`:") && e.contains("link_rate"),
            "{e}"
        );
        // A link_rate axis gives the rate.
        Campaign::parse(
            &text(unrated, "link_rate = [\"10mbit\"]\naqm = [\"codel\"]"),
            "t.toml",
        )
        .unwrap();
        let e = err(text("[loopback]", "aqm = [\"codel\"]"));
        assert!(e.contains("`aqm`:") && e.contains("[testbed]"), "{e}");
    }

    /// `slack` reaches every rated link of the bed (a change rebuilds it),
    /// in the range a topology file takes; values out of range, of the
    /// wrong type or on links without a rate are refused naming the line.
    #[test]
    fn slack_axis_sets_every_rated_link() {
        let text = |target: &str, axes: &str| format!("packets = 10\n{target}\n[matrix]\n{axes}\n");
        let rated = "[testbed]\npreset = \"router\"\nlink_rate = \"100mbit\"";
        let c = Campaign::parse(&text(rated, "slack = [\"10US\", \"50us\"]"), "t.toml").unwrap();
        let s = c.expand();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].key, "slack=10us");
        assert_eq!(s[0].link_key().slack_ns, Some(10_000));
        assert_ne!(s[0].link_key(), s[1].link_key());
        assert!(crate::campaign::Axis::from_name("slack").is_some_and(|x| x.is_link()));
        let spec = wirebench_testbed::preset("router", &s[1].link_key()).unwrap();
        assert!(spec.links.iter().all(|l| l.slack_ns == Some(50_000)));
        // Without a rate the preset's links take none.
        let unrated = wirebench_testbed::preset("router", &{
            let mut o = s[0].link_key();
            o.rate_bps = None;
            o
        })
        .unwrap();
        assert!(unrated.links.iter().all(|l| l.slack_ns.is_none()));

        let err = |t: String| Campaign::parse(&t, "t.toml").unwrap_err().to_string();
        for bad in ["[\"500ns\"]", "[\"2ms\"]", "[10]"] {
            let e = err(text(rated, &format!("slack = {bad}")));
            assert!(
                e.starts_with("t.toml:6: `slack`:") && e.contains("1us"),
                "{bad}: {e}"
            );
        }
        let e = err(text("[testbed]\npreset = \"router\"", "slack = [\"10us\"]"));
        assert!(
            e.starts_with("t.toml:5: `slack`:") && e.contains("link_rate"),
            "{e}"
        );
        Campaign::parse(
            &text(
                "[testbed]\npreset = \"router\"",
                "link_rate = [\"1gbit\"]\nslack = [\"10us\"]",
            ),
            "t.toml",
        )
        .unwrap();
        let e = err(text("[loopback]", "slack = [\"10us\"]"));
        assert!(e.contains("`slack`:") && e.contains("[testbed]"), "{e}");
    }
}
