//! What the CLI's end-to-end tests share: the built binary, a receiver that
//! is killed when dropped, readers for dotted paths in a result document, a
//! free port and a campaign run. One copy, so a change to how a receiver is
//! started or awaited is made once.
// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A command line's words, for tests that write their flags as one line.
pub fn argv(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The `wirebench` binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_wirebench");

/// A running `wirebench recv` (or any command that prints "listening on"
/// when ready), its stderr collected line by line, killed when dropped.
pub struct Recv {
    child: Child,
    lines: Receiver<String>,
}

impl Recv {
    /// `wirebench recv -p PORT`.
    pub fn start(port: u16) -> Recv {
        Recv::args(&["-p", &port.to_string()])
    }

    /// `wirebench recv ARGS`, ready within 10 s.
    pub fn args(args: &[&str]) -> Recv {
        let mut c = Command::new(BIN);
        c.arg("recv").args(args);
        Recv::command(c, Duration::from_secs(10))
    }

    /// `wirebench recv -p PORT` at real-time priority where the host
    /// allows it ([`realtime`]).
    pub fn realtime(port: u16) -> Recv {
        let mut c = realtime();
        c.args(["recv", "-p", &port.to_string()]);
        Recv::command(c, Duration::from_secs(10))
    }

    /// Starts `cmd` and waits up to `timeout` for its "listening on" line
    /// (a Windows binary under Wine takes seconds to start).
    pub fn command(mut cmd: Command, timeout: Duration) -> Recv {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let err = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let r = Recv { child, lines };
        r.wait_for("listening on", timeout);
        r
    }

    /// Waits for a stderr line containing `pat` and returns it.
    pub fn wait_for(&self, pat: &str, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(pat) => return l,
                Ok(_) => {}
                Err(_) => panic!("the receiver never printed {pat:?}"),
            }
        }
    }

    /// The stderr lines printed since the last look.
    pub fn log(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The process, e.g. to signal it.
    pub fn child(&self) -> &Child {
        &self.child
    }

    /// Kills the process now (SIGKILL on Unix), as a crash would.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill the receiver");
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wirebench send ARGS`.
pub fn send(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("send")
        .args(args)
        .output()
        .expect("run wirebench send")
}

/// `wirebench send ARGS`, which must exit 2 with `needle` (the option at
/// fault) in its message.
pub fn bad(args: &[&str], needle: &str) {
    let out = send(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?} should exit 2, stderr: {err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: stderr should name {needle:?}: {err}"
    );
}

/// `wirebench send ARGS --json`, which must succeed; its result document.
pub fn send_json(args: &[&str]) -> Value {
    let mut c = Command::new(BIN);
    c.arg("send");
    json_of(c, args)
}

/// [`send_json`] at real-time priority where the host allows it
/// ([`realtime`]).
pub fn send_json_rt(args: &[&str]) -> Value {
    let mut c = realtime();
    c.arg("send");
    json_of(c, args)
}

/// The built binary at real-time priority (`chrt -f 50`) where the host
/// allows it (Linux as root, as CI runs the suite), else at normal
/// priority. A check of a rate or a delay then measures the engine rather
/// than how long a busy host (other builds, a noisy neighbour) left it
/// waiting for a CPU: beside 4 CPU hogs a plain 10 000 pps sender read
/// 10 007-10 017 pps in 3 runs of 4 (first packet ~8 ms late), at
/// real-time priority 10 000.0 in 4 of 4.
pub fn realtime() -> Command {
    static RT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let rt = *RT.get_or_init(|| {
        Command::new("chrt")
            .args(["-f", "50", "true"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if rt {
        let mut c = Command::new("chrt");
        c.args(["-f", "50", BIN]);
        c
    } else {
        Command::new(BIN)
    }
}

/// Runs `cmd ARGS --json`, which must succeed; its result document.
pub fn json_of(mut cmd: Command, args: &[&str]) -> Value {
    let out = cmd
        .args(args)
        .arg("--json")
        .output()
        .expect("run wirebench send");
    assert!(
        out.status.success(),
        "send {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON result document")
}

/// `wirebench run FILE --db DB EXTRA... -q`, to run or spawn.
pub fn campaign(file: &Path, db: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("run")
        .arg(file)
        .arg("--db")
        .arg(db)
        .args(extra)
        .arg("-q");
    c
}

/// Runs the campaign FILE into DB to the end (it must succeed) and
/// returns the stored runs of the campaign.
pub fn campaign_runs(file: &Path, db: &Path) -> Vec<wirebench_campaign::RunRow> {
    let out = campaign(file, db, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = wirebench_campaign::Store::open_existing(db).unwrap();
    let c = store.latest().unwrap().unwrap();
    store.runs(c.id).unwrap()
}

/// The value at a dotted path (`received.packets`).
pub fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |x, k| &x[k])
}

/// The integer at a dotted path; panics naming the path otherwise.
pub fn u(v: &Value, path: &str) -> u64 {
    let x = at(v, path);
    x.as_u64()
        .unwrap_or_else(|| panic!("{path} is not an integer: {x}"))
}

/// The number at a dotted path; panics naming the path otherwise.
pub fn f(v: &Value, path: &str) -> f64 {
    let x = at(v, path);
    x.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number: {x}"))
}

/// The string at a dotted path; panics naming the path otherwise.
pub fn s<'a>(v: &'a Value, path: &str) -> &'a str {
    let x = at(v, path);
    x.as_str()
        .unwrap_or_else(|| panic!("{path} is not a string: {x}"))
}

/// A TCP port free on 127.0.0.1 at the moment of asking.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// What a campaign's `--progress-log` showed while it ran.
pub struct Watched {
    /// The log's events, in order.
    pub lines: Vec<Value>,
    /// How long before the first run's end its first interval appeared
    /// (zero when none did).
    pub lead: Duration,
    /// The campaign's stderr.
    pub stderr: String,
}

/// Runs the campaign `cmd` (with `--progress-log log`) to its end, which
/// must be a success, reading the log while it runs.
pub fn watch_progress(mut cmd: Command, log: &Path) -> Watched {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let (mut first_iv, mut first_end) = (None, None);
    while child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(90), "campaign hangs");
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if first_iv.is_none() && text.contains("\"event\":\"interval\"") {
            first_iv = Some(Instant::now());
        }
        if first_end.is_none() && text.contains("\"event\":\"run_end\"") {
            first_end = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lead = match (first_iv, first_end) {
        (Some(iv), Some(end)) => end.saturating_duration_since(iv),
        _ => Duration::ZERO,
    };
    Watched {
        lines,
        lead,
        stderr,
    }
}

/// Fails unless docs/agents.md quotes `printed` (after `subst`, which maps
/// this test's names to the doc's): digits count as one, so pids, times and
/// addresses may differ; a quote ending in `…` matches what starts with it.
pub fn assert_agents_doc_quotes(printed: &str, subst: &[(&str, &str)]) {
    fn digits(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            if c.is_ascii_digit() {
                if !out.ends_with('#') {
                    out.push('#');
                }
            } else {
                out.push(c);
            }
        }
        out
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/agents.md"))
        .unwrap();
    let doc = digits(&doc);
    let mut a = printed.trim().to_string();
    for (from, to) in subst {
        a = a.replace(from, to);
    }
    let a = digits(&a);
    let quoted = doc.contains(&a)
        || doc
            .split(['`', '\n'])
            .filter_map(|q| q.split_once('…').map(|(p, _)| p.trim()))
            .any(|p| p.len() > 20 && a.starts_with(p));
    assert!(
        quoted,
        "docs/agents.md does not quote what the program printed:\n{a}"
    );
}

