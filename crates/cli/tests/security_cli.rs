//! Command-line side of the security suite (issue #9): input the user
//! names must not be able to hang or exhaust the program, and a result is
//! never lost or misreported. Tests that start a receiver use ports 157xx
//! (run them under the network lock).

mod common;

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

/// Item 9: an endless input (`testbed up /dev/zero`, a FIFO) or a huge one
/// is refused, for topologies, `--script`, `--idt-file`, `--size-file` and
/// campaign files alike: input files must be regular files of at most
/// 16 MiB.
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

/// Item 9 for the files options name: `--key-file` and `--payload
/// file:PATH` are bounded like every other input (a regular file of at
/// most 16 MiB: a FIFO would block, /dev/zero never ends), refused with
/// exit 2 naming the option before any connection is tried (nothing
/// listens on 15743: a run that got that far would exit 1). Unix only:
/// FIFOs and file modes.
#[cfg(unix)]
#[test]
fn key_and_payload_files_are_bounded_inputs() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o600)).unwrap();
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let (fifo, big, empty) = (
        fifo.to_str().unwrap(),
        big.to_str().unwrap(),
        empty.to_str().unwrap(),
    );
    let send = |opt: &str, value: &str| {
        vec![
            "send".to_string(),
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            "15743".into(),
            "-z".into(),
            "5".into(),
            opt.into(),
            value.into(),
        ]
    };
    let cases = [
        (
            "--key-file",
            "/dev/zero".to_string(),
            "not a regular file (a character device)",
        ),
        (
            "--key-file",
            fifo.to_string(),
            "not a regular file (a FIFO)",
        ),
        ("--key-file", big.to_string(), "16 MiB"),
        (
            "--key-file",
            dir.path().to_str().unwrap().to_string(),
            "not a regular file (a directory)",
        ),
        (
            "--payload",
            "file:/dev/zero".to_string(),
            "not a regular file (a character device)",
        ),
        (
            "--payload",
            format!("file:{fifo}"),
            "not a regular file (a FIFO)",
        ),
        ("--payload", format!("file:{big}"), "16 MiB"),
        ("--payload", format!("file:{empty}"), "empty file"),
        ("--payload", "file:".to_string(), "file:PATH"),
    ];
    for (opt, value, why) in cases {
        let args = send(opt, &value);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        exits_2_naming(&args, &format!("{opt} | {why}"));
    }
    // The same limits hold for a receiver's key file.
    exits_2_naming(
        &["recv", "-p", "15743", "--key-file", fifo],
        "--key-file | not a regular file (a FIFO)",
    );
}

/// Item 10: `--json FILE` was left at 0 bytes when the connection was
/// refused, and `--json /dev/full` exited 1 without printing the summary.
/// The document goes through a temporary file renamed at the end, and the
/// summary is printed whatever happens to the file.
#[test]
fn json_file_is_never_left_empty_and_summary_always_prints() {
    // Nothing listens on 15708: the connection is refused.
    let refused = |json: &std::path::Path| {
        run(&[
            "send",
            "-a",
            "127.0.0.1",
            "-p",
            "15708",
            "-z",
            "5",
            "--json",
            json.to_str().unwrap(),
        ])
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = refused(&json);
    assert_eq!(out.status.code(), Some(1));
    assert!(!json.exists(), "a refused run left {}", json.display());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "stray temporary file"
    );
    // An older result of that name survives a run that produced none.
    std::fs::write(&json, "old").unwrap();
    let out = refused(&json);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&json).unwrap(), "old");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // Ready when it says so: a fixed sleep let a host that held the
    // receiver's start past it refuse the sender.
    let mut rx = common::Recv::args(&["-B", "127.0.0.1", "-p", "15707"]);
    let send_20 = |json: &str| {
        let args = "send -a 127.0.0.1 -p 15707 -C 1000 -z 20 --linger 100 --json";
        let mut v: Vec<&str> = args.split(' ').collect();
        v.push(json);
        run(&v)
    };
    let out = send_20(json.to_str().unwrap());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["flows"][0]["received"]["unique"], 20);
    let out = send_20("/dev/full");
    rx.kill();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.contains("Packets received"), "no summary: {stdout}");
    assert!(stderr.contains("/dev/full"), "{stderr}");
}

