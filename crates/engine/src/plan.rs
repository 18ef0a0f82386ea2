//! What a session is asked to do: the destination, the meter, and a list of
//! flows, each with its own traffic model, transport, stop condition and
//! seed. The CLI (`--flows N`, `--script FILE`) and the campaign layer build
//! one of these and hand it to [`crate::send::run`].

use crate::EngineError;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use wirebench_model::FlowSpec;
use wirebench_stats::SockOpts;
use wirebench_wire::{Direction, MeterMode, Transport};

/// When a flow stops generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Packets scheduled before `ms` after the flow's start are generated.
    DurationMs(u64),
    /// Exactly this many packets are generated (sent + not_sent).
    Packets(u64),
    /// Exactly `n × 1024` payload bytes are generated (D-ITG's `-k`); the last
    /// packet is shortened to hit the total.
    KBytes(u64),
}

/// Address family preference (`-4`/`-6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    #[default]
    /// Whatever the name resolves to first.
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

#[derive(Debug, Clone)]
/// One flow of a session.
pub struct FlowPlan {
    /// Its traffic model: departures, sizes, payload.
    pub spec: FlowSpec,
    /// UDP, TCP or ICMP echo (`-T`).
    pub transport: Transport,
    /// When it stops generating.
    pub stop: Stop,
    /// Seed of the model's draws.
    pub seed: u64,
    /// Socket options of this flow (marking); the default changes nothing.
    pub opts: SockOpts,
    /// Forward (we send) or reverse (`-R`: the receiver sends this model
    /// to us and we measure it; crate::reverse).
    pub direction: Direction,
    /// This flow's meter (a script line's `-m`/`meter`); None: the
    /// session's. Only rtt flows are reflected.
    pub meter: Option<MeterMode>,
}

impl FlowPlan {
    /// What the flow asks for, as the result document states it (the
    /// start phase is the pacer's to fill in).
    pub fn requested(&self) -> crate::result::Requested {
        let f = self;
        crate::result::Requested {
            rate_pps: f.spec.nominal_rate_pps(),
            payload_bytes: f.spec.nominal_payload_bytes(),
            model: f.spec.describe(),
            stop: match f.stop {
                Stop::DurationMs(ms) => format!("duration {ms} ms"),
                Stop::Packets(n) => format!("packets {n}"),
                Stop::KBytes(k) => format!("kbytes {k}"),
            },
            seed: f.seed,
            start_phase_s: 0.0,
            payload: (f.spec.payload != wirebench_model::Payload::Pattern)
                .then(|| f.spec.payload.label()),
        }
    }

    /// The meter this flow is measured with in session `plan`.
    pub fn meter_in(&self, plan: &SessionPlan) -> MeterMode {
        self.meter.unwrap_or(plan.meter)
    }
}

#[derive(Debug, Clone)]
/// What one session with one receiver is asked to do: plain data, checked
/// once by [`SessionPlan::check`].
pub struct SessionPlan {
    /// Host name or address of the receiver.
    pub dest: String,
    /// Its control port.
    pub port: u16,
    /// Address family preference.
    pub family: Family,
    /// The session's meter (`-m`); a flow may set its own.
    pub meter: MeterMode,
    /// The flows, in flow id order (ids from 1).
    pub flows: Vec<FlowPlan>,
    /// How long the receiver keeps listening after the last flow stopped.
    pub linger_ms: u64,
    /// Length of the per-interval series (None = no series).
    pub interval_ms: Option<u64>,
    /// The command line or campaign name, stored in the document.
    pub command: Option<String>,
    /// Playout (jitter) buffer depth VoIP flows are judged against, in ms:
    /// packets later than the fastest one plus this count as lost in the
    /// E-model.
    pub jitter_buffer_ms: u32,
    /// Write a per-packet log of what was sent here (`-l`, docs/logs.md).
    pub log: Option<std::path::PathBuf>,
    /// Ask the receiver to log this session's packets under this file name
    /// in its log directory (ITGSend's `-x`; `Hello.log_name`).
    pub remote_log: Option<String>,
    /// Pre-shared key: authenticate to the receiver, and require it to
    /// prove the same key (docs/security.md).
    pub key: Option<wirebench_wire::auth::Key>,
    /// `--auth probes`: every probe (and reflection) carries a MAC under a
    /// key derived from the handshake; needs `key`.
    pub auth_probes: bool,
    /// Which threads pace the paced one-way UDP flows.
    pub pacing: Pacing,
    /// Where each flow's schedule starts within its first mean gap.
    pub phases: Phases,
    /// The path's bottleneck link rate in bit/s on the wire, when known
    /// (`--link-rate`): the result then carries the run's physical bound
    /// and flags throughput above it (`total.above_bound`).
    pub link_rate_bps: Option<u64>,
    /// Whether the session's flow may leave by the AF_XDP path (Linux;
    /// docs/engine.md, "AF_XDP path").
    pub xdp: XdpUse,
    /// Whether the XDP path's sender gives its veth a queue for the
    /// session (docs/engine.md, "Sending queue").
    pub xdp_txq: TxqUse,
    /// How the XDP path's sender hands frames over (docs/engine.md, "Live
    /// frames").
    pub xdp_tx: XdpTx,
}

