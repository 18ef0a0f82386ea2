//! Windows host counters from the system's own APIs: GetSystemTimes (host
//! CPU: idle, kernel, user), NtQuerySystemInformation (the same per
//! processor, with DPC and interrupt time), GetThreadTimes /
//! GetProcessTimes (the engine's own CPU, and any process's for the
//! agent), GetIfTable2 (interface counters, MTU, state, speed),
//! GetUdpStatisticsEx (UDP datagrams the host discarded), RtlGetVersion (the
//! real version; GetVersionEx lies to programs without a manifest).
//! Public beyond the engine because the agent reports the same counters.
//! TCP_INFO of the Linux kind and the path-MTU socket option are not read:
//! those stay unknown. Interrupt time is part of kernel time, so `softirq`
//! stays 0 and `system` includes it.

use super::{CpuTime, HostCpu};
use windows_sys::Win32::Foundation::FILETIME;
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetCurrentThread, GetProcessTimes, GetSystemTimes, GetThreadTimes,
};

fn ticks(f: FILETIME) -> u64 {
    (u64::from(f.dwHighDateTime) << 32) | u64::from(f.dwLowDateTime)
}

const ZERO: FILETIME = FILETIME {
    dwLowDateTime: 0,
    dwHighDateTime: 0,
};

/// Host CPU in 100 ns units, summed over all processors.
pub fn host_cpu() -> HostCpu {
    let (mut idle, mut kernel, mut user) = (ZERO, ZERO, ZERO);
    // SAFETY: three FILETIMEs we own.
    if unsafe { GetSystemTimes(&mut idle, &mut kernel, &mut user) } == 0 {
        return HostCpu::default();
    }
    let idle = ticks(idle);
    HostCpu {
        user: ticks(user),
        // Kernel time includes the idle loop.
        system: ticks(kernel).saturating_sub(idle),
        softirq: 0,
        idle,
        // Windows does not count it.
        steal: 0,
    }
}

/// Length of a second in the host counters' ticks (100 ns).
pub fn host_cpu_ticks_per_s() -> f64 {
    1e7
}

