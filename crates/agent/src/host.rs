//! What an agent reads from its host: per-core CPU ticks (/proc/stat) and
//! its children's CPU (/proc/PID/stat), interface and qdisc counters (`ip`
//! and `tc`, parsed by the test-bed's counter reader so both kinds of node
//! report alike), and the metadata a result is only comparable with: OS,
//! kernel, CPU model, NIC driver and firmware, MTU, offloads, the sysctls
//! that change results, clock synchronisation.
//!
//! Every reader degrades to "unknown" instead of failing: a host without
//! ethtool or chrony is still measured. /proc readers are Linux only;
//! Windows reads the same things through its own APIs (`win.rs`); other
//! systems report what the standard library knows.

use crate::proto::{ClockSync, CoreTicks, CpuSample, HostMeta, IfaceMeta};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Finds a system tool in PATH or the sbin directories (a login shell over
/// SSH may lack /usr/sbin in PATH).
pub fn tool(name: &str) -> Option<PathBuf> {
    wirebench_testbed::sys::find_tool(name).ok()
}

/// Runs a tool; its stdout when it exits 0.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Monotonic clock in ns (CLOCK_MONOTONIC on Unix).
pub fn mono_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into a local timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    #[cfg(not(unix))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<std::time::Instant> = OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// Parses /proc/stat: the `cpu` line and every `cpuN` line.
pub fn parse_proc_stat(text: &str) -> (CoreTicks, Vec<CoreTicks>) {
    let mut total = CoreTicks::default();
    let mut cores = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        if !name.starts_with("cpu") {
            continue;
        }
        let v: Vec<u64> = it.map(|x| x.parse().unwrap_or(0)).collect();
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        let t = CoreTicks {
            user: g(0),
            nice: g(1),
            system: g(2),
            idle: g(3),
            iowait: g(4),
            irq: g(5),
            softirq: g(6),
            steal: g(7),
        };
        if name == "cpu" {
            total = t;
        } else {
            cores.push(t);
        }
    }
    (total, cores)
}

/// utime and stime (fields 14 and 15) of /proc/PID/stat; the command name
/// may hold spaces and parentheses, so fields count from the last `)`.
pub fn parse_pid_stat(text: &str) -> Option<(u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 → index 11.
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// Host CPU now; the children's ticks are filled in by the agent.
pub fn cpu_sample() -> CpuSample {
    #[cfg(windows)]
    let (total, cores) = crate::win::cpu();
    #[cfg(not(windows))]
    let (total, cores) = std::fs::read_to_string("/proc/stat")
        .map(|t| parse_proc_stat(&t))
        .unwrap_or_default();
    CpuSample {
        mono_ns: mono_ns(),
        hz: clock_ticks(),
        total,
        cores,
        procs: Vec::new(),
    }
}

fn clock_ticks() -> u64 {
    #[cfg(windows)]
    {
        crate::win::CPU_HZ
    }
    #[cfg(not(windows))]
    {
        #[cfg(unix)]
        {
            // SAFETY: sysconf has no preconditions.
            let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
            if v > 0 {
                return v as u64;
            }
        }
        100
    }
}

/// A process's (user, system) ticks, if it still exists.
pub fn pid_ticks(pid: u32) -> Option<(u64, u64)> {
    #[cfg(windows)]
    {
        crate::win::pid_ticks(pid)
    }
    #[cfg(not(windows))]
    {
        parse_pid_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }
}

/// Every interface's counters and qdisc statistics in this network
/// namespace (loopback left out).
pub fn counters() -> Result<BTreeMap<String, wirebench_testbed::IfaceCounters>, String> {
    #[cfg(windows)]
    {
        crate::win::counters()
    }
    #[cfg(not(windows))]
    {
        let ip = tool("ip").ok_or("`ip` not found (apt-get install iproute2)")?;
        let links = output(Command::new(&ip).args(["-s", "-j", "link", "show"]))
            .ok_or("`ip -s -j link show` failed")?;
        // Without tc the interface counters still say a lot.
        let qd = tool("tc")
            .and_then(|tc| output(Command::new(tc).args(["-s", "-j", "qdisc", "show"])))
            .unwrap_or_else(|| "[]".into());
        wirebench_testbed::counters::parse_node(&links, &qd)
    }
}

/// Root, or CAP_NET_ADMIN in the effective set.
pub fn net_admin() -> bool {
    // The Windows agent changes no links (docs/platforms.md).
    if cfg!(windows) {
        return false;
    }
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return true;
        }
    }
    use wirebench_testbed::sys;
    sys::effective_caps() & (1 << sys::CAP_NET_ADMIN) != 0
}

