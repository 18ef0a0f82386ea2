//! The one error type of the test-bed layer. The CLI maps
//! [`TestbedError::is_bad_input`] to exit status 2, everything else to 1.

use std::path::PathBuf;

/// What can go wrong building, using or removing a test-bed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The topology, an option or a name is wrong; nothing was touched.
    #[error("{0}")]
    Invalid(String),
    /// A topology file is wrong at a given line and field; nothing was touched.
    #[error("{path}:{line}: field `{field}`: {msg}")]
    File {
        /// The file.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// The field on that line.
        field: String,
        /// What is wrong.
        msg: String,
    },
    /// A link's trace file is wrong at a given line; nothing was touched.
    #[error("trace file {path}:{line}: {msg}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// A node name the test-bed does not have.
    #[error("test-bed `{testbed}` has no node `{node}` (nodes: {known})")]
    UnknownNode {
        /// The test-bed.
        testbed: String,
        /// The name asked for.
        node: String,
        /// The names it has, comma-separated.
        known: String,
    },
    /// No state file: the test-bed is not up.
    #[error(
        "no test-bed named `{0}` is up (no state file {1}); create it with `wirebench testbed up`"
    )]
    NotUp(String, PathBuf),
    /// Not root / lacking CAP_NET_ADMIN and CAP_SYS_ADMIN.
    #[error("building a test-bed needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); run it with sudo or as root")]
    NotPermitted,
    /// `ip`, `tc` or `ethtool` not installed.
    #[error("`{0}` was not found in PATH; install it with `apt-get install iproute2 ethtool`")]
    MissingTool(String),
    /// Delay/jitter/loss asked for on a kernel without netem.
    #[error("link {link} asks for {what}, which only sch_netem (the netem queueing discipline) does, and the running kernel lacks it; use a kernel with CONFIG_NET_SCH_NETEM or change the link")]
    NoNetem {
        /// The link, `a—b`.
        link: String,
        /// What it asks for.
        what: String,
    },
    /// A command we ran failed.
    #[error("`{cmd}` failed: {msg}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its error output or status.
        msg: String,
    },
    /// A system call or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The state file is unreadable.
    #[error("state file {path}: {msg}")]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// Test-beds are Linux network namespaces; this system is another one.
    #[error("the emulated test-bed needs Linux (network namespaces, veth, tc); this system is {0}. send, recv and agent run here; build test-beds on a Linux host")]
    Unsupported(&'static str),
    /// A reachability or path-MTU probe failed.
    #[error("{0}")]
    Probe(String),
}

impl TestbedError {
    /// True when the user asked for something impossible (CLI exit 2):
    /// a bad topology, option, name or node. Nothing was created then.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            TestbedError::Invalid(_)
                | TestbedError::File { .. }
                | TestbedError::Trace { .. }
                | TestbedError::UnknownNode { .. }
                | TestbedError::Unsupported(_)
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TestbedError::Io {
            context: context.into(),
            source,
        }
    }
}
