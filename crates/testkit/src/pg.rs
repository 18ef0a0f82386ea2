//! A real PostgreSQL server for the results-store tests: its own cluster
//! (initdb) in a directory under the temp dir, on a private port and Unix
//! socket, started for one test and stopped and removed when dropped.
//!
//! initdb and the server refuse to run as root, so as root they run as the
//! `postgres` user that Debian's `postgresql` package creates (through
//! `runuser`). TCP logins need the password ([`PgServer::PASSWORD`],
//! SCRAM), which tests pass to wirebench through `PGPASSWORD`; logins on
//! the Unix socket are trusted, for the test's own in-process store.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A running server; stopped (immediately) and its directory removed
/// when dropped.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    /// The TCP port on 127.0.0.1 (the socket in [`PgServer::socket_dir`]
    /// has the same number).
    pub port: u16,
}

/// The database role the tests log in as.
pub const USER: &str = "wbtest";

impl PgServer {
    /// The role's password (TCP logins).
    pub const PASSWORD: &'static str = "wb-test-password";

    /// Starts a server for `test`, or None when this host cannot (not
    /// root, or no PostgreSQL binaries): a skip by [`crate::can_run`],
    /// a failure under `CI=true`.
    pub fn start(test: &str) -> Option<PgServer> {
        let bin = bin_dir();
        let ok = crate::is_root() && bin.is_some() && Path::new("/usr/sbin/runuser").exists();
        if !crate::can_run(
            test,
            ok,
            "root, runuser and PostgreSQL's server binaries (Debian package postgresql)",
        ) {
            return None;
        }
        let bin = bin?;
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "wb-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sock")).expect("creating the server's directory");
        std::fs::write(dir.join("pw"), PgServer::PASSWORD).expect("writing the password file");
        chown_to_postgres(&dir);
        let server = PgServer {
            port: free_port(),
            dir,
            bin,
        };
        let data = server.dir.join("data");
        server.as_postgres(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                USER,
                "--pwfile",
                &server.dir.join("pw").display().to_string(),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60",
            server.port,
            server.socket_dir().display()
        );
        server.as_postgres(
            "pg_ctl",
            &[
                "-D",
                &data.display().to_string(),
                "-o",
                &opts,
                "-l",
                &server.dir.join("log").display().to_string(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        Some(server)
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// A URL over TCP (needs [`PgServer::PASSWORD`] in `PGPASSWORD`).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// A URL over the Unix socket (trusted: no password).
    pub fn socket_url(&self, db: &str) -> String {
        let host: String = self.socket_dir().display().to_string().replace('/', "%2F");
        format!("postgres://{USER}@{host}:{}/{db}", self.port)
    }

    /// Creates database `name`.
    pub fn create_db(&self, name: &str) {
        self.as_postgres(
            "createdb",
            &[
                "-h",
                &self.socket_dir().display().to_string(),
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                name,
            ],
        );
    }

    /// Runs one of the server's programs as the `postgres` user; panics
    /// with its output when it fails.
    fn as_postgres(&self, program: &str, args: &[&str]) {
        let out = Command::new("/usr/sbin/runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(program))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        if data.join("postmaster.pid").exists() {
            let _ = Command::new("/usr/sbin/runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["-D", &data.display().to_string(), "-m", "immediate", "-w"])
                .arg("stop")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest `/usr/lib/postgresql/VERSION/bin` that has initdb.
fn bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

/// A port nobody listens on now (the OS picks it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding a TCP port on 127.0.0.1")
}

/// Hands the directory to the `postgres` user (uid and gid from
/// /etc/passwd), which initdb and the server run as.
fn chown_to_postgres(dir: &Path) {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("reading /etc/passwd");
    let (uid, gid) = passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse::<u32>().ok()?, f[3].parse::<u32>().ok()?)))
                .flatten()
        })
        .expect("no postgres user in /etc/passwd (install the postgresql package)");
    for p in [dir.to_path_buf(), dir.join("sock"), dir.join("pw")] {
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).expect("chown to postgres");
    }
}
