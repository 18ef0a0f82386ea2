//! Real nodes (`[[hosts.node]]`): every sender, receiver and router is
//! driven through its `wirebench agent`, reached over SSH, as a local child
//! or in a namespace — this module does not know which. Per run it sets
//! the scenario's MTU/offloads where allowed, keeps a receiver on every
//! receiver node, verifies the path MTU of every pair, samples CPU and
//! counters of every node around the senders (all nodes at once), and
//! returns what the run loop stores: the result documents, per-node CPU
//! and counter deltas, metadata, and a failure naming the node when an
//! agent is lost (the next run reconnects; the agent restored what it had
//! changed when its link dropped).
//!
//! In a campaign with `interval_ms` the senders' agents relay their
//! interval lines while the run goes on (agent protocol revision 1) and
//! they reach the progress bar and log like a local sender's; an older
//! agent runs the same senders without them, with a note.

use super::args::send_args;
use super::live::{Follower, Progress};
use super::signals::stop_requested;
use super::RunError;
use crate::campaign::{Campaign, HostNode, NodeReach, NodeRole, Pairing, RunLength, Scenario};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use wirebench_agent::proto::{CpuSample, HostMeta, REVISION_LAB};
use wirebench_agent::{AgentConn, AgentError, AgentSpec, Allow, Channel, Controller, Role};

/// How often a campaign started with `--wait-lab` asks a held node again.
const LAB_RETRY: Duration = Duration::from_secs(2);

/// Path-MTU probes per run before a path counts as broken, and the pause
/// between them: 10 × 300 ms outlasts IPv6 duplicate address detection
/// (1-2 s after an address is added).
const PMTU_TRIES: u32 = 10;
const PMTU_RETRY: Duration = Duration::from_millis(300);

/// Control port of the receivers started on receiver nodes.
pub const NODE_PORT: u16 = 5400;

pub(super) struct Nodes {
    nodes: Vec<HostNode>,
    program: PathBuf,
    conns: Vec<Option<AgentConn>>,
    meta: Vec<Option<HostMeta>>,
    /// Interfaces `apply_*` act on, resolved from the metadata.
    ifaces: Vec<Vec<String>>,
    /// (mtu, offloads, link rate) applied on each node since it connected.
    applied: Vec<Option<Applied>>,
    /// Receiver node → handle of its `wirebench recv`.
    receivers: BTreeMap<usize, u32>,
    /// Extra agent arguments (tests).
    extra: Vec<String>,
    /// (sender, receiver, v6) → the path MTU the bed was built with (the
    /// emulated test-bed knows it from its plan; real nodes: the
    /// scenario's `mtu` is the expectation).
    planned_pmtu: BTreeMap<(String, String, bool), u32>,
    /// Sender nodes already named for an agent too old to relay
    /// intervals (the note is given once).
    no_stream_noted: BTreeSet<usize>,
    /// Every agent connected once: a failed reconnect fails a run, not
    /// the campaign.
    connected_once: bool,
    /// Said once, stored with the next run (`notes`): what reconnected
    /// agents put back from their dead predecessors' journals.
    notes: Vec<String>,
    /// `[hosts.pairings]`: a scenario with a `pairing` uses only its nodes.
    pairings: BTreeMap<String, Pairing>,
    /// Who this controller is, for the nodes' lab locks.
    controller: Option<Controller>,
    /// `--wait-lab`: how long to wait for nodes another campaign holds.
    wait_lab: Option<Duration>,
    /// Per node: the state of its `apply_*` interfaces when this campaign
    /// first reached it (`host H: eth0 mtu 1500, qdisc noqueue, ...`).
    links_before: BTreeMap<String, String>,
    /// Per node: that state as an earlier campaign in the store first saw
    /// it, and which campaign that was.
    earlier: BTreeMap<String, (String, String)>,
}

/// Where a run's live intervals go: its label in the progress.
pub(super) type Live<'a> = Option<(&'a str, &'a Progress)>;

/// MTU, offloads and link rate (bit/s) a node's interfaces were set to.
type Applied = (Option<u32>, Option<bool>, Option<u64>);

/// What the senders of one run (or its warm-up) gave.
struct Sent {
    docs: Vec<Value>,
    errors: Vec<String>,
    commands: Vec<String>,
    refused: bool,
    interrupted: bool,
}

/// What one run through the agents gave.
pub(super) struct NodeRun {
    pub doc: Option<Value>,
    pub error: Option<String>,
    pub observed: Value,
    pub command: String,
    /// A sender refused its arguments (exit 2).
    pub refused: bool,
    pub interrupted: bool,
}

fn channel(n: &HostNode, program: &std::path::Path) -> Channel {
    let local = || n.agent.clone().map(PathBuf::from).unwrap_or(program.into());
    match &n.reach {
        NodeReach::Local => Channel::Local { program: local() },
        NodeReach::Netns(ns) => Channel::Netns {
            ns: ns.clone(),
            program: local(),
        },
        NodeReach::Ssh { dest, options } => Channel::Ssh {
            dest: dest.clone(),
            program: n.agent.clone().unwrap_or_else(|| "wirebench".into()),
            options: options.clone(),
        },
    }
}

/// Interfaces holding one of the node's data addresses.
fn holding_ifaces(n: &HostNode, meta: &HostMeta) -> Vec<String> {
    meta.interfaces
        .iter()
        .filter(|i| i.name != "lo")
        .filter(|i| {
            i.addresses.iter().any(|a| {
                let ip = a.split('/').next().and_then(|x| x.parse::<IpAddr>().ok());
                ip.is_some() && (ip == n.ipv4 || ip == n.ipv6)
            })
        })
        .map(|i| i.name.clone())
        .collect()
}

