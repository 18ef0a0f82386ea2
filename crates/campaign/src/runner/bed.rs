//! Where traffic runs: loopback, an emulated test-bed or real hosts, behind
//! one [`Bed`] interface so the run loop does not know which it drives.

use super::child::free_port;
use super::nodes::{Nodes, NODE_PORT};
use super::RunError;
use crate::campaign::{Campaign, HostNode, NodeReach, NodeRole, Scenario, Target, TestbedTarget};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where traffic runs: loopback, an emulated test-bed or real hosts. The
/// defaults describe a bed that is simply there (nothing to build, count or
/// remove) and runs the sender as a plain local process.
pub(super) trait Bed {
    /// Builds or rebuilds for these link settings (no-op when unchanged).
    fn ensure(&mut self, _s: &Scenario) -> Result<(), RunError> {
        Ok(())
    }
    /// None when the receiver is not ours to start (real hosts).
    fn receiver(&self, program: &Path) -> Result<Option<Command>, RunError>;
    /// The receiver's address for this IP version.
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError>;
    /// The receiver's control port.
    fn port(&self) -> u16;
    /// True when `ensure` rebuilt since the last call (the receiver must restart).
    fn take_rebuilt(&mut self) -> bool;
    /// True when `invalidate` + `ensure` builds the bed anew.
    fn can_rebuild(&self) -> bool {
        false
    }
    /// Forget the current build so that the next `ensure` rebuilds.
    fn invalidate(&mut self) {}
    /// Removes whatever the bed built.
    fn teardown(&mut self) -> Result<(), RunError> {
        Ok(())
    }
    /// Nodes driven through agents (real hosts, the emulated test-bed's
    /// namespaces) run each run themselves.
    fn nodes(&mut self) -> Option<&mut Nodes> {
        None
    }
    /// The emulated links' wire counters now (test-bed only): two
    /// snapshots give each hop's split of the delay.
    fn wire_counters(&self) -> Option<WireSnapshot> {
        None
    }
}

/// Every link's emulator counters (`Testbed::wire_counters`), with the
/// links they belong to.
pub(super) type WireSnapshot = (
    Vec<wirebench_testbed::LinkSpec>,
    Vec<Option<[wirebench_testbed::WireCounters; 2]>>,
);

/// `[[hosts.node]]`: everything happens through the nodes' agents.
struct RealNodes {
    nodes: Nodes,
}

impl Bed for RealNodes {
    fn receiver(&self, _program: &Path) -> Result<Option<Command>, RunError> {
        Ok(None)
    }
    fn dest(&self, _v6: bool) -> Result<IpAddr, RunError> {
        Err(RunError::Agent(
            "real nodes choose their destinations per pair".into(),
        ))
    }
    fn port(&self) -> u16 {
        NODE_PORT
    }
    fn take_rebuilt(&mut self) -> bool {
        false
    }
    fn teardown(&mut self) -> Result<(), RunError> {
        self.nodes.teardown()
    }
    fn nodes(&mut self) -> Option<&mut Nodes> {
        Some(&mut self.nodes)
    }
}

struct Loopback {
    port: u16,
    started: bool,
}

impl Bed for Loopback {
    fn receiver(&self, program: &Path) -> Result<Option<Command>, RunError> {
        Ok(Some(Command::new(program)))
    }
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError> {
        Ok(if v6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        })
    }
    fn port(&self) -> u16 {
        self.port
    }
    /// The first call starts the receiver, like a fresh build would.
    fn take_rebuilt(&mut self) -> bool {
        !std::mem::replace(&mut self.started, true)
    }
}

struct Hosts {
    v4: Option<IpAddr>,
    v6: Option<IpAddr>,
    port: u16,
}

