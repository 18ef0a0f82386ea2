//! The results store on a real PostgreSQL server (started and stopped by
//! the test, `wirebench_testkit::pg`): the same writes give the same
//! reads and summaries as SQLite, two stores writing at once lose and
//! double nothing, and the campaign lock holds across connections.

// The test server runs on Unix only (testkit::pg).
#![cfg(unix)]

use serde_json::json;
use std::collections::BTreeMap;
use wirebench_campaign::store::{NewCampaign, NewRun, RunFilter, RunStatus, Store, StoreError};
use wirebench_campaign::summary::Environment;
use wirebench_stats::result::{FlowResult, ResultDoc};
use wirebench_testkit::pg::PgServer;

const FILE: &str = r#"
name = "same"
repetitions = 3
[loopback]
[matrix]
ip = [4, 6]
transport = ["udp"]
payload = [100]
pps = [1000]
"#;

fn doc(bps: f64, delay: f64) -> serde_json::Value {
    let mut f = FlowResult::default();
    f.throughput_bps.payload = bps;
    f.delay_s.mean = delay;
    f.delay_s.p99 = delay * 3.0;
    f.received.counts.packets = 1000;
    f.sent.packets = 1000;
    serde_json::to_value(ResultDoc::with_flows(vec![f])).unwrap()
}

fn new_campaign<'a>(name: &'a str, env: &'a Environment) -> NewCampaign<'a> {
    NewCampaign {
        name,
        origin: "same.toml",
        file_text: FILE,
        started_at: "2026-11-01T10:00:00.000Z",
        environment: env,
        planned_runs: 6,
        quick: false,
    }
}