/// The refusal for a campaign that would change the management path.
fn mgmt_refusal(n: &HostNode, iface: &str) -> RunError {
    RunError::BadInput(if n.interfaces.is_empty() {
        format!(
            "node {}: interface {iface} carries both data traffic and the agent's own SSH connection (the management path), which wirebench never changes; reach the node over an address on another interface, or leave apply_mtu/apply_offloads/apply_link_rate off for it",
            n.name
        )
    } else {
        format!(
            "node {}: interface {iface} carries the agent's own SSH connection (the management path), which wirebench never changes; take it out of `interfaces`",
            n.name
        )
    })
}

fn lost(e: &AgentError) -> bool {
    e.is_lost()
}

impl Nodes {
    pub(super) fn new(nodes: Vec<HostNode>, program: PathBuf) -> Nodes {
        let n = nodes.len();
        // Tests of the version check give every agent a protocol version.
        let extra = std::env::var("WIREBENCH_AGENT_EXTRA_ARGS")
            .map(|v| v.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        Nodes {
            nodes,
            program,
            conns: (0..n).map(|_| None).collect(),
            meta: vec![None; n],
            ifaces: vec![Vec::new(); n],
            applied: vec![None; n],
            receivers: BTreeMap::new(),
            extra,
            planned_pmtu: BTreeMap::new(),
            no_stream_noted: BTreeSet::new(),
            connected_once: false,
            notes: Vec::new(),
            pairings: BTreeMap::new(),
            controller: None,
            wait_lab: None,
            links_before: BTreeMap::new(),
            earlier: BTreeMap::new(),
        }
    }

    /// Names this controller and campaign to the nodes' lab locks, and
    /// how long to wait when another campaign holds a node (None: refuse
    /// at once).
    pub(super) fn set_lab(&mut self, campaign: &str, wait: Option<Duration>) {
        self.controller = Some(Controller {
            host: wirebench_agent::host::hostname(),
            pid: std::process::id(),
            campaign: campaign.to_string(),
        });
        self.wait_lab = wait;
    }

    /// What earlier campaigns of the store found on each node (node →
    /// (state, campaign)), compared when this one first reaches it.
    pub(super) fn set_earlier_links(&mut self, earlier: BTreeMap<String, (String, String)>) {
        self.earlier = earlier;
    }

    /// The node sets of `[hosts.pairings]`.
    pub(super) fn set_pairings(&mut self, pairings: BTreeMap<String, Pairing>) {
        self.pairings = pairings;
    }

    /// The pairing a scenario runs on, if it has one.
    fn pairing(&self, s: &Scenario) -> Result<Option<&Pairing>, RunError> {
        match &s.settings.pairing {
            None => Ok(None),
            Some(p) => self.pairings.get(p).map(Some).ok_or_else(|| {
                RunError::BadInput(format!("no pairing named {p:?} in [hosts.pairings]"))
            }),
        }
    }

    /// Per node: whether the scenario uses it (all nodes without a pairing).
    fn in_use(&self, s: &Scenario) -> Result<Vec<bool>, RunError> {
        let p = self.pairing(s)?;
        Ok(self
            .nodes
            .iter()
            .map(|n| p.is_none_or(|p| p.uses(&n.name)))
            .collect())
    }

    /// The path MTU each pair was built with, checked before every run
    /// instead of the scenario's `mtu`.
    pub(super) fn plan_path_mtu(&mut self, planned: BTreeMap<(String, String, bool), u32>) {
        self.planned_pmtu = planned;
    }

    /// Connects every agent not connected (all at once) and reads its
    /// metadata. A node that cannot be reached, or speaks another protocol
    /// version, fails the campaign before anything runs.
    pub(super) fn connect(&mut self) -> Result<(), RunError> {
        let missing: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.conns[i].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let specs: Vec<AgentSpec> = missing
            .iter()
            .map(|&i| {
                let n = &self.nodes[i];
                // The interfaces are only known after metadata: allow the
                // named ones now, or every interface of a node that allows
                // changes at all; `ensure` only touches the resolved list.
                let all = |on: bool| {
                    if !on {
                        vec![]
                    } else if n.interfaces.is_empty() {
                        vec!["*".to_string()]
                    } else {
                        n.interfaces.clone()
                    }
                };
                AgentSpec {
                    node: n.name.clone(),
                    channel: channel(n, &self.program),
                    allow: Allow {
                        mtu: all(n.apply_mtu),
                        offloads: all(n.apply_offloads),
                        rate: all(n.apply_link_rate),
                    },
                    extra: self.extra.clone(),
                    controller: self.controller.clone(),
                }
            })
            .collect();
        let res = self.connect_waiting(&specs)?;
        let mut errs = Vec::new();
        for (i, r) in missing.iter().zip(res) {
            match r {
                Ok(c) => {
                    if !c.hello.recovered.is_empty() {
                        let n = format!(
                            "node {}: an earlier agent there ended without restoring (killed?); this one put back: {}",
                            self.nodes[*i].name,
                            c.hello.recovered.join("; ")
                        );
                        eprintln!("wirebench: {n}");
                        self.notes.push(n);
                    }
                    self.conns[*i] = Some(c)
                }
                Err(e) => errs.push(e.to_string()),
            }
        }
        if !errs.is_empty() {
            return Err(RunError::Agent(errs.join("\n")));
        }
        // Metadata of the newly connected, all at once.
        let metas = std::thread::scope(|s| {
            let hs: Vec<_> = self
                .conns
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| missing.contains(i))
                .filter_map(|(i, c)| c.as_mut().map(|c| (i, s.spawn(move || c.metadata()))))
                .collect();
            hs.into_iter()
                .map(|(i, h)| (i, h.join()))
                .collect::<Vec<_>>()
        });
        for (i, m) in metas {
            match m {
                Ok(Ok(m)) => {
                    self.ifaces[i] = self.resolve_ifaces(i, &m)?;
                    self.meta[i] = Some(m);
                }
                Ok(Err(e)) => return Err(RunError::Agent(e.to_string())),
                Err(_) => return Err(RunError::Agent("metadata thread panicked".into())),
            }
        }
        if !self.connected_once {
            self.first_links()?;
        }
        self.connected_once = true;
        Ok(())
    }