impl Bed for Hosts {
    fn receiver(&self, _program: &Path) -> Result<Option<Command>, RunError> {
        Ok(None)
    }
    fn dest(&self, v6: bool) -> Result<IpAddr, RunError> {
        let a = if v6 { self.v6 } else { self.v4 };
        a.ok_or_else(|| {
            RunError::BadInput(format!(
                "[hosts] has no IPv{} receiver address for an ip={} scenario",
                if v6 { 6 } else { 4 },
                if v6 { 6 } else { 4 }
            ))
        })
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn take_rebuilt(&mut self) -> bool {
        false
    }
}

/// The emulated test-bed: built (and rebuilt when a scenario changes its
/// links) here; every run goes through an agent in each node's namespace
/// (`ip netns exec NS wirebench agent --stdio`), so test-bed and real
/// campaigns share everything above the transport: receivers, senders,
/// warm-up, path-MTU check, CPU and counters of every node.
struct Emulated {
    target: TestbedTarget,
    /// Directory of the campaign file (topology files are relative to it).
    base: PathBuf,
    program: PathBuf,
    tb: Option<wirebench_testbed::Testbed>,
    nodes: Option<Nodes>,
    current: Option<wirebench_testbed::LinkOpts>,
    rebuilt: bool,
}

fn tb_err(e: wirebench_testbed::TestbedError) -> RunError {
    if e.is_bad_input() {
        RunError::BadInput(e.to_string())
    } else {
        RunError::Testbed(e.to_string())
    }
}

impl Emulated {
    /// The test-bed's nodes as agent nodes: its sender and receiver, every
    /// other node (routers, switches, other hosts) observed like a router.
    fn agent_nodes(&self, tb: &wirebench_testbed::Testbed) -> Result<Nodes, RunError> {
        let (snd, rcv) = (&self.target.sender, &self.target.receiver);
        let mut list = Vec::new();
        for n in &tb.plan().nodes {
            let role = if &n.name == snd {
                NodeRole::Sender
            } else if &n.name == rcv {
                NodeRole::Receiver
            } else {
                NodeRole::Router
            };
            list.push(HostNode {
                name: n.name.clone(),
                reach: NodeReach::Netns(n.netns.clone()),
                agent: None,
                role,
                to: (role == NodeRole::Sender).then(|| rcv.clone()),
                ipv4: tb.addr(&n.name, false).ok(),
                ipv6: tb.addr(&n.name, true).ok(),
                apply_mtu: false,
                apply_offloads: false,
                apply_link_rate: false,
                interfaces: Vec::new(),
            });
        }
        for who in [snd, rcv] {
            if !list.iter().any(|n| &n.name == who) {
                // A sender or receiver the test-bed lacks: the error names
                // the node, as for runs without agents.
                tb.netns(who).map_err(tb_err)?;
            }
        }
        let mut nodes = Nodes::new(list, self.program.clone());
        let mut planned = BTreeMap::new();
        for v6 in [false, true] {
            if let Some(m) = tb.plan().expected_path_mtu(snd, rcv, v6) {
                planned.insert((snd.clone(), rcv.clone(), v6), m);
            }
        }
        nodes.plan_path_mtu(planned);
        Ok(nodes)
    }
}

impl Bed for Emulated {
    fn ensure(&mut self, s: &Scenario) -> Result<(), RunError> {
        let want = s.link_key();
        if self.tb.is_some() && self.current.as_ref() == Some(&want) {
            return Ok(());
        }
        self.teardown()?;
        let opts = want;
        let spec = match (&self.target.preset, &self.target.file) {
            (Some(p), _) => wirebench_testbed::preset(p, &opts).map_err(tb_err)?,
            (None, Some(f)) => {
                let path = self.base.join(f);
                wirebench_testbed::load_file(&path, &opts).map_err(tb_err)?
            }
            (None, None) => {
                return Err(RunError::BadInput("[testbed] needs preset or file".into()))
            }
        };
        let tb = wirebench_testbed::Testbed::up(&self.target.name, &spec).map_err(tb_err)?;
        let nodes = match self.agent_nodes(&tb) {
            Ok(n) => n,
            Err(e) => {
                let _ = tb.down();
                return Err(e);
            }
        };
        self.tb = Some(tb);
        self.nodes = Some(nodes);
        self.current = Some(want);
        self.rebuilt = true;
        Ok(())
    }
    fn receiver(&self, _program: &Path) -> Result<Option<Command>, RunError> {
        // The receiver node's agent runs it.
        Ok(None)
    }
    fn dest(&self, _v6: bool) -> Result<IpAddr, RunError> {
        Err(RunError::Agent(
            "the test-bed's agents choose the destination".into(),
        ))
    }
    fn port(&self) -> u16 {
        NODE_PORT
    }
    fn take_rebuilt(&mut self) -> bool {
        std::mem::replace(&mut self.rebuilt, false)
    }
    fn can_rebuild(&self) -> bool {
        true
    }
    fn invalidate(&mut self) {
        self.current = None;
    }
    fn teardown(&mut self) -> Result<(), RunError> {
        self.current = None;
        // Agents first: they stop their receivers before the namespaces go.
        let agents = self.nodes.take().map_or(Ok(()), |mut n| n.teardown());
        if let Some(tb) = self.tb.take() {
            tb.down().map_err(tb_err)?;
        }
        agents
    }
    fn nodes(&mut self) -> Option<&mut Nodes> {
        self.nodes.as_mut()
    }
    fn wire_counters(&self) -> Option<WireSnapshot> {
        let tb = self.tb.as_ref()?;
        Some((tb.spec().links.clone(), tb.wire_counters()))
    }
}

pub(super) fn make_bed(c: &Campaign, binary: &Path) -> Result<Box<dyn Bed>, RunError> {
    Ok(match &c.target {
        Target::Hosts(h) if !h.nodes.is_empty() => {
            let mut nodes = Nodes::new(h.nodes.clone(), binary.to_path_buf());
            nodes.set_pairings(h.pairings.clone());
            Box::new(RealNodes { nodes })
        }
        Target::Loopback => Box::new(Loopback {
            port: free_port()?,
            started: false,
        }),
        Target::Hosts(h) => Box::new(Hosts {
            v4: h.receiver.as_deref().and_then(|a| a.parse().ok()),
            v6: h.receiver6.as_deref().and_then(|a| a.parse().ok()),
            port: h.port.unwrap_or(5400),
        }),
        Target::Testbed(t) => {
            if !wirebench_testbed::sys::is_root() {
                return Err(RunError::BadInput(
                    "an emulated [testbed] needs root (network namespaces); run as root, or use [loopback]".into(),
                ));
            }
            let base = Path::new(&c.origin)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            Box::new(Emulated {
                target: t.clone(),
                base,
                program: binary.to_path_buf(),
                tb: None,
                nodes: None,
                current: None,
                rebuilt: false,
            })
        }
    })
}
