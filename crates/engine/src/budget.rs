//! The receiver's resource budgets (docs/security.md):
//! sockets, socket-buffer bytes and threads, per session and in total over
//! the sessions running at once.
//!
//! A session's cost is known from its `Hello` alone ([`cost`]), so it is
//! reserved before anything is opened: a Hello over a budget is refused
//! with a message naming the budget and the `recv` flag that sets it, and
//! nothing is half-opened. The reservation is given back when the session
//! ends, however it ends ([`Grant`] is dropped). One 256-flow Hello once
//! cost 257 threads and 256 sockets with 16 MiB buffers each.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use wirebench_wire::{FlowSetup, MeterMode};

/// Socket buffer a UDP flow's data socket asks for when the sender did
/// not (`--window`) and the session's budget allows it.
pub const UDP_RCVBUF: u64 = 8 << 20;
/// The same for a TCP flow's data connection.
pub const TCP_RCVBUF: u64 = 4 << 20;
/// Send buffer of a reverse flow's socket (the receiver sends it).
pub const REVERSE_SNDBUF: u64 = 4 << 20;
/// Most socket buffer one flow gets, whatever it asks (`--window`): 64 MiB
/// holds 50 ms at 10 Gbit/s. The daemon sets buffers with SO_RCVBUFFORCE
/// (root passes `net.core.rmem_max`), so an ask of 2^30 once reserved a
/// whole session budget per flow, and two such Hellos held the daemon's
/// total: every other sender was refused while they stayed connected.
pub const MAX_FLOW_BUF: u64 = 64 << 20;

/// The buffer a flow that asks for `ask` bytes gets.
pub fn flow_buf(ask: u32) -> u64 {
    u64::from(ask).min(MAX_FLOW_BUF)
}

/// Smallest default buffer a flow gets however many flows share the
/// session's budget (a flow that asks, with `--window`, gets what it asks).
pub const MIN_DEFAULT_BUF: u64 = 64 << 10;

/// Sockets, socket-buffer bytes and threads: what a session costs, or a
/// budget of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// Sockets (UDP sockets, TCP listeners and connections).
    pub sockets: u64,
    /// Socket buffer bytes asked of the kernel.
    pub buffer_bytes: u64,
    /// Threads.
    pub threads: u64,
}

impl Resources {
    fn plus(self, o: Resources) -> Resources {
        Resources {
            sockets: self.sockets.saturating_add(o.sockets),
            buffer_bytes: self.buffer_bytes.saturating_add(o.buffer_bytes),
            threads: self.threads.saturating_add(o.threads),
        }
    }

    fn minus(self, o: Resources) -> Resources {
        Resources {
            sockets: self.sockets.saturating_sub(o.sockets),
            buffer_bytes: self.buffer_bytes.saturating_sub(o.buffer_bytes),
            threads: self.threads.saturating_sub(o.threads),
        }
    }
}

/// The receiver's budgets (`recv --session-* / --total-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// What one session may cost.
    pub session: Resources,
    /// What all sessions running at once may cost together.
    pub total: Resources,
}

/// Default budget of one session: the largest Hello (10 000 UDP flows)
/// fits in sockets; buffers shrink to fit ([`default_buffer`]); an
/// RTT-meter TCP flow costs a thread, so at most about 500 of those.
pub const SESSION_BUDGET: Resources = Resources {
    sockets: 10_240,
    buffer_bytes: 1 << 30,
    threads: 512,
};
/// Default budget of all sessions together: two of the largest sessions.
pub const TOTAL_BUDGET: Resources = Resources {
    sockets: 20_480,
    buffer_bytes: 2 << 30,
    threads: 1024,
};

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            session: SESSION_BUDGET,
            total: TOTAL_BUDGET,
        }
    }
}

/// The buffer a flow of a session of `flows` flows gets when its sender
/// did not ask for one: the usual `usual` bytes while the session's buffer
/// budget allows that for every flow, else an equal share of it (at least
/// [`MIN_DEFAULT_BUF`]).
pub fn default_buffer(usual: u64, flows: usize, session: &Resources) -> u64 {
    let share = session.buffer_bytes / (flows.max(1) as u64);
    usual.min(share).max(MIN_DEFAULT_BUF)
}

/// Most receive threads of a session's one-way TCP flows: up to this
/// many flows have a thread each, more are dealt out to this many
/// workers. On a host whose CPUs are busy with other work, a TCP flow's
/// receive thread also runs the kernel's receive and ACK processing, and
/// the scheduler gives each thread its share: with one worker per CPU
/// (two) 60 flows on the 1 Gbit/s router bed carried 0.82 x iperf3 -P 60
/// (median of 9 runs at load 12), with a thread each 1.27 x (13 runs;
/// docs/performance.md, "Many TCP flows"). iperf3 3.16 and later runs a
/// thread per stream too, at most 128 per process.
pub const TCP_OWN_THREADS: usize = 128;

