//! The one per-socket setup function: a flow's [`SockOpts`] (marking:
//! TOS/DSCP, TTL / hop limit, IPv6 flow label; TCP: congestion control,
//! MSS; the socket buffer) applied to a new data socket before it
//! connects, because some options only take effect then (a flow label must
//! be leased, an MSS set, before `connect`). Every data socket that
//! sends a flow's probes goes through [`apply`], so an option means the
//! same wherever it is set.
//!
//! A value the kernel refuses is the user's input: the error names the
//! option (`-b/--dscp`, `-f`, `--flow-label`, `--cc`, `-M`) and the CLI
//! exits 2.

use crate::net::{self, AsRawFd};
use crate::EngineError;
use socket2::Socket;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use wirebench_stats::SockOpts;

fn refused(opt: &str, what: String) -> EngineError {
    EngineError::BadPlan(format!("{opt}: {what}"))
}

/// Applies `o` to `sock`, a new socket of `to`'s family that will connect
/// to `to`; returns the address to connect to (with the flow label in it
/// when one was asked for).
pub(crate) fn apply(
    sock: &Socket,
    to: SocketAddr,
    o: &SockOpts,
) -> Result<SocketAddr, EngineError> {
    if let Some(tos) = o.tos {
        set_tos(sock, to, tos).map_err(|e| {
            refused(
                "-b/--dscp",
                format!("the system refuses TOS {tos:#04x}: {e}"),
            )
        })?;
    }
    if let Some(w) = o.window {
        net::set_sndbuf(sock.as_raw_fd(), w as usize);
    }
    if let Some(cc) = &o.cc {
        set_cc(sock, cc).map_err(|e| {
            refused(
                "--cc",
                format!(
                    "the kernel refuses {cc:?} ({e}); it allows: {}",
                    allowed_cc()
                ),
            )
        })?;
    }
    if let Some(mss) = o.mss {
        set_mss(sock, mss)
            .map_err(|e| refused("-M", format!("the system refuses MSS {mss}: {e}")))?;
    }
    if let Some(ttl) = o.ttl {
        let r = if to.is_ipv4() {
            sock.set_ttl(u32::from(ttl))
        } else {
            sock.set_unicast_hops_v6(u32::from(ttl))
        };
        r.map_err(|e| refused("-f", format!("the system refuses TTL {ttl}: {e}")))?;
    }
    bind_source(sock, to, o.bind, o.cport, o.bind_dev.as_deref())?;
    let Some(label) = o.flow_label else {
        return Ok(to);
    };
    let SocketAddr::V6(v6) = to else {
        return Err(refused(
            "--flow-label",
            format!(
                "flow labels are IPv6; the receiver's address {} is IPv4",
                to.ip()
            ),
        ));
    };
    net::set_flow_label(sock.as_raw_fd(), *v6.ip(), label).map_err(|e| {
        let hint = if label & 0x8_0000 != 0 {
            " (labels 0x80000 and above are reserved for the kernel's own \
             labels while net.ipv6.flowlabel_state_ranges = 1)"
        } else {
            ""
        };
        refused(
            "--flow-label",
            format!("the system refuses flow label {label:#x}: {e}{hint}"),
        )
    })?;
    // `SocketAddrV6`'s flowinfo goes into sin6_flowinfo as is: network
    // byte order.
    Ok(SocketAddr::V6(SocketAddrV6::new(
        *v6.ip(),
        v6.port(),
        label.to_be(),
        v6.scope_id(),
    )))
}

/// Binds a socket that will connect to `to` to the source address `addr`
/// (`-sa`/`--bind`), port `port` (`-sp`/`--cport`) and interface `dev`
/// (`--bind-dev`), as far as asked; nothing asked: the kernel chooses.
/// Used for the data sockets and for the control connection, which must
/// leave from the same address (the receiver takes data only from it).
pub(crate) fn bind_source(
    sock: &Socket,
    to: SocketAddr,
    addr: Option<IpAddr>,
    port: Option<u16>,
    dev: Option<&str>,
) -> Result<(), EngineError> {
    if let Some(d) = dev {
        bind_device(sock, d)
            .map_err(|e| refused("--bind-dev", format!("cannot bind to interface {d:?}: {e}")))?;
    }
    if addr.is_none() && port.is_none() {
        return Ok(());
    }
    if let Some(a) = addr.filter(|a| a.is_ipv4() != to.is_ipv4()) {
        return Err(refused(
            "-sa/--bind",
            format!(
                "{a} and the receiver's address {} are of different IP versions",
                to.ip()
            ),
        ));
    }
    let any: IpAddr = if to.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let at = SocketAddr::new(addr.unwrap_or(any), port.unwrap_or(0));
    if port.is_some() {
        // A TCP source port left in TIME_WAIT by the run before may be
        // bound again (a fixed -sp over several runs).
        let _ = sock.set_reuse_address(true);
    }
    sock.bind(&at.into()).map_err(|e| {
        let opt = if port.is_some() && addr.is_none() {
            "-sp/--cport"
        } else if port.is_some() {
            "-sa/--bind, -sp/--cport"
        } else {
            "-sa/--bind"
        };
        refused(opt, format!("cannot bind the source {at}: {e}"))
    })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn bind_device(sock: &Socket, dev: &str) -> std::io::Result<()> {
    sock.bind_device(Some(dev.as_bytes()))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn bind_device(_sock: &Socket, _dev: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "binding a socket to an interface (SO_BINDTODEVICE) is supported on Linux only",
    ))
}

