//! Application models: D-ITG 2.8.1's presets with its exact parameters
//! (VoIP, DNS, Telnet, Quake3, Counter-Strike), and wirebench's own
//! realistic VoIP, Opus, video and file-transfer models.
//!
//! Each preset is expressed through the generic IDT/size/burst/packetize
//! fields of [`FlowSpec`], so the one generator and its tests cover them;
//! [`App`] stays in the spec as a label that also fixes the transport and,
//! for voice, the codec the E-model needs.

use wirebench_wire::Transport;

use crate::voip::{Codec, CodecKind};
use crate::{
    bad, Burst, Dist, FlowSpec, IdtModel, ModelError, SizeModel, MAX_PAYLOAD, MIN_PAYLOAD,
};

/// D-ITG's VoIP codec presets (`VoIP -x CODEC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DitgCodec {
    /// G.711, one 80-byte frame per packet, 100 packets/s.
    G711_1,
    /// G.711, two 80-byte frames per packet, 50 packets/s.
    G711_2,
    /// G.723.1, one 30-byte frame per packet, 26 packets/s.
    G723_1,
    /// G.729, two 10-byte frames per packet, 50 packets/s.
    G729_2,
    /// G.729, three 10-byte frames per packet, 33 packets/s.
    G729_3,
}

impl DitgCodec {
    /// Every preset, in D-ITG's order.
    pub const ALL: [DitgCodec; 5] = [
        DitgCodec::G711_1,
        DitgCodec::G711_2,
        DitgCodec::G723_1,
        DitgCodec::G729_2,
        DitgCodec::G729_3,
    ];

    /// Reads a D-ITG codec name (`G.711.1`, `G711.1`, any case).
    pub fn parse(s: &str) -> Result<DitgCodec, ModelError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "G.711.1" | "G711.1" => DitgCodec::G711_1,
            "G.711.2" | "G711.2" => DitgCodec::G711_2,
            "G.723.1" | "G723.1" => DitgCodec::G723_1,
            "G.729.2" | "G729.2" => DitgCodec::G729_2,
            "G.729.3" | "G729.3" => DitgCodec::G729_3,
            _ => {
                return Err(bad(
                    "--codec",
                    format!(
                        "unknown D-ITG codec {s:?}; one of G.711.1 G.711.2 G.723.1 G.729.2 G.729.3"
                    ),
                ))
            }
        })
    }

    /// The codec's D-ITG name, e.g. "G.711.1".
    pub fn name(self) -> &'static str {
        match self {
            DitgCodec::G711_1 => "G.711.1",
            DitgCodec::G711_2 => "G.711.2",
            DitgCodec::G723_1 => "G.723.1",
            DitgCodec::G729_2 => "G.729.2",
            DitgCodec::G729_3 => "G.729.3",
        }
    }

    /// (frame bytes, samples per packet, packets per second) from D-ITG 2.8.1.
    pub fn params(self) -> (u32, u32, u32) {
        match self {
            DitgCodec::G711_1 => (80, 1, 100),
            DitgCodec::G711_2 => (80, 2, 50),
            DitgCodec::G723_1 => (30, 1, 26),
            DitgCodec::G729_2 => (10, 2, 50),
            DitgCodec::G729_3 => (10, 3, 33),
        }
    }

    /// D-ITG's packet size before wirebench's clamp to [`MIN_PAYLOAD`]:
    /// trunc(VAD·frame·samples + header), VAD = 0.65 when on, header 12 B
    /// (RTP) or 2 B (CRTP).
    pub fn ditg_size(self, crtp: bool, vad: bool) -> u32 {
        let (frame, samples, _) = self.params();
        let voice = frame * samples;
        let voice = if vad { voice * 65 / 100 } else { voice };
        voice + if crtp { 2 } else { 12 }
    }
}

/// Codecs of the realistic VoIP model (true codec framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RealCodec {
    /// 64 kbit/s: 8 bytes per ms.
    G711,
    /// 8 kbit/s, 10 ms frames of 10 bytes.
    G729,
    /// 6.3 kbit/s, 30 ms frames of 24 bytes.
    G723_1,
    /// Opus (RFC 6716) at a constant bitrate.
    Opus {
        /// Constant bitrate, bits per second.
        bitrate_bps: u32,
    },
}

