//! Traffic models: when the next packet leaves and how big it is.
//!
//! A [`FlowSpec`] describes one flow's model (inter-departure time and size
//! distributions, or an application model); [`FlowSpec::generator`] turns it
//! into a [`Generator`] with its own seeded random stream that the engine
//! asks, packet by packet, for the gap before the next departure and its
//! size. This crate knows nothing of sockets: every model can be checked by
//! running its schedule without a network.
//!
//! - [`dist`]: the distributions (D-ITG's letters and the laws the
//!   application models need), in the unit of their use.
//! - [`app`]: D-ITG 2.8.1's application presets with its exact parameters,
//!   and wirebench's realistic VoIP, Opus, video and file transfer.
//! - [`voip`]: the ITU-T G.107 E-model and a jitter-buffer model.
//! - [`script`]: D-ITG script files and the native TOML flow list.
//!
//! docs/models.md documents every model, its sources and where wirebench
//! deliberately differs from D-ITG.

#![warn(missing_docs)]

use thiserror::Error;

pub mod app;
pub mod dist;
mod gen;
pub mod payload;
pub mod script;
pub mod voip;

pub use app::{App, DitgCodec, RealCodec};
pub use dist::Dist;
pub use payload::Payload;

/// The smallest payload a flow may carry: the probe header.
pub const MIN_PAYLOAD: u32 = 24;
/// D-ITG's largest payload; sizes are clamped to [MIN_PAYLOAD, MAX_PAYLOAD].
pub const MAX_PAYLOAD: u32 = 64000;
/// Largest constant payload (`-c`): a TCP record may be this long. Other
/// transports stay within [`MAX_PAYLOAD`]; the engine's plan check says so
/// for a flow whose transport it knows.
pub const MAX_RECORD: u32 = wirebench_wire::MAX_TCP_RECORD;
/// A single gap is never longer than this (heavy tails such as Cauchy or
/// Pareto with shape ≤ 1 can draw astronomically long gaps).
pub const MAX_GAP_NS: u64 = 3_600_000_000_000;

/// Why a model's parameters were refused.
#[derive(Debug, Error, PartialEq)]
pub enum ModelError {
    /// `flag` names the option (e.g. `-C`, `--codec`) so the CLI can say which one is wrong.
    #[error("{flag}: {reason}")]
    BadParam {
        /// The option at fault.
        flag: String,
        /// What is wrong, in words.
        reason: String,
    },
}

pub(crate) fn bad(flag: &str, reason: impl Into<String>) -> ModelError {
    ModelError::BadParam {
        flag: flag.to_string(),
        reason: reason.into(),
    }
}

/// Puts `what` in front of an error's reason, keeping its flag: for a flag
/// with parts (`-B`'s ON and OFF halves) the flag must stay the token the
/// user typed, so a script error can point at it.
fn prefix_reason(e: ModelError, what: &str) -> ModelError {
    let ModelError::BadParam { flag, reason } = e;
    ModelError::BadParam {
        flag,
        reason: format!("{what}: {reason}"),
    }
}

/// One departure: send `size` bytes of transport payload (probe header
/// included) at this departure's scheduled time; the next departure is
/// scheduled `gap_ns` later. Absolute schedule: t(k+1) = t(k) + gap(k), the
/// engine adds the gap to the previous *scheduled* time, never the actual
/// one; the first departure is at the flow's start. The gap belongs to the
/// packet it follows, so a video frame's packets carry gap 0 except its last
/// one, and the last packet of an ON period carries the OFF period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// Gap to the next departure, ns.
    pub gap_ns: u64,
    /// Transport payload bytes, probe header included.
    pub size: u32,
}

/// A running model. One per flow; `Send` so each flow can run on its own thread.
pub trait Generator: Send {
    /// The next departure.
    fn next(&mut self) -> Departure;
    /// How many draws were negative and clamped to zero so far.
    fn clamps(&self) -> u64 {
        0
    }
}

