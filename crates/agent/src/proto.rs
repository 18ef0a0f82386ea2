//! The agent protocol: one JSON object per line in each direction over the
//! agent's stdin/stdout (whatever carries them: a pipe, `ip netns exec`, an
//! SSH channel). The controller sends [`Request`]s, the agent answers each
//! with one [`Response`] carrying the same `id`, in order.
//!
//! JSON lines for the same reasons as the send/recv control protocol: they
//! can be typed by hand (`wirebench agent --stdio` in a terminal) and added
//! fields are ignored by older peers. The `version` of `hello` is checked
//! first by both sides, so a controller and an agent of different releases
//! fail at once with both versions named instead of misreading each other.
//!
//! Additions an older peer can ignore do not bump the version: they bump
//! the `revision`, which both sides also send at `hello` (absent: 0), and a
//! feature is used only when the other side's revision has it. Revision 1:
//! a sender started with `stream` relays its interval lines in the `wait`
//! and `stop` replies (`stream`), so the controller shows live figures
//! while an agent-driven run goes on; with an older agent the run works the
//! same, without them. Revision 2: `hello` names the management interfaces
//! (the ones carrying the agent's own SSH connection) and what the agent
//! restored from a dead predecessor's journal; `route_ifaces` says which
//! interface leads to each data address. Revision 3: `hello` names the
//! controller (host, pid, campaign), which the node's lab lock records;
//! a `cpu` sample lists the agent itself and children that ended since
//! the session's last samples, so every wirebench process of the node is
//! in its CPU figures.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use wirebench_testbed::IfaceCounters;

/// Version of this protocol; bumped on any incompatible change.
pub const AGENT_PROTOCOL_VERSION: u32 = 2;
/// Additions within [`AGENT_PROTOCOL_VERSION`] (see the module notes).
pub const AGENT_PROTOCOL_REVISION: u32 = 3;
/// First revision whose agents relay a sender's interval lines.
pub const REVISION_STREAM: u32 = 1;
/// First revision whose agents name their management interfaces at
/// `hello`, answer `route_ifaces`, keep a journal on disk and report what
/// they recovered from it.
pub const REVISION_LAB: u32 = 2;
/// First revision whose controllers name themselves at `hello` and read
/// the agent's own entry ([`Role::Agent`]) and ended children in a `cpu`
/// sample.
pub const REVISION_HOLDER: u32 = 3;
/// Interval lines an agent holds for the controller between two `wait`s;
/// beyond that the oldest are dropped (a stalled controller must not make
/// the agent grow).
pub const MAX_STREAM_BUFFER: usize = 4096;
/// A line longer than this is refused (a stray binary on the stream must
/// not make either side buffer without bound).
pub const MAX_LINE: usize = 8 << 20;

/// What the campaign lets this agent change. Anything not listed is only
/// observed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allow {
    /// Interfaces whose MTU may be set (`*`: any).
    #[serde(default)]
    pub mtu: Vec<String>,
    /// Interfaces whose offloads may be switched.
    #[serde(default)]
    pub offloads: Vec<String>,
    /// Interfaces that may be shaped to a link rate (a tbf root qdisc).
    #[serde(default)]
    pub rate: Vec<String>,
}

/// Which wirebench subcommand a child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `wirebench recv ARGS`: runs until stopped; the agent waits until it
    /// listens on its control port.
    Receiver,
    /// `wirebench send ARGS --json=FILE`: its result document comes back.
    Sender,
    /// The agent itself (revision 3, only in `cpu` samples; never started).
    Agent,
}

/// Who drives an agent (revision 3): recorded in the node's lab lock, so
/// a second controller is told whose campaign holds the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controller {
    /// The controller's host name.
    pub host: String,
    /// Its process id there.
    pub pid: u32,
    /// The campaign's name.
    pub campaign: String,
}

/// One request line from the controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the controller; the response carries it back.
    pub id: u64,
    /// What to do.
    #[serde(flatten)]
    pub op: Op,
}