/// Whether and where a session uses the AF_XDP path (Linux, root; see
/// docs/engine.md, "AF_XDP path"): the sender's `SessionPlan::xdp` and
/// the receiver's `DaemonConfig::xdp`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum XdpUse {
    /// The socket path only (`--no-xdp`, and the library's default, so
    /// that an embedding program never loads XDP programs unasked).
    #[default]
    Off,
    /// Where the session allows it: the interface holding the session's
    /// own address (`send --xdp auto`; the CLI receiver's default, which
    /// acts only when asked). A receiver takes it only for
    /// senders that ask (`Hello.xdp`) and never on a loopback device,
    /// whose one queue the sender's socket needs.
    Auto,
    /// This interface (`--xdp IFACE`); a receiver serves every session it
    /// can by it, asked or not.
    Iface(String),
}

/// Whether the AF_XDP receiver switches its interface to threaded NAPI
/// while a session holds it (Linux; docs/engine.md, "Threaded NAPI").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NapiUse {
    /// Never (the library's default: an embedding program's interfaces
    /// keep their settings).
    #[default]
    Off,
    /// On a test-bed's own veth only, for sessions whose sender asked
    /// for the XDP path (it has a sending queue of the session's).
    Auto,
    /// On any interface the receiver listens on (`--xdp-napi on`).
    On,
}

/// How the AF_XDP receiver takes a session's frames (Linux;
/// docs/engine.md, "AF_XDP path", "Receive records").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XdpRx {
    /// Records where the session allows it (probes without MACs), else
    /// the rings.
    #[default]
    Auto,
    /// Every frame through an AF_XDP receive ring, checked in user space.
    Ring,
    /// The XDP program writes each frame's receive record (time, probe
    /// header, IP and UDP headers) into a ring in a BPF map and drops the
    /// frame; sessions whose probes carry MACs still take the rings.
    Records,
}

/// Whether the AF_XDP sender gives its interface a root qdisc for the
/// session (Linux; docs/engine.md, "Sending queue"): a veth stops its
/// queue when the peer's ring is full only when it has one, and without
/// it drops the frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TxqUse {
    /// Never (the library's default: an embedding program's interfaces
    /// keep their settings).
    #[default]
    Keep,
    /// On a veth whose root is the kernel's default noqueue (`send`'s
    /// default).
    Auto,
}

/// How the XDP path's sender hands its frames to the interface (Linux;
/// docs/engine.md, "Live frames").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XdpTx {
    /// An AF_XDP socket's transmit ring (the library's default).
    #[default]
    Ring,
    /// Live frames (`BPF_PROG_TEST_RUN`) for a `--max` flood of one
    /// payload size without probe MACs, where the kernel and the
    /// interface allow it, else the ring, saying why (`send`'s default).
    Auto,
    /// Live frames, or the ring saying why not.
    Live,
}

