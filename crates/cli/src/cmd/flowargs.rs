//! Traffic-model options of `wirebench send` (D-ITG's letters), turned into a
//! `model::FlowSpec`. Kept apart from the rest of `send` so that the model
//! options grow here without touching the engine's options.
//!
//! Upper-case letters choose the inter-departure time (IDT), lower-case the
//! payload size, with D-ITG's meaning for each (see docs/models.md).

use wirebench_model::app::{AppOptions, APP_NAMES};
use wirebench_model::{Burst, Dist, FlowSpec, IdtModel, SizeModel};
use wirebench_stats::SockOpts;
use wirebench_wire::sockopts;

const IDT: &str = "Inter-departure time (D-ITG letters; one of)";
const SIZE: &str = "Payload size (D-ITG letters; one of; bytes incl. the 24-byte probe header)";
const APP: &str = "Application models";

#[derive(clap::Args, Debug, Clone, Default)]
// D-ITG's Pareto letter -V would collide with the `-V/--version` flag that
// `propagate_version` gives every subcommand; `wirebench --version` stays.
#[command(disable_version_flag = true)]
pub struct FlowArgs {
    /// Constant rate: PPS packets per second (D-ITG -C). Default 1000.
    #[arg(short = 'C', value_name = "PPS", allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub constant_rate: Option<f64>,
    /// Uniform IDT between 1000/MAX_PPS and 1000/MIN_PPS ms (D-ITG -U takes rates).
    #[arg(short = 'U', num_args = 2, value_names = ["MIN_PPS", "MAX_PPS"], allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub uniform_rate: Option<Vec<f64>>,
    /// Poisson process: exponential IDT with mean 1000/PPS ms (D-ITG -E).
    #[arg(short = 'E', value_name = "PPS", allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub exp_rate: Option<f64>,
    /// Normal IDT, mean and standard deviation in ms (D-ITG -N). Negative draws are sent at once (gap 0) and counted.
    #[arg(short = 'N', num_args = 2, value_names = ["MEAN_MS", "SD_MS"], allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub normal_idt: Option<Vec<f64>>,
    /// D-ITG's "Poisson" -O: IDT = 1000/K ms with K ~ Poisson(LAMBDA) — the reciprocal of a Poisson count, NOT a Poisson process (that is -E).
    #[arg(short = 'O', value_name = "LAMBDA", allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub poisson_idt: Option<f64>,
    /// Pareto IDT: MIN_MS·U^(−1/SHAPE) ms (D-ITG -V shape scale; SHAPE ≤ 1 has no mean rate).
    #[arg(short = 'V', num_args = 2, value_names = ["SHAPE", "MIN_MS"], allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub pareto_idt: Option<Vec<f64>>,
    /// Cauchy IDT: location and scale in ms (D-ITG -Y; its help says "shape scale"). Negative draws clamp to 0.
    #[arg(short = 'Y', num_args = 2, value_names = ["LOC_MS", "SCALE_MS"], allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub cauchy_idt: Option<Vec<f64>>,
    /// Gamma IDT: SCALE_MS·Gamma(SHAPE), mean SHAPE·SCALE_MS ms (D-ITG -G).
    #[arg(short = 'G', num_args = 2, value_names = ["SHAPE", "SCALE_MS"], allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub gamma_idt: Option<Vec<f64>>,
    /// Weibull IDT: SCALE_MS·(−ln U)^(1/SHAPE) — scale FIRST, as D-ITG -W really does (its help has the order reversed).
    #[arg(short = 'W', num_args = 2, value_names = ["SCALE_MS", "SHAPE"], allow_negative_numbers = true, group = "idt", help_heading = IDT)]
    pub weibull_idt: Option<Vec<f64>>,
    /// IDTs in ms read from FILE, one per line, used in order and cycled (D-ITG -Ft).
    #[arg(long = "idt-file", value_name = "FILE", group = "idt", help_heading = IDT)]
    pub idt_file: Option<String>,
    /// Send as fast as the path allows (no pacing).
    #[arg(long = "max", group = "idt", help_heading = IDT)]
    pub max: bool,
    /// Constant payload bit rate instead of -C: BITS per second with k, M, G (x1000) suffixes, e.g. 100M (iperf3 -b). The packet rate is BITS / (8 x mean size); payload = bytes after the UDP/TCP header, probe header included.
    #[arg(long = "rate", value_name = "BITS", value_parser = sockopts::parse_bits, group = "idt", help_heading = IDT)]
    pub rate_bps: Option<f64>,
    /// Start the flow MS milliseconds after the session starts (D-ITG -d).
    #[arg(short = 'd', value_name = "MS", allow_negative_numbers = true, help_heading = IDT)]
    pub start_delay_ms: Option<u64>,
    /// ON/OFF bursts (D-ITG -B): an ON-duration law then an OFF-duration law, each a letter C U E V Y N O G W with its values in ms, e.g. `-B E 1000 C 500` (exponential ON mean 1 s, OFF 500 ms). Packets follow the IDT model during ON.
    #[arg(short = 'B', num_args = 4..=6, value_names = ["ON_LAW", "ON_MS..", "OFF_LAW", "OFF_MS.."], allow_negative_numbers = true, help_heading = IDT)]
    pub burst: Option<Vec<String>>,

