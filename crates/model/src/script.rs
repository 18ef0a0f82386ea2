//! Multi-flow scripts: D-ITG's ITGSend script files (one flow per line, the
//! single-flow options of ITGSend) and wirebench's own TOML `[[flow]]` list.
//!
//! Both produce [`ScriptFlow`]s; errors carry the file, the line and the
//! option or key, so a user can fix a 200-line script without guessing.

use std::fmt;
use std::path::Path;

use wirebench_wire::sockopts::{self, SockOpts};
use wirebench_wire::{MeterMode, Transport};

use crate::app::AppOptions;
use crate::{Burst, Dist, FlowSpec, IdtModel, ModelError, Payload, SizeModel};

/// One flow of a script. `None` fields were not given: the command line's
/// value (or the default) applies.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptFlow {
    /// 1-based line in the file (for TOML: the `[[flow]]` header).
    pub line: usize,
    /// The flow's traffic model.
    pub spec: FlowSpec,
    /// `-T`: UDP or TCP.
    pub transport: Option<Transport>,
    /// `-a`: destination address.
    pub dest: Option<String>,
    /// `-rp`: the receiver's data port (1024 and up), agreed in the session.
    pub port: Option<u16>,
    /// `-t`: duration, ms.
    pub duration_ms: Option<u64>,
    /// `-z`: packet count.
    pub packets: Option<u64>,
    /// `-k`: kilobytes to send.
    pub kbytes: Option<u64>,
    /// `-m`: owd or rtt.
    pub meter: Option<MeterMode>,
    /// Socket options of this line (marking); unset ones come from the
    /// command line.
    pub opts: SockOpts,
    /// TOML `direction`: forward, reverse (the receiver sends, as `-R`) or
    /// bidir (one flow each way, as `--bidir`); None: the command line's.
    pub direction: Option<FlowDirection>,
    /// TOML `payload`: this flow's content (`--payload`'s values); None:
    /// the command line's.
    pub payload: Option<Payload>,
}

/// Which way a script's flow runs (TOML `direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowDirection {
    /// Sender to receiver (the default).
    Forward,
    /// Receiver to sender (`-R`).
    Reverse,
    /// Both at once, reported as two flows (`--bidir`).
    Bidir,
}

fn parse_direction(opt: &str, v: &str) -> Result<FlowDirection, ScriptError> {
    match v.to_ascii_lowercase().as_str() {
        "forward" => Ok(FlowDirection::Forward),
        "reverse" => Ok(FlowDirection::Reverse),
        "bidir" => Ok(FlowDirection::Bidir),
        _ => Err(err(
            opt,
            format!("unknown direction {v:?}; forward, reverse or bidir"),
        )),
    }
}

/// A script error: `FILE:LINE: OPTION: reason`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptError {
    /// The script's name (file path) for messages.
    pub origin: String,
    /// 1-based line of the fault.
    pub line: usize,
    /// The D-ITG option (`-E`) or TOML key (`idt`) at fault.
    pub option: String,
    /// What is wrong, in words.
    pub reason: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.origin.is_empty() {
            write!(f, "{}:{}: ", self.origin, self.line)?;
        }
        if self.option.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.option, self.reason)
        }
    }
}

impl std::error::Error for ScriptError {}

fn err(option: &str, reason: impl Into<String>) -> ScriptError {
    ScriptError {
        origin: String::new(),
        line: 0,
        option: option.to_string(),
        reason: reason.into(),
    }
}

impl From<ModelError> for ScriptError {
    fn from(e: ModelError) -> Self {
        let ModelError::BadParam { flag, reason } = e;
        err(&flag, reason)
    }
}

fn parse_transport(opt: &str, v: &str) -> Result<Transport, ScriptError> {
    match v.to_ascii_lowercase().as_str() {
        "udp" => Ok(Transport::Udp),
        "tcp" => Ok(Transport::Tcp),
        // Echo requests answered by the destination's stack (no receiver).
        "icmp" => Ok(Transport::Icmp),
        "sctp" | "dccp" => Err(err(
            opt,
            format!("{v} is a D-ITG protocol wirebench does not send; use UDP, TCP or ICMP"),
        )),
        _ => Err(err(
            opt,
            format!("unknown protocol {v:?}; UDP, TCP or ICMP"),
        )),
    }
}

