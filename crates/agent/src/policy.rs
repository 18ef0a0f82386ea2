//! The node's own rules for its agent, which no controller can widen:
//! which interfaces may be changed at all ([`NodeAllow`], from
//! `/etc/wirebench/agent.toml` and `wirebench agent --allow-iface`), and
//! which files a `start` may name ([`check_start_args`]: only inside the
//! agent's work directory). The controller may be another machine; its
//! `hello` can only narrow what the node allows here.

use serde::Deserialize;
use std::path::{Component, Path, PathBuf};
use thiserror::Error;

/// The node's configuration file: it binds every agent on the node, and an
/// `--allow-iface` on the command line can only narrow it.
pub const NODE_CONFIG: &str = "/etc/wirebench/agent.toml";

/// Longest interface name Linux accepts (IFNAMSIZ without its NUL).
const MAX_IFACE_NAME: usize = 15;

/// Why the node's configuration could not be read; the agent does not
/// start (exit status 2) rather than guess.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Someone other than root or the agent's own user could have written it.
    #[error("{path}: {why}; the node's agent configuration must belong to root (or to the agent's own user) and be writable by its owner only")]
    Unsafe {
        /// The configuration file.
        path: PathBuf,
        /// Owner or mode found.
        why: String,
    },
    /// Not valid TOML, an unknown key, or a bad interface name.
    #[error("{path}: {message}")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message, naming the line and key.
        message: String,
    },
    /// A bad `--allow-iface` value.
    #[error("--allow-iface: {0}")]
    Flag(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    allow_iface: Vec<String>,
}

/// Which interfaces this node lets any controller change (MTU, offloads,
/// link-rate qdisc).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodeAllow {
    /// The node says nothing: no interface may be changed.
    #[default]
    Nothing,
    /// These interfaces (`*`: every one but the management path), and
    /// where the list was read.
    List {
        /// Interface names, or `*`.
        ifaces: Vec<String>,
        /// `/etc/wirebench/agent.toml`, `--allow-iface`, or both.
        from: String,
    },
}

impl NodeAllow {
    /// The node's list: `flag` (`--allow-iface`) and the file at `path`
    /// (absent: not configured there); with both, only interfaces both
    /// allow.
    pub fn load(flag: &[String], path: &Path) -> Result<NodeAllow, ConfigError> {
        let flag = if flag.is_empty() {
            None
        } else {
            let mut v = Vec::new();
            for f in flag {
                for name in f.split(',').map(str::trim) {
                    check_name(name).map_err(ConfigError::Flag)?;
                    v.push(name.to_string());
                }
            }
            Some(v)
        };
        let file = read_file(path)?;
        Ok(match (file, flag) {
            (None, None) => NodeAllow::Nothing,
            (Some(f), None) => NodeAllow::List {
                ifaces: f,
                from: path.display().to_string(),
            },
            (None, Some(a)) => NodeAllow::List {
                ifaces: a,
                from: "--allow-iface".into(),
            },
            (Some(f), Some(a)) => NodeAllow::List {
                ifaces: narrow(&f, &a),
                from: format!("{} and --allow-iface", path.display()),
            },
        })
    }

    /// Ok when the node lets a controller change `iface`; else the reason,
    /// saying how the node's administrator would allow it.
    pub fn permits(&self, iface: &str) -> Result<(), String> {
        match self {
            NodeAllow::Nothing => Err(format!(
                "this node lets no controller change its interfaces; its administrator allows some in {NODE_CONFIG} (allow_iface = [\"{iface}\"]) or with `wirebench agent --stdio --allow-iface {iface}` (docs/agents.md)"
            )),
            NodeAllow::List { ifaces, from } => {
                if ifaces.iter().any(|i| i == iface || i == "*") {
                    Ok(())
                } else {
                    Err(format!(
                        "{iface} is not among the interfaces this node allows ({from}: {})",
                        if ifaces.is_empty() {
                            "none".to_string()
                        } else {
                            ifaces.join(", ")
                        }
                    ))
                }
            }
        }
    }
}