    /// Constant payload size in bytes, probe header included (D-ITG -c). Default 512. 24..64000; a TCP flow's records may be up to 16777216 (16 MiB, one write→read delay per record); not with --auth probes above 64000.
    #[arg(short = 'c', value_name = "BYTES", allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub constant_size: Option<f64>,
    /// Uniform size in [MIN, MAX) bytes, truncated (D-ITG -u).
    #[arg(short = 'u', num_args = 2, value_names = ["MIN", "MAX"], allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub uniform_size: Option<Vec<f64>>,
    /// Exponential size with mean MEAN bytes (D-ITG -e).
    #[arg(short = 'e', value_name = "MEAN", allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub exp_size: Option<f64>,
    /// Normal size, mean and sd in bytes (D-ITG -n).
    #[arg(short = 'n', num_args = 2, value_names = ["MEAN", "SD"], allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub normal_size: Option<Vec<f64>>,
    /// Poisson size with mean LAMBDA bytes (D-ITG -o).
    #[arg(short = 'o', value_name = "LAMBDA", allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub poisson_size: Option<f64>,
    /// Pareto size: shape and minimum bytes (D-ITG -v).
    #[arg(short = 'v', num_args = 2, value_names = ["SHAPE", "MIN"], allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub pareto_size: Option<Vec<f64>>,
    /// Cauchy size: location and scale in bytes (D-ITG -y).
    #[arg(short = 'y', num_args = 2, value_names = ["LOC", "SCALE"], allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub cauchy_size: Option<Vec<f64>>,
    /// Gamma size: shape and scale in bytes (D-ITG -g).
    #[arg(short = 'g', num_args = 2, value_names = ["SHAPE", "SCALE"], allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub gamma_size: Option<Vec<f64>>,
    /// Weibull size: SCALE bytes first, then SHAPE (D-ITG -w).
    #[arg(short = 'w', num_args = 2, value_names = ["SCALE", "SHAPE"], allow_negative_numbers = true, group = "size", help_heading = SIZE)]
    pub weibull_size: Option<Vec<f64>>,
    /// Sizes in bytes read from FILE, one per line, cycled (D-ITG -Fs).
    #[arg(long = "size-file", value_name = "FILE", group = "size", help_heading = SIZE)]
    pub size_file: Option<String>,
    /// Sizes in fixed proportions, SIZE:WEIGHT,... in bytes (e.g. `24:7,548:4,1472:1`, the simple IMIX's UDP payloads over IPv4), sent evenly interleaved in a repeating cycle (no randomness).
    #[arg(long = "size-mix", value_name = "MIX", group = "size", help_heading = SIZE)]
    pub size_mix: Option<String>,
    /// Payload content after the probe header: pattern (default: a fixed non-repeating filler), zeros, random (from the flow's seed), or file:PATH (the file's bytes, cycled; at most 16 MiB read, the first 1 MiB used).
    #[arg(long = "payload", value_name = "zeros|random|pattern|file:PATH", help_heading = SIZE)]
    pub payload: Option<String>,

