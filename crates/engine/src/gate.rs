//! Who may hold the receiver's connection slots, and how many.
//!
//! A connection is first *pending* (its `Hello`, and with a key its
//! answer to the challenge, not yet in) and becomes a *session* only once
//! it is a valid (authenticated) one. The two have separate pools, both
//! capped in total and per peer address, so that idle or unauthenticated
//! connections cannot take the slots real sessions need: 64 kept-alive
//! Hellos, or 200 idle connections from one address, once locked every
//! other sender out. `--allow` is checked before any of this.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use wirebench_wire::auth::Cidr;

/// Most connections in their handshake at once, from all peers.
pub const MAX_PENDING: usize = 64;
/// Most connections in their handshake at once from one address: a real
/// sender sends its `Hello` at once, so a few are plenty.
pub const PENDING_PER_PEER: usize = 8;
/// Default for the number of sessions one address may run at once.
pub const SESSIONS_PER_PEER: usize = 16;

/// The limits a [`Gate`] applies.
#[derive(Debug, Clone)]
pub struct GateLimits {
    pub max_sessions: usize,
    pub sessions_per_peer: usize,
    pub max_pending: usize,
    pub pending_per_peer: usize,
    /// Only these blocks may connect (empty: everyone).
    pub allow: Vec<Cidr>,
}

/// Why a connection was not given a slot: the text is sent to the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("address not allowed")]
    NotAllowed,
    #[error("receiver busy: {0} connections are in their handshake")]
    Pending(usize),
    #[error("receiver busy: {0} connections from your address are in their handshake")]
    PeerPending(usize),
    #[error("receiver busy: {0} sessions running")]
    Busy(usize),
    #[error("receiver busy: your address already runs {0} sessions (its limit)")]
    PeerBusy(usize),
}

#[derive(Default)]
struct Counts {
    pending: usize,
    sessions: usize,
    peers: HashMap<IpAddr, (usize, usize)>,
}

pub struct Gate {
    limits: GateLimits,
    counts: Mutex<Counts>,
}

/// A held slot; given back when dropped.
pub struct Slot {
    gate: Arc<Gate>,
    ip: IpAddr,
    session: bool,
}

impl Gate {
    pub fn new(limits: GateLimits) -> Arc<Gate> {
        Arc::new(Gate {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counters stay consistent even if a holder panicked: every
        // change is made whole under the lock.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A pending slot for a new connection from `ip`.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let l = &self.limits;
        if !l.allow.is_empty() && !l.allow.iter().any(|c| c.contains(ip)) {
            return Err(Refusal::NotAllowed);
        }
        let mut c = self.counts();
        if c.pending >= l.max_pending {
            return Err(Refusal::Pending(l.max_pending));
        }
        let peer = c.peers.entry(ip).or_default();
        if peer.0 >= l.pending_per_peer {
            return Err(Refusal::PeerPending(l.pending_per_peer));
        }
        peer.0 += 1;
        c.pending += 1;
        Ok(Slot {
            gate: self.clone(),
            ip,
            session: false,
        })
    }
}

impl Slot {
    /// Turns a pending slot into a session slot (the handshake is done);
    /// on refusal the pending slot is kept until the slot is dropped.
    pub fn promote(&mut self) -> Result<(), Refusal> {
        if self.session {
            return Ok(());
        }
        let l = &self.gate.limits;
        let mut c = self.gate.counts();
        if c.sessions >= l.max_sessions {
            return Err(Refusal::Busy(l.max_sessions));
        }
        let peer = c.peers.entry(self.ip).or_default();
        if peer.1 >= l.sessions_per_peer {
            return Err(Refusal::PeerBusy(l.sessions_per_peer));
        }
        peer.0 = peer.0.saturating_sub(1);
        peer.1 += 1;
        c.pending = c.pending.saturating_sub(1);
        c.sessions += 1;
        self.session = true;
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.gate.counts();
        if self.session {
            c.sessions = c.sessions.saturating_sub(1);
        } else {
            c.pending = c.pending.saturating_sub(1);
        }
        if let Some(p) = c.peers.get_mut(&self.ip) {
            if self.session {
                p.1 = p.1.saturating_sub(1);
            } else {
                p.0 = p.0.saturating_sub(1);
            }
            if *p == (0, 0) {
                c.peers.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(allow: &[&str]) -> Arc<Gate> {
        Gate::new(GateLimits {
            max_sessions: 3,
            sessions_per_peer: 2,
            max_pending: 4,
            pending_per_peer: 2,
            allow: allow.iter().map(|s| s.parse().unwrap()).collect(),
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn pending_and_session_pools_are_separate_and_per_peer() {
        let g = gate(&[]);
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        let a1 = g.admit(a).unwrap();
        let _a2 = g.admit(a).unwrap();
        assert_eq!(g.admit(a).err(), Some(Refusal::PeerPending(2)));
        // Another address still gets in; the total then fills up.
        let _b1 = g.admit(b).unwrap();
        let _b2 = g.admit(b).unwrap();
        assert_eq!(g.admit(c).err(), Some(Refusal::Pending(4)));
        drop(a1);
        let mut c1 = g.admit(c).unwrap();
        // A session frees its pending slot.
        c1.promote().unwrap();
        let mut c2 = g.admit(c).unwrap();
        c2.promote().unwrap();
        let mut c3 = g.admit(c).unwrap();
        assert_eq!(c3.promote(), Err(Refusal::PeerBusy(2)));
        drop(c3);
        let mut b3 = g.admit(b);
        assert!(b3.is_err(), "b still holds two pending slots");
        drop(_b1);
        b3 = g.admit(b);
        let mut b3 = b3.unwrap();
        b3.promote().unwrap();
        let mut d = g.admit(ip("10.0.0.4")).unwrap();
        assert_eq!(d.promote(), Err(Refusal::Busy(3)));
        drop((c1, c2, b3, d, _a2, _b2));
        assert_eq!(g.counts().pending, 0);
        assert_eq!(g.counts().sessions, 0);
        assert!(g.counts().peers.is_empty());
    }

    #[test]
    fn allow_list() {
        let g = gate(&["127.0.0.0/8", "::1"]);
        assert!(g.admit(ip("127.0.0.2")).is_ok());
        assert!(g.admit(ip("::ffff:127.0.0.1")).is_ok());
        assert!(g.admit(ip("::1")).is_ok());
        assert_eq!(g.admit(ip("10.1.1.1")).err(), Some(Refusal::NotAllowed));
    }
}
