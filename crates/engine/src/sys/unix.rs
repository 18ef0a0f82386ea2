//! Host counters on the other Unix systems (macOS, FreeBSD): process CPU
//! from getrusage, thread CPU where the system has RUSAGE_THREAD (FreeBSD),
//! the kernel release from uname. Host CPU split, UDP buffer drops,
//! TCP_INFO and path MTU are read differently on each (sysctl, their own
//! tcp_info layouts) and are not read yet: they stay unknown.

use super::{from_rusage, CpuTime, HostCpu};

pub fn host_cpu() -> HostCpu {
    HostCpu::default()
}

pub fn host_cpu_ticks_per_s() -> f64 {
    1.0
}

#[cfg(target_os = "freebsd")]
pub fn thread_cpu() -> CpuTime {
    from_rusage(libc::RUSAGE_THREAD)
}

/// macOS has no per-thread getrusage: unknown (0) rather than the whole
/// process's time, which would count other sessions.
#[cfg(not(target_os = "freebsd"))]
pub fn thread_cpu() -> CpuTime {
    CpuTime::default()
}

pub fn process_cpu() -> CpuTime {
    from_rusage(libc::RUSAGE_SELF)
}

pub fn kernel_release() -> String {
    // SAFETY: uname fills the struct we own; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return String::new();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}