/// The operations, tagged by `op` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Must come first. The agent refuses any other version.
    Hello {
        /// The controller's [`AGENT_PROTOCOL_VERSION`].
        version: u32,
        /// What the campaign lets this agent change (the node's own
        /// list can narrow it further).
        #[serde(default)]
        allow: Allow,
        /// The controller's [`AGENT_PROTOCOL_REVISION`] (absent: 0).
        #[serde(default, skip_serializing_if = "is_zero")]
        revision: u32,
        /// Revision 3: who the controller is (for the lab lock).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        controller: Option<Controller>,
    },
    /// The host's [`HostMeta`].
    Metadata,
    /// A [`CpuSample`] of the host and the agent's children.
    Cpu,
    /// Every interface's counters and qdisc statistics.
    Counters,
    /// Sets an interface's MTU (68..=65535), recorded for restoring.
    SetMtu {
        /// Interface name.
        iface: String,
        /// The new MTU in bytes.
        mtu: u32,
    },
    /// Switches segmentation and receive offloads (tso, gso, gro) on or
    /// off together.
    SetOffloads {
        /// Interface name.
        iface: String,
        /// On or off.
        on: bool,
    },
    /// Shapes the interface to `rate_bps` on the wire (a tbf root qdisc
    /// like the test-bed's links); None puts its own qdisc back.
    SetRate {
        /// Interface name.
        iface: String,
        /// Bits per second on the wire; None: no shaping.
        rate_bps: Option<u64>,
    },
    /// Puts back everything this session changed.
    Restore,
    /// Starts a receiver or sender; its file arguments must name files
    /// inside the agent's work directory.
    Start {
        /// Which subcommand.
        role: Role,
        /// Its arguments (the agent adds `--json` for a sender).
        args: Vec<String>,
        /// Receivers: the control port to wait for.
        #[serde(default)]
        port: Option<u16>,
        /// Senders (revision 1): run with `--json-stream` and relay its
        /// interval lines in the `wait`/`stop` replies.
        #[serde(default, skip_serializing_if = "is_false")]
        stream: bool,
    },
    /// Waits up to `timeout_ms` for a child to end.
    Wait {
        /// The child, as `start` named it.
        handle: u32,
        /// How long to wait at most.
        timeout_ms: u64,
    },
    /// SIGTERM, then SIGKILL after a grace period.
    Stop {
        /// The child, as `start` named it.
        handle: u32,
    },
    /// Opens a UDP socket that acknowledges path-MTU probes.
    PmtuListen {
        /// The local address to bind.
        bind: IpAddr,
    },
    /// Largest datagram that reaches `dest:port` with don't-fragment set.
    PmtuProbe {
        /// The peer agent's probe socket address.
        dest: IpAddr,
        /// Its port, from `pmtu_listen`.
        port: u16,
    },
    /// Closes a socket opened by `pmtu_listen`.
    PmtuClose {
        /// Its port.
        port: u16,
    },
    /// Revision 2: the interface the route to each address leaves by.
    RouteIfaces {
        /// The addresses to look up.
        dests: Vec<IpAddr>,
    },
    /// Restore, stop the children and exit.
    Bye,
}

/// One answer line from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's `id`.
    pub id: u64,
    /// The answer.
    #[serde(flatten)]
    pub reply: Reply,
}