impl RealCodec {
    /// Reads a codec name for `--app voip-real` (`G.711`, `G.729`, `G.723.1`, `opus`).
    pub fn parse(s: &str) -> Result<RealCodec, ModelError> {
        Ok(match s.to_ascii_uppercase().replace('.', "").as_str() {
            "G711" => RealCodec::G711,
            "G729" | "G729A" => RealCodec::G729,
            "G7231" => RealCodec::G723_1,
            "OPUS" => RealCodec::Opus {
                bitrate_bps: 24_000,
            },
            _ => {
                return Err(bad(
                    "--codec",
                    format!(
                        "unknown codec {s:?} for --app voip-real; one of G.711 G.729 G.723.1 opus"
                    ),
                ))
            }
        })
    }

    /// The codec's name for labels, e.g. "G.729" or "Opus 24 kbit/s".
    pub fn name(self) -> String {
        match self {
            RealCodec::G711 => "G.711".into(),
            RealCodec::G729 => "G.729".into(),
            RealCodec::G723_1 => "G.723.1".into(),
            RealCodec::Opus { bitrate_bps } => {
                format!("Opus {} kbit/s", bitrate_bps as f64 / 1000.0)
            }
        }
    }

    /// Codec frame length in ms: packet times must be a multiple of it.
    pub fn frame_ms(self) -> u32 {
        match self {
            RealCodec::G711 => 10,
            RealCodec::G729 => 10,
            RealCodec::G723_1 => 30,
            RealCodec::Opus { .. } => 10,
        }
    }

    /// Packet time used when none is given: 30 ms for G.723.1, else 20 ms.
    pub fn default_ptime_ms(self) -> u32 {
        match self {
            RealCodec::G723_1 => 30,
            _ => 20,
        }
    }

    /// Voice bytes in one packet of `ptime_ms`.
    pub fn voice_bytes(self, ptime_ms: u32) -> u32 {
        match self {
            RealCodec::G711 => 8 * ptime_ms,
            RealCodec::G729 => ptime_ms,
            RealCodec::G723_1 => 24 * (ptime_ms / 30),
            RealCodec::Opus { bitrate_bps } => (bitrate_bps as u64 * ptime_ms as u64 / 8000) as u32,
        }
    }

    fn kind(self) -> CodecKind {
        match self {
            RealCodec::G711 => CodecKind::G711,
            RealCodec::G729 => CodecKind::G729A,
            RealCodec::G723_1 => CodecKind::G723_1,
            RealCodec::Opus { .. } => CodecKind::Opus,
        }
    }
}

/// An application model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum App {
    /// D-ITG's VoIP: constant rate, constant size, VAD only shrinks packets.
    Voip {
        /// The D-ITG codec preset.
        codec: DitgCodec,
        /// Compressed RTP headers (RFC 2508): 2-byte instead of 40-byte RTP/UDP/IP header.
        crtp: bool,
        /// Voice activity detection: silent periods send smaller packets.
        vad: bool,
    },
    /// D-ITG's DNS.
    Dns,
    /// D-ITG's Telnet (TCP).
    Telnet,
    /// D-ITG's Quake III Arena.
    Quake3,
    /// D-ITG's Counter-Strike, active player.
    CsActive,
    /// D-ITG's Counter-Strike, idle player.
    CsIdle,
    /// wirebench: true codec framing with RTP (or CRTP) header; with `vad`
    /// an ON/OFF talkspurt process after ITU-T P.59.
    VoipReal {
        /// The codec.
        codec: RealCodec,
        /// Audio per packet, ms.
        ptime_ms: u32,
        /// Compressed RTP headers (RFC 2508).
        crtp: bool,
        /// Voice activity detection: ON/OFF talkspurts.
        vad: bool,
    },
    /// wirebench: video frames at `fps`, log-normal frame sizes (mean, sd in
    /// bytes), split into packets of at most `packet_max` bytes sent back to back.
    Video {
        /// Frames per second.
        fps: f64,
        /// Mean frame size, bytes.
        frame_mean: f64,
        /// Standard deviation of the frame size, bytes.
        frame_sd: f64,
        /// Largest packet a frame is split into, bytes.
        packet_max: u32,
    },
    /// wirebench: transfer `bytes` over TCP in records of `record` bytes.
    File {
        /// Bytes to transfer.
        bytes: u64,
        /// Bytes per TCP record (write).
        record: u32,
    },
}

/// Telnet's size offsets 0..=14 above 21 bytes (D-ITG 2.8.1).
const TELNET_WEIGHTS: [f64; 15] = [
    0.65, 0.13, 0.07, 0.05, 0.03, 0.01, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.005, 0.005, 0.005,
];
/// Counter-Strike idle sizes and probabilities (D-ITG 2.8.1).
const CSI_SIZES: [(f64, f64); 8] = [
    (27.0, 0.8312),
    (28.0, 0.0018),
    (29.0, 0.0453),
    (30.0, 0.0195),
    (31.0, 0.0879),
    (32.0, 0.0024),
    (33.0, 0.0106),
    (35.0, 0.0013),
];

