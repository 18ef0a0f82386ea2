//! Building, finding and removing a test-bed in the kernel.
//!
//! Order of `up`: validate and plan (nothing touched) → privileges and
//! tools → take the global lock → remove any earlier test-bed of the same
//! name (a killed process may have left one) → write the state file marked
//! incomplete → namespaces → sysctls → links → addresses and routes →
//! offloads → qdiscs → hosts files → state marked complete. Any error or a
//! signal removes everything again. Everything lives in namespaces named
//! `wb-<name>-<node>`: links are created directly inside them and never
//! exist in the host namespace, so deleting the namespaces removes all of it.

use crate::counters::{self, Counters};
use crate::error::TestbedError;
use crate::plan::{ns_prefix, NodePlan, Plan, BRIDGE};
use crate::probe::{DfOutcome, ProbePair, V4_OVERHEAD, V6_OVERHEAD};
use crate::signal;
use crate::spec::{
    check_testbed_name, format_rate, names_of, LinkSpec, NodeKind, QueueLimit, TopologySpec,
};
use crate::sys::{self, in_netns, run, run_input, Tools};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Directory of the state files (`<name>.json`).
pub const STATE_DIR: &str = "/run/wirebench";

/// Ethernet bytes the kernel does not count in skb->len on a veth: preamble
/// and start delimiter (8), FCS (4), inter-frame gap (12). skb->len already
/// includes the 14 B Ethernet header.
pub const WIRE_OVERHEAD: u32 = 24;
/// Minimum Ethernet frame (64 B with FCS) plus preamble and gap, on the wire.
pub const WIRE_MIN_FRAME: u32 = 84;

/// Where the state of test-bed `name` is kept.
pub fn state_path(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    schema: String,
    name: String,
    complete: bool,
    pid: u32,
    created_unix_s: u64,
    spec: TopologySpec,
    plan: Plan,
    /// How each link is made (index = link); empty in state files written
    /// before the emulator existed.
    #[serde(default)]
    backends: Vec<LinkBackend>,
}

/// How one link is made, chosen per link at `up` (docs/testbed.md, "Link
/// backends"); `status` and every run's environment say which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkBackend {
    /// A bare veth pair: as fast as the CPU forwards, no timing.
    Veth,
    /// Token bucket only (rate exact, no serialisation delay): links faster
    /// than the emulator holds, or with offloads on.
    Tbf,
    /// Token bucket at both ends (rate, host queue) and the user-space
    /// emulator on the wire (serialisation, delay, impairments).
    TbfEmulator,
    /// Token bucket and the kernel's netem (impairments where the emulator
    /// cannot go: offloads on, or a rate above its limit).
    Netem,
}

impl LinkBackend {
    /// The backend's name in documents and `testbed show`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkBackend::Veth => "veth",
            LinkBackend::Tbf => "tbf",
            LinkBackend::TbfEmulator => "tbf+emulator",
            LinkBackend::Netem => "netem",
        }
    }
}

/// The fastest link the user-space emulator is trusted to hold on every
/// frame size; faster links get tbf alone (docs/testbed.md, measured by
/// bench/link_emulator.sh).
pub const EMULATOR_MAX_BPS: u64 = 1_000_000_000;

/// The most full-size frames per second the emulator times on a link
/// without impairments: 500 Mbit/s of MTU 1500 frames (1538 B on the
/// wire). Its cost is per frame, so the limit is a frame rate: a faster
/// link of small MTU gets tbf alone, where on a 2-core host the emulator
/// would hold many-flow TCP below the Ethernet bound (60 flows at 1 Gbit/s,
/// MTU 1500: about 700 Mbit/s for either tool), while a 1 Gbit/s jumbo
/// link (13 800 frames/s) keeps the wire's time: its 5 MiB transfer
/// completes in 1.001-1.01 x the wire minimum where tbf's bucket lets it
/// finish at 0.993 x (docs/testbed.md, "Link backends").
pub const EMULATOR_TIMING_MAX_FPS: u64 = 40_650;

/// Full-size frames per second at the link's rate (wire frame = MTU +
/// 14 B header + 4 B FCS + 20 B preamble and gap).
fn full_frames_per_s(l: &LinkSpec) -> Option<u64> {
    l.rate_bps.map(|r| r / (8 * (u64::from(l.mtu) + 38)))
}

/// Picks the backend of one link; an error when nothing on this kernel
/// does what the link asks.
pub fn choose_backend(l: &LinkSpec, netem: bool) -> Result<LinkBackend, TestbedError> {
    let imp = l.impairment.is_some_and(|i| !i.is_none());
    let fast = l.rate_bps.is_some_and(|r| r > EMULATOR_MAX_BPS);
    if l.aqm.is_some() || l.trace.is_some() || l.slack_ns.is_some() {
        // Only the emulator runs CoDel and traces here; netem's kernel would have the
        // qdiscs, but a queue in front of netem is not a link's queue. A
        // slack is the emulator's, so asking for one asks for its timing.
        if l.offloads || fast {
            return Err(TestbedError::Invalid(format!(
                "link {}: aqm, trace and slack are the user-space link emulator's, which needs offloads = false and a rate of at most {}",
                l.label(),
                format_rate(EMULATOR_MAX_BPS)
            )));
        }
        return Ok(LinkBackend::TbfEmulator);
    }
    if !imp && l.rate_bps.is_none() {
        return Ok(LinkBackend::Veth);
    }
    if !imp && full_frames_per_s(l).is_some_and(|f| f > EMULATOR_TIMING_MAX_FPS) {
        return Ok(LinkBackend::Tbf);
    }
    if !l.offloads && !fast {
        return Ok(LinkBackend::TbfEmulator);
    }
    if !imp {
        return Ok(LinkBackend::Tbf);
    }
    if netem {
        return Ok(LinkBackend::Netem);
    }
    let why = if l.offloads {
        "offloads are on (the user-space emulator carries frames, not GSO super-packets; set offloads = false)".to_string()
    } else {
        format!(
            "its rate is above the {} the user-space emulator holds",
            format_rate(EMULATOR_MAX_BPS)
        )
    };
    Err(TestbedError::NoNetem {
        link: l.label(),
        what: format!("delay/jitter/loss while {why}"),
    })
}

/// Interface names of the wire's two ends in a link's namespace: `wire0`
/// toward the link's first endpoint, `wire1` toward the second.
pub const EMU_ENDS: [&str; 2] = ["wire0", "wire1"];

/// Frames the emulator queues per direction before dropping.
const EMULATOR_QUEUE_FRAMES: usize = 1000;

/// Frames a managed queue holds without a `queue` on the link: tc's
/// defaults (sch_codel 1000 packets, sch_fq_codel 10240).
fn aqm_default_limit(kind: crate::spec::AqmKind) -> usize {
    match kind {
        crate::spec::AqmKind::Codel => 1000,
        crate::spec::AqmKind::FqCodel => 10_240,
    }
}

/// A seed per link and build, so two links never draw the same losses.
fn seed_for(name: &str, li: usize) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    name.bytes().fold(
        t ^ (li as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3),
    )
}

/// The counters file of link `li`'s emulator.
fn counters_path(testbed: &str, li: usize) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{testbed}.link{li}.counters"))
}

/// The lateness table file of link `li`'s emulator ([`crate::emu_late`]).
fn late_path(testbed: &str, li: usize) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{testbed}.link{li}.late"))
}