/// The host's name (empty when unknown).
pub fn hostname() -> String {
    #[cfg(windows)]
    if let Ok(n) = std::env::var("COMPUTERNAME") {
        return n;
    }
    read_trim("/proc/sys/kernel/hostname")
        .or_else(|| output(&mut Command::new("hostname")).map(|s| s.trim().to_string()))
        .unwrap_or_default()
}

/// The sysctls that change what a run measures.
pub const SYSCTLS: &[&str] = &[
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
    "net.core.netdev_max_backlog",
    "net.core.default_qdisc",
    "net.core.busy_poll",
    "net.core.busy_read",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_ecn",
    "net.ipv4.ip_forward",
    "net.ipv4.ip_no_pmtu_disc",
    "net.ipv6.conf.all.forwarding",
];

/// `ethtool -i` fields.
pub fn parse_ethtool_i(text: &str) -> (Option<String>, Option<String>, Option<String>) {
    let mut driver = None;
    let mut version = None;
    let mut fw = None;
    for l in text.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if v.is_empty() || v == "N/A" {
            continue;
        }
        match k.trim() {
            "driver" => driver = Some(v.to_string()),
            "version" => version = Some(v.to_string()),
            "firmware-version" => fw = Some(v.to_string()),
            _ => {}
        }
    }
    (driver, version, fw)
}

/// The offloads that change results, from `ethtool -k`.
pub const OFFLOADS: &[&str] = &[
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "large-receive-offload",
    "rx-checksumming",
    "tx-checksumming",
    "rx-gro-hw",
    "tx-udp-segmentation",
];

/// The [`OFFLOADS`] of `ethtool -k` output, name to on/off.
pub fn parse_ethtool_k(text: &str) -> BTreeMap<String, bool> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let k = k.trim();
        if OFFLOADS.contains(&k) {
            m.insert(k.to_string(), v.trim_start().starts_with("on"));
        }
    }
    m
}

