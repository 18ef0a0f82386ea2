//! Campaign files: bad input fails before anything runs, naming line and key;
//! good files expand to the expected scenarios.

use wirebench_campaign::campaign::{Campaign, CampaignError, RunLength, Target};

const GOOD: &str = r#"
name = "t"
repetitions = 3
duration_s = 5
baseline = "ip=4"

[loopback]

[matrix]
ip = [4, 6]
transport = ["udp", "tcp"]
payload = [64, 1408]

[quick]
payload = [64]
duration_s = 1
"#;

fn err(text: &str) -> CampaignError {
    Campaign::parse(text, "c.toml").expect_err("must fail")
}

fn assert_names(e: &CampaignError, line: usize, key: &str) {
    let msg = e.to_string();
    assert_eq!(e.line(), line, "line in {msg}");
    assert!(msg.contains(&format!("c.toml:{line}:")), "{msg}");
    assert!(msg.contains(key), "key {key} not in {msg}");
}

#[test]
fn good_file_expands() {
    let c = Campaign::parse(GOOD, "c.toml").unwrap();
    let s = c.expand();
    assert_eq!(s.len(), 8);
    assert_eq!(c.planned_runs(), 24);
    assert_eq!(s[0].key, "ip=4,transport=udp,payload=64");
    assert_eq!(s[7].key, "ip=6,transport=tcp,payload=1408");
    assert_eq!(c.length, RunLength::Duration { seconds: 5.0 });
    assert_eq!(c.x_axis().as_deref(), Some("payload"));
    let mut q = c.clone();
    q.apply_quick().unwrap();
    assert_eq!(q.repetitions, 2);
    assert_eq!(q.expand().len(), 4);
    assert_eq!(q.length, RunLength::Duration { seconds: 1.0 });
}

#[test]
fn unknown_key_top_level() {
    let e = err("name = \"x\"\nrepetitons = 3\n[loopback]\n[matrix]\nip = [4]\n");
    assert_names(&e, 2, "repetitons");
}

#[test]
fn unknown_key_in_matrix() {
    let e = err("[loopback]\n[matrix]\nip = [4]\npaylaod = [64]\n");
    assert_names(&e, 4, "paylaod");
}

#[test]
fn empty_axis() {
    let e = err("[loopback]\n[matrix]\nip = [4]\n\ntransport = []\n");
    assert_names(&e, 5, "transport");
    assert!(e.to_string().contains("empty"));
}

#[test]
fn repetitions_zero() {
    let e = err("repetitions = 0\n[loopback]\n[matrix]\nip = [4]\n");
    assert_names(&e, 1, "repetitions");
}

#[test]
fn unknown_application() {
    let e = err("[loopback]\n[[matrix]]\nip = [4]\n[[matrix]]\napp = [\"dns\", \"skype\"]\n");
    assert_names(&e, 5, "app");
    assert!(e.to_string().contains("skype"));
}

#[test]
fn link_axes_need_a_testbed() {
    let e = err("[loopback]\n[matrix]\nmtu = [1500, 9000]\n");
    assert_names(&e, 3, "mtu");
}

#[test]
fn codec_only_with_voip_and_deduplicated() {
    let c = Campaign::parse(
        "[testbed]\npreset = \"router\"\nmtu = 1500\nlink_rate = \"100mbit\"\n[matrix]\napp = [\"dns\", \"voip\"]\ncodec = [\"G.711.1\", \"g.729.2\"]\n",
        "c.toml",
    )
    .unwrap();
    let keys: Vec<String> = c.expand().into_iter().map(|s| s.key).collect();
    assert_eq!(
        keys,
        vec![
            "app=dns",
            "app=voip,codec=G.711.1",
            "app=voip,codec=G.729.2"
        ]
    );
}

#[test]
fn bad_baseline_named() {
    let e = err("baseline = \"ip=5\"\n[loopback]\n[matrix]\nip = [4, 6]\n");
    assert_names(&e, 1, "baseline");
}

#[test]
fn syntax_error_has_line() {
    let e = err("[loopback]\n[matrix]\nip = [4,\n\n");
    assert!(e.line() >= 3, "{e}");
}