/// A [`SessionPlan`] that passed [`SessionPlan::check`]: what
/// [`crate::send::run_checked`] and [`crate::run_many`] take, so nothing
/// downstream checks it again. Read-only: a change would need a new check.
#[derive(Debug, Clone)]
pub struct CheckedPlan(SessionPlan);

impl CheckedPlan {
    /// The plan with its sender log written to `log` instead: for a run
    /// with several receivers, each session's part of the one `-l` log
    /// ([`crate::run_many`]). Where the log goes is no part of the checks.
    pub(crate) fn with_log(mut self, log: std::path::PathBuf) -> CheckedPlan {
        self.0.log = Some(log);
        self
    }
}

impl std::ops::Deref for CheckedPlan {
    type Target = SessionPlan;
    fn deref(&self) -> &SessionPlan {
        &self.0
    }
}

/// What a run is handed besides its plan: handles into the running
/// program, which a plan (plain data: compared, stored, sent) does not
/// carry.
#[derive(Clone, Default)]
pub struct Hooks {
    /// When set (e.g. by a SIGINT handler), flows stop generating; the
    /// session still collects the receiver's report and the document is
    /// marked partial.
    pub cancel: Option<&'static AtomicBool>,
    /// With the plan's `interval_ms`: where the intervals the receiver
    /// streams during the run go (`--interval` lines, `--json-stream`).
    pub live: Option<crate::live::Live>,
    /// Set by [`crate::run_many`]: the sessions of one run with several
    /// receivers send `Start` together.
    pub(crate) together: Option<std::sync::Arc<crate::multi::Together>>,
}

/// A flow's largest payload against its transport: TCP records up to
/// [`wirebench_wire::MAX_TCP_RECORD`] (framed by the long length,
/// `FLAG_LONG`), held whole by a receiver that checks probe MACs only up
/// to [`wirebench_model::MAX_PAYLOAD`]; datagrams up to that too.
fn check_record_len(n: usize, f: &FlowPlan, auth_probes: bool) -> Result<(), EngineError> {
    use wirebench_model::MAX_PAYLOAD;
    let p = f.spec.max_payload();
    if p <= MAX_PAYLOAD {
        return Ok(());
    }
    let why = if f.transport != Transport::Tcp {
        format!(
            "{} carries at most {MAX_PAYLOAD} B per packet (payloads above that need -T tcp)",
            f.transport.as_str().to_uppercase()
        )
    } else if p > wirebench_wire::MAX_TCP_RECORD {
        format!(
            "TCP records are at most {} B",
            wirebench_wire::MAX_TCP_RECORD
        )
    } else if auth_probes {
        format!("with --auth probes TCP records are at most {MAX_PAYLOAD} B (the receiver holds a record whole to check its MAC)")
    } else {
        return Ok(());
    };
    Err(EngineError::BadPlan(format!("flow {n}: -c {p}: {why}")))
}

/// Who paces the paced one-way flows of a session: UDP flows share
/// pacers, TCP flows writers (`--max` and RTT-meter flows have threads of
/// their own, or, bulk TCP, one writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pacing {
    /// A thread per flow while they are fewer than the CPUs, else
    /// CPUs − 1 shared UDP pacer threads (at least one) and one TCP writer.
    #[default]
    Auto,
    /// A thread per flow however many there are (to compare with).
    PerFlow,
    /// This many shared UDP pacers and TCP writers (at least one, at most
    /// one per flow).
    Shared(usize),
}

/// Where the flows of a session start their schedules (docs/engine.md,
/// Pacing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phases {
    /// Flow i of n starts i/n of its mean gap after t_0, so that n flows
    /// of one rate are due one after another, not all at the same instant.
    #[default]
    Spread,
    /// Every flow starts at t_0 (all due together; to compare with).
    Aligned,
}

/// Highest mean rate of a paced flow. Above what one core sends (a few
/// Mpps), the pacer spends its time counting hopelessly late packets as
/// not sent, about 45 ns each: at 10^8 packets/s a 3 s run took 16 s, at
/// `-C 1e12` 40 s. At this bound the counting keeps up with the schedule,
/// so a run ends on time; `--max` is the way to send as fast as possible.
pub const MAX_PACED_PPS: u64 = 10_000_000;

