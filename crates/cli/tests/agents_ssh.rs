#![cfg(unix)]
//! Real nodes over SSH, as root: a `router` test-bed (a — r1 — b) is the
//! data path, and a management network apart from it joins every node's
//! `mgmt0` to a controller namespace, as in a lab where the administrator
//! logs in on another interface. OpenSSH's sshd runs inside each node on
//! its management address, with a key pair and client configuration made
//! for the test, and a campaign whose `[[hosts.node]]`s say
//! `ssh = "root@MGMT"` runs from the controller namespace:
//!
//! - end to end through SSH, with router CPU and counters stored and MTUs
//!   changed on all three nodes and restored afterwards;
//! - an sshd session process killed mid-campaign: that run fails naming
//!   the node, the node's MTU is restored by its agent, the campaign goes
//!   on, and `--resume` repeats exactly that run;
//! - agents of another protocol version: a clear error, nothing run.
//!
//! Leaves no sshd, namespace or changed MTU behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use wirebench_campaign::{RunStatus, Store};
use wirebench_testbed::{preset, LinkOpts, Testbed};

mod common;
use common::assert_agents_doc_quotes;

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");
const NODES: [&str; 3] = ["a", "r1", "b"];

struct Lab {
    tb: Option<Testbed>,
    sshd: Vec<(String, Child)>,
    dir: tempfile::TempDir,
    made_run_sshd: bool,
    /// The controller's namespace, holding one end of every management
    /// link (deleting it deletes them).
    ctl: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, c) in &mut self.sshd {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ctl])
            .status();
        if let Some(tb) = self.tb.take() {
            let _ = tb.down();
        }
        if self.made_run_sshd {
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

fn sh(cmd: &mut Command) {
    let st = cmd.status().unwrap();
    assert!(st.success(), "{cmd:?}");
}

impl Lab {
    fn up(name: &str) -> Lab {
        let o = LinkOpts {
            mtu: Some(1500),
            ..LinkOpts::default()
        };
        let tb = Testbed::up(name, &preset("router", &o).unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        sh(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(d.join("id")));
        sh(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(d.join("host")));
        std::fs::copy(d.join("id.pub"), d.join("authorized_keys")).unwrap();
        // The nodes' own word on what may be changed, as an administrator
        // would pin it: a wrapper the campaign's `agent` names.
        let wrapper = d.join("agent-allowing-data-ifaces");
        std::fs::write(
            &wrapper,
            format!("#!/bin/sh\nexec {BIN} \"$@\" --allow-iface eth0,eth1\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            d.join("ssh_config"),
            format!(
                "Host *\n  IdentityFile {id}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n  StrictHostKeyChecking accept-new\n  LogLevel ERROR\n",
                id = d.join("id").display(),
                kh = d.join("known_hosts").display()
            ),
        )
        .unwrap();
        let made_run_sshd = !Path::new("/run/sshd").exists();
        if made_run_sshd {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let mut lab = Lab {
            tb: Some(tb),
            sshd: Vec::new(),
            dir,
            made_run_sshd,
            ctl: format!("{name}-ctl-{}", std::process::id()),
        };
        sh(Command::new("ip").args(["netns", "add", &lab.ctl]));
        for (k, n) in NODES.iter().enumerate() {
            let ns = lab.ns(n);
            let ctl = lab.ctl.clone();
            let ip = |args: &[&str]| sh(Command::new("ip").args(args));
            ip(&[
                "-n",
                &ctl,
                "link",
                "add",
                &format!("m-{n}"),
                "type",
                "veth",
                "peer",
                "name",
                "mgmt0",
                "netns",
                &ns,
            ]);
            ip(&[
                "-n",
                &ctl,
                "addr",
                "add",
                &format!("10.254.{k}.1/24"),
                "dev",
                &format!("m-{n}"),
            ]);
            ip(&["-n", &ctl, "link", "set", &format!("m-{n}"), "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.254.{k}.2/24"),
                "dev",
                "mgmt0",
            ]);
            ip(&["-n", &ns, "link", "set", "mgmt0", "up"]);
        }
        sh(Command::new("ip").args(["-n", &lab.ctl, "link", "set", "lo", "up"]));
        for n in NODES {
            let addr = lab.mgmt(n);
            let cfg = lab.dir.path().join(format!("sshd_{n}"));
            std::fs::write(
                &cfg,
                format!(
                    "ListenAddress {addr}\nListenAddress {data}\nPort 22\nHostKey {hk}\nAuthorizedKeysFile {ak}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n",
                    data = lab.addr(n),
                    hk = lab.dir.path().join("host").display(),
                    ak = lab.dir.path().join("authorized_keys").display()
                ),
            )
            .unwrap();
            let child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &lab.ns(n),
                    "/usr/sbin/sshd",
                    "-D",
                    "-e",
                    "-f",
                ])
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            lab.sshd.push((n.to_string(), child));
        }
        // Wait until every sshd answers a real login.
        for n in NODES {
            let t0 = Instant::now();
            loop {
                let ok = lab
                    .in_ctl(
                        Command::new("ssh")
                            .args(lab.ssh_args())
                            .arg(format!("root@{}", lab.mgmt(n)))
                            .arg("true"),
                    )
                    .stderr(Stdio::null())
                    .status()
                    .unwrap()
                    .success();
                if ok {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "sshd on {n} does not answer"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        lab
    }

    fn tb(&self) -> &Testbed {
        self.tb.as_ref().unwrap()
    }

    fn ns(&self, n: &str) -> String {
        self.tb().netns(n).unwrap()
    }

    fn addr(&self, n: &str) -> String {
        self.tb().addr(n, false).unwrap().to_string()
    }

    /// A node's management address (where its sshd listens).
    fn mgmt(&self, n: &str) -> String {
        let k = NODES.iter().position(|m| *m == n).unwrap();
        format!("10.254.{k}.2")
    }

    fn ssh_args(&self) -> Vec<String> {
        vec![
            "-F".into(),
            self.dir.path().join("ssh_config").display().to_string(),
            "-o".into(),
            "BatchMode=yes".into(),
        ]
    }

    /// A command run in the controller's namespace.
    fn in_ctl<'c>(&self, c: &'c mut Command) -> &'c mut Command {
        let prog = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        *c = Command::new("ip");
        c.args(["netns", "exec", &self.ctl]).arg(prog).args(args);
        c
    }

    fn campaign(&self, name: &str, extra: &str, matrix: &str) -> PathBuf {
        let cfg = self.dir.path().join("ssh_config");
        let reps = if extra.contains("repetitions") {
            ""
        } else {
            "repetitions = 2\n"
        };
        let mut t = format!("name = \"{name}\"\nlinger_s = 0.2\n{reps}{extra}\n[hosts]\n");
        for (n, role) in [("a", "sender"), ("r1", "router"), ("b", "receiver")] {
            t.push_str(&format!(
                "[[hosts.node]]\nname = \"{n}\"\nssh = \"root@{mgmt}\"\nssh_options = [\"-F\", \"{cfg}\"]\nagent = \"{agent}\"\nrole = \"{role}\"\nipv4 = \"{addr}\"\napply_mtu = true\napply_link_rate = true\n",
                mgmt = self.mgmt(n),
                addr = self.addr(n),
                cfg = cfg.display(),
                agent = self.dir.path().join("agent-allowing-data-ifaces").display()
            ));
        }
        t.push_str(&format!(
            "[matrix]\nip = [4]\npayload = [1000]\npps = [3000]\n{matrix}\n"
        ));
        let f = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&f, t).unwrap();
        f
    }

    fn run(&self, file: &Path, more: &[&str], env: Option<(&str, &str)>) -> std::process::Output {
        let db = self.dir.path().join("c.db");
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg(file)
            .arg("--db")
            .arg(&db)
            .arg("-q")
            .args(more);
        let c = self.in_ctl(&mut c);
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// `run FILE` in the background, stderr piped.
    fn start(&self, file: &Path) -> Child {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg(file)
            .arg("--db")
            .arg(self.dir.path().join("c.db"))
            .arg("-q");
        self.in_ctl(&mut c)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn store(&self) -> Store {
        Store::open(self.dir.path().join("c.db")).unwrap()
    }

    /// MTU of every non-loopback interface of a node.
    fn mtus(&self, n: &str) -> Vec<u32> {
        let out = Command::new("ip")
            .args(["-n", &self.ns(n), "-j", "link", "show"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .filter(|l| l["ifname"] != "lo")
            .map(|l| l["mtu"].as_u64().unwrap() as u32)
            .collect()
    }

    /// Every interface of every node has the kernel's default root qdisc.
    fn default_qdiscs(&self) -> bool {
        NODES.iter().all(|n| {
            let out = Command::new("tc")
                .args(["-n", &self.ns(n), "-j", "qdisc", "show"])
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            v.as_array()
                .unwrap()
                .iter()
                .filter(|q| q["root"] == true)
                .all(|q| q["handle"] == "0:")
        })
    }

    fn all_1500(&self) -> bool {
        NODES
            .iter()
            .all(|n| self.mtus(n).iter().all(|&m| m == 1500))
    }

    /// Polls every node's interface MTUs until stopped: (node, iface) →
    /// every MTU seen.
    fn watch_mtus(&self) -> Watch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let nss: Vec<(String, String)> =
            NODES.iter().map(|n| (n.to_string(), self.ns(n))).collect();
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            let mut seen = Seen::new();
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                for (n, ns) in &nss {
                    for (i, m) in link_mtus(ns) {
                        seen.entry((n.clone(), i)).or_default().insert(m);
                    }
                }
                std::thread::sleep(Duration::from_millis(30));
            }
            seen
        });
        Watch { stop, h }
    }

    /// PIDs of the per-connection sshd processes of node `n`.
    fn sessions(&self, n: &str) -> Vec<i32> {
        let daemon = self.sshd.iter().find(|(m, _)| m == n).unwrap().1.id();
        let mut v = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(daemon) {
                v.push(pid);
            }
        }
        v
    }
}