/// Item 3 on the command line: the key comes from a private file or the
/// environment; a key file others can read, a short key, or a bad
/// `--allow` block are refused (exit 2); a sender without the key is told
/// why it is refused, one with it runs. Unix only: it sets file modes.
#[cfg(unix)]
#[test]
fn key_file_environment_and_allow_flags() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let keyf = dir.path().join("key");
    std::fs::write(&keyf, "correct horse battery staple\n").unwrap();
    let k = keyf.to_str().unwrap();
    std::fs::set_permissions(&keyf, std::fs::Permissions::from_mode(0o644)).unwrap();
    exits_2_naming(
        &["recv", "-p", "15709", "--key-file", k],
        "--key-file | readable by others",
    );
    std::fs::set_permissions(&keyf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "abc").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    exits_2_naming(
        &[
            "send",
            "-a",
            "127.0.0.1",
            "--key-file",
            short.to_str().unwrap(),
        ],
        "--key-file | at least 16",
    );
    exits_2_naming(&["recv", "--allow", "10.0.0.0/33"], "--allow | 10.0.0.0/33");
    // Probe MACs are keyed from the handshake: no key, no --auth probes.
    exits_2_naming(
        &["send", "-a", "127.0.0.1", "--auth", "probes"],
        "--auth probes | --key-file",
    );

    let mut rx = common::Recv::args(&[
        "-B",
        "127.0.0.1",
        "-p",
        "15709",
        "--key-file",
        k,
        "--allow",
        "127.0.0.0/8,::1",
    ]);
    let send = "send -a 127.0.0.1 -p 15709 -C 1000 -z 20 --linger 100 --json";
    let send: Vec<&str> = send.split(' ').collect();
    let keyless = Command::new(BIN)
        .args(&send)
        .env_remove("WIREBENCH_KEY")
        .output()
        .unwrap();
    let with_env = Command::new(BIN)
        .args(&send)
        .env("WIREBENCH_KEY", "correct horse battery staple")
        .output()
        .unwrap();
    let with_file = Command::new(BIN)
        .args(&send)
        .args(["--key-file", k])
        .output()
        .unwrap();
    let with_macs = Command::new(BIN)
        .args(&send)
        .args(["--key-file", k, "--auth", "probes"])
        .output()
        .unwrap();
    rx.kill();
    let err = String::from_utf8_lossy(&keyless.stderr);
    assert_eq!(keyless.status.code(), Some(1), "{err}");
    assert!(err.contains("authentication required"), "{err}");
    for out in [with_env, with_file, with_macs] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["flows"][0]["received"]["unique"], 20);
        assert_eq!(doc["flows"][0]["received"]["forged"], 0);
    }
}