/// Checks before anything connects that `--bind-dev`'s interface exists,
/// so a typo is the user's input (exit 2) and names the option.
pub(crate) fn check_dev(dev: &str) -> Result<(), EngineError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let Ok(name) = std::ffi::CString::new(dev) else {
            return Err(refused(
                "--bind-dev",
                format!("not an interface name: {dev:?}"),
            ));
        };
        // SAFETY: `name` is a valid NUL-terminated string that outlives the
        // call; if_nametoindex only reads it.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(refused(
                "--bind-dev",
                format!("no network interface named {dev:?} on this host (see `ip link`)"),
            ));
        }
        Ok(())
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Err(refused(
            "--bind-dev",
            format!("binding to an interface ({dev:?}) is supported on Linux only"),
        ))
    }
}

fn set_tos(sock: &Socket, to: SocketAddr, tos: u8) -> std::io::Result<()> {
    if to.is_ipv4() {
        return sock.set_tos(u32::from(tos));
    }
    #[cfg(unix)]
    {
        sock.set_tclass_v6(u32::from(tos))
    }
    #[cfg(not(unix))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the IPv6 traffic class cannot be set on this system",
        ))
    }
}

#[cfg(any(target_os = "linux", target_os = "freebsd"))]
fn set_cc(sock: &Socket, cc: &str) -> std::io::Result<()> {
    sock.set_tcp_congestion(cc.as_bytes())
}

#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
fn set_cc(_sock: &Socket, _cc: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "choosing TCP congestion control is supported on Linux and FreeBSD only",
    ))
}

/// What an unprivileged process may choose, as the kernel lists it (root
/// may load any available module; the list is still the useful answer).
fn allowed_cc() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "(the system does not say)".into())
}

/// The congestion control a connected TCP socket really uses.
#[cfg(any(target_os = "linux", target_os = "freebsd"))]
pub(crate) fn tcp_cc(sock: &std::net::TcpStream) -> Option<String> {
    let b = socket2::SockRef::from(sock).tcp_congestion().ok()?;
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8(b[..end].to_vec()).ok()
}

#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
pub(crate) fn tcp_cc(_sock: &std::net::TcpStream) -> Option<String> {
    None
}

#[cfg(unix)]
fn set_mss(sock: &Socket, mss: u32) -> std::io::Result<()> {
    sock.set_mss(mss)
}

#[cfg(not(unix))]
fn set_mss(_sock: &Socket, _mss: u32) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "setting the TCP MSS is not supported on this system",
    ))
}

/// Whether a TCP flow's socket sets TCP_NODELAY: as asked, else off for
/// paced flows (a record must leave when written), on for bulk flows and
/// for Telnet, whose model is keystrokes coalesced by Nagle (D-ITG too).
pub(crate) fn nodelay(o: &SockOpts, spec: &wirebench_model::FlowSpec) -> bool {
    match o.nagle {
        Some(nagle) => !nagle,
        None => !(spec.is_max() || matches!(spec.app, Some(wirebench_model::app::App::Telnet))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_model::app::AppOptions;
    use wirebench_model::FlowSpec;

    #[test]
    fn nagle_defaults_follow_the_model() {
        let paced = FlowSpec::constant(100.0, 100).unwrap();
        let telnet = AppOptions {
            app: "telnet".into(),
            ..Default::default()
        }
        .build()
        .and_then(|a| a.spec())
        .unwrap();
        let none = SockOpts::default();
        assert!(nodelay(&none, &paced));
        assert!(!nodelay(&none, &telnet));
        let on = SockOpts {
            nagle: Some(true),
            ..Default::default()
        };
        assert!(!nodelay(&on, &paced));
        let off = SockOpts {
            nagle: Some(false),
            ..Default::default()
        };
        assert!(nodelay(&off, &telnet));
    }

    /// `--window` is what the kernel then reports for the socket (Linux
    /// doubles what it is given for its own bookkeeping; without root it
    /// caps at wmem_max, so only root's exact doubling is asserted), and
    /// TCP options are readable back where the kernel shows them.
    #[cfg(target_os = "linux")]
    #[test]
    fn window_and_tcp_options_reach_the_socket() {
        use socket2::{Domain, Protocol, Type};
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        let before = sock.send_buffer_size().unwrap();
        let window = 3 << 20;
        let o = SockOpts {
            window: Some(window),
            mss: Some(1000),
            ..Default::default()
        };
        apply(&sock, to, &o).unwrap();
        let after = sock.send_buffer_size().unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            assert_eq!(after, 2 * window as usize, "before {before}");
        } else {
            assert_ne!(after, before);
        }
        assert_eq!(sock.mss().unwrap(), 1000);
    }
}
