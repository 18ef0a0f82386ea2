//! What one run is on the command line: the `wirebench send` arguments, its
//! seed and how long it may take.

use crate::campaign::{Campaign, RunLength, Scenario};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// A stable per-run seed: campaign seed, scenario key and repetition.
pub(super) fn run_seed(c: &Campaign, key: &str, rep: u32) -> u64 {
    // FNV-1a: stable across Rust versions, unlike DefaultHasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ c.seed;
    for b in key.as_bytes().iter().chain(&rep.to_le_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % (1 << 53)
}

/// The `wirebench send` arguments for one run (without `--json`).
pub fn send_args(
    c: &Campaign,
    s: &Scenario,
    dest: IpAddr,
    port: u16,
    seed: u64,
    length: RunLength,
) -> Vec<String> {
    let st = &s.settings;
    let mut a: Vec<String> = vec![
        "send".into(),
        "-a".into(),
        dest.to_string(),
        "-p".into(),
        port.to_string(),
    ];
    a.push(if st.ip == 6 { "-6" } else { "-4" }.into());
    a.extend([
        "-T".into(),
        st.transport.clone(),
        "-m".into(),
        st.meter.clone(),
    ]);
    // A law in D-ITG letters ("E 1000") is the flag -E and its values.
    let law = |a: &mut Vec<String>, text: &str| {
        let mut w = text.split_whitespace();
        if let Some(letter) = w.next() {
            a.push(format!("-{letter}"));
            a.extend(w.map(str::to_string));
        }
    };
    if st.app == "constant" {
        if st.max_rate {
            a.push("--max".into());
        } else if let Some(r) = &st.rate {
            a.extend(["--rate".into(), r.clone()]);
        } else if let Some(l) = &st.idt {
            law(&mut a, l);
        } else if let Some(p) = st.pps {
            a.extend(["-C".into(), p.to_string()]);
        }
        if let Some(m) = &st.size_mix {
            a.extend(["--size-mix".into(), m.clone()]);
        } else if let Some(l) = &st.size {
            law(&mut a, l);
        } else if let Some(p) = st.payload {
            a.extend(["-c".into(), p.to_string()]);
        }
    } else {
        a.extend(["--app".into(), st.app.clone()]);
        // The file model's size is the run's length in KiB (-k below).
        if let (true, RunLength::KBytes { count }) = (st.app == "file", length) {
            a.extend(["--bytes".into(), count.saturating_mul(1024).to_string()]);
        }
        if let Some(codec) = &st.codec {
            a.extend(["--codec".into(), codec.clone()]);
        }
    }
    if st.flows > 1 {
        a.extend(["--flows".into(), st.flows.to_string()]);
    }
    // Fast one-flow UDP runs (RFC 2544 trials, --max floods) take the
    // AF_XDP path where the node allows it; the run's result says which
    // path ran and why (docs/engine.md, "AF_XDP path").
    let fast = st.max_rate || st.pps.is_some_and(|p| p >= 50_000.0);
    if st.transport == "udp" && st.flows <= 1 && fast {
        a.extend(["--xdp".into(), "auto".into()]);
    }
    for (flag, v) in [
        ("--dscp", &st.dscp),
        ("--cc", &st.cc),
        ("--window", &st.window),
    ] {
        if let Some(v) = v {
            a.extend([flag.into(), v.clone()]);
        }
    }
    // Socket options reach forward flows only (a reverse flow's sender is
    // the receiver).
    if let (Some(on), "udp", None | Some("forward")) =
        (st.gso, st.transport.as_str(), st.direction.as_deref())
    {
        a.extend(["--gso".into(), if on { "on" } else { "off" }.into()]);
    }
    match st.direction.as_deref() {
        Some("reverse") => a.push("-R".into()),
        Some("bidir") => a.push("--bidir".into()),
        _ => {}
    }
    match length {
        RunLength::Duration { seconds } => {
            a.extend(["-t".into(), ((seconds * 1000.0).round() as u64).to_string()])
        }
        RunLength::Packets { count } => a.extend(["-z".into(), count.to_string()]),
        RunLength::KBytes { count } => a.extend(["-k".into(), count.to_string()]),
    }
    // The link's rate lets the run judge itself against its physical
    // bound (total.above_bound in the result).
    if let Some(b) = st.link_bps().filter(|b| *b >= 1.0) {
        a.extend(["--link-rate".into(), format!("{}", b.round() as u64)]);
    }
    if let Some(l) = c.linger_s {
        a.extend(["--linger".into(), ((l * 1000.0).round() as u64).to_string()]);
    }
    if let Some(ms) = c.interval_ms {
        a.extend(["--interval".into(), ms.to_string()]);
    }
    a.extend(["--seed".into(), seed.to_string()]);
    a
}

/// How long a run may take before it is killed: the expected length plus
/// the receiver's linger (2 s) and generous slack for setup.
pub(super) fn run_timeout(c: &Campaign, s: &Scenario, length: RunLength) -> Duration {
    if let Some(t) = c.run_timeout_s {
        return Duration::from_secs_f64(t);
    }
    let expected = match length {
        RunLength::Duration { seconds } => seconds,
        RunLength::Packets { count } => match s.settings.pps {
            Some(p) if !s.settings.max_rate => count as f64 / p,
            _ => 300.0,
        },
        RunLength::KBytes { .. } => 300.0,
    };
    Duration::from_secs_f64(expected * 1.5 + 30.0 + c.linger_s.unwrap_or(2.0))
}

/// The command line as stored with the run.
pub(super) fn cmd_text(program: &Path, args: &[String]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_args_follow_the_scenario() {
        let c = Campaign::parse(
            "linger_s = 0.5\npackets = 100\n[loopback]\n[[matrix]]\nip = [6]\ntransport = [\"tcp\"]\nframe = [1518]\npps = [\"max\"]\nflows = [4]\n[[matrix]]\napp = [\"voip\"]\ncodec = [\"G.729.2\"]\nmeter = [\"rtt\"]\n",
            "t.toml",
        )
        .unwrap();
        let s = c.expand();
        let a = send_args(&c, &s[0], "::1".parse().unwrap(), 5401, 9, c.length).join(" ");
        assert_eq!(a, "send -a ::1 -p 5401 -6 -T tcp -m owd --max -c 1428 --flows 4 -z 100 --linger 500 --seed 9");
        let b = send_args(&c, &s[1], "127.0.0.1".parse().unwrap(), 5401, 9, c.length).join(" ");
        assert_eq!(b, "send -a 127.0.0.1 -p 5401 -4 -T udp -m rtt --app voip --codec G.729.2 -z 100 --linger 500 --seed 9");
        assert_ne!(run_seed(&c, &s[0].key, 0), run_seed(&c, &s[0].key, 1));
        // A link of known rate is passed on, so each run checks its bound.
        let c = Campaign::parse(
            "packets = 10\n[testbed]\npreset = \"router\"\nlink_rate = \"100mbit\"\n[matrix]\nip = [4]\nlink_rate = [\"1gbit\"]\n",
            "t.toml",
        )
        .unwrap();
        let s = c.expand();
        let a = send_args(&c, &s[0], "10.0.0.2".parse().unwrap(), 5401, 9, c.length).join(" ");
        assert!(a.ends_with("-z 10 --link-rate 1000000000 --seed 9"), "{a}");
    }

    #[test]
    fn fast_one_flow_udp_runs_ask_for_the_xdp_path() {
        let c = Campaign::parse(
            "packets = 10\n[loopback]\n[matrix]\nip = [4]\ntransport = [\"udp\", \"tcp\"]\npps = [\"max\", 60000, 1000]\n",
            "t.toml",
        )
        .unwrap();
        let asks: Vec<(String, bool)> = c
            .expand()
            .iter()
            .map(|s| {
                let a = send_args(&c, s, "127.0.0.1".parse().unwrap(), 5401, 9, c.length);
                let asks = a.windows(2).any(|w| w[0] == "--xdp" && w[1] == "auto");
                (
                    format!(
                        "{} {:?} {:?}",
                        s.settings.transport, s.settings.pps, s.settings.max_rate
                    ),
                    asks,
                )
            })
            .collect();
        assert_eq!(asks.len(), 6);
        for (what, asks) in &asks {
            let fast = what.starts_with("udp") && !what.contains("Some(1000.0)");
            assert_eq!(*asks, fast, "{what}");
        }
    }

    #[test]
    fn interval_ms_goes_to_every_run_and_is_checked() {
        let text = |ms: &str| {
            format!("interval_ms = {ms}\npackets = 10\n[loopback]\n[matrix]\nip = [4]\n")
        };
        let c = Campaign::parse(&text("250"), "t.toml").unwrap();
        assert_eq!(c.interval_ms, Some(250));
        let s = c.expand();
        let a = send_args(&c, &s[0], "127.0.0.1".parse().unwrap(), 5401, 9, c.length).join(" ");
        assert!(a.ends_with("-z 10 --interval 250 --seed 9"), "{a}");
        for bad in ["0", "5", "3600001", "-1"] {
            let e = Campaign::parse(&text(bad), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("interval_ms") && e.contains("t.toml:1"),
                "{bad}: {e}"
            );
        }
    }

    /// Each scenario's send arguments, joined by spaces.
    fn args_of(campaign: &str) -> Vec<String> {
        let c = Campaign::parse(campaign, "t.toml").unwrap();
        c.expand()
            .iter()
            .map(|s| send_args(&c, s, "127.0.0.1".parse().unwrap(), 5401, 9, c.length).join(" "))
            .collect()
    }

    #[test]
    fn option_axes_become_send_options() {
        let args = args_of(
            "packets = 10\n[loopback]\n[[matrix]]\ntransport = \"tcp\"\ncc = [\"cubic\", \"reno\"]\nwindow = \"256K\"\nrate = \"20M\"\n[[matrix]]\ndscp = [\"ef\", 0]\nidt = [\"E  1000\"]\nsize = \"u 100 1400\"\n",
        );
        assert_eq!(args.len(), 4, "{args:?}");
        assert!(
            args[0].contains("-T tcp -m owd --rate 20M --cc cubic --window 256K -z 10"),
            "{}",
            args[0]
        );
        assert!(args[1].contains("--cc reno"), "{}", args[1]);
        assert!(
            args[2].contains("-E 1000 -u 100 1400 --dscp ef -z 10"),
            "{}",
            args[2]
        );
        assert!(args[3].contains("--dscp 0"), "{}", args[3]);
        let bad = |m: &str, needle: &str| {
            let e = Campaign::parse(
                &format!("packets = 10\n[loopback]\n[matrix]\n{m}\n"),
                "t.toml",
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(needle) && e.contains("t.toml:"), "{m}: {e}");
        };
        bad("dscp = \"af44\"", "dscp");
        bad("cc = \"bbr\"", "cc");
        bad("transport = \"tcp\"\ncc = \"B B\"", "cc");
        bad("window = \"1\"", "window");
        bad("rate = \"0\"", "rate");
        bad("rate = \"1M\"\npps = 10", "rate");
        bad("idt = \"e 10\"", "idt");
        bad("idt = \"E x\"", "idt");
        bad("size = \"u 100\"", "size");
        bad("size = \"c 100\"\npayload = 100", "size");
        bad("app = \"voip\"\nrate = \"1M\"", "rate");
        bad("direction = \"up\"", "direction");
        bad(
            "direction = \"bidir\"\nmeter = [\"owd\", \"rtt\"]",
            "direction",
        );
        bad("direction = \"reverse\"\ndscp = \"ef\"", "direction");
        let args = args_of(
            "packets = 10\n[loopback]\n[matrix]\ndirection = [\"forward\", \"reverse\", \"bidir\"]\n",
        );
        assert_eq!(args.len(), 3, "{args:?}");
        let flag = |a: &str| {
            let w: Vec<&str> = a.split(' ').collect();
            (w.contains(&"-R"), w.contains(&"--bidir"))
        };
        let mut seen: Vec<(bool, bool)> = args.iter().map(|a| flag(a)).collect();
        seen.sort();
        assert_eq!(
            seen,
            [(false, false), (false, true), (true, false)],
            "{args:?}"
        );
    }
}