fn parse_meter(opt: &str, v: &str) -> Result<MeterMode, ScriptError> {
    v.parse().map_err(|_| {
        err(
            opt,
            format!("unknown meter {v:?}; owdm (one-way) or rttm (round trip)"),
        )
    })
}

fn num<T: std::str::FromStr>(opt: &str, v: Option<&&str>, what: &str) -> Result<T, ScriptError> {
    let v = v.ok_or_else(|| err(opt, format!("missing {what}")))?;
    v.parse::<T>()
        .map_err(|_| err(opt, format!("{what} is not a valid number: {v:?}")))
}

/// Builds a flow's spec from its parts; shared by both script forms.
struct Parts {
    idt: Option<(String, IdtModel)>,
    size: Option<(String, SizeModel)>,
    burst: Option<Burst>,
    app: Option<(String, AppOptions)>,
    start_delay_ms: u64,
}

impl Parts {
    fn new() -> Self {
        Parts {
            idt: None,
            size: None,
            burst: None,
            app: None,
            start_delay_ms: 0,
        }
    }

    fn set_idt(&mut self, opt: &str, m: IdtModel) -> Result<(), ScriptError> {
        if let Some((prev, _)) = &self.idt {
            return Err(err(
                opt,
                format!("a second inter-departure model (already {prev})"),
            ));
        }
        self.idt = Some((opt.to_string(), m));
        Ok(())
    }

    fn set_size(&mut self, opt: &str, m: SizeModel) -> Result<(), ScriptError> {
        if let Some((prev, _)) = &self.size {
            return Err(err(opt, format!("a second size model (already {prev})")));
        }
        self.size = Some((opt.to_string(), m));
        Ok(())
    }

    fn build(self) -> Result<FlowSpec, ScriptError> {
        let mut spec = if let Some((app_opt, a)) = self.app {
            if let Some((o, _)) = &self.idt {
                return Err(err(
                    o,
                    format!("{app_opt} fixes the inter-departure times; drop {o}"),
                ));
            }
            if self.burst.is_some() {
                return Err(err(
                    "-B",
                    format!("{app_opt} fixes the inter-departure times; drop -B"),
                ));
            }
            let mut a = a;
            if let Some((o, s)) = &self.size {
                match (a.app.as_str(), s) {
                    ("file", SizeModel::Constant { bytes }) => a.record = Some(*bytes),
                    _ => {
                        return Err(err(
                            o,
                            format!("{app_opt} fixes the packet sizes; drop {o}"),
                        ))
                    }
                }
            }
            a.build()?.spec()?
        } else {
            let idt = self
                .idt
                .map(|p| p.1)
                .unwrap_or(IdtModel::Constant { pps: 1000.0 });
            let size = self
                .size
                .map(|p| p.1)
                .unwrap_or(SizeModel::Constant { bytes: 512 });
            let mut s = FlowSpec::new(idt, size)?;
            s.burst = self.burst;
            s.validate()?;
            s
        };
        spec.start_delay_ms = self.start_delay_ms;
        Ok(spec)
    }
}

