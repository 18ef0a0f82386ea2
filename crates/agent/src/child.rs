//! Child processes of wirebench (receivers and senders): their own process
//! group so a terminal's Ctrl-C reaches only the parent, which stops them in
//! order; killed with the parent (Linux: PR_SET_PDEATHSIG; Windows: a
//! kill-on-close job object, for the agent's children); SIGTERM then
//! SIGKILL (Windows: TerminateProcess, as a console process group cannot
//! be sent Ctrl-Break without a shared console); the tail of their log for
//! error messages; "listens yet?" from the process's own view of /proc/net
//! (Windows: the TCP listener table). Shared by the agent and the campaign
//! runner (one copy of the process-group rules).

use std::path::Path;
use std::process::Child;
#[cfg(not(windows))]
use std::process::Command;
use std::time::Duration;

/// Puts the child in its own process group and, on Linux, has it killed
/// when this process dies.
#[cfg(unix)]
pub fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // Own process group: a terminal's Ctrl-C reaches the agent, which
    // stops its children in order, not the children directly.
    cmd.process_group(0);
    die_with_parent(cmd, libc::SIGKILL);
}

/// Linux: the child gets `sig` when this process dies (PR_SET_PDEATHSIG);
/// elsewhere nothing.
#[cfg(unix)]
pub fn die_with_parent(cmd: &mut Command, sig: libc::c_int) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no
    // memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0);
            Ok(())
        });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (cmd, sig);
}

#[cfg(windows)]
pub use crate::win::detach;

/// Nothing to do on this system.
#[cfg(not(any(unix, windows)))]
pub fn detach(_cmd: &mut Command) {}

/// Ties a just-started child to this process's lifetime where that is done
/// after the start (Windows: the job object); elsewhere [`detach`] did it.
pub fn adopt(_child: &Child) {
    #[cfg(windows)]
    crate::win::adopt(_child);
}

/// SIGTERM to the child's group, SIGKILL after `grace` (elsewhere: kill).
pub fn stop_child(child: &mut Child, grace: Duration) {
    #[cfg(unix)]
    {
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
    }
    #[cfg(not(unix))]
    let _ = grace;
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `max` bytes of a log file, trimmed (empty when unreadable).
pub fn tail(path: &Path, max: usize) -> String {
    let s = std::fs::read(path).unwrap_or_default();
    let s = String::from_utf8_lossy(&s);
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

/// True when process `pid` listens on TCP `port` (its namespace's table).
#[cfg(windows)]
pub fn listening(pid: u32, port: u16) -> bool {
    crate::win::listening(pid, port)
}

/// True when process `pid` listens on TCP `port` (its namespace's table).
#[cfg(not(windows))]
pub fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}"))
            .map(|text| {
                text.lines().skip(1).any(|line| {
                    let c: Vec<&str> = line.split_whitespace().collect();
                    c.len() > 3 && c[1].ends_with(&want) && c[3] == "0A"
                })
            })
            .unwrap_or(false)
    })
}
