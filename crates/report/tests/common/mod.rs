//! Campaign summaries shaped like the studies' (S5 payload sweep, S1-style
//! application models), built in code so the report tests need no store.
#![allow(dead_code)]

use std::collections::BTreeMap;
use wirebench_schema::summary::*;

/// Deterministic noise in [-1, 1).
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

pub fn info(key: &str, family: MetricFamily, label: &str, unit: &str) -> MetricInfo {
    MetricInfo {
        key: key.into(),
        family,
        label: label.into(),
        unit: unit.into(),
        // The table's direction and combine rule, as a real summary has them.
        combine: wirebench_schema::metrics::metric(key)
            .map(|m| m.combine)
            .unwrap_or_default(),
        better: wirebench_schema::metrics::metric(key)
            .map(|m| m.better)
            .unwrap_or_default(),
    }
}

pub fn stats(mean: f64, cv: f64, n: usize) -> MetricStats {
    let sd = mean.abs() * cv;
    let ci95 = 2.262 * sd / (n as f64).sqrt();
    MetricStats {
        n,
        mean,
        sd,
        median: mean,
        min: mean - 2.0 * sd,
        max: mean + 2.0 * sd,
        ci95,
        cv,
        cv_warning: cv > 0.10,
        pct_vs_baseline: None,
    }
}

/// The payload-throughput row of the metric table.
pub fn payload_info() -> MetricInfo {
    info(
        "throughput_payload_bps",
        MetricFamily::Throughput,
        "Payload throughput",
        "bit/s",
    )
}

/// Gamess–Suros bound of UDP payload throughput at 100 Mbit/s, MTU 1500.
pub fn udp_bound(payload: f64, ip: u32, rate: f64) -> f64 {
    let (h, frag_data, frag_hdr) = if ip == 4 {
        (20.0, ((1500.0 - 20.0) / 8.0f64).floor() * 8.0, 20.0)
    } else {
        (40.0, ((1500.0 - 48.0) / 8.0f64).floor() * 8.0, 48.0)
    };
    let wire = |ip_len: f64| (ip_len + 18.0).max(64.0) + 20.0;
    let bytes = if payload + 8.0 + h <= 1500.0 {
        wire(payload + 8.0 + h)
    } else {
        let mut left = payload + 8.0;
        let mut w = 0.0;
        while left > 0.0 {
            let d = left.min(frag_data);
            w += wire(d + frag_hdr);
            left -= d;
        }
        w
    };
    rate * payload / bytes
}

pub fn tcp_bound(ip: u32, rate: f64) -> f64 {
    let h = if ip == 4 { 20.0 } else { 40.0 };
    let mss = 1500.0 - h - 20.0 - 12.0;
    rate * mss / (mss + 32.0 + h + 38.0)
}

pub const PAYLOADS: [u32; 13] = [
    64, 128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408, 1536,
];

