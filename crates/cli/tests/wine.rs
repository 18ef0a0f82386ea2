//! The Windows binary against the Linux one on loopback, the Windows side
//! running under Wine. `scripts/wine-test` cross-builds `wirebench.exe`,
//! puts the test-only ProcessPrng shim beside it, prepares a Wine prefix
//! and runs this with WIREBENCH_WINE_EXE (the .exe) and WIREBENCH_WINE (the
//! wine64 loader) set. The tests are `#[ignore]`d so that the ordinary
//! `cargo test` lists them as ignored instead of counting them as passed;
//! scripts/wine-test runs them with `--ignored`, and there a missing
//! variable is a failure, not a skip.
//!
//! What it proves: the Windows build's control session, UDP and TCP send
//! and receive paths and its argument errors work against the Linux build,
//! both directions, with exact packet counts. What it does not: anything
//! about Windows' network stack or timers (Wine maps Winsock onto Linux
//! sockets), so no rate or delay is asserted here (docs/platforms.md).

use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::{s, u, Recv, BIN};

/// Packets per run: 300 at 200 pps, 1.5 s; loopback must lose none.
const PACKETS: u64 = 300;

/// The Wine loader and the .exe, as scripts/wine-test sets them.
fn wine(test: &str) -> Option<(String, String)> {
    match (
        std::env::var("WIREBENCH_WINE"),
        std::env::var("WIREBENCH_WINE_EXE"),
    ) {
        (Ok(w), Ok(e)) => Some((w, e)),
        _ => panic!(
            "{test}: WIREBENCH_WINE and WIREBENCH_WINE_EXE must be set: run scripts/wine-test"
        ),
    }
}

/// `wirebench ARGS` on Linux, or under Wine when `wine` is given.
fn cmd(wine: Option<&(String, String)>, args: &[&str]) -> Command {
    match wine {
        Some((loader, exe)) => {
            let mut c = Command::new(loader);
            c.arg(exe).args(args);
            c
        }
        None => {
            let mut c = Command::new(BIN);
            c.args(args);
            c
        }
    }
}

/// A receiver on `port`, under Wine when `wine` is given (Wine's first
/// start of a process takes seconds).
fn recv(wine: Option<&(String, String)>, port: u16) -> Recv {
    Recv::command(
        cmd(wine, &["recv", "-B", "127.0.0.1", "-p", &port.to_string()]),
        Duration::from_secs(60),
    )
}