impl App {
    /// The transport the model runs on: TCP for Telnet and file transfers, UDP otherwise.
    pub fn transport(&self) -> Transport {
        match self {
            App::Telnet | App::File { .. } => Transport::Tcp,
            _ => Transport::Udp,
        }
    }

    /// The codec for the E-model, for VoIP models; None for the others.
    pub fn voip_codec(&self) -> Option<Codec> {
        match *self {
            App::Voip { codec, .. } => {
                let (_, _, pps) = codec.params();
                let kind = match codec {
                    DitgCodec::G711_1 | DitgCodec::G711_2 => CodecKind::G711,
                    DitgCodec::G723_1 => CodecKind::G723_1,
                    DitgCodec::G729_2 | DitgCodec::G729_3 => CodecKind::G729A,
                };
                Some(Codec::new(kind, 1000.0 / pps as f64))
            }
            App::VoipReal {
                codec, ptime_ms, ..
            } => Some(Codec::new(codec.kind(), ptime_ms as f64)),
            _ => None,
        }
    }

    /// The model in words, for results and reports.
    pub fn describe(&self) -> String {
        match self {
            App::Voip { codec, crtp, vad } => format!(
                "VoIP {} {}{} (D-ITG)",
                codec.name(),
                if *crtp { "CRTP" } else { "RTP" },
                if *vad { " VAD" } else { "" }
            ),
            App::Dns => "DNS (D-ITG)".into(),
            App::Telnet => "Telnet (D-ITG)".into(),
            App::Quake3 => "Quake3 (D-ITG)".into(),
            App::CsActive => "Counter-Strike active (D-ITG)".into(),
            App::CsIdle => "Counter-Strike idle (D-ITG)".into(),
            App::VoipReal {
                codec,
                ptime_ms,
                crtp,
                vad,
            } => format!(
                "VoIP {} {ptime_ms} ms {}{}",
                codec.name(),
                if *crtp { "CRTP" } else { "RTP" },
                if *vad { " talkspurts (P.59)" } else { "" }
            ),
            App::Video { fps, .. } => format!("video {fps} fps"),
            App::File { bytes, .. } => format!("file transfer {bytes} B"),
        }
    }