    /// Connects `specs`; a node another campaign holds (its lab lock)
    /// refuses the campaign with one line naming the holder, or, with
    /// `--wait-lab`, is asked again until it is free or the time is up.
    /// While waiting nothing is held: the nodes reached are let go, so two
    /// waiting campaigns cannot hold each other's nodes.
    fn connect_waiting(
        &self,
        specs: &[AgentSpec],
    ) -> Result<Vec<Result<AgentConn, AgentError>>, RunError> {
        let t0 = Instant::now();
        let mut said = false;
        loop {
            let res = wirebench_agent::connect_all(specs);
            let busy: Vec<&AgentError> = res
                .iter()
                .filter_map(|r| r.as_ref().err())
                .filter(|e| matches!(e, AgentError::Busy { .. }))
                .collect();
            let Some(first) = busy.first() else {
                return Ok(res);
            };
            let mut line = first.to_string();
            if busy.len() > 1 {
                let more: Vec<&str> = busy[1..].iter().map(|e| e.node()).collect();
                line.push_str(&format!(" (so are nodes {})", more.join(", ")));
            }
            // Mid-campaign a held node fails the run, it is not waited for.
            let wait = self.wait_lab.filter(|_| !self.connected_once);
            match wait {
                Some(limit) if t0.elapsed() < limit && !stop_requested() => {
                    if !said {
                        eprintln!("wirebench: waiting for the lab (--wait-lab): {line}");
                        said = true;
                    }
                    drop(res);
                    std::thread::sleep(LAB_RETRY);
                }
                Some(limit) => {
                    return Err(RunError::LabBusy(format!(
                        "{line}; still held after waiting {} s (--wait-lab)",
                        limit.as_secs()
                    )))
                }
                None => return Err(RunError::LabBusy(line)),
            }
        }
    }

    /// Reads what every node's `apply_*` interfaces are before this
    /// campaign changes them, and reports a node that differs from what an
    /// earlier campaign found there when no journal explains it (what a
    /// dead agent's journal covered was put back before this): it is taken
    /// as it is, but said.
    fn first_links(&mut self) -> Result<(), RunError> {
        for i in 0..self.nodes.len() {
            if self.ifaces[i].is_empty() {
                continue;
            }
            let (Some(c), Some(m)) = (self.conns[i].as_mut(), self.meta[i].as_ref()) else {
                continue;
            };
            let qd = c.counters().map_err(|e| RunError::Agent(e.to_string()))?;
            let state = link_states(&self.ifaces[i], m, &qd);
            let text = format!("host {}: {}", m.hostname, links_text(&state));
            let name = self.nodes[i].name.clone();
            if let Some((then, campaign)) = self.earlier.get(&name) {
                let same_host = then.split(':').next() == text.split(':').next();
                if same_host && *then != text {
                    let n = format!(
                        "node {name}: its interfaces differ from what campaign {campaign} found there ({}), now {}; no journal of a wirebench agent explains it, so this campaign takes them as they are (if an earlier campaign left them so, put them back by hand)",
                        then.split_once(": ").map(|x| x.1).unwrap_or(then),
                        text.split_once(": ").map(|x| x.1).unwrap_or(&text),
                    );
                    eprintln!("wirebench: {n}");
                    self.notes.push(n);
                }
            }
            self.links_before.insert(name, text);
        }
        Ok(())
    }

    /// The interfaces `apply_*` act on: `interfaces` if given; otherwise
    /// those holding the node's data addresses, and on routers those its
    /// routes to the other nodes' data addresses leave by (an interface
    /// without a data path, such as the one an administrator logs in on,
    /// is never among them). Refused when one is the management path.
    fn resolve_ifaces(&mut self, i: usize, meta: &HostMeta) -> Result<Vec<String>, RunError> {
        let n = self.nodes[i].clone();
        if !(n.apply_mtu || n.apply_offloads || n.apply_link_rate) {
            return Ok(Vec::new());
        }
        let Some(c) = self.conns[i].as_mut() else {
            return Ok(Vec::new());
        };
        let ifaces = if !n.interfaces.is_empty() {
            n.interfaces.clone()
        } else if n.role == NodeRole::Router {
            if c.hello.revision < REVISION_LAB {
                return Err(RunError::BadInput(format!(
                    "node {}: its agent (wirebench {}, agent protocol revision {}) cannot say which interfaces carry the data path; name them with `interfaces`, or install wirebench {} there",
                    n.name,
                    c.hello.tool_version,
                    c.hello.revision,
                    env!("CARGO_PKG_VERSION")
                )));
            }
            let dests: Vec<IpAddr> = self
                .nodes
                .iter()
                .filter(|o| o.role != NodeRole::Router)
                .flat_map(|o| [o.ipv4, o.ipv6])
                .flatten()
                .collect();
            let routes = c
                .route_ifaces(&dests)
                .map_err(|e| RunError::Agent(e.to_string()))?;
            let mut v: Vec<String> = routes.into_values().collect();
            v.sort();
            v.dedup();
            v
        } else {
            holding_ifaces(&n, meta)
        };
        if ifaces.is_empty() {
            return Err(RunError::BadInput(format!(
                "node {}: apply_mtu/apply_offloads/apply_link_rate but {}; name them with `interfaces`",
                n.name,
                if n.role == NodeRole::Router {
                    "no route to the other nodes' data addresses leaves by an interface"
                } else {
                    "no interface holds its data address"
                }
            )));
        }
        if let Some(m) = ifaces.iter().find(|f| c.hello.mgmt.contains(f)) {
            return Err(mgmt_refusal(&n, m));
        }
        Ok(ifaces)
    }