/// Namespace of link `li`'s emulator: `_` never occurs in a node name.
pub fn link_netns(testbed: &str, li: usize) -> String {
    format!("{}_l{li}", ns_prefix(testbed))
}

/// An emulated test-bed that is up (or being built by this process).
#[derive(Debug)]
pub struct Testbed {
    name: String,
    spec: TopologySpec,
    plan: Plan,
    backends: Vec<LinkBackend>,
    tools: Tools,
}

/// Result of checking one ordered host pair over one IP version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairCheck {
    /// Host the probe left from.
    pub from: String,
    /// Host it was sent to.
    pub to: String,
    /// Over IPv6 (else IPv4).
    pub v6: bool,
    /// Address probed; None when the host has none in this family.
    pub to_addr: Option<IpAddr>,
    /// The round trip of our UDP echo, if it came back.
    pub rtt_s: Option<f64>,
    /// Measured: largest DF UDP payload that crossed + 28 / 48.
    pub path_mtu: Option<u32>,
    /// What the plan implies (smallest MTU on the routed path).
    pub expected_mtu: Option<u32>,
    /// Why the family is not checked (e.g. a link below 1280 B has no IPv6).
    pub skipped: Option<String>,
}

impl PairCheck {
    /// True when the pair was skipped, or answered with the path MTU the
    /// plan implies.
    pub fn ok(&self) -> bool {
        self.skipped.is_some()
            || (self.rtt_s.is_some()
                && self.path_mtu.is_some()
                && self.path_mtu == self.expected_mtu)
    }
}

/// Takes the global build lock (flock on the state directory): one `up` or
/// `down` at a time per machine, so two processes never interleave.
struct Lock(std::fs::File);

impl Lock {
    fn take() -> Result<Lock, TestbedError> {
        std::fs::create_dir_all(STATE_DIR)
            .map_err(|e| TestbedError::io(format!("creating {STATE_DIR}"), e))?;
        let f = std::fs::File::open(STATE_DIR)
            .map_err(|e| TestbedError::io(format!("opening {STATE_DIR}"), e))?;
        crate::os::lock_exclusive(&f)
            .map_err(|e| TestbedError::io(format!("locking {STATE_DIR}"), e))?;
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        crate::os::unlock(&self.0);
    }
}

fn write_state(st: &State) -> Result<(), TestbedError> {
    let path = state_path(&st.name);
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(st).map_err(|e| TestbedError::State {
        path: path.clone(),
        msg: e.to_string(),
    })?;
    std::fs::write(&tmp, text)
        .map_err(|e| TestbedError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| TestbedError::io(format!("writing {}", path.display()), e))
}

fn read_state(name: &str) -> Result<Option<State>, TestbedError> {
    let path = state_path(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TestbedError::io(format!("reading {}", path.display()), e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TestbedError::State {
            path,
            msg: e.to_string(),
        })
}

/// Whether anything of test-bed `name` exists: state file, namespaces or
/// hosts files.
pub fn exists(name: &str) -> bool {
    let p = ns_prefix(name);
    state_path(name).exists()
        || !sys::netns_with_prefix(&p).is_empty()
        || !sys::etc_dirs_with_prefix(&p).is_empty()
}

/// Names of test-beds that have a state file.
pub fn list() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(STATE_DIR)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_suffix(".json"))
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Removes whatever exists of test-bed `name` (complete, half-built or left
/// by a killed process). Returns whether there was anything. Takes the lock.
pub fn remove(name: &str) -> Result<bool, TestbedError> {
    check_testbed_name(name)?;
    sys::check_privileges()?;
    let _l = Lock::take()?;
    let had = exists(name);
    teardown(name)?;
    signal::disown(name);
    Ok(had)
}

/// Removes test-bed `name` without taking the lock (the caller holds it, or
/// is the signal watcher of a process that holds it). Only names with the
/// prefix `wb-<name>-` and the state file `<name>.json` are touched.
pub(crate) fn teardown(name: &str) -> Result<(), TestbedError> {
    let prefix = ns_prefix(name);
    let ip = sys::find_tool("ip")?;
    let mut nss = sys::netns_with_prefix(&prefix);
    if let Ok(Some(st)) = read_state(name) {
        for n in st.plan.nodes {
            if !nss.contains(&n.netns) && Path::new(sys::NETNS_RUN_DIR).join(&n.netns).exists() {
                nss.push(n.netns);
            }
        }
    }
    let mut first_err = None;
    // Processes left inside (a `testbed exec` in the background, a killed
    // campaign's receivers) would keep the namespace and its links alive.
    let me = std::process::id();
    for ns in &nss {
        if let Ok(out) = run(Command::new(&ip).args(["netns", "pids", ns])) {
            for pid in out.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                if pid as u32 != me && pid > 1 {
                    // A pid that lives in one of our namespaces.
                    crate::os::kill_hard(pid);
                }
            }
        }
    }
    if !nss.is_empty() {
        let batch: String = nss.iter().map(|n| format!("netns del {n}\n")).collect();
        if let Err(e) = run_input(
            Command::new(&ip).args(["-force", "-batch", "-"]),
            Some(&batch),
        ) {
            first_err.get_or_insert(e);
        }
    }
    for d in sys::etc_dirs_with_prefix(&prefix) {
        if let Err(e) = std::fs::remove_dir_all(&d) {
            first_err.get_or_insert(TestbedError::io(format!("removing {}", d.display()), e));
        }
    }
    let sp = state_path(name);
    let mut files = vec![sp.clone(), sp.with_extension("json.tmp")];
    let counters = format!("{name}.link");
    if let Ok(rd) = std::fs::read_dir(STATE_DIR) {
        files.extend(rd.flatten().map(|e| e.path()).filter(|p| {
            p.file_name().and_then(|f| f.to_str()).is_some_and(|f| {
                f.starts_with(&counters) && (f.ends_with(".counters") || f.ends_with(".late"))
            })
        }));
    }
    for p in files {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                first_err.get_or_insert(TestbedError::io(format!("removing {}", p.display()), e));
            }
        }
    }
    // An `ip` child of a killed `up` can still be adding a namespace while
    // we delete: sweep again for a short while before reporting what is left.
    let mut left = sys::netns_with_prefix(&prefix);
    for _ in 0..20 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let batch: String = left.iter().map(|n| format!("netns del {n}\n")).collect();
        let _ = run_input(
            Command::new(&ip).args(["-force", "-batch", "-"]),
            Some(&batch),
        );
        left = sys::netns_with_prefix(&prefix);
    }
    // Whatever `netns del` could not remove must be reported.
    if !left.is_empty() {
        first_err.get_or_insert(TestbedError::Command {
            cmd: "ip netns del".into(),
            msg: format!("namespaces still present: {}", left.join(", ")),
        });
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Bytes of token bucket. A real NIC has no bucket: every byte leaves at
/// line rate. Whatever the bucket holds leaves at once when a flow starts,
/// so a large one makes short transfers read faster than the link (a 4 ms
/// bucket made a 2 MB TCP transfer read 1.41 Gbit/s on a 1 Gbit/s link).
/// A small one costs throughput only when the qdisc timer fires late (tbf
/// refills for the time that passed, up to the bucket size), so: a few
/// frames, or TBF_BURST_NS of the rate where that is more.
fn tbf_burst(rate_bps: u64, mtu: u32) -> u64 {
    let frame = (mtu + 14 + WIRE_OVERHEAD) as u64;
    (4 * frame).max((rate_bps as u128 * TBF_BURST_NS as u128 / 8 / 1_000_000_000) as u64)
}

/// Time-worth of the token bucket (see `tbf_burst`). A transfer of S bytes
/// can read at most S / (S − bucket) of the link, so at 375 µs a 5 MB
/// transfer at 1 Gbit/s (47 KB of bucket) reads at most 0.9 % fast. Measured
/// on a busy 2-core machine (5 MiB TCP/IPv4, MTU 1500, 1 Gbit/s, bound
/// 941.5 Mbit/s, 6 runs each): a 1 ms bucket read 952-955 Mbit/s (1.5 %
/// fast), 500 µs 918-945, 375 µs 928-942 (at most 100.02 %, median 99.5 %),
/// 250 µs 837-939 (late qdisc timers cost throughput a smaller bucket cannot
/// make up).
const TBF_BURST_NS: u64 = 375_000;

/// Byte limit given to a tbf when it is created. It only sizes tbf's
/// default byte FIFO, which `qdisc_lines` replaces at once with a packet
/// FIFO of the node's queue length; it must still be at least one frame.
fn tbf_limit(mtu: u32, queue_len: u32) -> u64 {
    queue_len as u64 * (mtu as u64 + 14)
}

/// Peak rate of the one-frame bucket that makes tbf segment GSO packets.
const PEAK_MIN_BPS: u64 = 1_000_000_000_000;

/// What one interface's qdiscs must do.
#[derive(Debug, Clone, Copy)]
struct Shaping<'a> {
    /// Link rate, bits/s on the wire.
    rate: Option<u64>,
    mtu: u32,
    /// Packets queued before drops (the node's txqueuelen).
    queue_len: u32,
    /// The node's forwarding cap, packets/s (routers only).
    forward_pps: Option<u64>,
    /// The link's own queue size, instead of `queue_len` packets.
    queue: Option<QueueLimit>,
    /// Given to netem (the emulator's impairments are not qdiscs).
    imp: Option<&'a crate::spec::Impairment>,
}

