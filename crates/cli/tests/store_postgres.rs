//! `--db postgres://…` end to end against a real PostgreSQL server the
//! test starts (wirebench_testkit::pg): a campaign's runs read back through
//! `results list`, `results export` and `report` exactly as from SQLite;
//! two controllers run 500 loopback runs each into one database at once,
//! one is SIGKILLed and resumed, and the database ends with exactly 1 000
//! runs, none doubled; a password in the URL is refused unshown.

// The test server runs on Unix only (testkit::pg).
#![cfg(unix)]

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use wirebench_campaign::store::{NewCampaign, NewRun};
use wirebench_campaign::Store;
use wirebench_testkit::pg::PgServer;

mod common;
use common::BIN;

/// wirebench with the test server's password, as a lab user would have it.
fn wb(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("PGPASSWORD", PgServer::PASSWORD)
        .env_remove("WIREBENCH_DB");
    c
}

fn ok(mut c: Command) -> Output {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Copies every campaign and run of one store into another, in order.
fn copy(from: &Store, to: &Store) {
    for c in from.campaigns().unwrap() {
        let id = to
            .create_campaign(&NewCampaign {
                name: &c.name,
                origin: &c.origin,
                file_text: &c.file_text,
                started_at: &c.started_at,
                environment: &c.environment,
                planned_runs: c.planned_runs as usize,
                quick: c.quick,
            })
            .unwrap();
        for r in from.runs(c.id).unwrap() {
            assert!(to
                .record_run(&NewRun {
                    campaign_id: id,
                    scenario_key: &r.scenario_key,
                    axes: &r.axes,
                    repetition: r.repetition,
                    status: r.status,
                    result: r.result.as_ref(),
                    counters: r.counters.as_ref(),
                    command: &r.command,
                    error: r.error.as_deref(),
                    started_at: &r.started_at,
                    ended_at: &r.ended_at,
                })
                .unwrap());
        }
        to.set_campaign_status(id, &c.status).unwrap();
    }
}

#[test]
fn a_campaign_reads_back_the_same_from_sqlite_and_postgres() {
    let Some(pg) = PgServer::start("a_campaign_reads_back_the_same_from_sqlite_and_postgres")
    else {
        return;
    };
    pg.create_db("same");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "name = \"same\"\nrepetitions = 2\npackets = 20\nlinger_s = 0.05\npause_s = 0\n\
         [loopback]\n[matrix]\nip = [4, 6]\ntransport = [\"udp\"]\npayload = [64, 300]\npps = [1000]\n",
    )
    .unwrap();
    let db = dir.path().join("s.db");
    let lite = db.to_str().unwrap();
    ok(wb(&["run", file.to_str().unwrap(), "--db", lite, "-q"]));
    copy(
        &Store::open_existing(&db).unwrap(),
        &Store::open(pg.socket_url("same")).unwrap(),
    );
    let url = pg.url("same");
    let j = |n: &str| dir.path().join(n).display().to_string();
    let reads: Vec<Vec<String>> = vec![
        vec!["results".into(), "list".into()],
        vec!["results".into(), "list".into(), "same".into()],
        vec![
            "results".into(),
            "list".into(),
            "--status".into(),
            "ok".into(),
            "--limit".into(),
            "3".into(),
            "--offset".into(),
            "2".into(),
        ],
        vec!["results".into(), "show".into(), "3".into()],
        vec![
            "results".into(),
            "export".into(),
            "--format".into(),
            "json".into(),
        ],
        vec![
            "results".into(),
            "export".into(),
            "--format".into(),
            "csv".into(),
        ],
        vec![
            "results".into(),
            "export".into(),
            "--format".into(),
            "long".into(),
        ],
        vec![
            "report".into(),
            "-o".into(),
            j("r.html"),
            "--json".into(),
            j("r.json"),
        ],
    ];
    for args in &reads {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let a = ok(wb(&[&args[..], &["--db", lite]].concat()));
        let json_a = std::fs::read_to_string(j("r.json")).unwrap_or_default();
        // The URL from the environment, as a lab sets it once.
        let mut c = wb(&args);
        c.env("WIREBENCH_DB", &url);
        let b = ok(c);
        let json_b = std::fs::read_to_string(j("r.json")).unwrap_or_default();
        let (a, b) = (
            String::from_utf8_lossy(&a.stdout),
            String::from_utf8_lossy(&b.stdout),
        );
        assert!(!a.trim().is_empty(), "{args:?} printed nothing");
        assert_eq!(a, b, "{args:?} differs between SQLite and PostgreSQL");
        assert_eq!(json_a, json_b, "{args:?}: report JSON differs");
    }

    // A password in the URL is refused (exit 2) without being shown.
    let out = wb(&[
        "results",
        "list",
        "--db",
        "postgres://wbtest:s3cret@127.0.0.1:1/x",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("PGPASSWORD") && !err.contains("s3cret"),
        "{err}"
    );
    // Nor in a campaign file's `store`, whose line is named.
    let f = dir.path().join("pw.toml");
    std::fs::write(&f, "name = \"pw\"\nstore = \"postgres://wbtest:s3cret@127.0.0.1:1/x\"\n[loopback]\n[matrix]\npayload = [64]\n").unwrap();
    let out = wb(&["run", f.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(":2:") && err.contains("store") && !err.contains("s3cret"),
        "{err}"
    );
    // A database without a store: exit 2, naming it.
    pg.create_db("empty");
    let out = wb(&["report", "--db", &pg.url("empty")]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    // The wrong password: refused by the server, the message says where
    // the password came from.
    let out = wb(&["results", "list", "--db", &url])
        .env("PGPASSWORD", "wrong")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("PGPASSWORD") && !err.contains("wrong"),
        "{err}"
    );
}

/// Finished runs of the latest campaign of that name in the store.
fn finished(url: &str, name: &str) -> usize {
    let Ok(s) = Store::open_existing(url) else {
        return 0;
    };
    let Ok(Some(c)) = s.latest_by_name(name) else {
        return 0;
    };
    s.finished(c.id).map(|f| f.len()).unwrap_or(0)
}

fn lab_campaign(dir: &Path, name: &str, store: &str) -> String {
    // 50 payloads × 10 repetitions = 500 short loopback runs.
    let payloads: Vec<String> = (0..50).map(|i| (64 + 8 * i).to_string()).collect();
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!(
            "name = \"{name}\"\n{store}\nrepetitions = 10\npackets = 5\nlinger_s = 0.05\npause_s = 0\n\
             [loopback]\n[matrix]\nip = [4]\ntransport = [\"udp\"]\npayload = [{}]\npps = [1000]\n",
            payloads.join(", ")
        ),
    )
    .unwrap();
    file.display().to_string()
}

#[test]
fn two_controllers_write_500_runs_each_and_a_killed_one_resumes() {
    let Some(pg) = PgServer::start("two_controllers_write_500_runs_each_and_a_killed_one_resumes")
    else {
        return;
    };
    pg.create_db("lab");
    let url = pg.url("lab");
    let local = pg.socket_url("lab");
    let dir = tempfile::tempdir().unwrap();
    // One controller is given the store by --db, the other by its file.
    let fa = lab_campaign(dir.path(), "lab-a", "");
    let fb = lab_campaign(dir.path(), "lab-b", &format!("store = \"{url}\""));
    let spawn = |f: &str, extra: &[&str]| {
        let db: &[&str] = if f == fa { &["--db", &url] } else { &[] };
        wb(&[&["run", f, "-q"], db, extra].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn(&fa, &[]);
    let mut b = spawn(&fb, &[]);
    let t0 = Instant::now();
    while finished(&local, "lab-b") < 40 {
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "lab-b made no progress"
        );
        assert!(
            b.try_wait().unwrap().is_none(),
            "lab-b ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill().unwrap(); // SIGKILL: the run in flight is lost, nothing else
    b.wait().unwrap();
    let kept = finished(&local, "lab-b");
    assert!((40..500).contains(&kept), "killed after {kept} runs");

    // Its lock went with its connection: the resume is not refused, and a
    // second runner of lab-a (still running) is.
    let dup = wb(&["run", &fa, "--db", &url, "--resume", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&dup.stderr);
    if finished(&local, "lab-a") < 500 {
        assert!(
            err.contains("is already being run") && err.contains("advisory lock"),
            "{err}"
        );
    }
    let resumed = wb(&["run", &fb, "--resume"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for (name, c) in [("lab-a", a), ("lab-b resumed", resumed)] {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        if name == "lab-b resumed" {
            assert!(
                err.contains(&format!("kept {kept}, running {}", 500 - kept)),
                "{err}"
            );
        }
    }

    let store = Store::open_existing(&local).unwrap();
    let campaigns = store.campaigns().unwrap();
    assert_eq!(campaigns.len(), 2, "a resume started a new campaign");
    let mut total = 0;
    for c in &campaigns {
        let runs = store.runs(c.id).unwrap();
        let keys: HashSet<_> = runs
            .iter()
            .map(|r| (&r.scenario_key, r.repetition))
            .collect();
        assert_eq!(keys.len(), runs.len(), "{}: a run stored twice", c.name);
        assert_eq!(store.finished(c.id).unwrap().len(), 500, "{}", c.name);
        assert_eq!(c.status, "done");
        total += runs.len();
    }
    assert_eq!(total, 1000);
}
