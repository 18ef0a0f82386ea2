//! Facts about where a campaign ran (kernel, CPU, tool version) and UTC
//! time stamps, recorded with every campaign so results can be judged
//! later without guessing the machine.

use crate::summary::Environment;
use std::time::{SystemTime, UNIX_EPOCH};

/// RFC 3339 UTC time with milliseconds, e.g. `2026-11-21T19:52:30.123Z`.
pub fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_rfc3339(d.as_secs() as i64, d.subsec_millis())
}

/// Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
pub fn format_rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
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