/// Inter-departure-time model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum IdtModel {
    /// As fast as the path allows: no pacing.
    Max,
    /// Constant rate in packets per second (D-ITG `-C`).
    Constant {
        /// Packets per second.
        pps: f64,
    },
    /// Gaps drawn in **milliseconds** from a distribution. D-ITG's
    /// rate-based flags are converted by [`IdtModel::from_ditg`].
    Random(Dist),
}

/// Payload-size model (transport payload, probe header included).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SizeModel {
    /// Constant size in bytes (D-ITG `-c`).
    Constant {
        /// Bytes per packet.
        bytes: u32,
    },
    /// Sizes drawn in bytes, truncated to integers and clamped to
    /// [`MIN_PAYLOAD`, `MAX_PAYLOAD`] (unless the flow packetizes frames).
    Random(Dist),
}

/// Number of numeric parameters of a D-ITG distribution letter.
pub fn ditg_arity(letter: char) -> Option<usize> {
    match letter.to_ascii_uppercase() {
        'C' | 'E' | 'O' => Some(1),
        'U' | 'N' | 'V' | 'Y' | 'G' | 'W' => Some(2),
        _ => None,
    }
}

fn arity_check(flag: &str, letter: char, params: &[f64]) -> Result<(), ModelError> {
    let n =
        ditg_arity(letter).ok_or_else(|| bad(flag, format!("unknown distribution {letter:?}")))?;
    if params.len() != n {
        return Err(bad(
            flag,
            format!("takes {n} value(s), got {}", params.len()),
        ));
    }
    Ok(())
}

/// D-ITG's value-unit reading of a letter (sizes, ON/OFF durations, and the
/// non-rate IDT letters): parameters are in the value's own unit.
fn value_dist(flag: &str, letter: char, p: &[f64]) -> Result<Dist, ModelError> {
    arity_check(flag, letter, p)?;
    let d = match letter.to_ascii_uppercase() {
        'C' => Dist::Constant { value: p[0] },
        'U' => Dist::Uniform {
            min: p[0],
            max: p[1],
        },
        'E' => Dist::Exponential { mean: p[0] },
        'N' => Dist::Normal {
            mean: p[0],
            sd: p[1],
        },
        'O' => Dist::Poisson { lambda: p[0] },
        'V' => Dist::Pareto {
            shape: p[0],
            min: p[1],
        },
        'Y' => Dist::Cauchy {
            location: p[0],
            scale: p[1],
        },
        'G' => Dist::Gamma {
            shape: p[0],
            scale: p[1],
        },
        'W' => Dist::Weibull {
            scale: p[0],
            shape: p[1],
        },
        _ => return Err(bad(flag, format!("unknown distribution {letter:?}"))),
    };
    d.validate(flag)?;
    Ok(d)
}

