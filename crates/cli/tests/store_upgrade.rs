//! Results stores written by earlier releases (schema 1, before the
//! metrics table, `tests/fixtures/store-v1.db`; schema 2, documents in
//! `runs`, `store-v2.db`) opened by this one: copied aside, migrated in
//! place, every run kept, and the same report numbers and run export as
//! the schema-1 release wrote from it. Also the list filters
//! and the tidy long export on the migrated store.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn wb(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "wirebench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Equal JSON, numbers within 1e-12 relative (the same sums in the same
/// order give the same bits; the slack only forgives a printer).
fn same(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                "{at}: {x} != {y}"
            );
        }
        (V::Object(x), V::Object(y)) => {
            let kx: Vec<_> = x.keys().collect();
            let ky: Vec<_> = y.keys().collect();
            assert_eq!(kx, ky, "{at}: keys");
            for (k, v) in x {
                same(v, &y[k], &format!("{at}.{k}"));
            }
        }
        (V::Array(x), V::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: length");
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                same(p, q, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// The fields of one CSV line (RFC 4180 quoting).
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(String::new()),
            (c, _) => out.last_mut().unwrap().push(c),
        }
    }
    out
}

fn count(db: &Path, sql: &str) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_schema_1_store_is_backed_up_migrated_and_reports_the_same() {
    migrates_and_reports_the_same("store-v1.db", 1);
}

/// Schema 2 (documents in `runs`), as the release before schema 3 wrote
/// it from the same fixture: the documents move to `run_docs`.
#[test]
fn a_schema_2_store_is_backed_up_migrated_and_reports_the_same() {
    migrates_and_reports_the_same("store-v2.db", 2);
}