    /// The flow spec of this model, parameters validated (errors name the
    /// CLI flag).
    pub fn spec(&self) -> Result<FlowSpec, ModelError> {
        let (idt, size, burst, packetize, transfer) = match *self {
            App::Voip { codec, crtp, vad } => {
                let (_, _, pps) = codec.params();
                let bytes = codec.ditg_size(crtp, vad).max(MIN_PAYLOAD);
                (
                    IdtModel::Constant { pps: pps as f64 },
                    SizeModel::Constant { bytes },
                    None,
                    None,
                    None,
                )
            }
            App::Dns => (
                IdtModel::Constant { pps: 0.56 },
                SizeModel::Random(Dist::Uniform {
                    min: 100.0,
                    max: 320.0,
                }),
                None,
                None,
                None,
            ),
            App::Telnet => (
                // 1.1 × Pareto(0.95, minimum 1) = Pareto(0.95, minimum 1.1).
                IdtModel::Random(Dist::Pareto {
                    shape: 0.95,
                    min: 1.1,
                }),
                SizeModel::Random(Dist::Discrete {
                    values: (21..=35).map(|v| v as f64).collect(),
                    weights: TELNET_WEIGHTS.to_vec(),
                }),
                None,
                None,
                None,
            ),
            App::Quake3 => (
                IdtModel::Random(Dist::Mixture {
                    parts: vec![
                        (0.6, Dist::Exponential { mean: 4.29 }),
                        (0.4, Dist::Constant { value: 10.75 }),
                    ],
                }),
                SizeModel::Random(Dist::Normal {
                    mean: 64.151757,
                    sd: 3.2035755,
                }),
                None,
                None,
                None,
            ),
            App::CsActive => (
                IdtModel::Random(Dist::StudentT {
                    location: 41.6994,
                    scale: 0.104821,
                    dof: 0.704073,
                }),
                SizeModel::Random(Dist::Mixture {
                    parts: vec![
                        (
                            0.3732,
                            Dist::Normal {
                                mean: 34.8352,
                                sd: 4.3915,
                            },
                        ),
                        (
                            0.6268,
                            Dist::Normal {
                                mean: 49.4904,
                                sd: 3.6186,
                            },
                        ),
                    ],
                }),
                None,
                None,
                None,
            ),
            App::CsIdle => (
                IdtModel::Random(Dist::StudentT {
                    location: 41.6858,
                    scale: 0.0694393,
                    dof: 1.08341,
                }),
                SizeModel::Random(Dist::Discrete {
                    values: CSI_SIZES.iter().map(|p| p.0).collect(),
                    weights: CSI_SIZES.iter().map(|p| p.1).collect(),
                }),
                None,
                None,
                None,
            ),
            App::VoipReal {
                codec,
                ptime_ms,
                crtp,
                vad,
            } => {
                let f = codec.frame_ms();
                if ptime_ms == 0 || ptime_ms % f != 0 || ptime_ms > 120 {
                    return Err(bad(
                        "--ptime",
                        format!(
                            "{} packets carry whole {f} ms frames, up to 120 ms; got {ptime_ms} ms",
                            codec.name()
                        ),
                    ));
                }
                if let RealCodec::Opus { bitrate_bps } = codec {
                    if !(6_000..=510_000).contains(&bitrate_bps) {
                        return Err(bad(
                            "--bitrate",
                            format!(
                                "Opus runs at 6..510 kbit/s (RFC 6716), got {} kbit/s",
                                bitrate_bps as f64 / 1000.0
                            ),
                        ));
                    }
                }
                let bytes = (codec.voice_bytes(ptime_ms) + if crtp { 2 } else { 12 })
                    .clamp(MIN_PAYLOAD, MAX_PAYLOAD);
                (
                    IdtModel::Constant {
                        pps: 1000.0 / ptime_ms as f64,
                    },
                    SizeModel::Constant { bytes },
                    if vad {
                        Some(Burst::p59_talkspurts())
                    } else {
                        None
                    },
                    None,
                    None,
                )
            }
            App::Video {
                fps,
                frame_mean,
                frame_sd,
                packet_max,
            } => {
                if !(fps.is_finite() && fps > 0.0 && fps <= 10_000.0) {
                    return Err(bad(
                        "--fps",
                        format!("frame rate must be in (0, 10000], got {fps}"),
                    ));
                }
                if !(frame_mean.is_finite()
                    && frame_mean >= MIN_PAYLOAD as f64
                    && frame_mean <= 1e9)
                {
                    return Err(bad(
                        "--frame-bytes",
                        format!(
                            "mean frame size must be {MIN_PAYLOAD}..1e9 bytes, got {frame_mean}"
                        ),
                    ));
                }
                if !(frame_sd.is_finite() && frame_sd >= 0.0) {
                    return Err(bad(
                        "--frame-sd",
                        format!("must be >= 0 bytes, got {frame_sd}"),
                    ));
                }
                (
                    IdtModel::Constant { pps: fps },
                    SizeModel::Random(Dist::LogNormal {
                        mean: frame_mean,
                        sd: frame_sd,
                    }),
                    None,
                    Some(packet_max),
                    None,
                )
            }
            App::File { bytes, record } => (
                IdtModel::Max,
                SizeModel::Constant { bytes: record },
                None,
                None,
                Some(bytes),
            ),
        };
        let s = FlowSpec {
            idt,
            size,
            start_delay_ms: 0,
            burst,
            packetize,
            transfer_bytes: transfer,
            app: Some(self.clone()),
            payload: crate::Payload::Pattern,
        };
        s.validate()?;
        Ok(s)
    }
}

/// Application-model options as a user gives them (CLI `--app …`, TOML
/// keys), turned into an [`App`] with defaults filled in. Errors name the
/// CLI flag.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppOptions {
    /// voip | dns | telnet | quake3 | csa | csi | voip-real | opus | video | file
    pub app: String,
    /// Codec name (D-ITG preset for `voip`, real codec for `voip-real`).
    pub codec: Option<String>,
    /// Compressed RTP headers.
    pub crtp: bool,
    /// Voice activity detection.
    pub vad: bool,
    /// Packet time, ms (`voip-real`, `opus`).
    pub ptime_ms: Option<u32>,
    /// Opus bitrate, kbit/s.
    pub bitrate_kbps: Option<f64>,
    /// Video frames per second.
    pub fps: Option<f64>,
    /// Video mean frame size, bytes.
    pub frame_bytes: Option<f64>,
    /// Video frame-size standard deviation, bytes.
    pub frame_sd: Option<f64>,
    /// Video largest packet, bytes.
    pub packet_max: Option<u32>,
    /// File transfer size, bytes.
    pub bytes: Option<u64>,
    /// File transfer record size, bytes.
    pub record: Option<u32>,
}

/// Names accepted by `--app`.
pub const APP_NAMES: &str = "voip dns telnet quake3 csa csi voip-real opus video file";