/// Bytes charged per packet by the packet-rate tbf: its `mpu`. Every frame
/// on the interface is at most MTU + 14 B, so with mpu at least that, tbf
/// charges every packet exactly `mpu` bytes and a rate of pps × mpu × 8
/// bit/s lets through pps packets per second whatever their size (tc-tbf(8):
/// packets smaller than mpu are counted as mpu; `psched_l2t_ns()`). mpu is
/// a 16-bit field, hence the clamp (a frame above 65535 B on a capped
/// router is charged more than one packet).
fn pps_charge(mtu: u32) -> u64 {
    (mtu as u64 + 14).min(u16::MAX as u64)
}

/// Token bucket of the packet-rate cap in packets: 5 ms of the rate, at
/// least 2 packets. tbf refills for the time that passed, up to the bucket,
/// so the bucket is how late a qdisc timer may fire without costing the
/// router forwarding capacity. With 1 ms a router capped at 6 300 packets/s
/// forwarded 2-3.5 % less than its cap on a busy 2-core machine (load 6:
/// 6 181 and 6 079 packets/s out at 8 333 and 6 944 offered); a real
/// software router also takes a burst (a NAPI poll takes up to 64 packets).
fn pps_burst_packets(pps: u64) -> u64 {
    (pps / 200).max(2)
}

/// The tc commands (batch lines) shaping one interface.
///
/// Layout (each part only when asked for): root `1:` tbf at the link rate
/// (wire overhead and minimum frame charged) → `10:` tbf at the node's
/// packet-rate cap (every packet charged the same) → `20:` the queue: a
/// packet FIFO of `queue_len` packets like a NIC's txqueue, or netem
/// (delay/jitter/loss; its own limit) when the link has an impairment.
fn qdisc_lines(dev: &str, sh: &Shaping) -> Vec<String> {
    let mut v = Vec::new();
    let netem = sh.imp.filter(|i| !i.is_none()).map(|i| i.netem_line());
    let mtu = sh.mtu;
    let mut parent: Option<&str> = None;
    if let Some(r) = sh.rate {
        // The peak bucket (one frame deep, refilled at ≥ 1 Tbit/s, so it
        // refills faster than packets can be processed and never limits
        // the rate) caps the largest packet tbf takes whole at one frame:
        // a GSO/TSO super-packet is cut into frames at enqueue
        // (tbf_segment) and each frame pays its 24 B.
        v.push(format!(
            "qdisc replace dev {dev} root handle 1: tbf rate {r}bit burst {} limit {} overhead {WIRE_OVERHEAD} mpu {WIRE_MIN_FRAME} peakrate {}bit mtu {}",
            tbf_burst(r, mtu),
            tbf_limit(mtu, sh.queue_len),
            PEAK_MIN_BPS.max(r.saturating_mul(10)),
            mtu + 14
        ));
        parent = Some("parent 1:1 handle 10:");
    }
    if let Some(pps) = sh.forward_pps {
        let c = pps_charge(mtu);
        let at = parent.unwrap_or("root handle 10:");
        let verb = if parent.is_some() { "add" } else { "replace" };
        let rate = pps.saturating_mul(c).saturating_mul(8);
        // The same one-frame peak bucket as on the link: a GSO packet is
        // cut into frames, each charged as one packet.
        v.push(format!(
            "qdisc {verb} dev {dev} {at} tbf rate {rate}bit burst {} limit {} mpu {c} peakrate {}bit mtu {}",
            pps_burst_packets(pps) * c,
            tbf_limit(mtu, sh.queue_len),
            PEAK_MIN_BPS.max(rate.saturating_mul(10)),
            mtu + 14
        ));
        parent = Some("parent 10:1 handle 20:");
    }
    match (parent, netem) {
        (Some(p), Some(n)) => v.push(format!("qdisc add dev {dev} {p} {n}")),
        (Some(p), None) => v.push(match sh.queue.and_then(|q| q.bytes_at(sh.rate)) {
            Some(b) => format!("qdisc add dev {dev} {p} bfifo limit {b}"),
            None => {
                let n = match sh.queue {
                    Some(QueueLimit::Packets(n)) => n,
                    _ => sh.queue_len,
                };
                format!("qdisc add dev {dev} {p} pfifo limit {n}")
            }
        }),
        (None, Some(n)) => v.push(format!("qdisc replace dev {dev} root handle 1: {n}")),
        (None, None) => {}
    }
    v
}

/// The `tc` batch lines that shape one real interface like a test-bed link
/// of `rate_bps` (wire overhead and minimum frame charged, a packet FIFO of
/// `queue_len` behind it). The agent uses them for the `link_rate` axis on
/// real nodes, so a real link and an emulated one are shaped alike.
pub fn rate_qdisc_lines(dev: &str, rate_bps: u64, mtu: u32, queue_len: u32) -> Vec<String> {
    qdisc_lines(
        dev,
        &Shaping {
            rate: Some(rate_bps),
            mtu,
            queue_len,
            forward_pps: None,
            queue: None,
            imp: None,
        },
    )
}

