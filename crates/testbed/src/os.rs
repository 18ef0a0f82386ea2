//! The system calls of the test-bed, in one place so that the crate builds
//! on every system wirebench runs on. Test-beds are Linux network
//! namespaces (setns, veth, tc): on Linux these are the real calls; on other
//! systems [`supported`] refuses with [`TestbedError::Unsupported`] before
//! anything is touched, and the rest are inert stand-ins that are never
//! reached (every public entry point calls [`supported`] first).

use crate::error::TestbedError;
use std::fs::File;
use std::net::UdpSocket;

/// Ok on Linux; elsewhere the error that says test-beds need Linux.
pub fn supported() -> Result<(), TestbedError> {
    if cfg!(target_os = "linux") {
        Ok(())
    } else {
        Err(TestbedError::Unsupported(std::env::consts::OS))
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Message too long (a datagram above the path MTU with DF set).
    pub const EMSGSIZE: i32 = libc::EMSGSIZE;
    /// Connection refused (an ICMP port unreachable came back).
    pub const ECONNREFUSED: i32 = libc::ECONNREFUSED;
    /// No route to host.
    pub const EHOSTUNREACH: i32 = libc::EHOSTUNREACH;
    /// Network unreachable.
    pub const ENETUNREACH: i32 = libc::ENETUNREACH;

    /// True when the effective user is root.
    pub fn euid_is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// True when `p` is a file someone may execute.
    pub fn is_executable(p: &std::path::Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }

    /// Moves the calling thread into the network namespace `ns` is open on.
    pub fn enter_netns(ns: &File) -> std::io::Result<()> {
        // SAFETY: setns on a valid namespace fd affects only this thread.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes an exclusive `flock` on `f`, waiting for it.
    pub fn lock_exclusive(f: &File) -> std::io::Result<()> {
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Releases the `flock` on `f`.
    pub fn unlock(f: &File) {
        // SAFETY: unlocking our own fd.
        unsafe {
            libc::flock(f.as_raw_fd(), libc::LOCK_UN);
        }
    }

    /// Sends SIGKILL to `pid`.
    pub fn kill_hard(pid: i32) {
        // SAFETY: kill(2) has no memory preconditions.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }

    fn setsockopt_int(s: &UdpSocket, level: i32, opt: i32, val: i32) -> std::io::Result<()> {
        // SAFETY: a valid fd and a pointer to a local int of the right size.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                level,
                opt,
                &val as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Sets don't-fragment semantics: the kernel neither fragments nor sends
    /// anything larger than the known path MTU.
    pub fn set_dont_fragment(s: &UdpSocket, v6: bool) -> std::io::Result<()> {
        if v6 {
            setsockopt_int(
                s,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )?;
            setsockopt_int(s, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1)
        } else {
            setsockopt_int(
                s,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    // Never equal to an OS error: the probes that compare with them only
    // run inside a test-bed, which these systems cannot build.
    /// Stands for EMSGSIZE (message too long).
    pub const EMSGSIZE: i32 = i32::MIN;
    /// Stands for ECONNREFUSED.
    pub const ECONNREFUSED: i32 = i32::MIN + 1;
    /// Stands for EHOSTUNREACH.
    pub const EHOSTUNREACH: i32 = i32::MIN + 2;
    /// Stands for ENETUNREACH.
    pub const ENETUNREACH: i32 = i32::MIN + 3;

    fn unsupported() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "network namespaces need Linux",
        )
    }

    /// Always false: no test-bed privileges here.
    pub fn euid_is_root() -> bool {
        false
    }

    /// True when `p` is a file.
    pub fn is_executable(p: &std::path::Path) -> bool {
        p.is_file()
    }

    /// Unsupported here.
    pub fn enter_netns(_ns: &File) -> std::io::Result<()> {
        Err(unsupported())
    }

    /// Unsupported here.
    pub fn lock_exclusive(_f: &File) -> std::io::Result<()> {
        Err(unsupported())
    }

    /// Does nothing here.
    pub fn unlock(_f: &File) {}

    /// Does nothing here.
    pub fn kill_hard(_pid: i32) {}

    /// Unsupported here.
    pub fn set_dont_fragment(_s: &UdpSocket, _v6: bool) -> std::io::Result<()> {
        Err(unsupported())
    }
}

pub use imp::*;
