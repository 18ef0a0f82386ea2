//! Who may hold the receiver's connection slots, and how many.
//!
//! A connection is first *pending* (its `Hello`, and with a key its
//! answer to the challenge, not yet in) and becomes a *session* only once
//! it is a valid (authenticated) one. The two have separate pools, both
//! capped in total and per peer address, so that idle or unauthenticated
//! connections cannot take the slots real sessions need (a few dozen
//! kept-alive Hellos, or idle connections from one address, would
//! otherwise lock every other sender out). `--allow` is checked before any
//! of this.
//!
//! A peer is an IPv4 address or an IPv6 /64 (one host usually holds a
//! whole /64, so counting its addresses one by one would give it 2^64
//! shares). When every pending slot is taken, a newcomer whose peer holds
//! fewer of them than the peer holding the most takes that peer's oldest
//! (its connection is shut down), so slow connections from a few
//! addresses cannot lock every sender out by reconnecting.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wirebench_wire::auth::Cidr;

/// Most connections in their handshake at once, from all peers.
pub const MAX_PENDING: usize = 64;
/// Most connections in their handshake at once from one address: a real
/// sender sends its `Hello` at once, so a few are plenty.
pub const PENDING_PER_PEER: usize = 8;
/// A connection still in its handshake after this long is not a sender at
/// work (its Hello and answer take a round trip each): when every pending
/// slot is taken, a newcomer may take its place.
pub const STALE_PENDING: std::time::Duration = std::time::Duration::from_secs(1);
/// Default for the number of sessions one address may run at once.
pub const SESSIONS_PER_PEER: usize = 16;

/// The limits a [`Gate`] applies.
#[derive(Debug, Clone)]
pub struct GateLimits {
    /// Sessions running at once, in all.
    pub max_sessions: usize,
    /// Sessions running at once from one address.
    pub sessions_per_peer: usize,
    /// Connections in their handshake at once, in all.
    pub max_pending: usize,
    /// Connections in their handshake at once from one address.
    pub pending_per_peer: usize,
    /// Only these blocks may connect (empty: everyone).
    pub allow: Vec<Cidr>,
}

/// Why a connection was not given a slot: the text is sent to the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("address not allowed")]
    /// The peer's address is outside `--allow`.
    NotAllowed,
    #[error("receiver busy: {0} connections are in their handshake")]
    /// Too many connections in their handshake (the limit).
    Pending(usize),
    #[error("receiver busy: {0} connections from your address are in their handshake")]
    /// Too many handshakes from this address (its limit).
    PeerPending(usize),
    #[error("receiver busy: {0} sessions running")]
    /// Too many sessions running (the limit).
    Busy(usize),
    #[error("receiver busy: your address already runs {0} sessions (its limit)")]
    /// Too many sessions from this address (its limit).
    PeerBusy(usize),
}

/// A connection in its handshake, as the gate knows it.
struct Pending {
    id: u64,
    peer: IpAddr,
    since: Instant,
    /// A handle on the connection, to end it when a newcomer of a peer
    /// with fewer pending slots needs its place.
    conn: Option<TcpStream>,
}

#[derive(Default)]
struct Counts {
    pending: usize,
    sessions: usize,
    /// Pending and session slots by peer ([`peer_of`]).
    peers: HashMap<IpAddr, (usize, usize)>,
    /// The pending connections, oldest first.
    waiting: Vec<Pending>,
    next_id: u64,
}

