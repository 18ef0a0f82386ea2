//! The one per-socket setup function: a flow's [`SockOpts`] (marking:
//! TOS/DSCP, TTL / hop limit, IPv6 flow label) applied to a new data
//! socket before it connects, because some options only take effect then
//! (a flow label must be leased before `connect`). Every data socket that
//! sends a flow's probes goes through [`apply`], so an option means the
//! same wherever it is set.
//!
//! A value the kernel refuses is the user's input: the error names the
//! option (`-b/--dscp`, `-f`, `--flow-label`) and the CLI exits 2.

use crate::net::{self, AsRawFd};
use crate::EngineError;
use socket2::Socket;
use std::net::{SocketAddr, SocketAddrV6};
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
    if let Some(ttl) = o.ttl {
        let r = if to.is_ipv4() {
            sock.set_ttl(u32::from(ttl))
        } else {
            sock.set_unicast_hops_v6(u32::from(ttl))
        };
        r.map_err(|e| refused("-f", format!("the system refuses TTL {ttl}: {e}")))?;
    }
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