fn hosts_file(name: &str, plan: &Plan) -> String {
    let mut s = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    let _ = writeln!(
        s,
        "# wirebench test-bed `{name}` (removed by `wirebench testbed down`)"
    );
    for n in &plan.nodes {
        for v6 in [false, true] {
            if let Some(a) = plan.addr(&n.name, v6) {
                let _ = writeln!(s, "{a}\t{}", n.name);
            }
        }
    }
    s
}

impl Testbed {
    /// Builds test-bed `name` from `spec`. Validates first (nothing is
    /// touched on bad input), removes an earlier test-bed of the same name,
    /// and removes everything again on any failure or signal.
    pub fn up(name: &str, spec: &TopologySpec) -> Result<Testbed, TestbedError> {
        check_testbed_name(name)?;
        spec.validate()?;
        let plan = Plan::new(name, spec)?;
        let netem = spec
            .links
            .iter()
            .any(|l| l.impairment.is_some_and(|i| !i.is_none()))
            && sys::netem_available();
        let backends = spec
            .links
            .iter()
            .map(|l| choose_backend(l, netem))
            .collect::<Result<Vec<_>, _>>()?;
        sys::check_privileges()?;
        let tools = Tools::find()?;
        let _lock = Lock::take()?;
        signal::own(name);
        let tb = Testbed {
            name: name.to_string(),
            spec: spec.clone(),
            plan,
            backends,
            tools,
        };
        let built = (|| {
            {
                let _s = signal::step();
                teardown(name)?;
            }
            tb.build()
        })();
        match built {
            Ok(()) => Ok(tb),
            Err(e) => {
                // After a signal (which may also have killed our `ip`/`tc`
                // children) this waits for the watcher, which cleans and exits.
                let _s = signal::step();
                let _ = teardown(name);
                signal::disown(name);
                Err(e)
            }
        }
    }

    fn state(&self, complete: bool) -> State {
        State {
            schema: "wirebench.testbed/1".into(),
            name: self.name.clone(),
            complete,
            pid: std::process::id(),
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            spec: self.spec.clone(),
            plan: self.plan.clone(),
            backends: self.backends.clone(),
        }
    }

