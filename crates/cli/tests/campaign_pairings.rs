#![cfg(unix)]
//! `[hosts.pairings]` end to end over local agents on loopback: a campaign
//! of one pairing grown to two with `--resume` runs only the new pairing's
//! runs, each run uses and observes only its pairing's nodes, and the
//! report draws the pairing as categories named by the pairings.
//! Port 5400 (the nodes' receiver port) is also taken by
//! `campaign_nodes.rs`; cargo runs test binaries one after another.

use wirebench_campaign::{RunStatus, Store};

mod common;
use common::campaign;

fn text(pairings: &str) -> String {
    format!(
        "name = \"pairs\"\npackets = 200\nlinger_s = 0.2\nrepetitions = 2\n\
         [hosts]\n\
         [[hosts.node]]\nname = \"lin1\"\nlocal = true\nrole = \"sender\"\n\
         [[hosts.node]]\nname = \"win1\"\nlocal = true\nrole = \"sender\"\n\
         [[hosts.node]]\nname = \"lin2\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n\
         [[hosts.node]]\nname = \"r1\"\nlocal = true\nrole = \"router\"\n\
         [hosts.pairings]\n\
         lin-lin = {{ sender = \"lin1\", receiver = \"lin2\", routers = [\"r1\"] }}\n\
         win-lin = {{ sender = \"win1\", receiver = \"lin2\" }}\n\
         [matrix]\nip = [4]\npayload = [500]\npps = [2000]\npairing = [{pairings}]\n"
    )
}

/// Runs `cmd`, which must succeed; its stderr.
fn ok(mut cmd: std::process::Command) -> String {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

#[test]
fn a_two_pairing_campaign_runs_each_pairing_on_its_nodes_and_reports_them_as_categories() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    let db = dir.path().join("p.db");
    let stored = || {
        let s = Store::open_existing(&db).unwrap();
        let c = s.latest().unwrap().unwrap();
        s.runs(c.id).unwrap()
    };
    std::fs::write(&file, text("\"lin-lin\"")).unwrap();
    ok(campaign(&file, &db, &[]));
    let first: Vec<(i64, String)> = stored().into_iter().map(|r| (r.id, r.started_at)).collect();
    assert_eq!(first.len(), 2);

    // A second pairing added: only its runs run.
    std::fs::write(&file, text("\"lin-lin\", \"win-lin\"")).unwrap();
    let err = ok(campaign(&file, &db, &["--resume"]));
    assert!(err.contains("kept 2, running 2"), "{err}");
    let runs = stored();
    assert_eq!(runs.len(), 4);
    for r in &runs {
        assert_eq!(r.status, RunStatus::Ok, "{:?}", r.error);
        let p = r.axes["pairing"].as_str();
        assert_eq!(
            r.scenario_key,
            format!("ip=4,payload=500,pps=2000,pairing={p}")
        );
        if first.iter().any(|(id, _)| *id == r.id) {
            assert_eq!(p, "lin-lin", "kept runs are the first pairing's");
            assert!(first.contains(&(r.id, r.started_at.clone())));
        }
        let o = r.counters.as_ref().expect("observations");
        let (sender, idle, router) = match p {
            "lin-lin" => ("lin1", vec!["win1"], true),
            _ => ("win1", vec!["lin1", "r1"], false),
        };
        assert_eq!(o["pairing"]["name"], p, "{o}");
        assert_eq!(o["pairing"]["receiver"], "lin2");
        assert_eq!(o["pairing"]["senders"][0], sender);
        // The pairing's nodes are observed, the idle ones are not.
        for n in [sender, "lin2"] {
            assert!(o["cpu"][n]["cores"].is_array(), "{n}: {o}");
        }
        assert_eq!(o["roles"]["r1"].is_string(), router, "{o}");
        for n in idle {
            assert!(
                o["cpu"].get(n).is_none() && o["roles"].get(n).is_none(),
                "{n}: {o}"
            );
        }
        assert_eq!(o["path_mtu"][format!("{sender}->lin2")], 65535, "{o}");
        let doc = r.result.as_ref().unwrap();
        assert_eq!(doc["flows"][0]["received"]["packets"], 200, "{doc}");
    }
    assert_eq!(
        runs.iter()
            .filter(|r| r.axes["pairing"] == "win-lin")
            .count(),
        2
    );

    // The report: the pairing as grouped bars named by the pairings, and
    // a table column each.
    let html = dir.path().join("p.html");
    let mut report = std::process::Command::new(env!("CARGO_BIN_EXE_wirebench"));
    report
        .args(["report", "--db"])
        .arg(&db)
        .arg("-o")
        .arg(&html);
    ok(report);
    let html = std::fs::read_to_string(&html).unwrap();
    let thr: Vec<&str> = html
        .split("<figure class=\"chart\"")
        .filter(|f| f.contains("data-family=\"throughput\""))
        .collect();
    assert!(!thr.is_empty(), "no throughput chart");
    assert!(thr[0].contains("data-kind=\"bars\""), "drawn as bars");
    assert!(thr[0].contains("data-x=\"pairing\""), "over the pairings");
    assert!(html.contains("<th>pairing</th>"), "a pairing column");
    for p in ["lin-lin", "win-lin"] {
        assert!(thr[0].contains(&format!(">{p}</text>")), "chart names {p}");
        assert!(
            html.contains(&format!("<td class=\"axis\">{p}</td>")),
            "table row {p}"
        );
    }
}