impl IdtModel {
    /// D-ITG's IDT flag `-<letter>` with its parameters, D-ITG meaning:
    /// `-C r` constant r pps; `-U rmin rmax` IDT uniform in
    /// [1000/rmax, 1000/rmin] ms; `-E r` exponential with mean 1000/r ms;
    /// `-O λ` IDT = 1000/Poisson(λ) ms; `-N μ σ`, `-V α xm`, `-Y a b`,
    /// `-G k θ`, `-W scale shape` in ms.
    pub fn from_ditg(letter: char, p: &[f64]) -> Result<IdtModel, ModelError> {
        let letter = letter.to_ascii_uppercase();
        let flag = format!("-{letter}");
        arity_check(&flag, letter, p)?;
        let rate = |v: f64, what: &str| -> Result<f64, ModelError> {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(bad(
                    &flag,
                    format!("{what} must be a positive number of packets per second, got {v}"),
                ))
            }
        };
        Ok(match letter {
            'C' => IdtModel::Constant {
                pps: rate(p[0], "rate")?,
            },
            'U' => {
                let (lo, hi) = (rate(p[0], "minimum rate")?, rate(p[1], "maximum rate")?);
                if lo > hi {
                    return Err(bad(
                        &flag,
                        format!("minimum rate {lo} is above maximum rate {hi}"),
                    ));
                }
                IdtModel::Random(Dist::Uniform {
                    min: 1000.0 / hi,
                    max: 1000.0 / lo,
                })
            }
            'E' => IdtModel::Random(Dist::Exponential {
                mean: 1000.0 / rate(p[0], "rate")?,
            }),
            'O' => {
                let d = Dist::ReciprocalPoisson {
                    numerator: 1000.0,
                    lambda: p[0],
                };
                d.validate(&flag)?;
                IdtModel::Random(d)
            }
            _ => IdtModel::Random(value_dist(&flag, letter, p)?),
        })
    }

    fn validate(&self) -> Result<(), ModelError> {
        match self {
            IdtModel::Max => Ok(()),
            IdtModel::Constant { pps } => {
                if pps.is_finite() && *pps > 0.0 {
                    Ok(())
                } else {
                    Err(bad(
                        "-C",
                        format!("rate must be a positive number of packets per second, got {pps}"),
                    ))
                }
            }
            IdtModel::Random(d) => d.validate("IDT"),
        }
    }

    /// Mean gap in ms, where it is defined (see [`Dist::typical`]).
    pub fn typical_ms(&self) -> Option<f64> {
        match self {
            IdtModel::Max => None,
            IdtModel::Constant { pps } => Some(1000.0 / pps),
            IdtModel::Random(d) => d.typical(),
        }
    }

    fn describe(&self) -> String {
        match self {
            IdtModel::Max => "max rate".into(),
            IdtModel::Constant { pps } => format!("constant {pps} pps"),
            IdtModel::Random(d) => format!("IDT {}", d.describe("ms")),
        }
    }
}

impl SizeModel {
    /// D-ITG's size flag `-<letter>` (lowercase): `-c s`, `-u min max`,
    /// `-e mean`, `-n μ σ`, `-o λ` (Poisson), `-v α xm`, `-y a b`,
    /// `-g k θ`, `-w scale shape`, all in bytes.
    pub fn from_ditg(letter: char, p: &[f64]) -> Result<SizeModel, ModelError> {
        let letter = letter.to_ascii_lowercase();
        let flag = format!("-{letter}");
        if letter == 'c' {
            arity_check(&flag, letter, p)?;
            let v = p[0];
            if !(v.is_finite()
                && v.fract() == 0.0
                && v >= MIN_PAYLOAD as f64
                && v <= MAX_RECORD as f64)
            {
                return Err(bad(&flag, format!(
                    "payload must be a whole number of bytes in {MIN_PAYLOAD}..={MAX_PAYLOAD}, or up to {MAX_RECORD} for TCP records (the probe header alone is {MIN_PAYLOAD}), got {v}"
                )));
            }
            return Ok(SizeModel::Constant { bytes: v as u32 });
        }
        if letter == 'u' {
            // A uniform range names its bounds: one below the probe header
            // was silently raised (`-u 10 20` sent 24-byte packets only).
            arity_check(&flag, letter, p)?;
            if p[0] < MIN_PAYLOAD as f64 || p[1] > MAX_PAYLOAD as f64 {
                return Err(bad(&flag, format!(
                    "payload range must lie in {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes (the probe header alone is {MIN_PAYLOAD}), got {} {}",
                    p[0], p[1]
                )));
            }
        }
        Ok(SizeModel::Random(value_dist(&flag, letter, p)?))
    }

    fn validate(&self) -> Result<(), ModelError> {
        match self {
            SizeModel::Constant { bytes } => {
                if (MIN_PAYLOAD..=MAX_RECORD).contains(bytes) {
                    Ok(())
                } else {
                    Err(bad("-c", format!(
                        "payload must be {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes, or up to {MAX_RECORD} for TCP records (the probe header alone is {MIN_PAYLOAD}), got {bytes}"
                    )))
                }
            }
            SizeModel::Random(d) => d.validate("size"),
        }
    }