    fn drop_node(&mut self, i: usize) {
        self.conns[i] = None;
        self.applied[i] = None;
        self.receivers.remove(&i);
    }

    /// Sets the scenario's MTU/offloads on the nodes that allow it and
    /// keeps a receiver on every receiver node. Lost agents are dropped
    /// and the reason returned (the run is then stored as failed).
    fn ensure(&mut self, s: &Scenario) -> Result<Option<String>, RunError> {
        match self.connect() {
            // A node lost during the campaign that cannot be reached again
            // fails this run; the next one tries again.
            Err(RunError::Agent(e) | RunError::LabBusy(e)) if self.connected_once => {
                for i in 0..self.nodes.len() {
                    if self.meta[i].is_some() && self.conns[i].is_none() {
                        self.drop_node(i);
                    }
                }
                return Ok(Some(e));
            }
            r => r?,
        }
        let l = s.settings.link;
        let want = (l.mtu, l.offloads, l.rate_bps);
        let using = self.in_use(s)?;
        for (i, used) in using.iter().copied().enumerate() {
            let n = self.nodes[i].clone();
            if self.applied[i] == Some(want) || !used {
                continue;
            }
            let ifaces = self.ifaces[i].clone();
            let Some(c) = self.conns[i].as_mut() else {
                continue;
            };
            let mut r = Ok(());
            for f in &ifaces {
                if let (true, Some(m)) = (n.apply_mtu, want.0) {
                    r = r.and_then(|_| c.set_mtu(f, m));
                }
                if let (true, Some(o)) = (n.apply_offloads, want.1) {
                    r = r.and_then(|_| c.set_offloads(f, o));
                }
                // After the MTU: the shaper is sized for the frames it takes.
                if n.apply_link_rate {
                    r = r.and_then(|_| c.set_rate(f, want.2));
                }
            }
            match r {
                Ok(()) => self.applied[i] = Some(want),
                Err(e) if lost(&e) => {
                    self.drop_node(i);
                    return Ok(Some(e.to_string()));
                }
                Err(e) => return Err(RunError::Agent(e.to_string())),
            }
        }
        for (i, used) in using.into_iter().enumerate() {
            if self.nodes[i].role != NodeRole::Receiver || self.receivers.contains_key(&i) || !used
            {
                continue;
            }
            let Some(c) = self.conns[i].as_mut() else {
                continue;
            };
            let args = vec!["-p".to_string(), NODE_PORT.to_string(), "-q".into()];
            match c.start(Role::Receiver, &args, Some(NODE_PORT)) {
                Ok((h, _)) => {
                    self.receivers.insert(i, h);
                }
                Err(e) if lost(&e) => {
                    self.drop_node(i);
                    return Ok(Some(e.to_string()));
                }
                Err(e) => return Err(RunError::Receiver(e.to_string())),
            }
        }
        Ok(None)
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Sender index → receiver index and destination address.
    fn pairs(&self, s: &Scenario) -> Result<Vec<(usize, usize, IpAddr)>, RunError> {
        let v6 = s.settings.ip == 6;
        let pairing = self.pairing(s)?;
        let mut v = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.role != NodeRole::Sender {
                continue;
            }
            if pairing.is_some_and(|p| !p.senders.contains(&n.name)) {
                continue;
            }
            // A `sender` axis picks one sender node per scenario.
            if s.settings.sender.as_ref().is_some_and(|p| *p != n.name) {
                continue;
            }
            let to = pairing
                .map(|p| p.receiver.as_str())
                .or(n.to.as_deref())
                .and_then(|t| self.index(t))
                .ok_or_else(|| RunError::BadInput(format!("sender {} has no receiver", n.name)))?;
            let r = &self.nodes[to];
            let dest = if v6 { r.ipv6 } else { r.ipv4 }.ok_or_else(|| {
                RunError::BadInput(format!(
                    "receiver node {} has no IPv{} address for an ip={} scenario",
                    r.name,
                    if v6 { 6 } else { 4 },
                    if v6 { 6 } else { 4 }
                ))
            })?;
            v.push((i, to, dest));
        }
        Ok(v)
    }