fn put(
    s: &Store,
    cid: i64,
    ip: &str,
    rep: u32,
    status: RunStatus,
    d: Option<&serde_json::Value>,
) -> bool {
    let axes: BTreeMap<String, String> = [("ip", ip), ("transport", "udp"), ("payload", "100")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let key = format!("ip={ip},transport=udp,payload=100,pps=1000");
    let counters = json!({"nodes": {}, "drop_sites": []});
    s.record_run(&NewRun {
        campaign_id: cid,
        scenario_key: &key,
        axes: &axes,
        repetition: rep,
        status,
        result: d,
        counters: Some(&counters),
        command: "wirebench send …",
        error: (status == RunStatus::Failed).then_some("peer gone"),
        started_at: &format!("2026-11-01T10:00:0{rep}.000Z"),
        ended_at: &format!("2026-11-01T10:00:0{rep}.500Z"),
    })
    .unwrap()
}

/// One campaign's writes, including a failed run retried, a refused
/// overwrite of an ok run and a document that does not read.
fn fill(s: &Store) -> i64 {
    let env = Environment::default();
    let cid = s.create_campaign(&new_campaign("same", &env)).unwrap();
    for rep in 0..3 {
        assert!(put(
            s,
            cid,
            "4",
            rep,
            RunStatus::Ok,
            Some(&doc(1e6 + rep as f64 * 1e4, 1e-3))
        ));
    }
    assert!(put(s, cid, "6", 0, RunStatus::Ok, Some(&doc(9e5, 2e-3))));
    assert!(put(s, cid, "6", 1, RunStatus::Failed, None));
    assert!(put(
        s,
        cid,
        "6",
        1,
        RunStatus::Ok,
        Some(&doc(9.5e5, 2.5e-3))
    ));
    assert!(!put(s, cid, "6", 1, RunStatus::Ok, Some(&doc(1.0, 1.0))));
    assert!(put(
        s,
        cid,
        "6",
        2,
        RunStatus::Ok,
        Some(&json!({"schema": "other"}))
    ));
    s.set_campaign_status(cid, "done").unwrap();
    cid
}

/// Everything a list, an export and a report read, ids left out (they
/// are the database's own).
fn reads(s: &Store, cid: i64) -> serde_json::Value {
    let mut runs = Vec::new();
    s.for_each_run(&RunFilter::campaign(cid), |r| {
        runs.push(json!([
            r.scenario_key,
            r.repetition,
            r.status.as_str(),
            r.error,
            r.started_at,
            r.facts.readable as i64,
            r.throughput_payload_bps
        ]));
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let mut values = Vec::new();
    s.for_each_value(&RunFilter::campaign(cid), |_, k, v| {
        values.push(json!([k, v]));
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let mut finished: Vec<_> = s.finished(cid).unwrap().into_iter().collect();
    finished.sort();
    let page = RunFilter {
        limit: Some(2),
        offset: 3,
        status: Some(RunStatus::Ok),
        ..RunFilter::campaign(cid)
    };
    let mut paged = Vec::new();
    s.for_each_run(&page, |r| {
        paged.push(r.repetition);
        Ok::<_, StoreError>(())
    })
    .unwrap();
    // One planned run's row (`repeat_stalled` carries an attempt set
    // aside into the next): the retry that replaced the failed one.
    let one = |ip: &str, rep: u32| {
        s.run_of(
            cid,
            &format!("ip={ip},transport=udp,payload=100,pps=1000"),
            rep,
        )
        .unwrap()
        .map(|r| json!([r.status.as_str(), r.started_at, r.result, r.counters]))
    };
    let run_of = json!([one("6", 1), one("4", 0), one("4", 7)]);
    let summary = serde_json::to_value(wirebench_campaign::summarize(s, "same").unwrap()).unwrap();
    json!({
        "runs": runs,
        "values": values,
        "finished": finished,
        "ok_counts": s.ok_counts().unwrap().values().collect::<Vec<_>>(),
        "count_ok": s.count_runs(&RunFilter { status: Some(RunStatus::Ok), ..RunFilter::campaign(cid) }).unwrap(),
        "paged": paged,
        "full_runs": s.runs(cid).unwrap().iter().map(|r| json!([r.status.as_str(), r.result, r.counters])).collect::<Vec<_>>(),
        "run_of": run_of,
        "summary": summary,
    })
}

#[test]
fn postgres_reads_what_sqlite_reads_and_keeps_runs_unique_under_two_writers() {
    let Some(pg) = PgServer::start("postgres_reads_what_sqlite_reads") else {
        return;
    };
    pg.create_db("same");
    let dir = tempfile::tempdir().unwrap();
    let lite = Store::open(dir.path().join("s.db")).unwrap();
    let url = pg.socket_url("same");
    // A database without the store is not one: readers do not create it.
    match Store::open_existing(&url) {
        Err(StoreError::Missing(m)) => assert!(m.contains("wirebench"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("an empty database opened as a store"),
    }
    let post = Store::open(&url).unwrap();
    let (a, b) = (fill(&lite), fill(&post));
    assert_eq!(reads(&lite, a), reads(&post, b));
    let r = reads(&post, b);
    assert_eq!(r["count_ok"], json!(5), "{r}");
    assert_eq!(r["finished"].as_array().unwrap().len(), 5, "{r}");
    assert_eq!(r["run_of"][0][0], json!("ok"), "{r}");
    assert!(
        r["run_of"][0][2].is_object() && r["run_of"][2].is_null(),
        "{r}"
    );

    // A resume puts the run whose document does not read back in the queue.
    let bad = post.requeue_unreadable(b).unwrap();
    assert_eq!(bad.len(), 1);
    assert_eq!(lite.requeue_unreadable(a).unwrap(), bad);
    assert!(put(
        &post,
        b,
        "6",
        2,
        RunStatus::Ok,
        Some(&doc(9.7e5, 2e-3))
    ));
    assert_eq!(post.finished(b).unwrap().len(), 6);

    // The campaign lock holds across connections (as across controllers),
    // names its holder and is released when dropped.
    let held = post.lock_campaign("same").unwrap();
    let other = Store::open_existing(&url).unwrap();
    match other.lock_campaign("same") {
        Err(StoreError::Busy { holder, lock, .. }) => {
            assert_eq!(holder, Some(std::process::id()), "{lock}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a second lock on one campaign"),
    }
    let _free = other.lock_campaign("another").unwrap();
    drop(held);
    let _again = other.lock_campaign("same").unwrap();

    // Two stores (two controllers) write 500 runs each at the same time.
    std::thread::scope(|t| {
        for n in 0..2 {
            let url = &url;
            t.spawn(move || {
                let s = Store::open(url).unwrap();
                let env = Environment::default();
                let cid = s
                    .create_campaign(&new_campaign(&format!("writer{n}"), &env))
                    .unwrap();
                for rep in 0..250 {
                    for ip in ["4", "6"] {
                        assert!(put(&s, cid, ip, rep, RunStatus::Ok, Some(&doc(1e6, 1e-3))));
                    }
                }
            });
        }
    });
    let mut per = BTreeMap::new();
    for c in post.campaigns().unwrap() {
        if c.name.starts_with("writer") {
            let runs = post.runs(c.id).unwrap();
            let keys: std::collections::HashSet<_> = runs
                .iter()
                .map(|r| (r.scenario_key.clone(), r.repetition))
                .collect();
            assert_eq!(keys.len(), runs.len(), "a run stored twice in {}", c.name);
            per.insert(c.name, runs.len());
        }
    }
    assert_eq!(per.values().copied().collect::<Vec<_>>(), [500, 500]);
}