/// S5: {ip 4, 6} × {udp, tcp} × 13 payloads, 100 Mbit/s, 30 000 pps.
/// Series: 4 (ip × transport; 2 for the TCP-only metrics). Families:
/// throughput, rtt, jitter, loss, cpu, tcp.
pub fn s5_like(campaign_file: &str) -> CampaignSummary {
    let mut rng = Lcg(7);
    let metrics = vec![
        payload_info(),
        info(
            "throughput_ethernet_bps",
            MetricFamily::Throughput,
            "Ethernet throughput",
            "bit/s",
        ),
        info("rtt_mean_s", MetricFamily::Rtt, "Mean round-trip time", "s"),
        info("rtt_p99_s", MetricFamily::Rtt, "99th percentile RTT", "s"),
        info(
            "jitter_mean_abs_ipdv_s",
            MetricFamily::Jitter,
            "Jitter (mean |IPDV|)",
            "s",
        ),
        info("loss_ratio", MetricFamily::Loss, "Loss ratio", "ratio"),
        info(
            "cpu_sender",
            MetricFamily::Cpu,
            "CPU sender",
            "share of one core",
        ),
        info(
            "cpu_receiver",
            MetricFamily::Cpu,
            "CPU receiver",
            "share of one core",
        ),
        info(
            "cpu_host_softirq",
            MetricFamily::Cpu,
            "Host softirq (router forwarding)",
            "share of one core",
        ),
        info(
            "tcp_retransmits",
            MetricFamily::Tcp,
            "TCP retransmits",
            "packets",
        ),
        info("tcp_rtt_s", MetricFamily::Tcp, "TCP smoothed RTT", "s"),
        info(
            "tcp_cwnd_bytes",
            MetricFamily::Tcp,
            "TCP congestion window",
            "bytes",
        ),
    ];
    let rate = 100e6;
    let mut scenarios = Vec::new();
    for ip in [4u32, 6] {
        for transport in ["udp", "tcp"] {
            for &p in &PAYLOADS {
                let pf = p as f64;
                let bound = if transport == "udp" {
                    udp_bound(pf, ip, rate)
                } else {
                    tcp_bound(ip, rate)
                };
                let offered = 30_000.0 * pf * 8.0;
                let thr = offered.min(bound * 0.998) * (1.0 + 0.002 * rng.next());
                let saturated = offered > bound;
                let rtt = if saturated {
                    0.004 + 0.00002 * pf
                } else {
                    0.00012 + 0.0000001 * pf
                } * if ip == 6 { 0.8 } else { 1.0 };
                let mut m = BTreeMap::new();
                m.insert("throughput_payload_bps".into(), stats(thr, 0.004, 15));
                m.insert(
                    "throughput_ethernet_bps".into(),
                    stats(thr * 1.05, 0.004, 15),
                );
                m.insert("rtt_mean_s".into(), stats(rtt, 0.03, 15));
                m.insert("rtt_p99_s".into(), stats(rtt * 2.5, 0.05, 15));
                // One deliberately noisy scenario shows the cv flag.
                let jcv = if p == 1024 && ip == 6 && transport == "udp" {
                    0.18
                } else {
                    0.05
                };
                m.insert("jitter_mean_abs_ipdv_s".into(), stats(rtt * 0.1, jcv, 15));
                let loss = if saturated && transport == "udp" {
                    1.0 - bound / offered
                } else {
                    0.0
                };
                m.insert(
                    "loss_ratio".into(),
                    stats(loss, if loss > 0.0 { 0.02 } else { 0.0 }, 15),
                );
                m.insert("cpu_sender".into(), stats(0.35 + 0.0002 * pf, 0.03, 15));
                m.insert("cpu_receiver".into(), stats(0.22 + 0.0001 * pf, 0.03, 15));
                m.insert(
                    "cpu_host_softirq".into(),
                    stats(0.10 + 0.00005 * pf, 0.04, 15),
                );
                if transport == "tcp" {
                    // TCP state exists for TCP scenarios only.
                    m.insert(
                        "tcp_retransmits".into(),
                        stats(if saturated { 40.0 + pf / 10.0 } else { 0.0 }, 0.08, 15),
                    );
                    m.insert("tcp_rtt_s".into(), stats(rtt * 0.9, 0.03, 15));
                    m.insert(
                        "tcp_cwnd_bytes".into(),
                        stats(64_000.0 + 20.0 * pf, 0.05, 15),
                    );
                }
                let mut axes = BTreeMap::new();
                axes.insert("ip".to_string(), ip.to_string());
                axes.insert("transport".to_string(), transport.to_string());
                axes.insert("payload".to_string(), p.to_string());
                axes.insert("rate".to_string(), "100mbit".to_string());
                scenarios.push(ScenarioSummary {
                    key: format!("ip={ip},transport={transport},payload={p},rate=100mbit"),
                    axes,
                    runs_ok: 15,
                    runs_planned: 15,
                    metrics: m,
                    upper_bound_bps: Some(bound),
                    runs_above_bound: 0,
                    nodes: Default::default(),
                    hops: Default::default(),
                    series: None,
                    dist: None,
                });
            }
        }
    }
    // % change against IPv4 for the same transport and payload, as S5 compares.
    let base: BTreeMap<String, BTreeMap<String, f64>> = scenarios
        .iter()
        .filter(|s| s.axes["ip"] == "4")
        .map(|s| {
            (
                format!("{}/{}", s.axes["transport"], s.axes["payload"]),
                s.metrics.iter().map(|(k, v)| (k.clone(), v.mean)).collect(),
            )
        })
        .collect();
    for s in &mut scenarios {
        let b = &base[&format!("{}/{}", s.axes["transport"], s.axes["payload"])];
        for (k, st) in s.metrics.iter_mut() {
            let bm = b[k];
            st.pct_vs_baseline = if bm != 0.0 {
                Some((st.mean - bm) / bm * 100.0)
            } else {
                None
            };
        }
    }
    CampaignSummary {
        name: "s5-ipv4-vs-ipv6".into(),
        campaign_file: campaign_file.into(),
        started_at: "2026-11-21T18:00:00Z".into(),
        environment: Environment {
            kernel: "Linux 6.1.0-27-amd64".into(),
            cpu_model: "Intel(R) Xeon(R) CPU @ 2.20GHz".into(),
            cpus: 2,
            tool_version: "wirebench 0.1.0".into(),
            topology: "router: a — r1 — b, 100 Mbit/s links, MTU 1500".into(),
            extra: BTreeMap::from([("command".to_string(), "wirebench run examples/s5.toml".to_string())]),
        },
        axes: vec!["ip".into(), "transport".into(), "payload".into(), "rate".into()],
        x_axis: Some("payload".into()),
        baseline: Some("ip=4".into()),
        metrics,
        scenarios,
        notes: vec!["In an emulated test-bed every node shares one kernel: router forwarding appears as host softirq.".into()],
        report: Default::default(),
        rfc2544: None,
    }
}