/// D-ITG's application models by `--app` name: the ones that run with no
/// option beyond a codec, so campaigns can sweep them as a matrix axis.
pub const DITG_APPS: [&str; 6] = ["voip", "dns", "telnet", "quake3", "csa", "csi"];

/// Every application model by `--app` name (as [`APP_NAMES`]), for
/// campaigns: D-ITG's, the real codecs (`voip-real`, `opus`), `video` and
/// `file` (a transfer of the campaign's `kbytes`).
pub const ALL_APPS: [&str; 10] = [
    "voip",
    "dns",
    "telnet",
    "quake3",
    "csa",
    "csi",
    "voip-real",
    "opus",
    "video",
    "file",
];

impl AppOptions {
    /// The application model with defaults filled in; errors name the CLI flag.
    pub fn build(&self) -> Result<App, ModelError> {
        let name = self.app.to_ascii_lowercase();
        let voice = matches!(name.as_str(), "voip" | "voip-real" | "opus");
        let reject = |flag: &str, given: bool, only: &str| -> Result<(), ModelError> {
            if given {
                Err(bad(
                    flag,
                    format!("only applies to --app {only}, not --app {name}"),
                ))
            } else {
                Ok(())
            }
        };
        reject(
            "--codec",
            self.codec.is_some() && !matches!(name.as_str(), "voip" | "voip-real"),
            "voip|voip-real",
        )?;
        reject("--crtp", self.crtp && !voice, "voip|voip-real|opus")?;
        reject("--vad", self.vad && !voice, "voip|voip-real|opus")?;
        reject(
            "--ptime",
            self.ptime_ms.is_some() && !matches!(name.as_str(), "voip-real" | "opus"),
            "voip-real|opus",
        )?;
        let opus_rate = name == "opus"
            || (name == "voip-real"
                && self
                    .codec
                    .as_deref()
                    .is_some_and(|c| c.eq_ignore_ascii_case("opus")));
        reject(
            "--bitrate",
            self.bitrate_kbps.is_some() && !opus_rate,
            "opus",
        )?;
        let video = name == "video";
        reject("--fps", self.fps.is_some() && !video, "video")?;
        reject(
            "--frame-bytes",
            self.frame_bytes.is_some() && !video,
            "video",
        )?;
        reject("--frame-sd", self.frame_sd.is_some() && !video, "video")?;
        reject("--packet-max", self.packet_max.is_some() && !video, "video")?;
        reject("--bytes", self.bytes.is_some() && name != "file", "file")?;
        Ok(match name.as_str() {
            "voip" => App::Voip {
                codec: DitgCodec::parse(self.codec.as_deref().unwrap_or("G.711.1"))?,
                crtp: self.crtp,
                vad: self.vad,
            },
            "dns" => App::Dns,
            "telnet" => App::Telnet,
            "quake3" => App::Quake3,
            "csa" => App::CsActive,
            "csi" => App::CsIdle,
            "voip-real" | "opus" => {
                let mut codec = if name == "opus" {
                    RealCodec::Opus {
                        bitrate_bps: 24_000,
                    }
                } else {
                    RealCodec::parse(self.codec.as_deref().unwrap_or("G.711"))?
                };
                if let (RealCodec::Opus { bitrate_bps }, Some(k)) = (&mut codec, self.bitrate_kbps)
                {
                    if !(k.is_finite() && (6.0..=510.0).contains(&k)) {
                        return Err(bad(
                            "--bitrate",
                            format!("Opus runs at 6..510 kbit/s (RFC 6716), got {k}"),
                        ));
                    }
                    *bitrate_bps = (k * 1000.0).round() as u32;
                }
                App::VoipReal {
                    codec,
                    ptime_ms: self.ptime_ms.unwrap_or(codec.default_ptime_ms()),
                    crtp: self.crtp,
                    vad: self.vad,
                }
            }
            "video" => {
                let frame_mean = self.frame_bytes.unwrap_or(12_500.0);
                App::Video {
                    fps: self.fps.unwrap_or(30.0),
                    frame_mean,
                    frame_sd: self.frame_sd.unwrap_or(frame_mean * 0.4),
                    packet_max: self.packet_max.unwrap_or(1400),
                }
            }
            "file" => App::File {
                bytes: self.bytes.ok_or_else(|| {
                    bad(
                        "--bytes",
                        "--app file needs the number of bytes to transfer",
                    )
                })?,
                record: self.record.unwrap_or(16_384),
            },
            _ => {
                return Err(bad(
                    "--app",
                    format!(
                        "unknown application model {:?}; one of {APP_NAMES}",
                        self.app
                    ),
                ))
            }
        })
    }
}