/// The peer an address counts for: itself (IPv4), or its /64 (IPv6).
pub fn peer_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
            v6.to_ipv4_mapped().map_or(ip, IpAddr::V4)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Counts {
    /// Makes room for a newcomer whose peer holds `mine` pending slots:
    /// ends the oldest pending connection of the peer holding the most,
    /// if that one holds at least two more (so the swap leaves it no
    /// fewer than the newcomer's), else the oldest of all if it has been
    /// pending for [`STALE_PENDING`]. True if one was ended.
    fn evict_for(&mut self, mine: usize) -> bool {
        let most = self.peers.values().map(|v| v.0).max().unwrap_or(0);
        let count = |peer: &IpAddr| self.peers.get(peer).map_or(0, |v| v.0);
        let at = match most >= mine + 2 {
            // The oldest connection of the heaviest peers.
            true => self.waiting.iter().position(|p| count(&p.peer) == most),
            false => self
                .waiting
                .first()
                .filter(|p| p.since.elapsed() >= STALE_PENDING)
                .map(|_| 0),
        };
        let Some(at) = at else {
            return false;
        };
        let victim = self.waiting.remove(at);
        if let Some(c) = &victim.conn {
            let _ = c.shutdown(Shutdown::Both);
        }
        self.release(victim.peer, false);
        true
    }

    /// Gives back a slot of `peer` (a session slot, or a pending one).
    fn release(&mut self, peer: IpAddr, session: bool) {
        if session {
            self.sessions = self.sessions.saturating_sub(1);
        } else {
            self.pending = self.pending.saturating_sub(1);
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            if session {
                p.1 = p.1.saturating_sub(1);
            } else {
                p.0 = p.0.saturating_sub(1);
            }
            if *p == (0, 0) {
                self.peers.remove(&peer);
            }
        }
    }

    /// Takes pending connection `id` off the list; false if it was
    /// evicted (and its slot already given back).
    fn unlist(&mut self, id: u64) -> bool {
        match self.waiting.iter().position(|p| p.id == id) {
            Some(at) => {
                self.waiting.remove(at);
                true
            }
            None => false,
        }
    }
}

/// The receiver's connection slots: who may connect, and how many
/// handshakes and sessions run at once, in all and per address.
pub struct Gate {
    limits: GateLimits,
    counts: Mutex<Counts>,
}

/// A held slot; given back when dropped.
pub struct Slot {
    gate: Arc<Gate>,
    /// The peer ([`peer_of`]) it counts for.
    ip: IpAddr,
    /// Its place in the pending list while pending.
    id: u64,
    session: bool,
}

impl Gate {
    /// A gate applying `limits`.
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