/// What a session of these flows costs on a receiver with `cores` CPUs:
/// per flow a data socket (UDP socket or TCP listener) and for TCP its
/// data connection too; buffers as [`default_buffer`] gives them unless
/// the sender asked (`rcvbuf`); threads: the session's own, one per
/// RTT-meter TCP flow (`meter`: the session's, unless the flow names its
/// own) and per reverse flow, the UDP receive workers (one per flow up to
/// the CPUs, then shared) and the one-way TCP ones (one per flow, at
/// most [`TCP_OWN_THREADS`]).
pub fn cost(
    setups: &[FlowSetup],
    meter: MeterMode,
    cores: usize,
    session: &Resources,
) -> Resources {
    let n = setups.len();
    let mut r = Resources {
        sockets: 1,
        buffer_bytes: 0,
        threads: 1,
    };
    let (mut udp, mut tcp) = (0u64, 0u64);
    for s in setups {
        let c = crate::transport::caps(s.transport);
        let (sockets, usual, threads) = if !c.via_receiver {
            // Refused with the Hello (limits::FlowSetup::check): no receiver part.
            (0, 0, 0)
        } else if s.reverse.is_some() {
            (c.rx_sockets, REVERSE_SNDBUF, 1)
        } else if c.connection_oriented {
            let own = s.meter.unwrap_or(meter) == MeterMode::Rtt;
            tcp += u64::from(!own);
            (c.rx_sockets, TCP_RCVBUF, u64::from(own))
        } else {
            // Datagram flows share the receive workers.
            udp += 1;
            (c.rx_sockets, UDP_RCVBUF, 0)
        };
        let buf = match (&s.reverse, s.rcvbuf) {
            // A reverse flow's send buffer is fixed.
            (Some(_), _) => usual,
            (None, Some(b)) => flow_buf(b),
            (None, None) => default_buffer(usual, n, session),
        };
        r = r.plus(Resources {
            sockets,
            buffer_bytes: buf,
            threads,
        });
    }
    r.threads += udp.min(cores as u64) + tcp.min(TCP_OWN_THREADS as u64);
    r
}

/// Why a session does not fit: the text goes to the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    #[error("over the receiver's budget: this session needs {need} {what}, at most {limit} per session (recv {flag})")]
    /// More than one session may hold.
    Session {
        /// Which resource.
        what: &'static str,
        /// What the session needs.
        need: u64,
        /// The per-session budget.
        limit: u64,
        /// The `recv` flag that sets it.
        flag: &'static str,
    },
    #[error("receiver busy: this session needs {need} {what}, and the sessions running hold {used} of the {limit} in all (recv {flag}); try again later")]
    /// More than the sessions running leave free.
    Total {
        /// Which resource.
        what: &'static str,
        /// What the session needs.
        need: u64,
        /// What the running sessions hold.
        used: u64,
        /// The total budget.
        limit: u64,
        /// The `recv` flag that sets it.
        flag: &'static str,
    },
    #[error("over this sender's share of the receiver: this session needs {need} more {what}, its sessions hold {used} of the {limit} one sender may hold (recv --peer-share {pct} %); end one of them or try again later")]
    /// The sender's sessions together would pass its share of a total.
    Peer {
        /// The resource.
        what: &'static str,
        /// What this session adds.
        need: u64,
        /// What the sender's running sessions hold.
        used: u64,
        /// The share one sender may hold.
        limit: u64,
        /// The share, per cent of the total (`recv --peer-share`).
        pct: u64,
    },
}

/// Default share of each total budget one peer (an IPv4 address or an
/// IPv6 /64, [`crate::gate::peer_of`]) may hold over all its sessions
/// (`recv --peer-share`): with 16 sessions per peer of up to a whole
/// session budget each, one sender could otherwise hold the whole total
/// and every other sender would be told "receiver busy".
pub const PEER_SHARE_PCT: u64 = 50;

/// What the running sessions hold: in all, and per peer.
#[derive(Debug, Default)]
struct Held {
    all: Resources,
    peers: HashMap<IpAddr, Resources>,
}

/// The resources of the sessions running now, against the budgets.
#[derive(Debug)]
pub struct Ledger {
    budgets: Budgets,
    /// Per cent of each total one peer may hold.
    peer_pct: u64,
    used: Mutex<Held>,
}