/// Parses one ITGSend flow: its single-flow options as tokens.
pub fn parse_ditg_args(tokens: &[&str]) -> Result<ScriptFlow, ScriptError> {
    let mut parts = Parts::new();
    let mut flow = ScriptFlow {
        line: 0,
        spec: FlowSpec::constant(1000.0, 512)?,
        transport: None,
        dest: None,
        port: None,
        duration_ms: None,
        packets: None,
        kbytes: None,
        meter: None,
        opts: SockOpts::default(),
        direction: None,
        payload: None,
    };
    let mut i = 0;
    while i < tokens.len() {
        let opt = tokens[i];
        let voip = parts.app.as_ref().is_some_and(|a| a.1.app == "voip");
        i += 1;
        match opt {
            "-a" => {
                let v = tokens
                    .get(i)
                    .ok_or_else(|| err(opt, "missing destination address"))?;
                flow.dest = Some(v.to_string());
                i += 1;
            }
            "-rp" => {
                let v = tokens.get(i).ok_or_else(|| err(opt, "missing data port"))?;
                flow.port = Some(sockopts::parse_data_port(v).map_err(|e| err(opt, e))?);
                i += 1;
            }
            "-sa" => {
                let v = tokens
                    .get(i)
                    .ok_or_else(|| err(opt, "missing source address"))?;
                flow.opts.bind = Some(sockopts::parse_addr(v).map_err(|e| err(opt, e))?);
                i += 1;
            }
            "-sp" => {
                let v = tokens
                    .get(i)
                    .ok_or_else(|| err(opt, "missing source port"))?;
                flow.opts.cport = Some(sockopts::parse_cport(v).map_err(|e| err(opt, e))?);
                i += 1;
            }
            "-T" => {
                let v = tokens.get(i).ok_or_else(|| err(opt, "missing protocol"))?;
                flow.transport = Some(parse_transport(opt, v)?);
                i += 1;
            }
            "-m" => {
                let v = tokens.get(i).ok_or_else(|| err(opt, "missing meter"))?;
                flow.meter = Some(parse_meter(opt, v)?);
                i += 1;
            }
            "-t" => {
                flow.duration_ms = Some(num(opt, tokens.get(i), "duration in ms")?);
                i += 1;
            }
            "-z" => {
                flow.packets = Some(num(opt, tokens.get(i), "packet count")?);
                i += 1;
            }
            "-k" => {
                flow.kbytes = Some(num(opt, tokens.get(i), "kilobytes")?);
                i += 1;
            }
            "-d" => {
                parts.start_delay_ms = num(opt, tokens.get(i), "start delay in ms")?;
                i += 1;
            }
            "-b" => {
                let v = tokens.get(i).ok_or_else(|| err(opt, "missing TOS byte"))?;
                flow.opts.tos = Some(sockopts::parse_tos(v).map_err(|e| err(opt, e))?);
                i += 1;
            }
            "-D" => flow.opts.nagle = Some(false),
            "-f" => {
                let v = tokens.get(i).ok_or_else(|| err(opt, "missing TTL"))?;
                flow.opts.ttl = Some(sockopts::parse_ttl(v).map_err(|e| err(opt, e))?);
                i += 1;
            }
            "-x" if voip => {
                let v = tokens.get(i).ok_or_else(|| err(opt, "missing codec"))?;
                if let Some(a) = parts.app.as_mut() {
                    a.1.codec = Some(v.to_string());
                }
                i += 1;
            }
            "-h" if voip => {
                let v = tokens
                    .get(i)
                    .ok_or_else(|| err(opt, "missing RTP or CRTP"))?;
                let crtp = match v.to_ascii_uppercase().as_str() {
                    "RTP" => false,
                    "CRTP" => true,
                    _ => return Err(err(opt, format!("expected RTP or CRTP, got {v:?}"))),
                };
                if let Some(a) = parts.app.as_mut() {
                    a.1.crtp = crtp;
                }
                i += 1;
            }
            "-VAD" if voip => {
                if let Some(a) = parts.app.as_mut() {
                    a.1.vad = true;
                }
            }
            "-l" | "-L" | "-x" | "-X" => {
                return Err(err(
                    opt,
                    "belongs on the ITGSend command line, not in a script (log options)",
                ));
            }
            "-Ft" | "-Fs" => {
                let path = tokens.get(i).ok_or_else(|| err(opt, "missing file name"))?;
                let d = Dist::from_file(opt, path)?;
                if opt == "-Ft" {
                    parts.set_idt(opt, IdtModel::Random(d))?;
                } else {
                    parts.set_size(opt, SizeModel::Random(d))?;
                }
                i += 1;
            }
            "-B" => {
                if parts.burst.is_some() {
                    return Err(err(opt, "given twice"));
                }
                // Letter + its parameters, twice (ON then OFF).
                let start = i;
                for _ in 0..2 {
                    let l = tokens.get(i).and_then(|t| {
                        let mut c = t.chars();
                        match (c.next(), c.next()) {
                            (Some(ch), None) => crate::ditg_arity(ch),
                            _ => None,
                        }
                    });
                    i += 1 + l.unwrap_or(0);
                }
                let end = i.min(tokens.len());
                parts.burst = Some(Burst::from_ditg(&tokens[start..end])?);
            }
            "VoIP" | "DNS" | "Telnet" | "Quake3" | "CSa" | "CSi" => {
                if let Some((prev, _)) = &parts.app {
                    return Err(err(
                        opt,
                        format!("a second application model (already {prev})"),
                    ));
                }
                let app = match opt {
                    "VoIP" => "voip",
                    "DNS" => "dns",
                    "Telnet" => "telnet",
                    "Quake3" => "quake3",
                    "CSa" => "csa",
                    _ => "csi",
                };
                parts.app = Some((
                    opt.to_string(),
                    AppOptions {
                        app: app.into(),
                        ..Default::default()
                    },
                ));
            }
            _ => {
                let mut c = opt.chars();
                let letter = match (c.next(), c.next(), c.next()) {
                    (Some('-'), Some(l), None) if crate::ditg_arity(l).is_some() => Some(l),
                    _ => None,
                };
                let Some(letter) = letter else {
                    let reason = match opt {
                        "-s" | "-j" | "-poll" | "-i" | "-p" | "-P" | "-Sda" | "-Ssp" | "-Sdp"
                        | "-rk" | "-H" => {
                            "this ITGSend option is not supported by wirebench".to_string()
                        }
                        "ICMP" | "SCTP" | "DCCP" => {
                            "not supported; use -T UDP, -T TCP or -T ICMP".to_string()
                        }
                        _ => "unknown option".to_string(),
                    };
                    return Err(err(opt, reason));
                };
                let n = crate::ditg_arity(letter).unwrap_or(1);
                let mut p = Vec::with_capacity(n);
                for k in 0..n {
                    p.push(num::<f64>(
                        opt,
                        tokens.get(i + k),
                        &format!("parameter {} of {n}", k + 1),
                    )?);
                }
                i += n;
                if letter.is_ascii_uppercase() {
                    parts.set_idt(opt, IdtModel::from_ditg(letter, &p)?)?;
                } else {
                    parts.set_size(opt, SizeModel::from_ditg(letter, &p)?)?;
                }
            }
        }
    }
    // The application models name their command-line flags; in D-ITG's
    // own syntax the codec is -x.
    flow.spec = parts.build().map_err(|mut e| {
        if e.option == "--codec" {
            e.option = "-x".into();
        }
        e
    })?;
    Ok(flow)
}