/// The answers, tagged by `reply` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// To `hello`: who the agent is.
    Hello(HelloInfo),
    /// To `metadata`.
    Metadata(Box<HostMeta>),
    /// To `cpu`.
    Cpu(CpuSample),
    /// To `counters`: interface name to its counters.
    Counters {
        /// Every interface but loopback.
        ifaces: BTreeMap<String, IfaceCounters>,
    },
    /// The change was made (or nothing needed doing).
    Done,
    /// What `restore` (or the end of a session) put back.
    Restored {
        /// One line per interface (`restored eth1 mtu 1500`, or `FAILED
        /// to restore: ...`).
        actions: Vec<String>,
    },
    /// To `start`.
    Started {
        /// The agent's name for the child.
        handle: u32,
        /// Its process id on the node.
        pid: u32,
    },
    /// To `wait` and `stop`.
    Process(ProcessState),
    /// To `pmtu_listen`: the port the probes go to.
    PmtuPort {
        /// UDP port.
        port: u16,
    },
    /// Path MTU in bytes (IP packet); None when even a small probe got no
    /// answer.
    Pmtu {
        /// Bytes.
        mtu: Option<u32>,
    },
    /// Address → outgoing interface; addresses without a route are absent.
    RouteIfaces {
        /// Address to interface name.
        ifaces: BTreeMap<IpAddr, String>,
    },
    /// The request was refused or failed; nothing was half-done.
    Error {
        /// Why, for a person.
        message: String,
    },
}

/// The agent's answer to `hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloInfo {
    /// The agent's [`AGENT_PROTOCOL_VERSION`].
    pub version: u32,
    /// wirebench release of the agent.
    pub tool_version: String,
    /// The node's host name.
    pub hostname: String,
    /// The agent's process id.
    pub pid: u32,
    /// Whether the agent may change links (root or CAP_NET_ADMIN).
    pub net_admin: bool,
    /// The agent's [`AGENT_PROTOCOL_REVISION`] (absent: 0, an agent from
    /// before revisions).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: u32,
    /// Revision 2: interfaces carrying the agent's own SSH connection (the
    /// management path). The agent refuses to change them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mgmt: Vec<String>,
    /// Revision 2: what this agent put back from the journal of one that
    /// died without restoring (`restored eth0 mtu 1500`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovered: Vec<String>,
}

impl HelloInfo {
    /// The agent relays a streaming sender's interval lines.
    pub fn streams_intervals(&self) -> bool {
        self.revision >= REVISION_STREAM
    }
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// A child's state: still running (with the interval lines since the
/// last reply) or ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessState {
    /// The agent's name for the child.
    pub handle: u32,
    /// Not ended yet.
    pub running: bool,
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Signal that ended it, if any.
    pub signal: Option<i32>,
    /// Last part of its stderr.
    pub stderr: String,
    /// Senders: the `wirebench.result/1` document, when it wrote one.
    pub result: Option<serde_json::Value>,
    /// Streaming senders: the `--json-stream` interval objects
    /// (`{"event":"interval","data":{..}}`) printed since the last reply,
    /// oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream: Vec<serde_json::Value>,
    /// Interval lines dropped because the controller did not fetch them
    /// in time (more than [`MAX_STREAM_BUFFER`] waiting).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub stream_dropped: u64,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// One CPU's cumulative times in clock ticks (USER_HZ), from /proc/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoreTicks {
    /// Ordinary processes.
    pub user: u64,
    /// Processes of lowered priority.
    pub nice: u64,
    /// The kernel on behalf of processes.
    pub system: u64,
    /// Nothing to do.
    pub idle: u64,
    /// Idle while waiting for I/O.
    pub iowait: u64,
    /// Hardware interrupts.
    pub irq: u64,
    /// Software interrupts (most of packet processing).
    pub softirq: u64,
    /// Taken by the hypervisor for other guests.
    pub steal: u64,
}

impl CoreTicks {
    /// All fields added up.
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }

    /// Field-wise difference (saturating: a hot-plugged CPU reads 0).
    pub fn since(&self, b: &CoreTicks) -> CoreTicks {
        CoreTicks {
            user: self.user.saturating_sub(b.user),
            nice: self.nice.saturating_sub(b.nice),
            system: self.system.saturating_sub(b.system),
            idle: self.idle.saturating_sub(b.idle),
            iowait: self.iowait.saturating_sub(b.iowait),
            irq: self.irq.saturating_sub(b.irq),
            softirq: self.softirq.saturating_sub(b.softirq),
            steal: self.steal.saturating_sub(b.steal),
        }
    }
}

