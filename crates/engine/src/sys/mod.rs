//! Host counters the engine reads around a run: UDP receive-buffer drops,
//! host CPU, process/thread CPU, TCP_INFO, path MTU, the system's name and
//! release, CPU count. The types are shared; the readers are per system,
//! chosen at compile time: `linux.rs` (/proc, getrusage, TCP_INFO, IP_MTU),
//! `windows.rs` (GetSystemTimes, GetThreadTimes/GetProcessTimes,
//! GetUdpStatisticsEx, GetIfTable2, RtlGetVersion), `unix.rs` (macOS and FreeBSD: getrusage and uname).
//!
//! Every reader degrades to "unknown" (None or zero) instead of failing:
//! a missing counter must not abort a measurement. What a system cannot
//! tell is listed in docs/platforms.md.

pub use wirebench_stats::result::{CpuTime, HostCpuShare, HostInfo, TcpInfo};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;

#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
use windows as imp;

#[cfg(all(unix, not(target_os = "linux")))]
mod unix;
#[cfg(all(unix, not(target_os = "linux")))]
use unix as imp;

#[cfg(target_os = "linux")]
pub use imp::{interface_mtu, path_mtu, tcp_info, udp_rcvbuf_errors, udp_sndbuf_errors};
#[cfg(windows)]
pub use imp::{interface_mtu, udp_rcvbuf_errors};
#[cfg(all(unix, not(target_os = "linux")))]
pub use unknown::{interface_mtu, udp_rcvbuf_errors};
#[cfg(not(target_os = "linux"))]
pub use unknown::{path_mtu, tcp_info, udp_sndbuf_errors};

/// What only the Linux (and partly the Windows) readers know yet;
/// elsewhere it stays unknown.
#[cfg(not(target_os = "linux"))]
mod unknown {
    use super::TcpInfo;
    use crate::net::AsRawFd;

    /// No per-host UDP buffer-drop counter is read here.
    #[cfg(unix)]
    pub fn udp_rcvbuf_errors() -> u64 {
        0
    }

    /// No per-host UDP send-drop counter is read here.
    pub fn udp_sndbuf_errors() -> u64 {
        0
    }

    /// None: TCP_INFO is not read on this system.
    pub fn tcp_info(_sock: &impl AsRawFd) -> Option<TcpInfo> {
        None
    }

    /// None: the path MTU is not read on this system.
    pub fn path_mtu(_sock: &impl AsRawFd, _v6: bool) -> Option<u32> {
        None
    }

    #[cfg(unix)]
    /// None: the interface MTU is not read on this system.
    pub fn interface_mtu() -> Option<u32> {
        None
    }
}

/// getrusage as CPU seconds (`who`: RUSAGE_SELF / RUSAGE_THREAD).
#[cfg(unix)]
fn from_rusage(who: libc::c_int) -> CpuTime {
    // SAFETY: rusage is plain integers; all zeros is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return CpuTime::default();
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    CpuTime {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
    }
}

/// Cumulative host CPU time in the system's own ticks
/// ([`host_cpu_share`] knows their length).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostCpu {
    /// Time in user mode.
    pub user: u64,
    /// Time in the kernel.
    pub system: u64,
    /// Time serving software interrupts (the network stack's receive work).
    pub softirq: u64,
    /// Idle time.
    pub idle: u64,
    /// Time the hypervisor ran something else on these (virtual) CPUs.
    pub steal: u64,
}

impl HostCpu {
    /// Reads the host's counters now.
    pub fn read() -> Self {
        imp::host_cpu()
    }
}

/// Shares of the host's CPU time between two readings `secs` apart.
pub fn host_cpu_share(a: HostCpu, b: HostCpu, secs: f64) -> HostCpuShare {
    let hz = imp::host_cpu_ticks_per_s();
    let f = |x: u64, y: u64| {
        if secs > 0.0 {
            y.saturating_sub(x) as f64 / hz / secs
        } else {
            0.0
        }
    };
    HostCpuShare {
        user: f(a.user, b.user),
        system: f(a.system, b.system),
        softirq: f(a.softirq, b.softirq),
        idle: f(a.idle, b.idle),
        steal: f(a.steal, b.steal),
    }
}

/// Reading CPU time from the system (the type itself is the result
/// document's, in wirebench-stats).
pub trait CpuClock: Sized {
    /// CPU time of the calling thread. Sessions of the daemon run in their
    /// own threads, so summing thread times gives one session's cost even
    /// when several run at once.
    fn thread() -> Self;
    /// CPU time of the whole process.
    fn process() -> Self;
}

impl CpuClock for CpuTime {
    fn thread() -> Self {
        imp::thread_cpu()
    }

    fn process() -> Self {
        imp::process_cpu()
    }
}

/// What the result document says about this host.
pub fn host_info() -> HostInfo {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    HostInfo {
        kernel: imp::kernel_release(),
        cpus,
        os: std::env::consts::OS.to_string(),
        send_path: crate::net::SEND_PATH.to_string(),
        rx_timestamps: crate::net::RX_TIMESTAMPS.to_string(),
    }
}

/// Raises the soft limit on open files to the hard limit (Unix), so that a
/// session of thousands of flows (a socket each, on both ends) is not
/// refused at the default 1024. Returns the soft limit now in force (None
/// where there is no such limit).
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the live struct passed.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return None;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            // SAFETY: setrlimit only reads the live struct passed.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is i64 on FreeBSD
        Some(r.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_readers_do_not_fail() {
        let _ = udp_rcvbuf_errors();
        let _ = udp_sndbuf_errors();
        let _ = HostCpu::read();
        let h = host_info();
        assert!(h.cpus >= 1);
        assert_eq!(h.os, std::env::consts::OS);
        assert!(!h.send_path.is_empty() && !h.rx_timestamps.is_empty());
        let t = CpuTime::thread();
        assert!(t.user >= 0.0);
    }

    #[test]
    fn old_host_info_reads() {
        let h: HostInfo = serde_json::from_str(r#"{"kernel":"6.1.0","cpus":2}"#).unwrap();
        assert_eq!(h.cpus, 2);
        assert!(h.os.is_empty());
    }
}