/// A session's reservation; given back when dropped.
#[derive(Debug)]
pub struct Grant {
    ledger: Arc<Ledger>,
    held: Resources,
    peer: Option<IpAddr>,
}

impl Ledger {
    /// An empty ledger under `budgets`.
    pub fn new(budgets: Budgets) -> Arc<Ledger> {
        Ledger::with_peer_share(budgets, PEER_SHARE_PCT)
    }

    /// A ledger whose peers may each hold `pct` per cent (1..=100) of
    /// every total budget.
    pub fn with_peer_share(budgets: Budgets, pct: u64) -> Arc<Ledger> {
        Arc::new(Ledger {
            budgets,
            peer_pct: pct.clamp(1, 100),
            used: Mutex::new(Held::default()),
        })
    }

    /// The budgets it applies.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// What the running sessions hold now.
    pub fn used(&self) -> Resources {
        self.lock().all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Every change is made whole under the lock, so the counts stay
        // consistent even if a holder panicked.
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `need` for a session, or says which budget it exceeds
    /// (the per-session ones first: those never fit, however long the
    /// sender waits).
    pub fn reserve(self: &Arc<Self>, need: Resources) -> Result<Grant, OverBudget> {
        self.reserve_inner(need, None)
    }

    /// [`Ledger::reserve`] for a session of the sender at `from`: also
    /// within the peer's share of each total.
    pub fn reserve_for(
        self: &Arc<Self>,
        from: IpAddr,
        need: Resources,
    ) -> Result<Grant, OverBudget> {
        self.reserve_inner(need, Some(crate::gate::peer_of(from)))
    }

    fn reserve_inner(
        self: &Arc<Self>,
        need: Resources,
        peer: Option<IpAddr>,
    ) -> Result<Grant, OverBudget> {
        let b = &self.budgets;
        let rows = |r: &Resources, t: &Resources| {
            [
                ("sockets", r.sockets, t.sockets, "sockets"),
                (
                    "bytes of socket buffers",
                    r.buffer_bytes,
                    t.buffer_bytes,
                    "buffers",
                ),
                ("threads", r.threads, t.threads, "threads"),
            ]
        };
        for (what, need, limit, name) in rows(&need, &b.session) {
            if need > limit {
                return Err(OverBudget::Session {
                    what,
                    need,
                    limit,
                    flag: session_flag(name),
                });
            }
        }
        let mut held = self.lock();
        // At 100 % the totals say it all (and say "receiver busy").
        if let Some(p) = peer.filter(|_| self.peer_pct < 100) {
            let mine = held.peers.get(&p).copied().unwrap_or_default();
            let share = |t: u64| t / 100 * self.peer_pct + t % 100 * self.peer_pct / 100;
            let cap = Resources {
                sockets: share(b.total.sockets),
                buffer_bytes: share(b.total.buffer_bytes),
                threads: share(b.total.threads),
            };
            for ((what, n, limit, _), (_, u, _, _)) in rows(&mine.plus(need), &cap)
                .into_iter()
                .zip(rows(&mine, &cap))
            {
                if n > limit {
                    return Err(OverBudget::Peer {
                        what,
                        need: n - u,
                        used: u,
                        limit,
                        pct: self.peer_pct,
                    });
                }
            }
        }
        let used = held.all;
        let after = used.plus(need);
        for ((what, n, limit, name), (_, u, _, _)) in rows(&after, &b.total)
            .into_iter()
            .zip(rows(&used, &b.total))
        {
            if n > limit {
                return Err(OverBudget::Total {
                    what,
                    need: n - u,
                    used: u,
                    limit,
                    flag: total_flag(name),
                });
            }
        }
        held.all = after;
        if let Some(p) = peer {
            let mine = held.peers.entry(p).or_default();
            *mine = mine.plus(need);
        }
        Ok(Grant {
            ledger: self.clone(),
            held: need,
            peer,
        })
    }
}

fn session_flag(name: &str) -> &'static str {
    match name {
        "sockets" => "--session-sockets",
        "buffers" => "--session-buffers",
        _ => "--session-threads",
    }
}