    /// Application model: voip, dns, telnet, quake3, csa, csi (D-ITG 2.8.1's presets, exact parameters); voip-real (true codec framing, P.59 talkspurts with --vad), opus, video, file (TCP transfer of --bytes). It fixes IDT and size.
    #[arg(long = "app", value_name = "MODEL", help_heading = APP)]
    pub app: Option<String>,
    /// Codec. --app voip: G.711.1 (default) G.711.2 G.723.1 G.729.2 G.729.3 (D-ITG's names: codec.samples-per-packet). --app voip-real: G.711 (default) G.729 G.723.1 opus.
    #[arg(long = "codec", value_name = "CODEC", help_heading = APP)]
    pub codec: Option<String>,
    /// Compressed RTP: a 2-byte header instead of RTP's 12 (voice models).
    #[arg(long = "crtp", help_heading = APP)]
    pub crtp: bool,
    /// Voice activity detection. --app voip: D-ITG's 0.65 factor on every packet's voice bytes; voip-real/opus: silent pauses (exponential talkspurts mean 1.004 s, pauses 1.587 s, ITU-T P.59).
    #[arg(long = "vad", help_heading = APP)]
    pub vad: bool,
    /// Audio per packet in ms for voip-real/opus (default 20; G.723.1: 30). A multiple of the codec frame.
    #[arg(long = "ptime", value_name = "MS", help_heading = APP)]
    pub ptime_ms: Option<u32>,
    /// Opus bitrate in kbit/s, 6..510 (default 24).
    #[arg(long = "bitrate", value_name = "KBPS", help_heading = APP)]
    pub bitrate_kbps: Option<f64>,
    /// Video frame rate (default 30).
    #[arg(long = "fps", value_name = "FPS", help_heading = APP)]
    pub fps: Option<f64>,
    /// Video mean frame size in bytes, log-normal (default 12500, i.e. 3 Mbit/s at 30 fps).
    #[arg(long = "frame-bytes", value_name = "BYTES", help_heading = APP)]
    pub frame_bytes: Option<f64>,
    /// Video frame-size standard deviation in bytes (default 0.4 × mean).
    #[arg(long = "frame-sd", value_name = "BYTES", help_heading = APP)]
    pub frame_sd: Option<f64>,
    /// Video: largest packet in bytes; frames are split into back-to-back packets (default 1400).
    #[arg(long = "packet-max", value_name = "BYTES", help_heading = APP)]
    pub packet_max: Option<u32>,
    /// File transfer size, e.g. 5000000, 5M (10^6) or 5Mi (2^20); the flow stops when it is sent and reports the completion time. Record size: -c (default 16384).
    #[arg(long = "bytes", value_name = "N", value_parser = parse_bytes, help_heading = APP)]
    pub bytes: Option<u64>,
}

const SOCK: &str = "Marking and socket options (per flow; a script line's own value wins)";

