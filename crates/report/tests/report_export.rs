//! CSV and JSON exports: every aggregate, proper quoting that round-trips
//! through an independent CSV reader, and JSON that deserialises back.

mod common;

use std::collections::BTreeMap;
use wirebench_report::{aggregates_csv, runs_csv, to_json, write_csv, RunRecord};

fn read_csv(text: &str) -> Vec<Vec<String>> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    r.records()
        .map(|rec| rec.unwrap().iter().map(String::from).collect())
        .collect()
}

#[test]
fn aggregates_round_trip_with_hostile_text() {
    let mut s = common::s5_like(common::S5_FILE);
    s.name = "camp, \"quoted\"\nsecond line".into();
    s.scenarios[0]
        .axes
        .insert("transport".into(), " udp, \"x\" ".into());
    let text = aggregates_csv(std::slice::from_ref(&s));
    let rows = read_csv(&text);
    let head = &rows[0];
    let col = |n: &str| {
        head.iter()
            .position(|h| h == n)
            .unwrap_or_else(|| panic!("column {n}"))
    };
    for c in [
        "campaign",
        "scenario",
        "ip",
        "transport",
        "payload",
        "rate",
        "metric",
        "n",
        "mean",
        "sd",
        "median",
        "min",
        "max",
        "ci95",
        "cv",
        "pct_vs_baseline",
        "upper_bound_bps",
    ] {
        col(c);
    }
    // Every scenario × metric is a row.
    let want: usize = s.scenarios.iter().map(|sc| sc.metrics.len()).sum();
    assert_eq!(rows.len() - 1, want);
    assert_eq!(rows[1][col("campaign")], s.name);
    assert_eq!(rows[1][col("transport")], " udp, \"x\" ");
    // Numbers come back bit-exact.
    for row in &rows[1..] {
        let sc = s
            .scenarios
            .iter()
            .find(|x| x.key == row[col("scenario")])
            .unwrap();
        let st = &sc.metrics[&row[col("metric")]];
        assert_eq!(row[col("mean")].parse::<f64>().unwrap(), st.mean);
        assert_eq!(row[col("ci95")].parse::<f64>().unwrap(), st.ci95);
        assert_eq!(row[col("n")].parse::<usize>().unwrap(), st.n);
        match st.pct_vs_baseline {
            Some(p) => assert_eq!(row[col("pct_vs_baseline")].parse::<f64>().unwrap(), p),
            None => assert_eq!(row[col("pct_vs_baseline")], ""),
        }
        // The bound sits beside payload throughput only.
        let b = &row[col("upper_bound_bps")];
        if row[col("metric")] == "throughput_payload_bps" {
            assert_eq!(b.parse::<f64>().unwrap(), sc.upper_bound_bps.unwrap());
            let share: f64 = row[col("pct_of_upper_bound")].parse().unwrap();
            assert!((share - st.mean / sc.upper_bound_bps.unwrap() * 100.0).abs() < 1e-9);
        } else {
            assert_eq!(b, "");
        }
    }
}