    /// Reads the metadata of every node in use that changes links again
    /// (all at once); Some(reason) when an agent was lost meanwhile.
    fn reread_metadata(&mut self, using: &[bool]) -> Option<String> {
        let ifaces = &self.ifaces;
        let metas = std::thread::scope(|s| {
            let hs: Vec<_> = self
                .conns
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| using[*i] && !ifaces[*i].is_empty())
                .filter_map(|(i, c)| c.as_mut().map(|c| (i, s.spawn(move || c.metadata()))))
                .collect();
            hs.into_iter()
                .map(|(i, h)| (i, h.join()))
                .collect::<Vec<_>>()
        });
        let mut lost_one = None;
        for (i, m) in metas {
            match m {
                Ok(Ok(m)) => self.meta[i] = Some(m),
                Ok(Err(e)) => {
                    if lost(&e) {
                        self.drop_node(i);
                    }
                    lost_one.get_or_insert(e.to_string());
                }
                Err(_) => {
                    lost_one.get_or_insert("a metadata thread panicked".into());
                }
            }
        }
        lost_one
    }

    /// CPU and counters of every connected node, all at once.
    fn sample(&mut self) -> Vec<Option<Result<(CpuSample, Value), AgentError>>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = self
                .conns
                .iter_mut()
                .map(|c| {
                    c.as_mut().map(|c| {
                        s.spawn(move || {
                            let cpu = c.cpu()?;
                            let ctr = c.counters()?;
                            Ok((cpu, serde_json::to_value(ctr).unwrap_or(Value::Null)))
                        })
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(AgentError::Lost {
                                node: String::new(),
                                reason: "sampling thread panicked".into(),
                            })
                        })
                    })
                })
                .collect()
        })
    }

    /// One run: ensure, path-MTU check, warm-up, samples, senders, samples.
    /// `live`: where the senders' intervals go (campaigns with
    /// `interval_ms`; not the warm-up).
    pub(super) fn run(
        &mut self,
        c: &Campaign,
        s: &Scenario,
        seed: u64,
        length: RunLength,
        timeout: Duration,
        live: Live<'_>,
    ) -> Result<NodeRun, RunError> {
        let mut out = NodeRun {
            doc: None,
            error: None,
            observed: Value::Null,
            command: String::new(),
            refused: false,
            interrupted: false,
        };
        // An agent lost between runs (its link dropped during a pause) is
        // noticed here and reconnected by `ensure`, instead of failing a
        // run it is not part of.
        for (i, r) in self.sample().into_iter().enumerate() {
            if matches!(r, Some(Err(ref e)) if lost(e)) {
                self.drop_node(i);
            }
        }
        if let Some(e) = self.ensure(s)? {
            out.error = Some(e);
            return Ok(out);
        }
        // What the links are now, read back from the nodes that change
        // them: the run's metadata is what the run had, not what the node
        // had when it connected.
        let using = self.in_use(s)?;
        if let Some(e) = self.reread_metadata(&using) {
            out.error = Some(e);
            return Ok(out);
        }
        let v6 = s.settings.ip == 6;
        let pairs = self.pairs(s)?;
        // The path must be what the scenario says before anything is sent.
        let mut pmtu = BTreeMap::new();
        for &(si, ri, dest) in &pairs {
            let (sn, rn) = (self.nodes[si].name.clone(), self.nodes[ri].name.clone());
            let key = format!("{sn}->{rn}");
            let want = self
                .planned_pmtu
                .get(&(sn, rn, v6))
                .copied()
                .or(s.settings.link.mtu);
            // The first probe after a test-bed (re)build can go out while
            // IPv6 addresses are still tentative (duplicate address
            // detection) or neighbours unresolved, and nothing arrives:
            // probe again, up to PMTU_TRIES times, before calling the path
            // broken.
            let mut tries = 1;
            let probed = loop {
                let r = self.path_mtu(si, ri, dest);
                if !matches!(r, Ok(None)) || tries >= PMTU_TRIES {
                    break r;
                }
                tries += 1;
                std::thread::sleep(PMTU_RETRY);
            };
            match probed {
                Ok(m) => {
                    if let (Some(want), Some(got)) = (want, m) {
                        if want != got {
                            out.error = Some(format!(
                                "refused, not measured: path MTU {key} is {got}, the scenario says {want}"
                            ));
                            return Ok(out);
                        }
                    }
                    if m.is_none() {
                        out.error = Some(format!(
                            "refused, not measured: {key}: no path-MTU probe reached {dest} ({tries} tries over {:.1} s)",
                            (tries - 1) as f64 * PMTU_RETRY.as_secs_f64()
                        ));
                        return Ok(out);
                    }
                    pmtu.insert(key, m);
                }
                Err(e) => {
                    out.error = Some(e);
                    return Ok(out);
                }
            }
        }
        let mut warmup: Vec<String> = Vec::new();
        if c.warmup_s > 0.0 {
            // Same senders, not measured: queues, ARP/ND caches and CPU
            // frequency settle before the counters are read.
            let warm = RunLength::Duration {
                seconds: c.warmup_s,
            };
            let t = Duration::from_secs_f64(c.warmup_s * 1.5 + 30.0);
            let w = self.senders(c, s, &pairs, seed ^ 0x5eed, warm, t, None);
            if w.interrupted {
                out.interrupted = true;
                return Ok(out);
            }
            if !w.errors.is_empty() {
                out.refused = w.refused;
                out.error = Some(format!("warm-up: {}", w.errors.join("; ")));
                return Ok(out);
            }
            warmup = w
                .commands
                .into_iter()
                .map(|c| format!("warm-up {c}"))
                .collect();
        }
        let before = self.sample();
        let sent = self.senders(c, s, &pairs, seed, length, timeout, live);
        out.command = warmup
            .into_iter()
            .chain(sent.commands)
            .collect::<Vec<_>>()
            .join("\n");
        out.refused = sent.refused;
        if sent.interrupted {
            out.interrupted = true;
            return Ok(out);
        }
        let docs = sent.docs;
        let mut errors = sent.errors;
        let after = self.sample();
        let mut nodes_delta = wirebench_testbed::Counters::default();
        let mut cpu = serde_json::Map::new();
        let mut roles = serde_json::Map::new();
        let mut meta = serde_json::Map::new();
        let mut links = serde_json::Map::new();
        for (i, (b, a)) in before.into_iter().zip(after).enumerate() {
            // Idle nodes of other pairings are no part of this run.
            if !using[i] {
                continue;
            }
            let name = self.nodes[i].name.clone();
            roles.insert(name.clone(), json!(self.nodes[i].role.as_str()));
            if let Some(m) = &self.meta[i] {
                meta.insert(name.clone(), serde_json::to_value(m).unwrap_or(Value::Null));
            }
            match (b, a) {
                (Some(Ok((cb, kb))), Some(Ok((ca, ka)))) => {
                    if let (false, Some(m), Ok(qd)) = (
                        self.ifaces[i].is_empty(),
                        &self.meta[i],
                        serde_json::from_value(kb.clone()),
                    ) {
                        links.insert(name.clone(), link_states(&self.ifaces[i], m, &qd));
                    }
                    cpu.insert(
                        name.clone(),
                        serde_json::to_value(ca.delta(&cb)).unwrap_or(Value::Null),
                    );
                    let mut pb = wirebench_testbed::Counters::default();
                    let mut pa = wirebench_testbed::Counters::default();
                    if let (Ok(kb), Ok(ka)) =
                        (serde_json::from_value(kb), serde_json::from_value(ka))
                    {
                        pb.nodes.insert(name.clone(), kb);
                        pa.nodes.insert(name.clone(), ka);
                        let d = pa.delta(&pb);
                        nodes_delta.nodes.extend(d.nodes);
                    }
                }
                (Some(Err(e)), _) | (_, Some(Err(e))) => {
                    if lost(&e) {
                        self.drop_node(i);
                    }
                    // The cause first: the senders' complaints follow from it.
                    errors.insert(0, e.to_string());
                }
                _ => errors.push(format!("node {name}: agent lost before the run")),
            }
        }
        let sites = nodes_delta.drop_sites();
        out.observed = json!({
            "notes": std::mem::take(&mut self.notes),
            "nodes": nodes_delta.nodes,
            "drop_sites": sites,
            "cpu": cpu,
            "roles": roles,
            "path_mtu": pmtu,
            "metadata": meta,
            "links": links,
            "links_before": self.links_before,
        });
        if let (Some(name), Some(p)) = (&s.settings.pairing, self.pairing(s)?) {
            out.observed["pairing"] = json!({
                "name": name,
                "senders": p.senders,
                "receiver": p.receiver,
                "routers": p.routers,
            });
        }
        out.doc = merge_docs(docs);
        if !errors.is_empty() {
            out.error = Some(errors.join("; "));
        }
        Ok(out)
    }

    /// Starts every pair's sender at once and waits for all of them; with
    /// `live`, their relayed intervals go to the progress as they come.
    #[allow(clippy::too_many_arguments)]
    fn senders(
        &mut self,
        c: &Campaign,
        s: &Scenario,
        pairs: &[(usize, usize, IpAddr)],
        seed: u64,
        length: RunLength,
        timeout: Duration,
        live: Live<'_>,
    ) -> Sent {
        let mut out = Sent {
            docs: Vec::new(),
            errors: Vec::new(),
            commands: Vec::new(),
            refused: false,
            interrupted: false,
        };
        let stream = live.is_some() && c.interval_ms.is_some();
        let mut started = Vec::new();
        for &(si, _, dest) in pairs {
            let mut args = send_args(c, s, dest, NODE_PORT, seed, length);
            // The agent adds the subcommand itself.
            args.remove(0);
            out.commands.push(format!(
                "{}: wirebench send {} --json=FILE",
                self.nodes[si].name,
                args.join(" ")
            ));
            let Some(conn) = self.conns[si].as_mut() else {
                out.errors
                    .push(format!("node {}: agent not connected", self.nodes[si].name));
                break;
            };
            let relays = conn.hello.streams_intervals();
            let r = if stream && relays {
                conn.start_streaming(&args)
            } else {
                conn.start(Role::Sender, &args, None)
            };
            if stream && !relays && self.no_stream_noted.insert(si) {
                if let Some((_, p)) = live {
                    p.note(&format!(
                        "node {}: its agent (wirebench {}, agent protocol {} revision {}) does not relay interval lines, so its runs show no live figures; they are measured and stored as usual (wirebench {} there relays them)",
                        self.nodes[si].name,
                        conn.hello.tool_version,
                        conn.hello.version,
                        conn.hello.revision,
                        env!("CARGO_PKG_VERSION"),
                    ));
                }
            }
            match r {
                Ok((h, _)) => started.push((si, h)),
                Err(e) => {
                    if lost(&e) {
                        self.drop_node(si);
                    }
                    out.errors.push(e.to_string());
                    break;
                }
            }
        }
        if !out.errors.is_empty() {
            // One sender could not start: the others are not the run either.
            for (si, h) in started {
                if let Some(conn) = self.conns[si].as_mut() {
                    let _ = conn.stop(h);
                }
            }
            return out;
        }
        let mut follow = live.map(|(label, p)| Follower::new(p, label, started.len()));
        // Several senders are waited for in turn in short slices, so every
        // node's intervals arrive while the run goes on (a wait returns
        // early when intervals came).
        let slice = Duration::from_millis(if started.len() > 1 { 50 } else { 200 });
        let t0 = Instant::now();
        let mut pending: Vec<(usize, usize, u32)> = started
            .into_iter()
            .enumerate()
            .map(|(k, (si, h))| (k, si, h))
            .collect();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for (k, si, h) in pending {
                let ended = |f: &mut Option<Follower>| {
                    if let Some(f) = f.as_mut() {
                        f.end(k);
                    }
                };
                let Some(conn) = self.conns[si].as_mut() else {
                    ended(&mut follow);
                    continue;
                };
                if stop_requested() {
                    let _ = conn.stop(h);
                    out.interrupted = true;
                    ended(&mut follow);
                    continue;
                }
                let over = t0.elapsed() > timeout;
                let r = if over {
                    conn.stop(h)
                } else {
                    conn.wait(h, slice)
                };
                match r {
                    Ok(p) => {
                        if let Some(f) = follow.as_mut() {
                            for v in &p.stream {
                                f.feed(k, v);
                            }
                        }
                        if p.running {
                            still.push((k, si, h));
                            continue;
                        }
                        ended(&mut follow);
                        let name = &self.nodes[si].name;
                        if over {
                            out.errors.push(format!(
                                "{name}: killed after {:.0} s (run_timeout_s): {}",
                                timeout.as_secs_f64(),
                                p.stderr
                            ));
                        } else if p.code != Some(0) {
                            out.refused |= p.code == Some(2);
                            out.errors.push(format!(
                                "{name}: sender exited with {}: {}",
                                p.code.map(|c| format!("status {c}")).unwrap_or_else(|| {
                                    match p.signal {
                                        Some(sig) => wirebench_agent::client::signal_name(sig),
                                        None => "an unknown status".into(),
                                    }
                                }),
                                p.stderr
                            ));
                        }
                        match p.result {
                            Some(d) => out.docs.push(d),
                            None if p.code == Some(0) => out
                                .errors
                                .push(format!("{name}: the sender wrote no result document")),
                            None => {}
                        }
                    }
                    Err(e) => {
                        ended(&mut follow);
                        if lost(&e) {
                            self.drop_node(si);
                        }
                        out.errors.push(e.to_string());
                    }
                }
            }
            pending = still;
        }
        if let Some(f) = follow {
            f.finish();
        }
        out
    }

    /// Path MTU from sender `si` to receiver `ri` at `dest`, measured by the
    /// two agents. Err: the reason the run fails (an agent lost).
    fn path_mtu(&mut self, si: usize, ri: usize, dest: IpAddr) -> Result<Option<u32>, String> {
        let port = {
            let Some(r) = self.conns[ri].as_mut() else {
                return Err(format!("node {}: agent not connected", self.nodes[ri].name));
            };
            match r.pmtu_listen(dest) {
                Ok(p) => p,
                Err(e) => {
                    if lost(&e) {
                        self.drop_node(ri);
                    }
                    return Err(e.to_string());
                }
            }
        };
        let m = match self.conns[si].as_mut() {
            Some(snd) => snd.pmtu_probe(dest, port),
            None => return Err(format!("node {}: agent not connected", self.nodes[si].name)),
        };
        if let Some(r) = self.conns[ri].as_mut() {
            let _ = r.pmtu_close(port);
        }
        m.map_err(|e| {
            if lost(&e) {
                self.drop_node(si);
            }
            e.to_string()
        })
    }

    /// `run --check`: connects every agent (which refuses what would touch
    /// the management path), and describes per node what `apply_*` would
    /// touch with its current MTU, root qdisc and offloads, the clock's
    /// sync state and the versions; then the path MTU of every pair. Sets
    /// nothing (the probe only forgets cached path MTUs).
    pub(super) fn check(&mut self) -> Result<String, RunError> {
        self.connect()?;
        let mut out = String::new();
        let mut refused = Vec::new();
        for i in 0..self.nodes.len() {
            let n = self.nodes[i].clone();
            let (Some(c), Some(m)) = (self.conns[i].as_mut(), self.meta[i].as_ref()) else {
                continue;
            };
            let qdiscs = c.counters().map_err(|e| RunError::Agent(e.to_string()))?;
            let h = &c.hello;
            out.push_str(&format!(
                "node {} ({}, {}): host {}, wirebench {}, agent protocol {} revision {}, {}\n",
                n.name,
                n.role.as_str(),
                c.channel().describe(),
                h.hostname,
                h.tool_version,
                h.version,
                h.revision,
                if h.net_admin {
                    "may change links"
                } else {
                    "cannot change links (no CAP_NET_ADMIN)"
                }
            ));
            if !h.mgmt.is_empty() {
                out.push_str(&format!(
                    "  management path (never changed): {}\n",
                    h.mgmt.join(", ")
                ));
            }
            for r in &h.recovered {
                out.push_str(&format!("  put back from a dead agent's journal: {r}\n"));
            }
            let clock = &m.clock;
            let sync = match (&clock.chrony, clock.timesyncd) {
                (Some(t), _) => format!("chrony: {t}"),
                (None, Some(true)) => "systemd-timesyncd synchronised".into(),
                (None, Some(false)) => "systemd-timesyncd NOT synchronised".into(),
                (None, None) => "no chrony or systemd-timesyncd found".into(),
            };
            let ptp = if clock.ptp_daemons.is_empty() {
                String::new()
            } else {
                format!("; PTP: {}", clock.ptp_daemons.join(", "))
            };
            out.push_str(&format!("  clock: {sync}{ptp}\n"));
            for (on, what) in [
                (n.apply_mtu, "apply_mtu"),
                (n.apply_offloads, "apply_offloads"),
                (n.apply_link_rate, "apply_link_rate"),
            ] {
                if !on {
                    continue;
                }
                out.push_str(&format!("  {what} would touch:\n"));
                for f in &self.ifaces[i] {
                    let Some(im) = m.interfaces.iter().find(|x| &x.name == f) else {
                        out.push_str(&format!("    {f}: not on this host\n"));
                        refused.push(format!("node {}: no interface {f}", n.name));
                        continue;
                    };
                    let offl: Vec<String> = [
                        "tcp-segmentation-offload",
                        "generic-segmentation-offload",
                        "generic-receive-offload",
                    ]
                    .iter()
                    .zip(["tso", "gso", "gro"])
                    .filter_map(|(long, short)| {
                        im.offloads
                            .get(*long)
                            .map(|on| format!("{short} {}", if *on { "on" } else { "off" }))
                    })
                    .collect();
                    out.push_str(&format!(
                        "    {f}: mtu {}, root qdisc {}, {}\n",
                        im.mtu,
                        qdiscs
                            .get(f)
                            .map(|q| q.qdisc.kind.as_str())
                            .filter(|k| !k.is_empty())
                            .unwrap_or("unknown"),
                        if offl.is_empty() {
                            "offloads unknown".to_string()
                        } else {
                            offl.join(" ")
                        }
                    ));
                }
                if !h.net_admin {
                    refused.push(format!(
                        "node {}: {what} needs CAP_NET_ADMIN, which its agent lacks",
                        n.name
                    ));
                }
            }
        }
        // Every sender → receiver pair a run can use: the pairings', or
        // each sender's `to`.
        let mut routes: BTreeSet<(usize, usize)> = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.role != NodeRole::Sender {
                continue;
            }
            if self.pairings.is_empty() {
                routes.extend(n.to.as_deref().and_then(|t| self.index(t)).map(|r| (i, r)));
            }
            for p in self
                .pairings
                .values()
                .filter(|p| p.senders.contains(&n.name))
            {
                routes.extend(self.index(&p.receiver).map(|r| (i, r)));
            }
        }
        for (i, ri) in routes {
            let n = self.nodes[i].clone();
            for dest in [self.nodes[ri].ipv4, self.nodes[ri].ipv6]
                .into_iter()
                .flatten()
            {
                let key = format!("{}->{}", n.name, self.nodes[ri].name);
                match self.path_mtu(i, ri, dest) {
                    Ok(Some(m)) => out.push_str(&format!("path MTU {key} ({dest}): {m}\n")),
                    Ok(None) => {
                        out.push_str(&format!("path MTU {key} ({dest}): no probe arrived\n"));
                        refused.push(format!("{key}: no path-MTU probe reached {dest}"));
                    }
                    Err(e) => return Err(RunError::Agent(e)),
                }
            }
        }
        if refused.is_empty() {
            out.push_str("nothing would be refused\n");
        } else {
            out.push_str("would be refused:\n");
            for r in refused {
                out.push_str(&format!("  {r}\n"));
            }
        }
        Ok(out)
    }

    /// Stops the receivers and ends every session (each agent restores
    /// what it changed), all at once. Err names what could not be restored.
    pub(super) fn teardown(&mut self) -> Result<(), RunError> {
        for (i, h) in std::mem::take(&mut self.receivers) {
            if let Some(c) = self.conns[i].as_mut() {
                let _ = c.stop(h);
            }
        }
        let conns: Vec<AgentConn> = self.conns.iter_mut().filter_map(Option::take).collect();
        let res = std::thread::scope(|s| {
            let hs: Vec<_> = conns
                .into_iter()
                .map(|c| s.spawn(move || c.bye()))
                .collect();
            hs.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        });
        let mut problems = Vec::new();
        for r in res {
            match r {
                Ok(Ok(actions)) => {
                    problems.extend(actions.into_iter().filter(|a| a.starts_with("FAILED")))
                }
                Ok(Err(e)) => problems.push(e.to_string()),
                Err(_) => problems.push("a teardown thread panicked".into()),
            }
        }
        self.applied.iter_mut().for_each(|a| *a = None);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(RunError::Agent(format!(
                "ending the agent sessions: {}",
                problems.join("; ")
            )))
        }
    }
}