pub const APPS: [&str; 7] = [
    "CSa", "Quake3", "G.711.1", "G.711.2", "G.723.1", "G.729.2", "G.729.3",
];

/// Application models: {app} × {ip 4, 6}: grouped bars, 2 series.
pub fn apps_like() -> CampaignSummary {
    let mut rng = Lcg(11);
    let metrics = vec![
        payload_info(),
        info(
            "delay_mean_s",
            MetricFamily::Delay,
            "Mean one-way delay",
            "s",
        ),
        info(
            "jitter_rfc3550_s",
            MetricFamily::Jitter,
            "Jitter (RFC 3550)",
            "s",
        ),
        info("mos", MetricFamily::Voip, "MOS", ""),
    ];
    let mut scenarios = Vec::new();
    for (ai, app) in APPS.iter().enumerate() {
        for ip in [4u32, 6] {
            let thr = [41e3, 36e3, 80e3, 80e3, 6.3e3, 8e3, 8e3][ai]
                * (1.0 + 0.01 * rng.next())
                * if ip == 6 { 0.98 } else { 1.0 };
            let mut m = BTreeMap::new();
            m.insert("throughput_payload_bps".into(), stats(thr, 0.01, 20));
            m.insert(
                "delay_mean_s".into(),
                stats(0.0002 + 0.00001 * ai as f64, 0.04, 20),
            );
            m.insert(
                "jitter_rfc3550_s".into(),
                stats(
                    0.00003 * (1.0 + ai as f64),
                    if ai == 1 { 0.2 } else { 0.05 },
                    20,
                ),
            );
            if app.starts_with('G') {
                m.insert("mos".into(), stats(4.1 + 0.05 * ai as f64, 0.005, 20));
            }
            let mut axes = BTreeMap::new();
            axes.insert("app".to_string(), app.to_string());
            axes.insert("ip".to_string(), ip.to_string());
            scenarios.push(ScenarioSummary {
                key: format!("app={app},ip={ip}"),
                axes,
                runs_ok: 20,
                runs_planned: 20,
                metrics: m,
                upper_bound_bps: None,
                runs_above_bound: 0,
                nodes: Default::default(),
                hops: Default::default(),
                series: None,
                dist: None,
            });
        }
    }
    CampaignSummary {
        name: "s1-applications".into(),
        campaign_file: "name = \"s1-applications\"\n[matrix]\napp = [\"CSa\", \"Quake3\"]\n".into(),
        started_at: "2026-11-21T19:00:00Z".into(),
        environment: Environment::default(),
        axes: vec!["app".into(), "ip".into()],
        x_axis: None,
        baseline: None,
        metrics,
        scenarios,
        notes: vec![],
        report: Default::default(),
        rfc2544: None,
    }
}

pub const S5_FILE: &str = "# S5: IPv4 versus IPv6, client-server through one router\nname = \"s5-ipv4-vs-ipv6\"\ntestbed = \"router\"\nrepetitions = 15\nduration = \"60s\"\n[matrix]\nip = [4, 6]\ntransport = [\"udp\", \"tcp\"]\npayload = [64, 128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408, 1536]\nrate = [\"100mbit\"]\n";

/// Waits for a headless Chromium child to finish within 30 s, killing it
/// (and failing) if it does not.
pub fn wait_chromium(mut child: std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "chromium exited with {st}");
            return;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
