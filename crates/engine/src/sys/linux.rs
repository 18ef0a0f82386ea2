//! Linux host counters: /proc/net/snmp(6) for UDP receive-buffer drops,
//! /proc/stat for host CPU, getrusage for process and thread CPU,
//! TCP_INFO, IP_MTU / IPV6_MTU, /sys/class/net for interface MTUs.

use super::{from_rusage, CpuTime, HostCpu, TcpInfo};
use std::os::fd::AsRawFd;
/// UDP datagrams dropped because a socket's receive buffer was full, summed
/// over IPv4 and IPv6, for the whole network namespace.
pub fn udp_rcvbuf_errors() -> u64 {
    udp_snmp_counter("RcvbufErrors")
}

/// UDP datagrams the sending host dropped: the socket's send buffer or the
/// interface queue (a full qdisc) refused them after `send()` succeeded
/// (Linux counts a qdisc drop as SndbufErrors unless IP_RECVERR is set).
/// Summed over IPv4 and IPv6, whole network namespace.
pub fn udp_sndbuf_errors() -> u64 {
    udp_snmp_counter("SndbufErrors")
}

/// One `Udp:` counter of /proc/net/snmp plus its `Udp6` twin in snmp6.
fn udp_snmp_counter(name: &str) -> u64 {
    let mut total = 0;
    if let Ok(s) = std::fs::read_to_string("/proc/net/snmp") {
        total += parse_snmp_udp(&s, name).unwrap_or(0);
    }
    if let Ok(s) = std::fs::read_to_string("/proc/net/snmp6") {
        total += parse_snmp6(&s, &format!("Udp6{name}")).unwrap_or(0);
    }
    total
}

/// /proc/net/snmp has a header line "Udp: name name ..." followed by a value
/// line "Udp: v v ...".
fn parse_snmp_udp(s: &str, name: &str) -> Option<u64> {
    let mut lines = s.lines().filter(|l| l.starts_with("Udp:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let idx = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(idx)?.parse().ok()
}

/// /proc/net/snmp6 has one "Name value" pair per line.
fn parse_snmp6(s: &str, name: &str) -> Option<u64> {
    s.lines().find_map(|line| {
        let mut it = line.split_whitespace();
        (it.next() == Some(name)).then(|| it.next()?.parse().ok())?
    })
}

/// Cumulative host CPU time in clock ticks from the first line of /proc/stat.
pub fn host_cpu() -> HostCpu {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| parse_proc_stat(&s))
        .unwrap_or_default()
}

fn parse_proc_stat(s: &str) -> Option<HostCpu> {
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ... (steal since
    // Linux 2.6.11)
    if v.len() < 7 {
        return None;
    }
    Some(HostCpu {
        user: v[0] + v[1],
        system: v[2] + v[5],
        softirq: v[6],
        idle: v[3] + v[4],
        steal: v.get(7).copied().unwrap_or(0),
    })
}

/// /proc/stat counts in USER_HZ ticks.
pub fn host_cpu_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no memory preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

pub fn thread_cpu() -> CpuTime {
    from_rusage(libc::RUSAGE_THREAD)
}

pub fn process_cpu() -> CpuTime {
    from_rusage(libc::RUSAGE_SELF)
}

/// The kernel's TCP_INFO of a TCP socket; None when it cannot be read.
pub fn tcp_info(sock: &impl AsRawFd) -> Option<TcpInfo> {
    // SAFETY: tcp_info is plain integers; all zeros is valid.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes, the size of `ti`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut ti as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    // An older kernel writes a shorter struct: a field it did not reach is
    // unknown, not zero. Rates are bytes per second; u64::MAX means no
    // limit (not pacing).
    let reached = |end: usize| len as usize >= end;
    let rate = |v: u64, at: usize| (reached(at + 8) && v != u64::MAX).then_some(v as f64 * 8.0);
    Some(TcpInfo {
        retransmits: ti.tcpi_total_retrans as u64,
        rtt_s: ti.tcpi_rtt as f64 * 1e-6,
        cwnd_bytes: ti.tcpi_snd_cwnd as u64 * ti.tcpi_snd_mss as u64,
        mss: ti.tcpi_snd_mss as u64,
        pacing_rate_bps: rate(
            ti.tcpi_pacing_rate,
            std::mem::offset_of!(libc::tcp_info, tcpi_pacing_rate),
        ),
        delivery_rate_bps: rate(
            ti.tcpi_delivery_rate,
            std::mem::offset_of!(libc::tcp_info, tcpi_delivery_rate),
        ),
    })
}

/// Path MTU known to the kernel for a connected socket (IP_MTU / IPV6_MTU).
pub fn path_mtu(sock: &impl AsRawFd, v6: bool) -> Option<u32> {
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let (level, opt) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    // SAFETY: the kernel writes at most `len` bytes, the size of `mtu`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            &mut mtu as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0 && mtu > 0).then_some(mtu as u32)
}

/// Largest MTU of the host's up interfaces, the fallback when the path MTU
/// cannot be asked.
pub fn interface_mtu() -> Option<u32> {
    let dir = std::fs::read_dir("/sys/class/net").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("mtu")).ok())
        .filter_map(|s| s.trim().parse::<u32>().ok())
        .max()
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback connection that carried data reports its pacing and
    /// delivery rates (kernels since 4.9 fill both), the rest as before.
    #[test]
    fn tcp_info_reads_pacing_and_delivery_rates() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let data = vec![7u8; 1 << 20];
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < buf.len() {
                got += s.read(&mut buf[got..]).unwrap();
            }
        });
        c.write_all(&data).unwrap();
        reader.join().unwrap();
        let t = tcp_info(&c).unwrap();
        assert!(t.mss > 0 && t.cwnd_bytes >= t.mss, "{t:?}");
        let pacing = t.pacing_rate_bps.unwrap();
        let delivery = t.delivery_rate_bps.unwrap();
        // Loopback: well above 1 Mbit/s, below 10 Tbit/s.
        assert!((1e6..1e13).contains(&pacing), "{t:?}");
        assert!((1e6..1e13).contains(&delivery), "{t:?}");
    }

    #[test]
    fn snmp_parse() {
        let s = "Ip: a b\nIp: 1 2\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 10 0 3 9 7 0\nUdpLite: x\n";
        assert_eq!(parse_snmp_udp(s, "RcvbufErrors"), Some(7));
        assert_eq!(parse_snmp_udp(s, "SndbufErrors"), Some(0));
        let s6 = "Udp6InDatagrams 5\nUdp6RcvbufErrors 2\nUdp6SndbufErrors 31\n";
        assert_eq!(parse_snmp6(s6, "Udp6SndbufErrors"), Some(31));
        assert_eq!(parse_snmp6(s6, "Udp6Nope"), None);
    }

    #[test]
    fn proc_stat_parse() {
        let s = "cpu  10 1 20 300 4 5 6 7 0 0\ncpu0 1 1 1 1 1 1 1\n";
        let c = parse_proc_stat(s).unwrap();
        assert_eq!(
            (c.user, c.system, c.softirq, c.idle, c.steal),
            (11, 25, 6, 304, 7)
        );
        // A kernel older than the steal column.
        let c = parse_proc_stat("cpu  10 1 20 300 4 5 6\n").unwrap();
        assert_eq!((c.softirq, c.steal), (6, 0));
    }
}