/// Socket options of every flow (D-ITG's -b and -f, iperf3's --dscp and
/// --flowlabel), turned into a `SockOpts`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SockArgs {
    /// IPv4 TOS byte / IPv6 traffic class, 0..255 or 0x00..0xff: DSCP in the upper six bits, ECN in the lower two (D-ITG -b).
    #[arg(short = 'b', value_name = "TOS", value_parser = sockopts::parse_tos, conflicts_with = "dscp", help_heading = SOCK)]
    pub tos: Option<u8>,
    /// DSCP code point: a name (ef, af11..af43, cs0..cs7, va, le, be) or 0..63 (iperf3 --dscp); ECN bits 0.
    #[arg(long = "dscp", value_name = "NAME|NUMBER", value_parser = sockopts::parse_dscp, help_heading = SOCK)]
    pub dscp: Option<u8>,
    /// IPv4 TTL / IPv6 hop limit of the data packets, 1..255 (D-ITG -f).
    #[arg(short = 'f', value_name = "TTL", value_parser = sockopts::parse_ttl, help_heading = SOCK)]
    pub ttl: Option<u8>,
    /// IPv6 flow label, 0..0xfffff (iperf3 -L/--flowlabel); Linux only.
    #[arg(long = "flow-label", alias = "flowlabel", value_name = "LABEL", value_parser = sockopts::parse_flow_label, help_heading = SOCK)]
    pub flow_label: Option<u32>,
    /// TCP congestion control (iperf3 -C/--congestion): cubic, bbr, reno, ...; one the kernel does not allow is refused with its list. Linux, FreeBSD.
    #[arg(long = "cc", alias = "congestion", value_name = "NAME", value_parser = sockopts::parse_cc, help_heading = SOCK)]
    pub cc: Option<String>,
    /// Socket buffer: the sender's send buffer and the receiver's receive buffer, bytes with K/M/G (x1024) suffixes, e.g. 256K (iperf3 -w; wirebench's -w is D-ITG's Weibull size). Without it TCP keeps the kernel's autotuning on both ends and UDP the kernel's default send buffer (208 KiB on Linux), as iperf3 and D-ITG do: an overloaded UDP sender then blocks and counts what it could not send in time as not sent, where a large buffer (e.g. 4M) overfills its host's transmit queue and loses the excess there.
    #[arg(long = "window", value_name = "BYTES", value_parser = sockopts::parse_window, help_heading = SOCK)]
    pub window: Option<u32>,
    /// TCP maximum segment size in bytes, 88..65535 (iperf3 -M/--set-mss).
    #[arg(short = 'M', long = "set-mss", value_name = "BYTES", value_parser = sockopts::parse_mss, help_heading = SOCK)]
    pub mss: Option<u32>,
    /// TCP: turn Nagle's algorithm off (TCP_NODELAY; D-ITG -D, iperf3 -N/--no-delay). Default: off for paced flows, on for --max and --app telnet.
    #[arg(short = 'D', long = "no-delay", conflicts_with = "nagle", help_heading = SOCK)]
    pub no_delay: bool,
    /// TCP: keep Nagle's algorithm on (coalesce small writes), also for paced flows.
    #[arg(long = "nagle", help_heading = SOCK)]
    pub nagle: bool,
    /// TCP: send with MSG_ZEROCOPY (Linux): the kernel sends from wirebench's own buffers instead of copying them, and reports when each send is done. It pays off on a real NIC with large records (64000 B and up; -c takes up to 16777216 on TCP) when the sender's CPU is the limit; on loopback and veth the kernel copies anyway when it delivers locally (the result says how many sends it copied) and the completions cost extra, so expect it to be slower there. Where the kernel refuses, the flow writes plainly and the result says why (flows[].zerocopy). Not for UDP, ICMP or reverse (-R) flows.
    #[arg(long = "zerocopy", help_heading = SOCK)]
    pub zerocopy: bool,
    /// UDP segmentation offload (UDP GSO, Linux 4.18+): one send carries a run of up to 64 same-size probes, each a complete datagram with its own sequence number and transmit time, and the kernel (or the NIC) cuts them apart, so the sender pays one trip through the stack per run instead of per datagram. auto (the default): for --max flows; on: also for paced flows (what is due at once, i.e. a backlog); off: one datagram per sendmmsg entry, as before. Where the kernel refuses (a device that cannot checksum, a probe longer than the path's MTU allows), the flow sends plainly and says why once. How it went is flows[].gso in the result. docs/engine.md, "UDP segmentation offload".
    #[arg(long = "gso", value_name = "WHEN", default_value = "auto", help_heading = SOCK)]
    pub gso: GsoArg,
    /// Source address of the flows and of the control connection (D-ITG -sa, iperf3 -B/--bind; -B here is D-ITG's burst). The receiver sees the data come from it.
    #[arg(long = "bind", value_name = "ADDR", value_parser = sockopts::parse_addr, help_heading = SOCK)]
    pub bind: Option<std::net::IpAddr>,
    /// Source port of the flows' data sockets, 1..65535 (D-ITG -sp, iperf3 --cport); with --flows N all N would share it, so one flow only.
    #[arg(long = "cport", value_name = "PORT", value_parser = sockopts::parse_cport, help_heading = SOCK)]
    pub cport: Option<u16>,
    /// Bind the flows' sockets and the control connection to this network interface (SO_BINDTODEVICE); Linux only. An interface that does not exist is refused.
    #[arg(long = "bind-dev", value_name = "DEV", value_parser = sockopts::parse_dev, help_heading = SOCK)]
    pub bind_dev: Option<String>,
    /// The receiver's data port for the flow, 1024..65535 (D-ITG -rp): agreed in the session; a receiver that cannot open it refuses with the reason. With --flows N, one flow only.
    #[arg(long = "data-port", value_name = "PORT", value_parser = sockopts::parse_data_port, help_heading = SOCK)]
    pub data_port: Option<u16>,
}

