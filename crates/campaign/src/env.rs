//! Facts about where a campaign ran (kernel, CPU, tool version) and UTC
//! time stamps, recorded with every campaign so results can be judged
//! later without guessing the machine.

use crate::summary::Environment;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// RFC 3339 UTC time with milliseconds, e.g. `2026-11-21T19:52:30.123Z`.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// RFC 3339 UTC with milliseconds for a time since the epoch.
pub fn format_rfc3339(secs: u64, millis: u32) -> String {
    let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis.into());
    humantime::format_rfc3339_millis(t).to_string()
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The environment of this host; `topology` describes where traffic runs.
pub fn collect(topology: &str, tool_version: &str) -> Environment {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut env = Environment {
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        cpu_model,
        cpus,
        tool_version: tool_version.to_string(),
        topology: topology.to_string(),
        extra: Default::default(),
    };
    let host = read_trim("/proc/sys/kernel/hostname");
    if !host.is_empty() {
        env.extra.insert("hostname".into(), host);
    }
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if let Some(p) = os.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")) {
        env.extra
            .insert("os".into(), p.trim_matches('"').to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_rfc3339(1_795_290_750, 0), "2026-11-21T19:52:30.000Z");
    }
}
