//! The few ways this crate touches the system: finding `ip`/`tc`/`ethtool`,
//! checking privileges, running commands with their errors captured, and
//! running code inside a network namespace from a thread that `setns`-ed
//! into it (sockets, sysctls and child processes created there belong to
//! that namespace; the rest of the process is untouched).

use crate::error::TestbedError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_RUN_DIR: &str = "/run/netns";
/// Where `ip netns exec` finds per-namespace /etc files.
pub const NETNS_ETC_DIR: &str = "/etc/netns";

/// Finds a program in PATH or the sbin directories (root's PATH may lack them).
pub fn find_tool(name: &str) -> Result<PathBuf, TestbedError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| TestbedError::MissingTool(name.to_string()))
}

fn is_executable(p: &Path) -> bool {
    crate::os::is_executable(p)
}

/// The tools a test-bed needs, located once.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The `ip` command (iproute2).
    pub ip: PathBuf,
    /// The `tc` command (iproute2).
    pub tc: PathBuf,
    /// The `ethtool` command.
    pub ethtool: PathBuf,
}

impl Tools {
    /// Finds the three in PATH; the first missing one is the error.
    pub fn find() -> Result<Tools, TestbedError> {
        crate::os::supported()?;
        Ok(Tools {
            ip: find_tool("ip")?,
            tc: find_tool("tc")?,
            ethtool: find_tool("ethtool")?,
        })
    }
}

/// Capability bit numbers (linux/capability.h).
pub const CAP_NET_ADMIN: u64 = 12;
/// CAP_SYS_ADMIN (namespaces).
pub const CAP_SYS_ADMIN: u64 = 21;

/// This process's effective capability set (0 when unknown).
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Root, or both CAP_NET_ADMIN (links, qdiscs) and CAP_SYS_ADMIN (namespaces).
pub fn check_privileges() -> Result<(), TestbedError> {
    crate::os::supported()?;
    if crate::os::euid_is_root() {
        return Ok(());
    }
    let eff = effective_caps();
    if eff & (1 << CAP_NET_ADMIN) != 0 && eff & (1 << CAP_SYS_ADMIN) != 0 {
        Ok(())
    } else {
        Err(TestbedError::NotPermitted)
    }
}

/// True when this process may build a test-bed ([`check_privileges`]).
pub fn is_root() -> bool {
    check_privileges().is_ok()
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command to completion; stdout on success, stderr in the error.
pub fn run(cmd: &mut Command) -> Result<String, TestbedError> {
    run_input(cmd, None)
}

/// Runs a command feeding `input` on stdin (for `ip -batch -`, `tc -batch -`).
pub fn run_input(cmd: &mut Command, input: Option<&str>) -> Result<String, TestbedError> {
    let what = describe(cmd);
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| TestbedError::io(format!("starting `{what}`"), e))?;
    if let Some(text) = input {
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(text.as_bytes())
                .map_err(|e| TestbedError::io(format!("writing to `{what}`"), e))?;
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| TestbedError::io(format!("waiting for `{what}`"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let mut msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if let Some(text) = input {
            // `ip -batch` names the failing line as "-:N"; show it.
            if let Some(n) = msg
                .split("-:")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|d| d.parse::<usize>().ok())
            {
                if let Some(line) = text.lines().nth(n.saturating_sub(1)) {
                    msg = format!("{msg} (batch line: `{line}`)");
                }
            }
        }
        if msg.is_empty() {
            msg = format!("exit status {}", out.status);
        }
        Err(TestbedError::Command { cmd: what, msg })
    }
}

/// Names of the namespaces whose name starts with `prefix`.
pub fn netns_with_prefix(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(NETNS_RUN_DIR)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `/etc/netns` directories whose name starts with `prefix`.
pub fn etc_dirs_with_prefix(prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(NETNS_ETC_DIR)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs `f` on a thread that has entered the network namespace `ns`.
/// Sockets opened and processes spawned by `f` live in that namespace.
pub fn in_netns<T, F>(ns: &str, f: F) -> Result<T, TestbedError>
where
    F: FnOnce() -> Result<T, TestbedError> + Send,
    T: Send,
{
    let path = Path::new(NETNS_RUN_DIR).join(ns);
    let file = std::fs::File::open(&path)
        .map_err(|e| TestbedError::io(format!("opening namespace {}", path.display()), e))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            crate::os::enter_netns(&file)
                .map_err(|e| TestbedError::io(format!("entering namespace {ns}"), e))?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(TestbedError::Probe(format!("thread in {ns} panicked"))))
    })
}

/// Writes a sysctl of the calling thread's network namespace.
pub fn write_sysctl(key: &str, value: &str) -> Result<(), TestbedError> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).map_err(|e| TestbedError::io(format!("writing {path}"), e))
}

/// Whether the kernel can do netem: loaded, built in, or loadable.
pub fn netem_available() -> bool {
    if Path::new("/sys/module/sch_netem").exists() {
        return true;
    }
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let base = Path::new("/lib/modules").join(rel.trim());
    if std::fs::read_to_string(base.join("modules.builtin"))
        .map(|t| t.contains("sch_netem"))
        .unwrap_or(false)
    {
        return true;
    }
    let dir = base.join("kernel/net/sched");
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("sch_netem."))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_says_what_to_install() {
        let e = find_tool("wirebench-no-such-tool").unwrap_err();
        assert!(matches!(e, TestbedError::MissingTool(_)));
        assert!(
            e.to_string().contains("apt-get install iproute2 ethtool"),
            "{e}"
        );
        assert!(find_tool("sh").is_ok());
    }
}