/// Item 3, the receiver's choice: `recv --require-auth probes` serves only
/// senders that MAC every probe. A keyed sender without `--auth probes` is
/// refused and says why, naming both flags (exit 1); one with it runs.
/// Requiring MACs without a key exits 2 naming the flag. Unix only: it
/// sets file modes.
#[cfg(unix)]
#[test]
fn receiver_can_require_probe_macs() {
    use std::os::unix::fs::PermissionsExt;
    exits_2_naming(
        &["recv", "-p", "15744", "--require-auth", "probes"],
        "--require-auth probes | --key-file",
    );
    let dir = tempfile::tempdir().unwrap();
    let keyf = dir.path().join("key");
    std::fs::write(&keyf, "correct horse battery staple\n").unwrap();
    std::fs::set_permissions(&keyf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let k = keyf.to_str().unwrap();
    let rx = common::Recv::args(&[
        "-B",
        "127.0.0.1",
        "-p",
        "15744",
        "--key-file",
        k,
        "--require-auth",
        "probes",
    ]);
    let send = "send -a 127.0.0.1 -p 15744 -C 1000 -z 20 --linger 100 --json";
    let send: Vec<&str> = send.split(' ').collect();
    let keyed = |more: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(&send).args(["--key-file", k]).args(more);
        c.output().unwrap()
    };
    let untagged = keyed(&[]);
    let tagged = keyed(&["--auth", "probes"]);
    drop(rx);
    let err = String::from_utf8_lossy(&untagged.stderr);
    assert_eq!(untagged.status.code(), Some(1), "{err}");
    assert!(
        err.contains("recv --require-auth probes") && err.contains("--auth probes"),
        "{err}"
    );
    let err = String::from_utf8_lossy(&tagged.stderr);
    assert_eq!(tagged.status.code(), Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_slice(&tagged.stdout).unwrap();
    assert_eq!(doc["flows"][0]["received"]["unique"], 20);
    assert_eq!(doc["flows"][0]["received"]["forged"], 0);
}

/// Item 8: rates no pacer can follow are refused before anything starts:
/// `-C 1e12` ran 40 s on a 3 s run, `-N 0 0 -t 200` took 9.8 s.
#[test]
fn unpaceable_rates_exit_2() {
    exits_2_naming(
        &["send", "-a", "127.0.0.1", "-C", "1e12", "-t", "3000"],
        "rate | 10000000 packets/s",
    );
    exits_2_naming(
        &["send", "-a", "127.0.0.1", "-N", "0", "0", "-t", "200"],
        "inter-departure time | above 0",
    );
}

/// Item 10: the partial document after a receiver SIGKILL said `lost 0,
/// loss_ratio 0.0` with 3951 sent and 0 received. Without the receiver's
/// report the loss is unknown: `null` in the document, "unknown" in the
/// summary, never a 0 that was not measured.
#[test]
fn loss_without_a_receiver_report_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut rx = common::Recv::args(&["-B", "127.0.0.1", "-p", "15741"]);
    let tx = Command::new(BIN)
        .args(["send", "-a", "127.0.0.1", "-p", "15741", "-C", "2000"])
        .args(["-t", "3000", "--linger", "100", "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A second of the flow's own time, from the receiver's setting it up
    // (just before the first packet): a fixed second from the sender's
    // start let a host that held its start eat into it.
    rx.wait_for(" flow 1: ", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1000));
    rx.kill();
    let out = tx.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["partial"], true);
    let f = &doc["flows"][0];
    assert!(f["sent"]["packets"].as_u64().unwrap() > 1000, "{f}");
    for (k, v) in [
        ("flow lost", &f["received"]["lost"]),
        ("flow loss_ratio", &f["received"]["loss_ratio"]),
        ("total lost", &doc["total"]["lost"]),
        ("total loss_ratio", &doc["total"]["loss_ratio"]),
    ] {
        assert!(v.is_null(), "{k} should be null (unknown), is {v}");
    }
    assert!(
        stdout.contains("Packets lost              = unknown"),
        "{stdout}"
    );
}

/// Item 12: `-u 10 20` was silently raised to 24 B; negative numbers got
/// clap's "unexpected argument '-1'" without the flag; a chain longer than
/// the TTL was built and then failed `check`. Each is exit 2 naming the
/// flag or the limit, before anything is built.
#[test]
fn small_mistakes_exit_2_naming_the_flag() {
    exits_2_naming(&["send", "-a", "127.0.0.1", "-u", "10", "20"], "-u | 24");
    exits_2_naming(&["send", "-a", "127.0.0.1", "-t", "-1"], "-t");
    exits_2_naming(&["send", "-a", "127.0.0.1", "-z", "-5"], "-z");
    exits_2_naming(&["recv", "-p", "-1"], "-p");
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("chain.toml");
    let mut t = String::from(
        "[[node]]\nname = \"a\"\nkind = \"host\"\n[[node]]\nname = \"b\"\nkind = \"host\"\n",
    );
    for i in 1..=64 {
        t.push_str(&format!("[[node]]\nname = \"r{i}\"\nkind = \"router\"\n"));
    }
    let mut prev = "a".to_string();
    for i in 1..=64 {
        t.push_str(&format!("[[link]]\nendpoints = [\"{prev}\", \"r{i}\"]\n"));
        prev = format!("r{i}");
    }
    t.push_str(&format!("[[link]]\nendpoints = [\"{prev}\", \"b\"]\n"));
    std::fs::write(&topo, t).unwrap();
    exits_2_naming(
        &[
            "testbed",
            "up",
            topo.to_str().unwrap(),
            "--name",
            "storettl",
        ],
        "64 routers | at most 63",
    );
}