/// A child process killed (and reaped) when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to 10 s for something to listen on 127.0.0.1:`port`.
pub fn wait_listening(port: u16) {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A real Prometheus server (Debian's `prometheus`) with the scrape
/// configuration `yaml`, its data in `dir`, its API on 127.0.0.1:`port`
/// once this returns.
pub fn prometheus(dir: &Path, yaml: &str, port: u16) -> Kill {
    let cfg = dir.join("prom.yml");
    std::fs::write(&cfg, yaml).expect("write prom.yml");
    let k = Kill(
        Command::new("prometheus")
            .args([
                &format!("--config.file={}", cfg.display()),
                &format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
                &format!("--web.listen-address=127.0.0.1:{port}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus is installed (scripts/setup)"),
    );
    wait_listening(port);
    k
}

/// A network namespace of this test's own, deleted when dropped.
pub struct Netns(pub String);

impl Netns {
    /// `PREFIX-<pid>`, with its loopback up.
    pub fn new(prefix: &str) -> Netns {
        let name = format!("{prefix}-{}", std::process::id());
        let ok = |args: &[&str]| {
            let st = Command::new("ip").args(args).status().expect("run ip");
            assert!(st.success(), "ip {args:?}");
        };
        ok(&["netns", "add", &name]);
        let ns = Netns(name);
        ok(&["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    /// `ip netns exec NAME`, to which the caller adds the command.
    pub fn exec(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