#[test]
fn runs_csv_and_files() {
    let runs: Vec<RunRecord> = (0..3)
        .map(|i| RunRecord {
            campaign: "c,1".into(),
            scenario: "ip=4,payload=64".into(),
            repetition: i + 1,
            run_id: Some(40 + i as i64),
            started_at: format!("2026-11-27T03:0{i}:00.000Z"),
            ended_at: format!("2026-11-27T03:0{i}:02.000Z"),
            status: if i == 2 {
                "failed: peer \"gone\"".into()
            } else {
                "ok".into()
            },
            axes: BTreeMap::from([
                ("ip".into(), "4".into()),
                ("payload".into(), "64".into()),
                ("pps".into(), if i == 0 { "max" } else { "1000" }.into()),
            ]),
            metrics: if i == 2 {
                BTreeMap::new()
            } else {
                BTreeMap::from([
                    ("throughput_payload_bps".into(), 15_360_000.5 + i as f64),
                    ("loss_ratio".into(), 0.1),
                ])
            },
        })
        .collect();
    let rows = read_csv(&runs_csv(&runs));
    assert_eq!(
        rows[0],
        [
            "campaign",
            "run_id",
            "scenario",
            "repetition",
            "status",
            "started_at",
            "ended_at",
            "ip",
            "payload",
            "pps",
            "paced",
            "loss_ratio",
            "throughput_payload_bps"
        ]
    );
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[2][0], "c,1");
    assert_eq!(rows[2][1], "41");
    assert_eq!(rows[1][3], "1", "repetitions count from 1");
    assert_eq!(rows[2][5], "2026-11-27T03:01:00.000Z");
    // pps "max" is an empty number and paced = false, never the text "max".
    assert_eq!((rows[1][9].as_str(), rows[1][10].as_str()), ("", "false"));
    assert_eq!(
        (rows[2][9].as_str(), rows[2][10].as_str()),
        ("1000", "true")
    );
    for r in &rows[1..] {
        for c in [1, 3, 7, 8, 9, 11, 12] {
            assert!(
                r[c].is_empty() || r[c].parse::<f64>().is_ok(),
                "{c}: {:?}",
                r[c]
            );
        }
    }
    assert_eq!(rows[2][12].parse::<f64>().unwrap(), 15_360_001.5);
    assert_eq!(rows[3][4], "failed: peer \"gone\"");
    assert_eq!(rows[3][12], "");

    // Long form: one row per run × metric with its unit; the failed run
    // keeps one row.
    let long = read_csv(&wirebench_report::runs_long_csv(&runs));
    let head = &long[0];
    assert_eq!(&head[head.len() - 3..], ["metric", "value", "unit"]);
    assert_eq!(long.len(), 1 + 2 + 2 + 1);
    let thr = long
        .iter()
        .find(|r| r[1] == "40" && r[11] == "throughput_payload_bps")
        .unwrap();
    assert_eq!(
        (thr[12].as_str(), thr[13].as_str()),
        ("15360000.5", "bit/s")
    );
    let loss = long.iter().find(|r| r[11] == "loss_ratio").unwrap();
    assert_eq!(loss[13], "ratio");
    assert!(long.iter().any(|r| r[1] == "42" && r[11].is_empty()));

    let dir = tempfile::tempdir().unwrap();
    let s = vec![common::s5_like(common::S5_FILE), common::apps_like()];
    let out = dir.path().join("csv");
    let written = write_csv(&out, &s, Some(&runs)).unwrap();
    assert_eq!(written.len(), 3);
    assert!(out.join("runs_long.csv").exists());
    let agg = std::fs::read_to_string(out.join("aggregates.csv")).unwrap();
    // The union of both campaigns' axes, and rows of both campaigns.
    let rows = read_csv(&agg);
    assert!(rows[0].contains(&"app".to_string()) && rows[0].contains(&"payload".to_string()));
    assert!(rows.iter().any(|r| r[0] == "s1-applications"));
    assert_eq!(write_csv(&dir.path().join("x"), &s, None).unwrap().len(), 1);
}

#[test]
fn json_round_trips() {
    let s = vec![common::s5_like(common::S5_FILE), common::apps_like()];
    let runs = vec![RunRecord {
        campaign: "s1".into(),
        scenario: "k".into(),
        repetition: 1,
        run_id: Some(7),
        started_at: String::new(),
        ended_at: String::new(),
        status: "ok".into(),
        axes: BTreeMap::new(),
        metrics: BTreeMap::from([("x".into(), 1.5)]),
    }];
    let text = to_json(&s, Some(&runs)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema"], "wirebench.report/1");
    let back: Vec<wirebench_schema::summary::CampaignSummary> =
        serde_json::from_value(v["campaigns"].clone()).unwrap();
    // serde_json's default float parser may be one ULP off, so compare numbers
    // relatively and everything else exactly.
    assert_eq!(back.len(), s.len());
    for (b, o) in back.iter().zip(&s) {
        assert_eq!(
            (&b.name, &b.campaign_file, &b.axes, &b.metrics),
            (&o.name, &o.campaign_file, &o.axes, &o.metrics)
        );
        assert_eq!(b.scenarios.len(), o.scenarios.len());
        for (bs, os) in b.scenarios.iter().zip(&o.scenarios) {
            assert_eq!(
                (&bs.key, &bs.axes, bs.runs_ok),
                (&os.key, &os.axes, os.runs_ok)
            );
            for (k, st) in &os.metrics {
                let bt = &bs.metrics[k];
                assert_eq!((bt.n, bt.cv_warning), (st.n, st.cv_warning));
                for (x, y) in [
                    (bt.mean, st.mean),
                    (bt.ci95, st.ci95),
                    (bt.sd, st.sd),
                    (bt.median, st.median),
                ] {
                    assert!((x - y).abs() <= 1e-12 * y.abs(), "{k}: {x} vs {y}");
                }
            }
        }
    }
    let back_runs: Vec<RunRecord> = serde_json::from_value(v["runs"].clone()).unwrap();
    assert_eq!(back_runs, runs);
    assert_eq!(to_json(&s, Some(&runs)).unwrap(), text, "deterministic");
    assert!(to_json(&s, None).unwrap().find("\"runs\"").is_none());
}
