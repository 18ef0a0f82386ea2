//! Ranges every number from the wire (and, through the plan, from the
//! command line) must fall in, and the checks that apply them.
//!
//! The receiver sizes buffers, series and timers from what a sender writes
//! in `Hello` and `Stop`, so each of those numbers is checked here before
//! anything is allocated: one unchecked multiplication (`interval_ms ×
//! 10^6`) once wrapped to a 64 ns interval and a gigabyte of buckets. The
//! sender applies the same ranges to its own plan, so a value one side
//! refuses is never sent by the other.

use crate::control::FlowSetup;
use crate::probe::PROBE_HEADER_LEN;
use thiserror::Error;

/// Shortest report interval: finer series are noise at the receiver's
/// timestamp resolution and cost a bucket per millisecond.
pub const MIN_INTERVAL_MS: u64 = 1;
/// Longest report interval (one hour).
pub const MAX_INTERVAL_MS: u64 = 3_600_000;
/// Interval buckets one session may hold, all flows together. A bucket is
/// about 50 bytes in memory and about 120 bytes of report JSON, so this
/// bounds a session's series at ~13 MB in memory and ~32 MB on the wire.
pub const MAX_SESSION_INTERVALS: usize = 1 << 18;
/// Most flows per session (flow ids are 16 bits; each flow costs a socket
/// on both ends, and a few KiB of statistics).
pub const MAX_FLOWS: usize = 10_000;
/// Largest probe: the header's `len` field is 16 bits (TCP records may be
/// longer, up to [`crate::MAX_TCP_RECORD`]: `FLAG_LONG`).
pub const MAX_PROBE_LEN: u32 = u16::MAX as u32;
/// Path MTU range: IPv4's minimum (RFC 791) to loopback's 64 KiB.
pub const MIN_MTU: u32 = 68;
/// Largest path MTU accepted.
pub const MAX_MTU: u32 = 65_536;
/// Deepest playout buffer a flow may ask to be judged against.
pub const MAX_PLAYOUT_BUFFER_MS: u32 = 10_000;
/// Longest linger: the receiver holds sockets that long after `Stop`.
pub const MAX_LINGER_MS: u64 = 60_000;
/// Largest clock offset either side accepts: clocks further apart than a
/// day are not synchronised at all, and subtracting such an offset from
/// every delay would only hide that.
pub const MAX_CLOCK_OFFSET_NS: u64 = 86_400 * 1_000_000_000;
/// Largest error bound of a clock offset: the best of 16 exchanges over the
/// control connection took less than a minute, or something is wrong.
pub const MAX_CLOCK_ERROR_NS: u64 = 60 * 1_000_000_000;
/// Longest `Hello` line a receiver reads from an unauthenticated peer
/// ([`MAX_FLOWS`] flows need about 1.5 MiB, some 150 bytes each).
pub const MAX_HELLO_LINE: usize = 2 << 20;
/// A one-way delay beyond this either way is not a delay: a forged or
/// corrupted timestamp, or clocks that jumped. Such probes are counted as
/// implausible and kept out of every statistic. It matches the longest
/// linger: a probe older than that is counted lost anyway.
pub const MAX_PLAUSIBLE_DELAY_NS: i64 = 60 * 1_000_000_000;
/// Fastest packet rate a single flow is assumed able to reach. Sequence
/// numbers further ahead of the flow's elapsed time than this rate (plus
/// [`SEQ_SLACK`]) allows are forged, not sent.
pub const MAX_FLOW_PPS: u64 = 100_000_000;
/// Sequence numbers accepted regardless of elapsed time (the first
/// packets, timer granularity between `Start` and the first probe).
pub const SEQ_SLACK: u64 = 1 << 20;

/// A control-message field outside what the receiver accepts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LimitError {
    /// A number outside its range.
    #[error("{field}: {value} is out of range {min}..={max}")]
    Range {
        /// The field's name, as in the control message.
        field: &'static str,
        /// The value received.
        value: u64,
        /// Smallest value accepted.
        min: u64,
        /// Largest value accepted.
        max: u64,
    },
    /// Any other refusal, in words.
    #[error("{0}")]
    Invalid(String),
}

/// Longest log name a sender may ask for (`Hello.log_name`).
pub const MAX_LOG_NAME: usize = 128;

/// Checks a log name a sender asks the receiver to write (`Hello.log_name`,
/// ITGSend's `-x`): one plain file name of at most [`MAX_LOG_NAME`] bytes
/// of ASCII letters, digits, `.`, `_` and `-`, not starting with `.` or
/// `-`. So it can name no other directory (no separator, no `..`), no
/// hidden file, nothing a shell or a Windows path would read otherwise.
pub fn check_log_name(name: &str) -> Result<&str, LimitError> {
    let why = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_LOG_NAME {
        "is longer than 128 bytes"
    } else if name.contains(['/', '\\']) {
        "is a path: the receiver writes only into its own log directory, give a file name"
    } else if name.starts_with(['.', '-']) {
        "starts with '.' or '-'"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        "may hold only letters, digits, '.', '_' and '-'"
    } else {
        return Ok(name);
    };
    Err(LimitError::Invalid(format!("log name {name:?} {why}")))
}

