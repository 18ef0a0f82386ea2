//! Windows host counters from the system's own APIs: GetSystemTimes (host
//! CPU: idle, kernel, user), GetThreadTimes / GetProcessTimes (the
//! engine's own CPU), RtlGetVersion (the real version; GetVersionEx lies to
//! programs without a manifest). Windows has no per-host UDP buffer-drop
//! counter, TCP_INFO of the Linux kind, or path-MTU socket option that this
//! reads: those stay unknown. Interrupt time is part of kernel time, so
//! `softirq` stays 0 and `system` includes it.

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
    }
}

pub fn host_cpu_ticks_per_s() -> f64 {
    1e7
}

fn cpu_time(kernel: FILETIME, user: FILETIME) -> CpuTime {
    CpuTime {
        user: ticks(user) as f64 * 1e-7,
        system: ticks(kernel) as f64 * 1e-7,
    }
}

pub fn thread_cpu() -> CpuTime {
    let (mut c, mut e, mut k, mut u) = (ZERO, ZERO, ZERO, ZERO);
    // SAFETY: the pseudo-handle of the calling thread; four FILETIMEs we own.
    if unsafe { GetThreadTimes(GetCurrentThread(), &mut c, &mut e, &mut k, &mut u) } == 0 {
        return CpuTime::default();
    }
    cpu_time(k, u)
}

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