#[test]
fn frame_sizes_checked_against_the_headers_they_carry() {
    // 70 − 18 − 20 − 8 = 24 B: exactly the probe header for IPv4/UDP.
    let c = Campaign::parse("[loopback]\n[matrix]\nframe = [70]\n", "c.toml").unwrap();
    assert_eq!(c.expand()[0].settings.payload, Some(24));
    let e = err("[loopback]\n[matrix]\nip = [4, 6]\nframe = [70, 1518]\n");
    assert_names(&e, 4, "frame");
    assert!(e.to_string().contains("IPv6"), "{e}");
}

#[test]
fn router_cap_axis_and_default() {
    let text = r#"
name = "cap"
[testbed]
preset = "router"
link_rate = "100mbit"
forward_pps = 29000
[[matrix]]
payload = [64]
pps = [10000, 50000]
[[matrix]]
payload = [64]
pps = [50000]
forward_pps = [10000, 20000]
"#;
    let c = Campaign::parse(text, "c.toml").unwrap();
    let s = c.expand();
    let caps: Vec<(String, Option<u64>)> = s
        .iter()
        .map(|x| (x.key.clone(), x.settings.link.forward_pps))
        .collect();
    assert_eq!(
        caps,
        [
            ("payload=64,pps=10000".to_string(), Some(29000)),
            ("payload=64,pps=50000".to_string(), Some(29000)),
            (
                "payload=64,pps=50000,forward_pps=10000".to_string(),
                Some(10000)
            ),
            (
                "payload=64,pps=50000,forward_pps=20000".to_string(),
                Some(20000)
            ),
        ]
    );
    // A different cap is a different test-bed.
    assert_ne!(s[1].link_key(), s[2].link_key());
    assert_names(
        &err(&text.replace("forward_pps = 29000", "forward_pps = 0")),
        6,
        "forward_pps",
    );
    assert_names(
        &err(&text.replace("[10000, 20000]", "[10000, -1]")),
        13,
        "forward_pps",
    );
    let hosts = "name = \"h\"\n[loopback]\n[matrix]\nforward_pps = [1000]\n";
    assert_names(&err(hosts), 4, "forward_pps");
}

#[test]
fn report_table_read_and_checked() {
    use wirebench_campaign::summary::ThroughputUnits;
    let c = Campaign::parse(
        &format!("{GOOD}\n[report]\ncolumns = \"ip\"\nunits = \"ditg\"\nzoom = false\n"),
        "c.toml",
    )
    .unwrap();
    assert_eq!(c.report.columns.as_deref(), Some("ip"));
    assert_eq!(c.report.units, ThroughputUnits::Ditg);
    assert!(!c.report.zoom);
    // Defaults: no columns, SI units, zoom on.
    let d = Campaign::parse(GOOD, "c.toml").unwrap();
    assert_eq!(d.report, Default::default());
    assert!(d.report.zoom);
    let head = "[loopback]\n[matrix]\nip = [4, 6]\ntransport = [\"udp\"]\n[report]\n";
    assert_names(&err(&format!("{head}columns = \"colour\"\n")), 6, "columns");
    assert_names(
        &err(&format!("{head}columns = \"transport\"\n")),
        6,
        "columns",
    );
    assert_names(&err(&format!("{head}units = \"imperial\"\n")), 6, "units");
    assert_names(&err(&format!("{head}zoom = true\nwidth = 3\n")), 7, "width");
}

#[test]
fn link_rate_axis_on_real_nodes_needs_apply_link_rate() {
    let nodes = |apply: &str| {
        format!(
            "[hosts]\n[[hosts.node]]\nname = \"a\"\nlocal = true\nrole = \"sender\"\n{apply}\n\
             [[hosts.node]]\nname = \"b\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n\
             [matrix]\nlink_rate = [\"10mbit\", \"100mbit\"]\n"
        )
    };
    let e = err(&nodes(""));
    assert_names(&e, 13, "link_rate");
    assert!(e.to_string().contains("apply_link_rate"), "{e}");
    let c = Campaign::parse(&nodes("apply_link_rate = true"), "c.toml").unwrap();
    let Target::Hosts(h) = &c.target else {
        panic!("hosts")
    };
    assert!(h.nodes[0].apply_link_rate && !h.nodes[1].apply_link_rate);
    let rates: Vec<Option<u64>> = c
        .expand()
        .into_iter()
        .map(|s| s.settings.link.rate_bps)
        .collect();
    assert_eq!(rates, vec![Some(10_000_000), Some(100_000_000)]);
}

