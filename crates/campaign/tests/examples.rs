//! The study campaigns in `examples/` parse, reproduce their study's matrix,
//! and have a quick mode that stays short.

use std::path::PathBuf;
use wirebench_campaign::campaign::{Campaign, RunLength, Target};
use wirebench_campaign::rfc2544::Rfc2544Config;

fn load(name: &str) -> Campaign {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap();
    Campaign::parse(&text, &p.display().to_string()).unwrap_or_else(|e| panic!("{e}"))
}

fn values(c: &Campaign, axis: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .expand()
        .into_iter()
        .filter_map(|s| s.axes.get(axis).cloned())
        .collect();
    v.sort_by(|a, b| {
        let f = |x: &String| x.parse::<f64>().unwrap_or(f64::MAX);
        f(a).total_cmp(&f(b)).then(a.cmp(b))
    });
    v.dedup();
    v
}

/// Wall time of a campaign as `wirebench run --estimate` states it.
fn estimate_s(c: &Campaign) -> f64 {
    wirebench_campaign::estimate::estimate(c).seconds
}

#[test]
fn every_example_parses_and_has_a_short_quick_mode() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let mut c = load(p.file_name().unwrap().to_str().unwrap());
            if c.rfc2544.is_some() {
                // An RFC 2544 search: the search picks its trials, so there
                // is no matrix to count; --quick must shorten every trial.
                let full = Rfc2544Config::from_campaign(&c).unwrap().unwrap();
                c.apply_quick().unwrap();
                let quick = Rfc2544Config::from_campaign(&c).unwrap().unwrap();
                assert!(
                    quick.trial_s < full.trial_s && quick.trial_s <= 5.0,
                    "{}: quick trials of {} s",
                    p.display(),
                    quick.trial_s
                );
                continue;
            }
            let full = c.planned_runs();
            c.apply_quick().unwrap();
            assert_eq!(c.repetitions, 2, "{}", p.display());
            assert!(
                c.planned_runs() < full,
                "{}: quick is not shorter",
                p.display()
            );
            assert!(
                estimate_s(&c) < 240.0,
                "{}: quick takes ~{} s",
                p.display(),
                estimate_s(&c)
            );
            n += 1;
        }
    }
    assert!(n >= 5, "one campaign per study S1-S5");
}

#[test]
fn s5_matches_the_study() {
    let c = load("s5-ipv4-vs-ipv6.toml");
    let Target::Testbed(t) = &c.target else {
        panic!("S5 runs on a test-bed")
    };
    assert_eq!(t.preset.as_deref(), Some("router"));
    assert_eq!(t.link_rate.as_deref(), Some("100mbit"));
    assert_eq!(c.repetitions, 15);
    assert_eq!(c.length, RunLength::Duration { seconds: 60.0 });
    let sizes = values(&c, "payload");
    assert_eq!(
        sizes,
        [
            "64", "128", "256", "384", "512", "640", "768", "896", "1024", "1152", "1280", "1408",
            "1536"
        ]
    );
    assert_eq!(
        values(&c, "pps"),
        ["10000", "20000", "30000", "40000", "50000"]
    );
    assert_eq!(values(&c, "ip"), ["4", "6"]);
    assert_eq!(values(&c, "transport"), ["tcp", "udp"]);
    let s = c.expand();
    // 2 ip × 2 transports × 13 sizes + 2 ip × 7 applications + 4 extra calibration rates.
    assert_eq!(s.len(), 52 + 14 + 4);
    assert!(s
        .iter()
        .all(|x| x.settings.transport == "tcp" || x.settings.meter == "rtt"));
    let apps: Vec<String> = s
        .iter()
        .filter(|x| x.settings.app != "constant")
        .map(|x| x.key.clone())
        .collect();
    assert_eq!(apps.len(), 14, "{apps:?}");
}

#[test]
fn s1_to_s4_match_their_studies() {
    let s1 = load("s1-jumbo-six-os.toml");
    assert!(
        matches!(&s1.target, Target::Testbed(t) if t.preset.as_deref() == Some("two-routers") && t.mtu == Some(9000))
    );
    let sizes = [
        "1518", "2455", "3392", "4329", "5266", "6203", "7140", "8037", "9014",
    ];
    let main: Vec<_> = s1
        .expand()
        .into_iter()
        .filter(|s| {
            s.axes.get("pps").map(String::as_str) == Some("3000")
                && s.settings.payload.is_some_and(|p| p < 10000)
        })
        .collect();
    for sz in sizes {
        for tr in ["udp", "tcp"] {
            for ip in ["4", "6"] {
                assert!(main.iter().any(|s| s.axes["payload"] == sz
                    && s.axes["transport"] == tr
                    && s.axes["ip"] == ip
                    && s.axes["flows"] == "60"));
            }
        }
    }
    assert_eq!(
        s1.expand()
            .iter()
            .filter(|s| s.settings.app != "constant")
            .count(),
        2 * 9
    );
    // The pilot sweep's run lengths, 10…120 s, as an axis.
    assert_eq!(values(&s1, "duration"), ["10", "30", "60", "120"]);
    // Quick mode keeps the study's 60 concurrent flows.
    let mut q = s1.clone();
    q.apply_quick().unwrap();
    let flows: Vec<String> = q
        .expand()
        .iter()
        .filter(|s| s.settings.app == "constant")
        .map(|s| s.axes["flows"].clone())
        .collect();
    assert!(
        flows.len() >= 6 && flows.iter().all(|f| f == "60"),
        "{flows:?}"
    );
    assert_eq!(values(&q, "duration"), ["1", "2"]);

    let s2 = load("s2-jumbo-windows-server.toml");
    assert_eq!(
        (s2.repetitions, s2.length),
        (20, RunLength::Duration { seconds: 30.0 })
    );

    let s3 = load("s3-udp-ipv6-vs-ipv4.toml");
    assert!(matches!(&s3.target, Target::Testbed(t) if t.preset.as_deref() == Some("direct")));
    assert_eq!(
        (s3.repetitions, s3.length),
        (10, RunLength::Packets { count: 1_000_000 })
    );
    assert_eq!(
        values(&s3, "payload"),
        ["128", "384", "640", "896", "1152", "1408"]
    );

    let s4 = load("s4-jumbo-ipv6-tcp.toml");
    assert_eq!(s4.repetitions, 20);
    assert_eq!(s4.length, RunLength::KBytes { count: 5120 });
    assert_eq!(values(&s4, "mtu"), ["1500", "4000", "9000"]);
    assert_eq!(s4.baseline.as_deref(), Some("mtu=1500"));
}

/// Each example's header states its full and quick run time; both must be
/// what `wirebench run FILE --estimate [--quick]` prints, so a change of the
/// estimate model shows up here until the headers follow.
#[test]
fn example_headers_state_the_estimate() {
    use wirebench_campaign::estimate::{estimate, human_duration};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines() {
            let Some(cmd) = line.strip_prefix("#   wirebench run examples/") else {
                continue;
            };
            let Some((_, said)) = cmd.split_once("about ") else {
                continue;
            };
            let mut c = load(&name);
            if cmd.contains("--quick") {
                c.apply_quick().unwrap();
            }
            assert_eq!(
                said.trim(),
                human_duration(estimate(&c).seconds),
                "{name}: {line}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 12,
        "full and quick of 6 examples, {checked} found"
    );
}
