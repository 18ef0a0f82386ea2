//! `wirebench report` end to end on a results store written through the
//! campaign layer's store API: HTML, CSV and JSON outputs, and the errors
//! for a missing store, an unknown campaign and an impossible output path.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use wirebench_campaign::campaign::Campaign;
use wirebench_campaign::store::{NewCampaign, NewRun, RunStatus, Store};
use wirebench_campaign::summary::Environment;
use wirebench_stats::result::{Cpu, CpuTime, FlowResult, HostCpuShare, ResultDoc};
use wirebench_stats::{DelayStats, Jitter, Throughput};

const FILE: &str = r#"
# report CLI fixture: <script>alert(1)</script>
name = "sweep"
repetitions = 3
baseline = "ip=4"
[testbed]
preset = "router"
mtu = 1500
link_rate = "100mbit"
[matrix]
ip = [4, 6]
transport = ["udp"]
payload = [64, 512, 1408]
"#;

fn doc(payload: f64, ip: u32, rep: u32) -> serde_json::Value {
    let thr = (30_000.0 * payload * 8.0).min(95e6)
        * (1.0 + 0.001 * rep as f64)
        * if ip == 6 { 0.97 } else { 1.0 };
    let d = 0.0001 + payload * 1e-8 * (1.0 + rep as f64 * 0.01);
    let mut f = FlowResult {
        throughput_bps: Throughput {
            payload: thr,
            ip: thr * 1.02,
            ethernet: thr * 1.04,
            wire: thr * 1.05,
        },
        delay_s: DelayStats {
            min: d * 0.5,
            mean: d,
            p50: d,
            p99: d * 3.0,
            max: d * 5.0,
            ..DelayStats::default()
        },
        jitter_s: Jitter {
            mean_abs_ipdv: d * 0.1,
            rfc3550: d * 0.09,
            pdv_p999: d * 2.0,
        },
        ..FlowResult::default()
    };
    f.received.counts.packets = 1_000_000;
    f.received.counts.lost = Some(10 * u64::from(rep));
    f.received.counts.loss_ratio = Some(1e-5 * f64::from(rep));
    f.sent.packets = 1_000_000 + 10 * u64::from(rep);
    let mut doc = ResultDoc::with_flows(vec![f]);
    doc.cpu = Cpu {
        sender: CpuTime {
            user: 0.2,
            system: 0.3 + 0.01 * f64::from(rep),
        },
        receiver: CpuTime {
            user: 0.1,
            system: 0.2,
        },
        host: HostCpuShare {
            user: 0.3,
            system: 0.4,
            softirq: 0.15,
            idle: 0.9,
            steal: 0.0,
        },
    };
    serde_json::to_value(doc).unwrap()
}

fn make_store(path: &Path) {
    let store = Store::open(path).unwrap();
    let c = Campaign::parse(FILE, "sweep.toml").unwrap();
    let env = Environment {
        kernel: "Linux test".into(),
        ..Default::default()
    };
    let cid = store
        .create_campaign(&NewCampaign {
            name: &c.name,
            origin: "sweep.toml",
            file_text: FILE,
            started_at: "2026-11-21T20:00:00Z",
            environment: &env,
            planned_runs: c.planned_runs(),
            quick: false,
        })
        .unwrap();
    for ip in [4u32, 6] {
        for p in [64u32, 512, 1408] {
            let key = format!("ip={ip},transport=udp,payload={p}");
            let axes: BTreeMap<String, String> = [
                ("ip", ip.to_string()),
                ("transport", "udp".into()),
                ("payload", p.to_string()),
            ]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b))
            .collect();
            for rep in 0..3u32 {
                let d = doc(p as f64, ip, rep);
                store
                    .record_run(&NewRun {
                        campaign_id: cid,
                        scenario_key: &key,
                        axes: &axes,
                        repetition: rep,
                        status: RunStatus::Ok,
                        result: Some(&d),
                        counters: None,
                        command: "test",
                        error: None,
                        started_at: "t0",
                        ended_at: "t1",
                    })
                    .unwrap();
            }
        }
    }
}