    fn describe(&self) -> String {
        match self {
            SizeModel::Constant { bytes } => format!("constant {bytes} B"),
            SizeModel::Random(d) => format!("size {}", d.describe("B")),
        }
    }
}

/// D-ITG `-B`: ON/OFF bursts. During an ON period packets follow the IDT
/// model; then nothing is sent for an OFF period. Durations in ms.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Burst {
    /// ON period durations, ms.
    pub on_ms: Dist,
    /// OFF period durations, ms.
    pub off_ms: Dist,
}

impl Burst {
    /// Parses D-ITG's `-B` arguments: `L1 p.. L2 p..`, e.g. `E 100 C 900`
    /// (letters C U E V Y N O G W, values in ms as for sizes).
    pub fn from_ditg(tokens: &[&str]) -> Result<Burst, ModelError> {
        let flag = "-B";
        let mut it = 0usize;
        let mut take = |what: &str| -> Result<Dist, ModelError> {
            let letter_tok = tokens.get(it).ok_or_else(|| {
                bad(
                    flag,
                    format!("missing the {what} distribution (expected e.g. `-B C 1000 E 500`)"),
                )
            })?;
            let mut chars = letter_tok.chars();
            let letter = match (chars.next(), chars.next()) {
                (Some(c), None) if ditg_arity(c).is_some() => c.to_ascii_uppercase(),
                _ => {
                    return Err(bad(flag, format!(
                        "{what}: expected a distribution letter C U E V Y N O G W, got {letter_tok:?}"
                    )))
                }
            };
            let n = ditg_arity(letter).unwrap_or(1);
            let mut p = Vec::with_capacity(n);
            for k in 0..n {
                let t = tokens
                    .get(it + 1 + k)
                    .ok_or_else(|| bad(flag, format!("{what}: {letter} takes {n} value(s)")))?;
                p.push(t.parse::<f64>().map_err(|_| {
                    bad(
                        flag,
                        format!("{what}: {letter} parameter is not a number: {t:?}"),
                    )
                })?);
            }
            it += 1 + n;
            // The option stays `-B` (the token on the line); which half and
            // letter went wrong goes in the reason.
            value_dist(flag, letter, &p).map_err(|e| prefix_reason(e, &format!("{what} {letter}")))
        };
        let on_ms = take("ON")?;
        let off_ms = take("OFF")?;
        if it != tokens.len() {
            return Err(bad(
                flag,
                format!("unexpected extra value {:?}", tokens[it]),
            ));
        }
        Ok(Burst { on_ms, off_ms })
    }

    /// ON periods follow P.59's conversational speech: exponential talkspurts
    /// of mean 1004 ms and pauses of mean 1587 ms.
    pub fn p59_talkspurts() -> Burst {
        Burst {
            on_ms: Dist::Exponential { mean: 1004.0 },
            off_ms: Dist::Exponential { mean: 1587.0 },
        }
    }

    fn validate(&self) -> Result<(), ModelError> {
        self.on_ms
            .validate("-B")
            .map_err(|e| prefix_reason(e, "ON"))?;
        self.off_ms
            .validate("-B")
            .map_err(|e| prefix_reason(e, "OFF"))
    }
}

/// One flow's traffic model: when packets leave and how big they are.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlowSpec {
    /// Inter-departure times.
    pub idt: IdtModel,
    /// Payload sizes.
    pub size: SizeModel,
    /// Start this long after the session's start (D-ITG `-d`).
    pub start_delay_ms: u64,
    /// ON/OFF bursts (D-ITG `-B`; also the talkspurt process of realistic VoIP).
    pub burst: Option<Burst>,
    /// Split every drawn size into packets of at most this many bytes, sent
    /// back to back (gap 0) — video frames into MTU-sized packets.
    pub packetize: Option<u32>,
    /// Send exactly this many payload bytes, then stop (file transfer). The
    /// generator's sizes add up to it exactly; the engine stops the flow once
    /// this many bytes are sent and reports the completion time.
    pub transfer_bytes: Option<u64>,
    /// The application model this spec came from, if any (labels, transport,
    /// VoIP codec); `idt`/`size`/`burst`/`packetize` already carry its law.
    pub app: Option<App>,
    /// What the bytes after the probe header are (`--payload`). Not sent
    /// to a receiver: a flow the receiver sends (-R) carries the default.
    #[serde(skip)]
    pub payload: Payload,
}

