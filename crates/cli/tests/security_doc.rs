//! docs/security.md names the test that replays each attack it answers;
//! this checks that every test it names is still a function in the
//! sources, so that its promises cannot outlive their tests.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Backticked words that look like test names: snake case, at least four
/// words (field names such as `interval_ms` or `playout_buffer_ms` have
/// fewer).
fn named_tests(doc: &str) -> Vec<String> {
    let mut v: Vec<String> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.matches('_').count() >= 3
                && w.starts_with(|c: char| c.is_ascii_lowercase())
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn every_test_named_in_security_md_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/security.md")).unwrap();
    let names = named_tests(&doc);
    // The page names dozens; a parser that finds few has broken.
    assert!(
        names.len() >= 40,
        "only {} test names found: {names:?}",
        names.len()
    );
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let sources: String = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !sources.contains(&format!("fn {n}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/security.md names tests that no source defines: {missing:?}"
    );
    assert!(names.contains(&"every_test_named_in_security_md_exists".to_string()));
}
