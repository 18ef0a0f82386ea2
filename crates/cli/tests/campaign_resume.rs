//! `wirebench run` end to end on loopback: a campaign killed with SIGKILL
//! part-way and resumed ends with exactly matrix × repetitions runs, none
//! repeated, none lost; bad campaign files fail before anything runs.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wirebench_campaign::{RunStatus, Store};

mod common;
use common::{campaign, campaign_runs, BIN};

const CAMPAIGN: &str = r#"
name = "resume-test"
repetitions = 2
packets = 40
linger_s = 0.1
pause_s = 0.2
baseline = "ip=4"
[loopback]
[matrix]
ip = [4, 6]
transport = ["udp"]
payload = [100, 300]
pps = [1000]
"#;

fn finished(db: &Path) -> usize {
    let Ok(s) = Store::open_existing(db) else {
        return 0;
    };
    let Ok(Some(c)) = s.latest() else { return 0 };
    s.finished(c.id).map(|f| f.len()).unwrap_or(0)
}

#[test]
fn sigkill_then_resume_has_every_run_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let db = dir.path().join("w.db");
    std::fs::write(&file, CAMPAIGN).unwrap();

    let mut child = campaign(&file, &db, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while finished(&db) < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no progress in 90 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "campaign ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup, no chance to finish the run in flight
    child.wait().unwrap();

    let store = Store::open_existing(&db).unwrap();
    let c = store.latest().unwrap().unwrap();
    let before = store.runs(c.id).unwrap();
    let ok_before: Vec<_> = before
        .iter()
        .filter(|r| r.status == RunStatus::Ok)
        .cloned()
        .collect();
    assert!(
        ok_before.len() >= 3 && ok_before.len() < 8,
        "killed after {} runs",
        ok_before.len()
    );
    drop(store);

    // Security suite, issue #9 item 11: three `--resume`s started together
    // each ran every missing run (51 executions for 17 runs). One runner per
    // campaign: the others are refused at once, naming the lock; a latecomer
    // that starts after the winner ended finds nothing left. Every missing
    // run is executed exactly once over the three.
    // One of them reaches the store through a symbolic link (issue #30
    // item 5): the lock is the database's, not its name's.
    #[cfg(unix)]
    let link = {
        let link = db.with_file_name("link.db");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        link
    };
    #[cfg(not(unix))]
    let link = db.clone();
    let three: Vec<_> = [&db, &link, &db]
        .into_iter()
        .map(|store| {
            campaign(&file, store, &["--resume"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = three
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let mut executed = 0;
    let mut winners = 0;
    for out in &outs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            winners += 1;
            let ran: usize = stdout
                .lines()
                .find(|l| l.starts_with("campaign resume-test (id"))
                .and_then(|l| l.split("): ").nth(1))
                .and_then(|t| t.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no 'N runs ok' in {stdout}"));
            executed += ran;
        } else {
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains("is already being run") && stderr.contains("w.db.resume-test.lock"),
                "{stderr}"
            );
        }
    }
    assert!(winners >= 1, "no resume ran");
    assert_eq!(
        executed,
        8 - ok_before.len(),
        "a run executed twice: {outs:?}"
    );

    let store = Store::open_existing(&db).unwrap();
    let all = store.campaigns().unwrap();
    assert_eq!(all.len(), 1, "resume must not start a second campaign");
    assert_eq!(all[0].status, "done");
    assert_eq!(all[0].planned_runs, 8);
    let runs = store.runs(c.id).unwrap();
    assert_eq!(runs.len(), 8, "matrix 4 × 2 repetitions");
    assert!(runs
        .iter()
        .all(|r| r.status == RunStatus::Ok && r.result.is_some()));
    let keys: HashSet<(String, u32)> = runs
        .iter()
        .map(|r| (r.scenario_key.clone(), r.repetition))
        .collect();
    assert_eq!(keys.len(), 8, "a (scenario, repetition) stored twice");
    for p in ["100", "300"] {
        for ip in ["4", "6"] {
            for rep in 0..2 {
                let k = format!("ip={ip},transport=udp,payload={p},pps=1000");
                assert!(keys.contains(&(k.clone(), rep)), "missing {k} #{rep}");
            }
        }
    }
    // Runs finished before the kill were neither repeated nor rewritten.
    for b in &ok_before {
        let now = runs
            .iter()
            .find(|r| r.id == b.id)
            .expect("a finished run disappeared");
        assert_eq!(now.started_at, b.started_at);
        assert_eq!(now.result, b.result);
    }
    // And every stored document is a real measurement of its scenario.
    for r in &runs {
        let d = r.result.as_ref().unwrap();
        assert_eq!(d["schema"], "wirebench.result/1");
        assert_eq!(d["flows"][0]["sent"]["packets"], 40);
    }
    // A second resume has nothing left to do.
    let again = campaign(&file, &db, &["--resume"]).output().unwrap();
    assert!(again.status.success());
    assert_eq!(
        Store::open_existing(&db).unwrap().runs(c.id).unwrap().len(),
        8
    );

    // A stored result that no longer reads is not "ok": `results list` says
    // so and `--resume` runs it again, saying which.
    let damaged = runs[2].id;
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE run_docs SET result = '{\"schema\": \"wirebench.res' WHERE run_id = ?1",
            [damaged],
        )
        .unwrap();
    let listed = Store::open_existing(&db).unwrap().runs(c.id).unwrap();
    let bad = listed.iter().find(|r| r.id == damaged).unwrap();
    assert_eq!(bad.status, RunStatus::Failed);
    assert!(bad.error.as_deref().unwrap().contains("no longer reads"));
    assert_eq!(finished(&db), 7);
    let again = campaign(&file, &db, &["--resume"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 stored run(s) of campaign")
            && stderr.contains(&format!(
                "{} #{}",
                runs[2].scenario_key,
                runs[2].repetition + 1
            )),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("1 runs ok, 0 failed, 7 already stored"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let rerun = Store::open_existing(&db).unwrap().runs(c.id).unwrap();
    assert_eq!(rerun.len(), 8);
    assert!(rerun.iter().all(|r| r.status == RunStatus::Ok));
    assert_eq!(
        rerun
            .iter()
            .find(|r| r.id == damaged)
            .unwrap()
            .result
            .as_ref()
            .unwrap()["flows"][0]["sent"]["packets"],
        40
    );

    // `results`: the store seen without SQL.
    let res = |args: &[&str]| {
        let mut a = vec!["results", "--db", db.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = Command::new(BIN).args(&a).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(res(&["list"]).contains("resume-test"));
    assert_eq!(res(&["list", "resume-test"]).matches(" ok ").count(), 8);
    let shown: serde_json::Value =
        serde_json::from_str(&res(&["show", &runs[0].id.to_string()])).unwrap();
    assert_eq!(shown["result"]["schema"], "wirebench.result/1");
    let csv = res(&["export", "resume-test", "--format", "csv"]);
    assert_eq!(csv.trim_end().lines().count(), 1 + 8, "{csv}");
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .contains("throughput_payload_bps"));
    let json: serde_json::Value =
        serde_json::from_str(&res(&["export", "--format", "json"])).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 8);
    let missing = Command::new(BIN)
        .args(["results", "--db", db.to_str().unwrap(), "show", "999"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}

fn bad(text: &str, line: usize, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    let db = dir.path().join("w.db");
    std::fs::write(&file, text).unwrap();
    let out = campaign(&file, &db, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("bad.toml:{line}:")),
        "line {line} not named: {err}"
    );
    assert!(err.contains(key), "key {key} not named: {err}");
    assert!(
        !db.exists(),
        "nothing may run (not even the store created) on bad input"
    );
}

#[test]
fn bad_campaign_files_fail_before_anything_runs() {
    bad(
        "name = \"x\"\n[loopback]\n[matrix]\nip = [4]\nsizes = [1]\n",
        5,
        "sizes",
    );
    bad(
        "[loopback]\n[matrix]\nip = [4]\ntransport = []\n",
        4,
        "transport",
    );
    bad(
        "repetitions = 0\n[loopback]\n[matrix]\nip = [4]\n",
        1,
        "repetitions",
    );
    bad(
        "[loopback]\n[matrix]\napp = [\"dns\",\n  \"napster\"]\n",
        3,
        "app",
    );
}

// Signals a child with SIGINT: Unix only.
#[cfg(unix)]
#[test]
fn sigint_stops_after_storing_finished_runs_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let db = dir.path().join("w.db");
    std::fs::write(&file, CAMPAIGN.replace("resume-test", "sigint-test")).unwrap();
    let mut child = campaign(&file, &db, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while finished(&db) < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no progress in 90 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "campaign ended before it could be interrupted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("--resume"), "tells how to continue: {err}");
    let store = Store::open_existing(&db).unwrap();
    let c = store.latest().unwrap().unwrap();
    assert_eq!(c.status, "interrupted");
    let runs = store.runs(c.id).unwrap();
    assert!(runs.len() < 8);
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Ok),
        "the aborted run must not be stored"
    );
}

/// Runs the campaign TEXT to its end in a fresh store; its runs.
fn runs_of(text: &str) -> Vec<wirebench_campaign::RunRow> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, text).unwrap();
    campaign_runs(&file, &dir.path().join("w.db"))
}

/// Issue #11 item 9: "cubic vs reno" and "EF vs best effort" are one
/// campaign; each run's result shows what the kernel used and saw.
#[test]
fn option_axes_reach_the_runs() {
    let runs = runs_of(
        r#"
name = "options"
repetitions = 1
packets = 30
linger_s = 0.1
pause_s = 0.1
[loopback]
[[matrix]]
transport = "tcp"
cc = ["cubic", "reno"]
pps = 500
[[matrix]]
dscp = ["ef", "be"]
rate = "400k"
size = "c 500"
"#,
    );
    assert_eq!(runs.len(), 4);
    for r in &runs {
        let doc = r.result.as_ref().expect("a result");
        let fl = &doc["flows"][0];
        assert_eq!(fl["received"]["unique"], 30, "{}", r.scenario_key);
        if let Some(cc) = r.axes.get("cc") {
            assert_eq!(fl["tcp_cc"].as_str(), Some(cc.as_str()));
        }
        if let Some(d) = r.axes.get("dscp") {
            let want = if d == "ef" { 46 } else { 0 };
            assert_eq!(fl["received"]["marks"]["dscp"][0]["dscp"], want, "{d}");
            assert_eq!(fl["requested"]["rate_pps"], 100.0);
        }
    }
}

/// Issue #11 item 9: the `direction` axis runs each scenario forward,
/// reverse (`send -R`) and both ways (`send --bidir`); the metrics read
/// what each run's flows carried, and a bidir run also each direction's.
#[test]
fn direction_axis_reaches_the_runs() {
    let runs = runs_of(
        r#"
name = "directions"
repetitions = 1
packets = 40
linger_s = 0.1
pause_s = 0.1
[loopback]
[[matrix]]
direction = ["forward", "reverse", "bidir"]
transport = ["udp", "tcp"]
pps = 1000
"#,
    );
    assert_eq!(runs.len(), 6);
    for r in &runs {
        let key = &r.scenario_key;
        let doc = r.result_doc().expect("a result").expect("it reads");
        let dirs: Vec<String> = doc
            .flows
            .iter()
            .map(|f| format!("{:?}", f.direction).to_ascii_lowercase())
            .collect();
        let want: &[&str] = match r.axes.get("direction").map(String::as_str) {
            Some("forward") => &["forward"],
            Some("reverse") => &["reverse"],
            Some("bidir") => &["forward", "reverse"],
            d => panic!("{key}: direction {d:?}"),
        };
        assert_eq!(dirs, want, "{key}");
        for f in &doc.flows {
            assert_eq!(f.received.counts.unique, 40, "{key}");
            assert!(f.throughput_bps.payload > 0.0, "{key}");
        }
        let m = wirebench_campaign::metrics::extract(&doc, None);
        assert_eq!(
            m.get("packets_received"),
            Some(&(40.0 * want.len() as f64)),
            "{key}"
        );
        let split = m.contains_key("throughput_reverse_payload_bps");
        assert_eq!(split, want.len() == 2, "{key}");
    }
}

/// Issue #10: run lengths as an axis (S1's pilot sweep). Each run lasts
/// its scenario's `duration`, whatever the campaign's own length.
#[test]
fn duration_axis_sets_each_runs_length() {
    let runs = runs_of(
        r#"
name = "durations"
repetitions = 1
duration_s = 30
linger_s = 0.1
[loopback]
[matrix]
pps = 200
duration = [0.3, 0.8]
"#,
    );
    assert_eq!(runs.len(), 2);
    for r in &runs {
        let d: f64 = r.axes["duration"].parse().unwrap();
        let doc = r.result.as_ref().expect("a result");
        let fl = &doc["flows"][0];
        let want = format!("duration {} ms", (d * 1000.0).round());
        assert_eq!(fl["requested"]["stop"].as_str(), Some(want.as_str()));
        // 200 pps for d seconds: the first packet at 0, the last at
        // d - 5 ms; a run ends on time (20 ms grace on a busy host).
        let span = fl["sent"]["duration_s"].as_f64().expect("sent span");
        assert!(
            (d - 0.03..=d + 0.02).contains(&span),
            "{}: sent for {span} s",
            r.scenario_key
        );
        let sent = fl["sent"]["packets"].as_u64().expect("sent packets");
        let due = (d * 200.0).round() as u64;
        assert!(
            sent.abs_diff(due) <= 2,
            "{}: {sent} of {due}",
            r.scenario_key
        );
    }
}

/// Issue 25 item 1 (check T1): a finished campaign raised from 2 to 3
/// repetitions, then given a new axis value, keeps every stored run and
/// runs only the new ones; changing what stored runs were measured with
/// is refused, naming the key, and changes nothing.
#[test]
fn a_campaign_grows_on_resume_and_keeps_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let db = dir.path().join("w.db");
    let text = |reps: u32, payloads: &str, packets: u32| {
        format!(
            "name = \"grow-test\"\nrepetitions = {reps}\npackets = {packets}\nlinger_s = 0.1\n[loopback]\n[matrix]\nip = [4, 6]\ntransport = [\"udp\"]\npayload = [{payloads}]\npps = [1000]\n"
        )
    };
    // (id, key, repetition, started) of every stored run.
    let stored = || -> Vec<(i64, String, u32, String)> {
        let s = Store::open_existing(&db).unwrap();
        let c = s.latest().unwrap().unwrap();
        s.runs(c.id)
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.scenario_key, r.repetition, r.started_at))
            .collect()
    };
    let resume = |expect_ok: bool| -> String {
        let out = campaign(&file, &db, &["--resume"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.success(), expect_ok, "{err}");
        err
    };
    std::fs::write(&file, text(2, "64, 1400", 40)).unwrap();
    assert!(campaign(&file, &db, &[]).status().unwrap().success());
    let first = stored();
    assert_eq!(first.len(), 8);

    std::fs::write(&file, text(3, "64, 1400", 40)).unwrap();
    let err = resume(true);
    assert!(err.contains("kept 8, running 4"), "{err}");
    assert!(err.contains("repetitions 2 → 3"), "{err}");
    let second = stored();
    assert_eq!(second.len(), 12);
    assert!(
        first.iter().all(|r| second.contains(r)),
        "a stored run changed"
    );
    let new: Vec<_> = second.iter().filter(|r| !first.contains(r)).collect();
    assert!(
        new.iter().all(|r| r.2 == 2),
        "only repetition #3 is new: {new:?}"
    );

    std::fs::write(&file, text(3, "64, 500, 1400", 40)).unwrap();
    let err = resume(true);
    assert!(err.contains("kept 12, running 6"), "{err}");
    let third = stored();
    assert_eq!(third.len(), 18);
    assert!(second.iter().all(|r| third.contains(r)));
    let s = Store::open_existing(&db).unwrap();
    let row = s.latest().unwrap().unwrap();
    assert_eq!((row.planned_runs, row.status.as_str()), (18, "done"));
    assert_eq!(s.campaigns().unwrap().len(), 1);
    drop(s);

    // Nothing new: kept all, ran none.
    assert!(resume(true).contains("kept 18, running 0"));
    // What stored runs were measured with cannot change under them.
    for (changed, key) in [
        (
            text(3, "64, 500, 1400", 50),
            "`packets` changed (packets = 40 → packets = 50)",
        ),
        (
            text(3, "64, 500", 40),
            "axis `payload` no longer has the value 1400",
        ),
        (text(2, "64, 500, 1400", 40), "`repetitions` lowered to 2"),
        (
            text(3, "64, 500, 1400", 40).replace("[loopback]", "seed = 7\n[loopback]"),
            "`seed` changed",
        ),
    ] {
        std::fs::write(&file, &changed).unwrap();
        let out = campaign(&file, &db, &["--resume"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(key) && err.contains("run without --resume"),
            "{key}: {err}"
        );
        let s = Store::open_existing(&db).unwrap();
        let row = s.latest().unwrap().unwrap();
        assert_eq!(
            row.file_text,
            text(3, "64, 500, 1400", 40),
            "a refusal wrote the file"
        );
        assert_eq!(row.status, "done");
    }
    assert_eq!(stored(), third);
}

/// Issue 25 item 3: adaptive repetitions run each scenario until its
/// headline metric settles; a rule that cannot be met runs to `max` and is
/// flagged; a resumed campaign with a higher `max` continues the rule from
/// the stored runs.
#[test]
fn adaptive_repetitions_run_until_settled_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let db = dir.path().join("w.db");
    let text = |name: &str, reps: &str| {
        format!(
            "name = \"{name}\"\nrepetitions = {reps}\npackets = 40\nlinger_s = 0.1\n[loopback]\n[matrix]\nip = [4, 6]\npayload = [200]\npps = [1000]\n"
        )
    };
    let count = |name: &str| -> Vec<usize> {
        let s = Store::open_existing(&db).unwrap();
        let c = s.find_campaign(name).unwrap();
        let runs = s.runs(c.id).unwrap();
        assert!(runs.iter().all(|r| r.status == RunStatus::Ok));
        ["ip=4,payload=200,pps=1000", "ip=6,payload=200,pps=1000"]
            .iter()
            .map(|k| runs.iter().filter(|r| r.scenario_key == *k).count())
            .collect()
    };
    // A paced 40-packet run's throughput varies far less than 50 %: both
    // scenarios settle after their 2 planned runs.
    std::fs::write(
        &file,
        text("settles", "{ min = 2, max = 4, until_cv = 0.5 }"),
    )
    .unwrap();
    let out = campaign(&file, &db, &[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(count("settles"), [2, 2]);
    assert!(
        stdout.contains("2 of 2 scenarios settled after 2 runs"),
        "{stdout}"
    );

    // No two delays agree to 1e-6 %: never settles, runs to max, flagged.
    let never = "{ min = 2, max = 3, until_ci = \"0.000001%\", metric = \"delay_mean_s\" }";
    std::fs::write(&file, text("never", never)).unwrap();
    let out = campaign(&file, &db, &[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(count("never"), [3, 3]);
    assert!(stdout.contains("0 of 2 scenarios settled"), "{stdout}");
    assert_eq!(stdout.matches("NOT SETTLED: ip=").count(), 2, "{stdout}");

    // Raising max and resuming continues from the 3 stored runs each.
    std::fs::write(&file, text("never", &never.replace("max = 3", "max = 4"))).unwrap();
    let out = campaign(&file, &db, &["--resume"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("kept 6, running 2"), "{stderr}");
    assert_eq!(count("never"), [4, 4]);
    let s = Store::open_existing(&db).unwrap();
    let row = s.find_campaign("never").unwrap();
    assert_eq!(row.status, "done");
    let reps: HashSet<u32> = s
        .runs(row.id)
        .unwrap()
        .iter()
        .map(|r| r.repetition)
        .collect();
    assert_eq!(reps, HashSet::from([0, 1, 2, 3]));
}