/// Item 5: the receiver's budgets are set with `recv` flags (bad values
/// exit 2 naming the flag); a session over one is refused and the sender
/// says why (exit 1, naming the budget); one within it runs.
#[test]
fn receiver_budgets_refuse_over_budget_sessions() {
    exits_2_naming(&["recv", "--session-buffers", "0"], "--session-buffers");
    exits_2_naming(
        &["recv", "--session-threads", "50", "--total-threads", "10"],
        "--session-threads | --total-threads",
    );
    let mut rx = common::Recv::args(&["-B", "127.0.0.1", "-p", "15743", "--session-sockets", "2"]);
    let send = "send -a 127.0.0.1 -p 15743 -C 1000 -z 20 --linger 100 --json";
    let send: Vec<&str> = send.split(' ').collect();
    let one = Command::new(BIN).args(&send).output().unwrap();
    let two = Command::new(BIN)
        .args(&send)
        .args(["--flows", "2"])
        .output()
        .unwrap();
    rx.kill();
    let err = String::from_utf8_lossy(&one.stderr);
    assert_eq!(one.status.code(), Some(0), "{err}");
    let err = String::from_utf8_lossy(&two.stderr);
    assert_eq!(two.status.code(), Some(1), "{err}");
    assert!(
        err.contains("3 sockets") && err.contains("--session-sockets"),
        "{err}"
    );
}

/// Issue #30 item 1 through the real programs: an on-path attacker who
/// reads the session id and the data port (here from the receiver's log)
/// sends one forged 40-byte first probe from another port of the
/// sender's address before the sender's first. With no key, a key only,
/// `--auth probes`, and a receiver requiring probe MACs, one-way and
/// `-m rtt`, the sender still measures 1000 of 1000 with no loss, exits
/// 0, and the receiver counted the forgery forged or foreign (before, the
/// whole flow was lost and `send` exited 0). Unix only: it sets file modes.
#[cfg(unix)]
#[test]
fn a_forged_first_datagram_cannot_take_a_flow() {
    use std::net::UdpSocket;
    use std::os::unix::fs::PermissionsExt;
    use wirebench_wire::{ProbeHeader, FLAG_RTT};
    let dir = tempfile::tempdir().unwrap();
    let keyf = dir.path().join("key");
    std::fs::write(&keyf, "correct horse battery staple\n").unwrap();
    std::fs::set_permissions(&keyf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let k = keyf.to_str().unwrap();
    let modes: [(&str, &[&str], &[&str]); 4] = [
        ("no key", &[], &[]),
        ("key only", &["--key-file", k], &["--key-file", k]),
        (
            "--auth probes",
            &["--key-file", k],
            &["--key-file", k, "--auth", "probes"],
        ),
        (
            "--require-auth probes",
            &["--key-file", k, "--require-auth", "probes"],
            &["--key-file", k, "--auth", "probes"],
        ),
    ];
    for (i, (mode, rx_args, tx_args)) in modes.into_iter().enumerate() {
        let port = (15760 + i).to_string();
        let mut a = vec!["-B", "127.0.0.1", "-p", &port];
        a.extend_from_slice(rx_args);
        let rx = common::Recv::args(&a);
        for meter in ["owd", "rtt"] {
            let mut send = Command::new(BIN);
            send.args(["send", "-a", "127.0.0.1", "-p", &port, "-m", meter])
                .args(["-C", "5000", "-z", "1000", "--linger", "200", "--json", "-"])
                .args(tx_args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let child = send.spawn().unwrap();
            // "session 5ec0ffee flow 1: udp port 41234", written before
            // the receiver answers Ready.
            let line = rx.wait_for("flow 1: udp port", Duration::from_secs(10));
            let word = |after: &str| {
                let at = line.find(after).unwrap() + after.len();
                line[at..].split([' ', ':']).next().unwrap().to_string()
            };
            let sid = u32::from_str_radix(&word("session "), 16).unwrap();
            let data_port: u16 = word("udp port ").parse().unwrap();
            let mut forged = [0u8; 40];
            let tx_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            ProbeHeader {
                flags: if meter == "rtt" { FLAG_RTT } else { 0 },
                session: sid,
                flow: 1,
                len: 40,
                seq: 0,
                tx_ns,
            }
            .encode(&mut forged)
            .unwrap();
            let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
            attacker.send_to(&forged, ("127.0.0.1", data_port)).unwrap();
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let what = format!("{mode}, -m {meter}: {err}");
            assert_eq!(out.status.code(), Some(0), "{what}");
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let r = &doc["flows"][0]["received"];
            assert_eq!(r["unique"], 1000, "{what} {r}");
            assert_eq!(r["lost"], 0, "{what} {r}");
            let refused = r["forged"].as_u64().unwrap() + r["foreign"].as_u64().unwrap();
            assert_eq!(refused, 1, "{what} {r}");
            if meter == "rtt" {
                let rtt = &doc["flows"][0]["rtt"];
                assert_eq!(doc["flows"][0]["rtt_received"], 1000, "{what} {rtt}");
            }
        }
        drop(rx);
    }
}