/// Parses a D-ITG script: one flow per line, flow id = line order. `#`
/// comments, blank lines and a missing final newline are accepted.
pub fn parse_ditg(text: &str, origin: &str) -> Result<Vec<ScriptFlow>, ScriptError> {
    let mut flows = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.is_empty() {
            continue;
        }
        match parse_ditg_args(&tokens) {
            Ok(mut f) => {
                f.line = n + 1;
                flows.push(f);
            }
            Err(mut e) => {
                e.origin = origin.to_string();
                e.line = n + 1;
                return Err(e);
            }
        }
    }
    if flows.is_empty() {
        return Err(ScriptError {
            origin: origin.to_string(),
            line: 0,
            option: String::new(),
            reason: "no flows in script".into(),
        });
    }
    Ok(flows)
}

/// Line (1-based) of byte offset `off` in `text`.
fn line_of(text: &str, off: usize) -> usize {
    text[..off.min(text.len())].matches('\n').count() + 1
}

/// Lines of the `[[flow]]` headers, in order.
fn flow_headers(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim();
            t.starts_with("[[") && t.trim_start_matches('[').trim_end_matches(']').trim() == "flow"
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Line of `key` inside the table that starts at `header`.
fn key_line(text: &str, header: usize, key: &str) -> usize {
    for (i, l) in text.lines().enumerate().skip(header) {
        let t = l.trim_start();
        if t.starts_with('[') {
            break;
        }
        if let Some(rest) = t.strip_prefix(key) {
            let rest = rest.trim_start();
            if rest.starts_with('=') {
                return i + 1;
            }
        }
    }
    header
}

/// Distribution names of the TOML form and their D-ITG letters.
fn dist_letter(name: &str) -> Option<char> {
    Some(match name.to_ascii_lowercase().as_str() {
        "constant" | "c" => 'C',
        "uniform" | "u" => 'U',
        "exponential" | "e" => 'E',
        "normal" | "n" => 'N',
        "poisson" | "o" => 'O',
        "pareto" | "v" => 'V',
        "cauchy" | "y" => 'Y',
        "gamma" | "g" => 'G',
        "weibull" | "w" => 'W',
        _ => return None,
    })
}

/// The keys a `[[flow]]` table of a TOML script may have.
pub const TOML_KEYS: &[&str] = &[
    "dest",
    "port",
    "transport",
    "meter",
    "direction",
    "duration_ms",
    "packets",
    "kbytes",
    "start_delay_ms",
    "idt",
    "size",
    "burst",
    "app",
    "codec",
    "crtp",
    "vad",
    "ptime_ms",
    "bitrate_kbps",
    "fps",
    "frame_bytes",
    "frame_sd",
    "packet_max",
    "bytes",
    "record_bytes",
    "max",
    "tos",
    "dscp",
    "ttl",
    "flow_label",
    "cc",
    "window",
    "mss",
    "nagle",
    "zerocopy",
    "bind",
    "cport",
    "bind_dev",
    "payload",
];

fn toml_flow(t: &toml::Table) -> Result<ScriptFlow, ScriptError> {
    for k in t.keys() {
        if !TOML_KEYS.contains(&k.as_str()) {
            return Err(err(
                k,
                format!("unknown key; known keys: {}", TOML_KEYS.join(" ")),
            ));
        }
    }
    let s = |k: &str| -> Result<Option<String>, ScriptError> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(v)) => Ok(Some(v.clone())),
            Some(_) => Err(err(k, "must be a string")),
        }
    };
    let int = |k: &str| -> Result<Option<u64>, ScriptError> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::Integer(v)) if *v >= 0 => Ok(Some(*v as u64)),
            Some(_) => Err(err(k, "must be a non-negative integer")),
        }
    };
    let float = |k: &str| -> Result<Option<f64>, ScriptError> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::Integer(v)) => Ok(Some(*v as f64)),
            Some(toml::Value::Float(v)) => Ok(Some(*v)),
            Some(_) => Err(err(k, "must be a number")),
        }
    };
    let boolean = |k: &str| -> Result<bool, ScriptError> {
        match t.get(k) {
            None => Ok(false),
            Some(toml::Value::Boolean(b)) => Ok(*b),
            Some(_) => Err(err(k, "must be true or false")),
        }
    };
    let small = |k: &str, v: Option<u64>, max: u64| -> Result<Option<u64>, ScriptError> {
        match v {
            Some(x) if x > max => Err(err(k, format!("must be at most {max}, got {x}"))),
            o => Ok(o),
        }
    };
    // Model errors name the CLI flag; in a TOML file name the key instead.
    let rekey = |k: &'static str| {
        move |e: ModelError| -> ScriptError {
            let ModelError::BadParam { flag, reason } = e;
            err(k, format!("{reason} ({flag})"))
        }
    };

    let mut parts = Parts::new();
    if boolean("max")? {
        parts
            .set_idt("max", IdtModel::Max)
            .map_err(|e| err("max", e.reason))?;
    }
    if let Some(v) = s("idt")? {
        let m = model_words(&v, true).map_err(|e| err("idt", e.reason))?;
        if parts.idt.is_some() {
            return Err(err("idt", "conflicts with max = true"));
        }
        if let (Some(m), _) = m {
            parts.idt = Some(("idt".into(), m));
        }
    }
    if let Some(v) = s("size")? {
        let m = model_words(&v, false).map_err(|e| err("size", e.reason))?;
        if let (_, Some(m)) = m {
            parts.size = Some(("size".into(), m));
        }
    }
    if let Some(v) = s("burst")? {
        let toks: Vec<&str> = v.split_whitespace().collect();
        parts.burst = Some(Burst::from_ditg(&toks).map_err(rekey("burst"))?);
    }
    parts.start_delay_ms = int("start_delay_ms")?.unwrap_or(0);
    if let Some(a) = s("app")? {
        let o = AppOptions {
            app: a,
            codec: s("codec")?,
            crtp: boolean("crtp")?,
            vad: boolean("vad")?,
            ptime_ms: small("ptime_ms", int("ptime_ms")?, 1000)?.map(|v| v as u32),
            bitrate_kbps: float("bitrate_kbps")?,
            fps: float("fps")?,
            frame_bytes: float("frame_bytes")?,
            frame_sd: float("frame_sd")?,
            packet_max: small("packet_max", int("packet_max")?, u32::MAX as u64)?.map(|v| v as u32),
            bytes: int("bytes")?,
            record: small("record_bytes", int("record_bytes")?, u32::MAX as u64)?.map(|v| v as u32),
        };
        // Check the app options here so that errors name the TOML key.
        o.build().map_err(|e| {
            let ModelError::BadParam { flag, reason } = e;
            let key = match flag.as_str() {
                "--codec" => "codec",
                "--crtp" => "crtp",
                "--vad" => "vad",
                "--ptime" => "ptime_ms",
                "--bitrate" => "bitrate_kbps",
                "--fps" => "fps",
                "--frame-bytes" => "frame_bytes",
                "--frame-sd" => "frame_sd",
                "--packet-max" => "packet_max",
                "--bytes" => "bytes",
                _ => "app",
            };
            err(key, reason)
        })?;
        parts.app = Some(("app".into(), o));
    } else {
        for k in [
            "codec",
            "crtp",
            "vad",
            "ptime_ms",
            "bitrate_kbps",
            "fps",
            "frame_bytes",
            "frame_sd",
            "packet_max",
            "bytes",
            "record_bytes",
        ] {
            if t.contains_key(k) {
                return Err(err(k, "only applies with app = ..."));
            }
        }
    }
    let spec = parts.build().map_err(|e| {
        let key = match e.option.as_str() {
            "idt" | "size" | "burst" | "app" | "max" => e.option.clone(),
            o if o.starts_with("-B") => "burst".into(),
            o if o.len() == 2 && o.chars().nth(1).is_some_and(|c| c.is_ascii_uppercase()) => {
                "idt".into()
            }
            o if o.len() == 2 => "size".into(),
            _ => "app".into(),
        };
        err(&key, e.reason)
    })?;
    let direction = s("direction")?
        .map(|v| parse_direction("direction", &v))
        .transpose()?;
    let payload = s("payload")?
        .map(|v| Payload::parse("payload", &v))
        .transpose()?;
    if payload.is_some()
        && matches!(
            direction,
            Some(FlowDirection::Reverse | FlowDirection::Bidir)
        )
    {
        // The receiver sends reverse flows with the default pattern.
        return Err(err(
            "payload",
            "applies to forward flows only (the receiver sends reverse flows with the default pattern)",
        ));
    }
    Ok(ScriptFlow {
        line: 0,
        spec,
        transport: s("transport")?
            .map(|v| parse_transport("transport", &v))
            .transpose()?,
        dest: s("dest")?,
        port: int("port")?
            .map(|v| sockopts::parse_data_port(&v.to_string()).map_err(|e| err("port", e)))
            .transpose()?,
        duration_ms: int("duration_ms")?,
        packets: int("packets")?,
        kbytes: int("kbytes")?,
        meter: s("meter")?.map(|v| parse_meter("meter", &v)).transpose()?,
        opts: toml_opts(t)?,
        direction,
        payload,
    })
}