/// Several pairs make one run: their flows side by side in the first
/// document (throughputs then add up in the analysis like `--flows`).
fn merge_docs(mut docs: Vec<Value>) -> Option<Value> {
    if docs.is_empty() {
        return None;
    }
    let mut first = docs.remove(0);
    for d in docs {
        if let (Some(f), Some(more)) = (
            first.get_mut("flows").and_then(Value::as_array_mut),
            d.get("flows").and_then(Value::as_array),
        ) {
            f.extend(more.iter().cloned());
        }
    }
    Some(first)
}

/// What `ifaces` have now: MTU and offloads from the metadata, the root
/// qdisc from the counters (`iface → {mtu, qdisc, offloads}`).
fn link_states(
    ifaces: &[String],
    meta: &HostMeta,
    qdiscs: &BTreeMap<String, wirebench_testbed::IfaceCounters>,
) -> Value {
    let mut out = serde_json::Map::new();
    for f in ifaces {
        let Some(im) = meta.interfaces.iter().find(|x| &x.name == f) else {
            out.insert(f.clone(), json!({ "missing": true }));
            continue;
        };
        let offloads: serde_json::Map<String, Value> = OFFLOADS
            .iter()
            .filter_map(|(long, short)| {
                im.offloads
                    .get(*long)
                    .map(|on| (short.to_string(), json!(on)))
            })
            .collect();
        out.insert(
            f.clone(),
            json!({
                "mtu": im.mtu,
                "qdisc": qdiscs.get(f).map(|q| q.qdisc.kind.as_str()).unwrap_or(""),
                "offloads": offloads,
            }),
        );
    }
    Value::Object(out)
}

