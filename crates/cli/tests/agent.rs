#![cfg(unix)]
//! `wirebench agent --stdio` driven through the `local` and `netns`
//! transports: hello and the version check, metadata, CPU and counters,
//! receivers and senders with the sender's result document, MTU changes
//! refused unless allowed and restored on bye, end of input and SIGTERM,
//! link-rate shaping (tbf) set, replaced and removed likewise, the
//! path-MTU probe between two agents, and the journal on disk: a held node
//! names its holder, `agent --restore` undoes a SIGKILLed agent's changes.

use std::process::Command;
use std::time::Duration;
use wirebench_agent::{AgentConn, AgentError, AgentSpec, Allow, Channel, Role};

mod common;
use common::{assert_agents_doc_quotes, free_port, BIN};

fn local(node: &str) -> AgentSpec {
    AgentSpec {
        node: node.into(),
        channel: Channel::Local {
            program: BIN.into(),
        },
        allow: Allow::default(),
        extra: vec![],
        controller: None,
    }
}

#[test]
fn local_agent_runs_a_receiver_and_a_sender_and_reports_the_host() {
    let mut a = AgentConn::connect(&local("a")).unwrap();
    assert_eq!(a.hello.version, wirebench_agent::AGENT_PROTOCOL_VERSION);
    let m = a.metadata().unwrap();
    assert!(!m.kernel.is_empty() && m.cpus >= 1, "{m:?}");
    assert!(m.interfaces.iter().any(|i| i.name == "lo" && i.mtu > 0));
    assert!(m.sysctls.contains_key("net.core.rmem_max"));

    let port = free_port();
    let p = port.to_string();
    let (rh, rpid) = a
        .start(
            Role::Receiver,
            &["-p".into(), p.clone(), "-q".into()],
            Some(port),
        )
        .unwrap();
    let c0 = a.cpu().unwrap();
    assert!(!c0.cores.is_empty());
    assert!(c0
        .procs
        .iter()
        .any(|x| x.pid == rpid && x.role == Role::Receiver));
    let args: Vec<String> = [
        "-a",
        "127.0.0.1",
        "-p",
        &p,
        "-C",
        "2000",
        "-c",
        "200",
        "-t",
        "500",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (sh, _) = a.start(Role::Sender, &args, None).unwrap();
    let mut st = a.wait(sh, Duration::from_millis(100)).unwrap();
    while st.running {
        st = a.wait(sh, Duration::from_secs(1)).unwrap();
    }
    assert_eq!(st.code, Some(0), "{}", st.stderr);
    let doc = st.result.expect("the sender's result document");
    assert_eq!(doc["schema"], "wirebench.result/1", "{doc}");
    let c1 = a.cpu().unwrap();
    let d = c1.delta(&c0);
    assert!(d.seconds > 0.4 && d.cores.len() == c0.cores.len(), "{d:?}");
    assert!(d.host.busy() > 0.0);
    let r = a.stop(rh).unwrap();
    assert!(!r.running);
    assert!(
        a.wait(rh, Duration::ZERO).is_err(),
        "a stopped child is gone"
    );
    // Changing a link needs the campaign's permission.
    let e = a.set_mtu("lo", 1500).unwrap_err();
    assert!(e.to_string().contains("not allowed"), "{e}");
    assert!(a.bye().unwrap().is_empty());
}

#[test]
fn an_agent_of_another_protocol_version_is_named_and_refused() {
    let mut s = local("r9");
    s.extra = vec!["--protocol-version".into(), "99".into()];
    let e = AgentConn::connect(&s).err().expect("must fail");
    assert!(
        matches!(
            e,
            AgentError::Version {
                theirs: 99,
                ours: wirebench_agent::AGENT_PROTOCOL_VERSION,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("r9")
            && msg.contains("99")
            && msg.contains(&format!(
                "protocol {}",
                wirebench_agent::AGENT_PROTOCOL_VERSION
            )),
        "{msg}"
    );
}

#[test]
fn a_missing_agent_binary_says_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    // What a remote shell prints when wirebench is not on PATH.
    let fake = dir.path().join("nowb");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'sh: 1: wirebench: not found' >&2\nexit 127\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = AgentSpec {
        channel: Channel::Local { program: fake },
        ..local("b")
    };
    let e = AgentConn::connect(&s).err().expect("must fail");
    let msg = e.to_string();
    assert!(matches!(e, AgentError::NotStarted { .. }), "{msg}");
    assert!(
        msg.contains("exit status 127") && msg.contains("install wirebench"),
        "{msg}"
    );
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().unwrap();
    assert!(st.success(), "ip {args:?}");
}

fn mtu_in(ns: &str, dev: &str) -> u32 {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show", dev])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["mtu"].as_u64().unwrap() as u32
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let id = std::process::id() % 100000;
        let p = Pair {
            a: format!("wbag-{tag}{id}a"),
            b: format!("wbag-{tag}{id}b"),
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        ip(&[
            "-n", &p.a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", &p.b,
        ]);
        ip(&["-n", &p.a, "addr", "add", "10.99.0.1/24", "dev", "v0"]);
        ip(&["-n", &p.b, "addr", "add", "10.99.0.2/24", "dev", "v1"]);
        for (ns, dev) in [(&p.a, "v0"), (&p.b, "v1")] {
            ip(&["-n", ns, "link", "set", dev, "mtu", "1400", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        p
    }

    fn spec(&self, ns: &str, node: &str, allow_mtu: bool) -> AgentSpec {
        let dev = if ns == self.a { "v0" } else { "v1" };
        AgentSpec {
            node: node.into(),
            channel: Channel::Netns {
                ns: ns.into(),
                program: BIN.into(),
            },
            allow: Allow {
                mtu: if allow_mtu { vec![dev.into()] } else { vec![] },
                offloads: vec![],
                rate: if allow_mtu { vec![dev.into()] } else { vec![] },
            },
            extra: vec![],
            controller: None,
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn wait_mtu(ns: &str, dev: &str, want: u32) -> u32 {
    let t0 = std::time::Instant::now();
    loop {
        let m = mtu_in(ns, dev);
        if m == want || t0.elapsed() > Duration::from_secs(5) {
            return m;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn netns_agents_change_mtu_and_restore_it_on_bye_eof_and_sigterm_and_probe_the_path() {
    if !wirebench_testkit::can_run_as_root(
        "netns_agents_change_mtu_and_restore_it_on_bye_eof_and_sigterm_and_probe_the_path",
        "root (network namespaces)",
    ) {
        return;
    }
    let p = Pair::new("m");
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    let mut b = AgentConn::connect(&p.spec(&p.b, "b", false)).unwrap();
    assert!(a.hello.net_admin);
    let c = a.counters().unwrap();
    assert!(c.contains_key("v0") && !c.contains_key("lo"), "{c:?}");

    // Path MTU between the two agents: 1400 both ways of measuring.
    let port = b.pmtu_listen("10.99.0.2".parse().unwrap()).unwrap();
    assert_eq!(
        a.pmtu_probe("10.99.0.2".parse().unwrap(), port).unwrap(),
        Some(1400)
    );
    // The peer refuses the change: it was not allowed there.
    assert!(b
        .set_mtu("v1", 9000)
        .unwrap_err()
        .to_string()
        .contains("not allowed"));

    // bye restores.
    a.set_mtu("v0", 1300).unwrap();
    assert_eq!(mtu_in(&p.a, "v0"), 1300);
    assert_eq!(
        a.pmtu_probe("10.99.0.2".parse().unwrap(), port).unwrap(),
        Some(1300)
    );
    let done = a.bye().unwrap();
    assert_eq!(done, vec!["restored v0 mtu 1400".to_string()]);
    assert_eq!(mtu_in(&p.a, "v0"), 1400);

    // End of input (the controller or its link vanished) restores, and
    // the first value recorded is the one restored.
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    a.set_mtu("v0", 1280).unwrap();
    a.set_mtu("v0", 1350).unwrap();
    drop(a);
    assert_eq!(wait_mtu(&p.a, "v0", 1400), 1400);

    // SIGTERM to the agent restores and stops its receiver.
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    a.set_mtu("v0", 1200).unwrap();
    let (_, rpid) = a
        .start(
            Role::Receiver,
            &["-p".into(), "5499".into(), "-q".into()],
            Some(5499),
        )
        .unwrap();
    // SAFETY: signalling the agent we started (ip netns exec execs it).
    unsafe { libc::kill(a.hello.pid as i32, libc::SIGTERM) };
    assert_eq!(wait_mtu(&p.a, "v0", 1400), 1400);
    let t0 = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{rpid}")).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "receiver outlived its agent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The signal thread cleans up, then exits: a request may still be
    // answered in between.
    let t0 = std::time::Instant::now();
    let e = loop {
        match a.cpu() {
            Err(e) => break e,
            Ok(_) => assert!(t0.elapsed() < Duration::from_secs(5), "agent still answers"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        e.is_lost() && e.to_string().contains("signal") || e.to_string().contains("143"),
        "{e}"
    );
    drop(b);
}

/// The root qdisc of `dev` in `ns`: (kind, handle, rate in bit/s if any).
fn root_qdisc(ns: &str, dev: &str) -> (String, String, Option<u64>) {
    let out = Command::new("tc")
        .args(["-n", ns, "-j", "qdisc", "show", "dev", dev, "root"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let q = &v[0];
    (
        q["kind"].as_str().unwrap_or("").to_string(),
        q["handle"].as_str().unwrap_or("").to_string(),
        q["options"]["rate"]
            .as_u64()
            .map(|bytes_per_s| bytes_per_s * 8),
    )
}

#[test]
fn netns_agent_shapes_a_link_rate_and_puts_the_default_qdisc_back() {
    if !wirebench_testkit::can_run_as_root(
        "netns_agent_shapes_a_link_rate_and_puts_the_default_qdisc_back",
        "root (network namespaces)",
    ) {
        return;
    }
    let p = Pair::new("r");
    let default = root_qdisc(&p.a, "v0");
    assert_eq!(default.1, "0:", "{default:?}");
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    let mut b = AgentConn::connect(&p.spec(&p.b, "b", false)).unwrap();
    assert!(b
        .set_rate("v1", Some(10_000_000))
        .unwrap_err()
        .to_string()
        .contains("not allowed"));
    a.set_rate("v0", Some(10_000_000)).unwrap();
    assert_eq!(
        root_qdisc(&p.a, "v0"),
        ("tbf".into(), "1:".into(), Some(10_000_000))
    );
    // A new rate replaces ours; a new MTU then a rate re-sizes it.
    a.set_mtu("v0", 1300).unwrap();
    a.set_rate("v0", Some(20_000_000)).unwrap();
    assert_eq!(root_qdisc(&p.a, "v0").2, Some(20_000_000));
    // Traffic still crosses the shaped link at the new MTU.
    let port = b.pmtu_listen("10.99.0.2".parse().unwrap()).unwrap();
    assert_eq!(
        a.pmtu_probe("10.99.0.2".parse().unwrap(), port).unwrap(),
        Some(1300)
    );
    let done = a.bye().unwrap();
    assert!(
        done.contains(&"restored v0 default root qdisc".to_string())
            && done.contains(&"restored v0 mtu 1400".to_string()),
        "{done:?}"
    );
    assert_eq!(root_qdisc(&p.a, "v0"), default);

    // End of input removes it too; None removes it at once.
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    a.set_rate("v0", Some(5_000_000)).unwrap();
    a.set_rate("v0", None).unwrap();
    assert_eq!(root_qdisc(&p.a, "v0"), default);
    a.set_rate("v0", Some(5_000_000)).unwrap();
    drop(a);
    let t0 = std::time::Instant::now();
    while root_qdisc(&p.a, "v0") != default {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "tbf outlived its agent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Somebody's own root qdisc is never replaced.
    let st = Command::new("tc")
        .args([
            "-n", &p.a, "qdisc", "add", "dev", "v0", "root", "handle", "5:", "pfifo",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    let e = a.set_rate("v0", Some(5_000_000)).unwrap_err().to_string();
    assert!(e.contains("configured root qdisc (pfifo 5:)"), "{e}");
    assert_eq!(root_qdisc(&p.a, "v0").0, "pfifo");
    a.bye().unwrap();
    drop(b);
}

/// A SIGKILLed agent cannot restore; its journal on disk can: `wirebench
/// agent --restore` puts back the first MTU and the default root qdisc.
/// While it lived, a second agent that wanted to change links there was
/// refused with the holder named. The messages are the ones
/// docs/agents.md quotes.
#[test]
fn a_sigkilled_agents_journal_is_restored_by_hand_and_a_held_node_names_its_holder() {
    if !wirebench_testkit::can_run_as_root(
        "a_sigkilled_agents_journal_is_restored_by_hand_and_a_held_node_names_its_holder",
        "root (network namespaces)",
    ) {
        return;
    }
    let p = Pair::new("j");
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    a.set_mtu("v0", 1300).unwrap();
    a.set_mtu("v0", 1280).unwrap();
    a.set_rate("v0", Some(10_000_000)).unwrap();
    let e = AgentConn::connect(&p.spec(&p.a, "a2", true))
        .err()
        .expect("a second holder");
    let m = e.to_string();
    assert!(
        m.starts_with(&format!(
            "node a2: this node is in use by another wirebench agent (pid {} on ",
            a.hello.pid
        )) && m.ends_with("; wait until it ends (`wirebench run --wait-lab`), or ask its owner"),
        "{m}"
    );
    let host = a.hello.hostname.clone();
    assert_agents_doc_quotes(
        &m,
        &[
            ("node a2:", "node r1:"),
            (&format!(" on {host},"), " on r1,"),
        ],
    );
    // Only observing is not holding: that agent connects.
    drop(AgentConn::connect(&p.spec(&p.a, "observer", false)).unwrap());
    let a_pid = a.hello.pid;
    // SAFETY: killing the agent we started (ip netns exec execs it).
    unsafe { libc::kill(a.hello.pid as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(mtu_in(&p.a, "v0"), 1280, "nobody can restore a SIGKILL");
    assert_eq!(root_qdisc(&p.a, "v0").0, "tbf");
    drop(a);
    let restore = || {
        let out = Command::new("ip")
            .args(["netns", "exec", &p.a, BIN, "agent", "--restore"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let said = restore();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines[..2],
        ["restored v0 mtu 1400", "restored v0 default root qdisc"],
        "{said}"
    );
    // The dead agent's lab lock is taken over, and said so.
    let pid = a_pid;
    assert_eq!(lines.len(), 3, "{said}");
    assert!(
        lines[2].starts_with(&format!(
            "took over the lab lock of another wirebench agent (pid {pid} on "
        )) && lines[2].ends_with(&format!("): its agent, pid {pid}, is gone")),
        "{said}"
    );
    for l in lines {
        assert_agents_doc_quotes(l, &[("v0", "eth0"), (&format!(" on {host},"), " on r1,")]);
    }
    assert_eq!(mtu_in(&p.a, "v0"), 1400);
    assert_eq!(root_qdisc(&p.a, "v0").1, "0:");
    let said = restore();
    let dir = said
        .trim()
        .strip_prefix("nothing to restore: no journal of a dead agent in ")
        .expect("nothing the second time")
        .to_string();
    assert_agents_doc_quotes(&said, &[(dir.as_str(), "DIR")]);
}

/// One `set_rate` that `tc` refuses (1 bit/s rounds to a rate of 0) once
/// left a record of a shaper that was never made: every later `set_rate`
/// failed deleting it, and `restore` said FAILED.
#[test]
fn a_failed_set_rate_is_undone_and_the_next_one_works() {
    if !wirebench_testkit::can_run_as_root(
        "a_failed_set_rate_is_undone_and_the_next_one_works",
        "root (network namespaces)",
    ) {
        return;
    }
    let p = Pair::new("f");
    let mut a = AgentConn::connect(&p.spec(&p.a, "a", true)).unwrap();
    let e = a.set_rate("v0", Some(1)).unwrap_err().to_string();
    assert!(e.contains("(nothing changed)"), "{e}");
    assert_eq!(root_qdisc(&p.a, "v0").1, "0:");
    for _ in 0..2 {
        a.set_rate("v0", Some(50_000_000)).unwrap();
        let (kind, _, rate) = root_qdisc(&p.a, "v0");
        assert_eq!((kind.as_str(), rate), ("tbf", Some(50_000_000)));
        assert!(a.set_rate("v0", Some(u64::MAX)).is_err());
        // The failed ask took the earlier shaper away too: unshaped, not
        // half-shaped.
        assert_eq!(root_qdisc(&p.a, "v0").1, "0:");
    }
    a.set_rate("v0", Some(20_000_000)).unwrap();
    let done = a.restore().unwrap();
    assert!(
        !done.is_empty() && done.iter().all(|d| d.starts_with("restored")),
        "{done:?}"
    );
    assert_eq!(root_qdisc(&p.a, "v0").1, "0:");
    assert!(a.bye().unwrap().iter().all(|d| !d.contains("FAILED")));
}

/// Every option of `send` and `recv` whose value is a file or directory
/// is one the agent checks in a `start` (a new one must not slip past the
/// work-directory rule).
#[test]
fn every_file_option_of_send_and_recv_is_checked_by_the_agent() {
    let mut seen = 0;
    for sub in ["send", "recv"] {
        let out = Command::new(BIN).args([sub, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        for line in help.lines() {
            let line = line.trim_start();
            let Some(long) = line
                .split_whitespace()
                .find_map(|w| w.trim_end_matches(',').strip_prefix("--"))
            else {
                continue;
            };
            if !["<FILE>", "[<FILE>]", "<DIR>", "<PATH>"]
                .iter()
                .any(|v| line.contains(&format!("--{long} {v}")))
            {
                continue;
            }
            seen += 1;
            assert!(
                wirebench_agent::policy::PATH_OPTIONS
                    .iter()
                    .any(|(_, l)| *l == long),
                "`{sub} --{long}` names a file but the agent does not check it in `start`"
            );
        }
    }
    assert!(seen >= 8, "only {seen} file options found");
}