const NODES: &str = "[hosts]\n\
[[hosts.node]]\nname = \"win\"\nlocal = true\nrole = \"sender\"\nto = \"rx\"\n\
[[hosts.node]]\nname = \"lin\"\nlocal = true\nrole = \"sender\"\nto = \"rx\"\n\
[[hosts.node]]\nname = \"rx\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n";

#[test]
fn sender_axis_picks_one_sender_node_per_scenario() {
    let c = Campaign::parse(
        &format!("{NODES}[matrix]\nsender = [\"win\", \"lin\"]\npayload = [64, 512]\n"),
        "c.toml",
    )
    .unwrap();
    let s = c.expand();
    assert_eq!(s.len(), 4);
    let picked: Vec<_> = s.iter().map(|x| x.settings.sender.clone()).collect();
    assert!(picked.contains(&Some("win".into())) && picked.contains(&Some("lin".into())));
    assert!(s.iter().all(|x| x.axes.contains_key("sender")));
    // A name that is not a sender node, and the axis without nodes, are
    // refused naming the axis and its line.
    let e = err(&format!("{NODES}[matrix]\nsender = [\"win\", \"rx\"]\n"));
    assert_names(&e, 18, "sender");
    assert!(
        e.to_string().contains("\"rx\"") && e.to_string().contains("win, lin"),
        "{e}"
    );
    let e = err("[loopback]\n[matrix]\nsender = [\"a\"]\n");
    assert_names(&e, 3, "sender");
}

#[test]
fn every_engine_model_tcp_rtt_and_file_transfers() {
    // Every application model the engine has is an axis value.
    let c = Campaign::parse(
        "packets = 50\n[loopback]\n[matrix]\napp = [\"voip-real\", \"opus\", \"video\", \"dns\"]\n",
        "c.toml",
    )
    .unwrap();
    let apps: Vec<String> = c.expand().iter().map(|s| s.settings.app.clone()).collect();
    assert_eq!(apps, ["voip-real", "opus", "video", "dns"]);
    // TCP under the RTT meter: the engine reflects TCP records too.
    let c = Campaign::parse(
        "duration_s = 1\n[loopback]\n[matrix]\ntransport = [\"tcp\"]\nmeter = [\"rtt\"]\n",
        "c.toml",
    )
    .unwrap();
    let s = &c.expand()[0].settings;
    assert_eq!((s.transport.as_str(), s.meter.as_str()), ("tcp", "rtt"));
    // The file model is S4's transfer: its size is the campaign's kbytes,
    // and it runs on TCP.
    let c = Campaign::parse(
        "kbytes = 5120\n[loopback]\n[matrix]\napp = [\"file\"]\n",
        "c.toml",
    )
    .unwrap();
    assert_eq!(c.length, RunLength::KBytes { count: 5120 });
    assert_eq!(c.expand()[0].settings.transport, "tcp");
    // Without kbytes it has no size: refused, naming the block's line.
    let e = err("duration_s = 2\n[loopback]\n[matrix]\napp = [\"file\"]\n");
    assert_names(&e, 3, "app");
    assert!(e.to_string().contains("kbytes"), "{e}");
    // Still unknown: named.
    let e = err("[loopback]\n[matrix]\napp = [\"ftp\"]\n");
    assert!(e.to_string().contains("opus"), "{e}");
}