/// Interfaces with MTU, state and addresses from `ip -j addr show`.
pub fn parse_ip_addr(text: &str) -> Vec<IfaceMeta> {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let mut out = Vec::new();
    for l in v.as_array().into_iter().flatten() {
        let Some(name) = l.get("ifname").and_then(|x| x.as_str()) else {
            continue;
        };
        let flags: Vec<&str> = l
            .get("flags")
            .and_then(|f| f.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        let addresses = l
            .get("addr_info")
            .and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|ai| {
                        let local = ai.get("local")?.as_str()?;
                        let plen = ai.get("prefixlen")?.as_u64()?;
                        Some(format!("{local}/{plen}"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(IfaceMeta {
            name: name.to_string(),
            mtu: l.get("mtu").and_then(|x| x.as_u64()).unwrap_or(0) as u32,
            up: flags.contains(&"UP"),
            mac: l
                .get("address")
                .and_then(|x| x.as_str())
                .map(str::to_string),
            addresses,
            ..Default::default()
        });
    }
    out
}

/// The interface the route to `dest` leaves by (`ip -j route get`).
pub fn route_iface(dest: std::net::IpAddr) -> Option<String> {
    let ip = tool("ip")?;
    let t = output(Command::new(ip).args(["-j", "route", "get", &dest.to_string()]))?;
    parse_route_get(&t)
}

/// `dev` of the first entry of `ip -j route get` output.
pub fn parse_route_get(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let dev = v.as_array()?.first()?.get("dev")?.as_str()?;
    (dev != "lo").then(|| dev.to_string())
}

/// The interfaces carrying this agent's own SSH connection: the one that
/// holds the server address of `SSH_CONNECTION` ("client port server
/// port") and the one the route back to the client leaves by (they differ
/// with asymmetric routing). Empty when the agent was not started by sshd.
pub fn mgmt_ifaces() -> Vec<String> {
    let Ok(conn) = std::env::var("SSH_CONNECTION") else {
        return Vec::new();
    };
    let (client, server) = match ssh_connection_addrs(&conn) {
        Some(a) => a,
        None => return Vec::new(),
    };
    let mut v = Vec::new();
    let addrs = tool("ip")
        .and_then(|ip| output(Command::new(ip).args(["-j", "addr", "show"])))
        .map(|t| parse_ip_addr(&t))
        .unwrap_or_default();
    for i in &addrs {
        let holds = i
            .addresses
            .iter()
            .any(|a| a.split('/').next().and_then(|x| x.parse().ok()) == Some(server));
        if holds && i.name != "lo" {
            v.push(i.name.clone());
        }
    }
    v.extend(route_iface(client));
    v.sort();
    v.dedup();
    v
}

/// (client, server) addresses of an `SSH_CONNECTION` value; an IPv6
/// address may carry a `%zone`.
pub fn ssh_connection_addrs(v: &str) -> Option<(std::net::IpAddr, std::net::IpAddr)> {
    let f: Vec<&str> = v.split_whitespace().collect();
    let addr = |s: &str| s.split('%').next()?.parse().ok();
    match f.as_slice() {
        [c, _, s, _] => Some((addr(c)?, addr(s)?)),
        _ => None,
    }
}

/// Current MTU of an interface.
pub fn iface_mtu(iface: &str) -> Option<u32> {
    #[cfg(windows)]
    {
        crate::win::iface_mtu(iface)
    }
    #[cfg(not(windows))]
    {
        read_trim(format!("/sys/class/net/{iface}/mtu"))?
            .parse()
            .ok()
    }
}

#[cfg(not(windows))]
fn clock_sync() -> ClockSync {
    let chrony = tool("chronyc")
        .and_then(|c| output(Command::new(c).args(["-n", "tracking"])))
        .map(|t| {
            t.lines()
                .filter(|l| {
                    ["Reference ID", "Stratum", "System time", "Leap status"]
                        .iter()
                        .any(|k| l.starts_with(k))
                })
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("; ")
        });
    let timesyncd = if Path::new("/run/systemd/timesync").exists() {
        Some(Path::new("/run/systemd/timesync/synchronized").exists())
    } else {
        None
    };
    let mut ptp_devices: Vec<String> = std::fs::read_dir("/dev")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ptp"))
                .collect()
        })
        .unwrap_or_default();
    ptp_devices.sort();
    let mut ptp_daemons: Vec<String> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .filter_map(|e| read_trim(e.path().join("comm")))
                .filter(|c| c == "ptp4l" || c == "phc2sys")
                .collect()
        })
        .unwrap_or_default();
    ptp_daemons.sort();
    ptp_daemons.dedup();
    ClockSync {
        chrony,
        timesyncd,
        ptp_devices,
        ptp_daemons,
    }
}

fn os_name() -> String {
    #[cfg(windows)]
    return crate::win::os_name();
    #[cfg(not(windows))]
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string())
}