impl FlowSpec {
    /// A plain spec with the given IDT and size models.
    pub fn new(idt: IdtModel, size: SizeModel) -> Result<Self, ModelError> {
        let s = FlowSpec {
            idt,
            size,
            start_delay_ms: 0,
            burst: None,
            packetize: None,
            transfer_bytes: None,
            app: None,
            payload: Payload::Pattern,
        };
        s.validate()?;
        Ok(s)
    }

    /// Constant rate (`pps`) and constant size (`bytes`).
    pub fn constant(pps: f64, bytes: u32) -> Result<Self, ModelError> {
        Self::new(IdtModel::Constant { pps }, SizeModel::Constant { bytes })
    }

    /// As fast as the path allows, constant size.
    pub fn max_rate(bytes: u32) -> Result<Self, ModelError> {
        Self::new(IdtModel::Max, SizeModel::Constant { bytes })
    }

    /// Checks every parameter; errors name the D-ITG option at fault.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.idt.validate()?;
        self.size.validate()?;
        if let Some(b) = &self.burst {
            if self.is_max() {
                return Err(bad("-B", "ON/OFF bursts need a paced IDT model, not --max"));
            }
            b.validate()?;
        }
        if let Some(p) = self.packetize {
            if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&p) {
                return Err(bad(
                    "--packet-max",
                    format!("packet size must be {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes, got {p}"),
                ));
            }
        }
        if let Some(t) = self.transfer_bytes {
            if t < MIN_PAYLOAD as u64 {
                return Err(bad(
                    "--bytes",
                    format!("transfer size must be at least {MIN_PAYLOAD} bytes, got {t}"),
                ));
            }
        }
        Ok(())
    }

    /// True when the flow is not paced at all (`--max`).
    pub fn is_max(&self) -> bool {
        matches!(self.idt, IdtModel::Max)
    }

    /// Mean packets per second the model asks for, if it has one: 1000 / mean
    /// IDT (ms), scaled by the ON share of ON/OFF bursts and by the packets
    /// per frame when frames are packetized. For Cauchy and Student-t IDTs
    /// without a mean (dof ≤ 1) the location is used; a Pareto IDT with
    /// shape ≤ 1 has no rate (None), as has `--max`.
    pub fn nominal_rate_pps(&self) -> Option<f64> {
        let ms = self.idt.typical_ms()?;
        if ms <= 0.0 {
            return None;
        }
        let mut pps = 1000.0 / ms;
        if let Some(b) = &self.burst {
            let (on, off) = (b.on_ms.typical()?, b.off_ms.typical()?);
            if on + off <= 0.0 {
                return None;
            }
            pps *= on / (on + off);
        }
        if let Some(p) = self.packetize {
            pps *= self.packets_per_frame(p);
        }
        Some(pps)
    }

    /// Mean payload bytes the model asks for (per packet).
    pub fn nominal_payload_bytes(&self) -> f64 {
        let lo = MIN_PAYLOAD as f64;
        let hi = MAX_PAYLOAD as f64;
        match &self.size {
            SizeModel::Constant { bytes } => *bytes as f64,
            SizeModel::Random(d) => {
                if let Some(p) = self.packetize {
                    let frame = d.typical().unwrap_or(p as f64);
                    return frame / self.packets_per_frame(p);
                }
                match d {
                    // Truncation to whole bytes lowers a continuous uniform by ½.
                    Dist::Uniform { min, max } => (((min + max) / 2.0 - 0.5).max(lo)).min(hi),
                    // Whole-byte laws: the mean of the clamped values.
                    Dist::Discrete { values, weights } => {
                        let w: f64 = weights.iter().sum();
                        values
                            .iter()
                            .zip(weights)
                            .map(|(v, p)| v.trunc().clamp(lo, hi) * p)
                            .sum::<f64>()
                            / w
                    }
                    Dist::File { values, .. } | Dist::Sequence { values, .. } => {
                        values.iter().map(|v| v.trunc().clamp(lo, hi)).sum::<f64>()
                            / values.len() as f64
                    }
                    Dist::Poisson { .. } => d.typical().unwrap_or(lo).clamp(lo, hi),
                    _ => d.typical().map(|m| (m - 0.5).clamp(lo, hi)).unwrap_or(hi),
                }
            }
        }
    }

    /// E[packets per frame], estimated from 20 000 draws of a fixed seed
    /// (closed forms do not exist for every law).
    fn packets_per_frame(&self, p: u32) -> f64 {
        let SizeModel::Random(d) = &self.size else {
            let SizeModel::Constant { bytes } = self.size else {
                return 1.0;
            };
            return (bytes as f64 / p as f64).ceil().max(1.0);
        };
        let mut s = d.sampler();
        let mut rng = gen::rng(0x5eed, 9);
        let n = 20_000;
        let mut pk = 0u64;
        for _ in 0..n {
            let f = s.sample(&mut rng).max(MIN_PAYLOAD as f64) as u64;
            pk += f.div_ceil(p as u64).max(1);
        }
        pk as f64 / n as f64
    }

    /// Largest payload this flow can produce (buffer sizing).
    pub fn max_payload(&self) -> u32 {
        let cap = |v: f64| (v.max(MIN_PAYLOAD as f64).min(MAX_PAYLOAD as f64)) as u32;
        let m = match &self.size {
            SizeModel::Constant { bytes } => *bytes,
            SizeModel::Random(d) => d.upper_bound().map(cap).unwrap_or(MAX_PAYLOAD),
        };
        match self.packetize {
            Some(p) => m.min(p),
            None => m,
        }
    }

    /// The transport the application model implies (Telnet and file
    /// transfer: TCP; other application models: UDP); None for plain
    /// distributions, where the user's `-T` decides.
    pub fn app_transport(&self) -> Option<wirebench_wire::Transport> {
        self.app.as_ref().map(|a| a.transport())
    }

    /// The VoIP codec for the E-model, for VoIP application models.
    pub fn voip_codec(&self) -> Option<voip::Codec> {
        self.app.as_ref().and_then(|a| a.voip_codec())
    }

    /// Short human description, stored as `requested.model`.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(a) = &self.app {
            s.push_str(&a.describe());
            s.push_str(": ");
        }
        s.push_str(&self.idt.describe());
        s.push_str(", ");
        s.push_str(&self.size.describe());
        if let Some(b) = &self.burst {
            s.push_str(&format!(
                ", ON {} / OFF {}",
                b.on_ms.describe("ms"),
                b.off_ms.describe("ms")
            ));
        }
        if let Some(p) = self.packetize {
            s.push_str(&format!(", split into packets of <= {p} B"));
        }
        if let Some(t) = self.transfer_bytes {
            s.push_str(&format!(", transfer {t} B"));
        }
        s
    }

    /// A generator with its own random streams seeded by `seed`: the same
    /// seed gives the same sequence.
    pub fn generator(&self, seed: u64) -> Result<Box<dyn Generator>, ModelError> {
        self.validate()?;
        Ok(Box::new(gen::ModelGen::new(self, seed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_schedule() {
        let s = FlowSpec::constant(1000.0, 512).unwrap();
        let mut g = s.generator(1).unwrap();
        assert_eq!(
            g.next(),
            Departure {
                gap_ns: 1_000_000,
                size: 512
            }
        );
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = FlowSpec::constant(0.0, 512).unwrap_err();
        assert!(e.to_string().starts_with("-C:"));
        let e = FlowSpec::constant(10.0, 10).unwrap_err();
        assert!(e.to_string().starts_with("-c:"));
    }
}
