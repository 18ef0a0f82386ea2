//! Property tests of campaign files (issue #9, "Tests"): `wirebench run`
//! takes any file, so any text must give a campaign whose matrix expands
//! in bounded time and memory, or a typed `CampaignError` naming the file,
//! a line of it and (for a bad value) the key, never a panic. Bounded to a
//! few hundred cases (about a second for the file).

use proptest::prelude::*;
use std::time::{Duration, Instant};
use wirebench_campaign::campaign::{Axis, Campaign, CampaignError, MAX_SCENARIOS};

/// Values of every type TOML has, with the edges a careless check misses.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "4",
    "6",
    "64",
    "1408",
    "1500",
    "9000",
    "65536",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "nan",
    "inf",
    "-inf",
    "0.5",
    "true",
    "\"\"",
    "\"udp\"",
    "\"tcp\"",
    "\"rtt\"",
    "\"owd\"",
    "\"max\"",
    "\"voip\"",
    "\"file\"",
    "\"G.711.1\"",
    "\"100mbit\"",
    "\"1gbit\"",
    "\"EF\"",
    "\"cubic\"",
    "\"E 1000\"",
    "\"u 100 1400\"",
    "\"reverse\"",
    "\"ip=4\"",
    "\"direct\"",
    "\"shuffled\"",
    "\"é\"",
    "{ a = 1 }",
    "1979-05-27",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(VALUES).prop_map(str::to_string),
        2 => proptest::collection::vec(proptest::sample::select(VALUES), 0..4)
            .prop_map(|v| format!("[{}]", v.join(", "))),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => "\"[a-z0-9 =.,]{0,10}\"",
    ]
}

/// Top-level keys of a campaign file, and one that is not.
const TOP: &[&str] = &[
    "name",
    "description",
    "repetitions",
    "duration_s",
    "packets",
    "kbytes",
    "warmup_s",
    "pause_s",
    "linger_s",
    "interval_ms",
    "order",
    "seed",
    "baseline",
    "run_timeout_s",
    "repeat_stalled",
    "speed",
];

/// Axis lines that are fine on their own (combinations may not be).
const GOOD_AXES: &[&str] = &[
    "ip = [4, 6]",
    "transport = [\"udp\", \"tcp\"]",
    "meter = [\"owd\", \"rtt\"]",
    "app = [\"voip\", \"dns\"]",
    "codec = [\"G.711.1\", \"G.729.2\"]",
    "payload = [64, 1408]",
    "frame = [128, 1518]",
    "pps = [100, \"max\"]",
    "flows = [1, 4]",
    "mtu = [1500, 9000]",
    "link_rate = [\"100mbit\", \"1gbit\"]",
    "offloads = [true, false]",
    "forward_pps = [10000, 29000]",
    "dscp = [\"EF\", \"0\"]",
    "cc = [\"cubic\", \"bbr\"]",
    "window = [\"64k\", \"1m\"]",
    "rate = [\"10M\", \"100M\"]",
    "idt = [\"E 1000\"]",
    "size = [\"u 100 1400\"]",
    "direction = [\"forward\", \"reverse\"]",
    "duration = [1, 2]",
];

/// Top-level lines that are fine on their own.
const GOOD_TOP: &[&str] = &[
    "name = \"t\"",
    "repetitions = 2",
    "duration_s = 1",
    "packets = 1000",
    "pause_s = 0",
    "linger_s = 0.5",
    "interval_ms = 100",
    "order = \"shuffled\"",
    "seed = 7",
    "baseline = \"ip=4\"",
    "repeat_stalled = 0",
];

/// A campaign-shaped file: top-level keys, a target table, matrix blocks
/// of real axis names (and a wrong one) with random values, sometimes a
/// [quick] table, now and then a broken line.
fn campaign_text() -> impl Strategy<Value = String> {
    let mut axes: Vec<&'static str> = Axis::ALL.iter().map(|a| a.name()).collect();
    axes.push("paylaod");
    let wild_axis =
        (proptest::sample::select(axes), value()).prop_map(|(k, v)| format!("{k} = {v}"));
    let axis_line = prop_oneof![
        3 => proptest::sample::select(GOOD_AXES).prop_map(str::to_string),
        1 => wild_axis,
    ];
    let wild_top = (proptest::sample::select(TOP), value()).prop_map(|(k, v)| format!("{k} = {v}"));
    let top_line = prop_oneof![
        3 => proptest::sample::select(GOOD_TOP).prop_map(str::to_string),
        1 => wild_top,
    ];
    let target = proptest::sample::select(
        &[
            "[loopback]",
            "[loopback]",
            "[loopback]",
            "[loopback]",
            "[loopback]",
            "[testbed]\npreset = \"direct\"",
            "[testbed]\npreset = \"nope\"",
            "[hosts]",
            "",
        ][..],
    );
    let header = proptest::sample::select(
        &[
            "[matrix]",
            "[[matrix]]",
            "[[matrix]]",
            "[[matrix]]",
            "[quick]",
        ][..],
    );
    let block = (header, proptest::collection::vec(axis_line, 0..5))
        .prop_map(|(h, ls)| format!("{h}\n{}", once_per_key(ls).join("\n")));
    let noise = proptest::sample::select(
        &[
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "# c",
            "x =",
            "[matrix",
            "= 1",
            "[report]\ncolumns = \"ip\"",
        ][..],
    );
    (
        proptest::collection::vec(top_line, 0..4),
        target,
        proptest::collection::vec(block, 1..3),
        noise,
    )
        .prop_map(|(top, target, blocks, noise)| {
            format!(
                "{}\n{target}\n{}\n{noise}\n",
                once_per_key(top).join("\n"),
                blocks.join("\n")
            )
        })
}