    /// A pending slot for a new connection from `ip` (`conn`: a handle on
    /// it, so that it can be ended to make room for a fairer newcomer).
    pub fn admit(self: &Arc<Self>, ip: IpAddr, conn: Option<TcpStream>) -> Result<Slot, Refusal> {
        let l = &self.limits;
        if !l.allow.is_empty() && !l.allow.iter().any(|c| c.contains(ip)) {
            return Err(Refusal::NotAllowed);
        }
        let key = peer_of(ip);
        let mut c = self.counts();
        let mine = c.peers.get(&key).map_or(0, |p| p.0);
        if mine >= l.pending_per_peer {
            return Err(Refusal::PeerPending(l.pending_per_peer));
        }
        if c.pending >= l.max_pending && !c.evict_for(mine) {
            return Err(Refusal::Pending(l.max_pending));
        }
        c.peers.entry(key).or_default().0 += 1;
        c.pending += 1;
        let id = c.next_id;
        c.next_id += 1;
        c.waiting.push(Pending {
            id,
            peer: key,
            since: Instant::now(),
            conn,
        });
        Ok(Slot {
            gate: self.clone(),
            ip: key,
            id,
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
        if c.peers.get(&self.ip).map_or(0, |p| p.1) >= l.sessions_per_peer {
            return Err(Refusal::PeerBusy(l.sessions_per_peer));
        }
        // Evicted meanwhile: its pending slot is already given back (and
        // its connection shut down), so it must not count twice.
        if c.unlist(self.id) {
            c.release(self.ip, false);
        }
        c.peers.entry(self.ip).or_default().1 += 1;
        c.sessions += 1;
        self.session = true;
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.gate.counts();
        if self.session || c.unlist(self.id) {
            c.release(self.ip, self.session);
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
        let a1 = g.admit(a, None).unwrap();
        let _a2 = g.admit(a, None).unwrap();
        assert_eq!(g.admit(a, None).err(), Some(Refusal::PeerPending(2)));
        // Another address still gets in; the total then fills up.
        let _b1 = g.admit(b, None).unwrap();
        let _b2 = g.admit(b, None).unwrap();
        // Full: an address without a slot takes the oldest place of one
        // holding two (a1), which is then not given back twice.
        let mut c1 = g.admit(c, None).unwrap();
        drop(a1);
        assert_eq!(g.counts().pending, 4);
        // A session frees its pending slot.
        c1.promote().unwrap();
        let mut c2 = g.admit(c, None).unwrap();
        c2.promote().unwrap();
        let mut c3 = g.admit(c, None).unwrap();
        assert_eq!(c3.promote(), Err(Refusal::PeerBusy(2)));
        drop(c3);
        let mut b3 = g.admit(b, None);
        assert!(b3.is_err(), "b still holds two pending slots");
        drop(_b1);
        b3 = g.admit(b, None);
        let mut b3 = b3.unwrap();
        b3.promote().unwrap();
        let mut d = g.admit(ip("10.0.0.4"), None).unwrap();
        assert_eq!(d.promote(), Err(Refusal::Busy(3)));
        drop((c1, c2, b3, d, _a2, _b2));
        assert_eq!(g.counts().pending, 0);
        assert_eq!(g.counts().sessions, 0);
        assert!(g.counts().peers.is_empty());
    }

    #[test]
    fn allow_list() {
        let g = gate(&["127.0.0.0/8", "::1"]);
        assert!(g.admit(ip("127.0.0.2"), None).is_ok());
        assert!(g.admit(ip("::ffff:127.0.0.1"), None).is_ok());
        assert!(g.admit(ip("::1"), None).is_ok());
        assert_eq!(
            g.admit(ip("10.1.1.1"), None).err(),
            Some(Refusal::NotAllowed)
        );
    }

    #[test]
    fn ipv6_addresses_count_by_their_64() {
        let g = gate(&[]);
        let _a = g.admit(ip("2001:db8::1"), None).unwrap();
        let _b = g.admit(ip("2001:db8::ffff:2"), None).unwrap();
        assert_eq!(
            g.admit(ip("2001:db8::3"), None).err(),
            Some(Refusal::PeerPending(2))
        );
        assert!(g.admit(ip("2001:db8:0:1::1"), None).is_ok());
    }

    /// A connected pair on loopback: the accepted end and the client's.
    fn pair() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (l.accept().unwrap().0, c)
    }

    #[test]
    fn a_full_gate_makes_room_for_a_lighter_peer() {
        let g = Gate::new(GateLimits {
            pending_per_peer: 4,
            ..gate(&[]).limits.clone()
        });
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let mut held = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let (server, client) = pair();
            held.push(g.admit(a, Some(server)).unwrap());
            clients.push(client);
        }
        let _b1 = g.admit(b, None).expect("a lighter peer gets in");
        // a's oldest connection was ended: its client reads the end.
        let mut buf = [0u8; 1];
        clients[0]
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        assert_eq!(std::io::Read::read(&mut clients[0], &mut buf).unwrap(), 0);
        assert_eq!(g.counts().peers[&a], (3, 0));
        // a may not take its place back, nor b take more than a keeps.
        assert_eq!(g.admit(a, None).err(), Some(Refusal::Pending(4)));
        let mut b2 = g.admit(b, None).unwrap();
        assert_eq!(g.counts().peers[&a], (2, 0));
        assert_eq!(g.admit(b, None).err(), Some(Refusal::Pending(4)));
        // Evicted slots are not given back twice, pending or promoted.
        let mut first = held.remove(0);
        first.promote().unwrap();
        drop(held.remove(0));
        assert_eq!(g.counts().pending, 4);
        b2.promote().unwrap();
        assert_eq!(g.counts().pending, 3);
        drop((held, first, b2, _b1));
        let c = g.counts();
        assert_eq!((c.pending, c.sessions), (0, 0));
        assert!(c.peers.is_empty());
    }

    #[test]
    fn a_stale_pending_connection_makes_room() {
        let g = gate(&[]);
        let _held: Vec<Slot> = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
            .iter()
            .map(|a| g.admit(ip(a), None).unwrap())
            .collect();
        assert_eq!(
            g.admit(ip("10.0.0.5"), None).err(),
            Some(Refusal::Pending(4))
        );
        g.counts().waiting[0].since -= STALE_PENDING;
        assert!(g.admit(ip("10.0.0.5"), None).is_ok());
        assert!(!g.counts().peers.contains_key(&ip("10.0.0.1")));
    }
}