/// `tos`, `dscp` (name or number), `ttl`, `flow_label` of a `[[flow]]`.
fn toml_opts(t: &toml::Table) -> Result<SockOpts, ScriptError> {
    // Numbers or strings ("ef", "0xb8") alike, through the CLI's parsers.
    let text = |k: &str| -> Result<Option<String>, ScriptError> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(v)) => Ok(Some(v.clone())),
            Some(toml::Value::Integer(v)) => Ok(Some(v.to_string())),
            Some(_) => Err(err(k, "must be a number or a string")),
        }
    };
    let get = |k: &str, p: fn(&str) -> Result<u32, String>| -> Result<Option<u32>, ScriptError> {
        text(k)?.map(|v| p(&v).map_err(|e| err(k, e))).transpose()
    };
    if t.contains_key("tos") && t.contains_key("dscp") {
        return Err(err("dscp", "give tos or dscp, not both"));
    }
    let tos = get("tos", |v| sockopts::parse_tos(v).map(u32::from))?;
    let dscp = get("dscp", |v| sockopts::parse_dscp(v).map(u32::from))?;
    Ok(SockOpts {
        tos: tos.or(dscp.map(|d| d << 2)).map(|v| v as u8),
        ttl: get("ttl", |v| sockopts::parse_ttl(v).map(u32::from))?.map(|v| v as u8),
        flow_label: get("flow_label", sockopts::parse_flow_label)?,
        cc: text("cc")?
            .map(|v| sockopts::parse_cc(&v).map_err(|e| err("cc", e)))
            .transpose()?,
        window: get("window", sockopts::parse_window)?,
        mss: get("mss", sockopts::parse_mss)?,
        nagle: match t.get("nagle") {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(*b),
            Some(_) => return Err(err("nagle", "must be true or false")),
        },
        zerocopy: match t.get("zerocopy") {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(*b),
            Some(_) => return Err(err("zerocopy", "must be true or false")),
        },
        bind: text("bind")?
            .map(|v| sockopts::parse_addr(&v).map_err(|e| err("bind", e)))
            .transpose()?,
        cport: text("cport")?
            .map(|v| sockopts::parse_cport(&v).map_err(|e| err("cport", e)))
            .transpose()?,
        bind_dev: text("bind_dev")?
            .map(|v| sockopts::parse_dev(&v).map_err(|e| err("bind_dev", e)))
            .transpose()?,
        // The command line's --gso applies to every line (`over`).
        gso: None,
        data_port: None,
    })
}