/// One run from `sender` to `receiver` (None = Linux); returns the document.
fn run(
    sender: Option<&(String, String)>,
    receiver: Option<&(String, String)>,
    port: u16,
    transport: &str,
) -> Value {
    let _r = recv(receiver, port);
    let n = PACKETS.to_string();
    let p = port.to_string();
    let args = [
        "send",
        "-a",
        "127.0.0.1",
        "-p",
        &p,
        "-T",
        transport,
        "-C",
        "200",
        "-c",
        "256",
        "-z",
        &n,
        "--linger",
        "500",
        "--json",
    ];
    let out: Output = cmd(sender, &args).output().unwrap();
    assert!(
        out.status.success(),
        "send {transport} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "send printed no document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let f = &doc["flows"][0];
    assert_eq!(u(f, "sent.packets"), PACKETS, "{transport}: sent");
    assert_eq!(u(f, "received.packets"), PACKETS, "{transport}: received");
    assert_eq!(u(f, "received.lost"), 0, "{transport}: lost");
    doc
}

#[test]
#[ignore = "needs the Windows build under Wine: run by scripts/wine-test"]
fn windows_sender_to_linux_receiver() {
    let Some(w) = wine("windows_sender_to_linux_receiver") else {
        return;
    };
    for (port, t) in [(5491, "udp"), (5492, "tcp")] {
        let doc = run(Some(&w), None, port, t);
        // The document says which system and paths measured.
        assert_eq!(s(&doc, "host.os"), "windows");
        assert_eq!(s(&doc, "host.send_path"), "send");
        assert_eq!(s(&doc, "receiver.host.os"), "linux");
        assert_eq!(s(&doc, "receiver.host.rx_timestamps"), "kernel");
    }
}

#[test]
#[ignore = "needs the Windows build under Wine: run by scripts/wine-test"]
fn linux_sender_to_windows_receiver() {
    let Some(w) = wine("linux_sender_to_windows_receiver") else {
        return;
    };
    for (port, t) in [(5493, "udp"), (5494, "tcp")] {
        let doc = run(None, Some(&w), port, t);
        assert_eq!(s(&doc, "host.os"), "linux");
        assert_eq!(s(&doc, "host.send_path"), "sendmmsg");
        assert_eq!(s(&doc, "receiver.host.os"), "windows");
        assert_eq!(s(&doc, "receiver.host.rx_timestamps"), "user");
    }
}

#[test]
#[ignore = "needs the Windows build under Wine: run by scripts/wine-test"]
fn windows_bad_input_exits_2() {
    let Some(w) = wine("windows_bad_input_exits_2") else {
        return;
    };
    let out = cmd(Some(&w), &["send", "-a", "127.0.0.1", "-c", "10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("24"), "names the 24-byte minimum: {err}");
    // And the test-bed says it needs Linux, touching nothing.
    let out = cmd(Some(&w), &["testbed", "up", "direct", "--name", "wbwine"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("needs Linux"), "{err}");
}

/// A `local` agent transport pointing at Wine: a two-line script that runs
/// the .exe under the loader, as a Windows node's `agent` would be.
#[cfg(unix)]
fn wine_agent(w: &(String, String), dir: &std::path::Path) -> wirebench_agent::AgentSpec {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("wirebench-wine");
    std::fs::write(&script, format!("#!/bin/sh\nexec {} {} \"$@\"\n", w.0, w.1)).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    wirebench_agent::AgentSpec {
        node: "win".into(),
        channel: wirebench_agent::Channel::Local { program: script },
        allow: wirebench_agent::Allow::default(),
        extra: vec![],
        controller: None,
    }
}

/// Nothing accepts TCP connections on `port` of 127.0.0.1 any more.
#[cfg(unix)]
fn closed(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_err()
}

#[cfg(unix)]
#[test]
#[ignore = "needs the Windows build under Wine: run by scripts/wine-test"]
fn windows_agent_drives_a_windows_receiver_and_sender() {
    use wirebench_agent::{AgentConn, Role};
    let Some(w) = wine("windows_agent_drives_a_windows_receiver_and_sender") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut a = AgentConn::connect(&wine_agent(&w, dir.path())).unwrap();
    // What the agent reads from the system's own APIs.
    let m = a.metadata().unwrap();
    assert!(m.os.starts_with("Windows "), "{m:?}");
    assert!(!m.kernel.is_empty() && m.cpus >= 1, "{m:?}");
    assert!(!m.hostname.is_empty(), "{m:?}");
    assert!(
        m.interfaces.iter().any(|i| i.mtu > 0),
        "GetIfTable2 interfaces: {:?}",
        m.interfaces
    );
    a.counters().expect("GetIfTable2 counters");
    let c0 = a.cpu().unwrap();
    assert_eq!(c0.hz, 10_000_000, "100 ns ticks");
    assert!(
        !c0.cores.is_empty() && c0.total.total() > 0,
        "per-processor times: {c0:?}"
    );

    // A Windows receiver started by the agent (it waits until the
    // receiver listens, from the TCP listener table), a Linux sender.
    let port = 5495u16;
    let p = port.to_string();
    let (rh, rpid) = a
        .start(
            Role::Receiver,
            &["-B".into(), "127.0.0.1".into(), "-p".into(), p.clone()],
            Some(port),
        )
        .unwrap();
    assert!(!closed(port), "the agent said the receiver listens");
    for t in ["udp", "tcp"] {
        let n = PACKETS.to_string();
        let out = cmd(
            None,
            &[
                "send",
                "-a",
                "127.0.0.1",
                "-p",
                &p,
                "-T",
                t,
                "-C",
                "200",
                "-c",
                "256",
                "-z",
                &n,
                "--linger",
                "500",
                "--json",
            ],
        )
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let f = &doc["flows"][0];
        assert_eq!(
            u(f, "received.packets"),
            PACKETS,
            "{t} to the agent's receiver"
        );
        assert_eq!(u(f, "received.lost"), 0);
        assert_eq!(s(&doc, "receiver.host.os"), "windows");
    }
    let c1 = a.cpu().unwrap();
    let d = c1.delta(&c0);
    assert!(
        d.procs
            .iter()
            .any(|x| x.pid == rpid && x.user + x.system > 0.0),
        "the receiver's CPU from GetProcessTimes: {d:?}"
    );

    // A Windows sender started by the agent, a Linux receiver; its result
    // document comes back through the agent.
    let lport = 5496u16;
    let _r = recv(None, lport);
    let args: Vec<String> = [
        "-a",
        "127.0.0.1",
        "-p",
        &lport.to_string(),
        "-C",
        "200",
        "-c",
        "256",
        "-z",
        &PACKETS.to_string(),
        "--linger",
        "500",
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    let (sh, _) = a.start(Role::Sender, &args, None).unwrap();
    let mut st = a.wait(sh, Duration::from_secs(1)).unwrap();
    let t0 = std::time::Instant::now();
    while st.running {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "sender still running"
        );
        st = a.wait(sh, Duration::from_secs(1)).unwrap();
    }
    assert_eq!(st.code, Some(0), "{}", st.stderr);
    let doc = st.result.expect("the sender's result document");
    assert_eq!(s(&doc, "host.os"), "windows");
    assert_eq!(s(&doc, "receiver.host.os"), "linux");
    let f = &doc["flows"][0];
    assert_eq!(u(f, "sent.packets"), PACKETS);
    assert_eq!(u(f, "received.packets"), PACKETS);

    // Stop and bye: the receiver is gone.
    let ps = a.stop(rh).unwrap();
    assert!(!ps.running);
    assert!(closed(port), "the stopped receiver still listens");
    a.bye().unwrap();

    // Killed outright, the agent still takes its children with it (the
    // job object closes with its last handle).
    let mut a = AgentConn::connect(&wine_agent(&w, dir.path())).unwrap();
    a.start(
        Role::Receiver,
        &["-B".into(), "127.0.0.1".into(), "-p".into(), p.clone()],
        Some(port),
    )
    .unwrap();
    assert!(!closed(port));
    let agent_pid = a.transport_pid();
    // SAFETY: signalling the agent process this test started.
    unsafe { libc::kill(agent_pid as i32, libc::SIGKILL) };
    let t0 = std::time::Instant::now();
    while !closed(port) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the receiver outlived its killed agent"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(a);
}