type Seen = std::collections::BTreeMap<(String, String), std::collections::BTreeSet<u32>>;

struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    h: std::thread::JoinHandle<Seen>,
}

impl Watch {
    fn stop(self) -> Seen {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.h.join().unwrap()
    }
}

/// (interface, MTU) of every non-loopback interface in a namespace.
fn link_mtus(ns: &str) -> Vec<(String, u32)> {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["ifname"] != "lo")
        .filter_map(|l| Some((l["ifname"].as_str()?.to_string(), l["mtu"].as_u64()? as u32)))
        .collect()
}

/// One lab at a time: two labs' sshds and campaigns at once on a shared
/// 2-core host made logins time out (kex reset) under load.
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_lab() -> std::sync::MutexGuard<'static, ()> {
    ONE_LAB.lock().unwrap_or_else(|p| p.into_inner())
}

/// Root and sshd, or the test says why it skips.
fn can_run(test: &str) -> bool {
    wirebench_testkit::can_run(
        test,
        wirebench_testkit::is_root() && Path::new("/usr/sbin/sshd").exists(),
        "root and openssh-server (scripts/setup)",
    )
}

#[test]
fn campaign_over_ssh_changes_and_restores_mtus_survives_a_lost_agent_and_checks_versions() {
    if !can_run(
        "campaign_over_ssh_changes_and_restores_mtus_survives_a_lost_agent_and_checks_versions",
    ) {
        return;
    }
    let _one = one_lab();
    let lab = Lab::up("agssh");

    // 1. End to end through SSH, MTU 1500 and 9000 set on all three nodes
    // (with a warm-up before every run, sent through the same agents).
    // The router has no `interfaces`, as in docs/agents.md: its
    // management interface must stay as it was while the others change.
    let f = lab.campaign(
        "ssh",
        "packets = 300\nwarmup_s = 0.2",
        "mtu = [1500, 9000]\nlink_rate = [\"50mbit\"]",
    );
    let watch = lab.watch_mtus();
    let out = lab.run(&f, &[], None);
    let seen = watch.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in NODES {
        assert_eq!(
            seen[&(n.to_string(), "mgmt0".to_string())],
            [1500].into(),
            "{n}"
        );
    }
    for (n, i) in [("a", "eth0"), ("r1", "eth0"), ("r1", "eth1"), ("b", "eth0")] {
        assert!(
            seen[&(n.to_string(), i.to_string())].contains(&9000),
            "{n}/{i} never had MTU 9000: {seen:?}"
        );
    }
    assert!(lab.all_1500(), "MTUs not restored");
    assert!(lab.default_qdiscs(), "link-rate shapers left behind");
    let st = lab.store();
    let c = st.latest_by_name("ssh").unwrap().unwrap();
    let runs = st.runs(c.id).unwrap();
    assert_eq!(runs.len(), 4);
    for r in &runs {
        assert_eq!(r.status, RunStatus::Ok, "{:?}", r.error);
        let o = r.counters.as_ref().unwrap();
        let mtu: u64 = r.axes["mtu"].parse().unwrap();
        assert_eq!(o["path_mtu"]["a->b"], mtu, "{}", o["path_mtu"]);
        assert!(
            o["cpu"]["r1"]["host"]["softirq"].is_number(),
            "{}",
            o["cpu"]
        );
        let fwd: u64 = o["nodes"]["r1"]
            .as_object()
            .unwrap()
            .values()
            .map(|i| i["tx_packets"].as_u64().unwrap())
            .sum();
        assert!(fwd >= 300, "router forwarded {fwd}");
        assert_eq!(
            o["metadata"]["r1"]["interfaces"].as_array().unwrap().len(),
            4
        );
        assert!(
            r.command.starts_with("warm-up a: wirebench send") && r.command.contains("\na: "),
            "{}",
            r.command
        );
        // The link_rate axis shaped every allowed interface during the run.
        for (n, i) in [("a", "eth0"), ("r1", "eth0"), ("r1", "eth1"), ("b", "eth0")] {
            assert_eq!(o["nodes"][n][i]["qdisc"]["kind"], "tbf", "{n}/{i}: {o}");
        }
        for n in NODES {
            assert_ne!(o["nodes"][n]["mgmt0"]["qdisc"]["kind"], "tbf", "{n}: {o}");
        }
    }

    // The report's node table shows the links as read back per scenario.
    let sum = wirebench_campaign::analysis::summarize(&st, &c.id.to_string()).unwrap();
    let links: Vec<&String> = sum
        .scenarios
        .iter()
        .flat_map(|s| s.nodes.get("r1"))
        .flat_map(|n| &n.links)
        .collect();
    for m in [1500, 9000] {
        assert!(
            links
                .iter()
                .any(|l| l.contains(&format!("eth0 mtu {m}, qdisc tbf"))
                    && l.contains(&format!("eth1 mtu {m}, qdisc tbf"))),
            "{links:?}"
        );
    }

    // 1b. `run --check` of that lab: names what apply_* would touch and
    // the management path, measures the path, and changes nothing.
    let states = || -> Vec<_> { NODES.iter().map(|n| node_state(&lab.ns(n))).collect() };
    let before = states();
    let out = lab.run(&f, &["--check"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(states(), before, "--check changed something");
    for n in NODES {
        assert!(text.contains(&format!("node {n} (")), "{n} missing: {text}");
    }
    for l in [
        "  management path (never changed): mgmt0\n",
        "  apply_mtu would touch:\n    eth0: mtu 1500, root qdisc ",
        "    eth1: mtu 1500, root qdisc ",
        &format!("path MTU a->b ({}): 1500\n", lab.addr("b")),
        "nothing would be refused\n",
    ] {
        assert!(text.contains(l), "{l:?} not in:\n{text}");
    }
    assert!(!text.contains("    mgmt0:"), "{text}");
    assert!(text.contains("  clock: "), "{text}");

    // 2. A lost agent mid-campaign: kill r1's sshd session processes while
    // the second run is going.
    let f = lab.campaign("lost", "duration_s = 3", "mtu = [9000]");
    let db = lab.dir.path().join("c.db");
    let mut camp = lab.start(&f);
    let t0 = Instant::now();
    let killed_during = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "first run never stored"
        );
        assert!(
            camp.try_wait().unwrap().is_none(),
            "the campaign ended early"
        );
        let done = Store::open(&db)
            .ok()
            .and_then(|s| {
                let c = s.latest_by_name("lost").ok()??;
                Some(s.runs(c.id).ok()?.len())
            })
            .unwrap_or(0);
        if done == 1 {
            // The second run is under way: its sender sends for 3 s.
            std::thread::sleep(Duration::from_millis(1000));
            let pids = lab.sessions("r1");
            assert!(!pids.is_empty(), "no sshd session on r1");
            for p in pids {
                // SAFETY: killing a process this test started (via sshd).
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            break 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // r1's agent restores its MTU when the link drops.
    let t1 = Instant::now();
    while lab.mtus("r1").iter().any(|&m| m != 1500) {
        assert!(
            t1.elapsed() < Duration::from_secs(3),
            "r1's MTU not restored: {:?}",
            lab.mtus("r1")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = camp.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(lab.all_1500(), "MTUs not restored at the end");
    let st = lab.store();
    let c = st.latest_by_name("lost").unwrap().unwrap();
    let runs = st.runs(c.id).unwrap();
    assert_eq!(runs.len(), 2, "the campaign went on: {err}");
    let failed: Vec<_> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Failed)
        .collect();
    assert_eq!(failed.len(), killed_during, "{runs:?}");
    let why = failed[0].error.as_deref().unwrap_or("");
    assert!(why.contains("r1") && why.contains("lost"), "{why}");
    let ok_before: Vec<(String, u32, String)> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Ok)
        .map(|r| (r.scenario_key.clone(), r.repetition, r.started_at.clone()))
        .collect();
    let out = lab.run(&f, &["--resume"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = st.runs(c.id).unwrap();
    assert!(runs.iter().all(|r| r.status == RunStatus::Ok), "{runs:?}");
    for (k, rep, started) in ok_before {
        let r = runs
            .iter()
            .find(|r| r.scenario_key == k && r.repetition == rep)
            .unwrap();
        assert_eq!(r.started_at, started, "resume repeated an ok run");
    }
    assert!(lab.all_1500());

    // 3. A campaign that would change the management path is refused
    // before anything runs, naming the node and the interface: the router
    // told to shape mgmt0, and a receiver reached over its data address.
    let f = lab.campaign("mgmt", "packets = 300", "mtu = [9000]");
    let t = std::fs::read_to_string(&f).unwrap().replacen(
        "role = \"router\"\n",
        "role = \"router\"\ninterfaces = [\"eth0\", \"mgmt0\"]\n",
        1,
    );
    std::fs::write(&f, t).unwrap();
    let out = lab.run(&f, &[], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("node r1: interface mgmt0 carries the agent's own SSH connection (the management path), which wirebench never changes; take it out of `interfaces`"),
        "{err}"
    );
    assert_agents_doc_quotes(err.trim().trim_start_matches("wirebench: "), &[]);
    // The controller reaches b's data address through b's mgmt0 (b
    // accepts it there), so its SSH session lands on eth0's address.
    sh(Command::new("ip").args([
        "-n",
        &lab.ctl,
        "route",
        "add",
        &format!("{}/32", lab.addr("b")),
        "via",
        &lab.mgmt("b"),
    ]));
    let f = lab.campaign("mgmt2", "packets = 300", "mtu = [9000]");
    let t = std::fs::read_to_string(&f).unwrap().replacen(
        &format!("ssh = \"root@{}\"", lab.mgmt("b")),
        &format!("ssh = \"root@{}\"", lab.addr("b")),
        1,
    );
    std::fs::write(&f, t).unwrap();
    let out = lab.run(&f, &[], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "node b: interface eth0 carries both data traffic and the agent's own SSH connection"
        ),
        "{err}"
    );
    assert!(lab.all_1500());
    assert!(lab.default_qdiscs());

    // 3b. A node that allows nothing (its agent started without
    // --allow-iface, and no /etc/wirebench/agent.toml) changes nothing,
    // whatever the controller's list says: for r1 the runner sends `*`.
    if Path::new(wirebench_agent::policy::NODE_CONFIG).exists() {
        eprintln!(
            "step 3b skipped: {} exists on this host",
            wirebench_agent::policy::NODE_CONFIG
        );
    } else {
        let f = lab.campaign(
            "unallowed",
            "packets = 300\nrepetitions = 1",
            "mtu = [9000]",
        );
        let t = std::fs::read_to_string(&f).unwrap().replace(
            &lab.dir
                .path()
                .join("agent-allowing-data-ifaces")
                .display()
                .to_string(),
            BIN,
        );
        std::fs::write(&f, t).unwrap();
        let out = lab.run(&f, &[], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        // One line naming the node, the interface and how to allow it.
        assert!(
            err.contains("node a: changing the MTU of eth0 is refused: this node lets no controller change its interfaces; its administrator allows some in /etc/wirebench/agent.toml"),
            "{err}"
        );
        let st = lab.store();
        let c = st.latest_by_name("unallowed").unwrap().unwrap();
        assert!(st
            .runs(c.id)
            .unwrap()
            .iter()
            .all(|r| r.status != RunStatus::Ok));
        assert!(lab.all_1500());
    }

    // 4. Agents of another protocol version: named, nothing run.
    let f = lab.campaign("ver", "packets = 300", "mtu = [1500]");
    let out = lab.run(
        &f,
        &[],
        Some(("WIREBENCH_AGENT_EXTRA_ARGS", "--protocol-version 7")),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("agent protocol 7")
            && err.contains(&format!(
                "speaks agent protocol {}",
                wirebench_agent::AGENT_PROTOCOL_VERSION
            )),
        "{err}"
    );
    let st = lab.store();
    let c = st.latest_by_name("ver").unwrap().unwrap();
    assert!(st.runs(c.id).unwrap().is_empty());
    assert!(lab.all_1500());
}

/// Every interface's MTU and the node's qdisc list, to compare a node with
/// itself before and after.
fn node_state(ns: &str) -> (Vec<(String, u32)>, String) {
    let q = Command::new("tc")
        .args(["-n", ns, "qdisc", "show"])
        .output()
        .unwrap();
    (
        link_mtus(ns),
        String::from_utf8_lossy(&q.stdout).into_owned(),
    )
}

/// PIDs of the wirebench agents running in namespace `ns` (under sshd an
/// agent runs beneath a supervisor of the same command line that passes
/// its exit status on: the agent is the one without an agent child).
fn agents_in(ns: &str) -> Vec<i32> {
    let all = agent_procs(ns);
    all.iter()
        .filter(|(p, _)| !all.iter().any(|(_, pp)| pp == p))
        .map(|(p, _)| *p)
        .collect()
}

/// (pid, parent pid) of every `wirebench agent --stdio` process in `ns`.
fn agent_procs(ns: &str) -> Vec<(i32, i32)> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(format!("/run/netns/{ns}")).unwrap().ino();
    let want = format!("net:[{ino}]");
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let is_agent = cmd.split(|&b| b == 0).any(|a| a == b"agent")
            && cmd.split(|&b| b == 0).any(|a| a == b"--stdio")
            && cmd.split(|&b| b == 0).next() == Some(BIN.as_bytes());
        let net = std::fs::read_link(e.path().join("ns/net")).ok();
        if is_agent && net.is_some_and(|n| n.to_string_lossy() == want) {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok())
                .unwrap_or(0);
            v.push((pid, ppid));
        }
    }
    v
}

/// The acceptance: the receiver's and then the router's agent are
/// SIGKILLed (nobody can restore in-process) during MTU 9000, shaped runs.
/// The campaign finishes its other runs, each killed agent's successor
/// puts back what the journal on its node says before anything else and
/// the run notes say so, `--resume` completes the campaign, and every
/// interface of every node ends as it was before.
#[test]
fn sigkilled_agents_leave_nothing_changed_and_the_campaign_goes_on() {
    if !can_run("sigkilled_agents_leave_nothing_changed_and_the_campaign_goes_on") {
        return;
    }
    let _one = one_lab();
    let lab = Lab::up("wblab");
    let before: Vec<_> = NODES.iter().map(|n| node_state(&lab.ns(n))).collect();
    let f = lab.campaign(
        "kill",
        "repetitions = 4\nduration_s = 2",
        "mtu = [9000]\nlink_rate = [\"50mbit\"]",
    );
    let db = lab.dir.path().join("c.db");
    let mut camp = lab.start(&f);
    let stored = || {
        Store::open(&db)
            .ok()
            .and_then(|s| {
                let c = s.latest_by_name("kill").ok()??;
                Some(s.runs(c.id).ok()?.len())
            })
            .unwrap_or(0)
    };
    let kill_during = |camp: &mut Child, node: &str, after_runs: usize| {
        let t0 = Instant::now();
        // The run is under way once the node's data link is jumbo again.
        loop {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "run {after_runs} never started"
            );
            if camp.try_wait().unwrap().is_some() {
                let mut e = String::new();
                std::io::Read::read_to_string(camp.stderr.as_mut().unwrap(), &mut e).unwrap();
                panic!("the campaign ended early: {e}");
            }
            let jumbo = link_mtus(&lab.ns(node))
                .iter()
                .any(|(i, m)| i == "eth0" && *m == 9000);
            if stored() == after_runs && jumbo {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(700));
        let pids = agents_in(&lab.ns(node));
        assert_eq!(pids.len(), 1, "agents of {node}: {pids:?}");
        // SAFETY: killing an agent this test's campaign started.
        unsafe { libc::kill(pids[0], libc::SIGKILL) };
    };
    kill_during(&mut camp, "b", 0);
    kill_during(&mut camp, "r1", 2);
    let t0 = Instant::now();
    while camp.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(120), "campaign hangs");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = camp.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let st = lab.store();
    let c = st.latest_by_name("kill").unwrap().unwrap();
    let runs = st.runs(c.id).unwrap();
    assert_eq!(runs.len(), 4, "the campaign went on: {err}");
    let failed: Vec<_> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Failed)
        .collect();
    assert_eq!(failed.len(), 2, "{runs:?}\n{err}");
    for (r, node) in failed.iter().zip(["b", "r1"]) {
        let why = r.error.as_deref().unwrap_or("");
        assert!(
            why.starts_with(&format!("node {node}: agent lost: ")),
            "{why}"
        );
        // Over SSH too the signal is named (the supervisor's 128 + 9).
        assert!(why.contains("(killed by SIGKILL (9) on the node)"), "{why}");
        assert!(!why.contains(&format!("node {node}: node {node}")), "{why}");
        assert_agents_doc_quotes(
            why.lines().next().unwrap_or(""),
            &[(&format!("node {node}:"), "node r1:")],
        );
    }
    // Each successor said what it put back, in the run notes and on
    // stderr.
    let notes: Vec<String> = runs
        .iter()
        .filter_map(|r| r.counters.as_ref())
        .flat_map(|o| o["notes"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    for node in ["b", "r1"] {
        let n = notes
            .iter()
            .find(|n| {
                n.starts_with(&format!(
                    "node {node}: an earlier agent there ended without restoring"
                )) && n.contains("restored eth0 mtu")
            })
            .unwrap_or_else(|| panic!("no note for {node}: {notes:?}\n{err}"));
        assert!(n.contains("restored eth0 mtu 1500"), "{n}");
        // The dead agent's lab lock was taken over, and said so.
        assert!(
            n.contains("took over the lab lock of campaign \"kill\" of controller ")
                && n.contains("is gone"),
            "{n}"
        );
        assert!(n.contains("restored eth0 default root qdisc"), "{n}");
        assert!(err.contains(n.as_str()), "{err}");
        assert_agents_doc_quotes(
            &format!("wirebench: {n}"),
            &[(&format!("node {node}:"), "node rcv:")],
        );
    }
    // Every ok run stored what its links were (read back after they were
    // set, not at connect) and every wirebench process of the nodes.
    for r in runs.iter().filter(|r| r.status == RunStatus::Ok) {
        let o = r.counters.as_ref().unwrap();
        for (n, i) in [("a", "eth0"), ("r1", "eth0"), ("r1", "eth1"), ("b", "eth0")] {
            assert_eq!(o["links"][n][i]["mtu"], 9000, "{n}/{i}: {}", o["links"]);
            assert_eq!(o["links"][n][i]["qdisc"], "tbf", "{n}/{i}: {}", o["links"]);
            let m = o["metadata"][n]["interfaces"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == i)
                .unwrap();
            assert_eq!(m["mtu"], 9000, "{n}/{i}");
        }
        assert!(o["links"]["a"].get("mgmt0").is_none(), "{}", o["links"]);
        let roles = |n: &str| -> Vec<String> {
            o["cpu"][n]["procs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["role"].as_str().unwrap().to_string())
                .collect()
        };
        assert!(roles("a").contains(&"sender".into()), "{:?}", roles("a"));
        assert!(roles("b").contains(&"receiver".into()), "{:?}", roles("b"));
        for n in NODES {
            assert!(roles(n).contains(&"agent".into()), "{n}: {:?}", roles(n));
        }
        let sender = o["cpu"]["a"]["procs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["role"] == "sender")
            .unwrap();
        assert!(
            sender["user"].as_f64().unwrap() + sender["system"].as_f64().unwrap() > 0.0,
            "a sender that sent for 2 s used no CPU: {sender}"
        );
    }
    let out = lab.run(&f, &["--resume"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = st.runs(c.id).unwrap();
    assert!(runs.iter().all(|r| r.status == RunStatus::Ok), "{runs:?}");
    for (n, b) in NODES.iter().zip(&before) {
        assert_eq!(&node_state(&lab.ns(n)), b, "node {n} differs from before");
    }
}

/// `wirebench agent --install DEST`: the binary goes to the node over the
/// node's SSH (the lab's client configuration after `--`), byte for byte,
/// executable, and its version is checked; a path the node cannot write is
/// a clear failure, not a half-written binary.
#[test]
fn agent_install_copies_this_binary_over_ssh_and_checks_its_version() {
    if !can_run("agent_install_copies_this_binary_over_ssh_and_checks_its_version") {
        return;
    }
    let _one = one_lab();
    let lab = Lab::up("agins");
    // The nodes share this host's file system: what lands on node b is
    // read back here.
    let dest_dir = lab.dir.path().join("installed");
    let to = dest_dir.join("bin/wirebench");
    let install = |to: &str| {
        let mut c = Command::new(BIN);
        c.args([
            "agent",
            "--install",
            &format!("root@{}", lab.mgmt("b")),
            "--to",
            to,
            "--",
        ])
        .args(lab.ssh_args());
        lab.in_ctl(&mut c).output().unwrap()
    };
    let out = install(to.to_str().unwrap());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let me = std::fs::read(BIN).unwrap();
    assert_eq!(std::fs::read(&to).unwrap(), me, "copied byte for byte");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&to).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert!(!dest_dir.join("bin/wirebench.new").exists());
    assert!(
        said.contains(&format!(
            "installed wirebench {} ({} bytes) at root@{}:{}",
            env!("CARGO_PKG_VERSION"),
            me.len(),
            lab.mgmt("b"),
            to.display()
        )),
        "{said}"
    );
    assert_agents_doc_quotes(
        &said,
        &[
            (&lab.mgmt("b"), "192.0.2.2"),
            (to.to_str().unwrap(), "/usr/local/bin/wirebench"),
        ],
    );
    // A path under a file cannot be created: refused, nothing left there.
    let out = install(&format!("{}/sub/wirebench", to.display()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("copying to root@") && err.contains("failed"),
        "{err}"
    );
    // Bad input: exit status 2 before any SSH.
    let out = install("relative/wirebench");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two controllers, one lab (issue 29, item 4). While campaign A holds the
/// nodes, campaign B is refused at once with one line naming A's
/// campaign, controller host and pid (exit status 75, nothing changed);
/// with `--wait-lab` B waits, holding nothing, and runs once A is done.
/// Then a node changed by hand between campaigns (no journal explains it)
/// is reported by the next campaign, not silently taken as it is.
#[test]
fn a_second_controller_is_refused_naming_the_holder_or_waits_for_the_lab() {
    if !can_run("a_second_controller_is_refused_naming_the_holder_or_waits_for_the_lab") {
        return;
    }
    let _one = one_lab();
    let lab = Lab::up("wblock");
    let fa = lab.campaign("holdA", "repetitions = 2\nduration_s = 3", "mtu = [9000]");
    let fb = lab.campaign("holdB", "repetitions = 1\npackets = 300", "mtu = [9000]");
    let db_b = lab.dir.path().join("b.db");
    let run_b = |more: &[&str]| {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg(&fb)
            .arg("--db")
            .arg(&db_b)
            .arg("-q")
            .args(more);
        lab.in_ctl(&mut c);
        c
    };
    let mut a = lab.start(&fa);
    let t0 = Instant::now();
    // A holds the lab once it changed b's link.
    while !link_mtus(&lab.ns("b"))
        .iter()
        .any(|(i, m)| i == "eth0" && *m == 9000)
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "A never started");
        assert!(a.try_wait().unwrap().is_none(), "A ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run_b(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    let line = err.trim();
    assert_eq!(line.lines().count(), 1, "{err}");
    assert!(
        line.starts_with(
            "wirebench: node a: this node is in use by campaign \"holdA\" of controller "
        ) && line.contains(&format!(" pid {} (its agent: pid ", a.id()))
            && line.contains("over SSH from 10.254.0.1")
            && line.ends_with("(so are nodes r1, b)"),
        "{line}"
    );
    let h = wirebench_agent::host::hostname();
    assert_agents_doc_quotes(
        line,
        &[
            (&format!("controller {h} pid"), "controller ctl1 pid"),
            (&format!(" on {h}, "), " on snd, "),
            ("node a:", "node snd:"),
            ("nodes r1, b)", "nodes r1, rcv)"),
            ("\"holdA\"", "\"jumbo-lab\""),
        ],
    );
    let st_b = Store::open(&db_b).unwrap();
    if let Some(c) = st_b.latest_by_name("holdB").unwrap() {
        assert!(st_b.runs(c.id).unwrap().is_empty());
    }
    // B waits for A, then runs.
    let b = run_b(&["--wait-lab=120"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a_out = a.wait_with_output().unwrap();
    assert!(
        a_out.status.success(),
        "{}",
        String::from_utf8_lossy(&a_out.stderr)
    );
    let b_out = b.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&b_out.stderr);
    assert!(b_out.status.success(), "{err}");
    assert!(
        err.contains("wirebench: waiting for the lab (--wait-lab): node a: this node is in use by campaign \"holdA\""),
        "{err}"
    );
    let st = lab.store();
    let ca = st.latest_by_name("holdA").unwrap().unwrap();
    let a_end = st
        .runs(ca.id)
        .unwrap()
        .iter()
        .map(|r| r.ended_at.clone())
        .max()
        .unwrap();
    let cb = st_b.latest_by_name("holdB").unwrap().unwrap();
    let b_runs = st_b.runs(cb.id).unwrap();
    assert_eq!(b_runs.len(), 1);
    assert_eq!(b_runs[0].status, RunStatus::Ok, "{:?}", b_runs[0].error);
    assert!(b_runs[0].started_at >= a_end, "B ran while A held the lab");
    assert!(lab.all_1500());
    assert!(lab.default_qdiscs());

    // b's data link changed by hand since A first saw it (MTU 1400, no
    // journal): the next campaign of that store says so before its runs,
    // and puts b back to 1400 at its end, as it found it.
    sh(Command::new("ip").args(["-n", &lab.ns("b"), "link", "set", "eth0", "mtu", "1400"]));
    let fc = lab.campaign("holdC", "repetitions = 1\npackets = 300", "mtu = [1500]");
    let out = lab.run(&fc, &[], None);
    let err = String::from_utf8_lossy(&out.stderr);
    sh(Command::new("ip").args(["-n", &lab.ns("b"), "link", "set", "eth0", "mtu", "1500"]));
    assert!(out.status.success(), "{err}");
    let said = err
        .lines()
        .find(|l| {
            l.starts_with("wirebench: node b: its interfaces differ from what campaign \"holdA\"")
        })
        .unwrap_or_else(|| panic!("not reported: {err}"));
    assert!(
        said.contains("(eth0 mtu 1500, qdisc ") && said.contains("now eth0 mtu 1400, qdisc "),
        "{said}"
    );
    assert!(!err.contains("node a: its interfaces differ"), "{err}");
    assert_agents_doc_quotes(
        said,
        &[("node b:", "node rcv:"), ("\"holdA\"", "\"jumbo-lab\"")],
    );
    let cc = st.latest_by_name("holdC").unwrap().unwrap();
    let runs = st.runs(cc.id).unwrap();
    let notes = runs[0].counters.as_ref().unwrap()["notes"].to_string();
    assert!(notes.contains("node b: its interfaces differ"), "{notes}");
    assert!(lab.all_1500());
}
