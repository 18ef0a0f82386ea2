//! Child processes: the receiver and sender run as children in their own
//! process group that die with us, are stopped with SIGTERM then SIGKILL,
//! and leave a log whose tail explains a failure. On Windows (a campaign
//! controller there runs loopback or real-host beds) children get their
//! own process group and are terminated outright: Windows has no SIGTERM
//! to send to a console program's group.

use super::RunError;
use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// Own process group (no terminal signals), killed when we die (Linux).
#[cfg(unix)]
pub(super) fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no
    // memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
}

/// Own process group, so a Ctrl-C in our console is not delivered to it.
#[cfg(windows)]
pub(super) fn detach(cmd: &mut Command) {
    use std::os::windows::process::CommandExt;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    cmd.creation_flags(CREATE_NEW_PROCESS_GROUP);
}

/// SIGTERM to the child's group, SIGKILL after a grace period.
#[cfg(unix)]
pub(super) fn stop_child(child: &mut Child, grace: Duration) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child's process group.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let t0 = std::time::Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = child.wait();
}

/// Terminates the child (TerminateProcess); nothing to wait for.
#[cfg(windows)]
pub(super) fn stop_child(child: &mut Child, _grace: Duration) {
    let _ = child.kill();
    let _ = child.wait();
}

pub(super) fn read_tail(path: &Path, max: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let s = s.trim();
    if s.len() > max {
        let mut start = s.len() - max;
        while !s.is_char_boundary(start) {
            start += 1;
        }
        format!("…{}", &s[start..])
    } else {
        s.to_string()
    }
}

/// True when process `pid` (in its own network namespace) listens on TCP `port`.
pub(super) fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    for f in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A" {
                return true;
            }
        }
    }
    false
}

/// A TCP port free on both 127.0.0.1 and ::1 (loopback mode: the control
/// port must not collide with anything else on this host).
pub(super) fn free_port() -> Result<u16, RunError> {
    for _ in 0..50 {
        let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| RunError::io("finding a free port", e))?;
        let port = l
            .local_addr()
            .map_err(|e| RunError::io("finding a free port", e))?
            .port();
        if std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, port)).is_ok()
            || std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_err()
        {
            return Ok(port);
        }
    }
    Err(RunError::Receiver(
        "no free control port on loopback".into(),
    ))
}