/// The names in both lists (`*` in one: the other's).
fn narrow(a: &[String], b: &[String]) -> Vec<String> {
    let star = |v: &[String]| v.iter().any(|i| i == "*");
    match (star(a), star(b)) {
        (true, _) => b.to_vec(),
        (_, true) => a.to_vec(),
        _ => a.iter().filter(|i| b.contains(i)).cloned().collect(),
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name == "*" {
        return Ok(());
    }
    if name.is_empty()
        || name.len() > MAX_IFACE_NAME
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "`{}` is not an interface name (1 to {MAX_IFACE_NAME} characters, no `/`, `:` or spaces; `*` for every interface)",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// The file's list; None when there is no file.
fn read_file(path: &Path) -> Result<Option<Vec<String>>, ConfigError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.into(),
                source,
            })
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != 0 && meta.uid() != me {
            return Err(ConfigError::Unsafe {
                path: path.into(),
                why: format!("owned by uid {}", meta.uid()),
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err(ConfigError::Unsafe {
                path: path.into(),
                why: format!("mode {:o} lets others write it", meta.mode() & 0o777),
            });
        }
    }
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(ConfigError::Parse {
            path: path.into(),
            message: "not a regular file of at most 1 MiB".into(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    let cfg: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.into(),
        message: e.to_string().trim().replace('\n', " "),
    })?;
    for name in &cfg.allow_iface {
        check_name(name).map_err(|m| ConfigError::Parse {
            path: path.into(),
            message: format!("allow_iface: {m}"),
        })?;
    }
    Ok(Some(cfg.allow_iface))
}

/// Options of `wirebench send` and `recv` whose value is a file or
/// directory: (short, long). `--payload file:PATH` is checked apart.
pub const PATH_OPTIONS: &[(Option<char>, &str)] = &[
    (Some('l'), "log"),
    (None, "json"),
    (None, "script"),
    (None, "key-file"),
    (None, "idt-file"),
    (None, "size-file"),
    (Some('x'), "log-dir"),
    (None, "iperf3-results"),
];

/// Checks every file a `start`'s arguments name: each must resolve inside
/// `workdir` (relative to it, no `..`, no symbolic link leading out). The
/// error names the argument.
pub fn check_start_args(args: &[String], workdir: &Path) -> Result<(), String> {
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        let value_of = |opt: String,
                        inline: Option<&str>,
                        it: &mut std::iter::Peekable<std::slice::Iter<'_, String>>|
         -> Result<(), String> {
            let v = match inline {
                Some(v) => v.to_string(),
                None => match it.next() {
                    Some(v) => v.clone(),
                    None => return Ok(()),
                },
            };
            inside(&v, workdir).map_err(|why| format!("start: {opt} {v}: {why}"))
        };
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            if name == "payload" {
                let v = match inline {
                    Some(v) => Some(v.to_string()),
                    None => it.next().cloned(),
                };
                if let Some(p) = v.as_deref().and_then(|v| v.strip_prefix("file:")) {
                    inside(p, workdir)
                        .map_err(|why| format!("start: --payload file:{p}: {why}"))?;
                }
                continue;
            }
            // `--json` alone means stdout.
            if name == "json" && inline.is_none() {
                if it.peek().is_some_and(|n| !n.starts_with('-')) {
                    value_of(format!("--{name}"), None, &mut it)?;
                }
                continue;
            }
            if PATH_OPTIONS.iter().any(|(_, l)| *l == name) {
                value_of(format!("--{name}"), inline, &mut it)?;
            }
        } else if let Some(shorts) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            // A cluster such as `-ql../x`: the first path option's value is
            // the rest of the argument, or the next one.
            for (i, c) in shorts.char_indices() {
                if PATH_OPTIONS.iter().any(|(s, _)| *s == Some(c)) {
                    let rest = &shorts[i + c.len_utf8()..];
                    let rest = rest.strip_prefix('=').unwrap_or(rest);
                    value_of(format!("-{c}"), (!rest.is_empty()).then_some(rest), &mut it)?;
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Ok when `value`, taken relative to `workdir`, stays inside it.
fn inside(value: &str, workdir: &Path) -> Result<(), String> {
    if value == "-" {
        return Ok(());
    }
    let p = Path::new(value);
    if p.components().any(|c| c == Component::ParentDir) {
        return Err("`..` is not allowed: files must be inside the agent's work directory".into());
    }
    let full = if p.is_absolute() {
        if !p.starts_with(workdir) {
            return Err(format!(
                "outside the agent's work directory {} (give a name relative to it)",
                workdir.display()
            ));
        }
        p.to_path_buf()
    } else {
        workdir.join(p)
    };
    // A symbolic link on the way (or as the file itself) could lead out.
    let root = workdir
        .canonicalize()
        .unwrap_or_else(|_| workdir.to_path_buf());
    let mut cur = workdir.to_path_buf();
    let rel = full.strip_prefix(workdir).unwrap_or(Path::new(""));
    for c in rel.components() {
        cur.push(c);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = cur.canonicalize().unwrap_or_default();
                if !target.starts_with(&root) {
                    return Err(format!(
                        "{} is a symbolic link out of the agent's work directory",
                        cur.display()
                    ));
                }
            }
            Ok(_) => {}
            // Nothing there yet: nothing further can be a link.
            Err(_) => break,
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn start_paths_must_stay_in_the_work_directory() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        let refused = |args: &[&str], naming: &str| {
            let e = check_start_args(&s(args), w).unwrap_err();
            assert!(e.contains(naming), "{args:?}: {e}");
        };
        refused(&["-a", "10.0.0.1", "-l", "../out/x"], "-l ../out/x");
        refused(&["-l../out/x"], "-l ../out/x");
        refused(&["-ql../out/x"], "-l ../out/x");
        refused(&["--log=/etc/x"], "--log /etc/x");
        refused(&["--log", "/tmp/x"], "outside the agent's work directory");
        refused(&["--json", "../r.json"], "--json ../r.json");
        refused(&["--key-file", "/etc/shadow"], "--key-file /etc/shadow");
        refused(&["-x", "/var/log"], "-x /var/log");
        refused(
            &["--payload", "file:/etc/shadow"],
            "--payload file:/etc/shadow",
        );
        refused(&["--script=a/../../b"], "`..` is not allowed");
        std::os::unix::fs::symlink("/etc", w.join("out")).unwrap();
        refused(&["-l", "out/x"], "symbolic link out of");
        std::fs::create_dir(w.join("sub")).unwrap();
        std::os::unix::fs::symlink(w.join("sub"), w.join("in")).unwrap();
        for ok in [
            &["-a", "10.0.0.1", "-t", "1000", "-l", "run.log"][..],
            &["--json"],
            &["--json", "-"],
            &["-l", "in/x.log"],
            &["--payload", "zeros"],
            &["-alocalhost"],
        ] {
            check_start_args(&s(ok), w).unwrap();
        }
        let abs = w.join("sub/x.log").display().to_string();
        check_start_args(&s(&["-l", &abs]), w).unwrap();
    }

    #[test]
    fn the_node_list_comes_from_the_file_and_the_flag_narrows_it() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("agent.toml");
        assert_eq!(NodeAllow::load(&[], &f).unwrap(), NodeAllow::Nothing);
        let e = NodeAllow::Nothing.permits("eth1").unwrap_err();
        assert!(
            e.contains("allow_iface") && e.contains("--allow-iface eth1"),
            "{e}"
        );

        let a = NodeAllow::load(&s(&["eth1,eth2"]), &f).unwrap();
        a.permits("eth2").unwrap();
        assert!(a
            .permits("eth0")
            .unwrap_err()
            .contains("--allow-iface: eth1, eth2"));

        std::fs::write(&f, "allow_iface = [\"eth1\", \"eth3\"]\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let both = NodeAllow::load(&s(&["eth1", "eth2"]), &f).unwrap();
        both.permits("eth1").unwrap();
        // The flag cannot add what the file leaves out.
        assert!(both.permits("eth2").is_err() && both.permits("eth3").is_err());
        let wide = NodeAllow::load(&s(&["*"]), &f).unwrap();
        wide.permits("eth3").unwrap();
        assert!(wide.permits("eth0").is_err());

        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = NodeAllow::load(&[], &f).unwrap_err().to_string();
        assert!(e.contains("lets others write it"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&f, "allow_ifaces = [\"eth1\"]\n").unwrap();
        let e = NodeAllow::load(&[], &f).unwrap_err().to_string();
        assert!(e.contains("allow_ifaces"), "{e}");
        std::fs::write(&f, "allow_iface = [\"../x\"]\n").unwrap();
        assert!(NodeAllow::load(&[], &f).is_err());
        assert!(NodeAllow::load(&s(&["eth 1"]), Path::new("/nonexistent"))
            .unwrap_err()
            .to_string()
            .starts_with("--allow-iface:"));
    }
}