fn cpu_time(kernel: FILETIME, user: FILETIME) -> CpuTime {
    CpuTime {
        user: ticks(user) as f64 * 1e-7,
        system: ticks(kernel) as f64 * 1e-7,
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> CpuTime {
    let (mut c, mut e, mut k, mut u) = (ZERO, ZERO, ZERO, ZERO);
    // SAFETY: the pseudo-handle of the calling thread; four FILETIMEs we own.
    if unsafe { GetThreadTimes(GetCurrentThread(), &mut c, &mut e, &mut k, &mut u) } == 0 {
        return CpuTime::default();
    }
    cpu_time(k, u)
}

/// CPU time of this process.
pub fn process_cpu() -> CpuTime {
    let (mut c, mut e, mut k, mut u) = (ZERO, ZERO, ZERO, ZERO);
    // SAFETY: the pseudo-handle of this process; four FILETIMEs we own.
    if unsafe { GetProcessTimes(GetCurrentProcess(), &mut c, &mut e, &mut k, &mut u) } == 0 {
        return CpuTime::default();
    }
    cpu_time(k, u)
}

/// "Windows 10.0.19045" (major.minor.build).
pub fn kernel_release() -> String {
    use windows_sys::Wdk::System::SystemServices::RtlGetVersion;
    use windows_sys::Win32::System::SystemInformation::OSVERSIONINFOW;
    // SAFETY: a zeroed OSVERSIONINFOW with its size set is what
    // RtlGetVersion expects; it only writes into it.
    unsafe {
        let mut v: OSVERSIONINFOW = std::mem::zeroed();
        v.dwOSVersionInfoSize = std::mem::size_of::<OSVERSIONINFOW>() as u32;
        if RtlGetVersion(&mut v) != 0 {
            return String::new();
        }
        format!(
            "Windows {}.{}.{}",
            v.dwMajorVersion, v.dwMinorVersion, v.dwBuildNumber
        )
    }
}

/// UDP datagrams the host discarded for a reason other than "no socket on
/// that port" (IPv4 plus IPv6): MIB-II udpInErrors, which on Windows counts
/// full receive buffers (and the rare bad checksum). The closest Windows
/// has to Linux's RcvbufErrors; host-wide, like it.
pub fn udp_rcvbuf_errors() -> u64 {
    use windows_sys::Win32::NetworkManagement::IpHelper::{GetUdpStatisticsEx, MIB_UDPSTATS};
    use windows_sys::Win32::Networking::WinSock::{AF_INET, AF_INET6};
    [AF_INET, AF_INET6]
        .iter()
        .map(|&af| {
            let mut st = MIB_UDPSTATS {
                dwInDatagrams: 0,
                dwNoPorts: 0,
                dwInErrors: 0,
                dwOutDatagrams: 0,
                dwNumAddrs: 0,
            };
            // SAFETY: a MIB_UDPSTATS we own; the call only writes it.
            let r = unsafe { GetUdpStatisticsEx(&mut st, u32::from(af)) };
            if r == 0 {
                u64::from(st.dwInErrors)
            } else {
                0
            }
        })
        .sum()
}

/// One network interface as GetIfTable2 reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IfRow {
    /// The interface's alias ("Ethernet", "Wi-Fi"), as `netsh` and
    /// PowerShell name it.
    pub name: String,
    /// A loopback interface.
    pub loopback: bool,
    /// Operationally up.
    pub up: bool,
    /// Interface MTU.
    pub mtu: u32,
    /// "aa:bb:cc:dd:ee:ff"; None without a hardware address.
    pub mac: Option<String>,
    /// Receive link speed in bit/s (0: unknown).
    pub speed_bps: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets discarded on receive.
    pub rx_dropped: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets discarded on send.
    pub tx_dropped: u64,
    /// Send errors.
    pub tx_errors: u64,
}

fn wide(s: &[u16]) -> String {
    let n = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf16_lossy(&s[..n])
}

/// Every interface of the host (empty when the table cannot be read).
/// Windows lists filter and virtual sub-interfaces under the same alias as
/// the adapter; the first row of each alias is kept, which is the adapter.
pub fn interfaces() -> Vec<IfRow> {
    use windows_sys::Win32::NetworkManagement::IpHelper::{
        FreeMibTable, GetIfTable2, IF_TYPE_SOFTWARE_LOOPBACK, MIB_IF_TABLE2,
    };
    use windows_sys::Win32::NetworkManagement::Ndis::IfOperStatusUp;
    let mut table: *mut MIB_IF_TABLE2 = std::ptr::null_mut();
    // SAFETY: GetIfTable2 allocates the table and stores its address in
    // `table`; it is released with FreeMibTable below.
    if unsafe { GetIfTable2(&mut table) } != 0 || table.is_null() {
        return Vec::new();
    }
    // SAFETY: on success `table` points at NumEntries rows laid out from
    // `Table` on (the C flexible-array idiom); they live until FreeMibTable.
    let rows = unsafe {
        let n = (*table).NumEntries as usize;
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*table).Table)
                .cast::<windows_sys::Win32::NetworkManagement::IpHelper::MIB_IF_ROW2>(),
            n,
        )
    };
    let mut out: Vec<IfRow> = Vec::new();
    for r in rows {
        let name = wide(&r.Alias);
        if name.is_empty() || out.iter().any(|o| o.name == name) {
            continue;
        }
        let mac_len = (r.PhysicalAddressLength as usize).min(r.PhysicalAddress.len());
        let mac = (mac_len > 0).then(|| {
            r.PhysicalAddress[..mac_len]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        });
        out.push(IfRow {
            name,
            loopback: r.Type == IF_TYPE_SOFTWARE_LOOPBACK,
            up: r.OperStatus == IfOperStatusUp,
            mtu: r.Mtu,
            mac,
            speed_bps: if r.ReceiveLinkSpeed == u64::MAX {
                0
            } else {
                r.ReceiveLinkSpeed
            },
            rx_packets: r.InUcastPkts + r.InNUcastPkts,
            rx_bytes: r.InOctets,
            rx_dropped: r.InDiscards,
            rx_errors: r.InErrors,
            tx_packets: r.OutUcastPkts + r.OutNUcastPkts,
            tx_bytes: r.OutOctets,
            tx_dropped: r.OutDiscards,
            tx_errors: r.OutErrors,
        });
    }
    // SAFETY: the table GetIfTable2 allocated, freed once; `rows` is not
    // used after this.
    unsafe { FreeMibTable(table.cast()) };
    out
}

