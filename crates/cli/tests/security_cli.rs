//! Command-line side of the security suite (issue #9): input the user
//! names must not be able to hang or exhaust the program. None of these
//! tests opens a socket or builds a test-bed.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn exits_2_naming(args: &[&str], needle: &str) {
    let t = Instant::now();
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needle.split(" | ") {
        assert!(err.contains(n), "{args:?} should name {n:?}: {err}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{args:?} took {:?}",
        t.elapsed()
    );
}

/// Item 9: `testbed up /dev/zero` grew to 4.2 GB in 3 s; `--script`,
/// `--idt-file`, `--size-file` and campaign files likewise. Input files
/// must be regular files of at most 16 MiB.
#[test]
fn endless_or_huge_input_files_exit_2() {
    let dev = "/dev/zero";
    let not_regular = "/dev/zero | not a regular file (a character device)";
    exits_2_naming(&["testbed", "up", dev], not_regular);
    exits_2_naming(&["send", "-a", "127.0.0.1", "--script", dev], not_regular);
    exits_2_naming(&["send", "-a", "127.0.0.1", "--idt-file", dev], not_regular);
    exits_2_naming(
        &["send", "-a", "127.0.0.1", "--size-file", dev],
        not_regular,
    );
    exits_2_naming(&["run", dev], not_regular);
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.ditg");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    let big = big.to_str().unwrap();
    exits_2_naming(
        &["send", "-a", "127.0.0.1", "--script", big],
        "big.ditg | 16 MiB",
    );
    exits_2_naming(&["run", big], "big.ditg | 16 MiB");
}