/// A paced flow's rate must be one a pacer can follow ([`MAX_PACED_PPS`]):
/// beyond it a run overruns its duration (`-C 1e12`) or draws hundreds of
/// millions of packets in a moment (`-N 0 0`: every gap 0).
pub(crate) fn check_rate(flow: usize, spec: &FlowSpec) -> Result<(), EngineError> {
    if spec.is_max() {
        return Ok(());
    }
    if let Some(ms) = spec.idt.typical_ms() {
        if ms.is_nan() || ms <= 0.0 {
            return Err(EngineError::BadPlan(format!(
                "flow {flow}: inter-departure time: mean {ms} ms; it must be above 0 (use --max for back-to-back)"
            )));
        }
    }
    if let Some(pps) = spec.nominal_rate_pps() {
        if pps > MAX_PACED_PPS as f64 {
            return Err(EngineError::BadPlan(format!(
                "flow {flow}: rate: {pps:.0} packets/s is above the {MAX_PACED_PPS} packets/s one flow can be paced at (-C, IDT; use --max for as fast as possible)"
            )));
        }
    }
    Ok(())
}

/// A common fixed playout delay for 20 ms voice packets.
pub const DEFAULT_JITTER_BUFFER_MS: u32 = 60;
/// Deepest playout buffer accepted (ITU-T G.114 calls > 400 ms one-way
/// unacceptable for most uses; 10 s is far past any real buffer).
pub const MAX_JITTER_BUFFER_MS: u32 = 10_000;

/// Longest linger accepted: the receiver holds sockets that long.
pub const MAX_LINGER_MS: u64 = 60_000;
/// Most flows per session: the receiver's limit.
pub use wirebench_wire::limits::MAX_FLOWS;

impl SessionPlan {
    /// A session to `dest` with `flows` and every other setting at its default.
    pub fn new(dest: impl Into<String>, flows: Vec<FlowPlan>) -> Self {
        SessionPlan {
            dest: dest.into(),
            port: crate::DEFAULT_PORT,
            family: Family::Any,
            meter: MeterMode::Owd,
            flows,
            linger_ms: 2000,
            interval_ms: None,
            command: None,
            jitter_buffer_ms: DEFAULT_JITTER_BUFFER_MS,
            log: None,
            remote_log: None,
            key: None,
            auth_probes: false,
            pacing: Pacing::Auto,
            phases: Phases::Spread,
            link_rate_bps: None,
            xdp: XdpUse::Off,
            xdp_txq: TxqUse::Keep,
            xdp_tx: XdpTx::Ring,
        }
    }

    /// Checks everything that can be checked without the network, once:
    /// what the sender runs is the [`CheckedPlan`] this returns.
    pub fn check(self) -> Result<CheckedPlan, EngineError> {
        self.validate()?;
        Ok(CheckedPlan(self))
    }