/// `send --gso`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, clap::ValueEnum)]
pub enum GsoArg {
    /// For --max UDP flows.
    #[default]
    Auto,
    /// For every UDP flow.
    On,
    /// Never.
    Off,
}

impl SockArgs {
    pub fn to_opts(&self) -> SockOpts {
        SockOpts {
            tos: self.tos.or(self.dscp.map(|d| d << 2)),
            ttl: self.ttl,
            flow_label: self.flow_label,
            cc: self.cc.clone(),
            window: self.window,
            mss: self.mss,
            nagle: if self.nagle {
                Some(true)
            } else if self.no_delay {
                Some(false)
            } else {
                None
            },
            zerocopy: self.zerocopy.then_some(true),
            gso: match self.gso {
                GsoArg::Auto => None,
                GsoArg::On => Some(true),
                GsoArg::Off => Some(false),
            },
            bind: self.bind,
            cport: self.cport,
            bind_dev: self.bind_dev.clone(),
            data_port: self.data_port,
        }
    }
}

/// `5000000`, `5M`, `5Mi`, `64k`: decimal SI or binary suffixes.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suf) = t.split_at(split);
    let mult: f64 = match suf {
        "" | "B" => 1.0,
        "k" | "K" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "Ki" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1048576.0,
        "Gi" | "GiB" => 1073741824.0,
        _ => {
            return Err(format!(
                "unknown size suffix {suf:?} (use k, M, G, Ki, Mi, Gi)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("not a byte count: {s:?}"))?;
    let b = v * mult;
    if !(1.0..1.8e19).contains(&b) || b.fract() != 0.0 {
        return Err(format!("not a whole, positive byte count: {s:?}"));
    }
    Ok(b as u64)
}

type Bad = anyhow::Error;

fn bad(e: impl std::fmt::Display) -> Bad {
    crate::exit::bad_input(e)
}

impl FlowArgs {
    /// The IDT flag given (its name and model), if any.
    fn idt(&self) -> Result<Option<(&'static str, IdtModel)>, Bad> {
        let one = |l: char, v: f64| IdtModel::from_ditg(l, &[v]).map_err(bad);
        let two = |l: char, v: &[f64]| IdtModel::from_ditg(l, v).map_err(bad);
        Ok(Some(if let Some(v) = self.constant_rate {
            ("-C", one('C', v)?)
        } else if let Some(v) = &self.uniform_rate {
            ("-U", two('U', v)?)
        } else if let Some(v) = self.exp_rate {
            ("-E", one('E', v)?)
        } else if let Some(v) = &self.normal_idt {
            ("-N", two('N', v)?)
        } else if let Some(v) = self.poisson_idt {
            ("-O", one('O', v)?)
        } else if let Some(v) = &self.pareto_idt {
            ("-V", two('V', v)?)
        } else if let Some(v) = &self.cauchy_idt {
            ("-Y", two('Y', v)?)
        } else if let Some(v) = &self.gamma_idt {
            ("-G", two('G', v)?)
        } else if let Some(v) = &self.weibull_idt {
            ("-W", two('W', v)?)
        } else if let Some(p) = &self.idt_file {
            (
                "--idt-file",
                IdtModel::Random(Dist::from_file("--idt-file", p).map_err(bad)?),
            )
        } else if self.max {
            ("--max", IdtModel::Max)
        } else if self.rate_bps.is_some() {
            // The packet rate needs the size model: set in to_spec.
            ("--rate", IdtModel::Max)
        } else {
            return Ok(None);
        }))
    }

    /// The size flag given (its name and model), if any.
    fn size(&self) -> Result<Option<(&'static str, SizeModel)>, Bad> {
        let one = |l: char, v: f64| SizeModel::from_ditg(l, &[v]).map_err(bad);
        let two = |l: char, v: &[f64]| SizeModel::from_ditg(l, v).map_err(bad);
        Ok(Some(if let Some(v) = self.constant_size {
            ("-c", one('c', v)?)
        } else if let Some(v) = &self.uniform_size {
            ("-u", two('u', v)?)
        } else if let Some(v) = self.exp_size {
            ("-e", one('e', v)?)
        } else if let Some(v) = &self.normal_size {
            ("-n", two('n', v)?)
        } else if let Some(v) = self.poisson_size {
            ("-o", one('o', v)?)
        } else if let Some(v) = &self.pareto_size {
            ("-v", two('v', v)?)
        } else if let Some(v) = &self.cauchy_size {
            ("-y", two('y', v)?)
        } else if let Some(v) = &self.gamma_size {
            ("-g", two('g', v)?)
        } else if let Some(v) = &self.weibull_size {
            ("-w", two('w', v)?)
        } else if let Some(p) = &self.size_file {
            (
                "--size-file",
                SizeModel::Random(Dist::from_file("--size-file", p).map_err(bad)?),
            )
        } else if let Some(m) = &self.size_mix {
            (
                "--size-mix",
                SizeModel::Random(Dist::mix("--size-mix", m).map_err(bad)?),
            )
        } else {
            return Ok(None);
        }))
    }

    fn app_options(&self, app: &str) -> AppOptions {
        AppOptions {
            app: app.to_string(),
            codec: self.codec.clone(),
            crtp: self.crtp,
            vad: self.vad,
            ptime_ms: self.ptime_ms,
            bitrate_kbps: self.bitrate_kbps,
            fps: self.fps,
            frame_bytes: self.frame_bytes,
            frame_sd: self.frame_sd,
            packet_max: self.packet_max,
            bytes: self.bytes,
            record: None,
        }
    }

    pub fn to_spec(&self) -> anyhow::Result<FlowSpec> {
        let idt = self.idt()?;
        let size = self.size()?;
        let burst = match &self.burst {
            Some(t) => {
                let toks: Vec<&str> = t.iter().map(String::as_str).collect();
                Some(Burst::from_ditg(&toks).map_err(bad)?)
            }
            None => None,
        };
        if let Some(app) = &self.app {
            if let Some((flag, _)) = idt {
                crate::bail_input!(
                    "{flag}: --app {app} fixes the inter-departure times; drop {flag}"
                );
            }
            if burst.is_some() {
                crate::bail_input!("-B: --app {app} fixes the inter-departure times; drop -B");
            }
            let mut opts = self.app_options(app);
            match size {
                Some((_, SizeModel::Constant { bytes })) if app.eq_ignore_ascii_case("file") => {
                    opts.record = Some(bytes)
                }
                Some((flag, _)) => {
                    crate::bail_input!("{flag}: --app {app} fixes the packet sizes; drop {flag}")
                }
                None => {}
            }
            return opts.build().and_then(|a| a.spec()).map_err(bad);
        }
        // Without --app, the application options have nothing to apply to.
        let app_only: [(&str, bool); 10] = [
            ("--codec", self.codec.is_some()),
            ("--crtp", self.crtp),
            ("--vad", self.vad),
            ("--ptime", self.ptime_ms.is_some()),
            ("--bitrate", self.bitrate_kbps.is_some()),
            ("--fps", self.fps.is_some()),
            ("--frame-bytes", self.frame_bytes.is_some()),
            ("--frame-sd", self.frame_sd.is_some()),
            ("--packet-max", self.packet_max.is_some()),
            ("--bytes", self.bytes.is_some()),
        ];
        if let Some((flag, _)) = app_only.iter().find(|(_, given)| *given) {
            crate::bail_input!("{flag}: needs --app (one of {APP_NAMES})");
        }
        let idt = idt
            .map(|p| p.1)
            .unwrap_or(IdtModel::Constant { pps: 1000.0 });
        let size = size
            .map(|p| p.1)
            .unwrap_or(SizeModel::Constant { bytes: 512 });
        let mut spec = FlowSpec::new(idt, size).map_err(bad)?;
        if let Some(bps) = self.rate_bps {
            let bytes = spec.nominal_payload_bytes();
            if !(bytes.is_finite() && bytes > 0.0) {
                crate::bail_input!("--rate: the size model has no mean size; give -c BYTES");
            }
            let pps = bps / (8.0 * bytes);
            let most = wirebench_engine::plan::MAX_PACED_PPS;
            if pps > most as f64 {
                crate::bail_input!(
                    "--rate: {bps} bit/s in {bytes} B packets is {pps:.0} packets/s, above the {most} one flow can be paced at; use larger packets (-c) or --max"
                );
            }
            spec.idt = IdtModel::from_ditg('C', &[pps]).map_err(|e| {
                bad(format!(
                    "--rate: {bps} bit/s in {bytes} B packets is {pps} packets/s: {e}"
                ))
            })?;
        }
        spec.burst = burst;
        spec.validate().map_err(bad)?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    #[command(name = "t", version, propagate_version = true)]
    struct Top {
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Sub {
        Send {
            #[command(flatten)]
            flow: FlowArgs,
        },
    }

    fn spec(args: &[&str]) -> anyhow::Result<FlowSpec> {
        let mut v = vec!["t", "send"];
        v.extend_from_slice(args);
        let Sub::Send { flow } = Top::try_parse_from(v)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .cmd;
        flow.to_spec()
    }

    fn err(args: &[&str]) -> String {
        format!("{:#}", spec(args).unwrap_err())
    }

    #[test]
    fn clap_definition_is_consistent() {
        Top::command().debug_assert();
    }

    #[test]
    fn size_mix_is_an_interleaved_cycle() {
        let s = spec(&["--size-mix", "24:7,548:4,1472:1"]).unwrap();
        let SizeModel::Random(Dist::Sequence { values, .. }) = &s.size else {
            panic!("{:?}", s.size)
        };
        assert_eq!(values.len(), 12);
        assert_eq!(values.iter().filter(|v| **v == 24.0).count(), 7);
        assert!(err(&["--size-mix", "24:7,548"]).starts_with("--size-mix"));
        assert!(err(&["--size-mix", "24:1", "-c", "100"]).contains("cannot be used with"));
    }

    #[test]
    fn ditg_letters() {
        assert_eq!(spec(&[]).unwrap(), FlowSpec::constant(1000.0, 512).unwrap());
        let s = spec(&["-E", "200", "-u", "100", "300"]).unwrap();
        assert_eq!(s.idt, IdtModel::Random(Dist::Exponential { mean: 5.0 }));
        assert_eq!(
            s.size,
            SizeModel::Random(Dist::Uniform {
                min: 100.0,
                max: 300.0
            })
        );
        let s = spec(&["-W", "10", "2", "-c", "100"]).unwrap();
        assert_eq!(
            s.idt,
            IdtModel::Random(Dist::Weibull {
                scale: 10.0,
                shape: 2.0
            })
        );
        let s = spec(&["-C", "100", "-B", "E", "1000", "C", "500"]).unwrap();
        assert!(s.burst.is_some());
        assert!((s.nominal_rate_pps().unwrap() - 100.0 * 1000.0 / 1500.0).abs() < 1e-9);
        // --rate: payload bits per second over the mean size.
        let s = spec(&["--rate", "100M", "-c", "1250"]).unwrap();
        assert_eq!(s.idt, IdtModel::Constant { pps: 10_000.0 });
        let s = spec(&["--rate", "1.2k", "-c", "150"]).unwrap();
        assert_eq!(s.idt, IdtModel::Constant { pps: 1.0 });
        assert!(spec(&["--rate", "1M", "-C", "5"]).is_err());
        assert_eq!(sockopts::parse_bits("2G"), Ok(2e9));
        assert!(sockopts::parse_bits("0").is_err() && sockopts::parse_bits("-1M").is_err());
        let s = spec(&["-N", "-1", "2", "-n", "300", "50"]).unwrap();
        assert_eq!(
            s.idt,
            IdtModel::Random(Dist::Normal {
                mean: -1.0,
                sd: 2.0
            })
        );
    }

    #[test]
    fn errors_name_the_flag() {
        assert!(err(&["-V", "0", "1"]).starts_with("-V:"));
        assert!(err(&["-c", "10"]).starts_with("-c:"));
        assert!(err(&["-C", "0"]).starts_with("-C:"));
        assert!(err(&["-B", "C", "1", "Q", "1"]).starts_with("-B"));
        assert!(err(&["--codec", "G.711.1"]).starts_with("--codec: needs --app"));
        assert!(err(&["--app", "voip", "-C", "5"]).starts_with("-C: --app voip fixes"));
        assert!(err(&["--app", "dns", "-c", "100"]).starts_with("-c: --app dns fixes"));
        assert!(err(&["--app", "voip", "--codec", "X"]).starts_with("--codec:"));
        assert!(err(&["--app", "nope"]).starts_with("--app:"));
        assert!(err(&["--app", "file"]).starts_with("--bytes:"));
        assert!(err(&["--app", "voip", "--rate", "1M"]).starts_with("--rate: --app voip fixes"));
        assert!(err(&["--rate", "900G", "-c", "24"]).starts_with("--rate:"));
        // clap refuses two IDT models at once.
        assert!(spec(&["-C", "5", "-E", "5"]).is_err());
        // Bad input is exit status 2.
        let e = spec(&["-V", "0", "1"]).unwrap_err();
        assert!(e
            .chain()
            .any(|c| c.downcast_ref::<crate::exit::BadInput>().is_some()));
    }

    #[test]
    fn application_models() {
        let s = spec(&["--app", "voip", "--codec", "G.729.2", "--vad"]).unwrap();
        assert_eq!(s.nominal_payload_bytes(), 25.0);
        assert!(s.voip_codec().is_some());
        let s = spec(&["--app", "file", "--bytes", "5M", "-c", "8192"]).unwrap();
        assert_eq!(s.transfer_bytes, Some(5_000_000));
        assert_eq!(s.size, SizeModel::Constant { bytes: 8192 });
        assert_eq!(s.app_transport(), Some(wirebench_wire::Transport::Tcp));
        let s = spec(&["--app", "opus", "--bitrate", "32", "--vad"]).unwrap();
        assert_eq!(s.size, SizeModel::Constant { bytes: 80 + 12 });
        assert!(s.burst.is_some());
        let s = spec(&["--app", "video", "--fps", "25", "--frame-bytes", "20000"]).unwrap();
        assert_eq!(s.packetize, Some(1400));
        for a in ["dns", "telnet", "quake3", "csa", "csi", "voip-real"] {
            assert!(spec(&["--app", a]).is_ok(), "{a}");
        }
        assert_eq!(parse_bytes("5Mi"), Ok(5 * 1048576));
        assert!(parse_bytes("5X").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