/// CPU time of one wirebench child of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcTicks {
    /// The agent's name for the child.
    pub handle: u32,
    /// Its process id.
    pub pid: u32,
    /// Receiver or sender.
    pub role: Role,
    /// User-mode ticks so far.
    pub user: u64,
    /// Kernel-mode ticks so far.
    pub system: u64,
    /// Revision 3: the child has ended; these are its final ticks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ended: bool,
}

/// Cumulative CPU counters; the controller differences two samples.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSample {
    /// Agent's monotonic clock in ns, for the interval between samples.
    pub mono_ns: u64,
    /// Clock ticks per second of the tick fields.
    pub hz: u64,
    /// All CPUs together.
    pub total: CoreTicks,
    /// Each CPU.
    pub cores: Vec<CoreTicks>,
    /// The agent's children (and, revision 3, the agent itself and
    /// children that ended lately, with their final ticks).
    pub procs: Vec<ProcTicks>,
}

/// Shares of one CPU (0..1 each) over an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuShare {
    /// User and nice.
    pub user: f64,
    /// Kernel on behalf of processes.
    pub system: f64,
    /// Hardware interrupts.
    pub irq: f64,
    /// Software interrupts.
    pub softirq: f64,
    /// Idle and I/O wait.
    pub idle: f64,
}

impl CpuShare {
    /// The shares of a tick difference (all 0 when no time passed).
    pub fn of(d: &CoreTicks) -> CpuShare {
        let t = d.total();
        if t == 0 {
            return CpuShare::default();
        }
        let f = |v: u64| v as f64 / t as f64;
        CpuShare {
            user: f(d.user + d.nice),
            system: f(d.system),
            irq: f(d.irq),
            softirq: f(d.softirq),
            idle: f(d.idle + d.iowait),
        }
    }

    /// Everything but idle.
    pub fn busy(&self) -> f64 {
        1.0 - self.idle
    }
}

/// What happened on a node's CPUs between two samples: per core and the
/// whole host as shares, and each wirebench child in cores (1.0 = one
/// core busy the whole interval).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuDelta {
    /// Length of the interval.
    pub seconds: f64,
    /// All CPUs together.
    pub host: CpuShare,
    /// Each CPU.
    pub cores: Vec<CpuShare>,
    /// Each child that existed at the end.
    pub procs: Vec<ProcShare>,
}

/// One child's CPU over an interval, in cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcShare {
    /// Its process id.
    pub pid: u32,
    /// Receiver or sender.
    pub role: Role,
    /// User-mode cores.
    pub user: f64,
    /// Kernel-mode cores.
    pub system: f64,
}

impl CpuSample {
    /// What happened between `before` and this sample.
    pub fn delta(&self, before: &CpuSample) -> CpuDelta {
        let seconds = self.mono_ns.saturating_sub(before.mono_ns) as f64 / 1e9;
        let cores = self
            .cores
            .iter()
            .enumerate()
            .map(|(i, c)| CpuShare::of(&c.since(&before.cores.get(i).copied().unwrap_or_default())))
            .collect();
        let hz = self.hz.max(1) as f64;
        let procs = self
            .procs
            .iter()
            .filter_map(|p| {
                let b = before.procs.iter().find(|b| b.pid == p.pid);
                // Ended before the interval began: none of its time is in it.
                if p.ended && b.is_some_and(|b| b.ended) {
                    return None;
                }
                let (bu, bs) = b.map(|b| (b.user, b.system)).unwrap_or((0, 0));
                (seconds > 0.0).then(|| ProcShare {
                    pid: p.pid,
                    role: p.role,
                    user: p.user.saturating_sub(bu) as f64 / hz / seconds,
                    system: p.system.saturating_sub(bs) as f64 / hz / seconds,
                })
            })
            .collect();
        CpuDelta {
            seconds,
            host: CpuShare::of(&self.total.since(&before.total)),
            cores,
            procs,
        }
    }
}

