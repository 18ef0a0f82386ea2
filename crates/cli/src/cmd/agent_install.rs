//! `wirebench agent --install DEST`: puts this very binary on a node over
//! the SSH a campaign's node uses (same destination and options, BatchMode),
//! then asks the copy its version, so a lab is set up from the controller
//! and the agent-protocol check at connection cannot fail on a stale copy.

use std::io::Write;
use std::process::{Command, Stdio};

/// Where the binary goes on the node unless `--to` says otherwise.
pub const DEFAULT_REMOTE_PATH: &str = "/usr/local/bin/wirebench";

/// A path quoted for the remote POSIX shell (ssh runs the command line
/// through it).
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn ssh(dest: &str, options: &[String]) -> Command {
    let mut c = Command::new("ssh");
    c.args(["-T", "-o", "BatchMode=yes"])
        .args(options)
        .arg(dest)
        .arg("--");
    c
}

/// Copies the running binary to `dest:path` (written beside it and renamed,
/// so a node never runs half a binary) and checks what the copy says.
pub fn install(dest: &str, path: &str, options: &[String]) -> anyhow::Result<()> {
    if dest.is_empty() || dest.starts_with('-') {
        crate::bail_input!(
            "--install: DEST must be an SSH destination like \"user@host\", got {dest:?}"
        );
    }
    if !path.starts_with('/') || path.ends_with('/') {
        crate::bail_input!(
            "--to: the path on the node must be an absolute file path, got {path:?}"
        );
    }
    let me = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find this program's path: {e}"))?;
    let bytes = std::fs::read(&me)
        .map_err(|e| anyhow::anyhow!("reading this program ({}): {e}", me.display()))?;
    let dir = path
        .rsplit_once('/')
        .map_or("/", |(d, _)| if d.is_empty() { "/" } else { d });
    let tmp = format!("{path}.new");
    let script = format!(
        "umask 022 && mkdir -p {d} && cat > {t} && chmod 755 {t} && mv -f {t} {p}",
        d = sh_quote(dir),
        t = sh_quote(&tmp),
        p = sh_quote(path)
    );
    let mut child = ssh(dest, options)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting ssh: {e}"))?;
    // A write error means ssh ended early; its status and stderr say why.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&bytes);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| anyhow::anyhow!("waiting for ssh: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "copying to {dest}:{path} failed ({}): {}; check that ssh -o BatchMode=yes {dest} true works without a prompt and that the directory is writable",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let out = ssh(dest, options)
        .arg(format!("wc -c < {p} && {p} --version", p = sh_quote(path)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| anyhow::anyhow!("starting ssh: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().map(str::trim);
    let size: Option<u64> = lines.next().and_then(|l| l.parse().ok());
    let version = lines.next().unwrap_or("").to_string();
    let want = format!("wirebench {}", env!("CARGO_PKG_VERSION"));
    if !out.status.success() || size != Some(bytes.len() as u64) || version != want {
        anyhow::bail!(
            "{dest}:{path} was written but does not check out: {} bytes of {}, `--version` said {version:?} (expected {want:?}){}",
            size.map_or("unknown".into(), |s| s.to_string()),
            bytes.len(),
            match String::from_utf8_lossy(&out.stderr).trim() {
                "" => String::new(),
                e => format!("; {e}"),
            }
        );
    }
    println!(
        "installed {want} ({} bytes) at {dest}:{path}; give the node agent = \"{path}\" unless that is on its PATH",
        bytes.len()
    );
    Ok(())
}