/// Checks `value` against `min..=max`, naming `field` when it is not.
pub fn in_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<u64, LimitError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(LimitError::Range {
            field,
            value,
            min,
            max,
        })
    }
}

/// `interval_ms` in nanoseconds, range-checked (so the product cannot wrap).
pub fn interval_ns(interval_ms: u64) -> Result<u64, LimitError> {
    in_range("interval_ms", interval_ms, MIN_INTERVAL_MS, MAX_INTERVAL_MS)?;
    Ok(interval_ms * 1_000_000)
}

impl FlowSetup {
    /// Every field of one flow's setup within its range.
    pub fn check(&self) -> Result<(), LimitError> {
        // ICMP echo flows are answered by the destination's own stack; a
        // receiver has no port to open for them.
        if self.transport == crate::Transport::Icmp {
            return Err(LimitError::Invalid(
                "transport icmp: echo flows need no receiver".into(),
            ));
        }
        if let Some(ms) = self.interval_ms {
            interval_ns(ms)?;
        }
        // 0: the sender did not say (the receiver then sizes for the largest).
        if self.max_len != 0 {
            let most = if self.transport == crate::Transport::Tcp {
                crate::MAX_TCP_RECORD
            } else {
                MAX_PROBE_LEN
            };
            in_range(
                "max_len",
                self.max_len.into(),
                PROBE_HEADER_LEN as u64,
                most.into(),
            )?;
        }
        // 0: unknown path MTU.
        if self.mtu != 0 {
            in_range("mtu", self.mtu.into(), MIN_MTU.into(), MAX_MTU.into())?;
        }
        if let Some(b) = self.rcvbuf {
            in_range("rcvbuf", b.into(), 1024, 1 << 30)?;
        }
        // A data port the sender names must not be a privileged one.
        if let Some(p) = self.port {
            in_range(
                "port",
                p.into(),
                wirebench_schema::opts::MIN_DATA_PORT.into(),
                u16::MAX.into(),
            )?;
        }
        // Port 0 is no socket's source port.
        if let Some(p) = self.src_port {
            in_range("src_port", p.into(), 1, u16::MAX.into())?;
        }
        if let Some(ms) = self.playout_buffer_ms {
            in_range(
                "playout_buffer_ms",
                ms.into(),
                0,
                MAX_PLAYOUT_BUFFER_MS.into(),
            )?;
        }
        Ok(())
    }
}