#[test]
fn duration_axis_sets_each_scenarios_run_length() {
    // S1's pilot: run lengths as an axis in one block, the campaign's own
    // length for the others.
    let text = r#"duration_s = 60
linger_s = 0
[loopback]
[[matrix]]
payload = [1408]
[[matrix]]
payload = [64]
duration = [10, 120, 2.5]
[quick]
duration_s = 2
"#;
    let c = Campaign::parse(text, "c.toml").unwrap();
    let got: Vec<(String, RunLength)> = c
        .expand()
        .iter()
        .map(|s| (s.key.clone(), c.run_length(s)))
        .collect();
    let d = |seconds| RunLength::Duration { seconds };
    assert_eq!(
        got,
        [
            ("payload=1408".to_string(), d(60.0)),
            ("payload=64,duration=10".to_string(), d(10.0)),
            ("payload=64,duration=120".to_string(), d(120.0)),
            ("payload=64,duration=2.5".to_string(), d(2.5)),
        ]
    );
    // The estimate counts each run's own length: 60 + 10 + 120 + 2.5 s of
    // traffic plus the fixed per-run cost.
    let e = wirebench_campaign::estimate::estimate(&c);
    let fixed = 4.0 * wirebench_campaign::estimate::RUN_OVERHEAD_S;
    assert!((e.seconds - (192.5 + fixed)).abs() < 1e-9, "{}", e.seconds);
    // --quick shortens the axis like the campaign's length (10 and 120
    // both become 2 s and merge) unless [quick] gives the axis itself.
    let mut q = c.clone();
    q.apply_quick().unwrap();
    let keys: Vec<String> = q.expand().into_iter().map(|s| s.key).collect();
    assert_eq!(keys, ["payload=1408", "payload=64,duration=2"]);
    let mut q = Campaign::parse(&format!("{text}duration = [1, 1.5]\n"), "c.toml").unwrap();
    q.apply_quick().unwrap();
    let lengths: Vec<RunLength> = q.expand().iter().map(|s| q.run_length(s)).collect();
    assert_eq!(lengths, [d(2.0), d(1.0), d(1.5)]);
    // Bad values name the key and line.
    for bad in ["0", "-3", "\"long\"", "86401"] {
        let e = err(&text.replace("[10, 120, 2.5]", &format!("[{bad}]")));
        assert_names(&e, 8, "duration");
    }
    // A file transfer runs until its bytes are through: no duration axis.
    let e = err("kbytes = 64\n[loopback]\n[matrix]\napp = [\"file\"]\nduration = [5]\n");
    assert_names(&e, 3, "duration");
}

/// `repeat_stalled` is 0..=5, acts only where link emulators count host
/// stalls (an emulated [testbed], runs of a plan), and is not part of what
/// a finished run was measured with, so a resumed file may change it.
#[test]
fn repeat_stalled_is_checked_and_refused_where_it_cannot_act() {
    let bed = "[testbed]\npreset = \"direct\"\nlink_rate = \"100mbit\"\n[matrix]\npayload = [64]\n";
    let c = Campaign::parse(bed, "c.toml").unwrap();
    assert_eq!(c.repeat_stalled, 0);
    let with = |n: &str| format!("name = \"s\"\nrepeat_stalled = {n}\n{bed}");
    let c = Campaign::parse(&with("2"), "c.toml").unwrap();
    assert_eq!(c.repeat_stalled, 2);
    assert_eq!(
        Campaign::parse(&with("5"), "c.toml")
            .unwrap()
            .repeat_stalled,
        5
    );
    for bad in ["-1", "6"] {
        let e = err(&with(bad));
        assert_names(&e, 2, "repeat_stalled");
        assert!(e.to_string().contains("0..=5"), "{e}");
    }
    // Not a whole number: toml's type error, on its line (as for every key).
    for bad in ["\"twice\"", "1.5"] {
        assert_eq!(err(&with(bad)).line(), 2);
    }
    // Where no link emulator runs it could never act: refused, naming it.
    let e = err("repeat_stalled = 1\n[loopback]\n[matrix]\npayload = [64]\n");
    assert_names(&e, 1, "repeat_stalled");
    assert!(e.to_string().contains("[testbed]"), "{e}");
    let hosts = "[hosts]\nreceiver = \"127.0.0.1\"\n[matrix]\npayload = [64]\n";
    assert_names(
        &err(&format!("repeat_stalled = 1\n{hosts}")),
        1,
        "repeat_stalled",
    );
    assert_names(
        &err(&format!(
            "repeat_stalled = 1\n{NODES}[matrix]\npayload = [64]\n"
        )),
        1,
        "repeat_stalled",
    );
    // An RFC 2544 search decides each trial from the last.
    let rfc = "repeat_stalled = 1\n[testbed]\npreset = \"router\"\nlink_rate = \"10mbit\"\n[rfc2544]\nframes = [64]\n";
    assert_names(&err(rfc), 1, "repeat_stalled");
    // 0 is the default, accepted anywhere.
    Campaign::parse(
        "repeat_stalled = 0\n[loopback]\n[matrix]\npayload = [64]\n",
        "c.toml",
    )
    .unwrap();
    // A resumed campaign may change it: no finished run depends on it.
    let old = Campaign::parse(&with("0"), "c.toml").unwrap();
    let new = Campaign::parse(&with("3"), "c.toml").unwrap();
    let done = std::collections::HashSet::from([(old.expand()[0].key.clone(), 0)]);
    wirebench_campaign::campaign::check_growth(&old, &new, &done).unwrap();
}