fn wb(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirebench"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn report_writes_html_csv_and_json_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    make_store(&dir.path().join("w.db"));
    let out = wb(
        &[
            "report", "--db", "w.db", "-o", "r.html", "--csv", "csv", "--json", "all.json",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    if let Ok(keep) = std::env::var("WIREBENCH_KEEP_REPORT") {
        std::fs::write(keep, &html).unwrap();
    }
    // Line charts over payload, one per family, 2 series (ip 4 / ip 6).
    for fam in ["throughput", "delay", "jitter", "loss", "cpu"] {
        let tag = format!("<figure class=\"chart\" data-family=\"{fam}\" data-kind=\"line\" data-series-count=\"2\" data-x=\"payload\">");
        assert_eq!(html.matches(&tag).count(), 1, "{fam}");
    }
    assert!(html.contains("# report CLI fixture: &lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!html.contains("<script"));
    // The campaign knows its link rate: the upper bound is drawn and tabled.
    assert!(html.contains("class=\"bound\""));
    assert!(html.contains("Measured / bound"));
    assert!(html.contains("Linux test"));

    let agg = std::fs::read_to_string(dir.path().join("csv/aggregates.csv")).unwrap();
    assert!(agg.starts_with("campaign,scenario,"));
    assert!(agg
        .lines()
        .any(|l| l.starts_with("sweep,\"ip=4,transport=udp,payload=1408\",")));
    let runs = std::fs::read_to_string(dir.path().join("csv/runs.csv")).unwrap();
    assert_eq!(runs.lines().count(), 1 + 18, "header + 18 runs");
    assert!(runs
        .lines()
        .next()
        .unwrap()
        .contains("throughput_payload_bps"));

    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("all.json")).unwrap())
            .unwrap();
    assert_eq!(j["schema"], "wirebench.report/1");
    assert_eq!(j["campaigns"][0]["name"], "sweep");
    assert_eq!(j["campaigns"][0]["scenarios"].as_array().unwrap().len(), 6);
    assert_eq!(j["runs"].as_array().unwrap().len(), 18);

    // Same store, same bytes.
    let out2 = wb(
        &[
            "report",
            "--db",
            "w.db",
            "--campaign",
            "sweep",
            "-o",
            "r2.html",
        ],
        dir.path(),
    );
    assert!(out2.status.success());
    assert_eq!(
        std::fs::read(dir.path().join("r2.html")).unwrap(),
        html.as_bytes()
    );
}

#[test]
fn missing_store_is_bad_input_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = wb(&["report", "--db", "nope.db"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nope.db") && err.contains("does not exist"),
        "{err}"
    );
    assert!(
        !dir.path().join("nope.db").exists(),
        "a typo must not create a store"
    );
    assert!(!dir.path().join("report.html").exists());
}

#[test]
fn unknown_campaign_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    make_store(&dir.path().join("w.db"));
    let out = wb(
        &["report", "--db", "w.db", "--campaign", "swep"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"swep\"") && err.contains("known campaigns: sweep"),
        "{err}"
    );
    assert!(!dir.path().join("report.html").exists());
}

#[test]
fn output_in_missing_directory_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    make_store(&dir.path().join("w.db"));
    let out = wb(
        &["report", "--db", "w.db", "-o", "no/such/dir/r.html"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o no/such/dir/r.html"));
}

/// Security suite, issue #9 item 10: a full disk never leaves a 0-byte
/// report where the previous one was. Every output goes through a
/// temporary file renamed over the old one only when complete: on a full
/// file system (a 64 KiB tmpfs, filled) the old HTML and JSON stay as they
/// were, no temporary file is left, and the error names the file and the
/// cause once (exit 1). Linux, as root (it mounts the tmpfs).
#[cfg(target_os = "linux")]
#[test]
fn full_disk_keeps_the_old_report() {
    use std::io::Write;
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    make_store(&dir.path().join("w.db"));
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "wirebench-full"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs needs root");
    let _guard = Unmount(mnt.clone());
    let html = mnt.join("r.html");
    let json = mnt.join("all.json");
    std::fs::write(&html, "old report").unwrap();
    std::fs::write(&json, "old json").unwrap();
    let mut fill = std::fs::File::create(mnt.join("fill")).unwrap();
    while fill.write_all(&[0u8; 4096]).is_ok() {}
    drop(fill);

    let out = wb(
        &["report", "--db", "w.db", "-o", html.to_str().unwrap()],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("r.html") && err.contains("No space left"),
        "{err}"
    );
    assert_eq!(
        err.matches("os error 28").count(),
        1,
        "cause printed once: {err}"
    );
    assert_eq!(std::fs::read_to_string(&html).unwrap(), "old report");

    let out = wb(
        &[
            "report",
            "--db",
            "w.db",
            "-o",
            "fine.html",
            "--json",
            json.to_str().unwrap(),
        ],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("all.json"), "{err}");
    assert_eq!(std::fs::read_to_string(&json).unwrap(), "old json");
    let mut left: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["all.json", "fill", "r.html"], "temporary files left");
}

/// Two stores labelled as OS pairings: one section first whose tables put
/// the pairings in columns and whose charts draw them as series.
#[test]
fn two_stores_combine_into_one_table_and_one_chart() {
    let dir = tempfile::tempdir().unwrap();
    make_store(&dir.path().join("a.db"));
    make_store(&dir.path().join("b.db"));
    let out = wb(
        &[
            "report",
            "a.db",
            "b.db",
            "--label",
            "Windows 7 → Linux",
            "--label",
            "Linux → Linux",
            "--units",
            "Mbit/s",
            "-o",
            "c.html",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(dir.path().join("c.html")).unwrap();
    let combined = html.split("<section").nth(1).unwrap();
    assert!(combined.contains("Campaign combined: Windows 7 → Linux | Linux → Linux"));
    // One throughput chart: the two pairings × IPv4/IPv6 as series.
    let thr: Vec<&str> = combined
        .split("<figure class=\"chart\"")
        .filter(|f| f.contains("data-family=\"throughput\""))
        .collect();
    assert_eq!(thr.len(), 1);
    for s in ["Windows 7 → Linux, IPv4", "Linux → Linux, IPv6"] {
        assert!(thr[0].contains(&format!("data-series=\"{s}\"")), "{s}");
    }
    assert!(thr[0].contains("Payload throughput (Mbit/s)"));
    // One table with both pairings as columns.
    assert!(combined.contains(
        "<th>Windows 7 → Linux</th><th>Linux → Linux</th><th>Δ Linux → Linux vs Windows 7 → Linux</th>"
    ));
    // Then each campaign's own section.
    assert_eq!(html.matches("<section class=\"campaign\"").count(), 3);

    // One label for two campaigns, or a unit nobody knows: bad input.
    let out = wb(&["report", "a.db", "b.db", "--label", "x"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--label: 1 given for 2 campaigns"));
    let out = wb(&["report", "a.db", "--units", "mbps"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Mbit/s"));
}