    fn validate(&self) -> Result<(), EngineError> {
        if self.flows.is_empty() {
            return Err(EngineError::BadPlan("the session has no flows".into()));
        }
        if self.flows.len() > MAX_FLOWS {
            return Err(EngineError::BadPlan(format!(
                "--flows: at most {MAX_FLOWS} flows per session, got {}",
                self.flows.len()
            )));
        }
        crate::transport::icmp::check(self)?;
        if let Some(name) = &self.remote_log {
            wirebench_wire::limits::check_log_name(name)
                .map_err(|e| EngineError::BadPlan(format!("-x: {e}")))?;
        }
        if self.auth_probes && self.key.is_none() {
            return Err(EngineError::BadPlan(
                "--auth probes: needs the pre-shared key (--key-file or WIREBENCH_KEY)".into(),
            ));
        }
        if self.linger_ms > MAX_LINGER_MS {
            return Err(EngineError::BadPlan(format!(
                "--linger: at most {MAX_LINGER_MS} ms, got {}",
                self.linger_ms
            )));
        }
        if self.jitter_buffer_ms > MAX_JITTER_BUFFER_MS {
            return Err(EngineError::BadPlan(format!(
                "--jitter-buffer: at most {MAX_JITTER_BUFFER_MS} ms, got {}",
                self.jitter_buffer_ms
            )));
        }
        if let Some(ms) = self.interval_ms {
            use wirebench_wire::limits::{self, MAX_INTERVAL_MS, MIN_INTERVAL_MS};
            limits::interval_ns(ms).map_err(|_| {
                EngineError::BadPlan(format!(
                    "--interval: {ms} ms is out of range {MIN_INTERVAL_MS}..={MAX_INTERVAL_MS} ms"
                ))
            })?;
            // The receiver keeps at most this many buckets per flow; say so
            // now rather than return a series cut short.
            let per_flow = limits::intervals_per_flow(self.flows.len()) as u64;
            for f in &self.flows {
                if let Stop::DurationMs(d) = f.stop {
                    if d / ms > per_flow {
                        return Err(EngineError::BadPlan(format!(
                            "--interval: {ms} ms over {d} ms is {} intervals per flow; \
                             at most {per_flow} with {} flow(s)",
                            d / ms,
                            self.flows.len()
                        )));
                    }
                }
            }
        }
        for (i, f) in self.flows.iter().enumerate() {
            f.spec
                .validate()
                .map_err(|e| EngineError::BadPlan(format!("flow {}: {e}", i + 1)))?;
            check_rate(i + 1, &f.spec)?;
            check_record_len(i + 1, f, self.auth_probes)?;
            if f.direction == Direction::Reverse {
                // The receiver paces a reverse flow on sockets of its own;
                // our socket options and the round-trip meter (reflection
                // by the receiver) do not reach it.
                if f.meter_in(self) == MeterMode::Rtt {
                    return Err(EngineError::BadPlan(format!(
                        "-R/--bidir: flow {} is reverse; the rtt meter (-m rtt) measures forward flows only",
                        i + 1
                    )));
                }
                if !f.opts.is_default() {
                    return Err(EngineError::BadPlan(format!(
                        "-R/--bidir: flow {} is reverse; socket options and binding (-b/--dscp, -f, --cc, --window, --zerocopy, --gso, -sa/-sp/-rp, --bind-dev, ...) apply to forward flows only",
                        i + 1
                    )));
                }
                // The receiver fills a reverse flow's packets itself, with
                // the default pattern: a payload asked for here would be
                // silently not what travels.
                if f.spec.payload != wirebench_model::Payload::Pattern {
                    return Err(EngineError::BadPlan(format!(
                        "-R/--bidir: flow {} is reverse; --payload applies to forward flows only (the receiver sends reverse flows with the default pattern)",
                        i + 1
                    )));
                }
            }
            // One control connection per session, from the flows' source
            // address and interface: they must agree.
            if let Some(first) = self.flows.first() {
                if f.opts.bind != first.opts.bind || f.opts.bind_dev != first.opts.bind_dev {
                    return Err(EngineError::BadPlan(format!(
                        "-sa/--bind, --bind-dev: flow {} differs from flow 1; the flows of one session leave from one address and interface",
                        i + 1
                    )));
                }
            }
            if let Some(dev) = &f.opts.bind_dev {
                crate::sockopt::check_dev(dev)?;
            }
            let caps = crate::transport::caps(f.transport);
            if !caps.via_receiver && f.opts.data_port.is_some() {
                return Err(EngineError::BadPlan(format!(
                    "-rp/--data-port: flow {} is {}; it has no receiver data port",
                    i + 1,
                    f.transport.as_str().to_uppercase()
                )));
            }
            if !caps.tcp_options {
                if let Some(opt) = f.opts.tcp_only() {
                    return Err(EngineError::BadPlan(format!(
                        "{opt}: flow {} is {}; the option applies to TCP flows (-T tcp)",
                        i + 1,
                        f.transport.as_str().to_uppercase()
                    )));
                }
            }
            // Reverse flows were refused above with every socket option.
            if f.opts.zerocopy == Some(true) && !cfg!(target_os = "linux") {
                return Err(EngineError::BadPlan(
                    "--zerocopy: zero-copy sends (MSG_ZEROCOPY) are a Linux kernel feature; this system has none".into(),
                ));
            }
            if f.opts.gso == Some(true) {
                check_gso(i + 1, f)?;
            }
            match f.stop {
                Stop::DurationMs(0) => {
                    return Err(EngineError::BadPlan("-t: duration must be > 0 ms".into()))
                }
                Stop::Packets(0) => {
                    return Err(EngineError::BadPlan("-z: packet count must be > 0".into()))
                }
                Stop::KBytes(0) => {
                    return Err(EngineError::BadPlan("-k: kilobytes must be > 0".into()))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Resolves the destination honouring the family preference.
    pub fn resolve(&self) -> Result<SocketAddr, EngineError> {
        let addrs: Vec<SocketAddr> = (self.dest.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| EngineError::Resolve(format!("{}: {e}", self.dest)))?
            .collect();
        let pick = addrs.into_iter().find(|a| match self.family {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        });
        pick.ok_or_else(|| {
            EngineError::Resolve(format!(
                "{}: no {} address",
                self.dest,
                match self.family {
                    Family::V4 => "IPv4",
                    Family::V6 => "IPv6",
                    Family::Any => "usable",
                }
            ))
        })
    }
}

/// Clips a drawn size so that a byte budget is met exactly: never exceed
/// the remaining bytes, and never leave a remainder too small to carry a
/// probe header.
pub fn clip_to_budget(size: u32, remaining: u64, min: u32) -> u32 {
    let size64 = size as u64;
    if remaining <= size64 {
        return remaining as u32;
    }
    let leftover = remaining - size64;
    if leftover < min as u64 {
        let shrunk = remaining - min as u64;
        if shrunk >= min as u64 {
            return shrunk as u32;
        }
        return remaining.min(u32::MAX as u64) as u32;
    }
    size
}

/// `--gso on` for flow `n`: UDP, on Linux, with probes two of which fit
/// one segmented send.
fn check_gso(n: usize, f: &FlowPlan) -> Result<(), EngineError> {
    if f.transport != Transport::Udp {
        return Err(EngineError::BadPlan(format!(
            "--gso on: flow {n} is {}; segmentation offload applies to UDP flows (-T udp)",
            f.transport.as_str().to_uppercase()
        )));
    }
    if !crate::net::UDP_OFFLOAD {
        return Err(EngineError::BadPlan(
            "--gso on: UDP segmentation offload (UDP_SEGMENT) is a Linux kernel feature; this system has none".into(),
        ));
    }
    let most = f.spec.max_payload() as usize;
    let limit = crate::net::GSO_MAX_BYTES / 2;
    if most > limit {
        return Err(EngineError::BadPlan(format!(
            "--gso on: flow {n} sends datagrams of up to {most} B; one segmented send carries at most {} B, so no two of them fit: use -c {limit} or less, or --gso auto",
            crate::net::GSO_MAX_BYTES
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_met_exactly() {
        for size in [24u32, 25, 100, 512, 1000, 1472] {
            for kb in [1u64, 2, 3, 7] {
                let mut rem = kb * 1024;
                let mut n = 0;
                while rem > 0 {
                    let s = clip_to_budget(size, rem, 24);
                    assert!(s >= 24 || s as u64 == rem, "size {size} kb {kb}");
                    assert!(s <= size.max(47));
                    rem -= s as u64;
                    n += 1;
                    assert!(n < 100_000);
                }
            }
        }
    }

    #[test]
    fn validation_names_the_flag() {
        let spec = FlowSpec::constant(10.0, 100).unwrap();
        let mut p = SessionPlan::new(
            "127.0.0.1",
            vec![FlowPlan {
                spec,
                transport: Transport::Udp,
                stop: Stop::Packets(0),
                seed: 1,
                opts: SockOpts::default(),
                direction: Direction::Forward,
                meter: None,
            }],
        );
        assert!(p.clone().check().unwrap_err().to_string().contains("-z"));
        p.flows[0].stop = Stop::Packets(1);
        p.linger_ms = 10 * MAX_LINGER_MS;
        assert!(p
            .clone()
            .check()
            .unwrap_err()
            .to_string()
            .contains("--linger"));
    }
}
