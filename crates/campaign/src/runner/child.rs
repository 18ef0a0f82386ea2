//! Child processes: the receiver and sender run as children in their own
//! process group that die with us, are stopped with SIGTERM then SIGKILL,
//! and leave a log whose tail explains a failure. The rules live in
//! `wirebench_agent::child` (the agent runs its children the same way);
//! this module adds the loopback control port.

use super::RunError;
use std::net::{Ipv4Addr, Ipv6Addr};

pub(super) use wirebench_agent::child::{detach, listening, stop_child, tail as read_tail};

/// A TCP port free on both 127.0.0.1 and ::1 (loopback mode: the control
/// port must not collide with anything else on this host).
pub(super) fn free_port() -> Result<u16, RunError> {
    for _ in 0..50 {
        let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| RunError::io("finding a free port", e))?;
        let port = l
            .local_addr()
            .map_err(|e| RunError::io("finding a free port", e))?
            .port();
        if std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, port)).is_ok()
            || std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_err()
        {
            return Ok(port);
        }
    }
    Err(RunError::Receiver(
        "no free control port on loopback".into(),
    ))
}