/// Largest MTU of the host's up interfaces other than loopback.
pub fn interface_mtu() -> Option<u32> {
    interfaces()
        .iter()
        .filter(|i| i.up && !i.loopback)
        .map(|i| i.mtu)
        .max()
}

/// One processor's cumulative times in 100 ns units. `kernel` includes
/// `idle`, `dpc` and `interrupt`, as Windows reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTimes {
    /// Idle time.
    pub idle: u64,
    /// Kernel time, idle, DPC and interrupt time included.
    pub kernel: u64,
    /// User time.
    pub user: u64,
    /// Deferred procedure call time.
    pub dpc: u64,
    /// Hardware interrupt time.
    pub interrupt: u64,
}

/// Per-processor times (empty when the system does not say).
pub fn core_times() -> Vec<CoreTimes> {
    use windows_sys::Wdk::System::SystemInformation::{
        NtQuerySystemInformation, SystemProcessorPerformanceInformation,
    };
    use windows_sys::Win32::System::WindowsProgramming::SYSTEM_PROCESSOR_PERFORMANCE_INFORMATION as Info;
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .max(1);
    // Room for more processors than this process may use (processor groups).
    let cap = (n * 4).max(64);
    // SAFETY: Info is plain integers; all zeros is valid.
    let mut buf: Vec<Info> = vec![unsafe { std::mem::zeroed() }; cap];
    let mut len = 0u32;
    let bytes = (cap * std::mem::size_of::<Info>()) as u32;
    // SAFETY: the buffer is `bytes` long and holds Info records, which is
    // what this information class writes; `len` gets the bytes written.
    let st = unsafe {
        NtQuerySystemInformation(
            SystemProcessorPerformanceInformation,
            buf.as_mut_ptr().cast(),
            bytes,
            &mut len,
        )
    };
    if st < 0 {
        return Vec::new();
    }
    let got = (len as usize / std::mem::size_of::<Info>()).min(cap);
    buf.truncate(got);
    buf.iter()
        .map(|i| CoreTimes {
            idle: i.IdleTime as u64,
            kernel: i.KernelTime as u64,
            user: i.UserTime as u64,
            // Reserved1 is [DpcTime, InterruptTime] in the documented layout.
            dpc: i.Reserved1[0] as u64,
            interrupt: i.Reserved1[1] as u64,
        })
        .collect()
}

/// Another process's (user, kernel) CPU in 100 ns units, if it can be
/// opened (it exists and belongs to us).
pub fn pid_times(pid: u32) -> Option<(u64, u64)> {
    use windows_sys::Win32::Foundation::CloseHandle;
    use windows_sys::Win32::System::Threading::{OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION};
    // SAFETY: OpenProcess has no memory preconditions; a null handle is
    // checked before use.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if h.is_null() {
        return None;
    }
    let (mut c, mut e, mut k, mut u) = (ZERO, ZERO, ZERO, ZERO);
    // SAFETY: a handle we opened above; four FILETIMEs we own.
    let ok = unsafe { GetProcessTimes(h, &mut c, &mut e, &mut k, &mut u) } != 0;
    // SAFETY: the handle is ours and closed once.
    unsafe { CloseHandle(h) };
    ok.then(|| (ticks(u), ticks(k)))
}