/// `"exponential 100"`, `"E 100"`, `"file gaps.txt"`: a model in words.
/// For IDTs the D-ITG meaning of the letter applies (C/U/E take rates in pps,
/// O a Poisson mean rate); for sizes, bytes.
fn model_words(v: &str, idt: bool) -> Result<(Option<IdtModel>, Option<SizeModel>), ScriptError> {
    let toks: Vec<&str> = v.split_whitespace().collect();
    let Some(name) = toks.first() else {
        return Err(err("", "empty model"));
    };
    if name.eq_ignore_ascii_case("file") {
        let path = toks.get(1).ok_or_else(|| err("", "file needs a path"))?;
        let d = Dist::from_file(if idt { "-Ft" } else { "-Fs" }, path)?;
        return Ok(if idt {
            (Some(IdtModel::Random(d)), None)
        } else {
            (None, Some(SizeModel::Random(d)))
        });
    }
    let letter = dist_letter(name).ok_or_else(|| {
        err(
            "",
            format!("unknown distribution {name:?}; constant uniform exponential normal poisson pareto cauchy gamma weibull file"),
        )
    })?;
    let mut p = Vec::new();
    for t in &toks[1..] {
        p.push(
            t.parse::<f64>()
                .map_err(|_| err("", format!("not a number: {t:?}")))?,
        );
    }
    let e = |e: ModelError| {
        let ModelError::BadParam { flag, reason } = e;
        err("", format!("{reason} (D-ITG {flag})"))
    };
    Ok(if idt {
        (Some(IdtModel::from_ditg(letter, &p).map_err(e)?), None)
    } else {
        (
            None,
            Some(SizeModel::from_ditg(letter.to_ascii_lowercase(), &p).map_err(e)?),
        )
    })
}