/// Checks the flow list of a `Hello`: count, distinct ids, every field.
pub fn check_flows(flows: &[FlowSetup]) -> Result<(), LimitError> {
    in_range("flows", flows.len() as u64, 1, MAX_FLOWS as u64)?;
    let mut ids: Vec<u16> = flows.iter().map(|f| f.flow_id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != flows.len() {
        return Err(LimitError::Invalid("flow ids must be distinct".into()));
    }
    for f in flows {
        f.check()
            .map_err(|e| LimitError::Invalid(format!("flow {}: {e}", f.flow_id)))?;
    }
    Ok(())
}

/// Interval buckets each flow of an `n`-flow session may hold.
pub fn intervals_per_flow(n: usize) -> usize {
    MAX_SESSION_INTERVALS / n.clamp(1, MAX_FLOWS)
}

/// Checks a clock offset and its error bound (`ClockOffset`, or what a
/// sender computed from the receiver's timestamps).
pub fn check_clock(offset_ns: i64, error_ns: u64) -> Result<(), LimitError> {
    in_range(
        "clock offset (ns)",
        offset_ns.unsigned_abs(),
        0,
        MAX_CLOCK_OFFSET_NS,
    )?;
    in_range("clock error (ns)", error_ns, 0, MAX_CLOCK_ERROR_NS)?;
    Ok(())
}

/// Highest sequence number a flow can plausibly have sent `elapsed_ns`
/// after it started: what [`MAX_FLOW_PPS`] allows, plus [`SEQ_SLACK`].
pub fn max_plausible_seq(elapsed_ns: u64) -> u64 {
    let by_rate = u128::from(elapsed_ns) * u128::from(MAX_FLOW_PPS) / 1_000_000_000;
    u64::try_from(by_rate)
        .unwrap_or(u64::MAX)
        .saturating_add(SEQ_SLACK)
}

/// Whether a one-way delay (ns, offset already applied) can be real.
pub fn plausible_delay(delay_ns: i64) -> bool {
    (-MAX_PLAUSIBLE_DELAY_NS..=MAX_PLAUSIBLE_DELAY_NS).contains(&delay_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_names_stay_in_the_log_directory() {
        for ok in [
            "recv.log",
            "ITGRecv.log",
            "a",
            "run_1-b.wblog",
            &"x".repeat(128),
        ] {
            assert_eq!(check_log_name(ok), Ok(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "-rf",
            "../x",
            "a/b",
            "/tmp/r.log",
            "a\\b",
            "C:x",
            "a b",
            "é.log",
            "a\0b",
            &"x".repeat(129),
        ] {
            assert!(check_log_name(bad).is_err(), "{bad:?} accepted");
        }
    }
    use crate::control::Transport;
    use proptest::prelude::*;

    fn setup(interval_ms: Option<u64>) -> FlowSetup {
        FlowSetup {
            flow_id: 1,
            transport: Transport::Udp,
            interval_ms,
            max_len: 1400,
            mtu: 1500,
            ..Default::default()
        }
    }

    #[test]
    fn the_reported_memory_bomb_is_refused() {
        // interval_ms × 10^6 wrapped to 64 ns in the reported attack.
        let e = setup(Some(76_480_200_929_599_801)).check().unwrap_err();
        assert!(e.to_string().contains("interval_ms"), "{e}");
        assert!(setup(Some(0)).check().is_err());
        assert!(setup(Some(1)).check().is_ok());
        assert!(setup(Some(MAX_INTERVAL_MS)).check().is_ok());
        assert!(setup(Some(MAX_INTERVAL_MS + 1)).check().is_err());
        assert!(setup(None).check().is_ok());
    }

    #[test]
    fn other_fields_and_lists() {
        let mut s = setup(None);
        s.max_len = 70_000;
        assert!(s.check().unwrap_err().to_string().contains("max_len"));
        s.transport = Transport::Tcp;
        assert!(s.check().is_ok());
        s.max_len = crate::MAX_TCP_RECORD + 1;
        assert!(s.check().unwrap_err().to_string().contains("max_len"));
        s.transport = Transport::Udp;
        s.max_len = 0;
        s.mtu = 20;
        assert!(s.check().unwrap_err().to_string().contains("mtu"));
        s.mtu = 0;
        s.playout_buffer_ms = Some(u32::MAX);
        assert!(s.check().is_err());
        // ICMP echo flows have no receiver: a Hello asking for one is refused.
        let icmp = FlowSetup {
            transport: Transport::Icmp,
            ..setup(None)
        };
        assert!(icmp.check().unwrap_err().to_string().contains("icmp"));
        assert!(check_flows(&[]).is_err());
        assert!(check_flows(&[setup(None), setup(None)]).is_err());
        let many: Vec<FlowSetup> = (0..=MAX_FLOWS as u16)
            .map(|i| FlowSetup {
                flow_id: i,
                ..setup(None)
            })
            .collect();
        assert!(check_flows(&many).is_err());
        assert!(check_flows(&many[..MAX_FLOWS]).is_ok());
    }

    #[test]
    fn a_named_data_port_is_not_privileged() {
        let with = |p| FlowSetup {
            port: Some(p),
            ..setup(None)
        };
        assert!(with(1024).check().is_ok());
        let e = with(22).check().unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
    }

    #[test]
    fn clock_and_plausibility() {
        // The reported hostile receiver: a 235-year offset.
        assert!(check_clock(235 * 365 * 86_400 * 1_000_000_000, 0).is_err());
        assert!(check_clock(i64::MIN, 0).is_err());
        assert!(check_clock(-5_000, 1_000).is_ok());
        assert!(check_clock(0, u64::MAX).is_err());
        assert_eq!(max_plausible_seq(0), SEQ_SLACK);
        assert!(max_plausible_seq(u64::MAX) > 1 << 40);
        // seq 2^31 - 1 sixty milliseconds in is forged.
        assert!(max_plausible_seq(60_000_000) < (1 << 31) - 1);
        assert!(!plausible_delay(1_800_000_000_000_000_000));
        assert!(!plausible_delay(-7_400_000_000_000_000_000));
        assert!(plausible_delay(-1_000));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever the numbers, a setup that passes the check gives a
        /// non-wrapping interval and a bounded bucket budget.
        #[test]
        fn checked_setups_are_safe(interval in any::<Option<u64>>(), max_len in any::<u32>(),
                                   mtu in any::<u32>(), pb in any::<Option<u32>>(), n in 0usize..1000) {
            let s = FlowSetup { flow_id: 0, transport: Transport::Tcp, interval_ms: interval,
                                max_len, mtu, playout_buffer_ms: pb, rcvbuf: None, reverse: None, port: None, meter: None, src_port: None, bulk: false };
            if s.check().is_ok() {
                if let Some(ms) = interval {
                    let ns = interval_ns(ms).unwrap();
                    prop_assert!(ns >= 1_000_000 && ns / 1_000_000 == ms);
                }
                prop_assert!(max_len <= crate::MAX_TCP_RECORD);
            }
            prop_assert!(intervals_per_flow(n) * n.clamp(1, MAX_FLOWS) <= MAX_SESSION_INTERVALS);
        }
    }
}