/// An interface as the agent's host sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceMeta {
    /// Interface name.
    pub name: String,
    /// MTU in bytes.
    pub mtu: u32,
    /// Administratively up.
    pub up: bool,
    /// Link-layer address.
    pub mac: Option<String>,
    /// `ADDRESS/PREFIX`, IPv4 and IPv6.
    pub addresses: Vec<String>,
    /// `ethtool -i`: driver, its version and the NIC firmware.
    pub driver: Option<String>,
    /// The driver's version.
    pub driver_version: Option<String>,
    /// The NIC's firmware version.
    pub firmware: Option<String>,
    /// Link speed in Mbit/s from sysfs, when the driver reports one.
    pub speed_mbit: Option<u64>,
    /// `ethtool -k`: feature → on/off (segmentation, receive and checksum
    /// offloads).
    pub offloads: BTreeMap<String, bool>,
}

/// Clock synchronisation of the host: what a one-way delay is worth there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSync {
    /// `chronyc tracking` summary, when chrony runs.
    pub chrony: Option<String>,
    /// systemd-timesyncd synchronised (None: not in use).
    pub timesyncd: Option<bool>,
    /// PTP hardware clocks present (/dev/ptp*).
    pub ptp_devices: Vec<String>,
    /// ptp4l / phc2sys running.
    pub ptp_daemons: Vec<String>,
}

/// Everything about a host a result is only comparable with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMeta {
    /// Host name.
    pub hostname: String,
    /// Distribution and release (`PRETTY_NAME` of /etc/os-release).
    pub os: String,
    /// Kernel release.
    pub kernel: String,
    /// CPU architecture.
    pub arch: String,
    /// CPU model name.
    pub cpu_model: String,
    /// CPUs available.
    pub cpus: u32,
    /// wirebench release of the agent.
    pub tool_version: String,
    /// Every interface of the agent's network namespace.
    pub interfaces: Vec<IfaceMeta>,
    /// The sysctls that change results (buffer sizes, congestion control,
    /// forwarding, MTU probing, busy polling), name → value.
    pub sysctls: BTreeMap<String, String>,
    /// How the clock is synchronised.
    pub clock: ClockSync,
    /// The agent may change links (root or CAP_NET_ADMIN).
    pub net_admin: bool,
}