fn migrates_and_reports_the_same(name: &str, from: u32) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    std::fs::copy(fixture(name), &db).unwrap();
    let version = |p: &Path| {
        rusqlite::Connection::open(p)
            .unwrap()
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get::<_, String>(0),
            )
            .unwrap()
    };
    assert_eq!(version(&db), from.to_string());

    let json = dir.path().join("new.json");
    let html = dir.path().join("r.html");
    wb(&[
        "report",
        "--db",
        db.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    // The copy taken before the migration is the old store, whole.
    let backup = dir.path().join(format!("old.db.schema{from}.bak"));
    assert_eq!(version(&backup), from.to_string());
    assert_eq!(count(&backup, "SELECT count(*) FROM runs"), 8);
    assert_eq!(version(&db), "3");
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 8);
    assert_eq!(count(&db, "SELECT count(*) FROM run_facts"), 8);
    // The documents left `runs`, every one of them.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM pragma_table_info('runs') WHERE name IN ('result', 'counters')"
        ),
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM run_docs WHERE result LIKE '{%'"),
        count(&backup, "SELECT count(*) FROM runs WHERE result LIKE '{%'")
    );
    assert!(count(&db, "SELECT count(DISTINCT key) FROM run_metrics") > 20);

    let old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("store-v1.report.json")).unwrap())
            .unwrap();
    let new: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // The series and histograms come from the documents, streamed.
    let sc = &new["campaigns"][0]["scenarios"][0];
    assert!(sc["series"]["runs"] == 2 && sc["dist"]["runs"] == 2, "{sc}");
    same(&old, &new, "report");

    let csv = wb(&[
        "results",
        "export",
        "--db",
        db.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(
        csv,
        std::fs::read_to_string(fixture("store-v1.runs.csv")).unwrap()
    );

    let json = wb(&["results", "export", "--db", db.to_str().unwrap()]);
    assert_eq!(
        json,
        std::fs::read_to_string(fixture("store-v1.export.json")).unwrap()
    );

    // Opened again: nothing more to migrate, no second copy.
    wb(&["results", "list", "--db", db.to_str().unwrap()]);
    assert!(!dir
        .path()
        .join(format!("old.db.schema{from}.bak.1"))
        .exists());
}

#[test]
fn list_filters_pages_and_long_exports() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    std::fs::copy(fixture("store-v1.db"), &db).unwrap();
    let d = db.to_str().unwrap();
    let lines = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();

    let all = lines(&wb(&["results", "list", "--db", d]));
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all[1].contains("fixture-v1") && all[1].contains("8/8"),
        "{all:?}"
    );

    let page = lines(&wb(&[
        "results",
        "list",
        "--db",
        d,
        "--campaign",
        "fixture-v1",
        "--limit",
        "3",
        "--offset",
        "2",
    ]));
    // Header lines, three runs (ids 3 to 5), the page line.
    assert_eq!(page.len(), 6, "{page:?}");
    assert!(page[2].trim_start().starts_with("3 "), "{page:?}");
    assert!(page[4].trim_start().starts_with("5 "), "{page:?}");
    assert_eq!(page[5], "runs 3–5 of 8; the next page: --offset 5");

    let failed = lines(&wb(&["results", "list", "--db", d, "--status", "failed"]));
    assert_eq!(failed.len(), 1, "{failed:?}");
    let ok = lines(&wb(&["results", "list", "--db", d, "--status", "ok"]));
    assert_eq!(ok.len(), 9, "{ok:?}");
    let future = lines(&wb(&[
        "results",
        "list",
        "1",
        "--db",
        d,
        "--since",
        "2100-01-01",
    ]));
    assert_eq!(future.len(), 2, "{future:?}");
    let recent = lines(&wb(&[
        "results",
        "list",
        "1",
        "--db",
        d,
        "--since",
        "2026-01-01",
    ]));
    assert_eq!(recent.len(), 10, "{recent:?}");
    let bad = Command::new(BIN)
        .args([
            "results",
            "list",
            "1",
            "--db",
            d,
            "--since",
            "yesterday-ish",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since"));

    // Long rows: one per run and metric, the same values as the wide CSV.
    let long = wb(&["results", "export", "--db", d, "--format", "long"]);
    let mut rows = long.lines();
    let head: Vec<&str> = rows.next().unwrap().split(',').collect();
    assert_eq!(
        head,
        [
            "campaign_id",
            "campaign",
            "run_id",
            "scenario",
            "axis_ip",
            "axis_payload",
            "axis_pps",
            "axis_transport",
            "repetition",
            "status",
            "started_at",
            "metric",
            "unit",
            "value"
        ]
    );
    let stored = count(&db, "SELECT count(*) FROM run_metrics");
    let body: Vec<&str> = rows.collect();
    assert_eq!(body.len() as i64, stored);
    let tp: Vec<f64> = body
        .iter()
        .map(|l| fields(l))
        .filter(|f| f[11] == "throughput_payload_bps" && f[12] == "bit/s")
        .map(|f| f[13].parse().unwrap())
        .collect();
    assert_eq!(tp.len(), 8);
    let wide = std::fs::read_to_string(fixture("store-v1.runs.csv")).unwrap();
    let col = fields(wide.lines().next().unwrap())
        .iter()
        .position(|c| c == "throughput_payload_bps")
        .unwrap();
    let from_wide: Vec<f64> = wide
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| fields(l)[col].parse().unwrap())
        .collect();
    assert_eq!(tp, from_wide);

    // Parquet: the same rows, read back with the parquet crate.
    let pq = dir.path().join("runs.parquet");
    wb(&[
        "results",
        "export",
        "--db",
        d,
        "--format",
        "parquet",
        "-o",
        pq.to_str().unwrap(),
    ]);
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let r = SerializedFileReader::new(std::fs::File::open(&pq).unwrap()).unwrap();
    assert_eq!(r.metadata().file_metadata().num_rows(), stored);
    let mut n = 0;
    let mut sum = 0.0;
    for row in r.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        let mut metric = String::new();
        let mut value = 0.0;
        for (name, f) in row.get_column_iter() {
            match (name.as_str(), f) {
                ("metric", parquet::record::Field::Str(s)) => metric = s.clone(),
                ("value", parquet::record::Field::Double(v)) => value = *v,
                _ => {}
            }
        }
        if metric == "throughput_payload_bps" {
            sum += value;
        }
        n += 1;
    }
    assert_eq!(n, stored);
    assert_eq!(sum, tp.iter().sum::<f64>());
    let no_file = Command::new(BIN)
        .args(["results", "export", "--db", d, "--format", "parquet"])
        .output()
        .unwrap();
    assert_eq!(no_file.status.code(), Some(2));
}