/// The first line of each key (TOML refuses a key given twice, which
/// would make most generated files mere syntax errors).
fn once_per_key(lines: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    lines
        .into_iter()
        .filter(|l| seen.insert(l.split('=').next().unwrap_or("").trim().to_string()))
        .collect()
}

/// A refusal names the file and a line of it; a bad value names its key.
fn check_error(text: &str, e: &CampaignError) -> Result<(), TestCaseError> {
    let shown = e.to_string();
    let line = e.line();
    prop_assert!(shown.starts_with(&format!("c.toml:{line}: ")), "{shown}");
    let n = text.lines().count().max(1);
    prop_assert!((1..=n).contains(&line), "{shown}: line {line} of {n}");
    match e {
        CampaignError::Invalid { key, reason, .. } => {
            prop_assert!(!key.is_empty() && !reason.is_empty(), "{shown}");
        }
        CampaignError::Syntax { reason, .. } => prop_assert!(!reason.is_empty(), "{shown}"),
    }
    Ok(())
}

/// A campaign that parsed expands within the bound, quickly, and its
/// [quick] version either does too or is refused the same typed way.
fn check_campaign(text: &str, c: &Campaign) -> Result<(), TestCaseError> {
    let t = Instant::now();
    let s = c.expand();
    prop_assert!(!s.is_empty() || c.rfc2544.is_some(), "no scenarios: {text}");
    prop_assert!(s.len() <= MAX_SCENARIOS);
    prop_assert_eq!(c.planned_runs(), s.len() * c.repetitions as usize);
    let mut q = c.clone();
    match q.apply_quick() {
        Ok(()) => prop_assert!(q.expand().len() <= MAX_SCENARIOS),
        Err(e) => check_error(text, &e)?,
    }
    prop_assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any text, and campaign-shaped files of random keys and values.
    #[test]
    fn any_campaign_file(text in prop_oneof![".{0,120}", campaign_text()]) {
        let t = Instant::now();
        match Campaign::parse(&text, "c.toml") {
            Ok(c) => check_campaign(&text, &c)?,
            Err(e) => check_error(&text, &e)?,
        }
        prop_assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
}

/// A few lines of TOML can describe more scenarios than can be expanded:
/// three axes of 1000 values are 10^9. Such a matrix is refused at once,
/// naming the block; a [quick] table cannot grow a matrix past the bound
/// either.
#[test]
fn a_matrix_too_large_to_expand_is_refused_naming_its_block() {
    let values = |a: u32, b: u32| {
        let v: Vec<String> = (a..b).map(|x| x.to_string()).collect();
        format!("[{}]", v.join(", "))
    };
    let text = format!(
        "name = \"big\"\n[loopback]\n[[matrix]]\nip = [4]\n[[matrix]]\npayload = {}\npps = {}\nflows = {}\n",
        values(24, 1024),
        values(1, 1001),
        values(1, 1001)
    );
    let t = Instant::now();
    let e = Campaign::parse(&text, "c.toml").unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let shown = e.to_string();
    assert_eq!(e.line(), 5, "{shown}");
    assert!(
        shown.contains("`matrix`: more than 100000 scenarios (1000 payload x 1000 pps x 1000 flows, with the blocks before it)"),
        "{shown}"
    );
    // Exactly at the bound is accepted (and expands quickly).
    let ok = format!(
        "[loopback]\n[matrix]\npayload = {}\npps = {}\n",
        values(24, 124),
        values(1, 1001)
    );
    let c = Campaign::parse(&ok, "c.toml").unwrap();
    assert_eq!(c.expand().len(), MAX_SCENARIOS);
    // [quick] may not grow past it.
    let quick = format!(
        "[loopback]\n[matrix]\npayload = [64]\npps = {}\n[quick]\npayload = {}\n",
        values(1, 1001),
        values(24, 125)
    );
    let e = Campaign::parse(&quick, "c.toml").unwrap_err();
    assert_eq!(e.line(), 5, "{e}");
    assert!(e.to_string().contains("more than 100000 scenarios"), "{e}");
}