#[cfg(not(windows))]
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// Everything about this host a result should carry.
pub fn metadata(tool_version: &str) -> HostMeta {
    #[cfg(windows)]
    let mut interfaces = crate::win::interfaces();
    #[cfg(not(windows))]
    let mut interfaces = tool("ip")
        .and_then(|ip| output(Command::new(ip).args(["-j", "addr", "show"])))
        .map(|t| parse_ip_addr(&t))
        .unwrap_or_default();
    let ethtool = tool("ethtool");
    for i in interfaces.iter_mut().filter(|i| i.name != "lo") {
        if let Some(e) = &ethtool {
            if let Some(t) = output(Command::new(e).args(["-i", &i.name])) {
                (i.driver, i.driver_version, i.firmware) = parse_ethtool_i(&t);
            }
            if let Some(t) = output(Command::new(e).args(["-k", &i.name])) {
                i.offloads = parse_ethtool_k(&t);
            }
        }
        if i.speed_mbit.is_none() {
            i.speed_mbit = read_trim(format!("/sys/class/net/{}/speed", i.name))
                .and_then(|s| s.parse::<i64>().ok())
                .filter(|&s| s > 0)
                .map(|s| s as u64);
        }
    }
    // Windows has no sysctls, /proc or chrony; its facts come from win.rs.
    #[cfg(windows)]
    let (sysctls, clock, kernel, cpu_model) = (
        BTreeMap::new(),
        ClockSync::default(),
        crate::win::os_version(),
        crate::win::cpu_model(),
    );
    #[cfg(not(windows))]
    let (clock, kernel, cpu_model) = (
        clock_sync(),
        read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        cpu_model(),
    );
    #[cfg(not(windows))]
    let sysctls = SYSCTLS
        .iter()
        .filter_map(|k| {
            let v = read_trim(format!("/proc/sys/{}", k.replace('.', "/")))?;
            Some((
                k.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            ))
        })
        .collect();
    HostMeta {
        hostname: hostname(),
        os: os_name(),
        kernel,
        arch: std::env::consts::ARCH.to_string(),
        cpu_model,
        cpus: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        tool_version: tool_version.to_string(),
        interfaces,
        sysctls,
        clock,
        net_admin: net_admin(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_per_core() {
        let s = "cpu  10 1 20 300 4 5 6 7 0 0\ncpu0 5 0 10 150 2 3 3 0\ncpu1 5 1 10 150 2 2 3 7\nintr 1 2\n";
        let (t, c) = parse_proc_stat(s);
        assert_eq!(c.len(), 2);
        assert_eq!((t.user, t.irq, t.softirq, t.steal), (10, 5, 6, 7));
        assert_eq!(c[1].nice, 1);
        assert_eq!(t.total(), 353);
    }

    #[test]
    fn pid_stat_with_odd_name() {
        let s = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0 1 0";
        assert_eq!(parse_pid_stat(s), Some((111, 222)));
    }

    #[test]
    fn ethtool_parsers() {
        let i =
            "driver: ixgbe\nversion: 6.1.0\nfirmware-version: 0x800003df\nbus-info: 0000:01:00.0\n";
        assert_eq!(
            parse_ethtool_i(i),
            (
                Some("ixgbe".into()),
                Some("6.1.0".into()),
                Some("0x800003df".into())
            )
        );
        let k = "Features for eth0:\nrx-checksumming: on\ntcp-segmentation-offload: off\n\ttx-tcp-segmentation: off\ngeneric-receive-offload: on [fixed]\n";
        let m = parse_ethtool_k(k);
        assert_eq!(m.len(), 3);
        assert!(m["generic-receive-offload"]);
        assert!(!m["tcp-segmentation-offload"]);
    }

    #[test]
    fn ip_addr_parse() {
        let t = r#"[{"ifindex":2,"ifname":"eth0","flags":["BROADCAST","UP"],"mtu":9000,"address":"aa:bb","addr_info":[{"family":"inet","local":"10.0.1.1","prefixlen":24},{"family":"inet6","local":"fd00::1","prefixlen":64}]}]"#;
        let v = parse_ip_addr(t);
        assert_eq!(v[0].mtu, 9000);
        assert!(v[0].up);
        assert_eq!(v[0].addresses, vec!["10.0.1.1/24", "fd00::1/64"]);
    }

    #[test]
    fn management_path_parsers() {
        let (c, s) = ssh_connection_addrs("10.9.0.1 51234 10.9.0.2 22").unwrap();
        assert_eq!(
            (c.to_string(), s.to_string()),
            ("10.9.0.1".into(), "10.9.0.2".into())
        );
        let (c, _) = ssh_connection_addrs("fe80::1%eth0 5 fe80::2%eth0 22").unwrap();
        assert_eq!(c.to_string(), "fe80::1");
        assert!(ssh_connection_addrs("garbage").is_none());
        let r = r#"[{"dst":"10.0.2.2","gateway":"10.0.1.254","dev":"eth1","prefsrc":"10.0.1.1","flags":[],"uid":0,"cache":[]}]"#;
        assert_eq!(parse_route_get(r).as_deref(), Some("eth1"));
        assert_eq!(parse_route_get(r#"[{"dst":"127.0.0.1","dev":"lo"}]"#), None);
        assert_eq!(parse_route_get("[]"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn live_readers() {
        let s = cpu_sample();
        assert!(!s.cores.is_empty());
        assert!(s.total.total() > 0);
        assert!(pid_ticks(std::process::id()).is_some());
        let m = metadata("t");
        assert!(!m.kernel.is_empty());
        assert!(m.sysctls.contains_key("net.core.rmem_max"));
    }
}