/// Parses wirebench's native script: a TOML list of `[[flow]]` tables.
pub fn parse_toml(text: &str, origin: &str) -> Result<Vec<ScriptFlow>, ScriptError> {
    let at = |line: usize, e: ScriptError| ScriptError {
        origin: origin.to_string(),
        line,
        ..e
    };
    let doc: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(0);
        // The toml crate's message may span lines, or be empty (a lone
        // "\r"): one line, never blank.
        let msg = e.message().trim().replace('\n', "; ");
        let msg = if msg.is_empty() {
            "not valid TOML".to_string()
        } else {
            msg
        };
        at(line, err("", msg))
    })?;
    for k in doc.keys() {
        if k != "flow" {
            let line = text
                .lines()
                .position(|l| {
                    l.trim_start().starts_with(k.as_str()) || l.contains(&format!("[{k}"))
                })
                .map(|p| p + 1)
                .unwrap_or(0);
            return Err(at(
                line,
                err(k, "unknown key; a script is a list of [[flow]] tables"),
            ));
        }
    }
    let Some(toml::Value::Array(list)) = doc.get("flow") else {
        return Err(at(0, err("flow", "no [[flow]] tables in script")));
    };
    let headers = flow_headers(text);
    let mut out = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let header = headers.get(i).copied().unwrap_or(0);
        let toml::Value::Table(t) = v else {
            return Err(at(header, err("flow", "must be a table ([[flow]])")));
        };
        match toml_flow(t) {
            Ok(mut f) => {
                f.line = header;
                out.push(f);
            }
            Err(e) => {
                let line = if e.option.is_empty() {
                    header
                } else {
                    key_line(text, header, &e.option)
                };
                return Err(at(line, e));
            }
        }
    }
    if out.is_empty() {
        return Err(at(0, err("flow", "no [[flow]] tables in script")));
    }
    Ok(out)
}

/// Reads a script: `.toml` files as the native form, anything else as a
/// D-ITG script.
pub fn load(path: &Path) -> Result<Vec<ScriptFlow>, ScriptError> {
    let origin = path.display().to_string();
    let text = wirebench_input::read_text(path).map_err(|e| ScriptError {
        origin: origin.clone(),
        line: 0,
        option: String::new(),
        reason: e.reason(),
    })?;
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    {
        parse_toml(&text, &origin)
    } else {
        parse_ditg(&text, &origin)
    }
}
