//! Socket plumbing behind one interface, with the implementation chosen at
//! compile time. Linux (`linux.rs`) has the fast paths: `recvmmsg` /
//! `sendmmsg` batches and kernel receive timestamps. Every other system
//! (`portable.rs`: Windows, macOS, FreeBSD) sends and receives one datagram
//! per system call through the standard library and timestamps in user
//! space right after the read. [`SEND_PATH`] and [`RX_TIMESTAMPS`] name the
//! path compiled in; the result document carries them (`host.send_path`,
//! `host.rx_timestamps`), so a comparison of systems can tell a difference
//! of the system from a difference of the measuring path.
//!
//! Sockets are passed as raw handles ([`RawFd`], a socket handle on
//! Windows) so that the engine's hot loops read the same on every system.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;

#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
pub use portable::*;

// Linux CI runs the portable path's unit tests too: the other systems'
// builds are only checked there, not run (Windows runs under Wine in
// scripts/wine-test).
#[cfg(all(test, target_os = "linux"))]
#[allow(dead_code)]
mod portable;

#[cfg(unix)]
pub use std::os::fd::{AsRawFd, RawFd};

/// Most payload bytes one segmented send may carry: an IPv6 packet's
/// 16-bit payload length less the UDP header.
pub const GSO_MAX_BYTES: usize = u16::MAX as usize - 8 - 40;
/// Receive slot that holds whatever UDP GRO coalesces into one datagram.
pub const GRO_SLOT: usize = u16::MAX as usize + 1;

/// What one `SendBatch::send_segmented` call got out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Segmented {
    /// Slots (datagrams) the kernel took.
    pub slots: usize,
    /// Of the messages it took, those of two or more segments (UDP GSO).
    pub sends: usize,
    /// The datagrams those carried.
    pub segments: usize,
}

/// A socket's raw handle; on Windows the SOCKET value.
#[cfg(windows)]
pub type RawFd = std::os::windows::io::RawSocket;

/// `as_raw_fd()` for sockets on Windows, so the engine's code is the same
/// on every system.
#[cfg(windows)]
pub trait AsRawFd {
    /// The socket's handle.
    fn as_raw_fd(&self) -> RawFd;
}

#[cfg(windows)]
impl<T: std::os::windows::io::AsRawSocket> AsRawFd for T {
    fn as_raw_fd(&self) -> RawFd {
        self.as_raw_socket()
    }
}

/// One entry of a [`poll`] set (`pollfd`, `WSAPOLLFD` on Windows).
#[cfg(unix)]
pub type PollFd = libc::pollfd;
#[cfg(windows)]
pub type PollFd = windows_sys::Win32::Networking::WinSock::WSAPOLLFD;

/// Readable / writable event bits for [`pollfd`].
#[cfg(unix)]
pub const POLLIN: i16 = libc::POLLIN;
#[cfg(unix)]
pub const POLLOUT: i16 = libc::POLLOUT;
#[cfg(windows)]
pub const POLLIN: i16 = windows_sys::Win32::Networking::WinSock::POLLIN;
#[cfg(windows)]
pub const POLLOUT: i16 = windows_sys::Win32::Networking::WinSock::POLLOUT;

/// A poll entry asking for `events` on `fd`.
pub fn pollfd(fd: RawFd, events: i16) -> PollFd {
    PollFd {
        fd: fd as _,
        events,
        revents: 0,
    }
}

/// Waits up to `timeout_ms` for an event on any of `fds`; the number of
/// entries with events, 0 on timeout, negative on error (callers retry).
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> i32 {
    #[cfg(unix)]
    // SAFETY: the pointer and length describe a slice we hold mutably.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    #[cfg(windows)]
    // SAFETY: as above; WSAPoll reads and writes only `fds`.
    let r = unsafe {
        windows_sys::Win32::Networking::WinSock::WSAPoll(
            fds.as_mut_ptr(),
            fds.len() as u32,
            timeout_ms,
        )
    };
    r
}

/// [`poll`] with its timeout in nanoseconds: Linux waits to the timer's
/// precision (`ppoll`; a writer that also keeps a schedule of sub-ms
/// gaps needs it), other systems to the next whole millisecond.
pub fn poll_ns(fds: &mut [PollFd], timeout_ns: u64) -> i32 {
    #[cfg(target_os = "linux")]
    {
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: the pointer and length describe a slice we hold mutably;
        // `ts` lives across the call; a null signal mask leaves it as is.
        unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        }
    }
    #[cfg(not(target_os = "linux"))]
    poll(
        fds,
        timeout_ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32,
    )
}
