//! The agent's Windows side, through the system's own APIs (the engine's
//! Windows readers for counters, windows-sys for the rest):
//!
//! - children: a job object with "kill on close" holds every child, so
//!   when the agent ends in any way — even TerminateProcess — Windows ends
//!   its receivers and senders (what PR_SET_PDEATHSIG does on Linux); each
//!   child gets its own console process group, so a Ctrl-C meant for the
//!   agent does not reach them before the agent stops them in order;
//! - console events (Ctrl-C, Ctrl-Break, the console closing, log-off,
//!   shutdown) run the same cleanup as SIGINT/SIGTERM/SIGHUP on Unix;
//! - "does the receiver listen yet?" from the TCP listener table with
//!   owning process ids (GetExtendedTcpTable);
//! - CPU per processor (DPC time reported as softirq, interrupt time as
//!   irq), a child's CPU, interface counters and metadata.

use crate::proto::{CoreTicks, IfaceMeta};
use crate::server::Shared;
use std::collections::BTreeMap;
use std::os::windows::io::AsRawHandle;
use std::os::windows::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;
use windows_sys::Win32::Foundation::{BOOL, HANDLE};
use wirebench_engine::sys::windows as sys;

/// Own console process group, no console window of its own.
pub fn detach(cmd: &mut Command) {
    use windows_sys::Win32::System::Threading::{CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW};
    cmd.creation_flags(CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
}

/// The job object every child joins; created on first use. Stored as an
/// address because a HANDLE is a raw pointer (not Sync); None when the
/// system refused to create one (children then only end when stopped).
fn job() -> Option<isize> {
    static JOB: OnceLock<Option<isize>> = OnceLock::new();
    *JOB.get_or_init(|| {
        use windows_sys::Win32::System::JobObjects::{
            CreateJobObjectW, JobObjectExtendedLimitInformation, SetInformationJobObject,
            JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
        };
        // SAFETY: an anonymous job with default security; null is checked.
        let h = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if h.is_null() {
            return None;
        }
        // SAFETY: the struct is plain integers; all zeros is valid.
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: the job handle created above and a struct of the size
        // this information class expects. The handle stays open for the
        // life of the process on purpose: its closing at exit is the point.
        let ok = unsafe {
            SetInformationJobObject(
                h,
                JobObjectExtendedLimitInformation,
                std::ptr::addr_of!(info).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        (ok != 0).then_some(h as isize)
    })
}

/// Puts a just-started child into the job (best effort: a child that
/// cannot join still runs and is stopped by the agent's cleanup).
pub fn adopt(child: &Child) {
    use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
    if let Some(j) = job() {
        // SAFETY: the job handle from job() and the child's process handle,
        // both open for the duration of the call.
        unsafe { AssignProcessToJobObject(j as HANDLE, child.as_raw_handle() as HANDLE) };
    }
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// Runs on a thread Windows starts for the console event; any code may run
/// there. Cleans up and exits so nothing the session started survives.
unsafe extern "system" fn on_console(event: u32) -> BOOL {
    if let Some(s) = SHARED.get() {
        for d in s.cleanup() {
            eprintln!("wirebench agent: {d}");
        }
    }
    // 130 as after SIGINT on Unix, 143 as after SIGTERM for the others.
    let code = if event <= 1 { 130 } else { 143 };
    std::process::exit(code)
}

/// Console Ctrl-C / Ctrl-Break / close / log-off / shutdown: stop the
/// children, restore every change, exit.
pub fn cleanup_on_console_event(shared: Shared) -> std::io::Result<()> {
    use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
    let _ = SHARED.set(shared);
    // Creating the job now means a failure shows at start, not mid-run.
    let _ = job();
    // SAFETY: registers a handler with the signature Windows expects; it
    // stays valid for the life of the process.
    if unsafe { SetConsoleCtrlHandler(Some(on_console), 1) } == 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// True when process `pid` has a TCP socket listening on `port` (IPv4 or
/// IPv6); under Wine, when any process does.
pub fn listening(pid: u32, port: u16) -> bool {
    use windows_sys::Win32::NetworkManagement::IpHelper::{
        GetExtendedTcpTable, MIB_TCP6ROW_OWNER_PID, MIB_TCPROW_OWNER_PID,
        TCP_TABLE_OWNER_PID_LISTENER,
    };
    use windows_sys::Win32::Networking::WinSock::{AF_INET, AF_INET6};
    // Rows are (state, local address, local port, ...) with the port in
    // network byte order in the low 16 bits.
    let want = u32::from(port.to_be());
    // Windows names the owner of every socket. Wine leaves it 0 (it cannot
    // map Linux sockets to its processes); 0 is the idle process on
    // Windows, which owns none, so it reads as "owner unknown".
    let owned = |owner: u32| owner == pid || owner == 0;
    for af in [AF_INET, AF_INET6] {
        let mut size = 0u32;
        // SAFETY: a null buffer asks for the size only.
        unsafe {
            GetExtendedTcpTable(
                std::ptr::null_mut(),
                &mut size,
                0,
                u32::from(af),
                TCP_TABLE_OWNER_PID_LISTENER,
                0,
            )
        };
        if size == 0 {
            continue;
        }
        // Room for sockets opened between the two calls; u64 for alignment.
        let mut buf = vec![0u64; (size as usize + 4096) / 8 + 1];
        let mut len = (buf.len() * 8) as u32;
        // SAFETY: the buffer is `len` bytes and 8-byte aligned.
        let r = unsafe {
            GetExtendedTcpTable(
                buf.as_mut_ptr().cast(),
                &mut len,
                0,
                u32::from(af),
                TCP_TABLE_OWNER_PID_LISTENER,
                0,
            )
        };
        if r != 0 {
            continue;
        }
        let base = buf.as_ptr().cast::<u8>();
        // SAFETY: a successful call wrote a u32 row count followed by that
        // many rows of the family's type, all inside `buf` (len bytes).
        let found = unsafe {
            let n = base.cast::<u32>().read() as usize;
            if af == AF_INET {
                let row = std::mem::size_of::<MIB_TCPROW_OWNER_PID>();
                let off = std::mem::align_of::<MIB_TCPROW_OWNER_PID>().max(4);
                (0..n.min((len as usize).saturating_sub(off) / row)).any(|i| {
                    let r = base
                        .add(off + i * row)
                        .cast::<MIB_TCPROW_OWNER_PID>()
                        .read_unaligned();
                    r.dwLocalPort & 0xffff == want && owned(r.dwOwningPid)
                })
            } else {
                let row = std::mem::size_of::<MIB_TCP6ROW_OWNER_PID>();
                let off = std::mem::align_of::<MIB_TCP6ROW_OWNER_PID>().max(4);
                (0..n.min((len as usize).saturating_sub(off) / row)).any(|i| {
                    let r = base
                        .add(off + i * row)
                        .cast::<MIB_TCP6ROW_OWNER_PID>()
                        .read_unaligned();
                    r.dwLocalPort & 0xffff == want && owned(r.dwOwningPid)
                })
            }
        };
        if found {
            return true;
        }
    }
    false
}

/// Host and per-processor CPU in 100 ns ticks (hz = 10 000 000).
pub fn cpu() -> (CoreTicks, Vec<CoreTicks>) {
    let cores: Vec<CoreTicks> = sys::core_times()
        .iter()
        .map(|c| CoreTicks {
            user: c.user,
            // Kernel time includes the idle loop, DPCs and interrupts.
            system: c
                .kernel
                .saturating_sub(c.idle)
                .saturating_sub(c.dpc)
                .saturating_sub(c.interrupt),
            idle: c.idle,
            irq: c.interrupt,
            softirq: c.dpc,
            ..Default::default()
        })
        .collect();
    let mut total = CoreTicks::default();
    for c in &cores {
        total.user += c.user;
        total.system += c.system;
        total.idle += c.idle;
        total.irq += c.irq;
        total.softirq += c.softirq;
    }
    if cores.is_empty() {
        let h = wirebench_engine::sys::HostCpu::read();
        total.user = h.user;
        total.system = h.system;
        total.idle = h.idle;
    }
    (total, cores)
}

pub const CPU_HZ: u64 = 10_000_000;

/// A child's (user, system) CPU in 100 ns ticks.
pub fn pid_ticks(pid: u32) -> Option<(u64, u64)> {
    sys::pid_times(pid)
}

/// Interface counters (loopback left out, as on Linux). Windows has no
/// qdisc: those counters stay 0.
pub fn counters() -> Result<BTreeMap<String, wirebench_testbed::IfaceCounters>, String> {
    let rows = sys::interfaces();
    if rows.is_empty() {
        return Err("GetIfTable2 returned no interfaces".into());
    }
    Ok(rows
        .into_iter()
        .filter(|r| !r.loopback)
        .map(|r| {
            (
                r.name,
                wirebench_testbed::IfaceCounters {
                    rx_packets: r.rx_packets,
                    rx_bytes: r.rx_bytes,
                    rx_dropped: r.rx_dropped,
                    rx_errors: r.rx_errors,
                    tx_packets: r.tx_packets,
                    tx_bytes: r.tx_bytes,
                    tx_dropped: r.tx_dropped,
                    tx_errors: r.tx_errors,
                    ..Default::default()
                },
            )
        })
        .collect())
}

/// Interfaces for the metadata: name, MTU, state, MAC, link speed.
pub fn interfaces() -> Vec<IfaceMeta> {
    sys::interfaces()
        .into_iter()
        .map(|r| IfaceMeta {
            name: r.name,
            mtu: r.mtu,
            up: r.up,
            mac: r.mac,
            speed_mbit: (r.speed_bps > 0).then_some(r.speed_bps / 1_000_000),
            ..Default::default()
        })
        .collect()
}

/// Current MTU of an interface by its alias.
pub fn iface_mtu(iface: &str) -> Option<u32> {
    sys::interfaces()
        .into_iter()
        .find(|r| r.name == iface)
        .map(|r| r.mtu)
}

/// "Windows 10.0.19045" (major.minor.build, from RtlGetVersion).
pub fn os_name() -> String {
    wirebench_engine::sys::host_info().kernel
}

/// "10.0.19045": the version alone, the Windows counterpart of a kernel
/// release.
pub fn os_version() -> String {
    let n = os_name();
    n.strip_prefix("Windows ").unwrap_or(&n).to_string()
}

/// The processor's marketing name from the registry
/// (HKLM\HARDWARE\DESCRIPTION\System\CentralProcessor\0).
pub fn cpu_model() -> String {
    use windows_sys::Win32::System::Registry::{RegGetValueW, HKEY_LOCAL_MACHINE, RRF_RT_REG_SZ};
    let w = |s: &str| s.encode_utf16().chain(Some(0)).collect::<Vec<u16>>();
    let key = w("HARDWARE\\DESCRIPTION\\System\\CentralProcessor\\0");
    let name = w("ProcessorNameString");
    let mut buf = [0u16; 256];
    let mut len = (buf.len() * 2) as u32;
    // SAFETY: NUL-terminated key and value names; a buffer of `len` bytes
    // that the call fills with a NUL-terminated string.
    let r = unsafe {
        RegGetValueW(
            HKEY_LOCAL_MACHINE,
            key.as_ptr(),
            name.as_ptr(),
            RRF_RT_REG_SZ,
            std::ptr::null_mut(),
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return String::new();
    }
    let n = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf16_lossy(&buf[..n]).trim().to_string()
}