fn total_flag(name: &str) -> &'static str {
    match name {
        "sockets" => "--total-sockets",
        "buffers" => "--total-buffers",
        _ => "--total-threads",
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let mut held = self.ledger.lock();
        held.all = held.all.minus(self.held);
        if let Some(p) = self.peer {
            if let Some(mine) = held.peers.get_mut(&p) {
                *mine = mine.minus(self.held);
                if *mine == Resources::default() {
                    held.peers.remove(&p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_wire::Transport;

    #[test]
    fn one_peer_holds_at_most_its_share_of_the_totals() {
        let budgets = Budgets {
            session: Resources {
                sockets: 100,
                buffer_bytes: 100,
                threads: 100,
            },
            total: Resources {
                sockets: 100,
                buffer_bytes: 1000,
                threads: 100,
            },
        };
        let l = Ledger::with_peer_share(budgets, 50);
        let one = |s| Resources {
            sockets: s,
            buffer_bytes: 1,
            threads: 1,
        };
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let (b6, c6): (IpAddr, IpAddr) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::ffff".parse().unwrap(),
        );
        let g1 = l.reserve_for(a, one(30)).unwrap();
        let e = l.reserve_for(a, one(30)).unwrap_err();
        assert!(
            matches!(
                e,
                OverBudget::Peer {
                    used: 30,
                    limit: 50,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("--peer-share 50 %"), "{e}");
        // Another sender is served from what is left.
        let g2 = l.reserve_for(b6, one(40)).unwrap();
        // The same /64 is the same peer.
        assert!(matches!(
            l.reserve_for(c6, one(20)),
            Err(OverBudget::Peer { .. })
        ));
        // A share given back can be taken again.
        drop(g1);
        let g3 = l.reserve_for(a, one(50)).unwrap();
        assert_eq!(l.used().sockets, 90);
        drop((g2, g3));
        assert_eq!(l.used(), Resources::default());
        assert!(l.lock().peers.is_empty());
    }

    fn setup(transport: Transport, rcvbuf: Option<u32>) -> FlowSetup {
        FlowSetup {
            flow_id: 1,
            transport,
            max_len: 100,
            mtu: 1500,
            rcvbuf,
            ..Default::default()
        }
    }

    #[test]
    fn cost_counts_sockets_buffers_and_threads() {
        let s = SESSION_BUDGET;
        let mut flows = vec![setup(Transport::Udp, None); 4];
        flows.push(setup(Transport::Tcp, Some(1 << 20)));
        let c = cost(&flows, MeterMode::Rtt, 2, &s);
        // Control + 4 UDP sockets + TCP listener and connection.
        assert_eq!(c.sockets, 1 + 4 + 2);
        assert_eq!(c.buffer_bytes, 4 * UDP_RCVBUF + (1 << 20));
        // Session + RTT-meter TCP flow + UDP workers (2 CPUs).
        assert_eq!(c.threads, 1 + 1 + 2);
        // Many flows share the buffer budget instead of 8 MiB each.
        let many = vec![setup(Transport::Udp, None); 1000];
        let c = cost(&many, MeterMode::Owd, 2, &s);
        assert!(c.buffer_bytes <= s.buffer_bytes, "{c:?}");
        assert_eq!(default_buffer(UDP_RCVBUF, 1_000_000, &s), MIN_DEFAULT_BUF);
        // One-way TCP flows have at most TCP_OWN_THREADS receive
        // threads; a flow asking for the RTT meter in a one-way session
        // has a thread of its own.
        let mut tcp = vec![setup(Transport::Tcp, None); 1000];
        tcp[0].meter = Some(MeterMode::Rtt);
        let c = cost(&tcp, MeterMode::Owd, 2, &s);
        assert_eq!(c.threads, 1 + 1 + TCP_OWN_THREADS as u64);
        assert!(c.threads <= s.threads && c.sockets <= s.sockets, "{c:?}");
        let c = cost(&tcp[..61], MeterMode::Owd, 2, &s);
        assert_eq!(c.threads, 1 + 1 + 60);
    }

    #[test]
    fn reservations_share_the_total_and_are_given_back() {
        let b = Budgets {
            session: Resources {
                sockets: 10,
                buffer_bytes: 100,
                threads: 5,
            },
            total: Resources {
                sockets: 15,
                buffer_bytes: 1000,
                threads: 100,
            },
        };
        let l = Ledger::new(b);
        let need = Resources {
            sockets: 8,
            buffer_bytes: 10,
            threads: 2,
        };
        let over = Resources {
            sockets: 11,
            ..need
        };
        let e = l.reserve(over).unwrap_err().to_string();
        assert!(
            e.contains("11 sockets") && e.contains("--session-sockets"),
            "{e}"
        );
        let g = l.reserve(need).unwrap();
        let e = l.reserve(need).unwrap_err().to_string();
        assert!(
            e.contains("hold 8 of the 15") && e.contains("--total-sockets"),
            "{e}"
        );
        drop(g);
        assert_eq!(l.used(), Resources::default());
        let _g = l.reserve(need).unwrap();
        let small = Resources { sockets: 7, ..need };
        let _h = l.reserve(small).unwrap();
        assert_eq!(l.used().sockets, 15);
    }
}