impl Request {
    /// The request as one JSON line (no newline).
    pub fn line(&self) -> String {
        // Serialising these plain structs cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Response {
    /// The response as one JSON line (no newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                r#"{{"id":{},"reply":"error","message":"encoding the reply: {e}"}}"#,
                self.id
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_read_by_hand() {
        let r: Request = serde_json::from_str(r#"{"id":3,"op":"hello","version":1}"#).unwrap();
        assert_eq!(
            r.op,
            Op::Hello {
                version: 1,
                allow: Allow::default(),
                revision: 0,
                controller: None,
            }
        );
        let s = Request {
            id: 9,
            op: Op::SetMtu {
                iface: "eth1".into(),
                mtu: 9000,
            },
        };
        let back: Request = serde_json::from_str(&s.line()).unwrap();
        assert_eq!(back, s);
        let resp = Response {
            id: 9,
            reply: Reply::Error {
                message: "no".into(),
            },
        };
        assert_eq!(resp.line(), r#"{"id":9,"reply":"error","message":"no"}"#);
    }

    /// Revision 1's fields are left out when unused, so an older agent or
    /// controller reads exactly the lines it knew; and lines without them
    /// (an older peer's) read as revision 0, not streaming.
    #[test]
    fn revision_fields_are_optional_both_ways() {
        let old_hello = r#"{"id":1,"reply":"hello","version":2,"tool_version":"0.1.0","hostname":"h","pid":7,"net_admin":false}"#;
        let r: Response = serde_json::from_str(old_hello).unwrap();
        let Reply::Hello(h) = r.reply else {
            panic!("{r:?}")
        };
        assert_eq!(h.revision, 0);
        assert!(!h.streams_intervals());
        let start = Request {
            id: 2,
            op: Op::Start {
                role: Role::Sender,
                args: vec!["-a".into()],
                port: None,
                stream: false,
            },
        };
        assert!(!start.line().contains("stream"), "{}", start.line());
        let old_state = r#"{"id":3,"reply":"process","handle":2,"running":true,"code":null,"signal":null,"stderr":"","result":null}"#;
        let r: Response = serde_json::from_str(old_state).unwrap();
        let Reply::Process(p) = r.reply else {
            panic!("{r:?}")
        };
        assert!(p.stream.is_empty() && p.stream_dropped == 0);
        let back = Response {
            id: 3,
            reply: Reply::Process(p),
        };
        assert_eq!(back.line(), old_state);
        // A hello of this revision carries it.
        let hello = Request {
            id: 1,
            op: Op::Hello {
                version: AGENT_PROTOCOL_VERSION,
                allow: Allow::default(),
                revision: AGENT_PROTOCOL_REVISION,
                controller: Some(Controller {
                    host: "ctl".into(),
                    pid: 4,
                    campaign: "c".into(),
                }),
            },
        };
        let back: Request = serde_json::from_str(&hello.line()).unwrap();
        assert_eq!(back, hello);
        assert!(hello
            .line()
            .contains(&format!(r#""revision":{AGENT_PROTOCOL_REVISION}"#)));
        // A revision-1 agent's hello (no management list, nothing
        // recovered) reads with both empty.
        let old_hello = r#"{"id":1,"reply":"hello","version":2,"tool_version":"0.1.0","hostname":"h","pid":5,"net_admin":true,"revision":1}"#;
        let r: Response = serde_json::from_str(old_hello).unwrap();
        let Reply::Hello(h) = r.reply else {
            panic!("{r:?}")
        };
        assert!(h.mgmt.is_empty() && h.recovered.is_empty() && h.revision == 1);
    }

    #[test]
    fn cpu_delta_shares() {
        let a = CpuSample {
            mono_ns: 0,
            hz: 100,
            total: CoreTicks::default(),
            cores: vec![CoreTicks::default()],
            procs: vec![ProcTicks {
                handle: 1,
                pid: 7,
                role: Role::Sender,
                user: 0,
                system: 0,
                ended: false,
            }],
        };
        let busy = CoreTicks {
            user: 20,
            system: 10,
            softirq: 20,
            idle: 50,
            ..Default::default()
        };
        let b = CpuSample {
            mono_ns: 1_000_000_000,
            hz: 100,
            total: busy,
            cores: vec![busy],
            procs: vec![ProcTicks {
                handle: 1,
                pid: 7,
                role: Role::Sender,
                user: 50,
                system: 25,
                ended: false,
            }],
        };
        let d = b.delta(&a);
        assert!((d.host.softirq - 0.2).abs() < 1e-9);
        assert!((d.host.busy() - 0.5).abs() < 1e-9);
        assert!((d.procs[0].user - 0.5).abs() < 1e-9);
        assert!((d.procs[0].system - 0.25).abs() < 1e-9);
        // A child that ended during the interval counts with its final
        // ticks; one that had already ended before it does not count.
        let mut c = b.clone();
        c.mono_ns = 2_000_000_000;
        c.procs[0].ended = true;
        c.procs.push(ProcTicks {
            handle: 2,
            pid: 8,
            role: Role::Sender,
            user: 10,
            system: 0,
            ended: true,
        });
        let d = c.delta(&b);
        assert_eq!(d.procs.len(), 2, "{d:?}");
        assert_eq!(d.procs[1].pid, 8);
        assert!((d.procs[1].user - 0.1).abs() < 1e-9);
        let mut e = c.clone();
        e.mono_ns = 3_000_000_000;
        assert!(e.delta(&c).procs.is_empty(), "{:?}", e.delta(&c));
        let line = serde_json::to_string(&Role::Agent).unwrap();
        assert_eq!(line, r#""agent""#);
    }
}