/// The offloads `apply_offloads` switches: `ethtool -k` name, short name.
const OFFLOADS: [(&str, &str); 3] = [
    ("tcp-segmentation-offload", "tso"),
    ("generic-segmentation-offload", "gso"),
    ("generic-receive-offload", "gro"),
];

/// `eth0 mtu 9000, qdisc tbf, tso on gso on gro on; eth1 ...` of
/// [`link_states`].
pub fn links_text(states: &Value) -> String {
    let Some(m) = states.as_object() else {
        return String::new();
    };
    m.iter()
        .map(|(f, v)| {
            if v.get("missing").is_some() {
                return format!("{f} missing");
            }
            let mut t = format!(
                "{f} mtu {}, qdisc {}",
                v["mtu"],
                v["qdisc"]
                    .as_str()
                    .filter(|q| !q.is_empty())
                    .unwrap_or("unknown")
            );
            if let Some(o) = v["offloads"].as_object().filter(|o| !o.is_empty()) {
                let on: Vec<String> = o
                    .iter()
                    .map(|(k, b)| {
                        format!(
                            "{k} {}",
                            if b.as_bool() == Some(true) {
                                "on"
                            } else {
                                "off"
                            }
                        )
                    })
                    .collect();
                t.push_str(&format!(", {}", on.join(" ")));
            }
            t
        })
        .collect::<Vec<_>>()
        .join("; ")
}