    fn ip_batch(&self, ns: Option<&str>, batch: &str) -> Result<(), TestbedError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut c = Command::new(&self.tools.ip);
        if let Some(ns) = ns {
            c.args(["-n", ns]);
        }
        c.args(["-batch", "-"]);
        run_input(&mut c, Some(batch)).map(|_| ())
    }

    fn build(&self) -> Result<(), TestbedError> {
        let plan = &self.plan;
        {
            let _s = signal::step();
            // Written first: a process killed from here on leaves a record.
            write_state(&self.state(false))?;
        }
        {
            let _s = signal::step();
            let mut batch: String = plan
                .nodes
                .iter()
                .map(|n| format!("netns add {}\n", n.netns))
                .collect();
            for li in self.emulated() {
                let _ = writeln!(batch, "netns add {}", link_netns(&self.name, li));
            }
            self.ip_batch(None, &batch)?;
        }
        for li in self.emulated() {
            let _s = signal::step();
            in_netns(&link_netns(&self.name, li), || {
                // The wire has no addresses and says nothing itself.
                sys::write_sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
                sys::write_sysctl("net/ipv6/conf/default/disable_ipv6", "1")
            })?;
        }
        for n in &plan.nodes {
            let _s = signal::step();
            let router = n.kind == NodeKind::Router;
            let switch = n.kind == NodeKind::Switch;
            in_netns(&n.netns, || {
                let fwd = if router { "1" } else { "0" };
                sys::write_sysctl("net/ipv4/ip_forward", fwd)?;
                // Let path MTU discovery follow links below 552 B too.
                let _ = sys::write_sysctl("net/ipv4/route/min_pmtu", "68");
                // No ICMP rate limits inside the test-bed: a path-MTU search
                // sends many oversize probes in quick succession, and with
                // the kernel defaults (ICMPv6: one error per second per
                // destination; a randomised global credit) their
                // "fragmentation needed" / "packet too big" answers may be
                // dropped, so a probe could read as lost instead of refused.
                // Best effort: older kernels may lack one of these, and
                // then keep their defaults.
                let _ = sys::write_sysctl("net/ipv4/icmp_ratelimit", "0");
                let _ = sys::write_sysctl("net/ipv6/icmp/ratelimit", "0");
                let _ = sys::write_sysctl("net/ipv4/icmp_msgs_per_sec", "1000000");
                let _ = sys::write_sysctl("net/ipv4/icmp_msgs_burst", "1000000");
                if switch {
                    // A switch only bridges: no addresses, no IPv6 chatter.
                    sys::write_sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
                    sys::write_sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
                } else {
                    sys::write_sysctl("net/ipv6/conf/all/forwarding", fwd)?;
                    sys::write_sysctl("net/ipv6/conf/default/forwarding", fwd)?;
                    // Addresses usable at once: no duplicate address detection
                    // (every address is ours), no router advertisements.
                    for k in ["all", "default"] {
                        sys::write_sysctl(&format!("net/ipv6/conf/{k}/accept_dad"), "0")?;
                        sys::write_sysctl(&format!("net/ipv6/conf/{k}/accept_ra"), "0")?;
                    }
                }
                Ok(())
            })?;
        }
        {
            let _s = signal::step();
            let mut batch = String::new();
            for n in &plan.nodes {
                if n.kind == NodeKind::Switch {
                    let _ = writeln!(batch, "link add {BRIDGE} netns {} type bridge", n.netns);
                }
            }
            for (li, l) in self.spec.links.iter().enumerate() {
                let ends: Vec<(&NodePlan, String)> = l
                    .endpoints
                    .iter()
                    .map(|e| {
                        let np = plan.node(e).expect("validated endpoint");
                        let f = np.ifaces.iter().find(|f| f.link == li).expect("planned");
                        (np, f.name.clone())
                    })
                    .collect();
                if self.backends[li] == LinkBackend::TbfEmulator {
                    let wire = link_netns(&self.name, li);
                    for (k, end) in ends.iter().enumerate() {
                        let _ = writeln!(
                            batch,
                            "link add {} netns {} type veth peer name {} netns {wire}",
                            end.1, end.0.netns, EMU_ENDS[k]
                        );
                    }
                } else {
                    let _ = writeln!(
                        batch,
                        "link add {} netns {} type veth peer name {} netns {}",
                        ends[0].1, ends[0].0.netns, ends[1].1, ends[1].0.netns
                    );
                }
            }
            self.ip_batch(None, &batch)?;
        }
        for li in self.emulated() {
            let _s = signal::step();
            let wire = link_netns(&self.name, li);
            let mtu = self.spec.links[li].mtu;
            let mut b = String::from("link set lo up\n");
            for e in EMU_ENDS {
                let _ = writeln!(b, "link set dev {e} mtu {mtu} up");
            }
            self.ip_batch(Some(&wire), &b)?;
            let ethtool = self.tools.ethtool.clone();
            in_netns(&wire, move || {
                for e in EMU_ENDS {
                    set_offloads(&ethtool, e, false)?;
                }
                Ok(())
            })?;
        }
        for n in &plan.nodes {
            let _s = signal::step();
            let mut b = String::from("link set lo up\n");
            if n.kind == NodeKind::Switch {
                let _ = writeln!(b, "link set {BRIDGE} type bridge stp_state 0");
            }
            for f in &n.ifaces {
                let _ = writeln!(b, "link set {} mtu {}", f.name, f.mtu);
                if n.kind == NodeKind::Switch {
                    let _ = writeln!(b, "link set {} master {BRIDGE}", f.name);
                }
                if let Some(a) = f.v4 {
                    let _ = writeln!(b, "addr add {a}/24 dev {}", f.name);
                }
                if let Some(a) = f.v6 {
                    let _ = writeln!(b, "addr add {a}/64 dev {} nodad", f.name);
                }
                let _ = writeln!(b, "link set {} up", f.name);
            }
            if n.kind == NodeKind::Switch {
                let _ = writeln!(b, "link set {BRIDGE} up");
            }
            self.ip_batch(Some(&n.netns), &b)?;
        }
        // Routes after every interface of every node is up (a next hop must
        // be on a link that is up).
        for n in &plan.nodes {
            let _s = signal::step();
            let mut b = String::new();
            for r in &n.routes {
                let _ = writeln!(b, "route add {} via {} dev {}", r.dest, r.via, r.dev);
            }
            self.ip_batch(Some(&n.netns), &b)?;
        }
        for n in &plan.nodes {
            let _s = signal::step();
            let ethtool = self.tools.ethtool.clone();
            let ifaces: Vec<(crate::plan::IfacePlan, bool)> = n
                .ifaces
                .iter()
                .map(|f| (f.clone(), self.backends[f.link] == LinkBackend::TbfEmulator))
                .collect();
            in_netns(&n.netns, move || {
                for (f, emulated) in &ifaces {
                    set_offloads(&ethtool, &f.name, f.offloads)?;
                    if *emulated {
                        // veth leaves checksums to be finished by the
                        // receiver (CHECKSUM_PARTIAL) only while the skb
                        // stays one; a frame the emulator reads as bytes
                        // and writes again would arrive with a wrong one.
                        run(Command::new(&ethtool).args(["-K", &f.name, "tx", "off"]))?;
                    }
                }
                Ok(())
            })?;
        }
        for n in &plan.nodes {
            let _s = signal::step();
            let mut b = String::new();
            for f in &n.ifaces {
                let node = self.spec.node(&n.name).expect("planned from the spec");
                let managed = self.spec.links[f.link].aqm.is_some();
                let sh = Shaping {
                    // A managed link's queue is the emulator's: a token
                    // bucket at the host would hold the standing queue in
                    // front of it, where CoDel cannot see it.
                    rate: f.rate_bps.filter(|_| !managed),
                    mtu: f.mtu,
                    queue_len: node.queue_len(),
                    forward_pps: node.forward_pps,
                    queue: self.spec.links[f.link].queue,
                    imp: (self.backends[f.link] == LinkBackend::Netem)
                        .then_some(self.spec.links[f.link].impairment.as_ref())
                        .flatten(),
                };
                for line in qdisc_lines(&f.name, &sh) {
                    b.push_str(&line);
                    b.push('\n');
                }
            }
            if !b.is_empty() {
                let mut c = Command::new(&self.tools.tc);
                c.args(["-n", &n.netns, "-batch", "-"]);
                run_input(&mut c, Some(&b))?;
            }
        }
        // Every emulator's lateness table exists before the first starts:
        // each maps its neighbours' too.
        for li in self.emulated() {
            let _s = signal::step();
            let path = late_path(&self.name, li);
            std::fs::File::create(&path)
                .and_then(|f| f.set_len(crate::emu_late::LATE_FILE_BYTES as u64))
                .map_err(|e| TestbedError::io(format!("creating {}", path.display()), e))?;
        }
        for li in self.emulated() {
            let _s = signal::step();
            self.start_emulator(li)?;
        }
        {
            let _s = signal::step();
            let text = hosts_file(&self.name, plan);
            for n in &plan.nodes {
                let dir = Path::new(sys::NETNS_ETC_DIR).join(&n.netns);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| TestbedError::io(format!("creating {}", dir.display()), e))?;
                let p = dir.join("hosts");
                std::fs::write(&p, &text)
                    .map_err(|e| TestbedError::io(format!("writing {}", p.display()), e))?;
            }
        }
        let _s = signal::step();
        write_state(&self.state(true))
    }

    /// Links made with the user-space emulator.
    fn emulated(&self) -> Vec<usize> {
        (0..self.backends.len())
            .filter(|&li| self.backends[li] == LinkBackend::TbfEmulator)
            .collect()
    }

    /// For each direction of emulated link `li`, the emulated links that
    /// deliver frames to the node it receives from, and the direction of
    /// each that does (direction 0 carries endpoint 0 → endpoint 1).
    fn late_neighbours(&self, li: usize) -> [Vec<(usize, usize)>; 2] {
        let ends = &self.spec.links[li].endpoints;
        [0, 1].map(|d| {
            self.emulated()
                .into_iter()
                .filter(|&lj| lj != li)
                .flat_map(|lj| {
                    let e = &self.spec.links[lj].endpoints;
                    (0..2)
                        .filter(|&k| e[k] == ends[d])
                        .map(move |k| (lj, 1 - k))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
    }

    /// Starts the forwarding process of link `li` in its namespace.
    fn start_emulator(&self, li: usize) -> Result<(), TestbedError> {
        let l = &self.spec.links[li];
        let imp = l.impairment.unwrap_or_default();
        // The token bucket in front holds the host's queue; the wire's own
        // queue only ever holds the bucket's burst, so it is sized to never
        // drop what the bucket lets through.
        // A trace link has no tbf: its queue is the wire's.
        let queue = match (&l.trace, l.queue) {
            (Some(_), Some(QueueLimit::Packets(n))) => n as usize,
            _ => EMULATOR_QUEUE_FRAMES,
        };
        let seed = seed_for(&self.name, li);
        let mut wires = [
            crate::emu::Wire::new(l.rate_bps, imp, queue, seed),
            crate::emu::Wire::new(l.rate_bps, imp, queue, seed ^ 0x5555_5555_5555_5555),
        ];
        if let Some(t) = &l.trace {
            for (w, t) in wires.iter_mut().zip(t.iter()) {
                // A spec read back from JSON names its traces without them.
                let t = if t.ms.is_empty() {
                    crate::spec::LinkTrace::load(&t.path)?
                } else {
                    t.clone()
                };
                w.trace = Some(crate::emu::TraceClock::new(t.ms));
            }
        }
        let aqm = l.aqm.map(|spec| {
            let (frames, bytes) = match l.queue {
                Some(crate::spec::QueueLimit::Packets(n)) => (n as usize, u64::MAX),
                Some(q) => (usize::MAX, q.bytes_at(l.rate_bps).unwrap_or(u64::MAX)),
                None => (aqm_default_limit(spec.kind), u64::MAX),
            };
            crate::emu_run::Aqm {
                spec,
                limit_frames: frames,
                limit_bytes: bytes,
                perturb: seed.rotate_left(17),
            }
        });
        let mtu = l.mtu;
        let slack = l.slack_ns.unwrap_or(crate::spec::DEFAULT_SLACK_NS);
        // Created here: a thread in another network namespace may not be
        // allowed to create files (seen in a sandboxed container).
        let path = counters_path(&self.name, li);
        let counters = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| TestbedError::io(format!("creating {}", path.display()), e))?;
        let open = |lj: usize| {
            let p = late_path(&self.name, lj);
            std::fs::File::options()
                .read(true)
                .write(true)
                .open(&p)
                .map_err(|e| TestbedError::io(format!("opening {}", p.display()), e))
        };
        let mut from: [Vec<(std::fs::File, usize)>; 2] = [Vec::new(), Vec::new()];
        for (d, list) in self.late_neighbours(li).into_iter().enumerate() {
            for (lj, nd) in list {
                from[d].push((open(lj)?, nd));
            }
        }
        let late = crate::emu_run::LateFiles {
            own: open(li)?,
            from,
        };
        in_netns(&link_netns(&self.name, li), move || {
            crate::emu_run::Emulator::open(EMU_ENDS, wires, aqm, mtu, counters, late, slack)?
                .spawn()
        })
        .map(|_| ())
        .map_err(|e| TestbedError::Probe(format!("link {}: emulator: {e}", l.label())))
    }

    /// An existing, complete test-bed, from its state file.
    pub fn attach(name: &str) -> Result<Testbed, TestbedError> {
        check_testbed_name(name)?;
        let st =
            read_state(name)?.ok_or_else(|| TestbedError::NotUp(name.into(), state_path(name)))?;
        if !st.complete {
            return Err(TestbedError::State {
                path: state_path(name),
                msg: format!(
                    "test-bed `{name}` was never completed (its builder, pid {}, stopped); `wirebench testbed down --name {name}` or a new `up` removes it",
                    st.pid
                ),
            });
        }
        if let Some(n) = st
            .plan
            .nodes
            .iter()
            .find(|n| !Path::new(sys::NETNS_RUN_DIR).join(&n.netns).exists())
        {
            return Err(TestbedError::State {
                path: state_path(name),
                msg: format!(
                    "namespace {} is gone; `wirebench testbed down --name {name}` cleans the rest",
                    n.netns
                ),
            });
        }
        let backends = if st.backends.len() == st.spec.links.len() {
            st.backends
        } else {
            st.spec
                .links
                .iter()
                .map(|l| match (l.rate_bps, l.impairment) {
                    (None, None) => LinkBackend::Veth,
                    (_, Some(_)) => LinkBackend::Netem,
                    (Some(_), None) => LinkBackend::Tbf,
                })
                .collect()
        };
        Ok(Testbed {
            name: st.name,
            spec: st.spec,
            plan: st.plan,
            backends,
            tools: Tools::find()?,
        })
    }

    /// Removes the test-bed: its namespaces (and with them every link and
    /// qdisc), its hosts files and its state file.
    pub fn down(self) -> Result<(), TestbedError> {
        let _l = Lock::take()?;
        let r = teardown(&self.name);
        signal::disown(&self.name);
        r
    }

    /// Leaves the test-bed up when this process gets SIGINT/SIGTERM (the CLI
    /// `testbed up` calls it: the test-bed is meant to outlive the command).
    pub fn keep(&self) {
        signal::disown(&self.name);
    }

    /// The test-bed's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its topology.
    pub fn spec(&self) -> &TopologySpec {
        &self.spec
    }

    /// The computed plan: namespaces, interfaces, addresses, routes.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What each emulated link's wire did, both directions (first
    /// endpoint → second, then back); None for links without an emulator.
    pub fn wire_counters(&self) -> Vec<Option<[crate::emu_run::WireCounters; 2]>> {
        self.read_emulators(crate::emu_run::read_counters)
    }

    /// `read` of each emulated link's counters file, in link order.
    fn read_emulators<T>(&self, read: impl Fn(&Path) -> Option<T>) -> Vec<Option<T>> {
        (0..self.backends.len())
            .map(|li| {
                (self.backends[li] == LinkBackend::TbfEmulator)
                    .then(|| read(&counters_path(&self.name, li)))
                    .flatten()
            })
            .collect()
    }

    /// Each emulated link's own send error per frame (both directions, as
    /// [`Testbed::wire_counters`]); None for links without an emulator.
    pub fn send_errors(&self) -> Vec<Option<[crate::emu_run::SendError; 2]>> {
        self.read_emulators(crate::emu_run::read_send_errors)
    }

    /// How each link is made, in link order.
    pub fn backends(&self) -> &[LinkBackend] {
        &self.backends
    }

    /// Names of its hosts.
    pub fn hosts(&self) -> Vec<String> {
        names_of(&self.spec, NodeKind::Host)
    }

    /// Names of its routers.
    pub fn routers(&self) -> Vec<String> {
        names_of(&self.spec, NodeKind::Router)
    }

    /// Names of its switches.
    pub fn switches(&self) -> Vec<String> {
        names_of(&self.spec, NodeKind::Switch)
    }

    fn node_plan(&self, node: &str) -> Result<&NodePlan, TestbedError> {
        self.plan
            .node(node)
            .ok_or_else(|| TestbedError::UnknownNode {
                testbed: self.name.clone(),
                node: node.to_string(),
                known: self
                    .plan
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The node's address toward the rest (its first link's address).
    pub fn addr(&self, node: &str, v6: bool) -> Result<IpAddr, TestbedError> {
        let n = self.node_plan(node)?;
        self.plan.addr(&n.name, v6).ok_or_else(|| {
            TestbedError::Invalid(format!(
                "node `{node}` has no IPv{} address ({})",
                if v6 { 6 } else { 4 },
                if n.kind == NodeKind::Switch {
                    "a switch only bridges"
                } else {
                    "its links are below 1280 B"
                }
            ))
        })
    }

    /// Namespace name of a node (`wb-<name>-<node>`).
    pub fn netns(&self, node: &str) -> Result<String, TestbedError> {
        Ok(self.node_plan(node)?.netns.clone())
    }

    /// A command that runs `program` inside the node (`ip netns exec`, which
    /// also bind-mounts the test-bed's /etc/hosts). Add arguments and spawn.
    pub fn command(&self, node: &str, program: &str) -> Result<Command, TestbedError> {
        let ns = self.netns(node)?;
        let mut c = Command::new(&self.tools.ip);
        c.args(["netns", "exec", &ns, program]);
        Ok(c)
    }

    /// Runs `f` on a thread inside the node's namespace: sockets it opens
    /// belong to the node. For in-process traffic (tests, probes).
    pub fn in_node<T: Send>(
        &self,
        node: &str,
        f: impl FnOnce() -> Result<T, TestbedError> + Send,
    ) -> Result<T, TestbedError> {
        let ns = self.netns(node)?;
        in_netns(&ns, f)
    }

    /// Counters of every interface of every node, and of its qdisc.
    pub fn counters(&self) -> Result<Counters, TestbedError> {
        let mut c = Counters::default();
        for n in &self.plan.nodes {
            let links = run(
                Command::new(&self.tools.ip).args(["-n", &n.netns, "-s", "-j", "link", "show"])
            )?;
            let qd =
                run(Command::new(&self.tools.tc)
                    .args(["-n", &n.netns, "-s", "-j", "qdisc", "show"]))?;
            let m = counters::parse_node(&links, &qd).map_err(|msg| TestbedError::Command {
                cmd: format!("reading counters of {}", n.netns),
                msg,
            })?;
            c.nodes.insert(n.name.clone(), m);
        }
        Ok(c)
    }

    /// What the kernel says about every interface now: MTU, up/down, root
    /// qdisc and the segmentation/receive offloads (`status` shows these,
    /// not the plan, so a drifted test-bed is visible).
    pub fn live(&self) -> Result<BTreeMap<String, BTreeMap<String, LiveIface>>, TestbedError> {
        let mut out = BTreeMap::new();
        for n in &self.plan.nodes {
            let text =
                run(Command::new(&self.tools.ip).args(["-n", &n.netns, "-j", "link", "show"]))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| TestbedError::Command {
                    cmd: format!("ip -n {} -j link show", n.netns),
                    msg: e.to_string(),
                })?;
            let mut m = BTreeMap::new();
            for l in v.as_array().into_iter().flatten() {
                let Some(name) = l.get("ifname").and_then(|x| x.as_str()) else {
                    continue;
                };
                if name == "lo" {
                    continue;
                }
                let flags: Vec<&str> = l
                    .get("flags")
                    .and_then(|f| f.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                    .unwrap_or_default();
                m.insert(
                    name.to_string(),
                    LiveIface {
                        mtu: l.get("mtu").and_then(|x| x.as_u64()).unwrap_or(0) as u32,
                        up: flags.contains(&"UP") && flags.contains(&"LOWER_UP"),
                        qdisc: l
                            .get("qdisc")
                            .and_then(|x| x.as_str())
                            .unwrap_or("")
                            .to_string(),
                        offloads: BTreeMap::new(),
                    },
                );
            }
            let ethtool = self.tools.ethtool.clone();
            let names: Vec<String> = n.ifaces.iter().map(|f| f.name.clone()).collect();
            let offs = in_netns(&n.netns, move || {
                let mut r = Vec::new();
                for f in names {
                    let text = run(Command::new(&ethtool).args(["-k", &f]))?;
                    r.push((f, parse_offloads(&text)));
                }
                Ok(r)
            })?;
            for (f, o) in offs {
                if let Some(li) = m.get_mut(&f) {
                    li.offloads = o;
                }
            }
            out.insert(n.name.clone(), m);
        }
        Ok(out)
    }

    fn pair(&self, from: &str, to: &str, v6: bool) -> Result<ProbePair, TestbedError> {
        let from_ns = self.netns(from)?;
        let to_ns = self.netns(to)?;
        self.addr(from, v6)?;
        let to_addr = self.addr(to, v6)?;
        ProbePair::new(&from_ns, &to_ns, to_addr, v6)
    }

    /// Measured path MTU from `from` to `to`'s address: the largest UDP
    /// payload that crosses with don't-fragment set, plus 28 (IPv4) or 48
    /// (IPv6) bytes of headers.
    pub fn path_mtu(&self, from: &str, to: &str, v6: bool) -> Result<u32, TestbedError> {
        let mut p = self.pair(from, to, v6)?;
        warm_up(&mut p)?;
        let max = p.max_payload(v6)?.ok_or_else(|| {
            TestbedError::Probe(format!(
                "{from} → {to} (IPv{}): no UDP probe got through",
                if v6 { 6 } else { 4 }
            ))
        })?;
        Ok(max + if v6 { V6_OVERHEAD } else { V4_OVERHEAD })
    }

    /// Sends one UDP datagram of `payload` bytes with don't-fragment set from
    /// `from` to `to` (up to 4 tries) and says what became of it.
    pub fn df_probe(
        &self,
        from: &str,
        to: &str,
        v6: bool,
        payload: usize,
    ) -> Result<DfOutcome, TestbedError> {
        if payload > 65507 + if v6 { 20 } else { 0 } {
            return Err(TestbedError::Invalid(format!(
                "payload {payload} is larger than UDP allows"
            )));
        }
        let mut p = self.pair(from, to, v6)?;
        warm_up(&mut p)?;
        p.df_probe(payload, 4, Duration::from_millis(500))
    }

    /// Round trip of a small UDP echo from `from` to `to`; None if nothing came back.
    pub fn echo(&self, from: &str, to: &str, v6: bool) -> Result<Option<Duration>, TestbedError> {
        let mut p = self.pair(from, to, v6)?;
        p.echo(ECHO_TRIES, Duration::from_millis(500))
    }

    /// Every ordered host pair over IPv4 and IPv6: UDP echo and measured
    /// path MTU against the planned one.
    pub fn check(&self) -> Result<Vec<PairCheck>, TestbedError> {
        let hosts = self.hosts();
        let mut out = Vec::new();
        for from in &hosts {
            for to in &hosts {
                if from == to {
                    continue;
                }
                for v6 in [false, true] {
                    let mut pc = PairCheck {
                        from: from.clone(),
                        to: to.clone(),
                        v6,
                        to_addr: self.plan.addr(to, v6),
                        rtt_s: None,
                        path_mtu: None,
                        expected_mtu: self.plan.expected_path_mtu(from, to, v6),
                        skipped: None,
                    };
                    if pc.expected_mtu.is_none() {
                        pc.skipped = Some(if v6 {
                            "no IPv6 path (a link below 1280 B carries IPv4 only)".into()
                        } else {
                            "no IPv4 path".into()
                        });
                        out.push(pc);
                        continue;
                    }
                    pc.rtt_s = self.echo(from, to, v6)?.map(|d| d.as_secs_f64());
                    if pc.rtt_s.is_some() {
                        pc.path_mtu = self.path_mtu(from, to, v6).ok();
                    }
                    out.push(pc);
                }
            }
        }
        Ok(out)
    }
}

/// One small echo before any oversize probe: it resolves every neighbour
/// on the path in both directions, so a router's "too big" answer does not
/// wait behind a neighbour solicitation (a lost first one costs the 1 s
/// retransmit, and the answer then arrived after the probe's last try).
/// Whether the echo came back does not matter here; the probe tells.
fn warm_up(p: &mut crate::probe::ProbePair) -> Result<(), TestbedError> {
    p.echo(ECHO_TRIES, Duration::from_millis(500)).map(|_| ())
}

/// Tries of a 500 ms echo. On a fresh path each direction may lose its first
/// neighbour solicitation and wait for the 1 s retransmit, so 2.5 s covers
/// two; a healthy path answers the first try (3 tries read as unreachable
/// now and then right after `up`).
const ECHO_TRIES: u32 = 5;

/// Live state of one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveIface {
    /// Interface MTU.
    pub mtu: u32,
    /// The interface is up.
    pub up: bool,
    /// Root qdisc kind as `ip link` reports it (`tbf`, `noqueue`, …).
    pub qdisc: String,
    /// `tso`, `gso`, `gro`, `udp-gso` → on/off.
    pub offloads: BTreeMap<String, bool>,
}

fn parse_offloads(ethtool_k: &str) -> BTreeMap<String, bool> {
    let mut m = BTreeMap::new();
    for line in ethtool_k.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        let key = match k {
            "tcp-segmentation-offload" => "tso",
            "generic-segmentation-offload" => "gso",
            "generic-receive-offload" => "gro",
            "tx-udp-segmentation" => "udp-gso",
            _ => continue,
        };
        m.insert(key.to_string(), v.trim().starts_with("on"));
    }
    m
}

/// Offloads off: a real wire carries MTU-sized frames, and TSO/GSO/GRO on
/// veth would move 64 KB super-packets through the routers. On: what the
/// kernel allows on veth.
fn set_offloads(ethtool: &Path, dev: &str, on: bool) -> Result<(), TestbedError> {
    let v = if on { "on" } else { "off" };
    let full = [
        "tso",
        "gso",
        "gro",
        "tx-udp-segmentation",
        "tx-gso-list",
        "rx-gro-list",
        "rx-udp-gro-forwarding",
    ];
    let basic = ["tso", "gso", "gro"];
    let mut c = Command::new(ethtool);
    c.args(["-K", dev]);
    for f in full {
        // List GRO and UDP GRO forwarding stay at the kernel default when
        // offloads are "on": they change how forwarded packets are merged.
        let val = if on && matches!(f, "tx-gso-list" | "rx-gro-list" | "rx-udp-gro-forwarding") {
            "off"
        } else {
            v
        };
        c.args([f, val]);
    }
    if run(&mut c).is_ok() {
        return Ok(());
    }
    // Older ethtool/kernels lack some feature names: the essential three.
    let mut c = Command::new(ethtool);
    c.args(["-K", dev]);
    for f in basic {
        c.args([f, v]);
    }
    run(&mut c).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Impairment;

    #[test]
    fn qdisc_commands() {
        let sh = |rate, mtu, pps, imp| Shaping {
            rate,
            mtu,
            queue_len: 1000,
            forward_pps: pps,
            queue: None,
            imp,
        };
        let v = qdisc_lines("eth0", &sh(Some(100_000_000), 1500, None, None));
        assert_eq!(v.len(), 2);
        assert!(v[0].starts_with("qdisc replace dev eth0 root handle 1: tbf rate 100000000bit burst 6152 limit 1514000 overhead 24 mpu 84"), "{}", v[0]);
        assert!(
            v[0].ends_with(" peakrate 1000000000000bit mtu 1514"),
            "{}",
            v[0]
        );
        // A NIC-like queue: 1000 packets, whatever their size.
        assert_eq!(
            v[1],
            "qdisc add dev eth0 parent 1:1 handle 10: pfifo limit 1000"
        );
        let v = qdisc_lines("eth1", &sh(Some(1_000_000_000), 9000, None, None));
        assert!(v[0].contains("burst 46875 limit 9014000 "), "{}", v[0]);
        let imp = Impairment {
            delay_ns: 10_000_000,
            jitter_ns: 1_000_000,
            loss: 0.005,
            ..Default::default()
        };
        let v = qdisc_lines("eth0", &sh(Some(10_000_000), 1500, None, Some(&imp)));
        assert_eq!(v.len(), 2);
        assert_eq!(v[1], "qdisc add dev eth0 parent 1:1 handle 10: netem limit 100000 delay 10000us 1000us distribution uniform loss 0.5%");
        let v = qdisc_lines("eth0", &sh(None, 1500, None, Some(&imp)));
        assert!(v[0].starts_with("qdisc replace dev eth0 root handle 1: netem"));
        assert!(qdisc_lines("eth0", &sh(None, 1500, None, None)).is_empty());
        // A packet-rate cap: every packet charged 1514 B, 29 000 of them
        // per second, 145 packets (5 ms) of bucket; under the link tbf when there
        // is one, the root otherwise.
        let v = qdisc_lines("eth1", &sh(Some(100_000_000), 1500, Some(29_000), None));
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[1],
            "qdisc add dev eth1 parent 1:1 handle 10: tbf rate 351248000bit burst 219530 limit 1514000 mpu 1514 peakrate 1000000000000bit mtu 1514"
        );
        assert_eq!(
            v[2],
            "qdisc add dev eth1 parent 10:1 handle 20: pfifo limit 1000"
        );
        let v = qdisc_lines("eth1", &sh(None, 1500, Some(29_000), Some(&imp)));
        assert_eq!(v.len(), 2);
        assert!(
            v[0].starts_with("qdisc replace dev eth1 root handle 10: tbf rate 351248000bit"),
            "{}",
            v[0]
        );
        assert!(
            v[1].starts_with("qdisc add dev eth1 parent 10:1 handle 20: netem"),
            "{}",
            v[1]
        );
    }

    /// A link's own queue replaces the node's packet FIFO: packets stay a
    /// pfifo, bytes and time (at the link rate) become a bfifo.
    #[test]
    fn link_queues() {
        let sh = |queue| Shaping {
            rate: Some(100_000_000),
            mtu: 1500,
            queue_len: 1000,
            forward_pps: None,
            queue,
            imp: None,
        };
        let q = |s: &str| crate::spec::parse_queue(s).unwrap();
        let line = |queue| qdisc_lines("eth0", &sh(queue))[1].clone();
        assert_eq!(
            line(Some(q("50p"))),
            "qdisc add dev eth0 parent 1:1 handle 10: pfifo limit 50"
        );
        assert_eq!(
            line(Some(q("256KiB"))),
            "qdisc add dev eth0 parent 1:1 handle 10: bfifo limit 262144"
        );
        // 20 ms at 100 Mbit/s: 250 000 B.
        assert_eq!(
            line(Some(q("20ms"))),
            "qdisc add dev eth0 parent 1:1 handle 10: bfifo limit 250000"
        );
        assert_eq!(
            line(None),
            "qdisc add dev eth0 parent 1:1 handle 10: pfifo limit 1000"
        );
    }

    /// Which backend makes a link.
    #[test]
    fn backends() {
        use crate::spec::LinkSpec;
        let mut l = LinkSpec::new("a", "b");
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::Veth);
        l.rate_bps = Some(100_000_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.rate_bps = Some(500_000_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.rate_bps = Some(1_000_000_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::Tbf);
        // The limit is a frame rate: a 1 Gbit/s jumbo link is timed.
        l.mtu = 9000;
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.mtu = 1500;
        l.impairment = Some(Impairment {
            delay_ns: 1_000_000,
            ..Default::default()
        });
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.impairment = None;
        // A slack asks for the emulator's timing where tbf would be the
        // default.
        l.slack_ns = Some(10_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.slack_ns = None;
        l.rate_bps = Some(10_000_000_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::Tbf);
        l.impairment = Some(Impairment {
            delay_ns: 1_000_000,
            ..Default::default()
        });
        assert!(matches!(
            choose_backend(&l, false),
            Err(TestbedError::NoNetem { .. })
        ));
        assert_eq!(choose_backend(&l, true).unwrap(), LinkBackend::Netem);
        l.rate_bps = None;
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.offloads = true;
        assert!(choose_backend(&l, false).is_err());
        l.impairment = None;
        l.rate_bps = Some(100_000_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::Tbf);
        // CoDel runs in the emulator only, up to its rate, offloads off.
        l.aqm = Some(crate::spec::AqmSpec::new(crate::spec::AqmKind::Codel));
        assert!(choose_backend(&l, true).is_err());
        l.offloads = false;
        l.rate_bps = Some(1_000_000_000);
        assert_eq!(choose_backend(&l, false).unwrap(), LinkBackend::TbfEmulator);
        l.rate_bps = Some(2_000_000_000);
        assert!(choose_backend(&l, true).is_err());
    }

    #[test]
    fn offload_parsing() {
        let m = parse_offloads("tcp-segmentation-offload: off\ngeneric-segmentation-offload: on\ngeneric-receive-offload: off [fixed]\ntx-udp-segmentation: on\n");
        assert!(!m["tso"] && m["gso"] && !m["gro"] && m["udp-gso"]);
    }
}
